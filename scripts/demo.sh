#!/usr/bin/env bash
# Runs the demo on the default device: prints the devices, then an MLP
# forward pass through the C ABI, checked against NumPy.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/python examples/demo_mlp.py "$@"
