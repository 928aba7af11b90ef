"""A fresh process's first gradient when the disk cache holds its rewrite (bytegrad issue 25, "warm
cache"): what it leaves out, each pinned by the modules a child process has imported, and that leaving
it out changes no result."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bytegrad import diskcache
from bytegrad.runtime import costs, fused, records
from bytegrad.transform import cache, sidetable

pytestmark = pytest.mark.general_path  # the general path's own machinery (tests/conftest.py)

REPO = Path(__file__).resolve().parent.parent
X = np.linspace(-1.0, 1.0, 7)
W = 0.7

_PROGRAM = (
    "import sys, json, numpy as np\n"
    "import bytegrad\n"
    "def loss(p, x):\n"
    "    h = np.tanh(p['W'] @ x + p['b'][:, None])\n"
    "    return np.sum(h * h)\n"
    "p = {'W': np.linspace(-1, 1, 12).reshape(4, 3), 'b': np.linspace(0, 1, 4)}\n"
    "x = np.linspace(-2, 2, 15).reshape(3, 5)\n"
    "g = bytegrad.grad(loss)(p, x)\n"
    "from bytegrad.transform import cache\n"
    "watched = sys.argv[1:]\n"
    "print(json.dumps({'grad': {k: v.tolist() for k, v in g.items()}, 'disk': cache.disk_stats(),\n"
    "                  'imported': sorted(m for m in watched if m in sys.modules)}))\n")


def _run(cache_dir: Path, *watched: str, **env: str) -> dict:
    # (the default tier: `tier="general"` imports the compiled tier's policy, and with it the cost model)
    environ = dict(os.environ, BYTEGRAD_CACHE_DIR=str(cache_dir), BYTEGRAD_TIER="auto", **env)
    environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), environ.get("PYTHONPATH")]))
    proc = subprocess.run([sys.executable, "-c", _PROGRAM, *watched], cwd=REPO, env=environ,
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


def test_a_warm_first_gradient_imports_no_cost_model_kernel_records_or_pickle(tmp_path) -> None:
    """The stored rewrite holds a fused site (runtime/fused.py is imported to load it); the site has
    spent less than its price, so neither runtime/costs.py nor runtime/kernel_records.py is imported;
    the side table is read without runtime/safepickle.py (transform/sidetable.py's format);
    and the gradient is the one a process without the disk cache computes."""
    watched = ("bytegrad.runtime.fused", "bytegrad.runtime.costs", "bytegrad.runtime.kernel_records",
               "bytegrad.runtime.safepickle")
    cold = _run(tmp_path, *watched)
    warm = _run(tmp_path, *watched)
    off = _run(tmp_path, *watched, BYTEGRAD_DISABLE_DISK_CACHE="1")
    assert cold["disk"]["rewrites"] == 1 and cold["disk"]["disk_stores"] == 1
    assert warm["disk"]["rewrites"] == 0 and warm["disk"]["disk_hits"] == 1
    assert warm["imported"] == ["bytegrad.runtime.fused"]
    assert warm["grad"] == off["grad"] == cold["grad"]


@pytest.mark.parametrize("spent, price", [(0.0, 0.02), (0.006, 0.02), (0.0066667, 0.02), (0.01, 0.02),
                                          (0.5, 0.02), (0.1, 1.5), (0.5, 1.5), (1.0, 0.0)])
@pytest.mark.parametrize("model_loaded", [False, True])
def test_a_site_rents_exactly_where_the_cost_model_says_it_does_not_pay(monkeypatch, spent, price,
                                                                        model_loaded) -> None:
    """fused._rents reads `spent < price` until the model is imported: the negation of `pays`."""
    monkeypatch.setattr(fused, "_COSTS", costs.MODEL if model_loaded else None)
    fs = fused.FusedSite.__new__(fused.FusedSite)
    fs.spent, fs.price = spent, price
    assert fused._rents(fs) is (not costs.MODEL.pays(spent * fused.BACKWARD_FACTOR, price))


def test_a_site_past_its_floor_consults_the_cost_model(monkeypatch) -> None:
    """Past the price, the model decides (here one that never pays): the shortcut only covers rent."""
    class Never(costs.CostModel):
        @staticmethod
        def pays(spent: float, price: float) -> bool:
            return False
    monkeypatch.setattr(fused, "_COSTS", Never())
    fs = fused.FusedSite.__new__(fused.FusedSite)
    fs.spent, fs.price = 10.0, fused.PRICE_FLOOR
    assert fused._rents(fs) is True
    monkeypatch.setattr(fused, "_COSTS", None)
    assert fused._rents(fs) is False and fused._COSTS is costs.MODEL


def test_the_deferred_names_of_fused_still_read() -> None:
    from bytegrad.runtime import kernel_records

    assert fused.TIE == costs.KERNEL_TIE
    assert fused.FUSED is kernel_records.FUSED and fused.PARTIALS is kernel_records.PARTIALS
    with pytest.raises(AttributeError):
        fused.NOT_A_NAME  # noqa: B018


# ---- the side table in marshal's terms (transform/sidetable.py, transform/cache.py `table_loads`) ----


def _tree_loss(x, w):
    h = np.tanh(w * x + 1.0)
    return np.sum(h * h) + np.sum(np.sin(x) * w)


def _dumps(table: list):
    return sidetable.dumps(table, cache.TABLE_FORMAT, cache.table_global, cache.table_ufunc)


def _table_of(fn, *args) -> list:
    """The side table of `fn`'s rewrite for these arguments (every parameter active)."""
    from bytegrad.transform import rewrite_code

    code = fn.__code__
    active = frozenset(code.co_varnames[:code.co_argcount])
    table: list = []
    cache._strip(rewrite_code(code, active, fn.__globals__), "n", table)
    return table


def test_a_rewrites_table_comes_back_with_the_same_objects_and_sharing() -> None:
    import marshal

    table = _table_of(_tree_loss, X, W)
    kinds = {type(c).__name__ for c in table}
    assert {"Site", "FusedSite"} <= kinds  # (the test reads a table with a fused site)
    side = _dumps(table)
    assert side is not None
    back = cache.table_loads(marshal.loads(marshal.dumps(side)))
    assert len(back) == len(table)
    for a, b in zip(table, back):
        assert type(a) is type(b)
        if isinstance(a, records.Site):
            assert (a.filename, a.lineno, a.function, a.what, a.callee) == (b.filename, b.lineno, b.function,
                                                                            b.what, b.callee)
        elif isinstance(a, fused.FusedSite):
            assert (a.expr, a.operands, a.leaf_names) == (b.expr, b.operands, b.leaf_names)
            for n, m in zip(a.nodes, b.nodes):
                assert (n.kind, n.fn, n.hook, n.args, n.site.what) == (m.kind, m.fn, m.hook, m.args, m.site.what)
        else:
            assert a is b  # hooks and NumPy functions: the very objects
    # an object held twice comes back once (pickle's memo did so)
    fs = next(c for c in table if isinstance(c, fused.FusedSite))
    shared = fs.nodes[0].site
    again = cache.table_loads(_dumps([shared, fs, shared]))
    assert again[0] is again[2] is again[1].nodes[0].site


class _Odd:
    pass


@pytest.mark.parametrize("value", [np.float64(2.0), _Odd(), os.system, (1, 2), np.load])
def test_a_table_with_a_value_the_format_does_not_write_is_pickled(value) -> None:
    site = records.Site("f.py", 3, "f", "add", callee=value)
    assert _dumps([value]) is None
    assert _dumps([site]) is None


@pytest.mark.parametrize("item", [("g", "os", "system"), ("g", "builtins", "eval"), ("g", "numpy", "load"),
                                  ("g", "operator", "_private"), ("u", "load"), ("u", "__class__"),
                                  ("r", "os", "system", None), ("r", "bytegrad.nope", "x", None),
                                  ("r", "bytegrad.runtime.abi", "NO_SUCH_HOOK", None), ("v", [1]), ("x", 1)])
def test_a_table_is_read_only_within_its_format(item) -> None:
    """Only bytegrad's own objects, NumPy ufuncs and functions with a rule, operator and math
    functions, plain values: anything else is refused (the entry is then rewritten)."""
    with pytest.raises((ValueError, ImportError)):
        cache.table_loads((cache.TABLE_FORMAT, (), (item,)))


@pytest.mark.parametrize("objects", [(("fused", ("v", None), (0,), (), ()),), (("node",),), (("site",),),
                                     (("evil", "x"),), (5,), (("node", "bin", ("o", 3), ("v", 1), (), ("v", 1)),)])
def test_a_malformed_table_raises_what_a_load_turns_into_a_rewrite(objects) -> None:
    with pytest.raises((ValueError, TypeError, IndexError, KeyError, AttributeError)):
        cache.table_loads((cache.TABLE_FORMAT, objects, ()))


def test_a_damaged_table_in_a_checksummed_entry_is_rewritten(disk) -> None:
    import marshal

    import bytegrad

    want = bytegrad.grad(_tree_loss)(X, W)
    cache.flush_stores()
    (entry,) = (disk / "code").glob("*.bgc")
    head, payload = diskcache.read_header(entry.read_bytes())
    fmt, nonce, stripped, frozen, side = marshal.loads(payload)
    assert type(side) is tuple and side[0] == cache.TABLE_FORMAT
    evil = (side[0], side[1], (("g", "os", "system"),) + side[2][1:])
    entry.write_bytes(diskcache.encode_entry(head["key"], marshal.dumps((fmt, nonce, stripped, frozen, evil)),
                                             label=head["label"], version=head["bytegrad"]))
    cache.clear()
    rewrites = cache.disk_stats()["rewrites"]
    np.testing.assert_array_equal(bytegrad.grad(_tree_loss)(X, W), want)
    assert cache.disk_stats()["rewrites"] == rewrites + 1


def test_a_table_the_format_does_not_write_is_stored_pickled_and_loads(disk, monkeypatch) -> None:
    import bytegrad

    monkeypatch.setattr(sidetable, "dumps", lambda table, *how: None)
    want = bytegrad.grad(_tree_loss)(X, W)
    cache.clear()
    hits = cache.disk_stats()["disk_hits"]
    np.testing.assert_array_equal(bytegrad.grad(_tree_loss)(X, W), want)
    assert cache.disk_stats()["disk_hits"] == hits + 1


# ---- the key's operator rules (transform/cache.py `_rule_of(..., stamped=True)`) ----------------------


def test_the_keys_operator_rules_from_the_stamped_builtins_read_no_line(monkeypatch) -> None:
    """The five operators' rules come from rules/builtins.py, whose stamp is in the key: the key reads
    none of their lines (each a scan of the module's line table)."""
    from bytegrad import errors

    reads = []
    original = errors.SourceLoc.lineno

    def counting(self):
        reads.append(self.filename)
        return original.fget(self)
    monkeypatch.setattr(errors.SourceLoc, "lineno", property(counting))
    code = (lambda x: x * 2.0 + 1.0).__code__
    cache._disk_key(code, frozenset({"x"}), frozenset())
    assert reads == []
    assert cache._rule_of(np.tanh) is not None and reads  # (the assumptions still record lines)


def test_an_operator_rule_registered_elsewhere_changes_the_key(monkeypatch) -> None:
    """A rule for `operator.add` defined outside rules/builtins.py, of the same kind and kernel arity,
    is recorded with its place, and so changes the key; put back, the key is as before."""
    import operator

    from bytegrad import errors
    from bytegrad.rules import registry

    code = (lambda x: x + 1.0).__code__
    before = cache._disk_key(code, frozenset({"x"}), frozenset())
    rule = registry.lookup(operator.add)
    elsewhere = rule.replaced(defined_at=errors.SourceLoc(__file__, 1, "<module>"))
    monkeypatch.setitem(registry._RULES, operator.add, elsewhere)
    assert cache._rule_of(operator.add)[0::2] == cache._rule_of(operator.mul, stamped=True)[0::2]
    assert cache._disk_key(code, frozenset({"x"}), frozenset()) != before
    monkeypatch.setitem(registry._RULES, operator.add, rule)
    assert cache._disk_key(code, frozenset({"x"}), frozenset()) == before
