"""Token sets of ``svit serve`` and how the command refuses to start without usable tokens."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from svit.cli import build_parser
from svit.server import Forbidden, InvalidTokens, TokenSet, Unauthorized, parse_listen
from tests.server.served import REPO

WRITE = "write-token-0123456789"
READ = "read-token-0123456789"


def tokens() -> TokenSet:
    return TokenSet.from_json(json.dumps([
        {"token": WRITE, "prefix": "svit://local/team/", "access": "write"},
        {"token": READ, "prefix": "svit://local/team/", "access": "read"},
    ]))


def test_write_covers_read_and_a_prefix_bounds_both() -> None:
    grant = tokens().authorize(WRITE, "svit://local/team/a", "write")
    assert grant.access == "write" and grant.prefix == "svit://local/team/"
    assert tokens().authorize(WRITE, "svit://local/team/a", "read").access == "write"
    assert tokens().authorize(READ, "svit://local/team/a/b", "read").access == "read"
    with pytest.raises(Forbidden, match="read-only"):
        tokens().authorize(READ, "svit://local/team/a", "write")
    with pytest.raises(Forbidden, match="does not cover"):
        tokens().authorize(WRITE, "svit://local/other/a", "read")
    with pytest.raises(Unauthorized, match="unknown"):
        tokens().authorize(WRITE[:-1], "svit://local/team/a", "read")
    with pytest.raises(Unauthorized, match="missing"):
        tokens().authorize(None, "svit://local/team/a", "read")
    with pytest.raises(Unauthorized, match="missing"):
        tokens().authorize("", "svit://local/team/a", "read")


SECRET = "very-secret-token-value-42"


@pytest.mark.parametrize(("entries", "needle"), [
    ("not json", "not JSON"),
    ('{"token": "x"}', "JSON list"),
    ("[]", "empty"),
    ([5], "expected an object"),
    ([{"token": "short", "prefix": "svit://local/", "access": "read"}], "shorter than 16"),
    ([{"token": 7, "prefix": "svit://local/", "access": "read"}], "token must be text"),
    ([{"token": SECRET + " x", "prefix": "svit://local/", "access": "read"}], "without whitespace"),
    ([{"token": SECRET, "prefix": "http://local/", "access": "read"}], "start of a process address"),
    ([{"token": SECRET, "prefix": "svit://a b", "access": "read"}], "start of a process address"),
    ([{"token": SECRET, "access": "read"}], "prefix must be text"),
    ([{"token": SECRET, "prefix": "svit://local/", "access": "admin"}], "access must be"),
    ([{"token": SECRET, "prefix": "svit://local/", "access": "read", "extra": 1}], "unknown field"),
    ([{"token": SECRET, "prefix": "svit://local/", "access": "read"},
      {"token": SECRET, "prefix": "svit://other/", "access": "write"}], "entry 1: the same token"),
])
def test_bad_token_lists_are_refused_without_echoing_a_token(entries: object, needle: str) -> None:
    text = entries if isinstance(entries, str) else json.dumps(entries)
    with pytest.raises(InvalidTokens) as refused:
        TokenSet.from_json(text)
    assert needle in str(refused.value)
    assert SECRET not in str(refused.value) and "short" not in str(refused.value).replace("shorter", "")


def test_from_env_and_load(tmp_path: Path) -> None:
    text = json.dumps([{"token": SECRET, "prefix": "svit://", "access": "read"}])
    assert TokenSet.from_env({}) is None
    assert len(TokenSet.from_env({"SVIT_SERVE_TOKENS": text}) or []) == 1
    (tmp_path / "tokens.json").write_text(text)
    assert TokenSet.load(tmp_path / "tokens.json").authorize(SECRET, "svit://x", "read").prefix == "svit://"
    with pytest.raises(InvalidTokens, match="does not exist") as missing:
        TokenSet.load(tmp_path / "absent.json")
    assert str(tmp_path) not in str(missing.value)


def test_listen_addresses() -> None:
    assert parse_listen("127.0.0.1:0") == ("127.0.0.1", 0)
    assert parse_listen("[::1]:8470") == ("::1", 8470)
    for bad in ("8470", ":8470", "127.0.0.1:x", "127.0.0.1:70000"):
        with pytest.raises(ValueError):
            parse_listen(bad)
    # the default binds loopback only (tests never take the fixed port itself)
    assert build_parser().parse_args(["serve"]).listen == "127.0.0.1:8470"


def run_serve(*args: str, env: dict[str, str] | None = None, pythonpath: str = str(REPO)) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k != "SVIT_SERVE_TOKENS"}
    environ.update({"PYTHONPATH": pythonpath, **(env or {})})
    return subprocess.run([sys.executable, "-m", "svit.cli", "serve", *args], capture_output=True, text=True, env=environ,
                          cwd=REPO, timeout=60)


def test_no_tokens_no_server(tmp_path: Path) -> None:
    done = run_serve("--store", str(tmp_path / "store"), "--listen", "127.0.0.1:0")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("svit: usage: svit serve needs tokens: --tokens FILE or SVIT_SERVE_TOKENS")


def test_a_bad_token_file_is_one_error_line_without_the_token(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    path.write_text(json.dumps([{"token": SECRET, "prefix": "nope", "access": "write"}]))
    done = run_serve("--store", str(tmp_path / "store"), "--listen", "127.0.0.1:0", "--tokens", str(path))
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith("svit: invalid_tokens: token file tokens.json: token entry 0: prefix must be")
    assert SECRET not in done.stderr and str(tmp_path) not in done.stderr and done.stderr.count("\n") == 1


def test_without_the_serve_extra_the_command_names_it(tmp_path: Path) -> None:
    blocker = tmp_path / "blocked" / "starlette"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('starlette is not installed')\n")
    done = run_serve("--store", str(tmp_path / "store"), pythonpath=f"{blocker.parent}{os.pathsep}{REPO}")
    assert done.returncode == 1
    assert done.stderr == 'svit: missing_dependency: svit serve needs the "serve" extra: pip install "svit[serve]"\n'
