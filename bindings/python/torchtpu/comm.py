"""Collectives across this process's tpu devices: ``torch.tpu.comm``.

Each call takes one tensor per device (rank ``r`` is ``tensors[r]``, on its
own device) and returns one new tensor per device. The runtime lowers each
collective to one StableHLO program replicated over the devices
(``num_replicas = len(tensors)``), caches it like any other program, and in
fused mode flushes every member device first. The shapes follow
``torch.distributed``'s tensor forms (``all_gather_into_tensor``,
``reduce_scatter_tensor``, ``all_to_all_single``)::

    xs = [torch.full((4,), float(i), device=f"tpu:{i}") for i in range(4)]
    torch.tpu.comm.all_reduce(xs)          # four tensors of 6.0
    torch.tpu.comm.all_gather(xs)          # four float32[16]

Across processes, use ``torch.distributed`` with the ``tpu`` backend
(:mod:`torchtpu.distributed`).
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

import torch

from . import _C

__all__ = ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all", "permute", "barrier"]

# ttpu_collective_kind and ttpu_reduce_op (include/torchtpu.h).
ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER, BROADCAST, ALL_TO_ALL, PERMUTE = range(6)
_REDUCE_OPS = {"sum": 0, "avg": 1, "max": 2, "min": 3, "prod": 4, "product": 4}


def reduce_op_code(op: Any) -> int:
    """The runtime's code for ``op``: a name (``"sum"``, ``"avg"``, ``"max"``,
    ``"min"``, ``"prod"``) or a ``torch.distributed.ReduceOp``."""
    name = op if isinstance(op, str) else _reduce_op_name(op)
    try:
        return _REDUCE_OPS[name.lower()]
    except KeyError:
        raise ValueError(f"unsupported reduce op {op!r}: expected one of sum, avg, max, min, prod") from None


def _reduce_op_name(op: Any) -> str:
    import torch.distributed as dist

    kind = getattr(op, "op", op)  # a ReduceOp instance carries its RedOpType in `.op`
    names = {dist.ReduceOp.SUM: "sum", dist.ReduceOp.AVG: "avg", dist.ReduceOp.MAX: "max",
             dist.ReduceOp.MIN: "min", dist.ReduceOp.PRODUCT: "prod"}
    for k, name in names.items():
        if kind == k:
            return name
    return str(op)


def run(kind: int, tensors: Sequence[torch.Tensor], *, op: Any = "sum", root: int = 0,
        pairs: Iterable[tuple[int, int]] = (), group: Sequence[int] = ()) -> list[torch.Tensor]:
    """Runs collective ``kind`` (the module's constants). ``group``, PJRT global
    device ids in rank order, is for a group that spans processes (``tensors``
    then holds this process's members); empty means the tensors' own devices."""
    flat = [int(x) for pair in pairs for x in pair]
    return _C._collective(kind, reduce_op_code(op), root, flat, list(group), list(tensors))


def all_reduce(tensors: Sequence[torch.Tensor], op: Any = "sum") -> list[torch.Tensor]:
    """Each device gets the reduction of every device's tensor."""
    return run(ALL_REDUCE, tensors, op=op)


def all_gather(tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Each device gets every device's tensor, concatenated along dim 0."""
    return run(ALL_GATHER, tensors)


def reduce_scatter(tensors: Sequence[torch.Tensor], op: Any = "sum") -> list[torch.Tensor]:
    """The reduction, split along dim 0: device ``r`` gets chunk ``r``."""
    return run(REDUCE_SCATTER, tensors, op=op)


def broadcast(tensors: Sequence[torch.Tensor], root: int = 0) -> list[torch.Tensor]:
    """Each device gets rank ``root``'s tensor, bit for bit."""
    return run(BROADCAST, tensors, root=root)


def all_to_all(tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Dim 0 split into one chunk per rank; chunk ``j`` of rank ``i`` becomes
    chunk ``i`` of rank ``j``."""
    return run(ALL_TO_ALL, tensors)


def permute(tensors: Sequence[torch.Tensor], pairs: Iterable[tuple[int, int]]) -> list[torch.Tensor]:
    """Send/recv: each ``(source, target)`` pair moves the source's tensor to
    the target; a rank that is no pair's target gets zeros."""
    return run(PERMUTE, tensors, pairs=pairs)


def barrier(devices: Iterable[Any] | None = None) -> None:
    """Waits until all work queued on ``devices`` (default: all) is done."""
    if devices is None:
        indices = list(range(_C._device_count()))
    else:
        indices = [d if isinstance(d, int) else _device_index(torch.device(d)) for d in devices]
    _C._barrier(indices)


def _device_index(device: torch.device) -> int:
    if device.type != "tpu":
        raise ValueError(f"barrier: expected tpu devices, got {device}")
    return device.index if device.index is not None else _C._current_device()
