"""The study harness: tool calls through the command line, logged and scored from the log."""

from __future__ import annotations

import json

from svit.loop.prompt import compose_system_prompt
from svit.loop.tools import TOOL_SPECS

from . import study
from .tasks import ADDRESS, TASKS


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = study.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_prompt_prints_the_composed_prompt_and_the_tool_specs(capsys):
    code, out, _ = run(capsys, "prompt")
    assert code == 0
    system, tools = out.split("\n\n---- tools (JSON) ----\n")
    assert system == compose_system_prompt(ADDRESS, None)
    wire = json.loads(tools)
    assert [t["function"]["name"] for t in wire] == [s.name for s in TOOL_SPECS]
    assert wire[5]["function"]["description"] == TOOL_SPECS[5].description


def test_a_scripted_session_is_logged_and_scored(tmp_path, capsys):
    d = str(tmp_path / "study")
    code, out, _ = run(capsys, "start", d, "counter-bump")
    assert code == 0 and out.strip() == next(t.statement for t in TASKS if t.name == "counter-bump")
    # a wrong first attempt, then a read and a correct exec
    code, out, _ = run(capsys, "call", d, "counter-bump", "exec", json.dumps({"source": "(define (main input) (write \"/memory/visits\" (+ 1 (read \"/memory/visit\"))))"}))
    assert code == 0 and out.startswith("error: script_failed:")
    code, out, _ = run(capsys, "call", d, "counter-bump", "read", '{"path": "/memory/visits"}')
    assert json.loads(out) == {"path": "/memory/visits", "value": 41, "version": 0}
    source = "(define (main input) (let ((n (+ 1 (read \"/memory/visits\")))) (do (write \"/memory/visits\" n) n)))"
    code, out, _ = run(capsys, "call", d, "counter-bump", "exec", json.dumps({"source": source}))
    assert json.loads(out) == {"changed": ["/memory/visits"], "messages": [], "output": 42, "version": 1}
    run(capsys, "done", d, "counter-bump")

    # solved with one exec
    run(capsys, "start", d, "send-alert")
    send = "(define (main input) (do (send! \"svit://local/team/alerts\" (value-map \"text\" \"build finished\" \"status\" \"ok\")) true))"
    code, out, _ = run(capsys, "call", d, "send-alert", "exec", json.dumps({"source": send}))
    assert json.loads(out)["messages"] == [{"body": {"status": "ok", "text": "build finished"}, "id": f"{ADDRESS}:1:0", "to": "svit://local/team/alerts"}]
    run(capsys, "done", d, "send-alert")

    # a library script: written, then run; state persists between commands
    run(capsys, "start", d, "quadruple-via-double")
    value = {"source": "(define (main input) (exec \"/lib/double\" (exec \"/lib/double\" input)))", "documentation": "x4"}
    code, out, _ = run(capsys, "call", d, "quadruple-via-double", "write", json.dumps({"path": "/lib/quadruple", "value": value}))
    assert json.loads(out)["changed"] == ["/lib/quadruple"]
    code, out, _ = run(capsys, "call", d, "quadruple-via-double", "exec", '{"path": "/lib/quadruple", "input": 5, "dry_run": true}')
    assert json.loads(out)["output"] == 20 and json.loads(out)["dry_run"] is True
    code, out, _ = run(capsys, "call", d, "quadruple-via-double", "exec", '{"path": "/lib/quadruple", "input": 5}')
    assert json.loads(out)["output"] == 20

    # not solved: started, one call that changes nothing useful
    run(capsys, "start", d, "open-orders-total")
    code, out, _ = run(capsys, "call", d, "open-orders-total", "exec", "not json")
    assert out.startswith("error: invalid_tool_arguments:")

    code, out, _ = run(capsys, "score", d, "--json")
    result = json.loads(out)
    rows = {r["task"]: r for r in result["tasks"]}
    assert rows["counter-bump"] | {"problems": None} == {
        "task": "counter-bump", "area": "state", "solved": True, "done": True, "tool_calls": 3, "failed_calls": 1,
        "exec_calls": 2, "exec_attempts": 2, "dry_runs": 0, "first_exec_ok": False, "first_try": False, "problems": None,
        "script_calls": 2, "failed_script_calls": 1, "first_script_try": False,
    }
    assert rows["send-alert"]["solved"] and rows["send-alert"]["first_try"] and rows["send-alert"]["tool_calls"] == 1
    assert rows["quadruple-via-double"]["solved"] and rows["quadruple-via-double"]["first_try"] and not rows["quadruple-via-double"]["done"]
    assert (rows["quadruple-via-double"]["exec_calls"], rows["quadruple-via-double"]["exec_attempts"], rows["quadruple-via-double"]["dry_runs"]) == (2, 1, 1)
    assert not rows["open-orders-total"]["solved"] and rows["open-orders-total"]["problems"]
    assert result["totals"] == {
        "tasks": 4, "not_started": len(TASKS) - 4, "solved": 3, "solved_percent": 75.0,
        "first_exec_solved_percent": 50.0, "mean_exec_attempts": 1.25, "mean_exec_calls": 1.5, "max_tool_calls": 3, "tasks_over_8_tool_calls": [],
        "first_script_solved_percent": 50.0, "mean_failed_script_calls": 0.5,
    }
    log = study.read_log(d)
    assert [r["tool"] for r in log if r["event"] == "call"] == ["exec", "read", "exec", "exec", "write", "exec", "exec", "exec"]
    code, out, _ = run(capsys, "score", d)
    assert "solved 3 (75.0%)" in out and "mean exec attempts 1.25 (exec calls 1.5)" in out


def test_misuse_is_a_harness_error_not_a_tool_result(tmp_path, capsys):
    d = str(tmp_path / "study")
    code, _, err = run(capsys, "call", d, "counter-bump", "read", '{"path": "/memory"}')
    assert code == 2 and "not started" in err
    code, _, err = run(capsys, "start", d, "no-such-task")
    assert code == 2 and "unknown task" in err
    run(capsys, "start", d, "counter-bump")
    code, _, err = run(capsys, "start", d, "counter-bump")
    assert code == 2 and "already started" in err
    run(capsys, "done", d, "counter-bump")
    code, _, err = run(capsys, "call", d, "counter-bump", "read", '{"path": "/memory"}')
    assert code == 2 and "already marked done" in err


def test_ports_are_rebuilt_for_every_call(tmp_path, capsys):
    d = str(tmp_path / "study")
    run(capsys, "start", d, "weather-port")
    source = "(define (main input) (do (write \"/memory/temp\" (value-get (port-call \"weather\" (value-map \"city\" \"Oslo\")) \"/temp_c\")) true))"
    _, out, _ = run(capsys, "call", d, "weather-port", "exec", json.dumps({"source": source}))
    assert json.loads(out)["version"] == 1
    _, out, _ = run(capsys, "call", d, "weather-port", "read", '{"path": "/memory/temp"}')
    assert json.loads(out)["value"] == 7
    assert json.loads(run(capsys, "score", d, "--json")[1])["totals"]["solved"] == 1


def test_a_refused_library_write_counts_as_a_failed_script_call(tmp_path, capsys):
    d = str(tmp_path / "study")
    run(capsys, "start", d, "quadruple-via-double")
    bad = {"path": "/lib/quadruple", "value": {"source": "(define (main input) (exec \"/lib/double\" input)", "documentation": ""}}
    _, out, _ = run(capsys, "call", d, "quadruple-via-double", "write", json.dumps(bad))
    assert out.startswith("error: script_failed:")
    good = {"path": "/lib/quadruple", "value": {"source": "(define (main input) (exec \"/lib/double\" (exec \"/lib/double\" input)))"}}
    run(capsys, "call", d, "quadruple-via-double", "write", json.dumps(good))
    run(capsys, "call", d, "quadruple-via-double", "write", '{"path": "/memory/note", "value": 1}')
    row = json.loads(run(capsys, "score", d, "--json")[1])["tasks"][0]
    assert row["solved"] and row["first_try"] and not row["first_script_try"]
    assert (row["tool_calls"], row["exec_calls"], row["script_calls"], row["failed_script_calls"]) == (3, 0, 2, 1)


def test_the_mcp_view_is_the_servers_instructions_and_tools_list(capsys):
    code, out, _ = run(capsys, "--via", "mcp", "prompt")
    assert code == 0
    instructions, tools = out.split("\n\n---- tools (MCP tools/list) ----\n")
    assert instructions == compose_system_prompt(ADDRESS, None)
    listed = json.loads(tools)
    assert [t["name"] for t in listed] == [s.name for s in TOOL_SPECS]
    assert [t["inputSchema"] for t in listed] == [s.parameters for s in TOOL_SPECS]


def test_calls_via_mcp_are_logged_and_scored_like_loop_calls(tmp_path, capsys):
    d = str(tmp_path / "study")
    run(capsys, "--via", "mcp", "start", d, "counter-bump")
    code, out, _ = run(capsys, "--via", "mcp", "call", d, "counter-bump", "exec", json.dumps({"source": "(define (main input) (car 1))"}))
    assert code == 0 and out.startswith("error: script_failed:")
    source = "(define (main input) (let ((n (+ 1 (read \"/memory/visits\")))) (do (write \"/memory/visits\" n) n)))"
    code, out, _ = run(capsys, "--via", "mcp", "call", d, "counter-bump", "exec", json.dumps({"source": source}))
    assert json.loads(out) == {"changed": ["/memory/visits"], "messages": [], "output": 42, "version": 1}
    run(capsys, "--via", "mcp", "done", d, "counter-bump")
    calls = [r for r in study.read_log(d) if r["event"] == "call"]
    assert [c["ok"] for c in calls] == [False, True]
    row = next(r for r in study.score(d)["tasks"] if r["task"] == "counter-bump")
    assert row["solved"] is True and row["failed_calls"] == 1
