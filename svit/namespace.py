"""The process namespace: the nine root keys, `/system` metadata, and root validation.

Validation (reference §8.4) runs on every commit, restore and fork. Given the root it
replaces, a commit re-checks only the sections whose content hash changed; restore and
fork check everything. Whole-tree limits come from the cached node counts.
"""

from __future__ import annotations

import json
from operator import is_not
from typing import Any, Callable

from svit.lisp.errors import BudgetExhausted, LimitError, LispError

from . import tree
from .errors import (
    ExecutionLimitExceeded,
    InvalidMount,
    InvalidSnapshot,
    InvalidValue,
    ResourceLimitExceeded,
    ScriptFailed,
    SvitError,
)
from .limits import Limits
from .paths import validate_address, validate_mount_name, validate_script_name
from .tree import Node
from .values import Script

ROOT_KEYS = ("children", "inbox", "lib", "memory", "mounts", "ports", "system", "tasks", "thread")
ROOT_KEY_SET = frozenset(ROOT_KEYS)
SYSTEM_KEYS = ("api", "capabilities", "identity", "limits", "lineage", "outbox", "runtime")
LANGUAGE = "svit-lisp@2"
SNAPSHOT_FORMAT = "svit-snapshot@2"
API_OPERATIONS = ["discover", "exec", "read", "remove", "write"]
MAX_THREAD_BYTES = 64 * 1024 * 1024
MAX_THREAD_RECORDS = 100_000
DESCRIPTOR_KEYS = frozenset({"access", "kind", "locality", "source"})
INTENT_KEYS = frozenset({"body", "message_id", "to"})
#: An intent the mailbox could not deliver carries its reason as text.
UNDELIVERABLE_INTENT_KEYS = INTENT_KEYS | {"undeliverable"}
#: The keys of a delivered message in the target's ``/inbox``.
MESSAGE_KEYS = frozenset({"body", "from", "kind", "message_id"})


def system_metadata(address: str, limits: Limits, parent: str | None, outbox: list[Any]) -> dict[str, Any]:
    """The `/system` map the runtime generates for a process."""
    return {
        "api": {"operations": list(API_OPERATIONS)},
        "capabilities": [],
        "identity": {"address": address, "authenticated": False},
        "limits": limits.to_dict(),
        "lineage": {"parent": parent},
        "outbox": outbox,
        "runtime": {"language": LANGUAGE, "snapshot_format": SNAPSHOT_FORMAT},
    }


def initial_root(
    address: str,
    limits: Limits,
    memory: dict[str, Any],
    library: dict[str, Script],
    mounts: dict[str, dict[str, str]],
    ports: dict[str, Any],
) -> Node:
    """Version-zero state built by the builder."""
    return tree.from_value(
        {
            "children": {},
            "inbox": [],
            "lib": library,
            "memory": memory,
            "mounts": mounts,
            "ports": ports,
            "system": system_metadata(address, limits, None, []),
            "tasks": {},
            "thread": None,
        },
        scripts_allowed=True,
    )


def _expected_digests(address: str, limits: Limits) -> dict[str, bytes]:
    meta = system_metadata(address, limits, None, [])
    return {key: tree.from_value(meta[key], scripts_allowed=False).digest for key in ("api", "capabilities", "identity", "limits", "runtime")}


_expected_cache: dict[tuple[str, Limits], dict[str, bytes]] = {}


def expected_system(address: str, limits: Limits) -> dict[str, bytes]:
    key = (address, limits)
    found = _expected_cache.get(key)
    if found is None:
        if len(_expected_cache) > 1024:
            _expected_cache.clear()
        found = _expected_cache[key] = _expected_digests(address, limits)
    return found


def stat_record(path: str, segments: tuple[str, ...], node: Node) -> dict[str, Any]:
    """What ``stat`` reports for a committed (or working) node at ``path``."""
    kind = node.kind
    if kind == "map":
        facts: dict[str, Any] = {"content": "object", "entries": node.size}
    elif kind == "array":
        facts = {"content": "array", "entries": node.size}
    elif kind == "string":
        facts = {"bytes": node.size, "content": "text/plain"}
    elif kind == "script":
        facts = {"bytes": node.size, "content": "svit-script"}
    else:
        facts = {"content": "scalar"}
    writable = bool(segments) and (segments[0] == "memory" or (segments[0] == "lib" and len(segments) >= 2))
    return {
        "access": "read-write" if writable else "read",
        "attached": True,
        "facts": facts,
        "hash": node.hash,
        "kind": "directory" if node.is_container else "leaf",
        "locality": "cache",
        "mount": None,
        "path": path,
        "source": "process",
    }


_ROOT_INDEX = {key: index for index, key in enumerate(ROOT_KEYS)}


def section(root: Node, key: str) -> Node:
    chunk = root.value
    if root.code == tree.MAP and chunk.level == 0 and chunk.keys == ROOT_KEYS:
        item = chunk.items[_ROOT_INDEX[key]]  # the nine sections sit in one leaf, in this order
        return item if type(item) is Node else tree.leaf_node(item)
    found = tree.get(root, (key,))
    assert found is not None
    return found


_MEMORY_AT = _ROOT_INDEX["memory"]
_UNCHANGED: Any = object()
#: Which root sections are not the previous root's own when only /memory is new.
_MEMORY_ONLY = tuple(key == "memory" for key in ROOT_KEYS)


def _same(old: Any, item: Any) -> bool:
    return old is item or (type(old) is Node and type(item) is Node and old.digest == item.digest)


def validate_memory_only(root: Node, limits: Limits) -> None:
    """What :func:`validate_root` checks of a root that is the previous one with at most
    ``/memory`` replaced (the caller knows it: an activation's working copy that changed
    nothing else): the whole-tree sizes and that one section."""
    if root.count > limits.max_tree_nodes:
        raise ResourceLimitExceeded("process tree nodes")
    if root.text > limits.max_tree_text_bytes:
        raise ResourceLimitExceeded("process tree text bytes")
    chunk = root.value
    # The nine sections in one leaf, in order (section(), written out: /memory is stored
    # raw when a write to "/memory" made it a scalar).
    memory = chunk.items[_MEMORY_AT] if chunk.level == 0 and chunk.keys == ROOT_KEYS else section(root, "memory")
    tree.validate_value(memory if type(memory) is Node else tree.leaf_node(memory), limits, scripts_allowed=False)


def validate_root(
    root: Node,
    address: str,
    limits: Limits,
    compile_script: Callable[[str, Script], None],
    previous: Node | None = None,
    error: type[SvitError] = InvalidSnapshot,
) -> None:
    """Check the whole namespace schema; sections equal to ``previous``'s are trusted."""
    # 1. Whole-tree size, from cached counts.
    if root.count > limits.max_tree_nodes:
        raise ResourceLimitExceeded("process tree nodes")
    if root.text > limits.max_tree_text_bytes:
        raise ResourceLimitExceeded("process tree text bytes")
    # 2. Exact key set.
    # Map keys are kept in canonical order, so the sequence decides the set too.
    chunk = root.value if root.code == tree.MAP else None
    if chunk is not None and chunk.level == 0:
        keys, items = chunk.keys, chunk.items  # the root's nine entries sit in one leaf
    else:
        pairs = list(tree.entries(root)) if chunk is not None else []
        keys, items = tuple(key for key, _ in pairs), tuple(item for _, item in pairs)
    if keys != ROOT_KEYS:
        raise error("process root does not match the conventional namespace")
    old_root = previous.value if previous is not None and previous.code == tree.MAP else None
    if previous is None:
        differ = dict(zip(keys, items))
    elif old_root is not None and old_root.level == 0 and old_root.keys == ROOT_KEYS:
        if tuple(map(is_not, items, old_root.items)) == _MEMORY_ONLY:
            # The common commit (an activation's or a host write's): a new /memory, every
            # other section the previous root's own. The check below, in one comparison.
            memory = items[_ROOT_INDEX["memory"]]
            tree.validate_value(memory if type(memory) is Node else tree.leaf_node(memory), limits, scripts_allowed=False)
            return
        # Only the sections that are not the previous root's own (or equal to them) are checked.
        # A new /memory is checked, never compared: its check is O(1), its hash is not.
        differ = {key: item for key, item, old in zip(keys, items, old_root.items)
                  if item is not old and (key == "memory" or not (
                      type(old) is Node and type(item) is Node and old.digest == item.digest))}
    else:
        old_sections = dict(tree.entries(previous))
        differ = {key: item for key, item in zip(keys, items)
                  if not _same(old_sections.get(key), item)}

    if not differ:
        return  # every section is the previous root's own
    if len(differ) <= 1 and "memory" in differ:
        # The common commit (an activation's or a host write's): memory alone changed.
        memory = differ["memory"]
        tree.validate_value(memory if type(memory) is Node else tree.leaf_node(memory), limits, scripts_allowed=False)
        return

    def changed(key: str) -> Node | None:
        item = differ.get(key, _UNCHANGED)
        if item is _UNCHANGED:
            return None
        return item if type(item) is Node else tree.leaf_node(item)

    # 3. Reserved nodes.
    for key in ("children", "tasks"):
        node = changed(key)
        if node is not None and (node.kind != "map" or node.size != 0):
            raise error(f"/{key} is reserved and must be empty in the initial slice")
    # 4. Inbox.
    node = changed("inbox")
    if node is not None:
        if node.kind != "array":
            raise error("/inbox must be an array")
        tree.validate_value(node, limits, scripts_allowed=False)
    # 5. Mounts: descriptors only.
    node = changed("mounts")
    if node is not None:
        if node.kind != "map":
            raise error("/mounts must be a map")
        tree.validate_value(node, limits, scripts_allowed=False)
        for name, descriptor in node.to_value().items():
            validate_mount_name(name)
            check_descriptor(descriptor)
    # 6. Thread metadata.
    node = changed("thread")
    if node is not None:
        validate_thread(node, limits)
    # 7. Ports catalog.
    node = changed("ports")
    if node is not None:
        if node.kind != "map":
            raise error("/ports must be a map")
        for name in node.child_names():
            validate_script_name(name)
        tree.validate_value(node, limits, scripts_allowed=False)
    # 8. Memory.
    node = changed("memory")
    if node is not None:
        tree.validate_value(node, limits, scripts_allowed=False)
    # 9. Library: every entry a named script that compiles.
    node = changed("lib")
    if node is not None:
        if node.kind != "map":
            raise error("/lib must be a map")
        tree.validate_value(node, limits, scripts_allowed=True)
        # A script equal to the previous root's was compiled when it was written.
        known = section(previous, "lib") if previous is not None else None
        for name in node.child_names():
            validate_script_name(name)
            entry = tree.get(node, (name,))
            if entry is None or entry.kind != "script":
                raise InvalidValue("library writes require a script record")
            if known is not None and known.kind == "map":
                before = tree.get(known, (name,))
                if before is not None and before == entry:  # equal scripts: compared by value
                    continue
            compile_script(name, entry.to_value())
    # 10. System metadata.
    node = changed("system")
    if node is not None:
        validate_system(node, address, limits, error)


def check_descriptor(descriptor: Any) -> None:
    if type(descriptor) is not dict or set(descriptor) != DESCRIPTOR_KEYS:
        raise InvalidMount("mount descriptor must have exactly access, kind, locality and source")
    if descriptor["access"] not in ("read", "write", "read-write"):
        raise InvalidMount("mount access must be read, write or read-write")
    if descriptor["locality"] not in ("cache", "local", "remote"):
        raise InvalidMount("mount locality must be cache, local or remote")
    kind = descriptor["kind"]
    if type(kind) is not str or not (1 <= len(kind.encode()) <= 64) or not all(c in "abcdefghijklmnopqrstuvwxyz0123456789-" for c in kind):
        raise InvalidMount("mount kind must be 1-64 bytes of [a-z0-9-]")
    if type(descriptor["source"]) is not str:
        raise InvalidMount("mount source must be text")


def validate_thread(node: Node, limits: Limits) -> None:
    """`/thread` is null or a value; a map's entries are validated one by one."""
    if node.kind == "null":
        return
    if node.kind == "map":
        for key in node.child_names():
            entry = tree.get(node, (key,))
            assert entry is not None
            if key in ("events", "messages"):
                if entry.kind != "array":
                    raise InvalidValue(f"/thread/{key} must be an array")
                if entry.size > MAX_THREAD_RECORDS:
                    raise InvalidValue("maximum thread records exceeded")
                for index in range(entry.size):
                    record = tree.get(entry, (str(index),))
                    assert record is not None
                    tree.validate_value(record, limits, scripts_allowed=False)
            else:
                tree.validate_value(entry, limits, scripts_allowed=False)
    else:
        tree.validate_value(node, limits, scripts_allowed=False)
    if node.text + 16 * node.count > MAX_THREAD_BYTES:
        encoded = json.dumps(node.to_value(), separators=(",", ":"), ensure_ascii=False).encode()
        if len(encoded) > MAX_THREAD_BYTES:
            raise InvalidValue("maximum thread bytes exceeded")


def validate_system(node: Node, address: str, limits: Limits, error: type[SvitError] = InvalidSnapshot) -> None:
    if node.kind != "map" or node.child_names() != list(SYSTEM_KEYS):
        raise error("/system does not match the conventional schema")
    expected = expected_system(address, limits)
    for key, digest in expected.items():
        found = tree.get(node, (key,))
        if found is None or found.digest != digest:
            raise error(f"/system/{key} does not match process metadata")
    lineage = tree.get(node, ("lineage",))
    value = lineage.to_value() if lineage is not None else None
    if type(value) is not dict or set(value) != {"parent"}:
        raise error("/system/lineage must be a map with exactly one key, parent")
    if value["parent"] is not None:
        try:
            validate_address(value["parent"])
        except InvalidValue:
            raise error("/system/lineage parent must be a process address") from None
    outbox = tree.get(node, ("outbox",))
    if outbox is None or outbox.kind != "array":
        raise error("/system/outbox must be an array")
    tree.validate_value(outbox, limits, scripts_allowed=False)
    for intent in outbox.to_value():
        if type(intent) is not dict or type(intent.get("message_id")) is not str:
            raise error("/system/outbox items must be message intents")
        fields = set(intent)
        if fields != INTENT_KEYS and not (fields == UNDELIVERABLE_INTENT_KEYS and type(intent["undeliverable"]) is str):
            raise error("/system/outbox items must be message intents")
        try:
            validate_address(intent["to"])
        except InvalidValue:
            raise error("/system/outbox intent has an invalid address") from None


def compile_error_to_svit(exc: BaseException) -> SvitError:
    """Map a Lisp failure to the host error the reference uses (§4.9)."""
    if isinstance(exc, SvitError):
        return exc
    if isinstance(exc, LimitError):
        return ResourceLimitExceeded(exc.limit)
    if isinstance(exc, BudgetExhausted):
        return ExecutionLimitExceeded(exc.what)
    if isinstance(exc, LispError):
        return ScriptFailed(exc.message, stack=exc.stack, kind=exc.kind)
    return ScriptFailed("Lisp interpreter failed", kind="internal error")


__all__ = [
    "API_OPERATIONS",
    "DESCRIPTOR_KEYS",
    "INTENT_KEYS",
    "LANGUAGE",
    "MAX_THREAD_BYTES",
    "MESSAGE_KEYS",
    "MAX_THREAD_RECORDS",
    "ROOT_KEYS",
    "ROOT_KEY_SET",
    "SNAPSHOT_FORMAT",
    "SYSTEM_KEYS",
    "UNDELIVERABLE_INTENT_KEYS",
    "check_descriptor",
    "compile_error_to_svit",
    "expected_system",
    "initial_root",
    "section",
    "stat_record",
    "system_metadata",
    "validate_memory_only",
    "validate_root",
    "validate_system",
    "validate_thread",
]
