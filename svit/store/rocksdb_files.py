"""Checks of RocksDB's own files made before RocksDB is handed them.

RocksDB trusts the type byte of a MANIFEST record before it checks the record's
checksum: a type flipped to one of the "recyclable" kinds (which a MANIFEST never holds)
skips the checksum, and recovery then spins instead of reporting corruption. So the
store reads the MANIFEST that ``CURRENT`` names first and checks every record the way
RocksDB's log reader would, minus that gap.

The log format (RocksDB's ``db/log_format.h``): the file is a sequence of 32 KiB blocks;
each block holds records, each a 7-byte header (masked CRC32C, little-endian 32 bits;
payload length, 16 bits; type, 8 bits) and its payload. A record never crosses a block;
fewer than 7 bytes left at a block's end are zero padding. Types 1-4 are a whole record
and the first, middle and last fragment of one; a MANIFEST is written with no others.
The checksum is CRC32C over the type byte and the payload, masked. A header of zeros
(type 0, length 0) is preallocated space, which RocksDB skips to the block's end. A
record cut off by the end of the file is the tail of an interrupted write, which RocksDB
treats as the end of the log. Both are accepted here only when they cannot be hiding
committed records (see :func:`check_log_file`).

A problem is described with the file's name inside the store and a byte offset, never
a host path.
"""

from __future__ import annotations

import os
import re
import struct
from typing import BinaryIO

__all__ = [
    "BLOCK_SIZE",
    "MANIFEST_RECORD_TYPES",
    "crc32c",
    "mask_crc",
    "unmask_crc",
    "current_manifest",
    "check_log_file",
    "check_manifest",
]

#: RocksDB's log block size.
BLOCK_SIZE = 32 * 1024
_HEADER = struct.Struct("<IHB")
#: Full, first, middle, last: the only record types RocksDB writes to a MANIFEST.
MANIFEST_RECORD_TYPES = frozenset({1, 2, 3, 4})
_MASK_DELTA = 0xA282EAD8
_CURRENT = re.compile(rb"(MANIFEST-[0-9]{1,20})\n")


def _crc32c_table() -> tuple[int, ...]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
        table.append(crc)
    return tuple(table)


_TABLE = _crc32c_table()


def crc32c(data: bytes, crc: int = 0) -> int:
    """CRC-32C (Castagnoli) of ``data``, continuing from ``crc``."""
    table = _TABLE
    crc ^= 0xFFFFFFFF
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def mask_crc(crc: int) -> int:
    """RocksDB's masking of a stored CRC (so a CRC of data holding CRCs is not degenerate)."""
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + _MASK_DELTA) & 0xFFFFFFFF


def unmask_crc(masked: int) -> int:
    rotated = (masked - _MASK_DELTA) & 0xFFFFFFFF
    return ((rotated >> 17) | (rotated << 15)) & 0xFFFFFFFF


def current_manifest(directory: str) -> str | None:
    """The MANIFEST file name ``CURRENT`` names, or None when ``CURRENT`` is absent or
    not exactly one such name (RocksDB itself reports a damaged ``CURRENT``)."""
    try:
        with open(os.path.join(directory, "CURRENT"), "rb") as handle:
            content = handle.read(64)
    except FileNotFoundError:
        return None
    match = _CURRENT.fullmatch(content)
    return match.group(1).decode("ascii") if match else None


def check_log_file(path: str, allowed_types: frozenset[int] = MANIFEST_RECORD_TYPES) -> str | None:
    """A description of the first bad record of the log file at ``path``, or None.

    Stricter than RocksDB's reader in the two places where it silently drops committed
    records: a zero header (which it skips to the block's end) is accepted only when
    nothing but zeros follows it to the end of the file, and a record cut off by the end
    of the file only when no whole, checksummed record starts inside the bytes it claims
    (a flipped length bit otherwise passes for an interrupted write). Reads block by
    block, so memory stays bounded whatever the file's size; an I/O error raises.
    """
    name = os.path.basename(path)
    with open(path, "rb") as handle:
        block_start = 0
        while True:
            block = handle.read(BLOCK_SIZE)
            if not block:
                return None
            last = len(block) < BLOCK_SIZE
            offset = 0
            while BLOCK_SIZE - offset >= _HEADER.size:
                if len(block) - offset < _HEADER.size:
                    return None  # the file ends inside a header: an interrupted write
                where = f"RocksDB's {name} fails verification at byte {block_start + offset}"
                masked, length, kind = _HEADER.unpack_from(block, offset)
                if kind == 0 and length == 0 and masked == 0:
                    if block.count(0, offset) != len(block) - offset or not _zeros_to_end(handle):
                        return f"{where}: a zeroed record header is followed by more records"
                    return None  # zeros to the end: preallocated or never-written space
                if kind not in allowed_types:
                    return f"{where}: record type {kind} is not one RocksDB writes there"
                end = offset + _HEADER.size + length
                if end > len(block):
                    if not last:
                        return f"{where}: a record of {length} bytes runs past its 32 KiB block"
                    if _holds_a_record(block, offset + _HEADER.size, allowed_types):
                        return f"{where}: a record's length runs past the end of the file over later records"
                    return None  # the file ends inside this record: an interrupted write
                if crc32c(block[offset + _HEADER.size - 1 : end]) != unmask_crc(masked):
                    return f"{where}: the record's checksum does not match"
                offset = end
            if last:
                return None
            block_start += BLOCK_SIZE


def _zeros_to_end(handle: BinaryIO) -> bool:
    while True:
        chunk = handle.read(BLOCK_SIZE)
        if not chunk:
            return True
        if chunk.count(0) != len(chunk):
            return False


#: At most this many bytes are checksummed while looking for records inside a tail
#: (a real interrupted write holds part of one record, so the search is usually short).
TAIL_SEARCH_BYTES = 1 << 20


def _holds_a_record(block: bytes, start: int, allowed_types: frozenset[int]) -> bool:
    """Whether a whole record with a matching checksum starts at or after ``start``."""
    budget = TAIL_SEARCH_BYTES
    for offset in range(start, len(block) - _HEADER.size + 1):
        masked, length, kind = _HEADER.unpack_from(block, offset)
        end = offset + _HEADER.size + length
        if kind not in allowed_types or end > len(block) or (offset % BLOCK_SIZE) + _HEADER.size + length > BLOCK_SIZE:
            continue
        budget -= length + 1
        if budget < 0:
            return False
        if crc32c(block[offset + _HEADER.size - 1 : end]) == unmask_crc(masked):
            return True
    return False


def check_manifest(directory: str) -> str | None:
    """A description of what is wrong with the MANIFEST ``CURRENT`` names, or None.

    None also when there is no readable ``CURRENT`` naming one or that MANIFEST is
    missing: RocksDB reports those itself, clearly and without hanging.
    """
    name = current_manifest(directory)
    if name is None:
        return None
    try:
        return check_log_file(os.path.join(directory, name))
    except FileNotFoundError:
        return None
