"""What a scalar rule's partials read (runtime/backward.py, `partial_uses`, through
bytegrad/_bytecode.py): a tape swept once replaces the arguments no partial reads by stand-ins
before the sweep, so a read missed is a wrong gradient."""
from __future__ import annotations

import numpy as np

import bytegrad
from bytegrad._bytecode import parameters_read
from bytegrad.rules import scalar_rule
from bytegrad.runtime.backward import partial_uses
from bytegrad.runtime.tape import SLIM_MIN_SIZE


def _sin_like(x):
    return np.sin(x) + 0.0


def _d_sin_like(x, out):
    cos = lambda: np.cos(x)  # noqa: E731  (x is a cell of this partial: read with LOAD_DEREF)
    return cos()


scalar_rule(_sin_like, _d_sin_like)


def _square(x):
    return x * x


def _d_square(x, out):
    c = out * 0.0; y = x * 2.0  # noqa: E702  (3.13 reads x in a STORE_FAST_LOAD_FAST: stores c, loads x)
    return y + c


scalar_rule(_square, _d_square)


def test_a_parameter_a_nested_function_reads_is_read():
    assert parameters_read(_d_sin_like.__code__) == {"x"}
    assert partial_uses(_d_sin_like, 1) == {0}
    assert partial_uses(_d_square, 1) == {0, 1}
    assert partial_uses(lambda x, y, out: out * x, 2) == {0, 2}
    assert partial_uses(lambda *a: a[0], 1) == {0, 1}
    assert partial_uses(np.cos, 1) == {0, 1}


def test_a_partial_that_reads_its_argument_in_a_closure_gets_it_on_a_lean_tape():
    """On 19c2dae (and main) the argument was taken for unread and the partial ran on a stand-in of
    zeros: the gradient of a large array was cos(0) = 1 everywhere."""
    def f(x):
        return np.sum(_sin_like(x * 1.0))

    for n in (10, 2 * SLIM_MIN_SIZE):
        x = np.linspace(0.0, 1.0, n)
        np.testing.assert_allclose(bytegrad.grad(f)(x), np.cos(x), rtol=1e-12, atol=0)


def test_a_parameter_read_by_a_store_and_load_instruction_is_read():
    """3.13 reads x in `c = out * 0.0; y = x * 2.0` with STORE_FAST_LOAD_FAST: on 19c2dae (and main)
    that read was not seen, and on 3.13 the partial ran on a stand-in of zeros (a gradient of 0
    where it is 2x)."""
    def f(x):
        return np.sum(_square(x * 1.0))

    x = np.linspace(0.0, 1.0, 2 * SLIM_MIN_SIZE)
    np.testing.assert_allclose(bytegrad.grad(f)(x), 2.0 * x, rtol=1e-12, atol=0)
