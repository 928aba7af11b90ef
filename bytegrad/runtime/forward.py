"""Forward mode: push tangents through a recorded tape, node by node, from the leaves to the outputs.

The user's code runs once, rewritten and recorded exactly as for a gradient (same hooks, same
Python callees, containers and mutation records), so forward mode adds nothing to the reverse
hot path. Then each node's output tangent is computed from its parents' tangents:

- elementwise rules (`scalar_rule`): `out_dot = sum_i partial_i(*args, out) * x_dot_i`, broadcast;
- rules with an `frule`: `frule(args_dot, *args, **kwargs)[1]` (the kwargs are on the node);
- bytegrad's own structural nodes (tuple items, identities, writes, re-derived views): exact
  pushforwards, each its record kind's `pushforward` (runtime/records.py), defined beside its
  reverse step;
- any other node (a rule with only an rrule): the Jacobian-vector product obtained from its
  backward function by linear transposition, one pullback per output element, with one
  `PerformanceWarning` per function (runtime/tangents.py). That is exact but costs `out.size`
  pullbacks: give hot functions an `@frule`.

A tangent is None for "structurally zero"; otherwise an array shaped like the node's value (a
tuple of them for a rule's tuple output).
"""
from __future__ import annotations

from typing import Any, Optional

from bytegrad.runtime.tangents import TRANSPOSE_LIMIT, PerformanceWarning, fit_tangent, pf_transpose
from bytegrad.runtime.tape import Recorder, Tape, step_error

__all__ = ["PerformanceWarning", "push_forward", "fit_tangent", "TRANSPOSE_LIMIT"]


def push_forward(tape: Tape, seeds: dict[int, Any], start: int = 0, recorder: Optional[Recorder] = None) -> list[Any]:
    """Tangents of every node from index `start` on, given the tangents `seeds` of some leaves.

    Nodes before `start` belong to an enclosing computation: their tangents are None (they are
    constants for this derivative). This is `tape.sweep` run the other way, and it shares what the
    two directions can: a nested derivative hands both the same `Recorder` (runtime/nested.py),
    whose `call` runs each step recorded on the tape (nodes that appends are not visited), and a
    failing step raises what `tape.step_error` says (a PushforwardError where the reverse sweep
    raises a PullbackError). The walk itself is its own: it goes from the leaves up and gathers
    each node's parents' tangents, where the reverse sweep scatters a cotangent to the parents
    (and keeps that loop inline: it is every gradient's hot path).
    """
    nodes = tape.nodes
    values = tape.values
    n = len(nodes)
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
        step = node[0].pushforward or pf_transpose
        try:
            dots[i] = step(node, values[i], parent_dots) if recorder is None else \
                recorder.call(node, step, (node, values[i], parent_dots))
        except Exception as exc:
            error = step_error(node, exc, recorded=recorder is not None, forward=True)
            if error is None:
                raise
            raise error from exc
    return dots


def _gather(parents: Any, dots: list[Any]) -> Any:
    """Parent tangents mirroring `parents` (ints, None, nested lists), or None when all are zero."""
    out: list[Any] = []
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
