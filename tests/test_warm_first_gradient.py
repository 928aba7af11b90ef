"""A fresh process's first gradient when the disk cache holds its rewrite (bytegrad issue 25, "warm
cache"): what it leaves out, each pinned by the modules a child process has imported, and that leaving
it out changes no result."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bytegrad.runtime import costs, fused

REPO = Path(__file__).resolve().parent.parent

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
    environ = dict(os.environ, BYTEGRAD_CACHE_DIR=str(cache_dir), **env)
    environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), environ.get("PYTHONPATH")]))
    proc = subprocess.run([sys.executable, "-c", _PROGRAM, *watched], cwd=REPO, env=environ,
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


def test_a_warm_first_gradient_imports_neither_the_cost_model_nor_the_kernel_records(tmp_path) -> None:
    """The stored rewrite holds a fused site (runtime/fused.py is imported to load it); the site has
    spent less than its price, so neither runtime/costs.py nor runtime/kernel_records.py is imported,
    and the gradient is the one a process without the disk cache computes."""
    watched = ("bytegrad.runtime.fused", "bytegrad.runtime.costs", "bytegrad.runtime.kernel_records")
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
