"""The Numba back end on loop programs of small matrix-vector products (an RNN), the tier-up meter
that moves them to their Numba twin, and the reasons `tier="numba"` gives where it keeps the NumPy
back end (issue 27). No timing: the meter is driven by its price (`numba_price`) and by the twin's
verdict (`twin_wins`), both replaced here."""
from __future__ import annotations

import io
import math
import types

import numpy as np
import pytest

from gradcheck import assert_trees_close

import bytegrad
from bytegrad.compiled import policy
from bytegrad.runtime import costs, kernels

pytestmark = pytest.mark.skipif(kernels.disabled(), reason="Numba disabled (BYTEGRAD_DISABLE_NUMBA)")


def fresh(fn):
    return types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)


def info(d) -> dict:
    return d.stats()["compiled"]


def backends(d) -> list:
    return [p["backend"] for p in info(d)["programs"]]


def rnn(W, U, b, xs, target):
    h = np.zeros(W.shape[0])
    for t in range(xs.shape[0]):
        h = np.tanh(W @ h + U @ xs[t] + b)
    return np.sum((h - target) ** 2)


def rnn_inputs(seed, hidden=32, steps=20, width=8):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((hidden, hidden)) / 6.0, rng.standard_normal((hidden, width)) / 3.0,
            rng.standard_normal(hidden) / 10.0, rng.standard_normal((steps, width)), rng.standard_normal(hidden) / 2.0)


#: the RNN's kernel computes tanh with runtime/vmath.py (within 3 ulp of NumPy's) and sums its
#: matrix-vector products in loops, in another order than BLAS: not bit for bit the general path's.
#: A gradient element that is a sum cancelling to 4e-5 (among elements of order 1) differed by
#: 1.8e-16, 4e-12 of itself: so 1e-10 relative, and 1e-14 absolute for elements that cancel further
RTOL, ATOL = 1e-10, 1e-14


def test_the_rnn_reaches_its_numba_twin_under_auto_after_the_meter(monkeypatch):
    monkeypatch.setattr(costs.MODEL, "seconds", {**costs.MODEL.seconds, "import": 0.0, "fixed": 0.0, "per_op": 0.0,
                                                 "per_statement": 0.0, "load": 0.0})  # any time pays
    monkeypatch.setattr(policy, "twin_wins", lambda prog, twin, args: (True, "the test keeps the twin"))
    fast = bytegrad.differentiate(fresh(rnn), wrt=(0, 1, 2), tier="auto")
    general = bytegrad.differentiate(rnn, wrt=(0, 1, 2), tier="general")
    calls = policy.AUTO_AFTER + 1 + 16  # the warm-up, the capture, then 16 calls: the first one timed
    for n in range(calls + 3):
        args = rnn_inputs(n % 4)
        got, want = fast.value_and_grad(*args), general.value_and_grad(*args)
        assert_trees_close(got, want, rtol=RTOL, atol=ATOL)
        if n == calls - 2:
            assert backends(fast) == ["numpy"], info(fast)  # the NumPy program, its meter running
    assert backends(fast) == ["numba"], info(fast)
    assert info(fast)["programs"][0]["numba"].endswith("the test keeps the twin")  # (what the meter decided)
    # in place between calls: an input's data and a differentiated weight, as the general path sees them
    args = rnn_inputs(7)
    fast.grad(*args)
    args[3][5] += 1.0
    args[0][0, 0] -= 0.5
    assert_trees_close(fast.value_and_grad(*args), general.value_and_grad(*args), rtol=RTOL, atol=ATOL)
    assert backends(fast) == ["numba"]


def test_the_meter_keeps_numpy_while_the_price_is_not_paid(monkeypatch):
    monkeypatch.setattr(policy, "numba_price", lambda prog: float("inf"))
    fast = bytegrad.differentiate(fresh(rnn), wrt=(0, 1, 2), tier="auto")
    for _ in range(policy.AUTO_AFTER + 1 + 40):
        fast.grad(*rnn_inputs(0))
    assert backends(fast) == ["numpy"]
    assert info(fast)["programs"][0]["numba"].startswith("not tried yet")


def test_the_rnn_is_a_numba_program_under_tier_numba_with_every_gradient():
    fast = bytegrad.differentiate(fresh(rnn), wrt=(0, 1, 2, 3, 4), tier="numba")  # xs[t]'s cotangent too
    general = bytegrad.differentiate(rnn, wrt=(0, 1, 2, 3, 4), tier="general")
    for seed in range(3):
        args = rnn_inputs(seed, hidden=5, steps=4, width=3)
        assert_trees_close(fast.value_and_grad(*args), general.value_and_grad(*args), rtol=RTOL, atol=ATOL)
    assert backends(fast) == ["numba"], info(fast)


def _vecmat(x, W, v):
    y = np.tanh(x @ W)  # a vector times a matrix
    z = y[1:3] * v[0] + y[0]  # a slice and ints of differentiated arrays
    return np.sum(z ** 3) + np.sum(W[2] ** 2)


def test_vector_matrix_products_and_basic_indexing_in_a_numba_kernel():
    fast = bytegrad.differentiate(fresh(_vecmat), wrt=(0, 1, 2), tier="numba")
    general = bytegrad.differentiate(_vecmat, wrt=(0, 1, 2), tier="general")
    rng = np.random.default_rng(3)
    for _ in range(3):
        args = (rng.standard_normal(4), rng.standard_normal((4, 5)), rng.standard_normal(2))
        assert_trees_close(fast.value_and_grad(*args), general.value_and_grad(*args), rtol=RTOL, atol=ATOL)
    assert backends(fast) == ["numba"], info(fast)


def _transposed_mean(W, X):
    return np.mean(np.tanh(X @ W.T) ** 2) + W.T.mean()


def test_a_transpose_and_a_full_mean_in_a_numba_kernel():
    fast = bytegrad.differentiate(fresh(_transposed_mean), wrt=(0, 1), tier="numba")
    general = bytegrad.differentiate(_transposed_mean, wrt=(0, 1), tier="general")
    rng = np.random.default_rng(4)
    for _ in range(3):
        args = (rng.standard_normal((5, 3)), rng.standard_normal((4, 3)))
        assert_trees_close(fast.value_and_grad(*args), general.value_and_grad(*args), rtol=RTOL, atol=ATOL)
    assert backends(fast) == ["numba"], info(fast)


def _newton(x):
    for _ in range(8):
        x = x - 0.1 * (x ** 3 - 2.0) + 0.01 * x ** 2.5
    return x


def _power(x, y):
    return x ** y + math.sin(x) ** 2


def test_a_loop_on_python_floats_with_powers_is_a_numba_loop():
    for fn, wrt, args in ((_newton, 0, [(1.3,), (0.9,)]), (_power, (0, 1), [(1.5, 2.5), (0.7, -1.5)])):
        fast = bytegrad.differentiate(fresh(fn), wrt=wrt, tier="numba")
        general = bytegrad.differentiate(fn, wrt=wrt, tier="general")
        for a in args:
            assert_trees_close(fast.value_and_grad(*a), general.value_and_grad(*a), rtol=RTOL, atol=ATOL)
        assert backends(fast) == ["numba"], info(fast)


def _relu_loop(x, w):
    h = x
    for _ in range(4):
        h = np.maximum(h * w, 0.1) - np.minimum(h, -0.2) * 0.5
    return np.sum(h ** 2)


def test_maximum_and_minimum_in_an_element_loop_split_ties_as_the_general_path():
    fast = bytegrad.differentiate(fresh(_relu_loop), wrt=(0, 1), tier="numba")
    general = bytegrad.differentiate(_relu_loop, wrt=(0, 1), tier="general")
    x = np.array([-1.0, -0.2, 0.0, 0.1, 0.05, 0.3, 1.0, np.nan])  # ties with 0.1 and -0.2, and a NaN
    for w in (np.ones(8), np.linspace(-1.0, 2.0, 8)):
        got, want = fast.value_and_grad(x[:-1], w[:-1]), general.value_and_grad(x[:-1], w[:-1])
        assert_trees_close(got, want, rtol=RTOL, atol=ATOL)
    assert backends(fast) == ["numba"], info(fast)
    for a, b in ((0.1, 1.0), (0.5, 0.2), (-0.2, 1.0)):  # Python floats: ties and both sides
        f = bytegrad.differentiate(fresh(_relu_loop), wrt=(0, 1), tier="numba")
        assert_trees_close(f.value_and_grad(a, b), general.value_and_grad(a, b), rtol=RTOL, atol=ATOL)


def _tracked_exponent(x, p):
    return np.sum(x ** p)


def test_an_exponent_passed_in_is_read_at_each_call_not_baked_into_the_kernel():
    """`p` is a float argument, tracked by the capture: its value changes between calls, so the
    kernel must not write the partial x ** (p - 1) with the capture's p."""
    fast = bytegrad.differentiate(fresh(_tracked_exponent), tier="numba")
    general = bytegrad.differentiate(_tracked_exponent, tier="general")
    x = np.linspace(0.5, 1.5, 6)
    for p in (3.0, 2.0, 0.5):
        assert_trees_close(fast.value_and_grad(x, p), general.value_and_grad(x, p), rtol=RTOL, atol=ATOL)


def _attention(Wq, X):
    Q = X @ Wq
    scores = Q @ Q.T
    return np.mean(np.exp(scores - scores.max(axis=(0, 1), keepdims=True)))  # (a tuple of axes: no kernel form)


def test_tier_numba_says_why_the_numba_back_end_declined():
    fast = bytegrad.differentiate(fresh(_attention), tier="numba")
    rng = np.random.default_rng(0)
    args = (rng.standard_normal((4, 4)), rng.standard_normal((3, 4)))
    assert_trees_close(fast.grad(*args), bytegrad.differentiate(_attention, tier="general").grad(*args),
                       rtol=1e-12, atol=0.0)
    (prog,) = info(fast)["programs"]
    assert prog["backend"] == "numpy"
    line = _attention.__code__.co_firstlineno + 3  # `scores.max(axis=(0, 1), ...)`: no form in a kernel
    assert prog["numba"].startswith("the Numba back end declined: "), prog
    assert f"line {line} of _attention" in prog["numba"], prog
    out = io.StringIO()
    bytegrad.explain(fast, *args, file=out)
    assert prog["numba"] in out.getvalue()


def test_a_large_matrix_vector_product_keeps_the_numpy_back_end_with_its_reason():
    fast = bytegrad.differentiate(fresh(rnn), wrt=(0, 1, 2), tier="numba")
    fast.grad(*rnn_inputs(0, hidden=160, steps=2))  # 160 x 160 = 25,600 multiplications: BLAS's
    (prog,) = info(fast)["programs"]
    assert prog["backend"] == "numpy"
    assert "matmul" in prog["numba"] and "line" in prog["numba"], prog


def _pick(x, i, j):
    return np.sum(x[i] ** 2) + np.sum(x[i + 1, j:] * 3.0)


@pytest.mark.parametrize("tier", ["numpy", "numba"])
def test_an_index_from_an_int_argument_is_guarded(tier):
    fast = bytegrad.differentiate(fresh(_pick), tier=tier)
    general = bytegrad.differentiate(_pick, tier="general")
    x = np.arange(12.0).reshape(4, 3) / 7.0
    for i, j in ((0, 1), (0, 1), (2, 0), (1, 2), (0, 1)):
        assert_trees_close(fast.value_and_grad(x, i, j), general.value_and_grad(x, i, j), rtol=RTOL, atol=ATOL)
    if tier == "numba":
        assert set(backends(fast)) == {"numba"}, info(fast)


def test_a_float32_rnn_under_tier_numba_is_within_float32_rounding():
    """`h = np.zeros(n)` is float64 and the weights float32: the first products mix dtypes, which the
    kernel's matrix-vector form declines (and says so); the gradient is right either way."""
    fast = bytegrad.differentiate(fresh(rnn), wrt=(0, 1, 2), tier="numba")
    general = bytegrad.differentiate(rnn, wrt=(0, 1, 2), tier="general")
    for seed in range(2):
        args = tuple(a.astype(np.float32) for a in rnn_inputs(seed, hidden=8, steps=5, width=3))
        got, want = fast.value_and_grad(*args), general.value_and_grad(*args)
        assert_trees_close(got, want, rtol=policy.F32_RTOL, atol=policy.F32_RTOL * 10)
        assert got[1][0].dtype == np.float32
    (prog,) = info(fast)["programs"]
    assert prog["backend"] == "numba" or "matmul" in prog["numba"], prog


def test_a_program_over_the_numba_size_cap_is_left_to_numpy_with_its_reason(monkeypatch):
    """Numba's compile time grows faster than a kernel (numba_kernel.MAX_RECORDS): a program past the
    cap is a NumPy program under tier numba, and says why (the cap lowered here: no compile needed)."""
    from bytegrad.compiled import lower_numba

    monkeypatch.setattr(lower_numba, "MAX_RECORDS", 3)

    def chain(x):
        for _ in range(4):
            x = np.sin(x) * 0.5
        return np.sum(x)

    fast = bytegrad.differentiate(fresh(chain), tier="numba")
    general = bytegrad.differentiate(chain, tier="general")
    for k in range(3):
        x = np.linspace(0.0, 1.0, 5) + k
        np.testing.assert_allclose(fast.grad(x), general.grad(x), rtol=1e-12, atol=0)
    (prog,) = info(fast)["programs"]
    assert prog["backend"] == "numpy" and "over the Numba back end's 3" in prog["numba"], prog
