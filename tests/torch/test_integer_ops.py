"""Integer ops against the CPU: shifts by any amount (negative, past the
width) in every integer type, gcd and lcm (including wrap-around), the
shift operators, bincount (weights, minlength, empty input, the error for a
negative value) and triu/tril_indices over offsets that empty or fill the
triangle."""

from __future__ import annotations

import pytest
import torch


def _same(got, want):
    got = got.cpu()
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert torch.equal(got, want), (got, want)


def _t(x):
    return x.to("tpu")


@pytest.mark.parametrize("dtype", [torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64])
def test_shifts_gcd_lcm(dtype):
    g = torch.Generator().manual_seed(0)
    lo = 0 if dtype == torch.uint8 else -100
    a = torch.randint(lo, 100, (300,), generator=g).to(dtype)
    b = torch.randint(-3 if dtype != torch.uint8 else 0, 70, (300,), generator=g).to(dtype)
    for fn in (torch.bitwise_left_shift, torch.bitwise_right_shift, torch.gcd, torch.lcm):
        _same(fn(_t(a), _t(b)), fn(a, b))
    _same(torch.bitwise_left_shift(_t(a), 3), torch.bitwise_left_shift(a, 3))
    _same(torch.bitwise_right_shift(_t(a), 2), torch.bitwise_right_shift(a, 2))
    _same(_t(a) << 2, a << 2)
    _same(_t(a) >> _t(b), a >> b)


def test_gcd_edges_and_in_place():
    a, b = torch.tensor([0, -4, 12, -2**63, 7]), torch.tensor([0, 6, -18, 0, 0])
    _same(torch.gcd(_t(a), _t(b)), torch.gcd(a, b))
    _same(torch.lcm(_t(a), _t(b)), torch.lcm(a, b))
    x = _t(torch.tensor([12, 18]))
    x.gcd_(_t(torch.tensor([8, 27])))
    _same(x, torch.tensor([4, 9]))  # by hand
    y = _t(torch.tensor([1, -8]))
    y <<= 3
    _same(y, torch.tensor([8, -64]))
    _same(torch.bitwise_left_shift(3, _t(torch.tensor([2, 70]))), torch.tensor([12, 0]))


def test_shifts_refuse_floats():
    with pytest.raises(RuntimeError, match="lshift_cpu\" not implemented for 'float32'"):
        torch.bitwise_left_shift(_t(torch.ones(2)), 1)


def test_bincount():
    x, w = torch.tensor([0, 2, 2, 5, 1]), torch.tensor([1.0, 2.0, 3.0, 0.5, 2.0])
    _same(torch.bincount(_t(x)), torch.tensor([1, 1, 2, 0, 0, 1]))  # by hand
    _same(torch.bincount(_t(x), minlength=9), torch.bincount(x, minlength=9))
    _same(torch.bincount(_t(x), _t(w)), torch.bincount(x, w))
    _same(torch.bincount(_t(x), _t(w.double())), torch.bincount(x, w.double()))
    ints = torch.tensor([1, 2, 3, 4, 5])
    _same(torch.bincount(_t(x), _t(ints)), torch.bincount(x, ints))
    empty = torch.tensor([], dtype=torch.long)
    _same(torch.bincount(_t(empty), minlength=3), torch.bincount(empty, minlength=3))
    _same(torch.bincount(_t(x.to(torch.uint8))), torch.bincount(x.to(torch.uint8)))
    with pytest.raises(RuntimeError, match="non-negative"):
        torch.bincount(_t(torch.tensor([-1, 2])))
    with pytest.raises(RuntimeError, match="same length"):
        torch.bincount(_t(x), _t(w[:3]))


@pytest.mark.parametrize("rows,cols,offset", [(4, 3, 1), (3, 4, -1), (5, 5, 0), (0, 3, 0), (3, 0, 0), (6, 4, -10),
                                              (6, 4, 10), (7, 9, 2), (300, 200, -5)])
def test_triangle_indices(rows, cols, offset):
    for fn in (torch.triu_indices, torch.tril_indices):
        _same(fn(rows, cols, offset, device="tpu"), fn(rows, cols, offset))
    _same(torch.tril_indices(rows, cols, offset, dtype=torch.int32, device="tpu"),
          torch.tril_indices(rows, cols, offset, dtype=torch.int32))
