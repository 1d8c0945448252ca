"""Registers the PyTorch device "tpu": the native backend (``torchtpu._C``),
the backend name, the ``torch.tpu`` module and the ``Tensor.tpu()`` family."""

from __future__ import annotations

import sys

import torch

_registered = False


def register() -> None:
    """Makes ``device="tpu"`` available. Idempotent."""
    global _registered
    if _registered:
        return
    from . import _launch

    _launch.configure_visibility()  # before the PJRT client starts
    from . import _C  # loading it registers kernels, guard, allocator, hooks
    from . import _exit, _multiprocessing, distributed, tpu

    _exit.install()  # the runtime's orderly end at interpreter exit

    _launch.bind_local_rank(_C._set_first_default_device)

    if torch._C._get_privateuse1_backend_name() != "tpu":
        torch.utils.rename_privateuse1_backend("tpu")
    torch._register_device_module("tpu", tpu)
    sys.modules["torch.tpu.amp"] = tpu.amp  # `from torch.tpu.amp import autocast`, as for torch.cuda.amp
    torch.utils.generate_methods_for_privateuse1_backend(
        for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True)
    _print_from_host()
    _multiprocessing.register()
    _plugin_ops()
    distributed.register()
    _registered = True


def _plugin_ops() -> None:
    """Loads ``$TORCHTPU_PLUGIN_PATH`` and defines the plugins' ops, so that
    ``torch.ops.<plugin>.<op>`` exists right after ``import torch``. A file
    that cannot load is a warning, not a failed import."""
    import warnings

    from . import _plugins as plugins
    from . import custom_ops

    try:
        plugins.load_env()
    except Exception as e:  # noqa: BLE001 (every rejection is reported, none is fatal)
        warnings.warn(f"torchtpu: some plugins in TORCHTPU_PLUGIN_PATH were not loaded: {e}", stacklevel=3)
    try:
        custom_ops.register_plugin_ops()  # warns about and records each plugin it skips
    except Exception as e:  # noqa: BLE001 (a plugin never makes `import torch` fail)
        warnings.warn(f"torchtpu: the plugins' ops were not registered with PyTorch: {e}", stacklevel=3)


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
