"""Shape ops against PyTorch CPU: views (metadata kernels sharing storage,
writes through them updating the base), reshape with its copy fallback,
split-style ops returning Tensor[], cat/stack/flip/roll, tril/triu,
constant_pad_nd and repeat. Errors name the op and the shapes."""

import pytest
import torch

import torchtpu
from conftest import call, check, cpu, tpu, view

torch.manual_seed(0)

DTYPES = [torch.float32, torch.bfloat16, torch.int32, torch.bool]


def sample(shape, dtype=torch.float32):
    x = torch.randn(shape) * 4
    if dtype == torch.bool:
        return x > 0
    return x.to(dtype)


def pair(rt, base, sizes=None, strides=None, offset=0):
    """A device tensor and the same torch tensor: `base` itself, or the
    strided view (sizes, strides, offset) of it on both sides."""
    d = tpu(rt, base)
    if sizes is None:
        return d, base
    return view(rt, d, sizes, strides, offset), base.as_strided(sizes, strides, offset)


def same_view(got, want):
    """A device view has torch's values and layout (sizes, strides, offset)."""
    check(cpu(got), want.contiguous())
    assert got.strides == want.stride(), (got.strides, want.stride())
    assert got.offset == want.storage_offset(), (got.offset, want.storage_offset())


# ------------------------------------------------------------------ as_strided


def test_as_strided(rt):
    x = torch.arange(24, dtype=torch.float32)
    same_view(view(rt, tpu(rt, x), (3, 4), (1, 3), 2), torch.as_strided(x, (3, 4), (1, 3), 2))
    # The offset defaults to self's offset.
    base = tpu(rt, x)
    v = view(rt, base, (10,), (2,), 3)
    w = rt.call1("aten::as_strided", v, [2, 2], [4, 1])
    same_view(w, torch.as_strided(torch.as_strided(x, (10,), (2,), 3), (2, 2), (4, 1)))
    assert w.same_storage(base)
    with pytest.raises(torchtpu.InvalidArgumentError, match="aten::as_strided.*out of bounds"):
        view(rt, base, (5, 5), (5, 1), 0)


# ------------------------------------------------------------------- view ops

# (op, args, torch function); applied to contiguous and strided inputs of
# shape (4, 1, 6) (a permuted slice of a larger tensor in the strided case).
VIEW_CASES = [
    ("aten::view", [[4, 6]], lambda t: t.view(4, 6)),
    ("aten::view", [[2, -1, 3, 1]], lambda t: t.view(2, -1, 3, 1)),
    ("aten::_unsafe_view", [[24]], None),
    ("aten::alias", [], lambda t: t),
    ("aten::permute", [[2, 0, 1]], lambda t: t.permute(2, 0, 1)),
    ("aten::permute", [[-1, -3, 1]], lambda t: t.permute(-1, -3, 1)),
    ("aten::transpose.int", [0, -1], lambda t: t.transpose(0, -1)),
    ("aten::expand", [[3, 4, 5, 6]], lambda t: t.expand(3, 4, 5, 6)),
    ("aten::expand", [[2, -1, -1, -1]], lambda t: t.expand(2, -1, -1, -1)),
    ("aten::squeeze", [], lambda t: t.squeeze()),
    ("aten::squeeze.dim", [-2], lambda t: t.squeeze(-2)),
    ("aten::squeeze.dim", [0], lambda t: t.squeeze(0)),
    ("aten::squeeze.dims", [[0, 1, -1]], lambda t: t.squeeze((0, 1, -1))),
    ("aten::unsqueeze", [0], lambda t: t.unsqueeze(0)),
    ("aten::unsqueeze", [-1], lambda t: t.unsqueeze(-1)),
    ("aten::unsqueeze", [2], lambda t: t.unsqueeze(2)),
    ("aten::slice.Tensor", [-1, -5, None, 2], lambda t: t[..., -5::2]),
    ("aten::slice.Tensor", [0, 1, 3], lambda t: t[1:3]),
    ("aten::slice.Tensor", [2, 4, 100], lambda t: t[:, :, 4:100]),
    ("aten::slice.Tensor", [2, 5, 2], lambda t: t[:, :, 5:2]),
    ("aten::slice.Tensor", [0, None, -1], lambda t: t[:-1]),
    ("aten::slice.Tensor", [0, -100, 100, 3], lambda t: t[-100:100:3]),
    ("aten::select.int", [2, -1], lambda t: t.select(2, -1)),
    ("aten::select.int", [0, 2], lambda t: t[2]),
    ("aten::narrow", [2, -4, 3], lambda t: t.narrow(2, -4, 3)),
    ("aten::unfold", [2, 3, 2], lambda t: t.unfold(2, 3, 2)),
    ("aten::unfold", [0, 4, 1], lambda t: t.unfold(0, 4, 1)),
    ("aten::diagonal", [0, 0, 2], lambda t: t.diagonal(0, 0, 2)),
    ("aten::diagonal", [2, -1, 0], lambda t: t.diagonal(2, -1, 0)),
    ("aten::diagonal", [-1, 0, -1], lambda t: t.diagonal(-1, 0, -1)),
]


@pytest.mark.parametrize("strided", [False, True], ids=["contig", "strided"])
@pytest.mark.parametrize("case", VIEW_CASES, ids=lambda c: f"{c[0][6:]}{c[1]}")
def test_view_ops(rt, case, strided):
    name, args, fn = case
    if strided:
        # (4, 1, 6) read with permuted strides out of a 7x8 slab at offset 3.
        base = sample((60,))
        d, t = pair(rt, base, (4, 1, 6), (1, 5, 8), 3)
    else:
        d, t = pair(rt, sample((4, 1, 6)))
    try:
        want = fn(t) if fn else t.view(*args[0])
    except RuntimeError as e:
        # Not viewable in PyTorch either: the same error, naming the op.
        assert "view size is not compatible" in str(e)
        with pytest.raises(torchtpu.InvalidArgumentError, match=f"{name}: view size is not compatible"):
            rt.call1(name, d, *args)
        return
    got = rt.call1(name, d, *args)
    same_view(got, want)
    # `_unsafe_view`'s schema declares a new tensor, and a result the schema
    # does not declare an alias never shares an argument's storage.
    assert got.same_storage(d) == (name != "aten::_unsafe_view")


@pytest.mark.parametrize("dtype", DTYPES)
def test_views_keep_dtype(rt, dtype):
    x = sample((3, 4), dtype)
    d = tpu(rt, x)
    same_view(rt.call1("aten::t", d), x.t())
    same_view(rt.call1("aten::slice.Tensor", d, 1, 1, 4, 2), x[:, 1:4:2])
    same_view(rt.call1("aten::expand", rt.call1("aten::unsqueeze", d, 1), [3, 2, 4]), x.unsqueeze(1).expand(3, 2, 4))


def test_t_and_transpose_small_ranks(rt):
    for shape in [(), (5,), (2, 3)]:
        x = sample(shape)
        same_view(rt.call1("aten::t", tpu(rt, x)), x.t())
    x = sample(())
    same_view(rt.call1("aten::transpose.int", tpu(rt, x), 0, -1), x.transpose(0, -1))
    same_view(rt.call1("aten::squeeze.dim", tpu(rt, x), 0), x.squeeze(0))
    same_view(rt.call1("aten::unsqueeze", tpu(rt, x), -1), x.unsqueeze(-1))
    same_view(rt.call1("aten::expand", tpu(rt, x), [2, 3]), x.expand(2, 3))
    same_view(rt.call1("aten::unfold", tpu(rt, x), 0, 1, 1), x.unfold(0, 1, 1))


def test_views_of_views(rt):
    x = sample((6, 8))
    d = tpu(rt, x)
    a = rt.call1("aten::transpose.int", d, 0, 1)              # (8, 6)
    b = rt.call1("aten::slice.Tensor", a, 0, 1, 7, 2)          # (3, 6)
    c = rt.call1("aten::select.int", b, 1, -2)                 # (3,)
    e = rt.call1("aten::unsqueeze", c, 0)                      # (1, 3)
    f = rt.call1("aten::expand", e, [2, 3])
    want_b = x.transpose(0, 1)[1:7:2]
    same_view(b, want_b)
    same_view(f, want_b.select(1, -2).unsqueeze(0).expand(2, 3))
    assert f.same_storage(d)


# -------------------------------------------------------------------- reshape


def test_reshape_views_when_possible(rt):
    x = sample((4, 6))
    d = tpu(rt, x)
    r = rt.call1("aten::reshape", d, [2, -1, 3])
    same_view(r, x.reshape(2, -1, 3))
    assert r.same_storage(d)
    # A column slice splits within a chunk: still a view.
    s = rt.call1("aten::slice.Tensor", d, 1, 0, 4)
    r = rt.call1("aten::reshape", s, [2, 2, 2, 2])
    same_view(r, x[:, 0:4].reshape(2, 2, 2, 2))
    assert r.same_storage(d)


@pytest.mark.parametrize("dtype", DTYPES)
def test_reshape_copies_otherwise(rt, dtype):
    x = sample((4, 6), dtype)
    d = tpu(rt, x)
    tr = rt.call1("aten::t", d)
    before = rt.stats()["view_ops"]
    r = rt.call1("aten::reshape", tr, [-1])
    assert rt.stats()["view_ops"] == before
    assert not r.same_storage(d)
    check(cpu(r), x.t().reshape(-1))
    assert r.strides == (1,)
    r = rt.call1("aten::reshape", tr, [3, 8])
    check(cpu(r), x.t().reshape(3, 8))


def test_reshape_errors(rt):
    d = tpu(rt, sample((4, 6)))
    with pytest.raises(torchtpu.InvalidArgumentError, match=r"aten::reshape: shape '\[5, -1\]' is invalid for input of size 24"):
        rt.call1("aten::reshape", d, [5, -1])
    with pytest.raises(torchtpu.InvalidArgumentError, match="aten::view: only one dimension can be inferred"):
        rt.call1("aten::view", d, [-1, -1])
    tr = rt.call1("aten::t", d)
    with pytest.raises(torchtpu.InvalidArgumentError) as e:
        rt.call1("aten::view", tr, [24])
    msg = str(e.value)
    assert "aten::view" in msg and "Use .reshape(...) instead" in msg and "[6, 4]" in msg and "[24]" in msg, msg


def test_view_ops_do_not_compile(rt):
    d = tpu(rt, sample((4, 6)))
    s0 = rt.stats()
    v = rt.call1("aten::view", d, [6, 4])
    v = rt.call1("aten::permute", v, [1, 0])
    v = rt.call1("aten::slice.Tensor", v, 0, 1, 3)
    v = rt.call1("aten::select.int", v, 1, 2)
    parts = rt.call("aten::split.Tensor", d, 2, 1)
    v = rt.call1("aten::reshape", d, [24])
    s1 = rt.stats()
    assert s1["view_ops"] - s0["view_ops"] == 6
    assert s1["compiles"] == s0["compiles"]
    assert s1["executions"] == s0["executions"]
    assert len(parts) == 3


# ------------------------------------------------------------------ Tensor[]

LIST_CASES = [
    ("aten::split.Tensor", [2], lambda t: t.split(2)),
    ("aten::split.Tensor", [4, -1], lambda t: t.split(4, -1)),
    ("aten::split.Tensor", [10, 1], lambda t: t.split(10, 1)),
    ("aten::split_with_sizes", [[1, 0, 4], 2], lambda t: t.split([1, 0, 4], 2)),
    ("aten::chunk", [3, -1], lambda t: t.chunk(3, -1)),
    ("aten::chunk", [2, 0], lambda t: t.chunk(2, 0)),
    ("aten::chunk", [4, 1], lambda t: t.chunk(4, 1)),
    ("aten::unbind.int", [0], lambda t: t.unbind(0)),
    ("aten::unbind.int", [-1], lambda t: t.unbind(-1)),
]


@pytest.mark.parametrize("strided", [False, True], ids=["contig", "strided"])
@pytest.mark.parametrize("case", LIST_CASES, ids=lambda c: f"{c[0][6:]}{c[1]}")
def test_list_views(rt, case, strided):
    name, args, fn = case
    if strided:
        d, t = pair(rt, sample((80,)), (3, 7, 5), (1, 10, 3), 2)
    else:
        d, t = pair(rt, sample((3, 7, 5)))
    got = rt.call(name, d, *args)
    want = fn(t)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        same_view(g, w)
        assert g.same_storage(d)


def test_chunk_empty_dim(rt):
    x = torch.empty(0, 3)
    got = rt.call("aten::chunk", tpu(rt, x), 3, 0)
    want = x.chunk(3, 0)
    assert [g.shape for g in got] == [tuple(w.shape) for w in want]


# ------------------------------------------------------- writes through views


def test_copy_into_slice_updates_base(rt):
    x = sample((4, 6))
    d = tpu(rt, x)
    s = rt.call1("aten::slice.Tensor", d, 1, 1, 5, 2)
    src = sample((4, 2))
    rt.call("aten::copy_", s, tpu(rt, src))
    want = x.clone()
    want[:, 1:5:2].copy_(src)
    check(cpu(d), want)
    check(cpu(s), want[:, 1:5:2])


def test_add_on_transposed_view_updates_base(rt):
    x = sample((3, 5))
    d = tpu(rt, x)
    tr = rt.call1("aten::transpose.int", d, 0, 1)
    y = sample((5, 3))
    rt.call("aten::add_.Tensor", tr, tpu(rt, y), 2)
    want = x.clone()
    want.transpose(0, 1).add_(y, alpha=2)
    check(cpu(d), want)


def test_mul_on_select_and_split_update_base(rt):
    x = sample((4, 6))
    d = tpu(rt, x)
    row = rt.call1("aten::select.int", d, 0, -2)
    rt.call("aten::mul_.Scalar", row, 3.0)
    parts = rt.call("aten::split.Tensor", d, 4, 1)
    rt.call("aten::mul_.Tensor", parts[1], tpu(rt, torch.full((4, 2), -1.0)))
    col = rt.call("aten::unbind.int", d, 1)[0]
    rt.call("aten::add_.Scalar", col, 10)
    want = x.clone()
    want.select(0, -2).mul_(3.0)
    want.split(4, 1)[1].mul_(torch.full((4, 2), -1.0))
    want.unbind(1)[0].add_(10)
    check(cpu(d), want)
    check(cpu(row), want[-2])


def test_tril_inplace_on_view(rt):
    x = sample((2, 5, 6))
    d = tpu(rt, x)
    v = rt.call1("aten::narrow", d, 2, 1, 4)
    out = rt.call1("aten::tril_", v, -1)
    want = x.clone()
    want.narrow(2, 1, 4).tril_(-1)
    check(cpu(d), want)
    check(cpu(out), want.narrow(2, 1, 4))


# --------------------------------------------------------------------- errors


def test_view_errors(rt):
    d = tpu(rt, sample((3, 4)))

    def raises(pattern, name, *args):
        with pytest.raises(torchtpu.InvalidArgumentError) as e:
            rt.call(name, d, *args)
        assert name in str(e.value), str(e.value)
        for p in pattern:
            assert p in str(e.value), str(e.value)

    raises(["index 3 out of range", "[3, 4]", "dimension 0"], "aten::select.int", 0, 3)
    raises(["index -5 out of range", "[3, 4]", "dimension 1"], "aten::select.int", -1, -5)
    raises(["Dimension out of range"], "aten::select.int", 2, 0)
    raises(["must match the existing size (4)", "[3, 5]"], "aten::expand", [3, 5])
    raises(["number of sizes provided (1)"], "aten::expand", [4])
    raises(["leading, non-existing dimension 0"], "aten::expand", [-1, 3, 4])
    raises(["len(dims) = 3"], "aten::permute", [0, 1, 2])
    raises(["appears multiple times"], "aten::permute", [1, 1])
    raises(["slice step must be positive"], "aten::slice.Tensor", 0, 0, 2, 0)
    raises(["exceeds dimension size (4)"], "aten::narrow", 1, 2, 3)
    raises(["split_size can only be 0"], "aten::split.Tensor", 0)
    raises(["sum exactly to 3", "[1, 1]"], "aten::split_with_sizes", [1, 1])
    raises(["greater than 0"], "aten::chunk", 0)
    raises(["maximum size for tensor at dimension 1 is 4 but size is 5"], "aten::unfold", 1, 5, 1)
    raises(["identical"], "aten::diagonal", 0, 1, -1)
    three = tpu(rt, sample((2, 2, 2)))
    with pytest.raises(torchtpu.InvalidArgumentError, match="aten::t: t\\(\\) expects a tensor with <= 2 dimensions"):
        rt.call("aten::t", three)
    scalar = tpu(rt, sample(()))
    with pytest.raises(torchtpu.InvalidArgumentError, match="aten::select.int: select\\(\\) cannot be applied to a 0-dim"):
        rt.call("aten::select.int", scalar, 0, 0)


# -------------------------------------------------------------------- cat/stack


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_cat(rt, dim):
    xs = [sample((2, 3)), sample((2, 3)), sample((2, 3))]
    xs[1] = xs[1].narrow(dim, 0, 1) if dim != 0 else sample((4, 3))
    check(call(rt, "aten::cat", xs, dim), torch.cat(xs, dim))


@pytest.mark.parametrize(
    "dtypes", [(torch.float32, torch.int32), (torch.bfloat16, torch.float16), (torch.int32, torch.bool),
               (torch.bool, torch.bool), (torch.uint8, torch.int8), (torch.bfloat16, torch.int64)]
)
def test_cat_promotes(rt, dtypes):
    xs = [sample((2, 3), dtypes[0]), sample((1, 3), dtypes[1])]
    check(call(rt, "aten::cat", xs), torch.cat(xs))


def test_cat_legacy_empty_and_strided_inputs(rt):
    x, e = sample((2, 3)), torch.empty(0)
    check(call(rt, "aten::cat", [e, x, e], 1), torch.cat([e, x, e], 1))
    check(call(rt, "aten::cat", [e, e.to(torch.int32)]), torch.cat([e, e.to(torch.int32)]))
    z = torch.empty(0, 3)
    check(call(rt, "aten::cat", [z, x]), torch.cat([z, x]))
    # Non-contiguous inputs, twice the same storage.
    base = sample((40,))
    d = tpu(rt, base)
    a = view(rt, d, (3, 4), (1, 3), 1)
    b = view(rt, d, (2, 4), (8, 2), 5)
    got = rt.call1("aten::cat", [a, b], 0)
    check(cpu(got), torch.cat([base.as_strided((3, 4), (1, 3), 1), base.as_strided((2, 4), (8, 2), 5)]))


def test_cat_errors(rt):
    a, b = tpu(rt, sample((2, 3))), tpu(rt, sample((2, 4)))
    with pytest.raises(torchtpu.InvalidArgumentError) as e:
        rt.call("aten::cat", [a, b], 0)
    msg = str(e.value)
    assert "aten::cat" in msg and "Sizes of tensors must match except in dimension 0" in msg, msg
    assert "[2, 3]" in msg and "[2, 4]" in msg, msg
    with pytest.raises(torchtpu.InvalidArgumentError, match="aten::cat: Tensors must have same number of dimensions"):
        rt.call("aten::cat", [a, tpu(rt, sample((2, 3, 1)))], 0)
    with pytest.raises(torchtpu.InvalidArgumentError, match="zero-dimensional tensor"):
        rt.call("aten::cat", [a, tpu(rt, sample(()))], 0)
    with pytest.raises(torchtpu.InvalidArgumentError, match="aten::cat: Dimension out of range"):
        rt.call("aten::cat", [a, a], 2)


@pytest.mark.parametrize("dim", [0, 1, 2, -1, -3])
def test_stack(rt, dim):
    xs = [sample((2, 3)), sample((2, 3)).to(torch.bfloat16)]
    check(call(rt, "aten::stack", xs, dim), torch.stack(xs, dim))


def test_stack_errors(rt):
    with pytest.raises(torchtpu.InvalidArgumentError) as e:
        rt.call("aten::stack", [tpu(rt, sample((2, 3))), tpu(rt, sample((3, 2)))])
    msg = str(e.value)
    assert "aten::stack" in msg and "[2, 3] at entry 0 and [3, 2] at entry 1" in msg, msg


# ------------------------------------------------------------------ flip/roll


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dims", [[0], [-1], [0, 2], []])
def test_flip(rt, dims, dtype):
    x = sample((2, 3, 4), dtype)
    check(call(rt, "aten::flip", x, dims), torch.flip(x, dims))


def test_flip_strided(rt):
    base = sample((30,))
    d, t = pair(rt, base, (3, 4), (1, 6), 2)
    check(cpu(rt.call1("aten::flip", d, [0, 1])), t.flip(0, 1))
    s = sample(())
    check(call(rt, "aten::flip", s, [0]), s.flip(0))


@pytest.mark.parametrize("shifts,dims", [([1], [0]), ([-2], [-1]), ([7], [1]), ([2, -1], [0, 1]), ([3], []),
                                          ([5, 5], [1, 1])])
def test_roll(rt, shifts, dims):
    x = sample((3, 4))
    check(call(rt, "aten::roll", x, shifts, dims), torch.roll(x, shifts, dims))


def test_roll_strided_and_errors(rt):
    d, t = pair(rt, sample((30,)), (4, 3), (1, 5), 1)
    check(cpu(rt.call1("aten::roll", d, [1, -1], [0, 1])), t.roll([1, -1], [0, 1]))
    with pytest.raises(torchtpu.InvalidArgumentError, match="aten::roll: shifts and dimensions must align"):
        rt.call("aten::roll", d, [1, 2], [0])


# ------------------------------------------------------------------ tril/triu


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["tril", "triu"])
@pytest.mark.parametrize("diagonal", [0, 2, -1, -7])
def test_tril_triu(rt, name, diagonal, dtype):
    x = sample((2, 4, 5), dtype)
    check(call(rt, f"aten::{name}", x, diagonal), getattr(torch, name)(x, diagonal))


@pytest.mark.parametrize("name", ["tril_", "triu_"])
def test_tril_triu_inplace(rt, name):
    x = sample((3, 3))
    d = tpu(rt, x)
    out = rt.call1(f"aten::{name}", d, 1)
    want = getattr(x.clone(), name)(1)
    check(cpu(d), want)
    check(cpu(out), want)
    # Through a transposed view.
    x = sample((4, 3))
    d = tpu(rt, x)
    rt.call1(f"aten::{name}", rt.call1("aten::t", d))
    want = x.clone()
    getattr(want.t(), name)()
    check(cpu(d), want)


def test_tril_errors(rt):
    with pytest.raises(torchtpu.InvalidArgumentError, match=r"aten::tril: tril: input tensor must have at least 2 dimensions.*\[5\]"):
        rt.call("aten::tril", tpu(rt, sample((5,))))


# ------------------------------------------------------------ constant_pad_nd


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32, torch.bool])
@pytest.mark.parametrize("pad", [[1, 2], [0, 0, 2, 1], [-1, 2, 1, -2], [1, 1, 0, 0, 1, 0], [-2, -2]])
def test_constant_pad_nd(rt, pad, dtype):
    x = sample((2, 3, 4), dtype)
    value = True if dtype == torch.bool else 3
    check(call(rt, "aten::constant_pad_nd", x, pad, value), torch.constant_pad_nd(x, pad, value))


def test_constant_pad_nd_values_and_errors(rt):
    x = sample((3, 4))
    check(call(rt, "aten::constant_pad_nd", x, [1, 1]), torch.constant_pad_nd(x, [1, 1]))
    check(call(rt, "aten::constant_pad_nd", x, [2, 0, 1, 1], -1.5), torch.constant_pad_nd(x, [2, 0, 1, 1], -1.5))
    d, t = pair(rt, sample((30,)), (3, 4), (1, 5), 2)
    check(cpu(rt.call1("aten::constant_pad_nd", d, [1, -1, 0, 2], 7.0)), torch.constant_pad_nd(t, [1, -1, 0, 2], 7.0))
    with pytest.raises(torchtpu.InvalidArgumentError, match="aten::constant_pad_nd: Length of pad must be even"):
        rt.call("aten::constant_pad_nd", tpu(rt, x), [1])
    with pytest.raises(torchtpu.InvalidArgumentError, match=r"no more than twice.*\[3, 4\]"):
        rt.call("aten::constant_pad_nd", tpu(rt, x), [1, 1, 1, 1, 1, 1])
    with pytest.raises(torchtpu.InvalidArgumentError, match="negative output size"):
        rt.call("aten::constant_pad_nd", tpu(rt, x), [-3, -2])


# --------------------------------------------------------------------- repeat


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.bool])
@pytest.mark.parametrize("reps", [[2, 3], [1, 1], [2, 1, 2], [3, 0]])
def test_repeat(rt, reps, dtype):
    x = sample((2, 3), dtype)
    check(call(rt, "aten::repeat", x, reps), x.repeat(reps))


def test_repeat_strided_and_errors(rt):
    d, t = pair(rt, sample((30,)), (2, 3), (1, 4), 3)
    check(cpu(rt.call1("aten::repeat", d, [2, 2, 1])), t.repeat(2, 2, 1))
    s = sample(())
    check(call(rt, "aten::repeat", s, [3]), s.repeat(3))
    with pytest.raises(torchtpu.InvalidArgumentError, match="aten::repeat: Number of dimensions of repeat dims"):
        rt.call("aten::repeat", d, [2])


# ---------------------------------------------------------------- edge cases


def test_empty_and_zero_dim_edges(rt):
    s = sample(())
    check(call(rt, "aten::stack", [s, s * 2], 0), torch.stack([s, s * 2]))
    check(call(rt, "aten::repeat", s, [2, 3]), s.repeat(2, 3))
    e = torch.empty(0, 3)
    check(call(rt, "aten::constant_pad_nd", e, [1, 0, 1, 1], 2.0), torch.constant_pad_nd(e, [1, 0, 1, 1], 2.0))
    check(call(rt, "aten::roll", e, [1], [0]), torch.roll(e, [1], [0]))
    check(call(rt, "aten::flip", e, [0, 1]), torch.flip(e, [0, 1]))
    check(call(rt, "aten::tril", e, 0), torch.tril(e))
    x = sample((1, 3))
    same_view(rt.call1("aten::expand", tpu(rt, x), [0, 3]), x.expand(0, 3))
    same_view(rt.call1("aten::slice.Tensor", tpu(rt, x), 1, 2, 1), x[:, 2:1])
    got = rt.call("aten::split.Tensor", tpu(rt, e), 2, 0)
    assert [g.shape for g in got] == [tuple(w.shape) for w in e.split(2, 0)]
