"""What a failing port shows the guest: the port's name and the kind of failure, never host text."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from svit import Process
from svit._ports import PortError, Ports, failure_text
from svit.errors import ScriptFailed
from tests.bounds import unchanged

ADDRESS = "svit://local/ports-errors"
SECRET_PATH = "/srv/host-only/secret-config.toml"


def _process(port: Any, source: str = '(define (main input) (port-call "files" input))') -> Process:
    return Process.builder(ADDRESS).library("use", source).ports(Ports().port("files", port)).build()


def _missing_file(input: Any) -> Any:
    with open(SECRET_PATH) as handle:  # the host path is in the exception text
        return handle.read()


def test_an_arbitrary_exception_shows_only_its_kind() -> None:
    p = _process(_missing_file)
    with unchanged(p):
        with pytest.raises(ScriptFailed) as caught:
            p.exec("/lib/use", 1)
    message = caught.value.message
    assert "port /ports/files failed: FileNotFoundError" in message
    assert SECRET_PATH not in message and "host-only" not in message and "Errno" not in message


def test_the_host_keeps_the_full_exception(caplog: pytest.LogCaptureFixture) -> None:
    p = _process(_missing_file)
    with caplog.at_level(logging.WARNING, logger="svit"):
        with pytest.raises(ScriptFailed) as caught:
            p.exec("/lib/use", 1)
    original = caught.value.port_error
    assert isinstance(original, FileNotFoundError) and original.filename == SECRET_PATH
    record = next(r for r in caplog.records if r.name == "svit" and "files" in r.getMessage())
    assert record.exc_info is not None and record.exc_info[1] is original


def test_the_full_exception_survives_a_nested_exec() -> None:
    p = (
        Process.builder(ADDRESS)
        .library("inner", '(define (main input) (port-call "files" input))')
        .library("outer", '(define (main input) (exec "/lib/inner" input))')
        .ports(Ports().port("files", _missing_file))
        .build()
    )
    with unchanged(p):
        with pytest.raises(ScriptFailed) as caught:
            p.exec("/lib/outer", 1)
    assert SECRET_PATH not in caught.value.message
    assert isinstance(caught.value.port_error, FileNotFoundError)


def test_a_deliberate_port_error_keeps_its_text() -> None:
    def refusing(input: Any) -> Any:
        raise PortError("quota exhausted for today")

    p = _process(refusing)
    with unchanged(p):
        with pytest.raises(ScriptFailed) as caught:
            p.exec("/lib/use", 1)
    assert "port /ports/files failed: quota exhausted for today" in caught.value.message


@pytest.mark.parametrize(
    ("exc", "text"),
    [
        (RuntimeError(f"cannot parse {SECRET_PATH}"), "RuntimeError"),
        (OSError(13, "Permission denied", SECRET_PATH), "PermissionError"),
        (KeyError(SECRET_PATH), "KeyError"),
        (PortError("denied"), "denied"),
        (PortError(""), "port raised an error"),
        (PortError("a\nb"), "a b"),
    ],
)
def test_failure_text(exc: BaseException, text: str) -> None:
    assert failure_text(exc) == text


def test_an_exception_class_name_is_shown_only_as_a_plain_name() -> None:
    odd = type("Odd" + "x" * 300, (Exception,), {})
    assert failure_text(odd(SECRET_PATH)) == "port raised an error"
