"""Nested derivatives: a reverse sweep that is itself recorded on the tape it sweeps.

A derivative taken while a tape is active (`grad(f)` inside a loss that is being differentiated)
shares that tape: its leaves are identity nodes linked to the outer values, its forward pass is
recorded like any user code, and its reverse sweep runs the backward functions and the rules'
pullbacks (plain Python + NumPy) through the rewriter, so every operation of the sweep is recorded
too and the outer derivative differentiates through it. The sweep stops at the inner leaves:
values recorded before them are constants for the inner derivative, which is what keeps two
levels from confusing their perturbations.

Limits: a pullback is differentiable when every operation it performs has a rule; one that calls
a C function without a rule raises a PullbackError naming the user's line that recorded it.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from bytegrad.errors import DifferentiationError, NaNError, PullbackError, qualname
from bytegrad.rules.registry import NO_TANGENT, ZERO, NoTangent, Zero
from bytegrad.runtime import abi
from bytegrad.runtime.tape import Tape

__all__ = ["sweep_recorded", "recorded_call", "recorded_add", "project_traced"]

_ndarray = np.ndarray

_add = abi.BINARY_HOOKS["+"]
_FunctionType = type(lambda: None)


def recorded_call(tape: Tape, site: abi.Site, fn: Callable[..., Any], args: tuple) -> Any:
    """`fn(*args)` run rewritten under `tape`, so that what it computes from tracked values is recorded."""
    return abi._call_python(tape, site, fn, args, None)


def recorded_add(tape: Tape, site: abi.Site, old: Any, new: Any) -> Any:
    """`tape.accumulate`, with the additions recorded."""
    if old is None or old is ZERO:
        return new
    if new is None or new is ZERO:
        return old
    if type(old) is tuple and type(new) is tuple:
        return tuple(recorded_add(tape, site, a, b) for a, b in zip(old, new))
    return _add(tape, site, old, new)


def _failed(node: tuple, exc: BaseException) -> PullbackError:
    site = node[2]
    detail = str(exc).strip().splitlines()
    return PullbackError(
        "a nested derivative differentiates the reverse pass of this operation, and that failed: "
        f"{type(exc).__name__}: {' / '.join(line.strip() for line in detail if line.strip())}",
        site.loc() if site is not None else None,
        "give the function a rule whose pullback uses only differentiable operations, or take the "
        "inner derivative outside the differentiated function.")


def sweep_recorded(tape: Tape, seeds: dict[int, Any], stop: int) -> list[Any]:
    """`tape.sweep(tape, seeds, stop)`, with every backward step recorded on `tape` itself.

    `tape` must be the thread's current tape (the rewritten pullbacks fetch it). Nodes appended
    while sweeping (the sweep's own record) are not visited.
    """
    nodes = tape.nodes
    values = tape.values
    cts: list[Any] = [None] * len(nodes)
    if not seeds:
        return cts
    for idx, seed in seeds.items():
        cts[idx] = seed if cts[idx] is None else recorded_add(tape, None, cts[idx], seed)
    for i in range(max(seeds), stop, -1):
        ct = cts[i]
        if ct is None:
            continue
        node = nodes[i]
        if node is None:
            continue
        cts[i] = None
        site = node[2] if node[2] is not None else _NO_SITE
        try:
            bars = recorded_call(tape, site, node[0], (ct, node, values[i]))
            _distribute(tape, site, cts, node, bars)
        except PullbackError:
            raise
        except NaNError as exc:  # debug mode: named at the line that recorded this operation
            op = qualname(node[5] if len(node) > 5 and callable(node[5]) else node[0])
            raise NaNError(f"while a nested derivative ran the reverse pass of {op} (recorded at this line), "
                           f"{exc.problem}", site.loc() if node[2] is not None else exc.loc, exc.fix) from exc
        except DifferentiationError as exc:
            raise _failed(node, exc) from exc
        except Exception as exc:
            raise _failed(node, exc) from exc
    return cts


def _distribute(tape: Tape, site: abi.Site, cts: list[Any], node: tuple, bars: Any) -> None:
    parents = node[1]
    if parents.__class__ is int:
        _give(tape, site, cts, parents, bars)
        return
    for p, bar in zip(parents, bars):
        if p is None or bar is None:
            continue
        if p.__class__ is int:
            _give(tape, site, cts, p, bar)
        else:
            _route(tape, site, cts, p, bar)


def _give(tape: Tape, site: abi.Site, cts: list[Any], p: int, bar: Any) -> None:
    if bar.__class__ is _FunctionType:  # a thunk: computed only because p needs it
        bar = recorded_call(tape, site, bar, ())
    if bar is None or bar is NO_TANGENT or bar is ZERO:
        return
    old = cts[p]
    cts[p] = bar if old is None else recorded_add(tape, site, old, bar)


def _route(tape: Tape, site: abi.Site, cts: list[Any], p: Any, bar: Any) -> None:
    """`tape._route` with recorded accumulation: a structured cotangent to its tracked leaves."""
    if bar.__class__ is _FunctionType:
        bar = recorded_call(tape, site, bar, ())
    if isinstance(bar, (NoTangent, Zero)) or bar is None:
        return
    if type(p) is dict:
        for k, sub in p.items():
            _route(tape, site, cts, sub, bar[k])
        return
    if type(p) in (tuple, list):
        if len(bar) != len(p):
            raise PullbackError(
                f"a pullback returned a cotangent with {len(bar)} entries for an argument with {len(p)}.",
                site.loc() if site is not None else None)
        for sub, b in zip(p, bar):
            if sub is not None and b is not None:
                _route(tape, site, cts, sub, b)
        return
    _give(tape, site, cts, p, bar)


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


_NO_SITE = abi.Site("<bytegrad>", None, "<reverse pass>", "nested sweep")
