"""bytegrad's own rules modules that `import bytegrad` leaves out (rules/_deferred.py): each imports on
the first lookup of one of its functions. The registry must then answer every lookup as if they had
all been imported with bytegrad: the same functions, the same rules (merged the same way), the same
answers to a rule registered or opted out for one of their functions before they load; and a
gradient through one of their functions, reached by a call, a bound method or a callee, uses its
rule. Each program runs in a fresh process."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from bytegrad.rules import _deferred

REPO = Path(__file__).resolve().parent.parent


def run(code: str, tmp_path: Path, **extra_env: str) -> str:
    env = dict(os.environ, BYTEGRAD_CACHE_DIR=str(tmp_path / "cache"), **extra_env)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize("module", sorted(_deferred.INDEX))
def test_import_bytegrad_does_not_import_the_deferred_module(tmp_path: Path, module: str) -> None:
    out = run(f"""
        import sys, numpy, bytegrad
        from bytegrad.rules import registry
        print([{module!r} in sys.modules, {module!r} in registry.DEFERRED_PENDING])
        """, tmp_path)
    assert out == "[False, True]"


def test_the_index_is_what_the_modules_register(tmp_path: Path) -> None:
    """Regenerated from the modules (nothing deferred, each imported after the eager ones): the index
    in the tree is complete and up to date, and every candidate could be deferred."""
    out = run("""
        import json
        from bytegrad.rules import _deferred
        index, refused = _deferred.build(_deferred.CANDIDATES)
        print(json.dumps([{k: list(v) for k, v in index.items()}, sorted(r.split(":")[0] for r in refused)]))
        """, tmp_path, _BG_INDEXING_RULES="1")
    index, refused = json.loads(out)
    assert index == {k: list(v) for k, v in _deferred.INDEX.items()}
    assert refused == []  # (a candidate with a rule on an `operator` function or a property would stay eager)


DESCRIBE = """
    import json
    from bytegrad.rules import _deferred, registry

    def key(fn):
        return _deferred.name_of(fn) or f"{getattr(fn, '__module__', '')}:{getattr(fn, '__qualname__', repr(fn))}"

    def loc(at):
        return None if at is None else [at.filename.split("bytegrad/rules/")[-1], at.lineno]

    def describe(rules):
        return {key(fn): [r.kind.value, loc(r.defined_at), loc(r.frule_defined_at), r.rrule is not None,
                          r.frule is not None, len(r.partials), r.kernel is not None] for fn, r in rules.items()}
"""


def test_every_rule_is_found_after_a_lazy_import(tmp_path: Path) -> None:
    """Every function of every deferred module is found by `lookup` one at a time (each loading its
    module); then the whole registry equals the one where the modules were imported with bytegrad."""
    eager = json.loads(run(DESCRIBE + """
    import importlib
    from bytegrad.rules import _load_builtin_rules
    for m in _load_builtin_rules.ALL:  # in the order `import bytegrad` imported them all before
        importlib.import_module(m)
    print(json.dumps(describe(registry.all_rules())))
    """, tmp_path, _BG_INDEXING_RULES="1"))
    lazy = json.loads(run(DESCRIBE + """
    import sys
    found = {}
    version = registry.version()
    for module, names in _deferred.INDEX.items():
        for name in names:
            rule = registry.lookup(_deferred.resolve(name))
            assert rule is not None, name
            found[name] = describe({rule.fn: rule})
    own_only = {m for m, names in _deferred.INDEX.items() if not names}  # (control: stop_gradient's first use loads it)
    assert registry.DEFERRED_PENDING == own_only and all(m in sys.modules for m in _deferred.INDEX if m not in own_only)
    assert registry.version() == version  # (nothing seen before the loads changed)
    rules = registry.all_rules()
    from bytegrad.rules import _load_builtin_rules
    assert all(m in sys.modules for m in _load_builtin_rules.ALL)
    print(json.dumps(describe(rules)))
    """, tmp_path))
    assert lazy == eager
    assert sum(map(len, _deferred.INDEX.values())) >= 50  # (the index covers the modules' functions)


def test_all_rules_loads_every_deferred_module(tmp_path: Path) -> None:
    out = run("""
        import sys, bytegrad
        from bytegrad.rules import _deferred, registry
        rules = registry.all_rules()
        print([all(m in sys.modules for m in _deferred.INDEX), all(_deferred.resolve(n) in rules
               for names in _deferred.INDEX.values() for n in names)])
        """, tmp_path)
    assert out == "[True, True]"


@pytest.mark.parametrize("check", ["0", "1"])
def test_gradients_through_deferred_functions_use_their_rules(tmp_path: Path, check: str) -> None:
    """np.cumsum called, `x.cumprod()` as a bound method (the registry's descriptor path), np.linalg.svd
    through a callee in another function, np.diff: each module loads on the way, the gradients match
    the formulas, and only the modules of the functions reached are imported (the checking mode, which
    watches every rule's code, loads them all)."""
    out = run("""
        import sys, numpy as np, bytegrad

        def helper(A):
            return np.sum(np.linalg.svd(A, compute_uv=False) ** 2)

        def f(x, A):
            return np.sum(np.cumsum(x) * x) + np.sum(x.cumprod()) + helper(A) + np.sum(np.diff(x) ** 2)

        x = np.array([0.5, -1.5, 2.0, 0.25])
        A = np.arange(9.0).reshape(3, 3) + np.eye(3)
        gx, gA = bytegrad.grad(f, wrt=(0, 1))(x, A)
        # d/dx sum(cumsum(x) * x) = cumsum(x) + reverse-cumsum(x); d sum(cumprod) / dx_i = sum_{k>=i} prod_k / x_i
        cp = np.cumprod(x)
        want = np.cumsum(x) + np.cumsum(x[::-1])[::-1] + np.array([cp[i:].sum() / x[i] for i in range(4)])
        d = np.diff(x)
        want += np.concatenate([[-2 * d[0]], 2 * d[:-1] - 2 * d[1:], [2 * d[-1]]])
        assert np.allclose(gx, want, rtol=1e-12), (gx, want)
        assert np.allclose(gA, 2 * A, rtol=1e-12), gA  # d sum(s**2) / dA = 2 A
        print(sorted(m.rsplit(".", 1)[1] for m in sys.modules if m.startswith("bytegrad.rules.numpy.")
                     and m.rsplit(".", 1)[1] in ("cumulative", "linalg_decomp", "building", "signal", "selection")))
        """, tmp_path, BYTEGRAD_CHECK=check)
    if check == "0":
        assert out == "['cumulative', 'linalg_decomp']"
    else:
        assert out == "['building', 'cumulative', 'linalg_decomp', 'selection', 'signal']"


def test_a_rule_registered_before_its_module_loads_is_merged_as_if_eager(tmp_path: Path) -> None:
    """A second rrule for a deferred function raises DuplicateRuleError naming bytegrad's own (as it
    would had the module been imported with bytegrad); override=True replaces it, and the later load
    of the module keeps the override; an frule of the user's combines with bytegrad's rrule."""
    out = run("""
        import numpy as np, bytegrad
        from bytegrad.rules import registry

        try:
            @bytegrad.rrule(np.tril)
            def mine(x, k=0):
                return np.tril(x, k), lambda g: (g,)
            print("no error")
        except bytegrad.DuplicateRuleError as exc:
            assert "building.py" in str(exc), exc

        @bytegrad.rrule(np.triu, override=True)
        def triu_all(x, k=0):
            return np.triu(x, k), lambda g: (3.0 * g,)

        registry.all_rules()
        g = bytegrad.grad(lambda x: np.sum(np.triu(x)))(np.ones((2, 2)))
        assert np.array_equal(g, 3.0 * np.ones((2, 2))), g  # the override, not the rule's triu mask

        @bytegrad.frule(np.meshgrid)
        def mesh_f(primals, tangents):
            return np.meshgrid(*primals), None
        rule = registry.lookup(np.meshgrid)
        print([rule.rrule is not None, rule.frule is mesh_f])
        """, tmp_path)
    assert out == "[True, True]"


def test_opt_out_of_a_deferred_function(tmp_path: Path) -> None:
    """opt_out(np.diff) before its module loads: no rule, after every module loads too; its rule is
    kept aside as when the module loaded with bytegrad (the other functions of the module keep theirs)."""
    out = run("""
        import sys, numpy as np, bytegrad
        from bytegrad.rules import registry
        bytegrad.opt_out(np.diff)
        assert "bytegrad.rules.numpy.cumulative" in sys.modules
        assert registry.lookup(np.diff) is None and np.diff not in registry.all_rules()
        print([registry.opted_out(np.diff), registry._SHADOWED[np.diff].defined_at.filename.endswith("cumulative.py"),
               registry.lookup(np.cumsum) is not None])
        """, tmp_path)
    assert out == "[True, True, True]"


def test_name_of_finds_functions_methods_and_ufunc_methods() -> None:
    assert _deferred.name_of(np.cumsum) == "numpy:cumsum"
    assert _deferred.name_of(np.ndarray.cumsum) == "numpy:ndarray.cumsum"
    assert _deferred.resolve(_deferred.name_of(np.add.reduce)) == np.add.reduce
    assert _deferred.resolve("numpy.linalg:svd") is np.linalg.svd


HOT_PATHS = {
    # an attribute descriptor of a tracked array: runtime/abi.py's getattr_
    "x.T": ("return np.sum((x.T @ w) ** 2)", "2 * np.outer(w, x.T @ w)", "['shape']"),
    # math.modf: python_stdlib's rules, through dispatch's resolve
    "math.modf": ("return math.modf(x[1, 1] * 1.5)[0]", "np.array([[0.0, 0.0], [0.0, 1.5]])", "['python_stdlib']"),
    # a NumPy Python function bound as a method of an object that holds a tracked value (dispatch; the
    # monitor of such objects loads every rule, so only the gradient is checked)
    "method": ("h = Holder(); h.v = x; return (0.0 if h.scalar() else 1.0) * np.sum(x * w)",
               "np.tile(w, (2, 1))", None),
}


@pytest.mark.parametrize("check", ["0", "1"])
@pytest.mark.parametrize("way", sorted(HOT_PATHS))
def test_hot_paths_load_the_rules_they_meet(tmp_path: Path, check: str, way: str) -> None:
    """The runtime's own lookups (not `registry.lookup`) find deferred rules too. The gradient matches
    its formula, and (outside the checking mode, whose monitor may load every rule) only the module of
    the rule met is imported."""
    body, want, modules = HOT_PATHS[way]
    out = run(f"""
        import math, sys, numpy as np, bytegrad

        class Holder:
            scalar = np.isscalar  # (nondiff's rule)

        def f(x, w):
            {body}

        x = np.array([[1.0, -2.0], [0.5, 3.0]])
        w = np.array([0.25, -1.0])
        g = bytegrad.grad(f)(x, w)
        assert np.allclose(g, {want}, rtol=1e-12), g
        print(sorted(m.rsplit(".", 1)[1] for m in sys.modules if m.startswith("bytegrad.rules.")
                     and m.rsplit(".", 1)[1] in ("shape", "functional", "nondiff", "python_stdlib", "cumulative")))
        """, tmp_path, BYTEGRAD_CHECK=check)
    if check == "0" and modules is not None:
        assert out == modules


@pytest.mark.parametrize("check", ["0", "1"])
def test_a_callable_objects_call_rule_is_found_while_the_monitor_loads_every_rule(tmp_path: Path, check: str) -> None:
    """`np.vectorize(f)(x)`: dispatch finds the rule of `vectorize.__call__` (functional's). Looking it
    up is a Python call that the monitor of C calls sees (vectorize calls `f` from C), and the monitor
    loads every rule on the way (`all_rules`): the lookup must still see the rule that load brought."""
    out = run("""
        import numpy as np, bytegrad
        x = np.array([1.0, -2.0, 0.5])
        g = bytegrad.grad(lambda x: np.sum(np.vectorize(lambda t: t * t)(x)))(x)
        assert np.allclose(g, 2 * x, rtol=1e-12), g
        print("ok")
        """, tmp_path, BYTEGRAD_CHECK=check)
    assert out == "ok"
