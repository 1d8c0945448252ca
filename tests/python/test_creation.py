"""Creation ops against PyTorch CPU: factories (full, zeros, ones, empty,
empty_strided, the _like forms, scalar_tensor, arange, linspace, eye), fills,
host round trips, and random sampling (reproducibility and statistics)."""

import math

import pytest
import torch

import torchtpu
from conftest import FLOATS, call, check, cpu, tol_for, tpu, view
from torchtpu import DType, Scalar

ALL_DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16, torch.bfloat16,
              torch.float32, torch.float64, torch.bool]


def rt_has(name: str) -> bool:
    return bool(torchtpu._capi.lib.ttpu_op_exists(name.encode()))


needs_views = pytest.mark.skipif(not rt_has("aten::as_strided"),
                                 reason="strided device views need aten::as_strided (shape family)")


def dt(d):
    return None if d is None else DType(d)


# ------------------------------------------------------------------ host data

@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("shape", [(), (0,), (2, 0, 3), (5,), (2, 3, 4)])
def test_from_host_roundtrip(rt, dtype, shape):
    x = (torch.randn(shape) * 50).to(dtype) if dtype != torch.bool else torch.randn(shape) > 0
    t = tpu(rt, x)
    assert t.shape == tuple(shape)
    assert t.numel() == x.numel()
    check(cpu(t), x, atol=0, rtol=0)


def test_from_host_extremes(rt):
    for x in [torch.tensor([float("inf"), -float("inf"), float("nan"), -0.0, 1e-40]),
              torch.tensor([torch.iinfo(torch.int64).min, torch.iinfo(torch.int64).max]),
              torch.tensor([0, 255], dtype=torch.uint8), torch.tensor([-128, 127], dtype=torch.int8)]:
        check(cpu(tpu(rt, x)), x, atol=0, rtol=0)


# ---------------------------------------------------------------- factories

@pytest.mark.parametrize("fill", [1.5, -3, True, 0])
@pytest.mark.parametrize("dtype", [None, torch.float32, torch.bfloat16, torch.float16, torch.int32, torch.int64,
                                   torch.bool, torch.float64])
def test_full(rt, fill, dtype):
    want = torch.full((2, 3), fill, dtype=dtype)
    check(call(rt, "aten::full", [2, 3], fill, dt(dtype)), want, atol=0, rtol=0)


@pytest.mark.parametrize("size", [[], [0], [3, 0, 2], [4, 1, 3]])
def test_full_shapes(rt, size):
    check(call(rt, "aten::full", size, 2.5), torch.full(size, 2.5))


def test_full_fill_is_runtime(rt):
    # The fill value is a runtime argument: new values reuse the program.
    call(rt, "aten::full", [3, 2], Scalar(1.0), DType(torch.float32))
    before = rt.stats()["compiles"]
    for v in [2.0, -7.25, 1e6]:
        check(call(rt, "aten::full", [3, 2], Scalar(v), DType(torch.float32)), torch.full((3, 2), v))
    assert rt.stats()["compiles"] == before


def test_full_device(rt):
    if rt.device_count() < 2:
        pytest.skip("needs two devices")
    for dev in [1, "tpu:1"]:
        t = rt.call1("aten::full", [2], 3.0, None, None, dev)
        assert t.device == 1
        check(cpu(t), torch.full((2,), 3.0))
    assert rt.call1("aten::zeros", [2], None, None, "tpu:1").device == 1
    with pytest.raises(torchtpu.InvalidArgumentError, match="aten::zeros"):
        rt.call1("aten::zeros", [2], None, None, "cuda:0")


@pytest.mark.parametrize("name", ["zeros", "ones"])
@pytest.mark.parametrize("dtype", [None, torch.float32, torch.bfloat16, torch.int8, torch.uint8, torch.int64,
                                   torch.bool, torch.float64])
def test_zeros_ones(rt, name, dtype):
    want = getattr(torch, name)((2, 0, 3) if dtype == torch.int8 else (3, 4), dtype=dtype)
    check(call(rt, f"aten::{name}", list(want.shape), dt(dtype)), want, atol=0, rtol=0)


@pytest.mark.parametrize("dtype", [None, torch.bfloat16, torch.int32])
def test_empty(rt, dtype):
    want = torch.empty((2, 5), dtype=dtype)
    got = call(rt, "aten::empty.memory_format", [2, 5], dt(dtype))
    assert got.dtype == want.dtype and got.shape == want.shape


def test_empty_strided(rt):
    for size, stride in [([2, 3], [1, 2]), ([2, 3], [3, 1]), ([4], [2]), ([2, 0], [1, 1]), ([], [])]:
        want = torch.empty_strided(size, stride)
        t = rt.call1("aten::empty_strided", size, stride)
        assert t.shape == tuple(want.shape) and t.strides == tuple(want.stride()), (size, stride)
        assert cpu(t).dtype == want.dtype
    t = rt.call1("aten::empty_strided", [3], [1], DType(torch.int16))
    assert cpu(t).dtype == torch.int16
    with pytest.raises(torchtpu.InvalidArgumentError, match=r"aten::empty_strided.*\[2, 3\].*\[1\]"):
        rt.call1("aten::empty_strided", [2, 3], [1])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32, torch.bool])
@pytest.mark.parametrize("override", [None, torch.float64, torch.int16])
def test_like(rt, dtype, override):
    x = (torch.randn(3, 4) * 4).to(dtype)
    check(call(rt, "aten::full_like", x, 2, dt(override)), torch.full_like(x, 2, dtype=override))
    check(call(rt, "aten::zeros_like", x, dt(override)), torch.zeros_like(x, dtype=override))
    check(call(rt, "aten::ones_like", x, dt(override)), torch.ones_like(x, dtype=override))
    e = call(rt, "aten::empty_like", x, dt(override))
    want = torch.empty_like(x, dtype=override)
    assert e.dtype == want.dtype and e.shape == want.shape


@needs_views
def test_like_of_view(rt):
    # Transposed view of a [4, 3] buffer.
    base = tpu(rt, torch.arange(12.0))
    v = view(rt, base, [3, 4], [1, 3])
    check(cpu(rt.call1("aten::full_like", v, -1.5)), torch.full((3, 4), -1.5))
    check(cpu(rt.call1("aten::ones_like", v, DType(torch.int64))), torch.ones((3, 4), dtype=torch.int64))


@pytest.mark.parametrize("s", [3, 2.5, True, -7])
@pytest.mark.parametrize("dtype", [None, torch.int64, torch.bfloat16, torch.bool])
def test_scalar_tensor(rt, s, dtype):
    check(call(rt, "aten::scalar_tensor", s, dt(dtype)), torch.scalar_tensor(s, dtype=dtype))


def test_negative_size_errors(rt):
    for name, args in [("aten::full", ([-1, 2], 1.0)), ("aten::zeros", ([2, -3],)), ("aten::ones", ([-1],)),
                       ("aten::rand", ([-2],)), ("aten::empty.memory_format", ([3, -1],))]:
        with pytest.raises(torchtpu.InvalidArgumentError, match=rf"{name}.*negative dimension.*\[.*-\d.*\]"):
            rt.call1(name, *args)


# -------------------------------------------------------------------- fills

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32, torch.bool, torch.uint8])
@pytest.mark.parametrize("value", [2.75, -3, True])
def test_fill_scalar(rt, dtype, value):
    x = torch.zeros(3, 2, dtype=dtype)
    check(call(rt, "aten::fill_.Scalar", x, value), x.clone().fill_(value))
    check(call(rt, "aten::fill.Scalar", x, value), torch.fill(x, value))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64])
def test_fill_tensor_zero(rt, dtype):
    x = (torch.randn(4, 3) * 5).to(dtype)
    v = torch.tensor(-2.5, dtype=torch.float64)
    check(call(rt, "aten::fill_.Tensor", x, v), x.clone().fill_(v))
    check(call(rt, "aten::zero_", x), torch.zeros_like(x))
    with pytest.raises(torchtpu.InvalidArgumentError, match=r"aten::fill_.Tensor.*0-dimension.*\[2\]"):
        call(rt, "aten::fill_.Tensor", x, torch.ones(2, dtype=dtype))


@needs_views
def test_fill_through_view(rt):
    base = tpu(rt, torch.zeros(4, 6))
    col = view(rt, base, [4], [6], 2)  # column 2
    rt.call("aten::fill_.Scalar", col, 7.0)
    want = torch.zeros(4, 6)
    want[:, 2] = 7.0
    check(cpu(base), want)
    sub = view(rt, base, [2, 3], [6, 2], 7)  # rows 1-2, every other column from 1
    rt.call("aten::zero_", sub)
    want.view(-1).as_strided([2, 3], [6, 2], 7).zero_()
    check(cpu(base), want)


# ------------------------------------------------------------------- ranges

ARANGE = [
    (0, 5, 1, None), (0, 1, 0.1, None), (10, 0, -3, None), (-2.5, 3.5, 0.5, None), (0, 5, 0.3, None),
    (1, 4, 1, torch.float32), (0, 10, 3, torch.int32), (0.5, 5, 1.5, torch.int64), (0, 2, 0.25, torch.bfloat16),
    (0, 3, 0.5, torch.float16), (0, 1, 0.1, torch.float64), (5, 5, 1, None), (3, -3, -0.7, None),
    (0, 2**40, 2**37, None),
]


@pytest.mark.parametrize("start,end,step,dtype", ARANGE)
def test_arange(rt, start, end, step, dtype):
    want = torch.arange(start, end, step, dtype=dtype)
    check(call(rt, "aten::arange.start_step", start, end, step, dt(dtype)), want, **tol_for(want.dtype))


def test_arange_overloads(rt):
    check(call(rt, "aten::arange", 7), torch.arange(7))
    check(call(rt, "aten::arange", 3.5), torch.arange(3.5))
    check(call(rt, "aten::arange", 4, DType(torch.bfloat16)), torch.arange(4, dtype=torch.bfloat16))
    check(call(rt, "aten::arange.start", -3, 4), torch.arange(-3, 4))
    check(call(rt, "aten::arange.start", 1.0, 4, DType(torch.int16)), torch.arange(1.0, 4, dtype=torch.int16))


def test_arange_errors(rt):
    with pytest.raises(torchtpu.InvalidArgumentError, match=r"aten::arange.start_step: step must be nonzero.*start=0, end=5"):
        rt.call1("aten::arange.start_step", 0, 5, 0)
    with pytest.raises(torchtpu.InvalidArgumentError, match=r"inconsistent with step sign.*start=0, end=5, step=-1"):
        rt.call1("aten::arange.start_step", 0, 5, -1)
    with pytest.raises(torchtpu.InvalidArgumentError, match=r"aten::arange.start: upper bound"):
        rt.call1("aten::arange.start", 5, 0)
    with pytest.raises(torchtpu.InvalidArgumentError, match="unsupported range"):
        rt.call1("aten::arange", float("inf"))
    with pytest.raises(torchtpu.UnimplementedError, match="aten::arange: dtype bool"):
        rt.call1("aten::arange", 3, DType(torch.bool))
    with pytest.raises(torchtpu.UnimplementedError, match="aten::linspace: dtype bool"):
        rt.call1("aten::linspace", 0, 1, 3, DType(torch.bool))


@pytest.mark.parametrize("start,end,steps,dtype", [
    (0, 1, 5, None), (-3.5, 7.25, 11, None), (2, -2, 4, None), (0, 10, 5, torch.int64), (0.5, 10.7, 6, torch.int32),
    (1, 2, 1, None), (1, 2, 0, None), (-1, 1, 9, torch.bfloat16), (0, 1, 7, torch.float64), (0, 100, 33, None),
])
def test_linspace(rt, start, end, steps, dtype):
    want = torch.linspace(start, end, steps, dtype=dtype)
    check(call(rt, "aten::linspace", start, end, steps, dt(dtype)), want, **tol_for(want.dtype))


def test_linspace_bounds_are_runtime(rt):
    call(rt, "aten::linspace", Scalar(0.0), Scalar(1.0), 6)
    before = rt.stats()["compiles"]
    check(call(rt, "aten::linspace", Scalar(-4.0), Scalar(9.5), 6), torch.linspace(-4.0, 9.5, 6))
    assert rt.stats()["compiles"] == before
    with pytest.raises(torchtpu.InvalidArgumentError, match=r"aten::linspace: number of steps must be non-negative"):
        rt.call1("aten::linspace", 0, 1, -1)


@pytest.mark.parametrize("dtype", [None, torch.int64, torch.bool, torch.bfloat16])
def test_eye(rt, dtype):
    check(call(rt, "aten::eye", 4, dt(dtype)), torch.eye(4, dtype=dtype))
    check(call(rt, "aten::eye.m", 2, 5, dt(dtype)), torch.eye(2, 5, dtype=dtype))
    check(call(rt, "aten::eye.m", 4, 1, dt(dtype)), torch.eye(4, 1, dtype=dtype))
    check(call(rt, "aten::eye", 0, dt(dtype)), torch.eye(0, dtype=dtype))
    with pytest.raises(torchtpu.InvalidArgumentError, match="aten::eye: n must be greater or equal to 0, got -1"):
        rt.call1("aten::eye", -1)


# ------------------------------------------------------------------- random

def sample(rt, name, *args):
    return call(rt, name, *args)


@pytest.mark.parametrize("name", ["aten::rand", "aten::randn"])
def test_random_reproducible(rt, name):
    rt.manual_seed(1234)
    a = sample(rt, name, [1000])
    b = sample(rt, name, [1000])
    rt.manual_seed(1234)
    a2 = sample(rt, name, [1000])
    b2 = sample(rt, name, [1000])
    rt.manual_seed(99)
    c = sample(rt, name, [1000])
    check(a2, a, atol=0, rtol=0)
    check(b2, b, atol=0, rtol=0)
    assert not torch.equal(a, b), "consecutive draws must differ"
    assert not torch.equal(a, c), "different seeds must differ"


@pytest.mark.parametrize("dtype", [None, torch.float32, torch.bfloat16, torch.float16, torch.float64])
def test_rand_stats(rt, dtype):
    rt.manual_seed(0)
    x = sample(rt, "aten::rand", [100, 1000], dt(dtype))
    want = torch.rand(1, dtype=dtype)
    assert x.dtype == want.dtype and x.shape == (100, 1000)
    x = x.double()
    assert x.min() >= 0 and x.max() < 1
    assert abs(x.mean() - 0.5) < 0.01
    assert abs(x.std() - math.sqrt(1 / 12)) < 0.01
    # Roughly flat histogram.
    hist = torch.histc(x.float(), bins=10, min=0, max=1) / x.numel()
    assert (hist - 0.1).abs().max() < 0.02 if dtype != torch.bfloat16 else True


@pytest.mark.parametrize("dtype", [None, torch.float32, torch.bfloat16, torch.float16, torch.float64])
def test_randn_stats(rt, dtype):
    rt.manual_seed(1)
    x = sample(rt, "aten::randn", [100000], dt(dtype))
    assert x.dtype == torch.randn(1, dtype=dtype).dtype and x.shape == (100000,)
    x = x.double()
    assert torch.isfinite(x).all()
    assert abs(x.mean()) < 0.02
    assert abs(x.std() - 1) < 0.02
    # Tail mass like a standard normal: P(|z| > 2) ~ 0.0455.
    assert abs((x.abs() > 2).double().mean() - 0.0455) < 0.005


def test_random_like_and_shapes(rt):
    x = torch.zeros(3, 0, 2, dtype=torch.bfloat16)
    for name in ["aten::rand_like", "aten::randn_like"]:
        got = call(rt, name, x)
        assert got.dtype == torch.bfloat16 and got.shape == x.shape
        got = call(rt, name, torch.zeros(4, 5), DType(torch.float64))
        assert got.dtype == torch.float64 and got.shape == (4, 5)
    assert call(rt, "aten::rand", []).shape == ()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_uniform_(rt, dtype):
    rt.manual_seed(3)
    x = call(rt, "aten::uniform_", torch.zeros(100000, dtype=dtype), -2.0, 6.0).double()
    assert x.min() >= -2 and x.max() <= 6
    assert abs(x.mean() - 2) < 0.05
    assert abs(x.std() - 8 / math.sqrt(12)) < 0.05
    with pytest.raises(torchtpu.InvalidArgumentError, match=r"aten::uniform_: .*from=1 > to=0"):
        call(rt, "aten::uniform_", torch.zeros(3), 1.0, 0.0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_normal_(rt, dtype):
    rt.manual_seed(4)
    x = call(rt, "aten::normal_", torch.zeros(200, 500, dtype=dtype), 3.0, 0.5)
    assert x.dtype == dtype and x.shape == (200, 500)
    x = x.double()
    assert abs(x.mean() - 3) < 0.01
    assert abs(x.std() - 0.5) < 0.01
    with pytest.raises(torchtpu.InvalidArgumentError, match=r"aten::normal_: normal expects std >= 0.0, but found std -1"):
        call(rt, "aten::normal_", torch.zeros(3), 0.0, -1.0)


@pytest.mark.parametrize("p", [0.0, 0.2, 0.5, 0.9, 1.0])
def test_bernoulli_p(rt, p):
    rt.manual_seed(5)
    x = call(rt, "aten::bernoulli.p", torch.zeros(100000), p)
    assert x.dtype == torch.float32
    assert set(x.unique().tolist()) <= {0.0, 1.0}
    assert abs(x.mean().item() - p) < 0.01
    y = call(rt, "aten::bernoulli_.float", torch.zeros(100000, dtype=torch.int64), p)
    assert y.dtype == torch.int64 and abs(y.double().mean().item() - p) < 0.01


def test_bernoulli_tensor(rt):
    rt.manual_seed(6)
    p = torch.tensor([0.0, 0.1, 0.5, 0.75, 1.0], dtype=torch.float64).repeat(20000, 1)
    x = call(rt, "aten::bernoulli", p)
    assert x.dtype == torch.float64 and x.shape == p.shape
    check(x.mean(0), p[0], atol=0.015, rtol=0)
    y = call(rt, "aten::bernoulli_.Tensor", torch.zeros(20000, 5, dtype=torch.bfloat16), p[0].float())
    check(y.double().mean(0), p[0], atol=0.015, rtol=0)
    with pytest.raises(torchtpu.InvalidArgumentError, match=r"aten::bernoulli.p: .*p=1.5"):
        call(rt, "aten::bernoulli.p", torch.zeros(3), 1.5)
    with pytest.raises(torchtpu.UnimplementedError, match=r"aten::bernoulli.*int64"):
        call(rt, "aten::bernoulli", torch.zeros(3, dtype=torch.int64))


@pytest.mark.parametrize("low,high,dtype", [(0, 10, None), (-5, 3, torch.int32), (0, 2, torch.bool),
                                            (100, 107, torch.float32), (-(2**40), 2**40, None)])
def test_randint(rt, low, high, dtype):
    rt.manual_seed(7)
    x = call(rt, "aten::randint.low", low, high, [50000], dt(dtype))
    want = torch.randint(low, high, (1,), dtype=dtype)
    assert x.dtype == want.dtype and x.shape == (50000,)
    x = x.double()
    assert x.min() >= low and x.max() < high
    if high - low <= 10:
        counts = torch.bincount((x - low).long(), minlength=high - low).double() / x.numel()
        assert (counts - 1 / (high - low)).abs().max() < 0.015
    else:
        assert abs(x.mean() - (low + high - 1) / 2) < (high - low) * 0.01


def test_randint_high_only_and_errors(rt):
    x = call(rt, "aten::randint", 3, [2, 4])
    assert x.dtype == torch.int64 and x.shape == (2, 4) and x.min() >= 0 and x.max() < 3
    with pytest.raises(torchtpu.InvalidArgumentError, match=r"aten::randint.low: .*from=5 >= to=5"):
        rt.call1("aten::randint.low", 5, 5, [3])
    with pytest.raises(torchtpu.InvalidArgumentError, match=r"aten::randint: to - 1 is out of bounds for bool"):
        rt.call1("aten::randint", 3, [3], DType(torch.bool))
    with pytest.raises(torchtpu.InvalidArgumentError, match=r"aten::randint.low: from is out of bounds for int8"):
        rt.call1("aten::randint.low", -200, 3, [3], DType(torch.int8))


def test_random_needs_float_dtype(rt):
    for name in ["aten::rand", "aten::randn"]:
        with pytest.raises(torchtpu.UnimplementedError, match=rf"{name}.*int64"):
            rt.call1(name, [3], DType(torch.int64))
    with pytest.raises(torchtpu.UnimplementedError, match=r"aten::uniform_.*int32"):
        call(rt, "aten::uniform_", torch.zeros(3, dtype=torch.int32))


@needs_views
def test_random_inplace_through_view(rt):
    base = tpu(rt, torch.zeros(4, 6))
    col = view(rt, base, [4, 3], [6, 2], 1)  # odd columns
    rt.call("aten::uniform_", col, 5.0, 6.0)
    got = cpu(base)
    assert (got[:, 1::2] >= 5).all() and (got[:, 1::2] < 6).all()
    assert (got[:, 0::2] == 0).all()


# ------------------------------------------------------------- generators

def _rand_g(rt, g, n=1000):
    """torch.rand(n, generator=g) through the C ABI."""
    return cpu(rt.call1("aten::rand.generator", [n], g))


def test_generator_reproducible_and_independent(rt):
    """An explicit generator seeded like the default draws the same numbers;
    draws through either leave the other alone; another seed differs."""
    with rt.generator(0, 1234) as g, rt.default_generator(0) as d:
        rt.manual_seed(1234)
        a = _rand_g(rt, g)
        assert g.get_state() == (1234, 1) and d.get_state() == (1234, 0)
        check(_rand_g(rt, None), a, atol=0, rtol=0)
        assert g.get_state() == (1234, 1) and rt.rng_state(0) == d.get_state() == (1234, 1)
        assert a.min() >= 0 and a.max() < 1
        with rt.generator(0, 1235) as h:
            assert not torch.equal(_rand_g(rt, h), a)
        # randn through normal_ with the generator, as torch.randn(generator=g) composes it.
        g.manual_seed(7)
        x = cpu(rt.call1("aten::normal_", tpu(rt, torch.zeros(100000)), 0.0, 1.0, g)).double()
        assert abs(x.mean()) < 0.02 and abs(x.std() - 1) < 0.02
        assert g.get_state() == (7, 1)


def test_generator_state_and_clone(rt):
    with rt.generator(1, 5) as g:
        assert g.device == 1 and g.initial_seed() == 5
        state = g.get_state()
        a, b = _rand_g(rt, g), _rand_g(rt, g)
        g.set_state(state)
        check(_rand_g(rt, g), a, atol=0, rtol=0)
        with g.clone_state() as c:
            check(_rand_g(rt, c), b, atol=0, rtol=0)
            check(_rand_g(rt, g), b, atol=0, rtol=0)
        # Every random op takes one: bernoulli, randint, randperm, dropout-free ops too.
        g.manual_seed(3)
        p = cpu(rt.call1("aten::randperm.generator", 50, g))
        assert sorted(p.tolist()) == list(range(50))
        r = cpu(rt.call1("aten::randint.low_generator", -3, 3, [1000], g))
        assert r.min() >= -3 and r.max() < 3
        y = cpu(rt.call1("aten::bernoulli.p", tpu(rt, torch.zeros(10000)), 0.25, g))
        assert abs(y.mean().item() - 0.25) < 0.02
        assert g.get_state() == (3, 3)
    with pytest.raises(ValueError, match="generator is closed"):
        g.get_state()
    with pytest.raises(torchtpu.OutOfRangeError):
        rt.generator(99)
