"""Registers the PyTorch device "tpu": the native backend (``torchtpu._C``),
the backend name, the ``torch.tpu`` module and the ``Tensor.tpu()`` family."""

from __future__ import annotations

import torch

_registered = False


def register() -> None:
    """Makes ``device="tpu"`` available. Idempotent."""
    global _registered
    if _registered:
        return
    from . import _C  # noqa: F401  (loading it registers kernels, guard, allocator, hooks)
    from . import tpu

    if torch._C._get_privateuse1_backend_name() != "tpu":
        torch.utils.rename_privateuse1_backend("tpu")
    torch._register_device_module("tpu", tpu)
    torch.utils.generate_methods_for_privateuse1_backend(
        for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True)
    _print_from_host()
    _registered = True


def _print_from_host() -> None:
    """Prints tpu tensors from a CPU copy, as PyTorch does for XLA: the
    formatter's many small ops (and data-dependent masks) would each become
    a device program."""
    import torch._tensor_str as ts

    format_tensor = ts._tensor_str

    def _tensor_str(self, indent):
        if self.device.type == "tpu":
            self = self.to("cpu")
        return format_tensor(self, indent)

    ts._tensor_str = _tensor_str
