#!/usr/bin/env bash
# Runs the demo on the default device: trains the example character-level GPT
# on "tpu" with plain PyTorch code (fused eager mode unless
# TORCHTPU_EAGER_MODE says otherwise), printing the device, the mode, the loss
# curve, steps per second and the compile cache statistics.
#   scripts/demo.sh [--steps N] [--compile] [--device tpu:1]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
export TORCHTPU_EAGER_MODE="${TORCHTPU_EAGER_MODE:-DEFER_AND_FUSE}"
exec .venv/bin/python bindings/python/examples/gpt.py "$@"
