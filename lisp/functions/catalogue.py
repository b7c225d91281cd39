"""Catalogue entries of the Lisp system functions (what ``(runtime-builtins)`` shows).

A system function registered with ``signature``, ``description`` and ``category``
describes itself; the Ketos functions registered before the catalogue existed are
described in :data:`SYSTEM_ENTRIES`. :func:`system_catalogue` merges both (the inline
fields win) and refuses a registered function that has neither, so no function can be
installed without an entry.
"""

from __future__ import annotations

from .registry import SYSTEM_FUNCTIONS

__all__ = ["SYSTEM_ENTRIES", "system_catalogue", "system_entry"]

#: name -> (signature, category, description), one line each for a reader new to Ketos.
SYSTEM_ENTRIES: dict[str, tuple[str, str, str]] = {
    # numbers
    "+": ("(+ n ...)", "numbers", "Sum of the numbers; (+) is 0."),
    "-": ("(- n ...)", "numbers", "Subtract the rest from the first; (- n) negates."),
    "*": ("(* n ...)", "numbers", "Product of the numbers; (*) is 1."),
    "/": ("(/ n ...)", "numbers", "Divide the first by the rest; integers give an exact ratio, e.g. (/ 1 2) is 1/2."),
    "//": ("(// n ...)", "numbers", "Divide and round down to an integer: (// 7 2) is 3."),
    "^": ("(^ base power)", "numbers", "base raised to power: (^ 2 10) is 1024."),
    "rem": ("(rem a b)", "numbers", "Remainder of a divided by b: (rem 7 2) is 1."),
    "abs": ("(abs n)", "numbers", "Absolute value."),
    "ceil": ("(ceil n)", "numbers", "Round up (a ratio stays a ratio, a float stays a float)."),
    "floor": ("(floor n)", "numbers", "Round down (a ratio stays a ratio, a float stays a float)."),
    "round": ("(round n)", "numbers", "Round to the nearest whole value, halves away from zero."),
    "trunc": ("(trunc n)", "numbers", "Round toward zero."),
    "int": ("(int n)", "numbers", "Convert a number to an integer, toward zero: (int 2.5) is 2."),
    "float": ("(float n)", "numbers", "Convert a number to a float."),
    "inf": ("(inf [n ...])", "numbers", "With no argument, positive infinity; with arguments, true if all are infinite."),
    "nan": ("(nan [n ...])", "numbers", "With no argument, not-a-number; with arguments, true if all are NaN."),
    "denom": ("(denom ratio)", "numbers", "Denominator of a ratio (1 for an integer)."),
    "numer": ("(numer ratio)", "numbers", "Numerator of a ratio (the integer itself for an integer)."),
    "fract": ("(fract n)", "numbers", "Fractional part: (fract 5/2) is 1/2."),
    "rat": ("(rat n [d])", "numbers", "An exact ratio from a number, or n/d from two integers."),
    "recip": ("(recip n)", "numbers", "Reciprocal 1/n."),
    "zero": ("(zero n ...)", "numbers", "True if every number is zero."),
    "max": ("(max n ...)", "numbers", "Largest of the numbers."),
    "min": ("(min n ...)", "numbers", "Smallest of the numbers."),
    "<<": ("(<< n bits)", "numbers", "Shift an integer left by bits."),
    ">>": ("(>> n bits)", "numbers", "Shift an integer right by bits."),
    "bit&": ("(bit& n ...)", "numbers", "Bitwise and of integers."),
    "bit|": ("(bit| n ...)", "numbers", "Bitwise or of integers."),
    "bit^": ("(bit^ n ...)", "numbers", "Bitwise exclusive or of integers."),
    "bit!": ("(bit! n)", "numbers", "Bitwise not of an integer."),
    # comparison and logic
    "=": ("(= a b ...)", "comparison", "True if all values are equal (1 and 1.0 are); comparing text with a number, or Svit values, fails."),
    "/=": ("(/= a b ...)", "comparison", "True if all values differ from one another."),
    "eq": ("(eq a b ...)", "comparison", "Like =, but values of different kinds are simply not equal."),
    "ne": ("(ne a b ...)", "comparison", "Negation of eq."),
    "<": ("(< a b ...)", "comparison", "True if the values increase strictly (numbers, text, chars)."),
    ">": ("(> a b ...)", "comparison", "True if the values decrease strictly."),
    "<=": ("(<= a b ...)", "comparison", "True if the values never decrease."),
    ">=": ("(>= a b ...)", "comparison", "True if the values never increase."),
    "not": ("(not bool)", "comparison", "Boolean negation; the argument must be true or false."),
    "xor": ("(xor a b)", "comparison", "Exclusive or of two booleans."),
    # lists and text
    "list": ("(list x ...)", "lists", "A Lisp list of the arguments; (list) is ()."),
    "append": ("(append list x ...)", "lists", "The list with the values added at its end."),
    "elt": ("(elt list index)", "lists", "Item of a Lisp list at a zero-based index."),
    "concat": ("(concat a b ...)", "lists", "Join texts into one text, or Lisp lists into one list."),
    "join": ("(join separator a b ...)", "lists", "Texts joined with separator between them: (join \", \" \"a\" \"b\") is \"a, b\"."),
    "len": ("(len x)", "lists", "Length of a Lisp list or text (chars); not for Svit values."),
    "slice": ("(slice x start [end])", "lists", "Part of a list or text from start up to end (exclusive)."),
    "first": ("(first list)", "lists", "First item of a non-empty list (or first char of text)."),
    "second": ("(second list)", "lists", "Second item of a list."),
    "last": ("(last list)", "lists", "Last item of a non-empty list."),
    "init": ("(init list)", "lists", "Every item but the last."),
    "tail": ("(tail list)", "lists", "Every item but the first."),
    "reverse": ("(reverse list)", "lists", "The items in reverse order."),
    "chars": ("(chars text)", "text", "A list of the chars of a text."),
    "string": ("(string x)", "text", "Text from a char, text or name."),
    "format": ("(format template arg ...)", "text", "Text from a Common Lisp style template: (format \"~a has ~d\" \"box\" 3)."),
    "print": ("(print template arg ...)", "text", "Format to standard output; a script has none, so this does nothing."),
    "println": ("(println template arg ...)", "text", "As print, with a newline; does nothing in a script (use log-info!)."),
    "eprint": ("(eprint template arg ...)", "text", "Format to standard error; a script has none, so this does nothing."),
    "eprintln": ("(eprintln template arg ...)", "text", "As eprint, with a newline; does nothing in a script."),
    # values and types
    "id": ("(id x)", "types", "Its argument, unchanged."),
    "type-of": ("(type-of x)", "types", "The type of a value as a name: integer, float, string, list, svit-value, ..."),
    "is": ("(is 'type x)", "types", "True if x has that type: (is 'integer 3)."),
    "null": ("(null x)", "types", "True for () (the empty list); false for everything else, Svit null included."),
    "bytes": ("(bytes x)", "types", "Bytes from text or a list of integers."),
    "path": ("(path text)", "types", "An inert path value; it opens nothing."),
    "panic": ("(panic [message])", "errors", "Fail the activation with message; nothing it did is committed."),
}


def system_entry(name: str) -> dict[str, str]:
    """The catalogue entry of one system function: inline fields, else the table."""
    spec = SYSTEM_FUNCTIONS[name]
    signature, category, description = SYSTEM_ENTRIES.get(name, (None, None, None))
    entry = {
        "category": spec.category or category,
        "description": spec.description or description,
        "name": name,
        "signature": spec.signature or signature,
    }
    missing = [field for field, value in entry.items() if not value]
    if missing:
        raise LookupError(f"system function {name} has no catalogue {', '.join(missing)}")
    return entry  # type: ignore[return-value]


def system_catalogue() -> list[dict[str, str]]:
    """Every registered system function's entry, in registration order."""
    return [system_entry(name) for name in SYSTEM_FUNCTIONS]
