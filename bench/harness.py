"""Timing, checking and reporting utilities shared by bytegrad's benchmarks.

Systems are timed side by side in one process: batches are interleaved across systems, each
batch is preceded by a garbage collection and a pause (so another library's BLAS/OpenMP worker
threads stop spinning before the next one runs), and a system's time is the median per-call time
over its batches. Ratios are taken between medians measured in the same run.
"""
from __future__ import annotations

import gc
import importlib.metadata
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent


# ------------------------------------------------------------------------------------ timing
@dataclass
class Timing:
    """The per-call times (seconds) of one system's batches, and the calls in each batch."""

    calls_per_batch: int
    per_call: list[float] = field(default_factory=list)
    busy_cores: list[float] = field(default_factory=list)  # CPU use during the pause before each batch

    @property
    def median(self) -> float:
        return statistics.median(self.per_call)

    @property
    def iqr(self) -> float:
        """Interquartile range of the batch times (seconds per call)."""
        if len(self.per_call) < 2:
            return 0.0
        q = statistics.quantiles(self.per_call, n=4, method="inclusive")
        return q[2] - q[0]


def time_calls(fn: Callable[[], Any], n: int) -> float:
    """Seconds per call of `fn`, over `n` back-to-back calls.

    A function that runs elsewhere (`bench.worker.Remote`) times itself: `fn.time_calls(n)`.
    """
    remote = getattr(fn, "time_calls", None)
    if remote is not None:
        return remote(n)
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n


def calibrate(fn: Callable[[], Any], batch_s: float, *, max_calls: int = 1_000_000) -> int:
    """The number of calls of `fn` that fills about `batch_s` seconds (at least 1).

    Runs `fn` a few times first, so the warm-up (caches, lazy imports) is not measured.
    """
    t = time_calls(fn, 1)
    n = 1
    while t * n < batch_s / 4 and n < max_calls:  # grow until a measurement is long enough to trust
        n *= 4
        t = time_calls(fn, n)
    return max(1, min(max_calls, round(batch_s / max(t, 1e-9))))


def _cpu_times() -> tuple[float, float] | None:
    """(busy, total) jiffies of all CPUs together, from /proc/stat; None where there is none."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            fields = [float(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)  # idle + iowait
    return sum(fields) - idle, sum(fields)


def pause(seconds: float) -> float | None:
    """Sleeps `seconds`; returns how many cores were busy meanwhile (this process sleeps, so: others).

    Right after a batch, a library's worker threads may still spin for a moment; that is counted
    too. None where /proc/stat is not available.
    """
    before = _cpu_times()
    time.sleep(seconds)
    after = _cpu_times()
    if before is None or after is None or after[1] <= before[1]:
        return None
    return (after[0] - before[0]) / (after[1] - before[1]) * (os.cpu_count() or 1)


class _NoProgress:
    def update(self, n: int = 1) -> None: ...
    def set_postfix_str(self, s: str) -> None: ...
    def close(self) -> None: ...


def progress_bar(total: int, desc: str, enabled: bool = True, unit: str = "batch") -> Any:
    """A tqdm bar on stderr, or a silent stand-in when tqdm is missing or `enabled` is false."""
    if not enabled:
        return _NoProgress()
    try:
        from tqdm import tqdm
    except ImportError:
        return _NoProgress()
    return tqdm(total=total, desc=desc, unit=unit, leave=False, file=sys.stderr)


def time_interleaved(fns: Mapping[str, Callable[[], Any]], *, batches: int, batch_s: float,
                     pause_s: float, progress: Any = None) -> dict[str, Timing]:
    """Times every function in `fns` in `batches` rounds; each round runs one batch of each.

    The order of the systems rotates from round to round, so that none always follows the same
    neighbour. Before every batch: a garbage collection, then a pause of `pause_s` seconds, during
    which the CPU use of other processes is sampled (`Timing.busy_cores`).
    """
    progress = progress or _NoProgress()
    names = list(fns)
    timings = {name: Timing(calibrate(fns[name], batch_s)) for name in names}
    for r in range(batches):
        k = r % len(names) if names else 0
        for name in names[k:] + names[:k]:
            gc.collect()
            busy = pause(pause_s)
            if busy is not None:
                timings[name].busy_cores.append(busy)
            timings[name].per_call.append(time_calls(fns[name], timings[name].calls_per_batch))
            progress.update()
    return timings


# ---------------------------------------------------------------------------------- checking
def leaves(tree: Any) -> list[np.ndarray]:
    """The arrays of a gradient, in a fixed order: dicts by sorted key, sequences in order.

    Accepts NumPy arrays and scalars, and anything with `__array__` (JAX arrays) or
    `detach` (torch tensors).
    """
    if isinstance(tree, Mapping):
        return [a for k in sorted(tree) for a in leaves(tree[k])]
    if isinstance(tree, (list, tuple)):
        return [a for item in tree for a in leaves(item)]
    if hasattr(tree, "detach"):  # torch.Tensor
        tree = tree.detach().cpu().numpy()
    return [np.asarray(tree)]


def compare(reference: Any, got: Any, *, rtol: float, atol_rel: float = 1e-12) -> tuple[bool, float, str]:
    """Whether `got` matches `reference` leaf by leaf: (ok, worst normwise error, what differs).

    A leaf matches under `np.allclose(got, ref, rtol, atol=atol_rel * max|ref|)` with equal
    shapes; the normwise error is max|got - ref| / max|ref|.
    """
    ref_leaves, got_leaves = leaves(reference), leaves(got)
    if len(ref_leaves) != len(got_leaves):
        return False, float("inf"), f"{len(got_leaves)} arrays, expected {len(ref_leaves)}"
    worst = 0.0
    for i, (ref, out) in enumerate(zip(ref_leaves, got_leaves)):
        if ref.shape != out.shape:
            return False, float("inf"), f"leaf {i} has shape {out.shape}, expected {ref.shape}"
        scale = float(np.max(np.abs(ref))) if ref.size else 0.0
        err = float(np.max(np.abs(out.astype(np.float64) - ref))) if ref.size else 0.0
        worst = max(worst, err / scale if scale else err)
        if not np.allclose(out, ref, rtol=rtol, atol=atol_rel * scale):
            return False, worst, f"leaf {i} differs: max |got - ref| = {err:.3g} (max |ref| = {scale:.3g})"
    return True, worst, ""


# -------------------------------------------------------------------------------- formatting
def format_time(seconds: float) -> str:
    """Three significant digits in the largest unit that keeps the number >= 1: 25.8 µs."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if seconds >= scale:
            value = seconds / scale
            break
    else:
        unit, value = "ns", seconds / 1e-9
    return f"{value:.3g} {unit}" if value < 100 else f"{value:.0f} {unit}"


def format_ratio(ratio: float) -> str:
    return f"{ratio:.2f}x" if ratio < 10 else f"{ratio:.3g}x" if ratio < 1000 else f"{ratio:.0f}x"


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def write_atomic(path: Path, text: str) -> None:
    """Writes `text` to `path` through a temporary file, so a killed run leaves no half file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def write_json(path: Path, data: Any) -> None:
    write_atomic(path, json.dumps(data, indent=1, default=str) + "\n")


# ------------------------------------------------------------------------------ environment
VERSIONED = ("bytegrad", "numpy", "bytecode", "numba", "llvmlite", "scipy", "autograd", "jax",
             "jaxlib", "torch", "threadpoolctl")
ENV_VARS = ("OPENBLAS_NUM_THREADS", "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OMP_NUM_THREADS",
            "MKL_NUM_THREADS", "NUMBA_NUM_THREADS", "XLA_FLAGS", "JAX_PLATFORMS",
            "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")


def package_versions(names: Iterable[str] = VERSIONED) -> dict[str, str | None]:
    versions: dict[str, str | None] = {}
    for name in names:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return None


def _git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(REPO), "describe", "--always", "--dirty", "--abbrev=12"],
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def thread_pools() -> list[dict[str, Any]]:
    """The native thread pools loaded in this process (BLAS, OpenMP), per threadpoolctl."""
    try:
        import threadpoolctl
    except ImportError:
        return []
    keep = ("user_api", "internal_api", "prefix", "version", "num_threads", "threading_layer", "architecture")
    return [{k: pool.get(k) for k in keep} for pool in threadpoolctl.threadpool_info()]


def numpy_blas_threads() -> int | None:
    """How many threads NumPy's own BLAS uses (the pool loaded from numpy's folder)."""
    try:
        import threadpoolctl
    except ImportError:
        return None
    for pool in threadpoolctl.threadpool_info():
        if pool["user_api"] == "blas" and "numpy" in pool.get("filepath", ""):
            return int(pool["num_threads"])
    return None


def machine_info() -> dict[str, Any]:
    """Versions, thread pools, machine and environment: what a reader needs to trust a ratio."""
    try:
        affinity = len(os.sched_getaffinity(0))
    except AttributeError:
        affinity = None
    blas = {}
    try:
        blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]  # type: ignore[index]
    except Exception:  # noqa: BLE001 - older NumPy: no mode="dicts"; the thread pools below still tell
        pass
    return {
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "cpu": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpus_usable": affinity,
        "memory_gib": _memory_gib(),
        "versions": package_versions(),
        "numpy_blas": {k: blas.get(k) for k in ("name", "version", "openblas configuration") if k in blas},
        "thread_pools": thread_pools(),
        "env": {k: os.environ.get(k) for k in ENV_VARS},
        "load_average": os.getloadavg() if hasattr(os, "getloadavg") else None,
        "git": _git_commit(),
    }


def _describe_pool(pool: Mapping[str, Any]) -> str:
    name = " ".join(str(pool[k]) for k in ("internal_api", "version") if pool.get(k))
    details = [str(pool["architecture"])] if pool.get("architecture") else []
    details.append(f"{pool['num_threads']} threads")
    return f"{name} ({', '.join(details)})"


def _loads(loads: Sequence[float] | None) -> str:
    return ", ".join(f"{x:.2f}" for x in loads) if loads else "n/a"


def describe_machine(info: Mapping[str, Any]) -> list[str]:
    """A few markdown lines summarising `machine_info()` for a report header."""
    versions = ", ".join(f"{k} {v}" for k, v in info["versions"].items() if v)
    pools = "; ".join(_describe_pool(p) for p in info["thread_pools"])
    env = ", ".join(f"{k}={v}" for k, v in info["env"].items() if v is not None) or "none set"
    return [
        f"- Machine: {info['cpu']}, {info['cpus_usable']} usable CPUs, {info['memory_gib']} GiB; {info['platform']}",
        f"- Python {info['python']}; {versions}",
        f"- Thread pools: {pools or 'n/a'}",
        f"- Thread/BLAS env vars: {env}",
        f"- Load average (1, 5, 15 min) when the run ended: {_loads(info['load_average'])}; the benchmark itself "
        "keeps about one core busy, so more than that means another process competed for the CPUs",
        f"- Source: {info['git'] or 'unknown revision'}",
    ]
