"""WebAssembly plugins through PyTorch: the example plugins' ops as
``torch.ops`` ops on tpu, against PyTorch on CPU, in every eager mode; their
fusion with neighbouring ops; a plugin op's autograd from its backward op; a
plugin fusion policy; discovery through TORCHTPU_PLUGIN_PATH in a fresh
process; plugin errors; a plugin in one of PyTorch's namespaces, skipped
with a warning at ``import torch``; and the list of rejected files."""

from __future__ import annotations

import json
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
        torch.tpu.set_fusion_policy("fuse_loops")
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


def _leb(n: int) -> bytes:
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _name(s: str) -> bytes:
    b = s.encode()
    return _leb(len(b)) + b


def _section(id_: int, body: bytes) -> bytes:
    return bytes([id_]) + _leb(len(body)) + body


def plugin_wasm(name: str) -> bytes:
    """A minimal plugin module, written byte by byte: the manifest (one op,
    ``<name>::f``), a 1-page exported memory, ``ttpu_alloc`` (returns 0),
    ``ttpu_dealloc`` and ``ttpu_lower`` (traps)."""
    manifest = json.dumps({"name": name, "version": "0.0.1", "abi": {"major": 1, "minor": 0},
                           "ops": [{"schema": f"{name}::f(Tensor a) -> Tensor"}]})
    i32, i64, func = 0x7F, 0x7E, 0x60
    types = [bytes([func, 1, i32, 1, i32]), bytes([func, 2, i32, i32, 0]), bytes([func, 2, i32, i32, 1, i64])]
    exports = [(b"memory", 2, 0), (b"ttpu_alloc", 0, 0), (b"ttpu_dealloc", 0, 1), (b"ttpu_lower", 0, 2)]
    bodies = [bytes([0x00, 0x41, 0x00, 0x0B]),  # no locals; i32.const 0; end
              bytes([0x00, 0x0B]),  # end
              bytes([0x00, 0x00, 0x0B])]  # unreachable; end
    return (b"\0asm" + bytes([1, 0, 0, 0])
            + _section(0, _name("torchtpu.manifest") + manifest.encode())
            + _section(1, _leb(len(types)) + b"".join(types))
            + _section(3, bytes([3, 0, 1, 2]))
            + _section(5, bytes([1, 0, 1]))  # one memory, min 1 page, no max
            + _section(7, _leb(len(exports)) + b"".join(_name(n.decode()) + bytes([k, i]) for n, k, i in exports))
            + _section(10, _leb(len(bodies)) + b"".join(_leb(len(b)) + b for b in bodies)))


# Namespaces PyTorch's dispatcher has that the runtime's fixed reserved list
# (core/src/plugin/manifest.rs) does not name, so that only the frontend's
# dispatcher check can refuse them.
_UNLISTED_TORCH_NAMESPACES = ("static_runtime", "coor", "flex_gemm")


def test_a_plugin_in_a_pytorch_namespace_is_skipped_with_a_warning_not_a_failed_import(tmp_path):
    in_use = {n.split("::", 1)[0] for n in torch._C._dispatch_get_all_op_names()}
    ns = next((n for n in _UNLISTED_TORCH_NAMESPACES if n in in_use), None)
    assert ns is not None, f"none of {_UNLISTED_TORCH_NAMESPACES} is a namespace of this PyTorch"
    drop = tmp_path / "plugins"
    drop.mkdir()
    (drop / "hostile.wasm").write_bytes(plugin_wasm(ns))
    shutil.copy(PLUGINS / "rms_norm.wasm", drop)
    script = textwrap.dedent(f"""
        import warnings
        warnings.simplefilter("always")
        import torch, torch.nn.functional as F
        assert torch.equal((torch.ones(2, device="tpu") + 1).cpu(), torch.full((2,), 2.0))
        x, w = torch.randn(3, 8), torch.randn(8)
        got = torch.ops.rms_norm.rms_norm(x.to("tpu"), w.to("tpu"), 1e-5).cpu()
        torch.testing.assert_close(got, F.rms_norm(x, (8,), w, 1e-5), atol=1e-5, rtol=1e-5)
        rejected = [r for r in torch.tpu.plugin_rejections() if r.path.endswith("hostile.wasm")]
        assert len(rejected) == 1, torch.tpu.plugin_rejections()
        assert "plugin '{ns}'" in rejected[0].message and "already used by PyTorch" in rejected[0].message
        print("OK")
    """)
    env = dict(os.environ, TORCHTPU_PLUGIN_PATH=str(drop))
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip().endswith("OK"), out.stdout + out.stderr
    assert f"plugin '{ns}'" in out.stderr and "was not registered with PyTorch" in out.stderr, out.stderr


def test_plugin_rejections_list_a_non_regular_file_with_its_reason(tmp_path):
    drop = tmp_path / "kinds"
    drop.mkdir()
    os.mkfifo(drop / "fifo.wasm")
    (drop / "dir.wasm").mkdir()
    with pytest.raises(Exception, match="is a FIFO, not a regular file"):
        torch.tpu.load_plugins(drop)
    got = {Path(r.path).name: r.message for r in torch.tpu.plugin_rejections() if Path(r.path).parent == drop}
    assert set(got) == {"fifo.wasm", "dir.wasm"}, got
    assert "is a FIFO" in got["fifo.wasm"] and "is a directory" in got["dir.wasm"]
    assert torch.equal((torch.ones(3).to("tpu") * 2).cpu(), torch.full((3,), 2.0))
