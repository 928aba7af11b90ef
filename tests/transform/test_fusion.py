"""Fusion in the transform: which expression trees become one fused site, and that fused code
computes what the original does (values, gradients, evaluation order, rebound callables)."""
import math

import numpy as np
import pytest

import bytegrad
from bytegrad import transform
from bytegrad.runtime import fused

pytestmark = pytest.mark.general_path  # the general path's own machinery (tests/conftest.py)


def _sites(code):
    found = []
    for c in code.co_consts:
        if isinstance(c, fused.FusedSite):
            found.append(c)
        elif hasattr(c, "co_consts"):
            found += _sites(c)
    return found


def _fused(f, active=("x",)):
    new = transform.rewrite_code(f.__code__, frozenset(active), f.__globals__)
    return [s.expr for s in _sites(new)]


def dense(W, x, b):
    return np.sum(np.tanh(x @ W + b))


def chain(x):
    return np.sum(x * np.sin(x) + 0.1 * np.cos(x))


def single(x):
    return np.sum(np.tanh(x))


def with_store(x):
    y = x * 2.0
    return np.sum(y + 1.0)


def branchy(x, flag):
    return np.sum(np.exp(x if flag else -x) * 2.0)


def late_call(x, g):
    return np.sum(np.sin(x) * g(x))


def sq(x):
    return np.sum(x ** 2 + 3.0 * x)


def var_pow(x, p):
    return np.sum(x ** p + x)


def test_dense_and_chain_patterns_fuse():
    assert _fused(dense, ("W", "b")) == ["tanh(<binary_op> + b)"]
    assert _fused(chain) == ["(x * sin(x)) + (0.1 * cos(x))"]
    assert _fused(sq) == ["(x ** 2) + (3.0 * x)"]


def test_what_does_not_fuse():
    assert _fused(single) == []                     # one operation: nothing to fuse
    assert _fused(with_store) == []                 # two one-op trees split by a store
    assert _fused(var_pow, ("x", "p")) == []        # x ** p: only constant exponents fuse
    # a call of arbitrary code after a fused operation would run out of order: not fused
    assert _fused(late_call) == []


def test_a_rule_without_a_kernel_formula_does_not_fuse():
    """A kernel inlines the rule's own formula: once np.sin's rule is replaced by one without a
    kernel, the kernel must not compute np.sin's built-in derivative, so `np.sin` stays unfused."""
    from bytegrad.rules import registry

    saved = registry.lookup(np.sin)
    try:
        bytegrad.scalar_rule(np.sin, lambda x, out: np.cos(x), override=True)
        assert _fused(chain) == ["(x * <call>) + (0.1 * cos(x))"]  # np.sin(x) is a leaf, computed by its rule
    finally:
        registry.register(saved, override=True)
    assert _fused(chain) == ["(x * sin(x)) + (0.1 * cos(x))"]


@pytest.mark.parametrize("policy", ["never", "always"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_fused_gradients_match_unfused(policy, dtype, monkeypatch):
    monkeypatch.setattr(fused, "POLICY", policy)
    rng = np.random.default_rng(0)
    W = rng.normal(size=(5, 4)).astype(dtype)
    x = rng.normal(size=(7, 5)).astype(dtype)
    b = rng.normal(size=4).astype(dtype)
    g = bytegrad.grad(dense, wrt=(0, 2))
    with bytegrad.config.override(disable_fusion=True):
        ref = bytegrad.grad(lambda W, x, b: dense(W, x, b), wrt=(0, 2))(W, x, b)
    for _ in range(3):  # first call, and the cached code / compiled kernel after it
        gW, gb = g(W, x, b)
        assert gW.dtype == dtype and gb.dtype == dtype
        tol = 1e-12 if dtype == np.float64 else 1e-5
        np.testing.assert_allclose(gW, ref[0], rtol=tol, atol=tol)
        np.testing.assert_allclose(gb, ref[1], rtol=tol, atol=tol)


def test_rebound_callable_falls_back_to_what_the_code_now_calls(monkeypatch):
    monkeypatch.setattr(fused, "POLICY", "always")
    ns = {"np": np, "act": np.tanh}
    exec("def f(x, b):\n    return (act(x + b) * 2.0).sum()\n", ns)  # noqa: S102
    f = ns["f"]
    x, b = np.linspace(-1, 1, 5), np.full(5, 0.5)
    g = bytegrad.grad(f)
    np.testing.assert_allclose(g(x, b), 2 * (1 - np.tanh(x + b) ** 2))
    ns["act"] = np.sin  # the fused site was built for np.tanh: its guard sends this call to NumPy
    np.testing.assert_allclose(g(x, b), 2 * np.cos(x + b))


def test_leaf_evaluation_order_is_kept():
    calls = []

    def note(name, v):
        calls.append(name)
        return v

    def f(x):
        return np.sum(np.exp(note("a", x) @ np.eye(3)) * note("b", x) + note("c", x))

    x = np.linspace(0.1, 0.3, 3)
    bytegrad.grad(f)(x)
    assert calls == ["a", "b", "c"]


def test_python_scalars_and_ints_in_a_fused_tree(monkeypatch):
    monkeypatch.setattr(fused, "POLICY", "always")

    def f(x, s):
        return np.sum(s * np.exp(x) - x / 2 + x ** 3)

    x = np.linspace(-1, 1, 6)
    for s in (2.0, 3):
        got = bytegrad.grad(f)(x, s)
        np.testing.assert_allclose(got, s * np.exp(x) - 0.5 + 3 * x ** 2, rtol=1e-12)
    assert math.isclose(bytegrad.grad(f, wrt=1)(x, 2.0), float(np.sum(np.exp(x))))


def tanh_then_wider(x, W):  # a two-pass kernel site, then a matmul that promotes to float64
    return np.sum(np.tanh(x * 2.0 + 1.0) @ W)


def sin_then_wider(x, W):  # a one-pass kernel site, then the same
    return np.sum(np.sin(x * 2.0 + 1.0) @ W)


@pytest.mark.parametrize("f", [tanh_then_wider, sin_then_wider], ids=lambda f: f.__name__)
def test_a_float64_cotangent_reaching_a_float32_kernel(f, monkeypatch):
    monkeypatch.setattr(fused, "POLICY", "always")
    rng = np.random.default_rng(1)
    x, W = rng.normal(size=(3, 4)).astype(np.float32), rng.normal(size=(4, 2))
    with bytegrad.config.override(disable_fusion=True):
        ref = bytegrad.grad(lambda x, W: f(x, W), wrt=(0, 1))(x, W)
    df = bytegrad.differentiate(f, wrt=(0, 1))
    for _ in range(3):  # the first call on NumPy, then the kernel
        gx, gW = df.grad(x, W)
        assert gx.dtype == np.float32 and gW.dtype == np.float64
        np.testing.assert_allclose(gx, ref[0], rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(gW, ref[1], rtol=1e-6)
    assert df.stats()["fused_sites"][0]["kernel_calls"] == 2


# ---- memory: a plain grad lets go of what nothing reads again ------------------------------------

def dense_rows(W, b, x):
    return np.sum(np.tanh(W @ x + b[:, None]))


def dense_rows_unfused(W, b, x):  # its own code object: its own fused site, never tiered up here
    return np.sum(np.tanh(W @ x + b[:, None]))


def dense_rows_grad(W, b, x):
    y = np.tanh(W @ x + b[:, None])
    d = 1.0 - y * y
    return d @ x.T, np.sum(d, axis=1)


def _peak(call):
    import tracemalloc
    call()
    tracemalloc.start()
    try:
        call()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_kernel_tier_gradient_peaks_below_the_hand_written_one(monkeypatch):
    """Issue 5's memory target, as a test: the fused site saves only tanh's output, `W @ x` is let go
    before the reverse pass, and the sweep releases each node once it has run."""
    monkeypatch.setattr(fused, "POLICY", "always")
    rng = np.random.default_rng(0)
    W, b, x = rng.normal(size=(200, 200)) / 14, rng.normal(size=200), rng.normal(size=(200, 128))
    f = bytegrad.differentiate(dense_rows, wrt=(0, 1))
    g = f.grad
    gW, gb = g(W, b, x)
    rW, rb = dense_rows_grad(W, b, x)
    np.testing.assert_allclose(gW, rW, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(gb, rb, rtol=1e-12, atol=1e-12)
    assert [s["state"] for s in f.stats()["fused_sites"]] == ["kernel"]
    assert _peak(lambda: g(W, b, x)) <= _peak(lambda: dense_rows_grad(W, b, x))


def test_numpy_tier_gradient_peaks_below_the_hand_written_one(monkeypatch):
    """The same on the per-operation rules: the sweep slims `W @ x` and `W @ x + b[:, None]` to their
    shapes (the sum's and tanh's reverse steps read no more), so they are freed before it runs."""
    monkeypatch.setattr(fused, "POLICY", "never")
    rng = np.random.default_rng(0)
    W, b, x = rng.normal(size=(200, 200)) / 14, rng.normal(size=200), rng.normal(size=(200, 128))
    f = bytegrad.differentiate(dense_rows_unfused, wrt=(0, 1))
    gW, gb = f.grad(W, b, x)
    rW, rb = dense_rows_grad(W, b, x)
    np.testing.assert_allclose(gW, rW, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(gb, rb, rtol=1e-12, atol=1e-12)
    assert [s["state"] for s in f.stats()["fused_sites"]] == ["numpy"]
    assert _peak(lambda: f.grad(W, b, x)) <= _peak(lambda: dense_rows_grad(W, b, x))


def test_numpy_tier_keeps_alive_only_what_its_reverse_steps_read(monkeypatch):
    """On a plain grad, once `tanh(W @ x + b[:, None])` has run on the NumPy tier only its output is
    alive (tanh's reverse step reads only it): `W @ x` and the sum are let go at once, as NumPy's
    own temporary elision does for the hand-written forward, not at the reverse pass."""
    import tracemalloc
    monkeypatch.setattr(fused, "POLICY", "never")
    live = []

    def f(W, b, x):
        live.append(tracemalloc.get_traced_memory()[0])
        y = np.tanh(W @ x + b[:, None])
        live.append(tracemalloc.get_traced_memory()[0])
        return np.sum(y)

    rng = np.random.default_rng(0)
    W, b, x = rng.normal(size=(200, 200)) / 14, rng.normal(size=200), rng.normal(size=(200, 128))
    nbytes = 200 * 128 * 8
    g = bytegrad.grad(f, wrt=(0, 1))
    g(W, b, x)
    tracemalloc.start()
    try:
        gW, gb = g(W, b, x)
    finally:
        tracemalloc.stop()
    before, after = live[-2:]
    assert after - before < 1.5 * nbytes  # y, and not W @ x or W @ x + b[:, None] besides
    rW, rb = dense_rows_grad(W, b, x)
    np.testing.assert_allclose(gW, rW, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(gb, rb, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("policy", ["always", "never"])
def test_a_leaf_the_code_still_holds_is_not_released(policy, monkeypatch):
    """`z` feeds the fused site and is used again afterwards: it must stay tracked (large enough
    for the NumPy tier to consider releasing it)."""
    monkeypatch.setattr(fused, "POLICY", policy)

    def f(W, x, b):
        z = W @ x
        return np.sum(np.tanh(z + b[:, None])) + np.sum(z * z)

    def g(W, x, b):
        holder = [W @ x]          # held by a list, not a variable
        return np.sum(np.tanh(holder[0] + b[:, None])) + np.sum(holder[0] ** 2)

    rng = np.random.default_rng(1)
    W, x, b = rng.normal(size=(80, 30)), rng.normal(size=(30, 64)), rng.normal(size=80)
    for fn in (f, g):
        z = W @ x
        want = (1 - np.tanh(z + b[:, None]) ** 2 + 2 * z) @ x.T
        for _ in range(3):
            np.testing.assert_allclose(bytegrad.grad(fn)(W, x, b), want, rtol=1e-12, atol=1e-12)


def test_a_released_temporary_from_an_unfused_elementwise_rule(monkeypatch):
    """`np.arcsinh(x)` has no kernel formula, so it is a leaf of the fused site; its record reads x,
    not its output, so the site releases the output and the gradient stays right."""
    monkeypatch.setattr(fused, "POLICY", "always")

    def f(x, b):
        return np.sum(np.tanh(np.arcsinh(x) * 2.0 + b))

    rng = np.random.default_rng(3)
    x, b = rng.normal(size=(3, 5)), rng.normal(size=5)
    d = 1 - np.tanh(np.arcsinh(x) * 2.0 + b) ** 2
    for _ in range(3):
        gx, gb = bytegrad.grad(f, wrt=(0, 1))(x, b)
        np.testing.assert_allclose(gx, d * 2.0 / np.sqrt(x ** 2 + 1), rtol=1e-12)
        np.testing.assert_allclose(gb, d.sum(0), rtol=1e-12)


def test_tapes_swept_more_than_once_keep_everything(monkeypatch):
    """A pullback or a Jacobian sweeps one tape several times: nothing is released from it."""
    monkeypatch.setattr(fused, "POLICY", "always")
    rng = np.random.default_rng(2)
    W, x, b = rng.normal(size=(3, 3)), rng.normal(size=(3, 4)), rng.normal(size=3)

    def f(W):
        return np.tanh(W @ x + b[:, None])

    y, pb = bytegrad.vjp(f, W)
    ones = np.ones_like(y)
    first = pb(ones)
    np.testing.assert_allclose(pb(ones), first)
    np.testing.assert_allclose(first[0] if isinstance(first, tuple) else first,
                               (1 - y ** 2) @ x.T, rtol=1e-12)
    J = bytegrad.jacobian(f)(W)
    np.testing.assert_allclose(np.einsum("ijkl,ij->kl", J, ones), (1 - y ** 2) @ x.T, rtol=1e-12)


# ---- the choice between tiers: whole gradients, timed ---------------------------------------------

def trial_site_a(x, b):  # each test its own code object: its own fused site
    return np.sum(np.tanh(x * 2.0 + b))


def trial_site_b(x, b):
    return np.sum(np.tanh(x * 2.0 + b))


@pytest.mark.parametrize("slow", ["kernel", "numpy"])
def test_a_trial_keeps_the_tier_whose_gradients_are_faster(slow, monkeypatch):
    """A site compares its tiers over whole gradients (blocks of each, the first of a block not
    counted) and keeps the faster; both tiers give the same gradient meanwhile. The gradients'
    times are the ones `grad` reports to the trials (`fused.report`), replaced here by 20 ms for
    each gradient the slow tier ran in and 1 ms for the others: nothing is timed, so a loaded
    machine cannot change the outcome."""
    monkeypatch.setattr(fused, "POLICY", "auto")
    monkeypatch.setattr(fused, "BACKWARD_FACTOR", 1e12)  # tier up at once
    monkeypatch.setattr(fused, "_trial_clock", -1)       # the trials' clock as in a fresh process
    slow_use = slow == "kernel"  # (a trial's `use`: True for the kernel)
    reported = []

    def report(trials, seconds):
        for trial, fs, use, counted in trials:
            reported.append(use)
            if counted:
                trial.record(fs, use, 0.02 if use == slow_use else 0.001)

    monkeypatch.setattr(fused, "report", report)
    # (the general path's fused sites: under the default tier a compiled program would take over)
    d = bytegrad.differentiate(trial_site_a if slow == "kernel" else trial_site_b, wrt=(0, 1), tier="general")
    rng = np.random.default_rng(4)
    x, b = rng.normal(size=(64, 80)), rng.normal(size=80)
    want = 2.0 * (1 - np.tanh(x * 2.0 + b) ** 2)
    tiers = []
    for _ in range(1 + 2 * fused.TRIAL_BLOCK * 2):  # the ski-rental call, then two blocks of each
        sites = d.stats()["fused_sites"]  # none before the first call rewrites the function
        before = sites[0]["kernel_calls"] if sites else 0
        gx, gb = d.grad(x, b)
        np.testing.assert_allclose(gx, want, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(gb, want.sum(0) / 2.0, rtol=1e-12, atol=1e-12)
        tiers.append("kernel" if d.stats()["fused_sites"][0]["kernel_calls"] > before else "numpy")
    block = fused.TRIAL_BLOCK
    assert tiers[1:] == (["kernel"] * block + ["numpy"] * block) * 2, (tiers, reported)
    assert reported == [True] * block + [False] * block + [True] * block + [False] * block  # (grad reported each)
    (site,) = d.stats()["fused_sites"]
    kept = "numpy" if slow == "kernel" else "kernel"
    assert list(site["choices"].values()) == [kept]


def test_sites_in_trial_at_the_same_time_switch_together(monkeypatch):
    """Trials follow one clock that ticks per gradient: a site whose trial starts later runs the same
    tier as the others in every gradient they share, and a block's first gradient is not counted."""
    from bytegrad.runtime.tape import Tape
    monkeypatch.setattr(fused, "_trial_clock", -1)
    fs = fused.FusedSite.__new__(fused.FusedSite)
    first, second = fused.Trial(("float64", (True,), 8)), fused.Trial(("float64", (True,), 8))
    seen = []
    for g in range(4 * fused.TRIAL_BLOCK):
        tape = Tape()
        tape.lean = True
        a = first.arm(tape, fs, (), [])
        assert first.arm(tape, fs, (), []) == a  # a second call in the same gradient: the same tier
        if g >= 2:
            assert second.arm(tape, fs, (), []) == a
        seen.append((a, [counted for *_, counted in tape.trials]))
    block = fused.TRIAL_BLOCK
    assert [a for a, _ in seen] == ([True] * block + [False] * block) * 2
    assert [c[0] for _, c in seen] == [g % block != 0 for g in range(4 * block)]


def test_one_pass_sites_on_tapes_swept_once_and_more(monkeypatch):
    """A one-pass kernel's partials are scaled in place on a plain grad's tape (swept once) and kept
    as they are on a pullback's (swept twice): both give x * cos(x) + sin(x) - 0.2 sin(x)."""
    monkeypatch.setattr(fused, "POLICY", "always")

    def f(x):
        return x * np.sin(x) + 0.2 * np.cos(x)

    x = np.linspace(-2.0, 2.0, 5000)
    want = np.sin(x) + x * np.cos(x) - 0.2 * np.sin(x)
    for _ in range(3):
        np.testing.assert_allclose(bytegrad.grad(lambda x: np.sum(f(x)))(x), want, rtol=1e-13, atol=1e-13)
        np.testing.assert_allclose(bytegrad.grad(lambda x: np.sum(f(x) * 3.0))(x), 3.0 * want, rtol=1e-13,
                                   atol=1e-13)
    y, pb = bytegrad.vjp(f, x)
    ct = np.linspace(1.0, 2.0, 5000)
    (first,), (second,) = pb(ct), pb(ct)
    np.testing.assert_allclose(first, ct * want, rtol=1e-13, atol=1e-13)
    np.testing.assert_array_equal(second, first)


def trial_site_c(x, b):
    return np.tanh(x * 2.0 + b)


def test_a_site_only_pulled_back_decides_by_timing_its_tiers_alone(monkeypatch):
    """No plain `grad` times its gradients: after TRIAL_UNTIMED calls the site times both tiers on
    its own inputs and keeps one; pullbacks are right throughout."""
    monkeypatch.setattr(fused, "POLICY", "auto")
    monkeypatch.setattr(fused, "BACKWARD_FACTOR", 1e12)
    monkeypatch.setattr(fused, "TRIAL_UNTIMED", 4)
    d = bytegrad.differentiate(trial_site_c)
    rng = np.random.default_rng(5)
    x, b = rng.normal(size=(64, 80)), rng.normal(size=80)
    ct = rng.normal(size=(64, 80))
    want = ct * 2.0 * (1 - np.tanh(x * 2.0 + b) ** 2)
    for k in range(7):
        _, back = d.pullback(x, b)
        gx, gb = back(ct)
        np.testing.assert_allclose(gx, want, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(gb, want.sum(0) / 2.0, rtol=1e-12, atol=1e-12)
        (site,) = d.stats()["fused_sites"]
        choices = list(site["choices"].values())
        # the ski-rental call, then TRIAL_UNTIMED - 1 calls in trial; the next one decides
        if k == 0:
            assert choices == []
        elif k < 4:
            assert choices == ["trial"]
        else:
            assert choices in (["kernel"], ["numpy"])
