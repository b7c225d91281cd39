"""Macro expansion: the first pass of compilation.

Top-level forms are taken in order, as Ketos runs them: a ``macro`` form defines a
macro for the forms after it, a ``const`` form is evaluated and binds its name for the
forms after it, and a top-level ``(define (f ...) ...)`` becomes callable by later
macro bodies and consts (it is defined in the compile-time namespace before the next
compile-time evaluation). Every macro call in an evaluated position is replaced by its
expansion; quoted data, parameter lists and binding names are left alone.

The expander checks only the forms it owns (``macro``, ``const``); everything else,
however malformed, passes through untouched for the resolver to report. A failure
inside a macro or const is recorded with its position and the pass goes on, so the
earliest error of the whole program can be reported.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from .budget import CompileMeter
from .errors import CompileError, EvalError, LimitError, LispError, Span
from .reader import QUASIQUOTE, UNQUOTE, UNQUOTE_SPLICING, Program
from .syntax import SPECIAL_FORMS, Form, head_name, redefinition_problem
from .values import Name

__all__ = ["MAX_EXPANSIONS", "Evaluate", "Expander", "Expansion", "nesting_depth"]

MAX_EXPANSIONS = 256

#: ``evaluate(kind, payload, expander)``: ``"macro"`` (a lambda form -> function),
#: ``"const"`` (a form -> value), ``"expand"`` ((function, args) -> form) and
#: ``"define"`` (a top-level function define, installed for later compile-time code).
Evaluate = Callable[[str, Any, "Expander"], Any]

_LEAVE_ALONE = frozenset({"quote", "comma", "comma-at", "macro", "const", "use", "struct", "export", "set-module-doc"})


@dataclass
class Expansion:
    """The expanded program and what the later passes need to know about it."""

    program: Program
    #: id of each top-level ``const`` form -> the value it bound.
    const_values: dict[int, Any] = field(default_factory=dict)
    #: Where each macro and const of the program is defined (for "defined later" hints).
    macro_sites: dict[str, Span | None] = field(default_factory=dict)
    const_sites: dict[str, Span | None] = field(default_factory=dict)
    #: Macros and consts already known when the program starts (compile-time code).
    initial_macros: frozenset[str] = frozenset()
    initial_consts: dict[str, Any] = field(default_factory=dict)
    errors: list[LispError] = field(default_factory=list)


class Expander:
    """Expands one program; nested compile-time programs share their parent's state."""

    def __init__(self, program: Program, evaluate: Evaluate, parent: Expander | None = None) -> None:
        self.program = program
        self.evaluate = evaluate
        self.root: Expander = parent.root if parent is not None else self
        self.macros: dict[str, Any] = parent.macros if parent is not None else {}
        self.consts: dict[str, Any] = parent.consts if parent is not None else {}
        self.spans = program.spans
        self.positions = program.positions
        self._own_tables = False
        self.current: Span | None = None
        self.result = Expansion(program, initial_macros=frozenset(self.macros), initial_consts=dict(self.consts))
        if parent is None:
            #: The budget all compile-time work of one compilation shares (set by the host).
            self.compile_budget: Any = None
            #: Charges the forms every pass visits to ``compile_budget`` (set by the host).
            self.meter: CompileMeter | None = None
            #: The deepest nesting a macro expansion may have (``None``: unchecked).
            self.max_depth: int | None = None
            #: The compile-time namespace (created on first use by ``evaluate``).
            self.namespace: Any = None
            self.pending_defines: list[Form] = []

    # ------------------------------------------------------------------ positions
    def span_of(self, form: Any) -> Span | None:
        return self.spans.get(id(form)) if type(form) is tuple else None

    def _tables(self) -> None:
        """Copy the reader's tables before adding to them (the reader caches its result)."""
        if not self._own_tables:
            self.spans = dict(self.spans)
            self.positions = dict(self.positions)
            self._own_tables = True

    def rebuild(self, original: Form, items: list[Any]) -> Form:
        """``original`` with new elements, keeping its position (or itself if unchanged)."""
        if all(a is b for a, b in zip(items, original)):
            return original
        new = tuple(items)
        self._tables()
        span = self.spans.get(id(original))
        if span is not None:
            self.spans[id(new)] = span
        where = self.positions.get(id(original))
        if where is not None:
            self.positions[id(new)] = where
        return new

    def place(self, form: Any, span: Span | None) -> Any:
        """Give a macro's output the position of the call it replaces."""
        if type(form) is tuple and span is not None and id(form) not in self.spans:
            self._tables()
            self.spans[id(form)] = span
        return form

    def record(self, error: LispError, span: Span | None) -> None:
        if error.span is None:
            error.span = span or self.current or Span(1, 1)
        self.result.errors.append(error)

    # ------------------------------------------------------------------ top level
    def expand_program(self) -> Expansion:
        forms: list[Any] = []
        wheres: list[tuple[int, int]] = []
        top = self.program.positions.get(id(self.program.forms), ())
        for index, form in enumerate(self.program.forms):
            span = self.span_of(form)
            if span is not None:
                self.current = span
            try:
                form = self.expand_head(form)
                head = head_name(form)
                if head == "macro":
                    self.define_macro(form)
                elif head == "const":
                    self.define_const(form)
                elif type(form) is tuple:
                    form = self.inside(form)
                    if head == "define" and len(form) >= 3 and type(form[1]) is tuple:
                        self.root.pending_defines.append(form)
            except (CompileError, EvalError) as error:
                self.record(error, span)
                continue
            forms.append(form)
            wheres.append(top[index] if index < len(top) else (1, 1))
        output = tuple(forms)
        self._tables()
        self.positions[id(output)] = tuple(wheres)
        self.result.program = Program(output, self.spans, self.program.depth, self.program.integer_bits, self.positions)
        return self.result

    def check_definable(self, name: str, form: Any) -> None:
        problem = redefinition_problem(name)
        if problem is not None:
            raise CompileError(problem, self.span_of(form))

    def define_macro(self, form: Form) -> None:
        if len(form) != 3 or type(form[1]) is not tuple or type(form[1][0]) is not Name:
            raise CompileError("`macro` expects (macro (name params) body)", self.span_of(form))
        name = form[1][0].name
        self.check_definable(name, form)
        lam = self.place((Name("lambda"), form[1][1:] or None, form[2]), self.span_of(form))
        self.result.macro_sites.setdefault(name, self.span_of(form))
        self.macros[name] = self.evaluate("macro", lam, self)

    def define_const(self, form: Form) -> None:
        if len(form) != 3 or type(form[1]) is not Name:
            raise CompileError("`const` expects (const name value)", self.span_of(form))
        name = form[1].name
        self.check_definable(name, form)
        self.result.const_sites.setdefault(name, self.span_of(form))
        value = self.evaluate("const", form[2], self)
        self.consts[name] = value
        self.result.const_values[id(form)] = value

    def flush_defines(self) -> None:
        """Define the top-level functions seen so far in the compile-time namespace."""
        root = self.root
        pending, root.pending_defines = root.pending_defines, []
        for form in pending:
            try:
                self.evaluate("define", form, self)
            except (CompileError, EvalError):
                pass  # the resolver reports what is wrong with it; macros just cannot call it

    # ------------------------------------------------------------------ expressions
    def expand_head(self, form: Any) -> Any:
        """Expand macro calls at the head of ``form`` until none is left."""
        span = self.span_of(form)
        for _ in range(MAX_EXPANSIONS):
            if type(form) is tuple and type(form[0]) is Name and form[0].name in self.macros:
                self.flush_defines()
                macro = self.macros[form[0].name]
                form = self.evaluate("expand", (macro, form[1:]), self)
                root = self.root
                if root.max_depth is not None and nesting_depth(form, root.max_depth, root.meter) > root.max_depth:
                    raise LimitError("syntax depth", span)
                form = self.place(form, span)
            else:
                return form
        raise CompileError("macro expansion does not terminate", span)

    def expr(self, form: Any) -> Any:
        """``form`` in an evaluated position, fully expanded (``()`` if its expansion failed)."""
        if type(form) is not tuple:
            return form
        meter = self.root.meter
        if meter is not None:
            meter.visit(len(form))
        span = self.span_of(form)
        saved = self.current
        if span is not None:
            self.current = span
        try:
            expanded = self.expand_head(form)
        except (CompileError, EvalError) as error:
            self.record(error, span)
            return None
        finally:
            self.current = saved
        if type(expanded) is not tuple:
            return expanded
        if span is not None:
            self.current = span
        try:
            return self.inside(expanded)
        finally:
            self.current = saved

    def inside(self, form: Form) -> Form:
        """Expand the evaluated parts of a form whose head is not a macro."""
        head = head_name(form)
        if head not in SPECIAL_FORMS:
            return self.rebuild(form, [self.expr(x) for x in form])
        if head in _LEAVE_ALONE:
            return form
        if head == "quasiquote":
            return self.rebuild(form, [form[0], *(self.quasi(x, 1) for x in form[1:])])
        if head == "cond":
            return self.rebuild(form, [form[0], *(self.each(c) if type(c) is tuple else c for c in form[1:])])
        if head == "case":
            items = [form[0], *(self.expr(x) for x in form[1:2])]
            for clause in form[2:]:
                if type(clause) is tuple and len(clause) >= 2:
                    clause = self.rebuild(clause, [clause[0], *(self.expr(x) for x in clause[1:])])
                items.append(clause)
            return self.rebuild(form, items)
        if head == "let":
            items = [form[0]]
            if len(form) >= 2:
                bindings = form[1]
                if type(bindings) is tuple:
                    bindings = self.rebuild(
                        bindings, [self.rebuild(b, [b[0], *(self.expr(x) for x in b[1:])]) if type(b) is tuple else b for b in bindings]
                    )
                items.append(bindings)
            items += [self.expr(x) for x in form[2:]]
            return self.rebuild(form, items)
        if head == "lambda":
            items = [form[0], *(self.params(x) for x in form[1:2]), *(self.expr(x) for x in form[2:])]
            return self.rebuild(form, items)
        if head == "define":
            items = [form[0]]
            if len(form) >= 2:
                target = form[1]
                if type(target) is tuple:
                    target = self.rebuild(target, [target[0], *self.params(target[1:])]) if len(target) > 1 else target
                items.append(target)
            items += [self.expr(x) for x in form[2:]]
            return self.rebuild(form, items)
        # if, do, and, or, apply, call-self: every argument is an expression.
        return self.rebuild(form, [form[0], *(self.expr(x) for x in form[1:])])

    def each(self, items: Form) -> Form:
        return self.rebuild(items, [self.expr(x) for x in items])

    def params(self, params: Any) -> Any:
        """A parameter list with its default expressions expanded."""
        if type(params) is not tuple:
            return params
        return self.rebuild(
            params,
            [self.rebuild(p, [p[0], self.expr(p[1])]) if type(p) is tuple and len(p) == 2 else p for p in params],
        )

    def quasi(self, form: Any, level: int) -> Any:
        if type(form) is not tuple:
            return form
        meter = self.root.meter
        if meter is not None:
            meter.visit(len(form))
        head = form[0]
        if head is UNQUOTE and len(form) == 2:
            return self.rebuild(form, [head, self.expr(form[1]) if level == 1 else self.quasi(form[1], level - 1)])
        if head is QUASIQUOTE and len(form) == 2:
            return self.rebuild(form, [head, self.quasi(form[1], level + 1)])
        items = []
        for item in form:
            if type(item) is tuple and item[0] is UNQUOTE_SPLICING and len(item) == 2 and level == 1:
                items.append(self.rebuild(item, [item[0], self.expr(item[1])]))
            else:
                items.append(self.quasi(item, level))
        return self.rebuild(form, items)


def nesting_depth(form: Any, limit: int, meter: CompileMeter | None = None) -> int:
    """How deeply ``form`` nests lists, counted as the reader counts a source's depth.

    Each distinct list is measured once (a form may share its parts), one unit per
    element charged to ``meter``; the walk stops, returning more than ``limit``, as
    soon as it is inside more than ``limit`` lists.
    """
    if type(form) is not tuple:
        return 0
    measured: dict[int, int] = {}
    path: list[tuple[Form, int]] = [(form, 0)]
    while path:
        if len(path) > limit:
            return len(path)
        node, start = path[-1]
        for index in range(start, len(node)):
            child = node[index]
            if type(child) is tuple and id(child) not in measured:
                path[-1] = (node, index + 1)
                path.append((child, 0))
                break
        else:
            path.pop()
            if meter is not None:
                meter.visit(len(node))
            deepest = 0
            for child in node:
                if type(child) is tuple and measured[id(child)] > deepest:
                    deepest = measured[id(child)]
            measured[id(node)] = deepest + 1
    return measured[id(form)]
