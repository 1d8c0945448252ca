"""The memory part of torch.tpu and torch.accelerator on "tpu": bytes and
counts against the sizes of the tensors made (4 bytes per float32), the
device's memory against the kernel's page count."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

# Device 1: the other tests of this session work on device 0, so what lives
# here is small and only this module's tensors come and go.
DEV = 1


def _settle() -> None:
    """Waits for pending work (and flushes fused graphs), so every buffer a
    tensor will hold exists and every temporary is gone."""
    torch.tpu.synchronize()


def test_a_tensor_gets_its_bytes_when_first_written(eager_mode):
    # Warm up: the fill value becomes a cached scalar buffer the first time.
    w = torch.empty(1024, device=f"tpu:{DEV}")
    w.fill_(1.5)
    del w
    _settle()
    base = torch.tpu.memory_allocated(DEV)
    x = torch.empty(1024, device=f"tpu:{DEV}")
    assert torch.tpu.memory_allocated(DEV) == base, "torch.empty allocates nothing until written"
    x.fill_(1.5)
    _settle()
    assert torch.tpu.memory_allocated(DEV) == base + 4096
    assert torch.tpu.memory_allocated(f"tpu:{DEV}") == base + 4096
    del x
    _settle()
    assert torch.tpu.memory_allocated(DEV) == base


def test_peaks_counts_totals_and_their_resets():
    _settle()
    torch.tpu.reset_peak_memory_stats(DEV)
    torch.tpu.reset_accumulated_memory_stats(DEV)
    s0 = torch.tpu.memory_stats(DEV)
    base, n0 = s0["allocated_bytes.all.current"], s0["allocation.all.current"]
    assert (s0["allocated_bytes.all.allocated"], s0["allocated_bytes.all.freed"]) == (0, 0)
    assert (s0["allocation.all.allocated"], s0["allocation.all.freed"], s0["num_ooms"]) == (0, 0, 0)
    assert s0["allocated_bytes.all.peak"] == base

    a = torch.arange(1000, dtype=torch.float32).to(f"tpu:{DEV}")  # one upload: 4000 bytes
    b = torch.arange(24, dtype=torch.float32).to(f"tpu:{DEV}")  # 96 bytes
    del a
    _settle()
    s = torch.tpu.memory_stats(DEV)
    expect_bytes = {"current": base + 96, "peak": base + 4096, "allocated": 4096, "freed": 4000}
    expect_count = {"current": n0 + 1, "peak": n0 + 2, "allocated": 2, "freed": 1}
    # Without a cache every buffer is allocated, reserved, requested and
    # active alike, and each is one allocation and one segment.
    for key in ("allocated_bytes", "reserved_bytes", "requested_bytes", "active_bytes"):
        assert {k: s[f"{key}.all.{k}"] for k in expect_bytes} == expect_bytes, key
    for key in ("allocation", "segment", "active"):
        assert {k: s[f"{key}.all.{k}"] for k in expect_count} == expect_count, key
    assert (s["num_device_alloc"], s["num_device_free"], s["num_ooms"], s["num_alloc_retries"]) == (2, 1, 0, 0)
    assert all(s[f"inactive_split{b}.all.{k}"] == 0 for b in ("", "_bytes") for k in expect_bytes)
    assert torch.tpu.memory_allocated(DEV) == torch.tpu.memory_reserved(DEV) == base + 96
    assert torch.tpu.max_memory_allocated(DEV) == torch.tpu.max_memory_reserved(DEV) == base + 4096

    nested = torch.tpu.memory_stats_as_nested_dict(DEV)
    assert nested["allocated_bytes"]["all"] == expect_bytes and nested["allocation"]["all"] == expect_count
    assert list(s) == sorted(s), "flat keys are sorted, as torch.cuda.memory_stats gives them"

    torch.tpu.reset_peak_memory_stats(DEV)
    assert torch.tpu.max_memory_allocated(DEV) == base + 96
    assert torch.tpu.memory_stats(DEV)["allocation.all.peak"] == n0 + 1
    torch.tpu.reset_accumulated_memory_stats(DEV)
    del b
    _settle()
    s = torch.tpu.memory_stats(DEV)
    assert (s["allocated_bytes.all.allocated"], s["allocated_bytes.all.freed"]) == (0, 96)
    assert (s["allocation.all.allocated"], s["allocation.all.freed"]) == (0, 1)
    assert s["allocated_bytes.all.current"] == base and s["allocated_bytes.all.peak"] == base + 96

    with pytest.warns(FutureWarning, match="reset_peak_memory_stats"):
        torch.tpu.reset_max_memory_allocated(DEV)
    assert torch.tpu.max_memory_allocated(DEV) == base


def test_torch_accelerator_reads_the_same_numbers():
    assert torch.accelerator.current_accelerator().type == "tpu"
    x = torch.arange(256, dtype=torch.float32).to(f"tpu:{DEV}")
    _settle()
    ours = torch.tpu.memory_stats(DEV)
    theirs = torch.accelerator.memory_stats(DEV)
    assert theirs["allocated_bytes.all.current"] == ours["allocated_bytes.all.current"] > 0
    for key, value in ours.items():
        assert theirs[key] == value, key
    # There are no pools: PyTorch's per-pool entries stay 0.
    assert theirs["allocated_bytes.small_pool.current"] == theirs["allocated_bytes.large_pool.current"] == 0
    assert torch.accelerator.memory_allocated(DEV) == torch.tpu.memory_allocated(DEV)
    assert torch.accelerator.max_memory_allocated(DEV) == torch.tpu.max_memory_allocated(DEV)
    assert torch.accelerator.memory_reserved(DEV) == torch.tpu.memory_reserved(DEV)
    with torch.tpu.device(DEV):
        assert torch.accelerator.memory_allocated() == torch.tpu.memory_allocated()

    before = torch.tpu.memory_allocated(DEV)
    torch.accelerator.reset_accumulated_memory_stats(DEV)
    assert torch.tpu.memory_stats(DEV)["allocated_bytes.all.allocated"] == 0
    del x
    _settle()
    assert torch.accelerator.memory_allocated(DEV) == before - 1024
    torch.accelerator.reset_peak_memory_stats(DEV)
    assert torch.tpu.max_memory_allocated(DEV) == before - 1024
    torch.accelerator.empty_cache()  # nothing is cached: a no-op
    assert torch.tpu.memory_allocated(DEV) == before - 1024

    free, total = torch.accelerator.get_memory_info(DEV)
    assert 0 <= free <= total and total == torch.tpu.mem_get_info(DEV)[1]


def _mem_total() -> int:
    # The kernel's count of physical pages (MemTotal of /proc/meminfo, read
    # another way than the runtime reads it).
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def test_mem_get_info_and_device_properties():
    free, total = torch.tpu.mem_get_info()
    assert 0 <= free <= total
    # The XLA CPU plugin reports no memory limit: the host's memory (at most
    # MemTotal, less under a cgroup limit) stands in, shared by every device.
    assert 0 < total <= _mem_total()
    assert torch.tpu.mem_get_info(DEV)[1] == total

    props = torch.tpu.get_device_properties(0)
    assert props.total_memory == total and props.memory_source == "host"
    assert props.name == props.kind == "cpu" and props.type == "tpu" and props.index == 0
    assert props.platform == "cpu" and props.platform_version and props.description and props.id >= 0
    assert f"total_memory={total // 2**20}MB" in repr(props) and "name='cpu'" in repr(props)
    assert torch.tpu.get_device_properties(f"tpu:{DEV}").index == DEV
    with pytest.raises(NotImplementedError, match="no CUDA compute capability"):
        torch.tpu.get_device_capability()
    for name in ("mem_get_info", "memory_stats", "memory_summary", "memory_reserved", "get_device_capability"):
        assert name in torch.tpu.__all__


def _parse_size(cell: str) -> tuple[int, int]:
    """A summary cell ("  4196 B  ", "   512 KiB") as (value, unit bytes)."""
    value, unit = cell.split()
    return int(value), 1024 ** ["B", "KiB", "MiB", "GiB", "TiB", "PiB"].index(unit)


def test_memory_summary_shows_the_numbers():
    x = torch.arange(1 << 18, dtype=torch.float32).to(f"tpu:{DEV}")  # 1 MiB
    _settle()
    stats = torch.tpu.memory_stats(DEV)
    text = torch.tpu.memory_summary(DEV)
    assert f"memory summary, device ID {DEV}" in text
    rows = {line.split("|")[1].strip(): line.split("|")[2:6] for line in text.splitlines() if line.count("|") >= 6}
    for k, cell in zip(("current", "peak", "allocated", "freed"), rows["Allocated memory"]):
        value, unit = _parse_size(cell)
        n = stats[f"allocated_bytes.all.{k}"]
        assert value * unit <= n < (value + 1) * unit, (k, cell, n)
    # 1 MiB and more leave the byte unit, as on CUDA.
    assert _parse_size(rows["Allocated memory"][0])[1] > 1
    counts = [int(c.split()[0]) for c in rows["Allocations"]]
    assert counts == [stats[f"allocation.all.{k}"] for k in ("current", "peak", "allocated", "freed")]
    assert f"TPU OOMs: {stats['num_ooms']}" in text
    del x


def test_statistics_do_not_start_the_runtime():
    # As on CUDA before first use: empty statistics, and the runtime (which
    # must start after torch.distributed's init_process_group) stays down.
    code = (
        "import torch, torchtpu\n"
        "assert torch.tpu.memory_stats() == {} and torch.tpu.memory_allocated() == 0\n"
        "assert torch.tpu.max_memory_reserved() == 0\n"
        "torch.tpu.reset_peak_memory_stats(); torch.tpu.reset_accumulated_memory_stats()\n"
        "assert 'device ID (current' in torch.tpu.memory_summary()\n"
        "assert torch.accelerator.memory_allocated() == 0 and torch.accelerator.memory_stats() == {}\n"
        "assert not torchtpu._C._runtime_started()\n"
        "x = torch.ones(4, device='tpu')\n"
        "assert torchtpu._C._runtime_started() and torch.tpu.memory_allocated() >= 16\n"
    )
    r = subprocess.run([sys.executable, "-c", code], env=dict(os.environ), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
