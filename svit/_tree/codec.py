"""A tree's two encodings: plain CBOR of its values, and its chunks one by one.

* :func:`node_cbor` is the value as plain deterministic CBOR (:mod:`svit.cbor`): what a
  snapshot and a mutation record hold. Chunk boundaries do not appear in it; restore
  rebuilds them.
* :func:`new_chunks` yields the chunks of a tree that a store does not hold yet, each with
  the bytes its digest covers (``Chunk.data``), and
  :func:`verify_chunk` checks stored bytes against a digest and names the chunks they
  refer to, so a stored tree is verified top-down without rebuilding it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, MutableMapping
from typing import Any

import blake3
import cbor2

from .. import cbor
from ..values import Script
from .chunks import MAP_LEAF_PREFIX, make_inner, make_leaf
from .node import ARRAY, CHUNK_REF_TAG, MAP, SCRIPT_TAG, Chunk, Node, leaves, make_container, script_default

__all__ = ["ChunkError", "chunk_children", "decode_chunk", "load_container", "new_chunks", "node_cbor", "verify_chunk"]


#: A leaf chunk's bytes are this prefix and then its container's own CBOR.
_PREFIX = len(MAP_LEAF_PREFIX)


def node_cbor(node: Node) -> bytes:
    """Deterministic CBOR of a node's value: maps in code-point key order, floats as
    binary64, scripts as tag :data:`svit._tree.node.SCRIPT_TAG`.

    Assembled from the leaf chunks' own encodings (their entries are already this CBOR);
    only a leaf that holds containers is written again, with each child container
    assembled in place. A container keeps what was assembled, so the next snapshot
    assembles only the containers that changed.
    """
    code = node.code
    if code != MAP and code != ARRAY:
        return cbor2.dumps(node.value, default=script_default)
    cached = node.cbor
    if cached is not None:
        return cached
    root: Chunk = node.value
    if root.level == 0 and not root.nested:
        encoded = root.data[_PREFIX:]
    else:
        parts = [cbor.head(5 if code == MAP else 4, root.size)]
        parts.extend(map(_entries_cbor, leaves(root)))
        encoded = b"".join(parts)
    node.cbor = encoded
    return encoded


def _entries_cbor(leaf: Chunk) -> bytes:
    """A leaf's entries as they appear inside their container's CBOR (no head)."""
    skip = len(cbor.head(5, len(leaf.items)))
    if not leaf.nested:
        return leaf.data[_PREFIX + skip:]
    if leaf.code == ARRAY and set(map(type, leaf.items)) == {Node}:
        # An array of containers (records, most often): their own encodings, back to back.
        parts = [item.cbor for item in leaf.items]
        return b"".join(parts if None not in parts else map(node_cbor, leaf.items))
    body: Any = dict(zip(leaf.keys or (), leaf.items)) if leaf.code == MAP else list(leaf.items)
    return cbor2.dumps(body, default=_write_nested)[skip:]


def _write_nested(encoder: Any, item: Any) -> None:
    """``cbor2`` hook inside :func:`node_cbor`: a child container is written as its own CBOR."""
    if type(item) is Node:
        encoder.write(node_cbor(item))
    else:
        script_default(encoder, item)


def chunk_children(chunk: Chunk) -> list[Chunk]:
    """The chunks one step below ``chunk`` in the store's graph: an inner chunk's children,
    or the root chunks of the containers a leaf holds."""
    if chunk.level:
        return list(chunk.items)
    if not chunk.nested:
        return []
    return [item.value for item in chunk.items if type(item) is Node]


def new_chunks(root: Chunk, known: Callable[[bytes], bool],
               whole: Callable[[bytes], bool] | None = None) -> Iterator[tuple[bytes, bytes]]:
    """``(digest, bytes)`` of every chunk reachable from ``root`` that ``known`` does not
    hold; a known chunk's whole subtree is taken as held.

    ``whole`` (asked without a store read) says a digest's whole subtree is held: a new
    chunk whose bytes were its base's with one reference rewritten, over a base it
    holds, shares every other child with that base, so only the rewritten one is visited.
    """
    stack = [root]
    seen: set[bytes] = set()
    while stack:
        chunk = stack.pop()
        digest = chunk.digest
        if digest in seen or known(digest):
            continue
        seen.add(digest)
        yield digest, chunk.data
        patch = chunk.patch
        if whole is not None and patch is not None and patch[3] is not None and whole(patch[3]):
            child = chunk.items[patch[0]]
            if chunk.level:
                stack.append(child)
            elif type(child) is Node:
                stack.append(child.value)
        else:
            stack.extend(chunk_children(chunk))


class ChunkError(ValueError):
    """Stored chunk bytes that are not a chunk, or do not match their digest."""


def _ref(value: Any) -> bytes:
    if type(value) is not bytes or len(value) != 32:
        raise ValueError("malformed chunk reference")
    return value


def _script(value: Any) -> Script:
    if type(value) not in (list, tuple) or len(value) != 2 or type(value[0]) is not str or type(value[1]) is not str:
        raise ValueError("malformed script record")
    return Script(value[0], value[1])


_TAGS: dict[int, Callable[[Any], Any]] = {CHUNK_REF_TAG: _ref, SCRIPT_TAG: _script}


def _tag_hook(tag: Any, _immutable: bool = False) -> Any:
    build = _TAGS.get(tag.tag)
    if build is None:
        raise ValueError("unsupported CBOR tag")
    return build(tag.value)


def decode_chunk(digest: bytes, data: bytes, *, verify: bool = True) -> tuple[str, Any]:
    """Check stored chunk bytes against ``digest`` and decode them: ``(kind, body)``.

    ``verify=False`` skips the digest check, for a caller that rebuilds the chunk from
    what was decoded and compares the rebuilt chunk's digest instead.

    ``kind`` is ``"m"`` (map leaf, body a dict in key order), ``"a"`` (array leaf, body
    a list), ``"M"`` or ``"A"`` (inner chunk, body the list of child digests). In a leaf
    a child container is its 32-byte digest (``bytes``) and a script a :class:`Script`.
    """
    if verify and blake3.blake3(data).digest() != digest:
        raise ChunkError("content does not match its digest")
    try:
        decoded = cbor2.loads(data, tag_hook=_tag_hook, allow_indefinite=False, allow_duplicate_keys=False,
                              str_errors="strict")
    except Exception as exc:  # the decoder's and the hooks' errors alike: the bytes are not a chunk
        raise ChunkError(f"malformed chunk ({type(exc).__name__})") from None
    if type(decoded) is not list or len(decoded) != 2 or decoded[0] not in ("m", "a", "M", "A"):
        raise ChunkError("malformed chunk record")
    kind, body = decoded
    if kind in ("M", "A"):
        if type(body) is not bytes or not body or len(body) % 32:
            raise ChunkError("malformed inner chunk")
        return kind, [body[i:i + 32] for i in range(0, len(body), 32)]
    if not (kind == "m" and type(body) is dict or kind == "a" and type(body) is list):
        raise ChunkError("malformed leaf chunk")
    return kind, body


def load_container(digest: bytes, fetch: Callable[[bytes], bytes | None],
                   cache: MutableMapping[bytes, Chunk] | None = None) -> Node:
    """The container node whose root chunk has ``digest``, rebuilt from stored chunks.

    ``fetch`` returns a chunk's stored bytes (None when missing); every chunk is checked
    against its digest and rebuilt with the same chunk constructors a commit uses, so the
    node is exactly the one that was stored (its aggregates included). ``cache`` keeps
    rebuilt chunks by digest: chunks are immutable and shared between versions, so a
    second version of a tree costs only the chunks it does not share.
    """
    chunk = _load_chunk(digest, fetch, {} if cache is None else cache)
    return make_container(chunk.code, chunk)


def _load_chunk(digest: bytes, fetch: Callable[[bytes], bytes | None], cache: MutableMapping[bytes, Chunk]) -> Chunk:
    found = cache.get(digest)
    if found is not None:
        return found
    data = fetch(digest)
    if data is None:
        raise ChunkError(f"chunk {digest.hex()[:16]} is missing")
    # The rebuilt chunk's digest is compared below: that checks the bytes' content.
    kind, body = decode_chunk(digest, data, verify=False)
    chunk: Chunk
    if kind in ("M", "A"):
        code = MAP if kind == "M" else ARRAY
        children = tuple(_load_chunk(child, fetch, cache) for child in body)
        level = children[0].level
        if any(child.code != code or child.level != level for child in children):
            raise ChunkError("inner chunk over mismatched children")
        chunk = make_inner(code, level + 1, children)
    else:
        values = body.values() if kind == "m" else body
        items = tuple(make_container(*_code_and(_load_chunk(v, fetch, cache))) if type(v) is bytes else v
                      for v in values)
        keys = tuple(body) if kind == "m" else None
        chunk = make_leaf(MAP if kind == "m" else ARRAY, keys, items)
    if chunk.digest != digest:
        raise ChunkError(f"chunk {digest.hex()[:16]} does not rebuild to its digest")
    cache[digest] = chunk
    return chunk


def _code_and(chunk: Chunk) -> tuple[int, Chunk]:
    return chunk.code, chunk


def verify_chunk(digest: bytes, data: bytes) -> list[bytes]:
    """Check a stored chunk against ``digest``; return the digests it refers to.

    The digest covers the bytes, so a match proves them to be what was stored; they are
    still decoded strictly, so that only a well-formed chunk names children.
    """
    kind, body = decode_chunk(digest, data)
    if kind in ("M", "A"):
        children: list[bytes] = body  # a fresh list of the child digests
        return children
    values = body.values() if kind == "m" else body
    return [value for value in values if type(value) is bytes]
