"""Each system timed alone in a fresh process, to check the side-by-side timing (bench.core --alone).

The side-by-side run loads every system into one process, and a system may run slower there
than on its own (another library's threads, a dispatch thread that must be woken: see
bench/results/jax-fairness.md). So for the small cases, where such overheads weigh most, each
system is also timed in a fresh worker process (bench.worker) that loads nothing but it: the
same calibration, batches, garbage collections and pauses as in the side-by-side run. Where the
two medians differ by more than `TOLERANCE` the row is flagged in the report: a comparison is
only worth quoting when the system is measured at its best.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from bench import harness

#: the largest relative difference between the side-by-side and the alone median that is not flagged
TOLERANCE = 0.2
#: a case is small when its hand-written NumPy gradient takes less than this (seconds per call)
SMALL_S = 1e-3
#: systems that already run in a worker of their own (bench.worker), so are alone by construction
ALREADY_ALONE = frozenset({"bytegrad (no numba)"})
MARK = "†"


def differs(in_process: float, alone: float, tolerance: float = TOLERANCE) -> bool:
    """Whether two figures (medians, or ratios to NumPy) differ by more than `tolerance`, relative
    to the smaller one.

    Symmetric: 100 µs against 125 µs differs by 25% whichever was measured alone.
    """
    if in_process <= 0 or alone <= 0:
        raise ValueError(f"figures must be positive, got {in_process!r} and {alone!r}")
    return max(in_process, alone) / min(in_process, alone) - 1.0 > tolerance


def is_small(reference_median_s: float | None, limit_s: float = SMALL_S) -> bool:
    """Whether a case is small enough to be checked alone (by its hand-written NumPy median)."""
    return reference_median_s is not None and reference_median_s < limit_s


def time_alone(system: str, case: Any, seed: int, direction: str, reference: Any, *, batches: int,
               batch_s: float, pause_s: float) -> tuple[harness.Timing, harness.Timing]:
    """`system` on `case` timed in a fresh worker with nothing else loaded, and the reference beside it.

    The inputs are made again from `seed`, as bench.core made them for the side-by-side run.
    Calibration and each of the system's batches run in the worker; between them this process
    runs a batch of `reference` (hand-written NumPy, already prepared here), each batch after a
    pause, so that the ratio of the two medians is measured side by side, as in the main run, and
    a change of the machine's load between the two runs cancels out of the comparison.
    Returns (the system's timing alone, the reference's timing meanwhile).
    """
    from bench.worker import Remote

    params, data = case.inputs(np.random.default_rng(seed))
    remote = Remote.alone(system, case, params, data, direction)
    try:
        remote()  # the first call (a jit, a capture) is not timed, as in bench.core.check_systems
        timings = {"alone": harness.Timing(remote.calibrate(batch_s)),
                   "reference": harness.Timing(harness.calibrate(reference, batch_s))}
        timed = {"alone": remote.time_calls, "reference": lambda n: harness.time_calls(reference, n)}
        for r in range(batches):
            for name in (("alone", "reference") if r % 2 == 0 else ("reference", "alone")):
                busy = harness.pause(pause_s)
                if busy is not None:
                    timings[name].busy_cores.append(busy)
                timings[name].per_call.append(timed[name](timings[name].calls_per_batch))
        return timings["alone"], timings["reference"]
    finally:
        remote.close()


def footnote(flagged: list[tuple[str, str, float, float]]) -> list[str]:
    """Markdown lines explaining the flagged cells: (case name, system, ratio side by side, ratio alone) each."""
    if not flagged:
        return []
    lines = [f"{MARK} Timed alone in a fresh process (nothing else loaded), this system's ratio to NumPy differs",
             f"from its ratio in the side-by-side run by more than {TOLERANCE:.0%}; the ratio shown is the",
             "side-by-side one, and is not worth quoting until the two agree:", ""]
    lines += [f"- {case} / {system}: {harness.format_ratio(together)} side by side, "
              f"{harness.format_ratio(alone)} alone" for case, system, together, alone in flagged]
    return lines + [""]
