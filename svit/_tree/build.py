"""Building trees from plain host data: the reference Python builder.

The native builder (``svit._treecore``) must agree with this one exactly: same nodes,
same digests, same errors. It calls back into :func:`other_child` for script records and
unsupported values, so that part is written once.
"""

from __future__ import annotations

import math
from typing import Any, cast

import blake3

from ..errors import InvalidValue
from ..values import I64_MAX, I64_MIN, MAX_NESTING, Script
from .node import (
    ARRAY,
    BAD_TEXT,
    FALSE_DIGEST,
    INT_DIGESTS,
    KEY_HEADS,
    MAP,
    NESTING,
    NULL_DIGEST,
    TRUE_DIGEST,
    Node,
    array_digest,
    encode_keys,
    float_digest,
    hash_bytes,
    hash_many,
    int_digest,
    key_head,
    leaf,
    make_node,
    map_digest,
    pack_u64,
    script_info,
)

__all__ = ["SMALL_MAP", "build_array", "build_map", "build_python", "empty_array", "empty_map", "other_child"]

_H = blake3.blake3

#: Maps up to this many entries take the fused one-pass builder.
SMALL_MAP = 12


def build_python(value: dict[str, Any] | list[Any], scripts_allowed: bool, strict: bool) -> Node:
    """The reference builder for a container (the native one must agree with it exactly)."""
    try:
        if type(value) is dict:
            return build_map(value, scripts_allowed, 0, strict)
        return build_array(cast("list[Any]", value), scripts_allowed, 0, strict)
    except RecursionError:
        raise InvalidValue(NESTING) from None


def _children(
    values: list[Any], scripts_allowed: bool, depth: int, strict: bool
) -> tuple[list[Any], list[bytes], int, int, int, int]:
    """(items, digests, count, text, max child height or -1, max_script) for a container's children."""
    n = len(values)
    types = list(map(type, values))
    if types.count(str) == n:
        # Fast path for the common all-text container: no per-item interpreter dispatch.
        try:
            blobs = list(map(str.encode, values))
        except UnicodeEncodeError:
            raise InvalidValue(BAD_TEXT) from None
        if n > 4:
            digests = hash_many(b"\x04", blobs)
        else:
            digests = [hash_bytes(b"\x04" + blob) for blob in blobs]
        return values, digests, n, sum(map(len, blobs)), (0 if n else -1), -1
    items: list[Any] = []
    digests = []
    add_item, add_digest = items.append, digests.append
    count = text = height = 0
    max_script = -1
    for value, t in zip(values, types):
        if t is str:
            try:
                raw = value.encode()
            except UnicodeEncodeError:
                raise InvalidValue(BAD_TEXT) from None
            add_digest(_H(b"\x04" + raw).digest())
            text += len(raw)
            count += 1
        elif t is int:
            if not I64_MIN <= value <= I64_MAX:
                raise InvalidValue("integer is outside signed 64-bit range")
            add_digest(INT_DIGESTS.get(value) or int_digest(value))
            count += 1
        else:
            value, digest, c, x, h, s = other_child(value, t, scripts_allowed, depth, strict)
            add_digest(digest)
            count += c
            text += x
            if h > height:
                height = h
            if s > max_script:
                max_script = s
        add_item(value)
    return items, digests, count, text, height, max_script


def other_child(
    value: Any, t: type, scripts_allowed: bool, depth: int, strict: bool
) -> tuple[Any, bytes, int, int, int, int]:
    """(stored item, digest, count, text, height, max_script) of a child that is not text or an integer."""
    if t is dict or t is list:
        node = (build_map if t is dict else build_array)(value, scripts_allowed, depth + 1, strict)
        return node, node[2], node[3], node[4], node[5], node[6]
    if t is float:
        if not math.isfinite(value):
            raise InvalidValue("numbers must be finite")
        value = value or 0.0  # -0.0 is stored as 0.0 (they hash alike)
        return value, float_digest(value), 1, 0, 0, -1
    if t is bool:
        return value, (TRUE_DIGEST if value else FALSE_DIGEST), 1, 0, 0, -1
    if value is None:
        return None, NULL_DIGEST, 1, 0, 0, -1
    if t is Script:
        if not scripts_allowed:
            raise InvalidValue("script records are only valid below /lib")
        digest, script_text, source = script_info(value)
        return value, digest, 1, script_text, 0, source
    if t is str or t is int:
        return _other_child_scalar(value)
    raise InvalidValue(f"unsupported value type: {t.__name__}")


def _other_child_scalar(value: Any) -> tuple[Any, bytes, int, int, int, int]:
    found = leaf(value, False)
    return value, found[2], 1, found[4], 0, -1


def build_map(mapping: dict[Any, Any], scripts_allowed: bool, depth: int, strict: bool) -> Node:
    if depth >= MAX_NESTING:
        raise InvalidValue(NESTING)
    if len(mapping) <= SMALL_MAP:
        return _build_small_map(mapping, scripts_allowed, depth, strict)
    keys = list(mapping)
    n = len(keys)
    if list(map(type, keys)).count(str) != n:
        raise InvalidValue("map keys must be text")
    ordered = sorted(keys)
    if ordered != keys:
        if strict:
            raise InvalidValue("map keys are not in canonical order")
        keys = ordered
        values = list(map(mapping.__getitem__, keys))
    else:
        values = list(mapping.values())
    key_bytes = encode_keys(keys)
    items, digests, count, text, height, max_script = _children(values, scripts_allowed, depth, strict)
    return make_node(
        (
            MAP,
            dict(zip(keys, items)),
            map_digest(key_bytes, digests),
            count + 1,
            text + sum(map(len, key_bytes)),
            height + 1,
            max_script,
            digests,
        )
    )


def _build_small_map(mapping: dict[Any, Any], scripts_allowed: bool, depth: int, strict: bool) -> Node:
    """One fused pass for small maps, where per-call overheads dominate."""
    if list(map(type, mapping)).count(str) != len(mapping):
        raise InvalidValue("map keys must be text")
    keys = sorted(mapping)
    if strict and keys != list(mapping):
        raise InvalidValue("map keys are not in canonical order")
    parts = [b"\x06", pack_u64(len(keys))]
    add_part = parts.append
    items: list[Any] = []
    digests: list[bytes] = []
    add_item, add_digest = items.append, digests.append
    count = 1
    text = height = 0
    max_script = -1
    heads = [KEY_HEADS.get(key) or key_head(key) for key in keys]  # every key is checked before any value
    for key, head in zip(keys, heads):
        text += len(head) - 8
        value = mapping[key]
        t = type(value)
        if t is str:
            try:
                raw = value.encode()
            except UnicodeEncodeError:
                raise InvalidValue(BAD_TEXT) from None
            digest = _H(b"\x04" + raw).digest()
            text += len(raw)
            count += 1
            if height == 0:
                height = 1
        elif t is int:
            if not I64_MIN <= value <= I64_MAX:
                raise InvalidValue("integer is outside signed 64-bit range")
            digest = INT_DIGESTS.get(value) or int_digest(value)
            count += 1
            if height == 0:
                height = 1
        else:
            value, digest, c, x, h, s = other_child(value, t, scripts_allowed, depth, strict)
            count += c
            text += x
            if h + 1 > height:
                height = h + 1
            if s > max_script:
                max_script = s
        add_part(head)
        add_part(digest)
        add_digest(digest)
        add_item(value)
    return make_node(
        (MAP, dict(zip(keys, items)), _H(b"".join(parts)).digest(), count, text, height, max_script, digests)
    )


def build_array(values: list[Any], scripts_allowed: bool, depth: int, strict: bool) -> Node:
    if depth >= MAX_NESTING:
        raise InvalidValue(NESTING)
    items, digests, count, text, height, max_script = _children(values, scripts_allowed, depth, strict)
    return make_node((ARRAY, tuple(items), array_digest(digests), count + 1, text, height + 1, max_script, digests))


def empty_map() -> Node:
    return build_map({}, False, 0, False)


def empty_array() -> Node:
    return build_array([], False, 0, False)
