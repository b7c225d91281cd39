"""A self-authoring library: one script writes another, runs it in the same activation,
and the new script stays for later activations.

Run: python examples/self_authoring.py
"""

from svit import Process

TEACHER = """
(define (main input)
  (do (write "/lib/greeter" (value-map "source" "(define (main input) (concat \\"Hello, \\" (value-get input \\"/name\\")))"
                                       "documentation" "Greets input.name"))
      (exec "/lib/greeter" input)))
"""

process = Process.builder("svit://local/examples/teacher").library("teacher", TEACHER).build()
first = process.exec("/lib/teacher", {"name": "Svit"})
later = process.exec("/lib/greeter", {"name": "Ada"})
print(
    f"self-authoring: first={first.output!r} later={later.output!r} "
    f"doc={process.read('/lib/greeter').documentation!r} library={process.discover('/lib')}"
)
