"""Constructs the compiled tier takes beyond straight-line code (issue 27): rules that return a
tuple, `np.where` and zero-safe records, `//` of a differentiated value, nested lists passed to
`np.array`, `try`/`except`, `match`, sets and strings of constants, tables of functions.

Each is compared call by call with the general path under the numpy and numba tiers (values, and
gradients to 1e-12, with new values each call), and each guard or decision has an adversarial
program that gives a wrong result without it.

PYTEST_DONT_REWRITE: the programs' own `assert` statements must stay as Python compiles them.
"""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest

import bytegrad

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from gradcheck import agree_with_general  # noqa: E402

TIERS = ("numpy", "numba")


def compare(f, calls, tier, wrt=0):
    """`f` under `tier` against the general path, call by call (gradcheck.py `agree_with_general`), with
    this file's terms: an exception is part of the result; values and gradients to 1e-12, relative
    and absolute. Returns the tier's `stats()["compiled"]`."""
    return agree_with_general(f, calls, tier, wrt=wrt, atol=1e-12, exceptions=True)


def ran_programs(stats):
    """Calls a program answered (not counting the capture's)."""
    return sum(p["calls"] for p in stats["programs"])


def _rng_calls(make, n=6, seed=0):
    rng = np.random.default_rng(seed)
    return [make(rng) for _ in range(n)]


# ---- rules that return a tuple -------------------------------------------------------------------
# (losses that do not depend on the signs of singular vectors or eigenvectors)


def svd_loss(A):
    U, s, Vt = np.linalg.svd(A, full_matrices=False)
    return np.sum(s ** 2) + np.sum((U @ np.diag(s) @ Vt) ** 3)


def svd_values_only(A):
    return np.sum(np.linalg.svd(A)[1] ** 3)


def eigh_loss(A):
    w, V = np.linalg.eigh(A @ A.T + np.eye(3))
    return np.sum(np.sin(w)) + np.sum((V @ np.diag(w) @ V.T) ** 2)


def qr_loss(A):
    Q, R = np.linalg.qr(A)
    return np.sum((Q @ R) ** 2) + np.sum(np.diag(R) ** 2)


def slogdet_loss(L, x):
    S = L @ L.T + np.eye(len(x))
    sign, logdet = np.linalg.slogdet(S)
    return 0.5 * x @ np.linalg.inv(S) @ x + 0.5 * logdet * sign


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("f", [svd_loss, svd_values_only, eigh_loss, qr_loss])
def test_tuple_rules_agree_with_the_general_path(f, tier):
    stats = compare(f, _rng_calls(lambda r: (r.normal(size=(3, 3)),)), tier)
    assert not stats["not_compiled"] and ran_programs(stats) >= 4, stats


@pytest.mark.parametrize("tier", TIERS)
def test_slogdet_both_items_and_two_arguments(tier):
    stats = compare(slogdet_loss, _rng_calls(lambda r: (r.normal(size=(3, 3)), r.normal(size=3))), tier, wrt=(0, 1))
    assert not stats["not_compiled"] and ran_programs(stats) >= 4, stats


def test_the_numba_back_end_declines_a_tuple_rule_with_a_reason():
    fn = bytegrad.differentiate(svd_values_only, tier="numba")
    rng = np.random.default_rng(1)
    for _ in range(3):
        fn.grad(rng.normal(size=(3, 3)))
    progs = fn.stats()["compiled"]["programs"]
    assert progs and all(p["backend"] == "numpy" for p in progs)


# ---- np.where and zero-safe records --------------------------------------------------------------


def where_piecewise(x):
    return np.sum(np.where(x > 0, x ** 2, np.sin(x)) + np.where(x < -0.5, -x, 0.0))


def where_unselected_nan(x):
    r = np.sqrt(x)  # its partial is NaN (x < 0) or inf (x == 0) where the other branch is selected
    return np.sum(np.where(x > 0, r * 3.0, -x))


def where_on_a_scalar_decision(x):
    return np.sum(np.where(x[0] > 0, np.sin(x), x ** 3))


_FLIPPING = [np.array([1.0, -1.0, 2.0, 0.5]), np.array([1.5, -0.75, 2.5, 0.25]), np.array([-1.0, 1.0, -2.0, 0.0]),
             np.array([2.0, -1.0, 3.0, 0.5]), np.array([-0.3, -0.6, 0.7, -4.0])]


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("f", [where_piecewise, where_unselected_nan, where_on_a_scalar_decision])
def test_where_with_a_condition_that_flips_between_calls(f, tier):
    with np.errstate(all="ignore"):
        stats = compare(f, [(x,) for x in _FLIPPING], tier)
    assert not stats["not_compiled"] and ran_programs(stats) >= 1, stats


@pytest.mark.parametrize("tier", TIERS)
def test_the_unselected_branch_gives_an_exact_zero_not_nan(tier):
    """The zero-safe twin is what keeps NaN out: lowered as a plain elementwise step, sqrt's partial
    at x < 0 would multiply an exact zero into NaN."""
    fn = bytegrad.differentiate(where_unselected_nan, tier=tier)
    x = np.array([4.0, -1.0, 9.0, -2.0])
    with np.errstate(all="ignore"):
        grads = [fn.grad(x) for _ in range(4)]
    assert ran_programs(fn.stats()["compiled"]) >= 3
    for g in grads:
        np.testing.assert_array_equal(g, [0.75, -1.0, 0.5, -1.0])


# ---- `//` of a differentiated value: recorded, no derivative ---------------------------------------


def floordiv_values(x):
    return np.sum((x % 2.0) * x + (x // 1.0) * x ** 2 + np.mod(x, 1.0))


def floordiv_decides(x, y):
    q = x[0] // y[1]
    if q > 0:
        return np.sum(x * q) + y[0] ** 2
    return np.sum(x ** 2 * y)


@pytest.mark.parametrize("tier", TIERS)
def test_floordiv_is_computed_again_each_call(tier):
    """The floors change every call: a program that kept the capture's would be wrong."""
    stats = compare(floordiv_values, _rng_calls(lambda r: (r.normal(size=5) * 3,)), tier)
    assert not stats["not_compiled"] and ran_programs(stats) >= 4, stats


@pytest.mark.parametrize("tier", TIERS)
def test_a_decision_on_a_floordiv_is_checked(tier):
    calls = [(np.array([3.0, 1.0]), np.array([0.5, 2.0])), (np.array([5.0, 1.0]), np.array([0.5, 2.0])),
             (np.array([-3.0, 1.0]), np.array([0.5, 2.0])), (np.array([4.0, 2.0]), np.array([1.5, 2.0]))]
    stats = compare(floordiv_decides, calls, tier, wrt=(0, 1))
    assert ran_programs(stats) >= 1 and not stats["not_compiled"], stats


# ---- nested lists passed to np.array ---------------------------------------------------------------


def nested_array(x):
    a = x[0] * 2.0
    b = np.sin(x[1])
    M = np.array([[a, b], [b, a], [1.0, x[2] * a]])
    return np.sum(M ** 3) + np.array([a, b, 1.0]) @ np.array([b, a, 2.0])


def transition(x, dt):
    F = np.array([[1.0, dt], [0.0, 1.0]])
    return np.sum((F @ x) ** 2)


@pytest.mark.parametrize("tier", TIERS)
def test_nested_lists_of_differentiated_values(tier):
    stats = compare(nested_array, _rng_calls(lambda r: (r.normal(size=3),)), tier)
    assert not stats["not_compiled"] and ran_programs(stats) >= 4, stats


@pytest.mark.parametrize("tier", TIERS)
def test_a_float_argument_inside_a_nested_list_is_read_each_call(tier):
    stats = compare(transition, _rng_calls(lambda r: (r.normal(size=2), float(r.normal()))), tier)
    assert not stats["not_compiled"] and ran_programs(stats) >= 4, stats


# ---- try / except ----------------------------------------------------------------------------------


def raise_on_data(x):
    try:
        y = np.log(x)
        if y.sum() > 1.0:
            raise ValueError("too large")
        z = y * 2.0
    except ValueError:
        z = x
    finally:
        w = np.cos(x)
    return np.sum(z * x + w)


def cholesky_or_fallback(x):
    A = np.outer(x, x) + np.diag(x)  # positive definite while every x > 0
    try:
        L = np.linalg.cholesky(A)
        v = np.sum(L ** 2)
    except np.linalg.LinAlgError:
        v = np.sum(x ** 3)
    return v


def cholesky_or_fallback_again(x):  # (its own code object: programs are kept per code object)
    A = np.outer(x, x) + np.diag(x)
    try:
        L = np.linalg.cholesky(A)
        v = np.sum(L ** 2)
    except np.linalg.LinAlgError:
        v = np.sum(x ** 3)
    return v


def raise_always(x):
    y = np.sin(x)
    try:
        y = y * 3.0
        raise KeyError("always")
    except KeyError as e:
        y = y * len(e.args)
    return np.sum(y * x)


def raise_always_again(x):  # (its own code object)
    y = np.sin(x)
    try:
        y = y * 3.0
        raise KeyError("always")
    except KeyError as e:
        y = y * len(e.args)
    return np.sum(y * x)


def index_error_handled(x, n):
    try:
        a = x[n]
    except IndexError:
        a = x[0] * 3.0
    return a * x[1]


_POSITIVE_THEN_NOT = [np.array([0.5, 1.0, 0.25]), np.array([0.75, 0.5, 1.0]), np.array([4.0, 5.0, 6.0]),
                      np.array([0.5, 1.5, 0.25]), np.array([1.0, -3.0, 2.0]), np.array([0.25, 0.5, 0.75])]


@pytest.mark.parametrize("tier", TIERS)
def test_a_raise_statement_reached_on_the_third_call(tier):
    """The handler runs on the third call only (log's sum passes 1.0): the decision that leads to
    the `raise` sends that call to the general path."""
    stats = compare(raise_on_data, [(x,) for x in _POSITIVE_THEN_NOT[:4]], tier)
    assert not stats["not_compiled"] and ran_programs(stats) >= 2, stats


@pytest.mark.parametrize("tier", TIERS)
def test_an_operation_that_raises_on_a_later_call_runs_the_handler(tier):
    """cholesky raises on the fifth call only: the program raises there too, and the call is the
    general path's, handler included."""
    stats = compare(cholesky_or_fallback, [(x,) for x in _POSITIVE_THEN_NOT], tier)
    assert not stats["not_compiled"] and ran_programs(stats) >= 4, stats
    assert stats["general_calls"] >= 1


@pytest.mark.parametrize("tier", TIERS)
def test_a_handler_that_ran_on_an_operations_exception_is_not_replayed(tier):
    """The capture's call raised in cholesky and ran the handler: a program of that path would give
    the handler's result on the later calls, where cholesky does not raise (RaiseWatch)."""
    calls = [(x,) for x in [_POSITIVE_THEN_NOT[4], *_POSITIVE_THEN_NOT[:4]]]
    stats = compare(cholesky_or_fallback_again, calls, tier)
    assert ran_programs(stats) == 0
    assert any("raised by an operation" in why for why in stats["not_compiled"].values()), stats


@pytest.mark.parametrize("tier", TIERS)
def test_an_index_error_handled_keeps_the_signature_on_the_general_path(tier):
    stats = compare(index_error_handled, [(np.array([1.0, 2.0, 3.0]), 5)] * 3, tier)
    assert ran_programs(stats) == 0
    assert any("IndexError raised by an operation" in why for why in stats["not_compiled"].values()), stats


@pytest.mark.parametrize("tier", TIERS)
def test_a_raise_statement_reached_on_every_call(tier):
    stats = compare(raise_always, _rng_calls(lambda r: (r.normal(size=3),)), tier)
    assert not stats["not_compiled"] and ran_programs(stats) >= 4, stats


def test_a_tracer_set_already_keeps_code_with_handlers_off_the_tier():
    """Under a debugger or coverage the watch cannot see exceptions: such code is refused."""
    fn = bytegrad.differentiate(raise_always_again, tier="numpy")

    def tracer(frame, event, arg):
        return None

    old = sys.gettrace()
    sys.settrace(tracer)
    try:
        for _ in range(3):
            fn.grad(np.array([1.0, 2.0]))
    finally:
        sys.settrace(old)
    stats = fn.stats()["compiled"]
    assert ran_programs(stats) == 0
    assert any("tracer" in why for why in stats["not_compiled"].values()), stats


# ---- match, sets, strings --------------------------------------------------------------------------


def match_structure(params, x):
    match params:
        case {"w": w, "b": b}:
            z = x @ w + b
        case _:
            z = x
    match z.shape:
        case (n,) if n > 1:
            return np.sum(np.tanh(z) ** 2)
        case _:
            return np.sum(z)


def set_of_values(x):
    return sum({x[0], x[1]}) * x[2]


def set_unpacked(x):
    return sum({*x[:2]}) * x[2]


def set_length(x):
    return len({*x[:2]}) * x[2]


def set_loop(x):
    t = 0.0
    for v in {*x[:2]}:
        t = t + v
    return t * x[2]


def formatted_value(x):
    label = f"{x[0]:.1f}"
    return len(label) * x[1]


def formatted_by_method(x):
    return len(str(x[0])) * x[1]


def constants_in_sets_and_strings(x, n):
    label = f"step {n}: {'a' + str(n)}"
    if n in {1, 2, 3} and len(label) > 3:
        return np.sum(x ** 2)
    return np.sum(x)


@pytest.mark.parametrize("tier", TIERS)
def test_match_on_a_dicts_keys_and_a_shape(tier):
    def make(r):
        return {"w": r.normal(size=(3, 2)), "b": r.normal(size=2)}, r.normal(size=(4, 3))

    stats = compare(match_structure, _rng_calls(make), tier)
    assert not stats["not_compiled"] and ran_programs(stats) >= 4, stats


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("f", [set_of_values, set_unpacked, set_length, set_loop])
def test_a_set_of_differentiated_values_stays_on_the_general_path(f, tier):
    """Whether x[0] and x[1] are one item depends on their values (the third call: equal)."""
    calls = [(np.array([1.0, 2.0, 3.0]),), (np.array([1.5, 2.5, 3.0]),), (np.array([2.0, 2.0, 3.0]),)]
    stats = compare(f, calls, tier)
    assert ran_programs(stats) == 0
    assert any("set" in why for why in stats["not_compiled"].values()), stats


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("f", [formatted_value, formatted_by_method])
def test_a_string_made_from_a_differentiated_value(f, tier):
    """The string's length changes with the value's digits (the third call): an f-string stays on
    the general path; `str(x)` is a decision the program checks."""
    calls = [(np.array([1.0, 2.0]),), (np.array([2.0, 3.0]),), (np.array([-12.0, 2.0]),), (np.array([3.0, 1.0]),)]
    compare(f, calls, tier)


@pytest.mark.parametrize("tier", TIERS)
def test_sets_and_strings_of_constants(tier):
    stats = compare(constants_in_sets_and_strings, _rng_calls(lambda r: (r.normal(size=3), 2)), tier)
    assert not stats["not_compiled"] and ran_programs(stats) >= 4, stats


# ---- a table of functions --------------------------------------------------------------------------


def _relu(x):
    return np.maximum(x, 0.0)


ACT = {"tanh": np.tanh, "relu": _relu, "sin": np.sin}


def act_table(x, name):
    return np.sum(ACT[name](x) ** 2)


@pytest.mark.parametrize("tier", TIERS)
def test_an_activation_table_entry_replaced_between_calls_is_seen(tier):
    fn = bytegrad.differentiate(act_table, tier=tier)
    ref = bytegrad.differentiate(act_table, tier="general")
    rng = np.random.default_rng(3)
    try:
        for k in range(8):
            if k == 3:
                ACT["tanh"] = np.sin
            elif k == 5:
                ACT["tanh"] = _relu
            x = rng.normal(size=4)
            got, want = fn.value_and_grad(x, "tanh"), ref.value_and_grad(x, "tanh")
            # (a Numba kernel sums in its own order: equal to rounding, where a missed entry is far off)
            np.testing.assert_allclose(got[0], want[0], rtol=1e-12, atol=1e-300)
            np.testing.assert_allclose(got[1], want[1], rtol=1e-12, atol=1e-300)
    finally:
        ACT["tanh"] = np.tanh
    stats = fn.stats()["compiled"]
    assert ran_programs(stats) >= 4 and len(stats["programs"]) >= 3, stats


# ---- random draws ----------------------------------------------------------------------------------


def local_generator(x):
    rng = np.random.default_rng()
    return np.sum(x * rng.random())


def seeded_noise(x):
    rng = np.random.default_rng(1234)
    noise = rng.normal(size=x.shape)
    return np.sum(np.tanh(x + 0.1 * noise))


@pytest.mark.parametrize("tier", TIERS)
def test_a_generator_made_inside_draws_anew_each_call(tier):
    """A program would replay the capture's draw: an unseeded generator made inside the function
    must give a new value each call, as on the general path."""
    fn = bytegrad.differentiate(local_generator, tier=tier)
    values = {float(fn.value_and_grad(np.ones(3))[0]) for _ in range(5)}
    assert len(values) == 5
    stats = fn.stats()["compiled"]
    assert ran_programs(stats) == 0
    assert any("random" in why for why in stats["not_compiled"].values()), stats


@pytest.mark.parametrize("tier", TIERS)
def test_seeded_draws_stay_on_the_general_path_with_a_reason(tier):
    stats = compare(seeded_noise, _rng_calls(lambda r: (r.normal(size=4),)), tier)
    assert ran_programs(stats) == 0
    assert any("random" in why for why in stats["not_compiled"].values()), stats  # (the draw's reason, or
    # compiled/nested.py's for a module callable without a rule, whichever the check meets first)


# ---- asserts ---------------------------------------------------------------------------------------


def asserted(x):
    assert np.all(x > -5.0), "x must be above -5"
    assert x.dtype.kind == "f" and x.ndim == 1
    assert x.sum() < 100.0
    return np.sum(np.sin(x) * x)


@pytest.mark.parametrize("tier", TIERS)
def test_an_assert_that_fails_on_a_later_call_raises_as_on_the_general_path(tier):
    calls = [(np.array([1.0, 2.0]),), (np.array([0.5, 3.0]),), (np.array([-6.0, 1.0]),), (np.array([1.0, 2.5]),),
             (np.array([60.0, 50.0]),), (np.array([0.25, 0.75]),)]
    stats = compare(asserted, calls, tier)
    assert not stats["not_compiled"] and ran_programs(stats) >= 3, stats


# ---- with np.errstate(...) -------------------------------------------------------------------------


def errstate_ignore(x):
    with np.errstate(divide="ignore", invalid="ignore"):
        y = np.log(x) / x
    return np.sum(y)


def errstate_raise(x):
    with np.errstate(divide="raise"):
        y = np.log(x)
    return np.sum(y * x)


def errstate_nested(x):
    with np.errstate(all="ignore"):
        a = np.log(x)
        with np.errstate(divide="raise"):
            b = 1.0 / x
        c = np.sqrt(x)
    return np.sum(a + b + c)


def _log_of(x):
    return np.log(x)


def errstate_around_a_callee(x):
    with np.errstate(divide="raise"):
        y = _log_of(x)
    return np.sum(y * x)


def errstate_with_return(x):
    with np.errstate(divide="raise"):
        return np.sum(np.log(x) * x)


def errstate_early_return(x):
    with np.errstate(divide="raise"):
        if x.shape[0] > 5:
            return np.sum(x)
        y = np.log(x)
    return np.sum(y * x)


_WITH_A_ZERO = [(np.array([1.0, 2.0]),), (np.array([0.5, 3.0]),), (np.array([0.0, 1.0]),), (np.array([2.0, 0.5]),)]


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("f", [errstate_ignore, errstate_raise, errstate_nested, errstate_with_return])
def test_errstate_blocks_report_as_on_the_general_path(f, tier):
    """The third call divides by zero: ignored, or FloatingPointError, as the block says (a program
    whose steps ran outside the block would return a value where the general path raises)."""
    with np.errstate(all="ignore"):  # (the reverse pass runs outside the block on both paths)
        stats = compare(f, _WITH_A_ZERO, tier)
    assert not stats["not_compiled"] and ran_programs(stats) >= 2, stats


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("f", [errstate_around_a_callee, errstate_early_return])
def test_errstate_blocks_a_program_cannot_mark_stay_on_the_general_path(f, tier):
    with np.errstate(all="ignore"):
        stats = compare(f, _WITH_A_ZERO, tier)
    assert ran_programs(stats) == 0
    assert stats["not_compiled"], stats


# ---- pullback programs -----------------------------------------------------------------------------


def svd_where_floor(A):
    U, s, Vt = np.linalg.svd(A, full_matrices=False)
    return np.where(s > 1.0, s ** 2, np.sin(s)) + (A // 1.0).sum() + np.sum(U @ np.diag(s) @ Vt, axis=0)


def test_pullback_programs_take_tuple_rules_where_and_floordiv():
    results = {}
    for tier in ("numpy", "general"):
        rng = np.random.default_rng(5)
        f = bytegrad.differentiate(svd_where_floor, tier=tier)
        outs = []
        for k in range(6):
            A = rng.normal(size=(3, 3)) * (3.0 if k == 3 else 1.0)
            out, back = f.pullback(A)
            outs.append((out, back(rng.normal(size=3))[0]))
        results[tier] = (outs, f.stats().get("compiled_pullback"))
    for (a, ga), (b, gb) in zip(results["numpy"][0], results["general"][0]):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(ga, gb, rtol=1e-12, atol=1e-12)
    assert ran_programs(results["numpy"][1]) >= 3, results["numpy"][1]


def _safe_log(v):
    try:
        return np.log(v)
    except FloatingPointError:
        return v


def calls_a_callee_with_handlers(x):
    return np.sum(_safe_log(x) * x)


@pytest.mark.parametrize("tier", TIERS)
def test_a_callee_with_handlers_under_a_caller_without_compiles(tier):
    """The watch starts when the run calls a callee with handlers (constructs.watch_callee), so the
    caller needs none of its own (tests/test_compiled_callee_handlers.py: the handler taken)."""
    stats = compare(calls_a_callee_with_handlers, _rng_calls(lambda r: (r.uniform(0.5, 2.0, size=3),)), tier)
    assert ran_programs(stats) >= 1, stats
