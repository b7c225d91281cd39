"""How Svit Lisp values are represented in Python.

The mapping is chosen so the common values cost nothing to represent:

============  ======================================================
Lisp type     Python representation
============  ======================================================
unit ``()``   ``None`` (also the empty list)
bool          ``bool``
integer       ``int`` (bounded by ``max_integer_bits`` at run time)
float         ``float``
ratio         ``fractions.Fraction`` (a whole ratio stays a ratio)
string        ``str``
char          :class:`Char`
bytes         ``bytes``
path          :class:`LispPath`
name          :class:`Name` (interned, weakly)
keyword       :class:`Keyword` (interned, weakly)
list          non-empty ``tuple``
quoted        :class:`Quoted` (``'x`` `` `x `` ``,x`` ``,@x`` as values; type ``object``)
function      a Python function marked by :func:`mark_function`
foreign       a :class:`Foreign` subclass (host data, opaque to Lisp)
============  ======================================================

Every callable takes the caller's call depth first: ``f(depth, *args)``.
"""

from __future__ import annotations

import weakref
from fractions import Fraction
from types import FunctionType
from typing import Any, Callable, Protocol, Self, TypeAlias, TypeVar, Union, cast

from .names import lisp_name_of

__all__ = [
    "NUMERIC_TYPES",
    "Char",
    "Foreign",
    "Keyword",
    "LispCallable",
    "LispList",
    "LispPath",
    "LispValue",
    "Name",
    "Quoted",
    "Unit",
    "function_label",
    "is_function",
    "is_number",
    "make_quoted",
    "mark_function",
    "type_name",
]

Unit = None


class Char:
    """A single Unicode scalar value."""

    __slots__ = ("char",)

    def __init__(self, char: str) -> None:
        self.char = char

    def __eq__(self, other: object) -> bool:
        return type(other) is Char and other.char == self.char

    def __hash__(self) -> int:
        return hash(("char", self.char))

    def __repr__(self) -> str:
        return f"Char({self.char!r})"


class LispPath:
    """A filesystem-path literal (``#p"..."``); inert in Svit, it opens nothing."""

    __slots__ = ("path",)

    def __init__(self, path: str) -> None:
        self.path = path

    def __eq__(self, other: object) -> bool:
        return type(other) is LispPath and other.path == self.path

    def __hash__(self) -> int:
        return hash(("path", self.path))

    def __repr__(self) -> str:
        return f"LispPath({self.path!r})"


#: A weak entry of an interning table: the value, keyed by its text.
_Ref: TypeAlias = "weakref.KeyedRef[str, _Interned]"


class _Interned:
    """A value named by text and interned per class, so identity is equality.

    The table holds its values weakly: a name lives while some value, form or compiled
    program holds it, and two names with the same text alive at once are one object. A
    script cannot make the host keep every name it ever read.
    """

    __slots__ = ("name", "__weakref__")
    name: str
    _table: dict[str, _Ref]
    _forget: Callable[[_Ref], None]

    def __new__(cls, name: str) -> Self:
        table = cls._table
        ref = table.get(name)
        found = ref() if ref is not None else None
        if found is None:
            made: _Interned = object.__new__(cls)
            made.name = name
            fresh = weakref.KeyedRef(made, cls._forget, name)
            ref = table.setdefault(name, fresh)  # atomic: one object per name across threads
            if ref is not fresh:
                other = ref()
                if other is not None:
                    return cast(Self, other)  # the table of ``cls`` holds only ``cls``
                table[name] = fresh  # the old entry's name died; its callback leaves this one
            found = made
        return cast(Self, found)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"

    def __reduce__(self) -> tuple[type[_Interned], tuple[str]]:  # pragma: no cover - keeps interning across copies
        return (type(self), (self.name,))


def _forgetting(table: dict[str, _Ref]) -> Callable[[_Ref], None]:
    """The callback that drops a dead name's entry (unless a new one took its place)."""

    def forget(ref: _Ref) -> None:
        if table.get(ref.key) is ref:
            del table[ref.key]

    return forget


class Name(_Interned):
    """A symbol."""

    __slots__ = ()
    _table: dict[str, _Ref] = {}
    _forget = staticmethod(_forgetting(_table))


class Keyword(_Interned):
    """A keyword such as ``:optional``."""

    __slots__ = ()
    _table: dict[str, _Ref] = {}
    _forget = staticmethod(_forgetting(_table))


class Quoted:
    """A quote form held as a value, as Ketos keeps it: ``''a`` evaluates to ``'a``.

    ``kind`` is ``quote``, ``quasiquote``, ``comma`` or ``comma-at``; ``depth`` how many
    times it applies (``''a`` is one quote of depth 2 around ``a``).
    """

    __slots__ = ("kind", "value", "depth")

    PREFIXES = {"quote": "'", "quasiquote": "`", "comma": ",", "comma-at": ",@"}

    def __init__(self, kind: str, value: Any, depth: int = 1) -> None:
        self.kind = kind
        self.value = value
        self.depth = depth

    def prefix(self) -> str:
        return self.PREFIXES[self.kind] * self.depth

    def __repr__(self) -> str:
        return f"Quoted({self.kind!r}, {self.value!r}, {self.depth})"


def make_quoted(kind: str, value: Any) -> Quoted:
    """``kind`` applied once more to ``value``; repeated quotes of one kind merge."""
    if type(value) is Quoted and (value.kind == kind or (kind == "comma" and value.kind == "comma-at")):
        return Quoted(value.kind, value.value, value.depth + 1)
    return Quoted(kind, value)


class Foreign:
    """Host data inside Lisp. Lisp functions treat it as opaque.

    Subclasses name their type (``type_name``), estimate their size for the guest
    memory limit, and render themselves for ``format``.
    """

    __slots__ = ()

    def type_name(self) -> str:
        return "foreign"

    def memory_size(self) -> int:
        return 1

    def display(self) -> str:
        return f"#<{self.type_name()}>"

    def usage_hint(self) -> str | None:
        """How to use this value where Lisp data was expected (shown in type errors)."""
        return None

    # The collection protocol: how the collection functions (``map``, ``count``,
    # ``entries``...) see inside host containers without knowing what they are.

    def container_kind(self) -> str | None:
        """``"array"`` or ``"map"`` for a host container, ``None`` for anything else."""
        return None

    def entry_count(self) -> int | None:
        """Entries of a host array or map (without converting them), else ``None``."""
        return None

    def sequence_items(self) -> list[Any] | None:
        """The elements of a host array as Lisp values (charged by the host), else ``None``."""
        return None

    def mapping_items(self) -> list[tuple[str, Any]] | None:
        """(key, Lisp value) pairs of a host map in key order (charged), else ``None``."""
        return None


class LispCallable(Protocol):
    """A Lisp callable as Python sees it: the caller's call depth first, then Lisp values."""

    def __call__(self, depth: int, /, *args: Any) -> Any: ...


_Marked = TypeVar("_Marked", bound=Callable[..., Any])


def mark_function(fn: _Marked, name: str, *, kind: str = "function") -> _Marked:
    """Tag a Python function as a Lisp callable (``kind`` is ``function`` or ``lambda``)."""
    setattr(fn, "lisp_name", name)  # noqa: B010 - a function attribute no type declares
    setattr(fn, "lisp_kind", kind)  # noqa: B010
    return fn


def is_function(value: Any) -> bool:
    return type(value) is FunctionType


def function_label(value: FunctionType) -> tuple[str, str]:
    """(kind, name) of a callable: ``("function", "+")`` or ``("lambda", "fib")``."""
    kind = getattr(value, "lisp_kind", "lambda")
    name = getattr(value, "lisp_name", None)
    if name is None:
        name = lisp_name_of(value.__name__)
    return kind, name


_TYPE_NAMES: dict[type, str] = {
    type(None): "unit",
    bool: "bool",
    int: "integer",
    float: "float",
    Fraction: "ratio",
    str: "string",
    Char: "char",
    bytes: "bytes",
    LispPath: "path",
    Name: "name",
    Keyword: "keyword",
    tuple: "list",
    Quoted: "object",
}


def type_name(value: Any) -> str:
    """The Lisp type name of a value (``integer``, ``list``, ``svit-value``...)."""
    found = _TYPE_NAMES.get(type(value))
    if found is not None:
        return found
    if isinstance(value, Foreign):
        return value.type_name()
    if type(value) is FunctionType:
        # Guest-defined functions are unmarked (marking each closure would cost a write).
        return getattr(value, "lisp_kind", "lambda")
    return "object"


#: Any Lisp value, as the table at the top of this module represents it.
LispValue: TypeAlias = Union[
    None, bool, int, float, Fraction, str, Char, bytes, LispPath, Name, Keyword, "tuple[LispValue, ...]", Quoted, Foreign, FunctionType
]
#: A non-empty Lisp list (the empty list is ``None``).
LispList: TypeAlias = "tuple[LispValue, ...]"

NUMERIC_TYPES = (int, float, Fraction)


def is_number(value: Any) -> bool:
    t = type(value)
    return t is int or t is float or t is Fraction

