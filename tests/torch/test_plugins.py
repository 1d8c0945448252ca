"""WebAssembly plugins through PyTorch: the example plugins' ops as
``torch.ops`` ops on tpu, against PyTorch on CPU, in every eager mode; their
fusion with neighbouring ops; a plugin op's autograd from its backward op; a
plugin fusion policy; discovery through TORCHTPU_PLUGIN_PATH in a fresh
process; and plugin errors."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

PLUGINS = Path(__file__).resolve().parents[2] / "target" / "plugins"
EXAMPLES = ("rms_norm", "swiglu", "byte_budget")


@pytest.fixture(scope="module", autouse=True)
def loaded():
    missing = [n for n in EXAMPLES if not (PLUGINS / f"{n}.wasm").is_file()]
    assert not missing, f"example plugins {missing} missing from {PLUGINS}: scripts/setup.sh builds them"
    torch.tpu.load_plugins(PLUGINS)
    return {p.name: p for p in torch.tpu.plugins()}


def rt():
    return torch.tpu._runtime()


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
@pytest.mark.parametrize("shape", [(4, 8), (2, 3, 16), (5,)])
def test_rms_norm_matches_cpu(eager_mode, shape, dtype, tol):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(shape, generator=g).to(dtype)
    w = torch.randn(shape[-1], generator=g).to(dtype)
    want = F.rms_norm(x, (shape[-1],), w, 1e-5)
    got = torch.ops.rms_norm.rms_norm(x.to("tpu"), w.to("tpu"), 1e-5)
    assert got.device.type == "tpu" and got.dtype == dtype and got.shape == want.shape
    torch.testing.assert_close(got.cpu(), want, atol=tol, rtol=tol)
    # The default eps is the schema's: 1e-6.
    torch.testing.assert_close(torch.ops.rms_norm.rms_norm(x.to("tpu"), w.to("tpu")).cpu(),
                               F.rms_norm(x, (shape[-1],), w, 1e-6), atol=tol, rtol=tol)


def test_a_plugin_op_fuses_with_its_neighbours():
    x, w = torch.randn(4, 8), torch.randn(8)
    want = F.rms_norm(x * 2, (8,), w, 1e-5) + 1
    xt, wt = x.to("tpu"), w.to("tpu")
    torch.tpu.synchronize()
    with torch.tpu.set_eager_mode("DEFER_AND_FUSE"):
        before = rt().fusion_stats()["fused_programs"]
        y = torch.ops.rms_norm.rms_norm(xt * 2, wt, 1e-5) + 1
        assert rt().pending_ops() == 3
        got = y.cpu()
        flush = rt().last_flush()
        assert (flush["recorded"], flush["lowered"]) == (3, 3), flush
        assert rt().fusion_stats()["fused_programs"] - before == 1
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("mode", ["DEFER_NEVER", "DEFER_AND_FUSE"])
def test_swiglu_autograd_uses_the_plugins_backward(mode):
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(6, 5, generator=g, requires_grad=True), torch.randn(6, 5, generator=g, requires_grad=True)
    up = torch.randn(6, 5, generator=g)
    (F.silu(a) * b * up).sum().backward()
    with torch.tpu.set_eager_mode(mode):
        at = a.detach().to("tpu").requires_grad_()
        bt = b.detach().to("tpu").requires_grad_()
        y = torch.ops.swiglu.swiglu(at, bt)
        assert y.grad_fn is not None
        (y * up.to("tpu")).sum().backward()
        torch.testing.assert_close(y.detach().cpu(), F.silu(a) * b, atol=1e-6, rtol=1e-6)
        torch.testing.assert_close(at.grad.cpu(), a.grad, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(bt.grad.cpu(), b.grad, atol=1e-5, rtol=1e-5)


class SwiGLUMLP(torch.nn.Module):
    def __init__(self, swiglu):
        super().__init__()
        self.gate, self.up, self.down = torch.nn.Linear(8, 16), torch.nn.Linear(8, 16), torch.nn.Linear(16, 1)
        self.swiglu = swiglu

    def forward(self, x):
        return self.down(self.swiglu(self.gate(x), self.up(x)))


@pytest.mark.parametrize("mode", ["DEFER_NEVER", "DEFER_AND_FUSE"])
def test_training_with_a_plugin_op_tracks_cpu(mode):
    torch.manual_seed(0)
    ref = SwiGLUMLP(lambda a, b: F.silu(a) * b)
    model = SwiGLUMLP(torch.ops.swiglu.swiglu)
    model.load_state_dict(ref.state_dict())
    model.to("tpu")
    x, y = torch.randn(32, 8), torch.randn(32, 1)
    xt, yt = x.to("tpu"), y.to("tpu")
    opt_ref = torch.optim.SGD(ref.parameters(), lr=0.1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with torch.tpu.set_eager_mode(mode):
        for _ in range(5):
            loss_ref = F.mse_loss(ref(x), y)
            opt_ref.zero_grad()
            loss_ref.backward()
            opt_ref.step()
            loss = F.mse_loss(model(xt), yt)
            opt.zero_grad()
            loss.backward()
            opt.step()
            assert abs(loss.item() - loss_ref.item()) < 1e-4 * (1 + loss_ref.item())
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach(), atol=1e-5, rtol=1e-4)


def test_a_plugin_policy_cuts_where_it_declares():
    x = torch.ones(64).to("tpu")
    torch.tpu.synchronize()
    try:
        with torch.tpu.set_eager_mode("DEFER_AND_FUSE"):
            # 256-byte results; a 1000-byte budget cuts every 4 ops.
            torch.tpu.set_fusion_policy("byte_budget::byte_budget?max_bytes=1000")
            before = rt().fusion_stats()["flushes"]["policy"]
            cuts = []
            for _ in range(10):
                x = x + 1
                if rt().pending_ops() == 0:
                    cuts.append(rt().last_flush()["recorded"])
            assert cuts == [4, 4]
            assert rt().fusion_stats()["flushes"]["policy"] - before == 2
            assert torch.equal(x.cpu(), torch.full((64,), 11.0))
    finally:
        torch.tpu.set_fusion_policy("fuse_all")
    with pytest.raises(ValueError, match="unknown fusion policy"):
        torch.tpu.set_fusion_policy("nope::never")


def test_plugin_errors_name_the_plugin_and_leave_the_device_working():
    x, bad = torch.randn(2, 8).to("tpu"), torch.randn(3).to("tpu")
    with pytest.raises(Exception, match=r"plugin 'rms_norm' \(op rms_norm::rms_norm\).*\[3\]"):
        torch.ops.rms_norm.rms_norm(x, bad)
    assert torch.equal((x + 1).cpu(), x.cpu() + 1)
    with pytest.raises(Exception, match="rejected|not a WebAssembly module"):
        torch.tpu.load_plugins(Path(__file__))  # not a .wasm module


def test_plugins_in_TORCHTPU_PLUGIN_PATH_are_torch_ops_at_import(tmp_path):
    drop = tmp_path / "plugins"
    drop.mkdir()
    for n in ("rms_norm", "swiglu"):
        shutil.copy(PLUGINS / f"{n}.wasm", drop)
    script = textwrap.dedent("""
        import torch, torch.nn.functional as F
        x, w = torch.randn(3, 16), torch.randn(16)
        got = torch.ops.rms_norm.rms_norm(x.to("tpu"), w.to("tpu"), 1e-5).cpu()
        torch.testing.assert_close(got, F.rms_norm(x, (16,), w, 1e-5), atol=1e-5, rtol=1e-5)
        names = sorted(p.name for p in torch.tpu.plugins())
        assert names == ["rms_norm", "swiglu"], names
        print("OK")
    """)
    env = dict(os.environ, TORCHTPU_PLUGIN_PATH=str(drop))
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip().endswith("OK"), out.stdout + out.stderr
