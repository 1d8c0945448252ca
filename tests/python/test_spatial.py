"""Spatial ops against PyTorch CPU: reflection / replication padding,
nearest and bilinear upsampling (and their backward kernels), im2col /
col2im, grid_sampler_2d, cdist / pdist and embedding_bag."""

import pytest
import torch

from conftest import call, check, raises, sample, tol_for

A = torch.ops.aten
torch.manual_seed(0)


# ------------------------------------------------------------------ padding

PAD_CASES = [
    (1, (2, 3, 5), [2, 3]),
    (1, (3, 6), [0, 4]),
    (1, (2, 3, 7), [-2, 3]),
    (2, (2, 3, 4, 5), [1, 2, 3, 0]),
    (2, (3, 4, 5), [4, 4, 3, 3]),
    (2, (1, 2, 5, 6), [-1, 2, 1, -2]),
    (3, (1, 2, 3, 4, 5), [1, 2, 2, 1, 2, 0]),
    (3, (2, 4, 4, 3), [2, 0, 1, 3, 3, 1]),
]


@pytest.mark.parametrize("kind", ["reflection", "replication"])
@pytest.mark.parametrize("case", PAD_CASES, ids=lambda c: f"{c[0]}d{list(c[1])}{c[2]}")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32])
def test_pad(rt, kind, case, dtype):
    n, shape, pad = case
    x = sample(shape, dtype, scale=10)
    name = f"{kind}_pad{n}d"
    try:
        want = getattr(A, name)(x, pad)
    except RuntimeError as e:
        raises(rt, str(e).splitlines()[0], f"aten::{name}", x, pad)
        return
    check(call(rt, f"aten::{name}", x, pad), want)


@pytest.mark.parametrize("kind", ["reflection", "replication"])
@pytest.mark.parametrize("case", PAD_CASES, ids=lambda c: f"{c[0]}d{list(c[1])}{c[2]}")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_pad_backward(rt, kind, case, dtype):
    n, shape, pad = case
    x = sample(shape, dtype)
    name = f"{kind}_pad{n}d"
    try:
        out = getattr(A, name)(x, pad)
    except RuntimeError:
        return
    g = sample(out.shape, dtype)
    # PyTorch accumulates bf16 gradients in bf16; this computes in f32 and
    # rounds once, so the reference is the f32 kernel rounded.
    want = getattr(A, f"{name}_backward")(g.float(), x.float(), pad).to(dtype)
    check(call(rt, f"aten::{name}_backward", g, x, pad), want, **tol_for(dtype))


def test_pad_against_autograd(rt):
    # The backward kernels are the adjoint of the forward: compare with autograd.
    x = sample((2, 3, 4, 5)).requires_grad_()
    g = sample((2, 3, 9, 8))
    torch.nn.functional.pad(x, (1, 2, 3, 2), mode="reflect").backward(g)
    check(call(rt, "aten::reflection_pad2d_backward", g, x.detach(), [1, 2, 3, 2]), x.grad)


def test_pad_errors(rt):
    x = sample((1, 3, 4))
    raises(rt, "Padding size should be less than the corresponding input dimension", "aten::reflection_pad1d", x, [4, 2])
    raises(rt, "Padding size should be less than", "aten::reflection_pad2d", x, [1, 1, 3, 1])
    raises(rt, ["Expected 2D or 3D", "[4]"], "aten::reflection_pad1d", sample((4,)), [1, 1])
    raises(rt, "Expected 4D or 5D", "aten::replication_pad3d", x, [1, 1, 1, 1, 1, 1])
    raises(rt, "padding size is expected to be 4, but got: 3", "aten::replication_pad2d", x, [1, 2, 3])
    raises(rt, "Calculated output W: 0", "aten::replication_pad1d", x, [-3, -1])
    raises(rt, "not implemented for", "aten::reflection_pad1d", x > 0, [1, 1])


def test_pad_empty_batch(rt):
    x = torch.zeros(0, 3, 4, 5)
    check(call(rt, "aten::reflection_pad2d", x, [1, 1, 2, 2]), A.reflection_pad2d(x, [1, 1, 2, 2]))


# --------------------------------------------------------------- upsampling

UP_CASES = [
    ((2, 3, 4, 5), [8, 10], None),
    ((1, 2, 5, 7), [3, 4], None),
    ((2, 1, 4, 4), [7, 9], None),
    ((1, 2, 3, 3), [3, 3], None),
    ((1, 1, 4, 6), [6, 9], (1.5, 1.5)),
    ((1, 2, 5, 3), [12, 7], (2.5, 2.4)),
    ((1, 1, 1, 1), [3, 2], None),
]


@pytest.mark.parametrize("case", UP_CASES, ids=lambda c: f"{list(c[0])}->{c[1]}{c[2] or ''}")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_upsample_nearest2d(rt, case, dtype):
    shape, out, scales = case
    x = sample(shape, dtype)
    s = list(scales) if scales else [None, None]
    check(call(rt, "aten::upsample_nearest2d", x, out, *s), A.upsample_nearest2d(x, out, *s))
    g = sample([shape[0], shape[1], *out], dtype)
    want = A.upsample_nearest2d_backward(g, out, list(shape), *s)
    check(call(rt, "aten::upsample_nearest2d_backward", g, out, list(shape), *s), want, **tol_for(dtype))


@pytest.mark.parametrize("case", UP_CASES, ids=lambda c: f"{list(c[0])}->{c[1]}{c[2] or ''}")
@pytest.mark.parametrize("align", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_upsample_bilinear2d(rt, case, align, dtype):
    shape, out, scales = case
    x = sample(shape, dtype)
    s = list(scales) if scales else [None, None]
    tol = tol_for(dtype)
    check(call(rt, "aten::upsample_bilinear2d", x, out, align, *s), A.upsample_bilinear2d(x, out, align, *s), **tol)
    g = sample([shape[0], shape[1], *out], dtype)
    want = A.upsample_bilinear2d_backward(g, out, list(shape), align, *s)
    got = call(rt, "aten::upsample_bilinear2d_backward", g, out, list(shape), align, *s)
    check(got, want, **tol)


def test_upsample_matches_interpolate(rt):
    # F.interpolate goes through the .vec overloads, which decompose to these.
    x = sample((2, 3, 5, 6))
    want = torch.nn.functional.interpolate(x, scale_factor=1.7, mode="bilinear", align_corners=False)
    got = call(rt, "aten::upsample_bilinear2d", x, list(want.shape[2:]), False, 1.7, 1.7)
    check(got, want)
    want = torch.nn.functional.interpolate(x, size=(11, 4), mode="nearest")
    check(call(rt, "aten::upsample_nearest2d", x, [11, 4]), want)


def test_upsample_errors(rt):
    x = sample((2, 3, 4, 5))
    raises(rt, "It is expected input_size equals to 4, but got size 3", "aten::upsample_nearest2d", x[0], [5, 7])
    raises(rt, "It is expected output_size equals to 2, but got size 1", "aten::upsample_nearest2d", x, [5])
    raises(rt, "Input and output sizes should be greater than 0", "aten::upsample_bilinear2d", x, [0, 3], False)
    raises(rt, "not implemented for", "aten::upsample_nearest2d", x.int(), [5, 7])
    raises(
        rt,
        "output.size(3) = 7 but got grad_output.size(3) = 6",
        "aten::upsample_nearest2d_backward",
        sample((2, 3, 5, 6)),
        [5, 7],
        [2, 3, 4, 5],
    )


# ---------------------------------------------------------- im2col / col2im

# (input shape, kernel, dilation, padding, stride)
BLOCK_CASES = [
    ((2, 3, 6, 7), [3, 3], [1, 1], [1, 1], [1, 1]),
    ((1, 2, 8, 9), [2, 3], [2, 1], [0, 2], [2, 3]),
    ((3, 5, 6), [1, 2], [1, 1], [0, 0], [1, 1]),
    ((1, 4, 7, 7), [3, 2], [2, 3], [2, 1], [3, 2]),
]


@pytest.mark.parametrize("case", BLOCK_CASES, ids=lambda c: f"{list(c[0])}k{c[1]}d{c[2]}p{c[3]}s{c[4]}")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_im2col(rt, case, dtype):
    shape, k, d, p, s = case
    x = sample(shape, dtype)
    check(call(rt, "aten::im2col", x, k, d, p, s), A.im2col(x, k, d, p, s))


@pytest.mark.parametrize("case", BLOCK_CASES, ids=lambda c: f"{list(c[0])}k{c[1]}d{c[2]}p{c[3]}s{c[4]}")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_col2im(rt, case, dtype):
    shape, k, d, p, s = case
    cols = A.im2col(sample(shape), k, d, p, s)
    cols = sample(cols.shape, dtype)
    size = list(shape[-2:])
    # PyTorch accumulates bf16 in bf16; this rounds the f32 sum once.
    want = A.col2im(cols.float(), size, k, d, p, s).to(dtype)
    check(call(rt, "aten::col2im", cols, size, k, d, p, s), want, **tol_for(dtype))


def test_fold_unfold_and_bool(rt):
    x = sample((2, 3, 5, 6))
    want = torch.nn.functional.unfold(x, (2, 3), dilation=1, padding=1, stride=2)
    check(call(rt, "aten::im2col", x, [2, 3], [1, 1], [1, 1], [2, 2]), want)
    folded = torch.nn.functional.fold(want, (5, 6), (2, 3), dilation=1, padding=1, stride=2)
    check(call(rt, "aten::col2im", want, [5, 6], [2, 3], [1, 1], [1, 1], [2, 2]), folded)
    b = x > 0
    check(call(rt, "aten::im2col", b, [2, 2], [1, 1], [0, 0], [1, 1]), A.im2col(b, [2, 2], [1, 1], [0, 0], [1, 1]))
    cols = A.im2col(b, [2, 2], [1, 1], [0, 0], [1, 1])
    check(call(rt, "aten::col2im", cols, [5, 6], [2, 2], [1, 1], [0, 0], [1, 1]), A.col2im(cols, [5, 6], [2, 2], [1, 1], [0, 0], [1, 1]))
    e = torch.zeros(0, 3, 5, 6)
    check(call(rt, "aten::im2col", e, [2, 2], [1, 1], [0, 0], [1, 1]), A.im2col(e, [2, 2], [1, 1], [0, 0], [1, 1]))


def test_block_errors(rt):
    x = sample((2, 3, 4, 5))
    raises(rt, "calculated shape of the array of sliding blocks as (-1, 4)", "aten::im2col", x, [6, 2], [1, 1], [0, 0], [1, 1])
    raises(rt, "kernel size should be greater than zero", "aten::im2col", x, [0, 2], [1, 1], [0, 0], [1, 1])
    raises(rt, "padding should be non-negative", "aten::im2col", x, [2, 2], [1, 1], [-1, 0], [1, 1])
    raises(rt, "stride should be greater than zero", "aten::im2col", x, [2, 2], [1, 1], [0, 0], [0, 1])
    raises(rt, "dilation should be greater than zero", "aten::col2im", sample((2, 12, 6)), [3, 4], [2, 2], [0, 1], [0, 0], [1, 1])
    raises(rt, "divisible by the product of kernel_size", "aten::col2im", sample((2, 10, 6)), [3, 4], [2, 2], [1, 1], [0, 0], [1, 1])
    raises(rt, "number of sliding blocks 2 * 3 = 6, but got input.size(2)=7", "aten::col2im", sample((2, 12, 7)), [3, 4], [2, 2], [1, 1], [0, 0], [1, 1])
    raises(rt, "Expected 2D or 3D", "aten::col2im", sample((1, 2, 12, 6)), [3, 4], [2, 2], [1, 1], [0, 0], [1, 1])
    raises(rt, "not implemented for", "aten::im2col", x.int(), [2, 2], [1, 1], [0, 0], [1, 1])


# ------------------------------------------------------------- grid_sampler


@pytest.mark.parametrize("interp", [0, 1], ids=["bilinear", "nearest"])
@pytest.mark.parametrize("padding", [0, 1, 2], ids=["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_grid_sampler_2d(rt, interp, padding, align, dtype):
    x = sample((2, 3, 5, 7), dtype)
    # Reaches well outside [-1, 1] so that every padding mode matters.
    grid = (torch.rand(2, 4, 6, 2) * 3.2 - 1.6).to(dtype)
    # PyTorch's bf16 kernel rounds the coordinates to bf16 at every step,
    # which moves samples across pixels; this computes in f32 and rounds the
    # result once, so the reference is the f32 kernel on the same inputs.
    want = A.grid_sampler_2d(x.double(), grid.double(), interp, padding, align).to(dtype)
    if dtype != torch.bfloat16:
        want = A.grid_sampler_2d(x, grid, interp, padding, align)
    check(call(rt, "aten::grid_sampler_2d", x, grid, interp, padding, align), want, **tol_for(dtype))


def test_grid_sample_functional(rt):
    x = sample((1, 2, 6, 6))
    theta = torch.tensor([[[0.8, -0.3, 0.1], [0.2, 0.9, -0.2]]])
    grid = torch.nn.functional.affine_grid(theta, (1, 2, 4, 5), align_corners=False)
    want = torch.nn.functional.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False)
    check(call(rt, "aten::grid_sampler_2d", x, grid, 0, 0, False), want)


def test_grid_sampler_errors(rt):
    x, g = sample((2, 3, 4, 5)), torch.rand(2, 6, 7, 2)
    raises(rt, "expected grid and input to have same batch size", "aten::grid_sampler_2d", x, g[:1], 0, 0, False)
    raises(rt, "expected grid to have size 2 in last dimension", "aten::grid_sampler_2d", x, g[..., :1], 0, 0, False)
    raises(rt, "expected 4D input", "aten::grid_sampler_2d", x[0], g, 0, 0, False)
    raises(rt, "with dimension 2 being empty", "aten::grid_sampler_2d", x[:, :, :0], g, 0, 0, False)
    raises(rt, "bicubic", "aten::grid_sampler_2d", x, g, 2, 0, False)
    raises(rt, "expected scalar type", "aten::grid_sampler_2d", x, g.double(), 0, 0, False)


# ----------------------------------------------------------- cdist / pdist

PS = [0.0, 1.0, 2.0, 3.0, 0.5, float("inf")]


@pytest.mark.parametrize("p", PS)
@pytest.mark.parametrize(
    "shapes",
    [((5, 3), (4, 3)), ((2, 5, 4), (2, 6, 4)), ((3, 1, 4, 2), (2, 5, 2)), ((30, 3), (7, 3))],
    ids=lambda s: f"{list(s[0])}x{list(s[1])}",
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_cdist(rt, p, shapes, dtype):
    a, b = sample(shapes[0], dtype), sample(shapes[1], dtype)
    if p == 0.0:
        # Repeated coordinates make the p=0 count non-trivial.
        a = a.round()
        b = b.round()
    want = A._cdist_forward(a, b, p, None)
    check(call(rt, "aten::_cdist_forward", a, b, p, None), want, **tol_for(dtype, 1e-4))


@pytest.mark.parametrize("compute_mode", [None, 1, 2])
def test_cdist_compute_modes(rt, compute_mode):
    # The matmul path (mode 1, or more than 25 rows by default) computes
    # |a|^2 - 2ab + |b|^2, clamped at 0: identical rows come out near 0 up to
    # cancellation noise (about sqrt(eps) * |a|), exactly 0 on the direct path.
    a = sample((30, 4))
    b = torch.cat([a[:3], sample((27, 4))])
    want = A._cdist_forward(a, b, 2.0, compute_mode)
    got = call(rt, "aten::_cdist_forward", a, b, 2.0, compute_mode)
    check(got, want, atol=2e-3 if compute_mode != 2 else 1e-5, rtol=1e-4)
    if compute_mode == 2:
        assert (got.diagonal()[:3] == 0).all()


@pytest.mark.parametrize("p", PS)
@pytest.mark.parametrize("n", [1, 2, 6])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_pdist(rt, p, n, dtype):
    x = sample((n, 5), dtype)
    if p == 0.0:
        x = x.round()
    check(call(rt, "aten::_pdist_forward", x, p), A._pdist_forward(x, p), **tol_for(dtype, 1e-5))


def test_distance_errors(rt):
    x = sample((3, 4, 5))
    raises(rt, "X1 and X2 must have the same number of columns. X1: 5 X2: 2", "aten::_cdist_forward", x, x[..., :2], 2.0, None)
    raises(rt, "cdist only supports at least 2D tensors, X1 got: 1D", "aten::_cdist_forward", x[0, 0], x[0], 2.0, None)
    raises(rt, "cdist only supports non-negative p values", "aten::_cdist_forward", x, x, -1.0, None)
    raises(rt, "cdist only supports floating-point dtypes", "aten::_cdist_forward", x.int(), x.int(), 2.0, None)
    raises(rt, "not implemented for", "aten::_cdist_forward", x.bfloat16(), x.bfloat16(), 2.0, None)
    raises(rt, "pdist only supports 2D tensors, got: 3D", "aten::_pdist_forward", x, 2.0)
    raises(rt, "not implemented for", "aten::_pdist_forward", x[0].int(), 2.0)


# ------------------------------------------------------------ embedding_bag

BAG_INDICES = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9, 7, 7])
BAG_OFFSETS = torch.tensor([0, 4, 4, 6, 9])


def check_bag(got, want, dtype):
    assert len(got) == 4
    check(got[0], want[0], **tol_for(dtype))
    for g, w in zip(got[1:], want[1:]):
        check(g, w)


@pytest.mark.parametrize("bag_mode", [0, 1, 2], ids=["sum", "mean", "max"])
@pytest.mark.parametrize("last", [False, True])
@pytest.mark.parametrize("pad", [-1, 4])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_embedding_bag(rt, bag_mode, last, pad, dtype):
    w = sample((10, 3), dtype)
    args = (BAG_INDICES, BAG_OFFSETS, False, bag_mode, False, None, last, pad)
    check_bag(call(rt, "aten::_embedding_bag", w, *args), A._embedding_bag(w, *args), dtype)


@pytest.mark.parametrize("pad", [-1, 2])
def test_embedding_bag_per_sample_weights_and_int32(rt, pad):
    w = sample((10, 4))
    psw = torch.rand(len(BAG_INDICES))
    args = (BAG_INDICES, BAG_OFFSETS, False, 0, False, psw, False, pad)
    check_bag(call(rt, "aten::_embedding_bag", w, *args), A._embedding_bag(w, *args), torch.float32)
    for mode_ in [0, 1, 2]:
        args = (BAG_INDICES.int(), BAG_OFFSETS.int(), False, mode_, False, None, True, pad)
        check_bag(call(rt, "aten::_embedding_bag", w, *args), A._embedding_bag(w, *args), torch.float32)


def test_embedding_bag_max_ties_and_functional(rt):
    w = torch.tensor([[1.0, 2.0], [1.0, 3.0], [0.0, 3.0]])
    args = (torch.tensor([0, 1, 2, 0, 0]), torch.tensor([0, 3]), False, 2, False, None, False, 0)
    check_bag(call(rt, "aten::_embedding_bag", w, *args), A._embedding_bag(w, *args), torch.float32)
    w = sample((20, 5))
    x = torch.randint(0, 20, (4, 3))
    want = torch.nn.functional.embedding_bag(x, w, mode="mean")
    got = call(rt, "aten::_embedding_bag", w, x.reshape(-1), torch.arange(0, 12, 3), False, 1, False, None, False, -1)
    check(got[0], want)


def test_embedding_bag_errors(rt):
    w = sample((10, 3))
    i, o = BAG_INDICES, BAG_OFFSETS
    raises(rt, "per_sample_weights only supported with mode='sum'", "aten::_embedding_bag", w, i, o, False, 2, False, torch.rand(len(i)), False, -1)
    raises(rt, "`mode` must be sum, mean, or max.", "aten::_embedding_bag", w, i, o, False, 3, False, None, False, -1)
    raises(rt, "'indices' to have one of the following scalar types: Long, Int", "aten::_embedding_bag", w, i.float(), o, False, 1, False, None, False, -1)
    raises(rt, "weight has to be a 2D Tensor, but got Tensor of dimension 1", "aten::_embedding_bag", w[0], i, o, False, 1, False, None, False, -1)
