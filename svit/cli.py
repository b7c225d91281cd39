"""The ``svit`` command.

Every failure prints one line, ``svit: <code>: <message>``, on stderr and exits 1;
usage errors exit 2. Set ``SVIT_DEBUG=1`` to see a Python traceback instead.

Importing ``svit`` loads the in-memory runtime, so this module imports it at the top.
Some imports are deferred into the commands that need them, each because it would
otherwise load on every start, ``svit --version`` included: the durable store and the
archive (``rocksdict``, ~90-170 ms), the fixture runner, the console and the REPL
(``prompt_toolkit``), and ``platformdirs``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from . import cli_history
from ._version import __version__
from .activation import compile_check
from .errors import SvitError
from .limits import Limits
from .process import Process
from .values import from_json_text

if TYPE_CHECKING:
    from .store import ProcessStore
    from .store.archive import MemoryArchive

__all__ = ["CLI_ADDRESS", "CliError", "build_parser", "main"]

CLI_ADDRESS = "svit://local/cli/process"


class CliError(Exception):
    """A failure outside the runtime (a missing file, bad JSON) with its own code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # usage errors: one line, exit 2
        sys.stderr.write(f"svit: usage: {message}\n")
        sys.exit(2)


def read_source(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CliError("file_not_found", f"no such file: {path}") from None
    except IsADirectoryError:
        raise CliError("file_not_found", f"is a directory, not a script: {path}") from None
    except UnicodeDecodeError:
        raise CliError("invalid_value", f"script is not UTF-8 text: {path}") from None
    except OSError as exc:
        raise CliError("io_error", f"cannot read {path}: {exc.strerror}") from None


def parse_json(text: str | None, what: str = "input") -> Any:
    if text is None:
        return None
    try:
        return from_json_text(text)
    except SvitError as exc:
        raise CliError("invalid_value", f"{what} is not valid JSON: {exc.detail}") from None


def emit(value: Any, pretty: bool = True) -> None:
    text = json.dumps(value, indent=2 if pretty else None, ensure_ascii=False, sort_keys=True)
    sys.stdout.write(text + "\n")


def cmd_exec(args: argparse.Namespace) -> int:
    source = read_source(args.file)
    input_value = parse_json(args.input)
    process = Process.builder(CLI_ADDRESS).build()
    process.write("/lib/main", {"source": source, "documentation": f"from {Path(args.file).name}"})
    activation = process.exec("/lib/main", input_value)
    emit({"memory": process.read("/memory"), "output": activation.output, "version": activation.version}, not args.compact)
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    source = read_source(args.file)
    compile_check("main", source, Limits())
    emit({"file": args.file, "ok": True}, not args.compact)
    return 0


def cmd_spec(args: argparse.Namespace) -> int:
    from .spec import FixtureError, packaged_fixtures, run_directory  # noqa: PLC0415 - deferred: see the module docstring

    directory = Path(args.directory) if args.directory else packaged_fixtures()
    if not directory.is_dir():
        raise CliError("file_not_found", f"no fixture directory: {directory}")
    try:
        passed, failed, failures = run_directory(directory)
    except FixtureError as exc:
        raise CliError("invalid_fixture", str(exc)) from None
    for name, message in failures:
        sys.stderr.write(f"FAIL {name}: {message.splitlines()[0] if message else ''}\n")
    sys.stdout.write(f"{passed} passed, {failed} failed\n")
    return 0 if failed == 0 else 1


def cmd_repl(args: argparse.Namespace) -> int:
    from . import repl  # noqa: PLC0415 - deferred: see the module docstring

    repl.run(open_process_for(args), sys.stdin, sys.stdout)
    return 0


def open_process_for(args: argparse.Namespace) -> Any:
    """The process a command acts on: in memory when no address is given."""
    address = getattr(args, "address", None)
    if address is None:
        return Process.builder("svit://local/cli/repl").build()
    return open_store(args).resume(address)


DATABASE_SCHEMES = ("postgresql://", "postgres://")


def store_path(args: argparse.Namespace) -> Path | str:
    """``--store``, else ``SVIT_STORE``, else the platform user-data directory: a store
    directory, or a ``postgresql://`` URL (kept as given)."""
    explicit = getattr(args, "store", None) or os.environ.get("SVIT_STORE")
    if explicit and explicit.startswith(DATABASE_SCHEMES):
        return explicit
    if explicit:
        return Path(explicit).expanduser()
    import platformdirs  # noqa: PLC0415 - deferred: see the module docstring

    return Path(platformdirs.user_data_dir("svit", appauthor=False)) / "store"


_open_stores: list[ProcessStore] = []


def open_store(args: argparse.Namespace, read_only: bool = False) -> ProcessStore:
    """Open (creating, and saying where, the first time) the embedded store, or the
    PostgreSQL database ``--store``/``SVIT_STORE`` names. ``read_only``: look without
    taking the store's lock (it follows a writer in another process; a store that does
    not exist yet is ``persistence_not_found``). A writer is recorded as ``svit COMMAND``,
    so a second writer is told which command holds the store."""
    from .store import ProcessStore  # noqa: PLC0415 - deferred: see the module docstring

    path = store_path(args)
    holder = "svit " + str(getattr(args, "command", "") or "")
    if read_only or isinstance(path, str):
        store = ProcessStore.open(path, read_only=read_only, holder=holder.strip())
        _open_stores.append(store)
        return store
    fresh = not (path / "CURRENT").exists()
    store = ProcessStore.open(path, holder=holder.strip())
    _open_stores.append(store)
    if fresh:
        sys.stderr.write(f"svit: created a process store at {path}\n")
    return store


def close_stores() -> None:
    while _open_stores:
        _open_stores.pop().close()


def output(args: argparse.Namespace, value: Any) -> None:
    emit(value, getattr(args, "pretty", False))


def change_record(change: Any) -> dict[str, Any]:
    if change is None:
        return {"committed": False}
    return {"committed": True, "paths": change.paths, "version": change.version}


def cmd_new(args: argparse.Namespace) -> int:
    builder = Process.builder(args.address)
    for item in args.memory or []:
        name, _, text = item.partition("=")
        builder.memory(name, parse_json(text, f"memory value {name}"))
    store = open_store(args)
    handle = store.create(builder.build())
    output(args, {"address": handle.address, "root_hash": handle.root_hash, "version": handle.version})
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    handle = open_store(args).resume(args.address)
    input_value = parse_json(args.input)
    if args.target.startswith("/lib/"):
        activation = handle.exec(args.target, input_value)
    else:
        activation = handle.exec_inline(read_source(args.target), input_value)
    output(args, {
        "changed": activation.changed,
        "logs": activation.logs,
        "messages": activation.messages,
        "output": activation.output,
        "version": activation.version,
    })
    return 0


def cmd_read(args: argparse.Namespace) -> int:
    handle = cli_history.observed(args, open_store(args, read_only=True))
    value = handle.read(args.path)
    if hasattr(value, "source") and hasattr(value, "documentation"):
        value = {"documentation": value.documentation, "source": value.source}
    output(args, value)
    return 0


def cmd_discover(args: argparse.Namespace) -> int:
    output(args, cli_history.observed(args, open_store(args, read_only=True)).discover(args.path))
    return 0


def cmd_stat(args: argparse.Namespace) -> int:
    output(args, cli_history.observed(args, open_store(args, read_only=True)).stat(args.path))
    return 0


def cmd_write(args: argparse.Namespace) -> int:
    value = parse_json(args.value, "value")
    output(args, change_record(open_store(args).resume(args.address).write(args.path, value)))
    return 0


def cmd_remove(args: argparse.Namespace) -> int:
    output(args, change_record(open_store(args).resume(args.address).remove(args.path)))
    return 0


def cmd_snapshot(args: argparse.Namespace) -> int:
    handle = open_store(args).resume(args.address)
    blob = bytes(handle.store_snapshot())
    try:
        Path(args.file).write_bytes(blob)
    except OSError as exc:
        raise CliError("io_error", f"cannot write {args.file}: {exc.strerror}") from None
    output(args, {"address": handle.address, "bytes": len(blob), "file": args.file, "root_hash": handle.root_hash, "version": handle.version})
    return 0


def cmd_restore(args: argparse.Namespace) -> int:
    try:
        blob = Path(args.file).read_bytes()
    except FileNotFoundError:
        raise CliError("file_not_found", f"no such file: {args.file}") from None
    except OSError as exc:
        raise CliError("io_error", f"cannot read {args.file}: {exc.strerror}") from None
    process = Process.restore(blob)
    if args.address and args.address != process.address:
        # A snapshot taken elsewhere becomes a new process descended from it.
        process = process.fork(args.address)
    handle = open_store(args).import_(process)
    output(args, {"address": handle.address, "root_hash": handle.root_hash, "version": handle.version})
    return 0


def cmd_fork(args: argparse.Namespace) -> int:
    handle = open_store(args).fork(args.address, args.child)
    output(args, {"address": handle.address, "parent": args.address, "root_hash": handle.root_hash, "version": handle.version})
    return 0


def cmd_log(args: argparse.Namespace) -> int:
    return cli_history.cmd_log(args, open_store(args, read_only=True))


def cmd_diff(args: argparse.Namespace) -> int:
    return cli_history.cmd_diff(args, open_store(args, read_only=True))


def cmd_tree(args: argparse.Namespace) -> int:
    from .console import render_tree  # noqa: PLC0415 - deferred: see the module docstring

    if args.depth < 0:
        raise CliError("invalid_value", "--depth must be zero or more")
    handle = open_store(args, read_only=True).resume(args.address)
    sys.stdout.write(render_tree(handle, args.path, args.depth) + "\n")
    return 0


def cmd_chat(args: argparse.Namespace) -> int:
    from . import chat  # noqa: PLC0415 - deferred: see the module docstring (and it needs the chat extra)

    if chat.missing_dependency() is not None:
        raise CliError("missing_dependency", 'svit chat needs the "chat" extra: pip install "svit[chat]"')
    if args.api_key_on_command_line is not None:  # refused without repeating it
        return _usage_error("svit chat takes no API key on the command line: set OPENAI_API_KEY or name a variable with --api-key-env")
    try:
        config = chat.resolve_config(
            os.environ, model=args.model, base_url=args.base_url, api_key_env=args.api_key_env, timeout=args.timeout,
            retries=args.retries, instructions=args.instructions, stream=not args.no_stream,
        )
    except chat.ConfigProblem as exc:
        return _usage_error(str(exc))
    return chat.run(open_store(args), args.address, config)


def archive_for(args: argparse.Namespace) -> MemoryArchive:
    """The archive the user named (``--archive`` or ``SVIT_ARCHIVE``); never a default."""
    from .store.archive import MemoryArchive  # noqa: PLC0415 - deferred: see the module docstring

    directory = getattr(args, "archive", None) or os.environ.get("SVIT_ARCHIVE")
    if not directory:
        raise CliError("archive_not_configured", "name the archive directory with --archive DIR or SVIT_ARCHIVE")
    bound = getattr(args, "max_generation_bytes", None)
    if bound is None:
        return MemoryArchive(os.path.abspath(os.path.expanduser(directory)))
    return MemoryArchive(os.path.abspath(os.path.expanduser(directory)), max_generation_bytes=bound)


def _generation_bytes(text: str) -> int:
    """``--max-generation-bytes``: a whole number of bytes, at least 1."""
    if not text.isascii() or not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of bytes of at least 1, got {text!r}")
    return int(text)


def _archive_warning(text: str) -> None:
    """A finding the operator must see even when stdout goes to a file: one line on stderr."""
    sys.stderr.write(f"svit: warning: {text}\n")


def _report_rollbacks(rollbacks: Sequence[Any]) -> None:
    for rollback in rollbacks:
        _archive_warning(f"store rolled back below an acknowledged version: {rollback.describe()}")


def cmd_archive_export(args: argparse.Namespace) -> int:
    archive = archive_for(args)
    result = archive.export(open_store(args), supersede=args.supersede)
    output(args, result.as_dict())
    if result.outcome != "written":
        raise CliError(f"archive_{result.outcome}", result.message or f"export {result.outcome}")
    return 0


def cmd_archive_restore(args: argparse.Namespace) -> int:
    from dataclasses import replace  # noqa: PLC0415 - only this command needs it

    archive = archive_for(args)
    store = open_store(args)
    rollbacks = archive.check_rollback(store)
    _report_rollbacks(rollbacks)
    result = replace(archive.restore(store, mode=args.mode), rollbacks=rollbacks)
    if result.fell_back:
        _archive_warning(result.message)
    output(args, result.as_dict())
    if result.outcome in ("failed", "partial"):
        raise CliError(f"archive_restore_{result.outcome}", result.message or f"restore {result.outcome}")
    return 0


def cmd_archive_status(args: argparse.Namespace) -> int:
    archive = archive_for(args)
    path = store_path(args)
    if isinstance(path, str):
        from .store.engine import database_location  # noqa: PLC0415 - deferred: see the module docstring

        status = archive.status(database_location(path))
    else:
        status = archive.status(str(path))
    if isinstance(path, str) or (path / "CURRENT").exists():  # an existing store: is it behind the archive?
        rollbacks = archive.check_rollback(open_store(args))
        _report_rollbacks(rollbacks)
        status["rollbacks"] = [rollback.__dict__ for rollback in rollbacks]
    output(args, status)
    return 0


def cmd_reset_index(args: argparse.Namespace) -> int:
    output(args, open_store(args).reset_index())
    return 0


def _when(seconds: Any) -> str:
    """A stored wall-clock time (seconds since the epoch) as UTC ISO 8601."""
    import datetime  # noqa: PLC0415 - only the inbox listing needs it

    if type(seconds) not in (int, float):
        return "-"
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _error_line(error: Any) -> str:
    if not isinstance(error, dict):
        return "-"
    status = f" (HTTP {error['status']})" if type(error.get("status")) is int else ""
    retry = "" if error.get("retryable", True) else ", not retryable"
    return f"{error.get('code', '?')}{status}{retry}: {error.get('message', '')}"


def _usage_error(text: str) -> int:
    sys.stderr.write(f"svit: usage: {text}\n")
    return 2


def cmd_inbox(args: argparse.Namespace) -> int:
    """``svit inbox ADDR`` lists; ``svit inbox retry|drop ADDR ID`` changes a set-aside item."""
    from .loop.set_aside import drop_set_aside, inbox_report, retry_set_aside  # noqa: PLC0415 - deferred with the store

    words = list(args.words)
    if words[0] in ("retry", "drop"):
        if len(words) != 3:
            return _usage_error(f"svit inbox {words[0]} ADDR ID")
        action, address, item_id = words
        handle = open_store(args).resume(address)
        change = (retry_set_aside if action == "retry" else drop_set_aside)(handle, item_id)
        if args.json:
            output(args, {"action": action, "id": item_id, **change_record(change)})
        else:
            done = "put back at the end of the inbox" if action == "retry" else "dropped"
            sys.stdout.write(f"{item_id}: {done} (version {change.version})\n")
        return 0
    if len(words) != 1:
        return _usage_error("svit inbox ADDR, or svit inbox retry|drop ADDR ID")
    report = inbox_report(open_store(args).resume(words[0]))
    if args.json:
        output(args, report)
        return 0
    lines = [f"{report['address']} at version {report['version']}", f"pending ({report['pending_count']}):"]
    for entry in report["pending"]:
        line = f"  {entry['id']}"
        if entry["attempts"]:
            line += f"  attempts {entry['attempts']}, retry at {_when(entry['retry_at'])}: {_error_line(entry['last_error'])}"
        lines.append(line)
    if report["pending_count"] > len(report["pending"]):
        lines.append(f"  ... and {report['pending_count'] - len(report['pending'])} more")
    lines.append(f"set aside ({len(report['set_aside'])}):")
    for entry in report["set_aside"]:
        lines.append(f"  {entry['id']}  attempts {entry.get('attempts')}, set aside {_when(entry.get('set_aside_at'))}: "
                     f"{_error_line(entry.get('error'))}")
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


def _iso_millis(millis: Any) -> str:
    return "-" if type(millis) is not int else _when(millis / 1000)


def cmd_ls(args: argparse.Namespace) -> int:
    """``svit ls``: the processes of the store, read without taking its lock."""
    from .errors import PersistenceNotFound  # noqa: PLC0415 - only this command needs it
    from .operators import MAX_LIST, list_processes  # noqa: PLC0415 - deferred with the store

    if not 1 <= args.limit <= MAX_LIST:
        return _usage_error(f"--limit must be between 1 and {MAX_LIST}")
    try:
        store = open_store(args, read_only=True)
    except PersistenceNotFound:  # no store yet: no processes
        listing: dict[str, Any] = {"more": False, "processes": []}
    else:
        listing = list_processes(store, args.limit)
    if args.json:
        output(args, listing)
        return 0
    for entry in listing["processes"]:
        sys.stdout.write(f"{entry['address']}  version {entry['version']}  inbox {entry['inbox']}  "
                         f"last commit {_iso_millis(entry['last_commit_at'])}\n")
    if listing["more"]:
        sys.stdout.write(f"... more than {args.limit}: raise --limit\n")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    """``svit status ADDR``: version, inbox, failures and an unfinished turn."""
    from .operators import process_status  # noqa: PLC0415 - deferred with the store

    status = process_status(open_store(args, read_only=True), args.address)
    if args.json:
        output(args, status)
        return 0
    inbox = status["inbox"]
    lines = [f"{status['address']} at version {status['version']}", f"  root hash     {status['root_hash']}",
             f"  inbox         {inbox['depth']} item(s)"]
    oldest = inbox["oldest"]
    if oldest is not None:
        age = "unknown age" if oldest["age_seconds"] is None else f"{oldest['age_seconds']:.0f} s old"
        lines.append(f"  oldest item   {oldest['id']}: {age}, {oldest['attempts']} attempt(s)"
                     + (f", retry at {_when(oldest['retry_at'])}" if oldest["retry_at"] is not None else ""))
    lines.append(f"  set aside     {status['set_aside']}")
    lines.append(f"  undeliverable {status['undeliverable']}")
    lines.append(f"  mail waiting  {status['mail_waiting']}")
    failure = status["last_failure"]
    lines.append("  last failure  " + ("-" if failure is None else f"{failure['id']} ({failure['where']}): "
                                       f"{_error_line(failure['error'])}"))
    turn = status["unfinished_turn"]
    lines.append("  unfinished    " + ("-" if turn is None else f"turn {turn['turn_id']} (last event {turn['last_event']}, "
                                      f"sequence {turn['sequence']})"))
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


def cmd_events(args: argparse.Namespace) -> int:
    """``svit events ADDR [--follow]``: commits and thread events, one JSON line each."""
    import signal  # noqa: PLC0415 - only this command needs it
    import time  # noqa: PLC0415 - only this command needs it

    from .operators import EventCursor  # noqa: PLC0415 - deferred with the store

    store = open_store(args, read_only=True)
    store.resume(args.address)  # an absent address is persistence_not_found, at once
    cursor = EventCursor(store, args.address, after_version=args.after)
    if args.follow:
        def stop(_signum: int, _frame: Any) -> None:
            raise KeyboardInterrupt
        signal.signal(signal.SIGTERM, stop)
    try:
        while True:
            records = cursor.poll()
            for record in records:
                sys.stdout.write(json.dumps(record, ensure_ascii=False, sort_keys=True, separators=(",", ":")) + "\n")
            sys.stdout.flush()
            if records:
                continue  # a full page may have more behind it
            if not args.follow:
                return 0
            time.sleep(args.interval)
    except KeyboardInterrupt:
        return 0
    except BrokenPipeError:  # the reader of stdout went away (| head)
        return 0


def cmd_serve(args: argparse.Namespace) -> int:
    """``svit serve``: svit-control@1, commit events and MCP over HTTP (the ``serve`` extra)."""
    try:
        import svit.server as server  # noqa: PLC0415 - the "serve" extra is optional
    except ImportError:
        raise CliError("missing_dependency", 'svit serve needs the "serve" extra: pip install "svit[serve]"') from None
    try:
        host, port = server.parse_listen(args.listen)
        tokens = server.TokenSet.load(args.tokens) if args.tokens else server.TokenSet.from_env()
    except ValueError as exc:  # InvalidTokens too
        raise CliError("invalid_tokens" if isinstance(exc, server.InvalidTokens) else "invalid_value", str(exc)) from None
    if tokens is None:
        return _usage_error(f"svit serve needs tokens: --tokens FILE or {server.TOKENS_ENV} (no token, no access)")
    if host not in server.LOOPBACK_HOSTS:
        sys.stderr.write(f"svit: warning: listening on {host}, reachable beyond this machine\n")
    try:
        server.serve(open_store(args), tokens, host, port)
    except (OSError, SystemExit):
        raise CliError("listen_failed", f"cannot listen on {args.listen}") from None
    return 0


CONSOLE_TOKEN_ENV = "SVIT_TOKEN"


def cmd_console(args: argparse.Namespace) -> int:
    """``svit console ADDR``: the terminal console on a store, or (``--serve URL``) on a ``svit serve``."""
    from .console import launch  # noqa: PLC0415 - deferred: see the module docstring (the console extra)

    hint = launch.missing_dependency()
    if hint is not None:
        sys.stderr.write(f"svit: missing_dependency: {hint}\n")
        return 2
    screenshot = Path(args.screenshot) if args.screenshot else None
    if args.serve:
        token = os.environ.get(args.token_env)
        if not token:
            return _usage_error(f"svit console --serve needs a token in ${args.token_env} (never on the command line)")
        try:
            from .client import ClientError  # noqa: PLC0415 - the serve extra
            from .console.http_source import HttpSource  # noqa: PLC0415 - the serve extra
        except ImportError:
            raise CliError("missing_dependency", 'svit console --serve needs the "serve" extra: pip install "svit[serve]"') from None
        try:
            source: Any = HttpSource(args.serve, token, args.address)
        except ClientError as exc:
            raise CliError(exc.code, exc.message) from None
        except OSError as exc:
            raise CliError("unreachable", f"cannot reach {args.serve}: {exc.strerror or exc}") from None
    else:
        from .console.store_source import StoreSource  # noqa: PLC0415 - deferred: see the module docstring

        path = store_path(args)
        if isinstance(path, str):  # PostgreSQL: many writers share the database
            source = StoreSource(open_store(args), args.address)
        else:  # RocksDB: browse read-only beside any writer, take the lock only to send or run
            source = StoreSource(open_store(args, read_only=True), args.address,
                                 writer=launch.writer_on_demand(path, args.address))
    launch.run(source, screenshot=screenshot)
    if screenshot is not None:
        sys.stdout.write(f"svit: wrote {screenshot}\n")
    return 0


def cmd_mcp(args: argparse.Namespace) -> int:
    """``svit mcp ADDR``: serve one durable process over MCP on stdio (stdout carries only MCP)."""
    from .errors import PersistenceNotFound  # noqa: PLC0415 - only this command needs it

    try:
        from .mcp import run_stdio  # noqa: PLC0415 - the "serve" extra, loaded only for this command
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] not in ("mcp", "anyio", "starlette", "pydantic", "httpx", "httpx2"):
            raise
        raise CliError("missing_dependency", 'svit mcp needs the "serve" extra: pip install "svit[serve]"') from None
    store = open_store(args)
    try:
        handle = store.resume(args.address)
    except PersistenceNotFound:
        if not args.create:
            raise
        handle = store.create(Process.builder(args.address).build())
        sys.stderr.write(f"svit: created {handle.address}\n")
    run_stdio(lambda: handle)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="svit", description="Svit: an embedded scripting sandbox for agents.")
    parser.add_argument("--version", action="version", version=f"svit {__version__}")
    parser.add_argument("--store", default=None, help="the store directory or a postgresql:// URL (default: $SVIT_STORE or the user data directory)")
    common = _Parser(add_help=False)
    common.add_argument("--store", default=argparse.SUPPRESS, help="the store directory or a postgresql:// URL (default: $SVIT_STORE or the user data directory)")
    common.add_argument("--pretty", action="store_true", help="indent JSON output")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    commands.required = True

    p: argparse.ArgumentParser = commands.add_parser("exec", help="run a script's main(input) in a fresh in-memory process")
    p.add_argument("file", help="a Svit Lisp source file")
    p.add_argument("input", nargs="?", help="the input as JSON (default: null)")
    p.add_argument("--compact", action="store_true", help="print JSON on one line")
    p.set_defaults(run=cmd_exec)

    p = commands.add_parser("check", help="compile a script without running it")
    p.add_argument("file", help="a Svit Lisp source file")
    p.add_argument("--compact", action="store_true", help="print JSON on one line")
    p.set_defaults(run=cmd_check)

    p = commands.add_parser("spec", help="run the conformance fixtures in DIR (default: the fixtures installed with svit)")
    p.add_argument("directory", nargs="?", help="a directory of fixture files")
    p.set_defaults(run=cmd_spec)

    p = commands.add_parser("repl", help="evaluate forms; only those that change something commit (in memory when no address)", parents=[common])
    p.add_argument("address", nargs="?", help="a durable process address")
    p.set_defaults(run=cmd_repl)

    def durable(name: str, help_text: str, run: Any, *arguments: tuple[str, str]) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_text, parents=[common])
        for argument, argument_help in arguments:
            if argument.endswith("?"):
                sub.add_argument(argument[:-1], nargs="?", help=argument_help)
            else:
                sub.add_argument(argument, help=argument_help)
        sub.set_defaults(run=run)
        return sub

    p = durable("new", "create a durable process", cmd_new, ("address", "svit://... address"))
    p.add_argument("--memory", action="append", metavar="NAME=JSON", help="an initial /memory entry (repeatable)")
    durable("run", "run /lib/NAME or a script file as one durable activation", cmd_run,
            ("address", "process address"), ("target", "/lib/NAME or a script file (run once, not stored)"),
            ("input?", "the input as JSON (default: null)"))
    for p in (durable("read", "print the value at PATH", cmd_read, ("address", "process address"), ("path", "absolute path")),
              durable("discover", "list the children of PATH", cmd_discover, ("address", "process address"), ("path", "absolute path")),
              durable("stat", "print the facts record of PATH", cmd_stat, ("address", "process address"), ("path", "absolute path"))):
        p.add_argument("--at", type=int, default=None, metavar="VERSION", help="a retained earlier version (read from the store)")
    p = durable("diff", "list the paths that differ between two versions", cmd_diff, ("address", "process address"))
    p.add_argument("before", type=int, help="a retained version")
    p.add_argument("after", type=int, help="another retained version (either may be the greater)")
    p.add_argument("--table", action="store_true", help="a readable table instead of JSON lines")
    durable("write", "write a JSON value at PATH (one commit)", cmd_write,
            ("address", "process address"), ("path", "absolute path"), ("value", "the value as JSON"))
    durable("remove", "remove PATH (one commit)", cmd_remove, ("address", "process address"), ("path", "absolute path"))
    durable("snapshot", "write the process snapshot to FILE", cmd_snapshot, ("address", "process address"), ("file", "output file"))
    durable("restore", "import a snapshot file (at ADDR: as a new process descended from it)", cmd_restore,
            ("file", "a snapshot file"), ("address?", "address for the restored process"))
    durable("fork", "fork ADDR into CHILD", cmd_fork, ("address", "parent address"), ("child", "child address"))
    p = durable("log", "list committed transactions, newest first", cmd_log, ("address", "process address"))
    p.add_argument("--path", default=None, help="only transactions touching this path or below")
    p.add_argument("--limit", type=int, default=cli_history.LOG_LIMIT,
                   help=f"the newest this many (1-4096, default {cli_history.LOG_LIMIT})")
    p.add_argument("--values", "--diff", dest="values", action="store_true", help="show each change's before and after values")
    p.add_argument("--table", action="store_true", help="a readable listing instead of JSON")
    p = durable("tree", "draw the process tree for a person", cmd_tree, ("address", "process address"), ("path?", "start path (default /)"))
    p.add_argument("--depth", type=int, default=2, help="levels to draw (default 2)")
    p.set_defaults(path="/")
    p = durable("ls", "list the store's processes (read without taking the store's lock)", cmd_ls)
    p.add_argument("--limit", type=int, default=100, help="at most this many (1-4096, default 100)")
    p.add_argument("--json", action="store_true", help="print JSON (with --pretty: indented)")
    p = durable("status", "a process's version, inbox, failures and unfinished turn", cmd_status,
                ("address", "process address"))
    p.add_argument("--json", action="store_true", help="print JSON (with --pretty: indented)")
    p = durable("events", "print a process's commits and thread events, one JSON line each", cmd_events,
                ("address", "process address"))
    p.add_argument("--follow", action="store_true", help="keep printing new ones as they commit, until Ctrl-C or SIGTERM")
    p.add_argument("--after", type=int, default=0, metavar="VERSION", help="only commits above this version")
    p.add_argument("--interval", type=float, default=0.1, help=argparse.SUPPRESS)
    p = commands.add_parser(
        "inbox",
        help="list a process's pending and set-aside inbox items; retry|drop ADDR ID puts one back or removes it",
        parents=[common],
        usage="svit inbox [--json] ADDR | svit inbox [--json] retry ADDR ID | svit inbox [--json] drop ADDR ID",
    )
    p.add_argument("words", nargs="+", metavar="ADDR | retry ADDR ID | drop ADDR ID",
                   help="the process address, or retry/drop, the address and a set-aside item's id")
    p.add_argument("--json", action="store_true", help="print JSON (with --pretty: indented)")
    p.set_defaults(run=cmd_inbox)
    p = durable("mcp", "serve ADDR to an MCP client on stdio (the six model tools, resources, the language guide)",
                cmd_mcp, ("address", "process address"))
    p.add_argument("--create", action="store_true", help="create an empty process at ADDR when there is none")
    p = durable("console", "watch and steer ADDR in a terminal console (the console extra)", cmd_console,
                ("address", "process address"))
    p.add_argument("--serve", default=None, metavar="URL", help="go through a running svit serve at URL instead of the store")
    p.add_argument("--token-env", default=CONSOLE_TOKEN_ENV, metavar="NAME",
                   help=f"the variable holding the server's token (default {CONSOLE_TOKEN_ENV}); never the token itself")
    p.add_argument("--screenshot", default=None, metavar="FILE", help="run headless and save an SVG screenshot to FILE")
    p = durable("chat", "talk to the durable agent at ADDR through an OpenAI-compatible model (created on first use)",
                cmd_chat, ("address", "the agent's process address"))
    p.allow_abbrev = False  # so "--api-key SECRET" is refused, never taken as --api-key-env
    p.add_argument("--api-key", dest="api_key_on_command_line", default=None, help=argparse.SUPPRESS)
    p.add_argument("--model", default=None, help="the model name (default: $SVIT_CHAT_MODEL)")
    p.add_argument("--base-url", default=None, help="the API's base URL (default: $OPENAI_BASE_URL, else OpenAI)")
    p.add_argument("--api-key-env", default=None, metavar="NAME",
                   help="the environment variable holding the API key (default: OPENAI_API_KEY); never the key itself")
    p.add_argument("--timeout", type=float, default=None, metavar="S", help="seconds to wait on the model (default 60)")
    p.add_argument("--retries", type=int, default=None, metavar="N", help="client retries of a failed model request (default 2)")
    p.add_argument("--instructions", default=None, metavar="TEXT", help="the agent's instructions, applied when it is created")
    p.add_argument("--no-stream", action="store_true", help="print each reply when it is complete")
    archive_cmd = commands.add_parser("archive", help="the memory archive: verified snapshot generations outside the store")
    archive_sub = archive_cmd.add_subparsers(dest="archive_command", metavar="ACTION", parser_class=_Parser)
    archive_sub.required = True
    archive_common = _Parser(add_help=False)
    archive_common.add_argument("--archive", default=None, help="the archive directory (or SVIT_ARCHIVE); never defaulted")
    archive_common.add_argument("--max-generation-bytes", type=_generation_bytes, default=None, metavar="N",
                                help="the longest generation file read or written (default 4 GiB): a longer one "
                                     "is refused by its size, and an export that would be longer fails")
    p = archive_sub.add_parser("export", help="write a new verified generation of every process", parents=[common, archive_common])
    p.add_argument("--supersede", action="store_true",
                   help="publish even though the archive holds another store's or newer state (on purpose only)")
    p.set_defaults(run=cmd_archive_export)
    p = archive_sub.add_parser("restore", help="restore processes from the newest valid generation", parents=[common, archive_common])
    p.add_argument("--mode", default="auto", choices=["auto", "always", "off"],
                   help="auto: only into an empty store (or finish a partial restore); always: join into any store")
    p.set_defaults(run=cmd_archive_restore)
    p = archive_sub.add_parser("status", help="generations, counters and where the archive lives", parents=[common, archive_common])
    p.set_defaults(run=cmd_archive_status)

    p = commands.add_parser("serve", help="serve the store's processes over HTTP (svit-control@1, events, MCP)", parents=[common])
    p.add_argument("--listen", default="127.0.0.1:8470", metavar="HOST:PORT", help="where to listen (default 127.0.0.1:8470)")
    p.add_argument("--tokens", default=None, metavar="FILE", help="the token file (or $SVIT_SERVE_TOKENS); no token, no access")
    p.set_defaults(run=cmd_serve)

    store_cmd = commands.add_parser("store", help="store maintenance")
    store_sub = store_cmd.add_subparsers(dest="store_command", metavar="ACTION", parser_class=_Parser)
    store_sub.required = True
    p = store_sub.add_parser("reset-index", help="rebuild derived indexes; history and state stay byte-identical", parents=[common])
    p.set_defaults(run=cmd_reset_index)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.run(args))
    except (SvitError, CliError) as exc:
        close_stores()
        if os.environ.get("SVIT_DEBUG") == "1":
            raise
        message = exc.message if isinstance(exc, CliError) else exc.message
        sys.stderr.write(f"svit: {exc.code}: {message}\n")
        return 1
    except KeyboardInterrupt:
        sys.stderr.write("svit: interrupted\n")
        return 130
    finally:
        close_stores()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
