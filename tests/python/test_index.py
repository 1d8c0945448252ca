"""Index ops against PyTorch CPU: index_select, gather, scatter (src, value,
add, reduce) and their in-place forms, advanced indexing (index.Tensor,
index_put), take and put, index_add, index_fill, index_copy, masked_fill and
masked_scatter; negative indices (where PyTorch takes them) and dims,
several dtypes, strided inputs, errors, and out-of-range indices (an IndexError at the read, or at the op in debug
mode)."""

import pytest
import torch

import torchtpu
from conftest import call, check, cpu, tol_for, tpu, view

torch.manual_seed(0)

DTYPES = [torch.float32, torch.bfloat16, torch.int32, torch.int64, torch.bool]


def rt_has(name: str) -> bool:
    return bool(torchtpu._capi.lib.ttpu_op_exists(name.encode()))


needs_views = pytest.mark.skipif(not rt_has("aten::as_strided"),
                                 reason="strided device views need aten::as_strided (shape family)")


def data(shape, dtype):
    if dtype == torch.bool:
        return torch.randn(shape) > 0
    return (torch.randn(shape) * 10).to(dtype)


def exact(dtype):
    return {"atol": 0, "rtol": 0}


def rand_index(high, shape, dtype=torch.int64, negative=False):
    """Indices in [0, high), or [-high, high) (wrapping: advanced indexing
    and take only; the other index ops reject negative indices)."""
    low = -high if negative else 0
    return torch.randint(low, high, shape, dtype=dtype)


def unique_index(size, shape, dim, negative=False):
    """An index of `shape` whose entries along `dim` are distinct (so that
    replacing scatters are deterministic)."""
    dim = dim % len(shape)
    perm = torch.stack([torch.randperm(size)[: shape[dim]] for _ in range(torch.Size(shape).numel() // shape[dim])])
    moved = list(shape[:dim]) + list(shape[dim + 1:]) + [shape[dim]]
    idx = perm.reshape(moved).movedim(-1, dim).contiguous()
    if negative:
        idx = torch.where(torch.rand(idx.shape) < 0.5, idx - size, idx)
    return idx


# ------------------------------------------------------------- index_select

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dim", [0, 1, -1, -3])
@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32])
def test_index_select(rt, dtype, dim, index_dtype):
    x = data((3, 4, 5), dtype)
    idx = rand_index(x.shape[dim], (7,), index_dtype)
    want = torch.index_select(x, dim, idx)
    check(call(rt, "aten::index_select", x, dim, idx), want, **exact(dtype))


def test_index_select_shapes(rt):
    x = data((3, 4), torch.float32)
    for idx in [torch.tensor(2), torch.tensor([], dtype=torch.int64), torch.tensor([3])]:
        check(call(rt, "aten::index_select", x, 1, idx), torch.index_select(x, 1, idx))
    s = torch.tensor(2.5)
    check(call(rt, "aten::index_select", s, 0, torch.tensor([0])), torch.index_select(s, 0, torch.tensor([0])))
    check(call(rt, "aten::index_select", s, -1, torch.tensor(0)), torch.index_select(s, -1, torch.tensor(0)))


def test_index_select_errors(rt):
    x = torch.zeros(3, 4)
    with pytest.raises(torchtpu.InvalidArgumentError, match=r"aten::index_select: .*vector.*\[2, 2\]"):
        call(rt, "aten::index_select", x, 1, torch.zeros(2, 2, dtype=torch.int64))
    with pytest.raises(torchtpu.InvalidArgumentError, match=r"aten::index_select: .*int32 or int64.*float32"):
        call(rt, "aten::index_select", x, 1, torch.zeros(2))
    with pytest.raises(torchtpu.InvalidArgumentError, match=r"aten::index_select: Dimension out of range"):
        call(rt, "aten::index_select", x, 2, torch.zeros(2, dtype=torch.int64))


# ------------------------------------------------------------------ gather

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dim", [0, 1, 2, -1, -2])
def test_gather(rt, dtype, dim):
    x = data((4, 5, 6), dtype)
    shape = [3, 4, 5]
    shape[dim] = 7
    idx = rand_index(x.shape[dim], shape)
    want = torch.gather(x, dim, idx)
    check(call(rt, "aten::gather", x, dim, idx), want, **exact(dtype))
    check(call(rt, "aten::gather", x, dim, idx.int()), want, **exact(dtype))


def test_gather_shapes(rt):
    x = torch.arange(6.0)
    check(call(rt, "aten::gather", torch.tensor(3.5), 0, torch.tensor(0)), torch.gather(torch.tensor(3.5), 0, torch.tensor(0)))
    check(call(rt, "aten::gather", x, 0, torch.zeros(0, dtype=torch.int64)), torch.gather(x, 0, torch.zeros(0, dtype=torch.int64)))
    check(call(rt, "aten::gather", x, 0, torch.tensor(4)), torch.gather(x, 0, torch.tensor(4)))


def test_gather_errors(rt):
    x = torch.zeros(3, 4)
    with pytest.raises(torchtpu.InvalidArgumentError,
                       match=r"aten::gather: Size does not match at dimension 0 expected index \[4, 2\] to be no larger than self \[3, 4\] apart from dimension 1"):
        call(rt, "aten::gather", x, 1, torch.zeros(4, 2, dtype=torch.int64))
    with pytest.raises(torchtpu.InvalidArgumentError, match=r"aten::gather: Index tensor must have the same number of dimensions.*\[2\].*\[3, 4\]"):
        call(rt, "aten::gather", x, 1, torch.zeros(2, dtype=torch.int64))
    with pytest.raises(torchtpu.InvalidArgumentError, match=r"aten::gather: .*int32 or int64.*float32"):
        call(rt, "aten::gather", x, 1, torch.zeros(3, 2))


# ----------------------------------------------------------------- scatter

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_scatter_src(rt, dtype, dim):
    x = data((4, 5, 6), dtype)
    shape = [3, 4, 5]
    shape[dim] = 3
    idx = unique_index(x.shape[dim], shape, dim)
    src = data((5, 6, 7), dtype)  # larger than the index: only a block is used
    want = torch.scatter(x, dim, idx, src)
    check(call(rt, "aten::scatter.src", x, dim, idx, src), want, **exact(dtype))
    check(call(rt, "aten::scatter_.src", x, dim, idx, src), want, **exact(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("value", [2.5, -3, True])
def test_scatter_value(rt, dtype, value):
    x = data((4, 6), dtype)
    idx = unique_index(6, (4, 3), 1)
    want = torch.scatter(x, 1, idx, value)
    check(call(rt, "aten::scatter.value", x, 1, idx, value), want, **exact(dtype))
    check(call(rt, "aten::scatter_.value", x, -1, idx, value), want, **exact(dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.int32, torch.int64])
@pytest.mark.parametrize("dim", [0, -1])
def test_scatter_add(rt, dtype, dim):
    x = data((5, 6), dtype)
    idx = rand_index(x.shape[dim], (8, 4) if dim == 0 else (4, 9))  # duplicates accumulate
    src = data((8, 9), dtype)
    want = torch.scatter_add(x.float(), dim, idx, src.float()).to(dtype)
    tol = tol_for(dtype) if dtype.is_floating_point else exact(dtype)
    check(call(rt, "aten::scatter_add", x, dim, idx, src), want, **tol)
    check(call(rt, "aten::scatter_add_", x, dim, idx, src), want, **tol)


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bfloat16])
def test_scatter_reduce(rt, reduce, include_self, dtype):
    x = (torch.rand(4, 5) * 4 + 0.5).to(dtype)
    idx = torch.randint(0, 5, (4, 7))
    idx[:, 0] = 4  # column 4 is hit; some columns stay untouched
    src = (torch.rand(4, 7) * 4 + 0.5).to(dtype)
    want = torch.scatter_reduce(x, 1, idx, src, reduce, include_self=include_self)
    tol = tol_for(dtype, 1e-5) if dtype.is_floating_point else exact(dtype)
    if dtype == torch.bfloat16 and reduce in ("sum", "prod", "mean"):
        tol = {"atol": 0.5, "rtol": 0.05}  # PyTorch accumulates in bf16, we in f32
    check(call(rt, "aten::scatter_reduce.two", x, 1, idx, src, reduce, include_self), want, **tol)
    check(call(rt, "aten::scatter_reduce_.two", x, -1, idx, src, reduce, include_self), want, **tol)


def test_scatter_errors(rt):
    x = torch.zeros(3, 4)
    with pytest.raises(torchtpu.InvalidArgumentError,
                       match=r"aten::scatter.src: Expected index \[2, 2\] to be no larger than self \[3, 4\] apart from dimension 1 and to be no larger size than src \[2, 1\]"):
        call(rt, "aten::scatter.src", x, 1, torch.zeros(2, 2, dtype=torch.int64), torch.zeros(2, 1))
    with pytest.raises(torchtpu.InvalidArgumentError, match=r"aten::scatter.src: scatter\(\): Expected self.dtype to be equal to src.dtype"):
        call(rt, "aten::scatter.src", x, 1, torch.zeros(2, 2, dtype=torch.int64), torch.zeros(2, 2, dtype=torch.int64))
    with pytest.raises(torchtpu.InvalidArgumentError, match=r"aten::scatter_reduce.two: reduce argument must be either sum, prod, mean, amax or amin, got foo"):
        call(rt, "aten::scatter_reduce.two", x, 1, torch.zeros(3, 1, dtype=torch.int64), torch.zeros(3, 1), "foo")
    with pytest.raises(torchtpu.InvalidArgumentError, match=r"aten::scatter_add: Dimension out of range"):
        call(rt, "aten::scatter_add", x, -3, torch.zeros(3, 1, dtype=torch.int64), torch.zeros(3, 1))


# --------------------------------------------------------------- index_add

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32, torch.int64])
@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("alpha", [1, 2])
def test_index_add(rt, dtype, dim, alpha):
    x = data((4, 5, 3), dtype)
    idx = rand_index(x.shape[dim], (6,))  # with duplicates
    shape = list(x.shape)
    shape[dim] = 6
    src = data(shape, dtype)
    want = torch.index_add(x.float(), dim, idx, src.float(), alpha=alpha).to(dtype)
    tol = tol_for(dtype) if dtype.is_floating_point else exact(dtype)
    check(call(rt, "aten::index_add", x, dim, idx, src, alpha), want, **tol)
    check(call(rt, "aten::index_add_", x, dim, idx.int(), src, alpha), want, **tol)


def test_index_add_errors(rt):
    x = torch.zeros(3, 4)
    with pytest.raises(torchtpu.InvalidArgumentError, match=r"aten::index_add: index_add_\(\): Number of indices \(2\) should be equal to source.size\(dim\): \(3\)"):
        call(rt, "aten::index_add", x, 1, torch.tensor([0, 1]), torch.zeros(3, 3))
    with pytest.raises(torchtpu.InvalidArgumentError, match=r"aten::index_add: .*same scalar type"):
        call(rt, "aten::index_add", x, 1, torch.tensor([0, 1]), torch.zeros(3, 2, dtype=torch.int64))
    with pytest.raises(torchtpu.InvalidArgumentError, match=r"aten::index_add: .*dimension 0.*\[3, 4\].*\[2, 2\]"):
        call(rt, "aten::index_add", x, 1, torch.tensor([0, 1]), torch.zeros(2, 2))


# -------------------------------------------------------------- index_fill

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_index_fill(rt, dtype, dim):
    x = data((4, 5, 3), dtype)
    # Negative entries wrap, and repeats (2 and -2 on the last dim) agree.
    idx = rand_index(x.shape[dim], (4,), negative=True)
    for value in [-2.5, 7, True]:
        want = x.index_fill(dim, idx, value)
        check(call(rt, "aten::index_fill.int_Scalar", x, dim, idx, value), want, **exact(dtype))
        check(call(rt, "aten::index_fill_.int_Scalar", x, dim, idx, value), want, **exact(dtype))
    # A 0-dim value tensor of another dtype converts to self's.
    v = torch.tensor(3.75, dtype=torch.float64)
    want = x.index_fill(dim, idx, v)
    check(call(rt, "aten::index_fill.int_Tensor", x, dim, idx, v), want, **exact(dtype))
    check(call(rt, "aten::index_fill_.int_Tensor", x, dim, idx, v), want, **exact(dtype))


def test_index_fill_shapes(rt):
    x = torch.randn(3, 4)
    for idx in [torch.tensor(-1), torch.tensor([], dtype=torch.int64), I(3, 3, -4)]:
        check(call(rt, "aten::index_fill.int_Scalar", x, 1, idx, 0.5), x.index_fill(1, idx, 0.5))
    s = torch.tensor(2.5)
    for dim, idx in [(0, I(0)), (-1, torch.tensor(-1)), (0, I(0, -1))]:
        check(call(rt, "aten::index_fill.int_Scalar", s, dim, idx, 9.0), s.index_fill(dim, idx, 9.0))
    e = torch.zeros(0, 3)
    check(call(rt, "aten::index_fill.int_Scalar", e, 1, I(1), 1.0), e.index_fill(1, I(1), 1.0))


def test_index_fill_errors(rt):
    x = torch.zeros(3, 4)
    with pytest.raises(torchtpu.InvalidArgumentError, match=r"aten::index_fill.int_Scalar: index_fill_\(\): Expected dtype int64 for index, but got int32 \(index shape \[1\]\)"):
        call(rt, "aten::index_fill.int_Scalar", x, 0, I(1).int(), 1.0)
    with pytest.raises(torchtpu.InvalidArgumentError, match=r"aten::index_fill.int_Tensor: index_fill_ only supports a 0-dimensional value tensor, but got tensor with 1 dimension\(s\) \(value shape \[1\]\)"):
        call(rt, "aten::index_fill.int_Tensor", x, 0, I(1), torch.ones(1))
    with pytest.raises(torchtpu.InvalidArgumentError, match=r"aten::index_fill_.int_Scalar: .*vector/scalar.*\[1, 2\]"):
        call(rt, "aten::index_fill_.int_Scalar", x, 0, I(0, 1).reshape(1, 2), 1.0)
    with pytest.raises(torchtpu.InvalidArgumentError, match=r"aten::index_fill.int_Scalar: Dimension out of range"):
        call(rt, "aten::index_fill.int_Scalar", x, 2, I(0), 1.0)
    with pytest.raises(torchtpu.InvalidArgumentError, match=r"aten::index_fill.int_Scalar: Dimension out of range"):
        call(rt, "aten::index_fill.int_Scalar", torch.tensor(1.0), 1, I(0), 1.0)


# -------------------------------------------------------------- index_copy

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_index_copy(rt, dtype, dim):
    x = data((4, 5, 3), dtype)
    idx = torch.randperm(x.shape[dim])[:2]  # distinct: a repeated index keeps an unspecified slice
    shape = list(x.shape)
    shape[dim] = 2
    src = data(shape, dtype)
    want = x.index_copy(dim, idx, src)
    check(call(rt, "aten::index_copy", x, dim, idx, src), want, **exact(dtype))
    check(call(rt, "aten::index_copy_", x, dim, idx, src), want, **exact(dtype))


def test_index_copy_shapes(rt):
    v = torch.arange(5.0)
    # A 0-dim source (or index) into a vector; a vector's one slice into a 0-dim self.
    cases = [
        (v, 0, I(2), torch.tensor(7.0)),
        (v, -1, torch.tensor(4), torch.tensor([8.0])),
        (torch.tensor(3.0), 0, I(0), torch.tensor(5.0)),
        (torch.tensor(3.0), -1, torch.tensor(0), torch.tensor([5.0])),
        (v, 0, torch.zeros(0, dtype=torch.int64), torch.zeros(0)),
        (torch.zeros(0, 3), 1, I(5), torch.zeros(0, 1)),
    ]
    for x, dim, idx, src in cases:
        check(call(rt, "aten::index_copy", x, dim, idx, src), x.index_copy(dim, idx, src))


def test_index_copy_errors(rt):
    x = torch.zeros(2, 3)
    cases = [
        ((x, 0, I(1, 0), torch.ones(3, 3)), r"Number of indices \(2\) should be equal to source.size\(dim\) \(3\)"),
        ((x, 0, I(1, 0), torch.ones(2, 4)), r"same slice shapes. Destination slice shape \[3\] at dimension 0 and source slice shape \[4\]"),
        ((x, 0, I(1, 0), torch.ones(2)), r"dimensionality must match. Source dimensionality \(1\), destination dimensionality \(2\)"),
        ((x, 0, I(1, 0), torch.tensor(1.0)), r"When source is scalar, index should have one element \(got 2"),
        ((x, 0, I(1, 0).reshape(1, 2), torch.ones(2, 3)), r"Index should have dimension 1 or 0 \(got 2"),
        ((x, 0, I(1, 0).int(), torch.ones(2, 3)), r"Expected a long tensor for index, but got int32"),
        ((x, 0, I(1, 0), torch.ones(2, 3, dtype=torch.float64)), r"same dtype, but got \(self\) float32 and \(source\) float64"),
    ]
    for args, msg in cases:
        with pytest.raises(torchtpu.InvalidArgumentError, match=r"aten::index_copy: index_copy_\(\): .*" + msg):
            call(rt, "aten::index_copy", *args)
        # PyTorch rejects each of these too.
        with pytest.raises((RuntimeError, IndexError)):
            args[0].index_copy(*args[1:])


# --------------------------------------------------------------------- put

@pytest.mark.parametrize("dtype", DTYPES)
def test_put(rt, dtype):
    x = data((3, 4), dtype)
    idx = torch.randperm(12)[:6].reshape(2, 3)
    idx = torch.where(torch.rand(idx.shape) < 0.5, idx - 12, idx)  # negative entries wrap
    src = data((6,), dtype)
    want = x.put(idx, src)
    check(call(rt, "aten::put", x, idx, src), want, **exact(dtype))
    check(call(rt, "aten::put_", x, idx, src, False), want, **exact(dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32, torch.int64, torch.bool])
def test_put_accumulate(rt, dtype):
    x = data((3, 4), dtype)
    idx = I(0, 11, -1, 5, 0, -12, 3)  # repeats accumulate
    src = data((7,), dtype)
    want = x.float().put(idx, src.float(), accumulate=True).to(dtype) if dtype != torch.bool else x.put(idx, src, accumulate=True)
    tol = tol_for(dtype) if dtype.is_floating_point else exact(dtype)
    check(call(rt, "aten::put", x, idx, src, True), want, **tol)
    check(call(rt, "aten::put_", x, idx.reshape(7, 1), src, True), want, **tol)


def test_put_shapes(rt):
    s = torch.tensor(3.0)
    cases = [
        (s, I(0, -1), torch.tensor([1.0, 2.0]), True),
        (s, torch.tensor(-1), torch.tensor([4.0]), False),
        (torch.zeros(2, 2), I(3), torch.tensor(5.0), False),
        (torch.zeros(0), torch.zeros(0, dtype=torch.int64), torch.zeros(0), False),
    ]
    for x, idx, src, acc in cases:
        check(call(rt, "aten::put", x, idx, src, acc), x.put(idx, src, accumulate=acc))


def test_put_errors(rt):
    x = torch.zeros(5)
    cases = [
        ((x, I(1).int(), torch.ones(1)), r"Expected a long tensor for index, but got int32"),
        ((x, I(1), torch.ones(1, dtype=torch.float64)), r"same dtype, but got self.dtype = float32 and source.dtype = float64"),
        ((x, I(1, 2), torch.ones(3)), r"same number of elements, but got source.numel\(\) = 3, index.numel\(\) = 2"),
        ((torch.zeros(0), I(0), torch.ones(1)), r"Tried to put elements into an empty tensor"),
    ]
    for args, msg in cases:
        with pytest.raises(torchtpu.InvalidArgumentError, match=r"aten::put: put_\(\): .*" + msg):
            call(rt, "aten::put", *args)
        with pytest.raises((RuntimeError, IndexError)):
            args[0].put(*args[1:])


# -------------------------------------------------------- advanced indexing

def I(*xs):
    return torch.tensor(xs, dtype=torch.int64)


# (self shape, index list) in PyTorch's form: None is a full slice.
ADVANCED = [
    ((5,), [I(0, -1, 3)]),
    ((4, 5), [I(1, -2)]),
    ((4, 5), [None, I(0, 4, -5)]),
    ((4, 5), [I(0, 3), I(-1, 2)]),
    ((4, 5), [I(0, 3).reshape(2, 1), I(1, 2, 4)]),  # broadcast to [2, 3]
    ((3, 4, 5), [None, I(1, 2), I(0, 4)]),  # adjacent, in the middle
    ((3, 4, 5), [I(2, 0), None, I(0, -1)]),  # not adjacent: index dims first
    ((3, 4, 5, 6), [None, I(1, 3).reshape(2, 1), None, I(0, 5, 2)]),  # not adjacent, broadcast
    ((3, 4, 5, 6), [None, None, I(4, 0, 1).reshape(3, 1, 1)]),
    ((3, 4, 5), [torch.tensor(1), None, torch.tensor(-1)]),  # 0-dim indices
    ((3, 4), [torch.tensor(2)]),
    ((3, 4, 5), [I(0, 1), I(2, 3), I(4, 0)]),
    ((3, 4), [torch.zeros(0, dtype=torch.int64)]),
]


def torch_index(x, indices):
    key = tuple(slice(None) if i is None else i for i in indices)
    return x[key]


def wrap(x, indices):
    return [None if i is None else i % x.shape[d] for d, i in enumerate(indices)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool])
@pytest.mark.parametrize("case", range(len(ADVANCED)))
def test_index_tensor(rt, dtype, case):
    shape, indices = ADVANCED[case]
    x = data(shape, dtype)
    want = torch_index(x, indices)
    check(call(rt, "aten::index.Tensor", x, indices), want, **exact(dtype))
    as_i32 = [None if i is None else i.int() for i in indices]
    check(call(rt, "aten::index.Tensor", x, as_i32), want, **exact(dtype))


@pytest.mark.parametrize("dtype", [torch.bool, torch.uint8])
def test_index_with_masks(rt, dtype):
    """Boolean (and uint8) masks among the indices, read and write, as PyTorch
    indexes: core's dispatch turns each into the indices of its nonzeros."""
    x = torch.arange(24, dtype=torch.float32).reshape(2, 3, 4)
    row = torch.tensor([True, False, True, True]).to(dtype)
    plane = torch.tensor([[True, False, True], [False, False, True]]).to(dtype)
    for indices in ([plane], [None, None, row], [plane, row[:3].long() * 0 + 1], [None, plane.bool()[0], None]):
        key = [None if i is None else (i.bool() if i.dtype == torch.uint8 else i) for i in indices]
        want = torch.ops.aten.index(x, key)
        check(call(rt, "aten::index.Tensor", x, indices), want)
        values = torch.full(want.shape, -1.0)
        check(call(rt, "aten::index_put", x, indices, values), torch.ops.aten.index_put(x, key, values))
    empty = torch.zeros(3, dtype=torch.bool)
    check(call(rt, "aten::index.Tensor", x[0], [empty]), x[0][empty])


def test_nonzero_and_masked_select(rt):
    x = torch.tensor([[0.0, 1.5, 0.0], [-2.0, 0.0, 3.0]])
    check(call(rt, "aten::nonzero", x), torch.nonzero(x))
    check(call(rt, "aten::nonzero", torch.zeros(2, 2)), torch.nonzero(torch.zeros(2, 2)))
    mask = torch.tensor([True, False, True])
    check(call(rt, "aten::masked_select", x, mask), torch.masked_select(x, mask))
    check(call(rt, "aten::masked_select", torch.tensor(5.0), torch.tensor(True)), torch.tensor([5.0]))


def test_index_tensor_errors(rt):
    x = torch.zeros(3, 4)
    # A mask must match the dimensions it indexes (core's dispatch expands masks).
    with pytest.raises(torchtpu.OutOfRangeError, match=r"aten::index.Tensor: the shape of the mask \[2\] at index 0 does not match the shape of the indexed tensor \[3, 4\]"):
        call(rt, "aten::index.Tensor", x, [torch.tensor([True, False])])
    with pytest.raises(torchtpu.InvalidArgumentError, match=r"aten::index.Tensor: tensors used as indices must be long, int, byte or bool tensors"):
        call(rt, "aten::index.Tensor", x, [torch.tensor([0.0])])
    with pytest.raises(torchtpu.InvalidArgumentError, match=r"aten::index.Tensor: too many indices for tensor of dimension 2 \(got 3"):
        call(rt, "aten::index.Tensor", x, [I(0), I(0), I(0)])
    with pytest.raises(torchtpu.InvalidArgumentError, match=r"aten::index.Tensor: shape mismatch: indexing tensors could not be broadcast together with shapes \[2\], \[3\]"):
        call(rt, "aten::index.Tensor", x, [I(0, 1), I(0, 1, 2)])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32, torch.bool])
@pytest.mark.parametrize("case", [1, 2, 3, 4, 5, 6, 7, 9, 11])
def test_index_put(rt, dtype, case):
    shape, indices = ADVANCED[case]
    x = data(shape, dtype)
    result_shape = torch_index(x, indices).shape
    # Values broadcast to the indexing result: drop the leading dim when it can.
    vshape = result_shape[1:] if len(result_shape) > 1 else result_shape
    values = data(vshape, dtype)
    key = wrap(x, indices)
    want = torch.ops.aten.index_put(x, key, values)
    check(call(rt, "aten::index_put", x, indices, values), want, **exact(dtype))
    check(call(rt, "aten::index_put_", x, indices, values, False), want, **exact(dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
def test_index_put_accumulate(rt, dtype):
    x = data((4, 5, 3), dtype)
    indices = [I(0, 3, 0, -1, 3), None, I(2, 2, 2, 1, -1)]  # repeated pairs accumulate
    values = data((5, 5), dtype)
    want = torch.ops.aten.index_put(x.float(), wrap(x, indices), values.float(), True).to(dtype)
    tol = tol_for(dtype) if dtype.is_floating_point else exact(dtype)
    check(call(rt, "aten::index_put", x, indices, values, True), want, **tol)
    check(call(rt, "aten::index_put_", x, indices, values, True), want, **tol)


def test_index_put_errors(rt):
    x = torch.zeros(3, 4)
    with pytest.raises(torchtpu.InvalidArgumentError,
                       match=r"aten::index_put: shape mismatch: value tensor of shape \[3\] cannot be broadcast to indexing result of shape \[2, 4\]"):
        call(rt, "aten::index_put", x, [I(0, 1)], torch.zeros(3))
    with pytest.raises(torchtpu.InvalidArgumentError,
                       match=r"aten::index_put_: Index put requires the source and destination dtypes match, got float32 for the destination and int64"):
        call(rt, "aten::index_put_", x, [I(0)], torch.tensor([1]))
    with pytest.raises(torchtpu.OutOfRangeError, match=r"aten::index_put: the shape of the mask \[4\] at index 0 does not match"):
        call(rt, "aten::index_put", x, [torch.ones(4, dtype=torch.bool)], torch.tensor(1.0))


# -------------------------------------------------------------------- take

def test_take(rt):
    x = data((3, 4), torch.float32)
    idx = rand_index(12, (2, 5), negative=True)
    check(call(rt, "aten::take", x, idx), torch.take(x, idx), atol=0, rtol=0)
    check(call(rt, "aten::take", x, torch.zeros(0, dtype=torch.int64)), torch.take(x, torch.zeros(0, dtype=torch.int64)))
    with pytest.raises(torchtpu.InvalidArgumentError, match=r"aten::take: take\(\): Expected a long tensor for index, but got int32"):
        call(rt, "aten::take", x, idx.int())


# ---------------------------------------------------- out-of-range indices

# (op, args, the message's index and range): PyTorch's range for each op.
OUT_OF_RANGE = [
    ("aten::index_select", (torch.zeros(3, 4), 1, I(0, 4)), r"index 4 is out of range for dimension 1 with size 4 \(valid: 0 to 3\)"),
    ("aten::index_select", (torch.zeros(3, 4), 0, I(-1)), r"index -1 is out of range for dimension 0 with size 3 \(valid: 0 to 2\)"),
    ("aten::gather", (torch.zeros(3, 4), 1, I(0, -1).reshape(1, 2)), r"index -1 .*dimension 1 with size 4 \(valid: 0 to 3\)"),
    ("aten::scatter.src", (torch.zeros(3), 0, I(3), torch.ones(1)), r"index 3 .*dimension 0 with size 3"),
    ("aten::scatter.value", (torch.zeros(3), 0, I(-3), 1.0), r"index -3 .*\(valid: 0 to 2\)"),
    ("aten::scatter_add", (torch.zeros(3), 0, I(5), torch.ones(1)), r"index 5 "),
    ("aten::scatter_reduce.two", (torch.zeros(3), 0, I(5), torch.ones(1), "sum"), r"index 5 "),
    ("aten::index_add", (torch.zeros(3), 0, I(3), torch.ones(1), 1), r"index 3 .*\(valid: 0 to 2\)"),
    ("aten::index.Tensor", (torch.zeros(5), [I(7)]), r"index 7 is out of range for dimension 0 with size 5 \(valid: -5 to 4\)"),
    ("aten::index.Tensor", (torch.zeros(4, 5), [None, I(-6)]), r"index -6 .*dimension 1 with size 5 \(valid: -5 to 4\)"),
    ("aten::index_put", (torch.zeros(5), [I(5)], torch.ones(1)), r"index 5 .*\(valid: -5 to 4\)"),
    ("aten::take", (torch.zeros(2, 2), I(4)), r"index 4 is out of range for a tensor of 4 elements \(valid: -4 to 3\)"),
    ("aten::put", (torch.zeros(2, 2), I(-5), torch.ones(1)), r"index -5 is out of range for a tensor of 4 elements \(valid: -4 to 3\)"),
    ("aten::put_", (torch.zeros(2, 2), I(0, 4), torch.ones(2), True), r"index 4 .*\(valid: -4 to 3\)"),
    ("aten::index_fill.int_Scalar", (torch.zeros(3, 4), 1, I(0, 4), 1.0), r"index 4 is out of range for dimension 1 with size 4 \(valid: -4 to 3\)"),
    ("aten::index_fill_.int_Tensor", (torch.zeros(3, 4), -2, I(-4), torch.tensor(1.0)), r"index -4 .*dimension 0 with size 3 \(valid: -3 to 2\)"),
    ("aten::index_fill.int_Scalar", (torch.tensor(1.0), 0, I(1), 2.0), r"index 1 .*dimension 0 with size 1 \(valid: -1 to 0\)"),
    ("aten::index_copy", (torch.zeros(3, 4), 1, I(-1), torch.ones(3, 1)), r"index -1 is out of range for dimension 1 with size 4 \(valid: 0 to 3\)"),
    ("aten::index_copy_", (torch.zeros(3), 0, I(3), torch.ones(1)), r"index 3 .*\(valid: 0 to 2\)"),
    ("aten::masked_scatter", (torch.zeros(4), torch.tensor([True, False, True, True]), torch.ones(2)),
     r"index 2 is out of range for a source of 2 elements \(masked_scatter needs one per true element of the mask\) \(valid: 0 to 1\)"),
]


@pytest.mark.parametrize("case", range(len(OUT_OF_RANGE)))
def test_out_of_range_index_raises(rt, case):
    op, args, msg = OUT_OF_RANGE[case]
    with pytest.raises(torchtpu.OutOfRangeError, match=f"{op}: {msg}"):
        call(rt, op, *args)
    # Reported once; the runtime carries on.
    rt.synchronize()
    check(call(rt, "aten::index_select", torch.arange(3.0), 0, I(2, 0)), torch.tensor([2.0, 0.0]))


def test_index_checks_off(rt):
    assert rt.index_checks()
    rt.set_index_checks(False)
    try:
        assert not rt.index_checks()
        # Reads clamp an out-of-range index, silently.
        check(call(rt, "aten::index.Tensor", torch.arange(5.0), [I(7)]), torch.tensor([4.0]))
        rt.synchronize()
    finally:
        rt.set_index_checks(True)
    with pytest.raises(IndexError, match="index 7"):
        call(rt, "aten::index.Tensor", torch.arange(5.0), [I(7)])


# ------------------------------------------------------------- masked_fill

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mask_shape", [(3, 4), (4,), (3, 1), ()])
def test_masked_fill(rt, dtype, mask_shape):
    x = data((3, 4), dtype)
    mask = torch.rand(mask_shape) > 0.5
    for value in [-2.5, 7, True]:
        want = x.masked_fill(mask, value)
        check(call(rt, "aten::masked_fill.Scalar", x, mask, value), want, **exact(dtype))
        check(call(rt, "aten::masked_fill_.Scalar", x, mask, value), want, **exact(dtype))
    v = torch.tensor(3.0, dtype=torch.float64)
    want = x.masked_fill(mask, v)
    check(call(rt, "aten::masked_fill.Tensor", x, mask, v), want, **exact(dtype))
    check(call(rt, "aten::masked_fill_.Tensor", x, mask, v), want, **exact(dtype))


def test_masked_fill_broadcasts_self(rt):
    # Out of place, self broadcasts against the mask too.
    x = torch.arange(4.0)
    mask = torch.rand(3, 4) > 0.5
    check(call(rt, "aten::masked_fill.Scalar", x, mask, 0.5), x.masked_fill(mask, 0.5))


def test_masked_fill_errors(rt):
    x = torch.zeros(3)
    with pytest.raises(torchtpu.InvalidArgumentError, match=r"aten::masked_fill.Scalar: masked_fill_ only supports boolean masks, but got mask with dtype float32"):
        call(rt, "aten::masked_fill.Scalar", x, torch.zeros(3), 1.0)
    with pytest.raises(torchtpu.InvalidArgumentError, match=r"aten::masked_fill.Tensor: .*0-dimensional value tensor.*1 dimension"):
        call(rt, "aten::masked_fill.Tensor", x, torch.zeros(3, dtype=torch.bool), torch.zeros(2))
    with pytest.raises(torchtpu.InvalidArgumentError, match=r"aten::masked_fill.Scalar: .*\[3\].*\[2\]"):
        call(rt, "aten::masked_fill.Scalar", x, torch.zeros(2, dtype=torch.bool), 1.0)
    with pytest.raises(torchtpu.InvalidArgumentError, match=r"aten::masked_fill_.Scalar: .*\[3\].*\[2, 3\]"):
        call(rt, "aten::masked_fill_.Scalar", x, torch.zeros(2, 3, dtype=torch.bool), 1.0)


# ------------------------------------------------------ non-contiguous input

@needs_views
def test_strided_inputs(rt):
    base_t = torch.randn(6, 8)
    base = tpu(rt, base_t)
    xt = base_t.t()  # [8, 6], strides [1, 8]
    x = view(rt, base, [8, 6], [1, 8])
    idx = I(5, -1, 0, 2)
    check(cpu(rt.call1("aten::index_select", x, 1, tpu(rt, idx % 6))), xt.index_select(1, idx % 6))
    g = rand_index(6, (8, 3))
    check(cpu(rt.call1("aten::gather", x, -1, tpu(rt, g))), xt.gather(1, g))
    check(cpu(rt.call1("aten::index.Tensor", x, [None, tpu(rt, idx)])), xt[:, idx % 6])
    mask = torch.rand(8, 6) > 0.5
    check(cpu(rt.call1("aten::masked_fill.Scalar", x, tpu(rt, mask), 0.0)), xt.masked_fill(mask, 0.0))
    # A strided index tensor.
    it = torch.arange(12).reshape(3, 4) % 6
    ib = tpu(rt, it)
    iv = view(rt, ib, [4, 3], [1, 4])
    check(cpu(rt.call1("aten::index.Tensor", x, [None, iv])), xt[:, it.t()])


@needs_views
def test_inplace_through_view(rt):
    base_t = torch.zeros(4, 6)
    base = tpu(rt, base_t)
    # Every other column: [4, 3] with strides [6, 2] at offset 1.
    v = view(rt, base, [4, 3], [6, 2], 1)
    vt = base_t.as_strided([4, 3], [6, 2], 1)
    idx = I(2, 0, -1)
    vals = torch.randn(4, 3)
    rt.call("aten::index_put_", v, [None, tpu(rt, idx)], tpu(rt, vals), True)
    torch.ops.aten.index_put_(vt, [None, idx % 3], vals, True)
    check(cpu(base), base_t)
    src = torch.randn(4, 3)
    sidx = unique_index(4, (4, 3), 0)
    rt.call("aten::scatter_.src", v, 0, tpu(rt, sidx), tpu(rt, src))
    vt.scatter_(0, sidx, src)
    check(cpu(base), base_t)
    mask = torch.rand(4, 3) > 0.5
    rt.call("aten::masked_fill_.Scalar", v, tpu(rt, mask), 9.0)
    vt.masked_fill_(mask, 9.0)
    check(cpu(base), base_t)
    ia = I(1, 1, 3)
    srca = torch.randn(3, 3)
    rt.call("aten::index_add_", v, 0, tpu(rt, ia), tpu(rt, srca))
    vt.index_add_(0, ia, srca)
    check(cpu(base), base_t)


# ----------------------------------------------------------- masked_scatter

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mask_shape", [(3, 4), (4,), (3, 1), ()])
def test_masked_scatter(rt, dtype, mask_shape):
    x = data((3, 4), dtype)
    mask = torch.rand(mask_shape) > 0.5
    # More source than needed: only the leading elements are used.
    src = data((2, 7), dtype)
    check(call(rt, "aten::masked_scatter", x, mask, src), torch.masked_scatter(x, mask, src), **exact(dtype))


def test_masked_scatter_broadcasts_self_and_inplace(rt):
    x = torch.randn(4)
    mask = torch.tensor([[True, False, True, True], [False, False, True, False]])
    src = torch.randn(8)
    check(call(rt, "aten::masked_scatter", x, mask, src), torch.masked_scatter(x, mask, src))
    y = torch.randn(2, 4)
    yt = tpu(rt, y)
    out = rt.call1("aten::masked_scatter_", yt, tpu(rt, mask), tpu(rt, src))
    assert out.same_storage(yt)
    check(cpu(yt), y.masked_scatter(mask, src))


def test_masked_scatter_errors(rt):
    x = torch.randn(3)
    with pytest.raises(torchtpu.InvalidArgumentError, match="boolean"):
        call(rt, "aten::masked_scatter", x, torch.ones(3, dtype=torch.int64), x)
    with pytest.raises(torchtpu.InvalidArgumentError, match="same dtypes"):
        call(rt, "aten::masked_scatter", x, torch.ones(3, dtype=torch.bool), x.double())


# --------------------------------------------------- slice / select scatter

SLICES = [  # dim, start, end, step
    (0, None, None, 1), (1, 1, 5, 2), (-1, -4, None, 3), (2, 0, 2, 1), (1, 4, 100, 1), (1, 3, 1, 1),
    (0, -100, 2, 2), (2, 1, 3, 5),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool])
@pytest.mark.parametrize("case", range(len(SLICES)))
def test_slice_scatter(rt, dtype, case):
    dim, start, end, step = SLICES[case]
    x = data((3, 6, 4), dtype)
    shape = list(torch.ops.aten.slice.Tensor(x, dim, start, end, step).shape)
    src = data(shape, dtype)
    want = torch.slice_scatter(x, src, dim, start, end, step)
    check(call(rt, "aten::slice_scatter", x, src, dim, start, end, step), want, **exact(dtype))


def test_slice_scatter_casts_src_and_checks_shape(rt):
    x = torch.zeros(3, 4)
    src = torch.arange(6, dtype=torch.float64).reshape(3, 2)
    check(call(rt, "aten::slice_scatter", x, src, 1, 0, 4, 2), torch.slice_scatter(x, src, 1, 0, 4, 2))
    with pytest.raises(torchtpu.InvalidArgumentError, match="size equal to the slice"):
        call(rt, "aten::slice_scatter", x, torch.ones(3, 3), 1, 0, 4, 2)
    with pytest.raises(torchtpu.InvalidArgumentError, match="step"):
        call(rt, "aten::slice_scatter", x, src, 1, 0, 4, 0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32, torch.bool])
@pytest.mark.parametrize("dim,index", [(0, 0), (0, -1), (1, 3), (-1, 2), (2, -4)])
def test_select_scatter(rt, dtype, dim, index):
    x = data((3, 5, 4), dtype)
    src = data(x.select(dim, index).shape, dtype)
    want = torch.select_scatter(x, src, dim, index)
    check(call(rt, "aten::select_scatter", x, src, dim, index), want, **exact(dtype))


def test_select_scatter_errors(rt):
    x = torch.zeros(3, 4)
    with pytest.raises(torchtpu.InvalidArgumentError, match="out of range"):
        call(rt, "aten::select_scatter", x, torch.ones(4), 0, 3)
    with pytest.raises(torchtpu.InvalidArgumentError, match="size equal"):
        call(rt, "aten::select_scatter", x, torch.ones(3), 0, 1)
    # A 1-d self selects a 0-dim slice.
    v = torch.arange(5.0)
    check(call(rt, "aten::select_scatter", v, torch.tensor(9.0), 0, 2), torch.select_scatter(v, torch.tensor(9.0), 0, 2))


# ------------------------------------------------------------ nonzero_static


@pytest.mark.parametrize("shape", [(7,), (3, 4), (2, 3, 2), ()])
@pytest.mark.parametrize("size_delta", [-2, 0, 3])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.bool])
def test_nonzero_static(rt, shape, size_delta, dtype):
    g = torch.Generator().manual_seed(len(shape) * 10 + size_delta)
    x = (torch.randint(0, 3, shape, generator=g) - 1).to(dtype)
    size = max(0, int(torch.count_nonzero(x)) + size_delta)
    want = torch.nonzero_static(x, size=size, fill_value=-1)
    check(call(rt, "aten::nonzero_static", x, size, -1), want)
