"""Plain values, paths, JSON and the tagged wire form."""

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from svit import Process, paths
from svit.errors import InvalidMount, InvalidPath, InvalidScriptName, InvalidValue
from svit.values import (
    Script,
    from_json,
    from_json_text,
    from_tagged,
    to_json,
    to_json_text,
    to_plain,
    to_tagged,
    values_equal,
)

I64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
SCALARS = st.none() | st.booleans() | I64 | st.floats(allow_nan=False, allow_infinity=False) | TEXT
PLAIN = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(TEXT, inner, max_size=5),
    max_leaves=30,
)


@given(PLAIN)
def test_tagged_round_trip(value):
    assert values_equal(from_tagged(to_tagged(value)), value)
    # The tagged form survives JSON text too (floats keep their kind via the tag).
    assert values_equal(from_tagged(json.loads(json.dumps(to_tagged(value)))), value)


@given(PLAIN)
def test_json_round_trip_keeps_kinds(value):
    assert values_equal(from_json_text(to_json_text(value)), value)


@given(PLAIN)
def test_to_plain_is_a_fresh_sorted_copy(value):
    copy = to_plain(value)
    assert values_equal(copy, value)
    if isinstance(value, (list, dict)) and value:
        assert copy is not value


def test_integer_and_number_differ():
    assert to_tagged(1) == {"type": "integer", "value": 1}
    assert to_tagged(1.0) == {"type": "number", "value": 1.0}
    assert not values_equal(1, 1.0)
    assert not values_equal(True, 1)
    assert from_json_text("1") == 1 and type(from_json_text("1")) is int
    assert type(from_json_text("1.0")) is float
    assert type(from_json_text("9223372036854775808")) is float
    assert type(from_json_text("9223372036854775807")) is int


def test_json_maps_scripts_and_sorts_keys():
    assert to_json({"b": 1, "a": Script("(+ 1 2)", "adds")}) == {
        "a": {"documentation": "adds", "source": "(+ 1 2)"},
        "b": 1,
    }
    assert list(from_json({"b": 1, "a": 2})) == ["a", "b"]
    assert to_json_text({"b": 1.0, "a": None}) == '{"a":null,"b":1.0}'


@pytest.mark.parametrize(
    "bad, message",
    [
        (float("nan"), "numbers must be finite"),
        (float("inf"), "numbers must be finite"),
        (2**63, "integer is outside signed 64-bit range"),
        (-(2**63) - 1, "integer is outside signed 64-bit range"),
        ({1: 2}, "map keys must be text"),
        ((1, 2), "unsupported value type"),
        (b"x", "unsupported value type"),
        (Script("x"), "script records are only valid below /lib"),
        ("\ud800", "valid Unicode"),
    ],
)
def test_plain_validation_errors(bad, message):
    with pytest.raises(InvalidValue, match=message):
        to_plain([bad])


def test_scripts_allowed_and_checked():
    assert to_plain({"s": Script("src")}, scripts_allowed=True) == {"s": Script("src", "")}
    with pytest.raises(InvalidValue, match="text source"):
        Script(3)  # type: ignore[arg-type]
    with pytest.raises(InvalidValue, match="documentation must be text"):
        Script("x", None)  # type: ignore[arg-type]


def test_deep_and_cyclic_values_are_rejected():
    deep: list = []
    cur = deep
    for _ in range(500):
        nxt: list = []
        cur.append(nxt)
        cur = nxt
    with pytest.raises(InvalidValue, match="nesting"):
        to_plain(deep)
    cyc: list = []
    cyc.append(cyc)
    with pytest.raises(InvalidValue, match="nesting"):
        to_plain(cyc)


@pytest.mark.parametrize(
    "tagged",
    [
        {"type": "null", "value": None},
        {"type": "integer"},
        {"type": "integer", "value": 1.0},
        {"type": "integer", "value": True},
        {"type": "integer", "value": 2**64},
        {"type": "number", "value": "1"},
        {"type": "number", "value": float("nan")},
        {"type": "bool", "value": 1},
        {"type": "string", "value": 5},
        {"type": "array", "value": {}},
        {"type": "map", "value": []},
        {"type": "map", "value": {"a": 1}},
        {"type": "script", "value": {"source": 1}},
        {"type": "script", "value": {"source": "x", "extra": ""}},
        {"type": "blob", "value": ""},
        {"type": "string", "value": "x", "extra": 1},
        [],
        "string",
    ],
)
def test_tagged_decoding_is_strict(tagged):
    with pytest.raises(InvalidValue):
        from_tagged(tagged)


def test_tagged_script_and_placement():
    tagged = to_tagged(Script("(f)", "doc"))
    assert tagged == {"type": "script", "value": {"documentation": "doc", "source": "(f)"}}
    assert from_tagged(tagged) == Script("(f)", "doc")
    with pytest.raises(InvalidValue, match="below /lib"):
        from_tagged(tagged, scripts_allowed=False)
    assert from_tagged({"type": "number", "value": 2}) == 2.0
    assert type(from_tagged({"type": "number", "value": 2})) is float


def test_json_text_rejects_non_finite_and_garbage():
    for text in ("NaN", "[Infinity]", "{", "1e999"):
        with pytest.raises(InvalidValue):
            from_json_text(text)


# ---------------------------------------------------------------------------
# paths


def test_parse_paths():
    assert paths.parse("") == ()
    assert paths.parse("/") == ()
    assert paths.parse("/memory/a/0") == ("memory", "a", "0")
    for bad in ("memory", "/a//b", "/a/", "/a/./b", "/..", "//"):
        with pytest.raises(InvalidPath):
            paths.parse(bad)
    with pytest.raises(InvalidPath):
        paths.parse(5)  # type: ignore[arg-type]
    assert paths.format_path(("a", "b")) == "/a/b"
    assert paths.format_path(()) == "/"


def test_a_path_that_is_not_valid_unicode_is_an_invalid_path():
    # A segment is a map key, which must be valid Unicode: a path holding a lone surrogate
    # (JSON text may carry one) names nothing, and writing it is refused as a path, not
    # left to fail inside the tree as a UnicodeEncodeError.
    for bad in ("/memory/\ud800", "/memory/a\udfffb/c", "/\udc80"):
        with pytest.raises(InvalidPath, match="valid Unicode"):
            paths.parse(bad)
        assert paths.parsed_before(bad) is None
    p = Process.builder("svit://local/test/surrogate").memory("a", 1).build()
    before = (p.version, p.root_hash)
    for call in (lambda: p.write("/memory/\ud800", 1), lambda: p.remove("/memory/\ud800"),
                 lambda: p.read("/memory/\ud800"), lambda: p.write("/memory/a\ud800", {"k": 1})):
        with pytest.raises(InvalidPath):
            call()
    assert (p.version, p.root_hash) == before


def test_join():
    assert paths.join("/", "memory") == "/memory"
    assert paths.join("/memory", "x") == "/memory/x"
    for bad in ("", "a/b", ".", ".."):
        with pytest.raises(InvalidPath):
            paths.join("/memory", bad)


def test_memory_prefix():
    assert paths.memory_segments("/memory") == ()
    assert paths.memory_segments("/memory/a/b") == ("a", "b")
    assert paths.memory_segments("/memoryX") is None
    assert paths.memory_segments("/lib/x") is None


def test_lib_names():
    assert paths.lib_name("/lib/counter") == "counter"
    assert paths.lib_name("/lib/a.b-c_9") == "a.b-c_9"
    assert paths.lib_name("/lib") is None
    assert paths.lib_name("/memory/x") is None
    with pytest.raises(InvalidScriptName):
        paths.lib_name("/lib/bad name")
    with pytest.raises(InvalidScriptName):
        paths.lib_name("/lib/" + "a" * 65)
    assert paths.validate_script_name("a" * 64)
    with pytest.raises(InvalidPath):
        paths.lib_name("/lib/a/b")


def test_lib_names_kept_by_text_answer_as_the_first_time_and_errors_are_never_kept():
    paths._LIB_NAMES.clear()
    for _ in range(2):  # the second round is answered from what the first kept
        assert paths.lib_name("/lib/kept") == "kept"
        assert paths.lib_name(("lib", "kept")) == "kept"
        assert paths.lib_name("/memory/kept") is None
        with pytest.raises(InvalidScriptName):
            paths.lib_name("/lib/bad name")
        with pytest.raises(InvalidPath):
            paths.lib_name("/lib/a/b")
        with pytest.raises(InvalidPath):
            paths.lib_name("lib/kept")
    assert paths._LIB_NAMES == {"/lib/kept": "kept"}


def test_mount_split():
    assert paths.split_mount("/mounts") is None
    assert paths.split_mount("/mounts/docs") == ("docs", ())
    assert paths.split_mount("/mounts/docs/a/b.txt") == ("docs", ("a", "b.txt"))
    for bad in ("/mounts/a.b", "/mounts/" + "x" * 65, "/mounts/sp ace"):
        with pytest.raises(InvalidMount, match="invalid mount name"):
            paths.split_mount(bad)


def test_addresses():
    assert paths.validate_address("svit://local/demo") == "svit://local/demo"
    assert paths.validate_address("svit://" + "a" * 249)
    for bad in ("svit://", "http://x", "svit://a b", "svit://a\n", "svit://" + "a" * 250, 7, "svit://\ud800"):
        with pytest.raises(InvalidValue, match="process address must be svit://"):
            paths.validate_address(bad)  # type: ignore[arg-type]
