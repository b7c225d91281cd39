"""Open each store directory given and print one JSON line per open (for bounded-open tests).

Usage: ``open_store.py [--no-manifest-check] [--deadline SECONDS] PATH...``. A test runs
this in a subprocess with a timeout, because the point is that a damaged store must never
make the open hang; ``--no-manifest-check`` turns the MANIFEST check off, so that the
deadline alone has to bound the open.
"""

from __future__ import annotations

import json
import sys
import time


def main(argv: list[str]) -> None:
    from svit.errors import SvitError
    from svit.store import ProcessStore, rocksdb_files

    deadline: float | None = 60.0
    paths: list[str] = []
    args = iter(argv)
    for arg in args:
        if arg == "--no-manifest-check":
            rocksdb_files.check_manifest = lambda directory: None  # type: ignore[assignment]
        elif arg == "--deadline":
            deadline = float(next(args))
        else:
            paths.append(arg)
    for path in paths:
        started = time.monotonic()
        try:
            with ProcessStore.open(path, open_deadline=deadline) as store:
                outcome = {"outcome": "opened", "addresses": store.addresses()}
        except SvitError as exc:
            outcome = {"outcome": "refused", "code": exc.code, "reason": getattr(exc, "reason", None), "message": str(exc)}
        outcome["seconds"] = time.monotonic() - started
        print(json.dumps(outcome), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
