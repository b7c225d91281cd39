"""Reasoners: what decides, given the conversation, whether to call tools or answer.

A reasoner has one method, ``complete(system_prompt, messages, tools) -> Reply``. A reply
with tool calls asks the loop to run them and ask again; a reply without tool calls is
the final answer, unless the model was cut off (``finish_reason == "length"``). A
failure raises a :class:`~svit.loop.errors.ReasonerFailed` that says whether a retry may
help (``retryable``); the loop retries the turn with backoff or sets its item aside. :class:`ScriptedReasoner` replays fixed steps (tests, examples, no
network); :class:`OpenAIReasoner` talks to any OpenAI-compatible chat completions API
through the official ``openai`` client (the optional ``svit[openai]`` extra).

Streaming: an OpenAI reasoner given ``on_text`` (or ``stream=True``) asks for a streamed
reply and calls ``on_text(delta)`` with each piece of the answer's text as it arrives
(on the thread that called ``complete``). The :class:`Reply` it returns is assembled
from the stream and equals the one the same answer gives unstreamed: the text, the tool
calls (their arguments joined across chunks), the finish reason, and the usage when the
server reports it (the request asks for it with ``stream_options.include_usage``).

An :class:`AsyncReasoner` has the same method as a coroutine. The loop runs it on the
event loop of the Svit's :class:`~svit.loop.aio.AsyncSvit` and treats its result and
failures exactly like a synchronous reasoner's; :class:`AsyncOpenAIReasoner` is
:class:`OpenAIReasoner` on ``openai.AsyncOpenAI``, with the same requests, replies and
errors.
"""

from __future__ import annotations

import json
import os
import threading
from typing import Any, Callable, Iterable, Protocol, Sequence, runtime_checkable

from .errors import sanitize
from .loop.errors import ReasonerFailed, ReasonerUnavailable
from .loop.messages import Message, Reply, ToolCall
from .loop.tools import ToolSpec
from .redact import redact, register_secret


@runtime_checkable
class Reasoner(Protocol):
    """Decides the next step of a turn; may raise a SvitError (the turn then fails)."""

    def complete(self, system_prompt: str, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Reply: ...


@runtime_checkable
class AsyncReasoner(Protocol):
    """A :class:`Reasoner` whose ``complete`` is a coroutine, run on the host's event loop
    (wrap the Svit in :class:`~svit.loop.aio.AsyncSvit`); raising fails the turn."""

    async def complete(self, system_prompt: str, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Reply: ...


# ---------------------------------------------------------------------- scripted

Step = Any  # Reply | str | ToolCall | dict | list of calls | callable(messages) -> Step


class ScriptedReasoner:
    """Deterministic reasoner: each ``complete`` consumes the next step.

    A step is a :class:`Reply`; a ``str`` (final answer); a tool call given as
    ``{"tool": name, "arguments": {...}}`` or a :class:`ToolCall`; a list of tool calls
    (run in order); ``{"final": text}``; or a callable taking the conversation (the
    message list) and returning any of these. Running out of steps fails the turn, unless
    ``repeat_last`` is set, which reuses the last step forever.
    """

    def __init__(self, steps: Iterable[Step], *, repeat_last: bool = False) -> None:
        self._steps = list(steps)
        self._repeat_last = repeat_last
        self._position = 0
        self._calls = 0
        self._lock = threading.Lock()
        #: Every request seen, as ``(system_prompt, messages, tool names)`` (for tests).
        self.requests: list[tuple[str, list[Message], list[str]]] = []

    @staticmethod
    def tool(name: str, **arguments: Any) -> dict[str, Any]:
        """A tool-call step: ``ScriptedReasoner.tool("write", path=..., value=...)``."""
        return {"tool": name, "arguments": arguments}

    @staticmethod
    def final(text: str) -> dict[str, Any]:
        return {"final": text}

    @property
    def remaining(self) -> int:
        return max(len(self._steps) - self._position, 0)

    def complete(self, system_prompt: str, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Reply:
        with self._lock:
            self.requests.append((system_prompt, list(messages), [t.name for t in tools]))
            if self._position < len(self._steps):
                step = self._steps[self._position]
                self._position += 1
            elif self._repeat_last and self._steps:
                step = self._steps[-1]
            else:
                raise ReasonerFailed("scripted reasoner has no more steps")
            if callable(step) and not isinstance(step, (Reply, ToolCall)):
                step = step(list(messages))
            return self._reply(step)

    def _call(self, item: Any) -> ToolCall:
        self._calls += 1
        if isinstance(item, ToolCall):
            return item
        if isinstance(item, dict) and type(item.get("tool")) is str:
            return ToolCall(f"call-{self._calls}", item["tool"], item.get("arguments", {}))
        raise ReasonerFailed(f"unrecognised scripted tool call: {sanitize(repr(item), 200)}")

    def _reply(self, step: Any) -> Reply:
        if isinstance(step, Reply):
            return step
        if isinstance(step, str):
            return Reply(text=step)
        if isinstance(step, dict) and "final" in step:
            return Reply(text=str(step["final"]))
        if isinstance(step, (ToolCall, dict)):
            return Reply(tool_calls=(self._call(step),))
        if isinstance(step, (list, tuple)) and step:
            return Reply(tool_calls=tuple(self._call(item) for item in step))
        raise ReasonerFailed(f"unrecognised scripted step: {sanitize(repr(step), 200)}")


# ---------------------------------------------------------------------- OpenAI-compatible

#: HTTP statuses (besides every 5xx) after which the same request may succeed later.
RETRYABLE_STATUSES = frozenset({408, 409, 429})


def _load_openai(user: str) -> Any:
    try:
        import openai  # noqa: PLC0415 - an optional extra, loaded only by the reasoner that needs it
    except ImportError:
        raise ReasonerUnavailable(
            f"{user} needs the openai package; install it with: pip install 'svit[openai]'"
        ) from None
    return openai


def to_openai_messages(system_prompt: str, messages: Sequence[Message]) -> list[dict[str, Any]]:
    """The conversation in chat completions form (agent -> assistant, tool results -> tool)."""
    wire: list[dict[str, Any]] = [{"role": "system", "content": system_prompt}]
    for message in messages:
        if message.role == "user":
            wire.append({"role": "user", "content": message.text})
        elif message.role == "agent":
            entry: dict[str, Any] = {"role": "assistant", "content": message.text or None}
            if message.tool_calls:
                entry["tool_calls"] = [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {
                            "name": call.name,
                            "arguments": call.arguments
                            if isinstance(call.arguments, str)
                            else json.dumps(call.arguments, ensure_ascii=False),
                        },
                    }
                    for call in message.tool_calls
                ]
            wire.append(entry)
        else:
            wire.append({"role": "tool", "tool_call_id": message.tool_call_id, "content": message.text})
    return wire


def to_openai_tools(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    return [
        {"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}
        for t in tools
    ]


def _decode_arguments(text: Any) -> Any:
    """Tool arguments as a JSON object; anything else stays raw for the tool to reject."""
    if not isinstance(text, str):
        return text if isinstance(text, dict) else {}
    if not text.strip():
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return value if isinstance(value, dict) else text


class _ChatCompletions:
    """Configuration, request and reply mapping, and error mapping shared by the
    synchronous and asynchronous OpenAI reasoners; subclasses only choose the client."""

    _client_class = ""

    def __init__(
        self,
        model: str | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 60.0,
        *,
        max_retries: int = 2,
        temperature: float | None = None,
        stream: bool = False,
        on_text: Callable[[str], None] | None = None,
    ) -> None:
        openai = _load_openai(type(self).__name__)
        self.model = model or os.environ.get("OPENAI_MODEL") or ""
        if not self.model:
            raise ReasonerUnavailable("no model configured: pass model= or set OPENAI_MODEL")
        self.base_url = base_url or os.environ.get("OPENAI_BASE_URL") or None
        key = api_key or os.environ.get("OPENAI_API_KEY") or None
        if key is None:
            if self.base_url is None:
                raise ReasonerUnavailable("no API key configured: pass api_key= or set OPENAI_API_KEY (or a base URL)")
            key = "unused"
        else:
            register_secret(key)
        self._secret = key
        self.timeout = timeout
        self.temperature = temperature
        #: Called with each piece of streamed answer text; setting it turns streaming on.
        self.on_text = on_text
        self._stream = stream
        self._openai = openai
        client = getattr(openai, self._client_class)
        self._client = client(api_key=key, base_url=self.base_url, timeout=timeout, max_retries=max_retries)

    def _request(self, system_prompt: str, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> dict[str, Any]:
        request: dict[str, Any] = {"model": self.model, "messages": to_openai_messages(system_prompt, messages)}
        if tools:
            request["tools"] = to_openai_tools(tools)
        if self.temperature is not None:
            request["temperature"] = self.temperature
        if self.streaming:
            request["stream"] = True
            request["stream_options"] = {"include_usage": True}
        return request

    @property
    def streaming(self) -> bool:
        """Whether requests ask for a streamed reply (``stream=True`` or an ``on_text``)."""
        return self._stream or self.on_text is not None

    @staticmethod
    def _reply(response: Any) -> Reply:
        choices = getattr(response, "choices", None) or []
        if not choices:
            raise ReasonerFailed("the model returned no choices")
        choice = choices[0]
        message = choice.message
        finish_reason = getattr(choice, "finish_reason", None)
        finish = sanitize(finish_reason, 64) if isinstance(finish_reason, str) else None
        usage = _usage(getattr(response, "usage", None))
        calls: list[ToolCall] = []
        for call in getattr(message, "tool_calls", None) or []:
            function = getattr(call, "function", None)
            if function is None:
                raise ReasonerFailed(f"unsupported tool call type: {sanitize(str(getattr(call, 'type', '?')), 64)}")
            calls.append(ToolCall(call.id or f"call-{len(calls) + 1}", function.name, _decode_arguments(function.arguments)))
        if calls:
            return Reply(text=message.content or None, tool_calls=tuple(calls), finish_reason=finish, usage=usage)
        return Reply(text=message.content or "", finish_reason=finish, usage=usage)

    def _failure(self, exc: Exception) -> ReasonerFailed:
        """The client's exception as a structured :class:`ReasonerFailed` (raised ``from``
        it): timeouts, lost connections, 408, 409, 429 and 5xx are retryable; any other
        status (400, 401, 403, 404, 422...) is not."""
        openai = self._openai
        if isinstance(exc, openai.APITimeoutError):
            return ReasonerFailed(f"model request timed out after {self.timeout:g}s", error_type="timeout")
        if isinstance(exc, openai.APIStatusError):
            status = int(exc.status_code)
            error_type, detail = _status_detail(exc, self._secret)
            return ReasonerFailed(
                f"model provider returned HTTP {status}" + (f": {detail}" if detail else ""),
                status=status,
                retryable=status in RETRYABLE_STATUSES or status >= 500,
                error_type=error_type,
                provider_message=detail or None,
            )
        if isinstance(exc, openai.APIConnectionError):
            return ReasonerFailed("could not connect to the model provider", error_type="connection")
        httpx = _load_httpx()
        if httpx is not None and isinstance(exc, httpx.TimeoutException):  # while reading a stream
            return ReasonerFailed(f"model request timed out after {self.timeout:g}s", error_type="timeout")
        if httpx is not None and isinstance(exc, httpx.TransportError):
            return ReasonerFailed("the connection to the model provider was lost", error_type="connection")
        return ReasonerFailed(f"model request failed: {sanitize(redact(' '.join(str(exc).split()), [self._secret]), 300)}")


class OpenAIReasoner(_ChatCompletions):
    """Chat completions with tool calling on the official ``openai`` client.

    ``model``, ``base_url`` and ``api_key`` default to ``OPENAI_MODEL``,
    ``OPENAI_BASE_URL`` and ``OPENAI_API_KEY``. A base URL without a key (a local
    OpenAI-compatible server) sends the placeholder key ``"unused"``. Every client
    failure becomes a :class:`ReasonerFailed` whose text never contains the key or any
    other credential (:func:`svit.redact.redact`), even when the provider echoes it.
    """

    _client_class = "OpenAI"

    def complete(self, system_prompt: str, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Reply:
        request = self._request(system_prompt, messages, tools)
        try:
            response = self._client.chat.completions.create(**request)
        except Exception as exc:
            raise self._failure(exc) from exc
        if not request.get("stream"):
            return self._reply(response)
        assembler = StreamAssembler(self.on_text)
        try:
            for chunk in response:
                assembler.add(chunk)
        except Exception as exc:
            raise self._failure(exc) from exc
        finally:
            response.close()  # also when the caller is interrupted mid-stream
        return assembler.reply()


class AsyncOpenAIReasoner(_ChatCompletions):
    """:class:`OpenAIReasoner` on ``openai.AsyncOpenAI``: same options, requests, replies
    and errors, without holding a thread per request. Its connections belong to the
    event loop that first uses it; close it there with :meth:`aclose`."""

    _client_class = "AsyncOpenAI"

    async def complete(self, system_prompt: str, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Reply:
        request = self._request(system_prompt, messages, tools)
        try:
            response = await self._client.chat.completions.create(**request)
        except Exception as exc:  # cancellation is not an Exception: it propagates
            raise self._failure(exc) from exc
        if not request.get("stream"):
            return self._reply(response)
        assembler = StreamAssembler(self.on_text)
        try:
            async for chunk in response:
                assembler.add(chunk)
        except Exception as exc:
            raise self._failure(exc) from exc
        finally:
            await response.close()
        return assembler.reply()

    async def aclose(self) -> None:
        """Close the client's connections (on the event loop that used them)."""
        await self._client.close()


class StreamAssembler:
    """Builds the :class:`Reply` of a streamed chat completion from its chunks.

    Text pieces are joined (and passed to ``on_text`` as they come); a tool call's pieces
    are matched by their ``index``, its id and name taken from the first piece that has
    them and its arguments joined in order; the last finish reason and the usage chunk
    (sent after the choices when the request asked for it) are kept.
    """

    def __init__(self, on_text: Callable[[str], None] | None = None) -> None:
        self._on_text = on_text
        self._text: list[str] = []
        self._calls: dict[int, dict[str, Any]] = {}
        self._finish: str | None = None
        self._usage: dict[str, int] | None = None
        self._saw_choice = False

    def add(self, chunk: Any) -> None:
        usage = getattr(chunk, "usage", None)
        if usage is not None:
            self._usage = _usage(usage)
        for choice in getattr(chunk, "choices", None) or []:
            if getattr(choice, "index", 0) not in (0, None):
                continue  # only the first choice is asked for; ignore any other
            self._saw_choice = True
            finish = getattr(choice, "finish_reason", None)
            if isinstance(finish, str) and finish:
                self._finish = sanitize(finish, 64)
            delta = getattr(choice, "delta", None)
            if delta is None:
                continue
            content = getattr(delta, "content", None)
            if isinstance(content, str) and content:
                self._text.append(content)
                if self._on_text is not None:
                    self._on_text(content)
            for piece in getattr(delta, "tool_calls", None) or []:
                self._add_call(piece)

    def _add_call(self, piece: Any) -> None:
        index = getattr(piece, "index", None)
        if type(index) is not int:
            index = len(self._calls)
        entry = self._calls.setdefault(index, {"id": None, "name": None, "arguments": [], "type": None})
        if entry["id"] is None and getattr(piece, "id", None):
            entry["id"] = piece.id
        if entry["type"] is None and getattr(piece, "type", None):
            entry["type"] = piece.type
        function = getattr(piece, "function", None)
        if function is None:
            return
        if entry["name"] is None and getattr(function, "name", None):
            entry["name"] = function.name
        arguments = getattr(function, "arguments", None)
        if isinstance(arguments, str):
            entry["arguments"].append(arguments)

    def reply(self) -> Reply:
        """The assembled reply (what the unstreamed request would have returned)."""
        if not self._saw_choice:
            raise ReasonerFailed("the model returned no choices")
        calls: list[ToolCall] = []
        for index in sorted(self._calls):
            entry = self._calls[index]
            if entry["name"] is None:
                kind = entry["type"] if isinstance(entry["type"], str) else "?"
                raise ReasonerFailed(f"unsupported tool call type: {sanitize(kind, 64)}")
            arguments = "".join(entry["arguments"])
            calls.append(ToolCall(entry["id"] or f"call-{len(calls) + 1}", entry["name"], _decode_arguments(arguments)))
        text = "".join(self._text)
        if calls:
            return Reply(text=text or None, tool_calls=tuple(calls), finish_reason=self._finish, usage=self._usage)
        return Reply(text=text, finish_reason=self._finish, usage=self._usage)


def _load_httpx() -> Any:
    """The HTTP library under the ``openai`` client (its stream reads raise its errors)."""
    try:
        import httpx  # noqa: PLC0415 - installed with openai, loaded only when a request failed
    except ImportError:  # pragma: no cover - openai depends on it
        return None
    return httpx


def _status_detail(exc: Any, secret: str) -> tuple[str | None, str]:
    """The provider's own error type and message, credentials removed before the message
    is capped (a server may echo the request's Authorization header in it)."""
    body = getattr(exc, "body", None)
    if not isinstance(body, dict):
        return None, ""
    error = body.get("error", body)
    error_type: str | None = None
    if isinstance(error, dict):
        kind = error.get("type") if isinstance(error.get("type"), str) else error.get("code")
        if isinstance(kind, str) and kind:
            error_type = sanitize(redact(kind, [secret]), 64)
        message = error.get("message")
    else:
        message = error
    if isinstance(message, str):
        return error_type, sanitize(redact(" ".join(message.split()), [secret]), 300)
    return error_type, ""


def _usage(usage: Any) -> dict[str, int] | None:
    """The token counts a provider reported, integers only (None when it reported none)."""
    if usage is None:
        return None
    counts: dict[str, int] = {}
    for name in ("prompt_tokens", "completion_tokens", "total_tokens"):
        value = getattr(usage, name, None)
        if type(value) is int and value >= 0:
            counts[name] = value
    return counts or None


__all__ = [
    "RETRYABLE_STATUSES",
    "AsyncOpenAIReasoner",
    "AsyncReasoner",
    "OpenAIReasoner",
    "Reasoner",
    "Reply",
    "ScriptedReasoner",
    "StreamAssembler",
    "ToolCall",
    "to_openai_messages",
    "to_openai_tools",
]
