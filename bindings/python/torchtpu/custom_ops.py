"""Plugin ops as PyTorch ops: each op of a loaded WebAssembly plugin is
defined in its plugin's namespace (``torch.ops.rms_norm.rms_norm``) from the
schema the plugin declares. Calls on tpu tensors reach the backend's boxed
fallback, which forwards them by name to the runtime like any aten op, so
nothing about the op is reimplemented here. A plugin's backward op becomes
the op's autograd formula.

A plugin whose namespace PyTorch's dispatcher already knows (one of
PyTorch's own, or another library's) is not defined: its ops would join or
pose as that namespace's. Such a plugin, and any plugin whose ops PyTorch
refuses, is skipped with a warning and recorded in
:func:`torchtpu._plugins.plugin_rejections`; ``import torch`` never fails
because of a plugin."""

from __future__ import annotations

import warnings
from typing import Any

import torch

from ._plugins import Plugin, PluginOp, plugins, record_rejection

_libraries: dict[str, torch.library.Library] = {}
_defined: set[str] = set()
# Plugins skipped (by name), so each is warned about and recorded once.
_skipped: set[str] = set()


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


def _namespaces_in_use() -> set[str]:
    """The namespaces of every op PyTorch's dispatcher knows. (``torch.ops``
    makes any namespace on first access, so ``hasattr`` tells nothing.)"""
    return {name.split("::", 1)[0] for name in torch._C._dispatch_get_all_op_names()}


def _define_plugin(p: Plugin, in_use: set[str]) -> list[tuple[PluginOp, int]]:
    """Defines the ops of plugin ``p`` (all or none); returns them with their
    return counts. Raises saying why a plugin cannot be defined."""
    ns = p.name
    if ns in in_use and ns not in _libraries:
        raise ValueError(f"its namespace '{ns}' is already used by PyTorch or another library "
                         f"(torch.ops.{ns} has ops that are not this plugin's)")
    fresh = ns not in _libraries
    lib = _libraries[ns] if not fresh else torch.library.Library(ns, "FRAGMENT")
    added: list[tuple[PluginOp, int]] = []
    try:
        for op in p.ops:
            if op.name in _defined:
                continue
            lib.define(_schema_without_namespace(op))
            _defined.add(op.name)
            added.append((op, op.schema.rsplit("->", 1)[1].count("Tensor")))
    except Exception:
        for op, _ in added:
            _defined.discard(op.name)
        if fresh:
            lib._destroy()
        raise
    _libraries[ns] = lib
    return added


def register_plugin_ops() -> list[str]:
    """Defines every op of the loaded plugins not defined yet; returns their
    names. Idempotent. A plugin that cannot be defined is skipped with a
    warning naming it and why, and recorded in ``plugin_rejections()``."""
    new: list[tuple[Plugin, PluginOp, int]] = []
    in_use: set[str] | None = None
    for p in plugins():
        if p.name in _skipped or all(op.name in _defined for op in p.ops):
            continue
        try:
            if in_use is None:
                in_use = _namespaces_in_use()
            new.extend((p, op, returns) for op, returns in _define_plugin(p, in_use))
        except Exception as e:  # noqa: BLE001 (a plugin must never break `import torch`)
            _skipped.add(p.name)
            message = f"plugin '{p.name}' ({p.path}) was not registered with PyTorch: {e}"
            record_rejection(p.path, message)
            warnings.warn(f"torchtpu: {message}", stacklevel=2)
    # Backward ops are defined before any autograd formula refers to them.
    for p, op, returns in new:
        if op.backward:
            try:
                _register_autograd(op, returns)
            except Exception as e:  # noqa: BLE001 (the op works, without autograd)
                message = (f"plugin '{p.name}' ({p.path}): the backward {op.backward} of {op.name} was not "
                           f"registered as its autograd: {e}")
                record_rejection(p.path, message)
                warnings.warn(f"torchtpu: {message}", stacklevel=2)
    return [op.name for _, op, _ in new]
