"""Out-of-range indices raise, as CUDA's device-side asserts do, in every
eager mode, and the process stays usable; torch.tpu.set_index_checks turns
the checks off."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

T = "tpu"


def _embedding():
    return F.embedding(torch.tensor([[1, 10]], device=T), torch.randn(10, 3, device=T))


CASES = {
    # name: (computation returning a tpu tensor, pattern the error names)
    "embedding index == vocab": (_embedding, r"aten::embedding: index 10 is out of range for a weight of 10 rows \(valid: 0 to 9\)"),
    "nn.Embedding module": (lambda: torch.nn.Embedding(4, 2).to(T)(torch.tensor([4], device=T)),
                            r"aten::embedding: index 4 .*valid: 0 to 3"),
    "gather -1": (lambda: torch.gather(torch.randn(3, 4, device=T), 1, torch.tensor([[0], [-1], [1]], device=T)),
                  r"aten::gather: index -1 is out of range for dimension 1 with size 4 \(valid: 0 to 3\)"),
    "x[tensor([7])] on 5 elements": (lambda: torch.arange(5.0, device=T)[torch.tensor([7], device=T)],
                                     r"aten::index.Tensor: index 7 is out of range for dimension 0 with size 5"),
    "x[cpu tensor([7])]": (lambda: torch.arange(5.0, device=T)[torch.tensor([7])],
                           r"aten::index.Tensor: index 7 is out of range for dimension 0 with size 5"),
    "x[tensor([-6])]": (lambda: torch.arange(5.0, device=T)[torch.tensor([-6], device=T)],
                        r"index -6 is out of range for dimension 0 with size 5 \(valid: -5 to 4\)"),
    "cross_entropy target": (lambda: F.cross_entropy(torch.randn(2, 5, device=T), torch.tensor([1, 5], device=T)),
                             r"target 5 is out of bounds for 5 classes \(valid: 0 to 4\)"),
    "nll_loss target -3": (lambda: F.nll_loss(torch.randn(2, 5, device=T), torch.tensor([-3, 0], device=T)),
                           r"target -3 is out of bounds for 5 classes"),
    "index_put_": (lambda: torch.zeros(5, device=T).index_put_((torch.tensor([9], device=T),), torch.tensor(1.0, device=T)),
                   r"aten::index_put_: index 9 is out of range for dimension 0 with size 5"),
    "scatter_": (lambda: torch.zeros(5, device=T).scatter_(0, torch.tensor([6], device=T), 1.0),
                 r"aten::scatter_.value: index 6 is out of range for dimension 0 with size 5 \(valid: 0 to 4\)"),
    "scatter_add": (lambda: torch.zeros(5, device=T).scatter_add(0, torch.tensor([5], device=T), torch.ones(1, device=T)),
                    r"aten::scatter_add: index 5 is out of range"),
    "take": (lambda: torch.take(torch.zeros(5, device=T), torch.tensor([6], device=T)),
             r"aten::take: index 6 is out of range for a tensor of 5 elements \(valid: -5 to 4\)"),
    "index_select": (lambda: torch.index_select(torch.zeros(3, 2, device=T), 0, torch.tensor([3], device=T)),
                     r"aten::index_select: index 3 is out of range for dimension 0 with size 3"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_out_of_range_index_raises_and_the_process_carries_on(case, eager_mode):
    run, pattern = CASES[case]
    with pytest.raises(IndexError, match=pattern):
        run().cpu()
    # Nothing is left pending, and the device keeps working.
    torch.tpu.synchronize()
    x = torch.arange(6.0, device=T).reshape(2, 3)
    torch.testing.assert_close(x.sum(0).cpu(), torch.tensor([3.0, 5.0, 7.0]))


@pytest.mark.parametrize("mode", ["DEFER_NEVER", "DEFER_AND_FUSE"])
def test_synchronize_reports_an_unread_bad_index(mode):
    with torch.tpu.set_eager_mode(mode):
        y = _embedding()  # kept but never read (fused mode runs no op whose result is dropped)
        with pytest.raises(IndexError, match="aten::embedding: index 10"):
            torch.tpu.synchronize()
        torch.tpu.synchronize()  # reported once
        del y


def test_launch_blocking_raises_at_the_op():
    with torch.tpu.set_eager_mode("DEFER_NEVER_AND_LAUNCH_BLOCKING"):
        with pytest.raises(IndexError, match="aten::embedding: index 10"):
            _embedding()  # no read needed


def test_in_range_indices_match_the_cpu(eager_mode):
    w = torch.randn(10, 3)
    idx = torch.tensor([[0, 9], [-1, 3]])
    torch.testing.assert_close(torch.arange(10.0, device=T)[idx.to(T)].cpu(), torch.arange(10.0)[idx])
    torch.testing.assert_close(torch.arange(10.0, device=T)[idx].cpu(), torch.arange(10.0)[idx])
    torch.testing.assert_close(F.embedding(idx.clamp(min=0).to(T), w.to(T)).cpu(), F.embedding(idx.clamp(min=0), w))
    logits, target = torch.randn(4, 5), torch.tensor([0, 4, 2, -100])
    torch.testing.assert_close(F.cross_entropy(logits.to(T), target.to(T)).cpu(), F.cross_entropy(logits, target))


def test_the_switch_turns_the_checks_off():
    assert torch.tpu.index_checks_enabled()
    torch.tpu.set_index_checks(False)
    try:
        assert not torch.tpu.index_checks_enabled()
        # Without checks a read clamps the index: no error, a plausible number.
        out = torch.arange(5.0, device=T)[torch.tensor([7], device=T)].cpu()
        assert out.shape == (1,)
    finally:
        torch.tpu.set_index_checks(True)
    with pytest.raises(IndexError):
        torch.arange(5.0, device=T)[torch.tensor([7], device=T)].cpu()
