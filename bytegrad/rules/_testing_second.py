"""`check_rule(..., second_order=True)`: the derivative of a rule's pullback (and pushforward) against finite
differences of first derivatives.

The second-order check differentiates, with bytegrad itself (through `rrule_via_ad`, the slot
`bytegrad.api` fills), the real scalar

    s(x) = Re <w, pullback_x(out_bar)>        (and Re <out_bar, pushforward_x(v)> for a forward rule)

for a fixed random `w`, `out_bar` and tangent `v`, and compares `<ds/dx, u>` with a central
difference of `s` along a random direction `u`. The pullback is the one `bytegrad.vjp` runs (the
rule's pullback and the projection of its cotangents), recorded by a nested derivative: what
grad-of-grad, hessians and hvp differentiate. With `through=g` the output is first mapped by `g`
(gauge-invariant functions of a decomposition) and `out_bar` is g's pullback of a random cotangent
of `g(out)`, at every point.
"""
from __future__ import annotations

import types
from typing import Any, Callable

import numpy as np

from bytegrad.rules._apply import as_frule
from bytegrad.rules.registry import NO_TANGENT, ZERO, RuleKind, rrule_via_ad

__all__ = ["check_second_order", "flat_cotangent"]

# A copy of each scalar function's code per checked function: bytegrad keeps a few rewritten
# signatures per code object, and one shared code object would be rewritten over and over.
_CODE_COPIES: dict[tuple[str, str], types.CodeType] = {}


def _own_code(f: Callable[..., Any], name: str) -> Callable[..., Any]:
    """`f` with a code object of its own for the checked function `name`."""
    code = _CODE_COPIES.setdefault((name, f.__code__.co_qualname), f.__code__.replace())
    return types.FunctionType(code, f.__globals__, f.__name__, f.__defaults__, f.__closure__)


def _pairing(weights: list[Any], values: list[Any]) -> Any:
    """Re(sum(w * v)) over matching leaves, written with differentiable operations; 0.0 for none."""
    total: Any = 0.0
    for w, v in zip(weights, values):
        if v is None or v is ZERO or v is NO_TANGENT:
            continue
        total = total + np.real(np.sum(w * v))
    return total


def flat_cotangent(c: Any, x: Any, leaves_of: Callable[[Any], list[Any]]) -> list[Any]:
    """The cotangent `c` of `x` as a list matching `leaves_of(x)` (None for a missing part)."""
    n = len(leaves_of(x))
    if not n:
        return []
    if c is None or c is ZERO or c is NO_TANGENT:
        return [None] * n
    if isinstance(x, (list, tuple)):
        items = list(c) if isinstance(c, (list, tuple)) else [None] * len(x)
        return [leaf for xi, ci in zip(x, items) for leaf in flat_cotangent(ci, xi, leaves_of)]
    if isinstance(x, dict):
        return [leaf for k in x for leaf in flat_cotangent(c.get(k) if isinstance(c, dict) else None, x[k], leaves_of)]
    return [c]


def check_second_order(checker: Any, leaves_of: Callable[[Any], list[Any]], call: Callable[..., Any]) -> None:
    """Run the second-order checks of `checker` (a testing._Checker after its first-order checks)."""
    rule = checker.rule
    if rule.kind is RuleKind.NONDIFF or not any(checker.directions):
        return
    if rule.kind is RuleKind.RRULE and rule.rrule is None:
        return  # a forward rule alone: its primal call has no reverse rule for the nested derivative
    # Only the arguments holding floats are differentiated (objects, axes and strings stay constants).
    positions = tuple(i for i, ds in enumerate(checker.directions) if ds)
    _check(checker, positions, _reverse_scalar(checker, positions, leaves_of, call), "the derivative of the pullback")
    # (An elementwise rule's forward rule is built from the same partials the pullback uses.)
    frule = None if rule.kind is RuleKind.ELEMENTWISE and rule.frule is None else as_frule(rule)
    if frule is not None:
        _check(checker, positions, _forward_scalar(checker, positions, frule, leaves_of),
               "the derivative of the forward rule")


def _out_bar(checker: Any, out: Any, leaves_of: Callable[[Any], list[Any]]) -> Any:
    """The cotangent of the function's output: fixed, or g's pullback of a fixed one at `out` (zeros
    for outputs g does not use; a plain tuple for a tuple output)."""
    if checker.through is None:
        return checker.inner_bar
    # (A plain tuple: a namedtuple's generated __new__ would be called from C with tracked values.)
    _, g_pullback = rrule_via_ad(checker.through, tuple(out) if isinstance(out, tuple) else out)
    bars = flat_cotangent(g_pullback(checker.out_bar)[0], out, leaves_of)
    filled = [np.zeros_like(o) if b is None or b is ZERO else b for o, b in zip(leaves_of(out), bars)]
    return tuple(filled) if isinstance(out, tuple) else filled[0]


def _with(args: tuple[Any, ...], positions: tuple[int, ...], xs: tuple[Any, ...]) -> list[Any]:
    full = list(args)
    for i, x in zip(positions, xs):
        full[i] = x
    return full


def _reverse_scalar(checker: Any, positions: tuple[int, ...], leaves_of: Callable[[Any], list[Any]],
                    call: Callable[..., Any]) -> Callable[..., Any]:
    fn, kwargs, args = checker.fn, checker.kwargs, checker.args
    weights = [[checker.random_direction(leaf) for leaf in leaves_of(args[i])] for i in positions]

    # (Called from a function of ours, so that the rule is used even for a Python function.)
    caller = _own_code(lambda *xs: call(fn, tuple(_with(args, positions, xs)), kwargs), checker.name)

    def reverse_scalar(*xs: Any) -> Any:
        out, pullback = rrule_via_ad(caller, *xs)
        cts = pullback(_out_bar(checker, out, leaves_of))
        total: Any = 0.0
        for x, c, w in zip(xs, cts, weights):
            total = total + _pairing(w, flat_cotangent(c, x, leaves_of))
        return total

    return _own_code(reverse_scalar, checker.name)


def _forward_scalar(checker: Any, positions: tuple[int, ...], frule: Callable[..., Any],
                    leaves_of: Callable[[Any], list[Any]]) -> Callable[..., Any]:
    kwargs, args = checker.kwargs, checker.args
    args_dot = checker.tangents()

    def forward_scalar(*xs: Any) -> Any:
        out, out_dot = frule(args_dot, *_with(args, positions, xs), **kwargs)
        if out_dot is ZERO:
            return 0.0
        bar = _out_bar(checker, out, leaves_of)
        return _pairing(leaves_of(bar), flat_cotangent(out_dot, out, leaves_of))

    return _own_code(forward_scalar, checker.name)


def _check(checker: Any, positions: tuple[int, ...], scalar: Callable[..., Any], what: str) -> None:
    args = checker.args
    _, pullback = rrule_via_ad(scalar, *(args[i] for i in positions))
    cts = pullback(1.0)
    dense = [checker.dense_cotangent(i, args[i], ZERO if c is None else c) for i, c in zip(positions, cts)]
    products = [_wide(c) * _wide(d) for cs, i in zip(dense, positions) for c, d in zip(cs, checker.directions[i])]
    ad = float(sum(np.sum(p).real for p in products))
    ad_scale = float(sum(np.sum(np.abs(p)) for p in products))
    eps_machine = checker.ad_eps  # the pullback runs in the inputs' precision: no upcast here
    h = checker.user_eps if checker.user_eps is not None else eps_machine ** (1 / 3)
    values = []
    for t in (h, -h):
        moved = checker.perturbed(t, upcast=False)
        values.append(float(np.real(scalar(*(moved[i] for i in positions)))))
    plus, minus = values
    fd = (plus - minus) / (2 * h)
    rtol = checker.user_rtol if checker.user_rtol is not None else (1e-5 if eps_machine < 1e-10 else 3e-2)
    atol = checker.user_atol if checker.user_atol is not None else (1e-8 if eps_machine < 1e-10 else 1e-3)
    noise = 100 * eps_machine * (abs(plus) + abs(minus) + ad_scale * h) / h
    tol = atol + rtol * max(ad_scale, abs(fd)) + noise
    if not abs(ad - fd) <= tol:
        checker.fail(f"{what} disagrees with finite differences of the first derivative: "
                     f"<d/dx Re<w, x_bar>, u> = {ad:.6g} by nested differentiation, {fd:.6g} by central "
                     f"differences (eps={h:g}, tolerance {tol:.3g})")


def _wide(x: Any) -> Any:
    return np.asarray(x, dtype=np.complex128 if np.iscomplexobj(x) else np.float64)
