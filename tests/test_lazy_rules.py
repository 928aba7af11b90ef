"""What `import bytegrad` leaves unimported, and the rules that load once the program imports the
module they cover (registry._LAZY_RULES): numpy.fft, statistics, heapq and bisect, like scipy's.
`import bytegrad` must not import those modules, and a function of theirs must never be met without
its rule: each program below runs in a fresh process and reaches the function the ways users write
it (`import m; m.f`, `from m import f`, an alias, a callee in another module, an import inside the
differentiated function, the module imported before bytegrad). Without its rule each of them would
be differentiated through its Python code or refused (a wrong path, an error): the gradients are
checked against the formulas."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

#: modules `import bytegrad` must leave unimported when `import numpy` did not import them: the lazily
#: loaded rules and what they cover, dataclasses and copy, and the compiled-program machinery (loaded
#: when a function is first differentiated)
LAZY = ("numpy.fft", "statistics", "heapq", "_heapq", "bisect", "_bisect", "random", "decimal", "fractions",
        "bytegrad.rules.numpy.fft", "bytegrad.rules.stdlib.statistics", "bytegrad.rules.stdlib.heapq",
        "bytegrad.rules.stdlib.bisect", "dataclasses", "copy", "bytegrad.compiled", "bytegrad.compiled.lower_numpy",
        "bytegrad.compiled.source")


def run_program(tmp_path: Path, main: str, env_extra: dict[str, str] | None = None, **modules: str) -> str:
    """Run `main` in a fresh process beside the given modules; its stdout (a failure shows stderr)."""
    for name, source in modules.items():
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
    env = dict(os.environ, BYTEGRAD_CACHE_DIR=str(tmp_path / "cache"), **(env_extra or {}))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), str(tmp_path), env.get("PYTHONPATH")]))
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(main)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_import_bytegrad_leaves_lazy_modules_unimported(tmp_path: Path) -> None:
    out = run_program(tmp_path, f"""
        import sys, numpy
        before = set(sys.modules)
        import bytegrad
        print(sorted(m for m in {LAZY!r} if m in sys.modules and m not in before))
        """)
    assert out == "[]"


# ---- statistics ------------------------------------------------------------------------------------

# mean's gradient is 1/n per item, pvariance's 2 (x - mean) / n; statistics' own code converts the
# items to exact fractions (`as_integer_ratio`), which bytegrad cannot follow
STATS_CHECK = """
    xs = [1.0, 2.0, 4.0]
    g = bytegrad.grad(loss)(xs)
    assert abs(g[0] - (1 / 3 + 2 * (1.0 - 7 / 3) / 3)) < 1e-12, g
    print("ok")
    """

STATS_WAYS = {
    "module attribute": ("import bytegrad, statistics\n"
                         "def loss(xs):\n    return statistics.mean(xs) + statistics.pvariance(xs)\n"),
    "from-import": ("import bytegrad\nfrom statistics import mean, pvariance\n"
                    "def loss(xs):\n    return mean(xs) + pvariance(xs)\n"),
    "alias": ("import bytegrad\nimport statistics as st\n"
              "def loss(xs):\n    return st.mean(xs) + st.pvariance(xs)\n"),
    "imported before bytegrad": ("import statistics\nimport bytegrad\n"
                                 "def loss(xs):\n    return statistics.mean(xs) + statistics.pvariance(xs)\n"),
    "imported inside the function": ("import bytegrad\n"
                                     "def loss(xs):\n    import statistics\n"
                                     "    return statistics.mean(xs) + statistics.pvariance(xs)\n"),
    "callee in another module": ("import bytegrad, stats_helper\n"
                                 "def loss(xs):\n    return stats_helper.both(xs)\n"),
}
STATS_HELPER = """
    from statistics import mean, pvariance

    def both(xs):
        return mean(xs) + pvariance(xs)
    """


@pytest.mark.parametrize("way", list(STATS_WAYS))
def test_statistics_rules_load_when_the_program_reaches_statistics(tmp_path: Path, way: str) -> None:
    assert run_program(tmp_path, STATS_WAYS[way] + textwrap.dedent(STATS_CHECK), stats_helper=STATS_HELPER) == "ok"


def test_statistics_rules_in_forward_mode(tmp_path: Path) -> None:
    out = run_program(tmp_path, """
        import bytegrad, numpy as np
        from statistics import mean
        def f(x):
            return mean([x[0], x[1], x[1]])
        _, t = bytegrad.jvp(f, (np.array([1.0, 2.0]),), (np.array([3.0, 6.0]),))
        print(round(float(t), 12))
        """)
    assert out == "5.0"


def test_registry_listing_and_lookup_see_lazily_loaded_rules(tmp_path: Path) -> None:
    out = run_program(tmp_path, """
        import bytegrad
        from bytegrad.rules import registry
        import statistics, heapq, bisect
        rules = registry.all_rules()
        print(statistics.mean in rules, heapq.heappush in rules, bisect.bisect_left in rules)
        import numpy.fft
        print(registry.lookup(numpy.fft.rfft).kind.value)
        """)
    assert out == "True True True\nrrule"


# ---- heapq and bisect ------------------------------------------------------------------------------

HEAP_BISECT = """
    def loss(x):
        heap = []
        for v in (x[0] * 3.0, x[1], x[2] * 2.0):
            heappush(heap, v)
        low = heappop(heap)
        ordered = sorted([x[0], x[1], x[2]])
        i = bisect_left(ordered, x[1])
        insort(ordered, x[0] * x[0])
        return low * 10.0 + i * x[2] + ordered[-1]
    g = bytegrad.grad(loss)(np.array([1.0, 0.5, 2.0]))
    # low = x[1]; i = 0; ordered[-1] = x[2] (4.0 > 1.0 = x[0]**2)
    print(g.tolist())
    """
HEAP_WAYS = {
    "from-import": ("import bytegrad, numpy as np\nfrom heapq import heappush, heappop\n"
                    "from bisect import bisect_left, insort\n"),
    "module attribute, imported before bytegrad": (
        "import heapq, bisect\nimport bytegrad, numpy as np\n"
        "heappush, heappop, bisect_left, insort = heapq.heappush, heapq.heappop, bisect.bisect_left, bisect.insort\n"),
    "the C modules only": ("import bytegrad, numpy as np\nfrom _heapq import heappush, heappop\n"
                           "from _bisect import bisect_left, insort_right as insort\n"),
}


@pytest.mark.parametrize("way", list(HEAP_WAYS))
def test_heapq_and_bisect_rules_load_when_the_program_imports_them(tmp_path: Path, way: str) -> None:
    assert run_program(tmp_path, HEAP_WAYS[way] + textwrap.dedent(HEAP_BISECT)) == "[0.0, 10.0, 1.0]"


# ---- numpy.fft -------------------------------------------------------------------------------------

# sum(|fft(x)|^2) == n * sum(x^2) (Parseval): the gradient is 2 n x
FFT_CHECK = """
    x = np.array([1.0, -2.0, 0.5, 3.0])
    g = bytegrad.grad(loss)(x)
    assert np.allclose(g, 8.0 * x), g
    _, t = bytegrad.jvp(loss, (x,), (np.ones(4),))
    assert np.isclose(t, 8.0 * x.sum()), t
    print("ok")
    """
FFT_WAYS = {
    "numpy.fft imported before bytegrad": ("import numpy as np, numpy.fft\nimport bytegrad\n"
                                           "def loss(x):\n    return np.sum(np.abs(np.fft.fft(x)) ** 2)\n"),
    "np.fft reached first inside the function": ("import numpy as np, bytegrad, sys\n"
                                                 "assert 'numpy.fft' not in sys.modules\n"
                                                 "def loss(x):\n    return np.sum(np.abs(np.fft.fft(x)) ** 2)\n"),
    "from numpy.fft import": ("import numpy as np, bytegrad\nfrom numpy.fft import fft as transform\n"
                              "def loss(x):\n    return np.sum(np.abs(transform(x)) ** 2)\n"),
    "callee in another module": ("import numpy as np, bytegrad, fft_helper\n"
                                 "def loss(x):\n    return fft_helper.power(x)\n"),
}
FFT_HELPER = """
    import numpy as np

    def power(x):
        return np.sum(np.abs(np.fft.fft(x)) ** 2)
    """


@pytest.mark.parametrize("way", list(FFT_WAYS))
def test_numpy_fft_rules_load_when_the_program_reaches_numpy_fft(tmp_path: Path, way: str) -> None:
    assert run_program(tmp_path, FFT_WAYS[way] + textwrap.dedent(FFT_CHECK), fft_helper=FFT_HELPER) == "ok"


def test_a_rewrite_that_loads_lazy_rules_is_kept_under_the_version_it_made(tmp_path: Path) -> None:
    """The first rewrite loads the rules of modules imported since bytegrad (here bisect), which bumps
    the registry version that keys rewritten code: the key is taken after they load, so the second
    gradient reuses the first's rewrite (its fused sites keep the tier they reached), for the function
    and for a callee."""
    out = run_program(tmp_path, """
        import numpy as np, bytegrad, bisect
        from bytegrad.transform import _FN_CACHE

        def inner(x):
            return np.tanh(x * 2.0)

        def f(x):
            return np.sum(inner(x))

        d = bytegrad.differentiate(f, tier="general")  # (a capture's rewrite is a variant of its own)
        for _ in range(3):
            d.grad(np.ones(3))
        print(len(d._fns), [len(entry[2]) for entry in _FN_CACHE.values()])
        """)
    assert out == "1 [1]"


def test_a_stored_program_guards_the_version_with_the_imported_modules_rules_loaded(tmp_path: Path) -> None:
    """A program loaded from disk (or built) guards the registry version after the rules of modules
    imported since load: another function's first rewrite, which would load them, leaves it valid."""
    module = """
        import numpy as np

        def f(x):
            return np.sum(np.tanh(x * 2.0))

        def g(x):
            return np.sum(x * x)
        """
    auto = {"BYTEGRAD_TIER": "auto"}  # (the program a precompile stores for it is the NumPy back end's)
    run_program(tmp_path, "import numpy as np, bytegrad, progmod\nbytegrad.precompile(progmod.f, np.ones(3))\n",
                auto, progmod=module)
    out = run_program(tmp_path, """
        import bisect, numpy as np, bytegrad, progmod
        d = bytegrad.differentiate(progmod.f)
        d.grad(np.ones(3))  # (the first call runs the stored standalone form, bytegrad/_quick.py)
        d.grad(np.ones(3))  # (the second loads the general path, bisect's rules with it, and the program)
        bytegrad.differentiate(progmod.g, tier="general").grad(np.ones(3))
        d.grad(np.ones(3))
        s = d.stats()["compiled"]
        print(s["loaded_from_disk"], s["compiled_calls"], s["general_calls"])
        """, auto)
    assert out == "1 3 0"
