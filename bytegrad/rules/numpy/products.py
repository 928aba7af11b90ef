"""More products: tensordot, kron, cross, `np.linalg` multi_dot and matrix_power, and NumPy 2's vecdot
(`np` and `np.linalg`), matvec, vecmat and `np.linalg.outer`.

(matmul, dot, outer, inner, vdot, trace and einsum are in `linalg.py`.) Cotangents of the two-operand
products are thunks, computed only for the operands being differentiated.
"""
from __future__ import annotations

import operator
from typing import Any, Callable

import numpy as np
from numpy.lib.array_utils import normalize_axis_index

from bytegrad.errors import RuleCaseError
from bytegrad.rules._project import project, stand_in
from bytegrad.rules._shape import unbroadcast
from bytegrad.rules._tangents import bilinear_frule
from bytegrad.rules.registry import NO_TANGENT, ZERO, frule, rrule


def _mT(m: np.ndarray) -> np.ndarray:
    return np.swapaxes(m, -1, -2)


def _no_out(name: str, kwargs: dict[str, Any]) -> None:
    if kwargs.get("out") is not None:
        raise TypeError(f"numpy.{name}(..., out=...) cannot be differentiated; assign the result instead.")


# ---- tensordot --------------------------------------------------------------------------------------

def _tensordot_axes(axes: Any, na: int, nb: int) -> tuple[list[int], list[int]]:
    """The contracted axes of a and of b, paired in order, for every form of `axes`."""
    try:
        n = operator.index(axes)
    except TypeError:
        axes_a, axes_b = axes
        axes_a = [axes_a] if np.ndim(axes_a) == 0 else list(axes_a)
        axes_b = [axes_b] if np.ndim(axes_b) == 0 else list(axes_b)
        return ([normalize_axis_index(operator.index(i), na) for i in axes_a],
                [normalize_axis_index(operator.index(i), nb) for i in axes_b])
    return list(range(na - n, na)), list(range(n))


@rrule(np.tensordot)
def tensordot_rrule(a: Any, b: Any, *args: Any, **kwargs: Any) -> tuple[Any, Callable[..., Any]]:
    out = np.tensordot(a, b, *args, **kwargs)
    na, nb = np.ndim(a), np.ndim(b)
    axes_a, axes_b = _tensordot_axes(kwargs.get("axes", args[0] if args else 2), na, nb)
    free_a = [i for i in range(na) if i not in axes_a]
    free_b = [i for i in range(nb) if i not in axes_b]
    out_a = list(range(len(free_a)))                       # out's axes: a's free axes, then b's
    out_b = list(range(len(free_a), len(free_a) + len(free_b)))

    def tensordot_pullback(out_bar: Any) -> tuple[Any, ...]:
        # a and b made arrays here, not in the forward pass, where a nested derivative would see a
        # scalar or list operand's array as a constant (see matmul_pullback)
        def a_bar() -> Any:
            # tensordot(out_bar, b) has a's free axes, then b's contracted axes in b's order.
            g = np.tensordot(out_bar, np.asarray(b), axes=(out_b, free_b))
            labels = free_a + [axes_a[axes_b.index(j)] for j in sorted(axes_b)]
            return project(np.transpose(g, np.argsort(labels)), a)

        def b_bar() -> Any:
            g = np.tensordot(np.asarray(a), out_bar, axes=(free_a, out_a))
            labels = [axes_b[axes_a.index(i)] for i in sorted(axes_a)] + free_b
            return project(np.transpose(g, np.argsort(labels)), b)

        return (a_bar, b_bar) + (NO_TANGENT,) * len(args)

    return out, tensordot_pullback


# ---- kron -------------------------------------------------------------------------------------------

@rrule(np.kron)
def kron_rrule(a: Any, b: Any) -> tuple[Any, Callable[..., Any]]:
    out = np.kron(a, b)
    shape_a, shape_b = np.shape(a), np.shape(b)
    d = max(len(shape_a), len(shape_b))
    sa = (1,) * (d - len(shape_a)) + shape_a
    sb = (1,) * (d - len(shape_b)) + shape_b

    def kron_pullback(out_bar: Any) -> tuple[Any, Any]:
        # out[i*q + k] = a[i] b[k] on each axis: split every axis of out_bar into (a's, b's). The
        # operands are reshaped here, where a nested derivative records it (see matmul_pullback).
        g = np.reshape(out_bar, tuple(n for pair in zip(sa, sb) for n in pair))
        even, odd = tuple(range(0, 2 * d, 2)), tuple(range(1, 2 * d, 2))

        def a_bar() -> Any:
            bb = np.reshape(b, tuple(n for s in sb for n in (1, s)))
            return project(np.sum(g * bb, axis=odd).reshape(shape_a), a)

        def b_bar() -> Any:
            aa = np.reshape(a, tuple(n for s in sa for n in (s, 1)))
            return project(np.sum(g * aa, axis=even).reshape(shape_b), b)

        return a_bar, b_bar

    return out, kron_pullback


# ---- cross ------------------------------------------------------------------------------------------

def _as_3(V: Any) -> Any:
    """Vectors (last axis) of 2 components as 3 whose third is 0, which is how NumPy's cross reads them."""
    return V if V.shape[-1] == 3 else np.concatenate((V, np.zeros_like(V[..., :1])), axis=-1)


@rrule(np.cross)
def cross_rrule(a: Any, b: Any, *args: Any, **kwargs: Any) -> tuple[Any, Callable[..., Any]]:
    """Vectors of 2 or 3 components (c = a x b gives a_bar = b x c_bar and b_bar = c_bar x a, a
    2-vector read as a 3-vector whose third is 0; the product of two 2-vectors is the third component)."""
    params = dict(zip(("axisa", "axisb", "axisc", "axis"), args), **kwargs)
    axis = params.get("axis")
    axisa, axisb, axisc = (axis, axis, axis) if axis is not None else (
        params.get("axisa", -1), params.get("axisb", -1), params.get("axisc", -1))
    A, B = np.moveaxis(np.asarray(a), axisa, -1), np.moveaxis(np.asarray(b), axisb, -1)
    na, nb = A.shape[-1], B.shape[-1]
    if na not in (2, 3) or nb not in (2, 3):
        raise RuleCaseError(f"the numpy.cross rule covers vectors of 2 or 3 components, not {na} and {nb}")
    out = np.cross(a, b, *args, **kwargs)

    def cross_pullback(out_bar: Any) -> tuple[Any, ...]:
        # A and B made again here from a and b: a nested derivative records what a pullback
        # computes, and must see them made from the arguments
        A, B = _as_3(np.moveaxis(np.asarray(a), axisa, -1)), _as_3(np.moveaxis(np.asarray(b), axisb, -1))
        if na == 2 and nb == 2:
            z_bar = np.asarray(out_bar)
            c_bar = np.stack((np.zeros_like(z_bar), np.zeros_like(z_bar), z_bar), axis=-1)
        else:
            c_bar = np.moveaxis(np.asarray(out_bar), axisc, -1)
        shape = np.broadcast_shapes(A.shape, B.shape)

        def a_bar() -> Any:
            return project(np.moveaxis(unbroadcast(np.cross(B, c_bar), A.shape, shape)[..., :na], -1, axisa), a)

        def b_bar() -> Any:
            return project(np.moveaxis(unbroadcast(np.cross(c_bar, A), B.shape, shape)[..., :nb], -1, axisb), b)

        return (a_bar, b_bar) + (NO_TANGENT,) * len(args)

    return out, cross_pullback


# ---- np.linalg.multi_dot, matrix_power ------------------------------------------------------------------

@rrule(np.linalg.multi_dot)
def multi_dot_rrule(arrays: Any, **kwargs: Any) -> tuple[Any, Callable[..., Any]]:
    _no_out("linalg.multi_dot", kwargs)
    out = np.linalg.multi_dot(arrays, **kwargs)
    likes = [stand_in(x) for x in arrays]

    def multi_dot_pullback(out_bar: Any) -> tuple[Any]:
        mats = [np.asarray(x) for x in arrays]  # made here: see cross_pullback
        if mats[0].ndim == 1:   # a first vector is a row, a last one a column
            mats[0] = mats[0][None, :]
        if mats[-1].ndim == 1:
            mats[-1] = mats[-1][:, None]
        g = np.reshape(out_bar, (mats[0].shape[0], mats[-1].shape[1]))
        lefts = [g]  # lefts[i] = (M_0 ... M_{i-1})^T g
        for m in mats[:-1]:
            lefts.append(m.T @ lefts[-1])
        bars: list[Any] = [None] * len(mats)
        right = None  # (M_{i+1} ... M_last)^T
        for i in range(len(mats) - 1, -1, -1):
            bars[i] = lefts[i] if right is None else lefts[i] @ right
            right = mats[i].T if right is None else right @ mats[i].T
        parts = [project(np.reshape(bar, np.shape(like)), like) for bar, like in zip(bars, likes)]
        return (parts if isinstance(arrays, list) else tuple(parts),)

    return out, multi_dot_pullback


@rrule(np.linalg.matrix_power)
def matrix_power_rrule(a: Any, n: Any) -> tuple[Any, Callable[..., Any]]:
    out = np.linalg.matrix_power(a, n)
    if out is a:  # n == 1 returns the input itself
        out = out.view()
    n = operator.index(n)
    xa = np.asarray(a)
    like = stand_in(a)

    def matrix_power_pullback(out_bar: Any) -> tuple[Any, Any]:
        if n == 0:
            return ZERO, NO_TANGENT
        base = xa if n > 0 else np.linalg.inv(xa)
        k = abs(n)
        bt = _mT(base)
        powers = [np.broadcast_to(np.eye(xa.shape[-1], dtype=out.dtype), base.shape)]
        for _ in range(k - 1):
            powers.append(powers[-1] @ bt)
        # d(B^k) = sum_j B^j dB B^(k-1-j)
        base_bar = sum(powers[j] @ out_bar @ powers[k - 1 - j] for j in range(k))
        a_bar = base_bar if n > 0 else -(bt @ base_bar @ bt)
        return project(a_bar, like), NO_TANGENT

    return out, matrix_power_pullback


# ---- NumPy 2's vector products: vecdot (also np.linalg's), matvec, vecmat, and np.linalg.outer ------------

def _only_axis(name: str, kwargs: dict[str, Any], allowed: tuple[str, ...]) -> None:
    _no_out(name, kwargs)
    extra = sorted(k for k in kwargs if k not in allowed + ("out",))
    if extra:
        raise RuleCaseError(f"the numpy.{name} rule does not cover the keyword arguments {extra}")


def _vecdot_rule(fn: Any, name: str) -> Callable[..., Any]:
    def vecdot_rrule(x1: Any, x2: Any, **kwargs: Any) -> tuple[Any, Callable[..., Any]]:
        """sum(conj(x1) * x2) along `axis`: x1_bar = conj(out_bar * x2), x2_bar = out_bar * conj(x1)."""
        _only_axis(name, kwargs, ("axis",))
        out = fn(x1, x2, **kwargs)
        shape = np.broadcast_shapes(np.shape(x1), np.shape(x2))
        axis = normalize_axis_index(kwargs.get("axis", -1), len(shape))

        def vecdot_pullback(out_bar: Any) -> tuple[Any, Any]:
            ob = np.expand_dims(out_bar, axis)
            x1_bar = lambda: project(unbroadcast(np.conj(ob * np.asarray(x2)), np.shape(x1), shape), x1)  # noqa: E731
            x2_bar = lambda: project(unbroadcast(ob * np.conj(x1), np.shape(x2), shape), x2)  # noqa: E731
            return x1_bar, x2_bar

        return out, vecdot_pullback

    vecdot_rrule.__name__ = vecdot_rrule.__qualname__ = f"{name.replace('.', '_')}_rrule"
    return vecdot_rrule


if hasattr(np, "vecdot"):  # NumPy >= 2.0
    rrule(np.vecdot)(_vecdot_rule(np.vecdot, "vecdot"))
    rrule(np.linalg.vecdot)(_vecdot_rule(np.linalg.vecdot, "linalg.vecdot"))

    @rrule(np.linalg.outer)
    def linalg_outer_rrule(x1: Any, x2: Any) -> tuple[Any, Callable[..., Any]]:
        out = np.linalg.outer(x1, x2)

        def linalg_outer_pullback(out_bar: Any) -> tuple[Any, Any]:
            return (lambda: project(out_bar @ np.asarray(x2), x1)), (lambda: project(np.asarray(x1) @ out_bar, x2))

        return out, linalg_outer_pullback

if hasattr(np, "matvec"):  # NumPy >= 2.2

    @rrule(np.matvec)
    def matvec_rrule(x1: Any, x2: Any, **kwargs: Any) -> tuple[Any, Callable[..., Any]]:
        """out[..., i] = sum_j x1[..., i, j] x2[..., j]."""
        _only_axis("matvec", kwargs, ())
        out = np.matvec(x1, x2)

        def matvec_pullback(out_bar: Any) -> tuple[Any, Any]:
            a, v, ob = np.asarray(x1), np.asarray(x2), np.asarray(out_bar)[..., :, None]
            a_bar = lambda: project(unbroadcast(ob * v[..., None, :], a.shape), x1)  # noqa: E731
            v_bar = lambda: project(unbroadcast(np.sum(ob * a, axis=-2), v.shape), x2)  # noqa: E731
            return a_bar, v_bar

        return out, matvec_pullback

    @rrule(np.vecmat)
    def vecmat_rrule(x1: Any, x2: Any, **kwargs: Any) -> tuple[Any, Callable[..., Any]]:
        """out[..., j] = sum_i conj(x1[..., i]) x2[..., i, j]."""
        _only_axis("vecmat", kwargs, ())
        out = np.vecmat(x1, x2)

        def vecmat_pullback(out_bar: Any) -> tuple[Any, Any]:
            v, a, ob = np.asarray(x1), np.asarray(x2), np.asarray(out_bar)[..., None, :]
            v_bar = lambda: project(unbroadcast(np.conj(np.sum(ob * a, axis=-1)), v.shape), x1)  # noqa: E731
            a_bar = lambda: project(unbroadcast(np.conj(v)[..., :, None] * ob, a.shape), x2)  # noqa: E731
            return v_bar, a_bar

        return out, vecmat_pullback


# ---- forward rules: (a b)' = a' b + a b' ------------------------------------------------------------

_NUMPY2_PRODUCTS = tuple(getattr(_ns, _name)  # where this NumPy has them
                         for _ns, _name in ((np, "vecdot"), (np.linalg, "vecdot"), (np.linalg, "outer"),
                                            (np, "matvec"), (np, "vecmat")) if hasattr(_ns, _name))
for _fn in (np.tensordot, np.kron) + _NUMPY2_PRODUCTS:
    frule(_fn)(bilinear_frule(_fn, _fn.__name__))
