"""Imports every module of bytegrad's own rules, so importing `bytegrad.rules` registers them."""
from bytegrad.rules import builtins as _builtins  # noqa: F401
from bytegrad.rules.numpy import (  # noqa: F401
    indexing as _indexing,
    linalg as _linalg,
    nondiff as _nondiff,
    reductions as _reductions,
    shape as _shape_rules,
    ufuncs as _ufuncs,
)
