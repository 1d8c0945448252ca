"""An orderly end of the runtime at interpreter exit.

Without it the process exits with the runtime still running: its stream
workers, the PJRT client's thread pools and work still in flight on them (a
training loop's last steps are rarely synchronized) keep going while the
interpreter finalizes and the C++ static destructors of PyTorch and of the
PJRT plugin run under them. The hook below, registered with :mod:`atexit`
when the backend loads, instead waits for that work, joins the runtime's
threads and destroys the PJRT client (``ttpu_runtime_shutdown``) while the
interpreter is still whole. Tensors freed later (module globals, during
finalization) free nothing on the device (that would need the client);
what they held goes with the process a moment later.

``TORCHTPU_SHUTDOWN_TIMEOUT`` bounds the wait, in seconds (default 10, as
PyTorch's autograd engine bounds its own shutdown); when work is still
running then (a program that never ends), the runtime is left running and
the process exits as it would have without the hook. ``0`` turns the hook
off. A failure is reported on stderr and never changes the exit status.

The hook also ends the heartbeat threads of ``tpu`` process groups that were
never destroyed (see ``distributed._Heartbeat.stop_all``).
"""

from __future__ import annotations

import atexit
import os
import sys

DEFAULT_TIMEOUT_S = 10.0

_installed = False
# Set in a child forked after the runtime started: the runtime it inherited
# has no threads (fork copies only the caller's), so waiting for its work
# would only wait out the timeout.
_forked = False


def _timeout() -> float:
    raw = os.environ.get("TORCHTPU_SHUTDOWN_TIMEOUT", "")
    try:
        return float(raw) if raw.strip() else DEFAULT_TIMEOUT_S
    except ValueError:
        sys.stderr.write(f"torchtpu: ignoring TORCHTPU_SHUTDOWN_TIMEOUT={raw!r} (not a number of seconds)\n")
        return DEFAULT_TIMEOUT_S


def shutdown_at_exit() -> None:
    """The atexit hook: ends the process groups' heartbeat threads, then
    shuts the runtime down if this process started one."""
    from . import _C

    timeout = _timeout()
    if _forked or timeout <= 0:
        return
    from . import distributed, tpu

    distributed._Heartbeat.stop_all(min(timeout, 2 * distributed.HEARTBEAT_S))
    if not _C._runtime_started():
        return

    try:
        # Through the C ABI, which releases the GIL for the wait: threads
        # still finishing tpu calls can return to Python meanwhile.
        tpu._runtime().shutdown(timeout)
    except Exception as e:  # noqa: BLE001 (nothing may fail the exit)
        sys.stderr.write(f"torchtpu: at interpreter exit: {e}\n")


def _after_fork_in_child() -> None:
    global _forked
    from . import _C

    _forked = _C._runtime_started()


def install() -> None:
    """Registers the hook (once). Called while ``import torch`` loads the
    backend, so it runs after the atexit hooks of user code (they run in
    reverse order of registration), which may still use tpu tensors."""
    global _installed
    if _installed:
        return
    atexit.register(shutdown_at_exit)
    os.register_at_fork(after_in_child=_after_fork_in_child)
    _installed = True
