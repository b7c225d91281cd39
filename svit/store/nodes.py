"""Content-addressed tree chunks in the store: staging new ones, verifying, sweeping.

A committed tree is stored as its chunks (:func:`svit.tree.new_chunks`: the bytes each
chunk's digest covers) under ``n/<digest>`` in the ``nodes`` key space; scalar leaves
live inline in their chunk. Chunks are shared between versions and processes, so a
commit stages only the chunks its tree introduces (one per level of each changed
container, typically), and a removed address's chunks stay until
:meth:`StoredNodes.sweep`.
"""

from __future__ import annotations

from collections.abc import Callable

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
    """The tree chunks of one engine, with a bounded memory of digests known to be stored.

    The memory is the engine's (:attr:`StorageEngine.chunk_memory`), so every store
    object over one engine sees the same one, and a sweep through any of them forgets it.
    It has two parts. ``_known``: digests whose whole subtree is known to be stored (a
    resume's verification, a commit whose walk stopped only at such digests); it is
    closed under children, so a previous root found in it means every chunk of that
    tree is stored, and a commit from it stages the chunks it does not hold without
    reading the database for them (a chunk that happens to be stored elsewhere is
    written again, which changes nothing: chunks are content addressed). ``_stored``:
    digests read from the database, or written by a walk that stopped at one: known
    stored, but not with their whole subtree known. Nothing enters either part before
    the batch carrying it is queued behind every earlier batch (a failed write makes the
    store terminal and fails the batches after it), and any failed commit, sweep or
    index reset forgets both.
    """

    def __init__(self, engine: StorageEngine) -> None:
        self.engine = engine
        memory = engine.chunk_memory
        self._known: set[bytes] = memory[0]
        self._stored: set[bytes] = memory[1]

    def present(self, digest: bytes, pending: set[bytes]) -> bool:
        if digest in pending or digest in self._known or digest in self._stored:
            return True
        if self.engine.shared:
            # A read is a round trip to a server: stage the chunk again instead (writing
            # a content-addressed chunk that is already stored changes nothing).
            return False
        if self.engine.get(CF_NODES, keys.node_key(digest)) is None:
            return False
        if len(self._known) + len(self._stored) < KNOWN_NODES_MAX:
            self._stored.add(digest)
        return True

    def stage(self, batch: WriteBatch, root: Node, previous: Node | None = None) -> tuple[set[bytes], bool]:
        """Stage every chunk of ``root``'s tree that is not stored yet: ``(their digests,
        whether the walk stopped only at chunks whose whole subtree is known)``.

        A chunk known to be stored stands for its whole subtree (chunks are content
        addressed and a stored chunk's children were stored with it), so a commit visits
        only the new chunks and their direct children, whatever its mutations were.
        ``previous``: the tree this one replaces; when its root is known with its whole
        subtree, a chunk not known is new to it and staged without a database read.
        """
        pending: set[bytes] = set()
        if not root.is_container:
            return pending, True
        known_set, stored_set = self._known, self._stored
        closed = True
        from_known = previous is not None and previous.is_container and previous.value.digest in known_set
        known: Callable[[bytes], bool]
        if from_known and not stored_set:
            # The steady state, asked without a Python call per chunk (new_chunks skips a
            # digest it met before in the same walk, so ``pending`` need not be asked).
            known = known_set.__contains__
        elif from_known:
            def known(digest: bytes) -> bool:
                nonlocal closed
                if digest in pending or digest in known_set:
                    return True
                if digest in stored_set:
                    closed = False
                    return True
                return False
        else:
            def known(digest: bytes) -> bool:
                nonlocal closed
                if digest in pending or digest in known_set:
                    return True
                if self.present(digest, pending):
                    closed = False
                    return True
                return False

        put = batch.put
        for digest, data in tree.new_chunks(root.value, known, known_set.__contains__):
            put(CF_NODES, b"n/" + digest, data)
            pending.add(digest)
        return pending, closed

    def remember(self, digests: set[bytes], closed: bool = True) -> None:
        """Note digests that a synced write just stored (queued behind every earlier
        write), or a walk verified; ``closed``: with their whole subtrees. A full memory
        starts over (and what is noted then is not closed: its children were forgotten)."""
        if len(self._known) + len(self._stored) + len(digests) > KNOWN_NODES_MAX:
            self.forget()
            closed = False
        (self._known if closed else self._stored).update(digests)

    def knows(self, digest: bytes) -> bool:
        """True when ``digest`` is remembered as stored (for tests and audits)."""
        return digest in self._known or digest in self._stored

    def forget(self) -> None:
        """Drop the memory (after chunks may have been deleted, or a write failed)."""
        self._known.clear()
        self._stored.clear()

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
