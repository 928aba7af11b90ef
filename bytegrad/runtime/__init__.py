"""The runtime: what rewritten code calls (`abi`), the tape and its sweeps, records, fused kernels.

Importing the package fills the tables of C functions that call back into Python
(`runtime/callbacks.py` registers its handlers in `dispatch`): it imports `abi`, so it is imported
here, once the package is importable, rather than by `abi` or `dispatch` (no import cycle).
"""
from bytegrad.runtime import callbacks as _callbacks  # noqa: F401  (fills dispatch's CALLBACKS)
