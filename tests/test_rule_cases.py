"""A call that a rule does not cover (np.cross of 2-vectors, np.pad's computed modes, np.percentile's
other methods, np.interp with period=, np.einsum's sublist form) is differentiated through NumPy's
own Python code, or by the rule; where NumPy has none, the error is a DifferentiationError at the
user's line, never a bare NotImplementedError."""
import ast
import pathlib

import numpy as np
import pytest

import bytegrad
from bytegrad.errors import DifferentiationError, RuleCaseError
from tests.gradcheck import check_grad_and_jvp
from tests.rules.cases import POINT
from tests.rules.numpy.test_products import CROSSES_2_VECTORS

MATRIX = np.array([[2.0, 0.3, 0.1], [0.3, 1.5, 0.2], [0.1, 0.2, 1.0]])

CASES = {
    "pad-mean": (lambda x: np.sum(np.pad(x, 2, mode="mean") ** 2), POINT),
    "pad-maximum": (lambda x: np.sum(np.pad(x, 2, mode="maximum") ** 2), POINT),
    "pad-minimum": (lambda x: np.sum(np.pad(x, (1, 2), mode="minimum") ** 2), POINT),
    "pad-median": (lambda x: np.sum(np.pad(x, 2, mode="median", stat_length=3) ** 2), POINT),
    "pad-linear_ramp": (lambda x: np.sum(np.pad(x, 2, mode="linear_ramp", end_values=0.5) ** 2), POINT),
    "pad-reflect-odd": (lambda x: np.sum(np.pad(x, 2, mode="reflect", reflect_type="odd") ** 2), POINT),
    "percentile-weibull": (lambda x: np.percentile(x, 30, method="weibull"), POINT),
    "percentile-hazen": (lambda x: np.percentile(x, 30, method="hazen"), POINT),
    "quantile-median_unbiased": (lambda x: np.quantile(x, 0.3, method="median_unbiased"), POINT),
    "quantile-normal_unbiased": (lambda x: np.quantile(x, [0.3, 0.8], method="normal_unbiased").sum(), POINT),
    "interp-period": (lambda x: np.sum(np.interp(x, [0.0, 1.0, 2.0], [1.0, 3.0, 2.0], period=3.0)), POINT),
    "einsum-sublists": (lambda a: np.einsum(a, [0, 1], a, [1, 0]), MATRIX),
    "einsum-sublists-output": (lambda a: np.sum(np.einsum(a, [0, 1], a ** 2, [1, 2], [0, 2]) ** 2), MATRIX),
    "einsum-sublists-ellipsis": (lambda a: np.sum(np.einsum(a, [Ellipsis, 0], [Ellipsis]) ** 2), MATRIX),
}
if CROSSES_2_VECTORS:  # (NumPy 2.5 refuses vectors of 2 components)
    CASES["cross-2"] = (lambda x: np.sum(np.cross(np.reshape(x[:4], (2, 2)), x[2:4])), POINT)
    CASES["cross-2-3"] = (lambda x: np.sum(np.cross(x[:2], x[2:5]) ** 2), POINT)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # NumPy 2 deprecates cross of 2-vectors
def test_case_a_rule_does_not_cover_is_differentiated(name, dtype):
    f, point = CASES[name]
    x = point.astype(dtype)
    check_grad_and_jvp(f, x)


def test_vectorize_with_signature_is_an_error_at_the_users_line():
    vf = np.vectorize(lambda r: r * 2.0, signature="(n)->(n)")
    with pytest.raises(RuleCaseError) as info:
        bytegrad.grad(lambda x: np.sum(vf(x)))(POINT)
    assert "test_rule_cases.py" in str(info.value) and "signature" in str(info.value)


def test_rules_raise_no_bare_not_implemented_error():
    """A rule that covers only some cases raises RuleCaseError (the runtime then runs NumPy's own
    code, or reports it at the user's line): a bare NotImplementedError would reach the user."""
    rules_dir = pathlib.Path(bytegrad.rules.__file__).parent
    bare = []
    for path in sorted(rules_dir.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Raise) and node.exc is not None:
                target = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
                if isinstance(target, ast.Name) and target.id == "NotImplementedError":
                    bare.append(f"{path.name}:{node.lineno}")
    assert not bare, f"bare NotImplementedError raised in rules: {', '.join(bare)}"
    assert issubclass(RuleCaseError, DifferentiationError)


def test_complex_input_to_a_real_only_rule_is_an_error_at_the_users_line():
    """np.linalg.qr's rule covers real matrices; for a complex one NumPy's own Python code runs, and
    the LAPACK call inside it, which has no rule, is reported with the user's line."""
    z = np.array([[1 + 2j, 0.5], [0.3j, 2 - 1j]])

    def f(z):
        return np.sum(np.abs(np.linalg.qr(z)[1]) ** 2)

    with pytest.raises(DifferentiationError) as info:
        bytegrad.vjp(f, z)
    assert not isinstance(info.value, NotImplementedError)
    assert "reached from your code" in str(info.value) and "test_rule_cases.py" in str(info.value)
