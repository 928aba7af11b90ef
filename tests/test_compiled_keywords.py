"""Calls with keywords of keyword-only parameters (and of `**kwargs`) on compiled programs (compiled/keywords.py).

Each case runs the same calls under a compiled tier and under the general path, call by call, and compares
values, gradients and side effects; then it checks that the compiled tier did serve the calls (so the
comparison is of a program, not of the general path with itself).
"""
from __future__ import annotations

import contextlib
import io

import numpy as np
import pytest

import bytegrad

TIERS = ("numpy", "numba", "auto")
CALLS = 6


def _same(a, b) -> bool:
    if isinstance(a, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return type(b) is dict and list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if a is None or isinstance(a, (str, bool)):
        return a == b
    x, y = np.asarray(a), np.asarray(b)
    return x.shape == y.shape and x.dtype == y.dtype and bool(np.allclose(x, y, rtol=1e-12, atol=1e-300))


def _outcome(call):
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            return ("ok", call()), out.getvalue()
    except Exception as exc:  # noqa: BLE001  (compared by type with the general path's)
        return ("raised", type(exc).__name__), out.getvalue()


def agree(make, tier, calls=CALLS, method="value_and_grad", **options):
    """`make()` -> (fn, step, seen): `step(i)` changes the state and gives the i-th call's (args, kwargs);
    `seen()` the side effects. Each side has its own `make()`; returns the compiled side's stats."""
    fast_fn, fast_step, fast_seen = make()
    gen_fn, gen_step, gen_seen = make()
    fast = bytegrad.differentiate(fast_fn, tier=tier, **options)
    general = bytegrad.differentiate(gen_fn, tier="general", **options)
    for i in range(calls):
        args, kwargs = fast_step(i)
        got, printed = _outcome(lambda: getattr(fast, method)(*args, **kwargs))
        args, kwargs = gen_step(i)
        want, want_printed = _outcome(lambda: getattr(general, method)(*args, **kwargs))
        assert got[0] == want[0] and (_same(got[1], want[1]) if got[0] == "ok" else got[1] == want[1]), \
            f"call {i} under tier {tier}: {got} != general {want}; {fast.stats().get('compiled')}"
        assert printed == want_printed
        assert _same(fast_seen(), gen_seen()), f"call {i}: effects {fast_seen()} != general {gen_seen()}"
    return fast.stats()["compiled"]


def _x(i, n=4):
    return np.random.default_rng(i).normal(size=n)


def _nothing():
    return None


def loss(w, x, *, l2=1e-3, scale=1.0):
    return np.sum(np.tanh(x @ w)) * scale + l2 * np.sum(w * w)


def _loss_calls(kwargs_of):
    def make():
        X = np.random.default_rng(7).normal(size=(5, 4))

        def step(i):
            return (_x(i), X), kwargs_of(i)
        return loss, step, _nothing
    return make


# ---- floats: inputs of the program, never baked ------------------------------------------------------


@pytest.mark.parametrize("tier", TIERS)
def test_a_keyword_only_float_that_changes_every_call_is_an_input(tier):
    """l2 differs on every call: a program that baked the capture's value would give the capture's value
    again (the comparison with the general path fails), and every call after the warm-up is compiled."""
    info = agree(_loss_calls(lambda i: {"l2": 0.1 * (i + 1)}), tier, calls=8)
    assert info["compiled_calls"] >= 8 - 2 - 1 and info["general_calls"] <= 3, info  # (auto: 2 general, 1 capture)
    progs = [p for p in info["programs"] if p.get("keywords") == ["l2"]]
    assert len(progs) == 1 and "l2: float" in progs[0]["guards"], info
    assert not any("l2 ==" in g for g in progs[0]["guards"]), progs  # (guarded by type, not by value)


@pytest.mark.parametrize("tier", TIERS)
def test_omitted_passed_and_reordered_keywords_agree(tier):
    calls = [{}, {"l2": 0.5}, {"scale": 2.0}, {"scale": 3.0, "l2": 0.25}, {"l2": 0.25, "scale": 3.0}, {},
             {"l2": 0.7}, {"scale": -1.0, "l2": 0.0}, {"l2": -0.0, "scale": 1.5}, {"scale": 0.5}]
    info = agree(_loss_calls(lambda i: dict(calls[i])), tier, calls=len(calls))
    assert info["compiled_calls"] >= 4, info
    # f(w, x), f(w, x, l2=...) and f(w, x, scale=...) (with or without l2, in either order) each have programs
    assert {tuple(p.get("keywords", ())) for p in info["programs"]} <= {(), ("l2",), ("l2", "scale")}, info


@pytest.mark.parametrize("tier", TIERS)
def test_a_keyword_default_changed_between_calls_is_the_one_at_the_call(tier):
    """`f.__kwdefaults__` written in place and replaced: a call that omits the keyword (and one that passes
    another keyword, so that the default is an argument of its program) uses the default of the moment."""
    def make():
        def f(w, *, l2=1e-3, scale=1.0):
            return np.sum(w ** 2) * l2 + np.sum(np.sin(w)) * scale

        def step(i):
            if i == 3:
                f.__kwdefaults__["l2"] = 5.0
            if i == 6:
                f.__kwdefaults__ = {"l2": -2.0, "scale": 4.0}
            if i == 9:
                f.__kwdefaults__["scale"] = 0.5
            return (_x(i),), ({"scale": 2.0} if i % 2 else {"l2": 0.3})
        return f, step, _nothing
    info = agree(make, tier, calls=12)
    assert info["compiled_calls"] >= 1 or tier == "auto", info  # (counted since the last change: it starts again)


# ---- ints, bools, strings, None: guarded by value ----------------------------------------------------


def _flags_calls():
    def f(w, *, n=2, training=True, mode="sum", eps=None):
        out = np.sin(w) ** n
        if training:
            out = out * 0.5
        total = np.sum(out) if mode == "sum" else np.mean(out)
        return total + (0.0 if eps is None else eps * np.sum(w))

    calls = [{"n": 2}, {"n": 3}, {"training": False}, {"training": True, "n": 3}, {"mode": "mean"},
             {"mode": "mean", "eps": 0.1}, {"n": 2}, {"n": 3}, {"training": False}, {"eps": 0.2, "mode": "sum"}]

    def make():
        def step(i):
            return (_x(i),), dict(calls[i % len(calls)])
        return f, step, _nothing
    return make


@pytest.mark.parametrize("tier", TIERS)
def test_keyword_only_ints_bools_strings_and_none_are_guarded_by_value(tier):
    info = agree(_flags_calls(), tier, calls=20)
    assert info["compiled_calls"] >= 6, info
    guards = " ".join(g for p in info["programs"] for g in p["guards"])
    assert "n == 2" in guards and "n == 3" in guards and "training" in guards, info


# ---- value_and_grad, grad, has_aux, wrt by name, *args -------------------------------------------------


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("method", ["grad", "value_and_grad"])
def test_grad_and_value_and_grad_with_aux(tier, method):
    def make():
        def f(w, *, l2=0.1, tag="a"):
            return np.sum(np.cos(w)) + l2 * np.sum(w * w), {"tag": tag, "l2": l2}

        def step(i):
            return (_x(i),), {"l2": 0.1 * i, "tag": "ab"[i % 2]}
        return f, step, _nothing
    info = agree(make, tier, method=method, has_aux=True)
    assert info["compiled_calls"] >= 3, info


@pytest.mark.parametrize("tier", TIERS)
def test_differentiating_a_keyword_only_parameter_by_name(tier):
    def make():
        def step(i):
            return (_x(i), np.ones((3, 4))), {"l2": 0.1 * (i + 1), "scale": 2.0 - i}
        return loss, step, _nothing
    info = agree(make, tier, wrt=("l2", 0, "scale"))
    assert info["compiled_calls"] >= 3, info
    # a call that does not pass the parameter `wrt` names raises, on every tier, as the general path does
    d = bytegrad.differentiate(loss, wrt="l2", tier=tier)
    with pytest.raises(bytegrad.WrtError):
        d.grad(_x(0), np.ones((3, 4)), scale=2.0)


@pytest.mark.parametrize("tier", TIERS)
def test_negative_wrt_and_star_args(tier):
    def make():
        def f(w, *rest, k=1.0):
            return np.sum(w * k) + sum(np.sum(r * r) for r in rest)

        def step(i):
            return (_x(i), _x(i + 1), _x(i + 2)), {"k": 0.5 * i}
        return f, step, _nothing
    agree(make, tier, wrt=(0, -1))


@pytest.mark.parametrize("tier", TIERS)
def test_omitted_positional_default_before_keywords(tier):
    def make():
        def f(w, a=2.0, *, k=1.0):
            return np.sum(w * k) * a

        def step(i):
            if i == 3:
                f.__defaults__ = (-1.0,)
            return (_x(i),), ({"k": 0.5 * i} if i % 2 else {"k": 1.5, "a": 3.0 - i})
        return f, step, _nothing
    info = agree(make, tier)
    assert info["compiled_calls"] >= 3, info


# ---- methods -------------------------------------------------------------------------------------------


class Model:
    def __init__(self, scale):
        self.scale = scale

    def loss(self, w, x, *, l2=1e-3, training=True):
        h = np.tanh(x @ w) * self.scale
        if training:
            h = h * 0.9
        return np.sum(h) + l2 * np.sum(w * w)


@pytest.mark.parametrize("tier", TIERS)
def test_a_method_with_keyword_only_arguments(tier):
    def make():
        model = Model(1.5)
        X = np.ones((3, 4))

        def step(i):
            if i == 4:
                model.scale = -2.0
            return (_x(i), X), {"l2": 0.1 * i, "training": bool(i % 2)}
        return model.loss, step, lambda: model.scale
    info = agree(make, tier, calls=8)
    assert info["compiled_calls"] >= 3, info


# ---- **kwargs -------------------------------------------------------------------------------------------


def _kwargs_calls(values):
    def f(w, **options):
        out = np.sum(np.sin(w))
        for name, v in options.items():
            out = out * 2.0 if (v and name != "off") else out + 1.0
        return out, list(options)

    def make():
        def step(i):
            return (_x(i),), dict(values[i % len(values)])
        return f, step, _nothing
    return make


@pytest.mark.parametrize("tier", TIERS)
def test_kwargs_of_constants_are_compiled_with_the_callers_keys_in_order(tier):
    """The function receives the caller's keys in the caller's order (the aux returns them): two calls with
    the same keys in another order get programs of their own."""
    values = [{"a": 1, "b": True}, {"b": True, "a": 1}, {"off": 0}, {"a": 1, "b": True}, {"b": False, "a": 1}]
    info = agree(_kwargs_calls(values), tier, calls=12, has_aux=True)
    assert info["compiled_calls"] >= 5, info
    assert any("options: dict with keys ('b', 'a') in this order" in p["guards"] for p in info["programs"]), info


def test_kwargs_dict_is_fresh_each_call():
    seen = []

    def f(w, **options):
        seen.append(options)
        options["touched"] = True  # (the caller's keywords are not a dict of the caller's: nothing to see)
        return np.sum(w) * 2.0

    d = bytegrad.differentiate(f, tier="numpy")
    for i in range(4):
        assert _same(d.grad(_x(i), a=1), np.full(4, 2.0))
    assert len({id(o) for o in seen}) == len(seen) and all(o == {"a": 1, "touched": True} for o in seen)


@pytest.mark.parametrize("tier", TIERS)
def test_kwargs_holding_floats_stay_general_with_their_reason(tier):
    values = [{"a": 0.5}, {"a": 1.5}, {"a": 2.5}]
    info = agree(_kwargs_calls(values), tier, has_aux=True)
    assert info["compiled_calls"] == 0, info
    (sig, why), = info["not_compiled"].items()
    assert sig == "ndarray, **options=dict" and "the **options dict receives a float" in why, info
    assert "positionally" not in why


def test_kwargs_with_star_args_stay_general_with_their_reason():
    def f(w, *rest, **options):
        return np.sum(w) * len(rest) * len(options)

    d = bytegrad.differentiate(f, tier="numpy")
    for i in range(3):
        assert _same(d.grad(_x(i), 1, 2, a=1), np.full(4, 2.0))
    info = d.stats()["compiled"]
    assert info["compiled_calls"] == 0 and "**kwargs takes, of a function with *args" in \
        " ".join(info["not_compiled"].values()), info


# ---- adversarial: effects on keyword arguments --------------------------------------------------------


@pytest.mark.parametrize("tier", TIERS)
def test_a_keyword_only_list_the_function_appends_to(tier):
    def make():
        log: list = []

        def f(w, *, log):
            log.append(len(log))
            return np.sum(w * w) * len(log)

        def step(i):
            return (_x(i),), {"log": log}
        return f, step, lambda: list(log)
    info = agree(make, tier)
    assert info["compiled_calls"] == 0, info  # (its append is an effect no program replays)
    assert any("log" in why or "list" in why for why in info["not_compiled"].values()), info


@pytest.mark.parametrize("tier", TIERS)
def test_an_omitted_keyword_whose_default_list_the_function_appends_to(tier):
    """`log` is omitted, but the call passes `k` after it: the default list is an argument of the twin,
    whose append is an effect no program replays (the call runs once, and appends once)."""
    def make():
        def f(w, *, log=[], k=1.0):  # noqa: B006 - the default written in place is the point
            log.append(k)
            return np.sum(w) * k * len(log)

        def step(i):
            return (_x(i),), {"k": 0.5 + i}
        return f, step, lambda: list(f.__kwdefaults__["log"])
    info = agree(make, tier)
    assert info["compiled_calls"] == 0, info


@pytest.mark.parametrize("tier", TIERS)
def test_a_body_replaced_between_calls(tier):
    def make():
        def f(w, *, k=1.0):
            return np.sum(np.sin(w)) * k

        def g(w, *, k=1.0):
            return np.sum(np.cos(w)) * k * 2.0

        def step(i):
            if i == 3:
                f.__code__ = g.__code__
            return (_x(i),), {"k": 0.5 + i}
        return f, step, _nothing
    agree(make, tier, calls=8)


@pytest.mark.parametrize("tier", TIERS)
def test_a_keyword_only_array_written_in_place(tier):
    def make():
        buf = np.zeros(4)

        def f(w, *, buf):
            buf[:] = buf + 1.0
            return np.sum(w * buf)

        def step(i):
            return (_x(i),), {"buf": buf}
        return f, step, lambda: buf.copy()
    agree(make, tier)


@pytest.mark.parametrize("tier", TIERS)
def test_a_keyword_only_array_read_is_tracked(tier):
    def make():
        def f(w, *, target):
            return np.sum((w - target) ** 2)

        def step(i):
            return (_x(i),), {"target": _x(i + 10)}
        return f, step, _nothing
    info = agree(make, tier)
    assert info["compiled_calls"] >= 3, info


def test_required_keyword_missing_and_unexpected_keyword_raise_as_the_general_path():
    def f(w, *, k):
        return np.sum(w) * k

    for tier in ("numpy", "general"):
        d = bytegrad.differentiate(f, tier=tier)
        d.grad(_x(0), k=1.0)
        with pytest.raises(TypeError):
            d.grad(_x(0))
        with pytest.raises(TypeError):
            d.grad(_x(0), k=1.0, other=2.0)


def test_a_positional_parameter_passed_twice_raises_with_kwargs_too():
    def f(w, **options):
        return np.sum(w) * len(options)

    def g(w, /, **options):  # (a positional-only name is a key **options takes)
        return np.sum(w) * len(options)

    d, e = bytegrad.differentiate(f, tier="numpy"), bytegrad.differentiate(g, tier="numpy")
    for i in range(3):
        with pytest.raises(TypeError):
            d.grad(_x(i), w=1.0)
        assert _same(e.grad(_x(i), w=1.0), np.ones(4))


@pytest.mark.parametrize("tier", TIERS)
def test_a_partial_with_keyword_only_arguments(tier):
    import functools

    def make():
        def step(i):
            return (_x(i), np.ones((3, 4))), ({"scale": 1.0 + i} if i % 2 else {})
        return functools.partial(loss, l2=0.25), step, _nothing
    info = agree(make, tier)
    assert info["compiled_calls"] >= 2, info


# ---- pullbacks, stats and explain ---------------------------------------------------------------------


@pytest.mark.parametrize("tier", TIERS)
def test_a_pullback_with_keywords_agrees(tier):
    """Pullbacks take keywords on the general path (no pullback program serves them yet)."""
    fast = bytegrad.differentiate(loss, tier=tier)
    general = bytegrad.differentiate(loss, tier="general")
    for i in range(4):
        (a, back_a), (b, back_b) = (d.pullback(_x(i), np.ones((3, 4)), l2=0.1 * i) for d in (fast, general))
        assert _same(a, b) and _same(back_a(2.0), back_b(2.0))


def _stats_loss(w, x, *, l2=1e-3, scale=1.0):
    return np.sum(np.tanh(x @ w)) * scale + l2 * np.sum(w * w)


def test_stats_and_explain_name_the_keyword_inputs():
    d = bytegrad.differentiate(_stats_loss, tier="numpy")
    for i in range(3):
        d.grad(_x(i), np.ones((3, 4)), l2=0.1 * i)
    info = d.stats()["compiled"]
    (prog,) = info["programs"]
    assert prog["keywords"] == ["l2"] and prog["guards"][0].startswith("2 positional arguments, then the keyword-only l2")
    assert info["compiled_calls"] == 3 and info["general_calls"] == 0, info
    # a second `grad` of the same function shares its programs (as those of positional calls are shared)
    other = bytegrad.differentiate(_stats_loss, tier="numpy")
    other.grad(_x(5), np.ones((3, 4)), l2=2.0)
    assert other.stats()["compiled"]["programs"][0]["calls"] == prog["calls"] + 1
    text = bytegrad.explain(d, _x(0), np.ones((3, 4)))
    assert "program for calls with keywords l2: numpy back end" in text and "l2: float" in text, text


def test_a_function_called_only_with_keywords_compiles_under_the_default_tier_in_a_fresh_process():
    """Under `auto` the first gradient does not load the compiled tier (bytegrad/_lazy_tiers.py): the
    second, with keywords, makes the record, and the calls after the warm-up run a program."""
    import os
    import subprocess
    import sys

    script = (
        "import sys, numpy as np, bytegrad\n"
        "def loss(w, *, l2=1e-3):\n"
        "    return np.sum(np.sin(w)) + l2 * np.sum(w * w)\n"
        "d = bytegrad.differentiate(loss)\n"
        "for i in range(6):\n"
        "    g = d.grad(np.ones(3), l2=0.1 * i)\n"
        "    assert np.allclose(g, np.cos(np.ones(3)) + 0.2 * i), (i, g)\n"
        "    if i == 0: assert 'bytegrad.compiled.policy' not in sys.modules\n"
        "print(d.stats()['compiled']['compiled_calls'])\n")
    env = {**os.environ, "BYTEGRAD_TIER": "auto"}
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=root, env=env,
                         check=True)
    assert int(out.stdout.split()[-1]) >= 2, out.stdout
