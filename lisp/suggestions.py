"""What to write instead: names models bring from other languages, and near misses.

``ALTERNATIVES`` maps a name that Svit Lisp does not bind to the Svit way of saying
it; ``nearest`` finds bound names a misspelling is close to. The resolver puts both
in its "unbound name" messages, so a mistake costs one reading, not a guessing round.
No key of ``ALTERNATIVES`` may be a bound name (a test checks this).
"""

from __future__ import annotations

from typing import Iterable

__all__ = ["ALTERNATIVES", "alternative", "edit_distance", "nearest"]

_IMMUTABLE = "values are immutable: write to /memory with (write \"/memory/key\" value), or bind a new name with let"
_NO_LOOPS = "no loops: recurse (self tail calls run in constant space) or use map/filter/fold/range"
_LOG = "to print, use (log-info! \"message\" fields); the log is part of the activation's result"
_EQUAL = "compare with (= a b)"
_DEFINE = "define a function with (define (name params...) body) or a value with (define name value)"
_RETURN = "the last expression is the value: a function body is one expression (use do for several)"

#: name -> (the Svit names it points to, the advice shown).
ALTERNATIVES: dict[str, tuple[tuple[str, ...], str]] = {
    # Scheme
    "begin": (("do",), "use (do e1 e2 ...): it evaluates in order and returns the last"),
    "let*": (("let",), "use let: its bindings are already sequential, (let ((a 1) (b (+ a 1))) body)"),
    "letrec": (("define",), "define the recursive function at top level with (define (f args...) body)"),
    "set!": ((), _IMMUTABLE),
    "nil?": (("value-null?",), "test JSON null with (value-null? v); test an empty list, array or map with (empty? xs)"),
    "string-append": (("concat", "to-string"), "join texts with (concat a b ...); turn a number into text with (to-string n)"),
    "string-length": (("len", "count"), "use (len s) for a text's length in bytes, (count v) for a svit array or map"),
    "substring": (("slice",), "use (slice s start end)"),
    "car": (("first",), "use (first xs)"),
    "cdr": (("tail",), "use (tail xs)"),
    "cadr": (("second",), "use (second xs)"),
    "list-ref": (("elt", "list-get"), "use (elt xs i) for a Lisp list, (list-get v i) for a svit array"),
    "display": (("log-info!",), _LOG),
    "newline": (("log-info!",), _LOG),
    "error": (("panic",), "fail with (panic \"message\"): the activation rolls back"),
    "equal?": (("=",), _EQUAL),
    "eq?": (("=",), _EQUAL),
    "eqv?": (("=",), _EQUAL),
    "modulo": (("rem",), "use (rem a b)"),
    "remainder": (("rem",), "use (rem a b)"),
    "foldl": (("fold",), "use (fold f init xs)"),
    "foldr": (("fold",), "use (fold f init (reverse xs))"),
    "string->number": (("parse-int", "parse-float"), "use (parse-int text) or (parse-float text)"),
    "number->string": (("to-string",), "use (to-string n)"),
    "vector": (("value-array",), "build a svit array with (value-array a b ...), or a Lisp list with (list a b ...)"),
    "for-each": (("map",), "use (map f xs); to act on each element, recurse or fold"),
    "define-syntax": (("macro",), "define a macro with (macro (name params...) body)"),
    # Clojure
    "defn": (("define",), _DEFINE),
    "def": (("define",), _DEFINE),
    "fn": (("lambda",), "write an anonymous function as (lambda (params...) body)"),
    "str": (("concat", "to-string"), "join texts with (concat a b ...); turn a value into text with (to-string v)"),
    "get": (("value-get", "map-get"), "read a svit map or array with (value-get v \"/key/0\") or (map-get m \"key\")"),
    "get-in": (("value-get",), "read a nested value with (value-get v \"/a/b/0\")"),
    "nth": (("elt", "list-get"), "use (elt xs i) for a Lisp list, (list-get v i) for a svit array"),
    "rest": (("tail",), "use (tail xs)"),
    "assoc": (("map-set",), "use (map-set m \"key\" value): it returns a new map"),
    "dissoc": (("map-remove",), "use (map-remove m \"key\"): it returns a new map without the key"),
    "hash-map": (("value-map",), "build a svit map with (value-map \"key\" value ...)"),
    "conj": (("append",), "use (append xs x)"),
    "cons": (("concat",), "use (concat (list x) xs)"),
    "inc": (("+",), "use (+ n 1)"),
    "dec": (("-",), "use (- n 1)"),
    "dotimes": ((), _NO_LOOPS),
    "doseq": ((), _NO_LOOPS),
    "loop": ((), _NO_LOOPS),
    "recur": ((), "call the function by its name: a self tail call runs in constant space"),
    "when": (("if",), "use (if condition value) (the else branch is ()); do groups several expressions"),
    "unless": (("if",), "use (if condition () value)"),
    # Common Lisp
    "defun": (("define",), _DEFINE),
    "defmacro": (("macro",), "define a macro with (macro (name params...) body)"),
    "setq": ((), _IMMUTABLE),
    "setf": ((), _IMMUTABLE),
    "incf": ((), _IMMUTABLE),
    "progn": (("do",), "use (do e1 e2 ...)"),
    "mod": (("rem",), "use (rem a b)"),
    "funcall": (("apply",), "call a function value directly, (f a b), or spread a list with (apply f xs)"),
    "dolist": ((), _NO_LOOPS),
    "princ": (("log-info!",), _LOG),
    "length": (("len", "count"), "use (len xs) for a Lisp list or text, (count v) for a svit array or map"),
    "reduce": (("fold",), "use (fold f init xs)"),
    "nil": ((), "write () for the empty list; JSON null arrives as a svit value: test it with (value-null? v)"),
    # JavaScript
    "console.log": (("log-info!",), _LOG),
    "return": ((), _RETURN),
    "while": ((), _NO_LOOPS),
    "for": ((), _NO_LOOPS),
    "undefined": ((), "write () for nothing; test JSON null with (value-null? v)"),
    "===": (("=",), _EQUAL),
    "==": (("=",), _EQUAL),
    "!=": (("/=",), "use (/= a b)"),
    "!==": (("/=",), "use (/= a b)"),
    "&&": (("and",), "use (and a b)"),
    "||": (("or",), "use (or a b)"),
    "!": (("not",), "use (not b)"),
    "%": (("rem",), "use (rem a b)"),
    "JSON.parse": (("json-parse",), "use (json-parse text)"),
    "JSON.stringify": (("json-stringify",), "use (json-stringify v)"),
    "parseInt": (("parse-int",), "use (parse-int text)"),
    "push": (("append",), "use (append xs x): it returns a new list"),
    # Python
    "dict": (("value-map",), "build a svit map with (value-map \"key\" value ...)"),
    "array": (("value-array",), "build a svit array with (value-array a b ...)"),
    "raise": (("panic",), "fail with (panic \"message\"): the activation rolls back"),
    "throw": (("panic",), "fail with (panic \"message\"): the activation rolls back"),
    "assert": (("panic",), "check with (if ok value (panic \"message\"))"),
    "None": ((), "write () for nothing; test JSON null with (value-null? v)"),
    "True": ((), "write true"),
    "False": ((), "write false"),
    "**": (("^",), "use (^ base exponent)"),
    "pow": (("^",), "use (^ base exponent)"),
    "isinstance": (("type-of", "is"), "use (is 'integer x) or (type-of x); for svit values (map? v), (list? v), (string? v)"),
    # Ruby and C
    "puts": (("log-info!",), _LOG),
    "printf": (("log-info!",), _LOG),
    # The reference's own early name for a mutation that does not exist
    "value-set!": (("map-set",), _IMMUTABLE + "; (map-set m \"key\" value) returns a changed copy"),
}


def alternative(name: str) -> str | None:
    """The advice for a name from another language, if the table has one."""
    found = ALTERNATIVES.get(name)
    return found[1] if found is not None else None


def edit_distance(a: str, b: str, cap: int) -> int:
    """Optimal-string-alignment distance (adjacent swaps count once), giving up above ``cap``."""
    if abs(len(a) - len(b)) > cap:
        return cap + 1
    previous2: list[int] = []
    previous = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        current = [i] + [0] * len(b)
        best = current[0]
        for j in range(1, len(b) + 1):
            cost = 0 if a[i - 1] == b[j - 1] else 1
            value = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + cost)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                value = min(value, previous2[j - 2] + 1)
            current[j] = value
            best = min(best, value)
        if best > cap:
            return cap + 1
        previous2, previous = previous, current
    return previous[len(b)]


def nearest(name: str, candidates: Iterable[str], limit: int = 3) -> list[str]:
    """Bound names close to ``name``: within a third of its length (at least 1, at most 3)."""
    cap = min(3, max(1, len(name) // 3))
    lowered = name.lower()
    scored = []
    for candidate in set(candidates):
        if candidate == name:
            continue
        distance = 0 if candidate.lower() == lowered else edit_distance(name, candidate, cap)
        if distance <= cap:
            scored.append((distance, candidate))
    scored.sort()
    return [candidate for _, candidate in scored[:limit]]
