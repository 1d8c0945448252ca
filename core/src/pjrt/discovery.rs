//! Finding a PJRT plugin.
//!
//! The order, first match wins:
//! 1. an explicit path (`RuntimeOptions::plugin`, `ttpu_runtime_options_t.plugin_path`);
//! 2. `$TORCHTPU_PJRT_PLUGIN`;
//! 3. the active Python environment: `$VIRTUAL_ENV`, `$CONDA_PREFIX`, and the
//!    virtualenv of the running Python interpreter (the directory with
//!    `pyvenv.cfg` next to or above the executable, as Python itself finds
//!    it), each searched for `libtpu` and then `xla-cpu-pjrt`;
//! 4. the system: the user site (`~/.local`), `/usr/local` and `/usr`, again
//!    `libtpu` before `xla-cpu-pjrt`.
//!
//! Never the current directory and never a path baked in at build time: what
//! a process loads must not depend on where it was started or built. An
//! explicit path or `$TORCHTPU_PJRT_PLUGIN` that names no file is an error,
//! not a reason to pick another plugin. The choice and its reason are logged
//! (`info`) and queryable (`ttpu_runtime_plugin_path`,
//! `ttpu_runtime_plugin_source`); the not-found error lists every place tried.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

pub const ENV_PLUGIN: &str = "TORCHTPU_PJRT_PLUGIN";
const CPU_PLUGIN_REL: &str = "xla_plugins/xla_cpu_pjrt/xla_cpu_pjrt.so";
const LIBTPU_REL: &str = "libtpu/libtpu.so";

/// Where a plugin was found, and why that place was chosen.
#[derive(Debug, Clone)]
pub struct Found {
    pub path: PathBuf,
    /// "explicit path", "$TORCHTPU_PJRT_PLUGIN", "libtpu in the Python
    /// environment <prefix>", "xla-cpu-pjrt in the system site-packages <dir>", ...
    pub source: String,
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
    // Debian's system packages.
    if prefix == Path::new("/usr") {
        out.push(prefix.join("lib/python3/dist-packages"));
    }
    out
}

/// The virtualenv of the running Python interpreter, if this process is one:
/// `pyvenv.cfg` in the executable's directory or its parent.
fn interpreter_venv(exe: &Path) -> Option<PathBuf> {
    let name = exe.file_name()?.to_string_lossy();
    if !name.starts_with("python") {
        return None;
    }
    let bin = exe.parent()?;
    [bin, bin.parent()?].into_iter().find(|d| d.join("pyvenv.cfg").is_file()).map(Path::to_path_buf)
}

/// The active Python environments' prefixes, most specific first.
fn python_environments() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for var in ["VIRTUAL_ENV", "CONDA_PREFIX"] {
        if let Some(v) = std::env::var_os(var).filter(|v| !v.is_empty()) {
            out.push(v.into());
        }
    }
    // The executable as started (a venv's python is often a symlink to the
    // base interpreter; the venv is where the link lives): argv[0] as a path,
    // or found on $PATH as the shell found it.
    if let Some(arg0) = std::env::args_os().next().map(PathBuf::from) {
        let exe = if arg0.is_absolute() {
            Some(arg0)
        } else if arg0.components().count() > 1 {
            std::env::current_dir().ok().map(|d| d.join(arg0))
        } else {
            std::env::var_os("PATH")
                .and_then(|path| std::env::split_paths(&path).map(|d| d.join(&arg0)).find(|p| p.is_file()))
        };
        out.extend(exe.and_then(|e| interpreter_venv(&e)));
    }
    if let Ok(exe) = std::fs::read_link("/proc/self/exe").or_else(|_| std::env::current_exe()) {
        out.extend(interpreter_venv(&exe));
    }
    out
}

fn system_prefixes() -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(home) = std::env::var_os("HOME").filter(|h| !h.is_empty()) {
        out.push(Path::new(&home).join(".local"));
    }
    out.push("/usr/local".into());
    out.push("/usr".into());
    out
}

/// Resolves the plugin to load.
pub fn find_plugin(explicit: Option<&Path>) -> Result<Found> {
    find_in(explicit, std::env::var_os(ENV_PLUGIN).map(PathBuf::from), &python_environments(), &system_prefixes())
}

fn find_in(explicit: Option<&Path>, env: Option<PathBuf>, environments: &[PathBuf], system: &[PathBuf]) -> Result<Found> {
    let mut tried = Vec::new();
    let mut check = |p: PathBuf, what: &str| -> Option<PathBuf> {
        tried.push(format!("{what}: {}", p.display()));
        p.is_file().then_some(p)
    };
    if let Some(p) = explicit {
        return check(p.to_path_buf(), "explicit path")
            .map(|path| Found { path, source: "explicit path".into() })
            .ok_or(Error::PluginNotFound { tried });
    }
    if let Some(p) = env.filter(|p| !p.as_os_str().is_empty()) {
        return check(p, "$TORCHTPU_PJRT_PLUGIN")
            .map(|path| Found { path, source: "$TORCHTPU_PJRT_PLUGIN".into() })
            .ok_or(Error::PluginNotFound { tried });
    }
    let mut seen: Vec<PathBuf> = Vec::new();
    for (tier, prefixes) in [("the Python environment", environments), ("the system", system)] {
        let mut dirs = Vec::new();
        for prefix in prefixes {
            for sp in site_packages(prefix) {
                let sp = sp.canonicalize().unwrap_or(sp);
                if !seen.contains(&sp) {
                    seen.push(sp.clone());
                    dirs.push((prefix, sp));
                }
            }
        }
        for (name, rel) in [("libtpu", LIBTPU_REL), ("xla-cpu-pjrt", CPU_PLUGIN_REL)] {
            for (prefix, sp) in &dirs {
                if let Some(path) = check(sp.join(rel), &format!("{name} in {tier}")) {
                    return Ok(Found { path, source: format!("{name} in {tier} {}", prefix.display()) });
                }
            }
        }
    }
    Err(Error::PluginNotFound { tried })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plugin_at(root: &Path, prefix: &str, rel: &str) -> PathBuf {
        let p = root.join(prefix).join("lib/python3.11/site-packages").join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, b"not loaded by this test").unwrap();
        p
    }

    #[test]
    fn the_order_is_explicit_env_python_environment_then_system() {
        let root = std::env::temp_dir().join(format!("torchtpu-discovery-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let venv_cpu = plugin_at(&root, "venv", CPU_PLUGIN_REL);
        let sys_tpu = plugin_at(&root, "usr", LIBTPU_REL);
        let (venv, usr) = (vec![root.join("venv")], vec![root.join("usr")]);

        // The environment's CPU plugin wins over the system's libtpu.
        let f = find_in(None, None, &venv, &usr).unwrap();
        assert_eq!(f.path, venv_cpu.canonicalize().unwrap());
        assert!(f.source.starts_with("xla-cpu-pjrt in the Python environment"), "{}", f.source);
        // Within one tier, libtpu comes first.
        let venv_tpu = plugin_at(&root, "venv", LIBTPU_REL);
        assert_eq!(find_in(None, None, &venv, &usr).unwrap().path, venv_tpu.canonicalize().unwrap());
        // Without an environment, the system's.
        let f = find_in(None, None, &[], &usr).unwrap();
        assert_eq!((f.path, f.source.starts_with("libtpu in the system")), (sys_tpu.canonicalize().unwrap(), true));
        // $TORCHTPU_PJRT_PLUGIN before both; explicit before that.
        let f = find_in(None, Some(venv_cpu.clone()), &venv, &usr).unwrap();
        assert_eq!((f.path.clone(), f.source.as_str()), (venv_cpu.clone(), "$TORCHTPU_PJRT_PLUGIN"));
        let f = find_in(Some(&sys_tpu), Some(venv_cpu.clone()), &venv, &usr).unwrap();
        assert_eq!((f.path, f.source.as_str()), (sys_tpu.clone(), "explicit path"));
        // A named file that is missing is an error, never a fallback.
        let e = find_in(None, Some(root.join("missing.so")), &venv, &usr).unwrap_err().to_string();
        assert!(e.contains("$TORCHTPU_PJRT_PLUGIN: ") && e.contains("missing.so"), "{e}");
        // Nothing found: every place tried is listed.
        let e = find_in(None, None, &[root.join("none")], &[]).unwrap_err().to_string();
        assert!(e.contains("no PJRT plugin found"), "{e}");
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn a_python_interpreter_in_a_venv_names_its_venv() {
        let root = std::env::temp_dir().join(format!("torchtpu-venv-{}", std::process::id()));
        std::fs::create_dir_all(root.join("bin")).unwrap();
        std::fs::write(root.join("pyvenv.cfg"), b"home = /usr/bin\n").unwrap();
        assert_eq!(interpreter_venv(&root.join("bin/python3")), Some(root.clone()));
        assert_eq!(interpreter_venv(&root.join("bin/cargo")), None);
        assert_eq!(interpreter_venv(Path::new("/usr/bin/python3")), None);
        let _ = std::fs::remove_dir_all(&root);
    }
}
