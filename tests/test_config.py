"""`bytegrad.config` (bytegrad/_config.py): every BYTEGRAD_* switch declared once, checked when read
from the environment and when set, settable at run time and for a block, and the only reader of the
environment in the package."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import bytegrad
from bytegrad import _config
from bytegrad._config import SWITCHES, Config

ROOT = Path(__file__).resolve().parent.parent


def test_every_switch_reads_its_default_from_an_empty_environment():
    c = Config({})
    for s in SWITCHES:
        assert getattr(c, s.name) == s.default, s.name
        assert c.source(s.name) == "default"
    assert Config({"BYTEGRAD_TIER": "  "}).tier == "auto"  # set but empty: the default


@pytest.mark.parametrize("env, name, expected", [
    ({"BYTEGRAD_TIER": "Numba"}, "tier", "numba"),
    ({"BYTEGRAD_TIER": "GENERAL"}, "tier", "general"),
    ({"BYTEGRAD_CHECK": "1"}, "check", True),
    ({"BYTEGRAD_CHECK": "off"}, "check", False),
    ({"BYTEGRAD_DISABLE_NUMBA": "True"}, "disable_numba", True),
    ({"BYTEGRAD_DEBUG_NANS": "0"}, "debug_nans", False),
    ({"BYTEGRAD_FUSION": "Always"}, "fusion", "always"),
    ({"BYTEGRAD_COMPILE": "background"}, "compile", "background"),
    ({"BYTEGRAD_CACHE_MAX_MB": "0.5"}, "cache_max_mb", 0.5),
    ({"BYTEGRAD_CACHE_DIR": "/tmp/x"}, "cache_dir", "/tmp/x"),
    ({"BYTEGRAD_DUMP_AFTER": "Activity,rewrite"}, "dump_after", frozenset({"activity", "rewrite"})),
    ({"BYTEGRAD_DUMP_AFTER": "all"}, "dump_after", frozenset({"activity", "fusion", "rewrite"})),
    ({"BYTEGRAD_DUMP": "loss, <lambda>"}, "dump", "loss,<lambda>"),
])
def test_environment_values_are_parsed(env, name, expected):
    c = Config(env)
    assert getattr(c, name) == expected
    assert c.source(name) == f"environment ({next(iter(env))})"


@pytest.mark.parametrize("var, value, allowed", [
    ("BYTEGRAD_TIER", "jit", "general, numpy, numba, auto"),
    ("BYTEGRAD_CHECK", "2", "1/0, true/false"),
    ("BYTEGRAD_FUSION", "sometimes", "auto, always, never"),
    ("BYTEGRAD_COMPILE", "async", "sync, background"),
    ("BYTEGRAD_CACHE_MAX_MB", "lots", "a positive number"),
    ("BYTEGRAD_CACHE_MAX_MB", "-1", "a positive number"),
    ("BYTEGRAD_DUMP_AFTER", "activity,lowering", "activity, fusion, rewrite"),
])
def test_a_bad_environment_value_names_the_variable_the_value_and_what_is_allowed(var, value, allowed):
    with pytest.raises(ValueError) as info:
        Config({var: value})
    message = str(info.value)
    assert f"{var}={value!r}" in message and allowed in message


def test_a_bad_environment_value_fails_at_import():
    """`BYTEGRAD_TIER=jit` used to import fine and fail inside the first gradient."""
    env = dict(os.environ, BYTEGRAD_TIER="jit", PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-c", "import bytegrad"], env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("ValueError: BYTEGRAD_TIER='jit' is not valid") and "numba" in last, proc.stderr


def test_setting_a_switch_checks_it_and_keeps_the_old_value_on_error():
    c = Config({})
    c.tier = "NumPy"
    assert c.tier == "numpy" and c.source("tier") == "set in Python"
    with pytest.raises(ValueError, match=r"bytegrad.config.tier='jit' is not valid: tier takes one of"):
        c.tier = "jit"
    assert c.tier == "numpy"
    for name, bad in (("check", 2), ("check", "maybe"), ("cache_max_mb", True), ("cache_max_mb", 0),
                      ("cache_dir", 3), ("dump_after", "everything"), ("dump", 1)):
        with pytest.raises(ValueError):
            setattr(c, name, bad)
    c.cache_dir = Path("/tmp/somewhere")
    assert c.cache_dir == "/tmp/somewhere"
    with pytest.raises(AttributeError, match="no switch 'teir'.*tier"):
        c.teir = "numpy"


def test_override_sets_for_the_block_and_restores_even_on_error():
    c = bytegrad.config
    before = c.as_dict()
    with c.override(tier="general", fusion="never") as inside:
        assert inside is c and c.tier == "general" and c.fusion == "never"
        with c.override(tier="numpy"):
            assert c.tier == "numpy"
        assert c.tier == "general"
    assert c.as_dict() == before
    with pytest.raises(KeyError):
        with c.override(check=not c.check):
            raise KeyError("in the block")
    assert c.as_dict() == before
    with pytest.raises(ValueError):
        c.override(tier="general", fusion="sometimes")  # checked before anything is set
    with pytest.raises(TypeError, match="not a switch"):
        c.override(teir="general")
    assert c.as_dict() == before


def test_module_constants_follow_the_switch():
    from bytegrad import transform
    from bytegrad.compiled import policy as compiled
    from bytegrad.runtime import fused, monitor

    c = bytegrad.config
    with c.override(tier="general", check=not c.check, fusion="never", compile="background", dump="nothing_here"):
        assert compiled.default_tier() == "general" and monitor.CHECK is c.check
        assert fused.POLICY == "never" and fused.COMPILE == "background" and transform._DUMP == "nothing_here"
    assert compiled.default_tier() == c.tier and monitor.CHECK is c.check
    assert fused.POLICY == c.fusion and fused.COMPILE == c.compile and transform._DUMP == c.dump


def _loss(x):
    return np.sum(np.tanh(x * 2.0 + 1.0))


def test_the_tier_set_at_run_time_is_the_default_of_functions_made_after():
    x = np.linspace(-1.0, 1.0, 5)
    with bytegrad.config.override(tier="numpy"):
        d = bytegrad.differentiate(lambda x: _loss(x))
    d.grad(x)
    compiled = d.stats()["compiled"]
    assert compiled["tier"] == "numpy" and compiled["compiled_calls"] == 1  # compiled on the first call
    with bytegrad.config.override(tier="general"):
        d = bytegrad.differentiate(lambda x: _loss(x))
    d.grad(x)
    assert "compiled" not in d.stats()


def test_disable_fusion_at_run_time_reaches_functions_already_rewritten():
    x = np.linspace(-1.0, 1.0, 5)
    with bytegrad.config.override(tier="general", disable_fusion=False):
        d = bytegrad.differentiate(lambda x: np.sum(np.tanh(x * 2.0 + 1.0)))
        expected = d.grad(x)
        calls = d.stats()["fused_sites"][0]["numpy_calls"]
        assert calls == 1
        with bytegrad.config.override(disable_fusion=True):
            np.testing.assert_allclose(d.grad(x), expected, rtol=1e-15)
            assert d.stats()["fused_sites"][0]["numpy_calls"] == calls  # rewritten again, without the site
        d.grad(x)


def test_disk_cache_switches_are_read_when_used(tmp_path):
    from bytegrad import diskcache

    with bytegrad.config.override(cache_dir=tmp_path / "c", disable_disk_cache=False):
        assert diskcache.cache_dir() == str((tmp_path / "c").resolve())
        with bytegrad.config.override(disable_disk_cache=True):
            assert diskcache.cache_dir() is None
        with bytegrad.config.override(cache_max_mb=0.5):
            assert diskcache.max_bytes() == 1 << 19
    assert diskcache.DEFAULT_MAX_MB == _config.switch("cache_max_mb").default


def test_the_type_checker_declarations_are_the_switches():
    """Config declares each slot's type for mypy: one annotation per switch, none stale."""
    kinds = {"bool": "bool", "choice": "str", "names": "str", "size": "float", "path": "Optional[str]",
             "passes": "frozenset[str]"}
    declared = {k: v for k, v in Config.__annotations__.items() if not k.startswith("_")}
    assert declared == {s.name: kinds[s.kind] for s in SWITCHES}


def test_the_pass_names_are_the_pipelines():
    from bytegrad.transform import pipeline

    assert _config.PASS_NAMES == pipeline.PASS_NAMES


def test_no_module_but_config_reads_a_bytegrad_variable():
    """Every BYTEGRAD_* variable the package names is a declared switch, and only bytegrad/_config.py
    reads the environment for one."""
    declared = {s.env for s in SWITCHES}
    for path in sorted((ROOT / "bytegrad").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        rel = path.relative_to(ROOT)
        named = set(re.findall(r"BYTEGRAD_[A-Z_]+[A-Z]", text))
        assert named <= declared, f"{rel} names {sorted(named - declared)}, which bytegrad.config does not declare"
        if path.name != "_config.py":
            reads = re.findall(r"(?:environ(?:\.get)?\s*[\[(]|getenv\s*\()\s*[\"']BYTEGRAD_", text)
            assert not reads, f"{rel} reads a BYTEGRAD_ variable itself: use bytegrad.config"


def test_cli_prints_the_switches():
    env = dict(os.environ, PYTHONPATH=str(ROOT), BYTEGRAD_FUSION="never")
    proc = subprocess.run([sys.executable, "-m", "bytegrad", "config"], env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "fusion = 'never'  (environment (BYTEGRAD_FUSION))" in proc.stdout
    assert len(proc.stdout.splitlines()) == len(SWITCHES)


def _generated_table(text: str) -> str:
    begin = text.index("<!-- generated by `python -m bytegrad config --markdown`")
    begin = text.index("\n", begin) + 1
    return text[begin:text.index("<!-- end of generated table -->", begin)]


def test_the_usage_docs_table_is_the_declarations():
    """docs/usage.md's table of switches is `bytegrad config --markdown`: regenerate it (the lines
    between the two markers) when a switch is added or its declaration changes."""
    committed = _generated_table((ROOT / "docs" / "usage.md").read_text())
    assert committed == _config.markdown_table(), \
        "docs/usage.md's switch table is stale: paste `python -m bytegrad config --markdown` between its markers"
    for s in SWITCHES:
        assert f"| `{s.env}` | `{s.name}` |" in committed


def test_every_list_of_tiers_in_the_docs_names_them_all():
    from bytegrad.compiled.policy import TIERS

    texts = {p.name: p.read_text() for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]}
    texts["_front.py"] = (ROOT / "bytegrad" / "_front.py").read_text()  # (`differentiate`'s docstring)
    found = 0
    for name, text in texts.items():
        for listed in re.findall(r"BYTEGRAD_TIER=((?:[a-z]+\|)+[a-z]+)", text):
            found += 1
            assert listed.split("|") == list(TIERS), f"{name}: BYTEGRAD_TIER={listed}"
        for listed in re.findall(r"((?:\"[a-z]+\", )+(?:or )?\"[a-z]+\")", text):
            words = re.findall(r"\"([a-z]+)\"", listed)
            if "general" in words and "numpy" in words:
                found += 1
                assert words == list(TIERS), f"{name}: {listed}"
    assert found >= 4


def test_the_docstring_examples_run():
    import doctest

    before = bytegrad.config.as_dict()
    result = doctest.testmod(_config, optionflags=doctest.ELLIPSIS)
    assert result.attempted >= 4 and result.failed == 0
    assert bytegrad.config.as_dict() == before
