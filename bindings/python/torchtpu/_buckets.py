"""The dynamic dims of a ``torch.compile`` graph compile once per shape bucket.

Dynamo hands the backend graphs whose sizes are symbols where a dim is
dynamic (``torch.compile(dynamic=True)``, or a dim Dynamo saw change). The
runtime compiles for exact shapes, so every new size (a new batch size)
would compile the whole graph again.

A symbol can be padded when the graph is row-wise along it: an output
element at index i of a dim sized by the symbol depends only on input
elements at index i of the dims sized by it, and the symbol's value is
used only as a size. The graph then runs at the symbol's bucket
(``Runtime.shape_bucket``: powers of two, or the lengths given to
``torch.tpu.set_shape_buckets``): its tensor inputs are padded with zeros
along those dims, the symbol's own argument is the bucket, and each output
is narrowed back to its size, a view of the padded result. One fused
program serves every size of a bucket; what compiles for each new size is
the pad of the inputs, a program of one op.

The check walks the graph once, when Dynamo hands it over, over the sizes
Dynamo traced. A dim is "sized by s" when its size is k * s, k a whole
number or a product of other symbols (a batch merged with a dynamic
sequence), the rows of s outermost (a dim of size k * s in which s is not
the outermost factor is caught where it is made: a view must keep the
elements before the dim). Ops that keep a padded dim row-wise:

- pointwise ops, copies, and ops that only move dims (permute, transpose,
  unsqueeze, squeeze, expand);
- view and reshape, where the dim keeps the elements before it;
- reductions, softmax, scans, sorts, layer and group norm over other dims;
- matrix products that do not contract it; a convolution's or a
  pooling's batch dim; embedding lookups and indexing with input indices
  (a padded index is 0, a valid row; an index computed in the graph might
  not be);
- cat, slice, select and split along other dims; constructors sized by it.

Anything else that touches a padded dim (a reduction over it, a random op,
a mutation, a size used as a number, an output whose padded dim is not its
first) keeps the graph at exact sizes, and the log (logger
``torchtpu.buckets``, INFO) names the op. Results are the same either way:
only a graph that provably cannot tell the padding apart is padded. The
padding costs compute (a batch of 33 runs as 64); finer buckets
(``torch.tpu.set_shape_buckets``) cost less, and
``TORCHTPU_COMPILE_BUCKETS=0`` turns padding off.
"""

from __future__ import annotations

import logging
import operator
import os
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

log = logging.getLogger("torchtpu.buckets")

aten = torch.ops.aten


def enabled() -> bool:
    """Off with ``TORCHTPU_COMPILE_BUCKETS=0``: every size runs exactly (a
    padded batch computes the padding too: 33 rows run as 64)."""
    return os.environ.get("TORCHTPU_COMPILE_BUCKETS", "").strip() != "0"


class _Unsafe(Exception):
    """The graph is not row-wise along the symbol; the message says where."""


# Ops that move or copy elements without mixing rows.
_MOVES = {
    aten.clone, aten._to_copy, aten.copy, aten.alias, aten.detach, aten.lift_fresh_copy, aten.permute,
    aten.transpose, aten.t, aten.unsqueeze, aten.squeeze, aten.expand, aten.contiguous,
}
_VIEWS = {aten.view, aten._unsafe_view, aten.reshape}
_REDUCTIONS = {
    aten.sum, aten.mean, aten.amax, aten.amin, aten.prod, aten.var, aten.std, aten.var_mean, aten.std_mean,
    aten.argmax, aten.argmin, aten.any, aten.all, aten.logsumexp, aten.max, aten.min, aten.linalg_vector_norm,
}
# Ops along one dim (their second argument): softmax, scans, sorts.
_ALONG_ONE = {
    aten._softmax, aten._log_softmax, aten.softmax, aten.log_softmax, aten.cumsum, aten.cumprod,
    aten.logcumsumexp, aten.cummax, aten.cummin, aten.sort, aten.argsort,
}
# Pooling works within each (batch, channel) plane.
_POOLS = {
    aten.max_pool2d_with_indices, aten.max_pool3d_with_indices, aten.avg_pool2d, aten.avg_pool3d,
    aten._adaptive_avg_pool2d, aten._adaptive_avg_pool3d, aten.adaptive_max_pool2d, aten.adaptive_max_pool3d,
}
_CONSTRUCTORS = {
    aten.full, aten.zeros, aten.ones, aten.empty, aten.new_zeros, aten.new_ones, aten.new_full, aten.new_empty,
    aten.zeros_like, aten.ones_like, aten.full_like, aten.empty_like, aten.arange, aten.scalar_tensor,
}
_ALONG = {aten.cat, aten.slice, aten.select, aten.split, aten.split_with_sizes, aten.unbind, aten.narrow}
# Ops whose size arguments may hold the symbol, and those arguments. The
# end of an arange is a size (its values are positions); its start is not.
_SIZED = _VIEWS | _CONSTRUCTORS | {aten.expand, aten.native_group_norm}
_SIZE_ARGS = {"size", "shape", "end", "N"}  # N: group norm's batch


def _expr(size: Any) -> Any:
    """A dim's size as a sympy expression (or an int)."""
    return size.node.expr if isinstance(size, torch.SymInt) else int(size)


def _has(value: Any, s: Any) -> bool:
    """Whether a symbolic value mentions the symbol s."""
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return s in value.node.expr.free_symbols
    return False


def _factor(e: Any, s: Any) -> Any:
    """k where e is k * s and k does not involve s (a whole number, or an
    expression of other symbols: a batch merged with a dynamic sequence);
    _Unsafe otherwise."""
    k = (e / s).simplify()
    if s in k.free_symbols or (k.is_Integer and int(k) <= 0) or not (k.is_Integer or k.is_Mul or k.is_Symbol):
        raise _Unsafe(f"a dim of size {e}")
    return int(k) if k.is_Integer else k


def _whole_factor(value: Any, s: Any, what: str) -> int:
    """k where a symbolic number is k * s for a whole k (an argument or an
    output that is the size itself); _Unsafe otherwise."""
    k = _factor(value.node.expr, s) if isinstance(value, torch.SymInt) else None
    if not isinstance(k, int):
        raise _Unsafe(f"{what} is the number {value.node.expr}")
    return k


def _dims(val: Any, s: Any) -> list[Any] | None:
    """Per dim of a traced tensor: k where the dim's size is k * s, None
    where it does not involve s. None for a value that is not a tensor."""
    if not isinstance(val, torch.Tensor):
        return None
    out: list[Any] = []
    for size in val.shape:
        e = _expr(size)
        out.append(None if isinstance(e, int) or s not in e.free_symbols else _factor(e, s))
    return out


def _padded(dims: list[int | None] | None) -> bool:
    return bool(dims) and any(k is not None for k in dims)


def _dim(d: int, rank: int) -> int:
    return d + rank if d < 0 else d


def _product(sizes: Any) -> Any:
    """The product of traced sizes (a sympy expression or an int)."""
    out: Any = 1
    for size in sizes:
        out = out * _expr(size)
    return out


@dataclass
class Plan:
    """How to pad one symbol s: the inputs' padded dims (placeholder index
    -> [(dim, k)]), the placeholders that are k * s (index -> k), the
    outputs narrowed along their first dim (a size of k * s, k perhaps of
    other symbols), and the outputs that are k * s (index -> k)."""
    symbol: Any
    inputs: dict[int, list[tuple[int, int]]] = field(default_factory=dict)
    sizes: dict[int, int] = field(default_factory=dict)
    outputs: set[int] = field(default_factory=set)
    size_outputs: dict[int, int] = field(default_factory=dict)


def _bound(node: torch.fx.Node) -> list[tuple[str, Any]]:
    """The node's arguments by their names in the op's schema."""
    names = [a.name for a in node.target._schema.arguments]
    return list(zip(names, node.args)) + list(node.kwargs.items())


def _whole_slice(node: torch.fx.Node) -> bool:
    """Whether `node` is a slice that keeps every element (``x[:, 0]``
    slices dim 0 whole before it selects)."""
    if getattr(node.target, "overloadpacket", None) is not aten.slice:
        return False
    args = list(node.args) + [None] * (5 - len(node.args))
    x, dim, start, end, step = args[:5]
    dim = 0 if dim is None else dim
    if start not in (None, 0) or step not in (None, 1):
        return False
    if end is None or (isinstance(end, int) and end >= 2**62):
        return True
    if not isinstance(end, torch.fx.Node) or not isinstance(end.meta.get("val"), (int, torch.SymInt)):
        return False
    return _expr(end.meta["val"]) == _expr(x.meta["val"].shape[dim])


def _dim_arg(node: torch.fx.Node, at: int, default: int) -> int:
    """The op's `dim` argument: positional at `at`, else by name."""
    dim = node.args[at] if len(node.args) > at else node.kwargs.get("dim", default)
    if not isinstance(dim, int):
        raise _Unsafe(f"{node.target} along a dim that is not a number")
    return dim


def _check_op(node: torch.fx.Node, ins: list[list[int | None] | None], outs: list[Any], s: Any,
              moved: set[torch.fx.Node]) -> None:
    """Raises _Unsafe unless `node` keeps the dims sized by s row-wise.
    `moved` holds the values whose padding is zeros or copies of real
    rows: the inputs, values with no dim sized by s, and values only moved
    from those."""
    target = node.target
    packet = getattr(target, "overloadpacket", None)
    name = str(target)
    if _whole_slice(node):
        return
    if packet is None:
        raise _Unsafe(f"{name} is not an aten op")
    for arg, value in _bound(node):
        if any(_has(a.meta.get("val"), s) for a in _flat_nodes([value])):
            if packet not in _SIZED or arg not in _SIZE_ARGS:
                raise _Unsafe(f"{name} uses the size as a number")
    if target._schema.is_mutable:
        raise _Unsafe(f"{name} mutates a tensor")
    if torch.Tag.nondeterministic_seeded in target.tags:
        raise _Unsafe(f"{name} draws random numbers")
    x = ins[0] if ins else None
    args = node.args

    def free(dims: list[int | None] | None, *at: int) -> None:
        if dims is not None:
            for d in at:
                if dims[_dim(d, len(dims))] is not None:
                    raise _Unsafe(f"{name} mixes the rows of dim {d}")

    if torch.Tag.pointwise in target.tags or packet in _MOVES or packet in _CONSTRUCTORS:
        return
    if packet in _VIEWS:
        src = [i for i, k in enumerate(x or []) if k is not None]
        dst = [i for i, k in enumerate(outs[0] or []) if k is not None]
        if len(src) != 1 or len(dst) != 1:
            raise _Unsafe(f"{name} merges or makes dims sized by it")
        if _product(args[0].meta["val"].shape[:src[0]]) != _product(node.meta["val"].shape[:dst[0]]):
            raise _Unsafe(f"{name} moves the elements before the dim sized by it")
        return
    if packet in _REDUCTIONS:
        kept = lambda dims: sum(k is not None for k in dims or [])  # noqa: E731
        if any(o is not None and kept(o) != kept(x) for o in outs):
            raise _Unsafe(f"{name} reduces over it")
        return
    if packet in _ALONG_ONE:
        free(x, _dim_arg(node, 1, -1))
        return
    if packet in _POOLS:
        free(x, *range(2, len(x)))
        return
    if packet is aten.native_layer_norm:
        free(x, *range(-len(args[1]), 0))
        return
    if packet is aten.native_group_norm:
        free(x, *range(1, len(x)))
        return
    if packet is aten._native_batch_norm_legit_no_training:
        free(x, 1)
        return
    if packet is aten.native_batch_norm and args[5] is False:
        free(x, 1)
        return
    if packet in (aten.mm, aten.addmm, aten.bmm, aten.baddbmm):
        a, b = ins[-2], ins[-1]
        free(a, -1)
        free(b, -2)
        return
    if packet is aten.convolution:
        free(x, *range(1, len(x)))
        if _padded(ins[1]):
            raise _Unsafe(f"{name} with a weight sized by it")
        return
    if packet is aten.embedding:
        if _padded(ins[0]):
            raise _Unsafe(f"{name} with a weight sized by it")
        # A padded index must be a valid row: an input's padding (0) is;
        # an index computed in the graph (ids - 1) might not be.
        if _padded(ins[1]) and args[1] not in moved:
            raise _Unsafe(f"{name} of indices computed in the graph")
        return
    if packet is aten.index:
        # x[..., idx, ...]: the indexed dims of x must not be padded, and a
        # padded index must be a valid one (as for an embedding).
        free(x, *[d for d, i in enumerate(args[1]) if i is not None])
        for i, d in zip(_flat_nodes(args[1]), ins[1:]):
            if _padded(d) and i not in moved:
                raise _Unsafe(f"{name} of indices computed in the graph")
        return
    if packet in _ALONG:
        dim = _dim_arg(node, 2 if packet in (aten.split, aten.split_with_sizes) else 1, 0)
        for t in ins:
            free(t, dim)
        return
    raise _Unsafe(f"{name} is not known to keep its rows apart")


def _plan(gm: torch.fx.GraphModule, s: Any) -> Plan:
    """The plan for one symbol, or _Unsafe."""
    plan = Plan(s)
    dims: dict[torch.fx.Node, Any] = {}
    moved: set[torch.fx.Node] = set()
    index = 0
    for node in gm.graph.nodes:
        val = node.meta.get("val")
        if node.op == "placeholder":
            if _has(val, s):
                plan.sizes[index] = _whole_factor(val, s, "an argument")
            d = _dims(val, s)
            dims[node] = d
            moved.add(node)
            if _padded(d):
                if any(not isinstance(k, int) for k in d if k is not None):
                    raise _Unsafe(f"input {index} has a dim of size {val.shape}")
                plan.inputs[index] = [(i, k) for i, k in enumerate(d) if k is not None]
            index += 1
        elif node.op == "call_function":
            name = str(node.target)
            mentions = any(_has(a.meta.get("val"), s) for a in node.all_input_nodes)
            if "assert" in name or "constrain" in name:
                if mentions:
                    raise _Unsafe(f"{name} asserts on it")
                continue
            if isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool)):
                continue  # a size computed from sizes: its uses are checked
            if node.target is operator.getitem:
                parent, (source, at) = dims.get(node.args[0]), node.args
                many = isinstance(source.meta.get("val"), (tuple, list))
                dims[node] = parent[at] if many and parent is not None else _dims(val, s)
                continue
            many = isinstance(val, (tuple, list))
            outs = [_dims(v, s) for v in val] if many else [_dims(val, s)]
            ins = [dims.get(a) for a in _flat_nodes(node.args)]
            if mentions or any(_padded(d) for d in ins) or any(_padded(o) for o in outs):
                if val is None:
                    raise _Unsafe(f"{name} returns nothing")
                _check_op(node, ins, outs, s, moved)
            # A value with no dim sized by s is the same as without the
            # padding; one moved from such values or from an input pads
            # with zeros or copies of real rows.
            packet = getattr(node.target, "overloadpacket", None)
            source = node.args[0] if node.args else None
            movement = packet in _MOVES or packet in _VIEWS or packet in (aten.slice, aten.select)
            if not any(_padded(o) for o in outs) or (movement and source in moved):
                moved.add(node)
            dims[node] = outs if many else outs[0]
        elif node.op == "output":
            outputs = node.args[0] if isinstance(node.args[0], (list, tuple)) else [node.args[0]]
            for i, out in enumerate(outputs):
                v = out.meta.get("val") if isinstance(out, torch.fx.Node) else None
                if _has(v, s):
                    # A size saved for the backward graph: it gets the true one.
                    plan.size_outputs[i] = _whole_factor(v, s, f"output {i}")
                    continue
                d = _dims(v, s)
                if not _padded(d):
                    continue
                if any(k is not None for k in d[1:]):
                    raise _Unsafe(f"output {i} has a dim sized by it other than its first")
                plan.outputs.add(i)
        elif node.op == "get_attr":
            dims[node] = _dims(val, s)  # a constant of the graph
            moved.add(node)
        else:
            raise _Unsafe(f"a {node.op} node")
    return plan


def _flat_nodes(args: Any) -> list[torch.fx.Node]:
    out = []
    for a in args:
        if isinstance(a, torch.fx.Node):
            out.append(a)
        elif isinstance(a, (list, tuple)):
            out.extend(_flat_nodes(a))
    return out


def plans(gm: torch.fx.GraphModule) -> list[Plan]:
    """The symbols of `gm` that can be padded, each with its plan."""
    symbols = set()
    for node in gm.graph.nodes:
        if node.op != "placeholder":
            continue
        val = node.meta.get("val")
        if isinstance(val, torch.SymInt):
            symbols |= val.node.expr.free_symbols
        elif isinstance(val, torch.Tensor):
            for size in val.shape:
                if isinstance(size, torch.SymInt):
                    symbols |= size.node.expr.free_symbols
    out = []
    for s in sorted(symbols, key=str):
        try:
            plan = _plan(gm, s)
        except _Unsafe as e:
            log.info("torch.compile graph: dim %s compiles for each size: %s", s, e)
            continue
        except Exception as e:  # a graph this check does not understand stays exact
            log.info("torch.compile graph: dim %s compiles for each size: the check failed (%s: %s)", s,
                     type(e).__name__, e)
            continue
        if plan.inputs and plan.outputs:
            out.append(plan)
    return out


def padded(run: Callable[..., Any], plans_: list[Plan], bucket: Callable[[int], int], pad: Callable) -> Callable:
    """`run` at the buckets of the plans' symbols: pads the inputs with
    `pad(tensor, dim, extra)`, passes each symbol's bucket, and narrows the
    outputs."""

    def call(*args: Any) -> Any:
        new = list(args)
        narrow: dict[int, tuple[int, int]] = {}  # output -> (size, bucket) of its symbol
        sizes: dict[int, int] = {}
        for plan in plans_:
            i, [(d, k), *_] = next(iter(plan.inputs.items()))
            n, rem = divmod(args[i].shape[d], k)
            consistent = rem == 0 and n > 0 and all(
                args[j].shape[e] == n * q for j, at in plan.inputs.items() for e, q in at)
            if not consistent:
                return run(*args)
            b = bucket(n)
            if b == n:
                continue
            for j, at in plan.inputs.items():
                for e, q in at:
                    new[j] = pad(new[j], e, (b - n) * q)
            for j, q in plan.sizes.items():
                new[j] = b * q
            for j in plan.outputs:
                narrow[j] = (n, b)
            for j, q in plan.size_outputs.items():
                sizes[j] = n * q
        args = new
        out = run(*args)
        if not narrow and not sizes:
            return out
        single = not isinstance(out, (list, tuple))
        outs = [out] if single else list(out)
        for i, (n, b) in narrow.items():
            outs[i] = outs[i].narrow(0, 0, outs[i].shape[0] // b * n)
        for i, n in sizes.items():
            outs[i] = n
        return outs[0] if single else type(out)(outs)

    return call
