"""Generate docs/rules.md from the registry: `python -m bytegrad.rules.docs > docs/rules.md` (or `make docs`).

The table is the registry itself, so it cannot drift from the code; tests/test_docs.py fails when
the committed file is stale.
"""
from __future__ import annotations

import sys
from collections import defaultdict
from typing import Any, Iterable

from bytegrad.errors import qualname
from bytegrad.rules.registry import _OWN_RULES_DIR, Rule, RuleKind, all_rules

__all__ = ["render", "main", "autograd_vjp_counts", "defined_in"]

COMMAND = "python -m bytegrad.rules.docs > docs/rules.md"

# HIPS autograd 1.9.1, counted with `autograd_vjp_counts()` below in a venv with autograd installed
# (/tmp/bgfresh/.venv-bench): the distinct primitives in autograd.core.primitive_vjps after importing
# autograd.numpy, autograd.numpy.linalg and autograd.numpy.fft, grouped by the wrapped function's module.
AUTOGRAD_COUNTS = {"numpy": 106, "numpy.linalg": 10, "numpy.fft": 14}

_FORM_NAMES = {"scalar": "scalar", "reverse": "reverse", "forward": "forward", "through": "through-implementation"}


def autograd_vjp_counts() -> dict[str, int]:
    """Count autograd's NumPy VJPs in this interpreter (needs autograd installed)."""
    import importlib

    for module in ("autograd.numpy", "autograd.numpy.linalg", "autograd.numpy.fft"):  # registers their VJPs
        importlib.import_module(module)
    from autograd.core import primitive_vjps

    counts: dict[str, int] = defaultdict(int)
    for wrapped in primitive_vjps:
        module = getattr(getattr(wrapped, "fun", wrapped), "__module__", None) or "numpy"
        if module in AUTOGRAD_COUNTS:
            counts[module] += 1
    return dict(counts)


def _area(fn: Any, name: str) -> str:
    """The section a function belongs to: numpy, numpy.linalg, numpy.fft, ndarray methods, Python."""
    if isinstance(fn, tuple) or name.startswith("numpy.ndarray."):
        return "ndarray methods and attributes"
    for prefix in ("numpy.linalg", "numpy.fft", "numpy.lib", "numpy"):
        if name.startswith(prefix + "."):
            return "NumPy" if prefix == "numpy" else prefix
    if name.startswith("numpy.vectorize."):
        return "NumPy"
    return "Python (builtins, operator, math, functools, itertools...)"


def _forms(rule: Rule) -> str:
    forms = list(rule.forms())
    if rule.kind is RuleKind.ELEMENTWISE and rule.frule is not None:
        forms[forms.index("forward")] = "forward (own frule)"
    return ", ".join(_FORM_NAMES.get(f, f) for f in forms)


def defined_in(rule: Rule) -> str:
    """The file of bytegrad/rules/ that defines `rule` (every form of it: tests/test_docs.py checks
    that they share one), e.g. `numpy/ufuncs.py`."""
    files = {loc.filename[len(_OWN_RULES_DIR):].replace("\\", "/")
             for loc in (rule.defined_at, rule.frule_defined_at) if loc is not None}
    return ", ".join(f"`{f}`" for f in sorted(files))


def _rows(rules: Iterable[tuple[str, Rule]]) -> list[str]:
    return [f"| `{name}` | {_forms(rule)} | {defined_in(rule)} |" for name, rule in sorted(rules, key=lambda p: p[0])]


def render() -> str:
    """The whole of docs/rules.md."""
    # bytegrad's own rules only: not those of installed plugins or of the program importing this
    named = [(qualname(fn), rule) for fn, rule in all_rules().items()
             if rule.defined_at is not None and rule.defined_at.filename.startswith(_OWN_RULES_DIR)]
    by_kind: dict[RuleKind, list[tuple[str, Rule]]] = defaultdict(list)
    for name, rule in named:
        by_kind[rule.kind].append((name, rule))
    differentiable = by_kind[RuleKind.ELEMENTWISE] + by_kind[RuleKind.RRULE] + by_kind[RuleKind.THROUGH]
    sections: dict[str, list[tuple[str, Rule]]] = defaultdict(list)
    for name, rule in differentiable:
        sections[_area(rule.fn, name)].append((name, rule))
    numpy_count = sum(len(v) for k, v in sections.items() if k.startswith(("NumPy", "numpy")))
    autograd_total = sum(AUTOGRAD_COUNTS.values())

    lines = [
        "# Differentiation rules",
        "",
        f"Generated from the registry by `{COMMAND}` (or `make docs`); do not edit by hand.",
        "",
        "Forms: **scalar** (an elementwise rule given by its partial derivatives, which gives both the "
        "reverse and the forward rule), **reverse** (an `rrule`), **forward** (an `frule`, or derived from "
        "the scalar partials), **through-implementation** (bytegrad differentiates a Python implementation "
        "of the function). *Defined in*: the file of `bytegrad/rules/` that holds every form of the rule. "
        "How to add a rule: [plugins.md](plugins.md).",
        "",
        "## Counts",
        "",
        "| | functions |",
        "|---|---|",
        f"| with a rule (all forms) | {len(differentiable)} |",
        f"| of which scalar (elementwise) | {len(by_kind[RuleKind.ELEMENTWISE])} |",
        f"| of which reverse only or reverse + forward (`rrule`) | {len(by_kind[RuleKind.RRULE])} |",
        f"| of which through-implementation | {len(by_kind[RuleKind.THROUGH])} |",
        f"| with a forward form | {sum('forward' in r.forms() for _, r in differentiable)} |",
        f"| NumPy functions, methods and attributes with a rule | {numpy_count} |",
        f"| declared non-differentiable | {len(by_kind[RuleKind.NONDIFF])} |",
        f"| transparent (move values without arithmetic) | {len(by_kind[RuleKind.TRANSPARENT])} |",
        f"| declared not implemented (a clear error) | {len(by_kind[RuleKind.NOT_IMPLEMENTED])} |",
        "",
        f"For comparison, HIPS autograd 1.9.1 defines VJPs for {autograd_total} NumPy functions: "
        + ", ".join(f"{n} in `{m}`" for m, n in AUTOGRAD_COUNTS.items())
        + " (the primitives in `autograd.core.primitive_vjps` after importing `autograd.numpy` with its "
        "`linalg` and `fft`, grouped by the module of the wrapped function; its own helper primitives "
        "are not counted; `bytegrad.rules.docs.autograd_vjp_counts()` recounts them). "
        "Functions NumPy writes in Python (`np.diff`, `np.pad`...) are differentiated through their code "
        "when they have no rule and are not in these tables.",
        "",
    ]
    order = ["NumPy", "numpy.linalg", "numpy.fft", "numpy.lib", "ndarray methods and attributes"]
    for area in order + sorted(set(sections) - set(order)):
        if area not in sections:
            continue
        lines += [f"## {area} ({len(sections[area])})", "", "| function | forms | defined in |", "|---|---|---|"]
        lines += _rows(sections[area]) + [""]
    lines += [f"## Non-differentiable ({len(by_kind[RuleKind.NONDIFF])})", "",
              "Their outputs carry no derivative (indices, shapes, predicates, rounding).", ""]
    lines += [", ".join(f"`{n}`" for n in sorted(name for name, _ in by_kind[RuleKind.NONDIFF])), ""]
    lines += [f"## Transparent ({len(by_kind[RuleKind.TRANSPARENT])})", "",
              "Called as they are: they move values around without arithmetic.", ""]
    lines += [", ".join(f"`{n}`" for n in sorted(name for name, _ in by_kind[RuleKind.TRANSPARENT])), ""]
    lines += [f"## Not implemented ({len(by_kind[RuleKind.NOT_IMPLEMENTED])})", "",
              "Differentiating these raises an error giving the reason.", "", "| function | reason |", "|---|---|"]
    lines += [f"| `{name}` | {rule.reason.replace('|', '/')} |"
              for name, rule in sorted(by_kind[RuleKind.NOT_IMPLEMENTED], key=lambda p: p[0])]
    return "\n".join(lines) + "\n"


def main() -> None:
    sys.stdout.write(render())


if __name__ == "__main__":
    main()
