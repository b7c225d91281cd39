"""Process paths, names and addresses (reference §2.3, §7.4, §8.6).

A path is absolute and ``/``-separated; ``""`` and ``"/"`` are the root. Parsing turns
it into a tuple of segments, which is what the tree walks.
"""

from __future__ import annotations

import re

from .errors import InvalidMount, InvalidPath, InvalidScriptName, InvalidValue

__all__ = [
    "ADDRESS_PREFIX",
    "MAX_ADDRESS_BYTES",
    "Segments",
    "format_path",
    "is_within",
    "join",
    "lib_name",
    "memory_segments",
    "parse",
    "parsed_before",
    "split_mount",
    "validate_address",
    "validate_mount_name",
    "validate_script_name",
]

Segments = tuple[str, ...]

_SCRIPT_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,64}")
_MOUNT_NAME = re.compile(r"[A-Za-z0-9_\-]{1,64}")
_WHITESPACE = re.compile(r"\s")

ADDRESS_PREFIX = "svit://"
MAX_ADDRESS_BYTES = 256


#: Parsed paths by text: scripts name the same few paths on every activation. Bounded
#: in entries and in the length of a path kept; errors are never kept (each raises again).
_PARSED: dict[str, Segments] = {}
_PARSED_ENTRIES = 4096
_PARSED_TEXT = 256
#: ``parsed_before(text)``: the segments :func:`parse` kept for ``text``, or None (then
#: call :func:`parse`). A C call, for the guest's reads and writes to look paths up without
#: a call of parse.
parsed_before = _PARSED.get


def parse(path: str) -> Segments:
    """Split an absolute path into segments; every malformed form is ``InvalidPath``."""
    if type(path) is not str:
        raise InvalidPath("paths must be text")
    found = _PARSED.get(path)
    if found is not None:
        return found
    segments = _parse(path)
    if len(path) <= _PARSED_TEXT:
        if len(_PARSED) >= _PARSED_ENTRIES:
            _PARSED.clear()
        _PARSED[path] = segments
    return segments


def _parse(path: str) -> Segments:
    if path == "" or path == "/":
        return ()
    if path[0] != "/":
        raise InvalidPath(f"path must be absolute: {path}")
    if not path.isascii():
        # A segment is a map key, and a key is valid Unicode: a lone surrogate (JSON
        # text may carry one) names nothing, and would fail deep in the tree on a write.
        try:
            path.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidPath("path must be valid Unicode (no lone surrogates)") from None
    segments = path[1:].split("/")
    for segment in segments:
        if segment == "":
            raise InvalidPath(f"empty path segment: {path}")
        if segment == "." or segment == "..":
            raise InvalidPath(f"relative path segment: {path}")
    return tuple(segments)


def format_path(segments: Segments) -> str:
    """The canonical text of a segment tuple (the root is ``"/"``)."""
    return "/" + "/".join(segments)


def join(path: str, segment: str) -> str:
    """``path`` plus one segment, validated like a parsed one."""
    base = parse(path)
    if type(segment) is not str or segment == "" or "/" in segment or segment in (".", ".."):
        raise InvalidPath(f"invalid path segment: {segment!r}")
    return format_path(base + (segment,))


def is_within(path: Segments, prefix: Segments) -> bool:
    """True when ``path`` equals ``prefix`` or lies below it."""
    return path[: len(prefix)] == prefix


def memory_segments(path: str | Segments) -> Segments | None:
    """The segments below ``/memory`` if the path is ``/memory`` or under it, else None.

    ``/memoryX`` is not a memory path: matching is by whole segment.
    """
    segments = parse(path) if isinstance(path, str) else path
    if segments and segments[0] == "memory":
        return segments[1:]
    return None


#: Script names found valid (a name stays valid): every activation checks its script's.
_VALID_SCRIPT_NAMES: set[str] = set()


def validate_script_name(name: str) -> str:
    """Script and port names: 1–64 bytes of ``[A-Za-z0-9_.-]``."""
    if type(name) is not str:
        raise InvalidScriptName(str(name))
    if name in _VALID_SCRIPT_NAMES:
        return name
    if not _SCRIPT_NAME.fullmatch(name):
        raise InvalidScriptName(name)
    if len(_VALID_SCRIPT_NAMES) >= _PARSED_ENTRIES:
        _VALID_SCRIPT_NAMES.clear()
    _VALID_SCRIPT_NAMES.add(name)
    return name


#: Text paths found to name a script, and the name (a valid one stays valid).
_LIB_NAMES: dict[str, str] = {}


def lib_name(path: str | Segments) -> str | None:
    """The script name of a ``/lib/<name>`` path (validated), or None for other paths.

    ``/lib/a/b`` is not a script path and raises ``InvalidPath``. A text path found to
    name a script is kept (bounded like :func:`parse`'s): every activation asks again.
    """
    if isinstance(path, str):
        found = _LIB_NAMES.get(path)
        if found is not None:
            return found
        segments = parse(path)
    else:
        segments = path
    if not segments or segments[0] != "lib" or len(segments) == 1:
        return None
    if len(segments) != 2:
        raise InvalidPath(f"library paths name exactly one script: {format_path(segments)}")
    name = validate_script_name(segments[1])
    if isinstance(path, str) and len(path) <= _PARSED_TEXT:
        if len(_LIB_NAMES) >= _PARSED_ENTRIES:
            _LIB_NAMES.clear()
        _LIB_NAMES[path] = name
    return name


def validate_mount_name(name: str) -> str:
    """Mount names: 1–64 bytes of ``[A-Za-z0-9_-]``."""
    if type(name) is not str or not _MOUNT_NAME.fullmatch(name):
        raise InvalidMount(f"invalid mount name: {name}")
    return name


def split_mount(path: str | Segments) -> tuple[str, Segments] | None:
    """``(name, rest)`` for ``/mounts/<name>[/rest]``; None for ``/mounts`` itself and other paths."""
    segments = parse(path) if isinstance(path, str) else path
    if len(segments) < 2 or segments[0] != "mounts":
        return None
    return validate_mount_name(segments[1]), segments[2:]


def validate_address(address: str) -> str:
    """A process address: ``svit://`` + non-empty rest, ≤ 256 bytes, no whitespace."""
    try:
        size = len(address.encode("utf-8")) if type(address) is str else -1
    except UnicodeEncodeError:
        size = -1
    if (
        size < 0
        or size > MAX_ADDRESS_BYTES
        or not address.startswith(ADDRESS_PREFIX)
        or len(address) == len(ADDRESS_PREFIX)
        or _WHITESPACE.search(address)
    ):
        raise InvalidValue(f"process address must be svit:// followed by a non-empty path: {address}")
    return address
