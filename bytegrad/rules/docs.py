"""Generate docs/rules.md from the registry: `python -m bytegrad.rules.docs > docs/rules.md` (or `make docs`).

The table is the registry itself, so it cannot drift from the code; tests/test_docs.py fails when
the committed file is stale.
"""
from __future__ import annotations

import sys
from collections import defaultdict
from typing import Any, Iterable

from bytegrad.errors import qualname
from bytegrad.rules.registry import OWN_RULES_DIR, Rule, RuleKind, all_rules, lazy_rule_modules, load_lazy_rules

__all__ = ["render", "main", "autograd_vjp_counts", "defined_in"]

COMMAND = "python -m bytegrad.rules.docs > docs/rules.md"

# HIPS autograd 1.9.1, counted with `autograd_vjp_counts()` below in a venv with autograd installed
# (/tmp/bgfresh/.venv-bench): the distinct primitives in autograd.core.primitive_vjps after importing
# autograd.numpy, autograd.numpy.linalg and autograd.numpy.fft, grouped by the wrapped function's module.
AUTOGRAD_COUNTS = {"numpy": 106, "numpy.linalg": 10, "numpy.fft": 14}

# autograd's scipy rules, counted the same way (the same venv, also importing autograd.scipy.special, .stats
# with its distribution modules, .linalg and .signal): special 29 (26 ufuncs, logsumexp, polygamma,
# multigammaln), stats 27 (distribution methods), linalg 4 (sqrtm, solve_triangular, solve_banded,
# solve_sylvester), signal 1 (convolve); scipy.special's ufuncs report `numpy` as their module, so they
# are told apart from NumPy's by not being attributes of numpy.
AUTOGRAD_SCIPY_COUNTS = {"scipy.special": 29, "scipy.stats": 27, "scipy.linalg": 4, "scipy.signal": 1}

# What JAX 0.10.2 offers under the same names (scipy 1.17.1, numpy 2.4.6), measured in /work/main/.venv-bench
# (jax is not installed in the test venvs, so these are data): the public callables (not classes or modules)
# of jax.numpy, jax.numpy.linalg, jax.numpy.fft, jax.scipy.special, jax.scipy.linalg and jax.scipy.signal
# whose names the corresponding numpy / scipy module also has, and for scipy.stats the `dist.method`
# pairs of jax.scipy.stats' distribution modules that scipy.stats' distribution of that name also has.
# Offered, not necessarily differentiable in every argument.
JAX_VERSION = "0.10.2"
JAX_COUNTS = {"numpy": 343, "numpy.linalg": 31, "numpy.fft": 18, "scipy.special": 52, "scipy.stats": 112,
              "scipy.linalg": 40, "scipy.signal": 10}

# bytegrad before the SciPy rules (main at 565ab95): docs/rules.md's section counts then.
BEFORE_COUNTS = {"numpy": 141, "numpy.linalg": 17, "numpy.fft": 0, "scipy.special": 0, "scipy.stats": 0,
                 "scipy.linalg": 0, "scipy.signal": 0}
BEFORE_COMMIT = "565ab95"

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
    """The section a function belongs to: numpy, numpy.linalg, numpy.fft, ndarray methods, scipy's, Python."""
    if isinstance(fn, tuple) or name.startswith("numpy.ndarray."):
        return "ndarray methods and attributes"
    for prefix in ("numpy.linalg", "numpy.fft", "numpy.lib", "scipy.special", "scipy.stats", "scipy.linalg",
                   "scipy.signal", "scipy.optimize", "scipy.integrate", "numpy"):
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
    files = {loc.filename[len(OWN_RULES_DIR):].replace("\\", "/")
             for loc in (rule.defined_at, rule.frule_defined_at) if loc is not None}
    return ", ".join(f"`{f}`" for f in sorted(files))


def _rows(rules: Iterable[tuple[str, Rule]]) -> list[str]:
    return [f"| `{name}` | {_forms(rule)} | {defined_in(rule)} |" for name, rule in sorted(rules, key=lambda p: p[0])]


def _load_lazy_rules() -> None:
    """Import the modules whose rules load lazily (scipy's, numpy.fft, statistics...), so that their
    rules load (this generator may)."""
    import importlib

    for module in lazy_rule_modules():
        importlib.import_module(module)
    load_lazy_rules()


def _named(fn: Any, rule: Rule) -> list[tuple[str, Rule]]:
    """The public names a rule covers: one per scipy.stats distribution method it has a formula for."""
    covers = getattr(rule.rrule, "covers", None)
    return [(name, rule) for name in covers] if covers else [(qualname(fn), rule)]


def _module_table(sections: dict[str, list[tuple[str, Rule]]]) -> list[str]:
    modules = list(BEFORE_COUNTS)
    now = {m: len(sections.get("NumPy" if m == "numpy" else m, [])) for m in modules}
    lines = [f"| module | before ({BEFORE_COMMIT}) | now | HIPS autograd 1.9.1 | JAX {JAX_VERSION} (same names) |",
             "|---|---|---|---|---|"]
    autograd = {**AUTOGRAD_COUNTS, **AUTOGRAD_SCIPY_COUNTS}
    for m in modules:
        lines.append(f"| `{m}` | {BEFORE_COUNTS[m]} | {now[m]} | {autograd.get(m, 0)} | {JAX_COUNTS[m]} |")
    lines.append(f"| all | {sum(BEFORE_COUNTS.values())} | {sum(now.values())} | {sum(autograd.values())} | "
                 f"{sum(JAX_COUNTS.values())} |")
    return lines


def render() -> str:
    """The whole of docs/rules.md."""
    _load_lazy_rules()
    # bytegrad's own rules only: not those of installed plugins or of the program importing this
    # (and not the helpers the rules' own Python code calls, such as bytegrad.rules.numpy.ufunc_methods.at_rounds)
    named = [pair for fn, rule in all_rules().items()
             if rule.defined_at is not None and rule.defined_at.filename.startswith(OWN_RULES_DIR)
             and not qualname(fn).startswith("bytegrad.rules.")
             for pair in _named(fn, rule)]
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
        "### NumPy and SciPy functions with a rule, by module",
        "",
        "Before the SciPy rules (main at " + BEFORE_COMMIT + "), now, HIPS autograd's VJPs (its "
        "`autograd.scipy` modules counted like its NumPy ones), and what JAX offers under the same names "
        "(`jax.numpy`, `jax.scipy.special` / `stats` / `linalg` / `signal`; for `scipy.stats`, distribution "
        "methods such as `norm.logpdf`). Counted by distinct function (`scipy.special.psi` and `digamma` "
        "are one); SciPy's rules load once the program imports scipy. The numbers for autograd and JAX "
        "are data in `bytegrad/rules/docs.py`, with how they were measured.",
        "",
        *_module_table(sections),
        "",
    ]
    order = ["NumPy", "numpy.linalg", "numpy.fft", "numpy.lib", "scipy.special", "scipy.stats", "scipy.linalg",
             "scipy.signal", "scipy.optimize", "scipy.integrate", "ndarray methods and attributes"]
    for area in order + sorted(set(sections) - set(order)):
        if area not in sections:
            continue
        lines += [f"## {area} ({len(sections[area])})", "", "| function | forms | defined in |", "|---|---|---|"]
        lines += _rows(sections[area]) + [""]
    return "\n".join(lines + _without_derivative(by_kind)) + "\n"


def _without_derivative(by_kind: dict[RuleKind, list[tuple[str, Rule]]]) -> list[str]:
    """The sections of the functions declared non-differentiable, transparent or not implemented."""
    lines = [f"## Non-differentiable ({len(by_kind[RuleKind.NONDIFF])})", "",
             "Their outputs carry no derivative (indices, shapes, predicates, rounding).", ""]
    lines += [", ".join(f"`{n}`" for n in sorted(name for name, _ in by_kind[RuleKind.NONDIFF])), ""]
    lines += [f"## Transparent ({len(by_kind[RuleKind.TRANSPARENT])})", "",
              "Called as they are: they move values around without arithmetic.", ""]
    lines += [", ".join(f"`{n}`" for n in sorted(name for name, _ in by_kind[RuleKind.TRANSPARENT])), ""]
    lines += [f"## Not implemented ({len(by_kind[RuleKind.NOT_IMPLEMENTED])})", "",
              "Differentiating these raises an error giving the reason.", "", "| function | reason |", "|---|---|"]
    lines += [f"| `{name}` | {rule.reason.replace('|', '/')} |"
              for name, rule in sorted(by_kind[RuleKind.NOT_IMPLEMENTED], key=lambda p: p[0])]
    return lines


def main() -> None:
    sys.stdout.write(render())


if __name__ == "__main__":
    main()
