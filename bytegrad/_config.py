"""`bytegrad.config`: switches read from the environment at import, settable at run time."""
from __future__ import annotations

import os

__all__ = ["Config", "config"]


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "") not in ("", "0")


class Config:
    """bytegrad's run-time switches.

    `debug_nans` (default: the environment variable BYTEGRAD_DEBUG_NANS=1): the first NaN or inf a
    recorded operation produces, in the forward or the reverse pass, raises `bytegrad.NaNError`
    naming the line and the operation. Read once per gradient; off, it costs nothing.

    >>> import bytegrad
    >>> bytegrad.config.debug_nans = True
    >>> bytegrad.config.debug_nans = False
    """

    __slots__ = ("debug_nans",)

    def __init__(self) -> None:
        self.debug_nans: bool = _env_flag("BYTEGRAD_DEBUG_NANS")

    def __repr__(self) -> str:
        return f"bytegrad.config(debug_nans={self.debug_nans!r})"


config = Config()
