"""User-facing errors: each raised from user code, citing the user's file, line and source text, with a fix.

Expected line numbers are computed from the source (`inspect.getsourcelines`), never written down.
After every error the next gradient must be right (an autouse fixture checks a canary gradient).
"""
from __future__ import annotations

import copy
import inspect
import math
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from gradcheck import check_grad

import bytegrad
from bytegrad.rules import rrule
from bytegrad.errors import ComplexOutputError

try:
    from bytegrad.rules.registry import lookup as _lookup_rule
except ImportError:  # pragma: no cover - registry moved
    _lookup_rule = None


# ---- helpers --------------------------------------------------------------------------------------


def line_of(fn, marker):
    """(line number, stripped source text) of the one line of `fn` containing `marker`."""
    lines, start = inspect.getsourcelines(fn)
    hits = [i for i, text in enumerate(lines) if marker in text]
    assert len(hits) == 1, f"marker {marker!r} found {len(hits)} times in {fn.__name__}"
    return start + hits[0], lines[hits[0]].strip()


def source_range(fn):
    lines, start = inspect.getsourcelines(fn)
    return range(start, start + len(lines))


def assert_cites(exc, fn, marker):
    """The message starts with `File "<file>", line <n>, in <func>`, shows the line's source and a fix."""
    message = str(exc)
    lineno, text = line_of(fn, marker)
    head = f'File "{fn.__code__.co_filename}", line {lineno}, in {fn.__code__.co_name}'
    assert message.startswith(head), f"expected the message to start with\n{head}\ngot:\n{message}"
    assert text in message, f"source line {text!r} missing from:\n{message}"
    assert "  Fix: " in message, f"no '  Fix: ' part in:\n{message}"
    assert message.index(text) < message.index("  Fix: ")


def assert_cites_within(exc, fn, lines):
    """Like `assert_cites`, for errors where several lines of `fn` are reasonable to cite."""
    message = str(exc)
    prefix = f'File "{fn.__code__.co_filename}", line '
    assert message.startswith(prefix), f"expected the message to start with {prefix!r}, got:\n{message}"
    lineno = int(message[len(prefix):].split(",", 1)[0])
    assert lineno in lines, f"cited line {lineno}, expected one of {list(lines)}:\n{message}"
    assert f", in {fn.__code__.co_name}" in message.splitlines()[0], message
    source = inspect.getsourcelines(fn)[0][lineno - inspect.getsourcelines(fn)[1]].strip()
    assert source in message, f"source line {source!r} missing from:\n{message}"
    assert "  Fix: " in message, f"no '  Fix: ' part in:\n{message}"


def has_rule(fn):
    return _lookup_rule is not None and _lookup_rule(fn) is not None


def _canary(x):
    return np.sum(np.tanh(x) * x) + np.sum(x[1:] * x[:-1])


@pytest.fixture(autouse=True)
def next_gradient_is_right():
    yield
    rng = np.random.default_rng(123)
    check_grad(_canary, (rng.normal(size=4),), 0)


# ---- NoRuleError ----------------------------------------------------------------------------------


def frexp_user(x):
    y = np.sin(x)
    mantissa, exponent = np.frexp(y * 2.0)  # no rule here
    return np.sum(mantissa)


_TWICE = np.frompyfunc(lambda v: 2.0 * v, 1, 1)


def pyfunc_ufunc_user(x):
    y = _TWICE(x * 1.5)  # object ufunc, no rule
    return np.sum(y.astype(float))


def _frexp_helper(v):
    return np.frexp(v)[0] * 3.0  # inside a helper


def calls_helper_without_rule(x):
    return np.sum(_frexp_helper(x ** 2))


def math_frexp_user(a):
    m, e = math.frexp(a * 2.0)  # math.frexp has no rule
    return m * a


def maybe_no_rule(x, use_frexp):
    if use_frexp:
        x = np.frexp(x)[0]
    return np.sum(np.sin(x) * x)


NO_RULE_CASES = [
    (frexp_user, "np.frexp(", np.frexp, lambda: np.random.default_rng(0).normal(size=4)),
    (pyfunc_ufunc_user, "_TWICE(", _TWICE, lambda: np.random.default_rng(0).normal(size=4)),
    (calls_helper_without_rule, None, np.frexp, lambda: np.random.default_rng(0).normal(size=4)),
    (math_frexp_user, "math.frexp(", math.frexp, lambda: 0.7),
]


@pytest.mark.parametrize("fn, marker, callee, make_x", NO_RULE_CASES, ids=[c[0].__name__ for c in NO_RULE_CASES])
def test_no_rule_error(fn, marker, callee, make_x):
    if has_rule(callee):
        pytest.skip(f"bytegrad has a rule for {callee}; pick another function without one")
    x = make_x()
    before = copy.deepcopy(x)
    with pytest.raises(bytegrad.NoRuleError) as info:
        bytegrad.grad(fn)(x)
    assert isinstance(info.value, bytegrad.DifferentiationError)
    if marker is None:  # the call without a rule sits in the helper: the helper's line is cited
        assert_cites(info.value, _frexp_helper, "np.frexp(")
    else:
        assert_cites(info.value, fn, marker)
    name = getattr(callee, "__name__", "")
    assert name and name in str(info.value), f"the function without a rule ({name}) is not named:\n{info.value}"
    np.testing.assert_array_equal(x, before)


def test_no_rule_on_constants_is_fine():
    """A function without a rule may be called on values that are not differentiated."""

    def f(x):
        m, _ = np.frexp(np.linspace(1.0, 2.0, 4))
        return np.sum(x * m)

    rng = np.random.default_rng(1)
    check_grad(f, (rng.normal(size=4),), 0)


def test_gradient_right_after_no_rule_error():
    if has_rule(np.frexp):
        pytest.skip("np.frexp has a rule")
    f = bytegrad.differentiate(maybe_no_rule)
    rng = np.random.default_rng(2)
    x = rng.normal(size=4)
    with pytest.raises(bytegrad.NoRuleError) as info:
        f.grad(x, True)
    assert_cites(info.value, maybe_no_rule, "np.frexp(")
    check_grad(f, (x, False), 0)
    with pytest.raises(bytegrad.NoRuleError):
        f.grad(x, True)
    check_grad(f, (rng.normal(size=4), False), 0)


# ---- MutationError --------------------------------------------------------------------------------


def setitem_input(x):
    y = x * 2.0
    x[0] = 1.0  # mutates the caller's array
    return np.sum(x ** 2 + y)


def setitem_slice_input(x):
    x[:2] = 0.0  # mutates the caller's array
    return np.sum(x ** 2)


def iadd_input(x):
    x += 1.0  # mutates the caller's array
    return np.sum(x)


def imul_input(x):
    s = np.sum(x)
    x *= s  # mutates the caller's array
    return np.sum(x)


def out_kwarg_input(x):
    np.add(x, 1.0, out=x)  # mutates the caller's array
    return np.sum(x)


def view_setitem_input(x):
    tail = x[1:]
    tail[0] = 2.0  # writes through a view of the caller's array
    return np.sum(x ** 2)


def column_imul_input(x):
    x[:, 0] *= 2.0  # mutates the caller's 2-d array
    return np.sum(x ** 2)


def _zero_first(v):
    v[0] = 0.0  # mutation inside a helper
    return v


def helper_mutates_input(x):
    return np.sum(_zero_first(x) ** 2)


def sort_input(x):
    x.sort()  # sorts the caller's array in place
    return np.sum(x * np.arange(len(x)))


def fill_diagonal_input(X):
    np.fill_diagonal(X, 0.0)  # writes the caller's diagonal
    return np.sum(X ** 2)


def fill_input(x):
    x.fill(0.5)  # fills the caller's array
    return np.sum(x)


def copyto_input(x):
    np.copyto(x, 0.0)  # writes the caller's array
    return np.sum(x)


def put_input(x):
    np.put(x, [0], 1.0)  # writes the caller's array
    return np.sum(x ** 2)


def add_at_input(x):
    np.add.at(x, [0, 0], 1.0)  # writes the caller's array
    return np.sum(x ** 2)


def reshape_view_setitem_input(x):
    M = x.reshape(2, 2)
    M[0, 0] = 7.0  # writes through a reshaped view of the caller's array
    return np.sum(x ** 2)


def dict_param_setitem(params):
    params["w"][0] = 0.0  # mutates an array inside the caller's dict
    return np.sum(params["w"] ** 2) + params["b"]


MUTATION_CASES = [
    (setitem_input, setitem_input, "x[0] = 1.0", lambda rng: rng.normal(size=4)),
    (setitem_slice_input, setitem_slice_input, "x[:2] = 0.0", lambda rng: rng.normal(size=4)),
    (iadd_input, iadd_input, "x += 1.0", lambda rng: rng.normal(size=4)),
    (imul_input, imul_input, "x *= s", lambda rng: rng.normal(size=4)),
    (out_kwarg_input, out_kwarg_input, "np.add(x, 1.0, out=x)", lambda rng: rng.normal(size=4)),
    (view_setitem_input, view_setitem_input, "tail[0] = 2.0", lambda rng: rng.normal(size=4)),
    (column_imul_input, column_imul_input, "x[:, 0] *= 2.0", lambda rng: rng.normal(size=(3, 2))),
    (helper_mutates_input, _zero_first, "v[0] = 0.0", lambda rng: rng.normal(size=4)),
    (dict_param_setitem, dict_param_setitem, 'params["w"][0] = 0.0', lambda rng: {"w": rng.normal(size=3), "b": 0.5}),
]


@pytest.mark.parametrize("fn, cited, marker, make_x", MUTATION_CASES, ids=[c[0].__name__ for c in MUTATION_CASES])
def test_mutation_error(fn, cited, marker, make_x):
    x = make_x(np.random.default_rng(3))
    before = copy.deepcopy(x)
    with pytest.raises(bytegrad.MutationError) as info:
        bytegrad.grad(fn)(x)
    assert isinstance(info.value, bytegrad.DifferentiationError)
    assert_cites(info.value, cited, marker)
    # The caller's data is never changed, not even partly, before the error.
    if isinstance(x, dict):
        np.testing.assert_array_equal(x["w"], before["w"])
    else:
        np.testing.assert_array_equal(x, before)


# In-place writes by methods and NumPy functions (beyond `x[i] = v`, `x += v` and `out=`).
METHOD_MUTATION_CASES = [
    (sort_input, sort_input, "x.sort()", lambda rng: rng.normal(size=4)),
    (fill_diagonal_input, fill_diagonal_input, "np.fill_diagonal(X, 0.0)", lambda rng: rng.normal(size=(3, 3))),
    (fill_input, fill_input, "x.fill(0.5)", lambda rng: rng.normal(size=4)),
    (copyto_input, copyto_input, "np.copyto(x, 0.0)", lambda rng: rng.normal(size=4)),
    (put_input, put_input, "np.put(x, [0], 1.0)", lambda rng: rng.normal(size=4)),
    (add_at_input, add_at_input, "np.add.at(x, [0, 0], 1.0)", lambda rng: rng.normal(size=4)),
    (reshape_view_setitem_input, reshape_view_setitem_input, "M[0, 0] = 7.0", lambda rng: rng.normal(size=4)),
]


@pytest.mark.parametrize("fn, cited, marker, make_x", METHOD_MUTATION_CASES,
                         ids=[c[0].__name__ for c in METHOD_MUTATION_CASES])
def test_mutation_error_by_method_or_function(fn, cited, marker, make_x):
    """The caller's array is never changed and the line is cited; the error is a MutationError."""
    x = make_x(np.random.default_rng(3))
    before = copy.deepcopy(x)
    with pytest.raises(bytegrad.DifferentiationError) as info:
        bytegrad.grad(fn)(x)
    np.testing.assert_array_equal(x, before)
    assert_cites(info.value, cited, marker)
    assert isinstance(info.value, bytegrad.MutationError), (
        f"expected a MutationError for an in-place write into a differentiated input, got "
        f"{type(info.value).__name__}:\n{info.value}")


def test_mutation_error_from_decorated_pullback_and_value_and_grad():
    f = bytegrad.differentiate(iadd_input)
    x = np.random.default_rng(4).normal(size=3)
    before = x.copy()
    for call in (f.grad, f.value_and_grad, f.pullback):
        with pytest.raises(bytegrad.MutationError) as info:
            call(x)
        assert_cites(info.value, iadd_input, "x += 1.0")
        np.testing.assert_array_equal(x, before)
    # The plain call is the user's own code: it does mutate, as written.
    f(x)
    np.testing.assert_array_equal(x, before + 1.0)


def test_mutating_the_functions_own_array_is_fine_after_an_error():
    def own(x):
        out = np.zeros(len(x))
        out[0] = x[0] ** 2
        out += x
        return np.sum(out * x)

    x = np.random.default_rng(5).normal(size=4)
    with pytest.raises(bytegrad.MutationError):
        bytegrad.grad(setitem_input)(x.copy())
    check_grad(own, (x,), 0)


def overwrite_saved_input(x):
    h = x * 2.0
    s = np.sin(h)
    h += 1.0  # overwrites a value np.sin's pullback may need
    return np.sum(s * h)


def overwrite_saved_by_setitem(x):
    h = x * 1.0
    s = h ** 3
    h[0] = 5.0  # overwrites a value the power's pullback may need
    return np.sum(s * h)


def overwrite_saved_output(x):
    e = np.exp(x)
    t = np.sum(e * x)
    e *= 2.0  # overwrites np.exp's output, which its pullback may need
    return t + np.sum(e)


def normalize_exp_in_place(x):
    e = np.exp(x)
    e /= np.sum(e)  # overwrites np.exp's output, which only exp's own pullback reads
    return e[0] + 2.0 * e[1]


def scale_tanh_through_out(x):
    a = np.tanh(x)
    np.multiply(a, 2.0, out=a)  # overwrites tanh's output through `out=`
    return np.sum(a * a)


def shift_by_max(x):
    y = x.copy()
    y -= y.max()  # overwrites the input max's pullback compares with the maximum
    return np.sum(np.exp(y))


def scale_by_std(x):
    y = x.copy()
    y /= y.std()  # overwrites the input std's pullback reads
    return np.sum(y * np.arange(4.0))


def scale_after_prod(x):
    y = x.copy()
    p = np.prod(y)
    y *= 1.7  # overwrites the input prod's pullback divides by
    return p


def decay_constant_in_place(x):
    w = np.ones(4)  # never differentiated, but `x * w` saved it for x's cotangent
    s = 0.0
    for _ in range(3):
        s = s + np.sum(x * w)
        w *= 0.5  # overwrites the constant multiply saved
    return s


def slide_index_in_place(x):
    idx = np.array([0, 1])
    s = 0.0
    for t in range(2):
        s = s + np.sum(x[idx] ** 2) * (t + 1)
        idx[:] = idx + 1  # overwrites the index the indexing saved
    return s


def refill_constant_by_slice(x):
    w = np.arange(4.0)
    s = np.sum(np.sin(x) * w)
    w[1:3] = 0.0  # overwrites part of the constant multiply saved
    return s + np.sum(w)


@pytest.mark.parametrize("fn", [overwrite_saved_input, overwrite_saved_by_setitem, overwrite_saved_output,
                                normalize_exp_in_place, scale_tanh_through_out, shift_by_max, scale_by_std,
                                scale_after_prod, decay_constant_in_place, slide_index_in_place,
                                refill_constant_by_slice],
                         ids=lambda f: f.__name__)
def test_overwriting_a_saved_value_keeps_a_copy_for_the_reverse_pass(fn):
    """An in-place write into an array some operation saved (its input, its own output, a constant,
    an index) gives the right gradient: the operation keeps a copy of what it saved (copy-on-write)."""
    x = np.random.default_rng(6).normal(size=4)
    before = x.copy()
    check_grad(fn, (x,), 0)
    np.testing.assert_array_equal(x, before)


def _view_then_scale(x):
    a = x.copy()
    v = a[1:3]
    v *= 2.0  # through a view of an array the function made
    return np.sum(a * x)


def _shift_add_self(x):
    a = x * 1.0
    a[1:] += a[:-1]  # the operand overlaps the target
    return np.sum(a * x)


def _add_own_transpose(x):
    a = np.outer(x, x)
    a += a.T
    return np.sum(a * a)


def _multiply_into_itself(x):
    a = x + 0.0
    np.multiply(a, x, out=a)
    np.sin(a, out=a)
    return np.sum(a)


def _square_in_place(x):
    y = x * 1.0
    y *= y
    return np.sum(y)


@pytest.mark.parametrize("fn", [_view_then_scale, _shift_add_self, _add_own_transpose, _multiply_into_itself,
                                _square_in_place], ids=lambda f: f.__name__.strip("_"))
def test_writes_through_views_and_into_their_own_operands(fn):
    """Each raised a MutationError (the write marked the owner's record stale before reading it)."""
    check_grad(fn, (np.random.default_rng(7).normal(size=4),), 0)


def _unique_values(x):
    u = np.linalg.qr(np.outer(x, x), mode="raw")[0]  # Python code in NumPy; a C helper in it has no rule
    return np.sum(u)


def test_an_error_inside_numpys_python_code_names_the_users_line():
    """The failing operation is in NumPy's own source: the message also says which line of the
    user's code reached it (the whole call chain is not in the message, that one line is)."""
    with pytest.raises(bytegrad.NoRuleError) as info:
        bytegrad.grad(_unique_values)(np.array([1.0, 2.0, 2.0]))
    message = str(info.value)
    assert message.startswith('File "') and "numpy" in message.splitlines()[0]
    lineno, text = line_of(_unique_values, "np.linalg.qr(")
    assert f'reached from your code at File "{__file__}", line {lineno}, in _unique_values' in message
    assert text in message
    assert info.value.caller.lineno == lineno


# ---- NonScalarOutputError ---------------------------------------------------------------------------


def vector_valued(x):
    y = np.sin(x)
    return y * 2.0  # a vector


def tuple_valued(x):
    return np.sum(x), np.sum(x ** 2)  # a tuple


@pytest.mark.parametrize("fn", [vector_valued, tuple_valued], ids=lambda f: f.__name__)
def test_non_scalar_output_error(fn):
    x = np.random.default_rng(7).normal(size=3)
    for make in (lambda: bytegrad.grad(fn)(x), lambda: bytegrad.differentiate(fn).grad(x),
                 lambda: bytegrad.value_and_grad(fn)(x)):
        with pytest.raises(bytegrad.NonScalarOutputError) as info:
            make()
        assert isinstance(info.value, bytegrad.DifferentiationError)
        return_line, _ = line_of(fn, "return ")
        def_line = fn.__code__.co_firstlineno
        assert_cites_within(info.value, fn, {return_line, def_line})
    if fn is vector_valued:
        assert "(3,)" in str(info.value), f"the output's shape is not shown:\n{info.value}"


def complex_sum(z):
    return np.sum(z ** 2)  # complex


def complex_from_real(x):
    return np.sum(x * 1j) + 0.5  # complex from a real input


def complex_python_scalar(x):
    return complex(1.0, 2.0) * float(np.sum(x))  # a Python complex


@pytest.mark.parametrize("fn,x", [
    (complex_sum, np.array([1.0 + 2.0j, 3.0 - 1.0j])), (complex_sum, np.array([1.0 + 2.0j], dtype=np.complex64)),
    (complex_from_real, np.array([1.0, 2.0])), (complex_from_real, np.array([1.0, 2.0], dtype=np.float32)),
    (complex_python_scalar, np.array([1.0, 2.0])),
], ids=["complex128", "complex64", "real-input", "float32-input", "python-complex"])
def test_complex_output_is_refused_not_its_real_part_differentiated(fn, x):
    for make in (lambda: bytegrad.grad(fn)(x), lambda: bytegrad.value_and_grad(fn)(x)):
        with pytest.raises(ComplexOutputError) as info:
            make()
        assert isinstance(info.value, bytegrad.NonScalarOutputError)
        assert isinstance(info.value, TypeError)  # what JAX and autograd raise for a complex output
        assert "np.real" in str(info.value) and "bytegrad.vjp" in str(info.value)
        return_line, _ = line_of(fn, "return ")
        assert_cites_within(info.value, fn, {return_line, fn.__code__.co_firstlineno})
    # the real part is what the user may mean, and it differentiates
    bytegrad.grad(lambda v: np.real(fn(v)))(x)


def test_vjp_of_vector_valued_is_fine_after_non_scalar_error():
    x = np.random.default_rng(8).normal(size=3)
    with pytest.raises(bytegrad.NonScalarOutputError):
        bytegrad.grad(vector_valued)(x)
    out, back = bytegrad.vjp(vector_valued, x)
    np.testing.assert_allclose(out, vector_valued(x), rtol=1e-12)
    u = np.array([1.0, -2.0, 0.5])
    (x_bar,) = back(u)
    np.testing.assert_allclose(x_bar, 2.0 * np.cos(x) * u, rtol=1e-10)


# ---- WrtError -------------------------------------------------------------------------------------


def two_args(x, y):
    return np.sum(x * y)


def with_int(x, n):
    return np.sum(x ** n)


def with_str(x, mode):
    return np.sum(x) if mode == "sum" else np.max(x)


WRT_CASES = [
    ("out of range", two_args, 2, lambda x: (x, x), "2"),
    ("far out of range", two_args, 7, lambda x: (x, x), "7"),
    ("names no parameter", two_args, "z", lambda x: (x, x), "z"),
    ("one entry of a tuple names no parameter", two_args, (0, "nope"), lambda x: (x, x), "nope"),
    ("names an int argument", with_int, "n", lambda x: (x, 2), "n"),
    ("names a str argument", with_str, "mode", lambda x: (x, "sum"), "mode"),
]


@pytest.mark.parametrize("what, fn, wrt, make_args, shown", WRT_CASES, ids=[c[0].replace(" ", "_") for c in WRT_CASES])
def test_wrt_error(what, fn, wrt, make_args, shown):
    x = np.random.default_rng(9).normal(size=3)
    args = make_args(x)
    for form in ("grad", "differentiate", "value_and_grad"):
        with pytest.raises(bytegrad.WrtError) as info:
            if form == "grad":
                bytegrad.grad(fn, wrt=wrt)(*args)
            elif form == "differentiate":
                bytegrad.differentiate(fn, wrt=wrt).grad(*args)
            else:
                bytegrad.value_and_grad(fn, wrt=wrt)(*args)
        exc = info.value
        assert isinstance(exc, TypeError) and isinstance(exc, bytegrad.DifferentiationError)
        assert shown in str(exc), f"{what}: the offending wrt {shown!r} is not shown:\n{exc}"
        assert_cites_within(exc, fn, source_range(fn))
    # The same function with a valid wrt works straight after.
    check_grad(fn, args, 0)


# ---- PullbackError --------------------------------------------------------------------------------


def _op_failing_pullback(x):
    return x * 2.0


@rrule(_op_failing_pullback)
def _op_failing_pullback_rrule(x):
    out = x * 2.0

    def op_failing_pullback(out_bar):
        raise ValueError("boom in the pullback")

    return out, op_failing_pullback


def _op_wrong_shape(x):
    return x * 2.0


@rrule(_op_wrong_shape)
def _op_wrong_shape_rrule(x):
    out = x * 2.0

    def op_wrong_shape_pullback(out_bar):
        return (np.ones(np.shape(x) + (2,)),)

    return out, op_wrong_shape_pullback


def calls_failing_pullback(x):
    y = np.sin(x)
    z = _op_failing_pullback(y)  # recorded here
    return np.sum(z ** 2)


def calls_wrong_shape_pullback(x):
    z = _op_wrong_shape(x + 1.0)  # recorded here
    return np.sum(z ** 2)


def test_pullback_error_names_the_forward_line():
    x = np.random.default_rng(10).normal(size=3)
    with pytest.raises(bytegrad.PullbackError) as info:
        bytegrad.grad(calls_failing_pullback)(x)
    assert isinstance(info.value, bytegrad.DifferentiationError)
    assert_cites(info.value, calls_failing_pullback, "# recorded here")
    cause = info.value.__cause__
    assert isinstance(cause, ValueError) or "boom in the pullback" in str(info.value), (
        f"the pullback's own error is lost: cause={cause!r}\n{info.value}")


def test_pullback_error_for_a_wrong_shape():
    x = np.random.default_rng(11).normal(size=3)
    with pytest.raises(bytegrad.PullbackError) as info:
        bytegrad.grad(calls_wrong_shape_pullback)(x)
    assert_cites(info.value, calls_wrong_shape_pullback, "# recorded here")
    assert "(3, 2)" in str(info.value) and "(3,)" in str(info.value), f"shapes not shown:\n{info.value}"


def _op_of_a_list(xs):
    return xs[0] * xs[1]


@rrule(_op_of_a_list)
def _op_of_a_list_rrule(xs):
    out = xs[0] * xs[1]

    def op_of_a_list_pullback(out_bar):
        return ([np.ones(4), np.ones(3)],)  # two cotangents for the same value that cannot be added

    return out, op_of_a_list_pullback


def calls_list_pullback(x):
    y = x + 1.0
    return np.sum(_op_of_a_list([y, y]))  # recorded here


def test_a_cotangent_that_cannot_be_added_is_a_pullback_error():
    """Routing a list argument's cotangents fails inside the sweep's step, and is reported as the
    step's failure (before one sweep turned it into a PullbackError, the plain sweep let the
    ValueError of the addition through)."""
    with pytest.raises(bytegrad.PullbackError) as info:
        bytegrad.grad(calls_list_pullback)(np.ones(3))
    assert_cites(info.value, calls_list_pullback, "# recorded here")
    assert isinstance(info.value.__cause__, ValueError)


# ---- user exceptions ------------------------------------------------------------------------------


def raises_user_error(x):
    if np.sum(x) > -100.0:
        raise KeyError("the user's own error")
    return np.sum(x)


def test_user_exception_propagates_unchanged():
    x = np.random.default_rng(12).normal(size=3)
    with pytest.raises(KeyError, match="the user's own error") as info:
        bytegrad.grad(raises_user_error)(x)
    assert not isinstance(info.value, bytegrad.DifferentiationError)
    check_grad(lambda v: np.sum(v ** 3), (x,), 0)


def test_error_classes_are_exported():
    for name in ("DifferentiationError", "NoRuleError", "MutationError", "NonScalarOutputError",
                 "UnsupportedOpcodeError", "PullbackError", "WrtError"):
        cls = getattr(bytegrad, name)
        assert issubclass(cls, bytegrad.DifferentiationError)
    assert issubclass(bytegrad.WrtError, TypeError)


def test_nested_gradient_is_a_clear_error_naming_the_line():
    """A nested gradient through a rule whose pullback cannot itself be differentiated is refused
    with the user's line (the one that called the rule), not a crash or a wrong number."""

    def cube(x):
        return x ** 3

    @bytegrad.rrule(cube)
    def cube_rrule(x):
        def cube_pullback(out_bar):
            m, e = np.frexp(x)  # a C ufunc with no rule: fine once, not differentiable again
            return (3.0 * (m * 2.0 ** e) ** 2 * out_bar,)
        return x ** 3, cube_pullback

    inner = bytegrad.differentiate(lambda v: np.sum(cube(v)))
    np.testing.assert_allclose(inner.grad(np.array([1.0, 2.0])), [3.0, 12.0])

    def outer(x):
        return np.sum(inner.grad(x))  # the nested gradient

    with pytest.raises(bytegrad.DifferentiationError) as info:
        bytegrad.grad(outer)(np.array([1.0, 2.0]))
    message = str(info.value)
    assert "nested derivative" in message and "frexp" in message
    line = inner.fn.__code__.co_firstlineno
    assert f"line {line}" in message and "np.sum(cube(v))" in message

# ---- forward mode ---------------------------------------------------------------------------------


def _op_failing_frule(x):
    return x * 3.0


@rrule(_op_failing_frule)
def _op_failing_frule_rrule(x):
    return x * 3.0, lambda out_bar: (out_bar * 3.0,)


@bytegrad.frule(_op_failing_frule)
def _op_failing_frule_frule(args_dot, x):
    raise ValueError("boom in the frule")


def calls_failing_frule(x):
    y = np.sin(x)
    return _op_failing_frule(y)  # recorded here


def test_a_failing_frule_is_a_pushforward_error():
    """Forward mode turns a failing step into an error as the reverse sweep does: a PushforwardError
    at the line that recorded the operation, run as itself or recorded by a nested derivative (jvp
    inside grad, worded as the reverse sweep's recorded failures are). Before, both were a bare
    DifferentiationError, whatever a recorded step's error was."""
    x = np.linspace(0.1, 0.9, 3)
    with pytest.raises(bytegrad.PushforwardError) as info:
        bytegrad.jvp(calls_failing_frule, (x,), (np.ones(3),))
    assert_cites(info.value, calls_failing_frule, "# recorded here")
    assert isinstance(info.value.__cause__, ValueError) and "frule" in str(info.value)

    def outer(x):
        return np.sum(bytegrad.jvp(calls_failing_frule, (x,), (np.ones(3),))[1])

    with pytest.raises(bytegrad.PushforwardError) as info:
        bytegrad.grad(outer)(x)
    assert_cites(info.value, calls_failing_frule, "# recorded here")
    assert "nested derivative" in str(info.value) and "boom in the frule" in str(info.value)
