"""NN ops against PyTorch CPU: softmax / log_softmax, layer norm,
convolution (incl. transposed), max / avg pooling (2-d and 3-d, with their
backward kernels), adaptive 3-d average pooling, dropout (statistics),
NLL loss, embedding, extra activations and activation backward kernels."""

import pytest
import torch
import torch.nn.functional as F

import torchtpu
from conftest import FLOATS, call, check, cpu, raises, sample, tol_for, tpu, view

A = torch.ops.aten
torch.manual_seed(0)


def rt_has(name: str) -> bool:
    return bool(torchtpu._capi.lib.ttpu_op_exists(name.encode()))


# ------------------------------------------------------------------ softmax

@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("log", [False, True])
def test_softmax(rt, dtype, dim, log):
    x = sample((3, 4, 5), dtype, scale=4)
    name = "_log_softmax" if log else "_softmax"
    want = getattr(A, name)(x, dim, False)
    check(call(rt, f"aten::{name}", x, dim, False), want, **tol_for(dtype))


def test_softmax_stable_and_edges(rt):
    # Large values must not overflow; an all -inf row gives nan like PyTorch.
    x = torch.tensor([[1000.0, 1001.0, 1002.0], [-1e4, 0.0, 1e4], [float("-inf")] * 3])
    for name in ["_softmax", "_log_softmax"]:
        check(call(rt, f"aten::{name}", x, 1, False), getattr(A, name)(x, 1, False))
    s = torch.tensor(2.5)
    check(call(rt, "aten::_softmax", s, 0, False), A._softmax(s, 0, False))
    check(call(rt, "aten::_log_softmax", s, -1, False), A._log_softmax(s, -1, False))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_softmax_half_to_float(rt, dtype):
    # CPU has no half_to_float kernel; the result is softmax in f32 of the input.
    x = sample((4, 6), dtype, scale=3)
    check(call(rt, "aten::_softmax", x, 1, True), A._softmax(x.float(), 1, False))
    check(call(rt, "aten::_log_softmax", x, 0, True), A._log_softmax(x.float(), 0, False))


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax_int_overload(rt, name):
    x = sample((3, 5), torch.float16, scale=3)
    f = getattr(A, name).int
    check(call(rt, f"aten::{name}.int", x, -1), f(x, -1), **tol_for(torch.float16))
    check(call(rt, f"aten::{name}.int", x, 0, torch.float32), f(x, 0, torch.float32))
    i = torch.tensor([[1, 2, 3], [0, -1, 4]])
    check(call(rt, f"aten::{name}.int", i, 1, torch.float32), f(i, 1, torch.float32))
    # Casting to a narrower dtype rounds the input first.
    y = sample((3, 5), torch.float32, scale=3)
    check(call(rt, f"aten::{name}.int", y, 1, torch.bfloat16), f(y, 1, torch.bfloat16), **tol_for(torch.bfloat16))


def test_softmax_errors(rt):
    raises(rt, ["Dimension out of range", "got 2"], "aten::_softmax", torch.randn(2, 3), 2, False)
    raises(rt, ["softmax", "int64"], "aten::_softmax", torch.tensor([1, 2]), 0, False)
    raises(rt, "Half and BFloat16", "aten::_softmax", torch.randn(3), 0, True)


@pytest.mark.skipif(not rt_has("aten::as_strided"), reason="aten::as_strided not in this branch")
def test_softmax_noncontiguous(rt):
    base = torch.randn(4, 6)
    xt = view(rt, tpu(rt, base), (6, 4), (1, 6))
    got = cpu(rt.call1("aten::_softmax", xt, 1, False))
    check(got, A._softmax(base.t(), 1, False))


# --------------------------------------------------------------- layer norm

@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("norm", [[8], [3, 8]])
@pytest.mark.parametrize("affine", [False, True])
def test_layer_norm(rt, dtype, norm, affine):
    x = sample((2, 3, 8), dtype, scale=2) + 1
    w = sample(norm, dtype) if affine else None
    b = sample(norm, dtype) if affine else None
    got = call(rt, "aten::native_layer_norm", x, norm, w, b, 1e-5)
    want = A.native_layer_norm(x, norm, w, b, 1e-5)
    tol = tol_for(dtype, 1e-4)
    for g, e in zip(got, want):
        check(g, e, **tol)


def test_layer_norm_errors(rt):
    x = torch.randn(2, 3, 5)
    raises(rt, ["normalized_shape=[4]", "[2, 3, 5]"], "aten::native_layer_norm", x, [4], None, None, 1e-5)
    raises(rt, ["weight of shape [3]"], "aten::native_layer_norm", x, [5], torch.randn(3), None, 1e-5)
    raises(rt, "at least 1-dimensional", "aten::native_layer_norm", x, [], None, None, 1e-5)


# -------------------------------------------------------------- convolution

CONV2D = [
    # stride, padding, dilation, groups
    ([1, 1], [0, 0], [1, 1], 1),
    ([2, 2], [1, 1], [1, 1], 1),
    ([1, 2], [2, 1], [2, 1], 1),
    ([1, 1], [1, 1], [1, 1], 2),
    ([2, 1], [0, 1], [1, 2], 4),
]


@pytest.mark.parametrize("cfg", CONV2D)
@pytest.mark.parametrize("bias", [False, True])
def test_conv2d(rt, cfg, bias):
    stride, padding, dilation, groups = cfg
    x = sample((2, 4, 8, 7))
    w = sample((6 if groups != 4 else 8, 4 // groups, 3, 3))
    b = sample((w.shape[0],)) if bias else None
    args = (x, w, b, stride, padding, dilation, False, [0, 0], groups)
    check(call(rt, "aten::convolution", *args), A.convolution(*args), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_conv2d_half(rt, dtype):
    x, w, b = sample((2, 3, 8, 8), dtype), sample((4, 3, 3, 3), dtype), sample((4,), dtype)
    args = (x, w, b, [1], [1], [1], False, [0], 1)
    want = A.convolution(x.float(), w.float(), b.float(), [1], [1], [1], False, [0], 1).to(dtype)
    check(call(rt, "aten::convolution", *args), want, **tol_for(dtype))
    check(call(rt, "aten::convolution", *args), A.convolution(*args), atol=5e-2, rtol=5e-2)


@pytest.mark.parametrize("cfg", [([1], [0], [1], 1), ([2], [2], [1], 1), ([1], [1], [3], 3)])
def test_conv1d(rt, cfg):
    stride, padding, dilation, groups = cfg
    x, w, b = sample((2, 3, 11)), sample((6, 3 // groups, 3)), sample((6,))
    args = (x, w, b, stride, padding, dilation, False, [0], groups)
    check(call(rt, "aten::convolution", *args), A.convolution(*args), atol=1e-4, rtol=1e-4)


def test_conv3d(rt):
    x, w, b = sample((1, 2, 5, 6, 4)), sample((3, 2, 2, 3, 2)), sample((3,))
    args = (x, w, b, [1, 2, 1], [1, 0, 1], [1, 1, 2], False, [0, 0, 0], 1)
    check(call(rt, "aten::convolution", *args), A.convolution(*args), atol=1e-4, rtol=1e-4)


TRANSPOSED = [
    # stride, padding, dilation, output_padding, groups
    ([1, 1], [0, 0], [1, 1], [0, 0], 1),
    ([2, 2], [1, 1], [1, 1], [1, 0], 1),
    ([2, 1], [0, 2], [1, 2], [1, 0], 1),
    ([1, 1], [3, 3], [1, 1], [0, 0], 1),  # padding beyond the kernel: crops
    ([2, 2], [1, 0], [1, 1], [0, 1], 2),
]


@pytest.mark.parametrize("cfg", TRANSPOSED)
def test_conv_transpose2d(rt, cfg):
    stride, padding, dilation, output_padding, groups = cfg
    x = sample((2, 4, 5, 6))
    w = sample((4, 3, 3, 3))
    b = sample((3 * groups,))
    args = (x, w, b, stride, padding, dilation, True, output_padding, groups)
    check(call(rt, "aten::convolution", *args), A.convolution(*args), atol=1e-4, rtol=1e-4)


def test_conv_empty_batch_and_ignored_output_padding(rt):
    x, w = sample((0, 3, 6, 6)), sample((4, 3, 3, 3))
    args = (x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
    check(call(rt, "aten::convolution", *args), A.convolution(*args))
    # A regular convolution ignores output_padding.
    x = sample((1, 3, 6, 6))
    args = (x, w, None, [1, 1], [0, 0], [1, 1], False, [1, 1], 1)
    check(call(rt, "aten::convolution", *args), A.convolution(*args), atol=1e-4, rtol=1e-4)


def test_conv_transpose1d_and_underscore_convolution(rt):
    x, w = sample((1, 2, 7)), sample((2, 3, 4))
    args = (x, w, None, [3], [1], [1], True, [2], 1)
    check(call(rt, "aten::convolution", *args), A.convolution(*args), atol=1e-4, rtol=1e-4)
    x, w = sample((2, 3, 6, 6)), sample((4, 3, 3, 3))
    args = (x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1, False, False, True, True)
    check(call(rt, "aten::_convolution", *args), A._convolution(*args), atol=1e-4, rtol=1e-4)


def test_conv_errors(rt):
    w = torch.randn(4, 3, 3, 3)
    conv = "aten::convolution"
    raises(rt, ["groups=1", "[4, 3, 3, 3]", "input[2, 5, 8, 8]", "3 channels", "5 channels"],
           conv, torch.randn(2, 5, 8, 8), w, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1)
    raises(rt, ["groups=2", "6 channels"],
           conv, torch.randn(2, 3, 8, 8), w, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 2)
    raises(rt, ["4-dimensional weight", "[3, 8, 8]"],
           conv, torch.randn(3, 8, 8), w, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1)
    raises(rt, ["bias", "4 elements", "[3]"],
           conv, torch.randn(2, 3, 8, 8), w, torch.randn(3), [1, 1], [0, 0], [1, 1], False, [0, 0], 1)
    raises(rt, ["Kernel size", "(2 x 2)", "(3 x 3)"],
           conv, torch.randn(2, 3, 2, 2), w, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1)
    raises(rt, "non-positive stride",
           conv, torch.randn(2, 3, 8, 8), w, None, [0, 1], [0, 0], [1, 1], False, [0, 0], 1)
    raises(rt, "negative padding",
           conv, torch.randn(2, 3, 8, 8), w, None, [1, 1], [-1, 0], [1, 1], False, [0, 0], 1)
    raises(rt, ["stride=[1, 1, 1]"],
           conv, torch.randn(2, 3, 8, 8), w, None, [1, 1, 1], [0, 0], [1, 1], False, [0, 0], 1)
    raises(rt, ["float32", "float16"],
           conv, torch.randn(2, 3, 8, 8), w.half(), None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1)
    raises(rt, ["transposed=1", "4 channels", "5 channels"],
           conv, torch.randn(2, 5, 8, 8), torch.randn(4, 3, 3, 3), None, [1, 1], [0, 0], [1, 1], True, [0, 0], 1)
    raises(rt, "output padding must be smaller",
           conv, torch.randn(2, 4, 8, 8), torch.randn(4, 3, 3, 3), None, [2, 2], [0, 0], [1, 1], True, [2, 0], 1)


# ------------------------------------------------------------------ pooling

MAXPOOL = [
    # kernel, stride, padding, dilation, ceil_mode
    ([2, 2], [], [0, 0], [1, 1], False),
    ([3, 3], [2, 2], [1, 1], [1, 1], False),
    ([3, 2], [2, 2], [1, 1], [1, 1], True),
    ([2, 3], [1, 2], [0, 1], [2, 1], False),
    ([3], [3], [1], [1], True),
    ([2, 2], [3, 2], [1, 0], [1, 2], True),
]


@pytest.mark.parametrize("cfg", MAXPOOL)
@pytest.mark.parametrize("dtype", FLOATS)
def test_max_pool2d(rt, cfg, dtype):
    k, s, p, d, ceil = cfg
    x = sample((2, 3, 8, 7), dtype)
    got = call(rt, "aten::max_pool2d_with_indices", x, k, s, p, d, ceil)
    want = A.max_pool2d_with_indices(x, k, s, p, d, ceil)
    check(got[0], want[0])
    check(got[1], want[1])


def test_max_pool2d_unbatched_ties_and_ints(rt):
    x = sample((3, 6, 5))
    for got, want in zip(call(rt, "aten::max_pool2d_with_indices", x, [2, 2], [1, 1], [1, 1]),
                         A.max_pool2d_with_indices(x, [2, 2], [1, 1], [1, 1])):
        check(got, want)
    # Ties keep the first maximum; -inf inputs still index a real element.
    t = torch.tensor([[[[1.0, 1.0, 0.0], [1.0, float("-inf"), 1.0], [float("-inf")] * 3]]])
    for got, want in zip(call(rt, "aten::max_pool2d_with_indices", t, [2, 2], [1, 1], [1, 1], [1, 1], True),
                         A.max_pool2d_with_indices(t, [2, 2], [1, 1], [1, 1], [1, 1], True)):
        check(got, want)
    i = torch.randint(-50, 50, (1, 2, 5, 5), dtype=torch.int64)
    for got, want in zip(call(rt, "aten::max_pool2d_with_indices", i, [3, 3], [2, 2], [1, 1]),
                         A.max_pool2d_with_indices(i, [3, 3], [2, 2], [1, 1])):
        check(got, want)


def test_max_pool2d_nan(rt):
    x = torch.tensor([[[[0.0, float("nan"), 2.0, 3.0], [1.0, 5.0, float("nan"), 4.0]]]])
    for got, want in zip(call(rt, "aten::max_pool2d_with_indices", x, [2, 2]),
                         A.max_pool2d_with_indices(x, [2, 2])):
        check(got, want)


def test_max_pool2d_errors(rt):
    op = "aten::max_pool2d_with_indices"
    raises(rt, ["pad should be at most half", "pad=2", "kernel_size=3"], op, torch.randn(1, 1, 8, 8), [3, 3], [1, 1], [2, 2])
    raises(rt, ["Output size is too small", "(3x2x2)"], op, torch.randn(1, 3, 2, 2), [3, 3], [1, 1], [0, 0])
    raises(rt, ["3D or 4D", "[8, 8]"], op, torch.randn(8, 8), [2, 2])
    raises(rt, "kernel_size", op, torch.randn(1, 1, 8, 8), [2, 2, 2])


AVGPOOL = [
    # kernel, stride, padding, ceil_mode, count_include_pad, divisor_override
    ([2, 2], [], [0, 0], False, True, None),
    ([3, 3], [2, 2], [1, 1], False, True, None),
    ([3, 3], [2, 2], [1, 1], False, False, None),
    ([3, 2], [2, 2], [1, 1], True, True, None),
    ([3, 2], [2, 2], [1, 1], True, False, None),
    ([2, 3], [1, 2], [1, 1], False, True, 5),
    ([3], [3], [1], True, True, None),
]


@pytest.mark.parametrize("cfg", AVGPOOL)
@pytest.mark.parametrize("dtype", FLOATS)
def test_avg_pool2d(rt, cfg, dtype):
    x = sample((2, 3, 8, 7), dtype)
    want = A.avg_pool2d(x, *cfg)
    check(call(rt, "aten::avg_pool2d", x, *cfg), want, **tol_for(dtype))


def test_avg_pool2d_unbatched_and_int(rt):
    x = sample((3, 7, 7))
    check(call(rt, "aten::avg_pool2d", x, [3, 3], [2, 2], [1, 1], True, False), A.avg_pool2d(x, [3, 3], [2, 2], [1, 1], True, False))
    i = torch.randint(-50, 50, (1, 2, 6, 6), dtype=torch.int64)
    check(call(rt, "aten::avg_pool2d", i, [3, 3], [2, 2], [1, 1]), A.avg_pool2d(i, [3, 3], [2, 2], [1, 1]))


def test_avg_pool2d_errors(rt):
    raises(rt, "divisor must be not zero", "aten::avg_pool2d", torch.randn(1, 1, 4, 4), [2, 2], [], [0, 0], False, True, 0)
    raises(rt, "pad should be at most half", "aten::avg_pool2d", torch.randn(1, 1, 4, 4), [2, 2], [1, 1], [2, 2])


# --------------------------------------------------------------- 3-d pooling

def ref_tol(dtype):
    """bf16 results against the f32 result rounded once: within one bf16 ulp
    (the summation order may differ); f32 tight."""
    return {"atol": 1e-6, "rtol": 2 ** -7} if dtype == torch.bfloat16 else {"atol": 1e-5, "rtol": 1e-5}


def ref(f, dtype, *tensors_then_args, n_tensors=1):
    """`f` on the f32 copies of the leading tensors, each float result rounded
    once to `dtype` (integer results, e.g. indices, unchanged)."""
    ts = [t.float() for t in tensors_then_args[:n_tensors]]
    out = f(*ts, *tensors_then_args[n_tensors:])
    fix = lambda t: t.to(dtype) if t.is_floating_point() else t
    return tuple(fix(t) for t in out) if isinstance(out, tuple) else fix(out)


MAXPOOL3D = [
    # kernel, stride, padding, dilation, ceil_mode
    ([2, 2, 2], [], [0, 0, 0], [1, 1, 1], False),
    ([3, 3, 3], [2, 2, 2], [1, 1, 1], [1, 1, 1], False),
    ([3, 2, 2], [2, 1, 2], [1, 0, 1], [1, 1, 1], True),
    ([2, 3, 2], [1, 2, 2], [0, 1, 1], [2, 1, 1], False),
    ([3], [3], [1], [1], True),
    ([2, 2, 3], [3, 2, 1], [1, 0, 1], [1, 2, 1], True),
]
POOL3D_SHAPES = [(2, 3, 7, 8, 6), (3, 5, 6, 7)]


@pytest.mark.parametrize("shape", POOL3D_SHAPES)
@pytest.mark.parametrize("cfg", MAXPOOL3D)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_max_pool3d(rt, shape, cfg, dtype):
    k, s, p, d, ceil = cfg
    x = sample(shape, dtype)
    got = call(rt, "aten::max_pool3d_with_indices", x, k, s, p, d, ceil)
    want = ref(A.max_pool3d_with_indices, dtype, x, k, s, p, d, ceil)
    assert want[0].numel() > 1
    check(got[0], want[0])
    check(got[1], want[1])


def test_max_pool3d_ties_nan_and_ints(rt):
    # Ties keep the first maximum; NaN wins; int64 pools too.
    t = torch.tensor([1.0, 1.0, 0.0, float("nan"), 1.0, float("-inf"), 1.0, 2.0] * 3).reshape(1, 1, 3, 2, 4)
    for got, want in zip(call(rt, "aten::max_pool3d_with_indices", t, [2, 2, 2], [1, 1, 1], [1, 1, 1], [1, 1, 1], True),
                         A.max_pool3d_with_indices(t, [2, 2, 2], [1, 1, 1], [1, 1, 1], [1, 1, 1], True)):
        check(got, want)
    z = torch.zeros(1, 2, 4, 4, 4)
    for got, want in zip(call(rt, "aten::max_pool3d_with_indices", z, [2, 2, 2], [1, 1, 1]),
                         A.max_pool3d_with_indices(z, [2, 2, 2], [1, 1, 1])):
        check(got, want)
    i = torch.randint(-50, 50, (1, 2, 5, 5, 5), dtype=torch.int64)
    for got, want in zip(call(rt, "aten::max_pool3d_with_indices", i, [3, 3, 3], [2, 2, 2], [1, 1, 1]),
                         A.max_pool3d_with_indices(i, [3, 3, 3], [2, 2, 2], [1, 1, 1])):
        check(got, want)


def test_max_pool3d_errors(rt):
    op = "aten::max_pool3d_with_indices"
    raises(rt, ["pad should be at most half", "pad=2", "kernel_size=3"], op, torch.randn(1, 1, 8, 8, 8), [3, 3, 3], [1], [2])
    raises(rt, ["Output size is too small", "(3x2x2x2)", "(3x0x0x0)"], op, torch.randn(1, 3, 2, 2, 2), [3, 3, 3], [1, 1, 1], [0, 0, 0])
    raises(rt, ["4D or 5D", "[8, 8, 8]"], op, torch.randn(8, 8, 8), [2, 2, 2])
    raises(rt, ["kernel_size", "three ints"], op, torch.randn(1, 1, 8, 8, 8), [2, 2])


AVGPOOL3D = [
    # kernel, stride, padding, ceil_mode, count_include_pad, divisor_override
    ([2, 2, 2], [], [0, 0, 0], False, True, None),
    ([3, 3, 3], [2, 2, 2], [1, 1, 1], False, True, None),
    ([3, 3, 3], [2, 2, 2], [1, 1, 1], False, False, None),
    ([3, 2, 3], [2, 2, 1], [1, 1, 0], True, True, None),
    ([3, 2, 3], [2, 2, 1], [1, 1, 0], True, False, None),
    ([2, 3, 2], [1, 2, 2], [1, 1, 1], False, True, 5),
    ([3], [3], [1], True, True, None),
]


@pytest.mark.parametrize("shape", POOL3D_SHAPES)
@pytest.mark.parametrize("cfg", AVGPOOL3D)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_avg_pool3d(rt, shape, cfg, dtype):
    x = sample(shape, dtype)
    want = ref(A.avg_pool3d, dtype, x, *cfg)
    check(call(rt, "aten::avg_pool3d", x, *cfg), want, **ref_tol(dtype))


def test_avg_pool3d_int_and_errors(rt):
    i = torch.randint(-50, 50, (1, 2, 6, 5, 6), dtype=torch.int64)
    check(call(rt, "aten::avg_pool3d", i, [3, 3, 3], [2, 2, 2], [1, 1, 1]), A.avg_pool3d(i, [3, 3, 3], [2, 2, 2], [1, 1, 1]))
    op = "aten::avg_pool3d"
    raises(rt, "divisor must be not zero", op, torch.randn(1, 1, 4, 4, 4), [2, 2, 2], [], [0, 0, 0], False, True, 0)
    raises(rt, "pad should be at most half", op, torch.randn(1, 1, 4, 4, 4), [2, 2, 2], [1, 1, 1], [2, 2, 2])
    raises(rt, "4D or 5D", op, torch.randn(4, 4), [2, 2, 2])


@pytest.mark.parametrize("shape", POOL3D_SHAPES)
@pytest.mark.parametrize("cfg", [MAXPOOL3D[1], MAXPOOL3D[2], MAXPOOL3D[3], ([3, 2, 2], [1, 1, 1], [1, 0, 1], [1, 1, 1], False)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_max_pool3d_backward(rt, shape, cfg, dtype):
    k, s, p, d, ceil = cfg
    x = sample(shape, dtype)
    y, idx = A.max_pool3d_with_indices(x, k, s, p, d, ceil)
    g = sample(tuple(y.shape), dtype)
    # Overlapping windows add several gradients into one element: summed in
    # f32 and rounded once.
    want = ref(A.max_pool3d_with_indices_backward, dtype, g, x, k, s, p, d, ceil, idx, n_tensors=2)
    got = call(rt, "aten::max_pool3d_with_indices_backward", g, x, k, s, p, d, ceil, idx)
    check(got, want, **ref_tol(dtype))


@pytest.mark.parametrize("shape", POOL3D_SHAPES)
@pytest.mark.parametrize("cfg", AVGPOOL3D)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_avg_pool3d_backward(rt, shape, cfg, dtype):
    x = sample(shape, dtype)
    y = A.avg_pool3d(x.float(), *cfg)
    g = sample(tuple(y.shape), dtype)
    k, s, p, ceil, include, div = cfg
    want = ref(A.avg_pool3d_backward, dtype, g, x, k, s or k, p, ceil, include, div, n_tensors=2)
    got = call(rt, "aten::avg_pool3d_backward", g, x, k, s, p, ceil, include, div)
    check(got, want, **ref_tol(dtype))


@pytest.mark.parametrize("shape,out", [((2, 3, 6, 8, 8), [1, 1, 1]), ((2, 3, 5, 7, 9), [2, 3, 4]),
                                       ((3, 5, 5, 4), [5, 2, 3]), ((1, 2, 3, 4, 6), [4, 6, 7])])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_adaptive_avg_pool3d(rt, shape, out, dtype):
    x = sample(shape, dtype)
    want = ref(A._adaptive_avg_pool3d, dtype, x, out)
    check(call(rt, "aten::_adaptive_avg_pool3d", x, out), want, **ref_tol(dtype))
    g = sample(tuple(want.shape), dtype)
    want = ref(A._adaptive_avg_pool3d_backward, dtype, g, x, n_tensors=2)
    check(call(rt, "aten::_adaptive_avg_pool3d_backward", g, x), want, **ref_tol(dtype))


def test_adaptive_avg_pool3d_errors(rt):
    raises(rt, ["4D or 5D", "[2, 2]"], "aten::_adaptive_avg_pool3d", torch.randn(2, 2), [1, 1, 1])
    raises(rt, "output_size must be 3", "aten::_adaptive_avg_pool3d", torch.randn(1, 2, 2, 2), [1, 1])


# ------------------------------------------------------------------ dropout

@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("p", [0.2, 0.5])
def test_dropout_statistics(rt, dtype, p):
    x = (torch.rand(64, 64) + 0.5).to(dtype)
    out, mask = call(rt, "aten::native_dropout", x, p, True)
    assert mask.dtype == torch.bool and out.dtype == dtype and mask.shape == x.shape
    dropped = 1 - mask.float().mean().item()
    assert abs(dropped - p) < 0.03, dropped
    check(out[mask], (x[mask].float() / (1 - p)).to(dtype), **tol_for(dtype))
    assert (out[~mask] == 0).all()


def test_dropout_seeding(rt):
    x = torch.ones(32, 32)
    rt.manual_seed(123)
    _, m1 = call(rt, "aten::native_dropout", x, 0.5, True)
    _, m2 = call(rt, "aten::native_dropout", x, 0.5, True)
    rt.manual_seed(123)
    _, m3 = call(rt, "aten::native_dropout", x, 0.5, True)
    rt.manual_seed(7)
    _, m4 = call(rt, "aten::native_dropout", x, 0.5, True)
    assert torch.equal(m1, m3)
    assert not torch.equal(m1, m2)
    assert not torch.equal(m1, m4)


def test_dropout_identity_and_edges(rt):
    x = torch.randn(4, 5)
    for p, train in [(0.5, False), (0.0, True)]:
        out, mask = call(rt, "aten::native_dropout", x, p, train)
        check(out, x)
        check(mask, torch.ones(4, 5, dtype=torch.bool))
    # train=None means training.
    _, mask = call(rt, "aten::native_dropout", torch.ones(40, 40), 0.3, None)
    assert 0.25 < 1 - mask.float().mean().item() < 0.35
    out, mask = call(rt, "aten::native_dropout", x, 1.0, True)
    check(out, torch.zeros(4, 5))
    assert not mask.any()
    raises(rt, "between 0 and 1", "aten::native_dropout", x, 1.5, True)


# --------------------------------------------------------------------- loss

@pytest.mark.parametrize("reduction", [0, 1, 2])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("dtype", FLOATS)
def test_nll_loss(rt, reduction, weighted, dtype):
    x = F.log_softmax(torch.randn(6, 5), 1).to(dtype)
    t = torch.tensor([0, 4, 2, 1, 2, 3])
    w = torch.rand(5).to(dtype) if weighted else None
    for ignore in [-100, 2]:
        got = call(rt, "aten::nll_loss_forward", x, t, w, reduction, ignore)
        want = A.nll_loss_forward(x, t, w, reduction, ignore)
        # PyTorch sums half-precision losses in its own order; results may
        # differ by a couple of ulps (2**-9 relative for f16).
        tol = {"atol": 4e-3, "rtol": 4e-3} if dtype == torch.float16 else tol_for(dtype, 1e-5)
        for g, e in zip(got, want):
            check(g, e, **tol)


@pytest.mark.parametrize("reduction", [0, 1, 2])
def test_nll_loss_1d_and_byte_target(rt, reduction):
    x = torch.randn(5)
    for t in [torch.tensor(3), torch.tensor(1, dtype=torch.uint8)]:
        for g, e in zip(call(rt, "aten::nll_loss_forward", x, t, None, reduction, -100),
                        A.nll_loss_forward(x, t, None, reduction, -100)):
            check(g, e)
    # Everything ignored: mean is 0/0.
    x2, t2 = torch.randn(3, 4), torch.tensor([1, 1, 1])
    for g, e in zip(call(rt, "aten::nll_loss_forward", x2, t2, None, reduction, 1),
                    A.nll_loss_forward(x2, t2, None, reduction, 1)):
        check(g, e)


@pytest.mark.parametrize("reduction", [0, 1, 2])
def test_nll_loss2d(rt, reduction):
    x = torch.randn(2, 4, 3, 5)
    t = torch.randint(0, 4, (2, 3, 5))
    w = torch.rand(4)
    for g, e in zip(call(rt, "aten::nll_loss2d_forward", x, t, w, reduction, 1),
                    A.nll_loss2d_forward(x, t, w, reduction, 1)):
        check(g, e, atol=1e-5, rtol=1e-5)


def test_nll_loss_errors(rt):
    op = "aten::nll_loss_forward"
    raises(rt, ["target dtype", "int32"], op, torch.randn(3, 4), torch.tensor([1, 1, 1]).int(), None, 1, -100)
    raises(rt, ["size mismatch", "[3, 4]", "[2]"], op, torch.randn(3, 4), torch.tensor([1, 1]), None, 1, -100)
    raises(rt, ["all 4 classes", "[3]"], op, torch.randn(3, 4), torch.tensor([1, 1, 1]), torch.randn(3), 1, -100)
    raises(rt, ["1D or 2D", "[3, 4, 5]"], op, torch.randn(3, 4, 5), torch.tensor([1, 1, 1]), None, 1, -100)


# ---------------------------------------------------------------- embedding

@pytest.mark.parametrize("idx_dtype", [torch.int64, torch.int32])
@pytest.mark.parametrize("shape", [(), (5,), (2, 3)])
def test_embedding(rt, idx_dtype, shape):
    w = torch.randn(10, 4)
    idx = torch.randint(0, 10, shape, dtype=idx_dtype)
    check(call(rt, "aten::embedding", w, idx), A.embedding(w, idx))
    check(call(rt, "aten::embedding", w, idx, 0, False, False), A.embedding(w, idx, 0))


def test_embedding_half_and_errors(rt):
    w = torch.randn(6, 3).to(torch.bfloat16)
    idx = torch.tensor([[5, 0], [2, 2]])
    check(call(rt, "aten::embedding", w, idx), A.embedding(w, idx))
    raises(rt, ["indices", "Long, Int", "float32"], "aten::embedding", torch.randn(6, 3), torch.tensor([1.0]))
    raises(rt, ["2-D", "[6]"], "aten::embedding", torch.randn(6), torch.tensor([1]))


# -------------------------------------------------------------- activations

ACTIVATIONS = {
    "hardtanh": ((-0.5, 2.0), F.hardtanh, {"min_val": -0.5, "max_val": 2.0}),
    "leaky_relu": ((0.2,), F.leaky_relu, {"negative_slope": 0.2}),
    "elu": ((1.5, 1.2, 0.8), A.elu, None),
    "softplus": ((2.0, 3.0), F.softplus, {"beta": 2.0, "threshold": 3.0}),
    "hardsigmoid": ((), F.hardsigmoid, {}),
    "hardswish": ((), F.hardswish, {}),
    "mish": ((), F.mish, {}),
}


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_activation(rt, name, dtype):
    scalars, fn, kw = ACTIVATIONS[name]
    x = sample((4, 8), dtype, scale=3)
    want = fn(x, *scalars) if kw is None else fn(x, **kw)
    check(call(rt, f"aten::{name}", x, *scalars), want, **tol_for(dtype, 2e-5))
    # Defaults.
    base = getattr(A, name)
    check(call(rt, f"aten::{name}", x), base(x), **tol_for(dtype, 2e-5))


@pytest.mark.parametrize("name", ["hardtanh_", "leaky_relu_", "elu_", "hardsigmoid_", "hardswish_", "mish_"])
def test_activation_inplace(rt, name):
    x = sample((3, 4), scale=3)
    xt = tpu(rt, x)
    out = rt.call1(f"aten::{name}", xt)
    assert out.same_storage(xt)
    check(cpu(xt), getattr(A, name[:-1])(x), atol=2e-5, rtol=2e-5)


def test_activation_int(rt):
    i = torch.tensor([-3, -1, 0, 2, 5])
    check(call(rt, "aten::hardtanh", i), A.hardtanh(i))
    check(call(rt, "aten::hardtanh", i, -2, 3), A.hardtanh(i, -2, 3))
    for name in ["mish", "leaky_relu", "elu"]:
        raises(rt, [name, "int64"], f"aten::{name}", i)


# ----------------------------------------------------------------- backward

@pytest.mark.parametrize("dtype", FLOATS)
def test_activation_backward(rt, dtype):
    x = sample((4, 6), dtype, scale=2)
    g = sample((4, 6), dtype)
    tol = tol_for(dtype, 2e-5)
    check(call(rt, "aten::threshold_backward", g, x, 0.5), A.threshold_backward(g, x, 0.5), **tol)
    for approx in ["none", "tanh"]:
        check(call(rt, "aten::gelu_backward", g, x, approx), A.gelu_backward(g, x, approximate=approx), **tol)
    y = torch.sigmoid(x)
    check(call(rt, "aten::sigmoid_backward", g, y), A.sigmoid_backward(g, y), **tol)
    y = torch.tanh(x)
    check(call(rt, "aten::tanh_backward", g, y), A.tanh_backward(g, y), **tol)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("dim", [0, -1])
def test_softmax_backward(rt, dtype, dim):
    x = sample((3, 5), dtype, scale=2)
    g = sample((3, 5), dtype)
    y = A._softmax(x, dim, False)
    check(call(rt, "aten::_softmax_backward_data", g, y, dim, dtype),
          A._softmax_backward_data(g, y, dim, dtype), **tol_for(dtype, 2e-5))
    ly = A._log_softmax(x, dim, False)
    check(call(rt, "aten::_log_softmax_backward_data", g, ly, dim, dtype),
          A._log_softmax_backward_data(g, ly, dim, dtype), **tol_for(dtype, 2e-5))


def test_backward_against_autograd(rt):
    # The kernels match what autograd computes for the forward ops.
    x = torch.randn(3, 4, requires_grad=True)
    g = torch.randn(3, 4)
    for name, fwd in [("_softmax", lambda t: torch.softmax(t, 1)), ("_log_softmax", lambda t: torch.log_softmax(t, 1))]:
        y = fwd(x)
        (want,) = torch.autograd.grad(y, x, g)
        got = call(rt, f"aten::{name}_backward_data", g, y.detach(), 1, torch.float32)
        check(got, want, atol=1e-5, rtol=1e-5)


# -------------------------------------------------------- strided inputs

@pytest.mark.skipif(not rt_has("aten::as_strided"), reason="aten::as_strided not in this branch")
def test_conv_and_pool_channels_last_views(rt):
    # An NCHW view of NHWC data (channels-last strides).
    base = torch.randn(2, 8, 7, 3)
    x = base.permute(0, 3, 1, 2)
    xt = view(rt, tpu(rt, base), (2, 3, 8, 7), (168, 1, 21, 3))
    w, b = torch.randn(4, 3, 3, 3), torch.randn(4)
    args = ([1, 1], [1, 1], [1, 1], False, [0, 0], 1)
    got = cpu(rt.call1("aten::convolution", xt, tpu(rt, w), tpu(rt, b), *args))
    check(got, A.convolution(x, w, b, *args), atol=1e-4, rtol=1e-4)
    got = [cpu(t) for t in rt.call("aten::max_pool2d_with_indices", xt, [3, 3], [2, 2], [1, 1])]
    for g, e in zip(got, A.max_pool2d_with_indices(x, [3, 3], [2, 2], [1, 1])):
        check(g, e)
    got = cpu(rt.call1("aten::avg_pool2d", xt, [2, 2]))
    check(got, A.avg_pool2d(x, [2, 2]))
    got = [cpu(t) for t in rt.call("aten::native_layer_norm", xt, [7], None, None, 1e-5)]
    for g, e in zip(got, A.native_layer_norm(x, [7], None, None, 1e-5)):
        check(g, e, atol=1e-5, rtol=1e-5)


# ----------------------------------------------------------------- mse loss

@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("reduction", [0, 1, 2])
def test_mse_loss(rt, dtype, reduction):
    x = torch.randn(4, 5, dtype=dtype)
    t = torch.randn(4, 5, dtype=dtype)
    name = ["none", "mean", "sum"][reduction]
    want = F.mse_loss(x, t, reduction=name)
    check(call(rt, "aten::mse_loss", x, t, reduction), want, **tol_for(dtype, 1e-5))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("reduction", [0, 1, 2])
def test_mse_loss_backward(rt, dtype, reduction):
    x = torch.randn(3, 6, dtype=dtype, requires_grad=True)
    t = torch.randn(3, 6, dtype=dtype)
    name = ["none", "mean", "sum"][reduction]
    out = F.mse_loss(x, t, reduction=name)
    g = torch.randn_like(out)
    (want,) = torch.autograd.grad(out, x, g)
    got = call(rt, "aten::mse_loss_backward", g, x.detach(), t, reduction)
    check(got, want, **tol_for(dtype, 1e-5))


def test_mse_loss_broadcast_promotion_and_errors(rt):
    x = torch.randn(3, 1)
    t = torch.randn(4).to(torch.bfloat16)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = F.mse_loss(x, t, reduction="sum")
    check(call(rt, "aten::mse_loss", x, t, 2), want)
    check(call(rt, "aten::mse_loss", torch.randn(0), torch.randn(0), 1), F.mse_loss(torch.randn(0), torch.randn(0)))
    with pytest.raises(torchtpu.InvalidArgumentError, match="mse"):
        call(rt, "aten::mse_loss", torch.ones(3, dtype=torch.int64), torch.ones(3, dtype=torch.int64), 1)
    with pytest.raises(torchtpu.InvalidArgumentError, match="reduction"):
        call(rt, "aten::mse_loss", x, x, 5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_native_dropout_backward(rt, dtype):
    g = torch.randn(4, 6, generator=torch.Generator().manual_seed(1)).to(dtype)
    mask = torch.rand(4, 6, generator=torch.Generator().manual_seed(2)) > 0.3
    want = torch.ops.aten.native_dropout_backward(g, mask, 1 / 0.7)
    check(call(rt, "aten::native_dropout_backward", g, mask, 1 / 0.7), want, **tol_for(dtype))
