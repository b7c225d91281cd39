"""The agent's view: the composed system prompt carries a short, true language guide."""

from __future__ import annotations

import re

import pytest

from svit.lisp.syntax import SPECIAL_FORMS
from svit.loop import compose_system_prompt as exported_compose
from svit.loop.prompt import GUIDE_FUNCTIONS, GUIDE_LIMIT, LANGUAGE_GUIDE, SYSTEM_PROMPT, compose_system_prompt
from svit.loop.svit import SYSTEM_PROMPT as SVIT_SYSTEM_PROMPT
from svit.loop.tools import TOOL_SPECS
from svit.process import Process

# Words that follow "(" in the guide's prose or stand for arguments, not functions.
PLACEHOLDERS = {
    "7/2", "a", "an", "b", "define,", "each", "else", "f", "from", "integer", "key", "main", "null", "o", "open?",
    "orders", "remainder", "results", "see", "test", "texts", "total", "writes,", "x",
}


def test_guide_is_within_its_bound():
    assert len(LANGUAGE_GUIDE) <= GUIDE_LIMIT == 4_000


def test_prompt_keeps_the_operating_facts_and_carries_the_guide():
    prompt = compose_system_prompt("svit://local/t/p", None)
    assert LANGUAGE_GUIDE in prompt and prompt.endswith("\n\nProcess address: svit://local/t/p")
    for fact in ("/memory", "immediate external effects", 'starting with "error:"', "(runtime-builtins)", "send!", "(do", "panic"):
        assert fact in prompt, fact
    assert SVIT_SYSTEM_PROMPT is SYSTEM_PROMPT and exported_compose is compose_system_prompt


def test_instructions_follow_the_address():
    prompt = compose_system_prompt("svit://local/t/p", "Be brief.")
    assert prompt.endswith("Process address: svit://local/t/p\n\n<instructions>\nBe brief.\n</instructions>")
    assert "<instructions>" not in compose_system_prompt("svit://local/t/p", " \n")


def test_every_function_the_guide_names_is_listed():
    for name in GUIDE_FUNCTIONS:
        assert re.search(r"(?<![\w?!/-])" + re.escape(name) + r"(?![\w?!/-])", SYSTEM_PROMPT), name
    called = set(re.findall(r"\((?!\()([^\s()\"]+)", LANGUAGE_GUIDE))
    unlisted = called - set(GUIDE_FUNCTIONS) - SPECIAL_FORMS - PLACEHOLDERS
    assert not unlisted, f"the guide calls functions missing from GUIDE_FUNCTIONS: {sorted(unlisted)}"


def test_tool_descriptions_show_call_syntax():
    by_name = {spec.name: spec.description for spec in TOOL_SPECS}
    assert '{"source": "(define (main input) ...)", "input": {...}}' in by_name["exec"]
    assert '{"path": "/lib/name", "input": ...}' in by_name["exec"]
    assert '"value": {"source": "(define (main input) ...)", "documentation": "..."}' in by_name["write"]
    for name in ("discover", "read", "stat", "remove"):
        assert '{"path": "' in by_name[name], name


def _process() -> Process:
    return Process.builder("svit://local/t/guide").build()


@pytest.mark.parametrize("name", [n for n in GUIDE_FUNCTIONS if n not in SPECIAL_FORMS])
def test_each_function_the_guide_names_is_callable(name):
    """Needs the collection, text and v2 functions: fails for any name not installed."""
    activation = _process().exec_inline(f"(define (main input) (string (type-of {name})))", None)
    assert activation.output == "function"


def test_the_catalogue_lists_every_function_the_guide_names():
    """(runtime-builtins) is where the guide sends the model for everything else."""
    catalogue = _process().exec_inline("(define (main input) (runtime-builtins))", None).output
    names = {entry["name"] for entry in catalogue}
    for entry in catalogue:
        assert set(entry) >= {"name", "signature", "description", "category"}
    missing = [name for name in GUIDE_FUNCTIONS if name not in SPECIAL_FORMS and name not in names]
    assert not missing, f"not in (runtime-builtins): {missing}"
