"""scipy.stats rules against finite differences (float64 and float32), and through bytegrad.grad."""
from __future__ import annotations

import numpy as np
import pytest

from bytegrad.errors import RuleCaseError

st = pytest.importorskip("scipy.stats")

from ..cases import Arr, Gen, Num, case, params  # noqa: E402

X = Arr((4,), lo=-2.0, hi=2.0)
POSX = Arr((4,), lo=0.2, hi=3.0)
UNITX = Arr((4,), lo=0.1, hi=0.9)
LOC = Num(-0.5, 0.5)
SCALE = Num(0.8, 1.5)
POS = Num(1.5, 4.0)

# (distribution, x, shape parameters): x is where the density is smooth (away from laplace's kink at loc)
DISTRIBUTIONS = [
    (st.norm, X, ()), (st.cauchy, X, ()), (st.laplace, Arr((4,), lo=1.0, hi=2.0, signed=True), ()),
    (st.expon, Arr((4,), lo=1.0, hi=3.0), ()), (st.t, X, (POS,)), (st.gamma, Arr((4,), lo=1.0, hi=3.0), (POS,)),
    (st.beta, Gen(lambda rng, dtype: (0.35 + 0.3 * rng.uniform(0, 1, 4) * 0.8 + 0.4 * 0.4).astype(dtype)), (POS, POS)),
]
CONTINUOUS = [
    case(getattr(dist, method).__func__, dist, x, *shapes, LOC, SCALE, name=f"{dist.name}.{method}")
    for dist, x, shapes in DISTRIBUTIONS
    for method in ("logpdf", "pdf", "cdf", "logcdf")
    if method in ("logpdf", "pdf") or not shapes
] + [
    # cdf and logcdf of t, gamma, beta in x, loc and scale (their shape parameters are given, not differentiated)
    case(getattr(dist, method).__func__, dist, x, *(2 + i for i in range(len(shapes))), LOC, SCALE,
         name=f"{dist.name}.{method}-fixed-shapes")
    for dist, x, shapes in DISTRIBUTIONS if shapes for method in ("cdf", "logcdf")
] + [
    case(st.norm.logpdf.__func__, st.norm, X, name="norm.logpdf-standard"),
    case(st.norm.logpdf.__func__, st.norm, Arr((2, 3)), Arr((3,), lo=-0.5, hi=0.5), Arr((2, 1), lo=0.5, hi=2.0),
         name="norm.logpdf-broadcast"),
    case(st.norm.logcdf.__func__, st.norm, Arr((4,), lo=-8.0, hi=-5.0), name="norm.logcdf-left-tail"),
]


def _spd(rng, dtype):
    b = rng.uniform(-1, 1, (3, 3))
    return (b @ b.T + 3 * np.eye(3)).astype(dtype)


DISCRETE = [
    case(st.poisson.logpmf.__func__, st.poisson, np.array([0, 2, 5]), Num(0.5, 4.0), name="poisson.logpmf"),
    case(st.poisson.logpmf.__func__, st.poisson, np.array([1, 3, 6]), Arr((3,), lo=0.5, hi=4.0), 1,
         name="poisson.logpmf-loc"),
    case(st.binom.logpmf.__func__, st.binom, np.array([0, 2, 5]), 6, Arr((3,), lo=0.2, hi=0.8), name="binom.logpmf"),
]
MVN = st.multivariate_normal
MULTIVARIATE = [
    case(type(MVN).logpdf, MVN, Arr((3,)), Arr((3,)), Gen(_spd), name="mvn.logpdf"),
    case(type(MVN).logpdf, MVN, Arr((5, 3)), Arr((3,)), Gen(_spd), name="mvn.logpdf-points"),
    case(type(MVN).pdf, MVN, Arr((5, 3)), Arr((3,), lo=-0.3, hi=0.3), Gen(_spd), name="mvn.pdf-points"),
    case(type(MVN).logpdf, MVN, Arr((4, 3)), Arr((3,)), Arr((3,), lo=1.0, hi=2.0), name="mvn.logpdf-diagonal"),
    case(type(MVN).logpdf, MVN, Arr((4, 2)), Arr((2,)), Num(1.0, 2.0), name="mvn.logpdf-scalar-cov"),
    case(type(MVN).logpdf, MVN, Arr((4, 2)), Arr((2,)), name="mvn.logpdf-default-cov"),
]
TABLES = [CONTINUOUS, DISCRETE, MULTIVARIATE]


@pytest.mark.parametrize("case,dtype", params(CONTINUOUS + DISCRETE + MULTIVARIATE))
def test_stats_rule(case, dtype):
    case.check(dtype)


def _fd_grad(f, x, eps=1e-6):
    g = np.zeros_like(x)
    for i in range(x.size):
        e = np.zeros_like(x)
        e.flat[i] = eps
        g.flat[i] = (f(x + e) - f(x - e)) / (2 * eps)
    return g


def test_keyword_loc_and_scale_and_frozen_distributions_differentiate():
    import bytegrad

    x = np.array([0.3, -1.2, 2.0])

    def nll(theta):
        return -np.sum(st.norm.logpdf(x, loc=theta[0], scale=np.exp(theta[1])))

    def frozen(theta):
        return -np.sum(st.t(df=theta[2], loc=theta[0], scale=theta[1]).logpdf(x))

    for f, theta in [(nll, np.array([0.2, 0.1])), (frozen, np.array([0.2, 1.3, 4.0]))]:
        assert np.allclose(bytegrad.grad(f)(theta), _fd_grad(f, theta), rtol=1e-6)


def test_cdf_in_a_shape_parameter_is_a_clear_error():
    import bytegrad

    with pytest.raises(RuleCaseError, match="shape parameters") as info:
        bytegrad.grad(lambda a: st.gamma.cdf(1.5, a))(2.0)
    assert info.value.loc is not None and info.value.loc.filename == __file__  # the user's line
    # in x alone it differentiates
    assert np.isclose(bytegrad.grad(lambda x: st.gamma.cdf(x, 2.0))(1.5), st.gamma.pdf(1.5, 2.0))


def test_a_distribution_without_a_rule_goes_through_scipy_code():
    import bytegrad

    lognorm = getattr(st, "lognorm")
    try:
        g = bytegrad.grad(lambda x: np.sum(lognorm.logpdf(x, 0.7)))(np.array([0.5, 1.5]))
    except bytegrad.errors.DifferentiationError:
        return  # scipy's code reached a function bytegrad has no rule for: a clear error, as before
    assert np.allclose(g, _fd_grad(lambda x: np.sum(lognorm.logpdf(x, 0.7)), np.array([0.5, 1.5])), rtol=1e-6)
