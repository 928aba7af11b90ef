"""A fresh process's first gradient from a stored standalone program (bytegrad/_quick.py, compiled/quick.py).

A process that captured a NumPy program under `auto` stored it with its standalone form; the next
process's first `grad(f)(...)` call runs that form without loading the general path. Each test here
primes a cache in one process, then compares a second process's first call with what the general path
gives, and checks which one served it (whether `bytegrad.rules` was loaded by the call). Each check of
the loader has a test that fails without it: a global changed, a function monkeypatched in place, a
rule registered, a floating-point flag, another shape, a process that registered rules when storing.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parent.parent

MODULE = '''
import numpy as np

import bytegrad

SCALE = 1.5


def loss(W, x):
    return np.sum(np.tanh(W @ x) * SCALE) + np.log(np.sum(W * W))


def two(a, b):
    return np.sum(np.sin(a) * b) + np.sum(b * b)


def helper(v):
    return np.tanh(v)


def with_default(W, x, c=0.5):
    return np.sum(np.exp(W * c) @ x)


def tiny(W, x):
    return np.sum(np.exp(-800.0 - (W @ x) ** 2)) + np.sum(W * W)


def with_helper(W, x):
    return np.sum(helper(W @ x) ** 2)


@bytegrad.differentiate
def decorated(w):
    return np.sum(w * w)


class Model:
    scale = 2.0

    @bytegrad.differentiate
    def loss(self, w):
        return np.sum(w * w) * self.scale
'''

RUN = '''
import json, sys, warnings
import numpy as np
sys.path.insert(0, {folder!r})
{before}
import bytegrad
import qmod
{setup}
rng = np.random.default_rng(0)
W, x = {args}
g = {make}
{between}
warnings.simplefilter("always")
with warnings.catch_warnings(record=True) as caught:
    first = {call}
rules_after_first = "bytegrad.rules" in sys.modules
out = [first]
for _ in range({more}):
    out.append({call})
stats = g.stats().get("compiled", {{"compiled_calls": 0, "general_calls": 0}})  # (none under tier general)


def plain(v):
    if isinstance(v, tuple):
        return [plain(u) for u in v]
    return np.asarray(v, dtype=float).tolist()


print(json.dumps({{"results": [plain(r) for r in out], "general_first": rules_after_first,
                  "compiled_calls": stats["compiled_calls"], "general_calls": stats["general_calls"],
                  "warnings": [(str(w.message), w.filename) for w in caught]}}))
'''

ARGS = "rng.standard_normal((4, 3)), rng.standard_normal((3, 5))"


@pytest.fixture()
def env(tmp_path):
    (tmp_path / "qmod.py").write_text(MODULE)
    return tmp_path


def run(folder: Path, *, tier: str = "auto", before: str = "", setup: str = "", args: str = ARGS,
        make: str = "bytegrad.grad(qmod.loss)", more: int = 0, between: str = "", call: str = "g(W, x)") -> dict:
    code = RUN.format(folder=str(folder), before=before, setup=setup, args=args, make=make, more=more,
                      between=between, call=call)
    environ = {k: v for k, v in os.environ.items() if not k.startswith("BYTEGRAD_")}
    environ.update(BYTEGRAD_CACHE_DIR=str(folder / "cache"), BYTEGRAD_TIER=tier,
                   PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    proc = subprocess.run([sys.executable, "-c", code], cwd=folder, env=environ, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    quick = folder / "cache" / "quick"  # (written when the process exited: compiled/store.py `later`)
    out["quick_entries"] = len(list(quick.iterdir())) if quick.is_dir() else 0
    return out


def prime(folder: Path, **kw) -> dict:
    """A process that runs enough gradients for `auto` to capture the program, which it stores at exit."""
    out = run(folder, more=3, **kw)
    assert out["quick_entries"] == 1, out
    return out


def general(folder: Path, **kw) -> dict:
    return run(folder, tier="general", **kw)


def same(a, b) -> bool:
    return bool(np.allclose(np.asarray(a, dtype=float), np.asarray(b, dtype=float), rtol=1e-12, atol=1e-14))


def test_a_fresh_processs_first_gradient_runs_the_stored_program(env):
    prime(env)
    out = run(env, more=1)
    want = general(env)["results"][0]
    assert out["general_first"] is False  # the rules were not loaded: the stored program served the call
    assert same(out["results"][0], want) and same(out["results"][1], want)
    assert out["compiled_calls"] == 2 and out["general_calls"] == 0  # the second call loaded the programs


def test_value_and_grad_in_two_arguments(env):
    make, args = "bytegrad.value_and_grad(qmod.two, wrt=(0, 1))", "rng.standard_normal((3, 5)), rng.standard_normal((3, 5))"
    prime(env, make=make, args=args)
    out = run(env, make=make, args=args)
    want = general(env, make=make, args=args)["results"][0]
    assert out["general_first"] is False
    assert same(out["results"][0][0], want[0]) and all(same(a, b) for a, b in zip(out["results"][0][1], want[1]))


def test_an_empty_cache_runs_the_general_path(env):
    out = run(env)
    assert out["general_first"] is True and same(out["results"][0], general(env)["results"][0])


def test_a_changed_global_is_seen(env):
    prime(env)
    out = run(env, setup="qmod.SCALE = -0.25")
    assert out["general_first"] is True
    assert same(out["results"][0], general(env, setup="qmod.SCALE = -0.25")["results"][0])


def test_a_function_monkeypatched_in_place_is_another_object(env):
    """`np.tanh` replaced by a Python function: the program's reference (numpy.tanh) finds an object of
    another name, so the program does not run (it would use tanh's derivative for what the function computes)."""
    prime(env)
    patch = "np.tanh = lambda v: np.sin(v)"
    out = run(env, setup=patch, more=1)
    want = general(env, setup=patch)["results"][0]
    assert out["general_first"] is True
    # (the second call would load the stored program: its reference to numpy.tanh is refused the same way)
    assert same(out["results"][0], want) and same(out["results"][1], want)


def test_a_helper_whose_code_was_replaced_is_not_inlined_as_stored(env):
    make = "bytegrad.grad(qmod.with_helper)"
    prime(env, make=make)
    assert run(env, make=make)["general_first"] is False  # (a helper without defaults: its code is checked)
    swap = "qmod.helper.__code__ = (lambda v: np.sin(v)).__code__"
    out = run(env, make=make, setup=swap)
    assert out["general_first"] is True
    assert same(out["results"][0], general(env, make=make, setup=swap)["results"][0])


def test_rules_loaded_in_this_process_leave_the_call_to_the_general_path(env):
    """Once the process has loaded bytegrad's rules, something may be registered that the program ignores:
    whether before the gradient function is made or between that and its first call."""
    prime(env)
    out = run(env, setup="bytegrad.register_pytree  # (loads the rules and the general path)")
    assert out["general_calls"] == 1 and out["compiled_calls"] == 0
    out = run(env, between="from bytegrad.rules import registry  # (a plugin's import, say)")
    assert out["general_calls"] == 1 and out["compiled_calls"] == 0


def test_a_process_that_registered_its_own_rules_stores_no_standalone_form(env):
    setup = ("class Pair:\n    def __init__(self, a): self.a = a\n"
             "bytegrad.register_pytree(Pair, lambda p: ((p.a,), None), lambda aux, ch: Pair(*ch))\n")
    out = run(env, setup=setup, more=3)
    assert out["quick_entries"] == 0  # (its programs are stored, their first-call form is not)


def test_a_floating_point_flag_sends_the_call_to_the_general_path(env):
    """log(0): the general path reports the warning at the user's line; the stored program's call is dropped."""
    prime(env)
    args = "np.zeros((4, 3)), rng.standard_normal((3, 5))"
    out = run(env, args=args)
    assert out["general_first"] is True
    assert any("divide by zero" in m and f.endswith("qmod.py") for m, f in out["warnings"]), out["warnings"]


def test_an_error_numpy_ignores_leaves_the_call_to_the_stored_program(env):
    """Underflow (ignored by NumPy's default settings: the general path reports nothing) is not a reason to
    leave the stored program; under `np.seterr(under="warn")` it is."""
    make = "bytegrad.grad(qmod.tiny)"
    prime(env, make=make)
    assert run(env, make=make)["general_first"] is False
    warn = run(env, make=make, setup="np.seterr(under='warn')")
    assert warn["general_first"] is True and any("underflow" in m for m, _ in warn["warnings"]), warn["warnings"]


def test_a_program_stored_under_other_defaults_is_not_loaded(env):
    """A process that replaced the defaults stored programs that read `c=2.0`; a process with the
    module's `c=0.5` must not run them for calls that leave `c` out (the key holds the defaults)."""
    make, args = "bytegrad.grad(qmod.with_default)", "rng.standard_normal((4, 3)), rng.standard_normal((3, 5))"
    run(env, make=make, args=args, setup="qmod.with_default.__defaults__ = (2.0,)", more=3)
    assert (env / "cache" / "programs").is_dir()
    out = run(env, make=make, args=args, more=2)
    want = general(env, make=make, args=args)["results"][0]
    assert all(same(r, want) for r in out["results"])


def test_another_shape_runs_the_general_path(env):
    prime(env)
    args = "rng.standard_normal((2, 3)), rng.standard_normal((3, 5))"
    out = run(env, args=args)
    assert out["general_first"] is True and same(out["results"][0], general(env, args=args)["results"][0])


def test_a_pinned_tier_does_not_use_it(env):
    prime(env)
    out = run(env, tier="numpy")
    assert out["general_first"] is True


def test_differentiate_defers_too(env):
    """`@differentiate`'s `.grad`: the same first call, from a `DeferredDifferentiated`."""
    make, call = "bytegrad.differentiate(qmod.loss)", "g.grad(W, x)"
    prime(env, make=make, call=call)
    out = run(env, make=make, call=call, more=1)
    want = general(env)["results"][0]
    assert out["general_first"] is False and same(out["results"][0], want) and same(out["results"][1], want)
    assert out["compiled_calls"] == 2 and out["general_calls"] == 0


DEFERRED = '''
import pickle, sys
import numpy as np
sys.path.insert(0, {folder!r})
import bytegrad, qmod
a, b = np.linspace(0.1, 0.9, 6).reshape(2, 3), np.linspace(-1.0, 1.0, 6).reshape(2, 3)
d, other = bytegrad.differentiate(qmod.two, wrt=1), bytegrad.differentiate(qmod.two, wrt=1)
assert type(d).__name__ == type(other).__name__ == "DeferredDifferentiated", type(d)
assert "bytegrad.rules" not in sys.modules
assert d(a, b) == qmod.two(a, b) and d.__name__ == "two" and d.__wrapped__ is qmod.two, repr(d)
assert repr(d) == "<bytegrad.differentiate 'two' wrt=1>", repr(d)
assert type(qmod.decorated).__name__ == "DeferredDifferentiated"
assert pickle.loads(pickle.dumps(qmod.decorated)) is qmod.decorated  # by name: its module holds it
want = np.sin(a) + 2 * b
assert np.allclose(d.grad(a, b), want)
assert np.allclose(bytegrad.grad(d, wrt=1)(a, b), want)  # (a Differentiated of the deferred one's function)
again = pickle.loads(pickle.dumps(other))
assert np.allclose(again.grad(a, b), want) and again._wrt_spec == 1
assert bytegrad.precompile(other, a, b)["programs_stored"] >= 0 and other.differentiated._wrt_spec == 1
assert np.allclose(d.pullback(a, b)[1](1.0)[1], want) and d.stats()["hits"] + d.stats()["misses"] >= 1
assert np.allclose(qmod.Model().loss.grad(b), 4.0 * b)  # (a method: its Differentiated's `__get__`)
print("ok")
'''


def test_a_deferred_differentiate_answers_as_its_differentiated(env):
    """Made before the general path loads: calling it, its name, pickling (by name where its module holds it,
    else as a Differentiated), `grad` of it, `precompile` of it (its `wrt` kept), `pullback` and `stats`."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("BYTEGRAD_")}
    environ.update(BYTEGRAD_CACHE_DIR=str(env / "cache"),
                   PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    (env / "cache" / "quick").mkdir(parents=True, mode=0o700)  # (stored programs: `import bytegrad` defers)
    proc = subprocess.run([sys.executable, "-c", DEFERRED.format(folder=str(env))], cwd=env, env=environ,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr


def test_import_loads_the_general_path_where_no_program_is_stored(env):
    """With nothing on disk that a first call could run, `import bytegrad` loads the general path at once
    (every first gradient needs it); where stored programs are, it leaves it for a first call to need."""
    code = "import sys, bytegrad\nprint('bytegrad.rules' in sys.modules)\n"
    environ = {k: v for k, v in os.environ.items() if not k.startswith("BYTEGRAD_")}
    environ.update(BYTEGRAD_CACHE_DIR=str(env / "cache"),
                   PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    loads = [subprocess.run([sys.executable, "-c", code], env=environ, capture_output=True, text=True,
                            timeout=120).stdout.strip()]
    prime(env)
    loads.append(subprocess.run([sys.executable, "-c", code], env=environ, capture_output=True, text=True,
                                timeout=120).stdout.strip())
    assert loads == ["True", "False"]
