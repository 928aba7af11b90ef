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
out once per object (np.geterr, about 3 us) and then found by its identity.
"""
from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["MODES", "STATE", "kernel_mode"]

#: error state -> its mode (the state objects themselves: hashed by identity, kept while here), one
#: entry per state the user (or runtime/fpwarn.py's redirection, whose "call" reads as reporting) sets;
#: a program reads it inline (`MODES.get(STATE.get()) or kernel_mode()`: about 0.1 us)
MODES: dict[Any, int] = {}
STATE: Any  # NumPy's error state (a context variable, as runtime/fpwarn.py reads it), or None in another layout
try:
    from numpy._core.umath import _extobj_contextvar as STATE
except ImportError:
    STATE = None


def _mode() -> int:
    err = np.geterr()
    if err["under"] != "ignore":
        return 0
    return 2 if err["divide"] == err["over"] == err["invalid"] == "ignore" else 1


def kernel_mode() -> int:
    """0, 1 or 2 for the current error state: see the module's docstring."""
    if STATE is None:  # (another NumPy layout: read every time)
        return _mode()
    state = STATE.get()
    mode = MODES.get(state)
    if mode is None:
        mode = _mode()
        if len(MODES) > 64:
            MODES.clear()
        MODES[state] = mode
    return mode
