"""Svit Control Protocol 1 (``svit-control@1``, reference §11.1).

A remote client drives one process with JSON requests carrying an expected version.
The :class:`ProcessController` is the single serialization point: it answers each
request with exactly one outcome — ``committed``, ``conflict`` or ``rejected`` — and
keeps receipts so that a client retrying after a lost response gets the same answer
(``replayed: true``) instead of a second commit. Identifiers are not credentials, and
two controllers over copies of one snapshot can both commit the same next version: the
protocol is optimistic concurrency for one controller, not a distributed lease.

The controller uses only what a process and a durable handle share — ``address``,
``version``, ``root_hash``, ``limits``, ``exec``, ``snapshot`` — so it works over an
in-memory :class:`svit.Process` and over a ``svit.store`` handle alike.

Where receipts live is a :class:`ReceiptBook`. By default it is memory (FIFO up to the
receipt limit, lost with the controller). :meth:`ProcessController.durable` keeps them in
the store of a durable handle (:mod:`svit.store.receipts`): a committed activation's
receipt is written in the same synced batch as its commit, a conflict's or a rejected
activation's in its own synced write before the answer is returned, so a client
retrying after a server restart gets its original answer. A durable controller also
reads the stored head before each request: when another writer moved it, the controller
resumes the handle and answers by the true version.

Values on the wire use the tagged encoding (``{"type": ..., "value": ...}``): the
request input, and in a committed outcome the activation output, log fields and
message bodies.
"""

from __future__ import annotations

import json
import re
import threading
from collections import OrderedDict
from collections.abc import Sized
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol, Union, cast

import blake3

from . import tree
from .errors import (
    InvalidControlConfiguration,
    InvalidControlId,
    InvalidValue,
    PersistenceConflict,
    PersistenceNotFound,
    SvitError,
    one_line,
)
from .limits import Limits
from .paths import validate_address, validate_script_name
from .values import from_tagged, to_tagged

if TYPE_CHECKING:
    from .activation import Activation
    from .store.handle import DurableProcess

__all__ = [
    "COMMIT_ATTEMPTS",
    "DEFAULT_RECEIPT_LIMIT",
    "MAX_RECEIPT_LIMIT",
    "MAX_VERSION",
    "MESSAGE_CAP",
    "PROTOCOL",
    "Activate",
    "Committed",
    "Conflict",
    "ControlRequest",
    "ControlResponse",
    "ControlledProcess",
    "Failure",
    "MemoryReceipts",
    "Outcome",
    "PendingReceipt",
    "ProcessController",
    "ReceiptBook",
    "Rejected",
    "committed_response",
    "validate_receipt_limit",
    "decode_request",
    "decode_response",
    "encode_request",
    "encode_response",
]

PROTOCOL = "svit-control@1"
DEFAULT_RECEIPT_LIMIT = 256
MAX_RECEIPT_LIMIT = 4096
MAX_VERSION = 2**64 - 1
MESSAGE_CAP = 1024
#: How often a durable controller runs an activation whose commit lost a race while the
#: version stayed (a receipt written beside it) before it answers ``rejected``.
COMMIT_ATTEMPTS = 3

_CONTROL_ID = re.compile(r"[A-Za-z0-9_.\-]{1,128}")


# ---------------------------------------------------------------------------- wire types


@dataclass(frozen=True)
class Activate:
    """The only command: run ``/lib/<script>`` with ``input`` (a plain Svit value)."""

    script: str
    input: Any = None

    def to_json(self) -> dict[str, Any]:
        return {"operation": "activate", "script": self.script, "input": to_tagged(self.input)}


@dataclass(frozen=True)
class ControlRequest:
    client_id: str
    request_id: str
    process_id: str
    expected_version: int
    command: Activate

    def to_json(self) -> dict[str, Any]:
        return {
            "protocol": PROTOCOL,
            "client_id": self.client_id,
            "request_id": self.request_id,
            "process_id": self.process_id,
            "expected_version": self.expected_version,
            "command": self.command.to_json(),
        }

    def fingerprint(self) -> str:
        """Canonical text used to decide whether a retry is *identical* (kinds included)."""
        return json.dumps(self.to_json(), sort_keys=True, ensure_ascii=False, separators=(",", ":"))

    def digest(self) -> str:
        """BLAKE3 (hex) of :meth:`fingerprint`: what receipt books keep to recognise a
        retry, whatever the size of the request."""
        return blake3.blake3(self.fingerprint().encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class Committed:
    previous_version: int
    activation: dict[str, Any]  # output, logs, messages, version, root_hash, changed (plain values)
    status: str = field(default="committed", init=False)

    def to_json(self) -> dict[str, Any]:
        a = self.activation
        return {
            "status": "committed",
            "previous_version": self.previous_version,
            "activation": {
                "output": to_tagged(a["output"]),
                "logs": [{"message": log["message"], "fields": to_tagged(log["fields"])} for log in a["logs"]],
                "messages": [{"message_id": m["message_id"], "to": m["to"], "body": to_tagged(m["body"])} for m in a["messages"]],
                "version": a["version"],
                "root_hash": a["root_hash"],
                "changed": list(a["changed"]),
            },
        }


@dataclass(frozen=True)
class Conflict:
    expected_version: int
    actual_version: int
    root_hash: str
    status: str = field(default="conflict", init=False)

    def to_json(self) -> dict[str, Any]:
        return {"status": "conflict", "expected_version": self.expected_version, "actual_version": self.actual_version, "root_hash": self.root_hash}


@dataclass(frozen=True)
class Failure:
    code: str
    message: str


@dataclass(frozen=True)
class Rejected:
    version: int
    root_hash: str
    failure: Failure
    status: str = field(default="rejected", init=False)

    def to_json(self) -> dict[str, Any]:
        return {
            "status": "rejected",
            "version": self.version,
            "root_hash": self.root_hash,
            "failure": {"code": self.failure.code, "message": self.failure.message},
        }


Outcome = Union[Committed, Conflict, Rejected]


@dataclass(frozen=True)
class ControlResponse:
    client_id: str
    request_id: str
    process_id: str
    replayed: bool
    outcome: Outcome

    def to_json(self) -> dict[str, Any]:
        return {
            "protocol": PROTOCOL,
            "client_id": self.client_id,
            "request_id": self.request_id,
            "process_id": self.process_id,
            "replayed": self.replayed,
            "outcome": self.outcome.to_json(),
        }


# ---------------------------------------------------------------------------- decoding


def _malformed(detail: str) -> InvalidValue:
    return InvalidValue(f"malformed control message: {detail}")


def _load(data: str | bytes | dict[str, Any]) -> dict[str, Any]:
    if isinstance(data, (str, bytes, bytearray)):
        try:
            data = json.loads(data)
        except (ValueError, RecursionError):
            raise _malformed("not JSON") from None
    if type(data) is not dict:
        raise _malformed("expected a JSON object")
    return data


def _control_id(data: dict[str, Any], name: str) -> str:
    value = data.get(name)
    if type(value) is not str or not value.isascii() or not _CONTROL_ID.fullmatch(value):
        raise InvalidControlId(f"{name} must be 1-128 bytes of [A-Za-z0-9_.-]")
    return value


def _version(data: dict[str, Any], name: str) -> int:
    value = data.get(name)
    if type(value) is not int or not 0 <= value <= MAX_VERSION:
        raise _malformed(f"{name} must be an unsigned 64-bit integer")
    return value


def _header(data: dict[str, Any]) -> tuple[str, str, str]:
    if data.get("protocol") != PROTOCOL:
        raise _malformed(f"protocol must be {PROTOCOL}")
    client_id = _control_id(data, "client_id")
    request_id = _control_id(data, "request_id")
    process_id = data.get("process_id")
    if type(process_id) is not str:
        raise _malformed("process_id must be text")
    validate_address(process_id)
    return client_id, request_id, process_id


def decode_request(data: str | bytes | dict[str, Any]) -> ControlRequest:
    """Parse and validate a request; unknown extra fields are ignored (additive evolution).

    Raises :class:`InvalidControlId` for bad identifiers and ``InvalidValue`` for any
    other malformation, including an unknown operation.
    """
    message = _load(data)
    client_id, request_id, process_id = _header(message)
    expected_version = _version(message, "expected_version")
    command = message.get("command")
    if type(command) is not dict:
        raise _malformed("command must be an object")
    operation = command.get("operation")
    if operation != "activate":
        raise _malformed(f"unknown operation: {str(operation)[:64]}")
    script = command.get("script")
    if type(script) is not str:
        raise _malformed("activate.script must be text")
    if "input" not in command:
        raise _malformed("activate.input is required")
    value = from_tagged(command["input"], scripts_allowed=False)
    return ControlRequest(client_id, request_id, process_id, expected_version, Activate(script, value))


def encode_request(request: ControlRequest) -> str:
    return json.dumps(request.to_json(), ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def encode_response(response: ControlResponse) -> str:
    """Compact JSON text of a response (values tagged)."""
    return json.dumps(response.to_json(), ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def _text(data: Any, name: str) -> str:
    if type(data) is not dict:
        raise _malformed(f"expected an object holding {name}")
    value = data.get(name)
    if type(value) is not str:
        raise _malformed(f"{name} must be text")
    return value


def decode_response(data: str | bytes | dict[str, Any]) -> ControlResponse:
    """Parse a response (for clients and round-trip tests); extra fields are ignored."""
    message = _load(data)
    client_id, request_id, process_id = _header(message)
    replayed = message.get("replayed", False)
    if type(replayed) is not bool:
        raise _malformed("replayed must be a boolean")
    outcome = message.get("outcome")
    if type(outcome) is not dict:
        raise _malformed("outcome must be an object")
    status = outcome.get("status")
    result: Outcome
    if status == "committed":
        a = outcome.get("activation")
        if type(a) is not dict or type(a.get("logs")) is not list or type(a.get("messages")) is not list:
            raise _malformed("committed.activation must hold logs and messages")
        changed = a.get("changed", [])
        if type(changed) is not list or any(type(p) is not str for p in changed):
            raise _malformed("activation.changed must be a list of paths")
        activation = {
            "output": from_tagged(a.get("output"), scripts_allowed=False),
            "logs": [{"message": _text(log, "message"), "fields": from_tagged(log.get("fields"), scripts_allowed=False)} for log in a["logs"]],
            "messages": [
                {"message_id": _text(m, "message_id"), "to": _text(m, "to"), "body": from_tagged(m.get("body"), scripts_allowed=False)}
                for m in a["messages"]
            ],
            "version": _version(a, "version"),
            "root_hash": _text(a, "root_hash"),
            "changed": list(changed),
        }
        result = Committed(_version(outcome, "previous_version"), activation)
    elif status == "conflict":
        result = Conflict(_version(outcome, "expected_version"), _version(outcome, "actual_version"), _text(outcome, "root_hash"))
    elif status == "rejected":
        failure = outcome.get("failure")
        if type(failure) is not dict:
            raise _malformed("rejected.failure must be an object")
        result = Rejected(_version(outcome, "version"), _text(outcome, "root_hash"), Failure(_text(failure, "code"), _text(failure, "message")))
    else:
        raise _malformed(f"unknown outcome status: {str(status)[:64]}")
    return ControlResponse(client_id, request_id, process_id, replayed, result)


# ---------------------------------------------------------------------------- receipts


class ReceiptBook(Protocol):
    """Where a controller keeps its receipts, by ``(client_id, request_id)``.

    ``lookup`` gives the stored ``(fingerprint, response)`` or None. ``record`` keeps the
    answer to a request that did not commit (a conflict, a rejected activation); a
    durable book makes it its own synced write before returning. A durable book also
    writes a committed activation's receipt in the commit's own batch (the controller
    hands it to ``exec`` as a :class:`PendingReceipt`), so no crash can leave a commit
    without its receipt or a receipt without its commit.
    """

    def lookup(self, client_id: str, request_id: str) -> tuple[str, ControlResponse] | None: ...

    def record(self, client_id: str, request_id: str, fingerprint: str, response: ControlResponse) -> None: ...


class MemoryReceipts:
    """Receipts in memory, the oldest dropped beyond ``limit`` (lost with the controller)."""

    def __init__(self, limit: int = DEFAULT_RECEIPT_LIMIT) -> None:
        self.limit = validate_receipt_limit(limit)
        self._receipts: OrderedDict[tuple[str, str], tuple[str, ControlResponse]] = OrderedDict()

    def lookup(self, client_id: str, request_id: str) -> tuple[str, ControlResponse] | None:
        return self._receipts.get((client_id, request_id))

    def record(self, client_id: str, request_id: str, fingerprint: str, response: ControlResponse) -> None:
        self._receipts[(client_id, request_id)] = (fingerprint, response)
        while len(self._receipts) > self.limit:
            self._receipts.popitem(last=False)

    def __len__(self) -> int:
        return len(self._receipts)


class PendingReceipt:
    """The receipt of an activation about to commit, to be written with that commit.

    The process completes it with the activation's result just before the commit is
    recorded (:class:`svit.process.CommitReceipt`); a store that keeps ``book`` stages
    it in the commit's batch and sets ``written`` once that batch is durable.
    """

    __slots__ = ("book", "request", "fingerprint", "response", "written")

    def __init__(self, book: ReceiptBook, request: ControlRequest, fingerprint: str) -> None:
        self.book = book
        self.request = request
        self.fingerprint = fingerprint
        self.response: ControlResponse | None = None
        self.written = False

    @property
    def client_id(self) -> str:
        return self.request.client_id

    @property
    def request_id(self) -> str:
        return self.request.request_id

    def complete(self, activation: Activation) -> None:
        self.response = committed_response(self.request, activation)


def committed_response(request: ControlRequest, activation: Any) -> ControlResponse:
    """The ``committed`` answer to ``request`` for a committed activation."""
    return ControlResponse(
        request.client_id, request.request_id, request.process_id, False,
        Committed(
            activation.version - 1,
            {
                "output": activation.output,
                "logs": [dict(log) for log in activation.logs],
                "messages": [dict(m) for m in activation.messages],
                "version": activation.version,
                "root_hash": activation.root_hash,
                "changed": list(getattr(activation, "changed", None) or []),
            },
        ),
    )


def validate_receipt_limit(limit: Any) -> int:
    """``limit`` when it is a receipt limit (1-4,096), else ``InvalidControlConfiguration``."""
    if type(limit) is not int or not 1 <= limit <= MAX_RECEIPT_LIMIT:
        raise InvalidControlConfiguration(f"receipt limit must be 1-{MAX_RECEIPT_LIMIT}")
    return limit


# ---------------------------------------------------------------------------- controller


class ControlledProcess(Protocol):
    """What the controller needs; both Process and the durable handle provide it.

    With a receipt book other than memory the controller calls ``exec(path, input,
    receipt=...)``: a durable handle writes that receipt with the commit.
    """

    @property
    def address(self) -> str: ...

    @property
    def version(self) -> int: ...

    @property
    def root_hash(self) -> str: ...

    def exec(self, path: str, input: Any = None) -> Any: ...

    def snapshot(self) -> bytes: ...


class _ReceiptProcess(Protocol):
    """A controlled process whose ``exec`` takes the receipt to record with its commit."""

    def exec(self, path: str, input: Any = None, *, receipt: PendingReceipt | None = None) -> Any: ...


def _failure(exc: SvitError) -> Failure:
    """The failure a response carries; a lone surrogate the message repeats from the
    request (a script name) becomes ``?``, so the response encodes as UTF-8."""
    return Failure(exc.code, one_line(exc.message, MESSAGE_CAP))


class ProcessController:
    """Serializes control requests against one process and keeps its receipts.

    ``receipts`` is where they are kept: None for memory (FIFO up to ``receipt_limit``);
    :meth:`durable` keeps them in a durable handle's store. One controller may be called
    from many threads: every request is answered under its lock.
    """

    def __init__(self, process: ControlledProcess, receipt_limit: int = DEFAULT_RECEIPT_LIMIT, *,
                 receipts: ReceiptBook | None = None) -> None:
        validate_receipt_limit(receipt_limit)
        for needed in ("exec", "snapshot", "version", "root_hash", "address"):
            if not hasattr(process, needed):
                raise InvalidControlConfiguration(f"the controlled process has no {needed}")
        self.process = process
        self.receipt_limit = receipt_limit
        self._lock = threading.Lock()
        #: The book receipts go to; a book given here also gets committed receipts through ``exec``.
        self._book: ReceiptBook = MemoryReceipts(receipt_limit) if receipts is None else receipts
        self._with_commit = receipts is not None
        #: The durable handle a :meth:`durable` controller keeps up with the store (else None).
        self._handle: DurableProcess | None = None

    @classmethod
    def durable(cls, handle: DurableProcess, receipt_limit: int = DEFAULT_RECEIPT_LIMIT) -> ProcessController:
        """A controller over a durable handle whose receipts live in the handle's store
        (:meth:`svit.store.ProcessStore.receipts`), at most ``receipt_limit`` per address.

        Before each request it reads the stored head; when another writer moved it, the
        controller continues on a resumed handle (``controller.process``; the one given
        here is left behind), so a stale version is answered with ``conflict`` and the
        true version.
        """
        validate_receipt_limit(receipt_limit)
        store = getattr(handle, "store", None)
        if store is None or not callable(getattr(store, "receipts", None)) or not callable(getattr(handle, "behind", None)):
            raise InvalidControlConfiguration("a durable controller needs a store handle (svit.store.DurableProcess)")
        book = store.receipts(handle.address, limit=receipt_limit)
        controller = cls(handle, receipt_limit, receipts=book)
        controller._handle = handle
        return controller

    @property
    def address(self) -> str:
        return self.process.address

    @property
    def book(self) -> ReceiptBook:
        """Where this controller's receipts are kept."""
        return self._book

    def _respond(self, request: ControlRequest, outcome: Outcome) -> ControlResponse:
        return ControlResponse(request.client_id, request.request_id, request.process_id, False, outcome)

    def _rejected(self, request: ControlRequest, exc: SvitError) -> ControlResponse:
        return self._respond(request, Rejected(self.process.version, self.process.root_hash, _failure(exc)))

    def _validate(self, command: Activate) -> None:
        validate_script_name(command.script)
        limits = getattr(self.process, "limits", None) or Limits()
        node = tree.from_value(command.input, scripts_allowed=False)
        tree.validate_value(node, limits, scripts_allowed=False)

    def _catch_up(self, *, force: bool = False) -> None:
        """(durable) Continue on a resumed handle when the stored head moved (or ``force``)."""
        handle = self._handle
        if handle is not None and (force or handle.behind()):
            self._handle = handle.resumed()
            self.process = self._handle

    def _answer(self, request: ControlRequest, fingerprint: str,
                receipt: tuple[str, ControlResponse]) -> ControlResponse:
        """The answer a stored receipt gives: a replay, or ``request_id_reused``."""
        stored_fingerprint, stored = receipt
        if stored_fingerprint == fingerprint:
            return replace(stored, replayed=True)
        return self._respond(
            request,
            Rejected(self.process.version, self.process.root_hash, Failure("request_id_reused", "request id was already used for a different request")),
        )

    def _keep(self, request: ControlRequest, fingerprint: str, response: ControlResponse) -> ControlResponse:
        self._book.record(request.client_id, request.request_id, fingerprint, response)
        return response

    def execute(self, request: ControlRequest | str | bytes | dict[str, Any]) -> ControlResponse:
        """Answer one request following §11.1 step by step, under the controller's lock."""
        if not isinstance(request, ControlRequest):
            request = decode_request(request)
        fingerprint = request.digest()
        with self._lock:
            # 0. A durable controller answers by the stored head, whoever moved it.
            try:
                self._catch_up()
            except PersistenceNotFound as exc:
                return self._rejected(request, exc)  # no address left to keep a receipt under
            # 1. A receipt answers retries; a different request may not reuse the ids.
            receipt = self._book.lookup(request.client_id, request.request_id)
            if receipt is not None:
                return self._answer(request, fingerprint, receipt)
            # 2. The request must be for this process (not stored).
            if request.process_id != self.process.address:
                return self._respond(
                    request,
                    Rejected(self.process.version, self.process.root_hash, Failure("process_mismatch", "request is for a different process")),
                )
            # 3. Invalid commands are rejected and not stored, so the ids stay usable.
            try:
                self._validate(request.command)
            except SvitError as exc:
                return self._rejected(request, exc)
            # 4. Optimistic concurrency: the client must have seen the current version.
            actual = self.process.version
            if request.expected_version != actual:
                return self._keep(request, fingerprint, self._respond(request, Conflict(request.expected_version, actual, self.process.root_hash)))
            # 5. Run it; the outcome, success or failure, is the receipt.
            if not self._with_commit:
                return self._keep(request, fingerprint, self._activate_in_memory(request))
            return self._activate(request, fingerprint)

    def _activate_in_memory(self, request: ControlRequest) -> ControlResponse:
        try:
            activation = self.process.exec(f"/lib/{request.command.script}", request.command.input)
        except SvitError as exc:
            return self._rejected(request, exc)
        return committed_response(request, activation)

    def _activate(self, request: ControlRequest, fingerprint: str) -> ControlResponse:
        """Run the activation handing its receipt to ``exec`` (a durable handle writes it
        in the commit's batch); when nothing commits, the answer is recorded on its own
        before it is returned."""
        path = f"/lib/{request.command.script}"
        lost: SvitError = PersistenceConflict()
        for _attempt in range(COMMIT_ATTEMPTS):
            pending = PendingReceipt(self._book, request, fingerprint)
            try:
                activation = cast(_ReceiptProcess, self.process).exec(path, request.command.input, receipt=pending)
            except SvitError as exc:
                if pending.written and pending.response is not None:
                    return pending.response  # committed and kept; a later step failed
                if not isinstance(exc, PersistenceConflict) or self._handle is None:
                    return self._keep(request, fingerprint, self._rejected(request, exc))
                # Another writer won the compare-and-swap: answer by what it left.
                lost = exc
                try:
                    self._catch_up(force=True)
                except PersistenceNotFound as gone:
                    return self._rejected(request, gone)
                receipt = self._book.lookup(request.client_id, request.request_id)
                if receipt is not None:
                    return self._answer(request, fingerprint, receipt)
                actual = self.process.version
                if actual != request.expected_version:
                    return self._keep(request, fingerprint, self._respond(request, Conflict(request.expected_version, actual, self.process.root_hash)))
                continue  # the version did not move (a receipt race): run it again
            response = pending.response or committed_response(request, activation)
            if pending.written:
                return response
            return self._keep(request, fingerprint, response)
        return self._keep(request, fingerprint, self._rejected(request, lost))

    def execute_json(self, text: str | bytes) -> str:
        """Decode, execute and encode in one call (a decode failure raises)."""
        return encode_response(self.execute(decode_request(text)))

    def observe(self) -> dict[str, Any]:
        """``{process_id, version, root_hash}`` read at one point in the serialization
        (a durable controller reads the stored head first)."""
        with self._lock:
            self._catch_up()
            return {"process_id": self.process.address, "version": self.process.version, "root_hash": self.process.root_hash}

    def snapshot(self) -> bytes:
        with self._lock:
            self._catch_up()
            return self.process.snapshot()

    def receipts(self) -> int:
        """How many receipts are held (for tests and monitoring)."""
        with self._lock:
            book = self._book
            if not isinstance(book, Sized):
                raise InvalidControlConfiguration("this receipt book does not count its receipts")
            return len(book)
