"""Plots of the benchmark results (matplotlib, part of the `bench` extra).

    python -m bench.plots                      # bench/results/core.json -> ratios.png, ttfg.json -> ttfg.png
    python -m bench.plots --core quick.json    # another results file

ratios.png: the ratio to hand-written NumPy of every case and system, log scale, one panel per
direction (reverse = gradient, forward = loss). ttfg.png: the time to first gradient in a fresh
process, split into its parts, and the wall time of 200 training steps from a cold start.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.plots", description=__doc__.split("\n\n")[0])
    parser.add_argument("--core", type=Path, default=RESULTS / "core.json")
    parser.add_argument("--ttfg", type=Path, default=RESULTS / "ttfg.json")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    written = []
    if args.core.exists():
        plot_ratios(json.loads(args.core.read_text()), args.out / "ratios.png")
        written.append(args.out / "ratios.png")
    else:
        print(f"no {args.core}: run `python -m bench.core --full` first", file=sys.stderr)
    if args.ttfg.exists():
        plot_ttfg(json.loads(args.ttfg.read_text()), args.out / "ttfg.png")
        written.append(args.out / "ttfg.png")
    else:
        print(f"no {args.ttfg}: run `python -m bench.ttfg` first", file=sys.stderr)
    if written:
        print("written: " + ", ".join(map(str, written)), file=sys.stderr)
    return 0 if written else 1


if __name__ == "__main__":
    sys.exit(main())
