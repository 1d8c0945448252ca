"""Bad input through the C ABI: each case gets a clear error that names the
op and the shapes (or the handle, device, plugin), and the runtime stays
usable afterwards."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import torchtpu
from torchtpu._capi import check as check_err, ffi, lib
from conftest import call, check, cpu, tpu

REPO = Path(__file__).resolve().parents[2]


def still_works(rt):
    a = torch.tensor([1.0, 2.0])
    check(call(rt, "aten::add.Tensor", a, a), a + a)


def test_mismatched_shapes(rt):
    with pytest.raises(torchtpu.InvalidArgumentError) as e:
        call(rt, "aten::mul.Tensor", torch.ones(2, 3), torch.ones(4))
    msg = str(e.value)
    assert "aten::mul.Tensor" in msg and "[2, 3]" in msg and "[4]" in msg, msg
    still_works(rt)


def test_unknown_op_suggests(rt):
    with pytest.raises(torchtpu.NotFoundError, match="aten::silly_op"):
        rt.call("aten::silly_op")
    with pytest.raises(torchtpu.NotFoundError, match="did you mean aten::relu"):
        rt.call("aten::relux", tpu(rt, torch.ones(1)))
    with pytest.raises(torchtpu.NotFoundError, match="overloads of aten::add"):
        rt.call("aten::add", tpu(rt, torch.ones(1)))
    still_works(rt)


def test_wrong_argument_type_names_the_argument(rt):
    with pytest.raises(torchtpu.InvalidArgumentError, match="'other'.*Tensor.*not str"):
        rt.call("aten::add.Tensor", tpu(rt, torch.ones(1)), "two")
    with pytest.raises(torchtpu.InvalidArgumentError, match="missing required argument 'other'"):
        rt.call("aten::mul.Tensor", tpu(rt, torch.ones(1)))
    with pytest.raises(torchtpu.InvalidArgumentError, match="at most"):
        rt.call("aten::neg", tpu(rt, torch.ones(1)), 1, 2)
    still_works(rt)


def test_unsupported_dtype(rt):
    # complex32 has no StableHLO type (complex64 and complex128 work).
    with pytest.raises(torchtpu.UnimplementedError, match="complex32"):
        rt.from_bytes(b"\0" * 4, 8, [1])
    with pytest.raises(torchtpu.UnimplementedError) as e:
        rt.call("aten::_to_copy", tpu(rt, torch.ones(2)), torchtpu.DType(8))
    assert "aten::_to_copy" in str(e.value) and "complex32" in str(e.value)
    # An op without complex support refuses a complex64 tensor by name.
    z = rt.call1("aten::_to_copy", tpu(rt, torch.ones(2)), torchtpu.DType(9))
    with pytest.raises(torchtpu.UnimplementedError) as e:
        rt.call("aten::erf", z)
    assert "aten::erf" in str(e.value) and "complex64" in str(e.value)
    still_works(rt)


def test_device_out_of_range(rt):
    n = rt.device_count()
    with pytest.raises(torchtpu.OutOfRangeError) as e:
        rt.from_numpy(np.ones(2, np.float32), device=n + 3)
    assert str(n + 3) in str(e.value) and f"{n} device" in str(e.value)
    with pytest.raises(torchtpu.OutOfRangeError):
        rt.call("aten::_to_copy", tpu(rt, torch.ones(2)), None, None, n)
    still_works(rt)


def test_null_handles(rt):
    out = ffi.new("size_t*")
    with pytest.raises(torchtpu.InvalidArgumentError, match="ttpu_runtime_t is NULL"):
        check_err(lib.ttpu_runtime_device_count(ffi.NULL, out))
    buf = ffi.new("char[]", 8)
    with pytest.raises(torchtpu.InvalidArgumentError, match="ttpu_tensor_t is NULL"):
        check_err(lib.ttpu_tensor_to_host(rt.handle, ffi.NULL, buf, 8))
    args = ffi.new("ttpu_value_t[]", 2)
    args[0].kind = lib.TTPU_VALUE_KIND_TENSOR
    args[0].ptr = ffi.NULL
    args[1].kind = lib.TTPU_VALUE_KIND_TENSOR
    args[1].ptr = ffi.NULL
    count = ffi.new("size_t*")
    outs = ffi.new("ttpu_value_t[]", 4)
    with pytest.raises(torchtpu.InvalidArgumentError, match="aten::add.Tensor: argument 0"):
        check_err(lib.ttpu_op_call(rt.handle, b"aten::add.Tensor", args, 2, outs, 4, count))
    with pytest.raises(torchtpu.InvalidArgumentError, match="name"):
        check_err(lib.ttpu_op_call(rt.handle, ffi.NULL, args, 0, outs, 4, count))
    # A pointer of the wrong type is rejected, not misread.
    with pytest.raises(torchtpu.InvalidArgumentError, match="not a live ttpu_tensor_t"):
        check_err(lib.ttpu_tensor_to_host(rt.handle, ffi.cast("ttpu_tensor_t*", rt.handle), buf, 8))
    # Destroying NULL is a no-op; the error getters accept NULL.
    lib.ttpu_tensor_destroy(ffi.NULL)
    lib.ttpu_runtime_destroy(ffi.NULL)
    lib.ttpu_error_destroy(ffi.NULL)
    assert lib.ttpu_error_code(ffi.NULL) == lib.TTPU_CODE_OK
    still_works(rt)


def test_result_capacity_and_byte_counts(rt):
    x = tpu(rt, torch.ones(3))
    args = ffi.new("ttpu_value_t[]", 1)
    args[0].kind = lib.TTPU_VALUE_KIND_TENSOR
    args[0].ptr = x.handle
    count = ffi.new("size_t*")
    with pytest.raises(torchtpu.ResourceExhaustedError, match="capacity 0"):
        check_err(lib.ttpu_op_call(rt.handle, b"aten::neg", args, 1, ffi.NULL, 0, count))
    # An in-place op refused for capacity did not run: the tensor is unchanged.
    args2 = ffi.new("ttpu_value_t[]", 2)
    args2[0].kind = lib.TTPU_VALUE_KIND_TENSOR
    args2[0].ptr = x.handle
    args2[1].kind = lib.TTPU_VALUE_KIND_SCALAR_INT
    args2[1].i = 5
    with pytest.raises(torchtpu.ResourceExhaustedError, match="capacity 0"):
        check_err(lib.ttpu_op_call(rt.handle, b"aten::add_.Scalar", args2, 2, ffi.NULL, 0, count))
    check(cpu(x), torch.ones(3))
    buf = ffi.new("char[]", 4)
    with pytest.raises(torchtpu.InvalidArgumentError, match="12"):
        check_err(lib.ttpu_tensor_to_host(rt.handle, x.handle, buf, 4))
    with pytest.raises(torchtpu.InvalidArgumentError, match="needs 8"):
        rt.from_bytes(b"\0" * 4, torch.float32, [2])
    still_works(rt)


def test_struct_size_and_modes(rt):
    opts = ffi.new("ttpu_runtime_options_t*")
    opts.struct_size = 4
    out = ffi.new("ttpu_runtime_t**")
    with pytest.raises(torchtpu.InvalidArgumentError, match="struct_size 4"):
        check_err(lib.ttpu_runtime_create(opts, out))
    with pytest.raises(torchtpu.InvalidArgumentError, match="unknown execution mode 7"):
        torchtpu.set_mode(7)
    stats = ffi.new("ttpu_stats_t*")
    stats.struct_size = 8
    with pytest.raises(torchtpu.InvalidArgumentError, match="struct_size 8"):
        check_err(lib.ttpu_runtime_stats(rt.handle, stats))
    still_works(rt)


def test_missing_plugin_lists_what_was_tried():
    with pytest.raises(torchtpu.NotFoundError) as e:
        torchtpu.Runtime(plugin="/nonexistent/libpjrt_missing.so")
    msg = str(e.value)
    assert "/nonexistent/libpjrt_missing.so" in msg and "scripts/setup.sh" in msg, msg
    # Through the environment, in a fresh process.
    code = (
        "import sys; sys.path.insert(0, %r)\n"
        "import torchtpu\n"
        "try:\n    torchtpu.Runtime()\nexcept torchtpu.NotFoundError as e:\n    print('ERR', e)\n"
    ) % str(REPO / "bindings" / "python")
    env = dict(os.environ, TORCHTPU_PJRT_PLUGIN="/nope/plugin.so")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert "ERR" in r.stdout and "TORCHTPU_PJRT_PLUGIN" in r.stdout and "/nope/plugin.so" in r.stdout, r.stdout + r.stderr


def test_version_functions():
    import re
    cargo = (REPO / "Cargo.toml").read_text()
    want = re.search(r'^version = "([^"]+)"', cargo, re.M).group(1)
    assert ffi.string(lib.ttpu_version()).decode() == want
    assert lib.ttpu_api_version() == lib.TTPU_API_MAJOR * 1000 + lib.TTPU_API_MINOR
