"""Per-rank device visibility from the ``torchrun`` environment, so that a
CUDA script needs only ``backend="tpu"``.

torchrun sets ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE`` and ``WORLD_SIZE`` for each
process. Before the PJRT client starts, :func:`configure_visibility` gives
each local process its own TPU chip through the variables libtpu reads
(only where the user set none of them; a pod launch sets them per host, see
the README). :func:`bind_local_rank` makes the rank's device
the default ``tpu`` device, as ``torch.cuda.set_device(LOCAL_RANK)`` would.
"""

from __future__ import annotations

import os

# libtpu's multi-process variables; a user who sets any of them owns the layout.
_LIBTPU_VARS = ("TPU_VISIBLE_CHIPS", "TPU_CHIPS_PER_PROCESS_BOUNDS", "TPU_PROCESS_BOUNDS", "TPU_PROCESS_ADDRESSES",
                "TPU_PROCESS_PORT", "CLOUD_TPU_TASK_ID")
_BASE_PORT = 8476


def _local() -> tuple[int, int] | None:
    """(local rank, local world size) under torchrun with several local
    processes, else None."""
    try:
        rank = int(os.environ["LOCAL_RANK"])
        size = int(os.environ.get("LOCAL_WORLD_SIZE", os.environ.get("WORLD_SIZE", "1")))
    except (KeyError, ValueError):
        return None
    return (rank, size) if size > 1 and 0 <= rank < size else None


def configure_visibility() -> None:
    """One chip per local process, for libtpu (other plugins ignore these)."""
    local = _local()
    if local is None or any(v in os.environ for v in _LIBTPU_VARS):
        return
    rank, size = local
    os.environ.update({
        "TPU_VISIBLE_CHIPS": str(rank),
        "TPU_CHIPS_PER_PROCESS_BOUNDS": "1,1,1",
        "TPU_PROCESS_BOUNDS": os.environ.get("TORCHTPU_PROCESS_BOUNDS", f"{size},1,1"),
        "TPU_PROCESS_ADDRESSES": ",".join(f"localhost:{_BASE_PORT + i}" for i in range(size)),
        "TPU_PROCESS_PORT": str(_BASE_PORT + rank),
        "CLOUD_TPU_TASK_ID": str(rank),
    })


def bind_local_rank(set_first_default_device) -> None:
    """Makes ``tpu:LOCAL_RANK`` (modulo the device count) the default device
    the runtime starts with. Starting it is left to the first use, so that
    ``init_process_group`` can still make its client join the other
    processes (:mod:`torchtpu.distributed`)."""
    local = _local()
    if local is not None:
        set_first_default_device(local[0])
