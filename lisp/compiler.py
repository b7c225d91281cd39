"""The compiler: checked Lisp forms to Python source, compiled once.

Each special form is checked here (shape, arity, one-expression bodies, duplicate
parameters) and turned into Python. The generated module:

* names every guest global ``g_<mangled>`` and every local ``v<n>_<mangled>``, so
  guest names can never reach a runtime helper (helpers all start with ``_``);
* passes the call depth as the first argument of every Lisp callable, so the call
  stack bound costs one comparison and no shared state;
* charges one step of fuel at every function entry and every tail-loop iteration
  through the module global ``_s`` (refilled from the shared budget by ``_tick``);
* turns self tail calls into ``while`` loops;
* inlines integer fast paths for arithmetic and comparisons, falling back to the
  system functions for everything else;
* builds closures through module-level factories, so a closure captures values,
  never a variable that a loop later changes.

It runs with no Python builtins: only the helpers the interpreter installs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Callable

from .errors import CompileError, LimitError, Span
from .functions import SYSTEM_FUNCTIONS
from .reader import QUASIQUOTE, QUOTE, UNQUOTE, UNQUOTE_SPLICING, Program, as_data
from .values import Char, Keyword, LispPath, Name

SPECIAL_FORMS = frozenset(
    "define lambda let if cond case and or do apply quote quasiquote comma comma-at macro const use "
    "struct export set-module-doc call-self".split()
)
STANDARD_NAMES = frozenset(SYSTEM_FUNCTIONS) | SPECIAL_FORMS | {"true", "false", "else"}

ELSE = Name("else")
KW_OPTIONAL = Keyword("optional")
KW_KEY = Keyword("key")
KW_REST = Keyword("rest")

# Integer fast paths: operator, slow-path helper.
_ARITH = {"+": ("+", "_add2"), "-": ("-", "_sub2"), "*": ("*", "_mul2")}
_COMPARE = {"<": ("<", "_lt2"), ">": (">", "_gt2"), "<=": ("<=", "_le2"), ">=": (">=", "_ge2")}


# The depth argument carries the call depth in its low bits and, when the value stack
# is tracked, the values held by the callers above them.
_VALUE_SHIFT = 24
_DEPTH_MASK = (1 << _VALUE_SHIFT) - 1
_STACK_MARK = re.compile("\x01([GD])([0-9]+)\x01")

_MANGLED: dict[str, str] = {}


def mangle(name: str) -> str:
    """An injective map from Lisp names to Python identifier tails (memoized)."""
    found = _MANGLED.get(name)
    if found is None:
        found = _mangle(name)
        if len(_MANGLED) < 65536:
            _MANGLED[name] = found
    return found


def _mangle(name: str) -> str:
    out = []
    for ch in name:
        if ch.isascii() and ch.isalnum():
            out.append(ch)
        else:
            out.append(f"_{ord(ch):x}_")
    return "".join(out)


def demangle(tail: str) -> str:
    out, i = [], 0
    while i < len(tail):
        ch = tail[i]
        if ch == "_":
            end = tail.index("_", i + 1)
            out.append(chr(int(tail[i + 1 : end], 16)))
            i = end + 1
        else:
            out.append(ch)
            i += 1
    return "".join(out)


_GLOBAL_NAMES: dict[str, str] = {}


def global_name(name: str) -> str:
    found = _GLOBAL_NAMES.get(name)
    if found is None:
        found = "g_" + mangle(name)
        if len(_GLOBAL_NAMES) < 65536:
            _GLOBAL_NAMES[name] = found
    return found


def lisp_name_of(python_name: str) -> str:
    """The Lisp name behind a generated function or global name."""
    if python_name.startswith("g_"):
        try:
            return demangle(python_name[2:])
        except (ValueError, IndexError):
            return python_name
    return "lambda"


@dataclass
class Expr:
    """A compiled expression: Python source plus what the compiler knows about it."""

    code: str
    is_bool: bool = False  # statically known to produce a Python bool
    simple: bool = False  # a local or a constant: safe to mention twice


@dataclass
class FunctionContext:
    """What the compiler tracks inside one function body."""

    self_global: str | None  # the Lisp global name the function is bound to
    params: tuple[str, ...]  # Python names of required parameters, for tail loops
    loops: bool = False  # set when a self tail call became a loop


@dataclass
class Compiled:
    """A compiled program: code object, constants and the map back to Lisp lines."""

    code: Any
    constants: tuple[Any, ...]
    python_source: str
    line_table: dict[int, int]
    filename: str
    #: Every guest global the code can mention (host functions it never names need not exist).
    referenced: frozenset[str] = frozenset()


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

    def __init__(self, parent: "Scope | None", names: dict[str, str] | None = None, boundary: bool = False) -> None:
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


@dataclass
class _Macro:
    fn: Callable[..., Any]


class Compiler:
    """Compiles one program. ``run_macro`` runs compile-time code for macros and consts."""

    def __init__(
        self,
        program: Program,
        *,
        filename: str,
        max_call_stack: int,
        max_value_stack: int,
        max_integer_bits: int,
        evaluate_at_compile_time: Callable[[str, Any, "Compiler"], Any],
    ) -> None:
        self.program = program
        self.filename = filename
        self.max_call_stack = max_call_stack
        self.max_value_stack = max_value_stack
        self.int_bound = 1 << max_integer_bits
        self.evaluate_at_compile_time = evaluate_at_compile_time
        self.constants: list[Any] = []
        self.constant_index: dict[tuple[type, Any], int] = {}
        self.counter = 0
        self.factories: list[str] = []
        self.factory_spans: list[int | None] = []
        self.current_line: int | None = None
        self.macros: dict[str, _Macro] = {}
        self.consts: dict[str, Any] = {}
        #: The budget shared by all compile-time evaluation (set by the interpreter).
        self.compile_budget: Any = None
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

    def error(self, message: str, form: Any = None) -> CompileError:
        span = self.program.span_of(form) if form is not None else None
        if span is None and self.current_line is not None:
            span = Span(self.current_line, 1)
        return CompileError(message, span)

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
        return f"_K[{index}]"

    def note_span(self, form: Any) -> None:
        span = self.program.span_of(form)
        if span is not None:
            self.current_line = span.line

    # ------------------------------------------------------------------ module
    def compile_module(self) -> tuple[str, dict[int, int]]:
        body: list[str] = []
        spans: list[int | None] = []
        for form in self.program.forms:
            self.note_span(form)
            for line in self.top_level(form):
                body.append(line)
                spans.append(self.current_line)
        lines = self.factories + body
        all_spans = self.factory_spans + spans
        table = {i + 1: s for i, s in enumerate(all_spans) if s is not None}
        return self.place_stack_checks("\n".join(lines) + "\n"), table

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
            if kind == "G":
                if not tracked:
                    return f"if _d > {limit_c}: _deep()"
                return (
                    f"if _d >> {_VALUE_SHIFT} > {limit_v - size} or _d & {_DEPTH_MASK} > {limit_c}: "
                    f"_stack_exceeded(_d, {limit_c})"
                )
            return str(1 + (size << _VALUE_SHIFT)) if tracked else "1"

        return _STACK_MARK.sub(fill, source)

    def emit_factory(self, lines: list[str], spans: list[int | None]) -> None:
        self.factories.extend(lines)
        self.factory_spans.extend(spans)

    def top_level(self, form: Any) -> list[str]:
        form = self.expand(form)
        if type(form) is tuple and type(form[0]) is Name:
            head = form[0].name
            if head == "define":
                return self.top_define(form)
            if head == "macro":
                self.define_macro(form)
                return [f"_last = {self.constant(form[1][0] if type(form[1]) is tuple else form[1])}"]
            if head == "const":
                self.define_const(form)
                return [f"_last = {self.constant(form[1])}"]
        expr = self.expr(form, Scope(None), None)
        return [f"_last = {expr.code}"]

    def top_define(self, form: tuple) -> list[str]:
        target, doc, value = self.parse_define(form)
        if type(target) is tuple:
            name = target[0].name
            gname = global_name(name)
            lines = [f"_define_check({gname!r})"]
            lines += self.function_def(gname, target[1:], value, Scope(None), self_global=name, form=form)
            lines.append(f"_last = {self.constant(target[0])}")
            return lines
        gname = global_name(target.name)
        expr = self.expr(value, Scope(None), None)
        return [
            f"_define_check({gname!r})",
            f"{gname} = {expr.code}",
            f"_last = {self.constant(target)}",
        ]

    def parse_define(self, form: tuple) -> tuple[Any, Any, Any]:
        if len(form) == 3:
            target, value = form[1], form[2]
            doc = None
        elif len(form) == 4 and type(form[2]) is str:
            target, doc, value = form[1], form[2], form[3]
        else:
            raise self.error("`define` expects (define name [doc] value) with exactly one body expression", form)
        if type(target) is tuple:
            if type(target[0]) is not Name:
                raise self.error("`define` expects a function name", form)
            self.check_definable(target[0].name, form)
        elif type(target) is Name:
            self.check_definable(target.name, form)
        else:
            raise self.error("`define` expects a name", form)
        return target, doc, value

    def check_definable(self, name: str, form: Any) -> None:
        if name in STANDARD_NAMES:
            raise self.error(f"cannot redefine standard name `{name}`", form)

    # ------------------------------------------------------------------ functions
    def parse_params(self, params: Any, form: Any) -> tuple[list[str], list[tuple[str, Any]], list[tuple[str, Any]], str | None]:
        """Split a parameter list into required, optional, keyword and rest names."""
        if params is None:
            return [], [], [], None
        if type(params) is not tuple:
            raise self.error("parameter list must be a list", form)
        required: list[str] = []
        optional: list[tuple[str, Any]] = []
        keys: list[tuple[str, Any]] = []
        rest: str | None = None
        mode = "required"
        seen: set[str] = set()
        items = list(params)
        i = 0
        while i < len(items):
            item = items[i]
            if type(item) is Keyword:
                if item is KW_OPTIONAL:
                    if mode == "key":
                        raise self.error("`:optional` and `:key` cannot be combined", form)
                    if mode != "required":
                        raise self.error("`:optional` must come once, before `:key` and `:rest`", form)
                    mode = "optional"
                elif item is KW_KEY:
                    if mode == "optional":
                        raise self.error("`:optional` and `:key` cannot be combined", form)
                    if mode in ("key", "rest"):
                        raise self.error("`:key` must come once, before any `:rest`", form)
                    mode = "key"
                elif item is KW_REST:
                    if mode == "key":
                        raise self.error("`:key` and `:rest` cannot be combined", form)
                    if i + 2 != len(items) or type(items[i + 1]) is not Name:
                        raise self.error("`:rest` must be followed by exactly one name", form)
                    mode = "rest"
                else:
                    raise self.error(f"unexpected keyword `:{item.name}` in parameter list", form)
                i += 1
                continue
            if type(item) is Name:
                pname, default = item.name, None
            elif type(item) is tuple and len(item) == 2 and type(item[0]) is Name and mode in ("optional", "key"):
                pname, default = item[0].name, item[1]
            else:
                raise self.error("invalid parameter", form)
            if pname in seen:
                raise self.error(f"duplicate parameter `{pname}`", form)
            if pname in SPECIAL_FORMS or pname in ("true", "false"):
                raise self.error(f"cannot bind standard name `{pname}`", form)
            seen.add(pname)
            if mode == "required":
                required.append(pname)
            elif mode == "optional":
                optional.append((pname, default))
            elif mode == "key":
                keys.append((pname, default))
            else:
                rest = pname
            i += 1
        return required, optional, keys, rest

    def function_def(
        self, pyname: str, params: Any, body: Any, outer: Scope, *, self_global: str | None, form: Any, indent: str = ""
    ) -> list[str]:
        """A ``def`` for a Lisp function whose free locals are all in ``outer``'s captures."""
        if type(params) is not tuple and params is not None:
            raise self.error("parameter list must be a list", form)
        required, optional, keys, rest = self.parse_params(params, form)
        frame = len(self.frame_sizes)
        self.frame_sizes[frame] = len(required) + len(optional) + len(keys) + (rest is not None)
        self.frames.append(frame)
        try:
            return self._function_def(pyname, body, outer, self_global, required, optional, keys, rest, indent, frame)
        finally:
            self.frames.pop()

    def _function_def(
        self, pyname: str, body: Any, outer: Scope, self_global: str | None,
        required: list[str], optional: list[tuple[str, Any]], keys: list[tuple[str, Any]], rest: str | None,
        indent: str, frame: int,
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
        ctx = FunctionContext(self_global if loopable else None, tuple(req_py))
        # Tail statements are indented for the loop body; without a loop they move out 4.
        tail = self.tail(body, scope, ctx, "        ")
        lines = [f"{indent}def {pyname}({', '.join(sig)}):", f"{indent}    global _s"]
        guard = [
            f"{indent}    \x01G{frame}\x01",  # the stack check, placed by place_stack_checks
        ]
        fuel = ["_s -= 1", "if _s < 0: _tick()"]
        if ctx.loops:
            lines += guard
            lines += [f"{indent}    {p}" for p in prologue]
            lines.append(f"{indent}    while True:")
            lines += [f"{indent}        {f}" for f in fuel]
            lines += [f"{indent}{t}" for t in tail]
        else:
            lines += [f"{indent}    {f}" for f in fuel]
            lines += guard
            lines += [f"{indent}    {p}" for p in prologue]
            lines += [f"{indent}{t[4:]}" for t in tail]
        return lines

    def lambda_expr(self, form: tuple, scope: Scope, name: str | None = None) -> Expr:
        """A closure: a module-level factory taking the captured values, called here."""
        if len(form) != 3:
            raise self.error("`lambda` expects (lambda (params) body) with exactly one body expression", form)
        captured = sorted(self.free_locals(form, scope))
        factory = self.fresh("mk")
        inner = self.fresh("lambda") if name is None else global_name(name)
        cap_scope = Scope(None, {lisp: py for lisp, py in captured}, boundary=True)
        saved_line = self.current_line
        body = self.function_def(inner, form[1], form[2], cap_scope, self_global=None, form=form, indent="    ")
        self.current_line = saved_line
        lines = [f"def {factory}({', '.join(py for _, py in captured)}):"] + body + [f"    return {inner}"]
        self.emit_factory(lines, [self.current_line] * len(lines))
        return Expr(f"{factory}({', '.join(py for _, py in captured)})")

    def free_locals(self, form: Any, scope: Scope) -> set[tuple[str, str]]:
        """Locals of enclosing scopes mentioned anywhere in ``form`` (over-approximated)."""
        found: set[tuple[str, str]] = set()
        stack = [form]
        while stack:
            item = stack.pop()
            if type(item) is Name:
                py = scope.lookup(item.name)
                if py is not None:
                    found.add((item.name, py))
            elif type(item) is tuple:
                stack.extend(item)
        return found

    # ------------------------------------------------------------------ macros, consts
    def define_macro(self, form: tuple) -> None:
        if len(form) != 3 or type(form[1]) is not tuple or type(form[1][0]) is not Name:
            raise self.error("`macro` expects (macro (name params) body)", form)
        name = form[1][0].name
        self.check_definable(name, form)
        lam = (Name("lambda"), form[1][1:] or None, form[2])
        fn = self.evaluate_at_compile_time("macro", lam, self)
        self.macros[name] = _Macro(fn)

    def define_const(self, form: tuple) -> None:
        if len(form) != 3 or type(form[1]) is not Name:
            raise self.error("`const` expects (const name value)", form)
        self.check_definable(form[1].name, form)
        self.consts[form[1].name] = self.evaluate_at_compile_time("const", self.substitute_consts(form[2]), self)

    def substitute_consts(self, form: Any) -> Any:
        if type(form) is Name and form.name in self.consts:
            return (QUOTE, self.consts[form.name])
        if type(form) is tuple and form[0] is not QUOTE:
            return tuple(self.substitute_consts(x) for x in form)
        return form

    def expand(self, form: Any) -> Any:
        """Expand macro calls at the head of ``form`` until none is left."""
        for _ in range(256):
            if type(form) is tuple and type(form[0]) is Name and form[0].name in self.macros:
                macro = self.macros[form[0].name]
                form = self.evaluate_at_compile_time("expand", (macro.fn, form[1:]), self)
            else:
                return form
        raise self.error("macro expansion does not terminate", form)

    # ------------------------------------------------------------------ expressions
    def expr(self, form: Any, scope: Scope, ctx: FunctionContext | None) -> Expr:
        t = type(form)
        if t is Name:
            return self.reference(form, scope)
        if t is tuple:
            self.note_span(form)
            form = self.expand(form)
            if type(form) is not tuple:
                return self.expr(form, scope, ctx)
            return self.call_or_form(form, scope, ctx)
        if t is bool:
            return Expr(self.constant(form), is_bool=True, simple=True)
        return Expr(self.constant(form), simple=True)

    def reference(self, form: Name, scope: Scope) -> Expr:
        name = form.name
        local = scope.lookup(name)
        if local is not None:
            return Expr(local, simple=True)
        if name in self.consts:
            return Expr(self.constant(self.consts[name]), simple=True)
        if name in SPECIAL_FORMS or name in self.macros:
            raise self.error(f"`{name}` is a special form, not a value", None)
        if name in SYSTEM_FUNCTIONS:
            return Expr("_F_" + mangle(name), simple=True)
        return Expr(global_name(name))

    def call_or_form(self, form: tuple, scope: Scope, ctx: FunctionContext | None) -> Expr:
        head = form[0]
        if type(head) is Name and scope.lookup(head.name) is None:
            name = head.name
            special = getattr(self, "form_" + mangle(name), None) if name in SPECIAL_FORMS else None
            if special is not None:
                return special(form, scope, ctx)
            if name in SPECIAL_FORMS:
                raise self.error(f"`{name}` is not supported in Svit Lisp", form)
            if name in SYSTEM_FUNCTIONS and name not in self.consts:
                return self.system_call(name, form, scope, ctx)
        return self.call(form, scope, ctx)

    def args(self, forms: tuple, scope: Scope, ctx: FunctionContext | None) -> list[Expr]:
        return [self.expr(f, scope, None) for f in forms]

    def check_value_stack(self, count: int) -> str | None:
        if count > self.max_value_stack:
            return "_value_stack()"
        return None

    def call(self, form: tuple, scope: Scope, ctx: FunctionContext | None) -> Expr:
        callee = self.expr(form[0], scope, None)
        args = self.args(form[1:], scope, ctx)
        over = self.check_value_stack(len(args))
        if over:
            return Expr(over)
        step = f"\x01D{self.frames[-1]}\x01" if self.frames else "1"
        return Expr(f"{callee.code}({', '.join([f'_d + {step}'] + [a.code for a in args])})")

    def system_call(self, name: str, form: tuple, scope: Scope, ctx: FunctionContext | None) -> Expr:
        spec = SYSTEM_FUNCTIONS[name]
        argc = len(form) - 1
        args = self.args(form[1:], scope, ctx)
        over = self.check_value_stack(argc)
        if over:
            return Expr(over)
        if argc < spec.min_args or (spec.max_args is not None and argc > spec.max_args):
            # Arity is a run-time error, raised only if the call is reached.
            joined = "".join(f"{a.code}, " for a in args)
            return Expr(f"_arity_error({name!r}, ({joined}))")
        if argc == 2 and name in _ARITH:
            return self.inline_arith(name, args)
        if argc == 2 and name in _COMPARE:
            return self.inline_compare(name, args)
        if argc == 2 and name == "=":
            return self.inline_binary(args, "{a} == {b}", "_equal({a}, {b})", is_bool=True)
        if argc == 1 and name == "not":
            a = args[0]
            if a.is_bool:
                return Expr(f"({a.code}) is False", is_bool=True)
            return Expr(f"_not({a.code})", is_bool=True)
        if argc == 1 and name == "null":
            return Expr(f"({args[0].code}) is None", is_bool=True)
        is_bool = name in ("=", "/=", "eq", "ne", "<", ">", "<=", ">=", "not", "xor", "is", "null")
        passed = (["_d"] if spec.takes_depth else []) + [a.code for a in args]
        return Expr(f"_S_{mangle(name)}({', '.join(passed)})", is_bool=is_bool)

    def bind_twice(self, arg: Expr) -> tuple[str, str]:
        """(first mention, later mentions) of an argument that must be evaluated once."""
        if arg.simple:
            return arg.code, arg.code
        tmp = self.fresh()
        return f"({tmp} := {arg.code})", tmp

    def inline_arith(self, name: str, args: list[Expr]) -> Expr:
        op, slow = _ARITH[name]
        a, b = args
        a1, a2 = self.bind_twice(a)
        b1, b2 = self.bind_twice(b)
        result = self.fresh("r")
        bound = self.int_bound
        checks = []
        # Evaluate both operands (in order) before testing either type.
        if self.is_int_literal(a) and self.is_int_literal(b):
            return Expr(f"{slow}({a.code}, {b.code})")
        if self.is_int_literal(a):
            checks.append(f"_type({b1}) is _int")
        elif self.is_int_literal(b):
            checks.append(f"_type({a1}) is _int")
        else:
            checks.append(f"_type({a1}) is _type({b1}) is _int")
        checks.append(f"{-bound} < ({result} := {a2} {op} {b2}) < {bound}")
        return Expr(f"({result} if {' and '.join(checks)} else {slow}({a2}, {b2}))")

    def inline_compare(self, name: str, args: list[Expr]) -> Expr:
        op, slow = _COMPARE[name]
        return self.inline_binary(args, "{a} " + op + " {b}", slow + "({a}, {b})", is_bool=True)

    def inline_binary(self, args: list[Expr], fast: str, slow: str, *, is_bool: bool) -> Expr:
        a, b = args
        a1, a2 = self.bind_twice(a)
        b1, b2 = self.bind_twice(b)
        if self.is_int_literal(a) and self.is_int_literal(b):
            return Expr(slow.format(a=a.code, b=b.code), is_bool=is_bool)
        if self.is_int_literal(a):
            check = f"_type({b1}) is _int"
        elif self.is_int_literal(b):
            check = f"_type({a1}) is _int"
        else:
            check = f"_type({a1}) is _type({b1}) is _int"
        return Expr(f"({fast.format(a=a2, b=b2)} if {check} else {slow.format(a=a2, b=b2)})", is_bool=is_bool)

    @staticmethod
    def is_int_literal(e: Expr) -> bool:
        code = e.code
        return e.simple and (code.isdigit() or (code.startswith("-") and code[1:].isdigit()))

    def condition(self, form: Any, scope: Scope) -> str:
        e = self.expr(form, scope, None)
        if e.is_bool:
            return e.code
        return f"_truth({e.code})"

    # ------------------------------------------------------------------ special forms (expressions)
    def form_quote(self, form: tuple, scope: Scope, ctx: Any) -> Expr:
        if len(form) != 2:
            raise self.error("`quote` expects one argument", form)
        return Expr(self.constant(as_data(form[1])), is_bool=type(form[1]) is bool, simple=True)

    def form_quasiquote(self, form: tuple, scope: Scope, ctx: Any) -> Expr:
        if len(form) != 2:
            raise self.error("`quasiquote` expects one argument", form)
        return self.quasi(form[1], scope, 1)

    def form_comma(self, form: tuple, scope: Scope, ctx: Any) -> Expr:
        raise self.error("unquote (`,`) outside of a quasiquote", form)

    def form_comma_2d_at(self, form: tuple, scope: Scope, ctx: Any) -> Expr:
        raise self.error("unquote-splicing (`,@`) outside of a quasiquote", form)

    def quasi(self, form: Any, scope: Scope, level: int) -> Expr:
        if type(form) is not tuple:
            return Expr(self.constant(form), simple=True)
        head = form[0]
        if head is UNQUOTE and len(form) == 2:
            # Consecutive commas apply together, as Ketos reads `,,x`: as many as the
            # quasiquotes around them evaluate, fewer stay as a comma value.
            commas, inner_form = 1, form[1]
            while type(inner_form) is tuple and len(inner_form) == 2 and inner_form[0] is UNQUOTE:
                commas, inner_form = commas + 1, inner_form[1]
            if commas > level:
                raise self.error("more commas than backquotes", form)
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
                segments.append(f"_splice({self.expr(item[1], scope, None).code})")
            else:
                segments.append(f"({self.quasi(item, scope, level).code},)")
        return Expr(f"_qq({', '.join(segments)})")

    def form_if(self, form: tuple, scope: Scope, ctx: Any) -> Expr:
        if len(form) not in (3, 4):
            raise self.error("`if` expects (if condition then [else])", form)
        cond = self.condition(form[1], scope)
        then = self.expr(form[2], scope, None)
        other = self.expr(form[3], scope, None) if len(form) == 4 else Expr("None", simple=True)
        return Expr(f"({then.code} if {cond} else {other.code})", is_bool=then.is_bool and other.is_bool)

    def cond_clauses(self, form: tuple) -> list[tuple[Any, Any]]:
        clauses = []
        seen_else = False
        for clause in form[1:]:
            if seen_else:
                raise self.error("`cond` clause after `else`", form)
            if type(clause) is not tuple or len(clause) != 2:
                raise self.error("`cond` clauses must be (predicate expression)", form)
            if clause[0] is ELSE:
                seen_else = True
            clauses.append(clause)
        return clauses

    def form_cond(self, form: tuple, scope: Scope, ctx: Any) -> Expr:
        code = "None"
        all_bool = False
        for pred, body in reversed(self.cond_clauses(form)):
            e = self.expr(body, scope, None)
            if pred is ELSE:
                code, all_bool = e.code, e.is_bool
            else:
                code = f"({e.code} if {self.condition(pred, scope)} else {code})"
                all_bool = all_bool and e.is_bool
        return Expr(code, is_bool=all_bool)

    def case_clauses(self, form: tuple) -> list[tuple[Any, Any]]:
        if len(form) < 2:
            raise self.error("`case` expects (case expression clauses...)", form)
        clauses = []
        seen_else = False
        for clause in form[2:]:
            if seen_else:
                raise self.error("`case` clause after `else`", form)
            if type(clause) is not tuple or len(clause) != 2:
                raise self.error("`case` clauses must be ((literals...) expression)", form)
            if clause[0] is ELSE:
                seen_else = True
            elif clause[0] is not None and type(clause[0]) is not tuple:
                raise self.error("`case` clause literals must be a list", form)
            clauses.append(clause)
        return clauses

    def case_test(self, key: str, literals: Any) -> str:
        if literals is None:
            return f"({key}) is None"
        return f"_case_match({key}, {self.constant(literals)})"

    def form_case(self, form: tuple, scope: Scope, ctx: Any) -> Expr:
        clauses = self.case_clauses(form)
        key_expr = self.expr(form[1], scope, None)
        key = self.fresh("k")
        code = "None"
        for literals, body in reversed(clauses):
            e = self.expr(body, scope, None)
            code = e.code if literals is ELSE else f"({e.code} if {self.case_test(key, literals)} else {code})"
        return Expr(f"({code} if (({key} := {key_expr.code}) is {key} or True) else None)")

    def form_and(self, form: tuple, scope: Scope, ctx: Any) -> Expr:
        if len(form) < 2:
            raise self.error("`and` expects at least one argument", form)
        *init, last = form[1:]
        last_e = self.expr(last, scope, None)
        if not init:
            return last_e
        tests = " and ".join(self.condition(f, scope) for f in init)
        return Expr(f"({last_e.code} if {tests} else False)", is_bool=last_e.is_bool)

    def form_or(self, form: tuple, scope: Scope, ctx: Any) -> Expr:
        if len(form) < 2:
            raise self.error("`or` expects at least one argument", form)
        *init, last = form[1:]
        last_e = self.expr(last, scope, None)
        if not init:
            return last_e
        tests = " or ".join(self.condition(f, scope) for f in init)
        return Expr(f"(True if {tests} else {last_e.code})", is_bool=last_e.is_bool)

    def form_do(self, form: tuple, scope: Scope, ctx: Any) -> Expr:
        if len(form) < 2:
            raise self.error("`do` expects at least one expression", form)
        parts = [self.expr(f, scope, None) for f in form[1:]]
        if len(parts) == 1:
            return parts[0]
        return Expr(f"({', '.join(p.code for p in parts)})[-1]", is_bool=parts[-1].is_bool)

    def let_bindings(self, form: tuple, scope: Scope) -> tuple[Scope, list[tuple[str, Expr]]]:
        if len(form) != 3:
            raise self.error("`let` expects (let ((name value) ...) body) with exactly one body expression", form)
        bindings = form[1]
        if bindings is not None and type(bindings) is not tuple:
            raise self.error("`let` bindings must be a list", form)
        inner = Scope(scope)
        out = []
        for binding in bindings or ():
            if type(binding) is not tuple or len(binding) != 2 or type(binding[0]) is not Name:
                raise self.error("`let` binding must be (name value)", form)
            lname = binding[0].name
            if lname in SPECIAL_FORMS or lname in ("true", "false"):
                raise self.error(f"cannot bind standard name `{lname}`", form)
            value = self.expr(binding[1], inner, None)
            if self.frames:
                self.frame_sizes[self.frames[-1]] += 1
            py = self.fresh_local(lname)
            inner = Scope(inner, {lname: py})
            out.append((py, value))
        return inner, out

    def form_let(self, form: tuple, scope: Scope, ctx: Any) -> Expr:
        inner, bindings = self.let_bindings(form, scope)
        body = self.expr(form[2], inner, None)
        if not bindings:
            return body
        sets = " and ".join(f"(({py} := {value.code}) is {py})" for py, value in bindings)
        return Expr(f"({body.code} if {sets} else None)", is_bool=body.is_bool)

    def form_lambda(self, form: tuple, scope: Scope, ctx: Any) -> Expr:
        return self.lambda_expr(form, scope)

    def form_define(self, form: tuple, scope: Scope, ctx: Any) -> Expr:
        # A define below the top level binds a global when it runs.
        target, _doc, value = self.parse_define(form)
        if type(target) is tuple:
            fn = self.lambda_expr((Name("lambda"), target[1:] or None, value), scope, name=target[0].name)
            return Expr(f"_define_global({global_name(target[0].name)!r}, {fn.code}, {self.constant(target[0])})")
        e = self.expr(value, scope, None)
        return Expr(f"_define_global({global_name(target.name)!r}, {e.code}, {self.constant(target)})")

    def form_apply(self, form: tuple, scope: Scope, ctx: Any) -> Expr:
        if len(form) < 3:
            raise self.error("`apply` expects (apply function args... list)", form)
        parts = [self.expr(f, scope, None).code for f in form[1:]]
        return Expr(f"_apply(_d, {', '.join(parts)})")

    def form_use(self, form: tuple, scope: Scope, ctx: Any) -> Expr:
        raise self.error("module not found: `use` is not available in Svit Lisp", form)

    def form_macro(self, form: tuple, scope: Scope, ctx: Any) -> Expr:
        raise self.error("`macro` is only allowed at the top level", form)

    def form_const(self, form: tuple, scope: Scope, ctx: Any) -> Expr:
        raise self.error("`const` is only allowed at the top level", form)

    # ------------------------------------------------------------------ tail position
    def tail(self, form: Any, scope: Scope, ctx: FunctionContext, indent: str) -> list[str]:
        """Statements that compute ``form`` in tail position and return it."""
        if type(form) is tuple:
            self.note_span(form)
            form = self.expand(form)
        if type(form) is tuple and type(form[0]) is Name and scope.lookup(form[0].name) is None:
            head = form[0].name
            if head == "if":
                if len(form) not in (3, 4):
                    raise self.error("`if` expects (if condition then [else])", form)
                lines = [f"{indent}if {self.condition(form[1], scope)}:"]
                lines += self.tail(form[2], scope, ctx, indent + "    ")
                if len(form) == 4:
                    lines += self.tail(form[3], scope, ctx, indent)
                else:
                    lines.append(f"{indent}return None")
                return lines
            if head == "cond":
                lines = []
                for pred, body in self.cond_clauses(form):
                    if pred is ELSE:
                        return lines + self.tail(body, scope, ctx, indent)
                    lines.append(f"{indent}if {self.condition(pred, scope)}:")
                    lines += self.tail(body, scope, ctx, indent + "    ")
                return lines + [f"{indent}return None"]
            if head == "case":
                clauses = self.case_clauses(form)
                key = self.fresh("k")
                lines = [f"{indent}{key} = {self.expr(form[1], scope, None).code}"]
                for literals, body in clauses:
                    if literals is ELSE:
                        return lines + self.tail(body, scope, ctx, indent)
                    lines.append(f"{indent}if {self.case_test(key, literals)}:")
                    lines += self.tail(body, scope, ctx, indent + "    ")
                return lines + [f"{indent}return None"]
            if head == "do":
                if len(form) < 2:
                    raise self.error("`do` expects at least one expression", form)
                lines = [f"{indent}{self.expr(f, scope, None).code}" for f in form[1:-1]]
                return lines + self.tail(form[-1], scope, ctx, indent)
            if head == "let":
                inner, bindings = self.let_bindings(form, scope)
                lines = [f"{indent}{py} = {value.code}" for py, value in bindings]
                return lines + self.tail(form[2], inner, ctx, indent)
            if head in ("and", "or") and len(form) >= 3:
                lines = []
                for f in form[1:-1]:
                    test = self.condition(f, scope)
                    if head == "and":
                        lines.append(f"{indent}if not {test}: return False")
                    else:
                        lines.append(f"{indent}if {test}: return True")
                return lines + self.tail(form[-1], scope, ctx, indent)
            if (
                ctx.self_global is not None
                and head == ctx.self_global
                and head not in SPECIAL_FORMS
                and len(form) - 1 == len(ctx.params)
            ):
                args = self.args(form[1:], scope, ctx)
                ctx.loops = True
                if not args:
                    return [f"{indent}continue"]
                targets = ", ".join(ctx.params)
                values = ", ".join(a.code for a in args)
                return [f"{indent}{targets} = {values}", f"{indent}continue"]
        return [f"{indent}return {self.expr(form, scope, None).code}"]


def check_program_limits(program: Program, max_syntax_depth: int, max_integer_bits: int) -> None:
    """Limits that apply to the source itself, checked before any compilation."""
    if program.depth > max_syntax_depth:
        raise LimitError("syntax depth")
    if program.integer_bits > max_integer_bits:
        raise LimitError("integer bits")
