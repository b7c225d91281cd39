"""The commit pages an event stream reads: from any version, across forks and cuts, on both engines."""

from __future__ import annotations

import json

import anyio
import anyio.to_thread

from svit import Process
from svit.server.events import CommitFeed, commit_stream, commits_after
from svit.store import ProcessStore

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
