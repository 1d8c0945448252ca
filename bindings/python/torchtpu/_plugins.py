"""WebAssembly plugins over the C ABI: loading them and listing what they
provide. Plugins are process-wide; their ops are called like any op
(:meth:`torchtpu.Runtime.call`, or ``torch.ops.<plugin>.<op>`` once
:mod:`torchtpu.tpu` registered them with PyTorch)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from ._capi import check, ffi, lib


@dataclass(frozen=True)
class PluginOp:
    name: str
    """``"rms_norm::rms_norm"``."""
    schema: str
    """The aten-style declaration."""
    backward: str | None
    """The op that computes its gradients, if any."""


@dataclass(frozen=True)
class Plugin:
    name: str
    version: str
    path: str
    abi: tuple[int, int]
    ops: tuple[PluginOp, ...]
    policies: tuple[str, ...]
    calls: int
    """Calls into the module (lowerings and policy decisions)."""
    failures: int
    lowering_hits: int
    """Lowerings served from the checked-fragment cache."""
    lowering_misses: int


@dataclass(frozen=True)
class PluginRejection:
    path: str
    """The file (or directory) that was not loaded, or whose ops were not
    defined with PyTorch."""
    message: str
    """Why: the reason, naming the file, and for a limit the environment
    variable that raises it."""


# Plugins the runtime loaded but whose ops PyTorch could not define (their
# namespace is one of PyTorch's, a schema it refuses, ...): recorded by
# custom_ops, listed by plugin_rejections().
_frontend_rejections: list[PluginRejection] = []


def record_rejection(path: str, message: str) -> None:
    """Records a plugin the frontend skipped, for :func:`plugin_rejections`."""
    _frontend_rejections.append(PluginRejection(path, message))


def _str(p) -> str:
    return ffi.string(p).decode("utf-8", "replace")


def load_plugins(path: str | os.PathLike) -> list[Plugin]:
    """Loads a ``.wasm`` plugin, or every ``.wasm`` in a directory; returns
    every loaded plugin. Raises naming each rejected file (the others stay
    loaded). Loading a file again is a no-op."""
    check(lib.ttpu_plugin_load(os.fsencode(os.fspath(path))))
    return plugins()


def load_env() -> None:
    """Loads ``$TORCHTPU_PLUGIN_PATH`` now (once per process; creating the
    first runtime does it too). Raises naming each rejected file."""
    check(lib.ttpu_plugin_load_env())


def plugins() -> list[Plugin]:
    """Every loaded plugin, in load order."""
    out = []
    for i in range(lib.ttpu_plugin_count()):
        info = ffi.new("ttpu_plugin_info_t*")
        info.struct_size = ffi.sizeof("ttpu_plugin_info_t")
        check(lib.ttpu_plugin_info(i, info))
        ops = []
        for j in range(info.num_ops):
            op = ffi.new("ttpu_plugin_op_t*")
            op.struct_size = ffi.sizeof("ttpu_plugin_op_t")
            check(lib.ttpu_plugin_op(i, j, op))
            ops.append(PluginOp(_str(op.name), _str(op.schema), _str(op.backward) if op.backward != ffi.NULL else None))
        policies = []
        for j in range(info.num_policies):
            name = ffi.new("const char**")
            check(lib.ttpu_plugin_policy_name(i, j, name))
            policies.append(_str(name[0]))
        out.append(Plugin(
            name=_str(info.name), version=_str(info.version), path=_str(info.path),
            abi=(int(info.abi_major), int(info.abi_minor)), ops=tuple(ops), policies=tuple(policies),
            calls=int(info.calls), failures=int(info.failures), lowering_hits=int(info.lowering_hits),
            lowering_misses=int(info.lowering_misses)))
    return out


def plugin_rejections() -> list[PluginRejection]:
    """Every plugin file rejected so far in this process, with its reason: by
    the runtime (a bad manifest, a limit, a file that is not a regular
    file, ...) in the order it happened, then those whose ops PyTorch could
    not define."""
    out = []
    for i in range(lib.ttpu_plugin_rejection_count()):
        r = ffi.new("ttpu_plugin_rejection_t*")
        r.struct_size = ffi.sizeof("ttpu_plugin_rejection_t")
        check(lib.ttpu_plugin_rejection(i, r))
        out.append(PluginRejection(_str(r.path), _str(r.message)))
    return out + list(_frontend_rejections)
