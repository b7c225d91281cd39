"""A reasoning agent with no model and no network: a scripted reasoner drives the loop.

The "model" writes a fact to memory through the write tool, runs a /lib script through
the exec tool, asks a nested question through the llm port, then answers. Everything the
loop does is real: the inbox commit, the tool calls, the acknowledgement, the outbox.

Run: python examples/agent_scripted.py
"""

import json

from svit import Message, Ports, Svit
from svit.ports.llm import LlmPort
from svit.reasoners import ScriptedReasoner

TALLY = """
(define (main input)
  (do (write "/memory/mentions" (+ (read "/memory/mentions") 1))
      (read "/memory/mentions")))
"""

ASK = '(define (main input) (port-call "llm" input))'

model = ScriptedReasoner(
    [
        ScriptedReasoner.tool("write", path="/memory/color", value="blue"),
        ScriptedReasoner.tool("exec", path="/lib/tally", input=None),
        ScriptedReasoner.tool("exec", source=ASK, input={"prompt": "One word for the sky's color?"}),
        # The last step reads the llm port's answer from the previous tool result.
        lambda conversation: "Remembered blue; the sky is "
        + json.loads(conversation[-1].text)["output"].lower()
        + ".",
    ]
)
nested_model = ScriptedReasoner(["Blue"])

agent = (
    Svit.builder("svit://local/examples/agent")
    .memory("mentions", 0)
    .library("tally", TALLY, documentation="Counts how often the user mentioned a fact")
    .instructions("Keep facts the user tells you under /memory.")
    .ports(Ports().port("llm", LlmPort(nested_model)))
    .reasoner(model)
    .build()
)

replies = agent.outbox()  # subscribe before start() to see every reply
agent.start()
agent.inbox().send(Message.user("My favourite color is blue. Remember it."))
reply = replies.recv(timeout=10)
agent.block()

memory = json.dumps(agent.read("/memory"), sort_keys=True)
print(f"reply: {reply.text} memory: {memory} inbox: {len(agent.read('/inbox'))}")
