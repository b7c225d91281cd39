"""The activation's direct paths agree with the general ones.

Every activation here runs twice, on twin processes: once as the host runs it, and once
with the direct paths replaced by the general walk they stand for (``tree.find_key`` by
``tree.find``, ``tree.set_key`` and ``tree.set_leaf_entry`` by ``tree.set_at``, no parse
table, no integer shortcut in ``to_node``, no namespace kept between activations, and a
commit that replays the mutations on the committed root and validates all of it). Both
must end alike: the same output or the same error (code and message), version, root
hash and snapshot bytes.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any, Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from svit import Limits, Process, activation, tree
from svit import guest as guest_module
from svit.activation import NamespacePool
from svit.errors import InternalError, SvitError
from svit.process import Process as ProcessClass

_ADDRESS = "svit://local/test/agree"


def lisp_text(text: str) -> str:
    """``text`` as a Svit Lisp string literal."""
    out = []
    for char in text:
        if char in '"\\':
            out.append("\\" + char)
        elif " " <= char <= "~":
            out.append(char)
        else:
            out.append(f"\\u{{{ord(char):x}}}")
    return '"' + "".join(out) + '"'


def lisp_value(value: Any) -> str:
    return "(json-parse " + lisp_text(json.dumps(value, ensure_ascii=False)) + ")"


@contextlib.contextmanager
def general_paths() -> Iterator[None]:
    """Every direct path replaced by the general one it stands for."""
    with pytest.MonkeyPatch.context() as m:
        m.setattr(tree, "find_key", lambda mapping, key: tree.find(mapping, (key,)))
        m.setattr(tree, "set_key", lambda mapping, key, node: tree.set_at(mapping, (key,), node))
        m.setattr(tree, "set_leaf_entry",
                  lambda root, position, node: tree.set_at(root, (tree.Node.child_names(root)[position],), node))
        m.setattr(activation, "parsed_before", lambda text: None)

        def to_node(value: Any, limits: Limits, budget: Any = None) -> tree.Node:
            node = guest_module._convert(value, limits, budget)
            tree.validate_value(node, limits, scripts_allowed=False)
            return node

        m.setattr(activation, "to_node", to_node)
        m.setattr(activation, "NAMESPACES", NamespacePool(size=0))
        m.setattr(activation, "_LAST_SCRIPT", None)
        original = ProcessClass._commit

        def commit(self: Process, mutations: Any, source: str, applied: Any = None, *args: Any, **kwargs: Any) -> Any:
            # The committed root with the mutations replayed, validated in full.
            args = args[:7] + (False,) if len(args) >= 8 else args
            kwargs.pop("memory_only", None)
            return original(self, mutations, source, None, *args, **kwargs)

        m.setattr(ProcessClass, "_commit", commit)
        yield


def outcome(call: Any) -> tuple[str, Any]:
    try:
        result = call()
    except InternalError:
        raise
    except SvitError as exc:
        return "error", (exc.code, exc.message)
    return "ok", (result.output, result.logs, result.changed, result.messages, result.version, result.root_hash)


def state(p: Process) -> tuple[Any, ...]:
    return p.version, p.root_hash, p.snapshot(), p.read("/memory")


_KEYS = st.one_of(
    st.sampled_from(["a", "b", "0", "1", "", " ", "é", "memory", "lib", ".", "..", "a.b", "x y", "\u0000", "%2F", "k" * 70]),
    st.text(st.sampled_from("abcdefgh0123é\u0000 .-"), min_size=1, max_size=3),
)
_SCALARS = st.one_of(st.integers(-3, 3), st.just(2**62), st.booleans(), st.none(), st.floats(-2, 2, allow_nan=False),
                     st.sampled_from(["", "x", "text " * 6, "é"]))
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(_KEYS, inner, max_size=4)),
    max_leaves=10,
)
_PATH_TAILS = st.lists(_KEYS.filter(lambda k: k and k not in (".", "..")), max_size=3)
_PATHS = _PATH_TAILS.map(lambda tail: "/".join(["/memory", *tail]))


def _op(kind: str, path: str = "", value: Any = None) -> str:
    if kind == "write":
        return f"(write {lisp_text(path)} {lisp_value(value)})"
    if kind == "write-int":
        return f"(write {lisp_text(path)} {int(value) if type(value) is int else 7})"
    if kind == "remove":
        return f"(remove {lisp_text(path)})"
    if kind == "read":
        return f"(log-info! \"read\" (value-map \"v\" (read {lisp_text(path)})))"
    if kind == "safe-write":
        return (f"(safe-call (lambda (v) (do (write {lisp_text(path)} v) (write \"/memory/zz\" 1) (first 1)))"
                f" {lisp_value(value)})")
    if kind == "send":
        return f"(send! \"svit://local/test/peer\" {lisp_value(value)})"
    if kind == "lib":
        return '(write "/lib/extra" (value-map "source" "(define (main input) (do (write \\"/memory/e\\" input) 3))"))'
    if kind == "exec":
        return f"(exec \"/lib/extra\" {lisp_value(value)})"
    if kind == "value-get":
        return (f"(log-info! \"value-get\" (value-map \"v\" (value-get {lisp_value(value)}"
                f" {lisp_text(path[len('/memory'):] or '/')})))")
    if kind == "map-get":
        return (f"(log-info! \"map-get\" (value-map \"v\" (map-get-safe (read \"/memory\")"
                f" {lisp_text(path.rsplit('/', 1)[-1])})))")
    if kind == "fail":
        return "(first 1)"
    raise AssertionError(kind)


# Mostly a few keys, so that what one operation writes the next reads, replaces or removes.
_TOP = st.one_of(st.sampled_from(["a", "b", "k"]), _KEYS.filter(lambda k: k and k not in (".", ".."))).map(
    lambda k: "/memory/" + k)
_OPS = st.one_of(
    # Most of an activation's work: top-level keys of /memory read and written (the direct paths).
    st.builds(_op, st.just("write"), _TOP, _VALUES),
    st.builds(_op, st.just("write-int"), _TOP, _SCALARS),
    st.builds(_op, st.just("read"), _TOP),
    st.builds(_op, st.just("map-get"), _TOP),
    st.builds(_op, st.just("remove"), _TOP),
    st.builds(_op, st.just("write"), _PATHS, _VALUES),
    st.builds(_op, st.just("write-int"), _PATHS, _SCALARS),
    st.builds(_op, st.just("remove"), _PATHS),
    st.builds(_op, st.just("read"), _PATHS),
    st.builds(_op, st.just("safe-write"), _PATHS, _VALUES),
    st.builds(_op, st.just("send"), st.just(""), _SCALARS),
    st.builds(_op, st.just("lib")),
    st.builds(_op, st.just("exec"), st.just(""), _SCALARS),
    st.builds(_op, st.just("value-get"), _PATHS, _VALUES),
    st.builds(_op, st.just("fail")),
)
_ACTIVATIONS = st.lists(st.lists(_OPS, min_size=1, max_size=12), min_size=1, max_size=5)
_LIMITS = st.builds(
    lambda nodes, text, entries, messages, steps: Limits(
        max_tree_nodes=nodes, max_tree_text_bytes=text, max_value_entries=entries, max_messages=messages,
        max_steps=steps),
    st.integers(56, 120), st.integers(590, 1400), st.integers(7, 40), st.integers(1, 3), st.integers(2_000, 60_000),
)


class _Observer:
    def before_activation(self, request: Any) -> Any:
        return request


def twins(limits: Limits, sink: bool) -> tuple[Process, Process]:
    made = []
    for index in range(2):
        p = (Process.builder(_ADDRESS).memory("a", 1).memory("k", {"x": [1, 2]}).limits(limits)
             .library("extra", "(define (main input) 1)").build())
        if sink:
            p = Process(p.address, p.root, p.version, p.limits, sink=_Recorder())
        if index:
            p.hooks.append(_Observer())  # the general twin takes the path with hooks
        made.append(p)
    return made[0], made[1]


class _Recorder:
    def __init__(self) -> None:
        self.seen: list[Any] = []

    def commit(self, transition: Any) -> None:
        self.seen.append((transition.version_after, transition.root_after.hash,
                          [m.plain() for m in transition.mutations]))

    def effects_guard(self) -> Any:
        raise AssertionError("no external effects here")


@given(activations=_ACTIVATIONS, limits=_LIMITS, sink=st.booleans(), dry=st.lists(st.booleans(), min_size=5, max_size=5))
@settings(max_examples=150, deadline=None)
def test_direct_paths_agree_with_the_general_ones(activations: list[list[str]], limits: Limits, sink: bool,
                                                  dry: list[bool]) -> None:
    fast, general = twins(limits, sink)
    for ops, dry_run in zip(activations, dry):
        source = "(define (main input) (do " + " ".join(ops) + " (read \"/memory\")))"
        seen = outcome(lambda: fast.exec_inline(source, None, dry_run=dry_run))
        with general_paths():
            expected = outcome(lambda: general.exec_inline(source, None, dry_run=dry_run))
        assert seen == expected, source
        assert state(fast) == state(general)
        seen = outcome(lambda: fast.exec("/lib/extra", 5, dry_run=dry_run))
        with general_paths():
            expected = outcome(lambda: general.exec("/lib/extra", 5, dry_run=dry_run))
        assert seen == expected
        assert state(fast) == state(general)
    if sink:
        assert fast.sink.seen == general.sink.seen  # type: ignore[union-attr]


@pytest.mark.parametrize("over", [0, 1])
@pytest.mark.parametrize("kind", ["nodes", "text"])
@pytest.mark.parametrize("sink", [False, True])
def test_a_write_that_reaches_or_passes_a_tree_limit_by_one_is_judged_alike(over: int, kind: str, sink: bool) -> None:
    probe, _ = twins(Limits(), False)
    count, text = probe.root.count, probe.root.text
    # /memory/z = [1, 2, 3] adds 4 nodes and 1 text byte; /memory/z = "xxxx" adds 1 node and 5 bytes.
    if kind == "nodes":
        limits, value = Limits(max_tree_nodes=count + 4 - over), "(value-array 1 2 3)"
    else:
        limits, value = Limits(max_tree_text_bytes=text + 5 - over), '"xxxx"'
    fast, general = twins(limits, sink)
    source = f'(define (main input) (do (write "/memory/z" {value}) (read "/memory/z")))'
    seen = outcome(lambda: fast.exec_inline(source))
    with general_paths():
        expected = outcome(lambda: general.exec_inline(source))
    assert seen == expected
    assert seen[0] == ("error" if over else "ok")
    assert state(fast) == state(general)
