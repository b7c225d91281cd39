"""The PostgreSQL engine against the floor its commits stand on, on one throwaway server.

Durable counter activations per second on a DurableProcess over PostgreSQL (each one
commit: its transaction, nodes, index entries and the head compare-and-swap, synced by
``synchronous_commit=on``) vs raw single-statement conditional UPDATE commits on the
same server (autocommit, ``UPDATE heads SET v=%s WHERE k=%s AND v=%s``: one round trip
and one WAL flush, the least a compare-and-swap commit can cost). Rounds alternate so
both sides see the same machine; medians of the rounds, printed side by side as a
ratio. Target >= 0.5x.

A second line says where each side's time goes, per durable activation and per raw
commit, measured over the same rounds: the client's CPU (this thread), the server's CPU
(its backends' run time from ``/proc/<pid>/schedstat``, "n/a" where the server runs
elsewhere or that file cannot be read) and the write-ahead-log bytes the server wrote
(``pg_current_wal_lsn``): what a faster commit would have to shrink.

Run: python benchmarks/postgres.py [--rounds N] [--count N] [--url URL] [--quick]
Without --url (or SVIT_TEST_POSTGRESQL_URL) it starts its own cluster (initdb into a
temporary directory, 127.0.0.1 on a free port) and stops it at the end.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psycopg
from common import build

from svit.store import ProcessStore
from tests.store import pg_cluster

TARGET = 0.5


def rate(fn: Any, count: int) -> float:
    start = time.perf_counter()
    for _ in range(count):
        fn()
    return count / (time.perf_counter() - start)


def server_cpu_us(pids: list[int]) -> float | None:
    """Microseconds the server processes ``pids`` have run so far (None: not readable here)."""
    total = 0.0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/schedstat") as stats:
                total += int(stats.read().split()[0]) / 1000
        except (OSError, ValueError, IndexError):
            return None
    return total


class Costs:
    """Client CPU, server CPU and WAL bytes of one side, summed over its rounds."""

    def __init__(self, admin: psycopg.Connection[Any], pids: Any) -> None:
        self.admin = admin
        self.pids = pids
        self.operations = 0
        self.client = 0.0
        self.server: float | None = 0.0
        self.wal = 0

    def _lsn(self) -> int:
        row = self.admin.execute("SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint").fetchone()
        return int(row[0]) if row else 0

    def measure(self, fn: Any, count: int) -> float:
        pids = self.pids()
        wal, server, client = self._lsn(), server_cpu_us(pids), time.thread_time()
        result = rate(fn, count)
        client_after, server_after, wal_after = time.thread_time(), server_cpu_us(pids), self._lsn()
        self.operations += count
        self.client += (client_after - client) * 1e6
        self.wal += wal_after - wal
        if self.server is not None and server is not None and server_after is not None:
            self.server += server_after - server
        else:
            self.server = None
        return result

    def describe(self) -> str:
        n = max(1, self.operations)
        server = "n/a" if self.server is None else f"{self.server / n:.0f} us"
        return f"client CPU {self.client / n:.0f} us, server CPU {server}, WAL {self.wal / n:.0f} bytes"


def raw_conditional_update(url: str) -> Any:
    """One autocommit ``UPDATE ... WHERE k = %s AND v = %s`` per call (it must match one row)."""
    conn = psycopg.connect(url, autocommit=True)
    conn.execute("CREATE TABLE heads (k text PRIMARY KEY, v bigint NOT NULL)")
    conn.execute("INSERT INTO heads VALUES ('counter', 0)")
    state = {"v": 0}

    def one() -> None:
        cursor = conn.execute("UPDATE heads SET v = %s WHERE k = %s AND v = %s", (state["v"] + 1, "counter", state["v"]))
        if cursor.rowcount != 1:
            raise AssertionError("the conditional update matched no row")
        state["v"] += 1

    return conn, one


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--count", type=int, default=100)
    parser.add_argument("--url", default=os.environ.get("SVIT_TEST_POSTGRESQL_URL"))
    parser.add_argument("--quick", action="store_true", help="a few small rounds (checks the run, not the numbers)")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.count = 3, 10
    cluster = None
    url = args.url
    if not url:
        cluster = pg_cluster.Cluster.start()
        url = cluster.url
    schema, schema_url = pg_cluster.create_schema(url)
    try:
        store = ProcessStore.open(schema_url)
        handle = store.create(build("svit://local/bench/pg-counter"))
        raw_conn, raw_one = raw_conditional_update(schema_url)
        admin = psycopg.connect(url, autocommit=True)
        raw_pid = raw_conn.info.backend_pid

        def store_pids() -> list[int]:  # the store's pooled connections: every other one of its schema
            rows = admin.execute("SELECT pid FROM pg_stat_activity WHERE application_name = %s AND pid <> %s",
                                 [schema, raw_pid]).fetchall()
            return [int(row[0]) for row in rows]

        durable_costs, raw_costs = Costs(admin, store_pids), Costs(admin, lambda: [raw_pid])
        durable_rates, raw_rates = [], []
        for _ in range(args.rounds):
            durable_rates.append(durable_costs.measure(lambda: handle.exec("/lib/counter"), args.count))
            raw_rates.append(raw_costs.measure(raw_one, args.count))
        raw_conn.close()
        admin.close()
        if handle.read("/memory/count") != args.rounds * args.count:
            raise AssertionError("the durable counter lost an activation")
        store.close()
        durable, raw = statistics.median(durable_rates), statistics.median(raw_rates)
        ratio = durable / raw
        verdict = "holds" if ratio >= TARGET else "MISSES"
        print(f"durable activations on PostgreSQL: {durable:.0f}/s vs raw conditional UPDATE commits {raw:.0f}/s "
              f"-> ratio {ratio:.2f} (target >= {TARGET}): {verdict}")
        print(f"where the time goes: per durable activation {durable_costs.describe()}; "
              f"per raw commit {raw_costs.describe()}")
    finally:
        pg_cluster.drop_schema(url, schema)
        if cluster is not None:
            cluster.stop()


if __name__ == "__main__":
    main()
