"""The ``svit`` command.

Every failure prints one line, ``svit: <code>: <message>``, on stderr and exits 1;
usage errors exit 2. Set ``SVIT_DEBUG=1`` to see a Python traceback instead.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, Sequence

from .errors import SvitError

CLI_ADDRESS = "svit://local/cli/process"


class CliError(Exception):
    """A failure outside the runtime (a missing file, bad JSON) with its own code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # usage errors: one line, exit 2
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
    from .values import from_json_text

    try:
        return from_json_text(text)
    except SvitError as exc:
        raise CliError("invalid_value", f"{what} is not valid JSON: {exc.detail}") from None


def emit(value: Any, pretty: bool = True) -> None:
    text = json.dumps(value, indent=2 if pretty else None, ensure_ascii=False, sort_keys=True)
    sys.stdout.write(text + "\n")


def cmd_exec(args: argparse.Namespace) -> int:
    from .process import Process

    source = read_source(args.file)
    input_value = parse_json(args.input)
    process = Process.builder(CLI_ADDRESS).build()
    process.write("/lib/main", {"source": source, "documentation": f"from {Path(args.file).name}"})
    activation = process.exec("/lib/main", input_value)
    emit({"memory": process.read("/memory"), "output": activation.output, "version": activation.version}, not args.compact)
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    from .activation import compile_check
    from .limits import Limits

    source = read_source(args.file)
    compile_check("main", source, Limits())
    emit({"file": args.file, "ok": True}, not args.compact)
    return 0


def cmd_spec(args: argparse.Namespace) -> int:
    from .spec import FixtureError, run_directory

    directory = Path(args.directory) if args.directory else Path("spec") / "fixtures"
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
    from .console import Repl

    process = open_process_for(args)
    interactive = sys.stdin.isatty()
    if interactive:
        try:
            import readline  # noqa: F401 - line editing and history for input()
        except ImportError:  # pragma: no cover - not on every platform
            pass
        sys.stdout.write("Svit REPL on " + process.address + " (:help for commands, :quit to leave)\n")

        def lines():
            prompt = "svit> "
            while True:
                try:
                    line = input(prompt)
                except EOFError:
                    return
                yield line
                prompt = "svit> "

        Repl(process, sys.stdout).run(lines())
    else:
        Repl(process, sys.stdout).run(iter(sys.stdin))
    return 0


def open_process_for(args: argparse.Namespace):
    """The process a command acts on: in memory when no address is given."""
    from .process import Process

    address = getattr(args, "address", None)
    if address is None:
        return Process.builder("svit://local/cli/repl").build()
    return open_store(args).resume(address)


def open_store(args: argparse.Namespace):  # replaced once the durable store commands exist
    raise CliError("persistence_unavailable", "durable processes need the store")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="svit", description="Svit: an embedded scripting sandbox for agents.")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    commands.required = True

    p = commands.add_parser("exec", help="run a script's main(input) in a fresh in-memory process")
    p.add_argument("file", help="a Svit Lisp source file")
    p.add_argument("input", nargs="?", help="the input as JSON (default: null)")
    p.add_argument("--compact", action="store_true", help="print JSON on one line")
    p.set_defaults(run=cmd_exec)

    p = commands.add_parser("check", help="compile a script without running it")
    p.add_argument("file", help="a Svit Lisp source file")
    p.add_argument("--compact", action="store_true", help="print JSON on one line")
    p.set_defaults(run=cmd_check)

    p = commands.add_parser("spec", help="run the conformance fixtures in DIR (default spec/fixtures)")
    p.add_argument("directory", nargs="?", help="a directory of fixture files")
    p.set_defaults(run=cmd_spec)

    p = commands.add_parser("repl", help="evaluate forms as activations (in memory when no address)")
    p.add_argument("address", nargs="?", help="a durable process address")
    p.set_defaults(run=cmd_repl)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.run(args))
    except (SvitError, CliError) as exc:
        if os.environ.get("SVIT_DEBUG") == "1":
            raise
        message = exc.message if isinstance(exc, CliError) else exc.message
        sys.stderr.write(f"svit: {exc.code}: {message}\n")
        return 1
    except KeyboardInterrupt:
        sys.stderr.write("svit: interrupted\n")
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
