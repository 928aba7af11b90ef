"""The one cost model (bytegrad/runtime/costs.py) that the fused sites and the compiled tier's
Numba twins price, learn and decide by. Fed figures, never timed: each test gives the model
seconds and checks what it prices or decides."""
from __future__ import annotations

import types

import numpy as np
import pytest

from bytegrad.compiled import policy
from bytegrad.runtime import costs, fused, kernels

FIGS = {"import": 1.0, "compile": 0.5, "load": 0.1, "fixed": 0.2, "per_op": 0.01}


def model(**figs: float) -> costs.CostModel:
    return costs.CostModel({**FIGS, **figs})


def test_a_kernel_price_is_the_import_then_each_function_compiled_or_loaded():
    m = model()
    assert m.kernel_price(3, on_disk=False, numba_loaded=False) == pytest.approx(1.0 + 3 * 0.5)
    assert m.kernel_price(3, on_disk=True, numba_loaded=False) == pytest.approx(1.0 + 3 * 0.1)
    assert m.kernel_price(2, on_disk=False, numba_loaded=True) == pytest.approx(2 * 0.5)  # imported: not paid again


def test_a_program_price_is_the_import_then_the_cheaper_of_compiling_and_loading():
    m = model()
    assert m.build_price(100) == pytest.approx(0.2 + 100 * 0.01)
    assert m.program_price(100, None, numba_loaded=False) == pytest.approx(1.0 + 1.2)  # nothing on disk: a compile
    assert m.program_price(100, m.load_price(2), numba_loaded=False) == pytest.approx(1.0 + 0.2)  # a load is cheaper
    assert m.program_price(1, m.load_price(4), numba_loaded=True) == pytest.approx(0.2 + 0.01)  # a compile is cheaper


def test_both_tiers_price_the_import_from_the_same_figure():
    """What importing Numba costs is one figure: a fused site and a program twin pay the same."""
    m = model(**{"import": 3.0})
    assert m.kernel_price(0, False, False) == m.program_price(0, 0.0, False) == 3.0
    m.learn_import(0.25)  # measured by whichever tier imported Numba
    assert m.kernel_price(0, False, False) == m.program_price(0, 0.0, False) == 0.25


def test_ski_rental_pays_once_the_rent_reaches_the_price():
    m = model()
    price = m.kernel_price(2, False, False)
    assert not m.pays(price - 1e-9, price)
    assert m.pays(price, price)
    assert not m.pays(1e9, float("inf"))  # Numba disabled: never


def test_a_twin_must_be_5_percent_faster_where_a_kernel_wins_a_tie():
    m = model()
    assert m.faster(1.0, 0.94) and not m.faster(1.0, 0.96) and not m.faster(1.0, 1.0)
    assert m.kernel_wins(1.0, 1.0) and m.kernel_wins(1.0, 1.04) and not m.kernel_wins(1.0, 1.06)


def test_a_program_compile_moves_the_per_operation_figure_halfway_within_bounds():
    m = model(per_op=0.004)
    m.learn_program(0.2 + 100 * 0.002, 100, imported=False)  # measured 2 ms per operation
    assert m.seconds["per_op"] == pytest.approx(0.003)
    m = model(per_op=0.004)
    m.learn_program(1.0 + 0.2 + 100 * 0.002, 100, imported=True)  # the import's figure is taken off first
    assert m.seconds["per_op"] == pytest.approx(0.003)
    m = model(per_op=0.004)
    m.learn_program(7.8, 5, imported=False)  # Numba's own start in a first compile: capped at PER_OP_MAX
    assert m.seconds["per_op"] == pytest.approx(0.5 * 0.004 + 0.5 * costs.PER_OP_MAX)
    m = model(per_op=0.0006)
    m.learn_program(0.0, 100, imported=False)  # a compile quicker than the fixed part: the floor holds
    assert m.seconds["per_op"] == costs.PER_OP_MIN


def test_a_twin_can_save_what_is_not_blas():
    """The meter's share: a program of elementwise steps only is all savable; one whose time is
    in large contractions hardly any (a twin runs the same BLAS); a step's Python always counts."""
    m = model()
    assert m.savable_share([]) == 1.0
    assert m.savable_share([(False, 1000.0)] * 5) == 1.0
    mlp = [(True, 128.0 * 784 * 256), (False, 128.0 * 256), (True, 128.0 * 256 * 10)]
    small = [(True, 2.0 * 2 * 128), (False, 2.0 * 128)]
    assert m.savable_share(mlp) < 0.5 < m.savable_share(small) < 1.0
    rest = 3 * 100 * costs.PER_ELEMENT_S + 2 * costs.PER_RECORD_S
    blas = 3 * 1e6 * costs.PER_MAC_S
    assert m.savable_share([(False, 100.0), (True, 1e6)]) == pytest.approx(rest / (rest + blas))


def test_kernel_measurements_replace_their_figure():
    m = model()
    m.learn_kernels(0.3, loaded=False)
    m.learn_kernels(0.05, loaded=True)
    assert (m.seconds["compile"], m.seconds["load"]) == (0.3, 0.05)
    assert m.kernel_price(1, True, True) == 0.05


def test_only_the_machine_figures_are_kept_for_the_next_process(monkeypatch, tmp_path):
    """`import`, `compile` and `load` go to the disk cache; a program's per-operation figure is
    learned anew in each process; a kept figure out of range is ignored."""
    import bytegrad
    from bytegrad import diskcache

    monkeypatch.setattr(bytegrad.config, "cache_dir", str(tmp_path))
    diskcache._reset_for_tests()
    try:
        first = costs.CostModel(persist=True)
        first.learn_program(5.0, 10, imported=False)
        first.remember({"import": 2.0, "compile": 0.75})
        later = costs.CostModel(persist=True)  # a new process
        assert later.kernel_price(1, False, False) == pytest.approx(2.75)
        assert later.seconds["per_op"] == costs.DEFAULTS["per_op"]
        costs.CostModel(persist=True).remember({"import": 100.0})  # not a plausible figure
        assert costs.CostModel(persist=True).kernel_price(0, False, False) == costs.DEFAULTS["import"]
    finally:
        diskcache._reset_for_tests()


def test_a_model_of_a_test_touches_no_disk(monkeypatch):
    monkeypatch.setattr("bytegrad.diskcache.load", lambda *a: pytest.fail("read the disk cache"))
    monkeypatch.setattr("bytegrad.diskcache.store", lambda *a, **k: pytest.fail("wrote the disk cache"))
    m = model()
    m.remember({"import": 0.5})
    assert m.kernel_price(0, False, False) == 0.5


def test_the_tiers_price_with_the_process_model(monkeypatch):
    """The fused sites (kernels.cost_estimate) and the compiled tier (policy.numba_price) both ask
    the one model: figures fed to it are what each prices by."""
    m = model(**{"import": 4.0, "compile": 1.0, "fixed": 2.0, "per_op": 0.5})
    monkeypatch.setattr(kernels, "_COSTS", m)
    monkeypatch.setattr(policy, "COSTS", m)
    monkeypatch.setattr(kernels, "numba_loaded", lambda: False)
    monkeypatch.setattr(kernels, "disabled", lambda: False)
    monkeypatch.setattr(kernels, "on_disk", lambda p: False)
    plan = types.SimpleNamespace(n_functions=3)
    assert kernels.cost_estimate(plan) == pytest.approx(4.0 + 3 * 1.0)
    prog = types.SimpleNamespace(records=10, twin=None, rolled=None)
    assert policy.numba_price(prog) == pytest.approx(4.0 + 2.0 + 10 * 0.5)
    assert fused.TIE == costs.KERNEL_TIE


def test_an_array_kernels_statements_are_priced_as_an_outlined_compile():
    """A twin that is an array kernel compiles each array statement as a loop of its own (compiled/
    numba_price.py: about 11 ms each, ten times a record's 2.5 ms): its price counts them."""
    m = model(fixed=0.2, per_op=0.0025, per_statement=0.011)
    assert m.build_price(282) == pytest.approx(0.2 + 282 * 0.0025)  # an element loop's twin
    assert m.build_price(282, 592) == pytest.approx(0.2 + 282 * 0.0025 + 592 * 0.011)  # RK4, 8 steps: ~7 s
    assert m.program_price(282, None, numba_loaded=True, statements=592) == pytest.approx(m.build_price(282, 592))
    assert costs.DEFAULTS["per_statement"] >= 4 * costs.DEFAULTS["per_op"]  # (the default follows the measurement)
    m.learn_program(0.2 + 282 * 0.002 + 592 * 0.011, 282, imported=False, statements=592)  # their share is taken off
    assert m.seconds["per_op"] == pytest.approx(0.5 * 0.0025 + 0.5 * 0.002)


def test_the_tier_prices_a_programs_twin_by_its_statements(monkeypatch):
    m = model(**{"import": 4.0, "fixed": 2.0, "per_op": 0.5, "per_statement": 0.25})
    monkeypatch.setattr(policy, "COSTS", m)
    monkeypatch.setattr(kernels, "numba_loaded", lambda: True)
    monkeypatch.setattr(kernels, "disabled", lambda: False)
    prog = types.SimpleNamespace(records=10, twin=None, rolled=None, statements=12)
    assert policy.numba_price(prog) == pytest.approx(2.0 + 10 * 0.5 + 12 * 0.25)


def test_the_statements_of_a_twin_are_estimated_from_its_records():
    from bytegrad.compiled.numba_price import twin_statements

    def rec(kind, fn, out, *args):
        return types.SimpleNamespace(kind=kind, fn=fn, out=out, args=args)
    x = np.ones(8)
    chain = [rec("elementwise", np.sin, x, x), rec("elementwise", np.multiply, x, x, x), rec("reduce", np.sum, 1.0, x)]
    assert twin_statements(chain) == 0  # an element loop
    matvec = [rec("form", np.matmul, x, np.ones((8, 8)), x), *chain]
    assert twin_statements(matvec) == 2 * 3  # forward and reverse of each array step
    assert twin_statements([]) == 0
