//! Finding a PJRT plugin.
//!
//! Order: an explicit path; `$TORCHTPU_PJRT_PLUGIN`; libtpu, if installed;
//! then the `xla-cpu-pjrt` package in the project's virtualenv or any
//! site-packages we know of. The error lists every place that was tried.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

pub const ENV_PLUGIN: &str = "TORCHTPU_PJRT_PLUGIN";
const CPU_PLUGIN_REL: &str = "xla_plugins/xla_cpu_pjrt/xla_cpu_pjrt.so";
const LIBTPU_REL: &str = "libtpu/libtpu.so";

/// The workspace this runtime was built in; its `.venv` is where the setup
/// script installs the default plugin.
const BUILD_WORKSPACE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

/// Where a plugin was found, and why that place was chosen.
#[derive(Debug, Clone)]
pub struct Found {
    pub path: PathBuf,
    pub source: &'static str,
}

fn site_packages(prefix: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for lib in ["lib", "lib64"] {
        if let Ok(entries) = std::fs::read_dir(prefix.join(lib)) {
            let mut found: Vec<PathBuf> = entries
                .flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with("python"))
                .flat_map(|e| [e.path().join("site-packages"), e.path().join("dist-packages")])
                .collect();
            found.sort();
            out.extend(found);
        }
    }
    out
}

/// Every site-packages directory worth searching, most specific first.
fn all_site_packages() -> Vec<PathBuf> {
    let mut prefixes: Vec<PathBuf> = Vec::new();
    if let Ok(v) = std::env::var("VIRTUAL_ENV") {
        prefixes.push(v.into());
    }
    prefixes.push(Path::new(BUILD_WORKSPACE).join(".venv"));
    if let Ok(cwd) = std::env::current_dir() {
        prefixes.push(cwd.join(".venv"));
    }
    if let Some(home) = std::env::var_os("HOME") {
        prefixes.push(Path::new(&home).join(".local"));
    }
    prefixes.push("/usr/local".into());
    prefixes.push("/usr".into());
    let mut out = Vec::new();
    for p in prefixes {
        for sp in site_packages(&p) {
            let sp = sp.canonicalize().unwrap_or(sp);
            if !out.contains(&sp) {
                out.push(sp);
            }
        }
    }
    out
}

/// Resolves the plugin to load.
pub fn find_plugin(explicit: Option<&Path>) -> Result<Found> {
    let mut tried = Vec::new();
    let mut check = |p: PathBuf, what: String| -> Option<PathBuf> {
        tried.push(format!("{what}: {}", p.display()));
        p.is_file().then_some(p)
    };
    if let Some(p) = explicit {
        // An explicit path that does not exist is an error, not a reason to
        // silently pick another plugin.
        return check(p.to_path_buf(), "explicit path".into())
            .map(|path| Found { path, source: "explicit path" })
            .ok_or(Error::PluginNotFound { tried });
    }
    if let Some(p) = std::env::var_os(ENV_PLUGIN) {
        return check(p.into(), format!("${ENV_PLUGIN}"))
            .map(|path| Found { path, source: "$TORCHTPU_PJRT_PLUGIN" })
            .ok_or(Error::PluginNotFound { tried });
    }
    let sps = all_site_packages();
    for sp in &sps {
        if let Some(path) = check(sp.join(LIBTPU_REL), "libtpu".into()) {
            return Ok(Found { path, source: "libtpu" });
        }
    }
    for sp in &sps {
        if let Some(path) = check(sp.join(CPU_PLUGIN_REL), "xla-cpu-pjrt".into()) {
            return Ok(Found { path, source: "xla-cpu-pjrt" });
        }
    }
    Err(Error::PluginNotFound { tried })
}
