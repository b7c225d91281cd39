"""Svit Lisp: a sandboxed Lisp (a restricted Ketos dialect) compiled to Python.

A host makes an :class:`Interpreter` under :class:`LispLimits` and a :class:`Budget`,
installs its functions and values, runs a script and calls its functions. Every
failure a script causes is a :class:`LispError`; a failure of a host function's own
code is a :class:`HostFunctionError` chained to the host's exception.
"""

from __future__ import annotations

from .budget import Budget
from .context import Context, LispLimits
from .errors import (
    BudgetExhausted,
    CompileError,
    EvalError,
    Frame,
    HostFunctionError,
    InternalError,
    LimitError,
    LispError,
    ReadError,
    Span,
)
from .interpreter import Interpreter, evaluate
from .values import Char, Foreign, Keyword, LispCallable, LispList, LispPath, LispValue, Name, type_name

__all__ = [
    "Budget",
    "BudgetExhausted",
    "Char",
    "CompileError",
    "Context",
    "EvalError",
    "Foreign",
    "Frame",
    "HostFunctionError",
    "Interpreter",
    "InternalError",
    "Keyword",
    "LimitError",
    "LispCallable",
    "LispError",
    "LispLimits",
    "LispList",
    "LispPath",
    "LispValue",
    "Name",
    "ReadError",
    "Span",
    "evaluate",
    "type_name",
]
