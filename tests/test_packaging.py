"""What an installer and a type checker see: one version everywhere, and typed packages."""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
import tomllib
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
