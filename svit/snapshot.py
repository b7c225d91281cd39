"""The snapshot file format ``svit-snapshot@1``.

Layout::

    body    = deterministic CBOR of the envelope map
              {format, id, limits, root, root_hash, version}   (keys in code-point order)
    trailer = MAGIC (8 bytes) || u64be(len(body)) || BLAKE3(body) (32 bytes)
    file    = body || trailer

The body encodes values with their kinds: an integer is a CBOR integer, a number is a
CBOR binary64 float (so ``1.0`` stays a float), maps are emitted in code-point key
order, and a script record is ``tag(0x53564954, [source, documentation])``. Encoding is
a pure function of the tree, so equal processes give byte-identical snapshots.

The trailer lets restore reject any truncation or bit flip before one byte of the body
is decoded. It is an integrity check, not an authenticity proof: anyone can recompute
it, so the body is still decoded as untrusted input (only our own tag is accepted,
nesting is bounded, every value is checked, and the root hash is recomputed).
"""

from __future__ import annotations

import gc
import os
from hmac import compare_digest
from typing import Any

import blake3
import cbor2

from .errors import InvalidSnapshot, InvalidValue, SvitError
from .limits import LIMIT_FIELDS, Limits
from .paths import validate_address
from . import tree
from .tree import CBOR_SCRIPT_TAG, Encoded, Node, cbor_default, from_decoded
from .values import MAX_NESTING, Script

FORMAT = "svit-snapshot@1"
MAGIC = b"SVIT\x00sn1"
TRAILER_BYTES = len(MAGIC) + 8 + 32
MAX_SNAPSHOT_BYTES = 128 * 1024 * 1024
U64_MAX = 2**64 - 1

_ENVELOPE_KEYS = frozenset({"format", "id", "limits", "root", "root_hash", "version"})
_SORTED_LIMITS = tuple(sorted(LIMIT_FIELDS))
# Envelope (1) + root map + nesting the tree builder accepts, with room for the
# script tag and our sentinel array.
_MAX_CBOR_DEPTH = MAX_NESTING + 8


def encode_snapshot(address: str, version: int, root: Node, limits: Limits) -> bytes:
    """Serialize one committed state; deterministic for equal inputs."""
    validate_address(address)
    if type(version) is not int or not 0 <= version <= U64_MAX:
        raise InvalidValue("version must be an unsigned 64-bit integer")
    if type(root) is not Node:
        raise InvalidValue("snapshot root must be a tree node")
    limits.validate()
    values = limits.to_dict()
    envelope = {
        "format": FORMAT,
        "id": address,
        "limits": {name: values[name] for name in _SORTED_LIMITS},
        "root": Encoded(root),
        "root_hash": root.hash,
        "version": version,
    }
    body = cbor2.dumps(envelope, default=cbor_default)
    return body + MAGIC + len(body).to_bytes(8, "big") + blake3.blake3(body).digest()


# ---------------------------------------------------------------------------
# Decoding untrusted bytes


def _reject_semantic(*_args: Any) -> Any:
    raise ValueError("unsupported CBOR tag")


# Tags cbor2 would otherwise decode into Python objects (dates, bignums, decimals,
# shared references, regexes, MIME, UUIDs, sets, addresses, ...). All are rejected.
_BUILTIN_TAGS = (0, 1, 2, 3, 4, 5, 25, 28, 29, 30, 35, 36, 37, 52, 54, 100, 256, 258, 260, 261, 1004, 43000, 55799)
_SEMANTIC_REJECTS = {tag: _reject_semantic for tag in _BUILTIN_TAGS}


def _tag_hook(tag: Any, _immutable: bool) -> Any:
    if tag.tag != CBOR_SCRIPT_TAG:
        raise ValueError("unsupported CBOR tag")
    value = tag.value
    if type(value) not in (list, tuple) or len(value) != 2 or type(value[0]) is not str or type(value[1]) is not str:
        raise ValueError("malformed script record")
    return Script(value[0], value[1])


def _check_trailer(data: bytes) -> bytes:
    if len(data) < TRAILER_BYTES:
        raise InvalidSnapshot("snapshot is truncated or corrupted")
    body_length = len(data) - TRAILER_BYTES
    trailer = data[body_length:]
    if (
        trailer[: len(MAGIC)] != MAGIC
        or int.from_bytes(trailer[len(MAGIC) : len(MAGIC) + 8], "big") != body_length
    ):
        raise InvalidSnapshot("snapshot is truncated or corrupted")
    body = data[:body_length]
    if not compare_digest(trailer[len(MAGIC) + 8 :], blake3.blake3(body).digest()):
        raise InvalidSnapshot("snapshot is truncated or corrupted")
    return body


def _decode_body(body: bytes) -> Any:
    """Exactly one CBOR item, strictly: no indefinite lengths, no duplicate keys, no foreign tags."""
    # Decoding [body, sentinel] proves the body is exactly one item: trailing data would
    # become the second element instead of the unpredictable sentinel.
    sentinel = os.urandom(16)
    framed = b"\x82" + body + cbor2.dumps(sentinel)
    try:
        decoded = cbor2.loads(
            framed,
            tag_hook=_tag_hook,
            semantic_decoders=_SEMANTIC_REJECTS,
            max_depth=_MAX_CBOR_DEPTH,
            allow_indefinite=False,
            allow_duplicate_keys=False,
            str_errors="strict",
        )
    except RecursionError:
        raise InvalidSnapshot("snapshot nesting is too deep") from None
    except MemoryError:
        raise InvalidSnapshot("snapshot body is malformed") from None
    except Exception as exc:  # cbor2 and hook errors of any class: the bytes are not ours
        raise InvalidSnapshot(f"snapshot body is malformed: {type(exc).__name__}") from None
    if type(decoded) is not list or len(decoded) != 2 or decoded[1] != sentinel:
        raise InvalidSnapshot("snapshot body has trailing data")
    return decoded[0]


def _decoded_root(body: bytes) -> tuple[Node, int, int] | None:
    """The envelope's ``root`` decoded natively, with where it lies in the body:
    ``(root, start, end)``. None when the native module is absent or anything at all is
    unexpected; the general path then decodes the whole body and reports the problem, so
    both paths fail with the same error."""
    if not tree.NATIVE_BUILDER:
        return None
    try:
        major, count, position = tree.cbor_head(body, 0)
        if major != 5 or count > len(_ENVELOPE_KEYS):
            return None
        for _ in range(count):
            key_major, key_length, key_start = tree.cbor_head(body, position)
            value_start = tree.cbor_item_end(body, position)
            if key_major == 3 and value_start - key_start == 4 and body[key_start:value_start] == b"root":
                root, end = tree.decode_node(body, value_start)
                return root, value_start, end
            position = tree.cbor_item_end(body, value_start)
    except (ValueError, InvalidValue):
        return None
    return None


def decode_snapshot(data: bytes, *, max_bytes: int | None = None) -> tuple[str, int, Node, Limits]:
    """Decode and verify snapshot bytes: the root hash is checked before returning."""
    address, version, root, limits, claimed = decode_snapshot_unverified(data, max_bytes=max_bytes)
    check_root_hash(root, claimed)
    return address, version, root, limits


def decode_snapshot_unverified(data: bytes, *, max_bytes: int | None = None) -> tuple[str, int, Node, Limits, str]:
    """Decode snapshot bytes into ``(address, version, root, limits, claimed_root_hash)``.

    The caller validates the root schema and then calls :func:`check_root_hash`, the
    reference's order (a forged identity reports the identity, not the hash). Raises only :class:`~svit.errors.SvitError` subclasses: ``InvalidSnapshot`` for
    anything wrong with the bytes or the envelope, ``InvalidLimits`` for limits outside
    their hard maxima. Root-schema validation belongs to the process layer.
    """
    try:
        return _decode(data, MAX_SNAPSHOT_BYTES if max_bytes is None else max_bytes)
    except SvitError:
        raise
    except RecursionError:
        raise InvalidSnapshot("snapshot nesting is too deep") from None
    except Exception as exc:  # defensive: nothing else may escape on untrusted bytes
        raise InvalidSnapshot(f"snapshot is malformed: {type(exc).__name__}") from None


def _decode(data: Any, max_bytes: int) -> tuple[str, int, Node, Limits, str]:
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise InvalidSnapshot("snapshot must be bytes")
    if isinstance(data, memoryview):
        if data.nbytes > max_bytes:
            raise InvalidSnapshot("snapshot byte limit exceeded")
        data = data.tobytes()
    if len(data) > max_bytes:
        raise InvalidSnapshot("snapshot byte limit exceeded")
    body = _check_trailer(bytes(data))

    # Bulk building allocates many containers and no cycles; pausing the cyclic
    # collector avoids repeated full-heap scans during the build.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        # The root (nearly all of the bytes) goes straight to nodes; the small rest of
        # the envelope, with a null in the root's place, goes through cbor2.
        native = _decoded_root(body)
        envelope = None
        if native is not None:
            decoded_root, start, end = native
            try:
                envelope = _decode_body(body[:start] + b"\xf6" + body[end:])
            except InvalidSnapshot:
                native = None  # let the general path name the problem
        if native is None:
            envelope = _decode_body(body)
        if type(envelope) is not dict:
            raise InvalidSnapshot("snapshot envelope must be a map")
        if "format" in envelope and envelope["format"] != FORMAT:
            raise InvalidSnapshot(f"unsupported format {str(envelope['format'])[:64]!r}")
        if envelope.keys() != _ENVELOPE_KEYS:
            extra = sorted(map(str, envelope.keys() - _ENVELOPE_KEYS))
            missing = sorted(_ENVELOPE_KEYS - envelope.keys())
            detail = f"unknown field {extra[0]!r}" if extra else f"missing field {missing[0]!r}"
            raise InvalidSnapshot(f"snapshot envelope: {detail}")
        address = envelope["id"]
        try:
            validate_address(address)
        except InvalidValue:
            raise InvalidSnapshot("snapshot id is not a valid process address") from None
        version = envelope["version"]
        if type(version) is not int or not 0 <= version <= U64_MAX:
            raise InvalidSnapshot("snapshot version must be an unsigned 64-bit integer")
        claimed = envelope["root_hash"]
        if type(claimed) is not str:
            raise InvalidSnapshot("snapshot root_hash must be text")
        limits = Limits.from_dict(envelope["limits"])
        try:
            root = from_decoded(envelope["root"]) if native is None else decoded_root
        except InvalidValue as exc:
            raise InvalidSnapshot(f"invalid root value: {exc.detail}") from None
    finally:
        if gc_was_enabled:
            gc.enable()
    return address, version, root, limits, claimed


def check_root_hash(root: Node, claimed: str) -> None:
    """The last restore step (after schema validation, as the reference orders it)."""
    if root.hash != claimed:
        raise InvalidSnapshot("root hash mismatch")


__all__ = [
    "FORMAT",
    "MAGIC",
    "MAX_SNAPSHOT_BYTES",
    "TRAILER_BYTES",
    "encode_snapshot",
    "decode_snapshot",
    "decode_snapshot_unverified",
    "check_root_hash",
]
