"""Turn Ketos's Rust test files into the JSON case data beside this file.

Usage: ``python tests/lisp/ketos/extract.py core.rs restrict.rs``

Ketos's tests are assertions over a few helpers: ``eval`` (one expression, its
value printed as ``format_value`` does), ``eval_str`` (one expression whose value is
a string, compared raw), ``run`` (every top-level form, each printed) and, in
``restrict.rs``, ``run(RestrictConfig{..}, code)`` expecting a restriction error. This
script reads those assertions (Rust string literals, arrays of them and the expected
error patterns) and writes one case per assertion: the test name, the helper, the
source, and the expected printed value(s), error kind or success. Cases that exercise
what Svit Lisp removes from Ketos carry ``excluded`` with the reason, from the table
below; the data files are regenerated, never edited by hand.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent

NO_MODULES = "Svit Lisp has no module system: `use` always fails (module not found)"
NO_STRUCTS = "Svit Lisp removes `struct` and its helpers (`new`, `.`, `.=`, `is-instance`)"

#: (test name, substring of the source or None for every case of the test) -> reason.
EXCLUSIONS: list[tuple[str, str | None, str]] = [
    ("test_docs", None, NO_MODULES + "; documentation is read with `(use code (documentation))`"),
    ("test_use", None, NO_MODULES),
    ("test_struct", None, NO_STRUCTS),
]


# --- a small reader for the Rust subset the tests use ------------------------------


class RustReader:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def skip_space(self) -> None:
        text = self.text
        while self.pos < len(text):
            if text[self.pos].isspace():
                self.pos += 1
            elif text.startswith("//", self.pos):
                end = text.find("\n", self.pos)
                self.pos = len(text) if end < 0 else end + 1
            else:
                return

    def string_at(self) -> str | None:
        """Parse a string literal at the cursor (normal or raw), or return None."""
        self.skip_space()
        text = self.text
        match = re.compile(r'r(#*)"').match(text, self.pos)
        if match:
            hashes = match.group(1)
            start = match.end()
            end = text.index('"' + hashes, start)
            self.pos = end + 1 + len(hashes)
            return text[start:end]
        if text.startswith('"', self.pos):
            i = self.pos + 1
            out: list[str] = []
            while text[i] != '"':
                ch = text[i]
                if ch == "\\":
                    nxt = text[i + 1]
                    if nxt == "\n":
                        i += 2
                        while text[i] in " \t\n\r":
                            i += 1
                        continue
                    simple = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "'": "'", "0": "\0"}
                    if nxt in simple:
                        out.append(simple[nxt])
                        i += 2
                        continue
                    if nxt == "x":
                        out.append(chr(int(text[i + 2 : i + 4], 16)))
                        i += 4
                        continue
                    if nxt == "u":
                        close = text.index("}", i)
                        out.append(chr(int(text[i + 3 : close], 16)))
                        i = close + 1
                        continue
                    raise ValueError(f"unknown escape \\{nxt}")
                out.append(ch)
                i += 1
            self.pos = i + 1
            return "".join(out)
        return None

    def balanced(self, open_ch: str = "(", close_ch: str = ")") -> str:
        """The text up to the bracket closing the one just passed (strings skipped)."""
        depth = 1
        start = self.pos
        text = self.text
        while True:
            if text.startswith('"', self.pos) or re.compile(r'r#*"').match(text, self.pos):
                self.string_at()
                continue
            ch = text[self.pos]
            if ch == open_ch:
                depth += 1
            elif ch == close_ch:
                depth -= 1
                if depth == 0:
                    body = text[start : self.pos]
                    self.pos += 1
                    return body
            self.pos += 1


def _strings_in(body: str) -> list[str]:
    reader = RustReader(body)
    found = []
    while reader.pos < len(body):
        value = reader.string_at()
        if value is None:
            reader.pos += 1
        else:
            found.append(value)
    return found


_CALL = re.compile(r"\b(eval_str|eval|run)\(")
_ASSERT = re.compile(r"\b(assert_eq|assert_matches_re|assert_matches|assert)!\(")
_TEST = re.compile(r"fn (test_\w+)\(\)")


def _restrict_config(args: str, configs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """``RestrictConfig{ field: value, .. }`` or a named config's ``.clone()``."""
    match = re.search(r"RestrictConfig\s*\{(.*?)\.\.", args, re.S)
    if match is None:
        name = re.match(r"\s*(\w+)\.clone\(\)", args)
        if name is None:
            raise ValueError(f"no restrict config in {args[:80]!r}")
        return dict(configs[name.group(1)])
    config: dict[str, Any] = {}
    for field, value in re.findall(r"(\w+)\s*:\s*([^,]+),", match.group(1)):
        value = value.strip()
        millis = re.match(r"Some\(Duration::from_millis\((\d+)\)\)", value)
        config[field] = int(millis.group(1)) if millis else int(value.replace("_", ""))
    return config


def extract(path: Path) -> list[dict[str, Any]]:
    text = path.read_text(encoding="utf-8")
    tests = [(m.start(), m.group(1)) for m in _TEST.finditer(text)]
    configs: dict[str, dict[str, Any]] = {}
    for m in re.finditer(r"let (\w+) = RestrictConfig\s*\{(.*?)\};", text, re.S):
        configs[m.group(1)] = _restrict_config(f"RestrictConfig{{{m.group(2)}}}", {})
    cases: list[dict[str, Any]] = []
    counts: dict[str, int] = {}
    for m in _ASSERT.finditer(text):
        before = [name for start, name in tests if start < m.start()]
        if not before:
            continue  # a macro definition above the tests
        test = before[-1]
        reader = RustReader(text)
        reader.pos = m.end()
        body = reader.balanced()
        macro = m.group(1)
        call = _CALL.search(body)
        if call is None:
            raise ValueError(f"{test}: no helper call in {body[:80]!r}")
        inner = RustReader(body)
        inner.pos = call.end()
        call_args = inner.balanced()
        rest = body[inner.pos :]
        case: dict[str, Any] = {"test": test, "helper": call.group(1)}
        if macro == "assert_matches_re":
            case["restrict"] = _restrict_config(call_args, configs)
            case["source"] = _strings_in(call_args)[-1]
        else:
            sources = _strings_in(call_args)
            if len(sources) != 1:
                raise ValueError(f"{test}: expected one source in {call_args[:80]!r}")
            case["source"] = sources[0]
        if macro == "assert":
            if not rest.startswith(".is_ok()"):
                raise ValueError(f"{test}: unexpected assert {body[:80]!r}")
            case["expect"] = {"ok": True}
        elif macro == "assert_eq":
            expected = rest.split(",", 1)[1]
            values = _strings_in(expected)
            if expected.strip().startswith("["):
                case["expect"] = {"values": values}
            else:
                case["expect"] = {"value": values[0]}
        else:
            pattern = rest.split(",", 1)[1].strip()
            kind = re.search(r"(RestrictError|ExecError|CompileError)::(\w+)", pattern)
            if kind is not None:
                error = f"{kind.group(1)}::{kind.group(2)}"
            else:
                whole = re.search(r"Error::(\w+)", pattern)
                if whole is None:
                    raise ValueError(f"{test}: unknown error pattern {pattern[:80]!r}")
                error = whole.group(1)
            case["expect"] = {"error": error}
            fields = re.search(r"expected:\s*\"(\w+)\",\s*found:\s*\"(\w+)\"", pattern)
            if fields:
                case["expect"]["expected"], case["expect"]["found"] = fields.groups()
            compare = re.search(r'CannotCompare\("(\w+)"\)', pattern)
            if compare:
                case["expect"]["type"] = compare.group(1)
        counts[test] = counts.get(test, 0) + 1
        case["id"] = f"{test}:{counts[test]}"
        for name, needle, reason in EXCLUSIONS:
            if name == test and (needle is None or needle in case["source"]):
                case["excluded"] = reason
        cases.append(dict(sorted(case.items(), key=lambda kv: ["id", "test", "helper", "restrict", "source", "expect", "excluded"].index(kv[0]))))
    return cases


def main(argv: list[str]) -> None:
    for arg in argv:
        path = Path(arg)
        cases = extract(path)
        out = HERE / (path.stem + ".json")
        out.write_text(json.dumps(cases, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"{out.name}: {len(cases)} cases, {sum('excluded' in c for c in cases)} excluded")


if __name__ == "__main__":
    main(sys.argv[1:])
