"""Sandbox limits: runaway scripts stop with a named limit and change nothing.

Run: python examples/sandbox_limits.py
"""

from svit import Process
from svit.errors import SvitError

SCRIPTS = {
    "recursion": "(define (deep n) (+ 1 (deep n))) (define (main input) (deep 0))",
    "spin": "(define (spin n) (spin (+ n 1))) (define (main input) (spin 0))",
    "bomb": '(define (grow s) (grow (concat s s))) (define (main input) (grow "xxxxxxxx"))',
    "huge": "(define (main input) (^ 10 100000))",
}

process = Process.builder("svit://local/examples/sandbox").memory("safe", True).build()
before = process.snapshot()
outcomes = []
for name, source in SCRIPTS.items():
    process.write(f"/lib/{name}", {"source": source})
    snapshot = process.snapshot()
    try:
        process.exec(f"/lib/{name}", None)
        outcomes.append(f"{name}=ran")
    except SvitError as error:
        what = getattr(error, "limit", None) or error.detail
        outcomes.append(f"{name}={what}")
        assert process.snapshot() == snapshot
try:
    process.write("/lib/escape", {"source": "(use os) (define (main input) true)"})
except SvitError as error:
    outcomes.append(f"use={error.code}")
print("sandbox-limits: " + " ".join(outcomes) + f" memory_intact={process.read('/memory/safe')}")
