"""The core benchmark: gradient time of each case as a ratio to a hand-written NumPy gradient.

    python -m bench.core --quick      # the cases with targets, fewer batches (`make bench`)
    python -m bench.core --full       # every case in bench/cases.py (`make bench-full`)

Writes bench/results/core.md and core.json (versions, thread pools, machine, every batch time).
Every system's gradient is checked against the hand-written one before it is timed; a system
that is not installed, raises, or gives a wrong gradient is listed, not timed.
"""
from __future__ import annotations

import argparse
import copy
import datetime
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

if __package__ in (None, ""):  # run as `python bench/core.py`: make `bench` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import harness
from bench.cases import Case, get_cases
from bench.systems import REFERENCE, SYSTEMS, System, Unavailable, torch_threads

RESULTS = Path(__file__).resolve().parent / "results"
MODES = {  # batches per system, seconds per batch
    "quick": (7, 0.05),
    "full": (15, 0.2),
}


@dataclass
class Row:
    case: Case
    system: str
    status: str                       # "ok", "unavailable", "error", "wrong gradient"
    detail: str = ""
    timing: harness.Timing | None = None
    max_error: float | None = None
    ratio: float | None = None
    trace: str = ""                   # the traceback of an error (JSON only)


def check_systems(case: Case, systems: list[System], seed: int) -> tuple[list[Row], dict[str, Any]]:
    """Prepares every system for `case` and checks its gradient against the reference.

    Returns one row per system, and the timed function of each system that passed.
    """
    params, data = case.inputs(np.random.default_rng(seed))
    reference = case.grad(copy.deepcopy(params), *copy.deepcopy(data))
    rows, fns = [], {}
    for system in systems:
        if not system.available():
            rows.append(Row(case, system.name, "unavailable", f"{system.module} is not installed"))
            continue
        try:  # each system gets its own copy of the inputs: none can disturb another's
            fn = system.prepare(case, copy.deepcopy(params), copy.deepcopy(data))
            got = fn()
        except Unavailable as exc:
            rows.append(Row(case, system.name, "unavailable", str(exc)))
            continue
        except Exception as exc:  # a failing peer (or an unfinished bytegrad) must not stop the run
            first = (str(exc).strip().splitlines() or [""])[0]
            rows.append(Row(case, system.name, "error", f"{type(exc).__name__}: {first}",
                            trace=traceback.format_exc()))
            continue
        ok, err, why = harness.compare(reference, got, rtol=case.rtol, atol_rel=case.atol_rel)
        if not ok:
            rows.append(Row(case, system.name, "wrong gradient", why, max_error=err))
            continue
        rows.append(Row(case, system.name, "ok", max_error=err))
        fns[system.name] = fn
    return rows, fns


def run(cases: list[Case], systems: list[System], *, batches: int, batch_s: float, pause_s: float,
        seed: int, progress: bool) -> list[Row]:
    bar = harness.progress_bar(len(cases) * len(systems) * batches, "bench.core", progress)
    rows: list[Row] = []
    try:
        for case in cases:
            bar.set_postfix_str(case.key)
            case_rows, fns = check_systems(case, systems, seed)
            bar.update((len(systems) - len(fns)) * batches)  # untimed systems
            timings = harness.time_interleaved(fns, batches=batches, batch_s=batch_s,
                                               pause_s=pause_s, progress=bar)
            ref = timings.get(REFERENCE)
            for row in case_rows:
                row.timing = timings.get(row.system)
                if row.timing and ref:
                    row.ratio = row.timing.median / ref.median
            rows += case_rows
    finally:
        bar.close()
    return rows


# ---------------------------------------------------------------------------------- reports
def targets_table(rows: list[Row]) -> tuple[str, bool]:
    """The targets table and whether every target was met (a target not measured is not met)."""
    measured = {row.case.key: row for row in rows if row.system == "bytegrad"}
    lines, all_met = [], True
    for case in dict.fromkeys(row.case for row in rows):
        if case.target is None:
            continue
        row = measured.get(case.key)
        if row is None or row.ratio is None:
            verdict, shown = f"FAIL ({row.status if row else 'not run'})", "n/a"
        else:
            verdict = "pass" if row.ratio <= case.target else "FAIL"
            shown = harness.format_ratio(row.ratio)
        all_met &= verdict == "pass"
        lines.append((case.name, f"<= {case.target:.1f}x", shown, verdict))
    return harness.markdown_table(("case", "target", "bytegrad", "result"), lines), all_met


def results_table(rows: list[Row]) -> str:
    lines = []
    for row in rows:
        if row.timing is None:
            continue
        t = row.timing
        lines.append((row.case.name, row.system, harness.format_time(t.median),
                      f"{100 * t.iqr / t.median:.0f}%", harness.format_ratio(row.ratio) if row.ratio else "n/a"))
    return harness.markdown_table(("case", "system", "median", "spread (IQR)", "ratio to NumPy"), lines)


def report(rows: list[Row], info: dict[str, Any], *, mode: str, command: str, batches: int,
           batch_s: float, pause_s: float) -> tuple[str, bool]:
    targets, all_met = targets_table(rows)
    untimed = [f"- {r.case.name} / {r.system}: {r.status}" + (f": {r.detail}" if r.detail else "")
               for r in rows if r.timing is None]
    date = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    text = [
        "# Core benchmark: gradient time relative to a hand-written NumPy gradient",
        "",
        f"`{command}` ({mode} mode), {date}.",
        "",
        f"Every time is a whole gradient call (forward + backward), float64 unless marked. The systems",
        f"run side by side in one process: in each of {batches} rounds every system runs one batch of",
        f"back-to-back calls (about {harness.format_time(batch_s)}), each after a garbage collection and a "
        f"{harness.format_time(pause_s)} pause,",
        "in an order that rotates from round to round. *median*: the median per-call time over the",
        "batches; *spread*: the interquartile range of the batch times over the median; *ratio*: the",
        "median over the hand-written NumPy median of the same case and run. Every timed gradient",
        "first matched the hand-written one (`np.allclose`, rtol 1e-6; 1e-4 for float32). Ratios",
        "repeat within about 20% from run to run on these 2-core machines; read smaller differences",
        "as noise.",
        "",
        "## Targets (bytegrad, ratio to NumPy)",
        "",
        targets,
        "",
        "## Results",
        "",
        results_table(rows),
        "",
    ]
    if untimed:
        text += ["## Not timed", "", *untimed, ""]
    text += ["## Machine", "", *harness.describe_machine(info),
             "- Full details, and every batch time: `core.json` beside this file.", ""]
    return "\n".join(text), all_met


def to_json(rows: list[Row], info: dict[str, Any], **settings: Any) -> dict[str, Any]:
    return {
        "settings": settings,
        "machine": info,
        "results": [
            {
                "case": r.case.key, "case_name": r.case.name, "system": r.system, "status": r.status,
                "detail": r.detail, "traceback": r.trace or None, "max_normwise_error": r.max_error,
                "median_s": r.timing.median if r.timing else None,
                "iqr_s": r.timing.iqr if r.timing else None,
                "ratio_to_numpy": r.ratio, "target": r.case.target if r.system == "bytegrad" else None,
                "calls_per_batch": r.timing.calls_per_batch if r.timing else None,
                "batch_per_call_s": r.timing.per_call if r.timing else None,
            }
            for r in rows
        ],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.core", description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--quick", dest="mode", action="store_const", const="quick",
                      help="the cases with targets, fewer batches (default)")
    mode.add_argument("--full", dest="mode", action="store_const", const="full",
                      help="every case, more and longer batches")
    parser.add_argument("--cases", nargs="+", metavar="KEY", help="only these cases (see bench/cases.py)")
    parser.add_argument("--systems", nargs="+", metavar="NAME",
                        help=f"only these systems (the reference is always included): "
                             f"{', '.join(s.name for s in SYSTEMS[1:])}")
    parser.add_argument("--batches", type=int, help="batches per system and case")
    parser.add_argument("--batch-seconds", type=float, help="target length of one batch")
    parser.add_argument("--pause", type=float, default=0.2, help="seconds of pause before each batch")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=RESULTS, help="folder for core.md and core.json")
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument("--check-targets", action="store_true",
                        help="exit with status 1 when bytegrad misses a target")
    args = parser.parse_args(argv)
    args.mode = args.mode or "quick"
    batches, batch_s = MODES[args.mode]
    batches, batch_s = args.batches or batches, args.batch_seconds or batch_s

    systems = [s for s in SYSTEMS if s.name == REFERENCE or not args.systems or s.name in args.systems]
    if args.systems and len(systems) != len(set(args.systems) | {REFERENCE}):
        parser.error(f"unknown system in {args.systems}; known: {[s.name for s in SYSTEMS]}")
    cases = get_cases(args.cases, quick=args.mode == "quick")

    threads = torch_threads(harness.numpy_blas_threads())  # torch gets as many threads as NumPy's BLAS
    rows = run(cases, systems, batches=batches, batch_s=batch_s, pause_s=args.pause, seed=args.seed,
               progress=not args.no_progress)
    info = harness.machine_info()
    info["torch_threads"] = threads
    command = "python -m bench.core " + " ".join(argv if argv is not None else sys.argv[1:])
    text, all_met = report(rows, info, mode=args.mode, command=command.strip(), batches=batches,
                           batch_s=batch_s, pause_s=args.pause)
    settings = dict(mode=args.mode, command=command.strip(), batches=batches, batch_seconds=batch_s,
                    pause_seconds=args.pause, seed=args.seed,
                    date=datetime.datetime.now().astimezone().isoformat(timespec="seconds"))
    harness.write_atomic(args.out / "core.md", text)
    harness.write_json(args.out / "core.json", to_json(rows, info, **settings))
    print(text)
    print(f"written: {args.out / 'core.md'}, {args.out / 'core.json'}", file=sys.stderr)
    return 1 if args.check_targets and not all_met else 0


if __name__ == "__main__":
    sys.exit(main())
