"""Paths inside a mount: validated so that they can never climb out of their mount."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import InvalidPath
from ..paths import validate_mount_name

__all__ = [
    "MAX_MOUNT_NAME_BYTES",
    "MAX_MOUNT_PATH_SEGMENTS",
    "MAX_MOUNT_SEGMENT_BYTES",
    "MountPath",
    "as_mount_path",
    "validate_mount_name",
    "validate_mount_segment",
]

MAX_MOUNT_PATH_SEGMENTS = 64
MAX_MOUNT_SEGMENT_BYTES = 255
MAX_MOUNT_NAME_BYTES = 64


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
