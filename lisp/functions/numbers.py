"""Arithmetic and bitwise system functions (reference §4.5).

Numbers are ``int`` (never ``bool``), ``float`` and ``Fraction``. As in Ketos a
ratio stays a ratio even when it is whole (``(* 2 1/2)`` is ``1/1``); only the
division of two integers that divides exactly gives an integer. Mixed operands coerce as Ketos does: int+float -> float,
int+ratio -> ratio, ratio+float -> float. Every integer that a function
produces goes through the run's ``max_integer_bits`` check; powers and left
shifts are estimated first so a huge result is refused before it is built.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

from ..context import current
from ..errors import LimitError
from .compare import compare
from .registry import system
from .support import divide_by_zero, overflow, type_error

__all__ = ["add2", "check_int", "div2", "expect_int", "expect_number", "floordiv2", "mul2", "norm_ratio", "pow2", "sub2", "to_float"]

_U32_MAX = 2**32 - 1


# --- classification ------------------------------------------------------------


def _kind(x: Any) -> int:
    """0 int, 1 ratio, 2 float; anything else is a type error."""
    t = type(x)
    if t is int:
        return 0
    if t is float:
        return 2
    if t is Fraction:
        return 1
    raise type_error("number", x)


def expect_number(x: Any) -> Any:
    _kind(x)
    return x


def expect_int(x: Any) -> int:
    if type(x) is not int:
        raise type_error("integer", x)
    return x


def check_int(value: int) -> int:
    if value.bit_length() > current().max_bits:
        raise LimitError("integer bits")
    return value


def norm_ratio(value: Fraction) -> Fraction:
    """A ratio result (kept a ratio even when whole) with both parts size-checked."""
    max_bits = current().max_bits
    if value.numerator.bit_length() > max_bits or value.denominator.bit_length() > max_bits:
        raise LimitError("integer bits")
    return value


def to_float(x: Any) -> float:
    if type(x) is float:
        return x
    try:
        return float(x)
    except OverflowError:
        raise overflow() from None


def _ratio(x: Any) -> Fraction:
    return x if type(x) is Fraction else Fraction(x)


# --- float helpers with IEEE results (Python raises where Rust does not) -------


def _fdiv(a: float, b: float) -> float:
    if b == 0.0:
        if a == 0.0 or math.isnan(a):
            return math.nan
        return math.copysign(math.inf, a) * math.copysign(1.0, b)
    return a / b


def _frem(a: float, b: float) -> float:
    try:
        return math.fmod(a, b)
    except ValueError:
        return math.nan


def _is_odd_integer(f: float) -> bool:
    return math.isfinite(f) and f == math.floor(f) and math.fmod(f, 2.0) != 0.0


def _fpow(a: float, b: float) -> float:
    try:
        return math.pow(a, b)
    except OverflowError:
        return -math.inf if a < 0 and _is_odd_integer(b) else math.inf
    except ValueError:
        if a == 0.0 and b < 0:
            if _is_odd_integer(b):
                return math.copysign(math.inf, a)
            return math.inf
        return math.nan


# --- binary operations ---------------------------------------------------------


def _binary(a: Any, b: Any, op: str) -> Any:
    ka = _kind(a)
    kb = _kind(b)
    if ka == 2 or kb == 2:
        x = to_float(a)
        y = to_float(b)
        if op == "+":
            return x + y
        if op == "-":
            return x - y
        if op == "*":
            return x * y
        if op == "/":
            return _fdiv(x, y)
        return _frem(x, y)
    if ka == 0 and kb == 0:
        if op == "+":
            return check_int(a + b)
        if op == "-":
            return check_int(a - b)
        if op == "*":
            max_bits = current().max_bits
            if a.bit_length() + b.bit_length() > max_bits + 1:
                raise LimitError("integer bits")
            return check_int(a * b)
        if b == 0:
            raise divide_by_zero()
        if op == "/":
            if a % b == 0:
                return check_int(a // b)
            return norm_ratio(Fraction(a, b))
        # rem truncates toward zero, like Rust
        r = abs(a) % abs(b)
        return -r if a < 0 else r
    rx = _ratio(a)
    ry = _ratio(b)
    if op == "+":
        return norm_ratio(rx + ry)
    if op == "-":
        return norm_ratio(rx - ry)
    if op == "*":
        return norm_ratio(rx * ry)
    if ry == 0:
        raise divide_by_zero()
    if op == "/":
        return norm_ratio(rx / ry)
    q = rx / ry
    return norm_ratio(rx - ry * math.trunc(q))


def add2(a: Any, b: Any) -> Any:
    if type(a) is int and type(b) is int:
        r = a + b
        if r.bit_length() > current().max_bits:
            raise LimitError("integer bits")
        return r
    return _binary(a, b, "+")


def sub2(a: Any, b: Any) -> Any:
    if type(a) is int and type(b) is int:
        r = a - b
        if r.bit_length() > current().max_bits:
            raise LimitError("integer bits")
        return r
    return _binary(a, b, "-")


def mul2(a: Any, b: Any) -> Any:
    return _binary(a, b, "*")


def div2(a: Any, b: Any) -> Any:
    return _binary(a, b, "/")


def _floor_value(x: Any) -> Any:
    t = type(x)
    if t is int:
        return x
    if t is float:
        return float(math.floor(x)) if math.isfinite(x) else x
    if t is Fraction:
        return norm_ratio(Fraction(x.numerator // x.denominator))
    raise type_error("number", x)


def floordiv2(a: Any, b: Any) -> Any:
    if type(a) is int and type(b) is int:
        if b == 0:
            raise divide_by_zero()
        return check_int(a // b)
    return _floor_value(_binary(a, b, "/"))


# --- powers and shifts -----------------------------------------------------------


def _int_pow(base: int, exp: int) -> int:
    """``base ** exp`` (exp >= 0), refused before computing when it cannot fit."""
    if base in (0, 1) or exp == 0:
        return 1 if exp == 0 else base
    if base == -1:
        return -1 if exp & 1 else 1
    bits = base.bit_length()
    # the result has more than (bits - 1) * exp bits
    if (bits - 1) * exp + 1 > current().max_bits:
        raise LimitError("integer bits")
    return check_int(base**exp)


def pow2(a: Any, b: Any) -> Any:
    ka = _kind(a)
    kb = _kind(b)
    if kb == 1 and b.denominator == 1:
        b, kb = b.numerator, 0  # a whole ratio exponent is an integer exponent
    if ka == 2 or kb == 2:
        return _fpow(to_float(a), to_float(b))
    if kb == 0:
        if b < 0:
            return _fpow(to_float(a), to_float(b))
        if ka == 0:
            return _int_pow(a, b)
        return norm_ratio(Fraction(_int_pow(a.numerator, b), _int_pow(a.denominator, b)))
    # a ratio exponent that is not whole gives a float
    return _fpow(to_float(a), to_float(b))


def _shift_amount(n: Any) -> int:
    amount = expect_int(n)
    if amount < 0 or amount > _U32_MAX:
        raise overflow()
    return amount


# --- registered functions ----------------------------------------------------------


@system("+", 0, None)
def fn_add(*args: Any) -> Any:
    if not args:
        return 0
    acc = expect_number(args[0])
    for x in args[1:]:
        acc = add2(acc, x)
    return acc


@system("-", 1, None)
def fn_sub(*args: Any) -> Any:
    first = args[0]
    if len(args) == 1:
        k = _kind(first)
        if k == 0:
            return check_int(-first)
        return -first
    acc = expect_number(first)
    for x in args[1:]:
        acc = sub2(acc, x)
    return acc


@system("*", 0, None)
def fn_mul(*args: Any) -> Any:
    if not args:
        return 1
    acc = expect_number(args[0])
    for x in args[1:]:
        acc = mul2(acc, x)
    return acc


@system("/", 1, None)
def fn_div(*args: Any) -> Any:
    first = expect_number(args[0])
    if len(args) == 1:
        return div2(1, first)
    acc = first
    for x in args[1:]:
        acc = div2(acc, x)
    return acc


@system("//", 1, None)
def fn_floor_div(*args: Any) -> Any:
    first = expect_number(args[0])
    if len(args) == 1:
        return floordiv2(1, first)
    acc = first
    for x in args[1:]:
        acc = floordiv2(acc, x)
    return acc


@system("^", 2)
def fn_pow(a: Any, b: Any) -> Any:
    return pow2(a, b)


@system("rem", 2)
def fn_rem(a: Any, b: Any) -> Any:
    return _binary(a, b, "%")


@system("abs", 1)
def fn_abs(x: Any) -> Any:
    k = _kind(x)
    if k == 0:
        return check_int(abs(x))
    return abs(x)


@system("ceil", 1)
def fn_ceil(x: Any) -> Any:
    t = type(x)
    if t is float:
        return math.copysign(float(math.ceil(x)), x) if math.isfinite(x) else x
    if t is Fraction:
        return norm_ratio(Fraction(-(-x.numerator // x.denominator)))
    return expect_number(x)


@system("floor", 1)
def fn_floor(x: Any) -> Any:
    t = type(x)
    if t is float:
        return float(math.floor(x)) if math.isfinite(x) else x
    if t is Fraction:
        return norm_ratio(Fraction(x.numerator // x.denominator))
    return expect_number(x)


def _round_float(x: float) -> float:
    if not math.isfinite(x):
        return x
    r = math.trunc(x)
    if abs(x - r) >= 0.5:
        r += 1 if x > 0 else -1
    return math.copysign(float(r), x)


@system("round", 1)
def fn_round(x: Any) -> Any:
    t = type(x)
    if t is float:
        return _round_float(x)
    if t is Fraction:
        q, r = divmod(abs(x.numerator), x.denominator)
        if 2 * r >= x.denominator:
            q += 1
        return norm_ratio(Fraction(q if x > 0 else -q))
    return expect_number(x)


@system("trunc", 1)
def fn_trunc(x: Any) -> Any:
    t = type(x)
    if t is float:
        return math.copysign(float(math.trunc(x)), x) if math.isfinite(x) else x
    if t is Fraction:
        return norm_ratio(Fraction(math.trunc(x)))
    return expect_number(x)


@system("int", 1)
def fn_int(x: Any) -> Any:
    t = type(x)
    if t is float:
        if not math.isfinite(x):
            raise overflow()
        return check_int(math.trunc(x))
    if t is Fraction:
        return check_int(math.trunc(x))
    return expect_number(x)


@system("float", 1)
def fn_float(x: Any) -> float:
    expect_number(x)
    return to_float(x)


def _expect_float(x: Any) -> float:
    if type(x) is not float:
        raise type_error("float", x)
    return x


@system("inf", 0, None)
def fn_inf(*args: Any) -> Any:
    if not args:
        return math.inf
    return all(math.isinf(_expect_float(x)) for x in args)


@system("nan", 0, None)
def fn_nan(*args: Any) -> Any:
    if not args:
        return math.nan
    return all(math.isnan(_expect_float(x)) for x in args)


@system("denom", 1)
def fn_denom(x: Any) -> int:
    t = type(x)
    if t is int:
        return 1
    if t is Fraction:
        denominator: int = x.denominator
        return denominator
    raise type_error("integer or ratio", x)


@system("numer", 1)
def fn_numer(x: Any) -> int:
    t = type(x)
    if t is Fraction:
        numerator: int = x.numerator
        return numerator
    if t is int:
        whole: int = x
        return whole
    raise type_error("integer or ratio", x)


@system("fract", 1)
def fn_fract(x: Any) -> Any:
    t = type(x)
    if t is float:
        if math.isinf(x):
            return math.nan
        return x - math.trunc(x) if math.isfinite(x) else x
    if t is Fraction:
        return norm_ratio(x - math.trunc(x))
    raise type_error("float or ratio", x)


@system("rat", 1, 2)
def fn_rat(a: Any, b: Any = None) -> Any:
    if b is None:
        t = type(a)
        if t is float:
            if not math.isfinite(a):
                raise overflow()
            return norm_ratio(Fraction(a))
        if t is int:
            return norm_ratio(Fraction(a))
        return expect_number(a)
    expect_int(a)
    expect_int(b)
    if b == 0:
        raise divide_by_zero()
    return norm_ratio(Fraction(a, b))


@system("recip", 1)
def fn_recip(x: Any) -> Any:
    t = type(x)
    if t is float:
        return _fdiv(1.0, x)
    expect_number(x)
    if x == 0:
        raise divide_by_zero()
    return norm_ratio(1 / _ratio(x))


@system("zero", 1, None)
def fn_zero(*args: Any) -> bool:
    result = True
    for x in args:
        expect_number(x)
        if x != 0:
            result = False
            break
    return result


@system("max", 1, None)
def fn_max(*args: Any) -> Any:
    best = args[0]
    for x in args[1:]:
        if compare(best, x) < 0:
            best = x
    return best


@system("min", 1, None)
def fn_min(*args: Any) -> Any:
    best = args[0]
    for x in args[1:]:
        if compare(best, x) > 0:
            best = x
    return best


@system("<<", 2)
def fn_shl(a: Any, n: Any) -> int:
    value = expect_int(a)
    amount = _shift_amount(n)
    if value.bit_length() + amount > current().max_bits:
        raise LimitError("integer bits")
    return value << amount


@system(">>", 2)
def fn_shr(a: Any, n: Any) -> int:
    return expect_int(a) >> _shift_amount(n)


@system("bit&", 0, None)
def fn_bit_and(*args: Any) -> int:
    acc = -1
    for x in args:
        acc &= expect_int(x)
    return acc


@system("bit|", 0, None)
def fn_bit_or(*args: Any) -> int:
    acc = 0
    for x in args:
        acc |= expect_int(x)
    return acc


@system("bit^", 0, None)
def fn_bit_xor(*args: Any) -> int:
    acc = 0
    for x in args:
        acc ^= expect_int(x)
    return acc


@system("bit!", 1)
def fn_bit_not(x: Any) -> int:
    return check_int(~expect_int(x))
