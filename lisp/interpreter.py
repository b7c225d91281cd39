"""Running compiled Svit Lisp: the interpreter a host embeds.

An :class:`Interpreter` is one fresh guest namespace. The host installs foreign
functions and values, runs a source (every top-level form, in order), then calls a
global such as ``main``. Everything the guest does is bounded by the shared
:class:`~lisp.budget.Budget` and the :class:`~lisp.context.LispLimits`; every
failure leaves as a :class:`~lisp.errors.LispError` (or, unchanged, as one of the
host's own exception types listed in ``passthrough``).
"""

from __future__ import annotations

import re
import sys
import threading
import warnings
from collections import OrderedDict
from types import FunctionType, TracebackType
from typing import Any, Callable, Literal, Mapping

import blake3

from . import context as run_context
from .budget import SLICE, Budget, CompileMeter
from .compiler import (
    CODE_CHARS_PER_STEP,
    Compiled,
    Compiler,
    check_program_limits,
    max_code_chars,
    referenced_globals,
)
from .context import Context, LispLimits
from .errors import BudgetExhausted, CompileError, EvalError, Frame, HostFunctionError, InternalError, LimitError, LispError
from .expand import Expander, nesting_depth
from .functions import SYSTEM_FUNCTIONS
from .functions.compare import equal, ge2, gt2, le2, lt2
from .functions.numbers import add2, mul2, sub2
from .memory import Meter, enter_space, leave_space
from .names import global_name, lisp_name_of, mangle
from .reader import Program, as_code, as_data, read
from .resolve import HostNames, host_names, resolve
from .syntax import expected_arguments
from .values import Keyword, LispList, LispValue, Name, make_quoted, mark_function, type_name

__all__ = ["RUN_RECURSION_LIMIT", "HostFunctionTable", "Interpreter", "as_lisp_error", "evaluate"]

#: The Python recursion limit while a run is active. Guest recursion is bounded by
#: max_call_stack (hard max 4,096, a few Python frames per call) long before this.
RUN_RECURSION_LIMIT = 20_000


class _RecursionAllowance:
    """Raise the recursion limit while any run is active, and restore it after the last.

    Counted across threads and nested runs (a host function may run guest code), so
    one run ending never lowers the limit under another still going.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.active = 0
        self.saved: int | None = None

    def acquire(self) -> None:
        with self.lock:
            if self.active == 0:
                before = sys.getrecursionlimit()
                if before < RUN_RECURSION_LIMIT:
                    sys.setrecursionlimit(RUN_RECURSION_LIMIT)
                    self.saved = before
            self.active += 1

    def release(self) -> None:
        with self.lock:
            self.active -= 1
            if self.active == 0 and self.saved is not None:
                # Unless the host changed it meanwhile, put back what it had set.
                if sys.getrecursionlimit() == RUN_RECURSION_LIMIT:
                    sys.setrecursionlimit(self.saved)
                self.saved = None


_recursion = _RecursionAllowance()
_RUN_LOCAL = run_context.RUN_LOCAL

_NOARG = object()
#: What a host function wrapper's unfilled parameter holds: no value guest code can hold.
_NO_ARGUMENT = object()
_new_guard = object.__new__

#: CPython's complaint about a call to a generated function (``g_f()`` or a closure).
_GUEST_CALL = re.compile(r"(?:_mk[0-9]+_K[0-9]+\.<locals>\.)?(?:g_[A-Za-z0-9_]*|_lambda[0-9]+|v[0-9]+_[A-Za-z0-9_]*)\(\) ")

_PY_TYPE_NAMES = {
    "int": "integer", "str": "string", "NoneType": "unit", "float": "float", "bool": "bool",
    "tuple": "list", "Fraction": "ratio", "Char": "char", "bytes": "bytes", "LispPath": "path",
    "Name": "name", "Keyword": "keyword",
}


def _arity_message(name: str, expected: str, found: int) -> str:
    return f"`{name}` expects {expected}, found {found}"


_expected = expected_arguments  # run-time arity errors read like the resolver's


def _system_wrapper(name: str) -> Callable[..., Any]:
    spec = SYSTEM_FUNCTIONS[name]
    fn, lo, hi = spec.fn, spec.min_args, spec.max_args

    if spec.takes_depth:

        def call(_d: int, *args: Any) -> Any:
            n = len(args)
            if n < lo or (hi is not None and n > hi):
                raise EvalError(_arity_message(name, _expected(lo, hi), n))
            return fn(_d, *args)

        return mark_function(call, name)

    def call_plain(_d: int, *args: Any) -> Any:
        n = len(args)
        if n < lo or (hi is not None and n > hi):
            raise EvalError(_arity_message(name, _expected(lo, hi), n))
        return fn(*args)

    return mark_function(call_plain, name)


def _truth(value: Any) -> bool:
    if value is True:
        return True
    if value is False:
        return False
    raise EvalError(f"type error: expected bool, found {type_name(value)}")


def _not(value: Any) -> bool:
    return not _truth(value)


def _case_match(key: Any, literals: LispList) -> bool:
    for literal in literals:
        if literal is None:
            if key is None:
                return True
        elif literal is True or literal is False:
            if _truth(key) is literal:
                return True
        elif equal(key, literal):
            return True
    return False


def _splice(value: Any) -> LispList:
    if value is None:
        return ()
    if type(value) is tuple:
        return value
    raise EvalError(f"type error: unquote-splicing expects a list, found {type_name(value)}")


def _qq(*segments: LispList) -> Any:
    # Measure first: splicing a big list many times must be refused before it is built.
    total = 0
    for segment in segments:
        total += len(segment)
    if not total:
        return None
    context = run_context.current()
    context.allocate(8 * total)  # refused before the splices are copied
    items: list[LispValue] = []
    for segment in segments:
        items.extend(segment)
    return context.new_list(items)


def _apply(_d: int, fn: Any, *args: Any) -> Any:
    *fixed, last = args
    if last is not None and type(last) is not tuple:
        raise EvalError(f"type error: `apply` expects a list as its last argument, found {type_name(last)}")
    spread = tuple(fixed) + (last or ())
    if len(spread) > run_context.current().limits.max_value_stack:
        raise LimitError("value stack")
    return fn(_d + 1, *spread)


def _keyword_args(pairs: LispList, names: tuple[Keyword, ...]) -> tuple[object, ...]:
    values = dict.fromkeys(names, _NOARG)
    if len(pairs) % 2:
        raise EvalError("keyword arguments must come in `:name value` pairs")
    for i in range(0, len(pairs), 2):
        key = pairs[i]
        if type(key) is not Keyword or key not in values:
            shown = f":{key.name}" if type(key) is Keyword else type_name(key)
            raise EvalError(f"unexpected keyword argument {shown}")
        values[key] = pairs[i + 1]
    return tuple(values[n] for n in names)


def _deep() -> Any:
    raise LimitError("call stack")


def _too_big() -> Any:
    raise LimitError("integer bits")


def _value_stack() -> Any:
    raise LimitError("value stack")


def _stack_exceeded(depth: int, max_call_stack: int) -> Any:
    """A tracked entry check failed: the call depth or the values held ran out."""
    if depth & ((1 << 24) - 1) > max_call_stack:
        raise LimitError("call stack")
    raise LimitError("value stack")


#: The language's own helpers and system functions, the same for every namespace. Generated
#: code finds them as its builtins (a global it does not define itself), so a namespace's
#: own dict holds only what is its own and a renewal restores a few entries, not hundreds.
#: Nothing writes to it after import: guest code stores globals in its namespace's dict, and
#: nothing of Python's own builtins is in it.
_SHARED: dict[str, Any] = {
    "_type": type,
    "_int": int,
    "_NOARG": _NOARG,
    "_truth": _truth,
    "_not": _not,
    "_case_match": _case_match,
    "_splice": _splice,
    "_qq": _qq,
    "_apply": _apply,
    "_keyword_args": _keyword_args,
    "_deep": _deep,
    "_value_stack": _value_stack,
    "_stack_exceeded": _stack_exceeded,
    # What stops a ranked copy and runs the typed body instead (lisp.compiler.Compiler.ranked_copy).
    "_Replay": Exception,
    "_too_big": _too_big,
    "_quoted": make_quoted,
    "_equal": equal,
    "_add2": add2,
    "_sub2": sub2,
    "_mul2": mul2,
    "_lt2": lt2,
    "_gt2": gt2,
    "_le2": le2,
    "_ge2": ge2,
}
for _name, _spec in SYSTEM_FUNCTIONS.items():
    _SHARED["_S_" + mangle(_name)] = _spec.fn
    _SHARED["_F_" + mangle(_name)] = _system_wrapper(_name)

#: What every namespace starts from: no Python builtins, the shared helpers beneath.
_BASE: dict[str, Any] = {"__builtins__": _SHARED}


#: Compiled programs with the steps compiling them took, by source, file name, limits and names.
_compile_cache: OrderedDict[tuple[bytes, str, LispLimits, HostNames], tuple[Compiled, int]] = OrderedDict()
_compile_lock = threading.Lock()
_COMPILE_CACHE_SIZE = 256


#: ``{global_name(name): (name, fn or method name, min_args, max_args)}``
HostEntries = Mapping[str, tuple[str, Any, int, int | None]]


class HostFunctionTable:
    """A fixed set of host functions, prepared once for the many namespaces it is installed in.

    Installing it is a few bulk updates, and the names a namespace holding only it
    offers are interned from one frozen set whose hash is computed once.
    """

    __slots__ = ("entries", "arities", "arity_items", "names")

    def __init__(self, entries: HostEntries) -> None:
        self.entries: dict[str, tuple[str, Any, int, int | None]] = dict(entries)
        self.arities: dict[str, tuple[int, int | None]] = {
            name: (min_args, max_args) for name, _fn, min_args, max_args in self.entries.values()}
        self.arity_items = frozenset(self.arities.items())
        self.names = frozenset(self.arities)


#: The value forms a top-level ``define`` may bind while its top level stays definitions only.
_DEFINING_FORMS = frozenset(("lambda", "quote"))


def definitions_only(forms: Any) -> bool:
    """Whether every top-level form only defines: a function, a literal constant, a macro or a const.

    The generated top level of such a program binds its globals to functions made from
    its own code and to its own constants, and calls nothing else (macros and consts
    were evaluated when it was compiled): running it has the same effect, and costs the
    same, in any renewal of a namespace, whatever the input, the budget or the process.
    """
    for form in forms:
        if type(form) is not tuple or not form or type(form[0]) is not Name:
            return False
        head = form[0].name
        if head == "macro" or head == "const":
            continue
        if head != "define" or len(form) < 3:
            return False
        if type(form[1]) is tuple:
            continue  # (define (name params) body): a function
        value = form[-1]
        if type(value) is Name:
            return False  # another global's value, or a host function: not the program's own
        if type(value) is tuple and (not value or type(value[0]) is not Name or value[0].name not in _DEFINING_FORMS):
            return False
    return True


class _Prepared:
    """A program's top level as it ran in a renewed namespace, to stand in for running it again.

    ``added`` is every global the top level wrote (its functions, constants and its
    compiler's own entries), ``defined`` the names it added to the namespace, ``steps``
    what it charged. Valid for this compiled program in this sealed namespace only.
    """

    __slots__ = ("compiled", "installed", "added", "defined", "steps")

    def __init__(self, compiled: Compiled, installed: _Installed, added: dict[str, Any], defined: tuple[str, ...],
                 steps: int) -> None:
        self.compiled = compiled
        self.installed = installed
        self.added = added
        self.defined = defined
        self.steps = steps


class _Installed:
    """A sealed namespace: what :meth:`Interpreter.renew` restores."""

    __slots__ = ("globals", "defined", "pending", "names", "names_seen")

    def __init__(self, globals_: dict[str, Any], defined: frozenset[str],
                 pending: dict[str, tuple[str, Any, int, int | None]], names: HostNames, names_seen: int) -> None:
        self.globals = globals_
        self.defined = defined
        self.pending = pending
        self.names = names
        self.names_seen = names_seen


class Interpreter:
    """One guest namespace: install host names, run a source, call its functions."""

    #: Whether a renewed namespace stands in for running a definitions-only top level it
    #: ran before (see :meth:`run_and_call`). Off only to compare against, in tests and benchmarks.
    reuse_top_levels = True

    def __init__(
        self,
        limits: LispLimits | None = None,
        budget: Budget | None = None,
        *,
        filename: str = "<script>",
        passthrough: tuple[type[BaseException], ...] = (),
    ) -> None:
        self.limits = limits or LispLimits()
        self.budget = budget or Budget(self.limits.max_steps, self.limits.max_execution_millis)
        self.context = Context(self.limits, self.budget)
        self.filename = filename
        self.passthrough = passthrough
        self.globals: dict[str, Any] = dict(_BASE)
        self.globals["_s"] = 0
        self.globals["_d"] = 0
        #: The most iterations a loop can run under this budget (see lisp.fast_loop).
        self.globals["_fuel_cap"] = max(self.budget.max_steps, self.budget.remaining)
        #: How a typed body checks that its global still names its function (lisp.compiler).
        self.globals["_self_get"] = self.globals.get
        self.globals["_tick"] = self._tick
        self.globals["_fuel_mark"] = self._fuel_mark
        self.globals["_fuel_rewind"] = self._fuel_rewind
        self._mark = (0, 0)
        self.globals["_define_check"] = self._define_check
        self.globals["_define_global"] = self._define_global
        self.defined: set[str] = set()
        self.pending: dict[str, tuple[str, Any, int, int | None]] = {}
        self.owner: Any = None
        self.compiled: Compiled | None = None
        #: What the host installed, by Lisp name: functions with their arity, and values.
        self.host_functions: dict[str, tuple[int, int | None]] = {}
        self.host_values: set[str] = set()
        self._host_names: HostNames | None = None
        self._names_seen = 0
        #: The frozen arities of the one table that is all the host functions, if so.
        self._table_items: frozenset[tuple[str, tuple[int, int | None]]] | None = None
        #: The namespace as sealed (:meth:`seal`), what :meth:`renew` brings back.
        self._installed: _Installed | None = None
        #: What runs changed since the namespace was sealed or renewed: names they defined
        #: and pending host functions their definitions replaced.
        self._defined_since: list[str] = []
        self._pending_taken: list[str] = []
        #: ``(source, names, compiled, steps)`` of the last compile served from the cache.
        self._last_compile: tuple[str, HostNames, Compiled, int] | None = None
        #: Renewed and nothing run since: a top level run now starts from the sealed state.
        self._renewed = False
        #: The last definitions-only top level run in a renewed namespace (see run_and_call),
        #: and the last such program run here without being recorded.
        self._prepared: _Prepared | None = None
        self._ran_once: Compiled | None = None

    # ------------------------------------------------------------------ host installation
    def define_function(self, name: str, fn: Callable[..., Any], min_args: int = 0, max_args: int | None = None) -> None:
        """Install a host function; it receives Lisp values and returns one.

        The function counts in the namespace at once, but its wrapper is only built when
        a program that names it runs (most scripts use a few of the host's functions).
        """
        gname = global_name(name)
        self._installed = None  # installing after sealing unseals: seal again to renew
        self.defined.add(gname)
        self.globals.pop(gname, None)
        self.pending[gname] = (name, fn, min_args, max_args)
        self.host_values.discard(name)
        self.host_functions[name] = (min_args, max_args)
        self._host_names = None
        self._table_items = None

    def define_functions(self, entries: HostEntries | HostFunctionTable, owner: Any = None) -> None:
        """Install many host functions at once: ``{global_name(name): (name, fn, min, max)}``.

        ``fn`` may be the name of a method of ``owner``, looked up only if a program uses it.
        A :class:`HostFunctionTable` installs the same entries without preparing them again.
        """
        table = entries if isinstance(entries, HostFunctionTable) else HostFunctionTable(entries)
        self._installed = None
        g = self.globals
        if not g.keys().isdisjoint(table.entries):
            for gname in table.entries:
                g.pop(gname, None)
        self.defined.update(table.entries)
        self.pending.update(table.entries)
        self.owner = owner
        if self.host_values:
            self.host_values.difference_update(table.names)
        fresh = not self.host_functions
        self.host_functions.update(table.arities)
        self._table_items = table.arity_items if fresh else None
        self._host_names = None

    def _materialize(self, gname: str) -> None:
        name, fn, min_args, max_args = self.pending.pop(gname)
        # A method name is looked up on the owner at each call, and the budget is this
        # namespace's at each call, so a wrapper stays right across :meth:`renew`.
        method = fn if type(fn) is str else None
        probe = getattr(self.owner, fn) if method is not None else fn
        g = self.globals
        # A host function may carry its own wrong-count text (``arity_text``) and may ask
        # for the caller's call depth (``takes_depth``) to call guest functions it is given.
        arity_text = getattr(probe, "arity_text", None) or f"{name} expects {_expected(min_args, max_args)}"
        takes_depth = bool(getattr(probe, "takes_depth", False))

        most = max_args if max_args is not None else sys.maxsize
        if method is not None and not takes_depth and min_args == max_args and min_args in (1, 2):
            # A method of one or two arguments (most guest functions): host below with its
            # arguments named, no tuple made for them or counted.
            wrapper = mark_function(self._fixed_host(name, method, min_args, arity_text), name)
        else:
            wrapper = mark_function(self._host(name, fn, method, min_args, most, arity_text, takes_depth), name)
        g[gname] = wrapper
        installed = self._installed
        if installed is not None and gname in installed.pending:
            # Made once for every later run of a renewed namespace.
            del installed.pending[gname]
            installed.globals[gname] = wrapper

    def _host(self, name: str, fn: Any, method: str | None, min_args: int, most: int, arity_text: str,
              takes_depth: bool) -> Callable[..., Any]:
        """The wrapper guest code calls for host function ``name`` (see :meth:`_materialize`)."""
        g = self.globals

        def host(_d: int, *args: Any) -> Any:
            if not min_args <= len(args) <= most:
                raise EvalError(arity_text)
            # Return the unused slice so nested runs draw from the same budget exactly, and
            # charge the call's one step (Budget.host_call, written out: on every host call).
            unused = g["_s"]
            g["_s"] = 0
            budget = self.budget
            remaining = budget.remaining - 1
            if unused > 0:
                remaining += unused
            if remaining < 0:
                budget.remaining = 0
                raise BudgetExhausted("steps")
            budget.remaining = remaining
            deadline = budget.deadline
            if deadline is not None and budget.clock() > deadline:
                raise BudgetExhausted("time")
            target = fn if method is None else getattr(self.owner, method)
            try:
                if takes_depth:
                    return target(_d, *args)
                return target(*args)
            except Exception as error:
                if self._host_fault(error):
                    raise HostFunctionError(name) from error
                raise

        return host

    def _fixed_host(self, name: str, method: str, count: int, arity_text: str) -> Callable[..., Any]:
        """:meth:`_host` for a method taking exactly ``count`` (1 or 2) arguments, written out
        with them named: the same checks, charge and errors, in the same order."""
        g = self.globals
        if count == 1:
            def host_one(_d: int, a: Any = _NO_ARGUMENT, *more: Any) -> Any:
                if a is _NO_ARGUMENT or more:
                    raise EvalError(arity_text)
                unused = g["_s"]
                g["_s"] = 0
                budget = self.budget
                remaining = budget.remaining - 1
                if unused > 0:
                    remaining += unused
                if remaining < 0:
                    budget.remaining = 0
                    raise BudgetExhausted("steps")
                budget.remaining = remaining
                deadline = budget.deadline
                if deadline is not None and budget.clock() > deadline:
                    raise BudgetExhausted("time")
                try:
                    return getattr(self.owner, method)(a)
                except Exception as error:
                    if self._host_fault(error):
                        raise HostFunctionError(name) from error
                    raise

            return host_one

        def host_two(_d: int, a: Any = _NO_ARGUMENT, b: Any = _NO_ARGUMENT, *more: Any) -> Any:
            if b is _NO_ARGUMENT or more:
                raise EvalError(arity_text)
            unused = g["_s"]
            g["_s"] = 0
            budget = self.budget
            remaining = budget.remaining - 1
            if unused > 0:
                remaining += unused
            if remaining < 0:
                budget.remaining = 0
                raise BudgetExhausted("steps")
            budget.remaining = remaining
            deadline = budget.deadline
            if deadline is not None and budget.clock() > deadline:
                raise BudgetExhausted("time")
            try:
                return getattr(self.owner, method)(a, b)
            except Exception as error:
                if self._host_fault(error):
                    raise HostFunctionError(name) from error
                raise

        return host_two

    def _host_fault(self, error: Exception) -> bool:
        """Whether ``error``, escaping a host function, is a failure of the host's own code.

        Not a Lisp error or one the host lets through, not a limit running out, and not
        a failure of guest code the host function called (a frame of this namespace in
        the traceback, or a guest function called with the wrong number of arguments).
        """
        if isinstance(error, (LispError, RecursionError, MemoryError)):
            return False
        if self.passthrough and isinstance(error, self.passthrough):
            return False
        g = self.globals
        tb = error.__traceback__
        while tb is not None:
            if tb.tb_frame.f_globals is g:
                return False
            tb = tb.tb_next
        return not (isinstance(error, TypeError) and _GUEST_CALL.match(str(error)) is not None)

    def define_value(self, name: str, value: Any) -> None:
        gname = global_name(name)
        self._installed = None
        self.pending.pop(gname, None)
        self.defined.add(gname)
        self.globals[gname] = value
        if self.host_functions.pop(name, None) is not None:
            self._table_items = None
        self.host_values.add(name)
        self._host_names = None

    def seal(self) -> None:
        """Remember this namespace as the host installed it, for :meth:`renew`.

        Call it once every host function and value is in place and before anything runs.
        """
        self._installed = _Installed(dict(self.globals), frozenset(self.defined), dict(self.pending),
                                     self.installed_names(), self._names_seen)
        self._defined_since.clear()
        self._pending_taken.clear()

    def renew(self, budget: Budget, owner: Any, values: Mapping[str, Any]) -> None:
        """Make this namespace what it was when sealed, for a new run: nothing an earlier run
        defined or changed remains, the host's functions belong to ``owner``, everything
        draws on ``budget``, and each host value in ``values`` (installed before sealing)
        takes its new value. Cheaper than building and installing a fresh interpreter.
        """
        installed = self._installed
        if installed is None:
            raise InternalError("renew needs a sealed namespace")
        g = self.globals
        g.clear()
        g.update(installed.globals)
        # The fast loops' overflow proof counts on at most this many steps (lisp.fast_loop):
        # it is the new budget's, not the one the namespace was sealed under.
        cap = budget.max_steps
        g["_fuel_cap"] = cap if cap >= budget.remaining else budget.remaining  # max(), written out
        for name, value in values.items():
            if name not in self.host_values:
                raise InternalError(f"renew can only replace a host value: {name}")
            g[global_name(name)] = value
        # Undo what runs changed (they only add defined names and take pending ones;
        # a wrapper made leaves the sealed state too, see _materialize).
        if self._defined_since:
            self.defined.difference_update(self._defined_since)
            self._defined_since.clear()
        if self._pending_taken:
            for gname in self._pending_taken:
                entry = installed.pending.get(gname)
                if entry is not None:
                    self.pending[gname] = entry
            self._pending_taken.clear()
        self._host_names = installed.names
        self._names_seen = installed.names_seen
        self.owner = owner
        self.compiled = None
        if budget is not self.budget:
            self.budget = budget
        # Context.rebind, written out (once per activation).
        context = self.context
        context.budget = budget
        if context.sizes:
            context.sizes.clear()
        meter = budget.meter
        if meter is None or meter.limit != context.max_memory:
            meter = budget.meter = Meter(context.max_memory)
        context.meter = meter
        self._renewed = True

    def vacate(self) -> None:
        """Drop what the last run left (its globals, its owner) until the next :meth:`renew`,
        so a namespace kept for reuse holds nothing of the run before."""
        self.globals.clear()
        self.owner = None
        self.compiled = None
        self._renewed = False

    def installed_names(self) -> HostNames:
        """The names a script compiled here may use besides its own and the system's.

        Host functions (with their arity) and values, plus globals an earlier run in
        this namespace defined.
        """
        found = self._host_names
        if found is None or len(self.defined) != self._names_seen:
            values = set(self.host_values)
            if len(self.defined) > len(self.host_functions) + len(self.host_values):
                host = {global_name(n) for n in self.host_functions} | {global_name(n) for n in self.host_values}
                values.update(lisp_name_of(g) for g in self.defined - host)
            functions = self._table_items if self._table_items is not None else self.host_functions
            found = self._host_names = host_names(functions, values)
            self._names_seen = len(self.defined)
        return found

    def has(self, name: str) -> bool:
        gname = global_name(name)
        return gname in self.globals or gname in self.pending

    # ------------------------------------------------------------------ runtime hooks
    def _tick(self) -> None:
        """Refill the step counter after code charged past it (by one step or many)."""
        g = self.globals
        budget = self.budget
        steps = g["_s"]
        while True:
            # Budget.draw, written out (the first slice of every run is drawn here).
            deadline = budget.deadline
            if deadline is not None and budget.clock() > deadline:
                raise BudgetExhausted("time")
            remaining = budget.remaining
            if remaining <= 0:
                raise BudgetExhausted("steps")
            grant = SLICE if remaining > SLICE else remaining
            budget.remaining = remaining - grant
            steps += grant
            if steps >= 0:
                break
        g["_s"] = steps

    def _fuel_mark(self) -> None:
        """Note the step counter and the budget's remaining steps, for :meth:`_fuel_rewind`.

        One mark at a time is enough: a ranked copy (lisp.compiler) marks before it runs
        and calls nothing but itself, so no other mark is made until it has finished.
        """
        self._mark = (self.globals["_s"], self.budget.remaining)

    def _fuel_rewind(self) -> None:
        """Put the step counter and the budget back to the mark: the steps since were not spent.

        Only a ranked copy rewinds, after an error stopped it: it runs no guest code but
        its own pure arithmetic, and the typed body then runs in its place.
        """
        self.globals["_s"], self.budget.remaining = self._mark

    def _define_check(self, gname: str) -> None:
        if gname not in self.defined:
            if len(self.defined) >= self.limits.max_namespace_entries:
                raise LimitError("guest namespace")
            self.defined.add(gname)
            self._defined_since.append(gname)

    def _define_global(self, gname: str, value: Any, name: Name) -> Name:
        self._define_check(gname)
        if self.pending.pop(gname, None) is not None:
            self._pending_taken.append(gname)
        self.globals[gname] = value
        return name

    # ------------------------------------------------------------------ compile
    def compile(self, source: str | Program, budget: Budget | None = None) -> Compiled:
        """Read and compile ``source`` (cached by content, file name, limits and names).

        All compile-time work (consts, macro bodies) and the compiler's own (forms
        visited, code generated) draws on ``budget``: by default one of its own under
        this interpreter's limits; a host compiling many scripts under one bound passes
        a shared one. A cached compile charges ``budget`` the steps it took when it was
        made, so whether a compile fits a budget never depends on the cache.
        """
        if budget is None:
            budget = Budget(self.limits.max_steps, self.limits.max_execution_millis)
        if not isinstance(source, Program) and self.globals["_s"] == 0:
            # A source compiled before under the same key was read and checked then
            # (both depend on the key alone): charge its steps and reuse it, with no
            # run context to enter. One whose steps do not fit (or a compile inside a
            # run holding a slice of steps) takes the guarded path below, unchanged.
            names = self._host_names
            if names is None or len(self.defined) != self._names_seen:
                names = self.installed_names()
            last = self._last_compile
            if last is not None and last[0] is source and last[1] is names and last[3] <= budget.remaining:
                # The very text compiled last here (a renewed namespace running its script
                # again): the same key, so the same program, without hashing the text.
                budget.remaining -= last[3]  # Budget.take, written out: it fits
                return last[2]
            known = self._compile_key(source, names)
            with _compile_lock:
                hit = _compile_cache.get(known)
                if hit is not None and hit[1] <= budget.remaining:
                    _compile_cache.move_to_end(known)
                    budget.take(hit[1])  # no time passes: the clock is not consulted
                    self._last_compile = (source, names, hit[0], hit[1])
                    return hit[0]
        with self._guard(None):
            program = source if isinstance(source, Program) else read(source)
            check_program_limits(program, self.limits.max_syntax_depth, self.limits.max_integer_bits)
            key = None
            names = self.installed_names()
            if not isinstance(source, Program):
                key = self._compile_key(source, names)
                with _compile_lock:
                    found = _compile_cache.get(key)
                    if found is not None:
                        _compile_cache.move_to_end(key)
                if found is not None:
                    compiled, steps = found
                    budget.take(steps)  # no time passes: the clock is not consulted
                    return compiled
            before = budget.used
            compiled = self._compile_program(program, names, budget=budget)
            if key is not None:
                with _compile_lock:
                    _compile_cache[key] = (compiled, budget.used - before)
                    if len(_compile_cache) > _COMPILE_CACHE_SIZE:
                        _compile_cache.popitem(last=False)
            return compiled

    def _compile_key(self, source: str, names: HostNames) -> tuple[bytes, str, LispLimits, HostNames]:
        return (
            blake3.blake3(source.encode("utf-8", "surrogatepass")).digest(),
            self.filename,
            # Every limit compile-time code ran under: a compile accepted under
            # larger limits is never reused under smaller ones.
            self.limits,
            names,  # interned: the same installed names are the same object
        )

    def _compile_program(
        self, program: Program, names: HostNames | None, parent: Expander | None = None, budget: Budget | None = None
    ) -> Compiled:
        """Expand, resolve, generate. ``names=None``: compile-time code (an open world)."""
        expander = Expander(program, self._evaluate_at_compile_time, parent)
        if parent is None:
            # All compile-time work of one compilation (every const and macro expansion)
            # and the compiler's own work share one budget: compiling cannot multiply the fuel.
            expander.compile_budget = budget or Budget(self.limits.max_steps, self.limits.max_execution_millis)
            expander.meter = CompileMeter(expander.compile_budget)
            expander.max_depth = self.limits.max_syntax_depth
        meter = expander.root.meter
        assert meter is not None  # the root expander of a compilation always has one
        try:
            expansion = expander.expand_program()
            depth = self.limits.max_syntax_depth
            if nesting_depth(expansion.program.forms, depth + 1, meter) > depth + 1:
                raise LimitError("syntax depth")  # macro expansions nested inside each other
            resolution = resolve(expansion, names, meter)
            compiler = Compiler(
                expansion,
                resolution,
                filename=self.filename,
                max_call_stack=self.limits.max_call_stack,
                max_value_stack=self.limits.max_value_stack,
                max_integer_bits=self.limits.max_integer_bits,
                meter=meter,
                max_code_chars=max_code_chars(self.limits.max_guest_memory),
            )
            chunks, table = compiler.compile_module()
        except RecursionError:
            raise LimitError("syntax depth") from None
        codes = []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # e.g. "int is not callable": reported at run time instead
            for chunk in chunks:
                # Generated code costs steps for its size before CPython compiles it.
                meter.visit(len(chunk) // CODE_CHARS_PER_STEP)
                meter.flush()
                try:
                    codes.append(compile(chunk, self.filename, "exec"))
                except RecursionError:
                    raise LimitError("syntax depth") from None
                except SyntaxError as error:
                    # CPython refuses more than 200 nested parentheses and 100 nested
                    # blocks: a program within a large max_syntax_depth can still nest
                    # too deeply for it.
                    text = str(error)
                    if isinstance(error, IndentationError) or "too many" in text or "too complex" in text:
                        raise LimitError("syntax depth") from None
                    raise
        meter.flush()
        return Compiled(
            tuple(codes),
            tuple(compiler.constants),
            "".join(chunks),
            table,
            self.filename,
            frozenset().union(*(referenced_globals(code) for code in codes)),
            compiler.constants_name,
            definitions_only(expansion.program.forms),
        )

    def _evaluate_at_compile_time(self, kind: str, payload: Any, expander: Expander) -> Any:
        """Run macro bodies, consts and top-level functions in the compilation's own namespace.

        One namespace per compilation, under the same limits and one budget: a function
        defined at top level is there for every later macro expansion, as in Ketos, and
        nothing of it outlives the compilation. A const is evaluated apart from it.
        """
        root = expander.root
        if kind == "const":
            # A const is a constant expression: it sees no function the script defines
            # (Ketos: a const calling a defined function is "not constant").
            helper = Interpreter(self.limits, root.compile_budget, filename=self.filename)
        else:
            helper = root.namespace
            if helper is None:
                helper = root.namespace = Interpreter(self.limits, root.compile_budget, filename=self.filename)
        if kind == "expand":
            fn, args = payload
            # A macro receives its arguments as data and returns code (quote forms as values).
            with helper._guard(None):
                value = _compile_time_value(fn(1, *(as_data(a) for a in args)))
            # Outside the guard: an expansion nested too deeply is a syntax depth error.
            return as_code(value)
        program = Program((payload,), expander.spans, expander.program.depth, 0, expander.positions)
        compiled = helper._compile_program(program, None, parent=expander)
        try:
            with helper._guard(compiled):
                value = helper._execute(compiled)
                return value if kind in ("macro", "define") else _compile_time_value(value)
        except EvalError as error:
            if kind == "const" and error.detail.startswith("unbound name"):
                # A value define runs only when the script runs: a const cannot use it (Ketos: not constant).
                raise CompileError(
                    f"const value is not constant: {error.detail} "
                    "(a const may use literals, system functions and earlier consts)"
                ) from None
            raise

    # ------------------------------------------------------------------ run
    def run(self, source: str | Program, *, compile_budget: Budget | None = None) -> Any:
        """Run every top-level form of ``source`` in order; returns the last value.

        ``compile_budget`` is what compiling it draws on (see :meth:`compile`).
        """
        compiled = self.compile(source, compile_budget)
        self.compiled = compiled
        with self._guard(compiled):
            return self._execute(compiled)

    def _execute(self, compiled: Compiled) -> Any:
        g = self.globals
        pending = self.pending
        if pending:
            # The pending functions the script names (a few of many; the order is immaterial).
            for gname in pending.keys() & compiled.referenced:
                self._materialize(gname)
        renewed = self._renewed
        self._renewed = False
        if renewed and compiled.definitions_only and self._installed is not None and self.reuse_top_levels:
            # Recorded at its second run here: a program run once (most inline sources)
            # never pays for the record.
            if self._ran_once is compiled:
                return self._prepare(compiled)
            self._ran_once = compiled
        g[compiled.constants_name] = compiled.constants
        g["_last"] = None
        for code in compiled.code:
            exec(code, g)
        return g.get("_last")

    def _prepare(self, compiled: Compiled) -> Any:
        """Run a definitions-only top level in a renewed namespace and remember what it did,
        so the next run of the same program here can stand in for it (:meth:`run_and_call`).

        Only a top level that held no guest memory and took no pending host function is
        remembered (one of definitions only does neither), with the exact steps it charged.
        """
        g = self.globals
        installed = self._installed
        budget = self.budget
        meter = self.context.meter
        before = dict(g)
        since, taken = len(self._defined_since), len(self._pending_taken)
        fuel = budget.remaining + g["_s"]
        memory, checks = meter.total, meter.checks
        g[compiled.constants_name] = compiled.constants
        g["_last"] = None
        for code in compiled.code:
            exec(code, g)
        if installed is not None and meter.total == memory and meter.checks == checks and len(self._pending_taken) == taken:
            # Every global the top level wrote, in the order it wrote them: those its code
            # names (so one bound to the very value it held is bound again) and any it
            # changed otherwise. Not the step slice.
            written = _module_names(compiled)
            added = {name: value for name, value in g.items()
                     if name != "_s" and (name in written or before.get(name, _NOARG) is not value)}
            steps = fuel - budget.remaining - g["_s"]
            self._prepared = _Prepared(compiled, installed, added, tuple(self._defined_since[since:]), steps)
        return g.get("_last")

    def call(self, name: str, *args: Any) -> Any:
        """Call the guest global ``name`` with Lisp values."""
        self._renewed = False
        gname = global_name(name)
        if gname in self.pending:
            self._materialize(gname)
        fn = self.globals.get(gname)
        with self._guard(self.compiled):
            if fn is None:
                raise EvalError(f"unbound name `{name}`")
            return fn(1, *args)

    def run_and_call(self, source: str | Program, name: str, *args: Any,
                     compile_budget: Budget | None = None) -> tuple[bool, Any]:
        """:meth:`run` ``source``, then :meth:`call` ``name`` with ``args``, entering the run
        context once for both; ``(False, None)`` when the run defined no ``name``.

        The steps charged are those of the two calls made one after the other.
        """
        last = self._last_compile
        names = self._host_names
        if (last is not None and last[0] is source and compile_budget is not None and names is not None
                and last[1] is names and len(self.defined) == self._names_seen and last[3] <= compile_budget.remaining
                and self.globals["_s"] == 0):
            # compile()'s first check, written out: the very text compiled last here, under
            # the same names (a renewed namespace running its script again).
            compile_budget.remaining -= last[3]
            compiled = last[2]
        else:
            compiled = self.compile(source, compile_budget)
        self.compiled = compiled
        gname = global_name(name)
        guard = _new_guard(_Guard)  # _Guard(self, compiled), written out (once per activation)
        guard.interp = self
        guard.compiled = compiled
        # The with statement, written out: entered, and left with the exception (if any)
        # as a with statement leaves it; a with statement on a Python object costs more.
        guard.__enter__()
        try:
            prepared = self._prepared
            if (self._renewed and prepared is not None and prepared.compiled is compiled and self.reuse_top_levels
                    and prepared.installed is self._installed and prepared.steps <= self.budget.remaining):
                # This program's top level ran in this namespace, renewed since to the same
                # sealed state: binding what it bound, at the steps it charged, is running it.
                # (Its pending host functions were made then, for every renewal.) A budget
                # too small for it runs it for real, to fail where it fails.
                self._renewed = False
                if prepared.steps:
                    self.budget.remaining -= prepared.steps
                self.globals.update(prepared.added)
                if prepared.defined:
                    self.defined.update(prepared.defined)
                    self._defined_since.extend(prepared.defined)
            else:
                self._execute(compiled)
            if gname in self.pending:
                self._materialize(gname)
            g = self.globals
            fn = g.get(gname)
            if fn is None:
                found, value = False, None
            else:
                if g["_s"] == 0:
                    # The first slice the call's first step would draw through _tick, drawn
                    # here (the same slice and clock check; left to _tick when either would refuse).
                    budget = self.budget
                    remaining = budget.remaining
                    deadline = budget.deadline
                    if remaining > 0 and (deadline is None or budget.clock() <= deadline):
                        grant = SLICE if remaining > SLICE else remaining
                        budget.remaining = remaining - grant
                        g["_s"] = grant
                found, value = True, fn(1, *args)
        except BaseException as exc:
            guard.__exit__(type(exc), exc, exc.__traceback__)
            raise
        guard.__exit__(None, None, None)
        return found, value

    def steps_used(self) -> int:
        return self.budget.used

    # ------------------------------------------------------------------ errors
    def _guard(self, compiled: Compiled | None) -> _Guard:
        return _Guard(self, compiled)


_SYSTEM_CALLABLES = frozenset(id(_SHARED["_F_" + mangle(_name)]) for _name in SYSTEM_FUNCTIONS)


def _module_names(compiled: Compiled) -> frozenset[str]:
    """Every global a program's top-level code mentions (not the code of its functions).

    A superset of those it binds: a definitions-only top level otherwise mentions only
    the run's hooks (``_define_check``, ``_tick``, ``_s``) and its closure factories,
    none of which a renewal gives a value of the run's own.
    """
    names = {compiled.constants_name, "_last"}
    for code in compiled.code:
        names.update(code.co_names)
    return frozenset(names)


def _compile_time_value(value: Any) -> Any:
    """A const or macro expansion, refused if it holds a function the script made.

    Such a closure belongs to the compile-time namespace: run later, it would draw on
    the compile-time budget (kept alive by the compile cache) instead of the run's.
    """
    seen: set[int] = set()
    stack = [value]
    while stack:
        item = stack.pop()
        t = type(item)
        if t is tuple:
            if id(item) not in seen:
                seen.add(id(item))
                stack.extend(item)
        elif t is FunctionType and id(item) not in _SYSTEM_CALLABLES:
            raise CompileError("a const or macro expansion cannot hold a function defined by the script")
    return value


class _Guard:
    """Enter the run context; turn anything escaping guest code into a LispError."""

    __slots__ = ("interp", "compiled", "previous")

    def __init__(self, interp: Interpreter, compiled: Compiled | None) -> None:
        self.interp = interp
        self.compiled = compiled

    # Entered and left once per run: the recursion allowance, the context switch and the
    # meter's bookkeeping are written out here (_RecursionAllowance.acquire and release,
    # context.enter and leave, Meter.open and close), the same steps in the same order.
    def __enter__(self) -> None:
        allowance = _recursion
        # A with statement, not acquire() and try: a signal's KeyboardInterrupt can be raised
        # as acquire() returns, before a try has begun, and the lock would stay taken.
        with allowance.lock:
            if allowance.active == 0:
                before = sys.getrecursionlimit()
                if before < RUN_RECURSION_LIMIT:
                    sys.setrecursionlimit(RUN_RECURSION_LIMIT)
                    allowance.saved = before
            allowance.active += 1
        interp = self.interp
        context = interp.context
        self.previous = _RUN_LOCAL.context
        _RUN_LOCAL.context = context
        meter = context.meter
        if meter.depth == 0:
            meter.entry = sys._getframe(1)  # noqa: SLF001 (CPython's documented frame access)
        meter.depth += 1
        spaces = meter.spaces
        if spaces:
            enter_space(spaces, interp)
        else:
            spaces.append([interp, 1])  # the first namespace of the run (enter_space, written out)

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> Literal[False]:
        interp = self.interp
        g = interp.globals
        unused = g.get("_s", 0)
        if unused > 0:
            interp.budget.remaining += unused  # Budget.give_back, written out
        g["_s"] = 0
        meter = interp.context.meter
        meter.depth -= 1
        spaces = meter.spaces
        last = spaces[-1] if spaces else None
        if last is not None and last[0] is interp and last[1] == 1:
            spaces.pop()  # the namespace entered last, left for the last time (leave_space, written out)
        else:
            leave_space(spaces, interp)
        if meter.depth <= 0:
            meter.depth = 0
            meter.entry = None
            if meter.records:
                meter.records = {}
            if meter.leaves:
                meter.leaves = {}
        _RUN_LOCAL.context = self.previous
        allowance = _recursion
        with allowance.lock:  # (a with statement: see __enter__)
            allowance.active -= 1
            if allowance.active == 0 and allowance.saved is not None:
                if sys.getrecursionlimit() == RUN_RECURSION_LIMIT:
                    sys.setrecursionlimit(allowance.saved)
                allowance.saved = None
        if exc is None:
            return False
        if interp.passthrough and isinstance(exc, interp.passthrough):
            return False
        if isinstance(exc, (KeyboardInterrupt, SystemExit, GeneratorExit)):
            return False
        error = _translate(exc)
        if not error.stack:
            error.stack = _lisp_stack(tb, self.compiled)
        error.located(interp.filename)
        if error.__cause__ is None:
            raise error from None  # no Python internals in what the host sees
        raise error  # a host function's own exception stays its cause


def as_lisp_error(exc: BaseException) -> LispError:
    """The Lisp error a failure escaping guest code stands for (an unknown failure is internal)."""
    return _translate(exc)


def _translate(exc: BaseException) -> LispError:
    if isinstance(exc, LispError):
        return exc
    if isinstance(exc, RecursionError):
        return LimitError("call stack")
    if isinstance(exc, MemoryError):
        return LimitError("guest memory")
    if isinstance(exc, TypeError):
        return EvalError(_describe_type_error(str(exc)))
    if isinstance(exc, NameError):
        name = getattr(exc, "name", "") or ""
        if name.startswith("g_"):
            return EvalError(f"unbound name `{lisp_name_of(name)}`")
        return InternalError()
    if isinstance(exc, ZeroDivisionError):
        return EvalError("division by zero")
    return InternalError()


def _describe_type_error(text: str) -> str:
    """Turn CPython's call errors into Lisp terms (no Python names leak)."""
    if "object is not callable" in text:
        pytype = text.split("'")[1] if "'" in text else "value"
        return f"type error: expected function, found {_PY_TYPE_NAMES.get(pytype, 'value')}"
    head = text.split("(")[0].strip()
    fname = lisp_name_of(head) if head.startswith("g_") else "lambda"
    if "positional argument" in text or "keyword" in text:
        return f"`{fname}` called with the wrong number of arguments"
    return "type error"


def _lisp_stack(tb: Any, compiled: Compiled | None) -> tuple[Frame, ...]:
    frames: list[Frame] = []
    while tb is not None:
        code = tb.tb_frame.f_code
        if compiled is not None and code.co_filename == compiled.filename:
            name = code.co_name
            span = compiled.line_table.get(tb.tb_lineno)
            line, column = (span.line, span.column) if span is not None else (None, None)
            if name == "<module>":
                frames.append(Frame("top level", line, column))
            elif not name.startswith("_mk"):
                frames.append(Frame(lisp_name_of(name), line, column))
        tb = tb.tb_next
    return tuple(frames[-16:])


def evaluate(source: str, limits: LispLimits | None = None, **values: Any) -> Any:
    """Run ``source`` in a fresh interpreter and return the value of its last form."""
    interp = Interpreter(limits)
    for name, value in values.items():
        interp.define_value(name, value)
    return interp.run(source)
