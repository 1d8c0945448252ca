"""Matrix products against PyTorch CPU: mm, bmm, dot, mv, every matmul rank
case with batch broadcasting, linear, and addmm/baddbmm/addbmm/addmv with
runtime beta/alpha and bias broadcasting; f32/bf16/f16 and integer inputs,
empty inner dims, strided views, in-place forms, and error messages."""

import pytest
import torch

import torchtpu
from conftest import FLOATS, call, check, cpu, tol_for, tpu, view

torch.manual_seed(0)

DTYPES = FLOATS + [torch.int32, torch.int64]


def rt_has(name: str) -> bool:
    return bool(torchtpu._capi.lib.ttpu_op_exists(name.encode()))


needs_views = pytest.mark.skipif(not rt_has("aten::as_strided"), reason="aten::as_strided not in this build yet")


def sample(shape, dtype):
    if not dtype.is_floating_point:
        return torch.randint(-4, 5, shape, dtype=dtype)
    return torch.randn(shape).to(dtype)


def mtol(dtype):
    # f32 products at HIGHEST precision still sum in a different order.
    return tol_for(dtype, 1e-5) if dtype != torch.float32 else {"atol": 1e-5, "rtol": 1e-5}


@pytest.mark.parametrize("shapes", [((2, 3), (3, 5)), ((1, 7), (7, 1)), ((4, 0), (0, 3)), ((0, 2), (2, 3))])
@pytest.mark.parametrize("dtype", DTYPES)
def test_mm(rt, dtype, shapes):
    a, b = sample(shapes[0], dtype), sample(shapes[1], dtype)
    check(call(rt, "aten::mm", a, b), torch.mm(a, b), **mtol(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_bmm(rt, dtype):
    a, b = sample((3, 2, 4), dtype), sample((3, 4, 5), dtype)
    check(call(rt, "aten::bmm", a, b), torch.bmm(a, b), **mtol(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_dot_mv(rt, dtype):
    a, b = sample((6,), dtype), sample((6,), dtype)
    check(call(rt, "aten::dot", a, b), torch.dot(a, b), **mtol(dtype))
    m = sample((4, 6), dtype)
    check(call(rt, "aten::mv", m, a), torch.mv(m, a), **mtol(dtype))


MATMUL_SHAPES = [
    ((4,), (4,)),  # dot
    ((3, 4), (4,)),  # mv
    ((4,), (4, 5)),  # vector @ matrix
    ((3, 4), (4, 5)),  # mm
    ((2, 3, 4), (4, 5)),  # batched @ matrix
    ((2, 3, 4), (4,)),  # batched @ vector
    ((4,), (2, 4, 5)),  # vector @ batched
    ((3, 4), (2, 4, 5)),  # matrix @ batched
    ((2, 3, 4), (2, 4, 5)),  # bmm
    ((2, 1, 3, 4), (5, 4, 6)),  # broadcast batch dims
    ((1, 3, 4), (2, 2, 4, 6)),
    ((2, 3, 0), (0, 5)),  # empty inner dim
]


@pytest.mark.parametrize("shapes", MATMUL_SHAPES, ids=lambda s: f"{s[0]}@{s[1]}")
@pytest.mark.parametrize("dtype", DTYPES)
def test_matmul(rt, dtype, shapes):
    a, b = sample(shapes[0], dtype), sample(shapes[1], dtype)
    check(call(rt, "aten::matmul", a, b), torch.matmul(a, b), **mtol(dtype))


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("in_shape", [(5,), (3, 5), (2, 3, 5)])
@pytest.mark.parametrize("dtype", FLOATS)
def test_linear(rt, dtype, in_shape, bias):
    x, w = sample(in_shape, dtype), sample((4, 5), dtype)
    b = sample((4,), dtype) if bias else None
    check(call(rt, "aten::linear", x, w, b), torch.nn.functional.linear(x, w, b), **mtol(dtype))


def test_linear_vector_weight(rt):
    F = torch.nn.functional
    x, w, b = sample((2, 3, 5), torch.float32), sample((5,), torch.float32), sample((), torch.float32)
    check(call(rt, "aten::linear", x, w, b), F.linear(x, w, b), **mtol(torch.float32))
    check(call(rt, "aten::linear", x[0], w), F.linear(x[0], w), **mtol(torch.float32))
    check(call(rt, "aten::linear", x[0, 0], w, b), F.linear(x[0, 0], w, b), **mtol(torch.float32))


@pytest.mark.parametrize("bias_shape", [(2, 5), (5,), (1, 5), (2, 1), ()])
@pytest.mark.parametrize("dtype", FLOATS)
def test_addmm(rt, dtype, bias_shape):
    s, a, b = sample(bias_shape, dtype), sample((2, 3), dtype), sample((3, 5), dtype)
    check(call(rt, "aten::addmm", s, a, b), torch.addmm(s, a, b), **mtol(dtype))
    check(call(rt, "aten::addmm", s, a, b, 0.5, -2.0), torch.addmm(s, a, b, beta=0.5, alpha=-2.0), **mtol(dtype))


def test_addmm_scalars_are_runtime_and_beta_zero_ignores_input(rt):
    s = torch.full((2, 5), float("nan"))
    a, b = sample((2, 3), torch.float32), sample((3, 5), torch.float32)
    before = rt.stats()["compiles"]
    for beta, alpha in [(0, 1), (0.0, 3.0), (0, -1.5)]:
        check(call(rt, "aten::addmm", s, a, b, beta, alpha), torch.addmm(s, a, b, beta=beta, alpha=alpha), **mtol(torch.float32))
    # One program per scalar kind (int/float), not per value.
    assert rt.stats()["compiles"] - before <= 2


def test_addmm_ints(rt):
    s, a, b = (sample(sh, torch.int64) for sh in [(5,), (2, 3), (3, 5)])
    check(call(rt, "aten::addmm", s, a, b, 3, 2), torch.addmm(s, a, b, beta=3, alpha=2))


def test_addmm_inplace(rt):
    s, a, b = sample((2, 5), torch.float32), sample((2, 3), torch.float32), sample((3, 5), torch.float32)
    t = tpu(rt, s)
    out = rt.call("aten::addmm_", t, tpu(rt, a), tpu(rt, b), 2.0, 0.5)
    assert out[0].same_storage(t)
    check(cpu(t), s.clone().addmm_(a, b, beta=2.0, alpha=0.5), **mtol(torch.float32))


@pytest.mark.parametrize("dtype", FLOATS)
def test_baddbmm_addbmm_addmv(rt, dtype):
    s, a, b = sample((3, 1, 5), dtype), sample((3, 2, 4), dtype), sample((3, 4, 5), dtype)
    tol = mtol(dtype)
    check(call(rt, "aten::baddbmm", s, a, b, 0.5, 2), torch.baddbmm(s, a, b, beta=0.5, alpha=2), **tol)
    s2 = sample((2, 5), dtype)
    check(call(rt, "aten::addbmm", s2, a, b), torch.addbmm(s2, a, b), **(tol if dtype == torch.float32 else tol_for(dtype, 1e-5) | {"atol": 5e-2}))
    v, m, x = sample((4,), dtype), sample((4, 6), dtype), sample((6,), dtype)
    check(call(rt, "aten::addmv", v, m, x, 2, -1), torch.addmv(v, m, x, beta=2, alpha=-1), **tol)
    t = tpu(rt, v)
    rt.call("aten::addmv_", t, tpu(rt, m), tpu(rt, x))
    check(cpu(t), v.clone().addmv_(m, x), **tol)


# ------------------------------------------------------------------ errors


def raises(rt, pattern, name, *args):
    with pytest.raises(torchtpu.InvalidArgumentError, match=pattern):
        call(rt, name, *args)


def test_errors_name_op_and_shapes(rt):
    f = torch.ones
    raises(rt, r"aten::mm: mat1 and mat2 shapes cannot be multiplied \(2x3 and 4x5\)", "aten::mm", f(2, 3), f(4, 5))
    raises(rt, r"aten::mm: self must be a matrix, got 1-D", "aten::mm", f(3), f(3, 5))
    raises(rt, r"aten::mm: expected m1 and m2 to have the same dtype.*float32 != float16", "aten::mm",
           f(2, 3), f(3, 5, dtype=torch.float16))
    raises(rt, r"aten::bmm: Expected size for first two dimensions of batch2 tensor to be: \[2, 3\] but got: \[2, 4\]"
           r".*\[2, 2, 3\].*\[2, 4, 5\]", "aten::bmm", f(2, 2, 3), f(2, 4, 5))
    raises(rt, r"aten::bmm: batch1 must be a 3D tensor", "aten::bmm", f(2, 3), f(3, 5))
    raises(rt, r"aten::dot: inconsistent tensor size, expected tensor \[3\] and src \[4\]", "aten::dot", f(3), f(4))
    raises(rt, r"aten::dot: 1D tensors expected, but got 2D and 1D", "aten::dot", f(3, 1), f(3))
    raises(rt, r"aten::mv: size mismatch, got input \(2\), mat \(2x3\), vec \(4\)", "aten::mv", f(2, 3), f(4))
    raises(rt, r"aten::matmul: mat1 and mat2 shapes cannot be multiplied \(2x2x3 and 4x5\)", "aten::matmul",
           f(2, 2, 3), f(4, 5))
    raises(rt, r"aten::matmul: mat1 and mat2 shapes cannot be multiplied \(3 and 4x5\)", "aten::matmul", f(3), f(4, 5))
    raises(rt, r"aten::matmul: mat1 and mat2 shapes cannot be multiplied \(2x3 and 4x5\)", "aten::matmul",
           f(2, 3), f(4, 5))
    raises(rt, r"aten::matmul: size mismatch, got input \(2\), mat \(2x3\), vec \(4\)", "aten::matmul", f(2, 3), f(4))
    raises(rt, r"aten::matmul: inconsistent tensor size", "aten::matmul", f(3), f(4))
    raises(rt, r"aten::matmul: The size of tensor a \(2\) must match the size of tensor b \(3\).*\[2\].*\[3\]",
           "aten::matmul", f(2, 2, 3), f(3, 3, 5))
    raises(rt, r"aten::matmul: both arguments to matmul need to be at least 1D, but they are 0D and 2D",
           "aten::matmul", f(()), f(4, 5))
    raises(rt, r"aten::linear: mat1 and mat2 shapes cannot be multiplied \(6x3 and 4x5\).*\[2, 3, 3\].*\[5, 4\]",
           "aten::linear", f(2, 3, 3), f(5, 4))
    raises(rt, r"aten::linear: The expanded size of the tensor \(5\) must match the existing size \(4\).*"
           r"Target sizes: \[2, 5\].*Tensor sizes: \[4\]", "aten::linear", f(2, 3), f(5, 3), f(4))
    raises(rt, r"aten::addmm: mat1 and mat2 shapes cannot be multiplied \(2x3 and 4x5\)", "aten::addmm",
           f(5), f(2, 3), f(4, 5))
    raises(rt, r"aten::addmm: The expanded size.*Target sizes: \[2, 5\].*Tensor sizes: \[3\]", "aten::addmm",
           f(3), f(2, 3), f(3, 5))
    raises(rt, r"aten::addmm: self and mat2 must have the same dtype, but got float16 and float32", "aten::addmm",
           f(5, dtype=torch.float16), f(2, 3), f(3, 5))
    raises(rt, r"aten::addmv: size mismatch, got input \(5\), mat \(2x3\), vec \(4\)", "aten::addmv",
           f(5), f(2, 3), f(4))
    raises(rt, r"aten::mm: .*bool", "aten::mm", f(2, 3, dtype=torch.bool), f(3, 5, dtype=torch.bool))


def test_addmm_inplace_shape_error(rt):
    t = tpu(rt, torch.ones(5))
    with pytest.raises(torchtpu.InvalidArgumentError, match=r"aten::addmm_.*\[5\].*\[2, 5\]"):
        rt.call("aten::addmm_", t, tpu(rt, torch.ones(2, 3)), tpu(rt, torch.ones(3, 5)))


# -------------------------------------------------------------- strided views


@needs_views
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_products_of_views(rt, dtype):
    base = torch.randn(6, 10).to(dtype)
    d = tpu(rt, base)
    # A transposed [10, 6] and a column-strided [3, 4] view.
    dt, ct = view(rt, d, (10, 6), (1, 10)), base.as_strided((10, 6), (1, 10))
    ds, cs = view(rt, d, (3, 4), (20, 2), 11), base.as_strided((3, 4), (20, 2), 11)
    w = sample((6, 4), dtype)
    check(cpu(rt.call1("aten::mm", dt, tpu(rt, w))), torch.mm(ct, w), **mtol(dtype))
    check(cpu(rt.call1("aten::matmul", ds, tpu(rt, w.T.contiguous()))), torch.matmul(cs, w.T), **mtol(dtype))
    x = sample((2, 6), dtype)
    check(cpu(rt.call1("aten::linear", tpu(rt, x), dt)), torch.nn.functional.linear(x, ct), **mtol(dtype))
