"""The demo: list the devices, then run a small MLP forward pass on the
default device through the C ABI and check it against NumPy.

    scripts/demo.sh            # default device (tpu:0)
    scripts/demo.sh --device 2
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bindings" / "python"))

import torchtpu  # noqa: E402


def mlp_numpy(x, w1, b1, w2, b2):
    h = np.maximum(x @ w1.T + b1, 0.0)
    logits = h @ w2.T + b2
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def mlp_tpu(rt, x, w1, b1, w2, b2):
    h = rt.call1("aten::linear", x, w1, b1)
    rt.call("aten::relu_", h)
    logits = rt.call1("aten::linear", h, w2, b2)
    return rt.call1("aten::_softmax", logits, 1, False)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--batch", type=int, default=64)
    args = ap.parse_args()

    with torchtpu.Runtime() as rt:
        print(f"torchtpu {torchtpu.__version__} on PJRT platform '{rt.platform_name}' ({rt.platform_version})")
        for d in rt.devices():
            print(f"  tpu:{d['index']}  id={d['id']}  kind={d['kind']}  {d['description']}")

        rng = np.random.default_rng(0)
        dims = (args.batch, 784, 256, 10)
        x = rng.standard_normal((dims[0], dims[1]), dtype=np.float32)
        w1 = rng.standard_normal((dims[2], dims[1]), dtype=np.float32) / np.sqrt(dims[1])
        b1 = rng.standard_normal(dims[2], dtype=np.float32) * 0.1
        w2 = rng.standard_normal((dims[3], dims[2]), dtype=np.float32) / np.sqrt(dims[2])
        b2 = rng.standard_normal(dims[3], dtype=np.float32) * 0.1

        x, w1, b1, w2, b2 = (a.astype(np.float32) for a in (x, w1, b1, w2, b2))
        dev = [rt.from_numpy(a, device=args.device) for a in (x, w1, b1, w2, b2)]
        print(f"\nMLP {dims[1]} -> {dims[2]} (relu) -> {dims[3]} (softmax), batch {dims[0]}, on tpu:{args.device}")
        t0 = time.perf_counter()
        out = mlp_tpu(rt, *dev).numpy()
        first = time.perf_counter() - t0
        t0 = time.perf_counter()
        out = mlp_tpu(rt, *dev).numpy()
        cached = time.perf_counter() - t0

        want = mlp_numpy(x, w1, b1, w2, b2)
        err = float(np.abs(out - want).max())
        ok = np.allclose(out, want, atol=1e-5, rtol=1e-4)
        print(f"  first call (compiles) {first * 1e3:.1f} ms, cached call {cached * 1e3:.2f} ms")
        print(f"  predictions (first 8): {out.argmax(axis=1)[:8].tolist()}")
        print(f"  max |tpu - numpy| = {err:.2e}  ->  {'OK' if ok else 'MISMATCH'}")
        s = rt.stats()
        print(f"  runtime stats: {s['compiles']} compiles, {s['cache_hits']} cache hits, {s['executions']} executions")
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
