"""Host port providers (HTTP, nested model calls, child processes, restricted Python).

Each port is registered on a :class:`svit.Ports` registry by the host; scripts reach it
with ``port-call``.
"""

from svit import PortContext, PortDescriptor, PortError, Ports, failure_text

__all__ = ["PortContext", "PortDescriptor", "PortError", "Ports", "failure_text"]
