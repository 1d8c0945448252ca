"""The runtime's trace from PyTorch: a training step's tpu ops, compiles and
device runs appear in torch.profiler (through the Kineto activity profiler
of csrc/profiler.cpp) and in the Chrome trace that TORCHTPU_TRACE writes.
Shapes are unique to this file, so each test's first step compiles."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile


def train_step(batch: int, width: int) -> float:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(width, 2 * width), torch.nn.ReLU(), torch.nn.Linear(2 * width, 3)).to("tpu")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(batch, width).to("tpu")
    loss = model(x).square().mean()
    loss.backward()
    opt.step()
    return loss.item()


@pytest.mark.parametrize("mode", ["DEFER_NEVER", "DEFER_AND_FUSE"])
def test_training_step_in_torch_profiler(mode):
    assert ProfilerActivity.PrivateUse1 in torch.profiler.supported_activities()
    width = {"DEFER_NEVER": 13, "DEFER_AND_FUSE": 17}[mode]
    with torch.tpu.set_eager_mode(mode):
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
            loss = train_step(5, width)
    assert loss > 0
    events = prof.events()
    host = {e.name for e in events if e.device_type == DeviceType.CPU}
    device = [e for e in events if e.device_type == DeviceType.PrivateUse1]
    compiles = {n for n in host if n.startswith("tpu::compile ")}
    if mode == "DEFER_NEVER":
        # Each new signature compiles inside its op; every op runs on the device.
        assert "tpu::compile aten::addmm" in compiles, sorted(host)
        assert "tpu::op aten::addmm" in host
        assert {"aten::addmm", "aten::mm", "aten::relu"} <= {e.name for e in device}, sorted({e.name for e in device})
    else:
        # Ops are recorded; the host read flushes them as one compiled program.
        assert "tpu::record aten::addmm" in host, sorted(host)
        assert any(n.startswith("tpu::flush ") for n in host)
        assert any(n.startswith("tpu::compile fused graph (") for n in compiles), sorted(compiles)
        assert any(e.name.startswith("fused graph (") for e in device)
    assert "tpu::transfer host_to_device" in host and "tpu::transfer device_to_host" in host
    # Device runs have a duration and sit inside the profiled window.
    cpu_start = min(e.time_range.start for e in events if e.device_type == DeviceType.CPU)
    cpu_end = max(e.time_range.end for e in events if e.device_type == DeviceType.CPU)
    for e in device:
        assert e.time_range.end >= e.time_range.start
        assert cpu_start - 1000 <= e.time_range.start <= cpu_end + 1000, (e.name, e.time_range, cpu_start, cpu_end)
    assert sum(e.self_device_time_total for e in prof.key_averages()) > 0


def test_profiler_off_records_nothing():
    from torchtpu import _capi

    lib = _capi.lib
    assert not lib.ttpu_trace_enabled()
    before = lib.ttpu_trace_cursor()
    train_step(3, 7)
    assert lib.ttpu_trace_cursor() == before
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]):
        assert lib.ttpu_trace_enabled()
    assert not lib.ttpu_trace_enabled()


def test_torchtpu_trace_env_writes_a_chrome_trace(tmp_path):
    path = tmp_path / "trace.json"
    script = textwrap.dedent(
        f"""
        import torch
        with torch.tpu.set_eager_mode("DEFER_AND_FUSE"):
            torch.manual_seed(0)
            m = torch.nn.Linear(19, 4).to("tpu")
            x = torch.randn(6, 19).to("tpu")
            m(x).sum().backward()
            print(m.weight.grad.sum().item())
        with torch.tpu.set_eager_mode("DEFER_NEVER"):
            print((x * 2).sum().item())
        """
    )
    env = dict(os.environ, TORCHTPU_TRACE=str(path))
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    trace = json.loads(path.read_text())
    spans = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    cats = {e["cat"] for e in spans}
    assert {"record", "flush", "compile", "execute", "transfer", "op"} <= cats, cats
    names = {(e["cat"], e["name"]) for e in spans}
    assert ("record", "aten::addmm") in names and ("op", "aten::mul.Tensor") in names
    assert ("compile", "aten::mul.Tensor") in names
    assert any(c == "compile" and n.startswith("fused graph (") for c, n in names)
    # Device runs are on the tpu:0 row; host spans on real thread rows.
    rows = {e["tid"]: e["args"]["name"] for e in trace["traceEvents"] if e["ph"] == "M"}
    runs = [e for e in spans if e["cat"] == "execute"]
    assert runs and all(rows[e["tid"]] == "tpu:0" for e in runs)
    assert all(e["dur"] >= 0 and e["ts"] > 1.6e15 for e in spans)  # microseconds since 1970
    assert trace["otherData"]["dropped_spans"] == 0
