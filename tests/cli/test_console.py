"""The tree view stays bounded and never walks a mount unasked."""

from __future__ import annotations

from pathlib import Path

from svit import Mount, Process
from svit.console import render_tree
from svit.repl import balanced


def test_tree_caps_children_and_cuts_long_leaves() -> None:
    p = (
        Process.builder("svit://local/t/tree")
        .memory("many", {f"k{i:03d}": i for i in range(250)})
        .memory("long", "x" * 5000)
        .build()
    )
    text = render_tree(p, "/memory", depth=2)
    lines = text.splitlines()
    assert sum(1 for line in lines if "k" in line and "= " in line) == 200
    assert "… 50 more" in text
    long_line = next(line for line in lines if "long" in line)
    assert "(5000 bytes)" in long_line and len(long_line) < 120


def test_tree_does_not_walk_a_mount_unless_inside_it(tmp_path: Path) -> None:
    (tmp_path / "secret.txt").write_text("mounted content")
    p = Process.builder("svit://local/t/tree").mount("files", Mount.folder(tmp_path)).build()
    top = render_tree(p, "/", depth=4)
    assert "files  [mount:" in top and "secret.txt" not in top
    inside = render_tree(p, "/mounts/files", depth=1)
    assert "secret.txt" in inside


def test_tree_depth_zero_shows_only_the_node() -> None:
    p = Process.builder("svit://local/t/tree").memory("a", {"b": 1}).build()
    assert render_tree(p, "/memory", depth=0).splitlines() == ["/memory  object (1 entries)"]


def test_balanced_input_detection() -> None:
    assert balanced("(+ 1 2)") and balanced("")
    assert not balanced("(define (f x)") and not balanced('"open string')
    assert balanced(")")  # a syntax error is complete input: it is reported, not waited on

