"""What a NumPy program's Numba twin would cost to compile, beyond its records: its array statements.

A twin whose program is an elementwise chain ending in a sum is one element loop (compiled/
lower_numba.py `_emit_loop`, compiled/numba_fused.py): its compile grows with its records, as the
cost model's `per_op` prices it. Any other twin is an array kernel, each of whose array statements
Numba compiles as a loop of its own: about 11 ms each outlined (compiled/numba_outline.py), measured
here on RK4 programs of 2, 4 and 8 steps (148, 296, 592 statements: 2.9, 4.3, 7.7 s with Numba
started, 72, 142 and 282 records), ten times `per_op`'s 2.5 ms a record. runtime/costs.py
`build_price` adds `per_statement` for each; `twin_statements` estimates their number from the
capture's records: a forward and a reverse statement for each record with an array output.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

__all__ = ["twin_statements"]

_SUMS = (np.sum, np.ndarray.sum)


def twin_statements(records: Sequence[Any]) -> int:
    """The array statements of the twin of a program of `records` (in order): 0 for an elementwise
    chain that ends in a full sum (an element loop); else two for each record with an array output."""
    if not records:
        return 0
    *body, last = records
    if all(r.kind == "elementwise" for r in body) and last.fn in _SUMS and len(last.args) == 1:
        return 0
    return 2 * sum(1 for r in records if type(r.out) is np.ndarray and r.out.size > 1)
