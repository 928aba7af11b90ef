"""`grad(fn, holomorphic=True)` / `value_and_grad(..., holomorphic=True)`: the complex derivative f'(z)
of a holomorphic function, as `jax.grad(..., holomorphic=True)` gives, checked against central
differences along the real axis (for a holomorphic f, f'(z) = lim (f(z + h) - f(z - h)) / 2h), exact
derivatives, and random polynomials (hypothesis); and the errors JAX raises in the same places, as
DifferentiationErrors naming the user's line."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import bytegrad
from bytegrad.errors import ComplexOutputError, DifferentiationError, NonScalarOutputError, WrtError

H = 1e-6

FUNCTIONS = {
    "cube": lambda z: z ** 3,
    "sin": lambda z: np.sin(z),
    "exp_times_z": lambda z: np.exp(z) * z,
    "log": lambda z: np.log(z),
    "reciprocal": lambda z: 1.0 / (z + 2.0),
    "tanh_of_square": lambda z: np.tanh(z * z),
    "python_complex_arithmetic": lambda z: (z - 1j) * (z + 0.5) / (z + 3.0),
    "sum_over_array": lambda z: np.sum(np.cosh(z) * np.array([1.0, 2.0 - 1j])) if np.ndim(z) else np.cosh(z),
}


def _central(f, z):
    return (f(z + H) - f(z - H)) / (2 * H)


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
@pytest.mark.parametrize("z", [0.3 + 0.7j, -1.2 + 0.4j, 2.0 - 1.5j])
def test_the_derivative_of_a_holomorphic_function(name, z):
    f = FUNCTIONS[name]
    got = bytegrad.grad(f, holomorphic=True)(z)
    assert isinstance(got, complex), type(got)
    np.testing.assert_allclose(got, _central(f, z), rtol=1e-7, atol=1e-9)


def test_an_array_argument_gets_an_array_of_derivatives():
    z = np.array([0.5 + 1j, -0.25 + 0.5j], np.complex128)
    g = bytegrad.grad(lambda z: np.sum(np.sin(z) * z), holomorphic=True)(z)
    np.testing.assert_allclose(g, np.cos(z) * z + np.sin(z), rtol=1e-14)
    g32 = bytegrad.grad(lambda z: np.sum(np.exp(z)), holomorphic=True)(z.astype(np.complex64))
    assert g32.dtype == np.complex64
    np.testing.assert_allclose(g32, np.exp(z), rtol=1e-6)


def test_argnums_value_and_aux():
    f = lambda z, w: z * w ** 2  # noqa: E731
    z, w = 1 + 1j, 2 - 1j
    value, (dz, dw) = bytegrad.value_and_grad(f, argnums=(0, 1), holomorphic=True)(z, w)
    assert value == f(z, w)
    np.testing.assert_allclose([dz, dw], [w ** 2, 2 * z * w], rtol=1e-15)
    assert bytegrad.grad(f, argnums=1, holomorphic=True)(z, w) == pytest.approx(2 * z * w)
    g, aux = bytegrad.grad(lambda z: (np.exp(z), "note"), has_aux=True, holomorphic=True)(0.5j)
    assert aux == "note" and g == pytest.approx(np.exp(0.5j))
    (v, aux), g = bytegrad.value_and_grad(lambda z: (z ** 2, 7), has_aux=True, holomorphic=True)(3j)
    assert (v, aux, g) == (-9 + 0j, 7, 6j)


def test_a_non_differentiated_argument_may_be_real():
    got = bytegrad.grad(lambda z, a: a * z ** 2, holomorphic=True)(1 + 2j, 3.0)
    assert got == pytest.approx(6.0 * (1 + 2j))


@settings(max_examples=40, deadline=None)
@given(coefficients=st.lists(st.complex_numbers(max_magnitude=3.0, allow_nan=False, allow_infinity=False),
                             min_size=1, max_size=6),
       z=st.complex_numbers(max_magnitude=2.0, allow_nan=False, allow_infinity=False))
def test_random_polynomials(coefficients, z):
    """The derivative of a polynomial written as Horner's loop, against np.polyder's."""
    def horner(z):
        acc = 0j
        for c in coefficients:
            acc = acc * z + c
        return acc

    want = np.polyval(np.polyder(np.array(coefficients, complex)), z) if len(coefficients) > 1 else 0j
    got = bytegrad.grad(horner, holomorphic=True)(complex(z))
    assert abs(got - want) <= 1e-12 * (1 + abs(want)), (got, want)


def test_a_real_argument_is_refused_as_jax_does():
    with pytest.raises(WrtError, match="complex arguments") as info:
        bytegrad.grad(lambda z: z ** 2, holomorphic=True)(1.5)
    assert "test_holomorphic.py" in str(info.value) and "Fix:" in str(info.value)
    with pytest.raises(WrtError, match="complex arguments"):
        bytegrad.grad(lambda z: np.sum(z), holomorphic=True)(np.ones(2))


def test_outputs_that_are_refused():
    with pytest.raises(ComplexOutputError, match="returns a complex value") as info:
        bytegrad.grad(lambda z: abs(z), holomorphic=True)(1j)
    assert "test_holomorphic.py" in str(info.value)
    with pytest.raises(NonScalarOutputError, match="complex scalar"):
        bytegrad.grad(lambda z: z * 2.0, holomorphic=True)(np.array([1j, 2j]))


def test_argnums_must_be_positions():
    with pytest.raises(WrtError, match="argument positions"):
        bytegrad.grad(lambda z: z, argnums="z", holomorphic=True)
    assert issubclass(WrtError, DifferentiationError)


def test_without_holomorphic_a_complex_output_still_says_how():
    with pytest.raises(ComplexOutputError, match="holomorphic=True"):
        bytegrad.grad(lambda z: z ** 2)(1 + 2j)
