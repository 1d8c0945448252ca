"""PyTorch on "tpu" against PyTorch CPU eager, side by side in one run:

1. dispatch overhead: microseconds per `x + y` on a small tensor, in strict
   (DEFER_NEVER) and fused (DEFER_AND_FUSE) mode, against CPU eager;
2. the example GPT's training step (forward, backward, AdamW) in strict,
   fused and compiled (torch.compile(backend="tpu")) mode, against CPU eager,
   and strict's step time over fused's;
3. what the device-side index checks cost: the same GPT step in strict and
   fused mode with the checks on and off (alternating rounds on one model);
4. what the profiler costs: `x + y` in strict and fused mode with
   torch.profiler (CPU + the tpu activity) on, against off. Off, each of the
   runtime's spans is one relaxed atomic load.

Times are medians over repeats after warm-up; the ratios are what to quote
(machines are shared and noisy).

    .venv/bin/python bindings/python/benchmarks/bench_torch.py [--steps 20]
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from pathlib import Path

import torch

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def load_gpt():
    spec = importlib.util.spec_from_file_location("example_gpt", EXAMPLES / "gpt.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def dispatch_us(device: str, mode: str | None, n: int = 2000, repeats: int = 5, profiled: bool = False) -> float:
    """Median microseconds per `x + y` (the result chained, so nothing is
    dead); `profiled` runs the rounds under torch.profiler."""
    x = torch.ones(16, device=device)
    y = torch.ones(16, device=device)
    ctx = torch.tpu.set_eager_mode(mode) if mode else None
    times = []
    prof = None
    if profiled:
        from torch.profiler import ProfilerActivity, profile

        prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1])
        prof.__enter__()
    try:
        for r in range(repeats + 1):
            z = x
            start = time.perf_counter()
            for _ in range(n):
                z = z + y
            z.sum().item()  # the work is done (and a fused graph flushed)
            if r:  # the first round compiles
                times.append((time.perf_counter() - start) / n * 1e6)
    finally:
        if prof:
            prof.__exit__(None, None, None)
        if ctx:
            ctx.__exit__(None, None, None)
    return statistics.median(times)


def gpt_trainer(gpt, device: str, compile: bool, steps: int):
    """The example GPT with AdamW: returns `train(n)`, which runs the next
    `n` training steps (reading the loss each step, as a training loop that
    logs does) and returns each step's milliseconds. `steps` bounds the
    batches drawn in all."""
    text = gpt.make_text()
    chars = sorted(set(text))
    data = torch.tensor([chars.index(c) for c in text], dtype=torch.long)
    torch.manual_seed(0)
    model = gpt.GPT(len(chars)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)

    def step(x, y):
        logits = model(x)
        loss = torch.nn.functional.cross_entropy(logits.view(-1, logits.shape[-1]), y.view(-1))
        loss.backward()
        return loss

    if compile:
        step = torch.compile(step, backend="tpu")
    batches = gpt.batches(data, steps, 16, 64, 0)

    def train(n: int) -> list[float]:
        times = []
        for _, (x, y) in zip(range(n), batches):
            start = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            loss = step(x.to(device), y.to(device))
            opt.step()
            loss.item()
            times.append((time.perf_counter() - start) * 1e3)
        return times

    return train


def gpt_step_ms(gpt, device: str, mode: str | None, compile: bool, steps: int) -> float:
    """Median milliseconds per GPT training step after warm-up."""
    ctx = torch.tpu.set_eager_mode(mode) if mode else None
    try:
        train = gpt_trainer(gpt, device, compile, steps + 3)
        train(3)
        return statistics.median(train(steps))
    finally:
        if ctx:
            ctx.__exit__(None, None, None)


def index_check_ms(gpt, mode: str, steps: int, rounds: int = 4) -> tuple[float, float]:
    """Median milliseconds per GPT step with the index checks (embedding,
    cross_entropy's targets) on and off: one model, `rounds` rounds of steps
    in each setting, interleaved, after both are warm, so drift on a shared
    machine hits both alike."""
    was = torch.tpu.index_checks_enabled()
    per_round = max(1, steps // rounds)
    ctx = torch.tpu.set_eager_mode(mode)
    times: dict[bool, list[float]] = {True: [], False: []}
    try:
        train = gpt_trainer(gpt, "tpu", False, 6 + 2 * rounds * per_round)
        for on in (True, False):  # compiles each setting's programs
            torch.tpu.set_index_checks(on)
            train(3)
        for r in range(rounds):
            # Alternate which setting goes first, so neither always follows
            # the other.
            for on in ((True, False) if r % 2 == 0 else (False, True)):
                torch.tpu.set_index_checks(on)
                times[on] += train(per_round)
    finally:
        torch.tpu.set_index_checks(was)
        ctx.__exit__(None, None, None)
    return statistics.median(times[True]), statistics.median(times[False])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=20, help="timed GPT steps per configuration")
    args = p.parse_args()
    print(f"torch {torch.__version__}, tpu: {torch.tpu.get_device_name()}, {torch.get_num_threads()} CPU threads\n")

    cpu = dispatch_us("cpu", None)
    strict = dispatch_us("tpu", "DEFER_NEVER")
    fused = dispatch_us("tpu", "DEFER_AND_FUSE")
    print("dispatch overhead, x + y on 16 floats (us/op, lower is better)")
    print(f"  {'cpu eager':22s} {cpu:8.2f}   1.00x")
    print(f"  {'tpu strict':22s} {strict:8.2f}   {strict / cpu:.2f}x of cpu")
    print(f"  {'tpu fused':22s} {fused:8.2f}   {fused / cpu:.2f}x of cpu")

    gpt = load_gpt()
    rows = [("cpu eager", "cpu", None, False), ("tpu strict", "tpu", "DEFER_NEVER", False),
            ("tpu fused", "tpu", "DEFER_AND_FUSE", False), ("tpu compiled", "tpu", None, True)]
    print("\nGPT training step (4 layers, 128 wide, batch 16 x 64 tokens; ms/step, lower is better)")
    base = None
    step = {}
    for label, device, mode, comp in rows:
        ms = gpt_step_ms(gpt, device, mode, comp, args.steps)
        base = base or ms
        step[label] = ms
        print(f"  {label:22s} {ms:8.2f}   {base / ms:.2f}x the speed of cpu eager")
    print(f"  strict / fused: {step['tpu strict'] / step['tpu fused']:.2f}x (strict's time per step over fused's)")

    print("\nindex checks: GPT training step with the checks on vs off (ms/step; on/off > 1 is their cost)")
    for label, mode in (("tpu strict", "DEFER_NEVER"), ("tpu fused", "DEFER_AND_FUSE")):
        on, off = index_check_ms(gpt, mode, args.steps)
        print(f"  {label:22s} on {on:8.2f}   off {off:8.2f}   on/off {on / off:.3f}x")

    print("\nprofiler: x + y on 16 floats under torch.profiler (CPU + tpu activities) vs off (us/op)")
    for label, mode in (("tpu strict", "DEFER_NEVER"), ("tpu fused", "DEFER_AND_FUSE")):
        off = dispatch_us("tpu", mode, n=500)
        on = dispatch_us("tpu", mode, n=500, profiled=True)
        print(f"  {label:22s} off {off:8.2f}   on {on:8.2f}   on/off {on / off:.2f}x")


if __name__ == "__main__":
    main()
