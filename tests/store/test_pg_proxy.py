"""The lost-reply proxy reads the client's protocol messages: a write is recognised
however the stream is cut into chunks, and whether it is sent as text or run as a
prepared statement (no server needed)."""

from __future__ import annotations

import struct

from hypothesis import given
from hypothesis import strategies as st

from tests.store.pg_proxy import Messages

COMMIT_TEXT = b"WITH w0 AS (UPDATE t SET value = $1), marker AS (INSERT INTO svit_writers VALUES ($2, $3)) SELECT 1"


def message(kind: bytes, body: bytes) -> bytes:
    return kind + struct.pack("!I", len(body) + 4) + body


def parse(name: bytes, text: bytes) -> bytes:
    return message(b"P", name + b"\0" + text + b"\0" + b"\0\0")


def bind(name: bytes, parameter: bytes = b"") -> bytes:
    return message(b"B", b"\0" + name + b"\0" + b"\0\0" + b"\0\1" + struct.pack("!I", len(parameter)) + parameter
                   + b"\0\0")


def execute_sync() -> bytes:
    return message(b"E", b"\0" + b"\0\0\0\0") + message(b"S", b"")


SSL_REQUEST = struct.pack("!II", 8, 80877103)
STARTUP = struct.pack("!II", 16, 196608) + b"user\0x\0\0"[:8]

#: Each unit is what the client sends at once, with whether it runs a write.
UNITS = [
    (SSL_REQUEST + STARTUP, False),
    (parse(b"", b"SELECT value FROM svit_record WHERE key = $1") + bind(b"", b"COMMIT") + execute_sync(), False),
    (parse(b"_pg3_0", COMMIT_TEXT) + bind(b"_pg3_0") + execute_sync(), True),  # prepared at its first run
    (bind(b"_pg3_0", b"x") + execute_sync(), True),  # later runs name it and carry no text
    (message(b"Q", b"SELECT 1"), False),
    (parse(b"", b"BEGIN") + bind(b"") + parse(b"", b"COMMIT") + bind(b"") + execute_sync(), True),
    (parse(b"_pg3_1", b"SELECT 2") + bind(b"_pg3_1") + execute_sync(), False),
    (message(b"C", b"S_pg3_0\0") + message(b"S", b""), False),  # closed: the name means nothing now
    (bind(b"_pg3_0") + execute_sync(), False),
]


def test_writes_are_recognised_as_text_and_as_prepared_executions() -> None:
    messages = Messages()
    assert [messages.feed(data) for data, _ in UNITS] == [write for _, write in UNITS]
    assert messages.prepared_runs == 2


@given(st.lists(st.integers(min_value=1, max_value=40), max_size=60))
def test_a_write_is_recognised_however_the_stream_is_cut(cuts: list[int]) -> None:
    stream = b"".join(data for data, _ in UNITS)
    messages = Messages()
    position, writes = 0, 0
    for size in cuts:
        writes += messages.feed(stream[position:position + size])
        position += size
    writes += messages.feed(stream[position:])
    assert messages.prepared_runs == 2 and messages.buffer == b""
    # Three units run a write; a chunk may hold more than one, so at most three chunks say so.
    assert 1 <= writes <= 3
