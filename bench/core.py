"""The core benchmark: time of each case's gradient and loss, as a ratio to hand-written NumPy.

    python -m bench.core --quick      # the small cases, fewer batches (`make bench`)
    python -m bench.core --full       # every case in bench/cases.py (`make bench-full`)

Both directions are timed: reverse = the whole gradient call (forward + backward), forward = the
plain loss call. Writes bench/results/core.md and core.json for --full, quick.md and quick.json
for --quick (versions, thread pools, machine, every batch time). When the JSON file already
exists it is kept as <name>.previous.json and its medians fill the Previous and
Current/Previous columns (a quick run with no quick.json of its own compares with core.json).
Every system's gradient (and loss) is checked against the hand-written one before it is timed;
a system that is not installed, raises, or gives a wrong result is listed, not timed.
"""
from __future__ import annotations

import argparse
import copy
import datetime
import json
import os
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

if __package__ in (None, ""):  # run as `python bench/core.py`: make `bench` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import alone as alone_check
from bench import harness
from bench.cases import CASES, Case, cast, get_cases
from bench.systems import DIRECTIONS, REFERENCE, SYSTEMS, System, Unavailable, torch_threads

RESULTS = Path(__file__).resolve().parent / "results"
MODES = {  # batches per system, seconds per batch
    "quick": (7, 0.05),
    "full": (15, 0.2),
}


@dataclass
class Row:
    case: Case
    direction: str                    # "reverse" (gradient) or "forward" (loss)
    system: str
    status: str                       # "ok", "unavailable", "error", "wrong gradient"
    detail: str = ""
    timing: harness.Timing | None = None
    max_error: float | None = None
    ratio: float | None = None
    trace: str = ""                   # the traceback of an error (JSON only)
    previous: float | None = None     # median of the same case, direction and system in the previous run
    load: float | None = None         # 1-minute load average when the case and direction started
    others: float | None = None       # median cores busy with other processes during this case's pauses
    alone_s: float | None = None      # median of the same system timed alone in a fresh process (bench.alone)
    alone_ratio: float | None = None  # that median over hand-written NumPy's, timed beside it meanwhile

    @property
    def flagged(self) -> bool:
        """Whether the side-by-side and the alone ratio to NumPy differ by more than bench.alone.TOLERANCE."""
        return (self.alone_ratio is not None and self.ratio is not None
                and alone_check.differs(self.ratio, self.alone_ratio))


def check_systems(case: Case, direction: str, systems: list[System], seed: int) -> tuple[list[Row], dict[str, Any]]:
    """Prepares every system for `case` in `direction` and checks its result against the reference.

    Returns one row per system, and the timed function of each system that passed.
    """
    params, data = case.inputs(np.random.default_rng(seed))
    reference_fn = case.grad if direction == "reverse" else case.loss
    if case.dtype == "float32":  # checked against float64 arithmetic on the same float32 inputs
        reference = reference_fn(cast(params, np.float32, np.float64), *cast(data, np.float32, np.float64))
    else:
        reference = reference_fn(copy.deepcopy(params), *copy.deepcopy(data))
    rows, fns = [], {}
    for system in systems:
        if not system.available():
            rows.append(Row(case, direction, system.name, "unavailable", f"{system.module} is not installed"))
            continue
        try:  # each system gets its own copy of the inputs: none can disturb another's
            fn = system.prepare(case, copy.deepcopy(params), copy.deepcopy(data), direction)
            got = fn()
        except Unavailable as exc:
            rows.append(Row(case, direction, system.name, "unavailable", str(exc)))
            continue
        except Exception as exc:  # noqa: BLE001 - a failing peer (or an unfinished bytegrad) must not stop the run
            first = (str(exc).strip().splitlines() or [""])[0]
            kind = getattr(exc, "remote_type", type(exc).__name__)
            trace = getattr(exc, "remote_traceback", None) or traceback.format_exc()
            rows.append(Row(case, direction, system.name, "error", f"{kind}: {first}", trace=trace))
            continue
        ok, err, why = harness.compare(reference, got, rtol=case.rtol, atol_rel=case.atol_rel)
        if not ok:
            what = "wrong gradient" if direction == "reverse" else "wrong loss"
            rows.append(Row(case, direction, system.name, what, why, max_error=err))
            continue
        rows.append(Row(case, direction, system.name, "ok", max_error=err))
        fns[system.name] = fn
    return rows, fns


def check_alone(case_rows: list[Row], reference: Callable[[], Any], seed: int, *, batches: int, batch_s: float,
                pause_s: float, bar: Any) -> None:
    """Times each timed system of one case and direction alone in a fresh process (bench.alone)."""
    for row in case_rows:
        if row.timing is None or row.system == REFERENCE or row.system in alone_check.ALREADY_ALONE:
            continue
        bar.set_postfix_str(f"{row.case.key} {row.direction} {row.system} alone")
        try:
            by_itself, ref = alone_check.time_alone(row.system, row.case, seed, row.direction, reference,
                                                    batches=batches, batch_s=batch_s, pause_s=pause_s)
            row.alone_s, row.alone_ratio = by_itself.median, by_itself.median / ref.median
        except Exception as exc:  # noqa: BLE001 (the side-by-side figure stands; say why it is unchecked)
            row.detail = (row.detail + "; " if row.detail else "") + f"not timed alone: {type(exc).__name__}: {exc}"


def run(cases: list[Case], directions: list[str], systems: list[System], *, batches: int, batch_s: float,
        pause_s: float, seed: int, progress: bool, done: list[Row] | None = None,
        checkpoint: Callable[[list[Row]], None] | None = None, alone: str = "none") -> list[Row]:
    """Checks and times every case in every direction; `done`: rows of a resumed run, not run again.

    `checkpoint(rows)` is called after each case and direction, with every row so far. `alone`:
    "small" times each system again alone in a fresh process on the small cases (bench.alone),
    "all" on every case, "none" never.
    """
    rows: list[Row] = list(done or [])
    finished = {(r.case.key, r.direction) for r in rows}
    todo = [(case, d) for case in cases for d in directions if (case.key, d) not in finished]
    bar = harness.progress_bar(len(todo) * len(systems) * batches, "bench.core", progress)
    try:
        for case, direction in todo:
            bar.set_postfix_str(f"{case.key} {direction}")
            load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
            case_rows, fns = check_systems(case, direction, systems, seed)
            bar.update((len(systems) - len(fns)) * batches)  # untimed systems
            timings = harness.time_interleaved(fns, batches=batches, batch_s=batch_s,
                                               pause_s=pause_s, progress=bar)
            ref = timings.get(REFERENCE)
            busy = [b for t in timings.values() for b in t.busy_cores]
            others = float(np.median(busy)) if busy else None
            for row in case_rows:
                row.load = load
                row.others = others
                row.timing = timings.get(row.system)
                if row.timing and ref:
                    row.ratio = row.timing.median / ref.median
            if ref and (alone == "all" or (alone == "small" and alone_check.is_small(ref.median))):
                check_alone(case_rows, fns[REFERENCE], seed, batches=min(batches, 5), batch_s=batch_s,
                            pause_s=pause_s, bar=bar)
            rows += case_rows
            if checkpoint is not None:
                checkpoint(rows)
    finally:
        bar.close()
    order = {(c.key, d): i for i, (c, d) in enumerate((c, d) for c in cases for d in directions)}
    return sorted(rows, key=lambda r: order.get((r.case.key, r.direction), len(order)))  # stable: systems keep their order


def rows_from_json(data: dict[str, Any]) -> list[Row]:
    """The rows of a results (or partial results) JSON file, for --resume."""
    cases = {c.key: c for c in CASES}
    rows = []
    for r in data.get("results", []):
        case = cases.get(r["case"])
        if case is None:
            continue
        timing = None
        if r.get("batch_per_call_s"):
            timing = harness.Timing(r["calls_per_batch"], list(r["batch_per_call_s"]), list(r.get("batch_busy_cores") or []))
        rows.append(Row(case, r.get("direction", "reverse"), r["system"], r["status"], r.get("detail", ""), timing,
                        r.get("max_normwise_error"), r.get("ratio_to_numpy"), r.get("traceback") or "",
                        None, r.get("load_average_1min_at_start"), r.get("other_processes_busy_cores_median"),
                        r.get("alone_median_s"), r.get("alone_ratio_to_numpy")))
    return rows


# --------------------------------------------------------------------------------- previous
@dataclass
class Previous:
    path: Path
    medians: dict[tuple[str, str, str], float]   # (case key, direction, system) -> median seconds
    settings: dict[str, Any]
    git: str | None

    @classmethod
    def load(cls, path: Path) -> "Previous | None":
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        medians = {(r["case"], r.get("direction", "reverse"), r["system"]): r["median_s"]
                   for r in data.get("results", []) if r.get("median_s")}
        return cls(path, medians, data.get("settings", {}), data.get("machine", {}).get("git"))

    def describe(self) -> str:
        s = self.settings
        when = s.get("date", "unknown date")
        return (f"`{self.path.name}` ({s.get('mode', '?')} mode, {when}, "
                f"source {self.git or 'unknown revision'})")


def attach_previous(rows: list[Row], previous: Previous | None) -> None:
    if previous is None:
        return
    for row in rows:
        row.previous = previous.medians.get((row.case.key, row.direction, row.system))


# ---------------------------------------------------------------------------------- reports
# ---------------------------------------------------------------------------------- reports
def targets_table(rows: list[Row]) -> tuple[str, bool]:
    """The targets table and whether every target was met (a target not measured is not met)."""
    measured = {row.case.key: row for row in rows if row.system == "bytegrad" and row.direction == "reverse"}
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


_SHORT_STATUS = {"unavailable": "n/a", "error": "error", "wrong gradient": "wrong", "wrong loss": "wrong"}


def glance_table(rows: list[Row], direction: str) -> str:
    """Cases down, systems across, the ratio to NumPy in each cell."""
    rows = [r for r in rows if r.direction == direction]
    systems = list(dict.fromkeys(r.system for r in rows))
    cells: dict[str, dict[str, str]] = {}
    others: dict[str, str] = {}
    for r in rows:
        others[r.case.name] = f"{r.others:.2f}" if r.others is not None else "n/a"
        cell = harness.format_ratio(r.ratio) if r.ratio is not None else _SHORT_STATUS.get(r.status, r.status)
        if r.flagged:
            cell += " " + alone_check.MARK
        if r.system == REFERENCE and r.timing:
            cell = harness.format_time(r.timing.median)
        cells.setdefault(r.case.name, {})[r.system] = cell
    headers = ["case"] + [f"{s} (time)" if s == REFERENCE else s for s in systems] + ["other load"]
    return harness.markdown_table(headers, [[case] + [by.get(s, "") for s in systems] + [others[case]]
                                            for case, by in cells.items()])


def flagged_rows(rows: list[Row], direction: str) -> list[tuple[str, str, float, float]]:
    """(case name, system, side-by-side ratio, alone ratio) of each flagged row, for the footnote."""
    return [(r.case.name, r.system, r.ratio, r.alone_ratio) for r in rows
            if r.direction == direction and r.flagged and r.ratio is not None and r.alone_ratio is not None]


def results_table(rows: list[Row], direction: str, with_previous: bool) -> str:
    with_alone = any(r.alone_s is not None for r in rows if r.direction == direction)
    lines = []
    for row in rows:
        if row.timing is None or row.direction != direction:
            continue
        t = row.timing
        line = [row.case.name, row.system, harness.format_time(t.median), f"{100 * t.iqr / t.median:.0f}%",
                harness.format_ratio(row.ratio) if row.ratio else "n/a"]
        if with_alone:
            line.append("" if row.alone_s is None or row.alone_ratio is None else
                        f"{harness.format_time(row.alone_s)} ({harness.format_ratio(row.alone_ratio)})"
                        + (" " + alone_check.MARK if row.flagged else ""))
        if with_previous:
            line += ([harness.format_time(row.previous), f"{t.median / row.previous:.2f}"]
                     if row.previous else ["", ""])
        lines.append(line)
    headers = ["case", "system", "median", "spread (IQR)", "ratio to NumPy"]
    if with_alone:
        headers.append("alone (fresh process): median (ratio)")
    if with_previous:
        headers += ["Previous", "Current/Previous"]
    return harness.markdown_table(headers, lines)


def report(rows: list[Row], info: dict[str, Any], *, mode: str, command: str, batches: int,
           batch_s: float, pause_s: float, previous: Previous | None) -> tuple[str, bool]:
    targets, all_met = targets_table(rows)
    untimed = [f"- {r.case.name} / {r.direction} / {r.system}: {r.status}" + (f": {r.detail}" if r.detail else "")
               for r in rows if r.timing is None]
    date = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    directions = list(dict.fromkeys(r.direction for r in rows))
    with_previous = previous is not None and any(r.previous for r in rows)
    text = [
        "# Core benchmark: time relative to hand-written NumPy",
        "",
        f"`{command}` ({mode} mode), {date}.",
        "",
        "*reverse*: a whole gradient call (forward + backward) of the parameters; the reference is a",
        "hand-written NumPy gradient. *forward*: the plain loss call of each system (NumPy: the loss",
        "itself; bytegrad: calling the decorated function, which runs the original code; torch under",
        "`no_grad`; jax-jit: the jitted loss). float64 unless marked float32. *bytegrad (no numba)*:",
        "bytegrad in a worker process started with `BYTEGRAD_DISABLE_NUMBA=1`. JAX runs its CPU computations",
        "inline (`jax_cpu_enable_async_dispatch=False`): every timed call blocks on its result, and the",
        "default hand-off to a dispatch thread made small calls 3-5x slower on a loaded machine",
        "(bench/results/jax-fairness.md).",
        "",
        f"The systems run side by side in one process (bytegrad (no numba) in its worker): in each of {batches}",
        f"rounds every system runs one batch of back-to-back calls (about {harness.format_time(batch_s)}, at least",
        f"one call), each after a garbage collection and a {harness.format_time(pause_s)} pause, in an order that",
        "rotates from round to round. *median*: the median per-call time over the batches; *spread*: the",
        "interquartile range of the batch times over the median; *ratio*: the median over the",
        "hand-written NumPy median of the same case, direction and run. Every timed result first",
        "matched the hand-written one (`np.allclose`, rtol 1e-6); float32 results, NumPy's own",
        "included, were checked against float64 arithmetic on the same inputs (rtol 1e-4; 1e-3 for",
        "conv). Ratios repeat within about 20% from run to run on these 2-core machines; read",
        "smaller differences as noise. Conv cases: valid padding, cross-correlation, NCHW input;",
        "batch 32 (not 128) for c=16.",
        "",
        "*other load*: how many of the CPUs other processes kept busy while the benchmark paused",
        "before each batch (median over the case's batches, from /proc/stat). Near 0 the machine was",
        "quiet. Where it is near 1, another process held a core: two-thread BLAS and OpenMP code",
        "(NumPy's `@`, torch) then waits for its second thread and can run several times slower, so",
        "read those rows with care.",
    ]
    if any(r.alone_s is not None for r in rows):
        text += ["", "*alone (fresh process)*: the small cases' systems timed again, each in a fresh process that",
                 "loads nothing else (the same calibration, garbage collections and pauses; at most 5 batches),",
                 "right after the side-by-side batches, alternating with batches of hand-written NumPy in the",
                 f"main process; the ratio is over that NumPy median. {alone_check.MARK} marks a ratio that differs from",
                 f"the side-by-side one by more than {alone_check.TOLERANCE:.0%} (bench/alone.py)."]
    if with_previous:
        assert previous is not None
        text += ["", f"*Previous*: the median of the same case, direction and system in {previous.describe()};",
                 "*Current/Previous*: this run's median over it (below 1: faster now). Blank where the",
                 "previous run did not time that row."]
    text += [
        "",
        "## Targets (bytegrad, reverse, ratio to NumPy)",
        "",
        targets,
        "",
    ]
    for direction in directions:
        what = "gradient" if direction == "reverse" else "loss"
        text += [f"## At a glance: {direction} ({what}), ratio to NumPy", "",
                 glance_table(rows, direction), "", *alone_check.footnote(flagged_rows(rows, direction))]
    for direction in directions:
        what = "gradient" if direction == "reverse" else "loss"
        text += [f"## Results: {direction} ({what})", "", results_table(rows, direction, with_previous), ""]
    if untimed:
        text += ["## Not timed", "", *untimed, ""]
    loads = [r.load for r in rows if r.load is not None]
    load_line = (f"- 1-minute load average at the start of each case: {min(loads):.2f} to {max(loads):.2f}"
                 if loads else "")
    text += ["## Machine", "", *harness.describe_machine(info), *([load_line] if load_line else []),
             f"- torch intra-op threads: {info.get('torch_threads')} (set to NumPy's BLAS thread count)",
             "- Full details, and every batch time: the JSON file beside this one.", ""]
    return "\n".join(text), all_met


def to_json(rows: list[Row], info: dict[str, Any], **settings: Any) -> dict[str, Any]:
    return {
        "settings": settings,
        "machine": info,
        "results": [
            {
                "case": r.case.key, "case_name": r.case.name, "dtype": r.case.dtype, "direction": r.direction,
                "system": r.system, "status": r.status,
                "detail": r.detail, "traceback": r.trace or None, "max_normwise_error": r.max_error,
                "median_s": r.timing.median if r.timing else None,
                "iqr_s": r.timing.iqr if r.timing else None,
                "ratio_to_numpy": r.ratio,
                "target": r.case.target if r.system == "bytegrad" and r.direction == "reverse" else None,
                "previous_median_s": r.previous,
                "load_average_1min_at_start": r.load,
                "other_processes_busy_cores_median": r.others,
                "alone_median_s": r.alone_s,
                "alone_ratio_to_numpy": r.alone_ratio,
                "alone_differs": r.flagged if r.alone_ratio is not None else None,
                "batch_busy_cores": r.timing.busy_cores if r.timing else None,
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
                      help="the small cases, fewer batches (default)")
    mode.add_argument("--full", dest="mode", action="store_const", const="full",
                      help="every case, more and longer batches")
    parser.add_argument("--cases", nargs="+", metavar="KEY", help="only these cases (see bench/cases.py)")
    parser.add_argument("--systems", nargs="+", metavar="NAME",
                        help=f"only these systems (the reference is always included): "
                             f"{', '.join(repr(s.name) for s in SYSTEMS[1:])}")
    parser.add_argument("--directions", nargs="+", choices=DIRECTIONS, default=list(DIRECTIONS),
                        help="reverse (gradient), forward (loss), or both (default)")
    parser.add_argument("--batches", type=int, help="batches per system and case")
    parser.add_argument("--batch-seconds", type=float, help="target length of one batch")
    parser.add_argument("--pause", type=float, default=0.2, help="seconds of pause before each batch")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=RESULTS, help="folder for the results")
    parser.add_argument("--name", help="file name stem of the results (default: core for --full, quick for --quick)")
    parser.add_argument("--previous", type=Path,
                        help="results JSON for the Previous columns (default: the one this run replaces)")
    parser.add_argument("--no-previous", action="store_true", help="no Previous columns")
    parser.add_argument("--resume", action="store_true",
                        help="continue an interrupted run from <name>.partial.json (written after every case)")
    parser.add_argument("--alone", choices=("none", "small", "all"), default="none",
                        help="also time each system alone in a fresh process, on the small cases (hand-written "
                             "NumPy under 1 ms) or all, and flag ratios to NumPy that differ by more than 20%%")
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument("--check-targets", action="store_true",
                        help="exit with status 1 when bytegrad misses a target")
    args = parser.parse_args(argv)
    args.mode = args.mode or "quick"
    batches, batch_s = MODES[args.mode]
    batches, batch_s = args.batches or batches, args.batch_seconds or batch_s
    name = args.name or ("core" if args.mode == "full" else "quick")
    json_path, md_path = args.out / f"{name}.json", args.out / f"{name}.md"

    systems = [s for s in SYSTEMS if s.name == REFERENCE or not args.systems or s.name in args.systems]
    if args.systems and len(systems) != len(set(args.systems) | {REFERENCE}):
        parser.error(f"unknown system in {args.systems}; known: {[s.name for s in SYSTEMS]}")
    cases = get_cases(args.cases, quick=args.mode == "quick")
    directions = [d for d in DIRECTIONS if d in args.directions]

    previous = None
    if not args.no_previous:
        candidates = [args.previous] if args.previous else [json_path, args.out / "core.json"]
        previous = next((p for p in map(Previous.load, filter(None, candidates)) if p), None)

    partial_path = args.out / f"{name}.partial.json"
    settings = dict(mode=args.mode, batches=batches, batch_seconds=batch_s, pause_seconds=args.pause, seed=args.seed,
                    alone=args.alone)
    done: list[Row] = []
    if args.resume and partial_path.exists():
        partial = json.loads(partial_path.read_text(encoding="utf-8"))
        if any(partial["settings"].get(k) != v for k, v in settings.items()):
            parser.error(f"{partial_path} was made with other settings: {partial['settings']}")
        wanted = {s.name for s in systems}
        keys = {c.key for c in cases}
        done = [r for r in rows_from_json(partial)
                if r.system in wanted and r.case.key in keys and r.direction in directions]
        print(f"resuming: {len({(r.case.key, r.direction) for r in done})} case-directions from {partial_path}",
              file=sys.stderr)

    def checkpoint(rows: list[Row]) -> None:
        harness.write_json(partial_path, to_json(rows, {}, **settings))

    threads = torch_threads(harness.numpy_blas_threads())  # torch gets as many threads as NumPy's BLAS
    rows = run(cases, directions, systems, batches=batches, batch_s=batch_s, pause_s=args.pause, seed=args.seed,
               progress=not args.no_progress, done=done, checkpoint=checkpoint, alone=args.alone)
    attach_previous(rows, previous)
    kept_as = args.out / f"{name}.previous.json"
    if previous is not None and previous.path == json_path:
        previous.path = kept_as  # where it will be once this run's results are written
    info = harness.machine_info()
    info["torch_threads"] = threads
    command = "python -m bench.core " + " ".join(argv if argv is not None else sys.argv[1:])
    text, all_met = report(rows, info, mode=args.mode, command=command.strip(), batches=batches,
                           batch_s=batch_s, pause_s=args.pause, previous=previous)
    settings.update(command=command.strip(), directions=directions, resumed=bool(done),
                    date=datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
                    previous=str(previous.path) if previous else None)
    if json_path.exists():  # the run this one replaces becomes the previous one
        os.replace(json_path, kept_as)
        if md_path.exists():
            os.replace(md_path, args.out / f"{name}.previous.md")
    harness.write_atomic(md_path, text)
    harness.write_json(json_path, to_json(rows, info, **settings))
    partial_path.unlink(missing_ok=True)
    print(text)
    print(f"written: {md_path}, {json_path}", file=sys.stderr)
    return 1 if args.check_targets and not all_met else 0


if __name__ == "__main__":
    sys.exit(main())
