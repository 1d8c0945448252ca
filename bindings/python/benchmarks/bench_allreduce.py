"""2-process all_reduce bandwidth, side by side in one run: the ``tpu``
process-group backend on tpu tensors against plain Gloo on CPU tensors.

On the XLA CPU plugin the tpu backend is Gloo-staged (each process sees only
its own devices), so the ratio is the staging cost: the device-to-host copy,
the fingerprint exchange that turns a mismatched call into an error, and the
copy back. Bandwidth is the algorithm bandwidth (tensor bytes / time), the
median over repeats after warm-up; quote the ratios, not the absolute figures
(machines are shared and noisy).

    .venv/bin/python bindings/python/benchmarks/bench_allreduce.py [--repeats 10]

The program starts its two ranks itself (a ``file://`` rendezvous on
127.0.0.1); rank 0 prints the table.
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import subprocess
import sys
import tempfile
import time

SIZES_MIB = (1, 16, 64)
WORLD = 2


def rank_main(rank: int, init: str, repeats: int) -> None:
    import torch
    import torch.distributed as dist

    import torchtpu.distributed as td

    dist.init_process_group("cpu:gloo,tpu:tpu", init_method=init, rank=rank, world_size=WORLD,
                            timeout=datetime.timedelta(seconds=120))
    gloo = dist.new_group(backend="gloo")
    device = torch.device("tpu", torch.tpu.current_device())

    def seconds(t: torch.Tensor, group) -> float:
        times = []
        for i in range(repeats + 2):
            dist.barrier(group=gloo)
            start = time.perf_counter()
            dist.all_reduce(t, group=group)
            if t.device.type == "tpu":
                torch.tpu.synchronize()  # the result is back on the device
            if i >= 2:  # two warm-up rounds (the tpu side compiles its copies once)
                times.append(time.perf_counter() - start)
        return statistics.median(times)

    rows = []
    for mib in SIZES_MIB:
        n = mib * 2**20 // 4
        host = torch.ones(n)
        on_tpu = torch.ones(n, device=device)
        rows.append((mib, seconds(host, gloo), seconds(on_tpu, None)))
        # Both are sums of ones over the ranks, after as many all_reduces.
        assert on_tpu[:4].cpu().tolist() == host[:4].tolist(), "the tpu and Gloo all_reduce disagree"
    if rank == 0:
        print(f"2-process all_reduce (float32, sum), tpu backend transport: {td.transport()}, "
              f"median of {repeats}")
        print(f"{'size':>8} {'gloo on CPU':>14} {'tpu backend':>14} {'tpu / gloo':>11}")
        for mib, g, t in rows:
            bw = lambda s: mib / s  # noqa: E731 (MiB/s)
            print(f"{mib:>5} MiB {bw(g):>9.0f} MiB/s {bw(t):>9.0f} MiB/s {g / t:>10.2f}x", flush=True)
    dist.barrier(group=gloo)
    dist.destroy_process_group()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    p.add_argument("--init", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.rank is not None:
        rank_main(args.rank, args.init, args.repeats)
        return
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", WORLD_SIZE=str(WORLD), LOCAL_WORLD_SIZE=str(WORLD))
        procs = [subprocess.Popen([sys.executable, __file__, "--rank", str(r), "--init", f"file://{d}/rendezvous",
                                   "--repeats", str(args.repeats)], env=dict(env, RANK=str(r), LOCAL_RANK=str(r)))
                 for r in range(WORLD)]
        codes = [p.wait() for p in procs]
    if any(codes):
        sys.exit(f"a rank failed (exit codes {codes})")


if __name__ == "__main__":
    main()
