"""Golden listings of the code after each pass of the transform (CONTRIBUTING.md, rule 9).

Each function of tests/transform/golden_functions.py is run through `transform.pipeline` and its
listing after each pass compared with tests/transform/golden/py3XX/<function>.txt (bytecode differs
between CPython versions). After an intended change of the rewritten code, regenerate them with
`BYTEGRAD_REGEN_GOLDEN=1 python -m pytest tests/transform/test_passes.py` on each of 3.11, 3.12
and 3.13, and read the diff.
"""
import io
import os
import sys
from contextlib import redirect_stderr
from pathlib import Path

import pytest

import bytegrad
from bytegrad.transform import pipeline
from tests.transform import golden_functions as G

GOLDEN_DIR = Path(__file__).parent / "golden" / f"py{sys.version_info[0]}{sys.version_info[1]}"
REGEN = os.environ.get("BYTEGRAD_REGEN_GOLDEN", "") not in ("", "0")


def _text(fn):
    parts = pipeline.listings(fn, G.ACTIVE.get(fn.__name__), fuse=True)
    assert tuple(parts) == pipeline.PASS_NAMES
    return "".join(f"==== after {name}\n{text}" for name, text in parts.items())


@pytest.mark.parametrize("fn", G.FUNCTIONS, ids=lambda f: f.__name__)
def test_listing_after_each_pass(fn):
    got = _text(fn)
    path = GOLDEN_DIR / f"{fn.__name__}.txt"
    if REGEN:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(got)
    assert path.exists(), f"no golden {path}: run with BYTEGRAD_REGEN_GOLDEN=1"
    assert got == path.read_text(), f"the listing of {fn.__name__} changed: see the module docstring"


def test_dump_after_switch(monkeypatch):
    monkeypatch.setattr(bytegrad.config, "dump_after", "activity,rewrite")  # (BYTEGRAD_DUMP_AFTER)
    err = io.StringIO()
    with redirect_stderr(err):
        pipeline.listings(G.arithmetic, ("x",))
    text = err.getvalue()
    assert "after activity" in text and "after rewrite" in text and "after fusion" not in text
