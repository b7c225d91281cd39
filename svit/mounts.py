"""Mounts: external resources exposed below ``/mounts/<name>`` through providers.

Only a mount's descriptor is process state; the data stays with the provider and never
enters the tree or a snapshot. This module holds mount paths, the provider interface
(:class:`Mount`, with the built-in folder and value providers as factories),
descriptor validation, and the record builders and access checks the process layer
uses, so every mount read, stat and listing has one shape.

Providers receive the process :class:`Limits` on every call because limits belong to
the process, not to the provider: one folder may be mounted by processes with
different limits.
"""

from __future__ import annotations

import copy
import math
import os
import re
import secrets
import stat as stat_module
import threading
from dataclasses import dataclass
from typing import Any

from .errors import (
    InvalidMount,
    InvalidPath,
    InvalidValue,
    MountDenied,
    MountUnavailable,
    ResourceLimitExceeded,
)
from .limits import Limits

MAX_MOUNT_PATH_SEGMENTS = 64
MAX_MOUNT_SEGMENT_BYTES = 255
MAX_MOUNT_NAME_BYTES = 64
MAX_MOUNT_KIND_BYTES = 64

ACCESS_VALUES = ("read", "write", "read-write")
LOCALITY_VALUES = ("cache", "local", "remote")
DESCRIPTOR_KEYS = frozenset({"access", "kind", "locality", "source"})

_MOUNT_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_MOUNT_KIND = re.compile(r"[a-z0-9-]{1,64}")


# ---------------------------------------------------------------------------- paths


@dataclass(frozen=True)
class MountPath:
    """A validated path inside one mount; ``segments == ()`` is the mount root."""

    segments: tuple[str, ...] = ()

    @classmethod
    def parse(cls, text: Any) -> MountPath:
        """Parse ``""``/``"/"`` (root) or ``[/]seg/seg``; one leading slash is optional.

        Segments are 1..255 UTF-8 bytes, never ``.`` or ``..``, never holding ``\\`` or
        NUL; at most 64 of them. Anything else is ``InvalidPath``: a mount path can
        never climb out of its mount.
        """
        if not isinstance(text, str):
            raise InvalidPath("mount path must be text")
        body = text[1:] if text.startswith("/") else text
        if body == "":
            return cls(())
        parts = body.split("/")
        if len(parts) > MAX_MOUNT_PATH_SEGMENTS:
            raise InvalidPath("mount path has too many segments")
        for part in parts:
            validate_mount_segment(part)
        return cls(tuple(parts))

    @property
    def is_root(self) -> bool:
        return not self.segments

    @property
    def name(self) -> str | None:
        return self.segments[-1] if self.segments else None

    def parent(self) -> MountPath:
        if not self.segments:
            raise InvalidPath("the mount root has no parent")
        return MountPath(self.segments[:-1])

    def child(self, name: str) -> MountPath:
        validate_mount_segment(name)
        if len(self.segments) >= MAX_MOUNT_PATH_SEGMENTS:
            raise InvalidPath("mount path has too many segments")
        return MountPath(self.segments + (name,))

    def __str__(self) -> str:
        return "/" + "/".join(self.segments)


def validate_mount_segment(segment: Any) -> str:
    """One mount path segment, or ``InvalidPath``."""
    if not isinstance(segment, str) or segment == "":
        raise InvalidPath("mount path segments must be non-empty")
    if segment in (".", ".."):
        raise InvalidPath("mount path segments must not be . or ..")
    if "\\" in segment or "\x00" in segment or "/" in segment:
        raise InvalidPath("mount path segment holds a forbidden character")
    try:
        size = len(segment.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidPath("mount path segment is not valid text") from None
    if size > MAX_MOUNT_SEGMENT_BYTES:
        raise InvalidPath("mount path segment exceeds 255 bytes")
    return segment


def as_mount_path(path: Any) -> MountPath:
    return path if isinstance(path, MountPath) else MountPath.parse(path)


def validate_mount_name(name: Any) -> str:
    """A mount name: 1..64 bytes of ``[A-Za-z0-9_-]``, else ``InvalidMount``."""
    if not isinstance(name, str) or not _MOUNT_NAME.fullmatch(name):
        raise InvalidMount(f"invalid mount name: {name}")
    return name


# ---------------------------------------------------------------------------- descriptors


def validate_descriptor(descriptor: Any) -> dict:
    """Check an untrusted descriptor (e.g. from a snapshot); a fresh copy or ``InvalidMount``."""
    if not isinstance(descriptor, dict):
        raise InvalidMount("mount descriptor must be a map")
    if set(descriptor) != DESCRIPTOR_KEYS:
        raise InvalidMount("mount descriptor must have exactly access, kind, locality and source")
    access, kind, locality, source = (descriptor[k] for k in ("access", "kind", "locality", "source"))
    if access not in ACCESS_VALUES or type(access) is not str:
        raise InvalidMount("mount access must be read, write or read-write")
    if type(kind) is not str or not _MOUNT_KIND.fullmatch(kind):
        raise InvalidMount("mount kind must be 1-64 bytes of [a-z0-9-]")
    if locality not in LOCALITY_VALUES or type(locality) is not str:
        raise InvalidMount("mount locality must be cache, local or remote")
    if type(source) is not str:
        raise InvalidMount("mount source must be text")
    try:
        source.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidMount("mount source must be text") from None
    return {"access": access, "kind": kind, "locality": locality, "source": source}


def can_read(descriptor: dict) -> bool:
    return descriptor["access"] in ("read", "read-write")


def can_write(descriptor: dict) -> bool:
    return descriptor["access"] in ("write", "read-write")


def require_read(mount_name: str, descriptor: dict) -> None:
    """Reading or discovering below a mount root needs the read grant."""
    if not can_read(descriptor):
        raise MountDenied(f"/mounts/{mount_name} is write-only")


def require_write(mount_name: str, descriptor: dict) -> None:
    """Writing or removing needs the write grant."""
    if not can_write(descriptor):
        raise MountDenied(f"/mounts/{mount_name} is read-only")


# ---------------------------------------------------------------------------- records


def mount_node_record(mount_name: str, descriptor: dict, path: Any, node: dict | None) -> dict:
    """The stat record of a mount node; ``node`` is the provider's ``stat`` answer.

    ``node is None`` gives kind ``missing``, which the process reports only for a root
    the provider cannot stat; below the root a missing node is absent.
    """
    return {
        "access": descriptor["access"],
        "attached": True,
        "facts": copy.deepcopy(node["facts"]) if node is not None else {},
        "kind": node["kind"] if node is not None else "missing",
        "locality": descriptor["locality"],
        "mount": mount_name,
        "path": str(as_mount_path(path)),
        "source": descriptor["source"],
    }


def unattached_record(mount_name: str, descriptor: dict) -> dict:
    """What a mount root reads as when no provider is attached (e.g. after restore)."""
    return {
        "access": descriptor["access"],
        "attached": False,
        "facts": {},
        "kind": descriptor["kind"],
        "locality": descriptor["locality"],
        "mount": mount_name,
        "path": "/",
        "source": descriptor["source"],
    }


def mount_stat(mount_name: str, provider: Mount, path: Any, limits: Limits | None = None) -> dict | None:
    """Stat a mount node for the host or guest: a record, or ``None`` if absent below the root.

    Reading below the root needs the read grant; the root itself always answers.
    """
    path = as_mount_path(path)
    descriptor = provider.descriptor()
    if not path.is_root:
        require_read(mount_name, descriptor)
    node = provider.stat(path, limits)
    if node is None and not path.is_root:
        return None
    return mount_node_record(mount_name, descriptor, path, node)


def mount_read(mount_name: str, provider: Mount, path: Any, limits: Limits | None = None) -> Any:
    """Read a mount node: a directory (or the root) reads as its record, a leaf as its content."""
    path = as_mount_path(path)
    if path.is_root:
        return mount_stat(mount_name, provider, path, limits)
    descriptor = provider.descriptor()
    require_read(mount_name, descriptor)
    node = provider.stat(path, limits)
    if node is None:
        return None
    if node["kind"] == "directory":
        return mount_node_record(mount_name, descriptor, path, node)
    return provider.read(path, limits)


def mount_discover(mount_name: str, provider: Mount, path: Any, limits: Limits | None = None) -> list:
    """List a mount directory (needs the read grant)."""
    path = as_mount_path(path)
    require_read(mount_name, provider.descriptor())
    return list(provider.list(path, limits))


def mount_write(mount_name: str, provider: Mount, path: Any, value: Any, limits: Limits | None = None) -> None:
    """Write through to the provider (needs the write grant)."""
    path = as_mount_path(path)
    require_write(mount_name, provider.descriptor())
    provider.check_write(path)
    provider.write(path, value, limits)


def mount_remove(mount_name: str, provider: Mount, path: Any, limits: Limits | None = None) -> None:
    """Remove through the provider (needs the write grant)."""
    path = as_mount_path(path)
    require_write(mount_name, provider.descriptor())
    provider.check_write(path)
    provider.remove(path, limits)


# ---------------------------------------------------------------------------- providers


class Mount:
    """A mount provider. Subclass it for custom providers; use the factories for built-ins.

    ``stat`` answers ``{"kind": "directory"|"leaf", "facts": {...}}`` or ``None``;
    ``list`` the child names of a directory, sorted; ``read`` a leaf's content (or
    ``None``); ``write`` and ``remove`` are denied unless the provider allows them.
    Paths are :class:`MountPath`; ``limits`` is the calling process's :class:`Limits`.

    ``check_write`` refuses a path the provider never writes, before a write is staged.
    A process calls ``acquire`` when it starts using the provider (build, attach, fork)
    and ``release`` when it stops (detach, close, replacement), so a provider that holds
    a host resource can let it go when no process uses it any more.
    """

    def check_write(self, path: MountPath) -> None:
        """Raise ``MountDenied`` for a path this provider refuses to write or remove."""

    def acquire(self) -> None:
        """A process starts using this provider."""

    def release(self) -> None:
        """A process stops using this provider."""

    def descriptor(self) -> dict:
        raise NotImplementedError

    def stat(self, path: MountPath, limits: Limits | None = None) -> dict | None:
        raise NotImplementedError

    def list(self, path: MountPath, limits: Limits | None = None) -> list:
        raise NotImplementedError

    def read(self, path: MountPath, limits: Limits | None = None) -> Any:
        raise NotImplementedError

    def write(self, path: MountPath, value: Any, limits: Limits | None = None) -> None:
        raise MountDenied("mount is read-only")

    def remove(self, path: MountPath, limits: Limits | None = None) -> None:
        raise MountDenied("mount is read-only")

    @staticmethod
    def folder(path: Any) -> FolderMount:
        """A read-only view of a host directory."""
        return FolderMount(path, writable=False)

    @staticmethod
    def writable_folder(path: Any) -> FolderMount:
        """A read-write view of a host directory (text files only)."""
        return FolderMount(path, writable=True)

    @staticmethod
    def value(source: str, value: Any) -> ValueMount:
        """A read-only mount over a private copy of a plain value."""
        return ValueMount(source, value, writable=False)

    @staticmethod
    def writable_value(source: str, value: Any) -> ValueMount:
        """A read-write mount over a private copy of a plain value."""
        return ValueMount(source, value, writable=True)


def _limits(limits: Limits | None) -> Limits:
    return limits if limits is not None else Limits()


# ---------------------------------------------------------------------------- folder


def _modified_unix(st: os.stat_result) -> int | None:
    seconds = st.st_mtime
    if not math.isfinite(seconds) or seconds < 0:
        return None
    return int(seconds)


_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
_FILE_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)

_GIT_HEAD_BYTES = 4096
_GIT_PACKED_REFS_BYTES = 4 * 1024 * 1024
_SHA = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
_REF_SEGMENT = re.compile(r"[^\x00-\x20\x7f~^:?*\[\\]+")


class FolderMount(Mount):
    """A host directory. Resolution walks one segment at a time through directory file
    descriptors opened with ``O_NOFOLLOW``, so no symlink (at any depth, even one swapped
    in mid-walk) and no special file is ever followed: both are ``MountDenied``.

    The root is opened once, when the mount is created, and every path is resolved from
    that descriptor, never from the root's path again: renaming the root or any directory
    above it, or swapping a symlink in their place, does not redirect the mount (it keeps
    the directory it was given; the descriptor's ``source`` stays the path it had then).
    The descriptor is closed when the last process using the mount releases it (detach,
    close) or when the mount is collected; attaching a released mount again reopens the
    root by path and accepts it only if it is still the same directory.

    Nothing is ever written under a git directory (see :meth:`check_write`).
    """

    def __init__(self, path: Any, writable: bool) -> None:
        try:
            root = os.path.realpath(os.fspath(path))
        except (TypeError, ValueError, OSError):
            raise InvalidMount("folder mount needs a directory path") from None
        try:
            fd = os.open(root, _DIR_FLAGS)
        except (OSError, ValueError):
            raise InvalidMount("folder mount root is not a directory") from None
        try:
            st = os.fstat(fd)
        except OSError:
            os.close(fd)
            raise InvalidMount("folder mount root cannot be inspected") from None
        self.root = root
        self.writable = writable
        self._root_fd: int | None = fd
        self._identity = (st.st_dev, st.st_ino)
        self._holders = 0
        self._guard = threading.Lock()

    # -- the held root

    def acquire(self) -> None:
        with self._guard:
            if self._root_fd is None:
                self._root_fd = self._reopen()
            self._holders += 1

    def release(self) -> None:
        with self._guard:
            self._holders = max(0, self._holders - 1)
            if self._holders == 0:
                self._close_root()

    def close(self) -> None:
        """Close the root descriptor now; later calls raise ``MountUnavailable``."""
        with self._guard:
            self._holders = 0
            self._close_root()

    def _close_root(self) -> None:
        fd, self._root_fd = self._root_fd, None
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass

    def _reopen(self) -> int:
        try:
            fd = os.open(self.root, _DIR_FLAGS)
        except OSError:
            raise InvalidMount("folder mount root is no longer a plain directory") from None
        try:
            st = os.fstat(fd)
            same = (st.st_dev, st.st_ino) == self._identity
        except OSError:
            same = False
        if not same:
            os.close(fd)
            raise InvalidMount("folder mount root is no longer the directory the mount was created for")
        return fd

    def __del__(self) -> None:
        fd = getattr(self, "_root_fd", None)
        if fd is not None:
            self._root_fd = None
            try:
                os.close(fd)
            except OSError:
                pass

    def descriptor(self) -> dict:
        return {
            "access": "read-write" if self.writable else "read",
            "kind": "folder",
            "locality": "local",
            "source": self.root,
        }

    # -- resolution

    def _open_root(self) -> int | None:
        """A fresh descriptor of the held root (the caller closes it); ``None`` once the
        root directory has been deleted."""
        with self._guard:
            if self._root_fd is None:
                raise MountUnavailable("folder mount is closed")
            try:
                fd = os.dup(self._root_fd)
            except OSError:
                raise MountDenied("mount root cannot be opened") from None
        try:
            deleted = os.fstat(fd).st_nlink == 0
        except OSError:
            deleted = True
        if deleted:
            os.close(fd)
            return None
        return fd

    # -- git directories

    def check_write(self, path: MountPath) -> None:
        """Refuse writes and removes in a git directory: a ``.git`` segment (in any case or
        spelling a case-folding or short-name filesystem treats as ``.git``), or a
        directory shaped like a repository (``objects/`` and ``refs/``: a bare one).
        Git runs commands its configuration and hooks name (``core.fsmonitor``, hooks,
        filters), so a write there could make a later ``git`` run on the host execute them."""
        path = as_mount_path(path)
        refusal = MountDenied(
            f"{path} is a git directory or inside one; mount writes there are refused "
            "(git runs commands its configuration names)"
        )
        if any(is_git_name(segment) for segment in path.segments):
            raise refusal
        fd = self._open_root()
        if fd is None:
            return
        try:
            if _looks_like_git_dir(fd):
                raise refusal
            for segment in path.segments[:-1]:
                try:
                    next_fd = os.open(segment, _DIR_FLAGS, dir_fd=fd)
                except OSError:
                    return  # missing or not a plain directory: the write itself reports it
                os.close(fd)
                fd = next_fd
                if _looks_like_git_dir(fd):
                    raise refusal
        finally:
            os.close(fd)

    def _open_dir(self, segments: tuple[str, ...]) -> int | None:
        """A descriptor of the directory at ``segments``; ``None`` when something is missing
        or is a regular file. A symlink or special file on the way is ``MountDenied``."""
        fd = self._open_root()
        if fd is None:
            return None
        walked: list[str] = []
        try:
            for segment in segments:
                walked.append(segment)
                kind = self._kind_at(fd, segment, walked)
                if kind != "directory":
                    os.close(fd)
                    return None
                try:
                    next_fd = os.open(segment, _DIR_FLAGS, dir_fd=fd)
                except (FileNotFoundError, NotADirectoryError):
                    os.close(fd)
                    return None
                except OSError:
                    raise MountDenied(f"{_show(walked)} cannot be opened as a plain directory") from None
                os.close(fd)
                fd = next_fd
            return fd
        except BaseException:
            try:
                os.close(fd)
            except OSError:
                pass
            raise

    @staticmethod
    def _lstat_at(dir_fd: int, name: str) -> os.stat_result | None:
        try:
            return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError:
            raise MountDenied("mount node cannot be inspected") from None

    def _kind_at(self, dir_fd: int, name: str, walked: list[str]) -> str | None:
        st = self._lstat_at(dir_fd, name)
        return None if st is None else _classify(st, walked)

    # -- reading

    def stat(self, path: MountPath, limits: Limits | None = None) -> dict | None:
        path = as_mount_path(path)
        if path.is_root:
            fd = self._open_root()
            if fd is None:
                return None
            try:
                facts = {"content": "object", "modified_unix": _modified_unix(os.fstat(fd))}
                git = _git_facts(fd)
                if git is not None:
                    facts["git"] = git
                return {"facts": facts, "kind": "directory"}
            finally:
                os.close(fd)
        fd = self._open_dir(path.segments[:-1])
        if fd is None:
            return None
        try:
            st = self._lstat_at(fd, path.segments[-1])
        finally:
            os.close(fd)
        if st is None:
            return None
        if _classify(st, list(path.segments)) == "directory":
            return {"facts": {"content": "object", "modified_unix": _modified_unix(st)}, "kind": "directory"}
        return {
            "facts": {"bytes": st.st_size, "content": "text/plain", "modified_unix": _modified_unix(st)},
            "kind": "leaf",
        }

    def list(self, path: MountPath, limits: Limits | None = None) -> list:
        path = as_mount_path(path)
        cap = _limits(limits).max_mount_entries
        if not path.is_root:
            node = self.stat(path, limits)
            if node is None or node["kind"] != "directory":
                raise InvalidPath(f"{path} is not a mount directory")
        fd = self._open_dir(path.segments)
        if fd is None:
            raise InvalidPath(f"{path} is not a mount directory")
        names: list[str] = []
        try:
            with os.scandir(fd) as entries:
                for entry in entries:
                    if len(names) >= cap:
                        raise ResourceLimitExceeded("mount entries")
                    name = entry.name
                    try:
                        name.encode("utf-8")
                    except UnicodeEncodeError:
                        raise InvalidMount("mount entry name is not UTF-8") from None
                    names.append(name)
        except OSError:
            raise MountDenied(f"{path} cannot be listed") from None
        finally:
            os.close(fd)
        names.sort()
        return names

    def read(self, path: MountPath, limits: Limits | None = None) -> Any:
        """A file's UTF-8 text; ``None`` for a directory or a missing node."""
        path = as_mount_path(path)
        if path.is_root:
            return None
        cap = _limits(limits).max_text_bytes
        fd = self._open_dir(path.segments[:-1])
        if fd is None:
            return None
        try:
            st = self._lstat_at(fd, path.segments[-1])
            if st is None or _classify(st, list(path.segments)) == "directory":
                return None
            try:
                file_fd = os.open(path.segments[-1], _FILE_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                return None
            except OSError:
                raise MountDenied(f"{path} cannot be opened as a plain file") from None
        finally:
            os.close(fd)
        try:
            st = os.fstat(file_fd)
            if not stat_module.S_ISREG(st.st_mode):
                raise MountDenied(f"{path} is not a plain file")
            if st.st_size > cap:
                raise ResourceLimitExceeded("mount leaf bytes")
            data = _read_at_most(file_fd, cap + 1)
        finally:
            os.close(file_fd)
        if len(data) > cap:
            raise ResourceLimitExceeded("mount leaf bytes")
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidMount(f"{path} is not UTF-8 text") from None

    # -- writing

    def write(self, path: MountPath, value: Any, limits: Limits | None = None) -> None:
        """Replace or create a text file atomically (temporary file, then rename)."""
        if not self.writable:
            raise MountDenied("mount is read-only")
        path = as_mount_path(path)
        if path.is_root:
            raise InvalidPath("cannot write a mount root")
        if not isinstance(value, str):
            raise InvalidValue("folder mount writes require text")
        try:
            data = value.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidValue("folder mount writes require text") from None
        if len(data) > _limits(limits).max_text_bytes:
            raise ResourceLimitExceeded("mount leaf bytes")
        self.check_write(path)
        name = path.segments[-1]
        fd = self._open_dir(path.segments[:-1])
        if fd is None:
            raise InvalidPath(f"{path.parent()} is not an existing mount directory")
        try:
            st = self._lstat_at(fd, name)
            mode = 0o644
            if st is not None:
                if _classify(st, list(path.segments)) == "directory":
                    raise InvalidPath(f"{path} is a directory")
                mode = stat_module.S_IMODE(st.st_mode)
            _replace_file(fd, name, data, mode)
        finally:
            os.close(fd)

    def remove(self, path: MountPath, limits: Limits | None = None) -> None:
        """Delete a file; directories are never removed."""
        if not self.writable:
            raise MountDenied("mount is read-only")
        path = as_mount_path(path)
        if path.is_root:
            raise InvalidPath("cannot remove a mount root")
        self.check_write(path)
        fd = self._open_dir(path.segments[:-1])
        if fd is None:
            raise InvalidPath(f"{path} does not exist")
        try:
            st = self._lstat_at(fd, path.segments[-1])
            if st is None:
                raise InvalidPath(f"{path} does not exist")
            if _classify(st, list(path.segments)) == "directory":
                raise InvalidPath("folder mount removes delete files only")
            try:
                os.unlink(path.segments[-1], dir_fd=fd)
            except FileNotFoundError:
                raise InvalidPath(f"{path} does not exist") from None
            except OSError:
                raise MountDenied(f"{path} cannot be removed") from None
        finally:
            os.close(fd)


#: Code points HFS+ ignores in names, so ``.g\u200cit`` is ``.git`` there.
_HFS_IGNORED = frozenset(
    chr(c) for c in (0x200C, 0x200D, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x206A, 0x2070), 0xFEFF)
)


def is_git_name(segment: str) -> bool:
    """Whether some filesystem would take ``segment`` for ``.git``: any case, trailing dots
    or spaces (Windows), an NTFS stream suffix or short name (``git~1``), HFS+ ignored
    code points."""
    folded = "".join(ch for ch in segment if ch not in _HFS_IGNORED).casefold()
    folded = folded.split(":", 1)[0].rstrip(". ")
    return folded in (".git", "git~1")


def _looks_like_git_dir(dir_fd: int) -> bool:
    """``objects/`` beside ``refs/``: a repository directory once it has a ``HEAD``. ``HEAD``
    is not required, so one activation cannot stage ``HEAD`` and then ``config`` into it."""
    try:
        objects = os.stat("objects", dir_fd=dir_fd, follow_symlinks=False)
        refs = os.stat("refs", dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return False
    return stat_module.S_ISDIR(objects.st_mode) and stat_module.S_ISDIR(refs.st_mode)


def _show(segments: list[str]) -> str:
    return "/" + "/".join(segments)


def _classify(st: os.stat_result, segments: list[str]) -> str:
    """``directory`` or ``file``; symlinks and special files are refused."""
    if stat_module.S_ISLNK(st.st_mode):
        raise MountDenied(f"{_show(segments)} is a symbolic link")
    if stat_module.S_ISDIR(st.st_mode):
        return "directory"
    if stat_module.S_ISREG(st.st_mode):
        return "file"
    raise MountDenied(f"{_show(segments)} is a special file")


def _read_at_most(fd: int, limit: int) -> bytes:
    chunks: list[bytes] = []
    total = 0
    while total < limit:
        try:
            chunk = os.read(fd, min(1 << 20, limit - total))
        except BlockingIOError:
            break
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    return b"".join(chunks)


def _replace_file(dir_fd: int, name: str, data: bytes, mode: int) -> None:
    temp = f".svit-write-{secrets.token_hex(8)}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        file_fd = os.open(temp, flags, mode, dir_fd=dir_fd)
    except OSError:
        raise MountDenied("mount directory is not writable") from None
    try:
        try:
            view = memoryview(data)
            while view:
                written = os.write(file_fd, view)
                view = view[written:]
            os.fsync(file_fd)
        finally:
            os.close(file_fd)
        os.replace(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException as error:
        try:
            os.unlink(temp, dir_fd=dir_fd)
        except OSError:
            pass
        if isinstance(error, OSError):
            raise MountDenied("mount file cannot be written") from None
        raise
    try:
        os.fsync(dir_fd)
    except OSError:
        pass


# -- git facts: read HEAD and refs directly; never run git, never follow a symlink.


def _read_small_at(dir_fd: int, segments: list[str], limit: int) -> bytes | None:
    """Contents of a small regular file below ``dir_fd``, or ``None`` (missing, too big,
    a symlink, anything odd)."""
    fds: list[int] = []
    current = dir_fd
    try:
        for segment in segments[:-1]:
            current = os.open(segment, _DIR_FLAGS, dir_fd=current)
            fds.append(current)
        file_fd = os.open(segments[-1], _FILE_FLAGS, dir_fd=current)
        try:
            st = os.fstat(file_fd)
            if not stat_module.S_ISREG(st.st_mode) or st.st_size > limit:
                return None
            data = _read_at_most(file_fd, limit + 1)
            return data if len(data) <= limit else None
        finally:
            os.close(file_fd)
    except OSError:
        return None
    finally:
        for fd in fds:
            os.close(fd)


def _git_facts(root_fd: int) -> dict | None:
    """``{"branch", "commit"}`` of a ``.git`` directory at the root, when it resolves."""
    try:
        st = os.stat(".git", dir_fd=root_fd, follow_symlinks=False)
    except OSError:
        return None
    if not stat_module.S_ISDIR(st.st_mode):
        return None
    head = _read_small_at(root_fd, [".git", "HEAD"], _GIT_HEAD_BYTES)
    if head is None:
        return None
    try:
        text = head.decode("utf-8").strip()
    except UnicodeDecodeError:
        return None
    if _SHA.fullmatch(text):
        return {"branch": None, "commit": text}
    if not text.startswith("ref:"):
        return None
    ref = text[4:].strip()
    segments = ref.split("/")
    if len(segments) < 2 or segments[0] != "refs" or not all(
        _REF_SEGMENT.fullmatch(s) and s not in (".", "..") for s in segments
    ):
        return None
    branch = "/".join(segments[2:]) if segments[1] == "heads" and len(segments) > 2 else None
    commit = _resolve_ref(root_fd, ref, segments)
    if commit is None:
        return None
    return {"branch": branch, "commit": commit}


def _resolve_ref(root_fd: int, ref: str, segments: list[str]) -> str | None:
    loose = _read_small_at(root_fd, [".git", *segments], _GIT_HEAD_BYTES)
    if loose is not None:
        text = loose.decode("utf-8", "replace").strip()
        return text if _SHA.fullmatch(text) else None
    packed = _read_small_at(root_fd, [".git", "packed-refs"], _GIT_PACKED_REFS_BYTES)
    if packed is None:
        return None
    for line in packed.decode("utf-8", "replace").splitlines():
        parts = line.split(" ")
        if len(parts) == 2 and parts[1] == ref and _SHA.fullmatch(parts[0]):
            return parts[0]
    return None


# ---------------------------------------------------------------------------- value


def _plain_copy(value: Any, limits: Limits | None = None, depth: int = 0) -> Any:
    """A deep copy of a plain value, refusing anything else (``InvalidValue``).

    With ``limits``, the per-value depth bound applies as well.
    """
    if limits is not None and depth > limits.max_value_depth:
        raise InvalidValue("maximum nesting depth exceeded")
    if value is None or type(value) in (bool, int, str):
        if type(value) is int and not (-(2**63) <= value < 2**63):
            raise InvalidValue("integer outside the signed 64-bit range")
        return value
    if type(value) is float:
        if not math.isfinite(value):
            raise InvalidValue("numbers must be finite")
        return value
    if type(value) is list:
        return [_plain_copy(item, limits, depth + 1) for item in value]
    if type(value) is dict:
        if any(type(key) is not str for key in value):
            raise InvalidValue("map keys must be text")
        return {key: _plain_copy(value[key], limits, depth + 1) for key in sorted(value)}
    raise InvalidValue(f"unsupported value kind: {type(value).__name__}")


def _value_facts(node: Any) -> dict:
    if isinstance(node, dict):
        return {"facts": {"content": "object", "entries": len(node)}, "kind": "directory"}
    if isinstance(node, list):
        return {"facts": {"content": "array", "entries": len(node)}, "kind": "directory"}
    if isinstance(node, str):
        return {"facts": {"bytes": len(node.encode("utf-8")), "content": "text/plain"}, "kind": "leaf"}
    return {"facts": {"content": "scalar"}, "kind": "leaf"}


def _array_index(segment: str) -> int:
    if not segment.isascii() or not segment.isdigit():
        raise InvalidPath(f"array index must be a non-negative decimal: {segment}")
    return int(segment)


class ValueMount(Mount):
    """A private copy of a plain value; maps and arrays are directories, the rest leaves.

    Array children are listed in index order (``"0".."n-1"``), as committed arrays are.
    """

    def __init__(self, source: Any, value: Any, writable: bool) -> None:
        if type(source) is not str:
            raise InvalidMount("mount source must be text")
        self.source = source
        self.writable = writable
        self._value = _plain_copy(value)

    def descriptor(self) -> dict:
        return {
            "access": "read-write" if self.writable else "read",
            "kind": "value",
            "locality": "cache",
            "source": self.source,
        }

    def _lookup(self, segments: tuple[str, ...]) -> tuple[bool, Any]:
        node = self._value
        for segment in segments:
            if isinstance(node, dict):
                if segment not in node:
                    return False, None
                node = node[segment]
            elif isinstance(node, list):
                index = _array_index(segment)
                if index >= len(node):
                    return False, None
                node = node[index]
            else:
                raise InvalidPath("mount path walks through a scalar")
        return True, node

    def stat(self, path: MountPath, limits: Limits | None = None) -> dict | None:
        found, node = self._lookup(as_mount_path(path).segments)
        return _value_facts(node) if found else None

    def list(self, path: MountPath, limits: Limits | None = None) -> list:
        path = as_mount_path(path)
        found, node = self._lookup(path.segments)
        if found and isinstance(node, dict):
            names = sorted(node)
        elif found and isinstance(node, list):
            names = [str(i) for i in range(len(node))]
        else:
            raise InvalidPath(f"{path} is not a mount directory")
        if len(names) > _limits(limits).max_mount_entries:
            raise ResourceLimitExceeded("mount entries")
        return names

    def read(self, path: MountPath, limits: Limits | None = None) -> Any:
        found, node = self._lookup(as_mount_path(path).segments)
        if not found:
            return None
        if isinstance(node, str) and len(node.encode("utf-8")) > _limits(limits).max_text_bytes:
            raise ResourceLimitExceeded("mount leaf bytes")
        return copy.deepcopy(node)

    def _parent(self, path: MountPath) -> tuple[Any, str]:
        if path.is_root:
            raise InvalidPath("cannot change a mount root")
        found, parent = self._lookup(path.segments[:-1])
        if not found or not isinstance(parent, (dict, list)):
            raise InvalidPath(f"{path.parent()} is not an existing mount directory")
        return parent, path.segments[-1]

    def write(self, path: MountPath, value: Any, limits: Limits | None = None) -> None:
        """Insert or replace a map key, or replace an existing array index."""
        if not self.writable:
            raise MountDenied("mount is read-only")
        path = as_mount_path(path)
        parent, key = self._parent(path)
        new = _plain_copy(value, _limits(limits))
        if isinstance(parent, dict):
            parent[key] = new
            return
        index = _array_index(key)
        if index >= len(parent):
            raise InvalidPath(f"{path} is past the end of the array")
        parent[index] = new

    def remove(self, path: MountPath, limits: Limits | None = None) -> None:
        """Delete a map key or an array element (later elements shift down)."""
        if not self.writable:
            raise MountDenied("mount is read-only")
        path = as_mount_path(path)
        parent, key = self._parent(path)
        if isinstance(parent, dict):
            if key not in parent:
                raise InvalidPath(f"{path} does not exist")
            del parent[key]
            return
        index = _array_index(key)
        if index >= len(parent):
            raise InvalidPath(f"{path} does not exist")
        del parent[index]
