"""Conformance fixtures: load the data files under ``spec/fixtures`` and run them.

Each fixture is one JSON file describing a process (``setup``) and an ordered list of
``steps`` against it, each with its expectations. The format is documented in
``spec/README.md``. :func:`run_fixture` raises :class:`FixtureFailure` naming the
fixture and the step; :func:`run_directory` runs a whole directory for the CLI.
"""

from __future__ import annotations

import importlib.resources
import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import blake3
import cbor2

from ._ports import PortError, Ports
from .errors import SvitError
from .limits import LIMIT_FIELDS, Limits
from .mounts import Mount
from .process import Process
from .snapshot import MAGIC, TRAILER_BYTES
from .tree import CBOR_SCRIPT_TAG, from_decoded, script_default
from .values import Script

DEFAULT_ADDRESS = "svit://local/t/p"
DEFAULT_SCRIPT = "/lib/s"
HASH_RE = re.compile(r"^[0-9a-f]{64}$")

TOP_FIELDS = {"name", "description", "reference", "setup", "steps", "build_error"}
SETUP_FIELDS = {"address", "limits", "memory", "library", "mounts", "ports"}
MOUNT_FIELDS = {"kind", "files", "value", "source"}
MOUNT_KINDS = {"folder", "writable_folder", "value", "writable_value"}
PORT_FIELDS = {"echo", "returns", "fails", "description"}
ERROR_FIELDS = {"code", "limit", "contains", "excludes", "max_length"}
TAMPER_FIELDS = {"flip_byte", "truncate", "append_hex", "edit", "rehash", "replace_bytes_hex"}

COMMON = {"op", "process", "note"}
EXPECT = {
    "output", "value", "includes", "error", "version", "changed", "logs", "messages",
    "paths", "hashes", "state", "absent", "snapshot_unchanged", "save_as", "same_as",
    "differs_from", "mount_files", "port_calls", "no_commit", "contains_text", "excludes_text", "touches",
}
OPS: dict[str, set[str]] = {
    "exec": {"path", "input"},
    "exec_inline": {"source", "input"},
    "read": {"path"},
    "discover": {"path"},
    "stat": {"path"},
    "write": {"path", "value", "script"},
    "remove": {"path"},
    "enqueue_inbox": {"value"},
    "acknowledge_inbox": {"value"},
    "inbox_front": set(),
    "replace_thread_state": {"value"},
    "initialize_thread_state": {"value"},
    "outbox": set(),
    "snapshot": set(),
    "snapshot_restore": {"from", "snapshot", "tamper", "as"},
    "fork": {"address", "as"},
    "attach_mount": {"name", "mount", "kind"},
    "node_hash": {"path"},
    "root_hash": set(),
    "hash_of": {"value"},
    "check": set(),
}
REQUIRED: dict[str, set[str]] = {
    "exec_inline": {"source"},
    "read": {"path"},
    "discover": {"path"},
    "stat": {"path"},
    "write": {"path"},
    "remove": {"path"},
    "enqueue_inbox": {"value"},
    "acknowledge_inbox": {"value"},
    "replace_thread_state": {"value"},
    "initialize_thread_state": {"value"},
    "fork": {"address", "as"},
    "attach_mount": {"name", "mount"},
    "node_hash": {"path"},
    "hash_of": {"value"},
}


class FixtureError(ValueError):
    """A fixture file is malformed (unknown field, wrong shape)."""


class FixtureFailure(AssertionError):
    """A fixture ran and the runtime did not behave as the fixture expects."""


@dataclass
class Fixture:
    """One loaded fixture file."""

    name: str
    description: str
    steps: list[dict[str, Any]]
    setup: dict[str, Any] = field(default_factory=dict)
    reference: str | None = None
    build_error: dict[str, Any] | None = None
    file: str = ""


# ---------------------------------------------------------------------------- loading


def _strict(where: str, data: Any, allowed: set[str], what: str) -> None:
    if not isinstance(data, dict):
        raise FixtureError(f"{where}: {what} must be an object")
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise FixtureError(f"{where}: unknown field {unknown[0]!r} in {what}")


def _check_fixture(where: str, data: Any) -> Fixture:
    _strict(where, data, TOP_FIELDS, "fixture")
    for key in ("name", "description", "steps"):
        if key not in data:
            raise FixtureError(f"{where}: missing field {key!r}")
    if not isinstance(data["name"], str) or not data["name"]:
        raise FixtureError(f"{where}: name must be non-empty text")
    setup = data.get("setup", {})
    _strict(where, setup, SETUP_FIELDS, "setup")
    if "limits" in setup:
        _strict(where, setup["limits"], set(LIMIT_FIELDS), "setup.limits")
    for mname, spec in setup.get("mounts", {}).items():
        _strict(where, spec, MOUNT_FIELDS, f"mount {mname!r}")
        if spec.get("kind") not in MOUNT_KINDS:
            raise FixtureError(f"{where}: mount {mname!r} kind must be one of {sorted(MOUNT_KINDS)}")
    for pname, spec in setup.get("ports", {}).items():
        _strict(where, spec, PORT_FIELDS, f"port {pname!r}")
        if len(set(spec) & {"echo", "returns", "fails"}) != 1:
            raise FixtureError(f"{where}: port {pname!r} needs exactly one of echo, returns, fails")
    if data.get("build_error") is not None:
        _strict(where, data["build_error"], ERROR_FIELDS, "build_error")
    if not isinstance(data["steps"], list):
        raise FixtureError(f"{where}: steps must be a list")
    for index, step in enumerate(data["steps"]):
        at = f"{where}: step {index + 1}"
        if not isinstance(step, dict) or step.get("op") not in OPS:
            raise FixtureError(f"{at}: op must be one of {sorted(OPS)}")
        _strict(at, step, COMMON | EXPECT | OPS[step["op"]], f"{step['op']} step")
        missing = REQUIRED.get(step["op"], set()) - set(step)
        if missing:
            raise FixtureError(f"{at}: missing field {sorted(missing)[0]!r}")
        if "error" in step:
            _strict(at, step["error"], ERROR_FIELDS, "error")
        if "tamper" in step:
            _strict(at, step["tamper"], TAMPER_FIELDS, "tamper")
    return Fixture(
        name=data["name"],
        description=data["description"],
        steps=data["steps"],
        setup=setup,
        reference=data.get("reference"),
        build_error=data.get("build_error"),
        file=where,
    )


def packaged_fixtures() -> Path:
    """The fixtures installed with the package (``svit/spec_fixtures``, a link to
    ``spec/fixtures`` in a checkout), so ``svit spec`` runs anywhere."""
    return Path(str(importlib.resources.files("svit") / "spec_fixtures"))


def load_fixtures(directory: str | os.PathLike[str]) -> list[Fixture]:
    """Every ``*.json`` fixture below ``directory``, sorted by file path; strict."""
    root = Path(directory)
    if not root.is_dir():
        raise FixtureError(f"{root}: not a directory")
    fixtures: list[Fixture] = []
    seen: dict[str, str] = {}
    for path in sorted(root.rglob("*.json")):
        where = str(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise FixtureError(f"{where}: cannot parse: {exc}") from None
        fixture = _check_fixture(where, data)
        if fixture.name in seen:
            raise FixtureError(f"{where}: duplicate fixture name {fixture.name!r} (also {seen[fixture.name]})")
        seen[fixture.name] = where
        fixtures.append(fixture)
    return fixtures


# ---------------------------------------------------------------------------- values


def source_text(source: Any) -> str:
    """A source is text, or a list of lines joined with newlines."""
    if isinstance(source, list):
        return "\n".join(source)
    if not isinstance(source, str):
        raise FixtureError("source must be text or a list of lines")
    return source


def expand(value: Any) -> Any:
    """Expand the ``$repeat`` and ``$script`` value constructors."""
    if isinstance(value, dict):
        if "$repeat" in value:
            item = value["$repeat"]
            if isinstance(item, str):
                return item * value["times"]
            return [expand(item) for _ in range(value["times"])]
        if "$script" in value:
            spec = value["$script"]
            return Script(source_text(spec["source"]), spec.get("documentation", ""))
        return {key: expand(item) for key, item in value.items()}
    if isinstance(value, list):
        return [expand(item) for item in value]
    return value


def plain(value: Any) -> Any:
    """Host results as plain JSON-like data (scripts become their JSON record)."""
    if isinstance(value, Script):
        return value.to_json()
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    return value


def _same(expected: Any, actual: Any, ctx: Run, partial: bool) -> bool:
    if isinstance(expected, str):
        if expected == "<any>":
            return True
        if expected == "<hash>":
            return isinstance(actual, str) and bool(HASH_RE.match(actual))
        return type(actual) is str and actual == ctx.substitute(expected)
    if isinstance(expected, dict):
        if type(actual) is not dict:
            return False
        if not partial and set(expected) != set(actual):
            return False
        return all(
            (key not in actual) if item == "<unreported>" else (key in actual and _same(item, actual[key], ctx, partial))
            for key, item in expected.items()
        )
    if isinstance(expected, list):
        if type(actual) is not list or len(expected) != len(actual):
            return False
        return all(_same(e, a, ctx, partial) for e, a in zip(expected, actual))
    # null, bool, int and float must agree in kind: 1, 1.0 and true are different values.
    return type(expected) is type(actual) and expected == actual


def show(value: Any) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 600 else text[:600] + "…"


# ---------------------------------------------------------------------------- running


class Run:
    """The state of one fixture run: its processes, temp mounts, ports and saved results."""

    def __init__(self, fixture: Fixture) -> None:
        self.fixture = fixture
        self.processes: dict[str, Process] = {}
        self.saved: dict[str, Any] = {}
        self.port_calls: dict[str, int] = {}
        self.mount_dirs: dict[str, str] = {}
        self.tmp = tempfile.mkdtemp(prefix="svit-spec-")

    def close(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)

    def substitute(self, text: str) -> str:
        for name, directory in self.mount_dirs.items():
            text = text.replace("${mount:" + name + "}", directory)
        return text

    # -- setup
    def make_mount(self, name: str, spec: dict[str, Any]) -> Mount:
        kind = spec["kind"]
        if kind in ("value", "writable_value"):
            factory = Mount.value if kind == "value" else Mount.writable_value
            return factory(spec.get("source", name), expand(spec.get("value")))
        if name not in self.mount_dirs:
            directory = os.path.join(self.tmp, "mount-" + name)
            os.makedirs(directory)
            for rel, content in spec.get("files", {}).items():
                target = os.path.join(directory, *rel.rstrip("/").split("/"))
                if rel.endswith("/"):
                    os.makedirs(target, exist_ok=True)
                    continue
                os.makedirs(os.path.dirname(target), exist_ok=True)
                with open(target, "w", encoding="utf-8", newline="") as handle:
                    handle.write(expand(content))
            self.mount_dirs[name] = os.path.realpath(directory)
        directory = self.mount_dirs[name]
        return Mount.folder(directory) if kind == "folder" else Mount.writable_folder(directory)

    def make_ports(self, specs: dict[str, Any]) -> Ports:
        ports = Ports()
        for name, spec in specs.items():
            self.port_calls[name] = 0

            call = self._port_function(name, spec)
            ports.port(name, call)
        return ports

    def _port_function(self, name: str, spec: dict[str, Any]) -> Any:
        def call(value: Any) -> Any:
            self.port_calls[name] += 1
            if "fails" in spec:
                raise PortError(spec["fails"])
            if "returns" in spec:
                return expand(spec["returns"])
            return value

        call.__doc__ = spec.get("description", f"fixture port {name}")
        return call

    def build(self) -> Process:
        setup = self.fixture.setup
        builder = Process.builder(setup.get("address", DEFAULT_ADDRESS))
        for key, value in setup.get("memory", {}).items():
            builder.memory(key, expand(value))
        for key, entry in setup.get("library", {}).items():
            if isinstance(entry, dict):
                builder.library(key, source_text(entry["source"]), documentation=entry.get("documentation", ""))
            else:
                builder.library(key, source_text(entry))
        if "limits" in setup:
            builder.limits(Limits(**setup["limits"]))
        for key, spec in setup.get("mounts", {}).items():
            builder.mount(key, self.make_mount(key, spec))
        if "ports" in setup:
            builder.ports(self.make_ports(setup["ports"]))
        return builder.build()


def _fail(fixture: Fixture, where: str, message: str) -> FixtureFailure:
    ref = f" [{fixture.reference}]" if fixture.reference else ""
    return FixtureFailure(f"fixture {fixture.name}{ref} ({fixture.file}), {where}: {message}")


def _check_error(expected: dict[str, Any], exc: BaseException | None, result: Any) -> str | None:
    if exc is None:
        return f"expected error {show(expected)}, got success with {show(plain(result))}"
    if not isinstance(exc, SvitError):
        return f"expected error {show(expected)}, got non-Svit exception {type(exc).__name__}: {exc}"
    code = getattr(exc, "code", None)
    text = str(exc)
    if "code" in expected and code != expected["code"]:
        return f"expected error code {expected['code']!r}, got {code!r}: {text}"
    if "limit" in expected and getattr(exc, "limit", None) != expected["limit"]:
        return f"expected limit {expected['limit']!r}, got {getattr(exc, 'limit', None)!r}: {text}"
    contains = expected.get("contains", [])
    for needle in [contains] if isinstance(contains, str) else contains:
        if needle not in text:
            return f"expected error text to contain {needle!r}, got {text!r}"
    for needle in expected.get("excludes", []):
        if needle in text:
            return f"expected error text not to contain {needle!r}, got {text!r}"
    if "max_length" in expected and len(text) > expected["max_length"]:
        return f"expected error text of at most {expected['max_length']} chars, got {len(text)}"
    return None


def _tamper(data: bytes, spec: dict[str, Any]) -> bytes:
    """Damage or edit snapshot bytes. ``edit`` re-encodes the body and re-seals the trailer."""

    def tag_hook(tag: Any, _immutable: Any = None) -> Any:
        return Script(*tag.value) if tag.tag == CBOR_SCRIPT_TAG else tag

    if "edit" in spec or "rehash" in spec:
        body = data[: len(data) - TRAILER_BYTES]
        envelope = cbor2.loads(body, tag_hook=tag_hook)
        for edit in spec.get("edit", []):
            target = envelope
            *parents, last = edit["at"]
            for key in parents:
                target = target[key]
            if edit.get("delete"):
                del target[last]
            else:
                target[last] = expand(edit["value"])
        if spec.get("rehash"):
            envelope["root_hash"] = from_decoded(envelope["root"]).hash
        body = cbor2.dumps(envelope, default=script_default)
        data = body + MAGIC + len(body).to_bytes(8, "big") + blake3.blake3(body).digest()
    if "replace_bytes_hex" in spec:
        data = bytes.fromhex(spec["replace_bytes_hex"])
    if "flip_byte" in spec:
        index = spec["flip_byte"] % len(data)
        data = data[:index] + bytes([data[index] ^ 0x01]) + data[index + 1 :]
    if "truncate" in spec:
        data = data[: len(data) - spec["truncate"]]
    if "append_hex" in spec:
        data = data + bytes.fromhex(spec["append_hex"])
    return data


class ChangeResult(dict[str, Any]):
    """A Change as plain data; ``raw`` keeps the object for ``touches`` checks."""

    raw: Any = None


def _change_dict(change: Any) -> Any:
    if change is None:
        return None
    result = ChangeResult(version=change.version, paths=list(change.paths), hashes=dict(change.hashes))
    result.raw = change
    return result


def _perform(run: Run, step: dict[str, Any], proc: Process | None) -> Any:
    op = step["op"]
    if op == "snapshot_restore":
        if "snapshot" in step:
            if step["snapshot"] not in run.saved:
                raise FixtureError(f"no saved result named {step['snapshot']!r}")
            data = run.saved[step["snapshot"]]
        else:
            data = run.processes[step.get("from", step.get("process", "main"))].snapshot()
        data = _tamper(data, step.get("tamper", {}))
        restored = Process.restore(data)
        run.processes[step.get("as", step.get("process", "main"))] = restored
        return None
    if proc is None:  # only a restore may name a process that does not exist yet
        raise FixtureError(f"no process named {step.get('process', 'main')!r}")
    if op in ("exec", "exec_inline"):
        if op == "exec":
            activation = proc.exec(step.get("path", DEFAULT_SCRIPT), expand(step.get("input")))
        else:
            activation = proc.exec_inline(source_text(step["source"]), expand(step.get("input")))
        if activation.version != proc.version:
            raise FixtureError(f"activation version {activation.version} differs from process version {proc.version}")
        return {
            "output": plain(activation.output),
            "logs": plain(activation.logs),
            "messages": plain(activation.messages),
            "version": activation.version,
            "root_hash": activation.root_hash,
            "changed": list(activation.changed),
        }
    if op == "read":
        return plain(proc.read(step["path"]))
    if op == "discover":
        return plain(proc.discover(step["path"]))
    if op == "stat":
        return plain(proc.stat(step["path"]))
    if op == "write":
        value = Script(source_text(step["script"]["source"]), step["script"].get("documentation", "")) if "script" in step else expand(step.get("value"))
        return _change_dict(proc.write(step["path"], value))
    if op == "remove":
        return _change_dict(proc.remove(step["path"]))
    if op == "enqueue_inbox":
        return _change_dict(proc.enqueue_inbox(expand(step["value"])))
    if op == "acknowledge_inbox":
        return _change_dict(proc.acknowledge_inbox(expand(step["value"])))
    if op == "inbox_front":
        return plain(proc.inbox_front())
    if op == "replace_thread_state":
        return _change_dict(proc.replace_thread_state(expand(step["value"])))
    if op == "initialize_thread_state":
        return _change_dict(proc.initialize_thread_state(expand(step["value"])))
    if op == "outbox":
        return plain(proc.outbox())
    if op == "snapshot":
        return proc.snapshot()
    if op == "fork":
        child = proc.fork(step["address"])
        run.processes[step["as"]] = child
        return None
    if op == "attach_mount":
        spec = dict(run.fixture.setup.get("mounts", {}).get(step["mount"], {"kind": "folder"}))
        if "kind" in step:
            spec["kind"] = step["kind"]
        return _change_dict(proc.attach_mount(step["name"], run.make_mount(step["mount"], spec)))
    if op == "node_hash":
        return proc.node_hash(step["path"])
    if op == "root_hash":
        return proc.root_hash
    if op == "hash_of":
        scratch = Process.builder("svit://local/spec/hash-of").memory("x", expand(step["value"])).build()
        return scratch.node_hash("/memory/x")
    return None  # check


def _verify(run: Run, step: dict[str, Any], proc: Process | None, result: Any, exc: BaseException | None, before: bytes | None) -> str | None:
    op = step["op"]
    if "error" in step:
        problem = _check_error(step["error"], exc, result)
        if problem:
            return problem
    elif exc is not None:
        detail = f"{exc.code}: {exc}" if isinstance(exc, SvitError) else f"{type(exc).__name__}: {exc}"
        return f"unexpected error {detail}"
    ctx = run
    activation = result if op in ("exec", "exec_inline") and exc is None else None
    checks: list[tuple[str, Any, Any, bool]] = []
    if activation is not None:
        for key in ("output", "logs", "messages", "changed"):
            if key in step:
                checks.append((key, expand(step[key]), activation[key], False))
    elif "output" in step:
        return "'output' applies only to exec steps"
    if "value" in step and op not in ("write", "enqueue_inbox", "acknowledge_inbox", "replace_thread_state", "initialize_thread_state", "hash_of"):
        checks.append(("value", expand(step["value"]), plain(result), False))
    if "includes" in step:
        checks.append(("includes", expand(step["includes"]), plain(result), True))
    if isinstance(result, dict) and "paths" in result and "hashes" in result:
        if "paths" in step:
            checks.append(("paths", step["paths"], result["paths"], False))
        if "hashes" in step:
            checks.append(("hashes", step["hashes"], result["hashes"], True))
    elif "paths" in step or "hashes" in step:
        if exc is None:
            return f"'paths'/'hashes' need a step that returns a Change, got {show(plain(result))}"
    if "touches" in step and exc is None:
        if not isinstance(result, ChangeResult):
            return "'touches' needs a step that returns a Change"
        for path, expected in step["touches"].items():
            if result.raw.touches(path) is not expected:
                return f"touches {path}: expected {expected}, got {result.raw.touches(path)}"
    if "no_commit" in step and exc is None:
        if step["no_commit"] and result is not None:
            return f"expected no commit, got {show(result)}"
    for label, expected, actual, partial in checks:
        if not _same(expected, actual, ctx, partial):
            return f"{label}: expected {show(expected)}, got {show(actual)}"
    target = proc
    if op == "snapshot_restore" and exc is None:
        target = run.processes[step.get("as", step.get("process", "main"))]
    if target is None:
        if "version" in step or step.get("snapshot_unchanged") or step.get("state") or step.get("absent"):
            return "no process to check the state of (the restore failed)"
        return _verify_outside(run, step, result)
    if "version" in step and target.version != step["version"]:
        return f"version: expected {step['version']}, got {target.version}"
    if step.get("snapshot_unchanged"):
        if before is None or proc is None or proc.snapshot() != before:
            return "snapshot bytes changed, expected them byte-identical to before the step"
    for path, expected in step.get("state", {}).items():
        actual = plain(target.read(path))
        if not _same(expand(expected), actual, ctx, False):
            return f"state {path}: expected {show(expected)}, got {show(actual)}"
    for path in step.get("absent", []):
        if target.stat(path) is not None:
            return f"state {path}: expected absent, got {show(plain(target.read(path)))}"
    return _verify_outside(run, step, result)


def _verify_outside(run: Run, step: dict[str, Any], result: Any) -> str | None:
    """The expectations about what lies outside the process: files, port calls, saved results."""
    for mount, files in step.get("mount_files", {}).items():
        directory = run.mount_dirs.get(mount)
        if directory is None:
            return f"mount_files: no folder mount named {mount!r}"
        for rel, expected in files.items():
            file_path = os.path.join(directory, *rel.split("/"))
            actual = None
            if os.path.isfile(file_path):
                with open(file_path, encoding="utf-8", newline="") as handle:
                    actual = handle.read()
            if actual != (expand(expected) if expected is not None else None):
                return f"mount file {mount}/{rel}: expected {show(expected)}, got {show(actual)}"
    for port, count in step.get("port_calls", {}).items():
        if run.port_calls.get(port) != count:
            return f"port {port}: expected {count} calls, got {run.port_calls.get(port)}"
    if "contains_text" in step or "excludes_text" in step:
        if not isinstance(result, bytes):
            return "'contains_text'/'excludes_text' apply only to snapshot steps"
        if "contains_text" in step and step["contains_text"].encode() not in result:
            return f"snapshot does not contain {step['contains_text']!r}"
        if "excludes_text" in step and step["excludes_text"].encode() in result:
            return f"snapshot contains {step['excludes_text']!r}"
    for key, want_same in (("same_as", True), ("differs_from", False)):
        if key in step:
            if step[key] not in run.saved:
                return f"{key}: no saved result named {step[key]!r}"
            equal = run.saved[step[key]] == result
            if equal != want_same:
                return f"{key} {step[key]!r}: expected {'equal' if want_same else 'different'} results, got {show(plain(result)) if not isinstance(result, bytes) else '<bytes>'}"
    return None


def run_fixture(fixture: Fixture) -> None:
    """Run one fixture; raise :class:`FixtureFailure` at the first unmet expectation."""
    run = Run(fixture)
    try:
        try:
            main = run.build()
        except Exception as exc:
            if fixture.build_error is not None:
                problem = _check_error(fixture.build_error, exc, None)
                if problem:
                    raise _fail(fixture, "build", problem) from None
                return
            raise _fail(fixture, "build", f"unexpected error {getattr(exc, 'code', type(exc).__name__)}: {exc}") from None
        if fixture.build_error is not None:
            raise _fail(fixture, "build", f"expected error {show(fixture.build_error)}, got a process")
        run.processes["main"] = main
        for index, step in enumerate(fixture.steps):
            where = f"step {index + 1} ({step['op']}{' ' + step['path'] if 'path' in step else ''})"
            name = step.get("process", "main")
            proc = run.processes.get(name)
            if proc is None and step["op"] != "snapshot_restore":
                raise _fail(fixture, where, f"no process named {name!r}")
            before = proc.snapshot() if step.get("snapshot_unchanged") and proc is not None else None
            result: Any = None
            failure: BaseException | None = None
            try:
                result = _perform(run, step, proc)
            except FixtureError:
                raise
            except Exception as caught:
                failure = caught
            problem = _verify(run, step, proc, result, failure, before)
            if problem:
                raise _fail(fixture, where, problem)
            if "save_as" in step:
                run.saved[step["save_as"]] = result
    finally:
        run.close()


def run_directory(directory: str | os.PathLike[str]) -> tuple[int, int, list[tuple[str, str]]]:
    """Run every fixture in ``directory``: ``(passed, failed, [(name, message), ...])``."""
    passed, failures = 0, []
    for fixture in load_fixtures(directory):
        try:
            run_fixture(fixture)
        except AssertionError as exc:
            failures.append((fixture.name, str(exc)))
        except Exception as exc:
            failures.append((fixture.name, f"fixture {fixture.name}: runner error {type(exc).__name__}: {exc}"))
        else:
            passed += 1
    return passed, len(failures), failures


__all__ = ["Fixture", "FixtureError", "FixtureFailure", "load_fixtures", "packaged_fixtures", "run_directory", "run_fixture"]
