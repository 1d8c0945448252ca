"""Plugin ops as PyTorch ops: each op of a loaded WebAssembly plugin is
defined in its plugin's namespace (``torch.ops.rms_norm.rms_norm``) from the
schema the plugin declares. Calls on tpu tensors reach the backend's boxed
fallback, which forwards them by name to the runtime like any aten op, so
nothing about the op is reimplemented here. A plugin's backward op becomes
the op's autograd formula."""

from __future__ import annotations

from typing import Any

import torch

from ._plugins import PluginOp, plugins

_libraries: dict[str, torch.library.Library] = {}
_defined: set[str] = set()


def _schema_without_namespace(op: PluginOp) -> str:
    ns, rest = op.schema.split("::", 1)
    return rest


def _register_autograd(op: PluginOp, returns: int) -> None:
    ns, name = op.backward.split("::", 1)
    overload = name.split(".", 1)

    def backward_op() -> Any:
        packet = getattr(getattr(torch.ops, ns), overload[0])
        return getattr(packet, overload[1]) if len(overload) > 1 else packet

    def setup_context(ctx: Any, inputs: tuple, output: Any) -> None:
        outs = output if isinstance(output, tuple) else (output,)
        ctx.tensor_at = [i for i, x in enumerate(inputs) if isinstance(x, torch.Tensor)]
        ctx.others = [None if isinstance(x, torch.Tensor) else x for x in inputs]
        ctx.out_meta = [(o.shape, o.dtype, o.device) for o in outs]
        ctx.save_for_backward(*[inputs[i] for i in ctx.tensor_at])

    def backward(ctx: Any, *grads: Any) -> tuple:
        # ABI convention: one gradient per tensor return (zeros where
        # autograd passes None), then the forward's arguments.
        grads = [g if g is not None else torch.zeros(s, dtype=d, device=dev)
                 for g, (s, d, dev) in zip(grads, ctx.out_meta)]
        args = list(ctx.others)
        for i, t in zip(ctx.tensor_at, ctx.saved_tensors):
            args[i] = t
        result = backward_op()(*grads, *args)
        result = result if isinstance(result, (tuple, list)) else (result,)
        out: list[Any] = [None] * len(args)
        for i, g in zip(ctx.tensor_at, result):
            out[i] = g
        return tuple(out)

    torch.library.register_autograd(op.name, backward, setup_context=setup_context)


def register_plugin_ops() -> list[str]:
    """Defines every op of the loaded plugins not defined yet; returns their
    names. Idempotent."""
    new: list[tuple[PluginOp, int]] = []
    for p in plugins():
        for op in p.ops:
            if op.name in _defined:
                continue
            ns = op.name.split("::", 1)[0]
            lib = _libraries.get(ns)
            if lib is None:
                lib = _libraries[ns] = torch.library.Library(ns, "FRAGMENT")
            lib.define(_schema_without_namespace(op))
            _defined.add(op.name)
            returns = op.schema.rsplit("->", 1)[1].count("Tensor")
            new.append((op, returns))
    # Backward ops are defined before any autograd formula refers to them.
    for op, returns in new:
        if op.backward:
            _register_autograd(op, returns)
    return [op.name for op, _ in new]
