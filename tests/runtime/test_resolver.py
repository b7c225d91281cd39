"""The resolver where scripts enter a process: every way in refuses a mistake before it runs."""

from __future__ import annotations

import pytest

from svit import Process
from svit.activation import GUEST_FUNCTIONS, compile_check
from svit.errors import ScriptFailed
from svit.limits import Limits
from svit.lisp.interpreter import Interpreter
from svit.lisp.suggestions import ALTERNATIVES
from svit.lisp.syntax import SPECIAL_FORMS
from svit.loop.messages import ToolCall
from svit.loop.tools import run_tool

ADDRESS = "svit://local/t/p"
GUEST_NAMES = {name for name, *_ in GUEST_FUNCTIONS.values()}
TARGETS = sorted({t for targets, _ in ALTERNATIVES.values() for t in targets if t not in SPECIAL_FORMS})

# Only an untaken branch is wrong: the script would succeed if it ran.
UNBOUND = '(define (main input) (if (= input 0) (do (write "/memory/x" 1) 1) (puts input)))'
UNBOUND_TEXT = "1:68: unbound name `puts`: to print, use (log-info!"
ARITY = '(define (main input) (if (= input 0) (do (write "/memory/x" 1) 1) (write "/memory/y")))'
ARITY_TEXT = "1:68: write expects 2 arguments, found 1"


def process() -> Process:
    return Process.builder(ADDRESS).build()


@pytest.mark.parametrize("name", TARGETS)
def test_every_function_the_table_points_to_is_callable_in_an_activation(name: str) -> None:
    p = process()
    activation = p.exec_inline(f"(define (main input) (= (type-of {name}) 'function))", None)
    assert activation.output is True


@pytest.mark.parametrize("name", sorted(ALTERNATIVES))
def test_no_table_entry_is_a_guest_function(name: str) -> None:
    assert name not in GUEST_NAMES


def test_compile_check_resolves_against_exactly_what_an_activation_installs(monkeypatch) -> None:
    seen = []
    original = Interpreter.compile

    def recording(self, source, *budget):
        seen.append(self.installed_names())
        return original(self, source, *budget)

    monkeypatch.setattr(Interpreter, "compile", recording)
    compile_check("<inline>", "(define (main input) input)", Limits())
    process().exec_inline("(define (main input) input)", 1)
    assert len(seen) == 3 and seen[0] is seen[1] is seen[2]
    names = seen[0]
    assert {"input", "*svit-version*"} <= names.values
    assert {name: arity for name, arity in names.functions.items()} == {
        name: (lo, hi) for name, _fn, lo, hi in GUEST_FUNCTIONS.values()
    }


@pytest.mark.parametrize("source,text", [(UNBOUND, UNBOUND_TEXT), (ARITY, ARITY_TEXT)])
def test_inline_exec_refuses_before_any_write(source: str, text: str) -> None:
    p = process()
    with pytest.raises(ScriptFailed) as caught:
        p.exec_inline(source, 0)
    assert caught.value.code == "script_failed"
    assert f"/activation/inline.svit-script:{text}" in caught.value.message
    assert p.version == 0 and p.read("/memory") == {}


@pytest.mark.parametrize("source,text", [(UNBOUND, UNBOUND_TEXT), (ARITY, ARITY_TEXT)])
def test_the_model_exec_tool_reports_position_and_suggestion(source: str, text: str) -> None:
    p = process()
    result, succeeded = run_tool(p, ToolCall("c1", "exec", {"source": source, "input": 0}))
    assert not succeeded and result.startswith("error: script_failed:") and text in result
    assert p.version == 0


@pytest.mark.parametrize("source,text", [(UNBOUND, UNBOUND_TEXT), (ARITY, ARITY_TEXT)])
def test_builder_library_refuses_at_build_time(source: str, text: str) -> None:
    with pytest.raises(ScriptFailed) as caught:
        Process.builder(ADDRESS).library("s", source).build()
    assert f"/lib/s.svit-script:{text}" in caught.value.message


@pytest.mark.parametrize("source,text", [(UNBOUND, UNBOUND_TEXT), (ARITY, ARITY_TEXT)])
def test_host_library_write_refuses_and_exec_finds_nothing(source: str, text: str) -> None:
    p = process()
    with pytest.raises(ScriptFailed) as caught:
        p.write("/lib/s", {"source": source})
    assert f"/lib/s.svit-script:{text}" in caught.value.message
    assert p.version == 0
    with pytest.raises(Exception) as missing:
        p.exec("/lib/s", 0)
    assert missing.value.code == "script_not_found"


@pytest.mark.parametrize("source,text", [(UNBOUND, UNBOUND_TEXT), (ARITY, ARITY_TEXT)])
def test_a_guest_library_write_is_refused_with_the_whole_activation(source: str, text: str) -> None:
    p = process()
    script = '(define (main input) (do (write "/memory/before" 1) (write "/lib/bad" (value-map "source" (value-get input "/source")))))'
    with pytest.raises(ScriptFailed) as caught:
        p.exec_inline(script, {"source": source})
    assert f"/lib/bad.svit-script:{text}" in caught.value.message
    assert p.version == 0 and p.read("/memory") == {} and "bad" not in p.read("/lib")


@pytest.mark.parametrize("source,text", [(UNBOUND, UNBOUND_TEXT), (ARITY, ARITY_TEXT)])
def test_a_nested_exec_of_a_staged_script_is_refused(source: str, text: str) -> None:
    p = process()
    script = (
        '(define (main input) (do (write "/memory/before" 1)'
        ' (write "/lib/staged" (value-map "source" (value-get input "/source")))'
        ' (exec "/lib/staged" 1)))'
    )
    with pytest.raises(ScriptFailed) as caught:
        p.exec_inline(script, {"source": source})
    assert f"/lib/staged.svit-script:{text}" in caught.value.message
    assert p.version == 0 and p.read("/memory") == {}


def test_svit_version_and_input_are_bound_at_write_time() -> None:
    p = process()
    p.write("/lib/s", {"source": "(define (main input) (concat *svit-version* \"\"))"})
    assert p.exec("/lib/s", None).output == "Svit Lisp 2"
