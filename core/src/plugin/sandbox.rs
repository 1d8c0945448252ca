//! The wasmtime sandbox: one engine for the process, compiled modules cached
//! on disk, and metered calls into fresh-or-pooled instances.
//!
//! Every call runs with fuel (an instruction budget), an epoch deadline (wall
//! clock, ticked by one background thread), a memory cap enforced by a
//! [`ResourceLimiter`], and a bound on the response size. Each failure is a
//! distinct [`PluginFailure`]. An instance that failed is dropped with its
//! store (a trapped core instance could be re-entered in a broken state);
//! instances that succeeded go back to a small pool, so a plugin may keep
//! state between calls but never across a failure.
//!
//! The engine does not use signal-based traps: the host process is usually
//! PyTorch's, whose (and PJRT's) SIGSEGV handlers must stay in charge of real
//! crashes. Bounds are checked explicitly instead.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use sha2::{Digest, Sha256};
use torchtpu_plugin_abi::{exports, imports, unpack};
use wasmtime::{Caller, Config, Engine, Instance, Linker, Memory, Module, ResourceLimiter, Store, Trap, TypedFunc};

use crate::error::{Error, PluginFailure};

/// Per-call resource limits of a plugin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Fuel per call (about one unit per wasm instruction).
    pub fuel: u64,
    /// Wall-clock deadline per call.
    pub timeout: Duration,
    /// Largest linear memory, in bytes.
    pub memory: usize,
    /// Largest response, in bytes.
    pub output: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits { fuel: 500_000_000, timeout: Duration::from_secs(5), memory: 64 << 20, output: 4 << 20 }
    }
}

impl Limits {
    /// The defaults, overridden by `TORCHTPU_PLUGIN_FUEL`,
    /// `TORCHTPU_PLUGIN_TIMEOUT_MS` and `TORCHTPU_PLUGIN_MEMORY_MB`.
    pub fn from_env() -> Limits {
        let var = |k: &str| std::env::var(k).ok().and_then(|v| v.trim().parse::<u64>().ok());
        let d = Limits::default();
        Limits {
            fuel: var("TORCHTPU_PLUGIN_FUEL").unwrap_or(d.fuel),
            timeout: var("TORCHTPU_PLUGIN_TIMEOUT_MS").map_or(d.timeout, Duration::from_millis),
            memory: var("TORCHTPU_PLUGIN_MEMORY_MB").map_or(d.memory, |m| (m as usize) << 20),
            output: d.output,
        }
    }
}

/// How often the epoch advances: the resolution of call deadlines.
const TICK: Duration = Duration::from_millis(5);
/// Log lines a single call may emit; the rest are counted, not printed.
const LOG_LINES_PER_CALL: u32 = 64;
const LOG_LINE_BYTES: usize = 4096;
/// Instances kept per plugin for reuse.
const POOL: usize = 4;

/// The process's engine, with its epoch ticker running.
pub fn engine() -> &'static Engine {
    static ENGINE: OnceLock<Engine> = OnceLock::new();
    ENGINE.get_or_init(|| {
        let mut config = Config::new();
        config.consume_fuel(true).epoch_interruption(true).signals_based_traps(false).max_wasm_stack(1 << 20);
        // Without guard pages every access is bounds-checked explicitly, and
        // memories are plain allocations sized by the limiter.
        config.memory_reservation(0).memory_guard_size(0).memory_reservation_for_growth(0);
        // SAFETY: these Cranelift flags only control Spectre mitigations,
        // which rely on faulting loads; wasmtime requires them off when
        // signal-based traps are disabled.
        unsafe {
            config.cranelift_flag_set("enable_heap_access_spectre_mitigation", "false");
            config.cranelift_flag_set("enable_table_access_spectre_mitigation", "false");
        }
        let engine = Engine::new(&config).expect("the plugin engine configuration is valid");
        let ticker = engine.clone();
        std::thread::Builder::new()
            .name("torchtpu-plugin-epoch".into())
            .spawn(move || loop {
                std::thread::sleep(TICK);
                ticker.increment_epoch();
            })
            .expect("spawning the plugin epoch thread");
        engine
    })
}

/// Where a compiled module came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModuleSource {
    /// Compiled now (and written to the cache, if there is one).
    Compiled,
    /// Loaded from the on-disk cache.
    Cache,
}

/// The plugin module cache directory: `$TORCHTPU_CACHE_DIR/plugins`
/// (default `~/.cache/torchtpu/plugins`); none if `TORCHTPU_CACHE_DIR` is
/// empty or `TORCHTPU_CACHE=0`.
pub fn default_cache_dir() -> Option<PathBuf> {
    let c = crate::cache::CacheConfig::from_env();
    c.enabled.then_some(c.dir).flatten().map(|d| d.join("plugins"))
}

fn engine_tag(engine: &Engine) -> String {
    use std::hash::{Hash, Hasher};
    // DefaultHasher::new() has fixed keys, so the tag is stable across runs
    // of the same build; a new wasmtime or configuration changes it.
    let mut h = std::collections::hash_map::DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut h);
    format!("{:016x}", h.finish())
}

/// Compiles `wasm`, or loads the artifact a previous compile left in
/// `cache_dir` (keyed by the module's SHA-256 and the engine's
/// compatibility hash). The cache directory is trusted like the fused
/// program cache: it holds native code, so it must be the user's own.
pub fn compile(wasm: &[u8], cache_dir: Option<&Path>) -> std::result::Result<(Module, ModuleSource), String> {
    let engine = engine();
    let path = cache_dir.map(|d| d.join(format!("{:x}-{}.cwasm", Sha256::digest(wasm), engine_tag(engine))));
    if let Some(p) = path.as_ref().filter(|p| p.is_file()) {
        // SAFETY: the file was written by `Module::serialize` of this engine
        // configuration (the name carries its compatibility hash), in a
        // directory only the user writes; wasmtime checks the header too.
        match unsafe { Module::deserialize_file(engine, p) } {
            Ok(m) => return Ok((m, ModuleSource::Cache)),
            Err(e) => tracing::warn!(path = %p.display(), error = %e, "ignoring an unusable cached plugin module"),
        }
    }
    let module = Module::from_binary(engine, wasm).map_err(|e| format!("not a valid WebAssembly module: {e:#}"))?;
    if let Some(p) = path {
        let write = || -> std::io::Result<()> {
            std::fs::create_dir_all(p.parent().expect("cache files have a parent"))?;
            let bytes = module.serialize().map_err(std::io::Error::other)?;
            let tmp = p.with_extension(format!("tmp{}", std::process::id()));
            std::fs::write(&tmp, bytes)?;
            std::fs::rename(&tmp, &p)
        };
        if let Err(e) = write() {
            tracing::warn!(path = %p.display(), error = %e, "could not cache a compiled plugin module");
        }
    }
    Ok((module, ModuleSource::Compiled))
}

/// Checks that a module imports only the host's `log` and exports what the
/// ABI requires.
pub fn check_interface(module: &Module, needs_lower: bool, needs_policy: bool) -> std::result::Result<(), String> {
    for imp in module.imports() {
        let ok = imp.module() == imports::MODULE
            && imp.name() == imports::LOG
            && imp.ty().func().is_some_and(|f| f.params().len() == 3 && f.results().len() == 0);
        if !ok {
            return Err(format!(
                "imports {}::{}; plugins may import only {}::{} (no WASI, clock, filesystem or network)",
                imp.module(),
                imp.name(),
                imports::MODULE,
                imports::LOG
            ));
        }
    }
    let mut need = vec![exports::MEMORY, exports::ALLOC, exports::DEALLOC];
    if needs_lower {
        need.push(exports::LOWER);
    }
    if needs_policy {
        need.push(exports::POLICY);
    }
    for name in need {
        if module.get_export(name).is_none() {
            return Err(format!("does not export `{name}` (see plugins/ABI.md)"));
        }
    }
    Ok(())
}

/// What a store carries: the plugin's name for logs, its memory cap, and
/// what the last call ran into.
struct Guest {
    plugin: Arc<str>,
    memory_cap: usize,
    hit_memory_cap: bool,
    log_lines: u32,
}

impl ResourceLimiter for Guest {
    fn memory_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        if desired > self.memory_cap {
            self.hit_memory_cap = true;
            // An error (not `Ok(false)`) traps at once: a guest that ignores
            // a failed `memory.grow` cannot keep going.
            return Err(wasmtime::format_err!("linear memory of {desired} bytes exceeds the {} byte limit", self.memory_cap));
        }
        Ok(true)
    }

    fn table_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        Ok(desired <= 100_000)
    }
}

/// One live instance with its typed exports.
struct Live {
    store: Store<Guest>,
    memory: Memory,
    alloc: TypedFunc<i32, i32>,
    dealloc: TypedFunc<(i32, i32), ()>,
    instance: Instance,
}

/// A compiled plugin module and its instances. Thread-safe: concurrent calls
/// each get an instance of their own.
pub struct Sandbox {
    name: Arc<str>,
    module: Module,
    linker: Linker<Guest>,
    pub limits: Limits,
    pool: Mutex<Vec<Live>>,
}

fn fail(kind: PluginFailure, message: impl Into<String>) -> (PluginFailure, String) {
    (kind, message.into())
}

impl Sandbox {
    pub fn new(name: &str, module: Module, limits: Limits) -> std::result::Result<Sandbox, String> {
        let mut linker = Linker::new(engine());
        linker
            .func_wrap(imports::MODULE, imports::LOG, host_log)
            .map_err(|e| format!("defining the log import: {e}"))?;
        Ok(Sandbox { name: name.into(), module, linker, limits, pool: Mutex::new(Vec::new()) })
    }

    fn instantiate(&self) -> std::result::Result<Live, (PluginFailure, String)> {
        let guest = Guest { plugin: self.name.clone(), memory_cap: self.limits.memory, hit_memory_cap: false, log_lines: 0 };
        let mut store = Store::new(engine(), guest);
        store.limiter(|g| g as &mut dyn ResourceLimiter);
        self.arm(&mut store)?;
        let instance = match self.linker.instantiate(&mut store, &self.module) {
            Ok(i) => i,
            Err(e) => return Err(classify(&store, e, "instantiating")),
        };
        let memory = instance
            .get_memory(&mut store, exports::MEMORY)
            .ok_or_else(|| fail(PluginFailure::Instantiate, "no exported memory"))?;
        let alloc = instance
            .get_typed_func(&mut store, exports::ALLOC)
            .map_err(|e| fail(PluginFailure::Instantiate, format!("{}: {e}", exports::ALLOC)))?;
        let dealloc = instance
            .get_typed_func(&mut store, exports::DEALLOC)
            .map_err(|e| fail(PluginFailure::Instantiate, format!("{}: {e}", exports::DEALLOC)))?;
        Ok(Live { store, memory, alloc, dealloc, instance })
    }

    /// Instantiates one instance into the pool: a module that cannot start
    /// fails here, at load, instead of at its first call.
    pub fn warm_up(&self) -> std::result::Result<(), (PluginFailure, String)> {
        let live = self.instantiate()?;
        self.pool.lock().push(live);
        Ok(())
    }

    /// Refuels and rearms the deadline before a call.
    fn arm(&self, store: &mut Store<Guest>) -> std::result::Result<(), (PluginFailure, String)> {
        store.set_fuel(self.limits.fuel).map_err(|e| fail(PluginFailure::Instantiate, e.to_string()))?;
        let ticks = (self.limits.timeout.as_nanos() / TICK.as_nanos()).max(1) as u64 + 1;
        store.set_epoch_deadline(ticks);
        let g = store.data_mut();
        g.hit_memory_cap = false;
        g.log_lines = 0;
        Ok(())
    }

    /// Calls `entry` with `request`; returns the response bytes. The
    /// instance is reused only if the call succeeded.
    pub fn call(&self, entry: &str, request: &[u8]) -> std::result::Result<Vec<u8>, (PluginFailure, String)> {
        let pooled = self.pool.lock().pop();
        let mut live = match pooled {
            Some(l) => l,
            None => self.instantiate()?,
        };
        let start = Instant::now();
        let out = self.call_in(&mut live, entry, request);
        tracing::trace!(plugin = %self.name, entry, us = start.elapsed().as_micros() as u64, ok = out.is_ok(), "plugin call");
        if out.is_ok() {
            let mut pool = self.pool.lock();
            if pool.len() < POOL {
                pool.push(live);
            }
        }
        out
    }

    fn call_in(&self, live: &mut Live, entry: &str, request: &[u8]) -> std::result::Result<Vec<u8>, (PluginFailure, String)> {
        self.arm(&mut live.store)?;
        let f: TypedFunc<(i32, i32), i64> = live
            .instance
            .get_typed_func(&mut live.store, entry)
            .map_err(|e| fail(PluginFailure::Instantiate, format!("{entry}: {e}")))?;
        let len = i32::try_from(request.len()).map_err(|_| fail(PluginFailure::InvalidOutput, "request too large"))?;
        let ptr = live.alloc.call(&mut live.store, len).map_err(|e| classify(&live.store, e, exports::ALLOC))?;
        if ptr == 0 && len > 0 {
            return Err(fail(PluginFailure::OutOfMemory, format!("{} returned 0 for {len} bytes", exports::ALLOC)));
        }
        live.memory.write(&mut live.store, ptr as u32 as usize, request).map_err(|_| {
            fail(PluginFailure::InvalidOutput, format!("{} returned {ptr:#x}, outside linear memory", exports::ALLOC))
        })?;
        let packed = f.call(&mut live.store, (ptr, len)).map_err(|e| classify(&live.store, e, entry))?;
        let (optr, olen) = unpack(packed);
        if olen as usize > self.limits.output {
            return Err(fail(
                PluginFailure::InvalidOutput,
                format!("a response of {olen} bytes exceeds the {} byte limit", self.limits.output),
            ));
        }
        let mut out = vec![0u8; olen as usize];
        live.memory.read(&live.store, optr as usize, &mut out).map_err(|_| {
            fail(
                PluginFailure::InvalidOutput,
                format!("the response ({optr:#x}, {olen} bytes) lies outside the {} byte linear memory", live.memory.data_size(&live.store)),
            )
        })?;
        for (p, l) in [(ptr, len), (optr as i32, olen as i32)] {
            live.dealloc.call(&mut live.store, (p, l)).map_err(|e| classify(&live.store, e, exports::DEALLOC))?;
        }
        Ok(out)
    }
}

/// Names a failed call: the limit it hit, or the trap.
fn classify(store: &Store<Guest>, e: wasmtime::Error, what: &str) -> (PluginFailure, String) {
    if store.data().hit_memory_cap {
        return fail(PluginFailure::OutOfMemory, format!("{what}: {e:#}"));
    }
    match e.downcast_ref::<Trap>() {
        Some(Trap::OutOfFuel) => {
            fail(PluginFailure::OutOfFuel, format!("{what} used up its fuel (TORCHTPU_PLUGIN_FUEL raises the limit)"))
        }
        Some(Trap::Interrupt) => fail(PluginFailure::Timeout, format!("{what} ran past its deadline")),
        Some(t) => fail(PluginFailure::Trap, format!("{what}: {t}")),
        None => fail(PluginFailure::Trap, format!("{what}: {e:#}")),
    }
}

/// The `torchtpu.log` import: a bounded line into `tracing`.
fn host_log(mut caller: Caller<'_, Guest>, level: i32, ptr: i32, len: i32) {
    let g = caller.data_mut();
    g.log_lines += 1;
    if g.log_lines > LOG_LINES_PER_CALL {
        return;
    }
    let plugin = g.plugin.clone();
    let Some(memory) = caller.get_export(exports::MEMORY).and_then(|e| e.into_memory()) else { return };
    let len = (len.max(0) as usize).min(LOG_LINE_BYTES);
    let mut buf = vec![0u8; len];
    if memory.read(&caller, ptr as u32 as usize, &mut buf).is_err() {
        return;
    }
    let msg = String::from_utf8_lossy(&buf);
    match level {
        imports::LEVEL_ERROR => tracing::error!(plugin = %plugin, "{msg}"),
        imports::LEVEL_WARN => tracing::warn!(plugin = %plugin, "{msg}"),
        imports::LEVEL_INFO => tracing::info!(plugin = %plugin, "{msg}"),
        imports::LEVEL_DEBUG => tracing::debug!(plugin = %plugin, "{msg}"),
        _ => tracing::trace!(plugin = %plugin, "{msg}"),
    }
}

/// A plugin failure as the runtime's error.
pub fn error(plugin: &str, op: Option<&str>, (kind, message): (PluginFailure, String)) -> Error {
    Error::WasmPlugin { plugin: plugin.to_string(), op: op.map(String::from), kind, message }
}
