"""What changing values and shapes cost (issue 21), printed side by side:

1. Decode with Hugging Face `generate()` on a small GPT-2 (built from a
   config), with the growing (dynamic) KV cache and the static one: ms per
   token and programs compiled per 64 tokens, strict and fused, against
   PyTorch CPU eager.
2. AdamW(fused=True) under a OneCycleLR schedule (the learning rate and beta1
   change every step) against plain AdamW: ms per step and compiles after
   warm-up.
3. A second process on the same program cache: compiles and time to the
   first result, against the first process, in strict and fused mode.
4. A long fused trace with no host read (a 56-op body 100 times, and 200
   steps of a small MLP's training step): compiles and time with the default
   `fuse_loops` policy against `fuse_all` (2048-op chunks).

5. A new batch size at every call (8 to 48) of a small MLP's forward, in
   each mode and under torch.compile(dynamic=True): compiles and ms per
   call, cold and warm, against PyTorch CPU eager.

Run: .venv/bin/python bindings/python/benchmarks/bench_recompiles.py [section ...]
(sections: adamw, second_process, long_traces, decode, batch_sizes; all by default)
Times are medians; the machine is shared, so read the ratios.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

MODES = ["DEFER_NEVER", "DEFER_AND_FUSE"]
TOKENS = 64


def compiles() -> int:
    return torch.tpu.compile_cache_stats()["compiles"]


# ------------------------------------------------------------------ decode

def gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=2, n_head=4, n_embd=128, vocab_size=512, n_positions=256, bos_token_id=0, eos_token_id=0)
    return GPT2LMHeadModel(cfg).eval()


def decode(model, device: str, cache: str, mode: str | None) -> dict:
    """A 64-token greedy decode: the programs the first (cold) generate()
    compiled, their compile seconds and its ms per token; then ms per token
    warm (the median of three after one more run, which may still compile
    what the first run learned), and the tokens."""
    prompt = torch.randint(1, 512, (1, 16), generator=torch.Generator().manual_seed(0)).to(device)
    kw = dict(max_new_tokens=TOKENS, min_new_tokens=TOKENS, do_sample=False, pad_token_id=0)
    if cache == "static":
        kw["cache_implementation"] = "static"
    ctx = torch.tpu.set_eager_mode(mode) if mode else _nullcontext()
    with ctx, torch.no_grad():
        before = torch.tpu.compile_cache_stats() if mode else None
        t = time.perf_counter()
        out = model.generate(prompt, **kw).cpu()
        cold_ms = (time.perf_counter() - t) * 1e3 / TOKENS
        after = torch.tpu.compile_cache_stats() if mode else None
        times = []
        for _ in range(4):
            t = time.perf_counter()
            model.generate(prompt, **kw).cpu()
            times.append(time.perf_counter() - t)
    return {
        "ms": statistics.median(times[1:]) * 1e3 / TOKENS,
        "cold_ms": cold_ms,
        "compiles": after["compiles"] - before["compiles"] if mode else 0,
        "compile_s": after["compile_seconds"] - before["compile_seconds"] if mode else 0.0,
        "tokens": out.tolist(),
    }


class _nullcontext:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


# Each tpu row runs in a process of its own with an empty program cache, so
# its cold figures are its own. The fused mode runs ops whose shapes grow
# between steps alone (the shape watch, on by default); "fused, watch off"
# records them with the rest (TORCHTPU_SHAPE_WATCH=0).
DECODE_ROWS = {
    "DEFER_NEVER": ("DEFER_NEVER", False, {"TORCHTPU_SHAPE_WATCH": "1"}),
    "DEFER_AND_FUSE": ("DEFER_AND_FUSE", False, {"TORCHTPU_SHAPE_WATCH": "1"}),
    "fused, watch off": ("DEFER_AND_FUSE", False, {"TORCHTPU_SHAPE_WATCH": "0"}),
    "torch.compile": ("DEFER_NEVER", True, {"TORCHTPU_SHAPE_WATCH": "1"}),  # the forward compiled
}


def decode_row_child(cache: str, row: str) -> None:
    mode, compiled, _ = DECODE_ROWS[row]
    model = gpt2().to("tpu")
    if compiled:
        model.forward = torch.compile(model.forward, backend="tpu")
    print(json.dumps(decode(model, "tpu", cache, mode)))


def bench_decode() -> None:
    print(f"\n== decode: GPT-2 (2 layers, d=128), {TOKENS} greedy tokens after a 16-token prompt")
    print("   cold: the first generate() in a new process with an empty program cache")
    print(f"{'cache':8s} {'mode':17s} {'ms/token':>9s} {'vs CPU':>7s} {'cold ms/token':>14s} {'compiles (cold)':>16s} "
          f"{'compile s (cold)':>17s} {'tokens = CPU':>13s}")
    cpu_model = gpt2()
    for cache in ("dynamic", "static"):
        cpu = decode(cpu_model, "cpu", cache, None)
        print(f"{cache:8s} {'CPU eager':17s} {cpu['ms']:9.2f} {'1.00x':>7s} {cpu['cold_ms']:14.2f} {'-':>16s} "
              f"{'-':>17s} {'-':>13s}")
        for row, (_, _, extra) in DECODE_ROWS.items():
            r = _row_child("--decode-row", row, extra, cache)
            print(f"{cache:8s} {row:17s} {r['ms']:9.2f} {r['ms'] / cpu['ms']:6.2f}x {r['cold_ms']:14.2f} "
                  f"{r['compiles']:16d} {r['compile_s']:17.2f} {str(r['tokens'] == cpu['tokens']):>13s}")


# ---------------------------------------------- a new batch size every call

BATCHES = range(8, 49)

BATCH_ROWS = {  # row: (eager mode, torch.compile(dynamic=True), extra environment)
    "DEFER_NEVER": ("DEFER_NEVER", False, {}),
    "DEFER_AND_FUSE": ("DEFER_AND_FUSE", False, {}),
    "fused, watch off": ("DEFER_AND_FUSE", False, {"TORCHTPU_SHAPE_WATCH": "0"}),
    "torch.compile": ("DEFER_NEVER", True, {}),
    "compile, exact": ("DEFER_NEVER", True, {"TORCHTPU_COMPILE_BUCKETS": "0"}),
    "compile, exact, no watch": ("DEFER_NEVER", True, {"TORCHTPU_COMPILE_BUCKETS": "0", "TORCHTPU_SHAPE_WATCH": "0"}),
}


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 128), nn.GELU(), nn.LayerNorm(128), nn.Linear(128, 10)).eval()


def batch_sizes(device: str, row: str | None) -> dict:
    """The MLP's forward at each batch size of BATCHES, cold (the first
    pass) and warm (the third): compiles and compile seconds of the cold
    pass, ms per call of each, and each output's sum (compared with the
    CPU's)."""
    model = mlp().to(device)
    mode, compiled = (BATCH_ROWS[row][:2]) if row else (None, False)
    if compiled:
        model = torch.compile(model, backend="tpu", dynamic=True)
    xs = [torch.randn(b, 64, generator=torch.Generator().manual_seed(b)) for b in BATCHES]

    def one_pass() -> tuple[float, list]:
        t = time.perf_counter()
        sums = [model(x.to(device)).cpu().sum().item() for x in xs]
        return (time.perf_counter() - t) * 1e3 / len(xs), sums

    ctx = torch.tpu.set_eager_mode(mode) if mode else _nullcontext()
    with ctx, torch.no_grad():
        before = torch.tpu.compile_cache_stats() if mode else None
        cold_ms, sums = one_pass()
        after = torch.tpu.compile_cache_stats() if mode else None
        one_pass()  # may still compile what the first pass learned
        ms, _ = one_pass()
    return {
        "cold_ms": cold_ms, "ms": ms, "sums": sums,
        "compiles": after["compiles"] - before["compiles"] if mode else 0,
        "compile_s": after["compile_seconds"] - before["compile_seconds"] if mode else 0.0,
    }


def bench_batch_sizes() -> None:
    print(f"\n== a new batch size every call ({BATCHES.start} to {BATCHES.stop - 1}): MLP 64-128-10 forward "
          "with GELU and LayerNorm")
    print("   cold: the first pass over the sizes in a new process with an empty program cache; warm: the third")
    print("   torch.compile(dynamic=True) pads the batch to its bucket; \"exact\" rows run every size exactly")
    print(f"{'mode':24s} {'ms/call':>8s} {'vs CPU':>7s} {'cold ms/call':>13s} {'compiles (cold)':>16s} "
          f"{'compile s (cold)':>17s} {'sums = CPU':>10s}")
    cpu = batch_sizes("cpu", None)
    print(f"{'CPU eager':24s} {cpu['ms']:8.3f} {'1.00x':>7s} {cpu['cold_ms']:13.3f} {'-':>16s} {'-':>17s} {'-':>10s}")
    for row, (_, _, extra) in BATCH_ROWS.items():
        r = _row_child("--batch-row", row, extra)
        same = all(abs(a - b) <= 1e-4 * max(1.0, abs(b)) for a, b in zip(r["sums"], cpu["sums"]))
        print(f"{row:24s} {r['ms']:8.3f} {r['ms'] / cpu['ms']:6.2f}x {r['cold_ms']:13.2f} {r['compiles']:16d} "
              f"{r['compile_s']:17.2f} {str(same):>10s}")


def _row_child(flag: str, row: str, extra: dict, *args: str) -> dict:
    """Runs one tpu row in a process of its own with an empty program
    cache, and returns the JSON it prints last."""
    with tempfile.TemporaryDirectory() as cache_dir:
        env = dict(os.environ, TORCHTPU_CACHE_DIR=cache_dir, **extra)
        child = subprocess.run([sys.executable, __file__, flag, *args, row], env=env, capture_output=True,
                               text=True, check=True)
    return json.loads(child.stdout.strip().splitlines()[-1])


# ------------------------------------------------- AdamW under a schedule

def bench_adamw() -> None:
    print("\n== AdamW under OneCycleLR (lr and beta1 change every step): MLP 256-512-256, batch 64")
    print(f"{'mode':16s} {'optimizer':18s} {'ms/step':>8s} {'vs plain':>9s} {'compiles after warm-up':>23s}")
    x = torch.randn(64, 256, device="tpu")
    for mode in MODES:
        plain_ms = None
        for fused in (False, True):
            torch.manual_seed(0)
            m = nn.Sequential(nn.Linear(256, 512), nn.GELU(), nn.Linear(512, 256)).to("tpu")
            opt = torch.optim.AdamW(m.parameters(), lr=1e-3, fused=fused)
            sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=1e-2, total_steps=1000)
            with torch.tpu.set_eager_mode(mode):
                def step():
                    opt.zero_grad()
                    F.mse_loss(m(x), x).backward()
                    opt.step()
                    sched.step()
                    return m[0].weight[0, 0].item()
                for _ in range(3):
                    step()
                before = compiles()
                times = []
                for _ in range(15):
                    t = time.perf_counter()
                    step()
                    times.append(time.perf_counter() - t)
                after = compiles() - before
            ms = statistics.median(times) * 1e3
            plain_ms = plain_ms or ms
            name = "AdamW(fused=True)" if fused else "AdamW"
            print(f"{mode:16s} {name:18s} {ms:8.2f} {ms / plain_ms:8.2f}x {after:23d}")


# ------------------------------------------------------- second process

CHILD = r"""
import json, time
t0 = time.perf_counter()
import torch, torch.nn as nn
t_import = time.perf_counter()
torch.manual_seed(0)
m = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(16, 32, 3, padding=1),
                  nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10)).to("tpu")
opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
x, y = torch.randn(8, 3, 32, 32, device="tpu"), torch.randint(0, 10, (8,), device="tpu")
opt.zero_grad(); nn.functional.cross_entropy(m(x), y).backward(); opt.step()
loss = nn.functional.cross_entropy(m(x), y).item()
s = torch.tpu.compile_cache_stats()
print("RESULT " + json.dumps({"first_result_s": time.perf_counter() - t_import, "compiles": s["compiles"],
                              "disk_hits": s["disk_hits"], "compile_s": s["compile_seconds"], "loss": loss}))
"""


def child(mode: str, cache_dir: str) -> dict:
    env = dict(os.environ, TORCHTPU_CACHE_DIR=cache_dir, TORCHTPU_EAGER_MODE=mode)
    r = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        raise RuntimeError(r.stderr[-2000:])
    return json.loads(next(l for l in r.stdout.splitlines() if l.startswith("RESULT "))[7:])


def bench_second_process() -> None:
    print("\n== a second process on the same program cache: a small CNN's first training step and loss")
    print(f"{'mode':16s} {'process':8s} {'compiles':>9s} {'disk hits':>10s} {'compile s':>10s} {'to 1st result s':>16s} {'vs first':>9s}")
    for mode in MODES:
        with tempfile.TemporaryDirectory(prefix="torchtpu-bench-cache-") as d:
            first = child(mode, d)
            second = child(mode, d)
        for name, r in (("first", first), ("second", second)):
            print(f"{mode:16s} {name:8s} {r['compiles']:9d} {r['disk_hits']:10d} {r['compile_s']:10.2f} "
                  f"{r['first_result_s']:16.2f} {r['first_result_s'] / first['first_result_s']:8.2f}x")
        assert abs(first["loss"] - second["loss"]) < 1e-6, (first, second)


# ------------------------------------------------------------- long traces

def long_loop():
    torch.manual_seed(0)
    x, w, h = (torch.randn(16, 16, device="tpu") for _ in range(3))
    for _ in range(100):
        for _ in range(8):
            h = torch.tanh(h @ (w * 0.1) + x) * 0.5 + h * 0.5
    return h.sum().item()


def long_training():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10)).to("tpu")
    opt = torch.optim.SGD(m.parameters(), lr=0.01)
    x, y = torch.randn(16, 32, device="tpu"), torch.randint(0, 10, (16,), device="tpu")
    for _ in range(200):
        opt.zero_grad()
        F.cross_entropy(m(x), y).backward()
        opt.step()
    return m[0].weight.sum().item()


def bench_long_traces() -> None:
    print("\n== long fused traces with no host read: fuse_loops (default) against fuse_all")
    print(f"{'trace':28s} {'policy':11s} {'ops':>6s} {'compiles':>9s} {'compile s':>10s} {'total s':>8s} {'vs fuse_all':>12s}")
    for name, f in (("56-op body x 100", long_loop), ("MLP train step x 200", long_training)):
        rows = {}
        for policy in ("fuse_all", "fuse_loops"):
            torch.tpu.set_fusion_policy(policy)
            with torch.tpu.set_eager_mode("DEFER_AND_FUSE"):
                torch.tpu.synchronize()
                before = torch.tpu.compile_cache_stats()
                t = time.perf_counter()
                value = f()
                took = time.perf_counter() - t
                after = torch.tpu.compile_cache_stats()
            rows[policy] = (after["recorded_ops"] - before["recorded_ops"], after["compiles"] - before["compiles"],
                            after["compile_seconds"] - before["compile_seconds"], took, value)
        torch.tpu.set_fusion_policy("fuse_loops")
        for policy, (ops, comp, comp_s, took, _) in rows.items():
            print(f"{name:28s} {policy:11s} {ops:6d} {comp:9d} {comp_s:10.2f} {took:8.2f} {took / rows['fuse_all'][3]:11.2f}x")


SECTIONS = {"adamw": bench_adamw, "second_process": bench_second_process, "long_traces": bench_long_traces,
            "decode": bench_decode, "batch_sizes": bench_batch_sizes}

if __name__ == "__main__":
    if sys.argv[1:2] == ["--decode-row"]:
        decode_row_child(sys.argv[2], sys.argv[3])
        sys.exit(0)
    if sys.argv[1:2] == ["--batch-row"]:
        print(json.dumps(batch_sizes("tpu", sys.argv[2])))
        sys.exit(0)
    unknown = [a for a in sys.argv[1:] if a not in SECTIONS]
    if unknown:
        sys.exit(f"unknown section(s) {unknown}; the sections are {', '.join(SECTIONS)}")
    print(f"torch {torch.__version__}, device {torch.tpu.get_device_name()}")
    for name in sys.argv[1:] or SECTIONS:
        SECTIONS[name]()
