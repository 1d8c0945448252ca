"""The GPT example (gpt.py) trained data-parallel with DDP: the ordinary
CUDA script, with backend "tpu" and device "tpu".

    torchrun --nproc-per-node=2 ddp.py                 # two processes, tpu:0 and tpu:1
    torchrun --nproc-per-node=2 ddp.py --device cuda --backend nccl   # the same script on CUDA

Each rank trains on its slice of one global batch, so the losses printed
(rank 0's view of the global batch) track `python gpt.py`'s on the same
batch size.
"""

from __future__ import annotations

import argparse
import json
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import gpt


def parse(description: str) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="tpu")
    p.add_argument("--backend", default="tpu", help='the process-group backend ("tpu"; "nccl" on CUDA)')
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--batch", type=int, default=16, help="the global batch, split among the ranks")
    p.add_argument("--block", type=int, default=64)
    p.add_argument("--losses", help="write rank 0's losses to this JSON file")
    return p.parse_args()


def run(args: argparse.Namespace, wrap) -> None:
    """Sets up the process group and the rank's device, then trains."""
    dist.init_process_group(args.backend)
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    getattr(torch, args.device).set_device(local_rank)  # torch.cuda.set_device on CUDA
    device = torch.device(args.device, local_rank)
    if dist.get_rank() == 0:
        print(f"{dist.get_world_size()} ranks, backend {args.backend}, device {args.device}, "
              f"global batch {args.batch}", flush=True)
    losses = gpt.train(str(device), args.steps, batch=args.batch, block=args.block, wrap=wrap)
    if dist.get_rank() == 0:
        print(f"loss {losses[0]:.3f} -> {losses[-1]:.3f} in {len(losses)} steps", flush=True)
        if args.losses:
            with open(args.losses, "w") as f:
                json.dump(losses, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    run(parse(__doc__), DistributedDataParallel)
