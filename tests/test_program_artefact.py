"""A compiled program is an immutable artefact (compiled/program.py `Program`); what the tier policy
counts of it (calls, time, its Numba twin's verdict, the signature it serves) lives in the
policy's record of it (compiled/policy.py `Run`), and `stats()`, `explain` and the store report
the same as before.
"""
from __future__ import annotations

import io

import numpy as np
import pytest

import bytegrad
from bytegrad.compiled import policy
from bytegrad.compiled import store as program_store


def _loss(W, x):
    return np.sum(np.tanh(W @ x) ** 2)


def _fresh():
    def loss(W, x):
        return np.sum(np.tanh(W @ x) ** 2)
    return loss


def _tiers(d):
    (tiers,) = policy._BY_FUNCTION[d._target].values()
    return tiers


def test_a_program_refuses_every_change_once_built():
    d = bytegrad.differentiate(_fresh(), tier="numpy")
    W, x = np.full((2, 3), 0.1), np.arange(3.0)
    d.grad(W, x)
    (prog,) = _tiers(d).programs
    for name, value in (("calls", 5), ("seconds", 1.0), ("twin", None), ("share", 0.5), ("source", ""),
                        ("fn", None), ("guards", ()), ("backend", "numba")):
        with pytest.raises(AttributeError, match="immutable"):
            setattr(prog, name, value)
    with pytest.raises(AttributeError, match="immutable"):
        del prog.source
    assert not hasattr(prog, "__dict__")  # (slots: no attribute can be added either)
    assert type(prog.guards) is tuple
    copy = prog.replace(twin=("bgp_abc",), share=0.25)
    assert copy is not prog and copy.twin == ("bgp_abc",) and copy.share == 0.25 and prog.twin is None
    assert (copy.fn, copy.source, copy.guards, copy.records, copy.backend, copy.parts, copy.ir) == \
        (prog.fn, prog.source, prog.guards, prog.records, prog.backend, prog.parts, prog.ir)
    with pytest.raises(AttributeError, match="immutable"):
        copy.share = 1.0


def test_the_policy_counts_in_its_record_of_each_program():
    d = bytegrad.differentiate(_fresh(), tier="numpy")
    W, x = np.full((2, 3), 0.1), np.arange(3.0)
    general = bytegrad.differentiate(_loss, tier="general")
    for _ in range(4):
        np.testing.assert_allclose(d.grad(W, x), general.grad(W, x), rtol=1e-12)
    tiers = _tiers(d)
    (run,) = tiers.runs
    assert run.program is tiers.programs[0] and tiers.run_of(run.program) is run
    assert type(tiers.programs) is tuple  # (a program joins through `runs`: an append here fails loudly)
    assert run.signature == (np.ndarray, np.ndarray)
    assert run.calls == 3 and run.decided == 0 and not run.upgraded  # (the first call was the capture)
    (entry,) = d.stats()["compiled"]["programs"]
    assert entry["calls"] == 3 and entry["decided_otherwise"] == 0 and entry["backend"] == "numpy"
    buf = io.StringIO()
    bytegrad.explain(d, W, x, file=buf)
    assert "program 0: numpy back end" in buf.getvalue()


def test_a_stored_program_loads_as_a_fresh_artefact_and_a_pullback_never_tiers_up():
    d = bytegrad.differentiate(_fresh(), tier="numpy")
    W, x = np.full((2, 3), 0.1), np.arange(3.0)
    d.grad(W, x)
    (prog,) = _tiers(d).programs
    (back,) = program_store.loads(program_store.dumps([prog]))
    assert (back.source, back.records, back.share, back.pullback, back.twin, back.backend) == \
        (prog.source, prog.records, prog.share, False, None, "numpy")
    assert [g.describe() for g in back.guards] == [g.describe() for g in prog.guards]
    with pytest.raises(AttributeError, match="immutable"):
        back.share = 0.5
    assert not policy.Run(back).upgraded and policy.Run(back.replace(pullback=True)).upgraded
    p = bytegrad.differentiate(_fresh(), tier="numpy")
    out, pb = p.pullback(W, x)
    pb(1.0)  # (the first back() checks the pullback program and adopts it)
    (run,) = p._pb_tiers.runs
    assert run.program.pullback and run.upgraded and run.signature == (np.ndarray, np.ndarray)
