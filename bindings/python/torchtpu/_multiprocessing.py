"""Sending tpu tensors between processes (``torch.multiprocessing``).

PyTorch shares a CPU tensor's memory with the receiver (a file descriptor)
and a CUDA tensor's device memory (CUDA IPC). A tpu storage is a runtime
buffer of this process, which no other process can map, so a tpu tensor
travels by value: a CPU copy of its elements, written into the pickle stream
as ``torch.save`` writes it, rebuilt on the receiver's runtime on the device
of the same index. The receiver gets a copy: writes on either side are not
seen by the other, unlike CPU and CUDA tensors.

The bytes go in the stream, not through shared memory, because the CPU copy
is a temporary: a ``Process`` argument is pickled before the process is
launched, and the file descriptor of a shared temporary would be closed by
then.
"""

from __future__ import annotations

import io
from multiprocessing.reduction import ForkingPickler

import torch
import torch.multiprocessing.reductions as reductions


def _to_bytes(obj) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def _from_bytes(data: bytes, index: int):
    return torch.load(io.BytesIO(data), map_location=torch.device("tpu", index), weights_only=True)


def _rebuild_tpu_tensor(cls, data, index, requires_grad):
    t = _from_bytes(data, index)
    if cls is torch.nn.Parameter:
        return torch.nn.Parameter(t, requires_grad=requires_grad)
    t.requires_grad = requires_grad
    return t


def _reduce_tpu_tensor(tensor):
    if tensor.requires_grad and not tensor.is_leaf:
        # PyTorch's own rule for every device: autograd does not cross processes.
        raise RuntimeError(
            "Cowardly refusing to serialize non-leaf tensor which requires_grad, "
            "since autograd does not support crossing process boundaries.  "
            "If you just want to transfer the data, call detach() on the tensor "
            "before serializing (e.g., putting it on the queue)."
        )
    torch.utils.hooks.warn_if_has_hooks(tensor)
    # The view's elements only (not its whole storage); preserve_format keeps
    # the strides of a dense view.
    cpu = tensor.detach().to("cpu", memory_format=torch.preserve_format)
    return (_rebuild_tpu_tensor, (type(tensor), _to_bytes(cpu), tensor.device.index, tensor.requires_grad))


def _rebuild_tpu_storage(data, index):
    return _from_bytes(data, index)._untyped_storage


def _reduce_tpu_storage(storage):
    return (_rebuild_tpu_storage, (_to_bytes(storage.cpu()), storage.device.index))


def _on_tpu(reduce_tpu, reduce_other):
    def reduce(obj):
        if obj.device.type == "tpu":
            return reduce_tpu(obj)
        return reduce_other(obj)

    reduce._torchtpu_wraps = reduce_other
    return reduce


def register() -> None:
    """Puts a tpu case in front of PyTorch's reducers for tensors and
    untyped storages (typed storages reduce to their untyped storage).
    Idempotent."""
    table = ForkingPickler._extra_reducers
    for cls, reduce in list(table.items()):
        if getattr(reduce, "_torchtpu_wraps", None) is not None:
            continue
        if reduce is reductions.reduce_tensor:
            ForkingPickler.register(cls, _on_tpu(_reduce_tpu_tensor, reduce))
        elif reduce is reductions.reduce_storage:
            ForkingPickler.register(cls, _on_tpu(_reduce_tpu_storage, reduce))
