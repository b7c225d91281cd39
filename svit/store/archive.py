"""The memory archive: verified generations of every process, kept outside the store.

Why it exists (DESIGN §5.7, durability.md 4-14): a process store can be wiped by a
gesture aimed at something else (a deleted volume, a "start clean"). The archive keeps
a copy of every address's irreplaceable state (the ``svit-snapshot@1`` process
snapshot: memory, /lib, /inbox, /thread, /system/outbox, everything) somewhere the
gesture does not reach, and puts it back when the store comes up empty.

    archive = MemoryArchive("/srv/svit-archive")            # absolute, explicit, opt-in
    store, decision = open_store_with_archive("/srv/svit-store", archive)
    ...                                                        # periodic exports run
    archive.close(store); store.close()                        # final bounded export

Generation file ``generation-<20 digits>.svarc`` (format major 2, minor 0)::

    magic  b"SVARCHV1" (8) | major u16be | minor u16be | header length u32be
    header {cut_time, generation, sequence, store_id, writer}
    body   per record: length u32be | one map, records in address code-point order
             {address, kind: "process", process_snapshot, root_hash, version}
             {address, kind: "tombstone", removed_at, root_hash, version}
    trailer b"SVAREND1" (8) | record count u64be | BLAKE3 of every earlier byte (32)

The header and every record are in the one deterministic CBOR encoding of
:mod:`svit.cbor` (map keys in UTF-8 byte order, as listed above), and a reader accepts
nothing else. Major 1 wrote the same maps in length-first key order; it is refused
(``unknown major version 1``).

A reader checks the magic, the major version, the trailer magic, the digest, the
count, every record's fields, and restores every process snapshot (matching its
address, version and root hash) before it applies a single record.

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
from dataclasses import dataclass, field
from typing import Any, Callable, TypeGuard

import blake3

from .. import cbor
from ..errors import SvitError
from ..process import Process
from .failures import describe as describe_storage_failure
from .fsshim import FileSystem
from .store import ProcessStore

log = logging.getLogger("svit.store.archive")

MAGIC = b"SVARCHV1"
TRAILER_MAGIC = b"SVAREND1"
MAJOR = 2
MINOR = 0
_PREFIX = struct.Struct(">8sHHI")
_LENGTH = struct.Struct(">I")
_COUNT = struct.Struct(">Q")
TRAILER_BYTES = len(TRAILER_MAGIC) + _COUNT.size + 32
MAX_RECORD_BYTES = 256 * 1024 * 1024
GENERATION_RE = re.compile(r"^generation-(\d{20})\.svarc$")
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

EXPORT_OUTCOMES = ("written", "refused_empty", "refused_shrink", "incomplete", "failed")
RESTORE_OUTCOMES = ("restored", "partial", "nothing_to_restore", "not_attempted", "failed")
ONLY_IN_STORE = "state written since the last good export exists only in the live store"


# ---------------------------------------------------------------------- errors
class ArchiveError(SvitError):
    """Base of memory-archive failures."""

    code, prefix = "archive_error", "memory archive error"


class ArchiveConfigError(ArchiveError):
    code, prefix = "invalid_archive_config", "invalid memory archive configuration"


class InvalidArchive(ArchiveError):
    """A generation file failed verification (nothing from it was applied)."""

    code, prefix = "invalid_archive", "invalid archive generation"


class ArchiveRestoreFailed(ArchiveError):
    """The startup restore ended ``failed`` or ``partial``; the store was closed (fail-closed)."""

    code, prefix = "archive_restore_failed", "memory archive restore did not complete"

    def __init__(self, detail: str, result: RestoreResult | None = None) -> None:
        super().__init__(detail)
        self.result = result


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


def decode_generation(data: bytes) -> Generation:
    """Verify the WHOLE file, then return it; any defect raises :class:`InvalidArchive`.

    Minor versions above ours decode (unknown header fields are ignored); a missing
    optional header field takes its documented default (``cut_time`` 0, ``writer`` "").
    """
    if type(data) is not bytes:
        raise InvalidArchive("generation is not bytes")
    if len(data) < _PREFIX.size + TRAILER_BYTES:
        raise InvalidArchive("file is shorter than a header and a trailer")
    magic, major, minor, header_length = _PREFIX.unpack_from(data, 0)
    if magic != MAGIC:
        raise InvalidArchive("bad magic")
    if major != MAJOR:
        raise InvalidArchive(f"unknown major version {major}")
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
        _check_record(record, seen, processes, tombstones)
        seen += 1
    if seen != count:
        raise InvalidArchive(f"count mismatch: trailer says {count}, body holds {seen}")
    return Generation(store_id, generation, sequence, cut_time, writer, processes, tombstones,
                      trailer[-32:].hex(), minor)


def _check_record(record: Any, index: int, processes: dict[str, ProcessRecord],
                  tombstones: dict[str, Tombstone]) -> None:
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
class ExportResult:
    outcome: str
    generation: int | None = None
    path: str | None = None
    record_count: int = 0
    digest: str | None = None
    message: str = ""
    missing: tuple[str, ...] = ()


@dataclass(frozen=True)
class RestoreResult:
    outcome: str
    generation: int | None = None
    written: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()
    message: str = ""

    def as_tuple(self) -> tuple[str, int | None, tuple[str, ...], tuple[str, ...]]:
        return (self.outcome, self.generation, self.written, self.missing)


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


def encode_marker(state: str, generation: int | None, digest: str | None, now: int) -> bytes:
    return _canonical({"digest": digest or "", "format": MARKER_FORMAT, "generation": generation or 0,
                       "state": state, "time": now})


def decode_marker(raw: bytes | None) -> str | None:
    """``"partial"`` / ``"restored"``, or None when absent or unreadable (unreadable counts as absent)."""
    if raw is None:
        return None
    try:
        value = cbor.decode(raw)
    except cbor.CBORDecodeError:
        return None
    if type(value) is not dict or value.get("format") != MARKER_FORMAT or value.get("state") not in ("partial", "restored"):
        return None
    state: str = value["state"]
    return state


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
        self._export_lock = threading.Lock()
        #: Exports numbered below this are cancelled before publishing (set when a final export times out).
        self._epochs = itertools.count()
        self._cancel_below = -1
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_good: float | None = None
        self.fs.makedirs(self.directory)

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
        out = []
        for name in self.fs.listdir(self.directory):
            match = GENERATION_RE.match(name)
            if match:
                out.append((int(match.group(1)), os.path.join(self.directory, name)))
        return sorted(out)

    def read(self, path: str) -> Generation:
        """Read and verify one generation file (whole-file verification first)."""
        return decode_generation(self.fs.read(path))

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
                                      g.sequence, g.cut_time))
        return out

    def newest_valid(self) -> tuple[Generation | None, list[str]]:
        """The newest generation that verifies, and the errors of newer files that did not."""
        errors: list[str] = []
        for _number, path in reversed(self._generation_files()):
            try:
                return self.read(path), errors
            except (OSError, InvalidArchive) as exc:
                errors.append(f"{os.path.basename(path)}: {_describe(exc)}")
                log.warning("memory archive: skipping generation %s: %s", os.path.basename(path), _describe(exc))
        return None, errors

    def status(self, store_path: str | None = None) -> dict[str, Any]:
        """What ``svit archive status`` prints."""
        out: dict[str, Any] = {
            "archive": self.directory,
            "generations": [g.__dict__ for g in self.list_generations()],
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

    def export(self, store: Any, *, _epoch: int | None = None) -> ExportResult:
        """Write one generation (or refuse); never raises for store or file errors, reports them."""
        epoch = next(self._epochs) if _epoch is None else _epoch
        with self._export_lock:
            result = self._export(store, epoch)
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

    def _export(self, store: Any, epoch: int) -> ExportResult:
        try:
            self._sweep()
            files = self._generation_files()
        except OSError as exc:
            return ExportResult("failed", message=f"archive directory unreadable: {_describe(exc)}; {self._only_in_store()}")
        try:
            store_id = store.store_id()
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
        number = (files[-1][0] + 1) if files else 1
        data = encode_generation(store_id=store_id, generation=number, sequence=cut["sequence"],
                                 cut_time=int(self.clock()), writer=self.identity,
                                 processes=list(live.values()), tombstones=list(tombstones.values()))
        digest = data[-32:].hex()
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
            back = self.fs.read(temp, "reread")
            if blake3.blake3(back).digest() != blake3.blake3(data).digest():
                raise _PublishError("read-back verification failed: the temp file differs from what was written")
            if epoch < self._cancel_below:
                raise _Cancelled()
            self.fs.replace(temp, target)
            replaced = True
            self.fs.fsync_dir(self.directory)
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
        """Delete the oldest generations beyond N (only ever after the new one is durable)."""
        try:
            files = self._generation_files()
            for _, path in files[: max(0, len(files) - self.generations)]:
                self.fs.unlink(path, "prune")
        except OSError as exc:
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

    def close(self, store: Any, *, budget_seconds: Any = None) -> ExportResult:
        """Stop the periodic exporter and run one final export bounded by the stop budget (1-60 s).

        Returns within the budget (plus scheduling slack) even if the export stalls: then
        the export is told to stop before publishing, the old generations stay intact,
        and the result is ``incomplete`` with a warning.
        """
        budget = self.stop_timeout_seconds if budget_seconds is None else clamp_stop_timeout(budget_seconds)[0]
        deadline = time.monotonic() + budget
        self._stop.set()
        box: list[ExportResult] = []
        epoch = next(self._epochs)
        worker = threading.Thread(target=lambda: box.append(self.export(store, _epoch=epoch)),
                                  name=f"{self.identity}-final", daemon=True)
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
        return ExportResult("incomplete", message=message)

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
            generation, errors = self.newest_valid()
            any_files = bool(self._generation_files())
        except OSError as exc:
            return RestoreResult("failed", message=f"archive directory unreadable: {_describe(exc)}")
        if generation is None:
            if any_files:
                return RestoreResult("failed", message="no generation verifies: " + "; ".join(errors))
            return RestoreResult("nothing_to_restore", message="the archive holds no generation")
        if not generation.processes and marker != "partial":
            return RestoreResult("nothing_to_restore", generation.generation, message="the newest generation is empty")
        now = int(self.clock())
        try:
            store.write_restore_marker(encode_marker("partial", generation.generation, generation.digest, now))
        except Exception as exc:
            return RestoreResult("failed", generation.generation,
                                 message=f"writing the partial marker failed ({_describe(exc)}); restore aborted")
        heads = store.archive_heads()
        # A removal this store recorded outlives every archived copy up to that version:
        # restore never brings back what was deliberately removed (G4).
        removed = {t["address"]: t["version"] for t in store.archive_tombstones() if t["address"] not in heads}
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
                                 f"verification could not read the store ({_describe(exc)})")
        missing = []
        for address, record in sorted(generation.processes.items()):
            if removed.get(address, -1) >= record.version and address not in heads:
                continue
            current = heads.get(address)
            if not dominates(Entry(True, *current) if current is not None else None, record.entry()):
                missing.append(address)
        if missing:
            detail = f"{len(missing)} of {len(generation.processes)} archived addresses are not dominated by the store " \
                     f"(first: {missing[0]}); wrote {len(written)}"
            if problems:
                detail += "; errors: " + "; ".join(problems[:3])
            return RestoreResult("partial", generation.generation, tuple(written), tuple(missing), detail)
        try:
            store.write_restore_marker(encode_marker("restored", generation.generation, generation.digest, now))
        except Exception as exc:
            return RestoreResult("failed", generation.generation, tuple(written),
                                 message=f"verified, but writing the restored marker failed ({_describe(exc)})")
        return RestoreResult("restored", generation.generation, tuple(written),
                             message=f"generation {generation.generation}: wrote {len(written)}, "
                                     f"{len(generation.processes)} archived addresses verified by dominance")


class _PublishError(Exception):
    pass


def _describe(exc: BaseException) -> str:
    """A failure's text for results and logs: Svit messages as they are, OS and library
    errors only by their classified problem (their text names host files)."""
    if isinstance(exc, SvitError):
        return exc.message
    return describe_storage_failure(exc)


# ---------------------------------------------------------------------- statement
def durability_statement(store_path: str | os.PathLike[str], archive: MemoryArchive | None) -> dict[str, Any]:
    """The startup statement (dict with a ``text`` line block), with or without an archive."""
    store_real = os.path.realpath(os.fspath(store_path))
    lines = [
        "svit durability statement",
        f"state of record: {store_real} (RocksDB; each acknowledged commit is one synced write batch; "
        "WAL recovery point_in_time)",
        "rebuildable: path index and fork-child index (ProcessStore.reset_index)",
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
def open_store_with_archive(store_path: str | os.PathLike[str], archive: MemoryArchive, *,
                            restore_mode: str | None = None, start: bool = True,
                            fail_closed: bool = True) -> tuple[Any, RestoreResult]:
    """Open the store, log the statement, decide and run the restore, THEN return (no write races it).

    ``failed`` or ``partial`` closes the store and raises :class:`ArchiveRestoreFailed`
    (``fail_closed=False`` returns the store anyway). With ``start`` the periodic
    exporter begins after the decision.
    """
    store = ProcessStore.open(store_path)
    try:
        statement = durability_statement(store.path, archive)
        for line in statement["text"].splitlines():
            log.warning("%s", line)
        store.store_id()
        result = archive.restore(store, mode=restore_mode)
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

    The store needs no close for durability (every acknowledged write was synced);
    exiting with ``os._exit`` keeps a stalled exporter thread from delaying the exit.
    """

    def handler(signum: int, frame: Any) -> None:
        result = archive.close(store)
        print(f"svit archive: final export {result.outcome} {result.message}".rstrip(), file=sys.stderr, flush=True)
        if exit_code is not None:
            sys.stdout.flush()
            os._exit(exit_code)

    signal.signal(signal.SIGTERM, handler)


__all__ = [
    "MemoryArchive", "open_store_with_archive", "install_sigterm_handler", "durability_statement",
    "encode_generation", "decode_generation", "Generation", "ProcessRecord", "Tombstone", "ExportResult",
    "RestoreResult", "GenerationInfo", "Entry", "join", "project", "dominates", "ArchiveError",
    "ArchiveConfigError", "InvalidArchive", "ArchiveRestoreFailed", "EXPORT_OUTCOMES", "RESTORE_OUTCOMES",
]
