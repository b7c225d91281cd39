"""An integer fast path for self tail loops: no type or overflow check per iteration.

A self tail loop such as ``(define (loop n acc) (if (= n 0) acc (loop (- n 1) (+ acc 1))))``
runs, in its generic form, a type check and a two-sided overflow check for every
operation of every iteration, and charges its fuel through the module global ``_s``.
This module generates a second, specialised loop tried first on every entry:

* its **guard** checks once that every parameter it reads as an integer is an ``int``
  and that the *induction* parameters, those stepped by a constant ``c`` per iteration
  (``(- n 1)``, ``(+ acc 1)``), have a magnitude below
  ``2**max_integer_bits - K * max_steps`` (``K`` the largest ``|c|``). A loop runs at most
  ``max_steps`` iterations before its fuel runs out, so no induction step can leave the
  integer range: those overflow tests are proved unnecessary, not dropped;
* its body is a decision tree of comparisons between integer parameters and integer
  literals (``if``, ``cond``, ``and``, ``or``, ``not``, ``=``, ``<``, ``>``, ``<=``, ``>=``),
  whose leaves either rebind the parameters (a self tail call whose arguments are
  parameters, literals, ``parameter ± literal``, or one ``+ - *`` of two integer
  parameters or literals, whose result is tested against the integer range) or return
  a local or a constant;
* it charges exactly the fuel the generic loop charges per iteration, from a local
  counter written back to ``_s`` before anything else can see it (a refill, a return);
* any other leaf *deoptimises*: it gives the iteration's fuel back and leaves for the
  generic loop, which runs the same iteration again from its start. Everything the
  specialised loop did in that iteration was a comparison of integers (no effect, no
  error, no fuel), so the iteration runs once, as the generic loop alone would run it.

The step count, the values, the errors and their positions are those of the generic loop.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .functions import SYSTEM_FUNCTIONS
from .syntax import ELSE
from .values import Name

if TYPE_CHECKING:
    from .compiler import Compiler, FunctionContext, Scope

__all__ = ["fast_loop"]

_COMPARE = {"=": "==", "<": "<", ">": ">", "<=": "<=", ">=": ">="}


class _Unsupported(Exception):
    """A form the fast path does not handle: its iteration goes to the generic loop."""


class _FastLoop:
    """One attempt at the specialised loop of one function (see :func:`fast_loop`)."""

    def __init__(
        self, compiler: Compiler, scope: Scope, ctx: FunctionContext, cost: int, ints: set[str], bases: set[str]
    ) -> None:
        self.compiler = compiler
        self.scope = scope
        self.ctx = ctx
        self.cost = cost
        self.params = ctx.params
        #: Python names of the parameters the guard checks to be ints, and of those among
        #: them it also bounds (induction bases); both grown until no leaf needs more.
        self.ints = ints
        self.bases = bases
        self.needs: set[str] = set()  # parameters this attempt read as ints
        self.needs_bound: set[str] = set()  # parameters this attempt stepped by constants
        self.step = 0  # the largest |c| of a `parameter ± c` argument
        self.fast_leaves = 0
        self.temps = 0

    # ------------------------------------------------------------------ names
    def system(self, name: str) -> bool:
        """Whether ``name`` in head position is the system function itself."""
        c = self.compiler
        return (
            self.scope.lookup(name) is None and name in SYSTEM_FUNCTIONS
            and name not in c.consts and name not in c.shadowed
        )

    def special(self, form: Any, name: str) -> bool:
        return (
            type(form) is tuple and len(form) > 0 and type(form[0]) is Name
            and form[0].name == name and self.scope.lookup(name) is None
        )

    def param(self, form: Any) -> str | None:
        """The Python name of ``form`` when it names one of the loop's parameters."""
        if type(form) is not Name:
            return None
        py = self.scope.lookup(form.name)
        return py if py in self.params else None

    def int_literal(self, form: Any) -> int | None:
        if type(form) is int:
            return form
        if type(form) is Name and self.scope.lookup(form.name) is None:
            value = self.compiler.consts.get(form.name, None)
            if type(value) is int:
                return value
        return None

    def int_atom(self, form: Any) -> str:
        """An integer parameter or an integer literal, as Python."""
        py = self.param(form)
        if py is not None:
            self.needs.add(py)
            return py
        literal = self.int_literal(form)
        if literal is None:
            raise _Unsupported
        return repr(literal)

    # ------------------------------------------------------------------ conditions
    def condition(self, form: Any) -> str:
        if type(form) is not tuple or len(form) == 0 or type(form[0]) is not Name:
            raise _Unsupported
        head = form[0].name
        if head in _COMPARE and len(form) == 3 and self.system(head):
            return f"{self.int_atom(form[1])} {_COMPARE[head]} {self.int_atom(form[2])}"
        if head == "not" and len(form) == 2 and self.system(head):
            return f"not ({self.condition(form[1])})"
        if head in ("and", "or") and len(form) >= 2 and self.special(form, head):
            return f" {head} ".join(f"({self.condition(part)})" for part in form[1:])
        raise _Unsupported

    # ------------------------------------------------------------------ leaves
    def deoptimise(self, indent: str) -> list[str]:
        return [f"{indent}_s = _f + {self.cost}", f"{indent}break"]

    def give_back(self, indent: str, value: str) -> list[str]:
        return [f"{indent}_s = _f", f"{indent}return {value}"]

    def tail(self, form: Any, indent: str) -> list[str]:
        """Statements for ``form`` in tail position; what is unsupported deoptimises."""
        self.compiler.meter.visit()
        try:
            return self.tail_statements(form, indent)
        except _Unsupported:
            return self.deoptimise(indent)

    def tail_statements(self, form: Any, indent: str) -> list[str]:
        if type(form) is not tuple:
            return self.give_back(indent, self.returned(form))
        if self.special(form, "if"):
            lines = [f"{indent}if {self.condition(form[1])}:"] + self.tail(form[2], indent + "    ")
            if len(form) == 4:
                return lines + self.tail(form[3], indent)
            return lines + self.give_back(indent, "None")
        if self.special(form, "cond"):
            lines = []
            for pred, body in form[1:]:
                if pred is ELSE:
                    return lines + self.tail(body, indent)
                try:
                    test = self.condition(pred)
                except _Unsupported:
                    return lines + self.deoptimise(indent)
                lines += [f"{indent}if {test}:"] + self.tail(body, indent + "    ")
            return lines + self.give_back(indent, "None")
        return self.rebind(form, indent)

    def returned(self, form: Any) -> str:
        """A local or a constant returned from the loop."""
        if type(form) is Name:
            py = self.scope.lookup(form.name)
            if py is not None:
                return py
            if form.name in self.compiler.consts:
                return self.compiler.constant(self.compiler.consts[form.name])
            raise _Unsupported  # a global: its load may fail, and reports a position
        return self.compiler.constant(form)

    def rebind(self, form: Any, indent: str) -> list[str]:
        """A self tail call whose arguments keep every guarded parameter a bounded integer."""
        ctx = self.ctx
        head = form[0] if len(form) > 0 else None
        if type(head) is not Name or self.scope.lookup(head.name) is not None:
            raise _Unsupported
        if not (
            (head.name == "call-self" and ctx.loopable or ctx.self_global is not None and head.name == ctx.self_global)
            and len(form) - 1 == len(self.params)
        ):
            raise _Unsupported
        targets: list[str] = []
        values: list[str] = []
        checked: list[tuple[str, str]] = []
        for target, arg in zip(self.params, form[1:]):
            value = self.argument(arg, target, checked)
            if value != target:
                targets.append(target)
                values.append(value)
        self.fast_leaves += 1
        lines = []
        for temp, code in checked:
            # Out of range: the generic loop runs the iteration and reports the overflow.
            lines += [f"{indent}{temp} = {code}", f"{indent}if not {self.compiler.within_bound(temp)}:"]
            lines += self.deoptimise(indent + "    ")
        if targets:
            lines.append(f"{indent}{', '.join(targets)} = {', '.join(values)}")
        return lines + [f"{indent}continue"]

    def argument(self, arg: Any, target: str, checked: list[tuple[str, str]]) -> str:
        """The new value of ``target``: it must keep a bound if ``target`` is an induction
        base, and be an int if the loop reads ``target`` as one."""
        bounded, typed = target in self.bases, target in self.ints
        py = self.param(arg)
        if py is not None:
            if bounded:
                self.needs_bound.add(py)  # a bounded parameter receives only bounded values
            elif typed:
                self.needs.add(py)
            return py
        literal = self.int_literal(arg)
        if literal is not None and not bounded:
            return repr(literal)
        if type(arg) is tuple and len(arg) == 3 and type(arg[0]) is Name and arg[0].name in ("+", "-", "*") and self.system(arg[0].name):
            op, left, right = arg
            base, step = self.param(left), self.int_literal(right)
            if base is None and op.name == "+":
                base, step = self.param(right), self.int_literal(left)
            if base is not None and step is not None and op.name != "*":
                self.needs_bound.add(base)
                self.step = max(self.step, abs(step))
                return f"{base} {op.name} {step}" if step >= 0 else f"{base} {op.name} ({step})"
            if bounded:
                raise _Unsupported  # an induction base must keep its bound
            self.temps += 1
            temp = f"_n{self.temps}"
            checked.append((temp, f"{self.int_atom(left)} {op.name} {self.int_atom(right)}"))
            return temp
        if bounded or typed or type(arg) is tuple:
            raise _Unsupported  # an integer parameter must stay an integer
        return self.returned(arg)

    # ------------------------------------------------------------------ the loop
    def guard(self) -> str:
        checks = [f"_type({py}) is _int" for py in self.params if py in self.ints]
        first = True
        for py in self.params:
            if py in self.bases:
                bound = f"(_hb := {self.compiler.int_bound} - {self.step} * _fuel_cap)"
                checks.append(f"{bound if first else '_hb'} > {py} > -_hb")
                first = False
        return " and ".join(checks)


def fast_loop(compiler: Compiler, body: Any, scope: Scope, ctx: FunctionContext, cost: int, indent: str) -> list[str]:
    """The specialised loop placed first inside a self tail loop, or nothing when no fast path exists.

    ``cost`` is the fuel of one iteration; ``indent`` that of the generic loop's body.
    The lines fall through to the generic iteration when a leaf deoptimises.
    """
    ints: set[str] = set()
    bases: set[str] = set()
    for _ in range(6):
        attempt = _FastLoop(compiler, scope, ctx, cost, set(ints), set(bases))
        tree = attempt.tail(body, indent + "        ")
        if attempt.needs <= ints and attempt.needs_bound <= bases:
            break
        bases |= attempt.needs_bound
        ints |= attempt.needs | bases
    else:
        return []
    if not attempt.fast_leaves or not ints:
        return []
    return [
        f"{indent}if {attempt.guard()}:",
        f"{indent}    _f = _s",
        f"{indent}    while True:",
        f"{indent}        _f -= {cost}",
        f"{indent}        if _f < 0:",
        f"{indent}            _s = _f",
        f"{indent}            _tick()",
        f"{indent}            _f = _s",
        *tree,
    ]
