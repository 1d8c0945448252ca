#!/usr/bin/env bash
# Fails if include/torchtpu.h differs from what the pinned cbindgen generates
# from capi/, or if the header does not compile on its own (twice included)
# as C11 and as C++17.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
.tools/bin/cbindgen --quiet --config capi/cbindgen.toml --crate torchtpu-capi --output "$tmp/torchtpu.h" capi
if ! diff -u include/torchtpu.h "$tmp/torchtpu.h"; then
    echo "include/torchtpu.h is stale: run scripts/gen-header.sh and commit the result" >&2
    exit 1
fi
printf '#include "torchtpu.h"\n#include "torchtpu.h"\nint main(void) { return TTPU_API_MAJOR > 0 ? 0 : 1; }\n' > "$tmp/use.c"
cc -std=c11 -Wall -Wextra -Werror -pedantic -Iinclude -c "$tmp/use.c" -o "$tmp/use_c.o"
c++ -std=c++17 -Wall -Wextra -Werror -pedantic -Iinclude -x c++ -c "$tmp/use.c" -o "$tmp/use_cpp.o"
echo "header ok: no drift; compiles as C11 and C++17"
