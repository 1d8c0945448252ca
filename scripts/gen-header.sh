#!/usr/bin/env bash
# Regenerates include/torchtpu.h from capi/ with the pinned cbindgen that
# scripts/setup.sh installs into .tools. CI runs it and fails on a diff.
set -euo pipefail
cd "$(dirname "$0")/.."
.tools/bin/cbindgen --quiet --config capi/cbindgen.toml --crate torchtpu-capi --output include/torchtpu.h capi
