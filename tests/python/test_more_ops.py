"""More ops against PyTorch CPU: smooth L1, Huber and binary cross-entropy
losses, glu, log_sigmoid, PReLU, the shrinks and the backward kernels of the
activations; the cross product; pointwise special
functions; and indexing / order-statistic reductions.

Half-precision references compute in f32 from the same rounded inputs and
round once, as our kernels do (PyTorch's own bf16 kernels round between
steps)."""

import pytest
import torch

import torchtpu
from conftest import call, check, cpu, tol_for, tpu

torch.manual_seed(0)
aten = torch.ops.aten
DTYPES = [torch.float32, torch.bfloat16]


def ref(fn, dtype, *xs, **kw):
    """`fn` on f32 copies of the (already rounded) tensor inputs, rounded once to `dtype`."""
    up = [x.float() if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in xs]
    out = fn(*up, **kw)
    if isinstance(out, (tuple, list)):
        return [o.to(dtype) for o in out]
    return out.to(dtype)


SPECIALS = torch.tensor([0.0, -0.0, 0.5, -0.5, 1.0, -1.0, 3.0, -3.0, 20.0, -20.0, 100.0, -100.0,
                         float("inf"), float("-inf"), float("nan")])


# ------------------------------------------------------------------- losses

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", [0, 1, 2])
@pytest.mark.parametrize("loss,param", [("smooth_l1_loss", 1.0), ("smooth_l1_loss", 0.3), ("smooth_l1_loss", 0.0),
                                         ("huber_loss", 1.0), ("huber_loss", 2.5)])
def test_pointwise_losses_and_backward(rt, loss, param, reduction, dtype):
    x = (torch.randn(4, 6) * 2).to(dtype)
    t = (torch.randn(4, 6) * 2).to(dtype)
    fwd = getattr(aten, loss)
    want = ref(fwd, dtype, x, t, reduction, param)
    check(call(rt, f"aten::{loss}", x, t, reduction, param), want, **tol_for(dtype, 1e-5))
    g = torch.randn(want.shape).to(dtype)
    bwd = getattr(aten, f"{loss}_backward")
    check(call(rt, f"aten::{loss}_backward", g, x, t, reduction, param), ref(bwd, dtype, g, x, t, reduction, param),
          **tol_for(dtype, 1e-5))


def test_losses_broadcast_defaults_and_specials(rt):
    x = torch.tensor([0.0, 1.0, -2.0, float("inf"), float("nan"), 0.5]).expand(2, 6)
    t = torch.tensor([[0.0], [1.0]])
    for loss in ["smooth_l1_loss", "huber_loss"]:
        check(call(rt, f"aten::{loss}", x, t, 0), getattr(aten, loss)(x, t, 0))
        check(call(rt, f"aten::{loss}", x[0, :3], t[0]), getattr(aten, loss)(x[0, :3], t[0].expand(3)))
    # Differences exactly at +-beta take the linear branch.
    x = torch.tensor([1.0, -1.0, 0.5, 2.0])
    t = torch.zeros(4)
    g = torch.ones(4)
    check(call(rt, "aten::smooth_l1_loss_backward", g, x, t, 0, 1.0), aten.smooth_l1_loss_backward(g, x, t, 0, 1.0))
    check(call(rt, "aten::huber_loss_backward", g, x, t, 0, 1.0), aten.huber_loss_backward(g, x, t, 0, 1.0))


def test_loss_errors(rt):
    with pytest.raises(torchtpu.InvalidArgumentError, match="negative"):
        call(rt, "aten::smooth_l1_loss", torch.ones(3), torch.ones(3), 1, -1.0)
    with pytest.raises(torchtpu.InvalidArgumentError, match="not implemented"):
        call(rt, "aten::huber_loss", torch.ones(3, dtype=torch.int64), torch.ones(3, dtype=torch.int64))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", [0, 1, 2])
@pytest.mark.parametrize("weighted", [False, True])
def test_binary_cross_entropy_and_backward(rt, reduction, weighted, dtype):
    x = torch.rand(4, 6).to(dtype)
    x[0, :3] = torch.tensor([0.0, 1.0, 1e-30])  # clamped logs, a tiny denominator
    t = torch.rand(4, 6).to(dtype)
    w = torch.rand(6).to(dtype) if weighted else None
    want = ref(aten.binary_cross_entropy, dtype, x, t, w, reduction)
    check(call(rt, "aten::binary_cross_entropy", x, t, w, reduction), want, **tol_for(dtype, 1e-5))
    g = torch.randn(want.shape).to(dtype)
    check(call(rt, "aten::binary_cross_entropy_backward", g, x, t, w, reduction),
          ref(aten.binary_cross_entropy_backward, dtype, g, x, t, w, reduction), **tol_for(dtype, 1e-5))


def test_binary_cross_entropy_checks_its_range_on_the_device(rt):
    # Reported at the read (in debug mode at the op), naming the op.
    for x, t, what in ((torch.tensor([1.5, 0.5]), torch.ones(2), "input"),
                       (torch.tensor([float("nan"), 0.5]), torch.ones(2), "input"),
                       (torch.tensor([0.5, 0.5]), torch.tensor([0.0, 2.0]), "target")):
        with pytest.raises(torchtpu.InvalidArgumentError,
                           match=f"aten::binary_cross_entropy: all elements of {what} should be between 0 and 1"):
            call(rt, "aten::binary_cross_entropy", x, t, None, 1)
    with pytest.raises(torchtpu.InvalidArgumentError, match="not implemented for 'int64'"):
        call(rt, "aten::binary_cross_entropy", torch.ones(2, dtype=torch.int64), torch.ones(2), None, 1)
    # PyTorch pairs the operands after squeezing their size-1 dims.
    x, t = torch.rand(3, 1), torch.rand(3)
    check(call(rt, "aten::binary_cross_entropy", x, t, None, 0), aten.binary_cross_entropy(x, t, None, 0))
    with pytest.raises(torchtpu.InvalidArgumentError, match="must match the size"):
        call(rt, "aten::binary_cross_entropy", torch.full((2, 3), 0.5), torch.full((3, 2), 0.5), None, 1)
    with pytest.raises(torchtpu.InvalidArgumentError, match=r"must match the size .* \(shapes \[2, 3\] and \[4\]\)"):
        call(rt, "aten::binary_cross_entropy", torch.full((2, 3), 0.5), torch.full((4,), 0.5), None, 1)


@pytest.mark.parametrize("dtype", DTYPES)
def test_prelu_kernel_and_backward(rt, dtype):
    x = torch.cat([SPECIALS[:-3], torch.randn(6)]).reshape(2, 3, 3).to(dtype)
    w = torch.tensor([0.25, -0.5, 2.0]).reshape(1, 3, 1).to(dtype)
    check(call(rt, "aten::_prelu_kernel", x, w), ref(aten._prelu_kernel, dtype, x, w), **tol_for(dtype, 1e-6))
    g = torch.randn(x.shape).to(dtype)
    got = call(rt, "aten::_prelu_kernel_backward", g, x, w)
    for o, want in zip(got, ref(aten._prelu_kernel_backward, dtype, g, x, w)):
        check(o, want, **tol_for(dtype, 1e-6))


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_linalg_cross(rt, dtype):
    a = (torch.randn(2, 3, 4) * 5).to(dtype)
    b = (torch.randn(1, 3, 4) * 5).to(dtype)
    check(call(rt, "aten::linalg_cross", a, b, 1), torch.linalg.cross(a, b, dim=1))
    with pytest.raises(torchtpu.InvalidArgumentError, match="must have length 3. Got 4 and 4"):
        call(rt, "aten::linalg_cross", a, b)
    with pytest.raises(torchtpu.InvalidArgumentError, match="same number of dimensions"):
        call(rt, "aten::linalg_cross", a, b[0])


# -------------------------------------------------------------- activations

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dim", [-1, 0, 1])
def test_glu_and_backward(rt, dim, dtype):
    x = torch.randn(4, 6, 2).to(dtype)
    want = ref(aten.glu, dtype, x, dim)
    check(call(rt, "aten::glu", x, dim), want, **tol_for(dtype))
    g = torch.randn(want.shape).to(dtype)
    check(call(rt, "aten::glu_backward", g, x, dim), ref(aten.glu_backward, dtype, g, x, dim), **tol_for(dtype))


def test_glu_odd_dim_errors(rt):
    with pytest.raises(torchtpu.InvalidArgumentError, match="even"):
        call(rt, "aten::glu", torch.ones(3, 5), -1)


@pytest.mark.parametrize("dtype", DTYPES)
def test_log_sigmoid(rt, dtype):
    x = torch.cat([torch.randn(20) * 5, SPECIALS]).to(dtype)
    out, buf = call(rt, "aten::log_sigmoid_forward", x)
    want_out, want_buf = ref(aten.log_sigmoid_forward, dtype, x)
    check(out, want_out, **tol_for(dtype))
    assert buf.shape == want_buf.shape
    g = torch.randn(x.shape).to(dtype)
    got = call(rt, "aten::log_sigmoid_backward", g, x, buf)
    check(got, ref(aten.log_sigmoid_backward, dtype, g, x, want_buf.float()), **tol_for(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["hardshrink", "softshrink"])
@pytest.mark.parametrize("lambd", [0.5, 1.0, 0.0])
def test_shrinks(rt, name, lambd, dtype):
    x = torch.cat([torch.randn(20) * 2, SPECIALS, torch.tensor([lambd, -lambd])]).to(dtype)
    check(call(rt, f"aten::{name}", x, lambd), ref(getattr(aten, name), dtype, x, lambd), **tol_for(dtype))
    g = torch.randn(x.shape).to(dtype)
    bwd = getattr(aten, f"{name}_backward")
    check(call(rt, f"aten::{name}_backward", g, x, lambd), ref(bwd, dtype, g, x, lambd), **tol_for(dtype))


def test_shrink_default_lambda(rt):
    x = torch.tensor([-1.0, -0.5, -0.2, 0.0, 0.3, 0.5, 0.7])
    check(call(rt, "aten::hardshrink", x), aten.hardshrink(x))
    check(call(rt, "aten::softshrink", x), aten.softshrink(x))


BACKWARD = {
    "softplus_backward": (lambda g, x: aten.softplus_backward(g, x, 1.0, 20.0), (1.0, 20.0)),
    "softplus_backward_beta": (lambda g, x: aten.softplus_backward(g, x, 2.0, 5.0), (2.0, 5.0)),
    "hardtanh_backward": (lambda g, x: aten.hardtanh_backward(g, x, -1.0, 1.0), (-1.0, 1.0)),
    "hardtanh_backward_wide": (lambda g, x: aten.hardtanh_backward(g, x, -2.5, 0.5), (-2.5, 0.5)),
    "leaky_relu_backward": (lambda g, x: aten.leaky_relu_backward(g, x, 0.01, False), (0.01, False)),
    "hardsigmoid_backward": (aten.hardsigmoid_backward, ()),
    "hardswish_backward": (aten.hardswish_backward, ()),
    "silu_backward": (aten.silu_backward, ()),
    "mish_backward": (aten.mish_backward, ()),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", sorted(BACKWARD))
def test_activation_backward(rt, case, dtype):
    fn, extra = BACKWARD[case]
    name = case.replace("_beta", "").replace("_wide", "")
    x = torch.cat([torch.randn(30) * 4, SPECIALS[:-3], torch.tensor([3.0, -3.0, 1.0, -1.0, 0.5, -2.5])]).to(dtype)
    g = torch.randn(x.shape).to(dtype)
    check(call(rt, f"aten::{name}", g, x, *extra), ref(fn, dtype, g, x), **tol_for(dtype, 2e-5))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("is_result", [False, True])
@pytest.mark.parametrize("params", [(1.0, 1.0, 1.0), (1.6732632423543772, 1.0507009873554805, 1.0), (0.5, 2.0, 1.5)])
def test_elu_backward(rt, params, is_result, dtype):
    alpha, scale, input_scale = params
    x = (torch.randn(40) * 3).to(dtype)
    src = aten.elu(x.float(), alpha, scale, input_scale).to(dtype) if is_result else x
    g = torch.randn(x.shape).to(dtype)
    want = ref(aten.elu_backward, dtype, g, alpha, scale, input_scale, is_result, src)
    check(call(rt, "aten::elu_backward", g, alpha, scale, input_scale, is_result, src), want, **tol_for(dtype, 2e-5))


def test_backward_promotes_and_broadcasts(rt):
    g = torch.randn(3, 1)
    x = torch.randn(3, 4).to(torch.bfloat16)
    want = aten.silu_backward(g, x.float())
    check(call(rt, "aten::silu_backward", g, x), want, **tol_for(torch.float32))


# ---------------------------------------------------------------- pointwise

def _prob(n):
    return torch.rand(n) * 0.98 + 0.01


UNARY = {
    "lgamma": (torch.lgamma, lambda n: torch.randn(n) * 5, torch.tensor([0.0, -0.0, -1.0, -2.0, 1.0, 2.0, -2.5, 1e-3,
                                                                           30.0, float("inf"), float("-inf"), float("nan")])),
    "digamma": (torch.digamma, lambda n: torch.rand(n) * 20 + 0.05,
                torch.tensor([0.0, -0.0, -1.0, -2.0, -2.5, 1.0, 0.5, 100.0, float("inf"), float("nan")])),
    "sinc": (torch.sinc, lambda n: torch.randn(n) * 3, torch.tensor([0.0, -0.0, 1.0, -2.0, 0.5, 1e-8, float("inf"), float("nan")])),
    "i0": (torch.i0, lambda n: torch.randn(n) * 6, torch.tensor([0.0, 8.0, -8.0, 7.99, 8.01, 20.0, 80.0, 100.0,
                                                                  float("inf"), float("-inf"), float("nan")])),
    "logit": (torch.logit, _prob, torch.tensor([0.0, 1.0, 0.5, -0.5, 2.0, float("nan")])),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(UNARY))
def test_special_unary(rt, name, dtype):
    fn, sampler, _ = UNARY[name]
    x = sampler(40).to(dtype)
    tol = tol_for(dtype, 2e-5) if name != "digamma" else tol_for(dtype, 1e-4)
    check(call(rt, f"aten::{name}", x), ref(fn, dtype, x), **tol)


@pytest.mark.parametrize("name", sorted(UNARY))
def test_special_unary_specials(rt, name):
    fn, _, specials = UNARY[name]
    check(call(rt, f"aten::{name}", specials), fn(specials), atol=1e-5, rtol=2e-5)


@pytest.mark.parametrize("name", sorted(UNARY))
def test_special_unary_ints_give_float_and_inplace(rt, name):
    fn = UNARY[name][0]
    x = torch.tensor([1, 2, 3, 5]) if name != "logit" else torch.tensor([0, 1])
    check(call(rt, f"aten::{name}", x), fn(x), atol=1e-5, rtol=2e-5)
    y = UNARY[name][1](6)
    yt = tpu(rt, y)
    out = rt.call1(f"aten::{name}_", yt)
    assert out.same_storage(yt)
    check(cpu(yt), fn(y), atol=1e-5, rtol=2e-5)


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.25])
def test_logit_eps(rt, eps):
    x = torch.tensor([0.0, 0.05, 0.2, 0.5, 0.8, 0.95, 1.0, float("nan"), -1.0])
    check(call(rt, "aten::logit", x, eps), torch.logit(x, eps), atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["logaddexp", "logaddexp2", "xlogy"])
def test_special_binary(rt, name, dtype):
    fn = getattr(torch, name)
    a = (torch.randn(3, 1, 5) * 4).to(dtype)
    b = (torch.rand(4, 1) * 5).to(dtype) if name == "xlogy" else (torch.randn(4, 1) * 4).to(dtype)
    aten_name = "aten::xlogy.Tensor" if name == "xlogy" else f"aten::{name}"
    check(call(rt, aten_name, a, b), ref(fn, dtype, a, b), **tol_for(dtype, 2e-5))


@pytest.mark.parametrize("name", ["logaddexp", "logaddexp2", "xlogy"])
def test_special_binary_specials(rt, name):
    v = [0.0, -0.0, 1.0, -1.0, 100.0, -100.0, float("inf"), float("-inf"), float("nan")]
    a = torch.tensor(v).repeat_interleave(len(v))
    b = torch.tensor(v).repeat(len(v))
    fn = getattr(torch, name)
    aten_name = "aten::xlogy.Tensor" if name == "xlogy" else f"aten::{name}"
    check(call(rt, aten_name, a, b), fn(a, b), atol=1e-6, rtol=1e-6)


def test_xlogy_overloads_and_ints(rt):
    x = torch.tensor([0, 1, 2, 3])
    y = torch.tensor([0.0, 2.0, float("nan"), 0.5])
    check(call(rt, "aten::xlogy.Tensor", x, torch.tensor([1, 2, 3, 0])), torch.xlogy(x, torch.tensor([1, 2, 3, 0])))
    check(call(rt, "aten::xlogy.Scalar_Other", y, 3.0), torch.xlogy(y, 3.0))
    check(call(rt, "aten::xlogy.Scalar_Self", 2.0, y), torch.xlogy(2.0, y))
    yt = tpu(rt, y)
    rt.call("aten::xlogy_.Tensor", yt, tpu(rt, torch.tensor([2.0, 2.0, 2.0, 2.0])))
    check(cpu(yt), torch.xlogy(y, torch.tensor(2.0)))
    with pytest.raises(torchtpu.InvalidArgumentError, match="logaddexp"):
        call(rt, "aten::logaddexp", x, x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.int64, torch.uint8])
def test_classify(rt, dtype):
    if dtype.is_floating_point:
        x = torch.tensor([0.0, -0.0, 1.0, -2.0, float("inf"), float("-inf"), float("nan"), -float("nan")], dtype=dtype)
    else:
        x = torch.tensor([0, 1, 5, 200], dtype=dtype) if dtype == torch.uint8 else torch.tensor([0, -1, 5, -7], dtype=dtype)
    for name in ["signbit", "isposinf", "isneginf"]:
        check(call(rt, f"aten::{name}", x), getattr(torch, name)(x))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
@pytest.mark.parametrize("args", [(), (1.5,), (1.5, 100.0), (None, None, -7.0), (2.0, 1e30, -1e30)])
def test_nan_to_num(rt, dtype, args):
    x = torch.tensor([0.0, 1.5, -2.0, float("inf"), float("-inf"), float("nan")], dtype=dtype)
    check(call(rt, "aten::nan_to_num", x, *args), torch.nan_to_num(x, *args))
    xt = tpu(rt, x)
    rt.call("aten::nan_to_num_", xt, *args)
    check(cpu(xt), torch.nan_to_num(x, *args))


def test_nan_to_num_ints(rt):
    x = torch.tensor([1, -2, 3])
    check(call(rt, "aten::nan_to_num", x, 1.0), torch.nan_to_num(x, 1.0))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool])
def test_heaviside(rt, dtype):
    if dtype == torch.bool:
        x = torch.tensor([True, False, False])
        v = torch.tensor([False, True, False])
    else:
        x = torch.tensor([-1.5, 0.0, -0.0, 2.0, float("nan"), float("inf")]).to(dtype) if dtype.is_floating_point \
            else torch.tensor([-3, 0, 4, 0])
        v = torch.arange(x.numel()).to(dtype) * 2 - 3
    check(call(rt, "aten::heaviside", x, v), torch.heaviside(x, v))
    check(call(rt, "aten::heaviside", x.reshape(-1, 1), v), torch.heaviside(x.reshape(-1, 1), v))
    with pytest.raises(torchtpu.InvalidArgumentError, match="different dtypes"):
        call(rt, "aten::heaviside", torch.ones(2), torch.ones(2, dtype=torch.float64))
