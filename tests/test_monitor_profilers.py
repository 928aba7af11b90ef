"""The frame watch (runtime/monitor.py) beside a running profiler or tracer: gradients work, the
profiler keeps running afterwards (on 3.11 `sys.getprofile()` returns cProfile's `Profile` object,
which `sys.setprofile` cannot re-install: restoring it that way crashed with "'Profile' object is
not callable", and left profiling off), and the watch still stops Python code run blind from C.

Each case runs in a fresh interpreter (a profiler or tracer in the test process would meet pytest's
own), with the watch armed on demand (BYTEGRAD_CHECK=0) and from the start (BYTEGRAD_CHECK=1).
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

SCRIPT = r'''
import cProfile, pstats, io, sys
import numpy as np, bytegrad

def helper(t):
    return t * t + 1.0

def loss(x):
    return np.sum(np.vectorize(helper)(x))

class Tripled:
    def __init__(self, v):
        self.v = v
    def total(self):
        return self.v * 3

def after_gradient():
    return 1

events = []
def python_profiler(frame, event, arg):
    events.append(frame.f_code.co_name)

def python_tracer(frame, event, arg):
    return None

x = np.array([1.0, 2.0, 3.0])
case = sys.argv[1]
pr = cProfile.Profile()
if case in ("cprofile", "cprofile+tracer"):
    pr.enable()
if case in ("python-profiler", "python-profiler+tracer"):
    sys.setprofile(python_profiler)
if case.endswith("+tracer"):
    sys.settrace(python_tracer)
profiler, tracer = sys.getprofile(), sys.gettrace()
g = bytegrad.grad(loss)(x)
assert np.array_equal(g, 2 * x), g
total = np.frompyfunc(Tripled.total, 1, 1)
try:
    bytegrad.grad(lambda v: total(Tripled(v)))(2.0)
    blind = "none"
except bytegrad.errors.BlindCallError:
    blind = "BlindCallError"
assert sys.getprofile() is profiler, sys.getprofile()
assert sys.gettrace() is tracer, sys.gettrace()
if case.startswith("python-profiler"):
    assert "helper" in events  # it saw the forward pass too (the watch ran beside it)
del events[:]
after_gradient()
sys.settrace(None)
if case.startswith("cprofile"):
    pr.disable()
    out = io.StringIO()
    pstats.Stats(pr, stream=out).print_stats("after_gradient")
    assert "after_gradient" in out.getvalue()  # still profiling after the gradients
else:
    sys.setprofile(None)
    assert "after_gradient" in events
print("ok", blind)
'''


@pytest.mark.parametrize("check", ["0", "1"])
@pytest.mark.parametrize("case", ["cprofile", "cprofile+tracer", "python-profiler", "python-profiler+tracer"])
def test_gradients_beside_a_profiler_keep_it_running(case, check):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, BYTEGRAD_CHECK=check, PYTHONPATH=root)
    out = subprocess.run([sys.executable, "-c", SCRIPT, case], env=env, capture_output=True, text=True,
                         timeout=120, cwd=root)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["ok", "BlindCallError"], out.stdout + out.stderr[-3000:]
