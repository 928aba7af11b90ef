"""Python code that C runs on the user's behalf during a gradient, and values that reach code by
other ways than its arguments: each gives the right gradient or a clear error, never a silent zero.

Each test here gave a wrong gradient (zero) before runtime/callbacks.py and the activity changes
that came with it.
"""
import collections
import contextlib
import operator
import sys

import numpy as np
import pytest

import bytegrad
from bytegrad import DifferentiationError, grad
from bytegrad.runtime import guards, monitor
from tests.gradcheck import numerical_grad


class Squared:
    def __init__(self, v):
        self.v = v

    @property
    def p(self):
        return self.v * self.v


def test_property_through_getattr():
    assert grad(lambda x: getattr(Squared(x), "p"))(3.0) == 6.0
    assert grad(lambda x: getattr(Squared(x), "missing", x) * 2.0)(3.0) == 2.0


def test_property_through_attrgetter():
    assert grad(lambda x: operator.attrgetter("p")(Squared(x)))(3.0) == 6.0
    assert grad(lambda x: sum(operator.attrgetter("p", "v")(Squared(x))))(3.0) == 7.0


class Dynamic:
    def __init__(self, v):
        self.v = v

    def __getattr__(self, name):
        return self.v * self.v


def test_getattr_hook_through_getattr():
    assert grad(lambda x: getattr(Dynamic(x), "q"))(3.0) == 6.0


class SquaringSlot:
    def __set_name__(self, owner, name):
        self.name = "_" + name

    def __get__(self, obj, cls=None):
        return getattr(obj, self.name)

    def __set__(self, obj, value):
        setattr(obj, self.name, value * value)


class Holder:
    d = SquaringSlot()


def test_descriptor_set_through_setattr():
    def f(x):
        h = Holder()
        setattr(h, "d", x)
        return h.d
    assert grad(f)(3.0) == 6.0


class MappingLike:
    def __init__(self, v):
        self.v = v

    def keys(self):
        return ["a", "b"]

    def __getitem__(self, k):
        return self.v * self.v if k == "a" else 2.0 * self.v


def test_dict_of_mapping_like_object():
    assert grad(lambda x: dict(MappingLike(x))["a"] + dict(MappingLike(x))["b"])(3.0) == 8.0


def test_defaultdict_factory():
    def f(x):
        d = collections.defaultdict(lambda: x * x)
        return d["a"] + d["a"]
    assert grad(f)(3.0) == 12.0


class Squares(dict):
    def __init__(self, v):
        super().__init__()
        self.v = v

    def __missing__(self, key):
        return self.v * self.v


def test_dict_subclass_missing():
    assert grad(lambda x: Squares(x)["a"])(3.0) == 6.0


class SquaringMeta(type):
    def __call__(cls, v):
        return v * v


class Built(metaclass=SquaringMeta):
    pass


def test_metaclass_call():
    assert grad(lambda x: Built(x))(3.0) == 6.0


def test_exit_stack_callbacks():  # already right: a regression guard
    def f(x):
        out = []
        with contextlib.ExitStack() as stack:
            stack.callback(lambda: out.append(x * x))
        return out[0]
    assert grad(f)(3.0) == 6.0


class ArrayLike:
    def __init__(self, v):
        self.v = v

    def __array__(self, dtype=None, copy=None):
        return self.v * self.v


@pytest.mark.parametrize("make", [np.asarray, np.array, np.asanyarray], ids=lambda f: f.__name__)
def test_asarray_of_array_interface(make):
    g = grad(lambda x: np.sum(make(ArrayLike(x))))(np.array([3.0, 1.0]))
    np.testing.assert_allclose(g, [6.0, 2.0])


def test_value_carried_in_exception_args():
    def f(x):
        try:
            raise ValueError(x * x)
        except ValueError as e:
            return e.args[0] * 2
    assert grad(f)(3.0) == 12.0


STATE = {}


def _read_state():
    return STATE["v"] * 2


def test_module_level_object_read_by_helper_without_arguments():
    def f(x):
        STATE["v"] = x * x
        return _read_state()
    assert grad(f)(3.0) == 12.0


REBOUND = None


def _read_rebound():
    return REBOUND * 2


def test_global_rebound_read_by_helper_is_an_error():
    def f(x):
        global REBOUND
        REBOUND = x * x
        return _read_rebound()
    with pytest.raises(DifferentiationError, match="reads the global REBOUND") as info:
        grad(f)(3.0)
    assert "as an argument" in str(info.value)


class Plain:
    def __init__(self, a):
        self.a = a


def test_plain_instance_argument_is_an_error():  # already an error: a regression guard
    with pytest.raises(bytegrad.WrtError, match="register_pytree"):
        grad(lambda p: p.a * p.a)(Plain(3.0))


# ---- complex scalars: Python's complex `.real` had no rule and dropped the derivative -----------


def test_real_of_python_complex_scalar():
    assert grad(lambda t: np.real((t - 1j) * (t - 1j)))(1.5) == 3.0
    assert grad(lambda t: (t + 0j).real)(1.5) == 1.0
    assert grad(lambda t: (t * 1j).imag)(1.5) == 1.0


def test_second_derivative_mixing_float_and_complex():
    f = lambda t: np.real((t * (1 + 1j) - 2j) * (t - 1j))  # noqa: E731 - t**2 + t - 2 in its real part
    assert grad(f)(1.5) == pytest.approx(4.0)
    assert grad(grad(f))(1.5) == pytest.approx(2.0)


def test_second_derivative_through_abs_of_complex():  # already right: a regression guard
    f = lambda t: np.abs((1 + 2j) * t) ** 3  # noqa: E731
    assert grad(grad(f))(1.5) == pytest.approx(6 * 5 ** 1.5 * 1.5)


def test_real_of_conditional_on_iscomplex():
    f = lambda x: np.real(x ** 2 if np.iscomplex(x) else np.sum(x))  # noqa: E731
    assert grad(f)(1 + 2j) == pytest.approx(2 + 4j)  # d/dx - i d/dy of x**2 - y**2


def test_real_imag_through_vjp_of_vjp():  # already right: a regression guard
    w = np.array([0.3 - 0.7j, 1.1 + 0.2j])

    def inner(z):  # the gradient of a real function of z, itself complex
        _, back = bytegrad.vjp(lambda z: np.sum(np.real(z) ** 2 * np.imag(z)), z)
        return back(1.0)[0]

    def outer(z):
        return np.real(np.sum(inner(z) * w))

    z = np.array([1 + 2j, 3 - 1j])
    _, back = bytegrad.vjp(outer, z)
    got = back(1.0)[0]
    h = lambda xy: outer(xy[:2] + 1j * xy[2:])  # noqa: E731
    ref = numerical_grad(h, (np.concatenate([z.real, z.imag]),), 0, eps=1e-6)
    np.testing.assert_allclose(got, ref[:2] - 1j * ref[2:], rtol=1e-6, atol=1e-8)


@pytest.mark.filterwarnings("ignore::bytegrad.PerformanceWarning")
def test_forward_mode_einsum_twice():  # already right: a regression guard
    b = np.arange(12.0).reshape(3, 4) / 7
    f = lambda a: np.sum(np.einsum("ij,jk->ik", a, b) ** 2)  # noqa: E731
    a = np.arange(6.0).reshape(2, 3)
    h_fwd = bytegrad.jacobian(bytegrad.jacobian(f, mode="fwd"), mode="fwd")(a)
    h_ref = bytegrad.hessian(lambda a: np.sum((a @ b) ** 2))(a)
    np.testing.assert_allclose(h_fwd, h_ref, rtol=1e-10)


class Tripled:
    def __init__(self, v):
        self.v = v

    def total(self):
        return self.v * 3


def test_methodcaller():
    assert grad(lambda x: operator.methodcaller("total")(Tripled(x)))(2.0) == 3.0


@pytest.mark.skipif(not (hasattr(sys, "monitoring") or monitor.CHECK),
                    reason="the frame watch needs sys.monitoring (3.12+) or BYTEGRAD_CHECK=1")
def test_python_started_blind_from_c_is_an_error():
    # a NumPy ufunc made by np.frompyfunc calls Python from C: no rule runs it rewritten, so the watch
    # stops it (itertools.groupby, the first example, now has a rule that runs its key rewritten)
    total = np.frompyfunc(Tripled.total, 1, 1)
    f = lambda x: total(Tripled(x))  # noqa: E731
    with pytest.raises(monitor.BlindCallError, match="Tripled.total") as info:
        grad(f)(2.0)
    assert info.value.loc.filename == __file__  # the user's line, not bytegrad's


@pytest.mark.skipif(not monitor.CHECK, reason="the checking mode is off (BYTEGRAD_CHECK)")
def test_checking_mode_guards_inactive_sites():
    # an activity hole, made by hand: a tracked value passed where the rewrite saw none
    from bytegrad.runtime import abi
    from bytegrad.runtime.tape import Tape, set_tape

    tape = Tape()
    x = np.ones(2)
    tape.leaf(x)
    site = abi.Site(__file__, 1, "f", "+")
    guarded = guards.guard_for(abi.BINARY_HOOKS["+"])
    old = set_tape(tape)
    try:
        with pytest.raises(monitor.BlindCallError, match="left unrewritten"):
            guarded(tape, site, x, 1.0)
        assert guarded(tape, site, np.ones(2), 1.0)[0] == 2.0
    finally:
        set_tape(old)


class Doubler:
    def __init__(self, p):
        self.y = p.v * 2


def test_init_reading_an_object_argument():
    # `Doubler(p)` with no differentiated argument, but p holds one: `__init__` runs rewritten
    def f(x):
        p = Squared(x)
        return Doubler(p).y
    assert grad(f)(3.0) == 2.0


def test_the_watch_runs_outside_the_checking_mode_on_every_version():
    """Without BYTEGRAD_CHECK the watch starts when a forward pass hands a Python object or function
    to C (sys.monitoring on 3.12+, sys.setprofile on 3.11): np.frompyfunc's call of Python code with
    a differentiated value is an error there too, not a silent zero."""
    import os
    import subprocess
    import sys

    code = ("import numpy as np, bytegrad\n"
            "class Tripled:\n"
            "    def __init__(self, v):\n"
            "        self.v = v\n"
            "    def total(self):\n"
            "        return self.v * 3\n"
            "total = np.frompyfunc(Tripled.total, 1, 1)\n"
            "try:\n"
            "    print(bytegrad.grad(lambda x: total(Tripled(x)))(2.0))\n"
            "except bytegrad.errors.BlindCallError:\n"
            "    print('BlindCallError')\n")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, BYTEGRAD_CHECK="0", PYTHONPATH=root)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "BlindCallError", out.stderr
