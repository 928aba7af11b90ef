"""Any rule, seen as a reverse rule: `as_rrule(rule)(*args, **kwargs) -> (out, pullback)`.

This is the reference meaning of every rule form. `rules.testing.check_rule` tests rules through
it, and the runtime's fast paths must agree with it.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from bytegrad.errors import NoRuleError
from bytegrad.rules._shape import unbroadcast
from bytegrad.rules.registry import NO_TANGENT, ZERO, Rule, RuleKind

__all__ = ["as_rrule", "as_frule", "shape_of", "elementwise_pullback"]


def shape_of(x: Any) -> tuple[int, ...]:
    return x.shape if type(x) is np.ndarray else np.shape(x)


def elementwise_pullback(rule: Rule, args: tuple[Any, ...], out: Any) -> Callable[[Any], tuple[Any, ...]]:
    """The pullback of an ELEMENTWISE rule: `x_bar_i = unbroadcast(out_bar * partial_i(*args, out))`."""
    partials = rule.partials
    n = len(partials)
    out_shape = shape_of(out)
    complex_out = np.iscomplexobj(out)

    def elementwise_rule_pullback(out_bar: Any) -> tuple[Any, ...]:
        result: list[Any] = []
        for i, arg in enumerate(args):
            p = partials[i] if i < n else None
            if p is None:
                result.append(NO_TANGENT)
                continue
            if isinstance(p, (int, float)):
                bar = unbroadcast(out_bar if p == 1 else out_bar * p, shape_of(arg), out_shape)
            else:
                bar = unbroadcast(out_bar * p(*args[:n], out), shape_of(arg), out_shape)
            if complex_out and not np.iscomplexobj(arg):
                bar = np.real(bar)  # a real argument of a complex result: Re(out_bar * partial)
            result.append(bar)
        return tuple(result)

    return elementwise_rule_pullback


def as_rrule(rule: Rule) -> Callable[..., tuple[Any, Callable[[Any], tuple[Any, ...]]]]:
    """The reverse rule that `rule` denotes, whatever its form."""
    kind = rule.kind
    if kind is RuleKind.RRULE and rule.rrule is not None:
        return rule.rrule
    if kind is RuleKind.ELEMENTWISE:

        def elementwise_rrule(*args: Any, **kwargs: Any) -> tuple[Any, Callable[[Any], tuple[Any, ...]]]:
            out = rule.fn(*args, **kwargs)
            return out, elementwise_pullback(rule, args, out)

        return elementwise_rrule
    if kind in (RuleKind.NONDIFF, RuleKind.TRANSPARENT):

        def constant_rrule(*args: Any, **kwargs: Any) -> tuple[Any, Callable[[Any], tuple[Any, ...]]]:
            out = rule.fn(*args, **kwargs)
            return out, lambda out_bar: tuple(NO_TANGENT for _ in args)

        return constant_rrule
    raise NoRuleError(rule.fn, detail=f" (its rule is of kind {kind.value}, which has no reverse form)")


def as_frule(rule: Rule) -> Callable[..., tuple[Any, Any]] | None:
    """The forward rule `(args_dot, *args, **kwargs) -> (out, out_dot)` that `rule` denotes, or None.

    `args_dot` holds one tangent per positional argument; NO_TANGENT, None and ZERO entries are skipped.
    An ELEMENTWISE rule implies `out_dot = sum_i partial_i * x_dot_i`, broadcast to the output's shape.
    """
    if rule.frule is not None:
        return rule.frule
    kind = rule.kind
    if kind is RuleKind.ELEMENTWISE:
        partials = rule.partials
        n = len(partials)

        def elementwise_frule(args_dot: tuple[Any, ...], *args: Any, **kwargs: Any) -> tuple[Any, Any]:
            out = rule.fn(*args, **kwargs)
            out_dot: Any = ZERO
            for i, x_dot in enumerate(args_dot[:n]):
                p = partials[i]
                if p is None or x_dot is None or x_dot is NO_TANGENT or x_dot is ZERO:
                    continue
                if isinstance(p, (int, float)):
                    term = x_dot if p == 1 else x_dot * p
                else:
                    term = x_dot * p(*args[:n], out)
                out_dot = term if out_dot is ZERO else out_dot + term
            out_shape = shape_of(out)
            if out_dot is not ZERO and shape_of(out_dot) != out_shape:
                out_dot = np.broadcast_to(out_dot, out_shape)
            # A float64 partial (a mask, a constant bound) must not widen a float32 output's tangent.
            out_dtype = getattr(out, "dtype", None)
            if out_dtype is not None and out_dtype.kind in "fc" and getattr(out_dot, "dtype", out_dtype) != out_dtype:
                out_dot = np.asarray(out_dot).astype(out_dtype) if type(out) is np.ndarray else out_dtype.type(out_dot)
            return out, out_dot

        return elementwise_frule
    if kind is RuleKind.NONDIFF:  # TRANSPARENT values keep their own tangents: the runtime's business

        def constant_frule(args_dot: tuple[Any, ...], *args: Any, **kwargs: Any) -> tuple[Any, Any]:
            return rule.fn(*args, **kwargs), ZERO

        return constant_frule
    return None
