"""A repeated step rolled into a loop (bytegrad/compiled/roll.py, the IR pass; compiled/numba_roll.py,
its Numba lowering), held to the general path call by call: values and gradients to 1e-12 relative,
new inputs each call. The pass's detection is read on its listing (`program.passes`, `rolled:`), and
a repetition perturbed (a constant, a shape, an operand two repetitions back, a time from the loop's
counter) is never rolled. Most programs here are small: the threshold from which a program is rolled
(`roll.ROLL_FROM`, the Numba back end's cap) is lowered for them; the RK4 program is the real one
(bench/realistic_programs.py's, over the cap). No timing."""
from __future__ import annotations

import re
import types

import numpy as np
import pytest

import bytegrad
from bench.realistic_programs import ode_rk4
from bytegrad.compiled import policy, roll
from bytegrad.compiled.numba_kernel import MAX_RECORDS
from bytegrad.runtime import kernels

needs_numba = pytest.mark.skipif(kernels.disabled(), reason="Numba disabled (BYTEGRAD_DISABLE_NUMBA)")


def fresh(fn):
    return types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)


def program_of(d):
    (tiers,) = policy._BY_FUNCTION[d._target].values()
    (run,) = tiers.runs
    return run.program


def region(d):
    """The `rolled:` section of a program's pass listing, or None."""
    text = program_of(d).passes
    return text[text.index("rolled:"):] if "rolled:" in text else None


def close(a, b):
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape
    np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14 * max(1.0, float(np.abs(b).max(initial=0.0))))


def compare(fn, wrt, calls, tier="numba"):
    """`fn` differentiated on tier `tier` and on the general path, called on each of `calls`: the
    results agree call by call; the tier's function."""
    fast = bytegrad.differentiate(fresh(fn), wrt=wrt, tier=tier)
    general = bytegrad.differentiate(fn, wrt=wrt, tier="general")
    for args in calls:
        (v1, g1), (v2, g2) = fast.value_and_grad(*args), general.value_and_grad(*args)
        close(v1, v2)
        for a, b in zip(g1 if type(wrt) is tuple else (g1,), g2 if type(wrt) is tuple else (g2,)):
            close(a, b)
    return fast


# ---- programs ----


rk4 = ode_rk4  # (the bench's own program: RK4, 40 steps, an inner right-hand side)


def rk4_inputs(seed):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((8, 8)) / 3.0, rng.uniform(0.1, 0.5, 8), rng.standard_normal(8)


def euler(y, w):
    for _ in range(12):
        y = y + 0.1 * (np.sin(y) * w - y)
    return np.sum(y ** 2)


def invariant_layer(W, b, x):
    h = x
    for _ in range(10):
        h = np.tanh(W @ h + b)  # W and b read in every step: their gradients summed over the steps
    return np.sum(h * h)


def carried_scalar(x, a):
    t = a * 1.0
    for _ in range(12):
        x = x * np.cos(t) + t * 0.5
        t = t * 1.01 + 0.1  # a tracked float carried from step to step
    return np.sum(x ** 2)


def pulled_back(y, w):  # the first state also read in every step: its gradient from both
    y0 = y
    for _ in range(12):
        y = y + 0.1 * (np.sin(y0) * w - y)
    return np.sum(y ** 2)


def strided(seed):
    """vectors(seed), the first a strided view (a kernel's argument of another layout than its state)."""
    y, w = vectors(seed, 16)
    return y[::2], w[::2].copy()


def vectors(seed, n=8):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(n), rng.uniform(0.5, 1.5, n)


@pytest.fixture
def low(monkeypatch):
    """Small programs rolled too (the threshold is the Numba back end's cap otherwise)."""
    monkeypatch.setattr(roll, "ROLL_FROM", 8)


def test_the_threshold_is_the_numba_back_ends_cap():
    assert roll.ROLL_FROM == MAX_RECORDS


@needs_numba
def test_rk4_with_an_inner_right_hand_side_is_one_loop_in_a_numba_kernel():
    fast = compare(rk4, (0, 1), [rk4_inputs(s) for s in range(4)])
    prog = program_of(fast)
    assert prog.backend == "numba" and prog.records == 1162 - 39 * 29, fast.stats()["compiled"]
    assert "for it in range(40):" in prog.source and "for it in range(39, -1, -1):" in prog.source
    listing = region(fast).splitlines()
    assert listing[1].startswith("  40 repetitions of 29 records, %3..%1162; body %1134..%1162"), listing
    assert listing[2:] == ["  carried: %1162 (first %2)", "  invariant: %0 %1"]


def test_the_numpy_program_of_rk4_keeps_its_records_and_prices_its_twin_rolled():
    fast = compare(rk4, (0, 1), [rk4_inputs(s) for s in range(2)], tier="numpy")
    prog = program_of(fast)
    assert prog.backend == "numpy" and prog.records == 1162 and prog.rolled == 31
    if not kernels.disabled():
        from bytegrad.runtime.costs import MODEL

        # (its statements too, compiled/numba_price.py: those of the rolled twin, the step written once)
        assert 0 < prog.statements <= 2 * 31
        assert policy.numba_price(prog) == MODEL.program_price(31, None, kernels.numba_loaded(), prog.statements)


@needs_numba
@pytest.mark.parametrize("fn, wrt, inputs", [
    (euler, (0, 1), lambda s: vectors(s) if s % 2 else strided(s)),
    (pulled_back, (0, 1), lambda s: vectors(s)),
    (invariant_layer, (0, 1), lambda s: (np.random.default_rng(s).standard_normal((6, 6)) / 2,
                                         np.random.default_rng(s + 9).standard_normal(6) / 4,
                                         np.random.default_rng(s + 5).standard_normal(6))),
    (carried_scalar, (0, 1), lambda s: (vectors(s)[0], 0.3 + 0.1 * s)),
], ids=["euler", "init_also_invariant", "invariant_array", "carried_scalar"])
def test_rolled_loops_match_the_general_path_call_by_call(low, fn, wrt, inputs):
    fast = compare(fn, wrt, [inputs(s) for s in range(4)])
    prog = program_of(fast)
    assert prog.backend == "numba", fast.stats()["compiled"]
    assert "for it in range(" in prog.source and region(fast) is not None


def test_the_listing_of_an_euler_loop(low):
    fast = compare(euler, (0, 1), [vectors(0)], tier="numpy")
    text = region(fast)
    # %0 y, %1 w; a step is sin, mul w, sub, mul 0.1, add: the first step's records are %2..%6
    assert text.splitlines() == ["rolled:", "  12 repetitions of 5 records, %2..%61; body %57..%61",
                                 "  carried: %61 (first %0)", "  invariant: %1"], text


def test_a_carried_scalar_and_an_invariant_in_the_listing(low):
    fast = compare(carried_scalar, (0, 1), [(vectors(0)[0], 0.3)], tier="numpy")
    lines = region(fast).splitlines()
    # %0 x, %1 a, %2 t = a * 1.0; a step: cos(t), x * cos, t * 0.5, +, t * 1.01, + 0.1 (the last step's
    # update of t is dead code: 11 whole repetitions); x and t carried, nothing invariant
    assert lines == ["rolled:", "  11 repetitions of 6 records, %3..%68; body %63..%68",
                     "  carried: %66 (first %0)", "  carried: %68 (first %2)", "  invariant: none"], lines


# ---- perturbed repetitions: never rolled, results right ----


def constant_changed(y, w, c):
    for i in range(3):
        y = y + (c if i == 1 else 0.1) * (np.sin(y) * w - y)
    return np.sum(y ** 2)


def shape_changed(y, w, v):  # the middle step reads v, of shape (1, 8), where the others read w, (8,)
    for i in range(3):
        y = y + 0.1 * (np.sin(y) * (v if i == 1 else w) - y)
    return np.sum(y ** 2)


def two_back(y, w):  # leapfrog: y[i + 1] = y[i - 1] + 0.2 * f(y[i]), each step's sum reads two steps back
    prev = w
    for _ in range(12):
        prev, y = y, prev + 0.2 * (np.sin(y) * w - y)
    return np.sum(y ** 2)


def operand_swapped(y, w):  # the middle step's sum starts from its own product, the others' from the state
    for i in range(3):
        a = np.sin(y) * w
        y = (a if i == 1 else y) + 0.1 * a
    return np.sum(y ** 2)


def time_from_counter(y, t0):  # t = t0 + i * dt: a constant that differs in each step
    for i in range(6):
        t = t0 + i * 0.1
        y = y + 0.1 * (np.sin(y) * t - y)
    return np.sum(y ** 2)


PERTURBED = [
    (constant_changed, (0, 1), lambda s: (*vectors(s), 0.2)),
    (constant_changed, (0, 1), lambda s: (*vectors(s), float(np.nextafter(0.1, 1.0)))),  # the last bit
    (shape_changed, (0, 1, 2), lambda s: (*vectors(s), vectors(s + 3)[1].reshape(1, 8))),
    (operand_swapped, (0, 1), lambda s: vectors(s)),
    (time_from_counter, (0, 1), lambda s: (vectors(s)[0], 0.5 + 0.1 * s)),
]
PERTURBED_IDS = ["constant", "constant_bit", "shape", "operand_swapped", "time_from_counter"]


@pytest.mark.parametrize("tier", ["numpy", pytest.param("numba", marks=needs_numba)])
@pytest.mark.parametrize("fn, wrt, inputs", PERTURBED, ids=PERTURBED_IDS)
def test_a_perturbed_repetition_is_not_rolled(low, tier, fn, wrt, inputs):
    """Three steps, the middle one perturbed: never rolled with the others. Two steps may still be one
    region where that is exact: the swapped operand's program rolls in another phase (each repetition
    from a step's sum to the next step's product; the first reads the state and the first step's
    product where the second reads the middle step's product and its scaled copy)."""
    fast = compare(fn, wrt, [inputs(s) for s in range(3)], tier=tier)
    prog = program_of(fast)
    text = region(fast)
    if fn is operand_swapped:
        assert text.splitlines()[1].startswith("  2 repetitions of 4 records, %5..%12;"), text
    else:
        assert text is None and prog.rolled is None, text
        assert "for it in range(" not in prog.source


@pytest.mark.parametrize("tier", ["numpy", pytest.param("numba", marks=needs_numba)])
def test_a_step_reading_two_steps_back_is_not_rolled_alone(low, tier):
    """A step (5 records: sin, * w, -, * 0.2, + the state of two steps back) is no period in any phase:
    its sum reads the sum of two steps back, 10 records back (a phase's previous repetition holds values
    1 to 9 records back). Two steps together are one (10 records), and exact."""
    fast = compare(two_back, (0, 1), [vectors(s) for s in range(3)], tier=tier)
    lines = region(fast).splitlines()
    assert re.fullmatch(r"  \d+ repetitions of 10 records, .*", lines[1]), lines
    assert (program_of(fast).backend == "numba") == (tier == "numba")


def test_the_operand_check_is_what_refuses_two_steps_back(low, monkeypatch):
    """Without the per-repetition operand check (every operand taken for an invariant), the two-back
    program's steps would look alike and be rolled one by one: the check has teeth."""
    monkeypatch.setattr(roll, "_class", lambda records, s, period, r, start, p: ("before", 0))
    fast = bytegrad.differentiate(fresh(two_back), wrt=(0, 1), tier="numpy")
    fast.grad(*vectors(0))
    assert region(fast).splitlines()[1].startswith("  12 repetitions of 5 records")


def test_a_perturbed_step_in_a_long_loop_is_left_out_of_the_region(low):
    def long_loop(y, w):
        for i in range(12):
            y = y + (0.2 if i == 5 else 0.1) * (np.sin(y) * w - y)
        return np.sum(y ** 2)

    fast = compare(long_loop, (0, 1), [vectors(s) for s in range(2)], tier="numpy")
    lines = region(fast).splitlines()
    # steps 6..11 (records %32..%61: step 5's are %27..%31, its multiplication by 0.2 %30), the longest
    # run of alike steps, or the same run in another phase (from step 5's last record, %31)
    first, last = map(int, re.search(r"%(\d+)\.\.%(\d+);", lines[1]).groups())
    assert lines[1].startswith("  6 repetitions of 5 records") and first > 30 and last <= 61, lines


def test_a_value_of_an_earlier_step_read_after_the_loop_cuts_the_region(low):
    def reads_back(y, w):
        ys = []
        for _ in range(8):
            y = y + 0.1 * (np.sin(y) * w - y)
            ys.append(y)
        return np.sum(ys[-1] ** 2) + np.sum(ys[3] * w)  # step 3's state, read after the loop

    fast = compare(reads_back, (0, 1), [vectors(s) for s in range(2)], tier="numpy")
    lines = region(fast).splitlines()
    assert lines[1].startswith("  4 repetitions of 5 records, %2..%21;"), lines


# ---- a loop that also decides on data; a fault of the Numba lowering --------------------------------


def accumulate(x, w):
    acc = np.zeros_like(x)  # (a decision on data: numba_decide checks it in the kernel, so no loop is rolled)
    for _ in range(300):
        x = np.tanh(x * w)
        acc = acc + x * w
    return np.sum(acc) + np.sum(x)


@needs_numba
def test_a_repeated_step_with_a_decision_in_the_kernel_is_not_rolled():
    """The merge of the rolled loops and the Numba back end's decisions once rolled such a program and
    crashed its capture with a KeyError (the decision's value had no variable in the loop)."""
    rng = np.random.default_rng(0)
    calls = [(rng.normal(size=6) * 0.3, rng.normal(size=6) * 0.3) for _ in range(3)]
    d = compare(accumulate, 0, calls)
    assert program_of(d).backend == "numpy"
    # (not rolled: the whole program is over the Numba back end's cap)
    assert "over the Numba back end's" in str(d.stats()["compiled"]), d.stats()["compiled"]


@needs_numba
def test_a_fault_of_the_numba_lowering_keeps_the_numpy_program(monkeypatch):
    """An unexpected error while writing a Numba kernel is the Numba back end declining, with the
    error in the reason: the call and the ones after it get the NumPy program's (right) results."""
    from bytegrad.compiled import lower_numba

    def broken(*args, **kwargs):
        raise KeyError(12345)

    monkeypatch.setattr(lower_numba, "emit", broken)
    rng = np.random.default_rng(1)
    calls = [(rng.normal(size=6), rng.normal(size=6)) for _ in range(3)]
    d = compare(lambda x, w: np.sum(np.tanh(x * w) * x), 0, calls)
    assert program_of(d).backend == "numpy"
    reasons = str(d.stats()["compiled"])
    assert "the Numba back end failed (KeyError: 12345)" in reasons, reasons
