#!/usr/bin/env bash
# Builds and runs the C++ bindings' tests, the installed-package example, and
# the tests again under AddressSanitizer + UBSan. Assumes `cargo build
# --release` already produced target/release/libtorchtpu.so.
#
#   bindings/cpp/run-tests.sh
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
src="$root/bindings/cpp"
build="$root/target/cpp-build"
asan_build="$root/target/cpp-build-asan"
prefix="$root/target/cpp-install"
example_build="$root/target/cpp-example-build"
jobs="${TORCHTPU_CPP_JOBS:-2}"

lib="$root/target/release/libtorchtpu.so"
if [[ ! -f "$lib" ]]; then
  echo "run-tests.sh: $lib is missing; run 'cargo build --release' first" >&2
  exit 1
fi

# The plugin comes from the active Python environment: the project's .venv
# unless another one is active.
export VIRTUAL_ENV="${VIRTUAL_ENV:-$root/.venv}"

echo "== C++ tests"
cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release -DTORCHTPU_LIBRARY="$lib" >/dev/null
cmake --build "$build" -j "$jobs"
(cd "$build" && ctest --output-on-failure)

echo "== install to $prefix"
rm -rf "$prefix"
cmake --install "$build" --prefix "$prefix"

echo "== example against the installed package"
rm -rf "$example_build"
cmake -S "$src/examples/mlp" -B "$example_build" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$example_build" -j "$jobs"
# Run it from elsewhere: it finds libtorchtpu.so through its RUNPATH, and the
# library finds the PJRT plugin on its own.
(cd /tmp && "$example_build/mlp")

echo "== C++ tests under AddressSanitizer + UBSan"
cmake -S "$src" -B "$asan_build" -DCMAKE_BUILD_TYPE=Debug -DTORCHTPU_LIBRARY="$lib" -DTORCHTPU_SANITIZE=ON >/dev/null
cmake --build "$asan_build" -j "$jobs"
# The test executables are instrumented themselves, so the ASan runtime
# loads first and no LD_PRELOAD is needed. Leak detection is off because the
# XLA PJRT plugin's own allocations still live at exit are reported as leaks;
# use-after-free, double free and out-of-bounds errors in the wrapper are
# still caught.
(cd "$asan_build" && ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure)

echo "C++ bindings: all OK"
