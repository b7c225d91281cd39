"""Control-protocol receipts kept in the store (``svit-control@1``, reference §11.1).

A :class:`StoreReceipts` is the :class:`svit.control.ReceiptBook` of one address: the
answer each ``(client_id, request_id)`` got, so that a client retrying after a lost
response or a server restart is answered from it instead of committing again.

* A **committed** activation's receipt is staged in the batch of the commit it answers
  (:meth:`ProcessStore.commit` calls :func:`stage_commit_receipt`): the synced write
  that makes the commit durable makes its receipt durable, so no crash leaves one
  without the other.
* A **conflict** or a **rejected** activation commits nothing: its receipt is its own
  synced write (:meth:`StoreReceipts.record`) made before the answer is returned.
* A receipt is never replaced: the first answer to a request is the one every retry gets.
* At most ``limit`` receipts per address: each write also deletes the oldest beyond it,
  in the same batch, by the receipt-order entries (``o/<addr>SEP<u64 sequence>``, one
  per receipt, in the order they were written).

Receipts belong to their address: :meth:`ProcessStore.remove` deletes them, a fork does
not copy them and a cut keeps them. Both records are sealed maps in the store's one
deterministic CBOR encoding, checked when read; a stored receipt that does not verify is
``InvalidPersistence`` naming it. On a shared engine (PostgreSQL) every receipt batch
carries expectations (the receipt still absent, its order entry still free, and for a
receipt of its own the head still the one read), so two servers over one database never
overwrite each other's receipts or keep one for an address just removed.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import islice
from typing import TYPE_CHECKING, Any

from ..control import (
    DEFAULT_RECEIPT_LIMIT,
    Committed,
    ControlResponse,
    PendingReceipt,
    decode_response,
    encode_response,
    validate_receipt_limit,
)
from ..errors import (
    InvalidPersistence,
    PersistenceConflict,
    PersistenceNotFound,
    ResourceLimitExceeded,
    SvitError,
)
from ..paths import validate_address
from ..process import Transition
from . import codec, keys
from .engine import WriteBatch
from .keys import CF_RECORD

if TYPE_CHECKING:
    from .store import ProcessStore

__all__ = [
    "RECEIPT_FORMAT",
    "RECEIPT_ORDER_FORMAT",
    "RECEIPT_FIELDS",
    "RECEIPT_ORDER_FIELDS",
    "MAX_RECEIPT_BYTES",
    "RECORD_ATTEMPTS",
    "StoreReceipts",
    "stage_commit_receipt",
]

RECEIPT_FORMAT = "svit-receipt@1"
RECEIPT_ORDER_FORMAT = "svit-receipt-order@1"
RECEIPT_FIELDS = ("receipt_format", "address", "client_id", "request_id", "sequence", "fingerprint", "response")
RECEIPT_ORDER_FIELDS = ("receipt_order_format", "address", "sequence", "client_id", "request_id")
#: The most one stored response may take (its compact JSON text); a committed answer
#: larger than this refuses its commit (``resource_limit_exceeded``), so nothing
#: commits without its receipt.
MAX_RECEIPT_BYTES = 8 * 1024 * 1024
#: How often :meth:`StoreReceipts.record` tries again when another writer of a shared
#: store took the order entry it wanted at the same moment.
RECORD_ATTEMPTS = 16
U64_MAX = 2**64 - 1


class StoreReceipts:
    """The receipts of ``address`` in ``store``, at most ``limit`` of them (oldest pruned)."""

    def __init__(self, store: ProcessStore, address: str, limit: int = DEFAULT_RECEIPT_LIMIT) -> None:
        validate_address(address)
        self.store = store
        self.address = address
        self.limit = validate_receipt_limit(limit)

    # ------------------------------------------------------------------ the book
    def lookup(self, client_id: str, request_id: str) -> tuple[str, ControlResponse] | None:
        """``(fingerprint, response)`` stored for the request, verified, or None."""
        engine = self.store.engine
        with engine.lock:
            engine.check()
            raw = engine.get(CF_RECORD, keys.receipt_key(self.address, client_id, request_id))
        if raw is None:
            return None
        return self._decode(raw, client_id, request_id)

    def record(self, client_id: str, request_id: str, fingerprint: str, response: ControlResponse) -> None:
        """Keep the answer to a request that committed nothing, in its own synced write.

        A receipt already stored for the request stays (the first answer wins);
        ``PersistenceNotFound`` when the address is not stored.
        """
        engine = self.store.engine
        for _attempt in range(RECORD_ATTEMPTS):
            with engine.lock:
                engine.check()
                head = engine.get(CF_RECORD, keys.head_key(self.address))
                if head is None:
                    raise PersistenceNotFound(self.address)
                batch = engine.batch()
                if not self._stage(batch, client_id, request_id, fingerprint, response):
                    return
                if engine.shared:  # a receipt of its own is kept only for an address still there
                    batch.expect(CF_RECORD, keys.head_key(self.address), head)
                try:
                    engine.write(batch)
                except PersistenceConflict:
                    continue  # another writer took the order entry, or moved the head: read again
                return
        raise PersistenceConflict()

    def requests(self) -> list[tuple[str, str]]:
        """``(client_id, request_id)`` of every receipt kept, oldest first (verified)."""
        engine = self.store.engine
        prefix = keys.receipt_order_prefix(self.address)
        with engine.lock:
            engine.check()
            return [self._decode_order(key, raw, prefix) for key, raw in engine.scan(CF_RECORD, prefix)]

    def __len__(self) -> int:
        """How many receipts the address has."""
        engine = self.store.engine
        with engine.lock:
            engine.check()
            return sum(1 for _ in engine.scan(CF_RECORD, keys.receipt_order_prefix(self.address)))

    def stage(self, batch: WriteBatch, receipt: PendingReceipt, transition: Transition) -> None:
        """Stage the receipt of the committed activation ``transition`` in its batch (store
        lock held). ``PersistenceConflict`` when the request already has a receipt."""
        response = receipt.response
        if not isinstance(response, ControlResponse) or not isinstance(response.outcome, Committed):
            raise InvalidPersistence("a commit carries a receipt that was not completed")
        activation = response.outcome.activation
        if activation.get("version") != transition.version_after or activation.get("root_hash") != transition.root_after.hash:
            raise InvalidPersistence("a commit carries a receipt of another commit")
        if not self._stage(batch, receipt.client_id, receipt.request_id, receipt.fingerprint, response):
            raise PersistenceConflict()

    # ------------------------------------------------------------------ records
    def _stage(self, batch: WriteBatch, client_id: str, request_id: str, fingerprint: str,
               response: ControlResponse) -> bool:
        """Stage one receipt, its order entry and the pruning of the oldest; False (and
        nothing staged) when the request already has a receipt. Store lock held."""
        if (response.client_id, response.request_id, response.process_id) != (client_id, request_id, self.address):
            raise InvalidPersistence("a receipt must answer its own request on its own address")
        if response.replayed:
            raise InvalidPersistence("a replayed answer is not a receipt")
        if not codec.is_hex_hash(fingerprint):
            raise InvalidPersistence("a receipt fingerprint must be a BLAKE3 hex digest")
        engine = self.store.engine
        key = keys.receipt_key(self.address, client_id, request_id)
        if engine.get(CF_RECORD, key) is not None:
            return False
        text = encode_response(response)
        if len(text.encode("utf-8", "surrogatepass")) > MAX_RECEIPT_BYTES:
            raise ResourceLimitExceeded("control receipt bytes")
        order_prefix = keys.receipt_order_prefix(self.address)
        last = engine.last_key(CF_RECORD, order_prefix)
        sequence = 0 if last is None else self._sequence(last, order_prefix) + 1
        if sequence > U64_MAX:
            raise ResourceLimitExceeded("control receipt sequence")
        try:
            record = codec.hashed_record(RECEIPT_FIELDS, {
                "receipt_format": RECEIPT_FORMAT, "address": self.address, "client_id": client_id,
                "request_id": request_id, "sequence": sequence, "fingerprint": fingerprint, "response": text,
            }, "receipt_hash")[0]
        except ValueError:
            raise InvalidPersistence("receipt cannot be encoded (text that is not Unicode)") from None
        order = codec.hashed_record(RECEIPT_ORDER_FIELDS, {
            "receipt_order_format": RECEIPT_ORDER_FORMAT, "address": self.address, "sequence": sequence,
            "client_id": client_id, "request_id": request_id,
        }, "receipt_order_hash")[0]
        order_key = keys.receipt_order_key(self.address, sequence)
        batch.put(CF_RECORD, key, record)
        batch.put(CF_RECORD, order_key, order)
        if engine.shared:
            batch.expect(CF_RECORD, key, None)
            batch.expect(CF_RECORD, order_key, None)
        self._stage_pruning(batch, order_prefix, sequence)
        return True

    def _stage_pruning(self, batch: WriteBatch, order_prefix: bytes, newest: int) -> None:
        """Delete the oldest receipts beyond the limit (the one being staged counts)."""
        engine = self.store.engine
        scan = engine.scan(CF_RECORD, order_prefix)
        try:
            first = next(scan, None)
            if first is None:
                return
            excess = newest - self._sequence(first[0], order_prefix) + 1 - self.limit
            if excess <= 0:
                return
            # Sequences are written in order and removed only from the oldest, so the
            # entries before the newest ``limit - 1`` are the first ``excess`` ones.
            for key, raw in [first, *islice(scan, excess - 1)]:
                client_id, request_id = self._decode_order(key, raw, order_prefix)
                batch.delete(CF_RECORD, key)
                batch.delete(CF_RECORD, keys.receipt_key(self.address, client_id, request_id))
        finally:
            _close(scan)

    def _sequence(self, key: bytes, order_prefix: bytes) -> int:
        rest = key[len(order_prefix):]
        if len(rest) != 8:
            raise InvalidPersistence(f"receipt order of {self.address}: malformed key")
        return keys.from_u64(rest)

    def _decode_order(self, key: bytes, raw: bytes, order_prefix: bytes) -> tuple[str, str]:
        what = f"receipt order entry of {self.address}"
        record = codec.decode_record(raw, RECEIPT_ORDER_FIELDS, "receipt_order_hash", what, format=RECEIPT_ORDER_FORMAT)
        if record["receipt_order_format"] != RECEIPT_ORDER_FORMAT:
            raise InvalidPersistence(f"{what}: unsupported format")
        if record["address"] != self.address or record["sequence"] != self._sequence(key, order_prefix):
            raise InvalidPersistence(f"{what}: does not match its key")
        client_id, request_id = record["client_id"], record["request_id"]
        if type(client_id) is not str or type(request_id) is not str:
            raise InvalidPersistence(f"{what}: malformed request ids")
        return client_id, request_id

    def _decode(self, raw: bytes, client_id: str, request_id: str) -> tuple[str, ControlResponse]:
        what = f"control receipt of {self.address}"
        if len(raw) > MAX_RECEIPT_BYTES + 4096:
            raise InvalidPersistence(f"{what}: larger than a receipt can be")
        record: dict[str, Any] = codec.decode_record(raw, RECEIPT_FIELDS, "receipt_hash", what, format=RECEIPT_FORMAT)
        if record["receipt_format"] != RECEIPT_FORMAT:
            raise InvalidPersistence(f"{what}: unsupported format")
        if (record["address"], record["client_id"], record["request_id"]) != (self.address, client_id, request_id):
            raise InvalidPersistence(f"{what}: does not match its key")
        if not codec.is_u64(record["sequence"]):
            raise InvalidPersistence(f"{what}: malformed sequence")
        fingerprint, text = record["fingerprint"], record["response"]
        if not codec.is_hex_hash(fingerprint):
            raise InvalidPersistence(f"{what}: malformed fingerprint")
        if type(text) is not str:
            raise InvalidPersistence(f"{what}: malformed response")
        try:
            response = decode_response(text)
        except SvitError as exc:
            raise InvalidPersistence(f"{what}: malformed response ({exc.message})") from None
        except (RecursionError, ValueError, TypeError, KeyError, AttributeError):
            raise InvalidPersistence(f"{what}: malformed response") from None
        if (response.client_id, response.request_id, response.process_id) != (client_id, request_id, self.address) \
                or response.replayed:
            raise InvalidPersistence(f"{what}: answers another request")
        return fingerprint, response


def stage_commit_receipt(store: ProcessStore, batch: WriteBatch, transition: Transition) -> PendingReceipt | None:
    """Stage the receipt a committed activation carries (if any) in its commit's batch;
    returns it, to be marked written once that batch is. A receipt for another store or
    address is refused."""
    receipt = transition.receipt
    if not isinstance(receipt, PendingReceipt) or not isinstance(receipt.book, StoreReceipts):
        # None, or a receipt kept elsewhere (memory): its controller records it after the commit.
        return None
    book = receipt.book
    if book.store is not store or book.address != transition.address:
        raise InvalidPersistence("a commit carries a receipt of another store or address")
    book.stage(batch, receipt, transition)
    return receipt


def _close(scan: Iterator[tuple[bytes, bytes]]) -> None:
    close = getattr(scan, "close", None)
    if close is not None:
        close()
