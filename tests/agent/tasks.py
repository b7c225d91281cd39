"""Ordinary agent work, as tasks a model solves through the six tools.

Each :class:`Task` has a plain-language statement (what a user would ask), a seeded
process in the conformance fixtures' ``setup`` format (``svit.spec`` builds it), a
checker of the final state that returns a list of problems (empty when solved), and a
reference solution: the tool calls a competent agent would make.

Most tasks ask for a reusable ``/lib`` script; its checker runs the script on inputs the
statement never shows, on a throwaway fork of the final process, so a task cannot be
solved by computing answers by hand. Checkers never change the process they are given.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any, Callable

from svit.loop.attempts import inbox_message
from svit.process import Process
from svit.spec import Fixture, Run
from svit.values import Script

ADDRESS = "svit://local/tasks/p"
Checker = Callable[[Process], list[str]]


@dataclass(frozen=True)
class Task:
    """One agent task."""

    name: str
    area: str
    statement: str
    setup: dict[str, Any]
    check: Checker
    solution: tuple[tuple[str, dict[str, Any]], ...]


def build(task: Task) -> tuple[Process, Run]:
    """The task's seeded process (the Run keeps its ports and mount folders alive)."""
    setup = {"address": ADDRESS, **task.setup}
    run = Run(Fixture(name=task.name, description=task.statement, steps=[], setup=setup))
    return run.build(), run


# ---------------------------------------------------------------------------- checker helpers


def fork(process: Process) -> Process:
    """A throwaway copy of the committed process (same address, empty outbox)."""
    return process.fork(process.address)


def run_lib(process: Process, path: str, input: Any, *, replace: dict[str, str] | None = None) -> Any:
    """Run a /lib script on a fork; returns the activation (raises on failure)."""
    scratch = fork(process)
    for name, source in (replace or {}).items():
        scratch.write(f"/lib/{name}", Script(source, ""))
    return scratch.exec(path, input)


def same(actual: Any, expected: Any) -> bool:
    """JSON equality where 3 and 3.0 agree but true and 1 do not.

    An empty Lisp list crosses the boundary as null, so null stands for an expected [].
    """
    if expected == [] and actual is None:
        return True
    if isinstance(expected, bool) or isinstance(actual, bool):
        return type(actual) is type(expected) and actual == expected
    if isinstance(expected, (int, float)) and isinstance(actual, (int, float)):
        return abs(actual - expected) < 1e-9
    if isinstance(expected, dict):
        return isinstance(actual, dict) and set(actual) == set(expected) and all(same(actual[k], expected[k]) for k in expected)
    if isinstance(expected, list):
        return isinstance(actual, list) and len(actual) == len(expected) and all(same(a, e) for a, e in zip(actual, expected))
    return type(actual) is type(expected) and actual == expected


def show(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= 200 else text[:200] + "..."


def expect_state(path: str, expected: Any) -> Checker:
    def check(process: Process) -> list[str]:
        actual = process.read(path)
        return [] if same(actual, expected) else [f"{path} is {show(actual)}, expected {show(expected)}"]

    return check


def lib_cases(path: str, cases: list[tuple[Any, Any]], *, replace: dict[str, str] | None = None) -> Checker:
    """The script at ``path`` returns each expected output for its input (on a fork)."""

    def check(process: Process) -> list[str]:
        if process.stat(path) is None:
            return [f"{path} does not exist"]
        problems = []
        for input, expected in cases:
            try:
                output = run_lib(process, path, input, replace=replace).output
            except Exception as exc:
                problems.append(f"{path} failed on {show(input)}: {exc}")
                continue
            if not same(output, expected):
                problems.append(f"{path} on {show(input)} returned {show(output)}, expected {show(expected)}")
        return problems

    return check


def lib_effects(path: str, steps: list[tuple[Any, dict[str, Any]]], *, output: list[Any] | None = None) -> Checker:
    """Run ``path`` with each input in turn on one fork; after each, the given paths hold the given values."""

    def check(process: Process) -> list[str]:
        if process.stat(path) is None:
            return [f"{path} does not exist"]
        scratch = fork(process)
        for index, (input, state) in enumerate(steps):
            try:
                activation = scratch.exec(path, input)
            except Exception as exc:
                return [f"{path} failed on {show(input)}: {exc}"]
            if output is not None and not same(activation.output, output[index]):
                return [f"{path} on {show(input)} returned {show(activation.output)}, expected {show(output[index])}"]
            for where, expected in state.items():
                actual = scratch.read(where)
                if not same(actual, expected):
                    return [f"after {path} on {show(input)}: {where} is {show(actual)}, expected {show(expected)}"]
        return []

    return check


def refuses(path: str, bad_inputs: list[Any]) -> Checker:
    """Each bad input makes the script fail and leaves the process byte-identical."""

    def check(process: Process) -> list[str]:
        if process.stat(path) is None:
            return [f"{path} does not exist"]
        problems = []
        for input in bad_inputs:
            scratch = fork(process)
            before = scratch.snapshot()
            try:
                scratch.exec(path, input)
            except Exception:
                pass
            else:
                problems.append(f"{path} accepted the bad input {show(input)}")
                continue
            if scratch.snapshot() != before:
                problems.append(f"{path} changed the process on the bad input {show(input)}")
        return problems

    return check


def all_of(*checks: Checker) -> Checker:
    def check(process: Process) -> list[str]:
        problems: list[str] = []
        for one in checks:
            problems.extend(one(process))
            if problems:
                break
        return problems

    return check


def write_lib(name: str, source: str, documentation: str) -> tuple[str, dict[str, Any]]:
    return ("write", {"path": f"/lib/{name}", "value": {"source": source, "documentation": documentation}})


def inline(source: str, input: Any = None) -> tuple[str, dict[str, Any]]:
    return ("exec", {"source": source, "input": input})


# ---------------------------------------------------------------------------- seeded data

_rng = random.Random(20261201)
CUSTOMERS = ["acme", "globex", "initech", "umbrella", "hooli", "stark"]
STATUSES = ["open", "closed", "cancelled"]
ORDERS = [
    {"id": i, "customer": _rng.choice(CUSTOMERS), "amount": _rng.randint(1, 500), "status": _rng.choice(STATUSES)}
    for i in range(1, 201)
]
FIRST = ["ada", "alan", "grace", "edsger", "barbara", "donald", "ken", "dennis", "margaret", "john"]
LAST = ["lovelace", "turing", "hopper", "dijkstra", "liskov", "knuth", "thompson", "ritchie", "hamilton", "backus"]
PEOPLE = [
    {"id": i, "fname": _rng.choice(FIRST), "lname": _rng.choice(LAST), "age": _rng.randint(18, 90)} for i in range(1, 121)
]
PRIORITIES = ["low", "medium", "high", "urgent"]
TICKETS = [{"id": i, "priority": _rng.choice(PRIORITIES), "title": f"ticket {i}"} for i in range(1, 301)]
NAMES = [f"{_rng.choice(FIRST)} {_rng.choice(LAST)}" for _ in range(150)]
EVENT_KINDS = ["login", "logout", "purchase", "refund"]
EVENTS = [json.dumps({"kind": _rng.choice(EVENT_KINDS), "user": _rng.randint(1, 40)}) for _ in range(250)]
NOTES = [
    {"id": 1, "text": "Buy milk and eggs", "tags": ["shopping"]},
    {"id": 2, "text": "Call the plumber about the sink", "tags": []},
    {"id": 3, "text": "Renew passport before June", "tags": ["admin"]},
    {"id": 4, "text": "Plan the team offsite", "tags": ["work"]},
]
WORK_ITEMS = [
    {"title": "write report", "owner": "svit://local/team/ana", "due": 12, "done": False},
    {"title": "fix login bug", "owner": "svit://local/team/bo", "due": 25, "done": False},
    {"title": "review budget", "owner": "svit://local/team/ana", "due": 18, "done": True},
    {"title": "update docs", "owner": "svit://local/team/cy", "due": 19, "done": False},
    {"title": "ship release", "owner": "svit://local/team/bo", "due": 20, "done": False},
    {"title": "order laptops", "owner": "svit://local/team/cy", "due": 3, "done": False},
]


def _open_total() -> int:
    return sum(o["amount"] for o in ORDERS if o["status"] == "open")


def _by_customer() -> dict[str, list[int]]:
    groups: dict[str, list[int]] = {}
    for order in ORDERS:
        groups.setdefault(order["customer"], []).append(order["id"])
    return groups


def _priority_counts() -> dict[str, int]:
    counts: dict[str, int] = {}
    for ticket in TICKETS:
        counts[ticket["priority"]] = counts.get(ticket["priority"], 0) + 1
    return counts


def _event_counts() -> dict[str, int]:
    counts: dict[str, int] = {}
    for line in EVENTS:
        kind = json.loads(line)["kind"]
        counts[kind] = counts.get(kind, 0) + 1
    return counts


def _lcg(seed: int, times: int) -> int:
    for _ in range(times):
        seed = (seed * 75 + 74) % 65537
    return seed


def _collatz(n: int) -> int:
    steps = 0
    while n != 1:
        n = n // 2 if n % 2 == 0 else 3 * n + 1
        steps += 1
    return steps


def _primes_below(limit: int) -> int:
    return sum(1 for n in range(2, limit) if all(n % d for d in range(2, int(n**0.5) + 1)))


def _multiples(limit: int) -> int:
    return sum(n for n in range(limit) if n % 3 == 0 or n % 5 == 0)


def _hidden_orders(seed: int, count: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [
        {"id": 1000 + i, "customer": rng.choice(CUSTOMERS), "amount": rng.randint(1, 900), "status": rng.choice(STATUSES)}
        for i in range(count)
    ]


def _totals_by_status(orders: list[dict[str, Any]]) -> dict[str, int]:
    totals: dict[str, int] = {}
    for order in orders:
        totals[order["status"]] = totals.get(order["status"], 0) + order["amount"]
    return totals


def _largest(orders: list[dict[str, Any]]) -> int:
    best = orders[0]
    for order in orders[1:]:
        if order["amount"] > best["amount"]:
            best = order
    return best["id"]


# ---------------------------------------------------------------------------- checkers with bespoke logic


def _check_renamed(process: Process) -> list[str]:
    people = process.read("/memory/people")
    expected = [{"id": p["id"], "first_name": p["fname"], "last_name": p["lname"], "age": p["age"]} for p in PEOPLE]
    return [] if same(people, expected) else [f"/memory/people is {show(people)}, expected records with first_name/last_name"]


def _check_outbox(expected: list[tuple[str, Any]]) -> Checker:
    def check(process: Process) -> list[str]:
        sent = sorted((m["to"], json.dumps(m["body"], sort_keys=True)) for m in process.outbox())
        want = sorted((to, json.dumps(body, sort_keys=True)) for to, body in expected)
        return [] if sent == want else [f"sent {show(sent)}, expected {show(want)}"]

    return check


def delivered(sender: str, body: Any) -> str:
    """What the reasoning loop shows the model for a message delivered from ``sender``."""
    item = {"kind": "message", "message_id": f"{sender}:7:0", "from": sender, "body": body}
    return inbox_message(item).text


def _check_answer(process: Process) -> list[str]:
    want = sum(1 for order in ORDERS if order["status"] == "open")
    sent = process.outbox()
    if len(sent) != 1 or sent[0]["to"] != "svit://local/team/planner":
        return [f"sent {show(sent)}, expected one message to svit://local/team/planner"]
    body = sent[0]["body"]
    if same(body, want) or (isinstance(body, str) and str(want) in body.split()):
        return []
    if isinstance(body, dict) and any(same(v, want) for v in body.values()):
        return []
    return [f"the answer {show(body)} does not say {want}"]


def _check_on_message(process: Process) -> list[str]:
    path = "/lib/on-message"
    if process.stat(path) is None:
        return [f"{path} does not exist"]
    scratch = fork(process)
    items = [
        ({"kind": "message", "message_id": "svit://local/team/a:3:0", "from": "svit://local/team/a", "body": {"ping": 7}},
         [("svit://local/team/a", {"pong": 7})]),
        ({"kind": "message", "message_id": "svit://local/team/b:9:1", "from": "svit://local/team/b", "body": "hello"}, []),
        ({"kind": "message", "message_id": "svit://local/team/b:10:0", "from": "svit://local/team/b", "body": {"ping": -2}},
         [("svit://local/team/b", {"pong": -2})]),
    ]
    seen: list[str] = []
    for item, replies in items:
        try:
            activation = scratch.exec(path, item)
        except Exception as exc:
            return [f"{path} failed on {show(item)}: {exc}"]
        got = [(m["to"], m["body"]) for m in activation.messages]
        if not same([list(r) for r in got], [list(r) for r in replies]):
            return [f"{path} on {show(item)} sent {show(got)}, expected {show(replies)}"]
        seen.append(item["message_id"])
        if not same(scratch.read("/memory/seen"), seen):
            return [f"after {path} on {show(item)}: /memory/seen is {show(scratch.read('/memory/seen'))}, expected {show(seen)}"]
    return []


def _check_broadcast(process: Process) -> list[str]:
    path = "/lib/broadcast"
    if process.stat(path) is None:
        return [f"{path} does not exist"]
    problems = []
    for to, text in ((["svit://local/a/x", "svit://local/b/y", "svit://local/c/z"], "standup in 5"), ([], "nobody"), (["svit://local/solo/one"], "hi")):
        try:
            activation = run_lib(process, path, {"to": to, "text": text})
        except Exception as exc:
            problems.append(f"{path} failed: {exc}")
            continue
        got = [(m["to"], m["body"]) for m in activation.messages]
        want = [(address, {"text": text}) for address in to]
        if got != want:
            problems.append(f"{path} sent {show(got)}, expected {show(want)}")
        if not same(activation.output, len(to)):
            problems.append(f"{path} returned {show(activation.output)}, expected {len(to)}")
    return problems


def _check_withdraw(process: Process) -> list[str]:
    good = lib_effects(
        "/lib/withdraw",
        [({"account": "alice", "amount": 30}, {"/memory/accounts": {"alice": 70, "bob": 20, "carol": 0}}),
         ({"account": "bob", "amount": 20}, {"/memory/accounts": {"alice": 70, "bob": 0, "carol": 0}})],
    )
    bad = refuses(
        "/lib/withdraw",
        [{"account": "bob", "amount": 21}, {"account": "dave", "amount": 1}, {"account": "alice", "amount": 0},
         {"account": "alice", "amount": -5}, {"account": "alice", "amount": "ten"}, {"account": "carol", "amount": 1}],
    )
    return all_of(good, bad)(process)


# ---------------------------------------------------------------------------- solutions (Svit Lisp)

SOL_TOGGLE = """\
(define (main input)
  (let ((path (concat "/memory/flags/" (map-get input "name")))
        (old (read path))
        (now (if (boolean? old) (not old) true)))
    (do (write path now) now)))"""

SOL_INCREMENT = """\
(define (main input)
  (let ((old (read "/memory/counter"))
        (new (+ (if (null? old) 0 old) (map-get input "by"))))
    (do (write "/memory/counter" new) new)))"""

SOL_RESET_COUNTERS = """\
(define (main input)
  (let ((counters (read "/memory/counters")))
    (do (fold (lambda (acc name) (do (write (concat "/memory/counters/" name) 0) (+ acc 1))) 0 (keys counters))
        true)))"""

SOL_OPEN_TOTAL = """\
(define (main input)
  (let ((open (filter (lambda (o) (= (map-get o "status") "open")) (read "/memory/orders")))
        (total (sum (map (lambda (o) (map-get o "amount")) open))))
    (do (write "/memory/open_total" total) total)))"""

SOL_TOTALS_BY_STATUS = """\
(define (add totals order)
  (let ((status (map-get order "status"))
        (old (if (map-has? totals status) (map-get totals status) 0)))
    (map-set totals status (+ old (map-get order "amount")))))
(define (main input) (fold add (value-map) input))"""

SOL_BY_CUSTOMER = """\
(define (add groups order)
  (let ((who (map-get order "customer"))
        (ids (if (map-has? groups who) (to-list (map-get groups who)) ())))
    (map-set groups who (append ids (map-get order "id")))))
(define (main input)
  (let ((groups (fold add (value-map) (read "/memory/orders"))))
    (do (write "/memory/by_customer" groups) true)))"""

SOL_LARGEST = """\
(define (bigger best o) (if (> (map-get o "amount") (map-get best "amount")) o best))
(define (main input)
  (map-get (fold bigger (list-get input 0) input) "id"))"""

SOL_RENAME = """\
(define (rename p)
  (value-map "id" (map-get p "id") "first_name" (map-get p "fname")
             "last_name" (map-get p "lname") "age" (map-get p "age")))
(define (main input)
  (do (write "/memory/people" (map rename (read "/memory/people"))) true))"""

SOL_ACTIVE_EMAILS = """\
(define (main input)
  (sort (map (lambda (u) (map-get u "email"))
             (filter (lambda (u) (map-get u "active")) (map-get input "users")))))"""

SOL_PRIORITY_COUNTS = """\
(define (add counts t)
  (let ((p (map-get t "priority")))
    (map-set counts p (+ 1 (if (map-has? counts p) (map-get counts p) 0)))))
(define (main input)
  (let ((counts (fold add (value-map) (read "/memory/tickets"))))
    (do (write "/memory/priority_counts" counts) counts)))"""

SOL_WORD_COUNT = """\
(define (main input)
  (count (filter (lambda (w) (not (= w ""))) (split (map-get input "text") " "))))"""

SOL_SHOUT = """\
(define (main input) (concat (upcase (trim (map-get input "text"))) "!"))"""

SOL_SLUG = """\
(define (main input)
  (replace (downcase (trim (map-get input "title"))) " " "-"))"""

SOL_CSV = """\
(define (main input) (map trim (split input ",")))"""

SOL_SUMMARY = """\
(define (item i) (format "~a x~a" (map-get i "name") (map-get i "qty")))
(define (main input)
  (let ((parts (map item input)))
    (format "~a items: ~a" (count input) (if (= (count input) 0) "" (apply join ", " parts)))))"""

SOL_COUNT_LETTER = """\
(define (main input)
  (- (count (split (map-get input "text") (map-get input "letter"))) 1))"""

SOL_UPPER_NAMES = """\
(define (main input)
  (do (write "/memory/names_upper" (map upcase (read "/memory/names"))) true))"""

SOL_INITIALS = """\
(define (initial word) (upcase (slice word 0 1)))
(define (main input)
  (apply concat "" (map initial (filter (lambda (w) (not (= w ""))) (split (map-get input "name") " ")))))"""

SOL_ADD_NOTE = """\
(define (main input)
  (let ((notes (read "/memory/notes"))
        (id (+ 1 (fold (lambda (m n) (max m (map-get n "id"))) 0 notes)))
        (note (value-map "id" id "text" (map-get input "text") "tags" (value-array))))
    (do (write "/memory/notes" (append (to-list notes) note)) id)))"""

SOL_REMOVE_NOTE = """\
(define (main input)
  (let ((id (map-get input "id"))
        (notes (read "/memory/notes")))
    (do (if (any? (lambda (n) (= (map-get n "id") id)) notes) true (panic "no such note"))
        (write "/memory/notes" (filter (lambda (n) (not (= (map-get n "id") id))) notes))
        true)))"""

SOL_TAG_NOTE = """\
(define (tagged n id tag)
  (if (= (map-get n "id") id)
      (let ((tags (to-list (map-get n "tags"))))
        (if (any? (lambda (t) (= t tag)) tags) n (map-set n "tags" (append tags tag))))
      n))
(define (main input)
  (let ((id (map-get input "id")) (tag (map-get input "tag")))
    (do (write "/memory/notes" (map (lambda (n) (tagged n id tag)) (read "/memory/notes"))) true)))"""

SOL_FIND_NOTES = """\
(define (main input)
  (let ((word (downcase (map-get input "word"))))
    (map (lambda (n) (map-get n "id"))
         (filter (lambda (n) (contains? (downcase (map-get n "text")) word)) (read "/memory/notes")))))"""

SOL_SEND = """\
(define (main input)
  (do (send! "svit://local/team/alerts" (value-map "text" "build finished" "status" "ok")) true))"""

SOL_OVERDUE = """\
(define (overdue? today t) (and (not (map-get t "done")) (< (map-get t "due") today)))
(define (main input)
  (let ((today (read "/memory/today"))
        (late (filter (lambda (t) (overdue? today t)) (read "/memory/tasks"))))
    (do (map (lambda (t) (send! (map-get t "owner") (value-map "task" (map-get t "title")))) late)
        (count late))))"""

SOL_BROADCAST = """\
(define (main input)
  (let ((to (map-get input "to")))
    (do (map (lambda (a) (send! a (value-map "text" (map-get input "text")))) to)
        (count to))))"""

SOL_ANSWER_MESSAGE = """\
(define (open? o) (= (map-get o "status") "open"))
(define (main input)
  (let ((n (count (filter open? (read "/memory/orders")))))
    (do (send! "svit://local/team/planner" n) n)))"""

SOL_ON_MESSAGE = """\
(define (main input)
  (let ((body (map-get input "body"))
        (seen (to-list (read "/memory/seen"))))
    (do (write "/memory/seen" (to-array (append seen (map-get input "message_id"))))
        (if (and (map? body) (map-has? body "ping"))
            (do (send! (map-get input "from") (value-map "pong" (map-get body "ping"))) true)
            false))))"""

SOL_FORWARD_MESSAGE = """\
(define (main input)
  (do (send! (map-get (read "/memory/routes") "facilities") (value-map "ticket" 42)) true))"""

SOL_QUADRUPLE = """\
(define (main input) (exec "/lib/double" (exec "/lib/double" input)))"""

SOL_CLEAN_ALL = """\
(define (main input) (map (lambda (t) (exec "/lib/clean" t)) input))"""

SOL_WITHDRAW = """\
(define (main input)
  (let ((account (map-get input "account"))
        (amount (map-get input "amount"))
        (path (concat "/memory/accounts/" account))
        (balance (read path)))
    (cond ((not (number? balance)) (panic "unknown account"))
          ((not (number? amount)) (panic "amount must be a number"))
          ((<= amount 0) (panic "amount must be positive"))
          ((> amount balance) (panic "insufficient funds"))
          (else (do (write path (- balance amount)) (- balance amount))))))"""

SOL_TRANSFER = """\
(define (main input)
  (let ((from (concat "/memory/accounts/" (map-get input "from")))
        (to (concat "/memory/accounts/" (map-get input "to")))
        (amount (map-get input "amount"))
        (a (read from))
        (b (read to)))
    (do (if (and (number? a) (number? b)) true (panic "unknown account"))
        (if (and (number? amount) (> amount 0)) true (panic "bad amount"))
        (if (<= amount a) true (panic "insufficient funds"))
        (write from (- a amount))
        (write to (+ b amount))
        (write "/memory/transfers" (append (to-list (read "/memory/transfers")) input))
        true)))"""

SOL_ADD_USER = """\
(define (main input)
  (let ((name (trim (map-get input "name")))
        (email (map-get input "email"))
        (users (read "/memory/users")))
    (do (if (= name "") (panic "name is empty") true)
        (if (contains? email "@") true (panic "email needs @"))
        (if (any? (lambda (u) (= (map-get u "email") email)) users) (panic "duplicate email") true)
        (write "/memory/users" (append (to-list users) (value-map "name" name "email" email)))
        (count users))))"""

SOL_MULTIPLES = """\
(define (go n limit acc)
  (if (>= n limit) acc
      (go (+ n 1) limit (if (or (= (rem n 3) 0) (= (rem n 5) 0)) (+ acc n) acc))))
(define (main input) (go 0 (map-get input "limit") 0))"""

SOL_LCG = """\
(define (step x times)
  (if (= times 0) x (step (rem (+ (* x 75) 74) 65537) (- times 1))))
(define (main input) (step (map-get input "seed") (map-get input "times")))"""

SOL_COLLATZ = """\
(define (go n steps)
  (cond ((= n 1) steps)
        ((= (rem n 2) 0) (go (// n 2) (+ steps 1)))
        (else (go (+ (* 3 n) 1) (+ steps 1)))))
(define (main input) (go (map-get input "n") 0))"""

SOL_PRIMES = """\
(define (prime? n d)
  (cond ((> (* d d) n) true)
        ((= (rem n d) 0) false)
        (else (prime? n (+ d 1)))))
(define (main input)
  (count (filter (lambda (n) (prime? n 2)) (range 2 (map-get input "limit")))))"""

SOL_SETTINGS = """\
(define (main input)
  (let ((parsed (json-parse-safe input)))
    (if (result-ok? parsed)
        (let ((v (result-value parsed)))
          (if (and (map? v) (map-has? v "port")) (map-get v "port") 8080))
        8080)))"""

SOL_EVENT_COUNTS = """\
(define (add counts line)
  (let ((kind (map-get (json-parse line) "kind")))
    (map-set counts kind (+ 1 (if (map-has? counts kind) (map-get counts kind) 0)))))
(define (main input)
  (let ((counts (fold add (value-map) (read "/memory/events"))))
    (do (write "/memory/event_counts" counts) counts)))"""

SOL_WEATHER = """\
(define (main input)
  (let ((report (port-call "weather" (value-map "city" "Oslo"))))
    (do (write "/memory/temp" (value-get report "/temp_c")) true)))"""

SOL_COUNTER = """\
(define (main input)
  (let ((n (+ 1 (read "/memory/visits"))))
    (do (write "/memory/visits" n) n)))"""


# ---------------------------------------------------------------------------- the tasks

TASKS: tuple[Task, ...] = (
    # ---- state
    Task(
        "counter-bump", "state",
        "Add one to the visit counter at /memory/visits.",
        {"memory": {"visits": 41}},
        expect_state("/memory/visits", 42),
        (inline(SOL_COUNTER),),
    ),
    Task(
        "flag-toggle", "state",
        "Write a reusable script /lib/toggle. Given {\"name\": \"...\"} it flips the boolean flag /memory/flags/<name> "
        "(a flag that does not exist yet counts as false, so it becomes true) and returns the new value.",
        {"memory": {"flags": {"dark_mode": False, "beta": True}}},
        lib_effects(
            "/lib/toggle",
            [({"name": "dark_mode"}, {"/memory/flags/dark_mode": True}), ({"name": "beta"}, {"/memory/flags/beta": False}),
             ({"name": "fresh"}, {"/memory/flags/fresh": True}), ({"name": "fresh"}, {"/memory/flags/fresh": False})],
            output=[True, False, True, False],
        ),
        (write_lib("toggle", SOL_TOGGLE, "Flips /memory/flags/<name> and returns the new value"),),
    ),
    Task(
        "counter-increment-lib", "state",
        "Write a reusable script /lib/increment. Given {\"by\": n} it adds n to the number at /memory/counter "
        "(treat a missing counter as 0) and returns the new value.",
        {"memory": {"counter": 10}},
        lib_effects(
            "/lib/increment",
            [({"by": 5}, {"/memory/counter": 15}), ({"by": -2}, {"/memory/counter": 13}), ({"by": 100}, {"/memory/counter": 113})],
            output=[15, 13, 113],
        ),
        (write_lib("increment", SOL_INCREMENT, "Adds input.by to /memory/counter"),),
    ),
    Task(
        "reset-counters", "state",
        "Set every counter in /memory/counters back to 0 (there are many of them).",
        {"memory": {"counters": {f"c{i:03d}": (i * 37) % 101 + 1 for i in range(120)}}},
        expect_state("/memory/counters", {f"c{i:03d}": 0 for i in range(120)}),
        (inline(SOL_RESET_COUNTERS),),
    ),
    # ---- records
    Task(
        "open-orders-total", "records",
        "Store the total amount of all orders with status \"open\" in /memory/orders at /memory/open_total.",
        {"memory": {"orders": ORDERS}},
        expect_state("/memory/open_total", _open_total()),
        (inline(SOL_OPEN_TOTAL),),
    ),
    Task(
        "totals-by-status-lib", "records",
        "Write a reusable script /lib/totals-by-status. Its input is an array of orders like those in /memory/orders "
        "(each has id, customer, amount, status); it returns a map from each status that occurs to the sum of the "
        "amounts of the orders with that status.",
        {"memory": {"orders": ORDERS[:20]}},
        lib_cases(
            "/lib/totals-by-status",
            [(orders, _totals_by_status(orders)) for orders in (_hidden_orders(1, 60), _hidden_orders(2, 5), _hidden_orders(3, 1))],
        ),
        (write_lib("totals-by-status", SOL_TOTALS_BY_STATUS, "Sums order amounts per status"),),
    ),
    Task(
        "group-orders-by-customer", "records",
        "Group the orders in /memory/orders by customer: store at /memory/by_customer a map from each customer name "
        "to the array of that customer's order ids, in the order the orders appear.",
        {"memory": {"orders": ORDERS}},
        expect_state("/memory/by_customer", _by_customer()),
        (inline(SOL_BY_CUSTOMER),),
    ),
    Task(
        "largest-order-lib", "records",
        "Write a reusable script /lib/largest. Its input is a non-empty array of orders (id, customer, amount, status); "
        "it returns the id of the order with the largest amount (the first one if several tie).",
        {"memory": {"orders": ORDERS[:10]}},
        lib_cases(
            "/lib/largest",
            [(orders, _largest(orders)) for orders in (_hidden_orders(4, 80), _hidden_orders(5, 1), _hidden_orders(6, 7))]
            + [([{"id": 1, "amount": 5}, {"id": 2, "amount": 9}, {"id": 3, "amount": 9}], 2)],
        ),
        (write_lib("largest", SOL_LARGEST, "Id of the order with the largest amount"),),
    ),
    Task(
        "rename-person-fields", "records",
        "The records in /memory/people use the fields fname and lname. Rename them to first_name and last_name in "
        "every record, keeping the other fields and the order of the records.",
        {"memory": {"people": PEOPLE}},
        _check_renamed,
        (inline(SOL_RENAME),),
    ),
    Task(
        "active-emails-lib", "records",
        "Write a reusable script /lib/active-emails. Given {\"users\": [{\"email\": ..., \"active\": true/false}, ...]} "
        "it returns the emails of the active users, sorted alphabetically.",
        {},
        lib_cases(
            "/lib/active-emails",
            [({"users": [{"email": "zed@x.io", "active": True}, {"email": "amy@x.io", "active": True}, {"email": "bob@x.io", "active": False}]},
              ["amy@x.io", "zed@x.io"]),
             ({"users": [{"email": f"u{i:02d}@y.org", "active": i % 3 == 0} for i in range(30, 0, -1)]},
              [f"u{i:02d}@y.org" for i in range(1, 31) if i % 3 == 0])],
        ),
        (write_lib("active-emails", SOL_ACTIVE_EMAILS, "Sorted emails of active users"),),
    ),
    Task(
        "ticket-priority-counts", "records",
        "Count the tickets in /memory/tickets by priority and store the counts at /memory/priority_counts as a map "
        "from priority to number of tickets.",
        {"memory": {"tickets": TICKETS}},
        expect_state("/memory/priority_counts", _priority_counts()),
        (inline(SOL_PRIORITY_COUNTS),),
    ),
    # ---- text
    Task(
        "word-count-lib", "text",
        "Write a reusable script /lib/word-count. Given {\"text\": \"...\"} it returns how many words the text has; "
        "words are separated by one or more spaces, and the text may start or end with spaces.",
        {},
        lib_cases(
            "/lib/word-count",
            [({"text": "the quick brown fox"}, 4), ({"text": "  spaced   out  words "}, 3), ({"text": ""}, 0),
             ({"text": "one"}, 1), ({"text": " ".join(["w"] * 500)}, 500)],
        ),
        (write_lib("word-count", SOL_WORD_COUNT, "Counts space-separated words"),),
    ),
    Task(
        "shout-lib", "text",
        "Write a reusable script /lib/shout. Given {\"text\": \"...\"} it returns the text with surrounding "
        "whitespace removed, in upper case, followed by \"!\".",
        {},
        lib_cases("/lib/shout", [({"text": "  hello there "}, "HELLO THERE!"), ({"text": "ok"}, "OK!"), ({"text": "MiXeD case"}, "MIXED CASE!")]),
        (write_lib("shout", SOL_SHOUT, "Trimmed, upper-cased text with !"),),
    ),
    Task(
        "slug-lib", "text",
        "Write a reusable script /lib/slug. Given {\"title\": \"...\"} it returns a URL slug: surrounding whitespace "
        "removed, lower case, and each space replaced by \"-\" (titles have single spaces between words).",
        {},
        lib_cases("/lib/slug", [({"title": "  Hello World  "}, "hello-world"), ({"title": "Svit Lisp Guide v2"}, "svit-lisp-guide-v2"), ({"title": "one"}, "one")]),
        (write_lib("slug", SOL_SLUG, "Title to URL slug"),),
    ),
    Task(
        "csv-line-lib", "text",
        "Write a reusable script /lib/parse-csv-line. Its input is one line of comma-separated text such as "
        "\"a, b ,c\"; it returns the array of fields with surrounding spaces removed.",
        {},
        lib_cases("/lib/parse-csv-line", [("a, b ,c", ["a", "b", "c"]), ("single", ["single"]), ("x,,y", ["x", "", "y"]), (" 1 , 22,333 ", ["1", "22", "333"])]),
        (write_lib("parse-csv-line", SOL_CSV, "Splits a CSV line into trimmed fields"),),
    ),
    Task(
        "inventory-summary-lib", "text",
        "Write a reusable script /lib/summarize. Its input is an array of items like [{\"name\": \"apple\", \"qty\": 2}, "
        "{\"name\": \"pear\", \"qty\": 5}]; it returns the text \"2 items: apple x2, pear x5\" (the number of items, "
        "then each item as name x qty, joined by \", \"). For an empty array it returns \"0 items: \".",
        {"memory": {"inventory": [{"name": "apple", "qty": 2}, {"name": "pear", "qty": 5}]}},
        lib_cases(
            "/lib/summarize",
            [([{"name": "fig", "qty": 1}], "1 items: fig x1"), ([], "0 items: "),
             ([{"name": "a", "qty": 10}, {"name": "b", "qty": 0}, {"name": "c", "qty": 3}], "3 items: a x10, b x0, c x3")],
        ),
        (write_lib("summarize", SOL_SUMMARY, "Inventory summary text"),),
    ),
    Task(
        "count-letter-lib", "text",
        "Write a reusable script /lib/count-letter. Given {\"text\": \"...\", \"letter\": \"x\"} it returns how many "
        "times the letter occurs in the text (case-sensitive).",
        {},
        lib_cases(
            "/lib/count-letter",
            [({"text": "banana", "letter": "a"}, 3), ({"text": "banana", "letter": "z"}, 0), ({"text": "aaaa", "letter": "a"}, 4),
             ({"text": "Anna", "letter": "a"}, 1), ({"text": "xyz" * 300, "letter": "y"}, 300)],
        ),
        (write_lib("count-letter", SOL_COUNT_LETTER, "Occurrences of a letter"),),
    ),
    Task(
        "upper-case-names", "text",
        "Store at /memory/names_upper the names of /memory/names in upper case, in the same order.",
        {"memory": {"names": NAMES}},
        expect_state("/memory/names_upper", [n.upper() for n in NAMES]),
        (inline(SOL_UPPER_NAMES),),
    ),
    Task(
        "initials-lib", "text",
        "Write a reusable script /lib/initials. Given {\"name\": \"...\"} it returns the upper-case first letters of "
        "its space-separated words, e.g. \"grace brewster hopper\" gives \"GBH\".",
        {},
        lib_cases("/lib/initials", [({"name": "ada lovelace"}, "AL"), ({"name": " alan  mathison turing"}, "AMT"), ({"name": "Ken"}, "K")]),
        (write_lib("initials", SOL_INITIALS, "Initials of a name"),),
    ),
    # ---- lists of notes
    Task(
        "add-note-lib", "notes",
        "Notes are kept in /memory/notes as an array of {\"id\", \"text\", \"tags\"}. Write a reusable script "
        "/lib/add-note: given {\"text\": \"...\"} it appends a note with that text, no tags (an empty array) and an id "
        "one more than the largest id in use, and returns the new id.",
        {"memory": {"notes": NOTES}},
        lib_effects(
            "/lib/add-note",
            [({"text": "water plants"}, {"/memory/notes": NOTES + [{"id": 5, "text": "water plants", "tags": []}]}),
             ({"text": "pay rent"}, {"/memory/notes": NOTES + [{"id": 5, "text": "water plants", "tags": []}, {"id": 6, "text": "pay rent", "tags": []}]})],
            output=[5, 6],
        ),
        (write_lib("add-note", SOL_ADD_NOTE, "Appends a note and returns its id"),),
    ),
    Task(
        "remove-note-lib", "notes",
        "Notes are kept in /memory/notes as an array of {\"id\", \"text\", \"tags\"}. Write a reusable script "
        "/lib/remove-note: given {\"id\": n} it removes the note with that id, keeping the others in order. If no "
        "note has that id it must fail and change nothing.",
        {"memory": {"notes": NOTES}},
        all_of(
            lib_effects("/lib/remove-note", [({"id": 3}, {"/memory/notes": [NOTES[0], NOTES[1], NOTES[3]]}), ({"id": 1}, {"/memory/notes": [NOTES[1], NOTES[3]]})]),
            refuses("/lib/remove-note", [{"id": 99}]),
        ),
        (write_lib("remove-note", SOL_REMOVE_NOTE, "Removes the note with input.id"),),
    ),
    Task(
        "tag-note-lib", "notes",
        "Notes are kept in /memory/notes as an array of {\"id\", \"text\", \"tags\"}. Write a reusable script "
        "/lib/tag-note: given {\"id\": n, \"tag\": \"...\"} it adds the tag to the end of that note's tags unless the "
        "note already has it. Other notes stay as they are.",
        {"memory": {"notes": NOTES}},
        lib_effects(
            "/lib/tag-note",
            [({"id": 2, "tag": "home"}, {"/memory/notes/1/tags": ["home"]}),
             ({"id": 2, "tag": "home"}, {"/memory/notes/1/tags": ["home"]}),
             ({"id": 1, "tag": "urgent"}, {"/memory/notes/0/tags": ["shopping", "urgent"], "/memory/notes/3": NOTES[3]})],
        ),
        (write_lib("tag-note", SOL_TAG_NOTE, "Adds a tag to a note once"),),
    ),
    Task(
        "find-notes-lib", "notes",
        "Notes are kept in /memory/notes as an array of {\"id\", \"text\", \"tags\"}. Write a reusable script "
        "/lib/find-notes: given {\"word\": \"...\"} it returns the ids of the notes whose text contains the word, "
        "ignoring upper/lower case, in note order.",
        {"memory": {"notes": NOTES}},
        lib_cases("/lib/find-notes", [({"word": "the"}, [2, 4]), ({"word": "MILK"}, [1]), ({"word": "zebra"}, []), ({"word": "e"}, [1, 2, 3, 4])]),
        (write_lib("find-notes", SOL_FIND_NOTES, "Ids of notes containing a word"),),
    ),
    # ---- messages
    Task(
        "send-alert", "messages",
        "Send the message {\"text\": \"build finished\", \"status\": \"ok\"} to svit://local/team/alerts.",
        {},
        _check_outbox([("svit://local/team/alerts", {"text": "build finished", "status": "ok"})]),
        (inline(SOL_SEND),),
    ),
    Task(
        "notify-overdue", "messages",
        "/memory/tasks lists work items with a title, an owner address, a due day and whether they are done; "
        "/memory/today is today's day number. Send every owner of an unfinished item whose due day is before today "
        "one message {\"task\": <title>} per such item.",
        {"memory": {"tasks": WORK_ITEMS, "today": 20}},
        _check_outbox([(t["owner"], {"task": t["title"]}) for t in WORK_ITEMS if not t["done"] and t["due"] < 20]),
        (inline(SOL_OVERDUE),),
    ),
    Task(
        "broadcast-lib", "messages",
        "Write a reusable script /lib/broadcast. Given {\"to\": [addresses], \"text\": \"...\"} it sends the message "
        "{\"text\": <text>} to each address in order and returns how many messages it sent.",
        {},
        _check_broadcast,
        (write_lib("broadcast", SOL_BROADCAST, "Sends a text to several addresses"),),
    ),
    Task(
        "answer-message", "messages",
        delivered("svit://local/team/planner", "How many orders in /memory/orders are open right now? Reply with just the number."),
        {"memory": {"orders": ORDERS}},
        _check_answer,
        (inline(SOL_ANSWER_MESSAGE),),
    ),
    Task(
        "on-message-lib", "messages",
        "Write a reusable script /lib/on-message for handling delivered messages. Its input is a delivered message "
        "{\"kind\": \"message\", \"message_id\": \"...\", \"from\": <sender address>, \"body\": <any value>}. It appends "
        "every message's id to the array /memory/seen; when the body is a map with a \"ping\" number n, it also answers "
        "the sender with {\"pong\": n}.",
        {"memory": {"seen": []}},
        _check_on_message,
        (write_lib("on-message", SOL_ON_MESSAGE, "Records each message id; answers pings"),),
    ),
    Task(
        "forward-message", "messages",
        delivered("svit://local/team/intake",
                  {"request": "forward", "ticket": 42, "team": "facilities",
                   "note": "Send {\"ticket\": 42} to the address /memory/routes lists for this team."}),
        {"memory": {"routes": {"facilities": "svit://local/team/facilities", "it": "svit://local/team/it"}}},
        _check_outbox([("svit://local/team/facilities", {"ticket": 42})]),
        (inline(SOL_FORWARD_MESSAGE),),
    ),
    # ---- nested exec
    Task(
        "quadruple-via-double", "nested-exec",
        "/lib/double doubles a number. Write /lib/quadruple, which returns four times its input number by running "
        "/lib/double (do not repeat its logic).",
        {"library": {"double": "(define (main input) (* 2 input))"}},
        all_of(
            lib_cases("/lib/quadruple", [(3, 12), (-5, -20), (0, 0)]),
            lib_cases("/lib/quadruple", [(2, 18)], replace={"double": "(define (main input) (* 3 input))"}),
        ),
        (write_lib("quadruple", SOL_QUADRUPLE, "Four times the input, through /lib/double"),),
    ),
    Task(
        "clean-all-via-clean", "nested-exec",
        "/lib/clean tidies one text. Write /lib/clean-all: its input is an array of texts and it returns the array of "
        "results of running /lib/clean on each of them, in order.",
        {"library": {"clean": "(define (main input) (concat \"[\" input \"]\"))"}},
        all_of(
            lib_cases("/lib/clean-all", [(["a", "b"], ["[a]", "[b]"]), (["x"], ["[x]"])]),
            lib_cases("/lib/clean-all", [(["q", "r", "s"], ["<q>", "<r>", "<s>"])], replace={"clean": "(define (main input) (concat \"<\" input \">\"))"}),
        ),
        (write_lib("clean-all", SOL_CLEAN_ALL, "Runs /lib/clean on each text"),),
    ),
    # ---- failure and rollback
    Task(
        "withdraw-lib", "rollback",
        "Balances are in /memory/accounts. Write a reusable script /lib/withdraw: given {\"account\": name, "
        "\"amount\": n} it subtracts the amount from that account and returns the new balance. It must fail and "
        "change nothing when the account does not exist, the amount is not a positive number, or the balance is "
        "too small.",
        {"memory": {"accounts": {"alice": 100, "bob": 20, "carol": 0}}},
        _check_withdraw,
        (write_lib("withdraw", SOL_WITHDRAW, "Withdraws from an account, refusing bad requests"),),
    ),
    Task(
        "transfer-lib", "rollback",
        "Balances are in /memory/accounts and /memory/transfers records every transfer made. Write a reusable script "
        "/lib/transfer: given {\"from\": name, \"to\": name, \"amount\": n} it moves the amount between the two "
        "accounts and appends the input to /memory/transfers. If either account is unknown, the amount is not "
        "positive, or the sender has too little money, it must fail and change nothing at all.",
        {"memory": {"accounts": {"ann": 50, "ben": 10}, "transfers": []}},
        all_of(
            lib_effects("/lib/transfer", [({"from": "ann", "to": "ben", "amount": 20},
                                           {"/memory/accounts": {"ann": 30, "ben": 30}, "/memory/transfers": [{"from": "ann", "to": "ben", "amount": 20}]})]),
            refuses("/lib/transfer", [{"from": "ben", "to": "ann", "amount": 11}, {"from": "ann", "to": "zoe", "amount": 1},
                                      {"from": "ann", "to": "ben", "amount": 0}, {"from": "kim", "to": "ben", "amount": 1}]),
        ),
        (write_lib("transfer", SOL_TRANSFER, "Moves money between accounts and logs it"),),
    ),
    Task(
        "add-user-lib", "rollback",
        "/memory/users is an array of {\"name\", \"email\"}. Write a reusable script /lib/add-user: given {\"name\", "
        "\"email\"} it appends the user (name with surrounding spaces removed) and returns how many users there were "
        "before. It must fail and change nothing when the name is empty, the email has no \"@\", or a user with "
        "that email already exists.",
        {"memory": {"users": [{"name": "Ada", "email": "ada@x.io"}]}},
        all_of(
            lib_effects("/lib/add-user", [({"name": " Bo ", "email": "bo@x.io"}, {"/memory/users": [{"name": "Ada", "email": "ada@x.io"}, {"name": "Bo", "email": "bo@x.io"}]})], output=[1]),
            refuses("/lib/add-user", [{"name": "", "email": "e@x.io"}, {"name": "Cy", "email": "cy.example.com"}, {"name": "Ada2", "email": "ada@x.io"}]),
        ),
        (write_lib("add-user", SOL_ADD_USER, "Adds a user after validating"),),
    ),
    # ---- long loops
    Task(
        "sum-multiples-lib", "loops",
        "Write a reusable script /lib/sum-multiples. Given {\"limit\": n} it returns the sum of all non-negative "
        "integers below n that are divisible by 3 or by 5. It must work for n up to 100000.",
        {},
        lib_cases("/lib/sum-multiples", [({"limit": 10}, 23), ({"limit": 100000}, _multiples(100000)), ({"limit": 1}, 0), ({"limit": 1234}, _multiples(1234))]),
        (write_lib("sum-multiples", SOL_MULTIPLES, "Sum of multiples of 3 or 5 below limit"),),
    ),
    Task(
        "iterate-lib", "loops",
        "Write a reusable script /lib/iterate. Given {\"seed\": x, \"times\": t} it applies x -> (x * 75 + 74) mod 65537 "
        "t times and returns the final x. It must work for t up to 50000.",
        {},
        lib_cases("/lib/iterate", [({"seed": 1, "times": 1}, _lcg(1, 1)), ({"seed": 7, "times": 50000}, _lcg(7, 50000)), ({"seed": 42, "times": 0}, 42)]),
        (write_lib("iterate", SOL_LCG, "Iterates a linear congruential step"),),
    ),
    Task(
        "collatz-lib", "loops",
        "Write a reusable script /lib/collatz. Given {\"n\": n} (a positive integer) it returns how many steps the "
        "Collatz process (halve even numbers, replace odd n by 3n+1) takes to reach 1.",
        {},
        lib_cases("/lib/collatz", [({"n": 1}, 0), ({"n": 27}, _collatz(27)), ({"n": 97}, _collatz(97)), ({"n": 6171}, _collatz(6171))]),
        (write_lib("collatz", SOL_COLLATZ, "Collatz step count"),),
    ),
    Task(
        "count-primes-lib", "loops",
        "Write a reusable script /lib/count-primes. Given {\"limit\": n} it returns how many prime numbers are below n. "
        "It must work for n up to 2000.",
        {},
        lib_cases("/lib/count-primes", [({"limit": 10}, 4), ({"limit": 2}, 0), ({"limit": 2000}, _primes_below(2000))]),
        (write_lib("count-primes", SOL_PRIMES, "Counts primes below limit"),),
    ),
    # ---- JSON
    Task(
        "settings-port-lib", "json",
        "Write a reusable script /lib/settings-port. Its input is a text that should hold a JSON object; it returns "
        "that object's \"port\" field, or 8080 when the field is missing, the JSON is not an object, or the text is "
        "not valid JSON.",
        {},
        lib_cases("/lib/settings-port", [("{\"port\": 9000, \"host\": \"a\"}", 9000), ("{\"host\": \"a\"}", 8080), ("not json {", 8080), ("[1, 2]", 8080)]),
        (write_lib("settings-port", SOL_SETTINGS, "Port from JSON settings text"),),
    ),
    Task(
        "event-kind-counts", "json",
        "/memory/events is an array of JSON texts, each an object with a \"kind\" field. Store at /memory/event_counts "
        "a map from each kind to how many events have it.",
        {"memory": {"events": EVENTS}},
        expect_state("/memory/event_counts", _event_counts()),
        (inline(SOL_EVENT_COUNTS),),
    ),
    # ---- ports
    Task(
        "weather-port", "ports",
        "Ask the weather port for Oslo and store the temperature in Celsius it reports at /memory/temp.",
        {"ports": {"weather": {"returns": {"city": "Oslo", "temp_c": 7, "wind": "calm"}, "description": "Current weather for {\"city\": name}"}}},
        expect_state("/memory/temp", 7),
        (inline(SOL_WEATHER),),
    ),
)

TASKS_BY_NAME: dict[str, Task] = {task.name: task for task in TASKS}


__all__ = ["ADDRESS", "TASKS", "TASKS_BY_NAME", "Task", "build", "fork", "run_lib", "same"]
