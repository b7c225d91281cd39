"""What a Svit's ports see: the read-only port context plus ``fork`` for ports that
start child processes (the spawn port)."""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any, Protocol

from .._ports import PortContext, PortDescriptor
from ..errors import PortContextUnavailable

if TYPE_CHECKING:
    from ..process import Process

__all__ = ["ForkingHost", "HostPort", "SvitPortContext"]


class ForkingHost(Protocol):
    """The side of a Svit a port context reaches: a process-only fork of its committed state."""

    def fork_process(self, child_address: str) -> Process: ...


class SvitPortContext(PortContext):
    """The read-only port context, plus :meth:`fork` for ports that start child processes."""

    def __init__(self, base: PortContext, host: ForkingHost) -> None:
        super().__init__(base.read, base.stat, base.discover, base.address)
        self._host = weakref.ref(host)

    def fork(self, child_address: str) -> Process:
        """A process-only fork of the committed parent (never the activation's working copy)."""
        host = self._host()
        if host is None:
            raise PortContextUnavailable("the Svit host is gone")
        return host.fork_process(child_address)


class HostPort:
    """Wraps a registered port so it receives a :class:`SvitPortContext`."""

    def __init__(self, inner: Any, host: ForkingHost) -> None:
        self.inner = inner
        self._host = weakref.ref(host)

    def descriptor(self) -> PortDescriptor:
        found: PortDescriptor = self.inner.descriptor()
        return found

    def execute(self, context: PortContext, input: Any) -> Any:
        host = self._host()
        return self.inner.execute(SvitPortContext(context, host) if host is not None else context, input)
