"""The vocabulary the compiler's passes share: special forms, parameter lists, arities.

The expander, the resolver and the code generator all walk the same forms; this module
holds what they must agree on, so a form's shape is defined once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeAlias

from .functions import SYSTEM_FUNCTIONS
from .values import Keyword, Name

__all__ = [
    "ELSE",
    "EXTENSION_NAMES",
    "KW_KEY",
    "KW_OPTIONAL",
    "KW_REST",
    "SPECIAL_FORMS",
    "STANDARD_NAMES",
    "Form",
    "Params",
    "expected_arguments",
    "head_name",
    "redefinition_problem",
]

SPECIAL_FORMS = frozenset(
    "define lambda let if cond case and or do apply quote quasiquote comma comma-at macro const use "
    "struct export set-module-doc call-self".split()
)
#: Svit's own system functions: a script's top-level ``define`` of one of these names wins.
EXTENSION_NAMES = frozenset(name for name, spec in SYSTEM_FUNCTIONS.items() if spec.extension)
STANDARD_NAMES = (frozenset(SYSTEM_FUNCTIONS) - EXTENSION_NAMES) | SPECIAL_FORMS | {"true", "false", "else"}

#: A source form (a list) as the passes see it. Its parts' types follow from its shape
#: (``(define name value)``, ``(let ((x 1)) ...)``), which the resolver checks once and a
#: static type cannot express, so the parts are not narrowed here.
Form: TypeAlias = "tuple[Any, ...]"

ELSE = Name("else")
KW_OPTIONAL = Keyword("optional")
KW_KEY = Keyword("key")
KW_REST = Keyword("rest")


@dataclass(frozen=True)
class Params:
    """A checked parameter list: required names, (name, default) optionals and keys, rest."""

    required: tuple[str, ...]
    optional: tuple[tuple[str, Any], ...] = ()
    keys: tuple[tuple[str, Any], ...] = ()
    rest: str | None = None

    @property
    def arity(self) -> tuple[int, int | None]:
        """(fewest, most) arguments a call may pass; ``None``: no upper bound."""
        low = len(self.required)
        if self.keys or self.rest is not None:
            return low, None
        return low, low + len(self.optional)

    def render(self, name: str) -> str:
        """The call shape, e.g. ``(f a b :optional c)``."""
        parts = [name, *self.required]
        if self.optional:
            parts += [":optional", *(n for n, _ in self.optional)]
        if self.keys:
            parts += [":key", *(n for n, _ in self.keys)]
        if self.rest is not None:
            parts += [":rest", self.rest]
        return "(" + " ".join(parts) + ")"


def redefinition_problem(name: str) -> str | None:
    """Why ``name`` cannot be defined (by define, macro or const), if it cannot."""
    if name in STANDARD_NAMES:
        return f"cannot redefine standard name `{name}`"
    return None


def expected_arguments(min_args: int, max_args: int | None) -> str:
    """``2 arguments``, ``at least 1 argument``, ``1 to 3 arguments``."""
    if max_args is None:
        return f"at least {min_args} argument{'s' if min_args != 1 else ''}"
    if min_args == max_args:
        return f"{min_args} argument{'s' if min_args != 1 else ''}"
    return f"{min_args} to {max_args} arguments"


def head_name(form: Any) -> str | None:
    """The name at the head of a list form, if it has one."""
    if type(form) is tuple and type(form[0]) is Name:
        return form[0].name
    return None
