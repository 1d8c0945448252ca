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
//! crashes. Bounds are checked explicitly instead. That includes the stack:
//! wasmtime stops wasm at [`MAX_WASM_STACK`] below the stack pointer of the
//! call's entry, which is only a clean trap if that much stack (and room for
//! host calls below it) is really there, so every entry into wasm runs
//! through [`on_big_stack`].
//!
//! Before a module is compiled, [`precheck`] bounds what compiling it costs
//! (its size, its function count, one memory), and [`compile`] bounds the
//! wall time compiling takes.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use sha2::{Digest, Sha256};
use torchtpu_plugin_abi::{exports, imports, unpack};
use wasmtime::{Caller, Config, Engine, Instance, Linker, Memory, Module, ResourceLimiter, Store, Trap, TypedFunc};

use crate::error::{Error, PluginFailure};

/// Resource limits of a plugin: per call (fuel, deadline, memory, response)
/// and at load (module size, function count, compile time).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Fuel per call (about one unit per wasm instruction).
    pub fuel: u64,
    /// Wall-clock deadline per call.
    pub timeout: Duration,
    /// Largest linear memory of an instance, in bytes (a plugin has one).
    pub memory: usize,
    /// Largest response, in bytes.
    pub output: usize,
    /// Largest `.wasm` file, in bytes.
    pub module_bytes: usize,
    /// Most functions a module may define.
    pub functions: u32,
    /// Longest compile of a module.
    pub compile_timeout: Duration,
}

/// The environment variables that override [`Limits::default`], named in
/// the errors of the limits they raise.
pub mod env {
    pub const FUEL: &str = "TORCHTPU_PLUGIN_FUEL";
    pub const TIMEOUT_MS: &str = "TORCHTPU_PLUGIN_TIMEOUT_MS";
    pub const MEMORY_MB: &str = "TORCHTPU_PLUGIN_MEMORY_MB";
    pub const MAX_MODULE_MB: &str = "TORCHTPU_PLUGIN_MAX_MODULE_MB";
    pub const MAX_FUNCTIONS: &str = "TORCHTPU_PLUGIN_MAX_FUNCTIONS";
    pub const COMPILE_TIMEOUT_MS: &str = "TORCHTPU_PLUGIN_COMPILE_TIMEOUT_MS";
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            fuel: 500_000_000,
            timeout: Duration::from_secs(5),
            memory: 64 << 20,
            output: 4 << 20,
            module_bytes: 32 << 20,
            functions: 20_000,
            compile_timeout: Duration::from_secs(30),
        }
    }
}

/// `mb` MiB in bytes, saturating.
fn mib(mb: u64) -> usize {
    usize::try_from(mb).ok().and_then(|m| m.checked_mul(1 << 20)).unwrap_or(usize::MAX)
}

impl Limits {
    /// The defaults, overridden by the variables of [`env`].
    pub fn from_env() -> Limits {
        let var = |k: &str| std::env::var(k).ok().and_then(|v| v.trim().parse::<u64>().ok());
        let d = Limits::default();
        Limits {
            fuel: var(env::FUEL).unwrap_or(d.fuel),
            timeout: var(env::TIMEOUT_MS).map_or(d.timeout, Duration::from_millis),
            memory: var(env::MEMORY_MB).map_or(d.memory, mib),
            output: d.output,
            module_bytes: var(env::MAX_MODULE_MB).map_or(d.module_bytes, mib),
            functions: var(env::MAX_FUNCTIONS).map_or(d.functions, |n| u32::try_from(n).unwrap_or(u32::MAX)),
            compile_timeout: var(env::COMPILE_TIMEOUT_MS).map_or(d.compile_timeout, Duration::from_millis),
        }
    }
}

/// The most stack wasm may use in one call (wasmtime's `max_wasm_stack`).
pub const MAX_WASM_STACK: usize = 1 << 20;
/// Stack kept free below the wasm limit for what runs there: host functions
/// (`log`), wasmtime's libcalls (`memory.grow` asks the limiter) and the
/// frames between [`on_big_stack`] and the first wasm frame.
const HOST_STACK_MARGIN: usize = 512 << 10;
/// A call runs where it is if this much stack is left, else on a new segment.
const STACK_RED_ZONE: usize = MAX_WASM_STACK + HOST_STACK_MARGIN;
/// The size of that segment.
const STACK_SEGMENT: usize = 2 * STACK_RED_ZONE;
/// Stack of the thread that compiles a module (Cranelift recurses on deeply
/// nested code).
const COMPILE_THREAD_STACK: usize = 16 << 20;

/// Runs `f` (which enters wasm) where at least [`STACK_RED_ZONE`] of stack is
/// left: on the current stack when it has that much (a comparison against
/// the thread's stack bounds), else on a fresh [`STACK_SEGMENT`] mapping
/// (`stacker`, which also carries panics across). wasmtime sets the wasm
/// stack limit from the stack pointer at entry, so on either stack an
/// endless recursion ends in a clean stack-overflow trap, never in the
/// thread's guard page (where, without signal handlers, it would kill the
/// process), whatever stack the calling thread was given.
pub fn on_big_stack<R>(f: impl FnOnce() -> R) -> R {
    stacker::maybe_grow(STACK_RED_ZONE, STACK_SEGMENT, f)
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
        config.consume_fuel(true).epoch_interruption(true).signals_based_traps(false).max_wasm_stack(MAX_WASM_STACK);
        // One linear memory per instance: the limiter caps their sum anyway,
        // and a module that declares more is refused by `precheck`.
        config.wasm_multi_memory(false);
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

/// A duration as a limit is named in errors: "30 s", "250 ms".
pub fn show_duration(d: Duration) -> String {
    match d.as_millis() {
        ms if ms % 1000 == 0 => format!("{} s", ms / 1000),
        ms => format!("{ms} ms"),
    }
}

/// A byte count as a limit is named in errors: "32 MiB", "1000 bytes".
pub fn show_bytes(n: usize) -> String {
    if n % (1 << 20) == 0 { format!("{} MiB", n >> 20) } else { format!("{n} bytes") }
}

/// Checks what the module's section headers say before anything is
/// compiled, so that a module whose compile alone would be costly is
/// refused in microseconds: at most `limits.functions` functions (the
/// counts of the function and code sections), one linear memory, and an
/// initial memory within `limits.memory`. Validation is still the
/// compiler's.
pub fn precheck(wasm: &[u8], limits: &Limits) -> std::result::Result<(), String> {
    let (mut declared, mut bodies, mut memories) = (0usize, 0usize, 0usize);
    let mut initial_pages: Option<u64> = None;
    for (id, body) in super::manifest::sections(wasm)? {
        let mut i = 0;
        match id {
            // function section: one type index per defined function
            3 => declared = declared.saturating_add(super::manifest::leb(body, &mut i)?),
            // code section: one body per defined function
            10 => bodies = bodies.saturating_add(super::manifest::leb(body, &mut i)?),
            5 => {
                let n = super::manifest::leb(body, &mut i)?;
                memories = memories.saturating_add(n);
                if n > 0 && initial_pages.is_none() {
                    // limits: a flags byte, then the minimum (in pages).
                    i += 1;
                    initial_pages = Some(super::manifest::leb(body, &mut i)? as u64);
                }
            }
            _ => {}
        }
    }
    let functions = declared.max(bodies);
    if functions > limits.functions as usize {
        return Err(format!(
            "defines {functions} functions, over the limit of {} ({} raises it)",
            limits.functions,
            env::MAX_FUNCTIONS
        ));
    }
    if memories > 1 {
        return Err(format!(
            "declares {memories} linear memories; a plugin has exactly one (multi-memory is off in the plugin sandbox)"
        ));
    }
    if let Some(pages) = initial_pages {
        let bytes = pages.saturating_mul(1 << 16);
        if bytes > limits.memory as u64 {
            return Err(format!(
                "declares an initial linear memory of {pages} pages ({bytes} bytes), over the {} limit ({} raises it)",
                show_bytes(limits.memory),
                env::MEMORY_MB
            ));
        }
    }
    Ok(())
}

/// Compiles `wasm` as [`compile_now`] does, on a helper thread, waiting at
/// most `timeout`. A compile that runs past it is reported and abandoned: it
/// finishes in the background and its module is dropped.
pub fn compile(
    wasm: Arc<[u8]>,
    cache_dir: Option<PathBuf>,
    timeout: Duration,
) -> std::result::Result<(Module, ModuleSource), String> {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    std::thread::Builder::new()
        .name("torchtpu-plugin-compile".into())
        .stack_size(COMPILE_THREAD_STACK)
        .spawn(move || {
            // The receiver may have given up; then the module is dropped.
            let _ = tx.send(compile_now(&wasm, cache_dir.as_deref()));
        })
        .map_err(|e| format!("cannot start a thread to compile it: {e}"))?;
    match rx.recv_timeout(timeout) {
        Ok(r) => r,
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => Err(format!(
            "compiling it took longer than the {} limit ({} raises it)",
            show_duration(timeout),
            env::COMPILE_TIMEOUT_MS
        )),
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
            Err("compiling it failed: the compiler panicked (a bug in the compiler, not in the plugin)".into())
        }
    }
}

/// Compiles `wasm`, or loads the artifact a previous compile left in
/// `cache_dir` (keyed by the module's SHA-256 and the engine's
/// compatibility hash). The cache directory is trusted like the fused
/// program cache: it holds native code, so it must be the user's own.
pub fn compile_now(wasm: &[u8], cache_dir: Option<&Path>) -> std::result::Result<(Module, ModuleSource), String> {
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
            // Unique per write: an abandoned compile (past its deadline)
            // may still be writing when the same module is compiled again.
            static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
            let n = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let tmp = p.with_extension(format!("tmp{}-{n}", std::process::id()));
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

/// Most tables an instance may have (a Rust plugin has one).
const TABLES: usize = 4;
/// Most elements a table may grow to.
const TABLE_ELEMENTS: usize = 100_000;

/// What a store carries: the plugin's name for logs, its memory cap, the
/// bytes its memories hold, and what the last call ran into.
struct Guest {
    plugin: Arc<str>,
    memory_cap: usize,
    /// The sum of the sizes of the store's memories, as granted by
    /// `memory_growing` (creating a memory asks for its initial size).
    committed: usize,
    hit_memory_cap: bool,
    log_lines: u32,
}

impl ResourceLimiter for Guest {
    fn memory_growing(&mut self, current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        // The cap is on the sum over the store's memories, not per memory.
        let total = self.committed.checked_sub(current).and_then(|rest| rest.checked_add(desired));
        match total {
            Some(t) if t <= self.memory_cap => {
                self.committed = t;
                Ok(true)
            }
            _ => {
                self.hit_memory_cap = true;
                // An error (not `Ok(false)`) traps at once: a guest that
                // ignores a failed `memory.grow` cannot keep going.
                Err(wasmtime::format_err!(
                    "linear memory of {desired} bytes ({} in all) exceeds the {} limit ({} raises it)",
                    self.committed.saturating_sub(current).saturating_add(desired),
                    show_bytes(self.memory_cap),
                    env::MEMORY_MB
                ))
            }
        }
    }

    fn table_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        Ok(desired <= TABLE_ELEMENTS)
    }

    fn instances(&self) -> usize {
        1
    }

    fn memories(&self) -> usize {
        1
    }

    fn tables(&self) -> usize {
        TABLES
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
        let guest = Guest {
            plugin: self.name.clone(),
            memory_cap: self.limits.memory,
            committed: 0,
            hit_memory_cap: false,
            log_lines: 0,
        };
        let mut store = Store::new(engine(), guest);
        store.limiter(|g| g as &mut dyn ResourceLimiter);
        self.arm(&mut store)?;
        let instance = match on_big_stack(|| self.linker.instantiate(&mut store, &self.module)) {
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
        let out = on_big_stack(|| self.call_in(&mut live, entry, request));
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
        Some(Trap::StackOverflow) => fail(
            PluginFailure::Trap,
            format!("{what}: stack overflow (wasm may use {} of stack per call)", show_bytes(MAX_WASM_STACK)),
        ),
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
    let msg = escape_log(&String::from_utf8_lossy(&buf));
    match level {
        imports::LEVEL_ERROR => tracing::error!(plugin = %plugin, "{msg}"),
        imports::LEVEL_WARN => tracing::warn!(plugin = %plugin, "{msg}"),
        imports::LEVEL_INFO => tracing::info!(plugin = %plugin, "{msg}"),
        imports::LEVEL_DEBUG => tracing::debug!(plugin = %plugin, "{msg}"),
        _ => tracing::trace!(plugin = %plugin, "{msg}"),
    }
}

/// A plugin's log text made safe for a log line: line breaks, every other
/// control character (ANSI escapes start with one), Unicode line and
/// paragraph separators and bidirectional overrides become visible escapes
/// (`\n`, `\u{1b}`), and a backslash is doubled so that an escape cannot be
/// forged either. A plugin therefore writes exactly one line, which the log
/// attributes to it, and cannot fake another line or recolour the terminal.
pub fn escape_log(s: &str) -> String {
    use std::fmt::Write;
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control()
                || matches!(c, '\u{2028}' | '\u{2029}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}') =>
            {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

/// A plugin failure as the runtime's error.
pub fn error(plugin: &str, op: Option<&str>, (kind, message): (PluginFailure, String)) -> Error {
    Error::WasmPlugin { plugin: plugin.to_string(), op: op.map(String::from), kind, message }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_text_is_escaped() {
        assert_eq!(escape_log("plain text, äöü ✓"), "plain text, äöü ✓");
        assert_eq!(escape_log("a\nINFO forged line"), "a\\nINFO forged line");
        assert_eq!(escape_log("x\r\ty"), "x\\r\\ty");
        assert_eq!(escape_log("\u{1b}[31mred\u{1b}[0m"), "\\u{1b}[31mred\\u{1b}[0m");
        assert_eq!(escape_log("nul\0del\u{7f}c1\u{85}"), "nul\\u{0}del\\u{7f}c1\\u{85}");
        assert_eq!(escape_log("ls\u{2028}rlo\u{202e}"), "ls\\u{2028}rlo\\u{202e}");
        // A backslash is doubled, so "\\n" typed by the plugin stays
        // distinguishable from an escaped newline.
        assert_eq!(escape_log("a\\nb"), "a\\\\nb");
    }

    #[test]
    fn limits_from_the_environment_saturate() {
        assert_eq!(mib(32), 32 << 20);
        assert_eq!(mib(u64::MAX), usize::MAX);
        assert_eq!(show_duration(Duration::from_secs(30)), "30 s");
        assert_eq!(show_duration(Duration::from_millis(250)), "250 ms");
        assert_eq!(show_bytes(64 << 20), "64 MiB");
        assert_eq!(show_bytes(1000), "1000 bytes");
    }
}
