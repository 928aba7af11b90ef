"""A differentiated value passed by keyword to a function with an elementwise rule (`np.clip(x,
a_min=-t, a_max=t)`): bound to its positional place, so its derivative is not lost (it was a silent
zero on every tier), compared with finite differences and with the positional spelling."""
from __future__ import annotations

import numpy as np
import pytest

import bytegrad

X = np.array([-2.0, 0.1, 3.0, 5.0, -0.3])

SPELLINGS = {
    "keywords": lambda t: np.sum(np.clip(X, a_min=-t, a_max=2.0 * t) ** 2),
    "positional": lambda t: np.sum(np.clip(X, -t, 2.0 * t) ** 2),
    "mixed": lambda t: np.sum(np.clip(X, -t, a_max=2.0 * t) ** 2),
    "keyword on the data": lambda t: np.sum(np.clip(X * t, a_min=-0.5, a_max=1.0) ** 2),
}


def _finite_difference(f, t, h=1e-6):
    return (f(t + h) - f(t - h)) / (2 * h)


@pytest.mark.parametrize("tier", ["general", "numpy", "numba"])
@pytest.mark.parametrize("name", list(SPELLINGS))
def test_a_keyword_argument_keeps_its_derivative(name, tier):
    f = SPELLINGS[name]
    d = bytegrad.differentiate(f, tier=tier)
    for t in (0.7, 0.7, 1.3):  # (the capture, then the program)
        assert d.grad(t) == pytest.approx(_finite_difference(f, t), rel=1e-6, abs=1e-8)
    if name != "keyword on the data":
        assert d.grad(0.7) == pytest.approx(bytegrad.differentiate(SPELLINGS["positional"], tier="general").grad(0.7))
