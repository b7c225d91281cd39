"""A bounded text drawing of a process tree (``svit tree``, the REPL's ``:tree``).

It works on anything with the process host API (an in-memory :class:`Process` or a
durable handle) and never walks a mount or the whole tree unless asked to.
"""

from __future__ import annotations

import json
from typing import Any

from ..errors import SvitError
from ..paths import Segments, split_mount

__all__ = ["MAX_CHILDREN", "PREVIEW", "describe", "mount_of", "preview", "render_tree"]

MAX_CHILDREN = 200
PREVIEW = 60


def mount_of(path: str) -> tuple[str, Segments] | None:
    """``(mount name, rest)`` of a path below ``/mounts/<name>``; None otherwise (or unparseable)."""
    try:
        return split_mount(path)
    except SvitError:
        return None


def preview(value: Any, width: int = PREVIEW) -> str:
    text = json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= width else text[: width - 1] + "…"


def describe(stat: dict[str, Any] | None) -> str:
    if stat is None:
        return "(absent)"
    facts = stat.get("facts") or {}
    if stat.get("mount") is not None and stat.get("path") == "/":
        attached = "attached" if stat.get("attached") else "not attached"
        return f"[mount: {stat.get('source')}, {stat.get('locality')}, {stat.get('access')}, {attached}]"
    content = facts.get("content")
    if "entries" in facts:
        return f"{content} ({facts['entries']} entries)"
    if "bytes" in facts:
        return f"{content} ({facts['bytes']} bytes)"
    return "" if content == "scalar" else str(content or stat.get("kind"))


def render_tree(process: Any, path: str = "/", depth: int = 2, *, max_children: int = MAX_CHILDREN) -> str:
    """The subtree at ``path`` as indented lines: kinds, sizes, short previews.

    A mount is shown by its descriptor and only walked when ``path`` is inside it.
    """
    lines: list[str] = []
    root_stat = process.stat(path)
    label = path if path not in ("", "/") else "/"
    lines.append(f"{label}  {describe(root_stat)}")
    inside_mount = mount_of(path) is not None

    def walk(node_path: str, level: int, indent: str) -> None:
        if level >= depth:
            return
        try:
            names = process.discover(node_path)
        except SvitError:
            return
        shown = names[:max_children]
        for index, name in enumerate(shown):
            child = (node_path.rstrip("/") or "") + "/" + name
            last = index == len(shown) - 1 and len(names) <= max_children
            branch = "└── " if last else "├── "
            try:
                stat = process.stat(child)
            except SvitError as error:
                lines.append(f"{indent}{branch}{name}  (error: {error.code})")
                continue
            child_mount = mount_of(child)
            is_mount_root = child_mount is not None and not child_mount[1]
            text = f"{indent}{branch}{name}  {describe(stat)}"
            if stat is not None and stat.get("kind") == "leaf":
                try:
                    value = process.read(child)
                except SvitError:
                    value = None
                if not isinstance(value, dict):
                    shown_value = getattr(value, "source", value)
                    text = text.rstrip() + f"  = {preview(shown_value)}"
            lines.append(text)
            if stat is not None and stat.get("kind") == "directory" and (not is_mount_root or inside_mount):
                walk(child, level + 1, indent + ("    " if last else "│   "))
        if len(names) > max_children:
            lines.append(f"{indent}└── … {len(names) - max_children} more")

    if root_stat is not None and root_stat.get("kind") == "directory":
        walk(path if path not in ("",) else "/", 0, "")
    return "\n".join(lines)
