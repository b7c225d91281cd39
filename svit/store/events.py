"""The durable reasoning event log: canonical events kept in the store, outside process state.

Reasoning history is not process state (reference §10.8): snapshots, archives and
transactions never carry it. :class:`StoreEventLog` implements the
:class:`~svit.loop.events.EventLog` interface over a :class:`~svit.store.ProcessStore`:

* one record per event under the irreplaceable key class ``thread_event``
  (``e/<address>SEP<session id>SEP<u64 sequence>``), so a partition pages in sequence
  order;
* a record is canonical CBOR ``{event_format, process_id, session_id, sequence, type,
  data, event_hash}`` where ``event_hash`` is BLAKE3 over the canonical CBOR of the other
  fields; every read re-checks the hash, the canonical bytes, the key the record sits
  under, and that sequences are gapless (else ``InvalidPersistence``);
* each append is one synced write batch; sequences start at 1 and are never reused;
* events of an address exist only while the address does (``ProcessStore.remove`` drops
  them); a durable fork copies the parent's session into the child at fork time, in the
  fork's own batch, and keeps the session id.
"""

from __future__ import annotations

from typing import Any

import blake3
import cbor2

from ..errors import InvalidPersistence, InvalidValue, PersistenceNotFound, PersistenceUnavailable, ResourceLimitExceeded, SvitError
from ..loop.events import MAX_WINDOW, Event, read_all
from . import codec, keys
from .keys import CF_RECORD

EVENT_FORMAT = "svit-thread-event@1"
EVENT_FIELDS = ("event_format", "process_id", "session_id", "sequence", "type", "data")
HASH_FIELD = "event_hash"
MAX_EVENT_BYTES = 16 * 1024 * 1024
MAX_SESSION_BYTES = 256
_U64_MAX = 2**64 - 1


def encode_event(event: Event) -> bytes:
    """The canonical record of ``event`` (hash included)."""
    body = {
        "event_format": EVENT_FORMAT,
        "process_id": event.process_id,
        "session_id": event.session_id,
        "sequence": event.sequence,
        "type": event.type,
        "data": event.data,
    }
    digest = blake3.blake3(cbor2.dumps(body, canonical=True)).hexdigest()
    return cbor2.dumps({**body, HASH_FIELD: digest}, canonical=True)


def decode_event(raw: bytes, address: str, session_id: str, sequence: int) -> Event:
    """Verify a stored record against its key and hash; any mismatch is InvalidPersistence."""
    what = f"reasoning event {sequence} of {address} (session {session_id})"
    decoded = codec.loads_strict(raw, what)
    if type(decoded) is not dict or set(decoded) != set(EVENT_FIELDS) | {HASH_FIELD}:
        raise InvalidPersistence(f"{what}: unexpected fields")
    body = {name: decoded[name] for name in EVENT_FIELDS}
    if decoded[HASH_FIELD] != blake3.blake3(cbor2.dumps(body, canonical=True)).hexdigest():
        raise InvalidPersistence(f"{what}: hash mismatch")
    if cbor2.dumps(decoded, canonical=True) != raw:
        raise InvalidPersistence(f"{what}: non-canonical encoding")
    if body["event_format"] != EVENT_FORMAT:
        raise InvalidPersistence(f"{what}: unknown format")
    if (body["process_id"], body["session_id"], body["sequence"]) != (address, session_id, sequence):
        raise InvalidPersistence(f"{what}: record does not belong under its key")
    if type(body["type"]) is not str or type(body["data"]) is not dict:
        raise InvalidPersistence(f"{what}: malformed type or data")
    return Event(sequence, address, session_id, body["type"], body["data"])


def _check_partition(process_id: Any, session_id: Any) -> None:
    if type(process_id) is not str or not process_id:
        raise InvalidValue("event log process id must be non-empty text")
    if type(session_id) is not str or not session_id or len(session_id.encode("utf-8", "surrogatepass")) > MAX_SESSION_BYTES:
        raise InvalidValue(f"session id must be 1-{MAX_SESSION_BYTES} bytes of text")


def _check_limit(limit: Any, name: str) -> int:
    if type(limit) is not int or not 1 <= limit <= MAX_WINDOW:
        raise ResourceLimitExceeded(name)
    return limit


class StoreEventLog:
    """An :class:`~svit.loop.events.EventLog` kept in a :class:`~svit.store.ProcessStore`.

    Stateless apart from the store: several instances over one store agree, because the
    next sequence is read from the store under the store's lock.
    """

    def __init__(self, store: Any) -> None:
        self._store = store

    @property
    def store(self) -> Any:
        return self._store

    # ------------------------------------------------------------------ EventLog
    def append(self, process_id: str, session_id: str, type: str, data: dict[str, Any]) -> Event:
        """Append one event for an existing address; acknowledged only after a synced write."""
        _check_partition(process_id, session_id)
        if not isinstance(type, str) or not type or not isinstance(data, dict):
            raise InvalidValue("an event needs a type (text) and data (a map)")
        store = self._store
        with store._lock:
            store._check()
            if store._read_head(process_id) is None:
                raise PersistenceNotFound(process_id)
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
            batch = store._batch()
            batch.put(CF_RECORD, keys.thread_event_key(process_id, session_id, sequence), raw)
            store._write(batch)
            return stored

    def events(self, process_id: str, session_id: str, after: int = 0, limit: int = MAX_WINDOW) -> list[Event]:
        """Up to ``limit`` (1-4096) events with sequence > ``after``, in sequence order."""
        _check_partition(process_id, session_id)
        _check_limit(limit, "thread events")
        if type(after) is not int or not 0 <= after < _U64_MAX:
            raise InvalidValue("after must be a sequence number")
        store = self._store
        prefix = keys.thread_session_prefix(process_id, session_id)
        found: list[Event] = []
        with store._lock:
            store._check()
            for key, raw in store._scan(CF_RECORD, prefix, prefix + keys.u64(after + 1)):
                expected = after + len(found) + 1
                suffix = key[len(prefix):]
                if len(suffix) != 8:
                    raise InvalidPersistence(f"{process_id}: malformed reasoning event key")
                if keys.from_u64(suffix) != expected:
                    raise InvalidPersistence(f"reasoning event {expected} of {process_id} (session {session_id}) is missing")
                found.append(decode_event(raw, process_id, session_id, expected))
                if len(found) == limit:
                    break
        return found

    def recent(self, process_id: str, session_id: str, limit: int) -> list[Event]:
        """The newest ``limit`` (1-4096, else ``ResourceLimitExceeded("recent thread events")``) events."""
        _check_limit(limit, "recent thread events")
        _check_partition(process_id, session_id)
        with self._store._lock:
            self._store._check()
            last = self._last(process_id, session_id)
            return self.events(process_id, session_id, after=max(last - limit, 0), limit=limit)

    # ------------------------------------------------------------------ extras
    def all_events(self, process_id: str, session_id: str) -> list[Event]:
        return read_all(self, process_id, session_id)

    def last_sequence(self, process_id: str, session_id: str) -> int:
        """The newest sequence of a partition (0 when empty)."""
        _check_partition(process_id, session_id)
        with self._store._lock:
            self._store._check()
            return self._last(process_id, session_id)

    def sessions(self, process_id: str) -> list[str]:
        """Session ids with at least one stored event for ``process_id``."""
        prefix = keys.thread_events_prefix(process_id)
        found: list[str] = []
        with self._store._lock:
            self._store._check()
            for key, _ in self._store._scan(CF_RECORD, prefix):
                session = keys.unescape(key[len(prefix):-(len(keys.SEP) + 8)])
                if not found or found[-1] != session:
                    found.append(session)
        return found

    def continues(self, process_id: str, thread_process_id: str, session_id: str) -> bool:
        """True when ``process_id`` carries on ``session_id`` recorded by ``thread_process_id``:
        it is a durable fork of that process, or it already holds events of that session."""
        _check_partition(process_id, session_id)
        store = self._store
        with store._lock:
            store._check()
            raw = store._get(CF_RECORD, keys.fork_key(process_id))
            if raw is not None:
                ref = codec.decode_record(raw, codec.FORK_FIELDS, "fork_hash", f"fork reference of {process_id}")
                if ref["parent_address"] == thread_process_id:
                    return True
            return self._last(process_id, session_id) > 0

    def _last(self, process_id: str, session_id: str) -> int:
        prefix = keys.thread_session_prefix(process_id, session_id)
        try:
            iterator = self._store._cfs[CF_RECORD].iter()
            iterator.seek_for_prev(prefix + b"\xff" * 8)
            key = iterator.key() if iterator.valid() else None
            iterator.status()
        except SvitError:
            raise
        except Exception as exc:
            raise PersistenceUnavailable(f"scan failed: {type(exc).__name__}") from None
        if key is None or not key.startswith(prefix):
            return 0
        if len(key) != len(prefix) + 8:
            raise InvalidPersistence(f"{process_id}: malformed reasoning event key")
        return keys.from_u64(key[len(prefix):])


def stage_fork_copy(store: Any, batch: Any, parent_address: str, child_address: str, parent_thread: Any) -> int:
    """Stage a copy of the parent's current session for the child (same session id).

    Called by ``ProcessStore.fork`` under the store lock with the fork's own batch, so
    the child's history appears atomically with the child. Returns the number copied.
    """
    if not isinstance(parent_thread, dict):
        return 0
    session_id = parent_thread.get("session_id")
    if type(session_id) is not str or not session_id:
        return 0
    copied = 0
    for event in read_all(StoreEventLog(store), parent_address, session_id):
        twin = Event(event.sequence, child_address, session_id, event.type, event.data)
        batch.put(CF_RECORD, keys.thread_event_key(child_address, session_id, event.sequence), encode_event(twin))
        copied += 1
    return copied
