"""Numba twins on disk: `bytegrad.precompile` also captures a stored NumPy program's Numba twin, whose
kernel module goes into the cache directory and its compiled code into Numba's cache. A fresh
process's first gradient still runs the stored NumPy program without Numba; its tier-up is priced
as a load and loads the kernel from Numba's cache; BYTEGRAD_TIER=numba loads it on the first call.
A kernel source that was edited, damaged or made writable by others is not trusted: it is written
again and compiled."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from test_program_store import run_project, write_project

from bytegrad.runtime import kernels

pytestmark = pytest.mark.skipif(kernels.disabled(), reason="Numba disabled (BYTEGRAD_DISABLE_NUMBA)")

MODULE = '''
import numpy as np


def loss(x, w):
    for _ in range(6):
        x = np.sin(x) * w
    return np.sum(x * x)
'''

RUNNER = '''
import json, os, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
import bytegrad, usermod
from bytegrad.compiled import policy as compiled
from bytegrad.runtime import costs, kernels
mode = sys.argv[2]
x, w = np.linspace(0.1, 1.0, 12), 1.5
out = {}
if mode == "precompile":
    s = bytegrad.precompile(usermod.loss, x, w)
    (prog,) = s["compiled"]["programs"]
    out["stored"], out["note"] = s["programs_stored"], prog.get("numba_kernels")
else:
    d = bytegrad.differentiate(usermod.loss)
    for _ in range(1 if os.environ["BYTEGRAD_TIER"] == "numba" else 2):  # auto loads on the second call
        value, g = d.value_and_grad(x, w)
    out["numba_after_first"] = "numba" in sys.modules
    general = bytegrad.differentiate(usermod.loss, tier="general").value_and_grad(x, w)
    out["same"] = bool(np.allclose(value, general[0], rtol=1e-12) and np.allclose(g, general[1], rtol=1e-12))
    (prog,) = d._tiers.programs
    out["backend"], out["loaded"] = prog.backend, d._tiers.loaded
    out["stems"] = list(prog.twin or ())
    if mode == "auto":
        # the ski-rental price of the twin is a load (without importing Numba: it is not loaded)
        out["price"], out["load"] = compiled.numba_price(prog), kernels.program_load_price(prog.twin)
        out["import"], build = costs.MODEL.seconds["import"], costs.MODEL.build_price(prog.records)
        out["compile_price"] = compiled.numba_price(prog.replace(twin=None))
        per_op = costs.MODEL.seconds["per_op"]
        run = d._tiers.run_of(prog)
        run.seconds = 1e9  # time enough spent in the NumPy program: the next timed call tiers up
        for _ in range(16):
            value, g = d.value_and_grad(x, w)
        out["same"] = out["same"] and bool(np.allclose(g, general[1], rtol=1e-12))
        out["upgraded"], out["learned"] = run.upgraded, costs.MODEL.seconds["per_op"] != per_op
    out["from_disk"] = kernels.program_from_disk(tuple(out["stems"]))
    out["note"] = d.stats()["compiled"]["programs"][0].get("numba_kernels")
    import io
    buf = io.StringIO()
    bytegrad.explain(usermod.loss, x, w, file=buf)
    out["explain"] = [ln.strip() for ln in buf.getvalue().splitlines() if "Numba kernels:" in ln]
print(json.dumps(out))
'''


@pytest.fixture()
def project(tmp_path: Path) -> Path:
    return write_project(tmp_path, MODULE, RUNNER)


def _sources(project: Path) -> list[Path]:
    return sorted((project / "cache" / "kernels").glob(f"{kernels.PROGRAM_PREFIX}*.py"))


def test_precompile_stores_the_twin_and_a_fresh_tier_up_loads_it(project):
    pre = run_project(project, "precompile")
    assert pre["stored"] == 1 and "on disk" in pre["note"], pre
    fresh = run_project(project, "auto")
    assert fresh["loaded"] == 1 and fresh["backend"] == "numpy" and not fresh["numba_after_first"], fresh
    assert fresh["stems"] and fresh["load"] is not None, fresh
    assert fresh["price"] == min(fresh["import"] + fresh["load"], fresh["compile_price"]), fresh
    # the tier-up's capture wrote the same kernel module, and Numba loaded it: no compile, no price learned
    assert fresh["upgraded"] and fresh["from_disk"] is True and not fresh["learned"], fresh
    assert fresh["same"], fresh


def test_a_forced_numba_tier_loads_the_precompiled_twin_on_the_first_call(project):
    run_project(project, "precompile")
    fresh = run_project(project, "numba", tier="numba")
    assert fresh["backend"] == "numba" and fresh["from_disk"] is True, fresh
    assert fresh["note"] == "loaded from Numba's disk cache" and fresh["same"], fresh
    assert fresh["explain"] == ["Numba kernels: loaded from Numba's disk cache"], fresh


@pytest.mark.parametrize("damage", ["edited", "garbage", "writable"])
def test_a_changed_kernel_source_is_not_trusted(project, damage):
    """An edited kernel module (with its size and mtime kept), a damaged one or one others may
    write: it is never imported; bytegrad writes its own source again, and Numba's index, keyed on
    that source (its hash in the Numba installed here; its mtime and size in older ones), loads
    the code compiled from it or compiles it again. The gradient is the general path's (the edited
    kernel's value would have the other sign)."""
    run_project(project, "precompile")
    (path,) = [p for p in _sources(project) if "small_matmul" not in p.read_text()]
    original = path.read_bytes()
    st = path.stat()
    if damage == "edited":  # the same size: the loss would have the other sign
        assert b"return total, " in original
        path.write_bytes(original.replace(b"return total, ", b"return -total,"))
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    elif damage == "garbage":
        path.write_bytes(b"\xff\xfe" + os.urandom(64))
    else:
        path.chmod(0o666)
    fresh = run_project(project, "numba", tier="numba")
    assert fresh["backend"] == "numba" and fresh["same"], fresh
    assert path.read_bytes() == original and path.stat().st_mode & 0o077 == 0
    assert fresh["note"] in ("loaded from Numba's disk cache", "compiled in this process (and cached on disk)"), fresh


def test_a_kernel_with_a_constant_numba_cannot_import_stays_in_memory():
    """A kernel's constants are written by name (NumPy and math functions, numbers, small_matmul);
    any other object keeps the kernel in memory."""
    import math

    import numpy as np

    from bytegrad.compiled.lower_numba import module_constants

    text = module_constants({"np": np, "f1": np.sin, "f2": math.cos, "c3": float("nan"), "c4": np.float32(0.5),
                             "dt5": np.float32, "k6": 3})
    assert text is not None
    ns: dict = {}
    exec(text, {"np": np, "math": math}, ns)  # noqa: S102
    assert ns["f1"] is np.sin and ns["f2"] is math.cos and math.isnan(ns["c3"]) and ns["dt5"] is np.float32
    assert type(ns["c4"]) is np.float32 and ns["c4"] == 0.5 and ns["k6"] == 3
    assert module_constants({"np": np, "f1": lambda v: v}) is None
    assert module_constants({"a": np.zeros(3)}) is None


MATMUL_MODULE = '''
import numpy as np


def loss(w, x):
    return np.sum(np.tanh(w @ x))
'''

MATMUL_RUNNER = '''
import json, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
from bytegrad.runtime import vmath_sources
if sys.argv[2] == "changed":  # another version of bytegrad: small_matmul's text is not the one cached
    vmath_sources.SMALL_MATMUL = vmath_sources.SMALL_MATMUL.replace("    return out", "    return out + 0.0")
import bytegrad, usermod
from bytegrad.runtime import kernels
w, x = np.linspace(0.1, 1.0, 4).reshape(2, 2), np.linspace(-1.0, 1.0, 40).reshape(2, 20)
d = bytegrad.differentiate(usermod.loss, tier="numba")
value, g = d.value_and_grad(w, x)
general = bytegrad.differentiate(usermod.loss, tier="general").value_and_grad(w, x)
(prog,) = d._tiers.programs
projected, real = [], prog.fn.__globals__["_project"]
prog.fn.__globals__["_project"] = lambda *a: projected.append(a) or real(*a)
again = d.grad(w, x)
print(json.dumps({"backend": prog.backend, "mm": "_kernels.small_matmul()" in open(
    sys.modules[prog.twin[0]].__file__).read() if prog.twin else False,
    "same": bool(np.allclose(value, general[0], rtol=1e-12) and np.allclose(g, general[1], rtol=1e-12)
                 and np.allclose(again, g, rtol=1e-15)),
    "from_disk": kernels.program_from_disk(prog.twin or ()), "projected": len(projected)}))
'''


def test_a_kernel_cached_with_another_small_matmul_is_not_loaded(tmp_path):
    """A program kernel calls small_matmul, which Numba links into the kernel's cached code by the
    name of small_matmul's module. Once small_matmul's text changes (another bytegrad), its module is
    another, and the cached kernel could neither be loaded (its environment names a module this
    process never loads: ModuleNotFoundError, and the signature fell back to the NumPy back end) nor
    be right. The kernel's module names the version of what it calls, so it is written and compiled
    again."""
    project = write_project(tmp_path, MATMUL_MODULE, MATMUL_RUNNER)
    first = run_project(project, "same", tier="numba")
    assert first == {"backend": "numba", "mm": True, "same": True, "from_disk": False, "projected": 0}, first
    changed = run_project(project, "changed", tier="numba")
    assert changed == {"backend": "numba", "mm": True, "same": True, "from_disk": False, "projected": 0}, changed


def test_gradients_of_a_kernel_from_numbas_cache_are_handed_over_without_projection(tmp_path):
    """The gradient arrays a Numba kernel returns are its own, of the primal's shape and dtype: the
    program hands them over as they are. A kernel loaded from Numba's cache gives arrays whose dtype
    equals NumPy's but is another object (unpickled), so a comparison by identity sent every one
    through pytree.project: a third of Dense(2)'s time."""
    project = write_project(tmp_path, MATMUL_MODULE, MATMUL_RUNNER)
    run_project(project, "same", tier="numba")
    again = run_project(project, "same", tier="numba")
    assert again == {"backend": "numba", "mm": True, "same": True, "from_disk": True, "projected": 0}, again
