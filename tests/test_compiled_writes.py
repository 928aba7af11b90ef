"""Compiled programs that write into the function's own arrays, and index with masks and index arrays
(bytegrad/compiled/writes.py): each compared call by call with the general path, under the numpy and
numba tiers (values and gradients to 1e-12, new values each call), and adversarial programs that try
to make a replay miss a write into the caller's data or replay a wrong shape."""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import bytegrad
from bytegrad.compiled import writes as compiled_writes

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from gradcheck import agree_with_general  # noqa: E402

TIERS = ("numpy", "numba")


def _vectors(n, calls=4, seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.normal(size=n),) for _ in range(calls)]


# ---- writes into the function's own arrays ---------------------------------------------------------------


def allocate_then_fill(x):
    out = np.zeros(len(x))
    for i in range(len(x)):
        prev = out[i - 1] if i > 0 else 0.0
        out[i] = 0.5 * prev + x[i] ** 2
    out[1:] += x[:-1]
    return np.sum(out * x)


def copy_then_inplace(x):
    a = x.copy()
    a *= 2.0
    a += np.sin(x)
    a[0] += 1.0
    return np.sum(a ** 2)


def add_at_into_buffer(x):
    buf = np.zeros(3)
    np.add.at(buf, [0, 0, 2, 1, 2], x[:5])
    np.subtract.at(buf, [1, 1], x[1:3] ** 2)
    return np.sum(buf ** 3)


def ufunc_out_buffer(x):
    buf = np.empty_like(x)
    np.multiply(x, 2.0, out=buf)
    np.tanh(buf, out=buf)
    return np.sum(buf * x)


def write_through_views(x):
    buf = np.zeros(6)
    M = buf.reshape(2, 3)
    M[0, 1] = x[0]
    row = M[1]
    row[:] = x[1:4]
    buf[5] *= x[4]
    return np.sum(buf ** 2) + np.sum(M[:, 1]) + np.sum(row * x[:3])


def fancy_write_repeats(x):
    out = np.zeros(3)
    out[[0, 0, 2]] += x[:3]
    out[np.array([1, 1])] = x[3:5]
    return np.sum(out ** 2) + out[0] * x[0]


def strided(x):
    out = np.zeros(8)
    out[::-2] = x[:4]
    out[0:4:2] += x[:2] ** 2
    return np.sum(out * np.arange(1.0, 9.0))


def list_then_stack(x):
    rows = []
    h = x
    for k in range(3):
        h = np.tanh(h + k)
        rows.append(h)
    named = {}
    named["last"] = rows[-1]
    return np.sum(np.stack(rows) ** 2) + np.sum(named["last"] * x)


WRITERS = [allocate_then_fill, copy_then_inplace, add_at_into_buffer, ufunc_out_buffer, write_through_views,
           fancy_write_repeats, strided, list_then_stack]


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("fn", WRITERS, ids=lambda f: f.__name__)
def test_writes_into_own_arrays_compile_and_agree(fn, tier):
    s = agree_with_general(fn, _vectors(6, seed=hash(fn.__name__) % 1000), tier, value_atol=0)
    assert s["programs"], s["not_compiled"]
    assert s["compiled_calls"] >= 3


# ---- indexing with masks and index arrays ----------------------------------------------------------------


def masked(x):
    mask = x > 0
    return np.sum(x[mask] ** 3) + np.sum(x[x < -0.5] * 2.0)


def index_array(x):
    idx = np.array([0, 2, 2, 1, 0, 4])
    return np.sum(x[idx] ** 2 * np.arange(6.0)) + x[[1, 1, 3]].sum()


def index_2d(X):
    rows = np.array([0, 1, 1, 2])
    cols = np.array([2, 0, 2, 2])
    return np.sum(X[rows, cols] ** 2) + np.sum(X[[0, 0], :] * X[1]) + np.sum(X[np.array([True, False, True])] ** 3)


def index_argument(x, idx):
    return np.sum(x[idx] ** 2)


def sorted_by_data(x):
    order = np.argsort(x)
    return np.sum(x[order] * np.arange(len(x), dtype=float))


@pytest.mark.parametrize("tier", TIERS)
def test_mask_whose_count_changes_is_seen(tier):
    """The mask's count differs between calls: a call with the captured count runs the program, any other
    goes to the general path (or recaptures); never a program of the wrong shape."""
    calls = [(np.array([1.0, -2.0, 3.0, -0.7]),), (np.array([2.0, -1.0, 0.5, -0.6]),),  # 2 positive, 2 below -0.5
             (np.array([1.0, 2.0, 3.0, -0.7]),), (np.array([-1.0, -2.0, -3.0, -4.0]),),
             (np.array([4.0, -3.0, 1.5, -0.9]),)]
    s = agree_with_general(masked, calls, tier, value_atol=0)
    assert s["programs"], s["not_compiled"]
    # each new count was seen: a recapture (a program per count) or the general path
    assert len(s["programs"]) >= 2 or s["general_calls"] >= 1, s


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("fn", [index_array, sorted_by_data], ids=lambda f: f.__name__)
def test_index_arrays_compile_and_agree(fn, tier):
    s = agree_with_general(fn, _vectors(6, seed=3), tier, value_atol=0)
    assert s["programs"], s["not_compiled"]
    assert s["compiled_calls"] >= 3


@pytest.mark.parametrize("tier", TIERS)
def test_index_2d_agrees(tier):
    rng = np.random.default_rng(5)
    s = agree_with_general(index_2d, [(rng.normal(size=(3, 3)),) for _ in range(4)], tier, value_atol=0)
    assert s["programs"], s["not_compiled"]


@pytest.mark.parametrize("tier", TIERS)
def test_index_array_argument_is_an_input(tier):
    """An index array passed in is read on every call, not baked in (repeats accumulate in reverse)."""
    rng = np.random.default_rng(7)
    calls = [(rng.normal(size=5), np.array([0, 0, 3])), (rng.normal(size=5), np.array([4, 1, 1])),
             (rng.normal(size=5), np.array([2, 2, 2]))]
    s = agree_with_general(index_argument, calls, tier, value_atol=0)
    assert s["programs"] and s["compiled_calls"] >= 2


@settings(max_examples=25, deadline=None)
@given(st.lists(st.floats(-3, 3, allow_nan=False).filter(lambda v: abs(v) > 1e-3), min_size=4, max_size=4),
       st.lists(st.integers(0, 3), min_size=1, max_size=5))
def test_property_masks_and_indices(values, idx):
    x = np.array(values)
    for fn, args in ((masked, (x,)), (index_argument, (x, np.array(idx)))):
        for tier in TIERS:
            agree_with_general(fn, [args, (x[::-1].copy(),) + args[1:], args], tier, value_atol=0)


def masked_times_first(x):
    return np.sum(x[x > 0] * x[:1])  # one positive at capture: no broadcast to undo for x[:1] there


COUNT_CALLS = [(np.array([1.0, -2.0, -3.0, -0.7]),), (np.array([2.0, -1.0, -0.5, -0.6]),),
               (np.array([1.0, 2.0, 3.0, -0.7]),), (np.array([0.5, -2.0, -3.0, -0.7]),)]


@pytest.mark.parametrize("tier", TIERS)
def test_count_that_changes_the_program_shape_is_seen(tier):
    _count_seen(tier)


def _count_seen(tier, fn=masked_times_first):
    """The call whose count differs is decided against (DECIDED: a recapture, a program per count),
    not run by the captured program (which would raise or give a wrong shape, and go to the general path)."""
    s = agree_with_general(fn, COUNT_CALLS, tier, value_atol=0)
    assert len(s["programs"]) >= 2 and s["general_calls"] == 0, s


def test_count_guard_removed_is_wrong(monkeypatch):
    """Without the mask-count check a program replays the captured shapes: the test sees it (a wrong
    gradient or an error where the general path gives the right one)."""
    import bytegrad.compiled.lower_numpy as lower_numpy
    monkeypatch.setattr(lower_numpy, "count_guard", lambda *a, **k: None)
    def unguarded(x):  # (a code of its own: no program of the guarded build is found on disk for it)
        return np.sum(x[x > 0] * x[:1])

    with pytest.raises((AssertionError, ValueError, IndexError)):
        _count_seen("numpy", unguarded)


# ---- adversarial: the caller's data -------------------------------------------------------------------


def write_through_argument_view(x, buf):
    v = buf[1:]
    v[0] = 0.0  # the caller's array, through a view
    return np.sum(x * buf)


def write_into_argument_alias(x, buf):
    b = buf
    b[0] = x[0] * 0.0 + 1.0
    return np.sum(x * b)


def append_to_callers_list(x, log):
    log.append(1)
    return np.sum(x ** 2)


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("fn", [write_through_argument_view, write_into_argument_alias], ids=lambda f: f.__name__)
def test_writes_into_an_argument_stay_as_the_general_path(fn, tier):
    """A write into a non-differentiated argument's array (through a view or an alias): the caller's
    array afterwards is the general path's, on every call, even where the value written is already
    there at capture."""
    def calls():  # (once per tier: each writes into arrays of its own)
        rng = np.random.default_rng(11)
        return [(rng.normal(size=4), np.array([0.0, 0.0, 1.0, 1.0]) if call < 2 else rng.normal(size=4))
                for call in range(4)]  # (the array unchanged by the write at first)

    s = agree_with_general(fn, calls, tier, atol=0, effects=lambda args: args[1])
    assert not s["programs"]


@pytest.mark.parametrize("tier", TIERS)
def test_append_to_callers_list_happens_every_call(tier):
    fast = bytegrad.differentiate(append_to_callers_list, wrt=0, tier=tier)
    log: list = []
    for call in range(4):
        fast.grad(np.ones(3) * call, log)
        assert len(log) == call + 1


def test_static_check_takes_own_locals_only():
    """The static check takes writes into locals the function made, not into arguments or their views."""
    from bytegrad.transform.code import Bytecode

    from bytegrad.errors import SourceLoc
    from bytegrad.transform.activity import analyze

    def own(fn):
        code = fn.__code__
        bc = Bytecode.from_code(code, conserve_exception_block_stackdepth=True)
        act = analyze(bc, set(code.co_varnames[:code.co_argcount]), fn.__globals__,
                      SourceLoc(code.co_filename, 1, code.co_name))
        return len(compiled_writes.own_writes(bc, act.stacks, code))

    def into_arg(x, buf):
        buf[0] = x[0]

    def into_arg_view(x, buf):
        v = buf[1:]
        v[0] = x[0]

    def into_list_item(x, items):
        rows = [items[0]]
        r = rows[0]
        r[0] = x[0]

    def maybe_arg(x, buf, flag):
        a = np.zeros(3) if flag else buf
        a[0] = x[0]

    def through_asarray(x, buf):
        a = np.asarray(buf)  # (buf itself)
        a[0] = x[0]

    def through_reshape(x, buf):
        a = buf.reshape(-1)
        a[0] = x[0]

    def copy_of_a_list_item(x, items):
        rows = items.copy()  # a new list, holding the caller's arrays
        r = rows[0]
        r[0] = x[0]

    for fn in (into_arg, into_arg_view, into_list_item, maybe_arg, through_asarray, through_reshape,
               copy_of_a_list_item):
        assert own(fn) == 0, fn.__name__
    assert own(write_through_views) == 3
    assert own(allocate_then_fill) == 2


def mask_also_read(x):
    mask = x > 0
    scale = 2.0 if mask[0] else 3.0  # the mask's values decide: they must stay checked
    return np.sum(x[mask] ** 2) * scale


FLIP_CALLS = [(np.array([1.0, -2.0, 3.0]),), (np.array([1.5, -1.0, 2.0]),), (np.array([-1.0, 2.0, 3.0]),),
              (np.array([2.0, -2.0, 1.0]),)]  # two positives each call; the first flips


@pytest.mark.parametrize("tier", TIERS)
def test_mask_whose_values_are_read_stays_checked(tier):
    agree_with_general(mask_also_read, FLIP_CALLS, tier, value_atol=0)


def test_mask_values_unchecked_would_be_wrong(monkeypatch):
    """The static check that a mask is used only as an index is what lets its values go unchecked: taken
    away (every mask unchecked), `mask[0]`'s branch is replayed as captured, and the test sees it."""
    monkeypatch.setattr(compiled_writes, "_index_only", lambda *a, **k: True)

    def read_too(x):  # (a code of its own: no program of the checked build is found on disk for it)
        mask = x > 0
        scale = 2.0 if mask[0] else 3.0
        return np.sum(x[mask] ** 2) * scale

    with pytest.raises(AssertionError):
        agree_with_general(read_too, FLIP_CALLS, "numpy", value_atol=0)


def write_at_computed_index(x, idx):
    out = np.zeros(4)
    out[idx + 0] = x[:2]  # an index computed from an integer argument where the capture does not record it
    return np.sum(out * np.arange(1.0, 5.0) * x)


def write_at_argument_index(x, idx):
    out = np.zeros(4)
    out[idx] += x[:2]
    np.add.at(out, idx, x[2:4] ** 2)
    return np.sum(out * np.arange(1.0, 5.0) * x)


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("fn", [write_at_computed_index, write_at_argument_index], ids=lambda f: f.__name__)
def test_write_index_from_an_argument_is_never_baked_in(fn, tier):
    rng = np.random.default_rng(13)
    calls = [(rng.normal(size=4), np.array([0, 3])), (rng.normal(size=4), np.array([1, 2])),
             (rng.normal(size=4), np.array([3, 3])), (rng.normal(size=4), np.array([0, 3]))]
    agree_with_general(fn, calls, tier, value_atol=0)


def fill_diagonal_and_sort(x):
    y = x.copy()
    y.sort()
    M = np.outer(x, x)
    np.fill_diagonal(M, 1.0)
    z = x * 2.0
    z.fill(0.5)
    return y[-1] * 3.0 + y[0] + np.sum(M ** 2) + np.sum(z * x)


def fill_empty(x):
    out = np.empty((3, len(x)))
    out[0] = x
    out[1, :] = np.sin(x)
    out[2, 1:] = x[:-1] * x[1:]
    out[2, 0] = 1.0
    out[:, 0] *= 2.0
    return np.sum(out ** 2)


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("fn", [fill_diagonal_and_sort, fill_empty], ids=lambda f: f.__name__)
def test_inplace_methods_and_empty_buffers(fn, tier):
    s = agree_with_general(fn, _vectors(5, seed=17), tier, value_atol=0)
    assert s["programs"], s["not_compiled"]


def mask_indexes_an_integer_argument(x, weights):
    mask = x > 0
    picked = weights[mask]  # an integer array: nothing is recorded here
    return np.sum(x[mask] ** 2) * float(picked.sum())


def mask_indexes_a_made_array(x):
    mask = x > 0
    n = np.arange(1.0, 1.0 + len(x))[mask].sum()
    return np.sum(x[mask]) * n


@pytest.mark.parametrize("tier", TIERS)
def test_mask_used_where_nothing_is_recorded_stays_checked(tier):
    """The same count each call, other elements selected: a mask that also indexes what the capture does
    not record keeps its values checked (the general path's result on every call)."""
    weights = np.array([1, 10, 100])
    agree_with_general(mask_indexes_an_integer_argument, [(c[0], weights) for c in FLIP_CALLS], tier, value_atol=0)
    agree_with_general(mask_indexes_a_made_array, FLIP_CALLS, tier, value_atol=0)


def test_mask_escape_unnoted_would_be_wrong(monkeypatch):
    """Taken away, the capture's note of a mask indexing where nothing is recorded (and the static
    check) let the mask go unchecked, and `weights[mask]`'s sum is replayed as captured: the test sees it."""
    from bytegrad.compiled.capture import CaptureTape

    monkeypatch.setattr(compiled_writes, "_index_only", lambda *a, **k: True)
    monkeypatch.setattr(CaptureTape, "note_index", lambda self, key: None)
    from bytegrad.compiled import eligibility  # (and the check of what is computed from an integer argument)

    check = eligibility.check
    monkeypatch.setattr(eligibility, "check", lambda code, active, *a, untracked=frozenset(), **k:
                        check(code, frozenset(active) | untracked, *a, **k))

    def unnoted(x, weights):  # (a code of its own: no program of the checked build is found on disk for it)
        mask = x > 0
        picked = weights[mask]
        return np.sum(x[mask] ** 2) * float(picked.sum())

    weights = np.array([1, 10, 100])
    with pytest.raises(AssertionError):
        agree_with_general(unnoted, [(c[0], weights) for c in FLIP_CALLS], "numpy", value_atol=0)


def integer_buffer(x, idx):
    buf = np.empty_like(idx)  # an integer buffer: not tracked, its values stay checked
    buf[:] = idx
    return np.sum(x ** 2) * float(buf.sum())


def integer_argument_read(x, idx):
    b = idx.copy()
    return np.sum(x ** 2) * float(b.sum())


def integer_item_read(x, idx):
    return np.sum(x * idx[0])


def integer_length_read(x, idx):
    return np.sum(x[: len(idx)] ** 2)


def integer_through_a_tuple(x, idx):
    pair = (idx, 1)  # (the tuple is plumbing: what is computed from its item later is checked there)
    return np.sum(x * pair[0][0])


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("fn", [integer_buffer, integer_argument_read, integer_item_read, integer_through_a_tuple],
                         ids=lambda f: f.__name__)
def test_integer_argument_values_read_unhooked(fn, tier):
    """What Python code computes from an integer array argument is not recorded (the capture does not
    track it): the static check refuses it (compiled/eligibility.py, `untracked`), so the values of
    each call are the general path's, never the capture's."""
    agree_with_general(fn, [(np.ones(3) * k, np.array([k, 1, 2])) for k in range(1, 5)], tier, value_atol=0)
    d = bytegrad.differentiate(fn, tier=tier)
    d.value_and_grad(np.ones(3), np.array([1, 1, 2]))
    s = d.stats()["compiled"]
    assert not s["programs"] and s["not_compiled"], s  # (refused: by this check, or another first)


def _item_helper(x, idx, *rest, **named):
    return x * idx[0] + sum(r[0] for r in rest) + sum(v[0] for v in named.values())


def _plain_item_helper(x, idx):
    return x * idx[0]


def integer_read_in_a_callee(x, idx):
    return np.sum(_plain_item_helper(x, idx))


def integer_read_through_star_args(x, idx):
    return np.sum(_item_helper(x, idx, idx, k=idx))


def integer_read_from_a_dict(p, x):
    return np.sum(x * p["idx"][0])


@pytest.mark.parametrize("tier", TIERS)
def test_integer_argument_read_in_a_callee_or_a_container(tier):
    """An integer array handed to a callee (by position, through `*args` or `**kwargs`) or held by a
    dict argument: what is computed from it is not recorded, so the signature stays general."""
    for fn in (integer_read_in_a_callee, integer_read_through_star_args):
        agree_with_general(fn, [(np.arange(3.0) + k, np.array([k, 1, 2])) for k in range(1, 5)], tier, value_atol=0)
    agree_with_general(integer_read_from_a_dict,
                       [({"idx": np.array([k, 1, 2])}, np.arange(3.0) + k) for k in range(1, 5)], tier, wrt=1, value_atol=0)
    for fn, args in ((integer_read_in_a_callee, (np.ones(3), np.array([1, 1, 2]))),
                     (integer_read_from_a_dict, ({"idx": np.array([1, 1, 2])}, np.ones(3)))):
        d = bytegrad.differentiate(fn, wrt=1 if fn is integer_read_from_a_dict else 0, tier=tier)
        d.value_and_grad(*args)
        s = d.stats()["compiled"]
        assert not s["programs"] and "integer or boolean array" in " ".join(s["not_compiled"].values()), s


@pytest.mark.parametrize("tier", TIERS)
def test_integer_argument_written_in_place_between_calls(tier):
    idx = np.array([1, 1, 2])
    fast = bytegrad.differentiate(integer_item_read, tier=tier)
    general = bytegrad.differentiate(integer_item_read, tier="general")
    for k in range(4):
        idx[0] = k + 1  # (the same array, its first value changed)
        x = np.arange(3.0) + k
        (v1, g1), (v2, g2) = fast.value_and_grad(x, idx), general.value_and_grad(x, idx)
        np.testing.assert_allclose(v1, v2, rtol=1e-12, atol=0)
        np.testing.assert_allclose(g1, g2, rtol=1e-12, atol=0)


@pytest.mark.parametrize("tier", TIERS)
def test_length_of_an_integer_argument_agrees(tier):
    agree_with_general(integer_length_read, [(np.arange(4.0) + k, np.arange(k % 3 + 1)) for k in range(4)], tier,
                       value_atol=0)


def write_at_argmax(x):
    out = np.zeros(len(x))
    out[np.argmax(x)] = x[0] * 2.0  # an index decided on data: checked, never replayed stale
    return np.sum(out * x)


@pytest.mark.parametrize("tier", TIERS)
def test_write_at_a_data_decided_index(tier):
    calls = [(np.array([3.0, 1.0, 2.0]),), (np.array([4.0, 0.5, 2.0]),), (np.array([1.0, 5.0, 2.0]),),
             (np.array([1.0, 2.0, 7.0]),)]
    agree_with_general(write_at_argmax, calls, tier, value_atol=0)


def vector_fill(x):
    out = np.zeros((2, len(x)))
    out[0] = np.sin(x)
    out[1, 1:] = x[:-1] * x[1:]
    out[:, 0] *= 2.0
    return out[x[:2] > -10.0].ravel()


def test_pullback_programs_replay_writes():
    """Pullback programs (NumPy back end) replay writes and masks as gradients do: output and cotangents
    compared with the general path's, call by call."""
    fast = bytegrad.differentiate(vector_fill, tier="numpy")
    general = bytegrad.differentiate(vector_fill, tier="general")
    rng = np.random.default_rng(21)
    for _ in range(4):
        x = rng.normal(size=4)
        out1, back1 = fast.pullback(x)
        out2, back2 = general.pullback(x)
        np.testing.assert_allclose(out1, out2, rtol=1e-12)
        bar = rng.normal(size=out2.shape)
        np.testing.assert_allclose(back1(bar)[0], back2(bar)[0], rtol=1e-12)
    assert fast.stats()["compiled_pullback"]["programs"]


def fortran_owner(X):
    B = np.zeros(X.shape, order="F")  # an array laid out in Fortran order, written through a view
    B += X
    v = B[:, 1]
    v[:] = X[:, 0] ** 2
    B[np.array([0, 2]), 0] += X[1, :2]
    return np.sum(B ** 2 * X) + np.sum(B.ravel(order="F")[::2] * X.ravel()[:5])


@pytest.mark.parametrize("tier", TIERS)
def test_write_into_a_fortran_ordered_array(tier):
    rng = np.random.default_rng(23)
    s = agree_with_general(fortran_owner, [(rng.normal(size=(3, 3)),) for _ in range(4)], tier, value_atol=0)
    assert s["programs"], s["not_compiled"]


def reciprocal_masked(x):
    buf = 1.0 / x  # inf at x == 0: the masked-out slot's cotangent is an exact zero, never NaN
    buf[x == 0.0] = 0.0
    return np.sum(buf)


@pytest.mark.parametrize("tier", TIERS)
def test_zero_safe_steps_before_a_mask_write(tier):
    calls = [(np.array([1.0, 0.0, 2.0, 4.0]),), (np.array([3.0, 0.0, 0.5, 1.0]),), (np.array([0.0, 1.0, 2.0, 4.0]),),
             (np.array([2.0, 0.0, 5.0, 1.5]),)]
    s = agree_with_general(reciprocal_masked, calls, tier, value_atol=0)
    assert s["programs"], s["not_compiled"]
    fast = bytegrad.differentiate(reciprocal_masked, tier=tier)
    for args in calls:
        assert np.isfinite(fast.grad(*args)).all()  # (the zero-safe step's exact zeros, as the general path's)


# ---- programs as users write them ---------------------------------------------------------------------


def rnn_states(W, xs):
    T, n = xs.shape
    H = np.zeros((T + 1, n))
    for t in range(T):
        H[t + 1] = np.tanh(W @ H[t] + xs[t])
    return np.sum(H[1:] ** 2)


def stencil(x):
    out = np.zeros_like(x)
    out[1:-1] = x[2:] - 2 * x[1:-1] + x[:-2]
    out[0] = out[-1] = 0.0
    return np.sum(out ** 2)


def scatter_bins(w, idx):
    bins = np.zeros(4)
    np.add.at(bins, idx, w)
    return np.sum(np.exp(bins))


def relu_in_place(x, W):
    h = W @ x
    h[h < 0] = 0.0
    return np.sum(h ** 2)


def clip_in_place(x):
    y = x.copy()
    big = np.abs(y) > 1.0
    y[big] = np.sign(y[big])
    return np.sum(y * x)


def running_mean(x):
    acc = np.empty(len(x))
    acc[0] = x[0]
    for i in range(1, len(x)):
        acc[i] = 0.9 * acc[i - 1] + 0.1 * x[i]
    return acc[-1] + np.sum(acc)


def _user_calls(rng):
    return [
        (rnn_states, [(rng.normal(size=(3, 3)) * 0.5, rng.normal(size=(4, 3))) for _ in range(3)]),
        (stencil, [(rng.normal(size=6),) for _ in range(3)]),
        (scatter_bins, [(rng.normal(size=5), rng.integers(0, 4, size=5)) for _ in range(3)]),
        (relu_in_place, [(rng.normal(size=4), rng.normal(size=(5, 4))) for _ in range(4)]),
        (clip_in_place, [(rng.normal(size=6) * 2,) for _ in range(4)]),
        (running_mean, [(rng.normal(size=6),) for _ in range(3)]),
    ]


@pytest.mark.parametrize("tier", TIERS)
def test_programs_as_users_write_them(tier):
    for fn, calls in _user_calls(np.random.default_rng(29)):
        s = agree_with_general(fn, calls, tier, value_atol=0)
        assert s["programs"], (fn.__name__, s["not_compiled"])
