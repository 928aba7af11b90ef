"""Fusion in the transform: which expression trees become one fused site, and that fused code
computes what the original does (values, gradients, evaluation order, rebound callables)."""
import math

import numpy as np
import pytest

import bytegrad
from bytegrad import transform
from bytegrad.runtime import fused


def _sites(code):
    found = []
    for c in code.co_consts:
        if isinstance(c, fused.FusedSite):
            found.append(c)
        elif hasattr(c, "co_consts"):
            found += _sites(c)
    return found


def _fused(f, active=("x",)):
    new = transform.rewrite_code(f.__code__, frozenset(active), f.__globals__)
    return [s.expr for s in _sites(new)]


def dense(W, x, b):
    return np.sum(np.tanh(x @ W + b))


def chain(x):
    return np.sum(x * np.sin(x) + 0.1 * np.cos(x))


def single(x):
    return np.sum(np.tanh(x))


def with_store(x):
    y = x * 2.0
    return np.sum(y + 1.0)


def branchy(x, flag):
    return np.sum(np.exp(x if flag else -x) * 2.0)


def late_call(x, g):
    return np.sum(np.sin(x) * g(x))


def sq(x):
    return np.sum(x ** 2 + 3.0 * x)


def var_pow(x, p):
    return np.sum(x ** p + x)


def test_dense_and_chain_patterns_fuse():
    assert _fused(dense, ("W", "b")) == ["tanh(<binary_op> + b)"]
    assert _fused(chain) == ["(x * sin(x)) + (0.1 * cos(x))"]
    assert _fused(sq) == ["(x ** 2) + (3.0 * x)"]


def test_what_does_not_fuse():
    assert _fused(single) == []                     # one operation: nothing to fuse
    assert _fused(with_store) == []                 # two one-op trees split by a store
    assert _fused(var_pow, ("x", "p")) == []        # x ** p: only constant exponents fuse
    # a call of arbitrary code after a fused operation would run out of order: not fused
    assert _fused(late_call) == []


@pytest.mark.parametrize("policy", ["never", "always"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_fused_gradients_match_unfused(policy, dtype, monkeypatch):
    monkeypatch.setattr(fused, "POLICY", policy)
    rng = np.random.default_rng(0)
    W = rng.normal(size=(5, 4)).astype(dtype)
    x = rng.normal(size=(7, 5)).astype(dtype)
    b = rng.normal(size=4).astype(dtype)
    g = bytegrad.grad(dense, wrt=(0, 2))
    monkeypatch.setenv("BYTEGRAD_DISABLE_FUSION", "1")
    ref = bytegrad.grad(lambda W, x, b: dense(W, x, b), wrt=(0, 2))(W, x, b)
    monkeypatch.delenv("BYTEGRAD_DISABLE_FUSION")
    for _ in range(3):  # first call, and the cached code / compiled kernel after it
        gW, gb = g(W, x, b)
        assert gW.dtype == dtype and gb.dtype == dtype
        tol = 1e-12 if dtype == np.float64 else 1e-5
        np.testing.assert_allclose(gW, ref[0], rtol=tol, atol=tol)
        np.testing.assert_allclose(gb, ref[1], rtol=tol, atol=tol)


def test_rebound_callable_falls_back_to_what_the_code_now_calls(monkeypatch):
    monkeypatch.setattr(fused, "POLICY", "always")
    ns = {"np": np, "act": np.tanh}
    exec("def f(x, b):\n    return (act(x + b) * 2.0).sum()\n", ns)
    f = ns["f"]
    x, b = np.linspace(-1, 1, 5), np.full(5, 0.5)
    g = bytegrad.grad(f)
    np.testing.assert_allclose(g(x, b), 2 * (1 - np.tanh(x + b) ** 2))
    ns["act"] = np.sin  # the fused site was built for np.tanh: its guard sends this call to NumPy
    np.testing.assert_allclose(g(x, b), 2 * np.cos(x + b))


def test_leaf_evaluation_order_is_kept():
    calls = []

    def note(name, v):
        calls.append(name)
        return v

    def f(x):
        return np.sum(np.exp(note("a", x) @ np.eye(3)) * note("b", x) + note("c", x))

    x = np.linspace(0.1, 0.3, 3)
    bytegrad.grad(f)(x)
    assert calls == ["a", "b", "c"]


def test_python_scalars_and_ints_in_a_fused_tree(monkeypatch):
    monkeypatch.setattr(fused, "POLICY", "always")

    def f(x, s):
        return np.sum(s * np.exp(x) - x / 2 + x ** 3)

    x = np.linspace(-1, 1, 6)
    for s in (2.0, 3):
        got = bytegrad.grad(f)(x, s)
        np.testing.assert_allclose(got, s * np.exp(x) - 0.5 + 3 * x ** 2, rtol=1e-12)
    assert math.isclose(bytegrad.grad(f, wrt=1)(x, 2.0), float(np.sum(np.exp(x))))
