"""The registry: forms of one function combining, duplicate errors naming both sites, override,
opt_out, rrule_via_ad, and plugin loading that warns instead of raising.

Every test registers rules for throwaway functions; the registry is restored after each one.
"""
from __future__ import annotations

import math
import sys
import warnings

import numpy as np
import pytest

import bytegrad
from bytegrad.errors import DuplicateRuleError
from bytegrad.rules import registry
from bytegrad.rules.registry import (
    NO_TANGENT, RuleKind, frule, lookup, non_differentiable, opt_out, rrule, rrule_via_ad, scalar_rule,
)
from bytegrad.rules.testing import check_rule

HERE = __file__


@pytest.fixture(autouse=True)
def restore_registry():
    registry.load_lazy_rules()  # scipy's rules, if it is imported: kept in the snapshot (they load once)
    registry.load_deferred()  # bytegrad's own deferred rules modules (rules/_deferred.py), likewise
    with registry._LOCK:
        saved = (dict(registry._RULES), dict(registry._OPTED_OUT), dict(registry._SHADOWED), registry._plugins_loaded,
                 dict(registry._LAZY_RULES))
    yield
    with registry._LOCK:
        tables = (registry._RULES, registry._OPTED_OUT, registry._SHADOWED, registry._LAZY_RULES)
        for table, before in zip(tables, saved[:3] + saved[4:]):
            table.clear()
            table.update(before)
        registry._plugins_loaded = saved[3]
        registry.current_version += 1


def _cube(x):
    return x * x * x


def _fresh():
    """A new function object (rules attach to function objects)."""
    def cube(x):
        return x * x * x
    return cube


def _add_rrule(fn):
    @rrule(fn)
    def cube_rrule(x):
        return fn(x), lambda out_bar: (3 * x * x * out_bar,)
    return cube_rrule


def _add_frule(fn):
    @frule(fn)
    def cube_frule(args_dot, x):
        return fn(x), 3 * x * x * args_dot[0]
    return cube_frule


@pytest.mark.parametrize("order", ["rrule first", "frule first"])
def test_frule_and_rrule_of_one_function_combine(order):
    fn = _fresh()
    if order == "rrule first":
        r, f = _add_rrule(fn), _add_frule(fn)
    else:
        f, r = _add_frule(fn), _add_rrule(fn)
    rule = lookup(fn)
    assert rule.kind is RuleKind.RRULE and rule.rrule is r and rule.frule is f
    assert rule.forms() == ("reverse", "forward")
    check_rule(fn, np.linspace(0.5, 2.0, 4))


@pytest.mark.parametrize("order", ["scalar_rule first", "frule first"])
def test_frule_and_scalar_rule_of_one_function_combine(order):
    fn = _fresh()
    if order == "scalar_rule first":
        scalar_rule(fn, lambda x, out: 3 * x * x)
        f = _add_frule(fn)
    else:
        f = _add_frule(fn)
        scalar_rule(fn, lambda x, out: 3 * x * x)
    rule = lookup(fn)
    assert rule.kind is RuleKind.ELEMENTWISE and rule.frule is f and len(rule.partials) == 1
    check_rule(fn, np.linspace(0.5, 2.0, 4))


def _first_two_sites(message):
    """The first two `file:line` pairs a message names."""
    import re
    return [(path, int(line)) for path, line in re.findall(r"(\S+\.py):(\d+) ", message)[:2]]


def _line_after(offset=1):
    return sys._getframe(1).f_lineno + offset


def test_two_rrules_name_both_sites():
    fn = _fresh()
    first = _line_after()
    @rrule(fn)
    def one(x):
        return fn(x), lambda out_bar: (3 * x * x * out_bar,)
    second = _line_after()
    with pytest.raises(DuplicateRuleError) as info:
        @rrule(fn)
        def two(x):
            return fn(x), lambda out_bar: (3 * x * x * out_bar,)
    assert _first_two_sites(str(info.value)) == [(HERE, first), (HERE, second + 1)], str(info.value)
    assert "override=True" in str(info.value) and "reverse rule" in str(info.value)


def test_two_frules_name_both_sites():
    fn = _fresh()
    scalar_rule(fn, lambda x, out: 3 * x * x)
    first = _line_after()
    @frule(fn)
    def one(args_dot, x):
        return fn(x), 3 * x * x * args_dot[0]
    second = _line_after(2)
    with pytest.raises(DuplicateRuleError) as info:
        @frule(fn)
        def two(args_dot, x):
            return fn(x), 3 * x * x * args_dot[0]
    assert _first_two_sites(str(info.value)) == [(HERE, first), (HERE, second)], str(info.value)
    assert "forward rule" in str(info.value)


@pytest.mark.parametrize("second_form", ["rrule", "scalar_rule", "non_differentiable"])
def test_a_scalar_rule_and_another_reverse_form_name_both_sites(second_form):
    fn = _fresh()
    scalar_rule(fn, lambda x, out: 3 * x * x); first = sys._getframe().f_lineno  # noqa: E702
    with pytest.raises(DuplicateRuleError) as info:
        if second_form == "rrule":
            _add_rrule(fn)
        elif second_form == "scalar_rule":
            second = _line_after()
            scalar_rule(fn, lambda x, out: 3 * x * x)
        else:
            second = _line_after()
            non_differentiable(fn)
    sites = _first_two_sites(str(info.value))
    assert sites[0] == (HERE, first), str(info.value)
    if second_form == "rrule":
        assert sites[1] == (HERE, _add_rrule.__code__.co_firstlineno + 1)
    else:
        assert sites[1] == (HERE, second)


def test_override_replaces_only_the_form_it_gives():
    fn = _fresh()
    _add_rrule(fn)
    f = _add_frule(fn)

    @rrule(fn, override=True)
    def better_rrule(x):
        return fn(x), lambda out_bar: (3 * x * x * out_bar,)

    rule = lookup(fn)
    assert rule.rrule is better_rrule and rule.frule is f

    @frule(fn, override=True)
    def better_frule(args_dot, x):
        return fn(x), 3 * x * x * args_dot[0]

    assert lookup(fn).rrule is better_rrule and lookup(fn).frule is better_frule
    non_differentiable(fn, override=True)
    assert lookup(fn).kind is RuleKind.NONDIFF and lookup(fn).frule is None


def test_a_registration_bumps_the_version():
    before = registry.version()
    _add_frule(_fresh())
    assert registry.version() > before


# ---- opt_out ------------------------------------------------------------------------------------------

def softplus(x):
    return np.log1p(np.exp(x))


def test_opt_out_differentiates_through_the_code_instead_of_a_wrong_rule():
    wrong = scalar_rule(softplus, lambda x, out: 2.0 * out)  # deliberately wrong
    assert wrong.kind is RuleKind.ELEMENTWISE
    x = np.array([-1.0, 0.5, 2.0])
    f = lambda x: np.sum(softplus(x))  # noqa: E731
    assert not np.allclose(bytegrad.grad(f)(x), 1 / (1 + np.exp(-x)))
    opt_out(softplus)
    assert lookup(softplus) is None and registry.opted_out(softplus)
    np.testing.assert_allclose(bytegrad.grad(f)(x), 1 / (1 + np.exp(-x)), rtol=1e-12)


def test_opt_out_wins_over_a_rule_registered_later():
    def g(x):
        return x * x
    opt_out(g)
    scalar_rule(g, lambda x, out: 0.0)  # kept aside, no error, not used
    assert lookup(g) is None
    assert bytegrad.grad(lambda x: g(x))(3.0) == 6.0


def test_opt_out_of_a_numpy_function_written_in_python():
    assert lookup(np.diff) is not None
    opt_out(np.diff)
    assert lookup(np.diff) is None
    x = np.array([1.0, 4.0, 9.0, 16.0])
    np.testing.assert_allclose(bytegrad.grad(lambda x: np.sum(np.diff(x) ** 2))(x),
                               np.array([-6.0, -4.0, -4.0, 14.0]))


def test_opt_out_of_a_c_function_is_refused():
    with pytest.raises(TypeError, match="written in Python"):
        opt_out(np.sin)
    with pytest.raises(TypeError, match="written in Python"):
        opt_out(math.exp)


# ---- rrule_via_ad ---------------------------------------------------------------------------------------

def test_rrule_via_ad_returns_value_and_pullback():
    out, pullback = rrule_via_ad(lambda x, y: x * np.sin(y), 2.0, 0.5)
    assert out == 2.0 * np.sin(0.5)
    x_bar, y_bar = pullback(1.0)
    assert math.isclose(x_bar, np.sin(0.5)) and math.isclose(y_bar, 2.0 * np.cos(0.5))


def test_a_user_map_rule_built_on_rrule_via_ad():
    def apply_all(f, xs):
        """A 'map' bytegrad cannot see through: the values travel through tolist."""
        return np.array([f(v) for v in np.asarray(xs).tolist()])

    @rrule(apply_all)
    def apply_all_rrule(f, xs):
        pairs = [rrule_via_ad(f, v) for v in xs.tolist()]
        def apply_all_pullback(out_bar):
            return NO_TANGENT, np.array([pb(ob)[0] for (_, pb), ob in zip(pairs, np.broadcast_to(out_bar, xs.shape))])
        return np.array([out for out, _ in pairs]), apply_all_pullback

    def inner(t):
        return t * t + np.tanh(t)

    x = np.array([0.3, -1.2, 2.0])
    g = bytegrad.grad(lambda x: np.sum(apply_all(inner, x) * x))(x)
    np.testing.assert_allclose(g, inner(x) + x * (2 * x + 1 - np.tanh(x) ** 2), rtol=1e-12)


# ---- np.vectorize ----------------------------------------------------------------------------------------

def _piecewise(t):
    return t * t if t > 0 else math.sin(t)


def test_the_vectorize_rule_passes_check_rule():
    vf = np.vectorize(_piecewise)
    x = np.array([[0.7, -1.3, 2.1], [-0.4, 1.5, 0.2]])
    check_rule(np.vectorize.__call__, vf, x)
    check_rule(np.vectorize.__call__, vf, x.astype(np.float32))
    two = np.vectorize(lambda a, b: a * math.exp(b))
    check_rule(np.vectorize.__call__, two, x, np.array([0.1, -0.2, 0.3]))


def test_vectorize_with_excluded_and_int_arguments():
    vf = np.vectorize(lambda a, n: a ** n, excluded={1})
    check_rule(np.vectorize.__call__, vf, np.array([0.5, 1.5, 2.5]), 3)
    vi = np.vectorize(lambda a, n: a * n)
    check_rule(np.vectorize.__call__, vi, np.array([0.5, 1.5]), np.array([2, 3]))


def test_gradient_through_a_vectorize_call_spelled_out():
    vf = np.vectorize(_piecewise)
    x = np.array([0.7, -1.3, 2.1])
    g = bytegrad.grad(lambda x: np.sum(np.vectorize.__call__(vf, x) ** 2))(x)
    d = np.where(x > 0, 2 * x, np.cos(x))
    np.testing.assert_allclose(g, 2 * vf(x) * d, rtol=1e-12)


def test_gradient_through_a_vectorize_object_called_directly():
    vf = np.vectorize(_piecewise)
    x = np.array([0.7, -1.3, 2.1])
    g = bytegrad.grad(lambda x: np.sum(vf(x)))(x)
    np.testing.assert_allclose(g, np.where(x > 0, 2 * x, np.cos(x)), rtol=1e-12)


# ---- rules on methods: they apply however the method is called --------------------------------------------

class _Scaled:
    """Methods whose registered rules give a recognizably different (scaled) derivative: a call that
    ran the method's code instead of its rule would give cos(x)."""

    def sin(self, x):
        return np.sin(x)

    def __call__(self, x):
        return np.sin(x)


class _ScaledChild(_Scaled):
    pass


def _scaled_rrule(scale):
    def method_rrule(self, x):
        return np.sin(x), lambda out_bar: (NO_TANGENT, scale * out_bar * np.cos(x))
    return method_rrule


rrule(_Scaled.sin)(_scaled_rrule(100.0))
rrule(_Scaled.__call__)(_scaled_rrule(10.0))


@pytest.mark.parametrize("call,scale", [
    (lambda m, x: m.sin(x), 100.0),                 # a bound method
    (lambda m, x: _Scaled.sin(m, x), 100.0),        # the function, spelled out
    (lambda m, x: m(x), 10.0),                      # a callable object: type(m).__call__
    (lambda m, x: m.__call__(x), 10.0),
    (lambda m, x: _ScaledChild().sin(x), 100.0),    # an inherited method is the same function
], ids=["bound", "spelled-out", "call", "dunder-call", "inherited"])
def test_a_rule_on_a_python_method_applies_to_every_way_of_calling_it(call, scale):
    m = _Scaled()
    x = np.array([0.3, -0.8])
    g = bytegrad.grad(lambda x: np.sum(call(m, x)))(x)
    np.testing.assert_allclose(g, scale * np.cos(x), rtol=1e-12)


# ---- plugins ---------------------------------------------------------------------------------------------

class _EntryPoint:
    def __init__(self, name, value, load):
        self.name, self.value, self.load = name, value, load


def test_a_failing_plugin_gives_one_warning_naming_it(monkeypatch):
    loaded = []

    def broken():
        raise ImportError("no module named 'missing_dependency'")

    def good():
        loaded.append("good")
        return lambda: loaded.append("called")

    eps = [_EntryPoint("broken-rules", "broken_rules:register", broken),
           _EntryPoint("good-rules", "good_rules", good)]
    import importlib.metadata
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: eps if group == "bytegrad.rules" else [])
    registry._plugins_loaded = False
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert registry.load_plugins() == 1
        assert registry.load_plugins() == 0  # once only
    messages = [str(w.message) for w in caught]
    assert len(messages) == 1 and "broken-rules" in messages[0] and "missing_dependency" in messages[0]
    assert loaded == ["good", "called"]


def test_a_location_taken_from_a_frame_reads_the_line_f_lineno_gives():
    """Registering a rule records `SourceLoc.of_frame` (the line found when first read, not by
    `f_lineno` at import): the same line, in a function and deep in a long module body."""
    from bytegrad.errors import SourceLoc

    body = "\n".join(f"v{i} = {i}" for i in range(300)) + "\nlocs.append((SourceLoc.of_frame(sys._getframe()), " \
        "sys._getframe().f_lineno))\n" + "\n".join(f"w{i} = {i}" for i in range(50))
    scope = {"SourceLoc": SourceLoc, "sys": sys, "locs": []}
    exec(compile(body, "<long module>", "exec"), scope)  # noqa: S102
    loc, line = scope["locs"][0]
    assert (loc.lineno, loc.filename, loc.function) == (line, "<long module>", "<module>") == (301, "<long module>", "<module>")
    here = SourceLoc.of_frame(sys._getframe()); expected = sys._getframe().f_lineno  # noqa: E702
    assert here == SourceLoc(HERE, expected, "test_a_location_taken_from_a_frame_reads_the_line_f_lineno_gives")
    assert hash(here) == hash(SourceLoc(HERE, expected, here.function)) and str(here).endswith(f":{expected} ({here.function})")


# differentiate_through with an implementation that is not a plain Python function: before, the
# rewriter was handed it and failed (`AttributeError: '_ArrayFunctionDispatcher' object has no
# attribute '__code__'` for np.copy)
def test_differentiate_through_a_numpy_function_itself_runs_its_python_code():
    registry.differentiate_through(np.copy, np.copy, override=True)
    x = np.array([1.0, -2.0, 3.0])
    for _ in range(2):  # the second gradient takes the rewritten implementation from the caches
        np.testing.assert_array_equal(bytegrad.grad(lambda v: np.sum(np.copy(v) ** 2))(x), 2 * x)


def test_differentiate_through_a_callable_that_has_a_rule_uses_its_rule():
    def duplicate(v):
        return v.copy()

    registry.differentiate_through(duplicate, np.copy)  # np.copy's rule, as at any call site
    x = np.array([1.0, -2.0, 3.0])
    np.testing.assert_array_equal(bytegrad.grad(lambda v: np.sum(duplicate(v) * v))(x), 2 * x)


def test_differentiate_through_a_c_function_itself_is_refused_when_registered():
    with pytest.raises(TypeError, match="other than math.exp itself"):
        registry.differentiate_through(math.exp, math.exp, override=True)
    with pytest.raises(TypeError, match="callable"):
        registry.differentiate_through(math.exp, 3.0, override=True)
    assert lookup(math.exp).kind is not RuleKind.THROUGH  # the rule it had is kept
