"""Arrays made from constants in a capture run (`np.eye(n)`, `np.arange(n)`: runtime/dispatch.py's MAKERS).

A capture run tracks such an array as a leaf (`CaptureTape.make`) that a program makes again on every
call (compiled/lower_numpy.py), and its rewrite hooks what is computed from it (transform/activity.py's
`made_active`), so that `0.1 * np.eye(n)`, `F.T` or `np.linspace(0, 1, n) ** 2` are recorded and
recomputed by the program rather than refused.

Integer and boolean made arrays need one more step: a program's records compute real float values
only, so a record that computes an integer or boolean value from such arrays alone
(`np.arange(n) + 1`, the items of `for i in np.arange(n)`) is folded into a made value of its own
(`fold_integer_records`): the program makes it again, as it makes the array, from the capture's
operands, which are values of the constants the array was made from (fixed by the program's guards).
A record that also reads an array the capture does not track (an integer array argument) stays a
record (refused: a program computes real float values).
"""
from __future__ import annotations

from typing import Any, Iterator

import numpy as np

from bytegrad.runtime.backward import ELEMENTWISE, RULE, RULE_TRUSTED, UNARY
from bytegrad.runtime.tape import constant_tree

__all__ = ["fold_integer_records"]

_ndarray = np.ndarray
_INDEX_SCALARS = (int, bool, np.integer, np.bool_)
_PLAIN_RECORDS = (ELEMENTWISE, UNARY, RULE, RULE_TRUSTED)  # (kind, parents, site, rule, args, fn[, kwargs])


def fold_integer_records(tape: Any) -> None:
    """Turn each record of `tape` that computes an integer or boolean value from integer or boolean made
    values alone into a made value (`tape.made[i] = (fn, args, kwargs)`, its record a leaf). In place,
    and again harmlessly (a tape built for two back ends)."""
    made = getattr(tape, "made", None)
    if not made:
        return
    nodes, values = tape.nodes, tape.values
    whole = {i for i in made if _index_value(values[i])}
    if not whole:
        return
    for i in range(min(whole) + 1, len(nodes)):
        node = nodes[i]
        if node is None or not any(node[0] is k for k in _PLAIN_RECORDS) or not _index_value(values[i]):
            continue
        parents = list(_indices(node[1]))
        if parents and all(p in whole for p in parents) and _constants_beside(node[4], [values[p] for p in parents]):
            made[i] = (node[5], tuple(node[4]), node[6] if len(node) > 6 else None)
            nodes[i] = None
            whole.add(i)


def _constants_beside(args: Any, made: list) -> bool:
    """Whether every argument of a record is one of the made values `made` or a constant (a number, a
    slice of numbers, a tuple of them): not an array the capture does not track (an integer array
    argument, read by a program on each call), whose capture's value a made value would hold."""
    return all(any(a is m for m in made) or _constant(a) for a in args)


def _constant(a: Any) -> bool:
    t = type(a)
    if t is tuple:
        return all(_constant(x) for x in a)
    if t is slice:
        return _constant(a.start) and _constant(a.stop) and _constant(a.step)
    return constant_tree(a) or a is Ellipsis


def _index_value(value: Any) -> bool:
    if type(value) is _ndarray:
        return value.dtype.kind in "biu"
    return isinstance(value, _INDEX_SCALARS)


def _indices(parents: Any) -> Iterator[int]:
    """The tape indices among a record's parents (an index, or nested tuples and lists of them and None)."""
    if type(parents) is int:
        yield parents
    elif type(parents) in (tuple, list):
        for p in parents:
            yield from _indices(p)
