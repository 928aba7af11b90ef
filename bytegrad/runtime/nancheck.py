"""Finding NaNs (`BYTEGRAD_DEBUG_NANS=1`, `bytegrad.config.debug_nans = True`): the first NaN or inf
that a recorded operation produces, in the forward pass or the reverse pass, raises `NaNError`
naming the user's line and the operation.

Chosen once per gradient: the API makes a `CheckingTape` instead of a `Tape`, and nothing else
changes, so a gradient with the mode off runs exactly the code it ran before. Forward: every record
is appended to the tape's `nodes` right after its value to `values`, and the checking tape's `nodes`
list checks that value as the record arrives. Reverse: `tape.sweep` hands a checking tape to
`CheckingTape.checked_sweep`, which swaps each record's reverse step for a checking twin for the
length of the sweep (and puts the originals back after it). Records whose kind only moves memory
(`Kind.moves`: writes, views, identities) are not checked: what they hold was checked where it was
computed (and an `np.empty` filled slot by slot holds garbage until it is full).
"""
from __future__ import annotations

import math
from typing import Any, Optional

import numpy as np

from bytegrad.errors import NaNError
from bytegrad.runtime.records import Kind
from bytegrad.runtime.tape import Tape, sweep

__all__ = ["CheckingTape", "first_bad"]

_ndarray = np.ndarray
_FunctionType = type(lambda: None)



def first_bad(value: Any) -> Optional[str]:
    """'NaN' or 'inf' when a float value (array or scalar) holds one, else None."""
    t = type(value)
    if t is float:
        return None if math.isfinite(value) else ("NaN" if value != value else "inf")
    if t is _ndarray:
        if value.dtype.kind not in "fc" or value.size == 0:
            return None
    elif not isinstance(value, (np.floating, np.complexfloating, complex)):
        return None
    if np.isfinite(value).all():
        return None
    return "NaN" if np.isnan(value).any() else "inf"


def _operation(node: tuple) -> str:
    return node[0].describe(node)


def _count(value: Any, what: str) -> str:
    if type(value) is not _ndarray or value.ndim == 0:
        return what
    bad = int(np.count_nonzero(np.isnan(value) if what == "NaN" else np.isinf(value)))
    return f"{what} in {bad} of its {value.size} elements"


class _CheckedNodes(list):
    """The checking tape's `nodes`: each record is checked as it is appended (its value is already
    the last of `values`)."""

    __slots__ = ("values",)
    values: list[Any]  # the tape's values

    def append(self, node: Any) -> None:
        if node is not None and not node[0].moves:
            value = self.values[len(self)]
            what = first_bad(value)
            if what is not None:
                list.append(self, node)
                site = node[2]
                raise NaNError(
                    f"{_operation(node)} produced {_count(value, what)} from inputs that were finite or came from "
                    "outside the differentiated computation: the first non-finite value of the forward pass.",
                    site.loc() if site is not None else None, _FIX)
        list.append(self, node)


_FIX = ("check this operation's inputs and domain (np.log of a non-positive value, 0 / 0, an overflow); "
        "turn the check off with bytegrad.config.debug_nans = False (or BYTEGRAD_DEBUG_NANS=0).")


_FIX_REVERSE = ("the derivative is not finite at these inputs (np.sqrt at 0, np.arcsin at 1, x ** 0.5 at 0): keep "
                "the inputs inside the domain where it is finite, or select around the point with np.where "
                "(whose unselected branch contributes zeros); turn the check off with "
                "bytegrad.config.debug_nans = False.")


class CheckingTape(Tape):
    """A tape that raises `NaNError` at the first non-finite value an operation produces."""

    nan_check = True

    def __init__(self) -> None:
        super().__init__()
        nodes = _CheckedNodes()
        nodes.values = self.values
        self.nodes = nodes

    def checked_sweep(self, seeds: dict[int, Any], stop: int) -> list[Any]:
        """`tape.sweep` with every reverse step checked; the records are as they were afterwards."""
        nodes = self.nodes
        originals: dict[int, tuple] = {}
        for i in range(max(seeds, default=-1), stop, -1):
            node = nodes[i]
            if node is not None and not node[0].moves:
                originals[i] = node
                nodes[i] = (_checking(node[0]),) + node[1:]
        self.nan_check = False  # the sweep below is the plain one
        try:
            return sweep(self, seeds, stop)
        finally:
            self.nan_check = True
            for i, node in originals.items():
                if nodes[i] is not None:  # (a lean tape's sweep releases each record after its step)
                    nodes[i] = node


_TWINS: dict[Kind, Kind] = {}


def _checking(kind: Kind) -> Kind:
    twin = _TWINS.get(kind)
    if twin is None:
        backward = kind.backward

        def checked_step(ct: Any, node: tuple, out: Any) -> Any:
            bars = backward(ct, node, out)
            parents = node[1]
            if parents.__class__ is int:
                return _checked_bar(bars, node, ct, 0)
            return type(bars)(_checked_bar(b, node, ct, k) for k, b in enumerate(bars)) \
                if type(bars) in (tuple, list) else bars

        twin = _TWINS[kind] = kind.twin(f"checked {kind.name}", checked_step)
    return twin


def _checked_bar(bar: Any, node: tuple, ct: Any, k: int) -> Any:
    if type(bar) is _FunctionType:  # a thunk: checked when the sweep asks for it
        return lambda: _checked_bar(bar(), node, ct, k)
    if type(bar) in (tuple, list):  # a structured cotangent (a list argument)
        for b in bar:
            _checked_bar(b, node, ct, k)
        return bar
    what = first_bad(bar)
    if what is not None:
        site = node[2]
        before = "" if first_bad(ct) is None else " (the cotangent it received was already non-finite)"
        raise NaNError(
            f"the reverse pass of {_operation(node)} produced {_count(bar, what)} in the cotangent of its argument "
            f"{k}{before}: the first non-finite value of the reverse pass. This line recorded the operation.",
            site.loc() if site is not None else None, _FIX_REVERSE)
    return bar
