"""Restricted Python ports: port code written as source text, run in a sandbox.

An operator can drop ``summarise.py`` into a ports directory and a script can then call
``(port-call "summarise" input)``. The file's contract:

```python
'''Adds two numbers.'''            # optional: first docstring line becomes the description
INPUT_SCHEMA = {"type": "object"}   # optional: a literal, shown at /ports/<name>

def run(input, context):
    # input:   the JSON-like value the script passed (None, bool, int, float, str, list, dict)
    # context: a dict of plain values and functions:
    #   context["address"]            the process address (text)
    #   context["read"](path)         committed value at path, or None
    #   context["stat"](path)         facts record, or None
    #   context["discover"](path)     child names
    #   context["capabilities"][name](*args, **kwargs)   what the host granted, nothing else
    return {"any": ["JSON-like", "data"]}
```

Two walls, because one is not enough:

1. **Language.** The source is compiled with RestrictedPython (``compile_restricted``):
   names and attributes starting with ``_`` are rejected at compile time, ``exec`` /
   ``eval`` calls too. At run time the code sees only a small set of builtins (no
   ``open``, ``__import__``, ``type``, ``vars``, ``dir``, ``globals``, ``setattr``,
   ``id``, classes ...), and every attribute read goes through a guard that allows
   non-underscore attributes **only on plain data** (str, int, float, list, dict, ...)
   and never ``format`` / ``format_map`` (the ``'{0.__class__}'.format`` trick) or the
   frame/code attributes (``gi_frame``, ``f_globals``, ...). Functions, generators,
   exceptions and types expose no attributes at all. Writes go through
   RestrictedPython's write guard: items of dicts and lists only.
2. **Process.** Each call runs in a fresh interpreter (``python -I``, empty
   environment, cwd ``/``) with an address-space rlimit (default 256 MiB above its
   start), a CPU rlimit, no file writes (``RLIMIT_FSIZE`` 0), and a wall-clock budget
   (default 5 s) after which the host kills it: ``restricted port timed out``. Nothing
   survives between calls. This contains runaway loops, allocation and recursion
   bombs, and limits the damage if the language wall ever fails; it is not an OS
   sandbox (no namespaces or seccomp).

Host data crosses only as JSON over the child's stdin/stdout in length-prefixed
frames (never pickle, so a compromised child cannot make the host run code).
``read`` / ``stat`` / ``discover`` and granted capabilities are **remote calls**: the
child sends a request frame, the host runs the function against the committed
process (or the host callable) and answers with JSON. Capabilities therefore run in
the host with JSON arguments chosen by untrusted code: grant only functions that are
safe for any such arguments. Time spent answering counts against the budget.

Output: the value ``run`` returns must be JSON-like (None, bool, int, float, str,
list/tuple, dict with text keys); ``print`` output is discarded. Any exception becomes
``PortError("restricted port raised <Type>: <message>")``.
"""

from __future__ import annotations

import ast
import base64
import json
import marshal
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

try:
    from RestrictedPython.compile import compile_restricted_exec
except ImportError as missing:  # an optional extra: say which one
    raise ImportError(
        f"svit.ports.restricted needs the 'restricted' extra ({missing.name} is not installed): "
        "pip install 'svit[restricted]'",
        name=missing.name,
    ) from missing

from svit import PortContext, PortDescriptor, PortError, Ports, failure_text
from svit.paths import validate_script_name
from svit.values import to_json

__all__ = [
    "DEFAULT_MEMORY_BYTES",
    "DEFAULT_TIMEOUT",
    "MAX_FRAME_BYTES",
    "MAX_SOURCE_BYTES",
    "RestrictedPort",
    "load_ports_directory",
    "restricted_port",
]

DEFAULT_TIMEOUT = 5.0
DEFAULT_MEMORY_BYTES = 256 * 1024 * 1024
MAX_FRAME_BYTES = 16 * 1024 * 1024
MAX_SOURCE_BYTES = 1024 * 1024
_HEADER = 4

#: The child's program. It is trusted code that sets the limits on itself before it
#: runs anything untrusted; the untrusted code can name none of its globals.
_RUNNER = r'''
import os, sys
_proto_in = os.fdopen(os.dup(0), "rb", buffering=0)
_proto_out = os.fdopen(os.dup(1), "wb", buffering=0)
_null = os.open(os.devnull, os.O_RDWR)
for _fd in (0, 1, 2):
    os.dup2(_null, _fd)
import json, marshal, operator, resource, struct, base64
from RestrictedPython.Guards import (safe_builtins, guarded_unpack_sequence,
    guarded_iter_unpack_sequence, full_write_guard, INSPECT_ATTRIBUTES)
from RestrictedPython.PrintCollector import PrintCollector


def _read_exact(n):
    data = b""
    while len(data) < n:
        chunk = _proto_in.read(n - len(data))
        if not chunk:
            raise SystemExit(3)
        data += chunk
    return data


def _recv():
    (size,) = struct.unpack(">I", _read_exact(4))
    return json.loads(_read_exact(size))


def _send(message):
    data = json.dumps(message, allow_nan=False, ensure_ascii=False).encode("utf-8")
    _proto_out.write(struct.pack(">I", len(data)) + data)


def _plain(value, depth=0):
    t = type(value)
    if depth > 128:
        raise ValueError("restricted port output nests too deeply")
    if value is None or t in (bool, int, str):
        return value
    if t is float:
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError("restricted port output has a non-finite number")
        return value
    if t in (list, tuple):
        return [_plain(item, depth + 1) for item in value]
    if t is dict:
        out = {}
        for key, item in value.items():
            if type(key) is not str:
                raise ValueError("restricted port output map keys must be text")
            out[key] = _plain(item, depth + 1)
        return out
    raise ValueError("restricted port output is not JSON-like data")


def _remote(op, name=None):
    def call(*args, **kwargs):
        _send({"op": op, "name": name, "args": _plain(list(args)), "kwargs": _plain(dict(kwargs))})
        reply = _recv()
        if "error" in reply:
            raise RuntimeError(reply["error"])
        return reply["ok"]
    return call


_DATA_TYPES = frozenset({str, bytes, int, float, bool, complex, list, dict, tuple, set, frozenset, type(None), range})
_REFUSED_NAMES = frozenset(INSPECT_ATTRIBUTES) | {"format", "format_map", "mro"}
_MISSING = object()


def _guarded_getattr(obj, name, default=_MISSING):
    if type(name) is not str:
        raise TypeError("attribute name must be text")
    if name.startswith("_") or name in _REFUSED_NAMES:
        raise AttributeError("attribute %r is not allowed" % name)
    if type(obj) not in _DATA_TYPES:
        raise AttributeError("attributes of %s values are not accessible" % type(obj).__name__)
    if default is _MISSING:
        return getattr(obj, name)
    return getattr(obj, name, default)


_INPLACE = {"+=": operator.iadd, "-=": operator.isub, "*=": operator.imul, "/=": operator.itruediv,
            "//=": operator.ifloordiv, "%=": operator.imod, "**=": operator.ipow, "<<=": operator.ilshift,
            ">>=": operator.irshift, "&=": operator.iand, "|=": operator.ior, "^=": operator.ixor}


def _inplacevar(op, x, y):
    fn = _INPLACE.get(op)
    if fn is None:
        raise SyntaxError("operator %s is not allowed" % op)
    return fn(x, y)


def _apply(fn, *args, **kwargs):
    return fn(*args, **kwargs)


def _builtins():
    names = dict(safe_builtins)
    for name in ("setattr", "delattr", "__build_class__", "_getattr_", "id"):
        names.pop(name, None)
    names.update(min=min, max=max, sum=sum, sorted=sorted, enumerate=enumerate, zip=zip, map=map,
                 filter=filter, any=any, all=all, list=list, dict=dict, tuple=tuple, set=set,
                 frozenset=frozenset, reversed=reversed, getattr=_guarded_getattr)
    return names


def _limit(memory_bytes, cpu_seconds):
    vm = 0
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmSize:"):
                vm = int(line.split()[1]) * 1024
    resource.setrlimit(resource.RLIMIT_AS, (vm + memory_bytes, vm + memory_bytes))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 1))
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    sys.setrecursionlimit(400)


def _main():
    start = _recv()
    code = marshal.loads(base64.b64decode(start["code"]))
    context = {"address": start["address"], "read": _remote("read"), "stat": _remote("stat"),
               "discover": _remote("discover"),
               "capabilities": {name: _remote("call", name) for name in start["capabilities"]}}
    port_globals = {"__builtins__": _builtins(), "__name__": "restricted_port", "_getattr_": _guarded_getattr,
                    "_getitem_": operator.getitem, "_getiter_": iter, "_write_": full_write_guard,
                    "_unpack_sequence_": guarded_unpack_sequence,
                    "_iter_unpack_sequence_": guarded_iter_unpack_sequence,
                    "_inplacevar_": _inplacevar, "_apply_": _apply, "_print_": PrintCollector}
    input_value = start["input"]
    _limit(int(sys.argv[1]), int(sys.argv[2]))
    del start
    try:
        exec(code, port_globals)
        run = port_globals.get("run")
        if not callable(run):
            raise NameError("the port defines no run(input, context)")
        result = {"result": _plain(run(input_value, context))}
    except BaseException as exc:
        try:
            text = str(exc)
        except BaseException:
            text = ""
        if isinstance(exc, MemoryError):
            text = "restricted port exceeded its memory limit"
        result = {"error": ("%s: %s" % (type(exc).__name__, text))[:900]}
    del port_globals, context
    try:
        _send(result)
    except (ValueError, TypeError, OverflowError):
        _send({"error": "ValueError: restricted port output is not JSON-like data"})


try:
    _main()
except MemoryError:
    _send({"error": "MemoryError: restricted port exceeded its memory limit"})
'''


class RestrictedPort:
    """A port whose code is RestrictedPython source, run in a killable child process."""

    def __init__(
        self,
        source: str,
        *,
        name: str = "restricted",
        capabilities: dict[str, Callable[..., Any]] | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        memory_bytes: int = DEFAULT_MEMORY_BYTES,
        description: str | None = None,
    ) -> None:
        if type(source) is not str:
            raise TypeError("restricted port source must be text")
        if len(source.encode("utf-8", "surrogatepass")) > MAX_SOURCE_BYTES:
            raise ValueError(f"restricted port {name}: source exceeds {MAX_SOURCE_BYTES} bytes")
        if not (isinstance(timeout, (int, float)) and 0 < timeout <= 600):
            raise ValueError("timeout must be a positive number of seconds (at most 600)")
        if type(memory_bytes) is not int or memory_bytes < 16 * 1024 * 1024:
            raise ValueError("memory_bytes must be an integer of at least 16 MiB")
        self.name = name
        self.timeout = float(timeout)
        self.memory_bytes = memory_bytes
        self.capabilities = dict(capabilities or {})
        for cap_name, fn in self.capabilities.items():
            if type(cap_name) is not str or not cap_name.isidentifier() or cap_name.startswith("_"):
                raise ValueError(f"capability names must be identifiers not starting with '_': {cap_name!r}")
            if not callable(fn):
                raise TypeError(f"capability {cap_name} must be callable")
        compiled = compile_restricted_exec(source, filename=f"<port {name}>")
        if compiled.errors or compiled.code is None:
            raise ValueError(f"restricted port {name} does not compile: {'; '.join(compiled.errors)}")
        self._code = base64.b64encode(marshal.dumps(compiled.code)).decode("ascii")
        module = ast.parse(source)
        if not any(isinstance(node, ast.FunctionDef) and node.name == "run" for node in module.body):
            raise ValueError(f"restricted port {name} must define run(input, context) at module level")
        doc = (ast.get_docstring(module) or "").strip()
        self._descriptor = PortDescriptor(
            description=description if description is not None else (doc.splitlines()[0] if doc else f"Restricted Python port {name}."),
            input_schema=_literal_assignment(module, "INPUT_SCHEMA", dict) or {},
            output="JSON-like data returned by run(input, context).",
            effect="host-defined" if self.capabilities else "read",
            limits=(
                f"wall-clock budget {self.timeout:g} s per call",
                f"memory {self.memory_bytes // (1024 * 1024)} MiB",
                "RestrictedPython; no imports, files or host objects",
            )
            + tuple(f"capability {cap}" for cap in sorted(self.capabilities)),
        )

    def descriptor(self) -> PortDescriptor:
        return self._descriptor

    # ------------------------------------------------------------------ execution
    def execute(self, context: PortContext | None, input: Any) -> Any:
        """Run ``run(input, context)`` once in a fresh child; kill it at the deadline."""
        deadline = time.monotonic() + self.timeout
        child = subprocess.Popen(
            [sys.executable, "-I", "-X", "utf8", "-c", _RUNNER, str(self.memory_bytes), str(int(self.timeout) + 1)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env={},
            cwd="/",
            close_fds=True,
            start_new_session=True,
        )
        try:
            assert child.stdin is not None and child.stdout is not None
            channel = _Channel(child.stdin.fileno(), child.stdout.fileno(), deadline)
            address = context.address if context is not None else ""
            channel.send({"code": self._code, "input": input, "address": address, "capabilities": sorted(self.capabilities)})
            while True:
                message = channel.recv()
                if "result" in message:
                    return message["result"]
                if "error" in message:
                    raise PortError(f"restricted port raised {message['error']}")
                channel.send(self._answer(context, message))
        except _Timeout:
            raise PortError("restricted port timed out") from None
        except _Closed:
            child.kill()
            code = child.wait()
            if code in (-signal.SIGXCPU, -signal.SIGKILL) or time.monotonic() >= deadline:
                raise PortError("restricted port timed out") from None
            raise PortError("restricted port stopped unexpectedly") from None
        finally:
            if child.poll() is None:
                child.kill()
            child.wait()
            for stream in (child.stdin, child.stdout):
                try:
                    stream.close()  # type: ignore[union-attr]
                except OSError:
                    pass

    def _answer(self, context: PortContext | None, message: Any) -> dict[str, Any]:
        """Serve one remote call from the child; failures go back as text, never objects."""
        if type(message) is not dict:
            return {"error": "malformed request"}
        op, name = message.get("op"), message.get("name")
        args, kwargs = message.get("args"), message.get("kwargs")
        if type(args) is not list or type(kwargs) is not dict:
            return {"error": "malformed request"}
        try:
            if op in ("read", "stat", "discover"):
                if context is None:
                    return {"error": "port process context is unavailable"}
                if len(args) != 1 or kwargs:
                    return {"error": f"{op} takes exactly one path"}
                value = getattr(context, op)(args[0])
            elif op == "call" and type(name) is str and name in self.capabilities:
                value = self.capabilities[name](*args, **kwargs)
            else:
                return {"error": "no such capability"}
            value = to_json(value)
            json.dumps(value, allow_nan=False)
        except Exception as exc:  # reported to the port as text: a PortError's own, else only the kind
            return {"error": failure_text(exc)[:900]}
        return {"ok": value}


class _Timeout(Exception):
    pass


class _Closed(Exception):
    pass


class _Channel:
    """Length-prefixed JSON frames over the child's pipes, every wait bounded by the deadline."""

    def __init__(self, write_fd: int, read_fd: int, deadline: float) -> None:
        self.write_fd, self.read_fd, self.deadline = write_fd, read_fd, deadline
        self.buffer = b""

    def _wait(self, fd: int, writing: bool) -> None:
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise _Timeout()
        ready = select.select([], [fd], [], remaining) if writing else select.select([fd], [], [], remaining)
        if not (ready[1] if writing else ready[0]):
            raise _Timeout()

    def send(self, message: Any) -> None:
        try:
            data = json.dumps(message, allow_nan=False, ensure_ascii=False).encode("utf-8")
        except (TypeError, ValueError):
            raise PortError("restricted port input or answer is not JSON data") from None
        data = len(data).to_bytes(_HEADER, "big") + data
        while data:
            self._wait(self.write_fd, True)
            try:
                written = os.write(self.write_fd, data[: 64 * 1024])
            except (BrokenPipeError, ConnectionResetError):
                raise _Closed() from None
            data = data[written:]

    def _fill(self, size: int) -> bytes:
        while len(self.buffer) < size:
            self._wait(self.read_fd, False)
            chunk = os.read(self.read_fd, max(65536, size - len(self.buffer)))
            if not chunk:
                raise _Closed()
            self.buffer += chunk
        data, self.buffer = self.buffer[:size], self.buffer[size:]
        return data

    def recv(self) -> Any:
        size = int.from_bytes(self._fill(_HEADER), "big")
        if size > MAX_FRAME_BYTES:
            raise PortError("restricted port output too large")
        try:
            return json.loads(self._fill(size))
        except ValueError:
            raise PortError("restricted port sent malformed data") from None


def _literal_assignment(module: ast.Module, name: str, kind: type) -> Any:
    """A module-level ``NAME = <literal>`` read without running the code."""
    for node in module.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            try:
                value = ast.literal_eval(node.value)
            except (ValueError, SyntaxError, TypeError):
                return None
            return value if isinstance(value, kind) else None
    return None


def restricted_port(source: str, **kwargs: Any) -> RestrictedPort:
    """``Ports().port("name", restricted_port(SOURCE, capabilities={...}))``."""
    return RestrictedPort(source, **kwargs)


def load_ports_directory(
    path: str | os.PathLike[str],
    *,
    ports: Ports | None = None,
    capabilities: dict[str, Callable[..., Any]] | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    memory_bytes: int = DEFAULT_MEMORY_BYTES,
) -> Ports:
    """Register every ``*.py`` file in ``path`` as a restricted port named after its stem.

    Names must be valid script names (1–64 bytes of ``[A-Za-z0-9_.-]``); a file that does
    not compile or defines no ``run`` fails the whole load, so a typo is seen at start-up
    rather than at the first call. Every port gets the same ``capabilities``.
    """
    directory = Path(path)
    if not directory.is_dir():
        raise ValueError(f"ports directory does not exist: {directory.name}")
    registry = ports if ports is not None else Ports()
    for file in sorted(directory.glob("*.py")):
        if not file.is_file():
            continue
        name = validate_script_name(file.stem)
        source = file.read_text(encoding="utf-8")
        registry.port(
            name,
            RestrictedPort(source, name=name, capabilities=capabilities, timeout=timeout, memory_bytes=memory_bytes),
        )
    return registry
