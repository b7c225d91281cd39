"""Unit tests of the Svit Lisp system functions, called directly."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from svit.lisp.budget import Budget
from svit.lisp.context import Context, LispLimits, enter, leave
from svit.lisp.errors import BudgetExhausted, EvalError, LimitError
from svit.lisp.functions import SYSTEM_FUNCTIONS
from svit.lisp.functions.compare import compare, equal, ge2, gt2, le2, lt2, weak_equal
from svit.lisp.functions.numbers import add2, mul2, sub2
from svit.lisp.render import debug_repr, display
from svit.lisp.values import Char, Foreign, Keyword, LispPath, Name, mark_function

# Values are rendered (and system functions called) outside a run, under a host context.
pytestmark = pytest.mark.usefixtures("host_context")


def call(name, *args):
    return SYSTEM_FUNCTIONS[name].fn(*args)


class Opaque(Foreign):
    def type_name(self):
        return "svit-value"

    def display(self):
        return "#<svit-value>"


F = Fraction
OPAQUE = Opaque()


def limited(**limits):
    """Run the body under a context with the given limits."""

    class _Ctx:
        def __enter__(self):
            self.prev = enter(Context(LispLimits(**limits), Budget(max_steps=limits.get("max_steps", 1_000_000), max_millis=None)))

        def __exit__(self, *exc):
            leave(self.prev)

    return _Ctx()


POSITIVE = [
    # arithmetic
    ("+", (), 0),
    ("+", (1, 2, 3), 6),
    ("+", (1, 0.5), 1.5),
    ("+", (1, F(1, 2)), F(3, 2)),
    ("+", (F(1, 2), F(1, 2)), F(1)),
    ("+", (F(1, 2), 0.25), 0.75),
    ("-", (5,), -5),
    ("-", (10, 3, 2), 5),
    ("-", (F(1, 2),), F(-1, 2)),
    ("*", (), 1),
    ("*", (2, 3, 4), 24),
    ("*", (F(2, 3), 3), F(2)),
    ("/", (7, 2), F(7, 2)),
    ("/", (8, 2), 4),
    ("/", (2,), F(1, 2)),
    ("/", (1,), 1),
    ("/", (1.0, 0.0), math.inf),
    ("/", (F(1, 2), F(1, 4)), F(2)),
    ("//", (7, 2), 3),
    ("//", (-7, 2), -4),
    ("//", (7.5, 2), 3.0),
    ("^", (2, 10), 1024),
    ("^", (2, -1), 0.5),
    ("^", (F(1, 2), 2), F(1, 4)),
    ("^", (4.0, 0.5), 2.0),
    ("rem", (7, 3), 1),
    ("rem", (-7, 3), -1),
    ("rem", (7.5, 2), 1.5),
    ("rem", (F(7, 2), 1), F(1, 2)),
    ("abs", (-3,), 3),
    ("abs", (F(-1, 2),), F(1, 2)),
    ("abs", (-2.5,), 2.5),
    ("ceil", (1.2,), 2.0),
    ("ceil", (F(3, 2),), F(2)),
    ("ceil", (4,), 4),
    ("floor", (1.8,), 1.0),
    ("floor", (F(-3, 2),), F(-2)),
    ("round", (2.5,), 3.0),
    ("round", (-2.5,), -3.0),
    ("round", (0.49999999999999994,), 0.0),
    ("round", (F(5, 2),), F(3)),
    ("round", (F(-5, 2),), F(-3)),
    ("trunc", (-1.7,), -1.0),
    ("trunc", (F(-7, 2),), F(-3)),
    ("int", (3.9,), 3),
    ("int", (F(-7, 2),), -3),
    ("int", (5,), 5),
    ("float", (3,), 3.0),
    ("float", (F(1, 4),), 0.25),
    ("inf", (math.inf,), True),
    ("inf", (1.0,), False),
    ("nan", (math.nan,), True),
    ("nan", (1.0,), False),
    ("denom", (F(3, 4),), 4),
    ("denom", (5,), 1),
    ("numer", (F(3, 4),), 3),
    ("numer", (5,), 5),
    ("fract", (F(7, 2),), F(1, 2)),
    ("fract", (2.25,), 0.25),
    ("rat", (0.5,), F(1, 2)),
    ("rat", (3, 6), F(1, 2)),
    ("rat", (4, 2), F(2)),
    ("recip", (4,), F(1, 4)),
    ("recip", (F(1, 3),), F(3)),
    ("recip", (2.0,), 0.5),
    ("zero", (0, 0.0), True),
    ("zero", (0, 1), False),
    ("max", (1, 3, 2), 3),
    ("max", (1, 2.5), 2.5),
    ("min", (3, F(1, 2)), F(1, 2)),
    ("min", ("b", "a"), "a"),
    ("<<", (1, 10), 1024),
    (">>", (1024, 3), 128),
    (">>", (-1, 5), -1),
    ("bit&", (), -1),
    ("bit&", (12, 10), 8),
    ("bit|", (12, 3), 15),
    ("bit^", (12, 10), 6),
    ("bit!", (0,), -1),
    # comparison
    ("=", (1, 1.0), True),
    ("=", (1, 1.0, 1), True),
    ("=", ((1, 2), (1, 2)), True),
    ("=", ((1, 2), (1, 3)), False),
    ("=", (None, (1,)), False),
    ("=", ("a", "a"), True),
    ("=", (math.nan, math.nan), False),
    ("/=", (1, 2, 3), True),
    ("/=", (1, 2, 1), False),
    ("eq", (1, "a"), False),
    ("eq", (Name("a"), Name("a")), True),
    ("ne", (1, "a"), True),
    ("ne", (1, 1), False),
    ("<", (1, 2, 3), True),
    ("<", (1, 3, 2), False),
    ("<", ("abc", "abd"), True),
    ("<", (None, (1,)), True),
    ("<", ((1, 2), (1, 2, 0)), True),
    (">", (3, 2.5, F(1, 2)), True),
    ("<=", (1, 1, 2), True),
    (">=", (2, 2, 3), False),
    ("not", (False,), True),
    ("xor", (True, False), True),
    ("xor", (True, True), False),
    # lists
    ("list", (), None),
    ("list", (1, 2), (1, 2)),
    ("append", (None, 1), (1,)),
    ("append", ((1,), 2, 3), (1, 2, 3)),
    ("elt", ((1, 2, 3), 1), 2),
    ("elt", (b"ab", 1), 98),
    ("concat", ((1,), None, (2, 3)), (1, 2, 3)),
    ("concat", (None, None), None),
    ("concat", ("ab", Char("/"), "cd"), "ab/cd"),
    ("concat", (b"a", b"b"), b"ab"),
    ("concat", (LispPath("a"), LispPath("b")), LispPath("a/b")),
    ("join", (", ", "a", "b"), "a, b"),
    ("join", (Char("-"), "a", Char("b")), "a-b"),
    ("join", ((0,), (1, 2), (3,)), (1, 2, 0, 3)),
    ("join", (None, (1,), (2,)), (1, 2)),
    ("join", ("",), ""),
    ("len", (None,), 0),
    ("len", ((1, 2),), 2),
    ("len", ("héllo",), 6),
    ("slice", ((1, 2, 3, 4), 1, 3), (2, 3)),
    ("slice", ((1, 2), 2), None),
    ("slice", ("héllo", 3), "llo"),
    ("slice", ("héllo", 0, 3), "hé"),
    ("first", ((1, 2),), 1),
    ("first", ("héllo",), Char("h")),
    ("last", ("héllo",), Char("o")),
    ("last", ((1, 2),), 2),
    ("init", ((1, 2),), (1,)),
    ("init", ((1,),), None),
    ("init", ("abé",), "ab"),
    ("tail", ((1,),), None),
    ("tail", ((1, 2, 3),), (2, 3)),
    ("tail", ("éa",), "a"),
    ("second", ((1, 2),), 2),
    ("reverse", ((1, 2, 3),), (3, 2, 1)),
    ("reverse", (None,), None),
    # strings
    ("chars", ("ab",), (Char("a"), Char("b"))),
    ("chars", ("",), None),
    ("string", (Char("a"),), "a"),
    ("string", (Name("abc"),), "abc"),
    ("string", ("s",), "s"),
    # types
    ("id", ((1,),), (1,)),
    ("type-of", (1,), Name("integer")),
    ("type-of", (None,), Name("unit")),
    ("type-of", (OPAQUE,), Name("svit-value")),
    ("type-of", (F(1, 2),), Name("ratio")),
    ("is", (Name("integer"), 1), True),
    ("is", (Name("number"), 1.5), True),
    ("is", (Name("number"), "x"), False),
    ("is", (Name("list"), None), True),
    ("is", (Name("svit-value"), OPAQUE), True),
    ("is", (Name("integer"), True), False),
    ("null", (None,), True),
    ("null", ((1,),), False),
    ("bytes", ("ab",), b"ab"),
    ("bytes", ((1, 2),), b"\x01\x02"),
    ("bytes", (None,), b""),
    ("path", ("/x",), LispPath("/x")),
    # formatting
    ("format", ("~a", 42), "42"),
    ("format", ("~a ~s", "x", "x"), 'x "x"'),
    ("format", ("~s", Char("a")), "#'a'"),
    ("format", ("~a", 1.0), "1.0"),
    ("format", ("~a", F(7, 2)), "7/2"),
    ("format", ("~a", (1, "a", (None,))), '(1 "a" (()))'),
    ("format", ("~10a|", "foo"), "foo       |"),
    ("format", ("~10@a|", "foo"), "       foo|"),
    ("format", ("~d", 42), "42"),
    ("format", ("~5,'0d", 42), "00042"),
    ("format", ("~:d", 1234567), "1,234,567"),
    ("format", ("~@d", 5), "+5"),
    ("format", ("~b ~o ~x", 5, 8, 255), "101 10 ff"),
    ("format", ("~5,2f", 3.14159), " 3.14"),
    ("format", ("~f", 1.5), "1.5"),
    ("format", ("~e", 1234.5), "1.2345e3"),
    ("format", ("~,2e", 1234.5), "1.23e3"),
    ("format", ("a~%b", ), "a\nb"),
    ("format", ("~~",), "~"),
    ("format", ("~c~c", Char("o"), Char("k")), "ok"),
    ("format", ("~d friend~:p, ~d enem~:@p", 1, 2), "1 friend, 2 enemies"),
    ("format", ("~{~a~^, ~}", (1, 2, 3)), "1, 2, 3"),
    ("format", ("~{~a~}", None), ""),
    ("format", ("~:{~a=~a ~}", ((1, 2), (3, 4))), "1=2 3=4 "),
    ("format", ("~[zero~;one~:;many~]", 1), "one"),
    ("format", ("~[zero~;one~:;many~]", 7), "many"),
    ("format", ("~:[no~;yes~]", True), "yes"),
    ("format", ("~(HeLLo~)",), "hello"),
    ("format", ("~@:(hello~)",), "HELLO"),
    ("format", ("~r", 42), "forty-two"),
    ("format", ("~@r", 1994), "MCMXCIV"),
    ("format", ("~16r", 255), "ff"),
    ("format", ("~a", OPAQUE), "#<svit-value>"),
    ("format", ("~a", Keyword("k")), ":k"),
    ("format", ("~? ~a", "<~a>", (1,), 2), "<1> 2"),
    ("format", ("x~&y~&",), "x\ny\n"),
    ("format", ("~a", 1), "1"),
    ("print", ("~a", 1), None),
    ("println", ("x",), None),
    ("eprint", ("x",), None),
    ("eprintln", ("~a", 2), None),
]


@pytest.mark.parametrize("name,args,expected", POSITIVE, ids=[f"{c[0]}-{i}" for i, c in enumerate(POSITIVE)])
def test_positive(name, args, expected):
    result = call(name, *args)
    assert type(result) is type(expected)
    if type(expected) is float and math.isnan(expected):
        assert math.isnan(result)
    else:
        assert result == expected


NEGATIVE = [
    ("+", (1, "a"), "expected number"),
    ("+", (True, 1), "expected number"),
    ("-", ("a",), "expected number"),
    ("*", (None, 1), "expected number"),
    ("/", (1, 0), "divide by zero"),
    ("/", (F(1, 2), 0), "divide by zero"),
    ("/", ("x",), "expected number"),
    ("//", (1, 0), "divide by zero"),
    ("^", ("a", 2), "expected number"),
    ("rem", (1, 0), "divide by zero"),
    ("abs", ("a",), "expected number"),
    ("ceil", ("a",), "expected number"),
    ("floor", (None,), "expected number"),
    ("round", ("a",), "expected number"),
    ("trunc", ((1,),), "expected number"),
    ("int", (math.inf,), "integer overflow"),
    ("int", (math.nan,), "integer overflow"),
    ("int", ("1",), "expected number"),
    ("float", ("1",), "expected number"),
    ("inf", (1,), "expected float"),
    ("nan", ("x",), "expected float"),
    ("denom", (1.5,), "expected integer or ratio"),
    ("numer", ("x",), "expected integer or ratio"),
    ("fract", (1,), "expected float or ratio"),
    ("rat", (1, 0), "divide by zero"),
    ("rat", (1.5, 2), "expected integer"),
    ("rat", (math.nan,), "integer overflow"),
    ("recip", (0,), "divide by zero"),
    ("recip", ("x",), "expected number"),
    ("zero", ("x",), "expected number"),
    ("max", (1, "a"), "type mismatch"),
    ("min", (math.nan, 1), "NaN"),
    ("<<", (1, -1), "integer overflow"),
    ("<<", (1.0, 1), "expected integer"),
    (">>", (1, "a"), "expected integer"),
    ("bit&", (1, 1.0), "expected integer"),
    ("bit|", ("a",), "expected integer"),
    ("bit^", (None,), "expected integer"),
    ("bit!", (1.0,), "expected integer"),
    ("=", (1, "a"), "type mismatch"),
    ("=", (OPAQUE, OPAQUE), "type mismatch"),
    ("null", (OPAQUE,), "test JSON null with (value-null? v)"),
    ("=", (OPAQUE, 1), "expected svit-value"),
    ("=", ((1, "a"), (1, 2)), "type mismatch"),
    ("/=", ("a", 1), "type mismatch"),
    ("<", (1, "a"), "type mismatch"),
    ("<", (math.nan, 1.0), "NaN"),
    (">", (OPAQUE, OPAQUE), "type mismatch"),
    ("<=", (True, 1), "type mismatch"),
    (">=", (None, 1), "type mismatch"),
    ("not", (1,), "expected bool"),
    ("not", (None,), "expected bool"),
    ("xor", (True, 1), "expected bool"),
    ("append", (1, 2), "expected list"),
    ("append", (OPAQUE, 2), "expected list"),
    ("elt", ((1,), 1), "index out of bounds: 1"),
    ("elt", ((1,), -1), "integer overflow"),
    ("elt", ((1,), "0"), "expected integer"),
    ("elt", ("abc", 0), "expected indexable sequence"),
    ("elt", (OPAQUE, 0), "expected indexable sequence"),
    ("concat", (1, 2), "expected list or string"),
    ("concat", ((1,), "a"), "expected list"),
    ("concat", ("a", 1), "expected char or string"),
    ("join", (1, "a"), "expected list or string"),
    ("join", (",", 1), "expected char or string"),
    ("len", (1,), "expected sequence"),
    ("len", (OPAQUE,), "expected sequence"),
    ("slice", ((1, 2), 3), "index out of bounds: 3"),
    ("slice", ((1, 2), 2, 1), "invalid slice"),
    ("slice", ("héllo", 2), "char boundary"),
    ("slice", (5, 0), "expected list or string"),
    ("first", (None,), "expected sequence"),
    ("first", ("",), "index out of bounds"),
    ("first", (OPAQUE,), "expected sequence"),
    ("last", (None,), "expected sequence"),
    ("init", ("",), "index out of bounds"),
    ("tail", (None,), "expected sequence"),
    ("second", ((1,),), "index out of bounds: 1"),
    ("second", ("ab",), "expected list"),
    ("reverse", ("abc",), "expected list"),
    ("chars", (1,), "expected string"),
    ("string", (1,), "expected char or string or name"),
    ("is", ("integer", 1), "expected name"),
    ("bytes", (1,), "expected bytes or string"),
    ("bytes", ((256,),), "integer overflow"),
    ("path", (1,), "expected string or path"),
    ("panic", (), "explicit panic"),
    ("panic", ("boom",), "panic: boom"),
    ("format", (1,), "expected string"),
    ("format", ("~a",), "insufficient arguments"),
    ("format", ("~q", 1), "unrecognized directive `q`"),
    ("format", ("~z", 1), "unsupported directive `~z`"),
    ("format", ("~d", "x"), "expected integer"),
    ("format", ("~c", "x"), "expected char"),
    ("format", ("~{~a", (1,)), "missing close delimiter"),
    ("format", ("~}",), "incorrect close delimiter"),
    ("format", ("~200a", 1), "integer overflow in field"),
    ("format", ("~{~}", (1,)), "expected string; found list"),
    ("print", ("~a",), "insufficient arguments"),
    ("println", (1,), "expected string"),
    ("eprint", ("~q",), "unrecognized"),
    ("eprintln", ("~d", None), "expected integer"),
]


@pytest.mark.parametrize("name,args,message", NEGATIVE, ids=[f"{c[0]}-{i}" for i, c in enumerate(NEGATIVE)])
def test_negative(name, args, message):
    with pytest.raises(EvalError) as info:
        call(name, *args)
    assert message in str(info.value)


def test_every_function_has_cases():
    covered_pos = {c[0] for c in POSITIVE}
    covered_neg = {c[0] for c in NEGATIVE}
    # Svit's extensions have their own tables (test_collections.py, test_text.py).
    ketos = [n for n, spec in SYSTEM_FUNCTIONS.items() if not spec.extension]
    missing = [n for n in ketos if n not in covered_pos or n not in covered_neg]
    # these accept every value (eq/ne never fail); panic always fails
    assert set(missing) <= {"id", "type-of", "null", "list", "eq", "ne", "panic"}


# --- limits -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name,args",
    [
        ("+", (255, 1)),
        ("-", (-255, 1)),
        ("*", (16, 16)),
        ("^", (2, 8)),
        ("<<", (1, 8)),
        ("/", (F(1, 255), 255)),
        ("rat", (1, 1000)),
        ("round", (F(513, 2),)),
        ("int", (1000.0,)),
    ],
)
def test_integer_bits_limit(name, args):
    with limited(max_integer_bits=8):
        with pytest.raises(LimitError) as info:
            call(name, *args)
    assert info.value.limit == "integer bits"


def test_huge_power_and_shift_fail_fast():
    with limited(max_integer_bits=64):
        for name, args in [("^", (10, 100000)), ("^", (3, 10**18)), ("<<", (1, 100_000_000)), ("^", (F(3, 2), 10**9))]:
            with pytest.raises(LimitError):
                call(name, *args)
        assert call("^", (1), 10**30) == 1
        assert call("^", -1, 10**30 + 1) == -1


def test_format_output_is_bounded():
    lst = (1,)
    for _ in range(64):
        lst = (lst, lst)
    with limited(max_guest_memory=10_000):
        with pytest.raises(LimitError) as info:
            call("format", "~a", lst)
        assert info.value.limit == "guest memory"
        with pytest.raises(LimitError):
            debug_repr(lst)


def test_comparing_shared_structure_exhausts_budget():
    lst = (1,)
    for _ in range(64):
        lst = (lst, lst)
    with limited(max_steps=10_000):
        with pytest.raises(BudgetExhausted):
            equal(lst, lst)
        with pytest.raises(BudgetExhausted):
            compare(lst, lst)


def test_deep_lists_do_not_overflow_python_stack():
    a = b = None
    for i in range(100_000):
        a = (i, a) if a is not None else (i,)
        b = (i, b) if b is not None else (i,)
    assert equal(a, b)
    assert compare(a, b) == 0
    assert display(a).startswith("(99999 (99998")


def test_list_memory_is_charged():
    with limited(max_guest_memory=100):
        with pytest.raises(LimitError):
            call("list", *range(50))


# --- rendering ----------------------------------------------------------------------------


def test_rendering():
    fn = mark_function(lambda depth: None, "f", kind="lambda")
    assert debug_repr(None) == "()"
    assert debug_repr(True) == "true"
    assert debug_repr(-0.0) == "-0.0"
    assert debug_repr(1e-7) == "0.0000001"
    assert debug_repr(math.inf) == "inf"
    assert debug_repr(math.nan) == "NaN"
    assert debug_repr('a"b\n') == '"a\\"b\\n"'
    assert debug_repr(Char("'")) == "#'\\''"
    assert debug_repr(b'a"\x00') == '#b"a\\"\\x00"'
    assert debug_repr(LispPath("/x")) == '#p"/x"'
    assert display(LispPath("/x")) == "/x"
    assert debug_repr(fn) == "#<lambda f>"
    assert display(("a", Char("b"))) == '("a" #\'b\')'


# --- fast paths used by the compiler ---------------------------------------------------------


def test_fast_paths():
    assert add2(1, 2) == 3 and add2(1, 0.5) == 1.5
    assert sub2(1, F(1, 2)) == F(1, 2)
    assert mul2(2, 3.0) == 6.0
    assert lt2(1, 2) and gt2("b", "a") and le2(1, 1.0) and ge2(F(1, 2), 0.5)
    assert weak_equal(1, "a") is False
    with pytest.raises(EvalError):
        equal(OPAQUE, OPAQUE)
    assert weak_equal(OPAQUE, OPAQUE) is False
    with pytest.raises(EvalError):
        lt2(1, "a")
    with pytest.raises(EvalError):
        add2(True, 1)


# --- properties ---------------------------------------------------------------------------------

small = st.integers(min_value=-(2**30), max_value=2**30)


@settings(max_examples=200, deadline=None)
@given(small, small)
def test_int_arithmetic_matches_python(a, b):
    assert call("+", a, b) == a + b
    assert call("-", a, b) == a - b
    assert call("*", a, b) == a * b
    if b:
        q = call("/", a, b)
        assert q == Fraction(a, b)
        assert type(q) is (int if a % b == 0 else Fraction)
        assert call("//", a, b) == a // b
        assert call("rem", a, b) == math.fmod(a, b)
    assert call("<", a, b) == (a < b)
    assert call("=", a, b) == (a == b)
    assert call("max", a, b) == max(a, b)


@settings(max_examples=200, deadline=None)
@given(st.fractions(min_value=-(10**6), max_value=10**6, max_denominator=1000), st.fractions(min_value=-(10**6), max_value=10**6, max_denominator=1000))
def test_ratio_arithmetic_matches_python(a, b):
    def norm(x):
        return int(x) if x.denominator == 1 else x

    assert call("+", norm(a), norm(b)) == a + b
    assert call("*", norm(a), norm(b)) == a * b
    r = call("-", norm(a), norm(b))
    # a ratio operand keeps the result a ratio, even a whole one
    assert r == a - b and (type(r) is int) == (type(norm(a)) is type(norm(b)) is int)


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=-(2**12), max_value=2**12), st.integers(min_value=-(2**12), max_value=2**12))
def test_integer_bits_limit_property(a, b):
    with limited(max_integer_bits=8):
        for name, expected in (("+", a + b), ("-", a - b), ("*", a * b)):
            fits = a.bit_length() <= 8 and b.bit_length() <= 8 and expected.bit_length() <= 8
            if fits:
                assert call(name, a, b) == expected
            elif expected.bit_length() > 8:
                with pytest.raises(LimitError):
                    call(name, a, b)


@settings(max_examples=100, deadline=None)
@given(st.integers(min_value=-20, max_value=20), st.integers(min_value=0, max_value=40))
def test_power_limit_property(base, exp):
    with limited(max_integer_bits=16):
        expected = base**exp
        if expected.bit_length() <= 16:
            assert call("^", base, exp) == expected
        else:
            with pytest.raises(LimitError):
                call("^", base, exp)
