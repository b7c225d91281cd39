"""Storage failures as clear Svit errors that name the problem.

RocksDB and the operating system describe a failure with the file it happened to (an
absolute host path) and library wording. Neither belongs in a Svit error: a store error
can reach a model through a tool result, an event or a log line shipped elsewhere. So
every raw storage exception is classified into a small set of reasons, each with a fixed
description, and only that description and the exception's kind are kept. The raw
exception is never chained to the Svit error (``from None``).

Reasons (``PersistenceUnavailable.reason``):

* ``in_use``: another process (or another open handle) holds the store's lock.
* ``read_only``: the store or its device refuses writes (permission, read-only mount).
* ``full``: no space left on the device (or the quota is exhausted).
* ``damaged``: RocksDB found corruption (a bad checksum, a truncated or foreign file).
* ``not_a_directory``: the store path names something other than a directory.
* ``io_error``: the device reported an I/O error.
* ``unknown``: anything else (only the exception's class name is shown).

``closed`` and ``terminal`` are set by the store itself (closed object; a failed synced
write that made the store refuse every later operation until it is reopened).
"""

from __future__ import annotations

import errno
import re

from ..errors import PersistenceUnavailable

__all__ = [
    "DESCRIPTIONS",
    "classify",
    "describe",
    "storage_error",
]

DESCRIPTIONS = {
    "in_use": "store is in use by another process or another open handle (its lock is held)",
    "read_only": "store is read-only",
    "full": "no space left on the device",
    "damaged": "store is damaged",
    "not_a_directory": "store path is not a directory",
    "io_error": "the device reported an input/output error",
}

_READ_ONLY_ERRNOS = {errno.EACCES: "permission denied", errno.EPERM: "operation not permitted", errno.EROFS: "read-only file system"}
_FULL_ERRNOS = {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)}
_NOT_DIRECTORY_ERRNOS = {errno.ENOTDIR, errno.EEXIST}
_PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")


def _kind(exc: BaseException) -> str:
    name = type(exc).__name__
    return name if _PLAIN_NAME.fullmatch(name) else "error"


def classify(exc: BaseException) -> tuple[str, str]:
    """``(reason, description)`` of a raw storage exception; the description holds no host text."""
    if isinstance(exc, OSError) and exc.errno is not None:
        code = exc.errno
        if code in _READ_ONLY_ERRNOS:
            return "read_only", f"{DESCRIPTIONS['read_only']} ({_READ_ONLY_ERRNOS[code]})"
        if code in _FULL_ERRNOS:
            return "full", DESCRIPTIONS["full"]
        if code in _NOT_DIRECTORY_ERRNOS:
            return "not_a_directory", DESCRIPTIONS["not_a_directory"]
        if code == errno.EIO:
            return "io_error", DESCRIPTIONS["io_error"]
        if code == errno.ENOENT:
            return "io_error", "a store file or directory is missing"
        if code in (errno.EMFILE, errno.ENFILE):
            return "io_error", "too many open files"
        return "io_error", f"storage operation failed ({errno.errorcode.get(code, 'errno ' + str(code))})"
    text = str(exc)
    lowered = text.lower()
    if "lock file" in lowered or "lock hold" in lowered or "no locks available" in lowered:
        return "in_use", DESCRIPTIONS["in_use"]
    if lowered.startswith("corruption") or "checksum mismatch" in lowered or "corrupt" in lowered:
        return "damaged", f"{DESCRIPTIONS['damaged']} (RocksDB reports corruption; restore it from a copy or an archive)"
    if "read-only file system" in lowered:
        return "read_only", f"{DESCRIPTIONS['read_only']} (read-only file system)"
    if "permission denied" in lowered:
        return "read_only", f"{DESCRIPTIONS['read_only']} (permission denied)"
    if "no space left" in lowered or "disk quota" in lowered:
        return "full", DESCRIPTIONS["full"]
    if "input/output error" in lowered:
        return "io_error", DESCRIPTIONS["io_error"]
    if lowered.startswith("io error"):
        return "io_error", f"storage I/O failed ({_kind(exc)})"
    return "unknown", f"unexpected storage failure ({_kind(exc)})"


def describe(exc: BaseException) -> str:
    """The host-free description of a raw storage exception."""
    return classify(exc)[1]


def storage_error(exc: BaseException, doing: str) -> PersistenceUnavailable:
    """A :class:`PersistenceUnavailable` for ``exc`` while ``doing`` (e.g. ``"cannot open store"``)."""
    reason, description = classify(exc)
    return PersistenceUnavailable(f"{doing}: {description}", reason=reason)
