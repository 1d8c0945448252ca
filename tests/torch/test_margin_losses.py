"""nn.MultiMarginLoss and nn.MultiLabelMarginLoss on "tpu" against the
CPU: p = 1 and 2, a margin, class weights, every reduction, 1-D input,
targets ended by -1 and repeated targets; losses and input gradients."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F


def _same(got, want):
    torch.testing.assert_close(got.detach().cpu(), want.detach(), rtol=1e-5, atol=1e-6)


def _loss_and_grad(fn, x, *args, **kw):
    x = x.clone().requires_grad_()
    loss = fn(x, *args, **kw)
    weights = torch.arange(1.0, loss.numel() + 1).reshape(loss.shape).to(loss.device)
    (loss * weights).sum().backward()
    return loss, x.grad


def _both(fn, x, *args, **kw):
    mv = lambda v: v.to("tpu") if isinstance(v, torch.Tensor) else v  # noqa: E731
    want = _loss_and_grad(fn, x, *args, **kw)
    got = _loss_and_grad(fn, x.to("tpu"), *map(mv, args), **{k: mv(v) for k, v in kw.items()})
    for g, w in zip(got, want):
        _same(g, w)


@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("weighted", [False, True])
def test_multi_margin_loss(p, reduction, weighted):
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(4, 5, generator=g), torch.rand(5, generator=g)
    y = torch.tensor([1, 0, 4, 2])
    _both(F.multi_margin_loss, x, y, p=p, margin=0.7, weight=w if weighted else None, reduction=reduction)
    _both(F.multi_margin_loss, x[0], torch.tensor(3), p=p, reduction=reduction)


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_multilabel_margin_loss(reduction):
    x = torch.randn(4, 5, generator=torch.Generator().manual_seed(1))
    t = torch.tensor([[3, 0, -1, 1, 2], [1, 1, 2, -1, -1], [-1, 0, 0, 0, 0], [4, 3, 2, 1, 0]])
    _both(F.multilabel_margin_loss, x, t, reduction=reduction)
    _both(F.multilabel_margin_loss, x[0], torch.tensor([2, 0, -1, 1, 1]), reduction=reduction)
