"""The drills: host OS processes killed at random while 30 addresses relay over 1,000
messages; afterwards every message arrived exactly once and in per-sender order, and
every address's history validates on resume.

(a) PostgreSQL: three hosts share the store; one is also paused mid-slot until another
    host has taken the address over, and resumed, so a stale owner's commit is refused
    (the drill requires at least one, and waits to see it).
(b) RocksDB: one host, the whole process killed and restarted.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from svit.errors import PersistenceConflict
from svit.store import ProcessStore
from tests.host.scripts import relay_process

ROOT = Path(__file__).resolve().parents[2]
PEERS = 30
SEEDS = 4  # per address
HOPS = 8  # each seed message is forwarded this many times
EXPECTED = PEERS * SEEDS * (HOPS + 1)  # 1,080 messages through the mailbox
LEASE_TTL = 2.0
#: The least time the drill pauses a host: past its lease TTL, so the others take its
#: addresses over (it stays paused until one of them committed on the held address).
PAUSE = LEASE_TTL * 2.5
#: Bounds of each step of a pause: the paused host's takeover, then its refusal seen.
TAKEOVER_SECONDS = 30
REFUSAL_SECONDS = 20
#: The drill disrupts for at most this long, then waits for the hosts to finish (bounds
#: in seconds from the start; a loaded machine makes PostgreSQL commits slow).
DISRUPT_SECONDS = 35
DRAIN_SECONDS = 120
#: The kills' own time after a pause that ran long (on a loaded machine).
KILL_SECONDS = 15


@dataclass
class Worker:
    """One host OS process and the counters file of each of its incarnations."""

    store: str
    prefix: str
    directory: Path
    name: str
    #: Seconds each handled item waits before its commit (``drill_host --dwell``).
    dwell: float = 0.0
    #: The file that asks this host to stop itself mid-slot (``drill_host --hold``).
    hold: Path | None = None
    process: subprocess.Popen[bytes] | None = None
    files: list[Path] = field(default_factory=list)

    def start(self) -> None:
        stats = self.directory / f"{self.name}-{len(self.files)}.json"
        self.files.append(stats)
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.host.drill_host", self.store, self.prefix, str(stats), "--ttl", str(LEASE_TTL),
             "--dwell", str(self.dwell), *(["--hold", str(self.hold)] if self.hold is not None else [])],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.wait(10)

    def terminate(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        os.kill(self.process.pid, signal.SIGCONT)
        self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)

    def stats(self) -> list[dict[str, object]]:
        found = []
        for path in self.files:
            try:
                found.append(json.loads(path.read_text()))
            except (OSError, ValueError):
                continue
        return found

    def current(self) -> dict[str, object] | None:
        if not self.files:
            return None
        try:
            record: dict[str, object] = json.loads(self.files[-1].read_text())
        except (OSError, ValueError):
            return None
        return record


def seed(store: ProcessStore, prefix: str) -> None:
    for index in range(PEERS):
        store.create(relay_process(prefix, index, PEERS))
    for index in range(PEERS):
        store.resume(f"{prefix}{index}").exec("/lib/seed", {"count": SEEDS, "hops": HOPS})


def reseed(store: ProcessStore, address: str, count: int, hops: int) -> int:
    """More seed messages from ``address`` while hosts run (retried when a host's commit
    moved the head first); returns how many messages they make in all."""
    for _attempt in range(50):
        try:
            store.resume(address).exec("/lib/seed", {"count": count, "hops": hops})
            return count * (hops + 1)
        except PersistenceConflict:
            time.sleep(0.02)
    raise AssertionError(f"could not seed {address}")


def verify(store: ProcessStore, prefix: str, expected: int) -> None:
    """Exactly once and in order: the received total equals the sent total, and at every
    address the sequence from each sender only ever increased (``bad`` counts otherwise);
    each history validates on resume (store.resume replays and checks it)."""
    received = sent = 0
    for index in range(PEERS):
        state = store.resume(f"{prefix}{index}")
        assert state.read("/memory/bad") == 0, f"{prefix}{index} saw a duplicate or a reordering"
        assert state.read("/inbox") == [], f"{prefix}{index} still has inbox items"
        assert state.read("/system/outbox") == [], f"{prefix}{index} has unsettled intents"
        received += state.read("/memory/received")
        sent += state.read("/memory/sent")
    assert sent == expected
    assert received == expected
    assert [t for t in store.mailbox.targets() if t.startswith(prefix)] == []


def stopped(pid: int) -> bool:
    """True once process ``pid`` is stopped (SIGSTOP): its state in ``/proc`` is ``T``
    (without ``/proc``, the host's word: it stops itself right after naming the address)."""
    if not Path("/proc").is_dir():
        time.sleep(0.2)
        return True
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state in ("T", "t")


def wait_until(condition: Callable[[], bool], deadline: float) -> bool:
    while not condition():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def heads(store: ProcessStore, prefix: str) -> list[dict[str, object] | None]:
    return [store.stored_head(f"{prefix}{index}") for index in range(PEERS)]


def quiet(store: ProcessStore, prefix: str) -> bool:
    """No mail waiting, nothing to settle, no inbox item, for the drill's addresses.

    The three listings are separate reads, and work moves between them: a handler's
    commit takes the last inbox item (leaving the ready index) and sends its forward
    (a new mailbox entry) at once, so mail can be missed by ``targets`` read before that
    commit and the item by ``ready`` read after it. Every move of work is a commit of a
    drill address (the mailbox writes outside commits only remove settled or refused
    work), so the listings count only when no drill address's head moved while they
    were read: they are then one consistent view."""
    mailbox = store.mailbox
    before = heads(store, prefix)
    busy = any(a.startswith(prefix) for a in mailbox.targets() + mailbox.unsettled() + mailbox.ready())
    return not busy and heads(store, prefix) == before


def test_quiet_sees_work_that_moves_while_it_lists(store: ProcessStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """The drain's wait condition, against the interleaving that fooled it: the last
    inbox item is handled (acknowledged and forwarded in one commit) after ``targets``
    was listed and before ``ready`` is; the forward still waits, so not quiet."""
    prefix = "svit://local/quiet/a"
    for index in range(PEERS):
        store.create(relay_process(prefix, index, PEERS))
    first = store.resume(f"{prefix}0")
    first.enqueue_inbox({"kind": "message", "message_id": "svit://host:1:0", "from": "svit://host",
                         "body": {"sender": 99, "seq": 1, "hops": 2}})
    assert not quiet(store, prefix)
    listing = store.mailbox.unsettled

    def handled_meanwhile(limit: int = 1000) -> list[str]:
        monkeypatch.setattr(store.mailbox, "unsettled", listing)
        first.exec_inbox_item("/lib/on_message", first.inbox_front())
        return listing(limit)

    monkeypatch.setattr(store.mailbox, "unsettled", handled_meanwhile)
    assert not quiet(store, prefix)
    assert first.read("/inbox") == [] and [t for t in store.mailbox.targets() if t.startswith(prefix)] != []
    assert not quiet(store, prefix)


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[list[Worker]]:
    made: list[Worker] = []
    yield made
    for worker in made:
        worker.terminate()


def test_drill_postgresql_three_hosts_killed_and_paused(postgresql_url: str, tmp_path: Path,
                                                        workers: list[Worker]) -> None:
    prefix = f"svit://local/drill-{uuid.uuid4().hex[:8]}/a"
    store = ProcessStore.open(postgresql_url)
    try:
        seed(store, prefix)
        hold = tmp_path / "hold"
        for n in range(3):
            # The first host's handlers are slow, and it stops itself mid-slot when asked
            # (``hold``), so the pause below lands while it has a commit in flight, whose
            # fence then no longer holds.
            workers.append(Worker(postgresql_url, prefix, tmp_path, f"w{n}", dwell=0.05 if n == 0 else 0.0,
                                  hold=hold if n == 0 else None))
        rng = random.Random(14)
        began = time.monotonic()
        kills = pauses = extra = restarts = 0

        def stale() -> int:
            return sum(int(s.get("stale_refusals", 0)) for w in workers for s in w.stats())  # type: ignore[call-overload]

        def turns(worker: Worker) -> int:
            current = worker.current()
            return int(current.get("turns", 0)) if current else 0  # type: ignore[call-overload]

        def restart_exited() -> int:
            started = 0
            for worker in workers:
                if worker.process is not None and worker.process.poll() is not None:
                    worker.start()  # a host whose store went terminal exits; another takes its place
                    started += 1
            return started

        # The first host starts alone and takes every address; once the other two run,
        # it is asked to stop itself (SIGSTOP) in the middle of handling an item, after
        # renewing that address's lease and before the commit carrying it. It stays
        # paused past the lease TTL and until another host has committed on that address
        # (so took its lease over); resumed, its commit carries a fence that moved and
        # must be refused, and the drill waits to see that refusal before going on.
        first = workers[0]
        first.start()
        wait_until(lambda: turns(first) >= 20, began + 20)
        for worker in workers[1:]:
            worker.start()
        held = Path(f"{hold}.held")
        while stale() == 0 and pauses < 3 and time.monotonic() < began + DISRUPT_SECONDS:
            assert first.process is not None
            hold.write_text("")
            asked = time.monotonic()
            while not (held.exists() and stopped(first.process.pid)) and time.monotonic() < asked + TAKEOVER_SECONDS:
                if first.process.poll() is not None:
                    restarts += restart_exited()
                elif quiet(store, prefix):  # no item to stop in: more traffic
                    for index in rng.sample(range(PEERS), 4):
                        extra += reseed(store, f"{prefix}{index}", count=3, hops=6)
                time.sleep(0.05)
            hold.unlink(missing_ok=True)  # withdrawn unless a handler took it (it removes it first)
            if not wait_until(lambda: held.exists() and stopped(first.process.pid), time.monotonic() + 1):
                continue
            address = held.read_text()
            held.unlink()
            paused_at = time.monotonic()
            before = store.stored_head(address)
            taken = wait_until(lambda: store.stored_head(address) != before, paused_at + TAKEOVER_SECONDS)
            time.sleep(max(0.0, paused_at + PAUSE - time.monotonic()))
            os.kill(first.process.pid, signal.SIGCONT)
            pauses += 1
            if taken:
                wait_until(lambda: stale() > 0, time.monotonic() + REFUSAL_SECONDS)
        # Kills: the other hosts are SIGKILLed and restarted at random (with time for them
        # however long the pause took on a loaded machine).
        kills_until = max(began + DISRUPT_SECONDS, time.monotonic() + KILL_SECONDS)
        next_kill = time.monotonic() + rng.uniform(1.0, 2.0)
        while kills < 3 and time.monotonic() < kills_until:
            restarts += restart_exited()
            if quiet(store, prefix):
                # The traffic ran out before the kills (a fast or a loaded machine): more of
                # it, so every kill lands with messages in flight.
                for index in rng.sample(range(PEERS), 4):
                    extra += reseed(store, f"{prefix}{index}", count=3, hops=6)
            if time.monotonic() >= next_kill:
                victim = rng.choice(workers)
                victim.kill()
                victim.start()
                kills += 1
                next_kill = time.monotonic() + rng.uniform(1.0, 2.5)
            time.sleep(0.05)
        # Drain: the hosts finish the traffic.
        drain_until = max(began + DRAIN_SECONDS, time.monotonic() + DRAIN_SECONDS / 2)
        while time.monotonic() < drain_until and not quiet(store, prefix):
            restarts += restart_exited()
            time.sleep(0.1)
        for worker in workers:
            worker.terminate()
        print(f"drill(postgresql): kills={kills} pauses={pauses} restarts={restarts} stale_refusals={stale()} "
              f"in {time.monotonic() - began:.1f} s")
        for worker in workers:
            print("  ", worker.name, [(r.get("turns"), r.get("stale_refusals"), r.get("conflicts"), r.get("final"))
                                      for r in worker.stats()])
        assert kills >= 2 and pauses >= 1
        assert stale() >= 1, "no stale owner's commit was refused"
        verify(store, prefix, EXPECTED + extra)
    finally:
        store.close()


def test_drill_rocksdb_one_host_killed_and_restarted(tmp_path: Path, workers: list[Worker]) -> None:
    directory = str(tmp_path / "store")
    prefix = "svit://local/drill/a"
    store = ProcessStore.open(directory)
    seed(store, prefix)
    store.close()
    worker = Worker(directory, prefix, tmp_path, "solo")
    workers.append(worker)
    worker.start()
    rng = random.Random(15)
    kills = 0
    deadline = time.monotonic() + 50
    while kills < 4 and time.monotonic() < deadline:
        time.sleep(rng.uniform(0.3, 1.0))
        current = worker.current()
        if current is not None and current.get("idle"):
            break
        worker.kill()
        worker.start()
        kills += 1
    while time.monotonic() < deadline:
        current = worker.current()
        if current is not None and current.get("idle"):
            break
        time.sleep(0.1)
    worker.terminate()
    print(f"drill(rocksdb): kills={kills}")
    assert kills >= 2, "the host went idle before it could be killed twice"
    store = ProcessStore.open(directory)
    try:
        verify(store, prefix, EXPECTED)
    finally:
        store.close()
