"""Arrays made inside the function from constants (`0.1 * np.eye(n)`, `F.T`, `np.linspace(...)`) under
the compiled tier (issue 27).

A capture run rewrites the function with made arrays active (transform/activity.py `made_active`), so
what it computes from them is recorded and the program computes it again on every call; integer
arithmetic on made arrays alone is made again as the arrays are (compiled/made.py). Each program is
compared call by call with the general path under the numpy and numba tiers (values and gradients,
new values each call, then arguments of another shape), and must run compiled. Arrays computed
without the arguments from a global array or an integer array argument stay refused.
"""
from __future__ import annotations

import numpy as np
import pytest

import bytegrad
from bytegrad import transform
from bytegrad.errors import SourceLoc
from bytegrad.transform import pipeline

TIERS = ("numpy", "numba")


def _leaves(g):
    if isinstance(g, (tuple, list)):
        return [leaf for v in g for leaf in _leaves(v)]
    return [g]


def compare(f, calls, tier, wrt=0):
    """`f` under `tier` and on the general path, call by call; returns the tier's `stats()["compiled"]`."""
    fn = bytegrad.differentiate(f, tier=tier, wrt=wrt)
    ref = bytegrad.differentiate(f, tier="general", wrt=wrt)
    for k, args in enumerate(calls):
        got, want = fn.value_and_grad(*args), ref.value_and_grad(*args)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-12, atol=1e-12, err_msg=f"call {k}")
        for a, b in zip(_leaves(got[1]), _leaves(want[1]), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12, err_msg=f"call {k}")
    return fn.stats()["compiled"]


def ran_programs(stats):
    return sum(p["calls"] for p in stats["programs"])


# ---- the programs ----------------------------------------------------------------------------------


def eye_plus(A):
    return np.sum(A + 0.1 * np.eye(A.shape[0]))


def made_then_changed(x):
    return np.sum(x * (np.arange(3.0) * 2.0))  # (refused before issue 27: tests/test_compiled.py had it)


def eye_transposed(A):
    I = np.eye(A.shape[0])  # noqa: E741
    return np.sum(A @ I.T)


def kalman_like(q, z):
    F = np.array([[1.0, 1.0], [0.0, 1.0]])
    P = F @ np.diag(q ** 2) @ F.T
    return np.sum(P) * z


def zeros_filled(x):
    b = np.zeros(x.shape[0])
    b[0] = 2.0
    b[1:] = 0.5
    c = b * 3.0 - 1.0
    return np.sum(x * c)


def eye_times_argument(A, s):
    return np.sum(A * (np.eye(A.shape[0]) * s))


def linspace_weights(x):
    w = np.linspace(0.0, 1.0, x.shape[0]) ** 2
    return np.sum(w * x) + np.sum(w.cumsum() * x)


def made_reshaped_and_indexed(x):
    n = x.shape[0]
    M = np.arange(float(n * n)).reshape(n, n)
    return np.sum(M.T[0] * x) + np.sum(M[1:, :1].ravel() * x[1:]) + M[0, 1] * x[0]


def _kernel(v):
    K = 2.0 * np.eye(v.shape[0]) - 1.0
    return K.T @ v


def made_in_a_callee(x):
    return np.sum(_kernel(x) ** 2)


def eye_of_an_int_argument(x, k):
    return np.sum(x[:k, :k] @ (np.eye(k) * 0.5 + 1.0))


def full_of_a_float_argument(x, s):
    return np.sum(x * np.full(x.shape[0], s))


def integers_iterated(x):
    s = 0.0
    for i in np.arange(x.shape[0]):
        s = s + x[i] * i
    return s


def integer_arithmetic_as_index(x):
    idx = np.arange(x.shape[0]) + 1
    return np.sum(x[idx % x.shape[0]] ** 2)


def mask_from_made_integers(x):
    m = np.arange(x.shape[0]) % 2 == 0
    return np.sum(x[m] ** 2)


def integer_count(x):
    n = int(np.arange(4).sum())
    return np.sum(x) * n


def made_in_place(x):
    w = np.ones(x.shape[0])
    w *= 3.0
    w += np.arange(x.shape[0])
    return np.sum(w * x)


def _vec(n):
    return lambda rng: (rng.normal(size=n),)


def _mat(n):
    return lambda rng: (rng.normal(size=(n, n)),)


# (function, arguments at the first shape, at a second shape)
PROGRAMS = [
    (eye_plus, _mat(3), _mat(4)),
    (eye_transposed, _mat(3), _mat(2)),
    (made_then_changed, _vec(3), lambda r: (r.normal(size=(2, 3)),)),
    (kalman_like, lambda r: (r.normal(size=2), float(r.normal())), lambda r: (r.normal(size=2), 2.5)),
    (zeros_filled, _vec(3), _vec(5)),
    (eye_times_argument, lambda r: (r.normal(size=(3, 3)), float(r.normal())),
     lambda r: (r.normal(size=(2, 2)), float(r.normal()))),
    (linspace_weights, _vec(4), _vec(6)),
    (made_reshaped_and_indexed, _vec(3), _vec(4)),
    (made_in_a_callee, _vec(3), _vec(5)),
    (full_of_a_float_argument, lambda r: (r.normal(size=3), float(r.normal())),
     lambda r: (r.normal(size=4), float(r.normal()))),
    (integers_iterated, _vec(3), _vec(4)),
    (integer_arithmetic_as_index, _vec(3), _vec(5)),
    (mask_from_made_integers, _vec(4), _vec(5)),
    (integer_count, _vec(3), _vec(2)),
    (made_in_place, _vec(3), _vec(4)),
]


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("fn, first, second", PROGRAMS, ids=[p[0].__name__ for p in PROGRAMS])
def test_made_arrays_compile_and_agree_with_the_general_path(fn, first, second, tier):
    rng = np.random.default_rng(7)
    calls = [first(rng), first(rng), first(rng), second(rng), second(rng), first(rng)]
    st = compare(fn, calls, tier)
    assert st["not_compiled"] == {}, st["not_compiled"]
    assert ran_programs(st) >= 3  # (the capture's calls aside, programs answered)


@pytest.mark.parametrize("tier", TIERS)
def test_a_made_array_of_an_int_argument_follows_the_int(tier):
    """`np.eye(k)`, `k` an int argument: the int is guarded, so a new `k` makes a new program."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=(4, 4))
    calls = [(x, 2), (x * 2.0, 2), (x, 3), (x * 0.5, 3), (x, 2)]
    st = compare(eye_of_an_int_argument, calls, tier)
    assert st["not_compiled"] == {} and ran_programs(st) >= 2


# ---- integers computed from the arguments are not made again ---------------------------------------


def integers_from_the_argument(x):
    k = np.rint(x).astype(np.int64) + np.arange(x.shape[0])  # (changes with x's values)
    return np.sum(x * k)


@pytest.mark.parametrize("tier", TIERS)
def test_integers_computed_from_the_arguments_are_not_folded_into_the_program(tier):
    """Only integer records whose inputs are made integer arrays alone are made again (compiled/made.py):
    one that reads a differentiated value would be the capture's value for every call."""
    rng = np.random.default_rng(5)
    calls = [(rng.normal(size=3) * 3.0,) for _ in range(5)]
    compare(integers_from_the_argument, calls, tier)  # (equal values and gradients, compiled or not)


def made_integers_plus_an_integer_argument(x, idx):
    return np.sum(x[(np.arange(x.shape[0]) + idx) % x.shape[0]] ** 2)


@pytest.mark.parametrize("tier", TIERS)
def test_made_integers_with_an_integer_array_argument_follow_the_argument(tier):
    """`np.arange(n) + idx`, `idx` an integer array argument: not made again from the capture's `idx`."""
    rng = np.random.default_rng(6)
    calls = [(rng.normal(size=3), np.array([0, 1, 1])), (rng.normal(size=3), np.array([2, 2, 0])),
             (rng.normal(size=3), np.array([1, 0, 2]))]
    compare(made_integers_plus_an_integer_argument, calls, tier)


# ---- what stays refused ------------------------------------------------------------------------------

TABLE = np.array([1.0, 2.0, 3.0])


def made_from_a_global_array(x):
    W = np.array(TABLE) * 2.0
    return np.sum(W * x)


def made_from_a_global_array_transposed(x):
    W = np.asarray(TABLE).T
    return np.sum(W * x)


def made_from_an_integer_argument(x, idx):
    k = np.array(idx) * 2
    return np.sum(x[k // 2])


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("fn, why", [
    (made_from_a_global_array, "read from a global or module attribute"),
    (made_from_a_global_array_transposed, "read from a global or module attribute"),
], ids=lambda v: getattr(v, "__name__", None) or "")
def test_an_array_made_from_a_global_array_is_still_refused(fn, why, tier, monkeypatch):
    rng = np.random.default_rng(1)
    fast, general = bytegrad.differentiate(fn, tier=tier), bytegrad.differentiate(fn, tier="general")
    for k in range(4):
        if k == 2:
            monkeypatch.setitem(globals(), "TABLE", np.array([5.0, -1.0, 0.5]))  # (a program would miss this)
        x = rng.normal(size=3)
        np.testing.assert_allclose(fast.grad(x), general.grad(x), rtol=1e-12, atol=1e-12)
    st = fast.stats()["compiled"]
    assert st["programs"] == []
    (reason,) = st["not_compiled"].values()
    assert why in reason


@pytest.mark.parametrize("tier", TIERS)
def test_an_array_made_from_an_integer_array_argument_is_still_refused(tier):
    rng = np.random.default_rng(2)
    calls = [(rng.normal(size=3), np.array([0, 2])), (rng.normal(size=3), np.array([1, 1])),
             (rng.normal(size=3), np.array([2, 0]))]
    st = compare(made_from_an_integer_argument, calls, tier)
    assert st["programs"] == []
    (reason,) = st["not_compiled"].values()
    assert "integer or boolean array argument" in reason


# ---- the general path's rewrite is untouched ----------------------------------------------------------


def _hooked(fn, made):
    from bytegrad.transform.code import Bytecode

    code = fn.__code__
    loc = SourceLoc(code.co_filename, code.co_firstlineno, code.co_name)
    unit = pipeline.Unit(Bytecode.from_code(code, conserve_exception_block_stackdepth=True), frozenset({"A"}),
                         fn.__globals__, loc, fuse=False, made=made)
    return pipeline.run(unit).hooked


def test_only_a_capture_rewrite_hooks_operations_on_made_arrays():
    """`0.1 * np.eye(n)` and `A + ...`: the general rewrite hooks the maker call and the addition only;
    a capture's hooks the multiplication too. The two are cached apart."""
    assert _hooked(eye_plus, made=True) > _hooked(eye_plus, made=False)
    general = transform.rewrite_code(eye_plus.__code__, frozenset({"A"}), eye_plus.__globals__)
    capture = transform.rewrite_code(eye_plus.__code__, frozenset({"A"}), eye_plus.__globals__, made=True)
    assert general.co_code != capture.co_code
    A = np.ones((2, 2))
    f_general = transform.rewritten_function(made_in_a_callee, (A,), None, {id(A): 0})
    f_capture = transform.rewritten_function(made_in_a_callee, (A,), None, {id(A): 0}, True)
    assert f_general is not None and f_capture is not None and f_general.__code__ is not f_capture.__code__
    assert transform.rewritten_function(made_in_a_callee, (A,), None, {id(A): 0}) is f_general


# ---- what is left: a helper that makes an array on constants runs as it is -------------------------


def _basis(n):
    return 0.5 * np.eye(n)


def made_by_a_helper_on_constants(x):
    return np.sum(_basis(x.shape[0]) @ x)


def test_an_array_a_helper_made_on_constants_is_refused_with_its_reason():
    """`_basis(n)`, called with no differentiated argument, runs as it is (not rewritten): what it
    returns was not recorded, so the signature stays on the general path, and says why."""
    rng = np.random.default_rng(4)
    st = compare(made_by_a_helper_on_constants, [(rng.normal(size=3),) for _ in range(3)], "numpy")
    assert st["programs"] == []
    (reason,) = st["not_compiled"].values()
    assert "computed without the arguments" in reason and "called on constants" in reason
