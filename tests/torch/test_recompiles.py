"""What compiles, and what does not (issue 21): one program cache for every
mode, and Python numbers that never recompile.

Compile counts come from `torch.tpu.compile_cache_stats()`; every result is
checked against PyTorch on CPU (or, for random ops, against what the value
must be)."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F


def _compiles() -> int:
    return torch.tpu.compile_cache_stats()["compiles"]


def _steady(body, warmup: int = 3, steps: int = 5) -> int:
    """Runs `body(i)` `warmup` times, then `steps` more times with new values
    of `i`, and returns how many programs the later steps compiled."""
    for i in range(warmup):
        body(i)
    torch.tpu.synchronize()
    before = _compiles()
    for i in range(warmup, warmup + steps):
        body(i)
    torch.tpu.synchronize()
    return _compiles() - before


# ------------------------------------------------- scalars are arguments

X = torch.linspace(-3, 3, 96).reshape(8, 12)

# (name, f(x, value)), each checked against the CPU at every step.
SCALAR_CASES = {
    "mul": lambda x, v: x * (0.5 + v),
    "add alpha": lambda x, v: torch.add(x, x, alpha=0.1 * v),
    "clamp bounds": lambda x, v: x.clamp(-1 - 0.1 * v, 1 + 0.1 * v),
    "fill value": lambda x, v: torch.full_like(x, 0.25 * v),
    "masked_fill value": lambda x, v: x.masked_fill(x > 0, 0.1 * v),
    "pow exponent": lambda x, v: x.abs().pow(1 + 0.1 * v),
    "leaky_relu slope": lambda x, v: F.leaky_relu(x, 0.01 * (v + 1)),
    "hardtanh bounds": lambda x, v: F.hardtanh(x, -1 - 0.1 * v, 1 + 0.1 * v),
    "lerp weight": lambda x, v: torch.lerp(x, 2 * x, 0.1 * v),
    "where other": lambda x, v: torch.where(x > 0, x, 0.1 * v),
}


@pytest.mark.parametrize("case", list(SCALAR_CASES))
def test_python_numbers_do_not_recompile(case, eager_mode):
    f = SCALAR_CASES[case]
    x = X.to("tpu")

    def body(i):
        torch.testing.assert_close(f(x, i).cpu(), f(X, i))

    assert _steady(body) == 0


def test_dropout_probability_does_not_recompile(eager_mode):
    x = torch.ones(64, 64, device="tpu")

    def body(i):
        p = 0.1 + 0.1 * i
        y = F.dropout(x, p).cpu()
        kept = y != 0
        # Every kept element is scaled by exactly 1 / (1 - p) (as float32).
        torch.testing.assert_close(y[kept], torch.full_like(y[kept], 1 / (1 - p)), rtol=0, atol=0)
        # 4096 draws: the kept fraction is within 5 standard deviations of 1 - p.
        sd = (p * (1 - p) / 4096) ** 0.5
        assert abs(kept.float().mean().item() - (1 - p)) < 5 * sd

    assert _steady(body) == 0
    assert (F.dropout(x, 1.0).cpu() == 0).all()
    assert torch.equal(F.dropout(x, 0.0).cpu(), torch.ones(64, 64))
    with pytest.raises(RuntimeError, match="dropout probability has to be between 0 and 1, but got 1.5"):
        torch.ops.aten.native_dropout(x, 1.5, True)


def test_bernoulli_probability_does_not_recompile(eager_mode):
    x = torch.empty(4096, device="tpu")

    def body(i):
        p = 0.2 + 0.1 * i
        mean = x.bernoulli_(p).cpu().mean().item()
        assert abs(mean - p) < 5 * (p * (1 - p) / 4096) ** 0.5

    assert _steady(body) == 0
    with pytest.raises(RuntimeError, match="bernoulli_ expects p to be in"):
        x.bernoulli_(-0.5)


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(12, 16), nn.Tanh(), nn.Linear(16, 3))


# Optimizers whose hyperparameters a scheduler changes at every step:
# OneCycleLR cycles the learning rate and the momentum (beta1 for Adam).
OPTIMIZERS = {
    "AdamW fused": lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.1, fused=True),
    "Adam fused": lambda ps: torch.optim.Adam(ps, lr=1e-2, fused=True),
    "Adam fused wd": lambda ps: torch.optim.Adam(ps, lr=1e-2, weight_decay=0.05, fused=True),
    "SGD fused": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01, fused=True),
    "AdamW": lambda ps: torch.optim.AdamW(ps, lr=1e-2),
    "SGD": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9),
}


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_one_cycle_schedule_does_not_recompile(name, eager_mode):
    steps = 8
    models = {d: _model().to(d) for d in ("cpu", "tpu")}
    opts = {d: OPTIMIZERS[name](models[d].parameters()) for d in models}
    scheds = {d: torch.optim.lr_scheduler.OneCycleLR(opts[d], max_lr=0.05, total_steps=steps + 1) for d in models}
    x = torch.randn(32, 12)
    y = torch.randn(32, 3)

    def body(_):
        for d in ("cpu", "tpu"):
            opts[d].zero_grad()
            F.mse_loss(models[d](x.to(d)), y.to(d)).backward()
            opts[d].step()
            scheds[d].step()
        for a, b in zip(models["tpu"].parameters(), models["cpu"].parameters()):
            torch.testing.assert_close(a.detach().cpu(), b.detach(), rtol=1e-5, atol=1e-6)

    assert _steady(body, warmup=3, steps=steps - 3) == 0


# ------------------------------------------ one cache for every mode

CHILD = r"""
import json, sys, time
import torch, torch.nn as nn
torch.manual_seed(0)
m = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 5))
x = torch.randn(2, 3, 8, 8)
start = time.perf_counter()
m = m.to("tpu")
opt = torch.optim.SGD(m.parameters(), lr=0.1)
for _ in range(2):
    opt.zero_grad()
    m(x.to("tpu")).square().mean().backward()
    opt.step()
loss = m(x.to("tpu")).square().mean().item()
s = torch.tpu.compile_cache_stats()
print("RESULT " + json.dumps({"loss": loss, "compiles": s["compiles"], "disk_hits": s["disk_hits"],
                              "seconds": time.perf_counter() - start}))
"""


def _cpu_loss() -> float:
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 5))
    x = torch.randn(2, 3, 8, 8)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    for _ in range(2):
        opt.zero_grad()
        m(x).square().mean().backward()
        opt.step()
    return m(x).square().mean().item()


def _child(mode: str, cache_dir) -> dict:
    env = dict(os.environ, TORCHTPU_CACHE_DIR=str(cache_dir), TORCHTPU_EAGER_MODE=mode)
    r = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    line = next(l for l in r.stdout.splitlines() if l.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


@pytest.mark.parametrize("mode", ["DEFER_NEVER", "DEFER_AND_FUSE"])
def test_a_second_process_compiles_nothing(mode, tmp_path):
    first = _child(mode, tmp_path)
    second = _child(mode, tmp_path)
    expected = _cpu_loss()
    assert first["loss"] == pytest.approx(expected, rel=1e-5)
    assert second["loss"] == pytest.approx(expected, rel=1e-5)
    assert first["compiles"] > 0 and first["disk_hits"] == 0
    assert second["compiles"] == 0 and second["disk_hits"] > 0


def test_every_mode_explains_a_recompile(eager_mode):
    # The inputs come from the host, so a fused graph is the op alone too.
    # Each mode gets shapes of its own, which no earlier mode compiled.
    cols = 7 + ["DEFER_NEVER", "DEFER_NEVER_AND_LAUNCH_BLOCKING", "DEFER_AND_FUSE"].index(eager_mode)
    torch.tanh(torch.ones(13, cols).to("tpu")).cpu()
    torch.tanh(torch.ones(17, cols).to("tpu")).cpu()
    why = torch.tpu.explain_recompiles()
    assert f"differs at node 0 (aten::tanh): input 0 shape [17, {cols}] vs [13, {cols}]" in why, why


def test_strict_mode_names_an_op_compiled_for_the_first_time():
    with torch.tpu.set_eager_mode("DEFER_NEVER"):
        torch.ops.aten.hardsigmoid(torch.ones(3, 11, 5, device="tpu")).cpu()
        why = torch.tpu.explain_recompiles()
    assert why.startswith("first program of aten::hardsigmoid") or "aten::hardsigmoid" in why, why


# ------------------------------------------------- long traces compile once

def _long_loop(x, w, h):
    for _ in range(100):  # 100 bodies of 48 ops, no host read
        for _ in range(8):
            h = torch.tanh(h @ w + x) * 0.5 + h * 0.5
    return h


def test_a_long_loop_compiles_a_handful_of_programs():
    torch.manual_seed(0)
    x, w, h = torch.randn(16, 16), torch.randn(16, 16) * 0.1, torch.randn(16, 16)
    want = _long_loop(x, w, h)
    with torch.tpu.set_eager_mode("DEFER_AND_FUSE"):
        xt, wt, ht = x.to("tpu"), w.to("tpu"), h.to("tpu")
        torch.tpu.synchronize()
        before = torch.tpu.compile_cache_stats()
        got = _long_loop(xt, wt, ht).cpu()
        after = torch.tpu.compile_cache_stats()
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    assert after["recorded_ops"] - before["recorded_ops"] >= 4000
    # The trace up to the first repeat, one run of bodies reused, the rest.
    assert after["compiles"] - before["compiles"] <= 4
    assert after["flushes"]["policy"] - before["flushes"]["policy"] >= 5


def test_a_growing_cat_compiles_once_per_bucket(eager_mode):
    """A tensor grown by torch.cat every step, whose last column is read each
    step (as generate() does with the ids): once the cat is seen growing,
    the cat and the read compile once per bucket of the length (powers of
    two), in every mode, and the values are the CPU's."""
    x, want = torch.arange(6).reshape(2, 3).to("tpu"), torch.arange(6).reshape(2, 3)
    per_step = []
    for _ in range(40):
        before = torch.tpu.compile_cache_stats()["compiles"]
        x = torch.cat([x, x[:, -1:] * 2 % 97 + 1], dim=1)
        want = torch.cat([want, want[:, -1:] * 2 % 97 + 1], dim=1)
        assert torch.equal(x.cpu(), want)
        per_step.append((torch.tpu.compile_cache_stats()["compiles"] - before, x.shape[1]))
    pow2 = lambda n: 1 << (n - 1).bit_length()  # noqa: E731
    # Steps far from a move to a new bucket (lengths 16, 32 and 64 are
    # crossed) compile nothing once the growth is learned.
    moves = [i for i in range(1, 40) if pow2(per_step[i][1]) != pow2(per_step[i - 1][1])]
    quiet = [i for i in range(12, 40) if all(abs(i - m) > 1 for m in moves)]
    assert len(quiet) >= 20, (quiet, moves)
    assert [per_step[i][0] for i in quiet] == [0] * len(quiet), per_step
    assert x.untyped_storage().nbytes() == 2 * pow2(43) * 8


def test_set_shape_buckets_sizes_the_grown_storage():
    x = torch.zeros(2, 1, dtype=torch.long, device="tpu")
    with pytest.raises(ValueError, match="must increase"):
        torch.tpu.set_shape_buckets([64, 32])
    with pytest.raises(ValueError, match="positive"):
        torch.tpu.set_shape_buckets([0])
    with pytest.raises(TypeError, match="must be an int"):
        torch.tpu.set_shape_buckets([1.5])
    torch.tpu.set_shape_buckets([48, 100])
    try:
        for i in range(1, 60):
            x = torch.cat([x, torch.full((2, 1), i, device="tpu")], dim=1)
            if i == 40:
                assert x.untyped_storage().nbytes() == 2 * 48 * 8
        assert x.untyped_storage().nbytes() == 2 * 100 * 8
        assert torch.equal(x.cpu(), torch.arange(60).expand(2, 60))
    finally:
        torch.tpu.set_shape_buckets(None)


def test_a_compiled_graph_with_a_dynamic_batch_stays_one_program():
    """torch.compile(dynamic=True) with a new batch size at every call, in a
    graph that cannot run at a bucket (a softmax over the batch): every op
    of the graph changes shape, so the shape watch leaves the graph whole
    (one fused program per size) instead of running its ops alone, which
    compiled four programs per size; the values are the CPU's."""
    torch.manual_seed(0)
    cpu = nn.Sequential(nn.Linear(12, 16), nn.GELU(), nn.LayerNorm(16), nn.Linear(16, 5))
    dev = copy.deepcopy(cpu).to("tpu")
    model = torch.compile(lambda x: torch.softmax(dev(x), 0), backend="tpu", dynamic=True)
    per_call = []
    for b in range(4, 20):
        x = torch.randn(b, 12)
        before = _compiles()
        got = model(x.to("tpu")).cpu()
        per_call.append(_compiles() - before)
        torch.testing.assert_close(got, torch.softmax(cpu(x), 0), atol=1e-5, rtol=1e-5)
    # The first three sizes show the growth; the third's ops may run alone
    # once. From then on, one program per new size.
    assert per_call[4:] == [1] * (len(per_call) - 4), per_call
    assert sum(per_call) <= len(per_call) + 4, per_call
