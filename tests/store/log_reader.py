"""Reader for the ``reuse_logs`` tests, in its own process so that a hang is a timeout:
``log_reader.py STORE_DIR``.

Opens the store read-only, prints ``opened``, then answers each line of stdin with one
JSON line (``{"error": ...}`` for a refusal):

* ``follow``: follows the writer, then reports the head of :data:`ADDRESS` (``version``),
  whether ``/memory/blob`` there is ``blob(version)`` (``blob_ok``), its first characters
  (``text``), and whether the reader follows by reopening read-only instances (``reopening``);
* ``history VERSION...``: those of the versions whose ``/memory/blob`` does not read back
  as ``blob(version)`` (``bad``).
"""

from __future__ import annotations

import json
import sys

from svit.errors import SvitError
from svit.store import ProcessStore
from tests.store.log_roll_writer import ADDRESS, blob


def answer(reader: ProcessStore, command: list[str]) -> dict[str, object]:
    if command[0] == "follow":
        reader.follow()
        view = reader.resume(ADDRESS)
        text = view.read("/memory/blob")
        return {"version": view.version, "blob_ok": text == blob(view.version), "text": str(text)[:16],
                "reopening": bool(getattr(reader.engine, "reopens_to_follow", False))}
    view = reader.resume(ADDRESS)
    return {"bad": [version for version in map(int, command[1:])
                    if view.at(version).read("/memory/blob") != blob(version)]}


def main() -> None:
    reader = ProcessStore.open(sys.argv[1], read_only=True)
    print("opened", flush=True)
    for line in sys.stdin:
        try:
            reply = answer(reader, line.split())
        except SvitError as exc:
            reply = {"error": exc.code, "reason": getattr(exc, "reason", None)}
        print(json.dumps(reply), flush=True)
    reader.close()


if __name__ == "__main__":
    main()
