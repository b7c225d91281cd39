"""What an installer and a type checker see: one version everywhere, typed packages, a wheel
that installs only ``svit`` (with its grammar and fixtures), the license, the changelog and
the optional extras."""

from __future__ import annotations

import email.parser
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import textwrap
import tomllib
import zipfile
from pathlib import Path

import pytest

import svit
from svit.cli import main

ROOT = Path(__file__).resolve().parent.parent


def test_the_version_is_a_release_number() -> None:
    assert re.fullmatch(r"\d+\.\d+\.\d+(\.dev\d+|rc\d+)?", svit.__version__)


def test_the_build_takes_its_version_from_the_package() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "svit._version.__version__"}


def test_an_installed_distribution_reports_the_same_version() -> None:
    try:
        installed = importlib.metadata.version("svit")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("svit is not installed (a plain checkout)")
    assert installed == svit.__version__


def test_the_command_prints_its_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.strip() == f"svit {svit.__version__}"


def test_the_version_needs_no_store() -> None:
    # The flag answers before anything opens a store or reads the environment.
    done = subprocess.run(
        [sys.executable, "-m", "svit.cli", "--store", "/nonexistent/definitely/not", "--version"],
        capture_output=True, text=True, cwd=ROOT, timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"svit {svit.__version__}"


@pytest.mark.parametrize("package", ["svit", "svit.lisp", "svit.ports"])
def test_every_package_ships_its_type_marker(package: str) -> None:
    assert (ROOT / package.replace(".", "/") / "py.typed").is_file()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "py.typed" in project["tool"]["setuptools"]["package-data"][package]


# ---------------------------------------------------------------------------- the wheel

_NOT_SOURCES = shutil.ignore_patterns(
    ".git", "build", "dist", "*.egg-info", "__pycache__", ".hypothesis", ".mypy_cache", ".ruff_cache",
    ".pytest_cache", "*.so",
)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A wheel built the way an installer builds one, from a copy of the sources (the
    build writes ``build/`` and ``*.egg-info`` next to them)."""
    work = tmp_path_factory.mktemp("wheel")
    sources = work / "sources"
    shutil.copytree(ROOT, sources, symlinks=True, ignore=_NOT_SOURCES)
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(work / "dist"), str(sources)],
        capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    (built,) = (work / "dist").glob("svit-*.whl")
    return built


def _names(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        return archive.namelist()


def _read(wheel: Path, name: str) -> str:
    with zipfile.ZipFile(wheel) as archive:
        return archive.read(name).decode("utf-8")


def _dist_info(wheel: Path) -> str:
    return f"svit-{svit.__version__}.dist-info"


def test_the_wheel_installs_only_the_svit_package(wheel: Path) -> None:
    tops = {name.split("/", 1)[0] for name in _names(wheel)}
    assert tops == {"svit", _dist_info(wheel)}
    assert _read(wheel, f"{_dist_info(wheel)}/top_level.txt").split() == ["svit"]
    assert not any(name.startswith(("lisp/", "ports/")) for name in _names(wheel))


def test_the_wheel_carries_the_grammar_and_the_type_markers(wheel: Path) -> None:
    names = set(_names(wheel))
    assert "svit/lisp/grammar.lark" in names
    assert {"svit/py.typed", "svit/lisp/py.typed", "svit/ports/py.typed"} <= names


def test_the_wheel_carries_every_conformance_fixture(wheel: Path) -> None:
    shipped = {name.removeprefix("svit/spec_fixtures/") for name in _names(wheel) if name.startswith("svit/spec_fixtures/")}
    fixtures = ROOT / "spec" / "fixtures"
    expected = {path.relative_to(fixtures).as_posix() for path in fixtures.rglob("*.json")}
    assert len(expected) > 100 and shipped == expected


def test_the_wheel_metadata_names_the_license_and_the_extras(wheel: Path) -> None:
    metadata = email.parser.Parser().parsestr(_read(wheel, f"{_dist_info(wheel)}/METADATA"))
    assert metadata["License-Expression"] == "MIT"
    assert f"{_dist_info(wheel)}/licenses/LICENSE" in _names(wheel)
    assert {"http", "restricted", "openai", "all", "test"} <= set(metadata.get_all("Provides-Extra") or [])
    unconditional = [req for req in metadata.get_all("Requires-Dist") or [] if "extra ==" not in req]
    assert not [req for req in unconditional if req.lower().startswith(("httpx", "restrictedpython", "openai"))]


def test_svit_spec_runs_the_installed_fixtures_outside_a_checkout(wheel: Path, tmp_path: Path) -> None:
    installed = tmp_path / "site"
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(installed)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {**os.environ, "PYTHONPATH": str(installed)}
    where = subprocess.run(
        [sys.executable, "-c", "import svit; print(svit.__file__)"],
        capture_output=True, text=True, env=env, cwd=elsewhere, timeout=60,
    )
    assert Path(where.stdout.strip()).is_relative_to(installed), where.stderr
    done = subprocess.run(
        [sys.executable, "-m", "svit.cli", "spec"], capture_output=True, text=True, env=env, cwd=elsewhere, timeout=600,
    )
    count = len(list((ROOT / "spec" / "fixtures").rglob("*.json")))
    assert done.returncode == 0, done.stderr[-4000:]
    assert done.stdout.strip() == f"{count} passed, 0 failed"


# ---------------------------------------------------------------------------- license and changelog


def test_the_license_is_mit_from_the_authors() -> None:
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert text.startswith("MIT License")
    assert re.search(r"^Copyright \(c\) \d{4} the Svit for Python authors$", text, re.M)
    assert tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["license"] == "MIT"


def test_the_changelog_keeps_an_unreleased_section_above_the_current_release() -> None:
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert "Keep a Changelog" in text
    headings = re.findall(r"^## (.+)$", text, re.M)
    assert headings[0] == "Unreleased"
    releases = [re.match(r"(\d+\.\d+\.\d+) - \d{4}-\d{2}-\d{2}$", heading) for heading in headings[1:]]
    assert releases and all(releases)
    assert releases[0] is not None and releases[0].group(1) == svit.__version__.split(".dev")[0].split("rc")[0]
    unreleased = text.split("## Unreleased", 1)[1].split("\n## ", 1)[0]
    for change in ("svit.lisp", "svit.ports", "svit[http]", "svit spec"):
        assert change in unreleased


# ---------------------------------------------------------------------------- optional extras

_BLOCKER = """
import importlib.abc, sys
BLOCKED = {"httpx", "httpcore", "RestrictedPython", "openai", "opentelemetry"}
class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, Blocker())
"""


def _without_extras(program: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _BLOCKER + textwrap.dedent(program)],
        capture_output=True, text=True, cwd=ROOT, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def test_the_core_imports_without_any_extra() -> None:
    done = _without_extras(
        """
        import svit, svit.cli, svit.loop, svit.store, svit.spec, svit.ports
        import svit.ports.llm, svit.ports.spawn
        from svit import Process
        p = Process.builder("svit://local/extras/p").memory("n", 1).build()
        print(p.exec_inline('(define (main input) (+ 1 (read "/memory/n")))', None).output)
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "2"


@pytest.mark.parametrize(("module", "extra"), [("svit.ports.http", "http"), ("svit.ports.restricted", "restricted")])
def test_a_port_without_its_extra_names_the_extra(module: str, extra: str) -> None:
    done = _without_extras(
        f"""
        try:
            import {module}
        except ImportError as error:
            print(error)
        """
    )
    assert done.returncode == 0, done.stderr
    assert f"pip install 'svit[{extra}]'" in done.stdout
    assert f"needs the '{extra}' extra" in done.stdout


def test_a_reasoner_without_openai_names_the_extra() -> None:
    done = _without_extras(
        """
        from svit.reasoners import OpenAIReasoner
        try:
            OpenAIReasoner(model="m", base_url="http://127.0.0.1:9", api_key="k")
        except Exception as error:
            print(type(error).__name__, error)
        """
    )
    assert done.returncode == 0, done.stderr
    assert "pip install 'svit[openai]'" in done.stdout


def test_the_test_extra_holds_every_other_extra() -> None:
    """Every extra but ``bench``: the benchmark peers only compare, so tests never need them."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert {"http", "restricted", "openai", "all", "test"} <= set(extras)
    others = {req for name, reqs in extras.items() if name not in ("test", "bench") for req in reqs}
    assert others <= set(extras["test"])
    assert not set(extras["bench"]) & (set(extras["test"]) | set(extras["all"]))
    assert set(extras["all"]) == set(extras["http"]) | set(extras["restricted"]) | set(extras["openai"]) \
        | set(extras["postgresql"]) | set(extras["serve"]) | set(extras["chat"]) | set(extras["otel"]) | set(extras["console"])


def test_the_serve_and_chat_extras_are_declared_and_in_all_and_test() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    names = {extra: {re.split(r"[<>=\[]", req)[0].lower() for req in reqs} for extra, reqs in extras.items()}
    assert names["serve"] == {"starlette", "uvicorn", "httpx", "mcp", "sse-starlette"}
    assert names["chat"] == {"openai", "prompt_toolkit"}
    for bundle in ("all", "test"):
        assert names["serve"] | names["chat"] <= names[bundle], bundle


def test_the_otel_extra_is_the_api_alone_and_spans_are_no_ops_without_it() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert [re.split(r"[<>=\[]", req)[0] for req in extras["otel"]] == ["opentelemetry-api"]
    assert "opentelemetry-sdk" in {re.split(r"[<>=\[]", req)[0] for req in extras["test"]}  # the in-memory exporter
    done = _without_extras(
        """
        from svit import Message, Process
        from svit import telemetry
        from svit.loop import LoopOptions, run_next_turn
        from svit.reasoners import ScriptedReasoner
        assert not telemetry.available()
        with telemetry.span("svit.turn", **{"svit.address": "a"}) as span:
            span.set("svit.turn.outcome", "done")
        p = Process.builder("svit://local/extras/agent").build()
        p.enqueue_inbox(Message.user("hi").to_json())
        print(run_next_turn(p, ScriptedReasoner(["hello"]), LoopOptions()).kind)
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "done"
