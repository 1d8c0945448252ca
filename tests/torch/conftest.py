"""Tests of the PyTorch device "tpu" (the native PrivateUse1 backend), always
against PyTorch on CPU. The package is the checkout's, installed editable by
scripts/setup.sh; `import torch` alone loads it through its entry point."""

from __future__ import annotations

import os
import tempfile

# A private, empty fused-program disk cache for the test session.
os.environ.setdefault("TORCHTPU_CACHE_DIR", tempfile.mkdtemp(prefix="torchtpu-torch-test-cache-"))

import pytest  # noqa: E402
import torch  # noqa: E402

assert hasattr(torch, "tpu"), "the tpu device did not load through the torch.backends entry point"

MODES = ["DEFER_NEVER", "DEFER_NEVER_AND_LAUNCH_BLOCKING", "DEFER_AND_FUSE"]


@pytest.fixture(params=MODES)
def eager_mode(request):
    """Runs the test in each eager mode, restoring the previous one."""
    with torch.tpu.set_eager_mode(request.param):
        yield request.param
