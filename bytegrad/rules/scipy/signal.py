"""`scipy.signal.convolve` and `correlate`: n-D, modes 'full', 'same' and 'valid', every `method`. Real input.

Both are a window of the full convolution (correlate: of the full convolution with in2 flipped along
every axis), so the cotangent of in1 is the correlation of the zero-padded output cotangent with the
kernel, and in2's that of the output cotangent with in1; the pullback uses the same `method`.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import scipy.signal as ss

from bytegrad.errors import RuleCaseError
from bytegrad.rules._project import stand_in
from bytegrad.rules.numpy.signal import window_cotangents
from bytegrad.rules.registry import NO_TANGENT, rrule
from bytegrad.rules.scipy._args import params


def _window(shape_a: tuple[int, ...], shape_v: tuple[int, ...], mode: str) -> tuple[slice, ...]:
    """Where the output of `mode` lies in the full convolution, per axis."""
    out = []
    for n, m in zip(shape_a, shape_v):
        full = n + m - 1
        if mode == "full":
            out.append(slice(0, full))
        elif mode == "same":
            start = (full - n) // 2
            out.append(slice(start, start + n))
        elif mode == "valid":
            out.append(slice(min(n, m) - 1, max(n, m)))
        else:
            raise ValueError(f"acceptable mode flags are 'valid', 'same', or 'full', not {mode!r}")
    return tuple(out)


def _convolution_rule(fn: Callable[..., Any], correlate: bool) -> Callable[..., Any]:
    def convolution_rrule(in1: Any, in2: Any, *args: Any, **kwargs: Any) -> tuple[Any, Callable[..., Any]]:
        if np.iscomplexobj(in1) or np.iscomplexobj(in2):
            raise RuleCaseError(f"the scipy.signal.{fn.__name__} rule covers real input only")
        out = fn(in1, in2, *args, **kwargs)
        mode, method = params(args, kwargs, ("mode", "method"), ("full", "auto"))
        a_shape, v_shape = np.shape(in1), np.shape(in2)
        window = _window(a_shape, v_shape, mode)
        like_a, like_v = stand_in(in1), stand_in(in2)

        def convolution_pullback(out_bar: Any) -> tuple[Any, ...]:
            a, v = np.asarray(in1), np.asarray(in2)
            full = np.zeros(tuple(n + m - 1 for n, m in zip(a_shape, v_shape)),
                            dtype=np.result_type(out_bar, a, v, 0.0))
            full[window] = out_bar
            return window_cotangents(full, a, v, like_a, like_v, correlate,
                                     lambda x, k: ss.correlate(x, k, "valid", method)) + (NO_TANGENT,) * len(args)

        return out, convolution_pullback

    convolution_rrule.__name__ = convolution_rrule.__qualname__ = f"{fn.__name__}_rrule"
    return convolution_rrule


rrule(ss.convolve)(_convolution_rule(ss.convolve, correlate=False))
rrule(ss.correlate)(_convolution_rule(ss.correlate, correlate=True))
