"""Recurrent modules on "tpu" against the CPU: nn.LSTM, nn.GRU and their
cells run PyTorch's fused cell kernels on an accelerator
(aten::_thnn_fused_lstm_cell, aten::_thnn_fused_gru_cell and their
backward). Each case runs forward and backward in strict, synchronous, fused
and compiled mode and must match the CPU's outputs, final states and the
gradients of the input, the initial state and every parameter."""

from __future__ import annotations

import copy

import pytest
import torch

RUNS = ["DEFER_NEVER", "DEFER_NEVER_AND_LAUNCH_BLOCKING", "DEFER_AND_FUSE", "compile"]
TOL = dict(rtol=1e-5, atol=1e-5)


def _lstm(**kw):
    return torch.nn.LSTM(5, 7, **kw), True


def _gru(**kw):
    return torch.nn.GRU(5, 7, **kw), False


CASES = {
    "lstm": lambda: _lstm(),
    "lstm_2layer_batch_first": lambda: _lstm(num_layers=2, batch_first=True),
    "lstm_bidirectional_no_bias": lambda: _lstm(bidirectional=True, bias=False),
    "lstm_proj": lambda: _lstm(proj_size=3),
    "gru": lambda: _gru(),
    "gru_2layer_bidirectional": lambda: _gru(num_layers=2, bidirectional=True, batch_first=True),
    "gru_no_bias": lambda: _gru(bias=False),
}


def _states(module, is_lstm, batch, g):
    layers = module.num_layers * (2 if module.bidirectional else 1)
    h_size = module.proj_size if is_lstm and module.proj_size else module.hidden_size
    h0 = torch.randn(layers, batch, h_size, generator=g)
    if is_lstm:
        return (h0, torch.randn(layers, batch, module.hidden_size, generator=g))
    return h0


def _run(module, x, state, run):
    fwd = torch.compile(module, backend="tpu") if run == "compile" else module
    out, final = fwd(x, state)
    finals = final if isinstance(final, tuple) else (final,)
    # A loss that weighs every element differently, so that no gradient is
    # a plain sum.
    w = torch.linspace(-1.0, 1.0, out.numel()).reshape(out.shape).to(out.device)
    loss = (out * w).sum() + sum((f * f).sum() for f in finals)
    loss.backward()
    return out, finals


@pytest.mark.parametrize("run", RUNS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_recurrent_module_matches_cpu(name, run):
    torch.manual_seed(0)
    module, is_lstm = CASES[name]()
    g = torch.Generator().manual_seed(1)
    batch, seq = 3, 6
    shape = (batch, seq, 5) if module.batch_first else (seq, batch, 5)
    x = torch.randn(shape, generator=g)
    state = _states(module, is_lstm, batch, g)
    states = state if isinstance(state, tuple) else (state,)

    xc = x.clone().requires_grad_()
    sc = tuple(s.clone().requires_grad_() for s in states)
    ref_out, ref_finals = _run(module, xc, sc if is_lstm else sc[0], "DEFER_NEVER")

    tpu = copy.deepcopy(module).to("tpu")
    tpu.zero_grad()
    xt = x.to("tpu").requires_grad_()
    st = tuple(s.to("tpu").requires_grad_() for s in states)
    mode = "DEFER_NEVER" if run == "compile" else run
    with torch.tpu.set_eager_mode(mode):
        out, finals = _run(tpu, xt, st if is_lstm else st[0], run)
        torch.tpu.synchronize()

    torch.testing.assert_close(out.cpu(), ref_out, **TOL)
    for got, want in zip(finals, ref_finals):
        torch.testing.assert_close(got.cpu(), want, **TOL)
    torch.testing.assert_close(xt.grad.cpu(), xc.grad, **TOL)
    for got, want in zip(st, sc):
        torch.testing.assert_close(got.grad.cpu(), want.grad, **TOL)
    for (pname, p), q in zip(module.named_parameters(), tpu.parameters()):
        torch.testing.assert_close(q.grad.cpu(), p.grad, **TOL, msg=lambda m: f"{pname}: {m}")


@pytest.mark.parametrize("cell", ["LSTMCell", "GRUCell"])
@pytest.mark.parametrize("bias", [True, False])
def test_cells_match_cpu(cell, bias):
    torch.manual_seed(0)
    module = getattr(torch.nn, cell)(4, 6, bias=bias)
    g = torch.Generator().manual_seed(2)
    x = torch.randn(5, 4, generator=g)
    h = torch.randn(5, 6, generator=g)
    state = (h, torch.randn(5, 6, generator=g)) if cell == "LSTMCell" else h

    def step(m, x, state):
        out = m(x, state)
        outs = out if isinstance(out, tuple) else (out,)
        sum((o * o).sum() for o in outs).backward()
        return outs

    ref = step(module, x, state)
    tpu = copy.deepcopy(module).to("tpu")
    tpu.zero_grad()
    tstate = tuple(s.to("tpu") for s in state) if isinstance(state, tuple) else state.to("tpu")
    got = step(tpu, x.to("tpu"), tstate)
    for a, b in zip(got, ref):
        torch.testing.assert_close(a.cpu(), b, **TOL)
    for p, q in zip(module.parameters(), tpu.parameters()):
        torch.testing.assert_close(q.grad.cpu(), p.grad, **TOL)


def test_bfloat16_lstm_close_to_cpu():
    """bf16 gates compute in f32 and round once, as the CPU's bf16 does."""
    torch.manual_seed(0)
    module = torch.nn.LSTM(8, 8).to(torch.bfloat16)
    x = torch.randn(4, 2, 8).to(torch.bfloat16)
    ref, _ = module(x)
    got, _ = copy.deepcopy(module).to("tpu")(x.to("tpu"))
    torch.testing.assert_close(got.cpu().float(), ref.float(), rtol=2e-2, atol=2e-2)


def test_fused_cell_checks_sizes():
    gates = torch.randn(2, 12, device="tpu")
    with pytest.raises(RuntimeError, match=r"previous state of size \[2, 3\]"):
        torch.ops.aten._thnn_fused_lstm_cell(gates, gates, torch.randn(2, 4, device="tpu"))
    with pytest.raises(RuntimeError, match="both be given or both be None"):
        torch.ops.aten._thnn_fused_gru_cell(gates, gates, torch.randn(2, 4, device="tpu"), torch.randn(12, device="tpu"))
