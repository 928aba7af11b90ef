"""JAX's CPU dispatch, asynchronous (its default) or inline, on the small cases: the check behind
bench/results/jax-fairness.md.

    python -m bench.jax_dispatch                 # dense2 and loop50, 2 rounds of the 4 settings
    python -m bench.jax_dispatch --one dense2 inline   # one setting in this process (what each round runs)

Each setting runs in a fresh process that loads JAX and nothing else but the hand-written NumPy
reference; jax-jit's gradient and the reference are timed side by side (bench.harness, 5 batches
of 0.2 s after a 0.1 s pause), so each line is a ratio measured at one moment. Settings: `async`
(JAX's default), `inline` (`jax_cpu_enable_async_dispatch=False`, what the bench uses), `xla1`
(async, with XLA's Eigen pool off and one intra-op thread), `both` (inline and xla1).
"""
from __future__ import annotations

import argparse
import copy
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import harness

REPO = Path(__file__).resolve().parent.parent
SETTINGS = ("async", "inline", "xla1", "both")
XLA1 = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"


def one(case_key: str, setting: str) -> str:
    """Times jax-jit and hand-written NumPy on one case under one setting, in this process."""
    from bench.cases import CASES
    from bench.systems import SYSTEMS

    case = {c.key: c for c in CASES}[case_key]
    systems = {s.name: s for s in SYSTEMS}
    params, data = case.inputs(np.random.default_rng(0))
    fns = {name: systems[name].prepare(case, copy.deepcopy(params), copy.deepcopy(data), "reverse")
           for name in ("jax-jit", "numpy (hand-written)")}
    fns["jax-jit"]()
    t = harness.time_interleaved(fns, batches=5, batch_s=0.2, pause_s=0.1)
    jax, ref = t["jax-jit"].median, t["numpy (hand-written)"].median
    load = os.getloadavg()[0]
    return (f"| {case_key} | {setting} | {harness.format_time(jax)} | {harness.format_time(ref)} | "
            f"{harness.format_ratio(jax / ref)} | {load:.2f} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.jax_dispatch", description=__doc__.split("\n\n")[0])
    parser.add_argument("--one", nargs=2, metavar=("CASE", "SETTING"))
    parser.add_argument("--cases", nargs="+", default=["dense2", "loop50"])
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    if args.one:
        print(one(*args.one))
        return 0
    print("| case | JAX dispatch | jax-jit | hand-written NumPy | ratio | load (1 min) |\n|---|---|---|---|---|---|")
    for _ in range(args.rounds):
        for case in args.cases:
            for setting in SETTINGS:
                env = dict(os.environ, PYTHONPATH=str(REPO))
                env["BENCH_JAX_ASYNC_DISPATCH"] = "0" if setting in ("inline", "both") else "1"
                env["XLA_FLAGS"] = XLA1 if setting in ("xla1", "both") else env.get("XLA_FLAGS", "")
                out = subprocess.run([sys.executable, "-m", "bench.jax_dispatch", "--one", case, setting],
                                     cwd=REPO, env=env, capture_output=True, text=True, check=True)
                print(out.stdout.strip(), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
