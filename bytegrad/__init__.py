"""bytegrad: derivatives of ordinary Python + NumPy code, by rewriting its bytecode."""
from bytegrad import _config as _config_module
from bytegrad._config import config as config
from bytegrad._front import differentiate as differentiate, grad as grad, value_and_grad as value_and_grad
from bytegrad import _quick as _quick_module

__version__ = "0.1.0"

# `import bytegrad` loads the settings and `differentiate`, `grad` and `value_and_grad` (bytegrad/_front.py), whose
# first gradient may be served by a stored program without the general path (bytegrad/_quick.py) where the disk
# cache holds any (else it loads the general path at once: the end of this file). Every other name loads the
# general path (`_general`: the API, the errors, the rules and the runtime) when it is first read;
# `explain` and `precompile` (the fused-kernel machinery), `checkpoint`, `stop_gradient` and the tree utilities
# also their own modules.
_GENERAL = {
    "bytegrad.api": ("hessian", "hvp", "jacobian", "jvp", "vjp"),
    "bytegrad.errors": ("AuxOutputError", "DifferentiationError", "DuplicateRuleError", "MutationError", "NaNError",
                        "NonScalarOutputError", "NoRuleError", "PullbackError", "PushforwardError",
                        "UnsupportedOpcodeError", "WrtError"),
    "bytegrad.rules": ("NO_TANGENT", "ZERO", "differentiate_through", "frule", "non_differentiable", "not_implemented",
                       "opt_out", "rrule", "scalar_rule"),
    "bytegrad.rules.pytrees": ("register_pytree",),
    "bytegrad.runtime.tangents": ("PerformanceWarning",),
}
_SUBMODULES = frozenset({"api", "errors", "rules", "runtime", "transform", "compiled", "diskcache", "introspect",  # (not
                         # `precompile`: the name is the function, from its module of that name)
                         "exporter", "tree_util"})
_LAZY = {"explain": "bytegrad.introspect", "precompile": "bytegrad.precompile", "export": "bytegrad.exporter",
         "ExportError": "bytegrad.exporter",
         "checkpoint": "bytegrad.runtime.checkpoint", "stop_gradient": "bytegrad.rules.control",
         **dict.fromkeys(("jacfwd", "jacrev", "linearize", "custom_vjp", "custom_jvp"), "bytegrad._jax_api"),
         **dict.fromkeys(("tree_flatten", "tree_leaves", "tree_map", "tree_unflatten"), "bytegrad.tree_util")}


def _general() -> None:
    """Load the general path and bind the names it gives (each as `import bytegrad` once bound them)."""
    import importlib

    for module, names in _GENERAL.items():
        loaded = importlib.import_module(module)
        for n in names:
            globals().setdefault(n, getattr(loaded, n))


_config_module.LOAD_GENERAL.append(_general)  # (for a lower layer that needs it: `rrule_via_ad`)


def __getattr__(name: str):  # PEP 562 module attribute hook
    import importlib

    if name in _SUBMODULES or name[:1] == "_" and name[:2] != "__":
        # a submodule (`from bytegrad import transform` asks here before importing it): that module alone,
        # as a submodule's own imports must not run the general path's, which may be what imports it
        try:
            return importlib.import_module(f"bytegrad.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"bytegrad.{name}":
                raise
            raise AttributeError(f"module 'bytegrad' has no attribute {name!r}") from None
    if name not in _LAZY and all(name not in names for names in _GENERAL.values()):
        raise AttributeError(f"module 'bytegrad' has no attribute {name!r}")
    _general()
    if name in globals():
        return globals()[name]
    module = _LAZY[name]
    from bytegrad.rules import _deferred as _deferred_rules

    if module in _deferred_rules.DEFERRED:  # a deferred rules module (rules/_deferred.py): loaded as a lookup loads it
        _deferred_rules.load_module(module)
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY) | {n for names in _GENERAL.values() for n in names})

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

# Nothing on disk that a first call could run (no stored programs, or settings that rule them out): every
# first gradient will load the general path, so it loads now, as the import did before there were any.
if not _quick_module.worth_waiting():
    _general()
