//! The runtime: one PJRT client, its devices, the per-op executable cache,
//! random generators, and the eager execution of ops ([`eager`]).
//!
//! Thread-safe: a [`Runtime`] is shared as `Arc<Runtime>` and every method
//! takes `&self`.

mod call;
mod checks;
mod collective;
mod dispatch;
mod eager;
mod fused;
mod grow;
mod materialize;
mod memory;
mod programs;
mod progress;
pub mod mode;
pub mod stats;
pub mod stream;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

pub use mode::{current_mode, global_mode, set_global_mode, set_thread_mode, thread_mode, ExecMode};
pub use fused::FlushInfo;
pub use grow::MAX_BUCKETS as MAX_SHAPE_BUCKETS;
pub use memory::{MemoryInfo, MemorySource};
pub use stats::{Stats, StatsSnapshot};
pub use stream::{Stream, StreamEvent, Streams};

use crate::cache::{CacheConfig, Lru, ProgramCache};
use crate::graph::policy::{FuseLoops, FusionPolicy};
use crate::graph::{FlushReason, Recording};
use crate::graph::shape_watch::ShapeWatch;
use fused::InferTable;

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::hlo::Elem;
use crate::pjrt::{discovery, Api, Buffer, Client, DeviceInfo, DistributedOptions, Event};
use crate::rng::{self, Generator};
use crate::shape;
use crate::storage::{Storage, StorageValue};
use crate::tensor::{Scalar, Tensor, Value};
use eager::Compiled;

/// How to create a [`Runtime`].
#[derive(Debug, Clone, Default)]
pub struct RuntimeOptions {
    /// The PJRT plugin to load; `None` searches (see [`discovery::find_plugin`]).
    pub plugin: Option<PathBuf>,
    /// Number of devices the XLA CPU plugin exposes (its `cpu_device_count`
    /// option; other plugins ignore it). `None` keeps the plugin's default.
    pub cpu_device_count: Option<usize>,
    /// Joins a client that spans processes: passes `node_id` and `num_nodes`
    /// to the plugin and gives it the store for its key-value callbacks.
    /// Plugins that cannot span processes (the XLA CPU plugin) ignore both.
    pub distributed: Option<DistributedOptions>,
}

/// Scalar arguments are uploaded once per (device, type, bits) and reused, so
/// a training loop's constant learning rate costs no transfer per step.
const SCALAR_CACHE_LIMIT: usize = 4096;

pub struct Runtime {
    /// This runtime's id, unique in the process: every storage it makes
    /// carries it, and calls refuse another runtime's tensors.
    id: u64,
    client: Arc<Client>,
    plugin: PathBuf,
    /// Why that plugin ([`discovery::find_plugin`]'s reason).
    plugin_source: String,
    /// Strict mode's memo in front of the program cache: a call's signature
    /// to its compiled program, so a hit skips lowering and hashing. Bounded
    /// like the program cache's memory tier, whose executables it shares.
    signatures: Mutex<Lru<String, Arc<Compiled>>>,
    stats: Stats,
    /// Each device's default generator.
    generators: Vec<Generator>,
    scalars: Mutex<HashMap<(usize, Elem, u64), Arc<Buffer>>>,
    // --- fused mode ---
    /// Each device's pending graph.
    recordings: Vec<Mutex<Recording>>,
    next_recording: std::sync::atomic::AtomicU64,
    infers: Mutex<InferTable>,
    /// Recordings whose flush failed, with the error (their values are lost).
    failed: Mutex<HashMap<u64, String>>,
    fusion: Mutex<FusionConfig>,
    /// Ops whose shapes change between steps (graph/shape_watch.rs).
    shape_watch: Mutex<ShapeWatch>,
    /// Concatenations that grow from call to call ([`grow`]).
    growth: Mutex<grow::Growth>,
    programs: ProgramCache,
    last_flush: Mutex<Option<FlushInfo>>,
    /// Default, created and per-thread current streams of every device.
    streams: Streams,
    /// The index-check switch and the checks pending a host read.
    index_checks: checks::IndexChecks,
}

/// Fusion settings of a runtime.
struct FusionConfig {
    policy: Arc<dyn FusionPolicy>,
    /// Flush when the pending graph has this many ops.
    max_ops: usize,
}

/// Default pending-graph size limit (`TORCHTPU_FUSE_MAX_OPS`).
const DEFAULT_MAX_OPS: usize = 2048;

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Runtime({} {}, {} devices)", self.platform_name(), self.platform_version(), self.device_count())
    }
}

impl Runtime {
    /// Loads the PJRT plugin and creates a client.
    pub fn new(options: RuntimeOptions) -> Result<Arc<Runtime>> {
        // Plugins from $TORCHTPU_PLUGIN_PATH (once per process): their ops
        // are in the registry before the first call.
        crate::plugin::host().load_env();
        crate::trace::start_from_env();
        let found = discovery::find_plugin(options.plugin.as_deref())?;
        tracing::info!(path = %found.path.display(), source = %found.source, "loading PJRT plugin");
        let api = Api::load(&found.path)?;
        let mut create = Vec::new();
        if let Some(n) = options.cpu_device_count {
            create.push(crate::pjrt::CreateOption::Int("cpu_device_count".into(), n as i64));
        }
        let mut store = None;
        if let Some(d) = &options.distributed {
            d.check()?;
            create.push(crate::pjrt::CreateOption::Int("node_id".into(), d.node_id as i64));
            create.push(crate::pjrt::CreateOption::Int("num_nodes".into(), d.num_nodes as i64));
            store = Some(d.store.clone());
            tracing::info!(node_id = d.node_id, num_nodes = d.num_nodes, "creating a client that spans processes");
        }
        let client = Client::create_with_store(api, &create, store)?;
        let generators = (0..client.device_count()).map(|d| Generator::new(d, rng::DEFAULT_SEED)).collect();
        let recordings: Vec<Mutex<Recording>> = (0..client.device_count()).map(|d| Mutex::new(Recording::new(d as u64, d))).collect();
        let max_ops = std::env::var("TORCHTPU_FUSE_MAX_OPS").ok().and_then(|v| v.parse().ok()).unwrap_or(DEFAULT_MAX_OPS);
        let cache_config = CacheConfig::from_env();
        static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let id = NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let streams = Streams::new(client.device_count(), id);
        Ok(Arc::new(Runtime {
            id,
            client,
            plugin: found.path,
            plugin_source: found.source,
            signatures: Mutex::new(Lru::new(cache_config.memory_entries)),
            stats: Stats::default(),
            generators,
            scalars: Mutex::new(HashMap::new()),
            next_recording: std::sync::atomic::AtomicU64::new(recordings.len() as u64),
            recordings,
            infers: Mutex::new(InferTable::default()),
            failed: Mutex::new(HashMap::new()),
            fusion: Mutex::new(FusionConfig { policy: Arc::new(FuseLoops::default()), max_ops }),
            shape_watch: Mutex::new(ShapeWatch::from_env()),
            growth: Mutex::new(grow::Growth::default()),
            programs: ProgramCache::new(cache_config),
            last_flush: Mutex::new(None),
            streams,
            index_checks: checks::IndexChecks::from_env(),
        }))
    }

    pub fn client(&self) -> &Arc<Client> {
        &self.client
    }

    /// This runtime's id, unique in the process (runtime #1 is the first).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Refuses a tensor another runtime made: its buffer belongs to that
    /// runtime's PJRT client (and a pending value to its recording).
    pub fn check_owner(&self, what: &str, t: &Tensor) -> Result<()> {
        let owner = t.storage().owner();
        if owner == self.id {
            return Ok(());
        }
        Err(Error::InvalidArgument(format!(
            "{what}: the tensor belongs to runtime #{owner}, but the call is on runtime #{}; \
             tensors cannot be shared across runtimes (copy through the host)",
            self.id
        )))
    }
    pub fn plugin_path(&self) -> &Path {
        &self.plugin
    }
    /// Why [`Runtime::plugin_path`] was chosen: "explicit path",
    /// "$TORCHTPU_PJRT_PLUGIN", "xla-cpu-pjrt in the Python environment
    /// <prefix>", ... ([`discovery`]).
    pub fn plugin_source(&self) -> &str {
        &self.plugin_source
    }
    pub fn platform_name(&self) -> &str {
        self.client.platform_name()
    }
    pub fn platform_version(&self) -> &str {
        self.client.platform_version()
    }
    pub fn devices(&self) -> &[DeviceInfo] {
        self.client.devices()
    }
    pub fn device_count(&self) -> usize {
        self.client.device_count()
    }
    /// Devices of the whole PJRT client: more than [`Runtime::device_count`]
    /// where the client's devices span processes (libtpu on a pod), which is
    /// when collectives across processes can run natively.
    pub fn global_device_count(&self) -> usize {
        self.client.global_device_count()
    }
    /// Checks a device index from a caller.
    pub fn device(&self, index: i64) -> Result<usize> {
        self.client.check_device(index)
    }
    /// Bytes of live buffers and their peak on `device`.
    pub fn memory(&self, device: usize) -> Result<(i64, i64)> {
        let d = self.device(device as i64)?;
        let s = self.client.memory(d).snapshot();
        Ok((s.bytes.current, s.bytes.peak))
    }

    /// Restarts peak tracking on `device` from its current live bytes, so the
    /// peak that [`Runtime::memory`] reports next covers only what ran since.
    pub fn reset_peak_memory(&self, device: usize) -> Result<()> {
        let d = self.device(device as i64)?;
        self.client.memory(d).reset_peak();
        Ok(())
    }

    /// The streams of every device.
    pub fn streams(&self) -> &Streams {
        &self.streams
    }

    pub fn stats(&self) -> StatsSnapshot {
        let mut s = self.stats.snapshot();
        s.cached_programs = self.signatures.lock().len() as u64;
        s
    }

    /// Drops every cached executable, in memory and on disk (the next call
    /// of each op or graph compiles).
    pub fn clear_cache(&self) -> Result<()> {
        self.signatures.lock().clear();
        self.growth.lock().clear_programs();
        self.programs.clear()
    }

    /// The program cache of every mode (two tiers, with miss explanations):
    /// fused graphs, and strict-mode ops as one-op programs.
    pub fn program_cache(&self) -> &ProgramCache {
        &self.programs
    }

    /// Sets the fusion policy for all devices.
    pub fn set_fusion_policy(&self, policy: Arc<dyn FusionPolicy>) {
        self.fusion.lock().policy = policy;
    }

    /// Selects a fusion policy by name: a built-in one (`fuse_loops`, the
    /// default, `fuse_all`, `loop_cut`) or a plugin's (`<plugin>::<policy>`, optionally followed
    /// by `?config` for the plugin).
    pub fn select_fusion_policy(&self, name: &str) -> Result<()> {
        let policy = match crate::graph::policy::builtin(name) {
            Some(p) => p,
            None => crate::plugin::host().policy(name)?,
        };
        self.set_fusion_policy(policy);
        Ok(())
    }

    pub fn fusion_policy(&self) -> Arc<dyn FusionPolicy> {
        self.fusion.lock().policy.clone()
    }

    /// Flushes a pending graph once it has `max_ops` ops (at least 1).
    pub fn set_fusion_max_ops(&self, max_ops: usize) {
        self.fusion.lock().max_ops = max_ops.max(1);
    }

    /// Turns the device-side index checks on or off (default on;
    /// `TORCHTPU_INDEX_CHECKS=0` starts with them off). With them on, an
    /// out-of-range index in an indexing op (embedding, gather, scatter,
    /// index, index_put, take, index_select, index_add, nll_loss targets) is
    /// an `OutOfRange` error at the next host read or synchronize, or at the
    /// op in `DEFER_NEVER_AND_LAUNCH_BLOCKING` mode; with them off it is
    /// silent (reads clamp, writes are dropped). The switch is part of every
    /// program's cache key, so toggling never runs a program built for the
    /// other setting. Checks already pending are still reported.
    pub fn set_index_checks(&self, on: bool) {
        self.index_checks.set_enabled(on);
    }

    pub fn index_checks(&self) -> bool {
        self.index_checks.enabled()
    }

    /// Programs whose index checks wait for the next host read (bounded).
    pub fn pending_index_checks(&self) -> usize {
        self.index_checks.pending()
    }

    /// What the last flush did.
    pub fn last_flush(&self) -> Option<FlushInfo> {
        self.last_flush.lock().clone()
    }

    /// Ops pending in a device's graph.
    pub fn pending_ops(&self, device: usize) -> usize {
        self.recordings.get(device).map_or(0, |r| r.lock().len())
    }

    /// Seeds the default generator of every device, as `torch.manual_seed`
    /// does (generators created with [`Runtime::new_generator`] keep theirs).
    pub fn manual_seed(&self, seed: u64) {
        for g in &self.generators {
            g.manual_seed(seed);
        }
    }

    pub fn seed(&self, device: usize) -> Result<u64> {
        Ok(self.default_generator(device)?.initial_seed())
    }

    /// A device's default generator's whole state `(seed, calls)`, for
    /// `torch.tpu.get_rng_state`.
    pub fn rng_state(&self, device: usize) -> Result<(u64, u64)> {
        Ok(self.default_generator(device)?.state())
    }

    /// Restores a state returned by `rng_state`: the random ops that follow
    /// repeat the ones that followed it.
    pub fn set_rng_state(&self, device: usize, seed: u64, calls: u64) -> Result<()> {
        self.default_generator(device)?.set_state(seed, calls);
        Ok(())
    }

    /// A handle to `device`'s default generator (`torch.tpu.default_generators[device]`):
    /// random ops without a `generator` argument draw from it.
    pub fn default_generator(&self, device: usize) -> Result<Generator> {
        let d = self.device(device as i64)?;
        Ok(self.generators[d].clone())
    }

    /// A new generator for `device` seeded with `seed`, independent of the
    /// device's default (`torch.Generator(device="tpu:N").manual_seed(seed)`).
    pub fn new_generator(&self, device: usize, seed: u64) -> Result<Generator> {
        let d = self.device(device as i64)?;
        Ok(Generator::new(d, seed))
    }

    /// The generator a call on `device` draws from: its `generator`
    /// argument when one is given, else the device's default.
    fn generator_for<'a>(&'a self, bound: &'a [Value], device: usize) -> &'a Generator {
        bound.iter().find_map(|v| if let Value::Generator(g) = v { Some(g) } else { None }).unwrap_or(&self.generators[device])
    }

    // ------------------------------------------------------------ transfers

    /// A new tensor on `device` holding `data` (dense, row-major, native
    /// endianness, `dtype` elements of shape `sizes`).
    pub fn tensor_from_host(&self, data: &[u8], dtype: DType, sizes: &[i64], device: usize) -> Result<Tensor> {
        let device = self.device(device as i64)?;
        let numel = shape::checked_numel("from_host", sizes, dtype.size())?;
        let want = numel as usize * dtype.size();
        if data.len() != want {
            return Err(Error::InvalidArgument(format!(
                "from_host: {} bytes given, but a {} tensor of shape {} needs {want}",
                data.len(),
                dtype,
                shape::fmt(sizes)
            )));
        }
        let buf = self.client.buffer_from_host(data, dtype.element_type(), &[numel], device)?;
        let storage = Storage::new(self.id, device, dtype, numel, StorageValue::Buffer(Arc::new(buf)));
        Ok(Tensor::from_storage(storage, sizes))
    }

    /// Copies a tensor's elements to the host (dense, row-major), waiting for
    /// pending work on it. Non-contiguous views are made dense on the device
    /// first.
    pub fn tensor_to_host(self: &Arc<Self>, t: &Tensor) -> Result<Vec<u8>> {
        let mut out = vec![0u8; t.numel() as usize * t.dtype().size()];
        self.tensor_to_host_into(t, &mut out)?;
        Ok(out)
    }

    /// Copies `t`'s elements (dense, row-major) straight into `dst`, which
    /// must hold exactly numel * element size bytes: a large download (a
    /// staged collective's) makes no intermediate copy. A wrong size is an
    /// error before anything is flushed.
    pub fn tensor_to_host_into(self: &Arc<Self>, t: &Tensor, dst: &mut [u8]) -> Result<()> {
        self.check_owner("to_host", t)?;
        let want = t.numel() as usize * t.dtype().size();
        if dst.len() != want {
            return Err(Error::InvalidArgument(format!(
                "to_host: destination has {} bytes, but the {}{} tensor has {want}",
                dst.len(),
                t.dtype(),
                shape::fmt(t.sizes())
            )));
        }
        if want == 0 {
            return Ok(());
        }
        // A host read ends the step the shape watch follows, also when it
        // flushes nothing (the value came from an op that ran alone, as the
        // grown ids do): otherwise the next step's ops would take other
        // positions.
        self.shape_watch.lock().flushed(t.storage().device(), false);
        // A contiguous view of a storage made with room to grow (a shape
        // bucket), or of one at most twice its size (an output narrowed
        // from a padded batch), is a range of its buffer: reading the buffer
        // and keeping the range compiles nothing, where a copy would
        // compile for each size of the tensor.
        let bounded = t.storage().used().is_some() || want.saturating_mul(2) >= t.storage().nbytes();
        if !t.is_whole_storage() && t.is_contiguous() && bounded {
            let buf = self.materialize(t.storage(), "to_host", FlushReason::HostRead)?;
            self.index_checks.resolve()?;
            let size = t.dtype().size();
            let mut all = vec![0u8; t.storage().nbytes()];
            buf.to_host(&mut all)?;
            let start = t.offset() as usize * size;
            let range = all.get(start..start + want).ok_or_else(|| {
                Error::Internal(format!("to_host: a view at {} past its storage of {}", t.offset(), t.storage().numel()))
            })?;
            dst.copy_from_slice(range);
            return Ok(());
        }
        let dense = if t.is_whole_storage() {
            t.clone()
        } else {
            self.call("aten::clone", &[t.into()])?.remove(0).into_tensor()?
        };
        let buf = self.materialize(dense.storage(), "to_host", FlushReason::HostRead)?;
        // A host read is where asynchronous index errors surface, as a
        // device-side assert does on CUDA.
        self.index_checks.resolve()?;
        buf.to_host(dst)
    }

    /// Flushes pending graphs, then waits for every stream and the programs
    /// launched on them; returns the first error since the last sync,
    /// including an out-of-range index found by a pending index check.
    pub fn synchronize(self: &Arc<Self>) -> Result<()> {
        let flushed = self.flush(FlushReason::Synchronize);
        // Every launch is tracked on a stream, so the streams know all work.
        let streams = self.streams.synchronize_all();
        let checked = self.index_checks.resolve();
        flushed.and(streams).and(checked)
    }

    /// Shuts the runtime down at the end of its use, so that nothing of it
    /// runs while the process exits (the PyTorch backend calls this at
    /// interpreter exit, before static destructors run):
    ///
    /// 1. flushes the pending graphs and waits for every launched program,
    ///    as [`Runtime::synchronize`] does;
    /// 2. stops and joins the stream workers;
    /// 3. drops the cached executables and scalars, then destroys the PJRT
    ///    client, which joins the plugin's threads.
    ///
    /// Afterwards every call that needs the device fails with
    /// FAILED_PRECONDITION; tensors can still be dropped (that frees
    /// nothing: that needs the client, so what they hold is kept until the
    /// process ends). A second call
    /// does nothing and succeeds.
    ///
    /// `timeout` bounds the waits (None: as long as it takes). If work is
    /// still running at the deadline (a program that does not end, or calls
    /// on other threads), the error is DEADLINE_EXCEEDED and the PJRT client
    /// is left alive: the process can still exit as it would have without
    /// the shutdown. Otherwise the runtime is shut down even if the work it
    /// waited for failed, and that failure is returned.
    pub fn shutdown(self: &Arc<Self>, timeout: Option<Duration>) -> Result<()> {
        let _span = tracing::debug_span!("runtime_shutdown").entered();
        if self.client.is_closed() {
            return Ok(());
        }
        // Far enough to mean "no deadline" without overflowing an Instant.
        let timeout = timeout.unwrap_or(Duration::from_secs(100 * 365 * 24 * 3600));
        let deadline = Instant::now() + timeout;
        let late = |what: &str, left: &str| {
            Error::DeadlineExceeded(format!(
                "runtime shutdown: {what} after {:.1} s, so {left} was left running",
                timeout.as_secs_f64()
            ))
        };
        // On a helper thread, so that work that never ends cannot hold the
        // caller past the deadline (the helper is then left blocked).
        let (tx, rx) = std::sync::mpsc::channel();
        let rt = self.clone();
        let helper = std::thread::Builder::new()
            .name("ttpu-shutdown".into())
            .spawn(move || {
                let _ = tx.send(rt.synchronize());
            })
            .map_err(|e| Error::Internal(format!("runtime shutdown: cannot spawn a thread: {e}")))?;
        let synced = match rx.recv_timeout(stream::remaining(deadline)) {
            Ok(r) => r,
            Err(_) => return Err(late("launched work was still running", "the runtime")),
        };
        let _ = helper.join();
        if !self.streams.shutdown(deadline) {
            return Err(late("stream work was still running", "the PJRT client"));
        }
        self.signatures.lock().clear();
        self.growth.lock().clear_programs();
        self.scalars.lock().clear();
        self.programs.release_loaded();
        if !self.client.close(stream::remaining(deadline)) {
            return Err(late("calls into PJRT on other threads were still running", "the PJRT client"));
        }
        tracing::debug!("runtime shut down");
        if let Err(e) = crate::trace::write_env_file() {
            tracing::warn!("TORCHTPU_TRACE: {e}");
        }
        synced
    }

    /// Finishes the runtime's work when its owner lets go of it (the C ABI's
    /// `ttpu_runtime_destroy`, after the calls in progress returned):
    /// flushes the pending graphs, waits for the launched work, then stops
    /// every stream's worker, so that a stream that outlives its runtime
    /// fails cleanly (FAILED_PRECONDITION) instead of running work nobody
    /// can read back. Unlike [`Runtime::shutdown`] it keeps the PJRT client
    /// alive while tensors hold its buffers, so dropping them still frees
    /// device memory. Returns the first error of the work waited for.
    /// Idempotent, and a no-op after a shutdown.
    pub fn close(self: &Arc<Self>) -> Result<()> {
        if self.streams.is_shut_down() {
            return Ok(());
        }
        let synced = self.synchronize();
        // No deadline: the work was launched, and a program always ends.
        let far = Instant::now() + Duration::from_secs(100 * 365 * 24 * 3600);
        self.streams.shutdown(far);
        synced
    }

    /// Whether [`Runtime::shutdown`] destroyed the PJRT client.
    pub fn is_shut_down(&self) -> bool {
        self.client.is_closed()
    }

    /// Hands the completion event of a program launched for `op` to the
    /// device's current stream: synchronize (of the stream or the runtime)
    /// waits for it and reports its error naming `op`.
    fn track(&self, device: usize, op: &str, event: Event) {
        self.streams.current(device).track_as(op, event);
    }

    /// A cached rank-0 buffer holding `v` as `elem` on `device`.
    fn scalar_buffer(&self, device: usize, elem: Elem, v: Scalar) -> Result<Arc<Buffer>> {
        let bytes = v.host_bytes(elem);
        // Past 8 bytes (a complex128) is the imaginary part, always zero for
        // a Python scalar: the real part and `elem` are the key.
        let mut bits = [0u8; 8];
        let n = bytes.len().min(8);
        bits[..n].copy_from_slice(&bytes[..n]);
        let key = (device, elem, u64::from_le_bytes(bits));
        if let Some(b) = self.scalars.lock().get(&key) {
            return Ok(b.clone());
        }
        let buf = Arc::new(self.client.buffer_from_host(&bytes, elem.element_type(), &[], device)?);
        let mut cache = self.scalars.lock();
        if cache.len() >= SCALAR_CACHE_LIMIT {
            cache.clear();
        }
        cache.insert(key, buf.clone());
        Ok(buf)
    }

    /// A rank-1 i64 buffer on `device` holding `values` (a view's runtime
    /// strides).
    fn ints_buffer(&self, device: usize, values: &[i64]) -> Result<Arc<Buffer>> {
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        Ok(Arc::new(self.client.buffer_from_host(&bytes, Elem::I64.element_type(), &[values.len() as i64], device)?))
    }

    /// Parses a `Device` argument: an index, `"tpu"` or `"tpu:N"`.
    fn parse_device(&self, op: &str, v: &Value) -> Result<Option<usize>> {
        match v {
            Value::None => Ok(None),
            Value::Int(i) => self.device(*i).map(Some),
            Value::Str(s) => {
                let s = s.trim();
                if s == "tpu" {
                    return Ok(Some(0));
                }
                match s.strip_prefix("tpu:").and_then(|n| n.parse::<i64>().ok()) {
                    Some(i) => self.device(i).map(Some),
                    None => Err(Error::op(op, format!("device {s:?} is not a tpu device (expected \"tpu\" or \"tpu:N\")"))),
                }
            }
            other => Err(Error::op(op, format!("device must be an index or a string, not {}", other.type_name()))),
        }
    }
}
