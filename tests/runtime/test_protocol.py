"""Process, DurableProcess and Svit implement svit.ProcessLike: the same members with the
same signatures, and snapshot() returns bytes and writes nothing on each."""

from __future__ import annotations

import inspect
import warnings

import pytest

from svit import Process, ProcessLike, Svit
from svit.protocol import HostedProcess
from svit.reasoners import ScriptedReasoner
from svit.store import DurableProcess, ProcessStore, StoreSnapshot

ADDR = "svit://local/test/protocol"
COUNTER = '(define (main input) (let ((n (+ (read "/memory/count") 1))) (do (write "/memory/count" n) n)))'

PROTOCOL_MEMBERS = sorted(
    name for name, member in vars(ProcessLike).items()
    if not name.startswith("_") and (callable(member) or isinstance(member, property))
)


def protocol_members(protocol: type) -> list[str]:
    return sorted(
        name for name, member in vars(protocol).items()
        if not name.startswith("_") and (callable(member) or isinstance(member, property))
    )


def test_the_protocol_names_the_shared_operations() -> None:
    # The members DESIGN §3 names, plus what all three share (read_versioned, detach_mount,
    # message_intents).
    assert set(PROTOCOL_MEMBERS) >= {
        "address", "version", "root_hash", "limits", "node_hash", "read", "discover", "stat", "write", "remove",
        "exec", "exec_inline", "attach_mount", "snapshot", "fork", "close",
    }


@pytest.mark.parametrize("cls", [Process, DurableProcess, Svit])
def test_every_member_has_the_protocol_signature(cls: type) -> None:
    for name in PROTOCOL_MEMBERS:
        wanted = inspect.getattr_static(ProcessLike, name)
        found = inspect.getattr_static(cls, name, None)
        assert found is not None, f"{cls.__name__} lacks {name}"
        if isinstance(wanted, property):
            assert isinstance(found, property), f"{cls.__name__}.{name} is not a property"
            assert inspect.signature(found.fget).return_annotation == inspect.signature(wanted.fget).return_annotation, name
            continue
        assert inspect.signature(found) == inspect.signature(wanted), f"{cls.__name__}.{name}"


@pytest.mark.parametrize("cls", [Process, DurableProcess])
def test_hosted_processes_have_the_loop_members(cls: type) -> None:
    for name in protocol_members(HostedProcess):
        wanted = inspect.getattr_static(HostedProcess, name)
        found = inspect.getattr_static(cls, name, None)
        assert found is not None, f"{cls.__name__} lacks {name}"
        assert inspect.signature(found) == inspect.signature(wanted), f"{cls.__name__}.{name}"


def test_durable_handles_fall_through_to_nothing() -> None:
    assert "__getattr__" not in vars(DurableProcess)


def counter(address: str = ADDR) -> Process:
    return Process.builder(address).memory("count", 0).library("counter", COUNTER).build()


def store_records(store: ProcessStore) -> dict[str, str]:
    return store.record_digests()


def test_process_snapshot_is_bytes_and_changes_nothing() -> None:
    p = counter()
    p.exec("/lib/counter")
    before = (p.version, p.root_hash)
    blob = p.snapshot()
    assert type(blob) is bytes and (p.version, p.root_hash) == before
    assert Process.restore(blob).root_hash == p.root_hash
    assert isinstance(p, ProcessLike) and isinstance(p, HostedProcess)


def test_durable_snapshot_is_bytes_and_writes_nothing(tmp_path) -> None:
    store = ProcessStore.open(tmp_path / "store")
    h = store.create(counter())
    h.exec("/lib/counter")
    before = (h.version, h.root_hash, h.head, store_records(store), len(h.query()))
    blob = h.snapshot()
    assert type(blob) is bytes
    assert (h.version, h.root_hash, h.head, store_records(store), len(h.query())) == before
    assert Process.restore(blob).root_hash == h.root_hash
    # The stored snapshot is its own operation, and it does write a record.
    stored = h.store_snapshot()
    assert isinstance(stored, StoreSnapshot) and bytes(stored) == blob
    assert store_records(store) != before[3]
    assert isinstance(h, ProcessLike) and isinstance(h, HostedProcess)
    store.close()


def svit_over(process: HostedProcess) -> Svit:
    return Svit.resume(process).reasoner(ScriptedReasoner([])).build()


def test_svit_snapshot_is_bytes_and_writes_nothing(tmp_path) -> None:
    agent = svit_over(counter())
    before = (agent.version, agent.root_hash)
    blob = agent.snapshot()
    assert type(blob) is bytes and (agent.version, agent.root_hash) == before
    assert isinstance(agent, ProcessLike)

    store = ProcessStore.open(tmp_path / "store")
    durable = svit_over(store.create(counter("svit://local/test/durable")))
    before_durable = (durable.version, durable.root_hash, store_records(store))
    blob = durable.snapshot()
    assert type(blob) is bytes
    assert (durable.version, durable.root_hash, store_records(store)) == before_durable
    store.close()


def test_fork_returns_the_same_kind(tmp_path) -> None:
    p = counter()
    assert type(p.fork("svit://local/test/child")) is Process
    store = ProcessStore.open(tmp_path / "store")
    h = store.create(counter())
    child = h.fork("svit://local/test/child")
    assert type(child) is DurableProcess and child.version == h.version
    assert "svit://local/test/child" in store.addresses()
    agent = svit_over(counter("svit://local/test/agent"))
    forked = agent.fork("svit://local/test/agent-child")
    assert type(forked) is Svit and forked.address == "svit://local/test/agent-child"
    assert forked.read("/memory/count") == 0 and agent.read("/thread")["process_id"] == agent.address
    store.close()


def test_svit_persisted_is_a_deprecated_resume() -> None:
    p = counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        agent = Svit.persisted(p).reasoner(ScriptedReasoner([])).build()
    assert any(issubclass(w.category, DeprecationWarning) for w in caught)
    assert agent.address == ADDR


def test_the_loop_asks_the_process_for_its_event_log(tmp_path) -> None:
    from svit.loop import MemoryEventLog
    from svit.store.events import StoreEventLog

    assert counter().thread_log() is None
    assert isinstance(svit_over(counter()).event_log, MemoryEventLog)
    store = ProcessStore.open(tmp_path / "store")
    h = store.create(counter())
    assert isinstance(h.thread_log(), StoreEventLog)
    assert isinstance(svit_over(h).event_log, StoreEventLog)
    store.close()
