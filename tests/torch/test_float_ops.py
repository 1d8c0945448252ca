"""Edge cases of the float-manipulation and special functions against the
CPU, beyond what the OpInfo samples draw: NaN operands, signed zeros,
subnormals, infinities, negative decimals, every dtype frexp takes."""

from __future__ import annotations

import pytest
import torch

NAN, INF = float("nan"), float("inf")


def _pair():
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(64, generator=g) * 3, torch.randn(64, generator=g)
    x[3], y[4], y[5], x[6], x[7], y[7] = NAN, NAN, -0.0, 0.0, INF, -INF
    return x, y


def _same(got, want, **tol):
    torch.testing.assert_close(got.cpu(), want, equal_nan=True, **(tol or dict(rtol=0, atol=0)))


@pytest.mark.parametrize("op", [torch.copysign, torch.fmax, torch.fmin, torch.nextafter])
def test_binary_float_ops_with_nan_and_signed_zero(op):
    x, y = _pair()
    _same(op(x.to("tpu"), y.to("tpu")), op(x, y))


def test_copysign_scalar_and_integers():
    x, _ = _pair()
    _same(torch.copysign(x.to("tpu"), -2.0), torch.copysign(x, -2.0))
    i = torch.arange(-3, 3)
    _same(torch.copysign(i.to("tpu"), torch.tensor(-1, device="tpu")), torch.copysign(i, torch.tensor(-1)))
    _same(torch.fmin(i.to("tpu"), torch.tensor(2, device="tpu")), torch.fmin(i, torch.tensor(2)))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_frexp_including_subnormals(dtype):
    finfo = torch.finfo(dtype)
    z = torch.tensor([0.0, -0.0, 1.0, 0.5, 0.75, -3.0, 1024.0, finfo.max, finfo.tiny, finfo.tiny / 4,
                      -finfo.tiny / 8, INF, -INF, NAN], dtype=torch.float64).to(dtype)
    m, e = torch.frexp(z)
    mt, et = torch.frexp(z.to("tpu"))
    _same(mt, m)
    _same(et, e)


@pytest.mark.parametrize("decimals", [-2, -1, 0, 1, 3])
def test_round_decimals(decimals):
    x, _ = _pair()
    x = x * 137.0
    _same(torch.round(x.to("tpu"), decimals=decimals), torch.round(x, decimals=decimals), rtol=1e-6, atol=1e-6)


def test_special_functions():
    x, y = _pair()
    g = torch.Generator().manual_seed(1)
    p = torch.rand(64, generator=g)
    p[:4] = torch.tensor([0.0, 1.0, -0.5, 1.5])
    q, s = torch.rand(64, generator=g) * 3 + 0.5, torch.rand(64, generator=g) * 3 + 1.1
    t = lambda v: v.to("tpu")  # noqa: E731
    tol = dict(rtol=1e-4, atol=1e-5)
    _same(torch.erfc(t(x)), torch.erfc(x), **tol)
    _same(torch.special.i0e(t(x)), torch.special.i0e(x), **tol)
    _same(torch.special.ndtr(t(x)), torch.special.ndtr(x), **tol)
    _same(torch.special.ndtri(t(p)), torch.special.ndtri(p), **tol)
    _same(torch.special.entr(t(x)), torch.special.entr(x), **tol)
    _same(torch.special.xlog1py(t(x), t(y.abs())), torch.special.xlog1py(x, y.abs()), **tol)
    _same(torch.special.zeta(t(s), t(q)), torch.special.zeta(s, q), **tol)
    for n in range(4):
        _same(torch.polygamma(n, t(q)), torch.polygamma(n, q), **tol)
    w = t(q)
    w.polygamma_(2)
    _same(w, torch.polygamma(2, q), **tol)
    with pytest.raises(RuntimeError, match="negative n"):
        torch.polygamma(-1, t(q))
