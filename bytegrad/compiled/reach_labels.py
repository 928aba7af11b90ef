"""An integer or boolean array argument converted to floats by arithmetic with a float: `2.0 * labels - 1.0`.

A capture tracks float arrays only; an integer or boolean array argument is an input it does not
track (compiled/capture.py `track_in_place`), so what Python code computes from it is not recorded
and the static check refuses it ("computes from an integer or boolean array argument where nothing
is recorded"): a program would hold the capture's values. An argument whose every use is one
operand of `+ - * / **` with a float literal as the other (`2.0 * labels`, `labels - 0.5`) gives a
float array at once: `untracked_params` takes such a parameter out of the untracked ones, so the
check sees it active, and `leaf` makes the array a leaf of the capture's tape (`track_in_place`),
so that the conversion is a recorded elementwise operation. The program reads the array per call
as an input (its type, shape and dtype guarded) and computes the conversion again; it is not
differentiated (no tangent reaches it: only the differentiated arguments' cotangents are written).
Any other use of the parameter (an index, `len`, `labels.sum()`, a comparison, a store) keeps it
untracked, as before.
"""
from __future__ import annotations

import dis
import threading
import types
from typing import Any, Optional

import numpy as np

__all__ = ["converted_params", "leaf", "untracked_params"]

_ndarray = np.ndarray
#: BINARY_OP's arguments for `+`, `*`, `**`, `-`, `/` (CPython's NB_* numbering, transform/opcodes)
_ARITHMETIC = frozenset({0, 5, 8, 10, 11})
_LOADS = frozenset({"LOAD_FAST", "LOAD_FAST_CHECK"})
#: the arrays of the arguments taken, per thread: set by `untracked_params` (the eligibility of a
#: capture run), read by `leaf` in the same run's argument preparation
_TAKEN = threading.local()


def untracked_params(code: types.CodeType, names: tuple, args: tuple) -> frozenset[str]:
    """The parameters (`names`, with the call's `args`) holding integer or boolean arrays the capture
    does not track: all of them but those `converted_params` takes, whose arrays `leaf` then tracks."""
    ints = {n: a for n, a in zip(names, args) if type(a) is _ndarray and a.dtype.kind not in "fc"}
    taken = converted_params(code, frozenset(ints)) if ints else frozenset()
    _TAKEN.arrays = {id(ints[n]): ints[n] for n in taken}
    return frozenset(ints) - taken


def leaf(value: Any, tape: Any) -> Optional[Any]:
    """A leaf of `tape` for an integer or boolean array argument `untracked_params` took; else None."""
    arrays = getattr(_TAKEN, "arrays", None)
    if not arrays or arrays.get(id(value)) is not value:
        return None
    from bytegrad.runtime import pytree

    return pytree.Leaf(tape.leaf(value), value)


def converted_params(code: types.CodeType, params: frozenset[str]) -> frozenset[str]:
    """Those of `params` that `code` only loads as an operand of float arithmetic with a float literal."""
    if code.co_flags & (0x20 | 0x80 | 0x200):  # (a generator or coroutine: its frames outlive the call)
        return frozenset()
    instrs = [i for i in dis.get_instructions(code) if i.opname not in ("CACHE", "EXTENDED_ARG", "NOP")]
    taken = set(params) - set(code.co_cellvars)
    uses: dict[str, int] = {}
    for k, ins in enumerate(instrs):
        names = ins.argval if isinstance(ins.argval, tuple) else (ins.argval,)
        for n in [n for n in names if n in taken]:
            if "FAST" not in ins.opname and "DEREF" not in ins.opname:
                continue
            if ins.opname not in _LOADS or not _float_operand(instrs, k):
                taken.discard(n)  # (a store, a pair load, any other use)
            else:
                uses[n] = uses.get(n, 0) + 1
    return frozenset(n for n in taken if uses.get(n))


def _float_operand(instrs: list, k: int) -> bool:
    """Whether the load at k is one operand of `+ - * / **` whose other operand is a float literal."""
    def const(i: int) -> bool:
        return 0 <= i < len(instrs) and instrs[i].opname == "LOAD_CONST" and type(instrs[i].argval) is float

    def arithmetic(i: int) -> bool:
        return 0 <= i < len(instrs) and instrs[i].opname == "BINARY_OP" and instrs[i].arg in _ARITHMETIC
    return (const(k - 1) and arithmetic(k + 1)) or (const(k + 1) and arithmetic(k + 2))
