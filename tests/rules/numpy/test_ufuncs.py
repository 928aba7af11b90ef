"""Elementwise rules against finite differences, over shapes (with broadcasting) and dtypes."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from bytegrad.rules._apply import as_rrule
from bytegrad.rules.numpy.ufuncs import power_dx, power_dy
from bytegrad.rules.registry import lookup
from bytegrad.rules.testing import check_rule

from ..cases import DTYPES, Arr, Gen, Num, case, params


@dataclass(frozen=True)
class Elementwise:
    """An elementwise function and the domain each argument is drawn from."""

    fn: object
    domains: tuple[tuple[float, float, bool], ...]  # (lo, hi, signed) per argument

    def sample(self, shapes: tuple[tuple[int, ...], ...], dtype: str, seed: int = 0) -> list[np.ndarray]:
        rng = np.random.default_rng(seed)
        return [Arr(s, lo, hi, signed).make(rng, dtype) for s, (lo, hi, signed) in zip(shapes, self.domains)]


def U(fn: object, lo: float = -2.0, hi: float = 2.0, signed: bool = False) -> Elementwise:
    return Elementwise(fn, ((lo, hi, signed),))


def B(fn: object, x: tuple[float, float, bool] = (-2.0, 2.0, False),
      y: tuple[float, float, bool] = (-2.0, 2.0, False)) -> Elementwise:
    return Elementwise(fn, (x, y))


UNARY = [
    U(np.sin, -3, 3), U(np.cos, -3, 3), U(np.tan, -1.2, 1.2), U(np.arcsin, -0.9, 0.9), U(np.arccos, -0.9, 0.9),
    U(np.arctan, -3, 3), U(np.sinh), U(np.cosh), U(np.tanh), U(np.arcsinh, -3, 3), U(np.arccosh, 1.1, 3),
    U(np.arctanh, -0.9, 0.9), U(np.deg2rad, -90, 90), U(np.rad2deg), U(np.radians, -90, 90), U(np.degrees),
    U(np.sinc, 0.1, 2, True), U(np.exp), U(np.exp2), U(np.expm1), U(np.log, 0.1, 3), U(np.log2, 0.1, 3),
    U(np.log10, 0.1, 3), U(np.log1p, -0.9, 3), U(np.sqrt, 0.1, 3), U(np.cbrt, 0.1, 3, True), U(np.square),
    U(np.reciprocal, 0.2, 2, True), U(np.absolute, 0.1, 2, True), U(np.fabs, 0.1, 2, True), U(np.negative),
    U(np.positive), U(np.conjugate),
]
POSITIVE, NONZERO = (0.2, 2.0, False), (0.3, 2.0, True)
BINARY = [
    B(np.add), B(np.subtract), B(np.multiply), B(np.divide, y=NONZERO), B(np.power, x=POSITIVE),
    B(np.float_power, x=POSITIVE), B(np.maximum), B(np.minimum), B(np.fmax), B(np.fmin), B(np.arctan2),
    B(np.hypot), B(np.logaddexp), B(np.logaddexp2), B(np.copysign, x=NONZERO, y=NONZERO),
    B(np.mod, x=(-3.0, 3.0, False), y=(0.5, 2.0, True)), B(np.fmod, x=(-3.0, 3.0, False), y=(0.5, 2.0, True)),
]
UNARY_SHAPES = [(), (3,), (2, 3)]
BINARY_SHAPES = [((), ()), ((3,), (3,)), ((2, 3), (1, 3)), ((1, 3), (2, 1)), ((2, 3), ()), ((), (2, 1))]

OTHER = [
    case(np.clip, Arr((2, 3), -2, 2), Arr((1, 3), -1.5, -0.5), Arr((2, 1), 0.5, 1.5)),
    case(np.clip, Arr((2, 3), -2, 2), -0.5, 0.5, name="clip-literal-bounds"),
    case(np.clip, Arr((2, 3), -2, 2), None, Num(0.2, 0.8), name="clip-no-min"),
    case(np.clip, Arr((2, 3), -2, 2), a_min=-0.4, a_max=0.7, name="clip-keywords"),
    case(np.ndarray.clip, Arr((2, 3), -2, 2), Arr((1, 3), -1.5, -0.5), Arr((2, 1), 0.5, 1.5)),
    case(np.ndarray.clip, Arr((2, 3), -2, 2), None, 0.5, name="x.clip(None, max)"),
    case(np.ndarray.clip, Arr((2, 3), -2, 2), max=0.5, name="x.clip(max=)"),
    case(np.where, Gen(lambda rng, dt: rng.random((2, 3)) > 0.5), Arr((2, 3)), Arr((1, 3))),
    case(np.where, Gen(lambda rng, dt: rng.random((3,)) > 0.5), Arr((2, 3)), Num(), name="where-scalar"),
    case(np.select, [Gen(lambda rng, dt: rng.random((2, 3)) > 0.5), Gen(lambda rng, dt: rng.random(3) > 0.3)],
         [Arr((2, 3)), Arr((1, 3))], Arr((2, 1))),
    case(np.select, [Gen(lambda rng, dt: rng.random(3) > 0.5)], [Arr((3,))], name="select-default-0"),
    case(np.ldexp, Arr((2, 3)), Gen(lambda rng, dt: rng.integers(-2, 3, (2, 3)))),
    case(np.power, Arr((2, 3), 0.2, 2), 3, name="power-int-exponent"),
    case(np.power, Arr((2, 3), -2, 2), 2, name="power-square-negative-base"),
    case(np.power, 2.0, Arr((2, 3)), name="power-python-base"),
    case(np.sin, Num(), name="sin-python-float"),
    case(np.multiply, Num(), Arr((3,)), name="multiply-python-float"),
]

TABLES = [UNARY, BINARY, OTHER]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", UNARY_SHAPES, ids=str)
@pytest.mark.parametrize("entry", UNARY, ids=lambda e: e.fn.__name__)
def test_unary(entry: Elementwise, shape: tuple[int, ...], dtype: str) -> None:
    check_rule(entry.fn, *entry.sample((shape,), dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shapes", BINARY_SHAPES, ids=str)
@pytest.mark.parametrize("entry", BINARY, ids=lambda e: e.fn.__name__)
def test_binary(entry: Elementwise, shapes: tuple[tuple[int, ...], ...], dtype: str) -> None:
    check_rule(entry.fn, *entry.sample(shapes, dtype))


@pytest.mark.parametrize("case,dtype", params(OTHER))
def test_other(case, dtype):
    case.check(dtype)


@settings(max_examples=30, deadline=None)
@given(shapes=hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=3),
       entry=st.sampled_from([e for e in BINARY if e.fn in (np.multiply, np.maximum, np.power, np.arctan2)]),
       dtype=st.sampled_from(DTYPES), seed=st.integers(0, 2**16))
def test_binary_broadcasting(shapes, entry, dtype, seed):
    check_rule(entry.fn, *entry.sample(shapes.input_shapes, dtype, seed), seed=seed)


# ---- edges: partials at the boundaries of their domains ---------------------------------------------

def test_power_partials_where_x_is_zero():
    x = np.array([0.0, 0.0, 0.0, 2.0])
    y = np.array([0.0, 1.0, 2.0, 0.0])
    out = np.power(x, y)
    assert np.array_equal(power_dx(x, y, out), [0.0, 1.0, 0.0, 0.0])  # no 0 * inf = nan at y == 0
    assert np.array_equal(power_dy(x, y, out), [0.0, 0.0, 0.0, np.log(2.0)])


def test_power_exponent_partial_is_zero_for_negative_base():
    x, y = np.array([-2.0, -1.0]), np.array([2.0, 3.0])
    assert np.array_equal(power_dy(x, y, np.power(x, y)), [0.0, 0.0])


def test_power_partials_for_python_scalars():
    assert power_dx(0.0, 0.5, 0.0) == np.inf  # Python's 0.0 ** -0.5 raises; NumPy gives inf
    assert power_dx(0.0, 2.5, 0.0) == 0.0
    assert power_dx(3.0, 2, 9.0) == 6.0
    assert power_dy(-2.0, 2.0, 4.0) == 0.0
    assert power_dy(2.0, 3.0, 8.0) == pytest.approx(8.0 * np.log(2.0))


@pytest.mark.parametrize("fn", [np.maximum, np.minimum, np.fmax, np.fmin])
def test_max_min_split_ties_evenly(fn):
    x, y = np.array([1.0, 2.0, 3.0]), np.array([1.0, 0.0, 4.0])
    out, pullback = as_rrule(lookup(fn))(x, y)
    x_bar, y_bar = pullback(np.ones(3))
    assert x_bar[0] == y_bar[0] == 0.5
    assert x_bar[1:].tolist() == ([1.0, 0.0] if fn in (np.maximum, np.fmax) else [0.0, 1.0])


@pytest.mark.parametrize("fn", [np.maximum, np.minimum])
def test_max_min_of_complex_values_pass_the_cotangent_to_the_one_chosen(fn):
    # (the mask was built with `np.float64.type` for a non-float output: an AttributeError)
    import bytegrad

    w, c = np.array([1 - 1j, 2 + 0.5j]), 0.5 + 1j

    def f(z):
        return np.real(np.sum(fn(z, c) * w))

    z = np.array([1 + 2j, 0.2 + 0.1j])  # NumPy orders complex values by real part first
    eps, numeric = 1e-6, np.zeros(2, complex)
    for k in range(2):  # bytegrad's convention: d/dx - i d/dy
        e = np.zeros(2)
        e[k] = eps
        numeric[k] = (f(z + e) - f(z - e)) / (2 * eps) - 1j * (f(z + 1j * e) - f(z - 1j * e)) / (2 * eps)
    np.testing.assert_allclose(bytegrad.grad(f)(z), numeric, atol=1e-8)


@pytest.mark.parametrize("fn", [np.fmax, np.fmin])
def test_fmax_fmin_give_the_whole_cotangent_to_the_non_nan_input(fn):
    x, y = np.array([np.nan, 2.0]), np.array([1.0, np.nan])
    out, pullback = as_rrule(lookup(fn))(x, y)
    x_bar, y_bar = pullback(np.ones(2))
    assert x_bar.tolist() == [0.0, 1.0] and y_bar.tolist() == [1.0, 0.0]


def test_sqrt_partial_is_inf_at_zero():
    out, pullback = as_rrule(lookup(np.sqrt))(np.array([0.0, 4.0]))
    with np.errstate(divide="ignore"):
        (x_bar,) = pullback(np.ones(2))
    assert x_bar.tolist() == [np.inf, 0.25]


def test_float32_cotangents_stay_float32():
    x = np.linspace(0.1, 1.0, 6, dtype=np.float32).reshape(2, 3)
    for fn in (np.tanh, np.exp, np.sqrt, np.log):
        out, pullback = as_rrule(lookup(fn))(x)
        (x_bar,) = pullback(np.ones_like(out))
        assert x_bar.dtype == np.float32, fn
