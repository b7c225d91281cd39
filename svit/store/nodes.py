"""Content-addressed tree chunks in the store: staging new ones, verifying, sweeping.

A committed tree is stored as its chunks (:func:`svit.tree.new_chunks`: the bytes each
chunk's digest covers) under ``n/<digest>`` in the ``nodes`` key space; scalar leaves
live inline in their chunk. Chunks are shared between versions and processes, so a
commit stages only the chunks its tree introduces (one per level of each changed
container, typically), and a removed address's chunks stay until
:meth:`StoredNodes.sweep`.
"""

from __future__ import annotations

from .. import tree
from ..errors import InvalidPersistence
from ..tree import Node
from . import keys
from .engine import StorageEngine, WriteBatch
from .keys import CF_NODES

__all__ = ["KNOWN_NODES_MAX", "StoredNodes"]

#: How many digests known to be stored are remembered (then the memory starts over).
KNOWN_NODES_MAX = 1 << 18


class StoredNodes:
    """The tree chunks of one engine, with a bounded memory of digests known to be stored."""

    def __init__(self, engine: StorageEngine) -> None:
        self.engine = engine
        self._known: set[bytes] = set()

    def present(self, digest: bytes, pending: set[bytes]) -> bool:
        if digest in pending or digest in self._known:
            return True
        if self.engine.shared:
            # A read is a round trip to a server: stage the chunk again instead (writing
            # a content-addressed chunk that is already stored changes nothing).
            return False
        return self.engine.get(CF_NODES, keys.node_key(digest)) is not None

    def stage(self, batch: WriteBatch, root: Node) -> set[bytes]:
        """Stage every chunk of ``root``'s tree that is not stored yet; returns their digests.

        A chunk known to be stored stands for its whole subtree (chunks are content
        addressed and a stored chunk's children were stored with it), so a commit visits
        only the new chunks and their direct children, whatever its mutations were.
        """
        pending: set[bytes] = set()
        if not root.is_container:
            return pending

        def known(digest: bytes) -> bool:
            return self.present(digest, pending)

        for digest, data in tree.new_chunks(root.value, known):
            batch.put(CF_NODES, keys.node_key(digest), data)
            pending.add(digest)
        return pending

    def remember(self, digests: set[bytes]) -> None:
        """Note digests that a synced write just stored (or a walk verified)."""
        if len(self._known) + len(digests) > KNOWN_NODES_MAX:
            self._known.clear()
        self._known |= digests

    def forget(self) -> None:
        """Drop the memory (after chunks may have been deleted)."""
        self._known.clear()

    def _children(self, digest: bytes, raw: bytes) -> list[bytes]:
        try:
            return tree.verify_chunk(digest, raw)
        except tree.ChunkError as exc:
            raise InvalidPersistence(f"tree node {digest.hex()[:16]}: {exc}") from None

    def verify(self, address: str, root_hash: str) -> None:
        """Walk the stored tree of a head and check every chunk against its digest."""
        seen: set[bytes] = set()
        stack = [bytes.fromhex(root_hash)]
        while stack:
            digest = stack.pop()
            if digest in seen:
                continue
            seen.add(digest)
            raw = self.engine.get(CF_NODES, keys.node_key(digest))
            if raw is None:
                raise InvalidPersistence(f"{address}: tree node {digest.hex()[:16]} is missing")
            stack.extend(self._children(digest, raw))
        self.remember(seen)

    def reachable(self, root_hashes: list[str]) -> set[bytes]:
        """Every stored chunk digest reachable from ``root_hashes`` (each chunk verified)."""
        live: set[bytes] = set()
        for root_hash in root_hashes:
            stack = [bytes.fromhex(root_hash)]
            while stack:
                digest = stack.pop()
                if digest in live:
                    continue
                live.add(digest)
                raw = self.engine.get(CF_NODES, keys.node_key(digest))
                if raw is not None:
                    stack.extend(self._children(digest, raw))
        return live

    def sweep(self, root_hashes: list[str]) -> int:
        """Delete the nodes no root in ``root_hashes`` reaches, in one synced write; the count."""
        live = self.reachable(root_hashes)
        batch = self.engine.batch()
        dead = 0
        for key, _ in self.engine.scan(CF_NODES, b"n/"):
            if key[2:] not in live:
                batch.delete(CF_NODES, key)
                dead += 1
        if dead:
            self.engine.write(batch)
        self.forget()
        return dead
