"""F.interpolate in 1, 2 and 3 spatial dims on "tpu" against the CPU:
nearest, nearest-exact, (bi/tri)linear and bicubic (2-d; with and without
align_corners), by output size and by scale factor, forward and backward."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

LINEAR = {1: "linear", 2: "bilinear", 3: "trilinear"}


def _cases():
    for n in (1, 2, 3):
        for mode in ("nearest", "nearest-exact", LINEAR[n]) + (("bicubic",) if n == 2 else ()):
            for by in ("size", "scale"):
                for align in ((False, True) if mode in (LINEAR[n], "bicubic") else (None,)):
                    yield n, mode, by, align


@pytest.mark.parametrize("n,mode,by,align", list(_cases()))
def test_interpolate_matches_cpu(n, mode, by, align):
    g = torch.Generator().manual_seed(n)
    x = torch.randn((2, 3) + (5, 4, 3)[:n], generator=g, requires_grad=True)
    kw = dict(size=(7, 3, 5)[:n]) if by == "size" else dict(scale_factor=(1.7, 2.0, 0.6)[:n])
    if align is not None:
        kw["align_corners"] = align
    y = F.interpolate(x, mode=mode, **kw)
    weights = torch.arange(y.numel(), dtype=torch.float32).reshape(y.shape) % 7
    y.backward(weights)
    xt = x.detach().to("tpu").requires_grad_()
    yt = F.interpolate(xt, mode=mode, **kw)
    yt.backward(weights.to("tpu"))
    torch.testing.assert_close(yt.detach().cpu(), y.detach(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(xt.grad.cpu(), x.grad, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("sizes", [(8, 9, 3, 4), (5, 7, 12, 10), (32, 31, 7, 5), (4, 4, 4, 4), (10, 3, 1, 1)])
def test_antialiased_resize_and_grad(mode, align_corners, sizes):
    """antialias=True: shrinking widens the filter over every source pixel
    under it (PIL's resampling); forward and backward against the CPU."""
    hi, wi, ho, wo = sizes
    g = torch.Generator().manual_seed(hi * 100 + wo)
    x = torch.randn(2, 3, hi, wi, generator=g)
    kw = dict(size=(ho, wo), mode=mode, antialias=True, align_corners=align_corners)
    xc, xt = x.clone().requires_grad_(), x.to("tpu").requires_grad_()
    want, got = F.interpolate(xc, **kw), F.interpolate(xt, **kw)
    torch.testing.assert_close(got.detach().cpu(), want.detach(), rtol=1e-5, atol=1e-5)
    cot = torch.randn(want.shape, generator=g)
    want.backward(cot)
    got.backward(cot.to("tpu"))
    torch.testing.assert_close(xt.grad.cpu(), xc.grad, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("scale", [0.3, 2.5])
def test_antialiased_scale_factor(scale):
    x = torch.randn(1, 2, 20, 16, generator=torch.Generator().manual_seed(5))
    for mode in ("bilinear", "bicubic"):
        want = F.interpolate(x, scale_factor=scale, mode=mode, antialias=True)
        got = F.interpolate(x.to("tpu"), scale_factor=scale, mode=mode, antialias=True)
        torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-5)
