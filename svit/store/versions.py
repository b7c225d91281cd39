"""Time travel: any retained version of an address, read from stored records and chunks.

Every version a history retains has its root digest in one directly addressable record,
so finding it costs the same whatever the history's length:

* the head's version: the head record (``root_hash``);
* the base's version: the base record;
* a version between them: the transaction at position ``first + (version - base) - 1``
  (``first`` is the base's ``covered_position + 1``, or 0), whose
  ``resulting_root_hash`` is that version's root (versions advance by exactly one per
  transaction, which every decode checks);
* a version below a fork child's base: the parent's, looked up the same way (a fork
  pins its parent's history: a parent with children cannot be cut).

No derived index is needed: the transaction key *is* the version index. A version
after the head, a negative one, or one before the retained history (a cut or an
imported base) is ``PersistenceNotFound`` naming the address, the version asked and
the retained range. The tree is then rebuilt from its stored chunks
(:func:`svit.tree.load_container`, every chunk checked against its digest), never by
replaying mutations or guest code. :class:`VersionView` reads it through a detached
:class:`~svit.process.Process`, so ``read``, ``discover``, ``stat`` and ``node_hash``
answer (and fail) exactly as a live handle of a stored state with no mount provider
attached.
"""

from __future__ import annotations

import threading
from collections.abc import MutableMapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .. import tree
from ..errors import InvalidPersistence, InvalidValue, PersistenceNotFound, ResourceLimitExceeded
from ..limits import Limits
from ..paths import parse, validate_address
from ..process import Process
from ..tree import Node
from . import codec, keys, records
from .diff import Difference, diff_trees
from .history import MAX_QUERY_LIMIT
from .keys import CF_NODES, CF_RECORD
from .records import Transaction

if TYPE_CHECKING:
    from .store import ProcessStore

__all__ = ["CHUNK_CACHE_MAX", "RetainedVersion", "VersionView", "Versions"]

#: How many rebuilt chunks a store keeps for time travel (then the cache starts over).
CHUNK_CACHE_MAX = 1 << 15

_MAX_FORK_DEPTH = 64

#: How many transactions past ``limit`` a path-filtered ``recent`` reads newest first
#: before it takes the older matches from the path index.
_RECENT_WALK = 64


@dataclass(frozen=True)
class RetainedVersion:
    """Where one retained version of an address stands: its root digest, and when it
    was committed (milliseconds since the Unix epoch, UTC; None for a base)."""

    address: str
    version: int
    root_hash: str
    committed_at: int | None


class _ChunkCache(dict[bytes, Any]):
    """Rebuilt chunks by digest, at most :data:`CHUNK_CACHE_MAX` (cleared when full)."""

    def __setitem__(self, digest: bytes, chunk: Any) -> None:
        if len(self) >= CHUNK_CACHE_MAX:
            self.clear()
        super().__setitem__(digest, chunk)


class Versions:
    """Resolves retained versions of the addresses of one store and rebuilds their trees."""

    def __init__(self, store: ProcessStore) -> None:
        self._store = store
        self._chunks: MutableMapping[bytes, Any] = _ChunkCache()
        self._bases: dict[str, tuple[bytes, dict[str, Any]]] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ versions
    def resolve(self, address: str, version: int) -> RetainedVersion:
        """The retained ``version`` of ``address`` (its root digest), from O(1) records."""
        validate_address(address)
        if type(version) is not int:
            raise InvalidValue("a version must be an integer")
        store = self._store
        with store.engine.lock:
            store.engine.check()
            return self._resolve(address, version, 0, None)

    def _resolve(self, address: str, version: int, depth: int, asked: str | None) -> RetainedVersion:
        store = self._store
        head = store.stored_head(address)
        if head is None:
            if depth:
                raise InvalidPersistence(f"fork parent {address} is missing")
            raise PersistenceNotFound(address)
        base = self._base(address)
        base_version: int = base["process_version"]
        head_version: int = head["process_version"]
        if version == head_version:
            return RetainedVersion(asked or address, version, head["root_hash"], self._head_time(address, head))
        if version == base_version and version < head_version:
            return RetainedVersion(asked or address, version, base["root_hash"], None)
        if base_version < version < head_version:
            first = 0 if base["covered_position"] is None else base["covered_position"] + 1
            position = first + (version - base_version) - 1
            raw = store.engine.get(CF_RECORD, keys.transaction_key(address, position))
            if raw is None:
                raise InvalidPersistence(f"transaction {position} of {address} is missing")
            record = records.decode_transaction_root(address, position, raw)
            if record["process_version_after"] != version:
                raise InvalidPersistence(f"transaction {position} of {address} does not produce version {version}")
            return RetainedVersion(asked or address, version, record["resulting_root_hash"], record["committed_at"])
        origin = base["origin"]
        if 0 <= version < base_version and type(origin) is dict and origin.get("origin") == "fork":
            if depth >= _MAX_FORK_DEPTH:
                raise InvalidPersistence(f"base of {address}: fork chain is deeper than {_MAX_FORK_DEPTH}")
            parent = origin["parent_address"]
            if type(parent) is not str or origin.get("parent_process_version") != base_version:
                raise InvalidPersistence(f"base of {address}: malformed fork origin")
            try:
                return self._resolve(parent, version, depth + 1, asked or address)
            except PersistenceNotFound:
                pass  # named below with the child's own retained range
        oldest = self._oldest(address, base, 0)
        raise PersistenceNotFound(
            f"{asked or address}: version {version} is not retained (retained versions {oldest}..{head_version})")

    def _oldest(self, address: str, base: dict[str, Any], depth: int) -> int:
        """The oldest version ``address`` can show: its base's, or its fork parent's oldest."""
        origin = base["origin"]
        if type(origin) is dict and origin.get("origin") == "fork" and depth < _MAX_FORK_DEPTH:
            parent = origin.get("parent_address")
            if type(parent) is str and self._store.stored_head(parent) is not None:
                return self._oldest(parent, self._base(parent), depth + 1)
        oldest: int = base["process_version"]
        return oldest

    def _base(self, address: str) -> dict[str, Any]:
        raw = self._store.engine.get(CF_RECORD, keys.base_key(address))
        if raw is None:
            raise InvalidPersistence(f"base of {address} is missing")
        cached = self._bases.get(address)
        if cached is not None and cached[0] == raw:
            return cached[1]
        base = records.decode_base(raw, address)
        # The snapshot a created base carries is not needed here: keep the fields only.
        summary = {name: base[name] for name in ("process_version", "root_hash", "covered_position")}
        origin = base["origin"]
        summary["origin"] = {k: v for k, v in origin.items() if k != "process_snapshot"} if type(origin) is dict else origin
        with self._lock:
            if len(self._bases) >= 1024:
                self._bases.clear()
            self._bases[address] = (raw, summary)
        return summary

    def _head_time(self, address: str, head: dict[str, Any]) -> int | None:
        position = head["position"]
        if position is None:
            return None
        raw = self._store.engine.get(CF_RECORD, keys.transaction_key(address, position))
        if raw is None:
            return None  # a cut head: the base stands for it
        committed_at: int = records.decode_transaction_root(address, position, raw)["committed_at"]
        return committed_at

    # ------------------------------------------------------------------ trees
    def root(self, root_hash: str, address: str) -> Node:
        """The tree whose root digest is ``root_hash``, rebuilt from stored chunks."""
        if not codec.is_hex_hash(root_hash):
            raise InvalidPersistence(f"{address}: malformed root hash")
        engine = self._store.engine
        with engine.lock:
            engine.check()
        try:
            # Each read takes the store lock on its own: a large tree is not read while
            # holding commits back (chunks are immutable, so no read can see a torn one).
            return tree.load_container(bytes.fromhex(root_hash), self.fetch_chunk, self._chunks)
        except tree.ChunkError as exc:
            raise InvalidPersistence(f"{address}: stored tree {root_hash[:16]}: {exc}") from None

    def fetch_chunk(self, digest: bytes) -> bytes | None:
        """A stored chunk's bytes (None when absent)."""
        engine = self._store.engine
        with engine.lock:
            return engine.get(CF_NODES, keys.node_key(digest))

    def at(self, address: str, version: int, limits: Limits | None = None) -> VersionView:
        """A read-only view of the retained ``version`` of ``address``."""
        return VersionView(self, self.resolve(address, version), limits or Limits())

    def recent(self, address: str, limit: int, path_prefix: str | None = None) -> list[Transaction]:
        """The newest ``limit`` (1-4096) retained transactions of ``address``, newest
        first (only those touching ``path_prefix`` or below), each verified as it is read.

        Transactions are read newest first and the read stops at ``limit`` matches, so
        it costs O(limit) records when the matches are recent, whatever the history's
        length. With a path prefix, at most ``limit`` + :data:`_RECENT_WALK` records are
        walked that way; older matches then come from the path index (which names
        exactly the paths every retained transaction touched).
        """
        if type(limit) is not int or not 1 <= limit <= MAX_QUERY_LIMIT:
            raise ResourceLimitExceeded("persistence query transactions")
        validate_address(address)
        segments = parse(path_prefix) if path_prefix is not None else ()
        store = self._store
        with store.engine.lock:
            store.engine.check()
            head = store.stored_head(address)
            if head is None:
                raise PersistenceNotFound(address)
            if head["position"] is None:
                return []
            base = self._base(address)
            first = 0 if base["covered_position"] is None else base["covered_position"] + 1
            out: list[Transaction] = []
            position = head["position"]
            walk_until = max(first, position - limit - _RECENT_WALK + 1)
            while position >= walk_until and len(out) < limit:
                record = self._transaction(address, position)
                if not segments or _touches(record, segments):
                    out.append(_transaction(address, position, record))
                position -= 1
            if not segments or len(out) >= limit or position < first:
                return out
            older = [p for p in store.history.indexed_positions(address, segments, None) if p <= position]
            # The newest of them, as many as are still asked for (all when fewer).
            for position in reversed(older[max(0, len(older) - (limit - len(out))):]):
                record = self._transaction(address, position)
                if not _touches(record, segments):
                    raise InvalidPersistence(f"path index of {address} names transaction {position} wrongly; reset_index")
                out.append(_transaction(address, position, record))
            return out

    def _transaction(self, address: str, position: int) -> dict[str, Any]:
        raw = self._store.engine.get(CF_RECORD, keys.transaction_key(address, position))
        if raw is None:
            raise InvalidPersistence(f"transaction {position} of {address} is missing")
        return records.decode_transaction(address, position, raw)

    def diff(self, address: str, before: int, after: int) -> list[Difference]:
        """The paths whose values differ from version ``before`` to version ``after``
        (either order), walking only the stored chunks whose digests differ."""
        with self._store.engine.lock:
            old = self.resolve(address, before)
            new = self.resolve(address, after)
        if old.root_hash == new.root_hash:
            return []
        try:
            return diff_trees(old.root_hash, new.root_hash, self.fetch_chunk,
                              lambda digest: self.root(digest.hex(), address).to_value(), address)
        except InvalidPersistence:
            # The chunks are read after resolving, without the lock: a cut and sweep in
            # between makes a version no longer retained (what resolving it again says),
            # not damage. Both still retained: the damage stands.
            with self._store.engine.lock:
                self.resolve(address, before)
                self.resolve(address, after)
            raise


def _touches(record: dict[str, Any], segments: tuple[str, ...]) -> bool:
    return any(parse(p)[: len(segments)] == segments for p in record["touched_paths"])


def _transaction(address: str, position: int, record: dict[str, Any]) -> Transaction:
    return Transaction(
        address, position, record["event_hash"], record["previous_hash"], record["process_version_before"],
        record["process_version_after"], [m.plain() for m in record["mutations"]], list(record["touched_paths"]),
        record["source"], record["resulting_root_hash"], record["committed_at"], record["script"],
        record["output_summary"])


class VersionView:
    """A read-only view of one retained version: ``version``, ``root_hash``,
    ``committed_at`` and the observation methods of a process at that version.

    The tree is rebuilt from stored chunks on first use. Mount paths answer as a stored
    state with no provider attached does (a mount root is its unattached record; below
    it, ``mount_unavailable``): a view never reads a folder as it is now.
    """

    def __init__(self, versions: Versions, retained: RetainedVersion, limits: Limits) -> None:
        self._versions = versions
        self._retained = retained
        self._limits = limits
        self._process: Process | None = None

    @property
    def address(self) -> str:
        return self._retained.address

    @property
    def version(self) -> int:
        return self._retained.version

    @property
    def root_hash(self) -> str:
        return self._retained.root_hash

    @property
    def committed_at(self) -> int | None:
        """When this version was committed (ms since the Unix epoch, UTC); None for a base."""
        return self._retained.committed_at

    @property
    def root(self) -> Node:
        return self._state().root

    def _state(self) -> Process:
        process = self._process
        if process is None:
            try:
                root = self._versions.root(self.root_hash, self.address)
            except InvalidPersistence:
                # Cut away and swept since this view was made: no longer retained (what
                # resolving it again says), not damage. Still retained: the damage stands.
                self._versions.resolve(self.address, self.version)
                raise
            process = self._process = Process(self.address, root, self.version, self._limits)
        return process

    def read(self, path: str) -> Any:
        return self._state().read(path)

    def discover(self, path: str) -> list[str]:
        return self._state().discover(path)

    def stat(self, path: str) -> dict[str, Any] | None:
        return self._state().stat(path)

    def node_hash(self, path: str) -> str | None:
        return self._state().node_hash(path)

    def __repr__(self) -> str:
        return f"VersionView({self.address!r}, version={self.version}, root_hash={self.root_hash[:16]}…)"
