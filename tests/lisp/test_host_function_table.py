"""A prepared table of host functions installs exactly what the same entries as a dict do,
and the names a namespace offers follow later definitions; a cached compile charges the
same steps as the compile it reuses."""

from __future__ import annotations

import pytest

from svit.lisp.budget import Budget
from svit.lisp.context import LispLimits
from svit.lisp.errors import BudgetExhausted
from svit.lisp.interpreter import HostFunctionTable, Interpreter

ENTRIES = {
    "g_twice": ("twice", lambda x: 2 * x, 1, 1),
    "g_add": ("add", lambda *xs: sum(xs), 0, None),
}


def test_a_table_installs_the_same_names_as_its_dict() -> None:
    from_dict = Interpreter(LispLimits())
    from_dict.define_functions(ENTRIES)
    from_table = Interpreter(LispLimits())
    from_table.define_functions(HostFunctionTable(ENTRIES))
    assert from_table.installed_names() is from_dict.installed_names()  # interned: one object
    assert dict(from_table.installed_names().functions) == {"twice": (1, 1), "add": (0, None)}
    assert from_table.run("(add (twice 3) 4)") == 10


def test_a_value_defined_over_a_table_function_replaces_it_in_the_names() -> None:
    interp = Interpreter(LispLimits())
    interp.define_functions(HostFunctionTable(ENTRIES))
    interp.define_value("twice", 5)
    names = interp.installed_names()
    assert "twice" not in names.functions and "twice" in names.values
    assert interp.run("(add twice 1)") == 6


def test_a_function_defined_after_a_table_joins_the_names() -> None:
    interp = Interpreter(LispLimits())
    interp.define_functions(HostFunctionTable(ENTRIES))
    interp.define_function("neg", lambda x: -x, 1, 1)
    assert dict(interp.installed_names().functions) == {"twice": (1, 1), "add": (0, None), "neg": (1, 1)}
    assert interp.run("(neg (twice 2))") == -4


def test_a_table_over_earlier_host_functions_keeps_both() -> None:
    interp = Interpreter(LispLimits())
    interp.define_function("neg", lambda x: -x, 1, 1)
    interp.define_value("add", 1)
    interp.define_functions(HostFunctionTable(ENTRIES))
    names = interp.installed_names()
    assert dict(names.functions) == {"neg": (1, 1), "twice": (1, 1), "add": (0, None)}
    assert "add" not in names.values
    assert interp.run("(add (neg 1) (twice 1))") == 1


def test_a_cached_compile_charges_what_the_first_compile_took() -> None:
    source = "; table-cache-steps\n(const k (* 6 7))\n(define (f x) (+ x k))"
    first, second = Budget(1_000_000, 60_000), Budget(1_000_000, 60_000)
    made = Interpreter(LispLimits()).compile(source, budget=first)
    reused = Interpreter(LispLimits()).compile(source, budget=second)
    assert reused is made
    assert first.used == second.used > 0


def test_a_cached_compile_runs_out_of_a_budget_it_does_not_fit_in() -> None:
    source = "; table-cache-small\n(const k (* 6 7))\n(define (f x) (+ x k))"
    first = Budget(1_000_000, 60_000)
    Interpreter(LispLimits()).compile(source, budget=first)
    small = Budget(first.used - 1, 60_000)
    with pytest.raises(BudgetExhausted):
        Interpreter(LispLimits()).compile(source, budget=small)
