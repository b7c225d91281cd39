"""One ``svit-control@1`` controller per address, over a durable handle, kept in a bounded LRU.

Every call here blocks on the store: the routes run them in a worker thread. A
controller serializes its own requests; the cache only hands them out. Two threads
missing the same address at once may both resume it; the first controller stored wins
and the other is dropped unused, so at most one controller per address is cached.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from ..control import ControlRequest, ControlResponse, Failure, ProcessController, Rejected
from ..errors import PersistenceNotFound
from ..store import ProcessStore

__all__ = ["ControllerCache"]


class ControllerCache:
    def __init__(self, store: ProcessStore, capacity: int, receipt_limit: int) -> None:
        self.store = store
        self.capacity = capacity
        self.receipt_limit = receipt_limit
        self._lock = threading.Lock()
        self._controllers: OrderedDict[str, ProcessController] = OrderedDict()

    def __len__(self) -> int:
        with self._lock:
            return len(self._controllers)

    def controller(self, address: str) -> ProcessController:
        """The cached controller of ``address``, resuming it on a miss
        (``PersistenceNotFound`` when the store does not hold it)."""
        with self._lock:
            found = self._controllers.get(address)
            if found is not None:
                self._controllers.move_to_end(address)
                return found
        handle = self.store.resume(address)
        fresh = ProcessController.durable(handle, receipt_limit=self.receipt_limit)
        with self._lock:
            found = self._controllers.get(address)
            if found is not None:
                self._controllers.move_to_end(address)
                return found
            self._controllers[address] = fresh
            while len(self._controllers) > self.capacity:
                self._controllers.popitem(last=False)
            return fresh

    def execute(self, request: ControlRequest) -> ControlResponse:
        """The controller's answer; an address the store does not hold is ``rejected``
        with ``persistence_not_found`` (nothing is created)."""
        try:
            return self.controller(request.process_id).execute(request)
        except PersistenceNotFound as missing:  # never there, or removed since it was cached
            self.forget(request.process_id)
            outcome = Rejected(0, "", Failure(missing.code, missing.message))
            return ControlResponse(request.client_id, request.request_id, request.process_id, False, outcome)

    def forget(self, address: str) -> None:
        with self._lock:
            self._controllers.pop(address, None)
