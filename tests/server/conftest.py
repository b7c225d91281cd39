"""Fixtures of the server tests: one real ``svit serve`` per test module over a fresh store."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.server.served import ADDRESS, OTHER, Served, Tokens, seed, start_server


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    location = str(tmp_path_factory.mktemp("serve") / "store")
    seed(location, ADDRESS, OTHER)
    server = start_server(location, Tokens())
    try:
        yield server
    finally:
        server.stop()
