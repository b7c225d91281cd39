"""An activation reuses a script's compiled code only while the script and limits are the
same: an edit of /lib (in the same activation or an earlier one), a rolled-back edit,
other limits and a fork each run exactly the code and state they should. Parsed paths
are reused too, and a malformed one is refused every time."""

from __future__ import annotations

import pytest

from svit import Limits, Process
from svit.activation import compile_check
from svit.errors import InvalidPath, SvitError
from svit.lisp.budget import Budget
from svit.paths import parse

COUNTER = (
    '(define (main input) (let ((n (+ (read "/memory/count") (map-get input "by"))))'
    ' (do (write "/memory/count" n) n)))'
)
DOUBLER = '(define (main input) (let ((n (* 2 (read "/memory/count")))) (do (write "/memory/count" n) n)))'


def counter(address: str = "svit://local/test/reuse", limits: Limits | None = None) -> Process:
    builder = Process.builder(address).memory("count", 1).library("counter", COUNTER)
    if limits is not None:
        builder.limits(limits)
    return builder.build()


def test_a_lib_edit_by_the_host_runs_the_new_script_next() -> None:
    process = counter()
    assert process.exec("/lib/counter", {"by": 1}).output == 2
    process.write("/lib/counter", {"source": DOUBLER})
    assert process.exec("/lib/counter", {"by": 1}).output == 4


def test_a_lib_edit_in_an_activation_runs_in_the_same_activation_and_after() -> None:
    process = counter()
    process.exec("/lib/counter", {"by": 1})
    process.write("/lib/editor", {"source": _editor_source()})
    assert process.exec("/lib/editor", {"by": 1}).output == 4  # the edited counter, at once
    assert process.exec("/lib/counter", {"by": 1}).output == 8


def _editor_source() -> str:
    quoted = DOUBLER.replace("\\", "\\\\").replace('"', '\\"')
    return f'(define (main input) (do (write "/lib/counter" (value-map "source" "{quoted}")) (exec "/lib/counter" input)))'


def test_a_rolled_back_lib_edit_leaves_the_old_script_running() -> None:
    process = counter()
    process.exec("/lib/counter", {"by": 1})
    quoted = DOUBLER.replace('"', '\\"')
    failing = f'(define (main input) (do (write "/lib/counter" (value-map "source" "{quoted}")) (exec "/lib/counter" input) (/ 1 (map-get input "zero"))))'
    process.write("/lib/failing", {"source": failing})
    with pytest.raises(SvitError):
        process.exec("/lib/failing", {"by": 1, "zero": 0})
    assert process.exec("/lib/counter", {"by": 1}).output == 3


def test_other_limits_compile_the_same_script_again() -> None:
    roomy = counter("svit://local/test/roomy")
    assert roomy.exec("/lib/counter", {"by": 1}).output == 2
    # Enough steps to compile the script, too few to also run it: nothing reused hides that.
    tight = counter("svit://local/test/tight", Limits(max_steps=compile_steps() + 2))
    with pytest.raises(SvitError) as refused:
        tight.exec("/lib/counter", {"by": 1})
    assert "steps" in str(refused.value)
    assert tight.read("/memory/count") == 1


def compile_steps() -> int:
    budget = Budget(1_000_000, 60_000)
    compile_check("counter", COUNTER, Limits(), budget)
    return budget.used


def test_a_fork_and_its_parent_share_no_state_through_reused_code() -> None:
    parent = counter("svit://local/test/parent")
    parent.exec("/lib/counter", {"by": 1})
    child = parent.fork("svit://local/test/child")
    assert child.exec("/lib/counter", {"by": 10}).output == 12
    assert parent.exec("/lib/counter", {"by": 1}).output == 3
    restored = Process.restore(child.snapshot())
    assert restored.exec("/lib/counter", {"by": 100}).output == 112
    assert child.read("/memory/count") == 12 and parent.read("/memory/count") == 3


def test_a_parsed_path_is_the_same_every_time_and_a_bad_one_fails_every_time() -> None:
    assert parse("/memory/count") == parse("/memory/count") == ("memory", "count")
    for _ in range(2):
        with pytest.raises(InvalidPath, match="empty path segment"):
            parse("/memory//count")
        with pytest.raises(InvalidPath, match="must be absolute"):
            parse("memory/count")
    long = "/memory/" + "k" * 1000
    assert parse(long) == ("memory", "k" * 1000) == parse(long)
    assert parse("/") == parse("") == ()


def test_script_names_found_valid_are_kept_and_a_bad_one_is_refused_every_time() -> None:
    from svit.errors import InvalidScriptName
    from svit.paths import validate_script_name

    assert validate_script_name("counter") == validate_script_name("counter") == "counter"
    for _ in range(2):
        with pytest.raises(InvalidScriptName):
            validate_script_name("no/slash")
        with pytest.raises(InvalidScriptName):
            validate_script_name(7)  # type: ignore[arg-type]
