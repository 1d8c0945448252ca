"""CTC loss (`F.ctc_loss`, `nn.CTCLoss`) against the CPU, forward and
backward: padded and concatenated targets, lengths as lists and as tpu
tensors (read on the host, as CUDA does), every reduction, repeated
labels, empty targets, an input of length 0, alignments that cannot exist
(infinite loss, and zero_infinity), float64, in every eager mode."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F


def _case(T, N, C, il, tl, *, concat=False, seed=0, dtype=torch.float32, targets=None):
    g = torch.Generator().manual_seed(seed)
    lp = torch.randn(T, N, C, generator=g, dtype=dtype).log_softmax(2)
    if targets is None:
        targets = torch.randint(1, C, (sum(tl),) if concat else (N, max(tl + [1])), generator=g)
    return lp, targets, il, tl


def _compare(lp, targets, il, tl, tensor_lengths=False, **kw):
    ilx, tlx = (torch.tensor(il), torch.tensor(tl)) if tensor_lengths else (il, tl)
    a = lp.clone().requires_grad_()
    want = F.ctc_loss(a, targets, ilx, tlx, **kw)
    b = lp.to("tpu").requires_grad_()
    dev = (lambda x: x.to("tpu")) if tensor_lengths else (lambda x: x)
    got = F.ctc_loss(b, targets.to("tpu"), dev(ilx), dev(tlx), **kw)
    tol = 1e-10 if lp.dtype == torch.float64 else 2e-5
    torch.testing.assert_close(got.detach().cpu(), want.detach(), rtol=tol, atol=tol, equal_nan=True)
    cot = torch.rand(want.shape, generator=torch.Generator().manual_seed(9), dtype=lp.dtype)
    want.backward(cot)
    got.backward(cot.to("tpu"))
    torch.testing.assert_close(b.grad.cpu(), a.grad, rtol=tol, atol=tol, equal_nan=True)


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
def test_padded_and_concatenated_targets(eager_mode, reduction):
    il, tl = [10, 8, 6], [4, 3, 2]
    _compare(*_case(10, 3, 5, il, tl), reduction=reduction)
    _compare(*_case(10, 3, 5, il, tl, concat=True, seed=1), reduction=reduction)


def test_tensor_lengths_as_the_opinfo_samples():
    g = torch.Generator().manual_seed(3)
    tl = [int(x) for x in torch.randint(10, 30, (16,), generator=g)]
    _compare(*_case(50, 16, 20, [50] * 16, tl, seed=2), tensor_lengths=True, reduction="mean")
    _compare(*_case(50, 16, 20, [50, 40] * 8, tl, seed=4), tensor_lengths=True, reduction="sum")


def test_repeats_empty_targets_and_empty_inputs():
    # Repeated labels need a blank between them: 5 labels with two repeats
    # need 7 steps, so one element has no alignment (infinite loss).
    targets = torch.tensor([[1, 1, 2, 2, 3], [1, 2, 3, 0, 0]])
    lp, _, _, _ = _case(6, 2, 4, [6, 3], [5, 3], seed=5)
    _compare(lp, targets, [6, 3], [5, 3], reduction="none")
    _compare(lp, targets, [6, 3], [5, 3], reduction="none", zero_infinity=True)
    _compare(lp, targets, [6, 3], [5, 3], reduction="mean", zero_infinity=True)
    # An empty target, and an input of length 0.
    _compare(*_case(6, 2, 4, [6, 0], [2, 0], seed=6), reduction="none")
    _compare(*_case(7, 3, 4, [7, 5, 2], [0, 0, 0], seed=7, targets=torch.zeros(3, 1, dtype=torch.long)),
             reduction="none")


def test_float64_and_module():
    _compare(*_case(12, 2, 6, [12, 9], [5, 4], seed=8, dtype=torch.float64), reduction="none")
    lp, targets, il, tl = _case(9, 2, 5, [9, 9], [3, 4], seed=10)
    loss = torch.nn.CTCLoss(blank=4)
    targets = targets % 4  # the blank is the last class here
    torch.testing.assert_close(loss(lp.to("tpu"), targets.to("tpu"), il, tl).cpu(), loss(lp, targets, il, tl),
                               rtol=2e-5, atol=2e-5)


def test_bad_lengths_are_refused():
    lp, targets, _, _ = _case(5, 2, 4, [5, 5], [2, 2])
    with pytest.raises(RuntimeError, match="input_lengths"):
        F.ctc_loss(lp.to("tpu"), targets.to("tpu"), [6, 5], [2, 2])
    with pytest.raises(RuntimeError, match="at least 3"):
        F.ctc_loss(lp.to("tpu"), targets.to("tpu"), [5, 5], [3, 2])
