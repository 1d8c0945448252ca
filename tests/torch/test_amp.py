"""Automatic mixed precision on "tpu": torch.autocast("tpu") with PyTorch's
standard (CUDA) op policy, and torch.amp.GradScaler("tpu") against
GradScaler("cpu").

Each autocast case names the policy csrc/autocast.cpp registers for its op
(the CUDA lists of ATen/autocast_mode.h): the tpu result must have that
policy's dtype, and its values must match the CPU running the same op on
inputs cast the way the policy casts them. Where CPU autocast's own policy
puts the op in the same class, CPU autocast itself is compared too (CPU's
lists differ from CUDA's: it leaves softmax, layer_norm, exp, sum, ... in
the 16-bit dtype, and it promotes cat and stack)."""

from __future__ import annotations

import contextlib
import copy
import math
from dataclasses import dataclass
from typing import Callable

import pytest
import torch
import torch.nn.functional as F

DTYPES = [torch.bfloat16, torch.float16]
IDS = {torch.bfloat16: "bf16", torch.float16: "f16"}

LOWP, FP32, PROMOTE, KEEP = "lower_precision_fp", "fp32", "promote", "keep"


@dataclass
class Case:
    fn: Callable[..., torch.Tensor]
    # The inputs, built on the CPU from a generator and the autocast dtype
    # (the 16-bit dtype is what fp32-policy ops are fed).
    inputs: Callable[[torch.Generator, torch.dtype], list]
    policy: str
    # Whether CPU autocast registers the op under the same policy (so that
    # torch.autocast("cpu") is a reference as well).
    cpu_same: bool = False
    # The CPU reference, given the uncast CPU inputs, where casting the
    # inputs as the policy does is not the whole story.
    ref: Callable[..., torch.Tensor] | None = None


def _r(g, *shape, dtype=torch.float32, positive=False):
    t = torch.randn(*shape, generator=g)
    if positive:
        t = t.abs() + 0.5
    return t.to(dtype)


def _f32(*shapes, **kw):
    return lambda g, lp: [_r(g, *s, **kw) for s in shapes]


def _lowp(*shapes, **kw):
    return lambda g, lp: [_r(g, *s, dtype=lp, **kw) for s in shapes]


def _mixed(*kinds, shape=(4, 6)):
    """Inputs of one shape, each "f32" or "lp" (the autocast dtype; "lp+"
    positive)."""
    return lambda g, lp: [_r(g, *shape, dtype=torch.float32 if k == "f32" else lp, positive=k.endswith("+"))
                          for k in kinds]


CASES: dict[str, Case] = {
    # lower_precision_fp: fp32 inputs, results in the autocast dtype.
    "linear": Case(lambda x, w, b: F.linear(x, w, b), _f32((4, 8), (6, 8), (6,)), LOWP, True),
    "matmul": Case(torch.matmul, _f32((3, 4, 5), (5, 6)), LOWP, True),
    "mm": Case(torch.mm, _f32((4, 5), (5, 6)), LOWP, True),
    "bmm": Case(torch.bmm, _f32((2, 3, 4), (2, 4, 5)), LOWP, True),
    "addmm": Case(torch.addmm, _f32((6,), (4, 5), (5, 6)), LOWP, True),
    "baddbmm": Case(torch.baddbmm, _f32((2, 3, 5), (2, 3, 4), (2, 4, 5)), LOWP, True),
    "mv": Case(torch.mv, _f32((4, 5), (5,)), LOWP),
    "einsum": Case(lambda a, b: torch.einsum("bij,bjk->bik", a, b), _f32((2, 3, 4), (2, 4, 5)), LOWP),
    "conv1d": Case(lambda x, w, b: F.conv1d(x, w, b, padding=1), _f32((2, 3, 10), (4, 3, 3), (4,)), LOWP, True),
    "conv2d": Case(lambda x, w, b: F.conv2d(x, w, b, stride=2), _f32((2, 3, 9, 9), (4, 3, 3, 3), (4,)), LOWP, True),
    "sdpa": Case(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
                 _f32((2, 2, 5, 8), (2, 2, 5, 8), (2, 2, 5, 8)), LOWP, True),
    # fp32: 16-bit inputs, computed and returned in float32.
    "exp": Case(torch.exp, _lowp((4, 6)), FP32),
    "log": Case(torch.log, _lowp((4, 6), positive=True), FP32),
    "rsqrt": Case(torch.rsqrt, _lowp((4, 6), positive=True), FP32),
    "pow": Case(lambda x: torch.pow(x, 3.0), _lowp((4, 6)), FP32),
    "softplus": Case(F.softplus, _lowp((4, 6)), FP32),
    "layer_norm": Case(lambda x, w, b: F.layer_norm(x, (8,), w, b), _lowp((3, 5, 8), (8,), (8,)), FP32),
    "group_norm": Case(lambda x: F.group_norm(x, 2), _lowp((2, 4, 3, 3)), FP32),
    "logsumexp": Case(lambda x: torch.logsumexp(x, 1), _lowp((4, 6)), FP32),
    "mse_loss": Case(F.mse_loss, _lowp((4, 6), (4, 6)), FP32, True),
    "l1_loss": Case(F.l1_loss, _lowp((4, 6), (4, 6)), FP32, True),
    "smooth_l1_loss": Case(F.smooth_l1_loss, _lowp((4, 6), (4, 6)), FP32, True),
    "bce_with_logits": Case(F.binary_cross_entropy_with_logits,
                            lambda g, lp: [_r(g, 4, 6, dtype=lp), torch.rand(4, 6, generator=g).to(lp)], FP32, True),
    "nll_loss": Case(F.nll_loss, lambda g, lp: [_r(g, 5, 7, dtype=lp), torch.randint(0, 7, (5,), generator=g)],
                     FP32, True),
    # cross_entropy (no autocast kernel of its own) decomposes into
    # log_softmax with dtype= its input's (so fp32_set_opt_dtype keeps the
    # 16-bit dtype: computed in float32, rounded) and nll_loss (fp32), as on
    # CUDA.
    "cross_entropy": Case(F.cross_entropy,
                          lambda g, lp: [_r(g, 5, 7, dtype=lp), torch.randint(0, 7, (5,), generator=g)], FP32,
                          ref=lambda x, t: F.nll_loss(F.log_softmax(x.float(), 1).to(x.dtype).float(), t)),
    # fp32_set_opt_dtype: the op's dtype argument set to float32.
    "softmax": Case(lambda x: torch.softmax(x, -1), _lowp((4, 6)), FP32),
    "log_softmax": Case(lambda x: torch.log_softmax(x, -1), _lowp((4, 6)), FP32),
    "sum": Case(torch.sum, _lowp((4, 6)), FP32),
    "sum_dim": Case(lambda x: torch.sum(x, (0,), keepdim=True), _lowp((4, 6)), FP32),
    "cumsum": Case(lambda x: torch.cumsum(x, 1), _lowp((4, 6)), FP32),
    "prod": Case(lambda x: torch.prod(x, 1), _lowp((4, 6)), FP32, True),
    # fp32_append_dtype: norm redispatched to its overload with a dtype.
    "norm": Case(lambda x: torch.norm(x, 2.0), _lowp((4, 6)), FP32),
    "norm_dim": Case(lambda x: torch.norm(x, 2.0, (1,), False), _lowp((4, 6)), FP32),
    # promote: mixed 16-bit and float32 inputs, computed in float32.
    "addcmul": Case(lambda a, b, c: torch.addcmul(a, b, c, value=0.5), _mixed("f32", "lp", "lp"), PROMOTE),
    "addcdiv": Case(lambda a, b, c: torch.addcdiv(a, b, c, value=0.5), _mixed("lp", "f32", "lp+"), PROMOTE),
    "atan2": Case(torch.atan2, _mixed("lp", "f32"), PROMOTE),
    "dot": Case(torch.dot, _mixed("lp", "f32", shape=(8,)), PROMOTE),
    "scatter_add": Case(lambda a, s: a.scatter_add(1, torch.tensor([[0, 1, 2], [2, 1, 0]], device=a.device), s),
                        lambda g, lp: [_r(g, 2, 4), _r(g, 2, 3, dtype=lp)], PROMOTE),
    "index_put": Case(lambda a, v: a.index_put((torch.tensor([0, 2], device=a.device),), v),
                      lambda g, lp: [_r(g, 3, 4, dtype=lp), _r(g, 2, 4)], PROMOTE),
    # Not in CUDA's lists (no autocast kernel: PyTorch's own type promotion
    # gives float32); CPU autocast registers them as promote.
    "cat": Case(lambda a, b: torch.cat([a, b]), _mixed("lp", "f32"), PROMOTE, True),
    "stack": Case(lambda a, b: torch.stack([a, b]), _mixed("lp", "f32"), PROMOTE, True),
    # Every other op falls through: it runs in its inputs' dtype.
    "relu": Case(torch.relu, _lowp((4, 6)), KEEP, True),
    "gelu": Case(F.gelu, _lowp((4, 6)), KEEP, True),
    "add_f32": Case(torch.add, _f32((4, 6), (4, 6)), KEEP, True),
}


def _expected_dtype(policy: str, lp: torch.dtype, inputs: list) -> torch.dtype:
    if policy == LOWP:
        return lp
    if policy in (FP32, PROMOTE):
        return torch.float32
    return next(t.dtype for t in inputs if t.is_floating_point())


def _policy_cast(policy: str, lp: torch.dtype, inputs: list) -> list:
    """The inputs as the policy hands them to the op."""
    to = {LOWP: lp, FP32: torch.float32, PROMOTE: torch.float32}.get(policy)
    if to is None:
        return inputs
    return [t.to(to) if t.is_floating_point() else t for t in inputs]


def _tol(dtype: torch.dtype) -> dict:
    # Within a couple of units in the last place of the result dtype: the
    # tpu and the CPU may round a 16-bit matmul's float32 accumulation
    # differently (summation order), never more.
    return {torch.bfloat16: {"rtol": 1.6e-2, "atol": 1e-2}, torch.float16: {"rtol": 2e-3, "atol": 2e-3},
            torch.float32: {"rtol": 1e-5, "atol": 1e-5}}[dtype]


@pytest.mark.parametrize("lp", DTYPES, ids=IDS.get)
@pytest.mark.parametrize("name", list(CASES))
def test_autocast_policy(name, lp, eager_mode):
    case = CASES[name]
    cpu = case.inputs(torch.Generator().manual_seed(0), lp)
    tpu = [t.to("tpu") for t in cpu]
    with torch.autocast("tpu", dtype=lp):
        assert torch.is_autocast_enabled("tpu") and torch.get_autocast_dtype("tpu") == lp
        got = case.fn(*tpu)
    want_dtype = _expected_dtype(case.policy, lp, cpu)
    assert got.device.type == "tpu"
    assert got.dtype == want_dtype, f"{name}: {got.dtype}, the {case.policy} policy gives {want_dtype}"
    # The CPU reference: the same op on the inputs cast as the policy casts them.
    want = case.ref(*cpu) if case.ref else case.fn(*_policy_cast(case.policy, lp, cpu))
    assert want.dtype == want_dtype
    torch.testing.assert_close(got.cpu(), want, **_tol(want_dtype), msg=lambda m: f"{name} ({IDS[lp]}): {m}")
    if case.cpu_same:
        with torch.autocast("cpu", dtype=lp):
            ref = case.fn(*cpu)
        assert ref.dtype == got.dtype, f"{name}: CPU autocast gives {ref.dtype}, tpu {got.dtype}"
        torch.testing.assert_close(got.cpu(), ref, **_tol(ref.dtype), msg=lambda m: f"{name} vs CPU autocast: {m}")


def test_autocast_outside_and_disabled():
    """Nothing changes outside the region or with enabled=False, and the
    state is restored on exit."""
    x, w = torch.randn(4, 8, device="tpu"), torch.randn(6, 8, device="tpu")
    assert not torch.is_autocast_enabled("tpu")
    assert F.linear(x, w).dtype == torch.float32
    with torch.autocast("tpu", dtype=torch.bfloat16):
        assert F.linear(x, w).dtype == torch.bfloat16
        with torch.autocast("tpu", enabled=False):
            assert F.linear(x, w).dtype == torch.float32
        # A float16 region nested in a bfloat16 one.
        with torch.autocast("tpu", dtype=torch.float16):
            assert F.linear(x, w).dtype == torch.float16
        assert F.linear(x, w).dtype == torch.bfloat16
        # CPU tensors are CPU autocast's business, which is off.
        assert F.linear(x.cpu(), w.cpu()).dtype == torch.float32
    assert not torch.is_autocast_enabled("tpu")
    assert F.linear(x, w).dtype == torch.float32


def test_amp_api():
    assert torch.tpu.get_amp_supported_dtype() == [torch.bfloat16, torch.float16]
    assert torch.tpu.is_bf16_supported()
    assert torch.amp.is_autocast_available("tpu")
    # PyTorch's default autocast dtype for a PrivateUse1 device.
    assert torch.get_autocast_dtype("tpu") == torch.float16
    from torch.tpu.amp import GradScaler, autocast

    x = torch.randn(4, 8, device="tpu")
    with autocast(dtype=torch.bfloat16):
        assert torch.get_autocast_dtype("tpu") == torch.bfloat16
        assert (x @ x.T).dtype == torch.bfloat16
    with torch.autocast("tpu"):
        assert (x @ x.T).dtype == torch.float16
    assert isinstance(GradScaler(), torch.amp.GradScaler) and GradScaler()._device == "tpu"
    with pytest.warns(UserWarning, match="not supported"):
        with torch.autocast("tpu", dtype=torch.float64):
            assert (x @ x.T).dtype == torch.float32  # disabled, with a warning (as for other devices)


def test_autocast_decorator_and_custom_fwd():
    x = torch.randn(4, 8, device="tpu")

    @torch.tpu.amp.autocast(dtype=torch.bfloat16)
    def f(t):
        return t @ t.T

    assert f(x).dtype == torch.bfloat16

    class Square(torch.autograd.Function):
        @staticmethod
        @torch.tpu.amp.custom_fwd(cast_inputs=torch.float32)
        def forward(ctx, t):
            ctx.save_for_backward(t)
            return t @ t.T  # autocast is off inside: float32

        @staticmethod
        @torch.tpu.amp.custom_bwd
        def backward(ctx, g):
            (t,) = ctx.saved_tensors
            return (g + g.T) @ t

    xb = x.to(torch.bfloat16).requires_grad_()
    with torch.autocast("tpu", dtype=torch.bfloat16):
        y = Square.apply(xb)
    assert y.dtype == torch.float32
    y.sum().backward()
    assert xb.grad.dtype == torch.bfloat16


def test_binary_cross_entropy_refused():
    """As on CUDA: binary_cross_entropy is unsafe under autocast."""
    p, y = torch.rand(4, device="tpu"), torch.rand(4, device="tpu")
    with torch.autocast("tpu", dtype=torch.bfloat16):
        with pytest.raises(RuntimeError, match="unsafe to autocast"):
            F.binary_cross_entropy(p, y)


def test_weight_cast_cache():
    """A float32 leaf that requires grad is cast once per region (PyTorch's
    cast cache), and the cast carries the gradient back in float32."""
    w = torch.randn(6, 8, device="tpu", requires_grad=True)
    x = torch.randn(4, 8, device="tpu")
    with torch.autocast("tpu", dtype=torch.bfloat16):
        a, b = F.linear(x, w), F.linear(x, w)
        loss = (a.float() + b.float()).sum()
    loss.backward()
    assert w.grad.dtype == torch.float32
    wc, xc = w.detach().cpu().requires_grad_(), x.cpu()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        lc = (F.linear(xc, wc).float() * 2).sum()
    lc.backward()
    torch.testing.assert_close(w.grad.cpu(), wc.grad, rtol=1.6e-2, atol=1e-2 * wc.grad.abs().max().item())


# ------------------------------------------------------------- training

def _mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32), torch.nn.GELU(),
                               torch.nn.Linear(32, 4))


def _batches(n: int):
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(16, 8, generator=g), torch.randn(16, 4, generator=g)) for _ in range(n)]


@pytest.mark.parametrize("lp", DTYPES, ids=IDS.get)
def test_autocast_training_step_matches_cpu(lp, eager_mode):
    """One forward and backward of an MLP under autocast (linear in the
    16-bit dtype, mse_loss in float32 on both devices): float32 gradients
    matching CPU autocast's."""
    cpu = _mlp()
    tpu = copy.deepcopy(cpu).to("tpu")
    (x, y), = _batches(1)
    losses = []
    for model, dev in ((cpu, "cpu"), (tpu, "tpu")):
        with torch.autocast(dev, dtype=lp):
            out = model(x.to(dev))
            assert out.dtype == lp
            loss = F.mse_loss(out, y.to(dev))
            assert loss.dtype == torch.float32
        loss.backward()
        losses.append(loss.detach().cpu())
    tol = _tol(lp)
    torch.testing.assert_close(losses[1], losses[0], **tol)
    for (n, pc), pt in zip(cpu.named_parameters(), tpu.parameters()):
        assert pt.grad.dtype == torch.float32
        torch.testing.assert_close(pt.grad.cpu(), pc.grad, rtol=tol["rtol"],
                                   atol=tol["atol"] * max(1.0, pc.grad.abs().max().item()), msg=lambda m: f"{n}: {m}")


def _scaler_steps(dev: str, model: torch.nn.Module, steps: list, scaler: torch.amp.GradScaler, inject=None):
    """Trains `model` on `steps` with f16 autocast and `scaler`; after each
    step, records (parameters, scale, growth tracker). `inject(i, model)` may
    corrupt gradient i before the step."""
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    trace = []
    for i, (x, y) in enumerate(steps):
        opt.zero_grad()
        with torch.autocast(dev, dtype=torch.float16):
            loss = F.mse_loss(model(x.to(dev)), y.to(dev))
        scaler.scale(loss).backward()
        if inject is not None:
            inject(i, model)
        scaler.step(opt)
        scaler.update()
        trace.append(([p.detach().cpu().clone() for p in model.parameters()], scaler.get_scale(),
                      int(scaler._growth_tracker.item())))
    return trace


def _inf_at(step: int, value: float):
    def inject(i, model):
        if i == step:
            with torch.no_grad():
                model[2].weight.grad[3, 5] = value
    return inject


@pytest.mark.parametrize("bad", [None, math.inf, -math.inf, math.nan], ids=["finite", "inf", "-inf", "nan"])
def test_grad_scaler_matches_cpu(bad, eager_mode):
    """GradScaler("tpu") and GradScaler("cpu") on the same f16 run: the same
    scales and growth trackers at every step, parameters within f16 rounding;
    with a non-finite gradient at step 2 both skip that step (the tpu
    parameters stay bit-identical) and back the scale off."""
    steps = _batches(6)
    inject = None if bad is None else _inf_at(2, bad)
    cpu = _mlp()
    tpu = copy.deepcopy(cpu).to("tpu")
    kw = {"init_scale": 2.0**10, "growth_interval": 2}  # grows every 2 good steps: both paths exercised
    want = _scaler_steps("cpu", cpu, steps, torch.amp.GradScaler("cpu", **kw), inject)
    got = _scaler_steps("tpu", tpu, steps, torch.amp.GradScaler("tpu", **kw), inject)
    for i, ((pg, sg, tg), (pw, sw, tw)) in enumerate(zip(got, want)):
        assert (sg, tg) == (sw, tw), f"step {i}: tpu scale/tracker {(sg, tg)}, cpu {(sw, tw)}"
        for a, b in zip(pg, pw):
            torch.testing.assert_close(a, b, rtol=2e-3, atol=2e-3, msg=lambda m: f"step {i}: {m}")
    scales = [s for _, s, _ in want]
    if bad is None:
        assert scales == [2.0**10, 2.0**11, 2.0**11, 2.0**12, 2.0**12, 2.0**13]
    else:
        # Step 2 is skipped: the scale backs off (x0.5) and its tracker restarts.
        assert scales == [2.0**10, 2.0**11, 2.0**10, 2.0**10, 2.0**11, 2.0**11]
        assert all(torch.equal(a, b) for a, b in zip(got[2][0], got[1][0])), "the optimizer step was not skipped"
        assert not all(torch.equal(a, b) for a, b in zip(got[3][0], got[2][0]))


def test_grad_scaler_kernels_run_on_tpu():
    """The unscale and scale-update kernels are the runtime's: with the CPU
    fallback on, nothing falls back, and the found_inf / scale tensors stay
    on the tpu."""
    prev = torch.tpu.enable_cpu_fallback
    torch.tpu.enable_cpu_fallback = True
    try:
        before = torch.tpu.fallback_stats()
        model = _mlp().to("tpu")
        scaler = torch.amp.GradScaler("tpu", init_scale=4.0)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        (x, y), = _batches(1)
        with torch.autocast("tpu", dtype=torch.float16):
            loss = F.mse_loss(model(x.to("tpu")), y.to("tpu"))
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        found = scaler._found_inf_per_device(opt)
        assert [t.device.type for t in found.values()] == ["tpu"]
        scaler.step(opt)
        scaler.update()
        assert scaler._scale.device.type == "tpu"
        assert torch.tpu.fallback_stats() == before, "an op fell back to the CPU"
    finally:
        torch.tpu.enable_cpu_fallback = prev


@pytest.mark.parametrize("bad", [None, math.inf, math.nan], ids=["finite", "inf", "nan"])
def test_grad_scaler_kernels_match_cpu(bad):
    """_amp_foreach_non_finite_check_and_unscale_ and _amp_update_scale_
    called directly, against the CPU kernels: the same unscaled gradients
    (float32 and float16), found_inf, scale and growth tracker."""
    g = torch.Generator().manual_seed(0)
    grads = [torch.randn(5, 3, generator=g), torch.randn(7, generator=g).half(), torch.randn(2, 2, generator=g)]
    if bad is not None:
        grads[1][4] = bad
    cpu = [t.clone() for t in grads]
    tpu = [t.to("tpu") for t in grads]
    found_c, found_t = torch.zeros(()), torch.zeros((), device="tpu")
    torch._amp_foreach_non_finite_check_and_unscale_(cpu, found_c, torch.full((), 0.125))
    torch._amp_foreach_non_finite_check_and_unscale_(tpu, found_t, torch.full((), 0.125, device="tpu"))
    assert found_t.item() == found_c.item() == (0.0 if bad is None else 1.0)
    for a, b in zip(tpu, cpu):
        assert a.dtype == b.dtype
        torch.testing.assert_close(a.cpu(), b, rtol=0, atol=0, equal_nan=True)
    for tracker in (0, 1):  # growth_interval 2: the second good step grows the scale
        scale_c, track_c = torch.full((), 8.0), torch.full((), tracker, dtype=torch.int32)
        scale_t, track_t = scale_c.to("tpu"), track_c.to("tpu")
        torch._amp_update_scale_(scale_c, track_c, found_c, 2.0, 0.5, 2)
        torch._amp_update_scale_(scale_t, track_t, found_t, 2.0, 0.5, 2)
        assert (scale_t.item(), track_t.item()) == (scale_c.item(), track_c.item())


def test_grad_scaler_disabled_is_identity():
    scaler = torch.amp.GradScaler("tpu", enabled=False)
    loss = torch.tensor(3.0, device="tpu")
    assert scaler.scale(loss) is loss
    assert not scaler.is_enabled()


@pytest.mark.parametrize("ctx", ["none", "no_grad"])
def test_autocast_inference(ctx):
    """Inference under autocast (no autograd): the same dtypes."""
    model = _mlp().to("tpu")
    x = torch.randn(4, 8, device="tpu")
    with torch.no_grad() if ctx == "no_grad" else contextlib.nullcontext():
        with torch.autocast("tpu", dtype=torch.bfloat16):
            assert model(x).dtype == torch.bfloat16
