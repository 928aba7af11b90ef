"""A NoRuleError names the public object the user's line called (`numpy.fft.rfft`,
`scipy.special.expit`, `statistics.harmonic_mean`), never a helper met inside a library's code
(issue 16)."""
from __future__ import annotations

import statistics

import numpy as np
import pytest

import bytegrad
from bytegrad.errors import public_name
from bytegrad.rules.registry import lookup


def test_public_names_of_numpy_scipy_and_standard_library_functions():
    assert public_name(np.fft.rfft) == "numpy.fft.rfft"
    assert public_name(np.linalg.norm) == "numpy.linalg.norm"
    assert public_name(np.sin) == "numpy.sin"
    assert public_name(statistics.harmonic_mean) == "statistics.harmonic_mean"
    assert public_name(np.fft) is None  # a module is not a function to name in a fix
    from numpy.fft import _pocketfft_umath

    assert public_name(_pocketfft_umath.rfft_n_even) is None  # internal: importable from no public module


def test_public_name_of_a_scipy_ufunc():
    special = pytest.importorskip("scipy.special")
    assert public_name(special.expit) == "scipy.special.expit"


def _message(f, x):
    with pytest.raises(bytegrad.NoRuleError) as info:
        bytegrad.grad(f)(x)
    return str(info.value)


def test_an_error_inside_the_standard_library_names_the_function_the_user_called():
    text = _message(lambda x: statistics.harmonic_mean([x[0], x[1]]), np.array([1.0, 2.0]))
    fix = text.split("Fix:")[1]
    assert "no differentiation rule for statistics.harmonic_mean" in text
    assert "bytegrad.rrule(statistics.harmonic_mean)" in fix and "as_integer_ratio" not in fix
    assert "reached from your code at" in text and "test_errors_public_names.py" in text


def test_an_error_inside_numpy_names_the_numpy_function_the_user_called():
    if lookup(np.fft.rfft) is not None:
        pytest.skip("np.fft.rfft has a rule now")
    text = _message(lambda x: np.sum(np.abs(np.fft.rfft(x))), np.arange(4.0))
    fix = text.split("Fix:")[1]
    assert "no differentiation rule for numpy.fft.rfft" in text and "internal ufunc 'rfft_n_even'" in text
    assert "bytegrad.rrule(numpy.fft.rfft)" in fix and "rfft_n_even" not in fix


def test_a_scipy_ufunc_without_a_rule_is_named_by_its_public_module():
    special = pytest.importorskip("scipy.special")
    ufunc = next((f for f in (special.expit, special.erfcx, special.dawsn, special.owens_t) if lookup(f) is None), None)
    if ufunc is None:
        pytest.skip("these scipy.special functions all have rules now")
    text = _message(lambda x: np.sum(ufunc(x)), np.array([0.5, 1.5]))
    assert f"bytegrad.rrule(scipy.special.{ufunc.__name__})" in text and "numpy." + ufunc.__name__ not in text
