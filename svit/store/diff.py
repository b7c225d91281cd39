"""The difference between two retained versions, walking only chunks whose digests differ.

Two versions' trees share every chunk their edits did not touch, so the walk compares
stored chunk digests and descends only where they differ:

* a **map** is compared by cancelling the chunks both sides hold (a chunk's digest
  covers its entries, so a shared chunk holds the same keys with the same values) and
  expanding the rest one level at a time; the leaves left over are compared key by key;
* an **array** is cut by position (full chunks from the left), so chunks at the same
  level and offset cover the same indices on both sides and are compared pairwise;
  a longer side's extra chunks are its added (or removed) tail;
* two differing child containers of the same kind are compared the same way below
  their path; anything else that differs is one :class:`Difference` at its path, whose
  values are read whole (an added or removed container is reported once, with its
  whole value).

The result is in path order: map keys in code-point order, array indices numerically,
a container's path before the paths below it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from .. import tree
from ..errors import InvalidPersistence
from ..paths import format_path

__all__ = ["Difference", "diff_trees"]

#: An item of a stored leaf: a scalar (``None``, ``bool``, ``int``, ``float``, ``str``,
#: :class:`~svit.values.Script`) or a child container's 32-byte digest.
_ARRAY_LEAF, _ARRAY_INNER = 32, 16


@dataclass(frozen=True)
class Difference:
    """One path whose value differs between two versions.

    ``kind`` is ``"added"`` (``before`` is None), ``"removed"`` (``after`` is None) or
    ``"changed"``; the values are plain data as :meth:`read` returns them.
    """

    path: str
    kind: Literal["added", "removed", "changed"]
    before: Any
    after: Any


class _Walk:
    """One diff: decoded chunks by digest, and the differences found so far."""

    def __init__(self, fetch: Callable[[bytes], bytes | None], load: Callable[[bytes], Any], what: str) -> None:
        self._fetch = fetch
        self._load = load
        self._what = what
        self._decoded: dict[bytes, tuple[str, Any]] = {}
        self.out: list[tuple[tuple[str, ...], Difference]] = []

    def chunk(self, digest: bytes) -> tuple[str, Any]:
        found = self._decoded.get(digest)
        if found is None:
            data = self._fetch(digest)
            if data is None:
                raise InvalidPersistence(f"{self._what}: tree node {digest.hex()[:16]} is missing")
            try:
                found = tree.decode_chunk(digest, data)
            except tree.ChunkError as exc:
                raise InvalidPersistence(f"{self._what}: tree node {digest.hex()[:16]}: {exc}") from None
            if len(self._decoded) >= 4096:
                self._decoded.clear()
            self._decoded[digest] = found
        return found

    def value(self, item: Any) -> Any:
        return self._load(item) if type(item) is bytes else item

    def item(self, segments: tuple[str, ...], before: Any, after: Any) -> None:
        """Compare two leaf items at ``segments`` (both present)."""
        if type(before) is type(after) and before == after:
            return
        if type(before) is bytes and type(after) is bytes:
            kind_before, kind_after = self.chunk(before)[0].lower(), self.chunk(after)[0].lower()
            if kind_before == kind_after:
                self.container(segments, before, after, kind_before)
                return
        self.out.append((segments, Difference(format_path(segments), "changed", self.value(before), self.value(after))))

    def one_side(self, segments: tuple[str, ...], item: Any, added: bool) -> None:
        value = self.value(item)
        self.out.append((segments, Difference(format_path(segments), "added" if added else "removed",
                                              None if added else value, value if added else None)))

    def container(self, segments: tuple[str, ...], before: bytes, after: bytes, kind: str) -> None:
        if before == after:
            return
        if kind == "m":
            self.map(segments, before, after)
        else:
            self.array(segments, before, after)

    # ------------------------------------------------------------------ maps
    def map(self, segments: tuple[str, ...], before: bytes, after: bytes) -> None:
        left, right = {before}, {after}
        while True:
            shared = left & right
            left -= shared
            right -= shared
            if all(self.chunk(d)[0] == "m" for d in left) and all(self.chunk(d)[0] == "m" for d in right):
                break
            left, right = self._expand(left), self._expand(right)
        old = self._entries(left)
        new = self._entries(right)
        for key in sorted(old.keys() | new.keys()):
            path = (*segments, key)
            if key not in new:
                self.one_side(path, old[key], added=False)
            elif key not in old:
                self.one_side(path, new[key], added=True)
            else:
                self.item(path, old[key], new[key])

    def _expand(self, digests: set[bytes]) -> set[bytes]:
        out: set[bytes] = set()
        for digest in digests:
            kind, body = self.chunk(digest)
            if kind == "M":
                out.update(body)
            else:
                out.add(digest)
        return out

    def _entries(self, digests: set[bytes]) -> dict[str, Any]:
        entries: dict[str, Any] = {}
        for digest in digests:
            entries.update(self.chunk(digest)[1])
        return entries

    # ------------------------------------------------------------------ arrays
    def _level(self, digest: bytes) -> int:
        level = 0
        kind, body = self.chunk(digest)
        while kind == "A":
            level += 1
            kind, body = self.chunk(body[0])
        return level

    def array(self, segments: tuple[str, ...], before: bytes, after: bytes) -> None:
        mark = len(self.out)
        left, right = self._level(before), self._level(after)
        # A longer array may stand one or more levels taller: its first chunk at the
        # shorter one's level covers the same indices; its other chunks are its tail.
        while left > right:
            children = self.chunk(before)[1]
            for index in range(1, len(children)):
                self._tail(segments, children[index], left - 1, index * _span(left - 1), added=False)
            before, left = children[0], left - 1
        while right > left:
            children = self.chunk(after)[1]
            for index in range(1, len(children)):
                self._tail(segments, children[index], right - 1, index * _span(right - 1), added=True)
            after, right = children[0], right - 1
        self._array_pair(segments, before, after, left, 0)
        # Tails of a taller side were found first: put this array's differences in index
        # order (a stable sort keeps each index's own differences in their order).
        depth = len(segments)
        part = self.out[mark:]
        part.sort(key=lambda found: int(found[0][depth]))
        self.out[mark:] = part

    def _array_pair(self, segments: tuple[str, ...], before: bytes, after: bytes, level: int, offset: int) -> None:
        if before == after:
            return
        old, new = self.chunk(before)[1], self.chunk(after)[1]
        if level == 0:
            for index in range(min(len(old), len(new))):
                self.item((*segments, str(offset + index)), old[index], new[index])
            for index in range(len(new), len(old)):
                self.one_side((*segments, str(offset + index)), old[index], added=False)
            for index in range(len(old), len(new)):
                self.one_side((*segments, str(offset + index)), new[index], added=True)
            return
        span = _span(level - 1)
        for index in range(min(len(old), len(new))):
            self._array_pair(segments, old[index], new[index], level - 1, offset + index * span)
        for index in range(len(new), len(old)):
            self._tail(segments, old[index], level - 1, offset + index * span, added=False)
        for index in range(len(old), len(new)):
            self._tail(segments, new[index], level - 1, offset + index * span, added=True)

    def _tail(self, segments: tuple[str, ...], digest: bytes, level: int, offset: int, added: bool) -> None:
        body = self.chunk(digest)[1]
        if level == 0:
            for index, item in enumerate(body):
                self.one_side((*segments, str(offset + index)), item, added)
            return
        span = _span(level - 1)
        for index, child in enumerate(body):
            self._tail(segments, child, level - 1, offset + index * span, added)


def _span(level: int) -> int:
    """How many indices a full array chunk at ``level`` covers."""
    return int(_ARRAY_LEAF * _ARRAY_INNER ** level)


def diff_trees(before: str, after: str, fetch: Callable[[bytes], bytes | None], load: Callable[[bytes], Any],
               what: str) -> list[Difference]:
    """The differences from the tree with root digest ``before`` to the one with ``after``.

    ``fetch`` reads a stored chunk, ``load`` the plain value of a stored container.
    """
    walk = _Walk(fetch, load, what)
    walk.container((), bytes.fromhex(before), bytes.fromhex(after), "m")
    return [found for _, found in walk.out]
