"""Prints how much of PyTorch's Core ATen opset the "tpu" device implements,
and with `--opinfo` how much of PyTorch's whole OpInfo database passes.

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

With `--opinfo`, the OpInfo conformance harness (tests/torch/test_opinfo.py,
the same code the test suite runs) runs over every OpInfo of PyTorch's
`op_db` and the pass rate is printed overall and per family (nn.functional,
linalg, special, fft, the rest), with the OpInfos that do not pass.
`--opinfo-report FILE` prints the same from the counts a test run wrote
(`TORCHTPU_OPINFO_REPORT=FILE pytest tests/torch`), without running again.

    .venv/bin/python bindings/python/tools/op_coverage.py [--missing] [--opinfo | --opinfo-report FILE]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
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


FAMILIES = ("nn.functional", "linalg", "special", "fft")


def family(name: str) -> str:
    return next((f for f in FAMILIES if name.startswith(f + ".")), "other")


def run_opinfo() -> dict:
    """Runs the conformance harness over the whole OpInfo database in this
    process; returns the counts as the test session reports them."""
    import pytest

    tests = Path(__file__).resolve().parents[3] / "tests" / "torch"
    sys.path.insert(0, str(tests))
    import test_opinfo as h  # noqa: E402  (the harness itself, not a copy)

    for op in h.op_db:
        name = f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name
        print(f"\r  {name[:60]:60s}", end="", file=sys.stderr, flush=True)
        try:
            h.test_opinfo(op)
        except pytest.skip.Exception:
            pass
        except Exception:  # a failed sample: the harness counted it
            pass
    print(file=sys.stderr)
    return {"torch": torch.__version__, "results": dict(h.RESULTS), "documented": dict(h.DOCUMENTED)}


def print_opinfo(report: dict) -> None:
    results, documented = report["results"], report["documented"]
    total = len(results) + len(documented)
    passing = {n for n, c in results.items() if c["pass"] and not c["fail"]}
    print(f"OpInfo database (torch {report['torch']}): {total} OpInfos; {len(documented)} skipped for a documented "
          f"reason (random values, uninitialized memory, sparse layouts, a harness limit); "
          f"{len(passing)} / {len(results)} pass every sample they run ({100 * len(passing) / max(len(results), 1):.1f}%)")
    print(f"  {'family':14s} {'passing':>8s} {'of':>4s}")
    for fam in (*FAMILIES, "other"):
        names = [n for n in results if family(n) == fam]
        print(f"  {fam:14s} {len([n for n in names if n in passing]):8d} {len(names):4d}")
    failing = sorted(n for n in results if n not in passing)
    if failing:
        print("not passing: " + ", ".join(failing))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--missing", action="store_true", help="list the missing ops")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--opinfo", action="store_true", help="run the OpInfo harness over the whole database")
    g.add_argument("--opinfo-report", metavar="FILE", help="print the OpInfo pass rate from a test run's counts")
    args = p.parse_args()
    if args.opinfo or args.opinfo_report:
        if args.opinfo:
            report = run_opinfo()
        else:
            text = Path(args.opinfo_report).read_text()
            if not text.strip():
                print(f"no OpInfo counts in {args.opinfo_report} (the run had no OpInfo test)")
                return
            report = json.loads(text)
        print_opinfo(report)
        return
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
