"""What NumPy's floating-point error state asks of a Numba kernel (compiled/numba_fpflag.py).

A kernel keeps no floating-point flags; it notes whether any value it computed is not finite. Under
default rounding every error NumPy reports as divide, overflow or invalid gives an inf or a NaN, so
a kernel whose values are all finite met none of them, and one that met one hands the call to the
general path, which reports it as the error state says (warning, raising, calling, logging).
Underflow gives finite values: a kernel cannot tell, so it runs only while `under` is "ignore"
(NumPy's default). `kernel_mode()` reads the state of the calling context: 0, the kernel must not
run (`under` is not "ignore"); 1, it runs, and a non-finite value hands the call over; 2, it runs
and its values stand (divide, over and invalid are all "ignore": nothing to report).

NumPy 2 keeps the state in a context variable, a new object each time it is set; the mode is worked
out once per object (np.geterr, about 3 us) and then found by its identity (about 0.1 us a call).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from bytegrad.runtime import fpwarn

__all__ = ["kernel_mode"]

#: id of an error state -> (that state, its mode): one entry per state the user (or runtime/fpwarn.py's
#: redirection, whose "call" is read as reporting) sets
_MODES: dict[int, tuple[Any, int]] = {}


def _mode() -> int:
    err = np.geterr()
    if err["under"] != "ignore":
        return 0
    return 2 if err["divide"] == err["over"] == err["invalid"] == "ignore" else 1


def kernel_mode() -> int:
    """0, 1 or 2 for the current error state: see the module's docstring."""
    extobj = fpwarn._EXTOBJ
    if extobj is None:  # (another NumPy layout: read every time)
        return _mode()
    state = extobj.get()
    known = _MODES.get(id(state))
    if known is not None and known[0] is state:
        return known[1]
    mode = _mode()
    if len(_MODES) > 64:
        _MODES.clear()
    _MODES[id(state)] = (state, mode)
    return mode
