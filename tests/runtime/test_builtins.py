"""The guest surface table: what it installs, what (runtime-builtins) lists, which failures
safe helpers may capture, and behaviours the fixtures cannot express."""

from __future__ import annotations

from typing import Any

import pytest

from svit import Limits, Ports, Process
from svit.activation import WorkingState, located
from svit.builtins import (
    BUILTINS,
    CATEGORIES,
    EXTENSIONS,
    GUEST_FUNCTIONS,
    PortFailed,
    catalogue_names,
    recoverable_text,
    runtime_catalogue,
)
from svit.errors import (
    ExecutionLimitExceeded,
    InvalidPath,
    InvalidValue,
    ResourceLimitExceeded,
    ScriptFailed,
    ScriptNotFound,
    SvitError,
)
from svit.guest import to_node
from svit.lisp.context import enter, leave
from svit.lisp.errors import BudgetExhausted, EvalError, InternalError, LimitError
from svit.lisp.functions import SYSTEM_FUNCTIONS, SystemFunction
from svit.lisp.functions.catalogue import SYSTEM_ENTRIES, system_catalogue
from svit.lisp.interpreter import Interpreter
from svit.lisp.names import global_name
from svit.values import Script

ADDRESS = "svit://local/t/p"

V2_NAMES = (
    "runtime-builtins value-map value-array value-null? value-get jq search discover read stat "
    "write remove exec port-call log-info! send! json-parse json-stringify json-parse-safe map? "
    "map-get map-get-safe map-has? map-set list? list-get string? number? boolean? null? "
    "result-ok result-error result-ok? result-value result-error-message result-map "
    "result-and-then result-or-else value-at value-at-safe value-has-path? dispatch-table "
    "dispatch dispatch-safe safe-call"
).split()


def run(source: str, process: Process | None = None, **limits: int) -> Any:
    p = process or Process.builder(ADDRESS).limits(Limits(**limits)).build()
    return p.exec_inline(source).output


def installed_callables() -> set[str]:
    """Every function name a fresh activation's interpreter can call."""
    process = Process.builder(ADDRESS).build()
    interp = Interpreter()
    previous = enter(interp.context)  # converting the input is charged to a run, as in an activation
    try:
        WorkingState(process).install(interp, to_node(None, process.limits))
    finally:
        leave(previous)
    host = {entry[0] for gname, entry in interp.pending.items()}
    return host | set(SYSTEM_FUNCTIONS)


def test_the_table_is_the_v2_catalogue_in_order() -> None:
    assert [b.name for b in BUILTINS] == V2_NAMES
    assert {b.category for b in BUILTINS} == set(CATEGORIES)
    assert GUEST_FUNCTIONS == {
        gname: entry for gname, entry in GUEST_FUNCTIONS.items() if entry[0] in V2_NAMES
    } | {global_name(b.name): (b.name, b.implementation, b.min_args, b.max_args) for b in EXTENSIONS}
    assert len(GUEST_FUNCTIONS) == 45 + len(EXTENSIONS)


def test_runtime_builtins_lists_every_callable_exactly_once() -> None:
    names = catalogue_names()
    assert len(names) == len(set(names))
    assert set(names) == installed_callables()
    assert names[:45] == V2_NAMES
    assert names[45 : 45 + len(SYSTEM_FUNCTIONS)] == list(SYSTEM_FUNCTIONS)
    assert names[45 + len(SYSTEM_FUNCTIONS) :] == [b.name for b in EXTENSIONS]


def test_every_catalogue_entry_is_complete() -> None:
    for entry in runtime_catalogue():
        assert set(entry) == {"name", "signature", "description", "category"}
        assert all(type(value) is str and value for value in entry.values()), entry
        assert entry["signature"].startswith("(" + entry["name"]), entry
        assert len(entry["description"]) <= 160, entry


def test_the_lisp_table_names_only_registered_functions() -> None:
    assert set(SYSTEM_ENTRIES) <= set(SYSTEM_FUNCTIONS)


def test_a_system_function_without_an_entry_fails_the_catalogue(monkeypatch: pytest.MonkeyPatch) -> None:
    bare = SystemFunction("undocumented-thing", lambda: None, 0, 0)
    monkeypatch.setitem(SYSTEM_FUNCTIONS, "undocumented-thing", bare)
    with pytest.raises(LookupError, match="undocumented-thing"):
        system_catalogue()


def test_inline_fields_win_over_the_table(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = SYSTEM_FUNCTIONS["len"]
    monkeypatch.setitem(SYSTEM_FUNCTIONS, "len", SystemFunction("len", spec.fn, 1, 1, False, "(len thing)", "Inline text.", "lists"))
    entry = next(e for e in system_catalogue() if e["name"] == "len")
    assert entry == {"name": "len", "signature": "(len thing)", "description": "Inline text.", "category": "lists"}


def test_the_catalogue_fits_the_default_limits_and_reaches_the_guest() -> None:
    listed = run("(define (main input) (runtime-builtins))")
    assert [entry["name"] for entry in listed] == catalogue_names()
    assert run('(define (main input) (map-get (list-get (runtime-builtins) 44) "category"))') == "recoverable"


def test_a_guest_function_without_an_implementation_is_refused() -> None:
    from svit.builtins import bind_implementations

    class Missing:
        pass

    with pytest.raises(TypeError, match="no implementation"):
        bind_implementations(Missing)


@pytest.mark.parametrize(
    "failure",
    [
        LimitError("call stack"),
        BudgetExhausted("steps"),
        InternalError(),
        ResourceLimitExceeded("log records"),
        ExecutionLimitExceeded(),
        PortFailed("port /ports/x failed: denied"),
        RecursionError(),
        MemoryError(),
        KeyError("a bug"),
        KeyboardInterrupt(),
    ],
)
def test_hard_failures_are_never_captured(failure: BaseException) -> None:
    assert recoverable_text(failure) is None


@pytest.mark.parametrize(
    ("failure", "text"),
    [
        (ScriptFailed("map key is absent"), "map key is absent"),
        (InvalidPath("/memory/x"), "invalid state path: /memory/x"),
        (InvalidValue("numbers must be finite"), "invalid persistent value: numbers must be finite"),
        (ScriptNotFound("nope"), "script not found: nope"),
        (EvalError("panic: stop"), "panic: stop"),
        (ZeroDivisionError(), "division by zero"),
    ],
)
def test_recoverable_failures_are_captured_with_their_text(failure: BaseException, text: str) -> None:
    assert recoverable_text(failure) == text


def test_captured_text_is_capped() -> None:
    text = recoverable_text(ScriptFailed("x" * 5000))
    assert text is not None and len(text.encode()) <= 1024 + len("…".encode())


def test_a_port_failure_keeps_its_kind_when_located_by_a_nested_exec() -> None:
    fresh = located(PortFailed("port /ports/x failed: denied"), "inner")
    assert type(fresh) is PortFailed and fresh.detail.startswith("/lib/inner.svit-script: ")
    assert type(located(ScriptFailed("boom"), "inner")) is ScriptFailed


def _refusing(input: Any) -> Any:
    """Refuses everything."""
    raise RuntimeError("refused by policy")


def test_a_refused_port_call_through_nested_exec_never_commits() -> None:
    ports = Ports()
    ports.port("guarded", _refusing)
    calls = Process.builder(ADDRESS).memory("n", 0).ports(ports)
    p = calls.library("inner", '(define (main input) (port-call "guarded" input))').build()
    source = '(define (main input) (do (write "/memory/n" 1) (safe-call exec "/lib/inner" 1)))'
    with pytest.raises(ScriptFailed, match="port /ports/guarded failed: RuntimeError"):
        p.exec_inline(source)
    assert p.version == 0 and p.read("/memory/n") == 0


def test_guest_stat_of_a_script_agrees_with_the_host() -> None:
    p = Process.builder(ADDRESS).library("s", "(define (main input) 1)").build()
    source = """(define (main input)
      (do (write "/lib/t" (value-map "source" "(define (main input) 2)" "documentation" "two"))
          (value-map "s" (stat "/lib/s") "t" (stat "/lib/t") "lib" (value-get (stat "/lib") "/facts"))))"""
    seen = p.exec_inline(source).output
    assert seen["s"] == p.stat("/lib/s")
    assert seen["t"] == p.stat("/lib/t")
    assert seen["lib"] == p.stat("/lib")["facts"]
    # read and discover keep showing scripts as records.
    assert run('(define (main input) (discover "/lib/s"))', p) == ["documentation", "source"]


def test_a_cancelled_activation_still_reaches_after_activation() -> None:
    from svit import Cancel

    events = []

    class Gate:
        def before_activation(self, request: Any) -> Any:
            return Cancel("closed for maintenance")

        def after_activation(self, event: Any) -> None:
            events.append(event)

    class Observer:
        def after_activation(self, event: Any) -> None:
            events.append(event)

    p = Process.builder(ADDRESS).library("s", "(define (main input) 1)").hook(Gate()).hook(Observer()).build()
    with pytest.raises(SvitError) as caught:
        p.exec("/lib/s", 1)
    assert caught.value.code == "hook_cancelled"
    assert [(e.status, e.script, e.version_before, e.version) for e in events] == [("failed", "s", 0, None)] * 2
    assert all("closed for maintenance" in e.error for e in events)
    assert p.version == 0


def test_json_parse_is_charged_for_its_input_before_parsing() -> None:
    big = "[" + ",".join(["1"] * 40_000) + "]"
    p = Process.builder(ADDRESS).memory("text", big).limits(Limits(max_steps=1_000)).build()
    with pytest.raises(ExecutionLimitExceeded):
        p.exec_inline('(define (main input) (json-parse (read "/memory/text")))')


def test_safe_call_restores_mount_writes_of_a_failed_call(tmp_path: Any) -> None:
    from svit import Mount

    p = Process.builder(ADDRESS).mount("docs", Mount.writable_folder(tmp_path)).build()
    source = """(define (main input)
      (do (safe-call (lambda () (do (write "/mounts/docs/a.txt" "undone") (panic "no"))))
          (write "/mounts/docs/b.txt" "kept")
          0))"""
    p.exec_inline(source)
    assert not (tmp_path / "a.txt").exists()
    assert (tmp_path / "b.txt").read_text() == "kept"


def test_list_predicate_and_list_get_agree() -> None:
    source = """(define (main input)
      (let ((values (list (list 1 2) () (value-array 3) (json-parse "[4]") (value-map) "ab" 5 (json-parse "null"))))
        (list (list? (list 1 2)) (list? ()) (list? (value-array 3)) (list? (json-parse "[4]"))
              (list? (value-map)) (list? "ab") (list? 5) (list? (json-parse "null"))
              (map-get (list-get (runtime-builtins) 25) "name"))))"""
    assert run(source) == [True, True, True, True, False, False, False, False, "list-get"]
    # Everything list? accepts, list-get accepts (an empty one is out of bounds).
    for value in ("(list 1 2)", "(value-array 3)", '(json-parse "[4]")'):
        assert run(f"(define (main input) (list-get {value} 0))") in (1, 3, 4)
    for value in ("(value-map)", '"ab"', "5", '(json-parse "null")'):
        with pytest.raises(ScriptFailed, match="list-get expects a structured list"):
            run(f"(define (main input) (list-get {value} 0))")


def test_dispatch_tables_accept_host_and_system_functions() -> None:
    source = '(define (main input) (dispatch (dispatch-table "len" len "type" type-of "read" read) "read" "/memory"))'
    assert run(source) == {}


def test_script_records_enter_results_as_records() -> None:
    p = Process.builder(ADDRESS).library("s", Script("(define (main input) 1)", "one")).build()
    assert run('(define (main input) (result-value (result-ok (read "/lib/s"))))', p) == {
        "documentation": "one",
        "source": "(define (main input) 1)",
    }


def test_the_manual_lists_every_guest_function() -> None:
    from pathlib import Path

    manual = (Path(__file__).resolve().parents[2] / "docs" / "lisp.md").read_text(encoding="utf-8")
    section = manual.split("## Guest functions", 1)[1]
    for index, builtin in enumerate(BUILTINS):
        description = builtin.description.replace("|", "\\|")
        assert f"| {index} | `{builtin.signature}` | {builtin.category} | {description} |" in section, builtin.name


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("(to-array ())", []),
        ("(to-array (list 1 \"a\"))", [1, "a"]),
        ("(to-array (read \"/memory/items\"))", [3, 4]),
        ("(to-array (filter (lambda (x) (> x 9)) (read \"/memory/items\")))", []),
    ],
)
def test_to_array_makes_an_array_even_of_an_empty_list(source: str, expected: Any) -> None:
    p = Process.builder("svit://local/t/arr").memory("items", [3, 4]).build()
    a = p.exec_inline(f'(define (main input) (do (write "/memory/out" {source}) (read "/memory/out")))')
    assert a.output == expected and p.read("/memory/out") == expected
    # Without it, an empty Lisp list is written as null.
    assert p.exec_inline('(define (main input) (do (write "/memory/out" ()) (read "/memory/out")))').output is None


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("(to-array 1)", "to-array expects a Lisp list or an array, found integer"),
        ("(to-array (read \"/memory/m\"))", "to-array expects a Lisp list or an array, found a map"),
        ("(to-array (read \"/memory/absent\"))", "to-array expects a Lisp list or an array, found a null"),
        ("(to-array)", "1:23: to-array expects 1 argument, found 0"),  # refused before running
    ],
)
def test_to_array_refuses_what_is_not_a_sequence(source: str, message: str) -> None:
    p = Process.builder("svit://local/t/arr").memory("m", {}).build()
    with pytest.raises(ScriptFailed) as error:
        p.exec_inline(f"(define (main input) {source})")
    assert message in error.value.message


def test_map_remove_returns_a_new_map_without_the_key() -> None:
    p = Process.builder("svit://local/t/rm").memory("m", {"a": 1, "b": {"c": 2}}).build()
    a = p.exec_inline(
        '(define (main input) (let ((m (read "/memory/m")))'
        ' (list (map-remove m "a") (map-remove m "zz") (map-remove (map-remove m "a") "b") m)))'
    )
    assert a.output == [{"b": {"c": 2}}, {"a": 1, "b": {"c": 2}}, {}, {"a": 1, "b": {"c": 2}}]


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ('(map-remove (list 1) "a")', "map-remove expects a map"),
        ('(map-remove (read "/memory/absent") "a")', "map-remove expects a map"),
        ('(map-remove (read "/memory/m") 1)', "map-remove must be text"),
    ],
)
def test_map_remove_errors(source: str, message: str) -> None:
    p = Process.builder("svit://local/t/rm").memory("m", {"a": 1}).build()
    with pytest.raises(ScriptFailed) as error:
        p.exec_inline(f"(define (main input) {source})")
    assert message in error.value.message


def test_map_get_returns_each_kind_of_entry_as_the_guest_sees_it() -> None:
    entries = {"i": 7, "f": 1.5, "s": "text", "b": True, "n": None, "m": {"x": 1}, "a": [1, 2]}
    p = Process.builder(ADDRESS).build()
    source = ('(define (main input) (list (map-get input "i") (map-get input "f") (map-get input "s")'
              ' (map-get input "b") (null? (map-get input "n")) (map-get (map-get input "m") "x")'
              ' (list-get (map-get input "a") 1)))')
    assert p.exec_inline(source, entries).output == [7, 1.5, "text", True, True, 1, 2]
    with pytest.raises(ScriptFailed, match="map key is absent"):
        p.exec_inline('(define (main input) (map-get input "missing"))', entries)
    with pytest.raises(ScriptFailed, match="map-get expects a map"):
        p.exec_inline('(define (main input) (map-get (map-get input "a") "x"))', entries)
    with pytest.raises(ScriptFailed, match="map-get must be text"):
        p.exec_inline('(define (main input) (map-get input 1))', entries)
