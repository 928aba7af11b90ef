"""End-to-end gradients over the catalogue in `functions.py`, checked against central differences.

Each program is differentiated three times with fresh random inputs (the second and third calls
run cached rewritten code), and its value, plain call and the caller's inputs are checked too.
Functions defined in `__main__` are checked in a subprocess.
"""
from __future__ import annotations

import copy
import os
import subprocess
import sys
import textwrap
import zlib

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import functions as catalogue
from gradcheck import assert_trees_close, assert_trees_equal, check_grad, tree_paths

import bytegrad

CALLS = 3
TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(TESTS_DIR)


def case_seed(case: catalogue.Case) -> int:
    return zlib.crc32(case.id.encode())


def make_inputs(case: catalogue.Case, call: int, float32: bool = False) -> tuple[tuple, dict]:
    rng = np.random.default_rng(case_seed(case) + call)
    args, kwargs = case.args(rng), case.kwargs(rng)
    if float32:
        args, kwargs = catalogue.to_float32(args), catalogue.to_float32(kwargs)
    return args, kwargs


def test_catalogue_size():
    assert len(catalogue.CASES) >= 45
    assert len(catalogue.FLOAT32_CASES) >= 8


@pytest.mark.parametrize("case", catalogue.CASES, ids=lambda c: c.id)
def test_gradient_matches_finite_differences(case):
    f = bytegrad.differentiate(case.fn, wrt=case.wrt)
    for call in range(CALLS):
        args, kwargs = make_inputs(case, call)
        try:
            check_grad(f, args, case.wrt, kwargs=kwargs, rtol=case.rtol, atol=case.atol, seed=call)
        except AssertionError as exc:
            raise AssertionError(f"call {call + 1} of {CALLS}: {exc}") from None


@pytest.mark.parametrize("case", catalogue.CASES, ids=lambda c: c.id)
def test_gradient_with_every_record_slimmed(case, monkeypatch):
    """`grad` slims its tape's large records before the sweep (runtime/tape.py `_slim`); the
    catalogue's arrays are small, so here every record is slimmed, whatever its size."""
    from bytegrad.runtime import tape
    monkeypatch.setattr(tape, "SLIM_MIN_SIZE", 0)
    f = bytegrad.differentiate(case.fn, wrt=case.wrt)
    args, kwargs = make_inputs(case, 0)
    check_grad(f, args, case.wrt, kwargs=kwargs, rtol=case.rtol, atol=case.atol, seed=0)


@pytest.mark.parametrize("case", catalogue.CASES, ids=lambda c: c.id)
def test_value_and_plain_call(case):
    f = bytegrad.differentiate(case.fn, wrt=case.wrt)
    for call in range(CALLS):
        args, kwargs = make_inputs(case, call)
        before = copy.deepcopy((args, kwargs))
        expected = case.fn(*copy.deepcopy(args), **copy.deepcopy(kwargs))

        value, x_bar = f.value_and_grad(*args, **kwargs)
        assert_trees_equal((args, kwargs), before, what=f"call {call + 1}: caller's input after value_and_grad")
        assert np.ndim(value) == 0, f"value_and_grad value has shape {np.shape(value)}"
        np.testing.assert_allclose(np.float64(value), np.float64(expected), rtol=1e-12, atol=1e-12,
                                   err_msg=f"call {call + 1}: value_and_grad value != plain call of the function")

        only_grad = f.grad(*args, **kwargs)
        assert_trees_close(only_grad, x_bar, rtol=1e-12, atol=1e-12, what="grad vs value_and_grad gradient")

        plain = f(*args, **kwargs)
        assert_trees_equal(plain, expected, what=f"call {call + 1}: decorated plain call")
        assert_trees_equal((args, kwargs), before, what=f"call {call + 1}: caller's input after the calls")


@pytest.mark.parametrize("case", catalogue.FLOAT32_CASES, ids=lambda c: c.id)
def test_float32_gradient(case):
    f = bytegrad.differentiate(case.fn, wrt=case.wrt)
    for call in range(2):
        args, kwargs = make_inputs(case, call, float32=True)
        assert any(getattr(leaf, "dtype", None) == np.float32 for _, leaf in tree_paths((args, kwargs)))
        try:
            # assert_mirrors inside check_grad requires float32 gradients for float32 arguments.
            check_grad(f, args, case.wrt, kwargs=kwargs, rtol=2e-3, atol=2e-3, seed=call)
        except AssertionError as exc:
            raise AssertionError(f"float32, call {call + 1}: {exc}") from None


def test_gradient_after_other_signatures():
    """A cached signature stays right after other signatures of the same function were compiled."""
    case = next(c for c in catalogue.CASES if c.id == "for_range_steps")
    f = bytegrad.differentiate(case.fn, wrt=0)
    rng = np.random.default_rng(7)
    x = rng.normal(size=5)
    for n in (3, 1, 4, 3):
        check_grad(f, (x, n), 0)
    check_grad(f, (x.astype(np.float32), 2), 0, rtol=2e-3, atol=2e-3)
    check_grad(f, (rng.normal(size=(2, 3)), 3), 0)
    check_grad(f, (x, 3), 0)


def test_plain_function_form_matches_decorated():
    """`bytegrad.grad(fn, wrt)` and `differentiate(fn, wrt).grad` agree (same gradient, or the same error)."""
    for case in catalogue.CASES[::7]:
        args, kwargs = make_inputs(case, 0)
        outcomes = []
        for make in (lambda: bytegrad.grad(case.fn, wrt=case.wrt),
                     lambda: bytegrad.differentiate(case.fn, wrt=case.wrt).grad):
            try:
                outcomes.append(make()(*args, **kwargs))
            except bytegrad.DifferentiationError as exc:
                outcomes.append(type(exc))
        if isinstance(outcomes[0], type) or isinstance(outcomes[1], type):
            assert outcomes[0] is outcomes[1], f"{case.id}: {outcomes[0]!r} vs {outcomes[1]!r}"
        else:
            assert_trees_close(outcomes[0], outcomes[1], rtol=1e-12, atol=1e-12, what=case.id)


MAIN_SCRIPT = textwrap.dedent('''
    import sys
    sys.path.insert(0, {tests_dir!r})
    import numpy as np
    import bytegrad
    from gradcheck import check_grad

    def model(w, X, steps):
        h = X @ w
        for _ in range(steps):
            h = np.tanh(h) + 0.1 * h
        return np.sum(h ** 2) / len(h)

    @bytegrad.differentiate(wrt=(0, 1))
    def decorated(w, X):
        return np.sum(np.sin(X @ w) * X[:, 0])

    assert model.__module__ == "__main__" and decorated.__module__ == "__main__"
    rng = np.random.default_rng(0)
    for call in range(2):
        w, X = rng.normal(size=3), rng.normal(size=(4, 3))
        check_grad(model, (w, X, 3), 0)
        check_grad(decorated, (w, X), (0, 1))
    print("MAIN-OK")
''')


def _run_python(argv, tmp_env=None):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (REPO_ROOT, env.get("PYTHONPATH", "")) if p)
    if tmp_env:
        env.update(tmp_env)
    return subprocess.run([sys.executable, *argv], capture_output=True, text=True, env=env, timeout=300)


def test_function_in_main_via_dash_c():
    proc = _run_python(["-c", MAIN_SCRIPT.format(tests_dir=TESTS_DIR)])
    assert proc.returncode == 0 and "MAIN-OK" in proc.stdout, proc.stdout + proc.stderr


def test_function_in_main_via_script_file(tmp_path):
    script = tmp_path / "user_script.py"
    script.write_text(MAIN_SCRIPT.format(tests_dir=TESTS_DIR))
    proc = _run_python([str(script)])
    assert proc.returncode == 0 and "MAIN-OK" in proc.stdout, proc.stdout + proc.stderr


def test_exec_defined_function_has_no_source():
    """The exec'd catalogue entry really has no source file: bytegrad must not need one."""
    fn = catalogue.exec_defined
    assert fn.__code__.co_filename == "<catalogue-exec>"
    rng = np.random.default_rng(3)
    check_grad(fn, (rng.normal(size=4), rng.normal(size=4)), (0, 1))
    # A second function exec'd into a fresh namespace, differentiated straight away.
    namespace = {"np": np}
    exec(compile("def g(x):\n    return np.sum(np.cos(x) * x)\n", "<string>", "exec"), namespace)  # noqa: S102
    check_grad(namespace["g"], (rng.normal(size=3),), 0)
