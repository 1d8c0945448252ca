#!/usr/bin/env bash
# Idempotent setup for a fresh machine: Debian build dependencies (libclang
# for bindgen; clang's sanitizer runtime, cmake, valgrind and pkg-config for the C and C++
# tests), the Rust wasm target, the project-local .venv (PJRT CPU plugin,
# torch, numpy, cffi, pytest, ninja, expecttest; transformers and torchvision
# for the model parity tests), the pinned cbindgen, a
# release build of the runtime, the example WebAssembly plugins (into
# target/plugins), and the PyTorch package `torchtpu` (the native
# backend extension), installed editable into .venv.
# Downloads come only from the package registries (Debian, PyPI, crates.io).
# A second run on a ready machine only checks stamps and runs a no-op build.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
log() { printf '\033[1m[setup]\033[0m %s\n' "$*" >&2; }

# Pinned versions: bump deliberately, together with the committed header.
CBINDGEN_VERSION=0.29.0
PY_PACKAGES=(xla-cpu-pjrt numpy cffi pytest ninja expecttest)
# torch is pinned: torchvision below is built for one torch, and a new torch
# release must not change what CI installs overnight.
TORCH_SPEC="torch==2.15.0"
# The model parity tests (tests/torch/test_models.py) build Hugging Face
# transformers and torchvision models from configs (no downloads).
# transformers (and pillow, which `import torchvision` needs) come with their
# dependencies, none of which is torch; torchvision comes with --no-deps, so
# its torch requirement can never replace the torch above. torchvision 0.29.2
# (built for torch 2.14) is the newest release and works with torch 2.15.
MODEL_PACKAGES=(transformers==5.25.0 pillow)
TORCHVISION_SPEC="torchvision==0.29.2"

# --- Debian build dependencies ----------------------------------------------
need_apt=()
for pkg in libclang-dev clang libclang-rt-14-dev cmake valgrind pkg-config; do
    dpkg -s "$pkg" >/dev/null 2>&1 || need_apt+=("$pkg")
done
if ((${#need_apt[@]})); then
    log "installing Debian packages: ${need_apt[*]}"
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

# --- Rust ---------------------------------------------------------------------
if command -v rustup >/dev/null 2>&1; then
    # The example plugins (and the tests that load them) build for wasm32.
    rustup target list --installed 2>/dev/null | grep -qx wasm32-unknown-unknown \
        || { log "adding the wasm32-unknown-unknown target"; rustup target add wasm32-unknown-unknown; }
fi

# --- Python virtualenv ----------------------------------------------------------
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    log "creating .venv"
    "$PY" -m venv .venv
fi
STAMP=.venv/.torchtpu-setup
WANT="packages=${PY_PACKAGES[*]} ${TORCH_SPEC} models=${MODEL_PACKAGES[*]} ${TORCHVISION_SPEC}"
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$WANT" ]; then
    log "installing Python packages into .venv (torch is large; this takes a few minutes once)"
    # torch with its CUDA wheels takes about 6 GiB installed, and its wheels
    # about 3 GiB more while they install; pip's wheel cache would keep those
    # too, so it is off. The release build under target/ takes about 4 GiB
    # more. A short disk is said up front.
    export PIP_NO_CACHE_DIR=1
    free_kib=$(df -Pk .venv | awk 'NR == 2 { print $4 }')
    if [ -n "$free_kib" ] && [ "$free_kib" -lt $((13 * 1024 * 1024)) ]; then
        log "warning: only $((free_kib / 1024)) MiB free under $ROOT; the Python packages need about 9 GiB" \
            "while they install and the build about 4 GiB more"
    fi
    .venv/bin/python -m pip install -q --upgrade pip
    .venv/bin/python -m pip install -q "${PY_PACKAGES[@]}"
    # The CPU wheel is all the tests need (torch is the oracle).
    .venv/bin/python -m pip install -q "$TORCH_SPEC"
    torch_version() { .venv/bin/python -m pip show torch 2>/dev/null | sed -n 's/^Version: //p'; }
    before=$(torch_version)
    .venv/bin/python -m pip install -q "${MODEL_PACKAGES[@]}"
    .venv/bin/python -m pip install -q --no-deps "$TORCHVISION_SPEC"
    if [ "$(torch_version)" != "$before" ]; then
        log "installing the model test packages changed torch ($before -> $(torch_version))"
        exit 1
    fi
    echo "$WANT" > "$STAMP"
fi

# --- cbindgen (pinned; writes include/torchtpu.h) -----------------------------
if [ ! -x .tools/bin/cbindgen ] || ! .tools/bin/cbindgen --version | grep -q "$CBINDGEN_VERSION"; then
    log "installing cbindgen $CBINDGEN_VERSION into .tools"
    cargo install -q --locked --root .tools cbindgen --version "$CBINDGEN_VERSION"
fi

# --- build --------------------------------------------------------------------
log "building libtorchtpu (release)"
VIRTUAL_ENV="$ROOT/.venv" cargo build --release -q --workspace

# --- the example plugins (wasm32), dropped into target/plugins --------------------
log "building the example plugins (wasm32)"
cargo build --release -q --target wasm32-unknown-unknown --manifest-path plugins/Cargo.toml --target-dir target
mkdir -p target/plugins
for p in rms_norm swiglu byte_budget; do
    cp -f "target/wasm32-unknown-unknown/release/$p.wasm" target/plugins/
done

# --- the PyTorch package: torchtpu with its native backend (torchtpu._C) -------
export PATH="$ROOT/.venv/bin:$PATH" MAX_JOBS="${MAX_JOBS:-2}"
PKG_STAMP=.venv/.torchtpu-package
PKG_WANT="$ROOT $(cat bindings/python/pyproject.toml bindings/python/setup.py | sha256sum | cut -c1-16)"
if [ ! -f "$PKG_STAMP" ] || [ "$(cat "$PKG_STAMP")" != "$PKG_WANT" ] \
    || ! .venv/bin/python -m pip show torchtpu 2>/dev/null | grep -q "$ROOT/bindings/python"; then
    log "installing the torchtpu package (editable; builds the PyTorch extension, a few minutes once)"
    .venv/bin/python -m pip install -q --no-build-isolation --no-deps -e bindings/python
    echo "$PKG_WANT" > "$PKG_STAMP"
else
    log "building the PyTorch extension (a no-op when up to date)"
    (cd bindings/python && ../../.venv/bin/python setup.py -q build_ext --inplace)
fi
