"""torchtpu: PyTorch on TPUs through a native Rust runtime and its C ABI.

This package currently exposes the C ABI binding (:mod:`torchtpu.runtime`).
"""

from ._capi import (  # noqa: F401
    FailedPreconditionError,
    InternalError,
    InvalidArgumentError,
    NotFoundError,
    OutOfRangeError,
    ResourceExhaustedError,
    TorchTPUError,
    UnimplementedError,
)
from .runtime import (  # noqa: F401
    DEFER_AND_FUSE,
    DEFER_NEVER,
    DEFER_NEVER_AND_LAUNCH_BLOCKING,
    DType,
    Event,
    Runtime,
    Scalar,
    Stream,
    Tensor,
    get_mode,
    set_mode,
    set_thread_mode,
    thread_mode,
    version,
)

__version__ = version()
