"""The host: runs many processes of one store (message delivery, handlers, agents, leases).

    from svit.host import Host
    host = Host(store, workers=4).handle("svit://local/app/", script="/lib/on_message")
    host.start(); host.idle(timeout=10); host.stop()

See :mod:`svit.host.host` for how work is scheduled and :mod:`svit.host.leases` for
ownership of addresses on a shared (PostgreSQL) store.
"""

from .host import AddressFailure, Host, HostStats, HostTimeout, ReasonerFactory
from .leases import Lease, LeaseKeeper

__all__ = ["AddressFailure", "Host", "HostStats", "HostTimeout", "Lease", "LeaseKeeper", "ReasonerFactory"]
