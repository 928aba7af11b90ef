"""`statistics`: mean, fmean, pvariance, pstdev, variance, stdev.

Loaded once the program imports `statistics` (`registry.load_lazy_rules`): `import statistics` costs
3-4 ms (it imports fractions, decimal and random), more than `import bytegrad` should.
"""
from __future__ import annotations

import statistics
from typing import Any

import numpy as np

from bytegrad.rules._project import project, stand_in
from bytegrad.rules.registry import rrule

# exact values from the module, derivatives of the plain formulas


def _floats(data: Any) -> list[Any]:
    return [item for item in data]


def _pullback_to(data: Any, items_bar: list[Any]) -> Any:
    if type(data) is np.ndarray:
        return project(np.asarray(items_bar), data)
    bars = [project(b, item) for b, item in zip(items_bar, data)]
    return tuple(bars) if type(data) is tuple else bars


def _mean_rrule(fn: Any) -> Any:
    def mean_rrule(data: Any) -> tuple[Any, Any]:
        items = _floats(data)
        out = fn(items)
        n = len(items)
        like = data if type(data) is not np.ndarray else stand_in(data)

        def mean_pullback(out_bar: Any) -> tuple[Any]:
            return (_pullback_to(like, [out_bar / n] * n),)

        return out, mean_pullback

    mean_rrule.__name__ = mean_rrule.__qualname__ = f"{fn.__name__}_rrule"
    return mean_rrule


def _variance_rrule(fn: Any, ddof: int, root: bool) -> Any:
    def variance_rrule(data: Any, *given: Any) -> tuple[Any, Any]:
        items = _floats(data)
        out = fn(items, *given)
        xbar = given[0] if given else None
        n = len(items)
        like = data if type(data) is not np.ndarray else stand_in(data)

        def variance_pullback(out_bar: Any) -> tuple[Any, ...]:
            # var == sum((x - m)**2) / (n - ddof): with m the data's mean its own term vanishes,
            # with a given `xbar` the mean is an input too; stdev == sqrt(var), 0 at var == 0.
            # (The centred values are computed here, from the items: a nested derivative records them.)
            values = _floats(data)
            mean = sum(values, 0.0) / n if xbar is None else xbar
            centred = [v - mean for v in values]
            var_bar = out_bar
            if root:
                var_bar = out_bar / (2.0 * out) if out else 0.0 * out_bar
            scale = var_bar * 2.0 / (n - ddof)
            items_bar = [scale * c for c in centred]
            if not given:
                return (_pullback_to(like, items_bar),)
            return _pullback_to(like, items_bar), None if xbar is None else project(-sum(items_bar, 0.0), xbar)

        return out, variance_pullback

    variance_rrule.__name__ = variance_rrule.__qualname__ = f"{fn.__name__}_rrule"
    return variance_rrule


for _fn in (statistics.mean, statistics.fmean):
    rrule(_fn)(_mean_rrule(_fn))
for _fn, _ddof, _root in ((statistics.pvariance, 0, False), (statistics.pstdev, 0, True),
                          (statistics.variance, 1, False), (statistics.stdev, 1, True)):
    rrule(_fn)(_variance_rrule(_fn, _ddof, _root))
