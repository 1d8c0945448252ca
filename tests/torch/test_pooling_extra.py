"""Adaptive max pooling (2-D and 3-D, batched and not, global and uneven
windows, with a NaN and a tie in the input) and max unpooling against the
CPU: values, indices and gradients."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F


def _same(got, want):
    torch.testing.assert_close(got.detach().cpu(), want.detach(), equal_nan=True)


@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("case", [0, 1, 2])
def test_adaptive_max_pool(n, case):
    fn = F.adaptive_max_pool2d if n == 2 else F.adaptive_max_pool3d
    shape, out = [((2, 3, 7, 5, 6), (3, 2, 4)), ((3, 5, 5, 4), (5, 1, 2)), ((1, 2, 9, 7, 5), (1, 1, 1))][case]
    shape = shape[: n + 2] if len(shape) == 5 else shape[: n + 1]
    g = torch.Generator().manual_seed(case)
    x = torch.randn(shape, generator=g)
    flat = x.view(-1)
    flat[7] = float("nan")
    flat[5] = flat[6]
    x.requires_grad_()
    y, i = fn(x, out[:n], return_indices=True)
    w = torch.arange(y.numel(), dtype=torch.float32).reshape(y.shape) % 5
    y.backward(w)
    xt = x.detach().to("tpu").requires_grad_()
    yt, it = fn(xt, out[:n], return_indices=True)
    yt.backward(w.to("tpu"))
    _same(yt, y)
    _same(it, i)
    _same(xt.grad, x.grad)


@pytest.mark.parametrize("n", [2, 3])
def test_max_unpool(n):
    pool, unpool = (F.max_pool2d, F.max_unpool2d) if n == 2 else (F.max_pool3d, F.max_unpool3d)
    x = torch.randn((2, 3, 8, 6, 4)[: n + 2], generator=torch.Generator().manual_seed(4))
    y, i = pool(x, 2, return_indices=True)
    yt, itt = y.to("tpu"), i.to("tpu")
    _same(unpool(yt, itt, 2), unpool(y, i, 2))
    size = (9, 7, 5)[:n]
    _same(unpool(yt, itt, 2, output_size=size), unpool(y, i, 2, output_size=size))
