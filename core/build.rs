//! Generates the raw PJRT bindings from the `pjrt_c_api.h` that ships with the
//! `xla-cpu-pjrt` wheel. The header is never vendored: the plugin we load at run
//! time and the header we compile against come from the same package, so their
//! struct layouts agree (the older `pjrt-sys` header is rejected by the plugin).
//! It also compiles the C++ exception guard (`src/pjrt/guard.cc`).

use std::env;
use std::path::{Path, PathBuf};

const HEADER_REL: &str = "xla_plugins/xla_cpu_pjrt/include/pjrt_c_api.h";

fn site_packages_under(venv: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for lib in ["lib", "lib64"] {
        let Ok(entries) = std::fs::read_dir(venv.join(lib)) else { continue };
        for entry in entries.flatten() {
            let name = entry.file_name();
            if name.to_string_lossy().starts_with("python") {
                out.push(entry.path().join("site-packages"));
            }
        }
    }
    out.sort();
    out
}

fn find_header(tried: &mut Vec<String>) -> Option<PathBuf> {
    if let Ok(p) = env::var("TORCHTPU_PJRT_HEADER") {
        let p = PathBuf::from(p);
        tried.push(format!("$TORCHTPU_PJRT_HEADER={}", p.display()));
        return p.is_file().then_some(p);
    }
    let workspace = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap()).join("..");
    let mut venvs = Vec::new();
    if let Ok(v) = env::var("VIRTUAL_ENV") {
        venvs.push(PathBuf::from(v));
    }
    venvs.push(workspace.join(".venv"));
    for venv in venvs {
        for sp in site_packages_under(&venv) {
            let candidate = sp.join(HEADER_REL);
            tried.push(candidate.display().to_string());
            if candidate.is_file() {
                return Some(candidate);
            }
        }
    }
    None
}

fn main() {
    // The C++ exception guard around calls into the plugin (pjrt/guard.cc).
    println!("cargo:rerun-if-changed=src/pjrt/guard.cc");
    cc::Build::new().cpp(true).file("src/pjrt/guard.cc").flag_if_supported("-std=c++17").compile("torchtpu_pjrt_guard");
    println!("cargo:rerun-if-env-changed=TORCHTPU_PJRT_HEADER");
    println!("cargo:rerun-if-env-changed=VIRTUAL_ENV");
    let mut tried = Vec::new();
    let Some(header) = find_header(&mut tried) else {
        panic!(
            "pjrt_c_api.h not found. Tried:\n  {}\nRun `scripts/setup.sh` (it installs the `xla-cpu-pjrt` \
             wheel into .venv) or set TORCHTPU_PJRT_HEADER to the header's path.",
            tried.join("\n  ")
        );
    };
    println!("cargo:rerun-if-changed={}", header.display());
    let bindings = bindgen::Builder::default()
        .header(header.to_string_lossy())
        .allowlist_type("PJRT_.*")
        .allowlist_var("PJRT_.*")
        .allowlist_function("GetPjrtApi")
        .prepend_enum_name(false)
        .default_enum_style(bindgen::EnumVariation::Consts)
        .derive_default(true)
        .layout_tests(false)
        .generate_comments(false)
        .generate()
        .unwrap_or_else(|e| panic!("bindgen failed on {}: {e}", header.display()));
    let out = PathBuf::from(env::var("OUT_DIR").unwrap()).join("pjrt_bindings.rs");
    bindings.write_to_file(&out).expect("writing pjrt bindings");
}
