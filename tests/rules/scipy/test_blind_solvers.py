"""SciPy and NumPy entry points that call the user's Python function from C (MINPACK, TNC, DIRECT,
VODE, scipy.ndimage's generic filters and transforms, np.frompyfunc's ufuncs) and have no rule: a differentiated value reaching that function, through
`args=` or what it closes over, raises BlindCallError at the user's line. Each gave a gradient of
exactly 0 with no error before (through a closure), or a NoRuleError at SciPy's line (through args=).
The solvers bytegrad differentiates (root, brentq, quad...) are tested in test_solvers.py."""
from __future__ import annotations

import sys

import numpy as np
import pytest

pytest.importorskip("scipy")
import scipy.integrate as si  # noqa: E402
import scipy.ndimage as nd  # noqa: E402
import scipy.optimize as so  # noqa: E402

import bytegrad  # noqa: E402
from bytegrad.errors import BlindCallError  # noqa: E402

X = np.arange(4.0)

CLOSURE = {
    "leastsq": lambda a: so.leastsq(lambda z: np.array([z[0] - a, z[0] + 1.0]), np.zeros(1))[0][0],
    "curve_fit": lambda a: so.curve_fit(lambda x, k: k * x + a, X, 2.0 * X)[0][0],
    "ode-dopri5": lambda a: si.ode(lambda t, y: -a * y).set_integrator("dopri5").set_initial_value(
        [1.0], 0.0).integrate(1.0)[0],
    "ode-lsoda": lambda a: si.ode(lambda t, y: -a * y).set_integrator("lsoda").set_initial_value(
        [1.0], 0.0).integrate(1.0)[0],
    "direct": lambda a: so.direct(lambda z: (z[0] - a) ** 2, [(-2.0, 2.0)]).x[0],
    "fmin_tnc": lambda a: so.fmin_tnc(lambda z: np.sum((z - a) ** 2), np.zeros(2), approx_grad=True,
                                      disp=0)[0][0],
    "ndimage.generic_filter": lambda a: np.sum(nd.generic_filter(X, lambda w: np.sum(w) * a, size=3)),
    "ndimage.generic_filter1d": lambda a: np.sum(nd.generic_filter1d(
        X, lambda i, o: o.__setitem__(slice(None), i[1:-1] * a), 3)),
    "ndimage.geometric_transform": lambda a: np.sum(nd.geometric_transform(X, lambda c: (c[0] * a,))),
    "frompyfunc": lambda a: float(np.frompyfunc(lambda v: v * a, 1, 1)(np.array([1.0, 2.0])).sum()),
    "vectorize": lambda a: float(np.sum(np.vectorize(lambda v: v * a)(np.array([1.0, 2.0])))),
}

ARGS = {
    "curve_fit": lambda a: so.curve_fit(lambda x, k, c: k * x + c, X, 2.0 * X, p0=(1.0, a))[0][0],
    "ndimage.generic_filter": lambda a: np.sum(nd.generic_filter(X * a, np.sum, size=3)),
    "ode": lambda a: si.ode(lambda t, y, c: -c * y).set_integrator("dopri5").set_f_params(a).set_initial_value(
        [1.0], 0.0).integrate(1.0)[0],
    "leastsq": lambda a: so.leastsq(lambda z, c: np.array([z[0] - c, z[0] + 1.0]), np.zeros(1), args=(a,))[0][0],
}


def _raises_at_this_file(f):
    """The error (a BlindCallError, or on other SciPy versions whatever clear error SciPy's Python code
    meets first, such as curve_fit's `inspect` under 3.13) names this file's line."""
    with pytest.raises(bytegrad.DifferentiationError) as info:
        # (the default tier: `make test` runs it under BYTEGRAD_TIER=numpy and numba too, where the first
        # call is a capture)
        bytegrad.differentiate(f).grad(1.3)
    e = info.value
    if not isinstance(e, BlindCallError):
        assert e.caller is not None and e.caller.filename == __file__, str(e)
        return "silent zero, closure variable, passed beside it (another error came first)"
    assert e.loc is not None and e.loc.filename == __file__, str(e)
    return str(e)


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("name", list(CLOSURE))
def test_closure_over_a_differentiated_value(name):
    message = _raises_at_this_file(CLOSURE[name])
    if name not in ("frompyfunc", "vectorize"):  # (TNC's callable is SciPy's wrapper object, which holds the value)
        assert "silent zero" in message and ("closure variable" in message or "tnc" in name)


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("name", list(ARGS))
def test_differentiated_value_in_args(name):
    assert "passed beside it" in _raises_at_this_file(ARGS[name])


def test_constant_problem_is_left_alone():
    # nothing differentiated reaches the callable: the C call runs as usual
    f = lambda a: a * so.leastsq(lambda z: z - 1.0, np.zeros(1))[0][0]  # noqa: E731
    assert bytegrad.grad(f)(2.0) == pytest.approx(1.0, rel=1e-6)


def test_callable_reading_a_differentiated_global():
    # (leastsq calls the function once from Python first, where the rewrite finds the global)
    with pytest.raises(bytegrad.DifferentiationError, match="global SCALE"):
        bytegrad.grad(_through_global)(1.3)
    # straight to C, through a plain call chain: the frame watch finds it inside the Fortran callback.
    # On 3.12+ (sys.monitoring) f2py's dopri5 callback does not pass the error on: it prints it and
    # the integration fails with SciPy's own error instead; an error all the same, not a silent zero
    with pytest.raises(Exception) as info:
        bytegrad.grad(_through_global_to_c)(1.3)
    if sys.version_info < (3, 12):
        assert isinstance(info.value, BlindCallError) and "'SCALE'" in str(info.value)


SCALE = None


def _residual(z):
    return z - SCALE


def _through_global_to_c(a):
    global SCALE
    SCALE = a * 1.0
    try:
        return si.ode(lambda t, y: _residual(y)).set_integrator("dopri5").set_initial_value([1.0], 0.0).integrate(1.0)[0]
    finally:
        SCALE = None


def _through_global(a):
    global SCALE
    SCALE = a * 1.0
    try:
        return so.leastsq(_residual, np.zeros(1))[0][0]
    finally:
        SCALE = None
