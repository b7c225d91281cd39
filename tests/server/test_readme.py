"""The README's serving example stays true: its token file loads and grants what it says."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from svit.server import TokenSet
from svit.server.tokens import Forbidden

README = Path(__file__).resolve().parents[2] / "README.md"


def _token_file() -> str:
    section = README.read_text(encoding="utf-8").split("## Reaching a process", 1)[1].split("\n## ", 1)[0]
    match = re.search(r"cat > tokens\.json <<'JSON'\n(.*?)\nJSON\n", section, re.S)
    assert match is not None, "the README no longer shows a token file"
    return match.group(1)


def test_the_readme_token_file_loads_and_covers_its_prefix_only():
    tokens = TokenSet.from_json(_token_file())
    token = "replace-with-a-long-random-secret"
    assert tokens.authorize(token, "svit://local/team/a", "write") is not None
    with pytest.raises(Forbidden):
        tokens.authorize(token, "svit://local/other/a", "read")
