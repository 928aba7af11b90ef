"""Imports the modules of bytegrad's own rules that `import bytegrad` loads, so importing
`bytegrad.rules` registers them; those of `_deferred.INDEX` load on the first lookup of one of their
functions (rules/_deferred.py: most of NumPy's), and those of `registry._LAZY_RULES` once the program
imports the module they cover (numpy.fft, statistics, heapq, bisect, scipy's)."""
import importlib as _importlib
import os as _os

#: every rules module of bytegrad's own that is not tied to a module the program imports
ALL = ("bytegrad.rules.builtins", "bytegrad.rules.control", "bytegrad.rules.python_stdlib") + tuple(
    f"bytegrad.rules.numpy.{m}" for m in (
        "building", "cumulative", "functional", "indexing", "linalg", "linalg_decomp", "manipulation", "nondiff",
        "products", "reductions", "selection", "ufunc_methods", "shape", "signal", "statistics", "ufuncs"))

if _os.environ.get("_BG_INDEXING_RULES") == "1":  # (`python -m bytegrad.rules._deferred`: none deferred,
    from bytegrad.rules._deferred import CANDIDATES as _LATER  # the candidates imported by the indexer)
else:
    from bytegrad.rules import _deferred

    _LATER = tuple(_deferred.INDEX)
    _deferred.install()

for _name in ALL:
    if _name not in _LATER:
        _importlib.import_module(_name)
