"""The store's key classes: every column family and key prefix, and what it may hold.

Durability requirement 1 (declared classes, fail-closed): a key is writable only when
it falls under a registered ``(column family, prefix)``; each class is either
``irreplaceable`` (the history of record: losing it loses a process) or
``rebuildable`` (derived from the history by :meth:`ProcessStore.reset_index`). A write
to anything else raises, and a reset path may only touch rebuildable classes.

Layout (addresses and paths are escaped so that one is never a prefix of another by
accident; ``SEP`` ends an escaped component)::

    default  m/format                         store format marker            irreplaceable
    default  m/store_id                       store id (archive headers)     irreplaceable
    default  r/restore                        memory-archive restore marker  irreplaceable
    default  d/<addr>                         tombstone of a removed address irreplaceable
    record   b/<addr>                         base envelope                  irreplaceable
    record   h/<addr>                         head record                    irreplaceable
    record   t/<addr>SEP<u64 position>        transaction envelope           irreplaceable
    record   s/<addr>SEP<snapshot hash>       store snapshot                 irreplaceable
    record   f/<child addr>                   fork reference (child->parent) irreplaceable
    record   e/<addr>SEP<session>SEP<u64 seq> reasoning event (not state)    irreplaceable
    record   j/<addr>SEP<session>             thread partition (retention,   irreplaceable
                                              fork-shared prefix)
    record   k/<addr>SEP<session>SEP<u64 thr> compaction checkpoint           irreplaceable
    record   w/<target>SEP<sender>SEP<u64 ver> waiting mail (mailbox entry;  irreplaceable
             <u64 index>                      per-sender order is key order)
    record   v/<target>SEP<message id>        delivered message id           irreplaceable
    record   y/<sender>SEP<u64 ver><u64 idx>  outcome to settle in the       irreplaceable
                                              sender's /system/outbox
    record   u/<sender>SEP<u64 ver><u64 idx>  undeliverable intent + reason  irreplaceable
    nodes    n/<32-byte digest>               content-addressed tree node    irreplaceable
    index    p/<addr>SEP<path>SEP<u64 pos>    path index (queries)           rebuildable
    index    c/<parent addr>SEP<child addr>   fork children (cut/remove)     rebuildable
    default  l/<addr>                         host lease (owner, epoch,      irreplaceable
                                              expiry) on a shared store
    index    q/<addr>                         ready: committed /inbox is not  rebuildable
                                              empty (hosts poll it)
    record   a/<addr>SEP<client>SEP<request>  control receipt (the answer   irreplaceable
                                              a retried request gets)
    record   o/<addr>SEP<u64 sequence>        receipt order (FIFO pruning)   irreplaceable
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ..errors import InvalidPersistence

__all__ = [
    "IRREPLACEABLE",
    "REBUILDABLE",
    "CF_DEFAULT",
    "CF_RECORD",
    "CF_NODES",
    "CF_INDEX",
    "COLUMN_FAMILIES",
    "SEP",
    "KeyClass",
    "KEY_CLASSES",
    "BY_NAME",
    "BY_PREFIX",
    "classify",
    "escape",
    "unescape",
    "u64",
    "from_u64",
    "FORMAT_KEY",
    "STORE_ID_KEY",
    "RESTORE_MARKER_KEY",
    "tombstone_key",
    "base_key",
    "head_key",
    "transaction_prefix",
    "transaction_key",
    "snapshot_prefix",
    "snapshot_key",
    "fork_key",
    "thread_events_prefix",
    "thread_session_prefix",
    "thread_event_key",
    "thread_partitions_prefix",
    "thread_partition_key",
    "thread_checkpoints_prefix",
    "thread_checkpoint_prefix",
    "thread_checkpoint_key",
    "node_key",
    "path_prefix_key",
    "path_key",
    "children_prefix",
    "child_key",
    "lease_prefix",
    "lease_key",
    "mail_prefix",
    "mail_sender_prefix",
    "mail_key",
    "delivered_prefix",
    "delivered_key",
    "settlement_prefix",
    "settlement_key",
    "undeliverable_prefix",
    "undeliverable_key",
    "ready_key",
    "receipt_prefix",
    "receipt_key",
    "receipt_order_prefix",
    "receipt_order_key",
    "READY_PREFIX",
    "MAIL_PREFIX",
    "SETTLEMENT_PREFIX",
    "next_prefix",
]

IRREPLACEABLE = "irreplaceable"
REBUILDABLE = "rebuildable"

CF_DEFAULT = "default"
CF_RECORD = "record"
CF_NODES = "nodes"
CF_INDEX = "index"
COLUMN_FAMILIES = (CF_DEFAULT, CF_RECORD, CF_NODES, CF_INDEX)

SEP = b"\x00\x00"
_U64 = struct.Struct(">Q")


@dataclass(frozen=True)
class KeyClass:
    """One registered key class: where it lives, its prefix, and whether it can be rebuilt."""

    name: str
    column_family: str
    prefix: bytes
    durability: str
    meaning: str


KEY_CLASSES: tuple[KeyClass, ...] = (
    KeyClass("meta", CF_DEFAULT, b"m/", IRREPLACEABLE, "store format marker and store id"),
    KeyClass("restore_marker", CF_DEFAULT, b"r/", IRREPLACEABLE,
             "memory-archive restore marker (outside every process; never exported)"),
    KeyClass("base", CF_RECORD, b"b/", IRREPLACEABLE, "base envelope of each address"),
    KeyClass("head", CF_RECORD, b"h/", IRREPLACEABLE, "head of each address (compare-and-swap target)"),
    KeyClass("transaction", CF_RECORD, b"t/", IRREPLACEABLE, "hash-chained transaction envelopes"),
    KeyClass("snapshot", CF_RECORD, b"s/", IRREPLACEABLE, "store snapshots (cut bases and explicit snapshots)"),
    KeyClass("fork", CF_RECORD, b"f/", IRREPLACEABLE, "fork references, child to parent boundary"),
    KeyClass("thread_event", CF_RECORD, b"e/", IRREPLACEABLE,
             "canonical reasoning events by address, session id and sequence (not process state)"),
    KeyClass("thread_partition", CF_RECORD, b"j/", IRREPLACEABLE,
             "per (address, session): first retained sequence and the fork-shared event prefix"),
    KeyClass("thread_checkpoint", CF_RECORD, b"k/", IRREPLACEABLE,
             "compaction checkpoints by address, session id and covered sequence"),
    KeyClass("tombstone", CF_DEFAULT, b"d/", IRREPLACEABLE,
             "removed addresses (so an archive export can tell a removal from a loss)"),
    KeyClass("node", CF_NODES, b"n/", IRREPLACEABLE, "content-addressed container nodes of committed trees"),
    KeyClass("mail", CF_RECORD, b"w/", IRREPLACEABLE,
             "waiting mail by target, sender, sender version and index (per-sender order is key order)"),
    KeyClass("delivered", CF_RECORD, b"v/", IRREPLACEABLE, "message ids delivered to each target (never twice)"),
    KeyClass("settlement", CF_RECORD, b"y/", IRREPLACEABLE,
             "delivery outcomes the sender's /system/outbox has not settled yet"),
    KeyClass("undeliverable", CF_RECORD, b"u/", IRREPLACEABLE, "refused intents with their reason, by sender"),
    KeyClass("path_index", CF_INDEX, b"p/", REBUILDABLE, "transactions by touched path"),
    KeyClass("child_index", CF_INDEX, b"c/", REBUILDABLE, "fork children by parent"),
    KeyClass("lease", CF_DEFAULT, b"l/", IRREPLACEABLE,
             "which host owns each address on a shared store (owner, epoch, expiry; not process state)"),
    KeyClass("ready_index", CF_INDEX, b"q/", REBUILDABLE, "addresses whose committed /inbox is not empty"),
    KeyClass("receipt", CF_RECORD, b"a/", IRREPLACEABLE,
             "control-protocol receipts by address, client id and request id (the answer a retry gets)"),
    KeyClass("receipt_order", CF_RECORD, b"o/", IRREPLACEABLE,
             "the order receipts were written in, per address (the oldest are pruned first)"),
)

BY_NAME = {kc.name: kc for kc in KEY_CLASSES}


_BY_PREFIX = {(kc.column_family, kc.prefix): kc for kc in KEY_CLASSES}
#: ``(column family, two-byte prefix)`` -> its key class (the look-up :func:`classify` tries first).
BY_PREFIX = _BY_PREFIX


def classify(column_family: str, key: bytes) -> KeyClass:
    """The registered class of ``key`` in ``column_family``; unregistered keys are refused."""
    found = _BY_PREFIX.get((column_family, key[:2]))
    if found is not None:
        return found
    for kc in KEY_CLASSES:
        if kc.column_family == column_family and key.startswith(kc.prefix):
            return kc
    raise InvalidPersistence(f"write to an unregistered key class in column family {column_family!r}")


def escape(text: str) -> bytes:
    """UTF-8 with NUL doubled as ``00 01``: prefix-preserving, and ``SEP`` never occurs inside."""
    return text.encode("utf-8", "surrogatepass").replace(b"\x00", b"\x00\x01")


def unescape(raw: bytes) -> str:
    return raw.replace(b"\x00\x01", b"\x00").decode("utf-8", "surrogatepass")


def u64(value: int) -> bytes:
    return _U64.pack(value)


def from_u64(raw: bytes) -> int:
    value: int = _U64.unpack(raw)[0]
    return value


FORMAT_KEY = b"m/format"
STORE_ID_KEY = b"m/store_id"
RESTORE_MARKER_KEY = b"r/restore"


def tombstone_key(address: str) -> bytes:
    return b"d/" + escape(address)


def base_key(address: str) -> bytes:
    return b"b/" + escape(address)


def head_key(address: str) -> bytes:
    return b"h/" + escape(address)


def transaction_prefix(address: str) -> bytes:
    return b"t/" + escape(address) + SEP


def transaction_key(address: str, position: int) -> bytes:
    return transaction_prefix(address) + u64(position)


def snapshot_prefix(address: str) -> bytes:
    return b"s/" + escape(address) + SEP


def snapshot_key(address: str, snapshot_hash: str) -> bytes:
    return snapshot_prefix(address) + snapshot_hash.encode("ascii")


def fork_key(child: str) -> bytes:
    return b"f/" + escape(child)


def thread_events_prefix(address: str) -> bytes:
    """Every reasoning event of ``address`` (all sessions)."""
    return b"e/" + escape(address) + SEP


def thread_session_prefix(address: str, session_id: str) -> bytes:
    return thread_events_prefix(address) + escape(session_id) + SEP


def thread_event_key(address: str, session_id: str, sequence: int) -> bytes:
    """Sequences are fixed-width (zero-padded big-endian u64), so key order is sequence order."""
    return thread_session_prefix(address, session_id) + u64(sequence)


def thread_partitions_prefix(address: str) -> bytes:
    """Every thread partition record of ``address`` (all sessions)."""
    return b"j/" + escape(address) + SEP


def thread_partition_key(address: str, session_id: str) -> bytes:
    return thread_partitions_prefix(address) + escape(session_id)


def thread_checkpoints_prefix(address: str) -> bytes:
    """Every compaction checkpoint of ``address`` (all sessions)."""
    return b"k/" + escape(address) + SEP


def thread_checkpoint_prefix(address: str, session_id: str) -> bytes:
    return thread_checkpoints_prefix(address) + escape(session_id) + SEP


def thread_checkpoint_key(address: str, session_id: str, through: int) -> bytes:
    """Fixed-width boundary, so the last key of a session is its latest checkpoint."""
    return thread_checkpoint_prefix(address, session_id) + u64(through)


def node_key(digest: bytes) -> bytes:
    return b"n/" + digest


def path_prefix_key(address: str) -> bytes:
    return b"p/" + escape(address) + SEP


def path_key(address: str, path: str, position: int) -> bytes:
    return path_prefix_key(address) + escape(path) + SEP + u64(position)


def children_prefix(parent: str) -> bytes:
    return b"c/" + escape(parent) + SEP


def child_key(parent: str, child: str) -> bytes:
    return children_prefix(parent) + escape(child)


def lease_prefix() -> bytes:
    return b"l/"


def lease_key(address: str) -> bytes:
    return b"l/" + escape(address)


MAIL_PREFIX = b"w/"
SETTLEMENT_PREFIX = b"y/"
READY_PREFIX = b"q/"


def next_prefix(prefix: bytes) -> bytes:
    """The least key above every key under ``prefix`` (a prefix ending in ``SEP``), to skip
    past one component in a scan: escaped text never holds ``00 00``, so ``00 01`` follows."""
    return prefix[:-1] + b"\x01"


def mail_prefix(target: str) -> bytes:
    """Every waiting intent for ``target``."""
    return MAIL_PREFIX + escape(target) + SEP


def mail_sender_prefix(target: str, sender: str) -> bytes:
    return mail_prefix(target) + escape(sender) + SEP


def mail_key(target: str, sender: str, version: int, index: int) -> bytes:
    """Fixed-width version and index, so one sender's intents are in send order."""
    return mail_sender_prefix(target, sender) + u64(version) + u64(index)


def delivered_prefix(target: str) -> bytes:
    return b"v/" + escape(target) + SEP


def delivered_key(target: str, message_id: str) -> bytes:
    return delivered_prefix(target) + escape(message_id)


def settlement_prefix(sender: str) -> bytes:
    return SETTLEMENT_PREFIX + escape(sender) + SEP


def settlement_key(sender: str, version: int, index: int) -> bytes:
    return settlement_prefix(sender) + u64(version) + u64(index)


def undeliverable_prefix(sender: str) -> bytes:
    return b"u/" + escape(sender) + SEP


def undeliverable_key(sender: str, version: int, index: int) -> bytes:
    return undeliverable_prefix(sender) + u64(version) + u64(index)


def ready_key(address: str) -> bytes:
    return READY_PREFIX + escape(address)


def receipt_prefix(address: str) -> bytes:
    """Every control receipt of ``address``."""
    return b"a/" + escape(address) + SEP


def receipt_key(address: str, client_id: str, request_id: str) -> bytes:
    return receipt_prefix(address) + escape(client_id) + SEP + escape(request_id)


def receipt_order_prefix(address: str) -> bytes:
    """Every receipt-order entry of ``address``, oldest first."""
    return b"o/" + escape(address) + SEP


def receipt_order_key(address: str, sequence: int) -> bytes:
    """Fixed-width sequence, so key order is the order receipts were written in."""
    return receipt_order_prefix(address) + u64(sequence)
