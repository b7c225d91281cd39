"""The ``format`` family (reference §4.5): Ketos's Common-Lisp-style format language.

Directives ``~a ~s ~c ~d ~b ~o ~x ~r ~f ~e ~p ~t ~% ~& ~| ~~ ~* ~? ~^`` and the
groups ``~{~}``, ``~[~;~]``, ``~(~)`` and ``~<~;~>`` (justification). ``~z``
(pretty printing) is not supported and fails with an error naming the directive.
``print`` and friends format and discard the text: Svit has no output stream. Values
are printed by :mod:`lisp.render`.
"""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction
from typing import Any, TypeAlias, overload

from ..context import current
from ..errors import EvalError, LimitError
from ..render import plain_float, render
from ..values import Char, LispList, LispValue, type_name
from .registry import system
from .support import type_error

__all__ = ["format_text"]

#: Nesting of format groups and ``~?`` indirections.
_MAX_FORMAT_DEPTH = 32
#: Parsing a format string charges one step per this many characters.
_PARSE_CHARS_PER_STEP = 16
#: Running format directives charges one step per this many directives executed.
_NODES_PER_STEP = 16
#: Largest numeric directive parameter (as Ketos).
_MAX_FIELD = 100



# --- format: parsing ---------------------------------------------------------------


def _fmt_error(message: str) -> EvalError:
    return EvalError(f"error in string formatting: {message}")


class _Dir:
    __slots__ = ("command", "at", "colon", "params")

    def __init__(self, command: str, at: bool, colon: bool, params: list[_Param]) -> None:
        self.command = command
        self.at = at
        self.colon = colon
        self.params = params


#: A directive parameter: a number, a quoted character, ``v`` (the next argument) or ``#`` (arguments left), or empty.
_Param: TypeAlias = "int | tuple[str, str] | str | None"


class _Group:
    __slots__ = ("open", "clauses", "separators", "close")

    def __init__(self, open_dir: _Dir) -> None:
        self.open = open_dir
        self.clauses: list[list[_Node]] = [[]]
        self.separators: list[_Dir] = []
        self.close: _Dir | None = None


#: A parsed piece of a format string: literal text, a directive or a group.
_Node: TypeAlias = "str | _Dir | _Group"

_OPENERS = {"{": "}", "[": "]", "(": ")", "<": ">"}
_CLOSERS = {"}", "]", ")", ">"}


def _tokenize(fmt: str) -> list[_Node]:
    """Text pieces and directives, in order."""
    tokens: list[_Node] = []
    text: list[str] = []
    i = 0
    n = len(fmt)
    while i < n:
        ch = fmt[i]
        if ch != "~":
            text.append(ch)
            i += 1
            continue
        i += 1
        params: list[_Param] = []
        # parameters: numbers, 'c, v or #, separated by commas (a field may be empty)
        while i < n:
            c = fmt[i]
            if c == "'":
                if i + 1 >= n:
                    raise _fmt_error("end of format string reached when parsing directive")
                params.append(("char", fmt[i + 1]))
                i += 2
            elif c in "vV":
                params.append("v")
                i += 1
            elif c == "#":
                params.append("#")
                i += 1
            elif c == "-" or c.isdigit():
                j = i + 1
                while j < n and fmt[j].isdigit():
                    j += 1
                if j - i > 12 or fmt[i:j] == "-":
                    raise _fmt_error("integer overflow in field")
                params.append(int(fmt[i:j]))
                i = j
            elif c == ",":
                params.append(None)
            else:
                break
            if i < n and fmt[i] == ",":
                i += 1
            else:
                break
        at = colon = False
        while i < n and fmt[i] in "@:":
            if fmt[i] == "@":
                if at:
                    raise _fmt_error("invalid flags")
                at = True
            else:
                if colon:
                    raise _fmt_error("invalid flags")
                colon = True
            i += 1
        if i >= n:
            raise _fmt_error("end of format string reached when parsing directive")
        command = fmt[i].lower()
        i += 1
        if command == "\n":
            # newline continuation: skip the newline and following indentation
            while i < n and fmt[i] != "\n" and fmt[i].isspace():
                i += 1
            continue
        if text:
            tokens.append("".join(text))
            text = []
        tokens.append(_Dir(command, at, colon, params))
    if text:
        tokens.append("".join(text))
    return tokens


def _parse(tokens: list[_Node], pos: int, closer: str | None, group: _Group | None, depth: int) -> int:
    """Fill ``group`` (or the top-level list) from ``tokens[pos:]``; returns the next position."""
    if depth > _MAX_FORMAT_DEPTH:
        raise _fmt_error("format directives nested too deeply")
    assert group is not None
    while pos < len(tokens):
        tok = tokens[pos]
        pos += 1
        if isinstance(tok, _Dir):
            c = tok.command
            if c in _OPENERS:
                sub = _Group(tok)
                pos = _parse(tokens, pos, _OPENERS[c], sub, depth + 1)
                group.clauses[-1].append(sub)
                continue
            if c in _CLOSERS:
                if c != closer:
                    raise _fmt_error(f"incorrect close delimiter: `{c}`")
                group.close = tok
                return pos
            if c == ";":
                if closer not in ("]", ">"):
                    raise _fmt_error("directive not expected here")
                group.separators.append(tok)
                group.clauses.append([])
                continue
        group.clauses[-1].append(tok)
    if closer is not None:
        raise _fmt_error(f"missing close delimiter `{closer}`")
    return pos


def _compile(fmt: str, depth: int = 0) -> list[_Node]:
    # Parsing is a Python loop over every character: charge it like the text it reads.
    if len(fmt) >= _PARSE_CHARS_PER_STEP:
        current().budget.charge(len(fmt) // _PARSE_CHARS_PER_STEP)
    root = _Group(_Dir("", False, False, []))
    _parse(_tokenize(fmt), 0, None, root, depth)
    return root.clauses[0]


# --- format: running ---------------------------------------------------------------


class _Out:
    __slots__ = ("parts", "total", "limit", "col", "work", "budget")

    def __init__(self, limit: int, budget: Any) -> None:
        self.parts: list[str] = []
        self.total = 0
        self.limit = limit
        self.col = 0  # characters since the last newline
        self.work = 0  # directives run since the last charge
        self.budget = budget

    def emit(self, s: str) -> None:
        if s:
            self.total += len(s)
            if self.total > self.limit:
                raise LimitError("guest memory")
            self.parts.append(s)
            k = s.rfind("\n")
            self.col = self.col + len(s) if k < 0 else len(s) - k - 1

    def spend(self, nodes: int) -> None:
        """Charge for running ``nodes`` directives (iterations can repeat them without output)."""
        self.work += nodes
        if self.work >= _NODES_PER_STEP:
            self.budget.charge(self.work // _NODES_PER_STEP)
            self.work %= _NODES_PER_STEP

    def column(self) -> int:
        return self.col

    def at_line_start(self) -> bool:
        return self.col == 0


class _Stop(Exception):
    """``~^`` ended the enclosing iteration; ``whole`` ends the whole ``~:{``."""

    def __init__(self, whole: bool) -> None:
        self.whole = whole


_LOW = ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
        "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"]
_LOW_TH = ["first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth",
           "tenth", "eleventh", "twelfth", "thirteenth", "fourteenth", "fifteenth", "sixteenth",
           "seventeenth", "eighteenth", "nineteenth"]
_TENS = ["twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
_TENS_TH = ["twentieth", "thirtieth", "fortieth", "fiftieth", "sixtieth", "seventieth",
            "eightieth", "ninetieth"]


def _cardinal(n: int, ordinal: bool) -> str:
    if n == 0:
        return "zeroth" if ordinal else "zero"
    words: list[str] = []
    for unit, name in ((1000, "thousand"), (100, "hundred")):
        if n >= unit:
            words.append(_LOW[n // unit - 1])
            n %= unit
            words.append(name + ("th" if ordinal and n == 0 else ""))
    tail = ""
    if n >= 20:
        tens, n = divmod(n, 10)
        if n == 0:
            tail = (_TENS_TH if ordinal else _TENS)[tens - 2]
        else:
            tail = _TENS[tens - 2] + "-"
    if n:
        tail += (_LOW_TH if ordinal else _LOW)[n - 1]
    if tail:
        words.append(tail)
    return " ".join(words)


_ROMAN = [(1000, "M"), (900, "CM"), (500, "D"), (400, "CD"), (100, "C"), (90, "XC"), (50, "L"),
          (40, "XL"), (10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I")]
_OLD_ROMAN = [(1000, "M"), (500, "D"), (100, "C"), (50, "L"), (10, "X"), (5, "V"), (1, "I")]


def _roman(n: int, old: bool) -> str:
    out = []
    for value, digits in _OLD_ROMAN if old else _ROMAN:
        while n >= value:
            out.append(digits)
            n -= value
    return "".join(out)


def _pad(s: str, min_col: int, col_inc: int, min_pad: int, pad_char: str, left: bool) -> str:
    if min_col == 0 and min_pad == 0:
        return s
    pad = max(min_pad, max(min_col - len(s.encode("utf-8")), 0))
    if col_inc > 1:
        pad = pad + col_inc - (pad % col_inc)
    fill = pad_char * pad
    return fill + s if left else s + fill


def _exp_text(f: float, prec: int | None) -> str:
    """Rust's ``{:e}`` / ``{:.Ne}``."""
    if math.isnan(f):
        return "NaN"
    if math.isinf(f):
        return "inf" if f > 0 else "-inf"
    sign = "-" if math.copysign(1.0, f) < 0 else ""
    if prec is not None:
        mant, _, exp = f"{abs(f):.{prec}e}".partition("e")
        return f"{sign}{mant}e{int(exp)}"
    if f == 0:
        return sign + "0e0"
    d = Decimal(repr(abs(f))).normalize()
    _, digits, exponent = d.as_tuple()
    assert isinstance(exponent, int)  # finite: the non-finite floats are written above
    e = len(digits) - 1 + exponent
    mant = str(digits[0])
    if len(digits) > 1:
        mant += "." + "".join(map(str, digits[1:]))
    return f"{sign}{mant}e{e}"


class _Formatter:
    def __init__(self, args: LispList, out: _Out, depth: int) -> None:
        self.args = args
        self.index = 0
        self.out = out
        self.depth = depth
        self.last_list = True  # inside ~:{ : is this the last sublist?

    # arguments and parameters

    def next_arg(self) -> Any:
        if self.index >= len(self.args):
            raise _fmt_error("insufficient arguments")
        v = self.args[self.index]
        self.index += 1
        return v

    def left(self) -> int:
        return max(len(self.args) - self.index, 0)

    @overload
    def int_param(self, params: list[_Param], i: int, default: int) -> int: ...

    @overload
    def int_param(self, params: list[_Param], i: int, default: None) -> int | None: ...

    def int_param(self, params: list[_Param], i: int, default: int | None) -> int | None:
        p = params[i] if i < len(params) else None
        if p is None:
            return default
        if p == "#":
            return self.left()
        if p == "v":
            arg = self.next_arg()
            if arg is None:
                return default
            p = self.integer(arg)
        if not isinstance(p, int):
            raise _fmt_error("expected field of type integer; found char")
        if p < 0 or p > _MAX_FIELD:
            raise _fmt_error("integer overflow in field")
        return p

    def char_param(self, params: list[_Param], i: int, default: str) -> str:
        p = params[i] if i < len(params) else None
        if p is None:
            return default
        if isinstance(p, tuple):
            return p[1]
        if p == "v":
            arg = self.next_arg()
            if type(arg) is not Char:
                raise _fmt_error(f"expected char; found {_type(arg)}")
            return arg.char
        raise _fmt_error("expected field of type char; found integer")

    @staticmethod
    def no_more(params: list[_Param], count: int) -> None:
        if any(p is not None for p in params[count:]):
            raise _fmt_error("extraneous fields to directive")

    @staticmethod
    def integer(v: LispValue) -> int:
        if type(v) is int:
            return v
        if type(v) is float:
            if not math.isfinite(v):
                raise _fmt_error("integer overflow")
            return math.trunc(v)
        if type(v) is Fraction:
            return math.trunc(v)
        raise _fmt_error(f"expected integer; found {_type(v)}")

    @staticmethod
    def number_as_float(v: LispValue) -> float:
        if type(v) is float:
            return v
        if type(v) is int or type(v) is Fraction:
            try:
                return float(v)
            except OverflowError:
                return -math.inf if v < 0 else math.inf
        raise _fmt_error(f"expected float; found {_type(v)}")

    # running

    def run(self, nodes: list[_Node]) -> None:
        emit = self.out.emit
        self.out.spend(len(nodes) or 1)
        for node in nodes:
            if type(node) is str:
                emit(node)
            elif type(node) is _Group:
                self.group(node)
            elif type(node) is _Dir:
                self.directive(node)

    def directive(self, d: _Dir) -> None:
        c = d.command
        p = d.params
        emit = self.out.emit
        if c == "a" or c == "s":
            min_col = self.int_param(p, 0, 0)
            col_inc = self.int_param(p, 1, 0)
            min_pad = self.int_param(p, 2, 0)
            pad_char = self.char_param(p, 3, " ")
            self.no_more(p, 4)
            arg = self.next_arg()
            text = render(arg, c == "s", self.out.limit)
            emit(_pad(text, min_col, col_inc, min_pad, pad_char, d.at))
        elif c == "c":
            self.no_more(p, 0)
            arg = self.next_arg()
            if type(arg) is not Char:
                raise _fmt_error(f"expected char; found {_type(arg)}")
            emit(arg.char)
        elif c in "dbox":
            self.format_integer(d, p, {"d": 10, "b": 2, "o": 8, "x": 16}[c])
        elif c == "r":
            radix = self.int_param(p, 0, None)
            if radix is not None:
                if not 2 <= radix <= 36:
                    raise _fmt_error(f"invalid radix: {radix}")
                self.format_integer(d, p[1:], radix)
                return
            n = self.integer(self.next_arg())
            if d.at:
                if not 1 <= n <= 5000:
                    raise _fmt_error(f"Expected an integer 1 - 5000; found {n}")
                emit(_roman(n, d.colon))
            else:
                if not 0 <= n <= 5000:
                    raise _fmt_error(f"Expected an integer 0 - 5000; found {n}")
                emit(_cardinal(n, d.colon))
        elif c == "f" or c == "e":
            width = self.int_param(p, 0, None)
            prec = self.int_param(p, 1, None)
            pad_char = self.char_param(p, 2, " ")
            self.no_more(p, 3)
            f = self.number_as_float(self.next_arg())
            if c == "e":
                s = _exp_text(f, prec)
            elif math.isnan(f):
                s = "NaN"
            elif math.isinf(f):
                s = "inf" if f > 0 else "-inf"
            elif prec is None:
                s = plain_float(f)
            else:
                s = f"{f:.{prec}f}"
            if d.at and not s.startswith("-") and s != "NaN":
                s = "+" + s
            if width is not None and len(s) < width:
                s = " " * (width - len(s)) + s
            if pad_char != " ":
                s = s.replace(" ", pad_char)
            emit(s)
        elif c == "p":
            self.no_more(p, 0)
            if d.colon:
                self.index = max(self.index - 1, 0)
            arg = self.next_arg()
            t = type(arg)
            if t is int or t is float:
                one = arg == 1
            elif t is Fraction:
                one = False
            else:
                raise _fmt_error(f"expected number; found {_type(arg)}")
            if d.at:
                emit("y" if one else "ies")
            elif not one:
                emit("s")
        elif c == "t":
            col_num = self.int_param(p, 0, 1)
            col_inc = self.int_param(p, 1, 1)
            self.no_more(p, 2)
            cur = self.out.column()
            if not d.at:
                if cur < col_num:
                    emit(" " * (col_num - cur))
                elif col_inc:
                    emit(" " * (col_inc - cur % col_inc))
            elif col_inc > 1:
                emit(" " * (col_num + col_inc - 1 - ((cur + col_num) - 1) % col_inc))
            else:
                emit(" " * col_num)
        elif c in "%|~":
            n = self.int_param(p, 0, 1)
            self.no_more(p, 1)
            emit({"%": "\n", "|": "\x0c", "~": "~"}[c] * n)
        elif c == "&":
            n = self.int_param(p, 0, 1)
            self.no_more(p, 1)
            if self.out.at_line_start():
                n = max(n - 1, 0)
            emit("\n" * n)
        elif c == "*":
            if d.at:
                n = self.int_param(p, 0, 0)
                self.index = n
            else:
                n = self.int_param(p, 0, 1)
                self.index = max(self.index - n, 0) if d.colon else self.index + n
            self.no_more(p, 1)
        elif c == "?":
            self.no_more(p, 0)
            fmt = self.next_arg()
            if type(fmt) is not str:
                raise _fmt_error(f"expected string; found {_type(fmt)}")
            if self.depth >= _MAX_FORMAT_DEPTH:
                raise _fmt_error("format indirection nested too deeply")
            nodes = _compile(fmt, self.depth + 1)
            # ``~^`` inside the indirect format ends only that format, as in Ketos.
            if d.at:
                self.depth += 1
                try:
                    self.run(nodes)
                except _Stop:
                    pass
                finally:
                    self.depth -= 1
            else:
                sub_args = _as_args(self.next_arg())
                try:
                    _Formatter(sub_args, self.out, self.depth + 1).run(nodes)
                except _Stop:
                    pass
        elif c == "^":
            first = self.int_param(p, 0, None)
            second = self.int_param(p, 1, None)
            third = self.int_param(p, 2, None)
            self.no_more(p, 3)
            if first is None:
                # ``~:^`` ends a ``~:{`` at its last sublist; ``~^`` when no arguments are left
                stop = self.last_list if d.colon else self.left() == 0
            elif second is None:
                stop = first == 0
            elif third is None:
                stop = first == second
            else:
                stop = first <= second <= third
            if stop:
                raise _Stop(d.colon)
        elif c in ("z", ">", ";") or c in _OPENERS:
            raise _fmt_error(f"unsupported directive `~{c}`")
        else:
            raise _fmt_error(f"unrecognized directive `{c}`")

    def format_integer(self, d: _Dir, p: list[_Param], radix: int) -> None:
        min_col = self.int_param(p, 0, 0)
        pad_char = self.char_param(p, 1, " ")
        comma = self.char_param(p, 2, ",")
        interval = self.int_param(p, 3, 3)
        self.no_more(p, 4)
        n = self.integer(self.next_arg())
        digits = _to_radix(abs(n), radix)
        if d.colon and interval:
            # groups of ``interval`` digits from the right (the first group may be shorter)
            head = len(digits) % interval or interval
            groups = [digits[:head]] + [digits[i : i + interval] for i in range(head, len(digits), interval)]
            digits = comma.join(groups)
        if n < 0:
            digits = "-" + digits
        elif d.at:
            digits = "+" + digits
        self.out.emit(_pad(digits, min_col, 0, 0, pad_char, True))

    def group(self, g: _Group) -> None:
        kind = g.open.command
        if kind == "{":
            self.iterate(g)
        elif kind == "[":
            self.conditional(g)
        elif kind == "(":
            self.case_convert(g)
        elif kind == "<":
            self.justify(g)
        else:
            raise _fmt_error(f"unsupported directive `~{kind}`")

    def iterate(self, g: _Group) -> None:
        d = g.open
        max_iter = self.int_param(d.params, 0, None)
        self.no_more(d.params, 1)
        body = g.clauses[0]
        if not body:
            # an empty body takes the format to iterate from the next argument
            fmt = self.next_arg()
            if type(fmt) is not str:
                raise _fmt_error(f"expected string; found {_type(fmt)}")
            if self.depth >= _MAX_FORMAT_DEPTH:
                raise _fmt_error("format indirection nested too deeply")
            body = _compile(fmt, self.depth + 1)
        run_once = g.close is not None and g.close.colon
        if d.colon:
            lists = self.args[self.index:] if d.at else _as_args(self.next_arg())
            if d.at:
                self.index = len(self.args)
            count = 0
            for i, item in enumerate(lists):
                if max_iter is not None and count >= max_iter:
                    break
                count += 1
                sub = _Formatter(_as_args(item), self.out, self.depth)
                sub.last_list = i + 1 == len(lists)
                try:
                    sub.run(body)
                except _Stop as stop:
                    if stop.whole:
                        break
            if not lists and run_once and max_iter != 0:
                _Formatter((), self.out, self.depth).run(body)
            return
        if d.at:
            sub = self
        else:
            sub = _Formatter(_as_args(self.next_arg()), self.out, self.depth)
        count = 0
        first = True
        while sub.left() > 0 or (first and run_once):
            if max_iter is not None and count >= max_iter:
                break
            count += 1
            first = False
            before = sub.index
            try:
                sub.run(body)
            except _Stop:
                break
            if sub.index == before and sub.left() > 0:
                raise _fmt_error("infinite loop detected")

    def conditional(self, g: _Group) -> None:
        d = g.open
        if d.at and d.colon:
            raise _fmt_error("incorrect flags to directive")
        if d.colon:
            self.no_more(d.params, 0)
            arg = self.next_arg()
            if type(arg) is not bool:
                raise _fmt_error(f"expected bool; found {_type(arg)}")
            if len(g.clauses) != 2:
                raise _fmt_error("missing branch directive" if len(g.clauses) < 2 else "extraneous branch directive")
            self.run(g.clauses[1] if arg else g.clauses[0])
            return
        if d.at:
            self.no_more(d.params, 0)
            if len(g.clauses) != 1:
                raise _fmt_error("extraneous branch directive")
            if self.index < len(self.args) and self.args[self.index] is None:
                self.index += 1
                return
            self.run(g.clauses[0])
            return
        n = self.int_param(d.params, 0, None)
        if n is None:
            if self.index >= len(self.args):
                return
            n = self.integer(self.next_arg())
        # A ``~:;`` separator makes the clause after it the default: choosing it or any
        # later index runs that clause (clauses after the default cannot be chosen).
        default = next((i + 1 for i, sep in enumerate(g.separators) if sep.colon), None)
        if default is not None and n >= default:
            self.run(g.clauses[default])
        elif 0 <= n < len(g.clauses):
            self.run(g.clauses[n])

    def case_convert(self, g: _Group) -> None:
        d = g.open
        self.no_more(d.params, 0)
        parts = self.out.parts
        start = len(parts)
        col_before = self.out.col
        stopped: _Stop | None = None
        try:
            self.run(g.clauses[0])
        except _Stop as stop:
            stopped = stop  # what was written before ``~^`` is still converted
        text = "".join(parts[start:])
        del parts[start:]
        if d.at and d.colon:
            text = text.upper()
        elif d.colon:
            text = _title(text)
        elif d.at:
            text = _capitalize_first(text)
        else:
            text = text.lower()
        parts.append(text)
        # case conversion can change lengths ("ß" -> "SS"): recompute the column
        k = text.rfind("\n")
        self.out.col = col_before + len(text) if k < 0 else len(text) - k - 1
        if stopped is not None:
            raise stopped

    def justify(self, g: _Group) -> None:
        """``~mincol,colinc,minpad,padchar<seg~;seg~>`` as Ketos lays it out.

        Segments share this formatter's arguments; a ``~^`` in a segment drops it and
        ends the layout. A first segment closed by ``~spare,width:;`` is a prefix
        written only when the laid-out text would run past ``width - spare``
        columns of the current line.
        """
        d = g.open
        p = d.params
        min_col = self.int_param(p, 0, 0)
        col_inc = self.int_param(p, 1, 1) or 1
        min_pad = self.int_param(p, 2, 0)
        pad_char = self.char_param(p, 3, " ")
        self.no_more(p, 4)
        out = self.out
        line_len = 72
        prefix: str | None = None
        texts: list[str] = []
        for i, clause in enumerate(g.clauses):
            closer = g.separators[i] if i < len(g.separators) else None
            if closer is not None and closer.colon and i > 0:
                raise _fmt_error("directive not expected here")
            start, col_before, total_before = len(out.parts), out.col, out.total
            try:
                self.run(clause)
            except _Stop:
                del out.parts[start:]
                out.col, out.total = col_before, total_before
                break
            text = "".join(out.parts[start:])
            del out.parts[start:]
            out.col, out.total = col_before, total_before
            if closer is not None and closer.colon:
                prefix = text
                spare = self.int_param(closer.params, 0, 0)
                width = self.int_param(closer.params, 1, None)
                self.no_more(closer.params, 2)
                if width is not None:
                    line_len = max(width - spare, 0)
            else:
                texts.append(text)
        if not texts:
            out.emit(pad_char * min_col)
            return
        pads = len(texts) - 1 + int(d.at) + int(d.colon) or 1
        total_text = sum(len(t.encode("utf-8")) for t in texts)
        cols = max(min_col, total_text + pads * min_pad)
        cols += (cols + col_inc - 1) % col_inc
        base_pad, extra_pad = divmod(cols - total_text, pads)
        pieces: list[str] = []

        def pad() -> str:
            nonlocal extra_pad
            if extra_pad:
                extra_pad -= 1
                return pad_char * (base_pad + 1)
            return pad_char * base_pad

        if d.colon or (len(texts) == 1 and not d.at):
            pads -= 1
            pieces.append(pad())
        for text in texts:
            pieces.append(text)
            if pads:
                pads -= 1
                pieces.append(pad())
        laid_out = "".join(pieces)
        if prefix is not None and out.column() + len(laid_out) > line_len:
            out.emit(prefix)
        out.emit(laid_out)


def _title(text: str) -> str:
    out = []
    in_word = False
    for ch in text:
        if ch.isspace():
            in_word = False
            out.append(ch)
        elif not in_word:
            in_word = True
            out.append(ch.upper())
        else:
            out.append(ch)
    return "".join(out)


def _capitalize_first(text: str) -> str:
    for i, ch in enumerate(text):
        if not ch.isspace():
            return text[:i] + ch.upper() + text[i + 1 :]
    return text


_DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"


def _to_radix(n: int, radix: int) -> str:
    if radix == 10:
        return str(n)
    if radix == 16:
        return format(n, "x")
    if radix == 8:
        return format(n, "o")
    if radix == 2:
        return format(n, "b")
    if n == 0:
        return "0"
    out = []
    while n:
        n, r = divmod(n, radix)
        out.append(_DIGITS[r])
    return "".join(reversed(out))


def _as_args(v: Any) -> LispList:
    if v is None:
        return ()
    if type(v) is tuple:
        return v
    raise _fmt_error(f"expected list; found {_type(v)}")


def _type(v: Any) -> str:
    return type_name(v)


def format_text(fmt: Any, args: LispList) -> str:
    """Run ``format`` on a format string and arguments."""
    if type(fmt) is not str:
        raise type_error("string", fmt)
    ctx = current()
    out = _Out(ctx.max_memory, ctx.budget)
    try:
        _Formatter(args, out, 0).run(_compile(fmt))
    except _Stop:
        pass
    except RecursionError:
        raise _fmt_error("format directives nested too deeply") from None
    text = "".join(out.parts)
    ctx.allocate(len(text))
    return text


@system("format", 1, None)
def fn_format(fmt: Any, *args: Any) -> str:
    return format_text(fmt, args)


@system("print", 1, None)
def fn_print(fmt: Any, *args: Any) -> None:
    format_text(fmt, args)
    return None


@system("println", 1, None)
def fn_println(fmt: Any, *args: Any) -> None:
    format_text(fmt, args)
    return None


@system("eprint", 1, None)
def fn_eprint(fmt: Any, *args: Any) -> None:
    format_text(fmt, args)
    return None


@system("eprintln", 1, None)
def fn_eprintln(fmt: Any, *args: Any) -> None:
    format_text(fmt, args)
    return None
