"""precompile, explain, stats, and the fused kernels' disk cache across processes."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import bytegrad
from bytegrad.runtime import fused, kernels

pytestmark = pytest.mark.general_path  # the general path's own machinery (tests/conftest.py)

REPO = Path(__file__).resolve().parent.parent
needs_numba = pytest.mark.skipif(kernels.disabled(), reason="Numba disabled")


def layer(W, x, b):
    return np.sum(np.tanh(x @ W + b))


def _inputs():
    rng = np.random.default_rng(3)
    return rng.normal(size=(4, 3)), rng.normal(size=(5, 4)), rng.normal(size=3)


@needs_numba
def test_precompile_compiles_the_fused_kernels_and_stats_report_them():
    d = bytegrad.differentiate(layer, wrt=(0, 2))
    stats = bytegrad.precompile(d, *_inputs())
    (site,) = stats["fused_sites"]
    assert site["expr"] == "tanh(<binary_op> + b)"
    assert site["state"] == "kernel" and site["kernel_calls"] >= 1 and site["compile_s"] > 0
    stats = d.stats()
    for key in ("hits", "misses", "entries", "first_gradient_s", "rewrite_s", "compile_s", "fused_sites", "disk"):
        assert key in stats
    assert stats["first_gradient_s"] > 0
    W, x, b = _inputs()
    gW, gb = d.grad(W, x, b)
    s = 1 - np.tanh(x @ W + b) ** 2
    np.testing.assert_allclose(gW, x.T @ s, rtol=1e-12)
    np.testing.assert_allclose(gb, s.sum(0), rtol=1e-12)


def test_explain_names_the_fused_site_and_rules(capsys):
    text = bytegrad.explain(layer, *_inputs(), wrt=(0, 2))
    assert "fused site: tanh(<binary_op> + b)" in text
    assert "x @ W + b" in text                      # the user's source line
    assert "rule of sum" in text                    # the call hook of np.sum, with its rule
    # returned, not printed as well: a REPL shows the listing once, laid out (its repr is itself)
    assert capsys.readouterr().out == ""
    assert repr(text) == text and isinstance(text, str)


def test_explain_writes_to_a_file_and_returns_nothing(tmp_path):
    with open(tmp_path / "listing.txt", "w") as f:
        assert bytegrad.explain(layer, *_inputs(), wrt=(0, 2), file=f) is None
    assert "fused site: tanh(<binary_op> + b)" in (tmp_path / "listing.txt").read_text()


def _run(code, env):
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().splitlines()[-1]


@needs_numba
def test_a_precompiled_kernel_is_loaded_not_compiled_in_a_fresh_process(tmp_path):
    env = dict(os.environ, BYTEGRAD_CACHE_DIR=str(tmp_path), PYTHONPATH=str(REPO))
    pre = ("import numpy as np, bytegrad; from tests.test_hotpath import layer, _inputs; "
           "bytegrad.precompile(layer, *_inputs(), wrt=(0, 2)); print('ok')")
    assert _run(pre, env) == "ok"
    check = ("import json, numpy as np, bytegrad, sys; from tests.test_hotpath import layer, _inputs; "
             "from bytegrad.runtime import fused, kernels; import bytegrad.introspect; "
             "d = bytegrad.differentiate(layer, wrt=(0, 2)); d.grad(*_inputs()); "
             "fs = bytegrad.introspect.fused_sites(next(iter(d._fns.values())).__code__)[0]; "
             "p = kernels.plan(fs.nodes, fs.n_leaves, 'float64', (True, True)); "
             "print(json.dumps([kernels.on_disk(p), 'numba' in sys.modules, d.stats()['disk']['disk_hits']]))")
    on_disk, numba_loaded, disk_hits = json.loads(_run(check, env))
    assert on_disk                      # the kernel is a load away
    assert not numba_loaded             # and the first gradient did not import Numba for it
    assert disk_hits >= 1               # the rewritten code came from the disk cache


@needs_numba
def test_cli_precompile(tmp_path):
    env = dict(os.environ, BYTEGRAD_CACHE_DIR=str(tmp_path), PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-m", "bytegrad", "precompile", "tests.test_hotpath:layer",
                           "--example", "np.ones((4, 3))", "--example", "np.ones((5, 4))",
                           "--example", "np.zeros(3)", "--wrt", "0,2"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "precompiled tests.test_hotpath:layer" in proc.stdout
    assert "tanh(<binary_op> + b)" in proc.stdout


def test_fusion_is_off_with_disable_numba(monkeypatch):
    monkeypatch.setattr(bytegrad.config, "disable_numba", True)

    def f(x):
        return np.sum(np.tanh(x * 2.0 + 1.0))

    d = bytegrad.differentiate(f)
    d.grad(np.ones(3))
    assert d.stats()["fused_sites"] == []
    assert fused.POLICY in ("auto", "always", "never")


@needs_numba
def test_two_processes_compiling_the_same_kernels_into_one_cache_both_succeed(tmp_path):
    env = dict(os.environ, BYTEGRAD_CACHE_DIR=str(tmp_path), PYTHONPATH=str(REPO))
    code = ("import json, numpy as np, bytegrad; from tests.test_hotpath import layer, _inputs; "
            "W, x, b = _inputs(); bytegrad.precompile(layer, W, x, b, wrt=(0, 2)); "
            "gW, gb = bytegrad.grad(layer, wrt=(0, 2))(W, x, b); s = 1 - np.tanh(x @ W + b) ** 2; "
            "print(json.dumps([bool(np.allclose(gW, x.T @ s, rtol=1e-12)), bool(np.allclose(gb, s.sum(0)))]))")
    procs = [subprocess.Popen([sys.executable, "-c", code], cwd=REPO, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        assert json.loads(out.strip().splitlines()[-1]) == [True, True]
    # and a third process finds the kernel on disk and is right too
    assert json.loads(_run(code, env)) == [True, True]


@needs_numba
def test_background_compile_keeps_numpy_running_then_switches_to_the_kernel(monkeypatch):
    """BYTEGRAD_COMPILE=background: the site tiers up, a thread compiles, gradients stay right on
    the NumPy tier meanwhile, and once the thread is done the kernel runs."""
    import threading

    monkeypatch.setattr(fused, "COMPILE", "background")
    monkeypatch.setattr(fused, "POLICY", "auto")
    monkeypatch.setattr(fused, "BACKWARD_FACTOR", 1e12)  # any time spent pays for the compile
    monkeypatch.setattr(fused, "TIE", 1e12)              # and the kernel wins the timing
    monkeypatch.setattr(fused, "_trial_clock", -1)       # its trial starts on the kernel's block

    def shifted(W, x, b):  # its own code object, so its own fused site (no state from other tests)
        return np.sum(np.tanh(x @ W + b) * 0.5)

    d = bytegrad.differentiate(shifted, wrt=(0, 2))
    W, x, b = _inputs()
    s = 0.5 * (1 - np.tanh(x @ W + b) ** 2)
    gW, gb = d.grad(W, x, b)
    (site,) = d.stats()["fused_sites"]
    assert site["state"] in ("compiling", "kernel") and site["numpy_calls"] == 1
    for t in threading.enumerate():
        if t.name.startswith("bytegrad-compile"):
            t.join(timeout=120)
    for _ in range(3):
        gW, gb = d.grad(W, x, b)
        np.testing.assert_allclose(gW, x.T @ s, rtol=1e-12)
        np.testing.assert_allclose(gb, s.sum(0), rtol=1e-12)
    (site,) = d.stats()["fused_sites"]
    assert site["state"] == "kernel" and site["kernel_calls"] >= 1 and site["compile_s"] > 0
