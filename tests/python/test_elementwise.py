"""Elementwise ops against PyTorch CPU: unary, binary with broadcasting and
type promotion, comparisons, logical ops, where, clamp; in-place variants and
writes through views."""

import pytest
import torch

import torchtpu

from conftest import FLOATS, call, check, cpu, tol_for, tpu, view

torch.manual_seed(0)

UNARY = {
    "neg": torch.neg, "abs": torch.abs, "exp": torch.exp, "expm1": torch.expm1, "log": torch.log,
    "log1p": torch.log1p, "log2": torch.log2, "sqrt": torch.sqrt, "rsqrt": torch.rsqrt, "sin": torch.sin,
    "cos": torch.cos, "tan": torch.tan, "tanh": torch.tanh, "atan": torch.atan, "sigmoid": torch.sigmoid,
    "relu": torch.relu, "silu": torch.nn.functional.silu, "erf": torch.erf, "floor": torch.floor,
    "ceil": torch.ceil, "round": torch.round, "trunc": torch.trunc, "sign": torch.sign,
    "reciprocal": torch.reciprocal,
}
POSITIVE = {"log", "log1p", "log2", "sqrt", "rsqrt"}


def sample(shape, dtype, positive=False):
    x = torch.randn(shape, dtype=torch.float32) * 3
    if positive:
        x = x.abs() + 0.1
    return x.to(dtype)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_float(rt, name, dtype):
    x = sample((3, 5), dtype, positive=name in POSITIVE)
    if name == "round":
        x = torch.tensor([0.5, 1.5, 2.5, -0.5, -1.5, 2.4, -2.6, 3.0], dtype=dtype)
    check(call(rt, f"aten::{name}", x), UNARY[name](x), **tol_for(dtype, 2e-5))


@pytest.mark.parametrize("name", ["neg", "abs", "sign", "relu", "floor", "exp", "sqrt", "sigmoid"])
def test_unary_int_inputs(rt, name):
    x = torch.tensor([[-3, 0, 2], [5, -7, 1]], dtype=torch.int32)
    want = UNARY[name](x.abs() if name == "sqrt" else x)
    got = call(rt, f"aten::{name}", x.abs() if name == "sqrt" else x)
    check(got, want, **tol_for(torch.float32, 1e-5))


@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("dtype", FLOATS)
def test_gelu(rt, approximate, dtype):
    x = sample((4, 6), dtype)
    want = torch.nn.functional.gelu(x, approximate=approximate)
    check(call(rt, "aten::gelu", x, approximate), want, **tol_for(dtype))


def test_logical_not_isnan(rt):
    x = torch.tensor([0.0, 1.5, float("nan"), -2.0, float("inf")])
    check(call(rt, "aten::logical_not", x), torch.logical_not(x))
    check(call(rt, "aten::isnan", x), torch.isnan(x))
    check(call(rt, "aten::isinf", x), torch.isinf(x))
    check(call(rt, "aten::isfinite", x), torch.isfinite(x))
    i = torch.tensor([0, 3, -1], dtype=torch.int64)
    check(call(rt, "aten::logical_not", i), torch.logical_not(i))


BINARY = {
    "add.Tensor": torch.add, "sub.Tensor": torch.sub, "mul.Tensor": torch.mul, "div.Tensor": torch.div,
    "maximum": torch.maximum, "minimum": torch.minimum, "remainder.Tensor": torch.remainder,
    "fmod.Tensor": torch.fmod, "pow.Tensor_Tensor": torch.pow,
}


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_broadcasting(rt, name, dtype):
    a = sample((2, 1, 4), dtype)
    b = sample((3, 1), dtype)
    if name == "pow.Tensor_Tensor":
        a = a.abs() + 0.5
    if name in ("remainder.Tensor", "fmod.Tensor", "div.Tensor"):
        b = torch.where(b.abs() < 0.5, torch.ones_like(b), b)
    check(call(rt, f"aten::{name}", a, b), BINARY[name](a, b), **tol_for(dtype, 2e-5))


@pytest.mark.parametrize("alpha", [1, 2.5, -0.5])
def test_add_sub_alpha(rt, alpha):
    a, b = sample((3, 4), torch.float32), sample((4,), torch.float32)
    check(call(rt, "aten::add.Tensor", a, b, alpha), torch.add(a, b, alpha=alpha))
    check(call(rt, "aten::sub.Tensor", a, b, alpha), torch.sub(a, b, alpha=alpha))
    check(call(rt, "aten::add.Scalar", a, 3, alpha), torch.add(a, 3, alpha=alpha))
    check(call(rt, "aten::rsub.Tensor", a, b, alpha), torch.rsub(a, b, alpha=alpha))


def test_integer_alpha_must_be_integral(rt):
    a = torch.tensor([1, 2], dtype=torch.int32)
    with pytest.raises(torchtpu.InvalidArgumentError, match="alpha"):
        call(rt, "aten::add.Tensor", a, a, 1.5)


PROMOTION_CASES = [
    (torch.int32, torch.float16), (torch.int64, torch.bfloat16), (torch.uint8, torch.int8),
    (torch.bool, torch.int16), (torch.float16, torch.bfloat16), (torch.float32, torch.float64),
    (torch.bool, torch.bool), (torch.int8, torch.int64),
]


def _make(dtype, shape):
    if dtype == torch.bool:
        return torch.rand(shape) > 0.5
    if dtype.is_floating_point:
        return (torch.randn(shape) * 4).to(dtype)
    return torch.randint(-5 if dtype != torch.uint8 else 0, 6, shape).to(dtype)


@pytest.mark.parametrize("da,db", PROMOTION_CASES)
@pytest.mark.parametrize("op", ["add.Tensor", "mul.Tensor", "div.Tensor", "eq.Tensor", "lt.Tensor"])
def test_type_promotion_tensor_tensor(rt, da, db, op):
    a, b = _make(da, (3, 4)), _make(db, (4,))
    if op == "div.Tensor":
        b = torch.where(b == 0, torch.ones_like(b), b) if db != torch.bool else torch.ones_like(b)
    fn = {"add.Tensor": torch.add, "mul.Tensor": torch.mul, "div.Tensor": torch.div, "eq.Tensor": torch.eq,
          "lt.Tensor": torch.lt}[op]
    want = fn(a, b)
    check(call(rt, f"aten::{op}", a, b), want, **tol_for(want.dtype if want.dtype.is_floating_point else torch.float32))


@pytest.mark.parametrize("dtype", [torch.int32, torch.float16, torch.bool, torch.uint8])
@pytest.mark.parametrize("scalar", [2, 2.5, True])
def test_type_promotion_with_scalars_and_zero_dim(rt, dtype, scalar):
    a = _make(dtype, (5,))
    check(call(rt, "aten::mul.Scalar", a, scalar), torch.mul(a, scalar), **tol_for(torch.float16))
    zero_dim = torch.tensor(3.0, dtype=torch.float64)
    want = torch.add(a, zero_dim)
    check(call(rt, "aten::add.Tensor", a, zero_dim), want, **tol_for(want.dtype))


@pytest.mark.parametrize("mode_", [None, "trunc", "floor"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.int32, torch.bfloat16])
def test_div_rounding_modes(rt, mode_, dtype):
    a = torch.tensor([7, -7, 7, -7, 0, 5, -9, 3], dtype=dtype)
    b = torch.tensor([2, 2, -2, -2, 3, 5, 4, -1], dtype=dtype)
    if mode_ is None:
        want = torch.div(a, b)
        got = call(rt, "aten::div.Tensor", a, b)
    else:
        want = torch.div(a, b, rounding_mode=mode_)
        got = call(rt, "aten::div.Tensor_mode", a, b, mode_)
    check(got, want, **tol_for(want.dtype))
    if dtype.is_floating_point:
        x = sample((64,), dtype)
        y = sample((64,), dtype)
        y = torch.where(y.abs() < 0.25, torch.full_like(y, 0.75), y)
        want = torch.div(x, y, rounding_mode=mode_)
        got = call(rt, "aten::div.Tensor_mode", x, y, mode_)
        check(got, want, **tol_for(dtype))
    with pytest.raises(torchtpu.InvalidArgumentError, match="rounding_mode"):
        call(rt, "aten::div.Tensor_mode", a, b, "round")


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_remainder_sign_follows_divisor(rt, dtype):
    a = torch.tensor([5, -5, 5, -5, 0, 7], dtype=dtype)
    b = torch.tensor([3, 3, -3, -3, 2, 7], dtype=dtype)
    check(call(rt, "aten::remainder.Tensor", a, b), torch.remainder(a, b))
    check(call(rt, "aten::remainder.Scalar", a, -2), torch.remainder(a, -2))


def test_pow_overloads(rt):
    x = torch.rand(6) * 3 + 0.1
    check(call(rt, "aten::pow.Tensor_Scalar", x, 2), torch.pow(x, 2))
    check(call(rt, "aten::pow.Tensor_Scalar", x, 0.5), torch.pow(x, 0.5))
    check(call(rt, "aten::pow.Scalar", 2.0, x), torch.pow(2.0, x))
    i = torch.tensor([1, 2, 3, 4], dtype=torch.int64)
    check(call(rt, "aten::pow.Tensor_Scalar", i, 3), torch.pow(i, 3))


def test_maximum_minimum_propagate_nan(rt):
    a = torch.tensor([1.0, float("nan"), 3.0])
    b = torch.tensor([2.0, 0.0, float("nan")])
    check(call(rt, "aten::maximum", a, b), torch.maximum(a, b))
    check(call(rt, "aten::minimum", a, b), torch.minimum(a, b))


CMP = {"eq": torch.eq, "ne": torch.ne, "lt": torch.lt, "le": torch.le, "gt": torch.gt, "ge": torch.ge}


@pytest.mark.parametrize("name", sorted(CMP))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32])
def test_comparisons(rt, name, dtype):
    a = _make(dtype, (3, 4))
    b = _make(dtype, (1, 4))
    b[0, 0] = a[0, 0]
    check(call(rt, f"aten::{name}.Tensor", a, b), CMP[name](a, b))
    check(call(rt, f"aten::{name}.Scalar", a, 1), CMP[name](a, 1))
    check(call(rt, f"aten::{name}.Scalar", a, 0.5), CMP[name](a, 0.5))


@pytest.mark.parametrize("name", ["logical_and", "logical_or", "logical_xor"])
def test_logical(rt, name):
    a = torch.tensor([[0.0, 1.0, -2.0], [0.0, 0.0, 3.0]])
    b = torch.tensor([1, 0, 5], dtype=torch.int32)
    fn = getattr(torch, name)
    check(call(rt, f"aten::{name}", a, b), fn(a, b))


def test_where(rt):
    c = torch.tensor([[True, False, True]])
    x = sample((2, 3), torch.float32)
    y = torch.tensor([1, 2, 3], dtype=torch.int64)
    check(call(rt, "aten::where.self", c, x, y), torch.where(c, x, y))
    check(call(rt, "aten::where.ScalarOther", c, x, 7.5), torch.where(c, x, 7.5))
    with pytest.raises(torchtpu.InvalidArgumentError, match="boolean"):
        call(rt, "aten::where.self", c.int(), x, x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64])
def test_clamp(rt, dtype):
    x = _make(dtype, (4, 5))
    check(call(rt, "aten::clamp", x, -1, 2), torch.clamp(x, -1, 2))
    check(call(rt, "aten::clamp", x, None, 1), torch.clamp(x, None, 1))
    check(call(rt, "aten::clamp_min", x, 0), torch.clamp_min(x, 0))
    lo, hi = _make(dtype, (5,)), _make(dtype, (4, 1)) + 3
    check(call(rt, "aten::clamp.Tensor", x, lo, hi), torch.clamp(x, lo, hi))
    check(call(rt, "aten::clamp_min.Tensor", x, lo), torch.clamp_min(x, lo))
    check(call(rt, "aten::clamp_max.Tensor", x, hi), torch.clamp_max(x, hi))
    with pytest.raises(torchtpu.InvalidArgumentError, match="At least one"):
        call(rt, "aten::clamp", x)


def test_clamp_float_bounds_on_int_promotes(rt):
    x = torch.tensor([1, 5, 9])
    check(call(rt, "aten::clamp", x, 2.5, 7.5), torch.clamp(x, 2.5, 7.5))


# ----------------------------------------------------------------- in place

def test_inplace_ops_return_and_update_self(rt):
    x = sample((3, 4), torch.float32)
    y = sample((4,), torch.float32)
    xt = tpu(rt, x)
    out = rt.call1("aten::add_.Tensor", xt, tpu(rt, y), 2)
    assert out.same_storage(xt)
    check(cpu(xt), x + 2 * y)
    rt.call("aten::relu_", xt)
    check(cpu(xt), torch.relu(x + 2 * y))
    rt.call("aten::mul_.Scalar", xt, 0.5)
    check(cpu(xt), torch.relu(x + 2 * y) * 0.5)


def test_inplace_cannot_change_dtype_category_or_broadcast_self(rt):
    i = tpu(rt, torch.tensor([1, 2, 3]))
    with pytest.raises(torchtpu.InvalidArgumentError, match="can't be cast"):
        rt.call("aten::mul_.Scalar", i, 1.5)
    small = tpu(rt, torch.ones(3))
    with pytest.raises(torchtpu.InvalidArgumentError, match="doesn't match the broadcast shape"):
        rt.call("aten::add_.Tensor", small, tpu(rt, torch.ones(2, 3)))
    # The failed calls changed nothing.
    check(cpu(i), torch.tensor([1, 2, 3]))
    check(cpu(small), torch.ones(3))


def test_inplace_int_tensor_with_float_result_rounds_via_copy(rt):
    x = tpu(rt, torch.tensor([1.7, -2.2, 3.9]))
    i = tpu(rt, torch.zeros(3, dtype=torch.int32))
    rt.call("aten::copy_", i, x)
    check(cpu(i), torch.tensor([1.7, -2.2, 3.9]).to(torch.int32))


# ------------------------------------------------------------- through views

def test_reads_of_non_contiguous_views(rt):
    base = sample((4, 6), torch.float32)
    b = tpu(rt, base)
    cases = [
        ((6, 4), (1, 6), 0),     # transpose
        ((2, 3), (12, 2), 1),    # every other column of every other row, offset
        ((4, 3), (6, 1), 3),     # right half: contiguous rows, strided block
        ((3, 3), (7, 1), 0),     # overlapping rows: a gather
        ((4, 6, 2), (6, 1, 0), 0),  # an expanded (stride 0) dim
    ]
    for sizes, strides, off in cases:
        v = view(rt, b, sizes, strides, off)
        want = torch.as_strided(base, sizes, strides, off)
        check(cpu(v), want)
        check(call(rt, "aten::exp", want), torch.exp(want))
        got = cpu(rt.call1("aten::mul.Tensor", v, v))
        check(got, want * want)


def test_writes_through_views_update_the_base(rt):
    base = sample((4, 6), torch.float32)
    b = tpu(rt, base)
    ref = base.clone()
    # add_ into a strided view.
    v = view(rt, b, (2, 3), (12, 2), 1)
    rt.call("aten::add_.Scalar", v, 10)
    torch.as_strided(ref, (2, 3), (12, 2), 1).add_(10)
    check(cpu(b), ref)
    # copy_ with broadcasting into a transposed view.
    src = torch.arange(4, dtype=torch.float32)
    t = view(rt, b, (6, 4), (1, 6), 0)
    rt.call("aten::copy_", t, tpu(rt, src))
    torch.as_strided(ref, (6, 4), (1, 6), 0).copy_(src)
    check(cpu(b), ref)
    # a general (gather/scatter) layout
    g = view(rt, b, (2, 2), (7, 2), 1)
    rt.call("aten::neg_", g)
    torch.as_strided(ref, (2, 2), (7, 2), 1).neg_()
    check(cpu(b), ref)
    # the view reads back the new values
    check(cpu(g), torch.as_strided(ref, (2, 2), (7, 2), 1))


def test_write_to_expanded_view_is_rejected(rt):
    b = tpu(rt, torch.zeros(3))
    e = view(rt, b, (2, 3), (0, 1), 0)
    with pytest.raises(torchtpu.InvalidArgumentError, match="single memory location"):
        rt.call("aten::add_.Scalar", e, 1)


def test_offset_change_does_not_recompile(rt):
    base = tpu(rt, torch.arange(20, dtype=torch.float32))
    outs = []
    before = None
    for off in range(5):
        v = view(rt, base, (4,), (1,), off + 1)
        outs.append(cpu(rt.call1("aten::mul.Scalar", v, 2)))
        if before is None:
            before = rt.stats()["compiles"]
    assert rt.stats()["compiles"] == before
    for off, o in enumerate(outs):
        check(o, torch.arange(off + 1, off + 5, dtype=torch.float32) * 2)


@pytest.mark.parametrize("db", [torch.complex64, torch.complex128, torch.float64, torch.float16, torch.int32,
                                torch.bool])
@pytest.mark.parametrize("op", ["add.Tensor", "sub.Tensor", "mul.Tensor", "div.Tensor"])
def test_complex_arithmetic_and_promotion(rt, db, op):
    """complex64 with every category: the result is complex, complex128
    when either side has 64-bit parts (torch.result_type)."""
    g = torch.Generator().manual_seed(1)
    a = torch.randn(3, 4, dtype=torch.complex64, generator=g)
    b = _make(db, (4,)) if not db.is_complex else torch.randn(4, dtype=db, generator=g)
    if op == "div.Tensor" and not db.is_complex:
        b = torch.ones_like(b) if db == torch.bool else torch.where(b == 0, torch.ones_like(b), b)
    fn = {"add.Tensor": torch.add, "sub.Tensor": torch.sub, "mul.Tensor": torch.mul, "div.Tensor": torch.div}[op]
    if op == "sub.Tensor" and db == torch.bool:
        with pytest.raises(torchtpu.InvalidArgumentError, match="with a bool tensor is not supported"):
            call(rt, f"aten::{op}", a, b)
        return
    want = fn(a, b)
    check(call(rt, f"aten::{op}", a, b), want, atol=1e-5, rtol=1e-5)
    check(call(rt, "aten::mul.Scalar", a, 2.5), a * 2.5, atol=1e-6, rtol=1e-6)
