"""Nested derivatives: a reverse sweep that is itself recorded on the tape it sweeps.

A derivative taken while a tape is active (`grad(f)` inside a loss that is being differentiated)
shares that tape: its leaves are identity nodes linked to the outer values, its forward pass is
recorded like any user code, and its reverse sweep (`tape.sweep`, handed a `Recorder`) runs the
records' backward functions and the rules' pullbacks (plain Python + NumPy) through the
rewriter, so every operation of the sweep is recorded too and the outer derivative
differentiates through it: `Recording` is that recorder, which bytegrad.api's nested derivative
hands to `tape.sweep`, and to `forward.push_forward` for forward mode inside a differentiated
function (`jvp`). The sweep stops at the inner leaves:
values recorded before them are constants for the inner derivative, which is what keeps two
levels from confusing their perturbations.

Limits: a pullback is differentiable when every operation it performs has a rule; one that calls
a C function without a rule raises a PullbackError naming the user's line that recorded it.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

import numpy as np

from bytegrad.rules.registry import ZERO
from bytegrad.runtime import abi
from bytegrad.runtime.dispatch import call_python
from bytegrad.runtime.records import Site
from bytegrad.runtime.tape import Recorder, Tape

__all__ = ["Recording", "recorded_call", "recorded_add", "project_traced"]

_ndarray = np.ndarray

_add = abi.BINARY_HOOKS["+"]  # operator.add's hook


def recorded_call(tape: Tape, site: Site, fn: Callable[..., Any], args: tuple) -> Any:
    """`fn(*args)` run rewritten under `tape`, so that what it computes from tracked values is recorded."""
    return call_python(tape, site, fn, args, None)


def recorded_add(tape: Tape, site: Optional[Site], old: Any, new: Any) -> Any:
    """`tape.accumulate`, with the additions recorded."""
    if old is None or old is ZERO:
        return new
    if new is None or new is ZERO:
        return old
    if type(old) is tuple and type(new) is tuple:
        return tuple(recorded_add(tape, site, a, b) for a, b in zip(old, new))
    return _add(tape, site, old, new)


class Recording(Recorder):
    """Runs a sweep's steps rewritten and its additions through the add hook, on `tape`, at the
    site of the node they serve: the `Recorder` of a nested derivative's reverse sweep and of its
    forward pass (`forward.push_forward`)."""

    __slots__ = ("tape",)

    def __init__(self, tape: Tape) -> None:
        self.tape = tape

    def call(self, node: Optional[tuple], fn: Callable[..., Any], args: tuple) -> Any:
        site = node[2] if node is not None and node[2] is not None else _NO_SITE
        return recorded_call(self.tape, site, fn, args)

    def add(self, node: Optional[tuple], old: Any, new: Any) -> Any:
        site = node[2] if node is not None and node[2] is not None else (_NO_SITE if node is not None else None)
        return recorded_add(self.tape, site, old, new)


def project_traced(ct: Any, primal: Any) -> Any:
    """`pytree.project` written with differentiable operations only: a nested derivative runs it
    rewritten, so the gradient it hands over stays recorded on the outer tape."""
    if type(primal) is _ndarray:
        arr = ct if type(ct) is _ndarray else np.asarray(ct)
        if primal.dtype.kind == "f" and arr.dtype.kind == "c":
            arr = arr.real
        if arr.shape != primal.shape:
            arr = arr + np.zeros(primal.shape, primal.dtype)  # a fresh array, broadcast
        if arr.dtype != primal.dtype:
            arr = arr.astype(primal.dtype)
        return arr
    if type(ct) is _ndarray and ct.ndim:
        ct = np.sum(ct)  # a uniform cotangent of a scalar
    if type(primal) is float and type(ct) is not float:
        return float(ct)
    return ct


_NO_SITE = Site("<bytegrad>", None, "<reverse pass>", "nested sweep")
