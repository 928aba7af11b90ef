"""Reductions along one axis in a Numba kernel: `x.max(axis=1, keepdims=True)`, `np.sum(x, axis=0)`,
`x.min(axis=-1)` (a softmax's max and sum), as compiled/numba_kernel.py's `local_form` writes them.

Numba takes neither `keepdims` nor, for max and min, `axis`; each form here views its float array as
(before, along, after), contiguous, reduces the middle axis with a loop (`_SOURCES`), and reshapes to
the output's shape. The cotangents are the general path's (bytegrad/rules/numpy/reductions.py): a
sum's is the output's cotangent spread along the axis; a max's or min's is `mask * share`, where
`mask` marks the elements equal to their row's extreme and `share` is the row's cotangent over how
many they are (a tie splits it evenly; a row without a match, a NaN one, gets 0 * share), in the
array's dtype. A max or min is exact; a sum adds in its own order (NumPy's is pairwise), as other
kernel sums do (the tier's check against the general path allows for it).
"""
from __future__ import annotations

import hashlib
import math
from typing import Any, Optional

import numpy as np

from bytegrad.runtime import kernels

__all__ = ["helper", "reduce_form", "HELPERS"]

_SOURCES = {
    # NumPy's order: along a contiguous axis (post == 1) the pairwise sum (numpy's `pairwise_sum`:
    # 8 accumulators, blocks of up to 128, halves above); along another axis, one row after another
    "axis_sum": """
def axis_sum(x):
    pre, n, post = x.shape
    out = np.empty((pre, post), x.dtype)
    zero = np.zeros(1, x.dtype)[0]
    for i in range(pre):
        if post == 1:
            out[i, 0] = pairwise(x[i, :, 0], 0, n, zero)
            continue
        for k in range(post):
            out[i, k] = x[i, 0, k]
        for j in range(1, n):
            for k in range(post):
                out[i, k] += x[i, j, k]
    return out
""",
    "axis_max": """
def axis_max(x):
    pre, n, post = x.shape
    out = np.empty((pre, post), x.dtype)
    for i in range(pre):
        for k in range(post):
            m = x[i, 0, k]
            for j in range(1, n):
                v = x[i, j, k]
                if m != m:
                    break
                if v > m or v != v:
                    m = v
            out[i, k] = m
    return out
""",
    "axis_spread": """
def axis_spread(g, n):
    pre, post = g.shape
    out = np.empty((pre, n, post), g.dtype)
    for i in range(pre):
        for j in range(n):
            for k in range(post):
                out[i, j, k] = g[i, k]
    return out
""",
    # the extreme's cotangent: `mask * share` of reductions.py's extreme_pullback, row by row
    "axis_extreme_bar": """
def axis_extreme_bar(x, m, g):
    pre, n, post = x.shape
    out = np.empty(x.shape, x.dtype)
    for i in range(pre):
        for k in range(post):
            c = 0
            for j in range(n):
                if x[i, j, k] == m[i, k]:
                    c += 1
            share = g[i, k] / max(c, 1)
            for j in range(n):
                out[i, j, k] = (1.0 if x[i, j, k] == m[i, k] else 0.0) * share
    return out
""",
}
_SOURCES["axis_min"] = _SOURCES["axis_max"].replace("axis_max", "axis_min").replace("v > m", "v < m")
#: numpy's pairwise_sum of a[lo:lo + n] (`zero` in the array's dtype): a block of up to 128 with 8
#: accumulators (`block`), above that the sum of two halves (cut at a multiple of 8), its recursion
#: run with a stack (a recursive function cannot be cached)
_PAIRWISE = """
@njit(error_model="numpy", cache=_CACHE)
def block(a, lo, n, zero):
    if n < 8:
        res = zero
        for j in range(lo, lo + n):
            res += a[j]
        return res
    r0, r1, r2, r3 = a[lo], a[lo + 1], a[lo + 2], a[lo + 3]
    r4, r5, r6, r7 = a[lo + 4], a[lo + 5], a[lo + 6], a[lo + 7]
    j = 8
    while j < n - n % 8:
        b = lo + j
        r0 += a[b]
        r1 += a[b + 1]
        r2 += a[b + 2]
        r3 += a[b + 3]
        r4 += a[b + 4]
        r5 += a[b + 5]
        r6 += a[b + 6]
        r7 += a[b + 7]
        j += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while j < n:
        res += a[lo + j]
        j += 1
    return res


@njit(error_model="numpy", cache=_CACHE)
def pairwise(a, lo, n, zero):
    if n <= 128:
        return block(a, lo, n, zero)
    los = np.empty(64, np.int64)
    ns = np.empty(64, np.int64)
    stage = np.zeros(64, np.int64)
    left = np.empty(64, a.dtype)
    ret = zero
    sp = 0
    los[0], ns[0] = lo, n
    while sp >= 0:
        m = ns[sp]
        if m <= 128:
            ret = block(a, los[sp], m, zero)
            sp -= 1
            continue
        n2 = m // 2
        n2 -= n2 % 8
        if stage[sp] == 0:  # its left half first
            stage[sp] = 1
            los[sp + 1], ns[sp + 1], stage[sp + 1] = los[sp], n2, 0
            sp += 1
        elif stage[sp] == 1:  # then its right half
            left[sp] = ret
            stage[sp] = 2
            los[sp + 1], ns[sp + 1], stage[sp + 1] = los[sp] + n2, m - n2, 0
            sp += 1
        else:
            ret = left[sp] + ret
            sp -= 1
    return ret
"""
HELPERS = frozenset(_SOURCES)
#: the loops' version, in the text of a kernel that calls them (compiled/numba_kernel.py)
VERSION = hashlib.sha256("".join(_SOURCES.values()).encode() + _PAIRWISE.encode()).hexdigest()[:16]
_helpers: dict[str, Any] = {}
_FLOATS = (np.dtype(np.float64), np.dtype(np.float32))
#: the reductions taken, by function: the name of the loop, and the order of its positional options
_REDUCTIONS = {id(np.sum): ("axis_sum", ("axis", "dtype")), id(np.ndarray.sum): ("axis_sum", ("axis", "dtype")),
               id(np.max): ("axis_max", ("axis",)), id(np.ndarray.max): ("axis_max", ("axis",)),
               id(np.min): ("axis_min", ("axis",)), id(np.ndarray.min): ("axis_min", ("axis",))}


def helper(name: str) -> Any:
    """The `njit` loop `name` of `_SOURCES` (compiled once, cached on disk), or None without Numba."""
    fn = _helpers.get(name)
    if fn is None:
        fn = kernels.jit_program(_SOURCES[name], {"np": np}, name, constants=_PAIRWISE if name == "axis_sum" else "")
        if fn is not None:
            _helpers[name] = fn
    return fn


def _options(rec: Any, order: tuple) -> Optional[tuple[Optional[int], bool]]:
    """(axis, keepdims) of the record's call, or None for any other option (out, where, initial, a
    dtype, a tuple of axes)."""
    given = dict(zip(order, rec.args[1:]))
    if len(rec.args) - 1 > len(order):
        return None
    for key, v in (rec.kwargs or {}).items():
        if key in given or key not in ("axis", "keepdims", "dtype"):
            return None
        given[key] = v
    if given.get("dtype") is not None:
        return None
    axis, keepdims = given.get("axis"), given.get("keepdims", False)
    if not (axis is None or type(axis) is int) or type(keepdims) is not bool:
        return None
    return axis, keepdims


def reduce_form(rec: Any, names: Any) -> Optional[tuple[str, tuple]]:
    """The forward and cotangent templates of a `LocalForm` (compiled/numba_kernel.py) for a sum, max
    or min of a float array along one axis (or all of them with keepdims), or None."""
    spec = _REDUCTIONS.get(id(rec.fn))
    if spec is None or not rec.trusted or rec.nested or not rec.args:
        return None
    x = rec.args[0]
    opts = _options(rec, spec[1])
    if opts is None or type(x) is not np.ndarray or x.dtype not in _FLOATS or x.ndim == 0 or x.size == 0:
        return None
    axis, keepdims = opts
    if axis is None and not keepdims:
        return None  # (a full sum is the rule's own form; a full max gives a scalar: NumPy back end)
    if axis is not None and not -x.ndim <= axis < x.ndim:
        return None
    out = rec.out
    if type(out) is not np.ndarray or out.dtype != x.dtype:
        return None
    if axis is None:
        pre, n, post = 1, x.size, 1
    else:
        axis %= x.ndim
        pre, n, post = math.prod(x.shape[:axis]), x.shape[axis], math.prod(x.shape[axis + 1:])
    fns = {k: helper(k) for k in (spec[0], "axis_spread", "axis_extreme_bar")}
    if any(f is None for f in fns.values()):
        return None
    red, spread, bar = (names.const(fns[k], "rd") for k in (spec[0], "axis_spread", "axis_extreme_bar"))
    x3 = f"np.ascontiguousarray({{0}}).reshape({(pre, n, post)!r})"
    g2 = f"np.ascontiguousarray({{g}}).reshape({(pre, post)!r})"
    forward = f"{red}({x3}).reshape({out.shape!r})"
    if spec[0] == "axis_sum":
        x_bar = f"{spread}({g2}, {n}).reshape({{shape0}})"
    else:  # (the extreme again, from x: the same loop, the same values)
        x_bar = f"{bar}({x3}, {red}({x3}), {g2}).reshape({{shape0}})"
    return forward, (x_bar,) + (None,) * (len(rec.args) - 1)

