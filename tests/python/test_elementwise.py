"""Elementwise ops against PyTorch CPU: unary, binary with broadcasting and
type promotion, comparisons, logical ops, where, clamp; in-place variants and
writes through views."""

import math

import pytest
import torch

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
