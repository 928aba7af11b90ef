"""check_rule itself: it passes correct rules and catches each kind of wrong one with a clear message.

Every rule here is registered for a throwaway function, and the registry is restored after each test.
"""
from __future__ import annotations

import numpy as np
import pytest

from bytegrad.rules import registry
from bytegrad.rules.registry import NO_TANGENT, ZERO, frule, non_differentiable, rrule, scalar_rule
from bytegrad.rules.testing import check_rule

X = np.linspace(-1.0, 1.0, 6).reshape(2, 3)


@pytest.fixture(autouse=True)
def restore_registry():
    before = registry.all_rules()
    yield
    with registry._LOCK:
        registry._RULES.clear()
        registry._RULES.update(before)


def _sum_of_squares(x, axis=None):
    return np.sum(x * x, axis=axis)


def _register_sum_of_squares(pullback_of):
    fn = lambda x, axis=None: _sum_of_squares(x, axis)  # noqa: E731  (a fresh function per test)

    @rrule(fn)
    def fn_rrule(x, axis=None):
        return fn(x, axis), lambda out_bar: pullback_of(x, axis, out_bar)

    return fn


def _correct(x, axis, out_bar):
    ob = out_bar if axis is None else np.expand_dims(out_bar, axis)
    return (2 * x * ob,) if axis is None else (2 * x * ob, NO_TANGENT)


def test_a_correct_rrule_passes():
    fn = _register_sum_of_squares(_correct)
    check_rule(fn, X)
    check_rule(fn, X, 1)
    check_rule(fn, X.astype(np.float32), 0)


def test_a_correct_scalar_rule_passes():
    fn = lambda x, y: np.sin(x) * y  # noqa: E731
    scalar_rule(fn, lambda x, y, out: np.cos(x) * y, lambda x, y, out: np.sin(x))
    check_rule(fn, X, X[:1])
    check_rule(fn, X.astype(np.float32), np.float32(2.0))


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_a_wrong_partial_is_caught_and_the_argument_named(dtype):
    fn = lambda x, y: np.sin(x) * y  # noqa: E731
    scalar_rule(fn, lambda x, y, out: np.cos(x) * y, lambda x, y, out: 1.02 * np.sin(x))
    with pytest.raises(AssertionError, match=r"finite differences.*argument 1 \(ndarray\(1, 3\)"):
        check_rule(fn, X.astype(dtype), X[:1].astype(dtype))


def test_a_wrong_rrule_is_caught():
    fn = _register_sum_of_squares(lambda x, axis, out_bar: (3 * x * out_bar,))
    with pytest.raises(AssertionError, match="disagrees with finite differences"):
        check_rule(fn, X)


def test_a_wrong_shape_is_caught():
    fn = _register_sum_of_squares(lambda x, axis, out_bar: (np.ones(x.shape[1]) * out_bar,))
    with pytest.raises(AssertionError, match=r"shape \(3,\), expected \(2, 3\)"):
        check_rule(fn, X)


def test_a_float64_cotangent_for_a_float32_argument_is_caught():
    fn = _register_sum_of_squares(lambda x, axis, out_bar: (2 * x.astype(np.float64) * out_bar,))
    with pytest.raises(AssertionError, match="dtype float64, expected float32"):
        check_rule(fn, X.astype(np.float32))


def test_a_missing_cotangent_is_caught():
    fn = _register_sum_of_squares(lambda x, axis, out_bar: (2 * x * np.expand_dims(out_bar, axis),))
    with pytest.raises(AssertionError, match=r"one cotangent per positional argument \(2\), got 1"):
        check_rule(fn, X, 0)


def test_a_cotangent_for_an_int_argument_is_caught():
    fn = _register_sum_of_squares(lambda x, axis, out_bar: (2 * x * np.expand_dims(out_bar, axis), 0.0))
    with pytest.raises(AssertionError, match="argument 1 .* cannot be differentiated"):
        check_rule(fn, X, 0)


def test_no_tangent_for_a_float_argument_is_caught():
    fn = _register_sum_of_squares(lambda x, axis, out_bar: (NO_TANGENT,))
    with pytest.raises(AssertionError, match="float argument but its cotangent is NO_TANGENT"):
        check_rule(fn, X)


def test_a_uniform_scalar_cotangent_is_accepted_and_checked():
    good = _register_sum_of_squares(lambda x, axis, out_bar: (out_bar * 0.0 + 1.0,))
    fn = lambda x: np.sum(x)  # noqa: E731

    @rrule(fn)
    def fn_rrule(x):
        return fn(x), lambda out_bar: (out_bar,)  # "out_bar everywhere in x"

    check_rule(fn, X)
    with pytest.raises(AssertionError, match="finite differences"):
        check_rule(good, X)


def test_thunks_are_evaluated():
    fn = _register_sum_of_squares(lambda x, axis, out_bar: (lambda: 2.5 * x * out_bar,))
    with pytest.raises(AssertionError, match="finite differences"):
        check_rule(fn, X)


def test_modifying_an_input_is_caught():
    def pullback(x, axis, out_bar):
        x *= 1.0 + 1e-12
        return (2 * x * out_bar,)

    fn = _register_sum_of_squares(pullback)
    with pytest.raises(AssertionError, match="modified an input"):
        check_rule(fn, X.copy())


def test_returning_the_input_itself_is_caught():
    fn = lambda x: np.asarray(x)  # noqa: E731

    @rrule(fn)
    def fn_rrule(x):
        return x, lambda out_bar: (out_bar,)

    with pytest.raises(AssertionError, match="fresh object"):
        check_rule(fn, X)


def test_a_wrong_primal_is_caught():
    fn = lambda x: np.sin(x)  # noqa: E731

    @rrule(fn)
    def fn_rrule(x):
        return np.cos(x), lambda out_bar: (np.cos(x) * out_bar,)

    with pytest.raises(AssertionError, match="primal output differs"):
        check_rule(fn, X)


def test_a_smooth_function_declared_non_differentiable_is_caught():
    fn = lambda x: 2.0 * x  # noqa: E731
    non_differentiable(fn)
    with pytest.raises(AssertionError, match="declared non-differentiable"):
        check_rule(fn, X)


def test_a_list_argument_needs_a_list_cotangent():
    fn = lambda xs: xs[0] * xs[1]  # noqa: E731

    @rrule(fn)
    def fn_rrule(xs):
        return fn(xs), lambda out_bar: (np.array([out_bar * xs[1], out_bar * xs[0]]),)

    with pytest.raises(AssertionError, match="list/tuple of 2 cotangents"):
        check_rule(fn, [0.5, 1.5])


def test_floats_inside_list_arguments_are_checked():
    fn = lambda xs: xs[0] * xs[1]  # noqa: E731

    @rrule(fn)
    def fn_rrule(xs):
        return fn(xs), lambda out_bar: ([out_bar * xs[1], out_bar * xs[1]],)

    with pytest.raises(AssertionError, match="finite differences"):
        check_rule(fn, [0.5, 1.5])


def test_a_wrong_forward_rule_is_caught():
    fn = _register_sum_of_squares(_correct)

    @frule(fn)
    def fn_frule(args_dot, x, axis=None):
        (x_dot,) = args_dot
        return fn(x, axis), np.sum(3 * x * x_dot)

    with pytest.raises(AssertionError, match="forward rule disagrees"):
        check_rule(fn, X)


def test_a_zero_cotangent_is_a_zero():
    fn = lambda x, y: np.sum(x) + 0.0 * np.sum(y)  # noqa: E731

    @rrule(fn)
    def fn_rrule(x, y):
        return fn(x, y), lambda out_bar: (out_bar, ZERO)

    check_rule(fn, X, X)


def test_a_python_implementation_that_differs_is_caught():
    fn = lambda xs: sum(xs)  # noqa: E731
    registry.differentiate_through(fn, lambda xs: sum(xs) + 1.0)
    with pytest.raises(AssertionError, match="Python implementation"):
        check_rule(fn, [1.0, 2.0])


def test_a_function_without_a_rule_is_reported():
    with pytest.raises(AssertionError, match="no rule is registered"):
        check_rule(lambda x: x, 1.0)


def test_the_registry_is_restored_after_each_test():
    assert registry.lookup(np.sin).kind is registry.RuleKind.ELEMENTWISE
    assert not any(getattr(fn, "__name__", "") == "<lambda>" and rule.defined_at.filename == __file__
                   for fn, rule in registry.all_rules().items())


def test_a_forward_only_rule_is_checked():
    fn = lambda x: np.sum(x * x)  # noqa: E731

    @frule(fn)
    def fn_frule(args_dot, x):
        return fn(x), np.sum(2 * x * args_dot[0])

    check_rule(fn, X)
    bad = lambda x: np.sum(x * x)  # noqa: E731

    @frule(bad)
    def bad_frule(args_dot, x):
        return bad(x), np.sum(x * args_dot[0])

    with pytest.raises(AssertionError, match="forward rule disagrees"):
        check_rule(bad, X)


def _sign_flipping_eigh(base):
    """eigh, but the first eigenvector's sign flips where a[0, 0] passes base[0, 0] (as scipy.linalg.eigh's
    default driver may flip one between a + eps*d and a - eps*d), with eigh's rule."""
    from bytegrad.rules.numpy.linalg_decomp import eigh_cotangent

    def fn(a):
        w, v = np.linalg.eigh(a)
        v = v * np.where(np.arange(v.shape[-1]) == 0, np.sign(v[0, 0]) * (1.0 if a[0, 0] > base[0, 0] else -1.0), 1.0)
        return w, v

    @rrule(fn)
    def fn_rrule(a):
        w, v = out = fn(a)
        return out, lambda out_bar: (eigh_cotangent(w, v, out_bar[0], out_bar[1], True, a),)

    return fn


def test_a_flipped_eigenvector_sign_is_measured_raw_and_not_through_invariants():
    from bytegrad.rules.testing import eigh_invariants

    a = np.array([[2.0, 0.3, 0.1], [0.3, -1.0, 0.4], [0.1, 0.4, 0.5]])
    fn = _sign_flipping_eigh(a)
    with pytest.raises(AssertionError, match="finite differences"):
        check_rule(fn, a)
    check_rule(fn, a, through=eigh_invariants)
    check_rule(fn, a.astype(np.float32), through=eigh_invariants)


def test_a_wrong_eigenvector_cotangent_is_caught_through_invariants():
    from bytegrad.rules.numpy.linalg_decomp import eigh_cotangent
    from bytegrad.rules.testing import eigh_invariants

    fn = lambda a: np.linalg.eigh(a)  # noqa: E731

    @rrule(fn)
    def fn_rrule(a):
        w, v = out = fn(a)
        return out, lambda out_bar: (eigh_cotangent(w, v, out_bar[0], 1.02 * out_bar[1], True, a),)

    with pytest.raises(AssertionError, match="finite differences"):
        check_rule(fn, np.array([[2.0, 0.3], [0.3, -1.0]]), through=eigh_invariants)


@pytest.mark.parametrize("x", [X, X + 0.5j * X[::-1]], ids=["real", "complex"])
def test_second_order_passes_correct_rules(x):
    check_rule(np.sin, x, second_order=True)
    check_rule(np.multiply, x, x[::-1], second_order=True)
    check_rule(np.sum, x, 1, second_order=True)


@pytest.mark.parametrize("x", [X, X + 0.5j * X[::-1]], ids=["real", "complex"])
def test_a_pullback_that_is_right_but_not_differentiable_is_caught_at_order_2(x):
    """x_bar = 3 x^2 out_bar with x a constant to a nested derivative: right at order 1, wrong at 2."""
    import bytegrad

    fn = lambda x: x * x * x  # noqa: E731

    @rrule(fn)
    def fn_rrule(x):
        return fn(x), lambda out_bar: (3 * bytegrad.stop_gradient(x) ** 2 * out_bar,)

    check_rule(fn, x)
    with pytest.raises(AssertionError, match="derivative of the pullback disagrees"):
        check_rule(fn, x, second_order=True)


def test_a_forward_rule_that_is_right_but_not_differentiable_is_caught_at_order_2():
    import bytegrad

    fn = lambda x: x * x * x  # noqa: E731

    @rrule(fn)
    def fn_rrule(x):
        return fn(x), lambda out_bar: (3 * x ** 2 * out_bar,)

    @frule(fn)
    def fn_frule(args_dot, x):
        return fn(x), 3 * bytegrad.stop_gradient(x) ** 2 * args_dot[0]

    check_rule(fn, X)
    with pytest.raises(AssertionError, match="derivative of the forward rule disagrees"):
        check_rule(fn, X, second_order=True)


def test_through_a_function_that_uses_part_of_the_output_at_second_order():
    """The outputs `through` ignores get zero cotangents at both orders (the forward rule's tangent of
    the values is paired with a zero, not with the vectors' cotangent)."""
    a = np.array([[2.0, 0.3, 0.1], [0.3, -1.0, 0.4], [0.1, 0.4, 0.5]])
    check_rule(np.linalg.eigh, a, through=lambda out: np.abs(out[1]) ** 2, second_order=True)
    check_rule(np.linalg.svd, a[:2], through=lambda out: out[1] * 2.0, second_order=True)
