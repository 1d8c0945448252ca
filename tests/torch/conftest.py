"""Tests of the PyTorch device "tpu" (the native PrivateUse1 backend), always
against PyTorch on CPU. The package is the checkout's, installed editable by
scripts/setup.sh; `import torch` alone loads it through its entry point."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

# A private, empty fused-program disk cache for the test session.
if "TORCHTPU_CACHE_DIR" not in os.environ:
    # Removed when the session ends, so test runs do not fill the disk.
    os.environ["TORCHTPU_CACHE_DIR"] = tempfile.mkdtemp(prefix="torchtpu-torch-test-cache-")
    atexit.register(shutil.rmtree, os.environ["TORCHTPU_CACHE_DIR"], ignore_errors=True)

import pytest  # noqa: E402
import torch  # noqa: E402

assert hasattr(torch, "tpu"), "the tpu device did not load through the torch.backends entry point"

MODES = ["DEFER_NEVER", "DEFER_NEVER_AND_LAUNCH_BLOCKING", "DEFER_AND_FUSE"]


@pytest.fixture(params=MODES)
def eager_mode(request):
    """Runs the test in each eager mode, restoring the previous one."""
    with torch.tpu.set_eager_mode(request.param):
        yield request.param


def pytest_terminal_summary(terminalreporter):
    """The per-op OpInfo table: samples passed / failed / skipped. With
    `TORCHTPU_OPINFO_REPORT` set, the counts are also written there as JSON
    for `op_coverage.py --opinfo-report`, which prints the pass rate over
    the whole database and per family."""
    try:
        from test_opinfo import DOCUMENTED, RESULTS
    except ImportError:
        return
    if not RESULTS:
        return
    report = os.environ.get("TORCHTPU_OPINFO_REPORT")
    if report:
        import json

        with open(report, "w") as f:
            json.dump({"torch": torch.__version__, "results": RESULTS, "documented": DOCUMENTED}, f)
    tr = terminalreporter
    tr.section("OpInfo conformance: samples per op (pass / fail / skip)")
    full = [n for n, c in RESULTS.items() if c["pass"] and not c["fail"]]
    for name in sorted(RESULTS):
        c = RESULTS[name]
        tr.write_line(f"{name:48s} {c['pass']:3d} {c['fail']:3d} {c['skip']:3d}")
    tr.write_line(f"ops with every run sample passing: {len(full)} of {len(RESULTS)}")
