"""Second order for the whole registry: every table case checked with check_rule(second_order=True).

The derivative of each rule's pullback (and forward rule) is checked against finite differences of
first derivatives: what grad-of-grad, hessians and hvp use. Every case whose input is complex
(test_complex's tables, the complex decompositions, fft...) runs in complex128. Real cases run in
float64: by default the first case of each function in each table, the cases listed below (fixed
or failing at second order), and the elementwise table; BYTEGRAD_SECOND_ORDER=all (make test-long)
runs every real case (about 1200, two minutes), and the first real case of every function again
with complex arrays (about 400, 30 s): every rule takes complex input right or refuses it clearly. A rule known to be wrong at second order is listed
in XFAIL with the reason, strict, so that a fix is noticed.
"""
from __future__ import annotations

import os

import numpy as np
import pytest

from bytegrad.rules.testing import check_rule

from .numpy import test_selection, test_ufuncs
from .test_rule_coverage import TABLE_MODULES

#: not checked by check_rule at first order either (x.flat is given as a 1-D array: test_selection)
_NOT_CHECK_RULE_CASES = [test_selection.FLAT]

XFAIL = {
    # real input
    "test_reductions/max-ties": "ties: max is not differentiable there (its finite differences cross the kink)",
}
_VECTORIZE = ("refused with NotImplementedRuleError: np.vectorize's per-element pullbacks run in the forward "
              "pass, unrecorded, so a nested derivative would lose their dependence on the arguments")
XFAIL.update({f"test_functional/{name}": _VECTORIZE for name in (
    "vectorize", "vectorize-list", "vectorize-broadcast", "vectorize-constant", "vectorize-excluded", "vectorize-excluded-float", "vectorize-excluded-array", "vectorize-otypes")})


#: real cases once wrong at second order (a value the rule derived before its pullback, a branch flat in p)
REGRESSIONS = {
    "test_linalg_decomp/qr-wide", "test_linalg_decomp/qr-complete-wide", "test_linalg_decomp/qr-r-wide",
    "test_statistics/average-weights-1d", "test_statistics/average-weights-axes", "test_statistics/average-returned",
    "test_statistics/average-keepdims", "test_ufunc_methods/logaddexp.reduce", "test_ufunc_methods/logaddexp.reduce-all",
    "test_signal/interp-scalar-x", "test_python_stdlib/statistics.pvariance", "test_python_stdlib/pvariance-mu",
    "test_python_stdlib/statistics.pstdev", "test_python_stdlib/pstdev-array", "test_python_stdlib/statistics.variance",
    "test_python_stdlib/statistics.stdev", "test_linalg/norm-float-order", "test_special/xlogy-zero-x",
    "test_linalg/scipy.linalg.sqrtm", "test_statistics/np.quantile", "test_statistics/quantile-float-q",
    "test_statistics/quantile-array-q", "test_statistics/quantile-differentiable-q",
    "test_statistics/quantile-axes-keepdims", "test_statistics/percentile-float-q", "test_statistics/percentile-positional",
    "test_cumulative/cumprod-zeros", "test_cumulative/cumprod-zeros-axis0", "test_cumulative/cumprod-zeros-flat",
    "test_cumulative/x.cumprod()-zeros", "test_numpy2/cumulative_prod-zeros", "test_numpy2/cumulative_prod-zeros-initial",
}
ALL_REAL = os.environ.get("BYTEGRAD_SECOND_ORDER", "") == "all"


def _dtype(case):
    return "complex128" if "complex128" in case.dtypes else "float64" if "float64" in case.dtypes else None


def _is_complex(x):
    if isinstance(x, (list, tuple)):
        return any(_is_complex(item) for item in x)
    if isinstance(x, dict):
        return any(_is_complex(item) for item in x.values())
    return isinstance(x, (complex, np.ndarray, np.generic)) and np.iscomplexobj(x)


def _params(want_complex):
    skip = {id(entry) for table in _NOT_CHECK_RULE_CASES for entry in table}
    out, seen = [], set()
    for module in TABLE_MODULES:
        mod = module.__name__.rsplit(".", 1)[-1]
        for table in module.TABLES:
            for i, entry in enumerate(table):
                if id(entry) in skip or not hasattr(entry, "dtypes"):
                    continue
                dtype = _dtype(entry)
                if dtype is None or _is_complex(entry.sample(dtype)) != want_complex:
                    continue
                key = f"{mod}/{entry.id}"
                first = (mod, id(entry.fn)) not in seen
                seen.add((mod, id(entry.fn)))
                if not (want_complex or ALL_REAL or first or key in XFAIL or key in REGRESSIONS):
                    continue
                marks = [pytest.mark.xfail(reason=XFAIL[key], strict=True)] if key in XFAIL else []
                out.append(pytest.param(entry, dtype, id=f"{key}-{i}", marks=marks))
    return out


@pytest.mark.parametrize("case,dtype", _params(True))
def test_second_order_on_complex_input(case, dtype):
    case.check(dtype, second_order=True)


@pytest.mark.parametrize("case,dtype", _params(False))
def test_second_order_on_real_input(case, dtype):
    case.check(dtype, second_order=True)


@pytest.mark.parametrize("entry", test_ufuncs.UNARY + test_ufuncs.BINARY, ids=lambda e: e.fn.__name__)
def test_second_order_of_elementwise_rules(entry):
    shapes = ((2, 3),) if len(entry.domains) == 1 else ((2, 3), (1, 3))
    check_rule(entry.fn, *entry.sample(shapes, "float64"), second_order=True)


def test_the_lists_name_table_cases():
    """Every XFAIL entry names a case of a table (a renamed case must not leave a stale entry)."""
    keys = {p.id.rsplit("-", 1)[0] for p in _params(True) + _params(False)}
    assert set(XFAIL) | REGRESSIONS <= keys, (set(XFAIL) | REGRESSIONS) - keys


# ---- every rule on complex input, not only the ones with complex cases ----------------------------

#: complexified cases known to fail at second order
COMPLEXIFIED_XFAIL: dict[str, str] = {
    # (scipy.special.gamma and psi were here until polygamma at complex z: rules/scipy/special.py)
}


def _complexified(x, rng):
    """`x` with every float64 array given a random imaginary part."""
    if type(x) is np.ndarray and x.dtype == np.float64:
        return x + 1j * rng.uniform(-0.5, 0.5, x.shape)
    if isinstance(x, list):
        return [_complexified(item, rng) for item in x]
    if isinstance(x, tuple) and not hasattr(x, "_fields"):
        return tuple(_complexified(item, rng) for item in x)
    return x


def _complexified_params():
    if not ALL_REAL:
        return []
    skip = {id(entry) for table in _NOT_CHECK_RULE_CASES for entry in table}
    out, seen = [], set()
    for module in TABLE_MODULES:
        mod = module.__name__.rsplit(".", 1)[-1]
        for table in module.TABLES:
            for entry in table:
                if id(entry) in skip or not hasattr(entry, "dtypes") or "float64" not in entry.dtypes:
                    continue
                if id(entry.fn) in seen or _is_complex(entry.sample("float64")):
                    continue
                seen.add(id(entry.fn))
                key = f"{mod}/{entry.id}"
                marks = ([pytest.mark.xfail(reason=COMPLEXIFIED_XFAIL[key], strict=True)]
                         if key in COMPLEXIFIED_XFAIL else [])
                out.append(pytest.param(entry, id=key, marks=marks))
    return out


@pytest.mark.parametrize("case", _complexified_params())
def test_second_order_on_complexified_real_cases(case):
    """The first real case of each function with complex float arrays (BYTEGRAD_SECOND_ORDER=all): a
    rule takes complex input right at both orders, or refuses it clearly (RuleCaseError, or NumPy's
    own TypeError/ValueError). This found np.linalg.slogdet, np.median and np.sign."""
    from bytegrad.errors import RuleCaseError

    args = tuple(_complexified(a, np.random.default_rng(7)) for a in case.sample("float64"))
    if not _is_complex(args):
        return
    try:
        case.fn(*args, **case.kwargs) if callable(case.fn) else None
    except (TypeError, ValueError):
        return  # NumPy or SciPy refuses complex input itself
    try:
        check_rule(case.fn, *args, through=case.through, rtol=case.rtol, atol=case.atol, second_order=True,
                   **case.kwargs)
    except RuleCaseError:
        pass  # the rule refuses complex input with a clear error
