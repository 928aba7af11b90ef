"""The prelude of every generated kernel module: the helpers a kernel formula (`registry.Formula`,
written beside its scalar rule) may call besides `math.*`. runtime/kernels.py compiles it with Numba."""
from __future__ import annotations

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
