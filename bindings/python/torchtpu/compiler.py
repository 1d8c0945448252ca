"""``torch.compile(backend="tpu")``.

Dynamo captures the Python program; AOTAutograd turns it into functionalized
aten graphs, forward and backward. Each graph runs with every op deferred
(DEFER_AND_FUSE on the calling thread) and is flushed as one program at its
end. The runtime caches that program by the canonical hash of the graph, so
after the first call a graph costs one cache lookup and one launch, and
Dynamo's own cache skips Python re-tracing.

Decompositions: PyTorch's core-ATen decompositions, except for ops the
runtime implements itself (one fused op beats its decomposition).
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from .runtime import DEFER_AND_FUSE, thread_mode


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


def _fused(gm: torch.fx.GraphModule) -> Callable[..., Any]:
    from functorch.compile import make_boxed_func

    from . import tpu

    def run(*args: Any) -> Any:
        with thread_mode(DEFER_AND_FUSE):
            out = gm(*args)
        # The whole graph becomes one program now, not at the next host read.
        tpu._runtime().flush()
        return out

    return make_boxed_func(run)


def tpu_backend(gm: torch.fx.GraphModule, example_inputs: list) -> Callable[..., Any]:
    """The Dynamo backend "tpu" (registered through the
    ``torch_dynamo_backends`` entry point)."""
    from torch._dynamo.backends.common import aot_autograd

    compile_graph = aot_autograd(
        fw_compiler=lambda g, _: _fused(g),
        bw_compiler=lambda g, _: _fused(g),
        decompositions=_decompositions(),
    )
    return compile_graph(gm, example_inputs)


__all__ = ["tpu_backend"]
