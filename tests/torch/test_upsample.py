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
