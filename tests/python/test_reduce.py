"""Reductions against PyTorch CPU: sum/mean/prod (dtype argument, int
widening), amax/amin, max/min (with indices), argmax/argmin (ties, NaN),
var/std (+ _mean, corrections), logsumexp, all/any, vector norms, and the
scans cumsum/cumprod; dims negative / lists / None / empty, keepdim both
ways, 0-dim and empty inputs, strided views, and error messages."""

import math

import pytest
import torch

import torchtpu
from conftest import FLOATS, call, check, cpu, tol_for, tpu, view

torch.manual_seed(0)

INTS = [torch.int32, torch.int64, torch.uint8, torch.bool]
# (dim argument, keepdim) cases over a rank-3 input.
DIMS = [None, [], 1, -1, [0, 2], [-1, 0], [0, 1, 2]]


def rt_has(name: str) -> bool:
    return bool(torchtpu._capi.lib.ttpu_op_exists(name.encode()))


needs_views = pytest.mark.skipif(not rt_has("aten::as_strided"), reason="aten::as_strided not in this build yet")


def sample(shape, dtype):
    if dtype == torch.bool:
        return torch.rand(shape) > 0.5
    if not dtype.is_floating_point:
        lo = 0 if dtype == torch.uint8 else -5
        return torch.randint(lo, 6, shape, dtype=dtype)
    return torch.randn(shape).to(dtype)


def torch_dim(dim):
    """PyTorch's Python API spells "all dims" as None or ()."""
    return tuple(dim) if isinstance(dim, list) else dim


def sum_tol(dtype):
    # Sums round once from f32; allow for the different summation order.
    return tol_for(dtype, 1e-5)


# ---------------------------------------------------------------- sum/mean/prod


@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("dim", DIMS)
@pytest.mark.parametrize("dtype", FLOATS + [torch.int32, torch.bool])
def test_sum_dim(rt, dtype, dim, keepdim):
    x = sample((2, 3, 4), dtype)
    want = torch.sum(x, torch_dim(dim) if dim is not None else (), keepdim=keepdim)
    check(call(rt, "aten::sum.dim_IntList", x, dim, keepdim), want, **sum_tol(dtype))


@pytest.mark.parametrize("dtype", FLOATS + INTS)
def test_sum_all(rt, dtype):
    x = sample((3, 5), dtype)
    check(call(rt, "aten::sum", x), torch.sum(x), **sum_tol(dtype))


@pytest.mark.parametrize("out", [torch.float32, torch.float16, torch.int64, torch.int32])
def test_sum_dtype_argument(rt, out):
    x = sample((3, 4), torch.float32) * 4 if out.is_floating_point else sample((3, 4), torch.int32)
    check(call(rt, "aten::sum.dim_IntList", x, [1], False, out), torch.sum(x, 1, dtype=out), **sum_tol(out))
    check(call(rt, "aten::sum", x, out), torch.sum(x, dtype=out), **sum_tol(out))


def test_sum_half_accumulates_in_f32(rt):
    # 4096 ones in bf16 would stop growing at 256 with bf16 accumulation.
    x = torch.ones(4096, dtype=torch.bfloat16)
    check(call(rt, "aten::sum", x), torch.sum(x))


def test_sum_zero_dim_and_empty(rt):
    s = torch.tensor(2.5)
    check(call(rt, "aten::sum.dim_IntList", s, [0], True), torch.sum(s, 0, keepdim=True))
    check(call(rt, "aten::sum.dim_IntList", s, [-1], False), torch.sum(s, -1))
    e = torch.empty(2, 0, 3)
    check(call(rt, "aten::sum.dim_IntList", e, [1], False), torch.sum(e, 1))
    check(call(rt, "aten::sum.dim_IntList", e, [2], True), torch.sum(e, 2, keepdim=True))
    check(call(rt, "aten::sum", e), torch.sum(e))
    check(call(rt, "aten::prod", e), torch.prod(e))
    check(call(rt, "aten::mean.dim", e, [1], False), torch.mean(e, 1))


def test_nansum(rt):
    x = torch.tensor([[1.0, float("nan"), 2.0], [float("nan"), float("nan"), 3.0]])
    check(call(rt, "aten::nansum", x, [1]), torch.nansum(x, 1))
    check(call(rt, "aten::nansum", x), torch.nansum(x))


@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("dim", DIMS)
@pytest.mark.parametrize("dtype", FLOATS)
def test_mean_dim(rt, dtype, dim, keepdim):
    x = sample((2, 3, 4), dtype)
    want = torch.mean(x, torch_dim(dim) if dim is not None else (), keepdim=keepdim)
    check(call(rt, "aten::mean.dim", x, dim, keepdim), want, **tol_for(dtype))


def test_mean_all_and_dtype(rt):
    x = sample((3, 4), torch.float16)
    check(call(rt, "aten::mean", x), torch.mean(x), **tol_for(torch.float16))
    i = torch.arange(12, dtype=torch.int64).reshape(3, 4)
    check(call(rt, "aten::mean", i, torch.float32), torch.mean(i, dtype=torch.float32))
    check(call(rt, "aten::mean.dim", i, [0], True, torch.float32), torch.mean(i, 0, True, dtype=torch.float32))


def test_mean_int_is_an_error(rt):
    i = torch.arange(6, dtype=torch.int64)
    with pytest.raises(torchtpu.InvalidArgumentError, match=r"aten::mean.*could not infer output dtype.*int64"):
        call(rt, "aten::mean", i)
    with pytest.raises(torchtpu.InvalidArgumentError, match=r"aten::mean.dim.*Optional dtype.*int32"):
        call(rt, "aten::mean.dim", i.float(), [0], False, torch.int32)


@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("dim", [0, -1, 1])
@pytest.mark.parametrize("dtype", FLOATS + INTS)
def test_prod_dim(rt, dtype, dim, keepdim):
    x = sample((3, 4), dtype)
    if dtype.is_floating_point:
        x = (x.float() * 0.5 + 1).to(dtype)
    check(call(rt, "aten::prod.dim_int", x, dim, keepdim), torch.prod(x, dim, keepdim), **tol_for(dtype, 1e-5))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32, torch.bool])
def test_prod_all(rt, dtype):
    x = sample((2, 3), dtype)
    check(call(rt, "aten::prod", x), torch.prod(x), **tol_for(dtype))
    check(call(rt, "aten::prod", x, torch.float64), torch.prod(x, dtype=torch.float64))


# ------------------------------------------------------------------- extrema


@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("dim", [[], 0, -1, [0, 2], [2, -2]])
@pytest.mark.parametrize("name", ["amax", "amin"])
@pytest.mark.parametrize("dtype", FLOATS + INTS)
def test_amax_amin(rt, name, dtype, dim, keepdim):
    x = sample((2, 3, 4), dtype)
    want = getattr(torch, name)(x, torch_dim(dim), keepdim)
    check(call(rt, f"aten::{name}", x, dim, keepdim), want)


@pytest.mark.parametrize("name", ["amax", "amin", "max", "min"])
def test_extrema_propagate_nan(rt, name):
    x = torch.tensor([[1.0, float("nan"), 3.0], [4.0, 5.0, -1.0]])
    if name in ("amax", "amin"):
        check(call(rt, f"aten::{name}", x, [1]), getattr(torch, name)(x, 1))
    else:
        check(call(rt, f"aten::{name}", x), getattr(torch, name)(x))


@pytest.mark.parametrize("name", ["max", "min"])
@pytest.mark.parametrize("dtype", FLOATS + INTS)
def test_max_min_all(rt, name, dtype):
    x = sample((3, 4), dtype)
    check(call(rt, f"aten::{name}", x), getattr(torch, name)(x))


@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("name", ["max", "min"])
@pytest.mark.parametrize("dtype", FLOATS + INTS)
def test_max_min_dim(rt, name, dtype, dim, keepdim):
    # Small integer range: plenty of ties, which must pick the first index.
    x = torch.randint(0, 3, (4, 5)).to(dtype)
    values, indices = call(rt, f"aten::{name}.dim", x, dim, keepdim)
    want = getattr(torch, name)(x, dim, keepdim)
    check(values, want.values)
    check(indices, want.indices)


def test_max_dim_nan_and_zero_dim(rt):
    x = torch.tensor([[1.0, float("nan"), 7.0, float("nan")], [2.0, 9.0, 9.0, -1.0]])
    for name in ("max", "min"):
        v, i = call(rt, f"aten::{name}.dim", x, 1)
        want = getattr(torch, name)(x, 1)
        check(v, want.values)
        check(i, want.indices)
    s = torch.tensor(3.0)
    v, i = call(rt, "aten::max.dim", s, 0, True)
    want = torch.max(s, 0, True)
    check(v, want.values)
    check(i, want.indices)


@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("dim", [None, 0, 1, -1])
@pytest.mark.parametrize("name", ["argmax", "argmin"])
@pytest.mark.parametrize("dtype", FLOATS + [torch.int32, torch.uint8])
def test_argmax_argmin(rt, name, dtype, dim, keepdim):
    x = torch.randint(0, 4, (3, 5)).to(dtype)
    check(call(rt, f"aten::{name}", x, dim, keepdim), getattr(torch, name)(x, dim, keepdim))


@pytest.mark.parametrize("name", ["argmax", "argmin"])
def test_argmax_nan_infs_and_zero_dim(rt, name):
    x = torch.tensor([[1.0, float("nan"), 0.0, float("nan")], [float("-inf"), float("inf"), float("inf"), 0.0]])
    check(call(rt, f"aten::{name}", x, 1), getattr(torch, name)(x, 1))
    check(call(rt, f"aten::{name}", x), getattr(torch, name)(x))
    allneg = torch.full((2, 3), float("-inf"))
    check(call(rt, f"aten::{name}", allneg, 1), getattr(torch, name)(allneg, 1))
    s = torch.tensor(4.0)
    check(call(rt, f"aten::{name}", s, None, True), getattr(torch, name)(s, None, True))
    check(call(rt, f"aten::{name}", s, 0), getattr(torch, name)(s, 0))


def test_aminmax(rt):
    x = sample((3, 4), torch.float32)
    lo, hi = call(rt, "aten::aminmax", x, 1, True)
    want = torch.aminmax(x, dim=1, keepdim=True)
    check(lo, want.min)
    check(hi, want.max)
    lo, hi = call(rt, "aten::aminmax", x)
    want = torch.aminmax(x)
    check(lo, want.min)
    check(hi, want.max)


def test_extrema_errors(rt):
    e = torch.empty(2, 0)
    with pytest.raises(torchtpu.InvalidArgumentError, match=r"aten::amax.*reduction dim 1.*non-zero size.*\[2, 0\]"):
        call(rt, "aten::amax", e, [1])
    check(call(rt, "aten::amax", e, [0]), torch.amax(e, 0))
    with pytest.raises(torchtpu.InvalidArgumentError, match=r"aten::max.*numel\(\) == 0.*\[2, 0\]"):
        call(rt, "aten::max", e)
    with pytest.raises(torchtpu.InvalidArgumentError, match=r"aten::max.dim.*reduction dim 1.*non-zero"):
        call(rt, "aten::max.dim", e, 1)
    with pytest.raises(torchtpu.InvalidArgumentError, match=r"aten::argmax.*numel\(\) == 0"):
        call(rt, "aten::argmax", e)
    check(call(rt, "aten::argmax", e, 0), torch.argmax(e, 0))
    with pytest.raises(torchtpu.InvalidArgumentError, match=r"aten::argmax.*bool"):
        call(rt, "aten::argmax", torch.tensor([True, False]))
    with pytest.raises(torchtpu.InvalidArgumentError, match=r"aten::amin.*Dimension out of range.*got 3"):
        call(rt, "aten::amin", torch.ones(2, 3), [3])


# ------------------------------------------------------------------ var/std


@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("correction", [None, 0, 1, 2.5])
@pytest.mark.parametrize("dim", [None, 1, [0, -1]])
@pytest.mark.parametrize("name", ["var", "std"])
@pytest.mark.parametrize("dtype", FLOATS)
def test_var_std_correction(rt, name, dtype, dim, correction, keepdim):
    x = sample((3, 4, 5), dtype)
    want = getattr(torch, name)(x, torch_dim(dim), correction=correction, keepdim=keepdim)
    got = call(rt, f"aten::{name}.correction", x, dim, correction, keepdim)
    check(got, want, **tol_for(dtype, 1e-5))


@pytest.mark.parametrize("name", ["var_mean", "std_mean"])
@pytest.mark.parametrize("dtype", FLOATS)
def test_var_std_mean(rt, name, dtype):
    x = sample((4, 6), dtype)
    a, b = call(rt, f"aten::{name}.correction", x, [1], 0, True)
    wa, wb = getattr(torch, name)(x, 1, correction=0, keepdim=True)
    check(a, wa, **tol_for(dtype))
    check(b, wb, **tol_for(dtype))
    a, b = call(rt, f"aten::{name}", x, False)
    wa, wb = getattr(torch, name)(x, unbiased=False)
    check(a, wa, **tol_for(dtype))
    check(b, wb, **tol_for(dtype))


@pytest.mark.parametrize("unbiased", [True, False])
def test_var_std_unbiased_overloads(rt, unbiased):
    x = sample((3, 5), torch.float32)
    check(call(rt, "aten::var", x, unbiased), torch.var(x, unbiased=unbiased))
    check(call(rt, "aten::std.dim", x, [-1], unbiased, True), torch.std(x, -1, unbiased=unbiased, keepdim=True))
    a, b = call(rt, "aten::var_mean.dim", x, [0], unbiased)
    wa, wb = torch.var_mean(x, 0, unbiased=unbiased)
    check(a, wa)
    check(b, wb)


@pytest.mark.filterwarnings("ignore")
def test_var_degenerate(rt):
    # N - correction <= 0 divides by zero: NaN for 0/0, inf otherwise.
    one = torch.tensor([[2.0], [3.0]])
    check(call(rt, "aten::var.correction", one, [1]), torch.var(one, 1))
    two = torch.tensor([1.0, 2.0])
    check(call(rt, "aten::var.correction", two, None, 3), torch.var(two, correction=3))
    check(call(rt, "aten::std.correction", torch.tensor(5.0), None, 0), torch.std(torch.tensor(5.0), correction=0))
    with pytest.raises(torchtpu.InvalidArgumentError, match=r"aten::var.correction.*floating point.*int64"):
        call(rt, "aten::var.correction", torch.arange(4))


def test_var_large_offset_is_stable(rt):
    # A one-pass formula (E[x^2] - E[x]^2) would lose everything to
    # cancellation here: its error would be about the size of 1e8 * 2^-24,
    # ten thousand times the variance. A two-pass formula in float32 is off
    # only by the squared rounding error of the mean (a few percent at most).
    x = torch.randn(64, generator=torch.Generator().manual_seed(0)) * 0.01 + 1e4
    want = torch.var(x.double()).float()
    check(call(rt, "aten::var.correction", x), want, rtol=5e-2, atol=1e-7)


# ----------------------------------------------------------------- logsumexp


@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("dim", [1, -1, [0, 2], [0, 1, 2]])
@pytest.mark.parametrize("dtype", FLOATS)
def test_logsumexp(rt, dtype, dim, keepdim):
    x = (sample((2, 3, 4), dtype).float() * 10).to(dtype)
    want = torch.logsumexp(x, torch_dim(dim), keepdim)
    check(call(rt, "aten::logsumexp", x, dim, keepdim), want, **tol_for(dtype))


def test_logsumexp_infinities_and_ints(rt):
    x = torch.tensor([[float("-inf")] * 3, [float("inf"), 1.0, 2.0], [1000.0, 1000.0, -1000.0],
                      [float("nan"), 1.0, 0.0]])
    check(call(rt, "aten::logsumexp", x, [1]), torch.logsumexp(x, 1))
    i = torch.arange(6, dtype=torch.int32).reshape(2, 3)
    check(call(rt, "aten::logsumexp", i, [1]), torch.logsumexp(i, 1))
    e = torch.empty(2, 0)
    check(call(rt, "aten::logsumexp", e, [1]), torch.logsumexp(e, 1))


# ------------------------------------------------------------------ all/any


@pytest.mark.parametrize("name", ["all", "any"])
@pytest.mark.parametrize("dtype", [torch.bool, torch.uint8, torch.int32, torch.float32, torch.bfloat16])
def test_all_any(rt, name, dtype):
    x = (torch.rand(3, 4) > 0.3).to(dtype)
    x[1] = 1
    x[2] = 0
    f = getattr(torch, name)
    check(call(rt, f"aten::{name}", x), f(x))
    for dim in (0, 1, -1):
        for keepdim in (False, True):
            check(call(rt, f"aten::{name}.dim", x, dim, keepdim), f(x, dim, keepdim))
    check(call(rt, f"aten::{name}.dims", x, [0, 1], True), getattr(torch.ops.aten, name).dims(x, [0, 1], True))
    check(call(rt, f"aten::{name}.dims", x, None), getattr(torch.ops.aten, name).dims(x, None))
    e = torch.empty(0, 3, dtype=dtype)
    check(call(rt, f"aten::{name}.dim", e, 0), f(e, 0))


def test_count_nonzero(rt):
    x = torch.tensor([[0.0, 1.0, 2.0], [0.0, 0.0, -1.0]])
    check(call(rt, "aten::count_nonzero.dim_IntList", x, [1]), torch.count_nonzero(x, 1))
    check(call(rt, "aten::count_nonzero.dim_IntList", x, [0, 1]), torch.count_nonzero(x, (0, 1)))


# ------------------------------------------------------------------- norms


@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("dim", [None, 1, [0, -1]])
@pytest.mark.parametrize("ord", [2, 1, 0, 3.5, -1, math.inf, -math.inf])
@pytest.mark.parametrize("dtype", FLOATS)
def test_vector_norm(rt, dtype, ord, dim, keepdim):
    x = sample((3, 4, 2), dtype)
    x[0, 0, 0] = 0
    want = torch.linalg.vector_norm(x, ord, torch_dim(dim), keepdim)
    got = call(rt, "aten::linalg_vector_norm", x, ord, dim, keepdim)
    check(got, want, **tol_for(dtype, 1e-5))


def test_norm_overloads_and_dtype(rt):
    x = sample((3, 4), torch.float32)
    check(call(rt, "aten::norm.Scalar", x), torch.norm(x))
    check(call(rt, "aten::norm.Scalar", x, 1), torch.norm(x, 1))
    check(call(rt, "aten::norm.ScalarOpt_dim", x, 3, [1], True), torch.norm(x, 3, 1, True))
    check(call(rt, "aten::norm.ScalarOpt_dim", x, None, [0]), torch.norm(x, None, 0))
    h = sample((3, 4), torch.float16)
    want = torch.linalg.vector_norm(h, 2, 1, dtype=torch.float32)
    check(call(rt, "aten::linalg_vector_norm", h, 2, [1], False, torch.float32), want)
    with pytest.raises(torchtpu.InvalidArgumentError, match=r"aten::linalg_vector_norm.*floating point.*int64"):
        call(rt, "aten::linalg_vector_norm", torch.arange(3))
    with pytest.raises(torchtpu.InvalidArgumentError, match=r"aten::linalg_vector_norm.*empty.*\[0, 3\]"):
        call(rt, "aten::linalg_vector_norm", torch.empty(0, 3), math.inf)


# ------------------------------------------------------------------ scans


@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("name", ["cumsum", "cumprod"])
@pytest.mark.parametrize("dtype", FLOATS + INTS)
def test_cumsum_cumprod(rt, name, dtype, dim):
    x = sample((3, 5), dtype)
    if name == "cumprod" and dtype.is_floating_point:
        x = (x.float() * 0.3 + 1).to(dtype)
    want = getattr(torch, name)(x, dim)
    check(call(rt, f"aten::{name}", x, dim), want, **tol_for(dtype, 1e-5))


def test_cumsum_dtype_zero_dim_empty_and_long(rt):
    x = sample((2, 6), torch.int32)
    check(call(rt, "aten::cumsum", x, 1, torch.float32), torch.cumsum(x, 1, dtype=torch.float32))
    s = torch.tensor(3.0)
    check(call(rt, "aten::cumsum", s, 0), torch.cumsum(s, 0))
    check(call(rt, "aten::cumsum", s, -1), torch.cumsum(s, -1))
    e = torch.empty(0, 4)
    check(call(rt, "aten::cumsum", e, 0), torch.cumsum(e, 0))
    long = torch.randn(300)
    check(call(rt, "aten::cumsum", long, 0), torch.cumsum(long, 0), atol=1e-4, rtol=1e-5)
    with pytest.raises(torchtpu.InvalidArgumentError, match=r"aten::cumsum.*Dimension out of range.*got 2"):
        call(rt, "aten::cumsum", x, 2)


def test_cumsum_inplace(rt):
    x = torch.randint(-3, 4, (3, 4), dtype=torch.int32)
    t = tpu(rt, x)
    out = rt.call("aten::cumsum_", t, 1)
    assert out[0].same_storage(t)
    check(cpu(t), x.clone().cumsum_(1))
    f = torch.randn(5)
    t = tpu(rt, f)
    rt.call("aten::cumprod_", t, 0)
    check(cpu(t), f.clone().cumprod_(0))


# ----------------------------------------------------------- errors, dims


def test_dim_errors(rt):
    x = torch.ones(2, 3)
    with pytest.raises(torchtpu.InvalidArgumentError, match=r"aten::sum.dim_IntList.*Dimension out of range"):
        call(rt, "aten::sum.dim_IntList", x, [2])
    with pytest.raises(torchtpu.InvalidArgumentError, match=r"aten::sum.dim_IntList.*dim 0 appears multiple times"):
        call(rt, "aten::sum.dim_IntList", x, [0, -2])
    with pytest.raises(torchtpu.InvalidArgumentError, match=r"aten::prod.dim_int.*Dimension out of range"):
        call(rt, "aten::prod.dim_int", x, -3)
    with pytest.raises(torchtpu.InvalidArgumentError, match=r"aten::max.dim.*Dimension out of range"):
        call(rt, "aten::max.dim", torch.tensor(1.0), 1)


# -------------------------------------------------------------- strided views


def strided_case(rt, kind):
    """(device view, matching CPU view) over the same base data."""
    base = torch.randn(6, 10)
    sizes, strides, offset = {
        "transposed": ((10, 6), (1, 10), 0),
        "sliced": ((3, 4), (20, 2), 11),
        "expanded": ((4, 5), (0, 1), 3),
    }[kind]
    return view(rt, tpu(rt, base), sizes, strides, offset), base.as_strided(sizes, strides, offset)


@needs_views
@pytest.mark.parametrize("kind", ["transposed", "sliced", "expanded"])
def test_reductions_of_views(rt, kind):
    dv, cv = strided_case(rt, kind)
    out = rt.call1("aten::sum.dim_IntList", dv, [0], True)
    check(cpu(out), cv.sum(0, keepdim=True), **sum_tol(torch.float32))
    check(cpu(rt.call1("aten::amax", dv, [-1])), cv.amax(-1))
    check(cpu(rt.call1("aten::argmin", dv, 1)), cv.argmin(1))
    check(cpu(rt.call1("aten::var.correction", dv, [1])), cv.var(1))
    check(cpu(rt.call1("aten::cumsum", dv, 0)), cv.cumsum(0), atol=1e-5, rtol=1e-5)
    check(cpu(rt.call1("aten::logsumexp", dv, [0, 1])), torch.logsumexp(cv, (0, 1)))
