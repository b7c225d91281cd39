"""Atomic outbox: a payment either commits its balance change and its message intent
together, or nothing at all.

Run: python examples/atomic_outbox.py
"""

from svit import Process
from svit.errors import SvitError

PAY = """
(define (main input)
  (do (write "/memory/balance" (- (read "/memory/balance") (value-get input "/amount")))
      (send! "svit://local/examples/merchant" (value-map "amount" (value-get input "/amount")))
      (if (value-get input "/fail") (panic "declined") (read "/memory/balance"))))
"""

payer = Process.builder("svit://local/examples/payer").memory("balance", 100).build()
payer.write("/lib/pay", {"source": PAY, "documentation": "Pays input.amount to the merchant"})

before = payer.snapshot()
try:
    payer.exec("/lib/pay", {"amount": 25, "fail": True})
except SvitError as error:
    failure = error.code
rolled_back = payer.snapshot() == before

paid = payer.exec("/lib/pay", {"amount": 25, "fail": False})
print(
    f"atomic-outbox: failure={failure} rolled_back={rolled_back} "
    f"balance={payer.read('/memory/balance')} intent={paid.messages[0]['message_id']}"
)
