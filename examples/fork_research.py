"""Fork research: two forks weigh the same evidence differently; the parent is untouched.

Run: python examples/fork_research.py
"""

from svit import Process

SCORE = """
(define (total xs weight acc)
  (if (null xs) acc (total (tail xs) weight (+ acc (* weight (first xs))))))
(define (main input)
  (let ((score (total (list (read "/memory/evidence/for") (- 0 (read "/memory/evidence/against")))
                      (value-get input "/weight") 0)))
    (do (write "/memory/analysis" (value-map "score" score)) score)))
"""

parent = (
    Process.builder("svit://local/examples/research")
    .memory("evidence", {"for": 7, "against": 2})
    .library("score", SCORE, documentation="Scores the evidence with input.weight")
    .build()
)
optimist = parent.fork("svit://local/examples/optimist")
skeptic = parent.fork("svit://local/examples/skeptic")
hopeful = optimist.exec("/lib/score", {"weight": 5}).output
doubtful = skeptic.exec("/lib/score", {"weight": -1}).output
print(
    f"fork-research: optimist={hopeful} skeptic={doubtful} "
    f"parent_has_analysis={parent.read('/memory/analysis') is not None} "
    f"lineage={optimist.read('/system/lineage/parent')}"
)
