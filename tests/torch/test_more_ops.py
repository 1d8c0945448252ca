"""Ops added for PyTorch's stock modules and functions, against the CPU:
threshold (and in place), channel_shuffle, renorm for several p, logspace
in float, double and integer dtypes, and _batch_norm_with_update (the
training batch norm torch.compile and export emit) with its
running-statistics update."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F


def _t(x):
    return x.to("tpu")


def _same(got, want):
    got = got if isinstance(got, (tuple, list)) else (got,)
    want = want if isinstance(want, (tuple, list)) else (want,)
    for g, w in zip(got, want):
        torch.testing.assert_close(g.cpu(), w, equal_nan=True)


def test_threshold_and_channel_shuffle():
    x = torch.randn(4, 6, 5, generator=torch.Generator().manual_seed(0))
    x[0, 0, 0] = float("nan")
    _same(F.threshold(_t(x), 0.1, 20.0), F.threshold(x, 0.1, 20.0))
    y, yt = x.clone(), _t(x)
    F.threshold_(y, 0.1, -1.0)
    F.threshold_(yt, 0.1, -1.0)
    _same(yt, y)
    _same(F.channel_shuffle(_t(x), 3), F.channel_shuffle(x, 3))
    with pytest.raises(RuntimeError, match="divisible by groups"):
        F.channel_shuffle(_t(x), 4)


@pytest.mark.parametrize("p", [1, 2, 3.5, float("inf")])
def test_renorm(p):
    z = torch.randn(5, 4, 3, generator=torch.Generator().manual_seed(1)) * 3
    _same(torch.renorm(_t(z), p, 1, 2.0), torch.renorm(z, p, 1, 2.0))
    w, wt = z.clone(), _t(z)
    w.renorm_(p, 0, 1.5)
    wt.renorm_(p, 0, 1.5)
    _same(wt, w)


@pytest.mark.parametrize("args,kw", [((-2, 3, 11), {}), ((0, 10, 6), dict(base=2.0, dtype=torch.int64)),
                                     ((0.5, -1, 7), dict(dtype=torch.float64)), ((1, 1, 1), {}), ((0, 1, 0), {})])
def test_logspace(args, kw):
    _same(torch.logspace(*args, device="tpu", **kw), torch.logspace(*args, **kw))


def test_batch_norm_with_update():
    g = torch.Generator().manual_seed(2)
    x, w, b = torch.randn(4, 3, 5, generator=g), torch.randn(3, generator=g), torch.randn(3, generator=g)
    rm, rv = torch.zeros(3), torch.ones(3)
    rmt, rvt = _t(rm), _t(rv)
    ref = torch.ops.aten._batch_norm_with_update(x, w, b, rm, rv, 0.1, 1e-5)
    got = torch.ops.aten._batch_norm_with_update(_t(x), _t(w), _t(b), rmt, rvt, 0.1, 1e-5)
    _same(got, ref)
    _same((rmt, rvt), (rm, rv))


def test_angle_of_real_numbers():
    x = torch.tensor([-1.0, 0, 2, float("nan"), -0.0])
    _same(torch.angle(_t(x)), torch.angle(x))
    i = torch.tensor([-3, 0, 4])
    _same(torch.angle(_t(i)), torch.angle(i))


def test_embedding_bag_without_grad():
    """Under no_grad nn.EmbeddingBag calls _embedding_bag_forward_only."""
    torch.manual_seed(0)
    idx, off = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9]), torch.tensor([0, 4])
    for mode in ("sum", "mean", "max"):
        eb = torch.nn.EmbeddingBag(10, 3, mode=mode)
        with torch.no_grad():
            _same(eb.to("tpu")(_t(idx), _t(off)), eb.cpu()(idx, off))


@pytest.mark.filterwarnings("ignore:index_reduce")
@pytest.mark.parametrize("reduce", ["prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_index_reduce(reduce, include_self):
    g = torch.Generator().manual_seed(5)
    x, src = torch.randn(5, 4, 3, generator=g), torch.randn(5, 6, 3, generator=g)
    idx = torch.tensor([0, 2, 2, 3, 0, 1])
    _same(_t(x).index_reduce(1, _t(idx), _t(src), reduce, include_self=include_self),
          x.index_reduce(1, idx, src, reduce, include_self=include_self))
    xi, si = torch.randint(-5, 5, (4, 3), generator=g), torch.randint(-5, 5, (4, 5), generator=g)
    ii = torch.tensor([0, 2, 2, 1, 0])
    _same(_t(xi).index_reduce(1, _t(ii), _t(si), reduce, include_self=include_self),
          xi.index_reduce(1, ii, si, reduce, include_self=include_self))


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.float64])
def test_factory_out_forms(dtype):
    """arange(out=) and linspace(out=): the factory runs in the out's dtype
    (core derives the out= form from the factory's functional overload)."""
    stop, step = (1, 0.3) if dtype.is_floating_point else (10, 3)
    got = torch.arange(0, stop, step, out=torch.empty(0, device="tpu", dtype=dtype))
    _same(got, torch.arange(0, stop, step, out=torch.empty(0, dtype=dtype)))
    if dtype.is_floating_point:
        o = torch.empty(5, device="tpu", dtype=dtype)
        torch.linspace(0, 1, 5, out=o)
        _same(o, torch.linspace(0, 1, 5, dtype=dtype))


@pytest.mark.parametrize("p", [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, float("inf")])
def test_cdist_and_pdist_gradients(p):
    """The distance backward kernels against the CPU's, every special p,
    broadcast batches, a repeated row (distance 0) and the Euclidean
    matmul path (more than 25 rows)."""
    g = torch.Generator().manual_seed(0)
    x1 = torch.randn(2, 1, 4, 3, generator=g)
    x2 = torch.randn(3, 5, 3, generator=g)
    x2[0, 1] = x1[0, 0, 2]  # a zero distance
    for a, b in ((x1, x2), (torch.randn(30, 3, generator=g), torch.randn(27, 3, generator=g))):
        ca, cb = a.clone().requires_grad_(), b.clone().requires_grad_()
        ta, tb = a.to("tpu").requires_grad_(), b.to("tpu").requires_grad_()
        cy, ty = torch.cdist(ca, cb, p=p), torch.cdist(ta, tb, p=p)
        w = torch.randn(cy.shape, generator=g)
        (cy * w).sum().backward()
        (ty * w.to("tpu")).sum().backward()
        torch.testing.assert_close(ty.cpu(), cy.detach(), rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(ta.grad.cpu(), ca.grad, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(tb.grad.cpu(), cb.grad, rtol=1e-4, atol=1e-4)
    x = torch.randn(6, 4, generator=g)
    x[3] = x[1]
    cx_, tx = x.clone().requires_grad_(), x.to("tpu").requires_grad_()
    cy, ty = torch.pdist(cx_, p=p), torch.pdist(tx, p=p)
    w = torch.randn(cy.shape, generator=g)
    (cy * w).sum().backward()
    (ty * w.to("tpu")).sum().backward()
    torch.testing.assert_close(tx.grad.cpu(), cx_.grad, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dim,size,step", [(1, 4, 3), (1, 3, 5), (-1, 2, 1), (0, 3, 3)])
def test_unfold_backward_adds_overlapping_windows(dim, size, step):
    x = torch.randn(3, 10, 4, generator=torch.Generator().manual_seed(0))
    w = x.unfold(dim, size, step)
    g = torch.randn(w.shape, generator=torch.Generator().manual_seed(1))
    want = torch.ops.aten.unfold_backward(g, list(x.shape), dim, size, step)
    got = torch.ops.aten.unfold_backward(g.to("tpu"), list(x.shape), dim, size, step)
    torch.testing.assert_close(got.cpu(), want)
    # Through autograd, as unfold's gradient.
    xt = x.to("tpu").requires_grad_()
    xt.unfold(dim, size, step).mul(g.to("tpu")).sum().backward()
    torch.testing.assert_close(xt.grad.cpu(), want)


@pytest.mark.parametrize("reduce", ["sum", "mean", "prod", "max", "min"])
def test_segment_reduce(reduce):
    """torch._segment_reduce forward and backward against the CPU: empty
    segments with and without `initial`, lengths per row (axis 1), offsets,
    lengths that cover only part of the axis (unsafe), and zeros, NaN and
    ties, which the prod and max/min gradients treat specially."""
    g = torch.Generator().manual_seed(11)
    data = torch.randn(7, 3, generator=g)
    data[1, 0] = 0.0
    data[4, 1] = float("nan")
    data[5, 2] = data[6, 2]  # a tie in the last segment
    cases = [
        dict(lengths=torch.tensor([2, 0, 3, 2])),
        dict(lengths=torch.tensor([2, 0, 3, 2]), initial=2.0),
        dict(offsets=torch.tensor([0, 2, 2, 5, 7])),
        dict(lengths=torch.tensor([1, 3, 0]), unsafe=True),
    ]
    for kw in cases:
        a = data.clone().requires_grad_()
        want = torch._segment_reduce(a, reduce, **kw)
        t = data.to("tpu").requires_grad_()
        got = torch._segment_reduce(t, reduce, **{k: v.to("tpu") if isinstance(v, torch.Tensor) else v
                                                   for k, v in kw.items()})
        torch.testing.assert_close(got.detach().cpu(), want.detach(), equal_nan=True)
        cot = torch.randn(want.shape, generator=g)
        want.backward(cot)
        got.backward(cot.to("tpu"))
        torch.testing.assert_close(t.grad.cpu(), a.grad, equal_nan=True)
    # Lengths per row: segments along axis 1 of a [3, 6] tensor.
    x = torch.randn(3, 6, generator=g)
    lengths = torch.tensor([[2, 4], [6, 0], [1, 5]])
    torch.testing.assert_close(torch._segment_reduce(x.to("tpu"), reduce, lengths=lengths.to("tpu"), axis=1).cpu(),
                               torch._segment_reduce(x, reduce, lengths=lengths, axis=1), equal_nan=True)
