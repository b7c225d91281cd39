"""Time travel cost against the length of a history (medians in one run, printed as ratios).

Two processes with the same state (a counter and a 1,000-entry map), one with 10,000
commits behind it and one with 10. Each commit rewrites one entry of the map, so the
trees stay the same size and only the history's length differs. Timed alternately
(``paired_medians``), over versions drawn at random from each history:

1. ``h.at(v).root_hash``: finding a retained version (records only);
2. ``h.at(v).read(path)`` with the chunk cache emptied first: the whole tree rebuilt
   from stored chunks;
3. ``h.at(v).read(path)`` with the cache as it is: only the chunks a version does not
   share with ones already read are rebuilt. A lone 10-commit history would always hit
   the cache (it has 11 versions), so this row draws the short side from 300 10-commit
   histories (3,300 versions): both sides then miss the cache almost always, and only
   the histories' lengths differ.

Target for every row: long / short <= 2.

Run: python benchmarks/history.py [--commits N] [--repeat N]
"""

from __future__ import annotations

import argparse
import random
import shutil
import tempfile
import time

from common import paired_medians

from svit import Process
from svit.store import ProcessStore

TARGET = 2.0
ENTRIES = 1000


def history(store: ProcessStore, address: str, commits: int):
    data = {f"k{i:04}": i for i in range(ENTRIES)}
    h = store.create(Process.builder(address).memory("count", 0).memory("data", data).build())
    for i in range(commits):
        h.write(f"/memory/data/k{i % ENTRIES:04}", -i)
    return h


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--commits", type=int, default=10_000, help="commits of the long history (default 10,000)")
    parser.add_argument("--repeat", type=int, default=300, help="timed pairs per row (default 300)")
    args = parser.parse_args()
    where = tempfile.mkdtemp(prefix="svit-history-bench-")
    store = ProcessStore.open(where)
    try:
        began = time.perf_counter()
        long = history(store, "svit://local/bench/long", args.commits)
        shorts = [history(store, f"svit://local/bench/short{i}", 10) for i in range(max(1, min(300, args.commits // 10)))]
        short = shorts[0]
        print(f"built {args.commits:,} commits of one process and 10 each of {len(shorts):,} "
              f"in {time.perf_counter() - began:.1f} s")
        pick = random.Random(7)
        path = "/memory/data/k0500"

        def at_long() -> None:
            assert long.at(pick.randrange(long.version + 1)).root_hash

        def at_short() -> None:
            assert short.at(pick.randrange(short.version + 1)).root_hash

        def cold(handle):
            def run() -> None:
                store.versions._chunks.clear()
                handle.at(pick.randrange(handle.version + 1)).read(path)
            return run

        def warm_long() -> None:
            long.at(pick.randrange(long.version + 1)).read(path)

        def warm_short() -> None:
            handle = shorts[pick.randrange(len(shorts))]
            handle.at(pick.randrange(handle.version + 1)).read(path)

        holds = True
        rows = (("at(v).root_hash", at_long, at_short),
                ("at(v).read, cold chunk cache", cold(long), cold(short)),
                ("at(v).read, warm chunk cache", warm_long, warm_short))
        for name, first, second in rows:
            long_s, short_s = paired_medians(first, second, args.repeat, budget_seconds=30)
            ratio = long_s / short_s
            ok = ratio <= TARGET
            holds = holds and ok
            print(f"{name:30} {args.commits:,} commits {long_s * 1e6:9.1f} us   10 commits {short_s * 1e6:9.1f} us"
                  f"   ratio {ratio:5.2f}  (target <= {TARGET:g}: {'holds' if ok else 'MISSED'})")
        print(f"time travel independent of history length: {'holds' if holds else 'MISSED'}")
    finally:
        store.close()
        shutil.rmtree(where, ignore_errors=True)


if __name__ == "__main__":
    main()
