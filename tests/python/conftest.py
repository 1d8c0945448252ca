"""The conformance harness: drives libtorchtpu only through its C ABI (cffi
over the committed header) and compares against PyTorch on CPU.

Every test runs once per execution mode (strict eager, debug and fused)
through the autouse ``mode`` fixture, so one body covers all three.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

# These tests drive the C ABI of this checkout: keep PyTorch from importing
# an installed torchtpu through its device-backend entry point first.
os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"

import pytest  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bindings" / "python"))
# The fused-program disk cache of the tests is their own (and starts empty).
if "TORCHTPU_CACHE_DIR" not in os.environ:
    # Removed when the session ends, so test runs do not fill the disk.
    os.environ["TORCHTPU_CACHE_DIR"] = tempfile.mkdtemp(prefix="torchtpu-test-cache-")
    atexit.register(shutil.rmtree, os.environ["TORCHTPU_CACHE_DIR"], ignore_errors=True)

import torchtpu  # noqa: E402
from torchtpu.runtime import DTYPE_NAMES, DType, Runtime, Tensor, thread_mode  # noqa: E402

MODES = {
    "strict": torchtpu.DEFER_NEVER,
    "debug": torchtpu.DEFER_NEVER_AND_LAUNCH_BLOCKING,
    "fused": torchtpu.DEFER_AND_FUSE,
}
FLOATS = [torch.float32, torch.bfloat16, torch.float16]
_TORCH_DTYPES = {name: getattr(torch, name) for name in DTYPE_NAMES.values()}


@pytest.fixture(scope="session")
def rt() -> Runtime:
    r = Runtime()
    yield r
    r.close()


@pytest.fixture(params=list(MODES), autouse=True)
def mode(request):
    """Runs the test in each execution mode."""
    with thread_mode(MODES[request.param]):
        yield request.param


def tpu(rt: Runtime, t: torch.Tensor, device: int = 0) -> Tensor:
    """Copies a CPU tensor to the device (dense)."""
    t = t.detach().contiguous()
    raw = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
    return rt.from_bytes(raw, str(t.dtype), list(t.shape), device)


def cpu(x: Tensor) -> torch.Tensor:
    """Copies a device tensor back as a CPU tensor of the same dtype."""
    dt = _TORCH_DTYPES[DTYPE_NAMES[x.dtype]]
    if x.numel() == 0:
        return torch.empty(x.shape, dtype=dt)
    return torch.frombuffer(bytearray(x.to_bytes()), dtype=dt).reshape(x.shape)


def _arg(rt: Runtime, a: Any) -> Any:
    if isinstance(a, torch.Tensor):
        return tpu(rt, a)
    if isinstance(a, torch.dtype):
        return DType(a)
    if isinstance(a, (list, tuple)) and a and any(isinstance(x, torch.Tensor) for x in a):
        return [None if x is None else tpu(rt, x) for x in a]
    return a


def call(rt: Runtime, name: str, *args: Any) -> Any:
    """Calls an op with torch tensors converted to device tensors; returns a
    CPU tensor, or a list when the op returns several."""
    out = rt.call(name, *[_arg(rt, a) for a in args])
    res = [None if o is None else cpu(o) for o in out]
    return res[0] if len(res) == 1 else res


def check(actual: torch.Tensor, expected: torch.Tensor, **tol: Any) -> None:
    """Same dtype, same shape, values close (torch.testing defaults per dtype
    unless `atol`/`rtol` are given)."""
    assert isinstance(actual, torch.Tensor), actual
    assert actual.dtype == expected.dtype, f"dtype {actual.dtype} != {expected.dtype}"
    assert actual.shape == expected.shape, f"shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    torch.testing.assert_close(actual, expected, equal_nan=True, **tol)


def view(rt: Runtime, x: Tensor, sizes, strides, offset: int = 0) -> Tensor:
    """A non-contiguous view of a device tensor (aten::as_strided)."""
    return rt.call1("aten::as_strided", x, list(sizes), list(strides), offset)


def tol_for(dtype: torch.dtype, f32: float = 1e-5) -> dict:
    """Tolerances for results computed in opmath and rounded to `dtype`."""
    if dtype == torch.bfloat16:
        return {"atol": 1e-2, "rtol": 1.6e-2}
    if dtype == torch.float16:
        return {"atol": 1e-3, "rtol": 1e-3}
    if dtype == torch.float64:
        return {"atol": 1e-10, "rtol": 1e-10}
    return {"atol": f32, "rtol": f32}


def sample(shape, dtype=torch.float32, scale=1.0):
    """Standard-normal values of `shape`, scaled, in `dtype`."""
    return (torch.randn(shape) * scale).to(dtype)


def raises(rt, match, name, *args):
    """Calls op `name` expecting INVALID_ARGUMENT whose message names the op
    and contains each of `match`."""
    with pytest.raises(torchtpu.InvalidArgumentError) as e:
        call(rt, name, *args)
    msg = str(e.value)
    assert name in msg, msg
    for m in match if isinstance(match, (list, tuple)) else [match]:
        assert m in msg, msg
