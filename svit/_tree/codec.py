"""Deterministic CBOR of a tree node (the snapshot's value encoding), written in Python.

Definite lengths, minimal integer heads, floats as binary64, maps in code-point key
order, scripts as tag :data:`CBOR_SCRIPT_TAG`. The native module writes the same bytes;
this is the reference and the fallback without it.
"""

from __future__ import annotations

from typing import Any

import cbor2

from ..errors import InvalidValue
from ..values import Script
from .node import ARRAY, KEY_CACHE_MAX, MAP, Node, has_nodes

__all__ = ["CBOR_SCRIPT_TAG", "encode_head", "key_cbor", "leaf_cbor", "node_cbor_python", "script_default"]

#: CBOR tag of a script record ``[source, documentation]``. Chosen from the large
#: unassigned part of the IANA tag space (it spells "SVIT" in ASCII); not registered.
CBOR_SCRIPT_TAG = 0x53564954


def script_default(encoder: Any, obj: Any) -> None:
    """``cbor2`` hook for the one leaf plain CBOR cannot express: a script record."""
    if type(obj) is Script:
        encoder.encode(cbor2.CBORTag(CBOR_SCRIPT_TAG, [obj.source, obj.documentation]))
    else:
        raise InvalidValue(f"unsupported value type: {type(obj).__name__}")


def encode_head(major: int, length: int) -> bytes:
    """The CBOR initial byte(s) for ``major`` type with a definite ``length`` (minimal form)."""
    top = major << 5
    if length < 24:
        return bytes((top | length,))
    if length < 0x100:
        return bytes((top | 24, length))
    if length < 0x10000:
        return bytes((top | 25,)) + length.to_bytes(2, "big")
    if length < 0x100000000:
        return bytes((top | 26,)) + length.to_bytes(4, "big")
    return bytes((top | 27,)) + length.to_bytes(8, "big")


_KEY_CBOR: dict[str, bytes] = {}


def key_cbor(key: str) -> bytes:
    """The CBOR text item of a map key; memoized (bounded) because keys repeat a lot."""
    found = _KEY_CBOR.get(key)
    if found is None:
        raw = key.encode("utf-8")
        found = encode_head(3, len(raw)) + raw
        if len(_KEY_CBOR) >= KEY_CACHE_MAX:
            _KEY_CBOR.clear()
        _KEY_CBOR[key] = found
    return found


def leaf_cbor(value: Any) -> bytes:
    """The CBOR item of a raw stored leaf (scalar, text or script)."""
    return cbor2.dumps(value, default=script_default)


def node_cbor_python(node: Node) -> bytes:
    """The reference encoder (and the fallback without the native module).

    A container whose children are all leaves is encoded by ``cbor2`` once and the
    bytes are cached on the node; a container holding nodes is assembled from its
    children's encodings (the same bytes ``cbor2`` would write), so a repeated snapshot
    re-encodes nothing below an unchanged leaf-only container.
    """
    kind = node[0]
    if kind != MAP and kind != ARRAY:
        return leaf_cbor(node[1])
    try:
        return node.cached_cbor
    except AttributeError:
        pass
    value = node[1]
    if kind == MAP:
        if has_nodes(value.values()):
            parts = [encode_head(5, len(value))]
            append = parts.append
            for key, child in value.items():
                append(key_cbor(key))
                append(node_cbor_python(child) if type(child) is Node else leaf_cbor(child))
            return b"".join(parts)
        encoded = node.cached_cbor = cbor2.dumps(value, default=script_default)
        return encoded
    if has_nodes(value):
        parts = [encode_head(4, len(value))]
        parts.extend(node_cbor_python(child) if type(child) is Node else leaf_cbor(child) for child in value)
        return b"".join(parts)
    encoded = node.cached_cbor = cbor2.dumps(value, default=script_default)
    return encoded
