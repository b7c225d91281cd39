"""Fixtures and fakes shared by more than one test file.

Fixtures arrive by name; the plain helpers are imported (``from tests.conftest import
with_trailer``), which is well defined because ``tests`` is a package.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import blake3
import pytest
import rocksdict

from svit.lisp.budget import Budget
from svit.lisp.context import Context, LispLimits, enter, leave
from svit.snapshot import MAGIC
from svit.store import ProcessStore, keys
from tests.loop.fake_openai import FakeOpenAI

__all__ = ["make_files", "raw_db", "reopen", "with_trailer"]


# ---------------------------------------------------------------------------- fixtures


@pytest.fixture
def engine_kind() -> str:
    """The storage engine the ``store`` fixture opens."""
    return "rocksdb"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[ProcessStore]:
    """An open process store in ``tmp_path/store``, closed after the test (closing twice is harmless)."""
    opened = ProcessStore.open(str(tmp_path / "store"))
    yield opened
    opened.close()


@pytest.fixture
def host_context() -> Iterator[Context]:
    """A run context entered by the test, as a host does before calling Lisp code directly.

    Outside a run there is no context (system code refuses to run); tests that call
    system functions or render results themselves enter this one, under the default
    limits and a budget large enough never to be the point of the test.
    """
    context = Context(LispLimits(), Budget(max_steps=1_000_000_000, max_millis=None))
    previous = enter(context)
    try:
        yield context
    finally:
        leave(previous)


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    """A fake OpenAI-compatible server on a local port (``tests/loop/fake_openai.py``)."""
    with FakeOpenAI() as fake:
        yield fake


@pytest.fixture(autouse=True)
def no_openai_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests never pick up a real provider from the environment."""
    for name in ("OPENAI_MODEL", "OPENAI_BASE_URL", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)


# ---------------------------------------------------------------------------- helpers


def reopen(store: ProcessStore) -> ProcessStore:
    """Close ``store`` and open the same directory again (what a restart does)."""
    store.close()
    return ProcessStore.open(store.path)


def raw_db(path: str) -> rocksdict.Rdict:
    """The database opened directly, bypassing the store (to tamper with it)."""
    families = {name: rocksdict.Options(raw_mode=True) for name in keys.COLUMN_FAMILIES if name != "default"}
    return rocksdict.Rdict(path, rocksdict.Options(raw_mode=True), column_families=families)


def with_trailer(body: bytes) -> bytes:
    """Snapshot ``body`` sealed with a freshly computed trailer (what a forger can always do)."""
    return body + MAGIC + len(body).to_bytes(8, "big") + blake3.blake3(body).digest()


def make_files(root: Path) -> None:
    """A small folder to mount: one text file at the top and one in a subdirectory."""
    (root / "greeting.txt").write_text("hello\n")
    (root / "notes").mkdir()
    (root / "notes" / "checklist.md").write_text("# todo\njust check\n")
