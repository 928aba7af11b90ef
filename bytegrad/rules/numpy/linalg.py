"""Products and linear algebra: matmul (`np.matmul` and `@`), dot, outer, inner, vdot, trace, einsum, and
`np.linalg` inv, solve, det, slogdet, norm, vector_norm, matrix_norm. Cotangents of products are thunks,
computed only if needed. (Decompositions are in `linalg_decomp.py`; tensordot, kron, cross, multi_dot and
matrix_power in `products.py`.)
"""
from __future__ import annotations

import operator
from typing import Any, Callable

import numpy as np

from bytegrad.rules._project import project, stand_in
from bytegrad.rules._shape import unbroadcast
from bytegrad.rules._tangents import bilinear_frule
from bytegrad.rules.registry import NO_TANGENT, ZERO, frule, program_form, rrule

_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"  # string.ascii_letters


def _mT(m: np.ndarray) -> np.ndarray:
    """The transpose of the last two axes. Not conjugated for complex input: cotangents are
    transposed, not adjoint, maps (the convention of docs/plugins.md, as in JAX)."""
    return np.swapaxes(m, -1, -2)


def _no_out(name: str, kwargs: dict[str, Any], args: tuple[Any, ...] = (), pos: int = -1) -> None:
    if kwargs.get("out") is not None or (0 <= pos < len(args) and args[pos] is not None):
        raise TypeError(f"numpy.{name}(..., out=...) cannot be differentiated; assign the result instead.")


# ---- products ---------------------------------------------------------------------------------------

def _real_matrices(a: Any, b: Any, **kwargs: Any) -> bool:
    return (not kwargs and type(a) is np.ndarray and type(b) is np.ndarray and a.ndim == 2 and b.ndim == 2
            and a.dtype.kind == "f" and b.dtype.kind == "f")


@rrule(operator.matmul)
@rrule(np.matmul)
@program_form(_real_matrices, "{0} @ {1}", "{g} @ {1}.T", "{0}.T @ {g}")  # matrix_matmul_pullback's
def matmul_rrule(a: Any, b: Any, **kwargs: Any) -> tuple[Any, Callable[..., Any]]:
    if _real_matrices(a, b, **kwargs):
        # the common real matrix product, without the general case's reshaping
        def matrix_matmul_pullback(out_bar: Any) -> tuple[Any, Any]:
            return (lambda: out_bar @ b.T), (lambda: a.T @ out_bar)

        return a @ b, matrix_matmul_pullback
    _no_out("matmul", kwargs)
    out = np.matmul(a, b, **kwargs)

    def matmul_pullback(out_bar: Any) -> tuple[Any, Any]:
        # (arrays made from list arguments here, not in the forward pass: a nested derivative
        # records what a pullback computes, and must see them made from the list's values)
        A, B = np.asarray(a), np.asarray(b)
        # Vectors become matrices (a row for a, a column for b), as matmul itself treats them.
        A2 = A[None, :] if A.ndim == 1 else A
        B2 = B[:, None] if B.ndim == 1 else B
        ob = np.asarray(out_bar)
        if A.ndim == 1 and B.ndim == 1:
            ob = ob.reshape(1, 1)
        elif A.ndim == 1:
            ob = ob[..., None, :]
        elif B.ndim == 1:
            ob = ob[..., None]
        a_bar = lambda: project(unbroadcast(ob @ _mT(B2), A2.shape).reshape(A.shape), a)  # noqa: E731
        b_bar = lambda: project(unbroadcast(_mT(A2) @ ob, B2.shape).reshape(B.shape), b)  # noqa: E731
        return a_bar, b_bar

    return out, matmul_pullback


def _dot_cotangents(A: np.ndarray, B: np.ndarray, out_bar: Any) -> tuple[Callable[[], Any], Callable[[], Any]]:
    """Cotangents of np.dot(A, B): the sum over A's last axis and B's second-to-last (or only) axis."""
    na, nb = A.ndim, B.ndim
    if na == 0 or nb == 0:
        return (lambda: unbroadcast(np.multiply(out_bar, B), A.shape),
                lambda: unbroadcast(np.multiply(out_bar, A), B.shape))
    if na == 2 and nb == 2:
        return lambda: out_bar @ _mT(B), lambda: _mT(A) @ out_bar
    free_a = tuple(range(na - 1))
    if nb == 1:
        return (lambda: np.multiply(np.expand_dims(out_bar, -1), B),
                lambda: np.tensordot(out_bar, A, axes=(free_a, free_a)))
    # out axes: A's free axes, then B's leading axes, then B's last axis.
    out_axes_of_b = tuple(range(na - 1, na - 1 + nb - 2)) + (na - 1 + nb - 2,)
    b_axes = tuple(range(nb - 2)) + (nb - 1,)
    return (lambda: np.tensordot(out_bar, B, axes=(out_axes_of_b, b_axes)),
            lambda: np.moveaxis(np.tensordot(A, out_bar, axes=(free_a, free_a)), 0, nb - 2))


@rrule(np.ndarray.dot)
@rrule(np.dot)
def dot_rrule(a: Any, b: Any, *args: Any, **kwargs: Any) -> tuple[Any, Callable[..., Any]]:
    _no_out("dot", kwargs, args, 0)
    out = np.dot(a, b)

    def dot_pullback(out_bar: Any) -> tuple[Any, ...]:
        a_bar, b_bar = _dot_cotangents(np.asarray(a), np.asarray(b), out_bar)  # (as in matmul_pullback)
        return (lambda: project(a_bar(), a), lambda: project(b_bar(), b)) + (NO_TANGENT,) * len(args)

    return out, dot_pullback


@rrule(np.outer)
def outer_rrule(a: Any, b: Any, *args: Any, **kwargs: Any) -> tuple[Any, Callable[..., Any]]:
    _no_out("outer", kwargs, args, 0)
    out = np.outer(a, b)

    def outer_pullback(out_bar: Any) -> tuple[Any, ...]:  # (a and b raveled here: see matmul_pullback)
        a_bar = lambda: project(np.reshape(out_bar @ np.ravel(b), np.shape(a)), a)  # noqa: E731
        b_bar = lambda: project(np.reshape(np.ravel(a) @ out_bar, np.shape(b)), b)  # noqa: E731
        return (a_bar, b_bar) + (NO_TANGENT,) * len(args)

    return out, outer_pullback


@rrule(np.inner)
def inner_rrule(a: Any, b: Any) -> tuple[Any, Callable[..., Any]]:
    out = np.inner(a, b)

    def inner_pullback(out_bar: Any) -> tuple[Any, Any]:
        A, B = np.asarray(a), np.asarray(b)  # (here: see matmul_pullback)
        na, nb = A.ndim, B.ndim
        if na == 0 or nb == 0:
            a_bar, b_bar = _dot_cotangents(A, B, out_bar)
        else:
            free_a, free_b = tuple(range(na - 1)), tuple(range(nb - 1))
            out_b = tuple(range(na - 1, na - 1 + nb - 1))
            a_bar = lambda: np.tensordot(out_bar, B, axes=(out_b, free_b))  # noqa: E731
            b_bar = lambda: np.tensordot(out_bar, A, axes=(free_a, free_a))  # noqa: E731
        return lambda: project(a_bar(), a), lambda: project(b_bar(), b)

    return out, inner_pullback


@rrule(np.vdot)
def vdot_rrule(a: Any, b: Any) -> tuple[Any, Callable[..., Any]]:
    """sum(conj(a) * b) over the flattened arguments: a_bar = conj(out_bar * b), b_bar = out_bar * conj(a)."""
    out = np.vdot(a, b)

    def vdot_pullback(out_bar: Any) -> tuple[Any, Any]:
        a_bar = lambda: project(np.reshape(np.conj(out_bar * np.ravel(b)), np.shape(a)), a)  # noqa: E731
        b_bar = lambda: project(np.reshape(out_bar * np.conj(np.ravel(a)), np.shape(b)), b)  # noqa: E731
        return a_bar, b_bar

    return out, vdot_pullback


# ---- forward rules of the products above: (a b)' = a' b + a b' ----------------------------------------

for _fns, _product in (((operator.matmul, np.matmul), np.matmul), ((np.dot, np.ndarray.dot), np.dot),
                       ((np.outer,), np.outer), ((np.inner,), np.inner), ((np.vdot,), np.vdot)):
    for _fn in _fns:
        frule(_fn)(bilinear_frule(_product, _fn.__name__))


@rrule(np.ndarray.trace)
@rrule(np.trace)
def trace_rrule(x: Any, *args: Any, **kwargs: Any) -> tuple[Any, Callable[..., Any]]:
    out = np.trace(x, *args, **kwargs)
    params = dict(zip(("offset", "axis1", "axis2", "dtype", "out"), args), **kwargs)
    _no_out("trace", params)
    offset, axis1, axis2 = params.get("offset", 0), params.get("axis1", 0), params.get("axis2", 1)

    def trace_pullback(out_bar: Any) -> tuple[Any, ...]:
        xa = np.asarray(x)
        eye = np.eye(xa.shape[axis1], xa.shape[axis2], k=offset, dtype=np.result_type(out_bar, xa, 0.0))
        x_bar = np.asarray(out_bar)[..., None, None] * eye  # the remaining axes, then (axis1, axis2)
        x_bar = np.moveaxis(x_bar, (-2, -1), (axis1 % xa.ndim, axis2 % xa.ndim))
        return (project(x_bar, x),) + (NO_TANGENT,) * len(args)

    return out, trace_pullback


# ---- einsum ---------------------------------------------------------------------------------------------

def _einsum_specs(subscripts: str, operands: tuple[Any, ...]) -> tuple[list[str], str]:
    """Each operand's letters and the output's, with '...' spelled out and implicit output made explicit."""
    spec = subscripts.replace(" ", "")
    inputs, output = spec.split("->") if "->" in spec else (spec, None)
    terms = inputs.split(",")
    used = set(spec)
    free = [c for c in _LETTERS if c not in used]
    widths = [np.ndim(op) - (len(t) - 3) for t, op in zip(terms, operands) if "..." in t]
    ellipsis = "".join(free[: max(widths, default=0)])
    specs = [t.replace("...", ellipsis[len(ellipsis) - (np.ndim(op) - (len(t) - 3)):]) if "..." in t else t
             for t, op in zip(terms, operands)]
    if output is None:  # implicit mode: broadcast axes, then the letters seen once, sorted
        letters = "".join(specs)
        output = ellipsis + "".join(sorted(c for c in set(letters) if letters.count(c) == 1 and c not in ellipsis))
    else:
        output = output.replace("...", ellipsis)
    return specs, output


def _einsum_operand_bar(k: int, specs: list[str], output: str, operands: tuple[Any, ...], out_bar: Any) -> Any:
    """The cotangent of operand k: contract out_bar with the other operands onto k's letters."""
    x = np.asarray(operands[k])
    target = specs[k]
    sizes: dict[str, int] = {}
    for t, op in zip(specs, operands):
        for c, n in zip(t, np.shape(op)):
            if n != 1 or c not in sizes:  # a size-1 axis broadcasts against any other (also 0)
                sizes[c] = n
    others = [j for j in range(len(specs)) if j != k]
    available = set(output).union(*(specs[j] for j in others))
    unique = "".join(dict.fromkeys(target))
    kept = "".join(c for c in unique if c in available)
    g = np.einsum(",".join([output] + [specs[j] for j in others]) + "->" + kept,
                  out_bar, *(operands[j] for j in others))
    # Letters summed away inside operand k alone: its cotangent is constant along them.
    g = np.broadcast_to(g.reshape([sizes[c] if c in kept else 1 for c in unique]), [sizes[c] for c in unique])
    if len(unique) != len(target):  # a repeated letter (a diagonal): scatter onto it
        grids = np.indices([sizes[c] for c in unique], sparse=True)
        full = np.zeros([sizes[c] for c in target], dtype=g.dtype)
        full[tuple(grids[unique.index(c)] for c in target)] = g
        g = full
    axes = tuple(p for p, n in enumerate(x.shape) if n == 1 and g.shape[p] != 1)  # broadcast size-1 axes
    if axes:
        g = np.sum(g, axis=axes, keepdims=True)
    return project(g, operands[k])


def _sublist_subscripts(args: tuple[Any, ...]) -> tuple[str, tuple[Any, ...], list[int]]:
    """The operand-list form `einsum(a, [0, 1], b, [1, 2], [0, 2])` as a subscripts string, its operands,
    and their positions among the arguments. Integers become letters, Ellipsis becomes '...'."""
    def letters(sublist: Any) -> str:
        return "".join("..." if k is Ellipsis else _LETTERS[operator.index(k)] for k in sublist)

    n_ops = len(args) // 2
    positions = list(range(0, 2 * n_ops, 2))
    spec = ",".join(letters(args[p + 1]) for p in positions)
    if len(args) % 2:
        spec += "->" + letters(args[-1])
    return spec, tuple(args[p] for p in positions), positions


@rrule(np.einsum)
def einsum_rrule(*args: Any, **kwargs: Any) -> tuple[Any, Callable[..., Any]]:
    """Both forms: `einsum("ij,jk->ik", a, b)` and `einsum(a, [0, 1], b, [1, 2], [0, 2])`."""
    _no_out("einsum", kwargs)
    out = np.einsum(*args, **kwargs)
    if isinstance(args[0], str):
        subscripts, operands, positions = args[0], args[1:], list(range(1, len(args)))
    else:
        subscripts, operands, positions = _sublist_subscripts(args)
    specs, output = _einsum_specs(subscripts, operands)

    def einsum_pullback(out_bar: Any) -> tuple[Any, ...]:
        def operand_bar(k: int) -> Callable[[], Any]:
            return lambda: _einsum_operand_bar(k, specs, output, operands, out_bar)

        bars: list[Any] = [NO_TANGENT] * len(args)
        for k, p in enumerate(positions):
            bars[p] = operand_bar(k)
        return tuple(bars)

    return out, einsum_pullback


# ---- np.linalg ------------------------------------------------------------------------------------------

@rrule(np.linalg.inv)
def inv_rrule(a: Any) -> tuple[Any, Callable[..., Any]]:
    out = np.linalg.inv(a)

    def inv_pullback(out_bar: Any) -> tuple[Any]:
        out_t = _mT(out)
        return (project(-(out_t @ out_bar @ out_t), a),)

    return out, inv_pullback


@rrule(np.linalg.solve)
def solve_rrule(a: Any, b: Any) -> tuple[Any, Callable[..., Any]]:
    out = np.linalg.solve(a, b)
    A, B = np.asarray(a), np.asarray(b)
    vector = B.ndim == 1  # NumPy 2: b is a vector only when it is 1-D

    def solve_pullback(out_bar: Any) -> tuple[Any, Any]:
        ob = np.asarray(out_bar)[..., None] if vector else np.asarray(out_bar)
        b_bar = np.linalg.solve(_mT(A), ob)
        x2 = out[..., None] if vector else out

        def a_bar() -> Any:
            return project(unbroadcast(-(b_bar @ _mT(x2)), A.shape), a)

        def b_bar_thunk() -> Any:
            bb = unbroadcast(b_bar, B.shape + (1,) if vector else B.shape)
            return project(bb[..., 0] if vector else bb, b)

        return a_bar, b_bar_thunk

    return out, solve_pullback


@rrule(np.linalg.det)
def det_rrule(a: Any) -> tuple[Any, Callable[..., Any]]:
    out = np.linalg.det(a)

    def det_pullback(out_bar: Any) -> tuple[Any]:
        # d det(A) = det(A) tr(A^-1 dA): singular matrices have no inverse here.
        scale = np.asarray(out_bar * out)[..., None, None]
        return (project(scale * _mT(np.linalg.inv(a)), a),)

    return out, det_pullback


@rrule(np.linalg.slogdet)
def slogdet_rrule(a: Any) -> tuple[Any, Callable[..., Any]]:
    out = np.linalg.slogdet(a)

    def slogdet_pullback(out_bar: Any) -> tuple[Any]:
        # d logabsdet = Re t and, for complex input, d sign = 1j Im(t) sign, with t = tr(A^-1 dA)
        # (a real sign is piecewise constant): the cotangent is (logabsdet_bar + 1j Im(sign_bar sign)) A^-T
        sign_bar, logabsdet_bar = out_bar
        moving_sign = sign_bar is not ZERO and np.iscomplexobj(out[0])
        if logabsdet_bar is ZERO and not moving_sign:
            return (ZERO,)
        scale = np.asarray(0.0 if logabsdet_bar is ZERO else logabsdet_bar)
        if moving_sign:
            scale = scale + 1j * np.imag(sign_bar * out[0])
        return (project(scale[..., None, None] * _mT(np.linalg.inv(a)), a),)

    return out, slogdet_pullback


# ---- norms: np.linalg.norm, and NumPy 2's vector_norm and matrix_norm ------------------------------------

def _extreme_share(values: np.ndarray, extreme: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    """1/count where `values` equals its (broadcast) extreme, count being the ties along `axes`."""
    mask = values == extreme
    return mask / np.maximum(np.sum(mask, axis=axes, keepdims=True), 1)


def _abs_slope(xa: np.ndarray) -> np.ndarray:
    """The cotangent of |x| per unit cotangent: sign(x), or conj(z) / |z| for complex z (docs/plugins.md,
    complex numbers); 0 at 0."""
    if xa.dtype.kind != "c":
        return np.sign(xa)
    absx = np.abs(xa)
    return np.where(absx == 0, 0, xa.conj() / np.where(absx == 0, 1, absx))


def _vector_norm_cotangent(xa: np.ndarray, ord_: Any, axes: tuple[int, ...], out_e: Any, ob: Any) -> Any:
    """The cotangent of ||x||_ord taken over `axes` as one vector; out_e and ob keep x's rank. A float
    order is a differentiable p: its cotangent is written in p (even at p == 1 or 2), so that a nested
    derivative sees how it moves with p."""
    general = isinstance(ord_, float) and ord_ not in (0.0, np.inf, -np.inf)
    if (ord_ is None or ord_ == 2) and not general:
        # d||z|| pairs with conj(z) / ||z|| (docs/plugins.md, complex numbers), as abs does; the
        # subgradient 0 at x == 0, divided safely (a nested derivative would get 0 * inf there)
        zero = out_e == 0
        return np.where(zero, 0, ob * (xa.conj() if xa.dtype.kind == "c" else xa) / np.where(zero, 1, out_e))
    if ord_ == 0:  # the number of nonzero elements: piecewise constant
        return np.zeros(xa.shape, dtype=np.result_type(xa, ob, 0.0))
    sign = _abs_slope(xa)
    if ord_ == 1 and not general:
        return ob * sign
    if ord_ in (np.inf, -np.inf):  # the largest (smallest) |x_i|: ties share its cotangent
        return ob * sign * _extreme_share(np.abs(xa), out_e, axes)
    p = ord_ if isinstance(ord_, float) else float(ord_)
    absx = np.abs(xa)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        # d (sum |x|^p)^(1/p) = sign(x) |x|^(p-1) / out^(p-1); 0 where x == 0
        return np.where(absx == 0, 0, ob * sign * (absx / out_e) ** (p - 1))


def _matrix_norm_cotangent(xa: np.ndarray, ord_: Any, row: int, col: int, out_e: Any, ob: Any) -> Any:
    """The cotangent of a matrix norm over the axes (row, col); out_e and ob keep x's rank."""
    if ord_ is None or ord_ == "fro":
        return _vector_norm_cotangent(xa, None, (row, col), out_e, ob)
    if ord_ in (1, -1, np.inf, -np.inf):
        # 1: the largest column sum of |x| (over rows); inf: the largest row sum (over columns)
        summed, across = (row, col) if ord_ in (1, -1) else (col, row)
        sums = np.sum(np.abs(xa), axis=summed, keepdims=True)
        return ob * _abs_slope(xa) * _extreme_share(sums, out_e, (across,))
    if ord_ not in ("nuc", 2, -2):
        raise ValueError(f"invalid norm order {ord_!r} for matrices")
    m = np.moveaxis(xa, (row, col), (-2, -1))
    u, _, vt = np.linalg.svd(m, full_matrices=False)
    if ord_ == 2:
        u, vt = u[..., :, :1], vt[..., :1, :]
    elif ord_ == -2:
        u, vt = u[..., :, -1:], vt[..., -1:, :]
    # d sigma = Re(u^H dX v): the cotangent conj(u v^H) (no-op conj for real input)
    return ob * np.moveaxis(np.conj(u @ vt), (-2, -1), (row, col))


def _order_derivative(xa: np.ndarray, p: float, axes: tuple[int, ...], out_e: Any) -> Any:
    """d ||x||_p / dp = N (sum |x|^p log|x| / (p N^p) - log N / p), N = ||x||_p (0 where N == 0)."""
    absx = np.abs(xa)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        terms = np.where(absx == 0, 0, absx**p * np.log(np.where(absx == 0, 1, absx)))
        total = np.sum(terms, axis=axes, keepdims=True)
        return np.where(out_e == 0, 0, out_e * (total / (p * out_e**p) - np.log(out_e) / p))


def _norm_rule(out: Any, x: Any, ord_: Any, axes: tuple[int, ...], matrix: bool, n_args: int) -> Callable[..., Any]:
    """The pullback of a norm; with n_args > 0 the order is the first of the n_args other positional
    arguments, and a float order p of a vector norm gets its cotangent (other orders are flat in it)."""
    xa = np.asarray(x)
    shape_e = tuple(1 if i in axes else d for i, d in enumerate(xa.shape))
    like = stand_in(x)

    def norm_pullback(out_bar: Any) -> tuple[Any, ...]:
        out_e, ob = np.reshape(out, shape_e), np.reshape(out_bar, shape_e)
        if matrix:
            x_bar = _matrix_norm_cotangent(xa, ord_, axes[0], axes[1], out_e, ob)
        else:
            x_bar = _vector_norm_cotangent(xa, ord_, axes, out_e, ob)
        if not n_args:
            return (project(x_bar, like),)

        def ord_bar() -> Any:
            if matrix or not isinstance(ord_, float) or ord_ in (0.0, np.inf, -np.inf):
                return project(0.0, ord_)
            return project(np.sum(ob * _order_derivative(xa, ord_, axes, out_e)), ord_)

        return (project(x_bar, like), ord_bar) + (NO_TANGENT,) * (n_args - 1)

    return norm_pullback


def _axes(axis: Any, ndim: int) -> tuple[int, ...]:
    axis = (axis,) if np.ndim(axis) == 0 else tuple(axis)
    return tuple(operator.index(a) % ndim for a in axis)


@rrule(np.linalg.norm)
def norm_rrule(x: Any, *args: Any, **kwargs: Any) -> tuple[Any, Callable[..., Any]]:
    """Every order NumPy has, for vectors (None/2, 1, inf, -inf, 0, any p) and matrices (None/'fro',
    'nuc', 2, -2, 1, -1, inf, -inf), over any axes, with keepdims. At kinks (x_i == 0, ties for a
    maximum, repeated singular values) a subgradient is taken."""
    out = np.linalg.norm(x, *args, **kwargs)
    params = dict(zip(("ord", "axis", "keepdims"), args), **kwargs)
    ord_, axis = params.get("ord"), params.get("axis")
    ndim = np.ndim(x)
    if axis is None:
        axes = tuple(range(ndim))
        matrix = ord_ is not None and ndim == 2
    else:
        axes = _axes(axis, ndim)
        matrix = len(axes) == 2
    return out, _norm_rule(out, x, ord_, axes, matrix, len(args))


if hasattr(np.linalg, "vector_norm"):

    @rrule(np.linalg.vector_norm)
    def vector_norm_rrule(x: Any, **kwargs: Any) -> tuple[Any, Callable[..., Any]]:
        out = np.linalg.vector_norm(x, **kwargs)
        axis, ndim = kwargs.get("axis"), np.ndim(x)
        axes = tuple(range(ndim)) if axis is None else _axes(axis, ndim)
        return out, _norm_rule(out, x, kwargs.get("ord", 2), axes, False, 0)

    @rrule(np.linalg.matrix_norm)
    def matrix_norm_rrule(x: Any, **kwargs: Any) -> tuple[Any, Callable[..., Any]]:
        out = np.linalg.matrix_norm(x, **kwargs)
        ndim = np.ndim(x)
        return out, _norm_rule(out, x, kwargs.get("ord", "fro"), (ndim - 2, ndim - 1), True, 0)
