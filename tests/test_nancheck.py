"""Debug mode for NaNs (runtime/nancheck.py): `bytegrad.config.debug_nans` or BYTEGRAD_DEBUG_NANS=1
raises NaNError at the first NaN or inf an operation produces, forward or reverse, naming the line
and the operation; off, gradients run on the plain tape and sweep."""
from __future__ import annotations

import inspect
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import bytegrad
from bytegrad.runtime.tape import Tape

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


@pytest.fixture
def debug_nans():
    old = bytegrad.config.debug_nans
    bytegrad.config.debug_nans = True
    yield
    bytegrad.config.debug_nans = old


def _line_of(fn, text):
    lines, first = inspect.getsourcelines(fn)
    return first + next(k for k, line in enumerate(lines) if text in line)


def log_loss(x):
    y = x * 2.0
    z = np.log(y - 1.0)
    return np.sum(z * z)


def sqrt_loss(x):
    y = np.sqrt(x)
    return np.sum(y + x)


def test_the_first_nan_of_the_forward_pass_names_the_line_and_the_operation(debug_nans):
    with pytest.raises(bytegrad.NaNError) as info:
        bytegrad.grad(log_loss)(np.array([2.0, 0.25]))
    err = info.value
    assert isinstance(err, bytegrad.DifferentiationError)
    assert err.loc.lineno == _line_of(log_loss, "np.log(") and err.loc.filename == __file__
    assert "numpy.log produced NaN in 1 of its 2 elements" in str(err)
    assert "z = np.log(y - 1.0)" in str(err)


def test_the_first_inf_of_the_reverse_pass_names_the_line_and_the_operation(debug_nans):
    assert bytegrad.grad(sqrt_loss)(np.array([4.0])) == pytest.approx(1.25)  # finite: no error
    with pytest.raises(bytegrad.NaNError) as info:
        bytegrad.grad(sqrt_loss)(np.array([0.0, 4.0]))
    err = info.value
    assert err.loc.lineno == _line_of(sqrt_loss, "np.sqrt(")
    assert "reverse pass of numpy.sqrt produced inf in 1 of its 2 elements" in str(err)


def test_off_by_default_the_nan_goes_through_on_the_plain_tape():
    assert not bytegrad.config.debug_nans
    g = bytegrad.grad(log_loss)(np.array([2.0, 0.25]))
    assert np.isnan(g[1])
    d = bytegrad.differentiate(log_loss)
    _, tape, _, _ = d._forward((np.array([2.0]),), {}, d._wrt, True)
    assert type(tape) is Tape and type(tape.nodes) is list and not tape.nan_check


def test_environment_variable_turns_it_on():
    code = ("import numpy as np, bytegrad\n"
            "assert bytegrad.config.debug_nans\n"
            "try:\n    bytegrad.grad(lambda x: np.sum(np.log(x)))(np.array([-1.0]))\n"
            "except bytegrad.NaNError as e:\n    print('raised', e.loc.lineno)\n")
    env = {**os.environ, "BYTEGRAD_DEBUG_NANS": "1", "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["raised", "4"]


def test_finite_gradients_are_unchanged_in_debug_mode(debug_nans):
    rng = np.random.default_rng(0)
    params = {"W": rng.standard_normal((4, 3)), "b": np.zeros(3)}
    x = rng.standard_normal((5, 4))

    def mlp(p, x):
        h = np.tanh(x @ p["W"] + p["b"])
        return np.mean(np.log(1.0 + np.exp(h)))

    g = bytegrad.grad(mlp)(params, x)
    bytegrad.config.debug_nans = False
    g0 = bytegrad.grad(mlp)(params, x)
    bytegrad.config.debug_nans = True
    for k in params:
        np.testing.assert_array_equal(g[k], g0[k])
    H = bytegrad.hessian(lambda v: np.sum(np.sin(v) * v ** 2))(np.array([0.5, 1.5]))
    assert np.isfinite(H).all()
    _, tangent = bytegrad.jvp(lambda v: np.exp(v), (np.array([1.0]),), (np.array([1.0]),))
    assert tangent[0] == pytest.approx(np.e)


def test_a_pullback_swept_twice_keeps_its_records(debug_nans):
    out, back = bytegrad.vjp(lambda x: np.sin(x) * x, np.array([0.5, 1.0]))
    first, = back(np.ones(2))
    second, = back(np.ones(2))
    np.testing.assert_array_equal(first, second)
    with pytest.raises(bytegrad.NaNError, match="reverse pass"):
        back(np.array([np.inf, 1.0]))  # a non-finite seed: reported at the first step it reaches


def test_filling_an_array_slot_by_slot_is_not_reported(debug_nans):
    def fill(x):
        out = np.full(3, np.nan)  # garbage until every slot is written
        for i in range(3):
            out[i] = x[i] * 2.0
        return np.sum(out)

    np.testing.assert_array_equal(bytegrad.grad(fill)(np.array([1.0, 2.0, 3.0])), [2.0, 2.0, 2.0])


def test_a_nan_in_an_unselected_branch_is_reported_too(debug_nans):
    # as jax_debug_nans: the forward pass computes np.sqrt(-1); the gradient itself would be finite
    with pytest.raises(bytegrad.NaNError, match="numpy.sqrt produced NaN"):
        bytegrad.grad(lambda x: np.sum(np.where(x >= 0, x, np.sqrt(-x))))(np.array([1.0]))


def test_second_order_names_the_line_that_recorded_the_operation(debug_nans):
    def cube_of_root(v):
        return np.sum(np.sqrt(v) ** 3)

    for mode in ("fwd", "rev"):
        with pytest.raises(bytegrad.NaNError) as info:
            bytegrad.hessian(cube_of_root, mode=mode)(np.array([0.0, 1.0]))
        assert info.value.loc.lineno == _line_of(cube_of_root, "np.sqrt(v)"), str(info.value)
    assert np.isfinite(bytegrad.hessian(cube_of_root)(np.array([4.0, 1.0]))).all()
