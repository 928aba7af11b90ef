"""Building matrices and grids from arrays: tril, triu, diag and meshgrid."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from bytegrad.rules._project import project, stand_in
from bytegrad.rules._shape import unbroadcast
from bytegrad.rules.registry import NO_TANGENT, ZERO, rrule


def _triangle_rule(fn: Callable[..., Any]) -> Callable[..., Any]:
    def triangle_rrule(m: Any, *args: Any, **kwargs: Any) -> tuple[Any, Callable[..., Any]]:
        out = fn(m, *args, **kwargs)
        k = kwargs.get("k", args[0] if args else 0)
        like = stand_in(m)

        def triangle_pullback(out_bar: Any) -> tuple[Any, ...]:
            # a 1-D m is broadcast to a square matrix first: unbroadcast sums it back
            return (project(unbroadcast(fn(out_bar, k), np.shape(like)), like),) + (NO_TANGENT,) * len(args)

        return out, triangle_pullback

    triangle_rrule.__name__ = triangle_rrule.__qualname__ = f"{fn.__name__}_rrule"
    return triangle_rrule


rrule(np.tril)(_triangle_rule(np.tril))
rrule(np.triu)(_triangle_rule(np.triu))


@rrule(np.diag)
def diag_rrule(v: Any, *args: Any, **kwargs: Any) -> tuple[Any, Callable[..., Any]]:
    """A 1-D v becomes a matrix with v on its k-th diagonal; a 2-D v gives its k-th diagonal."""
    out = np.diag(v, *args, **kwargs)
    k = kwargs.get("k", args[0] if args else 0)
    like = stand_in(v)

    def diag_pullback(out_bar: Any) -> tuple[Any, ...]:
        if np.ndim(like) == 1:
            v_bar = np.diagonal(out_bar, k).copy()
        else:
            v_bar = np.zeros(np.shape(like), dtype=np.result_type(np.asarray(out_bar).dtype, np.float16))
            n = np.shape(out_bar)[0]
            v_bar[np.arange(n) + max(-k, 0), np.arange(n) + max(k, 0)] = out_bar
        return (project(v_bar, like),) + (NO_TANGENT,) * len(args)

    return out, diag_pullback


@rrule(np.meshgrid)
def meshgrid_rrule(*xi: Any, **kwargs: Any) -> tuple[Any, Callable[..., Any]]:
    out = np.meshgrid(*xi, **kwargs)
    n = len(xi)
    cartesian = kwargs.get("indexing", "xy") == "xy" and n > 1  # the first two axes swapped
    likes = [stand_in(x) for x in xi]

    def meshgrid_pullback(out_bar: Any) -> tuple[Any, ...]:
        bars: list[Any] = []
        for i, (g, like) in enumerate(zip(out_bar, likes)):
            if g is ZERO:
                bars.append(ZERO)
                continue
            ax = 1 - i if cartesian and i < 2 else i
            summed = np.sum(g, axis=tuple(d for d in range(n) if d != ax))
            bars.append(project(np.reshape(summed, np.shape(like)), like))
        return tuple(bars)

    return out, meshgrid_pullback
