"""bytegrad: derivatives of ordinary Python + NumPy code, by rewriting its bytecode."""
from bytegrad.api import (
    differentiate as differentiate,
    grad as grad,
    hessian as hessian,
    hvp as hvp,
    jacobian as jacobian,
    jvp as jvp,
    value_and_grad as value_and_grad,
    vjp as vjp,
)
from bytegrad._config import config as config
from bytegrad.errors import (
    AuxOutputError as AuxOutputError,
    DifferentiationError as DifferentiationError,
    DuplicateRuleError as DuplicateRuleError,
    MutationError as MutationError,
    NaNError as NaNError,
    NonScalarOutputError as NonScalarOutputError,
    NoRuleError as NoRuleError,
    PullbackError as PullbackError,
    PushforwardError as PushforwardError,
    UnsupportedOpcodeError as UnsupportedOpcodeError,
    WrtError as WrtError,
)
from bytegrad.rules import (
    NO_TANGENT as NO_TANGENT,
    ZERO as ZERO,
    differentiate_through as differentiate_through,
    frule as frule,
    non_differentiable as non_differentiable,
    not_implemented as not_implemented,
    opt_out as opt_out,
    rrule as rrule,
    scalar_rule as scalar_rule,
)
from bytegrad.rules.pytrees import register_pytree as register_pytree
from bytegrad.rules import _deferred as _deferred_rules
from bytegrad.runtime.tangents import PerformanceWarning as PerformanceWarning

__version__ = "0.1.0"

# `explain` and `precompile` load the fused-kernel machinery, `checkpoint`, `stop_gradient` and the tree utilities their own
# modules: imported on first use, so that `import bytegrad` stays a small part of a process's time to first gradient.
_LAZY = {"explain": "bytegrad.introspect", "precompile": "bytegrad.precompile", "export": "bytegrad.exporter",
         "ExportError": "bytegrad.exporter",
         "checkpoint": "bytegrad.runtime.checkpoint", "stop_gradient": "bytegrad.rules.control",
         **dict.fromkeys(("jacfwd", "jacrev", "linearize", "custom_vjp", "custom_jvp"), "bytegrad._jax_api"),
         **dict.fromkeys(("tree_flatten", "tree_leaves", "tree_map", "tree_unflatten"), "bytegrad.tree_util")}


def __getattr__(name: str):  # PEP 562 module attribute hook
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'bytegrad' has no attribute {name!r}")
    if module in _deferred_rules.DEFERRED:  # a deferred rules module (rules/_deferred.py): loaded as a lookup loads it
        _deferred_rules.load_module(module)
    import importlib
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))

__all__ = [
    "differentiate", "grad", "value_and_grad", "vjp", "jvp", "jacobian", "hessian", "hvp", "stop_gradient", "register_pytree",
    "tree_map", "tree_flatten", "tree_unflatten", "tree_leaves",
    "checkpoint", "jacfwd", "jacrev", "linearize", "custom_vjp", "custom_jvp",
    "PerformanceWarning",
    "explain", "precompile", "export", "ExportError",
    "AuxOutputError", "config", "DifferentiationError", "DuplicateRuleError", "MutationError", "NaNError",
    "NonScalarOutputError", "NoRuleError",
    "PullbackError", "PushforwardError", "UnsupportedOpcodeError", "WrtError",
    "NO_TANGENT", "ZERO", "differentiate_through", "frule", "non_differentiable", "not_implemented",
    "opt_out", "rrule", "scalar_rule",
]
