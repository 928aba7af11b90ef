"""Differentiated functions in other processes: pickling (by reference, or by value through
cloudpickle), a `multiprocessing` spawn pool sharing one disk cache, and a Dask `LocalCluster` of
worker processes whose summed shard gradients equal the one-process gradient."""
from __future__ import annotations

import multiprocessing
import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import bytegrad
from bytegrad import diskcache

ROOT = Path(__file__).resolve().parent.parent


def sin_loss(x):
    return np.sum(np.sin(x) ** 2)


@bytegrad.differentiate
def mlp_loss(params, x, y, n_total):
    """The digits MLP's loss, one shard's part of it (examples/train_mlp_digits_dask.py)."""
    h = np.tanh(x @ params["W1"] + params["b1"])
    z = h @ params["W2"] + params["b2"]
    z = z - np.max(z, axis=1, keepdims=True)
    log_p = z - np.log(np.sum(np.exp(z), axis=1, keepdims=True))
    return -np.sum(y * log_p) / n_total


@pytest.fixture
def cache(tmp_path, monkeypatch):
    path = tmp_path / "cache"
    monkeypatch.setattr(bytegrad.config, "cache_dir", str(path))
    monkeypatch.setattr(bytegrad.config, "disable_disk_cache", False)
    monkeypatch.setenv("BYTEGRAD_CACHE_DIR", str(path))  # spawned children read it when they import bytegrad
    monkeypatch.delenv("BYTEGRAD_DISABLE_DISK_CACHE", raising=False)
    diskcache._reset_for_tests()
    yield path
    diskcache._reset_for_tests()


def roundtrip(obj):
    return pickle.loads(pickle.dumps(obj))


X = np.array([0.3, -1.2, 2.0])


def test_module_level_function_pickles_by_reference():
    g = roundtrip(bytegrad.grad(sin_loss))
    np.testing.assert_allclose(g(X), 2 * np.sin(X) * np.cos(X), rtol=1e-14)
    assert b"sin_loss" in pickle.dumps(bytegrad.grad(sin_loss))
    assert len(pickle.dumps(bytegrad.grad(sin_loss))) < 200  # a name, not the code


def test_decorated_module_level_function_pickles_as_itself():
    assert roundtrip(mlp_loss) is mlp_loss  # the module's global, found again by name
    vg = roundtrip(bytegrad.value_and_grad(mlp_loss, wrt=1))
    params, x, y = _mlp_data(4)
    v, g = vg(params, x, y, 4)
    v0, g0 = bytegrad.value_and_grad(mlp_loss, wrt=1)(params, x, y, 4)
    # (equal but for rounding: under BYTEGRAD_TIER=numba one call may be a capture, which returns the
    # general path's result, and the other the program's Numba kernel, which sums in its own order)
    assert v == pytest.approx(v0, rel=1e-13, abs=0.0)
    np.testing.assert_allclose(g, g0, rtol=1e-12, atol=1e-15)


def test_lambda_and_closure_pickle_by_value_through_cloudpickle():
    pytest.importorskip("cloudpickle", reason="cloudpickle is not installed (pip install -e '.[dask]')")
    scale = 3.0
    for fn in (lambda x: np.sum(x ** 3), lambda x: scale * np.sum(np.exp(x))):
        g = roundtrip(bytegrad.grad(fn))  # plain pickle: the function travels inside as bytes
        np.testing.assert_allclose(g(X), bytegrad.grad(fn)(X), rtol=1e-15)
    d = roundtrip(bytegrad.differentiate(lambda a, b: np.sum(a * b), wrt=(0, 1)))
    ga, gb = d.grad(X, 2 * X)
    np.testing.assert_array_equal(ga, 2 * X)
    np.testing.assert_array_equal(gb, X)


def test_lambda_without_cloudpickle_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "cloudpickle", None)  # `import cloudpickle` raises ImportError
    with pytest.raises(pickle.PicklingError, match="cloudpickle is not installed.*module level"):
        pickle.dumps(bytegrad.grad(lambda x: np.sum(x)))


# ---- a spawn pool, two workers, one disk cache ----------------------------------------------------

_barrier = None


def _init_worker(barrier):
    global _barrier
    _barrier = barrier


def _worker_gradients(task):
    """In a spawned worker: wait for the other worker (so both write the cache at once), then compute."""
    grad_fn, vg_lambda, x = task
    _barrier.wait(timeout=60)
    return grad_fn(x), vg_lambda(x), diskcache.stats(), os.getpid()


def test_spawn_pool_computes_gradients_and_shares_the_disk_cache(cache):
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(2)
    vg = bytegrad.value_and_grad(lambda x: np.sum(np.tanh(x) * x))
    tasks = [(bytegrad.grad(sin_loss), vg, X + k) for k in range(2)]
    with ctx.Pool(2, initializer=_init_worker, initargs=(barrier,)) as pool:
        results = pool.map(_worker_gradients, tasks, chunksize=1)
    assert len({pid for *_, pid in results}) == 2  # the barrier put one task on each worker
    for (g, (v, gv), stats, _), (_, _, x) in zip(results, tasks):
        np.testing.assert_allclose(g, 2 * np.sin(x) * np.cos(x), rtol=1e-14)
        v0, gv0 = vg(x)
        assert v == pytest.approx(v0, rel=1e-15)
        np.testing.assert_allclose(gv, gv0, rtol=1e-15)
        assert stats["store_failures"] == 0 and stats["rejected"] == 0
    # whatever the two writers raced to store is whole: every entry's checksum holds, no temporaries
    entries = list(cache.rglob("*" + diskcache.ENTRY_SUFFIX))
    assert entries, "the workers stored nothing in the shared cache"
    assert not list(cache.rglob(diskcache.TMP_PREFIX + "*"))
    for path in entries:
        head, payload = diskcache.read_header(path.read_bytes())
        assert head["sha256"] == diskcache.sha256(payload).hexdigest(), path
    # and a third process loads the module-level function's rewrite instead of rewriting it
    code = ("import numpy as np, bytegrad, test_workers as t\n"
            "bytegrad.grad(t.sin_loss)(np.ones(3))\n"
            "from bytegrad import diskcache; print(diskcache.stats()['hits'])")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT / "tests", capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])},
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout.split()[-1]) > 0


# ---- Dask --------------------------------------------------------------------------------------------


def _mlp_data(n, seed=0):
    rng = np.random.default_rng(seed)
    params = {"W1": rng.standard_normal((64, 16)) / 8, "b1": rng.standard_normal(16) / 4,
              "W2": rng.standard_normal((16, 10)) / 4, "b2": np.zeros(10)}
    x = rng.random((n, 64))
    y = np.eye(10)[rng.integers(0, 10, n)]
    return params, x, y


def test_dask_local_cluster_summed_shard_gradients_equal_the_one_process_gradient(cache, monkeypatch):
    distributed = pytest.importorskip("dask.distributed",
                                      reason="dask[distributed] is not installed (pip install -e '.[dask]')")
    monkeypatch.syspath_prepend(str(ROOT / "examples"))  # the worker processes start with this sys.path
    import train_mlp_digits_dask as example
    params, x, y = _mlp_data(96)
    v0, g0 = example.shard_loss.value_and_grad(params, x, y, len(x))
    with distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1, dashboard_address=None,
                                  silence_logs=40) as cluster, distributed.Client(cluster) as client:
        assert len(client.scheduler_info()["workers"]) == 2
        v, g = example.distributed_value_and_grad(client, params, x, y)
        # the test module's own function travels by reference, a lambda by value
        by_ref = client.submit(bytegrad.grad(mlp_loss), params, x[:5], y[:5], 5, pure=False).result()
        vg_lambda = bytegrad.value_and_grad(lambda p, a: np.sum(np.tanh(a @ p["W1"]) ** 2))
        by_value = client.submit(vg_lambda, params, x, pure=False).result()
        pids = client.run(os.getpid)
    assert len(set(pids.values())) == 2 and os.getpid() not in pids.values()
    assert v == pytest.approx(v0, rel=1e-12)
    for k in params:
        np.testing.assert_allclose(g[k], g0[k], rtol=1e-12, atol=1e-12 * np.max(np.abs(g0[k])))
    for k, ref in mlp_loss.grad(params, x[:5], y[:5], 5).items():
        np.testing.assert_allclose(by_ref[k], ref, rtol=1e-14)
    v_ref, g_ref = vg_lambda(params, x)
    assert by_value[0] == pytest.approx(v_ref, rel=1e-14)
    np.testing.assert_allclose(by_value[1]["W1"], g_ref["W1"], rtol=1e-14)
