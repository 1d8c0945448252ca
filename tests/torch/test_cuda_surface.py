"""What CUDA scripts take for granted, on tpu: module conversion keeps
Parameter identity and ties, torch.Generator(device="tpu"), the default
stream, pinned host memory, device index errors."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn


class TiedLM(nn.Module):
    """An embedding shared with the output projection (GPT-2, T5, Llama)."""

    def __init__(self, vocab: int = 11, dim: int = 6):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.mid = nn.Linear(dim, dim)
        self.out = nn.Linear(dim, vocab, bias=False)
        self.out.weight = self.emb.weight

    def forward(self, x):
        return self.out(torch.tanh(self.mid(self.emb(x))))


def test_to_tpu_keeps_parameter_identity_and_ties(eager_mode):
    torch.manual_seed(0)
    model = TiedLM()
    ref = TiedLM()
    ref.load_state_dict(model.state_dict())
    before = [id(p) for p in model.parameters()]
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.5)

    model.to("tpu")
    assert [id(p) for p in model.parameters()] == before
    assert model.out.weight is model.emb.weight
    assert all(p.device.type == "tpu" for p in model.parameters())
    assert all(isinstance(p, nn.Parameter) for p in model.parameters())

    x = torch.tensor([[1, 4, 9], [0, 10, 3]])
    for _ in range(2):
        opt.zero_grad()
        ref_opt.zero_grad()
        nn.functional.cross_entropy(model(x.to("tpu")).flatten(0, 1), x.flatten().to("tpu")).backward()
        nn.functional.cross_entropy(ref(x).flatten(0, 1), x.flatten()).backward()
        # The shared weight's gradient sums both uses, as on the CPU.
        torch.testing.assert_close(model.emb.weight.grad.cpu(), ref.emb.weight.grad, rtol=1e-5, atol=1e-6)
        opt.step()
        ref_opt.step()
    # The optimizer built before the move updated the model's parameters.
    torch.testing.assert_close(model.emb.weight.detach().cpu(), ref.emb.weight.detach(), rtol=1e-5, atol=1e-6)


def test_every_conversion_keeps_identity():
    model = TiedLM()
    params = list(model.parameters())
    for convert in (lambda m: m.tpu(), lambda m: m.to(torch.float64), lambda m: m.to("tpu:1"),
                    lambda m: m.to("cpu"), lambda m: m.to("tpu", torch.float32), lambda m: m.cpu()):
        assert convert(model) is model
        assert list(model.parameters()) == params
        assert all(a is b for a, b in zip(model.parameters(), params))
        assert model.out.weight is model.emb.weight
    assert model.emb.weight.device.type == "cpu" and model.emb.weight.dtype == torch.float32


def test_grads_move_with_their_parameters():
    model = TiedLM()
    model(torch.tensor([1, 2])).sum().backward()
    grad = model.emb.weight.grad.clone()
    model.to("tpu")
    assert model.emb.weight.grad.device.type == "tpu"
    torch.testing.assert_close(model.emb.weight.grad.cpu(), grad)


def test_tpu_and_cpu_tensors_are_shallow_copy_compatible():
    cpu, tpu = torch.zeros(2), torch.zeros(2, device="tpu")
    assert torch._has_compatible_shallow_copy_type(cpu, tpu)
    assert torch._has_compatible_shallow_copy_type(tpu, cpu)
    assert torch._has_compatible_shallow_copy_type(tpu, tpu)
    assert not torch._has_compatible_shallow_copy_type(tpu, torch.zeros(2).to_sparse())
    p = nn.Parameter(torch.arange(3.0))
    p.data = p.data.to("tpu")
    assert p.device.type == "tpu" and torch.equal(p.detach().cpu(), torch.arange(3.0))


# ---------------------------------------------------------------- generators

RANDOM_OPS = {
    "rand": lambda g: torch.rand(64, device="tpu", generator=g),
    "randn": lambda g: torch.randn(4, 16, device="tpu", generator=g),
    "randint": lambda g: torch.randint(3, 17, (64,), device="tpu", generator=g),
    "randperm": lambda g: torch.randperm(33, device="tpu", generator=g),
    "rand_like": lambda g: torch.rand_like(torch.empty(64, device="tpu"), generator=g),
    "randn_like": lambda g: torch.randn_like(torch.empty(64, device="tpu"), generator=g),
    "uniform_": lambda g: torch.empty(64, device="tpu").uniform_(-2, 3, generator=g),
    "normal_": lambda g: torch.empty(64, device="tpu").normal_(1.0, 2.0, generator=g),
    "bernoulli": lambda g: torch.bernoulli(torch.full((64,), 0.3, device="tpu"), generator=g),
    "bernoulli_": lambda g: torch.empty(64, device="tpu").bernoulli_(0.7, generator=g),
}


@pytest.mark.parametrize("op", sorted(RANDOM_OPS))
def test_generator_argument_of_random_ops(op, eager_mode):
    draw = RANDOM_OPS[op]
    g = torch.Generator(device="tpu")
    assert g.device == torch.device("tpu", 0)
    g.manual_seed(1234)
    default_before = torch.tpu.get_rng_state()
    a = draw(g).cpu()
    b = draw(g).cpu()
    # Drawing from g leaves the device's default generator alone.
    assert torch.equal(torch.tpu.get_rng_state(), default_before)
    g2 = torch.Generator(device="tpu").manual_seed(1234)
    assert torch.equal(draw(g2).cpu(), a) and torch.equal(draw(g2).cpu(), b)
    assert not torch.equal(a, b)
    g.manual_seed(1234)
    assert torch.equal(draw(g).cpu(), a)


def test_generator_state_offset_and_clone():
    g = torch.Generator(device="tpu").manual_seed(7)
    assert g.initial_seed() == 7
    state = g.get_state()
    assert state.dtype == torch.uint8 and state.device.type == "cpu"
    first = torch.rand(8, device="tpu", generator=g).cpu()
    second = torch.rand(8, device="tpu", generator=g).cpu()
    assert g.get_offset() == 2  # draws since seeding
    g.set_state(state)
    assert torch.equal(torch.rand(8, device="tpu", generator=g).cpu(), first)
    g.set_offset(1)
    assert torch.equal(torch.rand(8, device="tpu", generator=g).cpu(), second)
    g.set_offset(1)
    c = g.clone_state()
    assert torch.equal(torch.rand(8, device="tpu", generator=c).cpu(), second)
    assert g.get_offset() == 1  # the clone is independent
    s = g.seed()
    assert g.initial_seed() == s
    with pytest.raises(RuntimeError, match="tpu generator state is a contiguous CPU uint8 tensor"):
        g.set_state(torch.zeros(3, dtype=torch.uint8))


def test_default_generators_share_the_devices_state():
    gens = torch.tpu.default_generators
    assert len(gens) == torch.tpu.device_count() and gens[1].device == torch.device("tpu", 1)
    torch.manual_seed(99)
    assert gens[0].initial_seed() == 99 and gens[1].initial_seed() == 99
    assert torch.equal(gens[0].get_state(), torch.tpu.get_rng_state(0))
    a = torch.rand(5, device="tpu").cpu()
    gens[0].manual_seed(99)
    assert torch.equal(torch.rand(5, device="tpu").cpu(), a)
    # Drawing through the default generator's handle advances the device's
    # default: the next op without generator= continues after it.
    b = torch.rand(5, device="tpu").cpu()
    gens[0].manual_seed(99)
    assert torch.equal(torch.rand(5, device="tpu", generator=gens[0]).cpu(), a)
    assert torch.equal(torch.rand(5, device="tpu").cpu(), b)


def test_generator_of_another_device_is_refused():
    with pytest.raises(RuntimeError, match=r"aten::randn.generator: expected a generator of a tpu device, got one of cpu"):
        torch.randn(3, device="tpu", generator=torch.Generator().manual_seed(0))
    with pytest.raises(RuntimeError, match="invalid tpu device index 9 for a generator"):
        torch.Generator(device="tpu:9")


# ------------------------------------------------- streams, pinned, devices


def test_default_stream():
    s = torch.tpu.default_stream()
    assert isinstance(s, torch.tpu.Stream) and s.stream_id == 0 and s.device == torch.device("tpu", 0)
    assert s == torch.tpu.current_stream()
    assert torch.tpu.default_stream(1).device == torch.device("tpu", 1)
    other = torch.tpu.Stream()
    with torch.tpu.stream(other):
        assert torch.tpu.default_stream() != torch.tpu.current_stream()


def test_pinned_host_memory():
    x = torch.randn(100)
    assert not x.is_pinned()
    p = x.pin_memory()
    assert p.is_pinned() and p.device.type == "cpu" and torch.equal(p, x)
    assert p[10:].is_pinned()  # a view into the block
    e = torch.empty(5, pin_memory=True)
    assert e.is_pinned()
    torch.testing.assert_close(p.to("tpu", non_blocking=True).cpu(), x)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.arange(8.0)), batch_size=4,
                                         pin_memory=True)
    batches = list(loader)
    assert all(b[0].is_pinned() for b in batches)
    assert torch.equal(torch.cat([b[0] for b in batches]), torch.arange(8.0))


def test_invalid_device_index_names_the_valid_range():
    n = torch.tpu.device_count()
    with pytest.raises(IndexError, match=rf"has {n} device\(s\) \(valid: 0 to {n - 1}\)"):
        torch.zeros(2, device=f"tpu:{n}")
    with pytest.raises(RuntimeError, match=f"invalid tpu device index {n}: {n} tpu devices are available"):
        torch.tpu.set_device(n)
