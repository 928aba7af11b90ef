"""The API for rule authors: the forms a rule takes, the tangent types, and the registry.

Importing this package registers bytegrad's own rules (NumPy, operators, `math`, builtins).
"""
# the tangent types, the rule record, then the forms a rule takes and the registry's switches
from bytegrad.rules.registry import NO_TANGENT as NO_TANGENT, ZERO as ZERO, NoTangent as NoTangent, Zero as Zero
from bytegrad.rules.registry import Rule as Rule, RuleKind as RuleKind
from bytegrad.rules.registry import frule as frule, rrule as rrule, rrule_via_ad as rrule_via_ad, scalar_rule as scalar_rule
from bytegrad.rules.registry import (
    differentiate_through as differentiate_through, non_differentiable as non_differentiable,
    not_implemented as not_implemented, opt_out as opt_out, transparent as transparent,
)
from bytegrad.rules import _load_builtin_rules  # noqa: F401  (registers the standard rules)

__all__ = [
    "NO_TANGENT", "ZERO", "NoTangent", "Zero", "Rule", "RuleKind", "differentiate_through", "frule",
    "non_differentiable", "not_implemented", "opt_out", "rrule", "rrule_via_ad", "scalar_rule", "transparent",
]
