"""Every fused kernel against its NumPy twin: the same tree run op by op through the rules.

For a table of expression trees, float64 and float32, several shapes with broadcasting, and each
pattern of differentiated leaves, the kernel's value and leaf cotangents must match the NumPy
tier's (`fused.numpy_gradients`), including NaN/inf where the twin gives them.
"""
import itertools

import numpy as np
import pytest

import bytegrad
from bytegrad import transform
from bytegrad.runtime import costs, fused, kernels

pytestmark = pytest.mark.skipif(kernels.disabled(), reason="Numba disabled (BYTEGRAD_DISABLE_NUMBA)")


def dense_tanh(z, b):
    return np.tanh(z + b)


def dense_relu(z, b):
    return np.maximum(z + b, 0.0)


def sigmoid(z, b):
    return 1.0 / (1.0 + np.exp(-(z + b)))


def chain(x, y):
    return x * np.sin(x) + 0.1 * np.cos(y)


def rational(x, y):
    return (x - y) / (x * x + 1.0) - y ** 2


def logs(x, y):
    return np.log(np.abs(x) + 1e-3) * np.sqrt(np.abs(y)) + np.minimum(x, y)


def powers(x, y):
    return x ** 3 + np.square(y) - x ** 0.5 + np.exp(y) * 0.5


TREES = [dense_tanh, dense_relu, sigmoid, chain, rational, logs, powers]
SHAPES = [((5,), (5,)), ((4, 3), (3,)), ((4, 3), (4, 1)), ((2, 3, 4), (1, 3, 1)), ((6,), ())]


def _site(f):
    code = transform.rewrite_code(f.__code__, frozenset(f.__code__.co_varnames[:2]), f.__globals__)
    sites = [c for c in code.co_consts if isinstance(c, fused.FusedSite)]
    assert len(sites) == 1, f"{f.__name__} should be one fused site"
    return sites[0]


def _operands(fs, leaves):
    return tuple(leaves[ref] if ref >= 0 else fs.nodes[-1 - ref].fn for ref in fs.operands)


@pytest.mark.parametrize("f", TREES, ids=lambda f: f.__name__)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_kernel_matches_numpy_twin(f, dtype):
    fs = _site(f)
    rng = np.random.default_rng(7)
    for sx, sy in SHAPES:
        leaves = [rng.uniform(0.2, 1.5, size=sx).astype(dtype), rng.uniform(-1.0, 1.0, size=sy).astype(dtype)]
        if f is logs:
            leaves[0][..., 0] = 0.0  # kinks and ties
        for active in itertools.product([True, False], repeat=2):
            if not any(active):
                continue
            ks = kernels.compile_kernels(kernels.plan(fs.nodes, fs.n_leaves, np.dtype(dtype).name, active))
            assert ks is not None
            ct = rng.normal(size=np.broadcast_shapes(sx, sy)).astype(dtype)
            want_out, want = fused.numpy_gradients(fs, _operands(fs, leaves), active, ct)
            got_out, got = fused.kernel_gradients(fs, ks, leaves, active, ct)
            tol = dict(rtol=1e-12, atol=1e-12) if dtype == np.float64 else dict(rtol=2e-5, atol=2e-5)
            assert np.asarray(got_out).dtype == dtype
            np.testing.assert_allclose(got_out, want_out, **tol)
            for j in range(2):
                if not active[j]:
                    continue
                assert np.shape(got[j]) == np.shape(leaves[j]), (sx, sy, j)
                assert np.asarray(got[j]).dtype == dtype
                np.testing.assert_allclose(got[j], want[j], **tol)


def test_nan_and_inf_as_numpy_gives_them():
    fs = _site(logs)
    x = np.array([0.0, -1.0, np.nan, np.inf, 2.0])
    y = np.array([0.0, 4.0, 1.0, -np.inf, np.nan])
    active = (True, True)
    ks = kernels.compile_kernels(kernels.plan(fs.nodes, fs.n_leaves, "float64", active))
    with np.errstate(all="ignore"):
        want_out, want = fused.numpy_gradients(fs, _operands(fs, [x, y]), active)
        got_out, got = fused.kernel_gradients(fs, ks, [x, y], active)
    np.testing.assert_array_equal(got_out, want_out)
    for j in range(2):
        np.testing.assert_array_equal(got[j], want[j])


def quotient(x, y):
    return (x / y) * 2.0 - x


def test_division_by_zero_as_numpy_gives_it():
    # kernels divide with `/`: IEEE 754 in a Numba ufunc body, +-inf and NaN as NumPy gives them
    fs = _site(quotient)
    x = np.array([1.0, -1.0, 0.0, 1.0, np.nan, np.inf, 3.0])
    y = np.array([0.0, 0.0, 0.0, -0.0, 0.0, 0.0, np.inf])
    for dtype in ("float64", "float32"):
        for active in ((True, True), (True, False), (False, True)):
            ks = kernels.compile_kernels(kernels.plan(fs.nodes, fs.n_leaves, dtype, active))
            xs, ys = x.astype(dtype), y.astype(dtype)
            with np.errstate(all="ignore"):
                want_out, want = fused.numpy_gradients(fs, _operands(fs, [xs, ys]), active)
                got_out, got = fused.kernel_gradients(fs, ks, [xs, ys], active)
            np.testing.assert_array_equal(got_out, want_out)
            for j in range(2):
                if active[j]:
                    np.testing.assert_array_equal(got[j], want[j])


def test_a_backward_that_would_recompute_transcendentals_is_one_pass():
    # x * sin(x) + 0.1 * cos(y): the partials need sin and cos of the forward's own arguments
    fs = _site(chain)
    p = kernels.plan(fs.nodes, fs.n_leaves, "float64", (True, True))
    assert p.onepass and p.n_functions == 1 and p.saved_leaves == () and not p.needs_out
    assert p.source.count("math.sin(a0)") == 1  # evaluated once, for the value and its partial
    ks = kernels.compile_kernels(p)
    x, y = np.linspace(-1, 1, 5), np.linspace(0, 2, 5)
    out, dx, dy = ks.forward(x, y)
    np.testing.assert_allclose(out, x * np.sin(x) + 0.1 * np.cos(y), rtol=1e-15)
    np.testing.assert_allclose(dx, np.sin(x) + x * np.cos(x), rtol=1e-15)
    np.testing.assert_allclose(dy, -0.1 * np.sin(y), rtol=1e-15)
    # dense tanh's backward is arithmetic on the output: two passes, the output saved
    fs = _site(dense_tanh)
    assert not kernels.plan(fs.nodes, fs.n_leaves, "float64", (True, True)).onepass


def test_backward_saves_only_the_output_for_dense_tanh():
    fs = _site(dense_tanh)
    p = kernels.plan(fs.nodes, fs.n_leaves, "float64", (True, True))
    assert p.needs_out and p.saved_leaves == ()
    assert len(p.groups) == 1 and p.groups[0].leaves == (0, 1)  # z and b share one cotangent


@pytest.mark.parametrize("f", [dense_tanh, chain], ids=lambda f: f.__name__)  # two-pass, one-pass
@pytest.mark.parametrize("ct", [2, np.float64(2.0), 2.0], ids=["int", "np.float64", "float"])
def test_scalar_cotangents_of_any_type_into_a_float32_kernel(f, ct):
    fs = _site(f)
    rng = np.random.default_rng(11)
    leaves = [rng.uniform(0.2, 1.5, size=(4, 3)).astype(np.float32), rng.uniform(-1.0, 1.0, size=3).astype(np.float32)]
    ks = kernels.compile_kernels(kernels.plan(fs.nodes, fs.n_leaves, "float32", (True, True)))
    want_out, want = fused.numpy_gradients(fs, _operands(fs, leaves), (True, True), 2.0)
    got_out, got = fused.kernel_gradients(fs, ks, leaves, (True, True), ct)
    for j in range(2):
        assert np.asarray(got[j]).dtype == np.float32
        np.testing.assert_allclose(got[j], want[j], rtol=2e-5, atol=2e-5)
    if ks.onepass:  # the reverse step of a plain grad's tape, which may scale its partial in place
        out, *partials = ks.forward(*leaves)
        node = (fused.PARTIALS, (0, 0), fs.site, ks, partials, fused.leaf_shapes(leaves), True)
        got = fused.PARTIALS.backward(ct, node, out)
        for j in range(2):
            assert np.asarray(got[j]).dtype == np.float32
            np.testing.assert_allclose(got[j], want[j], rtol=2e-5, atol=2e-5)


def test_tier_up_prices_are_remembered_for_the_next_process(monkeypatch, tmp_path):
    """What importing Numba and loading kernels cost here is kept in the disk cache, and a later
    process prices its sites' tier-up by it rather than by the defaults (a slow machine priced by
    the quick-machine guess tiers up at a loss)."""
    monkeypatch.setattr(bytegrad.config, "cache_dir", str(tmp_path))
    from bytegrad import diskcache
    diskcache._reset_for_tests()
    monkeypatch.setattr(kernels, "_COSTS", costs.CostModel(persist=True))
    kernels._COSTS.remember({"import": 1.25, "load": 0.125})
    monkeypatch.setattr(kernels, "_COSTS", costs.CostModel(persist=True))  # a new process
    monkeypatch.setattr(kernels, "numba_loaded", lambda: False)
    fs = _site(dense_tanh)
    plan = kernels.plan(fs.nodes, fs.n_leaves, "float64", (True, True))
    price = kernels.cost_estimate(plan)
    per = 0.125 if kernels.on_disk(plan) else 0.40
    assert price == pytest.approx(1.25 + per * plan.n_functions)
    assert kernels._COSTS.seconds == {**costs.DEFAULTS, "import": 1.25, "load": 0.125}
    diskcache._reset_for_tests()
