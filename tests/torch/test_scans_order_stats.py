"""Scans (cummax, cummin, logcumsumexp) and order statistics (median,
nanmedian, kthvalue) against the CPU, values and indices, with the cases
the OpInfo samples rarely draw: NaNs (which win a running max and sort
last), ties (a later element wins a running max; the first of equal values
keeps its place in a sort), rows of NaN only, infinities, integer dtypes
and empty input."""

from __future__ import annotations

import pytest
import torch

NAN, INF = float("nan"), float("inf")


def _same(got, want):
    got = tuple(got) if isinstance(got, tuple) else (got,)
    want = tuple(want) if isinstance(want, tuple) else (want,)
    for g, w in zip(got, want):
        torch.testing.assert_close(g.cpu(), w, equal_nan=True, rtol=1e-6, atol=1e-6)


def _t(x):
    return x.to("tpu")


@pytest.mark.parametrize("op", [torch.cummax, torch.cummin])
def test_running_extremes_with_nan_and_ties(op):
    for x in (torch.tensor([1.0, 3, 3, 2, NAN, 5, NAN, 1]), torch.tensor([1.0, 3, 3, 0, 0, NAN, 5, NAN])):
        _same(op(_t(x), 0), op(x, 0))
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 6, 5, generator=g)
    for d in range(3):
        _same(op(_t(x), d), op(x, d))
    i = torch.randint(0, 4, (5, 7), generator=g)
    _same(op(_t(i), 1), op(i, 1))


def test_logcumsumexp():
    x = torch.tensor([-1000.0, 0, INF, 1, -INF])
    _same(torch.logcumsumexp(_t(x), 0), torch.logcumsumexp(x, 0))
    g = torch.Generator().manual_seed(1)
    y = torch.randn(3, 9, generator=g) * 20
    for d in range(2):
        _same(torch.logcumsumexp(_t(y), d), torch.logcumsumexp(y, d))


def test_median_and_nanmedian():
    m = torch.tensor([[3.0, 1, NAN, 2, NAN], [4, 1, 2, 3, 5], [NAN] * 5])
    for op in (torch.median, torch.nanmedian):
        _same(op(_t(m)), op(m))
        _same(op(_t(m), 1), op(m, 1))
        _same(op(_t(m), 0, keepdim=True), op(m, 0, keepdim=True))
        _same(op(_t(torch.tensor([]))), op(torch.tensor([])))
    i = torch.tensor([3, 1, 2, 7])
    _same(torch.median(_t(i)), torch.median(i))


def test_kthvalue():
    g = torch.Generator().manual_seed(2)
    x = torch.randn(4, 6, 5, generator=g)
    for k in (1, 3, 5):
        _same(torch.kthvalue(_t(x), k, 2), torch.kthvalue(x, k, 2))
    y = torch.tensor([3.0, 1, NAN, 2])
    _same(torch.kthvalue(_t(y), 4), torch.kthvalue(y, 4))
    with pytest.raises(RuntimeError, match="k out of range"):
        torch.kthvalue(_t(y), 5)


def test_mode_value_and_last_index():
    """The most frequent value, the smallest of equally frequent ones, and
    the index of its last occurrence (PyTorch's answer; NaNs never tie)."""
    for x in (torch.tensor([2, 1, 2, 1, 3]), torch.tensor([5.0, 1, 5, 1, 3, 1, 5]),
              torch.tensor([1.0, NAN, NAN, 2]), torch.tensor([7])):
        _same(torch.mode(_t(x)), torch.mode(x))
    m = torch.randint(0, 4, (3, 5, 6), generator=torch.Generator().manual_seed(3))
    for d in range(3):
        for keep in (False, True):
            _same(torch.mode(_t(m), d, keep), torch.mode(m, d, keep))


@pytest.mark.parametrize("inverse", [False, True])
@pytest.mark.parametrize("counts", [False, True])
def test_unique_and_unique_consecutive(inverse, counts):
    """Data-dependent sizes: the runtime reads the run count on the host."""
    x = torch.tensor([[3, 1, 2], [1, 3, 3], [7, 7, 0]])
    f = torch.tensor([1.0, NAN, 2.0, NAN, 1.0])
    for op in (torch.unique, torch.unique_consecutive):
        for v in (x, f, torch.tensor([])):
            want = op(v, return_inverse=inverse, return_counts=counts)
            got = op(_t(v), return_inverse=inverse, return_counts=counts)
            _same(got, want)


def test_unique_consecutive_by_dim_says_unsupported():
    with pytest.raises(NotImplementedError, match="only dim=None"):
        torch.unique_consecutive(_t(torch.tensor([[1, 1], [1, 1]])), dim=0)
