"""The types of the rule registry (rules/registry.py): the structural tangents `ZERO` and
`NO_TANGENT`, `RuleKind`, `Rule`, the scalar `Formula` a fused kernel inlines and the `ProgramForm`
a compiled program inlines. Data only: the registry's state and the forms rule authors use are
registry.py's, which re-exports these names."""
from __future__ import annotations

import enum
from typing import Any, Callable, NamedTuple, Optional, Union

from bytegrad.errors import SourceLoc

__all__ = ["Zero", "NoTangent", "ZERO", "NO_TANGENT", "RuleKind", "Partial", "Formula", "kernel", "Kernel", "Rule",
           "OWN_RULES_DIR", "ProgramForm", "program_form"]

#: the folder of bytegrad's own rules: rules defined there are table-tested (`Rule.trusted`)
OWN_RULES_DIR = __file__.rsplit("_types.py", 1)[0]


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


# NamedTuple's call form: the class form's string annotations (`from __future__ import annotations`)
# cost a compile() each at import
class Formula(NamedTuple("_FormulaFields", [("value", str), ("partials", tuple)])):
    """A scalar rule as the source a fused kernel inlines (runtime/kernels.py): the value and one
    partial per argument (`partials`, a tuple of str), Python expressions over `{0}`, `{1}` (the
    arguments) and `{out}` (the value). They may call `math.*` and the helpers every kernel module
    defines (rules/_kernel.py). Only functions whose scalar semantics in a compiled loop match NumPy's
    (NaN, inf, signed zeros, the derivative conventions at kinks and ties) carry one; anything else is
    not fused."""

    __slots__ = ()


def kernel(value: str, *partials: str) -> Formula:
    """The kernel formula of a scalar rule: `scalar_rule(np.exp, ..., kernel=kernel("math.exp({0})", "{out}"))`."""
    return Formula(value, partials)


#: a rule's kernel: a formula, or for a function fused only with a constant last argument
#: (`x ** c`), the formula for that constant
Kernel = Union[Formula, Callable[[float], Formula]]


class Rule:
    """What bytegrad knows about differentiating one function.

    ELEMENTWISE rules hold one `partials` entry per differentiable positional argument: a callable
    `(*args, out) -> d out / d arg`, a constant, or None for an argument with no tangent.
    (Written out rather than a dataclass, so that `import bytegrad` does not import dataclasses.)
    """

    fn: Any
    kind: RuleKind
    rrule: Optional[Callable[..., Any]]
    frule: Optional[Callable[..., Any]]
    partials: tuple[Partial, ...]
    impl: Optional[Callable[..., Any]]
    reason: str
    defined_at: Optional[SourceLoc]
    # True when every partial is a constant: the reverse pass needs none of the primal values.
    constant_partials: bool
    # Rules shipped in bytegrad/rules are table-tested; the runtime skips re-checking their pullbacks.
    # Set from `defined_at`, whatever is passed.
    trusted: bool
    # Where the frule was defined, when it was registered apart from the reverse form (defined_at).
    frule_defined_at: Optional[SourceLoc]
    # ELEMENTWISE rules that fused kernels may inline: the scalar formula (see `Formula`).
    kernel: Optional[Kernel]

    FIELDS = ("fn", "kind", "rrule", "frule", "partials", "impl", "reason", "defined_at", "constant_partials",
              "trusted", "frule_defined_at", "kernel")

    def __init__(self, fn: Any, kind: RuleKind, rrule: Optional[Callable[..., Any]] = None,
                 frule: Optional[Callable[..., Any]] = None, partials: tuple[Partial, ...] = (),
                 impl: Optional[Callable[..., Any]] = None, reason: str = "",
                 defined_at: Optional[SourceLoc] = None, constant_partials: bool = False, trusted: bool = False,
                 frule_defined_at: Optional[SourceLoc] = None, kernel: Optional[Kernel] = None) -> None:
        self.fn, self.kind, self.rrule, self.frule, self.partials = fn, kind, rrule, frule, partials
        self.impl, self.reason, self.defined_at, self.constant_partials = impl, reason, defined_at, constant_partials
        self.frule_defined_at, self.kernel = frule_defined_at, kernel
        self.trusted = defined_at is not None and defined_at.filename.startswith(OWN_RULES_DIR)

    def replaced(self, **changes: Any) -> "Rule":
        """A copy with some fields changed (`dataclasses.replace`)."""
        return Rule(**{**{name: getattr(self, name) for name in Rule.FIELDS}, **changes})

    def __repr__(self) -> str:
        return "Rule(" + ", ".join(f"{name}={getattr(self, name)!r}" for name in Rule.FIELDS) + ")"

    def forms(self) -> tuple[str, ...]:
        """The forms this rule provides: 'reverse', 'forward', 'scalar'."""
        if self.kind is RuleKind.ELEMENTWISE:
            return ("scalar", "reverse", "forward")
        if self.kind is RuleKind.THROUGH:
            return ("through",)
        out = []
        if self.rrule is not None:
            out.append("reverse")
        if self.frule is not None:
            out.append("forward")
        return tuple(out)


class ProgramForm(NamedTuple("_ProgramFormFields", [("when", Callable), ("forward", str), ("cotangents", tuple)])):
    """A reverse rule's primal and pullback as code, for compiled programs (compiled/lower_numpy.py).

    Templates over `{0}`, `{1}`... (the arguments), `{g}` (the output's cotangent, an array of the
    output's shape when the output is an array) and `{shape0}`, `{shape1}`... (the arguments'
    shapes, fixed by the program's guards). `when(*args, **kwargs)` says on which arguments the
    form is the rule: the same operations in the same order as the rule and its pullback, so that
    a program gives the general path's result. A cotangent template of None: the argument has none.
    Fields: `when`, `forward` (the primal's template), `cotangents` (a tuple of templates or None).
    """

    __slots__ = ()


def program_form(when: Callable[..., bool], forward: str,
                 *cotangents: Optional[str]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator for an rrule function: attach its `ProgramForm` (written beside the rule, so the
    two are read and changed together; the program's check against the general path at capture,
    and tests/test_compiled.py, hold them to the same result)."""
    def attach(rrule_fn: Callable[..., Any]) -> Callable[..., Any]:
        rrule_fn.program_form = ProgramForm(when, forward, tuple(cotangents))  # type: ignore[attr-defined]
        return rrule_fn
    return attach
