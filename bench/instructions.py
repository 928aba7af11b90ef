"""Instructions per gradient, counted by Valgrind: each system's work per call, without a clock.

    python -m bench.instructions        # `make bench-instructions`; writes bench/results/instructions.md/.json

On these 2-core machines a wall-clock ratio moves by tens of percent from one minute to the next
(bench/results/hotpath.md quotes the same case at 0.87x and 1.19x), more than a change to the
per-operation machinery is worth. An instruction count hardly moves: `valgrind --tool=cachegrind
--cache-sim=no` counts every instruction a process executes (Ir), and with a fixed hash seed, one
BLAS thread and no disk cache the same program gives the same count to the instruction. (N, the
number of counted calls, comes from a native timing, and garbage collections fall a little
differently for another N: two runs of this report agree within about 1%.)

A system's count per call is the difference of two processes that do the same setup and the same
warm-up calls, one of them followed by N more calls, divided by N. Counted: the hand-written NumPy
gradient, bytegrad with `BYTEGRAD_DISABLE_NUMBA=1` (the per-operation tier: with Numba, a fused
site picks its tier by the clock, which Valgrind slows about fifty times, so its count would not
repeat) and autograd, when installed.

Instructions are not time: a cache miss costs more than an addition, and BLAS and SIMD loops do
more per instruction than the interpreter. Read the table as the work a system adds around the
same NumPy calls; the time ratios stay in core.md and hotpath.md. Needs `valgrind` on PATH.
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Optional

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import REPO
from bench.ttfg import child_env

RESULTS = Path(__file__).resolve().parent / "results"
DEFAULT_CASES = ["sum4", "dense2", "dense20", "dense200", "mlp", "elem10", "sin100", "loop50"]
SYSTEMS = ["numpy (hand-written)", "bytegrad (general)", "bytegrad (numpy program)", "autograd"]
REFERENCE = SYSTEMS[0]
WARMUP = 20
#: each counted run does about this many seconds of the system's own calls (natively)
TARGET_S = 0.2
MAX_CALLS = 2000
MIN_CALLS = 5
#: what makes a count repeat exactly: hash seed, one BLAS thread, no cache shared between runs
ENV = {"PYTHONHASHSEED": "0", "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
       "BYTEGRAD_DISABLE_NUMBA": "1", "BYTEGRAD_DISABLE_DISK_CACHE": "1"}
_IR = re.compile(r"I\s+refs:\s+([\d,]+)")


def sum4_loss(x):
    return np.sum(x)


def sum4_grad(x):
    return np.ones_like(x)


def _sum4_inputs(rng: Any) -> Any:
    return rng.standard_normal(4), ()


def where_loss(x):
    return np.sum(np.where(x >= 0, x, np.sqrt(-x)) * np.tanh(x))


def where_grad(x):
    with np.errstate(invalid="ignore", divide="ignore"):
        branch = np.where(x >= 0, 1.0, -0.5 / np.sqrt(-x))
    return branch * np.tanh(x) + np.where(x >= 0, x, np.sqrt(np.abs(x))) * (1 - np.tanh(x) ** 2)


def _where_inputs(rng: Any) -> Any:
    return rng.standard_normal(1000), ()


def _extra_cases() -> dict[str, Any]:
    """Cases of this report only: `sum4` is a gradient's fixed cost (one operation, four elements)."""
    from bench.cases import Case

    return {"sum4": Case("sum4", "np.sum(x), x: array[4] (a gradient's fixed cost)", sum4_loss, sum4_grad,
                         _sum4_inputs),
            "where1000": Case("where1000", "np.sum(np.where(x >= 0, x, np.sqrt(-x)) * np.tanh(x)), x: array[1000]",
                              where_loss, where_grad, _where_inputs)}


def _case(key: str) -> Any:
    extra = _extra_cases()
    if key in extra:
        return extra[key]
    from bench import cases

    return cases.get_cases([key])[0]


# ---- the child: set up, warm up, call ------------------------------------------------------------


def child(config: dict[str, Any]) -> dict[str, Any]:
    """Prepare one system on one case, call it `warmup` times, then `calls` times (timed)."""
    from bench import systems

    case = _case(config["case"])
    params, data = case.inputs(np.random.default_rng(0))
    name = config["system"]
    if name == "bytegrad (no numba)":  # in this process: the environment already disables Numba
        prepare = systems.prepare_bytegrad
    else:  # "bytegrad (general)": the general path, per operation (no fusion: Numba is disabled)
        prepare = next(s for s in systems.SYSTEMS if s.name == name).prepare
    fn = prepare(case, params, data, "reverse")
    for _ in range(config["warmup"]):
        fn()
    t0 = time.perf_counter()
    for _ in range(config["calls"]):
        fn()
    return {"seconds": time.perf_counter() - t0}


def _child_command(config: dict[str, Any]) -> list[str]:
    return [sys.executable, "-m", "bench.instructions", "--child", json.dumps(config)]


def _native_seconds(case: str, system: str) -> float:
    """Seconds per call, natively: how many calls a counted run needs."""
    config = {"case": case, "system": system, "warmup": 3, "calls": 5}
    out = subprocess.run(_child_command(config), env=child_env(ENV), capture_output=True, text=True, check=True, cwd=REPO)
    return json.loads(out.stdout.strip().splitlines()[-1])["seconds"] / 5


def _count(case: str, system: str, calls: int) -> int:
    """Instructions executed by a child process that makes `calls` calls after the warm-up."""
    config = {"case": case, "system": system, "warmup": WARMUP, "calls": calls}
    cmd = ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null", *_child_command(config)]
    out = subprocess.run(cmd, env=child_env(ENV), capture_output=True, text=True, cwd=REPO)
    if out.returncode != 0:
        raise RuntimeError(f"{case} / {system}: the child failed:\n{out.stderr[-2000:]}")
    m = _IR.search(out.stderr)
    if m is None:
        raise RuntimeError(f"{case} / {system}: no instruction count in valgrind's output:\n{out.stderr[-2000:]}")
    return int(m.group(1).replace(",", ""))


def measure(case: str, system: str) -> dict[str, Any]:
    per_call = _native_seconds(case, system)
    calls = max(MIN_CALLS, min(MAX_CALLS, int(TARGET_S / max(per_call, 1e-9))))
    base = _count(case, system, 0)
    total = _count(case, system, calls)
    return {"case": case, "system": system, "calls": calls, "native_s": per_call,
            "base_ir": base, "total_ir": total, "ir_per_call": (total - base) / calls}


def _available(system: str) -> bool:
    import importlib.util

    module = {"autograd": "autograd"}.get(system, "bytegrad" if system.startswith("bytegrad") else None)
    return module is None or importlib.util.find_spec(module) is not None


# ---- the report ---------------------------------------------------------------------------------


def _fmt(ir: Optional[float]) -> str:
    if ir is None:
        return "n/a"
    return f"{ir / 1e6:.2f} M" if ir >= 1e6 else f"{ir / 1e3:.1f} k"


def markdown(rows: list[dict[str, Any]], systems: list[str], meta: dict[str, Any]) -> str:
    by = {(r["case"], r["system"]): r["ir_per_call"] for r in rows}
    cases = list(dict.fromkeys(r["case"] for r in rows))
    lines = [
        "# Instructions per gradient (Valgrind)",
        "",
        f"Produced by `python -m bench.instructions` ({meta['date']}, commit {meta['git']}); "
        f"{meta['valgrind']}, Python {meta['python']}, NumPy {meta['numpy']}. Each count: the instructions of "
        f"a process that makes N calls after {WARMUP} warm-up calls, minus those of the same process without "
        "the N calls, over N (PYTHONHASHSEED=0, one BLAS thread, no disk cache). bytegrad runs with "
        "BYTEGRAD_DISABLE_NUMBA=1: `bytegrad (general)` is its per-operation tier (the general path, "
        "`tier=\"general\"`), `bytegrad (numpy program)` the compiled program's NumPy back end "
        "(`tier=\"numpy\"`). Instructions are work, not time: see core.md, compiled.md and hotpath.md for "
        "time ratios, and this module's docstring for what the count leaves out.",
        "",
        "| case | " + " | ".join(systems) + " | bytegrad minus NumPy |",
        "|---|" + "---|" * (len(systems) + 1),
    ]
    for case in cases:
        ref = by.get((case, REFERENCE))
        cells = []
        for s in systems:
            v = by.get((case, s))
            ratio = f" ({v / ref:.2f}x)" if v is not None and ref and s != REFERENCE else ""
            cells.append(_fmt(v) + ratio)
        bg = by.get((case, "bytegrad (general)"))
        extra = _fmt(bg - ref) if bg is not None and ref is not None else "n/a"
        lines.append(f"| {_case(case).name} | " + " | ".join(cells) + f" | {extra} |")
    return "\n".join(lines) + "\n"


def _meta() -> dict[str, Any]:
    from bench import harness

    version = subprocess.run(["valgrind", "--version"], capture_output=True, text=True).stdout.strip()
    return {"date": time.strftime("%Y-%m-%d"), "git": harness._git_commit(), "valgrind": version,
            "python": sys.version.split()[0], "numpy": np.__version__}


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.instructions", description=__doc__.split("\n")[0])
    ap.add_argument("--cases", default=",".join(DEFAULT_CASES), help="comma-separated case keys")
    ap.add_argument("--systems", default=",".join(SYSTEMS), help="comma-separated system names")
    ap.add_argument("--out", default=str(RESULTS / "instructions"), help="output path without suffix")
    ap.add_argument("--jobs", type=int, default=2, help="valgrind runs at once")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return 0
    if shutil.which("valgrind") is None:
        print("bench.instructions needs valgrind on PATH (apt install valgrind)", file=sys.stderr)
        return 2
    cases = [c for c in args.cases.split(",") if c]
    systems = [s for s in args.systems.split(",") if s and _available(s)]
    jobs = [(c, s) for c in cases for s in systems]
    from tqdm import tqdm

    rows: list[dict[str, Any]] = []
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool, \
            tqdm(total=len(jobs), desc="valgrind", unit="count") as bar:
        for row in pool.map(lambda job: measure(*job), jobs):
            rows.append(row)
            bar.set_postfix_str(f"{row['case']}: {row['system']} {_fmt(row['ir_per_call'])}")
            bar.update()
    meta = _meta()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    text = markdown(rows, systems, meta)
    out.with_suffix(".md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
