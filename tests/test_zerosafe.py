"""NaN-safe masks (runtime/zerosafe.py): the branch np.where, np.select or `y[mask] = v` did not
select contributes an exact zero, even where its partial derivative is inf or NaN; first and
second order, reverse and forward mode, against finite differences and known values."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import bytegrad
from bytegrad.runtime import fused
from bytegrad.runtime.backward import UNARY

from gradcheck import check_grad

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # sqrt(-1) in the unselected branch


def where_sqrt(x):
    return np.sum(np.where(x >= 0, x, np.sqrt(-x)))


def where_sqrt_cubed(x):
    return np.sum(np.where(x >= 0, x ** 3, np.sqrt(-x)))


def where_scaled(x, w):
    return np.sum(np.where(x >= 0, x, w * np.sqrt(-x)))  # w broadcasts: its cotangent is a sum


def select_logs(x):
    return np.sum(np.select([x > 1, x > 0], [np.log(x - 1), np.sqrt(x)], x ** 2))


def masked_write(x):
    y = np.sqrt(x)
    y[x < 0] = 0.0
    return np.sum(y * y + y)


def where_inf_partial(x):
    return np.sum(np.where(x > 0, np.sqrt(x), 0.0))  # sqrt's partial is +inf at 0, unselected there


X = np.array([1.0, -4.0, 0.0, 2.5, -0.25])


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_the_issue_example_has_the_selected_branch_gradient(dtype):
    x = X.astype(dtype)
    g = bytegrad.grad(where_sqrt)(x)
    assert g.dtype == dtype
    np.testing.assert_allclose(g, [1.0, -0.25, 1.0, 1.0, -1.0], rtol=1e-6)
    assert bytegrad.grad(lambda x: np.sum(np.where(x >= 0, x, np.sqrt(-x))))(1.0) == 1.0  # a Python float
    assert bytegrad.grad(where_sqrt)(np.float64(1.0)) == 1.0


@pytest.mark.parametrize("fn,x", [
    (where_sqrt, X), (where_sqrt_cubed, X), (select_logs, np.array([2.0, 0.5, -1.0, 3.0, 0.25])),
    (masked_write, np.array([1.0, -4.0, 2.0, -0.5])), (where_inf_partial, np.array([0.0, -1.0, 2.0])),
], ids=lambda v: getattr(v, "__name__", ""))
def test_gradients_are_finite_and_match_finite_differences(fn, x):
    x = x[x != 0.0]  # central differences straddle the boundary at 0 (the exact values are tested below)
    g = bytegrad.grad(fn)(x)
    assert np.isfinite(g).all(), g
    check_grad(fn, (x,))


def test_inf_partial_of_the_unselected_branch_gives_zero():
    np.testing.assert_array_equal(bytegrad.grad(where_inf_partial)(np.array([0.0, -1.0, 4.0])), [0.0, 0.0, 0.25])


def test_a_broadcast_argument_of_the_unselected_branch_gets_only_the_selected_slots():
    x = np.array([1.0, -4.0, -0.25, 2.0])
    gx, gw = bytegrad.grad(where_scaled, wrt=(0, 1))(x, 3.0)
    assert gw == pytest.approx(2.0 + 0.5)  # sqrt(4) + sqrt(0.25): x >= 0 slots contribute nothing
    np.testing.assert_allclose(gx, [1.0, -3 * 0.25, -3 * 1.0, 1.0])
    check_grad(where_scaled, (x, 3.0), wrt=(0, 1))


def test_select_and_masked_write_values():
    x = np.array([2.0, 0.5, -1.0])
    np.testing.assert_allclose(bytegrad.grad(select_logs)(x), [1.0, 0.5 / np.sqrt(0.5), -2.0])
    np.testing.assert_allclose(bytegrad.grad(masked_write)(np.array([4.0, -4.0])), [1.0 + 0.25, 0.0])


def test_a_selected_inf_is_still_inf_and_a_gradient_without_a_mask_is_left_as_it_was():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert bytegrad.grad(lambda x: np.sum(np.where(x >= 0, np.sqrt(x), x)))(np.array([0.0]))[0] == np.inf
        # no mask recorded: IEEE arithmetic, 0 * inf is NaN (the rule is about masks)
        assert np.isnan(bytegrad.grad(lambda x: np.sum(0.0 * np.sqrt(x)))(np.array([0.0]))[0])
    d = bytegrad.differentiate(lambda x: np.sum(np.sqrt(x) * 2.0))
    _, tape, _, _ = d._forward((np.array([1.0, 2.0]),), {}, d._wrt, True)
    assert any(n is not None and n[0] is UNARY for n in tape.nodes) and tape.guarded == 0


@pytest.mark.parametrize("fn,x", [
    (where_sqrt, X), (select_logs, np.array([2.0, 0.5, -1.0])), (masked_write, np.array([1.0, -4.0, 2.0])),
], ids=lambda v: getattr(v, "__name__", ""))
def test_jvp_takes_the_tangent_of_the_selected_branch(fn, x):
    v = np.linspace(0.5, 1.5, len(x))
    _, tangent = bytegrad.jvp(fn, (x,), (v,))
    assert np.isfinite(tangent)
    assert tangent == pytest.approx(float(bytegrad.grad(fn)(x) @ v), rel=1e-12)


def _numerical_hessian(fn, x, eps=1e-5):
    g = bytegrad.grad(fn)
    cols = [(g(x + eps * e) - g(x - eps * e)) / (2 * eps) for e in np.eye(len(x))]
    return np.stack(cols, axis=-1)


@pytest.mark.parametrize("mode", ["fwd", "rev"])
@pytest.mark.parametrize("fn,x", [
    (where_sqrt_cubed, np.array([1.0, -4.0, 2.0])), (select_logs, np.array([2.0, 0.5, -1.0])),
    (masked_write, np.array([1.0, -4.0, 2.0])),
], ids=lambda v: getattr(v, "__name__", ""))
def test_second_order(fn, x, mode):
    H = bytegrad.hessian(fn, mode=mode)(x)
    assert np.isfinite(H).all(), H
    np.testing.assert_allclose(H, _numerical_hessian(fn, x), rtol=1e-6, atol=1e-6)


def test_second_order_known_values_and_nested_grad():
    H = bytegrad.hessian(where_sqrt_cubed)(np.array([1.0, -4.0]))
    np.testing.assert_allclose(H, np.diag([6.0, -1.0 / 32.0]))
    f = lambda x: np.where(x >= 0, x ** 3, np.sqrt(-x))  # noqa: E731
    assert bytegrad.grad(bytegrad.grad(f))(1.0) == pytest.approx(6.0)
    assert bytegrad.grad(bytegrad.grad(f))(-4.0) == pytest.approx(-1.0 / 32.0)


@pytest.mark.parametrize("policy", ["always", "never"])
def test_a_fused_site_in_the_unselected_branch(policy, monkeypatch):
    monkeypatch.setattr(fused, "POLICY", policy)

    def f(x, w):
        return np.sum(np.where(x >= 0, x, np.sqrt(-x) * w + 1.0))

    x = np.array([1.0, -4.0, 0.5, -1.0])
    gx, gw = bytegrad.grad(f, wrt=(0, 1))(x, 2.0)
    np.testing.assert_allclose(gx, [1.0, -0.5, 1.0, -1.0])
    assert gw == pytest.approx(3.0)
