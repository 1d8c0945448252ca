"""A character-level GPT (nanoGPT-sized: 4 layers, 128 wide) trained on text
generated from a small grammar. The same script runs on CUDA with
``--device cuda``; nothing else differs.

    python gpt.py                      # tpu, eager mode from TORCHTPU_EAGER_MODE
    python gpt.py --compile            # torch.compile(backend="tpu")
    TORCHTPU_EAGER_MODE=DEFER_AND_FUSE python gpt.py
"""

from __future__ import annotations

import argparse
import math
import random
import time
from typing import Callable

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

SUBJECTS = ["the cat", "a dog", "the old man", "my sister", "the robot", "a small bird", "the teacher", "our team"]
VERBS = ["sees", "likes", "paints", "follows", "builds", "finds", "carries", "remembers"]
OBJECTS = ["the red ball", "a quiet river", "the tall tower", "an open door", "the morning sun", "a long road"]
ENDINGS = [".", " today.", " again.", " at night.", " in the rain.", " with care."]


def make_text(n_sentences: int = 4000, seed: int = 1234) -> str:
    """A corpus with learnable structure: a grammar of short sentences."""
    rng = random.Random(seed)
    return " ".join(
        f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)}{rng.choice(ENDINGS)}"
        for _ in range(n_sentences))


class Block(nn.Module):
    def __init__(self, width: int, heads: int, block_size: int):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.ln2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))
        self.register_buffer("mask", torch.tril(torch.ones(block_size, block_size, dtype=torch.bool)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(c // self.heads)
        att = att.masked_fill(~self.mask[:t, :t], float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, c)
        x = x + self.proj(y)
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab: int, width: int = 128, layers: int = 4, heads: int = 4, block_size: int = 64):
        super().__init__()
        self.tok = nn.Embedding(vocab, width)
        self.pos = nn.Embedding(block_size, width)
        self.blocks = nn.Sequential(*[Block(width, heads, block_size) for _ in range(layers)])
        self.ln = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        t = idx.shape[1]
        pos = torch.arange(t, device=idx.device)
        return self.head(self.ln(self.blocks(self.tok(idx) + self.pos(pos))))


def batches(data: torch.Tensor, steps: int, batch: int, block: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        ix = torch.randint(len(data) - block - 1, (batch,), generator=g)
        yield (torch.stack([data[i:i + block] for i in ix]), torch.stack([data[i + 1:i + block + 1] for i in ix]))


def train(device: str, steps: int, batch: int = 16, block: int = 64, compile: bool = False, seed: int = 0,
          log_every: int = 25, quiet: bool = False,
          wrap: Callable[[nn.Module], nn.Module] | None = None) -> list[float]:
    """Trains for `steps` steps and returns each step's loss. Under
    torch.distributed (ddp.py, fsdp.py) each rank takes its slice of the same
    global batch of `batch` sequences, `wrap` makes the model data-parallel,
    and the loss returned is the global batch's (the ranks' mean), so that
    any number of ranks trains like one process on the whole batch."""
    rank, world = (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)
    if batch % world:
        raise ValueError(f"the global batch ({batch}) must divide evenly among {world} ranks")
    rows = slice(rank * batch // world, (rank + 1) * batch // world)
    quiet = quiet or rank != 0
    text = make_text()
    chars = sorted(set(text))
    data = torch.tensor([chars.index(c) for c in text], dtype=torch.long)
    torch.manual_seed(seed)
    model = GPT(len(chars), block_size=block).to(device)
    if wrap is not None:
        model = wrap(model)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)

    def step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        logits = model(x)
        loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), y.view(-1))
        loss.backward()
        return loss

    if compile:
        step = torch.compile(step, backend=torch.device(device).type)
    losses = []
    start = time.perf_counter()
    for i, (x, y) in enumerate(batches(data, steps, batch, block, seed)):
        opt.zero_grad(set_to_none=True)
        loss = step(x[rows].to(device), y[rows].to(device))
        opt.step()
        if world > 1:
            loss = loss.detach().clone()
            dist.all_reduce(loss, op=dist.ReduceOp.AVG)
        losses.append(loss.item())
        if not quiet and (i % log_every == 0 or i == steps - 1):
            rate = (i + 1) / (time.perf_counter() - start)
            print(f"step {i:4d}  loss {losses[-1]:.4f}  {rate:6.2f} steps/s", flush=True)
    return losses


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="tpu")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--compile", action="store_true", help="torch.compile the training step")
    args = p.parse_args()

    backend = getattr(torch, torch.device(args.device).type)
    name = backend.get_device_name() if hasattr(backend, "get_device_name") else args.device
    print(f"device: {args.device} ({name})")
    if hasattr(backend, "eager_mode"):
        print(f"mode:   {'torch.compile' if args.compile else backend.eager_mode.name}")
    start = time.perf_counter()
    losses = train(args.device, args.steps, compile=args.compile)
    took = time.perf_counter() - start
    print(f"loss {losses[0]:.3f} -> {losses[-1]:.3f} in {len(losses)} steps, "
          f"{len(losses) / took:.2f} steps/s overall (first steps include compiling)")
    if hasattr(backend, "compile_cache_stats"):
        s = backend.compile_cache_stats()
        print(f"cache:  {s['compiles']} compiles ({s['compile_seconds']:.1f} s), op cache hits "
              f"{s['op_cache_hits']}, program cache hits {s['memory_hits']} memory / {s['disk_hits']} disk, "
              f"misses {s['misses']}")
        print(f"flushes: { {k: v for k, v in s['flushes'].items() if v} }")


if __name__ == "__main__":
    main()
