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

Values on the wire use the tagged encoding (``{"type": ..., "value": ...}``): the
request input, and in a committed outcome the activation output, log fields and
message bodies.
"""

from __future__ import annotations

import json
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, Union

from . import tree
from .errors import InvalidControlConfiguration, InvalidControlId, InvalidValue, SvitError, sanitize
from .limits import Limits
from .paths import validate_address, validate_script_name
from .values import from_tagged, to_tagged

__all__ = [
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
    "Outcome",
    "ProcessController",
    "Rejected",
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


def _text(data: dict[str, Any], name: str) -> str:
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


# ---------------------------------------------------------------------------- controller


class ControlledProcess(Protocol):
    """What the controller needs; both Process and the durable handle provide it."""

    address: str

    @property
    def version(self) -> int: ...

    @property
    def root_hash(self) -> str: ...

    def exec(self, path: str, input: Any = None) -> Any: ...

    def snapshot(self) -> bytes: ...


def _failure(exc: SvitError) -> Failure:
    return Failure(exc.code, sanitize(exc.message.replace("\n", " "), MESSAGE_CAP))


class ProcessController:
    """Serializes control requests against one process and keeps FIFO receipts."""

    def __init__(self, process: ControlledProcess, receipt_limit: int = DEFAULT_RECEIPT_LIMIT) -> None:
        if type(receipt_limit) is not int or not 1 <= receipt_limit <= MAX_RECEIPT_LIMIT:
            raise InvalidControlConfiguration(f"receipt limit must be 1-{MAX_RECEIPT_LIMIT}")
        for needed in ("exec", "snapshot", "version", "root_hash", "address"):
            if not hasattr(process, needed):
                raise InvalidControlConfiguration(f"the controlled process has no {needed}")
        self.process = process
        self.receipt_limit = receipt_limit
        self._lock = threading.Lock()
        self._receipts: OrderedDict[tuple[str, str], tuple[str, ControlResponse]] = OrderedDict()

    @property
    def address(self) -> str:
        return self.process.address

    def _respond(self, request: ControlRequest, outcome: Outcome) -> ControlResponse:
        return ControlResponse(request.client_id, request.request_id, request.process_id, False, outcome)

    def _rejected(self, request: ControlRequest, exc: SvitError) -> ControlResponse:
        return self._respond(request, Rejected(self.process.version, self.process.root_hash, _failure(exc)))

    def _store(self, key: tuple[str, str], fingerprint: str, response: ControlResponse) -> None:
        self._receipts[key] = (fingerprint, response)
        while len(self._receipts) > self.receipt_limit:
            self._receipts.popitem(last=False)

    def _validate(self, command: Activate) -> None:
        validate_script_name(command.script)
        limits = getattr(self.process, "limits", None) or Limits()
        node = tree.from_value(command.input, scripts_allowed=False)
        tree.validate_value(node, limits, scripts_allowed=False)

    def execute(self, request: ControlRequest | str | bytes | dict[str, Any]) -> ControlResponse:
        """Answer one request following §11.1 step by step, under the controller's lock."""
        if not isinstance(request, ControlRequest):
            request = decode_request(request)
        key = (request.client_id, request.request_id)
        fingerprint = request.fingerprint()
        with self._lock:
            # 1. A receipt answers retries; a different request may not reuse the ids.
            receipt = self._receipts.get(key)
            if receipt is not None:
                stored_fingerprint, stored = receipt
                if stored_fingerprint == fingerprint:
                    return replace(stored, replayed=True)
                return self._respond(
                    request,
                    Rejected(self.process.version, self.process.root_hash, Failure("request_id_reused", "request id was already used for a different request")),
                )
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
                response = self._respond(request, Conflict(request.expected_version, actual, self.process.root_hash))
                self._store(key, fingerprint, response)
                return response
            # 5. Run it; the outcome, success or failure, is the receipt.
            try:
                activation = self.process.exec(f"/lib/{request.command.script}", request.command.input)
            except SvitError as exc:
                response = self._rejected(request, exc)
            else:
                response = self._respond(
                    request,
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
            self._store(key, fingerprint, response)
            return response

    def execute_json(self, text: str | bytes) -> str:
        """Decode, execute and encode in one call (a decode failure raises)."""
        return encode_response(self.execute(decode_request(text)))

    def observe(self) -> dict[str, Any]:
        """``{process_id, version, root_hash}`` read at one point in the serialization."""
        with self._lock:
            return {"process_id": self.process.address, "version": self.process.version, "root_hash": self.process.root_hash}

    def snapshot(self) -> bytes:
        with self._lock:
            return self.process.snapshot()

    def receipts(self) -> int:
        """How many receipts are held (for tests and monitoring)."""
        with self._lock:
            return len(self._receipts)
