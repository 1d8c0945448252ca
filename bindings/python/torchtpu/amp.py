"""``torch.tpu.amp``: automatic mixed precision on "tpu", like ``torch.cuda.amp``.

``autocast`` is ``torch.autocast`` with ``device_type="tpu"`` and
``GradScaler`` is ``torch.amp.GradScaler`` with ``device="tpu"``: thin
subclasses that fix the device, PyTorch's device-generic code doing all the
work. The autocast op policy (which ops run in the 16-bit dtype, which in
float32) is the native backend's (``csrc/autocast.cpp``), and GradScaler's
unscale and scale-update kernels are the runtime's.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

__all__ = ["GradScaler", "autocast", "custom_bwd", "custom_fwd"]


class autocast(torch.amp.autocast_mode.autocast):
    """``torch.autocast("tpu", ...)``. ``dtype`` defaults to
    ``torch.get_autocast_dtype("tpu")`` (PyTorch's default for the device:
    float16); ``torch.bfloat16`` is the TPU's native 16-bit type."""

    def __init__(self, enabled: bool = True, dtype: torch.dtype | None = None, cache_enabled: bool = True):
        super().__init__("tpu", dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)


class GradScaler(torch.amp.GradScaler):
    """``torch.amp.GradScaler("tpu", ...)``: skips the optimizer step when a
    gradient holds inf or NaN and backs the scale off, as on CUDA."""

    def __init__(self, init_scale: float = 2.0**16, growth_factor: float = 2.0, backoff_factor: float = 0.5,
                 growth_interval: int = 2000, enabled: bool = True) -> None:
        super().__init__("tpu", init_scale=init_scale, growth_factor=growth_factor, backoff_factor=backoff_factor,
                         growth_interval=growth_interval, enabled=enabled)


def custom_fwd(fwd: Any = None, *, cast_inputs: torch.dtype | None = None) -> Any:
    """``torch.amp.custom_fwd(..., device_type="tpu")``."""
    return functools.partial(torch.amp.custom_fwd, device_type="tpu")(fwd=fwd, cast_inputs=cast_inputs)


def custom_bwd(bwd: Any) -> Any:
    """``torch.amp.custom_bwd(..., device_type="tpu")``."""
    return functools.partial(torch.amp.custom_bwd, device_type="tpu")(bwd)
