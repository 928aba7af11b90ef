"""The command line as a new user meets it: the `bytegrad` console script and `python -m bytegrad`."""
from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _env(cache: Path) -> dict[str, str]:
    return dict(os.environ, BYTEGRAD_CACHE_DIR=str(cache), PYTHONPATH=str(ROOT))


# ---- the console script ---------------------------------------------------------------------------


def test_pyproject_declares_the_console_script_for_main(capsys):
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"bytegrad": "bytegrad.__main__:main"}
    import bytegrad
    from bytegrad.__main__ import main

    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.split()[-1] == bytegrad.__version__


def _console_script() -> Path:
    """The `bytegrad` script pip installed beside this interpreter (the venvs of `make test` have it)."""
    script = Path(sys.executable).parent / ("bytegrad.exe" if os.name == "nt" else "bytegrad")
    if not script.exists():
        pytest.skip(f"no console script at {script}: bytegrad was installed here before it had one "
                    "(`pip install -e .` installs it; `make test` reinstalls when pyproject.toml changes)")
    return script


def test_the_console_script_runs_the_same_commands_as_python_m(tmp_path):
    script = _console_script()
    proc = subprocess.run([str(script), "cache", "info"], env=_env(tmp_path), capture_output=True, text=True,
                          cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert f"cache directory: {tmp_path.resolve()}" in proc.stdout
    usage = subprocess.run([str(script), "--help"], capture_output=True, text=True, timeout=120).stdout
    assert usage.startswith("usage: bytegrad ")
    usage = subprocess.run([sys.executable, "-m", "bytegrad", "--help"], capture_output=True, text=True,
                           env=_env(tmp_path), timeout=120).stdout
    assert usage.startswith("usage: python -m bytegrad ")
