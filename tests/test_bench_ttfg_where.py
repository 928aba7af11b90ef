"""bench/ttfg_where.py: `-X importtime` lines are charged to the phase marked before them and summed
by group, and one real round renders every table of the section (its children reach the
disk cache's internals by name, so a rename there shows here)."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import ttfg_where  # noqa: E402
from bench.ttfg_report import where_section  # noqa: E402

STDERR = """\
import time: self [us] | cumulative | imported package
#phase bytegrad
import time:       100 |        100 |     bytegrad.rules.numpy.ufuncs
import time:       250 |        250 |   bytegrad.rules.registry
import time:        50 |        400 | bytegrad
#phase first
#phase rewrite
import time:      3000 |       3000 |   bytecode.instr
import time:       500 |       3500 | bytegrad.transform.rewrite
import time:        20 |         20 | zlib
#phase first
import time:       300 |        300 | bytegrad.runtime.fused
"""


def test_importtime_lines_are_charged_to_their_phase_and_group() -> None:
    out = {phase: {g: round(s * 1e6) for g, s in groups.items()}
           for phase, groups in ttfg_where.parse_importtime(STDERR).items()}  # (microseconds)
    assert out["bytegrad"] == {"bytegrad rules modules": 100, "bytegrad rules (registry, types)": 250,
                               "bytegrad (api, errors, config, ...)": 50}
    assert out["rewrite"] == {"the `bytecode` package": 3000, "bytegrad.transform": 500,
                              "standard library and others": 20}
    assert out["first"] == {"bytegrad.runtime": 300}


def test_one_round_renders_the_section(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BYTEGRAD_TIER", raising=False)  # (the children time the default tier, as users run it)
    out = tmp_path / "where.json"
    assert ttfg_where.main(["--runs", "1", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    confs = data["configurations"]
    assert set(confs) == set(ttfg_where.CONFIGS)
    warm, empty = confs["bytegrad, warm cache"], confs["bytegrad, empty cache"]
    assert warm["disk"]["disk_hits"] >= 1 and warm["disk"]["rewrites"] == 0
    assert empty["disk"]["rewrites"] >= 1 and "bytegrad.transform" in empty["imports"]["rewrite"]
    assert "the `bytecode` package" not in empty["imports"]["rewrite"]  # (bytegrad's own disassembler)
    assert "bytegrad.rules.numpy.cumulative" not in json.dumps(data)  # (groups, not module names)
    assert set(data["rewrite_parts"]) >= {"assembly (to_code)", "pass: activity", "disassembly (Bytecode.from_code)"}
    text = "\n".join(where_section(data))
    assert text.count("| configuration |") == 2 and "| step | time |" in text
    data["other_configurations"] = {k: v for k, v in confs.items() if "bytegrad" in k}
    assert "Before (" in "\n".join(where_section(data))
