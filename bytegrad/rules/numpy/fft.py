"""`np.fft`: fft, ifft, rfft, irfft, hfft, ihfft, their 2-D and n-D forms (with `n`, `s`, `axes` and
every `norm`), fftshift and ifftshift, and fftfreq and rfftfreq (differentiable in `d` only).

Every transform is (real-)linear, so its forward rule applies the transform to the tangent. A
reverse rule undoes the transform one axis at a time, in the reverse of the order NumPy applies
it. Cotangents pair with tangents without conjugation (docs/plugins.md), so they go through the
transpose of each map, not its adjoint: the DFT matrix is symmetric, and the transpose of
`fft(x, n)` is `fft` of the cotangent, cut or zero-padded back to x's length (the transpose of
padding or cutting x to n). rfft keeps the first n//2 + 1 bins of a real input's fft: its
transpose pads the cotangent with zeros back to n bins and keeps the real part. irfft reads the
bins 1 .. (n-1)//2 twice (each stands for itself and its conjugate mirror) and the imaginary parts
of bin 0 and, for even n, bin n/2 not at all: its transpose is `ifft` of the cotangent, first
n//2 + 1 bins, interior bins doubled. hfft and ihfft are irfft and rfft of the conjugate, with the
`norm` direction swapped, as NumPy computes them.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

import numpy as np
from numpy.lib.array_utils import normalize_axis_index

from bytegrad.rules._project import project, stand_in
from bytegrad.rules._tangents import linear_frule
from bytegrad.rules.registry import NO_TANGENT, frule, rrule

_SWAPPED_NORM = {None: "forward", "backward": "forward", "ortho": "ortho", "forward": "backward"}
_ONE_D = ("n", "axis", "norm", "out")
_N_D = ("s", "axes", "norm", "out")

# A stage: (kind, axis, the input's length along it, the transform length n).
Stage = tuple[str, int, int, int]


def _fit(a: np.ndarray, length: int, axis: int) -> np.ndarray:
    """`a` cut, or padded with zeros, to `length` along `axis`."""
    have = a.shape[axis]
    if have == length:
        return a
    if have > length:
        return a[(slice(None),) * axis + (slice(0, length),)]
    zeros = np.zeros(a.shape[:axis] + (length - have,) + a.shape[axis + 1:], dtype=a.dtype)
    return np.concatenate([a, zeros], axis=axis)


def _hermitian_weights(n: int, axis: int, ndim: int) -> np.ndarray:
    """How many times irfft of length n reads each of its n//2 + 1 bins: 1, then 2 for the interior
    bins, and 1 for the last when n is even (the Nyquist bin has no mirror)."""
    w = np.full(n // 2 + 1, 2.0)
    w[0] = 1.0
    if n % 2 == 0:
        w[-1] = 1.0
    shape = [1] * ndim
    shape[axis] = w.size
    return w.reshape(shape)


def _fft_back(g: np.ndarray, axis: int, n_in: int, n: int, norm: Any) -> np.ndarray:
    return _fit(np.fft.fft(g, axis=axis, norm=norm), n_in, axis)


def _ifft_back(g: np.ndarray, axis: int, n_in: int, n: int, norm: Any) -> np.ndarray:
    return _fit(np.fft.ifft(g, axis=axis, norm=norm), n_in, axis)


def _rfft_back(g: np.ndarray, axis: int, n_in: int, n: int, norm: Any) -> np.ndarray:
    return _fit(np.fft.fft(_fit(g, n, axis), axis=axis, norm=norm).real, n_in, axis)


def _irfft_back(g: np.ndarray, axis: int, n_in: int, n: int, norm: Any) -> np.ndarray:
    h = _fit(np.fft.ifft(g, axis=axis, norm=norm), n // 2 + 1, axis)
    h = h * _hermitian_weights(n, axis, h.ndim).astype(h.real.dtype)
    return _fit(h, n_in, axis)


def _hfft_back(g: np.ndarray, axis: int, n_in: int, n: int, norm: Any) -> np.ndarray:
    return np.conj(_irfft_back(g, axis, n_in, n, _SWAPPED_NORM[norm]))


def _ihfft_back(g: np.ndarray, axis: int, n_in: int, n: int, norm: Any) -> np.ndarray:
    return _rfft_back(np.conj(g), axis, n_in, n, _SWAPPED_NORM[norm])


_BACK: dict[str, Callable[..., np.ndarray]] = {
    "fft": _fft_back, "ifft": _ifft_back, "rfft": _rfft_back, "irfft": _irfft_back,
    "hfft": _hfft_back, "ihfft": _ihfft_back,
}


def _one_d_stages(kind: str, shape: tuple[int, ...], params: dict[str, Any]) -> list[Stage]:
    axis = normalize_axis_index(params.get("axis", -1), len(shape))
    n_in = shape[axis]
    n = params.get("n")
    if n is None:
        n = 2 * (n_in - 1) if kind in ("irfft", "hfft") else n_in
    return [(kind, axis, n_in, int(n))]


def _n_d_stages(kind: str, shape: tuple[int, ...], params: dict[str, Any], default_axes: Optional[tuple[int, ...]]) -> list[Stage]:
    """The 1-D transforms NumPy's fftn, ifftn, rfftn, irfftn (and their 2-D forms) apply, in order."""
    s, axes, ndim = params.get("s"), params.get("axes", default_axes), len(shape)
    if axes is None:
        axes = range(ndim) if s is None else range(ndim - len(s), ndim)
    axes = [normalize_axis_index(a, ndim) for a in axes]
    sizes = [shape[a] for a in axes] if s is None else [shape[a] if k in (None, -1) else int(k) for a, k in zip(axes, s)]
    if kind == "irfft" and (s is None or s[-1] in (None, -1)):
        sizes[-1] = 2 * (shape[axes[-1]] - 1)
    lengths = list(shape)
    stages: list[Stage] = []

    def add(one: str, ii: int) -> None:
        stages.append((one, axes[ii], lengths[axes[ii]], sizes[ii]))
        lengths[axes[ii]] = sizes[ii] // 2 + 1 if one == "rfft" else sizes[ii]

    last = len(axes) - 1
    if kind == "rfft":
        add("rfft", last)
    for ii in reversed(range(last if kind in ("rfft", "irfft") else last + 1)):
        add("ifft" if kind in ("ifft", "irfft") else "fft", ii)
    if kind == "irfft":
        add("irfft", last)
    return stages


def _register(fn: Any, kind: str, default_axes: Any = "1-D") -> None:
    names = _ONE_D if default_axes == "1-D" else _N_D
    name = fn.__name__

    def fft_rrule(a: Any, *args: Any, **kwargs: Any) -> tuple[Any, Callable[..., Any]]:
        params = dict(zip(names, args), **kwargs)
        if params.get("out") is not None:
            raise TypeError(f"numpy.fft.{name}(..., out=...) cannot be differentiated; assign the result instead.")
        out = fn(a, *args, **kwargs)
        shape = np.shape(a)
        stages = (_one_d_stages(kind, shape, params) if names is _ONE_D
                  else _n_d_stages(kind, shape, params, default_axes))
        norm = params.get("norm")
        like = stand_in(a)

        def fft_pullback(out_bar: Any) -> tuple[Any, ...]:
            g = np.asarray(out_bar)
            for one, axis, n_in, n in reversed(stages):
                g = _BACK[one](g, axis, n_in, n, norm)
            return (project(g, like),) + (NO_TANGENT,) * len(args)

        return out, fft_pullback

    fft_rrule.__name__ = fft_rrule.__qualname__ = f"{name}_rrule"
    rrule(fn)(fft_rrule)
    frule(fn)(linear_frule(fn))


_fn: Callable[..., Any]
for _fn, _kind in ((np.fft.fft, "fft"), (np.fft.ifft, "ifft"), (np.fft.rfft, "rfft"), (np.fft.irfft, "irfft"),
                   (np.fft.hfft, "hfft"), (np.fft.ihfft, "ihfft")):
    _register(_fn, _kind)
for _fn, _kind in ((np.fft.fft2, "fft"), (np.fft.ifft2, "ifft"), (np.fft.rfft2, "rfft"), (np.fft.irfft2, "irfft")):
    _register(_fn, _kind, (-2, -1))
for _fn, _kind in ((np.fft.fftn, "fft"), (np.fft.ifftn, "ifft"), (np.fft.rfftn, "rfft"), (np.fft.irfftn, "irfft")):
    _register(_fn, _kind, None)


# ---- fftshift, ifftshift: permutations, each the other's transpose ---------------------------------

def _shift_rule(fn: Any, inverse: Any) -> None:
    name = fn.__name__

    def shift_rrule(x: Any, *args: Any, **kwargs: Any) -> tuple[Any, Callable[..., Any]]:
        out = fn(x, *args, **kwargs)
        like = stand_in(x)

        def shift_pullback(out_bar: Any) -> tuple[Any, ...]:
            return (project(inverse(out_bar, *args, **kwargs), like),) + (NO_TANGENT,) * len(args)

        return out, shift_pullback

    shift_rrule.__name__ = shift_rrule.__qualname__ = f"{name}_rrule"
    rrule(fn)(shift_rrule)
    frule(fn)(linear_frule(fn))


_shift_rule(np.fft.fftshift, np.fft.ifftshift)
_shift_rule(np.fft.ifftshift, np.fft.fftshift)


# ---- fftfreq, rfftfreq: k / (n d), smooth in the sample spacing d ---------------------------------

def _freq_rule(fn: Any) -> None:
    def freq_rrule(n: Any, *args: Any, **kwargs: Any) -> tuple[Any, Callable[..., Any]]:
        out = fn(n, *args, **kwargs)
        params = dict(zip(("d", "device"), args), **kwargs)
        d = params.get("d", 1.0)

        def freq_pullback(out_bar: Any) -> tuple[Any, ...]:
            d_bar = project(-np.sum(np.asarray(out_bar) * out) / d, d)
            bars = {"d": d_bar, "device": NO_TANGENT}
            return (NO_TANGENT,) + tuple(bars[k] for k in ("d", "device")[: len(args)])

        return out, freq_pullback

    freq_rrule.__name__ = freq_rrule.__qualname__ = f"{fn.__name__}_rrule"
    rrule(fn)(freq_rrule)


_freq_rule(np.fft.fftfreq)
_freq_rule(np.fft.rfftfreq)
