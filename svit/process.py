"""The process: one addressable tree of values, changed only by whole commits.

Every transition (a host write, an inbox change, an activation) builds a candidate
root, validates it, and publishes it with the new version in one assignment. A
failure anywhere before that leaves version, root and snapshot bytes untouched.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Collection, ContextManager, Iterable, Mapping, Protocol, Self, Sequence

from svit.lisp.errors import LispError

from . import mounts as mountlib
from . import stdlib, tree
from ._ports import PortContext, Ports
from .activation import (
    INLINE_NAME,
    Activation,
    WorkingState,
    compile_check,
    library_record,
    located,
    script_compiler,
)
from .errors import (
    HookCancelled,
    InboxConflict,
    InvalidMount,
    InvalidPath,
    InvalidSnapshot,
    InvalidValue,
    MountUnavailable,
    ResourceLimitExceeded,
    ScriptFailed,
    SvitError,
    sanitize,
)
from .evaluation import evaluate as evaluate_read_only
from .limits import Limits
from .mounts import Mount, MountPath
from .mutation import Append, Mutation, Remove, RemoveFront, Set, apply_each
from .namespace import (
    MESSAGE_KEYS,
    initial_root,
    section,
    stat_record,
    system_metadata,
    validate_memory_only,
    validate_root,
    validate_thread,
)
from .paths import format_path, lib_name, parse, validate_address, validate_mount_name, validate_script_name
from .redact import redact
from .snapshot import check_root_hash, decode_snapshot_unverified, encode_snapshot
from .tree import Node
from .values import Script

if TYPE_CHECKING:
    from .loop.events import EventLog

U64_MAX = 2**64 - 1
_log = logging.getLogger("svit")

#: ``(path, script name)`` of the last ``exec`` path.
_LAST_EXEC_PATH: tuple[str, str] | None = None


@dataclass(frozen=True)
class Change:
    """What one transition changed: sorted paths, and hashes of them and their ancestors."""

    version: int
    paths: list[str]
    hashes: dict[str, str | None] = field(default_factory=dict)
    mutations: list[Mutation] = field(default_factory=list, repr=False, compare=False)

    def touches(self, path: str) -> bool:
        """True when ``path`` equals, lies below, or lies above a changed path."""
        target = parse(path)
        for changed in self.paths:
            other = parse(changed)
            n = min(len(target), len(other))
            if target[:n] == other[:n]:
                return True
        return False

    def hash(self, path: str) -> str | None:
        """The recorded hash of ``path`` (None when removed); KeyError when not reported."""
        return self.hashes[format_path(parse(path))]


@dataclass(frozen=True)
class ActivationRequest:
    """What a ``before_activation`` hook sees and may rewrite."""

    script: str
    input: Any


@dataclass(frozen=True)
class Cancel:
    """Returned by a ``before_activation`` hook to refuse the activation."""

    reason: str


@dataclass(frozen=True)
class ActivationEvent:
    """What an ``after_activation`` hook receives."""

    process_id: str
    script: str
    version_before: int
    status: str  # "committed" or "failed"
    version: int | None = None
    error: str | None = None


class ActivationHook(Protocol):
    def before_activation(self, request: ActivationRequest) -> ActivationRequest | Cancel: ...

    def after_activation(self, event: ActivationEvent) -> None: ...


class CommitReceipt(Protocol):
    """Something a caller of :meth:`Process.exec` wants recorded with the commit (a
    control-protocol receipt): told the committed activation's result after its external
    effects and before the sink records the transition, so a sink that keeps receipts
    writes it in the same batch. Without such a sink it is only told."""

    def complete(self, activation: Activation) -> None: ...


@dataclass(frozen=True, init=False)
class Transition:
    """A validated candidate: ``root_after`` is ``mutations`` applied to ``root_before``.

    Handed to the process's :class:`CommitSink` (a durable store) before it is published.
    """

    address: str
    version_before: int
    version_after: int
    root_before: Node
    root_after: Node
    mutations: tuple[Mutation, ...]
    source: str
    #: What the commit sink records beside the transaction in the same write (the store's
    #: mailbox bookkeeping of a delivery or a settlement); opaque to the process.
    annex: object = None
    #: The receipt an activation's caller asked to be written with this commit (completed
    #: before the sink sees the transition); None for every other transition.
    receipt: CommitReceipt | None = None
    #: The script an activation ran (``/lib/NAME``, or ``inline``); None for every other transition.
    script: str | None = None
    #: An activation's output (what a history may summarise); None for every other transition.
    output: Node | None = None

    def __init__(self, address: str, version_before: int, version_after: int, root_before: Node, root_after: Node,
                 mutations: tuple[Mutation, ...], source: str, annex: object = None,
                 receipt: CommitReceipt | None = None, script: str | None = None, output: Node | None = None) -> None:
        # Every field in one assignment (frozen: the generated __init__ sets them one by one,
        # and one is made for every commit).
        object.__setattr__(self, "__dict__", {
            "address": address, "version_before": version_before, "version_after": version_after,
            "root_before": root_before, "root_after": root_after, "mutations": mutations, "source": source,
            "annex": annex, "receipt": receipt, "script": script, "output": output})


class CommitSink(Protocol):
    """Where a process's transitions go before they are published (a durable store).

    ``commit`` records one validated transition or raises, and then nothing is
    published. ``effects_guard`` is entered before an activation's external mount
    writes and held until the transition is published, so a sink can refuse a stale
    commit before any external effect happens.
    """

    def commit(self, transition: Transition) -> None: ...

    def effects_guard(self) -> ContextManager[object]: ...


class ProcessBuilder:
    """Collects version-zero state; :meth:`build` validates it all at once."""

    def __init__(self, address: str) -> None:
        self._address = address
        self._memory: dict[str, Any] = {}
        self._library: dict[str, Script] = {}
        self._limits = Limits()
        self._mounts: dict[str, Mount] = {}
        self._ports: Ports | None = None
        self._hooks: list[Any] = []

    def memory(self, name: str, value: Any) -> ProcessBuilder:
        if type(name) is not str or not name or "/" in name:
            raise InvalidPath(f"memory entry names are single path segments: {name!r}")
        self._memory[name] = value
        return self

    def library(self, name: str, source: str | Script, documentation: str = "") -> ProcessBuilder:
        validate_script_name(name)
        self._library[name] = source if isinstance(source, Script) else library_record({"source": source, "documentation": documentation})
        return self

    def limits(self, limits: Limits) -> ProcessBuilder:
        self._limits = limits
        return self

    def mount(self, name: str, mount: Mount) -> ProcessBuilder:
        validate_mount_name(name)
        self._mounts[name] = mount
        return self

    def ports(self, ports: Ports) -> ProcessBuilder:
        self._ports = ports
        return self

    def hook(self, hook: Any) -> ProcessBuilder:
        self._hooks.append(hook)
        return self

    def build(self) -> Process:
        validate_address(self._address)
        limits = self._limits.validate()
        descriptors = {name: mount.descriptor() for name, mount in self._mounts.items()}
        catalog = self._ports.catalog() if self._ports is not None else {}
        root = initial_root(self._address, limits, self._memory, self._library, descriptors, catalog)
        process = Process(self._address, root, 0, limits, hooks=self._hooks, mounts=dict(self._mounts), ports=self._ports)
        validate_root(root, self._address, limits, script_compiler(limits), error=InvalidValue)
        return process


class Process:
    """One process: address, committed root, version, limits, and host authority."""

    def __init__(
        self,
        address: str,
        root: Node,
        version: int,
        limits: Limits,
        *,
        hooks: Iterable[Any] = (),
        mounts: dict[str, Mount] | None = None,
        ports: Ports | None = None,
        sink: CommitSink | None = None,
    ) -> None:
        self._address = address
        self._limits = limits
        self._state = (version, root)
        self.hooks = list(hooks)
        self.mounts: dict[str, Mount] = dict(mounts or {})
        acquired: list[Mount] = []
        try:
            for provider in self.mounts.values():
                provider.acquire()
                acquired.append(provider)
        except BaseException:
            for provider in acquired:
                provider.release()
            raise
        self.ports = ports
        self._lock = threading.RLock()
        self._sink = sink

    @staticmethod
    def builder(address: str) -> ProcessBuilder:
        return ProcessBuilder(address)

    # ------------------------------------------------------------------ observation
    @property
    def sink(self) -> CommitSink | None:
        """Where this process's transitions are recorded before they are published (None: nowhere)."""
        return self._sink

    @property
    def lock(self) -> threading.RLock:
        """Held by every transition; a store holds it to read a consistent version and root."""
        return self._lock

    @property
    def address(self) -> str:
        return self._address

    @property
    def limits(self) -> Limits:
        return self._limits

    @property
    def version(self) -> int:
        return self._state[0]

    @property
    def root(self) -> Node:
        return self._state[1]

    @property
    def root_hash(self) -> str:
        return self._state[1].hash

    def node_hash(self, path: str) -> str | None:
        """Content hash of a committed node (None for mount paths and absent nodes)."""
        segments = parse(path)
        if len(segments) >= 2 and segments[0] == "mounts":
            return None
        return tree.node_hash(self.root, segments)

    def read_versioned(self, path: str) -> tuple[Any, int]:
        version, root = self._state
        return self._read(path, root), version

    def read(self, path: str) -> Any:
        """The committed value at ``path`` (a fresh copy), a mount node, or None."""
        return self._read(path, self.root)

    def _read(self, path: str, root: Node) -> Any:
        segments = parse(path)
        if len(segments) >= 2 and segments[0] == "mounts":
            return self.mount_read(segments)
        node = tree.get(root, segments)
        return None if node is None else node.to_value()

    def discover(self, path: str) -> list[str]:
        segments = parse(path)
        if len(segments) >= 2 and segments[0] == "mounts":
            return self.mount_discover(segments)
        node = tree.get(self.root, segments)
        if node is None or not node.is_container:
            raise InvalidPath(f"cannot discover {format_path(segments)}")
        return node.child_names()

    def stat(self, path: str) -> dict[str, Any] | None:
        segments = parse(path)
        if len(segments) >= 2 and segments[0] == "mounts":
            facts: dict[str, Any] | None = self.mount_stat(segments)
            return facts
        node = tree.get(self.root, segments)
        return None if node is None else stat_record(path, segments, node)

    def message_intents(self) -> list[dict[str, Any]]:
        """The committed message intents at ``/system/outbox``."""
        intents: list[dict[str, Any]] = self.read("/system/outbox")
        return intents

    def outbox(self) -> list[dict[str, Any]]:
        """The committed message intents (the same as :meth:`message_intents`)."""
        return self.message_intents()

    def thread_log(self) -> EventLog | None:
        """An in-memory process keeps no reasoning events of its own."""
        return None

    def in_memory(self) -> Process:
        return self

    def inbox_front(self) -> Any:
        items = section(self.root, "inbox")
        head = tree.get(items, ("0",)) if items.size else None
        return None if head is None else head.to_value()

    # ------------------------------------------------------------------ commit machinery
    def _commit(
        self,
        mutations: Sequence[Mutation],
        source: str,
        applied: tuple[Node, Node] | None = None,
        effects: Callable[[], None] | None = None,
        dry_run: bool = False,
        annex: object = None,
        receipt: CommitReceipt | None = None,
        before_record: Callable[[Transition], None] | None = None,
        script: str | None = None,
        output: Node | None = None,
        memory_only: bool = False,
    ) -> Transition | None:
        """The one commit path of every transition: host writes, inbox and thread changes,
        activations.

        The candidate root is ``mutations`` applied to the committed root, once, with the
        same :func:`~svit.mutation.apply` a durable store replays on resume. ``applied``
        is ``(base, candidate)`` when the caller has already applied them (an activation's
        working copy): used as is while ``base`` is still the committed root. The candidate
        is validated; then, under the sink's effects guard when there are ``effects``
        (external mount writes), the effects run, the sink records the transition, and the
        new version is published in one assignment. A dry run stops after validation.
        ``before_record`` runs after the effects, just before the sink sees the transition
        (an activation completes its ``receipt`` there). ``memory_only`` says the applied
        candidate is ``base`` with at most ``/memory`` replaced (an activation's working
        copy that changed nothing else), so only that section and the tree's sizes are checked.

        Returns the transition, or None when nothing records or is told of it (no sink, no
        effects, no ``before_record``, not a dry run: an in-memory commit), which is then not
        described at all; the new version and root are the process's own once it returns.
        """
        version, root = self._state
        if version >= U64_MAX:
            raise ResourceLimitExceeded("process version")
        if applied is not None and applied[0] is root:
            candidate = applied[1]
        else:
            candidate = apply_each(root, mutations)
            memory_only = False  # made here: checked in full
        if memory_only:
            validate_memory_only(candidate, self._limits)
        else:
            validate_root(candidate, self._address, self._limits, script_compiler(self._limits), previous=root,
                          error=InvalidValue)
        sink = self._sink
        if sink is None and effects is None and before_record is None and dry_run is False:
            self._state = (version + 1, candidate)
            return None
        transition = Transition(self._address, version, version + 1, root, candidate, tuple(mutations), source, annex,
                                receipt, script, output)
        if dry_run:
            return transition
        if sink is None or effects is None:
            # No external effects to order against other commits: no guard to hold.
            if effects is not None:
                effects()
            if before_record is not None:
                before_record(transition)
            if sink is not None:
                sink.commit(transition)
            self._state = (version + 1, candidate)
            return transition
        with sink.effects_guard():
            effects()
            if before_record is not None:
                before_record(transition)
            sink.commit(transition)
            self._state = (version + 1, candidate)
        return transition

    def _commit_change(self, mutations: Sequence[Mutation], source: str, annex: object = None) -> Change:
        """Commit host-side ``mutations`` and report them as a :class:`Change`."""
        self._commit(mutations, source, annex=annex)
        version, root = self._state  # what the commit published (the caller holds the lock)
        return self._change(version, root, [m.path for m in mutations], list(mutations))

    @staticmethod
    def _change(version: int, root: Node, paths: Iterable[str], mutations: list[Mutation]) -> Change:
        ordered = sorted(set(paths))
        hashes: dict[str, str | None] = {}
        for path in ordered:
            segments = parse(path)
            top = len(segments)
            if top >= 2 and segments[0] == "mounts":
                top = 1  # a mount path carries no hash; /mounts and / are committed state
            for depth in range(top, -1, -1):
                key = format_path(segments[:depth])
                if key in hashes:
                    continue
                hashes[key] = tree.node_hash(root, segments[:depth])
        return Change(version, ordered, hashes, mutations)

    # ------------------------------------------------------------------ host writes
    def write(self, path: str, value: Any) -> Change:
        """Write a committed value below ``/memory`` or a script at ``/lib/<name>`` (one version)."""
        with self._lock:
            segments = parse(path)
            if len(segments) >= 2 and segments[0] == "mounts":
                return self._host_mount_op("write", segments, value)
            if segments and segments[0] == "memory":
                node = tree.from_value(value, scripts_allowed=False)
                tree.validate_value(node, self.limits, scripts_allowed=False)
            elif lib_name(segments) is not None:
                node = tree.from_value(library_record(value), scripts_allowed=True)
            else:
                raise InvalidPath(f"path is not writable: {path}")
            return self._commit_change([Set(format_path(segments), node)], "host.write")

    def remove(self, path: str) -> Change:
        """Remove a committed value below ``/memory`` or a script at ``/lib/<name>`` (one version)."""
        with self._lock:
            segments = parse(path)
            if len(segments) >= 2 and segments[0] == "mounts":
                return self._host_mount_op("remove", segments, None)
            if segments == ("memory",):
                raise InvalidPath("cannot remove a namespace root")
            if not ((segments and segments[0] == "memory") or lib_name(segments) is not None):
                raise InvalidPath(f"path is not removable: {path}")
            return self._commit_change([Remove(format_path(segments))], "host.remove")

    def enqueue_inbox(self, value: Any) -> Change:
        with self._lock:
            node = tree.from_value(value, scripts_allowed=False)
            return self._commit_change([Append("/inbox", (node,))], "inbox.enqueue")

    def acknowledge_inbox(self, expected: Any) -> Change:
        """Remove the inbox head only if it equals ``expected``."""
        with self._lock:
            inbox = section(self.root, "inbox")
            head = tree.get(inbox, ("0",)) if inbox.size else None
            expected_node = tree.from_value(expected, scripts_allowed=False)
            if head is None or head.digest != expected_node.digest:
                raise InboxConflict()
            return self._commit_change([RemoveFront("/inbox", head.hash)], "inbox.acknowledge")

    def update_inbox_and_thread(
        self, thread: Any, source: str, *, remove_head: Any = None, remove: bool = False, append: Sequence[Any] = ()
    ) -> Change:
        """Replace ``/thread`` and change ``/inbox`` in one version: with ``remove`` the head
        goes (only if it equals ``remove_head``, else :class:`InboxConflict`), then
        ``append`` is added at the end. The reasoning loop's bookkeeping of failing and
        set-aside items, so an item is never in both places nor in neither."""
        with self._lock:
            thread_node = tree.from_value(thread, scripts_allowed=False)
            validate_thread(thread_node, self.limits)
            mutations: list[Mutation] = []
            if remove:
                inbox = section(self.root, "inbox")
                head = tree.get(inbox, ("0",)) if inbox.size else None
                if head is None or head.digest != tree.from_value(remove_head, scripts_allowed=False).digest:
                    raise InboxConflict()
                mutations.append(RemoveFront("/inbox", head.hash))
            if append:
                mutations.append(Append("/inbox", tuple(tree.from_value(v, scripts_allowed=False) for v in append)))
            mutations.append(Set("/thread", thread_node))
            return self._commit_change(mutations, source)

    def deliver_inbox(self, items: Sequence[Any], *, annex: object = None) -> Change:
        """Append delivered messages (``{"kind": "message", "message_id", "from", "body"}``)
        to ``/inbox`` as ONE commit (source ``mailbox.deliver``).

        Called by a store's mailbox, whose ``annex`` (the delivered ids, the mailbox
        entries it removes) the commit sink writes in the same batch.
        """
        with self._lock:
            if not items:
                raise InvalidValue("a delivery needs at least one message")
            nodes = []
            for item in items:
                if type(item) is not dict or set(item) != MESSAGE_KEYS or item["kind"] != "message":
                    raise InvalidValue("a delivered inbox item is {kind: message, message_id, from, body}")
                nodes.append(tree.from_value(item, scripts_allowed=False))
            return self._commit_change([Append("/inbox", tuple(nodes))], "mailbox.deliver", annex)

    def settle_outbox(self, delivered: Collection[str], undeliverable: Mapping[str, str], *,
                      annex: object = None) -> Change | None:
        """Settle ``/system/outbox`` as ONE commit (source ``mailbox.settle``): the intents
        whose ids are in ``delivered`` leave it (the history keeps them), those in
        ``undeliverable`` stay marked ``"undeliverable": reason``. None when nothing
        changes. ``annex`` is the mailbox's, as for :meth:`deliver_inbox`."""
        with self._lock:
            outbox = tree.get(self.root, ("system", "outbox"))
            intents: list[dict[str, Any]] = [] if outbox is None else outbox.to_value()
            mutations: list[Mutation] = []
            # From the end: removing an item shifts only the items after it, already done.
            for index in range(len(intents) - 1, -1, -1):
                message_id = intents[index].get("message_id")
                if type(message_id) is not str:
                    continue
                if message_id in delivered:
                    mutations.append(Remove(f"/system/outbox/{index}"))
                elif message_id in undeliverable:
                    reason = undeliverable[message_id]
                    if type(reason) is not str:
                        raise InvalidValue("an undeliverable reason is text")
                    if intents[index].get("undeliverable") != reason:
                        node = tree.from_value(reason, scripts_allowed=False)
                        mutations.append(Set(f"/system/outbox/{index}/undeliverable", node))
            if not mutations:
                return None
            return self._commit_change(mutations, "mailbox.settle", annex)

    def replace_thread_state(self, value: Any) -> Change:
        with self._lock:
            node = tree.from_value(value, scripts_allowed=False)
            validate_thread(node, self.limits)
            return self._commit_change([Set("/thread", node)], "thread.replace")

    def initialize_thread_state(self, value: Any) -> Change:
        with self._lock:
            if section(self.root, "thread").kind != "null":
                raise InvalidValue("/thread is already initialized")
            return self.replace_thread_state(value)

    def replace_ports(self, ports: Ports | None) -> Change | None:
        """Attach a port registry and project its catalog; no commit when identical."""
        with self._lock:
            catalog = tree.from_value(ports.catalog() if ports is not None else {}, scripts_allowed=False)
            if section(self.root, "ports").digest == catalog.digest:
                self.ports = ports
                return None
            change = self._commit_change([Set("/ports", catalog)], "ports.refresh")
            # Attached only once the catalog describing it is committed (a failure changes nothing).
            self.ports = ports
            return change

    def attach_mount(self, name: str, mount: Mount) -> Change | None:
        """Attach a provider; commits the descriptor only when it differs."""
        with self._lock:
            validate_mount_name(name)
            descriptor = tree.from_value(mount.descriptor(), scripts_allowed=False)
            current = tree.get(self.root, ("mounts", name))
            change = None
            mount.acquire()
            try:
                if current is None or current.digest != descriptor.digest:
                    change = self._commit_change([Set(f"/mounts/{name}", descriptor)], "mounts.attach")
            except BaseException:
                mount.release()
                raise
            previous = self.mounts.get(name)
            self.mounts[name] = mount
            if previous is not None:
                previous.release()
            return change

    def detach_mount(self, name: str) -> None:
        """Stop using the provider of ``/mounts/<name>`` (released, e.g. a folder's root
        descriptor closed); the descriptor stays committed and reads as unattached. No commit."""
        with self._lock:
            validate_mount_name(name)
            if tree.get(self.root, ("mounts", name)) is None:
                raise InvalidPath(f"/mounts/{name}")
            provider = self.mounts.pop(name, None)
            if provider is not None:
                provider.release()

    def close(self) -> None:
        """Release every attached provider (the committed tree is untouched; mounts then
        read as unattached). Closing twice is harmless."""
        with self._lock:
            providers = list(self.mounts.values())
            self.mounts.clear()
            for provider in providers:
                provider.release()

    # ------------------------------------------------------------------ mounts
    def _mount_target(self, segments: tuple[str, ...]) -> tuple[str, dict[str, Any], Mount | None, MountPath]:
        name = segments[1]
        try:
            validate_mount_name(name)
        except SvitError:
            raise InvalidMount(f"invalid mount name: {name}") from None
        descriptor = tree.get(self.root, ("mounts", name))
        if descriptor is None:
            raise InvalidPath(f"/mounts/{name}")
        mount_path = MountPath.parse("/" + "/".join(segments[2:]))
        return name, descriptor.to_value(), self.mounts.get(name), mount_path

    def mount_read(self, segments: tuple[str, ...]) -> Any:
        name, descriptor, provider, mount_path = self._mount_target(segments)
        if provider is None:
            if mount_path.is_root:
                return mountlib.unattached_record(name, descriptor)
            raise MountUnavailable(f"/mounts/{name}")
        return mountlib.mount_read(name, provider, mount_path, self.limits)

    def mount_stat(self, segments: tuple[str, ...]) -> Any:
        name, descriptor, provider, mount_path = self._mount_target(segments)
        if provider is None:
            if mount_path.is_root:
                return mountlib.unattached_record(name, descriptor)
            raise MountUnavailable(f"/mounts/{name}")
        return mountlib.mount_stat(name, provider, mount_path, self.limits)

    def mount_discover(self, segments: tuple[str, ...]) -> list[str]:
        name, _descriptor, provider, mount_path = self._mount_target(segments)
        if provider is None:
            raise MountUnavailable(f"/mounts/{name}")
        return mountlib.mount_discover(name, provider, mount_path, self.limits)

    def mount_search(self, segments: tuple[str, ...], pattern: str) -> Any:
        name, _descriptor, provider, mount_path = self._mount_target(segments)
        if provider is None:
            raise MountUnavailable(f"/mounts/{name}")
        mountlib.require_read(name, provider.descriptor())
        return stdlib.search_mount(provider, format_path(segments), mount_path, pattern, self.limits)

    def check_mount_write(self, segments: tuple[str, ...]) -> None:
        name, descriptor, provider, mount_path = self._mount_target(segments)
        mountlib.require_write(name, descriptor)
        if provider is None:
            raise MountUnavailable(f"/mounts/{name}")
        provider.check_write(mount_path)

    def _mount_apply(self, op: str, segments: tuple[str, ...], value: Any) -> None:
        name, _descriptor, provider, mount_path = self._mount_target(segments)
        if provider is None:
            raise MountUnavailable(f"/mounts/{name}")
        if op == "write":
            mountlib.mount_write(name, provider, mount_path, value, self.limits)
        else:
            mountlib.mount_remove(name, provider, mount_path, self.limits)

    def _host_mount_op(self, op: str, segments: tuple[str, ...], value: Any) -> Change:
        self.check_mount_write(segments)
        self._mount_apply(op, segments, value)
        return Change(self.version, [mount_change_path(segments)], {}, [])

    def port_context(self) -> PortContext:
        return PortContext(self.read, self.stat, self.discover, self.address)

    # ------------------------------------------------------------------ activations
    def exec(self, path: str, input: Any = None, *, dry_run: bool = False,
             receipt: CommitReceipt | None = None) -> Activation:
        """Run ``/lib/<name>``'s ``main(input)`` and commit one new version, or nothing.

        With ``dry_run=True`` the activation runs and is validated exactly as it would be
        committed, then discarded: the result reports its output, logs, messages and
        changed paths with ``committed=False``, and the process is left as it was. A dry
        run makes no external effects, so a port call inside one fails (hard).

        ``receipt`` (a control-protocol receipt) is completed with the result before the
        commit is recorded, and a durable store writes it in the commit's own batch; an
        in-memory process only completes it.
        """
        global _LAST_EXEC_PATH
        last = _LAST_EXEC_PATH
        if type(path) is str and last is not None and last[0] == path:
            name: str | None = last[1]  # the path execed last: the same script name
        else:
            name = lib_name(path) if isinstance(path, str) else None
            if name is not None and type(path) is str:
                _LAST_EXEC_PATH = (path, name)
        if name is None:
            raise InvalidPath(f"exec accepts only /lib/<name> paths: {path}")
        if dry_run is False and not self.hooks:
            # Nobody to consult or tell, and a real run: _activate's own path for it, written out
            # (a with statement, not acquire() and try: a signal's KeyboardInterrupt can be
            # raised as acquire() returns, before a try has begun, and the lock would stay taken).
            with self._lock:
                try:
                    return self._run_activation(name, None, input, False, None, receipt)
                except LispError as exc:  # defensive, as in _activate
                    raise ScriptFailed(exc.message, stack=exc.stack, kind=exc.kind) from None
        if receipt is not None and dry_run is True:
            raise InvalidValue("a dry run commits nothing, so it takes no receipt")
        return self._activate(name, None, input, dry_run, receipt=receipt)

    def exec_inbox_item(self, path: str, item: Any) -> Activation:
        """Run ``/lib/<name>``'s ``main(item)`` for the committed inbox head ``item`` and
        remove that head in the same commit: the item is handled and acknowledged as one
        version, or neither (``InboxConflict`` when the head is not ``item``)."""
        name = lib_name(path) if isinstance(path, str) else None
        if name is None:
            raise InvalidPath(f"exec accepts only /lib/<name> paths: {path}")
        with self._lock:
            inbox = section(self.root, "inbox")
            head = tree.get(inbox, ("0",)) if inbox.size else None
            if head is None or head.digest != tree.from_value(item, scripts_allowed=False).digest:
                raise InboxConflict()
            return self._activate(name, None, item, consume=RemoveFront("/inbox", head.hash))

    def exec_inline(self, source: str, input: Any = None, *, dry_run: bool = False) -> Activation:
        """Run a one-off script that is compiled first and never stored (``dry_run`` as for :meth:`exec`)."""
        if type(source) is not str:
            raise InvalidValue("inline source must be text")
        compile_check(INLINE_NAME, source, self.limits)
        return self._activate(INLINE_NAME, source, input, dry_run)

    def evaluate(self, source: str, input: Any = None) -> Activation:
        """Run one-off source like :meth:`exec_inline`, read-only: nothing is committed, and a
        write, remove, ``send!`` or port call inside it fails with ``ReadOnlyEvaluation``
        (see :mod:`svit.evaluation`). The result has ``committed=False`` and this version."""
        return evaluate_read_only(self, source, input)

    def _activate(
        self, name: str, inline_source: str | None, input: Any, dry_run: bool = False, consume: RemoveFront | None = None,
        receipt: CommitReceipt | None = None,
    ) -> Activation:
        if type(dry_run) is not bool:
            raise InvalidValue("dry_run must be true or false")
        if dry_run:
            # Nothing is committed, so the activation hooks (which observe commits and
            # steer what is committed) are not involved.
            with self._lock:
                return self._run_activation(name, inline_source, input, dry_run=True)
        if not self.hooks:
            # Nobody to consult or tell: the activation alone.
            with self._lock:
                try:
                    return self._run_activation(name, inline_source, input, consume=consume, receipt=receipt)
                except LispError as exc:  # defensive, as below
                    raise ScriptFailed(exc.message, stack=exc.stack, kind=exc.kind) from None
        with self._lock:
            version_before = self.version
            request = ActivationRequest(name, input)
            for hook in self.hooks:
                before = getattr(hook, "before_activation", None)
                if before is None:
                    continue
                outcome = before(request)
                if isinstance(outcome, Cancel):
                    # Every observer hears how the activation ended, a cancelled one included.
                    cancelled = HookCancelled(outcome.reason)
                    self._after(ActivationEvent(self.address, request.script, version_before, "failed", error=cancelled.message))
                    raise cancelled
                if isinstance(outcome, ActivationRequest):
                    request = outcome
            try:
                if inline_source is None and request.script != INLINE_NAME:
                    validate_script_name(request.script)
                activation = self._run_activation(request.script, inline_source, request.input, consume=consume,
                                                  receipt=receipt)
            except SvitError as exc:
                self._after(ActivationEvent(self.address, request.script, version_before, "failed", error=exc.message))
                raise
            except LispError as exc:  # defensive: every Lisp error is mapped inside the run
                error = ScriptFailed(exc.message, stack=exc.stack, kind=exc.kind)
                self._after(ActivationEvent(self.address, request.script, version_before, "failed", error=error.message))
                raise error from None
            self._after(ActivationEvent(self.address, request.script, version_before, "committed", version=activation.version))
            return activation

    def _after(self, event: ActivationEvent) -> None:
        # The activation's outcome is already decided; a failing observer must not turn a
        # committed activation into an error (a caller would retry and commit twice).
        for hook in self.hooks:
            after = getattr(hook, "after_activation", None)
            if after is not None:
                try:
                    after(event)
                except Exception as exc:  # host code; reported, never propagated
                    _log.warning("after_activation hook failed: %s", sanitize(redact(str(exc) or type(exc).__name__)))

    def _run_activation(
        self, name: str, inline_source: str | None, input: Any, dry_run: bool = False, consume: RemoveFront | None = None,
        receipt: CommitReceipt | None = None,
    ) -> Activation:
        input_node = tree.from_value(input, scripts_allowed=False)
        tree.validate_value(input_node, self._limits, scripts_allowed=False)
        ws = WorkingState(self, dry_run, self._state[1], self._limits)
        if inline_source is None:
            # The name is valid: exec and exec_inbox_item took it from a /lib path, and a
            # hook's rewrite is checked where it is made.
            source = ws.find_script(name).source
        else:
            source = inline_source
        output = ws.run(name, source, input_node)
        # Validate everything the activation produced before anything is applied (the
        # working memory was checked at each write, and the commit checks it again).
        for staged_name, script in ws.staged:
            if script is not None:
                tree.validate_value(tree.from_value(script, scripts_allowed=True), self._limits, scripts_allowed=True)
                try:
                    # Checked under what is left of the activation's budget: writing
                    # scripts cannot multiply the work an activation may do.
                    compile_check(staged_name, script.source, self._limits, ws.budget)
                except ScriptFailed as exc:
                    raise located(exc, name) from None
        version, root = self._state
        if version >= U64_MAX:
            raise ResourceLimitExceeded("process version")
        # The working state is finished with: its buffers become the commit's own.
        mutations: list[Mutation] = ws.mutations
        changed = ws.changed  # an ordered set
        candidate = ws.working_root()
        messages: list[dict[str, Any]] = []
        if consume is not None:  # the handled inbox item leaves in the activation's own commit
            candidate = consume.apply(candidate)
            mutations.append(consume)
            changed["/inbox"] = None
        if ws.messages:
            next_version = version + 1
            intents = [
                {"body": message["body"], "message_id": f"{self._address}:{next_version}:{index}", "to": message["to"]}
                for index, message in enumerate(ws.messages)
            ]
            append = Append("/system/outbox", tuple(tree.from_value(i, scripts_allowed=False) for i in intents))
            candidate = append.apply(candidate)
            mutations.append(append)
            changed["/system/outbox"] = None
            messages = [{"message_id": i["message_id"], "to": i["to"], "body": i["body"]} for i in intents]
        # Nothing but /memory can differ from the base (the commit then checks that alone).
        memory_only = consume is None and not ws.messages and ws.lib is ws.base_lib
        mount_writes = ws.mount_writes
        script_path = "inline" if inline_source is not None else f"/lib/{name}"
        if not mount_writes and receipt is None and dry_run is False:
            # The common activation: no external effect to order and nobody to tell before
            # the commit is recorded, so the result is made after it (as complete() below).
            # A scalar output is its node's own value (Node.to_value, written out for it).
            self._commit(mutations, "activation", (ws.base, candidate), None, False, None, None, None, script_path, output,
                         memory_only)
            code = output.code
            value = output.to_value() if code == tree.MAP or code == tree.ARRAY else output.value
            version, root = self._state  # what the commit published
            return Activation(value, ws.logs, messages, version, root, sorted(changed))

        def apply_mount_writes() -> None:
            # External mount effects happen only once the candidate is known to be valid.
            for op, path, value in mount_writes:
                segments = parse(path)
                self._mount_apply(op, segments, value)
                changed[mount_change_path(segments)] = None

        result: list[Activation] = []

        def complete(version_after: int, root_after: Node) -> None:
            # Everything the caller is told is known here, mount-write paths included.
            # (output, logs, messages, version, root (hashed when read), changed)
            # A scalar output is its node's own value (Node.to_value, written out for it).
            code = output.code
            value = output.to_value() if code == tree.MAP or code == tree.ARRAY else output.value
            activation = Activation(value, ws.logs, messages, version_after, root_after, sorted(changed))
            result.append(activation)
            if receipt is not None:
                receipt.complete(activation)

        def before_record(transition: Transition) -> None:
            complete(transition.version_after, transition.root_after)

        self._commit(
            mutations, "activation", applied=(ws.base, candidate),
            effects=apply_mount_writes if mount_writes else None, dry_run=dry_run,
            receipt=receipt, before_record=before_record if receipt is not None else None, script=script_path,
            output=output, memory_only=memory_only,
        )
        if dry_run:
            for _op, path, _value in mount_writes:
                changed[mount_change_path(parse(path))] = None
            return Activation(
                output=output.to_value(),
                logs=ws.logs,
                messages=messages,
                version=version,
                root_hash=root,  # hashed when read
                changed=sorted(changed),
                committed=False,
            )
        if receipt is None:
            # Nobody to tell before the commit is recorded: the result is made after it.
            complete(*self._state)
        return result[0]

    # ------------------------------------------------------------------ snapshots and forks
    def snapshot(self) -> bytes:
        version, root = self._state
        return encode_snapshot(self.address, version, root, self.limits)

    @classmethod
    def restore(
        cls,
        data: bytes,
        *,
        max_bytes: int | None = None,
        max_tree_nodes: int | None = None,
        max_tree_text_bytes: int | None = None,
        restore_limits: Limits | None = None,
    ) -> Process:
        """Build a process from untrusted snapshot bytes, validating everything first.

        The keywords are the host's bounds on what a restore may cost, on top of the
        snapshot's own limits. ``max_bytes``, ``max_tree_nodes`` and
        ``max_tree_text_bytes`` bound the bytes and the tree, checked while the bytes are
        scanned, before any of the tree exists. Restoring compiles every script of the
        snapshot's ``/lib``: their compile-time code and the compiler's work together get
        one budget, the snapshot's own steps and milliseconds but never more than
        ``restore_limits`` (the host's; by default the default limits) allow, and
        compile-time code holds no more guest memory than both allow.
        """
        address, version, root, limits, claimed = decode_snapshot_unverified(
            data, max_bytes=max_bytes, max_tree_nodes=max_tree_nodes, max_tree_text_bytes=max_tree_text_bytes
        )
        process = cls(address, root, version, limits)
        validate_root(root, address, limits, restore_compiler(limits, restore_limits or Limits()), error=InvalidSnapshot)
        check_root_hash(root, claimed)
        return process

    def fork(self, child_address: str) -> Self:
        """A new process at ``child_address`` sharing this committed tree (outbox cleared);
        hooks, mount providers and ports are shared, the commit sink is not."""
        validate_address(child_address)
        version, root = self._state
        system_value = system_metadata(child_address, self.limits, self.address, [])
        system_node = tree.from_value(system_value, scripts_allowed=False)
        candidate = tree.set_at(root, ("system",), system_node)
        child = type(self)(child_address, candidate, version, self.limits, hooks=self.hooks, mounts=self.mounts, ports=self.ports)
        validate_root(candidate, child_address, self.limits, script_compiler(self.limits), previous=root, error=InvalidValue)
        return child


def restore_compiler(snapshot: Limits, host: Limits) -> Callable[[str, Script], None]:
    """The ``compile_script`` of a restore: every script under one budget the host bounds."""
    capped = dataclasses.replace(
        snapshot,
        max_steps=min(snapshot.max_steps, host.max_steps),
        max_execution_millis=min(snapshot.max_execution_millis, host.max_execution_millis),
        max_guest_memory=min(snapshot.max_guest_memory, host.max_guest_memory),
    )
    return script_compiler(capped)


def mount_change_path(segments: tuple[str, ...]) -> str:
    text = format_path(segments)
    return text.rstrip("/") or "/"


__all__ = [
    "ActivationEvent",
    "ActivationHook",
    "ActivationRequest",
    "Cancel",
    "Change",
    "CommitReceipt",
    "CommitSink",
    "Process",
    "ProcessBuilder",
    "Transition",
    "U64_MAX",
    "mount_change_path",
    "restore_compiler",
]
