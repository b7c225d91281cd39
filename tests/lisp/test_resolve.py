"""The resolver: mistakes refused before anything runs, with a position and a fix."""

from __future__ import annotations

import pytest

from svit.lisp.context import LispLimits
from svit.lisp.errors import CompileError, EvalError, LispError
from svit.lisp.functions import SYSTEM_FUNCTIONS
from svit.lisp.interpreter import Interpreter, evaluate
from svit.lisp.suggestions import ALTERNATIVES, edit_distance, nearest
from svit.lisp.syntax import SPECIAL_FORMS, STANDARD_NAMES
from svit.lisp.values import Foreign, Name

LIMITS = LispLimits(max_steps=2_000_000, max_execution_millis=10_000)


def compile_error(source: str, interp: Interpreter | None = None) -> CompileError:
    interp = interp or Interpreter(LIMITS)
    with pytest.raises(CompileError) as caught:
        interp.compile(source)
    return caught.value


# ---------------------------------------------------------------- the suggestion table
def test_the_table_has_at_least_forty_names_from_other_languages() -> None:
    assert len(ALTERNATIVES) >= 40
    for name in ("begin", "let*", "nil?", "get", "str", "string-append", "error", "raise", "throw", "set!", "setq",
                 "setf", "console.log", "puts", "display", "printf", "defun", "defn", "def", "fn", "progn", "when",
                 "unless", "car", "cdr", "rest", "nth", "length", "string-length", "substring", "assoc", "hash-map",
                 "dict", "vector", "array", "equal?", "eq?", "==", "!=", "mod", "modulo", "%", "reduce", "foldl",
                 "string->number", "number->string", "loop", "while", "for", "dotimes", "doseq", "return"):
        assert name in ALTERNATIVES, name


@pytest.mark.parametrize("name", sorted(ALTERNATIVES))
def test_no_table_entry_is_a_bound_name(name: str) -> None:
    assert name not in SYSTEM_FUNCTIONS and name not in SPECIAL_FORMS and name not in STANDARD_NAMES


@pytest.mark.parametrize("name", sorted(ALTERNATIVES))
def test_every_table_entry_is_suggested_where_it_is_used(name: str) -> None:
    source = f"(define (f x)\n  (if false ({name} x) x))"
    error = compile_error(source)
    assert f"2:14: unbound name `{name}`" in error.message
    assert ALTERNATIVES[name][1] in error.message


@pytest.mark.parametrize("name", sorted(ALTERNATIVES))
def test_every_table_entry_is_suggested_as_a_value_too(name: str) -> None:
    error = compile_error(f"(list 1 {name})")
    assert f"1:9: unbound name `{name}`" in error.message and ALTERNATIVES[name][1] in error.message


def test_required_suggestions_name_the_svit_way() -> None:
    expected = {
        "begin": "(do", "let*": "let", "nil?": "(value-null? v)", "get": "value-get", "str": "concat",
        "string-append": "to-string", "error": "panic", "raise": "panic", "throw": "panic",
        "set!": "values are immutable: write to /memory", "setq": "values are immutable: write to /memory",
        "setf": "values are immutable: write to /memory", "console.log": "log-info!", "puts": "log-info!",
        "display": "log-info!", "printf": "log-info!", "defun": "(define", "defn": "(define", "def": "(define",
        "fn": "(lambda", "progn": "(do", "when": "(if", "unless": "(if", "car": "(first", "cdr": "(tail",
        "rest": "(tail", "nth": "elt", "length": "(len", "string-length": "(len", "substring": "(slice",
        "assoc": "map-set", "hash-map": "value-map", "dict": "value-map", "vector": "value-array",
        "array": "value-array", "equal?": "(= a b)", "eq?": "(= a b)", "==": "(= a b)", "!=": "(/= a b)",
        "mod": "(rem", "modulo": "(rem", "%": "(rem", "reduce": "(fold", "foldl": "(fold",
        "string->number": "parse-int", "number->string": "(to-string", "return": "the last expression is the value",
    }
    for name, text in expected.items():
        assert text in ALTERNATIVES[name][1], name
    loops = "no loops: recurse (self tail calls run in constant space) or use map/filter/fold/range"
    for name in ("loop", "while", "for", "dotimes", "doseq"):
        assert ALTERNATIVES[name][1] == loops
    assert "map-get" in ALTERNATIVES["get"][1] and "or-string" not in ALTERNATIVES["str"][1]
    assert "count" in ALTERNATIVES["length"][1] and "list-get" in ALTERNATIVES["nth"][1]


# ---------------------------------------------------------------- nearest names
def test_edit_distance_counts_a_swap_once() -> None:
    assert edit_distance("revrese", "reverse", 3) == 1
    assert edit_distance("abc", "abc", 1) == 0
    assert edit_distance("kitten", "sitting", 3) == 3
    assert edit_distance("a", "abcdef", 2) == 3  # gave up above the cap


def test_nearest_offers_only_close_names() -> None:
    assert nearest("revrese", ["reverse", "rest", "range"]) == ["reverse"]
    assert nearest("x", ["y", "xy", "abc"]) == ["xy", "y"]
    assert nearest("completely-different", ["first", "tail"]) == []


def test_a_misspelt_system_function_suggests_it() -> None:
    error = compile_error("(define (f xs) (revrese xs))")
    assert "1:17: unbound name `revrese`; did you mean `reverse`?" in error.message


def test_a_misspelt_local_suggests_it() -> None:
    error = compile_error("(define (f total) (let ((count 1)) (+ totl cuont)))")
    assert "unbound name `totl`; did you mean `total`?" in error.message


def test_a_misspelt_global_suggests_the_script_definition() -> None:
    error = compile_error("(define (helper x) x)\n(define (main) (helpr 1))")
    assert "2:17: unbound name `helpr`; did you mean `helper`?" in error.message


def test_a_misspelt_host_function_suggests_it() -> None:
    interp = Interpreter(LIMITS)
    interp.define_function("send-mail!", lambda *a: None, 1, 1)
    assert "did you mean `send-mail!`?" in compile_error("(send-mail 1)", interp).message


def test_a_name_close_to_a_table_entry_gets_its_advice() -> None:
    error = compile_error("(lenght (list 1))")
    assert "unbound name `lenght` (like `length` elsewhere)" in error.message and "(len xs)" in error.message


def test_an_unknown_name_without_neighbours_still_says_what_to_do() -> None:
    assert "bind it with let, define it with (define ...)" in compile_error("(zzzqqq 1)").message


def test_a_macro_used_before_its_definition_says_so() -> None:
    error = compile_error("(swap 1 2)\n(macro (swap a b) (list b a))")
    assert "1:2: unbound name `swap`: the macro `swap` is defined later (line 2)" in error.message


def test_a_const_used_before_its_definition_says_so() -> None:
    error = compile_error("(define (f) k)\n(const k 1)")
    assert "the const `k` is defined later (line 2)" in error.message


# ---------------------------------------------------------------- the closed world
def test_a_name_only_an_untaken_branch_uses_is_refused() -> None:
    error = compile_error("(define (main input)\n  (if (= input 0) 1 (no-such-function input)))")
    assert "2:22: unbound name `no-such-function`" in error.message


def test_a_global_defined_anywhere_is_bound() -> None:
    assert evaluate("(define (f) (g))\n(define (g) (if false late 1))\n(define (h) (define late 2))\n(f)") == 1


def test_a_global_defined_by_a_macro_expansion_is_bound() -> None:
    assert evaluate("(macro (defconst n v) `(define ,n ,v))\n(define (f) answer)\n(defconst answer 42)\n(f)") == 42


def test_host_values_and_functions_are_bound_and_keyed_in_the_cache() -> None:
    source = "(list (twice 2) base)"
    assert "unbound name `twice`" in compile_error(source).message
    interp = Interpreter(LIMITS)
    interp.define_function("twice", lambda x: 2 * x, 1, 1)
    interp.define_value("base", 10)
    assert interp.run(source) == (4, 10)
    # The same source again, without the names: the cache must not answer for it.
    assert "unbound name `twice`" in compile_error(source).message
    other = Interpreter(LIMITS)
    other.define_functions({"g_twice": ("twice", lambda x: 3 * x, 1, 1)})
    assert "unbound name `base`" in compile_error(source, other).message


def test_host_function_arity_is_checked_at_compile_time() -> None:
    interp = Interpreter(LIMITS)
    interp.define_function("pair", lambda a, b: (a, b), 2, 2)
    error = compile_error("(define (f) (if false (pair 1) ()))", interp)
    assert "1:24: pair expects 2 arguments, found 1" in error.message


def test_a_script_may_redefine_a_host_name_and_its_own_arity_counts() -> None:
    interp = Interpreter(LIMITS)
    interp.define_function("pair", lambda a, b: (a, b), 2, 2)
    assert interp.run("(define (pair a) a) (pair 1)") == 1


def test_globals_of_an_earlier_run_in_the_same_namespace_stay_bound() -> None:
    interp = Interpreter(LIMITS)
    interp.run("(define kept 5)")
    assert interp.run("(+ kept 1)") == 6


# ---------------------------------------------------------------- arity
@pytest.mark.parametrize(
    "source,text",
    [
        ("(define (f) (if false (first) 1))", "1:24: `first` expects 1 argument, found 0"),
        ("(define (f) (if false (len 1 2) 1))", "`len` expects 1 argument, found 2"),
        ("(define (g a b) a)\n(define (f) (if false (g 1) 1))", "2:24: `g` expects 2 arguments, found 1; call it as (g a b)"),
        ("(define (g a :optional b) a)\n(g 1 2 3)", "`g` expects 1 to 2 arguments, found 3; call it as (g a :optional b)"),
        ("(define (g a :rest more) a)\n(g)", "`g` expects at least 1 argument, found 0; call it as (g a :rest more)"),
        ("(define (g a :key b) a)\n(g)", "`g` expects at least 1 argument, found 0; call it as (g a :key b)"),
        ("(define g (lambda (a) a))\n(g 1 2)", "`g` expects 1 argument, found 2"),
        ("(let ((sq (lambda (x) (* x x)))) (sq 1 2))", "`sq` expects 1 argument, found 2; call it as (sq x)"),
        ("((lambda (a b) a) 1)", "`lambda` expects 2 arguments, found 1"),
        ("(define (f n) (if (= n 0) 0 (call-self)))", "`call-self` expects 1 argument, found 0; call it as (call-self n)"),
    ],
)
def test_wrong_arity_of_a_known_function_is_refused(source: str, text: str) -> None:
    assert text in compile_error(source).message


def test_arity_is_not_assumed_for_a_function_defined_twice_or_rebound() -> None:
    with pytest.raises(EvalError):
        evaluate("(define (g a) a)\n(define (g a b) b)\n(g 1)")
    assert evaluate("(define (g a) a)\n(define (h) (define (g a b) b))\n(h)\n(g 1 2)") == 2
    # A let-bound lambda shadowed by a parameter is no longer known.
    assert evaluate("(let ((f (lambda (x) x))) ((lambda (f) (f 1 2)) (lambda (a b) b)))") == 2


def test_keyword_calls_count_their_pairs_at_run_time() -> None:
    assert evaluate("(define (g a :key b) (list a b))\n(g 1 :b 2)") == (1, 2)


# ---------------------------------------------------------------- literal conditions
@pytest.mark.parametrize(
    "source,found",
    [
        ("(if 1 2 3)", "an integer"),
        ("(if () 2 3)", "`()`"),
        ('(if "yes" 2 3)', "a string"),
        ("(if 1.5 2 3)", "a float"),
        ("(if 'a 2 3)", "a quoted value"),
        ("(if :k 2 3)", "a keyword"),
        ("(if (lambda () true) 2 3)", "a function"),
        ("(cond (0 1) (else 2))", "an integer"),
        ("(and true 1 false)", "an integer"),
        ("(or () true)", "`()`"),
        ("(not 0)", "an integer"),
    ],
)
def test_a_literal_condition_that_is_not_a_boolean_is_refused(source: str, found: str) -> None:
    assert f"a condition must be a boolean, found {found}" in compile_error(source).message


def test_literal_booleans_and_last_operands_are_fine() -> None:
    assert evaluate("(list (if true 1 2) (and true 5) (or false 6) (not false) (cond (false 1) (else 2)))") == (1, 5, 6, True, 2)


def test_a_local_named_not_is_an_ordinary_call() -> None:
    assert evaluate("(let ((not (lambda (x) x))) (not 1))") == 1


# ---------------------------------------------------------------- special forms
@pytest.mark.parametrize(
    "source,text",
    [
        ("(define (f)\n  (let x 1))", "2:3: `let` bindings must be a list"),
        ("(define (f) (if true))", "1:13: `if` expects (if condition then [else])"),
        ("(define (f) (do))", "`do` expects at least one expression"),
        ("(define (f) (cond (true 1) (else 2) (true 3)))", "`cond` clause after `else`"),
        ("(define (f) (case 1 (1 2)))", "`case` clause literals must be a list"),
        ("(define (f) (lambda (x) 1 2))", "exactly one body expression"),
        ("(define (f) (apply +))", "`apply` expects"),
        ("(define (f) (quote))", "`quote` expects one argument"),
        ("(define (f) ,x)", "unquote (`,`) outside of a quasiquote"),
        ("(define (f) (macro (m) 1))", "`macro` is only allowed at the top level"),
        ("(define (f) (const k 1))", "`const` is only allowed at the top level"),
        ("(define (f) (struct S ()))", "`struct` is not supported in Svit Lisp"),
        ("(define (f) if)", "`if` is a special form, not a value"),
        ("(define (f x x) x)", "duplicate parameter `x`"),
        ("(define (f :rest) 1)", "`:rest` must be followed by exactly one name"),
        ("(define (f) (let ((if 1)) if))", "cannot bind standard name `if`"),
        ("(define else 1)", "cannot redefine standard name `else`"),
        ("(define (f) else)", "`else` only heads the last clause of `cond` or `case`"),
    ],
)
def test_misused_special_forms_are_refused_with_their_position(source: str, text: str) -> None:
    assert text in compile_error(source).message


def test_the_earliest_error_in_source_order_is_reported() -> None:
    source = "(define (a) (if true))\n(define (b) (no-such 1))"
    assert "1:13: `if` expects" in compile_error(source).message
    source = "(define (b) (no-such 1))\n(define (a) (if true))"
    assert "1:14: unbound name `no-such`" in compile_error(source).message
    source = "(define (b) (no-such 1))\n(macro (m) (panic \"bad macro\"))\n(m)"
    assert "1:14: unbound name `no-such`" in compile_error(source).message
    with pytest.raises(EvalError, match="bad macro"):
        Interpreter(LIMITS).compile("(macro (m) (panic \"bad macro\"))\n(m)\n(no-such 1)")


def test_a_failing_macro_is_reported_where_it_is_called() -> None:
    with pytest.raises(LispError) as caught:
        Interpreter(LIMITS).compile("(macro (m) (panic \"bad macro\"))\n(list 1\n  (m))")
    assert caught.value.span is not None and caught.value.span.line == 3


# ---------------------------------------------------------------- macros, consts and the compile-time namespace
def test_a_macro_may_call_a_function_defined_after_it_but_before_its_use() -> None:
    # Ketos tests/core.rs test_const_define.
    assert evaluate("(macro (foo) `(do ,(bar)))\n(define (bar) 123)\n(foo)") == 123


def test_a_const_may_not_call_a_function_the_script_defines() -> None:
    # Ketos (test_const_error): a const is a constant expression; only macros see defines.
    with pytest.raises(CompileError, match="const value is not constant: unbound name `sq`"):
        evaluate("(define (sq x) (* x x))\n(const k (sq 7))\nk")
    assert evaluate("(define (sq x) (* x x))\n(macro (k) (sq 7))\n(k)") == 49


def test_a_macro_cannot_call_a_function_defined_after_its_use() -> None:
    with pytest.raises(EvalError, match="unbound name `bar`"):
        Interpreter(LIMITS).compile("(macro (foo) `(do ,(bar)))\n(foo)\n(define (bar) 123)")


def test_macro_calls_expand_everywhere_but_in_quoted_data_and_binding_names() -> None:
    source = "(macro (two) 2)\n(list '(two) (let ((two 5)) two) (two) ((lambda (:optional (a (two))) a)))"
    assert evaluate(source) == ((Name("two"),), 5, 2, 2)


def test_consts_follow_program_order_and_locals_shadow_them() -> None:
    assert evaluate("(const k 1)\n(define a k)\n(const k 2)\n(list a k (let ((k 3)) k))") == (1, 2, 3)


# ---------------------------------------------------------------- call-self (Ketos tests/core.rs test_call_self)
def test_call_self_in_a_lambda() -> None:
    source = """(let ((factorial
              (lambda (n :optional (acc 1))
                (if (<= n 1) acc (call-self (- n 1) (* n acc))))))
        (factorial 10))"""
    assert evaluate(source) == 3628800


def test_call_self_in_a_named_function() -> None:
    source = "(define (factorial n :optional (acc 1)) (if (<= n 1) acc (call-self (- n 1) (* n acc))))\n(factorial 9)"
    assert evaluate(source) == 362880


def test_call_self_outside_a_function_is_a_compile_error() -> None:
    assert "`call-self` is only allowed inside a function or lambda" in compile_error("(call-self 1)").message
    assert "`call-self` is only allowed" in compile_error("(if true (call-self))").message


def test_a_self_tail_call_self_runs_in_constant_space() -> None:
    assert evaluate("(define (count-down n) (if (= n 0) 'done (call-self (- n 1))))\n(count-down 100000)", LIMITS).name == "done"
    assert evaluate("((lambda (n acc) (if (= n 0) acc (call-self (- n 1) (+ acc 1)))) 50000 0)", LIMITS) == 50000


def test_call_self_names_the_function_not_the_global() -> None:
    source = """(define (f n) (if (= n 0) 'original (call-self (- n 1))))
(define g f)
(define (f n) 'replaced)
(g 3)"""
    assert evaluate(source).name == "original"
    source = """(define (f n) (if (= n 0) 0 (+ 1 (call-self (- n 1)))))
(define g f)
(define (f n) 100)
(g 3)"""
    assert evaluate(source) == 3


def test_call_self_inside_a_nested_lambda_calls_that_lambda() -> None:
    source = "(define (outer) ((lambda (n) (if (= n 0) 'inner (call-self (- n 1)))) 3))\n(outer)"
    assert evaluate(source).name == "inner"


# ---------------------------------------------------------------- null and host values
class _Held(Foreign):
    def type_name(self) -> str:
        return "held"

    def usage_hint(self) -> str | None:
        return "read it with (held-get v)"


class _Plain(Foreign):
    pass


def test_null_refuses_a_host_value_and_points_to_the_accessors() -> None:
    for source in ("(null v)", "(define (f x) (null x)) (f v)", "(apply null (list v))"):
        with pytest.raises(EvalError) as caught:
            evaluate(source, LIMITS, v=_Held())
        assert "`null` tests Lisp lists, found held" in caught.value.message
        assert "(value-null? v)" in caught.value.message and "(count v)" in caught.value.message
    assert evaluate("(list (null ()) (null (list 1)) (null 0))") == (True, False, False)


def test_a_type_error_on_a_host_value_carries_its_usage_hint() -> None:
    with pytest.raises(EvalError) as caught:
        evaluate("(+ 1 v)", LIMITS, v=_Held())
    assert "found held" in caught.value.message and "read it with (held-get v)" in caught.value.message
    with pytest.raises(EvalError) as caught:
        evaluate("(+ 1 v)", LIMITS, v=_Plain())
    assert caught.value.message.endswith("found foreign: #<foreign>")


def test_a_top_level_define_of_an_extension_name_wins_with_its_own_arity() -> None:
    assert evaluate("(define (f) (map 1))\n(define (map x) (list 'mine x))\n(f)") == (Name("mine"), 1)
    assert "`map` expects 1 argument, found 2; call it as (map x)" in compile_error("(define (map x) x)\n(map 1 2)").message
    assert "`map` expects 2 arguments, found 1" in compile_error("(map (lambda (x) x))").message
