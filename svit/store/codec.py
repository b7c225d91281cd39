"""The store's record encodings over :mod:`svit.cbor`, and their strict decoders.

Every record of the history (base, head, transaction, store snapshot, fork reference,
tombstone) is a sealed map (:func:`svit.cbor.seal`): the one deterministic encoding,
keys in UTF-8 byte order, with a hash field holding the BLAKE3 of the encoding of the
other fields. Decoding is strict (one item, no indefinite lengths, no duplicate keys,
no foreign tags, exactly the declared fields, the deterministic bytes) because stored
bytes are checked, never trusted: a flipped byte anywhere is either a decode failure,
a hash mismatch or a non-canonical encoding, and each is reported as
``InvalidPersistence`` naming the record. The ``*_FIELDS`` tuples declare which fields
a record has, not their order on disk.

Tree chunks are stored content-addressed by their digest, as the bytes the digest
covers (:mod:`svit.tree`); :mod:`svit.store.nodes` keeps them.
"""

from __future__ import annotations

import re
from typing import Any

from .. import cbor
from ..errors import InvalidPersistence

__all__ = [
    "TRANSACTION_FORMAT",
    "BASE_FORMAT",
    "HEAD_FORMAT",
    "SNAPSHOT_FORMAT",
    "FORK_FORMAT",
    "TOMBSTONE_FORMAT",
    "TRANSACTION_FIELDS",
    "BASE_FIELDS",
    "HEAD_FIELDS",
    "SNAPSHOT_FIELDS",
    "FORK_FIELDS",
    "TOMBSTONE_FIELDS",
    "loads_strict",
    "dumps",
    "hashed_record",
    "decode_record",
    "is_hex_hash",
    "is_u64",
]

# Format 2: every record in the one deterministic encoding of :mod:`svit.cbor` (format
# 1 wrote its fields in declared order). Transactions are at 3: they carry
# ``committed_at``, the commit's wall-clock time (ms since the Unix epoch, UTC), and for
# an activation the ``script`` it ran and a bounded ``output_summary`` (else null).
TRANSACTION_FORMAT = "svit-transaction@3"
BASE_FORMAT = "svit-base@2"
HEAD_FORMAT = "svit-head@2"
SNAPSHOT_FORMAT = "svit-store-snapshot@2"
FORK_FORMAT = "svit-fork@2"
TOMBSTONE_FORMAT = "svit-tombstone@2"

TRANSACTION_FIELDS = (
    "event_format",
    "address",
    "position",
    "previous_hash",
    "process_version_before",
    "process_version_after",
    "mutations",
    "touched_paths",
    "source",
    "resulting_root_hash",
    "committed_at",
    "script",
    "output_summary",
)
BASE_FIELDS = ("base_format", "address", "covered_position", "anchor_event_hash", "process_version", "root_hash", "origin")
HEAD_FIELDS = ("head_format", "address", "base_hash", "position", "hash", "process_version", "root_hash")
SNAPSHOT_FIELDS = (
    "snapshot_format",
    "address",
    "covered_position",
    "head_hash",
    "process_version",
    "root_hash",
    "process_snapshot",
)
FORK_FIELDS = (
    "fork_format",
    "child_address",
    "parent_address",
    "parent_position",
    "parent_head_hash",
    "parent_process_version",
    "parent_root_hash",
)
TOMBSTONE_FIELDS = ("tombstone_format", "address", "process_version", "root_hash", "removed_at")



def loads_strict(data: bytes, what: str) -> Any:
    """Exactly one CBOR item, strictly; any failure is InvalidPersistence naming ``what``."""
    if type(data) is not bytes:
        raise InvalidPersistence(f"{what}: stored value is not bytes")
    try:
        return cbor.decode_item(data)
    except cbor.CBORDecodeError as exc:
        raise InvalidPersistence(f"{what}: {exc.detail}") from None


def dumps(value: Any) -> bytes:
    """The deterministic encoding of a record value (:func:`svit.cbor.encode`)."""
    return cbor.encode(value)


# ---------------------------------------------------------------------------
# Hashed records


def hashed_record(fields: tuple[str, ...], values: dict[str, Any], hash_field: str) -> tuple[bytes, str]:
    """(sealed record, hash) of ``values``' ``fields`` (:func:`svit.cbor.seal`)."""
    return cbor.seal({name: values[name] for name in fields}, hash_field)


def decode_record(
    data: bytes, fields: tuple[str, ...], hash_field: str, what: str, *, format: str | None = None
) -> dict[str, Any]:
    """Decode and verify a sealed record: one deterministic item, exact fields, hash.

    With ``format`` (the value the first of ``fields`` must hold), a record that does
    not verify and claims another format is refused naming the format it claims (a
    store written by an older version). The caller still compares the format field of a
    record that verifies.
    """
    if type(data) is not bytes:
        raise InvalidPersistence(f"{what}: stored value is not bytes")
    try:
        return _unseal(data, fields, hash_field, what)
    except (cbor.CBORDecodeError, InvalidPersistence) as exc:
        found = _format_of(data, fields[0]) if format is not None else None
        if found is not None and found != format:
            raise InvalidPersistence(
                f"{what}: unsupported record format {found[:64]!r} (this version reads {format})") from None
        if isinstance(exc, InvalidPersistence):
            raise
        raise InvalidPersistence(f"{what}: {exc.detail}") from None


def _unseal(data: bytes, fields: tuple[str, ...], hash_field: str, what: str) -> dict[str, Any]:
    decoded = cbor.unseal(data, hash_field)
    if decoded.keys() != set(fields) | {hash_field}:
        raise InvalidPersistence(f"{what}: unexpected fields")
    return decoded


def _format_of(data: bytes, format_field: str) -> str | None:
    """The format a record that failed to verify claims, if it decodes far enough to say."""
    try:
        value = cbor.decode_item(data)
    except cbor.CBORDecodeError:
        return None
    found = value.get(format_field) if type(value) is dict else None
    return found if type(found) is str else None


_HEX_HASH = re.compile(r"[0-9a-f]{64}\Z")


def is_hex_hash(value: Any) -> bool:
    return type(value) is str and _HEX_HASH.match(value) is not None


def is_u64(value: Any) -> bool:
    return type(value) is int and 0 <= value < 2**64
