"""NumPy functions whose outputs carry no derivative: indices, rounding, signs, predicates,
comparisons, shape queries and constructors of constant arrays.
"""
from __future__ import annotations

import numpy as np

from bytegrad.rules.registry import non_differentiable


def _present(*names: str) -> list[object]:
    """The NumPy functions with these names that exist in this NumPy version, each object once."""
    found = [getattr(np, name) for name in names if hasattr(np, name)]
    return list({id(fn): fn for fn in found}.values())


# Indices and searches.
non_differentiable(*_present(
    "argmax", "argmin", "argsort", "argwhere", "nonzero", "flatnonzero", "count_nonzero", "searchsorted",
    "digitize", "unravel_index", "ravel_multi_index", "indices", "ix_", "tril_indices", "triu_indices",
    "diag_indices",
))
# Rounding, signs and other piecewise-constant elementwise functions (np.sign has a rule in ufuncs.py:
# a complex sign, z / |z|, is not constant).
non_differentiable(*_present(
    "floor", "ceil", "rint", "round", "around", "trunc", "fix", "signbit", "heaviside",
    "floor_divide", "spacing", "nextafter",
))
# Predicates and comparisons.
non_differentiable(*_present(
    "isfinite", "isnan", "isinf", "isneginf", "isposinf", "isclose", "allclose", "array_equal", "array_equiv",
    "isreal", "iscomplex", "isrealobj", "iscomplexobj", "isscalar", "any", "all",
    "greater", "greater_equal", "less", "less_equal", "equal", "not_equal",
    "logical_and", "logical_or", "logical_not", "logical_xor",
    "bitwise_and", "bitwise_or", "bitwise_xor", "invert", "left_shift", "right_shift",
))
# Shape and dtype queries.
non_differentiable(*_present("shape", "ndim", "size", "result_type", "broadcast_shapes", "can_cast", "issubdtype"))
# Arrays whose values do not depend on the arguments' values.
non_differentiable(*_present(
    "zeros_like", "ones_like", "empty_like", "zeros", "ones", "empty", "arange", "eye", "identity",
    "tri",
))
# ndarray methods that return indices, predicates or rounded values. (Metadata attributes such as
# `.shape` are plain attribute loads, which the runtime leaves alone: they need no rule.)
non_differentiable(
    np.ndarray.argmax, np.ndarray.argmin, np.ndarray.argsort, np.ndarray.nonzero, np.ndarray.any,
    np.ndarray.all, np.ndarray.round, np.ndarray.searchsorted,
)
# `a.base` is the array a view was made from (None for an array that owns its memory): read for its
# identity (`v.base is a`), given as it is, with no derivative of its own.
non_differentiable(np.ndarray.base)
