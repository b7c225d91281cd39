"""What the model is told: the fixed operating text, the Svit Lisp guide, and how they compose.

The guide is the one page a model reads before writing its first script, so it is kept
short (``GUIDE_LIMIT`` characters) and every function it names is listed in
``GUIDE_FUNCTIONS``; tests check that each of those is really callable, and the full
catalogue stays inside the process behind ``(runtime-builtins)``.
"""

from __future__ import annotations

OPERATING_TEXT = (
    "You operate a Svit process: a durable tree of values that you change only through your tools "
    "(discover, read, stat, write, remove, exec). Keep durable facts under /memory. Reusable Svit Lisp "
    "scripts live under /lib; each defines (main input) and runs with exec, either from a /lib path or as "
    "inline source. A write, remove or exec commits one new process version, or nothing when it fails. "
    "(port-call \"name\" input) reaches the host integrations listed under /ports; port calls are immediate "
    "external effects: they happen once and are not rolled back if the script later fails. A message from "
    "another process arrives as \"Message from <address>:\" followed by its body; answer it by running a script "
    "that calls (send! \"<address>\" body). Tool errors come "
    "back as text starting with \"error:\"; read them and correct course. When the task is done, reply with "
    "a final message."
)

LANGUAGE_GUIDE = """\
# Svit Lisp in one page
A script defines (main input); exec calls main once and returns its value as JSON. Comments: ;
Forms: (define (f a b) body) (lambda (x) body) (if test then else) (cond (test e) ... (else e)) (let ((a 1) (b (+ a 1))) body) (do e1 ... last) (and ...) (or ...) (not x). Literals: 1 2.5 "text" true false ().
- Every body (define, lambda, let, a cond clause) is ONE expression: put steps in (do ...), which returns its last value.
- let is sequential (b sees a). and/or stop at the first deciding value.
- Tests must be true or false: (> n 0), (null? v), (empty? xs), never a number, list or value.
- Values are immutable: no set!, no loop statements. To keep something, write it to /memory.

Values. Text, integers, floats and booleans are native. JSON maps, arrays and null (from input, read, exec, port-call) are opaque svit values: read them with (map-get m "key") (an error when absent: test with map-has?), (list-get arr 0), (value-get v "/orders/0/amount") (null when absent), or the functions below. = compares numbers or texts: maps, arrays and null are an error. Build maps with (value-map "k" v ...) ((value-map) is {}) and lists with (list ...). write, value-map, map-set and main's result turn a Lisp list into an array, and () into null: use (to-array xs) or (value-array) where [] must stay []. Arithmetic: + - * // rem min max abs (// rounds down); / on integers gives a ratio that cannot be stored: use // or (/ (float a) b).

Loops: (map f xs) (filter pred xs) (fold f init xs) calls (f acc x); (range n) is 0..n-1, (range a b); or a function calling itself in tail position, in constant space:
(define (total i n acc) (if (> i n) acc (total (+ i 1) n (+ acc i))))
Other recursion nests at most 64 deep.

Functions. On Lisp lists and svit arrays alike (results are Lisp lists): map filter fold sort sort-by find any? every? sum count empty? contains? to-list. Lisp lists only (use to-list on an array first): (append xs x) adds one element, (concat xs ys), first last elt reverse. Maps: keys values entries (each a (key value) list) map-get map-has? (map-set m k v) and (map-remove m k) return a new map. Text: (split text sep) keeps empty pieces, upcase downcase trim contains? starts-with? ends-with? (replace text old new) to-string parse-int parse-float (chars s) gives chars like #'a'; (count s) counts characters; (concat "a" "b"), (format "~a: ~a" k v), (apply join ", " parts). JSON: json-parse json-stringify; (jq filter v) returns an array of results. (safe-call f arg ...) and json-parse-safe return {"ok": true, "value": v} or {"ok": false, "error": text}: read with result-ok? result-value result-error-message. Predicates: map? list? string? number? boolean? null? (is 'integer x). (runtime-builtins) lists all functions.

State and effects: (read "/memory/x") is null when absent; (write "/memory/x" v) needs the parent to exist; (remove path) (discover path). (exec "/lib/name" input) runs another script inside this activation and returns its output. (send! "svit://host/path" body) sends a message when the activation commits. (log-info! "text") logs. (search path pattern) finds text.

Errors: any error rolls back everything the activation did (writes, /lib changes, messages), except port calls. To refuse bad input, check it first and (panic "reason"): nothing changes. Unbound names and wrong argument counts are refused, with a suggestion, before anything runs. To test a script that writes, exec it with "dry_run": true: you see its output, changed paths and messages, and nothing is committed. Limits per activation, in /system/limits: 1,000,000 steps, 8 MiB memory.

Example: a /lib/open-total record {"source": "...", "documentation": "Sums open orders"} with source
(define (open? o) (= (map-get o "status") "open"))
(define (main input)
  (let ((total (sum (map (lambda (o) (map-get o "amount")) (filter open? (read "/memory/orders"))))))
    (do (write "/memory/open_total" total) total)))
then exec {"path": "/lib/open-total"}.
"""

#: The guide's size bound, in characters.
GUIDE_LIMIT = 4_000

#: Every function the guide names; each must be callable in a script.
GUIDE_FUNCTIONS: tuple[str, ...] = (
    # Ketos core
    "+", "-", "*", ">", "=", "//", "/", "rem", "min", "max", "abs", "float", "concat", "format", "join", "list",
    "first", "last", "elt", "reverse", "append", "not", "panic", "chars",
    # collections and text
    "map", "filter", "fold", "sort", "sort-by", "find", "any?", "every?", "sum", "count", "empty?", "range", "to-list", "to-array",
    "keys", "values", "entries", "split", "upcase", "downcase", "trim", "contains?", "starts-with?",
    "ends-with?", "replace", "to-string", "parse-int", "parse-float",
    # the guest catalogue
    "runtime-builtins", "value-map", "value-array", "value-get", "map-get", "map-has?", "map-set", "map-remove", "list-get", "json-parse",
    "json-stringify", "json-parse-safe", "jq", "safe-call", "result-ok?", "result-value",
    "result-error-message", "map?", "list?", "string?", "number?", "boolean?", "null?", "is", "read", "write",
    "remove", "discover", "exec", "send!", "log-info!", "port-call", "search",
)

SYSTEM_PROMPT = f"{OPERATING_TEXT}\n\n{LANGUAGE_GUIDE}"


def compose_system_prompt(address: str, instructions: str | None) -> str:
    """Fixed text and guide, the process address, then the host's instructions when non-blank."""
    prompt = f"{SYSTEM_PROMPT}\n\nProcess address: {address}"
    if instructions is not None and instructions.strip():
        prompt += f"\n\n<instructions>\n{instructions}\n</instructions>"
    return prompt


__all__ = ["GUIDE_FUNCTIONS", "GUIDE_LIMIT", "LANGUAGE_GUIDE", "OPERATING_TEXT", "SYSTEM_PROMPT", "compose_system_prompt"]
