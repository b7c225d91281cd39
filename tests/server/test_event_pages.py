"""The commit pages an event stream reads: from any version, across forks and cuts, on both engines."""

from __future__ import annotations

import json
from typing import Any

import anyio
import anyio.to_thread

from svit import Process
from svit.server.events import CommitFeed, commit_stream, commits_after
from svit.store import ProcessStore
from svit.store.events import StoreEventLog

ADDRESS = "svit://local/pages/p"
ADD = '(define (main input) (write "/memory/n" (+ 1 (read "/memory/n"))))'


def counter(store: ProcessStore, address: str = ADDRESS, commits: int = 0) -> None:
    handle = store.create(Process.builder(address).memory("n", 0).library("add", ADD).build())
    for _ in range(commits):
        handle.exec("/lib/add")


def versions(store: ProcessStore, address: str, after: int, position: int | None = None, limit: int = 4096) -> list[int]:
    return [t.process_version_after for t in commits_after(store, address, after, position, limit)]


def test_pages_from_any_version(store: ProcessStore) -> None:
    counter(store, commits=10)
    assert versions(store, ADDRESS, 0) == list(range(1, 11))
    first = commits_after(store, ADDRESS, 3, None, 4)
    assert [t.process_version_after for t in first] == [4, 5, 6, 7]
    assert versions(store, ADDRESS, 7, first[-1].position) == [8, 9, 10]
    assert versions(store, ADDRESS, 10) == []
    assert versions(store, ADDRESS, 99) == []


def test_a_fork_streams_its_own_commits_above_the_fork_version(store: ProcessStore) -> None:
    counter(store, commits=5)
    child = store.fork(ADDRESS, "svit://local/pages/child")
    for _ in range(3):
        child.exec("/lib/add")
    assert versions(store, child.address, 0) == [6, 7, 8]
    assert versions(store, child.address, 6) == [7, 8]
    assert versions(store, ADDRESS, 4) == [5]


def test_after_a_cut_only_retained_commits_stream(store: ProcessStore) -> None:
    counter(store, commits=6)
    handle = store.resume(ADDRESS)
    handle.cut()
    handle.exec("/lib/add")
    handle.exec("/lib/add")
    assert versions(store, ADDRESS, 0) == [7, 8]
    assert versions(store, ADDRESS, 7) == [8]


def test_the_stream_pages_through_everything_in_order(store: ProcessStore) -> None:
    counter(store, commits=7)

    async def collect() -> list[int]:
        stream = commit_stream(store, ADDRESS, 1, CommitFeed(), page=2, poll_seconds=0.05)
        seen = []
        async for event in stream:
            seen.append(json.loads(event.data)["version"])
            assert event.id == str(seen[-1]) and event.event == "commit"
            if len(seen) == 6:
                break
        await stream.aclose()
        return seen

    assert anyio.run(collect) == [2, 3, 4, 5, 6, 7]


def test_a_notified_stream_wakes_before_its_poll(store: ProcessStore) -> None:
    counter(store, commits=1)
    feed = CommitFeed()

    async def scenario() -> list[int]:
        stream = commit_stream(store, ADDRESS, 1, feed, page=16, poll_seconds=60)
        seen: list[int] = []

        async def read() -> None:
            async for event in stream:
                seen.append(json.loads(event.data)["version"])
                return

        async with anyio.create_task_group() as group:
            group.start_soon(read)
            await anyio.sleep(0.2)  # the stream is waiting now (a 60 s poll)
            await anyio.to_thread.run_sync(lambda: store.resume(ADDRESS).exec("/lib/add"))
            with anyio.fail_after(5):
                feed.notify(ADDRESS)
                while not seen:
                    await anyio.sleep(0.01)
        return seen

    assert anyio.run(scenario) == [2]


def test_a_removed_address_ends_the_stream(store: ProcessStore) -> None:
    counter(store, commits=2)

    async def scenario() -> list[int]:
        seen = []
        stream = commit_stream(store, ADDRESS, 0, CommitFeed(), page=16, poll_seconds=0.05)
        async for event in stream:
            seen.append(json.loads(event.data)["version"])
            if len(seen) == 2:
                await anyio.to_thread.run_sync(store.remove, ADDRESS)
        return seen

    assert anyio.run(scenario) == [1, 2]


def test_thread_events_of_the_current_session_follow_its_changes(store: ProcessStore) -> None:
    counter(store, commits=1)
    handle = store.resume(ADDRESS)
    log = StoreEventLog(store)
    handle.initialize_thread_state({"session_id": "s1"})
    log.append(ADDRESS, "s1", "input.message", {"text": "before the stream"})

    def session_of(address: str) -> str | None:
        value = store.resume(address).read("/thread/session_id")
        return value if isinstance(value, str) else None

    async def scenario() -> list[tuple[str, Any]]:
        stream = commit_stream(store, ADDRESS, 2, CommitFeed(), page=16, poll_seconds=0.05, session_of=session_of)
        seen: list[tuple[str, Any]] = []

        async def write() -> None:
            await anyio.sleep(0.2)
            for text in ("one", "two", "three", "four", "five"):
                await anyio.to_thread.run_sync(log.append, ADDRESS, "s1", "input.message", {"text": text})
            await anyio.to_thread.run_sync(lambda: store.resume(ADDRESS).replace_thread_state({"session_id": "s2"}))
            await anyio.to_thread.run_sync(log.append, ADDRESS, "s2", "input.message", {"text": "new session"})

        async with anyio.create_task_group() as group:
            group.start_soon(write)
            with anyio.fail_after(10):
                async for event in stream:
                    data = json.loads(event.data)
                    seen.append((event.event, data))
                    assert event.id is None if event.event == "thread" else event.id == str(data["version"])
                    if len(seen) == 7:
                        break
            await stream.aclose()
        return seen

    seen = anyio.run(scenario)
    threads = [(data["session_id"], data["sequence"], data["data"]["text"]) for kind, data in seen if kind == "thread"]
    assert threads == [("s1", 2, "one"), ("s1", 3, "two"), ("s1", 4, "three"), ("s1", 5, "four"), ("s1", 6, "five"),
                       ("s2", 1, "new session")]
    assert [data["version"] for kind, data in seen if kind == "commit"] == [3]


def test_thread_from_resumes_thread_events(store: ProcessStore) -> None:
    counter(store)
    store.resume(ADDRESS).initialize_thread_state({"session_id": "s1"})
    log = StoreEventLog(store)
    for text in ("a", "b", "c"):
        log.append(ADDRESS, "s1", "input.message", {"text": text})

    async def scenario() -> list[int]:
        stream = commit_stream(store, ADDRESS, 1, CommitFeed(), page=16, poll_seconds=0.05,
                               session_of=lambda address: "s1", thread_from=1)
        seen = []
        async for event in stream:
            seen.append(json.loads(event.data)["sequence"])
            if len(seen) == 2:
                break
        await stream.aclose()
        return seen

    assert anyio.run(scenario) == [2, 3]
