"""Imports every module of bytegrad's own rules, so importing `bytegrad.rules` registers them."""
import importlib

for _name in ("builtins", "numpy.ufuncs", "numpy.reductions", "numpy.shape", "numpy.indexing",
              "numpy.linalg", "numpy.nondiff"):
    try:
        importlib.import_module(f"bytegrad.rules.{_name}")
    except ModuleNotFoundError as exc:  # a rules module not written yet
        if exc.name != f"bytegrad.rules.{_name}":
            raise
