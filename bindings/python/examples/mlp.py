"""An MLP classifier on a synthetic 10-class problem. The same script runs on
CUDA with ``--device cuda``; nothing else differs.

    python mlp.py [--device tpu] [--steps 200] [--compile]
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def make_data(n: int = 2048, features: int = 32, classes: int = 10, seed: int = 0):
    """Gaussian clusters around random class centres."""
    g = torch.Generator().manual_seed(seed)
    centres = torch.randn(classes, features, generator=g) * 0.4
    y = torch.randint(classes, (n,), generator=g)
    x = centres[y] + torch.randn(n, features, generator=g)
    return x, y


def make_model(features: int = 32, classes: int = 10, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(features, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, classes))


def train(device: str, steps: int, batch: int = 256, compile: bool = False, seed: int = 0,
          quiet: bool = False) -> list[float]:
    x, y = make_data(seed=seed)
    model = make_model(seed=seed).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    def step(xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
        loss = F.cross_entropy(model(xb), yb)
        loss.backward()
        return loss

    if compile:
        step = torch.compile(step, backend=torch.device(device).type)
    losses = []
    for i in range(steps):
        lo = (i * batch) % len(x)
        opt.zero_grad(set_to_none=True)
        loss = step(x[lo:lo + batch].to(device), y[lo:lo + batch].to(device))
        opt.step()
        losses.append(loss.item())
        if not quiet and i % 50 == 0:
            print(f"step {i:4d}  loss {losses[-1]:.4f}")
    return losses


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--device", default="tpu")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--compile", action="store_true")
    args = p.parse_args()
    start = time.perf_counter()
    losses = train(args.device, args.steps, compile=args.compile)
    print(f"loss {losses[0]:.3f} -> {losses[-1]:.3f}, {len(losses) / (time.perf_counter() - start):.1f} steps/s")


if __name__ == "__main__":
    main()
