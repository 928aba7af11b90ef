"""`grad(fn, holomorphic=True)` and `value_and_grad(fn, holomorphic=True)`: the complex derivative
`f'(z)` of a holomorphic function of complex arguments, as `jax.grad(..., holomorphic=True)` gives.

bytegrad's pullbacks are transposes of the linear maps (docs/plugins.md, "Complex numbers"), so for a
holomorphic `f` the pullback of the cotangent 1 is `f'(z)` itself: this is `vjp` with that cotangent,
after the checks JAX makes (the differentiated arguments and the output are complex, the output is a
scalar). For a function that is not holomorphic (`abs`, `conj`, `.real`) the result is the transpose
of the derivative's complex-linear part only, as in JAX; that is the caller's promise to keep.

Imported by `bytegrad.grad` only when `holomorphic=True` is given.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from bytegrad._api_support import def_loc, fn_name, fn_return_loc
from bytegrad.errors import ComplexOutputError, NonScalarOutputError, WrtError

__all__ = ["HolomorphicGrad"]


class HolomorphicGrad:
    """What `grad` / `value_and_grad` return with `holomorphic=True`: call it with `fn`'s arguments."""

    def __init__(self, fn: Callable[..., Any], wrt: Any, has_aux: bool, with_value: bool) -> None:
        self.fn = fn
        self._positions, self._single = _positions(fn, 0 if wrt is None else wrt)
        self._has_aux = bool(has_aux)
        self._with_value = with_value

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from bytegrad._differentiated import Differentiated

        positions, fn = self._positions, self.fn
        for p in positions:
            if p >= len(args):
                raise WrtError(f"argnums={p} asks for argument {p}, but {len(args)} positional argument(s) were "
                               "given.", def_loc(fn), "pass the differentiated arguments positionally.")
            if not _complex_leaves(args[p]):
                raise WrtError(
                    f"grad with holomorphic=True differentiates complex arguments, but argument {p} is "
                    f"{_describe(args[p])}.", def_loc(fn),
                    "pass it as a complex value (`x.astype(complex)`, `complex(x)`), or drop holomorphic=True.")

        def picked(*xs: Any) -> Any:
            full = list(args)
            for p, x in zip(positions, xs):
                full[p] = x
            return fn(*full, **kwargs)

        result = Differentiated(picked, has_aux=self._has_aux).pullback(*(args[p] for p in positions))  # (bytegrad.vjp)
        out, back = result[0], result[1]
        self._check_output(out)
        cotangents = back(np.ones_like(out)[()] if isinstance(out, np.ndarray) else type(out)(1))
        gradient = cotangents[0] if self._single else tuple(cotangents)
        value = (out, result[2]) if self._has_aux else out
        if self._with_value:
            return value, gradient
        return (gradient, result[2]) if self._has_aux else gradient

    def _check_output(self, out: Any) -> None:
        if np.ndim(out) != 0 or not isinstance(out, (complex, float, np.number, np.ndarray)):
            raise NonScalarOutputError(
                f"grad with holomorphic=True needs a function that returns a complex scalar, but "
                f"{fn_name(self.fn)} returned {_describe(out)}.", fn_return_loc(self.fn),
                "return a scalar, or use bytegrad.jacobian (complex Jacobians are f'(z) too).")
        if not np.iscomplexobj(out):
            raise ComplexOutputError(
                f"grad with holomorphic=True needs a function that returns a complex value, but "
                f"{fn_name(self.fn)} returned {_describe(out)}.", fn_return_loc(self.fn),
                "drop holomorphic=True for a real output (its gradient is the usual one), or return a complex value.")

    def __repr__(self) -> str:
        return f"<bytegrad.grad of {fn_name(self.fn)!r} holomorphic=True argnums={self._positions!r}>"


def _positions(fn: Callable[..., Any], wrt: Any) -> tuple[tuple[int, ...], bool]:
    single = not isinstance(wrt, (tuple, list))
    positions = (wrt,) if single else tuple(wrt)
    if not positions or not all(type(p) is int and p >= 0 for p in positions):
        raise WrtError(f"holomorphic=True takes argument positions (argnums), got {wrt!r}.", def_loc(fn),
                       "give argnums as an int or a tuple of ints, as jax.grad does.")
    return positions, single


def _complex_leaves(x: Any) -> bool:
    from bytegrad.tree_util import tree_leaves

    leaves = tree_leaves(x) if not isinstance(x, (complex, np.ndarray, np.generic)) else [x]
    return bool(leaves) and all(np.iscomplexobj(leaf) for leaf in leaves)


def _describe(x: Any) -> str:
    dtype = getattr(x, "dtype", None)
    if dtype is not None and np.ndim(x):
        return f"an array of dtype {dtype} and shape {np.shape(x)}"
    return f"{x!r} ({type(x).__name__})"
