"""tpu tensors leaving the process and coming back: pickle, torch.save /
torch.load (zipfile and legacy formats), copy.deepcopy, torch.multiprocessing
(a spawned worker), and the factories whose ``device`` argument names another
device than their tensor's (``zeros_like(t, device="cpu")``, ``new_zeros``).
Every value is compared with the CPU tensor it came from, or with PyTorch on
CPU."""

from __future__ import annotations

import copy
import io
import pickle

import pytest
import torch
import torch.multiprocessing as mp
import torch.nn as nn

DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.int64, torch.int32, torch.int8,
          torch.uint8, torch.bool]


def sample(dtype: torch.dtype, shape=(3, 4)) -> torch.Tensor:
    """Distinct values of `dtype`, negative ones where it has them."""
    n = 1
    for s in shape:
        n *= s
    v = torch.arange(n, dtype=torch.float64).reshape(shape)
    if dtype == torch.bool:
        return v.remainder(3) == 1
    if dtype == torch.uint8:
        return v.to(dtype)
    return (v * 1.5 - 4).to(dtype)


def saved(obj, legacy: bool) -> io.BytesIO:
    buf = io.BytesIO()
    torch.save(obj, buf, _use_new_zipfile_serialization=not legacy)
    buf.seek(0)
    return buf


# ------------------------------------------------------------------- pickle


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_pickle_round_trip_keeps_values_and_dtype(dtype):
    ref = sample(dtype)
    back = pickle.loads(pickle.dumps(ref.to("tpu")))
    assert back.device == torch.device("tpu", 0) and back.dtype == dtype and back.shape == ref.shape
    assert torch.equal(back.cpu(), ref)


def test_pickle_of_computed_views(eager_mode):
    # A value still pending in fused mode, read as bytes by pickle.
    ref = sample(torch.float32, (4, 6)) * 2 + 1
    x = sample(torch.float32, (4, 6)).to("tpu") * 2 + 1
    view = x[1:, ::2].t()  # offset, strided, transposed
    back = pickle.loads(pickle.dumps(view))
    assert back.stride() == view.stride() and back.storage_offset() == view.storage_offset()
    assert torch.equal(back.cpu(), ref[1:, ::2].t())
    # The original is intact and usable after its storage was read as bytes.
    x.add_(1)
    assert torch.equal(x.cpu(), ref + 1)
    # Other devices than tpu:0.
    on1 = sample(torch.int64).to("tpu:1")
    back1 = pickle.loads(pickle.dumps(on1))
    assert back1.device == torch.device("tpu", 1) and torch.equal(back1.cpu(), sample(torch.int64))


def test_pickle_keeps_requires_grad_and_parameters():
    w = torch.randn(3, 2)
    p = nn.Parameter(w.to("tpu"))
    back = pickle.loads(pickle.dumps(p))
    assert type(back) is nn.Parameter and back.requires_grad and back.device.type == "tpu"
    assert torch.equal(back.detach().cpu(), w)
    frozen = nn.Parameter(w.to("tpu"), requires_grad=False)
    assert not pickle.loads(pickle.dumps(frozen)).requires_grad
    leaf = w.to("tpu").requires_grad_()
    back = pickle.loads(pickle.dumps(leaf))
    assert type(back) is torch.Tensor and back.requires_grad and back.is_leaf
    # The rebuilt parameter trains: its gradient is the CPU one.
    (back * back).sum().backward()
    torch.testing.assert_close(back.grad.cpu(), 2 * w)


# --------------------------------------------------------- torch.save / load


@pytest.mark.parametrize("legacy", [False, True], ids=["zipfile", "legacy"])
def test_save_and_load(legacy):
    ref = sample(torch.float32, (3, 4))
    base = ref.to("tpu")
    view = base[1:, 1::2]
    other = sample(torch.bfloat16, (5,)).to("tpu:1")
    flags = sample(torch.bool, (2, 2)).to("tpu")
    buf = saved({"base": base, "view": view, "other": other, "flags": flags}, legacy)
    got = torch.load(buf)
    assert got["base"].device == torch.device("tpu", 0) and got["other"].device == torch.device("tpu", 1)
    assert torch.equal(got["base"].cpu(), ref)
    assert torch.equal(got["view"].cpu(), ref[1:, 1::2]) and got["view"].stride() == view.stride()
    assert got["other"].dtype == torch.bfloat16 and torch.equal(got["other"].cpu(), sample(torch.bfloat16, (5,)))
    assert torch.equal(got["flags"].cpu(), sample(torch.bool, (2, 2)))
    # A view and its base saved together share one storage again.
    got["base"][1, 1] = -100.0
    assert got["view"][0, 0].item() == -100.0
    buf.seek(0)
    on_cpu = torch.load(buf, map_location="cpu")
    assert all(t.device.type == "cpu" for t in on_cpu.values())
    assert torch.equal(on_cpu["view"], ref[1:, 1::2])
    assert torch.equal(on_cpu["other"], sample(torch.bfloat16, (5,)))
    buf.seek(0)
    moved = torch.load(buf, map_location="tpu:1")
    assert moved["base"].device == torch.device("tpu", 1) and torch.equal(moved["base"].cpu(), ref)


def mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 3))


@pytest.mark.parametrize("legacy", [False, True], ids=["zipfile", "legacy"])
def test_state_dict_round_trip(legacy, tmp_path):
    torch.manual_seed(0)
    cpu_model = mlp()
    x = torch.randn(5, 4)
    cpu_model.train()
    cpu_model(x)  # moves the BatchNorm statistics away from their initial values
    cpu_model.eval()
    ref = cpu_model(x)

    path = tmp_path / "m.pt"
    torch.save(copy.deepcopy(cpu_model).to("tpu").state_dict(), path, _use_new_zipfile_serialization=not legacy)
    state = torch.load(path)
    assert all(v.device.type == "tpu" for v in state.values())
    model = mlp().to("tpu").eval()
    model.load_state_dict(state)
    torch.testing.assert_close(model(x.to("tpu")).detach().cpu(), ref.detach(), rtol=1e-5, atol=1e-5)
    # The same file loads onto a CPU model.
    back = mlp().eval()
    back.load_state_dict(torch.load(path, map_location="cpu"))
    torch.testing.assert_close(back(x).detach(), ref.detach())


# ----------------------------------------------------------------- deepcopy


def test_deepcopy_of_a_tensor_is_independent(eager_mode):
    ref = sample(torch.float32)
    x = ref.to("tpu")
    view = x[1:]
    y, w = copy.deepcopy((x, view))
    assert y.device == x.device and torch.equal(y.cpu(), ref) and torch.equal(w.cpu(), ref[1:])
    assert y.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()
    y.mul_(-1)
    assert torch.equal(x.cpu(), ref)  # the original is untouched
    assert torch.equal(w.cpu(), -ref[1:])  # the copied view shares the copied storage


def test_deepcopy_of_a_module_is_independent():
    torch.manual_seed(0)
    cpu_model = mlp().eval()
    x = torch.randn(5, 4)
    model = copy.deepcopy(cpu_model).to("tpu")
    twin = copy.deepcopy(model)
    for (n, a), (_, b) in zip(model.named_parameters(), twin.named_parameters()):
        assert type(b) is nn.Parameter and b.device.type == "tpu", n
        assert a.untyped_storage().data_ptr() != b.untyped_storage().data_ptr(), n
    torch.testing.assert_close(twin(x.to("tpu")).detach().cpu(), cpu_model(x).detach(), rtol=1e-5, atol=1e-5)
    with torch.no_grad():
        for p in twin.parameters():
            p.zero_()
    torch.testing.assert_close(model(x.to("tpu")).detach().cpu(), cpu_model(x).detach(), rtol=1e-5, atol=1e-5)


# ------------------------------------------------------- torch.multiprocessing


def worker(arg: torch.Tensor, inbox, outbox, done) -> None:
    """Runs in a spawned process, with its own runtime: receives tpu tensors
    (a Process argument and a queue message) and sends back a tpu result."""
    try:
        got = inbox.get(timeout=120)
        assert arg.device.type == "tpu" and got.device.type == "tpu", (arg.device, got.device)
        outbox.put(((arg * 2 + got.sum()).detach(), type(got).__name__, got.requires_grad))
    except BaseException as e:  # noqa: BLE001 (the parent reports it)
        outbox.put(repr(e))
    done.wait(120)  # keeps the sent CPU memory alive until the parent has it


def test_multiprocessing_spawn_worker():
    ctx = mp.get_context("spawn")
    inbox, outbox, done = ctx.Queue(), ctx.Queue(), ctx.Event()
    arg_ref = sample(torch.float32, (3, 4))
    msg_ref = sample(torch.float32, (2,)) + 10
    arg = arg_ref.t().to("tpu").t()  # a view with strides of its own
    proc = ctx.Process(target=worker, args=(arg, inbox, outbox, done))
    proc.start()
    try:
        inbox.put(nn.Parameter(msg_ref.to("tpu")))
        result = outbox.get(timeout=180)
        assert not isinstance(result, str), f"the worker failed: {result}"
        value, kind, requires_grad = result
        assert value.device == torch.device("tpu", 0)
        assert torch.equal(value.cpu(), arg_ref * 2 + msg_ref.sum())
        assert kind == "Parameter" and requires_grad
    finally:
        done.set()
        proc.join(60)
        if proc.is_alive():
            proc.kill()
    assert proc.exitcode == 0


def test_multiprocessing_refuses_non_leaf_tensors_like_cpu():
    from multiprocessing.reduction import ForkingPickler

    x = torch.ones(2, device="tpu", requires_grad=True) * 2
    with pytest.raises(RuntimeError, match="non-leaf tensor which requires_grad"):
        ForkingPickler.dumps(x)
    # CPU tensors still go through PyTorch's own (shared-memory) reducer.
    assert torch.equal(pickle.loads(ForkingPickler.dumps(torch.arange(3))), torch.arange(3))


def test_multiprocessing_reducers_send_values():
    from multiprocessing.reduction import ForkingPickler

    ref = sample(torch.bfloat16, (4, 5))
    t = ref.to("tpu:1")
    back = pickle.loads(ForkingPickler.dumps(t[1:, ::2]))
    assert back.device == torch.device("tpu", 1) and torch.equal(back.cpu(), ref[1:, ::2])
    back.zero_()  # a copy, not shared memory
    assert torch.equal(t.cpu(), ref)
    storage = pickle.loads(ForkingPickler.dumps(t.untyped_storage()))
    assert isinstance(storage, torch.UntypedStorage) and storage.device == torch.device("tpu", 1)
    view = torch.tensor([], dtype=torch.bfloat16, device="tpu:1").set_(storage, 0, (4, 5), (5, 1))
    assert torch.equal(view.cpu(), ref)


# ------------------------------------------- factories naming another device

LIKE = {
    "zeros_like": lambda t, **kw: torch.zeros_like(t, **kw),
    "ones_like": lambda t, **kw: torch.ones_like(t, **kw),
    "full_like": lambda t, **kw: torch.full_like(t, 2.5, **kw),
    "new_zeros": lambda t, **kw: t.new_zeros((2, 5), **kw),
    "new_ones": lambda t, **kw: t.new_ones((2, 5), **kw),
    "new_full": lambda t, **kw: t.new_full((2, 5), -3.0, **kw),
    "new_tensor": lambda t, **kw: t.new_tensor([[1.5, -2.0], [0.0, 4.0]], **kw),
}


@pytest.mark.parametrize("name", sorted(LIKE))
def test_value_factories_on_another_device(name, eager_mode):
    f = LIKE[name]
    src = sample(torch.float32, (3, 4)).t()  # transposed: *_like keeps its strides
    t = src.to("tpu")
    for kw in ({}, {"dtype": torch.int64}):
        ref = f(src, **kw)
        on_cpu = f(t, device="cpu", **kw)
        assert on_cpu.device.type == "cpu" and on_cpu.dtype == ref.dtype and on_cpu.stride() == ref.stride()
        assert torch.equal(on_cpu, ref)
        on_tpu = f(t, **kw)  # no device argument: the tensor's device
        assert on_tpu.device == t.device and torch.equal(on_tpu.cpu(), ref)
        from_cpu = f(src, device="tpu", **kw)  # the other way round
        assert from_cpu.device.type == "tpu" and from_cpu.dtype == ref.dtype and torch.equal(from_cpu.cpu(), ref)
        on_meta = f(t, device="meta", **kw)
        assert on_meta.is_meta and on_meta.shape == ref.shape and on_meta.dtype == ref.dtype


EMPTY = {
    "empty_like": lambda t, **kw: torch.empty_like(t, **kw),
    "new_empty": lambda t, **kw: t.new_empty((2, 5), **kw),
    "new_empty_strided": lambda t, **kw: t.new_empty_strided((2, 5), (1, 2), **kw),
}


@pytest.mark.parametrize("name", sorted(EMPTY))
def test_empty_factories_on_another_device(name):
    f = EMPTY[name]
    src = sample(torch.bfloat16, (3, 4)).t()
    t = src.to("tpu")
    ref = f(src)
    for device in ("cpu", "meta"):
        out = f(t, device=device)
        assert out.device.type == device and out.shape == ref.shape and out.dtype == ref.dtype
        assert out.stride() == ref.stride()
    out = f(src, device="tpu")
    assert out.device.type == "tpu" and out.shape == ref.shape and out.dtype == ref.dtype


def test_random_factories_on_another_device():
    t = torch.zeros(64, 32, device="tpu")
    src = torch.zeros(64, 32)
    draws = {
        "rand_like": lambda x, **kw: torch.rand_like(x, **kw),
        "randn_like": lambda x, **kw: torch.randn_like(x, **kw),
        "randint_like": lambda x, **kw: torch.randint_like(x, 10, **kw),
        "randint_like_low": lambda x, **kw: torch.randint_like(x, 3, 7, **kw),
    }
    for name, f in draws.items():
        for x, device in ((t, "cpu"), (src, "tpu"), (t, "tpu")):
            out = f(x, device=device)
            assert out.device.type == device and out.shape == x.shape and out.dtype == x.dtype, name
            v = out.cpu()
            assert v.unique().numel() > 1, name  # drawn, not constant
            if name == "rand_like":
                assert 0 <= v.min() and v.max() < 1
            if name == "randn_like":
                assert abs(v.mean()) < 0.2 and 0.8 < v.std() < 1.2
            if name == "randint_like":
                assert torch.equal(v, v.round()) and 0 <= v.min() and v.max() <= 9
            if name == "randint_like_low":
                assert 3 <= v.min() and v.max() <= 6
        meta = f(t, device="meta")
        assert meta.is_meta and meta.shape == t.shape, name
    # dtype override and a drawn integer tensor
    ints = torch.randint_like(t, 100, dtype=torch.int64, device="cpu")
    assert ints.dtype == torch.int64 and ints.device.type == "cpu"
