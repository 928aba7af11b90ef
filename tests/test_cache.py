"""The cache of rewritten code: reuse, invalidation by the rule registry, and its size limit."""
import warnings

import numpy as np
import pytest

import bytegrad
from bytegrad.transform import cache


def _scaled_square(x):
    return x * x


def test_rule_registered_after_first_gradient_is_used():
    def uses_helper(x):
        return np.sum(_scaled_square(x))

    f = bytegrad.differentiate(uses_helper)
    x = np.array([1.0, 2.0])
    np.testing.assert_allclose(f.grad(x), 2 * x)  # differentiated through the helper's code

    @bytegrad.rrule(_scaled_square)
    def scaled_square_rrule(v):
        def scaled_square_pullback(out_bar):
            return (out_bar * 10.0 * v,)  # deliberately not 2 * v: shows the rule is used
        return v * v, scaled_square_pullback

    np.testing.assert_allclose(f.grad(x), 10.0 * x)


def test_new_signature_gets_new_code_and_same_signature_hits():
    def g(x):
        return np.sum(np.sin(x))

    f = bytegrad.differentiate(g)
    before = f.stats()["misses"]
    f.grad(np.ones(3))
    f.grad(np.ones(4))            # same dtype and ndim: no new rewrite
    f.grad(np.ones((2, 2)))       # new ndim
    f.grad(np.ones(3, np.float32))  # new dtype
    s = f.stats()
    assert s["misses"] - before == 3
    assert s["hits"] >= 1


def test_too_many_signatures_warn_once_and_name_the_argument():
    def h(x, scale):
        return np.sum(x * scale)

    f = bytegrad.differentiate(h)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for ndim in range(1, cache.CACHE_SIZE_LIMIT + 3):
            x = np.ones((2,) * ndim)
            np.testing.assert_allclose(f.grad(x, 3.0), 3.0 * np.ones_like(x))
    msgs = [str(w.message) for w in caught if issubclass(w.category, cache.RecompileWarning)]
    assert len(msgs) == 1
    assert "'x'" in msgs[0]


def test_rebinding_a_global_callee_is_honoured():
    global _callee
    def first(v):
        return v * 2.0
    def second(v):
        return v * 5.0

    def outer(x):
        return np.sum(_callee(x))

    f = bytegrad.differentiate(outer)
    x = np.ones(2)
    _callee = first
    np.testing.assert_allclose(f.grad(x), 2.0)
    _callee = second
    np.testing.assert_allclose(f.grad(x), 5.0)


def test_redefined_function_is_rewritten_again():
    src = "def k(x):\n    return np.sum(x ** {p})\n"
    ns = {"np": np}
    exec(src.format(p=2), ns)
    g1 = bytegrad.differentiate(ns["k"]).grad(np.array([3.0]))
    exec(src.format(p=3), ns)
    g2 = bytegrad.differentiate(ns["k"]).grad(np.array([3.0]))
    assert g1[0] == pytest.approx(6.0)
    assert g2[0] == pytest.approx(27.0)
