#!/usr/bin/env bash
# Runs every test: setup (idempotent), Rust unit and integration tests (the
# WebAssembly plugin host against the example and hostile plugins among them),
# the plugin SDK's tests, the
# header drift and standalone-compile checks, the C ABI tests under ASan,
# UBSan and LSan, the C++ bindings (CTest, the
# installed CMake package and its example, and a sanitizer run), and the
# Python conformance suite against PyTorch on CPU (every test in strict,
# debug and fused mode), and the PyTorch device tests (tests/torch, among them
# torch.distributed across 2 processes and the DDP/FSDP2 examples under torchrun).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
export VIRTUAL_ENV="$PWD/.venv"
step() { printf '\n\033[1m== %s\033[0m\n' "$*" >&2; }

step "Rust tests"
# A private, empty program cache, so the tests neither depend on nor fill
# the user's ~/.cache/torchtpu.
rust_cache=$(mktemp -d)
trap 'rm -rf "$rust_cache"' EXIT
TORCHTPU_CACHE_DIR="$rust_cache" cargo test --release --workspace -q 2>&1 \
    | grep -vE '^(running 0 tests|test result: ok. 0 passed.*|)$'

step "Plugin SDK and example plugins (host-side unit tests)"
cargo test --release -q --manifest-path plugins/Cargo.toml --target-dir target 2>&1 \
    | grep -vE '^(running 0 tests|test result: ok. 0 passed.*|)$'

step "C header: drift against capi/ and standalone compile as C11 and C++17"
scripts/check-header.sh

step "C ABI tests under AddressSanitizer, UndefinedBehaviorSanitizer and LeakSanitizer"
tests/c/run.sh

step "C++ bindings: CTest, install, the installed-package example, ASan+UBSan"
bindings/cpp/run-tests.sh

step "Python conformance suite (C ABI vs PyTorch CPU)"
.venv/bin/python -m pytest -q tests/python "$@"

step "PyTorch device tpu: OpInfo conformance, training parity, devices, errors, memory, distributed"
.venv/bin/python bindings/python/tools/op_coverage.py
opinfo_report=$(mktemp)
TORCHTPU_OPINFO_REPORT="$opinfo_report" .venv/bin/python -m pytest -q -rs tests/torch "$@"
.venv/bin/python bindings/python/tools/op_coverage.py --opinfo-report "$opinfo_report"
rm -f "$opinfo_report"
