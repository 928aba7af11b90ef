"""The hot-path report (issue 5): fused kernels, precompile and time to first gradient, in one run.

    python -m bench.hotpath            # `make bench-hotpath`; writes bench/results/hotpath.md/.json

1. Steady state (bench.core, reverse direction): Dense(n => n) for n = 2, 20, 200, 2000 in float64
   and float32, the MLP, and a ten-operation elementwise expression (with a hand-fused Numba
   reference), for hand-written NumPy, bytegrad (after its sites tiered up), bytegrad with
   BYTEGRAD_DISABLE_NUMBA=1, and the peers installed.
2. Time to first gradient and cold start to 200 trained steps (bench.ttfg, fresh processes).
3. Compiling a site's kernels in the calling thread or in a background thread: the wall time of
   fresh processes whose fused site tiers up (BYTEGRAD_COMPILE=sync|background).
4. Peak traced memory (tracemalloc) of one Dense(200) gradient, in fresh processes.
5. What `import bytegrad` adds to `import numpy`: median of 10 fresh processes.
Each part writes its own files under bench/results/; hotpath.md gathers them with the targets.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Optional

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import harness

REPO = harness.REPO
RESULTS = Path(__file__).resolve().parent / "results"
STEADY_CASES = ["dense2", "dense2f32", "dense20", "dense20f32", "dense200", "dense200f32", "dense2000",
                "dense2000f32", "mlp", "mlpf32", "elem10"]
STEADY_SYSTEMS = ["numpy (hand-written)", "bytegrad", "bytegrad (no numba)", "numba (hand-fused)", "jax-jit", "torch"]
TARGETS = [
    ("Dense(2), Dense(20) steady state, float64 and float32", "<= 1.00x NumPy"),
    ("Dense(200), Dense(2000) steady state, float64 and float32", "<= 1.05x NumPy"),
    ("MLP steady state", "<= 1.05x NumPy"),
    ("elementwise 10 ops, length 1000", "<= 0.80x NumPy, and <= 1.2x hand-fused Numba"),
    ("MLP time to first gradient (import + first gradient), empty cache", "<= 1.4x NumPy"),
    ("the same, rewrite cache warm", "<= 1.1x NumPy"),
    ("200 MLP steps from a cold start, empty cache", "<= 1.1x NumPy"),
    ("the same, after precompile", "<= 1.05x NumPy"),
    ("peak traced memory of one Dense(200) gradient", "<= NumPy's"),
    ("import bytegrad on top of import numpy", "<= 60 ms"),
]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    return env


def _py(code: str, env: dict[str, str]) -> str:
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr.strip().splitlines()[-1])
    return proc.stdout.strip().splitlines()[-1]


_MEMORY = """
import json, tracemalloc, numpy as np, sys
from bench import cases
case = next(c for c in cases.CASES if c.key == "dense200")
params, data = case.inputs(np.random.default_rng(0))
system = sys.argv[1] if len(sys.argv) > 1 else "{system}"
if system == "bytegrad":
    import bytegrad
    f = bytegrad.differentiate(case.loss)
    bytegrad.precompile(f, params, *data)
    for _ in range(20):
        f.grad(params, *data)
    fn = lambda: f.grad(params, *data)
else:
    fn = lambda: case.grad(params, *data)
    fn()
tracemalloc.start()
fn()
print(json.dumps(tracemalloc.get_traced_memory()[1]))
"""


def memory(runs: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for system in ("numpy (hand-written)", "bytegrad"):
        peaks = [int(_py(_MEMORY.replace("{system}", system), _env())) for _ in range(runs)]
        out[system] = statistics.median(peaks)
    return out


def import_overhead(runs: int) -> dict[str, Any]:
    env = _env()
    code = "import time; t=time.perf_counter(); import numpy; t1=time.perf_counter(); {lib}t2=time.perf_counter(); " \
           "import sys; print((t1-t)*1e3, (t2-t1)*1e3, 'numba' in sys.modules)"
    _py(code.format(lib="import bytegrad; "), env)  # .pyc files
    base, added, numba_loaded = [], [], False
    for _ in range(runs):
        a, b, n = _py(code.format(lib="import bytegrad; "), env).split()
        base.append(float(a))
        added.append(float(b))
        numba_loaded = numba_loaded or n == "True"
    return {"import_numpy_ms": statistics.median(base), "import_bytegrad_ms": statistics.median(added),
            "numba_imported": numba_loaded, "runs": runs}


_COMPILE_CHILD = """
import time
t0 = time.perf_counter()
import json, sys
import numpy as np
import bytegrad
from bench import cases
case = next(c for c in cases.CASES if c.key == "elem10")
x, data = case.inputs(np.random.default_rng(0))
g = bytegrad.differentiate(case.loss)
for _ in range({steps}):
    g.grad(x, *data)
site = g.stats()["fused_sites"][0]
print(json.dumps([time.perf_counter() - t0, site["numpy_calls"], site["kernel_calls"]]))
"""


def compile_thread(runs: int, steps: int = 20_000) -> dict[str, Any]:
    """Wall time of a fresh process running `steps` gradients of the elementwise case, whose fused
    site tiers up on the way, with its kernels compiled in the calling thread (sync) or in a
    background thread, from an empty cache and from a cache holding the kernels (median of `runs`)."""
    out: dict[str, Any] = {"steps": steps, "runs": runs}
    code = _COMPILE_CHILD.replace("{steps}", str(steps))
    fill = _COMPILE_CHILD.replace("{steps}", "1") + "bytegrad.precompile(g, x)\n"  # kernels on disk
    for cache_state in ("empty", "kernels on disk"):
        for mode in ("sync", "background"):
            walls, calls = [], None
            for _ in range(runs):
                with tempfile.TemporaryDirectory(prefix="bytegrad-compile-") as cache:
                    env = _env()
                    env["BYTEGRAD_CACHE_DIR"] = cache
                    if cache_state != "empty":
                        _py(fill, env)
                    env["BYTEGRAD_COMPILE"] = mode
                    wall, n_numpy, n_kernel = json.loads(_py(code, env))
                    walls.append(wall)
                    calls = (n_numpy, n_kernel)
            out[f"{cache_state}, {mode}"] = {"wall_s": statistics.median(walls), "numpy_calls": calls[0],
                                             "kernel_calls": calls[1]}
    return out


def _compile_markdown(res: dict[str, Any]) -> list[str]:
    rows = []
    for key, v in res.items():
        if isinstance(v, dict):
            rows.append([key, f"{v['wall_s']:.2f} s", str(v["numpy_calls"]), str(v["kernel_calls"])])
    return [f"A fresh process runs {res['steps']} gradients of the elementwise case (its fused site "
            "tiers up on the way); wall time from the first line of the script, median of "
            f"{res['runs']} processes. `BYTEGRAD_COMPILE=sync` compiles in the calling thread when the "
            "site tiers up; `background` compiles in a thread while the site keeps running on NumPy.", "",
            harness.markdown_table(["cache, compile mode", "wall", "NumPy-tier calls", "kernel calls"], rows)]


def _verdicts(out: Path, mem: dict[str, Any], imp: dict[str, Any]) -> list[list[str]]:
    """Each target of issue 5 against what this run's files hold: (what, target, measured, verdict)."""
    rows: list[list[str]] = []

    def row(what: str, target: float, value: Optional[float], unit: str = "x") -> None:
        if value is None:
            rows.append([what, f"<= {target:g}{unit}", "not measured", "-"])
            return
        shown = f"{value:.2f}{unit}" if unit == "x" else f"{value:.1f} {unit}"
        rows.append([what, f"<= {target:g}{'x' if unit == 'x' else ' ' + unit}", shown,
                     "met" if value <= target else "MISSED"])

    steady: dict[tuple[str, str], float] = {}
    try:
        for r in json.loads((out / "hotpath-steady.json").read_text())["results"]:
            if r.get("status") == "ok" and r.get("median_s"):
                steady[(r["case"], r["system"])] = r["median_s"]  # float32 variants: "dense2f32"...
    except (OSError, ValueError, KeyError):
        pass

    def ratio(case: str, system: str = "bytegrad", to: str = "numpy (hand-written)") -> Optional[float]:
        a, b = steady.get((case, system)), steady.get((case, to))
        return a / b if a and b else None

    for n, target in (("2", 1.0), ("20", 1.0), ("200", 1.05), ("2000", 1.05)):
        row(f"Dense({n}) steady state, float64", target, ratio(f"dense{n}"))
        row(f"Dense({n}) steady state, float32", target, ratio(f"dense{n}f32"))
    row("MLP steady state, float64", 1.05, ratio("mlp"))
    row("MLP steady state, float32 (not an issue target; for reference)", 1.05, ratio("mlpf32"))
    row("elementwise 10 ops, to NumPy", 0.8, ratio("elem10"))
    row("elementwise 10 ops, to hand-fused Numba", 1.2, ratio("elem10", to="numba (hand-fused)"))
    try:
        ttfg = json.loads((out / "ttfg.json").read_text())
        first = {c["name"]: sum(c[k] or 0.0 for k in ("import_numpy_s", "import_library_s", "setup_s", "first_s"))
                 for c in ttfg["configurations"] if c.get("first_s")}
        train = {t["name"]: t["wall_s"] for t in ttfg["train"] if t.get("wall_s")}
    except (OSError, ValueError, KeyError):
        first, train = {}, {}
    base, tbase = first.get("numpy (hand-written)"), train.get("numpy (hand-written)")
    for name, label, target in (("bytegrad, empty cache", "empty cache", 1.4), ("bytegrad, warm cache", "warm cache", 1.1)):
        row(f"MLP time to first gradient, {label}", target, first[name] / base if base and name in first else None)
    for name, label, target in (("bytegrad", "empty cache", 1.1), ("bytegrad, after precompile", "after precompile", 1.05)):
        row(f"200 MLP steps from a cold start, {label}", target, train[name] / tbase if tbase and name in train else None)
    if mem.get("numpy (hand-written)"):
        row("peak traced memory of one Dense(200) gradient, to NumPy's", 1.0,
            mem["bytegrad"] / mem["numpy (hand-written)"])
    row("import bytegrad on top of import numpy", 60.0, imp.get("import_bytegrad_ms"), "ms")
    return rows


def _section(path: Path, start: str) -> str:
    if not path.exists():
        return f"(missing: {path.name})"
    text = path.read_text()
    i = text.find(start)
    return text[i:] if i >= 0 else text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.hotpath", description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=7)
    parser.add_argument("--batch-seconds", type=float, default=0.1)
    parser.add_argument("--ttfg-runs", type=int, default=5)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--skip-steady", action="store_true")
    parser.add_argument("--skip-ttfg", action="store_true")
    parser.add_argument("--skip-compile", action="store_true", help="skip the background-compile comparison")
    args = parser.parse_args(argv)
    env = _env()
    with tempfile.TemporaryDirectory(prefix="bytegrad-hotpath-") as cache:
        env["BYTEGRAD_CACHE_DIR"] = cache  # the steady-state run starts from an empty cache too
        env["BYTEGRAD_BENCH_TIER_UP"] = "1"  # bytegrad timed after its sites tiered up (not in bench.ttfg)
        if not args.skip_steady:
            subprocess.run([sys.executable, "-m", "bench.core", "--full", "--name", "hotpath-steady",
                            "--directions", "reverse", "--batches", str(args.batches),
                            "--batch-seconds", str(args.batch_seconds), "--no-previous", "--out", str(args.out),
                            "--cases", *STEADY_CASES, "--systems", *STEADY_SYSTEMS], cwd=REPO, env=env, check=True)
    if not args.skip_ttfg:
        subprocess.run([sys.executable, "-m", "bench.ttfg", "--runs", str(args.ttfg_runs),
                        "--train-runs", str(args.ttfg_runs), "--out", str(args.out)], cwd=REPO, env=_env(), check=True)
    if not args.skip_compile:
        comp = compile_thread(args.ttfg_runs)
        harness.write_atomic(args.out / "hotpath-compile.md", "\n".join(_compile_markdown(comp)) + "\n")
        harness.write_json(args.out / "hotpath-compile.json", comp)
    mem = memory(3)
    imp = import_overhead(10)
    data = {"memory_peak_bytes": mem, "import": imp, "targets": TARGETS}
    harness.write_json(args.out / "hotpath.json", data)
    lines = ["# Hot paths: fused kernels, precompile, time to first gradient", "",
             "Produced by `make bench-hotpath` (`python -m bench.hotpath`). The targets of issue 5:", ""]
    lines += ["Each target against this run, from the files below (the timing noise of a shared 2-core machine moves ratios",
              "near a threshold from one run to the next: read a verdict within a few percent with care).", ""]
    lines.append(harness.markdown_table(["what", "target", "measured", "verdict"], _verdicts(args.out, mem, imp)))
    lines += ["", "## Steady state (reverse: the whole gradient call)", "",
              "bytegrad runs after `bytegrad.precompile` (its fused sites compiled), and each site then",
              "keeps, per size class, whichever of its kernel and the NumPy rules gave the faster gradients.", "",
              _section(args.out / "hotpath-steady.md", "## At a glance"), "",
              "## Time to first gradient and cold start to trained (fresh processes)", "",
              _section(args.out / "ttfg.md", "|"), "",
              "## Compiling in a background thread", "",
              _section(args.out / "hotpath-compile.md", "A fresh"), "",
              "## Memory: peak traced allocation of one Dense(200) gradient (tracemalloc, median of 3)", ""]
    lines.append(harness.markdown_table(["system", "peak"], [[k, f"{v / 2**20:.2f} MiB"] for k, v in mem.items()]))
    lines += ["", "## Import", "",
              f"`import numpy`: {imp['import_numpy_ms']:.1f} ms; `import bytegrad` on top of it: "
              f"{imp['import_bytegrad_ms']:.1f} ms (median of {imp['runs']} fresh processes, .pyc present); "
              f"Numba imported by `import bytegrad`: {'yes' if imp['numba_imported'] else 'no'}.", ""]
    harness.write_atomic(args.out / "hotpath.md", "\n".join(lines))
    print("\n".join(lines[-4:]))
    print(f"written: {args.out / 'hotpath.md'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
