"""What `bytegrad.checkpoint` saves and costs: peak memory and time per gradient, with and without it.

    python -m bench.checkpoint            # writes bench/results/checkpoint.{md,json}
    python -m bench.checkpoint --batches 3 --out /tmp/ck   # quicker, elsewhere

Cases: a 2,000-step time-stepping loop on array[1000] (`x = x + dt * np.sin(x) * w`, then
`np.sum(x ** 2)`, gradient with respect to x and w) without checkpointing, with each step
checkpointed, and with sqrt(N)-sized blocks of steps checkpointed (and each step inside them);
and the MLP of bench/cases.py (784-256-256-10, tanh, softmax cross-entropy, batch 128) without
and with each layer checkpointed. Every gradient runs on the general path
(`differentiate(f, tier="general")`): a compiled program would keep every value, and the capture
of one refuses checkpointed calls anyway. Peak memory is tracemalloc's peak during one gradient
(NumPy reports its buffers to tracemalloc), measured after warm-up gradients; time is the median
over `--batches` batches, the variants of a case interleaved, tracemalloc off, one BLAS thread.
Each checkpointed gradient is compared with the plain one.
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import json
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any, Callable

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import bytegrad
from bench import harness
from bench.cases import mlp_inputs, mlp_loss
from bytegrad import checkpoint

STEPS = 2000
SIZE = 1000
BLOCK = 45  # about sqrt(STEPS)
DT = 0.001
WARM_UP = 5


def step(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    return x + DT * np.sin(x) * w


step_checkpointed = checkpoint(step)


def loop_plain(x: np.ndarray, w: np.ndarray) -> Any:
    for _ in range(STEPS):
        x = step(x, w)
    return np.sum(x ** 2)


def loop_steps(x: np.ndarray, w: np.ndarray) -> Any:
    for _ in range(STEPS):
        x = step_checkpointed(x, w)
    return np.sum(x ** 2)


@checkpoint
def block(x: np.ndarray, w: np.ndarray, n: int) -> np.ndarray:
    for _ in range(n):
        x = step_checkpointed(x, w)
    return x


def loop_blocks(x: np.ndarray, w: np.ndarray) -> Any:
    done = 0
    while done < STEPS:
        n = min(BLOCK, STEPS - done)
        x = block(x, w, n)
        done += n
    return np.sum(x ** 2)


@checkpoint
def dense_tanh(W: np.ndarray, b: np.ndarray, h: np.ndarray) -> np.ndarray:
    return np.tanh(W @ h + b[:, None])


@checkpoint
def log_softmax_layer(W: np.ndarray, b: np.ndarray, h: np.ndarray) -> np.ndarray:
    z = W @ h + b[:, None]
    z = z - np.max(z, axis=0, keepdims=True)
    return z - np.log(np.sum(np.exp(z), axis=0, keepdims=True))


def mlp_loss_checkpointed(params: dict, x: np.ndarray, y: np.ndarray) -> Any:
    """bench/cases.py's mlp_loss with each layer checkpointed."""
    h1 = dense_tanh(params["W1"], params["b1"], x)
    h2 = dense_tanh(params["W2"], params["b2"], h1)
    logp = log_softmax_layer(params["W3"], params["b3"], h2)
    return -np.sum(y * logp) / x.shape[1]


def peak(fn: Callable[..., Any], args: tuple, wrt: Any) -> tuple[Any, Any, int]:
    """(the differentiated function, its gradient, the peak traced bytes of one gradient), after
    warm-up gradients."""
    d = bytegrad.differentiate(fn, wrt=wrt, tier="general")
    for _ in range(WARM_UP):  # rewrites, caches, and fused sites settled on their tier
        grad = d.grad(*args)
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        d.grad(*args)
        return d, grad, tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


def cases() -> list[tuple[str, str, Callable[..., Any], Callable[..., Any], tuple, Any]]:
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal(SIZE), rng.standard_normal(SIZE)
    params, (xb, yb) = mlp_inputs()(np.random.default_rng(0))
    loop = f"{STEPS}-step loop, x: array[{SIZE}], grad wrt (x, w)"
    mlp = "MLP 784-256-256-10, batch 128, grad wrt params"
    return [
        (loop, "no checkpoint", loop_plain, loop_plain, (x, w), (0, 1)),
        (loop, "each step checkpointed", loop_steps, loop_plain, (x, w), (0, 1)),
        (loop, f"blocks of {BLOCK} steps checkpointed (and each step in them)", loop_blocks, loop_plain,
         (x, w), (0, 1)),
        (mlp, "no checkpoint", mlp_loss, mlp_loss, (params, xb, yb), 0),
        (mlp, "each layer checkpointed", mlp_loss_checkpointed, mlp_loss, (params, xb, yb), 0),
    ]


def max_relative_difference(a: Any, b: Any) -> float:
    worst = 0.0
    for u, v in zip(harness.leaves(a), harness.leaves(b)):
        scale = max(float(np.max(np.abs(u))), 1e-300)
        worst = max(worst, float(np.max(np.abs(u - v))) / scale)
    return worst


def run(batches: int, batch_s: float) -> list[dict[str, Any]]:
    """Each case's variants: peak memory one by one, then times interleaved (harness.time_interleaved:
    rounds of one batch each, the order rotating), so that a busy moment of this shared machine
    falls on all of them alike."""
    rows = []
    groups: dict[str, list] = {}
    for case, variant, fn, reference, args, wrt in cases():
        groups.setdefault(case, []).append((variant, fn, reference, args, wrt))
    for case, variants in groups.items():
        measured = {}
        for variant, fn, reference, args, wrt in variants:
            measured[variant] = peak(fn, args, wrt) + (args, fn is reference)
        fns = {v: functools.partial(m[0].grad, *m[3]) for v, m in measured.items()}
        timings = harness.time_interleaved(fns, batches=batches, batch_s=batch_s, pause_s=0.05)
        plain = next(v for v, m in measured.items() if m[4])
        for variant, (d, grad, peak_bytes, args, _) in measured.items():
            row = {"case": case, "variant": variant, "peak_bytes": peak_bytes, "time_s": timings[variant].median,
                   "times_s": timings[variant].per_call,
                   "memory_ratio": peak_bytes / measured[plain][2],
                   "time_ratio": timings[variant].median / timings[plain].median,
                   "max_rel_diff": max_relative_difference(measured[plain][1], grad)}
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "times_s"}), flush=True)
    return rows


def report(rows: list[dict[str, Any]], info: dict[str, Any], batches: int) -> str:
    table = harness.markdown_table(
        ["case", "variant", "peak memory", "vs plain", "time per gradient", "vs plain", "gradient vs plain"],
        [(r["case"], r["variant"], f"{r['peak_bytes'] / 2**20:.2f} MiB", f"{r['memory_ratio']:.3f}x",
          harness.format_time(r["time_s"]), f"{r['time_ratio']:.2f}x",
          "same" if r["max_rel_diff"] == 0 else f"{r['max_rel_diff']:.1e} rel.") for r in rows])
    lines = [
        "# Checkpointing: peak memory and time per gradient",
        "",
        f"Produced by `python -m bench.checkpoint` (`make bench-checkpoint`), {time.strftime('%Y-%m-%d')}. "
        "Every gradient runs on the general path (`bytegrad.differentiate(f, tier=\"general\")`): a "
        f"compiled program keeps every value. Peak memory: tracemalloc's peak during one gradient (after {WARM_UP} "
        "warm-up gradients, which settle the fused sites on their tier; NumPy reports its buffers to "
        "tracemalloc), above what was allocated before it. "
        f"Time per gradient: median of {batches} batches, the variants of a case interleaved (the order "
        "rotating), tracemalloc off, one BLAS thread (threadpoolctl). \"gradient vs plain\": the largest "
        "difference from the gradient without checkpointing, relative to the largest entry of each leaf.",
        "",
        table,
        "",
        "Without checkpointing the tape keeps what each step's reverse step reads: several arrays of "
        "8 KB per step (the fused site `x + dt * np.sin(x) * w` keeps its output and its partials), so "
        "the peak grows with the number of steps. With each step checkpointed the tape keeps each "
        "step's output only (16 MB for 2,000 steps), and the reverse pass recomputes the step; with "
        "blocks of about sqrt(N) steps checkpointed it keeps the blocks' outputs, and while one block "
        "is recomputed, that block's steps' outputs. The time is about one more forward pass (the call "
        "is recorded, then collapsed, and recorded again in the reverse pass), and one more again for "
        "blocks, whose steps are rerun once for the block and once each. The MLP has nothing to gain: "
        "its tape holds little beyond the layers' outputs (the fused `tanh(W @ h + b)` sites keep only "
        "their outputs), which checkpointing keeps too, and recomputing a layer during the reverse "
        "pass holds its temporaries beside the cotangents: a higher peak and a slower gradient. "
        "Checkpoint where intermediates outnumber the values passed between calls.",
        "",
        "## Machine",
        "",
        *harness.describe_machine(info),
        "",
    ]
    return "\n".join(lines)


def _one_blas_thread() -> Any:
    """One BLAS thread (threadpoolctl, when installed): two threads on a machine others share make
    the MLP's matmuls vary tenfold from one gradient to the next."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return contextlib.nullcontext()
    return threadpool_limits(limits=1, user_api="blas")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=9, help="timed batches per variant (median)")
    parser.add_argument("--batch-s", type=float, default=0.3, help="seconds per batch (calibrated)")
    parser.add_argument("--out", type=Path, default=harness.REPO / "bench" / "results",
                        help="folder for checkpoint.md and checkpoint.json")
    ns = parser.parse_args(argv)
    with _one_blas_thread():
        rows = run(ns.batches, ns.batch_s)
    info = harness.machine_info()
    harness.write_json(ns.out / "checkpoint.json", {"machine": info, "batches": ns.batches, "rows": rows})
    harness.write_atomic(ns.out / "checkpoint.md", report(rows, info, ns.batches))
    print(f"wrote {ns.out / 'checkpoint.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
