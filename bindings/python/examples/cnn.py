"""A small CNN on synthetic images (which quadrant holds a bright square).
The same script runs on CUDA with ``--device cuda``; nothing else differs.

    python cnn.py [--device tpu] [--steps 100] [--compile]
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def make_data(n: int = 512, size: int = 16, seed: int = 0):
    """Noise images with a bright 4x4 square in one of four quadrants; the
    label is the quadrant."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 1, size, size, generator=g)
    y = torch.randint(4, (n,), generator=g)
    half = size // 2
    for i in range(n):
        r = (y[i] // 2) * half + 2
        c = (y[i] % 2) * half + 2
        x[i, 0, r:r + 4, c:c + 4] += 0.5
    return x, y


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.fc = nn.Linear(16 * 4 * 4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc(x.flatten(1))


def train(device: str, steps: int, batch: int = 64, compile: bool = False, seed: int = 0,
          quiet: bool = False) -> list[float]:
    x, y = make_data(seed=seed)
    torch.manual_seed(seed)
    model = Net().to(device)
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
        if not quiet and i % 25 == 0:
            print(f"step {i:4d}  loss {losses[-1]:.4f}")
    return losses


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--device", default="tpu")
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--compile", action="store_true")
    args = p.parse_args()
    start = time.perf_counter()
    losses = train(args.device, args.steps, compile=args.compile)
    print(f"loss {losses[0]:.3f} -> {losses[-1]:.3f}, {len(losses) / (time.perf_counter() - start):.1f} steps/s")


if __name__ == "__main__":
    main()
