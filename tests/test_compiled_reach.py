"""Constructs the compiled tier takes since issue 27, each against the general path call by call.

- zero-argument `super()` in a method of an object the call built (compiled/reach_super.py): fixed
  by the class guard, which sees a base class's method replaced between calls;
- `list.sort` on differentiated values (rules/_impls.py `py_list_sort`): each comparison of the sort
  is a decision, so a call whose values sort in another order runs the general path (or a new
  capture), never the captured order;
- an attribute read off a method's parameter that holds a number (compiled/reach_params.py): a user
  operator's `other.data if isinstance(other, Vec) else other` with `w + 1.0`; the same read off
  a parameter that holds an object the program does not guard stays refused, naming the line.
"""
from __future__ import annotations

import os
import sys
import types

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from gradcheck import assert_trees_close

import bytegrad

TIERS = ["numpy", "numba"]


def fresh(fn):
    return types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)


def stats(d) -> dict:
    return d.stats()["compiled"]


def agree(fast, general, *args):
    """One call of each: value and gradient the same; returns the value."""
    got, expected = fast.value_and_grad(*args), general.value_and_grad(*args)
    assert_trees_close(got, expected, rtol=1e-12, atol=1e-300)
    return got[0]


def refusals(d) -> str:
    return " ".join(stats(d)["not_compiled"].values())


# ---- super() -----------------------------------------------------------------------------------


class Base:
    def __init__(self, w):
        self.w = w

    def forward(self, x):
        return np.tanh(self.w * x)


class Derived(Base):
    def __init__(self, w, scale):
        super().__init__(w)
        self.scale = scale

    def forward(self, x):
        return self.scale * super().forward(x) + x


def uses_super(w, x):
    return np.sum(Derived(w, 0.5).forward(x) ** 2)


@pytest.mark.parametrize("tier", TIERS)
def test_super_in_a_built_object_compiles_and_agrees(tier):
    fast = bytegrad.differentiate(fresh(uses_super), wrt=(0, 1), tier=tier)
    general = bytegrad.differentiate(uses_super, wrt=(0, 1), tier="general")
    rng = np.random.default_rng(1)
    for _ in range(3):
        agree(fast, general, rng.normal(size=3), rng.normal(size=3))
    s = stats(fast)
    assert len(s["programs"]) == 1 and s["programs"][0]["backend"] == tier, s
    assert s["general_calls"] == 0
    assert any("Derived's attributes unchanged" in g for g in s["programs"][0]["guards"])


@pytest.mark.parametrize("tier", TIERS)
def test_super_sees_a_base_method_replaced_between_calls(tier):
    """The method super() finds is fixed by the class guard (every class of the MRO): replacing
    Base.forward after the capture gives what the general path gives. Fails without the class guard."""
    fast = bytegrad.differentiate(fresh(uses_super), wrt=(0, 1), tier=tier)
    general = bytegrad.differentiate(uses_super, wrt=(0, 1), tier="general")
    rng = np.random.default_rng(2)
    args = rng.normal(size=3), rng.normal(size=3)
    agree(fast, general, *args)
    agree(fast, general, *args)
    old = Base.forward
    try:
        Base.forward = lambda self, x: np.sin(self.w * x)
        v = agree(fast, general, *args)
        assert v == general(*args)
    finally:
        Base.forward = old
    agree(fast, general, *args)


class Other(Base):
    def forward(self, x):
        return 2.0 * super(Other, self).forward(x)  # the two-argument form


def two_argument_super(w, x):
    return np.sum(Other(w).forward(x))


@pytest.mark.parametrize("tier", TIERS)
def test_two_argument_super_agrees_or_is_refused_naming_the_line(tier):
    """reach_super takes the zero-argument form only; the two-argument one is whatever the tier made
    of it before (3.11: a hooked call of `super` on a built object; 3.12, 3.13: LOAD_SUPER_ATTR,
    refused naming its line), and agrees with the general path."""
    fast = bytegrad.differentiate(fresh(two_argument_super), wrt=(0, 1), tier=tier)
    general = bytegrad.differentiate(two_argument_super, wrt=(0, 1), tier="general")
    rng = np.random.default_rng(3)
    for _ in range(3):
        agree(fast, general, rng.normal(size=3), rng.normal(size=3))
    if sys.version_info >= (3, 12):
        line = Other.forward.__code__.co_firstlineno + 1
        assert not stats(fast)["programs"]
        assert f"calls super() (line {line})" in refusals(fast), refusals(fast)


def test_zero_argument_super_sites_are_found_on_every_version():
    from bytegrad.compiled.reach_super import super_sites

    line = Derived.forward.__code__.co_firstlineno + 1
    assert super_sites(Derived.forward.__code__) == [(line, "forward")]
    assert super_sites(Derived.__init__.__code__) == [(line - 4, "__init__")]
    assert super_sites(Other.forward.__code__) == []  # (two arguments)
    assert super_sites(uses_super.__code__) == []


def test_super_allowance_matches_reasons_by_kind_not_by_text(monkeypatch):
    """reach_super drops the static check's reasons for a `super()` lookup by their kind, line and name
    (compiled/reasons.py): a message reworded in eligibility.py still matches, its text unchanged
    there; a plain string with the words of one never does."""
    from bytegrad.compiled import eligibility, reasons
    from bytegrad.compiled.reach_super import allowed_super

    code = Derived.forward.__code__
    found, _ = eligibility.check(code, frozenset({"self", "x"}), Derived.forward.__globals__, frozenset(),
                                 closure=Derived.forward.__closure__)
    line = code.co_firstlineno + 1
    typed = [r for r in found if isinstance(r, reasons.Reason)]
    assert typed and all(r.line == line for r in typed), found
    assert all(str(r).endswith(f"(line {line})") for r in typed)  # (the text a user reads, as before)
    assert allowed_super(code, found) == [r for r in found if r not in typed]
    reworded = [reasons.Reason(f"other words (line {line})", r.kind, r.name, r.line) for r in typed]
    assert allowed_super(code, reworded) == []
    plain = [str(r) for r in typed]
    assert allowed_super(code, plain) == plain


# ---- list.sort -----------------------------------------------------------------------------------


def sorts_a_list(x):
    items = [x[0] * 2.0, x[1], x[2] ** 2, x[3] - 1.0]
    items.sort()
    return items[0] * 3.0 + items[-1] ** 2 + sum(items[1:3]) * items[1]


def sorts_in_reverse_by_key(x):
    items = list(x)
    items.sort(key=lambda v: v * v, reverse=True)
    return items[0] * 5.0 + items[1] * items[2]


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("fn", [sorts_a_list, sorts_in_reverse_by_key])
def test_list_sort_compiles_and_sees_a_new_order(fn, tier):
    """Calls 1-2 sort in one order (the program runs), call 3 in another, call 4 the first again: each
    as the general path gives it. Fails when the comparisons of the sort are not decisions (the
    captured order would be replayed on call 3)."""
    fast = bytegrad.differentiate(fresh(fn), tier=tier)
    general = bytegrad.differentiate(fn, tier="general")
    a = np.array([0.3, -1.2, 0.9, 2.5])
    b = a + np.array([0.01, -0.02, 0.03, 0.01])  # the same order as a
    c = np.array([2.0, 0.4, -0.1, -3.0])  # another order
    for x in (a, b, c, a):
        agree(fast, general, x)
    s = stats(fast)
    assert s["programs"], s  # (the numba tier may give the numpy back end a program this small)
    assert s["compiled_calls"] >= 2
    assert sum(p["decided_otherwise"] for p in s["programs"]) >= 1, s  # call 3 was seen to differ
    assert any("lt gives" in g for g in s["programs"][0]["guards"])


def test_list_sort_keeps_the_list_and_its_items():
    """The sort is in place, stable, and moves the same objects (its items' identity kept)."""
    @bytegrad.differentiate
    def f(x):
        items = [x[1], x[0], x[1] * 1.0, x[2]]
        keep = items
        items.sort()
        assert keep is items and len(items) == 4
        return items[0] * 1.0 + items[1] * 2.0 + items[2] * 3.0 + items[3] * 4.0

    x = np.array([1.0, 1.0, 0.5])  # ties: the stable order decides which item gets which weight
    g = f.grad(x)
    # sorted: x[2], x[1], x[0], x[1]*1.0 (x[1] before x[0] by position, the tie kept in order)
    np.testing.assert_array_equal(g, [3.0, 2.0 + 4.0, 1.0])


# ---- attribute reads off a parameter holding a number ---------------------------------------------


class Box:
    def __init__(self, data):
        self.data = data

    def __add__(self, other):
        return Box(self.data + (other.data if isinstance(other, Box) else other))

    __radd__ = __add__


def box_with_numbers(x, y):
    u = Box(x) + Box(y)
    w = u + 1.5
    z = 2.0 + w
    return np.sum(z.data ** 2)


@pytest.mark.parametrize("tier", TIERS)
def test_user_operator_with_a_number_compiles_and_agrees(tier):
    fast = bytegrad.differentiate(fresh(box_with_numbers), wrt=(0, 1), tier=tier)
    general = bytegrad.differentiate(box_with_numbers, wrt=(0, 1), tier="general")
    rng = np.random.default_rng(4)
    for _ in range(3):
        agree(fast, general, rng.normal(size=3), rng.normal(size=3))
    s = stats(fast)
    assert len(s["programs"]) == 1 and s["general_calls"] == 0, s


def box_with_an_object_argument(x, other):
    return np.sum((Box(x) + other).data ** 2) + np.sum((Box(x) + 1.0).data)


@pytest.mark.parametrize("tier", TIERS)
def test_attribute_read_off_an_object_argument_sees_its_changes(tier):
    """`other.data` on a Box handed in as a non-differentiated argument, next to `Box(x) + 1.0` (the
    same method with a number): its array changed in place, rebound, and the object replaced between
    calls, each call as the general path gives it."""
    fast = bytegrad.differentiate(fresh(box_with_an_object_argument), tier=tier)
    general = bytegrad.differentiate(box_with_an_object_argument, tier="general")
    x = np.array([0.5, -0.2, 1.0])
    held = Box(np.ones(3))
    agree(fast, general, x, held)
    agree(fast, general, x, held)
    held.data[1] = 7.0
    agree(fast, general, x, held)
    held.data = np.full(3, -2.0)
    agree(fast, general, x, held)
    agree(fast, general, x, Box(np.arange(3.0)))


# ---- x[~mask] ------------------------------------------------------------------------------------


def inverted_mask(x):
    mask = x > 0.1
    return np.sum(x[mask] ** 3) + np.sum(np.exp(x[~mask]))


def inverted_mask_written(x, y):
    mask = x >= 0.0
    out = np.zeros_like(x)
    out[~mask] = y[~mask] * 2.0
    return np.sum(out * x) + np.sum(y[mask] ** 2)


@pytest.mark.parametrize("tier", TIERS)
def test_inverted_mask_is_computed_on_every_call(tier):
    """Calls 1-2 with one mask, call 3 with the same count at other places, call 4 with another
    count: each as the general path gives it. Call 3 fails if the program used the capture's `~mask`
    (a constant) instead of computing it from this call's comparison."""
    fast = bytegrad.differentiate(fresh(inverted_mask), tier=tier)
    general = bytegrad.differentiate(inverted_mask, tier="general")
    a = np.array([0.5, -1.0, 2.0, -0.3, 0.7, -2.0])
    b = a * 1.1
    c = -a  # three above 0.1 again, at the other places
    d = np.array([0.5, 1.0, 2.0, -0.3, 0.7, 2.0])
    for x in (a, b, c, d):
        agree(fast, general, x)
    s = stats(fast)
    assert s["programs"], s
    assert s["programs"][0]["calls"] >= 2, s  # (b and c ran the first program)
    assert not any("gives" in g and "line" in g and "gt" in g for g in s["programs"][0]["guards"])


@pytest.mark.parametrize("tier", TIERS)
def test_inverted_mask_in_a_write(tier):
    fast = bytegrad.differentiate(fresh(inverted_mask_written), wrt=(0, 1), tier=tier)
    general = bytegrad.differentiate(inverted_mask_written, wrt=(0, 1), tier="general")
    y = np.array([1.0, 2.0, 3.0, 4.0])
    for x in (np.array([1.0, -1.0, 2.0, -2.0]), np.array([1.5, -1.0, 2.0, -2.0]), np.array([-1.0, 1.0, -2.0, 2.0])):
        agree(fast, general, x, y)


def inverted_mask_rebound(x, flip):
    mask = x > 0.0
    if flip:
        mask = x < 0.5  # a second store: which comparison `mask` holds is not one line's
    return np.sum(x[~mask] ** 2)


def inverted_mask_in_a_loop(x):
    total = 0.0
    for k in range(2):
        mask = x > 0.3 * k
        total = total + np.sum(x[~mask] ** 2)
    return total


def inverted_other_array(x):
    mask = x > 0.0
    other = np.array([True, False, True, False])
    return np.sum(x[mask]) + np.sum(x[~other] ** 2)


@pytest.mark.parametrize("fn", [inverted_mask_rebound, inverted_mask_in_a_loop, inverted_other_array])
def test_inverted_masks_the_analysis_cannot_prove_stay_refused_naming_the_line(fn):
    """A local stored twice, a loop, `~` of an array that is not a comparison's: refused with the
    construct and its line, and each call agrees. Fails when reach_mask takes any `~` index."""
    extra = (True,) if fn is inverted_mask_rebound else ()
    fast = bytegrad.differentiate(fresh(fn), tier="numpy")
    general = bytegrad.differentiate(fn, tier="general")
    for x in (np.array([1.0, -1.0, 2.0, -2.0]), np.array([-1.0, 1.0, -2.0, 2.0])):
        got, expected = fast.value_and_grad(x, *extra), general.value_and_grad(x, *extra)
        assert_trees_close(got, expected, rtol=1e-12, atol=1e-300)
    if fn is not inverted_other_array:
        assert not stats(fast)["programs"]
        assert "x[~mask]" in refusals(fast) and "line " in refusals(fast), refusals(fast)


def test_inverted_sources_on_every_version():
    from bytegrad.compiled.reach_mask import inverted_sources

    first = inverted_mask.__code__.co_firstlineno
    import operator
    assert inverted_sources(inverted_mask.__code__) == {first + 2: (first + 1, operator.gt)}
    assert inverted_sources(inverted_mask_rebound.__code__) == {}
    assert inverted_sources(inverted_mask_in_a_loop.__code__) == {}


# ---- a literal's method, a view of an array made from constants ----------------------------------


def formats_a_value(x):
    label = "{:.1f}".format(x[0])
    return np.sum(x ** 2) * len(label)


@pytest.mark.parametrize("tier", TIERS)
def test_literal_method_on_a_value_is_a_decision(tier):
    """`"{:.1f}".format(x[0])`: the text is a decision the program computes again. The third call's
    text is longer: as the general path gives it (fails if the program kept the captured length)."""
    fast = bytegrad.differentiate(fresh(formats_a_value), tier=tier)
    general = bytegrad.differentiate(formats_a_value, tier="general")
    for first in (1.23, 1.24, 12.3, 1.23):
        agree(fast, general, np.array([first, 0.5, -2.0]))
    s = stats(fast)
    assert s["programs"] and s["programs"][0]["calls"] >= 1, s
    assert any("format gives" in g for g in s["programs"][0]["guards"]), s["programs"][0]["guards"]


def made_view(X):
    return np.sum(X * np.arange(6.0).reshape(2, 3)) + np.sum(X.T @ np.eye(2).T)


def made_then_written(X):
    m = np.arange(6.0)
    m[0] = 5.0
    return np.sum(X * m.reshape(2, 3))


@pytest.mark.parametrize("tier", TIERS)
def test_view_of_a_made_array_compiles_and_agrees(tier):
    fast = bytegrad.differentiate(fresh(made_view), tier=tier)
    general = bytegrad.differentiate(made_view, tier="general")
    rng = np.random.default_rng(5)
    for _ in range(3):
        agree(fast, general, rng.normal(size=(2, 3)))
    s = stats(fast)
    assert len(s["programs"]) == 1 and s["general_calls"] == 0, s


def test_view_of_a_local_made_array_written_in_between_compiles():
    """`m.reshape(2, 3)` of a local made array written in between: a capture records the operations
    on made arrays (tests/test_compiled_made.py), the write replayed as a version; it agrees."""
    fast = bytegrad.differentiate(fresh(made_then_written), tier="numpy")
    general = bytegrad.differentiate(made_then_written, tier="general")
    rng = np.random.default_rng(6)
    for _ in range(3):
        agree(fast, general, rng.normal(size=(2, 3)))
    assert stats(fast)["programs"], refusals(fast)


# ---- with on a Python context manager ------------------------------------------------------------


class Scaled:
    def __init__(self, v):
        self.v = v

    def __enter__(self):
        return self.v * 5.0

    def __exit__(self, *exc_info):
        return False


def with_a_manager(x):
    total = np.sum(x ** 2)
    with Scaled(x) as scaled:
        total = total + np.sum(np.sin(scaled))
    return total


@pytest.mark.parametrize("tier", TIERS)
def test_with_a_python_manager_compiles_and_agrees(tier):
    fast = bytegrad.differentiate(fresh(with_a_manager), tier=tier)
    general = bytegrad.differentiate(with_a_manager, tier="general")
    rng = np.random.default_rng(7)
    for _ in range(3):
        agree(fast, general, rng.normal(size=3))
    s = stats(fast)
    assert len(s["programs"]) == 1 and s["general_calls"] == 0, s
    guards = s["programs"][0]["guards"]
    assert any("Scaled.__exit__ keeps its code" in g for g in guards), guards


class Swallows:
    """An `__exit__` that computes from the manager's values and swallows the exception: run from C
    on the exceptional exit, so what it computes is not recorded."""

    def __init__(self, v):
        self.v = v
        self.scale = 1.0

    def __enter__(self):
        return self.v * 2.0

    def __exit__(self, kind, value, tb):
        self.scale = float(np.sum(self.v * self.v))
        return True


def with_an_exceptional_exit(x):
    m = Swallows(x)
    total = np.sum(x)
    with m as y:
        total = total + np.sum(y)
        if total > -1e9:
            raise ValueError("left by an exception")
    return total * m.scale


@pytest.mark.parametrize("tier", TIERS)
def test_with_left_by_an_exception_stays_refused_naming_the_line(tier):
    """The exceptional exit ran in the capture: refused (reach_with.unpaired), naming the block's line;
    every call agrees. Without that check the program keeps m.scale as the capture computed it, and
    the second call's value is wrong."""
    fast = bytegrad.differentiate(fresh(with_an_exceptional_exit), tier=tier)
    general = bytegrad.differentiate(with_an_exceptional_exit, tier="general")
    for x in (np.array([1.0, 2.0, 3.0]), np.array([0.5, -1.0, 4.0]), np.array([2.0, 2.0, 2.0])):
        assert fast(x) == general(x)
        agree(fast, general, x)
    s = stats(fast)
    assert not s["programs"], s
    line = with_an_exceptional_exit.__code__.co_firstlineno + 3
    assert f"`with` block on a Swallows (line {line})" in refusals(fast), refusals(fast)


class CEnter:
    """A manager whose __enter__ is not Python code (a C method of object): refused during the capture."""

    __enter__ = object.__sizeof__

    def __init__(self, v):
        self.v = v

    def __exit__(self, *exc_info):
        return False


def with_a_c_enter(x):
    with CEnter(x):
        total = np.sum(x ** 2)
    return total


def test_with_a_manager_whose_enter_is_not_python_stays_refused_naming_the_line():
    fast = bytegrad.differentiate(fresh(with_a_c_enter), tier="numpy")
    general = bytegrad.differentiate(with_a_c_enter, tier="general")
    for x in (np.array([1.0, 2.0]), np.array([3.0, -1.0])):
        agree(fast, general, x)
    assert not stats(fast)["programs"]
    line = with_a_c_enter.__code__.co_firstlineno + 1
    assert "`with` block on a CEnter" in refusals(fast) and f"line {line}" in refusals(fast), refusals(fast)


# ---- objects of a plain class built on constants -------------------------------------------------


class Totals:
    def __init__(self, n):
        self.total = np.zeros(n)
        self.count = 0.0

    def add(self, v):
        self.total += v
        self.count = self.count + np.sum(v)


def accumulates(x):
    acc = Totals(len(x))
    for k in range(2):
        acc.add(np.sin(x * (k + 1)))
    return np.sum(acc.total ** 2) + acc.count


class Box2:
    def __init__(self, data):
        self.data = data

    def __iadd__(self, other):
        self.data = self.data + other
        return self


def boxes_made_from_zeros(x, y):
    acc = Box2(np.zeros(len(x)))
    acc += x * y
    acc += y
    return np.sum(acc.data ** 2)


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("fn", [accumulates, boxes_made_from_zeros])
def test_object_built_on_constants_compiles_and_agrees(fn, tier):
    wrt = 0 if fn is accumulates else (0, 1)
    fast = bytegrad.differentiate(fresh(fn), wrt=wrt, tier=tier)
    general = bytegrad.differentiate(fn, wrt=wrt, tier="general")
    rng = np.random.default_rng(8)
    for _ in range(3):
        args = (rng.normal(size=3),) if fn is accumulates else (rng.normal(size=3), rng.normal(size=3))
        agree(fast, general, *args)
    s = stats(fast)
    assert len(s["programs"]) == 1 and s["general_calls"] == 0, s
    cls = "Totals" if fn is accumulates else "Box2"
    assert any(f"{cls}'s attributes unchanged" in g for g in s["programs"][0]["guards"])


@pytest.mark.parametrize("tier", TIERS)
def test_object_built_on_constants_sees_its_class_changed(tier):
    """A method of the class replaced between calls: the class guard sends the call to the general
    path (the program would replay the old method)."""
    fast = bytegrad.differentiate(fresh(accumulates), tier=tier)
    general = bytegrad.differentiate(accumulates, tier="general")
    x = np.array([0.3, -0.7, 1.1])
    agree(fast, general, x)
    agree(fast, general, x)
    old = Totals.add
    try:
        def add(self, v):
            self.total += 2.0 * v
            self.count = self.count + np.sum(v)
        Totals.add = add
        agree(fast, general, x)
    finally:
        Totals.add = old
    agree(fast, general, x)


class Scale3:
    def __init__(self, k):
        self.k = k

    def times(self, v):
        return v * self.k


def scales_with_a_default(x, s=Scale3(2.0)):
    local = Scale3(3.0)
    return np.sum(s.times(x)) + np.sum(local.times(x))


@pytest.mark.parametrize("tier", TIERS)
def test_an_object_of_the_class_not_built_in_the_call_stays_refused(tier):
    """`s`, a default argument's Scale3, is of the class the call builds on constants, but was not
    built in the call: it stays general (a configuration default is guarded by content, but a method
    called on it could write it: refused at its line; BuildWatch would not have seen its __init__
    either), and its state changed between calls is seen."""
    fn = fresh(scales_with_a_default)
    fast = bytegrad.differentiate(fn, tier=tier)
    general = bytegrad.differentiate(scales_with_a_default, tier="general")
    x = np.array([0.5, 1.0, -2.0])
    default = scales_with_a_default.__defaults__[0]
    try:
        for k in (2.0, 2.0, 5.0):
            default.k = k
            fn.__defaults__[0].k = k
            agree(fast, general, x)
    finally:
        default.k = 2.0
    assert not stats(fast)["programs"]
    line = scales_with_a_default.__code__.co_firstlineno + 2
    assert f"reads the attribute .times of an object that is not an argument (line {line})" in refusals(fast), \
        refusals(fast)


def test_augmented_self_write_pattern():
    import dis

    from bytegrad.compiled.reach_self import augmented_self_write

    instrs = [i for i in dis.get_instructions(Totals.add) if i.opname != "CACHE"]
    stores = [k for k, i in enumerate(instrs) if i.opname == "STORE_ATTR"]
    assert [augmented_self_write(instrs, k, "self") for k in stores] == [True, False]
    assert not augmented_self_write(instrs, stores[0], "v")


def test_list_sort_of_a_list_subclass_calls_no_override():
    class Logged(list):
        calls = 0

        def append(self, item):
            Logged.calls += 1
            super().append(item)

    @bytegrad.differentiate
    def f(x):
        items = Logged([x[2], x[0], x[1]])
        items.sort()
        return items[0] * 1.0 + items[2] * 3.0

    np.testing.assert_array_equal(f.grad(np.array([0.5, 2.0, -1.0])), [0.0, 3.0, 1.0])
    assert Logged.calls == 0
