"""The device, the torch.tpu namespace, views and in-place writes, errors."""

from __future__ import annotations

import os
import warnings

import pytest
import torch
import torch.nn.functional as F


def test_device_basics():
    assert torch.tpu.is_available()
    n = torch.tpu.device_count()
    assert n >= 2  # the XLA CPU plugin exposes several devices
    x = torch.arange(6.0).reshape(2, 3).to("tpu")
    assert x.device == torch.device("tpu", 0) and x.is_tpu
    assert torch.equal(x.cpu(), torch.arange(6.0).reshape(2, 3))
    props = torch.tpu.get_device_properties(0)
    assert props.platform and props.platform_version is not None
    assert isinstance(torch.tpu.get_device_name(), str)


def test_every_device_and_copies_between_them():
    src = torch.randn(4, 5)
    x = src.to("tpu:0")
    for i in range(torch.tpu.device_count()):
        y = x.to(f"tpu:{i}")
        assert y.device.index == i
        z = (y * 2 + 1).to("tpu:0")
        torch.testing.assert_close(z.cpu(), src * 2 + 1)
    with torch.tpu.device(1):
        assert torch.tpu.current_device() == 1
        t = torch.ones(3, device="tpu")
        assert t.device.index == 1
    assert torch.tpu.current_device() == 0


def test_views_write_through_the_storage(eager_mode):
    base = torch.zeros(4, 6, device="tpu")
    ref = torch.zeros(4, 6)
    for b in (base, ref):
        b[1:3, ::2] += 5  # a strided view, written in place
        b.t()[0].fill_(7)  # a transposed row
        v = b.view(-1)
        v[::5] = -1
        b.select(1, 5).mul_(3)
    torch.testing.assert_close(base.cpu(), ref)
    # The views share the storage, as on any device.
    a = base[1:3]
    assert a.untyped_storage().data_ptr() == base.untyped_storage().data_ptr()
    assert a.data_ptr() == base.data_ptr() + 6 * 4


def test_out_variants_and_resize(eager_mode):
    a, b = torch.randn(3, 4), torch.randn(3, 4)
    out = torch.empty(0, device="tpu")
    r = torch.add(a.to("tpu"), b.to("tpu"), alpha=2, out=out)
    assert r is out and out.shape == (3, 4)
    torch.testing.assert_close(out.cpu(), a + 2 * b)
    t = torch.arange(4.0, device="tpu")
    t.resize_(6)
    torch.testing.assert_close(t[:4].cpu(), torch.arange(4.0))


def test_dtype_conversion_and_item(eager_mode):
    x = torch.tensor([1.5, -2.25, 3.0], device="tpu")
    assert x.to(torch.int64).cpu().tolist() == [1, -2, 3]
    assert x.to(torch.bfloat16).dtype == torch.bfloat16
    assert x.sum().item() == pytest.approx(2.25)
    assert bool((x > 0).any())


def test_mixing_cpu_and_tpu_tensors_raises_like_cuda():
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.ones(3, device="tpu") + torch.ones(3)
    # A 0-dim CPU tensor joins as a scalar, as with CUDA.
    torch.testing.assert_close((torch.ones(3, device="tpu") + torch.tensor(2.0)).cpu(), torch.full((3,), 3.0))


def test_unsupported_op_is_a_clear_error():
    x = torch.eye(3, device="tpu")  # the LDL factorization is not implemented
    with pytest.raises(NotImplementedError, match=r"operator aten::linalg_ldl_factor_ex.* is not implemented for TPU.*enable_cpu_fallback"):
        torch.linalg.ldl_factor(x)


# An op only the CPU implements: defined here, so that no runtime op ever
# covers it (a real aten op would stop being a fallback once implemented).
_FALLBACK_LIB = torch.library.Library("torchtpu_fallback_test", "DEF")
_FALLBACK_LIB.define("cpu_only_scale(Tensor x, float k) -> Tensor")
_FALLBACK_LIB.impl("cpu_only_scale", lambda x, k: x * k + 1, "CPU")


def test_cpu_fallback_warns_once_and_counts():
    x = torch.tensor([0.5, 1.5, 0.2, 2.5, 2.7])
    fn = torch.ops.torchtpu_fallback_test.cpu_only_scale
    want = fn(x, 3.0)
    op = "torchtpu_fallback_test::cpu_only_scale"
    before = torch.tpu.fallback_stats().get(op, 0)
    torch.tpu.enable_cpu_fallback = True
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            a = fn(x.to("tpu"), 3.0)
            b = fn(x.to("tpu"), 3.0)
        assert a.device.type == "tpu"
        assert torch.equal(a.cpu(), want) and torch.equal(b.cpu(), want)
        msgs = [str(w.message) for w in caught if op in str(w.message)]
        assert len(msgs) == (0 if before else 1), msgs
        assert torch.tpu.fallback_stats()[op] == before + 2
    finally:
        torch.tpu.enable_cpu_fallback = False
    with pytest.raises(NotImplementedError, match=f"operator {op} is not implemented for TPU"):
        fn(x.to("tpu"), 3.0)


def test_data_dependent_shapes_sync_and_work(eager_mode):
    x = torch.tensor([[0.0, 1.5, -2.0], [3.0, 0.0, 0.5]])
    t = x.to("tpu")
    assert torch.equal(torch.nonzero(t).cpu(), torch.nonzero(x))
    torch.testing.assert_close(t[t > 0.7].cpu(), x[x > 0.7])
    torch.testing.assert_close(t.masked_select(t < 0).cpu(), x.masked_select(x < 0))
    t[t < 1] = 7.0
    x[x < 1] = 7.0
    torch.testing.assert_close(t.cpu(), x)
    # 0-dim operands: the result is still 1-D, and masked_fill's backward
    # (a masked select of a 0-dim gradient) works, as in a scalar loss gate.
    for keep in (True, False):
        s, m = torch.tensor(2.5), torch.tensor(keep)
        assert torch.equal(s.to("tpu").masked_select(m.to("tpu")).cpu(), s.masked_select(m))
        grads = []
        for dev in ("cpu", "tpu"):
            v = torch.tensor(1.5, device=dev, requires_grad=True)
            (v.masked_fill(torch.tensor(keep, device=dev), 0.0) * v).backward()
            grads.append(v.grad.cpu())
        torch.testing.assert_close(grads[1], grads[0])


def test_index_writes_of_cuda_scripts(eager_mode):
    """The indexing writes ordinary CUDA scripts make (index_fill_ from
    `x[idx] = v`, index_put_ with and without accumulate, masked fills and
    scatters, index_copy_, put_) on tpu, against the same on the CPU."""
    base = torch.randn(4, 5)
    idx, mask = torch.tensor([3, -4]), base > 0.3
    cases = {
        "x[idx] = v": lambda x, i, m: x.__setitem__(i, 1.0),
        "x[idx] += 1": lambda x, i, m: x.__setitem__(i, x[i] + 1),
        "x[:, idx] = t": lambda x, i, m: x.__setitem__((slice(None), i), torch.full((4, 2), 2.5, device=x.device)),
        "x[mask] = v": lambda x, i, m: x.__setitem__(m, 0.0),
        "x[mask] = t": lambda x, i, m: x.__setitem__(m, torch.arange(int(mask.sum()), dtype=x.dtype, device=x.device)),
        "index_fill_": lambda x, i, m: x.index_fill_(-1, i, -3.0),
        "index_fill_ tensor": lambda x, i, m: x.index_fill_(0, i, torch.tensor(5, device=x.device)),
        "index_copy_": lambda x, i, m: x.index_copy_(1, i % 5, torch.ones(4, 2, device=x.device)),
        "index_put_ accumulate": lambda x, i, m: x.index_put_((i, i), torch.tensor([1.0, 2.0], device=x.device),
                                                              accumulate=True),
        "put_": lambda x, i, m: x.put_(i * 5, torch.tensor([6.0, 7.0], device=x.device)),
        "put_ accumulate": lambda x, i, m: x.put_(torch.tensor([19, -1, 0], device=x.device),
                                                  torch.tensor([1.0, 2.0, 3.0], device=x.device), accumulate=True),
        "masked_fill_": lambda x, i, m: x.masked_fill_(m, 4.0),
        "masked_scatter_": lambda x, i, m: x.masked_scatter_(m, torch.arange(20.0, device=x.device)),
    }
    for name, write in cases.items():
        want, got = base.clone(), base.to("tpu")
        write(want, idx, mask)
        write(got, idx.to("tpu"), mask.to("tpu"))
        torch.testing.assert_close(got.cpu(), want, msg=name)
    # Bad indices are IndexErrors naming the op (at the read, or at the op
    # in launch-blocking mode).
    with pytest.raises(IndexError, match=r"aten::index_fill_.int_Scalar: index 4 is out of range for dimension 0 with size 4 \(valid: -4 to 3\)"):
        t = base.to("tpu")
        t[torch.tensor([4], device="tpu")] = 1.0
        t.cpu()
    with pytest.raises(IndexError, match=r"aten::put_: index 20 is out of range for a tensor of 20 elements"):
        base.to("tpu").put_(torch.tensor([20], device="tpu"), torch.ones(1, device="tpu")).cpu()


def test_index_op_gradients_match_the_cpu(eager_mode):
    """take's backward is put (accumulating); index_fill, index_copy and put
    have gradients of their own."""
    x0, src0 = torch.randn(3, 4), torch.randn(3, 2)
    idx = torch.tensor([[0, 11], [-1, 5], [5, 5]])  # repeats accumulate into the gradient
    cols = torch.tensor([2, 0])
    grads = {}
    for dev in ("cpu", "tpu"):
        x, src = x0.to(dev).detach().requires_grad_(), src0.to(dev).detach().requires_grad_()
        i, c = idx.to(dev), cols.to(dev)
        loss = (torch.take(x, i) ** 2).sum() + (x.index_fill(1, c, 2.0) * 3).sum()
        loss = loss + (x.index_copy(1, c, src) ** 2).sum() + (x.put(i[0], src[0], accumulate=True) ** 3).sum()
        loss.backward()
        grads[dev] = (x.grad, src.grad)
    for g, w in zip(grads["tpu"], grads["cpu"]):
        torch.testing.assert_close(g.cpu(), w)


def test_bce_prelu_cross_match_the_cpu(eager_mode):
    """nn.BCELoss (every reduction, with and without a weight), PReLU and
    linalg.cross: values and gradients against the CPU; an input outside
    [0, 1] is PyTorch's error, and the process carries on."""
    torch.manual_seed(0)
    x0, t0, w0 = torch.randn(4, 5), torch.rand(4, 5), torch.rand(5)
    for red in ("mean", "sum", "none"):
        for w in (None, w0):
            got = {}
            for dev in ("cpu", "tpu"):
                x = x0.to(dev).detach().requires_grad_()
                loss = F.binary_cross_entropy(x.sigmoid(), t0.to(dev), weight=None if w is None else w.to(dev),
                                              reduction=red)
                (loss.sum() if red == "none" else loss).backward()
                got[dev] = (loss.detach().cpu(), x.grad.cpu())
            for g, want in zip(got["tpu"], got["cpu"]):
                torch.testing.assert_close(g, want, msg=f"{red}, weight={w is not None}")
    # Probabilities of exactly 0 and 1: the logs clamp at -100.
    p, t = torch.tensor([0.0, 1.0, 0.5]), torch.tensor([1.0, 0.0, 1.0])
    out = F.binary_cross_entropy(p.to("tpu"), t.to("tpu"), reduction="none").cpu()
    torch.testing.assert_close(out, torch.tensor([100.0, 100.0, 0.6931471805599453]))
    for bad, what in ((torch.tensor([1.5, 0.2]), "input"), (torch.tensor([float("nan"), 0.2]), "input")):
        with pytest.raises(RuntimeError, match=f"all elements of {what} should be between 0 and 1"):
            F.binary_cross_entropy(bad.to("tpu"), torch.tensor([1.0, 0.0], device="tpu")).cpu()
    with pytest.raises(RuntimeError, match="all elements of target should be between 0 and 1"):
        F.binary_cross_entropy(torch.tensor([0.5], device="tpu"), torch.tensor([-1.0], device="tpu")).cpu()
    assert torch.equal((torch.ones(2, device="tpu") * 2).cpu(), torch.tensor([2.0, 2.0]))

    m, mc = torch.nn.PReLU(3), torch.nn.PReLU(3)
    with torch.no_grad():
        mc.weight.copy_(torch.tensor([0.1, 0.3, -0.2]))
        m.weight.copy_(mc.weight)
    m = m.to("tpu")
    x0 = torch.randn(2, 3, 4)
    xt, xc = x0.to("tpu").requires_grad_(), x0.clone().requires_grad_()
    m(xt).pow(2).sum().backward()
    mc(xc).pow(2).sum().backward()
    torch.testing.assert_close(xt.grad.cpu(), xc.grad)
    torch.testing.assert_close(m.weight.grad.cpu(), mc.weight.grad)

    a, b = torch.randn(4, 3, requires_grad=True), torch.randn(1, 3)
    at = a.detach().to("tpu").requires_grad_()
    c, ct = torch.linalg.cross(a, b), torch.linalg.cross(at, b.to("tpu"))
    torch.testing.assert_close(ct.cpu(), c)
    c.pow(2).sum().backward()
    ct.pow(2).sum().backward()
    torch.testing.assert_close(at.grad.cpu(), a.grad)
    # By hand: x cross y = z.
    e = torch.linalg.cross(torch.tensor([1.0, 0.0, 0.0], device="tpu"), torch.tensor([0.0, 1.0, 0.0], device="tpu"))
    assert torch.equal(e.cpu(), torch.tensor([0.0, 0.0, 1.0]))


def test_printing_and_serialization(tmp_path):
    x = torch.tensor([[1.0, -2.5], [float("inf"), 0.0]])
    assert repr(x.to("tpu")) == repr(x)[:-1] + ", device='tpu:0')"
    model = torch.nn.Linear(3, 2).to("tpu")
    torch.save(model.state_dict(), tmp_path / "m.pt")
    loaded = torch.load(tmp_path / "m.pt")
    assert loaded["weight"].device.type == "tpu"
    assert torch.equal(loaded["weight"].cpu(), model.weight.detach().cpu())
    on_cpu = torch.load(tmp_path / "m.pt", map_location="cpu")
    assert torch.equal(on_cpu["bias"], model.bias.detach().cpu())
    # Reinterpreting a storage's bytes, as Tensor.view(dtype) does.
    f = torch.tensor([1.0, -2.0, 0.5])
    assert torch.equal(f.to("tpu").view(torch.int32).cpu(), f.view(torch.int32))


def test_rng_is_seeded_and_restorable():
    torch.manual_seed(123)  # also seeds tpu through torch.tpu.manual_seed_all
    a = torch.rand(5, device="tpu").cpu()
    state = torch.tpu.get_rng_state()
    b = torch.rand(5, device="tpu").cpu()
    torch.tpu.set_rng_state(state)
    c = torch.rand(5, device="tpu").cpu()
    torch.manual_seed(123)
    d = torch.rand(5, device="tpu").cpu()
    assert torch.equal(b, c) and torch.equal(a, d) and not torch.equal(a, b)
    assert 0.0 <= float(a.min()) and float(a.max()) < 1.0


def test_memory_stats():
    torch.tpu.synchronize()
    base = torch.tpu.memory_allocated()
    x = torch.ones(1024, 1024, device="tpu") * 2  # 4 MiB
    torch.tpu.synchronize()
    assert torch.tpu.memory_allocated() >= base + 4 * 2**20
    assert torch.tpu.max_memory_allocated() >= torch.tpu.memory_allocated()
    del x
    torch.tpu.synchronize()
    assert torch.tpu.memory_allocated() < base + 4 * 2**20
    torch.tpu.reset_peak_memory_stats()
    assert torch.tpu.max_memory_allocated() == torch.tpu.memory_allocated()


def test_eager_modes():
    E = torch.tpu.EagerMode
    assert torch.tpu.eager_mode in set(E)
    with torch.tpu.set_eager_mode(E.DEFER_AND_FUSE):
        assert torch.tpu.eager_mode == E.DEFER_AND_FUSE
        before = torch.tpu.compile_cache_stats()["recorded_ops"]
        x = torch.randn(16, 16)
        y = ((x.to("tpu") @ x.to("tpu")).relu() + 1).sum()
        assert torch.tpu.compile_cache_stats()["recorded_ops"] > before
        torch.testing.assert_close(y.cpu(), ((x @ x).relu() + 1).sum(), rtol=1e-5, atol=1e-4)
        assert torch.tpu.compile_cache_stats()["flushes"]["host_read"] >= 1
    assert torch.tpu.eager_mode != E.DEFER_AND_FUSE or torch.tpu.eager_mode == E.DEFER_AND_FUSE
    text = torch.tpu.explain_recompiles()
    assert "flushes by reason" in text


def test_streams_and_events():
    s = torch.tpu.Stream()
    assert s.device.type == "tpu"
    start, end = torch.tpu.Event(enable_timing=True), torch.tpu.Event(enable_timing=True)
    with torch.tpu.stream(s):
        assert torch.tpu.current_stream() == s
        start.record()
        x = torch.randn(256, 256, device="tpu")
        y = x @ x
        end.record()
    assert torch.tpu.current_stream() != s
    torch.tpu.current_stream().wait_event(end)
    end.synchronize()
    assert end.query() and start.elapsed_time(end) >= 0.0
    s.synchronize()
    torch.testing.assert_close(y.cpu(), x.cpu() @ x.cpu(), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("env,want", [({"TORCHTPU_EAGER_MODE": "DEFER_AND_FUSE"}, "DEFER_AND_FUSE"),
                                      ({"TORCHTPU_LAUNCH_BLOCKING": "1"}, "DEFER_NEVER_AND_LAUNCH_BLOCKING"),
                                      ({}, "DEFER_NEVER")])
def test_environment_sets_the_default_mode(env, want):
    import os
    import subprocess
    import sys

    clean = {k: v for k, v in os.environ.items() if k not in ("TORCHTPU_EAGER_MODE", "TORCHTPU_LAUNCH_BLOCKING")}
    out = subprocess.run([sys.executable, "-c", "import torch; print(torch.tpu.eager_mode.name)"],
                         env={**clean, **env}, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == want


def test_the_pjrt_plugin_and_why_it_was_chosen(tmp_path):
    """The plugin comes from the running interpreter's environment, wherever
    the process starts: never from the current directory or the build tree."""
    import subprocess
    import sys

    info = torch.tpu.pjrt_plugin()
    assert info["path"].endswith("xla_cpu_pjrt.so"), info
    assert info["source"].startswith("xla-cpu-pjrt in the Python environment "), info
    # Without $VIRTUAL_ENV, from another directory (with a decoy .venv in it):
    # the interpreter's own virtualenv is found.
    decoy = tmp_path / ".venv" / "lib" / "python3.11" / "site-packages" / "libtpu"
    decoy.mkdir(parents=True)
    (decoy / "libtpu.so").write_bytes(b"not a plugin")
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "TORCHTPU_PJRT_PLUGIN")}
    code = "import torch; torch.ones(1, device='tpu').cpu(); print(torch.tpu.pjrt_plugin())"
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "xla_cpu_pjrt.so" in r.stdout and "in the Python environment" in r.stdout, r.stdout
    assert str(tmp_path) not in r.stdout
