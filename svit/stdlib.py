"""The pure standard-library functions guests reach as ``jq`` and ``search``.

Both take and return plain values (``None``, ``bool``, ``int``, ``float``, ``str``,
``list``, ``dict`` with ``str`` keys) and fail with :class:`ScriptFailed` texts taken
from the reference, so the Lisp layer can surface them unchanged.

``jq``
======
A filter is 1..4,096 UTF-8 bytes. Before it reaches libjq, a small lexer screens it.

Tokenization: string literals are skipped (their ``\\(...)`` interpolations are code
and are screened), ``#`` comments are skipped to the end of the line (a comment holding
a backslash is refused, because jq 1.7 and 1.8 disagree about where such a comment ends),
and ``.name`` directly after a dot is a field access, not a call, so ``.range_x`` and
``.range`` pass. Every other identifier (``[A-Za-z_][A-Za-z0-9_]*``; ``a::b`` is two
identifiers), including object keys, ``@format`` names and ``$variable`` names, is
checked as a whole word. Screening errs on the side of refusing: ``{range: 1}`` is
refused even though it would be harmless.

Refused, and why:

* ``def recurse repeat while until range input inputs`` -> "jq filter uses an unbounded
  construct": the reference's list; these are the ways to build an unbounded generator
  or read more input. ``..``, ``paths``, ``walk``, ``limit``, ``getpath`` stay allowed:
  they are bounded by the (finite) input or by their own argument and reveal nothing
  about the host.
* ``env $ENV input_filename input_line_number $__loc__ $__prog_args`` (any word or
  variable starting with ``__``) ``$JQ_BUILD_CONFIGURATION get_search_list get_jq_origin get_prog_origin modulemeta import include``
  -> "jq filter reaches outside its input": they disclose the environment, host paths
  or read module files.
* ``now localtime strflocaltime`` -> same error: they disclose the clock and the host
  time zone and make results differ between runs.
* ``halt halt_error debug stderr`` -> same error: they stop the engine or write to the
  host's standard error.

Screening cannot bound everything a 4 KiB filter can do (``[.[],.[]]`` repeated doubles
the data on each step; ``"x" * 1e9``; Oniguruma regexes; known libjq crashes such as
``implode`` on bad code points). So libjq never runs in the host process: it runs in a
helper worker process started with an empty environment, a 1 GiB address-space cap and
no core dumps. The worker stops after the 101st result or once the output passes
1 MiB. Each call is bounded by its caller's limits: it ends within ``timeout_seconds``
(an activation passes the time it has left; waiting for a worker to start counts), or
the worker is killed ("jq evaluation time"); and the evaluation runs under an
address-space limit of the worker's size plus a 16 MiB floor, the caller's guest memory
limit and 16 bytes per input byte, beyond which it stops with "jq memory". A worker that
dies otherwise yields "jq evaluation failed"; one that kept more than the floor after a
request is replaced. jq numbers are doubles, so ``1.0`` comes back as ``1``.

``search``
==========
RE2 (linear time, 1 MiB program memory) over the lines of every string below a node;
see :func:`search_value` and :func:`search_mount`.
"""

from __future__ import annotations

import atexit
import json
import math
import os
import selectors
import string
import subprocess
import sys
import threading
import time
from typing import Any

import re2

from .errors import ExecutionLimitExceeded, InvalidValue, ResourceLimitExceeded, ScriptFailed, SvitError
from .lisp import context as lisp_context
from .mounts import MountPath

# ---------------------------------------------------------------------------- limits

__all__ = [
    "HOST_VARIABLES",
    "HOST_WORDS",
    "JQ_DEFAULT_MEMORY_BYTES",
    "JQ_DEFAULT_TIMEOUT_SECONDS",
    "JQ_INPUT_EXPANSION",
    "JQ_MAX_FILTER_BYTES",
    "JQ_MAX_OUTPUT_BYTES",
    "JQ_MAX_RESULTS",
    "JQ_WORKER_FLOOR_BYTES",
    "JQ_WORKER_MEMORY_BYTES",
    "JQ_WORKER_START_SECONDS",
    "SEARCH_CHARGE_CHARS",
    "SEARCH_CHARS_PER_STEP",
    "SEARCH_MAX_MATCHES",
    "SEARCH_MAX_MOUNT_NODES",
    "SEARCH_MAX_OUTPUT_BYTES",
    "SEARCH_MAX_PATTERN_BYTES",
    "SEARCH_REGEX_MEMORY",
    "UNBOUNDED_WORDS",
    "child_path",
    "compile_search_pattern",
    "decode_jq_input",
    "jq_memory_allowance",
    "run_jq",
    "screen_jq_filter",
    "search_mount",
    "search_value",
]

JQ_MAX_FILTER_BYTES = 4096
JQ_MAX_RESULTS = 100
JQ_MAX_OUTPUT_BYTES = 1024 * 1024
JQ_DEFAULT_TIMEOUT_SECONDS = 1.0
#: The worker's hard address-space cap, whatever a caller allows.
JQ_WORKER_MEMORY_BYTES = 1024 * 1024 * 1024
#: What one evaluation may add to the worker beyond the caller's memory allowance: libjq's
#: own arenas and the request and answer lines (also how much more than it started with a
#: worker may keep between requests before it is replaced).
JQ_WORKER_FLOOR_BYTES = 16 * 1024 * 1024
#: Address space allowed per byte of JSON input, for libjq's parsed form of it.
JQ_INPUT_EXPANSION = 16
#: The memory allowance when the caller names none (the default guest memory limit).
JQ_DEFAULT_MEMORY_BYTES = 8 * 1024 * 1024
JQ_WORKER_START_SECONDS = 30.0

SEARCH_MAX_PATTERN_BYTES = 4096
SEARCH_MAX_MATCHES = 100
SEARCH_MAX_OUTPUT_BYTES = 256 * 1024
SEARCH_MAX_MOUNT_NODES = 2048
SEARCH_REGEX_MEMORY = 1024 * 1024

# ---------------------------------------------------------------------------- jq screen

UNBOUNDED_WORDS = frozenset({"def", "recurse", "repeat", "while", "until", "range", "input", "inputs"})
HOST_WORDS = frozenset(
    {
        "env", "input_filename", "input_line_number", "get_search_list", "get_jq_origin",
        "get_prog_origin", "modulemeta", "import", "include",
        "now", "localtime", "strflocaltime",
        "halt", "halt_error", "debug", "stderr",
    }
)
HOST_VARIABLES = frozenset({"ENV", "JQ_BUILD_CONFIGURATION"})

_UNBOUNDED = "jq filter uses an unbounded construct"
_HOST = "jq filter reaches outside its input"


def _is_ident_start(c: str) -> bool:
    return c == "_" or ("a" <= c <= "z") or ("A" <= c <= "Z")


def _is_ident_char(c: str) -> bool:
    return _is_ident_start(c) or ("0" <= c <= "9")


def _check_word(word: str) -> None:
    """Variables and bare words are checked alike, so ``$ ENV`` or ``ENV`` in a future
    jq grammar cannot slip past."""
    if word in UNBOUNDED_WORDS:
        raise ScriptFailed(_UNBOUNDED)
    if word in HOST_WORDS or word in HOST_VARIABLES or word.startswith("__"):
        raise ScriptFailed(_HOST)


def screen_jq_filter(text: str) -> None:
    """Refuse filters that are unbounded or reach the host (see the module docstring).

    Iterative (an explicit mode stack), so nested interpolations cannot exhaust the
    Python stack.
    """
    n = len(text)
    # Each entry is a mode: ["code", paren_depth] or ["string"]. The bottom entry is
    # the top-level code; a code entry above a string is an interpolation.
    stack: list[list[Any]] = [["code", 0]]
    i = 0
    while i < n:
        mode = stack[-1]
        c = text[i]
        if mode[0] == "string":
            if c == '"':
                stack.pop()
                i += 1
            elif c == "\\":
                if i + 1 < n and text[i + 1] == "(":
                    stack.append(["code", 0])
                i += 2
            else:
                i += 1
            continue
        if c == '"':
            stack.append(["string"])
            i += 1
        elif c == "#":
            end = text.find("\n", i)
            end = n if end < 0 else end
            if "\\" in text[i:end]:
                raise ScriptFailed("invalid jq filter")
            i = end
        elif c == "(":
            mode[1] += 1
            i += 1
        elif c == ")":
            if mode[1] == 0 and len(stack) > 1:
                stack.pop()  # closes a string interpolation
            else:
                mode[1] -= 1
            i += 1
        elif c == ".":
            if i + 1 < n and text[i + 1] == ".":
                i += 2
            elif i + 1 < n and _is_ident_start(text[i + 1]):
                i += 2
                while i < n and _is_ident_char(text[i]):
                    i += 1  # a field name, never a call
            elif i + 1 < n and text[i + 1].isdigit():
                i = _skip_number(text, i)
            else:
                i += 1
        elif "0" <= c <= "9":
            i = _skip_number(text, i)
        elif c == "$":
            i += 1
            while i < n and text[i] in " \t\r\n":
                i += 1
            start = i
            while i < n and _is_ident_char(text[i]):
                i += 1
            if i > start:
                _check_word(text[start:i])
        elif _is_ident_start(c):
            start = i
            while i < n and _is_ident_char(text[i]):
                i += 1
            _check_word(text[start:i])
        else:
            i += 1


def _skip_number(text: str, i: int) -> int:
    """Skip a jq number the way its lexer does: ``1.`` swallows the dot."""
    n = len(text)
    while i < n and text[i].isdigit():
        i += 1
    if i < n and text[i] == ".":
        i += 1
        while i < n and text[i].isdigit():
            i += 1
    if i < n and text[i] in "eE":
        j = i + 1
        if j < n and text[j] in "+-":
            j += 1
        if j < n and text[j].isdigit():
            i = j
            while i < n and text[i].isdigit():
                i += 1
    return i


# ---------------------------------------------------------------------------- jq input


def _reject_constant(name: str) -> Any:
    raise ValueError(name)


def _parse_json_text(text: str) -> tuple[bool, Any]:
    try:
        return True, json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError):
        return False, None


def decode_jq_input(value: Any) -> Any:
    """Parse JSON text; an HTTP envelope whose body holds JSON becomes that body.

    This is what lets a guest filter an HTTP port response directly. An envelope
    whose body is not JSON is filtered as the envelope.
    """
    if isinstance(value, str):
        ok, parsed = _parse_json_text(value)
        if ok:
            value = parsed
    if (
        isinstance(value, dict)
        and type(value.get("status")) is int
        and isinstance(value.get("headers"), dict)
        and isinstance(value.get("body"), str)
    ):
        ok, body = _parse_json_text(value["body"])
        if ok:
            value = body
    return value


def _to_json_text(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError):
        raise InvalidValue("jq input is not a plain value") from None


def _plain_result(value: Any) -> Any:
    """jq numbers are doubles; an integral result outside 64 bits stays a float."""
    if type(value) is int and not (-(2**63) <= value < 2**63):
        return float(value)
    if isinstance(value, list):
        return [_plain_result(item) for item in value]
    if isinstance(value, dict):
        return {key: _plain_result(item) for key, item in value.items()}
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


# ---------------------------------------------------------------------------- jq worker

# Runs in the worker process. Announces {"ready": its size}, then reads one request line
# at a time (JSON: filter, input text, memory allowance) and answers one line:
# {"ok": [results], "vm": size} or {"err": "compile"|"runtime"|"count"|"output"|"memory", "vm": size}.
# Each evaluation runs under an address-space limit of the worker's size at that moment
# plus the allowance; the limit goes back to the worker's cap to write the answer.
_WORKER_SOURCE = string.Template(r"""
import json, os, sys
sys.path[:] = $path
CAP = $memory
try:
    import resource
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_AS, (CAP, CAP))
except Exception:
    resource = None
PAGE = os.sysconf("SC_PAGE_SIZE")
def size():
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[0]) * PAGE
    except Exception:
        return 0
def bound(allowance):
    if resource is None:
        return
    now = size()
    limit = min(now + allowance, CAP) if now and allowance else CAP
    try:
        resource.setrlimit(resource.RLIMIT_AS, (limit, CAP))
    except Exception:
        pass
import jq
out = sys.stdout.buffer
out.write(json.dumps({"ready": size()}).encode() + b"\n"); out.flush()
for line in sys.stdin.buffer:
    results = program = None
    try:
        request = json.loads(line)
        bound(int(request.get("m") or 0))
        try:
            program = jq.compile(request["f"])
        except MemoryError:
            reply = {"err": "memory"}
        except Exception:
            reply = {"err": "compile"}
        else:
            results, total, reply = [], 0, None
            try:
                for item in program.input_text(request["i"]):
                    if len(results) == $max_results:
                        reply = {"err": "count"}
                        break
                    total += len(json.dumps(item, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))
                    if total > $max_output:
                        reply = {"err": "output"}
                        break
                    results.append(item)
            except MemoryError:
                reply = {"err": "memory"}
            except Exception:
                reply = {"err": "runtime"}
            if reply is None:
                reply = {"ok": results}
        program = None
        bound(0)
        reply["vm"] = size()
        data = json.dumps(reply, ensure_ascii=False).encode("utf-8")
    except MemoryError:
        results = program = None
        bound(0)
        data = b'{"err": "memory"}'
    except Exception:
        bound(0)
        data = b'{"err": "runtime"}'
    out.write(data + b"\n"); out.flush()
""").substitute(
    path=repr([p for p in sys.path if p]),
    memory=JQ_WORKER_MEMORY_BYTES,
    max_results=JQ_MAX_RESULTS,
    max_output=JQ_MAX_OUTPUT_BYTES,
)

#: libjq's own words when an allocation fails (it then aborts).
_OUT_OF_MEMORY = b"cannot allocate memory"


class _WorkerDied(Exception):
    pass


class _WorkerTimeout(Exception):
    pass


class _JqWorker:
    """One helper process that runs libjq; replaced whenever it dies, overruns or keeps
    much more memory than it started with.

    Starting one takes a moment, so a worker still starting when its caller's time runs
    out is kept for the next caller rather than killed."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-c", _WORKER_SOURCE],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={},
            cwd="/",
            close_fds=True,
        )
        self.started = time.monotonic()
        self.ready_size: int | None = None
        self.buffer = b""
        self.stderr_tail = b""
        assert self.proc.stderr is not None
        os.set_blocking(self.proc.stderr.fileno(), False)

    def wait_ready(self, deadline: float) -> None:
        """Wait, until ``deadline`` at most, for the worker to announce itself."""
        if self.ready_size is not None:
            return
        line = self._read_line(min(deadline, self.started + JQ_WORKER_START_SECONDS))
        try:
            announced = json.loads(line)["ready"]
        except (ValueError, KeyError, TypeError):
            raise _WorkerDied() from None
        if type(announced) is not int:
            raise _WorkerDied()
        self.ready_size = announced

    @property
    def start_expired(self) -> bool:
        return time.monotonic() > self.started + JQ_WORKER_START_SECONDS

    def _read_line(self, deadline: float) -> bytes:
        stdout = self.proc.stdout
        assert stdout is not None
        fd = stdout.fileno()
        with selectors.DefaultSelector() as selector:
            selector.register(fd, selectors.EVENT_READ)
            while b"\n" not in self.buffer:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise _WorkerTimeout()
                if not selector.select(remaining):
                    continue
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    raise _WorkerDied()
                self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line

    def drain_stderr(self) -> bytes:
        """Whatever the worker wrote to its standard error since the last call (the
        pipe is emptied after every request, so it never fills)."""
        stderr = self.proc.stderr
        assert stderr is not None
        seen = b""
        while True:
            try:
                chunk = os.read(stderr.fileno(), 1 << 16)
            except (BlockingIOError, OSError, ValueError):
                break
            if not chunk:
                break
            seen = (seen + chunk)[-4096:]
        return seen

    def request(self, filter_text: str, input_text: str, deadline: float, allowance: int) -> dict[str, Any]:
        stdin = self.proc.stdin
        assert stdin is not None
        payload = json.dumps({"f": filter_text, "i": input_text, "m": allowance}, ensure_ascii=False).encode("utf-8")
        try:
            stdin.write(payload + b"\n")
            stdin.flush()
        except OSError:
            raise _WorkerDied() from None
        reply = json.loads(self._read_line(deadline))
        if type(reply) is not dict:
            raise _WorkerDied()
        return reply

    def kill(self) -> bytes:
        """Stop the worker; what it last wrote to standard error."""
        try:
            self.proc.kill()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        last = self.drain_stderr()
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass
        return last


class _WorkerPool:
    """Idle workers, reused; concurrent callers each take their own."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.idle: list[_JqWorker] = []
        self.pid = os.getpid()

    def take(self) -> _JqWorker:
        with self.lock:
            if self.pid != os.getpid():
                # A forked host must not share its parent's workers (their pipes).
                self.idle, self.pid = [], os.getpid()
            while self.idle:
                worker = self.idle.pop()
                if worker.proc.poll() is None and (worker.ready_size is not None or not worker.start_expired):
                    return worker
                worker.kill()
        return _JqWorker()

    def give(self, worker: _JqWorker) -> None:
        with self.lock:
            self.idle.append(worker)

    def close(self) -> None:
        with self.lock:
            workers, self.idle = self.idle, []
            if self.pid != os.getpid():
                return  # the parent's workers are the parent's to stop
        for worker in workers:
            worker.kill()


_POOL = _WorkerPool()
atexit.register(_POOL.close)


def jq_memory_allowance(guest_memory: int, input_bytes: int) -> int:
    """The address space one evaluation may add to the worker: a fixed floor for libjq's
    own start (its arenas, the request and answer lines), the caller's guest memory
    limit, and room for the parsed input."""
    return JQ_WORKER_FLOOR_BYTES + max(0, guest_memory) + JQ_INPUT_EXPANSION * max(0, input_bytes)


def run_jq(
    filter_text: str,
    value: Any,
    *,
    timeout_seconds: float = JQ_DEFAULT_TIMEOUT_SECONDS,
    memory_bytes: int = JQ_DEFAULT_MEMORY_BYTES,
) -> list[Any]:
    """Run a jq filter over ``value``; the list of its outputs (a single output too).

    Fails with the reference's ``ScriptFailed`` texts. Everything, starting a worker
    included, ends within ``timeout_seconds`` (``ExecutionLimitExceeded("jq evaluation
    time")``); the evaluation may grow the worker by :func:`jq_memory_allowance` of
    ``memory_bytes`` (``ResourceLimitExceeded("jq memory")`` beyond it).
    """
    if not isinstance(filter_text, str):
        raise ScriptFailed("invalid jq filter")
    try:
        size = len(filter_text.encode("utf-8"))
    except UnicodeEncodeError:
        raise ScriptFailed("invalid jq filter") from None
    if size == 0 or size > JQ_MAX_FILTER_BYTES:
        raise ScriptFailed("jq filter is empty or exceeds its limit")
    screen_jq_filter(filter_text)
    input_text = _to_json_text(decode_jq_input(value))
    deadline = time.monotonic() + max(0.0, float(timeout_seconds))
    allowance = jq_memory_allowance(memory_bytes, len(input_text.encode("utf-8", "surrogatepass")))

    worker = _POOL.take()
    try:
        worker.wait_ready(deadline)
    except _WorkerTimeout:
        if worker.start_expired:
            worker.kill()
        else:
            _POOL.give(worker)  # still starting: the next caller's
        raise ExecutionLimitExceeded("jq evaluation time") from None
    except (_WorkerDied, ValueError, OSError):
        worker.kill()
        raise ScriptFailed("jq evaluation failed") from None
    except BaseException:
        worker.kill()
        raise
    try:
        reply = worker.request(filter_text, input_text, deadline, allowance)
    except _WorkerTimeout:
        worker.kill()
        raise ExecutionLimitExceeded("jq evaluation time") from None
    except (_WorkerDied, ValueError, OSError):
        if _OUT_OF_MEMORY in worker.kill():
            raise ResourceLimitExceeded("jq memory") from None
        raise ScriptFailed("jq evaluation failed") from None
    except BaseException:
        worker.kill()
        raise
    worker.drain_stderr()
    held = reply.get("vm")
    if type(held) is int and worker.ready_size is not None and held > worker.ready_size + JQ_WORKER_FLOOR_BYTES:
        worker.kill()  # it kept what an evaluation allocated: a fresh worker starts small
    else:
        _POOL.give(worker)

    if "ok" in reply and type(reply["ok"]) is list:
        return [_plain_result(item) for item in reply["ok"]]
    if reply.get("err") == "memory":
        raise ResourceLimitExceeded("jq memory")
    raise ScriptFailed(
        {
            "compile": "invalid jq filter",
            "count": "jq result count limit exceeded",
            "output": "jq output limit exceeded",
        }.get(str(reply.get("err")), "jq evaluation failed")
    )


# ---------------------------------------------------------------------------- search


def compile_search_pattern(pattern: str) -> Any:
    """Compile with RE2: linear-time matching, 1 MiB program memory, case-sensitive."""
    if not isinstance(pattern, str):
        raise ScriptFailed("invalid search pattern")
    try:
        size = len(pattern.encode("utf-8"))
    except UnicodeEncodeError:
        raise ScriptFailed("invalid search pattern") from None
    if size > SEARCH_MAX_PATTERN_BYTES:
        raise ScriptFailed("search pattern limit exceeded")
    options = re2.Options()
    options.max_mem = SEARCH_REGEX_MEMORY
    options.log_errors = False
    options.case_sensitive = True
    try:
        return re2.compile(pattern, options)
    except Exception:
        raise ScriptFailed("invalid search pattern") from None


def child_path(path: str, name: str) -> str:
    """``path/name``, without doubling the slash at the root."""
    return path.rstrip("/") + "/" + name


#: How much text a search pays for at once, before scanning it (whole lines are paid).
SEARCH_CHARGE_CHARS = 16 * 1024
#: Characters of text scanned per step.
SEARCH_CHARS_PER_STEP = 64


def _charge(steps: int) -> None:
    """Charge the running activation's step budget (this also looks at its clock)."""
    if steps > 0:
        lisp_context.current().budget.charge(steps)


class _Matches:
    """Collects matches under the count and byte caps; notes when something was left out.

    Scanning is paid for as it goes: before each stretch of about 16 KiB of text (ended
    at a line end) the search charges one step per line in it and one per 64
    characters, so a long scan runs out of steps, or meets the time limit, part way.
    """

    def __init__(self, regex: Any) -> None:
        self.regex = regex
        self.matches: list[dict[str, Any]] = []
        self.bytes = 0
        self.truncated = False

    def scan(self, path: str, text: str) -> None:
        path_bytes = len(path.encode("utf-8", "surrogatepass"))
        search = self.regex.search
        size = len(text)
        paid_to = 0
        start = 0
        number = 0
        while start <= size:
            end = text.find("\n", start)
            if end < 0:
                end = size
            if end >= paid_to:
                # Pay for this line and the lines that follow it, up to a stretch's worth.
                stretch_end = max(end, min(size, start + SEARCH_CHARGE_CHARS))
                lines = text.count("\n", start, stretch_end) + 1
                _charge(lines + (stretch_end - start) // SEARCH_CHARS_PER_STEP)
                paid_to = stretch_end + 1
            line = text[start:end]
            start = end + 1
            number += 1
            if line.endswith("\r"):
                line = line[:-1]
            if search(line) is None:
                continue
            cost = path_bytes + len(line.encode("utf-8", "surrogatepass"))
            if len(self.matches) >= SEARCH_MAX_MATCHES or self.bytes + cost > SEARCH_MAX_OUTPUT_BYTES:
                self.truncated = True
                return
            self.bytes += cost
            self.matches.append({"line": number, "path": path, "text": line})

    def result(self) -> dict[str, Any]:
        return {"matches": self.matches, "truncated": self.truncated}


def search_value(path: str, value: Any, pattern: str) -> dict[str, Any]:
    """Search the lines of every string at or below ``value`` (the node at ``path``).

    Maps are walked in sorted-key order and arrays in index order, depth first.
    ``truncated`` is true when a match was left out by the 100-match or 256 KiB cap.
    """
    found = _Matches(compile_search_pattern(pattern))
    stack: list[tuple[str, Any]] = [(path, value)]
    while stack and not found.truncated:
        node_path, node = stack.pop()
        if isinstance(node, str):
            found.scan(node_path, node)
        elif isinstance(node, dict):
            # Each child costs a step, and a step per 64 characters of the path it is given.
            _charge(len(node) * (1 + len(node_path) // SEARCH_CHARS_PER_STEP) + sum(map(len, node)) // SEARCH_CHARS_PER_STEP)
            for key in sorted(node, reverse=True):
                stack.append((child_path(node_path, key), node[key]))
        elif isinstance(node, list):
            _charge(len(node) * (1 + len(node_path) // SEARCH_CHARS_PER_STEP))
            for index in range(len(node) - 1, -1, -1):
                stack.append((child_path(node_path, str(index)), node[index]))
    return found.result()


def search_mount(provider: Any, display_path: str, mount_path: Any, pattern: str, limits: Any = None) -> dict[str, Any]:
    """Walk a mount lazily from ``mount_path``: stat each node, read leaves, list directories.

    ``provider`` is a :class:`svit.mounts.Mount`; ``display_path`` is the process path
    of ``mount_path`` (``/mounts/<name>/...``) used in the match paths. At most 2,048
    nodes are stat-ed; nodes that vanish or cannot be read are skipped. ``truncated``
    is true when the node budget ran out or a cap left a match out.
    """
    found = _Matches(compile_search_pattern(pattern))
    if not isinstance(mount_path, MountPath):
        mount_path = MountPath.parse(mount_path)
    stack: list[tuple[str, MountPath]] = [(display_path, mount_path)]
    visited = 0
    while stack and not found.truncated:
        if visited >= SEARCH_MAX_MOUNT_NODES:
            found.truncated = True
            break
        node_path, node_mount_path = stack.pop()
        visited += 1
        _charge(1)
        try:
            node = provider.stat(node_mount_path, limits)
            if node is None:
                continue
            if node.get("kind") == "directory":
                names = list(provider.list(node_mount_path, limits))
            else:
                names = None
                # Reading and decoding a file is paid for by its size, before reading it.
                facts = node.get("facts")
                size = facts.get("bytes") if isinstance(facts, dict) else None
                if type(size) is int:
                    _charge(size // SEARCH_CHARS_PER_STEP)
                content = provider.read(node_mount_path, limits)
        except (SvitError, OSError):
            continue
        if names is not None:
            _charge(len(names))
            for name in reversed(names):
                try:
                    child = node_mount_path.child(name)
                except SvitError:
                    continue  # a name no mount path can address
                stack.append((child_path(node_path, name), child))
            continue
        if isinstance(content, str):
            found.scan(node_path, content)
        elif isinstance(content, (dict, list)):
            # A provider may hand back a structured leaf: search it like a committed
            # value, under the same caps (its strings are paid for as they are scanned).
            _merge(found, search_value(node_path, content, pattern))
    return found.result()


def _merge(found: _Matches, inner: dict[str, Any]) -> None:
    for match in inner["matches"]:
        cost = len(match["path"].encode("utf-8", "surrogatepass")) + len(match["text"].encode("utf-8", "surrogatepass"))
        if len(found.matches) >= SEARCH_MAX_MATCHES or found.bytes + cost > SEARCH_MAX_OUTPUT_BYTES:
            found.truncated = True
            return
        found.bytes += cost
        found.matches.append(match)
    if inner["truncated"]:
        found.truncated = True
