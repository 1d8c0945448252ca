"""searchsorted, bucketize and histc (and trace, vdot) against the CPU:
left and right sides, NaN values and NaN boundaries (PyTorch's binary
search treats them in its own way, which the unrolled search reproduces),
per-row boundaries, a sorter, scalars, int32 output; histc's given and
data-derived ranges, out-of-range elements and NaN; histogram and
histogramdd with bin counts (given and data ranges), bin edges, weights,
density, values on the edges, and their errors."""

from __future__ import annotations

import pytest
import torch

NAN = float("nan")


def _t(x):
    return x.to("tpu")


def _same(got, want):
    torch.testing.assert_close(got.cpu(), want, equal_nan=True)


@pytest.mark.parametrize("right", [False, True])
def test_searchsorted_and_bucketize(right):
    s, v = torch.tensor([1.0, 2, 2, 3]), torch.tensor([0.0, 1, 2, 2.5, 3, 4, NAN])
    _same(torch.searchsorted(_t(s), _t(v), right=right), torch.searchsorted(s, v, right=right))
    _same(torch.bucketize(_t(v), _t(s), right=right), torch.bucketize(v, s, right=right))
    sn, vn = torch.tensor([1.0, 2, NAN]), torch.tensor([1.5, 5.0, NAN])
    _same(torch.searchsorted(_t(sn), _t(vn), right=right), torch.searchsorted(sn, vn, right=right))
    g = torch.Generator().manual_seed(0)
    rows = torch.sort(torch.randn(3, 4, 9, generator=g), -1).values
    vals = torch.randn(3, 4, 5, generator=g)
    for out_int32 in (False, True):
        _same(torch.searchsorted(_t(rows), _t(vals), right=right, out_int32=out_int32),
              torch.searchsorted(rows, vals, right=right, out_int32=out_int32))
    unsorted = torch.randn(3, 4, 9, generator=g)
    sorter = torch.argsort(unsorted, -1)
    _same(torch.searchsorted(_t(unsorted), _t(vals), right=right, sorter=_t(sorter)),
          torch.searchsorted(unsorted, vals, right=right, sorter=sorter))
    side = "right" if right else "left"
    _same(torch.searchsorted(_t(s), 2.0, side=side), torch.searchsorted(s, 2.0, side=side))
    _same(torch.bucketize(2.5, _t(s), right=right), torch.bucketize(2.5, s, right=right))
    i, j = torch.tensor([1, 3, 5]), torch.tensor([0, 3, 6])
    _same(torch.searchsorted(_t(i), _t(j), right=right), torch.searchsorted(i, j, right=right))


def test_searchsorted_refuses_opposite_sides():
    s = torch.tensor([1.0, 2], device="tpu")
    with pytest.raises(RuntimeError, match="can't be set to opposites"):
        torch.searchsorted(s, s, side="left", right=True)


def test_histc():
    h = torch.tensor([1.0, 2, 1, 2.5, 4, NAN, -1])
    _same(torch.histc(_t(h), bins=4, min=0, max=3), torch.histc(h, bins=4, min=0, max=3))
    h2 = torch.tensor([1.0, 2, 1, 2.5, 4])
    _same(torch.histc(_t(h2), bins=4), torch.histc(h2, bins=4))
    same = torch.tensor([2.0, 2])
    _same(torch.histc(_t(same), bins=4), torch.histc(same, bins=4))
    r = torch.randn(1000, generator=torch.Generator().manual_seed(1))
    _same(torch.histc(_t(r), bins=17, min=-2, max=2.5), torch.histc(r, bins=17, min=-2, max=2.5))
    _same(torch.histc(_t(r), bins=33), torch.histc(r, bins=33))


def test_trace_and_vdot():
    m = torch.arange(12.0).reshape(3, 4)
    _same(torch.trace(_t(m)), torch.trace(m))
    k = torch.arange(12).reshape(4, 3)
    _same(torch.trace(_t(k)), torch.trace(k))
    r = torch.randn(20, generator=torch.Generator().manual_seed(2))
    _same(torch.vdot(_t(r[:10]), _t(r[10:])), torch.vdot(r[:10], r[10:]))


def _same_hist(got, want):
    torch.testing.assert_close(got[0].cpu(), want[0], rtol=1e-6, atol=1e-6)
    for a, b in zip(got[1] if isinstance(got[1], (list, tuple)) else [got[1]],
                    want[1] if isinstance(want[1], (list, tuple)) else [want[1]]):
        torch.testing.assert_close(a.cpu(), b, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_histogram(dtype):
    g = torch.Generator().manual_seed(4)
    x = torch.randn(200, generator=g, dtype=dtype)
    w = torch.rand(200, generator=g, dtype=dtype)
    for kw in (dict(bins=10), dict(bins=7, range=(-1.0, 1.0)), dict(bins=5, density=True),
               dict(bins=4, weight=w), dict(bins=3, weight=w, density=True, range=(0.0, 3.0))):
        tkw = {k: _t(v) if isinstance(v, torch.Tensor) else v for k, v in kw.items()}
        _same_hist(torch.histogram(_t(x), **tkw), torch.histogram(x, **kw))
    edges = torch.tensor([-2.0, -0.5, 0.0, 0.3, 2.0], dtype=dtype)
    _same_hist(torch.histogram(_t(x), _t(edges)), torch.histogram(x, edges))
    # Values on the edges: the right edge of the last bin is inside; out of
    # range and NaN are dropped; a single value gets the range v +- 0.5.
    on = torch.tensor([0.0, 1.0, 2.0, 3.0, 4.0, -1.0, 5.0, NAN], dtype=dtype)
    _same_hist(torch.histogram(_t(on), bins=4, range=(0.0, 4.0)), torch.histogram(on, bins=4, range=(0.0, 4.0)))
    one = torch.full((5,), 2.0, dtype=dtype)
    _same_hist(torch.histogram(_t(one), bins=4), torch.histogram(one, bins=4))


def test_histogramdd():
    g = torch.Generator().manual_seed(5)
    y = torch.randn(60, 3, generator=g)
    w = torch.rand(60, generator=g)
    for kw in (dict(bins=[3, 4, 2]), dict(bins=3, density=True), dict(bins=[2, 2, 2], weight=w),
               dict(bins=[2, 3, 2], range=[-1.0, 1.0, -2.0, 2.0, 0.0, 1.0])):
        tkw = {k: _t(v) if isinstance(v, torch.Tensor) else v for k, v in kw.items()}
        _same_hist(torch.histogramdd(_t(y), **tkw), torch.histogramdd(y, **kw))
    edges = [torch.tensor([-1.0, 0, 1]), torch.tensor([-3.0, 3]), torch.tensor([0.0, 0.5, 1, 2])]
    _same_hist(torch.histogramdd(_t(y), bins=[_t(e) for e in edges]), torch.histogramdd(y, bins=edges))


def test_histogram_errors():
    x = torch.randn(10, device="tpu")
    with pytest.raises(RuntimeError, match="bins must be > 0"):
        torch.histogram(x, bins=0)
    with pytest.raises(RuntimeError, match="min should not exceed max"):
        torch.histogram(x, bins=3, range=(1.0, 0.0))
    with pytest.raises(RuntimeError, match="not finite"):
        torch.histogram(torch.tensor([1.0, float("inf")], device="tpu"), bins=3)[0].cpu()
