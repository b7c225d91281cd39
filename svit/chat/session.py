"""One ``svit chat`` conversation: a durable agent, its turns, and what the person sees.

Each line the person types is committed to the agent's inbox as a user message, then
answered in this process by one reason/act turn (:func:`svit.loop.run_next_turn` on
the open :class:`~svit.Svit`); the thread log keeps the conversation, so the next run
over the same address continues it and shows the last exchanges first.

A turn that fails (the provider's HTTP error, a timeout, a refused connection, a
cancelled reply) is reported in one line and its message is **set aside at once**
rather than retried behind the person's back: the next line starts a fresh turn
instead of waiting behind the failed one, the model never sees the failed attempt, and
the message is kept where ``/inbox`` shows it and ``/retry`` sends it again.

Ctrl-C during a reply cancels it, never the program: while a model request is in
flight the request is abandoned at once; while a tool runs the tool finishes (its
commit is atomic and is never cut in half) and the reply stops before the next model
request.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from ..errors import PersistenceNotFound, SvitError
from ..loop.errors import Closed, Empty, Lagged, SetAsideNotFound
from ..loop.events import INPUT_MESSAGE, OUTPUT_MESSAGE, TOOL_COMPLETED, TOOL_STARTED, CanonicalEvent, Event, message_of, project_messages
from ..loop.messages import Message, Reply
from ..loop.set_aside import drop_set_aside, inbox_report, retry_set_aside
from ..loop.svit import Svit
from ..loop.tools import ToolSpec
from ..loop.turns import TurnOutcome, run_next_turn
from .config import ChatConfig
from .display import Arrows, clip, excerpt, exchanges, failure_line, inbox_lines, log_lines, tool_call_line, tool_result_lines

__all__ = ["HELP", "HISTORY_EXCHANGES", "CancellableReasoner", "ChatSession", "ReplyCancelled"]

#: Exchanges of the earlier conversation shown when a chat resumes.
HISTORY_EXCHANGES = 3
#: Turns one line may run (its own and any that were waiting in the inbox).
MAX_TURNS_PER_LINE = 64
#: Events read back to find the earlier exchanges.
HISTORY_EVENTS = 400
DEFAULT_LOG = 10
MAX_LOG = 100
TREE_DEPTH = 2
TREE_CHILDREN = 40
TREE_LINES = 120

HELP = """Type a message to send it to the agent; its reply streams below.
  /tree [PATH] [DEPTH]  the process tree (default /, depth 2)
  /log [N]              the last N commits (default 10)
  /inbox                pending and set-aside messages
  /retry [ID]           send a set-aside message again (default: the latest)
  /drop ID              forget a set-aside message
  /help                 this text
  /quit                 leave (also Ctrl-D); Ctrl-C cancels a reply
  //text                send a message that starts with /"""


class ReplyCancelled(SvitError):
    """The person cancelled the reply (Ctrl-C); its message is set aside, not retried."""

    code, prefix = "reply_cancelled", "the reply was cancelled"
    retryable = False


class CancellableReasoner:
    """A reasoner whose reply the person may cancel at a safe point.

    :meth:`interrupt` (called from the SIGINT handler) abandons a model request in
    flight by raising there; at any other moment (a tool running, the loop committing)
    it only marks the reply cancelled, and the next :meth:`complete` refuses to start.
    Either way the turn fails with :class:`ReplyCancelled`.
    """

    def __init__(self, inner: Any, *, on_request: Callable[[], None] | None = None) -> None:
        self.inner = inner
        self._on_request = on_request
        self._cancelled = False
        self._in_request = False

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    def reset(self) -> None:
        self._cancelled = False

    def interrupt(self) -> None:
        self._cancelled = True
        if self._in_request:
            self._in_request = False
            raise KeyboardInterrupt

    def complete(self, system_prompt: str, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Reply:
        if self._cancelled:
            raise ReplyCancelled("before the next model request")
        if self._on_request is not None:
            self._on_request()
        try:
            self._in_request = True
            if self._cancelled:  # Ctrl-C came just before the flag was set
                raise KeyboardInterrupt
            reply: Reply = self.inner.complete(system_prompt, messages, tools)
            return reply
        except KeyboardInterrupt:  # the handler cleared the flag first: a second Ctrl-C only marks
            raise ReplyCancelled("during the model request") from None
        finally:
            self._in_request = False


def _text_of(message_json: Any) -> str:
    try:
        return Message.from_json(message_json).text
    except (SvitError, TypeError, ValueError):
        return ""


class ChatSession:
    """The agent at ``address`` in ``store`` and the conversation with it on ``out``.

    ``reasoner`` replaces the OpenAI-compatible one ``config`` describes (tests).
    """

    def __init__(self, store: Any, address: str, config: ChatConfig, out: TextIO, *, reasoner: Any = None) -> None:
        self.out = out
        self.config = config
        self.arrows = Arrows(getattr(out, "encoding", None))
        self._mid_line = False
        self._streamed = False
        self._typed: set[str] = set()
        if reasoner is None:
            from ..reasoners import OpenAIReasoner  # noqa: PLC0415 - loads openai, only for a real model

            reasoner = OpenAIReasoner(
                model=config.model,
                base_url=config.base_url,
                api_key=config.api_key,
                timeout=config.timeout,
                max_retries=config.retries,
                on_text=self._stream_text if config.stream else None,
            )
        self.reasoner = CancellableReasoner(reasoner, on_request=self._request_started)
        self.created, self.kept_instructions, self.agent = self._open(store, address)
        self._signals = self.agent.events()
        self._signals.listen(self._show_signals)

    # ------------------------------------------------------------------ opening
    def _open(self, store: Any, address: str) -> tuple[bool, str | None, Svit]:
        """Resume the agent, or create it (empty memory, ``--instructions``) on first use."""
        try:
            handle = store.resume(address)
        except PersistenceNotFound:
            builder = Svit.builder(address).reasoner(self.reasoner).max_attempts(1)
            if self.config.instructions is not None:
                builder.instructions(self.config.instructions)
            return True, None, builder.store(store).build()
        thread = handle.read("/thread")
        kept = thread.get("instructions") if isinstance(thread, dict) else None
        agent = Svit.resume(handle).reasoner(self.reasoner).max_attempts(1).build()
        return False, kept if isinstance(kept, str) else None, agent

    def greet(self) -> None:
        """The header, the instructions note, the last exchanges, then any waiting messages."""
        state = "a new agent with empty memory" if self.created else f"resumed at version {self.agent.version}"
        self.say(f"svit chat with {self.agent.address} (model {self.config.model}): {state}")
        wanted = self.config.instructions
        if not self.created and wanted is not None and wanted != self.kept_instructions:
            kept = clip(self.kept_instructions, 80, self.arrows.more) if self.kept_instructions else "none"
            self.say(f"instructions kept from when the agent was created ({kept}); --instructions applies to a new agent only")
        self.say("/help lists the commands; /quit or Ctrl-D leaves, Ctrl-C cancels a reply.")
        if not self.created:
            earlier = exchanges(self._retained_messages(), HISTORY_EXCHANGES)
            if earlier:
                self.say("-- earlier --")
                for who, text in earlier:
                    shown = excerpt(text, self.arrows.more)
                    self.say(f"you> {shown}" if who == "you" else shown)
                self.say("--")
        waiting = self.agent.process.inbox_front()
        if waiting is not None:
            self.say("answering the messages waiting in the inbox first")
            self.drain()

    def _retained_messages(self) -> list[Message]:
        return project_messages(self.agent.recent_events(HISTORY_EVENTS), skip_failed_turns=True)

    # ------------------------------------------------------------------ output
    def say(self, line: str) -> None:
        self._end_line()
        self.out.write(line + "\n")
        self.out.flush()

    def _end_line(self) -> None:
        if self._mid_line:
            self.out.write("\n")
            self._mid_line = False

    def _stream_text(self, delta: str) -> None:
        self._streamed = True
        self.out.write(delta)
        self.out.flush()
        self._mid_line = not delta.endswith("\n")

    def _request_started(self) -> None:
        self._streamed = False

    def _show_signals(self) -> None:
        """Show the loop's records as they are made (called on the turn's own thread)."""
        while True:
            try:
                signal_item = self._signals.try_recv()
            except (Empty, Closed):
                return
            except Lagged:
                continue
            if isinstance(signal_item, CanonicalEvent):
                self._show(signal_item.event)

    def _show(self, event: Event) -> None:
        if event.type == TOOL_STARTED:
            call = event.data.get("tool_call") or {}
            self.say(tool_call_line(str(call.get("name", "?")), call.get("arguments"), self.arrows))
        elif event.type == TOOL_COMPLETED:
            ok = event.data.get("ok") is True
            for line in tool_result_lines(_text_of(event.data.get("result")), ok, self.arrows):
                self.say(line)
        elif event.type == OUTPUT_MESSAGE:
            message = message_of(event)
            if message is not None and message.text and not self._streamed:
                self.say(message.text)
            elif message is not None and not message.text and not message.tool_calls:
                self.say("(the model answered with no text)")
            self._end_line()
            self._streamed = False
        elif event.type == INPUT_MESSAGE:
            message = message_of(event)
            if message is not None and message.id not in self._typed:
                self.say(f"[inbox] {clip(message.text, 200, self.arrows.more)}")

    # ------------------------------------------------------------------ turns
    def send(self, text: str) -> None:
        """Commit ``text`` to the inbox and answer it (and anything queued before it)."""
        message = Message.user(text)
        self._typed.add(message.id)
        self.agent.inbox().send(message)
        self.drain()

    def drain(self) -> None:
        """Run turns until the inbox is empty (or its head waits for a later retry)."""
        for _ in range(MAX_TURNS_PER_LINE):
            outcome = self._turn()
            if outcome.kind == "empty":
                return
            if outcome.kind == "set_aside":
                self.say(f"{failure_line(outcome.error, self.config.timeout)}; "
                         f"message set aside as {outcome.item_id} (/retry sends it again)")
            elif outcome.kind == "retry":
                wait = (outcome.retry_at or 0.0) - time.time()
                if wait > 1.0:
                    self.say(f"the message at the inbox head waits for its retry in {wait:.0f}s (/inbox shows it)")
                    return
                time.sleep(max(wait, 0.0))

    def _turn(self) -> TurnOutcome:
        self.reasoner.reset()
        previous = self._catch_interrupts()
        try:
            return run_next_turn(self.agent, self.reasoner, self.agent.options)
        except KeyboardInterrupt:
            # Only when Ctrl-C landed in the instant between a request and its cleanup:
            # the turn was recorded as failed and its message waits at the inbox head.
            self.say("reply cancelled; the message stays in the inbox and is answered before the next one")
            return TurnOutcome("empty")
        finally:
            if previous is not None:
                signal.signal(signal.SIGINT, previous)
            self._end_line()

    def _catch_interrupts(self) -> Any:
        """Route SIGINT to the reasoner for the turn; returns the handler to restore."""
        if threading.current_thread() is not threading.main_thread():
            return None

        def cancel(signum: int, frame: Any) -> None:
            self.reasoner.interrupt()

        return signal.signal(signal.SIGINT, cancel)

    # ------------------------------------------------------------------ commands
    def handle(self, line: str) -> bool:
        """Act on one typed line; False when the person leaves."""
        text = line.rstrip("\r\n")
        if not text.strip():
            return True
        try:
            return self._command(text)
        except SvitError as exc:  # a refused message or command: said, and the chat goes on
            self.say(f"{exc.code}: {exc.message}")
            return True

    def _command(self, text: str) -> bool:
        if text.startswith("//"):
            self.send(text[1:])
            return True
        if not text.startswith("/"):
            self.send(text)
            return True
        word, *rest = text[1:].split() or [""]
        if word in ("quit", "exit", "q"):
            return False
        commands: dict[str, Callable[[list[str]], None]] = {
            "help": lambda _: self.say(HELP),
            "tree": self.show_tree,
            "log": self.show_log,
            "inbox": lambda _: self.show_inbox(),
            "retry": self.retry,
            "drop": self.drop,
        }
        command = commands.get(word)
        if command is None:
            self.say(f"unknown command /{clip(word, 40)}; /help lists the commands")
            return True
        command(rest)
        return True

    def show_tree(self, words: list[str]) -> None:
        from ..console import render_tree  # noqa: PLC0415 - the console loads the Lisp reader; only /tree needs it

        path = words[0] if words else "/"
        depth = TREE_DEPTH
        if len(words) > 1:
            if not words[1].isdigit() or not 0 <= int(words[1]) <= 8:
                self.say("/tree takes a depth from 0 to 8")
                return
            depth = int(words[1])
        lines = render_tree(self.agent.process, path, depth, max_children=TREE_CHILDREN).splitlines()
        for line in lines[:TREE_LINES]:
            self.say(line)
        if len(lines) > TREE_LINES:
            self.say(f"{self.arrows.more} {len(lines) - TREE_LINES} more lines (/tree PATH shows a part)")

    def show_log(self, words: list[str]) -> None:
        count = DEFAULT_LOG
        if words:
            if not words[0].isdigit() or not 1 <= int(words[0]) <= MAX_LOG:
                self.say(f"/log takes a count from 1 to {MAX_LOG}")
                return
            count = int(words[0])
        handle = self.agent.process
        version = handle.version
        query = getattr(handle, "query", None)
        if not callable(query):
            self.say("this process keeps no commit log")
            return
        found = query(version_from=max(version - count + 1, 0), limit=count)
        self.say(f"last commits of {handle.address} (version {version}):")
        for line in log_lines(found[-count:]):
            self.say(line)

    def show_inbox(self) -> None:
        for line in inbox_lines(inbox_report(self.agent.process), self.config.timeout):
            self.say(line)

    def _set_aside_ids(self) -> list[str]:
        return [entry["id"] for entry in inbox_report(self.agent.process, limit=0)["set_aside"]]

    def retry(self, words: list[str]) -> None:
        ids = self._set_aside_ids()
        if not ids:
            self.say("no set-aside messages")
            return
        item_id = words[0] if words else ids[-1]
        try:
            retry_set_aside(self.agent.process, item_id)
        except SetAsideNotFound:
            self.say(f"no set-aside message {clip(item_id, 80)} (/inbox lists them)")
            return
        self.say(f"sending {item_id} again")
        self.drain()

    def drop(self, words: list[str]) -> None:
        if len(words) != 1:
            self.say("/drop takes the id of a set-aside message (/inbox lists them)")
            return
        try:
            drop_set_aside(self.agent.process, words[0])
        except SetAsideNotFound:
            self.say(f"no set-aside message {clip(words[0], 80)} (/inbox lists them)")
            return
        self.say(f"dropped {words[0]}")

    def close(self) -> None:
        self.agent.close()
