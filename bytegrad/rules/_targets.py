"""Whether one of bytegrad's own rules is for the object its rules module meant.

The rules modules name their functions by attribute (`np.tanh`, `scipy.special.erf`) when they are
imported, which since `import bytegrad` stopped loading them (bytegrad/__init__.py) is at the first
gradient, or at the first lookup of a deferred module (rules/_deferred.py). A program that replaced
such an attribute before that (`np.tanh = my_tanh`, a profiler's wrapper) would otherwise have the
replaced function's rule registered for its replacement: a wrong derivative, silently. A rule of
bytegrad/rules/numpy/ or rules/scipy/ whose function comes from outside the packages those modules
cover is such a replacement, and is not registered: the general path differentiates a Python
replacement through its code, and a C one without a rule is refused with `NoRuleError`.
"""
from __future__ import annotations

import os
from typing import Any

__all__ = ["replaced"]

#: rules package -> the modules (by their first name) whose objects its rules are for
_ROOTS = {"numpy": frozenset({"numpy", "_operator", "operator", "bytegrad"}),
          "scipy": frozenset({"scipy", "numpy", "bytegrad"})}
_MARKS = {package: f"{os.sep}rules{os.sep}{package}{os.sep}" for package in _ROOTS}


def replaced(rule: Any) -> bool:
    """Whether `rule`, one of bytegrad's own, is for an object from outside the packages its module covers."""
    at = rule.defined_at
    if at is None:
        return False
    for package, mark in _MARKS.items():
        if mark in at.filename:
            fn = rule.fn
            module = getattr(fn, "__module__", None) or getattr(getattr(fn, "__objclass__", None), "__module__", None) \
                or type(fn).__module__
            return (module or "").split(".")[0] not in _ROOTS[package]
    return False
