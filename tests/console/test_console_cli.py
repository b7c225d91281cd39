"""``svit console`` from the command line, without and with its extra, and the README screenshot tool."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import tomllib
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest

from svit import Process
from svit.cli import main
from svit.store import ProcessStore

ROOT = Path(__file__).resolve().parents[2]

_WITHOUT_TEXTUAL = """
import importlib.abc, sys
class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {"textual", "rich", "pygments"}:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, Blocker())
"""


def _without_textual(program: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _WITHOUT_TEXTUAL + textwrap.dedent(program)],
        capture_output=True, text=True, cwd=ROOT, timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT), "SVIT_STORE": str(tmp_path / "store")},
    )


def test_the_console_extra_is_declared_and_in_all_and_test() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert [req.split(">")[0] for req in extras["console"]] == ["textual"]
    for bundle in ("all", "test"):
        assert set(extras["console"]) <= set(extras[bundle]), bundle


def test_without_the_extra_the_console_names_it_and_the_tree_drawing_still_imports(tmp_path: Path) -> None:
    done = _without_textual(
        """
        from svit.console import MAX_CHILDREN, PREVIEW, render_tree
        from svit import Process
        print(render_tree(Process.builder("svit://local/x/p").memory("n", 1).build(), "/memory", 1))
        from svit.cli import main
        sys.exit(main(["console", "svit://local/x/p"]))
        """,
        tmp_path,
    )
    assert done.returncode == 2, done.stderr
    assert "n  = 1" in done.stdout
    assert 'svit console needs the "console" extra: pip install "svit[console]"' in done.stderr
    assert "Traceback" not in done.stderr


def test_console_screenshot_from_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("textual")
    from svit.console.screenshot import svg_text

    with ProcessStore.open(tmp_path / "store") as store:
        store.create(Process.builder("svit://local/x/p").memory("colour", "teal").build())
    out = tmp_path / "shot.svg"
    assert main(["--store", str(tmp_path / "store"), "console", "svit://local/x/p", "--screenshot", str(out)]) == 0
    screen = "\n".join(svg_text(out.read_text()))
    assert "svit://local/x/p" in screen and "memory  object (1 entries)" in screen


def test_console_on_an_absent_address_is_a_clean_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("textual")
    assert main(["--store", str(tmp_path / "store"), "console", "svit://local/x/none", "--screenshot", str(tmp_path / "s.svg")]) == 1
    err = capsys.readouterr().err
    assert "svit: persistence_not_found: " in err and "Traceback" not in err


def test_console_over_serve_needs_a_token_in_the_environment(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("textual")
    monkeypatch.delenv("SVIT_TOKEN", raising=False)
    assert main(["console", "svit://local/x/p", "--serve", "http://127.0.0.1:9"]) == 2
    assert "$SVIT_TOKEN" in capsys.readouterr().err


def test_the_screenshot_tool_writes_an_svg_of_the_demo(tmp_path: Path) -> None:
    pytest.importorskip("textual")
    from svit.console.screenshot import DEMO_ADDRESS, svg_text
    from svit.console.screenshot import main as screenshot_main

    out = tmp_path / "console.svg"
    assert screenshot_main([str(out)]) == 0
    svg = out.read_text(encoding="utf-8")
    root = ElementTree.fromstring(svg)  # well-formed XML
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    screen = "\n".join(svg_text(svg))
    for name in ("memory", "orders", "customer", "counter", "lib", DEMO_ADDRESS):
        assert name in screen, name
    assert "Please restock tea." in screen  # the message the demo sends, shown in the conversation
    assert "(define (main input)" in screen  # the selected script, previewed
