"""bench/alone.py and its report in bench/core.py: a side-by-side median that differs by more than
20% from the same system timed alone in a fresh process is flagged (pure functions, no timing)."""
from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import alone, core, harness  # noqa: E402
from bench.cases import CASES  # noqa: E402

DENSE2 = next(c for c in CASES if c.key == "dense2")


@pytest.mark.parametrize(("together", "by_itself", "flagged"), [
    (100e-6, 100e-6, False),
    (119e-6, 100e-6, False),   # 19% slower side by side
    (121e-6, 100e-6, True),    # 21% slower side by side
    (100e-6, 119e-6, False),   # 19% faster side by side
    (100e-6, 121e-6, True),    # 21% faster side by side: flagged too (symmetric)
    (140e-6, 56e-6, True),     # the jax-jit Dense(2) row of issue 26
])
def test_differs_flags_more_than_20_percent_either_way(together: float, by_itself: float, flagged: bool) -> None:
    assert alone.differs(together, by_itself) is flagged


def test_differs_tolerance_and_bad_input() -> None:
    assert alone.differs(1.3, 1.0, tolerance=0.25) and not alone.differs(1.2, 1.0, tolerance=0.25)
    with pytest.raises(ValueError):
        alone.differs(0.0, 1.0)


def test_is_small() -> None:
    assert alone.is_small(10e-6) and not alone.is_small(3e-3) and not alone.is_small(None)


def _row(system: str, median: float, ratio: float, alone_s: float | None, alone_ratio: float | None) -> core.Row:
    return core.Row(DENSE2, "reverse", system, "ok", timing=harness.Timing(100, [median] * 3), ratio=ratio,
                    alone_s=alone_s, alone_ratio=alone_ratio)


def _rows() -> list[core.Row]:
    return [_row("numpy (hand-written)", 10e-6, 1.0, None, None),
            _row("jax-jit", 140e-6, 14.0, 56e-6, 5.5),        # 2.5x slower side by side: flagged
            _row("torch", 120e-6, 12.0, 60e-6, 11.0),         # ratios 9% apart: not flagged, though the
            ]                                                 # machine ran twice as fast meanwhile


def test_report_marks_flagged_rows_and_explains_them() -> None:
    rows = _rows()
    assert [r.flagged for r in rows] == [False, True, False]
    glance = core.glance_table(rows, "reverse")
    assert f"| 14x {alone.MARK} |" in glance
    assert f"12x {alone.MARK}" not in glance and "| 12x |" in glance
    flagged = core.flagged_rows(rows, "reverse")
    assert flagged == [(DENSE2.name, "jax-jit", 14.0, 5.5)]
    note = "\n".join(alone.footnote(flagged))
    assert "jax-jit: 14x side by side, 5.50x alone" in note and "torch" not in note
    results = core.results_table(rows, "reverse", with_previous=False)
    assert "alone (fresh process)" in results and f"56 µs (5.50x) {alone.MARK}" in results
    assert "60 µs (11x) |" in results
    assert alone.footnote([]) == []


def test_alone_figures_survive_the_json_round_trip() -> None:
    data = core.to_json(_rows(), {})
    assert [r["alone_differs"] for r in data["results"]] == [None, True, False]
    back = core.rows_from_json(data)
    assert [(r.alone_s, r.alone_ratio) for r in back] == [(None, None), (56e-6, 5.5), (60e-6, 11.0)]
    assert [r.flagged for r in back] == [False, True, False]
