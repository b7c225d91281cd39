"""The text and conversion extensions (split, upcase, replace, to-string, parse-int, ...)."""

from __future__ import annotations

import pytest

from svit.guest import plain_to_lisp
from svit.lisp.context import LispLimits
from svit.lisp.errors import BudgetExhausted, EvalError, LimitError
from svit.lisp.functions import SYSTEM_FUNCTIONS
from svit.lisp.interpreter import Interpreter, evaluate
from svit.lisp.render import debug_repr

# Values are rendered (and system functions called) outside a run, under a host context.
pytestmark = pytest.mark.usefixtures("host_context")

VALUES = {
    "arr": ["a", "b", 3],
    "m": {"b": [1, 2.0], "a": "x", "é": None},
    "nothing": None,
    "tags": ["red", "green"],
}


def run(source: str, limits: LispLimits | None = None) -> object:
    return evaluate(source, limits or LispLimits(), **{k: plain_to_lisp(v) for k, v in VALUES.items()})


POSITIVE = [
    # split
    ("split", '(split "a,b,,c" ",")', '("a" "b" "" "c")'),
    ("split", '(split "one" ",")', '("one")'),
    ("split", '(split "" ",")', '("")'),
    ("split", '(split "a::b" "::")', '("a" "b")'),
    ("split", "(split \"a b\" #' ')", '("a" "b")'),
    # upcase / downcase / trim
    ("upcase", '(upcase "Hello, world")', '"HELLO, WORLD"'),
    ("upcase", '(upcase "straße")', '"STRASSE"'),
    ("downcase", '(downcase "ÀB c")', '"àb c"'),
    ("downcase", '(downcase "")', '""'),
    ("trim", '(trim "  hi there \\n\\t")', '"hi there"'),
    ("trim", '(trim "x")', '"x"'),
    # contains? starts-with? ends-with?
    ("contains?", '(contains? "hello" "ell")', "true"),
    ("contains?", '(contains? "hello" "xyz")', "false"),
    ("contains?", '(contains? "hello" "")', "true"),
    ("contains?", "(contains? \"hello\" #'h')", "true"),
    ("contains?", "(contains? (list 1 2 3) 2)", "true"),
    ("contains?", "(contains? (list 1 2 3) 2.0)", "true"),
    ("contains?", '(contains? (list 1 2 3) "2")', "false"),
    ("contains?", "(contains? () 1)", "false"),
    ("contains?", '(contains? tags "green")', "true"),
    ("contains?", '(contains? arr "c")', "false"),
    ("contains?", '(contains? (keys m) "a")', "true"),
    ("starts-with?", '(starts-with? "hello" "he")', "true"),
    ("starts-with?", '(starts-with? "hello" "lo")', "false"),
    ("starts-with?", '(starts-with? "hello" "")', "true"),
    ("ends-with?", '(ends-with? "hello" "lo")', "true"),
    ("ends-with?", '(ends-with? "hello" "he")', "false"),
    # replace
    ("replace", '(replace "a-b-c" "-" "+")', '"a+b+c"'),
    ("replace", '(replace "aaa" "aa" "b")', '"ba"'),
    ("replace", '(replace "x.y" "." "")', '"xy"'),
    ("replace", '(replace "abc" "z" "y")', '"abc"'),
    ("replace", '(replace "a.c" "." "[.*]")', '"a[.*]c"'),
    # to-string
    ("to-string", "(to-string 42)", '"42"'),
    ("to-string", "(to-string -7)", '"-7"'),
    ("to-string", "(to-string 1.5)", '"1.5"'),
    ("to-string", "(to-string 2.0)", '"2.0"'),
    ("to-string", "(to-string 1e21)", '"1000000000000000000000.0"'),
    ("to-string", "(to-string 1/3)", '"1/3"'),
    ("to-string", "(to-string true)", '"true"'),
    ("to-string", "(to-string false)", '"false"'),
    ("to-string", '(to-string "text")', '"text"'),
    ("to-string", "(to-string #'c')", '"c"'),
    ("to-string", "(to-string 'name)", '"name"'),
    ("to-string", "(to-string m)", '"{\\"a\\":\\"x\\",\\"b\\":[1,2.0],\\"é\\":null}"'),
    ("to-string", "(to-string arr)", '"[\\"a\\",\\"b\\",3]"'),
    ("to-string", "(to-string nothing)", '"null"'),
    ("to-string", '(concat "n=" (to-string 3))', '"n=3"'),
    # parse-int / parse-float
    ("parse-int", '(parse-int "42")', "42"),
    ("parse-int", '(parse-int "-17")', "-17"),
    ("parse-int", '(parse-int "+5")', "5"),
    ("parse-int", '(parse-int "  12\\n")', "12"),
    ("parse-int", '(parse-int "007")', "7"),
    ("parse-int", '(parse-int "9223372036854775807")', "9223372036854775807"),
    ("parse-float", '(parse-float "2.5")', "2.5"),
    ("parse-float", '(parse-float "-1e3")', "-1000.0"),
    ("parse-float", '(parse-float "7")', "7.0"),
    ("parse-float", '(parse-float " .5 ")', "0.5"),
    ("parse-float", '(parse-float "3.")', "3.0"),
]

NEGATIVE = [
    ("split", '(split "abc" "")', "split: the separator is empty; use (chars s) for the characters of a text"),
    ("split", '(split 12 ",")', "split: expected text; found integer: 12; turn a value into text with (to-string v)"),
    ("split", '(split "a" 1)', "split: expected a separator text; found integer: 1"),
    ("split", '(split m ",")', "split: expected text; found svit-value map; read a text out of a value with (value-get v \"/key\")"),
    ("upcase", "(upcase 1)", "upcase: expected text; found integer: 1"),
    ("downcase", "(downcase (list \"a\"))", "downcase: expected text; found list"),
    ("trim", "(trim ())", "trim: expected text; found unit"),
    ("contains?", '(contains? m "a")', "contains?: expected a text, list or array; found a map; test a key with (contains? (keys m) key)"),
    ("contains?", '(contains? "abc" 1)', "contains?: expected a text to look for; found integer: 1"),
    ("contains?", "(contains? 5 1)", "contains?: expected a text, list or array; found integer: 5"),
    ("starts-with?", '(starts-with? 1 "a")', "starts-with?: expected text; found integer"),
    ("starts-with?", '(starts-with? "a" 1)', "starts-with?: expected a prefix text"),
    ("ends-with?", '(ends-with? "a" ())', "ends-with?: expected a suffix text; found unit"),
    ("replace", '(replace "abc" "" "x")', "replace: the text to replace is empty"),
    ("replace", '(replace "abc" "a" 1)', "replace: expected a replacement text; found integer: 1"),
    ("to-string", "(to-string (list 1 2))", 'to-string: expected a number, boolean, text or value; found list: (1 2); join texts with (join ", " a b) or show a list with (format "~a" xs)'),
    ("to-string", "(to-string ())", "to-string: expected a number, boolean, text or value; found unit"),
    ("to-string", "(to-string (lambda (x) x))", "to-string: expected a number, boolean, text or value; found lambda"),
    ("parse-int", '(parse-int "abc")', 'parse-int: not an integer: "abc"'),
    ("parse-int", '(parse-int "1.5")', 'parse-int: not an integer: "1.5"'),
    ("parse-int", '(parse-int "")', 'parse-int: not an integer: ""'),
    ("parse-int", '(parse-int "1_000")', 'parse-int: not an integer: "1_000"'),
    ("parse-int", '(parse-int "0x1F")', 'parse-int: not an integer: "0x1F"'),
    ("parse-int", "(parse-int 12)", "parse-int: expected text; found integer: 12"),
    ("parse-float", '(parse-float "abc")', 'parse-float: not a number: "abc"'),
    ("parse-float", '(parse-float "nan")', 'parse-float: not a number: "nan"'),
    ("parse-float", '(parse-float "inf")', 'parse-float: not a number: "inf"'),
    ("parse-float", '(parse-float "1_0")', 'parse-float: not a number: "1_0"'),
    ("parse-float", '(parse-float "1e999")', 'parse-float: out of range: "1e999"'),
    ("parse-float", "(parse-float 2.5)", "parse-float: expected text; found float: 2.5"),
]

NAMES = {name for name, spec in SYSTEM_FUNCTIONS.items() if spec.category in ("text", "conversion")}


def test_every_text_function_has_positive_and_negative_cases() -> None:
    assert NAMES == {"split", "upcase", "downcase", "trim", "contains?", "starts-with?", "ends-with?", "replace", "to-string", "parse-int", "parse-float"}
    assert {c[0] for c in POSITIVE} == NAMES
    assert {c[0] for c in NEGATIVE} == NAMES


@pytest.mark.parametrize("name,source,expected", POSITIVE, ids=[f"{c[0]}-{i}" for i, c in enumerate(POSITIVE)])
def test_positive(name: str, source: str, expected: str) -> None:
    assert debug_repr(run(source)) == expected


@pytest.mark.parametrize("name,source,message", NEGATIVE, ids=[f"{c[0]}-{i}" for i, c in enumerate(NEGATIVE)])
def test_negative(name: str, source: str, message: str) -> None:
    with pytest.raises(EvalError) as caught:
        run(source)
    assert message in caught.value.message


def test_parse_int_past_the_integer_bits_is_a_limit_error() -> None:
    with pytest.raises(LimitError) as caught:
        run('(parse-int "9223372036854775808000")')
    assert caught.value.limit == "integer bits"
    with pytest.raises(LimitError):
        run('(parse-int "' + "9" * 5000 + '")')


def test_a_replace_that_would_outgrow_guest_memory_is_refused_before_it_is_built() -> None:
    limits = LispLimits(max_guest_memory=50_000)
    with pytest.raises(LimitError) as caught:
        evaluate('(replace text "a" "bbbbbbbbbb")', limits, text="a" * 10_000)
    assert caught.value.limit == "guest memory"
    assert len(evaluate('(replace text "a" "bb")', limits, text="a" * 10_000)) == 20_000


def test_split_into_too_many_pieces_is_refused_by_guest_memory() -> None:
    with pytest.raises(LimitError) as caught:
        evaluate('(split text ",")', LispLimits(max_guest_memory=50_000), text="," * 10_000)
    assert caught.value.limit == "guest memory"


def test_scanning_long_text_is_charged() -> None:
    def steps(source: str, text: str) -> int:
        interp = Interpreter(LispLimits())
        interp.define_value("text", text)
        interp.run(source)
        return interp.steps_used()

    long = "x" * 640_000
    assert steps('(contains? text "y")', long) - steps('(contains? text "y")', "x") >= 10_000
    with pytest.raises(BudgetExhausted):
        evaluate('(split text ",")', LispLimits(max_steps=5_000), text=long)


def test_to_string_of_a_large_value_is_charged_to_guest_memory() -> None:
    big = plain_to_lisp({"k": "v" * 100_000})
    with pytest.raises(LimitError) as caught:
        evaluate("(to-string big)", LispLimits(max_guest_memory=50_000), big=big)
    assert caught.value.limit == "guest memory"


def test_count_of_text_is_characters_while_len_stays_utf8_bytes() -> None:
    assert run('(list (count "naïve") (len "naïve"))') == (5, 6)


def test_to_string_then_parse_round_trips() -> None:
    assert run("(parse-int (to-string -12345))") == -12345
    assert run("(parse-float (to-string 0.1))") == 0.1
