"""Every ```python block of README.md and docs/*.md runs as written.

All the blocks run in one fresh interpreter (importing NumPy and bytegrad once keeps this fast),
each from a file of its own as `__main__` (`runpy.run_path`), so each has a fresh namespace and a
`multiprocessing` spawn pool can import it; a private BYTEGRAD_CACHE_DIR and a temporary working
directory. A block that is deliberately partial is preceded by `<!-- not run: why -->`: it is
reported as skipped with that reason, never dropped silently, and there may be few of them.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple, Optional

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
_BLOCK = re.compile(r"^```python\n(.*?)^```\s*$", re.S | re.M)
_NOT_RUN = re.compile(r"<!--\s*not run:\s*(.*?)\s*-->\s*\Z")
#: how many blocks may be marked `<!-- not run: ... -->`
MAX_NOT_RUN = 2


class Block(NamedTuple):
    page: str        # README.md, docs/usage.md...
    line: int        # of the ```python fence
    source: str
    not_run: Optional[str]

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def blocks() -> list[Block]:
    found = []
    for path in PAGES:
        text = path.read_text(encoding="utf-8")
        for m in _BLOCK.finditer(text):
            marker = _NOT_RUN.search(text[:m.start()])
            found.append(Block(str(path.relative_to(ROOT)), text.count("\n", 0, m.start()) + 1, m.group(1),
                               marker.group(1) if marker else None))
    return found


BLOCKS = blocks()

# Runs each block file given on the command line; prints one `@block` JSON line per block.
_DRIVER = """
import json, runpy, sys, traceback
for path in sys.argv[1:]:
    try:
        runpy.run_path(path, run_name="__main__")
        print("@block " + json.dumps([path, None]), flush=True)
    except BaseException:
        print("@block " + json.dumps([path, traceback.format_exc()]), flush=True)
"""


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict[str, Optional[str]]:
    """block id -> None when it ran, else its traceback."""
    work = tmp_path_factory.mktemp("doc-blocks")
    files = {}
    for i, b in enumerate(BLOCKS):
        if b.not_run is None:
            path = work / f"block{i:02d}_{re.sub(r'[^A-Za-z0-9]', '_', b.page)}_line{b.line}.py"
            path.write_text(b.source, encoding="utf-8")
            files[str(path)] = b.id
    env = dict(os.environ, BYTEGRAD_CACHE_DIR=str(work / "cache"),
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    proc = subprocess.run([sys.executable, "-c", _DRIVER, *files], cwd=work, env=env, capture_output=True,
                          text=True, timeout=600)
    results: dict[str, Optional[str]] = {}
    for line in proc.stdout.splitlines():
        if line.startswith("@block "):  # (a block's own output may be anything)
            path, error = json.loads(line[len("@block "):])
            results[files[path]] = error
    missing = [ident for ident in files.values() if ident not in results]
    assert not missing, f"the driver stopped before {missing} (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return results


def test_the_blocks_are_found_and_few_are_not_run():
    assert len(BLOCKS) >= 14
    assert {b.page for b in BLOCKS} >= {"README.md", "docs/plugins.md", "docs/index.md"}
    marked = [b for b in BLOCKS if b.not_run is not None]
    assert len(marked) <= MAX_NOT_RUN, f"too many blocks marked not run: {[b.id for b in marked]}"
    assert all(b.not_run for b in marked), "a `not run` marker must say why"


@pytest.mark.parametrize("block", BLOCKS, ids=[b.id for b in BLOCKS])
def test_the_block_runs_as_written(block, outcomes):
    if block.not_run is not None:
        pytest.skip(f"{block.id} is marked not run: {block.not_run}")
    error = outcomes[block.id]
    assert error is None, f"the python block at {block.id} fails:\n{block.source}\n{error}"


def test_the_marker_and_the_extraction():
    text = "intro\n<!-- not run: needs a GPU -->\n```python\nx = 1\n```\n\n```python\ny = 2\n```\n"
    found = [(m.group(1), _NOT_RUN.search(text[:m.start()])) for m in _BLOCK.finditer(text)]
    assert [src for src, _ in found] == ["x = 1\n", "y = 2\n"]
    assert found[0][1].group(1) == "needs a GPU" and found[1][1] is None


def test_install_commands_work_from_a_clone():
    """bytegrad is not on PyPI: the docs install extras from the clone (`pip install -e '.[dask]'`)."""
    for path in (*PAGES, ROOT / "examples" / "train_mlp_digits_dask.py"):
        text = path.read_text(encoding="utf-8")
        assert not re.search(r"pip install ['\"]?bytegrad\[", text), f"{path.relative_to(ROOT)}: pip install 'bytegrad[...]'"
