"""One rank of a multi-process scenario of test_distributed.py.

    python dist_worker.py SCENARIO OUT_DIR

The test starts one process per rank with ``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK`` and ``LOCAL_WORLD_SIZE`` set as torchrun sets them, and
``TORCHTPU_TEST_INIT`` (a ``file://`` rendezvous) and
``TORCHTPU_TEST_TIMEOUT`` (the process group's timeout, seconds). Each rank
saves what it computed, as CPU tensors, to ``OUT_DIR/rank<r>.pt``; the test
compares them with values computed independently (by hand or by PyTorch on
CPU). Nothing here asserts: a rank that raises exits non-zero with its
traceback, which the test prints.
"""

from __future__ import annotations

import datetime
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn

# Defaults for the test, which imports this module for the model and data.
RANK = int(os.environ.get("RANK", "0"))
WORLD = int(os.environ.get("WORLD_SIZE", "1"))
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
MODES = ["DEFER_NEVER", "DEFER_AND_FUSE"]


def init(backend: str = "cpu:gloo,tpu:tpu") -> None:
    timeout = datetime.timedelta(seconds=float(os.environ.get("TORCHTPU_TEST_TIMEOUT", "30")))
    dist.init_process_group(backend, init_method=os.environ["TORCHTPU_TEST_INIT"], rank=RANK, world_size=WORLD,
                            timeout=timeout)


def torchtpu_C():  # noqa: N802 (the module's name)
    import torchtpu._C

    return torchtpu._C


def started_first() -> dict:
    """A tpu tensor before init_process_group: the runtime has started, so
    its client cannot join the processes any more; the backend says so."""
    x = torch.ones(2, device="tpu")
    init()
    backend = dist.distributed_c10d._get_default_group()._get_backend(torch.device("tpu"))
    dist.all_reduce(x)
    out = {"joined": torchtpu_C()._joined_node(), "backend_joined": backend.joined,
           "reason": backend.transport_reason, "sum": x.cpu()}
    dist.destroy_process_group()
    return out


def device() -> torch.device:
    return torch.device("tpu", torch.tpu.current_device())


def rank_tensor(n: int, dtype: torch.dtype, offset: float = 0.0) -> torch.Tensor:
    """[1, 2, ..., n] * (rank + 1) + offset: small integers, exact in bf16."""
    return ((torch.arange(n, dtype=torch.float32) + 1) * (RANK + 1) + offset).to(dtype).to(device())


# --- every collective, for f32 and bf16 --------------------------------------------------


def collectives() -> dict:
    import torchtpu.distributed as td

    started_before = torchtpu_C()._runtime_started()
    init()
    backend = dist.distributed_c10d._get_default_group()._get_backend(torch.device("tpu"))
    out: dict = {"transport": td.transport(), "device": torch.tpu.current_device(), "started_before": started_before,
                 "joined": torchtpu_C()._joined_node(), "reason": backend.transport_reason}
    for mode in MODES:
        with torch.tpu.set_eager_mode(mode):
            for name, dtype in DTYPES.items():
                for key, value in _collectives(dtype).items():
                    out[f"{mode}/{name}/{key}"] = value
    dist.barrier()
    dist.destroy_process_group()
    return out


def _collectives(dtype: torch.dtype) -> dict:
    dev = device()
    res: dict = {}
    for op in ("SUM", "AVG", "MAX", "MIN", "PRODUCT"):
        t = rank_tensor(4, dtype)
        dist.all_reduce(t, op=getattr(dist.ReduceOp, op))
        res[f"all_reduce_{op.lower()}"] = t.cpu()
    t = rank_tensor(4, dtype)
    work = dist.all_reduce(t, async_op=True)
    res["all_reduce_future"] = work.get_future().wait()[0].cpu()

    t = rank_tensor(3, dtype)
    gathered = torch.empty(WORLD * 3, dtype=dtype, device=dev)
    dist.all_gather_into_tensor(gathered, t)
    res["all_gather_into_tensor"] = gathered.cpu()
    parts = [torch.empty(3, dtype=dtype, device=dev) for _ in range(WORLD)]
    dist.all_gather(parts, t)
    res["all_gather"] = torch.cat([p.cpu() for p in parts])

    t = rank_tensor(2 * WORLD, dtype)
    shard = torch.empty(2, dtype=dtype, device=dev)
    dist.reduce_scatter_tensor(shard, t)
    res["reduce_scatter_tensor"] = shard.cpu()
    shard = torch.empty(2, dtype=dtype, device=dev)
    dist.reduce_scatter(shard, list(rank_tensor(2 * WORLD, dtype).chunk(WORLD)))
    res["reduce_scatter"] = shard.cpu()

    t = rank_tensor(4, dtype)
    dist.broadcast(t, src=WORLD - 1)
    res["broadcast"] = t.cpu()

    t = rank_tensor(2 * WORLD, dtype, offset=100.0 * RANK)
    received = torch.empty_like(t)
    dist.all_to_all_single(received, t)
    res["all_to_all_single"] = received.cpu()
    # Uneven splits: rank r sends r+1+j elements to rank j.
    send = [RANK + 1 + j for j in range(WORLD)]
    recv = [r + 1 + RANK for r in range(WORLD)]
    t = rank_tensor(sum(send), dtype)
    received = torch.empty(sum(recv), dtype=dtype, device=dev)
    dist.all_to_all_single(received, t, output_split_sizes=recv, input_split_sizes=send)
    res["all_to_all_single_uneven"] = received.cpu()
    outs = [torch.empty(2, dtype=dtype, device=dev) for _ in range(WORLD)]
    dist.all_to_all(outs, list(rank_tensor(2 * WORLD, dtype).chunk(WORLD)))
    res["all_to_all"] = torch.cat([o.cpu() for o in outs])

    t = rank_tensor(4, dtype)
    dist.reduce(t, dst=0)
    if RANK == 0:
        res["reduce"] = t.cpu()
    t = rank_tensor(3, dtype)
    bucket = [torch.empty(3, dtype=dtype, device=dev) for _ in range(WORLD)] if RANK == 0 else None
    dist.gather(t, bucket, dst=0)
    if RANK == 0:
        res["gather"] = torch.cat([b.cpu() for b in bucket])
    got = torch.empty(3, dtype=dtype, device=dev)
    dist.scatter(got, [rank_tensor(3, dtype, offset=10.0 * j) for j in range(WORLD)] if RANK == 0 else None, src=0)
    res["scatter"] = got.cpu()

    # Coalesced, as FSDP2 issues them.
    ins = [rank_tensor(2, dtype), rank_tensor(3, dtype)]
    outs = [torch.empty(WORLD * 2, dtype=dtype, device=dev), torch.empty(WORLD * 3, dtype=dtype, device=dev)]
    with dist._coalescing_manager(async_ops=True) as cm:
        for o, i in zip(outs, ins):
            dist.all_gather_into_tensor(o, i)
    cm.wait()
    res["all_gather_coalesced"] = torch.cat([o.cpu() for o in outs])
    ins = [rank_tensor(2 * WORLD, dtype), rank_tensor(WORLD, dtype)]
    outs = [torch.empty(2, dtype=dtype, device=dev), torch.empty(1, dtype=dtype, device=dev)]
    with dist._coalescing_manager(async_ops=True) as cm:
        for o, i in zip(outs, ins):
            dist.reduce_scatter_tensor(o, i)
    cm.wait()
    res["reduce_scatter_coalesced"] = torch.cat([o.cpu() for o in outs])

    # send/recv around a ring.
    t = rank_tensor(4, dtype)
    got = torch.empty(4, dtype=dtype, device=dev)
    reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, t, (RANK + 1) % WORLD),
                                   dist.P2POp(dist.irecv, got, (RANK - 1) % WORLD)])
    for r in reqs:
        r.wait()
    res["send_recv"] = got.cpu()
    if RANK == 0:
        dist.send(rank_tensor(2, dtype), 1)
    elif RANK == 1:
        got = torch.empty(2, dtype=dtype, device=dev)
        dist.recv(got, 0)
        res["recv"] = got.cpu()
    dist.barrier()
    return res


# --- DDP, FSDP2, DTensor against one process's full batch ------------------------------------

STEPS, BATCH, IN, HIDDEN, OUT = 5, 8, 8, 32, 4


def mlp() -> nn.Module:
    """The same initial weights on every rank and in the test's reference."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(IN, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, HIDDEN), nn.Tanh(),
                         nn.Linear(HIDDEN, OUT))


def data(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(100 + step)
    return torch.randn(BATCH, IN, generator=g), torch.randn(BATCH, OUT, generator=g)


def train(kind: str) -> dict:
    init()
    out: dict = {}
    for mode in MODES:
        with torch.tpu.set_eager_mode(mode):
            out[mode] = _train(kind)
    dist.destroy_process_group()
    return out


def _train(kind: str) -> dict:
    from torch.distributed.tensor import DTensor

    model = mlp().to(device())
    if kind == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        wrapped = DistributedDataParallel(model)
    else:
        from torch.distributed.fsdp import fully_shard

        for layer in model:
            if isinstance(layer, nn.Linear):
                fully_shard(layer)
        wrapped = fully_shard(model)
    opt = torch.optim.SGD(wrapped.parameters(), lr=0.05, momentum=0.9)
    per_rank = BATCH // WORLD
    losses = []
    for step in range(STEPS):
        x, y = data(step)
        rows = slice(RANK * per_rank, (RANK + 1) * per_rank)
        loss = nn.functional.mse_loss(wrapped(x[rows].to(device())), y[rows].to(device()))
        loss.backward()
        opt.step()
        opt.zero_grad()
        # The full batch's loss: the mean of the ranks' equal-sized halves.
        global_loss = loss.detach().clone()
        dist.all_reduce(global_loss, op=dist.ReduceOp.AVG)
        losses.append(global_loss.item())
    params = {n: (p.full_tensor() if isinstance(p, DTensor) else p).detach().cpu()
              for n, p in model.named_parameters()}
    return {"losses": losses, "params": params}


def dtensor() -> dict:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Partial, Replicate, Shard, distribute_tensor

    init()
    mesh = init_device_mesh("tpu", (WORLD,))
    out: dict = {"mesh_device": mesh.device_type}
    full = torch.arange(4 * WORLD * 6, dtype=torch.float32).view(4 * WORLD, 6)
    for mode in MODES:
        with torch.tpu.set_eager_mode(mode):
            d = distribute_tensor(full.to(device()), mesh, [Shard(0)])
            out[f"{mode}/shard0_local"] = d.to_local().cpu()
            out[f"{mode}/shard0_to_replicate"] = d.redistribute(mesh, [Replicate()]).to_local().cpu()
            out[f"{mode}/shard0_to_shard1"] = d.redistribute(mesh, [Shard(1)]).to_local().cpu()
            # A Partial placement is a pending sum: rank r holds (r + 1) * full.
            local = (full * (RANK + 1)).to(device())
            p = from_local(local, mesh, [Partial()])
            out[f"{mode}/partial_to_replicate"] = p.redistribute(mesh, [Replicate()]).to_local().cpu()
            out[f"{mode}/partial_to_shard0"] = p.redistribute(mesh, [Shard(0)]).to_local().cpu()
            # Compute on shards: a row-sharded matmul and a full_tensor.
            w = distribute_tensor(torch.ones(6, 3).to(device()), mesh, [Replicate()])
            out[f"{mode}/matmul_full"] = (d @ w).full_tensor().cpu()
    dist.destroy_process_group()
    return out


def from_local(local: torch.Tensor, mesh, placements):
    from torch.distributed.tensor import DTensor

    return DTensor.from_local(local, mesh, placements, run_check=False)


# --- errors, not hangs ----------------------------------------------------------------


def mismatch() -> dict:
    """Rank 0 reduces a float32[4], rank 1 a float32[5]; then an op mismatch."""
    from torchtpu.distributed import CollectiveError

    init()
    out: dict = {}
    for case in ("shape", "op"):
        n = 4 + (RANK if case == "shape" else 0)
        op = dist.ReduceOp.MAX if case == "op" and RANK == 1 else dist.ReduceOp.SUM
        t = rank_tensor(n, torch.float32)
        start = time.monotonic()
        try:
            dist.all_reduce(t, op=op)
            out[case] = None
        except CollectiveError as e:
            out[case] = str(e)
        out[f"{case}_seconds"] = time.monotonic() - start
    # The group still works after a reported mismatch.
    t = rank_tensor(4, torch.float32)
    dist.all_reduce(t)
    out["after"] = t.cpu()
    dist.destroy_process_group()
    return out


def killed() -> dict:
    """The last rank dies after one collective; the others call a second."""
    return _second_all_reduce_without_the_last_rank(lambda: os._exit(17))


def late() -> dict:
    """The last rank stays alive but never joins the second collective."""

    def stay_away() -> None:
        time.sleep(3 * float(os.environ["TORCHTPU_TEST_TIMEOUT"]))
        os._exit(0)

    return _second_all_reduce_without_the_last_rank(stay_away)


def _second_all_reduce_without_the_last_rank(leave) -> dict:
    """One all_reduce together; then the last rank calls `leave` and the
    others call a second one, which must fail: what it said, and when."""
    from torchtpu.distributed import CollectiveError

    init()
    t = rank_tensor(4, torch.float32)
    dist.all_reduce(t)
    if RANK == WORLD - 1:
        leave()
    time.sleep(0.5)
    start = time.monotonic()
    out: dict = {}
    try:
        dist.all_reduce(t)
        out["error"] = None
    except CollectiveError as e:
        out["error"] = str(e)
    out["seconds"] = time.monotonic() - start
    return out


SCENARIOS = {"collectives": collectives, "ddp": lambda: train("ddp"), "fsdp": lambda: train("fsdp"),
             "dtensor": dtensor, "mismatch": mismatch, "killed": killed, "late": late,
             "started_first": started_first}

if __name__ == "__main__":
    scenario, out_dir = sys.argv[1], sys.argv[2]
    result = SCENARIOS[scenario]()
    torch.save(result, os.path.join(out_dir, f"rank{RANK}.pt"))
    # Skip interpreter teardown: a rank's peers may already be gone.
    sys.stdout.flush()
    os._exit(0)
