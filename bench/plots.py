"""Plots of the benchmark results (matplotlib, part of the `bench` extra).

    python -m bench.plots                      # into bench/out/ (not tracked): ratios.png, ttfg.png, compiled.png
    python -m bench.plots --out some/folder    # anywhere (the folder is made)
    python -m bench.plots --committed          # update the committed plots in bench/results/ (`make bench-plots`)
    python -m bench.plots --core quick.json    # another results file

ratios.png (from core.json): the ratio to hand-written NumPy of every case and system, log
scale, one panel per direction (reverse = gradient, forward = loss). ttfg.png (ttfg.json): the
time to first gradient in a fresh process, split into its parts, and the wall time of 200
training steps from a cold start. compiled.png (compiled.json): each case's gradient time over
hand-written NumPy for bytegrad's tiers (auto, general path, NumPy program, Numba program) and
jax-jit, the value written on each bar as in compiled.md.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
OUT = Path(__file__).resolve().parent / "out"  # not tracked (.gitignore)
REFERENCE = "numpy (hand-written)"
MARKERS = "o s D ^ v P X * h".split()


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_ratios(core: dict[str, Any], path: Path) -> None:
    plt = _pyplot()
    results = [r for r in core["results"] if r.get("ratio_to_numpy")]
    directions = [d for d in ("reverse", "forward") if any(r.get("direction", "reverse") == d for r in results)]
    cases = list(dict.fromkeys(r["case_name"] for r in results))
    systems = [s for s in dict.fromkeys(r["system"] for r in core["results"]) if s != REFERENCE]
    colors = plt.get_cmap("tab10").colors
    style = {s: (colors[i % len(colors)], MARKERS[i % len(MARKERS)]) for i, s in enumerate(systems)}

    height = 1.2 + 0.36 * len(cases)
    fig, axes = plt.subplots(1, len(directions), figsize=(7.5 * len(directions), height), sharey=True,
                             squeeze=False)
    y = {c: len(cases) - 1 - i for i, c in enumerate(cases)}
    values = [r["ratio_to_numpy"] for r in results if r["system"] != REFERENCE]
    lo, hi = min(values + [1.0]) / 1.6, max(values + [1.0]) * 1.6
    for ax, direction in zip(axes[0], directions):
        for i, c in enumerate(cases):
            if i % 2 == 0:
                ax.axhspan(y[c] - 0.5, y[c] + 0.5, color="0.94", zorder=0)
        ax.axvline(1.0, color="0.3", lw=1, zorder=1)
        for s in systems:
            pts = [(r["ratio_to_numpy"], y[r["case_name"]]) for r in results
                   if r["system"] == s and r.get("direction", "reverse") == direction]
            if not pts:
                continue
            color, marker = style[s]
            big = s.startswith("bytegrad")
            ax.scatter([p[0] for p in pts], [p[1] for p in pts], label=s, color=color, marker=marker,
                       s=70 if big else 36, zorder=3 if big else 2, edgecolors="black" if big else "none",
                       linewidths=0.6)
        ax.set_xscale("log")
        ax.set_xlim(lo, hi)
        ax.set_ylim(-0.6, len(cases) - 0.4)
        ax.grid(axis="x", which="major", color="0.8", lw=0.6)
        what = "gradient" if direction == "reverse" else "loss"
        ax.set_title(f"{direction} ({what}): time / hand-written NumPy time")
        ax.set_xlabel("ratio to NumPy (log scale; < 1 is faster than NumPy)")
    axes[0][0].set_yticks([y[c] for c in cases])
    axes[0][0].set_yticklabels(cases, fontsize=8)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=len(labels), frameon=False, fontsize=9,
               bbox_to_anchor=(0.5, 1.0))
    date = core.get("settings", {}).get("date", "")
    fig.text(0.99, 0.005, f"{core.get('settings', {}).get('command', '')}  {date}", ha="right", va="bottom",
             fontsize=7, color="0.4")
    fig.tight_layout(rect=(0, 0.01, 1, 1 - 0.5 / height))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_ttfg(ttfg: dict[str, Any], path: Path) -> None:
    plt = _pyplot()
    configs = [c for c in ttfg["configurations"]
               if c.get("system") and c.get("first_s") is not None and c.get("case", "mlp") == "mlp"]
    train = [t for t in ttfg.get("train", []) if t.get("wall_s") is not None and t.get("case", "mlp") == "mlp"]
    parts = [("import numpy", "import_numpy_s", "#9ecae1"), ("import library", "import_library_s", "#3182bd"),
             ("import the benchmark's modules, make the data", "user_s", "#c7e9c0"),
             ("setup", "setup_s", "#fdae6b"), ("1st gradient", "first_s", "#e6550d")]
    for c in configs:
        c["user_s"] = (c.get("import_bench_s") or 0.0) + (c.get("data_s") or 0.0)
    fig, axes = plt.subplots(1, 2 if train else 1, figsize=(15 if train else 9, 2.4 + 0.45 * len(configs)),
                             gridspec_kw={"width_ratios": [3, 2]} if train else None, squeeze=False)
    ax = axes[0][0]
    names = [c["name"] for c in configs]
    ypos = list(range(len(configs)))[::-1]
    left = [0.0] * len(configs)
    for label, key, color in parts:
        widths = [c.get(key) or 0.0 for c in configs]
        ax.barh(ypos, widths, left=left, color=color, label=label, edgecolor="white", lw=0.5)
        left = [a + b for a, b in zip(left, widths)]
    rest = [max(0.0, (c.get("wall_s") or 0.0) - lft) for c, lft in zip(configs, left)]
    ax.barh(ypos, rest, left=left, color="0.85",
            label="rest of the process (interpreter start-up, 2nd gradient, check, exit)", edgecolor="white", lw=0.5)
    for yp, c, lft, r in zip(ypos, configs, left, rest):
        ax.text(lft + r, yp, f" {c['wall_s']:.2f} s", va="center", fontsize=8)
    ax.set_yticks(ypos)
    ax.set_yticklabels(names, fontsize=8)
    ax.set_xlabel("seconds (median of fresh processes)")
    ax.set_title("Time to first gradient, MLP 784-256-256-10, batch 128")
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=2, frameon=False)
    ax.set_xlim(0, max(c.get("wall_s") or 0 for c in configs) * 1.15)
    if train:
        ax2 = axes[0][1]
        ty = list(range(len(train)))[::-1]
        imports = [t.get("import_s") or 0.0 for t in train]
        steps = [t.get("steps_s") or 0.0 for t in train]
        rest2 = [max(0.0, t["wall_s"] - i - s) for t, i, s in zip(train, imports, steps)]
        ax2.barh(ty, imports, color="#3182bd", label="import numpy + library")
        ax2.barh(ty, steps, left=imports, color="#e6550d", label=f"{train[0].get('steps', 200)} steps")
        ax2.barh(ty, rest2, left=[a + b for a, b in zip(imports, steps)], color="0.85", label="rest of the process")
        for yp, t in zip(ty, train):
            ax2.text(t["wall_s"], yp, f" {t['wall_s']:.2f} s", va="center", fontsize=8)
        ax2.set_yticks(ty)
        ax2.set_yticklabels([t["name"] for t in train], fontsize=8)
        ax2.set_xlabel("seconds (median of fresh processes)")
        ax2.set_title(f"{train[0].get('steps', 200)} training steps, cold start: process wall")
        ax2.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=2, frameon=False)
        ax2.set_xlim(0, max(t["wall_s"] for t in train) * 1.25)
    fig.text(0.99, 0.005, ttfg.get("settings", {}).get("date", ""), ha="right", va="bottom", fontsize=7,
             color="0.4")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


COMPILED_SYSTEMS = (("bytegrad", "bytegrad (auto)"), ("bytegrad (general)", "general path"),
                    ("bytegrad (numpy program)", "NumPy program"), ("bytegrad (numba program)", "Numba program"),
                    ("jax-jit", "jax-jit"))


def format_ratio(ratio: float) -> str:
    """As bench.harness.format_ratio (the .md tables), so the figure reads like the report."""
    return f"{ratio:.2f}x" if ratio < 10 else f"{ratio:.3g}x" if ratio < 1000 else f"{ratio:.0f}x"


def compiled_ratios(compiled: dict[str, Any]) -> tuple[list[str], dict[str, dict[str, tuple[float, bool]]]]:
    """The cases (in order) and, per system of COMPILED_SYSTEMS, case -> (ratio to NumPy, flagged alone)."""
    rows = [r for r in compiled["results"] if r.get("direction", "reverse") == "reverse"]
    cases = list(dict.fromkeys(r["case_name"] for r in rows))
    wanted = dict(COMPILED_SYSTEMS)
    ratios: dict[str, dict[str, tuple[float, bool]]] = {s: {} for s in wanted}
    for r in rows:
        if r["system"] in wanted and r.get("ratio_to_numpy"):
            ratios[r["system"]][r["case_name"]] = (r["ratio_to_numpy"], bool(r.get("alone_differs")))
    return cases, ratios


def plot_compiled(compiled: dict[str, Any], path: Path) -> None:
    """compiled.png: grouped horizontal bars, one group per case, log scale, each bar labelled."""
    plt = _pyplot()
    cases, ratios = compiled_ratios(compiled)
    systems = [(s, label) for s, label in COMPILED_SYSTEMS if ratios[s]]
    colors = {"bytegrad": "#e6550d", "bytegrad (general)": "#9e9ac8", "bytegrad (numpy program)": "#6baed6",
              "bytegrad (numba program)": "#31a354", "jax-jit": "0.45"}
    n = max(1, len(systems))
    height = 1.4 + 0.19 * n * len(cases)
    fig, ax = plt.subplots(figsize=(11, height))
    values = [v for by in ratios.values() for v, _ in by.values()] + [1.0]
    lo, hi = min(values) / 1.8, max(values) * 4.0
    bar = 0.8 / n
    labelled: set[str] = set()
    for i, case in enumerate(cases):
        base = len(cases) - 1 - i
        if i % 2 == 0:
            ax.axhspan(base - 0.5, base + 0.5, color="0.95", zorder=0)
        for k, (system, label) in enumerate(systems):
            if case not in ratios[system]:
                continue
            ratio, flagged = ratios[system][case]
            yk = base + 0.4 - bar * (k + 0.5)
            ax.barh(yk, ratio - lo, left=lo, height=bar * 0.9, color=colors[system], zorder=2,
                    label=None if label in labelled else label)
            labelled.add(label)
            ax.text(ratio * 1.05, yk, format_ratio(ratio) + (" †" if flagged else ""), va="center", fontsize=6.5)
    ax.axvline(1.0, color="0.2", lw=1, zorder=3)
    ax.set_xscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(-0.6, len(cases) - 0.4)
    ax.set_yticks([len(cases) - 1 - i for i in range(len(cases))])
    ax.set_yticklabels(cases, fontsize=7.5)
    ax.grid(axis="x", which="major", color="0.85", lw=0.6, zorder=1)
    ax.set_xlabel("gradient time / hand-written NumPy gradient time (log scale; < 1 is faster than NumPy)")
    fig.suptitle("Compiled tier: bytegrad's tiers and jax-jit against hand-written NumPy (gradient)", fontsize=10,
                 y=1 - 0.1 / height)
    fig.legend(*ax.get_legend_handles_labels(), fontsize=8, loc="upper center", ncol=len(systems), frameon=False,
               bbox_to_anchor=(0.5, 1 - 0.35 / height))
    settings = compiled.get("settings", {})
    notes = []
    if any(flag for by in ratios.values() for _, flag in by.values()):
        notes.append("† differs by more than 20% from the system timed alone in a fresh process")
    if "alone" not in settings:
        notes.append("a run from before the alone check and JAX's inline dispatch: jax-jit's small-case ratios are "
                     "too high (bench/results/jax-fairness.md)")
    fig.text(0.01, 0.005, "\n".join(notes), ha="left", va="bottom", fontsize=7, color="0.3")
    fig.text(0.99, 0.005, settings.get("date", ""), ha="right", va="bottom", fontsize=7, color="0.4")
    fig.subplots_adjust(left=0.33, right=0.97, top=1 - 0.75 / height, bottom=(0.6 + 0.22 * len(notes)) / height)
    fig.savefig(path, dpi=110)
    plt.close(fig)


PLOTS = (("core", "ratios.png", plot_ratios, "python -m bench.core --full"),
         ("ttfg", "ttfg.png", plot_ttfg, "python -m bench.ttfg"),
         ("compiled", "compiled.png", plot_compiled, "python -m bench.compiled"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.plots", description=__doc__.split("\n\n")[0])
    parser.add_argument("--core", type=Path, default=RESULTS / "core.json")
    parser.add_argument("--ttfg", type=Path, default=RESULTS / "ttfg.json")
    parser.add_argument("--compiled", type=Path, default=RESULTS / "compiled.json")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--out", type=Path, default=OUT, help=f"folder for the plots (made if missing; default {OUT})")
    where.add_argument("--committed", action="store_true",
                       help="write into bench/results/, replacing the committed plots")
    args = parser.parse_args(argv)
    out = RESULTS if args.committed else args.out
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for key, name, plot, how in PLOTS:
        source = getattr(args, key)
        if source.exists():
            plot(json.loads(source.read_text(encoding="utf-8")), out / name)
            written.append(out / name)
        else:
            print(f"no {source}: run `{how}` first", file=sys.stderr)
    if written:
        print("written: " + ", ".join(map(str, written)), file=sys.stderr)
    return 0 if written else 1


if __name__ == "__main__":
    sys.exit(main())
