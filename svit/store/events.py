"""The durable reasoning event log: canonical events kept in the store, outside process state.

Reasoning history is not process state (reference §10.8): snapshots, archives and
transactions never carry it. :class:`StoreEventLog` implements the
:class:`~svit.thread.EventLog` interface over a :class:`~svit.store.ProcessStore`,
plus a compaction checkpoint store and thread-history retention.

Records (all irreplaceable, all sealed maps of :func:`svit.cbor.seal`: the one
deterministic encoding, keys in UTF-8 byte order, with a hash field holding the BLAKE3
of the encoding of the other fields; every read re-checks the hash, the deterministic
bytes and the key the record sits under, else ``InvalidPersistence``). Fields are
listed in key order:

* **event** ``e/<address>SEP<session>SEP<u64 sequence>``:
  ``{data, event_format: "svit-thread-event@2", event_hash, process_id, sequence,
  session_id, type}``. Sequences start at 1, are gapless while retained, and are never
  reused (appends after a cut continue from the last sequence).
* **checkpoint** ``k/<address>SEP<session>SEP<u64 through>``:
  ``{checkpoint_format: "svit-thread-checkpoint@2", checkpoint_hash, process_id,
  session_id, summary, through}``: events ``1..through`` are summarised by ``summary``
  (plain JSON-like data). Checkpoints only move forward; re-recording the latest one
  byte-identically is a no-op.
* **partition** ``j/<address>SEP<session>``:
  ``{fork_point, parent_process_id, partition_format: "svit-thread-partition@2",
  partition_hash, process_id, retained_from, session_id}``. Absent means "nothing cut,
  nothing shared" (``retained_from`` 1).

A partition's **view** is what reading ``(address, session)`` yields: with a parent,
the parent's view of sequences ``retained_from..fork_point`` (relabelled with the
reader's address), then the partition's own events from ``fork_point + 1``; without
one, its own events from ``retained_from``. The last sequence of a view is the highest
of its own last event, ``fork_point`` and ``retained_from - 1``.

Retention: ``cut_thread_events(through)`` deletes events ``1..through`` in one synced
batch. It refuses a boundary that is not a sequence of the view
(``ThreadHistoryBoundary``), one past the latest checkpoint (``ThreadHistoryUncompacted``)
and one a living fork still reads (``ThreadHistoryPinned``); a boundary below
``retained_from`` is a no-op. The same batch moves ``retained_from`` and drops the
checkpoints the cut makes unreachable (those at or below ``through`` other than the
latest).

Forks: a durable fork (``ProcessStore.fork``) shares the parent's current session
instead of copying it: the child gets a partition record naming the parent and the fork
point (the parent's last sequence), keeps the session id, inherits the parent's
``retained_from`` and a copy of its latest checkpoint (so the child sees the
conversation exactly as the parent did). The parent's events are immutable, so the
shared prefix never changes; it pins the parent's cuts until the child cuts past its
fork point, is removed, or is detached by a process-history cut (``DurableProcess.cut``
and ``install_archived``, which first copy the inherited events into the child, so a
parent that is then removed takes nothing the child reads).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Protocol

from .. import cbor, tree
from ..errors import (
    InvalidPersistence,
    InvalidValue,
    PersistenceNotFound,
    PersistenceUnavailable,
    ResourceLimitExceeded,
    SvitError,
    ThreadHistoryBoundary,
    ThreadHistoryPinned,
    ThreadHistoryUncompacted,
)
from ..thread import MAX_WINDOW, Checkpoint, Event, Message, project_messages, read_all
from . import codec, keys
from .engine import StorageEngine, WriteBatch
from .keys import CF_RECORD

__all__ = [
    "EVENT_FORMAT",
    "EVENT_FIELDS",
    "HASH_FIELD",
    "CHECKPOINT_FORMAT",
    "CHECKPOINT_FIELDS",
    "CHECKPOINT_HASH",
    "PARTITION_FORMAT",
    "PARTITION_FIELDS",
    "PARTITION_HASH",
    "MAX_EVENT_BYTES",
    "MAX_CHECKPOINT_BYTES",
    "MAX_SESSION_BYTES",
    "MAX_SHARE_DEPTH",
    "encode_event",
    "decode_event",
    "encode_checkpoint",
    "decode_checkpoint",
    "Partition",
    "encode_partition",
    "decode_partition",
    "HistoryStore",
    "StoreEventLog",
    "stage_fork_share",
    "stage_thread_detach",
]

EVENT_FORMAT = "svit-thread-event@2"
EVENT_FIELDS = ("event_format", "process_id", "session_id", "sequence", "type", "data")
HASH_FIELD = "event_hash"
CHECKPOINT_FORMAT = "svit-thread-checkpoint@2"
CHECKPOINT_FIELDS = ("checkpoint_format", "process_id", "session_id", "through", "summary")
CHECKPOINT_HASH = "checkpoint_hash"
PARTITION_FORMAT = "svit-thread-partition@2"
PARTITION_FIELDS = ("partition_format", "process_id", "session_id", "retained_from", "parent_process_id", "fork_point")
PARTITION_HASH = "partition_hash"
MAX_EVENT_BYTES = 16 * 1024 * 1024
MAX_CHECKPOINT_BYTES = 16 * 1024 * 1024
MAX_SESSION_BYTES = 256
#: Bound on a chain of fork-shared prefixes (the store's persistence fork depth).
MAX_SHARE_DEPTH = 64
_U64_MAX = 2**64 - 1


# ---------------------------------------------------------------------- sealed records


def _seal(body: dict[str, Any], hash_field: str) -> bytes:
    """The sealed record of ``body`` (:func:`svit.cbor.seal`)."""
    return cbor.seal(body, hash_field)[0]


def _unseal(raw: bytes, fields: tuple[str, ...], hash_field: str, what: str) -> dict[str, Any]:
    """The verified body of a sealed record: one deterministic item, exact fields, hash."""
    decoded = codec.decode_record(raw, fields, hash_field, what)
    return {name: decoded[name] for name in fields}


def encode_event(event: Event) -> bytes:
    """The canonical record of ``event`` (hash included)."""
    return _seal({
        "event_format": EVENT_FORMAT,
        "process_id": event.process_id,
        "session_id": event.session_id,
        "sequence": event.sequence,
        "type": event.type,
        "data": event.data,
    }, HASH_FIELD)


def decode_event(raw: bytes, address: str, session_id: str, sequence: int) -> Event:
    """Verify a stored record against its key and hash; any mismatch is InvalidPersistence."""
    what = f"reasoning event {sequence} of {address} (session {session_id})"
    body = _unseal(raw, EVENT_FIELDS, HASH_FIELD, what)
    if body["event_format"] != EVENT_FORMAT:
        raise InvalidPersistence(f"{what}: unknown format")
    if (body["process_id"], body["session_id"], body["sequence"]) != (address, session_id, sequence):
        raise InvalidPersistence(f"{what}: record does not belong under its key")
    if type(body["type"]) is not str or type(body["data"]) is not dict:
        raise InvalidPersistence(f"{what}: malformed type or data")
    return Event(sequence, address, session_id, body["type"], body["data"])


def encode_checkpoint(checkpoint: Checkpoint) -> bytes:
    """The canonical record of ``checkpoint`` (hash included)."""
    return _seal({
        "checkpoint_format": CHECKPOINT_FORMAT,
        "process_id": checkpoint.process_id,
        "session_id": checkpoint.session_id,
        "through": checkpoint.through,
        "summary": checkpoint.summary,
    }, CHECKPOINT_HASH)


def decode_checkpoint(raw: bytes, address: str, session_id: str, through: int) -> Checkpoint:
    """Verify a stored checkpoint against its key and hash; any mismatch is InvalidPersistence."""
    what = f"compaction checkpoint through {through} of {address} (session {session_id})"
    body = _unseal(raw, CHECKPOINT_FIELDS, CHECKPOINT_HASH, what)
    if body["checkpoint_format"] != CHECKPOINT_FORMAT:
        raise InvalidPersistence(f"{what}: unknown format")
    if (body["process_id"], body["session_id"], body["through"]) != (address, session_id, through) or through < 1:
        raise InvalidPersistence(f"{what}: record does not belong under its key")
    return Checkpoint(address, session_id, through, body["summary"])


@dataclass(frozen=True)
class _SessionState:
    """What one read of a partition's records found (see ``StoreEventLog._state``)."""

    partition: Partition
    latest: tuple[Checkpoint, bytes] | None  # the latest checkpoint and its stored bytes
    last: int


@dataclass(frozen=True)
class Partition:
    """What the partition record of one (address, session) says; the default is "no record"."""

    retained_from: int = 1
    parent_process_id: str | None = None
    fork_point: int = 0
    stored: bool = False


def encode_partition(address: str, session_id: str, partition: Partition) -> bytes:
    return _seal({
        "partition_format": PARTITION_FORMAT,
        "process_id": address,
        "session_id": session_id,
        "retained_from": partition.retained_from,
        "parent_process_id": partition.parent_process_id,
        "fork_point": partition.fork_point,
    }, PARTITION_HASH)


def decode_partition(raw: bytes, address: str, session_id: str) -> Partition:
    """Verify a partition record: key, hash, and the shape invariants writers keep."""
    what = f"thread partition of {address} (session {session_id})"
    body = _unseal(raw, PARTITION_FIELDS, PARTITION_HASH, what)
    if body["partition_format"] != PARTITION_FORMAT:
        raise InvalidPersistence(f"{what}: unknown format")
    if (body["process_id"], body["session_id"]) != (address, session_id):
        raise InvalidPersistence(f"{what}: record does not belong under its key")
    retained, parent, fork_point = body["retained_from"], body["parent_process_id"], body["fork_point"]
    if not (codec.is_u64(retained) and retained >= 1 and codec.is_u64(fork_point)):
        raise InvalidPersistence(f"{what}: malformed boundaries")
    if parent is None:
        if fork_point != 0:
            raise InvalidPersistence(f"{what}: a fork point without a parent")
    # A link is kept only while it shares at least one event (retained_from..fork_point).
    elif type(parent) is not str or parent == address or not 1 <= retained <= fork_point:
        raise InvalidPersistence(f"{what}: malformed shared prefix")
    return Partition(retained, parent, fork_point, True)


# ---------------------------------------------------------------------- argument checks


def _check_partition(process_id: Any, session_id: Any) -> None:
    if type(process_id) is not str or not process_id:
        raise InvalidValue("event log process id must be non-empty text")
    if type(session_id) is not str or not session_id or len(session_id.encode("utf-8", "surrogatepass")) > MAX_SESSION_BYTES:
        raise InvalidValue(f"session id must be 1-{MAX_SESSION_BYTES} bytes of text")


def _check_limit(limit: Any, name: str) -> int:
    if type(limit) is not int or not 1 <= limit <= MAX_WINDOW:
        raise ResourceLimitExceeded(name)
    return limit


def _check_boundary(through: Any) -> int:
    if type(through) is not int:
        raise ThreadHistoryBoundary("the boundary must be an integer sequence number")
    if not 1 <= through <= _U64_MAX:
        raise ThreadHistoryBoundary(f"{through} is not a sequence number (they start at 1)")
    return through


def _plain_summary(summary: Any) -> Any:
    """The summary as canonical plain data; anything that is not JSON-like is refused."""
    try:
        return tree.from_value(summary, scripts_allowed=False).to_value()
    except SvitError as exc:
        raise InvalidValue(f"a checkpoint summary must be plain JSON-like data: {exc.detail}") from None


class HistoryStore(Protocol):
    """What the thread log needs of the process store (a ``ProcessStore`` provides it)."""

    @property
    def engine(self) -> StorageEngine: ...

    def stored_head(self, address: str) -> dict[str, Any] | None: ...

    def fork_children(self, address: str) -> list[str]: ...

    def fork_parent(self, address: str) -> str | None: ...


class StoreEventLog:
    """An :class:`~svit.thread.EventLog` kept in a :class:`~svit.store.ProcessStore`,
    with compaction checkpoints and thread-history retention.

    Stateless apart from the store: several instances over one store agree, because
    every decision (next sequence, boundaries, pins) is read from the store under the
    store's lock, and every change is one synced write batch.
    """

    def __init__(self, store: HistoryStore) -> None:
        self._store = store
        self._engine = store.engine

    @property
    def store(self) -> HistoryStore:
        return self._store

    # ------------------------------------------------------------------ EventLog
    def append(self, process_id: str, session_id: str, type: str, data: dict[str, Any]) -> Event:
        """Append one event for an existing address; acknowledged only after a synced write."""
        _check_partition(process_id, session_id)
        if not isinstance(type, str) or not type or not isinstance(data, dict):
            raise InvalidValue("an event needs a type (text) and data (a map)")
        try:  # what the loop and hosts read back: JSON values only (no bytes, NaN or sets)
            json.dumps(data, allow_nan=False)
        except (TypeError, ValueError):
            raise InvalidValue("event data is not plain JSON-like data") from None
        store = self._store
        with store.engine.lock:
            store.engine.check()
            self._require(process_id)
            sequence = self._last(process_id, session_id) + 1
            event = Event(sequence, process_id, session_id, type, data)
            try:
                raw = encode_event(event)
            except Exception as exc:
                raise InvalidValue(f"event data cannot be recorded: {exc.__class__.__name__}") from None
            if len(raw) > MAX_EVENT_BYTES:
                raise ResourceLimitExceeded("thread event bytes")
            try:  # never write a record that would not read back
                stored = decode_event(raw, process_id, session_id, sequence)
            except InvalidPersistence:
                raise InvalidValue("event data is not plain JSON-like data") from None
            batch = store.engine.batch()
            batch.put(CF_RECORD, keys.thread_event_key(process_id, session_id, sequence), raw)
            store.engine.write(batch)
            return stored

    def events(self, process_id: str, session_id: str, after: int = 0, limit: int = MAX_WINDOW) -> list[Event]:
        """Up to ``limit`` (1-4096) retained events with sequence > ``after``, in sequence order."""
        _check_partition(process_id, session_id)
        _check_limit(limit, "thread events")
        if type(after) is not int or not 0 <= after < _U64_MAX:
            raise InvalidValue("after must be a sequence number")
        with self._store.engine.lock:
            self._engine.check()
            self._last(process_id, session_id)  # the partition's records must agree
            return self._read(process_id, session_id, after, limit, process_id, 0)

    def recent(self, process_id: str, session_id: str, limit: int) -> list[Event]:
        """The newest ``limit`` (1-4096, else ``ResourceLimitExceeded("recent thread events")``) retained events."""
        _check_limit(limit, "recent thread events")
        _check_partition(process_id, session_id)
        with self._store.engine.lock:
            self._engine.check()
            last = self._last(process_id, session_id)
            return self._read(process_id, session_id, max(last - limit, 0), limit, process_id, 0)

    # ------------------------------------------------------------------ windows
    def recent_thread_events(self, process_id: str, session_id: str, limit: int) -> list[Event]:
        """The newest ``limit`` retained events (reference name; same as :meth:`recent`)."""
        return self.recent(process_id, session_id, limit)

    def recent_thread_messages(self, process_id: str, session_id: str, limit: int) -> list[Message]:
        """The newest ``limit`` (1-4096, else ``ResourceLimitExceeded("recent thread messages")``)
        messages projected from retained events, as recorded (failed turns included)."""
        _check_limit(limit, "recent thread messages")
        _check_partition(process_id, session_id)
        store = self._store
        with store.engine.lock:
            store.engine.check()
            state = self._state(process_id, session_id)
            floor, end = state.partition.retained_from, state.last  # end: the newest sequence not yet read
            found: list[Message] = []
            while len(found) < limit and end >= floor:
                start = max(floor, end - MAX_WINDOW + 1)
                page = self._read(process_id, session_id, start - 1, end - start + 1, process_id, 0)
                found = project_messages(page) + found
                end = start - 1
            return found[-limit:]

    # ------------------------------------------------------------------ checkpoints
    def record_checkpoint(self, process_id: str, session_id: str, through: int, summary: Any) -> Checkpoint:
        """Record that events ``1..through`` are summarised by ``summary``, in one synced write.

        ``through`` must be a sequence of the view (1..last appended) and not below the
        latest checkpoint (``ThreadHistoryBoundary``); the latest checkpoint recorded
        again byte-identically is returned unchanged (a retry is safe).
        """
        _check_partition(process_id, session_id)
        through = _check_boundary(through)
        plain = _plain_summary(summary)
        store = self._store
        with store.engine.lock:
            store.engine.check()
            self._require(process_id)
            state = self._state(process_id, session_id)
            if through > state.last:
                raise ThreadHistoryBoundary(f"{through} is beyond the last appended event {state.last}")
            checkpoint = Checkpoint(process_id, session_id, through, plain)
            try:
                raw = encode_checkpoint(checkpoint)
            except Exception as exc:
                raise InvalidValue(f"checkpoint summary cannot be recorded: {exc.__class__.__name__}") from None
            latest = state.latest
            if latest is not None and through <= latest[0].through:
                if through == latest[0].through and raw == latest[1]:
                    return latest[0]
                if through == latest[0].through:
                    raise ThreadHistoryBoundary(f"a different checkpoint already covers events 1-{through}")
                raise ThreadHistoryBoundary(
                    f"checkpoints only move forward: {through} is below compacted_through {latest[0].through}")
            if len(raw) > MAX_CHECKPOINT_BYTES:
                raise ResourceLimitExceeded("thread checkpoint bytes")
            try:  # never write a record that would not read back
                stored = decode_checkpoint(raw, process_id, session_id, through)
            except InvalidPersistence:
                raise InvalidValue("checkpoint summary is not plain JSON-like data") from None
            batch = store.engine.batch()
            batch.put(CF_RECORD, keys.thread_checkpoint_key(process_id, session_id, through), raw)
            store.engine.write(batch)
            return stored

    def checkpoint(self, process_id: str, session_id: str) -> Checkpoint | None:
        """The latest (highest-boundary) checkpoint of a session, verified, or None."""
        _check_partition(process_id, session_id)
        with self._store.engine.lock:
            self._engine.check()
            latest = self._state(process_id, session_id).latest
            return latest[0] if latest is not None else None

    def checkpoints(self, process_id: str, session_id: str) -> list[Checkpoint]:
        """Every stored checkpoint of a session, oldest boundary first, verified."""
        _check_partition(process_id, session_id)
        prefix = keys.thread_checkpoint_prefix(process_id, session_id)
        with self._store.engine.lock:
            self._engine.check()
            return [decode_checkpoint(raw, process_id, session_id, self._suffix(key, prefix, process_id))
                    for key, raw in self._engine.scan(CF_RECORD, prefix)]

    # ------------------------------------------------------------------ retention
    def retained_from(self, process_id: str, session_id: str) -> int:
        """The first retained sequence of a session (1 when nothing was cut)."""
        _check_partition(process_id, session_id)
        with self._store.engine.lock:
            self._engine.check()
            return self._state(process_id, session_id).partition.retained_from

    def compacted_through(self, process_id: str, session_id: str) -> int:
        """The highest checkpoint boundary of a session (0 when none); the record is verified."""
        latest = self.checkpoint(process_id, session_id)
        return latest.through if latest is not None else 0

    def cut_thread_events(self, process_id: str, session_id: str, through: int) -> int:
        """Delete events ``1..through`` of a session in ONE synced batch; returns ``retained_from``.

        Refusals change nothing: ``ThreadHistoryBoundary`` (not an integer, below 1,
        beyond the last appended sequence), ``ThreadHistoryUncompacted`` (no checkpoint
        covers ``through``), ``ThreadHistoryPinned`` (a living fork reads that prefix).
        A boundary below ``retained_from`` was already cut: nothing is written.
        """
        _check_partition(process_id, session_id)
        through = _check_boundary(through)
        store = self._store
        with store.engine.lock:
            store.engine.check()
            self._require(process_id)
            state = self._state(process_id, session_id)
            partition, last, latest = state.partition, state.last, state.latest
            if through > last:
                raise ThreadHistoryBoundary(f"{through} is beyond the last appended event {last}")
            if through < partition.retained_from:
                return partition.retained_from
            compacted = latest[0].through if latest is not None else 0
            if through > compacted:
                raise ThreadHistoryUncompacted(
                    f"events 1-{through} of session {session_id}: compacted_through is {compacted}")
            pin = self._pin(process_id, session_id, through)
            if pin is not None:
                child, shared = pin
                raise ThreadHistoryPinned(
                    f"fork {child} reads events {shared.retained_from}-{shared.fork_point} of session {session_id}")
            batch = store.engine.batch()
            prefix = keys.thread_session_prefix(process_id, session_id)
            for key, _ in store.engine.scan(CF_RECORD, prefix):
                if self._suffix(key, prefix, process_id) > through:
                    break
                batch.delete(CF_RECORD, key)
            checkpoint_prefix = keys.thread_checkpoint_prefix(process_id, session_id)
            for key, _ in store.engine.scan(CF_RECORD, checkpoint_prefix):
                boundary = self._suffix(key, checkpoint_prefix, process_id)
                if boundary > through:
                    break
                if boundary != compacted:  # superseded and now unreachable
                    batch.delete(CF_RECORD, key)
            still_shared = partition.parent_process_id is not None and through < partition.fork_point
            after = Partition(through + 1, partition.parent_process_id if still_shared else None,
                              partition.fork_point if still_shared else 0, True)
            batch.put(CF_RECORD, keys.thread_partition_key(process_id, session_id),
                      encode_partition(process_id, session_id, after))
            store.engine.write(batch)
            return through + 1

    # ------------------------------------------------------------------ extras
    def all_events(self, process_id: str, session_id: str) -> list[Event]:
        return read_all(self, process_id, session_id)

    def last_sequence(self, process_id: str, session_id: str) -> int:
        """The newest sequence of a partition (0 when nothing was ever appended or shared)."""
        _check_partition(process_id, session_id)
        with self._store.engine.lock:
            self._engine.check()
            return self._last(process_id, session_id)

    def sessions(self, process_id: str) -> list[str]:
        """Session ids with stored events, a partition record or a checkpoint for ``process_id``."""
        found: dict[bytes, str] = {}
        with self._store.engine.lock:
            self._engine.check()
            for prefix in (keys.thread_events_prefix(process_id), keys.thread_checkpoints_prefix(process_id)):
                for key, _ in self._engine.scan(CF_RECORD, prefix):
                    escaped = key[len(prefix):-(len(keys.SEP) + 8)]
                    found.setdefault(escaped, keys.unescape(escaped))
            prefix = keys.thread_partitions_prefix(process_id)
            for key, _ in self._engine.scan(CF_RECORD, prefix):
                escaped = key[len(prefix):]
                found.setdefault(escaped, keys.unescape(escaped))
        return [found[escaped] for escaped in sorted(found)]

    def continues(self, process_id: str, thread_process_id: str, session_id: str) -> bool:
        """True when ``process_id`` carries on ``session_id`` recorded by ``thread_process_id``:
        it is a durable fork of that process, or it already holds (or shares) that session."""
        _check_partition(process_id, session_id)
        store = self._store
        with store.engine.lock:
            store.engine.check()
            if store.fork_parent(process_id) == thread_process_id:
                return True
            return self._partition(process_id, session_id).stored or self._last(process_id, session_id) > 0

    # ------------------------------------------------------------------ internals (store lock held)
    def _require(self, process_id: str) -> None:
        if self._store.stored_head(process_id) is None:
            raise PersistenceNotFound(process_id)

    @staticmethod
    def _suffix(key: bytes, prefix: bytes, process_id: str) -> int:
        suffix = key[len(prefix):]
        if len(suffix) != 8:
            raise InvalidPersistence(f"{process_id}: malformed reasoning history key")
        return keys.from_u64(suffix)

    def _partition(self, process_id: str, session_id: str) -> Partition:
        raw = self._engine.get(CF_RECORD, keys.thread_partition_key(process_id, session_id))
        return Partition() if raw is None else decode_partition(raw, process_id, session_id)

    def _seek_last(self, prefix: bytes) -> bytes | None:
        """The last key under ``prefix`` (fixed-width u64 suffixes), or None."""
        return self._engine.last_key(CF_RECORD, prefix)

    def _own_last(self, process_id: str, session_id: str) -> int:
        prefix = keys.thread_session_prefix(process_id, session_id)
        key = self._seek_last(prefix)
        return 0 if key is None else self._suffix(key, prefix, process_id)

    def _state(self, process_id: str, session_id: str) -> _SessionState:
        """A partition's record, latest checkpoint and newest sequence, once they are seen
        to agree: a lost checkpoint or partition record is an error, never a silent fresh
        start (which would drop the summary or reuse sequence numbers)."""
        partition = self._partition(process_id, session_id)
        latest = self._latest_checkpoint(process_id, session_id)
        compacted = latest[0].through if latest is not None else 0
        last = max(self._own_last(process_id, session_id), partition.fork_point, partition.retained_from - 1)
        what = f"reasoning history of {process_id} (session {session_id})"
        if compacted < partition.retained_from - 1:
            raise InvalidPersistence(f"{what}: events 1-{partition.retained_from - 1} were cut but no checkpoint covers them")
        if compacted > last:
            raise InvalidPersistence(f"{what}: checkpoint {compacted} lies beyond the last event {last}")
        return _SessionState(partition, latest, last)

    def _last(self, process_id: str, session_id: str) -> int:
        """The newest sequence of a partition (its records checked, see :meth:`_state`)."""
        return self._state(process_id, session_id).last

    def _latest_checkpoint(self, process_id: str, session_id: str) -> tuple[Checkpoint, bytes] | None:
        prefix = keys.thread_checkpoint_prefix(process_id, session_id)
        key = self._seek_last(prefix)
        if key is None:
            return None
        raw = self._engine.get(CF_RECORD, key)
        if raw is None:  # pragma: no cover - the key was just seen under the store lock
            raise PersistenceUnavailable("checkpoint vanished during a read")
        return decode_checkpoint(raw, process_id, session_id, self._suffix(key, prefix, process_id)), raw

    def _read(self, process_id: str, session_id: str, after: int, limit: int, label: str, depth: int) -> list[Event]:
        """Up to ``limit`` events of the view with sequence > ``after``, labelled ``label``.

        Every record is verified; the result must be gapless from the first retained
        sequence asked for, else ``InvalidPersistence``.
        """
        partition = self._partition(process_id, session_id)
        expected = max(after + 1, partition.retained_from)
        found: list[Event] = []
        parent = partition.parent_process_id
        if parent is not None and expected <= partition.fork_point:
            if depth >= MAX_SHARE_DEPTH:
                raise InvalidPersistence(f"{process_id}: shared thread history is deeper than {MAX_SHARE_DEPTH}")
            want = min(limit, partition.fork_point - expected + 1)
            shared = self._read(parent, session_id, expected - 1, want, label, depth + 1)
            if len(shared) != want or (shared and shared[0].sequence != expected):
                raise InvalidPersistence(
                    f"reasoning event {expected} of {process_id} (session {session_id}), shared with {parent}, is missing")
            found.extend(shared)
            expected += want
            if len(found) >= limit:
                return found
        prefix = keys.thread_session_prefix(process_id, session_id)
        floor = max(partition.retained_from, partition.fork_point + 1 if parent is not None else 1)
        first = self._seek_first(prefix)
        if first is not None and self._suffix(first, prefix, process_id) < floor:
            raise InvalidPersistence(
                f"reasoning event {self._suffix(first, prefix, process_id)} of {process_id} (session {session_id}) "
                f"lies below its retained boundary {floor}")
        for key, raw in self._engine.scan(CF_RECORD, prefix, prefix + keys.u64(expected)):
            if self._suffix(key, prefix, process_id) != expected:
                raise InvalidPersistence(f"reasoning event {expected} of {process_id} (session {session_id}) is missing")
            event = decode_event(raw, process_id, session_id, expected)
            found.append(event if label == process_id else
                         Event(event.sequence, label, session_id, event.type, event.data))
            expected += 1
            if len(found) >= limit:
                break
        return found

    def _seek_first(self, prefix: bytes) -> bytes | None:
        for key, _ in self._engine.scan(CF_RECORD, prefix):
            return key
        return None

    def _pin(self, process_id: str, session_id: str, through: int) -> tuple[str, Partition] | None:
        """A living fork whose shared prefix of this session a cut through ``through`` would delete."""
        for child in self._store.fork_children(process_id):
            raw = self._engine.get(CF_RECORD, keys.thread_partition_key(child, session_id))
            if raw is None:
                continue
            shared = decode_partition(raw, child, session_id)
            if shared.parent_process_id == process_id and through >= shared.retained_from:
                return child, shared
        return None

    # ------------------------------------------------------------------ store hooks (store lock held)
    def stage_fork_share(self, batch: WriteBatch, parent_address: str, child_address: str, parent_thread: Any) -> int:
        """Stage the child's share of the parent's current session (same session id).

        Called by ``ProcessStore.fork`` under the store lock with the fork's own batch, so
        the share appears atomically with the child. Nothing is copied except the parent's
        latest checkpoint (relabelled): the child's partition record names the parent and
        the fork point. Returns how many events the child shares.
        """
        if not isinstance(parent_thread, dict):
            return 0
        session_id = parent_thread.get("session_id")
        if type(session_id) is not str or not session_id:
            return 0
        _check_partition(child_address, session_id)
        state = self._state(parent_address, session_id)
        partition, last, latest = state.partition, state.last, state.latest
        if not partition.stored and last == 0 and latest is None:
            return 0  # the session never recorded anything: the child starts it at 1
        shared = last - partition.retained_from + 1
        if shared > 0:
            # the fork point must be a readable event of the parent's view
            tail = self._read(parent_address, session_id, last - 1, 1, child_address, 0)
            if len(tail) != 1 or tail[0].sequence != last:
                raise InvalidPersistence(f"reasoning event {last} of {parent_address} (session {session_id}) is missing")
            child = Partition(partition.retained_from, parent_address, last, True)
        else:  # everything was cut: nothing to share, but sequences continue after it
            child = Partition(partition.retained_from, None, 0, True)
        batch.put(CF_RECORD, keys.thread_partition_key(child_address, session_id),
                  encode_partition(child_address, session_id, child))
        if latest is not None:
            copy = Checkpoint(child_address, session_id, latest[0].through, latest[0].summary)
            batch.put(CF_RECORD, keys.thread_checkpoint_key(child_address, session_id, copy.through), encode_checkpoint(copy))
        return max(shared, 0)

    def stage_thread_detach(self, batch: WriteBatch, address: str) -> int:
        """Stage copies of every event ``address`` reads from a parent, and drop its links.

        Called (under the store lock, in the operation's own batch) before an operation
        that deletes the address's fork reference: without the reference the parent may
        be removed, so the child must hold what it reads. Returns the number copied.
        """
        prefix = keys.thread_partitions_prefix(address)
        copied = 0
        for key, raw in list(self._engine.scan(CF_RECORD, prefix)):
            session_id = keys.unescape(key[len(prefix):])
            partition = decode_partition(raw, address, session_id)
            if partition.parent_process_id is None:
                continue
            count = partition.fork_point - partition.retained_from + 1
            for event in self._read(address, session_id, partition.retained_from - 1, count, address, 0)[:count]:
                batch.put(CF_RECORD, keys.thread_event_key(address, session_id, event.sequence), encode_event(event))
                copied += 1
            batch.put(CF_RECORD, key, encode_partition(address, session_id, Partition(partition.retained_from, None, 0, True)))
        return copied


def stage_fork_share(store: HistoryStore, batch: WriteBatch, parent_address: str, child_address: str,
                     parent_thread: Any) -> int:
    """:meth:`StoreEventLog.stage_fork_share` over ``store``."""
    return StoreEventLog(store).stage_fork_share(batch, parent_address, child_address, parent_thread)


def stage_thread_detach(store: HistoryStore, batch: WriteBatch, address: str) -> int:
    """:meth:`StoreEventLog.stage_thread_detach` over ``store``."""
    return StoreEventLog(store).stage_thread_detach(batch, address)
