"""Decisions on data in a Numba program (compiled/lower_numba.py): each checked as the NumPy back end checks it.

A capture's decision (`CaptureTape.check`: a comparison, a truth test, a function without a
derivative on a tracked value) is computed again by a program, which runs only where it comes out
as at capture; else the program returns DECIDED before anything else happens and the call runs on
the general path (compiled/policy.py), once: a kernel holds no effect, so nothing is done twice.

- A decision whose operands are the call's inputs or constants alone (`bool(self.activation)` of a
  flag read off an object the call built) is the NumPy back end's own check (`Builder.decide`),
  written in the wrapper before the kernel's call; an array it gives (a mask of an input) is a
  parameter of the kernel.
- A decision on a value the kernel computes is computed in the kernel, in tape order, and its
  check ORs into the flag `FLAG`, which the kernel returns last; the wrapper returns DECIDED when
  it is set, before it reads anything else the kernel gave. Such a kernel is an array kernel (its
  decisions read whole values, not one element of a loop), and takes comparisons, truth tests and
  `DECIDE_FNS` giving a bool, an int or a bool array (a mask, compared element by element with the
  capture's and read by the records that use it from its kernel variable); anything else raises
  `Ineligible`, and the NumPy back end serves the signature.
"""
from __future__ import annotations

import operator
from typing import Any

import numpy as np

from bytegrad.errors import qualname
from bytegrad.compiled import ir as _ir
from bytegrad.compiled.guards import Guard
from bytegrad.compiled.source import DECISION_GUARD, Decision, Ineligible, short

__all__ = ["DECIDE_FNS", "FLAG", "forward", "outer"]

#: the kernel variable holding whether a decision came out otherwise (the kernel's last return)
FLAG = "dec_"
_COMPARE = {operator.lt: "<", operator.le: "<=", operator.gt: ">", operator.ge: ">=", operator.eq: "==",
            operator.ne: "!="}
#: 3.13's comparisons that convert to bool in the same instruction (COMPARE_OP's bool bit), by (module, name)
_BOOL_COMPARE: dict[tuple[Any, Any], str] = {("bytegrad.transform.opcodes.decode", f"_bool_{name}"): symbol
                 for name, symbol in (("lt", "<"), ("le", "<="), ("gt", ">"), ("ge", ">="), ("eq", "=="), ("ne", "!="))}
#: functions without a derivative a kernel computes as a decision (Numba implements each for arrays and floats)
DECIDE_FNS = frozenset({np.argmax, np.argmin, np.isnan, np.isfinite, np.isinf, np.signbit})
_ndarray = np.ndarray
#: tests only: the kernel computes its decisions without checking them (a test proves the check is needed)
OMIT_CHECKS = False


def outer(b: Any) -> list[tuple]:
    """The wrapper's checks of the decisions on inputs and constants alone (written into `b.src`
    now, before the kernel's call); returns the other decisions, in tape order, for `forward`."""
    inner = []
    for check in sorted(b.checks, key=lambda c: c[0]):
        if all(p is None for p in _ir.operand_ids(b.tape, check[2], check[0])):
            b.decide(check)  # (lower_numpy.Builder: the NumPy back end's check, as it writes it)
        else:
            inner.append(check)
    return inner


def forward(k: Any, records: list[int], inner: list[tuple]) -> list[str]:
    """Every record's forward step into the array kernel `k` (lower_numba's `_Kernel`), each decision
    of `inner` computed and checked where the capture made it; returns the kernel's extra returns
    (`[FLAG]`, or none without decisions)."""
    pending = list(inner)
    if pending:
        k.lines.append(f"{FLAG} = False")
    for i in records:
        while pending and pending[0][0] <= i:
            _decide(k, pending.pop(0))
        k.forward(i)
    for check in pending:
        _decide(k, check)
    return [FLAG] if inner else []


def _decide(k: Any, check: tuple) -> None:
    at, fn, args, kwargs, result, site = check
    rec: Any = Decision(fn, site)
    if kwargs:
        raise Ineligible(f"a decision with keywords ({qualname(fn)}): NumPy back end only", site)
    ops = [k.operand(a, p, rec) for a, p in zip(args, _ir.operand_ids(k.b.tape, args, at))]
    bool_compare = _BOOL_COMPARE.get((getattr(fn, "__module__", None), getattr(fn, "__name__", None)))
    if fn in _COMPARE and len(ops) == 2:
        expr = f"{ops[0]} {_COMPARE[fn]} {ops[1]}"
    elif bool_compare is not None and len(ops) == 2 and not any(type(a) is _ndarray for a in args):
        expr = f"{ops[0]} {bool_compare} {ops[1]}"  # (on numbers: a bool already)
    elif (fn is bool or fn is operator.truth) and len(ops) == 1 and type(args[0]) is not _ndarray:
        expr = f"bool({ops[0]})"
    elif fn is operator.not_ and len(ops) == 1 and type(args[0]) is not _ndarray:
        expr = f"not {ops[0]}"
    elif fn in DECIDE_FNS:
        expr = f"{k.names.const(fn, 'f')}({', '.join(ops)})"
    else:
        raise Ineligible(f"a decision on data by {qualname(fn)}: the Numba back end checks comparisons, truth "
                         "tests and argmax/argmin/isnan/isfinite/isinf/signbit (NumPy back end)", site)
    var = f"dk{len(k.lines)}"
    k.lines.append(f"{var} = {expr}")
    t = type(result)
    if t is bool or t is np.bool_:
        cond = f"{var} != {bool(result)!r}"
    elif t is int or isinstance(result, np.integer):
        cond = f"{var} != {int(result)!r}"
    elif t is _ndarray and result.dtype == np.bool_:
        cond = _mask(k, check, var)
    else:
        raise Ineligible(f"a decision giving {short(result)} ({qualname(fn)}): the Numba back end checks bools, "
                         "ints and masks (NumPy back end)", site)
    if OMIT_CHECKS:  # (tests only: proves the check is needed)
        return
    k.lines.append(f"{FLAG} = {FLAG} | ({cond})")
    k.b.src.guards.append(Guard(DECISION_GUARD, cond, f"line {site.lineno}: {qualname(fn)} gives {short(result)}"))


def _mask(k: Any, check: tuple, var: str) -> str:
    """The check of a mask the kernel computed into `var`: every element as at capture; the records
    that read the mask (the array the capture holds, `CaptureTape.live`) read `var`."""
    result, site = check[4], check[5]
    tape = k.b.tape
    n = next(j for j, c in enumerate(tape.checks) if c is check)
    live = getattr(tape, "live", {}).get(n)
    if live is not None and (n in getattr(tape, "decided", {}).values() or id(live) in getattr(tape, "escaped", ())):
        raise Ineligible("a mask used as an index: NumPy back end only", site)
    for a in (result, live):
        if a is not None:
            k.b.inputs.untracked[id(a)] = var  # (`_Kernel.operand`: a kernel variable, not a parameter)
    k.array[var] = result.shape
    return f"np.any({var} != {k.names.const(result, 'k')})"
