"""What a compiled program answers instead of a result (`MISS`, `DECIDED`): here, not in
compiled/source.py, so that `bytegrad.api` can test for them without importing the program
machinery (bytegrad.compiled and bytegrad/compiled/ load when a function is first differentiated)."""
from __future__ import annotations

__all__ = ["MISS", "DECIDED", "FP_ERROR"]


class _Miss:
    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


#: what a program returns when a guard fails: the call runs on the general path
MISS = _Miss("MISS")
#: what it returns when a decision on data came out otherwise than at capture (then too)
DECIDED = _Miss("DECIDED")
#: what a Numba program returns when its kernel met a floating-point error (an inf or NaN) that the
#: user's error state reports, or when that state asks for what a kernel cannot see (underflow):
#: the call runs on the general path, which reports it, and no capture follows
#: (compiled/numba_fpflag.py)
FP_ERROR = _Miss("FP_ERROR")
