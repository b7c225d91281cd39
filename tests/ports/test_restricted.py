"""Restricted Python ports: escape attempts fail, runaway code is stopped, real ports work."""

from __future__ import annotations

import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from svit import PortError, Ports, Process
from svit.errors import InvalidScriptName, SvitError
from svit.ports.restricted import RestrictedPort, load_ports_directory, restricted_port

ADDRESS = "svit://local/test/restricted"


def port_of(body: str, **kwargs: Any) -> RestrictedPort:
    return RestrictedPort(textwrap.dedent(body), **kwargs)


def escape_fails(body: str, input: Any = None, **kwargs: Any) -> str:
    """The attempt must fail, either when compiled (ValueError) or when run (PortError)."""
    try:
        port = port_of(body, **kwargs)
    except ValueError as exc:
        return f"compile: {exc}"
    with pytest.raises(PortError) as caught:
        result = port.execute(None, input if input is not None else {"x": 1})
        pytest.fail(f"escape returned {result!r}")
    return f"run: {caught.value}"


# ---------------------------------------------------------------------------- escape attempts

ESCAPES: dict[str, tuple[str, str]] = {
    "import os": ("import os\ndef run(input, context):\n    return os.listdir('/')\n", "__import__ not found"),
    "import inside run": ("def run(input, context):\n    import os\n    return os.getcwd()\n", "__import__ not found"),
    "from import": ("def run(input, context):\n    from os import environ\n    return dict(environ)\n", "__import__ not found"),
    "__import__": ("def run(input, context):\n    return __import__('os').getcwd()\n", "invalid variable name"),
    "open": ("def run(input, context):\n    return open('/etc/passwd').read()\n", "name 'open' is not defined"),
    "eval": ("def run(input, context):\n    return eval('1 + 1')\n", "Eval calls are not allowed"),
    "exec": ("def run(input, context):\n    exec('x = 1')\n    return 1\n", "Exec calls are not allowed"),
    "compile": ("def run(input, context):\n    return compile('1', 'f', 'eval')\n", "name 'compile' is not defined"),
    "globals": ("def run(input, context):\n    return list(globals())\n", "name 'globals' is not defined"),
    "locals": ("def run(input, context):\n    return list(locals())\n", "name 'locals' is not defined"),
    "subclasses": ("def run(input, context):\n    return ().__class__.__bases__[0].__subclasses__()\n", "invalid attribute name"),
    "input.__class__": ("def run(input, context):\n    return str(input.__class__)\n", "invalid attribute name"),
    "getattr __dict__": ("def run(input, context):\n    return getattr(input, '__dict__')\n", "'__dict__' is not allowed"),
    "getattr built name": ("def run(input, context):\n    return str(getattr(input, '_' + '_class_' + '_'))\n", "is not allowed"),
    "type mro": ("def run(input, context):\n    return type(input).__mro__\n", "invalid attribute name"),
    "type()": ("def run(input, context):\n    return str(type(input))\n", "name 'type' is not defined"),
    "format attribute": ("def run(input, context):\n    return '{0.__class__}'.format(1)\n", "'format' is not allowed"),
    "format via getattr": ("def run(input, context):\n    return getattr('{0.__class__}', 'format')(1)\n", "'format' is not allowed"),
    "format_map": ("def run(input, context):\n    return '{x.__class__}'.format_map({'x': 1})\n", "'format_map' is not allowed"),
    "str.format on the type": ("def run(input, context):\n    return str.format('{0.__class__}', 1)\n", "'format' is not allowed"),
    "attributes of types": ("def run(input, context):\n    return str.maketrans('a', 'b')\n", "not accessible"),
    "gi_frame": ("def run(input, context):\n    g = (x for x in [1])\n    return g.gi_frame.f_globals\n", "restricted name"),
    "gi_frame via getattr": (
        "def run(input, context):\n    g = (x for x in [1])\n    return getattr(getattr(g, 'gi_' + 'frame'), 'f_' + 'globals')\n",
        "'gi_frame' is not allowed",
    ),
    "generator attributes": ("def run(input, context):\n    g = (x for x in [1])\n    return getattr(g, 'send')\n", "not accessible"),
    "traceback frames": (
        "def run(input, context):\n    try:\n        1 / 0\n    except Exception as e:\n        return getattr(e, 'with_traceback')\n",
        "not accessible",
    ),
    "function globals for sys.modules": (
        "def run(input, context):\n    return getattr(context['read'], '_' + '_globals_' + '_')['sys'].modules\n",
        "is not allowed",
    ),
    "builtin __self__ for sys.modules": (
        "def run(input, context):\n    return getattr(len, '_' + '_self_' + '_')\n",
        "is not allowed",
    ),
    "sys import": ("import sys\ndef run(input, context):\n    return list(sys.modules)\n", "__import__ not found"),
    "os.environ": ("def run(input, context):\n    import os\n    return dict(os.environ)\n", "__import__ not found"),
    "write attribute on data": ("def run(input, context):\n    input.x = 1\n    return input\n", "has no attribute"),
    "write attribute on function": ("def run(input, context):\n    f = context['read']\n    f.x = 1\n    return 1\n", ""),
    "setattr": ("def run(input, context):\n    setattr(context['read'], 'x', 1)\n    return 1\n", "name 'setattr' is not defined"),
    "breakpoint": ("def run(input, context):\n    breakpoint()\n    return 1\n", "reserved name"),
    "vars": ("def run(input, context):\n    return vars()\n", "name 'vars' is not defined"),
    "dir": ("def run(input, context):\n    return dir(input)\n", "name 'dir' is not defined"),
    "closure walk": (
        "def run(input, context):\n    secret = 1\n    f = lambda: secret\n    return f.__closure__[0].cell_contents\n",
        "invalid attribute name",
    ),
    "closure via getattr": (
        "def run(input, context):\n    secret = 1\n    f = lambda: secret\n    return getattr(f, '_' + '_closure_' + '_')\n",
        "is not allowed",
    ),
    "class definition": ("class A:\n    pass\ndef run(input, context):\n    return 1\n", "__build_class__"),
    "f-string attribute": ("def run(input, context):\n    return f'{input.__class__}'\n", "invalid attribute name"),
    "help/exit": ("def run(input, context):\n    exit(0)\n", "name 'exit' is not defined"),
    "ungranted capability": ("def run(input, context):\n    return context['capabilities']['shell']('id')\n", "KeyError"),
}


@pytest.mark.parametrize("name", sorted(ESCAPES))
def test_escape_attempt_fails(name: str) -> None:
    body, expected = ESCAPES[name]
    text = escape_fails(body)
    assert expected in text, text


def test_there_are_at_least_twenty_escape_attempts() -> None:
    assert len(ESCAPES) >= 20


def test_infinite_loop_is_stopped_within_its_budget() -> None:
    port = port_of("def run(input, context):\n    while True:\n        pass\n", timeout=1.0)
    started = time.monotonic()
    with pytest.raises(PortError, match="restricted port timed out"):
        port.execute(None, {})
    assert time.monotonic() - started < 1.0 + 1.0


def test_memory_bombs_are_stopped() -> None:
    assert "memory limit" in escape_fails("def run(input, context):\n    return 'a' * (10 ** 10)\n")
    started = time.monotonic()
    text = escape_fails(
        "def run(input, context):\n    blocks = []\n    while True:\n        blocks.append('x' * 1000000)\n",
        timeout=3.0,
    )
    assert "memory limit" in text or "timed out" in text
    assert time.monotonic() - started < 3.0 + 1.5


def test_recursion_bomb_is_stopped() -> None:
    assert "RecursionError" in escape_fails("def run(input, context):\n    def f(n):\n        return f(n + 1)\n    return f(0)\n")


def test_huge_integer_is_stopped_by_the_clock() -> None:
    assert "timed out" in escape_fails("def run(input, context):\n    return str(9 ** (9 ** 9))\n", timeout=1.0)


def test_system_exit_is_just_a_failure() -> None:
    assert "SystemExit" in escape_fails("def run(input, context):\n    raise SystemExit(0)\n")


def test_calls_are_independent_and_may_run_concurrently() -> None:
    # Each call is a fresh child: module state does not survive, threads do not interfere.
    import threading

    port = port_of("state = []\ndef run(input, context):\n    state.append(input)\n    return [len(state), input * 2]\n")
    results: list[Any] = []

    def call(n: int) -> None:
        results.append(port.execute(None, n))

    threads = [threading.Thread(target=call, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(results) == [[1, 2 * n] for n in range(6)]


def test_output_must_be_json_like() -> None:
    assert "not JSON-like" in escape_fails("def run(input, context):\n    return len\n")
    assert "keys must be text" in escape_fails("def run(input, context):\n    return {1: 2}\n")
    assert "non-finite" in escape_fails("def run(input, context):\n    return float('inf')\n")
    assert port_of("def run(input, context):\n    return (1, 2.0, None, True)\n").execute(None, 0) == [1, 2.0, None, True]


def test_source_must_compile_and_define_run() -> None:
    with pytest.raises(ValueError, match="does not compile"):
        port_of("def run(input, context)\n    return 1\n")
    with pytest.raises(ValueError, match="must define run"):
        port_of("def main(input, context):\n    return 1\n")
    with pytest.raises(ValueError, match="capability names"):
        port_of("def run(input, context):\n    return 1\n", capabilities={"_x": len})


# ---------------------------------------------------------------------------- ports that work


def test_port_computing_from_input() -> None:
    port = port_of(
        """
        def run(input, context):
            words = input["text"].split()
            counts = {}
            for word in words:
                counts[word] = counts.get(word, 0) + 1
            total = 0
            for n in counts.values():
                total += n
            return {"counts": counts, "total": total, "top": sorted(counts, key=lambda w: -counts[w])[0]}
        """
    )
    assert port.execute(None, {"text": "a b a c a b"}) == {"counts": {"a": 3, "b": 2, "c": 1}, "total": 6, "top": "a"}


def test_port_reads_the_committed_process_through_its_context() -> None:
    port = port_of(
        """
        '''Summarises memory.'''
        def run(input, context):
            names = context["discover"]("/memory")
            return {
                "address": context["address"],
                "names": names,
                "count": context["read"]("/memory/count"),
                "facts": context["stat"]("/memory/count"),
                "missing": context["read"]("/memory/absent"),
            }
        """
    )
    p = (
        Process.builder(ADDRESS)
        .memory("count", 41)
        .memory("seen", None)
        .library("use", '(define (main input) (do (write "/memory/count" 100) (write "/memory/seen" (port-call "summary" input)) true))')
        .ports(Ports().port("summary", port))
        .build()
    )
    facts_before = p.stat("/memory/count")
    assert p.read("/ports/summary")["description"] == "Summarises memory." and p.read("/ports/summary")["effect"] == "read"
    p.exec("/lib/use", {})
    seen = p.read("/memory/seen")
    # The port sees the committed process, not the activation's working copy.
    assert seen["count"] == 41 and seen["address"] == ADDRESS and seen["names"] == ["count", "seen"]
    assert seen["facts"] == facts_before and seen["missing"] is None
    assert p.read("/memory/count") == 100


def test_context_errors_reach_the_port_as_exceptions() -> None:
    port = port_of(
        """
        def run(input, context):
            try:
                context["discover"]("/nowhere")
            except RuntimeError as e:
                return "caught: " + str(e)
        """
    )
    p = Process.builder(ADDRESS).library("use", '(define (main input) (port-call "p" input))').ports(Ports().port("p", port)).build()
    assert p.exec("/lib/use", None).output.startswith("caught: invalid state path")


def test_port_using_a_granted_capability() -> None:
    calls: list[tuple[Any, ...]] = []

    def lookup(key: str, default: Any = None) -> Any:
        calls.append((key, default))
        return {"blue": "#0000ff"}.get(key, default)

    port = restricted_port(
        "def run(input, context):\n    c = context['capabilities']\n    return [c['lookup'](k, default='?') for k in input]\n",
        capabilities={"lookup": lookup},
    )
    assert port.descriptor().effect == "host-defined" and "capability lookup" in port.descriptor().limits
    assert port.execute(None, ["blue", "red"]) == ["#0000ff", "?"]
    assert calls == [("blue", "?"), ("red", "?")]


def test_capability_failure_and_non_json_results_are_reported_as_text() -> None:
    def refusing(x: Any) -> Any:
        raise PortError("host said no")

    def broken(x: Any) -> Any:
        raise FileNotFoundError(2, "No such file or directory", "/srv/host-only/table.csv")

    port = port_of(
        """
        def run(input, context):
            out = []
            for name in ["refusing", "broken", "opaque"]:
                try:
                    context["capabilities"][name](1)
                except RuntimeError as e:
                    out.append(str(e))
            return out
        """,
        capabilities={"refusing": refusing, "broken": broken, "opaque": lambda x: object()},
    )
    out = port.execute(None, None)
    # A deliberate PortError's text crosses; any other host exception only by its kind.
    assert out == ["host said no", "FileNotFoundError", "TypeError"]


def test_ports_directory_loaded_and_called_from_a_script(tmp_path: Path) -> None:
    (tmp_path / "double.py").write_text(
        "'''Doubles numbers.'''\nINPUT_SCHEMA = {'type': 'array'}\n\ndef run(input, context):\n    return [n * 2 for n in input]\n"
    )
    (tmp_path / "greet.py").write_text("def run(input, context):\n    return 'hello ' + input\n")
    (tmp_path / "notes.txt").write_text("not a port")
    ports = load_ports_directory(tmp_path)
    assert ports.names() == ["double", "greet"]
    p = (
        Process.builder(ADDRESS)
        .library("use", '(define (main input) (list (port-call "double" (value-get input "/nums")) (port-call "greet" (value-get input "/who"))))')
        .ports(ports)
        .build()
    )
    assert p.read("/ports/double")["input_schema"] == {"type": "array"}
    assert p.read("/ports/double")["description"] == "Doubles numbers."
    assert p.exec("/lib/use", {"nums": [1, 2.5], "who": "svit"}).output == [[2, 5.0], "hello svit"]


def test_port_failure_reaches_the_script_and_rolls_back() -> None:
    port = port_of("def run(input, context):\n    return open('/etc/passwd')\n")
    p = (
        Process.builder(ADDRESS)
        .memory("x", 0)
        .library("use", '(define (main input) (do (write "/memory/x" 1) (port-call "p" input)))')
        .ports(Ports().port("p", port))
        .build()
    )
    with pytest.raises(SvitError) as caught:
        p.exec("/lib/use", None)
    assert "port /ports/p failed: restricted port raised NameError" in caught.value.message
    assert p.version == 0 and p.read("/memory/x") == 0


def test_ports_directory_validates_names_and_code(tmp_path: Path) -> None:
    bad_name = tmp_path / "names"
    bad_name.mkdir()
    (bad_name / "has space.py").write_text("def run(input, context):\n    return 1\n")
    with pytest.raises(InvalidScriptName):
        load_ports_directory(bad_name)
    bad_code = tmp_path / "code"
    bad_code.mkdir()
    (bad_code / "evil.py").write_text("def run(input, context):\n    return input.__class__\n")
    with pytest.raises(ValueError, match="does not compile"):
        load_ports_directory(bad_code)
    with pytest.raises(ValueError, match="does not exist"):
        load_ports_directory(tmp_path / "absent")
