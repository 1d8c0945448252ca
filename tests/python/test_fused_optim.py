"""The fused optimizer steps (`_fused_adam_`, `_fused_adamw_`, `_fused_sgd_`)
through the C ABI, against torch.optim's single-tensor forms on CPU (and
PyTorch's own CPU fused kernels where the single-tensor form rounds
differently: bfloat16, grad_scale). Every updated tensor is compared after
each of several steps."""

import pytest
import torch

from conftest import check, cpu, tpu

SHAPES = [(3, 4), (7,), (2, 3, 5), ()]
STEPS = 4


def _params(dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=g).to(dtype) for s in SHAPES]


def _grads(step, dtype=torch.float32):
    g = torch.Generator().manual_seed(100 + step)
    return [torch.randn(s, generator=g).to(dtype) for s in SHAPES]


def _run_cpu(cls, kwargs, params, grads_per_step):
    """torch.optim on CPU, single-tensor form; the state after each step."""
    ps = [p.clone().requires_grad_() for p in params]
    opt = cls(ps, foreach=False, fused=False, **kwargs)
    history = []
    for grads in grads_per_step:
        for p, g in zip(ps, grads):
            p.grad = g.clone()
        opt.step()
        history.append(([p.detach().clone() for p in ps], [{k: v.clone() for k, v in opt.state[p].items()} for p in ps]))
    return history


ADAM_CASES = {
    "adam": (torch.optim.Adam, dict(lr=1e-2)),
    "adam-wd": (torch.optim.Adam, dict(lr=1e-2, weight_decay=0.1, betas=(0.8, 0.99))),
    "adam-amsgrad-maximize": (torch.optim.Adam, dict(lr=3e-2, amsgrad=True, maximize=True, weight_decay=0.05)),
    "adamw": (torch.optim.AdamW, dict(lr=1e-2, weight_decay=0.1)),
    "adamw-amsgrad": (torch.optim.AdamW, dict(lr=1e-2, weight_decay=0.3, amsgrad=True, eps=1e-6)),
    "adamw-maximize-beta1-high": (torch.optim.AdamW, dict(lr=1e-3, betas=(0.3, 0.9), maximize=True)),
}


def _adam_kwargs(cls, kw):
    b1, b2 = kw.get("betas", (0.9, 0.999))
    return dict(
        lr=kw["lr"], beta1=b1, beta2=b2, weight_decay=kw.get("weight_decay", 0.01 if cls is torch.optim.AdamW else 0.0),
        eps=kw.get("eps", 1e-8), amsgrad=kw.get("amsgrad", False), maximize=kw.get("maximize", False))


def _adam_call(rt, cls, st, steps, k, lr=None, overload="", grad_scale=None, found_inf=None):
    op = "aten::_fused_adamw_" if cls is torch.optim.AdamW else "aten::_fused_adam_"
    step_t = [tpu(rt, torch.tensor(float(steps))) for _ in st["p"]]
    lr = k["lr"] if lr is None else lr
    args = [st["p"], st["g"], st["m"], st["v"], st["mx"], step_t, lr, k["beta1"], k["beta2"], k["weight_decay"],
            k["eps"], k["amsgrad"], k["maximize"]]
    if grad_scale is not None or found_inf is not None:
        args += [grad_scale, found_inf]
    assert rt.call(op + overload, *args) == []


def _adam_state(rt, params, amsgrad):
    zeros = [torch.zeros_like(p) for p in params]
    return {"p": [tpu(rt, p) for p in params], "g": [], "m": [tpu(rt, z) for z in zeros],
            "v": [tpu(rt, z) for z in zeros], "mx": [tpu(rt, z) for z in zeros] if amsgrad else []}


def _check_adam(st, ref_params, ref_state, amsgrad, **tol):
    for i, (p, s) in enumerate(zip(ref_params, ref_state)):
        check(cpu(st["p"][i]), p, **tol)
        check(cpu(st["m"][i]), s["exp_avg"], **tol)
        check(cpu(st["v"][i]), s["exp_avg_sq"], **tol)
        if amsgrad:
            check(cpu(st["mx"][i]), s["max_exp_avg_sq"], **tol)


@pytest.mark.parametrize("case", list(ADAM_CASES))
def test_fused_adam_matches_torch_optim(rt, case):
    cls, kw = ADAM_CASES[case]
    k = _adam_kwargs(cls, kw)
    params = _params()
    grads = [_grads(s) for s in range(STEPS)]
    history = _run_cpu(cls, kw, params, grads)
    st = _adam_state(rt, params, k["amsgrad"])
    for s in range(STEPS):
        st["g"] = [tpu(rt, g) for g in grads[s]]
        _adam_call(rt, cls, st, s + 1, k)
        _check_adam(st, *history[s], k["amsgrad"], rtol=2e-6, atol=1e-7)
        # Without grad_scale the gradients are left as they were.
        for g_dev, g in zip(st["g"], grads[s]):
            check(cpu(g_dev), g, rtol=0, atol=0)


@pytest.mark.parametrize("cls", [torch.optim.Adam, torch.optim.AdamW])
def test_fused_adam_tensor_lr_and_changing_lr(rt, cls, mode):
    """The `.tensor_lr` overload, and a float lr that changes every step (a
    scheduler): a runtime value, so strict mode compiles the step once."""
    params = _params()
    grads = [_grads(s) for s in range(STEPS)]
    lrs = [1e-2, 5e-3, 2e-2, 1e-3]
    ps = [p.clone().requires_grad_() for p in params]
    opt = cls(ps, lr=lrs[0], weight_decay=0.1, amsgrad=True, foreach=False, fused=False)
    k = _adam_kwargs(cls, dict(lr=lrs[0], weight_decay=0.1, amsgrad=True))
    st_f, st_t = _adam_state(rt, params, True), _adam_state(rt, params, True)
    compiles = None
    for s in range(STEPS):
        for p, g in zip(ps, grads[s]):
            p.grad = g.clone()
        opt.param_groups[0]["lr"] = lrs[s]
        opt.step()
        st_f["g"] = [tpu(rt, g) for g in grads[s]]
        st_t["g"] = [tpu(rt, g) for g in grads[s]]
        _adam_call(rt, cls, st_f, s + 1, k, lr=lrs[s])
        if s == 0:
            compiles = rt.stats()["compiles"]
        _adam_call(rt, cls, st_t, s + 1, k, lr=tpu(rt, torch.tensor(lrs[s])), overload=".tensor_lr")
        state = [opt.state[p] for p in ps]
        _check_adam(st_f, [p.detach() for p in ps], state, True, rtol=2e-6, atol=1e-7)
        _check_adam(st_t, [p.detach() for p in ps], state, True, rtol=2e-6, atol=1e-7)
    if mode == "strict":
        # One more program for the first tensor_lr call and the step tensors;
        # none for the later learning rates.
        rt.synchronize()
        assert rt.stats()["compiles"] - compiles <= 2


def test_fused_adam_bfloat16_matches_torch_fused_cpu(rt):
    """bfloat16 parameters and state: one rounding per element, as PyTorch's
    CPU fused kernel (the single-tensor form rounds every operation)."""
    params = _params(torch.bfloat16)
    ref = {"p": [p.clone() for p in params], "m": [torch.zeros_like(p) for p in params],
           "v": [torch.zeros_like(p) for p in params], "mx": [torch.zeros_like(p) for p in params]}
    st = _adam_state(rt, params, True)
    k = dict(lr=1e-2, beta1=0.9, beta2=0.999, weight_decay=0.1, eps=1e-8, amsgrad=True, maximize=False)
    for s in range(STEPS):
        grads = _grads(s, torch.bfloat16)
        steps = [torch.tensor(float(s + 1)) for _ in params]
        torch._fused_adamw_(ref["p"], grads, ref["m"], ref["v"], ref["mx"], steps, **k)
        st["g"] = [tpu(rt, g) for g in grads]
        _adam_call(rt, torch.optim.AdamW, st, s + 1, k)
        for key in ("p", "m", "v", "mx"):
            for a, b in zip(st[key], ref[key]):
                # One bf16 ulp where the two kernels' f32 values straddle a
                # rounding boundary.
                check(cpu(a), b, rtol=8e-3, atol=1e-5)


def test_fused_adam_grad_scale_and_found_inf(rt):
    """grad_scale unscales the gradients (and stores them unscaled); a
    found_inf of 1 skips the step, leaving every tensor as it was. The
    reference is PyTorch's CPU fused kernel."""
    params = _params()
    k = dict(lr=1e-2, beta1=0.9, beta2=0.999, weight_decay=0.0, eps=1e-8, amsgrad=True, maximize=False)
    ref = {"p": [p.clone() for p in params], "m": [torch.zeros_like(p) for p in params],
           "v": [torch.zeros_like(p) for p in params], "mx": [torch.zeros_like(p) for p in params]}
    st = _adam_state(rt, params, True)
    scale = torch.tensor(1024.0)
    for s in range(3):
        grads = [g * 1024 for g in _grads(s)]
        inf = torch.tensor(1.0 if s == 1 else 0.0)
        steps = [torch.tensor(float(s + 1)) for _ in params]
        ref["g"] = [g.clone() for g in grads]
        torch._fused_adam_(ref["p"], ref["g"], ref["m"], ref["v"], ref["mx"], steps, **k, grad_scale=scale,
                           found_inf=inf)
        st["g"] = [tpu(rt, g) for g in grads]
        _adam_call(rt, torch.optim.Adam, st, s + 1, k, grad_scale=tpu(rt, scale), found_inf=tpu(rt, inf))
        for key in ("p", "g", "m", "v", "mx"):
            for a, b in zip(st[key], ref[key]):
                check(cpu(a), b, rtol=2e-6, atol=1e-7)
        if s == 1:
            for a, p in zip(st["g"], grads):
                check(cpu(a), p, rtol=0, atol=0)


SGD_CASES = {
    "plain": dict(lr=0.1),
    "wd-maximize": dict(lr=0.05, weight_decay=0.1, maximize=True),
    "momentum": dict(lr=0.1, momentum=0.9),
    "momentum-dampening-wd": dict(lr=0.1, momentum=0.8, dampening=0.3, weight_decay=1e-2),
    "nesterov": dict(lr=0.1, momentum=0.9, nesterov=True),
    "nesterov-maximize-wd": dict(lr=0.02, momentum=0.5, nesterov=True, maximize=True, weight_decay=0.2),
}


def _sgd_call(rt, st, kw, first, lr=None, overload="", grad_scale=None, found_inf=None):
    args = [st["p"], st["g"], st["buf"], kw.get("weight_decay", 0.0), kw.get("momentum", 0.0),
            kw["lr"] if lr is None else lr, kw.get("dampening", 0.0), kw.get("nesterov", False),
            kw.get("maximize", False), first]
    if grad_scale is not None or found_inf is not None:
        args += [grad_scale, found_inf]
    assert rt.call("aten::_fused_sgd_" + overload, *args) == []


@pytest.mark.parametrize("case", list(SGD_CASES))
@pytest.mark.parametrize("tensor_lr", [False, True])
def test_fused_sgd_matches_torch_optim(rt, case, tensor_lr):
    kw = SGD_CASES[case]
    params = _params()
    grads = [_grads(s) for s in range(STEPS)]
    history = _run_cpu(torch.optim.SGD, kw, params, grads)
    momentum = kw.get("momentum", 0.0) != 0
    # The buffers' first values are never read (is_first_step fills them).
    st = {"p": [tpu(rt, p) for p in params], "buf": [tpu(rt, torch.full_like(p, 7.0)) for p in params] if momentum else []}
    for s in range(STEPS):
        st["g"] = [tpu(rt, g) for g in grads[s]]
        lr, overload = (tpu(rt, torch.tensor(kw["lr"])), ".tensor_lr") if tensor_lr else (None, "")
        _sgd_call(rt, st, kw, momentum and s == 0, lr=lr, overload=overload)
        ref_params, ref_state = history[s]
        for i, p in enumerate(ref_params):
            check(cpu(st["p"][i]), p, rtol=1e-6, atol=1e-7)
            if momentum:
                check(cpu(st["buf"][i]), ref_state[i]["momentum_buffer"], rtol=1e-6, atol=1e-7)
        for g_dev, g in zip(st["g"], grads[s]):
            check(cpu(g_dev), g, rtol=0, atol=0)


def test_fused_sgd_bfloat16_and_grad_scale_match_torch_fused_cpu(rt):
    for dtype in (torch.bfloat16, torch.float32):
        params = _params(dtype)
        kw = dict(weight_decay=0.01, momentum=0.9, lr=0.1, dampening=0.0, nesterov=True, maximize=False)
        ref = {"p": [p.clone() for p in params], "buf": [torch.zeros_like(p) for p in params]}
        st = {"p": [tpu(rt, p) for p in params], "buf": [tpu(rt, torch.zeros_like(p)) for p in params]}
        scale = torch.tensor(64.0)
        for s in range(3):
            grads = [g * 64 for g in _grads(s, dtype)]
            inf = torch.tensor(1.0 if s == 2 else 0.0)
            ref["g"] = [g.clone() for g in grads]
            torch._fused_sgd_(ref["p"], ref["g"], ref["buf"], **kw, is_first_step=s == 0, grad_scale=scale,
                              found_inf=inf)
            st["g"] = [tpu(rt, g) for g in grads]
            _sgd_call(rt, st, kw, s == 0, grad_scale=tpu(rt, scale), found_inf=tpu(rt, inf))
            tol = dict(rtol=8e-3, atol=1e-5) if dtype == torch.bfloat16 else dict(rtol=1e-6, atol=1e-7)
            for key in ("p", "g", "buf"):
                for a, b in zip(st[key], ref[key]):
                    check(cpu(a), b, **tol)


def test_fused_step_writes_through_views(rt):
    """Parameters that are views of one flat buffer (as with flattened
    parameter groups) are each written through their storage."""
    flat = torch.randn(20)
    views_cpu = [flat[:12].view(3, 4), flat[12:]]
    grads = [torch.randn(3, 4), torch.randn(8)]
    ps = [v.clone().requires_grad_() for v in views_cpu]
    opt = torch.optim.SGD(ps, lr=0.1, momentum=0.9, foreach=False, fused=False)
    for p, g in zip(ps, grads):
        p.grad = g
    opt.step()
    base = tpu(rt, flat)
    views = [rt.call1("aten::as_strided", base, [3, 4], [4, 1], 0), rt.call1("aten::as_strided", base, [8], [1], 12)]
    bufs = [tpu(rt, torch.zeros_like(g)) for g in grads]
    _sgd_call(rt, {"p": views, "g": [tpu(rt, g) for g in grads], "buf": bufs}, dict(lr=0.1, momentum=0.9), True)
    check(cpu(base), torch.cat([p.detach().reshape(-1) for p in ps]), rtol=1e-6, atol=1e-7)
    for b, p in zip(bufs, ps):
        check(cpu(b), opt.state[p]["momentum_buffer"], rtol=0, atol=0)


def test_fused_step_fuses_with_surrounding_ops(rt, mode):
    """In fused mode the gradient computation and the step are one program."""
    if mode != "fused":
        pytest.skip("fused mode only")
    x = torch.randn(16)
    p = torch.randn(16)
    pd, xd = tpu(rt, p), tpu(rt, x)
    rt.flush()
    gd = rt.call1("aten::mul.Tensor", xd, xd)
    _sgd_call(rt, {"p": [pd], "g": [gd], "buf": []}, dict(lr=0.5), False)
    out = rt.call1("aten::add.Scalar", pd, 1.0)
    check(cpu(out), p - 0.5 * (x * x) + 1, rtol=1e-6, atol=1e-6)
    f = rt.last_flush()
    assert f["recorded"] == 3 and f["lowered"] == 3, f


def test_fused_adam_rejects_mismatched_lists(rt):
    import torchtpu

    p = [tpu(rt, torch.randn(3))]
    with pytest.raises(torchtpu.InvalidArgumentError, match="exp_avgs has 0 tensors"):
        rt.call("aten::_fused_adam_", p, p, [], [], [], [tpu(rt, torch.tensor(1.0))], 1e-3, 0.9, 0.999, 0.0, 1e-8,
                False, False)
    with pytest.raises(torchtpu.InvalidArgumentError, match=r"grads\[0\] has shape \[4\]"):
        rt.call("aten::_fused_sgd_", p, [tpu(rt, torch.randn(4))], [], 0.0, 0.0, 0.1, 0.0, False, False, False)
