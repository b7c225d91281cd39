"""The guest surface: one table of every Svit function a script can call.

:data:`BUILTINS` lists the guest functions in catalogue order (the reference's v2
catalogue, indices 0-44): name, implementation, arity, signature, description and
category. :data:`GUEST_FUNCTIONS` is derived from it and is the only thing
:mod:`svit.activation` installs, so a function cannot be callable without a catalogue
entry. ``(runtime-builtins)`` returns this table followed by the Lisp system functions
(:func:`lisp.functions.catalogue.system_catalogue`).

The helpers that are new in v2 live here as methods of :class:`GuestHelpers`, a base of
:class:`svit.activation.WorkingState` (the classic fifteen stay in ``activation``).

Failures follow one rule. *Hard* failures are never turned into data: Lisp limit errors,
the step budget, ``ResourceLimitExceeded``, ``ExecutionLimitExceeded``, any failure of a
port call (:class:`PortFailed`, kept through nested ``exec``), a change refused by a
read-only evaluation (``ReadOnlyEvaluation``), and interpreter faults.
Every other failure (``ScriptFailed``, ``InvalidPath``, ``InvalidValue``, a Lisp runtime
error such as a type error) is *recoverable*: ``safe-call``, ``dispatch-safe`` and the
``*-safe`` helpers return it as ``{"ok": false, "error": text}``. When ``safe-call`` or
``dispatch-safe`` captures a failure, the working state (memory, staged scripts, logs,
message intents, mount writes) is put back as it was before the call, as a failed
nested ``exec`` does.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from svit.lisp import context as lisp_context
from svit.lisp.context import UNITS_PER_STEP
from svit.lisp.errors import BudgetExhausted, EvalError, InternalError, LimitError, LispError
from svit.lisp.functions.catalogue import system_catalogue
from svit.lisp.interpreter import as_lisp_error
from svit.lisp.names import global_name
from svit.lisp.values import Foreign, is_function, type_name

from . import tree
from .errors import ExecutionLimitExceeded, ReadOnlyEvaluation, ResourceLimitExceeded, ScriptFailed, SvitError, sanitize
from .errors import InternalError as HostInternalError
from .guest import SvitValue, item_to_lisp, to_lisp, to_node
from .tree import Node

if TYPE_CHECKING:
    from .limits import Limits


class PortFailed(ScriptFailed):
    """A port call that failed or was refused: hard, so no safe helper can turn it into a success."""


#: Failures a safe helper must let through unchanged.
HARD_FAILURES: tuple[type[BaseException], ...] = (
    LimitError,
    BudgetExhausted,
    InternalError,
    HostInternalError,
    ResourceLimitExceeded,
    ExecutionLimitExceeded,
    PortFailed,
    ReadOnlyEvaluation,
    RecursionError,
    MemoryError,
)


def recoverable_text(exc: BaseException) -> str | None:
    """The captured text of a recoverable failure, or None when ``exc`` is hard."""
    if isinstance(exc, HARD_FAILURES):
        return None
    if isinstance(exc, ScriptFailed):
        return sanitize(exc.detail)
    if isinstance(exc, SvitError):
        return sanitize(exc.message)
    if not isinstance(exc, Exception):
        return None
    error = exc if isinstance(exc, LispError) else as_lisp_error(exc)
    if isinstance(error, (LimitError, BudgetExhausted, InternalError)):
        return None
    return sanitize(error.detail)


@dataclass(frozen=True)
class Builtin:
    """One guest function: how it is installed and how the catalogue describes it."""

    name: str
    implementation: str  # a method of WorkingState
    min_args: int
    max_args: int | None  # None: no upper bound
    signature: str
    description: str
    category: str
    arity_text: str | None = None  # the text of a wrong argument count; default "<name> expects N arguments"
    takes_depth: bool = False  # receives the caller's call depth (it calls guest functions)

    def wrong_count_text(self) -> str:
        if self.arity_text is not None:
            return self.arity_text
        if self.min_args == self.max_args:
            # The reference's text, plural even for one.
            return f"{self.name} expects {self.min_args} arguments"
        return f"{self.name} expects {self.min_args} to {self.max_args} arguments"


def _b(name: str, impl: str, lo: int, hi: int | None, signature: str, category: str, description: str, **extra: Any) -> Builtin:
    return Builtin(name, impl, lo, hi, signature, description, category, **extra)


CATEGORIES = (
    "discovery", "persistent-value", "predicate", "structured-data", "memory-tree", "scripts",
    "ports", "effects", "recoverable", "result", "dispatch",
)

#: The v2 guest catalogue, in the reference's order (index 0 runtime-builtins ... 44 safe-call).
BUILTINS: tuple[Builtin, ...] = (
    _b("runtime-builtins", "fn_runtime_builtins", 0, 0, "(runtime-builtins)", "discovery",
       "Array of maps {name, signature, description, category}: every function a script can call."),
    _b("value-map", "fn_value_map", 0, None, "(value-map key value ...)", "persistent-value",
       "Build a map from text keys and values; (value-map) is {}. Keys must be unique."),
    _b("value-array", "fn_value_array", 0, None, "(value-array value ...)", "persistent-value",
       "Build an array of the values; (value-array) is the empty array []."),
    _b("value-null?", "fn_value_null", 1, 1, "(value-null? value)", "predicate",
       "True only for Svit null, e.g. what read returns for an absent path. False for ()."),
    _b("value-get", "fn_value_get", 2, 2, "(value-get value path)", "persistent-value",
       "The part of a map/array at a slash path such as \"/items/0/name\" (\"\" is all); null when absent."),
    _b("jq", "fn_jq", 2, 2, "(jq filter value)", "structured-data",
       "Run a bounded jq filter over a value (or JSON text, or an HTTP response); an array of every output."),
    _b("search", "fn_search", 2, 2, "(search path pattern)", "memory-tree",
       "Regex search of the text below a path: {matches: [{path, line, text}], truncated}."),
    _b("discover", "fn_discover", 1, 1, "(discover path)", "memory-tree",
       "Array of the child names below a path: map keys in order, array indices as \"0\", \"1\", ..."),
    _b("read", "fn_read", 1, 1, "(read path)", "memory-tree",
       "The value at a path as this activation sees it (its own writes included); null when absent."),
    _b("stat", "fn_stat", 1, 1, "(stat path)", "memory-tree",
       "Facts about a node (kind, access, locality, hash, size); null when absent."),
    _b("write", "fn_write", 2, 2, "(write path value)", "memory-tree",
       "Set /memory/..., a /lib/<name> record {source, documentation} or a writable mount leaf; commits with the activation."),
    _b("remove", "fn_remove", 1, 1, "(remove path)", "memory-tree",
       "Remove a /memory node, a /lib/<name> script or a writable mount node; commits with the activation."),
    _b("exec", "fn_exec", 2, 2, "(exec path input)", "scripts",
       "Run (main input) of /lib/<name> inside this activation and return its output; a failure fails the caller."),
    _b("port-call", "fn_port_call", 2, 2, "(port-call name input)", "ports",
       "Call the host port /ports/<name> once with input and return its output; its effect stands even on rollback."),
    _b("log-info!", "fn_log_info", 1, 2, "(log-info! message [fields])", "effects",
       "Add a log record {message, fields} to this activation's result (not stored in the process).",
       arity_text="log-info! expects a message and optional fields"),
    _b("send!", "fn_send", 2, 2, "(send! address body)", "effects",
       "Send body to the process at a svit:// address when this activation commits."),
    _b("json-parse", "fn_json_parse", 1, 1, "(json-parse text)", "structured-data",
       "Parse JSON text: objects, arrays and null become Svit values, scalars stay Lisp values."),
    _b("json-stringify", "fn_json_stringify", 1, 1, "(json-stringify value)", "structured-data",
       "Compact JSON text of a value, map keys sorted; a Lisp list becomes an array, () becomes null."),
    _b("json-parse-safe", "fn_json_parse_safe", 1, 1, "(json-parse-safe text)", "recoverable",
       "Like json-parse, but returns {ok: true, value} or {ok: false, error} instead of failing."),
    _b("map?", "fn_is_map", 1, 1, "(map? value)", "predicate",
       "True only for a Svit map."),
    _b("map-get", "fn_map_get", 2, 2, "(map-get map key)", "structured-data",
       "The entry of a map under a text key; fails when the key is absent (see map-has?, map-get-safe)."),
    _b("map-get-safe", "fn_map_get_safe", 2, 2, "(map-get-safe map key)", "recoverable",
       "Like map-get, but returns {ok: true, value} or {ok: false, error} instead of failing."),
    _b("map-has?", "fn_map_has", 2, 2, "(map-has? map key)", "structured-data",
       "True when the map has an entry under key."),
    _b("map-set", "fn_map_set", 3, 3, "(map-set map key value)", "structured-data",
       "A new map with key set to value; the given map is unchanged."),
    _b("list?", "fn_is_list", 1, 1, "(list? value)", "predicate",
       "True for a Lisp list (() included) and for a Svit array: exactly what list-get accepts."),
    _b("list-get", "fn_list_get", 2, 2, "(list-get list index)", "structured-data",
       "The item at a zero-based index of a Svit array or a Lisp list; fails when out of bounds."),
    _b("string?", "fn_is_string", 1, 1, "(string? value)", "predicate",
       "True for text."),
    _b("number?", "fn_is_number", 1, 1, "(number? value)", "predicate",
       "True for an integer or a float (false for a ratio such as 1/2)."),
    _b("boolean?", "fn_is_boolean", 1, 1, "(boolean? value)", "predicate",
       "True for true and false."),
    _b("null?", "fn_is_null", 1, 1, "(null? value)", "predicate",
       "True only for Svit null (same as value-null?)."),
    _b("result-ok", "fn_result_ok", 1, 1, "(result-ok value)", "result",
       "The result map {ok: true, value: value}."),
    _b("result-error", "fn_result_error", 1, 1, "(result-error message)", "result",
       "The result map {ok: false, error: message}."),
    _b("result-ok?", "fn_result_is_ok", 1, 1, "(result-ok? result)", "result",
       "True when a result map is a success."),
    _b("result-value", "fn_result_value", 1, 1, "(result-value result)", "result",
       "The value of a successful result map; fails on a failed one."),
    _b("result-error-message", "fn_result_error_message", 1, 1, "(result-error-message result)", "result",
       "The error text of a failed result map; fails on a successful one."),
    _b("result-map", "fn_result_map", 2, 2, "(result-map function result)", "result",
       "On success, (function value) wrapped as a new success; a failure is returned unchanged.",
       arity_text="result transform expects 2 arguments", takes_depth=True),
    _b("result-and-then", "fn_result_and_then", 2, 2, "(result-and-then function result)", "result",
       "On success, (function value), which must return a result map; a failure is returned unchanged.",
       arity_text="result transform expects 2 arguments", takes_depth=True),
    _b("result-or-else", "fn_result_or_else", 2, 2, "(result-or-else function result)", "result",
       "On failure, (function error), which must return a result map; a success is returned unchanged.",
       arity_text="result transform expects 2 arguments", takes_depth=True),
    _b("value-at", "fn_value_at", 2, 2, "(value-at value path)", "structured-data",
       "The part of a value at a path given as a Lisp list of keys and indices, e.g. (list \"items\" 0); fails when absent."),
    _b("value-at-safe", "fn_value_at_safe", 2, 2, "(value-at-safe value path)", "recoverable",
       "Like value-at, but returns {ok: true, value} or {ok: false, error} instead of failing."),
    _b("value-has-path?", "fn_value_has_path", 2, 2, "(value-has-path? value path)", "structured-data",
       "True when value-at would find the path (a malformed path list still fails)."),
    _b("dispatch-table", "fn_dispatch_table", 0, None, "(dispatch-table name function ...)", "dispatch",
       "A table of named handler functions for dispatch; it lives only during the activation."),
    _b("dispatch", "fn_dispatch", 3, 3, "(dispatch table name argument)", "dispatch",
       "Call the handler registered under name with argument; an unknown name fails.", takes_depth=True),
    _b("dispatch-safe", "fn_dispatch_safe", 3, 3, "(dispatch-safe table name argument)", "dispatch",
       "Like dispatch, but returns a result map; a captured failure undoes the handler's writes.", takes_depth=True),
    _b("safe-call", "fn_safe_call", 1, None, "(safe-call function argument ...)", "recoverable",
       "Call function; return {ok: true, value} or, on a recoverable error, {ok: false, error} with the call's writes undone.",
       arity_text="safe-call expects at least one argument", takes_depth=True),
)

#: Guest functions of this implementation beyond the v2 catalogue (listed last by runtime-builtins).
EXTENSIONS: tuple[Builtin, ...] = (
    _b("to-array", "fn_to_array", 1, 1, "(to-array xs)", "persistent-value",
       "A Lisp list or an array as an array value: (to-array ()) is [], where writing () stores null."),
    _b("map-remove", "fn_map_remove", 2, 2, "(map-remove map key)", "structured-data",
       "A new map without the entry under key (unchanged when absent); the given map is unchanged."),
)

assert all(b.category in CATEGORIES for b in BUILTINS + EXTENSIONS)
# Each entry has its own implementation (it carries that entry's wrong-count text).
assert len({b.implementation for b in BUILTINS + EXTENSIONS}) == len(BUILTINS + EXTENSIONS)

#: What :meth:`lisp.interpreter.Interpreter.define_functions` installs, derived from the tables.
GUEST_FUNCTIONS: dict[str, tuple[str, str, int, int | None]] = {
    global_name(b.name): (b.name, b.implementation, b.min_args, b.max_args) for b in BUILTINS + EXTENSIONS
}


def bind_implementations(cls: type) -> None:
    """Give each implementing method of ``cls`` its wrong-count text and depth flag.

    Called once for :class:`~svit.activation.WorkingState`; refuses a table entry whose
    implementation does not exist, so the table and the code cannot drift apart.
    """
    for builtin in BUILTINS + EXTENSIONS:
        fn = cls.__dict__.get(builtin.implementation)
        if fn is None:
            for base in cls.__mro__:
                fn = base.__dict__.get(builtin.implementation)
                if fn is not None:
                    break
        if fn is None:
            raise TypeError(f"guest function {builtin.name} has no implementation {builtin.implementation}")
        target: Any = fn.__func__ if isinstance(fn, staticmethod) else fn  # a plain function: attributes can be set
        target.arity_text = builtin.wrong_count_text()
        target.takes_depth = builtin.takes_depth


_CATALOGUE: tuple[int, list[dict[str, str]], Node] | None = None


def runtime_catalogue() -> list[dict[str, str]]:
    """The catalogue entries: the v2 guest functions in order, every Lisp system function, then the guest extensions."""
    return _catalogue()[1]


def _catalogue() -> tuple[int, list[dict[str, str]], Node]:
    global _CATALOGUE
    system = system_catalogue()
    if _CATALOGUE is None or _CATALOGUE[0] != len(system):
        entries = [
            {"category": b.category, "description": b.description, "name": b.name, "signature": b.signature}
            for b in BUILTINS
        ]
        entries.extend(system)
        entries.extend(
            {"category": b.category, "description": b.description, "name": b.name, "signature": b.signature}
            for b in EXTENSIONS
        )
        _CATALOGUE = (len(system), entries, tree.from_value(entries, scripts_allowed=False))
    return _CATALOGUE


class DispatchTable(Foreign):
    """An explicit table of handler functions; it cannot be persisted or returned."""

    __slots__ = ("handlers",)

    def __init__(self, handlers: dict[str, Any]) -> None:
        self.handlers = handlers

    def type_name(self) -> str:
        return "svit-dispatch-table"

    def memory_size(self) -> int:
        return max(1, len(self.handlers))


def _map_node(value: Any, what: str) -> Node:
    if type(value) is SvitValue and value.node.kind == "map":
        return value.node
    raise ScriptFailed(f"{what} expects a map")


def _text(value: Any, what: str) -> str:
    if type(value) is not str:
        raise ScriptFailed(f"{what} must be text")
    return value


def _charge(units: int) -> None:
    """Charge the step budget for work proportional to ``units`` before doing it."""
    if units >= UNITS_PER_STEP:
        lisp_context.current().budget.charge(units // UNITS_PER_STEP)


def _held(node: Node) -> SvitValue:
    value = SvitValue(node)
    lisp_context.current().allocate(value.memory_size())
    return value


def _as_lisp(node: Node) -> Any:
    """A node handed back to the guest: containers are charged to guest memory."""
    if node.is_container:
        return _held(node)
    return to_lisp(node)


def _result_node(ok: bool, payload: Node) -> Node:
    base = tree.from_value({"ok": ok}, scripts_allowed=False)
    return tree.set_at(base, ("value" if ok else "error",), payload)


def _path_components(path: Any) -> tuple[Any, ...]:
    if path is None:
        return ()
    if type(path) is not tuple:
        raise ScriptFailed("value path must be a Lisp list")
    _charge(len(path))
    for component in path:
        t = type(component)
        if t is str:
            continue
        if t is int:
            if component < 0:
                raise ScriptFailed("path index must be non-negative")
            continue
        raise ScriptFailed("path components must be strings or non-negative integers")
    return path


def _value_at(node: Node, path: tuple[Any, ...]) -> Node:
    for component in path:
        kind = node.kind
        if kind == "map" and type(component) is str:
            found = tree.get(node, (component,))
            if found is None:
                raise ScriptFailed("value path key is absent")
        elif kind == "array" and type(component) is int:
            if component >= node.size:
                raise ScriptFailed("value path index is out of bounds")
            found = tree.get(node, (str(component),))
            assert found is not None
        else:
            raise ScriptFailed("value path component does not match its container")
        node = found
    return node


def _result_parts(value: Any) -> tuple[bool, Node]:
    node = _map_node(value, "result helper")
    ok = tree.get(node, ("ok",))
    if ok is None or ok.kind != "bool":
        raise ScriptFailed("result map requires a Boolean ok field")
    flag = ok.to_value()
    payload = tree.get(node, ("value" if flag else "error",))
    if payload is None:
        raise ScriptFailed("result map is missing its payload")
    return flag, payload


def _parse_json(text: str, limits: Limits) -> Node:
    _charge(len(text))

    def refuse_constant(_name: str) -> Any:
        raise ValueError("not JSON")

    try:
        parsed = json.loads(text, parse_constant=refuse_constant)
    except (ValueError, RecursionError):
        raise ScriptFailed("invalid JSON") from None
    node = tree.from_value(parsed, scripts_allowed=False)
    tree.validate_value(node, limits, scripts_allowed=False)
    return node


class GuestHelpers:
    """The v2 helpers; mixed into WorkingState, which provides ``limits``, ``checkpoint`` and ``restore``."""

    limits: Limits

    def checkpoint(self) -> Any:  # pragma: no cover - provided by WorkingState
        raise NotImplementedError

    def restore(self, checkpoint: Any) -> None:  # pragma: no cover - provided by WorkingState
        raise NotImplementedError

    # ------------------------------------------------------------------ extensions
    def fn_to_array(self, items: Any) -> SvitValue:
        if type(items) is SvitValue:
            if items.node.kind == "array":
                return items
            raise ScriptFailed(f"to-array expects a Lisp list or an array, found a {items.node.kind}")
        if items is None:
            return _held(tree.from_value([], scripts_allowed=False))
        if type(items) is not tuple:
            raise ScriptFailed(f"to-array expects a Lisp list or an array, found {type_name(items)}")
        return _held(to_node(items, self.limits))

    # ------------------------------------------------------------------ results
    def _ok(self, node: Node) -> SvitValue:
        result = _result_node(True, node)
        tree.validate_value(result, self.limits, scripts_allowed=False)
        return _held(result)

    def _failed(self, text: str) -> SvitValue:
        result = _result_node(False, tree.from_value(text, scripts_allowed=False))
        tree.validate_value(result, self.limits, scripts_allowed=False)
        return _held(result)

    def _captured(self, attempt: Callable[[], Node]) -> SvitValue:
        """Run ``attempt``; a recoverable failure becomes a failed result, a hard one propagates."""
        try:
            node = attempt()
        except BaseException as exc:
            text = recoverable_text(exc)
            if text is None:
                raise
            return self._failed(text)
        return self._ok(node)

    def _captured_call(self, attempt: Callable[[], Node]) -> SvitValue:
        """As :meth:`_captured`, and a captured failure puts the working state back."""
        saved = self.checkpoint()
        try:
            node = attempt()
        except BaseException as exc:
            text = recoverable_text(exc)
            if text is None:
                raise
            self.restore(saved)
            return self._failed(text)
        return self._ok(node)

    # ------------------------------------------------------------------ discovery
    def fn_runtime_builtins(self) -> Any:
        return _held(_catalogue()[2])

    # ------------------------------------------------------------------ predicates
    @staticmethod
    def fn_value_null(value: Any) -> bool:
        return type(value) is SvitValue and value.node.kind == "null"

    @staticmethod
    def fn_is_null(value: Any) -> bool:
        return type(value) is SvitValue and value.node.kind == "null"

    @staticmethod
    def fn_is_map(value: Any) -> bool:
        return type(value) is SvitValue and value.node.kind == "map"

    @staticmethod
    def fn_is_list(value: Any) -> bool:
        return value is None or type(value) is tuple or (type(value) is SvitValue and value.node.kind == "array")

    @staticmethod
    def fn_is_string(value: Any) -> bool:
        return type(value) is str

    @staticmethod
    def fn_is_number(value: Any) -> bool:
        return type(value) is int or type(value) is float

    @staticmethod
    def fn_is_boolean(value: Any) -> bool:
        return type(value) is bool

    # ------------------------------------------------------------------ JSON
    def fn_json_parse(self, text: Any) -> Any:
        return _as_lisp(_parse_json(_text(text, "json-parse"), self.limits))

    def fn_json_stringify(self, value: Any) -> str:
        node = to_node(value, self.limits)
        _charge(node.text + 4 * node.count)
        text = json.dumps(node.to_value(), ensure_ascii=False, separators=(",", ":"), sort_keys=True)
        lisp_context.current().allocate(len(text))
        return text

    def fn_json_parse_safe(self, text: Any) -> Any:
        return self._captured(lambda: _parse_json(_text(text, "json-parse-safe"), self.limits))

    # ------------------------------------------------------------------ maps and lists
    def _map_entry(self, mapping: Any, key: Any) -> Node:
        node = _map_node(mapping, "map-get")
        found = tree.get(node, (_text(key, "map-get"),))
        if found is None:
            raise ScriptFailed("map key is absent")
        return found

    def fn_map_get(self, mapping: Any, key: Any) -> Any:
        if type(mapping) is SvitValue and type(key) is str and mapping.node.code == tree.MAP:
            # The common case, with no node made for a scalar entry.
            found = tree.find_key(mapping.node, key)
            if found is tree.ABSENT:
                raise ScriptFailed("map key is absent")
            return found if type(found) is int else item_to_lisp(found)  # an integer is itself
        return to_lisp(self._map_entry(mapping, key))

    def fn_map_get_safe(self, mapping: Any, key: Any) -> Any:
        def attempt() -> Node:
            found = self._map_entry(mapping, key)
            tree.validate_value(found, self.limits, scripts_allowed=False)
            return found

        return self._captured(attempt)

    def fn_map_has(self, mapping: Any, key: Any) -> bool:
        node = _map_node(mapping, "map-has?")
        return tree.get(node, (_text(key, "map-has?"),)) is not None

    def fn_map_set(self, mapping: Any, key: Any, value: Any) -> Any:
        node = _map_node(mapping, "map-set")
        key = _text(key, "map-set")
        return _held(tree.set_at(node, (key,), to_node(value, self.limits)))

    def fn_map_remove(self, mapping: Any, key: Any) -> Any:
        node = _map_node(mapping, "map-remove")
        key = _text(key, "map-remove")
        if tree.get(node, (key,)) is None:
            return mapping
        return _held(tree.remove_at(node, (key,)))

    def fn_list_get(self, items: Any, index: Any) -> Any:
        is_array = type(items) is SvitValue and items.node.kind == "array"
        if not (is_array or items is None or type(items) is tuple):
            raise ScriptFailed("list-get expects a structured list")
        if type(index) is not int:
            raise ScriptFailed("list-get expects an integer index")
        if index < 0:
            raise ScriptFailed("list-get expects a non-negative index")
        if is_array:
            if index >= items.node.size:
                raise ScriptFailed("list index is out of bounds")
            return to_lisp(tree.get(items.node, (str(index),)))
        if items is None or index >= len(items):
            raise ScriptFailed("list index is out of bounds")
        return items[index]

    # ------------------------------------------------------------------ results
    def fn_result_ok(self, value: Any) -> Any:
        return self._ok(to_node(value, self.limits))

    def fn_result_error(self, message: Any) -> Any:
        return self._failed(_text(message, "result-error"))

    @staticmethod
    def fn_result_is_ok(result: Any) -> bool:
        return _result_parts(result)[0]

    @staticmethod
    def fn_result_value(result: Any) -> Any:
        ok, payload = _result_parts(result)
        if not ok:
            raise ScriptFailed("result-value expects a successful result")
        return to_lisp(payload)

    @staticmethod
    def fn_result_error_message(result: Any) -> Any:
        ok, payload = _result_parts(result)
        if ok:
            raise ScriptFailed("result-error-message expects a failed result")
        return to_lisp(payload)

    def _transform(self, depth: int, function: Any, result: Any, on_success: bool, wraps: bool) -> Any:
        ok, payload = _result_parts(result)
        if ok is not on_success:
            return result
        returned = _call(depth, function, (to_lisp(payload),))
        if wraps:
            return self._ok(to_node(returned, self.limits))
        _result_parts(returned)
        return returned

    def fn_result_map(self, depth: int, function: Any, result: Any) -> Any:
        return self._transform(depth, function, result, True, True)

    def fn_result_and_then(self, depth: int, function: Any, result: Any) -> Any:
        return self._transform(depth, function, result, True, False)

    def fn_result_or_else(self, depth: int, function: Any, result: Any) -> Any:
        return self._transform(depth, function, result, False, False)

    # ------------------------------------------------------------------ value paths
    def fn_value_at(self, value: Any, path: Any) -> Any:
        node = to_node(value, self.limits)
        return to_lisp(_value_at(node, _path_components(path)))

    def fn_value_at_safe(self, value: Any, path: Any) -> Any:
        return self._captured(lambda: _value_at(to_node(value, self.limits), _path_components(path)))

    def fn_value_has_path(self, value: Any, path: Any) -> bool:
        node = to_node(value, self.limits)
        components = _path_components(path)
        try:
            _value_at(node, components)
        except ScriptFailed:
            return False
        return True

    # ------------------------------------------------------------------ dispatch
    @staticmethod
    def fn_dispatch_table(*args: Any) -> Any:
        if len(args) % 2:
            raise ScriptFailed("dispatch-table expects name/function pairs")
        _charge(len(args))
        handlers: dict[str, Any] = {}
        for i in range(0, len(args), 2):
            name = _text(args[i], "dispatch-table")
            if name in handlers:
                raise ScriptFailed("dispatch-table handler names must be unique")
            if not is_function(args[i + 1]):
                raise ScriptFailed("dispatch-table values must be functions")
            handlers[name] = args[i + 1]
        table = DispatchTable(handlers)
        lisp_context.current().allocate(table.memory_size())
        return table

    @staticmethod
    def _handler_table(table: Any, name: Any) -> tuple[DispatchTable, str]:
        if type(table) is not DispatchTable:
            raise ScriptFailed("dispatch expects a dispatch table")
        return table, _text(name, "dispatch")

    def _run_handler(self, depth: int, table: DispatchTable, name: str, argument: Any) -> Node:
        handler = table.handlers.get(name)
        if handler is None:
            raise ScriptFailed("dispatch handler is not registered")
        return to_node(_call(depth, handler, (argument,)), self.limits)

    def fn_dispatch(self, depth: int, table: Any, name: Any, argument: Any) -> Any:
        table, name = self._handler_table(table, name)
        return to_lisp(self._run_handler(depth, table, name, argument))

    def fn_dispatch_safe(self, depth: int, table: Any, name: Any, argument: Any) -> Any:
        table, name = self._handler_table(table, name)
        return self._captured_call(lambda: self._run_handler(depth, table, name, argument))

    def fn_safe_call(self, depth: int, function: Any, *args: Any) -> Any:
        return self._captured_call(lambda: to_node(_call(depth, function, args), self.limits))


def _call(depth: int, function: Any, args: tuple[Any, ...]) -> Any:
    """Call a guest function one frame deeper than the helper that received it."""
    if not is_function(function):
        raise EvalError(f"type error: expected function, found {type_name(function)}")
    try:
        return function(depth + 1, *args)
    except (LispError, SvitError, RecursionError, MemoryError):
        raise
    except Exception as exc:
        # A failure inside guest code is the guest's: named in Lisp terms here, so it is
        # never taken for a failure of the helper that called it.
        raise as_lisp_error(exc).with_traceback(exc.__traceback__) from None


def catalogue_names() -> list[str]:
    """Every name ``(runtime-builtins)`` lists, in its order."""
    return [entry["name"] for entry in runtime_catalogue()]


__all__ = [
    "BUILTINS",
    "Builtin",
    "CATEGORIES",
    "DispatchTable",
    "EXTENSIONS",
    "GUEST_FUNCTIONS",
    "GuestHelpers",
    "HARD_FAILURES",
    "PortFailed",
    "bind_implementations",
    "catalogue_names",
    "recoverable_text",
    "runtime_catalogue",
]
