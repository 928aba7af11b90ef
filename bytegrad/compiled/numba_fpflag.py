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

from bytegrad.compiled.numba_kernel import SPLIT
from bytegrad.runtime import fpstate, kernels
from bytegrad.runtime.sentinels import FP_ERROR

__all__ = ["FLAG", "TARGET", "after", "before", "flag"]

#: the kernel's accumulator, and the wrapper's variable that receives it
FLAG = "fp_"
TARGET = "fpflag_"
_MODE = "fpmode_"

#: an assignment of a value the kernel computes: a record's value, a cotangent, a temporary, an element
#: loop's accumulators and its loss (not `r{p}` at the top level: an array not yet written, np.empty)
_ASSIGN = re.compile(r"^(\s*)((?:v|g|t|e|a|r)\d+|total) = (.*)$")
#: right-hand sides that cannot make a non-finite value from finite ones: a name, negated, indexed,
#: transposed or reshaped (a copy or a view), a number, an allocation
#: an element loop's sums: the loss, a row's, a float argument's gradient (its reductions: read in the
#: loop's body, they would no longer vectorise)
_SUM = re.compile(r"^(total|a\d+|r\d+)$")
_COPY = re.compile(r"^\(?-?[A-Za-z_]\w*(\[[^\]]*\]|\.T|\.reshape\(\([^()]*\)\))*\)?$|^-?[0-9.e+-]+$"
                   r"|^np\.(empty|zeros|full)\(")


class _Flagged:
    """The lines being written: each top-level value checked after its statement, an element loop's
    values summed once per iteration at the end of their block (`q_`, a tree of additions)."""

    def __init__(self, radd: str, check: str) -> None:
        self.radd, self.check = radd, check
        self.out: list[str] = []
        self.started = False
        self.pad = ""
        self.pending: dict[str, None] = {}  # (in order, once each: a name reassigned only accumulates)
        self.checked: set[str] = set()  # (top-level names checked: a result among them needs no check at the end)

    def add(self, line: str) -> None:
        if not self.started:  # (`fp_ = 0.0` opens the first kernel part: a NumPy step may come first)
            self.out.append(f"{FLAG} = 0.0")
            self.started = True
        self.out.append(line)

    def flush(self) -> None:
        if self.pending:
            self.add(f"{self.pad}q_ = {_tree(list(self.pending))}")
            self.add(f"{self.pad}{FLAG} = {self.radd}({FLAG}, q_ - q_)")
            self.pending = {}

    def line(self, ln: str) -> None:
        pad = ln[:len(ln) - len(ln.lstrip())]
        if pad != self.pad or ln.rstrip().endswith(":"):
            self.flush()
        self.pad = pad
        if ln.startswith(SPLIT):  # a NumPy ufunc between two kernel parts: the next part checks its value
            self.out.append(ln)
            self.add(f"{FLAG} = {FLAG} + {self.check}({ln[len(SPLIT):].split(' = ')[0]})")
            return
        self.add(ln)
        m = _ASSIGN.match(ln)
        if m is None or _COPY.match(m[3].strip()):
            return
        if pad:
            if not _SUM.match(m[2]):  # (a loop's sums are checked once, after it: `flag`)
                self.pending[m[2]] = None
        elif m[2][0] != "r":
            self.add(f"{FLAG} = {FLAG} + {self.check}({m[2]})")
            self.checked.add(m[2])


def _tree(names: list[str]) -> str:
    """`names` added in a balanced tree (independent additions, not one chain)."""
    if len(names) == 1:
        return names[0]
    mid = len(names) // 2
    return f"({_tree(names[:mid])} + {_tree(names[mid:])})"


def flag(k: Any, lines: list[str], returns: list[str]) -> tuple[list[str], list[str]]:
    """The kernel `lines` of `k` (lower_numba's `_Kernel`) with `fp_` kept, and `returns` with it last.
    An element loop's lines are indented (every value a float there); a top-level value may be an
    array or a float (`nonfinite` is typed for each: runtime/kernels.py)."""
    vm = kernels.vector_math()
    if not vm:  # (no Numba: no kernel is compiled)
        return [f"{FLAG} = 0.0", *lines], [*returns, FLAG]
    f = _Flagged(k.names.const(vm["radd"], "radd"), k.names.const(vm["nonfinite"], "vm"))
    for ln in lines:
        f.line(ln)
    f.pad = ""
    f.flush()
    if not f.started:  # (only NumPy steps)
        f.out.append(f"{FLAG} = 0.0")
    f.out += [f"{FLAG} = {FLAG} + {f.check}({r})" for r in returns if r not in f.checked]  # (the loop's sums)
    return f.out, [*returns, FLAG]


def before(src: Any) -> None:
    """The wrapper's lines before its first kernel call: the error state's mode; the call goes to the
    general path where it asks for underflow (runtime/fpstate.py)."""
    mode = f"{src.const(fpstate.kernel_mode, 'fpmode')}()"
    if fpstate.STATE is not None:  # (the mode of a state met before, inline: a call costs more than the rest)
        mode = f"{src.const(fpstate.MODES, 'fpmodes')}.get({src.const(fpstate.STATE, 'fpstate')}.get()) or {mode}"
    src.emit(f"{_MODE} = {mode}")
    src.emit(f"if {_MODE} == 0: return {src.const(FP_ERROR, 'FP')}")


def after(src: Any) -> None:
    """The wrapper's line after its last kernel call, before any use of the results: a non-finite value
    that the error state reports sends the call to the general path."""
    src.emit(f"if {TARGET} != 0.0 and {_MODE} == 1: return {src.const(FP_ERROR, 'FP')}")
