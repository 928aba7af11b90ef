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


def test_a_parameter_a_nested_function_reads_is_read():
    assert parameters_read(_d_sin_like.__code__) == {"x"}
    assert partial_uses(_d_sin_like, 1) == {0}
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
