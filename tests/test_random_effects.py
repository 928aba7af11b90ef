"""Random programs with side effects, compared call by call with the general path under every tier.

Each program interleaves differentiable steps with writes the caller can see: an item appended to a
list argument, a key set in a dict argument, an in-place update of an int array argument, a write
into a float buffer argument, draws from NumPy's global RNG, from a `Generator` argument and from
Python's `random`, and a counter in a helper function. The same calls run through a function pinned
to `numpy`, `numba` or `auto` and through the general path, each on fresh copies of the same
arguments and RNG seeds; every value, every gradient and every effect (the list, the dict, the
arrays written, the RNGs' next draws, the counter) must agree, call by call. A compiled program
may only run where it does everything the general path does; otherwise the signature must stay
on the general path.
"""
from __future__ import annotations

import random

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import bytegrad

PURE = ["h = np.sin(h) + 0.5 * h", "h = np.tanh(h * c)", "h = h * h * 0.3 + c", "h = np.exp(-h * h) + h",
        "h = h[::-1] * 1.5", "h = np.maximum(h, 0.1 * h)"]
EFFECTS = [
    "log.append(float(np.sum(h)))",
    "log.append(len(log))",
    "info['s'] = np.sum(h)",
    "info[len(info)] = 1",
    "counts += 1\n    h = h * (1.0 + 0.1 * counts[0])",
    "np.add.at(counts, [0, 0, 2], 1)",
    "np.copyto(buf, h * 0.5)\n    h = h + buf",
    "h = h + 0.01 * np.random.normal(size=h.shape)",
    "h = h * rng.uniform(0.9, 1.1)",
    "h = h + 0.01 * random.random()",
    "h = counted(h)",
    "if np.sum(h) > 0:\n        log.append(1.0)",
]
PRELUDE = """
import random
import numpy as np
CALLS = [0]
def counted(v):
    CALLS[0] += 1
    return v * 1.01
"""


NAMES = ("log", "info", "counts", "buf", "rng")


def used(steps: list[str]) -> tuple[str, ...]:
    """The effect arguments the steps use (a program takes only those, so that one without effects
    on its arguments is one a compiled program can run)."""
    text = "\n".join(steps)
    return tuple(n for n in NAMES if n + "." in text or n + "[" in text or n + ")" in text or n + "," in text
                 or f"({n}" in text or f" {n} " in text)


def build(steps: list[str]) -> str:
    lines = [f"def program({', '.join(('x', 'c') + used(steps))}):", "    h = x"]
    lines += ["    " + s for s in steps]
    lines.append("    return np.sum(h * np.linspace(0.5, 1.5, h.size))")
    return "\n".join(lines)


def _fresh_args(seed: int) -> tuple:
    r = np.random.default_rng(seed)
    return (r.uniform(-1.0, 1.0, 3), float(r.uniform(0.5, 1.5)), [], {}, np.zeros(3, dtype=np.int64),
            np.zeros(3), np.random.default_rng(seed + 1))


def _run(program, ns: dict, tier: str, seed: int, calls: int, names: tuple[str, ...]) -> list:
    fn = bytegrad.differentiate(program, tier=tier)
    every = _fresh_args(seed)
    args = every[:2] + tuple(every[2 + NAMES.index(n)] for n in names)
    np.random.seed(seed)
    random.seed(seed)
    ns["CALLS"][0] = 0
    seen = []
    for _ in range(calls):
        try:
            value, grad = fn.value_and_grad(*args)
            seen.append(("ok", float(value), np.asarray(grad).tolist()))
        except Exception as exc:  # noqa: BLE001 - an exception is part of the result, compared
            seen.append(("raised", type(exc).__name__))
        x, c, log, info, counts, buf, rng = every
        seen.append(("effects", list(log), dict(info), counts.tolist(), buf.tolist(), ns["CALLS"][0]))
    seen.append(("rngs", float(np.random.random()), float(every[6].random()), random.random()))
    return seen


def _same(a: object, b: object) -> bool:
    """Equal, floats within a few ulp (a Numba kernel may round differently from NumPy's loops)."""
    if isinstance(a, float) and isinstance(b, float):
        return a == b or abs(a - b) <= 1e-12 * max(1.0, abs(a), abs(b))
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    return a == b


step = st.one_of(st.sampled_from(PURE), st.sampled_from(EFFECTS))


@settings(deadline=None, max_examples=12, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(step, min_size=1, max_size=5), st.integers(0, 2**16), st.sampled_from(["numpy", "numba", "auto"]))
def test_random_programs_with_effects_match_the_general_path_call_by_call(steps, seed, tier):
    ns: dict = {}
    exec(compile(PRELUDE + build(steps), "<random program with effects>", "exec"), ns)  # noqa: S102
    program = ns["program"]
    names = used(steps)
    want = _run(program, ns, "general", seed, 4, names)
    got = _run(program, ns, tier, seed, 4, names)
    for k, (g, w) in enumerate(zip(got, want)):
        assert _same(g, w), f"{tier}, item {k}: {g} != general's {w}\n{build(steps)}"


def test_the_comparison_runs_compiled_programs():
    """A program without effects on its arguments is compiled under each tier (so the random test
    above compares compiled programs, not the general path with itself), and one with effects is not."""
    for steps, compiles in ((["h = np.sin(h) + 0.5 * h", "h = np.tanh(h * c)"], True),
                            (["h = np.sin(h) + 0.5 * h", "log.append(float(np.sum(h)))"], False)):
        ns: dict = {}
        exec(compile(PRELUDE + build(steps), "<program>", "exec"), ns)  # noqa: S102
        names = used(steps)
        for tier in ("numpy", "numba"):
            assert _run(ns["program"], ns, tier, 5, 3, names) == _run(ns["program"], ns, "general", 5, 3, names) \
                or tier == "numba"
            fn = bytegrad.differentiate(ns["program"], tier=tier)
            every = _fresh_args(5)
            args = every[:2] + tuple(every[2 + NAMES.index(n)] for n in names)
            for _ in range(3):
                fn.grad(*args)
            assert (fn.stats()["compiled"]["compiled_calls"] > 0) == compiles, (tier, steps, fn.stats()["compiled"])
