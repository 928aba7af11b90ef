"""Table entries for rule tests: a function, argument specs sampled per dtype, and check_rule options."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import numpy as np

from bytegrad.errors import qualname
from bytegrad.rules.testing import check_rule

DTYPES = ("float64", "float32")
#: where differentiated code is checked (grad_params): no ties, no zeros, mixed signs
POINT = np.array([0.3, -1.2, 2.0, 0.7, 1.5])


@dataclass(frozen=True)
class Arr:
    """A random float array of `shape` in [lo, hi] (with a random sign if `signed`).

    `distinct` spreads the values so no two are within 1/(3n) of the range apart (no ties for max,
    sort, abs...). `dtype` fixes the dtype instead of the case's.
    """

    shape: tuple[int, ...] = (2, 3)
    lo: float = -2.0
    hi: float = 2.0
    signed: bool = False
    distinct: bool = False
    dtype: Optional[str] = None

    def make(self, rng: np.random.Generator, dtype: str) -> np.ndarray:
        n = int(np.prod(self.shape, dtype=np.int64))
        if self.distinct:
            slots = rng.permutation(n) + 0.5 + rng.uniform(-0.3, 0.3, n)
            x = self.lo + (self.hi - self.lo) * slots / n
        else:
            x = rng.uniform(self.lo, self.hi, n)
        if self.signed:
            x = x * rng.choice([-1.0, 1.0], n)
        return np.asarray(x.reshape(self.shape), dtype=self.dtype or dtype)


@dataclass(frozen=True)
class Num:
    """A random Python float in [lo, hi]."""

    lo: float = -2.0
    hi: float = 2.0

    def make(self, rng: np.random.Generator, dtype: str) -> float:
        return float(rng.uniform(self.lo, self.hi))


@dataclass(frozen=True)
class Sc:
    """A random NumPy scalar of the case's dtype in [lo, hi]."""

    lo: float = -2.0
    hi: float = 2.0

    def make(self, rng: np.random.Generator, dtype: str) -> Any:
        return np.dtype(dtype).type(rng.uniform(self.lo, self.hi))


@dataclass(frozen=True)
class Gen:
    """Any value: `make(rng, dtype)`."""

    make: Callable[[np.random.Generator, str], Any]


def sample(spec: Any, rng: np.random.Generator, dtype: str) -> Any:
    if isinstance(spec, (Arr, Num, Sc, Gen)):
        return spec.make(rng, dtype)
    if isinstance(spec, list):
        return [sample(s, rng, dtype) for s in spec]
    if isinstance(spec, tuple) and any(isinstance(s, (Arr, Num, Sc, Gen, list)) for s in spec):
        return tuple(sample(s, rng, dtype) for s in spec)
    return spec  # a literal: axis, shape, index, int...


@dataclass
class Case:
    fn: Any
    args: tuple[Any, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)
    name: str = ""
    dtypes: tuple[str, ...] = DTYPES
    rtol: Optional[float] = None
    atol: Optional[float] = None
    #: gauge-invariant functions of the output compared instead of it (decompositions)
    through: Optional[Callable[[Any], Any]] = None

    @property
    def id(self) -> str:
        return self.name or qualname(self.fn).replace("numpy.", "np.")

    def sample(self, dtype: str, seed: int = 0) -> tuple[Any, ...]:
        rng = np.random.default_rng(seed)
        return tuple(sample(s, rng, dtype) for s in self.args)

    def check(self, dtype: str, seed: int = 0, second_order: bool = False) -> None:
        check_rule(self.fn, *self.sample(dtype, seed), rtol=self.rtol, atol=self.atol, seed=seed,
                   through=self.through, second_order=second_order, **self.kwargs)


def case(fn: Any, *args: Any, name: str = "", dtypes: tuple[str, ...] = DTYPES, rtol: Optional[float] = None,
         atol: Optional[float] = None, through: Optional[Callable[[Any], Any]] = None, **kwargs: Any) -> Case:
    return Case(fn, args, kwargs, name, dtypes, rtol, atol, through)


def params(table: list[Case]) -> list[Any]:
    """pytest parameters (case, dtype) for a table, with readable ids."""
    import pytest

    return [pytest.param(c, d, id=f"{c.id}-{i}-{d}") for i, c in enumerate(table) for d in c.dtypes]


def grad_params(functions: dict[str, Callable[..., Any]], point: np.ndarray) -> list[Any]:
    """pytest parameters (f, x) for differentiated code: each function at `point` in each of DTYPES."""
    import pytest

    return [pytest.param(f, point.astype(d), id=f"{name}-{d}") for name, f in functions.items() for d in DTYPES]
