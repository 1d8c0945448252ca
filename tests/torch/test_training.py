"""Training parity: the examples' MLP, CNN and GPT train on "tpu" in strict,
fused and compiled modes and track the CPU's loss curve from the same seed
and initial weights. Memory: a long loop does not grow."""

from __future__ import annotations

import gc
import importlib.util
import resource
import sys
from pathlib import Path

import pytest
import torch

EXAMPLES = Path(__file__).resolve().parents[2] / "bindings" / "python" / "examples"


def example(name: str):
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


# (example, steps, kwargs, tolerance on each step's loss)
CASES = {
    "mlp": (30, {}, 2e-4),
    "cnn": (12, {}, 2e-4),
    "gpt": (8, {"batch": 4, "block": 32}, 2e-3),
}
RUNS = ["DEFER_NEVER", "DEFER_AND_FUSE", "compile"]


@pytest.fixture(scope="module")
def cpu_losses():
    cache = {}

    def get(name):
        if name not in cache:
            steps, kw, _ = CASES[name]
            cache[name] = example(name).train("cpu", steps, quiet=True, **kw)
        return cache[name]

    return get


@pytest.mark.parametrize("run", RUNS)
@pytest.mark.parametrize("name", list(CASES))
def test_tracks_cpu_loss(name, run, cpu_losses):
    steps, kw, tol = CASES[name]
    want = cpu_losses(name)
    mode = "DEFER_NEVER" if run == "compile" else run
    with torch.tpu.set_eager_mode(mode):
        got = example(name).train("tpu", steps, compile=run == "compile", quiet=True, **kw)
    assert len(got) == steps
    assert got[-1] < got[0], f"{name} did not learn on tpu: {got}"
    for i, (a, b) in enumerate(zip(got, want)):
        assert abs(a - b) <= tol * max(1.0, abs(b)), f"{name} ({run}) step {i}: tpu {a} vs cpu {b}\n{got}\n{want}"


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


@pytest.mark.parametrize("mode", ["DEFER_NEVER", "DEFER_AND_FUSE"])
def test_long_loop_does_not_grow(mode):
    """1000 training steps after warm-up: host RSS and device bytes stay flat."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)).to("tpu")
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x, y = torch.randn(32, 64, device="tpu"), torch.randn(32, 8, device="tpu")

    def steps(n: int) -> tuple[float, int]:
        """n steps reading the loss every 100 (in fused mode the flush
        points decide the programs, so warm-up and measurement match);
        then the host RSS and device bytes."""
        for i in range(n):
            opt.zero_grad(set_to_none=True)
            loss = ((model(x) - y) ** 2).mean()
            loss.backward()
            opt.step()
            if i % 100 == 0:
                loss.item()
        del loss
        torch.tpu.synchronize()
        gc.collect()
        return _rss_mib(), torch.tpu.memory_allocated()

    with torch.tpu.set_eager_mode(mode):
        rss0, dev0 = steps(300)
        rss1, dev1 = steps(1000)
    assert dev1 <= dev0, f"device bytes grew from {dev0} to {dev1}"
    assert rss1 - rss0 < 32, f"host RSS grew by {rss1 - rss0:.1f} MiB over 1000 steps"


OPTIMIZERS = {
    "adamw-foreach": (torch.optim.AdamW, dict(lr=1e-2, weight_decay=0.1, foreach=True)),
    "adamw-fused": (torch.optim.AdamW, dict(lr=1e-2, weight_decay=0.1, fused=True)),
    "adam-single": (torch.optim.Adam, dict(lr=1e-2, amsgrad=True, foreach=False)),
    "adam-fused": (torch.optim.Adam, dict(lr=1e-2, amsgrad=True, fused=True)),
    "sgd-foreach": (torch.optim.SGD, dict(lr=0.1, momentum=0.9, nesterov=True, foreach=True)),
    "sgd-fused": (torch.optim.SGD, dict(lr=0.1, momentum=0.9, fused=True)),
}


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_optimizer_forms_match_cpu(name):
    """torch.optim's foreach, single-tensor and fused forms update tpu
    parameters as the CPU's single-tensor form (the specification) does."""
    cls, kwargs = OPTIMIZERS[name]
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))
    x, y = torch.randn(64, 16), torch.randn(64, 4)
    params = {}
    for device in ("cpu", "tpu"):
        model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))
        model.load_state_dict(ref.state_dict())
        model.to(device)
        kw = kwargs if device == "tpu" else {**kwargs, "foreach": False, "fused": None}
        opt = cls(model.parameters(), **kw)
        for _ in range(5):
            opt.zero_grad()
            ((model(x.to(device)) - y.to(device)) ** 2).mean().backward()
            opt.step()
        params[device] = [p.detach().cpu() for p in model.parameters()]
    for a, b in zip(params["tpu"], params["cpu"]):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_batchnorm_and_dropout_layers():
    """BatchNorm2d (training updates the running statistics, evaluation uses
    them) matches the CPU; Dropout's gradient flows exactly where it kept."""
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU())
    x = torch.randn(2, 3, 8, 8)
    out = {}
    for device in ("cpu", "tpu"):
        m = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU())
        m.load_state_dict(ref.state_dict())
        m.to(device)
        for train in (True, True, False):
            m.train(train)
            m(x.to(device)).sum().backward()
        y = m(x.to(device))
        out[device] = [y, m[1].running_mean, m[1].running_var, m[1].num_batches_tracked, m[0].weight.grad]
    for a, b in zip(out["tpu"], out["cpu"]):
        torch.testing.assert_close(a.detach().cpu(), b.detach(), rtol=1e-5, atol=1e-5)
    drop = torch.nn.Dropout(0.3)
    z = torch.ones(4000, device="tpu", requires_grad=True)
    y = drop(z)
    y.sum().backward()
    kept = (y > 0).cpu()
    assert 0.65 < kept.float().mean().item() < 0.75
    torch.testing.assert_close(z.grad.cpu(), kept.float() / 0.7)
