"""How values look in the console: row labels, highlighted previews, diffs (Rich renderables).

A preview is JSON highlighted as JSON, and a ``/lib`` script's source highlighted as
Lisp (Pygments' Scheme lexer reads Svit Lisp well enough); either is cut at
:data:`PREVIEW_BYTES` so one huge leaf cannot stall the terminal.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from rich.console import Group, RenderableType
from rich.syntax import Syntax
from rich.text import Text

from .source import Commit, Difference, left_out
from .tree import describe, preview

__all__ = ["PREVIEW_BYTES", "THEME", "commit_line", "diff_renderable", "preview_renderable", "row_label"]

#: Leaf rendering is capped (as in Lampa) at 64 KiB of text.
PREVIEW_BYTES = 64 * 1024
THEME = "monokai"


def is_script(value: Any) -> bool:
    return hasattr(value, "source") and hasattr(value, "documentation")


def row_label(name: str, stat: dict[str, Any] | None, value: Any = None, *, leaf: bool = False) -> Text:
    """``name  kind (size)  = short value`` for one tree row."""
    label = Text(name, style="bold")
    facts = describe(stat)
    if facts:
        label.append("  " + facts, style="dim")
    if leaf and not isinstance(value, dict) and not is_script(value):  # a script's source is for the preview
        label.append("  = " + preview(value, 40), style="cyan")
    return label


def _cap(text: str) -> tuple[str, int]:
    data = text.encode("utf-8")
    if len(data) <= PREVIEW_BYTES:
        return text, 0
    return data[:PREVIEW_BYTES].decode("utf-8", errors="ignore"), len(data) - PREVIEW_BYTES


def preview_renderable(path: str, stat: dict[str, Any] | None, value: Any, *, version: int | None = None) -> RenderableType:
    """The preview panel's content for ``path``: a heading, then the highlighted value."""
    heading = Text(path, style="bold")
    if version is not None:
        heading.append(f"  (as of version {version})", style="yellow")
    facts = describe(stat)
    if facts:
        heading.append("  " + facts, style="dim")
    if stat is None:
        return Group(heading, Text("(absent)", style="dim"))
    if is_script(value):
        source, cut = _cap(value.source)
        parts: list[RenderableType] = [heading]
        if value.documentation:
            parts.append(Text(value.documentation, style="italic"))
        parts.append(Syntax(source, "scheme", theme=THEME, line_numbers=True, word_wrap=True))
    else:
        source, cut = _cap(json.dumps(value, ensure_ascii=False, indent=2, sort_keys=False, default=_plain))
        parts = [heading, Syntax(source, "json", theme=THEME, word_wrap=True)]
    cut += left_out(value)  # what the source did not carry (a preview over HTTP)
    if cut:
        parts.append(Text(f"… {cut} more bytes not shown (preview capped at {PREVIEW_BYTES // 1024} KiB)", style="yellow"))
    return Group(*parts)


def _plain(value: Any) -> Any:
    if is_script(value):
        return {"documentation": value.documentation, "source": value.source}
    return repr(value)


def diff_renderable(before: int, after: int, differences: list[Difference]) -> RenderableType:
    """``+``/``-``/``~`` lines with each path's values before and after."""
    more = sum(d.before for d in differences if d.kind == "more" and type(d.before) is int)
    count = sum(1 for d in differences if d.kind != "more") + more
    lines = Text(f"diff version {before} -> {after}: {count} path(s)\n", style="bold")
    if not differences:
        lines.append("(no difference)", style="dim")
    marks = {"added": ("+ ", "green"), "removed": ("- ", "red"), "changed": ("~ ", "yellow")}
    for difference in differences:
        if difference.kind == "more":  # a source that carried only the first differences
            lines.append(difference.path + "\n", style="yellow")
            continue
        mark, style = marks.get(difference.kind, ("? ", "white"))
        lines.append(mark + difference.path, style=style)
        if difference.kind != "added":
            lines.append("\n    before: " + _short(difference.before), style="red")
        if difference.kind != "removed":
            lines.append("\n    after:  " + _short(difference.after), style="green")
        lines.append("\n")
    return lines


def _short(value: Any) -> str:
    return preview(value.source if is_script(value) else value, 120)


def commit_line(commit: Commit) -> Text:
    changed = ", ".join(commit.changed[:6]) + (f" (+{len(commit.changed) - 6})" if len(commit.changed) > 6 else "")
    line = Text(f"v{commit.version} ", style="bold magenta")
    if commit.committed_at:
        when = datetime.fromtimestamp(commit.committed_at / 1000, tz=UTC).strftime("%H:%M:%S")
        line.append(when + " ", style="dim")
    line.append(commit.source, style="magenta")
    if commit.script:
        line.append(" " + commit.script, style="green")
    if commit.output:
        line.append(" -> " + commit.output[:60], style="cyan")
    line.append("  " + changed, style="dim")
    return line
