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
