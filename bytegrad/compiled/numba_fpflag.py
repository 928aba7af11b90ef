"""Floating-point errors in a Numba program, reported as the general path reports them.

A Numba kernel runs without NumPy's floating-point error reporting: it would return a number where
the general path warns ("overflow encountered in exp", at the user's line) or, under
`np.seterr(all="raise")`, raises. Under default rounding every error NumPy reports as divide,
overflow or invalid gives an inf or a NaN, even where later steps make the result finite again
(`1 / (1 + np.exp(-x))` is 0.0 after exp overflowed). So each kernel keeps one float, `fp_`, that it
adds `v - v` to for every value it computes, forward and reverse (0.0 while every value is finite,
NaN from the first one that is not), and returns it; the wrapper (`after`) then hands the call to
the general path (`FP_ERROR`: compiled/policy.py runs it there without a capture) before it uses
any of the kernel's results, where the user's error state has something to report. The general path
then computes the call once, with its warnings and exceptions; a program has no effects of its own
to undo (compiled/effects.py keeps a function with effects on the general path).

The sum is what costs least in a loop LLVM vectorises: in an element loop each value adds one
subtraction and one reassociable addition (`radd`), no branch; an array statement of an array
kernel one pass of `nonfinite` (runtime/vmath_sources.py, vectorised), and so does the result of a
NumPy ufunc the wrapper calls between two kernel parts (its warnings wait for the call's result:
runtime/fpwarn.py drops them when the general path runs the call). An argument that is already
inf or NaN sets the flag too: the call runs on the general path, slower and right.

Underflow is the exception: it gives finite values. The wrapper asks first (`before`:
runtime/fpstate.py, an identity test of NumPy's error state) and runs the kernel only while `under`
is "ignore", NumPy's default; otherwise the call goes to the general path as well. Where divide,
over and invalid are all "ignore" (the tier's own checks run so) the kernel's values stand.
"""
from __future__ import annotations

import re
from typing import Any

import numpy as np

from bytegrad.compiled.numba_kernel import SPLIT
from bytegrad.runtime import kernels
from bytegrad.runtime.fpstate import kernel_mode
from bytegrad.runtime.sentinels import FP_ERROR

__all__ = ["FLAG", "TARGET", "after", "before", "flag"]

#: the kernel's accumulator, and the wrapper's variable that receives it
FLAG = "fp_"
TARGET = "fpflag_"
_MODE = "fpmode_"

#: a value an element loop computes (every one a float there) and one of the kernel's top level (an
#: array or a float): the kernel's values, cotangents, temporaries, accumulators and its loss
_IN_LOOP = re.compile(r"^(\s+)((?:v|g|t|e|a|r)\d+|total) = ")
_TOP = re.compile(r"^((?:v|g|t)\d+|total) = (.*)$")
#: allocations (np.empty is not yet written: its bytes are anything)
_MADE = ("np.empty", "np.zeros", "np.full")


def flag(k: Any, lines: list[str], returns: list[str]) -> tuple[list[str], list[str]]:
    """The kernel `lines` of `k` (lower_numba's `_Kernel`) with `fp_` kept, and `returns` with it last."""
    vm = kernels.vector_math()
    if not vm:  # (no Numba: no kernel is compiled)
        return [f"{FLAG} = 0.0", *lines], [*returns, FLAG]
    radd = k.names.const(vm["radd"], "radd")
    check = k.names.const(vm["nonfinite"], "vm")
    out: list[str] = []
    started: list[bool] = []

    def add(line: str) -> None:  # (`fp_ = 0.0` opens the first kernel part: a NumPy step may come first)
        if not started:
            out.append(f"{FLAG} = 0.0")
            started.append(True)
        out.append(line)
    for ln in lines:
        if ln.startswith(SPLIT):  # a NumPy ufunc between two kernel parts: the next part checks its value
            out.append(ln)
            add(f"{FLAG} = {FLAG} + {check}({ln[len(SPLIT):].split(' = ')[0]})")
            continue
        add(ln)
        if ln.startswith("#"):
            continue
        m = _IN_LOOP.match(ln)
        if m is not None:
            add(f"{m[1]}{FLAG} = {radd}({FLAG}, {m[2]} - {m[2]})")
            continue
        m = _TOP.match(ln)
        if m is not None and not m[2].startswith(_MADE):
            x = m[1]
            add(f"{FLAG} = {FLAG} + {check}({x})" if _array(k, x) else f"{FLAG} = {FLAG} + np.sum({x} - {x})")
    if not started:
        out.append(f"{FLAG} = 0.0")
    return out, [*returns, FLAG]


def _array(k: Any, name: str) -> bool:
    """Whether the kernel variable `name` is known to be an array (else it may be a float: `np.sum`
    takes both, and costs nothing on a float)."""
    if name in k.array:
        return True
    values = k.b.tape.values
    return name[0] == "v" and name[1:].isdigit() and int(name[1:]) < len(values) \
        and type(values[int(name[1:])]) is np.ndarray


def before(src: Any) -> None:
    """The wrapper's lines before its first kernel call: the error state's mode; the call goes to the
    general path where it asks for underflow (runtime/fpstate.py)."""
    src.emit(f"{_MODE} = {src.const(kernel_mode, 'fpmode')}()")
    src.emit(f"if {_MODE} == 0: return {src.const(FP_ERROR, 'FP')}")


def after(src: Any) -> None:
    """The wrapper's line after its last kernel call, before any use of the results: a non-finite value
    that the error state reports sends the call to the general path."""
    src.emit(f"if {TARGET} != 0.0 and {_MODE} == 1: return {src.const(FP_ERROR, 'FP')}")
