"""Imports every module of bytegrad's own rules, so importing `bytegrad.rules` registers them; except
those that load once the program imports the module they cover (numpy.fft, statistics, heapq, bisect,
scipy's): see `registry._LAZY_RULES`."""
from bytegrad.rules import builtins as _builtins  # noqa: F401
from bytegrad.rules import control as _control  # noqa: F401
from bytegrad.rules import python_stdlib as _python_stdlib  # noqa: F401
from bytegrad.rules.numpy import (  # noqa: F401
    building as _building,
    cumulative as _cumulative,
    functional as _functional,
    indexing as _indexing,
    linalg as _linalg,
    linalg_decomp as _linalg_decomp,
    manipulation as _manipulation,
    nondiff as _nondiff,
    products as _products,
    reductions as _reductions,
    selection as _selection,
    ufunc_methods as _ufunc_methods,
    shape as _shape_rules,
    signal as _signal,
    statistics as _statistics,
    ufuncs as _ufuncs,
)
