"""A `Bytecode` to a code object: arguments encoded against the code's tables (the original's
constants, names and locals kept in place, new ones appended), jumps resolved to offsets (again
while an EXTENDED_ARG changes an instruction's size), inline CACHE entries written, the location
table and the exception table encoded, and the stack size computed (`stack.stack_size`)."""
from __future__ import annotations

import dis
import types
from typing import Any, Optional

from bytegrad.transform.code.instr import (
    BACKWARD_JUMPS, PY312, PY313, UNSET, CellVar, CodeError, FreeVar, Instr, InstrLocation, Label, TryBegin, TryEnd,
    cache_count)
from bytegrad.transform.code.lines import encode_locations
from bytegrad.transform.code.stack import stack_size

__all__ = ["to_code"]

_CONST = frozenset(dis.hasconst)
_LOCAL = frozenset(dis.haslocal)
_NAME = frozenset(dis.hasname)
_FREE = frozenset(dis.hasfree)
_PAIRS = {dis.opmap[n]: (a, b) for n, a, b in (("LOAD_FAST_LOAD_FAST", "LOAD_FAST", "LOAD_FAST"),
                                               ("STORE_FAST_LOAD_FAST", "STORE_FAST", "LOAD_FAST"),
                                               ("STORE_FAST_STORE_FAST", "STORE_FAST", "STORE_FAST"))
          if n in dis.opmap}
_BITFLAG = frozenset(dis.opmap[n] for n in (("LOAD_GLOBAL", "LOAD_ATTR") if PY312 else ("LOAD_GLOBAL",)))
_SUPER = dis.opmap.get("LOAD_SUPER_ATTR", -1)
_COMPARE = dis.opmap["COMPARE_OP"]
_EXTENDED_ARG = dis.opmap["EXTENDED_ARG"]
#: COMPARE_OP's low bits from 3.12: which outcomes (unordered 1, less 2, greater 4, equal 8) make it true
_COMPARE_MASKS = (2, 2 | 8, 8, 1 | 2 | 4, 4, 4 | 8)


def _const_key(value: Any) -> Any:
    t = type(value)
    if t is float:
        return (t, value.hex())
    if t is complex:
        return (t, value.real.hex(), value.imag.hex())
    if t in (int, bool, str, bytes) or value is None or value is Ellipsis:
        return (t, value)
    if t is tuple:
        return (t, tuple(_const_key(v) for v in value))
    return (id, id(value))  # code objects, frozensets, what the rewrite embeds: by identity


class _Tables:
    """co_consts, co_names and co_varnames being built: the original's first."""

    def __init__(self, bc: Any) -> None:
        self.consts: list[Any] = list(bc.consts or ())
        self.const_index: dict[Any, int] = {}
        for i, c in enumerate(self.consts):
            self.const_index.setdefault(_const_key(c), i)
        self.names = list(bc.names or ())
        self.name_index = {n: i for i, n in reversed(list(enumerate(self.names)))}
        self.varnames = list(bc.varnames or bc.argnames)
        self.var_index = {n: i for i, n in reversed(list(enumerate(self.varnames)))}
        self.cellvars = list(bc.cellvars)
        self.freevars = list(bc.freevars)

    def const(self, value: Any) -> int:
        key = _const_key(value)
        i = self.const_index.get(key)
        if i is None:
            i = self.const_index[key] = len(self.consts)
            self.consts.append(value)
        return i

    def name(self, name: str) -> int:
        i = self.name_index.get(name)
        if i is None:
            i = self.name_index[name] = len(self.names)
            self.names.append(name)
        return i

    def var(self, name: str) -> int:
        if type(name) is not str:
            raise CodeError(f"a local variable named by {name!r}")
        i = self.var_index.get(name)
        if i is None:
            i = self.var_index[name] = len(self.varnames)
            self.varnames.append(name)
        return i

    def cell(self, var: Any) -> int:
        """The localsplus index of a cell or free variable (valid once every local is known)."""
        nvars = len(self.varnames)
        if type(var) is CellVar:
            if var.name in self.var_index:
                return self.var_index[var.name]
            unshared = [c for c in self.cellvars if c not in self.var_index]
            if var.name in unshared:
                return nvars + unshared.index(var.name)
        elif type(var) is FreeVar and var.name in self.freevars:
            return nvars + sum(c not in self.var_index for c in self.cellvars) + self.freevars.index(var.name)
        raise CodeError(f"no such cell or free variable: {var!r}")


def _register_locals(bc: Any, tables: _Tables) -> None:
    for x in bc:
        if type(x) is Instr and x.opcode in _LOCAL:
            arg = x.arg
            for v in (arg if type(arg) is tuple else (arg,)):
                if type(v) is str:
                    tables.var(v)


def _oparg(x: Instr, op: int, arg: Any, tables: _Tables) -> int:
    if op in _CONST:
        return tables.const(arg)
    if op in _LOCAL:
        if type(arg) is str:
            return tables.var(arg)
        return tables.cell(arg)
    if op in _NAME:
        if op in _BITFLAG:
            return int(bool(arg[0])) | (tables.name(arg[1]) << 1)
        if op == _SUPER:
            return int(bool(arg[0])) | (int(bool(arg[1])) << 1) | (tables.name(arg[2]) << 2)
        return tables.name(arg)
    if op in _FREE:
        return tables.cell(arg if type(arg) in (CellVar, FreeVar) else CellVar(arg))
    if op == _COMPARE:
        k = int(arg)
        if PY313:
            return ((k & 15) << 5) | (k & 16) | _COMPARE_MASKS[k & 15]
        return (k << 4) | _COMPARE_MASKS[k] if PY312 else k
    if not isinstance(arg, int):
        raise CodeError(f"{x.name} with the argument {arg!r}")
    return int(arg)


def _flatten(bc: Any, tables: _Tables) -> tuple[list[list[Any]], dict[int, int], list[tuple[TryBegin, int, int]]]:
    """[opcode, oparg, label or None, location, caches] per instruction; label -> index; the ranges."""
    units: list[list[Any]] = []
    labels: dict[int, int] = {}
    open_tries: dict[int, tuple[TryBegin, int]] = {}
    tries: list[tuple[TryBegin, int, int]] = []
    loc: Optional[InstrLocation] = InstrLocation(bc.first_lineno)
    for x in bc:
        t = type(x)
        if t is Label:
            labels[id(x)] = len(units)
        elif t is TryBegin:
            open_tries[id(x)] = (x, len(units))
        elif t is TryEnd:
            tb, first = open_tries.pop(id(x.entry), (None, 0))
            if tb is None:
                raise CodeError("a TryEnd without its TryBegin")
            if len(units) > first:
                tries.append((tb, first, len(units) - 1))
        elif t is Instr:
            if x.location is not None:
                loc = x.location
            op, arg = x.opcode, x.arg
            if op in _PAIRS and any(tables.var(v) > 15 for v in arg):
                a, b = _PAIRS[op]
                units.append([dis.opmap[a], tables.var(arg[0]), None, loc, 0])
                units.append([dis.opmap[b], tables.var(arg[1]), None, loc, 0])
                continue
            if op in _PAIRS:
                units.append([op, (tables.var(arg[0]) << 4) | tables.var(arg[1]), None, loc, cache_count(op)])
                continue
            if type(arg) is Label:
                units.append([op, 0, arg, loc, cache_count(op)])
            else:
                units.append([op, None if arg is UNSET else _oparg(x, op, arg, tables), None, loc, cache_count(op)])
        else:
            raise CodeError(f"{type(x).__name__} in the instructions")
    if open_tries:
        raise CodeError("a TryBegin without its TryEnd")
    return units, labels, tries


def _ext(arg: Optional[int]) -> int:
    if arg is None or arg < 0x100:
        return 0
    return 1 if arg < 0x10000 else (2 if arg < 0x1000000 else 3)


def _resolve_jumps(units: list[list[Any]], labels: dict[int, int]) -> list[int]:
    """Set every jump's oparg; the start offset of each instruction (and one past the end)."""
    for _ in range(10):
        starts = [0]
        at = 0
        for u in units:
            arg = u[1]
            at += 1 + u[4] + (0 if arg is None or arg < 0x100 else _ext(arg))
            starts.append(at)
        changed = False
        for k, u in enumerate(units):
            label = u[2]
            if label is None:
                continue
            target = labels.get(id(label))
            if target is None:
                raise CodeError("a jump to a label that is not in the instructions")
            after = starts[k + 1]
            arg = after - starts[target] if u[0] in BACKWARD_JUMPS else starts[target] - after
            if arg < 0:
                raise CodeError(f"{dis.opname[u[0]]} cannot jump in that direction")
            if _ext(arg) != _ext(u[1]):
                changed = True
            u[1] = arg
        if not changed:
            return starts
    raise CodeError("jump offsets do not settle")


def _code_bytes(units: list[list[Any]]) -> bytes:
    out = bytearray()
    append = out.append
    for op, arg, _, _, caches in units:
        if arg is None:
            a = 0
        else:
            a = arg
            if arg >= 0x100:
                for shift in range(8 * _ext(arg), 0, -8):
                    append(_EXTENDED_ARG)
                    append((a >> shift) & 0xFF)
        append(op)
        append(a & 0xFF)
        if caches:
            out += bytes(2 * caches)
    return bytes(out)


def _varint6(out: bytearray, val: int, first: bool = False) -> None:
    chunks = []
    while True:
        chunks.append(val & 63)
        val >>= 6
        if not val:
            break
    chunks.reverse()
    for i, c in enumerate(chunks):
        out.append(c | (64 if i < len(chunks) - 1 else 0) | (128 if first and i == 0 else 0))


def _exception_table(tries: list[tuple[TryBegin, int, int]], starts: list[int], labels: dict[int, int]) -> bytes:
    out = bytearray()
    for tb, first, last in sorted(tries, key=lambda r: r[1]):
        depth = tb.stack_depth
        if type(depth) is not int or depth is UNSET or id(tb.target) not in labels:
            raise CodeError("an exception handler without a stack depth or a label")
        start, end = starts[first], starts[last + 1]
        _varint6(out, start, first=True)
        _varint6(out, end - start)
        _varint6(out, starts[labels[id(tb.target)]])
        _varint6(out, (depth << 1) | bool(tb.push_lasti))
    return bytes(out)


def to_code(bc: Any, stacksize: Optional[int] = None) -> types.CodeType:
    """The code object of `bc` (raises `CodeError` for what this does not write)."""
    size = stack_size(bc)  # (also sets the handlers' depths)
    if stacksize is not None:
        size = stacksize
    tables = _Tables(bc)
    _register_locals(bc, tables)
    units, labels, tries = _flatten(bc, tables)
    starts = _resolve_jumps(units, labels)
    runs = [(u[3], starts[k + 1] - starts[k]) for k, u in enumerate(units)]
    return types.CodeType(
        bc.argcount, bc.posonlyargcount, bc.kwonlyargcount, len(tables.varnames), size, bc.flags,
        _code_bytes(units), tuple(tables.consts), tuple(tables.names), tuple(tables.varnames), bc.filename,
        bc.name, bc.qualname, bc.first_lineno, encode_locations(runs, bc.first_lineno),
        _exception_table(tries, starts, labels), tuple(bc.freevars), tuple(bc.cellvars))
