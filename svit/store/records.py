"""The store's history records: what each one holds, how it is sealed, how it is checked.

Every record of the history (base, head, transaction, store snapshot, fork reference,
tombstone) is a sealed map (:func:`svit.cbor.seal`: the one deterministic encoding, with
a BLAKE3 hash field over the other fields) whose first declared field names its format.
A decoded record is checked field by field; any defect is ``InvalidPersistence`` naming
the record, and a record of another format is refused naming the format it claims.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import blake3

from .. import cbor, mutation
from .. import snapshot as snapshot_module
from ..errors import InvalidPersistence, ResourceLimitExceeded
from ..limits import Limits
from ..process import Process
from ..tree import Node
from . import codec

__all__ = [
    "MAX_SOURCE_BYTES",
    "StoreSnapshot",
    "Transaction",
    "Head",
    "State",
    "readable_snapshot",
    "head_record",
    "decode_head",
    "transaction_record",
    "commit_records",
    "base_record",
    "decode_base",
    "fork_reference",
    "decode_fork_reference",
    "snapshot_record",
    "decode_snapshot_record",
    "tombstone_record",
    "decode_tombstone",
    "decode_transaction",
    "decode_transaction_root",
    "output_summary",
    "MAX_SUMMARY_BYTES",
]

MAX_SOURCE_BYTES = 4096
#: The most an activation's output summary in a transaction takes (UTF-8 bytes).
MAX_SUMMARY_BYTES = 256
#: Outputs up to this many nodes and text bytes are summarised as compact JSON; larger
#: ones by their kind and size, so the summary costs little whatever the output.
_SUMMARY_NODES, _SUMMARY_TEXT = 64, 1024


@dataclass(frozen=True)
class StoreSnapshot:
    """A stored snapshot of one address at one head; ``bytes(s)`` is the process snapshot."""

    snapshot_hash: str
    address: str
    covered_position: int | None
    head_hash: str
    process_version: int
    root_hash: str
    process_snapshot: bytes = field(repr=False)

    def __bytes__(self) -> bytes:
        return self.process_snapshot


@dataclass(frozen=True)
class Transaction:
    """One committed transaction as a query returns it (values as plain data)."""

    address: str
    position: int
    hash: str
    previous_hash: str
    process_version_before: int
    process_version_after: int
    mutations: list[dict[str, Any]]
    touched_paths: list[str]
    source: str
    resulting_root_hash: str
    #: When the commit was made: milliseconds since the Unix epoch (UTC), by the store's
    #: clock. Kept in the sealed record, never in the process state.
    committed_at: int = 0
    #: The script an activation ran (``/lib/NAME`` or ``inline``); None for other transitions.
    script: str | None = None
    #: A bounded summary of an activation's output (:func:`output_summary`); None otherwise.
    output_summary: str | None = None


@dataclass(frozen=True)
class Head:
    """The last record of an address's history: a transaction position (None: the base) and its hash."""

    position: int | None
    hash: str


@dataclass
class State:
    """A verified committed state of one address and where its history stands."""

    version: int
    root: Node
    limits: Limits
    head: Head
    base_hash: str


def readable_snapshot(process: Process) -> bytes:
    """The process snapshot for a stored record, refused when restore could not read it back.

    Raised limits allow a valid tree whose snapshot exceeds the restore byte bound; a base
    or store snapshot of it would make the address unresumable (a cut deletes the history).
    """
    data = process.snapshot()
    if len(data) > snapshot_module.MAX_SNAPSHOT_BYTES:
        raise ResourceLimitExceeded("snapshot bytes")
    return data


# ---------------------------------------------------------------------- head


# The commit path writes a head and a transaction per commit: both are sealed directly
# from their fields, in the byte order of the one encoding (keys sorted by their UTF-8
# bytes), so no generic encoder walks them. The result is exactly :func:`svit.cbor.seal`
# of the same fields (tests compare the two on random values).
_KEY = {name: cbor.encode_text(name) for name in (*codec.HEAD_FIELDS, "head_check", *codec.TRANSACTION_FIELDS,
                                                  "event_hash", "operation", "path", "value")}
_HEAD_FORMAT_PAIR = _KEY["head_format"] + cbor.encode_text(codec.HEAD_FORMAT)
_EVENT_FORMAT_PAIR = _KEY["event_format"] + cbor.encode_text(codec.TRANSACTION_FORMAT)
_SET_PREFIX = b"\xa3" + _KEY["operation"] + cbor.encode_text("set") + _KEY["path"]
_SET_FIELDS = {"operation", "path", "value"}
# Each key of the commit's records, encoded (module names: looked up faster than ``_KEY``).
(_ADDRESS_KEY, _COMMITTED_AT_KEY, _MUTATIONS_KEY, _OUTPUT_SUMMARY_KEY, _POSITION_KEY, _PREVIOUS_HASH_KEY,
 _VERSION_AFTER_KEY, _VERSION_BEFORE_KEY, _RESULTING_ROOT_KEY, _SCRIPT_KEY, _SOURCE_KEY, _TOUCHED_PATHS_KEY,
 _EVENT_HASH_KEY, _BASE_HASH_KEY, _HASH_KEY, _PROCESS_VERSION_KEY, _ROOT_HASH_KEY, _HEAD_CHECK_KEY) = (
    _KEY[name] for name in ("address", "committed_at", "mutations", "output_summary", "position", "previous_hash",
                            "process_version_after", "process_version_before", "resulting_root_hash", "script",
                            "source", "touched_paths", "event_hash", "base_hash", "hash", "process_version",
                            "root_hash", "head_check"))
_blake3 = blake3.blake3
_NULL = b"\xf6"
_U64_LIMIT = 2**64
_MAP_7, _MAP_8, _MAP_13, _MAP_14 = (cbor.head(5, count) for count in (7, 8, 13, 14))
#: The heads of the integers 0-255 and of arrays of 0-23 items, made once.
_SMALL_U64 = tuple(cbor.head(0, value) for value in range(256))
_SMALL_ARRAYS = tuple(cbor.head(4, count) for count in range(24))
#: The head of a 64-byte text: every hex digest (BLAKE3, 32 bytes) a record names.
_HEX_DIGEST_HEAD = cbor.head(3, 64)


def _u64(value: int) -> bytes:
    """:func:`svit.cbor.head` of an unsigned integer, refused outside 0 .. 2**64 - 1."""
    if type(value) is int:
        if 0 <= value < 256:
            return _SMALL_U64[value]
        if 0 <= value < 0x10000:
            return b"\x19" + value.to_bytes(2, "big")
        if 0 <= value < 0x100000000:
            return b"\x1a" + value.to_bytes(4, "big")
        if 0 <= value < _U64_LIMIT:
            return b"\x1b" + value.to_bytes(8, "big")
    raise ValueError("record integer outside 0 .. 2**64 - 1")


def _array_head(count: int) -> bytes:
    return _SMALL_ARRAYS[count] if count < 24 else cbor.head(4, count)


def _hash_text(value: str) -> bytes:
    """:func:`svit.cbor.encode_text` of a text that is most often a hex digest."""
    raw = value.encode("utf-8")
    return (_HEX_DIGEST_HEAD if len(raw) == 64 else cbor.head(3, len(raw))) + raw


def _sealed(count: int, before: bytes, hash_field: str, after: bytes) -> tuple[bytes, str]:
    """``count`` body fields encoded as ``before + after`` (split where the hash field sorts)."""
    digest = blake3.blake3(cbor.head(5, count) + before + after).hexdigest()
    return cbor.head(5, count + 1) + before + _KEY[hash_field] + cbor.encode_text(digest) + after, digest


def head_record(address: str, base_hash: str, head: Head, version: int, root_hash: str) -> bytes:
    """The sealed head record (fields of :data:`codec.HEAD_FIELDS`, hash field ``head_check``)."""
    text = cbor.encode_text
    before = _KEY["address"] + text(address) + _KEY["base_hash"] + text(base_hash) + _KEY["hash"] + text(head.hash)
    after = (_HEAD_FORMAT_PAIR + _KEY["position"] + (_NULL if head.position is None else _u64(head.position))
             + _KEY["process_version"] + _u64(version) + _KEY["root_hash"] + text(root_hash))
    return _sealed(7, before, "head_check", after)[0]


def _mutation_bytes(item: mutation.Mutation, text: Callable[[str], bytes] = cbor.encode_text) -> bytes:
    record = item.record()
    if record.keys() == _SET_FIELDS and record["operation"] == "set":
        # the common case, sealed without sorting: "operation" < "path" < "value"
        return _SET_PREFIX + text(record["path"]) + _KEY["value"] + cbor.encode(record["value"])
    return cbor.encode(record)


def transaction_record(address: str, position: int, previous_hash: str, version_before: int, version_after: int,
                       mutations: Sequence[mutation.Mutation], touched_paths: Sequence[str], source: str,
                       resulting_root_hash: str, committed_at: int, script: str | None = None,
                       output_summary: str | None = None) -> tuple[bytes, str]:
    """``(sealed transaction record, its event hash)`` (fields of :data:`codec.TRANSACTION_FIELDS`)."""
    text = cbor.encode_text
    before = _KEY["address"] + text(address) + _KEY["committed_at"] + _u64(committed_at) + _EVENT_FORMAT_PAIR
    after = b"".join((
        _KEY["mutations"], cbor.head(4, len(mutations)), *map(_mutation_bytes, mutations),
        _KEY["output_summary"], _NULL if output_summary is None else text(output_summary),
        _KEY["position"], _u64(position),
        _KEY["previous_hash"], text(previous_hash),
        _KEY["process_version_after"], _u64(version_after),
        _KEY["process_version_before"], _u64(version_before),
        _KEY["resulting_root_hash"], text(resulting_root_hash),
        _KEY["script"], _NULL if script is None else text(script),
        _KEY["source"], text(source),
        _KEY["touched_paths"], cbor.head(4, len(touched_paths)), *map(text, touched_paths),
    ))
    return _sealed(13, before, "event_hash", after)


#: Texts a commit encodes again and again (addresses, base hashes, sources, script
#: names, paths), by their text; the memory starts over past :data:`_TEXT_MEMORY` entries
#: and keeps no text longer than :data:`_TEXT_REMEMBERED` characters (at most ~2 MB).
_TEXTS: dict[str, bytes] = {}
_TEXT_MEMORY = 4096
_TEXT_REMEMBERED = 256


def _text_once(value: str) -> bytes:
    """:func:`svit.cbor.encode_text` of ``value``, remembered when short (a refused text
    is not)."""
    encoded = _TEXTS.get(value)
    if encoded is None:
        encoded = cbor.encode_text(value)
        if len(value) > _TEXT_REMEMBERED:
            return encoded
        if len(_TEXTS) >= _TEXT_MEMORY:
            _TEXTS.clear()
        _TEXTS[value] = encoded
    return encoded


def _remembered_mutation_bytes(item: mutation.Mutation) -> bytes:
    return _mutation_bytes(item, _text_once)


def commit_records(address: str, base_hash: str, position: int, previous_hash: str, version_before: int,
                   version_after: int, mutations: Sequence[mutation.Mutation], touched_paths: Sequence[str],
                   source: str, resulting_root_hash: str, committed_at: int, script: str | None = None,
                   output_summary: str | None = None) -> tuple[bytes, str, bytes]:
    """``(sealed transaction record, its event hash, sealed head record naming it)``: one
    commit's two records, exactly :func:`transaction_record` and :func:`head_record` of the
    same fields, with each field shared by both encoded once (the event hash, the root
    hash, the new version, the position, the address) and recurring texts remembered."""
    address_text = _text_once(address)
    position_bytes = _u64(position)
    after_bytes = _u64(version_after)
    root_text = _hash_text(resulting_root_hash)
    # The body, split where the hash field sorts ("event_hash" comes after "event_format").
    before = _ADDRESS_KEY + address_text + _COMMITTED_AT_KEY + _u64(committed_at) + _EVENT_FORMAT_PAIR
    after = b"".join((
        _MUTATIONS_KEY, _array_head(len(mutations)), *map(_remembered_mutation_bytes, mutations),
        _OUTPUT_SUMMARY_KEY, _NULL if output_summary is None else cbor.encode_text(output_summary),
        _POSITION_KEY, position_bytes,
        _PREVIOUS_HASH_KEY, _hash_text(previous_hash),
        _VERSION_AFTER_KEY, after_bytes,
        _VERSION_BEFORE_KEY, _u64(version_before),
        _RESULTING_ROOT_KEY, root_text,
        _SCRIPT_KEY, _NULL if script is None else _text_once(script),
        _SOURCE_KEY, _text_once(source),
        _TOUCHED_PATHS_KEY, _array_head(len(touched_paths)), *map(_text_once, touched_paths),
    ))
    event_hash = _blake3(_MAP_13 + before + after).digest().hex()  # as hexdigest(), made faster
    event_text = _HEX_DIGEST_HEAD + event_hash.encode("ascii")
    transaction = _MAP_14 + before + _EVENT_HASH_KEY + event_text + after
    head_before = _ADDRESS_KEY + address_text + _BASE_HASH_KEY + _text_once(base_hash) + _HASH_KEY + event_text
    head_after = (_HEAD_FORMAT_PAIR + _POSITION_KEY + position_bytes + _PROCESS_VERSION_KEY + after_bytes
                  + _ROOT_HASH_KEY + root_text)
    check = _blake3(_MAP_7 + head_before + head_after).digest().hex()
    return transaction, event_hash, _MAP_8 + head_before + _HEAD_CHECK_KEY + _HEX_DIGEST_HEAD + check.encode("ascii") \
        + head_after


def decode_head(raw: bytes, address: str) -> dict[str, Any]:
    what = f"head of {address}"
    head = codec.decode_record(raw, codec.HEAD_FIELDS, "head_check", what, format=codec.HEAD_FORMAT)
    if head["head_format"] != codec.HEAD_FORMAT or head["address"] != address:
        raise InvalidPersistence(f"{what}: wrong format or address")
    if not (
        (head["position"] is None or codec.is_u64(head["position"]))
        and codec.is_hex_hash(head["hash"])
        and codec.is_hex_hash(head["base_hash"])
        and codec.is_u64(head["process_version"])
        and codec.is_hex_hash(head["root_hash"])
    ):
        raise InvalidPersistence(f"{what}: malformed fields")
    return head


def output_summary(output: Node | None) -> str | None:
    """A bounded text summary of an activation's output for its transaction record:
    compact JSON cut to :data:`MAX_SUMMARY_BYTES` (``…`` marks a cut), or, for a large
    output, its kind and size (``<map of 1200 entries>``)."""
    if output is None:
        return None
    if type(output.value) is int:
        return str(output.value)  # an integer leaf (a bool's value is a bool): what json.dumps writes
    if output.count > _SUMMARY_NODES or output.text > _SUMMARY_TEXT:
        unit = {"map": "entries", "array": "items", "string": "bytes"}.get(output.kind, "bytes")
        return f"<{output.kind} of {output.size} {unit}>"
    value = output.to_value()
    if type(value) is int:
        text = str(value)  # what json.dumps writes for an integer, without its machinery
    else:
        text = json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"), default=str)
    data = text.encode("utf-8")
    if len(data) <= MAX_SUMMARY_BYTES:
        return text
    return data[:MAX_SUMMARY_BYTES - len("…".encode())].decode("utf-8", "ignore") + "…"


# ---------------------------------------------------------------------- base


def base_record(address: str, covered: int | None, anchor: str | None, version: int, root_hash: str,
                origin: dict[str, Any]) -> tuple[bytes, str]:
    values = {
        "base_format": codec.BASE_FORMAT,
        "address": address,
        "covered_position": covered,
        "anchor_event_hash": anchor,
        "process_version": version,
        "root_hash": root_hash,
        "origin": origin,
    }
    return codec.hashed_record(codec.BASE_FIELDS, values, "base_hash")


def decode_base(raw: bytes, address: str) -> dict[str, Any]:
    what = f"base of {address}"
    base = codec.decode_record(raw, codec.BASE_FIELDS, "base_hash", what, format=codec.BASE_FORMAT)
    if base["base_format"] != codec.BASE_FORMAT or base["address"] != address:
        raise InvalidPersistence(f"{what}: wrong format or address")
    covered, anchor = base["covered_position"], base["anchor_event_hash"]
    if not (codec.is_u64(base["process_version"]) and codec.is_hex_hash(base["root_hash"])
            and (covered is None or codec.is_u64(covered)) and (anchor is None or codec.is_hex_hash(anchor))):
        raise InvalidPersistence(f"{what}: malformed fields")
    return base


# ---------------------------------------------------------------------- fork reference


def fork_reference(child_address: str, parent_address: str, parent: State) -> bytes:
    """The child-to-parent reference of a fork at ``parent``'s head."""
    values = {
        "fork_format": codec.FORK_FORMAT,
        "child_address": child_address,
        "parent_address": parent_address,
        "parent_position": parent.head.position,
        "parent_head_hash": parent.head.hash,
        "parent_process_version": parent.version,
        "parent_root_hash": parent.root.hash,
    }
    return codec.hashed_record(codec.FORK_FIELDS, values, "fork_hash")[0]


def decode_fork_reference(raw: bytes, child_address: str) -> dict[str, Any]:
    what = f"fork reference of {child_address}"
    return codec.decode_record(raw, codec.FORK_FIELDS, "fork_hash", what, format=codec.FORK_FORMAT)


# ---------------------------------------------------------------------- store snapshot


def snapshot_record(address: str, head: Head, process: Process) -> tuple[bytes, StoreSnapshot]:
    data = readable_snapshot(process)
    values = {
        "snapshot_format": codec.SNAPSHOT_FORMAT,
        "address": address,
        "covered_position": head.position,
        "head_hash": head.hash,
        "process_version": process.version,
        "root_hash": process.root_hash,
        "process_snapshot": data,
    }
    encoded, snapshot_hash = codec.hashed_record(codec.SNAPSHOT_FIELDS, values, "snapshot_hash")
    snapshot = StoreSnapshot(snapshot_hash, address, head.position, head.hash, process.version, process.root_hash, data)
    return encoded, snapshot


def decode_snapshot_record(raw: bytes, address: str, snapshot_hash: str) -> dict[str, Any]:
    what = f"store snapshot {snapshot_hash[:16]} of {address}"
    record = codec.decode_record(raw, codec.SNAPSHOT_FIELDS, "snapshot_hash", what, format=codec.SNAPSHOT_FORMAT)
    if record["snapshot_format"] != codec.SNAPSHOT_FORMAT or record["address"] != address:
        raise InvalidPersistence(f"{what}: wrong format or address")
    if record["snapshot_hash"] != snapshot_hash:
        raise InvalidPersistence(f"{what}: hash does not match its key")
    return record


# ---------------------------------------------------------------------- tombstone


def tombstone_record(address: str, version: int, root_hash: str, removed_at: int) -> bytes:
    """That ``address`` was removed on purpose (the archive's shrink guard reads it)."""
    values = {"tombstone_format": codec.TOMBSTONE_FORMAT, "address": address, "process_version": version,
              "root_hash": root_hash, "removed_at": removed_at}
    return codec.hashed_record(codec.TOMBSTONE_FIELDS, values, "tombstone_hash")[0]


def decode_tombstone(raw: bytes, address: str) -> dict[str, Any]:
    what = f"tombstone of {address}"
    record = codec.decode_record(raw, codec.TOMBSTONE_FIELDS, "tombstone_hash", what, format=codec.TOMBSTONE_FORMAT)
    if record["tombstone_format"] != codec.TOMBSTONE_FORMAT or record["address"] != address or not (
        codec.is_u64(record["process_version"]) and codec.is_hex_hash(record["root_hash"])
        and codec.is_u64(record["removed_at"])
    ):
        raise InvalidPersistence(f"{what}: wrong format, address or fields")
    return record


# ---------------------------------------------------------------------- transaction


def decode_transaction(address: str, position: int, raw: bytes) -> dict[str, Any]:
    """A verified transaction envelope with its mutations decoded (values as tree nodes)."""
    what = f"transaction {position} of {address}"
    record = codec.decode_record(raw, codec.TRANSACTION_FIELDS, "event_hash", what, format=codec.TRANSACTION_FORMAT)
    _check_envelope(record, address, position, what)
    source = record["source"]
    if type(source) is not str or not 1 <= len(source.encode("utf-8")) <= MAX_SOURCE_BYTES:
        raise InvalidPersistence(f"{what}: malformed source")
    if type(record["mutations"]) is not list:
        raise InvalidPersistence(f"{what}: malformed mutations")
    record["mutations"] = [mutation.from_record(m, what) for m in record["mutations"]]
    if record["touched_paths"] != mutation.touched_paths(record["mutations"]):
        raise InvalidPersistence(f"{what}: touched paths do not match its mutations")
    return record


def decode_transaction_root(address: str, position: int, raw: bytes) -> dict[str, Any]:
    """A verified transaction envelope, its mutations left as recorded (not built into
    tree nodes): what time travel needs (``process_version_after``,
    ``resulting_root_hash``, ``committed_at``) at the cost of checking the seal only."""
    what = f"transaction {position} of {address}"
    record = codec.decode_record(raw, codec.TRANSACTION_FIELDS, "event_hash", what, format=codec.TRANSACTION_FORMAT)
    _check_envelope(record, address, position, what)
    return record


def _optional_text(value: Any, limit: int) -> bool:
    return value is None or type(value) is str and len(value.encode("utf-8")) <= limit


def _check_envelope(record: dict[str, Any], address: str, position: int, what: str) -> None:
    if record["event_format"] != codec.TRANSACTION_FORMAT:
        raise InvalidPersistence(f"{what}: unknown format")
    if record["address"] != address or record["position"] != position:
        raise InvalidPersistence(f"{what}: address or position does not match its key")
    if not (codec.is_hex_hash(record["previous_hash"]) and codec.is_hex_hash(record["resulting_root_hash"])
            and codec.is_u64(record["process_version_before"]) and codec.is_u64(record["process_version_after"])
            and codec.is_u64(record["committed_at"]) and _optional_text(record["script"], MAX_SOURCE_BYTES)
            and _optional_text(record["output_summary"], MAX_SUMMARY_BYTES)):
        raise InvalidPersistence(f"{what}: malformed fields")
    if record["process_version_after"] != record["process_version_before"] + 1:
        raise InvalidPersistence(f"{what}: version does not advance by one")
