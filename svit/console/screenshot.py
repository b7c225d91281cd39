"""The README's picture of the console, made by the console itself.

    python -m svit.console.screenshot docs/console.svg

builds a small demo process in a throwaway store, runs the console headless (Textual's
pilot), browses a little, sends a message and saves Textual's SVG screenshot.
:func:`svg_text` reads such a screenshot back as lines of text (tests use it).
"""

from __future__ import annotations

import asyncio
import html
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["DEMO_ADDRESS", "build_demo", "main", "snap", "svg_text", "take"]

DEMO_ADDRESS = "svit://local/demo/orders"

_COUNTER = """; Adds input.by to /memory/count and reports it.
(define (main input)
  (let ((next (+ (read "/memory/count") (value-get input "/by"))))
    (do (write "/memory/count" next)
        (log-info! "counted" (value-map "count" next))
        (value-map "count" next))))
"""

#: Rich lays an SVG screenshot out on a grid of cells this wide (0.61 x its 20px font).
_CELL = 12.2
_TEXT = re.compile(r'<text [^>]*x="([0-9.]+)"[^>]*clip-path="url\(#[\w-]+-line-(\d+)\)">([^<]*)</text>')


def svg_text(svg: str) -> list[str]:
    """The text of a Textual/Rich SVG screenshot, one string per screen line."""
    lines: dict[int, dict[int, str]] = {}
    for x, line, text in _TEXT.findall(svg):
        lines.setdefault(int(line), {})[round(float(x) / _CELL)] = html.unescape(text).replace("\xa0", " ")
    out = []
    for number in sorted(lines):
        row = ""
        for column, text in sorted(lines[number].items()):
            row = row.ljust(column) + text
        out.append(row.rstrip())
    return out


def build_demo(store: Any) -> Any:
    """A small process with some history: memory, a /lib script, a few commits, mail."""
    from ..process import Process  # noqa: PLC0415 - only the demo needs a builder

    process = (Process.builder(DEMO_ADDRESS)
               .memory("count", 0)
               .memory("orders", [{"id": "A-17", "item": "tea", "qty": 2}, {"id": "A-18", "item": "rice", "qty": 1}])
               .memory("customer", {"name": "Mira", "tier": "gold"})
               .library("counter", _COUNTER, documentation="Adds input.by to /memory/count")
               .build())
    handle = store.create(process)
    handle.exec("/lib/counter", {"by": 2})
    handle.write("/memory/customer/tier", "platinum")
    handle.exec("/lib/counter", {"by": 3})
    return handle


async def _drive(app: Any, out: Path, size: tuple[int, int]) -> None:
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        tree = app.query_one("#tree")
        tree.rows["/memory"].expand()
        await pilot.pause()
        tree.rows["/lib"].expand()
        await pilot.pause()
        app.submit("send", "Please restock tea.")
        tree.move_cursor(tree.rows["/lib/counter"])
        await pilot.pause()
        out.write_text(app.export_screenshot(title="svit console"), encoding="utf-8")


async def _snap(app: Any, out: Path, size: tuple[int, int]) -> None:
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        out.write_text(app.export_screenshot(title="svit console"), encoding="utf-8")


def snap(source: Any, out: Path, size: tuple[int, int] = (120, 36)) -> None:
    """Run the console on ``source`` headless and save what it first shows (``svit console --screenshot``)."""
    from .app import ConsoleApp  # noqa: PLC0415 - needs the console extra

    asyncio.run(_snap(ConsoleApp(source, poll_seconds=None), out, size))


def take(out: Path, size: tuple[int, int] = (120, 36)) -> None:
    """Write the demo's screenshot to ``out`` (SVG)."""
    from ..store import ProcessStore  # noqa: PLC0415 - the store loads RocksDB
    from .app import ConsoleApp  # noqa: PLC0415 - needs the console extra
    from .store_source import StoreSource  # noqa: PLC0415 - needs the store

    with tempfile.TemporaryDirectory() as directory:
        store = ProcessStore.open(Path(directory) / "store")
        try:
            build_demo(store)
            app = ConsoleApp(StoreSource(store, DEMO_ADDRESS), poll_seconds=None)
            asyncio.run(_drive(app, out, size))
        finally:
            store.close()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        sys.stderr.write("usage: python -m svit.console.screenshot OUT.svg\n")
        return 2
    take(Path(args[0]))
    sys.stdout.write(f"wrote {args[0]}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
