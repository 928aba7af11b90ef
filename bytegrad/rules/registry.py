"""The rule registry: the one mutable global of `rules/`, typed, locked and versioned.

A rule is attached to a function object (`np.sin`, `operator.mul`, `np.ndarray.sum`, `math.exp`...).
Registering a rule bumps `version()`, which is part of every cache key of rewritten code.
"""
from __future__ import annotations

import enum
import sys
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Union

from bytegrad.errors import DuplicateRuleError, SourceLoc, qualname

__all__ = [
    "Zero", "NoTangent", "ZERO", "NO_TANGENT", "RuleKind", "Rule", "register", "lookup", "version",
    "scalar_rule", "rrule", "frule", "non_differentiable", "transparent", "not_implemented",
    "differentiate_through", "opt_out", "all_rules", "load_plugins",
]


class Zero:
    """The structural zero cotangent: the additive identity. A pullback receiving it may skip work."""

    _instance: Optional["Zero"] = None

    def __new__(cls) -> "Zero":
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    __array_ufunc__ = None  # so `ndarray + ZERO` defers to Zero.__radd__

    def __repr__(self) -> str:
        return "ZERO"

    def __bool__(self) -> bool:
        return False

    def __add__(self, other: Any) -> Any:
        return other

    __radd__ = __add__

    def __neg__(self) -> "Zero":
        return self

    def __mul__(self, other: Any) -> "Zero":
        return self

    __rmul__ = __mul__


class NoTangent:
    """The tangent of a value that cannot be differentiated (ints, bools, indices, axes)."""

    _instance: Optional["NoTangent"] = None

    def __new__(cls) -> "NoTangent":
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    __array_ufunc__ = None

    def __repr__(self) -> str:
        return "NO_TANGENT"

    def __bool__(self) -> bool:
        return False


ZERO = Zero()
NO_TANGENT = NoTangent()


class RuleKind(enum.Enum):
    ELEMENTWISE = "elementwise"          # partial derivatives as data: reverse, forward and fusable
    RRULE = "rrule"                      # (out, pullback) = rrule(*args, **kwargs)
    NONDIFF = "non-differentiable"       # output carries no derivative
    TRANSPARENT = "transparent"          # moves values around without arithmetic (list.append, len)
    THROUGH = "differentiate-through"    # run this Python implementation through bytegrad instead
    NOT_IMPLEMENTED = "not-implemented"  # known gap: a clear error instead of a wrong answer


Partial = Union[None, float, int, Callable[..., Any]]


@dataclass(eq=False)
class Rule:
    """What bytegrad knows about differentiating one function.

    ELEMENTWISE rules hold one `partials` entry per differentiable positional argument: a callable
    `(*args, out) -> d out / d arg`, a constant, or None for an argument with no tangent.
    """

    fn: Any
    kind: RuleKind
    rrule: Optional[Callable[..., Any]] = None
    frule: Optional[Callable[..., Any]] = None
    partials: tuple[Partial, ...] = ()
    impl: Optional[Callable[..., Any]] = None
    reason: str = ""
    defined_at: Optional[SourceLoc] = None
    # True when every partial is a constant: the reverse pass needs none of the primal values.
    constant_partials: bool = field(default=False)
    # Rules shipped in bytegrad/rules are table-tested; the runtime skips re-checking their pullbacks.
    trusted: bool = field(default=False)

    def __post_init__(self) -> None:
        loc = self.defined_at
        self.trusted = loc is not None and loc.filename.startswith(_OWN_RULES_DIR)

    def forms(self) -> tuple[str, ...]:
        """The forms this rule provides: 'reverse', 'forward', 'scalar'."""
        if self.kind is RuleKind.ELEMENTWISE:
            return ("scalar", "reverse", "forward")
        out = []
        if self.rrule is not None:
            out.append("reverse")
        if self.frule is not None:
            out.append("forward")
        return tuple(out)


_OWN_RULES_DIR = __file__.rsplit("registry.py", 1)[0]
_RULES: dict[Any, Rule] = {}
_LOCK = threading.RLock()
_version = 0
_plugins_loaded = False


def version() -> int:
    """The registry version: it changes whenever a rule is registered."""
    return _version


def _caller_loc(depth: int) -> SourceLoc:
    frame = sys._getframe(depth + 1)
    return SourceLoc(frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name)


def register(rule: Rule, *, override: bool = False) -> Rule:
    """Add `rule` to the registry. A second rule for the same function needs `override=True`."""
    global _version
    with _LOCK:
        old = _RULES.get(rule.fn)
        if old is not None and not override:
            # An rrule and an frule for one function combine into one rule.
            if old.kind is RuleKind.RRULE and rule.kind is RuleKind.RRULE and (
                (old.rrule is None) != (rule.rrule is None)
            ):
                old.rrule = old.rrule or rule.rrule
                old.frule = old.frule or rule.frule
                _version += 1
                return old
            raise DuplicateRuleError(
                f"a second rule was registered for {qualname(rule.fn)}.\n"
                f"  first defined at {old.defined_at}\n  second defined at {rule.defined_at}",
                rule.defined_at,
                "remove one of them, or pass override=True to the second to replace the first.",
            )
        _RULES[rule.fn] = rule
        _version += 1
        return rule


def lookup(fn: Any) -> Optional[Rule]:
    """The rule for `fn`, or None. Unhashable callables have no rule."""
    try:
        return _RULES.get(fn)
    except TypeError:
        return None


def all_rules() -> dict[Any, Rule]:
    """A snapshot of the registry (for docs and tests)."""
    with _LOCK:
        return dict(_RULES)


def load_plugins() -> int:
    """Load rule packages from the entry-point group `bytegrad.rules` (once). Returns how many loaded."""
    global _plugins_loaded
    if _plugins_loaded:
        return 0
    with _LOCK:
        if _plugins_loaded:
            return 0
        _plugins_loaded = True
        from importlib.metadata import entry_points

        count = 0
        for ep in entry_points(group="bytegrad.rules"):
            obj = ep.load()
            if callable(obj):
                obj()
            count += 1
        return count


# ---- the forms rule authors use -------------------------------------------------------------


def scalar_rule(fn: Any, *partials: Partial, override: bool = False) -> Rule:
    """Declare an elementwise function by its partial derivatives, written in terms of inputs and `out`.

    >>> import numpy as np
    >>> _ = scalar_rule(np.cbrt, lambda x, out: 1.0 / (3.0 * out**2), override=True)
    """
    const = all(p is None or isinstance(p, (int, float)) for p in partials)
    return register(
        Rule(fn, RuleKind.ELEMENTWISE, partials=tuple(partials), defined_at=_caller_loc(1),
             constant_partials=const),
        override=override,
    )


def rrule(fn: Any, *, override: bool = False) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: a reverse rule `f_rrule(*args, **kwargs) -> (out, f_pullback)`.

    The pullback takes the output's cotangent and returns one cotangent per positional argument
    (NO_TANGENT or None for arguments with no derivative). An entry may be a zero-argument function
    (a thunk), which bytegrad calls only if that argument is being differentiated.
    """

    def deco(f: Callable[..., Any]) -> Callable[..., Any]:
        loc = _caller_loc(1)
        register(Rule(fn, RuleKind.RRULE, rrule=f, defined_at=loc), override=override)
        return f

    return deco


def frule(fn: Any, *, override: bool = False) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: a forward rule `f_frule(args_dot, *args, **kwargs) -> (out, out_dot)`."""

    def deco(f: Callable[..., Any]) -> Callable[..., Any]:
        loc = _caller_loc(1)
        register(Rule(fn, RuleKind.RRULE, frule=f, defined_at=loc), override=override)
        return f

    return deco


def non_differentiable(*fns: Any, override: bool = False) -> None:
    """Declare functions whose outputs carry no derivative (argmax, shape queries, floor...)."""
    loc = _caller_loc(1)
    for fn in fns:
        register(Rule(fn, RuleKind.NONDIFF, defined_at=loc), override=override)


def transparent(*fns: Any, override: bool = False) -> None:
    """Declare functions that only move values around (list.append, len, isinstance): called as is."""
    loc = _caller_loc(1)
    for fn in fns:
        register(Rule(fn, RuleKind.TRANSPARENT, defined_at=loc), override=override)


def not_implemented(fn: Any, reason: str, *, override: bool = False) -> None:
    """Declare a known gap: differentiating `fn` raises a clear error giving `reason`."""
    register(Rule(fn, RuleKind.NOT_IMPLEMENTED, reason=reason, defined_at=_caller_loc(1)), override=override)


def differentiate_through(fn: Any, impl: Callable[..., Any], *, override: bool = False) -> None:
    """Differentiate calls to `fn` by running the Python function `impl` (same signature) through bytegrad."""
    register(Rule(fn, RuleKind.THROUGH, impl=impl, defined_at=_caller_loc(1)), override=override)


def opt_out(fn: Any) -> None:
    """Drop the rule for Python function `fn`, so bytegrad differentiates through its own code."""
    global _version
    impl = getattr(fn, "__wrapped__", fn)
    if not hasattr(impl, "__code__"):
        raise TypeError(f"opt_out needs a Python function with its own code, got {qualname(fn)}")
    with _LOCK:
        _RULES[fn] = Rule(fn, RuleKind.THROUGH, impl=impl, defined_at=_caller_loc(1))
        _version += 1
