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

Run: .venv/bin/python bindings/python/benchmarks/bench_recompiles.py [section ...]
(sections: adamw, second_process, long_traces, decode; all by default)
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


def decode(model, device: str, cache: str, mode: str | None) -> tuple[float, tuple[int, float], torch.Tensor]:
    """ms per token of a warm 64-token greedy decode, the programs compiled
    by the first (cold) decode and their compile seconds, and the tokens."""
    prompt = torch.randint(1, 512, (1, 16), generator=torch.Generator().manual_seed(0)).to(device)
    kw = dict(max_new_tokens=TOKENS, min_new_tokens=TOKENS, do_sample=False, pad_token_id=0)
    if cache == "static":
        kw["cache_implementation"] = "static"
    ctx = torch.tpu.set_eager_mode(mode) if mode else _nullcontext()
    with ctx, torch.no_grad():
        before = torch.tpu.compile_cache_stats() if mode else None
        out = model.generate(prompt, **kw).cpu()
        if mode:
            after = torch.tpu.compile_cache_stats()
            cold = (after["compiles"] - before["compiles"], after["compile_seconds"] - before["compile_seconds"])
        else:
            cold = (0, 0.0)
        times = []
        for _ in range(2):
            t = time.perf_counter()
            model.generate(prompt, **kw).cpu()
            times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3 / TOKENS, cold, out


class _nullcontext:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def bench_decode() -> None:
    """Strict, fused and torch.compile (the forward compiled, generate()'s
    own ops in strict mode) against the CPU. The cold columns count what
    the first generate() compiled: 16 prompt tokens, then 64 steps."""
    print(f"\n== decode: GPT-2 (2 layers, d=128), {TOKENS} greedy tokens after a 16-token prompt")
    print(f"{'cache':8s} {'mode':16s} {'ms/token':>9s} {'vs CPU':>8s} {'compiles (cold)':>16s} "
          f"{'compile s (cold)':>17s} {'tokens = CPU':>13s}")
    cpu_model = gpt2()
    tpu_model = gpt2().to("tpu")
    for cache in ("dynamic", "static"):
        cpu_ms, _, want = decode(cpu_model, "cpu", cache, None)
        print(f"{cache:8s} {'CPU eager':16s} {cpu_ms:9.2f} {'1.00x':>8s} {'-':>16s} {'-':>17s} {'-':>13s}")
        rows = [(mode, tpu_model, mode) for mode in MODES]
        compiled = gpt2().to("tpu")
        compiled.forward = torch.compile(compiled.forward, backend="tpu")
        rows.append(("torch.compile", compiled, "DEFER_NEVER"))
        for name, model, mode in rows:
            ms, (n, secs), got = decode(model, "tpu", cache, mode)
            print(f"{cache:8s} {name:16s} {ms:9.2f} {ms / cpu_ms:7.2f}x {n:16d} {secs:17.2f} "
                  f"{str(torch.equal(got, want)):>13s}")
        # Fused mode as it was before the shape watch: every op recorded, so
        # a step whose few ops change shape compiles whole (another process,
        # since the setting is read when the runtime starts).
        env = dict(os.environ, TORCHTPU_SHAPE_WATCH="0")
        child = subprocess.run([sys.executable, __file__, "--fused-decode", cache], env=env, capture_output=True,
                               text=True, check=True)
        r = json.loads(child.stdout.strip().splitlines()[-1])
        equal = r["tokens"] == want.tolist()
        print(f"{cache:8s} {'fused, watch off':16s} {r['ms']:9.2f} {r['ms'] / cpu_ms:7.2f}x {r['compiles']:16d} "
              f"{r['compile_s']:17.2f} {str(equal):>13s}")


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
            "decode": bench_decode}

def fused_decode_child(cache: str) -> None:
    """One fused-mode decode row, printed as JSON (see bench_decode)."""
    ms, (n, secs), got = decode(gpt2().to("tpu"), "tpu", cache, "DEFER_AND_FUSE")
    print(json.dumps({"ms": ms, "compiles": n, "compile_s": secs, "tokens": got.tolist()}))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--fused-decode"]:
        fused_decode_child(sys.argv[2])
        sys.exit(0)
    unknown = [a for a in sys.argv[1:] if a not in SECTIONS]
    if unknown:
        sys.exit(f"unknown section(s) {unknown}; the sections are {', '.join(SECTIONS)}")
    print(f"torch {torch.__version__}, device {torch.tpu.get_device_name()}")
    for name in sys.argv[1:] or SECTIONS:
        SECTIONS[name]()
