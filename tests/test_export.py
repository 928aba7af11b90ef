"""bytegrad.export: each exported module is loaded in a process where `import bytegrad` fails, run
on new values of the example's signature, and compared with bytegrad's own value_and_grad."""
from __future__ import annotations

import json
import math
import os
import pathlib
import shutil
import subprocess
import sys

import numpy as np
import pytest

import bytegrad
from bytegrad.exporter import ExportError

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.cases import mlp_inputs, mlp_loss  # noqa: E402

#: run in a fresh interpreter: `bytegrad` blocked, the module loaded from its file, called on the
#: arguments pickled beside it; prints the value and gradient (or the ValueError) as JSON
_RUNNER = r"""
import importlib.util, json, pickle, sys
sys.modules["bytegrad"] = None  # `import bytegrad` raises ImportError
try:
    import bytegrad
    raise SystemExit("bytegrad was importable")
except ImportError:
    pass
spec = importlib.util.spec_from_file_location("grad_module", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
with open(sys.argv[2], "rb") as f:
    args = pickle.load(f)
assert "bytegrad" not in {m.split(".")[0] for m in sys.modules if sys.modules[m] is not None}
try:
    value, grad = module.value_and_grad(*args)
except ValueError as exc:
    print(json.dumps({"error": str(exc)}))
    raise SystemExit(0)
def plain(g):
    if isinstance(g, dict):
        return {k: plain(v) for k, v in g.items()}
    if isinstance(g, (tuple, list)):
        return [plain(v) for v in g]
    return g.tolist() if hasattr(g, "tolist") else g
print(json.dumps({"value": float(value), "grad": plain(grad)}))
"""


def run_exported(tmp_path: pathlib.Path, source: str, args: tuple) -> dict:
    import pickle

    mod = tmp_path / "grad_module.py"
    mod.write_text(source)
    data = tmp_path / "args.pkl"
    data.write_bytes(pickle.dumps(args))
    runner = tmp_path / "runner.py"
    runner.write_text(_RUNNER)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, str(runner), str(mod), str(data)], capture_output=True, text=True,
                          cwd=str(tmp_path), env=env, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def close(got: object, want: object) -> None:
    if isinstance(want, dict):
        assert list(got) == list(want)
        for k in want:
            close(got[k], want[k])
    elif isinstance(want, (tuple, list)):
        assert len(got) == len(want)
        for a, b in zip(got, want):
            close(a, b)
    else:
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-12, atol=1e-300)


def loop(x, w, n):
    s = 0.0
    for _ in range(n):
        x = np.sin(x) * w + 0.5 * x
        s = s + np.mean(x ** 2)
    return s


def branch(x, w):
    if np.sum(x) > 0:
        y = np.tanh(x * w)
    else:
        y = np.exp(x) - w
    return np.sum(y * y)


def test_mlp_loss_exported_runs_without_bytegrad(tmp_path):
    make = mlp_inputs((6, 5, 4, 3), 7)
    params, (x, y) = make(np.random.default_rng(0))
    source = bytegrad.export(mlp_loss, params, x, y)
    assert "import bytegrad" not in source and "from bytegrad" not in source
    assert "def value_and_grad(params, x, y):" in source
    assert "# line 127: h1 = np.tanh(" in source  # the user's lines, as comments
    assert "bench.cases.mlp_loss" in source and bytegrad.__version__ in source
    params2, (x2, y2) = make(np.random.default_rng(1))  # new values, the same signature
    got = run_exported(tmp_path, source, (params2, x2, y2))
    value, grad = bytegrad.value_and_grad(mlp_loss)(params2, x2, y2)
    close(got["value"], value)
    close(got["grad"], grad)
    # another shape: ValueError naming what differs
    wrong = run_exported(tmp_path, source, (params2, x2[:, :3], y2[:, :3]))
    assert "x.shape == (6, 7)" in wrong["error"] and "(6, 3)" in wrong["error"]
    del params2["b3"]
    wrong = run_exported(tmp_path, source, (params2, x2, y2))
    assert "params: dict with keys" in wrong["error"]


def test_loop_exported(tmp_path):
    x, w = np.linspace(-1, 1, 5), np.linspace(0.5, 1.5, 5)
    source = bytegrad.export(loop, x, w, 3, wrt=(0, 1))
    rng = np.random.default_rng(2)
    x2, w2 = rng.standard_normal(5), rng.standard_normal(5)
    got = run_exported(tmp_path, source, (x2, w2, 3))
    value, grad = bytegrad.value_and_grad(loop, wrt=(0, 1))(x2, w2, 3)
    close(got["value"], value)
    close(got["grad"], list(grad))
    wrong = run_exported(tmp_path, source, (x2, w2, 4))  # another int: another program
    assert "n == 3" in wrong["error"] and "4" in wrong["error"]
    wrong = run_exported(tmp_path, source, (x2.astype(np.float32), w2, 3))
    assert "x.dtype" in wrong["error"] and "float32" in wrong["error"]


def test_branch_exported_refuses_the_other_branch(tmp_path):
    x, w = np.linspace(0.1, 1, 5), np.linspace(0.5, 1.5, 5)
    source = bytegrad.export(branch, x, w)
    rng = np.random.default_rng(3)
    x2, w2 = np.abs(rng.standard_normal(5)), rng.standard_normal(5)
    got = run_exported(tmp_path, source, (x2, w2))
    value, grad = bytegrad.value_and_grad(branch)(x2, w2)
    close(got["value"], value)
    close(got["grad"], grad)
    other = run_exported(tmp_path, source, (-x2, w2))  # np.sum(x) > 0 comes out False
    assert "came out otherwise than at export" in other["error"] and "line" in other["error"]


def test_ties_of_max_split_as_bytegrad_does(tmp_path):
    def f(z):
        return np.sum(np.max(z, axis=0, keepdims=True) * z) + np.mean(np.min(z, axis=1))

    z = np.arange(12.0).reshape(3, 4)
    source = bytegrad.export(f, z)
    z2 = np.array([[1.0, 5.0, 5.0, 0.0], [5.0, 5.0, 2.0, 0.0], [3.0, 1.0, 5.0, 0.0]])
    got = run_exported(tmp_path, source, (z2,))
    value, grad = bytegrad.value_and_grad(f)(z2)
    close(got["value"], value)
    close(got["grad"], grad)


def logistic(w, X, y):
    z = X @ w
    p = 1.0 / (1.0 + np.exp(-z))
    return -np.mean(y * np.log(p) + (1.0 - y) * np.log(1.0 - p))


def test_matrix_vector_product_and_mean(tmp_path):
    rng = np.random.default_rng(4)
    X, y = rng.standard_normal((8, 3)), (rng.random(8) > 0.5).astype(float)
    source = bytegrad.export(logistic, np.zeros(3), X, y)
    assert "_matmul_rrule(X, w)" in source and "_mean_rrule(" in source
    w2, X2, y2 = rng.standard_normal(3), rng.standard_normal((8, 3)), (rng.random(8) > 0.5).astype(float)
    got = run_exported(tmp_path, source, (w2, X2, y2))
    value, grad = bytegrad.value_and_grad(logistic)(w2, X2, y2)
    close(got["value"], value)
    close(got["grad"], grad)
    # with respect to the matrix too (the other cotangent of the product)
    source = bytegrad.export(logistic, np.zeros(3), X, y, wrt=(0, 1))
    got = run_exported(tmp_path, source, (w2, X2, y2))
    close(got["grad"], list(bytegrad.value_and_grad(logistic, wrt=(0, 1))(w2, X2, y2)[1]))


def until_small(x, w):
    err = 1.0
    while err > 1e-3:  # a decision on data each turn
        x = 0.5 * x * w
        err = float(np.max(np.abs(x)))
    return np.sum(x * x)


def test_while_loop_refuses_another_number_of_turns(tmp_path):
    x, w = np.array([1.0, -2.0, 0.5]), np.array([0.9, 1.1, 1.0])
    source = bytegrad.export(until_small, x, w, wrt=(0, 1))
    x2 = x * 1.01  # the same number of turns
    got = run_exported(tmp_path, source, (x2, w))
    value, grad = bytegrad.value_and_grad(until_small, wrt=(0, 1))(x2, w)
    close(got["value"], value)
    close(got["grad"], list(grad))
    other = run_exported(tmp_path, source, (x * 100.0, w))  # more turns
    assert "came out otherwise than at export" in other["error"]


def moves(x, M, idx):
    a = np.sum(np.reshape(x, (2, 3)) ** 2 * M.T) + np.sum(np.transpose(M) @ np.ravel(x).reshape(3, 2))
    b = np.sum(x[1:] * x[:-1]) + np.sum(x[idx] ** 2) + x[0] * x[-1]
    return a + b + np.dot(M[:, 0], M[:, 1]) * np.sum(np.dot(M.T, M))


def test_indexing_reshapes_and_dot(tmp_path):
    rng = np.random.default_rng(6)
    idx = np.array([1, 1, 4])  # an index that reads an element twice: its cotangent adds up
    source = bytegrad.export(moves, rng.standard_normal(6), rng.standard_normal((3, 2)), idx, wrt=(0, 1))
    x2, M2 = rng.standard_normal(6), rng.standard_normal((3, 2))
    got = run_exported(tmp_path, source, (x2, M2, idx))
    value, grad = bytegrad.value_and_grad(moves, wrt=(0, 1))(x2, M2, idx)
    close(got["value"], value)
    close(got["grad"], list(grad))


def joins(a, b):
    s = np.stack([a, b * 2.0], axis=1)
    c = np.concatenate((a, b, a * b))
    return np.sum(s ** 2) + np.sum(np.outer(a, b)) + np.sum(c * c)


def test_stack_concatenate_outer(tmp_path):
    rng = np.random.default_rng(8)
    source = bytegrad.export(joins, rng.standard_normal(3), rng.standard_normal(3), wrt=(0, 1))
    a2, b2 = rng.standard_normal(3), rng.standard_normal(3)
    got = run_exported(tmp_path, source, (a2, b2))
    value, grad = bytegrad.value_and_grad(joins, wrt=(0, 1))(a2, b2)
    close(got["value"], value)
    close(got["grad"], list(grad))


def big(x, w):
    h = np.tanh(x * w + 1.0)
    return np.sum(np.log1p(h * h) / (1.0 + x * x))


def test_large_arrays_where_programs_write_in_place(tmp_path):
    rng = np.random.default_rng(7)
    n = 20_000  # above the size at which programs reuse buffers (compiled/reuse.py)
    source = bytegrad.export(big, rng.standard_normal(n), rng.standard_normal(n), wrt=(0, 1))
    assert "getrefcount" not in source
    x2, w2 = rng.standard_normal(n), rng.standard_normal(n)
    got = run_exported(tmp_path, source, (x2, w2))
    value, grad = bytegrad.value_and_grad(big, wrt=(0, 1))(x2, w2)
    close(got["value"], value)
    close(got["grad"], list(grad))


def test_float32_and_float_arguments(tmp_path):
    def f(x, a):
        return a * np.sum(np.sin(x) * np.exp(-x)) + math.sin(a)

    x = np.linspace(0, 1, 9, dtype=np.float32)
    source = bytegrad.export(f, x, 0.3, wrt=(0, 1))
    x2 = np.linspace(-1, 2, 9, dtype=np.float32)
    got = run_exported(tmp_path, source, (x2, 0.7))
    value, grad = bytegrad.value_and_grad(f, wrt=(0, 1))(x2, 0.7)
    close(got["value"], value)
    close(got["grad"], list(grad))
    wrong = run_exported(tmp_path, source, (x2, np.float64(0.7)))
    assert "a: float" in wrong["error"]


def singular_values(A):
    return np.sum(np.linalg.svd(A, compute_uv=False) ** 2) + np.sum(np.linalg.svd(A * A, compute_uv=False))


def test_singular_values_export_and_give_bytegrads_gradient(tmp_path):
    """The seed's example: `np.linalg.svd(A, compute_uv=False)`, of a matrix and a stack of matrices."""
    rng = np.random.default_rng(5)
    for A in (rng.standard_normal((5, 3)), rng.standard_normal((2, 3, 4))):
        out = run_exported(tmp_path, bytegrad.export(singular_values, A), (A,))
        value, grad = bytegrad.value_and_grad(singular_values)(A)
        close(out["value"], value)
        close(out["grad"], grad)


def test_refuses_svd_with_its_vectors():
    def f(x):
        u, s, vt = np.linalg.svd(x)
        return np.sum(u * s[None, :] @ vt)

    with pytest.raises(ExportError, match="compute_uv=False"):
        bytegrad.export(f, np.eye(3) * 2.0 + 0.1)


def test_refuses_what_has_no_standalone_form():
    def f(x):
        return np.sum(np.linalg.inv(x))

    assert bytegrad.ExportError is ExportError and issubclass(ExportError, bytegrad.DifferentiationError)
    with pytest.raises(ExportError, match="inv"):
        bytegrad.export(f, np.eye(3) * 2.0)


W_GLOBAL = np.ones((2, 3))


def test_refuses_an_array_read_from_a_global():
    def f(x):
        return np.sum(np.tanh(W_GLOBAL @ x))

    with pytest.raises(ExportError, match="reads the array W_GLOBAL from a global.*pass it as an argument"):
        bytegrad.export(f, np.ones(3))


def test_refuses_a_signature_on_the_general_path():
    def f(x, log):
        log.append(1)  # an effect on an argument: no program
        return np.sum(x * x)

    with pytest.raises(ExportError, match="cannot be exported for these arguments"):
        bytegrad.export(f, np.ones(3), [])


@pytest.mark.skipif(shutil.which("ruff") is None and not (pathlib.Path(sys.executable).parent / "ruff").exists(),
                    reason="ruff is not installed")
def test_output_is_ruff_format_clean(tmp_path):
    ruff = shutil.which("ruff") or str(pathlib.Path(sys.executable).parent / "ruff")
    x, w = np.linspace(-1, 1, 5), np.linspace(0.5, 1.5, 5)
    path = tmp_path / "m.py"
    path.write_text(bytegrad.export(loop, x, w, 2))
    params, (x, y) = mlp_inputs((6, 5, 4, 3), 7)(np.random.default_rng(0))
    (tmp_path / "mlp.py").write_text(bytegrad.export(mlp_loss, params, x, y))
    for command in ("format", "check"):  # formatted, and clean under ruff's default rules
        done = subprocess.run([ruff, command, "--isolated", *(["--check"] if command == "format" else []),
                               str(path), str(tmp_path / "mlp.py")], capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stdout + done.stderr


def test_cli_writes_the_module(tmp_path):
    (tmp_path / "usermod.py").write_text("import numpy as np\n\n\ndef loss(x, w):\n    return np.sum(np.tanh(x * w))\n")
    out = tmp_path / "grad_module.py"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-m", "bytegrad", "export", "usermod:loss", "--example", "np.ones(4)",
                           "--example", "np.full(4, 0.5)", "-o", str(out)], capture_output=True, text=True,
                          cwd=str(tmp_path), env=env, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    x2, w2 = np.linspace(-2, 2, 4), np.linspace(0.1, 0.4, 4)
    got = run_exported(tmp_path, out.read_text(), (x2, w2))
    close(got["value"], np.sum(np.tanh(x2 * w2)))
    close(got["grad"], (1 - np.tanh(x2 * w2) ** 2) * w2)
    # a function that cannot be exported: exit status 1, the reason on stderr, no file
    (tmp_path / "usermod2.py").write_text("import numpy as np\n\n\ndef loss(x):\n    return np.sum(np.linalg.inv(x))\n")
    done = subprocess.run([sys.executable, "-m", "bytegrad", "export", "usermod2:loss", "--example", "np.eye(2)",
                           "-o", str(tmp_path / "no.py")], capture_output=True, text=True, cwd=str(tmp_path),
                          env=env, timeout=300, check=False)
    assert done.returncode == 1 and "cannot be exported" in done.stderr and "inv" in done.stderr
    assert not (tmp_path / "no.py").exists()
