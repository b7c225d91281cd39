"""Code generation: expanded, resolved Lisp forms to Python source, compiled once.

The last of three passes: :mod:`lisp.expand` expands macros and evaluates consts,
:mod:`lisp.resolve` checks every form, name and known arity, and this module turns
the checked forms into Python (it checks nothing itself). The generated module:

* names every guest global ``g_<mangled>`` and every local ``v<n>_<mangled>``, so
  guest names can never reach a runtime helper (helpers all start with ``_``);
* passes the call depth as the first argument of every Lisp callable, so the call
  stack bound costs one comparison and no shared state;
* charges fuel at every function entry and every tail-loop iteration through the
  module global ``_s`` (refilled from the shared budget by ``_tick``): one step, plus
  one for every :data:`FORMS_PER_STEP` forms of the body, so a big straight-line
  expression costs in proportion to its size (a big top-level form likewise);
* turns self tail calls into ``while`` loops;
* inlines integer fast paths for arithmetic and comparisons, falling back to the
  system functions for everything else;
* gives small functions a typed body, tried first when their integer parameters hold
  small ints, in which the tests those bounds make unnecessary are left out, and self
  tail loops an integer fast path (:mod:`lisp.fast_loop`); both charge the generic
  code's steps at the same points;
* gives a typed entry whose recursion a ranking proof bounds a ranked copy (see
  :meth:`Compiler.ranked_copy`), with no depth argument and its fuel charged ahead,
  which on any error gives way to the typed body from where it started;
* builds closures through module-level factories, so a closure captures values,
  never a variable that a loop later changes.

It runs with no Python builtins: only the helpers the interpreter installs.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from .budget import Budget, CompileMeter
from .errors import LimitError, Span
from .expand import Expansion
from .fast_loop import fast_loop
from .functions import SYSTEM_FUNCTIONS
from .names import global_name, mangle
from .reader import QUASIQUOTE, QUOTE, UNQUOTE, UNQUOTE_SPLICING, Program, as_data
from .resolve import Resolution
from .syntax import ELSE, SPECIAL_FORMS, Form, Params
from .values import Keyword, Name

_T = TypeVar("_T")

__all__ = [
    "CODE_CHARS_PER_STEP",
    "CODE_MEMORY_PER_CHAR",
    "COMPACT_INT",
    "FORMS_PER_STEP",
    "INLINED_CALLS_MAX",
    "MIN_CODE_CHARS",
    "SPECIALISE",
    "TYPED_BODY_MAX_FORMS",
    "TYPED_PARAM_BOUND",
    "Compiled",
    "Compiler",
    "Expr",
    "FunctionContext",
    "Scope",
    "check_program_limits",
    "layout",
    "max_code_chars",
    "referenced_globals",
]

#: Each compiled module names its constants tuple uniquely, so modules sharing one
#: namespace (compile-time code) never read each other's constants.
_constants_names = itertools.count()

# Integer fast paths: operator, slow-path helper.
_ARITH = {"+": ("+", "_add2"), "-": ("-", "_sub2"), "*": ("*", "_mul2")}
_COMPARE = {"<": ("<", "_lt2"), ">": (">", "_gt2"), "<=": ("<=", "_le2"), ">=": (">=", "_ge2")}


#: Brackets a position mark in generated code: ``_MARK`` index ``_MARK_END``. The
#: layout pass (:func:`layout`) turns each mark into a line break, so the code after it
#: starts a physical line of its own, and records which Lisp form that line belongs to.
_MARK = "\x02"
_MARK_END = "\x03"

# The depth argument carries the call depth in its low bits and, when the value stack
# is tracked, the values held by the callers above them.
_VALUE_SHIFT = 24
_DEPTH_MASK = (1 << _VALUE_SHIFT) - 1
_STACK_MARK = re.compile("\x01([GDR])([0-9]+)(?::([^\x01]*))?\x01")

#: Compiled code charges one more step for every this many forms of a function body.
FORMS_PER_STEP = 16
#: Generating and compiling code costs one step for every this many characters of it.
CODE_CHARS_PER_STEP = 8
#: Each character of generated code counts as this many units of guest memory while
#: CPython compiles it (its syntax tree takes about a hundred bytes per character).
CODE_MEMORY_PER_CHAR = 64
#: A typed body (see :meth:`Compiler.typed_body`) is generated for functions of at most
#: this many forms, for the parameters below this magnitude: the largest compact CPython
#: int, whose comparisons CPython runs on its fast path.
TYPED_BODY_MAX_FORMS = 48
#: Generate the specialised copies (typed bodies, fast loops) besides the generic code.
#: They change no value, error or step count; turned off, the generic code alone runs
#: (the reference the tests compare them with).
SPECIALISE = True
TYPED_PARAM_BOUND = (1 << 30) - 1
#: CPython 3.11 runs an int comparison on its fast path only when both sides are
#: "compact" (of magnitude below this): a result is first tested against it, and only
#: a bigger one against the integer bound (see :meth:`Compiler.within_bound`).
COMPACT_INT = 1 << 30
#: A ranked copy writes its self calls out one level deep when it has at most this many.
INLINED_CALLS_MAX = 3
#: Code that may always be compiled in one piece, whatever the guest memory limit.
MIN_CODE_CHARS = 32 * 1024


def max_code_chars(max_guest_memory: int) -> int:
    """How much code one piece (an expression, a group of top-level forms) may have."""
    return max(MIN_CODE_CHARS, max_guest_memory // CODE_MEMORY_PER_CHAR)


@dataclass
class Expr:
    """A compiled expression: Python source plus what the compiler knows about it."""

    code: str
    is_bool: bool = False  # statically known to produce a Python bool
    simple: bool = False  # a local or a constant: safe to mention twice
    #: When known to be an ``int``: the interval (inclusive) it lies in.
    ints: tuple[int, int] | None = None


@dataclass
class TypedBody:
    """A function's typed body (guard first), and its typed entry if it has one."""

    lines: list[str]
    entry: str | None = None  # the module global holding the typed entry
    identity: str | None = None  # the module global holding the function it belongs to
    entry_lines: list[str] = field(default_factory=list)
    #: The ranked copy's entry (see :meth:`Compiler.ranked_copy`) and its body.
    ranked: str | None = None
    ranked_lines: list[str] = field(default_factory=list)


@dataclass
class RankedCopy:
    """What the compiler tracks while it generates a typed entry's ranked copy.

    The copy passes no call depth and charges the fuel of its self calls ahead of
    them: ``pending`` counts the self calls of the statement being generated, charged
    together before it.
    """

    entry: str  # the module global holding the copy's entry
    cost: int  # the fuel of one call
    #: The parameters of the call being generated (the function's, or those of a call
    #: written out in its body: see :meth:`Compiler.inline_call`).
    frame_params: tuple[str, ...]
    positions: tuple[int, ...]  # the typed parameter positions
    #: (body, parameter names, the scope around the function) when the copy writes out
    #: its self calls one level deep; ``inlining`` while it does.
    inline: tuple[Any, tuple[str, ...], Scope | None] | None = None
    inlining: bool = False
    pending: int = 0
    #: By typed parameter position: (least decrement, least lower bound) over the self
    #: calls so far, or ``None`` once a call passes that parameter anything but ``(- p c)``.
    ranks: dict[int, tuple[int, int] | None] = field(default_factory=dict)


@dataclass
class FunctionContext:
    """What the compiler tracks inside one function body."""

    self_global: str | None  # the Lisp global name the function is bound to
    params: tuple[str, ...]  # Python names of required parameters, for tail loops
    loopable: bool  # only required parameters: a self tail call can become a loop
    loops: bool = False  # set when a self tail call became a loop


@dataclass
class Compiled:
    """A compiled program: code objects, constants and the map back to Lisp lines."""

    #: One code object per group of top-level forms, run in order (compiled apart, so
    #: CPython never holds the syntax tree of a whole big script at once).
    code: tuple[Any, ...]
    constants: tuple[Any, ...]
    python_source: str
    #: Python line to the Lisp position of the form running there (see :func:`layout`).
    line_table: dict[int, Span]
    filename: str
    #: Every guest global the code can mention (host functions it never names need not exist).
    referenced: frozenset[str] = frozenset()
    #: The module global the code reads its constants from.
    constants_name: str = "_K"
    #: Every top-level form only defines (a function, a literal constant, a macro, a const):
    #: running the top level has the same effect in any namespace, whatever the input.
    definitions_only: bool = False


def referenced_globals(code: Any) -> frozenset[str]:
    """The ``g_`` names used anywhere in a code object and the code objects inside it."""
    found: set[str] = set()
    stack = [code]
    while stack:
        current = stack.pop()
        found.update(name for name in current.co_names if name.startswith("g_"))
        stack.extend(const for const in current.co_consts if hasattr(const, "co_names"))
    return frozenset(found)


class Scope:
    """Lexical scope: Lisp local names to Python names; ``None`` is the global scope."""

    def __init__(self, parent: Scope | None, names: dict[str, str] | None = None, boundary: bool = False) -> None:
        self.parent = parent
        self.names = names or {}
        self.boundary = boundary  # a function boundary

    def lookup(self, name: str) -> str | None:
        scope: Scope | None = self
        while scope is not None:
            found = scope.names.get(name)
            if found is not None:
                return found
            scope = scope.parent
        return None


class Compiler:
    """Generates the Python module of one expanded and resolved program."""

    def __init__(
        self,
        expansion: Expansion,
        resolution: Resolution,
        *,
        filename: str,
        max_call_stack: int,
        max_value_stack: int,
        max_integer_bits: int,
        meter: CompileMeter | None = None,
        max_code_chars: int = MIN_CODE_CHARS,
    ) -> None:
        self.program: Program = expansion.program
        #: Charged one unit for every form visited (see :class:`~lisp.budget.CompileMeter`).
        self.meter = meter or CompileMeter(Budget(1 << 62, None))
        #: The largest piece of code generated for one expression or group of forms.
        self.max_code_chars = max_code_chars
        #: Forms compiled so far in the function (or top-level form) being generated.
        self.own_forms = 0
        self.expansion = expansion
        self.resolution = resolution
        self.filename = filename
        self.max_call_stack = max_call_stack
        self.max_value_stack = max_value_stack
        self.int_bound = 1 << max_integer_bits
        self.constants: list[Any] = []
        self.constant_index: dict[tuple[type, Any], int] = {}
        self.constants_name = f"_K{next(_constants_names)}"
        self.counter = 0
        self.factories: list[str] = []
        self.factory_spans: list[Span | None] = []
        #: The position of the innermost form being generated that has one.
        self.enclosing: Span | None = None
        #: The positions the marks in the generated code stand for, by index.
        self.marks: list[Span] = []
        #: Consts bound so far, in program order (a const is visible after its form).
        self.consts: dict[str, Any] = dict(expansion.initial_consts)
        #: Python names of the functions being generated, innermost last (for call-self).
        self.function_names: list[str] = []
        #: Extension names the program defines at top level: they name its globals.
        self.shadowed = resolution.shadowed
        #: Inside a typed body: locals known to hold an ``int``, with a bound on their magnitude.
        self.known_ints: dict[str, tuple[int, int]] = {}
        #: While a typed body that may call its own typed entry is generated: the Lisp name
        #: of the function, the Python name of that entry and the typed parameter positions.
        self.self_typed: tuple[str, str, tuple[int, ...]] | None = None
        self.self_typed_calls = 0
        #: Whether every value the typed body being generated returns is a known int.
        self.returns_ints = True
        self.function_params: tuple[str, ...] = ()
        #: While a typed entry's ranked copy is generated (see :meth:`ranked_copy`).
        self.ranked: RankedCopy | None = None
        #: Whether functions get typed bodies and fast loops (off while a form too big with
        #: them is generated again, and for a reference compile: see :data:`SPECIALISE`).
        self.typing = SPECIALISE
        #: Value-stack accounting: the functions being compiled (innermost last) and each
        #: one's frame size (parameters plus let bindings), filled in as bodies compile.
        self.frames: list[int] = []
        self.frame_sizes: dict[int, int] = {}

    # ------------------------------------------------------------------ helpers
    def fresh(self, stem: str = "t") -> str:
        self.counter += 1
        return f"_{stem}{self.counter}"

    def fresh_local(self, name: str) -> str:
        self.counter += 1
        return f"v{self.counter}_{mangle(name)}"

    def constant(self, value: Any) -> str:
        t = type(value)
        if value is None:
            return "None"
        if t is bool:
            return "True" if value else "False"
        if t is int and -(1 << 62) < value < (1 << 62):
            return repr(value)
        key = (t, value) if t is not tuple else (t, id(value))
        index = self.constant_index.get(key)
        if index is None:
            index = len(self.constants)
            self.constants.append(value)
            self.constant_index[key] = index
        return f"{self.constants_name}[{index}]"

    def note_span(self, form: Any) -> Span | None:
        """Enter ``form``: returns the enclosing position to restore on leaving it."""
        saved = self.enclosing
        span = self.program.span_of(form)
        if span is not None:
            self.enclosing = span
        return saved

    def at(self, form: Any, code: str, span: Span | None = None) -> str:
        """``code`` marked as the code of ``form``: a failure in it reports its position.

        Only calls (and global loads) can fail, and a traceback names the line where the
        failing call starts, so a mark goes right before each call. Marks cost nothing at
        run time: they become line breaks between tokens.
        """
        span = span or self.program.span_of(form) or self.enclosing
        if span is None:
            return code
        self.marks.append(span)
        return f"{_MARK}{len(self.marks) - 1}{_MARK_END}{code}"

    # ------------------------------------------------------------------ module
    def compile_module(self) -> tuple[list[str], dict[int, Span]]:
        """The module's source in pieces to compile one after another, and its line table.

        Consecutive top-level forms are grouped into pieces of at most
        ``max_code_chars`` characters (one form bigger than that is refused as guest
        memory). Each piece starts with the closure factories of its own forms and is
        padded with blank lines, so its line numbers are those of the whole module.
        """
        pieces: list[tuple[list[str], list[Span | None], int]] = []
        lines: list[str] = []
        spans: list[Span | None] = []
        size = 0
        for form in self.program.forms:
            form_lines, form_spans, form_size = self.form_code(form)
            if form_size > self.max_code_chars and self.typing:
                # Typed bodies are only a faster copy: a form too big with them goes without.
                self.typing = False
                try:
                    form_lines, form_spans, form_size = self.form_code(form)
                finally:
                    self.typing = SPECIALISE
            if form_size > self.max_code_chars:
                raise LimitError("guest memory")
            if size + form_size > self.max_code_chars and lines:
                pieces.append((lines, spans, size))
                lines, spans, size = [], [], 0
            lines += form_lines
            spans += form_spans
            size += form_size
        pieces.append((lines, spans, size))
        chunks: list[str] = []
        table: dict[int, Span] = {}
        first_line = 0
        for piece_lines, piece_spans, _size in pieces:
            text, piece_table = layout(piece_lines, piece_spans, self.marks, first_line)
            table.update(piece_table)
            # Stack checks never break a line, so the table stays true after them.
            chunks.append("\n" * first_line + self.place_stack_checks(text))
            first_line += text.count("\n")
        return chunks, table

    def form_code(self, form: Any) -> tuple[list[str], list[Span | None], int]:
        """The lines of one top-level form (its closure factories first), their positions and size."""
        saved = self.note_span(form)
        first_factory = len(self.factories)
        first_frame = len(self.frame_sizes)
        self.own_forms = 0
        body = self.top_level(form)
        cost = self.own_forms // FORMS_PER_STEP
        if cost:
            body = [f"_s -= {cost}", "if _s < 0: _tick()"] + body
        form_lines = self.factories[first_factory:] + body
        form_spans = self.factory_spans[first_factory:] + [self.enclosing] * len(body)
        del self.factories[first_factory:], self.factory_spans[first_factory:]
        self.enclosing = saved
        form_size = sum(len(line) + 1 for line in form_lines)
        if form_size > self.max_code_chars and self.typing:
            # Generated again without typed bodies: forget this attempt's frames.
            for frame in range(first_frame, len(self.frame_sizes)):
                del self.frame_sizes[frame]
        return form_lines, form_spans, form_size

    def place_stack_checks(self, source: str) -> str:
        """Fill in each function's entry check and call-site depth step.

        The value stack counts every active frame's parameters and let bindings, as
        Ketos's does. When no frame is big enough for ``max_call_stack`` frames of it
        to exceed ``max_value_stack``, only the call depth is tracked (one comparison
        at entry). Otherwise the depth argument also carries the values held by the
        callers, in its bits from ``_VALUE_SHIFT`` up: each call site adds its frame's
        size and each entry checks both counts.
        """
        if not self.frame_sizes:
            return source
        limit_c, limit_v = self.max_call_stack, self.max_value_stack
        tracked = any(size * limit_c > limit_v for size in self.frame_sizes.values())

        def fill(match: Any) -> str:
            kind, fid = match.group(1), int(match.group(2))
            size = self.frame_sizes[fid]
            if kind == "R":
                # Calls nested up to ``depth`` deeper than this frame pass every entry check.
                depth = match.group(3)
                if not tracked:
                    return f"_d + {depth} <= {limit_c}"
                return (
                    f"(_d & {_DEPTH_MASK}) + {depth} <= {limit_c} and "
                    f"(_d >> {_VALUE_SHIFT}) + {depth} * {size} <= {limit_v - size}"
                )
            if kind == "G":
                if not tracked:
                    return f"if _d > {limit_c}: _deep()"
                return (
                    f"if _d >> {_VALUE_SHIFT} > {limit_v - size} or _d & {_DEPTH_MASK} > {limit_c}: "
                    f"_stack_exceeded(_d, {limit_c})"
                )
            return str(1 + (size << _VALUE_SHIFT)) if tracked else "1"

        return _STACK_MARK.sub(fill, source)

    def emit_factory(self, lines: list[str], spans: list[Span | None]) -> None:
        self.factories.extend(lines)
        self.factory_spans.extend(spans)

    def top_level(self, form: Any) -> list[str]:
        if type(form) is tuple and type(form[0]) is Name:
            head = form[0].name
            if head == "define":
                return self.top_define(form)
            if head == "macro":
                return [f"_last = {self.constant(form[1][0])}"]
            if head == "const":
                self.consts[form[1].name] = self.expansion.const_values[id(form)]
                return [f"_last = {self.constant(form[1])}"]
        expr = self.expr(form, Scope(None), None)
        return [f"_last = {expr.code}"]

    def top_define(self, form: Form) -> list[str]:
        target, value = form[1], form[-1]
        if type(target) is tuple:
            name = target[0].name
            gname = global_name(name)
            lines = [f"_define_check({gname!r})"]
            params = self.resolution.params[id(form)]
            if id(form) in self.resolution.self_calling:
                # call-self names the function itself, not whatever the global holds later.
                fn = self.closure(form, params, value, Scope(None), gname, self_global=name)
                lines.append(f"{gname} = {fn.code}")
            else:
                lines += self.function_def(gname, params, value, Scope(None), self_global=name, typed_entry=True)
            lines.append(f"_last = {self.constant(target[0])}")
            return lines
        gname = global_name(target.name)
        expr = self.expr(value, Scope(None), None)
        return [
            f"_define_check({gname!r})",
            f"{gname} = {expr.code}",
            f"_last = {self.constant(target)}",
        ]

    # ------------------------------------------------------------------ functions
    def function_def(
        self, pyname: str, params: Params, body: Any, outer: Scope, *, self_global: str | None, indent: str = "",
        typed_entry: bool = False,
    ) -> list[str]:
        """A ``def`` for a Lisp function whose free locals are all in ``outer``'s captures.

        ``typed_entry``: a top-level define, which may get a typed entry for its own calls.
        """
        required, optional, keys, rest = params.required, params.optional, params.keys, params.rest
        frame = len(self.frame_sizes)
        self.frame_sizes[frame] = len(required) + len(optional) + len(keys) + (rest is not None)
        self.frames.append(frame)
        # A function's fuel counts its own forms; a nested function counts its own.
        outer_forms, self.own_forms = self.own_forms, 0
        try:
            return self._function_def(
                pyname, body, outer, self_global, required, optional, keys, rest, indent, frame, typed_entry)
        finally:
            self.frames.pop()
            self.own_forms = outer_forms

    def _function_def(
        self, pyname: str, body: Any, outer: Scope, self_global: str | None,
        required: tuple[str, ...], optional: tuple[tuple[str, Any], ...], keys: tuple[tuple[str, Any], ...], rest: str | None,
        indent: str, frame: int, typed_entry: bool = False,
    ) -> list[str]:
        scope = Scope(outer, {}, boundary=True)
        sig = ["_d"]
        prologue: list[str] = []
        req_py = []
        for pname in required:
            py = self.fresh_local(pname)
            scope.names[pname] = py
            sig.append(py)
            req_py.append(py)
        for pname, default in optional:
            py = self.fresh_local(pname)
            sig.append(f"{py}=_NOARG")
            dflt = self.expr(default, scope, None).code if default is not None else "None"
            prologue.append(f"if {py} is _NOARG: {py} = {dflt}")
            scope.names[pname] = py
        if keys:
            kw = self.fresh("kw")
            sig.append(f"*{kw}")
            names = [self.fresh_local(k) for k, _ in keys]
            key_names = tuple(Keyword(k) for k, _ in keys)
            prologue.append(f"{', '.join(names)}{',' if len(names) == 1 else ''} = _keyword_args({kw}, {self.constant(key_names)})")
            for (kname, default), py in zip(keys, names):
                dflt = self.expr(default, scope, None).code if default is not None else "None"
                prologue.append(f"if {py} is _NOARG: {py} = {dflt}")
                scope.names[kname] = py
        if rest is not None:
            py = self.fresh_local(rest)
            sig.append(f"*{py}")
            prologue.append(f"if not {py}: {py} = None")
            scope.names[rest] = py
        loopable = not optional and not keys and rest is None
        ctx = FunctionContext(self_global if loopable else None, tuple(req_py), loopable)
        # Tail statements are indented for the loop body; without a loop they move out 4.
        self.function_names.append(pyname)
        try:
            tail = self.tail(body, scope, ctx, "        ")
        finally:
            self.function_names.pop()
        lines = [f"{indent}def {pyname}({', '.join(sig)}):", f"{indent}    global _s"]
        guard = [
            f"{indent}    \x01G{frame}\x01",  # the stack check, placed by place_stack_checks
        ]
        fuel = ["_s -= 1", "if _s < 0: _tick()"]
        cost = 1 + self.own_forms // FORMS_PER_STEP
        fuel[0] = f"_s -= {cost}"
        if ctx.loops:
            lines += guard
            lines += [f"{indent}    {p}" for p in prologue]
            lines.append(f"{indent}    while True:")
            if self.typing:
                lines += [f"{indent}{line}" for line in fast_loop(self, body, scope, ctx, cost, "        ")]
            lines += [f"{indent}        {f}" for f in fuel]
            lines += [f"{indent}{t}" for t in tail]
        else:
            lines += [f"{indent}    {f}" for f in fuel]
            lines += guard
            lines += [f"{indent}    {p}" for p in prologue]
            typed = self.typed_body(pyname, body, scope, ctx, frame, self_global if typed_entry else None)
            lines += [f"{indent}{t}" for t in typed.lines]
            lines += [f"{indent}{t[4:]}" for t in tail]
            if typed.entry is not None:
                # The typed entry first, under the same name (Lisp stacks show the function).
                entry = [f"def {pyname}({', '.join(sig)}):", "    global _s"]
                entry += [f"    {f}" for f in fuel] + [guard[0][len(indent):], "    if True:"] + typed.entry_lines
                if typed.ranked is not None:
                    entry = [f"def {pyname}({', '.join(sig[1:])}):", "    global _s"] + [
                        line[4:] for line in typed.ranked_lines
                    ] + [f"{typed.ranked} = {pyname}"] + entry
                lines = entry + [f"{typed.entry} = {pyname}"] + lines + [f"{typed.identity} = {pyname}"]
        return lines

    def typed_body(
        self, pyname: str, body: Any, scope: Scope, ctx: FunctionContext, frame: int, self_global: str | None
    ) -> TypedBody:
        """The body once more, for when its integer parameters hold small ints (tried first).

        A guard checks that every required parameter the body uses directly as an operand
        of ``+ - * = < > <= >=`` is an ``int`` of magnitude below :data:`TYPED_PARAM_BOUND`;
        under it those operations need no type test, and ``+ - *`` no overflow test while
        the bounds of their operands exclude one. Otherwise the generic body runs. Both
        bodies compute the same values and errors and charge the same steps (the fuel is
        charged before either): this one only skips tests it has proved would pass.
        """
        if not self.typing or self.own_forms > TYPED_BODY_MAX_FORMS:
            return TypedBody([])
        params = _typed_params(body, scope, ctx.params)
        if not params:
            return TypedBody([])
        checks = [f"_type({py}) is _int" for py in params]
        checks += [f"{-TYPED_PARAM_BOUND} < {py} < {TYPED_PARAM_BOUND}" for py in params]
        if self_global is not None and _calls_only_itself(body, scope, self_global, len(ctx.params)):
            # Module globals named after this compilation (its constants' global is unique):
            # a later program run in the same namespace numbers its own alike, and must not
            # replace the typed entry a function of this one calls, nor pass its identity test.
            entry = self.fresh("typed") + self.constants_name
            positions = tuple(i for i, py in enumerate(ctx.params) if py in params)
            self.self_typed, self.self_typed_calls, self.returns_ints = (self_global, entry, positions), 0, True
            self.function_params = ctx.params
            try:
                typed = self.typed_tail(pyname, body, scope, ctx, frame, params)
            finally:
                self.self_typed = None
            if self.returns_ints and self.self_typed_calls:
                # Every value it returns is an int, so calls of the typed entry return ints
                # (by induction on the depth of the calls). The entry itself runs no guest
                # code but its own, so the global still names this function inside it.
                identity = self.fresh("self") + self.constants_name
                # Looked up without failing: a host may have removed the name meanwhile.
                checks.append(f"_self_get({pyname!r}) is {identity}")
                cost = 1 + self.own_forms // FORMS_PER_STEP
                ranked, root, ranked_lines = self.ranked_copy(
                    pyname, body, scope, ctx, frame, params, (self_global, entry, positions), cost)
                return TypedBody(
                    [f"    if {' and '.join(checks)}:"] + root + typed, entry, identity, typed, ranked, ranked_lines
                )
        typed = self.typed_tail(pyname, body, scope, ctx, frame, params)
        return TypedBody([f"    if {' and '.join(checks)}:"] + typed)

    def ranked_copy(
        self, pyname: str, body: Any, scope: Scope, ctx: FunctionContext, frame: int, params: list[str],
        typed: tuple[str, str, tuple[int, ...]], cost: int,
    ) -> tuple[str | None, list[str], list[str]]:
        """A typed entry's ranked copy: (its entry, the lines that run it first, its body).

        When every self call passes some integer parameter ``p`` as ``(- p c)`` (``c`` at
        least 1) where the tests on the way prove ``p`` at least ``L``, calls nest at
        most ``(v - L) // c + 1`` deeper than a frame where ``p`` is ``v``: a frame at
        depth ``k`` has ``p <= v - k * c``, and calls again only where ``p >= L``. When
        that many more frames pass every entry check, the copy runs instead of the typed
        body: it passes no call depth, writes its self calls out one level deep (when
        it has at most :data:`INLINED_CALLS_MAX`), and charges the fuel of each
        statement's self calls together before the statement (those in a part of an
        expression that may not run, when that part runs: see :meth:`branch`). As every
        call it charges runs, a run that returns has charged what the typed body charges; any
        error stops the copy, puts the fuel counter and the budget back where they were,
        and runs the typed body instead, which raises the error at its own point with
        its own steps and stack. So values, errors, stacks and steps are the typed body's.
        """
        entry = self.fresh("ranked") + self.constants_name
        copy = RankedCopy(entry, cost, ctx.params, typed[2], ranks=dict.fromkeys(typed[2], (1 << 62, 1 << 62)))
        names = tuple(scope.names)
        if len(names) == len(ctx.params) and self.self_typed_calls <= INLINED_CALLS_MAX:
            copy.inline = (body, names, scope.parent)
        saved = self.self_typed, self.self_typed_calls, self.returns_ints
        self.self_typed, self.ranked = typed, copy
        try:
            lines = self.typed_tail(pyname, body, scope, ctx, frame, params)
        finally:
            self.self_typed, self.self_typed_calls, self.returns_ints = saved
            self.ranked = None
        ranked = [(position, rank) for position, rank in copy.ranks.items() if rank is not None]
        if not ranked or any(re.search(r"\b_d\b", line) for line in lines):
            return None, [], []
        # The first parameter whose bound lets a call with it at 0 run the copy, if any
        # (a bound proved only near -TYPED_PARAM_BOUND would never let it run).
        usable = [(position, rank) for position, rank in ranked if -rank[1] // rank[0] < self.max_call_stack]
        if not usable:
            return None, [], []
        position, (step, least) = usable[0]
        p = ctx.params[position]
        depth = f"({p} - {least - 1})" if step == 1 else f"(({p} - {least}) // {step} + 1)"
        root = [
            f"        if \x01R{frame}:{depth}\x01:",
            "            _fuel_mark()",
            "            try:",
            *[f"        {line}" for line in lines],
            "            except _Replay:",
            "                _fuel_rewind()",
        ]
        return entry, root, lines

    def typed_tail(
        self, pyname: str, body: Any, scope: Scope, ctx: FunctionContext, frame: int, params: list[str]
    ) -> list[str]:
        saved = (self.own_forms, self.frame_sizes[frame], self.known_ints)
        self.known_ints = dict.fromkeys(params, (1 - TYPED_PARAM_BOUND, TYPED_PARAM_BOUND - 1))
        self.function_names.append(pyname)
        try:
            return self.tail(body, scope, FunctionContext(None, ctx.params, False), "        ")
        finally:
            self.function_names.pop()
            self.own_forms, self.frame_sizes[frame], self.known_ints = saved

    def closure(
        self, form: Form, params: Params, body: Any, scope: Scope, inner: str, self_global: str | None = None
    ) -> Expr:
        """A closure: a module-level factory taking the captured values, called here."""
        captured = sorted(self.free_locals(form, scope))
        # A module global: named after this compilation, as a typed entry is (see typed_body).
        factory = self.fresh("mk") + self.constants_name
        cap_scope = Scope(None, {lisp: py for lisp, py in captured}, boundary=True)
        saved = self.note_span(form)
        here = self.enclosing
        body = self.function_def(inner, params, body, cap_scope, self_global=self_global, indent="    ")
        self.enclosing = saved
        lines = [f"def {factory}({', '.join(py for _, py in captured)}):"] + body + [f"    return {inner}"]
        self.emit_factory(lines, [here] * len(lines))
        return Expr(f"{factory}({', '.join(py for _, py in captured)})")

    def free_locals(self, form: Any, scope: Scope) -> set[tuple[str, str]]:
        """Locals of enclosing scopes mentioned anywhere in ``form`` (over-approximated)."""
        found: set[tuple[str, str]] = set()
        stack = [form]
        meter = self.meter
        while stack:
            item = stack.pop()
            meter.visit()
            if type(item) is Name:
                py = scope.lookup(item.name)
                if py is not None:
                    found.add((item.name, py))
            elif type(item) is tuple:
                stack.extend(item)
        return found

    # ------------------------------------------------------------------ expressions
    def expr(self, form: Any, scope: Scope, ctx: FunctionContext | None) -> Expr:
        t = type(form)
        if t is Name:
            return self.reference(form, scope)
        if t is tuple:
            self.meter.visit(len(form))
            self.own_forms += 1
            saved = self.note_span(form)
            try:
                e = self.call_or_form(form, scope, ctx)
            finally:
                self.enclosing = saved
            if len(e.code) > self.max_code_chars:
                raise LimitError("guest memory")
            return e
        if t is bool:
            return Expr(self.constant(form), is_bool=True, simple=True)
        if t is int:
            return Expr(self.constant(form), simple=True, ints=(form, form))
        return Expr(self.constant(form), simple=True)

    def reference(self, form: Name, scope: Scope) -> Expr:
        name = form.name
        local = scope.lookup(name)
        if local is not None:
            return Expr(local, simple=True, ints=self.known_ints.get(local))
        if name in self.consts:
            return Expr(self.constant(self.consts[name]), simple=True)
        if name in SYSTEM_FUNCTIONS and name not in self.shadowed:
            return Expr("_F_" + mangle(name), simple=True)
        return Expr(self.at(None, global_name(name)))

    def call_or_form(self, form: Form, scope: Scope, ctx: FunctionContext | None) -> Expr:
        head = form[0]
        if type(head) is Name and scope.lookup(head.name) is None:
            name = head.name
            if name in SPECIAL_FORMS:
                special: Expr = getattr(self, "form_" + mangle(name))(form, scope, ctx)
                return special
            if name in SYSTEM_FUNCTIONS and name not in self.consts and name not in self.shadowed:
                return self.system_call(name, form, scope, ctx)
        return self.call(form, scope, ctx)

    def args(self, forms: Form, scope: Scope, ctx: FunctionContext | None) -> list[Expr]:
        return [self.expr(f, scope, None) for f in forms]

    def check_value_stack(self, count: int) -> str | None:
        if count > self.max_value_stack:
            return "_value_stack()"
        return None

    def call(self, form: Form, scope: Scope, ctx: FunctionContext | None) -> Expr:
        typed = self.self_typed
        if typed is not None and type(form[0]) is Name and form[0].name == typed[0] and scope.lookup(typed[0]) is None:
            args = self.args(form[1:], scope, ctx)
            limit = TYPED_PARAM_BOUND - 1
            if len(args) == len(self.function_params) and all(
                (e := args[i].ints) is not None and -limit <= e[0] and e[1] <= limit for i in typed[2]
            ):
                # The typed entry: its parameters are proved small ints, it returns an int.
                self.self_typed_calls += 1
                ranked = self.ranked
                if ranked is not None:
                    self.note_rank(ranked, form[1:], scope)
                    ranked.pending += 1  # charged with its statement or its branch
                    if ranked.inline is not None and not ranked.inlining:
                        return self.inline_call(ranked, args)
                    code = f"{ranked.entry}({', '.join(a.code for a in args)})"
                    return Expr(self.at(form, code), ints=(1 - self.int_bound, self.int_bound - 1))
                step = f"\x01D{self.frames[-1]}\x01"
                code = f"{typed[1]}({', '.join([f'_d + {step}'] + [a.code for a in args])})"
                return Expr(self.at(form, code), ints=(1 - self.int_bound, self.int_bound - 1))
            callee = self.expr(form[0], scope, None)
            step = f"\x01D{self.frames[-1]}\x01"
            return Expr(self.at(form, f"{callee.code}({', '.join([f'_d + {step}'] + [a.code for a in args])})"))
        callee = self.expr(form[0], scope, None)
        args = self.args(form[1:], scope, ctx)
        over = self.check_value_stack(len(args))
        if over:
            return Expr(self.at(form, over))
        step = f"\x01D{self.frames[-1]}\x01" if self.frames else "1"
        return Expr(self.at(form, f"{callee.code}({', '.join([f'_d + {step}'] + [a.code for a in args])})"))

    def inline_call(self, ranked: RankedCopy, args: list[Expr]) -> Expr:
        """A self call in a ranked copy, written out: the body once more, its parameters bound
        to the arguments (in order), its own self calls calling the copy.

        The call's step is charged with its statement like a call's; the body returns an
        int, as the typed entry does (see :meth:`typed_body`).
        """
        assert ranked.inline is not None
        body, names, outer = ranked.inline
        params = [self.fresh_local(name) for name in names]
        inner = Scope(outer, dict(zip(names, params)), boundary=True)
        saved = ranked.frame_params, self.known_ints
        ranked.inlining, ranked.frame_params = True, tuple(params)
        self.known_ints = {**self.known_ints, **{py: a.ints for py, a in zip(params, args) if a.ints is not None}}
        try:
            e = self.expr(body, inner, None)
        finally:
            ranked.inlining = False
            ranked.frame_params, self.known_ints = saved
        binds = " and ".join(f"(({py} := {a.code}) is {py})" for py, a in zip(params, args))
        return Expr(f"({e.code} if {binds} else None)", ints=(1 - self.int_bound, self.int_bound - 1))

    def note_rank(self, ranked: RankedCopy, args: Form, scope: Scope) -> None:
        """Narrow each typed parameter's ranking by a self call's arguments (see :meth:`ranked_copy`)."""
        for position in ranked.positions:
            rank = ranked.ranks[position]
            if rank is None:
                continue
            arg, py = args[position], ranked.frame_params[position]
            if (
                type(arg) is tuple and len(arg) == 3 and type(arg[0]) is Name and arg[0].name == "-"
                and self.is_system("-", scope) and type(arg[1]) is Name and scope.lookup(arg[1].name) == py
                and type(arg[2]) is int and arg[2] >= 1 and py in self.known_ints
            ):
                ranked.ranks[position] = (min(rank[0], arg[2]), min(rank[1], self.known_ints[py][0]))
            else:
                ranked.ranks[position] = None

    def is_system(self, name: str, scope: Scope) -> bool:
        """Whether ``name`` at the head of a form names the system function."""
        return scope.lookup(name) is None and name in SYSTEM_FUNCTIONS and name not in self.consts and name not in self.shadowed

    def charge_pending(self, indent: str) -> list[str]:
        """In a ranked copy: the fuel of the self calls of the statement about to be written."""
        ranked = self.ranked
        if ranked is None or not ranked.pending:
            return []
        steps, ranked.pending = ranked.pending * ranked.cost, 0
        return [f"{indent}if (_s := _s - {steps}) < 0: _tick()"]

    def system_call(self, name: str, form: Form, scope: Scope, ctx: FunctionContext | None) -> Expr:
        spec = SYSTEM_FUNCTIONS[name]
        argc = len(form) - 1
        args = self.args(form[1:], scope, ctx)
        over = self.check_value_stack(argc)
        if over:
            return Expr(self.at(form, over))
        if argc == 2 and name in _ARITH:
            return self.inline_arith(form, name, args)
        if argc == 2 and name in _COMPARE:
            return self.inline_compare(form, name, args)
        if argc == 2 and name == "=":
            return self.inline_binary(form, args, "{a} == {b}", "_equal({a}, {b})", is_bool=True)
        if argc == 1 and name == "not":
            a = args[0]
            if a.is_bool:
                return Expr(f"({a.code}) is False", is_bool=True)
            return Expr(self.at(form, f"_not({a.code})"), is_bool=True)
        if argc == 1 and name == "null":
            # Fast for Lisp lists; anything else goes to `null`, which refuses svit values.
            a1, a2 = self.bind_twice(args[0])
            return Expr(f"(({a1}) is None or {self.at(form, f'_S_null({a2})')})", is_bool=True)
        is_bool = name in ("=", "/=", "eq", "ne", "<", ">", "<=", ">=", "not", "xor", "is", "null")
        passed = (["_d"] if spec.takes_depth else []) + [a.code for a in args]
        return Expr(self.at(form, f"_S_{mangle(name)}({', '.join(passed)})"), is_bool=is_bool)

    def bind_twice(self, arg: Expr) -> tuple[str, str]:
        """(first mention, later mentions) of an argument that must be evaluated once."""
        if arg.simple:
            return arg.code, arg.code
        tmp = self.fresh()
        return f"({tmp} := {arg.code})", tmp

    def inline_arith(self, form: Form, name: str, args: list[Expr]) -> Expr:
        op, slow = _ARITH[name]
        a, b = args
        a1, a2 = self.bind_twice(a)
        b1, b2 = self.bind_twice(b)
        result = self.fresh("r")
        bound = self.int_bound
        checks = []
        # Evaluate both operands (in order) before testing either type.
        if self.is_int_literal(a) and self.is_int_literal(b):
            return Expr(self.at(form, f"{slow}({a.code}, {b.code})"))
        in_bound = self.within_bound(result, f"{a1} {op} {b1}")
        if a.ints and b.ints:
            # Both known ints: no type test, and no overflow test when the intervals exclude one.
            (alo, ahi), (blo, bhi) = a.ints, b.ints
            if op == "+":
                lo, hi = alo + blo, ahi + bhi
            elif op == "-":
                lo, hi = alo - bhi, ahi - blo
            else:
                corners = (alo * blo, alo * bhi, ahi * blo, ahi * bhi)
                lo, hi = min(corners), max(corners)
            if -bound < lo and hi < bound:
                return Expr(f"({a.code} {op} {b.code})", ints=(lo, hi))
            if self.ranked is not None:
                # A ranked copy only needs to stop (the typed body then raises the error).
                in_bound = self.within_bound(result, f"{a.code} {op} {b.code}")
                return Expr(f"({result} if {in_bound} else _too_big())", ints=(1 - bound, bound - 1))
            return Expr(
                f"({result} if {in_bound} else {self.at(form, f'{slow}({a2}, {b2})')})",
                ints=(1 - bound, bound - 1),
            )
        if a.ints or b.ints:
            checks.append(self.other_is_int(a, b, a1, a2, b1, b2))
        else:
            checks.append(f"_type({a1}) is _type({b1}) is _int")
        checks.append(self.within_bound(result, f"{a2} {op} {b2}"))
        return Expr(f"({result} if {' and '.join(checks)} else {self.at(form, f'{slow}({a2}, {b2})')})")

    def inline_compare(self, form: Form, name: str, args: list[Expr]) -> Expr:
        op, slow = _COMPARE[name]
        return self.inline_binary(form, args, "{a} " + op + " {b}", slow + "({a}, {b})", is_bool=True)

    def inline_binary(self, form: Form, args: list[Expr], fast: str, slow: str, *, is_bool: bool) -> Expr:
        a, b = args
        a1, a2 = self.bind_twice(a)
        b1, b2 = self.bind_twice(b)
        if self.is_int_literal(a) and self.is_int_literal(b):
            return Expr(self.at(form, slow).format(a=a.code, b=b.code), is_bool=is_bool)
        if a.ints and b.ints:
            return Expr(f"({fast.format(a=a.code, b=b.code)})", is_bool=is_bool)
        slow = self.at(form, slow)
        if a.ints or b.ints:
            check = self.other_is_int(a, b, a1, a2, b1, b2)
        else:
            check = f"_type({a1}) is _type({b1}) is _int"
        return Expr(f"({fast.format(a=a2, b=b2)} if {check} else {slow.format(a=a2, b=b2)})", is_bool=is_bool)

    @staticmethod
    def other_is_int(a: Expr, b: Expr, a1: str, a2: str, b1: str, b2: str) -> str:
        """The test of the one operand not known to be an int; both are evaluated first, in order."""
        known = a if a.ints else b
        if known.simple:
            return f"_type({b1}) is _int" if known is a else f"_type({a1}) is _int"
        # A computed known int: bind both operands before the test, which may fail.
        first = [f"({x1}) is {x2}" for x, x1, x2 in ((a, a1, a2), (b, b1, b2)) if not x.simple]
        return " and ".join(first + [f"_type({b2 if known is a else a2}) is _int"])

    def within_bound(self, result: str, value: str | None = None) -> str:
        """The test that ``result`` (assigned ``value`` first, when given) is within the integer bound.

        Exactly the verdict of ``-bound < result < bound``, parenthesised; a compact
        result (the common case) is decided by two fast-path comparisons.
        """
        bound = self.int_bound
        first = f"({result} := {value})" if value is not None else result
        if bound < COMPACT_INT:
            return f"({-bound} < {first} < {bound})"
        return f"({first} < {COMPACT_INT} and {result} > {-COMPACT_INT} or {-bound} < {result} < {bound})"

    @staticmethod
    def is_int_literal(e: Expr) -> bool:
        code = e.code
        return e.simple and (code.isdigit() or (code.startswith("-") and code[1:].isdigit()))

    def condition(self, parent: Form, index: int, scope: Scope) -> str:
        """Element ``index`` of ``parent`` as a condition (a non-boolean fails where it is written)."""
        form = parent[index]
        e = self.expr(form, scope, None)
        if e.is_bool:
            return e.code
        span = self.program.span_of(form) or self.program.element_span(parent, index)
        return self.at(form, f"_truth({e.code})", span)

    # ------------------------------------------------------------------ special forms (expressions)
    def form_quote(self, form: Form, scope: Scope, ctx: Any) -> Expr:
        return Expr(self.constant(as_data(form[1])), is_bool=type(form[1]) is bool, simple=True)

    def form_quasiquote(self, form: Form, scope: Scope, ctx: Any) -> Expr:
        return self.quasi(form[1], scope, 1)

    def quasi(self, form: Any, scope: Scope, level: int) -> Expr:
        if type(form) is not tuple:
            return Expr(self.constant(form), simple=True)
        self.meter.visit(len(form))
        head = form[0]
        if head is UNQUOTE and len(form) == 2:
            # Consecutive commas apply together, as Ketos reads `,,x`: as many as the
            # quasiquotes around them evaluate, fewer stay as a comma value.
            commas, inner_form = 1, form[1]
            while type(inner_form) is tuple and len(inner_form) == 2 and inner_form[0] is UNQUOTE:
                commas, inner_form = commas + 1, inner_form[1]
            # (More commas than quasiquotes were refused by the resolver.)
            if commas == level:
                return self.expr(inner_form, scope, None)
            code = self.quasi(inner_form, scope, level - commas).code
            for _ in range(commas):
                code = f"_quoted('comma', {code})"
            return Expr(code)
        if head is QUASIQUOTE and len(form) == 2:
            inner = self.quasi(form[1], scope, level + 1)
            return Expr(f"_quoted('quasiquote', {inner.code})")
        if head is QUOTE and len(form) == 2:
            inner = self.quasi(form[1], scope, level)
            return Expr(f"_quoted('quote', {inner.code})")
        if head is UNQUOTE_SPLICING and len(form) == 2 and level > 1:
            inner = self.quasi(form[1], scope, level - 1)
            return Expr(f"_quoted('comma-at', {inner.code})")
        segments = []
        for item in form:
            if type(item) is tuple and item[0] is UNQUOTE_SPLICING and len(item) == 2 and level == 1:
                segments.append(self.at(item, f"_splice({self.expr(item[1], scope, None).code})"))
            else:
                segments.append(f"({self.quasi(item, scope, level).code},)")
        return Expr(f"_qq({', '.join(segments)})")

    def form_if(self, form: Form, scope: Scope, ctx: Any) -> Expr:
        cond = self.condition(form, 1, scope)
        if_true, if_false = self.refinements(form[1], scope)
        saved = self.refine(if_true)
        then = self.branch(form[2], scope)
        self.known_ints = saved
        saved = self.refine(if_false)
        other = self.branch(form[3], scope) if len(form) == 4 else Expr("None", simple=True)
        self.known_ints = saved
        return Expr(f"({then.code} if {cond} else {other.code})", is_bool=then.is_bool and other.is_bool)

    def refinements(self, test: Any, scope: Scope) -> tuple[dict[str, tuple[int, int]], dict[str, tuple[int, int]]]:
        """What a condition tells of known ints where it holds and where it does not.

        In a typed body, ``(< n 2)`` leaves ``n`` at most 1 in its then branch and at least
        2 in its else branch; the intervals prove more arithmetic free of overflow.
        """
        if not self.known_ints or type(test) is not tuple or len(test) == 0 or type(test[0]) is not Name:
            return {}, {}
        head = test[0].name
        if scope.lookup(head) is not None or head not in SYSTEM_FUNCTIONS or head in self.consts or head in self.shadowed:
            return {}, {}
        if head == "not" and len(test) == 2:
            if_true, if_false = self.refinements(test[1], scope)
            return if_false, if_true
        if head not in ("<", ">", "<=", ">=", "=") or len(test) != 3:
            return {}, {}
        left, right = test[1], test[2]
        if type(left) is int:
            left, right, head = right, left, {"<": ">", ">": "<", "<=": ">=", ">=": "<=", "=": "="}[head]
        py = scope.lookup(left.name) if type(left) is Name else None
        if py is None or py not in self.known_ints or type(right) is not int:
            return {}, {}
        lo, hi = self.known_ints[py]
        k = right
        if head == "<":
            return {py: (lo, min(hi, k - 1))}, {py: (max(lo, k), hi)}
        if head == "<=":
            return {py: (lo, min(hi, k))}, {py: (max(lo, k + 1), hi)}
        if head == ">":
            return {py: (max(lo, k + 1), hi)}, {py: (lo, min(hi, k))}
        if head == ">=":
            return {py: (max(lo, k), hi)}, {py: (lo, min(hi, k - 1))}
        return ({py: (k, k)} if lo <= k <= hi else {}), {}

    def refine(self, updates: dict[str, tuple[int, int]]) -> dict[str, tuple[int, int]]:
        """Narrow known ints for a branch; returns what to restore after it."""
        saved = self.known_ints
        if updates:
            self.known_ints = {**saved, **updates}
        return saved

    def form_cond(self, form: Form, scope: Scope, ctx: Any) -> Expr:
        code = "None"
        all_bool = False
        for index in range(len(form) - 1, 0, -1):
            clause = form[index]
            pred, body = clause
            e = self.branch(body, scope)
            if pred is ELSE:
                code, all_bool = e.code, e.is_bool
            else:
                # Every test but the first may not run.
                test = self.condition(clause, 0, scope) if index == 1 else self.branch_condition(clause, 0, scope)
                code = f"({e.code} if {test} else {code})"
                all_bool = all_bool and e.is_bool
        return Expr(code, is_bool=all_bool)

    def case_test(self, key: str, literals: Any) -> str:
        if literals is None:
            return f"({key}) is None"
        return self.at(None, f"_case_match({key}, {self.constant(literals)})")

    def form_case(self, form: Form, scope: Scope, ctx: Any) -> Expr:
        clauses = form[2:]
        key_expr = self.expr(form[1], scope, None)
        key = self.fresh("k")
        code = "None"
        for literals, body in reversed(clauses):
            e = self.branch(body, scope)
            code = e.code if literals is ELSE else f"({e.code} if {self.case_test(key, literals)} else {code})"
        return Expr(f"({code} if (({key} := {key_expr.code}) is {key} or True) else None)")

    def form_and(self, form: Form, scope: Scope, ctx: Any) -> Expr:
        *init, last = form[1:]
        if not init:
            return self.expr(last, scope, None)
        last_e, tests = self.short_circuit(form, scope, " and ")
        return Expr(f"({last_e.code} if {tests} else False)", is_bool=last_e.is_bool)

    def form_or(self, form: Form, scope: Scope, ctx: Any) -> Expr:
        *init, last = form[1:]
        if not init:
            return self.expr(last, scope, None)
        last_e, tests = self.short_circuit(form, scope, " or ")
        return Expr(f"(True if {tests} else {last_e.code})", is_bool=last_e.is_bool)

    def short_circuit(self, form: Form, scope: Scope, joiner: str) -> tuple[Expr, str]:
        """An ``and``/``or``'s last operand and its other operands as tests joined by ``joiner``.

        The last operand is generated first; all but the first operand may not run.
        """
        last_e = self.branch(form[-1], scope)
        first = self.condition(form, 1, scope)
        later = [self.branch_condition(form, i, scope) for i in range(2, len(form) - 1)]
        return last_e, joiner.join([first, *later])

    def branch(self, form: Any, scope: Scope) -> Expr:
        """A part of an expression that may not run (an ``if``'s branch, a later ``and`` operand).

        In a ranked copy it charges the fuel of its own self calls when it runs.
        """
        e, steps = self.own_steps(lambda: self.expr(form, scope, None))
        if not steps:
            return e
        return Expr(self.charged(e.code, steps), is_bool=e.is_bool, ints=e.ints)

    def branch_condition(self, parent: Form, index: int, scope: Scope) -> str:
        """:meth:`condition` for a test that may not run (see :meth:`branch`)."""
        code, steps = self.own_steps(lambda: self.condition(parent, index, scope))
        return self.charged(code, steps) if steps else code

    def own_steps(self, generate: Callable[[], _T]) -> tuple[_T, int]:
        """What ``generate`` makes, and the fuel of the self calls in it (0 outside a
        ranked copy), which its caller then charges itself rather than leaving pending."""
        ranked = self.ranked
        if ranked is None:
            return generate(), 0
        saved, ranked.pending = ranked.pending, 0
        try:
            made = generate()
        finally:
            steps, ranked.pending = ranked.pending * ranked.cost, saved
        return made, steps

    @staticmethod
    def charged(code: str, steps: int) -> str:
        """``code``, charging ``steps`` of fuel first (refilled as needed: never false)."""
        return f"({code} if (_s := _s - {steps}) >= 0 or _tick() or True else None)"

    def form_do(self, form: Form, scope: Scope, ctx: Any) -> Expr:
        parts = [self.expr(f, scope, None) for f in form[1:]]
        if len(parts) == 1:
            return parts[0]
        return Expr(f"({', '.join(p.code for p in parts)})[-1]", is_bool=parts[-1].is_bool)

    def let_bindings(self, form: Form, scope: Scope) -> tuple[Scope, list[tuple[str, Expr]]]:
        inner = Scope(scope)
        out = []
        for binding in form[1] or ():
            lname = binding[0].name
            value = self.expr(binding[1], inner, None)
            if self.frames:
                self.frame_sizes[self.frames[-1]] += 1
            py = self.fresh_local(lname)
            if self.known_ints and value.ints:
                self.known_ints[py] = value.ints
            inner = Scope(inner, {lname: py})
            out.append((py, value))
        return inner, out

    def form_let(self, form: Form, scope: Scope, ctx: Any) -> Expr:
        inner, bindings = self.let_bindings(form, scope)
        body = self.expr(form[2], inner, None)
        if not bindings:
            return body
        sets = " and ".join(f"(({py} := {value.code}) is {py})" for py, value in bindings)
        return Expr(f"({body.code} if {sets} else None)", is_bool=body.is_bool)

    def form_lambda(self, form: Form, scope: Scope, ctx: Any) -> Expr:
        return self.closure(form, self.resolution.params[id(form)], form[2], scope, self.fresh("lambda"))

    def form_define(self, form: Form, scope: Scope, ctx: Any) -> Expr:
        # A define below the top level binds a global when it runs.
        target, value = form[1], form[-1]
        if type(target) is tuple:
            params = self.resolution.params[id(form)]
            fn = self.closure(form, params, value, scope, global_name(target[0].name))
            return Expr(self.at(form, f"_define_global({global_name(target[0].name)!r}, {fn.code}, {self.constant(target[0])})"))
        e = self.expr(value, scope, None)
        return Expr(self.at(form, f"_define_global({global_name(target.name)!r}, {e.code}, {self.constant(target)})"))

    def form_apply(self, form: Form, scope: Scope, ctx: Any) -> Expr:
        parts = [self.expr(f, scope, None).code for f in form[1:]]
        return Expr(self.at(form, f"_apply(_d, {', '.join(parts)})"))

    def form_call_2d_self(self, form: Form, scope: Scope, ctx: Any) -> Expr:
        args = self.args(form[1:], scope, None)
        over = self.check_value_stack(len(args))
        if over:
            return Expr(self.at(form, over))
        return Expr(self.at(form, f"{self.function_names[-1]}({', '.join(['_d + 1'] + [a.code for a in args])})"))

    # ------------------------------------------------------------------ tail position
    def tail(self, form: Any, scope: Scope, ctx: FunctionContext, indent: str) -> list[str]:
        """Statements that compute ``form`` in tail position and return it."""
        if type(form) is tuple:
            self.meter.visit(len(form))
        saved = self.note_span(form)
        try:
            return self.tail_statements(form, scope, ctx, indent)
        finally:
            self.enclosing = saved

    def tail_statements(self, form: Any, scope: Scope, ctx: FunctionContext, indent: str) -> list[str]:
        if type(form) is tuple and type(form[0]) is Name and scope.lookup(form[0].name) is None:
            head = form[0].name
            if head == "if":
                test = self.condition(form, 1, scope)
                lines = self.charge_pending(indent) + [f"{indent}if {test}:"]
                if_true, if_false = self.refinements(form[1], scope)
                saved = self.refine(if_true)
                lines += self.tail(form[2], scope, ctx, indent + "    ")
                self.known_ints = saved
                saved = self.refine(if_false)
                if len(form) == 4:
                    lines += self.tail(form[3], scope, ctx, indent)
                else:
                    lines.append(f"{indent}return None")
                    self.returns_ints = False
                self.known_ints = saved
                return lines
            if head == "cond":
                lines = []
                outer = self.known_ints
                try:
                    for clause in form[1:]:
                        pred, body = clause
                        if pred is ELSE:
                            return lines + self.tail(body, scope, ctx, indent)
                        test = self.condition(clause, 0, scope)
                        lines += self.charge_pending(indent) + [f"{indent}if {test}:"]
                        if_true, if_false = self.refinements(pred, scope)
                        before = self.refine(if_true)
                        lines += self.tail(body, scope, ctx, indent + "    ")
                        self.known_ints = before
                        self.refine(if_false)  # later clauses run where this test failed
                    self.returns_ints = False
                    return lines + [f"{indent}return None"]
                finally:
                    self.known_ints = outer
            if head == "case":
                key = self.fresh("k")
                value = self.expr(form[1], scope, None).code
                lines = self.charge_pending(indent) + [f"{indent}{key} = {value}"]
                for literals, body in form[2:]:
                    if literals is ELSE:
                        return lines + self.tail(body, scope, ctx, indent)
                    lines.append(f"{indent}if {self.case_test(key, literals)}:")
                    lines += self.tail(body, scope, ctx, indent + "    ")
                self.returns_ints = False
                return lines + [f"{indent}return None"]
            if head == "do":
                lines = []
                for statement in form[1:-1]:
                    code = self.expr(statement, scope, None).code
                    lines += self.charge_pending(indent) + [f"{indent}{code}"]
                return lines + self.tail(form[-1], scope, ctx, indent)
            if head == "let":
                inner, bindings = self.let_bindings(form, scope)
                # The bindings run one after another: their self calls are charged together.
                lines = self.charge_pending(indent) + [f"{indent}{py} = {value.code}" for py, value in bindings]
                return lines + self.tail(form[2], inner, ctx, indent)
            if head in ("and", "or") and len(form) >= 3:
                lines = []
                for i in range(1, len(form) - 1):
                    test = self.condition(form, i, scope)
                    lines += self.charge_pending(indent)
                    if head == "and":
                        lines.append(f"{indent}if not {test}: return False")
                    else:
                        lines.append(f"{indent}if {test}: return True")
                    self.returns_ints = False
                return lines + self.tail(form[-1], scope, ctx, indent)
            if (
                (head == "call-self" and ctx.loopable or ctx.self_global is not None and head == ctx.self_global)
                and len(form) - 1 == len(ctx.params)
            ):
                args = self.args(form[1:], scope, ctx)
                ctx.loops = True
                if not args:
                    return [f"{indent}continue"]
                targets = ", ".join(ctx.params)
                values = ", ".join(a.code for a in args)
                return [f"{indent}{targets} = {values}", f"{indent}continue"]
        returned = self.expr(form, scope, None)
        if returned.ints is None:
            self.returns_ints = False
        return self.charge_pending(indent) + [f"{indent}return {returned.code}"]


def _typed_params(body: Any, scope: Scope, params: tuple[str, ...]) -> list[str]:
    """Required parameters used directly as operands of inline arithmetic or comparisons.

    None when the body makes a function (its factory would be generated twice).
    """
    found: set[str] = set()
    stack = [body]
    while stack:
        item = stack.pop()
        if type(item) is not tuple or not item:
            continue
        head = item[0]
        if type(head) is Name:
            if head.name in ("lambda", "define"):
                return []
            if len(item) == 3 and (head.name in _ARITH or head.name in _COMPARE or head.name == "="):
                for arg in item[1:]:
                    if type(arg) is Name:
                        py = scope.names.get(arg.name)
                        if py in params:
                            found.add(py)
        stack.extend(item)
    return [py for py in params if py in found]


#: Forms a typed entry's body may hold besides calls of itself and inline operations.
_PURE_FORMS = frozenset({"if", "cond", "let", "and", "or", "do", "quote"})


def _calls_only_itself(body: Any, scope: Scope, self_global: str, arity: int) -> bool:
    """Whether ``body`` calls nothing but itself (with ``arity`` arguments) and inline operations.

    Such a body runs no other guest code, so nothing can rebind its global while it runs.
    """
    stack = [body]
    while stack:
        item = stack.pop()
        if type(item) is not tuple:
            continue
        head = item[0] if item else None
        if type(head) is not Name or scope.lookup(head.name) is not None:
            return False
        name = head.name
        if name == "quote":
            continue
        if name == "let":
            if any(binding[0].name == self_global for binding in item[1] or ()):
                return False  # a local of the same name would be called instead
            stack.extend(binding[1] for binding in item[1] or ())
            stack.extend(item[2:])
            continue
        if name in _PURE_FORMS:
            stack.extend(item[1:])
            continue
        if name == self_global and len(item) - 1 == arity:
            stack.extend(item[1:])
            continue
        inline = (len(item) == 3 and (name in _ARITH or name in _COMPARE or name == "=")) or (len(item) == 2 and name == "not")
        if not inline or name not in SYSTEM_FUNCTIONS:
            return False
        stack.extend(item[1:])
    return True


def check_program_limits(program: Program, max_syntax_depth: int, max_integer_bits: int) -> None:
    """Limits that apply to the source itself, checked before any compilation."""
    if program.depth > max_syntax_depth:
        raise LimitError("syntax depth")
    if program.integer_bits > max_integer_bits:
        raise LimitError("integer bits")


def layout(
    lines: list[str], spans: list[Span | None], marks: list[Span], first_line: int = 0
) -> tuple[str, dict[int, Span]]:
    """The final source and its line table: Python line to the Lisp position running there.

    Each mark in a line becomes a backslash line break (between two tokens, so neither
    the code nor its nesting changes) and the physical line after it belongs to the
    mark's form; a line's text before its first mark belongs to ``spans[i]``. Marks with
    nothing but blanks before them on their line share it and the first one wins: the
    outermost call, whose CALL is where a traceback points.
    """
    out: list[str] = []
    table: dict[int, Span] = {}
    for text, span in zip(lines, spans):
        if _MARK in text:
            pieces = text.split(_MARK)
            current = pieces[0]
            marked = False
            for piece in pieces[1:]:
                index, _, rest = piece.partition(_MARK_END)
                if current.isspace() or not current:
                    if not marked:
                        span = marks[int(index)]
                else:
                    out.append(current + " \\")
                    if span is not None:
                        table[first_line + len(out)] = span
                    current = ""
                    span = marks[int(index)]
                marked = True
                current += rest
            text = current
        out.append(text)
        if span is not None:
            table[first_line + len(out)] = span
    return "\n".join(out) + "\n", table
