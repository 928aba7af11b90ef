"""Compiled gradient programs (bytegrad/compiled/policy.py, compiled/lower_numpy.py) against the general path.

Every program must give what the general path gives: on the benchmark cases and the catalogue
over repeated calls with new values, and across everything its guards are there for. Each kind of
guard has a test that passes with the guard and fails without it (`omit_guard`); each refusal of
the eligibility check has a test that the function stays on the general path, with its reason.
"""
from __future__ import annotations

import os
import re
import sys
import threading
import types

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import functions as catalogue
from gradcheck import assert_trees_close

import bytegrad
from bytegrad.compiled import policy as compiled
from bytegrad.rules import registry
from bytegrad.compiled import source as program_source
from bytegrad.runtime import kernels

from bench import cases as bench_cases


def fresh(fn):
    """A copy of `fn` (same code, globals and defaults): programs are kept per function object, so a
    copy starts with none."""
    return types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)


def compiled_and_general(fn, wrt=0):
    return bytegrad.differentiate(fresh(fn), wrt=wrt, tier="numpy"), bytegrad.differentiate(fn, wrt=wrt, tier="general")


def info(d) -> dict:
    return d.stats()["compiled"]


def assert_same(a, b, rtol=1e-12):
    assert_trees_close(a, b, rtol=rtol, atol=0.0)


# ---- agreement ---------------------------------------------------------------------------------


BENCH = [c for c in bench_cases.CASES if c.key in
         ("dense2", "dense20", "mlp", "sin10", "loop50", "loop50f", "elem10", "conv1", "mlpf32", "dense2f32")]


@pytest.mark.parametrize("case", BENCH, ids=lambda c: c.key)
def test_bench_cases_compile_and_agree_with_the_general_path(case):
    fast, general = compiled_and_general(case.loss)
    rng = np.random.default_rng(0)
    for _ in range(3):  # new values each call: the program is reused, not re-captured
        params, data = case.inputs(rng)
        v1, g1 = fast.value_and_grad(params, *data)
        v2, g2 = general.value_and_grad(params, *data)
        assert_same(v1, v2)
        assert_same(g1, g2)
        assert type(v1) is type(v2)
    s = info(fast)
    assert len(s["programs"]) == 1, s["not_compiled"]
    assert s["compiled_calls"] == 3 and s["general_calls"] == 0


def test_catalogue_compiled_fraction_and_agreement():
    """Every catalogue case under the numpy tier: programs agree with the general path to 1e-12 over
    calls with new values; the others fall back with a reason. Prints the fraction compiled."""
    from test_catalogue import make_inputs

    compiled_ids, reasons = [], {}
    for case in catalogue.CASES:
        fast = bytegrad.differentiate(case.fn, wrt=case.wrt, tier="numpy")
        general = bytegrad.differentiate(case.fn, wrt=case.wrt, tier="general")
        for call in range(3):
            args, kwargs = make_inputs(case, call)
            try:
                expected = general.value_and_grad(*args, **kwargs)
            except bytegrad.DifferentiationError:
                break
            got = fast.value_and_grad(*args, **kwargs)
            assert_trees_close(got, expected, rtol=1e-12, atol=1e-300)
        s = info(fast)
        if s["programs"]:
            compiled_ids.append(case.id)
            assert s["compiled_calls"] >= 2, (case.id, s)
        else:
            reasons[case.id] = next(iter(s["not_compiled"].values()), "kwargs or error")
    print(f"\ncompiled {len(compiled_ids)} of {len(catalogue.CASES)} catalogue cases")
    for cid, why in sorted(reasons.items()):
        print(f"  {cid}: {why}")
    assert len(compiled_ids) >= 120  # (120 of 132 on 3.11, 3.12 and 3.13 when this was written)


def test_catalogue_pullback_programs_agree():
    """Every catalogue case's pullback under the numpy tier agrees with the general path's, output and
    cotangents, over calls with new values. Prints the fraction compiled."""
    from test_catalogue import make_inputs

    compiled_n = 0
    for case in catalogue.CASES:
        fast = bytegrad.differentiate(fresh(case.fn), tier="numpy")
        general = bytegrad.differentiate(case.fn, tier="general")
        for call in range(3):
            args, kwargs = make_inputs(case, call)
            try:
                out, back = general.pullback(*args, **kwargs)
                expected = (out, back(0.75))
            except bytegrad.DifferentiationError:
                break
            out, back = fast.pullback(*args, **kwargs)
            assert_trees_close((out, back(0.75)), expected, rtol=1e-12, atol=1e-300)
        if fast._pb_tiers is not None and fast._pb_tiers.programs:
            compiled_n += 1
    print(f"\npullback programs for {compiled_n} of {len(catalogue.CASES)} catalogue cases")
    assert compiled_n >= 10


def test_auto_tier_compiles_after_warm_up_and_never_on_the_first_call():
    def f(x):
        return np.sum(np.sin(x) * x)

    d = bytegrad.differentiate(f, tier="auto")
    x = np.linspace(0.1, 1.0, 5)
    for k in range(compiled.AUTO_AFTER):
        d.grad(x)
        assert info(d)["programs"] == [] and info(d)["general_calls"] == k + 1
    d.grad(x)  # the capture
    d.grad(x)
    s = info(d)
    assert len(s["programs"]) == 1 and s["compiled_calls"] == 2


def test_general_tier_never_compiles():
    d = bytegrad.differentiate(lambda x: np.sum(x * x), tier="general")
    for _ in range(5):
        d.grad(np.ones(3))
    assert "compiled" not in d.stats()


def test_tier_argument_is_checked():
    with pytest.raises(ValueError, match="general, numpy, numba, auto"):
        bytegrad.differentiate(lambda x: x, tier="fast")


@pytest.mark.skipif(compiled.default_tier() == "general", reason="BYTEGRAD_TIER=general: no programs")
def test_grad_objects_share_programs_of_one_function():
    def f(x):
        return np.sum(np.tanh(x))

    x = np.ones(4)
    for _ in range(4):
        bytegrad.grad(f)(x)  # a new Differentiated each time, as in a training loop written this way
    d = bytegrad.differentiate(f)
    assert d._tiers is bytegrad.differentiate(f)._tiers
    assert info(d)["compiled_calls"] >= 1


def test_wrt_tuple_and_dict_params_and_untracked_int_array():
    def f(params, x, idx):
        h = np.tanh(params["W"] @ x[:, idx] + params["b"][:, None])
        return np.sum(h * h) + params["s"] * 2.0

    rng = np.random.default_rng(1)
    fast, general = compiled_and_general(f, wrt=(0, 1))
    for _ in range(3):
        params = {"W": rng.standard_normal((3, 4)), "b": rng.standard_normal(3), "s": float(rng.standard_normal())}
        x = rng.standard_normal((4, 6))
        idx = rng.integers(0, 6, 5)
        assert_same(fast.value_and_grad(params, x, idx), general.value_and_grad(params, x, idx))
    assert len(info(fast)["programs"]) == 1


def test_float32_gradients_stay_float32():
    fast, general = compiled_and_general(lambda x, w: np.sum(np.exp(x * w)))
    x = np.linspace(0, 1, 6, dtype=np.float32)
    w = np.float32(0.5) * np.ones(6, np.float32)
    for _ in range(2):
        g = fast.grad(x, w)
        assert g.dtype == np.float32
        assert_same(g, general.grad(x, w))


def test_gradient_never_aliases_the_callers_array():
    fast = bytegrad.differentiate(lambda x, w: np.sum(x * w), wrt=1, tier="numpy")
    x = np.arange(3.0)
    for _ in range(2):
        g = fast.grad(x, np.ones(3))
        assert not np.shares_memory(g, x)


def test_programs_are_reentrant_across_threads():
    fast, general = compiled_and_general(bench_cases.mlp_loss)
    make = bench_cases.mlp_inputs((20, 16, 16, 5), batch=8)
    params, data = make(np.random.default_rng(0))
    fast.grad(params, *data)
    inputs = [make(np.random.default_rng(s)) for s in range(8)]
    expected = [general.grad(p, *d) for p, d in inputs]
    results: list = [None] * len(inputs)

    def work(k: int) -> None:
        for _ in range(20):
            results[k] = fast.grad(inputs[k][0], *inputs[k][1])

    threads = [threading.Thread(target=work, args=(k,)) for k in range(len(inputs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for got, want in zip(results, expected):
        assert_same(got, want)
    assert info(fast)["general_calls"] == 0


def test_program_peak_memory_at_most_the_general_paths():
    import tracemalloc

    def loss(x):
        for _ in range(20):
            x = np.tanh(x * 1.01 + 0.1)
        return np.sum(x)

    x = np.linspace(-1, 1, 200_000)
    fast, general = compiled_and_general(loss)
    fast.grad(x)
    peaks = []
    for d in (general, fast):
        d.grad(x)
        tracemalloc.start()
        d.grad(x)
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
    assert info(fast)["compiled_calls"] >= 2
    assert peaks[1] <= peaks[0] * 1.05, peaks


def test_nested_derivatives_use_the_general_path_and_keyword_only_arguments_compile():
    f = bytegrad.differentiate(lambda x, scale=1.0: np.sum(np.sin(x)) * scale, tier="numpy")
    h = bytegrad.hessian(lambda x: f.grad(x).sum())(np.ones(2))
    assert h.shape == (2, 2)
    assert info(f)["compiled_calls"] == 0
    k = bytegrad.differentiate(lambda x, *, scale=1.0: np.sum(np.sin(x)) * scale, tier="numpy")
    k.grad(np.ones(2), scale=2.0)  # (compiled/keywords.py; tests/test_compiled_keywords.py)
    assert info(k)["compiled_calls"] == 1


def test_keywords_of_positional_parameters_share_the_positional_programs():
    def f(x, scale=1.0, n=2):
        return np.sum(np.sin(x) ** n) * scale

    fast, general = compiled_and_general(f)
    x = np.linspace(0.0, 1.0, 3)
    for kw in ({"scale": 2.0}, {"n": 3}, {"scale": 3.0, "n": 3}, {}):
        assert_same(fast.grad(x, **kw), general.grad(x, **kw))
    st = info(fast)
    assert st["compiled_calls"] == 4 and len(st["programs"]) == 3, st  # by arity: (x, scale), (x, scale, n), (x)


def test_a_program_that_raises_hands_the_call_to_the_general_path():
    def f(A, b):
        return np.sum(np.linalg.solve(A, b))

    fast = bytegrad.differentiate(f, tier="numpy")
    fast.grad(np.eye(2) * 2.0, np.ones(2))
    with pytest.raises(np.linalg.LinAlgError):
        fast.grad(np.zeros((2, 2)), np.ones(2))


# ---- guards: each kind is needed ----------------------------------------------------------------


def scale_by_length(x):
    return np.sum(x * x) / x.shape[0]


def scale_by_other_length(x, y):
    return np.sum(x * x) / y.shape[0]


def repeat_n(x, n):
    for _ in range(n):
        x = np.sin(x)
    return np.sum(x)


SCALE = 2.0


def times_global(x):
    return np.sum(x * SCALE)


_mod = types.ModuleType("bytegrad_test_mod")
_mod.act = np.sin
sys.modules[_mod.__name__] = _mod


def module_attribute(x):
    return np.sum(_mod.act(x))


def closure_scaling(c):
    """A closure whose cell `c` the returned setter rebinds."""
    def f(x):
        return np.sum(x * c)

    def set_c(v):
        nonlocal c
        c = v
    return f, set_c


_CLOSURE, _SET_C = closure_scaling(2.0)


class _TanhLayer:
    def __init__(self, k):
        self.k = k

    def __call__(self, x):
        return np.tanh(self.k * x)


class _SinLayer(_TanhLayer):
    def __call__(self, x):
        return np.sin(self.k * x)


def _through_layers(x, layers):
    for layer in layers:
        x = layer(x)
    return np.sum(x)


def guard_case(kind):
    """(function, first call's args, a later call's args, a change made between them, undo)."""
    x = np.linspace(0.1, 1.0, 4)
    if kind == "shape":
        return scale_by_other_length, (x, np.ones(3)), (x, np.ones(5)), None
    if kind == "dtype":
        return scale_by_length, (x,), (x.astype(np.float32),), None
    if kind == "type":
        return lambda t: np.sum(t[0] * t[1]), ((x, x),), ([x, x],), None
    if kind == "value":
        return repeat_n, (x, 3), (x, 5), None
    if kind == "global":
        def change():
            globals()["SCALE"] = 3.0
        return times_global, (x,), (x,), change
    if kind == "attr":
        def change():
            _mod.act = np.cos
        return module_attribute, (x,), (x,), change
    if kind == "cell":
        return _CLOSURE, (x,), (x,), lambda: _SET_C(3.0)
    if kind == "code":
        def change():
            _SAVED_CODE.append(scale_by_length.__code__)
            scale_by_length.__code__ = (lambda x: np.sum(x * x) / 2.0).__code__
        return calls_helper, (x,), (x,), change
    if kind == "object":  # a layer of another class in the same list (compiled/objects.py)
        return _through_layers, (x, [_TanhLayer(2.0)]), (x, [_SinLayer(2.0)]), None
    if kind == "version":
        def change():
            _SAVED_RULES.append(registry.lookup(np.sin))
            bytegrad.scalar_rule(np.sin, lambda x, out: 2.0 * np.cos(x), override=True)
        return module_attribute, (x,), (x,), change
    raise AssertionError(kind)


_SAVED_RULES: list = []
_SAVED_CODE: list = []


def restore_guard_case(kind):
    globals()["SCALE"] = 2.0
    _SET_C(2.0)
    _mod.act = np.sin
    while _SAVED_CODE:
        scale_by_length.__code__ = _SAVED_CODE.pop()
    while _SAVED_RULES:
        registry.register(_SAVED_RULES.pop(), override=True)


@pytest.mark.parametrize("omit", [False, True], ids=["guarded", "guard-omitted"])
@pytest.mark.parametrize("kind", program_source.GUARD_KINDS)
def test_each_guard_kind_is_needed(kind, omit, monkeypatch):
    if omit:
        monkeypatch.setattr(program_source, "_OMITTED", frozenset({kind}))
    fn, first, later, change = guard_case(kind)
    fast = bytegrad.differentiate(fresh(fn), tier="numpy")
    try:
        fast.grad(*first)
        assert len(info(fast)["programs"]) == 1
        if change is not None:
            change()
        general = bytegrad.differentiate(fn, tier="general")
        expected = general.value_and_grad(*later)
        try:
            got = fast.value_and_grad(*later)
            same = _trees_same(got, expected)
        except Exception:  # noqa: BLE001 - a program run past its guard may fail instead
            same = False
    finally:
        restore_guard_case(kind)
    if omit:
        assert not same, f"without the {kind} guard the program still gave the general path's result"
    else:
        assert same


DATA = np.linspace(-1.0, 1.0, 3)


def reads_arrays_from_a_global_and_a_closure(k):
    def f(x, y):
        return np.sum(np.tanh(DATA * x) * k) + np.sum(_mod.weights @ (x * y))
    return f


def test_arrays_read_from_globals_closures_and_module_attributes_are_inputs_read_at_call_time():
    """Such an array is never a constant of the program: written in place or rebound, the next call
    reads the new values (and a new shape fails its guard over to the general path)."""
    global DATA
    saved = DATA
    _mod.weights = np.eye(3) * 0.5
    k = np.array([1.0, -2.0, 0.5])
    fn = reads_arrays_from_a_global_and_a_closure(k)
    fast, general = compiled_and_general(fn)
    rng = np.random.default_rng(7)
    try:
        for step in range(6):
            if step == 2:
                DATA *= 3.0  # in place
                k[:] = rng.normal(size=3)
            if step == 3:
                DATA = rng.normal(size=3)  # rebound
                _mod.weights = rng.normal(size=(3, 3))
            if step == 4:
                DATA = rng.normal(size=4)  # another shape: the general path broadcasts it and fails alike
            args = (rng.normal(size=3), rng.normal(size=3))
            try:
                expected = general.value_and_grad(*args)
            except ValueError:
                with pytest.raises(ValueError):
                    fast.value_and_grad(*args)
                DATA = saved
                continue
            assert _trees_same(fast.value_and_grad(*args), expected)
        st = info(fast)
        assert st["compiled_calls"] >= 4 and len(st["programs"]) == 1, st
        guards = st["programs"][0]["guards"]
        assert not any("DATA is" in g or "weights is" in g for g in guards), guards  # no identity guard
    finally:
        DATA = saved
        del _mod.weights


def scaled_by_entry(a, M):
    return a * M[0, 0]


def entry_of_global(x):
    return np.sum(x * DATA[1])


def length_of_global(x):
    return np.sum(x * len(DATA))


def entry_of_module_attribute(x):
    return np.sum(x * _mod.weights[0, 1])


def computes_from_read_arrays(k):
    def f(x):
        return np.sum(scaled_by_entry(x, _mod.weights)) + np.sum(x * k[1]) + np.sum(k.T @ x)
    return f


def test_the_length_of_a_global_array_is_fixed_by_its_guard():
    """`len(DATA)` needs no record: the program reads DATA at call time and guards its shape, so a
    global rebound to a longer array is a guard failure (a new capture), never the old length."""
    global DATA
    saved = DATA
    try:
        fast, general = compiled_and_general(length_of_global)
        x = np.linspace(0.5, 1.5, 3)
        for n in (len(DATA), len(DATA), len(DATA) + 2, len(DATA) + 2):
            DATA = np.zeros(n)
            assert _trees_same(fast.value_and_grad(x), general.value_and_grad(x))
        assert info(fast)["programs"] and info(fast)["compiled_calls"] >= 2
    finally:
        DATA = saved


@pytest.mark.parametrize("fn", [entry_of_global, entry_of_module_attribute])
def test_what_is_computed_from_a_global_array_without_the_arguments_is_never_a_constant(fn):
    """`x * W[0, 0]` with W a global: the rewrite leaves `W[0, 0]` unhooked (no operand derives from
    the arguments), so the capture cannot record it; the signature stays general. (Folded into the
    program as a constant, it gave the old entry after W was written in place.)"""
    _mod.weights = np.ones((3, 3))
    try:
        fast, general = compiled_and_general(fn)
        x = np.linspace(0.5, 1.5, 3)
        for _ in range(3):
            fast.grad(x)
        DATA[1] += 1.0
        _mod.weights[0, 1] = 4.0
        assert _trees_same(fast.value_and_grad(x), general.value_and_grad(x))
        assert not info(fast)["programs"]
        (why,) = info(fast)["not_compiled"].values()
        assert "without the arguments" in why, why
    finally:
        DATA[1] = 0.0
        del _mod.weights


def test_operations_of_a_closure_or_a_callee_on_a_read_array_are_recorded():
    """A closure's cells are hooked, and an array handed to a Python callee is tracked in the capture:
    `k[1]`, `k.T` and the callee's `M[0, 0]` are recorded, so the program computes them per call."""
    _mod.weights = np.ones((3, 3))
    k = np.array([1.0, 2.0, 3.0])
    try:
        fast, general = compiled_and_general(computes_from_read_arrays(k))
        x = np.linspace(0.5, 1.5, 3)
        for step in range(4):
            k[1] += step
            _mod.weights[0, 0] -= step
            assert _trees_same(fast.value_and_grad(x), general.value_and_grad(x))
        assert info(fast)["compiled_calls"] == 4 and len(info(fast)["programs"]) == 1, info(fast)
    finally:
        del _mod.weights


def made_inside(W, x, labels, n):
    z = W @ x + np.zeros((W.shape[0], 1))
    z = z - np.max(z, axis=0, keepdims=True)
    logp = z - np.log(np.sum(np.exp(z), axis=0, keepdims=True))
    picked = logp[labels, np.arange(x.shape[1])]  # (an index array made inside)
    return -np.sum(picked * np.linspace(0.5, 1.0, n)) + np.sum(x * np.full(x.shape, 0.25, dtype=np.float32))


def test_arrays_made_inside_from_constants_are_made_again_by_the_program():
    """`np.zeros(...)`, `np.arange(n)`, `np.linspace`, `np.full(..., dtype=)`: the capture records how
    each array was made (dispatch.MAKERS) and the program makes it again per call, never holding
    one as a constant; a new int argument is a new signature."""
    fast, general = compiled_and_general(made_inside)
    rng = np.random.default_rng(8)
    for n in (5, 5, 5, 7, 7):
        args = (rng.normal(size=(4, 3)), rng.normal(size=(3, n)), rng.integers(0, 4, n), n)
        got, expected = fast.value_and_grad(*args), general.value_and_grad(*args)
        assert _trees_same(got, expected)
    st = info(fast)
    assert st["compiled_calls"] == 5 and len(st["programs"]) == 2, st
    source = [t for t in bytegrad.compiled.policy._BY_FUNCTION[fast._target].values()][0].programs[0].source
    assert "arange" in source and "linspace" in source and "zeros" in source


class _ArrayLike:
    def __init__(self, v):
        self.v = v

    def __array__(self, dtype=None, copy=None):
        return self.v * 2.0


def array_of_tracked_values(x):
    a, b = x[0] * 2.0, x[1] * 3.0
    return np.sum(np.array([a, b]) ** 2) + np.sum(np.asarray([[a, 1.0], [b, 2.0]])) \
        + np.sum(np.asarray(_ArrayLike(x)) ** 2)


def test_a_maker_called_on_tracked_values_is_differentiated_in_the_capture_run():
    """`np.array([a, b])` of tracked scalars, `np.asarray` of an object whose `__array__` reads a
    tracked array: not arrays made from constants. The capture run's own gradient (returned to the
    caller) is the general path's. (Taken for made arrays, they gave a gradient of zero.)"""
    fast, general = compiled_and_general(array_of_tracked_values)
    for k in range(3):
        x = np.array([1.0, 2.0]) + k
        assert _trees_same(fast.value_and_grad(x), general.value_and_grad(x))


def test_a_made_array_is_not_shared_between_calls():
    """A program makes the array again on each call: a caller that writes into an output made inside
    the function does not change the next call's result."""
    def f(x):
        return np.sum(x * np.ones(3)), np.ones(3)

    fast = bytegrad.differentiate(fresh(f), has_aux=True, tier="numpy")
    general = bytegrad.differentiate(f, has_aux=True, tier="general")
    x = np.arange(3.0)
    for _ in range(3):
        (value, aux), grad = fast.value_and_grad(x)
        aux[:] = 7.0
        grad[:] = 9.0
        assert _trees_same(fast.value_and_grad(x), general.value_and_grad(x))


def test_a_closure_variable_rebound_between_signatures_is_guarded_at_its_new_value():
    """The guards hold the value the capture read, not the one seen when the function was first
    checked: after `c` is rebound, a new signature's program compiles and runs."""
    f, set_c = closure_scaling(2.0)
    fast, general = compiled_and_general(f)
    fast.grad(np.ones(3))
    set_c(5.0)
    for n in (4, 4, 4):
        assert _trees_same(fast.value_and_grad(np.ones(n)), general.value_and_grad(np.ones(n)))
    st = info(fast)
    assert len(st["programs"]) == 2 and st["compiled_calls"] >= 2, st
    assert "c == 5.0" in st["programs"][1]["guards"]


def test_an_array_derived_from_a_global_stays_general_with_the_reason():
    def g(x):
        return np.sum(x * DATA[::-1])

    fast, general = compiled_and_general(g)
    x = np.ones(3)
    assert _trees_same(fast.value_and_grad(x), general.value_and_grad(x))
    (why,) = info(fast)["not_compiled"].values()
    assert "without the arguments" in why, why


def _trees_same(a, b) -> bool:
    try:
        assert_trees_close(a, b, rtol=1e-12, atol=0.0)
    except AssertionError:
        return False
    if type(a) is not type(b):
        return False
    if isinstance(a, (tuple, list)):
        return all(_trees_same(x, y) for x, y in zip(a, b))
    return not isinstance(a, np.ndarray) or a.dtype == b.dtype


def test_a_replaced_body_or_default_drops_the_programs():
    def f(x, n=2):
        return np.sum(x * n)

    def g(x, n=2):
        return np.sum(x * x * n)

    d = bytegrad.differentiate(f, tier="numpy")
    x = np.arange(3.0)
    assert_same(d.grad(x), 2 * np.ones(3))
    f.__defaults__ = (5,)
    assert_same(d.grad(x), 5 * np.ones(3))
    f.__code__ = g.__code__
    assert_same(d.grad(x), 10 * x)


# ---- eligibility: what stays on the general path, and why -------------------------------------


def branch_on_value(x):
    if x[0]:  # the truth of a differentiated value itself (a decision, as `x[0] != 0` is)
        return np.sum(x * x)
    return np.sum(np.sin(x))


def draws_random(x):
    return np.sum(x * np.random.random())


def prints(x):
    y = np.sum(x * x)
    print("loss", y)
    return y


def calls_helper(x):
    return np.sum(scale_by_length(x) * x)  # a Python callee


class _Scaler:
    k = 2.0

    def __call__(self, x):
        return x * self.k  # state a guard cannot fix


SCALER = _Scaler()


def calls_object(x):
    return np.sum(SCALER(x) * x)


W_GLOBAL = np.ones(3)


def reads_global_array(x):
    return np.sum(x * W_GLOBAL[::-1])


_SCRATCH = np.zeros(3)


def writes_into_array(x):  # (a global's array: writes into the function's own arrays compile)
    y = _SCRATCH
    y[0] = x[1]
    return np.sum(y * x)


def with_closure():
    w = [2.0]  # (a cell holding a list: no guard fixes what it holds)

    def f(x):
        return np.sum(x * w[0])
    return f


def mutable_default(x, scale={"k": 2.0}):  # the point: it can change between calls
    return np.sum(x * scale["k"])


@pytest.mark.parametrize("fn, why", [
    (draws_random, "random"),
    (prints, "print"),
    (reads_global_array, "without the arguments"),
    (writes_into_array, "writes into"),
    (with_closure(), "the closure variable w, a list"),
    (mutable_default, "default argument"),
], ids=lambda v: getattr(v, "__name__", None) or "")
def test_ineligible_functions_stay_on_the_general_path_with_a_reason(fn, why):
    fast, general = compiled_and_general(fn)
    for s in (1.0, -1.0, 2.0):  # the branch flips between calls
        x = s * np.array([0.3, 0.5, 0.9])
        np.random.seed(0)
        got = fast.grad(x)
        np.random.seed(0)
        assert_same(got, general.grad(x))
    st = info(fast)
    assert st["programs"] == []
    (reason,) = st["not_compiled"].values()
    assert why in reason


def test_a_callable_object_at_module_level_compiles_and_its_class_is_guarded():
    """SCALER, a global object of a plain class: taken apart by the capture and walked at each call
    (compiled/objects.py); its class attribute `k` rebound between calls is seen."""
    fast, general = compiled_and_general(calls_object)
    x = np.array([0.3, 0.5, 0.9])
    try:
        for k in (2.0, 2.0, 3.0, 3.0):
            _Scaler.k = k
            assert_same(fast.grad(x), general.grad(x))
    finally:
        _Scaler.k = 2.0
    assert info(fast)["programs"] and info(fast)["compiled_calls"] >= 2


def test_explain_shows_the_tier_and_reasons(capsys):
    text = bytegrad.explain(writes_into_array, np.ones(3))
    assert "compiled program" in text and "writes into" in text
    text = bytegrad.explain(scale_by_length, np.ones(3))
    assert "compiled program: eligible" in text


def test_precompile_captures_the_program():
    def f(x):
        return np.sum(np.sin(x) * x)

    d = bytegrad.differentiate(fresh(f), tier="auto")
    stats = bytegrad.precompile(d, np.linspace(0, 1, 3))
    assert len(stats["compiled"]["programs"]) == 1
    x = np.linspace(1, 2, 3)
    assert_same(d.grad(x), bytegrad.differentiate(f, tier="general").grad(x))
    assert info(d)["general_calls"] == 2  # precompile's own two gradients; the rest ran the program


@pytest.mark.parametrize("fn, args", [
    (np.matmul, (np.arange(6.0).reshape(2, 3), np.linspace(-1, 1, 12).reshape(3, 4))),
    (__import__("operator").matmul, (np.arange(4.0).reshape(2, 2), np.ones((2, 5), np.float32))),
    (np.sum, (np.linspace(0, 1, 7),)),
    (np.ndarray.sum, (np.linspace(0, 1, 6).reshape(2, 3).astype(np.float32),)),
    (__import__("operator").getitem, (np.arange(3.0), (slice(None), None))),
], ids=["matmul", "operator.matmul", "sum", "ndarray.sum", "getitem-new-axes"])
def test_program_forms_are_their_rules(fn, args):
    """A rule's ProgramForm computes what the rule and its pullback compute, exactly."""
    rule = registry.lookup(fn)
    form = rule.rrule.program_form
    assert form.when(*args)
    out, pullback = rule.rrule(*args)
    names = [f"a{k}" for k in range(len(args))]
    shapes = {f"shape{k}": repr(np.shape(a)) for k, a in enumerate(args)}
    env = dict(zip(names, args))
    got = eval(form.forward.format(*names, g="g", **shapes), env)  # noqa: S307
    np.testing.assert_array_equal(got, out)
    g = np.linspace(0.5, 1.5, np.size(out)).reshape(np.shape(out)).astype(np.result_type(out))
    bars = pullback(g)
    for k, template in enumerate(form.cotangents):
        if template is None:
            continue
        want = bars[k]() if callable(bars[k]) else bars[k]
        got = eval(template.format(*names, g="g", **shapes), dict(env, g=g))  # noqa: S307
        np.testing.assert_array_equal(got, want)


# ---- the Numba back end -----------------------------------------------------------------------

needs_numba = pytest.mark.skipif(kernels.disabled(), reason="Numba disabled (BYTEGRAD_DISABLE_NUMBA)")


@needs_numba
@pytest.mark.parametrize("case", [c for c in bench_cases.CASES if c.key in ("sin10", "loop50", "loop50f", "elem10")],
                         ids=lambda c: c.key)
def test_numba_programs_agree_with_the_general_path(case):
    fast = bytegrad.differentiate(fresh(case.loss), tier="numba")
    general = bytegrad.differentiate(case.loss, tier="general")
    rng = np.random.default_rng(1)
    for _ in range(3):
        params, data = case.inputs(rng)
        got, want = fast.value_and_grad(params, *data), general.value_and_grad(params, *data)
        assert_same(got, want, rtol=1e-12)  # libm and NumPy may differ in the last bit, not more
        assert type(got[0]) is type(want[0])
    s = info(fast)
    assert [p["backend"] for p in s["programs"]] == ["numba"], s
    assert s["compiled_calls"] == 3


@needs_numba
def test_numba_tier_falls_back_to_numpy_where_the_kernel_cannot_be_written():
    def loss(x):  # a max over a tuple of axes: no form in a kernel (the MLP's softmax has one now)
        return np.sum(np.exp(x - np.max(x, axis=(0, 1), keepdims=True)))

    fast = bytegrad.differentiate(fresh(loss), tier="numba")
    x = np.random.default_rng(0).standard_normal((3, 4))
    assert_same(fast.grad(x), bytegrad.differentiate(loss, tier="general").grad(x))
    assert [p["backend"] for p in info(fast)["programs"]] == ["numpy"]


@needs_numba
@pytest.mark.parametrize("kind", program_source.GUARD_KINDS)
def test_numba_programs_keep_every_guard(kind):
    fn, first, later, change = guard_case(kind)
    fast = bytegrad.differentiate(fresh(fn), tier="numba")
    try:
        fast.grad(*first)
        assert [p["backend"] for p in info(fast)["programs"]] == ["numba"]
        if change is not None:
            change()
        expected = bytegrad.differentiate(fn, tier="general").value_and_grad(*later)
        assert _trees_same(fast.value_and_grad(*later), expected)
    finally:
        restore_guard_case(kind)


@needs_numba
def test_auto_tier_moves_a_hot_program_to_numba_when_it_is_faster(monkeypatch):
    monkeypatch.setattr(compiled, "numba_price", lambda prog: 0.0)  # any time spent pays for the compile
    fast = bytegrad.differentiate(fresh(bench_cases.loop_loss), tier="auto")
    general = bytegrad.differentiate(bench_cases.loop_loss, tier="general")
    x = np.linspace(0.5, 1.5, 10)
    for _ in range(compiled.AUTO_AFTER + 1 + 16):
        got = fast.grad(x, 20)
    assert_same(got, general.grad(x, 20))
    (prog,) = info(fast)["programs"]
    assert prog["backend"] == "numba", prog  # 20 iterations on array[10]: the kernel is many times faster
    x = np.linspace(0.2, 0.9, 10)
    assert_same(fast.grad(x, 20), general.grad(x, 20))


def _wide_layer(W, x):
    return np.sum(np.tanh(W @ x))


def test_the_tier_up_meter_counts_the_time_a_numba_twin_could_save(monkeypatch):
    """A NumPy program's ski-rental meter counts the share of its time outside contractions
    (compiled/parts.py `savable_share`): a twin runs the same BLAS, so a program that spends
    its time in a large matrix product reaches the twin's price far later (an MLP's 200 training
    steps imported Numba and compiled a twin no faster than the NumPy program); a loop of small
    operations counts all of its time. A fake clock makes each timed call last one second; the
    program store keeps the share."""
    from bytegrad.compiled import store as program_store

    monkeypatch.setattr(compiled, "numba_price", lambda prog: float("inf"))  # watch the meter, never tier up
    ticks = iter(range(10**9))
    monkeypatch.setattr(compiled, "_perf", lambda: float(next(ticks)))
    rng = np.random.default_rng(9)
    W, x = rng.standard_normal((300, 300)), rng.standard_normal((300, 40))
    wide = bytegrad.differentiate(fresh(_wide_layer), tier="auto")
    loop = bytegrad.differentiate(fresh(bench_cases.loop_loss), tier="auto")
    for _ in range(compiled.AUTO_AFTER + 1 + 64):
        wide.grad(W, x)
        loop.grad(np.linspace(0.5, 1.5, 10), 5)
    (rw,) = [r for t in compiled._BY_FUNCTION[wide.fn].values() for r in t.runs]
    (rl,) = [r for t in compiled._BY_FUNCTION[loop.fn].values() for r in t.runs]
    pw, pl = rw.program, rl.program  # (the programs; the policy's counters are in their runs)
    assert pw.backend == pl.backend == "numpy" and rw.calls == rl.calls == 64
    assert pw.share < 0.3 and pl.share == 1.0, (pw.share, pl.share)
    assert rw.seconds == pytest.approx(4 * 16 * pw.share) and rl.seconds == pytest.approx(4 * 16)
    note = info(wide)["programs"][0]["numba"]  # (stats() and explain say where the meter stands)
    assert note.startswith("not tried yet") and f"counts {pw.share:.0%} of its time" in note, note
    (back,) = program_store.loads(program_store.dumps([pw]))
    assert back.share == pw.share


def test_numba_back_end_refused_when_numba_is_disabled(monkeypatch):
    monkeypatch.setattr(kernels, "disabled", lambda: True)
    fast = bytegrad.differentiate(fresh(bench_cases.sin_chain_loss), tier="numba")
    fast.grad(np.ones(2), 3)
    assert [p["backend"] for p in info(fast)["programs"]] == ["numpy"]


# ---- pullbacks and vjp ---------------------------------------------------------------------------


def pb_dense(W, x, n):
    h = np.tanh(W @ x)
    return h * float(n)


def pb_tree(x, W):
    h = np.tanh(W @ x)
    return h * 2.0, {"s": np.sum(h ** 2), "x": x, "label": "h"}


def pb_repeated(x):
    y = np.sin(x)
    return y, y, [y * 3.0, 1.5]


def pb_scalar(x, y):
    return np.sum(x * y) + 2.0


PULLBACKS = [
    (pb_dense, lambda rng: (rng.normal(size=(4, 3)), rng.normal(size=3), 3)),
    (pb_tree, lambda rng: (rng.normal(size=3), rng.normal(size=(4, 3)))),
    (pb_repeated, lambda rng: (rng.normal(size=5),)),
    (pb_scalar, lambda rng: (rng.normal(size=5), rng.normal(size=5))),
]


def random_cotangent(out, rng):
    if isinstance(out, (tuple, list)):
        return type(out)(random_cotangent(v, rng) for v in out)
    if isinstance(out, dict):
        return {k: random_cotangent(v, rng) for k, v in out.items()}
    if isinstance(out, np.ndarray):
        return rng.normal(size=out.shape)
    if isinstance(out, float):
        return float(rng.normal())
    return None


@pytest.mark.parametrize("fn, make", PULLBACKS, ids=lambda x: getattr(x, "__name__", ""))
def test_pullback_programs_agree_with_the_general_path(fn, make):
    fast = bytegrad.differentiate(fresh(fn), tier="numpy")
    general = bytegrad.differentiate(fn, tier="general")
    rng = np.random.default_rng(1)
    for _ in range(3):  # new values each call, two cotangents per pullback
        args = make(rng)
        out1, back1 = fast.pullback(*args)
        out2, back2 = general.pullback(*args)
        assert _trees_same(out1, out2)
        for _ in range(2):
            ct = random_cotangent(out2, rng)
            assert _trees_same(back1(ct), back2(ct))
    s = fast._pb_tiers.describe()  # (the first pullback's back() checks the program and adopts it)
    assert len(s["programs"]) == 1 and s["compiled_calls"] == 2, s


def test_pullback_program_returns_an_argument_as_a_view_and_never_aliases_it():
    fast = bytegrad.differentiate(fresh(pb_tree), tier="numpy")
    x, W = np.linspace(0.1, 1.0, 3), np.ones((4, 3))
    ct = (np.zeros(4), {"s": 0.0, "x": np.ones(3), "label": None})
    fast.pullback(x, W)[1](ct)  # captured, then checked and adopted
    out, back = fast.pullback(x, W)
    assert fast._pb_tiers.compiled_calls == 1
    assert out[1]["x"] is not x and np.shares_memory(out[1]["x"], x)
    g = back(ct)
    assert g[0] is not x and np.array_equal(g[0], np.ones(3))


def pb_product(x, y):
    return x * y


def outcome(fn, *args):
    """What calling fn gives: its result, or the type of what it raised."""
    try:
        return fn(*args)
    except Exception as exc:  # noqa: BLE001
        return type(exc)


@pytest.mark.parametrize("omit", [False, True], ids=["guarded", "guard-omitted"])
def test_pullback_cotangent_not_shaped_as_at_capture_goes_to_the_general_path(omit, monkeypatch):
    """The program's reverse pass fixes shapes at capture, so `back` hands a cotangent of another
    shape to the general path: a (1, 3) cotangent of a (3,) output is the general path's
    PullbackError at the user's line (without the guard: a bare ValueError from inside the
    program); a (1,) cotangent and an int broadcast, as on the general path."""
    if omit:
        monkeypatch.setattr(program_source, "_OMITTED", frozenset({program_source.COTANGENT_GUARD}))
    fast = bytegrad.differentiate(fresh(pb_product), tier="numpy")
    general = bytegrad.differentiate(pb_product, tier="general")
    x = np.linspace(0.0, 1.0, 3)
    fast.pullback(x, 2.0)[1](np.ones(3))  # captured, then checked and adopted
    same = []
    for ct in (np.ones((1, 3)), np.ones(1), 2, np.ones(3)):
        got, expected = outcome(fast.pullback(x, 2.0)[1], ct), outcome(general.pullback(x, 2.0)[1], ct)
        same.append(got is expected if isinstance(expected, type) else _trees_same(got, expected))
    assert fast._pb_tiers.programs and fast._pb_tiers.compiled_calls == 4, fast._pb_tiers.describe()
    assert same == ([False] if omit else [True]) + [True, True, True]


def test_vjp_uses_the_functions_pullback_programs():
    def f(x):
        return np.exp(x) * x

    x = np.linspace(0.0, 1.0, 4)
    for _ in range(compiled.AUTO_AFTER + 3):
        out, back = bytegrad.vjp(f, x)
        (g,) = back(np.ones(4))
    tiers = compiled.tiers_for(f, compiled.PULLBACK, None)
    assert tiers.compiled_calls >= 2 and tiers.programs
    np.testing.assert_allclose(g, np.exp(x) * (x + 1.0), rtol=1e-12)


def test_a_pullback_program_is_checked_when_back_first_runs_never_earlier():
    """The general path runs a pullback's reverse pass only when back() is called: the check of a
    captured program waits for the capture's own back() call (a back() never called costs
    nothing; an exception in the reverse pass reaches the user from their back() call, and the
    program keeps waiting)."""
    x = np.linspace(0.0, 1.0, 3)
    fast = bytegrad.differentiate(fresh(pb_product), tier="numpy")
    for _ in range(3):
        fast.pullback(x, 2.0)
    assert not fast._pb_tiers.programs
    assert fast._pb_tiers.describe()["not_compiled"] == {"ndarray, float": compiled.PENDING}
    fast = bytegrad.differentiate(fresh(pb_product), tier="numpy")
    _, back = fast.pullback(x, 2.0)  # the capture
    assert outcome(back, np.ones((1, 3))) is bytegrad.errors.PullbackError
    assert not fast._pb_tiers.programs
    back(np.ones(3))
    assert fast._pb_tiers.programs


def test_pullbacks_with_kwargs_or_inside_derivatives_stay_general():
    d = bytegrad.differentiate(fresh(pb_scalar), tier="numpy")
    x = np.ones(3)
    d.pullback(x, y=x)
    assert d._pb_tiers is None or not d._pb_tiers.programs
    h = bytegrad.grad(lambda t: d.pullback(t, x)[1](1.0)[0].sum())
    np.testing.assert_allclose(h(x), np.zeros(3))
    assert d._pb_tiers is None or not d._pb_tiers.programs


# ---- decisions on data: computed again and checked ------------------------------------------------


def branch_on_data(x):
    if np.sum(x) > 0:
        return np.sum(x * x)
    return np.sum(np.sin(x))


def uses_argmax(x):
    return x[np.argmax(x)] * 2.0 + np.sum(x)


def uses_argmax_method(x):
    return x[x.argmax()] * 2.0 + np.sum(x)


def mask_as_data(x):
    m = x > 0.4
    return np.sum(np.sin(x) * m + x * x)


def optional_bias(x, b):
    y = np.tanh(x)
    if b is not None:
        y = y + b
    while np.max(y) > 1.0:
        y = y * 0.5
    return np.sum(y * y)


DECISIONS = [
    (branch_on_value, lambda s: (s * np.array([0.3, 0.5, 0.9]) + (s < 0) * 0.3,)),
    (branch_on_data, lambda s: (s * np.array([0.3, 0.5, 0.9]),)),
    (uses_argmax, lambda s: (np.roll(np.array([0.3, 0.5, 0.9]), int(s)),)),
    (uses_argmax_method, lambda s: (np.roll(np.array([0.3, 0.5, 0.9]), int(s)),)),
    (mask_as_data, lambda s: (np.abs(s) * np.array([0.3, 0.5, 0.9]),)),
    (optional_bias, lambda s: (np.array([0.3, 0.5, 0.9]), np.full(3, s))),
]


@pytest.mark.parametrize("omit", [False, True], ids=["guarded", "guard-omitted"])
@pytest.mark.parametrize("fn, make", DECISIONS, ids=lambda v: getattr(v, "__name__", ""))
def test_decisions_on_data_are_checked_and_a_flipping_branch_agrees(fn, make, omit, monkeypatch):
    """A comparison, a test or a call without a derivative on a differentiated value is computed again
    in the program and checked against the capture; where it comes out otherwise the call runs on the
    general path (and is captured for the other outcome). Without the check, a program replays the
    captured outcome and gives a wrong gradient."""
    if omit:
        monkeypatch.setattr(program_source, "_OMITTED", frozenset({program_source.DECISION_GUARD}))
    fast, general = compiled_and_general(fn)
    same = []
    for s in (1.0, -1.0, 2.0, 1.0, -1.0):  # the outcome flips between calls
        args = make(s)
        got = fast.value_and_grad(*args)
        same.append(_trees_same(got, general.value_and_grad(*args)))
    st = info(fast)
    assert st["programs"] and not st["not_compiled"], st
    if omit:
        # a mask used only as data is right unchecked too (the program computes it again)
        assert not all(same) or fn is mask_as_data
    else:
        assert all(same)
        assert st["compiled_calls"] == 5 and any(p["decided_otherwise"] for p in st["programs"]), st
        assert any("gives" in g for p in st["programs"] for g in p["guards"])


def test_a_decision_that_changes_every_call_stops_the_captures():
    fast, general = compiled_and_general(mask_as_data)
    rng = np.random.default_rng(3)
    for _ in range(12):
        x = rng.uniform(0.0, 0.8, size=40)
        assert_same(fast.grad(x), general.grad(x))
    st = info(fast)
    assert len(st["programs"]) <= compiled.MAX_RECAPTURES + 1
    (reason,) = st["not_compiled"].values()
    assert "decisions on data came out otherwise" in reason


def test_the_numba_back_end_checks_decisions():
    """(compiled/numba_decide.py; tests/test_compiled_numba_decide.py flips them call by call)"""
    d = bytegrad.differentiate(fresh(branch_on_data), tier="numba")
    x = np.array([0.3, 0.5, 0.9])
    for _ in range(2):
        assert_same(d.grad(x), bytegrad.differentiate(branch_on_data, tier="general").grad(x))
    assert [p["backend"] for p in info(d)["programs"]] == ["numba" if not kernels.disabled() else "numpy"]


# ---- Python callees ---------------------------------------------------------------------------------


def layer(W, x, act=np.tanh):
    return act(W @ x)


def squash(h):
    if h.sum() > 0:
        return np.sum(h * h)
    return np.sum(h)


def two_layers(W1, W2, x):
    return squash(layer(W2, layer(W1, x)))


def test_python_callees_are_part_of_the_program():
    """Functions the differentiated function calls run in the capture like its own code: their
    operations are in the program, their decisions checked, their globals, code and defaults guarded."""
    fast, general = compiled_and_general(two_layers, wrt=(0, 1, 2))
    rng = np.random.default_rng(4)
    for _ in range(4):
        args = (rng.normal(size=(4, 3)), rng.normal(size=(2, 4)), rng.normal(size=3))
        assert _trees_same(fast.value_and_grad(*args), general.value_and_grad(*args))
    st = info(fast)
    assert st["programs"] and st["compiled_calls"] == 4, st
    guards = st["programs"][0]["guards"]
    assert any("layer keeps its code, defaults and keyword defaults" in g for g in guards)
    assert any("squash keeps its code, defaults and keyword defaults" in g for g in guards)


def writes_attribute(x):
    _mod.last = x  # a write outside the function
    return x * 2.0


def calls_writer(x):
    return np.sum(writes_attribute(x))


def test_a_callee_that_cannot_be_replayed_names_itself():
    fast, _ = compiled_and_general(calls_writer)
    fast.grad(np.ones(3))
    (reason,) = info(fast)["not_compiled"].values()
    assert reason.startswith("it calls writes_attribute (line") and "writes an attribute" in reason


# ---- has_aux ------------------------------------------------------------------------------------------


def loss_with_aux(x, W):
    h = np.tanh(W @ x)
    return np.sum(h * h), {"h": h, "n": 3, "x": x, "note": "hidden"}


@pytest.mark.parametrize("tier", ["numpy", "numba"])
def test_has_aux_programs_return_the_aux_as_the_general_path_does(tier):
    fast = bytegrad.differentiate(fresh(loss_with_aux), wrt=(0, 1), has_aux=True, tier=tier)
    general = bytegrad.differentiate(loss_with_aux, wrt=(0, 1), has_aux=True, tier="general")
    rng = np.random.default_rng(5)
    for _ in range(3):
        args = (rng.normal(size=3), rng.normal(size=(2, 3)))
        (v1, aux1), g1 = fast.value_and_grad(*args)
        (v2, aux2), g2 = general.value_and_grad(*args)
        assert _trees_same((v1, g1), (v2, g2)) and _trees_same(aux1, aux2)
        assert aux1["x"] is not args[0] and np.shares_memory(aux1["x"], args[0])  # a view, as on the general path
    st = info(fast)
    assert st["compiled_calls"] == 3 and [p["backend"] for p in st["programs"]] == ["numpy"], st


def test_has_aux_pullback_programs_return_the_aux_and_check_it():
    """`pullback` of a has_aux function: the program returns (output, back, aux) as the general path
    does; the aux is part of the check that adopts the program (an aux the program would rebuild
    wrongly refuses it)."""
    fast = bytegrad.differentiate(fresh(loss_with_aux), has_aux=True, tier="numpy")
    general = bytegrad.differentiate(loss_with_aux, has_aux=True, tier="general")
    rng = np.random.default_rng(6)
    for k in range(4):
        args = (rng.normal(size=3), rng.normal(size=(2, 3)))
        (v1, back1, aux1), (v2, back2, aux2) = fast.pullback(*args), general.pullback(*args)
        assert _trees_same((v1, back1(1.5 + k)), (v2, back2(1.5 + k))) and _trees_same(aux1, aux2)
        assert aux1["x"] is not args[0] and np.shares_memory(aux1["x"], args[0])
    st = fast.stats()["compiled_pullback"]
    assert st["compiled_calls"] == 3 and len(st["programs"]) == 1, st
    # the check compares the aux: a program whose aux differs from the capture's is refused
    tiers = bytegrad.differentiate(fresh(loss_with_aux), has_aux=True, tier="numpy")
    out, back, aux = tiers.pullback(*args)
    aux["h"] = aux["h"] + 1.0  # (the reference the pending program is checked against, now different)
    back(1.0)
    why = tiers.stats()["compiled_pullback"]["not_compiled"]
    assert list(why.values()) == ["the program disagreed with the general path on the capture's own arguments"]


# ---- the Numba back end: float32 loops ---------------------------------------------------------


@needs_numba
@pytest.mark.parametrize("case", [c for c in bench_cases.CASES if c.key in ("loop50f32", "elem10f32")],
                         ids=lambda c: c.key)
def test_numba_float32_loops_are_as_accurate_as_the_general_path(case):
    """A float32 elementwise program is one loop too: computed in float64, stored as float32. It is
    then not bit for bit the general path's (which rounds each operation to float32) but at least as
    close to float64 arithmetic on the same inputs, and never refused for disagreeing."""
    fast = bytegrad.differentiate(fresh(case.loss), tier="numba")
    general = bytegrad.differentiate(case.loss, tier="general")
    rng = np.random.default_rng(2)
    for _ in range(3):
        params, data = case.inputs(rng)
        (v1, g1), (v2, g2) = fast.value_and_grad(params, *data), general.value_and_grad(params, *data)
        assert type(v1) is type(v2) is np.float32 and g1.dtype == np.float32
        v, g = general.value_and_grad(params.astype(np.float64), *data)
        scale = float(np.abs(g).max())
        assert np.abs(g1 - g).max() <= np.abs(g2 - g).max() + 1e-7 * scale
        assert abs(v1 - v) <= abs(v2 - v) + 1e-7 * abs(v)
    s = info(fast)
    assert [p["backend"] for p in s["programs"]] == ["numba"], s
    assert s["compiled_calls"] == 3 and s["disagreements"] == 0


def _scaled(x, w):
    return np.sum(x * w * 0.5)


@needs_numba
@pytest.mark.parametrize("w", [np.linspace(1, 2, 5), 0.7], ids=["float64-array", "float"])
def test_float32_loop_with_other_arguments(w):
    """A float32 array with a float64 one is one loop (each gradient stored in its argument's dtype);
    with a differentiated float it is the array kernel (the guard `narrow and a float leaf` in
    program_numba._loop_shape: without it the loop is tried, and the call ends on the NumPy back end)."""
    x = np.linspace(0, 1, 5, dtype=np.float32)
    fast = bytegrad.differentiate(fresh(_scaled), wrt=(0, 1), tier="numba")
    got = fast.value_and_grad(x, w)
    assert_same(got, bytegrad.differentiate(_scaled, wrt=(0, 1), tier="general").value_and_grad(x, w))
    s = info(fast)
    assert s["disagreements"] == 0 and [p["backend"] for p in s["programs"]] == ["numba"], s


def test_float32_agreement_allows_float32_rounding_only():
    x = np.linspace(1, 2, 7, dtype=np.float32)
    assert compiled._same(x * np.float32(1 + 1e-6), x)  # a few float32 roundings apart
    assert not compiled._same(x * np.float32(1 + 1e-3), x)
    assert not compiled._same(x.astype(np.float64) * (1 + 1e-9), x.astype(np.float64))  # float64: 1e-12
    y = np.array([1.0, 1e-9], np.float32)  # an element that cancelled to near 0: judged against the largest
    assert compiled._same(y + np.float32(1e-8), y)


# ---- the Numba back end: hybrid array kernels ------------------------------------------------------


def _tanh_first(x, w):
    return np.sum(w @ np.tanh(x))


def _exp_between(x, w):
    return np.sum(np.exp(x * w) - x)


def _two_ufuncs(x, w):
    return np.sum(np.log(np.exp(x * w) + 1.0))


def _exp2_first(x, w):
    return np.sum((w @ np.exp2(x)) * 2.0)


@needs_numba
@pytest.mark.parametrize("fn", [_tanh_first, _exp_between, _two_ufuncs, _exp2_first, bench_cases.dense_loss],
                         ids=lambda f: f.__name__)
def test_array_kernels_vectorise_or_split_around_large_transcendental_steps(fn):
    """An array kernel computes tanh, exp, log, expm1 and log1p with runtime/vmath.py's vectorised
    loops, in one Numba call; it calls NumPy's SIMD loop for exp2, log2 and log10 from HYBRID_MIN
    elements, its Numba parts around it. The results are the general path's."""
    from bytegrad.compiled import lower_numba as program_numba

    rng = np.random.default_rng(3)
    n = program_numba.HYBRID_MIN
    make = ((lambda: ((rng.standard_normal((4, 4)), rng.standard_normal(4)), rng.standard_normal((4, n))))
            if fn is bench_cases.dense_loss else (lambda: (rng.standard_normal((2, n)), rng.standard_normal(n)))
            if fn not in (_tanh_first, _exp2_first) else (lambda: (rng.standard_normal((2, n)), rng.standard_normal((3, 2)))))
    own = fresh(fn)
    fast = bytegrad.differentiate(own, wrt=(0, 1), tier="numba")
    general = bytegrad.differentiate(fn, wrt=(0, 1), tier="general")
    for _ in range(3):
        args = make()
        assert_same(fast.value_and_grad(*args), general.value_and_grad(*args))
    (prog,) = [p for t in compiled._BY_FUNCTION[own].values() for p in t.programs]
    split = re.search(r"def kernel\d+\(", prog.source)
    assert prog.backend == "numba" and (split if fn is _exp2_first else not split), prog.source
    assert fn is _exp2_first or re.search(r"= vm\d+\(", prog.source), prog.source
    assert info(fast)["disagreements"] == 0


def _layer(w, x):
    return np.sum(np.sin(w @ x) * x)


@needs_numba
@pytest.mark.parametrize("w_dtype, cols, loops", [(np.float64, 40, True), (np.float64, 500, False),
                                                  (np.float32, 40, False)], ids=["small", "large", "two-dtypes"])
def test_small_matrix_products_are_loops_in_a_kernel(w_dtype, cols, loops):
    """A matrix product of SMALL_MATMUL multiplications or fewer is kernels.small_matmul in an array
    kernel (forward and both cotangents), with the general path's results; a larger one stays `@`
    (BLAS). Operands of two dtypes are not loops (they would compute in the first one's dtype, and
    the capture's check would refuse a float32 result where the general path gives float64: that
    signature keeps the NumPy back end, as Numba's own `@` does not take two dtypes either)."""
    rng = np.random.default_rng(4)
    own = fresh(_layer)
    fast = bytegrad.differentiate(own, wrt=(0, 1), tier="numba")
    general = bytegrad.differentiate(_layer, wrt=(0, 1), tier="general")
    for _ in range(3):
        args = rng.standard_normal((3, 3)).astype(w_dtype), rng.standard_normal((3, cols))
        assert_same(fast.value_and_grad(*args), general.value_and_grad(*args))
    (prog,) = [p for t in compiled._BY_FUNCTION[own].values() for p in t.programs]
    assert info(fast)["disagreements"] == 0
    if w_dtype is np.float32:
        assert prog.backend == "numpy"
        return
    assert prog.backend == "numba"
    assert (re.search(r"= mm\d+\(", prog.source) is not None) == loops, prog.source
    assert prog.source.count(" @ ") == (0 if loops else 3)


# ---- lists of differentiated values --------------------------------------------------------------


def _stacks(x, ys):
    parts = [x]
    for y in ys:
        parts.append(y * x)
    return (np.sum(np.concatenate(parts) ** 2) + np.sum(np.tanh(np.vstack((x, x[::-1], np.ones(3)))))
            + np.sum(np.stack(ys) * 2.0))


def _bias_twice(x, b):
    bb = b[:, None]
    return np.sum(np.stack([bb, bb]) ** 2) + np.sum(np.tanh(x + bb))


@pytest.mark.parametrize("tier", ["numpy", "numba"])
@pytest.mark.parametrize("fn, shapes", [(_stacks, None), (_bias_twice, ((3, 4), (3,)))], ids=["stacks", "bias"])
def test_a_list_of_differentiated_values_passed_to_a_function(fn, shapes, tier):
    """np.stack([a, b]), np.concatenate, np.vstack((...)): a list or tuple holding values of the tape
    (with constants, views and arrays made inside among them) is rebuilt as a literal, and the rule's
    cotangent for it is routed to each item, as the general path's sweep routes it. `_bias_twice`: a
    bias read by a broadcast and inside a list gets both contributions (the summed-bias shortcut,
    `_squeezed_sum`, counts the reads inside lists). The Numba back end leaves such programs to the
    NumPy one."""
    own = fresh(fn)
    fast = bytegrad.differentiate(own, wrt=(0, 1), tier=tier)
    general = bytegrad.differentiate(fn, wrt=(0, 1), tier="general")
    rng = np.random.default_rng(12)
    for _ in range(3):
        if shapes is None:
            args = rng.standard_normal(3), [rng.standard_normal(3) for _ in range(2)]
        else:
            args = tuple(rng.standard_normal(s) for s in shapes)
        assert_same(fast.value_and_grad(*args), general.value_and_grad(*args))
    (prog,) = [p for t in compiled._BY_FUNCTION[own].values() for p in t.programs]
    assert prog.backend == "numpy" and info(fast)["compiled_calls"] == 3 and info(fast)["disagreements"] == 0


def _pair_sum(xs):
    return xs[0] + xs[1]


@bytegrad.rrule(_pair_sum)
def _pair_sum_rrule(xs):
    def pair_sum_pullback(out_bar):  # three cotangents for two items once the data is large
        return ([out_bar, out_bar, out_bar] if np.max(xs[1]) > 5.0 else [out_bar, out_bar],)
    return xs[0] + xs[1], pair_sum_pullback


def _uses_pair(x, y):
    return np.sum(_pair_sum([x * 2.0, y]) ** 2)


def test_a_list_cotangent_of_another_length_is_the_general_paths_error():
    """A rule whose pullback gives a list argument a cotangent with another number of items: the
    program leaves that call to the general path, which raises PullbackError, as it does without a
    program (the program does not take the first items and go on)."""
    own = fresh(_uses_pair)
    fast = bytegrad.differentiate(own, wrt=(0, 1), tier="numpy")
    general = bytegrad.differentiate(_uses_pair, wrt=(0, 1), tier="general")
    x = np.linspace(0.1, 0.3, 3)
    for _ in range(2):
        assert_same(fast.grad(x, x + 1.0), general.grad(x, x + 1.0))
    assert [p["backend"] for p in info(fast)["programs"]] == ["numpy"]
    with pytest.raises(bytegrad.PullbackError):
        general.grad(x, x + 9.0)
    with pytest.raises(bytegrad.PullbackError):
        fast.grad(x, x + 9.0)


# ---- NumPy ufuncs on constants ----------------------------------------------------------------------


def _scaled_by_width(x):
    return np.sum(x) / np.sqrt(x.shape[-1]) + np.exp(0.5) * np.sum(x * x) * np.float32(0.5) / np.prod(x.shape)


_BUF = np.zeros(3)


def _writes_with_out(x):
    np.add(_BUF, 1.0, _BUF)  # a ufunc's positional `out`: it writes a global array on every call
    return np.sum(x * _BUF)


def _writes_with_out_keyword(x):
    np.multiply(_BUF, 1.0, out=_BUF)
    return np.sum(x * _BUF)


def test_a_ufunc_on_constants_is_compiled_unless_it_may_write():
    """`np.sqrt(d)` of a shape, `np.exp(0.5)`, `np.float32(0.5)`, `np.prod(x.shape)`: a ufunc called
    with its inputs alone, or a NumPy scalar type or shape function, gives what the guards fix, so the
    program keeps its value; a ufunc given `out` (positionally or by keyword)
    writes an array, a side effect no program replays: that function stays on the general path."""
    own = fresh(_scaled_by_width)
    fast = bytegrad.differentiate(own, tier="numpy")
    general = bytegrad.differentiate(_scaled_by_width, tier="general")
    rng = np.random.default_rng(13)
    for n in (3, 3, 5, 5):
        x = rng.standard_normal(n)
        assert_same(fast.value_and_grad(x), general.value_and_grad(x))
    assert len(info(fast)["programs"]) == 2 and info(fast)["compiled_calls"] == 4, info(fast)
    for fn in (_writes_with_out, _writes_with_out_keyword):
        d = bytegrad.differentiate(fresh(fn), tier="numpy")
        for _ in range(3):
            before = _BUF.copy()
            g = d.grad(np.ones(3))
            assert not np.array_equal(_BUF, before) or fn is _writes_with_out_keyword
            np.testing.assert_array_equal(g, _BUF)
        assert info(d)["programs"] == [] and "on constants" in " ".join(info(d)["not_compiled"].values())


# ---- the NumPy back end: what is known when the program is written ------------------------------


def _shifted(x, b):
    return np.sum(x + b[:, None])


def test_a_partial_under_the_seed_is_not_multiplied_by_one():
    """Below a full sum the cotangent is the float 1.0: `1.0 * partial` is the partial itself, so
    the program does not multiply (Dense: `1 - tanh**2`) and sums a broadcast operand's cotangent
    with np.add.reduce inline (no `_unbroadcast` call)."""
    own = fresh(bench_cases.dense_loss)
    fast = bytegrad.differentiate(own, tier="numpy")
    general = bytegrad.differentiate(bench_cases.dense_loss, tier="general")
    rng = np.random.default_rng(5)
    for _ in range(3):
        params, data = bench_cases.dense_inputs(3, batch=7)(rng)
        assert_same(fast.value_and_grad(params, *data), general.value_and_grad(params, *data))
    (prog,) = [p for t in compiled._BY_FUNCTION[own].values() for p in t.programs]
    assert "_unbroadcast(" not in prog.source and re.search(r"= sum\d+\(", prog.source), prog.source
    assert not re.search(r"= g\d+ \* ", prog.source), prog.source


def test_a_partial_smaller_than_its_output_keeps_the_general_sum():
    """In `(x + c) * y` with y of shape (3, 1), the partial for `x + c` is y: smaller than the
    product, so its cotangent is not known to be an array of the product's shape, and x's is summed
    by `_unbroadcast` (`_array_partial`'s shape check: without it the inline sum misses the
    broadcast and x's gradient is a quarter of the general path's)."""
    fast, general = compiled_and_general(_broadcast_product, wrt=(0, 1, 2))
    rng = np.random.default_rng(7)
    for _ in range(3):
        args = rng.standard_normal((3, 1)), rng.standard_normal((3, 4)), rng.standard_normal((3, 1))
        assert_same(fast.value_and_grad(*args), general.value_and_grad(*args))
    s = info(fast)
    assert s["compiled_calls"] == 3 and s["general_calls"] == 0, s


def _twice_fabs(x):
    return np.sum(np.fabs(x)) + np.sum(np.fabs(x))


def test_a_bool_partial_under_the_seed_is_still_multiplied():
    """A partial may be a bool array (here a rule for np.fabs whose partial is `x == x`): `1.0 *`
    makes it float, and two such contributions then add to 2.0 (`_array_partial`'s float check:
    without it the program adds two bools to True, and the capture's check refuses the program)."""
    saved = registry.lookup(np.fabs)
    bytegrad.scalar_rule(np.fabs, lambda x, out: x == x, override=True)
    try:
        fast, general = compiled_and_general(_twice_fabs)
        x = np.linspace(-1, 1, 5)
        assert_same(fast.value_and_grad(x), general.value_and_grad(x))
        assert_same(general.grad(x), np.full(5, 2.0))
        s = info(fast)
        assert s["compiled_calls"] == 1 and s["disagreements"] == 0, s
    finally:
        registry.register(saved, override=True)


def _broadcast_product(x, c, y):
    return np.sum((x + c) * y)


def test_a_uniform_cotangent_of_a_broadcast_operand_keeps_the_general_sum():
    """`x + b[:, None]` under a full sum: b's cotangent is the float 1.0 scaled by the broadcast,
    which only `_unbroadcast` knows (the inline sum is for cotangents known to be arrays)."""
    fast, general = compiled_and_general(_shifted, wrt=(0, 1))
    rng = np.random.default_rng(6)
    for _ in range(3):
        args = rng.standard_normal((3, 4)), rng.standard_normal(3)
        assert_same(fast.value_and_grad(*args), general.value_and_grad(*args))
    s = info(fast)
    assert s["compiled_calls"] == 3 and s["general_calls"] == 0, s


@needs_numba
def test_a_numba_program_leaves_a_floating_point_error_in_the_loss_to_the_general_path():
    """A Numba kernel ignores NumPy's error state: an inf or NaN loss sends the call to the general
    path, which raises or warns as np.seterr says (the kernel alone returned -inf silently)."""
    fast = bytegrad.differentiate(fresh(lambda x: np.sum(np.log(x))), tier="numba")
    fast.grad(np.array([1.0, 2.0]))
    assert info(fast)["programs"][0]["backend"] == "numba"
    old = np.seterr(divide="raise")
    try:
        with pytest.raises(FloatingPointError):
            fast.grad(np.array([0.0, 2.0]))
    finally:
        np.seterr(**old)
    with pytest.warns(RuntimeWarning, match="divide by zero"):
        fast.grad(np.array([0.0, 2.0]))


def test_rules_loaded_for_a_module_imported_later_keep_the_programs(tmp_path, monkeypatch):
    """Importing a module whose built-in rules load lazily (Numba's import brings heapq and bisect)
    adds rules for functions that had none: programs stay (no capture again); a rule a user
    registers still outdates them (the version guard's own test)."""
    (tmp_path / "bg_lazy_target.py").write_text("def f(x):\n    return x\n")
    (tmp_path / "bg_lazy_rules.py").write_text(
        "import bytegrad, bg_lazy_target\n"
        "bytegrad.scalar_rule(bg_lazy_target.f, lambda x, out: 1.0)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(registry.LAZY_PENDING, "bg_lazy_target", "bg_lazy_rules")
    fast, general = compiled_and_general(scale_by_length)
    x = np.linspace(0.1, 1.0, 4)
    fast.grad(x)
    before = registry.version()
    import bg_lazy_target  # imported: its rules load on the next lookup
    registry.load_lazy_rules()
    assert registry.version() > before and registry.lookup(bg_lazy_target.f) is not None
    for _ in range(3):
        assert _trees_same(fast.value_and_grad(x), general.value_and_grad(x))
    st = info(fast)
    assert len(st["programs"]) == 1 and st["compiled_calls"] == 4 and st["general_calls"] == 0, st
