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

The sum is what costs least, with no branch: an element loop adds the values it computes in a
balanced tree once per iteration and `q_ - q_` to `fp_` with a reassociable addition (`radd`), so
the loop still vectorises (its own sums, the loss and a row's, are left out: read in the body they
would no longer vectorise; they are checked with the kernel's results). A top-level value, array or
float, is checked after its statement (an array by `nonfinite_array`, runtime/vmath_sources.py, one
vectorised pass), unless every use of it carries an inf or NaN on into a value that is checked
(`_needed`: each check costs LLVM about as much as an array statement, 11 ms of compile). The
result of a NumPy ufunc the wrapper calls between two kernel parts is checked in the next part (its
warnings wait for the call's result: runtime/fpwarn.py drops them when the general path runs the
call). An argument that is already inf or NaN sets the flag too: the call runs on the general path,
slower and right. Measured (best of 7 x 200 gradients, this 2-core VM, against the same tree without
the checks): dense2 4.43 -> 4.47 us, elem10 7.7 -> 8.5 (its loop of 1,000 elements), sin100 4.59 ->
4.63, loop50 12.6 -> 13.1, the RNN of bench/realistic_programs.py 31.3 -> 31.7; an outlined RK4
kernel of 8 steps compiled in 7.9 s against 7.7.

Underflow is the exception: it gives finite values. The wrapper asks first (`before`:
runtime/fpstate.py, an identity test of NumPy's error state) and runs the kernel only while `under`
is "ignore", NumPy's default; otherwise the call goes to the general path as well. Where divide,
over and invalid are all "ignore" (the tier's own checks run so) the kernel's values stand.
"""
from __future__ import annotations

import ast
import re
from typing import Any, Optional

import numpy as np

from bytegrad.compiled import numba_outline
from bytegrad.compiled.numba_kernel import SPLIT
from bytegrad.compiled.source import AST_LOCK
from bytegrad.runtime import fpstate, kernels
from bytegrad.runtime.sentinels import FP_ERROR

__all__ = ["FLAG", "TARGET", "after", "before", "flag"]

#: the kernel's accumulator, and the wrapper's variable that receives it
FLAG = "fp_"
TARGET = "fpflag_"
_MODE = "fpmode_"
#: the header of a rolled loop (compiled/numba_roll.py: forward and reverse), whose body holds arrays
_ROLLED = "for it in range("
_TAPE_NAME = re.compile(r"^[vgr](\d+)$")

#: an assignment of a value the kernel computes: a record's value, a cotangent, a temporary, an element
#: loop's accumulators and its loss (not `r{p}` at the top level: an array not yet written, np.empty)
_ASSIGN = re.compile(r"^(\s*)((?:v|g|t|e|a|r)\d+|total) = (.*)$")
#: an element loop's sums: the loss, a row's, a float argument's gradient (its reductions: read in the
#: loop's body, they would no longer vectorise)
_SUM = re.compile(r"^(total|a\d+|r\d+)$")
#: a number or a fresh array (zeros, or not yet written): nothing to check
_MADE = re.compile(r"^-?[0-9.e+-]+$|^np\.(zeros|empty)\(")
#: right-hand sides that cannot make a non-finite value from finite ones: a name, negated, indexed,
#: transposed or reshaped (a copy or a view), a number, an allocation
_COPY = re.compile(r"^\(?-?[A-Za-z_]\w*(\[[^\]]*\]|\.T|\.reshape\(\([^()]*\)\))*\)?$|^-?[0-9.e+-]+$"
                   r"|^np\.(empty|zeros|full)\(")


class _Flagged:
    """The lines being written: each top-level value checked after its statement, an element loop's
    values summed once per iteration at the end of their block (`q_`, a tree of additions)."""

    def __init__(self, k: Any, radd: str, check: str, needed: set[int]) -> None:
        self.k, self.radd, self.check = k, radd, check
        self.needed = needed  # (the top-level values checked: `_needed`)
        self.out: list[str] = []
        self.started = False
        self.pad = ""
        self.pending: dict[str, None] = {}  # (in order, once each: a name reassigned only accumulates)
        self.checked: set[str] = set()  # (top-level names checked: a result among them needs no check at the end)
        self.rolled: Optional[str] = None  # the indentation of a rolled loop's body (compiled/numba_roll.py)

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

    def line(self, n: int, ln: str) -> None:
        pad = ln[:len(ln) - len(ln.lstrip())]
        if pad != self.pad or ln.rstrip().endswith(":"):
            self.flush()
        self.pad = pad
        if ln.startswith(SPLIT):  # a NumPy ufunc between two kernel parts: the next part checks its value
            self.out.append(ln)
            self.add(f"{FLAG} = {FLAG} + {self.check}({ln[len(SPLIT):].split(' = ')[0]})")
            return
        self.add(ln)
        if self.rolled is not None and len(pad) < len(self.rolled):
            self.rolled = None
        if ln.strip().startswith(_ROLLED):  # (a rolled loop's body holds arrays: each value checked, typed)
            self.rolled = pad + "    "
        m = _ASSIGN.match(ln)
        if m is None:
            return
        name, copy = m[2], _COPY.match(m[3].strip())
        if self.rolled is not None and pad == self.rolled:
            check = None if copy or _MADE.match(m[3].strip()) else self._typed(name)
            if check is not None:
                self.add(f"{pad}{FLAG} = {FLAG} + {check}")
        elif pad:
            if not (copy or _SUM.match(name)):  # (a loop's sums are checked once, after it: `flag`)
                self.pending[name] = None
        elif name[0] != "r" and n in self.needed and not _MADE.match(m[3].strip()):
            self.add(f"{FLAG} = {FLAG} + {self._check(name)}")
            self.checked.add(name)

    def _typed(self, name: str) -> Optional[str]:
        """The check of a value of a rolled loop's body (`v{i}`, its cotangent `g{i}`: the type of tape
        value i), or None for a temporary (what it makes reaches a value checked after it)."""
        values = self.k.b.tape.values
        m = _TAPE_NAME.match(name)
        if m is None or int(m[1]) >= len(values):
            return None
        return f"{self.check}({name})" if type(values[int(m[1])]) is np.ndarray else f"({name} - {name})"

    def _check(self, name: str) -> str:
        """The check of a top-level value: an array's pass, a float's subtraction."""
        values = self.k.b.tape.values  # (v{i}: record i's value; r{p}: argument p's gradient)
        tape = name[0] in "vr" and name[1:].isdigit() and int(name[1:]) < len(values)
        if name in self.k.array or (tape and type(values[int(name[1:])]) is np.ndarray):
            return f"{self.check}({name})"
        return f"({name} - {name})" if tape else f"np.sum({name} - {name})"  # (np.sum: a float, or an array)


def _needed(lines: list[str], returns: list[str], ns: dict) -> set[int]:
    """The top-level assignments whose value the kernel checks: all but those whose every later use
    carries an inf or NaN on into a value that is checked (or carries it on in turn): `a + b`, `a - b`,
    `a * b` (inf * 0 is NaN), `a @ b`, `-a`, `a / b`'s numerator, `a ** 2`, `.T`, `.reshape`, a sum,
    an outlined expression of those, a small product's loops. Division by it, `exp`, `tanh`, an index
    (which may drop the element), a use in a loop or a store, a return: the value is checked."""
    uses: dict[tuple[str, int], list[Optional[tuple[str, int]]]] = {}  # (name, version) -> into what
    version: dict[str, int] = {}
    defs: dict[int, tuple[str, int]] = {}
    for n, ln in enumerate(lines):
        m = _ASSIGN.match(ln)
        flows: dict[str, bool] = {}
        target = None
        if m is not None and not m[1]:
            target = (m[2], version.get(m[2], -1) + 1)
            with AST_LOCK:
                tree = ast.parse(m[3].strip(), mode="eval").body
            _flows(tree, True, ns, flows)
        else:  # (a line of a loop, a store, a NumPy step: what it reads is not carried)
            flows = dict.fromkeys(re.findall(r"[A-Za-z_]\w*", ln), False)
        for name, carried in flows.items():
            if name in version:
                uses.setdefault((name, version[name]), []).append(target if carried else None)
        if target is not None:
            version[target[0]] = target[1]
            defs[n] = target
    for r in returns:  # (what the kernel returns is checked)
        if r in version:
            uses.setdefault((r, version[r]), []).append(None)
    covered: set[tuple[str, int]] = set()
    needed = set()
    for n in sorted(defs, reverse=True):  # (a value's uses come after it: their targets are known)
        into = uses.get(defs[n])
        if not into or any(t is None or t not in covered for t in into):
            needed.add(n)
        covered.add(defs[n])
    return needed


#: functions of a kernel whose result holds an inf or NaN where an argument does (by `__name__`)
_CARRY = frozenset({"small_matmul", "small_matvec", "small_vecmat", "small_outer", "sum_rows", "sum_cols",
                    "axis_sum"})
_CARRY_OPS = (ast.Add, ast.Sub, ast.Mult, ast.MatMult)


def _flows(node: ast.AST, carry: bool, ns: dict, flows: dict[str, bool]) -> None:
    """For each name `node` reads: whether every read of it carries an inf or NaN into the result."""
    if isinstance(node, ast.Name):
        flows[node.id] = flows.get(node.id, True) and carry
        return
    if isinstance(node, ast.BinOp):
        op = type(node.op)
        left = carry and (op in _CARRY_OPS or op is ast.Div or (op is ast.Pow and _positive(node.right)))
        _flows(node.left, left, ns, flows)
        _flows(node.right, carry and op in _CARRY_OPS, ns, flows)
        return
    if isinstance(node, ast.UnaryOp):
        _flows(node.operand, carry and isinstance(node.op, (ast.USub, ast.UAdd)), ns, flows)
        return
    if isinstance(node, ast.Attribute):
        _flows(node.value, carry and node.attr == "T", ns, flows)
        return
    if isinstance(node, ast.Call):
        _call(node, carry, ns, flows)
        return
    for child in ast.iter_child_nodes(node):  # (an index, a tuple...: not carried)
        _flows(child, False, ns, flows)


def _call(node: ast.Call, carry: bool, ns: dict, flows: dict[str, bool]) -> None:
    f = node.func
    carried: list[bool] = [False] * len(node.args)
    if isinstance(f, ast.Attribute):  # x.reshape(...), x.sum(), x.sum(axis=0), x.copy()
        _flows(f.value, carry and f.attr in ("reshape", "sum", "copy"), ns, flows)
    elif isinstance(f, ast.Name):
        fn = ns.get(f.id)
        name = getattr(fn, "__name__", "")
        expr = numba_outline.source_of(fn) if name.startswith("outlined_") else None
        if expr is not None:  # an outlined expression over a0, a1...
            inner: dict[str, bool] = {}
            with AST_LOCK:
                tree = ast.parse(expr, mode="eval").body
            _flows(tree, True, {}, inner)
            carried = [inner.get(f"a{j}", False) for j in range(len(node.args))]
        elif name in _CARRY or fn is np.ascontiguousarray:
            carried = [True] * len(node.args)
        elif fn is np.full and len(node.args) >= 2:
            carried[1] = True
    for a, c in zip(node.args, carried):
        _flows(a, carry and c, ns, flows)
    for kw in node.keywords:
        _flows(kw.value, False, ns, flows)


def _positive(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and node.value > 0


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
    f = _Flagged(k, k.names.const(vm["radd"], "radd"), k.names.const(vm["nonfinite_array"], "nf"),
                 _needed(lines, returns, k.names.ns))
    for n, ln in enumerate(lines):
        f.line(n, ln)
    f.flush()  # (the last block's: a loop's last lines)
    if not f.started:  # (only NumPy steps)
        f.out.append(f"{FLAG} = 0.0")
    f.out += [f"{FLAG} = {FLAG} + {f._check(r)}" for r in returns if r not in f.checked]  # (the loop's sums)
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
