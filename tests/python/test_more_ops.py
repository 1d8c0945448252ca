"""More ops against PyTorch CPU: smooth L1 and Huber losses, glu, log_sigmoid,
the shrinks and the backward kernels of the activations; pointwise special
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
