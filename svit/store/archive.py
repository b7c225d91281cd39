"""The memory archive: verified generations of every process, kept outside the store.

Why it exists (DESIGN §5.7, durability.md 4-14): a process store can be wiped by a
gesture aimed at something else (a deleted volume, a "start clean"). The archive keeps
a copy of every address's irreplaceable state (the ``svit-snapshot@2`` process
snapshot: memory, /lib, /inbox, /thread, /system/outbox, everything) somewhere the
gesture does not reach, and puts it back when the store comes up empty.

    archive = MemoryArchive("/srv/svit-archive")            # absolute, explicit, opt-in
    store, decision = open_store_with_archive("/srv/svit-store", archive)
    ...                                                        # periodic exports run
    archive.close(store); store.close()                        # final bounded export

Generation file ``generation-<20 digits>.svarc`` (format major 3, minor 0)::

    magic  b"SVARCHV1" (8) | major u16be | minor u16be | header length u32be
    header {cut_time, generation, sequence, store_id, writer}
    body   per record: length u32be | one map, records in address code-point order
             {address, kind: "process", process_snapshot, root_hash, version}
             {address, kind: "tombstone", removed_at, root_hash, version}
    trailer b"SVAREND1" (8) | record count u64be | BLAKE3 of every earlier byte (32)

The header and every record are in the one deterministic CBOR encoding of
:mod:`svit.cbor` (map keys in UTF-8 byte order, as listed above), and a reader accepts
nothing else. In major 3 the header's ``generation`` and ``store_id`` are load-bearing:
the sealed header, not the file name, says which generation a file is (a file whose
name disagrees is refused) and which store wrote it (exports refuse to publish over
another store's generations, or below what the newest one holds, without an explicit
``supersede``). Major 2 (readers trusted the name) and major 1 (another key order) are
refused by number.

A reader checks the magic, the major version, the trailer magic, the digest, the
count, every record's fields, and restores every process snapshot (matching its
address, version and root hash) before it applies a single record.
Only a regular file no longer than ``max_generation_bytes`` is read at all (a FIFO, a
device link or a sparse giant under a generation's name would otherwise hang the reader
or exhaust its memory, and keep a restore from falling back to an older generation).

Rollbacks: the archive only ever holds acknowledged state, so a store that holds an
address below the newest generation lost acknowledged commits (a damaged write-ahead
log that point-in-time recovery cut short, an older copy of the store directory).
:func:`open_store_with_archive` checks for that at open and fails loudly by default.

The join (restore is the join of the store and the generation, per address): an
address's state is absent, a tombstone ``(version, root_hash)`` or live
``(version, root_hash)``; the join is the maximum under the total order
``(is_live, version, root_hash)``, so it is commutative, associative and idempotent.
Consequences: a restore never deletes or downgrades a live address; a higher version
wins; at equal versions the greater root hash wins (a deterministic tie-break); a
tombstone only keeps an absent address absent. The store cannot hold a tombstone, so
verification compares projections (tombstone == absent): the store dominates a record
``r`` when ``project(join(store[r], r)) == project(store[r])``.
"""

from __future__ import annotations

import errno
import itertools
import logging
import math
import os
import re
import secrets
import signal
import struct
import sys
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Callable, TypeGuard

import blake3

from .. import cbor
from ..errors import SvitError
from ..process import Process
from .failures import describe as describe_storage_failure
from .fsshim import FileSystem, FileTooLarge, NotARegularFile
from .store import ProcessStore

log = logging.getLogger("svit.store.archive")

MAGIC = b"SVARCHV1"
TRAILER_MAGIC = b"SVAREND1"
MAJOR = 3
MINOR = 0
_PREFIX = struct.Struct(">8sHHI")
_LENGTH = struct.Struct(">I")
_COUNT = struct.Struct(">Q")
TRAILER_BYTES = len(TRAILER_MAGIC) + _COUNT.size + 32
MAX_RECORD_BYTES = 256 * 1024 * 1024
#: The default bound on one generation file, read or written (``max_generation_bytes``).
DEFAULT_MAX_GENERATION_BYTES = 4 * 1024 * 1024 * 1024
#: The last generation number a sealed header can carry (an unsigned 64-bit integer).
MAX_GENERATION_NUMBER = 2**64 - 1
#: ASCII digits only and nothing after the suffix (``\d`` takes any script's digits, ``$`` a final newline).
GENERATION_RE = re.compile(r"^generation-([0-9]{20})\.svarc\Z")
TEMP_PREFIX = ".tmp-generation-"

DEFAULT_INTERVAL = 300.0
MIN_INTERVAL = 30.0
MAX_INTERVAL = 86400.0
DEFAULT_STOP_TIMEOUT = 20.0
MIN_STOP_TIMEOUT = 1.0
MAX_STOP_TIMEOUT = 60.0
MIN_GENERATIONS = 3
RESTORE_MODES = ("auto", "always", "off")
_MODE_ALIASES = {"on-empty": "auto", "none": "off", "false": "off"}
MARKER_FORMAT = "svit-restore-marker@1"

EXPORT_OUTCOMES = ("written", "refused_empty", "refused_shrink", "refused_foreign", "refused_older", "incomplete",
                   "failed")
RESTORE_OUTCOMES = ("restored", "partial", "nothing_to_restore", "not_attempted", "failed")
ONLY_IN_STORE = "state written since the last good export exists only in the live store"


# ---------------------------------------------------------------------- errors
class ArchiveError(SvitError):
    """Base of memory-archive failures."""

    code, prefix = "archive_error", "memory archive error"


class ArchiveConfigError(ArchiveError):
    code, prefix = "invalid_archive_config", "invalid memory archive configuration"


class ArchiveUnavailable(ArchiveError):
    """The archive directory could not be listed (it went away, or is no longer a directory)."""

    code, prefix = "archive_unavailable", "memory archive unavailable"


class InvalidArchive(ArchiveError):
    """A generation file failed verification (nothing from it was applied)."""

    code, prefix = "invalid_archive", "invalid archive generation"


class ArchiveRestoreFailed(ArchiveError):
    """The startup restore ended ``failed`` or ``partial``; the store was closed (fail-closed)."""

    code, prefix = "archive_restore_failed", "memory archive restore did not complete"

    def __init__(self, detail: str, result: RestoreResult | None = None) -> None:
        super().__init__(detail)
        self.result = result


class StoreRolledBack(ArchiveError):
    """At open, the store held addresses below what the archive recorded as acknowledged.

    Raised by :func:`open_store_with_archive` (``on_rollback="fail"``, the default) after
    closing the store; ``rollbacks`` names every address and both versions.
    """

    code, prefix = "store_rolled_back", "the store is behind its memory archive"

    def __init__(self, detail: str, rollbacks: tuple[Rollback, ...] = ()) -> None:
        super().__init__(detail)
        self.rollbacks = rollbacks


class _Cancelled(Exception):
    """The export ran past its budget and was told to stop before publishing."""


# ---------------------------------------------------------------------- the join
@dataclass(frozen=True)
class Entry:
    """One address's state for the join: live or a tombstone, at a version and root hash."""

    live: bool
    version: int
    root_hash: str

    def key(self) -> tuple[bool, int, str]:
        return (self.live, self.version, self.root_hash)


def join(a: Entry | None, b: Entry | None) -> Entry | None:
    """The least upper bound: maximum under ``(is_live, version, root_hash)``; None is bottom."""
    if a is None:
        return b
    if b is None:
        return a
    return a if a.key() >= b.key() else b


def project(entry: Entry | None) -> tuple[int, str] | None:
    """What the store can hold: a live entry's (version, root hash); tombstone and absent are alike."""
    return (entry.version, entry.root_hash) if entry is not None and entry.live else None


def dominates(store_entry: Entry | None, record: Entry) -> bool:
    """True when joining ``record`` into the store changes nothing the store can hold."""
    return project(join(store_entry, record)) == project(store_entry)


# ---------------------------------------------------------------------- the format
@dataclass(frozen=True)
class ProcessRecord:
    address: str
    version: int
    root_hash: str
    process_snapshot: bytes = field(repr=False)

    def entry(self) -> Entry:
        return Entry(True, self.version, self.root_hash)


@dataclass(frozen=True)
class Tombstone:
    address: str
    version: int
    root_hash: str
    removed_at: int

    def entry(self) -> Entry:
        return Entry(False, self.version, self.root_hash)


@dataclass(frozen=True)
class Generation:
    """A verified generation file."""

    store_id: str
    generation: int
    sequence: int
    cut_time: int
    writer: str
    processes: dict[str, ProcessRecord]
    tombstones: dict[str, Tombstone]
    digest: str
    minor: int = MINOR

    @property
    def record_count(self) -> int:
        return len(self.processes) + len(self.tombstones)


def _canonical(value: Any) -> bytes:
    """The one deterministic encoding (:mod:`svit.cbor`: map keys in UTF-8 byte order)."""
    return cbor.encode(value)


def encode_generation(*, store_id: str, generation: int, sequence: int, cut_time: int, writer: str,
                      processes: list[ProcessRecord], tombstones: list[Tombstone]) -> bytes:
    """Serialize one generation; deterministic for equal inputs."""
    header = _canonical({"cut_time": cut_time, "generation": generation, "sequence": sequence,
                         "store_id": store_id, "writer": writer})
    parts = [_PREFIX.pack(MAGIC, MAJOR, MINOR, len(header)), header]
    records: list[tuple[str, int, dict[str, Any]]] = []
    for p in processes:
        records.append((p.address, 0, {"kind": "process", "address": p.address, "version": p.version,
                                       "root_hash": p.root_hash, "process_snapshot": p.process_snapshot}))
    for t in tombstones:
        records.append((t.address, 1, {"kind": "tombstone", "address": t.address, "version": t.version,
                                       "root_hash": t.root_hash, "removed_at": t.removed_at}))
    records.sort(key=lambda item: (item[0], item[1]))
    for _, _, record in records:
        body = _canonical(record)
        parts.append(_LENGTH.pack(len(body)))
        parts.append(body)
    data = b"".join(parts) + TRAILER_MAGIC + _COUNT.pack(len(records))
    return data + blake3.blake3(data).digest()


def _is_u64(value: Any) -> TypeGuard[int]:
    return type(value) is int and 0 <= value < 2**64


def _is_hash(value: Any) -> TypeGuard[str]:
    return type(value) is str and len(value) == 64 and all(c in "0123456789abcdef" for c in value)


def decode_generation(data: bytes, *, restore_snapshots: bool = True) -> Generation:
    """Verify the WHOLE file, then return it; any defect raises :class:`InvalidArchive`.

    Minor versions above ours decode (unknown header fields are ignored); a missing
    optional header field takes its documented default (``cut_time`` 0, ``writer`` "").
    ``restore_snapshots=False`` checks the seal, the header and every record's fields
    but does not rebuild the process snapshots: enough to trust the sealed versions
    (the rollback check at open), not enough to restore from.
    """
    if type(data) is not bytes:
        raise InvalidArchive("generation is not bytes")
    if len(data) < _PREFIX.size + TRAILER_BYTES:
        raise InvalidArchive("file is shorter than a header and a trailer")
    magic, major, minor, header_length = _PREFIX.unpack_from(data, 0)
    if magic != MAGIC:
        raise InvalidArchive("bad magic")
    if major != MAJOR:
        older = (f" (major {major} generations are refused: before major 3 a generation's file name, not its "
                 "sealed header, said which one it was; export again with this version)") if major < MAJOR else ""
        raise InvalidArchive(f"unknown major version {major}{older}")
    trailer = data[-TRAILER_BYTES:]
    if trailer[: len(TRAILER_MAGIC)] != TRAILER_MAGIC:
        raise InvalidArchive("missing trailer")
    if blake3.blake3(data[:-32]).digest() != trailer[-32:]:
        raise InvalidArchive("digest mismatch")
    (count,) = _COUNT.unpack_from(trailer, len(TRAILER_MAGIC))
    end = len(data) - TRAILER_BYTES
    position = _PREFIX.size + header_length
    if position > end:
        raise InvalidArchive("header overruns the body")
    try:
        header = cbor.decode(data[_PREFIX.size:position])
    except cbor.CBORDecodeError:
        raise InvalidArchive("header does not decode") from None
    if type(header) is not dict:
        raise InvalidArchive("header is not a map")
    store_id, generation, sequence = header.get("store_id"), header.get("generation"), header.get("sequence")
    cut_time, writer = header.get("cut_time", 0), header.get("writer", "")
    if type(store_id) is not str or not _is_u64(generation) or not _is_u64(sequence) or not _is_u64(cut_time) \
            or type(writer) is not str:
        raise InvalidArchive("malformed header fields")
    processes: dict[str, ProcessRecord] = {}
    tombstones: dict[str, Tombstone] = {}
    seen = 0
    while position < end:
        if position + _LENGTH.size > end:
            raise InvalidArchive("record length overruns the body")
        (length,) = _LENGTH.unpack_from(data, position)
        position += _LENGTH.size
        if length > MAX_RECORD_BYTES or position + length > end:
            raise InvalidArchive("record overruns the body")
        try:
            record = cbor.decode(data[position:position + length])
        except cbor.CBORDecodeError:
            raise InvalidArchive(f"record {seen} does not decode") from None
        position += length
        _check_record(record, seen, processes, tombstones, restore_snapshots)
        seen += 1
    if seen != count:
        raise InvalidArchive(f"count mismatch: trailer says {count}, body holds {seen}")
    return Generation(store_id, generation, sequence, cut_time, writer, processes, tombstones,
                      trailer[-32:].hex(), minor)


def _check_record(record: Any, index: int, processes: dict[str, ProcessRecord],
                  tombstones: dict[str, Tombstone], restore_snapshots: bool) -> None:
    what = f"record {index}"
    if type(record) is not dict:
        raise InvalidArchive(f"{what} is not a map")
    kind, address = record.get("kind"), record.get("address")
    version, root_hash = record.get("version"), record.get("root_hash")
    if type(address) is not str or not _is_u64(version) or not _is_hash(root_hash):
        raise InvalidArchive(f"{what}: malformed fields")
    if address in processes or address in tombstones:
        raise InvalidArchive(f"{what}: address {address} appears twice")
    if kind == "process" and set(record) == {"kind", "address", "version", "root_hash", "process_snapshot"}:
        data = record["process_snapshot"]
        if type(data) is not bytes:
            raise InvalidArchive(f"{what}: process snapshot is not bytes")
        if restore_snapshots:
            try:
                process = Process.restore(data)
            except SvitError as exc:
                raise InvalidArchive(f"{what}: process snapshot does not restore: {exc.message}") from None
            if process.address != address or process.version != version or process.root_hash != root_hash:
                raise InvalidArchive(f"{what}: process snapshot does not match its address, version or root hash")
        processes[address] = ProcessRecord(address, version, root_hash, data)
    elif kind == "tombstone" and set(record) == {"kind", "address", "version", "root_hash", "removed_at"}:
        if not _is_u64(record["removed_at"]):
            raise InvalidArchive(f"{what}: malformed removal time")
        tombstones[address] = Tombstone(address, version, root_hash, record["removed_at"])
    else:
        raise InvalidArchive(f"{what}: unknown kind or fields")


def generation_name(number: int) -> str:
    return f"generation-{number:020d}.svarc"


# ---------------------------------------------------------------------- results
@dataclass(frozen=True)
class SkippedGeneration:
    """A generation file that a reader passed over, and why (it applied nothing from it)."""

    number: int
    reason: str


@dataclass(frozen=True)
class Rollback:
    """An address the store holds below what an archive generation recorded for it.

    ``store_version`` is None when the store does not hold the address at all. At equal
    versions the root hashes differ: the store and the archive diverged.
    """

    address: str
    store_version: int | None
    archived_version: int
    generation: int

    def describe(self) -> str:
        if self.store_version is None:
            held = "the store does not hold it"
        elif self.store_version == self.archived_version:
            held = f"the store holds version {self.store_version} with other contents"
        else:
            held = f"the store holds version {self.store_version}"
        return f"{self.address}: {held}, archive generation {self.generation} holds version {self.archived_version}"


@dataclass(frozen=True)
class ExportResult:
    outcome: str
    generation: int | None = None
    path: str | None = None
    record_count: int = 0
    digest: str | None = None
    message: str = ""
    missing: tuple[str, ...] = ()
    #: For ``refused_older``: the addresses the store holds below the newest generation.
    behind: tuple[Rollback, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class RestoreResult:
    outcome: str
    generation: int | None = None
    written: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()
    message: str = ""
    #: Newer generation files passed over before ``generation`` (newest first): a fallback.
    skipped: tuple[SkippedGeneration, ...] = ()
    #: Addresses the store held below the archive when it was opened (see :meth:`MemoryArchive.check_rollback`).
    rollbacks: tuple[Rollback, ...] = ()

    @property
    def fell_back(self) -> bool:
        """True when the generation used is not the newest file (newer ones failed verification)."""
        return bool(self.skipped) and self.generation is not None

    def as_tuple(self) -> tuple[str, int | None, tuple[str, ...], tuple[str, ...]]:
        return (self.outcome, self.generation, self.written, self.missing)

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "fell_back": self.fell_back}


@dataclass(frozen=True)
class GenerationInfo:
    number: int
    path: str
    valid: bool
    error: str | None = None
    processes: int = 0
    tombstones: int = 0
    digest: str | None = None
    sequence: int | None = None
    cut_time: int | None = None
    store_id: str | None = None


# ---------------------------------------------------------------------- configuration helpers
def clamp_interval(value: Any) -> tuple[float, str | None]:
    """The effective export interval and a note when it differs from the request."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        return DEFAULT_INTERVAL, f"interval {value!r} is not a positive number; using {DEFAULT_INTERVAL:g} s"
    if value < MIN_INTERVAL:
        return MIN_INTERVAL, f"interval {value:g} s raised to {MIN_INTERVAL:g} s"
    if value > MAX_INTERVAL:
        return MAX_INTERVAL, f"interval {value:g} s lowered to {MAX_INTERVAL:g} s"
    return float(value), None


def clamp_stop_timeout(value: Any) -> tuple[float, str | None]:
    """The effective final-export budget (1-60 s) and a note when it differs."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        return DEFAULT_STOP_TIMEOUT, f"stop timeout {value!r} is not a positive number; using {DEFAULT_STOP_TIMEOUT:g} s"
    if value < MIN_STOP_TIMEOUT:
        return MIN_STOP_TIMEOUT, f"stop timeout {value:g} s raised to {MIN_STOP_TIMEOUT:g} s"
    if value > MAX_STOP_TIMEOUT:
        return MAX_STOP_TIMEOUT, f"stop timeout {value:g} s lowered to {MAX_STOP_TIMEOUT:g} s"
    return float(value), None


def normalize_restore_mode(value: Any) -> tuple[str, str | None]:
    text = str(value).strip().lower() if value is not None else "auto"
    text = _MODE_ALIASES.get(text, text)
    if text in RESTORE_MODES:
        return text, None
    return "auto", f"restore mode {value!r} is unknown; using auto"


def encode_marker(state: str, generation: int | None, digest: str | None, now: int, store_id: str = "") -> bytes:
    """The restore marker; ``store_id`` is the id of the store that wrote the restored generation."""
    return _canonical({"digest": digest or "", "format": MARKER_FORMAT, "generation": generation or 0,
                       "state": state, "store_id": store_id, "time": now})


def _marker_fields(raw: bytes | None) -> dict[str, Any] | None:
    if raw is None:
        return None
    try:
        value = cbor.decode(raw)
    except cbor.CBORDecodeError:
        return None
    if type(value) is not dict or value.get("format") != MARKER_FORMAT or value.get("state") not in ("partial", "restored"):
        return None
    return value


def decode_marker(raw: bytes | None) -> str | None:
    """``"partial"`` / ``"restored"``, or None when absent or unreadable (unreadable counts as absent)."""
    value = _marker_fields(raw)
    if value is None:
        return None
    state: str = value["state"]
    return state


def marker_source_store(raw: bytes | None) -> str | None:
    """The store id of the generation a restore came from (None: no marker, or none recorded)."""
    value = _marker_fields(raw)
    source = None if value is None else value.get("store_id")
    return source if type(source) is str and source else None


def lineage(store: Any) -> set[str]:
    """The store ids whose generations this store continues: its own, and the one it was restored from.

    A restore into a wiped store mints a new store id; the restore marker keeps the id
    of the generation it came from, so the restored store may go on exporting into the
    same archive without an override.
    """
    ids = {store.store_id()}
    source = marker_source_store(store.read_restore_marker())
    if source is not None:
        ids.add(source)
    return ids


def behind_archive(generation: Generation, heads: dict[str, tuple[int, str]],
                   tombstones: list[dict[str, Any]], *, include_absent: bool) -> list[Rollback]:
    """The addresses whose archived live state the store does not reach.

    An address is behind when the store holds a lower version, or the same version with
    another root hash, unless the store removed it at or after the archived version (a
    deliberate removal, maybe followed by a re-creation). ``include_absent`` also counts
    an address the store does not hold at all (the export's shrink guard covers that case
    on its own).
    """
    removed: dict[str, int] = {}
    for t in tombstones:
        removed[t["address"]] = max(removed.get(t["address"], -1), t["version"])
    out = []
    for address, record in sorted(generation.processes.items()):
        if removed.get(address, -1) >= record.version:
            continue
        current = heads.get(address)
        if current is None:
            if include_absent:
                out.append(Rollback(address, None, record.version, generation.generation))
            continue
        version, root_hash = current
        if version > record.version or (version == record.version and root_hash == record.root_hash):
            continue
        out.append(Rollback(address, version, record.version, generation.generation))
    return out


def _worktree_root(path: str, fs: FileSystem) -> str | None:
    current = path
    while True:
        if fs.exists(os.path.join(current, ".git")):
            return current
        parent = os.path.dirname(current)
        if parent == current:
            return None
        current = parent


# ---------------------------------------------------------------------- the archive
class MemoryArchive:
    """Opt-in verified generations of every address, outside the store; see the module docstring."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        generations: int = MIN_GENERATIONS,
        interval_seconds: Any = DEFAULT_INTERVAL,
        stop_timeout_seconds: Any = DEFAULT_STOP_TIMEOUT,
        restore_mode: Any = "auto",
        max_generation_bytes: int = DEFAULT_MAX_GENERATION_BYTES,
        fs: FileSystem | None = None,
        clock: Callable[[], float] = time.time,
        identity: str = "svit-archive-exporter",
    ) -> None:
        if directory is None or not isinstance(directory, (str, os.PathLike)):
            raise ArchiveConfigError("the archive directory must be given explicitly (there is no default)")
        raw = os.fspath(directory)
        if not isinstance(raw, str) or not raw:
            raise ArchiveConfigError("the archive directory must be a non-empty text path")
        if not os.path.isabs(raw):
            raise ArchiveConfigError("the archive directory must be an absolute path (a relative one names no chosen place)")
        if type(generations) is not int or generations < 1:
            raise ArchiveConfigError("generations must be a positive integer")
        if type(max_generation_bytes) is not int or max_generation_bytes < _PREFIX.size + TRAILER_BYTES:
            raise ArchiveConfigError("max_generation_bytes must be an integer of at least "
                                     f"{_PREFIX.size + TRAILER_BYTES}")
        #: No generation file longer than this is written or read (reading one means holding it).
        self.max_generation_bytes = max_generation_bytes
        self.fs = fs or FileSystem()
        self.requested_directory = raw
        self.directory = os.path.realpath(raw)
        self.generations = max(generations, MIN_GENERATIONS)
        self.notes: list[str] = []
        if generations < MIN_GENERATIONS:
            self.notes.append(f"generations {generations} raised to {MIN_GENERATIONS}")
        self.interval_seconds, note = clamp_interval(interval_seconds)
        self.notes += [note] if note else []
        self.stop_timeout_seconds, note = clamp_stop_timeout(stop_timeout_seconds)
        self.notes += [note] if note else []
        self.restore_mode, note = normalize_restore_mode(restore_mode)
        self.notes += [note] if note else []
        for note in self.notes:
            log.warning("memory archive: %s", note)
        self.clock = clock
        self.identity = identity
        self.counters: dict[str, int] = {f"export_{o}": 0 for o in EXPORT_OUTCOMES}
        self.counters.update({f"restore_{o}": 0 for o in RESTORE_OUTCOMES})
        self.gauges: dict[str, Any] = {"last_export_time": 0, "last_export_records": 0, "last_export_digest": ""}
        self._export_lock = threading.RLock()  # reentrant: the final export holds it around export()
        #: Exports numbered below this are cancelled before publishing (set when a final export times out).
        self._epochs = itertools.count()
        self._cancel_below = -1
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_good: float | None = None
        #: Directories whose entry for a level of the archive path is not known to be durable yet:
        #: the parent of the archive directory, and of every level this object created.
        try:
            self._unsynced_parents = self._create_directory()
        except OSError as exc:
            raise ArchiveConfigError(f"the archive directory cannot be created or used: {_describe(exc)}") from None

    def _create_directory(self) -> list[str]:
        """Create the missing levels of the archive path, top-down; the parents to fsync at first publish."""
        missing = []
        level = self.directory
        while not self.fs.exists(level):
            missing.append(level)
            parent = os.path.dirname(level)
            if parent == level:
                break
            level = parent
        parents = []
        for level in reversed(missing):
            self.fs.makedirs(level)
            parents.append(os.path.dirname(level))
        self.fs.makedirs(self.directory)  # an existing non-directory at the path fails here
        immediate = os.path.dirname(self.directory)
        if immediate not in parents:
            parents.append(immediate)
        return parents

    # ------------------------------------------------------------------ telemetry and statement
    def metrics(self) -> dict[str, Any]:
        """Every counter (pre-initialised at 0) and gauge."""
        return {**self.counters, **self.gauges}

    def location_flags(self, store_path: str) -> dict[str, Any]:
        """Where the archive lives relative to the store: inside it, same device, inside a git work tree."""
        store_real = os.path.realpath(store_path)
        inside = self.directory == store_real or self.directory.startswith(store_real.rstrip(os.sep) + os.sep)
        try:
            shares = self.fs.stat(self.directory).st_dev == self.fs.stat(store_real).st_dev
        except OSError:
            shares = None
        worktree = _worktree_root(self.directory, self.fs)
        return {"archive_inside_store": inside, "shares_device": shares, "in_git_worktree": worktree is not None,
                "worktree": worktree}

    def warnings(self, store_path: str) -> list[str]:
        flags = self.location_flags(store_path)
        out = []
        if flags["archive_inside_store"]:
            out.append("the archive is inside the store directory: it dies with the store and protects nothing")
        if flags["shares_device"]:
            out.append("the archive is on the same device as the store: losing that volume loses both")
        elif flags["shares_device"] is None:
            out.append("the archive's or the store's device could not be determined")
        if flags["in_git_worktree"]:
            out.append(f"the archive is inside a git work tree ({flags['worktree']}): "
                       "removing or cleaning that work tree deletes it")
        return out

    def statement(self, store_path: str) -> dict[str, Any]:
        """Where state lives, what protects it, what does not, the RPO and the location flags."""
        return durability_statement(store_path, self)

    # ------------------------------------------------------------------ listing and reading
    def _generation_files(self) -> list[tuple[int, str]]:
        """Every file named as a generation, by number; an unlistable directory is :class:`ArchiveUnavailable`."""
        try:
            names = self.fs.listdir(self.directory)
        except OSError as exc:
            raise ArchiveUnavailable(f"the archive directory cannot be listed: {_describe(exc)}") from None
        out = []
        for name in names:
            match = GENERATION_RE.match(name)
            if match:
                out.append((int(match.group(1)), os.path.join(self.directory, name)))
        return sorted(out)

    def read(self, path: str, *, restore_snapshots: bool = True) -> Generation:
        """Read and verify one generation file (whole-file verification first).

        The file's name must agree with the generation number in its sealed header: a
        copy of an old generation under a newer name is refused, never taken as newer.
        """
        try:
            data = self.fs.read(path, max_bytes=self.max_generation_bytes)
        except (NotARegularFile, FileTooLarge) as exc:
            raise InvalidArchive(str(exc)) from None
        generation = decode_generation(data, restore_snapshots=restore_snapshots)
        match = GENERATION_RE.match(os.path.basename(path))
        if match is None or int(match.group(1)) != generation.generation:
            named = "no generation" if match is None else f"generation {int(match.group(1))}"
            raise InvalidArchive(f"the file name says {named} but its sealed header says generation "
                                 f"{generation.generation} (a copied or renamed file)")
        return generation

    def list_generations(self) -> list[GenerationInfo]:
        """Every generation file, oldest first, each verified (for ``svit archive status``)."""
        out = []
        for number, path in self._generation_files():
            try:
                g = self.read(path)
            except (OSError, InvalidArchive) as exc:
                out.append(GenerationInfo(number, path, False, _describe(exc)))
                continue
            out.append(GenerationInfo(number, path, True, None, len(g.processes), len(g.tombstones), g.digest,
                                      g.sequence, g.cut_time, g.store_id))
        return out

    def newest_verified(self, *, restore_snapshots: bool = True) -> tuple[Generation | None, tuple[SkippedGeneration, ...]]:
        """The newest generation that verifies, and the newer files passed over (newest first) with why.

        Files are tried newest name first; a file is accepted only when its sealed header
        carries the number in its name, so the order is that of the verified headers.
        """
        skipped: list[SkippedGeneration] = []
        for number, path in reversed(self._generation_files()):
            try:
                return self.read(path, restore_snapshots=restore_snapshots), tuple(skipped)
            except (OSError, InvalidArchive) as exc:
                reason = exc.detail if isinstance(exc, InvalidArchive) else _describe(exc)
                skipped.append(SkippedGeneration(number, reason))
                log.warning("memory archive: skipping generation %s: %s", os.path.basename(path), reason)
        return None, tuple(skipped)

    def newest_valid(self) -> tuple[Generation | None, list[str]]:
        """The newest generation that verifies, and the errors of newer files that did not."""
        generation, skipped = self.newest_verified()
        return generation, [f"{generation_name(s.number)}: {s.reason}" for s in skipped]

    # ------------------------------------------------------------------ rollback detection
    def check_rollback(self, store: Any) -> tuple[Rollback, ...]:
        """Addresses the store holds below the archive's newest generation of the same lineage.

        The archive only ever holds acknowledged state, so an address below it lost
        acknowledged commits (bit rot in the WAL that point-in-time recovery dropped, an
        older copy of the store directory put back). An empty store, or one in the
        middle of a restore (marker ``partial``), is the restore's business, not a
        rollback. The comparison does not depend on the store id: the id is one more
        write that the same lost WAL tail can take away, and a store behind an archive
        written by another store is just as wrong (the log line names both ids). Each
        finding is logged at ERROR. Store read errors raise: unreadable is not "no rollback".
        """
        if not store.addresses() or decode_marker(store.read_restore_marker()) == "partial":
            return ()
        generation, _ = self.newest_verified(restore_snapshots=False)
        if generation is None:
            return ()
        found = tuple(behind_archive(generation, store.archive_heads(), store.archive_tombstones(), include_absent=True))
        if found and generation.store_id not in lineage(store):
            log.error("memory archive: generation %s was written by store %s, this store is %s (its id was lost "
                      "with the rest, or two stores share the archive)", generation.generation, generation.store_id,
                      store.store_id())
        for rollback in found:
            log.error("memory archive: the store rolled back below an acknowledged version: %s", rollback.describe())
        return found

    def status(self, store_path: str | None = None) -> dict[str, Any]:
        """What ``svit archive status`` prints."""
        out: dict[str, Any] = {
            "archive": self.directory,
            "generations": [asdict(g) for g in self.list_generations()],
            "metrics": self.metrics(),
        }
        if store_path is not None:
            out["flags"] = self.location_flags(store_path)
            out["warnings"] = self.warnings(store_path)
        return out

    # ------------------------------------------------------------------ export
    def _count(self, outcome: str, prefix: str = "export") -> None:
        self.counters[f"{prefix}_{outcome}"] += 1

    def _only_in_store(self) -> str:
        since = "no good export yet" if self._last_good is None else f"last good export at {int(self._last_good)}"
        return f"{ONLY_IN_STORE} ({since})"

    def export(self, store: Any, *, supersede: bool = False, _epoch: int | None = None) -> ExportResult:
        """Write one generation (or refuse); never raises for store or file errors, reports them.

        ``supersede=True`` is the explicit override for the two lineage refusals
        (``refused_foreign``: the newest generation was written by another store;
        ``refused_older``: the store holds an address below the newest generation): the
        operator says this store's state is the one to keep. The empty and shrink guards
        still apply.
        """
        epoch = next(self._epochs) if _epoch is None else _epoch
        with self._export_lock:
            result = self._export(store, epoch, supersede)
        self._count(result.outcome)
        if result.outcome == "written":
            log.info("memory archive export written: generation %s, %s records", result.generation, result.record_count)
        else:
            log.warning("memory archive export %s: %s", result.outcome, result.message)
        return result

    def _sweep(self) -> None:
        for name in self.fs.listdir(self.directory):
            if name.startswith(TEMP_PREFIX):
                try:
                    self.fs.unlink(os.path.join(self.directory, name), "sweep")
                except OSError as exc:
                    log.warning("memory archive: cannot sweep stale %s: %s", name, _describe(exc))

    def _export(self, store: Any, epoch: int, supersede: bool) -> ExportResult:
        try:
            self._sweep()
            files = self._generation_files()
        except (OSError, ArchiveError) as exc:
            return ExportResult("failed", message=f"archive directory unreadable: {_describe(exc)}; {self._only_in_store()}")
        try:
            store_id = store.store_id()
            ids = lineage(store)
            cut = store.archive_cut()
        except Exception as exc:
            return ExportResult("incomplete", message=f"store could not be read ({_describe(exc)}); {self._only_in_store()}")
        live = {p["address"]: ProcessRecord(p["address"], p["version"], p["root_hash"], p["process_snapshot"])
                for p in cut["processes"]}
        tombstones = {t["address"]: Tombstone(t["address"], t["version"], t["root_hash"], t["removed_at"])
                      for t in cut["tombstones"] if t["address"] not in live}
        previous, errors = self.newest_valid()
        newest_unreadable = bool(errors)
        if previous is not None:
            for address, t in previous.tombstones.items():  # tombstones carry forward while absent
                if address not in live and address not in tombstones:
                    tombstones[address] = t
        if not live and (newest_unreadable or (previous is not None and previous.processes)):
            return ExportResult("refused_empty", message=(
                "the store holds no process but the previous generation is not empty"
                + (" (or unreadable)" if newest_unreadable else "") + "; old generations kept; " + self._only_in_store()))
        if previous is not None:
            missing = sorted(a for a in previous.processes if a not in live and a not in tombstones)
            if missing:
                return ExportResult("refused_shrink", missing=tuple(missing), message=(
                    f"{len(missing)} address(es) of generation {previous.generation} are missing without a tombstone "
                    f"(first: {missing[0]}); old generations kept; " + self._only_in_store()))
        if previous is not None and not supersede:
            refusal = self._lineage_refusal(previous, store_id, ids, cut)
            if refusal is not None:
                return refusal
        number = (files[-1][0] + 1) if files else 1
        if number > MAX_GENERATION_NUMBER:
            return ExportResult("failed", message=(
                f"no generation number is left: a file in the archive directory is named generation {files[-1][0]}, "
                "the last one a header can carry; move it out of the archive directory; old generations kept; "
                + self._only_in_store()))
        data = encode_generation(store_id=store_id, generation=number, sequence=cut["sequence"],
                                 cut_time=int(self.clock()), writer=self.identity,
                                 processes=list(live.values()), tombstones=list(tombstones.values()))
        digest = data[-32:].hex()
        if len(data) > self.max_generation_bytes:
            return ExportResult("failed", number, message=(
                f"the generation would be {len(data)} bytes, over the archive's limit of {self.max_generation_bytes} "
                "(max_generation_bytes: no reader would take it); old generations kept; " + self._only_in_store()))
        try:
            path = self._publish(number, data, epoch)
        except _Cancelled:
            return ExportResult("incomplete", number, message=f"export cancelled past its budget; {self._only_in_store()}")
        except _PublishError as exc:
            return ExportResult("failed", number, message=f"{exc}; {self._only_in_store()}")
        self._last_good = self.clock()
        self.gauges.update(last_export_time=self._last_good, last_export_records=len(live) + len(tombstones),
                           last_export_digest=digest)
        self._prune()
        return ExportResult("written", number, path, len(live) + len(tombstones), digest)

    def _lineage_refusal(self, previous: Generation, store_id: str, ids: set[str],
                         cut: dict[str, Any]) -> ExportResult | None:
        """Refuse to publish below what the archive holds: another store's archive, or older state."""
        keep = f"old generations kept; export with supersede to replace them on purpose; {self._only_in_store()}"
        if previous.store_id not in ids:
            return ExportResult("refused_foreign", message=(
                f"generation {previous.generation} was written by store {previous.store_id}, this store is "
                f"{store_id} and was not restored from it (two stores sharing one archive directory?); {keep}"))
        heads = {p["address"]: (p["version"], p["root_hash"]) for p in cut["processes"]}
        # Absent counts too: an address missing from the store passed the shrink guard only
        # by a tombstone, and one below the archived version (an earlier incarnation's
        # removal, in a stale copy of the store) does not cover the newer archived state.
        behind = tuple(behind_archive(previous, heads, cut["tombstones"], include_absent=True))
        if behind:
            return ExportResult("refused_older", behind=behind, message=(
                f"{len(behind)} address(es) are older in the store than in generation {previous.generation} "
                f"(a stale or rolled-back copy of the store?); first: {behind[0].describe()}; {keep}"))
        return None

    def _publish(self, number: int, data: bytes, epoch: int) -> str:
        """temp (O_EXCL) -> write -> fsync -> close -> read back and re-hash -> replace -> fsync dir."""
        temp = os.path.join(self.directory, f"{TEMP_PREFIX}{number:020d}-{os.getpid()}-{secrets.token_hex(6)}")
        target = os.path.join(self.directory, generation_name(number))
        fd: int | None = None
        replaced = False
        try:
            fd = self.fs.open_exclusive(temp)
            self.fs.write(fd, data, temp)
            self.fs.fsync(fd, temp)
            self.fs.close(fd, temp)
            fd = None
            back = self.fs.read(temp, "reread", max_bytes=len(data))
            if blake3.blake3(back).digest() != blake3.blake3(data).digest():
                raise _PublishError("read-back verification failed: the temp file differs from what was written")
            if epoch < self._cancel_below:
                raise _Cancelled()
            self.fs.replace(temp, target)
            replaced = True
            self.fs.fsync_dir(self.directory)
            while self._unsynced_parents:  # a new archive directory's own entry, once, top-down
                self.fs.fsync_dir(self._unsynced_parents[0])
                self._unsynced_parents.pop(0)
            return target
        except (_Cancelled, _PublishError):
            raise
        except OSError as exc:
            step = "after publishing (directory fsync)" if replaced else "before publishing"
            raise _PublishError(f"write failed {step}: {_describe(exc)}") from None
        finally:
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
            if not replaced:
                try:
                    if os.path.lexists(temp):
                        self.fs.unlink(temp, "cleanup")
                except OSError:
                    pass

    def _prune(self) -> None:
        """Delete what is older than the N newest generations that verify (only after the new one is durable).

        Counting only files that verify (seal, header, and a name that agrees with it)
        keeps a damaged or misnamed newer file from pushing good generations out; such a
        file is itself kept while it is newer than the N-th good one, as evidence.
        """
        try:
            good = 0
            for _, path in reversed(self._generation_files()):
                if good >= self.generations:
                    self.fs.unlink(path, "prune")
                    continue
                try:
                    self.read(path, restore_snapshots=False)
                except (OSError, InvalidArchive):
                    continue
                good += 1
        except (OSError, ArchiveError) as exc:
            log.warning("memory archive: pruning failed (old generations kept): %s", _describe(exc))

    # ------------------------------------------------------------------ periodic and final export
    def start(self, store: Any) -> None:
        """Export every ``interval_seconds`` on a daemon thread until :meth:`close`."""
        if self._thread is not None:
            return
        self._stop.clear()

        def loop() -> None:
            while not self._stop.wait(self.interval_seconds):
                try:
                    self.export(store)
                except Exception as exc:  # pragma: no cover - export reports, this is a last resort
                    log.error("memory archive periodic export raised: %s", _describe(exc))

        self._thread = threading.Thread(target=loop, name=f"{self.identity}-periodic", daemon=True)
        self._thread.start()

    def close(self, store: Any, *, budget_seconds: Any = None,
              exit_after: Callable[[ExportResult], None] | None = None) -> ExportResult:
        """Stop the periodic exporter and run one final export bounded by the stop budget (1-60 s).

        Returns within the budget (plus scheduling slack) even if the export stalls: then
        the export is told to stop before publishing, the old generations stay intact,
        and the result is ``incomplete`` with a warning. The export runs on a worker
        thread joined until the budget runs out.

        With ``exit_after`` (the SIGTERM path) the worker takes the export lock and then
        the store lock, and keeps both until ``exit_after`` ends the process: no commit
        can be acknowledged after the cut, so the final generation holds the last
        acknowledged version. Waiting for the store lock counts against the budget, and
        it is only ever waited for on this worker, never on the thread the signal
        interrupted (which may be inside a commit holding it).
        """
        budget = self.stop_timeout_seconds if budget_seconds is None else clamp_stop_timeout(budget_seconds)[0]
        deadline = time.monotonic() + budget
        self._stop.set()
        box: list[ExportResult] = []
        epoch = next(self._epochs)
        store_lock = getattr(getattr(store, "engine", None), "lock", None) if exit_after is not None else None

        def work() -> None:
            if store_lock is None:
                box.append(self.export(store, _epoch=epoch))
                return
            if not self._export_lock.acquire(timeout=max(0.0, deadline - time.monotonic())):
                return
            if not store_lock.acquire(timeout=max(0.0, deadline - time.monotonic())):
                self._export_lock.release()
                return
            result = self.export(store, _epoch=epoch)
            box.append(result)
            assert exit_after is not None
            exit_after(result)  # ends the process with both locks held

        worker = threading.Thread(target=work, name=f"{self.identity}-final", daemon=True)
        worker.start()
        worker.join(max(0.0, deadline - time.monotonic()))
        self._thread = None
        if box:
            return box[0]
        # Cancel this final export and every export that started before it (a stalled periodic one).
        self._cancel_below = max(self._cancel_below, epoch + 1)
        self.counters["export_incomplete"] += 1
        message = f"final export did not finish within {budget:g} s; old generations kept; {self._only_in_store()}"
        log.warning("memory archive final export incomplete: %s", message)
        result = ExportResult("incomplete", message=message)
        if exit_after is not None:
            exit_after(result)
        return result

    # ------------------------------------------------------------------ restore
    def restore(self, store: Any, *, mode: str | None = None,
                before_verify: Callable[[Any], None] | None = None) -> RestoreResult:
        """Decide and (maybe) restore; counts and logs the outcome. ``before_verify`` is a test hook."""
        try:
            result = self._restore(store, normalize_restore_mode(mode)[0] if mode is not None else self.restore_mode,
                                   before_verify)
        except Exception as exc:
            result = RestoreResult("failed", message=f"restore raised: {_describe(exc)}")
        self._count(result.outcome, "restore")
        level = {"restored": logging.WARNING, "partial": logging.ERROR, "failed": logging.ERROR}.get(
            result.outcome, logging.INFO)
        if result.fell_back:
            level = max(level, logging.ERROR)
        log.log(level, "memory archive restore %s: %s", result.outcome, result.message)
        return result

    def _restore(self, store: Any, mode: str, before_verify: Callable[[Any], None] | None) -> RestoreResult:
        if mode == "off":
            return RestoreResult("not_attempted", message="restore mode is off")
        try:
            marker = decode_marker(store.read_restore_marker())
            empty = not store.addresses()
        except Exception as exc:
            return RestoreResult("failed", message=f"cannot read the store to decide ({_describe(exc)}); "
                                 "an unreadable store is not an empty one")
        if mode == "auto" and not empty and marker != "partial":
            return RestoreResult("not_attempted", message="the store holds processes and no partial restore is recorded")
        try:
            generation, skipped = self.newest_verified()
            any_files = bool(self._generation_files())
        except (OSError, ArchiveError) as exc:
            return RestoreResult("failed", message=f"archive directory unreadable: {_describe(exc)}")
        if generation is None:
            if any_files:
                return RestoreResult("failed", skipped=skipped, message="no generation verifies: " + "; ".join(
                    f"{generation_name(s.number)}: {s.reason}" for s in skipped))
            return RestoreResult("nothing_to_restore", message="the archive holds no generation")
        fallback = ""
        if skipped:
            fallback = f"fell back to generation {generation.generation}, newer ones failed verification (" + "; ".join(
                f"generation {s.number}: {s.reason}" for s in skipped) + "); "
        if not generation.processes and marker != "partial":
            return RestoreResult("nothing_to_restore", generation.generation, skipped=skipped,
                                 message=fallback + "the newest verified generation is empty")
        now = int(self.clock())
        source = generation.store_id
        try:
            store.write_restore_marker(encode_marker("partial", generation.generation, generation.digest, now, source))
        except Exception as exc:
            return RestoreResult("failed", generation.generation, skipped=skipped,
                                 message=f"{fallback}writing the partial marker failed ({_describe(exc)}); restore aborted")
        heads = store.archive_heads()
        # A removal this store recorded outlives every archived copy up to that version:
        # restore never brings back what was deliberately removed (G4), neither into an
        # absent address nor over a later incarnation created after the removal (whose
        # versions start again, so an archived copy of the removed one may be higher).
        removed: dict[str, int] = {}
        for t in store.archive_tombstones():
            removed[t["address"]] = max(removed.get(t["address"], -1), t["version"])
        written: list[str] = []
        problems: list[str] = []
        for address in sorted(generation.processes):
            record = generation.processes[address]
            if removed.get(address, -1) >= record.version:
                continue
            current = heads.get(address)
            current_entry = Entry(True, *current) if current is not None else None
            if dominates(current_entry, record.entry()):
                continue
            try:
                store.install_archived(Process.restore(record.process_snapshot))
                written.append(address)
            except Exception as exc:
                problems.append(f"{address}: {_describe(exc)}")
                if getattr(store, "terminal", False):
                    break
        if before_verify is not None:
            before_verify(store)
        try:
            heads = store.archive_heads()
        except Exception as exc:
            return RestoreResult("partial", generation.generation, tuple(written), tuple(sorted(generation.processes)),
                                 f"{fallback}verification could not read the store ({_describe(exc)})", skipped)
        missing = []
        for address, record in sorted(generation.processes.items()):
            if removed.get(address, -1) >= record.version:
                continue
            current = heads.get(address)
            if not dominates(Entry(True, *current) if current is not None else None, record.entry()):
                missing.append(address)
        if missing:
            detail = f"{len(missing)} of {len(generation.processes)} archived addresses are not dominated by the store " \
                     f"(first: {missing[0]}); wrote {len(written)}"
            if problems:
                detail += "; errors: " + "; ".join(problems[:3])
            return RestoreResult("partial", generation.generation, tuple(written), tuple(missing), fallback + detail,
                                 skipped)
        try:
            store.write_restore_marker(encode_marker("restored", generation.generation, generation.digest, now, source))
        except Exception as exc:
            return RestoreResult("failed", generation.generation, tuple(written), skipped=skipped,
                                 message=f"{fallback}verified, but writing the restored marker failed ({_describe(exc)})")
        return RestoreResult("restored", generation.generation, tuple(written), skipped=skipped,
                             message=f"{fallback}generation {generation.generation}: wrote {len(written)}, "
                                     f"{len(generation.processes)} archived addresses verified by dominance")


class _PublishError(Exception):
    pass


def _describe(exc: BaseException) -> str:
    """A failure's text for results and logs: Svit messages as they are, OS and library
    errors only by their classified problem (their text names host files)."""
    if isinstance(exc, SvitError):
        return exc.message
    if isinstance(exc, OSError) and exc.errno in (errno.ENOTDIR, errno.EEXIST):
        return "a path is not a directory where one is needed"
    return describe_storage_failure(exc)


# ---------------------------------------------------------------------- statement
def durability_statement(store_path: str | os.PathLike[str], archive: MemoryArchive | None) -> dict[str, Any]:
    """The startup statement (dict with a ``text`` line block), with or without an archive."""
    store_real = os.path.realpath(os.fspath(store_path))
    lines = [
        "svit durability statement",
        f"state of record: {store_real} (RocksDB; each acknowledged commit is one synced write batch; "
        "WAL recovery point_in_time)",
        "rebuildable: path index, fork-child index and ready index (ProcessStore.reset_index)",
    ]
    out: dict[str, Any] = {"store_path": store_real, "archive_path": None, "flags": {}, "warnings": []}
    if archive is None:
        lines += [
            "memory archive: disabled",
            "protects: acknowledged commits survive a process crash or power loss (synced WAL)",
            "does not protect: loss, wipe or corruption of the store directory (no copy exists elsewhere)",
            "RPO: unbounded on store loss (no archive)",
        ]
        out["rpo_seconds"] = None
        warnings = ["no memory archive is configured: a lost store directory is unrecoverable"]
    else:
        flags = archive.location_flags(store_real)
        warnings = archive.warnings(store_real)
        out.update(archive_path=archive.directory, flags=flags, rpo_seconds=archive.interval_seconds,
                   restore_mode=archive.restore_mode, generations=archive.generations,
                   interval_seconds=archive.interval_seconds, stop_timeout_seconds=archive.stop_timeout_seconds,
                   identity=archive.identity)
        lines += [
            f"memory archive: {archive.directory} ({archive.generations} verified generations, export every "
            f"{archive.interval_seconds:g} s by {archive.identity}, final export on shutdown within "
            f"{archive.stop_timeout_seconds:g} s, restore mode {archive.restore_mode})",
            "protects: acknowledged commits survive a crash (synced WAL); a lost or wiped store is restored "
            "from the newest verified generation at open",
            "does not protect: state written since the last good export (a SIGKILL or host crash skips the final "
            "export), loss of the archive's own volume, fork lineage and history (restored addresses come back "
            "as imported processes)",
            f"RPO: {archive.interval_seconds:g} s (export interval) on store loss; 0 on crash",
            f"flags: archive_inside_store={flags['archive_inside_store']} shares_device={flags['shares_device']} "
            f"in_git_worktree={flags['in_git_worktree']}",
        ]
    lines += [f"WARNING: {w}" for w in warnings]
    out["warnings"] = warnings
    out["text"] = "\n".join(lines) + "\n"
    return out


# ---------------------------------------------------------------------- opening and shutdown
ROLLBACK_ACTIONS = ("fail", "continue")


def open_store_with_archive(store_path: str | os.PathLike[str], archive: MemoryArchive, *,
                            restore_mode: str | None = None, start: bool = True,
                            fail_closed: bool = True, on_rollback: str = "fail") -> tuple[Any, RestoreResult]:
    """Open the store, log the statement, check for a rollback, decide and run the restore, THEN return.

    No write races the decision. A store holding an address below the archive's newest
    generation (acknowledged commits lost, see :meth:`MemoryArchive.check_rollback`) is
    logged at ERROR per address and then, with ``on_rollback="fail"`` (the default),
    closed and :class:`StoreRolledBack` raised before anything is written; with
    ``"continue"`` the result's ``rollbacks`` names them and the caller decides.
    ``failed`` or ``partial`` restores close the store and raise
    :class:`ArchiveRestoreFailed` (``fail_closed=False`` returns the store anyway). With
    ``start`` the periodic exporter begins after the decision.
    """
    if on_rollback not in ROLLBACK_ACTIONS:
        raise ArchiveConfigError(f"on_rollback must be one of {', '.join(ROLLBACK_ACTIONS)}, not {on_rollback!r}")
    store = ProcessStore.open(store_path)
    try:
        statement = durability_statement(store.path, archive)
        for line in statement["text"].splitlines():
            log.warning("%s", line)
        store.store_id()
        rollbacks = archive.check_rollback(store)
        if rollbacks and on_rollback == "fail":
            raise StoreRolledBack(
                f"{len(rollbacks)} address(es) are below the archive's record of acknowledged state "
                f"(first: {rollbacks[0].describe()}); the store was not changed. Acknowledged commits were lost "
                "(a damaged write-ahead log or an older copy of the store directory). To take the archived state "
                "back, restore with mode always; commits after that export are gone either way", rollbacks)
        result = replace(archive.restore(store, mode=restore_mode), rollbacks=rollbacks)
    except BaseException:
        store.close()
        raise
    if fail_closed and result.outcome in ("failed", "partial"):
        store.close()
        raise ArchiveRestoreFailed(f"{result.outcome}: {result.message}", result)
    if start:
        archive.start(store)
    return store, result


def install_sigterm_handler(archive: MemoryArchive, store: Any, *, exit_code: int | None = 143) -> None:
    """On SIGTERM: one final export within the archive's stop budget, then exit (``exit_code``).

    The handler itself only wakes an exporter thread started here: Python runs signal
    handlers on the main thread, which may be inside a commit holding the store lock,
    so an export waited for inside the handler could never get that lock. The exporter
    waits for the interrupted commit to finish, takes the cut holding the store lock
    and exits with ``os._exit`` still holding it (no commit is acknowledged after the
    cut, and a stalled exporter cannot delay the exit). The store needs no close for
    durability: every acknowledged write was synced. With ``exit_code=None`` the final
    export runs the same way but the process goes on (the store lock is not kept).
    """
    requested = threading.Event()
    finished = threading.Lock()

    def report(result: ExportResult) -> None:
        print(f"svit archive: final export {result.outcome} {result.message}".rstrip(), file=sys.stderr, flush=True)

    def finish(result: ExportResult) -> None:
        if not finished.acquire(blocking=False):
            return  # the worker and the budget raced; the first one reports and exits
        report(result)
        sys.stdout.flush()
        os._exit(exit_code if exit_code is not None else 0)

    def exporter() -> None:
        requested.wait()
        if exit_code is None:
            report(archive.close(store))
        else:
            archive.close(store, exit_after=finish)

    def handler(signum: int, frame: Any) -> None:
        requested.set()

    threading.Thread(target=exporter, name=f"{archive.identity}-sigterm", daemon=True).start()
    signal.signal(signal.SIGTERM, handler)


__all__ = [
    "MemoryArchive", "open_store_with_archive", "install_sigterm_handler", "durability_statement",
    "encode_generation", "decode_generation", "Generation", "ProcessRecord", "Tombstone", "ExportResult",
    "RestoreResult", "GenerationInfo", "Entry", "join", "project", "dominates", "ArchiveError",
    "ArchiveConfigError", "ArchiveUnavailable", "InvalidArchive", "ArchiveRestoreFailed", "EXPORT_OUTCOMES", "RESTORE_OUTCOMES",
    "StoreRolledBack", "Rollback", "SkippedGeneration", "behind_archive", "lineage", "ROLLBACK_ACTIONS",
    "encode_marker", "decode_marker", "marker_source_store", "clamp_interval", "clamp_stop_timeout",
    "normalize_restore_mode", "generation_name", "DEFAULT_MAX_GENERATION_BYTES", "MAX_GENERATION_NUMBER",
]
