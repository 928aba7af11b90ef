"""The command line and tools as a new user meets them: the `bytegrad` console script and `python -m
bytegrad` (precompile, cache), `stats()` on what `bytegrad.grad` returns."""
from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _env(cache: Path) -> dict[str, str]:
    return dict(os.environ, BYTEGRAD_CACHE_DIR=str(cache), PYTHONPATH=str(ROOT))


# ---- the console script ---------------------------------------------------------------------------


def test_pyproject_declares_the_console_script_for_main(capsys):
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"bytegrad": "bytegrad.__main__:main"}
    import bytegrad
    from bytegrad.__main__ import main

    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.split()[-1] == bytegrad.__version__


def _console_script() -> Path:
    """The `bytegrad` script pip installed beside this interpreter (the venvs of `make test` have it)."""
    script = Path(sys.executable).parent / ("bytegrad.exe" if os.name == "nt" else "bytegrad")
    if not script.exists():
        pytest.skip(f"no console script at {script}: bytegrad was installed here before it had one "
                    "(`pip install -e .` installs it; `make test` reinstalls when pyproject.toml changes)")
    return script


def test_the_console_script_runs_the_same_commands_as_python_m(tmp_path):
    script = _console_script()
    proc = subprocess.run([str(script), "cache", "info"], env=_env(tmp_path), capture_output=True, text=True,
                          cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert f"cache directory: {tmp_path.resolve()}" in proc.stdout
    usage = subprocess.run([str(script), "--help"], capture_output=True, text=True, timeout=120).stdout
    assert usage.startswith("usage: bytegrad ")
    usage = subprocess.run([sys.executable, "-m", "bytegrad", "--help"], capture_output=True, text=True,
                           env=_env(tmp_path), timeout=120).stdout
    assert usage.startswith("usage: python -m bytegrad ")


# ---- precompile: mistakes are one line on stderr and exit code 2 ----------------------------------

MODEL = '''
import numpy as np


def loss(W, x, b):
    return np.sum(np.tanh(x @ W + b))


NOT_A_FUNCTION = 3
'''


def _precompile(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    (tmp_path / "bg_cli_model.py").write_text(MODEL)
    return subprocess.run([sys.executable, "-m", "bytegrad", "precompile", *args], env=_env(tmp_path / "cache"),
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)


GOOD = ("--example", "np.ones((4, 3))", "--example", "np.ones((5, 4))", "--example", "np.zeros(3)")


@pytest.mark.parametrize("args, message", [
    (("bg_no_such_module:loss", *GOOD), "no module named 'bg_no_such_module' (looked in the current directory"),
    (("bg_cli_model:lost", *GOOD), "bg_cli_model ("),
    (("bg_cli_model", *GOOD), "expected module:function"),
    (("bg_cli_model:NOT_A_FUNCTION", *GOOD), "bg_cli_model:NOT_A_FUNCTION is a int, not a function"),
    (("bg_cli_model:loss", "--example", "np.ones((4, 3)"), "--example 'np.ones((4, 3)' does not evaluate"),
    (("bg_cli_model:loss", "--example", "ones(3)"), "NameError"),
    (("bg_cli_model:loss", "--example", "np.ones((4, 3))"), "missing a required argument: 'x'"),
    (("bg_cli_model:loss",), "got 0 --example"),
    (("bg_cli_model:loss", *GOOD, "--example", "1.0"), "too many positional arguments"),
    (("bg_cli_model:loss", *GOOD, "--wrt", "q"), "--wrt q: wrt='q' names no parameter of loss"),
    ((), "nothing to do"),
])
def test_precompile_mistakes_are_one_line_and_exit_2(tmp_path, args, message):
    proc = _precompile(tmp_path, *args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    (line,) = proc.stderr.splitlines()
    assert line.startswith("python -m bytegrad precompile: error: ") and message in line, line
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").rglob("*.py"))  # nothing compiled


def test_precompile_names_what_the_module_has(tmp_path):
    line = _precompile(tmp_path, "bg_cli_model:lost", *GOOD).stderr.strip()
    assert f"{tmp_path / 'bg_cli_model.py'}) has no 'lost'; it has loss" in line


@pytest.mark.parametrize("source, line, error", [
    ("import numpy as np\nimport bg_cli_missing_dependency\n\ndef f(x):\n    return x\n", 2,
     "ModuleNotFoundError: No module named 'bg_cli_missing_dependency'"),
    ("import numpy as np\n\ndef f(x)\n    return x\n", 3, "SyntaxError: expected ':'"),
    ("import numpy as np\n\nSCALE = np.ones(3) @ np.ones(4)\n\ndef f(x):\n    return x\n", 3, "ValueError: matmul"),
], ids=["import-error", "syntax-error", "error-at-import"])
def test_an_error_inside_the_users_module_is_one_paragraph_naming_its_line(tmp_path, source, line, error):
    (tmp_path / "bg_cli_broken.py").write_text(source)
    proc = subprocess.run([sys.executable, "-m", "bytegrad", "precompile", "bg_cli_broken:f", "--example", "1.0"],
                          env=_env(tmp_path / "cache"), cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.startswith(f"python -m bytegrad precompile: error: importing bg_cli_broken failed at "
                                  f"{tmp_path / 'bg_cli_broken.py'}, line {line}:\n    "), proc.stderr
    assert source.splitlines()[line - 1].strip() in proc.stderr and error in proc.stderr
    assert 'python -c "import bg_cli_broken"' in proc.stderr


def test_examples_of_the_wrong_shape_are_a_usage_error_naming_the_line(tmp_path):
    proc = _precompile(tmp_path, "bg_cli_model:loss", "--example", "np.ones((4, 3))", "--example", "np.ones((5, 5))",
                       "--example", "np.zeros(3)")
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.startswith("python -m bytegrad precompile: error: bg_cli_model:loss failed on the --example "
                                  f"values at {tmp_path / 'bg_cli_model.py'}, line 6:\n"), proc.stderr
    assert "return np.sum(np.tanh(x @ W + b))" in proc.stderr and "ValueError: matmul" in proc.stderr
    assert "shape and dtype" in proc.stderr


@pytest.mark.parametrize("command", [("cache", "info"), ("cache", "info", "--list")])
def test_a_closed_pipe_ends_the_command_quietly(tmp_path, command):
    """`bytegrad cache info | head`: the reader leaves; no BrokenPipeError traceback (here the read end
    is closed before the command writes, so that every write fails)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.run([sys.executable, "-m", "bytegrad", *command], env=_env(tmp_path / "cache"),
                              stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write_end)
    assert proc.stderr == "", proc.stderr
    assert proc.returncode == 141  # 128 + SIGPIPE, as a shell reports a tool stopped by the signal


def test_precompile_imports_from_the_current_directory_and_says_so(tmp_path, monkeypatch, capsys):
    """As the console script runs it: the current directory is not on sys.path to begin with."""
    from bytegrad.__main__ import main

    (tmp_path / "bg_cli_cwd_model.py").write_text(MODEL)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", str(tmp_path))])
    monkeypatch.delitem(sys.modules, "bg_cli_cwd_model", raising=False)
    try:  # one example short: the module is found and named, and nothing is compiled
        assert main(["precompile", "bg_cli_cwd_model:loss", "--example", "np.ones((4, 3))"]) == 2
    finally:
        sys.modules.pop("bg_cli_cwd_model", None)
    out, err = capsys.readouterr()
    assert f"precompiling bg_cli_cwd_model:loss from {tmp_path / 'bg_cli_cwd_model.py'}" in out
    assert "missing a required argument: 'x'" in err


def test_precompile_runs_from_the_current_directory(tmp_path):
    from bytegrad.runtime import kernels

    if kernels.disabled():
        pytest.skip("Numba disabled")
    proc = _precompile(tmp_path, "bg_cli_model:loss", *GOOD, "--wrt", "0,2")
    assert proc.returncode == 0, proc.stderr
    assert f"precompiling bg_cli_model:loss from {tmp_path / 'bg_cli_model.py'}" in proc.stdout
    assert "precompiled bg_cli_model:loss" in proc.stdout and "tanh(<binary_op> + b)" in proc.stdout


# ---- cache info: a summary first, the entries on request -------------------------------------------


def _cache_info(cache: Path, *args: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "bytegrad", "cache", "info", *args], env=_env(cache),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _fill(cache: Path) -> None:
    env = dict(_env(cache), BYTEGRAD_TIER="auto")  # (BYTEGRAD_TIER=numba would add its kernels' modules)
    code = ("import numpy as np, bytegrad\n"
            "def loss(x):\n    return np.sum(np.sin(x))\n"
            "def step(x):\n    return np.sum(x * x)\n"
            "bytegrad.grad(loss)(np.ones(3)); bytegrad.grad(step)(np.ones(3))\n")
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=120, cwd=cache.parent)


def test_cache_info_prints_a_summary_and_lists_entries_on_request(tmp_path):
    cache = tmp_path / "cache"
    _fill(cache)
    summary = _cache_info(cache)
    assert f"cache directory: {cache.resolve()}" in summary
    assert "2 entries and 0 kernel files, by kind:" in summary
    assert "  code: 2 entries, 0 generated sources, 0 Numba cache files" in summary
    assert "loss (" not in summary and "cache info --list" in summary
    listing = _cache_info(cache, "--list")
    assert listing.startswith(summary.rsplit("\n(", 1)[0].split("  code:")[0])  # the same summary first
    assert "       1  loss (<string>:2)" in listing and "       1  step (<string>:4)" in listing


def test_cache_info_of_an_empty_cache(tmp_path):
    assert _cache_info(tmp_path / "cache").strip().endswith("empty")


# ---- stats() on what bytegrad.grad and bytegrad.value_and_grad return ---------------------------------


def test_stats_is_reachable_from_grad_and_value_and_grad():
    import numpy as np

    import bytegrad

    def f(x):
        return np.sum(np.sin(x) * x)

    g = bytegrad.grad(f)
    x = np.linspace(0.0, 1.0, 4)
    np.testing.assert_allclose(g(x), np.cos(x) * x + np.sin(x), rtol=1e-12)
    g(x)
    stats = g.stats()
    compiled = stats.get("compiled", {}).get("compiled_calls", 0)  # (a pinned tier compiles the first call)
    assert stats["hits"] + compiled >= 1 and stats["first_gradient_s"] > 0
    assert g.__name__ == "f" and g.__wrapped__ is f and "bytegrad.grad of" in repr(g)
    vg = bytegrad.value_and_grad(f, wrt="x")
    value, x_bar = vg(x)
    assert value == f(x) and vg.stats()["first_gradient_s"] > 0
    assert g.differentiated is not vg.differentiated


def test_what_grad_returns_nests_and_keeps_its_own_state():
    import bytegrad

    inner = bytegrad.grad(lambda t: t ** 3)
    outer = bytegrad.grad(inner)
    assert outer(1.5) == pytest.approx(9.0) and inner(1.5) == pytest.approx(6.75)
    assert bytegrad.hessian(lambda t: t ** 3)(1.5) == pytest.approx(9.0)
    assert outer.differentiated is not inner.differentiated
