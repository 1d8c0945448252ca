//! The WebAssembly plugin host: custom ops and fusion policies from `.wasm`
//! files, sandboxed by wasmtime (plugins/ABI.md is the contract).
//!
//! - [`manifest`]: the declaration in the module's custom section, read and
//!   checked without compiling the module.
//! - [`sandbox`]: the engine, the compiled-module cache, and metered calls.
//! - [`fragment`]: the rules a plugin's StableHLO must pass.
//! - `op`: plugin ops as registry entries whose lowering asks the plugin.
//! - [`policy`]: plugin fusion policies behind the `FusionPolicy` trait.
//!
//! The host is process-wide, like the op registry it adds to: a plugin
//! loaded once is callable from every runtime and every frontend, and stays
//! loaded until the process exits. Thread-safe.

pub mod fragment;
pub mod manifest;
mod op;
pub mod policy;
pub mod sandbox;

use std::ffi::{CStr, CString};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Once, OnceLock};

use parking_lot::{Mutex, RwLock};
use sha2::{Digest, Sha256};
pub use torchtpu_plugin_abi::{Manifest, ABI_MAJOR, ABI_MINOR};

use crate::error::{Error, Result};
use crate::graph::policy::FusionPolicy;
use crate::ops::registry;
pub use sandbox::{Limits, ModuleSource};

/// Reads the plugin file at `path`: only a regular file (a symlink is
/// followed to one), at most `cap` bytes. The file is opened non-blocking
/// and its type is taken from the opened handle (`fstat`), so a FIFO
/// cannot hang the load, a device such as `/dev/zero` cannot fill memory,
/// and a file swapped after a check is still the file checked. Errors are
/// for the caller to attribute to the file.
fn read_plugin_file(path: &Path, cap: usize) -> std::result::Result<Vec<u8>, String> {
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let kind = |t: std::fs::FileType| {
        if t.is_dir() {
            "a directory"
        } else if t.is_fifo() {
            "a FIFO"
        } else if t.is_socket() {
            "a socket"
        } else if t.is_char_device() {
            "a character device"
        } else if t.is_block_device() {
            "a block device"
        } else if t.is_symlink() {
            "a symbolic link"
        } else {
            "not a regular file"
        }
    };
    let not_regular = |t: std::fs::FileType| format!("is {}, not a regular file; only regular .wasm files are loaded", kind(t));
    let file = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(path);
    let file = match file {
        Ok(f) => f,
        Err(e) => {
            // Say what is there: a dangling link, a socket (which open
            // refuses), or nothing.
            return Err(match (std::fs::symlink_metadata(path), std::fs::metadata(path)) {
                (Ok(l), Err(_)) if l.file_type().is_symlink() => match std::fs::read_link(path) {
                    Ok(to) => format!("is a dangling symbolic link (to {}, which does not exist)", to.display()),
                    Err(_) => "is a dangling symbolic link".to_string(),
                },
                (_, Ok(m)) if !m.is_file() => not_regular(m.file_type()),
                _ if e.kind() == std::io::ErrorKind::NotFound => "no such file".into(),
                _ => format!("cannot read it: {e}"),
            });
        }
    };
    let meta = file.metadata().map_err(|e| format!("cannot read it: {e}"))?;
    if !meta.is_file() {
        return Err(not_regular(meta.file_type()));
    }
    let too_big = |n: u64| {
        format!(
            "is {n} bytes, over the {} module size limit ({} raises it)",
            sandbox::show_bytes(cap),
            sandbox::env::MAX_MODULE_MB
        )
    };
    if meta.len() > cap as u64 {
        return Err(too_big(meta.len()));
    }
    let mut wasm = Vec::new();
    // One byte past the cap tells a file that grew since fstat.
    let take = u64::try_from(cap).unwrap_or(u64::MAX).saturating_add(1);
    file.take(take).read_to_end(&mut wasm).map_err(|e| format!("cannot read it: {e}"))?;
    if wasm.len() > cap {
        return Err(too_big(wasm.len() as u64));
    }
    Ok(wasm)
}


/// Counters of one plugin.
#[derive(Debug, Default)]
pub struct PluginStats {
    /// Calls into the module (lowerings and policy decisions).
    pub calls: AtomicU64,
    /// Calls that failed (any [`crate::error::PluginFailure`]).
    pub failures: AtomicU64,
    /// Lowerings served from the checked-fragment cache.
    pub lowering_hits: AtomicU64,
    /// Lowerings that asked the plugin.
    pub lowering_misses: AtomicU64,
}

/// A snapshot of [`PluginStats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PluginCounts {
    pub calls: u64,
    pub failures: u64,
    pub lowering_hits: u64,
    pub lowering_misses: u64,
}

/// A loaded plugin.
pub struct Plugin {
    pub manifest: Manifest,
    /// The file it was loaded from.
    pub path: PathBuf,
    /// SHA-256 of the file.
    pub hash: [u8; 32],
    /// Whether its compiled module came from the cache.
    pub source: ModuleSource,
    sandbox: sandbox::Sandbox,
    stats: PluginStats,
    lowerings: op::Cache,
    last_error: Mutex<Option<String>>,
    c: CStrings,
}

/// A plugin's strings, NUL-terminated, for C callers. They live as long as
/// the plugin, which is the process.
#[derive(Debug)]
pub struct CStrings {
    pub name: CString,
    pub version: CString,
    pub path: CString,
    /// Per op: name, schema, backward op (if any).
    pub ops: Vec<(CString, CString, Option<CString>)>,
    pub policies: Vec<CString>,
}

fn c_string(s: &str) -> CString {
    CString::new(s.replace('\0', "?")).expect("NULs were replaced")
}

impl CStrings {
    fn new(m: &Manifest, schemas: &[crate::ops::Schema], path: &Path) -> CStrings {
        CStrings {
            name: c_string(&m.name),
            version: c_string(&m.version),
            path: c_string(&path.display().to_string()),
            ops: m
                .ops
                .iter()
                .zip(schemas)
                .map(|(o, s)| (c_string(&s.name), c_string(&o.schema), o.backward.as_deref().map(c_string)))
                .collect(),
            policies: m.policies.iter().map(|p| c_string(p)).collect(),
        }
    }
}

impl std::fmt::Debug for Plugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Plugin({} {} from {})", self.manifest.name, self.manifest.version, self.path.display())
    }
}

impl Plugin {
    pub fn name(&self) -> &str {
        &self.manifest.name
    }
    pub fn limits(&self) -> Limits {
        self.sandbox.limits
    }
    pub fn counts(&self) -> PluginCounts {
        let s = &self.stats;
        PluginCounts {
            calls: s.calls.load(Ordering::Relaxed),
            failures: s.failures.load(Ordering::Relaxed),
            lowering_hits: s.lowering_hits.load(Ordering::Relaxed),
            lowering_misses: s.lowering_misses.load(Ordering::Relaxed),
        }
    }
    /// Forgets the checked fragments, so the next lowering of every
    /// signature asks the plugin again (for measurements).
    pub fn clear_lowerings(&self) {
        self.lowerings.lock().clear();
    }
    /// The last failure of one of its fusion policies.
    pub fn last_policy_error(&self) -> Option<String> {
        self.last_error.lock().clone()
    }
    /// Its strings for C callers.
    pub fn c(&self) -> &CStrings {
        &self.c
    }
}

/// A file that was not loaded, and why.
#[derive(Debug, Clone)]
pub struct Rejection {
    pub path: PathBuf,
    pub error: Error,
    c: Arc<(CString, CString)>,
}

impl Rejection {
    pub fn new(path: PathBuf, error: Error) -> Rejection {
        let c = Arc::new((c_string(&path.display().to_string()), c_string(&error.to_string())));
        Rejection { path, error, c }
    }
    /// The path and the message, NUL-terminated, for C callers. They live
    /// as long as the rejection; the host keeps every rejection for the
    /// life of the process.
    pub fn c(&self) -> (&CStr, &CStr) {
        (&self.c.0, &self.c.1)
    }
}

/// What one load did.
#[derive(Debug, Default)]
pub struct LoadReport {
    /// Plugins loaded now or already loaded from the same file.
    pub loaded: Vec<Arc<Plugin>>,
    pub rejected: Vec<Rejection>,
}

impl LoadReport {
    /// The rejections as one error naming every file, if there were any.
    pub fn into_result(self) -> Result<Vec<Arc<Plugin>>> {
        match self.rejected.len() {
            0 => Ok(self.loaded),
            1 => Err(self.rejected.into_iter().next().expect("one").error),
            n => Err(Error::InvalidArgument(format!(
                "{n} plugin files were rejected (the others still loaded):\n  {}",
                self.rejected.iter().map(|r| r.error.to_string()).collect::<Vec<_>>().join("\n  ")
            ))),
        }
    }
}

/// The process's plugins.
pub struct Host {
    plugins: RwLock<Vec<Arc<Plugin>>>,
    rejected: Mutex<Vec<Rejection>>,
    /// Serializes loads, so a name is checked and taken atomically.
    loading: Mutex<()>,
    env: Once,
    cache_dir: Option<PathBuf>,
}

/// The process-wide host.
pub fn host() -> &'static Host {
    static HOST: OnceLock<Host> = OnceLock::new();
    HOST.get_or_init(|| Host {
        plugins: RwLock::new(Vec::new()),
        rejected: Mutex::new(Vec::new()),
        loading: Mutex::new(()),
        env: Once::new(),
        cache_dir: sandbox::default_cache_dir(),
    })
}

impl Host {
    /// Loads the directories (and files) of `$TORCHTPU_PLUGIN_PATH`
    /// (colon-separated), once per process. Rejections are logged and kept
    /// in [`Host::rejections`]; the first call returns them, later calls
    /// return nothing.
    pub fn load_env(&self) -> Vec<Rejection> {
        let mut rejected = Vec::new();
        self.env.call_once(|| {
            let Some(paths) = std::env::var_os("TORCHTPU_PLUGIN_PATH") else { return };
            for dir in std::env::split_paths(&paths).filter(|p| !p.as_os_str().is_empty()) {
                let report = self.load(&dir, Limits::from_env());
                for p in &report.loaded {
                    tracing::info!(plugin = p.name(), path = %p.path.display(), "loaded plugin from TORCHTPU_PLUGIN_PATH");
                }
                for r in &report.rejected {
                    tracing::warn!("{} (from TORCHTPU_PLUGIN_PATH)", r.error);
                }
                rejected.extend(report.rejected);
            }
        });
        rejected
    }

    /// Loads a `.wasm` file, or every `.wasm` in a directory (in name
    /// order). Each file that cannot be loaded is reported; the rest load.
    pub fn load(&self, path: &Path, limits: Limits) -> LoadReport {
        let mut report = LoadReport::default();
        let files = if path.is_dir() {
            match std::fs::read_dir(path) {
                Ok(entries) => {
                    // Every `.wasm` entry is tried, whatever it is: one that
                    // is not a regular file is reported, not skipped silently.
                    let mut fs: Vec<PathBuf> =
                        entries.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == "wasm")).collect();
                    fs.sort();
                    fs
                }
                Err(e) => {
                    let error = Error::Io { path: path.display().to_string(), source: Arc::new(e) };
                    let r = Rejection::new(path.into(), error);
                    self.rejected.lock().push(r.clone());
                    report.rejected.push(r);
                    return report;
                }
            }
        } else {
            vec![path.to_path_buf()]
        };
        for f in files {
            match self.load_file(&f, limits) {
                Ok(p) => report.loaded.push(p),
                Err(error) => {
                    let r = Rejection::new(f, error);
                    self.rejected.lock().push(r.clone());
                    report.rejected.push(r);
                }
            }
        }
        report
    }

    /// Loads one `.wasm` file with the given limits. Loading the same file
    /// (same path and contents) again returns the plugin already loaded.
    pub fn load_file(&self, path: &Path, limits: Limits) -> Result<Arc<Plugin>> {
        let reject = |message: String| Error::WasmPluginRejected { path: path.display().to_string(), message };
        let wasm = read_plugin_file(path, limits.module_bytes).map_err(reject)?;
        let hash: [u8; 32] = Sha256::digest(&wasm).into();
        let checked = manifest::read(&wasm).map_err(reject)?;
        sandbox::precheck(&wasm, &limits).map_err(reject)?;
        let name = checked.manifest.name.clone();
        let _guard = self.loading.lock();
        if let Some(p) = self.get(&name) {
            if p.hash == hash {
                return Ok(p);
            }
            return Err(reject(format!(
                "a plugin named '{name}' is already loaded (version {}, from {})",
                p.manifest.version,
                p.path.display()
            )));
        }
        if let Some(op) = registry().names().into_iter().find(|n| n.split_once("::").is_some_and(|(ns, _)| ns == name)) {
            return Err(reject(format!(
                "plugin name '{name}' is a namespace the runtime already uses (it has {op}); a plugin's ops \
                 may not join or pose as another's"
            )));
        }
        let start = std::time::Instant::now();
        let (module, source) = sandbox::compile(wasm.into(), self.cache_dir.clone(), limits.compile_timeout).map_err(reject)?;
        let m = &checked.manifest;
        sandbox::check_interface(&module, !m.ops.is_empty(), !m.policies.is_empty()).map_err(reject)?;
        let sandbox = sandbox::Sandbox::new(&name, module, limits).map_err(reject)?;
        // Instantiate once now, so a module that cannot start (a start
        // function that traps, memory over the limit) fails at load.
        sandbox.warm_up().map_err(|(kind, msg)| reject(format!("{kind}: {msg}")))?;
        let plugin = Arc::new(Plugin {
            c: CStrings::new(m, &checked.schemas, path),
            manifest: checked.manifest.clone(),
            path: path.to_path_buf(),
            hash,
            source,
            sandbox,
            stats: PluginStats::default(),
            lowerings: Default::default(),
            last_error: Mutex::new(None),
        });
        let defs = checked.schemas.into_iter().map(|s| op::def(&plugin, s)).collect();
        registry().add(defs).map_err(|e| reject(e.to_string()))?;
        tracing::debug!(plugin = %name, ms = start.elapsed().as_millis() as u64, source = ?source, "plugin loaded");
        self.plugins.write().push(plugin.clone());
        Ok(plugin)
    }

    /// Every loaded plugin, in load order.
    pub fn plugins(&self) -> Vec<Arc<Plugin>> {
        self.plugins.read().clone()
    }

    pub fn get(&self, name: &str) -> Option<Arc<Plugin>> {
        self.plugins.read().iter().find(|p| p.manifest.name == name).cloned()
    }

    /// Every file rejected so far in this process.
    pub fn rejections(&self) -> Vec<Rejection> {
        self.rejected.lock().clone()
    }

    /// Every policy name the plugins provide.
    pub fn policy_names(&self) -> Vec<String> {
        self.plugins.read().iter().flat_map(|p| p.manifest.policies.clone()).collect()
    }

    /// A plugin policy by `<plugin>::<policy>[?config]`.
    pub fn policy(&self, spec: &str) -> Result<Arc<dyn FusionPolicy>> {
        let (name, config) = spec.split_once('?').unwrap_or((spec, ""));
        let found = self.plugins.read().iter().find(|p| p.manifest.policies.iter().any(|q| q == name)).cloned();
        match found {
            Some(p) => Ok(Arc::new(policy::PluginPolicy::new(p, name, config))),
            None => Err(Error::InvalidArgument(format!(
                "unknown fusion policy {name:?} (built-in: {}; from plugins: {})",
                crate::graph::policy::BUILTIN.map(|b| format!("{b:?}")).join(", "),
                match self.policy_names() {
                    v if v.is_empty() => "none loaded".to_string(),
                    v => v.iter().map(|n| format!("{n:?}")).collect::<Vec<_>>().join(", "),
                }
            ))),
        }
    }
}
