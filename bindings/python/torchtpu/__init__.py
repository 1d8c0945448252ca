"""torchtpu: PyTorch on TPUs through a native Rust runtime and its C ABI.

Importing the package (or just ``import torch``, through the
``torch.backends`` entry point) makes the device ``"tpu"`` available:
``torch.randn(3, device="tpu")``, ``model.to("tpu")``, ``torch.tpu.*`` and
``torch.compile(backend="tpu")``. The C ABI binding itself is
:mod:`torchtpu.runtime`.
"""

from ._capi import (  # noqa: F401
    AbortedError,
    DeadlineExceededError,
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
    Generator,
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
from ._plugins import Plugin, PluginOp, load_plugins, plugins  # noqa: F401

__version__ = version()


def _autoload() -> None:
    """The ``torch.backends`` entry point: PyTorch calls it at ``import torch``."""
    from . import _device

    _device.register()


def _backend_built() -> bool:
    import importlib.util

    return importlib.util.find_spec("torchtpu._C") is not None


# The C ABI binding works without PyTorch, and without the native backend
# (a source checkout before `scripts/setup.sh` built it).
if _backend_built():
    try:
        import torch as _torch  # noqa: F401
    except ImportError:
        pass
    else:
        _autoload()
