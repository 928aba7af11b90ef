"""Python's binary operators by symbol: the one table the transform (which maps BINARY_OP's argument
to a symbol, in transform/opcodes.py) and the runtime (which hooks each operator, runtime/abi.py)
share, at a level both may import."""
from __future__ import annotations

import operator
from typing import Any, Callable, Final, NamedTuple


class BinaryOperator(NamedTuple):
    symbol: str                 # "+", "+=", ...
    fn: Callable[..., Any]      # operator.add, operator.iadd, ...
    base: Callable[..., Any]    # the out-of-place operator: operator.add for both `+` and `+=`

    @property
    def inplace(self) -> bool:
        return self.fn is not self.base


_PAIRS = (("+", operator.add, operator.iadd), ("&", operator.and_, operator.iand),
          ("//", operator.floordiv, operator.ifloordiv), ("<<", operator.lshift, operator.ilshift),
          ("@", operator.matmul, operator.imatmul), ("*", operator.mul, operator.imul),
          ("%", operator.mod, operator.imod), ("|", operator.or_, operator.ior),
          ("**", operator.pow, operator.ipow), (">>", operator.rshift, operator.irshift),
          ("-", operator.sub, operator.isub), ("/", operator.truediv, operator.itruediv),
          ("^", operator.xor, operator.ixor))

#: every binary operator, out of place ("+") and in place ("+="), by symbol
BINARY: Final[dict[str, BinaryOperator]] = {
    **{sym: BinaryOperator(sym, fn, fn) for sym, fn, _ in _PAIRS},
    **{sym + "=": BinaryOperator(sym + "=", ifn, fn) for sym, fn, ifn in _PAIRS},
}
