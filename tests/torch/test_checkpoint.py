"""Activation checkpointing on "tpu" (torch.utils.checkpoint): checkpoint
with use_reentrant=True and False and checkpoint_sequential, with dropout
inside the checkpointed region. torch.utils.checkpoint saves the tpu RNG
state (torch.tpu.get_rng_state) before the forward and restores it for the
recomputation, so the recomputed dropout masks are the forward's and every
gradient equals the unchecked run's exactly."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.utils.checkpoint import DefaultDeviceType, _infer_device_type, checkpoint, checkpoint_sequential

WIDTH = 16


def _model() -> torch.nn.Sequential:
    torch.manual_seed(0)
    layers = []
    for _ in range(4):
        layers += [torch.nn.Linear(WIDTH, WIDTH), torch.nn.Dropout(0.3), torch.nn.GELU()]
    return torch.nn.Sequential(*layers).to("tpu")


def _input() -> torch.Tensor:
    return torch.randn(6, WIDTH, generator=torch.Generator().manual_seed(1)).to("tpu").requires_grad_()


def _forward(model: torch.nn.Sequential, x: torch.Tensor, variant: str, preserve: bool = True) -> torch.Tensor:
    """The model's forward, checkpointed as `variant` says: the middle six
    layers (two dropouts) in one region, or the whole model in segments."""
    if variant == "none":
        return model(x)
    if variant.startswith("sequential"):
        return checkpoint_sequential(model, 3, x, use_reentrant=variant == "sequential_reentrant",
                                     preserve_rng_state=preserve)
    h = model[:3](x)
    h = checkpoint(model[3:9], h, use_reentrant=variant == "reentrant", preserve_rng_state=preserve)
    return model[9:](h)


def _run(variant: str, preserve: bool = True, autocast: torch.dtype | None = None) -> dict:
    """Forward and backward from seed 0; everything on the CPU: the output,
    every gradient, and a draw made after the backward (the RNG state the
    surrounding code sees)."""
    model, x = _model(), _input()
    torch.manual_seed(0)
    if autocast is None:
        out = _forward(model, x, variant, preserve)
    else:
        with torch.autocast("tpu", dtype=autocast):
            out = _forward(model, x, variant, preserve)
    loss = (out.float() ** 2).mean()
    loss.backward()
    grads = {"x": x.grad.cpu()} | {n: p.grad.cpu() for n, p in model.named_parameters()}
    return {"out": out.detach().cpu(), "grads": grads, "after": torch.rand(8, device="tpu").cpu()}


def _assert_equal(got: dict, want: dict, label: str) -> None:
    assert torch.equal(got["out"], want["out"]), f"{label}: outputs differ"
    for n, g in want["grads"].items():
        d = (got["grads"][n] - g).abs().max().item()
        assert torch.equal(got["grads"][n], g), f"{label}: gradient of {n} differs (by up to {d})"
    assert torch.equal(got["after"], want["after"]), f"{label}: the RNG state after backward differs"


VARIANTS = ["reentrant", "non_reentrant", "sequential_reentrant", "sequential_non_reentrant"]


@pytest.mark.parametrize("variant", VARIANTS)
def test_checkpoint_dropout_gradients_exact(variant, eager_mode):
    want = _run("none")
    # Dropout is on: some activations are zeroed (else the test proves nothing).
    assert (want["grads"]["3.weight"] == 0).any() or (want["out"] == 0).any()
    _assert_equal(_run(variant), want, f"{variant} ({eager_mode})")


@pytest.mark.parametrize("variant", ["reentrant", "non_reentrant"])
def test_checkpoint_without_rng_preservation_recomputes_new_masks(variant):
    """The control: with preserve_rng_state=False the recomputation draws
    fresh dropout masks, and the gradients are no longer the unchecked
    run's. (The forward output is the same: only backward recomputes.)"""
    want = _run("none")
    got = _run(variant, preserve=False)
    assert torch.equal(got["out"], want["out"])
    assert not all(torch.equal(got["grads"][n], g) for n, g in want["grads"].items())


@pytest.mark.parametrize("variant", ["reentrant", "non_reentrant"])
def test_checkpoint_under_autocast(variant, eager_mode):
    """The recomputation runs under the forward's autocast state (bf16
    linear, as recorded by torch.utils.checkpoint): gradients exact."""
    want = _run("none", autocast=torch.bfloat16)
    assert want["out"].dtype == torch.bfloat16
    _assert_equal(_run(variant, autocast=torch.bfloat16), want, f"{variant}, bf16 autocast ({eager_mode})")


def test_rng_state_round_trip(eager_mode):
    """get_rng_state / set_rng_state round-trip exactly: the draws after a
    restore repeat, and so does the state they leave."""
    torch.manual_seed(7)
    state = torch.tpu.get_rng_state()
    assert state.dtype == torch.uint8 and state.device.type == "cpu"
    a = [F.dropout(torch.ones(64, device="tpu"), 0.5).cpu(), torch.rand(5, device="tpu").cpu()]
    after = torch.tpu.get_rng_state()
    assert not torch.equal(after, state)
    torch.tpu.set_rng_state(state)
    assert torch.equal(torch.tpu.get_rng_state(), state)
    b = [F.dropout(torch.ones(64, device="tpu"), 0.5).cpu(), torch.rand(5, device="tpu").cpu()]
    assert all(torch.equal(p, q) for p, q in zip(a, b))
    assert torch.equal(torch.tpu.get_rng_state(), after)
    # fork_rng (what checkpointing wraps the recomputation in) restores it.
    with torch.random.fork_rng(devices=[torch.tpu.current_device()], device_type="tpu"):
        torch.rand(3, device="tpu")
    assert torch.equal(torch.tpu.get_rng_state(), after)


def test_checkpoint_device_detection_and_rng_capture(monkeypatch):
    """checkpoint finds the tpu from its tensor arguments (and as the default
    device type), and saves and restores the tpu RNG state around it."""
    x = _input()
    assert _infer_device_type(x) == "tpu"
    assert DefaultDeviceType.get_device_type() == "tpu"
    assert torch.tpu._initialized
    calls = []
    get, set_ = torch.tpu.get_rng_state, torch.tpu.set_rng_state
    monkeypatch.setattr(torch.tpu, "get_rng_state", lambda *a: calls.append("get") or get(*a))
    monkeypatch.setattr(torch.tpu, "set_rng_state", lambda *a: calls.append("set") or set_(*a))
    for reentrant in (True, False):
        calls.clear()
        y = checkpoint(lambda t: F.dropout(t, 0.5), x, use_reentrant=reentrant)
        assert calls == ["get"], f"use_reentrant={reentrant}: {calls}"
        y.sum().backward()
        # fork_rng's get, the forward state's set, fork_rng's restoring set.
        assert calls == ["get", "get", "set", "set"], f"use_reentrant={reentrant}: {calls}"
