"""Runs every conformance fixture under spec/fixtures (format: spec/README.md)."""

from pathlib import Path

import pytest

from svit.spec import load_fixtures, run_fixture

FIXTURES_DIR = Path(__file__).resolve().parent.parent / "spec" / "fixtures"
FIXTURES = load_fixtures(FIXTURES_DIR)


def test_fixture_count() -> None:
    assert len(FIXTURES) >= 150, f"only {len(FIXTURES)} fixtures in {FIXTURES_DIR}"


@pytest.mark.parametrize("fixture", FIXTURES, ids=[f.name for f in FIXTURES])
def test_fixture(fixture) -> None:
    run_fixture(fixture)
