"""Memory accounting and device memory through the C ABI: bytes and buffer
counts against the sizes of the tensors made (4 bytes per float32), total
and free against /proc/meminfo read here."""

from __future__ import annotations

import pytest
import torch

import torchtpu
from torchtpu.runtime import Runtime

from conftest import cpu, tpu

FIELDS = {"live_bytes", "peak_bytes", "allocated_bytes", "freed_bytes", "live_buffers", "peak_buffers",
          "allocated_buffers", "freed_buffers", "num_ooms"}


@pytest.fixture(scope="module")
def own() -> Runtime:
    """A runtime of this module alone, so only its tensors count."""
    r = Runtime(cpu_device_count=2)
    yield r
    r.close()


def test_uploads_ops_and_frees_are_counted(own):
    dev = 1
    own.reset_accumulated_memory(dev)
    own.reset_peak_memory(dev)
    s0 = own.memory_stats(dev)
    assert set(s0) == FIELDS
    assert (s0["allocated_bytes"], s0["freed_bytes"], s0["allocated_buffers"], s0["freed_buffers"]) == (0, 0, 0, 0)
    live0, n0 = s0["live_bytes"], s0["live_buffers"]

    a = tpu(own, torch.arange(1000, dtype=torch.float32), dev)
    b = own.call1("aten::neg", a)
    torch.testing.assert_close(cpu(b), -torch.arange(1000, dtype=torch.float32))
    a.close()
    s = own.memory_stats(dev)
    # The upload and the op's output, 4000 bytes each; the upload is freed.
    assert s["live_bytes"] == live0 + 4000 and s["peak_bytes"] == live0 + 8000, s
    assert (s["allocated_bytes"], s["freed_bytes"]) == (8000, 4000), s
    assert (s["live_buffers"], s["peak_buffers"]) == (n0 + 1, n0 + 2), s
    assert (s["allocated_buffers"], s["freed_buffers"]) == (2, 1), s
    assert s["num_ooms"] == 0
    assert own.memory(dev) == (s["live_bytes"], s["peak_bytes"])

    own.reset_accumulated_memory(dev)
    b.close()
    s = own.memory_stats(dev)
    assert (s["live_bytes"], s["allocated_bytes"], s["freed_bytes"], s["freed_buffers"]) == (live0, 0, 4000, 1), s
    assert s["peak_bytes"] == live0 + 8000, "resetting the totals keeps the peak"
    own.reset_peak_memory(dev)
    assert own.memory_stats(dev)["peak_bytes"] == live0

    with pytest.raises(torchtpu.OutOfRangeError):
        own.memory_stats(2)
    with pytest.raises(torchtpu.OutOfRangeError):
        own.reset_accumulated_memory(-1)


def _mem_total() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            name, value = line.split(":", 1)
            if name == "MemTotal":
                kb, unit = value.split()
                assert unit == "kB"
                return int(kb) * 1024
    raise AssertionError("no MemTotal in /proc/meminfo")


def test_cpu_devices_report_the_hosts_memory(own):
    info = own.memory_info(0)
    assert set(info) == {"total", "free", "source"}
    # The CPU plugin reports no limit, so the host's memory (at most
    # MemTotal, less under a cgroup limit) stands in, shared by every device.
    assert info["source"] == "host"
    assert 0 < info["total"] <= _mem_total()
    assert 0 <= info["free"] <= info["total"]
    assert own.memory_info(1)["total"] == info["total"]
    with pytest.raises(torchtpu.OutOfRangeError):
        own.memory_info(2)
