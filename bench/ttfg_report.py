"""The section "where the first gradient's time goes" of bench/results/ttfg.md, from the JSON that
`python -m bench.ttfg_where` writes (bench/results/ttfg-where.json)."""
from __future__ import annotations

from typing import Any


def _ms(x: float | None) -> str:
    return "" if x is None else f"{x * 1e3:.2f} ms"


def _table(headers: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)] + ["| " + " | ".join(r) + " |" for r in rows]


def _imports(c: dict[str, Any], phases: tuple[str, ...]) -> dict[str, float]:
    out: dict[str, float] = {}
    for phase in phases:
        for group, s in c.get("imports", {}).get(phase, {}).items():
            out[group] = out.get(group, 0.0) + s
    return out


def where_section(data: dict[str, Any], title: str = "## Where the first gradient's time goes") -> list[str]:
    confs = data["configurations"]
    np_ = confs["numpy (hand-written)"]
    names = list(confs)
    load = ", ".join(f"{x:.2f}" for x in data["load_average"])
    text = [title, "",
            f"`python -m bench.ttfg_where --runs {data['runs']}`: the MLP case in fresh processes under `-X importtime`, "
            f"{data['runs']} interleaved runs per configuration, medians (each part's own median: the parts need not "
            f"add up exactly); load average (1, 5, 15 min) at the end {load}. Python {data['python']}, source "
            f"{data.get('source', '?')}.", ""]
    rows = []
    for name in names:
        c = confs[name]
        total = c["import_library_s"] + c["setup_s"] + c["first_s"]
        ref = np_["import_library_s"] + np_["setup_s"] + np_["first_s"]
        rows.append([name, _ms(c["import_numpy_s"]), _ms(c["import_library_s"]) if "bytegrad" in name else "-",
                     _ms(c["setup_s"]), _ms(c["first_s"]), _ms(c["second_s"]),
                     _ms(total - ref) if "bytegrad" in name else "-"])
    text += _table(["configuration", "import numpy", "import bytegrad", "setup", "1st gradient", "2nd gradient",
                    "bytegrad's import + setup + 1st over NumPy's 1st"], rows) + [""]

    groups: list[str] = []
    for name in names[1:]:
        for phases in (("bytegrad",), ("setup",), ("first", "rewrite")):
            groups += [g for g in _imports(confs[name], phases) if g not in groups]
    rows = []
    for g in groups:
        row = [g]
        for name in names[1:]:
            for phases in (("bytegrad",), ("setup",), ("first", "rewrite")):
                row.append(_ms(_imports(confs[name], phases).get(g)) if g in _imports(confs[name], phases) else "")
        rows.append(row)
    sums = ["all"]
    for name in names[1:]:
        for phases in (("bytegrad",), ("setup",), ("first", "rewrite")):
            sums.append(_ms(sum(_imports(confs[name], phases).values())))
    rows.append(sums)
    headers = ["modules imported (self time)"]
    for name in names[1:]:
        short = name.replace("bytegrad, ", "")
        headers += [f"{short}: by `import bytegrad`", f"{short}: by setup", f"{short}: by the 1st gradient"]
    text += ["Imports, charged to the phase that made them (`-X importtime`'s self times, summed by group):", ""]
    text += _table(headers, rows) + [""]

    rows = []
    for name in names[1:]:
        c = confs[name]
        disk = c.get("disk", {})
        rewrite = disk.get("rewrite_ns", 0) * 1e-9
        loaded = disk.get("load_ns", 0) * 1e-9
        rw_imports = sum(_imports(c, ("rewrite",)).values())
        rows.append([name, _ms(c["first_s"]), _ms(rw_imports), _ms(max(rewrite - rw_imports, 0.0)), _ms(loaded),
                     _ms(max(c.get("rewrite_cached_s", 0.0) - rewrite - loaded, 0.0)),
                     _ms(sum(_imports(c, ("first",)).values())),
                     _ms(c["first_s"] - c.get("rewrite_cached_s", 0.0)), _ms(c["second_s"]), _ms(np_["first_s"])])
    text += ["The first gradient, split (the disk cache's counters and a timer around `transform.cache.rewrite_cached`):", ""]
    text += _table(["configuration", "1st gradient", "rewrite: its imports", "rewrite: the rest", "stored rewrite: load",
                    "disk cache: key, look-up, store", "imports outside the rewrite",
                    "the gradient (all but the rewrite's cache path)", "2nd gradient", "NumPy's 1st gradient"], rows) + [""]
    text += _comparison(data)
    text += _largest(data)
    parts = data.get("rewrite_parts") or {}
    if parts:
        text += ["The rewrite's steps with every module already imported (one more process; median of 7):", ""]
        text += _table(["step", "time"], [[k, _ms(v)] for k, v in parts.items()] +
                       [["all", _ms(sum(parts.values()))]]) + [""]
    return text


def _comparison(data: dict[str, Any]) -> list[str]:
    """Before (`other_configurations`, measured interleaved with these) and after, per bytegrad configuration."""
    other = data.get("other_configurations") or {}
    if not other:
        return []
    np_ = data["configurations"]["numpy (hand-written)"]
    ref = np_["import_numpy_s"] + np_["setup_s"] + np_["first_s"]
    rows = []
    for name, after in data["configurations"].items():
        before = other.get(name)
        if before is None:
            continue
        row = [name]
        for key in ("import_library_s", "setup_s", "first_s"):
            row.append(f"{_ms(before[key])} -> {_ms(after[key])}")
        totals = [c["import_numpy_s"] + c["import_library_s"] + c["setup_s"] + c["first_s"] for c in (before, after)]
        row.append(f"{totals[0] / ref:.2f}x -> {totals[1] / ref:.2f}x")
        rows.append(row)
    return [f"Before ({data.get('other_source')}) and after ({data.get('source')}), measured in the same "
            "interleaved rounds (medians):", ""] + _table(
        ["configuration", "import bytegrad", "setup", "1st gradient",
         "import numpy + bytegrad + setup + 1st, over NumPy's (under importtime)"], rows) + [""]


def _largest(data: dict[str, Any]) -> list[str]:
    """What bytegrad adds to NumPy's import + setup + first gradient, by part, largest first."""
    confs = data["configurations"]
    np_first = confs["numpy (hand-written)"]["first_s"]
    out = ["What bytegrad adds to hand-written NumPy's import + first gradient, by part, largest first "
           "(imports by group, then the first gradient's parts; the gradient's own work is its first call less "
           "the rewrite's cache path and imports, against NumPy's first gradient; the disk cache's part includes "
           "importing bytegrad.diskcache and safepickle, also counted under bytegrad.runtime):", ""]
    for name in ("bytegrad, warm cache", "bytegrad, empty cache"):
        c = confs.get(name)
        if c is None:
            continue
        parts: dict[str, float] = {}
        for group, sec in _imports(c, ("bytegrad", "setup", "first", "rewrite")).items():
            parts[f"imports: {group}"] = sec
        disk = c.get("disk", {})
        rewrite, loaded = disk.get("rewrite_ns", 0) * 1e-9, disk.get("load_ns", 0) * 1e-9
        parts["the rewrite's own work"] = max(rewrite - sum(_imports(c, ("rewrite",)).values()), 0.0)
        parts["loading the stored rewrite"] = loaded
        parts["disk cache: key, look-up, store"] = max(c.get("rewrite_cached_s", 0.0) - rewrite - loaded, 0.0)
        own = c["first_s"] - c.get("rewrite_cached_s", 0.0) - sum(_imports(c, ("first",)).values())
        parts["the gradient itself, over NumPy's"] = max(own - np_first, 0.0)
        ranked = sorted(((v, k) for k, v in parts.items() if v >= 0.05e-3), reverse=True)
        out.append(f"- {name}: " + ", ".join(f"{k} {_ms(v)}" for v, k in ranked) + ".")
    return out + [""]
