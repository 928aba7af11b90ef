"""np.fft rules against finite differences: every transform with n, s, axes and each norm, real and
complex input, truncation and zero-padding, odd and even lengths; fftshift, ifftshift, fftfreq."""
from __future__ import annotations

import numpy as np
import pytest

import bytegrad

from ..cases import Arr, Gen, Num, case, params
from .test_complex import _fd_gradient

NORMS = (None, "backward", "ortho", "forward")


def C(*shape):
    """A random complex array of `shape`, complex64 in a float32 case."""
    def make(rng, dtype):
        z = rng.uniform(-1.5, 1.5, shape) + 1j * rng.uniform(-1.5, 1.5, shape)
        return z.astype(np.complex64 if dtype == "float32" else np.complex128)
    return Gen(make)


ONE_D = [
    case(np.fft.fft, Arr((2, 6))), case(np.fft.fft, C(2, 6), name="fft-complex"),
    case(np.fft.fft, C(7), 4, name="fft-truncate"), case(np.fft.fft, C(3, 5), 9, 0, name="fft-pad-axis0"),
    case(np.fft.ifft, C(2, 6)), case(np.fft.ifft, Arr((5,)), 3, name="ifft-truncate-real"),
    case(np.fft.ifft, C(4, 3), 6, 0, name="ifft-pad-axis0"),
    case(np.fft.rfft, Arr((2, 6))), case(np.fft.rfft, Arr((7,)), name="rfft-odd"),
    case(np.fft.rfft, Arr((3, 6)), 5, name="rfft-truncate"), case(np.fft.rfft, Arr((5, 3)), 8, 0, name="rfft-pad-axis0"),
    case(np.fft.irfft, C(2, 5)), case(np.fft.irfft, C(4), 7, name="irfft-odd-n"), case(np.fft.irfft, C(6), 4, name="irfft-truncate"),
    case(np.fft.irfft, C(3, 4), 15, 0, name="irfft-pad-axis0"), case(np.fft.irfft, Arr((5,)), name="irfft-real-input"),
    case(np.fft.hfft, C(2, 5)), case(np.fft.hfft, C(4), 5, name="hfft-odd-n"), case(np.fft.hfft, C(4), 12, name="hfft-pad"),
    case(np.fft.ihfft, Arr((2, 6))), case(np.fft.ihfft, Arr((7,)), name="ihfft-odd"), case(np.fft.ihfft, Arr((6, 3)), 4, 0, name="ihfft-truncate"),
]
NORMED = [
    case(fn, x, name=f"{fn.__name__}-norm-{norm}", norm=norm)
    for norm in NORMS
    for fn, x in ((np.fft.fft, C(2, 5)), (np.fft.ifft, C(2, 5)), (np.fft.rfft, Arr((2, 6))), (np.fft.irfft, C(2, 4)),
                  (np.fft.hfft, C(5)), (np.fft.ihfft, Arr((5,))), (np.fft.fftn, C(2, 3)), (np.fft.rfftn, Arr((3, 4))),
                  (np.fft.irfftn, C(3, 4)), (np.fft.ifft2, C(3, 3)))
]
N_D = [
    case(np.fft.fft2, C(2, 4, 6)), case(np.fft.fft2, C(4, 6), (3, 8), name="fft2-s"),
    case(np.fft.fft2, Arr((3, 4, 5)), None, (0, 2), name="fft2-axes"), case(np.fft.ifft2, Arr((4, 6))),
    case(np.fft.ifft2, C(4, 6), (5, 2), name="ifft2-s"),
    case(np.fft.rfft2, Arr((4, 6))), case(np.fft.rfft2, Arr((4, 6)), (5, 5), name="rfft2-s"),
    case(np.fft.rfft2, Arr((3, 4, 5)), None, (2, 0), name="rfft2-axes"),
    case(np.fft.irfft2, C(4, 6)), case(np.fft.irfft2, C(4, 6), (3, 7), name="irfft2-s"),
    case(np.fft.fftn, C(2, 3, 4)), case(np.fft.fftn, Arr((2, 3, 4)), (3, 2), (1, 2), name="fftn-s"),
    case(np.fft.fftn, C(2, 3, 4), None, (0, 2), name="fftn-axes"), case(np.fft.fftn, C(3, 4), (5, 3), (1, 0), name="fftn-s-axes"),
    case(np.fft.ifftn, C(2, 3, 4)), case(np.fft.ifftn, C(2, 3, 4), (4, 2), (2, 1), name="ifftn-s-axes"),
    case(np.fft.rfftn, Arr((2, 3, 4))), case(np.fft.rfftn, Arr((2, 3, 4)), (4, 5), (2, 0), name="rfftn-s-axes"),
    case(np.fft.rfftn, Arr((2, 3, 5)), axes=(1,), name="rfftn-one-axis"),
    case(np.fft.irfftn, C(2, 3, 4)), case(np.fft.irfftn, C(2, 3, 4), (3, 5), (0, 1), name="irfftn-s-axes"),
    case(np.fft.irfftn, C(2, 3, 4), (2, 3, 6), (0, 1, 2), name="irfftn-s"), case(np.fft.irfftn, C(2, 3, 4), (1, 7), (1, 2), name="irfftn-s-odd"),
]
SHIFTS = [
    case(np.fft.fftshift, Arr((4, 5))), case(np.fft.fftshift, Arr((4, 5)), 1, name="fftshift-axis"),
    case(np.fft.ifftshift, Arr((5, 4))), case(np.fft.ifftshift, C(3, 4), (0,), name="ifftshift-axes-complex"),
    case(np.fft.fftfreq, 5, Num(0.1, 2)), case(np.fft.fftfreq, 6, name="fftfreq-default-d"),
    case(np.fft.rfftfreq, 7, Num(0.1, 2)), case(np.fft.rfftfreq, 6, d=0.5, name="rfftfreq-keyword"),
]
TABLES = [ONE_D, NORMED, N_D, SHIFTS]


@pytest.mark.parametrize("case,dtype", params(ONE_D + NORMED + N_D + SHIFTS))
def test_fft_rule(case, dtype):
    case.check(dtype)


@pytest.mark.parametrize("f", [
    lambda x: np.sum(np.abs(np.fft.rfft(x)) ** 2 * np.arange(4.0)),
    lambda x: np.sum(np.fft.irfft(np.fft.rfft(x) * np.exp(-np.arange(4.0)), n=6) ** 3),
    lambda x: np.sum(np.abs(np.fft.fftshift(np.fft.fft2(x.reshape(2, 3), norm="ortho"))) * [[1.0, 2.0, 3.0], [0.5, 0.1, 2.0]]),
    lambda x: np.real(np.sum(np.fft.ifftn(x.reshape(2, 3) + 0.5j, s=(3, 4), axes=(0, 1)) ** 2)),
    lambda x: np.sum(np.fft.hfft(np.fft.ihfft(x), n=5) * np.arange(5.0)),
], ids=["rfft-power", "rfft-filter-irfft", "fft2-shift", "ifftn-s", "hfft-ihfft"])
def test_grad_of_user_code_calling_np_fft(f):
    """These were refused (no rule for numpy.fft...) before np.fft had rules."""
    x = np.array([0.3, -1.2, 0.8, 2.0, -0.4, 1.1])
    np.testing.assert_allclose(bytegrad.grad(f)(x), _fd_gradient(f, x), rtol=1e-6, atol=1e-8)


def _power(z):
    return np.real(z * np.conj(z))


@pytest.mark.parametrize("f", [
    lambda x: _power(np.fft.rfft(x)) * np.arange(4.0),
    lambda x: np.fft.irfft(np.fft.rfft(x) * np.exp(-np.arange(4.0)), n=6) ** 3,
    lambda x: _power(np.fft.fftshift(np.fft.fft2(x.reshape(2, 3), norm="ortho"))),
    lambda x: np.real(np.fft.ifftn(x.reshape(2, 3) + 0.5j, s=(3, 4), axes=(0, 1)) ** 2),
    lambda x: _power(np.fft.rfftn(x.reshape(2, 3), s=(3, 5), axes=(0, 1))),
    lambda x: np.fft.hfft(np.fft.ihfft(x) ** 2, n=5),
], ids=["rfft-power", "rfft-filter-irfft", "fft2-shift", "ifftn-s", "rfftn-s", "hfft-ihfft"])
def test_forward_mode_and_hessian_vector_products_through_np_fft(f):
    """jvp uses the forward rules; hvp differentiates the pullbacks (whose zero-padding once went
    through np.pad, which failed there)."""
    check_jvp_and_hvp(f)


def check_jvp_and_hvp(f):
    """jvp of f and hvp of sum(f) at a fixed point and direction, against central differences."""
    x = np.array([0.3, -1.2, 0.8, 2.0, -0.4, 1.1])
    v = np.array([0.5, 0.1, -0.3, 0.7, 0.2, -1.0])
    _, out_dot = bytegrad.jvp(f, (x,), (v,))
    np.testing.assert_allclose(out_dot, (f(x + 1e-6 * v) - f(x - 1e-6 * v)) / 2e-6, rtol=1e-6, atol=1e-8)
    loss = lambda x: np.sum(f(x))  # noqa: E731
    g = bytegrad.grad(loss)
    want = (g(x + 1e-6 * v) - g(x - 1e-6 * v)) / 2e-6
    np.testing.assert_allclose(np.ravel(bytegrad.hvp(loss, (x,), (v,))), want, rtol=1e-6, atol=1e-8)


def test_fftfreq_gradient_in_the_spacing():
    f = lambda d: np.sum(np.fft.fftfreq(8, d) ** 2)  # noqa: E731
    assert bytegrad.grad(f)(0.5) == pytest.approx((f(0.5 + 1e-6) - f(0.5 - 1e-6)) / 2e-6, rel=1e-6)
