"""A guest may replace ``/memory`` wholesale with any value (reference: "a guest/host
write "/memory" may replace it wholesale"). The activation's direct paths for a top-level
key (``tree.find_key``, ``tree.set_key``, the /memory-only commit check) assume a map;
when it is not one they must behave as the general walk does, as the host's own reads
and writes do on the same state."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from svit import Process
from svit.errors import InternalError, SvitError

GUEST = """
(define (main input)
  (let ((op (map-get input "op")) (path (map-get input "path")))
    (cond
      ((= op "write") (do (write path (map-get input "value")) 0))
      ((= op "remove") (do (remove path) 0))
      (else (read path)))))
"""

_SCALARS = st.one_of(st.integers(-3, 3), st.booleans(), st.none(), st.sampled_from(["", "x", "text"]))
_VALUES = st.one_of(
    _SCALARS,
    st.lists(_SCALARS, max_size=3),
    st.dictionaries(st.sampled_from(["0", "a", "k"]), _SCALARS, max_size=3),
)
_PATHS = st.sampled_from(["/memory", "/memory/a", "/memory/k", "/memory/0", "/memory/1", "/memory/a/0"])
_STEPS = st.one_of(
    st.fixed_dictionaries({"op": st.just("write"), "path": _PATHS, "value": _VALUES}),
    st.fixed_dictionaries({"op": st.just("remove"), "path": _PATHS.filter(lambda p: p != "/memory")}),
    st.fixed_dictionaries({"op": st.just("read"), "path": _PATHS}),
)


def guest_process() -> Process:
    return Process.builder("svit://local/test/replaced").memory("k", 1).library("op", GUEST).build()


def host_process() -> Process:
    return Process.builder("svit://local/test/replaced").memory("k", 1).library("op", GUEST).build()


def outcome(call: Any) -> tuple[str, Any]:
    try:
        return "ok", call()
    except InternalError:
        raise
    except SvitError as exc:
        return "error", exc.code


def host_step(p: Process, step: dict[str, Any]) -> tuple[str, Any]:
    op, path = step["op"], step["path"]
    if op == "write":
        return outcome(lambda: (p.write(path, step["value"]), 0)[1])
    if op == "remove":
        return outcome(lambda: (p.remove(path), 0)[1])
    # The host's read says None for an absent path; the guest's too.
    return outcome(lambda: p.read(path))


def guest_step(p: Process, step: dict[str, Any]) -> tuple[str, Any]:
    return outcome(lambda: p.exec("/lib/op", step).output)


@given(steps=st.lists(_STEPS, min_size=1, max_size=10))
@settings(max_examples=150, deadline=None)
def test_guest_reads_and_writes_agree_with_the_hosts_whatever_memory_holds(steps: list[dict[str, Any]]) -> None:
    guest, host = guest_process(), host_process()
    for step in steps:
        seen, expected = guest_step(guest, step), host_step(host, step)
        if step["op"] == "read" and expected[0] == "error":
            # The host's read of a path through a scalar is an error, as the guest's.
            assert seen[0] == "error"
        else:
            assert seen == expected, step
        assert guest.read("/memory") == host.read("/memory")


def test_memory_replaced_by_a_scalar_commits_and_later_activations_see_it() -> None:
    p = guest_process()
    p.exec("/lib/op", {"op": "write", "path": "/memory", "value": 5})
    assert p.read("/memory") == 5
    assert p.exec("/lib/op", {"op": "read", "path": "/memory"}).output == 5
    version = p.version
    for step in ({"op": "write", "path": "/memory/k", "value": 2}, {"op": "read", "path": "/memory/k"}):
        try:
            p.exec("/lib/op", step)
        except InternalError:
            raise
        except SvitError as exc:
            assert exc.code == "invalid_path"
    assert p.version == version


def test_a_key_written_below_memory_replaced_by_an_array_is_an_index() -> None:
    p = guest_process()
    p.exec("/lib/op", {"op": "write", "path": "/memory", "value": [1, 2, 3]})
    p.exec("/lib/op", {"op": "write", "path": "/memory/0", "value": 9})
    assert p.read("/memory") == [9, 2, 3]
    assert p.exec("/lib/op", {"op": "read", "path": "/memory/1"}).output == 2
