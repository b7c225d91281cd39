"""The resolver: the pass between macro expansion and code generation.

It walks the whole expanded program once, before anything runs, and refuses it with a
:class:`~lisp.errors.CompileError` (line, column and a suggested fix) for:

* a misused special form (every form's shape is checked here, and only here);
* a name that nothing binds: not a local or parameter, a const or macro defined
  before it, a system function, a name the host installed, or a global that some
  ``define`` anywhere in the program binds (each script runs in a fresh namespace
  holding only what the host installed, so the world is closed);
* a call with the wrong number of arguments to a function whose parameters are
  known: system and host functions, the script's own functions defined once at top
  level, let-bound lambdas, ``call-self`` and immediately called lambdas;
* a literal that is not a boolean where a condition is expected (``(if 1 ...)``):
  conditions are never "truthy" in Svit Lisp.

Every error of the program is collected and the earliest in source order is raised,
so the first thing a reader fixes is the first thing written. Compile-time code (macro
bodies, consts) is resolved in an open world: the functions it may call are only known
when it runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from functools import lru_cache
from typing import Any, Iterable, Mapping

from .budget import CompileMeter
from .errors import CompileError, LispError, Span
from .expand import Expansion
from .functions import SYSTEM_FUNCTIONS
from .reader import QUASIQUOTE, QUOTE, UNQUOTE, UNQUOTE_SPLICING, Program
from .suggestions import ALTERNATIVES, alternative, nearest
from .syntax import (
    ELSE,
    EXTENSION_NAMES,
    KW_KEY,
    KW_OPTIONAL,
    KW_REST,
    SPECIAL_FORMS,
    Form,
    Params,
    expected_arguments,
    head_name,
    redefinition_problem,
)
from .values import Char, Keyword, LispPath, Name

__all__ = ["NO_HOST_NAMES", "Arity", "HostNames", "Resolution", "Resolver", "host_names", "resolve"]

Arity = tuple[int, "int | None"]


@dataclass(frozen=True, eq=False)
class HostNames:
    """What a host installed before compiling: functions with their arity, and values.

    Instances are interned, so two namespaces with the same names share one object and
    its identity can key the compile cache.
    """

    functions: Mapping[str, Arity]
    values: frozenset[str]

    def __contains__(self, name: str) -> bool:
        return name in self.functions or name in self.values


def host_names(functions: Mapping[str, Arity] | frozenset[tuple[str, Arity]], values: Iterable[str]) -> HostNames:
    """The interned :class:`HostNames` for these functions (or their frozen items) and values."""
    items = functions if isinstance(functions, frozenset) else frozenset(functions.items())
    return _interned_host_names(items, frozenset(values))


@lru_cache(maxsize=1024)
def _interned_host_names(functions: frozenset[tuple[str, Arity]], values: frozenset[str]) -> HostNames:
    # One object per distinct set of names, so compile-cache keys compare them cheaply.
    return HostNames(dict(functions), values)


NO_HOST_NAMES = host_names({}, ())


@dataclass
class Resolution:
    """What code generation needs from the resolver."""

    #: id of every ``lambda`` form and function ``define`` form -> its checked parameters.
    params: dict[int, Params] = field(default_factory=dict)
    #: ids of the function forms whose own body uses ``call-self``.
    self_calling: set[int] = field(default_factory=set)
    #: Extension names the program defines at top level: there they name its globals.
    shadowed: frozenset[str] = frozenset()


class _Scope:
    """Lexical bindings: name -> the parameters of a let-bound lambda (``None``: unknown)."""

    __slots__ = ("parent", "names")

    def __init__(self, parent: _Scope | None, names: dict[str, Params | None] | None = None) -> None:
        self.parent = parent
        self.names = names if names is not None else {}

    def lookup(self, name: str) -> tuple[bool, Params | None]:
        scope: _Scope | None = self
        while scope is not None:
            if name in scope.names:
                return True, scope.names[name]
            scope = scope.parent
        return False, None

    def all_names(self) -> set[str]:
        found: set[str] = set()
        scope: _Scope | None = self
        while scope is not None:
            found.update(scope.names)
            scope = scope.parent
        return found


_TOP = _Scope(None)


@dataclass
class _Function:
    """The function whose body is being resolved (for ``call-self``)."""

    params: Params
    name: str
    form_id: int


@dataclass
class _GlobalUse:
    name: str
    span: Span
    argc: int | None  # None: mentioned as a value, not called
    scope: _Scope


_LITERAL_KINDS = {
    int: "an integer",
    float: "a float",
    Fraction: "a ratio",
    str: "a string",
    Char: "a char",
    bytes: "a byte string",
    Keyword: "a keyword",
    LispPath: "a path",
}


def _literal_kind(form: Any) -> str | None:
    """What a literal condition is, or ``None`` if ``form`` may well be a boolean."""
    if form is None:
        return "`()`"
    kind = _LITERAL_KINDS.get(type(form))
    if kind is not None:
        return kind
    if type(form) is tuple and len(form) == 2 and form[0] in (QUOTE, QUASIQUOTE) and type(form[1]) is not bool:
        return "a quoted value"
    if type(form) is tuple and form[0] is Name("lambda"):
        return "a function"
    return None


def _defined_name(form: Any) -> str | None:
    """The name a top-level ``define`` form binds, if it is one."""
    if head_name(form) != "define" or len(form) < 3:
        return None
    target = form[1]
    if type(target) is tuple and type(target[0]) is Name:
        return target[0].name
    return target.name if type(target) is Name else None


class Resolver:
    """Checks one expanded program against the names in scope."""

    def __init__(self, expansion: Expansion, host: HostNames | None, meter: CompileMeter | None = None) -> None:
        self.expansion = expansion
        self.meter = meter
        self.program: Program = expansion.program
        self.host = host  # None: compile-time code, resolved in an open world
        self.errors: list[LispError] = list(expansion.errors)
        self.result = Resolution()
        self.macros: set[str] = set(expansion.initial_macros)
        self.consts: set[str] = set(expansion.initial_consts)
        self.defined: dict[str, int] = {}  # global -> how many define forms bind it
        self.top_functions: dict[str, tuple[Params, Span | None]] = {}
        self.uses: list[_GlobalUse] = []
        self.functions: list[_Function] = []
        self.current: Span = Span(1, 1)
        self.shadowed = self.result.shadowed = frozenset(
            name for name in (_defined_name(form) for form in self.program.forms) if name in EXTENSION_NAMES
        )

    # ------------------------------------------------------------------ entry
    def resolve(self) -> Resolution:
        forms = self.program.forms
        for index, form in enumerate(forms):
            self.top_level(form, forms, index)
        self.check_globals()
        if self.errors:
            raise min(self.errors, key=lambda e: (e.span.line, e.span.column) if e.span else (0, 0))
        return self.result

    # ------------------------------------------------------------------ positions and errors
    def span(self, form: Any, parent: Any = None, index: int = 0) -> Span:
        if type(form) is tuple:
            found = self.program.spans.get(id(form))
            if found is not None:
                return found
        if parent is not None:
            found = self.program.element_span(parent, index)
            if found is not None:
                return found
        return self.current

    def fail(self, message: str, span: Span) -> None:
        self.errors.append(CompileError(message, span))

    def enter(self, form: Form) -> Span:
        """Make ``form`` the current position; returns the previous one."""
        saved = self.current
        found = self.program.spans.get(id(form))
        if found is not None:
            self.current = found
        return saved

    # ------------------------------------------------------------------ top level
    def top_level(self, form: Any, parent: Form, index: int) -> None:
        head = head_name(form)
        if head == "macro":
            self.macros.add(form[1][0].name)
        elif head == "const":
            self.consts.add(form[1].name)
        elif head == "define":
            saved = self.enter(form)
            self.define(form, _TOP, top=True)
            self.current = saved
        else:
            self.expr(form, _TOP, parent, index)

    # ------------------------------------------------------------------ expressions
    def expr(self, form: Any, scope: _Scope, parent: Any = None, index: int = 0) -> None:
        t = type(form)
        if t is Name:
            self.reference(form.name, self.span(form, parent, index), scope, None)
        elif t is tuple:
            meter = self.meter
            if meter is not None:
                meter.visit(len(form))
            saved = self.enter(form)
            try:
                self.compound(form, scope)
            finally:
                self.current = saved

    def exprs(self, form: Form, start: int, scope: _Scope) -> None:
        for i in range(start, len(form)):
            self.expr(form[i], scope, form, i)

    def compound(self, form: Form, scope: _Scope) -> None:
        head = form[0]
        if type(head) is Name:
            name = head.name
            bound, params = scope.lookup(name)
            if not bound:
                if name in SPECIAL_FORMS:
                    getattr(self, "form_" + name.replace("-", "_"))(form, scope)
                    return
                self.reference(name, self.span(head, form, 0), scope, len(form) - 1)
            elif params is not None:
                self.check_arity(name, params.arity, len(form) - 1, self.span(form), params.render(name))
            if name == "not" and not bound and len(form) == 2:
                self.condition(form, 1, scope)
                return
            self.exprs(form, 1, scope)
            return
        if type(head) is tuple and head[0] is Name("lambda") and len(head) == 3:
            self.expr(head, scope, form, 0)
            params = self.result.params.get(id(head))
            if params is not None:
                self.check_arity("lambda", params.arity, len(form) - 1, self.span(form), params.render("lambda"))
            self.exprs(form, 1, scope)
            return
        self.exprs(form, 0, scope)

    def reference(self, name: str, span: Span, scope: _Scope, argc: int | None) -> None:
        bound, _ = scope.lookup(name)
        if bound or name in self.consts:
            return
        if name in SPECIAL_FORMS or name in self.macros:
            self.fail(f"`{name}` is a special form, not a value", span)
            return
        spec = SYSTEM_FUNCTIONS.get(name) if name not in self.shadowed else None
        if spec is not None:
            if argc is not None:
                self.check_arity(name, (spec.min_args, spec.max_args), argc, span, spec.signature)
            return
        self.uses.append(_GlobalUse(name, span, argc, scope))

    def condition(self, form: Form, index: int, scope: _Scope) -> None:
        """``form[index]`` must produce a boolean: refuse a literal that cannot."""
        item = form[index]
        kind = _literal_kind(item)
        if kind is not None:
            span = self.span(item, form, index)
            if item is None:
                hint = "`()` is not false in Svit Lisp: test a list with (null xs), a svit value with (value-null? v)"
            elif type(item) in (int, float, Fraction):
                hint = "compare explicitly, e.g. (= n 0) or (> n 0)"
            elif type(item) is str:
                hint = "compare explicitly, e.g. (= s \"yes\"), or test emptiness with (= (len s) 0)"
            else:
                hint = "use true, false, or an expression that yields one, e.g. (= a b)"
            self.fail(f"a condition must be a boolean, found {kind}: {hint}", span)
        self.expr(item, scope, form, index)

    def check_arity(
        self, name: str, arity: Arity, argc: int, span: Span, usage: str | None, *, quoted: bool = True
    ) -> None:
        low, high = arity
        if argc < low or (high is not None and argc > high):
            shown = f"; call it as {usage}" if usage else ""
            label = f"`{name}`" if quoted else name  # host functions keep their run-time wording
            self.fail(f"{label} expects {expected_arguments(low, high)}, found {argc}{shown}", span)

    # ------------------------------------------------------------------ globals, once all defines are known
    def check_globals(self) -> None:
        host = self.host
        for use in self.uses:
            name = use.name
            count = self.defined.get(name)
            if count is not None:
                if use.argc is not None and count == 1 and name in self.top_functions:
                    params, _ = self.top_functions[name]
                    self.check_arity(name, params.arity, use.argc, use.span, params.render(name))
                continue
            if host is None:
                continue  # compile-time code: what it calls is known when it runs
            arity = host.functions.get(name)
            if arity is not None:
                if use.argc is not None:
                    self.check_arity(name, arity, use.argc, use.span, None, quoted=False)
                continue
            if name in host.values:
                continue
            self.fail(self.unbound_message(name, use.scope), use.span)

    def unbound_message(self, name: str, scope: _Scope) -> str:
        text = f"unbound name `{name}`"
        advice = alternative(name)
        if advice is not None:
            return f"{text}: {advice}"
        if name == "else":
            return f"{text}: `else` only heads the last clause of `cond` or `case`"
        later = self.expansion.macro_sites.get(name) or self.expansion.const_sites.get(name)
        if later is not None:
            what = "macro" if name in self.expansion.macro_sites else "const"
            return f"{text}: the {what} `{name}` is defined later (line {later.line}); define it before its first use"
        candidates = scope.all_names() | self.consts | self.macros | set(SYSTEM_FUNCTIONS) | set(SPECIAL_FORMS) | set(self.defined)
        if self.host is not None:
            candidates |= set(self.host.functions) | self.host.values
        close = nearest(name, candidates)
        if close:
            return f"{text}; did you mean {' or '.join(f'`{c}`' for c in close)}?"
        like = nearest(name, ALTERNATIVES, limit=1)
        if like:
            return f"{text} (like `{like[0]}` elsewhere): {alternative(like[0])}"
        hint = "bind it with let, define it with (define ...)"
        if self.host is not None and "runtime-builtins" in self.host.functions:
            hint += ", or see (runtime-builtins) for the functions a script can call"
        return f"{text}: {hint}"

    # ------------------------------------------------------------------ definitions
    def check_definable(self, name: str, span: Span) -> bool:
        problem = redefinition_problem(name)
        if problem is not None:
            self.fail(problem, span)
            return False
        return True

    def define(self, form: Form, scope: _Scope, *, top: bool) -> None:
        span = self.span(form)
        if len(form) == 3:
            target, value = form[1], form[2]
        elif len(form) == 4 and type(form[2]) is str:
            target, value = form[1], form[3]
        else:
            self.fail("`define` expects (define name [doc] value) with exactly one body expression", span)
            return
        body_index = len(form) - 1
        if type(target) is tuple:
            if type(target[0]) is not Name:
                self.fail("`define` expects a function name", span)
                return
            name = target[0].name
            if not self.check_definable(name, span):
                return
            self.defined[name] = self.defined.get(name, 0) + 1
            params = self.function(form, target[1:] or None, value, form, body_index, scope, name)
            if top and params is not None:
                self.top_functions[name] = (params, span)
            return
        if type(target) is not Name:
            self.fail("`define` expects a name", span)
            return
        name = target.name
        if not self.check_definable(name, span):
            return
        self.defined[name] = self.defined.get(name, 0) + 1
        self.expr(value, scope, form, body_index)
        if top and type(value) is tuple and value[0] is Name("lambda"):
            params = self.result.params.get(id(value))
            if params is not None:
                self.top_functions[name] = (params, span)

    def function(
        self, form: Form, params_form: Any, body: Any, parent: Form, body_index: int, outer: _Scope, name: str
    ) -> Params | None:
        """Resolve a function's parameters (defaults included) and body; record its params."""
        params = self.parse_params(params_form, self.span(form))
        if params is None:
            return None
        self.result.params[id(form)] = params
        scope = _Scope(outer, {p: None for p in params.required})
        for pname, default in params.optional + params.keys:
            if default is not None:
                self.expr(default, scope, None)
            scope.names[pname] = None
        if params.rest is not None:
            scope.names[params.rest] = None
        self.functions.append(_Function(params, name, id(form)))
        try:
            self.expr(body, scope, parent, body_index)
        finally:
            self.functions.pop()
        return params

    def parse_params(self, params: Any, span: Span) -> Params | None:
        """Split a parameter list into required, optional, keyword and rest names."""
        if params is None:
            return Params(())
        if type(params) is not tuple:
            self.fail("parameter list must be a list", span)
            return None
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
                problem = None
                if item is KW_OPTIONAL:
                    if mode == "key":
                        problem = "`:optional` and `:key` cannot be combined"
                    elif mode != "required":
                        problem = "`:optional` must come once, before `:key` and `:rest`"
                    mode = "optional"
                elif item is KW_KEY:
                    if mode == "optional":
                        problem = "`:optional` and `:key` cannot be combined"
                    elif mode in ("key", "rest"):
                        problem = "`:key` must come once, before any `:rest`"
                    mode = "key"
                elif item is KW_REST:
                    if mode == "key":
                        problem = "`:key` and `:rest` cannot be combined"
                    elif i + 2 != len(items) or type(items[i + 1]) is not Name:
                        problem = "`:rest` must be followed by exactly one name"
                    mode = "rest"
                else:
                    problem = f"unexpected keyword `:{item.name}` in parameter list"
                if problem is not None:
                    self.fail(problem, span)
                    return None
                i += 1
                continue
            if type(item) is Name:
                pname, default = item.name, None
            elif type(item) is tuple and len(item) == 2 and type(item[0]) is Name and mode in ("optional", "key"):
                pname, default = item[0].name, item[1]
            else:
                self.fail("invalid parameter", span)
                return None
            if pname in seen:
                self.fail(f"duplicate parameter `{pname}`", span)
                return None
            if pname in SPECIAL_FORMS or pname in ("true", "false"):
                self.fail(f"cannot bind standard name `{pname}`", span)
                return None
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
        return Params(tuple(required), tuple(optional), tuple(keys), rest)

    # ------------------------------------------------------------------ special forms
    def form_define(self, form: Form, scope: _Scope) -> None:
        # Below the top level, a define binds a global when it runs.
        self.define(form, scope, top=False)

    def form_lambda(self, form: Form, scope: _Scope) -> None:
        if len(form) != 3:
            self.fail("`lambda` expects (lambda (params) body) with exactly one body expression", self.span(form))
            return
        self.function(form, form[1], form[2], form, 2, scope, "lambda")

    def form_quote(self, form: Form, scope: _Scope) -> None:
        if len(form) != 2:
            self.fail("`quote` expects one argument", self.span(form))

    def form_quasiquote(self, form: Form, scope: _Scope) -> None:
        if len(form) != 2:
            self.fail("`quasiquote` expects one argument", self.span(form))
            return
        self.quasi(form[1], scope, 1, form, 1)

    def quasi(self, form: Any, scope: _Scope, level: int, parent: Any, index: int) -> None:
        if type(form) is not tuple:
            return
        if self.meter is not None:
            self.meter.visit(len(form))
        head = form[0]
        if head is UNQUOTE and len(form) == 2:
            # Consecutive commas apply together (`,,x`), as code generation reads them.
            commas, holder = 1, form
            while type(holder[1]) is tuple and len(holder[1]) == 2 and holder[1][0] is UNQUOTE:
                commas, holder = commas + 1, holder[1]
            if commas > level:
                self.fail("more commas than backquotes", self.span(form))
            elif commas == level:
                self.expr(holder[1], scope, holder, 1)
            else:
                self.quasi(holder[1], scope, level - commas, holder, 1)
            return
        if head is QUASIQUOTE and len(form) == 2:
            self.quasi(form[1], scope, level + 1, form, 1)
            return
        if head is QUOTE and len(form) == 2:
            self.quasi(form[1], scope, level, form, 1)
            return
        if head is UNQUOTE_SPLICING and len(form) == 2 and level > 1:
            self.quasi(form[1], scope, level - 1, form, 1)
            return
        for i, item in enumerate(form):
            if type(item) is tuple and item[0] is UNQUOTE_SPLICING and len(item) == 2 and level == 1:
                self.expr(item[1], scope, item, 1)
            else:
                self.quasi(item, scope, level, form, i)

    def form_comma(self, form: Form, scope: _Scope) -> None:
        self.fail("unquote (`,`) outside of a quasiquote", self.span(form))

    def form_comma_at(self, form: Form, scope: _Scope) -> None:
        self.fail("unquote-splicing (`,@`) outside of a quasiquote", self.span(form))

    def form_if(self, form: Form, scope: _Scope) -> None:
        if len(form) not in (3, 4):
            self.fail("`if` expects (if condition then [else])", self.span(form))
            return
        self.condition(form, 1, scope)
        self.exprs(form, 2, scope)

    def form_cond(self, form: Form, scope: _Scope) -> None:
        seen_else = False
        for clause in form[1:]:
            if seen_else:
                self.fail("`cond` clause after `else`", self.span(form))
                return
            if type(clause) is not tuple or len(clause) != 2:
                self.fail("`cond` clauses must be (predicate expression)", self.span(form))
                return
            if clause[0] is ELSE:
                seen_else = True
            else:
                self.condition(clause, 0, scope)
            self.expr(clause[1], scope, clause, 1)

    def form_case(self, form: Form, scope: _Scope) -> None:
        if len(form) < 2:
            self.fail("`case` expects (case expression clauses...)", self.span(form))
            return
        self.expr(form[1], scope, form, 1)
        seen_else = False
        for clause in form[2:]:
            if seen_else:
                self.fail("`case` clause after `else`", self.span(form))
                return
            if type(clause) is not tuple or len(clause) != 2:
                self.fail("`case` clauses must be ((literals...) expression)", self.span(form))
                return
            if clause[0] is ELSE:
                seen_else = True
            elif clause[0] is not None and type(clause[0]) is not tuple:
                self.fail("`case` clause literals must be a list", self.span(form))
                return
            self.expr(clause[1], scope, clause, 1)

    def form_and(self, form: Form, scope: _Scope) -> None:
        self.logical(form, scope, "and")

    def form_or(self, form: Form, scope: _Scope) -> None:
        self.logical(form, scope, "or")

    def logical(self, form: Form, scope: _Scope, name: str) -> None:
        if len(form) < 2:
            self.fail(f"`{name}` expects at least one argument", self.span(form))
            return
        for i in range(1, len(form) - 1):
            self.condition(form, i, scope)
        self.expr(form[-1], scope, form, len(form) - 1)

    def form_do(self, form: Form, scope: _Scope) -> None:
        if len(form) < 2:
            self.fail("`do` expects at least one expression", self.span(form))
            return
        self.exprs(form, 1, scope)

    def form_let(self, form: Form, scope: _Scope) -> None:
        span = self.span(form)
        if len(form) != 3:
            self.fail("`let` expects (let ((name value) ...) body) with exactly one body expression", span)
            return
        bindings = form[1]
        if bindings is not None and type(bindings) is not tuple:
            self.fail("`let` bindings must be a list", span)
            return
        inner = scope
        for binding in bindings or ():
            if type(binding) is not tuple or len(binding) != 2 or type(binding[0]) is not Name:
                self.fail("`let` binding must be (name value)", span)
                return
            lname = binding[0].name
            if lname in SPECIAL_FORMS or lname in ("true", "false"):
                self.fail(f"cannot bind standard name `{lname}`", span)
                return
            value = binding[1]
            self.expr(value, inner, binding, 1)
            params = None
            if type(value) is tuple and value[0] is Name("lambda"):
                params = self.result.params.get(id(value))
            inner = _Scope(inner, {lname: params})
        self.expr(form[2], inner, form, 2)

    def form_apply(self, form: Form, scope: _Scope) -> None:
        if len(form) < 3:
            self.fail("`apply` expects (apply function args... list)", self.span(form))
            return
        self.exprs(form, 1, scope)

    def form_call_self(self, form: Form, scope: _Scope) -> None:
        if not self.functions:
            self.fail("`call-self` is only allowed inside a function or lambda", self.span(form))
            return
        current = self.functions[-1]
        self.result.self_calling.add(current.form_id)
        self.check_arity(
            "call-self", current.params.arity, len(form) - 1, self.span(form), current.params.render("call-self")
        )
        self.exprs(form, 1, scope)

    def form_use(self, form: Form, scope: _Scope) -> None:
        self.fail("module not found: `use` is not available in Svit Lisp", self.span(form))

    def form_macro(self, form: Form, scope: _Scope) -> None:
        self.fail("`macro` is only allowed at the top level", self.span(form))

    def form_const(self, form: Form, scope: _Scope) -> None:
        self.fail("`const` is only allowed at the top level", self.span(form))

    def unsupported(self, form: Form, scope: _Scope) -> None:
        self.fail(f"`{form[0].name}` is not supported in Svit Lisp", self.span(form))

    form_struct = form_export = form_set_module_doc = unsupported


def resolve(expansion: Expansion, host: HostNames | None, meter: CompileMeter | None = None) -> Resolution:
    """Check ``expansion`` (``host=None``: compile-time code, open world); raise the earliest error.

    ``meter`` is charged for every form visited.
    """
    return Resolver(expansion, host, meter).resolve()
