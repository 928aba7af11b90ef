"""Forward mode: `bytegrad.jvp` against finite differences and against reverse mode, over the program
catalogue and a table of vector-valued programs; forward rules checked with `check_rule`; the
transposition fallback for rules with only a reverse form; errors.
"""
from __future__ import annotations

import operator
import warnings
from typing import Any, Callable

import numpy as np
import pytest

import bytegrad
from bytegrad.rules import registry
from bytegrad.rules.testing import check_rule
from bytegrad.runtime.forward import PerformanceWarning
from functions import CASES, Case
from gradcheck import is_diff_leaf, tree_paths, tree_replace

pytestmark = pytest.mark.filterwarnings("ignore::bytegrad.runtime.forward.PerformanceWarning")


def rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


# ---- helpers ---------------------------------------------------------------------------------------


def random_tangent(x: Any, r: np.random.Generator) -> Any:
    """A tangent tree for `x`: random directions on differentiable leaves, None elsewhere."""
    t = x
    for path, leaf in tree_paths(x):
        if is_diff_leaf(leaf):
            d = r.normal(size=np.shape(leaf))
            value = d.astype(leaf.dtype) if isinstance(leaf, np.ndarray) else type(leaf)(float(d))
        else:
            value = None
        t = tree_replace(t, path, value)
    return t


def shifted(x: Any, t: Any, eps: float) -> Any:
    """x + eps * t on the differentiable leaves (in float64)."""
    out = x
    for (path, leaf), (_, d) in zip(tree_paths(x), tree_paths(t)):
        if d is not None and is_diff_leaf(leaf):
            out = tree_replace(out, path, np.asarray(leaf, np.float64) + eps * np.asarray(d) if isinstance(leaf, np.ndarray)
                               else type(leaf)(leaf + eps * d))
    return out


def fd_jvp(f: Callable[..., Any], args: tuple, tangents: tuple, eps: float = 1e-6) -> Any:
    """The central difference (f(x + eps t) - f(x - eps t)) / 2 eps along all tangents at once."""
    plus = tuple(a if t is None else shifted(a, t, eps) for a, t in zip(args, tangents))
    minus = tuple(a if t is None else shifted(a, t, -eps) for a, t in zip(args, tangents))
    hi, lo = f(*plus), f(*minus)
    result = hi
    for (path, h), (_, lo_leaf) in zip(tree_paths(hi), tree_paths(lo)):
        value = (np.asarray(h, np.float64) - np.asarray(lo_leaf, np.float64)) / (2 * eps) if is_diff_leaf(h) else None
        result = tree_replace(result, path, value)
    return result


def dot_trees(a: Any, b: Any) -> float:
    total = 0.0
    for (_, x), (_, y) in zip(tree_paths(a), tree_paths(b)):
        if x is not None and y is not None:
            total += float(np.sum(np.asarray(x, np.float64) * np.asarray(y, np.float64)))
    return total


# ---- the catalogue: every scalar program, jvp == <grad, v> == finite differences ----------------


def _wrt_positions(case: Case, nargs: int) -> tuple[int, ...]:
    w = case.wrt if isinstance(case.wrt, tuple) else (case.wrt,)
    return tuple(p % nargs for p in w)


CATALOGUE = [c for c in CASES if c.make_kwargs is None and all(isinstance(w, int) for w in
                                                               (c.wrt if isinstance(c.wrt, tuple) else (c.wrt,)))]


@pytest.mark.parametrize("case", CATALOGUE, ids=lambda c: c.id)
def test_jvp_on_the_catalogue(case: Case) -> None:
    r = rng(100)
    args = case.args(r)
    positions = _wrt_positions(case, len(args))
    tangents = tuple(random_tangent(a, r) if k in positions else None for k, a in enumerate(args))
    out, out_dot = bytegrad.jvp(case.fn, args, tangents)
    np.testing.assert_allclose(out, case.fn(*case.args(rng(100))), rtol=1e-12)
    grads = bytegrad.grad(case.fn, wrt=positions)(*case.args(rng(100)))
    expected = sum(dot_trees(g, tangents[p]) for g, p in zip(grads, positions))
    np.testing.assert_allclose(out_dot, expected, rtol=1e-8, atol=1e-9)
    numeric = fd_jvp(case.fn, case.args(rng(100)), tangents)
    np.testing.assert_allclose(out_dot, numeric, rtol=max(case.rtol, 1e-5), atol=max(case.atol, 1e-5))


# ---- vector-valued programs ------------------------------------------------------------------------


def affine_tanh(W, x, b):
    return np.tanh(W @ x + b)


def reductions(x):
    return np.concatenate([x.sum(axis=0), np.mean(x, axis=1), np.sum(x, axis=1, keepdims=True).ravel()])


def reshapes(x):
    y = x.reshape(2, 6).T
    return np.transpose(y.reshape(3, 4)) * np.swapaxes(x, 0, 1)


def indexing(x):
    return np.stack([x[0], x[1:, 2].sum() + x[:, 0][::-1][:3].sum() * x[2], x[[0, 2, 2]].mean(axis=0)])


def where_exp_log(x, y):
    return np.where(x > 0, np.exp(x), np.log(y)) + np.dot(x, y) * y


def tuple_output(x):
    return np.sin(x), {"sq": x ** 2, "n": 3}, [x.sum(), np.cumsum(x)]


def fill_buffer(x):
    out = np.zeros(4)
    for i in range(4):
        out[i] = x[i] * x[(i + 1) % 4]
    out[1:3] += np.cos(x[:2])
    return out * 2.0


def callee_and_closure(x, y):
    scale = np.exp(y)

    def layer(v):
        return np.tanh(scale * v)

    return layer(layer(x)) @ np.outer(x, y)


def dict_input(p, x):
    return np.tanh(p["W"] @ x + p["b"]) * p["s"]


def float_scalars(a, b):
    return a * b + a ** 3 / b


def matrix_products(A, B):
    return np.dot(A, B.T) + np.matmul(A, B.T) @ np.eye(3) + np.inner(A, A) + np.kron(A[0], B[1]).sum()


VECTOR_PROGRAMS = [
    (affine_tanh, lambda r: (r.normal(size=(3, 4)), r.normal(size=4), r.normal(size=3))),
    (reductions, lambda r: (r.normal(size=(3, 4)),)),
    (reshapes, lambda r: (r.normal(size=(3, 4)),)),
    (indexing, lambda r: (r.normal(size=(3, 4)),)),
    (where_exp_log, lambda r: (r.normal(size=5), r.uniform(0.5, 2.0, size=5))),
    (tuple_output, lambda r: (r.normal(size=4),)),
    (fill_buffer, lambda r: (r.normal(size=4),)),
    (callee_and_closure, lambda r: (r.normal(size=3), r.normal(size=3))),
    (dict_input, lambda r: ({"W": r.normal(size=(3, 4)), "b": r.normal(size=3), "s": 1.5}, r.normal(size=4))),
    (float_scalars, lambda r: (1.3, 0.7)),
    (matrix_products, lambda r: (r.normal(size=(3, 4)), r.normal(size=(3, 4)))),
]


def _close_trees(a: Any, b: Any, rtol: float, atol: float) -> None:
    for (path, x), (_, y) in zip(tree_paths(a), tree_paths(b)):
        if x is None or y is None:
            assert x is None and y is None, path
            continue
        np.testing.assert_allclose(np.asarray(x, np.float64), np.asarray(y, np.float64), rtol=rtol, atol=atol,
                                   err_msg=str(path))


@pytest.mark.parametrize("program,make", VECTOR_PROGRAMS, ids=[p[0].__name__ for p in VECTOR_PROGRAMS])
def test_jvp_of_vector_programs(program: Callable[..., Any], make: Callable[..., tuple]) -> None:
    r = rng(7)
    args = make(r)
    tangents = tuple(random_tangent(a, r) for a in args)
    out, out_dot = bytegrad.jvp(program, args, tangents)
    _close_trees(out, program(*make(rng(7))), 1e-12, 0.0)
    for (path, o), (_, d) in zip(tree_paths(out), tree_paths(out_dot)):
        if isinstance(o, np.ndarray):
            assert isinstance(d, np.ndarray) and d.shape == o.shape and d.dtype == o.dtype, path
    _close_trees(out_dot, fd_jvp(program, make(rng(7)), tangents), 1e-6, 1e-7)


def test_jvp_matches_vjp_transposed() -> None:
    """<u, J v> from jvp equals <J^T u, v> from vjp."""
    r = rng(8)
    W, x, b = r.normal(size=(3, 4)), r.normal(size=4), r.normal(size=3)
    v = (r.normal(size=(3, 4)), r.normal(size=4), r.normal(size=3))
    u = r.normal(size=3)
    _, out_dot = bytegrad.jvp(affine_tanh, (W, x, b), v)
    _, back = bytegrad.vjp(affine_tanh, W, x, b)
    bars = back(u)
    np.testing.assert_allclose(u @ out_dot, sum(np.sum(bb * vv) for bb, vv in zip(bars, v)), rtol=1e-12)


def test_jvp_float32() -> None:
    r = rng(9)
    W, x = r.normal(size=(3, 4)).astype(np.float32), r.normal(size=4).astype(np.float32)
    v = r.normal(size=4).astype(np.float32)
    out, out_dot = bytegrad.jvp(lambda x: np.tanh(W @ x) * 2.0, (x,), (v,))
    assert out_dot.dtype == np.float32
    expected = (1 - np.tanh(W.astype(np.float64) @ x) ** 2) * 2.0 * (W.astype(np.float64) @ v)
    np.testing.assert_allclose(out_dot, expected, rtol=1e-5, atol=1e-6)


def test_jvp_partial_tangents_and_constants() -> None:
    """None tangents are zero; an output that does not depend on the inputs has a zero tangent."""
    x, y = np.array([1.0, 2.0]), np.array([3.0, 4.0])
    out, out_dot = bytegrad.jvp(lambda x, y: (x * y, np.ones(2), 3), (x, y), (np.array([1.0, 0.0]), None))
    np.testing.assert_array_equal(out_dot[0], [3.0, 0.0])
    np.testing.assert_array_equal(out_dot[1], [0.0, 0.0])
    assert out_dot[2] is None


def test_jvp_python_float_output_is_a_float() -> None:
    out, out_dot = bytegrad.jvp(lambda a: a * a, (3.0,), (1.0,))
    assert out == 9.0 and out_dot == 6.0 and type(out_dot) is float


def test_jvp_identity() -> None:
    x, v = np.array([1.0, 2.0]), np.array([0.5, -1.0])
    out, out_dot = bytegrad.jvp(lambda x: x, (x,), (v,))
    np.testing.assert_array_equal(out_dot, v)


# ---- forward rules ------------------------------------------------------------------------------------


FRULE_CASES = [
    (operator.matmul, lambda r: (r.normal(size=(3, 4)), r.normal(size=(4, 2))), {}),
    (np.matmul, lambda r: (r.normal(size=(2, 3, 4)), r.normal(size=4)), {}),
    (np.dot, lambda r: (r.normal(size=(3, 4)), r.normal(size=4)), {}),
    (np.ndarray.dot, lambda r: (r.normal(size=(3, 4)), r.normal(size=(4, 2))), {}),
    (np.outer, lambda r: (r.normal(size=3), r.normal(size=4)), {}),
    (np.inner, lambda r: (r.normal(size=(2, 3)), r.normal(size=3)), {}),
    (np.vdot, lambda r: (r.normal(size=3), r.normal(size=3)), {}),
    (np.tensordot, lambda r: (r.normal(size=(2, 3, 4)), r.normal(size=(3, 4, 2))), {"axes": 2}),
    (np.kron, lambda r: (r.normal(size=(2, 2)), r.normal(size=(3, 1))), {}),
    (np.sum, lambda r: (r.normal(size=(3, 4)),), {"axis": 1}),
    (np.ndarray.sum, lambda r: (r.normal(size=(3, 4)), 0), {}),
    (np.mean, lambda r: (r.normal(size=(3, 4)),), {"axis": 0, "keepdims": True}),
    (np.ndarray.mean, lambda r: (r.normal(size=(3, 4)),), {}),
    (np.reshape, lambda r: (r.normal(size=(3, 4)), (2, 6)), {}),
    (np.transpose, lambda r: (r.normal(size=(2, 3, 4)), (2, 0, 1)), {}),
    (np.ravel, lambda r: (np.asfortranarray(r.normal(size=(3, 4))),), {"order": "K"}),
    (operator.getitem, lambda r: (r.normal(size=(3, 4)), (slice(None), [0, 2, 2])), {}),
    (np.concatenate, lambda r: ([r.normal(size=(2, 3)), r.normal(size=(1, 3))],), {"axis": 0}),
    (np.stack, lambda r: ((r.normal(size=3), r.normal(size=3)),), {"axis": 1}),
    (np.hstack, lambda r: ([r.normal(size=(2, 1)), r.normal(size=(2, 3))],), {}),
    (np.vstack, lambda r: ([r.normal(size=3), r.normal(size=(2, 3))],), {}),
]


@pytest.mark.parametrize("fn,make,kwargs", FRULE_CASES, ids=lambda v: getattr(v, "__name__", "") if callable(v) else "")
def test_forward_rules_pass_check_rule(fn: Any, make: Callable[..., tuple], kwargs: dict) -> None:
    """Each forward rule written here exists and agrees with finite differences (check_rule)."""
    assert registry.lookup(fn).frule is not None, fn
    check_rule(fn, *make(rng(11)), **kwargs)


def test_forward_rule_sees_keyword_arguments() -> None:
    """`np.sum(x, axis=0)` is recorded with its keywords: the frule must see them."""
    x = rng(12).normal(size=(3, 4))
    v = rng(13).normal(size=(3, 4))
    _, out_dot = bytegrad.jvp(lambda x: np.sum(x, axis=0, keepdims=True) * x.mean(axis=1)[:, None], (x,), (v,))
    expected = v.sum(axis=0, keepdims=True) * x.mean(axis=1)[:, None] + x.sum(axis=0, keepdims=True) * v.mean(axis=1)[:, None]
    np.testing.assert_allclose(out_dot, expected, rtol=1e-12)


# ---- the fallback for rules with only a reverse form --------------------------------------------------


def test_rrule_only_rule_is_transposed_with_one_warning() -> None:
    """A rule without a forward form still gives exact tangents (its pullback transposed), with a
    PerformanceWarning, once per function."""
    assert registry.lookup(np.cumsum).frule is None
    from bytegrad.runtime import tangents
    tangents._warned.discard(np.cumsum)
    x, v = rng(14).normal(size=5), rng(15).normal(size=5)

    def f(x):
        return np.cumsum(x) * np.cumsum(x[::-1])

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _, out_dot = bytegrad.jvp(f, (x,), (v,))
        bytegrad.jvp(f, (x,), (v,))
    relevant = [w for w in caught if issubclass(w.category, PerformanceWarning)]
    assert len(relevant) == 1 and "cumsum" in str(relevant[0].message)
    np.testing.assert_allclose(out_dot, np.cumsum(v) * np.cumsum(x[::-1]) + np.cumsum(x) * np.cumsum(v[::-1]),
                               rtol=1e-12)


def test_transposed_tuple_output_rule() -> None:
    """np.linalg.eigh (a tuple output, reverse rule only): eigenvalue tangents are v_i^T dA v_i."""
    r = rng(16)
    M = r.normal(size=(3, 3))
    A = M + M.T
    dM = r.normal(size=(3, 3))
    dA = dM + dM.T
    (w, V), (w_dot, _) = bytegrad.jvp(lambda A: np.linalg.eigh(A), (A,), (dA,))
    np.testing.assert_allclose(w_dot, np.einsum("ji,jk,ki->i", V, dA, V), rtol=1e-8, atol=1e-10)


# ---- errors ------------------------------------------------------------------------------------------


def test_tangent_shape_mismatch_is_a_clear_error() -> None:
    with pytest.raises(bytegrad.WrtError, match=r"tangent of argument 0 has shape \(2,\)"):
        bytegrad.jvp(lambda x: x * 2, (np.ones(3),), (np.ones(2),))


def test_tangent_count_mismatch_is_a_clear_error() -> None:
    with pytest.raises(bytegrad.WrtError, match="2 primals but 1 tangents"):
        bytegrad.jvp(lambda x, y: x * y, (np.ones(3), np.ones(3)), (np.ones(3),))


def test_primals_must_be_a_tuple() -> None:
    with pytest.raises(TypeError, match="tuple of positional arguments"):
        bytegrad.jvp(lambda x: x, np.ones(3), np.ones(3))
