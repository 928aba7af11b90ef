"""Inner functions, closures, lambdas, comprehensions, generators and bytegrad's own builtins in
compiled programs (bytegrad/compiled/nested.py, compiled/eligibility.py), against the general path.

Each program is compared call by call with tier="general" under the numpy and numba tiers, values
and gradients, with what a closure reads changed between calls: a test fails if the cell were
treated as a constant or its guard removed. A `nonlocal` counter must count once per call on every
tier.
"""
from __future__ import annotations

import collections
import functools
import inspect
import os
import sys
import types

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from gradcheck import agree_with_general, assert_trees_close

import bytegrad
from bytegrad.compiled import nested
from bytegrad.rules import _impls

TIERS = ("numpy", "numba")


def info(d) -> dict:
    return d.stats()["compiled"]


def arrays(n=4, size=3, seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.normal(size=size),) for _ in range(n)]


def compiled(s) -> bool:
    return bool(s["programs"]) and s["compiled_calls"] >= 1


# ---- inner functions and closures of the differentiated function ------------------------------------


def inner_reads_locals(x):
    m = np.max(x)  # computed from data: the inner function's read of it must be recorded

    def centred(v):
        return np.exp(v - m)

    k = np.sum(x)
    shift = lambda t: t + k  # noqa: E731
    return np.sum(centred(x)) + np.sum(shift(x) ** 2)


def inner_without_arguments(x):
    y = x * 2.0

    def energy():
        return np.sum(y ** 2)  # only the cell: the call is hooked through its closure

    return energy() + np.sum(x)


def nonlocal_accumulator(x):
    acc = 0.0
    calls = 0

    def add(v):
        nonlocal acc, calls
        acc = acc + v ** 2
        calls += 1

    for v in x:
        add(v)
    return acc * calls


def nested_inner(x):
    def outer(y):
        def inner(z):
            return np.exp(-z ** 2)
        return inner(y) * y
    return np.sum(outer(x) + outer(2.0 * x))


def late_binding_and_defaults(x):
    y = x
    doubled = lambda: y * 2.0  # noqa: E731
    y = y + 1.0  # the lambda reads the new y

    def with_default(v, w=x):
        return v * w
    return np.sum(doubled()) + np.sum(with_default(x)) + np.sum(with_default(x, y))


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("fn", [inner_reads_locals, inner_without_arguments, nonlocal_accumulator, nested_inner,
                                late_binding_and_defaults])
def test_inner_functions_compile_and_agree(fn, tier):
    s = agree_with_general(fn, arrays(), tier)
    assert compiled(s), s


# ---- cells made before the call: guarded by value ----------------------------------------------------


def _make_scaled(scale):
    def scaled(v):
        return np.sin(scale * v)

    def set_scale(s):
        nonlocal scale
        scale = s
    return scaled, set_scale


def _decorate(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs)
    return wrapper


@_decorate
def _decorated(v, k=2.0):
    return np.sin(k * v)


@pytest.mark.parametrize("tier", TIERS)
def test_callee_closure_cell_changed_between_calls(tier):
    scaled, set_scale = _make_scaled(2.0)

    def f(x):
        return np.sum(scaled(x) ** 2)

    x = np.array([0.3, -0.2, 0.9])
    s = agree_with_general(f, [(x,)] * 4, tier, between=lambda k: set_scale([2.0, 2.0, 3.0, -1.5][k]))
    assert compiled(s), s
    assert any("scale" in g for p in s["programs"] for g in p["guards"]), s  # the cell's guard


@pytest.mark.parametrize("tier", TIERS)
def test_own_closure_cell_changed_between_calls(tier):
    offset = [1.0]

    def make():
        shift = offset[0]

        def f(x):
            g = lambda v: v * shift  # noqa: E731  (an inner function reading the outer closure's cell)
            return np.sum(g(x) ** 2)

        def set_shift(v):
            nonlocal shift
            shift = v
        return f, set_shift

    f, set_shift = make()
    x = np.array([0.3, -0.2, 0.9])
    s = agree_with_general(f, [(x,)] * 4, tier, between=lambda k: set_shift([1.0, 1.0, 2.5, -0.5][k]))
    assert compiled(s), s


@pytest.mark.parametrize("tier", TIERS)
def test_user_decorator_wrapper(tier):
    def f(x):
        return np.sum(_decorated(x) + _decorated(x, k=0.5) ** 2)

    s = agree_with_general(f, arrays(), tier)
    assert compiled(s), s


def _make_weighted(w):
    def weighted(v):
        return np.tanh(v @ w) * 2.0

    def set_w(new):
        nonlocal w
        w = new
    return weighted, set_w


@pytest.mark.parametrize("tier", TIERS)
def test_callee_cell_holding_an_array_is_read_per_call(tier):
    """An array in a callee's closure cell made before the call (a loss built by a factory) is an
    input of the program, read from the cell at each call: a write into it, the cell rebound to
    another array of the same shape (a program that baked the array would be wrong here), of another
    shape, or Fortran-ordered, are all seen."""
    rng = np.random.default_rng(3)
    weighted, set_w = _make_weighted(rng.normal(size=(3, 2)))

    def f(x):
        return np.sum(weighted(x) ** 2)

    def change(k):
        cell = weighted.__closure__[0]
        if k == 2:
            cell.cell_contents[0, 0] += 1.0  # in place
        elif k == 3:
            set_w(rng.normal(size=(3, 2)))  # rebound, same shape and dtype
        elif k == 4:
            set_w(rng.normal(size=(3, 5)))
        elif k == 5:
            set_w(np.asfortranarray(rng.normal(size=(3, 5))))

    s = agree_with_general(f, [(np.array([0.5, 0.1, -0.3]),)] * 7, tier, between=change)
    assert compiled(s), s


# ---- nonlocal counters: once per call on every tier ---------------------------------------------------


def _make_counted():
    calls = 0

    def f(x):
        nonlocal calls
        calls += 1
        return np.sum(x ** 2)

    def count():
        return calls
    return f, count


def _make_counted_inner():
    calls = 0

    def f(x):
        def bump():
            nonlocal calls
            calls += 1
        bump()
        return np.sum(x ** 2)

    def count():
        return calls
    return f, count


@pytest.mark.parametrize("tier", ("general",) + TIERS)
@pytest.mark.parametrize("make", [_make_counted, _make_counted_inner])
def test_outer_nonlocal_counter_counts_once_per_call(make, tier):
    f, count = make()
    d = bytegrad.differentiate(f, tier=tier)
    for k in range(4):
        v, g = d.value_and_grad(np.array([1.0, 2.0]) * (k + 1))
        assert v == pytest.approx(5.0 * (k + 1) ** 2)
        assert count() == k + 1
    if tier != "general":
        s = info(d)
        assert not s["programs"]
        assert "closure variable" in next(iter(s["not_compiled"].values()))


@pytest.mark.parametrize("tier", TIERS)
def test_local_nonlocal_counter_is_a_local(tier):
    def f(x):
        n = 0

        def tick(v):
            nonlocal n
            n += 1
            return v * n
        return np.sum(tick(x) + tick(x) ** 2) * n

    s = agree_with_general(f, arrays(), tier)
    assert compiled(s), s


# ---- a callee that ran as it is (no rewrite) is checked with its cells inactive -------------------------


_TICKS = [0]


def _tick(k):
    _TICKS[0] += 1
    return k + _TICKS[0]


def test_unrewritten_closure_callee_is_checked_with_cells_inactive():
    def f(x):
        k = 3

        def g():
            return _tick(k)  # a state change in a helper on constants: a replay would drop it
        return np.sum(x) * g()

    d = bytegrad.differentiate(f, tier="numpy")
    x = np.array([0.5, 0.1])
    for _ in range(4):
        before = _TICKS[0]
        v, g = d.value_and_grad(x)
        assert _TICKS[0] == before + 1  # once per call, as on the general path
        assert v == pytest.approx(0.6 * (3 + before + 1)) and g == pytest.approx([3.0 + before + 1] * 2)
    s = info(d)
    assert not s["programs"]
    why = next(iter(s["not_compiled"].values()))
    assert "g (line" in why and "on constants" in why, why


# ---- lambdas, comprehensions, generators, map, sorted, sum(gen) ---------------------------------------


def lambdas_and_map(x):
    sq = lambda v: v * v  # noqa: E731
    wave = lambda v, k=2.0: np.sin(k * v)  # noqa: E731
    return (np.sum(sq(x) + wave(x) + wave(x, k=0.5)) + sum(map(lambda v: v ** 3, x))
            + np.sum(np.array(list(map(np.sin, x)))))


def comprehensions(x):
    terms = [x[i] * x[i + 1] for i in range(len(x) - 1)]
    squares = [v ** 2 for v in x if v > 0]  # a decision on data per item
    d = {k: x[i] * (i + 1) for i, k in enumerate("abc")}
    scales = [lambda v, k=k: v * (k + 1) for k in range(3)]  # a comprehension on constants
    return (sum(terms) + sum(squares) + d["a"] * d["c"] + sum(np.sum(f(x) ** 2) for f in scales)
            + sum((v ** 2 for v in x), 0.5))


def _pairs(x):
    for i in range(len(x) - 1):
        yield x[i], x[i + 1]


def _chunks(x):
    yield from (x[i:i + 2] for i in range(0, len(x), 2))
    yield x[-1:] * 2.0


def generators(x):
    return (sum(a * b for a, b in _pairs(x)) + sum(np.sin(a) for a, _ in _pairs(x))
            + sum(np.sum(c ** 2) for c in _chunks(x)))


def sorting_and_selection(x):
    s = sorted(x, key=lambda v: -v)  # the order changes with the data: decided again on every call
    total = 0.0
    for i, v in enumerate(reversed(x)):
        total = total + i * v
    return s[0] + 2.0 * s[-1] + 3.0 * s[1] + total + max(x) * min(x) + max(x, key=lambda v: v * v)


def sorted_alone(x):
    s = sorted(x, key=lambda v: -v)  # no other decision: the sort's own comparisons must be recorded
    return s[0] + 2.0 * s[-1] + 3.0 * s[1] + sorted(list(x))[0] * 5.0


def zips_and_builtins(x):
    total = 0.0
    for a, b in zip(x, x[::-1]):
        total += a * np.exp(b)
    a, b = x[0], x[1]
    return total + min(a, b) * max(a * a, b) + abs(a - b) + sum([a, b, a * b])


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("fn", [lambdas_and_map, comprehensions, generators, sorting_and_selection,
                                sorted_alone, zips_and_builtins])
def test_functional_style_compiles_and_agrees(fn, tier):
    # values whose order, signs and maxima change from call to call
    calls = [(np.array(v),) for v in ([0.3, -1.2, 0.8, 0.1], [1.5, 0.2, -0.4, 0.9], [-0.7, 0.6, 0.65, -2.0],
                                      [0.3, -1.2, 0.8, 0.1], [2.0, 1.0, 0.5, 0.25])]
    s = agree_with_general(fn, calls, tier)
    assert compiled(s), s


# ---- *args, **kwargs, recursion with array makers ----------------------------------------------------


def _sum_squares(*arrays):
    return sum(np.sum(a ** 2) for a in arrays)


def star_args(x):
    parts = (x, 2.0 * x)
    return _sum_squares(*parts) + _sum_squares(x, *[x, x * x])


def _combine(first, **terms):
    return first * terms["a"] + terms["b"] ** 2


def star_kwargs(x):
    return np.sum(_combine(1.5, a=x, b=x * x)) + np.sum(_combine(x, **{"a": x, "b": 2.0 * x}))


def _rpow(x, n):
    if n == 0:
        return np.ones_like(x)
    return x * _rpow(x, n - 1)


def recursion_with_makers(x):
    return (np.sum(_rpow(x, 4)) + np.sum(np.zeros_like(x) + np.full_like(x, 2.0) * x)
            + _rpow(1.5, 2) * x[0])  # (a recursion on constants: fixed in the program)


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("fn", [star_args, star_kwargs, recursion_with_makers])
def test_variadic_callees_and_makers(fn, tier):
    s = agree_with_general(fn, arrays(), tier)
    assert compiled(s), s


# ---- refusals: clear, and never citing bytegrad's own lines -------------------------------------------


def _noisy_key(v):
    return v * _tick(1)  # (state: a count of calls)


def key_with_state(x):
    return sorted(x, key=_noisy_key)[0] * 2.0


def max_key_on_constants(x):
    k = max(range(3), key=lambda i: (i - 1) ** 2)  # the C builtin would call the key unhooked
    return np.sum(x) * k


def test_refusal_names_the_users_line_not_bytegrads():
    d = bytegrad.differentiate(key_with_state, tier="numpy")
    x = np.array([0.4, -0.1, 0.3])
    d.value_and_grad(x)
    why = next(iter(info(d)["not_compiled"].values()))
    line = inspect.getsourcelines(key_with_state)[1] + 1
    assert f"line {line}" in why and "_noisy_key" in why, why
    assert "_impls" not in why and "py_sorted" not in why, why


def test_max_with_key_on_constants_is_refused():
    d = bytegrad.differentiate(max_key_on_constants, tier="numpy")
    d.value_and_grad(np.array([1.0, 2.0]))
    why = next(iter(info(d)["not_compiled"].values()))
    assert "max with keywords on constants" in why, why


def test_coroutine_callee_is_refused():
    from bytegrad.compiled import eligibility

    async def co(x):
        return x

    reasons, _ = eligibility.check(co.__code__, frozenset({"x"}), co.__globals__, frozenset())
    assert reasons and "coroutine" in reasons[0]


# ---- bytegrad's own builtins: trusted, and pure --------------------------------------------------------


_IMPL_FUNCTIONS = [f for f in vars(_impls).values()
                   if type(f) is types.FunctionType and f.__module__ == _impls.__name__]


def test_own_builtins_are_trusted_and_pure():
    import dis

    assert len(_IMPL_FUNCTIONS) > 20
    for f in _IMPL_FUNCTIONS:
        assert nested.trusted(f), f
        codes = [f.__code__]
        while codes:
            code = codes.pop()
            codes += list(nested.nested_codes(code))
            for ins in dis.get_instructions(code):
                # no global, attribute or closure variable written, no global rebound or deleted
                assert ins.opname not in ("STORE_GLOBAL", "DELETE_GLOBAL", "STORE_ATTR", "DELETE_ATTR",
                                          "DELETE_DEREF", "STORE_NAME"), (f, ins)
                if ins.opname == "STORE_DEREF":  # (its own cell, read by its comprehension: a local)
                    assert ins.argval in code.co_cellvars, (f, ins)
                if ins.opname == "IMPORT_NAME":
                    assert ins.argval == "collections", (f, ins)  # (py_deque makes a deque)
            # the globals they read are functions, modules and the sentinel: nothing with state
            for name in {i.argval for i in dis.get_instructions(code) if i.opname == "LOAD_GLOBAL"}:
                v = vars(_impls).get(name)
                assert v is None or v is _impls._MISSING or callable(v) or isinstance(v, types.ModuleType), (f, name)


def test_trust_is_by_code_not_by_module_name():
    def impostor(x):
        return x

    impostor.__module__ = _impls.__name__
    assert not nested.trusted(impostor)
    assert not nested.trusted(functools.partial(_impls.py_sum))


def test_sorted_order_is_stable_as_the_builtins():
    rng = np.random.default_rng(3)
    for n in range(0, 12):
        keys = [int(v) for v in rng.integers(0, 4, size=n)]
        for reverse in (False, True):
            assert _impls.py_sorted(list(range(n)), key=keys.__getitem__, reverse=reverse) == \
                sorted(range(n), key=keys.__getitem__, reverse=reverse)


def test_module_callable_on_constants_is_refused():
    """`np.random.default_rng()` is a Cython function: the analysis cannot see through it, so its
    slot is active and the call hooked, but nothing is tracked: the runtime runs it unrecorded. A
    program would replay the capture's draw on every call."""
    def f(x):
        r = np.random.default_rng()
        return np.sum(x * r.normal())

    d = bytegrad.differentiate(f, tier="numpy")
    values = {float(d.value_and_grad(np.ones(2))[0]) for _ in range(4)}
    assert len(values) == 4  # a new draw on every call
    s = info(d)
    assert not s["programs"] and "default_rng, which the capture cannot follow" in next(iter(s["not_compiled"].values()))


_EXPONENT = 2


def _constant_helper(n):
    return 1.5 ** (n + _EXPONENT)  # a global read by a helper run on constants: guarded


def uses_constant_helper(x):
    return np.sum(x) * _constant_helper(1)


@pytest.mark.parametrize("tier", TIERS)
def test_helper_on_constants_sees_its_global_change(tier, monkeypatch):
    x = np.array([0.2, 0.7])
    s = agree_with_general(uses_constant_helper, [(x,)] * 4, tier,
              between=lambda k: monkeypatch.setattr(sys.modules[__name__], "_EXPONENT", [2, 2, 3, 1][k]))
    assert compiled(s), s


def decision_then_recorded_again(a, b):
    c = a * 2.0 if a < b else b  # a decision on `a`...
    return c + float(a) + min(a, b) * max(a * a, b)  # ...which `float(a)` records again (the same object)


@pytest.mark.parametrize("tier", TIERS)
def test_decision_on_a_value_recorded_again_later(tier):
    calls = [(1.0, 2.0), (3.0, 2.0), (0.5, 0.1), (1.0, 2.0)]
    s = agree_with_general(decision_then_recorded_again, calls, tier, wrt=(0, 1))
    assert compiled(s), s


# ---- objects read from globals reach a callee through an iterator: refused ---------------------------


class _Scale:
    def __init__(self, s):
        self.s = s

    def __call__(self, v):  # (callable: a global guarded by identity, its state not)
        return v * self.s


_SCALE = _Scale(2.0)


def _yield_scale():
    yield _SCALE


def through_a_list_iterator(x):
    return sum(np.sum(x * obj.s) for obj in [_SCALE])  # the genexpr gets iter([_SCALE])


def through_a_generator(x):
    return sum(map(lambda obj: np.sum(x * obj.s), _yield_scale()))


@pytest.mark.parametrize("fn", [through_a_list_iterator, through_a_generator])
def test_object_state_behind_an_iterator_is_refused(fn, monkeypatch):
    """`_SCALE.s` is state no guard fixes (the global is guarded by identity): a program would hold
    the capture's value. The iterator is exhausted after the run, so it is looked into when it is
    handed to the callee."""
    d = bytegrad.differentiate(fn, tier="numpy")
    general = bytegrad.differentiate(fn, tier="general")
    x = np.array([0.5, 1.0])
    for s in (2.0, 2.0, 3.0, -1.0):
        monkeypatch.setattr(_SCALE, "s", s)
        assert_trees_close(d.value_and_grad(x), general.value_and_grad(x), rtol=1e-12, atol=0.0)
    st = info(d)
    assert not st["programs"] and "_Scale object" in next(iter(st["not_compiled"].values()))


def deque_window(x):
    window = collections.deque(x, maxlen=2)  # (bytegrad's own deque, py_deque)
    return sum(window) ** 2


def test_refusal_inside_own_builtins_cites_the_users_line(monkeypatch):
    from bytegrad.runtime import dispatch

    # (deque.append is capture-safe now: taken off the set, it is a refusal inside bytegrad's py_deque)
    monkeypatch.setattr(dispatch, "CAPTURE_SAFE", dispatch.CAPTURE_SAFE - {collections.deque.append})
    d = bytegrad.differentiate(deque_window, tier="numpy")
    d.value_and_grad(np.array([0.5, 1.0, 2.0]))
    why = next(iter(info(d)["not_compiled"].values()))
    line = inspect.getsourcelines(deque_window)[1] + 1
    assert f"line {line} of deque_window" in why and "inside bytegrad's py_deque" in why, why
    assert "_impls" not in why and "of py_deque" not in why, why


# ---- more shapes of closures ---------------------------------------------------------------------------


def generator_closure(x):
    m = np.mean(x)  # read by the generator through its cell: changes with x

    def centred():
        for v in x:
            yield v - m
    return sum(c ** 2 for c in centred())


def recursive_inner(x):
    def power(v, n):
        return v if n == 0 else v * power(v, n - 1)  # reads itself through its own cell
    return np.sum(power(x, 3))


def late_bound_lambdas(x):
    fs = []
    for k in range(3):
        fs.append(lambda v: v * k)  # noqa: B023  (each sees the last k, as Python does)
    return sum(np.sum(f(x) ** 2) for f in fs)


_W = np.array([[1.0, 2.0], [0.5, -1.0]])


def lambda_reads_global_array(x):
    g = lambda v: _W @ v  # noqa: E731  (a global array read inside a lambda: an input of the program)
    return np.sum(g(x) ** 2)


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("fn", [generator_closure, recursive_inner, late_bound_lambdas])
def test_more_closures(fn, tier):
    s = agree_with_general(fn, arrays(size=2), tier)
    assert compiled(s), s


@pytest.mark.parametrize("tier", TIERS)
def test_global_array_read_in_a_lambda_changed_in_place(tier):
    x = np.array([0.3, -0.8])
    saved = _W.copy()
    try:
        s = agree_with_general(lambda_reads_global_array, [(x,)] * 4, tier,
                  between=lambda k: _W.__setitem__((0, 0), [1.0, 1.0, 4.0, -2.0][k]))
    finally:
        _W[...] = saved
    assert compiled(s), s


def comprehension_on_constants(x):
    weights = [1.0 + i * i for i in range(len(x))]  # (3.11: a nested code run on constants)
    return np.sum(x * np.array(weights)) + sum(i * 0.5 for i in range(3)) * np.sum(x)


def impure_comprehension_on_constants(x):
    return np.sum(x) * sum(_tick(i) for i in range(2))  # a state change: a replay would drop it


@pytest.mark.parametrize("tier", TIERS)
def test_comprehension_on_constants(tier):
    s = agree_with_general(comprehension_on_constants, arrays(), tier)
    assert compiled(s), s


def test_impure_comprehension_on_constants_is_refused():
    d = bytegrad.differentiate(impure_comprehension_on_constants, tier="numpy")
    for _ in range(3):
        before = _TICKS[0]
        v, _g = d.value_and_grad(np.array([1.0, 2.0]))
        assert _TICKS[0] == before + 2  # both ticks, once per call
        assert v == pytest.approx(3.0 * (2 * before + 4))
    s = info(d)
    assert not s["programs"] and "_tick" in next(iter(s["not_compiled"].values()))
