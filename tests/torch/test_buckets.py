"""The dynamic dims of torch.compile graphs run at shape buckets (issue 21,
item 3; bindings/python/torchtpu/_buckets.py).

A graph that is row-wise along a dynamic dim (a batch) is padded to the
dim's bucket, so every size of a bucket reuses one program; a graph that
mixes the rows of that dim compiles each size, as before. Every result is
checked against PyTorch on CPU."""

from __future__ import annotations

import copy
import logging

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F


def _compiles() -> int:
    return torch.tpu.compile_cache_stats()["compiles"]


def _source() -> str | None:
    """Where the last fused program came from: "memory" (reused) or
    "compiled"."""
    return torch.tpu._runtime().last_flush()["source"]


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(12, 16), nn.GELU(), nn.LayerNorm(16), nn.Linear(16, 5))


def test_a_dynamic_batch_compiles_the_graph_once_per_bucket():
    cpu = _mlp().eval()
    model = torch.compile(copy.deepcopy(cpu).to("tpu"), backend="tpu", dynamic=True)
    with torch.no_grad():
        for b in [16, 9, 10, 11, 12, 13, 14, 15, 3, 4]:
            x = torch.randn(b, 12)
            before = _compiles()
            got = model(x.to("tpu"))
            compiled, source = _compiles() - before, _source()
            assert got.shape == (b, 5) and got.is_contiguous()
            torch.testing.assert_close(got.view(-1).cpu(), cpu(x).view(-1), atol=1e-5, rtol=1e-5)
            if 9 <= b <= 15:
                # The graph at 16 is reused; what compiles is the pad of x.
                assert source == "memory", (b, source)
                assert compiled <= 1, (b, compiled)
        # 3 and 4 share the bucket 4.
        assert _source() == "memory"


def test_set_shape_buckets_sets_the_batch_buckets():
    cpu = _mlp().eval()
    model = torch.compile(copy.deepcopy(cpu).to("tpu"), backend="tpu", dynamic=True)
    rt = torch.tpu._runtime()
    assert [rt.shape_bucket(n) for n in (1, 5, 8, 9, 100)] == [1, 8, 8, 16, 128]
    with pytest.raises(ValueError, match="positive"):
        rt.shape_bucket(0)
    with pytest.raises(TypeError, match="must be an int"):
        rt.shape_bucket(2.5)
    torch.tpu.set_shape_buckets([12, 24])
    try:
        assert [rt.shape_bucket(n) for n in (5, 12, 13, 25)] == [12, 12, 24, 32]
        with torch.no_grad():
            sources = []
            for b in [12, 5, 9, 11, 13, 20]:
                x = torch.randn(b, 12)
                got = model(x.to("tpu"))
                sources.append(_source())
                torch.testing.assert_close(got.cpu(), cpu(x), atol=1e-5, rtol=1e-5)
        assert sources == ["compiled", "memory", "memory", "memory", "compiled", "memory"], sources
    finally:
        torch.tpu.set_shape_buckets(None)


def _bert():
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=64)
    return BertModel(cfg).eval()


class _Lookup(nn.Module):
    """Advanced indexing into a table with the input's indices."""

    def __init__(self):
        super().__init__()
        self.table = nn.Parameter(torch.randn(20, 4))

    def forward(self, ids):
        return self.table[ids].sum(-1) * 2


MODELS = {
    # (model, input of batch b, output of the model)
    "bert": (_bert, lambda b: torch.randint(1, 100, (b, 10)), lambda m, x: m(input_ids=x).last_hidden_state),
    "conv": (lambda: nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                                   nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4)).eval(),
             lambda b: torch.randn(b, 3, 8, 8), lambda m, x: m(x)),
    "group norm": (lambda: nn.Sequential(nn.Conv2d(3, 4, 3), nn.GroupNorm(2, 4), nn.Flatten(), nn.Linear(144, 3)),
                   lambda b: torch.randn(b, 3, 8, 8), lambda m, x: m(x)),
    "pooling": (lambda: nn.Sequential(nn.Conv2d(3, 4, 3), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(36, 3)),
                lambda b: torch.randn(b, 3, 8, 8), lambda m, x: m(x)),
    "indexing": (_Lookup, lambda b: torch.randint(0, 20, (b, 6)), lambda m, x: m(x)),
    "embedding": (lambda: nn.Sequential(nn.Embedding(50, 8), nn.Flatten(), nn.Linear(48, 3)),
                  lambda b: torch.randint(0, 50, (b, 6)), lambda m, x: m(x)),
}


@pytest.mark.parametrize("name", list(MODELS))
def test_models_with_a_dynamic_batch_match_the_cpu_and_share_a_program(name):
    make, data, forward = MODELS[name]
    torch.manual_seed(0)
    cpu = make()
    model = torch.compile(copy.deepcopy(cpu).to("tpu"), backend="tpu", dynamic=True)
    with torch.no_grad():
        for b in [8, 5, 7, 6]:
            x = data(b)
            got = forward(model, x.to("tpu"))
            if b != 8:
                assert _source() == "memory", (b, _source())
            torch.testing.assert_close(got.cpu(), forward(cpu, x), atol=2e-5, rtol=2e-5)


# Graphs that mix the rows of the batch: each compiles every size, and the
# log names what keeps it exact.
MIXING = {
    "sum over the batch": (lambda x: x.sum(0) * 2, "sum"),
    "softmax over the batch": (lambda x: torch.softmax(x, 0) + 1, "softmax"),
    "the size as a number": (lambda x: x * x.shape[0], "uses the size as a number"),
    "cat along the batch": (lambda x: torch.cat([x, x * 2], 0) + 1, "cat"),
    "a slice of the batch": (lambda x: x[:-1] * 3, "a dim of size"),
    "a product over the batch": (lambda x: x.t() @ x, "mm"),
    "the mean of all": (lambda x: x.mean() + x, "mean"),
    "a cumulative sum": (lambda x: x.cumsum(0) + 1, "cumsum"),
    "the last row": (lambda x: x[-1] + 1, "select"),
}


@pytest.mark.parametrize("case", list(MIXING))
def test_a_graph_that_mixes_rows_compiles_each_size(case, caplog):
    f, named = MIXING[case]
    compiled = torch.compile(f, backend="tpu", dynamic=True)
    with caplog.at_level(logging.INFO, logger="torchtpu.buckets"):
        for b in [8, 5, 7]:
            x = torch.randn(b, 6)
            got = compiled(x.to("tpu"))
            torch.testing.assert_close(got.cpu(), f(x), atol=1e-5, rtol=1e-5)
            assert _source() == "compiled", (b, _source())
    said = [r.getMessage() for r in caplog.records if r.name == "torchtpu.buckets"]
    assert any("compiles for each size" in m and named in m for m in said), said


def test_batch_norm_in_training_mode_is_not_padded():
    torch.manual_seed(0)
    cpu = nn.Sequential(nn.Linear(6, 4), nn.BatchNorm1d(4))
    dev = copy.deepcopy(cpu).to("tpu")
    model = torch.compile(dev, backend="tpu", dynamic=True)
    for b in [8, 5, 7]:
        x = torch.randn(b, 6)
        torch.testing.assert_close(model(x.to("tpu")).detach().cpu(), cpu(x).detach(), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(dev[1].running_mean.cpu(), cpu[1].running_mean, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(dev[1].running_var.cpu(), cpu[1].running_var, atol=1e-6, rtol=1e-5)


def test_training_with_a_dynamic_batch_matches_the_cpu():
    """The forward runs at the bucket and the backward at the exact size:
    the gradients, which sum over the batch, are the CPU's."""
    cpu = _mlp()
    dev = copy.deepcopy(cpu).to("tpu")
    model = torch.compile(dev, backend="tpu", dynamic=True)
    for b in [8, 5, 7, 6]:
        x, y = torch.randn(b, 12), torch.randn(b, 5)
        cpu.zero_grad()
        dev.zero_grad()
        F.mse_loss(cpu(x), y).backward()
        loss = F.mse_loss(model(x.to("tpu")), y.to("tpu"))
        loss.backward()
        for p, q in zip(cpu.parameters(), dev.parameters()):
            torch.testing.assert_close(q.grad.cpu(), p.grad, atol=1e-6, rtol=1e-5)


def test_a_value_made_from_the_size_is_not_padded(caplog):
    """A size used as a value, not as a size (a fill value, the start of a
    range), keeps the graph exact: at the bucket it would be another
    number."""
    cases = [lambda x: x + torch.full((x.shape[0], 1), x.shape[0], device=x.device),
             lambda x: x + torch.arange(x.shape[0], 2 * x.shape[0], device=x.device).unsqueeze(1),
             lambda x: x + torch.arange(x.shape[0], device=x.device).unsqueeze(1)]
    for i, f in enumerate(cases):
        torch._dynamo.reset()
        compiled = torch.compile(f, backend="tpu", dynamic=True)
        for b in [8, 5, 7]:
            x = torch.randn(b, 3)
            torch.testing.assert_close(compiled(x.to("tpu")).cpu(), f(x), atol=1e-5, rtol=1e-5)
            if i < 2:
                assert _source() == "compiled", (i, b)
    # The range's end is a size: its values are positions, the same at the
    # bucket, so that graph shares a program.
    assert _source() == "memory"


def test_compile_buckets_off_runs_every_size_exactly(monkeypatch):
    monkeypatch.setenv("TORCHTPU_COMPILE_BUCKETS", "0")
    cpu = _mlp().eval()
    model = torch.compile(copy.deepcopy(cpu).to("tpu"), backend="tpu", dynamic=True)
    with torch.no_grad():
        for b in [8, 5, 7]:
            x = torch.randn(b, 12)
            got = model(x.to("tpu"))
            assert _source() == "compiled", b
            assert got.untyped_storage().nbytes() == b * 5 * 4  # not a padded result
            torch.testing.assert_close(got.cpu(), cpu(x), atol=1e-5, rtol=1e-5)


def test_an_embedding_of_computed_indices_is_not_padded():
    """ids - 1 is a valid index for every real row, but not for a padded
    one (0 - 1): the graph keeps exact sizes, and no index error appears."""
    torch.manual_seed(0)
    cpu = nn.Embedding(20, 4)
    dev = copy.deepcopy(cpu).to("tpu")
    f = torch.compile(lambda ids: dev(ids - 1), backend="tpu", dynamic=True)
    for b in [8, 5, 7]:
        ids = torch.randint(1, 20, (b, 3))
        with torch.no_grad():
            got = f(ids.to("tpu")).cpu()
        torch.testing.assert_close(got, cpu(ids - 1).detach())
        assert _source() == "compiled", b
    torch.tpu.synchronize()
