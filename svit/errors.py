"""The one error hierarchy of the Svit runtime.

Every failure a host can see is a :class:`SvitError` with a stable ``code`` (the
reference's failure codes) and a message that starts with the reference's display
prefix. Messages are sanitized: capped at 1,024 bytes and never carrying a host path
or a Python traceback.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

if TYPE_CHECKING:
    from svit.lisp.errors import Frame

__all__ = [
    "ALL_ERRORS",
    "DIAGNOSTIC_CAP",
    "ChildUnavailable",
    "ControlUnavailable",
    "ExecutionLimitExceeded",
    "HookCancelled",
    "InboxConflict",
    "InternalError",
    "InvalidControlConfiguration",
    "InvalidControlId",
    "InvalidLimits",
    "InvalidMount",
    "InvalidPath",
    "InvalidPersistence",
    "InvalidScriptName",
    "InvalidSnapshot",
    "InvalidValue",
    "MountDenied",
    "MountUnavailable",
    "PersistenceAlreadyExists",
    "PersistenceConflict",
    "PersistenceNotFound",
    "PersistenceReferenced",
    "PersistenceUnavailable",
    "PortContextUnavailable",
    "ReadOnlyEvaluation",
    "ResourceLimitExceeded",
    "ScriptFailed",
    "ScriptNotFound",
    "SvitError",
    "ThreadHistoryBoundary",
    "ThreadHistoryPinned",
    "ThreadHistoryUncompacted",
    "one_line",
    "sanitize",
]

DIAGNOSTIC_CAP = 1024


def sanitize(text: str, cap: int = DIAGNOSTIC_CAP) -> str:
    """Cap a diagnostic at ``cap`` UTF-8 bytes (then an ellipsis), cut on a char boundary."""
    raw = text.encode("utf-8", "surrogatepass")
    if len(raw) <= cap:
        return text
    return raw[:cap].decode("utf-8", errors="ignore") + "…"


def one_line(text: str, cap: int = DIAGNOSTIC_CAP) -> str:
    """A diagnostic for an answer: on one line, capped as :func:`sanitize` caps, and always
    encodable as UTF-8 (a lone surrogate it repeats from a request becomes ``?``)."""
    return sanitize(text.replace("\n", " "), cap).encode("utf-8", "replace").decode("utf-8")


class SvitError(Exception):
    """Base of every Svit failure; ``code`` is machine-readable, ``detail`` the specific text."""

    code = "svit_error"
    prefix = "svit error"

    def __init__(self, detail: str = "") -> None:
        self.detail = sanitize(str(detail))
        super().__init__(self.message)

    @property
    def message(self) -> str:
        return f"{self.prefix}: {self.detail}" if self.detail else self.prefix

    def __str__(self) -> str:
        return self.message


class InvalidScriptName(SvitError):
    code, prefix = "invalid_script_name", "invalid script name"


class ScriptNotFound(SvitError):
    code, prefix = "script_not_found", "script not found"


class InvalidPath(SvitError):
    code, prefix = "invalid_path", "invalid state path"


class InvalidValue(SvitError):
    code, prefix = "invalid_value", "invalid persistent value"


class InvalidMount(SvitError):
    code, prefix = "invalid_mount", "invalid mount"


class MountUnavailable(SvitError):
    code, prefix = "mount_unavailable", "mount provider is not attached"


class MountDenied(SvitError):
    code, prefix = "mount_denied", "mount access denied"


class InboxConflict(SvitError):
    code, prefix = "inbox_conflict", "inbox head changed before acknowledgement"


class ChildUnavailable(SvitError):
    code, prefix = "child_unavailable", "spawned child process is unavailable"


class PortContextUnavailable(SvitError):
    code, prefix = "port_context_unavailable", "port process context is unavailable"


class InvalidLimits(SvitError):
    code, prefix = "invalid_limits", "invalid process limits"


class ExecutionLimitExceeded(SvitError):
    code, prefix = "execution_limit_exceeded", "activation execution limit exceeded"


class ResourceLimitExceeded(SvitError):
    """A named resource ran out; ``limit`` is the reference's name (``"call stack"``, ...)."""

    code, prefix = "resource_limit_exceeded", "activation resource limit exceeded"

    def __init__(self, limit: str) -> None:
        self.limit = limit
        super().__init__(limit)


class HookCancelled(SvitError):
    code, prefix = "hook_cancelled", "activation cancelled by hook"


class ScriptFailed(SvitError):
    """A script failed. When the failure came from Svit Lisp, ``stack`` is its call stack
    (outermost call first; each frame has ``function`` and ``line``) and ``kind`` the Lisp
    error's kind (``"runtime error"``, ``"compile error"``, ``"syntax error"``, ...)."""

    code, prefix = "script_failed", "script failed"

    def __init__(self, detail: str = "", *, stack: Iterable[Frame] = (), kind: str = "error") -> None:
        super().__init__(detail)
        self.stack: list[Frame] = list(stack)
        self.kind = kind


class ReadOnlyEvaluation(SvitError):
    """A read-only evaluation (``evaluate``) tried to change something: a ``write`` or
    ``remove`` (of ``/memory``, ``/lib`` or a mount), a ``send!``, or a ``port-call``. The
    detail names the operation and its target (``write /memory/x``). Nothing was changed
    or called; run the source with ``exec_inline`` to commit it. No safe helper captures it."""

    code, prefix = "read_only_evaluation", "read-only evaluation refused"


class InternalError(SvitError):
    """The host's own code failed (a bug in a function Svit installs for scripts); the
    exception it raised is ``__cause__``. Never reported as the script's error."""

    code, prefix = "internal_error", "internal error"


class InvalidSnapshot(SvitError):
    code, prefix = "invalid_snapshot", "invalid snapshot"


class InvalidControlId(SvitError):
    code, prefix = "invalid_control_id", "invalid control identifier"


class InvalidControlConfiguration(SvitError):
    code, prefix = "invalid_control_configuration", "invalid control configuration"


class ControlUnavailable(SvitError):
    code, prefix = "control_unavailable", "process controller unavailable"


class PersistenceNotFound(SvitError):
    code, prefix = "persistence_not_found", "persisted process not found"


class PersistenceAlreadyExists(SvitError):
    code, prefix = "persistence_already_exists", "persisted process already exists"


class PersistenceConflict(SvitError):
    code, prefix = "persistence_conflict", "persisted process head conflict"


class PersistenceReferenced(SvitError):
    code, prefix = "persistence_referenced", "persisted process history is referenced by a fork"


class InvalidPersistence(SvitError):
    code, prefix = "invalid_persistence", "invalid persisted process"


class PersistenceUnavailable(SvitError):
    """The store cannot serve the operation; ``reason`` says why in one word (``in_use``,
    ``read_only``, ``full``, ``damaged``, ``not_a_directory``, ``io_error``, ``closed``,
    ``terminal``, ``unknown``; see :mod:`svit.store.failures`)."""

    code, prefix = "persistence_unavailable", "persistence store unavailable"

    def __init__(self, detail: str = "", reason: str = "unknown") -> None:
        self.reason = reason
        super().__init__(detail)


class ThreadHistoryBoundary(SvitError):
    """A thread-history boundary that is not a sequence of the partition (not an
    integer, below 1, or beyond the last appended event)."""

    code, prefix = "thread_history_boundary", "invalid thread history boundary"


class ThreadHistoryUncompacted(SvitError):
    """A cut past the latest compaction checkpoint would lose context no summary holds."""

    code, prefix = "thread_history_uncompacted", "thread history is not compacted through the boundary"


class ThreadHistoryPinned(SvitError):
    """A living durable fork reads that prefix of the thread; cut or remove the fork first."""

    code, prefix = "thread_history_pinned", "thread history is inherited by a fork"


ALL_ERRORS: tuple[type[SvitError], ...] = tuple(
    cls for cls in list(globals().values()) if isinstance(cls, type) and issubclass(cls, SvitError)
)
