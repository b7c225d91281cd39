"""``svit mcp ADDR`` on stdio, driven by the official SDK client in a child process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.client.session import ClientSession, IncomingMessage
from mcp.client.stdio import StdioServerParameters, stdio_client

from svit import cli
from tests.mcp.scenario import (
    check_failed_exec,
    check_instructions,
    check_resources,
    check_tools,
    check_writes_and_execs,
)

REPO = Path(__file__).resolve().parents[2]
ADDRESS = "svit://local/me/notes"


def server_parameters(store: Path, *extra: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "svit.cli", "mcp", ADDRESS, "--store", str(store), *extra],
        env={"PYTHONPATH": str(REPO)},
        cwd=str(REPO),
    )


def raw_session(store: Path, requests: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], str, str]:
    """Run ``svit mcp`` with JSON-RPC lines on stdin: (one reply per request with an id, the
    rest of stdout, stderr). Stdin stays open until the replies are read."""
    child = subprocess.Popen(
        [sys.executable, "-m", "svit.cli", "mcp", ADDRESS, "--store", str(store)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    watchdog = threading.Timer(60, child.kill)
    watchdog.start()
    try:
        assert child.stdin is not None and child.stdout is not None
        child.stdin.write("".join(json.dumps(request) + "\n" for request in requests))
        child.stdin.flush()
        replies = [json.loads(child.stdout.readline()) for request in requests if "id" in request]
        rest, errors = child.communicate()  # closes stdin: the server ends
    finally:
        watchdog.cancel()
    assert child.returncode == 0, errors
    return replies, rest, errors


def test_stdio_session_commits_durably_and_a_failed_exec_changes_nothing(tmp_path: Path) -> None:
    store = tmp_path / "store"
    log = (tmp_path / "stderr.txt").open("w+")
    unreadable: list[Exception] = []

    async def on_message(message: IncomingMessage) -> None:
        if isinstance(message, Exception):  # a stdout line that is not JSON-RPC
            unreadable.append(message)

    async def first_run() -> int:
        async with stdio_client(server_parameters(store, "--create"), errlog=log) as (read, write):
            async with ClientSession(read, write, message_handler=on_message) as session:
                with anyio.fail_after(30):
                    init = await session.initialize()
                    check_instructions(init.instructions, ADDRESS)
                    await check_tools(session)
                    version = await check_writes_and_execs(session)
                    await check_failed_exec(session, ADDRESS)
                    await check_resources(session, ADDRESS)
                    return version + 1  # check_failed_exec stored /lib/bad

    committed = anyio.run(first_run)
    assert unreadable == []
    log.seek(0)
    diagnostics = log.read()
    assert "svit: created a process store" in diagnostics and "svit: created svit://local/me/notes" in diagnostics

    # A second run on the same store sees the committed state; its stdout is JSON-RPC alone.
    replies, rest, errors = raw_session(store, [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "read", "arguments": {"path": "/memory/total"}}},
    ])
    assert rest == "" and errors == ""
    assert [reply["id"] for reply in replies] == [1, 2]
    assert replies[1]["result"]["isError"] is False
    assert replies[1]["result"]["structuredContent"] == {"path": "/memory/total", "value": 42, "version": committed}


def test_an_absent_address_without_create_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["mcp", ADDRESS, "--store", str(tmp_path / "store")]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines()[-1] == f"svit: persistence_not_found: persisted process not found: {ADDRESS}"


def test_without_the_sdk_the_command_names_the_extra(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in [name for name in sys.modules if name == "svit.mcp" or name.startswith("svit.mcp.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "mcp", None)  # the SDK cannot be imported
    try:
        assert cli.main(["mcp", ADDRESS, "--store", str(tmp_path / "store"), "--create"]) == 1
    finally:  # nothing half-imported stays behind; the real modules come back at teardown
        for name in [name for name in sys.modules if name == "svit.mcp" or name.startswith("svit.mcp.")]:
            del sys.modules[name]
    assert capsys.readouterr().err.splitlines()[-1] == (
        'svit: missing_dependency: svit mcp needs the "serve" extra: pip install "svit[serve]"'
    )
    assert not (tmp_path / "store").exists()  # refused before anything was opened
