"""The history of record: rebuilding and validating an address, and querying it.

A process's history is a **base** (created, imported, fork or snapshot) followed by
**transactions**, each chained to its predecessor by hash. :meth:`History.rebuild`
reads it back record by record without running guest code: it restores the base,
replays every transaction's mutations, re-validates the root after each and checks
every hash, position and version. Any inconsistency is ``InvalidPersistence``. A fork's
base names its parent's exact head, so a child rebuilds its parent's history up to that
boundary first (at most :data:`MAX_FORK_DEPTH` deep).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from ..activation import compile_check
from ..errors import (
    InvalidPersistence,
    InvalidValue,
    PersistenceNotFound,
    ResourceLimitExceeded,
    SvitError,
)
from ..limits import Limits
from ..mutation import Mutation
from ..namespace import validate_root
from ..paths import parse, validate_address
from ..process import Process
from ..tree import Node
from . import codec, keys, records
from .engine import StorageEngine
from .keys import CF_INDEX, CF_RECORD
from .records import Head, State, Transaction

__all__ = ["MAX_FORK_DEPTH", "MAX_QUERY_LIMIT", "Replay", "History"]

MAX_FORK_DEPTH = 64
MAX_QUERY_LIMIT = 4096

#: Replays a transaction's mutations on a root (``root, mutations, what -> new root``).
Replay = Callable[[Node, "list[Mutation]", str], Node]


def _compiler(limits: Limits) -> Callable[[str, Any], None]:
    return lambda name, script: compile_check(name, script.source, limits)


class History:
    """Reads and validates the history of record kept in ``engine``.

    ``replay`` applies one transaction's mutations (the store's one apply), and
    ``restore_limits`` gives what restoring a stored snapshot may cost at most.
    """

    def __init__(self, engine: StorageEngine, replay: Replay, restore_limits: Callable[[], Limits]) -> None:
        self.engine = engine
        self.replay = replay
        self.restore_limits = restore_limits

    def children(self, address: str) -> list[str]:
        """Fork children of ``address``: the child index, and the (irreplaceable) fork references.

        The index is derived and may be lost before ``reset_index`` runs; the refusal to
        remove, cut or replace a referenced address must not depend on it alone.
        """
        prefix = keys.children_prefix(address)
        found = {keys.unescape(key[len(prefix):]) for key, _ in self.engine.scan(CF_INDEX, prefix)}
        for key, raw in self.engine.scan(CF_RECORD, b"f/"):
            child = keys.unescape(key[2:])
            ref = records.decode_fork_reference(raw, child)
            if ref["parent_address"] == address:
                found.add(child)
        return sorted(found)

    # ------------------------------------------------------------------ nodes

    def transactions(self, address: str, after: int | None = None) -> Iterator[tuple[int, dict[str, Any]]]:
        """(position, verified envelope) in position order, starting after ``after``."""
        prefix = keys.transaction_prefix(address)
        start = prefix + keys.u64(after + 1) if after is not None else None
        for key, raw in self.engine.scan(CF_RECORD, prefix, start):
            suffix = key[len(prefix):]
            if len(suffix) != 8:
                raise InvalidPersistence(f"{address}: malformed transaction key")
            position = keys.from_u64(suffix)
            yield position, records.decode_transaction(address, position, raw)

    def rebuild(self, address: str, stop: Head | None, depth: int) -> State:
        """The state at the head (or at ``stop``), validated record by record."""
        raw = self.engine.get(CF_RECORD, keys.base_key(address))
        if raw is None:
            if depth:
                raise InvalidPersistence(f"fork parent {address} is missing")
            raise PersistenceNotFound(address)
        what = f"base of {address}"
        base = records.decode_base(raw, address)
        covered, anchor, origin = base["covered_position"], base["anchor_event_hash"], base["origin"]
        kind = origin.get("origin") if type(origin) is dict else None
        if kind in ("created", "imported"):
            if list(origin) != ["origin", "process_snapshot"] or covered is not None or anchor is not None:
                raise InvalidPersistence(f"{what}: malformed {kind} origin")
            process = self.restore(origin["process_snapshot"], what)
            if kind == "created" and process.version != 0:
                raise InvalidPersistence(f"{what}: a created base must be at version 0")
        elif kind == "snapshot":
            if list(origin) != ["origin", "snapshot_hash"] or not codec.is_hex_hash(origin["snapshot_hash"]):
                raise InvalidPersistence(f"{what}: malformed snapshot origin")
            snapshot = self.load_snapshot(address, origin["snapshot_hash"])
            if snapshot["covered_position"] != covered or snapshot["head_hash"] != anchor:
                raise InvalidPersistence(f"{what}: snapshot does not cover the base boundary")
            process = self.restore(snapshot["process_snapshot"], what)
        elif kind == "fork":
            expected = ["origin", "parent_address", "parent_position", "parent_head_hash", "parent_process_version",
                        "parent_root_hash"]
            if list(origin) != sorted(expected) or covered is not None or anchor is not None:
                raise InvalidPersistence(f"{what}: malformed fork origin")
            if depth >= MAX_FORK_DEPTH:
                raise InvalidPersistence(f"{what}: fork chain is deeper than {MAX_FORK_DEPTH}")
            self.check_fork_ref(address, origin)
            parent_address = origin["parent_address"]
            try:
                validate_address(parent_address)
            except SvitError:
                raise InvalidPersistence(f"{what}: malformed parent address") from None
            parent = self.rebuild(parent_address, Head(origin["parent_position"], origin["parent_head_hash"]), depth + 1)
            if parent.version != origin["parent_process_version"] or parent.root.hash != origin["parent_root_hash"]:
                raise InvalidPersistence(f"{what}: parent state at the boundary does not match")
            try:
                process = Process(parent_address, parent.root, parent.version, parent.limits).fork(address)
            except SvitError as exc:
                raise InvalidPersistence(f"{what}: fork does not rebuild: {exc.message}") from None
        else:
            raise InvalidPersistence(f"{what}: unknown origin")
        if process.address != address or process.version != base["process_version"] or process.root_hash != base["root_hash"]:
            raise InvalidPersistence(f"{what}: rebuilt state does not match the base")
        version, root, limits = process.version, process.root, process.limits
        head = Head(covered, base["base_hash"])
        compile_script = _compiler(limits)
        if stop is None or stop.position is not None:
            for position, record in self.transactions(address, covered):
                expected_position = 0 if head.position is None else head.position + 1
                if position != expected_position:
                    raise InvalidPersistence(f"{address}: transaction {position} does not follow position {head.position}")
                if stop is not None and stop.position is not None and position > stop.position:
                    break
                what = f"transaction {position} of {address}"
                if record["previous_hash"] != head.hash:
                    raise InvalidPersistence(f"{what}: previous hash does not match the chain")
                if record["process_version_before"] != version:
                    raise InvalidPersistence(f"{what}: version does not follow the process version")
                candidate = self.replay(root, record["mutations"], what)
                try:
                    validate_root(candidate, address, limits, compile_script, previous=root, error=InvalidPersistence)
                except InvalidPersistence:
                    raise
                except SvitError as exc:
                    raise InvalidPersistence(f"{what}: resulting root is invalid: {exc.message}") from None
                if candidate.hash != record["resulting_root_hash"]:
                    raise InvalidPersistence(f"{what}: resulting root hash does not match")
                root, version = candidate, record["process_version_after"]
                head = Head(position, record["event_hash"])
        if stop is not None and head != stop:
            raise InvalidPersistence(f"{address}: fork boundary {stop.position} is not in the retained history")
        return State(version, root, limits, head, base["base_hash"])

    def restore(self, data: Any, what: str) -> Process:
        if type(data) is not bytes:
            raise InvalidPersistence(f"{what}: process snapshot is not bytes")
        try:
            return Process.restore(data, restore_limits=self.restore_limits())
        except SvitError as exc:
            raise InvalidPersistence(f"{what}: process snapshot does not restore: {exc.message}") from None

    def load_snapshot(self, address: str, snapshot_hash: str) -> dict[str, Any]:
        raw = self.engine.get(CF_RECORD, keys.snapshot_key(address, snapshot_hash))
        if raw is None:
            raise InvalidPersistence(f"store snapshot {snapshot_hash[:16]} of {address} is missing")
        return records.decode_snapshot_record(raw, address, snapshot_hash)

    def check_fork_ref(self, address: str, origin: dict[str, Any]) -> None:
        raw = self.engine.get(CF_RECORD, keys.fork_key(address))
        what = f"fork reference of {address}"
        if raw is None:
            raise InvalidPersistence(f"{what} is missing")
        ref = records.decode_fork_reference(raw, address)
        fields = ("parent_address", "parent_position", "parent_head_hash", "parent_process_version", "parent_root_hash")
        if ref["fork_format"] != codec.FORK_FORMAT or ref["child_address"] != address or any(
            ref[name] != origin[name] for name in fields
        ):
            raise InvalidPersistence(f"{what} does not match the fork base")

    def query(self, address: str, after_position: int | None, through_position: int | None,
               path_prefix: str | None, source: str | None, version_from: int | None, version_through: int | None,
               transaction_hash: str | None, limit: int) -> list[Transaction]:
        if type(limit) is not int or not 1 <= limit <= MAX_QUERY_LIMIT:
            raise ResourceLimitExceeded("persistence query transactions")
        for name, value in (("after_position", after_position), ("through_position", through_position),
                            ("version_from", version_from), ("version_through", version_through)):
            if value is not None and not codec.is_u64(value):
                raise InvalidValue(f"{name} must be an unsigned 64-bit integer")
        prefix_segments = parse(path_prefix) if path_prefix is not None else ()
        with self.engine.lock:
            self.engine.check()
            raw = self.engine.get(CF_RECORD, keys.head_key(address))
            if raw is None:
                raise PersistenceNotFound(address)
            records.decode_head(raw, address)
            if prefix_segments:
                positions = self.indexed_positions(address, prefix_segments, after_position)
                found: Iterator[tuple[int, dict[str, Any]]] = (
                    (p, self.load_transaction(address, p)) for p in positions
                )
            else:
                found = self.transactions(address, after_position)
            out: list[Transaction] = []
            for position, record in found:
                if through_position is not None and position > through_position:
                    break
                if source is not None and record["source"] != source:
                    continue
                produced = record["process_version_after"]
                if version_from is not None and produced < version_from:
                    continue
                if version_through is not None and produced > version_through:
                    continue
                if transaction_hash is not None and record["event_hash"] != transaction_hash:
                    continue
                if prefix_segments and not any(
                    parse(p)[: len(prefix_segments)] == prefix_segments for p in record["touched_paths"]
                ):
                    raise InvalidPersistence(f"path index of {address} names transaction {position} wrongly; reset_index")
                out.append(Transaction(
                    address, position, record["event_hash"], record["previous_hash"], record["process_version_before"],
                    produced, [m.plain() for m in record["mutations"]], list(record["touched_paths"]),
                    record["source"], record["resulting_root_hash"], record["committed_at"],
                    record["script"], record["output_summary"]))
                if len(out) >= limit:
                    break
            return out

    def indexed_positions(self, address: str, segments: tuple[str, ...], after: int | None) -> list[int]:
        base = keys.path_prefix_key(address)
        text = "/" + "/".join(segments)
        positions: set[int] = set()
        for key, _ in self.engine.scan(CF_INDEX, base + keys.escape(text)):
            rest = key[len(base):]
            path = keys.unescape(rest[:-10])
            if rest[-10:-8] != keys.SEP or not (path == text or path.startswith(text + "/")):
                continue
            position = keys.from_u64(rest[-8:])
            if after is None or position > after:
                positions.add(position)
        return sorted(positions)

    def load_transaction(self, address: str, position: int) -> dict[str, Any]:
        raw = self.engine.get(CF_RECORD, keys.transaction_key(address, position))
        if raw is None:
            raise InvalidPersistence(f"path index of {address} names missing transaction {position}; reset_index")
        return records.decode_transaction(address, position, raw)

    def fork_depth(self, address: str) -> int:
        depth = 0
        current = address
        while depth <= MAX_FORK_DEPTH:
            raw = self.engine.get(CF_RECORD, keys.fork_key(current))
            if raw is None:
                return depth
            ref = records.decode_fork_reference(raw, current)
            current = ref["parent_address"]
            depth += 1
        return depth
