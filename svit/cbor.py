"""The one deterministic CBOR encoding of Svit, its strict decoder and its hash seal.

Everything Svit writes as CBOR uses this encoding: process snapshots, tree values and
chunks (written by ``cbor2`` in :mod:`svit.tree`, which keeps maps in this key order),
every store record and every memory-archive record. Equal values give byte-identical encodings, so
the bytes can be hashed and compared.

The encoding:

* **Definite lengths only**, and every integer, length and tag head in its shortest
  form (RFC 8949 §4.2.1, preferred serialization).
* **Integers** are major types 0 and 1 (``-2**64 .. 2**64 - 1``); no bignum tags.
* **Floats are always IEEE 754 binary64** (``0xfb``), never shortened, so a number
  keeps its kind (``1.0`` stays a float); NaN and the infinities are not encoded.
* **Text** is UTF-8 (major 3), byte strings are major 2, ``null``/``true``/``false``
  are the simple values 22/21/20; lists and tuples are arrays.
* **Maps have text keys only, in ascending order of their UTF-8 bytes** compared byte
  by byte, which is Unicode code-point order; a key appears once. This is *not* the
  order RFC 8949 §4.2.1 names "core deterministic" (it compares the encoded keys, heads
  included, so a shorter key sorts first), nor RFC 7049's length-first "canonical"
  order: it is the order in which the tree keeps map entries, so a snapshot is the tree
  written out as it is held.
* **A script record** is ``tag(0x53564954, [source, documentation])`` ("SVIT").
* :class:`Raw` embeds bytes that are already one item in this encoding (a tree node
  from :func:`svit.tree.node_cbor`) without decoding them.

:func:`decode_item` reads exactly one item strictly (no indefinite lengths, no duplicate
keys, no tag but the ones the caller allows, no trailing bytes); :func:`decode` also
refuses any input that is not the encoding :func:`encode` would write for its value.

A **sealed record** (:func:`seal`, :func:`unseal`) is a map holding one extra text
field, the lowercase hex BLAKE3 digest of the encoding of the map without that field.
The hash field sits wherever the key order puts it.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Mapping
from typing import Any

import blake3
import cbor2

from .values import MAX_NESTING, Script

__all__ = [
    "SCRIPT_TAG",
    "MAX_DEPTH",
    "CBORDecodeError",
    "Raw",
    "head",
    "encode",
    "encode_text",
    "decode_item",
    "decode",
    "seal",
    "unseal",
    "script_from_tag",
]

#: Tag of a script record ``[source, documentation]`` (spells "SVIT"; unregistered).
SCRIPT_TAG = 0x53564954
#: Deepest nesting :func:`decode_item` accepts by default (a valid tree plus envelopes).
MAX_DEPTH = MAX_NESTING + 15

_DOUBLE = struct.Struct(">d").pack
_U64_LIMIT = 2**64
_INFINITY = float("inf")


class CBORDecodeError(ValueError):
    """Bytes that are not one strict (and, for :func:`decode`, deterministic) item.

    ``reason`` is one of ``malformed``, ``too_deep``, ``trailing``, ``non_canonical``,
    ``unsealed`` (no or a wrong hash field) and ``hash_mismatch``; ``kind`` names the
    decoder's own exception class for ``malformed`` when there was one.
    """

    def __init__(self, reason: str, detail: str, kind: str | None = None) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail
        self.kind = kind


class Raw:
    """Bytes that already are one item of this encoding, embedded as they are."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data


def head(major: int, argument: int) -> bytes:
    """The shortest head of ``major`` type with ``argument`` (a length, value or tag)."""
    top = major << 5
    if argument < 24:
        return bytes((top | argument,))
    if argument < 0x100:
        return bytes((top | 24, argument))
    if argument < 0x10000:
        return bytes((top | 25,)) + argument.to_bytes(2, "big")
    if argument < 0x100000000:
        return bytes((top | 26,)) + argument.to_bytes(4, "big")
    return bytes((top | 27,)) + argument.to_bytes(8, "big")


def encode_text(text: str) -> bytes:
    """One text item (UTF-8; a lone surrogate raises ``ValueError``)."""
    raw = text.encode("utf-8")
    return head(3, len(raw)) + raw


def _encode_into(value: Any, parts: list[bytes], depth: int) -> None:
    kind = type(value)
    if kind is str:
        raw = value.encode("utf-8")
        parts.append(head(3, len(raw)))
        parts.append(raw)
    elif kind is bool:
        parts.append(b"\xf5" if value else b"\xf4")
    elif kind is int:
        if 0 <= value < _U64_LIMIT:
            parts.append(head(0, value))
        elif -_U64_LIMIT <= value < 0:
            parts.append(head(1, -1 - value))
        else:
            raise ValueError("integer outside the 64-bit CBOR range")
    elif value is None:
        parts.append(b"\xf6")
    elif kind is float:
        if value != value or value in (_INFINITY, -_INFINITY):
            raise ValueError("numbers must be finite")
        parts.append(b"\xfb" + _DOUBLE(value))
    elif kind is bytes:
        parts.append(head(2, len(value)))
        parts.append(value)
    elif kind is Raw:
        parts.append(value.data)
    elif kind is dict:
        if depth >= MAX_DEPTH:
            raise ValueError("nesting is too deep to encode")
        parts.append(head(5, len(value)))
        for _, pair in _map_pairs(value, depth):
            parts.append(pair)
    elif kind is list or kind is tuple:
        if depth >= MAX_DEPTH:
            raise ValueError("nesting is too deep to encode")
        parts.append(head(4, len(value)))
        for item in value:
            _encode_into(item, parts, depth + 1)
    elif kind is Script:
        parts.append(head(6, SCRIPT_TAG))
        parts.append(b"\x82")
        _encode_into(value.source, parts, depth)
        _encode_into(value.documentation, parts, depth)
    else:
        raise ValueError(f"cannot encode a value of type {kind.__name__}")


def _map_pairs(mapping: Mapping[str, Any], depth: int) -> list[tuple[bytes, bytes]]:
    """``(key bytes, encoded key and value)`` of every entry, in key order."""
    pairs: list[tuple[bytes, bytes]] = []
    for key, item in mapping.items():
        if type(key) is not str:
            raise ValueError("map keys must be text")
        raw = key.encode("utf-8")
        parts = [head(3, len(raw)), raw]
        _encode_into(item, parts, depth + 1)
        pairs.append((raw, b"".join(parts)))
    pairs.sort(key=lambda pair: pair[0])
    return pairs


def encode(value: Any) -> bytes:
    """The deterministic encoding of ``value`` (see the module docstring).

    Raises ``ValueError`` for what the encoding cannot hold: a non-text map key, an
    integer outside 64 bits, an unsupported type, a lone surrogate.
    """
    parts: list[bytes] = []
    _encode_into(value, parts, 0)
    return b"".join(parts)


# ---------------------------------------------------------------------------
# Strict decoding


def script_from_tag(value: Any) -> Script:
    """The :class:`Script` a script tag's content stands for (else ``ValueError``)."""
    if type(value) not in (list, tuple) or len(value) != 2 or type(value[0]) is not str or type(value[1]) is not str:
        raise ValueError("malformed script record")
    return Script(value[0], value[1])


def _reject(*_args: Any) -> Any:
    raise ValueError("unsupported CBOR tag")


# Tags cbor2 would otherwise turn into Python objects (dates, bignums, decimals, shared
# references, regular expressions, MIME, UUIDs, sets, addresses, ...): all refused.
_BUILTIN_TAGS = (0, 1, 2, 3, 4, 5, 25, 28, 29, 30, 35, 36, 37, 52, 54, 100, 256, 258, 260, 261, 1004, 43000, 55799)
_SEMANTIC_REJECTS = {tag: _reject for tag in _BUILTIN_TAGS}
_SCRIPT_ONLY: Mapping[int, Callable[[Any], Any]] = {SCRIPT_TAG: script_from_tag}


def _tag_hook(tags: Mapping[int, Callable[[Any], Any]]) -> Callable[[Any, bool], Any]:
    def hook(tag: Any, _immutable: bool = False) -> Any:
        build = tags.get(tag.tag)
        if build is None:
            raise ValueError("unsupported CBOR tag")
        return build(tag.value)

    return hook


_SCRIPT_HOOK = _tag_hook(_SCRIPT_ONLY)


def decode_item(
    data: bytes,
    *,
    tags: Mapping[int, Callable[[Any], Any]] | None = None,
    max_depth: int = MAX_DEPTH,
) -> Any:
    """Exactly one CBOR item, strictly, from ``data`` (raises :class:`CBORDecodeError`).

    Definite lengths only, no duplicate map keys, strict UTF-8, nesting at most
    ``max_depth``, and no tag but those in ``tags`` (tag number -> builder of the
    value; the default allows the script tag alone). It does not check that the bytes
    are the deterministic encoding: :func:`decode` does.
    """
    # Decoding [data, sentinel] proves data is exactly one item: trailing bytes would
    # become the second element instead of the unpredictable sentinel.
    sentinel = os.urandom(16)
    try:
        decoded = cbor2.loads(
            b"\x82" + data + b"\x50" + sentinel,
            tag_hook=_SCRIPT_HOOK if tags is None else _tag_hook(tags),
            semantic_decoders=_SEMANTIC_REJECTS,
            max_depth=max_depth + 1,
            allow_indefinite=False,
            allow_duplicate_keys=False,
            str_errors="strict",
        )
    except RecursionError:
        raise CBORDecodeError("too_deep", "nesting is too deep") from None
    except MemoryError:
        raise CBORDecodeError("malformed", "malformed encoding") from None
    except Exception as exc:  # the decoder's and the hooks' errors alike: the bytes are not ours
        if "maximum" in str(exc) and "depth" in str(exc):
            raise CBORDecodeError("too_deep", "nesting is too deep") from None
        kind = type(exc).__name__
        raise CBORDecodeError("malformed", f"malformed encoding ({kind})", kind) from None
    if type(decoded) is not list or len(decoded) != 2 or decoded[1] != sentinel:
        raise CBORDecodeError("trailing", "trailing data")
    return decoded[0]


def decode(data: bytes, *, max_depth: int = MAX_DEPTH) -> Any:
    """One strict item that is also exactly the encoding :func:`encode` writes for it."""
    value = decode_item(data, max_depth=max_depth)
    _check_deterministic(value, data)
    return value


def _script_default(encoder: Any, value: Any) -> None:
    if type(value) is not Script:
        raise ValueError(f"cannot encode a value of type {type(value).__name__}")
    encoder.encode(cbor2.CBORTag(SCRIPT_TAG, [value.source, value.documentation]))


def _in_order(value: Any) -> bool:
    """Whether every map in a decoded value holds text keys in encoding order, and every
    number is finite: then plain CBOR of it, written in the order decoded, is
    :func:`encode` of it."""
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is dict:
            previous: bytes | None = None
            for key in item:
                if type(key) is not str:
                    return False
                raw = key.encode("utf-8")
                if previous is not None and raw <= previous:
                    return False
                previous = raw
            stack.extend(item.values())
        elif kind is list or kind is tuple:
            stack.extend(item)
        elif kind is float and (item != item or item in (_INFINITY, -_INFINITY)):
            return False
    return True


def _check_deterministic(value: Any, data: bytes) -> None:
    """Refuse ``data`` unless it is :func:`encode` of ``value`` (decoded from it).

    The encoding is plain CBOR with maps in key order, so the check is cbor2's encoder
    (which keeps a decoded map's order) plus the key order: no Python-level re-encode.
    """
    if not _in_order(value):
        raise CBORDecodeError("non_canonical", "non-canonical encoding")
    try:
        again = cbor2.dumps(value, default=_script_default)
    except (ValueError, cbor2.CBOREncodeError):
        raise CBORDecodeError("non_canonical", "value outside the deterministic encoding") from None
    if again != data:
        raise CBORDecodeError("non_canonical", "non-canonical encoding")


# ---------------------------------------------------------------------------
# Sealed records


def _digest(pairs: list[tuple[bytes, bytes]]) -> str:
    return blake3.blake3(head(5, len(pairs)) + b"".join(pair for _, pair in pairs)).hexdigest()


def seal(body: Mapping[str, Any], hash_field: str) -> tuple[bytes, str]:
    """``(encoding of body plus hash_field, digest)``: the digest is BLAKE3 (hex) of the
    encoding of ``body`` alone; ``body`` must not hold ``hash_field`` itself."""
    if hash_field in body:
        raise ValueError("a sealed body may not hold its own hash field")
    pairs = _map_pairs(body, 0)
    digest = _digest(pairs)
    raw_field = hash_field.encode("utf-8")
    pairs.append((raw_field, encode_text(hash_field) + encode_text(digest)))
    pairs.sort(key=lambda pair: pair[0])
    return head(5, len(pairs)) + b"".join(pair for _, pair in pairs), digest


def unseal(data: bytes, hash_field: str) -> dict[str, Any]:
    """The verified map of a sealed record, hash field included (else :class:`CBORDecodeError`).

    The bytes must be one deterministic item, a map holding ``hash_field`` as text,
    whose value is the digest of the rest of the map.
    """
    value = decode(data)
    if type(value) is not dict or type(value.get(hash_field)) is not str:
        raise CBORDecodeError("unsealed", f"no {hash_field} field")
    body = {key: item for key, item in value.items() if key != hash_field}
    digest = blake3.blake3(cbor2.dumps(body, default=_script_default)).hexdigest()
    if digest != value[hash_field]:
        raise CBORDecodeError("hash_mismatch", "hash mismatch")
    return value
