"""Collectives and torch.distributed on tpu, against values computed by hand
(NumPy) or by PyTorch on CPU:

- ``torch.tpu.comm`` over this process's devices: the runtime's native
  lowering, one program replicated over the devices, in every eager mode;
- the ``tpu`` c10d backend across 2 processes (dist_worker.py, one process
  per rank, a ``file://`` rendezvous on 127.0.0.1): every collective, DDP,
  FSDP2 and DTensor, in strict and fused mode; the errors a mismatched call,
  a dead rank and a late rank give, and how soon;
- the DDP and FSDP2 examples under torchrun, against the single-process
  GPT on CPU.

Every multi-process test bounds its own run time: its processes are killed
(and the test fails with their output) past ``limit`` seconds.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

HERE = Path(__file__).resolve().parent
WORKER = HERE / "dist_worker.py"
EXAMPLES = HERE.parents[1] / "bindings" / "python" / "examples"
WORLD = 2
sys.path.insert(0, str(HERE))
import dist_worker  # noqa: E402 (the model and data the 2-process training uses)

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def as_np(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().float().numpy()


# --- torch.tpu.comm: this process's devices ---------------------------------------------


@pytest.fixture
def devices() -> int:
    n = torch.tpu.device_count()
    if n < 2:
        pytest.skip(f"local collectives need 2 or more tpu devices; this client has {n}")
    return n


def per_device(n: int, length: int, dtype: torch.dtype, offset: float = 0.0) -> tuple[list[torch.Tensor], np.ndarray]:
    """Device r gets [1..length] * (r + 1) + offset * r; also the NumPy rows."""
    rows = np.stack([(np.arange(length) + 1.0) * (r + 1) + offset * r for r in range(n)])
    return [torch.tensor(rows[r], dtype=dtype, device=f"tpu:{r}") for r in range(n)], rows


@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
@pytest.mark.parametrize("op", ["sum", "avg", "max", "min", "prod"])
def test_local_all_reduce(devices, eager_mode, dtype, op):
    xs, rows = per_device(devices, 4, dtype)
    want = {"sum": rows.sum(0), "avg": rows.mean(0), "max": rows.max(0), "min": rows.min(0),
            "prod": rows.prod(0)}[op]
    out = torch.tpu.comm.all_reduce(xs, op=op)
    assert [o.device for o in out] == [x.device for x in xs]
    for o in out:
        assert o.dtype == dtype
        np.testing.assert_allclose(as_np(o), want, rtol=1e-2 if dtype == torch.bfloat16 else 1e-6)


@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
def test_local_gather_scatter_broadcast(devices, eager_mode, dtype):
    n = devices
    xs, rows = per_device(n, 2 * n, dtype, offset=10.0)  # sums stay exact in bf16
    for o in torch.tpu.comm.all_gather(xs):
        np.testing.assert_array_equal(as_np(o), rows.reshape(-1))
    total = rows.sum(0)
    for r, o in enumerate(torch.tpu.comm.reduce_scatter(xs)):
        np.testing.assert_array_equal(as_np(o), total[2 * r:2 * r + 2])
    for o in torch.tpu.comm.broadcast(xs, root=n - 1):
        np.testing.assert_array_equal(as_np(o), rows[n - 1])
    for j, o in enumerate(torch.tpu.comm.all_to_all(xs)):
        np.testing.assert_array_equal(as_np(o), np.concatenate([rows[i, 2 * j:2 * j + 2] for i in range(n)]))
    ring = [(r, (r + 1) % n) for r in range(n)]
    for r, o in enumerate(torch.tpu.comm.permute(xs, ring)):
        np.testing.assert_array_equal(as_np(o), rows[(r - 1) % n])
    # A rank that is no pair's target receives zeros.
    got = torch.tpu.comm.permute(xs, [(0, 1)])
    np.testing.assert_array_equal(as_np(got[1]), rows[0])
    np.testing.assert_array_equal(as_np(got[0]), np.zeros(2 * n))
    torch.tpu.comm.barrier()


def test_local_broadcast_is_bit_exact(devices):
    xs = [torch.randn(64, device=f"tpu:{r}") for r in range(devices)]
    want = xs[1].cpu()
    for o in torch.tpu.comm.broadcast(xs, root=1):
        assert torch.equal(o.cpu(), want)


def test_local_collective_errors_name_the_problem(devices):
    xs = [torch.ones(4, device=f"tpu:{r}") for r in range(devices)]
    bad = xs[:-1] + [torch.ones(5, device=f"tpu:{devices - 1}")]
    with pytest.raises(RuntimeError, match=rf"all_reduce: .* rank {devices - 1} \(tpu:{devices - 1}\) has "
                                           r"float32\[5\] and rank 0 \(tpu:0\) has float32\[4\]"):
        torch.tpu.comm.all_reduce(bad)
    with pytest.raises(RuntimeError, match=r"all_reduce: ranks 0 and 1 are the same device"):
        torch.tpu.comm.all_reduce([xs[0], torch.ones(4, device="tpu:0")])  # one device twice
    with pytest.raises(ValueError, match="unsupported reduce op"):
        torch.tpu.comm.all_reduce(xs, op="xor")
    # Nothing was lost: the inputs are intact and the next call works.
    np.testing.assert_array_equal(as_np(torch.tpu.comm.all_reduce(xs)[0]), np.full(4, float(devices)))


# --- 2 processes: the tpu backend -----------------------------------------------------------


def launch(scenario: str, tmp_path: Path, *, timeout_s: float = 20, limit: float = 240,
           env: dict | None = None) -> tuple[list[int], list[str], dict[int, dict]]:
    """Runs `scenario` with one process per rank. Returns the exit codes,
    the outputs and what each rank saved."""
    base = dict(os.environ, WORLD_SIZE=str(WORLD), LOCAL_WORLD_SIZE=str(WORLD), GLOO_SOCKET_IFNAME="lo",
                MASTER_ADDR="127.0.0.1", TORCHTPU_TEST_INIT=f"file://{tmp_path}/rendezvous",
                TORCHTPU_TEST_TIMEOUT=str(timeout_s), **(env or {}))
    logs = [open(tmp_path / f"log{r}", "w+") for r in range(WORLD)]
    procs = [subprocess.Popen([sys.executable, str(WORKER), scenario, str(tmp_path)],
                              env=dict(base, RANK=str(r), LOCAL_RANK=str(r)), stdout=logs[r],
                              stderr=subprocess.STDOUT) for r in range(WORLD)]
    try:
        for p in procs:
            p.wait(timeout=limit)
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
        pytest.fail(f"{scenario}: the ranks did not finish within {limit} s:\n" + "\n".join(read(logs)))
    outputs = read(logs)
    saved = {r: torch.load(tmp_path / f"rank{r}.pt") for r in range(WORLD) if (tmp_path / f"rank{r}.pt").exists()}
    return [p.returncode for p in procs], outputs, saved


def read(logs) -> list[str]:
    out = []
    for r, f in enumerate(logs):
        f.seek(0)
        out.append(f"--- rank {r} ---\n{f.read()[-6000:]}")
    return out


def run_ok(scenario: str, tmp_path: Path, **kw) -> dict[int, dict]:
    codes, outputs, saved = launch(scenario, tmp_path, **kw)
    assert codes == [0] * WORLD and len(saved) == WORLD, f"{scenario} failed: {codes}\n" + "\n".join(outputs)
    return saved


def ramp(n: int, rank: int, offset: float = 0.0) -> np.ndarray:
    """dist_worker.rank_tensor: [1..n] * (rank + 1) + offset."""
    return (np.arange(n) + 1.0) * (rank + 1) + offset


def expected_collectives(r: int) -> dict[str, np.ndarray]:
    """What rank r of WORLD must get from dist_worker._collectives."""
    w = WORLD
    ranks = range(w)
    want = {
        "all_reduce_sum": sum(ramp(4, i) for i in ranks),
        "all_reduce_avg": sum(ramp(4, i) for i in ranks) / w,
        "all_reduce_max": ramp(4, w - 1),
        "all_reduce_min": ramp(4, 0),
        "all_reduce_product": ramp(4, 0) ** w * math.factorial(w),
        "all_reduce_future": sum(ramp(4, i) for i in ranks),
        "all_gather_into_tensor": np.concatenate([ramp(3, i) for i in ranks]),
        "all_gather": np.concatenate([ramp(3, i) for i in ranks]),
        "reduce_scatter_tensor": sum(ramp(2 * w, i) for i in ranks)[2 * r:2 * r + 2],
        "reduce_scatter": sum(ramp(2 * w, i) for i in ranks)[2 * r:2 * r + 2],
        "broadcast": ramp(4, w - 1),
        "all_to_all_single": np.concatenate([ramp(2 * w, i, 100.0 * i)[2 * r:2 * r + 2] for i in ranks]),
        "all_to_all": np.concatenate([ramp(2 * w, i)[2 * r:2 * r + 2] for i in ranks]),
        "scatter": ramp(3, 0, 10.0 * r),
        "all_gather_coalesced": np.concatenate([ramp(2, i) for i in ranks] + [ramp(3, i) for i in ranks]),
        "reduce_scatter_coalesced": np.concatenate([sum(ramp(2 * w, i) for i in ranks)[2 * r:2 * r + 2],
                                                    sum(ramp(w, i) for i in ranks)[r:r + 1]]),
        "send_recv": ramp(4, (r - 1) % w),
    }
    # Uneven all_to_all_single: rank i sends i + 1 + j elements to rank j.
    pieces = []
    for i in ranks:
        sizes = [i + 1 + j for j in ranks]
        start = sum(sizes[:r])
        pieces.append(ramp(sum(sizes), i)[start:start + sizes[r]])
    want["all_to_all_single_uneven"] = np.concatenate(pieces)
    if r == 0:
        want["reduce"] = sum(ramp(4, i) for i in ranks)
        want["gather"] = np.concatenate([ramp(3, i) for i in ranks])
    if r == 1:
        want["recv"] = ramp(2, 0)
    return want


def test_every_collective_across_processes(tmp_path):
    saved = run_ok("collectives", tmp_path)
    for r, res in saved.items():
        assert res["transport"] == "gloo-staged"  # the CPU plugin's devices do not span processes
        assert res["device"] == r  # bound from LOCAL_RANK
        # Nothing started the runtime before init_process_group, so its client
        # joined the processes through the group's store (and the CPU plugin,
        # which cannot span processes, ignored that).
        assert not res["started_before"]
        assert res["joined"] == (r, WORLD)
        assert f"created as node {r} of {WORLD}" in res["reason"] and "cannot span processes" in res["reason"]
        want = expected_collectives(r)
        for mode in dist_worker.MODES:
            for name, dtype in DTYPES.items():
                for key, value in want.items():
                    got = res[f"{mode}/{name}/{key}"]
                    assert got.dtype == dtype, (mode, key)
                    np.testing.assert_array_equal(as_np(got), value, err_msg=f"rank {r} {mode} {name} {key}")


def reference_training() -> tuple[list[float], dict[str, torch.Tensor]]:
    """One process, the whole batch, PyTorch on CPU."""
    model = dist_worker.mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses = []
    for step in range(dist_worker.STEPS):
        x, y = dist_worker.data(step)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses, {n: p.detach() for n, p in model.named_parameters()}


@pytest.mark.parametrize("kind", ["ddp", "fsdp"])
def test_data_parallel_matches_full_batch(tmp_path, kind):
    saved = run_ok(kind, tmp_path)
    losses, params = reference_training()
    assert losses[-1] < losses[0]  # the reference itself learns
    for r, res in saved.items():
        for mode in dist_worker.MODES:
            got = res[mode]
            np.testing.assert_allclose(got["losses"], losses, atol=1e-5, err_msg=f"{kind} rank {r} {mode}")
            assert got["params"].keys() == params.keys()
            for name, p in params.items():
                np.testing.assert_allclose(got["params"][name].numpy(), p.numpy(), atol=1e-5,
                                           err_msg=f"{kind} rank {r} {mode} {name}")


def test_dtensor_redistribute(tmp_path):
    saved = run_ok("dtensor", tmp_path)
    full = np.arange(4 * WORLD * 6, dtype=np.float32).reshape(4 * WORLD, 6)
    total = full * sum(r + 1 for r in range(WORLD))
    rows, cols = full.shape[0] // WORLD, full.shape[1] // WORLD
    for r, res in saved.items():
        assert res["mesh_device"] == "tpu"
        for mode in dist_worker.MODES:
            want = {
                "shard0_local": full[r * rows:(r + 1) * rows],
                "shard0_to_replicate": full,
                "shard0_to_shard1": full[:, r * cols:(r + 1) * cols],
                "partial_to_replicate": total,
                "partial_to_shard0": total[r * rows:(r + 1) * rows],
                "matmul_full": full @ np.ones((6, 3), dtype=np.float32),
            }
            for key, value in want.items():
                np.testing.assert_array_equal(as_np(res[f"{mode}/{key}"]), value, err_msg=f"rank {r} {mode} {key}")


# --- errors, not hangs --------------------------------------------------------------------


@pytest.mark.parametrize("check", [False, True], ids=["default", "check_mode"])
def test_mismatched_collective_is_an_error_on_every_rank(tmp_path, check):
    env = {"TORCHTPU_COLLECTIVE_CHECK": "1"} if check else {}
    saved = run_ok("mismatch", tmp_path, timeout_s=10, limit=120, env=env)
    for r, res in saved.items():
        shape, op = res["shape"], res["op"]
        assert shape is not None and op is not None, "a mismatched all_reduce did not fail"
        assert f"rank {r} of {WORLD}" in shape
        assert "rank 0: all_reduce(float32[4], op=sum)" in shape
        assert "rank 1: all_reduce(float32[5], op=sum)" in shape
        assert "rank 0: all_reduce(float32[4], op=sum)" in op and "rank 1: all_reduce(float32[4], op=max)" in op
        # Found by the fingerprint exchange, long before the 10 s timeout.
        assert res["shape_seconds"] < 5 and res["op_seconds"] < 5
        if check:
            assert shape.count("called from") == WORLD and "dist_worker.py" in shape
        else:
            assert "called from" not in shape
        # The group survives a reported mismatch.
        np.testing.assert_array_equal(as_np(res["after"]), ramp(4, 0) + ramp(4, 1))


@pytest.mark.parametrize("scenario, timeout_s, codes, diagnosis", [
    ("killed", 10, [0, 17], "rank 1 ("),
    ("late", 4, [0, 0], "rank 1 is alive but did not complete it"),
])
def test_a_missing_rank_is_named_within_the_timeout(tmp_path, scenario, timeout_s, codes, diagnosis):
    """Rank 1 dies (killed), or lives on without calling (late): rank 0's
    all_reduce fails within the process group's timeout, naming rank 1 and
    what became of it."""
    got, outputs, saved = launch(scenario, tmp_path, timeout_s=timeout_s, limit=120)
    assert got == codes, "\n".join(outputs)
    error, seconds = saved[0]["error"], saved[0]["seconds"]
    assert error is not None, "the all_reduce rank 1 never joined did not fail"
    assert "all_reduce(float32[4], op=sum) (collective #1) failed on rank 0 of 2" in error
    assert diagnosis in error, error
    if scenario == "killed":
        assert "died or stopped responding" in error
        assert seconds < timeout_s + 5  # Gloo may notice the closed socket sooner
    else:
        assert timeout_s - 0.5 < seconds < timeout_s + 5


# --- the examples under torchrun ------------------------------------------------------------


@pytest.mark.parametrize("mode", dist_worker.MODES)
@pytest.mark.parametrize("example", ["ddp.py", "fsdp.py"])
def test_gpt_example_under_torchrun_tracks_one_process(tmp_path, example, mode):
    steps, batch, block = 8, 8, 32
    out = tmp_path / "losses.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={WORLD}",
           str(EXAMPLES / example), "--steps", str(steps), "--batch", str(batch), "--block", str(block),
           "--losses", str(out)]
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", TORCHTPU_EAGER_MODE=mode)
    try:
        done = subprocess.run(cmd, cwd=EXAMPLES, env=env, capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"torchrun {example} did not finish within 300 s:\n{e.stdout}\n{e.stderr}")
    assert done.returncode == 0, f"torchrun {example} failed:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    assert f"{WORLD} ranks, backend tpu, device tpu" in done.stdout
    sys.path.insert(0, str(EXAMPLES))
    import gpt

    reference = gpt.train("cpu", steps, batch=batch, block=block, quiet=True)
    losses = json.loads(out.read_text())
    assert losses[-1] < losses[0] - 0.5  # it learns
    np.testing.assert_allclose(losses, reference, rtol=2e-3)


# --- the transport ------------------------------------------------------------------------


def test_a_runtime_started_before_the_group_is_explained(tmp_path):
    saved = run_ok("started_first", tmp_path)
    for r, res in saved.items():
        assert res["joined"] is None and res["backend_joined"] is False
        assert "started before this process group" in res["reason"], res["reason"]
        np.testing.assert_array_equal(as_np(res["sum"]), [2.0, 2.0])


def test_import_under_torchrun_leaves_the_runtime_to_start_later(tmp_path):
    """Importing torch binds tpu:LOCAL_RANK without starting the runtime, so
    that init_process_group can still make its client join the processes."""
    code = ("import torch, torchtpu._C as C; before = C._runtime_started(); d = torch.tpu.current_device(); "
            "print(before, d, C._runtime_started(), torch.tpu.device_count())")
    env = dict(os.environ, LOCAL_RANK="5", LOCAL_WORLD_SIZE="6", WORLD_SIZE="6", RANK="5")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    before, device, after, count = done.stdout.split()
    assert (before, after) == ("False", "True")
    assert int(device) == 5 % int(count)  # 6 ranks on a 4-device client wrap around


def test_transport_choice_is_checked(monkeypatch):
    import datetime

    import torch.distributed as dist
    from torchtpu.distributed import TpuBackend

    def create():
        return TpuBackend(dist.HashStore(), 0, 1, datetime.timedelta(seconds=5))

    monkeypatch.setenv("TORCHTPU_DIST_TRANSPORT", "pjrt-native")
    with pytest.raises(ValueError, match="sees only this process's .* devices .* use 'gloo-staged'"):
        create()
    monkeypatch.setenv("TORCHTPU_DIST_TRANSPORT", "nccl")
    with pytest.raises(ValueError, match="TORCHTPU_DIST_TRANSPORT='nccl': expected"):
        create()
    monkeypatch.setenv("TORCHTPU_DIST_TRANSPORT", "")
    backend = create()
    try:
        assert backend.transport == "gloo-staged"
    finally:
        backend.shutdown()
