"""Forward mode: push tangents through a recorded tape, node by node, from the leaves to the outputs.

The user's code runs once, rewritten and recorded exactly as for a gradient (same hooks, same
Python callees, containers and mutation records), so forward mode adds nothing to the reverse
hot path. Then each node's output tangent is computed from its parents' tangents:

- elementwise rules (`scalar_rule`): `out_dot = sum_i partial_i(*args, out) * x_dot_i`, broadcast;
- rules with an `frule`: `frule(args_dot, *args, **kwargs)[1]` (the kwargs are on the node);
- bytegrad's own structural nodes (tuple items, identities, writes, re-derived views): exact
  pushforwards below;
- any other node (a rule with only an rrule): the Jacobian-vector product obtained from its
  backward function by linear transposition, one pullback per output element, with one
  `PerformanceWarning` per function. That is exact but costs `out.size` pullbacks: give hot
  functions an `@frule`.

A tangent is None for "structurally zero"; otherwise an array shaped like the node's value (a
tuple of them for a rule's tuple output).
"""
from __future__ import annotations

import warnings
from typing import Any, Callable, Optional

import numpy as np

from bytegrad.errors import DifferentiationError, NotImplementedRuleError, qualname
from bytegrad.rules import registry
from bytegrad.rules.registry import NO_TANGENT, ZERO, NoTangent, Zero
from bytegrad.runtime import writes, zerosafe
from bytegrad.runtime.backward import (
    _bw_elementwise, _bw_identity, _bw_rrule, _bw_rrule_trusted, _bw_tuple_item, _bw_unary, _TupleOut,
    singular_partial,
)
from bytegrad.runtime.tape import Tape

__all__ = ["PerformanceWarning", "push_forward", "fit_tangent", "TRANSPOSE_LIMIT"]

_ndarray = np.ndarray
_FunctionType = type(lambda: None)

#: the largest output (in elements) whose tangent is formed from pullbacks, one per element
TRANSPOSE_LIMIT = 1 << 16


class PerformanceWarning(UserWarning):
    """A derivative is computed correctly but slowly (for example, forward mode through a rule that
    has only a reverse form)."""


Call = Callable[[Callable[..., Any], tuple], Any]


def _direct(fn: Callable[..., Any], args: tuple) -> Any:
    return fn(*args)


def push_forward(tape: Tape, seeds: dict[int, Any], start: int = 0, call: Optional[Call] = None) -> list[Any]:
    """Tangents of every node from index `start` on, given the tangents `seeds` of some leaves.

    Nodes before `start` belong to an enclosing computation: their tangents are None (they are
    constants for this derivative). `call(fn, args)` runs each pushforward; a nested derivative
    passes one that records the work on the tape.
    """
    if call is None:
        call = _direct
    nodes = tape.nodes
    values = tape.values
    n = len(nodes)  # nodes a recorded pushforward appends are not visited
    dots: list[Any] = [None] * n
    for i in range(start, n):
        seed = seeds.get(i)
        if seed is not None:
            dots[i] = seed
            continue
        node = nodes[i]
        if node is None:
            continue
        parents = node[1]
        if parents.__class__ is int:
            d = dots[parents]
            if d is None:
                continue
            parent_dots: Any = (d,)
        else:
            parent_dots = _gather(parents, dots)
            if parent_dots is None:
                continue
        pushforward = PUSHFORWARDS.get(node[0], pf_transpose)
        try:
            dots[i] = call(pushforward, (node, values[i], parent_dots))
        except DifferentiationError:
            raise
        except Exception as exc:
            site = node[2]
            raise DifferentiationError(
                f"the forward pass (tangents) of this operation failed: {type(exc).__name__}: {exc}",
                site.loc() if site is not None else None,
                "if this operation uses a custom rule, check its frule with "
                "bytegrad.rules.testing.check_rule.") from exc
    return dots


def _gather(parents: Any, dots: list[Any]) -> Any:
    """Parent tangents mirroring `parents` (ints, None, nested lists), or None when all are zero."""
    out = []
    any_dot = False
    for p in parents:
        if p is None:
            out.append(None)
        elif p.__class__ is int:
            d = dots[p]
            any_dot = any_dot or d is not None
            out.append(d)
        else:
            sub = _gather(p, dots)
            any_dot = any_dot or sub is not None
            out.append(sub)
    return out if any_dot else None


def fit_tangent(dot: Any, out: Any) -> Any:
    """`dot` as a tangent of `out`: its shape (undoing implicit broadcasting) and float dtype."""
    if dot is None or dot is ZERO or dot is NO_TANGENT:
        return None
    if type(out) is _ndarray:
        if type(dot) is not _ndarray or dot.shape != out.shape:
            dot = np.broadcast_to(dot, out.shape).copy()
        if out.dtype.kind in "fc" and dot.dtype != out.dtype and not (dot.dtype.kind == "c" and out.dtype.kind == "f"):
            dot = dot.astype(out.dtype)
    return dot


# ---- pushforwards: (node, out, parent_dots) -> out_dot --------------------------------------------


def pf_elementwise(node: tuple, out: Any, parent_dots: Any) -> Any:
    """`sum_i partial_i * x_dot_i` for a `scalar_rule` node (binary, n-ary or unary layout)."""
    partials = node[3].partials
    args = node[4]
    out_dot = None
    for i, x_dot in enumerate(parent_dots):
        if x_dot is None or i >= len(partials):
            continue
        d = partials[i]
        if d is None:
            continue
        if d.__class__ is int or d.__class__ is float:
            term = x_dot if d == 1 else (-x_dot if d == -1 else x_dot * d)
        else:
            try:
                term = x_dot * d(*args, out)
            except ZeroDivisionError:
                term = x_dot * singular_partial(d, args, out)
        out_dot = term if out_dot is None else out_dot + term
    return fit_tangent(out_dot, out)


def _rule_of(fn: Any) -> Any:
    rule = registry.lookup(fn)
    if rule is None:
        owner = getattr(fn, "__self__", None)  # `x.T` is recorded with the descriptor's __get__
        if owner is not None and type(owner) is not np.ndarray:
            rule = registry.lookup(owner)
    return rule


def _args_dot(parent_dots: Any, args: tuple) -> tuple[Any, ...]:
    """One tangent per positional argument, ZERO where there is none (lists mirror list arguments)."""
    out: list[Any] = []
    for k, a in enumerate(args):
        d = parent_dots[k] if k < len(parent_dots) else None
        if d is None:
            out.append(ZERO)
        elif type(d) is list:
            out.append(_zero_filled(d, a))
        else:
            out.append(d)
    return tuple(out)


def _zero_filled(dots: list[Any], arg: Any) -> Any:
    items = [ZERO if d is None else (_zero_filled(d, a) if type(d) is list else d) for d, a in zip(dots, arg)]
    return items if isinstance(arg, list) else tuple(items)


def pf_rrule(node: tuple, out: Any, parent_dots: Any) -> Any:
    """A rule node: its frule when it has one, else linear transposition of its pullback."""
    rule = _rule_of(node[5])
    frule = rule.frule if rule is not None else None
    if frule is None:
        return pf_transpose(node, out, parent_dots)
    args = node[4]
    kwargs = node[6] if len(node) > 6 else None
    args_dot = _args_dot(parent_dots, args)
    _, out_dot = frule(args_dot, *args, **kwargs) if kwargs else frule(args_dot, *args)
    if type(out) is _TupleOut:
        return tuple(fit_tangent(d, v) for d, v in zip(out_dot, out.value))
    return fit_tangent(out_dot, out)


def pf_tuple_item(node: tuple, out: Any, parent_dots: Any) -> Any:
    whole = parent_dots[0]
    return None if whole is None else whole[node[3]]


def pf_identity(node: tuple, out: Any, parent_dots: Any) -> Any:
    return parent_dots[0]


def _zeros_like(out: np.ndarray) -> np.ndarray:
    return np.zeros(out.shape, out.dtype if out.dtype.kind in "fc" else np.float64)


def pf_setitem(node: tuple, out: Any, parent_dots: Any) -> Any:
    """`out[key] = value` (basic key): the old tangent with the value's tangent written in."""
    old_dot, val_dot = parent_dots
    out_dot = _zeros_like(out) if old_dot is None else np.array(old_dot, dtype=_zeros_like(out).dtype, copy=True)
    out_dot[node[3]] = 0 if val_dot is None else val_dot
    return out_dot


def pf_owner_write(node: tuple, out: Any, parent_dots: Any) -> Any:
    """A write at memory positions of the owner: the same positions of the tangent."""
    old_dot, val_dot = parent_dots
    order = writes._order(out)
    base = _zeros_like(out) if old_dot is None else old_dot
    flat = np.array(base.ravel(order=order), dtype=_zeros_like(out).dtype, copy=True)
    pos = node[3]
    flat[pos] = 0 if val_dot is None else np.broadcast_to(val_dot, pos.shape)
    return flat.reshape(out.shape, order=order)


def pf_view(node: tuple, out: Any, parent_dots: Any) -> Any:
    """A view re-derived from its owner after a write: the owner's tangent at the same positions."""
    owner_dot = parent_dots[0]
    return np.asarray(owner_dot).ravel(order=node[5])[node[3]]


def pf_add_at(node: tuple, out: Any, parent_dots: Any) -> Any:
    """`np.add.at(a, idx, b)` (or subtract.at): the same accumulation on the tangents."""
    old_dot, val_dot = parent_dots
    order = writes._order(out)
    base = _zeros_like(out) if old_dot is None else old_dot
    flat = np.array(base.ravel(order=order), dtype=_zeros_like(out).dtype, copy=True)
    if val_dot is not None:
        pos = node[3]
        (np.add if node[5] > 0 else np.subtract).at(flat, pos, np.broadcast_to(val_dot, pos.shape))
    return flat.reshape(out.shape, order=order)


# ---- the general fallback: a pullback, transposed ---------------------------------------------------


_warned: set[Any] = set()


def _warn_once(node: tuple) -> None:
    fn = node[5] if len(node) > 5 and node[0] in (_bw_rrule, _bw_rrule_trusted) else node[0]
    try:
        key = fn if hash(fn) is not None else id(fn)
    except TypeError:
        key = id(fn)
    if key in _warned:
        return
    _warned.add(key)
    site = node[2]
    where = f" (first at {site.loc()})" if site is not None else ""
    warnings.warn(
        f"forward mode through {qualname(fn)}, which has no forward rule: its tangents are formed "
        f"from its pullback, one call per output element{where}. Give it an @bytegrad.frule to make "
        "this fast.", PerformanceWarning, stacklevel=2)


def _pairs(parents: Any, bars: Any, dots: Any, found: list[tuple[Any, Any]]) -> None:
    """(cotangent, tangent) pairs for every differentiated leaf of the parents."""
    for p, bar, dot in zip(parents, bars, dots):
        if p is None or dot is None or bar is None:
            continue
        if bar.__class__ is _FunctionType:
            bar = bar()
        if bar is None or isinstance(bar, (NoTangent, Zero)):
            continue
        if p.__class__ is int:
            found.append((bar, dot))
        elif type(p) is dict:
            keys = list(p)
            _pairs([p[k] for k in keys], [bar[k] for k in keys], [dot[k] for k in keys], found)
        else:
            _pairs(p, bar, dot, found)


def _contract(node: tuple, ct: Any, out: Any, parent_dots: Any) -> Any:
    """<pullback(ct), parent tangents>: one entry of J v."""
    bars = node[0](ct, node, out)
    parents = node[1]
    if parents.__class__ is int:
        parents, bars = (parents,), (bars,)
    found: list[tuple[Any, Any]] = []
    _pairs(parents, bars, parent_dots, found)
    total = 0.0
    for bar, dot in found:
        total = total + np.sum(np.multiply(bar, dot))
    return total


def _basis_tangent(node: tuple, out: Any, parent_dots: Any, make_ct: Callable[[Any], Any], like: Any) -> Any:
    """The tangent of one output array `like`: entry k is <pullback(e_k), parent tangents>."""
    if type(like) is not _ndarray:
        return _contract(node, make_ct(1.0), out, parent_dots)
    dtype = like.dtype if like.dtype.kind in "fc" else np.float64
    out_dot = np.zeros(like.shape, dtype)
    flat = out_dot.reshape(-1)
    for k in range(like.size):
        e = np.zeros(like.shape, dtype)
        e.reshape(-1)[k] = 1
        flat[k] = _contract(node, make_ct(e), out, parent_dots)
    return out_dot


def pf_transpose(node: tuple, out: Any, parent_dots: Any) -> Any:
    """J v from a node's backward function J^T: the pullback applied to each basis cotangent.

    Exact for any linear backward function (which every correct pullback is); slow for large
    outputs, hence the PerformanceWarning.
    """
    items = out.value if type(out) is _TupleOut else (out,)
    size = sum(int(np.size(v)) for v in items)
    if size > TRANSPOSE_LIMIT:
        site = node[2]
        fn = node[5] if len(node) > 5 else node[0]
        raise NotImplementedRuleError(
            f"forward mode needs a forward rule for {qualname(fn)}: it has only a reverse rule and its "
            f"output has {size} elements, too many to transpose the pullback one element at a time.",
            site.loc() if site is not None else None,
            f"register a forward rule with @bytegrad.frule({qualname(fn)}), or use reverse mode.")
    _warn_once(node)
    if type(out) is not _TupleOut:
        return _basis_tangent(node, out, parent_dots, lambda e: e, out)
    n = len(items)
    result = []
    for j, item in enumerate(items):
        if not _is_float(item):
            result.append(None)
            continue

        def make_ct(e: Any, j: int = j) -> Any:
            return tuple(e if k == j else ZERO for k in range(n))

        result.append(_basis_tangent(node, out, parent_dots, make_ct, item))
    return tuple(result)


def _is_float(v: Any) -> bool:
    if type(v) is _ndarray or isinstance(v, np.generic):
        return v.dtype.kind in "fc"
    return type(v) is float or type(v) is complex


PUSHFORWARDS: dict[Any, Callable[[tuple, Any, Any], Any]] = {
    _bw_elementwise: pf_elementwise,
    _bw_unary: pf_elementwise,
    _bw_rrule: pf_rrule,
    _bw_rrule_trusted: pf_rrule,
    _bw_tuple_item: pf_tuple_item,
    _bw_identity: pf_identity,
    writes._bw_setitem: pf_setitem,
    writes._bw_owner_write: pf_owner_write,
    writes._bw_view: pf_view,
    writes._bw_add_at: pf_add_at,
    zerosafe.bw_where: zerosafe.pf_where,
    zerosafe.SAFE_ELEMENTWISE: pf_elementwise,
    zerosafe.SAFE_UNARY: pf_elementwise,
}
