"""A code object to a `Bytecode`: instructions with their arguments decoded (constants, names,
locals and cells, jump targets as `Label`s), EXTENDED_ARG folded into the argument it extends,
inline CACHE entries dropped, each instruction's source position from `co_positions()`, and the
exception table as `TryBegin` / `TryEnd` around the instructions each entry covers (with its stack
depth and lasti flag).
"""
from __future__ import annotations

import dis
import types
from typing import Any, Optional

from bytegrad.transform.code.instr import (
    BACKWARD_JUMPS, PY312, PY313, UNSET, BinaryOp, CellVar, CodeError, Compare, FormatValue, FreeVar, Instr,
    InstrLocation, Intrinsic1Op, Intrinsic2Op, Label, TryBegin, TryEnd, JUMPS, cache_count, opcode_has_arg)

__all__ = ["from_code", "parse_exception_table"]

_EXTENDED_ARG = dis.opmap["EXTENDED_ARG"]
_CACHE = dis.opmap["CACHE"]
_CONST = frozenset(dis.hasconst)
_LOCAL = frozenset(dis.haslocal)
_NAME = frozenset(dis.hasname)
_FREE = frozenset(dis.hasfree)
_PAIRS = frozenset(dis.opmap[n] for n in ("LOAD_FAST_LOAD_FAST", "STORE_FAST_LOAD_FAST", "STORE_FAST_STORE_FAST")
                   if n in dis.opmap)
_BITFLAG = frozenset(dis.opmap[n] for n in (("LOAD_GLOBAL", "LOAD_ATTR") if PY312 else ("LOAD_GLOBAL",)))
_SUPER = dis.opmap.get("LOAD_SUPER_ATTR", -1)
_NAMED_INTS: dict[int, Any] = {dis.opmap["BINARY_OP"]: BinaryOp}
if PY312:
    _NAMED_INTS[dis.opmap["CALL_INTRINSIC_1"]] = Intrinsic1Op
    _NAMED_INTS[dis.opmap["CALL_INTRINSIC_2"]] = Intrinsic2Op
if PY313:
    _NAMED_INTS[dis.opmap["CONVERT_VALUE"]] = FormatValue
_COMPARE = dis.opmap["COMPARE_OP"]


def _varint(table: bytes, i: int) -> tuple[int, int]:
    b = table[i]
    val = b & 63
    while b & 64:
        i += 1
        b = table[i]
        val = (val << 6) | (b & 63)
    return val, i + 1


def parse_exception_table(table: bytes) -> list[tuple[int, int, int, int, bool]]:
    """(start, last, target, depth, lasti) of each entry, offsets in code units (`last` inclusive)."""
    out = []
    i = 0
    while i < len(table):
        start, i = _varint(table, i)
        size, i = _varint(table, i)
        target, i = _varint(table, i)
        dl, i = _varint(table, i)
        out.append((start, start + size - 1, target, dl >> 1, bool(dl & 1)))
    return out


class _Args:
    """Decodes opargs against one code object's tables."""

    def __init__(self, code: types.CodeType) -> None:
        self.consts = code.co_consts
        self.names = code.co_names
        varnames = code.co_varnames
        self.varnames = varnames
        self.cells: list[Any] = list(varnames) + [CellVar(n) for n in code.co_cellvars if n not in varnames]
        self.frees = [FreeVar(n) for n in code.co_freevars]

    def local(self, i: int) -> Any:
        if i < len(self.varnames):
            return self.varnames[i]
        return self.deref(i)

    def deref(self, i: int) -> Any:
        cells = self.cells
        if i < len(cells):
            c = cells[i]
            return c if type(c) is CellVar else CellVar(c)
        return self.frees[i - len(cells)]

    def decode(self, op: int, arg: int) -> Any:
        if op in _CONST:
            return self.consts[arg]
        if op in _LOCAL:
            if op in _PAIRS:
                return (self.local(arg >> 4), self.local(arg & 15))
            return self.local(arg)
        if op in _NAME:
            if op in _BITFLAG:
                return (bool(arg & 1), self.names[arg >> 1])
            if op == _SUPER:
                return (bool(arg & 1), bool(arg & 2), self.names[arg >> 2])
            return self.names[arg]
        if op in _FREE:
            return self.deref(arg)
        if op == _COMPARE:
            return Compare(((arg >> 5) | (arg & 16)) if PY313 else (arg >> 4 if PY312 else arg))
        kind = _NAMED_INTS.get(op)
        return kind(arg) if kind is not None else arg


def _decode_units(code: types.CodeType) -> list[tuple[int, int, int, Any, Optional[InstrLocation]]]:
    """(start, last, opcode, oparg, location) of each instruction, offsets in code units: `start`
    counts its EXTENDED_ARG prefix, `last` its inline caches."""
    raw = code.co_code
    positions = list(code.co_positions())
    n = len(raw) // 2
    out = []
    i = 0
    prev_pos: Any = None
    loc: Optional[InstrLocation] = None
    while i < n:
        start, ext = i, 0
        op, a = raw[2 * i], raw[2 * i + 1]
        while op == _EXTENDED_ARG:
            ext = (ext << 8) | a
            i += 1
            if i >= n:
                raise CodeError("EXTENDED_ARG at the end of the code")
            op, a = raw[2 * i], raw[2 * i + 1]
        if op == _CACHE:
            raise CodeError(f"a CACHE entry where an instruction was expected (offset {2 * i})")
        if opcode_has_arg(op):
            arg: Any = (ext << 8) | a
        elif ext or a or start != i:
            raise CodeError(f"{dis.opname[op]} has an argument but takes none (offset {2 * i})")
        else:
            arg = UNSET
        pos = positions[i]
        if pos != prev_pos:
            prev_pos = pos
            loc = InstrLocation(*pos)
        last = i + cache_count(op)
        if any(raw[2 * k] != _CACHE for k in range(i + 1, last + 1)):
            raise CodeError(f"{dis.opname[op]} lacks its inline caches (offset {2 * i})")
        out.append((start, last, op, arg, loc))
        i = last + 1
    return out


def _jump_target(op: int, last: int, arg: int) -> int:
    return last + 1 - arg if op in BACKWARD_JUMPS else last + 1 + arg


def from_code(code: types.CodeType, out: Any) -> Any:
    """`out` (an empty `Bytecode`) filled with the instructions of `code` (raises `CodeError` for
    what this does not read)."""
    try:
        units = _decode_units(code)
        table = parse_exception_table(code.co_exceptiontable)
    except IndexError:
        raise CodeError("truncated bytecode or exception table") from None
    starts = {u[0] for u in units}
    lasts = {u[1] for u in units}
    labels: dict[int, Label] = {}
    for start, last, op, arg, _ in units:
        if op in JUMPS:
            labels.setdefault(_jump_target(op, last, arg), Label())
    begins: dict[int, tuple[int, int, int, bool]] = {}
    ends: dict[int, list[int]] = {}
    for k, (start, last, target, depth, lasti) in enumerate(table):
        if start > last or start not in starts or last not in lasts or target not in starts or start in begins:
            raise CodeError("an exception table entry does not fall on instruction boundaries")
        labels.setdefault(target, Label())
        begins[start] = (k, target, depth, lasti)
        ends.setdefault(last, []).append(k)
    if not set(labels) <= starts:
        raise CodeError("a jump into the middle of an instruction")
    args = _Args(code)
    out._set_code(code)
    tries: dict[int, TryBegin] = {}
    for start, last, op, arg, loc in units:
        label = labels.get(start)
        if label is not None:
            out.append(label)
        entry = begins.get(start)
        if entry is not None:
            tb = TryBegin(labels[entry[1]], entry[3], entry[2])
            tries[entry[0]] = tb
            out.append(tb)
        if op in JUMPS:
            value: Any = labels[_jump_target(op, last, arg)]
        elif arg is UNSET:
            value = UNSET
        else:
            try:
                value = args.decode(op, arg)
            except IndexError:
                raise CodeError(f"{dis.opname[op]}'s argument {arg} is out of range") from None
        out.append(Instr._trusted(dis.opname[op], op, value, loc))
        for k in ends.get(last, ()):
            out.append(TryEnd(tries[k]))
    return out
