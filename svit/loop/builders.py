"""Builders of a Svit: a new process and its loop, or the loop around an existing process."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Self

from .._ports import Ports
from ..errors import InvalidValue
from ..limits import Limits
from ..mounts import Mount
from ..process import Process, ProcessBuilder
from .errors import MissingReasoner
from .events import EventLog

if TYPE_CHECKING:
    from ..protocol import HostedProcess
    from .svit import Svit

__all__ = [
    "DEFAULT_BACKOFF_BASE",
    "DEFAULT_BACKOFF_CAP",
    "DEFAULT_MAX_ATTEMPTS",
    "DEFAULT_MAX_ITERATIONS",
    "LoopOptions",
    "Opener",
    "SvitBuilder",
    "SvitResumeBuilder",
]

#: What a builder opens the Svit with (``Svit`` itself: ``Svit(process, options)``).
Opener = Callable[["HostedProcess", "LoopOptions"], "Svit"]

DEFAULT_MAX_ITERATIONS = 16
#: Attempts of one inbox item before it is set aside (a non-retryable failure: the first).
DEFAULT_MAX_ATTEMPTS = 5
#: Seconds before the first retry of a failed turn; each later one waits twice as long.
DEFAULT_BACKOFF_BASE = 1.0
#: The longest wait between two attempts, in seconds.
DEFAULT_BACKOFF_CAP = 300.0


class LoopOptions:
    """Options shared by a new build and a resume: reasoner, instructions, ports, iterations,
    retries of failed turns, event log. A built Svit keeps them (a fork of it is opened
    with the same)."""

    def __init__(self) -> None:
        self.instructions_text: str | None = None
        self.instructions_set = False
        self.reasoner_object: Any = None
        self.iterations = DEFAULT_MAX_ITERATIONS
        self.port_registry: Ports | None = None
        self.log: EventLog | None = None
        self.attempts = DEFAULT_MAX_ATTEMPTS
        self.backoff_base = DEFAULT_BACKOFF_BASE
        self.backoff_cap = DEFAULT_BACKOFF_CAP

    def instructions(self, text: str | None) -> Self:
        if text is not None and type(text) is not str:
            raise InvalidValue("instructions must be text")
        self.instructions_text, self.instructions_set = text, True
        return self

    def reasoner(self, reasoner: Any) -> Self:
        self.reasoner_object = reasoner
        return self

    def max_iterations(self, n: int) -> Self:
        if type(n) is not int or n < 1:
            raise InvalidValue("max_iterations must be a positive integer")
        self.iterations = n
        return self

    def max_attempts(self, n: int) -> Self:
        """Set an inbox item aside after ``n`` failed turns (default 5; 1: at the first)."""
        if type(n) is not int or n < 1:
            raise InvalidValue("max_attempts must be a positive integer")
        self.attempts = n
        return self

    def retry_backoff(self, base: float, cap: float) -> Self:
        """Wait ``base * 2**(attempts - 1)`` seconds, at most ``cap``, before retrying a
        failed turn (default 1 s doubling up to 300 s)."""
        for name, value in (("base", base), ("cap", cap)):
            if type(value) not in (int, float) or not 0 <= value <= 86_400 or value != value:
                raise InvalidValue(f"retry backoff {name} must be 0-86400 seconds")
        if cap < base:
            raise InvalidValue("retry backoff cap must not be below its base")
        self.backoff_base, self.backoff_cap = float(base), float(cap)
        return self

    def ports(self, ports: Ports) -> Self:
        self.port_registry = ports
        return self

    def event_log(self, log: EventLog) -> Self:
        """Where canonical reasoning events go (default: the store's log for a durable
        process, else a fresh in-memory log)."""
        self.log = log
        return self

    def require_reasoner(self) -> None:
        if self.reasoner_object is None:
            raise MissingReasoner("call .reasoner(...) before .build()")
        if not callable(getattr(self.reasoner_object, "complete", None)):
            raise MissingReasoner("the reasoner must have a complete(system_prompt, messages, tools) method")


class SvitBuilder(LoopOptions):
    """Builds a new process (version-zero state) and the loop around it."""

    def __init__(self, address: str, opener: Opener) -> None:
        super().__init__()
        self._open = opener
        self._process: ProcessBuilder = Process.builder(address)
        self._store: Any = None

    def memory(self, name: str, value: Any) -> SvitBuilder:
        self._process.memory(name, value)
        return self

    def library(self, name: str, source: Any, documentation: str = "") -> SvitBuilder:
        self._process.library(name, source, documentation)
        return self

    def mount(self, name: str, mount: Mount) -> SvitBuilder:
        self._process.mount(name, mount)
        return self

    def limits(self, limits: Limits) -> SvitBuilder:
        self._process.limits(limits)
        return self

    def hook(self, hook: Any) -> SvitBuilder:
        self._process.hook(hook)
        return self

    def store(self, store: Any) -> SvitBuilder:
        """Make the process durable: ``store.create(process)`` supplies the handle used, and
        the conversation is kept in the store's event log."""
        if not callable(getattr(store, "create", None)):
            raise InvalidValue("a store must provide create(process)")
        self._store = store
        return self

    def build(self) -> Svit:
        self.require_reasoner()
        # The catalog is part of version zero, so the later refresh commits nothing.
        self._process.ports(self.port_registry if self.port_registry is not None else Ports())
        built = self._process.build()
        process: HostedProcess = built
        if self._store is not None:
            process = self._store.create(built)
            built.close()  # the durable handle holds the mount providers now
        return self._open(process, self)


class SvitResumeBuilder(LoopOptions):
    """Wraps an existing process (restored, forked or durable) with the same loop options."""

    def __init__(self, process: HostedProcess, opener: Opener) -> None:
        super().__init__()
        self._open = opener
        self._target = process
        self._mounts: dict[str, Mount] = {}

    def mount(self, name: str, mount: Mount) -> SvitResumeBuilder:
        """Attach a provider for a mount whose descriptor the process already records."""
        self._mounts[name] = mount
        return self

    def build(self) -> Svit:
        self.require_reasoner()
        for name, mount in self._mounts.items():
            self._target.attach_mount(name, mount)
        return self._open(self._target, self)
