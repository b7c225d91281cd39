"""Activations: one script run against a private working copy (reference §5.2).

A :class:`WorkingState` holds everything an activation may change: the working
``/memory`` (path-copied, so read-your-writes is free), staged ``/lib`` edits, logs,
message intents and buffered mount writes. Nested ``exec`` runs share it and the
step budget. Every change is a typed mutation (:mod:`svit.mutation`) applied once to a
working root; the process's one commit path validates that candidate root and publishes
it in one assignment, or nothing.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import FrozenInstanceError
from functools import partial
from typing import TYPE_CHECKING, Any, Callable

from svit.lisp import context as lisp_context
from svit.lisp.budget import Budget
from svit.lisp.context import LispLimits
from svit.lisp.errors import HostFunctionError, LispError
from svit.lisp.interpreter import HostFunctionTable, Interpreter

from . import stdlib, tree
from ._ports import failure_text, log_port_failure
from .builtins import GUEST_FUNCTIONS, GuestHelpers, PortFailed, bind_implementations
from .errors import (
    InternalError,
    InvalidPath,
    InvalidValue,
    ResourceLimitExceeded,
    ScriptFailed,
    ScriptNotFound,
    SvitError,
)
from .guest import NULL_VALUE, Measure, SvitValue, charge_copy, item_to_lisp, plain_to_lisp, to_lisp, to_node, to_plain
from .limits import Limits
from .mutation import Mutation, Remove, Set
from .namespace import ROOT_KEYS, compile_error_to_svit, section, stat_record
from .paths import format_path, lib_name, parse, parsed_before, validate_address
from .redact import redact
from .tree import Node
from .values import Script

if TYPE_CHECKING:
    from .process import Process

SVIT_VERSION = "Svit Lisp 2"
PORT_INPUT_LIMIT = 256 * 1024
INLINE_NAME = "<inline>"


class Activation:
    """The result of a committed activation (immutable).

    ``root_hash`` is the hex content hash of the committed root. It may be given as the
    root node itself, and is then hashed when first read: an activation whose caller
    never looks at it does not pay for hashing the new root.
    """

    __match_args__ = ("output", "logs", "messages", "version", "root_hash", "changed", "committed")

    output: Any
    logs: list[dict[str, Any]]
    messages: list[dict[str, Any]]
    version: int
    _root: str | Node  # the hex hash, or the root until it is first read
    changed: list[str]
    #: False for a dry run: nothing was committed, version and root_hash are the process's
    #: unchanged ones, and ``changed``/``messages`` say what a real run would have done.
    committed: bool

    def __init__(self, output: Any, logs: list[dict[str, Any]], messages: list[dict[str, Any]], version: int,
                 root_hash: str | Node, changed: list[str], committed: bool = True) -> None:
        # Stored straight into the instance's own dict (one is made for every activation;
        # __setattr__ refuses every assignment).
        fields = self.__dict__
        fields["output"] = output
        fields["logs"] = logs
        fields["messages"] = messages
        fields["version"] = version
        fields["_root"] = root_hash
        fields["changed"] = changed
        fields["committed"] = committed

    @property
    def root_hash(self) -> str:
        root = self._root
        if isinstance(root, str):
            return root
        text = root.hash
        object.__setattr__(self, "_root", text)
        return text

    def _fields(self) -> tuple[Any, ...]:
        return (self.output, self.logs, self.messages, self.version, self.root_hash, self.changed, self.committed)

    def __setattr__(self, name: str, value: Any) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")

    def __eq__(self, other: object) -> bool:
        if type(other) is not Activation:
            return NotImplemented
        return self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        names = ("output", "logs", "messages", "version", "root_hash", "changed", "committed")
        return "Activation(" + ", ".join(f"{n}={v!r}" for n, v in zip(names, self._fields())) + ")"


_LISP_LIMITS: dict[Any, LispLimits] = {}
_MEMORY_INDEX, _LIB_INDEX = ROOT_KEYS.index("memory"), ROOT_KEYS.index("lib")
#: The guest functions, prepared once: every activation and write-time check installs them.
GUEST_TABLE = HostFunctionTable(GUEST_FUNCTIONS)


#: The last limits asked for and their share: most calls ask for the same limits object again,
#: and a frozen dataclass of many fields is slow to hash.
_LAST_LISP_LIMITS: tuple[Any, LispLimits] | None = None


def lisp_limits(limits: Any) -> LispLimits:
    """The language's share of a process's limits (memoized: limits are frozen values)."""
    global _LAST_LISP_LIMITS
    last = _LAST_LISP_LIMITS
    if last is not None and last[0] is limits:
        return last[1]
    found = _LISP_LIMITS.get(limits)
    if found is None:
        if len(_LISP_LIMITS) > 256:
            _LISP_LIMITS.clear()
        found = _LISP_LIMITS[limits] = _lisp_limits(limits)
    _LAST_LISP_LIMITS = (limits, found)
    return found


def _lisp_limits(limits: Any) -> LispLimits:
    return LispLimits(
        max_call_stack=limits.max_call_stack,
        max_value_stack=limits.max_value_stack,
        max_namespace_entries=limits.max_namespace_entries,
        max_syntax_depth=limits.max_syntax_depth,
        max_integer_bits=limits.max_integer_bits,
        max_guest_memory=limits.max_guest_memory,
        max_steps=limits.max_steps,
        max_execution_millis=limits.max_execution_millis,
    )


def script_filename(name: str) -> str:
    return "/activation/inline.svit-script" if name == INLINE_NAME else f"/lib/{name}.svit-script"


def compile_check(name: str, source: str, limits: Any, budget: Budget | None = None) -> None:
    """Compile (never run) a script the way write-time validation does.

    Its compile-time code and the compiler's own work draw on ``budget`` (by default
    one of its own under ``limits``): a caller compiling many scripts under one bound
    passes the same budget to each.
    """
    if len(source.encode("utf-8")) > limits.max_script_bytes:
        raise ResourceLimitExceeded("script source")
    if budget is None:
        budget = Budget(limits.max_steps, limits.max_execution_millis)
    interp = Interpreter(lisp_limits(limits), budget, filename=script_filename(name))
    # The names every activation installs (WorkingState.install), so a script is
    # resolved at write time against exactly what it will run with.
    interp.define_value("input", NULL_VALUE)
    interp.define_value("*svit-version*", SVIT_VERSION)
    interp.define_functions(GUEST_TABLE)
    try:
        interp.compile(source, budget)
    except LispError as exc:
        raise compile_error_to_svit(exc) from None


def script_compiler(limits: Any, budget: Budget | None = None) -> Callable[[str, Any], None]:
    """A ``compile_script`` for :func:`validate_root` whose scripts all share one budget.

    Validating a root compiles every changed script; together they get one budget
    (``budget``, or one under ``limits`` made at the first compile), never one each.
    (A partial: every commit makes one, and most compile nothing.)
    """
    return partial(_compile_shared, limits, [budget] if budget is not None else [])


def _compile_shared(limits: Any, shared: list[Budget], name: str, script: Any) -> None:
    if not shared:
        shared.append(Budget(limits.max_steps, limits.max_execution_millis))
    compile_check(name, script.source, limits, shared[0])


class NamespacePool:
    """Guest namespaces kept between activations, so an activation renews one instead of
    building an interpreter and installing the guest functions again.

    A namespace holds nothing of a script but, at most, the definitions of the last
    definitions-only top level it ran, kept for that very compiled program (each run
    compiles its source, through the compile cache, from the working ``/lib``; see
    :meth:`Interpreter.run_and_call`), so no edit, rollback, fork or restore can make one
    stale. One taken is renewed to exactly the state :meth:`WorkingState.install`
    makes (:meth:`Interpreter.renew`) and owned by one activation until given back;
    a given-back one is emptied (:meth:`Interpreter.vacate`). At most ``size`` are kept,
    shared by every process of the host.
    """

    def __init__(self, size: int = 32) -> None:
        self.size = size
        self._free: dict[str, list[Interpreter]] = {}
        self._kept = 0
        self._lock = threading.Lock()

    def take(self, state: WorkingState, filename: str, input_value: Any) -> Interpreter:
        limits = state.lisp_limits
        interp: Interpreter | None = None
        # A with statement, not acquire() and try: a signal's KeyboardInterrupt can be raised
        # as acquire() returns, before a try has begun, and the lock would stay taken.
        with self._lock:
            free = self._free.get(filename)
            if free:
                interp = free.pop()
                self._kept -= 1
                if not free:
                    # No entry for a script the pool keeps nothing of: the index stays as
                    # bounded as the pool (scripts come and go by name).
                    del self._free[filename]
        if interp is not None and interp.limits is not limits and interp.limits != limits:
            interp = None  # made under other limits: the compile cache keys on them
        if interp is None:
            interp = Interpreter(limits, state.budget, filename=filename, passthrough=(SvitError,))
            state.install(interp, None)
            interp.seal()
        interp.renew(state.budget, state, {"input": input_value})
        return interp

    def give_back(self, interp: Interpreter) -> None:
        interp.vacate()
        with self._lock:  # (a with statement: see take)
            if self._kept >= self.size:
                return
            free = self._free.get(interp.filename)
            if free is None:
                free = self._free[interp.filename] = []
            free.append(interp)
            self._kept += 1


#: What fn_write makes a Set with (its frozen dataclass __init__ sets each field through
#: object.__setattr__, which costs more than the slot's own setter).
_new_object = object.__new__
_set_path = Set.__dict__["path"].__set__
_set_value = Set.__dict__["value"].__set__

#: The namespaces every activation draws from.
NAMESPACES = NamespacePool()


def held(node: Node) -> SvitValue:
    """A persistent value entering Lisp, charged against guest memory like any string or list."""
    value = SvitValue(node)
    lisp_context.current().allocate(value.memory_size())
    return value


def _text(value: Any, what: str) -> str:
    if type(value) is not str:
        raise ScriptFailed(f"{what} must be text")
    return value


#: ``(/lib node, name, script)`` of the last script found: most activations run the script
#: the one before ran, from the same committed /lib.
_LAST_SCRIPT: tuple[Node, str, Script] | None = None


class WorkingState(GuestHelpers):
    """The private, transactional state of one activation and its nested execs."""

    # Counters and a view most activations never change: class defaults until they do
    # (an assignment makes the instance's own).
    port_calls = 0
    exec_depth = 0
    _lib_view: Node | None = None

    def __init__(self, process: Process, dry_run: bool = False, base: Node | None = None,
                 limits: Limits | None = None) -> None:
        self.process = process
        self.limits = limits = process.limits if limits is None else limits
        #: The committed root the activation started from (``base`` and ``limits``, when
        #: the caller holding the process's lock has them at hand).
        if base is None:
            base = process.root
        self.base: Node = base
        #: The working ``/memory`` and ``/lib``: the base's, with every mutation below
        #: applied once each, in order (``apply_below``); :meth:`working_root` splices them in.
        chunk = base.value
        if base.code == tree.MAP and chunk.level == 0 and chunk.keys == ROOT_KEYS:
            # The nine sections in one leaf, in order (namespace.section, written out:
            # /lib is always a map, so stored as a node; /memory may have been replaced by
            # a scalar, stored raw).
            memory = chunk.items[_MEMORY_INDEX]
            self._base_memory: Node = memory if type(memory) is Node else tree.leaf_node(memory)
            self.base_lib: Node = chunk.items[_LIB_INDEX]
            self._sections_leaf = True
        else:
            self._base_memory = section(base, "memory")
            self.base_lib = section(base, "lib")
            self._sections_leaf = False
        # (``base_lib`` is the base's /lib: while ``lib`` is still it, of the whole root
        # only /memory can differ from the base, which the commit's check relies on.)
        self.memory: Node = self._base_memory
        self.lib: Node = self.base_lib
        self.staged: list[tuple[str, Script | None]] = []
        self.mutations: list[Mutation] = []
        self.changed: dict[str, None] = {}  # an ordered set: a checkpoint is its length
        self.logs: list[dict[str, Any]] = []
        self.messages: list[dict[str, Any]] = []
        self.mount_writes: list[tuple[str, str, Any]] = []  # (op, path, value)
        self.dry_run = dry_run
        self.budget = Budget(limits.max_steps, limits.max_execution_millis)
        last = _LAST_LISP_LIMITS  # lisp_limits' own first check, written out
        self.lisp_limits = last[1] if last is not None and last[0] is limits else lisp_limits(limits)

    # ------------------------------------------------------------------ checkpoints
    def checkpoint(self) -> tuple[Any, ...]:
        """What a captured failure restores, in O(1): the buffers only grow, so lengths suffice."""
        return (
            self.memory, self.lib, len(self.staged), len(self.mutations), len(self.changed),
            len(self.logs), len(self.messages), len(self.mount_writes),
        )

    def restore(self, saved: tuple[Any, ...]) -> None:
        """Undo everything staged since ``checkpoint`` (port calls made stay counted: they happened)."""
        memory, lib, staged, mutations, changed, logs, messages, mount_writes = saved
        self.memory = memory
        if lib is not self.lib:
            self.lib = lib
            self._lib_view = None
        del self.staged[staged:]
        del self.mutations[mutations:]
        while len(self.changed) > changed:
            self.changed.popitem()
        del self.logs[logs:]
        del self.messages[messages:]
        del self.mount_writes[mount_writes:]

    def _record(self, change: Mutation) -> None:
        self.mutations.append(change)
        self.changed[change.path] = None

    def working_root(self) -> Node:
        """The base root with the working ``/memory`` and ``/lib`` in place: every mutation
        of this activation applied, once each (the commit adds the outbox)."""
        root = self.base
        if self.memory is not self._base_memory:
            if self._sections_leaf:
                root = tree.set_leaf_entry(root, _MEMORY_INDEX, self.memory)  # set_at, with no search
            else:
                root = tree.set_at(root, ("memory",), self.memory)
        if self.lib is not self.base_lib:
            root = tree.set_at(root, ("lib",), self.lib)
        return root

    # ------------------------------------------------------------------ scripts
    def find_script(self, name: str) -> Script:
        global _LAST_SCRIPT
        lib = self.lib  # staged_lib(), the working /lib
        last = _LAST_SCRIPT
        if last is not None and last[0] is lib and last[1] == name:
            return last[2]  # the same (immutable) /lib node as the last look: the same script
        found = tree.find(lib, (name,))
        if type(found) is not Script:
            raise ScriptNotFound(name)
        _LAST_SCRIPT = (lib, name, found)
        return found

    def run(self, name: str, source: str, input_node: Node) -> Node:
        """Run ``main(input)`` of one script in a fresh namespace; returns the output node."""
        code = input_node.code
        # to_lisp(input_node), written out for a record or a list (what most inputs are).
        input_value = SvitValue(input_node) if code == tree.MAP or code == tree.ARRAY else to_lisp(input_node)
        interp = NAMESPACES.take(self, f"/lib/{name}.svit-script" if name != INLINE_NAME else script_filename(name),
                                 input_value)
        try:
            # Compiling draws on the activation's own budget, like everything it runs.
            found, result = interp.run_and_call(source, "main", input_value, compile_budget=self.budget)
            if not found:
                raise ScriptFailed(f"{script_filename(name)}: script must define main(input)")
            # Converting the output is paid from this activation's budget, like any conversion.
            return to_node(result, self.limits, self.budget)
        except HostFunctionError as exc:
            # A bug in a guest function's own code: the host's error, never the script's.
            cause = exc.__cause__
            raise InternalError(
                f"guest function {exc.function} failed in the host ({type(cause).__name__})") from cause
        except LispError as exc:
            raise compile_error_to_svit(exc) from None
        except ScriptFailed as exc:
            raise located(exc, name) from None
        finally:
            NAMESPACES.give_back(interp)

    # ------------------------------------------------------------------ guest functions
    def install(self, interp: Interpreter, input_node: Node | None) -> None:
        # compile_check installs the same names (a test keeps the two equal).
        interp.define_value("input", to_lisp(input_node))
        interp.define_value("*svit-version*", SVIT_VERSION)
        interp.define_functions(GUEST_TABLE, owner=self)

    def fn_value_get(self, value: Any, path: Any) -> Any:
        segments = parsed_before(path) if type(path) is str else None
        if segments is None:
            segments = parse(path if type(path) is str else _text(path, "value-get path"))
        if type(value) is SvitValue:
            # Validated on entry: an over-size port response is reduced with jq, not walked here.
            node: Node | None = value.node
            tree.validate_value(value.node, self.limits, scripts_allowed=False)
            if len(segments) == 1 and value.node.code == tree.MAP:
                # One key of a record (an input's field): find and item_to_lisp, written out.
                found = tree.find_key(value.node, segments[0])
                return found if type(found) is int else item_to_lisp(found)  # an integer is itself
        else:
            node = to_node(value, self.limits) if type(value) is tuple else None
        if node is None:
            if segments:
                raise InvalidPath(f"cannot walk through a scalar: {path}")
            return value
        return item_to_lisp(tree.find(node, segments))

    def fn_value_map(self, *args: Any) -> Any:
        if len(args) % 2:
            raise ScriptFailed("value-map expects text/value pairs")
        mapping: dict[str, Any] = {}
        for i in range(0, len(args), 2):
            key = args[i]
            if type(key) is not str:
                raise ScriptFailed("value-map key must be text")
            if key in mapping:
                raise InvalidValue(f"duplicate map key: {key}")
            mapping[key] = args[i + 1]
        # One measure for every entry: the totals bound the whole map, not each value.
        measure = Measure(self.limits)
        measure.add_entries(1 + len(mapping))
        plain = {}
        for key, value in mapping.items():
            measure.add_text(key)
            plain[key] = measure.part(value, 1)
        node = tree.from_value(plain, scripts_allowed=False)
        tree.validate_value(node, self.limits, scripts_allowed=False)
        return held(node)

    def fn_value_array(self, *args: Any) -> Any:
        measure = Measure(self.limits)
        measure.add_entries(1 + len(args))
        node = tree.from_value([measure.part(a, 1) for a in args], scripts_allowed=False)
        tree.validate_value(node, self.limits, scripts_allowed=False)
        return held(node)

    def view_lib(self) -> Node:
        """``/lib`` as the guest sees it: committed plus staged, scripts shown as maps."""
        if self._lib_view is None:
            lib = self.staged_lib()
            scripts: dict[str, Script] = {}
            for name in lib.child_names():
                entry = tree.get(lib, (name,))
                if entry is not None:
                    scripts[name] = entry.to_value()
            self._lib_view = tree.from_value(
                {name: {"documentation": s.documentation, "source": s.source} for name, s in scripts.items()},
                scripts_allowed=False,
            )
        return self._lib_view

    def view_get(self, segments: tuple[str, ...]) -> Node | None:
        if not segments:
            return tree.set_at(tree.set_at(self.base, ("memory",), self.memory), ("lib",), self.view_lib())
        head = segments[0]
        if head == "memory":
            return tree.get(self.memory, segments[1:])
        if head == "lib":
            return tree.get(self.view_lib(), segments[1:])
        return tree.get(self.base, segments)

    def fn_read(self, path: Any) -> Any:
        segments = parsed_before(path) if type(path) is str else None
        if segments is None:
            segments = parse(path if type(path) is str else _text(path, "read path"))
        if segments and segments[0] == "memory":
            # No node made for a scalar; /memory is a map.
            memory = self.memory  # a map unless a write to "/memory" replaced it
            found = tree.find_key(memory, segments[1]) if len(segments) == 2 and memory.code == tree.MAP \
                else tree.find(memory, segments[1:])
            return found if type(found) is int else item_to_lisp(found)  # an integer is itself
        if len(segments) >= 2 and segments[0] == "mounts":
            return plain_to_lisp(self.process.mount_read(segments))
        return to_lisp(self.view_get(segments))

    def fn_discover(self, path: Any) -> Any:
        segments = parse(_text(path, "discover path"))
        if len(segments) >= 2 and segments[0] == "mounts":
            names = self.process.mount_discover(segments)
        else:
            node = self.view_get(segments)
            if node is None or not node.is_container:
                raise InvalidPath(f"cannot discover {format_path(segments)}")
            names = node.child_names()
        return held(tree.from_value(names, scripts_allowed=False))

    def fn_stat(self, path: Any) -> Any:
        text = _text(path, "stat path")
        segments = parse(text)
        if len(segments) >= 2 and segments[0] == "mounts":
            return plain_to_lisp(self.process.mount_stat(segments))
        if segments and segments[0] == "lib" and len(segments) <= 2:
            # Scripts as the host stats them (leaf, svit-script, the script's hash), not
            # as the {documentation, source} records read shows.
            node = tree.get(self.staged_lib(), segments[1:])
        else:
            node = self.view_get(segments)
        if node is None:
            return NULL_VALUE
        return plain_to_lisp(stat_record(text, segments, node))

    def staged_lib(self) -> Node:
        """``/lib`` as it would commit: the committed scripts with the staged edits applied."""
        return self.lib

    def _stage_script(self, name: str, script: Script | None) -> None:
        if len(self.staged) >= self.limits.max_staged_scripts:
            raise ResourceLimitExceeded("staged scripts")
        self.staged.append((name, script))
        self._lib_view = None

    def fn_write(self, path: Any, value: Any) -> Any:
        text = path if type(path) is str else _text(path, "write path")
        segments = parsed_before(text)
        if segments is None:
            segments = parse(text)
        if segments and segments[0] == "memory":
            # A parsed path that is not the root is its own canonical text.
            # The run's budget is this activation's own (nested runs share it).
            node = to_node(value, self.limits, self.budget)
            # Set(text, node), made without the frozen dataclass's two object.__setattr__ calls.
            change = _new_object(Set)
            _set_path(change, text)
            _set_value(change, node)
            memory = self.memory
            if len(segments) == 2 and memory.code == tree.MAP:  # change.apply_below(memory, 1)
                memory = tree.set_key(memory, segments[1], node)
            else:  # a deeper path, the whole of /memory, or a key below a /memory that is not a map
                memory = tree.set_at(memory, segments[1:], node)
            tree.validate_value(memory, self.limits, scripts_allowed=False)
            self.memory = memory
            self.mutations.append(change)  # _record, written out
            self.changed[text] = None
            return None
        name = lib_name(segments)
        if name is not None:
            script = library_record(to_plain(value, self.limits) if type(value) is not Script else value)
            node = tree.from_value(script, scripts_allowed=True)
            change = Set(format_path(segments), node)
            lib = change.apply_below(self.lib, 1)
            self._stage_script(name, script)
            self.lib = lib
            self._record(change)
            return None
        if len(segments) >= 2 and segments[0] == "mounts":
            self.process.check_mount_write(segments)
            if len(self.mount_writes) >= self.limits.max_mount_writes:
                raise ResourceLimitExceeded("mount writes")
            self.mount_writes.append(("write", format_path(segments), to_plain(value, self.limits)))
            return None
        raise InvalidPath(f"path is not writable: {text}")

    def fn_remove(self, path: Any) -> Any:
        text = _text(path, "remove path")
        segments = parse(text)
        if segments and segments[0] == "memory":
            if len(segments) == 1:
                raise InvalidPath("cannot remove a namespace root")
            change = Remove(format_path(segments))
            self.memory = change.apply_below(self.memory, 1)
            self._record(change)
            return None
        name = lib_name(segments)
        if name is not None:
            if tree.get(self.staged_lib(), (name,)) is None:
                raise InvalidPath(f"path does not exist: {text}")
            change = Remove(format_path(segments))
            lib = change.apply_below(self.lib, 1)
            self._stage_script(name, None)
            self.lib = lib
            self._record(change)
            return None
        if len(segments) >= 2 and segments[0] == "mounts":
            self.process.check_mount_write(segments)
            if len(self.mount_writes) >= self.limits.max_mount_writes:
                raise ResourceLimitExceeded("mount writes")
            self.mount_writes.append(("remove", format_path(segments), None))
            return None
        raise InvalidPath(f"path is not removable: {text}")

    def fn_exec(self, path: Any, input_value: Any) -> Any:
        if type(path) is not str:
            if type(input_value) is str:
                raise ScriptFailed("exec expects (exec path input); arguments appear reversed")
            raise ScriptFailed("exec path must be text")
        name = lib_name(parse(path))
        if name is None:
            raise InvalidPath(f"exec accepts only /lib/<name> paths: {path}")
        if self.exec_depth + 1 > self.limits.max_exec_depth:
            raise ResourceLimitExceeded("nested exec depth")
        input_node = to_node(input_value, self.limits)
        script = self.find_script(name)
        self.exec_depth += 1
        try:
            output = self.run(name, script.source, input_node)
        finally:
            self.exec_depth -= 1
        return to_lisp(output)

    def fn_port_call(self, name: Any, input_value: Any) -> Any:
        name = _text(name, "port-call name")
        if not name or "/" in name:
            raise ScriptFailed("port-call name must name one port")
        plain = to_plain(input_value, self.limits)
        tree.validate_value(tree.from_value(plain, scripts_allowed=False), self.limits, scripts_allowed=False)
        # From here on every failure is a PortFailed: hard, so a safe helper can never
        # turn a refused or failed port call into a committed success.
        if self.dry_run:
            raise PortFailed(f"port /ports/{name} was not called: a dry run makes no external effects")
        ports = self.process.ports
        if ports is None:
            raise PortFailed("Svit Lisp port calls require a Svit host")
        if self.port_calls >= self.limits.max_port_calls:
            raise ResourceLimitExceeded("port calls")
        if len(json.dumps(plain, ensure_ascii=False, separators=(",", ":")).encode()) > PORT_INPUT_LIMIT:
            raise PortFailed("port input limit exceeded")
        self.port_calls += 1
        port = ports.get(name)
        if port is None:
            raise PortFailed(f"port /ports/{name} failed: port not found")
        context = self.process.port_context()
        started = time.monotonic()
        try:
            result = port.execute(context, plain)
        except Exception as exc:  # the port's failure, whatever its type, fails the activation
            log_port_failure(name, exc)
            failure = PortFailed(f"port /ports/{name} failed: {redact(failure_text(exc))}")
            failure.port_error = exc  # type: ignore[attr-defined]  # for the host, never the guest
            raise failure from None
        finally:
            # Time spent inside the port is not charged to the guest.
            if self.budget.deadline is not None:
                self.budget.deadline += time.monotonic() - started
        try:
            node = tree.from_value(result, scripts_allowed=False)
        except SvitError as exc:
            raise PortFailed(f"port /ports/{name} failed: invalid port output: {exc.detail}") from None
        # Not validated against value limits on entry (the guest may reduce it first), but
        # held by the guest like any other value, so charged to guest memory.
        lisp_context.current().allocate(node.text + 4 * node.count)
        return to_lisp(node)

    def fn_jq(self, filter_text: Any, value: Any) -> Any:
        filter_text = _text(filter_text, "jq filter")
        if type(value) is SvitValue:
            # A stored value may exceed the value limits (a port's response, to be reduced
            # here), so it is not measured against them, only paid for.
            charge_copy(value.node)
            data = value.node.to_value()
        else:
            # Input to reduce, not to store: its texts may exceed max_text_bytes, but all
            # their occurrences together stay within what the guest may hold.
            data = Measure(self.limits, max_text=self.limits.max_guest_memory).plain(value)
        # The worker gets what the activation has left, not a fixed budget of its own.
        run = lisp_context.current()
        run.budget.check_clock()
        deadline = run.budget.deadline
        left = stdlib.JQ_DEFAULT_TIMEOUT_SECONDS if deadline is None else deadline - time.monotonic()
        results = stdlib.run_jq(filter_text, data, timeout_seconds=left, memory_bytes=run.max_memory)
        node = tree.from_value(results, scripts_allowed=False)
        tree.validate_value(node, self.limits, scripts_allowed=False)
        return held(node)

    def fn_search(self, path: Any, pattern: Any) -> Any:
        text = _text(path, "search path")
        pattern = _text(pattern, "search pattern")
        try:
            segments = parse(text)
        except InvalidPath:
            raise ScriptFailed("invalid search path") from None
        if len(segments) >= 2 and segments[0] == "mounts":
            result = self.process.mount_search(segments, pattern)
        else:
            node = self.view_get(segments)
            if node is None:
                raise InvalidPath(f"path does not exist: {text}")
            charge_copy(node)
            result = stdlib.search_value(format_path(segments), node.to_value(), pattern)
        return held(tree.from_value(result, scripts_allowed=False))

    def fn_log_info(self, message: Any, fields: Any = None) -> Any:
        record = {"fields": to_plain(fields, self.limits), "message": _text(message, "log-info! message")}
        node = tree.from_value(record, scripts_allowed=False)
        tree.validate_value(node, self.limits, scripts_allowed=False)
        if len(self.logs) >= self.limits.max_logs:
            raise ResourceLimitExceeded("log records")
        self.logs.append({"message": record["message"], "fields": record["fields"]})
        return None

    def fn_send(self, address: Any, body: Any) -> Any:
        if len(self.messages) >= self.limits.max_messages:
            raise ResourceLimitExceeded("message intents")
        validate_address(_text(address, "send! address"))
        node = to_node(body, self.limits)
        self.messages.append({"to": address, "body": node.to_value()})
        return None


def located(exc: ScriptFailed, name: str) -> ScriptFailed:
    """Prefix a script failure with the script's virtual path, once (nested execs keep theirs)."""
    if getattr(exc, "located", False):
        return exc
    prefix = script_filename(name) + ": "
    # The same class: a port failure stays hard however many execs it crosses.
    fresh = type(exc)(exc.detail if exc.detail.startswith(prefix) else prefix + exc.detail, stack=exc.stack, kind=exc.kind)
    fresh.located = True  # type: ignore[attr-defined]
    if hasattr(exc, "port_error"):
        fresh.port_error = exc.port_error  # type: ignore[attr-defined]
    return fresh


bind_implementations(WorkingState)


def library_record(value: Any) -> Script:
    """A `/lib` write's value as a Script (reference §2.4 library write rules)."""
    if type(value) is Script:
        return value
    if type(value) is not dict:
        raise InvalidValue("library writes require a script record")
    if set(value) - {"source", "documentation"}:
        raise InvalidValue("library writes accept only source and documentation")
    source = value.get("source")
    if type(source) is not str:
        raise InvalidValue("library writes require a text source")
    documentation = value.get("documentation", "")
    if documentation is None:
        documentation = ""
    if type(documentation) is not str:
        raise InvalidValue("library documentation must be text")
    return Script(source, documentation)


__all__ = [
    "Activation",
    "INLINE_NAME",
    "NAMESPACES",
    "NamespacePool",
    "PORT_INPUT_LIMIT",
    "SVIT_VERSION",
    "WorkingState",
    "compile_check",
    "held",
    "library_record",
    "lisp_limits",
    "located",
    "script_compiler",
    "script_filename",
]
