"""Durable handles for the MCP tools, one per address in a bounded LRU, never stale.

Each :meth:`HandleCache.open` compares the cached handle with the stored head (one key
read) and resumes when another writer (the control route, another process, another
machine) has moved it, so a tool call starts from the current version. Blocking: call
it from a worker thread.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from ..errors import PersistenceNotFound
from ..store import DurableProcess, ProcessStore

__all__ = ["HandleCache"]


class HandleCache:
    def __init__(self, store: ProcessStore, capacity: int) -> None:
        self.store = store
        self.capacity = capacity
        self._lock = threading.Lock()
        self._handles: OrderedDict[str, DurableProcess] = OrderedDict()

    def open(self, address: str) -> DurableProcess:
        """A handle at the stored head of ``address`` (``PersistenceNotFound`` when absent)."""
        head = self.store.stored_head(address)
        if head is None:
            with self._lock:
                self._handles.pop(address, None)
            raise PersistenceNotFound(address)
        with self._lock:
            cached = self._handles.get(address)
            if cached is not None and cached.version == head["process_version"] and cached.head.hash == head["hash"]:
                self._handles.move_to_end(address)
                return cached
        fresh = self.store.resume(address)
        with self._lock:
            self._handles[address] = fresh
            self._handles.move_to_end(address)
            while len(self._handles) > self.capacity:
                self._handles.popitem(last=False)
        return fresh
