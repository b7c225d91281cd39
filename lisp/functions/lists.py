"""List (and string/bytes sequence) system functions (reference §4.5).

Lists are non-empty tuples and the empty list is unit (``None``), so every
function that may produce an empty list returns ``None``. Strings are indexed
by UTF-8 byte offsets, as in Ketos. Foreign values (Svit arrays/maps) are not
lists and are rejected with a type error.
"""

from __future__ import annotations

from typing import Any

from ..context import UNITS_PER_STEP, current
from ..errors import EvalError
from ..values import Char, LispList, LispPath, LispValue
from .registry import system
from .support import overflow, type_error

__all__ = ["make_list", "out_of_bounds", "scan"]

_LIST_UNIT = 8  # allocation units per list element


def make_list(items: list[LispValue] | LispList) -> LispList | None:
    """A Lisp list from Python items, charged against guest memory with what it holds."""
    return current().new_list(items)


def _string(s: str) -> str:
    current().allocate(len(s))
    return s


def _index(v: Any) -> int:
    """A ``usize`` argument: an integer that is not negative."""
    if type(v) is not int:
        raise type_error("integer", v)
    if v < 0 or v >= 2**64:
        raise overflow()
    return v


def out_of_bounds(n: int) -> EvalError:
    return EvalError(f"index out of bounds: {n}")


def scan(units: int) -> None:
    """Charge for reading ``units`` of an existing value (one step per 64, like building)."""
    if units >= UNITS_PER_STEP:
        current().budget.charge(units // UNITS_PER_STEP)


def _utf8_len(s: str) -> int:
    if s.isascii():  # O(1) for str
        return len(s)
    scan(len(s))
    return len(s.encode("utf-8"))


@system("list", 0, None)
def fn_list(*args: Any) -> LispList | None:
    return make_list(args)


@system("append", 1, None)
def fn_append(lst: Any, *items: Any) -> LispList | None:
    if lst is None:
        return make_list(items)
    if type(lst) is not tuple:
        raise type_error("list", lst)
    if not items:
        return lst
    return make_list(lst + items)


@system("elt", 2)
def fn_elt(seq: Any, index: Any) -> Any:
    i = _index(index)
    t = type(seq)
    if t is tuple or t is bytes:
        if i >= len(seq):
            raise out_of_bounds(i)
        return seq[i]
    raise type_error("indexable sequence", seq)


def _concat_lists(args: LispList) -> LispList | None:
    total = 0
    for a in args:
        if a is None:
            continue
        if type(a) is not tuple:
            raise type_error("list", a)
        total += len(a)
    if total == 0:
        return None
    current().allocate(_LIST_UNIT * total)  # refused before the parts are copied
    out: list[LispValue] = []
    for a in args:
        if type(a) is tuple:  # the arguments were checked to be lists
            out.extend(a)
    return make_list(out)


def _text_piece(v: LispValue) -> str:
    if type(v) is str:
        return v
    if type(v) is Char:
        return v.char
    raise type_error("char or string", v)


def _concat_strings(args: LispList, sep: str = "") -> str:
    pieces = [_text_piece(a) for a in args]
    total = sum(len(p) for p in pieces) + len(sep) * max(len(pieces) - 1, 0)
    current().allocate(total)
    return sep.join(pieces)


def _bytes_piece(v: Any) -> bytes:
    if type(v) is not bytes:
        raise type_error("bytes", v)
    return v


def _concat_bytes(args: LispList, sep: bytes = b"") -> bytes:
    pieces = [_bytes_piece(a) for a in args]
    total = sum(len(p) for p in pieces) + len(sep) * max(len(pieces) - 1, 0)
    current().allocate(total)
    return sep.join(pieces)


@system("concat", 1, None)
def fn_concat(*args: Any) -> Any:
    first = args[0]
    t = type(first)
    if first is None or t is tuple:
        if len(args) == 1:
            return first
        return _concat_lists(args)
    if t is str or t is Char:
        return first if len(args) == 1 else _concat_strings(args)
    if t is bytes:
        return first if len(args) == 1 else _concat_bytes(args)
    if t is LispPath:
        for a in args:
            if type(a) is not LispPath:
                raise type_error("path", a)
        # Plan the join first (no text is built), so a long result is refused up front.
        plan: list[str] = []
        size = 0
        last = ""  # the last character of the path so far
        for a in args:
            piece = a.path
            if piece.startswith("/") or size == 0:
                plan = [piece]
                size = len(piece)
                last = piece[-1:]
                continue
            if last != "/":
                plan.append("/")
                size += 1
                last = "/"
            plan.append(piece)
            size += len(piece)
            if piece:
                last = piece[-1]
        current().allocate(size)
        return LispPath("".join(plan))
    raise type_error("list or string", first)


@system("join", 1, None)
def fn_join(sep: Any, *args: Any) -> Any:
    t = type(sep)
    if sep is None:
        return _concat_lists(args) if args else None
    if t is tuple:
        total = 0
        for a in args:
            if a is not None and type(a) is not tuple:
                raise type_error("list", a)
            total += len(a) if a is not None else 0
        total += len(sep) * max(len(args) - 1, 0)
        if total == 0:
            return None
        current().allocate(_LIST_UNIT * total)  # refused before the parts are copied
        out: list[LispValue] = []
        for i, a in enumerate(args):
            if i:
                out.extend(sep)
            if a is not None:
                out.extend(a)
        return make_list(out)
    if t is str or t is Char:
        return _concat_strings(args, _text_piece(sep))
    if t is bytes:
        return _concat_bytes(args, sep)
    raise type_error("list or string", sep)


@system("len", 1)
def fn_len(seq: Any) -> int:
    t = type(seq)
    if seq is None:
        return 0
    if t is tuple or t is bytes:
        return len(seq)
    if t is str:
        return _utf8_len(seq)
    raise type_error("sequence", seq)


def _slice_str(s: str, begin: int, end: int | None) -> str:
    if s.isascii():
        n = len(s)
        if begin > n:
            raise out_of_bounds(begin)
        if end is not None and end > n:
            raise out_of_bounds(end)
        return s[begin:end]
    scan(len(s))
    raw = s.encode("utf-8")
    n = len(raw)
    if begin > n:
        raise out_of_bounds(begin)
    if end is not None and end > n:
        raise out_of_bounds(end)
    for pos in (begin, end):
        # a UTF-8 continuation byte looks like 0b10xxxxxx
        if pos is not None and pos < n and (raw[pos] & 0xC0) == 0x80:
            raise EvalError(f"index not on char boundary: {pos}")
    return raw[begin:end].decode("utf-8")


@system("slice", 2, 3)
def fn_slice(seq: Any, begin: Any, end: Any = None) -> Any:
    b = _index(begin)
    e = None if end is None else _index(end)
    if e is not None and e < b:
        raise EvalError(f"invalid slice {b}..{e}")
    t = type(seq)
    if seq is None:
        if b > 0:
            raise out_of_bounds(b)
        if e:
            raise out_of_bounds(e)
        return None
    if t is tuple or t is bytes:
        n = len(seq)
        if b > n:
            raise out_of_bounds(b)
        if e is not None and e > n:
            raise out_of_bounds(e)
        part = seq[b:e]
        if t is tuple:
            return make_list(part)
        return part
    if t is str:
        return _string(_slice_str(seq, b, e))
    raise type_error("list or string", seq)


@system("first", 1)
def fn_first(seq: Any) -> Any:
    t = type(seq)
    if t is tuple:
        return seq[0]
    if t is str or t is bytes:
        if not seq:
            raise out_of_bounds(0)
        return Char(seq[0]) if t is str else seq[0]
    raise type_error("sequence", seq)


@system("second", 1)
def fn_second(seq: Any) -> Any:
    if type(seq) is not tuple:
        raise type_error("list", seq)
    if len(seq) < 2:
        raise out_of_bounds(1)
    return seq[1]


@system("last", 1)
def fn_last(seq: Any) -> Any:
    t = type(seq)
    if t is tuple:
        return seq[-1]
    if t is str or t is bytes:
        if not seq:
            raise out_of_bounds(0)
        return Char(seq[-1]) if t is str else seq[-1]
    raise type_error("sequence", seq)


@system("init", 1)
def fn_init(seq: Any) -> Any:
    t = type(seq)
    if t is tuple:
        return make_list(seq[:-1])
    if t is str or t is bytes:
        if not seq:
            raise out_of_bounds(0)
        return _string(seq[:-1]) if t is str else seq[:-1]
    raise type_error("sequence", seq)


@system("tail", 1)
def fn_tail(seq: Any) -> Any:
    t = type(seq)
    if t is tuple:
        return make_list(seq[1:])
    if t is str or t is bytes:
        if not seq:
            raise out_of_bounds(0)
        return _string(seq[1:]) if t is str else seq[1:]
    raise type_error("sequence", seq)


@system("reverse", 1)
def fn_reverse(seq: Any) -> Any:
    if seq is None:
        return None
    if type(seq) is not tuple:
        raise type_error("list", seq)
    return make_list(seq[::-1])
