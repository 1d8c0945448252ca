"""Backward kernels of the NN ops (the ones autograd calls when training
MLPs, CNNs and transformers) and adaptive average pooling, against PyTorch
CPU: the reference is the aten op on CPU or autograd through the forward."""

import pytest
import torch
import torch.nn.functional as F

from conftest import call, check, tol_for

A = torch.ops.aten
torch.manual_seed(0)


def sample(shape, dtype=torch.float32, scale=1.0):
    return (torch.randn(shape) * scale).to(dtype)


def check_all(got, want, **tol):
    assert len(got) == len(want)
    for g, e in zip(got, want):
        if e is None:
            assert g is None, g
        else:
            check(g, e, **tol)


# --------------------------------------------------------------------- loss

@pytest.mark.parametrize("reduction", [0, 1, 2])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_nll_loss_backward(rt, reduction, weighted, dtype):
    x = F.log_softmax(torch.randn(6, 5), 1).to(dtype)
    t = torch.tensor([0, 4, 2, 1, 2, 3])
    w = torch.rand(5).to(dtype) if weighted else None
    for ignore in [-100, 2]:
        _, total = A.nll_loss_forward(x, t, w, reduction, ignore)
        g = sample((6,) if reduction == 0 else (), dtype)
        want = A.nll_loss_backward(g, x, t, w, reduction, ignore, total)
        got = call(rt, "aten::nll_loss_backward", g, x, t, w, reduction, ignore, total)
        check(got, want, **tol_for(dtype))


def test_nll_loss_backward_1d_and_all_ignored(rt):
    x, t = torch.randn(5), torch.tensor(3)
    for reduction in [0, 1, 2]:
        _, total = A.nll_loss_forward(x, t, None, reduction, -100)
        g = torch.tensor(1.5)
        check(call(rt, "aten::nll_loss_backward", g, x, t, None, reduction, -100, total),
              A.nll_loss_backward(g, x, t, None, reduction, -100, total))
    # Mean over zero total weight: the gradient is all zeros, not nan.
    x2, t2 = torch.randn(3, 4), torch.tensor([1, 1, 1])
    _, total = A.nll_loss_forward(x2, t2, None, 1, 1)
    g = torch.tensor(1.0)
    check(call(rt, "aten::nll_loss_backward", g, x2, t2, None, 1, 1, total),
          A.nll_loss_backward(g, x2, t2, None, 1, 1, total))


@pytest.mark.parametrize("reduction", [0, 1, 2])
def test_nll_loss2d_backward(rt, reduction):
    x = torch.randn(2, 4, 3, 5)
    t = torch.randint(0, 4, (2, 3, 5))
    w = torch.rand(4)
    _, total = A.nll_loss2d_forward(x, t, w, reduction, 1)
    g = torch.randn(2, 3, 5) if reduction == 0 else torch.tensor(0.7)
    check(call(rt, "aten::nll_loss2d_backward", g, x, t, w, reduction, 1, total),
          A.nll_loss2d_backward(g, x, t, w, reduction, 1, total), atol=1e-6, rtol=1e-5)


def test_cross_entropy_grad_against_autograd(rt):
    logits = torch.randn(4, 7, requires_grad=True)
    t = torch.tensor([1, 6, 0, 3])
    loss = F.cross_entropy(logits, t)
    (want,) = torch.autograd.grad(loss, logits)
    lsm = A._log_softmax(logits.detach(), 1, False)
    _, total = A.nll_loss_forward(lsm, t, None, 1, -100)
    g = call(rt, "aten::nll_loss_backward", torch.tensor(1.0), lsm, t, None, 1, -100, total)
    got = call(rt, "aten::_log_softmax_backward_data", g, lsm, 1, torch.float32)
    check(got, want, atol=1e-6, rtol=1e-5)


# --------------------------------------------------------------- layer norm

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("norm", [[8], [3, 8]])
@pytest.mark.parametrize("affine", [False, True])
def test_layer_norm_backward(rt, dtype, norm, affine):
    x = sample((2, 3, 8), dtype, scale=2) + 1
    w = sample(norm, dtype) if affine else None
    b = sample(norm, dtype) if affine else None
    _, mean, rstd = A.native_layer_norm(x, norm, w, b, 1e-5)
    g = sample((2, 3, 8), dtype)
    mask = [True, affine, affine]
    want = A.native_layer_norm_backward(g, x, norm, mean, rstd, w, b, mask)
    got = call(rt, "aten::native_layer_norm_backward", g, x, norm, mean, rstd, w, b, mask)
    check_all(got, want, **tol_for(dtype, 1e-4))


def test_layer_norm_backward_mask_and_autograd(rt):
    x = torch.randn(4, 6, requires_grad=True)
    w = torch.randn(6, requires_grad=True)
    b = torch.randn(6, requires_grad=True)
    g = torch.randn(4, 6)
    y = F.layer_norm(x, [6], w, b)
    want = torch.autograd.grad(y, [x, w, b], g)
    _, mean, rstd = A.native_layer_norm(x.detach(), [6], w.detach(), b.detach(), 1e-5)
    args = (g, x.detach(), [6], mean, rstd, w.detach(), b.detach())
    check_all(call(rt, "aten::native_layer_norm_backward", *args, [True, True, True]), want, atol=1e-5, rtol=1e-4)
    got = call(rt, "aten::native_layer_norm_backward", *args, [False, True, False])
    assert got[0] is None and got[2] is None
    check(got[1], want[1], atol=1e-5, rtol=1e-4)


# ---------------------------------------------------------------- embedding

@pytest.mark.parametrize("scale", [False, True])
@pytest.mark.parametrize("padding_idx", [-1, 3])
def test_embedding_dense_backward(rt, scale, padding_idx):
    idx = torch.tensor([[3, 1, 3], [0, 7, 3]])
    g = torch.randn(2, 3, 5)
    want = A.embedding_dense_backward(g, idx, 10, padding_idx, scale)
    check(call(rt, "aten::embedding_dense_backward", g, idx, 10, padding_idx, scale), want, atol=1e-6, rtol=1e-5)


def test_embedding_dense_backward_int32_bf16(rt):
    idx = torch.tensor([4, 4, 0, 2], dtype=torch.int32)
    g = sample((4, 3), torch.bfloat16)
    want = A.embedding_dense_backward(g, idx, 6, -1, False)
    check(call(rt, "aten::embedding_dense_backward", g, idx, 6, -1, False), want, **tol_for(torch.bfloat16))


# -------------------------------------------------------------- convolution

CONV = [
    # input, weight, stride, padding, dilation, transposed, output_padding, groups
    ((2, 4, 8, 7), (6, 4, 3, 3), [1, 1], [0, 0], [1, 1], False, [0, 0], 1),
    ((2, 4, 8, 7), (6, 4, 3, 3), [2, 2], [1, 1], [1, 1], False, [0, 0], 1),
    ((2, 4, 9, 8), (6, 4, 3, 2), [2, 3], [1, 0], [2, 1], False, [0, 0], 1),
    ((2, 4, 8, 7), (6, 2, 3, 3), [1, 1], [1, 1], [1, 1], False, [0, 0], 2),
    ((2, 4, 8, 7), (8, 1, 3, 3), [2, 1], [0, 1], [1, 2], False, [0, 0], 4),
    ((2, 3, 11), (6, 3, 3), [2], [2], [1], False, [0], 1),
    ((2, 3, 11), (6, 1, 3), [1], [1], [3], False, [0], 3),
    ((2, 4, 5, 6), (4, 3, 3, 3), [1, 1], [0, 0], [1, 1], True, [0, 0], 1),
    ((2, 4, 5, 6), (4, 3, 3, 3), [2, 2], [1, 1], [1, 1], True, [1, 0], 1),
    ((2, 4, 5, 6), (4, 3, 3, 3), [2, 1], [0, 2], [1, 2], True, [1, 0], 1),
    ((2, 4, 5, 6), (4, 3, 3, 3), [2, 2], [1, 0], [1, 1], True, [0, 1], 2),
    ((1, 2, 7), (2, 3, 4), [3], [1], [1], True, [2], 1),
]


@pytest.mark.parametrize("cfg", CONV)
def test_convolution_backward(rt, cfg):
    xs, ws, stride, padding, dilation, transposed, output_padding, groups = cfg
    x, w = sample(xs), sample(ws)
    y = A.convolution(x, w, None, stride, padding, dilation, transposed, output_padding, groups)
    g = sample(tuple(y.shape))
    bias_sizes = [y.shape[1]]
    args = (g, x, w, bias_sizes, stride, padding, dilation, transposed, output_padding, groups)
    want = A.convolution_backward(*args, [True, True, True])
    got = call(rt, "aten::convolution_backward", *args, [True, True, True])
    check_all(got, want, atol=1e-4, rtol=1e-4)


def test_convolution_backward_mask_and_autograd(rt):
    x = torch.randn(2, 3, 6, 6, requires_grad=True)
    w = torch.randn(4, 3, 3, 3, requires_grad=True)
    b = torch.randn(4, requires_grad=True)
    y = F.conv2d(x, w, b, stride=2, padding=1)
    g = torch.randn_like(y)
    want = torch.autograd.grad(y, [x, w, b], g)
    args = (g, x.detach(), w.detach(), [4], [2, 2], [1, 1], [1, 1], False, [0, 0], 1)
    check_all(call(rt, "aten::convolution_backward", *args, [True, True, True]), want, atol=1e-4, rtol=1e-4)
    got = call(rt, "aten::convolution_backward", *args, [False, True, False])
    assert got[0] is None and got[2] is None
    check(got[1], want[1], atol=1e-4, rtol=1e-4)


def test_convolution_backward_bf16(rt):
    dt = torch.bfloat16
    x, w = sample((2, 3, 6, 6), dt), sample((4, 3, 3, 3), dt)
    g = sample((2, 4, 6, 6), dt)
    args = (g, x, w, [4], [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
    want = A.convolution_backward(g.float(), x.float(), w.float(), *args[3:], [True, True, True])
    got = call(rt, "aten::convolution_backward", *args, [True, True, True])
    # Sums of 27..72 bf16 products rounded once: compare against f32 loosely.
    check_all(got, [t.to(dt) for t in want], atol=6e-2, rtol=2e-2)


# ------------------------------------------------------------------ pooling

MAXPOOL = [
    ([2, 2], [], [0, 0], [1, 1], False),
    ([3, 3], [2, 2], [1, 1], [1, 1], False),
    ([3, 2], [2, 2], [1, 1], [1, 1], True),
    ([2, 3], [1, 2], [0, 1], [2, 1], False),
    ([3], [1], [1], [1], False),  # overlapping windows: indices repeat
]


@pytest.mark.parametrize("cfg", MAXPOOL)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_max_pool2d_backward(rt, cfg, dtype):
    k, s, p, d, ceil = cfg
    x = sample((2, 3, 8, 7), dtype)
    y, idx = A.max_pool2d_with_indices(x, k, s, p, d, ceil)
    g = sample(tuple(y.shape), dtype)
    # Overlapping windows add several gradients into one element: the
    # reference sums them in f32 and rounds once, as the kernel does
    # (PyTorch's CPU kernel rounds after every addition).
    want = A.max_pool2d_with_indices_backward(g.float(), x.float(), k, s, p, d, ceil, idx).to(dtype)
    got = call(rt, "aten::max_pool2d_with_indices_backward", g, x, k, s, p, d, ceil, idx)
    check(got, want, **tol_for(dtype))


AVGPOOL = [
    ([2, 2], [], [0, 0], False, True, None),
    ([3, 3], [2, 2], [1, 1], False, True, None),
    ([3, 3], [2, 2], [1, 1], False, False, None),
    ([3, 2], [2, 2], [1, 1], True, True, None),
    ([3, 2], [2, 2], [1, 1], True, False, None),
    ([2, 3], [1, 2], [1, 1], False, True, 5),
    ([3], [1], [1], False, True, None),
]


@pytest.mark.parametrize("cfg", AVGPOOL)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_avg_pool2d_backward(rt, cfg, dtype):
    x = sample((2, 3, 8, 7), dtype)
    y = A.avg_pool2d(x, *cfg)
    g = sample(tuple(y.shape), dtype)
    k, s, p, ceil, include, div = cfg
    want = A.avg_pool2d_backward(g, x, k, s or k, p, ceil, include, div)
    got = call(rt, "aten::avg_pool2d_backward", g, x, k, s, p, ceil, include, div)
    check(got, want, **tol_for(dtype))


def test_avg_pool2d_backward_unbatched(rt):
    x = sample((3, 7, 7))
    y = A.avg_pool2d(x, [3, 3], [2, 2], [1, 1], True, False)
    g = torch.randn_like(y)
    want = A.avg_pool2d_backward(g, x, [3, 3], [2, 2], [1, 1], True, False, None)
    check(call(rt, "aten::avg_pool2d_backward", g, x, [3, 3], [2, 2], [1, 1], True, False, None), want)


# --------------------------------------------------------- adaptive pooling

@pytest.mark.parametrize("shape,out", [((2, 3, 8, 8), [1, 1]), ((2, 3, 7, 9), [3, 4]), ((3, 5, 5), [5, 2]),
                                       ((1, 2, 4, 6), [6, 7])])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_adaptive_avg_pool2d(rt, shape, out, dtype):
    x = sample(shape, dtype)
    y = A._adaptive_avg_pool2d(x, out)
    check(call(rt, "aten::_adaptive_avg_pool2d", x, out), y, **tol_for(dtype))
    g = sample(tuple(y.shape), dtype)
    want = A._adaptive_avg_pool2d_backward(g, x)
    check(call(rt, "aten::_adaptive_avg_pool2d_backward", g, x), want, **tol_for(dtype))


@pytest.mark.parametrize("out", [1, 3, 5])
def test_adaptive_avg_pool1d(rt, out):
    x = sample((2, 3, 10))
    check(call(rt, "aten::adaptive_avg_pool1d", x, [out]), A.adaptive_avg_pool1d(x, [out]), atol=1e-6, rtol=1e-5)


# --------------------------------------------------------------- batch norm

def bn_inputs(shape, dtype, pdtype):
    c = shape[1]
    x = sample(shape, dtype, scale=2) + 0.5
    w, b = sample((c,), pdtype), sample((c,), pdtype)
    rm, rv = sample((c,), pdtype), (torch.rand(c) + 0.5).to(pdtype)
    return x, w, b, rm, rv


@pytest.mark.parametrize("shape", [(4, 3), (2, 3, 5), (2, 3, 4, 5)])
@pytest.mark.parametrize("dtype,pdtype", [(torch.float32, torch.float32), (torch.bfloat16, torch.bfloat16),
                                          (torch.bfloat16, torch.float32)])
@pytest.mark.parametrize("training", [True, False])
def test_batch_norm_legit(rt, shape, dtype, pdtype, training):
    x, w, b, rm, rv = bn_inputs(shape, dtype, pdtype)
    want_rm, want_rv = rm.clone(), rv.clone()
    want = A._native_batch_norm_legit(x, w, b, want_rm, want_rv, training, 0.1, 1e-5)
    # The running statistics are written in place.
    from conftest import cpu, tpu
    trm, trv = tpu(rt, rm), tpu(rt, rv)
    out = rt.call("aten::_native_batch_norm_legit", tpu(rt, x), tpu(rt, w), tpu(rt, b), trm, trv, training, 0.1, 1e-5)
    # bf16 input: PyTorch's CPU kernel folds the affine terms differently, so
    # an output near zero may differ by one bf16 ulp of the (larger)
    # intermediate terms: about 0.03 for values of 4 to 8.
    tol = tol_for(dtype, 1e-5) if dtype == torch.float32 else {"atol": 4e-2, "rtol": 1.6e-2}
    check_all([cpu(t) for t in out], want, **tol)
    check(cpu(trm), want_rm, **tol_for(pdtype, 1e-5))
    check(cpu(trv), want_rv, **tol_for(pdtype, 1e-5))


def test_batch_norm_no_stats_and_no_training(rt):
    x, w, b, rm, rv = bn_inputs((3, 4, 5), torch.float32, torch.float32)
    check_all(call(rt, "aten::_native_batch_norm_legit.no_stats", x, w, b, True, 0.1, 1e-5),
              A._native_batch_norm_legit.no_stats(x, w, b, True, 0.1, 1e-5), atol=1e-5, rtol=1e-5)
    check_all(call(rt, "aten::_native_batch_norm_legit.no_stats", x, None, None, True, 0.1, 1e-3),
              A._native_batch_norm_legit.no_stats(x, None, None, True, 0.1, 1e-3), atol=1e-5, rtol=1e-5)
    check_all(call(rt, "aten::_native_batch_norm_legit_no_training", x, w, b, rm, rv, 0.1, 1e-5),
              A._native_batch_norm_legit_no_training(x, w, b, rm, rv, 0.1, 1e-5), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("train", [True, False])
@pytest.mark.parametrize("dtype,pdtype", [(torch.float32, torch.float32), (torch.bfloat16, torch.float32)])
def test_batch_norm_backward(rt, train, dtype, pdtype):
    x, w, b, rm, rv = bn_inputs((2, 3, 4, 5), dtype, pdtype)
    _, sm, si = A._native_batch_norm_legit(x, w, b, rm.clone(), rv.clone(), True, 0.1, 1e-5)
    g = sample(tuple(x.shape), dtype)
    mask = [True, True, True]
    # Evaluation mode passes what autograd passes: the empty saved statistics.
    empty = torch.empty(0, dtype=sm.dtype)
    args = (g, x, w, rm, rv, sm if train else empty, si if train else empty, train, 1e-5, mask)
    want = A.native_batch_norm_backward(*args)
    got = call(rt, "aten::native_batch_norm_backward", *args)
    tol = {"atol": 1e-4, "rtol": 1e-4} if dtype == torch.float32 else {"atol": 2e-2, "rtol": 2e-2}
    check_all(got, want, **tol)


def test_batch_norm_backward_against_autograd(rt):
    x = torch.randn(4, 3, 5, requires_grad=True)
    w = torch.randn(3, requires_grad=True)
    b = torch.randn(3, requires_grad=True)
    y = F.batch_norm(x, None, None, w, b, training=True)
    g = torch.randn_like(y)
    want = torch.autograd.grad(y, [x, w, b], g)
    _, sm, si = A._native_batch_norm_legit.no_stats(x.detach(), w.detach(), b.detach(), True, 0.1, 1e-5)
    got = call(rt, "aten::native_batch_norm_backward", g, x.detach(), w.detach(), None, None, sm, si, True, 1e-5,
               [True, True, True])
    check_all(got, want, atol=1e-5, rtol=1e-4)
    got = call(rt, "aten::native_batch_norm_backward", g, x.detach(), w.detach(), None, None, sm, si, True, 1e-5,
               [True, False, False])
    assert got[1] is None and got[2] is None
    check(got[0], want[0], atol=1e-5, rtol=1e-4)


# --------------------------------------------------------------- group norm

@pytest.mark.parametrize("shape,group", [((2, 4, 5), 2), ((2, 6, 3, 4), 3), ((3, 12), 2), ((2, 4, 3, 3), 1)])
@pytest.mark.parametrize("affine", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_group_norm(rt, shape, group, affine, dtype):
    x = sample(shape, dtype, scale=2) + 1
    n, c = shape[0], shape[1]
    hw = x.numel() // (n * c)
    w = sample((c,), dtype) if affine else None
    b = sample((c,), dtype) if affine else None
    want = A.native_group_norm(x, w, b, n, c, hw, group, 1e-5)
    got = call(rt, "aten::native_group_norm", x, w, b, n, c, hw, group, 1e-5)
    check_all(got, want, **tol_for(dtype, 1e-4))
    _, mean, rstd = want
    g = sample(shape, dtype)
    mask = [True, affine, affine]
    want = A.native_group_norm_backward(g, x, mean, rstd, w, n, c, hw, group, mask)
    got = call(rt, "aten::native_group_norm_backward", g, x, mean, rstd, w, n, c, hw, group, mask)
    check_all(got, want, **tol_for(dtype, 1e-4))


@pytest.mark.parametrize("cfg", [([3], [], [0], False, True), ([3], [2], [1], False, True), ([3], [2], [1], True, False),
                                 ([4], [3], [2], True, True)])
@pytest.mark.parametrize("shape", [(2, 3, 11), (3, 9)])
def test_avg_pool1d(rt, cfg, shape):
    x = sample(shape)
    check(call(rt, "aten::avg_pool1d", x, *cfg), A.avg_pool1d(x, *cfg), atol=1e-6, rtol=1e-5)
