"""The AMP kernels of ``torch.amp.GradScaler`` against PyTorch CPU:
``_amp_foreach_non_finite_check_and_unscale_`` and ``_amp_update_scale_``,
and their functional forms, in every execution mode."""

import pytest
import torch

import torchtpu
from conftest import check, cpu, tpu, view

A = torch.ops.aten
INF, NAN = float("inf"), float("nan")


def _unscale_both(rt, grads, found, inv):
    """Runs the in-place unscale on device copies and on CPU; returns
    (device grads, device found_inf, cpu grads, cpu found_inf)."""
    dg = [tpu(rt, g) for g in grads]
    dfound = tpu(rt, found)
    assert rt.call("aten::_amp_foreach_non_finite_check_and_unscale_", dg, dfound, tpu(rt, inv)) == []
    cg, cfound = [g.clone() for g in grads], found.clone()
    torch._amp_foreach_non_finite_check_and_unscale_(cg, cfound, inv)
    return [cpu(g) for g in dg], cpu(dfound), cg, cfound


def _exact(actual, expected):
    check(actual, expected, atol=0, rtol=0)


UNSCALE_CASES = {
    "finite": [torch.tensor([1024.0, -2048.0, 3.0]), torch.arange(12.0).reshape(3, 4) * 512],
    "inf": [torch.tensor([1.0, 2.0]), torch.tensor([[3.0, INF], [5.0, 6.0]])],
    "-inf": [torch.tensor([-INF, 2.0, 7.0])],
    "nan": [torch.tensor([1.0, NAN]), torch.tensor([4.0])],
    "bf16": [torch.tensor([1e4, -3.0, 0.0078125]).to(torch.bfloat16), torch.randn(5).to(torch.bfloat16) * 100],
    "f16-inf": [torch.tensor([60000.0, 1.0]).half(), torch.tensor([INF, 2.0]).half()],
    "mixed": [torch.randn(4, 3), torch.randn(7).double() * 1e3, torch.tensor([1.0, 2.0]).half(),
              torch.tensor([NAN]).to(torch.bfloat16)],
    "empty-and-rank0": [torch.zeros(0), torch.tensor(INF), torch.tensor(3.0)],
}


@pytest.mark.parametrize("case", list(UNSCALE_CASES))
@pytest.mark.parametrize("found0", [0.0, 1.0, 0.5])
def test_unscale_matches_torch(rt, case, found0):
    grads = UNSCALE_CASES[case]
    # 1/3 is inexact in f32: the product's rounding is visible in every dtype.
    for inv_value in (1 / 1024, 1 / 3):
        g, f, cg, cf = _unscale_both(rt, grads, torch.tensor([found0]), torch.tensor([inv_value]))
        for a, b in zip(g, cg):
            _exact(a, b)
        _exact(f, cf)


def test_unscale_found_inf_by_hand(rt):
    """found_inf is set to 1 by a non-finite element anywhere, else left as it
    was; gradients are always multiplied (an inf stays inf, a NaN NaN)."""
    g, f, _, _ = _unscale_both(rt, [torch.tensor([2.0, 4.0]), torch.tensor([8.0, -INF])], torch.tensor([0.0]),
                               torch.tensor([0.25]))
    _exact(g[0], torch.tensor([0.5, 1.0]))
    _exact(g[1], torch.tensor([2.0, -INF]))
    _exact(f, torch.tensor([1.0]))
    g, f, _, _ = _unscale_both(rt, [torch.tensor([2.0])], torch.tensor([0.75]), torch.tensor([0.5]))
    _exact(f, torch.tensor([0.75]))
    _exact(g[0], torch.tensor([1.0]))


def test_unscale_writes_through_views_and_rank0_scalars(rt):
    base = torch.arange(12.0).reshape(3, 4)
    base[1, 2] = NAN
    dbase = tpu(rt, base)
    col = view(rt, dbase, [3], [4], 2)  # column 2 (holds the NaN)
    row = view(rt, dbase, [2], [1], 0)  # row 0, columns 0 and 1
    found = tpu(rt, torch.tensor(0.0))
    rt.call("aten::_amp_foreach_non_finite_check_and_unscale_", [col, row], found, tpu(rt, torch.tensor(0.5)))
    ref = base.clone()
    torch._amp_foreach_non_finite_check_and_unscale_([ref[:, 2], ref[0, :2]], ref_found := torch.tensor(0.0),
                                                     torch.tensor(0.5))
    _exact(cpu(dbase), ref)
    _exact(cpu(found), ref_found)


def test_unscale_functional_form(rt):
    grads = [torch.tensor([4.0, 8.0]), torch.tensor([[1.0, INF]]).half()]
    dg = [tpu(rt, g) for g in grads]
    dfound = tpu(rt, torch.tensor([0.0]))
    out = rt.call("aten::_amp_foreach_non_finite_check_and_unscale", dg, dfound, tpu(rt, torch.tensor([0.5])))
    want_g, want_f = A._amp_foreach_non_finite_check_and_unscale(grads, torch.tensor([0.0]), torch.tensor([0.5]))
    # The C ABI flattens (Tensor[] self_out, Tensor found_inf_out) into len(self) + 1 values.
    assert len(out) == 3
    for a, b in zip(out[:2], want_g):
        _exact(cpu(a), b)
    _exact(cpu(out[2]), want_f)
    # The inputs are untouched.
    for a, b in zip(dg, grads):
        _exact(cpu(a), b)
    _exact(cpu(dfound), torch.tensor([0.0]))
    out = rt.call("aten::_amp_foreach_non_finite_check_and_unscale", [], dfound, tpu(rt, torch.tensor([0.5])))
    assert len(out) == 1
    _exact(cpu(out[0]), torch.tensor([0.0]))


def test_unscale_errors(rt):
    g = [tpu(rt, torch.ones(2))]
    name = "aten::_amp_foreach_non_finite_check_and_unscale_"
    with pytest.raises(torchtpu.InvalidArgumentError, match=f"{name}: inv_scale must be a float tensor"):
        rt.call(name, g, tpu(rt, torch.zeros(1)), tpu(rt, torch.ones(1, dtype=torch.float64)))
    with pytest.raises(torchtpu.InvalidArgumentError, match="found_inf must be a 1-element tensor"):
        rt.call(name, g, tpu(rt, torch.zeros(2)), tpu(rt, torch.ones(1)))
    with pytest.raises(torchtpu.UnimplementedError, match="int64"):
        rt.call(name, [tpu(rt, torch.ones(2, dtype=torch.int64))], tpu(rt, torch.zeros(1)), tpu(rt, torch.ones(1)))
    # No gradients: nothing is checked or written (as in PyTorch).
    assert rt.call(name, [], tpu(rt, torch.zeros(2, dtype=torch.int64)), tpu(rt, torch.ones(3))) == []


def _update_both(rt, scale, tracker, found, growth, backoff, interval):
    ds, dt = tpu(rt, torch.tensor([scale])), tpu(rt, torch.tensor([tracker], dtype=torch.int32))
    out = rt.call("aten::_amp_update_scale_", ds, dt, tpu(rt, torch.tensor([found])), growth, backoff, interval)
    assert len(out) == 1
    cs, ct = torch.tensor([scale]), torch.tensor([tracker], dtype=torch.int32)
    torch._amp_update_scale_(cs, ct, torch.tensor([found]), growth, backoff, interval)
    _exact(cpu(out[0]), cs)  # the returned alias of self
    _exact(cpu(ds), cs)
    _exact(cpu(dt), ct)
    return cs.item(), ct.item()


# (scale, tracker, found_inf, growth, backoff, interval, want scale, want tracker), by hand.
UPDATE_CASES = {
    "inf-found": (65536.0, 7, 1.0, 2.0, 0.5, 2000, 32768.0, 0),
    "nan-found": (4.0, 3, NAN, 2.0, 0.5, 10, 2.0, 0),
    "negative-found": (4.0, 3, -2.0, 2.0, 0.5, 10, 2.0, 0),
    "count": (4.0, 3, 0.0, 2.0, 0.5, 10, 4.0, 4),
    "grow-at-interval": (4.0, 9, 0.0, 2.0, 0.5, 10, 8.0, 0),
    "interval-1": (4.0, 0, 0.0, 2.0, 0.5, 1, 8.0, 0),
    "growth-overflows": (3e38, 1, 0.0, 2.0, 0.5, 2, 3e38, 0),
    "growth-inf": (4.0, 1, 0.0, INF, 0.5, 2, 4.0, 0),
    "past-interval": (4.0, 7, 0.0, 2.0, 0.5, 3, 4.0, 8),
    "interval-0": (4.0, 0, 0.0, 2.0, 0.5, 0, 4.0, 1),
}


@pytest.mark.parametrize("case", list(UPDATE_CASES))
def test_update_scale_matches_torch_and_hand(rt, case):
    *args, want_scale, want_tracker = UPDATE_CASES[case]
    scale, tracker = _update_both(rt, *args)
    assert (torch.tensor([scale]).item(), tracker) == (torch.tensor([want_scale]).item(), want_tracker)


def test_update_scale_rounds_the_double_product(rt):
    """scale * factor is computed in double and rounded to float once; with
    these values a float product of the float factor gives another float."""
    s, k = 64.0592041015625, 0.8823814699152238
    assert torch.tensor(s * k, dtype=torch.float32) != torch.tensor(s) * torch.tensor(k, dtype=torch.float32)
    for found, tracker, interval in ((1.0, 0, 5), (0.0, 4, 5)):
        scale, _ = _update_both(rt, s, tracker, found, k, k, interval)
        assert scale == torch.tensor(s * k, dtype=torch.float32).item()


def test_update_scale_functional_form(rt):
    ds, dt, df = tpu(rt, torch.tensor([4.0])), tpu(rt, torch.tensor([9], dtype=torch.int32)), tpu(rt, torch.tensor([0.0]))
    out = rt.call("aten::_amp_update_scale", ds, dt, df, 2.0, 0.5, 10)
    want = A._amp_update_scale(torch.tensor([4.0]), torch.tensor([9], dtype=torch.int32), torch.tensor([0.0]), 2.0, 0.5, 10)
    assert len(out) == 2
    _exact(cpu(out[0]), want[0])
    _exact(cpu(out[1]), want[1])
    _exact(cpu(ds), torch.tensor([4.0]))
    _exact(cpu(dt), torch.tensor([9], dtype=torch.int32))


def test_update_scale_errors(rt):
    name = "aten::_amp_update_scale_"
    s, t, f = torch.tensor([4.0]), torch.tensor([1], dtype=torch.int32), torch.tensor([0.0])
    for args, msg in [((s, t.long(), f), "growth_tracker must be an int tensor"),
                      ((s.double(), t, f), "current_scale must be a float tensor"),
                      ((s, t, f.double()), "found_inf must be a float tensor"),
                      ((torch.ones(2), t, f), "current_scale must be a 1-element tensor")]:
        with pytest.raises(torchtpu.InvalidArgumentError, match=f"{name}: {msg}"):
            rt.call(name, *[tpu(rt, a) for a in args], 2.0, 0.5, 10)


def test_grad_scaler_steps(rt):
    """A GradScaler's per-step sequence, state kept on the device between
    steps (in fused mode, pending across steps): unscale, then update."""
    scale, tracker = torch.tensor([2.0**16]), torch.tensor([0], dtype=torch.int32)
    ds, dt = tpu(rt, scale), tpu(rt, tracker)
    for step, bad in enumerate([None, INF, None, None, NAN, None, None, None]):
        grads = [torch.randn(6) * 1000, torch.randn(2, 3).to(torch.bfloat16)]
        if bad is not None:
            grads[step % 2].view(-1)[1] = bad
        found = torch.zeros(1)
        inv = scale.double().reciprocal().float()
        torch._amp_foreach_non_finite_check_and_unscale_(cg := [g.clone() for g in grads], found, inv)
        torch._amp_update_scale_(scale, tracker, found, 2.0, 0.5, 3)
        dg, dfound = [tpu(rt, g) for g in grads], tpu(rt, torch.zeros(1))
        dinv = rt.call1("aten::reciprocal", rt.call1("aten::_to_copy", ds, torchtpu.DType(torch.float64)))
        dinv = rt.call1("aten::_to_copy", dinv, torchtpu.DType(torch.float32))
        rt.call("aten::_amp_foreach_non_finite_check_and_unscale_", dg, dfound, dinv)
        rt.call("aten::_amp_update_scale_", ds, dt, dfound, 2.0, 0.5, 3)
        for a, b in zip(dg, cg):
            _exact(cpu(a), b)
        _exact(cpu(dfound), found)
    _exact(cpu(ds), scale)
    _exact(cpu(dt), tracker)
    assert scale.item() != 2.0**16  # the sequence both backed off and grew
