"""The folder provider: a host directory, resolved one segment at a time without following links."""

from __future__ import annotations

import builtins
import math
import os
import re
import secrets
import stat as stat_module
import threading
from typing import Any

from ..errors import InvalidMount, InvalidPath, InvalidValue, MountDenied, MountUnavailable, ResourceLimitExceeded
from ..limits import Limits
from .paths import MountPath, as_mount_path
from .protocol import Descriptor, Mount, NodeFacts, limits_or_default, register_builtin_provider

__all__ = ["FolderMount", "is_git_name"]


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

    def descriptor(self) -> Descriptor:
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

    def stat(self, path: MountPath, limits: Limits | None = None) -> NodeFacts | None:
        path = as_mount_path(path)
        if path.is_root:
            fd = self._open_root()
            if fd is None:
                return None
            try:
                facts: dict[str, Any] = {"content": "object", "modified_unix": _modified_unix(os.fstat(fd))}
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

    def list(self, path: MountPath, limits: Limits | None = None) -> builtins.list[str]:
        path = as_mount_path(path)
        cap = limits_or_default(limits).max_mount_entries
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
        cap = limits_or_default(limits).max_text_bytes
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
        if len(data) > limits_or_default(limits).max_text_bytes:
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


def _git_facts(root_fd: int) -> dict[str, str | None] | None:
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



register_builtin_provider("folder", FolderMount)
