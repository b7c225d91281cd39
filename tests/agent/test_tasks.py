"""The agent task suite: every checker fails on its seed, every reference solution passes.

The reference solutions use the collection, text and v2 functions the guide teaches, so
``test_reference_solution_solves_the_task`` needs the whole guest surface installed.
"""

from __future__ import annotations

import re

import pytest

from svit.loop.messages import ToolCall
from svit.loop.prompt import GUIDE_FUNCTIONS
from svit.loop.tools import run_tool

from .tasks import TASKS, build

AREAS = {"state", "records", "text", "notes", "messages", "nested-exec", "rollback", "loops", "json", "ports"}
IDS = [task.name for task in TASKS]


def test_the_suite_covers_ordinary_agent_work():
    assert len(TASKS) >= 32
    assert len(set(IDS)) == len(IDS)
    assert {task.area for task in TASKS} == AREAS
    reusable = [task for task in TASKS if "/lib/" in task.statement and "reusable" in task.statement]
    assert len(reusable) * 2 > len(TASKS), "most tasks should ask for a reusable script checked on hidden inputs"


@pytest.mark.parametrize("task", TASKS, ids=IDS)
def test_statement_gives_no_lisp(task):
    for name in GUIDE_FUNCTIONS:
        assert not re.search(r"\(" + re.escape(name) + r"[\s)]", task.statement), name
    assert "lambda" not in task.statement and "(define" not in task.statement


@pytest.mark.parametrize("task", TASKS, ids=IDS)
def test_checker_fails_on_the_seeded_process(task):
    process, run = build(task)
    try:
        before = process.snapshot()
        problems = task.check(process)
        assert problems and all(isinstance(p, str) and p for p in problems)
        assert process.snapshot() == before, "a checker must not change the process"
    finally:
        run.close()


@pytest.mark.parametrize("task", TASKS, ids=IDS)
def test_reference_solution_solves_the_task(task):
    """Applies the solution through run_tool, as the loop would; needs the full guest surface."""
    process, run = build(task)
    try:
        for index, (tool, arguments) in enumerate(task.solution):
            text, ok = run_tool(process, ToolCall(id=f"call-{index}", name=tool, arguments=arguments))
            assert ok, f"{tool} failed: {text}"
        assert task.check(process) == []
    finally:
        run.close()
