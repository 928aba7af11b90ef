"""Time to first gradient: the MLP case (784-256-256-10, tanh + softmax-CE, batch 128) in fresh processes.

    python -m bench.ttfg              # 5 timed runs per configuration (median), after 1 priming run
    python -m bench.ttfg --runs 3     # fewer

For each configuration, fresh Python processes (`python -m bench.ttfg_child`) report: import
time (`import numpy`, then the library), setup (building the gradient function, converting the
data), the first gradient call, the second, and the process's peak RSS; the parent measures the
process wall time (interpreter start to exit). The peak memory traced by tracemalloc during the
first gradient call is measured in separate processes (tracemalloc slows the call it traces).
bytegrad runs with an empty cache (a fresh `BYTEGRAD_CACHE_DIR` per process), a warm one (a
cache directory kept from the priming run), and after `bytegrad.precompile` when that exists.
Then: the wall time of a fresh process that imports everything and runs 200 SGD steps of the
same MLP, for the systems whose gradient works on NumPy parameters updated in place.

The children run without PYTHONDONTWRITEBYTECODE (which some machines set), as a user's Python
does: the priming run writes the .pyc files that the timed runs then load. Writes
bench/results/ttfg.md and ttfg.json.
"""
from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import harness

REPO = harness.REPO
RESULTS = Path(__file__).resolve().parent / "results"


@dataclass
class Config:
    name: str
    system: str | None                        # a bench.systems name; None: `python -c pass`
    module: str | None = None                 # what must be importable for it to run
    env: dict[str, str] = field(default_factory=dict)
    cache: str | None = None                  # bytegrad: "empty", "warm" or "precompiled"
    not_run: str | None = None                # why it is shown but not run


def configs(precompile_available: bool) -> list[Config]:
    nn = {"BYTEGRAD_DISABLE_NUMBA": "1"}
    return [
        Config("python -c pass", None),
        Config("numpy (hand-written)", "numpy (hand-written)"),
        Config("bytegrad, empty cache", "bytegrad", "bytegrad", cache="empty"),
        Config("bytegrad, warm cache", "bytegrad", "bytegrad", cache="warm"),
        Config("bytegrad, after precompile", "bytegrad", "bytegrad", cache="precompiled",
               not_run=None if precompile_available else "n/a (precompile not implemented yet)"),
        Config("bytegrad, BYTEGRAD_DISABLE_NUMBA=1, empty cache", "bytegrad", "bytegrad", env=nn, cache="empty"),
        Config("autograd", "autograd", "autograd"),
        Config("jax-jit (no persistent compilation cache)", "jax-jit", "jax"),
        Config("torch", "torch", "torch"),
    ]


TRAIN_SYSTEMS = ("numpy (hand-written)", "bytegrad", "bytegrad, after precompile", "autograd")


# ------------------------------------------------------------------------------- processes
def child_env(extra: dict[str, str]) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)   # users' Pythons write and reuse .pyc files
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    env.update(extra)
    return env


def run_child(config: dict[str, Any], env: dict[str, str], timeout: float = 600) -> dict[str, Any]:
    """Runs one child; returns its JSON line plus `wall_s` (start to exit, measured here)."""
    if config["mode"] == "pass":
        cmd = [sys.executable, "-c", "pass"]
    else:
        cmd = [sys.executable, "-m", "bench.ttfg_child", json.dumps(config)]
    t = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-15:])
        return {"error": f"exit status {proc.returncode}", "stderr": tail, "wall_s": wall}
    result = json.loads(proc.stdout.strip().splitlines()[-1]) if config["mode"] != "pass" else {}
    result["wall_s"] = wall
    return result


class CacheDirs:
    """BYTEGRAD_CACHE_DIR per configuration: a new one per process (empty), or one kept (warm)."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="bytegrad-ttfg-"))
        self.kept: dict[str, Path] = {}

    def for_run(self, cfg: Config) -> dict[str, str]:
        if cfg.cache is None:
            return {}
        if cfg.cache == "empty":
            return {"BYTEGRAD_CACHE_DIR": tempfile.mkdtemp(dir=self.root)}
        path = self.kept.setdefault(cfg.name, Path(tempfile.mkdtemp(dir=self.root)))
        return {"BYTEGRAD_CACHE_DIR": str(path)}

    def cleanup(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def precompile(cfg: Config, env: dict[str, str]) -> str | None:
    """Runs `bytegrad.precompile` on the MLP loss into the configuration's cache; an error or None."""
    code = ("import numpy as np, bytegrad; from bench import cases; "
            "case = next(c for c in cases.CASES if c.key == 'mlp'); "
            "params, data = case.inputs(np.random.default_rng(0)); "
            "bytegrad.precompile(case.loss, params, *data)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True)
    return None if proc.returncode == 0 else proc.stderr.strip().splitlines()[-1]


# ------------------------------------------------------------------------------ statistics
def median_of(runs: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in runs if r.get(key) is not None and "error" not in r]
    return statistics.median(values) if values else None


def span(runs: list[dict[str, Any]], key: str) -> tuple[float, float] | None:
    values = [r[key] for r in runs if r.get(key) is not None and "error" not in r]
    return (min(values), max(values)) if values else None


def summarize(cfg: Config, timed: list[dict[str, Any]], mem: list[dict[str, Any]]) -> dict[str, Any]:
    summary: dict[str, Any] = {"name": cfg.name, "system": cfg.system, "env": cfg.env, "cache": cfg.cache,
                               "not_run": cfg.not_run, "runs": timed, "memory_runs": mem}
    for key in ("import_numpy_s", "import_library_s", "import_bench_s", "data_s", "setup_s", "first_s",
                "second_s", "to_first_end_s", "wall_s", "max_rss_bytes"):
        summary[key] = median_of(timed, key)
    summary["first_span_s"] = span(timed, "first_s")
    summary["first_peak_traced_bytes"] = median_of(mem, "first_peak_traced_bytes")
    summary["errors"] = [r for r in timed + mem if "error" in r]
    summary["checks"] = sorted({r["check"] for r in timed + mem if "check" in r})
    return summary


# ---------------------------------------------------------------------------------- report
def fmt_time(x: float | None) -> str:
    return harness.format_time(x) if x is not None else ""


def fmt_bytes(x: float | None) -> str:
    if x is None:
        return ""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if x >= scale:
            return f"{x / scale:.3g} {unit}" if x / scale < 100 else f"{x / scale:.0f} {unit}"
    return f"{x:.0f} B"


def ttfg_table(summaries: list[dict[str, Any]]) -> str:
    rows = []
    for s in summaries:
        if s["not_run"]:
            rows.append([s["name"]] + [s["not_run"]] + [""] * 8)
            continue
        if s["system"] is None:
            rows.append([s["name"]] + ["-"] * 7 + [fmt_time(s["wall_s"]), fmt_bytes(s["max_rss_bytes"])])
            continue
        if s["first_s"] is None:
            rows.append([s["name"], "error: " + (s["errors"][0]["error"] if s["errors"] else "?")] + [""] * 8)
            continue
        parts = (s["import_numpy_s"], s["import_library_s"], s["setup_s"], s["first_s"])
        first_span = s["first_span_s"]
        first = fmt_time(s["first_s"])
        if first_span:
            first += f" ({fmt_time(first_span[0])} - {fmt_time(first_span[1])})"
        rows.append([
            s["name"], fmt_time(s["import_numpy_s"]),
            fmt_time(s["import_library_s"]) if s["system"] != "numpy (hand-written)" else "-",
            fmt_time(s["setup_s"]), first, fmt_bytes(s["first_peak_traced_bytes"]), fmt_time(s["second_s"]),
            fmt_time(sum(parts)), fmt_time(s["wall_s"]), fmt_bytes(s["max_rss_bytes"]),
        ])
    headers = ("configuration", "import numpy", "import library", "setup", "1st gradient (min - max)",
               "1st gradient: peak traced memory", "2nd gradient", "import + setup + 1st", "process wall",
               "peak RSS")
    return harness.markdown_table(headers, rows)


def train_table(summaries: list[dict[str, Any]]) -> str:
    rows = []
    for s in summaries:
        if s["steps_s"] is None:
            rows.append([s["name"], "error: " + (s["errors"][0]["error"] if s["errors"] else "?")] + [""] * 5)
            continue
        rows.append([s["name"], fmt_time(s["wall_s"]), fmt_time(s["import_s"]), fmt_time(s["steps_s"]),
                     fmt_time(s["steps_s"] / s["steps"]),
                     f"{s['loss_before']:.3f} -> {s['loss_after']:.3f}"])
    headers = ("system", "process wall (200 steps, cold start)", "import numpy + library", "200 steps",
               "per step", "loss before -> after")
    return harness.markdown_table(headers, rows)


def report(summaries: list[dict[str, Any]], train: list[dict[str, Any]], info: dict[str, Any], *,
           runs: int, mem_runs: int, command: str) -> str:
    date = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    problems = [f"- {s['name']}: {e.get('error')}: {e.get('stderr', '').splitlines()[-1] if e.get('stderr') else ''}"
                for s in summaries + train for e in s["errors"][:1]]
    problems += [f"- {s['name']}: {c}" for s in summaries for c in s.get("checks", []) if c != "ok"]
    text = [
        "# Time to first gradient",
        "",
        f"`{command}`, {date}.",
        "",
        "MLP 784-256-256-10, tanh + softmax cross-entropy, batch 128, float64 (the `mlp` case of",
        "bench/cases.py). Each configuration ran in fresh processes: one priming run (not counted), then",
        f"{runs} timed runs, interleaved across configurations; every time is the median over those runs.",
        "The children run without `PYTHONDONTWRITEBYTECODE` (set on these machines, not on a user's),",
        "so the timed runs load the .pyc files that the priming run wrote, as a user's Python does.",
        "",
        "- *import numpy*, *import library*: timed inside the child, in that order (`import bytegrad`,",
        "  `import autograd, autograd.numpy`, `import jax, jax.numpy`, `import torch`).",
        "- *setup*: building the gradient function from the loss and converting the data (for JAX: enabling",
        "  x64 and the first `jnp.asarray`, which initialises the backend). Making the random data is",
        "  not counted.",
        "- *1st gradient*: the first gradient call (for bytegrad: rewriting the bytecode; for jax-jit:",
        "  tracing and XLA compilation), with the fastest and slowest of the runs. *peak traced memory*:",
        f"  tracemalloc's peak during that call, in {mem_runs} separate runs (tracemalloc slows what it",
        "  traces); it sees Python objects and NumPy buffers, not torch's or XLA's own allocations.",
        "- *process wall*: measured by the parent, from starting the interpreter to its exit (includes",
        "  interpreter start-up, making the data, the 2nd gradient, a check of the gradient against the",
        "  hand-written one, and exit). *peak RSS*: the child's maximum resident set size.",
        "- bytegrad *empty cache*: a new empty `BYTEGRAD_CACHE_DIR` per process (the first gradient",
        "  rewrites the bytecode and stores it); *warm cache*: one directory, kept from the priming run",
        "  (the rewrite is loaded from disk); *after precompile*: a directory that `bytegrad precompile`",
        "  filled (rewrite and fused kernels).",
        "",
        table_or_empty(ttfg_table(summaries)),
        "",
        "## 200 training steps from a cold start",
        "",
        "A fresh process imports NumPy and the library, makes the data, and runs 200 SGD steps",
        "(learning rate 0.05) on one batch; *process wall* is measured by the parent from start to exit.",
        "Only systems whose gradient function takes NumPy parameters updated in place are run (JAX and",
        "torch would need their own training loop).",
        "",
        table_or_empty(train_table(train)),
        "",
    ]
    if problems:
        text += ["## Problems", "", *problems, ""]
    text += ["## Machine", "", *harness.describe_machine(info), ""]
    return "\n".join(text)


def table_or_empty(table: str) -> str:
    return table if table.count("\n") > 1 else "(nothing measured)"


# ------------------------------------------------------------------------------------ main
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ttfg", description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="timed runs per configuration (median)")
    parser.add_argument("--memory-runs", type=int, default=3, help="runs with tracemalloc, per configuration")
    parser.add_argument("--train-runs", type=int, default=5, help="runs of the 200-step training, per system")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--only", nargs="+", metavar="NAME", help="only configurations whose name contains one of these")
    parser.add_argument("--no-train", action="store_true")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)

    import bytegrad  # noqa: F401  (the source tree's, for the check below)
    has_precompile = hasattr(sys.modules["bytegrad"], "precompile")
    cfgs = [c for c in configs(has_precompile)
            if not args.only or any(o in c.name for o in args.only) or c.system is None]
    for c in cfgs:
        if c.module and c.not_run is None and importlib.util.find_spec(c.module) is None:
            c.not_run = f"n/a ({c.module} is not installed)"
    active = [c for c in cfgs if c.not_run is None]
    trainers = [] if args.no_train else [
        s for s in TRAIN_SYSTEMS
        if (not args.only or any(o in s for o in args.only))
        and (s == "numpy (hand-written)" or importlib.util.find_spec(s.split(",")[0]) is not None)
        and (s != "bytegrad, after precompile" or has_precompile)]

    total = (len(active) * (1 + args.runs + args.memory_runs) - args.memory_runs
             + len(trainers) * (1 + args.train_runs))
    bar = harness.progress_bar(total, "bench.ttfg", not args.no_progress, unit="process")
    caches = CacheDirs()
    timed: dict[str, list[dict[str, Any]]] = {c.name: [] for c in cfgs}
    mem: dict[str, list[dict[str, Any]]] = {c.name: [] for c in cfgs}
    train_runs: dict[str, list[dict[str, Any]]] = {s: [] for s in trainers}
    try:
        for c in active:
            if c.cache == "precompiled":
                error = precompile(c, child_env({**c.env, **caches.for_run(c)}))
                if error:
                    c.not_run = f"precompile failed: {error}"
        active = [c for c in active if c.not_run is None]
        # round 0 primes (.pyc files, warm caches); rounds 1..runs are timed; then the tracemalloc rounds
        for round_ in range(1 + args.runs + args.memory_runs):
            mode = "ttfg" if round_ <= args.runs else "ttfg-mem"
            for c in active:
                if mode == "ttfg-mem" and c.system is None:
                    continue
                bar.set_postfix_str(f"{c.name} ({'priming' if round_ == 0 else mode})")
                config = {"mode": "pass" if c.system is None else mode, "system": c.system, "case": "mlp"}
                result = run_child(config, child_env({**c.env, **caches.for_run(c)}))
                if round_ == 0:
                    pass
                elif mode == "ttfg":
                    timed[c.name].append(result)
                elif c.system is not None:
                    mem[c.name].append(result)
                bar.update()
        precompiled_dir = None
        if "bytegrad, after precompile" in trainers:
            precompiled_dir = tempfile.mkdtemp(dir=caches.root)
            error = precompile(Config("train", "bytegrad"), child_env({"BYTEGRAD_CACHE_DIR": precompiled_dir}))
            if error:
                trainers.remove("bytegrad, after precompile")
                train_runs.pop("bytegrad, after precompile", None)
        for round_ in range(1 + args.train_runs):
            for s in trainers:
                bar.set_postfix_str(f"train {s}" + (" (priming)" if round_ == 0 else ""))
                config = {"mode": "train", "system": s.split(",")[0], "case": "mlp", "steps": args.steps}
                cache_dir = precompiled_dir if s == "bytegrad, after precompile" else tempfile.mkdtemp(dir=caches.root)
                result = run_child(config, child_env({"BYTEGRAD_CACHE_DIR": cache_dir}))
                if round_:
                    train_runs[s].append(result)
                bar.update()
    finally:
        bar.close()
        caches.cleanup()

    summaries = [summarize(c, timed[c.name], mem[c.name]) for c in cfgs]
    train = []
    for s, runs in train_runs.items():
        ok = [r for r in runs if "error" not in r]
        train.append({
            "name": s, "runs": runs, "errors": [r for r in runs if "error" in r],
            "wall_s": median_of(runs, "wall_s"), "steps_s": median_of(runs, "steps_s"),
            "import_s": statistics.median(r["import_numpy_s"] + r["import_library_s"] for r in ok) if ok else None,
            "steps": args.steps,
            "loss_before": ok[0]["loss_before"] if ok else None, "loss_after": median_of(runs, "loss_after"),
        })
    info = harness.machine_info()
    command = "python -m bench.ttfg " + " ".join(argv if argv is not None else sys.argv[1:])
    text = report(summaries, train, info, runs=args.runs, mem_runs=args.memory_runs, command=command.strip())
    harness.write_atomic(args.out / "ttfg.md", text)
    harness.write_json(args.out / "ttfg.json", {
        "settings": {"runs": args.runs, "memory_runs": args.memory_runs, "train_runs": args.train_runs,
                     "steps": args.steps, "command": command.strip(), "case": "mlp",
                     "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
                     "python": sys.executable, "child_env_removed": ["PYTHONDONTWRITEBYTECODE"]},
        "machine": info, "configurations": summaries, "train": train,
    })
    print(text)
    print(f"written: {args.out / 'ttfg.md'}, {args.out / 'ttfg.json'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
