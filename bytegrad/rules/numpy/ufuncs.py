"""Elementwise NumPy functions as `scalar_rule` tables: partial derivatives in terms of the inputs and `out`.

Partials receive `(*positional_args, out)`; a constant partial is a number. Signs, rounding and
comparisons are in `nondiff.py`.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from bytegrad.rules._project import project, stand_in
from bytegrad.rules.registry import (
    NO_TANGENT, ZERO, Formula, differentiate_through, frule, kernel, rrule, scalar_rule,
)

_LN2 = float(np.log(2.0))
_LN10 = float(np.log(10.0))


def _is_py_scalar(x: Any) -> bool:
    return type(x) is float or type(x) is int


def _errstate() -> Any:
    # Partials at the edge of a domain (x == 0 for sqrt) are meant to be +-inf, as NumPy gives them.
    return np.errstate(divide="ignore", invalid="ignore", over="ignore")


# ---- power: care at x == 0 and for the exponent's partial where x <= 0 ----------------------------

def power_dx(x: Any, y: Any, out: Any) -> Any:
    """d(x**y)/dx = y * x**(y-1), and 0 where y == 0 (not 0 * inf at x == 0)."""
    if _is_py_scalar(y):
        if y == 2:
            return 2 * x
        if y == 1:
            return 1.0 if _is_py_scalar(x) else np.ones_like(out)
        if y == 0:
            return 0.0 if _is_py_scalar(x) else np.zeros_like(out)
        if _is_py_scalar(x):
            if x == 0:  # Python raises where NumPy gives inf: y * 0**(y-1) is +-inf for y < 1
                return 0.0 if y > 1 else math.copysign(math.inf, y)
            return y * x ** (y - 1)
    with _errstate():
        return np.where(np.equal(y, 0), 0, y * np.power(x, y - 1))


def power_dy(x: Any, y: Any, out: Any) -> Any:
    """d(x**y)/dy = out * log(x) where x > 0; 0 elsewhere (0**y is flat in y for y > 0)."""
    if _is_py_scalar(x):  # math.log keeps a Python float weak: float32 y gives a float32 partial
        if x > 0:
            return out * math.log(x)
        return 0.0 if _is_py_scalar(y) else np.zeros_like(out)
    positive = np.greater(x, 0)
    with _errstate():
        return np.where(positive, out * np.log(np.where(positive, x, 1)), 0)


def power_kernel(exponent: float) -> Formula:
    """The kernel formula of `x ** c` for a constant c (fused only so: the exponent's partial would
    need log(x), with NumPy's conventions at x <= 0): d/dx = c * x**(c-1), 0 where c == 0, as
    `power_dx`."""
    c = float(exponent)
    if c == 2.0:
        return kernel("({0} * {0})", "(2.0 * {0})")
    if c == 1.0:
        return kernel("({0} + 0.0)", "1.0")
    if c == 0.0:
        return kernel("({0} * 0.0 + 1.0)", "0.0")
    if c == 3.0:
        return kernel("({0} * {0} * {0})", "(3.0 * {0} * {0})")
    if c == -1.0:
        return kernel("(1.0 / {0})", "(-({out} * {out}))")
    if c == 0.5:
        return kernel("_sqrt({0})", "(0.5 / {out})")
    return kernel(f"_pow({{0}}, {c!r})", f"({c!r} * _pow({{0}}, {c - 1.0!r}))")


def float_power_dx(x: Any, y: Any, out: Any) -> Any:
    with _errstate():
        return np.where(np.equal(y, 0), 0.0, y * np.float_power(x, y - 1))


# ---- helpers for partials that pick one input ----------------------------------------------------

def _pick(condition: Any, tie: Any, out: Any) -> Any:
    """1 where `condition`, 0.5 where `tie`, 0 elsewhere, in the output's float dtype."""
    dtype = np.result_type(out) if np.result_type(out).kind == "f" else np.dtype(np.float64)
    return np.where(tie, dtype.type(0.5), np.asarray(condition, dtype=dtype))


# maximum/minimum: ties split the cotangent 0.5/0.5 between the two inputs (as the max/min
# reductions split it evenly among tied elements), so the rule is symmetric in its arguments.
def _max_dx(x: Any, y: Any, out: Any) -> Any:
    return _pick(np.greater(x, y), np.equal(x, y), out)


def _max_dy(x: Any, y: Any, out: Any) -> Any:
    return _pick(np.less(x, y), np.equal(x, y), out)


# fmax/fmin ignore a NaN input: the other one gets the whole cotangent.
def _fmax_dx(x: Any, y: Any, out: Any) -> Any:
    return _pick(np.greater(x, y) | np.isnan(y), np.equal(x, y), out)


def _fmax_dy(x: Any, y: Any, out: Any) -> Any:
    return _pick(np.less(x, y) | np.isnan(x), np.equal(x, y), out)


def _fmin_dx(x: Any, y: Any, out: Any) -> Any:
    return _pick(np.less(x, y) | np.isnan(y), np.equal(x, y), out)


def _fmin_dy(x: Any, y: Any, out: Any) -> Any:
    return _pick(np.greater(x, y) | np.isnan(x), np.equal(x, y), out)


# clip(x, a_min, a_max): x passes where it was not clipped. Written with `*rest` so that a call
# with a_min/a_max as keywords (no positional bounds) still works; a bound of None gets 0.
def _clip_dx(x: Any, *rest: Any) -> Any:
    return np.equal(rest[-1], x)


def _clip_dmin(x: Any, a_min: Any, a_max: Any, out: Any) -> Any:
    return 0 if a_min is None else np.equal(out, a_min) & np.less(x, a_min)


def _clip_dmax(x: Any, a_min: Any, a_max: Any, out: Any) -> Any:
    return 0 if a_max is None else np.equal(out, a_max) & np.greater(x, a_max)


def _where_dx(condition: Any, x: Any, y: Any, out: Any) -> Any:
    return np.asarray(condition, dtype=bool)


def _where_dy(condition: Any, x: Any, y: Any, out: Any) -> Any:
    return np.logical_not(condition)


def select_as_where(condlist: Any, choicelist: Any, default: Any = 0) -> Any:
    """np.select as a chain of np.where, the first true condition winning, so the choices it did not
    select contribute exact zeros as np.where's do (runtime/zerosafe.py). NumPy's checks are kept."""
    if len(condlist) != len(choicelist):
        raise ValueError("list of cases must be same length as list of conditions")
    if len(condlist) == 0:
        raise ValueError("select with an empty condition list is not possible")
    for i, cond in enumerate(condlist):
        if np.asarray(cond).dtype != np.bool_:
            raise TypeError(f"invalid entry {i} in condlist: should be boolean ndarray")
    out = default
    for cond, choice in zip(condlist[::-1], choicelist[::-1]):
        out = np.where(cond, choice, out)  # broadcasts every condition and choice, as np.select does
    return out


def _sinc_dx(x: Any, out: Any) -> Any:
    zero = np.equal(x, 0)  # sinc is flat at 0
    with _errstate():
        return np.where(zero, 0, (np.cos(np.pi * x) - out) / np.where(zero, 1, x))


def _copysign_dx(x: Any, y: Any, out: Any) -> Any:
    return np.copysign(1, x) * np.copysign(1, y)


# ---- the table -------------------------------------------------------------------------------------
# A `kernel` is the rule for one scalar, as the source a fused kernel inlines (registry.Formula);
# in terms of `out` where the partial is, so a kernel whose backward needs only the output keeps
# only the output (tanh, exp, sqrt). maximum/minimum split ties evenly and propagate NaN, as here.

#: the arithmetic kernels, shared with the operators' rules (rules/builtins.py)
ADD_KERNEL = kernel("({0} + {1})", "1.0", "1.0")
SUB_KERNEL = kernel("({0} - {1})", "1.0", "-1.0")
MUL_KERNEL = kernel("({0} * {1})", "{1}", "{0}")
DIV_KERNEL = kernel("({0} / {1})", "(1.0 / {1})", "(-{out} / {1})")
NEG_KERNEL = kernel("(-{0})", "-1.0")


scalar_rule(np.sin, lambda x, out: np.cos(x), kernel=kernel("math.sin({0})", "math.cos({0})"))
scalar_rule(np.cos, lambda x, out: -np.sin(x), kernel=kernel("math.cos({0})", "(-math.sin({0}))"))
scalar_rule(np.tan, lambda x, out: 1 + out**2, kernel=kernel("math.tan({0})", "(1.0 + {out} * {out})"))
scalar_rule(np.arcsin, lambda x, out: 1 / np.sqrt(1 - x**2))   # +-inf at |x| == 1
scalar_rule(np.arccos, lambda x, out: -1 / np.sqrt(1 - x**2))
scalar_rule(np.arctan, lambda x, out: 1 / (1 + x**2), kernel=kernel("math.atan({0})", "(1.0 / (1.0 + {0} * {0}))"))
scalar_rule(np.sinh, lambda x, out: np.cosh(x), kernel=kernel("math.sinh({0})", "math.cosh({0})"))
scalar_rule(np.cosh, lambda x, out: np.sinh(x), kernel=kernel("math.cosh({0})", "math.sinh({0})"))
scalar_rule(np.tanh, lambda x, out: 1 - out**2, kernel=kernel("math.tanh({0})", "(1.0 - {out} * {out})"))
scalar_rule(np.arcsinh, lambda x, out: 1 / np.sqrt(x**2 + 1))
scalar_rule(np.arccosh, lambda x, out: 1 / np.sqrt(x**2 - 1))
scalar_rule(np.arctanh, lambda x, out: 1 / (1 - x**2))
scalar_rule(np.arctan2, lambda y, x, out: x / (x**2 + y**2), lambda y, x, out: -y / (x**2 + y**2))
scalar_rule(np.hypot, lambda x, y, out: x / out, lambda x, y, out: y / out)
scalar_rule(np.deg2rad, np.pi / 180)
scalar_rule(np.rad2deg, 180 / np.pi)
scalar_rule(np.radians, np.pi / 180)
scalar_rule(np.degrees, 180 / np.pi)
scalar_rule(np.sinc, _sinc_dx)

scalar_rule(np.exp, lambda x, out: out, kernel=kernel("math.exp({0})", "{out}"))
scalar_rule(np.exp2, lambda x, out: out * _LN2)
scalar_rule(np.expm1, lambda x, out: out + 1, kernel=kernel("math.expm1({0})", "({out} + 1.0)"))
scalar_rule(np.log, lambda x, out: 1 / x, kernel=kernel("_log({0})", "(1.0 / {0})"))
scalar_rule(np.log2, lambda x, out: 1 / (x * _LN2))
scalar_rule(np.log10, lambda x, out: 1 / (x * _LN10))
scalar_rule(np.log1p, lambda x, out: 1 / (1 + x), kernel=kernel("_log1p({0})", "(1.0 / (1.0 + {0}))"))
scalar_rule(np.logaddexp, lambda x, y, out: np.exp(x - out), lambda x, y, out: np.exp(y - out))
scalar_rule(np.logaddexp2, lambda x, y, out: np.exp2(x - out), lambda x, y, out: np.exp2(y - out))
scalar_rule(np.sqrt, lambda x, out: 0.5 / out, kernel=kernel("_sqrt({0})", "(0.5 / {out})"))  # +inf at x == 0, as NumPy
scalar_rule(np.cbrt, lambda x, out: 1 / (3 * out**2))
scalar_rule(np.square, lambda x, out: 2 * x, kernel=kernel("({0} * {0})", "(2.0 * {0})"))
scalar_rule(np.reciprocal, lambda x, out: -(out**2))
scalar_rule(np.power, power_dx, power_dy)
scalar_rule(np.float_power, float_power_dx, power_dy)

scalar_rule(np.absolute, lambda x, out: abs_partial(x, out), kernel=kernel("abs({0})", "_sign({0})"))  # 0 at the kink
scalar_rule(np.fabs, lambda x, out: np.sign(x))
scalar_rule(np.copysign, _copysign_dx, 0)
scalar_rule(np.negative, -1, kernel=NEG_KERNEL)
scalar_rule(np.positive, 1)
scalar_rule(np.add, 1, 1, kernel=ADD_KERNEL)
scalar_rule(np.subtract, 1, -1, kernel=SUB_KERNEL)
scalar_rule(np.multiply, lambda x, y, out: y, lambda x, y, out: x, kernel=MUL_KERNEL)
scalar_rule(np.divide, lambda x, y, out: 1 / y, lambda x, y, out: -out / y, kernel=DIV_KERNEL)
scalar_rule(np.mod, 1, lambda x, y, out: -np.floor_divide(x, y))
scalar_rule(np.fmod, 1, lambda x, y, out: -np.trunc(x / y))
scalar_rule(np.ldexp, lambda x, i, out: np.ldexp(np.ones_like(out), i), None)

scalar_rule(np.maximum, _max_dx, _max_dy, kernel=kernel("_maximum({0}, {1})", "_pick({0}, {1})", "_pick({1}, {0})"))
scalar_rule(np.minimum, _max_dy, _max_dx, kernel=kernel("_minimum({0}, {1})", "_pick({1}, {0})", "_pick({0}, {1})"))
scalar_rule(np.fmax, _fmax_dx, _fmax_dy)
scalar_rule(np.fmin, _fmin_dx, _fmin_dy)
scalar_rule(np.clip, _clip_dx, _clip_dmin, _clip_dmax)
scalar_rule(np.ndarray.clip, _clip_dx, _clip_dmin, _clip_dmax)   # x.clip(min, max)
scalar_rule(np.where, None, _where_dx, _where_dy)
differentiate_through(np.select, select_as_where)


# ---- complex-aware rules (the convention: docs/plugins.md, "Complex numbers") -------------------------

def abs_partial(x: Any, out: Any = None) -> Any:
    """d|z| pairs with dz as Re(conj(z)/|z| * dz): conj(z) / |z| (0 at z == 0); sign(x) for real x.

    Written as conj(z) / |z|, not conj(sign(z)): a nested derivative differentiates it again, and
    np.sign has no derivative (a real sign's is 0 away from the kink, a complex one's is not)."""
    if not np.iscomplexobj(x):
        return np.sign(x)
    out = np.absolute(x) if out is None else out
    safe = np.where(out == 0, 1.0, out)
    # (by parts: a complex divided by a real is not exact in NumPy, 3/5 would come out 0.6000000000000001)
    return np.real(x) / safe - 1j * (np.imag(x) / safe)


@frule(np.absolute)
def absolute_frule(args_dot: tuple[Any, ...], x: Any) -> tuple[Any, Any]:
    out = np.absolute(x)
    x_dot = args_dot[0]
    if x_dot is None or x_dot is NO_TANGENT or x_dot is ZERO:
        return out, ZERO
    out_dot = abs_partial(x, out) * x_dot
    return out, (out_dot.real if np.iscomplexobj(out_dot) else out_dot)


def _sign_derivative(z: Any, dz: Any) -> Any:
    """d(z / |z|) = dz / |z| - z Re(conj(z) dz) / |z|^3, 0 at z == 0 (a subgradient)."""
    r = np.abs(z)
    safe = np.where(r == 0, 1.0, r)
    return np.where(r == 0, 0, dz / safe - z * np.real(np.conj(z) * dz) / safe**3)


@rrule(np.sign)
def sign_rrule(x: Any, *args: Any, **kwargs: Any) -> tuple[Any, Callable[..., tuple[Any, ...]]]:
    """Piecewise constant for real input (zero cotangent); z / |z| for complex input (NumPy 2)."""
    out = np.sign(x, *args, **kwargs)
    moving = np.iscomplexobj(x)
    like = stand_in(x)

    def sign_pullback(out_bar: Any) -> tuple[Any, ...]:
        if not moving or out_bar is ZERO:
            return (ZERO,) + (NO_TANGENT,) * len(args)
        # <c, du> = Re((c / |z| - Re(c z) conj(z) / |z|^3) dz): the adjoint of _sign_derivative
        r = np.abs(x)
        safe = np.where(r == 0, 1.0, r)
        x_bar = np.where(r == 0, 0, out_bar / safe - np.real(out_bar * x) * np.conj(x) / safe**3)
        return (project(x_bar, like),) + (NO_TANGENT,) * len(args)

    return out, sign_pullback


@frule(np.sign)
def sign_frule(args_dot: tuple[Any, ...], x: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
    out = np.sign(x, *args, **kwargs)
    x_dot = args_dot[0]
    if not np.iscomplexobj(x) or x_dot is None or x_dot is NO_TANGENT or x_dot is ZERO:
        return out, ZERO
    return out, _sign_derivative(x, x_dot)


@rrule(np.conjugate)
def conjugate_rrule(x: Any, *args: Any, **kwargs: Any) -> tuple[Any, Callable[..., tuple[Any, ...]]]:
    out = np.conjugate(x, *args, **kwargs)

    def conjugate_pullback(out_bar: Any) -> tuple[Any, ...]:
        return (np.conjugate(out_bar),) + (NO_TANGENT,) * len(args)

    return out, conjugate_pullback


@rrule(np.ndarray.conj)
@rrule(np.ndarray.conjugate)
def conj_method_rrule(x: Any) -> tuple[Any, Callable[..., tuple[Any, ...]]]:
    """`x.conj()`: a real array's is the array itself (a fresh view of it here, so that it is a
    new value on the tape and writes through it still reach x, as in NumPy)."""
    out = x.conj()
    if out is x:
        out = x.view()

    def conj_method_pullback(out_bar: Any) -> tuple[Any, ...]:
        return (np.conjugate(out_bar),)

    return out, conj_method_pullback


@frule(np.ndarray.conj)
@frule(np.ndarray.conjugate)
def conj_method_frule(args_dot: tuple[Any, ...], x: Any) -> tuple[Any, Any]:
    out, _ = conj_method_rrule(x)
    x_dot = args_dot[0]
    return out, (ZERO if x_dot is None or x_dot is NO_TANGENT or x_dot is ZERO else np.conjugate(x_dot))


@frule(np.conjugate)
def conjugate_frule(args_dot: tuple[Any, ...], x: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
    x_dot = args_dot[0]
    out = np.conjugate(x, *args, **kwargs)
    return out, (ZERO if x_dot is None or x_dot is NO_TANGENT or x_dot is ZERO else np.conjugate(x_dot))
