"""DEFER_AND_FUSE specifics, through the C ABI: flush triggers and their
recorded reasons, dead intermediates never materialized, canonical programs,
the program cache (in memory and on disk, across processes), recompile
explanations, and recovery from a corrupted cache file.

The conformance suites run every op in fused mode too (the `mode` fixture);
the tests here set the mode themselves, so they run once."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import torchtpu
from torchtpu.runtime import thread_mode
from conftest import check, cpu, tpu

REPO = Path(__file__).resolve().parents[2]
FUSED = torchtpu.DEFER_AND_FUSE


@pytest.fixture
def fused(mode):
    """Run only once (in the fused parametrization), with fused mode on."""
    if mode != "fused":
        pytest.skip("sets its own mode")
    with thread_mode(FUSED):
        yield


@pytest.fixture
def frt():
    """A runtime of its own (fresh statistics and policy)."""
    r = torchtpu.Runtime()
    yield r
    r.close()


def flushes(rt):
    return rt.fusion_stats()["flushes"]


def test_ops_are_deferred_until_a_host_read(frt, fused):
    x = torch.randn(64)
    a = tpu(frt, x)
    b = frt.call1("aten::mul.Tensor", a, a)
    c = frt.call1("aten::add.Scalar", b, 1.0)
    assert frt.pending_ops() == 2
    before = flushes(frt)["host_read"]
    check(cpu(c), x * x + 1)
    assert flushes(frt)["host_read"] == before + 1
    f = frt.last_flush()
    assert f["reason"] == "host_read" and f["recorded"] == 2 and f["outputs"] == 2
    assert frt.pending_ops() == 0


def test_flush_reasons(frt, fused):
    x = tpu(frt, torch.ones(8))
    # explicit
    y = frt.call1("aten::neg", x)
    frt.flush()
    assert frt.last_flush()["reason"] == "explicit"
    # synchronize
    z = frt.call1("aten::neg", y)
    frt.synchronize()
    assert frt.last_flush()["reason"] == "synchronize"
    # the graph-size limit
    frt.set_fusion_max_ops(3)
    w = z
    for _ in range(3):
        w = frt.call1("aten::add.Scalar", w, 1.0)
    assert frt.last_flush()["reason"] == "graph_size_limit" and frt.pending_ops() == 0
    frt.set_fusion_max_ops(10_000)
    # a strict op (another mode) needing a pending value
    p = frt.call1("aten::mul.Scalar", w, 2.0)
    with thread_mode(torchtpu.DEFER_NEVER):
        q = frt.call1("aten::neg", p)
    assert frt.last_flush()["reason"] == "strict_op"
    check(cpu(q), -(torch.full((8,), 4.0)) * 2)
    # a copy to another device needing a pending value
    if frt.device_count() > 1:
        r = frt.call1("aten::mul.Scalar", q, 3.0)
        moved = frt.call1("aten::_to_copy", r, None, None, 1)
        assert frt.last_flush()["reason"] == "cross_device"
        check(cpu(moved), torch.full((8,), -24.0))
    counts = flushes(frt)
    for reason in ["explicit", "synchronize", "graph_size_limit", "strict_op"]:
        assert counts[reason] >= 1, counts


def test_loop_cut_policy_compiles_one_program_per_step(frt, fused):
    frt.set_fusion_policy("loop_cut")
    w = tpu(frt, torch.zeros(16))
    g = tpu(frt, torch.ones(16))
    for _ in range(8):
        # One "training step": 4 ops.
        h = frt.call1("aten::mul.Scalar", g, 0.5)
        h = frt.call1("aten::add.Scalar", h, 1.0)
        h = frt.call1("aten::neg", h)
        frt.call("aten::add_.Tensor", w, h, 0.1)
    stats = frt.fusion_stats()
    assert stats["flushes"]["policy"] >= 5, stats
    # Two steps while learning, then one program for every later step.
    assert stats["compiles"] <= 2, stats
    check(cpu(w), torch.full((16,), -1.5 * 0.1 * 8))
    with pytest.raises(torchtpu.InvalidArgumentError, match="unknown fusion policy"):
        frt.set_fusion_policy("greedy")


def test_dead_intermediates_are_never_materialized(frt, fused):
    n = 1 << 20  # 4 MiB of f32
    x = tpu(frt, torch.rand(n))
    live0, _ = frt.memory(0)
    y = x
    for i in range(50):
        y2 = frt.call1("aten::mul.Scalar", y, 1.01) if i % 2 else frt.call1("aten::add.Scalar", y, 0.5)
        if y is not x:
            y.close()
        y = y2
    frt.flush()
    assert frt.last_flush()["lowered"] == 50 and frt.last_flush()["outputs"] == 1
    live, peak = frt.memory(0)
    # Only the final result was allocated (plus small scalar arguments).
    assert live - live0 < n * 4 + 4096, (live, live0)
    assert peak - live0 < 2 * n * 4, (peak, live0)
    # Strict mode for comparison allocates a buffer per op in flight.
    want = torch.rand(0)  # placeholder to keep the oracle below explicit
    ref = cpu(x)
    for i in range(50):
        ref = ref * 1.01 if i % 2 else ref + 0.5
    check(cpu(y), ref, rtol=1e-5, atol=1e-5)
    del want


def test_equal_graphs_recorded_in_another_order_hit_the_cache(frt, fused):
    a = tpu(frt, torch.rand(32))
    b = tpu(frt, torch.rand(32))
    p = frt.call1("aten::exp", a)
    q = frt.call1("aten::mul.Scalar", b, 3.0)
    frt.flush()
    assert frt.last_flush()["source"] == "compiled"
    compiles = frt.fusion_stats()["compiles"]
    # Same graph, recorded the other way round, on other buffers and scalars.
    c = tpu(frt, torch.rand(32))
    d = tpu(frt, torch.rand(32))
    q2 = frt.call1("aten::mul.Scalar", d, 5.0)
    p2 = frt.call1("aten::exp", c)
    frt.flush()
    assert frt.last_flush()["source"] == "memory"
    assert frt.fusion_stats()["compiles"] == compiles
    check(cpu(p2), torch.exp(cpu(c)))
    check(cpu(q2), cpu(d) * 5.0)
    del p, q


def test_value_numbering_merges_equal_ops(frt, fused):
    a = tpu(frt, torch.rand(16))
    u = frt.call1("aten::sin", a)
    v = frt.call1("aten::sin", a)
    w = frt.call1("aten::add.Tensor", u, v)
    check(cpu(w), 2 * torch.sin(cpu(a)))
    # sin computed once; the add; the two live sins share one output.
    assert frt.last_flush()["lowered"] == 2, frt.last_flush()


def test_recompile_explanation_names_the_changed_shape(frt, fused):
    def step(n):
        x = tpu(frt, torch.rand(8, n))
        y = frt.call1("aten::relu", frt.call1("aten::mul.Scalar", x, 2.0))
        return cpu(y)

    step(16)
    step(16)
    assert frt.last_flush()["source"] == "memory"
    step(32)
    msg = frt.last_miss_explanation()
    assert "[8, 32]" in msg and "[8, 16]" in msg, msg


def _child(code: str, cache_dir: Path) -> str:
    env = dict(os.environ, TORCHTPU_CACHE_DIR=str(cache_dir), TORCHTPU_EAGER_MODE="DEFER_AND_FUSE")
    script = f"import sys; sys.path.insert(0, {str(REPO / 'bindings' / 'python')!r})\n" + code
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


TRAIN_STEP = """
import numpy as np, torchtpu
rt = torchtpu.Runtime()
w = rt.from_numpy(np.full((4, 4), 0.5, np.float32))
x = rt.from_numpy(np.arange(16, dtype=np.float32).reshape(4, 4))
for _ in range(2):
    y = rt.call1("aten::mm", x, w)
    g = rt.call1("aten::mul.Scalar", y, 0.01)
    rt.call("aten::sub_.Tensor", w, g, 1)
out = w.numpy()
s = rt.fusion_stats()
print("RESULT", out.sum(), s["compiles"], s["disk_hits"], s["memory_hits"], s["corrupt_files"])
"""


def _parse(out):
    line = next(l for l in out.splitlines() if l.startswith("RESULT"))
    total, compiles, disk, mem, corrupt = line.split()[1:]
    return float(total), int(compiles), int(disk), int(mem), int(corrupt)


def _expected_total():
    w = torch.full((4, 4), 0.5)
    x = torch.arange(16, dtype=torch.float32).reshape(4, 4)
    for _ in range(2):
        w = w - (x @ w) * 0.01
    return float(w.sum())


def test_second_process_on_the_same_cache_compiles_nothing(tmp_path, fused):
    total, compiles, disk, _, _ = _parse(_child(TRAIN_STEP, tmp_path))
    assert compiles == 1 and disk == 0
    assert abs(total - _expected_total()) < 1e-4
    total, compiles, disk, _, _ = _parse(_child(TRAIN_STEP, tmp_path))
    assert compiles == 0 and disk == 1, (compiles, disk)
    assert abs(total - _expected_total()) < 1e-4


def test_corrupted_cache_file_is_recovered(tmp_path, fused):
    _child(TRAIN_STEP, tmp_path)
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert files, "the first process wrote no cache file"
    for p in files:
        data = bytearray(p.read_bytes())
        data[len(data) // 2] ^= 0xFF
        p.write_bytes(bytes(data[: len(data) - 7]))
    total, compiles, disk, _, corrupt = _parse(_child(TRAIN_STEP, tmp_path))
    assert corrupt == 1 and compiles == 1 and disk == 0
    assert abs(total - _expected_total()) < 1e-4
    # The rewritten file serves the next process.
    total, compiles, disk, _, corrupt = _parse(_child(TRAIN_STEP, tmp_path))
    assert (compiles, disk, corrupt) == (0, 1, 0)


def test_cache_can_be_disabled(frt, fused):
    frt.set_cache_enabled(False)
    x = tpu(frt, torch.ones(4))
    for _ in range(2):
        cpu(frt.call1("aten::neg", x))
    assert frt.fusion_stats()["compiles"] >= 2
    frt.set_cache_enabled(True)
