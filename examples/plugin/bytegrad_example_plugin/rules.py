"""bytegrad rules for bytegrad_example_plugin: a scalar_rule, an rrule and an frule.

bytegrad imports this module through the entry point `bytegrad.rules` (see pyproject.toml) on its
first registry miss; importing it registers the rules.
"""
from __future__ import annotations

import math
from typing import Any, Callable

from bytegrad.rules import NO_TANGENT, ZERO, frule, rrule, scalar_rule

from bytegrad_example_plugin import erf, hypot

_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)

# An elementwise function given by its derivative, in terms of the input x and the output out:
# bytegrad derives both the reverse and the forward rule from it.
scalar_rule(erf, lambda x, out: _TWO_OVER_SQRT_PI * math.exp(-x * x))


@rrule(hypot)
def hypot_rrule(x: float, y: float) -> tuple[float, Callable[[Any], tuple[Any, Any]]]:
    out = hypot(x, y)

    def hypot_pullback(out_bar: Any) -> tuple[Any, Any]:
        if out == 0.0:  # the cusp at the origin: take the zero subgradient
            return 0.0, 0.0
        return out_bar * x / out, out_bar * y / out

    return out, hypot_pullback


@frule(hypot)
def hypot_frule(args_dot: tuple[Any, Any], x: float, y: float) -> tuple[float, Any]:
    out = hypot(x, y)
    x_dot, y_dot = (0.0 if d is None or d is NO_TANGENT or d is ZERO else d for d in args_dot)
    return out, (0.0 if out == 0.0 else (x * x_dot + y * y_dot) / out)
