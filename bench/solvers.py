"""The gradient of an ODE parameter fit through `scipy.integrate.solve_ivp`: what bytegrad's
sensitivity rule costs against the alternatives, and how accurate each is.

    python -m bench.solvers                  # writes bench/results/solvers.{md,json}
    python -m bench.solvers --batches 3 --out /tmp/solvers

The model: Lotka-Volterra with four parameters (prey growth, predation, predator death, conversion),
observed at 21 times over [0, 10]; the loss is the mean squared error against data made from known
parameters plus noise. Variants, each giving the gradient of the loss with respect to the 4
parameters:

- `solve_ivp rule`: bytegrad through unchanged `solve_ivp` (RK45, rtol 1e-8, atol 1e-10), whose rule
  integrates the forward sensitivity equations (docs/solvers.md);
- `solve_ivp iterations`: bytegrad differentiating SciPy's own RK45 Python code step by step (the
  behaviour before the rule: a copy of the function object, which has no rule);
- `central differences`: 8 more solves with `solve_ivp` (step 1e-6 relative);
- `RK4 loop`: bytegrad through a hand-written fixed-step RK4 loop (1000 steps, about the accuracy of
  the adaptive solver here) written in NumPy.

Time is the median over `--batches` batches of a few gradients each, the variants interleaved; the
accuracy column is the largest relative difference from the rule's gradient.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import types
from pathlib import Path
from typing import Any, Callable

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import scipy.integrate as si  # noqa: E402

import bytegrad  # noqa: E402

T_OBS = np.linspace(0.0, 10.0, 21)
Y0 = np.array([10.0, 5.0])
TRUE = np.array([1.1, 0.4, 0.4, 0.1])
TOL = {"rtol": 1e-8, "atol": 1e-10}
RK4_STEPS = 1000


def lotka_volterra(t: float, y: np.ndarray, p: np.ndarray) -> np.ndarray:
    return np.array([p[0] * y[0] - p[1] * y[0] * y[1], -p[2] * y[1] + p[3] * y[0] * y[1]])


def observe(p: np.ndarray) -> np.ndarray:
    return si.solve_ivp(lotka_volterra, (0.0, 10.0), Y0, args=(p,), t_eval=T_OBS, **TOL).y


DATA = observe(TRUE) + 0.1 * np.random.default_rng(0).standard_normal((2, T_OBS.size))


def loss(p: np.ndarray) -> float:
    return np.mean((observe(p) - DATA) ** 2)


def rk4_loss(p: np.ndarray) -> float:
    """The same loss, the ODE integrated by a fixed-step RK4 loop (the observation times fall on steps)."""
    h = 10.0 / RK4_STEPS
    every = RK4_STEPS // (T_OBS.size - 1)
    y = Y0
    seen = [y]
    for k in range(RK4_STEPS):
        t = k * h
        k1 = lotka_volterra(t, y, p)
        k2 = lotka_volterra(t + h / 2, y + h / 2 * k1, p)
        k3 = lotka_volterra(t + h / 2, y + h / 2 * k2, p)
        k4 = lotka_volterra(t + h, y + h * k3, p)
        y = y + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        if (k + 1) % every == 0:
            seen.append(y)
    return np.mean((np.stack(seen, axis=1) - DATA) ** 2)


def central_differences(p: np.ndarray) -> np.ndarray:
    out = np.zeros_like(p)
    for i in range(p.size):
        h = 1e-6 * max(1.0, abs(p[i]))
        e = np.zeros_like(p)
        e[i] = h
        out[i] = (loss(p + e) - loss(p - e)) / (2 * h)
    return out


# a copy of solve_ivp's function object: no rule is registered for it, so bytegrad follows SciPy's
# own Python code (the behaviour before the rule)
_solve_ivp_code = types.FunctionType(si.solve_ivp.__code__, si.solve_ivp.__globals__, "solve_ivp",
                                     si.solve_ivp.__defaults__, si.solve_ivp.__closure__)
_solve_ivp_code.__kwdefaults__ = si.solve_ivp.__kwdefaults__


def loss_through_iterations(p: np.ndarray) -> float:
    y = _solve_ivp_code(lotka_volterra, (0.0, 10.0), Y0, args=(p,), t_eval=T_OBS, **TOL).y
    return np.mean((y - DATA) ** 2)


VARIANTS: dict[str, Callable[[np.ndarray], Any]] = {
    "solve_ivp rule": bytegrad.grad(loss),
    "solve_ivp iterations": bytegrad.grad(loss_through_iterations),
    "central differences": central_differences,
    "RK4 loop": bytegrad.grad(rk4_loss),
}


def run(batches: int, per_batch: int) -> dict[str, Any]:
    p = np.array([1.0, 0.35, 0.45, 0.12])
    reference = VARIANTS["solve_ivp rule"](p)
    grads = {name: np.asarray(fn(p)) for name, fn in VARIANTS.items()}  # (and warm-up)
    times: dict[str, list[float]] = {name: [] for name in VARIANTS}
    for _ in range(batches):
        for name, fn in VARIANTS.items():
            start = time.perf_counter()
            for _ in range(per_batch):
                fn(p)
            times[name].append((time.perf_counter() - start) / per_batch)
    rows = []
    base = float(np.median(times["solve_ivp rule"]))
    for name in VARIANTS:
        med = float(np.median(times[name]))
        err = float(np.max(np.abs(grads[name] - reference) / np.maximum(np.abs(reference), 1e-12)))
        rows.append({"variant": name, "seconds": med, "ratio": med / base, "max_rel_diff_from_rule": err,
                     "gradient": grads[name].tolist()})
    return {"rows": rows, "batches": batches, "per_batch": per_batch, "python": platform.python_version(),
            "load": os.getloadavg() if hasattr(os, "getloadavg") else None}


def render(result: dict[str, Any]) -> str:
    load = result["load"]
    lines = [
        "# Gradient of an ODE parameter fit through solve_ivp",
        "",
        "Written by `python -m bench.solvers`. Lotka-Volterra, 4 parameters, 21 observations over [0, 10], "
        "RK45 at rtol 1e-8 / atol 1e-10; the gradient of the mean squared error. Median of "
        f"{result['batches']} batches of {result['per_batch']} gradients, variants interleaved, Python "
        f"{result['python']}.",
        "",
        f"**The machine was loaded** (shared by several engineers; load average {load[0]:.1f}, {load[1]:.1f}, "
        f"{load[2]:.1f} over 1/5/15 minutes when the run ended): absolute times are unreliable, and the ratios, "
        "measured side by side, are what to read." if load else "**The machine was loaded**: read the ratios.",
        "",
        "| variant | seconds per gradient | vs the rule | largest relative difference from the rule |",
        "|---|---|---|---|",
    ]
    for r in result["rows"]:
        lines.append(f"| {r['variant']} | {r['seconds']:.4f} | {r['ratio']:.2f}x | {r['max_rel_diff_from_rule']:.1e} |")
    lines += [
        "",
        "The rule's gradient is the exact derivative of the solution up to the solver's tolerance; central "
        "differences agree to about their step's truncation and the solver's tolerance divided by the step; "
        "the RK4 loop differentiates a different discretisation (its difference is the two integrators' "
        "disagreement, not an error of either gradient).",
        "",
        "Reading: the rule costs about half of differentiating SciPy's own steps and a third of the RK4 loop, "
        "and its accuracy does not depend on the path the step control took. Against central differences "
        "it loses here: a 2-state right-hand side costs about a microsecond plain, and each evaluation of "
        "the sensitivity equations pays bytegrad's per-call overhead (one vjp and one pullback per state, "
        "some hundreds of microseconds) for 4 parameters that differences cover with 8 cheap solves. The "
        "balance should turn with an expensive right-hand side (bytegrad's overhead is then small beside it) "
        "or many parameters (differences cost 2 solves per parameter; the sensitivities' evaluations cost "
        "1 + n sweeps whatever their number, though more equations may need more steps): not measured here. "
        "Differences' accuracy is the solver's tolerance divided by their step.",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=5)
    parser.add_argument("--per-batch", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    args = parser.parse_args()
    result = run(args.batches, args.per_batch)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "solvers.json").write_text(json.dumps(result, indent=1) + "\n")
    (args.out / "solvers.md").write_text(render(result))
    print(render(result))


if __name__ == "__main__":
    main()
