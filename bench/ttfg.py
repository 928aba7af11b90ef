"""Time to first gradient, in fresh processes: the MLP case (784-256-256-10, tanh + softmax-CE,
batch 128) and the seed's own example (the gradient of the sum of squared singular values of a
20x20 matrix), each beside hand-written NumPy and autograd.

    python -m bench.ttfg              # 7 timed runs per configuration (median), after 1 priming run
    python -m bench.ttfg --runs 3     # fewer
    python -m bench.ttfg --cases svd  # one case

For each configuration, fresh Python processes (`python -m bench.ttfg_child`) report: import
time (`import numpy`, then the library), setup (building the gradient function, converting the
data), the first gradient call, the second, and the process's peak RSS; the parent measures the
process wall time (interpreter start to exit). The peak memory traced by tracemalloc during the
first gradient call is measured in separate processes (tracemalloc slows the call it traces).
bytegrad runs with an empty cache (a fresh `BYTEGRAD_CACHE_DIR` per process), a warm one (a
cache directory kept from the priming run), a crowded one (a fresh copy, per process, of a cache
holding the rewrites of 1,000 other functions: the first gradient writes into it), and after
`bytegrad.precompile`. Then: the wall time of a fresh process that imports everything and runs 200
SGD steps of each case, for the systems whose gradient works on NumPy parameters updated in place.

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
    cache: str | None = None                  # bytegrad: "empty", "warm", "trained", "crowded" or "precompiled"
    not_run: str | None = None                # why it is shown but not run
    case: str = "mlp"                         # a bench.cases key

    @property
    def key(self) -> str:
        return f"{self.case}: {self.name}"


CASE_KEYS = ("svd", "mlp")
#: the other functions' entries of the crowded cache
CROWD = 1000
#: the training steps of the run that leaves the "trained" warm cache
TRAINED = 20


def configs(precompile_available: bool, case: str) -> list[Config]:
    nn = {"BYTEGRAD_DISABLE_NUMBA": "1"}
    out = [
        Config("numpy (hand-written)", "numpy (hand-written)", case=case),
        Config("bytegrad, empty cache", "bytegrad", "bytegrad", cache="empty", case=case),
        Config("bytegrad, warm cache", "bytegrad", "bytegrad", cache="warm", case=case),
        Config("bytegrad, warm cache, after a training run", "bytegrad", "bytegrad", cache="trained", case=case),
        Config(f"bytegrad, crowded cache ({CROWD:,} other functions)", "bytegrad", "bytegrad", cache="crowded",
               case=case),
        Config("bytegrad, after precompile", "bytegrad", "bytegrad", cache="precompiled", case=case,
               not_run=None if precompile_available else "n/a (precompile not implemented yet)"),
        Config("autograd", "autograd", "autograd", case=case),
    ]
    if case == "mlp":
        out[5:5] = [Config("bytegrad, BYTEGRAD_DISABLE_NUMBA=1, empty cache", "bytegrad", "bytegrad", env=nn,
                           cache="empty", case=case)]
        out += [Config("jax-jit (no persistent compilation cache)", "jax-jit", "jax", case=case),
                Config("torch", "torch", "torch", case=case)]
    return out


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
    """BYTEGRAD_CACHE_DIR per configuration: a new one per process (empty), one kept (warm), or a
    fresh copy of the crowded template per process (crowded)."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="bytegrad-ttfg-"))
        self.kept: dict[str, Path] = {}
        self.crowd: Path | None = None

    def for_run(self, cfg: Config) -> dict[str, str]:
        if cfg.cache is None:
            return {}
        if cfg.cache == "empty":
            return {"BYTEGRAD_CACHE_DIR": tempfile.mkdtemp(dir=self.root)}
        if cfg.cache == "crowded":
            target = Path(tempfile.mkdtemp(dir=self.root)) / "cache"
            shutil.copytree(self.crowded(), target, symlinks=True)
            return {"BYTEGRAD_CACHE_DIR": str(target)}
        path = self.kept.setdefault(cfg.key, Path(tempfile.mkdtemp(dir=self.root)))
        return {"BYTEGRAD_CACHE_DIR": str(path)}

    def crowded(self) -> Path:
        """A cache holding the rewrites of `CROWD` other functions (made once, by one process)."""
        if self.crowd is None:
            self.crowd = self.root / "crowd"
            code = ("import numpy as np, bytegrad\nns = {'np': np}\n"
                    f"for i in range({CROWD}):\n"
                    "    exec(f'def f{i}(x):\\n    return np.sum(np.tanh(x * {i + 1}.0) * x - x)', ns)\n"
                    "    bytegrad.grad(ns[f'f{i}'])(np.ones(3))\n")
            proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                                  env=child_env({"BYTEGRAD_CACHE_DIR": str(self.crowd)}))
            if proc.returncode != 0:
                raise RuntimeError(f"making the crowded cache failed: {proc.stderr.strip()[-500:]}")
        return self.crowd

    def cleanup(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def precompile(case: str, env: dict[str, str]) -> str | None:
    """Runs `bytegrad.precompile` on a case's loss into the configuration's cache; an error or None."""
    code = ("import numpy as np, bytegrad; from bench import cases; "
            f"case = cases.by_key({case!r}); "
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
    summary: dict[str, Any] = {"name": cfg.name, "case": cfg.case, "system": cfg.system, "env": cfg.env,
                               "cache": cfg.cache, "not_run": cfg.not_run, "runs": timed, "memory_runs": mem}
    for r in timed:  # import + setup + first gradient, per process (its median is not a sum of medians)
        if "error" not in r and r.get("first_s") is not None:
            r["to_first_s"] = r["import_numpy_s"] + r["import_library_s"] + r["setup_s"] + r["first_s"]
            r["import_s"] = r["import_numpy_s"] + r["import_library_s"]
    for key in ("import_numpy_s", "import_library_s", "import_s", "import_bench_s", "data_s", "setup_s", "first_s",
                "second_s", "to_first_s", "to_first_end_s", "wall_s", "max_rss_bytes"):
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


def fmt_ratio(x: float | None, ref: float | None) -> str:
    return f"{x / ref:.2f}x" if x is not None and ref else ""


def fmt_delta(x: float | None, ref: float | None) -> str:
    if x is None or ref is None:
        return ""
    return ("+" if x >= ref else "-") + fmt_time(abs(x - ref))


def ttfg_table(summaries: list[dict[str, Any]]) -> str:
    by_name = {s["name"]: s for s in summaries}
    numpy_ = by_name.get("numpy (hand-written)", {})
    autograd = by_name.get("autograd", {})
    rows = []
    for s in summaries:
        if s["not_run"]:
            rows.append([s["name"], s["not_run"]] + [""] * 10)
            continue
        if s["first_s"] is None:
            rows.append([s["name"], "error: " + (s["errors"][0]["error"] if s["errors"] else "?")] + [""] * 10)
            continue
        first = fmt_time(s["first_s"])
        if s["first_span_s"]:
            first += f" ({fmt_time(s['first_span_s'][0])} - {fmt_time(s['first_span_s'][1])})"
        rows.append([
            s["name"], fmt_time(s["import_numpy_s"]),
            fmt_time(s["import_library_s"]) if s["system"] != "numpy (hand-written)" else "-",
            fmt_time(s["setup_s"]), first, fmt_delta(s["first_s"], autograd.get("first_s")),
            fmt_time(s["to_first_s"]), fmt_ratio(s["to_first_s"], numpy_.get("to_first_s")),
            fmt_ratio(s["to_first_s"], autograd.get("to_first_s")),
            fmt_time(s["second_s"]), fmt_bytes(s["first_peak_traced_bytes"]), fmt_time(s["wall_s"]),
        ])
    headers = ("configuration", "import numpy", "import library", "setup", "1st gradient (min - max)",
               "1st gradient - autograd's", "import + setup + 1st", "vs NumPy", "vs autograd", "2nd gradient",
               "1st gradient: peak traced memory", "process wall")
    return harness.markdown_table(headers, rows)


def train_table(train: list[dict[str, Any]]) -> str:
    by_name = {t["name"]: t for t in train}
    numpy_ = by_name.get("numpy (hand-written)", {})
    autograd = by_name.get("autograd", {})
    rows = []
    for s in train:
        if s["steps_s"] is None:
            rows.append([s["name"], "error: " + (s["errors"][0]["error"] if s["errors"] else "?")] + [""] * 7)
            continue
        rows.append([s["name"], fmt_time(s["wall_s"]), fmt_ratio(s["wall_s"], numpy_.get("wall_s")),
                     fmt_ratio(s["wall_s"], autograd.get("wall_s")), fmt_time(s["import_s"]),
                     fmt_time(s["steps_s"]), fmt_time(s["steps_s"] / s["steps"]),
                     f"{s['loss_before']:.4g} -> {s['loss_after']:.4g}"])
    headers = ("system", "process wall (200 steps, cold start)", "vs NumPy", "vs autograd", "import numpy + library",
               "200 steps", "per step", "loss before -> after")
    return harness.markdown_table(headers, rows)


CASE_TITLES = {
    "svd": ("The seed's example: `np.sum(np.linalg.svd(A, compute_uv=False) ** 2)`, A: 20x20 float64 "
            "(`bench.cases.SVD`; hand-written NumPy: `U * 2s @ Vt` from one SVD)"),
    "mlp": ("MLP 784-256-256-10, tanh + softmax cross-entropy, batch 128, float64 (the `mlp` case of "
            "bench/cases.py)"),
}


def report(summaries: list[dict[str, Any]], train: list[dict[str, Any]], info: dict[str, Any], *, runs: int,
           mem_runs: int, command: str, load: dict[str, Any]) -> str:
    date = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    problems = [f"- {s['case']}, {s['name']}: {e.get('error')}: "
                f"{e.get('stderr', '').splitlines()[-1] if e.get('stderr') else ''}"
                for s in summaries + train for e in s["errors"][:1]]
    problems += [f"- {s['case']}, {s['name']}: {c}" for s in summaries for c in s.get("checks", []) if c != "ok"]
    text = [
        "# Time to first gradient",
        "",
        f"`{command}`, {date}.",
        "",
        f"Each configuration ran in fresh processes: one priming run (not counted), then {runs} timed runs,",
        "interleaved across configurations and cases; every time is the median over those runs (*import +",
        "setup + 1st* is the median of each process's sum). The children run without",
        "`PYTHONDONTWRITEBYTECODE` (set on these machines, not on a user's), so the timed runs load the",
        ".pyc files that the priming run wrote, as a user's Python does.",
        "",
        f"**Load**: `python -c pass` took {fmt_time(load.get('wall_s'))} (median, process wall) during this run;",
        "on an idle machine of this kind it takes about 30 ms: other work on the machine slows every",
        "column alike, and the ratios (measured side by side, interleaved) are what to read.",
        "",
        "- *import numpy*, *import library*: timed inside the child, in that order (`import bytegrad`,",
        "  `import autograd, autograd.numpy`, `import jax, jax.numpy`, `import torch`).",
        "- *setup*: building the gradient function from the loss and converting the data (for JAX: enabling",
        "  x64 and the first `jnp.asarray`, which initialises the backend). Making the random data is",
        "  not counted.",
        "- *1st gradient*: the first gradient call (for bytegrad: rewriting the bytecode, or loading the",
        "  rewrite from the disk cache; for jax-jit: tracing and XLA compilation), with the fastest and",
        f"  slowest of the runs. *peak traced memory*: tracemalloc's peak during that call, in {mem_runs}",
        "  separate runs (tracemalloc slows what it traces).",
        "- *vs NumPy*, *vs autograd*: *import + setup + 1st* over hand-written NumPy's (which imports only",
        "  NumPy) and autograd's.",
        "- *process wall*: measured by the parent, from starting the interpreter to its exit.",
        "- bytegrad *empty cache*: a new empty `BYTEGRAD_CACHE_DIR` per process (the first gradient",
        "  rewrites the bytecode and stores it); *warm cache*: one directory, kept from the priming run",
        "  (a run of two gradients, as each timed run: the rewrite is loaded from disk, and no compiled",
        f"  program was stored); *warm cache, after a training run*: one directory, kept from a run of {TRAINED}",
        "  training steps before the priming run (the compiled program a capture stored: the first",
        "  gradient runs its standalone form, without loading the general path); *crowded cache*: a fresh",
        f"  copy per process of a cache holding the rewrites of {CROWD:,} other functions (the first",
        "  gradient rewrites and writes into it); *after precompile*: a directory that",
        "  `bytegrad.precompile` filled (rewrite, compiled program and its standalone form).",
        "",
    ]
    for case in CASE_KEYS:
        rows = [s for s in summaries if s["case"] == case]
        if not rows:
            continue
        text += [f"## {case}", "", CASE_TITLES[case] + ".", "", table_or_empty(ttfg_table(rows)), ""]
        trows = [t for t in train if t["case"] == case]
        if trows:
            text += [f"### {case}: 200 training steps from a cold start", "",
                     "A fresh process imports NumPy and the library, makes the data, and runs 200 SGD steps",
                     "(learning rate 0.05); *process wall* is measured by the parent from start to exit.", "",
                     table_or_empty(train_table(trows)), ""]
    if problems:
        text += ["## Problems", "", *problems, ""]
    text += ["## Machine", "", *harness.describe_machine(info), ""]
    return "\n".join(text)


def _where(args: argparse.Namespace) -> dict[str, Any] | None:
    """The MLP's breakdown (bench/ttfg_where.py): measured now, or the JSON it wrote last."""
    path = args.out / "ttfg-where.json"
    if args.where_runs > 0 and "mlp" in args.cases:
        from bench import ttfg_where
        data = ttfg_where.measure(args.where_runs, args.compare)
        path.write_text(json.dumps(data, indent=1) + "\n")
        return data
    return json.loads(path.read_text()) if path.exists() else None


def table_or_empty(table: str) -> str:
    return table if table.count("\n") > 1 else "(nothing measured)"


# ------------------------------------------------------------------------------------ main
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ttfg", description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7, help="timed runs per configuration (median)")
    parser.add_argument("--memory-runs", type=int, default=3, help="runs with tracemalloc, per configuration")
    parser.add_argument("--train-runs", type=int, default=7, help="runs of the 200-step training, per system")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--cases", nargs="+", choices=CASE_KEYS, default=list(CASE_KEYS))
    parser.add_argument("--only", nargs="+", metavar="NAME", help="only configurations whose name contains one of these")
    parser.add_argument("--no-train", action="store_true")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument("--where-runs", type=int, default=9,
                        help="runs of bench.ttfg_where (the MLP's breakdown); 0: reuse the JSON it last wrote")
    parser.add_argument("--compare", type=Path, metavar="DIR",
                        help="bench.ttfg_where: another source tree measured interleaved (before/after)")
    args = parser.parse_args(argv)

    import bytegrad  # noqa: F401  (the source tree's, for the check below)
    has_precompile = hasattr(sys.modules["bytegrad"], "precompile")
    load_ref = Config("python -c pass", None, case="-")
    cfgs = [c for case in args.cases for c in configs(has_precompile, case)
            if not args.only or any(o in c.name for o in args.only)]
    for c in cfgs:
        if c.module and c.not_run is None and importlib.util.find_spec(c.module) is None:
            c.not_run = f"n/a ({c.module} is not installed)"
    trainers = [] if args.no_train else [
        (case, s) for case in args.cases for s in TRAIN_SYSTEMS
        if (not args.only or any(o in s for o in args.only))
        and (s == "numpy (hand-written)" or importlib.util.find_spec(s.split(",")[0]) is not None)
        and (s != "bytegrad, after precompile" or has_precompile)]

    caches = CacheDirs()
    timed: dict[str, list[dict[str, Any]]] = {c.key: [] for c in cfgs + [load_ref]}
    mem: dict[str, list[dict[str, Any]]] = {c.key: [] for c in cfgs}
    train_runs: dict[tuple[str, str], list[dict[str, Any]]] = {t: [] for t in trainers}
    bar = None
    try:
        for c in cfgs:
            if c.cache == "precompiled" and c.not_run is None:
                error = precompile(c.case, child_env({**c.env, **caches.for_run(c)}))
                if error:
                    c.not_run = f"precompile failed: {error}"
            if c.cache == "trained" and c.not_run is None:  # a user's earlier run of the script: it trained
                trained = run_child({"mode": "train", "system": "bytegrad", "case": c.case, "steps": TRAINED},
                                    child_env({**c.env, **caches.for_run(c)}))
                if "error" in trained:
                    c.not_run = f"the training run failed: {trained['error']}"
        if any(c.cache == "crowded" and c.not_run is None for c in cfgs):
            caches.crowded()
        active = [load_ref] + [c for c in cfgs if c.not_run is None]
        total = (len(active) * (1 + args.runs + args.memory_runs) - args.memory_runs
                 + len(trainers) * (1 + args.train_runs))
        bar = harness.progress_bar(total, "bench.ttfg", not args.no_progress, unit="process")
        # round 0 primes (.pyc files, warm caches); rounds 1..runs are timed; then the tracemalloc rounds
        for round_ in range(1 + args.runs + args.memory_runs):
            mode = "ttfg" if round_ <= args.runs else "ttfg-mem"
            for c in active:
                if mode == "ttfg-mem" and c.system is None:
                    continue
                bar.set_postfix_str(f"{c.key} ({'priming' if round_ == 0 else mode})")
                config = {"mode": "pass" if c.system is None else mode, "system": c.system, "case": c.case}
                result = run_child(config, child_env({**c.env, **caches.for_run(c)}))
                if round_ == 0:
                    pass
                elif mode == "ttfg":
                    timed[c.key].append(result)
                else:
                    mem[c.key].append(result)
                bar.update()
        precompiled: dict[str, str] = {}
        for case, s in list(trainers):
            if s == "bytegrad, after precompile":
                precompiled[case] = tempfile.mkdtemp(dir=caches.root)
                error = precompile(case, child_env({"BYTEGRAD_CACHE_DIR": precompiled[case]}))
                if error:
                    trainers.remove((case, s))
                    train_runs.pop((case, s), None)
        for round_ in range(1 + args.train_runs):
            for case, s in trainers:
                bar.set_postfix_str(f"train {case}: {s}" + (" (priming)" if round_ == 0 else ""))
                config = {"mode": "train", "system": s.split(",")[0], "case": case, "steps": args.steps}
                cache_dir = precompiled[case] if s == "bytegrad, after precompile" else tempfile.mkdtemp(dir=caches.root)
                result = run_child(config, child_env({"BYTEGRAD_CACHE_DIR": cache_dir}))
                if round_:
                    train_runs[(case, s)].append(result)
                bar.update()
    finally:
        if bar is not None:
            bar.close()
        caches.cleanup()

    where = _where(args)
    summaries = [summarize(c, timed[c.key], mem[c.key]) for c in cfgs]
    load = summarize(load_ref, timed[load_ref.key], [])
    train = []
    for (case, s), runs in train_runs.items():
        ok = [r for r in runs if "error" not in r]
        train.append({
            "name": s, "case": case, "runs": runs, "errors": [r for r in runs if "error" in r],
            "wall_s": median_of(runs, "wall_s"), "steps_s": median_of(runs, "steps_s"),
            "import_s": statistics.median(r["import_numpy_s"] + r["import_library_s"] for r in ok) if ok else None,
            "steps": args.steps,
            "loss_before": ok[0]["loss_before"] if ok else None, "loss_after": median_of(runs, "loss_after"),
        })
    info = harness.machine_info()
    command = "python -m bench.ttfg " + " ".join(argv if argv is not None else sys.argv[1:])
    text = report(summaries, train, info, runs=args.runs, mem_runs=args.memory_runs, command=command.strip(),
                  load=load)
    if where is not None:
        from bench.ttfg_report import where_section
        head, sep, tail = text.partition("\n## Machine")
        text = head + "\n".join(where_section(where)) + "\n" + sep + tail
    harness.write_atomic(args.out / "ttfg.md", text)
    harness.write_json(args.out / "ttfg.json", {
        "settings": {"runs": args.runs, "memory_runs": args.memory_runs, "train_runs": args.train_runs,
                     "steps": args.steps, "command": command.strip(), "cases": args.cases, "crowd": CROWD,
                     "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
                     "python": sys.executable, "child_env_removed": ["PYTHONDONTWRITEBYTECODE"]},
        "machine": info, "load_reference": load, "configurations": summaries, "train": train,
    })
    print(text)
    print(f"written: {args.out / 'ttfg.md'}, {args.out / 'ttfg.json'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
