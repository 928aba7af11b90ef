"""Every rule bytegrad defines is checked by some test table (the tables are the list of checked functions)."""
from __future__ import annotations

import os

import bytegrad.rules
from bytegrad.errors import qualname
from bytegrad.rules.registry import RuleKind, all_rules, load_lazy_rules

from . import test_builtins, test_python_stdlib
from .numpy import (
    test_building, test_complex, test_cumulative, test_fft, test_functional, test_indexing, test_linalg,
    test_linalg_decomp, test_manipulation, test_nondiff, test_numpy2, test_products, test_reductions, test_selection,
    test_shape, test_signal, test_statistics, test_ufunc_methods, test_ufuncs,
)
from .scipy import test_linalg as test_scipy_linalg, test_signal as test_scipy_signal, test_solvers, test_special, test_stats

TABLE_MODULES = [
    test_builtins, test_ufuncs, test_reductions, test_shape, test_indexing, test_linalg, test_nondiff,
    test_linalg_decomp, test_products, test_cumulative, test_building, test_manipulation, test_statistics, test_signal,
    test_functional, test_complex, test_fft, test_numpy2, test_python_stdlib, test_special, test_stats,
    test_scipy_linalg, test_scipy_signal, test_ufunc_methods, test_selection, test_solvers,
]
CHECKED_KINDS = (RuleKind.ELEMENTWISE, RuleKind.RRULE, RuleKind.THROUGH)


def test_every_rule_appears_in_a_test_table():
    load_lazy_rules()  # the scipy rules: the scipy test tables imported scipy
    checked = {id(entry.fn) for module in TABLE_MODULES for table in module.TABLES for entry in table}
    rules_dir = os.path.dirname(bytegrad.rules.__file__)
    missing = sorted(
        qualname(fn) for fn, rule in all_rules().items()
        if rule.kind in CHECKED_KINDS and rule.defined_at is not None
        and rule.defined_at.filename.startswith(rules_dir) and id(fn) not in checked
    )
    assert not missing, f"rules that no test table checks: {', '.join(missing)}"


def test_every_form_of_a_rule_is_defined_in_one_file():
    """A function's reverse, forward and scalar forms (and its kernel formula, an argument of its
    scalar_rule) are read and changed together: one file holds them all."""
    rules_dir = os.path.dirname(bytegrad.rules.__file__)
    split = sorted(
        f"{qualname(fn)}: {rule.defined_at.filename} and {rule.frule_defined_at.filename}"
        for fn, rule in all_rules().items()
        if rule.defined_at is not None and rule.frule_defined_at is not None
        and rule.defined_at.filename.startswith(rules_dir)
        and rule.frule_defined_at.filename != rule.defined_at.filename
    )
    assert not split, "rules whose forms are defined in two files:\n" + "\n".join(split)


def test_kernel_formulas_have_a_partial_per_argument():
    """A fused kernel inlines a scalar rule's formula: one partial per partial of the rule."""
    for fn, rule in all_rules().items():
        if isinstance(rule.kernel, bytegrad.rules.registry.Formula):
            assert rule.kind is RuleKind.ELEMENTWISE and len(rule.kernel.partials) == len(rule.partials), qualname(fn)
