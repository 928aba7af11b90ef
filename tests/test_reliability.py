"""Reliability (issue 6): faults, cache correctness, threads, NaN/inf, the caller's data, bad input.

Each test compares against values computed independently (hand-written NumPy gradients, finite
differences) and checks that nothing is left behind: no current tape, and a right next gradient.
Exceptions are caught as BaseException by `outcome` so a KeyboardInterrupt that escapes wrongly
fails one test instead of stopping the run.
"""
from __future__ import annotations

import copy
import inspect
import os
import sys
import threading
import warnings
from typing import Any, Callable, Optional

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from gradcheck import check_grad, numerical_grad

import bytegrad
from bytegrad.runtime.tape import current_tape
from bytegrad.transform import cache


# ---- helpers --------------------------------------------------------------------------------------


def outcome(call: Callable[[], Any]) -> Optional[BaseException]:
    """The exception `call()` raised (KeyboardInterrupt included), or None."""
    try:
        call()
    except BaseException as exc:  # noqa: BLE001 - KeyboardInterrupt must not stop the test run
        return exc
    return None


def line_of(fn: Callable, marker: str) -> int:
    lines, start = inspect.getsourcelines(fn)
    hits = [i for i, text in enumerate(lines) if marker in text]
    assert len(hits) == 1, f"marker {marker!r} found {len(hits)} times in {fn.__name__}"
    return start + hits[0]


def traceback_has_line(exc: BaseException, fn: Callable, marker: str) -> bool:
    """Whether a frame of `exc`'s traceback is at `fn`'s line containing `marker` (the user's line)."""
    want = (fn.__code__.co_filename, line_of(fn, marker))
    tb = exc.__traceback__
    while tb is not None:
        if (tb.tb_frame.f_code.co_filename, tb.tb_lineno) == want:
            return True
        tb = tb.tb_next
    return False


def _canary(x):
    return np.sum(np.tanh(x) * x) + np.sum(x[1:] * x[:-1])


def assert_clean_state() -> None:
    """No tape left current in this thread, and the next gradient is right."""
    assert current_tape() is None, "a tape was left current after the call"
    check_grad(_canary, (np.random.default_rng(123).normal(size=4),), 0)


# ---- faults ---------------------------------------------------------------------------------------

# A custom op whose rule's forward or pullback raises the exception stored in _FAULT.
_FAULT: dict[str, Optional[BaseException]] = {"forward": None, "pullback": None}


def faulty_op(x):
    return x * 3.0


@bytegrad.rrule(faulty_op)
def _faulty_op_rrule(x):
    if _FAULT["forward"] is not None:
        raise _FAULT["forward"]

    def faulty_op_pullback(out_bar):
        if _FAULT["pullback"] is not None:
            raise _FAULT["pullback"]
        return (3.0 * out_bar,)

    return x * 3.0, faulty_op_pullback


def uses_faulty_op(x):
    h = np.sin(x)
    return np.sum(faulty_op(h) ** 2)  # the faulty op


def _expected_faulty(x):
    return 2.0 * (3.0 * np.sin(x)) * 3.0 * np.cos(x)


_RAISE: dict[str, Optional[BaseException]] = {"exc": None}


def _python_callee(v):
    if _RAISE["exc"] is not None:
        raise _RAISE["exc"]  # the callee raises
    return v * 2.0


def raises_in_callee(x):
    h = np.exp(x)
    return np.sum(_python_callee(h) * x)  # calls the callee


def raises_in_body(x):
    h = np.tanh(x) * 2.0
    if _RAISE["exc"] is not None:
        raise _RAISE["exc"]  # the body raises
    return np.sum(h)


class UserFault(Exception):
    """An exception type of the user's own."""


EXCEPTIONS = [lambda: UserFault("the user's fault"), lambda: ZeroDivisionError("zero"), KeyboardInterrupt]


@pytest.fixture(autouse=True)
def _no_faults_left():
    yield
    _FAULT["forward"] = _FAULT["pullback"] = None
    _RAISE["exc"] = None


@pytest.mark.parametrize("make_exc", EXCEPTIONS, ids=["user", "zerodiv", "keyboardinterrupt"])
@pytest.mark.parametrize("fn, marker", [(raises_in_body, "# the body raises"),
                                        (raises_in_callee, "# the callee raises")], ids=["body", "callee"])
@pytest.mark.parametrize("api", ["grad", "value_and_grad", "pullback"])
def test_exception_in_the_function_propagates_unchanged(make_exc, fn, marker, api):
    x = np.random.default_rng(0).normal(size=4)
    before = x.copy()
    d = bytegrad.differentiate(fn)
    call = {"grad": d.grad, "value_and_grad": d.value_and_grad, "pullback": d.pullback}[api]
    for first in (True, False):  # on the first call (while rewriting) and with cached code
        if not first:
            assert call(x) is not None
        exc = make_exc()
        _RAISE["exc"] = exc
        got = outcome(lambda: call(x))
        _RAISE["exc"] = None
        assert got is exc, f"expected the very exception raised, got {got!r}"
        where = _python_callee if fn is raises_in_callee else fn
        assert traceback_has_line(got, where, marker), "the user's line is not in the traceback"
        assert_clean_state()
        np.testing.assert_array_equal(x, before)
    check_grad(fn, (x,), 0)


@pytest.mark.parametrize("make_exc", EXCEPTIONS, ids=["user", "zerodiv", "keyboardinterrupt"])
def test_exception_in_a_rules_forward_propagates_unchanged(make_exc):
    x = np.random.default_rng(1).normal(size=3)
    exc = make_exc()
    _FAULT["forward"] = exc
    got = outcome(lambda: bytegrad.grad(uses_faulty_op)(x))
    _FAULT["forward"] = None
    assert got is exc, f"expected the very exception raised, got {got!r}"
    assert traceback_has_line(got, uses_faulty_op, "# the faulty op")
    assert_clean_state()
    np.testing.assert_allclose(bytegrad.grad(uses_faulty_op)(x), _expected_faulty(x), rtol=1e-12)


def test_exception_in_a_pullback_names_the_forward_line_and_keeps_the_original():
    """Design: an ordinary exception in a pullback becomes a PullbackError citing the forward line,
    chained to the very exception raised (`__cause__`), so both the user's line and the rule's own
    error reach the user."""
    x = np.random.default_rng(2).normal(size=3)
    for call in (lambda: bytegrad.grad(uses_faulty_op)(x), lambda: bytegrad.vjp(uses_faulty_op, x)[1](1.0)):
        exc = UserFault("pullback bug")
        _FAULT["pullback"] = exc
        got = outcome(call)
        _FAULT["pullback"] = None
        assert isinstance(got, bytegrad.PullbackError), repr(got)
        assert got.__cause__ is exc
        line = line_of(uses_faulty_op, "# the faulty op")
        assert str(got).startswith(f'File "{__file__}", line {line}, in uses_faulty_op'), str(got)
        assert_clean_state()
    np.testing.assert_allclose(bytegrad.grad(uses_faulty_op)(x), _expected_faulty(x), rtol=1e-12)


def test_differentiation_error_in_a_pullback_propagates_unchanged():
    x = np.random.default_rng(3).normal(size=3)
    exc = bytegrad.DifferentiationError("raised by a pullback on purpose")
    _FAULT["pullback"] = exc
    got = outcome(lambda: bytegrad.grad(uses_faulty_op)(x))
    _FAULT["pullback"] = None
    assert got is exc
    assert_clean_state()


@pytest.mark.parametrize("api", ["grad", "vjp"])
def test_keyboard_interrupt_in_a_pullback_propagates_unchanged(api):
    x = np.random.default_rng(4).normal(size=3)
    exc = KeyboardInterrupt()
    _FAULT["pullback"] = exc
    if api == "grad":
        got = outcome(lambda: bytegrad.grad(uses_faulty_op)(x))
    else:
        value, back = bytegrad.vjp(uses_faulty_op, x)
        got = outcome(lambda: back(1.0))
    _FAULT["pullback"] = None
    assert got is exc, f"a KeyboardInterrupt in the reverse pass must not be wrapped, got {got!r}"
    assert_clean_state()
    if api == "vjp":  # the same pullback works once the fault is gone
        np.testing.assert_allclose(back(1.0)[0], _expected_faulty(x), rtol=1e-12)


def test_exception_in_a_nested_decorated_call_restores_the_outer_state():
    inner = bytegrad.differentiate(raises_in_body)

    def outer(x):
        return inner(x * 2.0) + np.sum(x)

    x = np.random.default_rng(5).normal(size=3)
    exc = UserFault("inner")
    _RAISE["exc"] = exc
    assert outcome(lambda: bytegrad.grad(outer)(x)) is exc
    _RAISE["exc"] = None
    assert_clean_state()
    check_grad(outer, (x,), 0)


def test_a_fault_in_one_thread_leaves_other_threads_clean():
    """A fault in one thread leaves other threads' tapes alone (tapes are per thread)."""
    seen = []

    def other():
        seen.append(current_tape())
        seen.append(np.allclose(bytegrad.grad(_canary)(np.ones(4)), numerical_grad(_canary, (np.ones(4),), 0)))

    _RAISE["exc"] = UserFault("main thread")
    assert isinstance(outcome(lambda: bytegrad.grad(raises_in_body)(np.ones(3))), UserFault)
    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert seen == [None, True]


# ---- cache correctness ----------------------------------------------------------------------------


def _poly(x):
    return np.sum(np.sin(x) * x ** 2)


def _poly_grad(x):
    return np.cos(x) * x ** 2 + 2.0 * x * np.sin(x)


def test_dtype_ndim_and_argument_type_changes_give_right_gradients():
    """The cache keys on argument types only: float32/float64, 0-d to 3-d, scalars, all stay right."""
    d = bytegrad.differentiate(_poly)
    r = np.random.default_rng(6)
    inputs = [r.normal(size=3), r.normal(size=(2, 3)).astype(np.float32), np.float64(0.7), r.normal(size=()),
              r.normal(size=(2, 2, 2)), r.normal(size=5).astype(np.float32), 0.3, r.normal(size=(4, 1)),
              np.float32(-1.2), r.normal(size=3)]
    for x in inputs:
        before = copy.deepcopy(x)
        g = d.grad(x)
        want = _poly_grad(np.float64(x) if not isinstance(x, np.ndarray) else x.astype(np.float64))
        assert np.shape(g) == np.shape(x)
        dtype = np.asarray(x).dtype if not isinstance(x, float) else np.float64
        assert np.asarray(g).dtype == dtype, f"gradient dtype {np.asarray(g).dtype} for input {dtype}"
        tol = 1e-5 if dtype == np.float32 else 1e-12
        np.testing.assert_allclose(g, want, rtol=tol, atol=tol)
        np.testing.assert_array_equal(x, before)
    # ndarray inputs of every dtype and ndim share one rewritten code object
    arrays_only = bytegrad.differentiate(lambda x: _poly(x), tier="general")  # (a capture's rewrite is its own)
    for x in inputs:
        if type(x) is np.ndarray:
            arrays_only.grad(x)
    assert arrays_only.stats()["misses"] == 1


def _callee_v2(v):
    return np.sin(v) * 5.0


@pytest.mark.parametrize("where", ["callee", "top level"])
def test_a_function_whose_code_is_replaced_is_rewritten_again(where):
    """Redefining a body in place (`__code__` swapped, same function object) is honoured."""

    def helper(v):
        return v * 2.0

    def outer(x):
        return np.sum(helper(x))

    def outer_v2(x):  # a closure over `helper` too: a code object may only replace one with as many cells
        return np.sum(x ** 3) + 0.0 * np.sum(helper(x))

    target = helper if where == "callee" else outer
    d = bytegrad.differentiate(outer)
    x = np.array([0.5, 1.5])
    np.testing.assert_allclose(d.grad(x), [2.0, 2.0])
    original = target.__code__
    try:
        if where == "callee":
            helper.__code__ = _callee_v2.__code__
            want = 5.0 * np.cos(x)
        else:
            outer.__code__ = outer_v2.__code__
            want = 3.0 * x ** 2
        np.testing.assert_allclose(d.grad(x), want, rtol=1e-12)
    finally:
        target.__code__ = original
    np.testing.assert_allclose(d.grad(x), [2.0, 2.0])


def test_a_function_redefined_in_its_module_is_rewritten_again():
    """exec'd twice into one namespace, as a reloaded module or a notebook cell would; callers see the new body."""
    ns: dict[str, Any] = {"np": np}
    src = "def helper(v):\n    return {body}\n\ndef outer(x):\n    return np.sum(helper(x) * x)\n"
    exec(src.format(body="v * 2.0"), ns)  # noqa: S102
    first_outer = bytegrad.differentiate(ns["outer"])
    x = np.array([0.5, -1.0])
    np.testing.assert_allclose(first_outer.grad(x), 4.0 * x)
    exec(src.format(body="v ** 3"), ns)  # noqa: S102 - both functions redefined: same names, new bodies
    np.testing.assert_allclose(bytegrad.differentiate(ns["outer"]).grad(x), 4.0 * x ** 3, rtol=1e-12)
    # the first `outer` object calls `helper` through the shared globals: the new helper too
    np.testing.assert_allclose(first_outer.grad(x), 4.0 * x ** 3, rtol=1e-12)


def test_past_the_cap_signatures_stay_right_when_revisited():
    """More signatures than CACHE_SIZE_LIMIT: one warning; evicted signatures rebuilt and still right."""
    kinds = [2.0, 2, np.float64(2.0), np.float32(2.0), np.int64(2), np.array(2.0), True, np.int32(2), np.int16(2),
             np.uint8(2), np.float16(2.0), np.int8(2)]
    assert len(kinds) > cache.CACHE_SIZE_LIMIT

    def scaled(x, scale):
        return np.sum(np.sin(x) * scale)

    d = bytegrad.differentiate(scaled)
    x = np.random.default_rng(7).normal(size=3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):  # the second round revisits signatures the first one evicted
            for scale in kinds:
                np.testing.assert_allclose(d.grad(x, scale), np.cos(x) * float(scale), rtol=1e-3)
    recompiles = [w for w in caught if issubclass(w.category, cache.RecompileWarning)]
    assert len(recompiles) == 1 and "'scale'" in str(recompiles[0].message)
    assert d.stats()["entries"] <= cache.CACHE_SIZE_LIMIT


# ---- threads --------------------------------------------------------------------------------------

_THREAD_SOURCES = ["np.sum(np.sin({x}) * {x})", "np.sum(np.exp(0.5 * {x}) ** 2)", "np.sum(np.tanh({x}[1:] * {x}[:-1]))",
                   "np.sum({x} ** 3) + np.max({x})"]


def _fresh_function(k: int, round_: int) -> Callable:
    """A function bytegrad has never seen (new code object), so its first gradient rewrites it."""
    body = _THREAD_SOURCES[k % len(_THREAD_SOURCES)]
    ns: dict[str, Any] = {"np": np}
    helper = f"def helper_{k}(v):\n    return v * 1.0 + 0.0\n"
    exec(compile(f"{helper}\ndef f_{k}_{round_}(x):\n    return {body.format(x=f'helper_{k}(x)')}\n",  # noqa: S102
                 f"<thread fn {k} round {round_}>", "exec"), ns)
    return ns[f"f_{k}_{round_}"]


def _run_threads(n: int, work: Callable[[int, threading.Barrier], Any]) -> list:
    barrier = threading.Barrier(n)
    results: list = [None] * n
    errors: list = []

    def target(k):
        try:
            results[k] = work(k, barrier)
        except BaseException as exc:  # noqa: BLE001 - reported in the main thread
            errors.append((k, exc))

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads often, so first calls really interleave
    try:
        threads = [threading.Thread(target=target, args=(k,)) for k in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert not any(t.is_alive() for t in threads), "a thread hangs (deadlock?)"
    finally:
        sys.setswitchinterval(old)
    assert not errors, errors
    return results


@pytest.mark.parametrize("round_", range(3))
def test_eight_threads_concurrent_first_calls_same_and_different_functions(round_):
    """Threads 0-3 share one fresh function (one Differentiated for 0-1, own objects for 2-3);
    threads 4-7 each have their own fresh function; all first calls start together."""
    shared_fn = _fresh_function(100 + round_, round_)
    shared_d = bytegrad.differentiate(shared_fn)
    own_fns = {k: _fresh_function(k, round_) for k in range(4, 8)}

    def work(k, barrier):
        fn = shared_fn if k < 4 else own_fns[k]
        d = shared_d if k < 2 else bytegrad.differentiate(fn)
        r = np.random.default_rng(1000 * round_ + k)
        xs = [r.normal(size=5) for _ in range(4)]
        barrier.wait()
        grads = [d.grad(x) for x in xs]
        return fn, xs, grads

    for fn, xs, grads in _run_threads(8, work):
        for x, g in zip(xs, grads):
            np.testing.assert_allclose(g, numerical_grad(fn, (x,), 0), rtol=1e-6, atol=1e-8)


def test_eight_threads_register_rules_while_others_differentiate():
    """Concurrent rule registration and first gradients: every thread sees its own rule."""
    ns: dict[str, Any] = {"np": np}
    exec("\n".join(f"def op_{k}(v):\n    return v * 1.0" for k in range(8)), ns)  # noqa: S102
    ops = [ns[f"op_{k}"] for k in range(8)]

    def work(k, barrier):
        op = ops[k]
        barrier.wait()
        if k % 2 == 0:  # half the threads register a rule (derivative k + 1, not the true 1)
            def op_rrule(v, k=k):
                return v * 1.0, lambda out_bar: ((k + 1.0) * out_bar,)
            bytegrad.rrule(op)(op_rrule)

        def user(x):
            return np.sum(op(x) * x)

        x = np.linspace(-1.0, 1.0, 4) + k
        return k, x, bytegrad.grad(user)(x)

    for k, x, g in _run_threads(8, work):
        slope = k + 1.0 if k % 2 == 0 else 1.0  # the rule's deliberate slope, or the true one
        np.testing.assert_allclose(g, slope * x + x, rtol=1e-12)


# ---- data: NaN, inf, and the caller's arrays ------------------------------------------------------

_INF, _NAN = np.inf, np.nan
_X = np.array([0.0, 1.0, -0.0, 2.0, _INF, _NAN, -_INF])
_C = np.array([1.0, 0.0, 1.0, -1.0, 1.0, 1.0, 2.0])
_Y = np.array([0.0, 0.0, -0.0, 1.0, _INF, 2.0, -_INF])

# (name, function, args, wrt, the gradient written by hand with NumPy arithmetic)
NAN_INF_CASES = [
    ("log", lambda x, c: np.sum(np.log(x) * c), (_X, _C), 0, lambda x, c: c / x),
    ("sqrt", lambda x: np.sum(np.sqrt(x)), (_X,), 0, lambda x: 0.5 / np.sqrt(x)),
    ("x / 0 wrt x", lambda x, y: np.sum(x / y), (_X, _Y), 0, lambda x, y: 1.0 / y),
    ("x / 0 wrt y", lambda x, y: np.sum(x / y), (_X, _Y), 1, lambda x, y: -x / y ** 2),
    ("inf - inf", lambda x, y: np.sum((x - y) * 2.0), (_X, _X), (0, 1),
     lambda x, y: (np.full_like(x, 2.0), np.full_like(y, -2.0))),
    ("inf * 0", lambda x, y: np.sum(x * y), (_X, _Y), 0, lambda x, y: y),
    ("exp", lambda x: np.sum(np.exp(x)), (_X,), 0, lambda x: np.exp(x)),
    ("sin", lambda x: np.sum(np.sin(x)), (_X,), 0, lambda x: np.cos(x)),
    ("tanh", lambda x: np.sum(np.tanh(x)), (_X,), 0, lambda x: 1.0 - np.tanh(x) ** 2),
    ("square", lambda x: np.sum(x ** 2), (_X,), 0, lambda x: 2.0 * x),
    ("abs", lambda x: np.sum(np.abs(x)), (_X,), 0, lambda x: np.sign(x)),
    ("mean", lambda x: np.mean(x), (_X,), 0, lambda x: np.full_like(x, 1.0 / x.size)),
    ("matmul", lambda A, v: np.sum(A @ v), (np.array([[1.0, _INF], [0.0, 1.0]]), np.array([_NAN, 1.0])), 0,
     lambda A, v: np.outer(np.ones(2), v)),
    ("power -1 at 0", lambda x: np.sum(np.power(x, -1.0)), (_X,), 0, lambda x: -1.0 * x ** -2.0),
    ("float64 scalar log", lambda a: np.log(a), (np.float64(0.0),), 0, lambda a: 1.0 / a),
]


@pytest.mark.parametrize("name, fn, args, wrt, by_hand", NAN_INF_CASES, ids=[c[0] for c in NAN_INF_CASES])
def test_nan_and_inf_propagate_as_numpy_arithmetic_does(name, fn, args, wrt, by_hand):
    before = copy.deepcopy(args)
    with np.errstate(all="ignore"):
        got = bytegrad.grad(fn, wrt=wrt)(*args)
        want = by_hand(*args)
    got, want = (got, want) if isinstance(wrt, tuple) else ((got,), (want,))
    for g, w in zip(got, want):
        g, w = np.asarray(g, dtype=float), np.asarray(w, dtype=float)
        np.testing.assert_array_equal(np.isnan(g), np.isnan(w), err_msg=f"{name}: nan pattern")
        np.testing.assert_array_equal(np.where(np.isinf(g), g, 0), np.where(np.isinf(w), w, 0),
                                      err_msg=f"{name}: inf pattern and signs")
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=0, equal_nan=True, err_msg=name)
    for a, b in zip(args, before):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("fn, a, by_hand", [
    (lambda a: np.log(a), 0.0, np.inf),
    (lambda a: np.log1p(a), -1.0, np.inf),
    (lambda a: np.arctanh(a), 1.0, np.inf),
    (lambda a: np.divide(a, 0.0), 1.0, np.inf),
], ids=["log", "log1p", "arctanh", "divide"])
def test_python_float_at_a_singular_point_gives_numpys_inf(fn, a, by_hand):
    with np.errstate(all="ignore"):
        assert bytegrad.grad(fn)(a) == by_hand


def test_power_of_python_float_zero_has_numpys_sign():
    with np.errstate(all="ignore"):
        assert bytegrad.grad(lambda a: np.power(a, -1.0))(0.0) == -np.inf


def _strided_inputs():
    r = np.random.default_rng(8)
    base = r.normal(size=(6, 8))
    fortran = np.asfortranarray(r.normal(size=(3, 4)))
    readonly = r.normal(size=(3, 4))
    readonly.flags.writeable = False
    return {
        "step slice": base[::2, ::2],
        "transposed": base[:4, :3].T,
        "negative strides": base[::-2, ::-2],
        "fortran": fortran,
        "read-only": readonly,
        "broadcast view": np.broadcast_to(r.normal(size=4), (3, 4)),
        "column": base[:3, 1:5],
    }


def _uses_everything(x):
    """Indexing, in-place writes into own arrays, reductions and a reshape of x, all at once."""
    h = np.tanh(x) * 2.0
    buf = np.zeros_like(h)
    buf[...] = h
    buf += x ** 2
    out = buf.reshape(-1)[::-1].reshape(buf.shape)
    return np.sum(out * x) + np.sum(np.sort(x, axis=-1)[..., :1]) + np.sum(x.T @ x)


@pytest.mark.parametrize("kind", list(_strided_inputs()))
def test_caller_views_and_non_contiguous_arrays_unchanged_and_right(kind):
    x = _strided_inputs()[kind]
    base = x.base
    before, base_before = x.copy(), None if base is None else np.array(base, copy=True)
    flags = (x.flags.writeable, x.flags.c_contiguous, x.flags.f_contiguous, x.strides)
    g = check_grad(_uses_everything, (x,), 0)
    np.testing.assert_array_equal(x, before)
    if base is not None:
        np.testing.assert_array_equal(base, base_before)
    assert (x.flags.writeable, x.flags.c_contiguous, x.flags.f_contiguous, x.strides) == flags
    assert not np.shares_memory(g, x), "the gradient shares memory with the input"


def test_gradients_and_values_do_not_alias_the_callers_arrays():
    """Writing into a returned gradient never changes the caller's data (through a container too)."""
    params = {"w": np.random.default_rng(9).normal(size=3), "b": np.array(0.5)}
    snapshot = copy.deepcopy(params)

    def loss(p):
        return np.sum(p["w"]) + p["b"] * 2.0

    value, g = bytegrad.value_and_grad(loss)(params)
    g["w"][...] = 99.0
    g["b"][...] = 99.0
    np.testing.assert_array_equal(params["w"], snapshot["w"])
    np.testing.assert_array_equal(params["b"], snapshot["b"])
    out, back = bytegrad.vjp(lambda v: v, params["w"])
    (v_bar,) = back(np.ones(3))
    v_bar[...] = -1.0
    np.testing.assert_array_equal(params["w"], snapshot["w"])


# ---- bad input ------------------------------------------------------------------------------------


def assert_cites_user_line(exc: BaseException, fn: Callable) -> None:
    """The message starts with fn's file and a line inside fn, and carries a fix."""
    message = str(exc)
    lines, start = inspect.getsourcelines(fn)
    prefix = f'File "{fn.__code__.co_filename}", line '
    assert message.startswith(prefix), message
    lineno = int(message[len(prefix):].split(",", 1)[0])
    assert start <= lineno < start + len(lines), message
    assert lines[lineno - start].strip() in message, message
    assert "  Fix: " in message, message


def returns_list(x):
    return [np.sum(x)]


def returns_dict(x):
    return {"loss": np.sum(x)}


def returns_none(x):
    np.sum(x)  # forgot the return


def returns_str(x):
    return "done"


@pytest.mark.parametrize("fn, shown", [(returns_list, "list"), (returns_dict, "dict"), (returns_none, "None"),
                                       (returns_str, "str")], ids=lambda v: getattr(v, "__name__", v))
def test_non_scalar_output_of_other_kinds(fn, shown):
    x = np.ones(3)
    with pytest.raises(bytegrad.NonScalarOutputError) as info:
        bytegrad.grad(fn)(x)
    assert shown in str(info.value), str(info.value)
    assert_cites_user_line(info.value, fn)
    assert_clean_state()


def two_arrays(x, y):
    return np.sum(x * y)


def mixed(x, n, mode, flag):
    return np.sum(x ** n) if mode == "pow" and flag else 0.0


@pytest.mark.parametrize("fn, wrt, args, shown", [
    (two_arrays, -3, (np.ones(2), np.ones(2)), "-3"),
    (two_arrays, 1, (np.ones(2),), "1"),  # too few positional arguments for wrt=1
    (two_arrays, 1.5, (np.ones(2), np.ones(2)), "1.5"),
    (mixed, 1, (np.ones(2), 2, "pow", True), "'n'"),
    (mixed, 2, (np.ones(2), 2, "pow", True), "'mode'"),
    (mixed, "flag", (np.ones(2), 2, "pow", True), "'flag'"),
    (mixed, (0, "n"), (np.ones(2), 2, "pow", True), "'n'"),
    (two_arrays, 0, (np.arange(3), np.ones(3)), "int64"),
    (two_arrays, 0, (np.array([1.0, 2.0], dtype=object), np.ones(2)), "object"),
    (two_arrays, 1, (np.ones(2), [np.array([1.0, 2.0], dtype=object)]), "object"),
], ids=["negative out of range", "too few arguments", "float wrt", "int by position",
        "str by position", "bool by name", "int in a tuple", "int array", "object array", "object array in a list"])
def test_bad_wrt_or_argument_is_a_clear_error(fn, wrt, args, shown):
    before = copy.deepcopy(args)
    with pytest.raises(bytegrad.DifferentiationError) as info:
        bytegrad.grad(fn, wrt=wrt)(*args)
    assert isinstance(info.value, TypeError), f"{type(info.value).__name__} is not a TypeError"
    assert shown in str(info.value), str(info.value)
    assert_cites_user_line(info.value, fn)
    for a, b in zip(args, before):
        np.testing.assert_array_equal(a, b)
    assert_clean_state()


def test_object_array_that_is_not_differentiated_is_fine():
    """Only differentiated arguments must be numeric: an object array passed alongside is data."""
    weights = np.array([1.0, 2.0], dtype=object)
    x = np.array([0.5, -0.5])
    np.testing.assert_allclose(bytegrad.grad(two_arrays)(x, weights), [1.0, 2.0])


def generator_function(x):
    yield np.sum(x)  # a generator function


async def coroutine_function(x):
    return np.sum(x)  # an async function


@pytest.mark.parametrize("fn, shown", [(generator_function, "generator"), (coroutine_function, "coroutine")],
                         ids=["generator", "async"])
def test_generator_or_async_function_is_a_clear_error(fn, shown):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # "coroutine was never awaited"
        with pytest.raises(bytegrad.DifferentiationError) as info:
            bytegrad.grad(fn)(np.ones(2))
    assert shown in str(info.value), str(info.value)
    assert_cites_user_line(info.value, fn)
    assert_clean_state()


@pytest.mark.parametrize("fn, construct", [(generator_function, "generator function"),
                                           (coroutine_function, "async")], ids=["generator", "async"])
def test_generator_or_async_function_error_names_the_construct(fn, construct):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with pytest.raises(bytegrad.DifferentiationError) as info:
            bytegrad.grad(fn)(np.ones(2))
    assert construct in str(info.value) and "reduce the output" not in str(info.value), str(info.value)


def uses_eval(x):
    return np.sum(eval("x * x"))  # noqa: S307 - the point of the test


def uses_exec(x):
    ns = {"x": x}
    exec("y = x ** 3", ns)  # noqa: S102 - the point of the test
    return np.sum(ns["y"])


def uses_locals(x):
    y = x * 2.0
    return np.sum(locals()["y"] ** 2)  # locals


def uses_class_body(x):
    class Holder:
        w = x * 2.0  # class body
    return np.sum(Holder.w ** 2)


@pytest.mark.parametrize("fn", [uses_eval, uses_exec, uses_locals, uses_class_body], ids=lambda f: f.__name__)
def test_invisible_code_is_right_or_a_clear_error(fn):
    x = np.array([0.3, -0.7, 1.1])
    try:
        g = bytegrad.grad(fn)(x)
    except bytegrad.DifferentiationError as exc:
        assert_cites_user_line(exc, fn)
        return
    np.testing.assert_allclose(g, numerical_grad(fn, (x,), 0), rtol=1e-6, atol=1e-8)


# ---- random programs: regressions found by the long run -------------------------------------------


def long_run_program(x, c):
    """Found by `make test-long` (seed 0): bytegrad was right; central differences were not (sin of
    arguments in the thousands), so the property test now skips programs whose two step sizes disagree."""
    h = x
    h = h + np.sum(h, axis=0, keepdims=True)
    h = h + np.sum(h, axis=0, keepdims=True)
    h = h + np.sum(h ** 2, axis=1, keepdims=True)
    h = h + np.sum(h ** 2, axis=1, keepdims=True)
    h = np.sin(h)
    return np.sum(h * np.linspace(0.5, 1.5, h.size).reshape(h.shape))


def complex_step_grad(f: Callable, x: np.ndarray, step: float = 1e-30) -> np.ndarray:
    """d f / d x to machine precision for f analytic in x (no cancellation, unlike differences)."""
    g = np.empty_like(x)
    for i in np.ndindex(x.shape):
        xc = x.astype(complex)
        xc[i] += step * 1j
        g[i] = f(xc).imag / step
    return g


def test_long_run_program_against_the_complex_step():
    rng = np.random.default_rng(0)
    d = bytegrad.differentiate(long_run_program)
    for _ in range(2):
        x = rng.uniform(-1.0, 1.0, (3, 4))
        want = complex_step_grad(lambda v: long_run_program(v, None), x)
        np.testing.assert_allclose(d.grad(x, None), want, rtol=1e-8)
