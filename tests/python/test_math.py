"""Math ops against PyTorch CPU: inverse and hyperbolic trig, log10, exp2,
erfinv, frac, sgn, bitwise_not, atan2, hypot, lerp, addcmul, addcdiv, their
in-place forms, and the errors PyTorch raises for unsupported dtypes."""

import pytest
import torch

import torchtpu
from conftest import FLOATS, call, check, cpu, tol_for, tpu

torch.manual_seed(0)

# name -> (torch fn, sampler of inputs in the domain)
def _any(shape):
    return torch.randn(shape) * 3


def _unit(shape):
    return torch.rand(shape) * 1.98 - 0.99


def _above_one(shape):
    return torch.rand(shape) * 5 + 1


def _positive(shape):
    return torch.rand(shape) * 10 + 0.01


UNARY = {
    "acos": (torch.acos, _unit), "asin": (torch.asin, _unit), "atanh": (torch.atanh, _unit),
    "acosh": (torch.acosh, _above_one), "asinh": (torch.asinh, _any), "sinh": (torch.sinh, _any),
    "cosh": (torch.cosh, _any), "log10": (torch.log10, _positive), "exp2": (torch.exp2, _any),
    "erfinv": (torch.erfinv, _unit), "frac": (torch.frac, _any), "sgn": (torch.sgn, _any),
}


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary(rt, name, dtype):
    fn, sampler = UNARY[name]
    x = sampler((4, 7)).to(dtype)
    want = fn(x)
    # erfinv is steep near +-1: compare with a relative tolerance there.
    tol = tol_for(dtype, 1e-4 if name == "erfinv" else 2e-5)
    check(call(rt, f"aten::{name}", x), want, **tol)


@pytest.mark.parametrize("name", ["acos", "asin", "atanh", "acosh", "log10", "erfinv"])
def test_unary_out_of_domain_and_specials(rt, name):
    fn = UNARY[name][0]
    x = torch.tensor([-2.0, -1.0, 0.0, 1.0, 2.0, float("inf"), float("-inf"), float("nan")])
    check(call(rt, f"aten::{name}", x), fn(x), atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("name", ["sinh", "cosh", "asinh", "exp2", "frac", "sgn"])
def test_unary_infinities_and_nan(rt, name):
    fn = UNARY[name][0]
    x = torch.tensor([0.0, -0.0, 1e-4, -1e-4, 50.0, -50.0, 200.0, float("inf"), float("-inf"), float("nan")])
    check(call(rt, f"aten::{name}", x), fn(x), atol=1e-6, rtol=2e-6)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.uint8, torch.bool])
@pytest.mark.parametrize("name", ["acos", "asinh", "cosh", "log10", "exp2", "erfinv"])
def test_unary_int_inputs_give_float(rt, name, dtype):
    fn = UNARY[name][0]
    x = torch.tensor([0, 1, 1, 0, 1], dtype=dtype) if dtype == torch.bool else torch.tensor([0, 1, 2, 3, 5], dtype=dtype)
    want = fn(x)
    assert want.dtype == torch.float32
    check(call(rt, f"aten::{name}", x), want, **tol_for(torch.float32, 2e-5))


@pytest.mark.parametrize("dtype", [torch.int8, torch.int32, torch.int64, torch.uint8, torch.int16])
def test_sgn_ints(rt, dtype):
    x = torch.tensor([0, 3, 1, 7], dtype=dtype) if dtype == torch.uint8 else torch.tensor([-5, 0, 3, -1, 7], dtype=dtype)
    check(call(rt, "aten::sgn", x), torch.sgn(x))


@pytest.mark.parametrize("dtype", [torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool])
def test_bitwise_not(rt, dtype):
    if dtype == torch.bool:
        x = torch.tensor([True, False, True])
    elif dtype == torch.uint8:
        x = torch.tensor([0, 1, 200, 255], dtype=dtype)
    else:
        x = torch.randint(-100, 100, (3, 4)).to(dtype)
    check(call(rt, "aten::bitwise_not", x), torch.bitwise_not(x))


def test_int_only_and_float_only_errors(rt):
    with pytest.raises(torchtpu.InvalidArgumentError, match="bitwise_not"):
        call(rt, "aten::bitwise_not", torch.ones(3))
    with pytest.raises(torchtpu.InvalidArgumentError, match="frac"):
        call(rt, "aten::frac", torch.ones(3, dtype=torch.int64))
    with pytest.raises(torchtpu.InvalidArgumentError, match="hypot"):
        call(rt, "aten::hypot", torch.ones(3, dtype=torch.int64), torch.ones(3, dtype=torch.int64))


def test_unary_inplace(rt):
    x = torch.rand(5) * 1.8 - 0.9
    xt = tpu(rt, x)
    out = rt.call1("aten::asin_", xt)
    assert out.same_storage(xt)
    check(cpu(xt), torch.asin(x))
    rt.call("aten::sinh_", xt)
    check(cpu(xt), torch.sinh(torch.asin(x)))
    i = tpu(rt, torch.tensor([1, 2, 3]))
    rt.call("aten::bitwise_not_", i)
    check(cpu(i), torch.tensor([-2, -3, -4]))
    # A float result cannot be written into an int tensor.
    with pytest.raises(torchtpu.InvalidArgumentError, match="can't be cast"):
        rt.call("aten::acos_", i)


# ------------------------------------------------------------------- binary

@pytest.mark.parametrize("dtype", FLOATS)
def test_atan2_hypot(rt, dtype):
    a = (torch.randn(3, 1, 5) * 3).to(dtype)
    b = (torch.randn(4, 1) * 3).to(dtype)
    check(call(rt, "aten::atan2", a, b), torch.atan2(a, b), **tol_for(dtype, 2e-5))
    check(call(rt, "aten::hypot", a, b), torch.hypot(a, b), **tol_for(dtype, 2e-5))


def test_atan2_hypot_specials(rt):
    v = [0.0, -0.0, 1.0, -1.0, float("inf"), float("-inf"), float("nan"), 3e38, 1e-30]
    a = torch.tensor(v).repeat_interleave(len(v))
    b = torch.tensor(v).repeat(len(v))
    check(call(rt, "aten::atan2", a, b), torch.atan2(a, b), atol=1e-6, rtol=1e-6)
    check(call(rt, "aten::hypot", a, b), torch.hypot(a, b), atol=0, rtol=1e-6)


def test_atan2_promotes_ints(rt):
    a = torch.tensor([1, -2, 3, 0])
    b = torch.tensor([2, 2, -1, -1], dtype=torch.int32)
    check(call(rt, "aten::atan2", a, b), torch.atan2(a, b))
    h = torch.tensor([1.0, 2.0], dtype=torch.float16)
    check(call(rt, "aten::atan2", torch.tensor([1, 3]), h), torch.atan2(torch.tensor([1, 3]), h), **tol_for(torch.float16))


def test_atan2_hypot_inplace(rt):
    a, b = torch.randn(6), torch.randn(6)
    at = tpu(rt, a)
    rt.call("aten::atan2_", at, tpu(rt, b))
    check(cpu(at), torch.atan2(a, b))
    rt.call("aten::hypot_", at, tpu(rt, b))
    check(cpu(at), torch.hypot(torch.atan2(a, b), b))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("weight", [0.0, 0.3, 0.5, 0.9, 1.0, -0.7, 2.0])
def test_lerp_scalar(rt, dtype, weight):
    a = (torch.randn(3, 4) * 4).to(dtype)
    b = (torch.randn(4) * 4).to(dtype)
    check(call(rt, "aten::lerp.Scalar", a, b, weight), torch.lerp(a, b, weight), **tol_for(dtype, 2e-6))


@pytest.mark.parametrize("dtype", FLOATS)
def test_lerp_tensor(rt, dtype):
    a = (torch.randn(2, 3, 4) * 4).to(dtype)
    b = (torch.randn(3, 1) * 4).to(dtype)
    w = (torch.rand(4) * 1.6 - 0.3).to(dtype)
    check(call(rt, "aten::lerp.Tensor", a, b, w), torch.lerp(a, b, w), **tol_for(dtype, 2e-6))


def test_lerp_inplace_and_errors(rt):
    a, b, w = torch.randn(5), torch.randn(5), torch.rand(5)
    at = tpu(rt, a)
    rt.call("aten::lerp_.Scalar", at, tpu(rt, b), 0.25)
    ref = torch.lerp(a, b, 0.25)
    check(cpu(at), ref)
    rt.call("aten::lerp_.Tensor", at, tpu(rt, b), tpu(rt, w))
    check(cpu(at), torch.lerp(ref, b, w))
    with pytest.raises(torchtpu.InvalidArgumentError, match="end"):
        call(rt, "aten::lerp.Scalar", a, b.double(), 0.5)
    with pytest.raises(torchtpu.InvalidArgumentError, match="lerp"):
        call(rt, "aten::lerp.Scalar", a.long(), b.long(), 0.5)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("value", [1, 0.5, -2.5])
def test_addcmul_addcdiv(rt, dtype, value):
    x = (torch.randn(3, 4) * 2).to(dtype)
    t1 = (torch.randn(4) * 2).to(dtype)
    t2 = (torch.rand(3, 1) + 0.5).to(dtype)
    check(call(rt, "aten::addcmul", x, t1, t2, value), torch.addcmul(x, t1, t2, value=value), **tol_for(dtype, 2e-6))
    check(call(rt, "aten::addcdiv", x, t1, t2, value), torch.addcdiv(x, t1, t2, value=value), **tol_for(dtype, 2e-6))


def test_addcmul_addcdiv_promotion_and_ints(rt):
    i = torch.tensor([1, 2, 3])
    f = torch.tensor([0.5, 1.5, 2.0], dtype=torch.bfloat16)
    check(call(rt, "aten::addcmul", i, i, i, 2), torch.addcmul(i, i, i, value=2))
    check(call(rt, "aten::addcmul", i, f, i, 3), torch.addcmul(i, f, i, value=3), **tol_for(torch.bfloat16))
    check(call(rt, "aten::addcdiv", f, i, f, 0.5), torch.addcdiv(f, i, f, value=0.5), **tol_for(torch.bfloat16))
    with pytest.raises(torchtpu.InvalidArgumentError, match="Integer division"):
        call(rt, "aten::addcdiv", f, i, i)


def test_adam_style_inplace_update(rt):
    # What torch.optim.Adam's foreach path does to one parameter.
    torch.manual_seed(1)
    p, g, m, v = torch.randn(8), torch.randn(8), torch.zeros(8), torch.zeros(8)
    pt, gt, mt, vt = tpu(rt, p), tpu(rt, g), tpu(rt, m), tpu(rt, v)
    b1, b2, lr = 0.9, 0.999, 1e-2
    for _ in range(3):
        m.lerp_(g, 1 - b1)
        v.mul_(b2).addcmul_(g, g, value=1 - b2)
        denom = v.sqrt() + 1e-8
        p.addcdiv_(m, denom, value=-lr)
        rt.call("aten::lerp_.Scalar", mt, gt, 1 - b1)
        rt.call("aten::mul_.Scalar", vt, b2)
        rt.call("aten::addcmul_", vt, gt, gt, 1 - b2)
        dt = rt.call1("aten::add.Scalar", rt.call1("aten::sqrt", vt), 1e-8, 1)
        out = rt.call1("aten::addcdiv_", pt, mt, dt, -lr)
        assert out.same_storage(pt)
    check(cpu(mt), m)
    check(cpu(vt), v)
    check(cpu(pt), p)


@pytest.mark.parametrize("dtype", FLOATS)
def test_sign_of_nan_and_negative_zero(rt, dtype):
    # PyTorch computes sign as (x > 0) - (x < 0): NaN gives 0.
    x = torch.tensor([float("nan"), -0.0, 0.0, -3.0, 2.0, float("-inf")], dtype=dtype)
    check(call(rt, "aten::sign", x), torch.sign(x))
    check(call(rt, "aten::sgn", x), torch.sgn(x))


# -------------------------------------------------------------- sort / topk

def _distinct(shape, dtype):
    """Values without ties, so indices are unambiguous."""
    n = torch.Size(shape).numel()
    if dtype == torch.bool:
        return torch.rand(shape) > 0.5
    x = torch.randperm(n).reshape(shape)
    if dtype.is_floating_point:
        x = x.float() * 0.37 - n * 0.1
    return x.to(dtype)


SORT_DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.int32, torch.int64, torch.uint8]


@pytest.mark.parametrize("dtype", SORT_DTYPES)
@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("descending", [False, True])
def test_sort(rt, dtype, dim, descending):
    x = _distinct((5, 6, 7), dtype) if dtype != torch.uint8 else torch.randint(0, 256, (5, 6, 7), dtype=torch.uint8)
    want = torch.sort(x, dim, descending)
    if dtype == torch.uint8:
        # Ties possible: the stable overload fixes their order.
        want = torch.sort(x, dim=dim, descending=descending, stable=True)
    got = call(rt, "aten::sort", x, dim, descending)
    check(got[0], want.values, atol=0, rtol=0)
    check(got[1], want.indices, atol=0, rtol=0)


@pytest.mark.parametrize("descending", [False, True])
def test_sort_stable_ties_nan_and_bool(rt, descending):
    x = torch.tensor([[3.0, float("nan"), 1.0, 3.0, -0.0, 0.0, float("-inf"), float("nan"), 1.0, float("inf")]])
    want = torch.sort(x, dim=-1, descending=descending, stable=True)
    got = call(rt, "aten::sort.stable", x, True, -1, descending)
    check(got[0], want.values, atol=0, rtol=0)
    check(got[1], want.indices, atol=0, rtol=0)
    got = call(rt, "aten::sort", x, -1, descending)
    check(got[0], want.values, atol=0, rtol=0)
    check(got[1], want.indices, atol=0, rtol=0)
    b = torch.tensor([True, False, True, False, False, True])
    want = torch.sort(b, descending=descending, stable=True)
    got = call(rt, "aten::sort", b, 0, descending)
    check(got[0], want.values)
    check(got[1], want.indices)


def test_sort_edge_shapes(rt):
    s = torch.tensor(2.5)
    got = call(rt, "aten::sort", s, -1, False)
    check(got[0], s)
    check(got[1], torch.tensor(0))
    e = torch.zeros(3, 0)
    want = torch.sort(e, 1)
    got = call(rt, "aten::sort", e, 1, False)
    check(got[0], want.values)
    check(got[1], want.indices)
    with pytest.raises(torchtpu.InvalidArgumentError):
        call(rt, "aten::sort", torch.zeros(3), 1, False)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
@pytest.mark.parametrize("k,dim,largest", [(1, -1, True), (3, -1, True), (3, 0, False), (7, 1, True), (0, 1, True), (5, 2, False)])
def test_topk(rt, dtype, k, dim, largest):
    x = _distinct((5, 7, 6), dtype)
    want = torch.topk(x, k, dim, largest, True)
    got = call(rt, "aten::topk", x, k, dim, largest, True)
    check(got[0], want.values, atol=0, rtol=0)
    check(got[1], want.indices, atol=0, rtol=0)


def test_topk_nan_unsorted_and_errors(rt):
    x = torch.tensor([1.0, float("nan"), 5.0, -2.0, 4.0])
    for largest in (True, False):
        want = torch.topk(x, 3, largest=largest)
        got = call(rt, "aten::topk", x, 3, -1, largest, True)
        check(got[0], want.values, atol=0, rtol=0)
        check(got[1], want.indices, atol=0, rtol=0)
    # sorted=False may return any order: compare as sets of (value, index).
    got = call(rt, "aten::topk", x, 2, -1, True, False)
    want = torch.topk(x, 2, sorted=True)
    order = torch.argsort(got[1])
    worder = torch.argsort(want.indices)
    check(got[1][order], want.indices[worder])
    check(got[0][order], want.values[worder])
    with pytest.raises(torchtpu.InvalidArgumentError, match="k out of range"):
        call(rt, "aten::topk", x, 6)


# ------------------------------------------------------------------ randperm

@pytest.mark.parametrize("n,dtype", [(1, None), (10, None), (1000, None), (256, torch.uint8), (100, torch.float32),
                                     (50, torch.int32), (0, None)])
def test_randperm_is_a_permutation(rt, n, dtype):
    from torchtpu import DType
    args = [n] if dtype is None else [n, DType(dtype)]
    p = call(rt, "aten::randperm", *args)
    want_dtype = dtype or torch.int64
    assert p.dtype == want_dtype and p.shape == (n,)
    check(torch.sort(p.long()).values, torch.arange(n))
    if n >= 100:
        assert not torch.equal(p.long(), torch.arange(n)), "a permutation of 100+ elements is not the identity"


def test_randperm_reproducible_and_errors(rt):
    from torchtpu import DType
    rt.manual_seed(7)
    a = call(rt, "aten::randperm", 50)
    b = call(rt, "aten::randperm", 50)
    rt.manual_seed(7)
    a2 = call(rt, "aten::randperm", 50)
    check(a2, a)
    assert not torch.equal(a, b)
    with pytest.raises(torchtpu.InvalidArgumentError, match="non-negative"):
        call(rt, "aten::randperm", -1)
    with pytest.raises(torchtpu.InvalidArgumentError, match="uint8"):
        call(rt, "aten::randperm", 257, DType(torch.uint8))
    with pytest.raises(torchtpu.InvalidArgumentError, match="Bool"):
        call(rt, "aten::randperm", 2, DType(torch.bool))
