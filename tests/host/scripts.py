"""Svit Lisp used by the host tests and drills."""

from __future__ import annotations

__all__ = ["FAIL_ON", "RECORD", "RELAY", "SEED", "relay_process"]

from svit import Process

#: A message handler: records (sender, seq) (``bad`` counts a sequence that did not
#: increase for its sender, i.e. a duplicate or a reordering) and forwards the message
#: with one hop less to a peer chosen from its own index, its send count and the hops.
RELAY = '''
(define (main item)
  (let ((body (map-get item "body"))
        (sender (to-string (map-get body "sender")))
        (seq (map-get body "seq"))
        (hops (map-get body "hops"))
        (last (read (concat "/memory/last/" sender)))
        (bad (if (or (value-null? last) (< last seq)) 0 1)))
    (do
      (write "/memory/received" (+ (read "/memory/received") 1))
      (write "/memory/bad" (+ (read "/memory/bad") bad))
      (write (concat "/memory/last/" sender) seq)
      (if (> hops 0)
        (let ((sent (+ (read "/memory/sent") 1))
              (me (read "/memory/index"))
              (n (read "/memory/peers"))
              (to (concat (read "/memory/prefix") (to-string (rem (+ (* me 7) hops sent) n)))))
          (do (write "/memory/sent" sent)
              (send! to (value-map "sender" me "seq" sent "hops" (- hops 1)))))
        ())
      seq)))
'''

#: Sends ``input.count`` messages with ``input.hops`` hops each (the drill's seed).
SEED = '''
(define (send-all k hops)
  (if (> k 0)
    (let ((sent (+ (read "/memory/sent") 1))
          (me (read "/memory/index"))
          (n (read "/memory/peers"))
          (to (concat (read "/memory/prefix") (to-string (rem (+ me sent) n)))))
      (do (write "/memory/sent" sent)
          (send! to (value-map "sender" me "seq" sent "hops" hops))
          (send-all (- k 1) hops)))
    ()))
(define (main input) (do (send-all (map-get input "count") (map-get input "hops")) (read "/memory/sent")))
'''

#: A handler that appends each item's body to /memory/seen.
RECORD = '''
(define (main item)
  (do (write "/memory/seen" (to-array (append (to-list (read "/memory/seen")) (map-get item "body")))) (map-get item "body")))
'''

#: A handler that fails on a body of "boom" (the item stays) and records the others.
FAIL_ON = '''
(define (main item)
  (if (= (map-get item "body") "boom")
    (map-get item "missing-key")
    (do (write "/memory/seen" (to-array (append (to-list (read "/memory/seen")) (map-get item "body")))) (map-get item "body"))))
'''


def relay_process(prefix: str, index: int, peers: int) -> Process:
    """Peer ``index`` of ``peers`` at ``<prefix><index>`` with the relay handler and the seed."""
    return (Process.builder(f"{prefix}{index}")
            .memory("received", 0).memory("bad", 0).memory("sent", 0).memory("last", {})
            .memory("index", index).memory("peers", peers).memory("prefix", prefix)
            .library("on_message", RELAY).library("seed", SEED).build())
