#!/usr/bin/env bash
# Builds the packaged library (libtorchtpu.so.<ABI major>, from the static
# archive cargo makes) and runs the C++ bindings' tests against it; installs
# the package to a prefix outside the tree and builds, from outside the
# tree, the C example with pkg-config and the C++ example with CMake, and
# runs both; checks the installed library's SONAME, symlinks and versioned
# exports; then reruns the tests under AddressSanitizer + UBSan. Assumes
# `cargo build --release` already produced target/release/libtorchtpu.a.
#
#   bindings/cpp/run-tests.sh
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
src="$root/bindings/cpp"
build="$root/target/cpp-build"
asan_build="$root/target/cpp-build-asan"
jobs="${TORCHTPU_CPP_JOBS:-2}"

archive="$root/target/release/libtorchtpu.a"
if [[ ! -f "$archive" ]]; then
  echo "run-tests.sh: $archive is missing; run 'cargo build --release' first" >&2
  exit 1
fi
# The install prefix and the examples' builds live outside the tree, as a
# user's would.
outside="$(mktemp -d)"
trap 'rm -rf "$outside"' EXIT
prefix="$outside/prefix"
example_build="$outside/mlp-cpp"

# The plugin comes from the active Python environment: the project's .venv
# unless another one is active.
export VIRTUAL_ENV="${VIRTUAL_ENV:-$root/.venv}"

echo "== C++ tests"
cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release -DTORCHTPU_ARCHIVE="$archive" >/dev/null
cmake --build "$build" -j "$jobs"
(cd "$build" && ctest --output-on-failure)

echo "== install to $prefix"
cmake --install "$build" --prefix "$prefix" >/dev/null
major=$(sed -n 's/^#define TTPU_API_MAJOR \([0-9]*\)$/\1/p' "$root/include/torchtpu.h")
libdir=$(pkg-config --variable=libdir "$prefix"/lib*/pkgconfig/torchtpu.pc)
# The usual chain: libtorchtpu.so -> libtorchtpu.so.<major> -> the file,
# whose SONAME is libtorchtpu.so.<major>; only ttpu_ symbols are exported,
# each at version TORCHTPU_<major>.
[[ -L "$libdir/libtorchtpu.so" && -L "$libdir/libtorchtpu.so.$major" ]] || {
  echo "run-tests.sh: the libtorchtpu.so symlinks are missing in $libdir" >&2; ls -l "$libdir" >&2; exit 1; }
soname=$(readelf -d "$libdir/libtorchtpu.so" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
[[ "$soname" == "libtorchtpu.so.$major" ]] || { echo "run-tests.sh: SONAME is '$soname'" >&2; exit 1; }
exports=$(readelf --dyn-syms -W "$libdir/libtorchtpu.so" | awk '$5 != "LOCAL" && $7 != "UND" && $8 ~ /@/ {print $8}')
unversioned=$(grep -v "^ttpu_[a-z0-9_]*@@TORCHTPU_$major\$" <<<"$exports" | grep -v "^TORCHTPU_$major@@TORCHTPU_$major\$" || true)
[[ -n "$exports" && -z "$unversioned" ]] || {
  echo "run-tests.sh: exports other than ttpu_*@@TORCHTPU_$major:" >&2; echo "${unversioned:-none at all}" >&2; exit 1; }
echo "libtorchtpu.so.$major: $(wc -l <<<"$exports") exports, all ttpu_*@@TORCHTPU_$major"

echo "== C example with pkg-config, from outside the tree"
# As its header says: plain C11, flags from the installed torchtpu.pc.
export PKG_CONFIG_PATH="$(dirname "$prefix"/lib*/pkgconfig/torchtpu.pc)"
(cd "$outside" && cc -std=c11 -Wall -Wextra -Werror -pedantic "$root/examples/c/mlp.c" \
  $(pkg-config --cflags --libs torchtpu) -lm -Wl,-rpath,"$(pkg-config --variable=libdir torchtpu)" -o mlp-c \
  && ./mlp-c)

echo "== C++ example against the installed CMake package"
cmake -S "$src/examples/mlp" -B "$example_build" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$example_build" -j "$jobs"
# Run it from elsewhere: it finds libtorchtpu.so.<major> through its
# RUNPATH, and the library finds the PJRT plugin on its own.
(cd "$outside" && "$example_build/mlp")

echo "== C++ tests under AddressSanitizer + UBSan"
cmake -S "$src" -B "$asan_build" -DCMAKE_BUILD_TYPE=Debug -DTORCHTPU_ARCHIVE="$archive" -DTORCHTPU_SANITIZE=ON >/dev/null
cmake --build "$asan_build" -j "$jobs"
# The test executables are instrumented themselves, so the ASan runtime
# loads first and no LD_PRELOAD is needed. Leak detection is off because the
# XLA PJRT plugin's own allocations still live at exit are reported as leaks;
# use-after-free, double free and out-of-bounds errors in the wrapper are
# still caught.
(cd "$asan_build" && ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure)

echo "C++ bindings: all OK"
