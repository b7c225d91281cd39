"""Content-addressed tree nodes in the store: staging new ones, verifying, sweeping.

A committed tree is stored as its container nodes (:func:`svit.store.codec.encode_node`)
under ``n/<digest>`` in the ``nodes`` key space; leaves live inline in their parent.
Nodes are shared between versions and processes, so a commit stages only the
containers its tree introduces, and a removed address's nodes stay until
:meth:`StoredNodes.sweep`.
"""

from __future__ import annotations

from typing import Any

from .. import tree
from ..errors import InvalidPersistence, SvitError
from ..paths import parse
from ..tree import Node
from . import codec, keys
from .engine import StorageEngine, WriteBatch
from .keys import CF_NODES

__all__ = ["KNOWN_NODES_MAX", "StoredNodes"]

#: How many digests known to be stored are remembered (then the memory starts over).
KNOWN_NODES_MAX = 1 << 18


class StoredNodes:
    """The tree nodes of one engine, with a bounded memory of digests known to be stored."""

    def __init__(self, engine: StorageEngine) -> None:
        self.engine = engine
        self._known: set[bytes] = set()

    def present(self, digest: bytes, pending: set[bytes]) -> bool:
        if digest in pending or digest in self._known:
            return True
        return self.engine.get(CF_NODES, keys.node_key(digest)) is not None

    def stage_subtree(self, batch: WriteBatch, node: Node, pending: set[bytes]) -> None:
        """Stage every container of ``node``'s subtree that is not stored yet."""
        stack = [node]
        while stack:
            current = stack.pop()
            if not current.is_container or self.present(current.digest, pending):
                continue
            batch.put(CF_NODES, keys.node_key(current.digest), codec.encode_node(current))
            pending.add(current.digest)
            stack.extend(codec.container_children(current))

    def stage(self, batch: WriteBatch, root: Node, mutations: list[dict[str, Any]] | None) -> set[bytes]:
        """Stage the containers ``root`` introduces; returns their digests.

        With ``mutations``, only nodes at or above a mutation path can be new (the
        previous root is fully stored): whole subtrees at mutation paths first, then the
        ancestors on each path (whose other children are unchanged, hence stored).
        """
        pending: set[bytes] = set()
        if mutations is None:
            self.stage_subtree(batch, root, pending)
            return pending
        chains: list[Node] = []
        for mutation in mutations:
            segments = parse(mutation["path"])
            current: Node | None = root
            for depth in range(len(segments) + 1):
                if current is None or not current.is_container:
                    break
                if depth == len(segments):
                    self.stage_subtree(batch, current, pending)
                    break
                chains.append(current)
                try:
                    current = tree.get(current, (segments[depth],))
                except SvitError:
                    current = None
        for node in chains:
            # Ancestors of a change are new in all but rare cases; writing a node that
            # exists rewrites identical bytes (content addressed), cheaper than a lookup.
            if node.digest not in pending:
                batch.put(CF_NODES, keys.node_key(node.digest), codec.encode_node(node))
                pending.add(node.digest)
        return pending

    def remember(self, digests: set[bytes]) -> None:
        """Note digests that a synced write just stored (or a walk verified)."""
        if len(self._known) + len(digests) > KNOWN_NODES_MAX:
            self._known.clear()
        self._known |= digests

    def forget(self) -> None:
        """Drop the memory (after nodes may have been deleted)."""
        self._known.clear()

    def verify(self, address: str, root_hash: str) -> None:
        """Walk the stored tree of a head and check every node against its digest."""
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
            stack.extend(codec.verify_node(digest, raw))
        self.remember(seen)

    def reachable(self, root_hashes: list[str]) -> set[bytes]:
        """Every stored node digest reachable from ``root_hashes`` (each node verified)."""
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
                    stack.extend(codec.verify_node(digest, raw))
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
