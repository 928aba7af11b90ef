"""docs/solvers.md's examples run as written (each block in a fresh namespace, as a reader would paste
it), and their checks against finite differences hold."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest.importorskip("scipy")

PAGE = Path(__file__).resolve().parent.parent / "docs" / "solvers.md"
BLOCKS = re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.S)


def test_the_page_has_its_examples():
    text = PAGE.read_text()
    for title in ("chemical network", "maximum likelihood", "gradient descent", "An integral"):
        assert title in text
    assert len(BLOCKS) >= 5


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_example_runs(index, capsys):
    exec(compile(BLOCKS[index], f"{PAGE}:block{index}", "exec"), {"__name__": f"solvers_doc_{index}"})  # noqa: S102
    assert capsys.readouterr().out.strip() or index == len(BLOCKS) - 1
