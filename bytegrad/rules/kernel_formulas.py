"""Scalar formulas of elementwise functions, as the source a fused kernel inlines.

Each entry restates a `scalar_rule` of `numpy/ufuncs.py` or `builtins.py` for one scalar: the value
and one partial per argument, as Python expression templates over `{0}`, `{1}` (the arguments) and
`{out}` (the value). The fused kernels of `runtime/kernels.py` are generated from these; the rules
themselves stay the NumPy twins the kernels are tested against (tests/runtime/test_kernels.py).
Templates may call `math.*` and the helpers in `HELPERS` (defined in every generated module).

Only functions whose scalar semantics in a compiled loop match NumPy's (NaN, inf, signed zeros,
the derivative conventions at kinks and ties) are listed; anything else is not fused.
"""
from __future__ import annotations

import operator
from typing import Any, NamedTuple

import numpy as np


class Formula(NamedTuple):
    value: str
    partials: tuple[str, ...]


FORMULAS: dict[Any, Formula] = {}


def _def(fns: tuple[Any, ...], value: str, *partials: str) -> None:
    for fn in fns:
        FORMULAS[fn] = Formula(value, partials)


# Arithmetic (operators and their NumPy spellings). `**` is fused only with a constant exponent
# (see `power_formula`): the exponent's partial needs log(x), with NumPy's conventions at x <= 0.
_def((operator.add, np.add), "({0} + {1})", "1.0", "1.0")
_def((operator.sub, np.subtract), "({0} - {1})", "1.0", "-1.0")
_def((operator.mul, np.multiply), "({0} * {1})", "{1}", "{0}")
_def((operator.truediv, np.divide), "({0} / {1})", "(1.0 / {1})", "(-{out} / {1})")
_def((operator.neg, np.negative), "(-{0})", "-1.0")
_def((np.square,), "({0} * {0})", "(2.0 * {0})")

# Transcendental functions; derivatives in terms of `out` where the rule has them so, so a kernel
# whose backward needs only the output keeps only the output (tanh, exp, sqrt).
_def((np.sin,), "math.sin({0})", "math.cos({0})")
_def((np.cos,), "math.cos({0})", "(-math.sin({0}))")
_def((np.tan,), "math.tan({0})", "(1.0 + {out} * {out})")
_def((np.tanh,), "math.tanh({0})", "(1.0 - {out} * {out})")
_def((np.sinh,), "math.sinh({0})", "math.cosh({0})")
_def((np.cosh,), "math.cosh({0})", "math.sinh({0})")
_def((np.arctan,), "math.atan({0})", "(1.0 / (1.0 + {0} * {0}))")
_def((np.exp,), "math.exp({0})", "{out}")
_def((np.expm1,), "math.expm1({0})", "({out} + 1.0)")
_def((np.log,), "_log({0})", "(1.0 / {0})")
_def((np.log1p,), "_log1p({0})", "(1.0 / (1.0 + {0}))")
_def((np.sqrt,), "_sqrt({0})", "(0.5 / {out})")
_def((np.absolute,), "abs({0})", "_sign({0})")

# maximum/minimum split the cotangent evenly on ties and propagate NaN, as the rules do.
_def((np.maximum,), "_maximum({0}, {1})", "_pick({0}, {1})", "_pick({1}, {0})")
_def((np.minimum,), "_minimum({0}, {1})", "_pick({1}, {0})", "_pick({0}, {1})")

#: Helper functions every generated kernel module defines (compiled inline by Numba). The
#: domain-checked functions return inf/NaN as NumPy does instead of raising. Division needs no
#: helper: in a ufunc or gufunc body Numba divides as IEEE 754 (and NumPy) does, x / 0 -> +-inf or
#: NaN (tests/runtime/test_kernels.py checks NaN and inf against the NumPy twin).
HELPERS = '''
@njit(inline="always")
def _log(a):
    if a > 0:
        return math.log(a)
    if a == 0:
        return -_inf
    return a - a + _nan


@njit(inline="always")
def _log1p(a):
    if a > -1:
        return math.log1p(a)
    if a == -1:
        return -_inf
    return a - a + _nan


@njit(inline="always")
def _sqrt(a):
    if a >= 0:
        return math.sqrt(a)
    return a - a + _nan


@njit(inline="always")
def _sign(a):
    if a > 0:
        return 1.0
    if a < 0:
        return -1.0
    return a * 0.0


@njit(inline="always")
def _maximum(a, b):
    if a != a or a >= b:
        return a
    return b


@njit(inline="always")
def _minimum(a, b):
    if a != a or a <= b:
        return a
    return b


@njit(inline="always")
def _pick(a, b):
    if a > b:
        return 1.0
    if a == b:
        return 0.5
    return 0.0


@njit(inline="always")
def _pow(a, c):
    return a ** c
'''


def power_formula(exponent: float) -> Formula:
    """`x ** c` for a constant c, with d/dx = c * x**(c-1) (0 where c == 0, as the rule)."""
    c = float(exponent)
    if c == 2.0:
        return Formula("({0} * {0})", ("(2.0 * {0})",))
    if c == 1.0:
        return Formula("({0} + 0.0)", ("1.0",))
    if c == 0.0:
        return Formula("({0} * 0.0 + 1.0)", ("0.0",))
    if c == 3.0:
        return Formula("({0} * {0} * {0})", ("(3.0 * {0} * {0})",))
    if c == -1.0:
        return Formula("(1.0 / {0})", ("(-({out} * {out}))",))
    if c == 0.5:
        return Formula("_sqrt({0})", ("(0.5 / {out})",))
    return Formula(f"_pow({{0}}, {c!r})", (f"({c!r} * _pow({{0}}, {c - 1.0!r}))",))



def fusable(fn: Any) -> bool:
    """Whether `fn` may appear in a fused kernel."""
    try:
        return fn in FORMULAS or fn is operator.pow
    except TypeError:  # unhashable
        return False
