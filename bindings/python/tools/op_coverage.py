"""Prints how much of PyTorch's Core ATen opset the "tpu" device implements.

The Core ATen opset is the ops tagged `core` in PyTorch's own
native_functions.yaml (shipped in the torch wheel as torchgen data). An op is
implemented when
- the runtime's op registry has it (the backend registers it by name), or
- it is an `out=` form the runtime derives from one of its functional ops
  (asked with PyTorch's own declaration, `ttpu_op_declare`), or
- the PyTorch extension implements it itself (memory and metadata: empty,
  views, copies across devices, resize, item), or
- PyTorch serves every device with a kernel that needs no backend kernel of
  its own: metadata queries like `sym_size`, or a CompositeImplicitAutograd
  decomposition into other ops (`upsample_nearest2d.vec`).

    .venv/bin/python bindings/python/tools/op_coverage.py [--missing]
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import torch
import torchgen

import torchtpu  # noqa: F401  (registers the device)
from torchtpu._capi import ffi, lib

# Composite kernels that only read tensor metadata (no backend op runs).
METADATA = {"sym_size.int", "sym_stride.int", "sym_numel", "sym_storage_offset", "sym_is_contiguous", "copy"}


def core_ops() -> list[str]:
    path = Path(torchgen.__file__).parent / "packaged" / "ATen" / "native" / "native_functions.yaml"
    out = []
    for entry in re.split(r"\n(?=- func:)", path.read_text()):
        func = re.search(r"- func: ([\w.]+)\(", entry)
        tags = re.search(r"\n  tags: (.*)", entry)
        if func and tags and "core" in tags.group(1):
            out.append(func.group(1))
    return out


def runtime_ops() -> set[str]:
    name = ffi.new("char**")
    ops = set()
    for i in range(lib.ttpu_op_count()):
        lib.ttpu_op_name(i, name)
        ops.add(ffi.string(name[0]).decode())
    return ops


def derived(op: str) -> bool:
    """Whether the runtime runs `op` as PyTorch declares it (an out= form it
    derives from a functional op)."""
    base, _, overload = op.partition(".")
    try:
        schema = torch._C._get_schema(f"aten::{base}", overload)
    except RuntimeError:
        return False
    supported = ffi.new("bool*")
    err = lib.ttpu_op_declare(str(schema).encode(), supported)
    if err != ffi.NULL:
        lib.ttpu_error_destroy(err)
        return False
    return bool(supported[0])


def classify(op: str, native: set[str]) -> str:
    if f"aten::{op}" in native:
        return "runtime"
    if derived(op):
        return "out="  # core runs the functional op and writes `out`
    if torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{op}", "PrivateUse1"):
        return "extension"
    if op in METADATA:
        return "metadata"
    if torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{op}", "CompositeImplicitAutograd"):
        return "composite"  # PyTorch decomposes it into other ops on every device
    return "missing"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--missing", action="store_true", help="list the missing ops")
    args = p.parse_args()
    native = runtime_ops()
    ops = core_ops()
    kinds: dict[str, list[str]] = {}
    for op in ops:
        kinds.setdefault(classify(op, native), []).append(op)
    done = len(ops) - len(kinds.get("missing", []))
    print(f"Core ATen opset on tpu (torch {torch.__version__}): {done} / {len(ops)} implemented "
          f"({100 * done / len(ops):.1f}%)")
    for k in ("runtime", "out=", "extension", "metadata", "composite", "missing"):
        print(f"  {k:10s} {len(kinds.get(k, [])):4d}")
    print(f"runtime op registry: {len(native)} ops in all")
    if args.missing and kinds.get("missing"):
        print("missing: " + ", ".join(kinds["missing"]))


if __name__ == "__main__":
    main()
