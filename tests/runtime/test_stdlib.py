"""jq and search: the reference's bounds, error texts and decoding rules."""

import json
import time

import pytest

from svit.errors import ExecutionLimitExceeded, InvalidValue, ScriptFailed
from svit.mounts import Mount
from svit.stdlib import run_jq, screen_jq_filter, search_mount, search_value
from tests.conftest import make_files

# This host code runs inside a script run; called directly, it gets a run context of its own.
pytestmark = pytest.mark.usefixtures("host_context")


TREE = {"tree": [{"type": "blob", "path": "a"}, {"type": "tree", "path": "d"}, {"type": "blob", "path": "b"}]}
BLOBS = '[.tree[] | select(.type == "blob")] | length'


def failure(fn, *args, **kwargs) -> str:
    with pytest.raises(ScriptFailed) as info:
        fn(*args, **kwargs)
    return info.value.detail


# ---------------------------------------------------------------- jq: results and decoding


def test_jq_counts_blobs_directly():
    assert run_jq(BLOBS, TREE) == [2]


def test_jq_counts_blobs_inside_an_http_envelope_serialized_as_text():
    envelope = {"status": 200, "headers": {"content-type": "application/json"}, "body": json.dumps(TREE)}
    assert run_jq(BLOBS, json.dumps(envelope)) == [2]
    assert run_jq(BLOBS, envelope) == [2]


def test_jq_envelope_with_non_json_body_stays_an_envelope():
    envelope = {"status": 500, "headers": {}, "body": "oops"}
    assert run_jq(".body", envelope) == ["oops"]


def test_jq_string_that_is_not_json_is_a_string():
    assert run_jq("length", "not json") == [8]
    assert run_jq(".a", '{"a": [1, 2]}') == [[1, 2]]


def test_jq_each_output_is_one_result():
    assert run_jq(".[] | .a", [{"a": 1}, {"a": 2}]) == [1, 2]
    assert run_jq("empty", 1) == []
    assert run_jq(".", None) == [None]


def test_jq_keeps_plain_kinds():
    assert run_jq(".", {"s": "é", "b": True, "n": None, "f": 1.5, "i": -3}) == [
        {"s": "é", "b": True, "n": None, "f": 1.5, "i": -3}
    ]


def test_jq_refuses_a_non_plain_input():
    with pytest.raises(InvalidValue):
        run_jq(".", object())


# ---------------------------------------------------------------- jq: failures


@pytest.mark.parametrize("text", ["", "." * 4097])
def test_jq_filter_size_bounds(text):
    assert failure(run_jq, text, 1) == "jq filter is empty or exceeds its limit"


def test_jq_filter_of_exactly_4096_bytes_is_accepted():
    text = "." + " " * 4095
    assert run_jq(text, 7) == [7]


@pytest.mark.parametrize(
    "text",
    [
        "def f: 1; f",
        "[recurse]",
        "[limit(3; repeat(1))]",
        "[.[] | while(. < 3; . + 1)]",
        "until(. > 3; . + 1)",
        "[range(5)]",
        "input",
        "[inputs]",
        '"\\(range(3))"',
        '"a \\("b \\(range(2))")"',
        "1.range",
        "$range",
        "{range: 1}",
    ],
)
def test_jq_refuses_unbounded_words(text):
    assert failure(run_jq, text, 1) == "jq filter uses an unbounded construct"


@pytest.mark.parametrize(
    "text",
    ["env", "$ENV", "$ ENV", "input_filename", "$__loc__", "$__prog_args", "now", "localtime",
     "halt", 'halt_error("x")', "debug", "stderr", 'import "a" as a; .', 'include "a"; .',
     "get_search_list", "modulemeta", "input_line_number", "strflocaltime(\"%H\")", "ENV", "__loc__",
     "$JQ_BUILD_CONFIGURATION"],
)
def test_jq_refuses_host_reaching_words(text):
    assert failure(run_jq, text, 1) == "jq filter reaches outside its input"


@pytest.mark.parametrize(
    "text,expected",
    [
        (".range_x", [5]),
        (".range", [None]),
        ('"range while def"', ["range while def"]),
        ('.["range"]', [None]),
        ("# range in a comment\n.range_x", [5]),
        ("[paths] | length", [1]),
        ("[..] | length", [2]),
        ("[limit(1; .[])]", [[5]]),
        ('getpath(["range_x"])', [5]),
        ("walk(.)", [{"range_x": 5}]),
        ('"\\(.range_x)"', ["5"]),
    ],
)
def test_jq_allows_words_in_fields_strings_and_bounded_builtins(text, expected):
    assert run_jq(text, {"range_x": 5}) == expected


def test_jq_comment_with_a_backslash_is_refused():
    assert failure(run_jq, "# hidden \\\nrange(3)", 1) == "invalid jq filter"


def test_jq_screen_handles_deep_interpolation_without_recursion():
    text = '"\\(' * 900 + "." + ')"' * 900
    screen_jq_filter(text)  # no RecursionError


def test_jq_result_count_cap():
    assert len(run_jq(".[]", list(range(100)))) == 100
    assert failure(run_jq, ".[]", list(range(101))) == "jq result count limit exceeded"


def test_jq_output_size_cap():
    chunk = "x" * (512 * 1024)
    assert len(run_jq(".[]", [chunk])) == 1
    assert failure(run_jq, ".[]", [chunk, chunk, chunk]) == "jq output limit exceeded"
    assert failure(run_jq, '"x" * 2000000', 1) == "jq output limit exceeded"


def test_jq_invalid_filter():
    assert failure(run_jq, ".[", 1) == "invalid jq filter"
    assert failure(run_jq, "nosuchfunction", 1) == "invalid jq filter"


def test_jq_runtime_failure():
    assert failure(run_jq, 'error("boom")', 1) == "jq evaluation failed"
    assert failure(run_jq, ".a", [1]) == "jq evaluation failed"


def test_jq_exponential_filter_is_stopped_by_the_backstop():
    blowup = "." + " | [.,.] | flatten" * 60 + " | tostring | length"
    started = time.monotonic()
    with pytest.raises((ExecutionLimitExceeded, ScriptFailed)):
        run_jq(blowup, 1, timeout_seconds=0.5)
    assert time.monotonic() - started < 10
    assert run_jq(".", 1) == [1]  # a fresh worker takes over


def test_jq_memory_exhaustion_fails_cleanly():
    with pytest.raises((ScriptFailed, ExecutionLimitExceeded)):
        run_jq('"x" * 4e9 | length', 1, timeout_seconds=5)
    assert run_jq(". + 1", 1) == [2]


# ---------------------------------------------------------------- search over values


def test_search_memory_notes():
    result = search_value("/memory/notes", "alpha\nbeta\ngamma", "^be")
    assert result == {"matches": [{"line": 2, "path": "/memory/notes", "text": "beta"}], "truncated": False}


def test_search_walks_in_canonical_order_with_child_paths():
    value = {"b": ["x1", 5, {"z": "x2"}], "a": "no\r\nx3\r\n", "c": None}
    result = search_value("/memory", value, "x")
    assert [(m["path"], m["line"], m["text"]) for m in result["matches"]] == [
        ("/memory/a", 2, "x3"),
        ("/memory/b/0", 1, "x1"),
        ("/memory/b/2/z", 1, "x2"),
    ]
    assert search_value("/", {"k": "x"}, "x")["matches"][0]["path"] == "/k"


def test_search_is_case_sensitive_and_ignores_non_strings():
    assert search_value("/m", ["Alpha", 1, True, None, 2.5], "alpha")["matches"] == []
    assert search_value("/m", ["Alpha"], "(?i)alpha")["matches"][0]["text"] == "Alpha"


def test_search_catastrophic_pattern_is_linear():
    text = "a" * 200_000 + "!"
    started = time.monotonic()
    assert search_value("/m", text, "(a+)+$")["matches"] == []
    assert time.monotonic() - started < 2


def test_search_pattern_limits():
    assert failure(search_value, "/m", "x", "a" * 4097) == "search pattern limit exceeded"
    assert failure(search_value, "/m", "x", "(") == "invalid search pattern"
    assert failure(search_value, "/m", "x", r"(a)\1") == "invalid search pattern"
    assert failure(search_value, "/m", "x", "a{1000}{1000}") == "invalid search pattern"


def test_search_match_count_cap_sets_truncated():
    exactly = search_value("/m", "\n".join(["hit"] * 100), "hit")
    assert len(exactly["matches"]) == 100 and exactly["truncated"] is False
    over = search_value("/m", "\n".join(["hit"] * 101), "hit")
    assert len(over["matches"]) == 100 and over["truncated"] is True


def test_search_byte_cap_sets_truncated():
    line = "y" * (100 * 1024)
    result = search_value("/m", [line, line, line], "y")
    assert len(result["matches"]) == 2
    assert result["truncated"] is True


# ---------------------------------------------------------------- search over mounts


def test_search_folder_mount(tmp_path):
    make_files(tmp_path)
    result = search_mount(Mount.folder(tmp_path), "/mounts/files", "/", "just check")
    assert result["truncated"] is False
    assert result["matches"][0] == {"line": 2, "path": "/mounts/files/notes/checklist.md", "text": "just check"}


def test_search_mount_skips_unreadable_nodes(tmp_path):
    make_files(tmp_path)
    (tmp_path / "binary.bin").write_bytes(b"\xff\xfehello")
    (tmp_path / "link").symlink_to(tmp_path / "greeting.txt")
    result = search_mount(Mount.folder(tmp_path), "/mounts/files", "", "hello")
    assert [m["path"] for m in result["matches"]] == ["/mounts/files/greeting.txt"]


def test_search_mount_node_budget(tmp_path):
    for i in range(2100):
        (tmp_path / f"f{i:04}").write_text("needle" if i == 2099 else "hay")
    result = search_mount(Mount.folder(tmp_path), "/mounts/files", "/", "needle")
    assert result == {"matches": [], "truncated": True}


def test_search_value_mount():
    mount = Mount.value("test", {"a": ["one", "two"], "b": {"c": "three\none"}})
    result = search_mount(mount, "/mounts/v", "/", "one")
    assert [(m["path"], m["line"]) for m in result["matches"]] == [("/mounts/v/a/0", 1), ("/mounts/v/b/c", 2)]
    sub = search_mount(mount, "/mounts/v/b", "/b", "one")
    assert sub["matches"][0]["path"] == "/mounts/v/b/c"


def test_jq_serves_concurrent_callers():
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda n: run_jq(". * 2", n), range(20)))
    assert results == [[n * 2] for n in range(20)]
