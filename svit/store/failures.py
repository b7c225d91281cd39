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
* ``io_error``: the device reported an I/O error; when RocksDB's text ends with the C
  library's wording for an errno, that errno is named (``EBADF: bad file descriptor``).
* ``unknown``: anything else (only the exception's class name and, for RocksDB, the kind
  its status names, such as ``invalid argument``, are shown).

``closed`` and ``terminal`` are set by the store itself (closed object; a failed synced
write that made the store refuse every later operation until it is reopened).
"""

from __future__ import annotations

import errno
import os
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
    "full": "no space left on the device: the disk or its quota is full",
    "damaged": "store is damaged",
    "not_a_directory": "store path is not a directory",
    "io_error": "the device reported an input/output error",
}

_READ_ONLY_ERRNOS = {errno.EACCES: "permission denied", errno.EPERM: "operation not permitted", errno.EROFS: "read-only file system"}
_FULL_ERRNOS = {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)}
_NOT_DIRECTORY_ERRNOS = {errno.ENOTDIR, errno.EEXIST}
_PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")

#: The kinds RocksDB's ``Status::ToString`` starts a message with (a fixed vocabulary, so
#: naming the kind cannot leak host text). Longest first, so a prefix never shadows another.
_ROCKSDB_KINDS = sorted(
    (
        "NotFound", "Corruption", "Not implemented", "Invalid argument", "IO error",
        "Merge in progress", "Result incomplete", "Shutdown in progress", "Operation timed out",
        "Operation aborted", "Resource busy", "Operation expired", "Operation failed. Try again.",
        "Compaction too large", "Column family dropped",
    ),
    key=len,
    reverse=True,
)


def _errno_texts() -> list[tuple[str, int]]:
    """``(strerror text, errno)`` for every errno this platform names, longest text first.

    RocksDB ends an I/O error with the C library's ``strerror`` of the failing call; the
    texts come from a fixed table, so recognising one keeps the description host-free.
    """
    texts: dict[str, int] = {}
    for code in sorted(errno.errorcode):
        try:
            text = os.strerror(code)
        except ValueError:
            continue
        if text and not text.startswith("Unknown error"):
            texts.setdefault(text.lower(), code)
    return sorted(texts.items(), key=lambda item: -len(item[0]))


_ERRNO_TEXTS = _errno_texts()


def _kind(exc: BaseException) -> str:
    name = type(exc).__name__
    return name if _PLAIN_NAME.fullmatch(name) else "error"


def _classify_errno(code: int) -> tuple[str, str]:
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
    return "io_error", f"storage operation failed ({_errno_phrase(code)})"


def _errno_phrase(code: int) -> str:
    name = errno.errorcode.get(code, f"errno {code}")
    try:
        return f"{name}: {os.strerror(code).lower()}"
    except ValueError:
        return name


def _trailing_errno(lowered: str) -> int | None:
    """The errno whose strerror text ends ``lowered`` or one of its ``"; "``-joined parts
    (rocksdict joins two failed steps of a close that way)."""
    for part in lowered.split("; "):
        for errno_text, code in _ERRNO_TEXTS:
            if part.endswith(errno_text):
                return code
    return None


def _rocksdb_kind(lowered: str) -> str | None:
    for kind in _ROCKSDB_KINDS:
        if lowered.startswith(kind.lower()):
            return kind.rstrip(".").lower()
    return None


def classify(exc: BaseException) -> tuple[str, str]:
    """``(reason, description)`` of a raw storage exception; the description holds no host text."""
    if isinstance(exc, OSError) and exc.errno is not None:
        return _classify_errno(exc.errno)
    text = str(exc)
    lowered = text.lower()
    if "lock file" in lowered or "lock hold" in lowered or "no locks available" in lowered:
        return "in_use", DESCRIPTIONS["in_use"]
    if lowered.startswith("corruption") or "checksum mismatch" in lowered or "corrupt" in lowered:
        return "damaged", f"{DESCRIPTIONS['damaged']} (RocksDB reports corruption; restore it from a copy or an archive)"
    if "no space left" in lowered or "disk quota" in lowered or "space limit reached" in lowered:
        return "full", DESCRIPTIONS["full"]
    kind = _rocksdb_kind(lowered)
    if kind == "io error":
        # RocksDB's I/O errors end with the failing call's strerror text: name that errno.
        code = _trailing_errno(lowered)
        if code is not None:
            return _classify_errno(code)
        return "io_error", "storage I/O failed (RocksDB reports an I/O error without naming it)"
    if "read-only file system" in lowered:
        return "read_only", f"{DESCRIPTIONS['read_only']} (read-only file system)"
    if "permission denied" in lowered:
        return "read_only", f"{DESCRIPTIONS['read_only']} (permission denied)"
    if "input/output error" in lowered:
        return "io_error", DESCRIPTIONS["io_error"]
    if kind is not None:
        return "unknown", f"unexpected storage failure ({_kind(exc)}, RocksDB status {kind!r})"
    return "unknown", f"unexpected storage failure ({_kind(exc)})"


def describe(exc: BaseException) -> str:
    """The host-free description of a raw storage exception."""
    return classify(exc)[1]


def storage_error(exc: BaseException, doing: str) -> PersistenceUnavailable:
    """A :class:`PersistenceUnavailable` for ``exc`` while ``doing`` (e.g. ``"cannot open store"``)."""
    reason, description = classify(exc)
    return PersistenceUnavailable(f"{doing}: {description}", reason=reason)
