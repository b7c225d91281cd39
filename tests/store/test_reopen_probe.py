"""The child process that makes a reader's read-only reopens first (``_Prober``), and the
choice between RocksDB's secondary and read-only instances, in the cases that go wrong:
an exchange with the child cut short, a reader holding many file descriptors, OPTIONS
files that vanish each time they are read, and a reused log left behind by a writer
whose OPTIONS files no longer say so.

Each reopen's answer must be the answer to *that* reopen: a stale one would pass a reopen
the child never finished, so the in-process open would run unbounded.
"""

from __future__ import annotations

import os
import re
import resource
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from svit import Process
from svit.errors import PersistenceUnavailable
from svit.store import ProcessStore, rocksdb
from tests.store.test_log_reuse import ENV, Follower, RollingWriter

# A stand-in for the probe loop: answers each store directory with that directory as its
# one "column family", after a pause (long enough for a timer to cut the exchange short).
ECHO = """
import json, sys, time
for line in sys.stdin:
    time.sleep(0.3)
    print(json.dumps({"column_families": [json.loads(line)]}), flush=True)
"""


class Interrupted(Exception):
    pass


def _interrupt(signum: int, frame: Any) -> None:
    raise Interrupted


def test_an_exchange_cut_short_leaves_no_answer_for_the_next_reopen(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rocksdb, "_PROBE", ECHO)
    prober = rocksdb._Prober()
    previous = signal.signal(signal.SIGALRM, _interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.1)  # while the child works on the first path
        with pytest.raises(Interrupted):
            prober.column_families("first", 10.0)
        signal.setitimer(signal.ITIMER_REAL, 0)
        # The answer read is the one to this request, not the first one's, still on its way.
        assert prober.column_families("second", 10.0) == ["second"]
        assert prober.column_families("third", 10.0) == ["third"]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        prober.close()


def test_a_child_that_printed_something_else_is_not_asked_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """A line that is not an answer (a library printing to standard output, say) is
    refused, and the child with it: its real answer would come next, to the next reopen."""
    monkeypatch.setattr(rocksdb, "_PROBE", "print('a warning', flush=True)\n" + ECHO)
    prober = rocksdb._Prober()
    try:
        with pytest.raises(PersistenceUnavailable, match="bad answer"):
            prober.column_families("first", 10.0)
        monkeypatch.setattr(rocksdb, "_PROBE", ECHO)
        assert prober.column_families("second", 10.0) == ["second"]
    finally:
        prober.close()


def test_a_reader_holding_many_file_descriptors_still_reopens(tmp_path: Path) -> None:
    """``select`` refuses a descriptor numbered past 1,023; a reader of a store with many
    table files (a read-only instance keeps every one open), or in a busy server, has one."""
    path = tmp_path / "store"
    store = ProcessStore.open(path)
    store.create(Process.builder("svit://local/test/fds").memory("count", 0).build())
    store.close()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 1200
    if soft < wanted:
        if hard != resource.RLIM_INFINITY and hard < wanted:
            pytest.skip(f"the test needs {wanted} file descriptors; this machine allows {hard}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    held: list[int] = []
    prober = rocksdb._Prober()
    try:
        while not held or held[-1] < 1100:
            held.append(os.open(os.devnull, os.O_RDONLY))
        names = prober.column_families(str(path), 60.0)  # its pipes are numbered past 1,100
        assert "default" in names and len(names) > 1
    finally:
        prober.close()
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_options_files_that_keep_vanishing_choose_read_only_instances(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whether the writer reuses its logs is read from its OPTIONS files, which a writer
    opening replaces. Not knowing must not choose the secondary instance (which loops
    forever on a reused log): the read-only one follows any writer."""
    path = tmp_path / "store"
    writer = ProcessStore.open(path, reuse_logs=True)
    writer.close()
    assert rocksdb._logs_may_be_reused(str(path))

    def vanished(*args: Any, **kwargs: Any) -> Any:
        raise FileNotFoundError(2, "No such file or directory")

    monkeypatch.setattr(rocksdb, "open", vanished, raising=False)
    assert rocksdb._logs_may_be_reused(str(path))


def test_an_instance_opened_before_its_files_could_be_listed_again_is_closed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A read-only open whose files cannot be listed after it (the directory went, say)
    fails, and the instance it made is closed then, not kept open by the failure."""
    path = tmp_path / "store"
    writer = ProcessStore.open(path, reuse_logs=True)
    writer.create(Process.builder("svit://local/test/closed").memory("count", 0).build())
    writer.close()
    opened: list[Any] = []
    real_open, real_files = rocksdb._open_read_only, rocksdb._store_files
    looks: list[str] = []

    def recording(where: str) -> Any:
        db = real_open(where)
        opened.append(db)
        return db

    def listed_once(where: str) -> Any:
        looks.append(where)
        if len(looks) > 1:
            raise rocksdb.storage_error(PermissionError(13, "Permission denied"), "cannot follow the store's writer")
        return real_files(where)

    monkeypatch.setattr(rocksdb, "_open_read_only", recording)
    monkeypatch.setattr(rocksdb, "_store_files", listed_once)
    failure = None
    try:
        rocksdb._open_settled_read_only(str(path), None, True, rocksdb._Prober())
    except Exception as exc:
        failure = exc  # kept, as a caller may keep it: it must not keep the instance open
    assert failure is not None and len(opened) == 1
    with pytest.raises(Exception, match="closed"):
        opened[0].get(b"x")


def test_a_reused_log_left_behind_is_followed_read_only_whatever_the_options_files_say(tmp_path: Path) -> None:
    """The OPTIONS files are not the whole story: an ordinary writer writes its own before
    it deletes the logs its reusing predecessor left (one of them written over an older
    log); killed in between, and followed by another ordinary writer, both kept OPTIONS
    files are theirs while those logs are still there. A secondary instance loops forever
    on such a log (holding the GIL), so the log files decide too: one in RocksDB's
    reusable record format is followed by read-only instances."""
    path = str(tmp_path / "store")
    writer = RollingWriter(path)
    try:
        writer.wait_until(lambda: writer.reused >= 2, "wrote into a reused log twice")
    finally:
        writer.kill()
    # What the two ordinary writers' opens leave: their OPTIONS files, the reused logs still there.
    numbered = sorted((int(name[len("OPTIONS-"):]), name) for name in os.listdir(path)
                      if rocksdb._OPTIONS.fullmatch(name))
    text = Path(path, numbered[-1][1]).read_text().replace(
        f"recycle_log_file_num={rocksdb.REUSED_LOGS}", "recycle_log_file_num=0")
    assert "recycle_log_file_num=0" in text
    for _number, name in numbered:
        os.remove(Path(path, name))
    for step in (1, 2):
        Path(path, f"OPTIONS-{numbered[-1][0] + step:06d}").write_text(text)
    assert not rocksdb.writer_reuses_logs(path)
    assert rocksdb._logs_may_be_reused(path)
    follower = Follower(path)  # in its own process: a secondary would loop there, not here
    try:
        seen = follower.ask("follow")
        assert seen["reopening"] and seen["blob_ok"] and seen["version"] >= max(writer.acked), seen
    finally:
        follower.stop()


# A writer reusing its logs that commits until its log was reused twice, and after each
# commit returns looks up a file named for it (absent: the trace shows the lookup).
REUSING_WRITER = """
import os, sys
from svit import Process
from svit.store import ProcessStore
from tests.store.log_roll_writer import ADDRESS, blob, log_files
from svit.store.rocksdb import REUSED_LOG_BYTES
path, marks = sys.argv[1], sys.argv[2]
store = ProcessStore.open(path, reuse_logs=True)
handle = store.create(Process.builder(ADDRESS).memory("blob", "").build())
logs, reused = log_files(path), 0
while reused < 3:
    handle.write("/memory/blob", blob(handle.version + 1))
    os.path.exists(os.path.join(marks, f"acknowledged-{handle.version}"))
    now = log_files(path)
    reused += now.keys() != logs.keys() and now[max(now)] > REUSED_LOG_BYTES // 2
    logs = now
store.close()
"""


def test_a_reused_log_s_new_name_is_synced_before_a_commit_in_it_is_acknowledged(tmp_path: Path) -> None:
    """Reusing a log renames a kept file to the new log's number; a commit written into it
    may be acknowledged only once the directory holding that name was synced (else a power
    loss could leave the old name, whose records recovery ignores). RocksDB syncs the
    directory at the first log sync after a new log; this traces the system calls."""
    strace = shutil.which("strace")
    if strace is None:
        pytest.skip("strace is not installed")
    path, marks, trace = tmp_path / "store", tmp_path / "marks", tmp_path / "trace"
    marks.mkdir()
    subprocess.run([strace, "-f", "-qq", "-o", str(trace), "-e", "trace=openat,close,rename,renameat,renameat2,"
                    "fsync,fdatasync,access,newfstatat,stat", sys.executable, "-c", REUSING_WRITER, str(path), str(marks)],
                   check=True, env=ENV, timeout=120, stdout=subprocess.DEVNULL)
    directory: set[int] = set()  # descriptors open on the store directory (shared by all threads)
    pending_fsync: dict[str, int] = {}
    renamed: list[str] = []  # reused logs' new names whose directory sync is still owed
    reused = acknowledged = 0
    store = re.escape(str(path))
    for line in trace.read_text().splitlines():
        pid, _, call = line.partition(" ")
        call = call.strip()
        if (opened := re.match(rf'openat\(AT_FDCWD, "{store}/?", [^)]*\) = (\d+)', call)) is not None:
            directory.add(int(opened.group(1)))
        elif (closed := re.match(r"close\((\d+)\)", call)) is not None:
            directory.discard(int(closed.group(1)))
        elif (moved := re.match(rf'rename\("{store}/\d+\.log", "({store}/\d+\.log)"\) = 0', call)) is not None:
            renamed.append(moved.group(1))
            reused += 1
        elif (synced := re.match(r"fsync\((\d+)(\)\s+= 0| <unfinished)", call)) is not None:
            fd = int(synced.group(1))
            if synced.group(2).startswith(" <"):
                pending_fsync[pid] = fd if renamed else -1  # counts only if begun after the rename
            elif fd in directory:
                renamed.clear()
        elif call.startswith("<... fsync resumed>") and call.endswith("= 0"):
            if pending_fsync.pop(pid, -1) in directory:
                renamed.clear()
        elif f"{marks}/acknowledged-" in call:
            acknowledged += 1
            assert not renamed, f"commit acknowledged before the directory sync after renaming {renamed}"
    assert reused >= 2 and acknowledged > 100, (reused, acknowledged)
