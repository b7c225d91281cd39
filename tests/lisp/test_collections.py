"""The collection extensions (map, filter, fold, sort, range, keys, count, ...).

Each function has results and errors on Lisp lists and on host values (a
``SvitValue`` array, map and null bound as globals), plus the limits: work is
charged before it is done, so an oversized ``range`` or ``map`` stops with the
limit error before the result exists.
"""

from __future__ import annotations

import pytest

from svit.guest import plain_to_lisp
from svit.lisp.context import LispLimits
from svit.lisp.errors import BudgetExhausted, EvalError, LimitError
from svit.lisp.functions import SYSTEM_FUNCTIONS
from svit.lisp.interpreter import evaluate
from svit.lisp.render import debug_repr

# Values are rendered (and system functions called) outside a run, under a host context.
pytestmark = pytest.mark.usefixtures("host_context")

VALUES = {
    "arr": [3, 1, 2],
    "words": ["pear", "apple", "fig"],
    "m": {"b": 2, "a": 1, "c": [1, 2]},
    "empty-arr": [],
    "empty-map": {},
    "nothing": None,
    "records": [{"name": "b", "age": 30}, {"name": "a", "age": 25}, {"name": "c", "age": 30}],
    "nested": [[1, 2], None, {"k": "v"}],
}


def run(source: str, limits: LispLimits | None = None) -> object:
    bound = {name.replace("-", "_"): plain_to_lisp(value) for name, value in VALUES.items()}
    # evaluate binds keyword names as given; the sources use the underscore spellings
    return evaluate(source, limits or LispLimits(), **bound)


POSITIVE = [
    # map
    ("map", "(map (lambda (x) (* x 10)) (list 1 2 3))", "(10 20 30)"),
    ("map", "(map (lambda (x) (+ x 1)) arr)", "(4 2 3)"),
    ("map", "(map (lambda (x) x) ())", "()"),
    ("map", "(map (lambda (x) x) empty_arr)", "()"),
    ("map", "(map type-of nested)", "(svit-value svit-value svit-value)"),
    ("map", '(map count (list arr m ""))', "(3 3 0)"),
    ("map", "(map - (list 1 2))", "(-1 -2)"),
    # filter
    ("filter", "(filter (lambda (x) (> x 1)) arr)", "(3 2)"),
    ("filter", "(filter (lambda (x) false) (list 1 2))", "()"),
    ("filter", "(filter (lambda (v) (= (count v) 3)) (list arr m (list 1)))", "(<svit> <svit>)"),
    # fold
    ("fold", "(fold + 0 arr)", "6"),
    ("fold", "(fold (lambda (acc x) (concat acc x)) \"\" (list \"a\" \"b\" \"c\"))", '"abc"'),
    ("fold", "(fold (lambda (acc x) (list acc x)) 0 (list 1 2))", "((0 1) 2)"),
    ("fold", "(fold + 7 ())", "7"),
    # find / any? / every?
    ("find", "(find (lambda (x) (> x 1)) arr)", "3"),
    ("find", "(find (lambda (x) (> x 5)) arr)", "()"),
    ("any?", "(any? (lambda (x) (= x 2)) arr)", "true"),
    ("any?", "(any? (lambda (x) (= x 9)) arr)", "false"),
    ("any?", "(any? (lambda (x) (panic \"never\")) ())", "false"),
    ("any?", "(any? (lambda (x) (if (= x 1) true (panic \"stopped late\"))) (list 1 2))", "true"),
    ("every?", "(every? (lambda (x) (> x 0)) arr)", "true"),
    ("every?", "(every? (lambda (x) (> x 1)) arr)", "false"),
    ("every?", "(every? (lambda (x) false) empty_arr)", "true"),
    # sum
    ("sum", "(sum arr)", "6"),
    ("sum", "(sum (list 1 2.5))", "3.5"),
    ("sum", "(sum ())", "0"),
    ("sum", "(sum (list 1/2 1/3))", "5/6"),
    # sort
    ("sort", "(sort arr)", "(1 2 3)"),
    ("sort", "(sort words)", '("apple" "fig" "pear")'),
    ("sort", "(sort (list 2 1.5 1/2 -3))", "(-3 1/2 1.5 2)"),
    ("sort", '(sort (list "b" "B" "a" "é"))', '("B" "a" "b" "é")'),
    ("sort", "(sort ())", "()"),
    ("sort", "(sort (list 1 1.0))", "(1 1.0)"),
    # sort-by
    ("sort-by", "(sort-by count (list (list 1 2) (list 1) (list 3 4)))", "((1) (1 2) (3 4))"),
    ("sort-by", "(sort-by (lambda (s) (count s)) words)", '("fig" "pear" "apple")'),
    ("sort-by", "(sort-by (lambda (x) (- x)) (list 1 3 2))", "(3 2 1)"),
    ("sort-by", "(sort-by (lambda (x) (panic \"unused\")) ())", "()"),
    # range
    ("range", "(range 4)", "(0 1 2 3)"),
    ("range", "(range 2 5)", "(2 3 4)"),
    ("range", "(range 0 10 3)", "(0 3 6 9)"),
    ("range", "(range 5 0 -2)", "(5 3 1)"),
    ("range", "(range 0)", "()"),
    ("range", "(range 5 2)", "()"),
    # keys / values / entries
    ("keys", "(keys m)", '("a" "b" "c")'),
    ("keys", "(keys empty_map)", "()"),
    ("values", "(values m)", "(1 2 <svit>)"),
    ("values", "(values empty_map)", "()"),
    ("entries", "(entries m)", '(("a" 1) ("b" 2) ("c" <svit>))'),
    ("entries", "(map (lambda (e) (first e)) (entries m))", '("a" "b" "c")'),
    ("entries", "(entries empty_map)", "()"),
    # count
    ("count", "(count arr)", "3"),
    ("count", "(count m)", "3"),
    ("count", "(count empty_arr)", "0"),
    ("count", "(count (list 1 2))", "2"),
    ("count", "(count ())", "0"),
    ("count", '(count "héllo")', "5"),
    ("count", '(list (count "é") (len "é"))', "(1 2)"),
    # empty?
    ("empty?", "(empty? ())", "true"),
    ("empty?", "(empty? (list 1))", "false"),
    ("empty?", '(empty? "")', "true"),
    ("empty?", '(empty? " ")', "false"),
    ("empty?", "(empty? empty_arr)", "true"),
    ("empty?", "(empty? arr)", "false"),
    ("empty?", "(empty? empty_map)", "true"),
    ("empty?", "(empty? m)", "false"),
    ("empty?", "(empty? (filter (lambda (x) (> x 9)) arr))", "true"),
    # to-list
    ("to-list", "(to-list arr)", "(3 1 2)"),
    ("to-list", "(first (to-list nested))", "<svit>"),
    ("to-list", "(to-list empty_arr)", "()"),
    ("to-list", "(to-list (list 1))", "(1)"),
    ("to-list", "(apply + (to-list arr))", "6"),
]


NEGATIVE = [
    ("map", "(map 1 (list 1))", "map: expected a function; found integer: 1"),
    ("map", "(map (lambda (x) x) m)", "map: expected a list or array; found svit-value map; for a map use (entries m), (keys m) or (values m)"),
    ("map", "(map (lambda (x) x) nothing)", "test for null with (value-null? v)"),
    ("map", '(map (lambda (x) x) "abc")', "for text use (chars s) or (split s sep)"),
    ("map", "(map (lambda (x) (panic \"boom\")) (list 1))", "panic: boom"),
    ("map", "(map (lambda (x y) x) (list 1))", "called with the wrong number of arguments"),
    ("filter", "(filter (lambda (x) 1) (list 1))", "filter: the predicate must return true or false; it returned integer: 1"),
    ("filter", "(filter (lambda (x) true) 5)", "filter: expected a list or array; found integer: 5"),
    ("fold", "(fold + 0 m)", "fold: expected a list or array"),
    ("fold", '(fold + 0 (list "a"))', "type error"),
    ("find", "(find (lambda (x) ()) (list 1))", "find: the predicate must return true or false; it returned unit"),
    ("find", "(find 3 arr)", "find: expected a function"),
    ("any?", "(any? (lambda (x) x) (list 1))", "any?: the predicate must return true or false"),
    ("any?", "(any? (lambda (x) true) m)", "any?: expected a list or array"),
    ("every?", "(every? (lambda (x) \"yes\") (list 1))", "every?: the predicate must return true or false; it returned string"),
    ("every?", "(every? (lambda (x) true) nothing)", "every?: expected a list or array"),
    ("sum", '(sum (list 1 "2"))', 'sum: expected numbers; found string: "2"'),
    ("sum", "(sum records)", "sum: expected numbers; found svit-value map"),
    ("sum", "(sum m)", "sum: expected a list or array"),
    ("sort", '(sort (list 1 "a"))', "sort: cannot order integer and string together; the elements must be all numbers or all texts"),
    ("sort", "(sort records)", "sort: can only order numbers or texts; the elements include svit-value map; order records with (sort-by"),
    ("sort", "(sort (list true false))", "sort: can only order numbers or texts"),
    ("sort", "(sort (list 1.0 (nan)))", "sort: cannot order NaN"),
    ("sort", "(sort m)", "sort: expected a list or array"),
    ("sort-by", "(sort-by (lambda (r) r) records)", "sort-by: can only order numbers or texts; the keys include svit-value map"),
    ("sort-by", '(sort-by (lambda (x) (if (= x 1) "a" 1)) (list 1 2))', "sort-by: cannot order string and integer together; the keys must be all numbers or all texts"),
    ("sort-by", "(sort-by (lambda (x) (panic \"key failed\")) (list 1))", "panic: key failed"),
    ("range", "(range 1.5)", "range: expected integers; found float: 1.5"),
    ("range", "(range 0 10 0)", "range: step must not be 0"),
    ("range", '(range "3")', "range: expected integers"),
    ("keys", "(keys arr)", "keys: expected a map; found svit-value array; for an array use (to-list v) or (range (count v))"),
    ("keys", "(keys (list 1 2))", "keys: expected a map; found list"),
    ("values", "(values nothing)", "values: expected a map; found svit-value: null; test for null with (value-null? v)"),
    ("values", "(values 3)", "values: expected a map; found integer: 3"),
    ("entries", "(entries arr)", "entries: expected a map"),
    ("entries", '(entries "ab")', "entries: expected a map; found string"),
    ("count", "(count nothing)", "count: expected a list, array, map or text; found svit-value: null; test for null with (value-null? v)"),
    ("count", "(count 5)", "count: expected a list, array, map or text; found integer: 5"),
    ("empty?", "(empty? nothing)", "empty?: expected a list, array, map or text; found svit-value: null; test for null with (null? v)"),
    ("empty?", "(empty? 0)", "empty?: expected a list, array, map or text; found integer: 0"),
    ("to-list", "(to-list m)", "to-list: expected a list or array; found svit-value map; for a map use (entries m)"),
    ("to-list", "(to-list 3)", "to-list: expected a list or array; found integer: 3"),
]

EXTENSIONS = {name for name, spec in SYSTEM_FUNCTIONS.items() if spec.category == "collections"}


def test_every_collection_function_has_positive_and_negative_cases() -> None:
    assert EXTENSIONS == {"map", "filter", "fold", "find", "any?", "every?", "sum", "sort", "sort-by", "range", "keys", "values", "entries", "count", "empty?", "to-list"}
    assert {c[0] for c in POSITIVE} == EXTENSIONS
    assert {c[0] for c in NEGATIVE} == EXTENSIONS


def _shape(value: object) -> str:
    """The debug rendering with every host value written ``<svit>``."""
    from svit.lisp.values import Foreign

    if isinstance(value, Foreign):
        return "<svit>"
    if type(value) is tuple:
        return "(" + " ".join(_shape(v) for v in value) + ")"
    return debug_repr(value)


@pytest.mark.parametrize("name,source,expected", POSITIVE, ids=[f"{c[0]}-{i}" for i, c in enumerate(POSITIVE)])
def test_positive(name: str, source: str, expected: str) -> None:
    assert _shape(run(source)) == expected


@pytest.mark.parametrize("name,source,message", NEGATIVE, ids=[f"{c[0]}-{i}" for i, c in enumerate(NEGATIVE)])
def test_negative(name: str, source: str, message: str) -> None:
    with pytest.raises(EvalError) as caught:
        run(source)
    assert message in caught.value.message


# --- registration and semantics -----------------------------------------------------


def test_every_extension_has_catalogue_fields_and_a_free_ketos_name() -> None:
    ketos = set(KETOS_SYSTEM_FUNCTIONS)
    for spec in SYSTEM_FUNCTIONS.values():
        if not spec.extension:
            continue
        assert spec.name not in ketos
        assert spec.signature and spec.signature.startswith(f"({spec.name}")
        assert spec.description and "\n" not in spec.description
        assert spec.category in ("collections", "text", "conversion")


#: Ketos 0.12's system function names (src/ketos/name.rs), which extensions must not reuse.
KETOS_SYSTEM_FUNCTIONS = (
    "+ - * ^ / // rem << >> bit& bit| bit^ bit! = /= eq ne < > <= >= zero max min append elt concat "
    "join len slice first second last init tail list reverse abs ceil floor round trunc int float inf "
    "nan denom fract numer rat recip chars string path bytes id is is-instance null type-of . .= new "
    "format print println eprint eprintln panic xor not"
).split()


def test_the_results_are_lisp_lists_so_list_functions_work_on_them() -> None:
    assert run("(first (map (lambda (x) x) arr))") == 3
    assert run("(len (filter (lambda (x) true) arr))") == 3
    assert run("(null (filter (lambda (x) false) arr))") is True


def test_sort_is_stable() -> None:
    source = "(map (lambda (p) (second p)) (sort-by (lambda (p) (first p)) (list (list 1 \"x\") (list 0 \"y\") (list 1 \"z\") (list 0 \"w\"))))"
    assert run(source) == ("y", "w", "x", "z")


def test_len_keeps_its_ketos_meaning_and_refuses_host_values() -> None:
    assert run('(len "é")') == 2
    with pytest.raises(EvalError, match="expected sequence; found svit-value"):
        run("(len arr)")


def test_a_script_may_define_its_own_function_under_an_extension_name() -> None:
    assert run("(define (sum xs) (if (null xs) 0 (+ (first xs) (sum (tail xs))))) (sum (list 1 2 3))") == 6
    assert run("(define (count n) (if (= n 0) \"done\" (count (- n 1)))) (count 10)") == "done"
    assert run("(define (f keys) (len keys)) (f (list 1 2))") == 2
    assert run("(let ((values (list 1 2))) (len values))") == 2
    # the definition wins in its own script only; elsewhere the extension is there
    assert run("(sum (list 1 2 3))") == 6


def test_a_function_passed_as_an_argument_may_be_an_extension() -> None:
    assert run("(map count (list (list 1 2) \"abc\" ()))") == (2, 3, 0)
    assert run("(map to-string (list 1 2.5 true))") == ("1", "2.5", "true")


def test_errors_from_the_guest_function_propagate_unchanged() -> None:
    with pytest.raises(LimitError) as caught:
        run("(define (deep n) (if (= n 0) 0 (+ 1 (deep (- n 1))))) (map deep (list 1000))")
    assert caught.value.limit == "call stack"


def test_nested_calls_through_map_count_against_the_call_stack() -> None:
    # each level is a guest call made by map: the bound holds through the extension
    source = "(define (nest n) (if (= n 0) 0 (first (map nest (list (- n 1)))))) (nest {})"
    assert run(source.format(50)) == 0
    with pytest.raises(LimitError) as caught:
        run(source.format(200))
    assert caught.value.limit == "call stack"


# --- limits: charged before the work -------------------------------------------------------


def test_a_huge_range_is_refused_by_guest_memory_before_it_is_built() -> None:
    limits = LispLimits(max_guest_memory=100_000)
    with pytest.raises(LimitError) as caught:
        run("(range 1000000000000)", limits)
    assert caught.value.limit == "guest memory"
    assert len(run("(range 1000)", limits)) == 1000


def test_a_range_over_the_step_budget_stops_before_it_is_built() -> None:
    with pytest.raises(BudgetExhausted):
        run("(range 200000)", LispLimits(max_steps=100_000))


def test_map_over_a_list_larger_than_the_step_budget_stops_before_calling() -> None:
    # the whole map is charged first, so the lambda never runs (it would panic)
    with pytest.raises(BudgetExhausted):
        run("(map (lambda (x) (panic \"called\")) (range 60000))", LispLimits(max_steps=100_000))


def test_map_result_is_bounded_by_guest_memory() -> None:
    with pytest.raises(LimitError) as caught:
        run("(map (lambda (x) x) (range 5000))", LispLimits(max_guest_memory=20_000))
    assert caught.value.limit == "guest memory"


def test_sort_is_charged_n_log_n() -> None:
    limits = LispLimits(max_steps=400_000)
    from svit.lisp.interpreter import Interpreter

    def steps(source: str) -> int:
        interp = Interpreter(limits)
        interp.run(source)
        return interp.steps_used()

    base = steps("(range 10000)")
    sorted_ = steps("(sort (range 10000))")
    assert sorted_ - base >= 10000 * 13


def test_filter_and_fold_charge_per_element() -> None:
    from svit.lisp.interpreter import Interpreter

    def steps(source: str) -> int:
        interp = Interpreter(LispLimits())
        interp.run(source)
        return interp.steps_used()

    base = steps("(range 5000)")
    assert steps("(fold + 0 (range 5000))") - base >= 5000
    assert steps("(count (range 5000))") - base < 10


def test_host_array_conversion_is_charged_to_guest_memory() -> None:
    big = plain_to_lisp(list(range(5000)))
    with pytest.raises(LimitError) as caught:
        evaluate("(to-list big)", LispLimits(max_guest_memory=20_000), big=big)
    assert caught.value.limit == "guest memory"
    assert len(evaluate("(to-list big)", LispLimits(), big=big)) == 5000


def test_nested_host_values_come_out_as_host_values() -> None:
    assert run("(count (first (to-list nested)))") == 2
    with pytest.raises(EvalError, match="expected sequence; found svit-value"):
        run("(first (first (to-list nested)))")
