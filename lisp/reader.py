"""The reader: source text to Lisp data, with positions.

The Lark LALR parser in ``grammar.lark`` reduces straight into Lisp values (lists
are tuples, ``()`` is ``None``) while recording, for every list, where it started
and how deeply it nests. Results are cached by the BLAKE3 digest of the source, so
a script is read once per process however often it runs.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field
from fractions import Fraction
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, TypeAlias, cast

from lark import Lark, Token, Transformer
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken, VisitError

from .errors import LispError, ReadError, Span
from .values import Char, Keyword, LispList, LispPath, Name, Quoted, make_quoted

__all__ = ["QUASIQUOTE", "QUOTE", "UNQUOTE", "UNQUOTE_SPLICING", "Program", "as_code", "as_data", "parse", "read", "read_forms"]

QUOTE = Name("quote")
QUASIQUOTE = Name("quasiquote")
UNQUOTE = Name("comma")
UNQUOTE_SPLICING = Name("comma-at")

_QUOTE_KINDS = {QUOTE: "quote", QUASIQUOTE: "quasiquote", UNQUOTE: "comma", UNQUOTE_SPLICING: "comma-at"}
_QUOTE_HEADS = {kind: head for head, kind in _QUOTE_KINDS.items()}

_PREFIX_NAMES = {
    "QUOTE": QUOTE,
    "QUASIQUOTE": QUASIQUOTE,
    "UNQUOTE": UNQUOTE,
    "UNQUOTE_SPLICING": UNQUOTE_SPLICING,
}

#: No limit admits integers above 4,096 bits (1,234 decimal digits); longer literals are
#: only measured.
_MAX_LITERAL_BITS = 4096
_MAX_DECIMAL_DIGITS = 1300

_SIMPLE_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "'": "'", "0": "\0"}
_ESCAPE = re.compile(r"\\(u\{[0-9a-fA-F]{1,6}\}|x[0-9a-fA-F]{2}|\r?\n[ \t\r\n]*|[\s\S])")


@dataclass
class Program:
    """What the reader produced: top-level forms plus facts the compiler checks."""

    forms: tuple[Any, ...]
    spans: dict[int, Span] = field(repr=False)
    depth: int
    integer_bits: int
    #: For each list (and for ``forms``): the (line, column) of every element, so a
    #: name or literal inside it can be reported where it is written.
    positions: dict[int, tuple[tuple[int, int], ...]] = field(default_factory=dict, repr=False)

    def span_of(self, form: Any) -> Span | None:
        return self.spans.get(id(form)) if type(form) is tuple else None

    def element_span(self, parent: Any, index: int) -> Span | None:
        """Where element ``index`` of the list ``parent`` starts, if the reader saw it."""
        found = self.positions.get(id(parent))
        if found is None or index >= len(found):
            return None
        return Span(*found[index])


def _unescape(body: str, token: Token, *, allow_unicode: bool = True) -> str:
    def replace(match: re.Match[str]) -> str:
        esc = match.group(1)
        if esc in _SIMPLE_ESCAPES:
            return _SIMPLE_ESCAPES[esc]
        if esc[0] in "\r\n":
            return ""  # a backslash-newline continues the line, dropping leading blanks
        if esc == "x" or esc == "u" and allow_unicode:
            form = "\\xHH (two hex digits)" if esc == "x" else "\\u{HHHH} (hex digits in braces)"
            raise _error(token, f"invalid escape \\{esc}: write {form}")
        if esc[0] == "x":
            code = int(esc[1:], 16)
            if allow_unicode and code > 0x7F:
                raise _error(token, f"invalid escape \\{esc}: only ASCII may be written as \\x")
            return chr(code)
        if esc[0] == "u" and allow_unicode:
            code = int(esc[2:-1], 16)
            if code > 0x10FFFF or 0xD800 <= code <= 0xDFFF:
                raise _error(token, f"invalid unicode escape \\{esc}")
            return chr(code)
        raise _error(token, f"unknown escape sequence \\{esc}")

    return _ESCAPE.sub(replace, body)


def _error(token: Token, message: str) -> ReadError:
    return ReadError(message, Span(token.line or 1, token.column or 1))


def _strip_raw(text: str, prefix_len: int) -> str:
    body = text[prefix_len:]
    hashes = len(body) - len(body.lstrip("#"))
    return body[hashes + 1 : len(body) - hashes - 1]


def _to_bytes(text: str, token: Token) -> bytes:
    try:
        return text.encode("latin-1")
    except UnicodeEncodeError:
        raise _error(token, "byte strings may only contain bytes") from None


#: A rule's children (the rule ``list`` names a method of the builder, hence the aliases).
_Children: TypeAlias = "list[Any]"
_Tokens: TypeAlias = "list[Token]"


class _Builder(Transformer[Token, Any]):
    """Reduces grammar rules into (value, depth) pairs, recording list positions."""

    # Every reduction yields (value, depth, (line, column)).
    def __init__(self) -> None:
        super().__init__()
        self.spans: dict[int, Span] = {}
        self.positions: dict[int, tuple[tuple[int, int], ...]] = {}
        self.integer_bits = 0

    def start(self, children: list[tuple[Any, int, tuple[int, int]]]) -> tuple[tuple[Any, ...], int, LispList]:
        depth = max((c[1] for c in children), default=0)
        return tuple(c[0] for c in children), depth, tuple(c[2] for c in children)

    def list(self, children: list[Any]) -> tuple[Any, int, tuple[int, int]]:
        lpar = children[0]
        where = (lpar.line, lpar.column)
        items = children[1:-1]
        if not items:
            return None, 1, where
        value = tuple(c[0] for c in items)
        self.spans[id(value)] = Span(*where)
        self.positions[id(value)] = tuple(c[2] for c in items)
        return value, 1 + max(c[1] for c in items), where

    def quoted(self, children: _Children) -> tuple[Any, int, tuple[int, int]]:
        prefix, (inner, depth, inner_where) = children
        where = (prefix.line, prefix.column)
        value = (_PREFIX_NAMES[prefix.type], inner)
        self.spans[id(value)] = Span(*where)
        self.positions[id(value)] = (where, inner_where)
        return value, depth + 1, where

    def atom(self, children: _Tokens) -> tuple[Any, int, tuple[int, int]]:
        token = children[0]
        line, column = token.line, token.column
        assert line is not None and column is not None  # the lexer positions every token
        return getattr(self, "_" + token.type)(token, str(token)), 0, (line, column)

    def _note_bits(self, value: int) -> int:
        bits = value.bit_length()
        if bits > self.integer_bits:
            self.integer_bits = bits
        return value

    def _decimal(self, digits: str) -> int:
        """A decimal literal's value; one beyond any integer-bits limit only records its size
        (no limit admits it, and Python refuses to convert very long decimals)."""
        significant = digits.lstrip("0")
        if len(significant) > _MAX_DECIMAL_DIGITS:
            self.integer_bits = max(self.integer_bits, int(len(significant) * 3.33) + 1)
            return 0
        return int(digits)

    def _INTEGER(self, token: Token, text: str) -> int:
        text = text.replace("_", "")  # digit separators
        sign = -1 if text.startswith("-") else 1
        digits = text.lstrip("-")
        base = {"0x": 16, "0o": 8, "0b": 2}.get(digits[:2], 10)
        if len(digits) > 20_000:
            raise _error(token, "integer literal is too long")
        value = sign * (int(digits[2:], base) if base != 10 else self._decimal(digits))
        return self._note_bits(value)

    def _FLOAT(self, token: Token, text: str) -> float:
        value = float(text.replace("_", ""))
        if value in (float("inf"), float("-inf")):
            raise _error(token, "float literal is out of range")
        return value

    def _RATIO(self, token: Token, text: str) -> Any:
        text = text.replace("_", "")
        numerator, denominator = text.split("/")
        if len(text) > 20_000:
            raise _error(token, "ratio literal is too long")
        top, bottom = self._decimal(numerator.lstrip("-")), self._decimal(denominator)
        if self.integer_bits > _MAX_LITERAL_BITS:
            return 0  # refused by the integer-bits check before anything runs
        if bottom == 0:
            raise _error(token, "ratio literal has a zero denominator")
        value = Fraction(-top if numerator.startswith("-") else top, bottom)
        self._note_bits(value.numerator)
        self._note_bits(value.denominator)
        return value  # a ratio stays a ratio even when whole (`4/2` is `2/1`)

    def _STRING(self, token: Token, text: str) -> str:
        return _unescape(text[1:-1], token)

    def _RAW_STRING(self, token: Token, text: str) -> str:
        return _strip_raw(text, 1)

    def _CHAR(self, token: Token, text: str) -> Char:
        value = _unescape(text[2:-1], token)
        if len(value) != 1:
            raise _error(token, "a character literal holds exactly one character")
        return Char(value)

    def _BYTE_STRING(self, token: Token, text: str) -> bytes:
        return _to_bytes(_unescape(text[3:-1], token, allow_unicode=False), token)

    def _RAW_BYTE_STRING(self, token: Token, text: str) -> bytes:
        return _to_bytes(_strip_raw(text, 3), token)

    def _BYTE_CHAR(self, token: Token, text: str) -> int:
        value = _to_bytes(_unescape(text[3:-1], token, allow_unicode=False), token)
        if len(value) != 1:
            raise _error(token, "a byte literal holds exactly one byte")
        return value[0]

    def _PATH(self, token: Token, text: str) -> LispPath:
        return LispPath(_unescape(text[3:-1], token))

    def _RAW_PATH(self, token: Token, text: str) -> LispPath:
        return LispPath(_strip_raw(text, 3))

    def _KEYWORD(self, token: Token, text: str) -> Keyword:
        return Keyword(text[1:])

    def _NAME(self, token: Token, text: str) -> Any:
        if text == "true":
            return True
        if text == "false":
            return False
        return Name(text)


_GRAMMAR = (Path(__file__).with_name("grammar.lark")).read_text(encoding="utf-8")
_parser_lock = threading.Lock()
_builder = _Builder()
_parser: Lark | None = None


def _get_parser() -> Lark:
    global _parser
    if _parser is None:
        # The builder runs as the parser reduces (no tree is built, nothing recurses).
        _parser = Lark(_GRAMMAR, parser="lalr", lexer="basic", regex=True, transformer=_builder)
    return _parser


def _describe(error: UnexpectedInput, source: str) -> ReadError:
    line = getattr(error, "line", None) or 1
    column = getattr(error, "column", None) or 1
    if isinstance(error, UnexpectedEOF) or (isinstance(error, UnexpectedToken) and error.token.type == "$END"):
        return ReadError("unexpected end of input: unbalanced parentheses", Span(line, column))
    if isinstance(error, UnexpectedToken):
        text = str(error.token)
        if error.token.type == "RPAR":
            return ReadError("unexpected `)`", Span(line, column))
        return ReadError(f"unexpected token `{text[:40]}`", Span(line, column))
    if isinstance(error, UnexpectedCharacters):
        index = error.pos_in_stream if error.pos_in_stream is not None else -1
        char = source[index] if 0 <= index < len(source) else "?"
        if source.startswith("#|", index):
            return ReadError("unterminated block comment", Span(line, column))
        if char == '"' or source.startswith(('r"', "r#"), index):
            return ReadError("unterminated or malformed string literal", Span(line, column))
        if char == "\r":
            return ReadError("carriage return must be followed by a newline", Span(line, column))
        return ReadError(f"unexpected character `{char}`", Span(line, column))
    return ReadError("malformed input", Span(line, column))


def parse(source: str) -> Program:
    """Read ``source`` without the cache (what :func:`read` does on a miss)."""
    with _parser_lock:
        parser = _get_parser()
        _builder.spans = {}
        _builder.positions = {}
        _builder.integer_bits = 0
        try:
            # The builder transforms while parsing: the result is its (forms, depth, position).
            forms, depth, top = cast("tuple[tuple[Any, ...], int, Any]", parser.parse(source))
        except UnexpectedInput as error:
            raise _describe(error, source) from None
        except VisitError as error:
            if isinstance(error.orig_exc, LispError):
                raise error.orig_exc from None
            raise
        positions = _builder.positions
        positions[id(forms)] = top
        return Program(forms, _builder.spans, depth, _builder.integer_bits, positions)


#: Programs read from longer sources are not kept: the cache must not hold what a guest
#: wrote (forms, names, positions) long after the run that read it. Sources are cached
#: in tiers by length, so a few long ones cannot push out many short ones, and each
#: tier's entries times its longest source bound what it holds: 256 KiB of source text
#: in all (as (longest source, entries)).
_TIERS = ((1024, 96), (8 * 1024, 12), (64 * 1024, 1))


def _tier(maxsize: int) -> Callable[[str], Program]:
    @lru_cache(maxsize=maxsize)
    def read_cached(source: str) -> Program:
        return _read_uncached(source)

    return read_cached


_CACHED = tuple((longest, _tier(entries)) for longest, entries in _TIERS)


def _read_uncached(source: str) -> Program:
    try:
        return parse(source)
    except RecursionError:
        raise ReadError("input nests too deeply", Span(1, 1)) from None


def read(source: str) -> Program:
    """Read ``source`` into a :class:`Program` (short sources are cached by content)."""
    if not isinstance(source, str):
        raise ReadError("source must be text")
    size = len(source)
    for longest, read_cached in _CACHED:
        if size <= longest:
            return read_cached(source)
    return _read_uncached(source)


def as_data(form: Any) -> Any:
    """Source forms as the data a program sees: ``'x`` and its kin become :class:`Quoted`.

    The compiler reads ``'x`` as ``(quote x)``; quoted data, and the arguments a macro
    receives, hold it as Ketos does, a quote value that prints as ``'x``. Shared parts
    are converted once, and a form with no quote inside is returned as it is.
    """
    done: dict[int, Any] = {}

    def convert(item: Any) -> Any:
        if type(item) is not tuple:
            return item
        found = done.get(id(item))
        if found is not None:
            return found
        head = item[0]
        if len(item) == 2 and type(head) is Name and head in _QUOTE_KINDS:
            result: Any = make_quoted(_QUOTE_KINDS[head], convert(item[1]))
        else:
            parts = tuple(convert(x) for x in item)
            result = item if all(a is b for a, b in zip(parts, item)) else parts
        done[id(item)] = result
        return result

    return convert(form)


def as_code(value: Any) -> Any:
    """Data (a macro's expansion) back as source forms: a :class:`Quoted` becomes ``(quote x)``."""
    done: dict[int, Any] = {}

    def convert(item: Any) -> Any:
        t = type(item)
        if t is Quoted:
            result = convert(item.value)
            head = _QUOTE_HEADS[item.kind]
            for _ in range(item.depth):
                result = (head, result)
            return result
        if t is not tuple:
            return item
        found = done.get(id(item))
        if found is not None:
            return found
        parts = tuple(convert(x) for x in item)
        result = item if all(a is b for a, b in zip(parts, item)) else parts
        done[id(item)] = result
        return result

    return convert(value)


def read_forms(source: str) -> tuple[Any, ...]:
    """Just the data: convenient for tests and for macro-free tools."""
    return read(source).forms
