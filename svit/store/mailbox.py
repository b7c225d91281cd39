"""Message delivery (DESIGN §5.10): a durable mailbox between the processes of one store.

Every committed ``send!`` intent (an activation's append to ``/system/outbox``, or an
intent in the outbox of a created or imported process) is written, in the batch of the
commit that records it, as a **mailbox entry** keyed by ``(target, sender, sender
version, index)``: one sender's intents to one target are in key order, which is send
order. Nothing else ever writes one.

A **delivery** is one commit of the target (compare-and-swap on its head, like any
commit): it appends ``{"kind": "message", "message_id", "from", "body"}`` to its
``/inbox`` and, in the same batch, removes the entries, records each delivered id
(``v/``) and queues the outcome for the sender (``y/``). Either all of that is written or
none of it, so a retry after a crash anywhere delivers nothing twice and loses nothing;
an entry whose id is already recorded as delivered (a snapshot's outbox imported again)
is removed without a second delivery. An intent the target refuses (its limits, the
tree bounds) or an address the store does not hold is kept as **undeliverable** (``u/``)
with its reason, never dropped. Every batch that removes entries checks they still hold
the bytes it read (under the store lock, and as engine expectations where the engine
offers them), so two deliverers never both decide the fate of one intent.

**Settling** is one commit of the sender: delivered intents leave its
``/system/outbox`` (its history keeps them), refused ones stay marked
``"undeliverable": reason``, and the settled outcomes are removed in the same batch.

The **ready index** (``q/``, rebuildable) names every address whose committed ``/inbox``
is not empty; every commit that changes an inbox keeps it in its own batch.

Listing targets, senders to settle and ready addresses are prefix scans that skip from
one address to the next; nothing here scans every process.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from itertools import islice
from typing import TYPE_CHECKING, Any

from .. import tree
from ..activation import script_compiler
from ..cbor import Raw
from ..errors import InvalidPersistence, InvalidValue, PersistenceConflict, SvitError
from ..mutation import Append
from ..namespace import validate_root
from ..paths import validate_address
from ..process import Change, Transition
from ..tree import Node
from . import codec, keys, records
from .engine import WriteBatch
from .keys import CF_INDEX, CF_RECORD

if TYPE_CHECKING:
    from .handle import DurableProcess
    from .store import ProcessStore

__all__ = [
    "MAIL_FORMAT",
    "DELIVERED_FORMAT",
    "SETTLEMENT_FORMAT",
    "UNDELIVERABLE_FORMAT",
    "NO_SUCH_ADDRESS",
    "MAX_LIST_LIMIT",
    "refusal_reason",
    "Delivery",
    "MailAnnex",
    "Mailbox",
]

MAIL_FORMAT = "svit-mail@1"
DELIVERED_FORMAT = "svit-delivered@1"
SETTLEMENT_FORMAT = "svit-settlement@1"
UNDELIVERABLE_FORMAT = "svit-undeliverable@1"
MAIL_FIELDS = ("mail_format", "message_id", "from", "to", "body")
DELIVERED_FIELDS = ("delivered_format", "message_id", "target_version")
SETTLEMENT_FIELDS = ("settlement_format", "message_id", "to", "reason")
UNDELIVERABLE_FIELDS = ("undeliverable_format", "message_id", "from", "to", "body", "reason")

#: The reason an intent to an address the store does not hold is kept with.
NO_SUCH_ADDRESS = "no such address"
#: The most any one listing, delivery or settlement takes at a time.
MAX_LIST_LIMIT = 100_000
#: Outcomes one settlement commit takes at most (the rest are settled by the next one).
SETTLE_BATCH = 1024
#: Intents one refusal batch takes at most.
REFUSE_BATCH = 512
#: Order keys of imported intents whose id does not name their place start here, after
#: every index a commit can give (ids are ``<sender>:<version>:<index>``).
UNNUMBERED = 2**63
MAX_INDEX = 2**32


@dataclass(frozen=True)
class Delivery:
    """What one :meth:`Mailbox.deliver` did: ids delivered in order, ``(id, reason)``
    set aside as undeliverable, and the target's commit (None when nothing was appended)."""

    delivered: list[str]
    undeliverable: list[tuple[str, str]]
    change: Change | None


@dataclass(frozen=True)
class MailAnnex:
    """The mailbox records a delivery or settlement commit writes beside its transaction.

    ``removed``: record keys with the bytes they must still hold, deleted by the commit
    (else the commit is a ``PersistenceConflict``); ``put``: records it writes.
    """

    address: str
    removed: tuple[tuple[bytes, bytes], ...]
    put: tuple[tuple[bytes, bytes], ...]


@dataclass(frozen=True)
class _Entry:
    key: bytes
    raw: bytes
    message_id: str
    sender: str
    target: str
    body: Node
    version: int
    index: int

    def plain(self) -> dict[str, Any]:
        return {"message_id": self.message_id, "from": self.sender, "to": self.target, "body": self.body.to_value()}


def _check_after(after: Any) -> None:
    if after is not None and type(after) is not str:
        raise InvalidValue("after must be an address or None")


def _check_limit(limit: Any, name: str = "limit") -> int:
    if type(limit) is not int or not 1 <= limit <= MAX_LIST_LIMIT:
        raise InvalidValue(f"{name} must be an integer from 1 to {MAX_LIST_LIMIT}")
    return limit


def _order(sender: str, message_id: str, version: int, position: int) -> tuple[int, int]:
    """``(version, index)`` of intent ``message_id`` in the outbox of ``sender`` at ``version``.

    An id the runtime made (``<sender>:<v>:<i>``, ``v`` at most ``version``) names its place;
    any other id (a hand-made snapshot) is ordered after it by its outbox ``position``.
    """
    prefix = sender + ":"
    if message_id.startswith(prefix):
        parts = message_id[len(prefix):].split(":")
        if len(parts) == 2 and all(part.isascii() and part.isdigit() and len(part) <= 20 for part in parts):
            v, i = int(parts[0]), int(parts[1])
            if v <= version and i < MAX_INDEX:
                return v, i
    return version, UNNUMBERED + position


def _text(value: Any, what: str, field: str) -> str:
    if type(value) is not str:
        raise InvalidPersistence(f"{what}: malformed {field}")
    return value


class Mailbox:
    """The mailbox of one :class:`~svit.store.store.ProcessStore` (``store.mailbox``)."""

    def __init__(self, store: ProcessStore) -> None:
        self._store = store
        self._engine = store.engine
        self._lock = store.engine.lock

    # ------------------------------------------------------------------ records
    @staticmethod
    def _mail_record(message_id: str, sender: str, target: str, body: Node) -> bytes:
        values = {"mail_format": MAIL_FORMAT, "message_id": message_id, "from": sender, "to": target,
                  "body": Raw(tree.node_cbor(body))}
        return codec.hashed_record(MAIL_FIELDS, values, "mail_hash")[0]

    def _decode_mail(self, key: bytes, raw: bytes, target: str) -> _Entry:
        what = "mailbox entry"
        record = codec.decode_record(raw, MAIL_FIELDS, "mail_hash", what, format=MAIL_FORMAT)
        if record["mail_format"] != MAIL_FORMAT:
            raise InvalidPersistence(f"{what}: unsupported format")
        message_id = _text(record["message_id"], what, "message id")
        sender = _text(record["from"], what, "sender")
        if record["to"] != target:
            raise InvalidPersistence(f"{what}: target does not match its key")
        rest = key[len(keys.mail_prefix(target)):]
        expected = keys.escape(sender) + keys.SEP
        if not rest.startswith(expected) or len(rest) != len(expected) + 16:
            raise InvalidPersistence(f"{what}: sender does not match its key")
        version, index = keys.from_u64(rest[-16:-8]), keys.from_u64(rest[-8:])
        try:
            body = tree.from_decoded(record["body"])
        except SvitError as exc:
            raise InvalidPersistence(f"{what}: malformed body: {exc.message}") from None
        return _Entry(key, raw, message_id, sender, target, body, version, index)

    @staticmethod
    def _delivered_record(message_id: str, target_version: int) -> bytes:
        values = {"delivered_format": DELIVERED_FORMAT, "message_id": message_id, "target_version": target_version}
        return codec.hashed_record(DELIVERED_FIELDS, values, "delivered_hash")[0]

    @staticmethod
    def _settlement_record(message_id: str, target: str, reason: str | None) -> bytes:
        values = {"settlement_format": SETTLEMENT_FORMAT, "message_id": message_id, "to": target, "reason": reason}
        return codec.hashed_record(SETTLEMENT_FIELDS, values, "settlement_hash")[0]

    @staticmethod
    def _decode_settlement(raw: bytes) -> tuple[str, str | None]:
        what = "mail settlement"
        record = codec.decode_record(raw, SETTLEMENT_FIELDS, "settlement_hash", what, format=SETTLEMENT_FORMAT)
        if record["settlement_format"] != SETTLEMENT_FORMAT:
            raise InvalidPersistence(f"{what}: unsupported format")
        reason = record["reason"]
        if reason is not None and type(reason) is not str:
            raise InvalidPersistence(f"{what}: malformed reason")
        return _text(record["message_id"], what, "message id"), reason

    @staticmethod
    def _undeliverable_record(entry: _Entry, reason: str) -> bytes:
        values = {"undeliverable_format": UNDELIVERABLE_FORMAT, "message_id": entry.message_id, "from": entry.sender,
                  "to": entry.target, "body": Raw(tree.node_cbor(entry.body)), "reason": reason}
        return codec.hashed_record(UNDELIVERABLE_FIELDS, values, "undeliverable_hash")[0]

    # ------------------------------------------------------------------ staging (inside commits)
    def stage_commit(self, batch: WriteBatch, transition: Transition) -> None:
        """Stage what a commit of ``transition`` writes for the mailbox (store lock held):
        an entry per intent it appends to ``/system/outbox``, the ready-index entry when it
        changes ``/inbox``, and a delivery's or settlement's annex."""
        address = transition.address
        annex = transition.annex
        if annex is not None:
            if not isinstance(annex, MailAnnex) or annex.address != address:
                raise InvalidPersistence("a commit carries a foreign annex")
            self._stage_annex(batch, annex)
        inbox_changed = False
        for mutation in transition.mutations:
            path = mutation.path
            if path == "/system/outbox" and isinstance(mutation, Append):
                for position, node in enumerate(mutation.values):
                    self._stage_intent(batch, address, node, transition.version_after, position)
            elif path == "/inbox" or path.startswith("/inbox/"):
                inbox_changed = True
        if inbox_changed:
            self._stage_ready(batch, address, transition.root_after)

    def stage_new(self, batch: WriteBatch, address: str, root: Node, version: int) -> None:
        """Stage a created, imported or forked process's mail: an entry per intent of its
        outbox not yet marked undeliverable, and its ready-index entry."""
        outbox = tree.get(root, ("system", "outbox"))
        if outbox is not None and outbox.size:
            for position in range(outbox.size):
                node = tree.get(outbox, (str(position),))
                if node is not None and tree.get(node, ("undeliverable",)) is None:
                    self._stage_intent(batch, address, node, version, position)
        self._stage_ready(batch, address, root)

    def stage_remove(self, batch: WriteBatch, address: str) -> None:
        """Stage what removing ``address`` does to the mail (store lock held): mail waiting for
        it becomes undeliverable (no such address), and its own delivered ids, outcomes,
        refused intents and ready entry go with it. Mail it sent that is still waiting
        stays and is delivered (the sender committed it)."""
        for key, raw in self._engine.scan(CF_RECORD, keys.mail_prefix(address)):
            entry = self._decode_mail(key, raw, address)
            batch.delete(CF_RECORD, key)
            settle = entry.sender != address and self._exists(entry.sender)
            for put_key, value in self._refusal(entry, NO_SUCH_ADDRESS, settle=settle):
                batch.put(CF_RECORD, put_key, value)
        for prefix in (keys.delivered_prefix(address), keys.settlement_prefix(address),
                       keys.undeliverable_prefix(address)):
            for key, _ in self._engine.scan(CF_RECORD, prefix):
                batch.delete(CF_RECORD, key)
        batch.delete(CF_INDEX, keys.ready_key(address))

    def stage_ready_index(self, batch: WriteBatch, address: str, root: Node) -> int:
        """Stage the ready-index entry of ``address`` at ``root`` (a rebuild); 1 when ready."""
        inbox = tree.get(root, ("inbox",))
        if inbox is not None and inbox.size:
            batch.put(CF_INDEX, keys.ready_key(address), b"")
            return 1
        return 0

    def _stage_ready(self, batch: WriteBatch, address: str, root: Node) -> None:
        inbox = tree.get(root, ("inbox",))
        if inbox is not None and inbox.size:
            batch.put(CF_INDEX, keys.ready_key(address), b"")
        else:
            batch.delete(CF_INDEX, keys.ready_key(address))

    def _stage_intent(self, batch: WriteBatch, sender: str, node: Node, version: int, position: int) -> None:
        target_node = tree.get(node, ("to",))
        id_node = tree.get(node, ("message_id",))
        body = tree.get(node, ("body",))
        if target_node is None or id_node is None or body is None:
            raise InvalidPersistence("an outbox intent lacks its target, id or body")
        target, message_id = target_node.to_value(), id_node.to_value()
        if type(target) is not str or type(message_id) is not str:
            raise InvalidPersistence("an outbox intent's target and id are text")
        version_key, index_key = _order(sender, message_id, version, position)
        batch.put(CF_RECORD, keys.mail_key(target, sender, version_key, index_key),
                  self._mail_record(message_id, sender, target, body))

    def _stage_annex(self, batch: WriteBatch, annex: MailAnnex) -> None:
        for key, raw in annex.removed:
            if self._engine.get(CF_RECORD, key) != raw:
                raise PersistenceConflict()
            _expect(batch, key, raw)
            batch.delete(CF_RECORD, key)
        for key, value in annex.put:
            batch.put(CF_RECORD, key, value)

    def _write_guarded(self, annex: MailAnnex, absent: tuple[bytes, ...] = (), handle: Any = None) -> None:
        """Write ``annex`` as its own batch (no commit of any process), refused with
        ``PersistenceConflict`` unless every removed record still holds its bytes, every
        key of ``absent`` is absent, and ``handle`` (the process whose mail it decides,
        see :class:`~svit.store.handle.DurableProcess`) is still at the stored head with
        its fences holding.

        The head matters as much as the fences: the decision was made on the handle's
        state, and a handle behind its head (another writer committed meanwhile, e.g. the
        sends whose outcomes these are) would otherwise drop outcomes its stale outbox
        does not show, leaving the intents in the committed outbox forever."""
        with self._lock:
            self._engine.check()
            batch = self._engine.batch()
            for key in absent:
                if self._engine.get(CF_RECORD, key) is not None:
                    raise PersistenceConflict()
                _expect(batch, key, None)
            if handle is not None:
                self._stage_current_head(batch, handle)
            for space, key, value in getattr(handle, "fences", ()):
                if self._engine.get(space, key) != value:
                    raise PersistenceConflict()
                _expect(batch, key, value, space)
            self._stage_annex(batch, annex)
            self._engine.write(batch)

    def _stage_current_head(self, batch: WriteBatch, handle: DurableProcess) -> None:
        """Refuse (``PersistenceConflict``) unless ``handle`` is at the stored head of its
        address, and make ``batch`` expect that head's bytes (store lock held)."""
        key = keys.head_key(handle.address)
        raw = self._engine.get(CF_RECORD, key)
        if raw is None:
            raise PersistenceConflict()
        head = records.decode_head(raw, handle.address)
        if head["position"] != handle.head.position or head["hash"] != handle.head.hash:
            raise PersistenceConflict()
        _expect(batch, key, raw)

    def _refusal(self, entry: _Entry, reason: str, *, settle: bool) -> list[tuple[bytes, bytes]]:
        """The records that keep ``entry`` as undeliverable (and tell its sender, if ``settle``)."""
        out = [(keys.undeliverable_key(entry.sender, entry.version, entry.index),
                self._undeliverable_record(entry, reason))]
        if settle:
            out.append((keys.settlement_key(entry.sender, entry.version, entry.index),
                        self._settlement_record(entry.message_id, entry.target, reason)))
        return out

    # ------------------------------------------------------------------ reading
    def _entries(self, target: str, limit: int) -> list[_Entry]:
        prefix = keys.mail_prefix(target)
        return [self._decode_mail(key, raw, target)
                for key, raw in islice(self._engine.scan(CF_RECORD, prefix), limit)]

    def _distinct(self, prefix: bytes, limit: int, after: str | None = None) -> list[str]:
        """The distinct first components under ``prefix`` (those after ``after`` when
        given), skipping from one to the next."""
        found: list[str] = []
        start = None if after is None else keys.next_prefix(prefix + keys.escape(after) + keys.SEP)
        while len(found) < limit:
            scan = self._engine.scan(CF_RECORD, prefix, start)
            try:
                first = next(scan, None)
            finally:
                _close(scan)
            if first is None:
                break
            key = first[0]
            end = key.find(keys.SEP, len(prefix))
            if end < 0:
                raise InvalidPersistence("a mailbox key lacks its address separator")
            found.append(keys.unescape(key[len(prefix):end]))
            start = keys.next_prefix(key[:end + len(keys.SEP)])
        return found

    def _exists(self, address: str) -> bool:
        return (self._engine.get(CF_RECORD, keys.head_key(address)) is not None
                or self._engine.get(CF_RECORD, keys.base_key(address)) is not None)

    def targets(self, limit: int = 1000, *, after: str | None = None) -> list[str]:
        """Addresses with mail waiting, in key order (those after ``after`` when given: a
        listing goes on where a full one stopped)."""
        _check_limit(limit)
        _check_after(after)
        with self._lock:
            self._engine.check()
            return self._distinct(keys.MAIL_PREFIX, limit, after)

    def pending(self, target: str, limit: int = 100) -> list[dict[str, Any]]:
        """The intents waiting for ``target`` in delivery order: ``{message_id, from, to, body}``."""
        validate_address(target)
        _check_limit(limit)
        with self._lock:
            self._engine.check()
            return [entry.plain() for entry in self._entries(target, limit)]

    def unsettled(self, limit: int = 1000, *, after: str | None = None) -> list[str]:
        """Senders with delivery outcomes their ``/system/outbox`` has not settled yet, in
        key order (those after ``after`` when given)."""
        _check_limit(limit)
        _check_after(after)
        with self._lock:
            self._engine.check()
            return self._distinct(keys.SETTLEMENT_PREFIX, limit, after)

    def undeliverable(self, address: str) -> list[dict[str, Any]]:
        """The intents ``address`` sent that were refused: ``{message_id, from, to, body, reason}``."""
        validate_address(address)
        out = []
        with self._lock:
            self._engine.check()
            for _key, raw in self._engine.scan(CF_RECORD, keys.undeliverable_prefix(address)):
                what = "undeliverable intent"
                record = codec.decode_record(raw, UNDELIVERABLE_FIELDS, "undeliverable_hash", what,
                                             format=UNDELIVERABLE_FORMAT)
                if record["undeliverable_format"] != UNDELIVERABLE_FORMAT:
                    raise InvalidPersistence(f"{what}: unsupported format")
                try:
                    body = tree.from_decoded(record["body"]).to_value()
                except SvitError as exc:
                    raise InvalidPersistence(f"{what}: malformed body: {exc.message}") from None
                out.append({"message_id": _text(record["message_id"], what, "message id"),
                            "from": _text(record["from"], what, "sender"), "to": _text(record["to"], what, "target"),
                            "body": body, "reason": _text(record["reason"], what, "reason")})
        return out

    def ready(self, limit: int = 1000, *, after: str | None = None) -> list[str]:
        """Addresses whose committed ``/inbox`` is not empty, in key order (those after
        ``after`` when given)."""
        _check_limit(limit)
        _check_after(after)
        start = None if after is None else keys.ready_key(after) + b"\x00"  # the least key above it
        with self._lock:
            self._engine.check()
            return [keys.unescape(key[len(keys.READY_PREFIX):])
                    for key, _ in islice(self._engine.scan(CF_INDEX, keys.READY_PREFIX, start), limit)]

    def delivered(self, target: str, message_id: str) -> bool:
        """True once ``message_id`` was delivered to ``target``."""
        validate_address(target)
        if type(message_id) is not str:
            raise InvalidValue("message_id must be text")
        with self._lock:
            self._engine.check()
            return self._engine.get(CF_RECORD, keys.delivered_key(target, message_id)) is not None

    # ------------------------------------------------------------------ delivering
    def deliver(self, target: DurableProcess, *, limit: int = 64, inbox_limit: int | None = None) -> Delivery:
        """Deliver up to ``limit`` waiting intents to ``target`` as ONE commit of it.

        In key order (per-sender send order); an intent the target's limits refuse is set
        aside as undeliverable with the reason and the rest go on. With ``inbox_limit``,
        nothing more is appended once the target's inbox holds that many items. Nothing
        waiting (or no room): an empty :class:`Delivery` and no commit. A stale ``target``
        handle conflicts (``PersistenceConflict``) and nothing changes.
        """
        self._store.require_writable()  # a read-only store delivers nothing
        _check_limit(limit)
        if inbox_limit is not None:
            _check_limit(inbox_limit, "inbox_limit")
        self._check_own(target, "deliver")
        process = target.process
        address = target.address
        with process.lock:
            with self._lock:
                self._engine.check()
                entries = self._entries(address, limit)
                if not entries:
                    return Delivery([], [], None)
                root, version, limits = process.root, process.version, process.limits
                inbox = tree.get(root, ("inbox",))
                room = None if inbox_limit is None else inbox_limit - (0 if inbox is None else inbox.size)
                if room is not None and room <= 0:
                    return Delivery([], [], None)
                plan = self._plan(address, entries, root, version + 1, limits, room)
            items, delivered, refused, annex = plan
            change = None
            if items:
                change = process.deliver_inbox(items, annex=annex)
            elif annex.removed:
                self._write_guarded(annex, handle=target)
            return Delivery(delivered, refused, change)

    def _plan(self, address: str, entries: list[_Entry], root: Node, version_after: int, limits: Any,
              room: int | None) -> tuple[list[dict[str, Any]], list[str], list[tuple[str, str]], MailAnnex]:
        """Decide each entry's fate against ``root`` (store lock held)."""
        compiler = script_compiler(limits)
        items: list[dict[str, Any]] = []
        delivered: list[str] = []
        refused: list[tuple[str, str]] = []
        removed: list[tuple[bytes, bytes]] = []
        put: list[tuple[bytes, bytes]] = []
        senders: dict[str, bool] = {}
        candidate = root
        for entry in entries:
            sender_present = senders.get(entry.sender)
            if sender_present is None:
                sender_present = senders[entry.sender] = self._exists(entry.sender)
            if self._engine.get(CF_RECORD, keys.delivered_key(address, entry.message_id)) is not None:
                # Delivered before (an outbox imported again): settle it, never deliver twice.
                removed.append((entry.key, entry.raw))
                if sender_present:
                    put.append((keys.settlement_key(entry.sender, entry.version, entry.index),
                                self._settlement_record(entry.message_id, address, None)))
                continue
            if room is not None and len(items) >= room:
                break
            item = {"kind": "message", "message_id": entry.message_id, "from": entry.sender, "body": entry.body.to_value()}
            try:
                node = tree.from_value(item, scripts_allowed=False)
                following = Append("/inbox", (node,)).apply(candidate)
                validate_root(following, address, limits, compiler, previous=candidate, error=InvalidValue)
            except SvitError as exc:
                reason = refusal_reason(exc)
                refused.append((entry.message_id, reason))
                removed.append((entry.key, entry.raw))
                put.extend(self._refusal(entry, reason, settle=sender_present))
                continue
            candidate = following
            items.append(item)
            delivered.append(entry.message_id)
            removed.append((entry.key, entry.raw))
            put.append((keys.delivered_key(address, entry.message_id),
                        self._delivered_record(entry.message_id, version_after)))
            if sender_present:
                put.append((keys.settlement_key(entry.sender, entry.version, entry.index),
                            self._settlement_record(entry.message_id, address, None)))
        return items, delivered, refused, MailAnnex(address, tuple(removed), tuple(put))

    def refuse_absent(self, target: str) -> list[str]:
        """The store holds no ``target``: every intent waiting for it becomes undeliverable
        (``no such address``), kept and told to its sender, never dropped. Returns their
        ids (empty when ``target`` exists or nothing waits for it)."""
        self._store.require_writable()  # a read-only store delivers nothing
        validate_address(target)
        refused: list[str] = []
        while True:
            with self._lock:
                self._engine.check()
                if self._exists(target):
                    return refused
                entries = self._entries(target, REFUSE_BATCH)
                if not entries:
                    return refused
                put: list[tuple[bytes, bytes]] = []
                for entry in entries:
                    put.extend(self._refusal(entry, NO_SUCH_ADDRESS, settle=self._exists(entry.sender)))
                annex = MailAnnex(target, tuple((entry.key, entry.raw) for entry in entries), tuple(put))
                self._write_guarded(annex, absent=(keys.head_key(target), keys.base_key(target)))
                refused.extend(entry.message_id for entry in entries)

    def _check_own(self, handle: DurableProcess, operation: str) -> None:
        """Refuse a handle of another store (or no durable handle at all)."""
        if getattr(handle, "store", None) is not self._store:
            raise InvalidPersistence(f"{operation} needs a durable process of this store")

    # ------------------------------------------------------------------ settling
    def settle(self, sender: DurableProcess) -> Change | None:
        """Settle ``sender``'s ``/system/outbox`` as ONE commit of it: delivered intents
        leave it, refused ones are marked ``"undeliverable": reason``, and the outcomes
        are removed in the same batch. None when there was nothing to settle. A
        ``sender`` handle behind its stored head conflicts (``PersistenceConflict``) and
        nothing changes: its outbox may lack the very intents the outcomes settle."""
        self._store.require_writable()  # a read-only store delivers nothing
        self._check_own(sender, "settle")
        process = sender.process
        address = sender.address
        with process.lock:
            with self._lock:
                self._engine.check()
                outcomes = list(islice(self._engine.scan(CF_RECORD, keys.settlement_prefix(address)), SETTLE_BATCH))
            if not outcomes:
                return None
            delivered: set[str] = set()
            undeliverable: dict[str, str] = {}
            for _key, raw in outcomes:
                message_id, reason = self._decode_settlement(raw)
                if reason is None:
                    delivered.add(message_id)
                else:
                    undeliverable[message_id] = reason
            annex = MailAnnex(address, tuple(outcomes), ())
            change = process.settle_outbox(delivered, undeliverable, annex=annex)
            if change is None:
                # The outbox already says so (or no longer holds them): drop the outcomes alone.
                self._write_guarded(annex, handle=sender)
            return change


def refusal_reason(error: SvitError) -> str:
    """The reason kept with an intent the target's limits refuse: ``<code>: <detail>``."""
    return f"{error.code}: {error.detail}" if error.detail else error.code


def _expect(batch: WriteBatch, key: bytes, value: bytes | None, space: str = CF_RECORD) -> None:
    """Stage an engine-side expectation when the engine checks them (a shared database);
    under the store lock, the reads before it already decided for an engine of one owner."""
    expect = getattr(batch, "expect", None)
    if expect is not None:
        expect(space, key, value)


def _close(scan: Iterator[tuple[bytes, bytes]]) -> None:
    close = getattr(scan, "close", None)
    if close is not None:
        close()
