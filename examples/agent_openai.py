"""The same kind of agent, driven by a real model through an OpenAI-compatible API.

Configure with OPENAI_API_KEY (and optionally OPENAI_BASE_URL for a compatible server,
and OPENAI_MODEL, default gpt-4o-mini). Without a key or base URL it prints why it
skipped and exits 0. Needs the optional extra: pip install 'svit[openai]'.

Run: python examples/agent_openai.py
"""

import json
import os
import sys

from svit import Message, Svit
from svit.errors import SvitError


def main() -> int:
    if not (os.environ.get("OPENAI_API_KEY") or os.environ.get("OPENAI_BASE_URL")):
        print("agent_openai: skipped (set OPENAI_API_KEY, or OPENAI_BASE_URL for a compatible server)")
        return 0
    try:
        from svit.reasoners import OpenAIReasoner

        reasoner = OpenAIReasoner(model=os.environ.get("OPENAI_MODEL") or "gpt-4o-mini", timeout=60)
    except SvitError as error:
        print(f"agent_openai: skipped ({error})")
        return 0

    agent = (
        Svit.builder("svit://local/examples/openai-agent")
        .memory("facts", {})
        .instructions("Store every fact the user tells you under /memory/facts (a map) using the write tool, then confirm briefly.")
        .max_iterations(8)
        .reasoner(reasoner)
        .build()
    )
    replies = agent.outbox()
    agent.inbox().send(Message.user("My favourite color is blue. Remember it."))
    try:
        agent.block()
    except SvitError as error:
        print(f"agent_openai: failed ({error})", file=sys.stderr)
        return 1
    reply = replies.recv(timeout=1)
    memory = json.dumps(agent.read("/memory"), sort_keys=True)
    print(f"reply: {reply.text} memory: {memory}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
