"""Realistic programs (bench/realistic_programs.py): gradient time over the plain forward call.

For each program (issue 27: an ODE integrator with an inner right-hand side, an RNN, attention, a
model class with layers, a training step's loss over a list of layers), written as a user writes
it:

- the plain forward call (the function itself, no bytegrad);
- bytegrad's gradient under the default tier `auto` after its warm-up: calls until the tier-up
  meter has decided (the NumPy program moved to its Numba twin, or kept) or `--warmup-s` passed;
  then pinned to `numpy` and `numba`, and the general path for reference;
- which tier ran (`stats()["compiled"]`: each program's back end, the Numba note, or why the
  signature is not compiled);
- `jax.jit(jax.grad(...))` of the same code in `jax.numpy` (float64), timed at its best: in a fresh
  process that loads nothing else, calls inline (bench/systems.py `_jax_inline_dispatch`).

Every gradient is checked against the general path's (bytegrad's) and JAX's against it too. A
program a tier refuses or raises on is reported as such, never stops the run.

    python -m bench.realistic [--quick] [--out bench/results/realistic]

Timing: per system, calls are calibrated to batches of `--batch-s`, and the best of `--batches`
batch means per call is reported (the machine may be shared: the best batch is the least disturbed).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from typing import Any, Callable, Optional

import numpy as np

from bench.realistic_programs import PROGRAMS, Program

TIERS = ("auto", "numpy", "numba", "general")


def best_per_call(fn: Callable[[], Any], batch_s: float, batches: int) -> float:
    """The best of `batches` batch means (seconds per call), each batch about `batch_s` long."""
    fn()
    n, t = 1, 0.0
    while True:
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        t = time.perf_counter() - t0
        if t >= batch_s / 4 or n >= 1 << 20:
            break
        n *= 2
    n = max(1, int(n * batch_s / max(t, 1e-9)))
    best = float("inf")
    for _ in range(batches):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - t0) / n)
    return best


def _max_rel(a: Any, b: Any) -> float:
    """The largest difference between two gradient trees, relative to each array's largest element."""
    if isinstance(a, (list, tuple)):
        return max((_max_rel(x, y) for x, y in zip(a, b)), default=0.0)
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    scale = float(np.max(np.abs(y))) if y.size else 0.0
    return float(np.max(np.abs(x - y))) / scale if scale else float(np.max(np.abs(x - y)))


def _tier_state(d: Any) -> dict[str, Any]:
    c = d.stats().get("compiled")
    if c is None:
        return {"ran": "general (no compiled tier)"}
    progs = c.get("programs", [])
    if progs:
        ran = "+".join(p["backend"] for p in progs)
        return {"ran": ran, "numba": progs[0].get("numba", ""), "compiled_calls": c.get("compiled_calls"),
                "general_calls": c.get("general_calls")}
    why = "; ".join(c.get("not_compiled", {}).values())
    return {"ran": "general", "why": why, "general_calls": c.get("general_calls")}


def _warm(d: Any, args: tuple, tier: str, warmup_s: float) -> None:
    """Calls until the tier has settled: `auto`'s meter decided (or `warmup_s` passed); others, a few."""
    for _ in range(8):
        d.grad(*args)
    if tier != "auto":
        return
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < warmup_s:
        for _ in range(64):
            d.grad(*args)
        c = d.stats().get("compiled") or {}
        progs = c.get("programs", [])
        if not progs or not str(progs[0].get("numba", "")).startswith("not tried yet"):
            return


def run_bytegrad(p: Program, args: tuple, batch_s: float, batches: int, warmup_s: float) -> dict[str, Any]:
    import bytegrad

    row: dict[str, Any] = {"forward_s": best_per_call(lambda: p.loss(*args), batch_s, batches)}
    reference = None
    for tier in reversed(TIERS):  # the general path first: the reference of the others
        try:
            d = bytegrad.differentiate(p.loss, wrt=p.wrt, tier=tier)
            t0 = time.perf_counter()
            _warm(d, args, tier, warmup_s)
            warm = time.perf_counter() - t0
            g = d.grad(*args)
            if reference is None:
                reference = g
            seconds = best_per_call(lambda: d.grad(*args), batch_s, batches)
            row[tier] = {"grad_s": seconds, "ratio": seconds / row["forward_s"], "warmup_s": round(warm, 3),
                         "max_rel_diff": _max_rel(g, reference), **_tier_state(d)}
        except Exception as exc:  # noqa: BLE001 - a program a tier cannot take is a result, not a stop
            row[tier] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
    row["reference"] = reference
    return row


def run_jax(batch_s: float, batches: int, seed: int) -> dict[str, Any]:
    """Every program's jax.jit(jax.grad) and jax.jit forward, in this process (a fresh one: `--jax`)."""
    import jax

    jax.config.update("jax_enable_x64", True)
    from bench.systems import _jax_inline_dispatch

    _jax_inline_dispatch(jax)
    import jax.numpy as jnp

    out: dict[str, Any] = {"jax": jax.__version__}
    for p in PROGRAMS:
        if p.jax_loss is None:
            continue
        try:
            args = jax.tree_util.tree_map(jnp.asarray, p.inputs(np.random.default_rng(seed)))
            loss = p.jax_loss(jnp)
            grad = jax.jit(jax.grad(loss, argnums=p.wrt))
            fwd = jax.jit(loss)
            g = jax.block_until_ready(grad(*args))
            out[p.name] = {
                "grad_s": best_per_call(lambda: jax.block_until_ready(grad(*args)), batch_s, batches),
                "forward_jit_s": best_per_call(lambda: jax.block_until_ready(fwd(*args)), batch_s, batches),
                "grad": [np.asarray(leaf).tolist() for leaf in jax.tree_util.tree_leaves(g)]}
        except Exception as exc:  # noqa: BLE001
            out[p.name] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
    return out


def _jax_in_child(batch_s: float, batches: int, seed: int) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "bench.realistic", "--jax", "--batch-s", str(batch_s), "--batches", str(batches),
           "--seed", str(seed)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)
        return dict(json.loads(done.stdout.strip().splitlines()[-1]))
    except Exception as exc:  # noqa: BLE001 - JAX missing, or the child failed: reported
        return {"error": f"{type(exc).__name__}: {exc}"[:300]}


def _us(s: Optional[float]) -> str:
    return "-" if s is None else (f"{s * 1e6:,.0f} µs" if s >= 1e-4 else f"{s * 1e6:.1f} µs")


def report(rows: dict[str, Any], jx: dict[str, Any], meta: dict[str, Any]) -> str:
    lines = ["# Realistic programs: gradient time over the plain forward call", "",
             "`python -m bench.realistic` (bench/realistic.py, programs in bench/realistic_programs.py), "
             f"{meta['when']}, Python {meta['python']}, NumPy {meta['numpy']}, JAX {jx.get('jax', '-')}.", "",
             f"**Machine:** {meta['machine']}. {meta['load']}", "",
             "Each time is the best of the batch means (per call); the ratio is the gradient's time over the "
             "plain forward call (the issue's target: at most 3x). `auto` is the default tier after its warm-up "
             "(calls until its tier-up meter decided); `ran` is what `stats()[\"compiled\"]` says ran. JAX is "
             "`jax.jit(jax.grad(f))` of the same code in `jax.numpy`, float64, timed alone in a fresh process.",
             "", "| program | forward | auto | ratio | ran (auto) | numpy tier | ratio | numba tier | ratio | "
             "general | ratio | jax.jit(grad) | jax ratio (to NumPy forward) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    notes: list[str] = []
    for p in PROGRAMS:
        r = rows[p.name]
        cells = [p.name, _us(r["forward_s"])]
        for tier in TIERS:
            t = r.get(tier, {})
            if "error" in t:
                cells += ["error", "-"] + (["-"] if tier == "auto" else [])
                notes.append(f"- {p.name}, tier {tier}: {t['error']}")
                continue
            cells += [_us(t["grad_s"]), f"{t['ratio']:.1f}x"]
            if tier == "auto":
                cells.append(t["ran"])
            if t.get("why"):
                notes.append(f"- {p.name}, tier {tier}: general path, because {t['why']}")
            elif t.get("numba") and tier in ("auto", "numba"):
                notes.append(f"- {p.name}, tier {tier} ({t['ran']}): Numba: {t['numba']}")
        j = jx.get(p.name, {})
        if "grad_s" in j:
            cells += [_us(j["grad_s"]), f"{j['grad_s'] / r['forward_s']:.1f}x"]
            notes.append(f"- {p.name}, JAX: jit forward {_us(j['forward_jit_s'])}; gradient differs from "
                         f"bytegrad's by {j.get('max_rel_diff', float('nan')):.1e} (relative to each array's largest)")
        else:
            cells += ["-", "-"]
            if "error" in j:
                notes.append(f"- {p.name}, JAX: {j['error']}")
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Programs:", ""] + [f"- `{p.name}`: {p.what}" for p in PROGRAMS]
    lines += ["", "What ran, and why not more:", ""] + notes
    lines += ["", "Every tier's gradient agrees with the general path's: largest difference relative to each "
              "array's largest element, " + ", ".join(
                  f"{p.name} {max((rows[p.name].get(t, {}).get('max_rel_diff', 0.0) for t in TIERS)):.1e}"
                  for p in PROGRAMS) + ".", ""]
    return "\n".join(lines)


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="short batches and warm-up")
    ap.add_argument("--batch-s", type=float, default=0.05)
    ap.add_argument("--batches", type=int, default=7)
    ap.add_argument("--warmup-s", type=float, default=30.0, help="auto's warm-up, at most")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="bench/results/realistic")
    ap.add_argument("--jax", action="store_true", help=argparse.SUPPRESS)  # the child that times JAX
    ap.add_argument("--load", default="", help="a sentence on the machine's load, for the report")
    ap.add_argument("--before", default="", help="a .json of an earlier run (another commit): a section "
                    "comparing its ratios with this run's")
    a = ap.parse_args(argv)
    if a.quick:
        a.batch_s, a.batches, a.warmup_s = 0.02, 3, 10.0
    if a.jax:
        print(json.dumps(run_jax(a.batch_s, a.batches, a.seed)))
        return 0
    jx = _jax_in_child(a.batch_s, a.batches, a.seed)  # first: this process has not loaded Numba yet
    rows = {}
    for p in PROGRAMS:
        print(f"{p.name} ...", file=sys.stderr, flush=True)
        rows[p.name] = run_bytegrad(p, p.inputs(np.random.default_rng(a.seed)), a.batch_s, a.batches, a.warmup_s)
        j = jx.get(p.name, {})
        ref = rows[p.name].pop("reference")
        if "grad" in j and ref is not None:
            j["max_rel_diff"] = _max_rel([np.asarray(leaf) for leaf in j.pop("grad")], _leaves(ref))
    meta = {"when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "python": platform.python_version(),
            "numpy": np.__version__, "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
            f"load average {', '.join(f'{x:.1f}' for x in os.getloadavg())} at the end",
            "load": a.load or "Shared with other engineers' work while it ran: absolute times are noisy; "
            "ratios are measured in one process, close together in time."}
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    with open(a.out + ".json", "w") as f:
        json.dump({"meta": meta, "bytegrad": rows, "jax": jx}, f, indent=1, default=str)
    text = report(rows, jx, meta) + (compare(a.before, rows) if a.before else "")
    with open(a.out + ".md", "w") as f:
        f.write(text)
    print(text)
    return 0


def compare(before_path: str, rows: dict[str, Any]) -> str:
    """A markdown section: each program's gradient/forward ratio per tier in an earlier run and in this one."""
    with open(before_path) as f:
        before = json.load(f)
    lines = ["", f"## Before and after (the earlier run: {before_path}, {before['meta']['when']})", "",
             "| program | " + " | ".join(f"{t} before | {t} now" for t in TIERS[:3]) + " |",
             "|---|" + "---|" * 6]
    for p in PROGRAMS:
        old, new = before["bytegrad"].get(p.name, {}), rows[p.name]
        cells = []
        for t in TIERS[:3]:
            for r in (old, new):
                x = r.get(t, {})
                cells.append(f"{x['ratio']:.1f}x ({x['ran']})" if "ratio" in x else "-")
        lines.append(f"| {p.name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _leaves(tree: Any) -> list:
    """A gradient's arrays in order (lists and tuples flattened, as JAX's tree_leaves orders them)."""
    if isinstance(tree, (list, tuple)):
        return [leaf for t in tree for leaf in _leaves(t)]
    return [np.asarray(tree)]


if __name__ == "__main__":
    raise SystemExit(main())
