"""The compiled tier's reach on everyday programs (bench/reach_programs.py, and the held-out set of
bench/reach_heldout.py), apart from the test catalogue.

For each program: the general path's gradient; then under tiers `numpy` and `numba`, four calls (two at
the first inputs, two at inputs from another seed), each compared with the general path's value and
gradient. Reported: whether a compiled program ran (`stats()["compiled"]`), and for what did not, the
refusal as `stats()` gives it. A disagreement is a bug and is counted on its own line.

    python -m bench.reach [--out bench/results/reach]
"""
from __future__ import annotations

import argparse
import datetime
import platform
import sys
from typing import Any

import numpy as np

import bytegrad
from bench.reach_heldout import HELDOUT
from bench.reach_programs import PROGRAMS, Case

#: (name, programs): the first set, which the tier was fixed against, and the held-out one
SETS = (("everyday", PROGRAMS), ("held out", HELDOUT))

TIERS = ("numpy", "numba")


def _leaves(tree: Any) -> list[np.ndarray]:
    return [np.asarray(x, dtype=float) for x in bytegrad.tree_leaves(tree)]


def _differs(a: Any, b: Any) -> float:
    worst = 0.0
    for x, y in zip(_leaves(a), _leaves(b), strict=True):
        scale = max(1.0, float(np.max(np.abs(y))) if y.size else 1.0)
        worst = max(worst, float(np.max(np.abs(x - y))) / scale if x.size else 0.0)
    return worst


def run_case(case: Case) -> dict[str, Any]:
    inputs = [case.inputs(np.random.default_rng(seed)) for seed in (1, 1, 2, 2)]
    general = bytegrad.differentiate(case.loss, wrt=case.wrt, tier="general")
    expected = [general.value_and_grad(*args) for args in inputs]
    row: dict[str, Any] = {"name": case.name}
    for tier in TIERS:
        f = bytegrad.differentiate(case.loss, wrt=case.wrt, tier=tier)
        worst, error = 0.0, None
        for args, (v0, g0) in zip(inputs, expected):
            try:
                v, g = f.value_and_grad(*args)
            except Exception as e:  # noqa: BLE001 (reported, never stops the run)
                error = f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
                break
            worst = max(worst, _differs(v, v0), _differs(g, g0))
        c = f.stats().get("compiled", {})
        row[tier] = {
            "compiled": bool(c.get("compiled_calls")),
            "programs": len(c.get("programs", ())),
            "reason": "; ".join(f"{k}: {v}" for k, v in (c.get("not_compiled") or {}).items()),
            "numba": "; ".join(str(p.get("numba", "")) for p in c.get("programs", ()) if isinstance(p, dict)),
            "worst": worst, "error": error,
        }
    return row


def report(rows: list[dict[str, Any]]) -> str:
    n = len(rows)
    lines = [
        "# The compiled tier's reach on everyday programs",
        "",
        f"`python -m bench.reach` (bench/reach.py, programs in bench/reach_programs.py and bench/reach_heldout.py), "
        f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, Python {platform.python_version()}, "
        f"NumPy {np.__version__}.",
        "",
        "Programs written as users write them, apart from the test catalogue: the everyday set "
        "(bench/reach_programs.py), which the tier was then fixed against, and a held-out set "
        "(bench/reach_heldout.py) measured before any change was made for it. Each runs four gradient calls per "
        "tier (two at one input, two at another), every one compared with the general path's value and gradient "
        "(largest difference relative to each array's largest element, at least 1).",
        "",
    ]
    for tier in TIERS:
        done = sum(r[tier]["compiled"] for r in rows)
        per_set = ", ".join(f"{name} {sum(r[tier]['compiled'] for r in rows if r['set'] == name)} of "
                            f"{sum(r['set'] == name for r in rows)}" for name, _ in SETS)
        lines.append(f"- tier `{tier}`: **{done} of {n}** programs ran compiled ({per_set})")
    bad = [(r["name"], t) for r in rows for t in TIERS if r[t]["worst"] > 1e-9]
    errs = [(r["name"], t, r[t]["error"]) for r in rows for t in TIERS if r[t]["error"]]
    lines.append(f"- disagreements with the general path (over 1e-9): {len(bad)}" +
                 (": " + ", ".join(f"{a} ({b})" for a, b in bad) if bad else ""))
    lines.append(f"- errors: {len(errs)}" + ("".join(f"\n  - {a} ({b}): {e}" for a, b, e in errs) if errs else ""))
    lines += ["", "| program | set | numpy | numba | largest difference | why not compiled (numpy tier) |", "|---|---|---|---|---|---|"]
    for r in rows:
        mark = {True: "compiled", False: "general"}
        worst = max(r[t]["worst"] for t in TIERS)
        lines.append(f"| {r['name']} | {r['set']} | {mark[r['numpy']['compiled']]} | {mark[r['numba']['compiled']]} | "
                     f"{worst:.1e} | {r['numpy']['reason'].replace('|', '/')} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="write <out>.md (default: print only)")
    ap.add_argument("-k", default=None, help="only programs whose name contains this")
    opts = ap.parse_args(argv)
    rows = []
    for name, programs in SETS:
        for case in programs:
            if opts.k and opts.k not in case.name:
                continue
            rows.append(dict(run_case(case), set=name))
            print(f"{case.name}: numpy {'compiled' if rows[-1]['numpy']['compiled'] else 'general'}, "
                  f"numba {'compiled' if rows[-1]['numba']['compiled'] else 'general'}", file=sys.stderr)
    text = report(rows)
    print(text)
    if opts.out:
        with open(opts.out + ".md", "w") as fh:
            fh.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
