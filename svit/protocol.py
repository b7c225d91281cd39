"""``ProcessLike``: the operations a process, a durable handle and a Svit share.

:class:`~svit.process.Process`, :class:`~svit.store.DurableProcess` and
:class:`~svit.loop.Svit` each implement every member below explicitly, with the same
arguments, result types and side effects, so code written against one works with the
others. ``snapshot()`` returns the process snapshot's bytes and writes nothing anywhere;
a durable handle records a stored snapshot with its own ``store_snapshot()``.

:class:`HostedProcess` adds what the reasoning loop needs from the process it runs
over (the inbox, ``/thread``, the port catalog and where reasoning events are kept):
``Process`` and ``DurableProcess`` implement it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, Self, runtime_checkable

if TYPE_CHECKING:
    from ._ports import Ports
    from .activation import Activation
    from .limits import Limits
    from .loop.events import EventLog
    from .mounts import Mount
    from .process import Change, CommitReceipt, Process

__all__ = ["HostedProcess", "ProcessLike"]


@runtime_checkable
class ProcessLike(Protocol):
    """One addressable process tree: observe it, change it, run scripts, snapshot and fork it."""

    @property
    def address(self) -> str:
        """The process address (``svit://...``)."""
        ...

    @property
    def version(self) -> int:
        """The committed version (0 for a new process; one more per commit)."""
        ...

    @property
    def root_hash(self) -> str:
        """The committed root's content hash (lowercase hex BLAKE3)."""
        ...

    @property
    def limits(self) -> Limits:
        """The process's limits."""
        ...

    def node_hash(self, path: str) -> str | None:
        """The content hash of a committed node (None when absent or inside a mount)."""
        ...

    def read(self, path: str) -> Any:
        """The committed value at ``path`` (a fresh copy), a mount's value, or None."""
        ...

    def read_versioned(self, path: str) -> tuple[Any, int]:
        """``read(path)`` together with the version it was read at."""
        ...

    def discover(self, path: str) -> list[str]:
        """The child names of a container (or a mount directory)."""
        ...

    def stat(self, path: str) -> dict[str, Any] | None:
        """The facts record of ``path``, or None when absent."""
        ...

    def write(self, path: str, value: Any) -> Change:
        """Write below ``/memory``, a script at ``/lib/<name>``, or into a writable mount."""
        ...

    def remove(self, path: str) -> Change:
        """Remove below ``/memory``, a script at ``/lib/<name>``, or inside a writable mount."""
        ...

    def exec(self, path: str, input: Any = None, *, dry_run: bool = False,
             receipt: CommitReceipt | None = None) -> Activation:
        """Run ``/lib/<name>``'s ``main(input)``: one committed version, or nothing (a
        ``receipt``, a control-protocol receipt, is written with that commit by a store)."""
        ...

    def exec_inline(self, source: str, input: Any = None, *, dry_run: bool = False) -> Activation:
        """Run one-off source that is never stored: one committed version, or nothing."""
        ...

    def evaluate(self, source: str, input: Any = None) -> Activation:
        """Run one-off source read-only: its output and logs, nothing committed; a write,
        remove, ``send!`` or port call inside it fails with ``ReadOnlyEvaluation``."""
        ...

    def attach_mount(self, name: str, mount: Mount) -> Change | None:
        """Attach a mount provider; commits its descriptor only when it differs."""
        ...

    def detach_mount(self, name: str) -> None:
        """Stop using the provider of ``/mounts/<name>`` (no commit)."""
        ...

    def message_intents(self) -> list[dict[str, Any]]:
        """The committed message intents at ``/system/outbox``."""
        ...

    def snapshot(self) -> bytes:
        """The process snapshot's bytes; writes nothing."""
        ...

    def fork(self, child_address: str) -> Self:
        """A new process of the same kind at ``child_address`` sharing the committed tree."""
        ...

    def close(self) -> None:
        """Release every attached mount provider (the committed tree is untouched)."""
        ...


@runtime_checkable
class HostedProcess(ProcessLike, Protocol):
    """A process a reasoning loop runs over: its inbox, ``/thread``, ports and event log."""

    def inbox_front(self) -> Any:
        """The committed head of ``/inbox`` (None when empty)."""
        ...

    def enqueue_inbox(self, value: Any) -> Change:
        """Append ``value`` to ``/inbox`` (one version)."""
        ...

    def acknowledge_inbox(self, expected: Any) -> Change:
        """Remove the inbox head only if it equals ``expected`` (one version)."""
        ...

    def exec_inbox_item(self, path: str, item: Any) -> Activation:
        """Run ``/lib/<name>``'s ``main(item)`` for the inbox head ``item`` and remove that
        head in the same commit (``InboxConflict`` when the head is not ``item``)."""
        ...

    def replace_thread_state(self, value: Any) -> Change:
        """Replace ``/thread`` (one version)."""
        ...

    def initialize_thread_state(self, value: Any) -> Change:
        """Set ``/thread`` while it is still null (one version)."""
        ...

    def replace_ports(self, ports: Ports | None) -> Change | None:
        """Attach a port registry and commit its catalog when it differs."""
        ...

    def thread_log(self) -> EventLog | None:
        """Where this process's reasoning events are kept (None: nowhere of its own)."""
        ...

    def in_memory(self) -> Process:
        """The in-memory process holding the committed state (itself for a Process)."""
        ...
