"""Python's operators by symbol: the one table that the transform (transform/opcodes.py maps
BINARY_OP's argument to a symbol) and the runtime (its hooks are keyed by symbol; the code it
generates writes operators inline) share, at a level both may import."""
from __future__ import annotations

import operator
from typing import Any, Callable, Final, NamedTuple


# symbol: "+", "+=", ...; fn: operator.add, operator.iadd, ...; base: the out-of-place operator
# (operator.add for both `+` and `+=`); reflected: the method a right operand may answer with ("__radd__").
# NamedTuple's call form: the class form's string annotations cost a compile() each at import.
class BinaryOperator(NamedTuple("_BinaryOperatorFields", [("symbol", str), ("fn", Callable), ("base", Callable),
                                                          ("reflected", str)])):
    __slots__ = ()

    @property
    def inplace(self) -> bool:
        return self.fn is not self.base


# (symbol, operator, in-place operator, the name in `__add__`/`__radd__`/`__iadd__`)
_PAIRS = (("+", operator.add, operator.iadd, "add"), ("&", operator.and_, operator.iand, "and"),
          ("//", operator.floordiv, operator.ifloordiv, "floordiv"), ("<<", operator.lshift, operator.ilshift, "lshift"),
          ("@", operator.matmul, operator.imatmul, "matmul"), ("*", operator.mul, operator.imul, "mul"),
          ("%", operator.mod, operator.imod, "mod"), ("|", operator.or_, operator.ior, "or"),
          ("**", operator.pow, operator.ipow, "pow"), (">>", operator.rshift, operator.irshift, "rshift"),
          ("-", operator.sub, operator.isub, "sub"), ("/", operator.truediv, operator.itruediv, "truediv"),
          ("^", operator.xor, operator.ixor, "xor"))

#: every binary operator, out of place ("+") and in place ("+="), by symbol
BINARY: Final[dict[str, BinaryOperator]] = {
    **{sym: BinaryOperator(sym, fn, fn, f"__r{name}__") for sym, fn, _, name in _PAIRS},
    **{sym + "=": BinaryOperator(sym + "=", ifn, fn, f"__r{name}__") for sym, fn, ifn, name in _PAIRS},
}
#: the symbol of each binary operator function (operator.add -> "+", operator.iadd -> "+=")
SYMBOL: Final[dict[Callable[..., Any], str]] = {op.fn: op.symbol for op in BINARY.values()}
#: the reflected method of each out-of-place binary operator (operator.add -> "__radd__")
REFLECTED: Final[dict[Callable[..., Any], str]] = {op.fn: op.reflected for op in BINARY.values() if not op.inplace}
#: the unary operators written as a symbol
UNARY: Final[dict[Callable[..., Any], str]] = {operator.neg: "-", operator.pos: "+"}


def symbols(*fns: Callable[..., Any]) -> dict[Callable[..., Any], str]:
    """{fn: its symbol} for some binary operators (the ones a code generator writes inline)."""
    return {fn: SYMBOL[fn] for fn in fns}
