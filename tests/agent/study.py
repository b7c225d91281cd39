"""Work the agent tasks by hand, one tool call per command, with every call logged.

A model (or a person) given only the agent's view uses these commands::

    python -m tests.agent.study prompt                       # system prompt, then the tool specs
    python -m tests.agent.study start DIR TASK               # seed the task's process, print the statement
    python -m tests.agent.study call DIR TASK TOOL 'JSON'    # one tool call; prints what the model would see
    python -m tests.agent.study done DIR TASK                # the model says it is finished
    python -m tests.agent.study score DIR [--json]           # run every checker, print the measured figures

With ``--via mcp`` before the command, ``prompt`` prints what an MCP client receives from
``svit mcp`` (the server's instructions and its ``tools/list``) and ``call`` goes through
an official-SDK client session connected to :func:`svit.mcp.build_server`, so the study
measures the MCP view itself.

Each task's process is kept under DIR as a snapshot (``<task>.snapshot``) and rebuilt
with its ports and mounts on every command; every call is appended to ``DIR/calls.jsonl``
and the score is computed from that log and the checkers, never from what the worker says.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from typing import Any

from svit.loop.messages import ToolCall
from svit.loop.prompt import compose_system_prompt
from svit.loop.tools import TOOL_SPECS, run_tool
from svit.process import Process
from svit.reasoners import to_openai_tools
from svit.spec import Fixture, Run

from .tasks import ADDRESS, TASKS, TASKS_BY_NAME, Task

LOG = "calls.jsonl"
STATE = "tasks.json"
TOOL_CALL_LIMIT = 8


class StudyError(Exception):
    """A misuse of the harness (not something the model would see)."""


class _TaskRun(Run):
    """A fixture run whose mount folders live under the study directory, not a temp dir."""

    def __init__(self, task: Task, root: str) -> None:
        setup = {"address": ADDRESS, **task.setup}
        super().__init__(Fixture(name=task.name, description=task.statement, steps=[], setup=setup))
        shutil.rmtree(self.tmp, ignore_errors=True)
        self.tmp = root
        for name in setup.get("mounts", {}):
            existing = os.path.join(root, "mount-" + name)
            if os.path.isdir(existing):
                self.mount_dirs[name] = os.path.realpath(existing)


def _task(name: str) -> Task:
    task = TASKS_BY_NAME.get(name)
    if task is None:
        raise StudyError(f"unknown task {name!r} (see `tasks`)")
    return task


def _paths(directory: str, task: Task) -> tuple[str, str]:
    return os.path.join(directory, f"{task.name}.snapshot"), os.path.join(directory, f"{task.name}.mounts")


def _load_state(directory: str) -> dict[str, Any]:
    path = os.path.join(directory, STATE)
    if not os.path.exists(path):
        return {}
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def _save_state(directory: str, state: dict[str, Any]) -> None:
    path = os.path.join(directory, STATE)
    with open(path + ".tmp", "w", encoding="utf-8") as handle:
        json.dump(state, handle, indent=2, sort_keys=True)
    os.replace(path + ".tmp", path)


def _save_snapshot(path: str, process: Process) -> None:
    with open(path + ".tmp", "wb") as handle:
        handle.write(process.snapshot())
    os.replace(path + ".tmp", path)


def open_process(directory: str, task: Task) -> Process:
    """The task's process as the last command left it, with its ports and mounts attached."""
    snapshot, mounts = _paths(directory, task)
    if not os.path.exists(snapshot):
        raise StudyError(f"task {task.name} is not started in {directory}")
    run = _TaskRun(task, mounts)
    with open(snapshot, "rb") as handle:
        process = Process.restore(handle.read())
    setup = run.fixture.setup
    for name, spec in setup.get("mounts", {}).items():
        process.attach_mount(name, run.make_mount(name, spec))
    if "ports" in setup:
        process.replace_ports(run.make_ports(setup["ports"]))
    return process


def _log(directory: str, record: dict[str, Any]) -> None:
    with open(os.path.join(directory, LOG), "a", encoding="utf-8") as handle:
        handle.write(json.dumps(record, sort_keys=True) + "\n")


def read_log(directory: str) -> list[dict[str, Any]]:
    path = os.path.join(directory, LOG)
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


# ---------------------------------------------------------------------------- commands


def prompt_text() -> str:
    """The system prompt exactly as composed for a task process, then the tools as an API receives them."""
    tools = json.dumps(to_openai_tools(TOOL_SPECS), indent=2, ensure_ascii=False)
    return f"{compose_system_prompt(ADDRESS, None)}\n\n---- tools (JSON) ----\n{tools}"


def _mcp_session(process: Process | None, work: Any) -> Any:
    """Run ``work(client)`` against an in-process MCP server for ``process``."""
    import anyio
    from mcp import Client

    from svit.mcp import build_server

    target = process if process is not None else Process.builder(ADDRESS).build()

    async def session() -> Any:
        async with Client(build_server(lambda: target)) as client:
            return await work(client)

    return anyio.run(session)


def mcp_prompt_text() -> str:
    """The instructions an MCP client receives at initialize, then its ``tools/list``, as JSON."""

    async def work(client: Any) -> str:
        tools = await client.list_tools()
        listed = [{"name": t.name, "description": t.description, "inputSchema": t.input_schema} for t in tools.tools]
        instructions = client.instructions
        return f"{instructions}\n\n---- tools (MCP tools/list) ----\n{json.dumps(listed, indent=2, ensure_ascii=False)}"

    return str(_mcp_session(None, work))


def _mcp_call(process: Process, tool: str, arguments: Any) -> tuple[str, bool]:
    async def work(client: Any) -> tuple[str, bool]:
        result = await client.call_tool(tool, arguments)
        text = "\n".join(getattr(block, "text", "") for block in result.content)
        return text, not result.is_error

    result: tuple[str, bool] = _mcp_session(process, work)
    return result


def start(directory: str, name: str) -> str:
    task = _task(name)
    os.makedirs(directory, exist_ok=True)
    state = _load_state(directory)
    if name in state:
        raise StudyError(f"task {name} is already started in {directory}")
    snapshot, mounts = _paths(directory, task)
    os.makedirs(mounts, exist_ok=True)
    process = _TaskRun(task, mounts).build()
    _save_snapshot(snapshot, process)
    state[name] = {"started": time.time(), "done": None}
    _save_state(directory, state)
    _log(directory, {"event": "start", "task": name, "time": time.time()})
    return task.statement


def call(directory: str, name: str, tool: str, arguments_text: str, *, via: str = "loop") -> tuple[str, bool]:
    """One tool call through run_tool, as the loop makes it; returns (text shown to the model, ok)."""
    task = _task(name)
    state = _load_state(directory)
    if name not in state:
        raise StudyError(f"task {name} is not started in {directory}")
    if state[name]["done"] is not None:
        raise StudyError(f"task {name} is already marked done")
    try:
        arguments: Any = json.loads(arguments_text)
    except ValueError as exc:
        text, ok = f"error: invalid_tool_arguments: invalid tool arguments: arguments are not JSON: {exc.msg}", False
    else:
        process = open_process(directory, task)
        if via == "mcp":
            text, ok = _mcp_call(process, tool, arguments)
        else:
            text, ok = run_tool(process, ToolCall(id=f"{name}-{time.time_ns()}", name=tool, arguments=arguments))
        _save_snapshot(_paths(directory, task)[0], process)
        arguments_text = json.dumps(arguments, sort_keys=True)
    _log(directory, {"event": "call", "task": name, "tool": tool, "arguments": arguments_text, "ok": ok, "result": text, "time": time.time()})
    return text, ok


def done(directory: str, name: str) -> str:
    _task(name)
    state = _load_state(directory)
    if name not in state:
        raise StudyError(f"task {name} is not started in {directory}")
    state[name]["done"] = time.time()
    _save_state(directory, state)
    _log(directory, {"event": "done", "task": name, "time": time.time()})
    return f"task {name} marked done"


def _is_dry_run(record: dict[str, Any]) -> bool:
    try:
        return json.loads(record["arguments"]).get("dry_run") is True
    except (ValueError, AttributeError):
        return False


def _writes_lib(record: dict[str, Any]) -> bool:
    try:
        path = json.loads(record["arguments"]).get("path")
    except (ValueError, AttributeError):
        return False
    return isinstance(path, str) and path.startswith("/lib/")


def score(directory: str) -> dict[str, Any]:
    """Checker verdicts and call counts for every started task, and the totals.

    ``first_try`` follows the exec calls only; ``first_script_try`` also counts writes of
    /lib scripts, since a script refused when it is written is a failed attempt too.
    ``exec_attempts`` counts the exec calls up to and including the first that succeeded
    (a dry run included): the tries it took to get a script right. ``exec_calls`` counts
    every exec, including a dry run and the real run that follows it.
    """
    state = _load_state(directory)
    calls = [r for r in read_log(directory) if r["event"] == "call"]
    rows = []
    for task in TASKS:
        if task.name not in state:
            continue
        mine = [r for r in calls if r["task"] == task.name]
        execs = [r for r in mine if r["tool"] == "exec"]
        first_ok = next((i for i, r in enumerate(execs) if r["ok"]), None)
        scripts = [r for r in mine if r["tool"] == "exec" or (r["tool"] == "write" and _writes_lib(r))]
        try:
            problems = task.check(open_process(directory, task))
        except Exception as exc:
            problems = [f"checker failed: {exc}"]
        solved = not problems
        rows.append({
            "task": task.name,
            "area": task.area,
            "solved": solved,
            "done": state[task.name]["done"] is not None,
            "tool_calls": len(mine),
            "failed_calls": sum(1 for r in mine if not r["ok"]),
            "exec_calls": len(execs),
            "exec_attempts": len(execs) if first_ok is None else first_ok + 1,
            "dry_runs": sum(1 for r in execs if _is_dry_run(r)),
            "first_exec_ok": bool(execs) and execs[0]["ok"],
            "first_try": solved and (not execs or execs[0]["ok"]),
            "script_calls": len(scripts),
            "failed_script_calls": sum(1 for r in scripts if not r["ok"]),
            "first_script_try": solved and (not scripts or scripts[0]["ok"]),
            "problems": problems,
        })
    count = len(rows)
    totals = {
        "tasks": count,
        "not_started": len(TASKS) - count,
        "solved": sum(r["solved"] for r in rows),
        "solved_percent": round(100 * sum(r["solved"] for r in rows) / count, 1) if count else 0.0,
        "first_exec_solved_percent": round(100 * sum(r["first_try"] for r in rows) / count, 1) if count else 0.0,
        "mean_exec_attempts": round(sum(r["exec_attempts"] for r in rows) / count, 2) if count else 0.0,
        "mean_exec_calls": round(sum(r["exec_calls"] for r in rows) / count, 2) if count else 0.0,
        "first_script_solved_percent": round(100 * sum(r["first_script_try"] for r in rows) / count, 1) if count else 0.0,
        "mean_failed_script_calls": round(sum(r["failed_script_calls"] for r in rows) / count, 2) if count else 0.0,
        "max_tool_calls": max((r["tool_calls"] for r in rows), default=0),
        "tasks_over_8_tool_calls": [r["task"] for r in rows if r["tool_calls"] > TOOL_CALL_LIMIT],
    }
    return {"tasks": rows, "totals": totals}


def score_text(result: dict[str, Any]) -> str:
    lines = [f"{'task':28} {'solved':6} {'calls':>5} {'execs':>5} {'tries':>5} {'first':>5} {'failed scripts':>14}"]
    for row in result["tasks"]:
        lines.append(
            f"{row['task']:28} {'yes' if row['solved'] else 'NO':6} {row['tool_calls']:5} {row['exec_calls']:5} "
            f"{row['exec_attempts']:5} {'yes' if row['first_try'] else 'no':>5} {row['failed_script_calls']:14}"
        )
        for problem in row["problems"][:2]:
            lines.append(f"    {problem}")
    t = result["totals"]
    lines.append(
        f"tasks {t['tasks']} (not started {t['not_started']}), solved {t['solved']} ({t['solved_percent']}%), "
        f"solved on the first exec {t['first_exec_solved_percent']}%, mean exec attempts {t['mean_exec_attempts']} "
        f"(exec calls {t['mean_exec_calls']}), "
        f"solved with no failed script call {t['first_script_solved_percent']}%, "
        f"max tool calls {t['max_tool_calls']}, over {TOOL_CALL_LIMIT} tool calls: {len(t['tasks_over_8_tool_calls'])}"
        + (f" ({', '.join(t['tasks_over_8_tool_calls'])})" if t["tasks_over_8_tool_calls"] else "")
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.agent.study", description="Work agent tasks one logged tool call at a time.")
    parser.add_argument("--via", choices=("loop", "mcp"), default="loop", help="the view measured: our loop's tools, or an MCP client's")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("prompt", help="print the system prompt and the tool specs")
    commands.add_parser("tasks", help="list the task names")
    for name in ("start", "done"):
        sub = commands.add_parser(name)
        sub.add_argument("dir")
        sub.add_argument("task")
    sub = commands.add_parser("call", help="run one tool call")
    sub.add_argument("dir")
    sub.add_argument("task")
    sub.add_argument("tool")
    sub.add_argument("arguments", help="the tool arguments as a JSON object")
    sub = commands.add_parser("score", help="run every checker and print the figures")
    sub.add_argument("dir")
    sub.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    try:
        if args.command == "prompt":
            print(mcp_prompt_text() if args.via == "mcp" else prompt_text())
        elif args.command == "tasks":
            print("\n".join(task.name for task in TASKS))
        elif args.command == "start":
            print(start(args.dir, args.task))
        elif args.command == "call":
            text, _ok = call(args.dir, args.task, args.tool, args.arguments, via=args.via)
            print(text)
        elif args.command == "done":
            print(done(args.dir, args.task))
        else:
            result = score(args.dir)
            print(json.dumps(result, indent=2, sort_keys=True) if args.json else score_text(result))
    except StudyError as exc:
        print(f"study: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
