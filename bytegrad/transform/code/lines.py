"""The 3.11+ location table (co_linetable), written as CPython's compiler writes it: one entry per run
of code units with the same position (one per instruction on 3.11; at most 8 units an entry), in the shortest form that holds it
(Objects/locations.md in CPython's sources describes the format)."""
from __future__ import annotations

import sys
from typing import Optional, Sequence

from bytegrad.transform.code.instr import InstrLocation

__all__ = ["encode_locations"]

_NONE, _LONG, _NO_COLUMN = 15, 14, 13
#: 3.12's compiler writes one entry for neighbours with the same position; 3.11's one per instruction
_MERGE = sys.version_info >= (3, 12)


def _varint(out: bytearray, val: int) -> None:
    while val >= 64:
        out.append(64 | (val & 63))
        val >>= 6
    out.append(val)


def _svarint(out: bytearray, val: int) -> None:
    _varint(out, ((-val) << 1) | 1 if val < 0 else val << 1)


def _entry(out: bytearray, loc: Optional[InstrLocation], size: int, prev_line: int) -> int:
    """Write one entry of `size` (1-8) code units; the line the next entry's delta counts from."""
    if loc is None or loc.lineno is None:
        out.append(0x80 | (_NONE << 3) | (size - 1))
        return prev_line
    line = loc.lineno
    delta = line - prev_line
    end_line = -1 if loc.end_lineno is None else loc.end_lineno
    col = -1 if loc.col_offset is None else loc.col_offset
    end_col = -1 if loc.end_col_offset is None else loc.end_col_offset
    if col < 0 or end_col < 0:
        if end_line == line or end_line == -1:
            out.append(0x80 | (_NO_COLUMN << 3) | (size - 1))
            _svarint(out, delta)
            return line
    elif end_line == line:
        if delta == 0 and col < 80 and 0 <= end_col - col < 16:
            out.append(0x80 | ((col >> 3) << 3) | (size - 1))
            out.append(((col & 7) << 4) | (end_col - col))
            return line
        if 0 <= delta < 3 and col < 128 and end_col < 128:
            out.append(0x80 | ((10 + delta) << 3) | (size - 1))
            out.append(col)
            out.append(end_col)
            return line
    out.append(0x80 | (_LONG << 3) | (size - 1))
    _svarint(out, delta)
    _varint(out, end_line - line)
    _varint(out, col + 1)
    _varint(out, end_col + 1)
    return line


def encode_locations(runs: Sequence[tuple[Optional[InstrLocation], int]], first_lineno: int) -> bytes:
    """co_linetable for the instructions' (location, size in code units), in order: equal
    neighbours share entries."""
    out = bytearray()
    line = first_lineno
    cur: Optional[InstrLocation] = None
    size = 0
    for loc, n in runs:
        if _MERGE and size and (loc is cur or loc == cur):
            size += n
            continue
        while size > 0:
            line = _entry(out, cur, min(size, 8), line)
            size -= 8
        cur, size = loc, n
    while size > 0:
        line = _entry(out, cur, min(size, 8), line)
        size -= 8
    return bytes(out)
