"""The ``spawn`` port: run one task in a child process forked from the committed parent.

The child is a process-only fork (its lineage names the parent; it starts a new reasoning
session with the parent's instructions), driven for exactly one turn by a host-chosen
reasoner. Its final snapshot is kept in this port's host-local registry; nothing is
written to the parent's ``/children``. Child ids are addresses and are never reused.
"""

from __future__ import annotations

import threading
from typing import Any

from svit import Message, PortContext, PortDescriptor, PortError, Ports, Svit, failure_text
from svit.errors import ChildUnavailable, SvitError
from svit.paths import validate_address

__all__ = [
    "DUPLICATE",
    "TASK_LIMIT",
    "SpawnPort",
]

TASK_LIMIT = 256 * 1024
DUPLICATE = "child address already exists"


class SpawnPort:
    """``{"id": <child address>, "task": str}`` -> ``{"id", "response"}``."""

    def __init__(
        self,
        reasoner: Any,
        *,
        ports: Ports | None = None,
        max_iterations: int | None = None,
        timeout: float = 600.0,
    ) -> None:
        if not callable(getattr(reasoner, "complete", None)):
            raise TypeError("the spawn port needs a reasoner with complete(system_prompt, messages, tools)")
        self.reasoner = reasoner
        self.child_ports = ports  # None: the child gets no port authority
        self.max_iterations = max_iterations
        self.timeout = timeout
        self._children: dict[str, bytes] = {}
        self._running: set[str] = set()
        self._lock = threading.Lock()

    def descriptor(self) -> PortDescriptor:
        return PortDescriptor(
            description="Fork this process into a child at the given address and let it answer one task.",
            input_schema={
                "type": "object",
                "properties": {
                    "id": {"type": "string", "description": "The child's svit:// address (unique)."},
                    "task": {"type": "string", "minLength": 1},
                },
                "required": ["id", "task"],
                "additionalProperties": False,
            },
            output='{"id": <child address>, "response": <the child\'s final answer>}',
            effect="child-process",
            limits=("task: 1 byte to 256 KiB of UTF-8", "one turn per child", "child ids are never reused"),
        )

    # ------------------------------------------------------------------ registry
    def child_ids(self) -> list[str]:
        with self._lock:
            return sorted(self._children)

    def child_snapshot(self, child_id: str) -> bytes:
        with self._lock:
            snapshot = self._children.get(child_id)
        if snapshot is None:
            raise ChildUnavailable(child_id)
        return snapshot

    # ------------------------------------------------------------------ execution
    def execute(self, context: PortContext, input: Any) -> Any:
        if not isinstance(input, dict):
            raise PortError('spawn input must be {"id": <child address>, "task": <text>}')
        child_id, task = input.get("id"), input.get("task")
        if type(child_id) is not str:
            raise PortError("spawn id must be a child address")
        try:
            validate_address(child_id)
        except SvitError:
            raise PortError("spawn id must be a valid svit:// address") from None
        if child_id == context.address:
            raise PortError(DUPLICATE)
        if type(task) is not str or not 1 <= len(task.encode("utf-8", "surrogatepass")) <= TASK_LIMIT:
            raise PortError("spawn task is empty or exceeds its limit")
        fork = getattr(context, "fork", None)
        if not callable(fork):
            raise PortError("spawn requires a Svit host")
        with self._lock:
            if child_id in self._children or child_id in self._running:
                raise PortError(DUPLICATE)
            self._running.add(child_id)
        try:
            snapshot, response = self._run_child(fork, child_id, task)
            with self._lock:
                self._children[child_id] = snapshot
        finally:
            with self._lock:
                self._running.discard(child_id)
        return {"id": child_id, "response": response}

    def _run_child(self, fork: Any, child_id: str, task: str) -> tuple[bytes, str]:
        try:
            process = fork(child_id)
            # The parent's pending inbox items are the parent's to answer, not the child's.
            while (head := process.inbox_front()) is not None:
                process.acknowledge_inbox(head)
            # One task, answered within this port call: a failed turn is reported, not retried.
            builder = Svit.resume(process).reasoner(self.reasoner).ports(self.child_ports or Ports()).max_attempts(1)
            if self.max_iterations is not None:
                builder.max_iterations(self.max_iterations)
            child = builder.build()
            replies = child.outbox()
            child.start()
            child.inbox().send(Message.user(task))
            child.block(self.timeout)
            reply = replies.recv(timeout=0)
            return child.snapshot(), reply.text
        except SvitError as exc:
            raise PortError(f"child turn failed: {exc.message}") from None
        except TimeoutError:
            raise PortError("child turn timed out") from None
        except Exception as exc:
            # Only the kind: an arbitrary exception's text can carry host paths or secrets.
            raise PortError(f"child turn failed: {failure_text(exc)}") from None
