"""Where the MLP's first gradient's time goes, in fresh processes (the breakdown of bench/results/ttfg.md).

    python -m bench.ttfg_where             # 9 interleaved runs per configuration, medians
    python -m bench.ttfg_where --runs 5
    python -m bench.ttfg_where --compare /tmp/before   # and an export of an earlier commit, interleaved

Each child runs under `-X importtime` and marks its phases on stderr (`import bytegrad`, setup, the
first gradient, the rewrite inside it), so that every module imported is charged to the phase that
imported it; it times the disk cache's parts (`transform.cache`: the rewrite, the stored rewrite's
load, the rest: key, look-up and store) and reports the cache's own counters. A separate child
("parts") times the rewrite's steps with every module already imported: disassembly
(`Bytecode.from_code`), each pass of `transform.pipeline`, assembly (`transform.assemble.to_code`) and the encoding of
the entry. Configurations: hand-written NumPy, bytegrad with a warm cache (kept from a priming run)
and with an empty one (new per process). Writes bench/results/ttfg-where.json; bench/ttfg.py
renders it as the section "where the first gradient's time goes".
"""
from __future__ import annotations

import time

T_START = time.perf_counter()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
REPO = Path(__file__).resolve().parent.parent
CONFIGS = ("numpy (hand-written)", "bytegrad, warm cache", "bytegrad, empty cache")
#: importtime groups, first match wins
GROUPS = (("bytegrad rules (registry, types)", ("bytegrad.rules.registry", "bytegrad.rules._types",
                                                  "bytegrad.rules._deferred")),
          ("bytegrad rules modules", ("bytegrad.rules",)), ("bytegrad.runtime", ("bytegrad.runtime",)),
          ("bytegrad.transform", ("bytegrad.transform",)), ("bytegrad.compiled", ("bytegrad.compiled",)),
          ("bytegrad (api, errors, config, ...)", ("bytegrad",)), ("the `bytecode` package", ("bytecode",)),
          ("standard library and others", ("",)))


def _mark(name: str) -> None:
    print(f"#phase {name}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------ child
def child(system: str) -> dict[str, Any]:
    clock = time.perf_counter
    out: dict[str, Any] = {}
    _mark("numpy")
    t = clock()
    import numpy as np
    out["import_numpy_s"] = clock() - t
    _mark("bytegrad")
    t = clock()
    if system != "numpy":
        import bytegrad
    out["import_library_s"] = clock() - t
    _mark("other")
    from bench import cases
    case = cases.by_key("mlp")
    params, data = case.inputs(np.random.default_rng(0))
    _mark("setup")
    t = clock()
    if system == "numpy":
        def fn() -> Any:
            return case.grad(params, *data)
    else:
        f = bytegrad.differentiate(case.loss)

        def fn() -> Any:
            return f.grad(params, *data)
        timers = _patch_cache(out)
    out["setup_s"] = clock() - t
    _mark("first")
    t = clock()
    fn()
    out["first_s"] = clock() - t
    _mark("second")
    t = clock()
    fn()
    out["second_s"] = clock() - t
    _mark("end")
    if system != "numpy":
        from bytegrad.transform import cache
        out["disk"] = cache.disk_stats()
        out.update(timers)
    return out


def _patch_cache(out: dict[str, Any]) -> dict[str, float]:
    """Times `cache.rewrite_cached` (all of the rewrite's disk-cache path) and marks the rewrite
    itself (`transform._rewrite_fresh`) on stderr, so that its imports are charged to it."""
    import bytegrad.transform as transform
    from bytegrad.transform import cache

    timers = {"rewrite_cached_s": 0.0}
    cached, fresh = cache.rewrite_cached, transform._rewrite_fresh

    def rewrite_cached(*args: Any, **kwargs: Any) -> Any:
        t = time.perf_counter()
        try:
            return cached(*args, **kwargs)
        finally:
            timers["rewrite_cached_s"] += time.perf_counter() - t

    def rewrite_fresh(*args: Any, **kwargs: Any) -> Any:
        _mark("rewrite")
        try:
            return fresh(*args, **kwargs)
        finally:
            _mark("first")
    cache.rewrite_cached, transform._rewrite_fresh = rewrite_cached, rewrite_fresh  # type: ignore[assignment]
    return timers


def child_parts() -> dict[str, Any]:
    """The rewrite's steps, timed with every module imported (median of 7): the MLP loss's code."""
    import numpy as np

    import bytegrad
    import bytegrad.transform as transform
    from bench import cases
    from bytegrad.transform import cache, pipeline

    case = cases.by_key("mlp")
    params, data = case.inputs(np.random.default_rng(0))
    seen: list[tuple] = []
    fresh = transform._rewrite_fresh

    def rewrite_fresh(code: Any, active: Any, fn_globals: Any, immutable: Any, assumed: Any, *rest: Any) -> Any:
        seen.append((code, active, fn_globals, immutable))
        return fresh(code, active, fn_globals, immutable, assumed, *rest)
    transform._rewrite_fresh = rewrite_fresh  # type: ignore[assignment]
    bytegrad.differentiate(case.loss).grad(params, *data)
    try:  # (bytegrad's own disassembler, transform/code/, where the tree has it)
        from bytegrad.transform.code import Bytecode
    except ImportError:
        from bytecode import Bytecode

    from bytegrad.errors import SourceLoc
    try:  # (the rewrite's own assembly, transform/assemble.py, where the tree has it)
        from bytegrad.transform.assemble import to_code
    except ImportError:
        to_code = Bytecode.to_code
    runs: dict[str, list[float]] = {}

    def timed(name: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        t = time.perf_counter()
        result = fn(*args, **kwargs)
        runs.setdefault(name, []).append(time.perf_counter() - t)
        return result
    for _ in range(7):
        for code, active, fn_globals, immutable in seen:
            loc = SourceLoc(code.co_filename, code.co_firstlineno, code.co_name)
            assumed = cache.Assumptions()
            bc = timed("disassembly (Bytecode.from_code)", Bytecode.from_code, code,
                       conserve_exception_block_stackdepth=True)
            unit = pipeline.Unit(bc, active, fn_globals, loc, immutable, assumed)
            for p in pipeline.PIPELINE:
                timed(f"pass: {p.name}", p.run, unit)
            new = timed("assembly (to_code)", to_code, unit.out)
            timed("entry: encode (assumptions, constants)", cache._encode, new, assumed)
            timed("entry: key (sha256 of the code)", cache._disk_key, code, active, immutable)
    return {name: statistics.median(v) for name, v in runs.items()}


# ----------------------------------------------------------------------------------- parent
def parse_importtime(stderr: str) -> dict[str, dict[str, float]]:
    """{phase: {group: seconds}}: the self time of every module imported, charged to the phase marked
    when it was imported."""
    phase = "start"
    out: dict[str, dict[str, float]] = {}
    for line in stderr.splitlines():
        if line.startswith("#phase "):
            phase = line.split(" ", 1)[1]
            continue
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        _, self_us, _cum, name = (p.strip() for p in line.replace("import time:", "|", 1).split("|"))
        group = next(g for g, prefixes in GROUPS if any(name == p or name.startswith(p + ".") or p == ""
                                                        for p in prefixes))
        out.setdefault(phase, {}).setdefault(group, 0.0)
        out[phase][group] += int(self_us) * 1e-6
    return out


def run_child(args: list[str], env: dict[str, str], root: Path = REPO) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "bench.ttfg_where", *args], cwd=root, env=env,
                          capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-2000:])
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["imports"] = parse_importtime(proc.stderr)
    return result


def child_env(extra: dict[str, str], root: Path = REPO) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.setdefault("OPENBLAS_NUM_THREADS", "1")  # (as bench/ttfg.py's children run)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(root), env.get("PYTHONPATH")) if p)
    env.update(extra)
    return env


def median_tree(runs: list[Any]) -> Any:
    """The median, key by key, of a list of (nested) dicts of numbers (a missing key counts as 0)."""
    if isinstance(runs[0], dict):
        keys = sorted({k for r in runs for k in r})
        return {k: median_tree([r.get(k, 0.0) for r in runs]) for k in keys}
    return statistics.median(runs) if all(isinstance(r, (int, float)) for r in runs) else runs[0]


def measure(runs: int, other: Path | None = None) -> dict[str, Any]:
    """Medians over `runs` interleaved rounds; with `other` (another source tree holding this file, e.g.
    an export of an earlier commit), its bytegrad configurations run interleaved with these."""
    import shutil

    tmp = Path(tempfile.mkdtemp(prefix="bytegrad-ttfg-where-"))
    roots = {"": REPO} if other is None else {"": REPO, "other: ": other}
    results: dict[str, list[dict[str, Any]]] = {}
    try:
        for round_ in range(runs + 1):  # round 0 primes the .pyc files and the warm caches
            for prefix, root in roots.items():
                for config in CONFIGS:
                    if prefix and config.startswith("numpy"):
                        continue
                    system = "numpy" if config.startswith("numpy") else "bytegrad"
                    cache_dir = str(tmp / f"warm{len(prefix)}") if "warm" in config else tempfile.mkdtemp(dir=tmp)
                    r = run_child(["--child", system], child_env({"BYTEGRAD_CACHE_DIR": cache_dir}, root), root)
                    if round_:
                        results.setdefault(prefix + config, []).append(r)
        parts = run_child(["--child", "parts"], child_env({"BYTEGRAD_CACHE_DIR": tempfile.mkdtemp(dir=tmp)}))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    parts.pop("imports", None)
    return {"runs": runs, "load_average": os.getloadavg(), "python": sys.version.split()[0],
            "source": _source(REPO), "other_source": _source(other) if other is not None else None,
            "configurations": {c: median_tree(v) for c, v in results.items() if not c.startswith("other: ")},
            "other_configurations": {c[len("other: "):]: median_tree(v) for c, v in results.items()
                                     if c.startswith("other: ")},
            "rewrite_parts": parts}


def _source(root: Path) -> str:
    stamp = root / "SOURCE"  # (an exported tree: the commit it was exported from)
    if stamp.exists():
        return stamp.read_text().strip()
    head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=root, capture_output=True, text=True)
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root, capture_output=True,
                           text=True)
    return (head.stdout.strip() or "?") + (" (with uncommitted changes)" if dirty.stdout.strip() else "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ttfg_where", description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=RESULTS / "ttfg-where.json")
    parser.add_argument("--compare", type=Path, metavar="DIR",
                        help="another source tree (holding bench/ttfg_where.py) measured interleaved with this one")
    args = parser.parse_args(argv)
    if args.child:
        result = child_parts() if args.child == "parts" else child(args.child)
        print(json.dumps(result), flush=True)
        return 0
    data = measure(args.runs, args.compare)
    args.out.write_text(json.dumps(data, indent=1) + "\n")
    from bench.ttfg_report import where_section
    print("\n".join(where_section(data)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
