"""bench/plots.py: the plots go where --out says (a new folder is made), never into the committed
bench/results/ unless asked, and the compiled tier's plot reads compiled.json's ratios."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import plots  # noqa: E402


def _result(case: str, system: str, ratio: float, direction: str = "reverse", **extra: Any) -> dict[str, Any]:
    return {"case": case, "case_name": case, "direction": direction, "system": system, "ratio_to_numpy": ratio,
            **extra}


def _compiled() -> dict[str, Any]:
    results = []
    for case, jax in (("Dense(2)", 2.3), ("loop", 0.11)):
        results += [_result(case, "numpy (hand-written)", 1.0), _result(case, "bytegrad", 0.45),
                    _result(case, "bytegrad (general)", 9.1), _result(case, "bytegrad (numpy program)", 1.1),
                    _result(case, "bytegrad (numba program)", 0.44),
                    _result(case, "jax-jit", jax, alone_differs=case == "loop"), _result(case, "torch", 12.0)]
    return {"settings": {"date": "2026-12-05", "alone": "small"}, "results": results}


def _synthetic(folder: Path) -> dict[str, Path]:
    core = {"settings": {"command": "python -m bench.core --full", "date": "2026-12-05"},
            "results": [_result("Dense(2)", s, r, d) for d in ("reverse", "forward")
                        for s, r in (("numpy (hand-written)", 1.0), ("bytegrad", 0.5), ("jax-jit", 2.0))]}
    config = {"name": "numpy (hand-written)", "system": "numpy (hand-written)", "import_numpy_s": 0.1,
              "import_library_s": 0.0, "setup_s": 0.001, "first_s": 0.01, "wall_s": 0.34}
    ttfg = {"settings": {"date": "2026-12-05"}, "configurations": [config],
            "train": [{"name": "numpy (hand-written)", "import_s": 0.12, "steps_s": 0.85, "wall_s": 1.19,
                       "steps": 200}]}
    paths = {}
    for name, data in (("core", core), ("ttfg", ttfg), ("compiled", _compiled())):
        paths[name] = folder / f"{name}.json"
        paths[name].write_text(json.dumps(data), encoding="utf-8")
    return paths


def test_compiled_ratios_reads_each_tier_and_jax_jit() -> None:
    cases, ratios = plots.compiled_ratios(_compiled())
    assert cases == ["Dense(2)", "loop"]
    assert set(ratios) == {"bytegrad", "bytegrad (general)", "bytegrad (numpy program)",
                           "bytegrad (numba program)", "jax-jit"}   # not torch, not the reference
    assert ratios["jax-jit"] == {"Dense(2)": (2.3, False), "loop": (0.11, True)}
    assert plots.format_ratio(13.7) == "13.7x" and plots.format_ratio(0.614) == "0.61x"


def test_plots_go_into_a_new_out_folder_and_not_into_results(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    paths = _synthetic(tmp_path)
    committed = {p: p.stat().st_mtime_ns for p in plots.RESULTS.glob("*.png")}
    out = tmp_path / "new" / "plots"
    code = plots.main(["--core", str(paths["core"]), "--ttfg", str(paths["ttfg"]),
                       "--compiled", str(paths["compiled"]), "--out", str(out)])
    assert code == 0
    for name in ("ratios.png", "ttfg.png", "compiled.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert {p: p.stat().st_mtime_ns for p in plots.RESULTS.glob("*.png")} == committed


def test_missing_results_write_nothing(tmp_path: Path) -> None:
    missing = str(tmp_path / "none.json")
    out = tmp_path / "out"
    assert plots.main(["--core", missing, "--ttfg", missing, "--compiled", missing, "--out", str(out)]) == 1
    assert list(out.iterdir()) == []
