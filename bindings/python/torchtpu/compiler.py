"""``torch.compile(backend="tpu")``.

Dynamo captures the Python program; AOTAutograd turns it into functionalized
aten graphs, forward and backward. Each graph runs with every op deferred
(DEFER_AND_FUSE on the calling thread) and is flushed as one program at its
end. The runtime caches that program by the canonical hash of the graph, so
after the first call a graph costs one cache lookup and one launch, and
Dynamo's own cache skips Python re-tracing. A dynamic dim of a forward graph
that is row-wise (a batch) runs at its shape bucket (_buckets.py), so new
sizes within a bucket reuse the program.

Decompositions: PyTorch's core-ATen decompositions, except for ops the
runtime implements itself (one fused op beats its decomposition).
"""

from __future__ import annotations

import warnings
from typing import Any, Callable

import torch

from .runtime import DEFER_AND_FUSE, DEFER_NEVER, thread_mode


def _decompositions() -> dict:
    from torch._decomp import core_aten_decompositions

    from ._capi import ffi, lib

    native = set()
    out = ffi.new("char**")
    for i in range(lib.ttpu_op_count()):
        lib.ttpu_op_name(i, out)
        native.add(ffi.string(out[0]).decode())
    table = {}
    for op, fn in core_aten_decompositions().items():
        name = op.name() if hasattr(op, "name") else str(op)
        if name not in native:
            table[op] = fn
    return table


def _pad(t: torch.Tensor, dim: int, extra: int) -> torch.Tensor:
    """`t` with `extra` zeros after its end along `dim`, as a strict op: the
    pad is the program compiled for each size, not the graph."""
    with thread_mode(DEFER_NEVER):
        return torch.nn.functional.pad(t, [0, 0] * (t.dim() - 1 - dim) + [0, extra])


def _fused(gm: torch.fx.GraphModule, buckets: bool = False) -> Callable[..., Any]:
    """The graph as one fused program per call; with `buckets`, its dynamic
    dims that are row-wise run at their shape bucket (_buckets.py)."""
    from functorch.compile import make_boxed_func

    from . import _buckets, tpu

    def run(*args: Any) -> Any:
        with thread_mode(DEFER_AND_FUSE):
            out = gm(*args)
        # The whole graph becomes one program now, not at the next host read.
        tpu._runtime().flush()
        return out

    plans = _buckets.plans(gm) if buckets and _buckets.enabled() else []
    if plans:
        run = _buckets.padded(run, plans, tpu._runtime().shape_bucket, _pad)
    return make_boxed_func(run)


# torch.compile's modes. None changes what this backend does: every graph
# already runs as one cached fused program, launched once per call (what
# "reduce-overhead" asks CUDA graphs for), and XLA picks its own kernels.
MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")

_noted: set[str] = set()


def _note(text: str) -> None:
    """Says once per process that an argument does not apply."""
    if text not in _noted:
        _noted.add(text)
        warnings.warn(f'torch.compile(backend="tpu"): {text}', stacklevel=3)


def _check_arguments(mode: str | None, options: dict | None, other: dict) -> None:
    if mode is not None and mode not in MODES:
        raise ValueError(f'torch.compile(backend="tpu"): unknown mode {mode!r}; the modes are {", ".join(MODES)}')
    if mode not in (None, "default"):
        _note(f"mode={mode!r} does not apply and is ignored: each graph already runs as one cached fused "
              "program, launched once per call")
    if options is not None and not isinstance(options, dict):
        raise TypeError(f'torch.compile(backend="tpu"): options must be a dict, not {type(options).__name__}')
    if options:
        _note(f"options {sorted(options)} do not apply to this backend and are ignored")
    ignored = sorted(k for k in other if k != "name")  # `name` only labels the compiled function
    if ignored:
        _note(f"arguments {ignored} do not apply to this backend and are ignored")


def tpu_backend(gm: torch.fx.GraphModule, example_inputs: list, *, mode: str | None = None,
                options: dict | None = None, **other: Any) -> Callable[..., Any]:
    """The Dynamo backend "tpu" (registered through the
    ``torch_dynamo_backends`` entry point). torch.compile's standard `mode`
    and `options` are accepted; they do not change this backend, which says
    so once (an unknown mode is an error, as with every backend)."""
    from torch._dynamo.backends.common import aot_autograd

    _check_arguments(mode, options, other)

    # Forward graphs run their dynamic dims at shape buckets where that
    # cannot change a result; a backward graph sums over the batch for the
    # weights' gradients, so it runs at exact sizes.
    compile_graph = aot_autograd(
        fw_compiler=lambda g, _: _fused(g, buckets=True),
        bw_compiler=lambda g, _: _fused(g),
        decompositions=_decompositions(),
    )
    return compile_graph(gm, example_inputs)


__all__ = ["tpu_backend"]
