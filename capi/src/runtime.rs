//! The runtime area: creating a runtime, its devices, execution modes,
//! synchronization, statistics and seeding.

use std::ffi::{c_char, CString};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use torchtpu_core::runtime::{MemorySource, MAX_SHAPE_BUCKETS};
use torchtpu_core::{Error, Runtime, RuntimeOptions};

use crate::error::ttpu_error_t;
use crate::kv::{distributed_options, ttpu_kv_store_t};
use crate::ffi::{check_struct_size, out_struct_size, slice_arg, str_arg, write_out, Handle};

/// A runtime: one PJRT plugin and client with its devices. Thread-safe.
/// Created by `ttpu_runtime_create`, freed by `ttpu_runtime_destroy`.
pub struct ttpu_runtime_t {
    magic: u64,
    /// Calls in progress on this handle ([`RuntimeCall`]), plus [`CLOSING`]
    /// once a destroy began: the destroy waits for the count to reach zero,
    /// and calls that start later fail. A call that checked the handle just
    /// before the destroy marked it dead still finds the flag set: the
    /// quarantined shell keeps the field's memory (see `Handle::destroy`).
    calls: AtomicU64,
    pub(crate) rt: Arc<Runtime>,
    devices: Vec<ttpu_device_t>,
    platform_name: CString,
    platform_version: CString,
    plugin_path: CString,
    plugin_source: CString,
}

impl_handle!(ttpu_runtime_t, "ttpu_runtime_t", 0x7474_7075_5255_4e54);

/// The bit of `ttpu_runtime_t::calls` set when a destroy begins.
const CLOSING: u64 = 1 << 63;

/// A call in progress on a runtime handle, from [`ttpu_runtime_t::enter`]
/// until it is dropped. While one lives, `ttpu_runtime_destroy` waits.
pub(crate) struct RuntimeCall<'a> {
    r: &'a ttpu_runtime_t,
}

impl std::ops::Deref for RuntimeCall<'_> {
    type Target = ttpu_runtime_t;
    fn deref(&self) -> &ttpu_runtime_t {
        self.r
    }
}

impl Drop for RuntimeCall<'_> {
    fn drop(&mut self) {
        self.r.calls.fetch_sub(1, Ordering::Release);
    }
}

impl ttpu_runtime_t {
    /// Borrows the runtime behind `ptr` for one call (see [`Handle::borrow`]
    /// for the checks), counted so that a destroy on another thread waits for
    /// it. Once a destroy has begun, fails with INVALID_ARGUMENT.
    pub(crate) unsafe fn enter<'a>(ptr: *const ttpu_runtime_t, what: &str) -> torchtpu_core::Result<RuntimeCall<'a>> {
        let r = Self::borrow(ptr, what)?;
        // The count and the flag share one atomic, so a destroy either sees
        // this call counted or this call sees the flag.
        if r.calls.fetch_add(1, Ordering::Acquire) & CLOSING != 0 {
            r.calls.fetch_sub(1, Ordering::Release);
            return Err(Error::InvalidArgument(format!(
                "{what}: ttpu_runtime_t is being destroyed (ttpu_runtime_destroy was called)"
            )));
        }
        Ok(RuntimeCall { r })
    }

    /// Marks the handle closing and waits until no call is in progress on
    /// it, saying so every 10 s.
    fn wait_for_calls(&self) {
        let mut left = self.calls.fetch_or(CLOSING, Ordering::AcqRel) & !CLOSING;
        let start = std::time::Instant::now();
        let mut said = start;
        let mut pause = std::time::Duration::from_micros(10);
        while left != 0 {
            if said.elapsed() >= std::time::Duration::from_secs(10) {
                tracing::warn!(
                    "ttpu_runtime_destroy: waiting {:.0} s for {left} call(s) in progress on this runtime",
                    start.elapsed().as_secs_f64()
                );
                said = std::time::Instant::now();
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(std::time::Duration::from_millis(5));
            left = self.calls.load(Ordering::Acquire) & !CLOSING;
        }
    }
}

/// A device of a runtime. Borrowed from the runtime: valid while it lives.
pub struct ttpu_device_t {
    magic: u64,
    index: usize,
    id: i32,
    local_hardware_id: i32,
    kind: CString,
    description: CString,
}

impl_handle!(ttpu_device_t, "ttpu_device_t", 0x7474_7075_4445_5643);

fn cstring(s: &str) -> CString {
    CString::new(s.replace('\0', "")).unwrap_or_default()
}

/// Options for `ttpu_runtime_create`. Set `struct_size = sizeof(ttpu_runtime_options_t)`;
/// fields added later go at the end, and a caller built against an older
/// header keeps working.
#[repr(C)]
pub struct ttpu_runtime_options_t {
    pub struct_size: usize,
    /// Path of the PJRT plugin to load, or NULL to search: `$TORCHTPU_PJRT_PLUGIN`,
    /// then the active Python environment, then the system, libtpu before
    /// `xla-cpu-pjrt` in each (see `ttpu_runtime_plugin_path`). Never the
    /// current directory. Borrowed for the call.
    pub plugin_path: *const c_char,
    /// Devices the XLA CPU plugin exposes; 0 keeps the plugin's default.
    pub cpu_device_count: i32,
    // --- version 2 -----------------------------------------------------------
    /// With `kv_store`: this process's index among the `num_nodes` processes
    /// that form one client (PJRT's `node_id` and `num_nodes` create options).
    pub node_id: i32,
    pub num_nodes: i32,
    /// The store a client that spans processes rendezvouses through, or NULL
    /// for a client of this process alone. The struct is copied; its
    /// `user_data` must stay valid until the runtime is destroyed, when its
    /// `release` (if any) is called. Plugins that cannot span processes
    /// (the XLA CPU plugin) ignore the store and the node fields.
    pub kv_store: *const ttpu_kv_store_t,
}

/// Version 1 of `ttpu_runtime_options_t` ended after `cpu_device_count`.
const OPTIONS_V1: usize = std::mem::offset_of!(ttpu_runtime_options_t, cpu_device_count) + 4;
const OPTIONS_V2: usize = std::mem::size_of::<ttpu_runtime_options_t>();

/// Creates a runtime. `options` may be NULL for defaults. On success
/// `*out_runtime` owns the runtime; free it with `ttpu_runtime_destroy`.
#[no_mangle]
pub unsafe extern "C" fn ttpu_runtime_create(
    options: *const ttpu_runtime_options_t,
    out_runtime: *mut *mut ttpu_runtime_t,
) -> *mut ttpu_error_t {
    ffi_boundary!({
        let mut opts = RuntimeOptions::default();
        if !options.is_null() {
            let o = &*options;
            check_struct_size(o.struct_size, OPTIONS_V1, "ttpu_runtime_create: ttpu_runtime_options_t")?;
            // First, so that every later failure releases the store.
            if o.struct_size >= OPTIONS_V2 && !o.kv_store.is_null() {
                opts.distributed = Some(distributed_options(o)?);
            }
            if !o.plugin_path.is_null() {
                opts.plugin = Some(str_arg(o.plugin_path, "ttpu_runtime_create: plugin_path")?.into());
            }
            if o.cpu_device_count < 0 {
                return Err(Error::InvalidArgument(format!(
                    "ttpu_runtime_create: cpu_device_count must be >= 0, got {}",
                    o.cpu_device_count
                )));
            }
            if o.cpu_device_count > 0 {
                opts.cpu_device_count = Some(o.cpu_device_count as usize);
            }
        }
        crate::ffi::check_out(out_runtime, "ttpu_runtime_create")?;
        init_logging();
        let rt = Runtime::new(opts)?;
        let devices = rt
            .devices()
            .iter()
            .map(|d| ttpu_device_t {
                magic: ttpu_device_t::MAGIC,
                index: d.index,
                id: d.id as i32,
                local_hardware_id: d.local_hardware_id as i32,
                kind: cstring(&d.kind),
                description: cstring(&d.description),
            })
            .collect();
        let h = ttpu_runtime_t {
            magic: ttpu_runtime_t::MAGIC,
            calls: AtomicU64::new(0),
            platform_name: cstring(rt.platform_name()),
            platform_version: cstring(rt.platform_version()),
            plugin_path: cstring(&rt.plugin_path().to_string_lossy()),
            plugin_source: cstring(rt.plugin_source()),
            rt,
            devices,
        };
        write_out(out_runtime, "ttpu_runtime_create", h.into_raw())
    })
}

/// Logs go to stderr, filtered by `TORCHTPU_LOG` (e.g. `debug`,
/// `torchtpu_core=trace`); warnings by default.
pub(crate) fn init_logging() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let filter = tracing_subscriber::EnvFilter::try_from_env("TORCHTPU_LOG")
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
        let _ = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).try_init();
    });
}

/// Frees a runtime. First it waits for the calls in progress on it (on
/// other threads), and calls that begin meanwhile fail with INVALID_ARGUMENT;
/// then it flushes the pending graphs, waits for the work launched on it
/// (an error of that work is logged, as there is no caller left to report
/// it to), and stops its streams' workers. Its children stay valid handles:
/// tensors keep their device memory until they are destroyed (their getters
/// still work, but every call that would use them names a runtime, which
/// is gone), a stream's synchronize, query, record and wait fail with
/// FAILED_PRECONDITION, and events and generators can still be read and
/// destroyed. NULL is a no-op. Do not call it from inside a call on the same
/// runtime (a key-value store callback): it would wait for itself.
///
/// Use after destroy is detected: the handle is marked destroyed and kept in
/// a quarantine of the 65536 most recently destroyed handles (of all kinds),
/// so while it is there any use of it fails with INVALID_ARGUMENT
/// ("ttpu_runtime_t was already destroyed") and destroying it again is a
/// no-op. Beyond that bound a use of the pointer is undefined behaviour. The
/// runtime's `ttpu_device_t` pointers are freed with it and are not checked.
#[no_mangle]
pub unsafe extern "C" fn ttpu_runtime_destroy(runtime: *mut ttpu_runtime_t) {
    crate::ffi::no_panic((), || {
        // NULL, a destroyed handle and a foreign pointer are no-ops.
        let Ok(r) = ttpu_runtime_t::borrow(runtime, "ttpu_runtime_destroy") else { return };
        r.wait_for_calls();
        if let Err(e) = r.rt.close() {
            tracing::warn!("ttpu_runtime_destroy: work launched before the destroy failed: {e}");
        }
        ttpu_runtime_t::destroy(runtime);
    });
}

/// The PJRT platform name ("cpu", "tpu", "cuda"). Borrowed: valid while the
/// runtime lives. NULL if `runtime` is invalid.
#[no_mangle]
pub unsafe extern "C" fn ttpu_runtime_platform_name(runtime: *const ttpu_runtime_t) -> *const c_char {
    ttpu_runtime_t::enter(runtime, "ttpu_runtime_platform_name").map_or(std::ptr::null(), |r| r.platform_name.as_ptr())
}

/// The path of the PJRT plugin the runtime loaded. Borrowed: valid while the
/// runtime lives. NULL if `runtime` is invalid. The search order (when
/// `plugin_path` was not given) is: `$TORCHTPU_PJRT_PLUGIN`; the active
/// Python environment (`$VIRTUAL_ENV`, `$CONDA_PREFIX`, the virtualenv of a
/// running Python interpreter), libtpu before xla-cpu-pjrt; then the system
/// (`~/.local`, `/usr/local`, `/usr`). Never the current directory or a path
/// from the build.
#[no_mangle]
pub unsafe extern "C" fn ttpu_runtime_plugin_path(runtime: *const ttpu_runtime_t) -> *const c_char {
    ttpu_runtime_t::enter(runtime, "ttpu_runtime_plugin_path").map_or(std::ptr::null(), |r| r.plugin_path.as_ptr())
}

/// Why that plugin was chosen ("explicit path", "$TORCHTPU_PJRT_PLUGIN",
/// "xla-cpu-pjrt in the Python environment /path/.venv", "libtpu in the
/// system /usr/local"). Borrowed: valid while the runtime lives. NULL if
/// `runtime` is invalid.
#[no_mangle]
pub unsafe extern "C" fn ttpu_runtime_plugin_source(runtime: *const ttpu_runtime_t) -> *const c_char {
    ttpu_runtime_t::enter(runtime, "ttpu_runtime_plugin_source").map_or(std::ptr::null(), |r| r.plugin_source.as_ptr())
}

/// The PJRT platform version. Borrowed: valid while the runtime lives.
#[no_mangle]
pub unsafe extern "C" fn ttpu_runtime_platform_version(runtime: *const ttpu_runtime_t) -> *const c_char {
    ttpu_runtime_t::enter(runtime, "ttpu_runtime_platform_version")
        .map_or(std::ptr::null(), |r| r.platform_version.as_ptr())
}

/// Writes the number of addressable devices to `*out_count`.
#[no_mangle]
pub unsafe extern "C" fn ttpu_runtime_device_count(
    runtime: *const ttpu_runtime_t,
    out_count: *mut usize,
) -> *mut ttpu_error_t {
    ffi_boundary!({
        let r = ttpu_runtime_t::enter(runtime, "ttpu_runtime_device_count")?;
        write_out(out_count, "ttpu_runtime_device_count", r.devices.len())
    })
}

/// The number of devices of the whole PJRT client, including those of other
/// processes (a TPU pod slice); equal to the device count where the client
/// sees only its own process. 0 for a bad runtime.
#[no_mangle]
pub unsafe extern "C" fn ttpu_runtime_global_device_count(runtime: *const ttpu_runtime_t) -> usize {
    crate::ffi::no_panic(0, || ttpu_runtime_t::enter(runtime, "ttpu_runtime_global_device_count").map_or(0, |r| r.rt.global_device_count()))
}

/// Writes device `index` to `*out_device`. The device is borrowed from the
/// runtime (do not free it). Fails with OUT_OF_RANGE for a bad index.
#[no_mangle]
pub unsafe extern "C" fn ttpu_runtime_device(
    runtime: *const ttpu_runtime_t,
    index: i64,
    out_device: *mut *const ttpu_device_t,
) -> *mut ttpu_error_t {
    ffi_boundary!({
        let r = ttpu_runtime_t::enter(runtime, "ttpu_runtime_device")?;
        let i = r.rt.device(index)?;
        write_out(out_device, "ttpu_runtime_device", &r.devices[i] as *const _)
    })
}

/// The device's index in its runtime (what tensors and ops call `device`).
#[no_mangle]
pub unsafe extern "C" fn ttpu_device_index(device: *const ttpu_device_t) -> i64 {
    ttpu_device_t::borrow(device, "ttpu_device_index").map_or(-1, |d| d.index as i64)
}

/// The PJRT device id.
#[no_mangle]
pub unsafe extern "C" fn ttpu_device_id(device: *const ttpu_device_t) -> i32 {
    ttpu_device_t::borrow(device, "ttpu_device_id").map_or(-1, |d| d.id)
}

/// The device's local hardware id.
#[no_mangle]
pub unsafe extern "C" fn ttpu_device_local_hardware_id(device: *const ttpu_device_t) -> i32 {
    ttpu_device_t::borrow(device, "ttpu_device_local_hardware_id").map_or(-1, |d| d.local_hardware_id)
}

/// The device kind ("cpu", "TPU v5 lite"). Borrowed: valid while the runtime lives.
#[no_mangle]
pub unsafe extern "C" fn ttpu_device_kind(device: *const ttpu_device_t) -> *const c_char {
    ttpu_device_t::borrow(device, "ttpu_device_kind").map_or(std::ptr::null(), |d| d.kind.as_ptr())
}

/// A human-readable description. Borrowed: valid while the runtime lives.
#[no_mangle]
pub unsafe extern "C" fn ttpu_device_description(device: *const ttpu_device_t) -> *const c_char {
    ttpu_device_t::borrow(device, "ttpu_device_description").map_or(std::ptr::null(), |d| d.description.as_ptr())
}

/// Bytes of live device buffers on device `index`, and their peak.
#[no_mangle]
pub unsafe extern "C" fn ttpu_runtime_memory(
    runtime: *const ttpu_runtime_t,
    index: i64,
    out_live_bytes: *mut i64,
    out_peak_bytes: *mut i64,
) -> *mut ttpu_error_t {
    ffi_boundary!({
        let r = ttpu_runtime_t::enter(runtime, "ttpu_runtime_memory")?;
        crate::ffi::check_out(out_peak_bytes, "ttpu_runtime_memory")?;
        let (live, peak) = r.rt.memory(r.rt.device(index)?)?;
        write_out(out_live_bytes, "ttpu_runtime_memory", live)?;
        write_out(out_peak_bytes, "ttpu_runtime_memory", peak)
    })
}

/// Waits for all launched work; returns the first error asynchronous work
/// hit since the last synchronize, or an out-of-range index that a pending
/// index check found (`TTPU_CODE_OUT_OF_RANGE`).
#[no_mangle]
pub unsafe extern "C" fn ttpu_runtime_synchronize(runtime: *const ttpu_runtime_t) -> *mut ttpu_error_t {
    ffi_boundary!({ ttpu_runtime_t::enter(runtime, "ttpu_runtime_synchronize")?.rt.synchronize() })
}

/// Shuts `runtime` down before the process exits, so that none of its
/// threads, nor the PJRT plugin's, is running while static destructors run:
/// flushes the pending graphs and waits for all launched work, stops and
/// joins the stream workers, and destroys the PJRT client. Then every call
/// that needs the device fails with `TTPU_CODE_FAILED_PRECONDITION`, while
/// tensors, streams, events and generators can still be destroyed (which
/// frees nothing on the device: that needs the client, so what they hold is
/// kept until the process ends).
/// The handle stays valid and is still freed with `ttpu_runtime_destroy`.
/// A second call does nothing and returns NULL.
///
/// `timeout_ms` bounds the waits; a negative value waits as long as it
/// takes. If work is still running at the deadline (a program that never
/// ends, or calls on other threads), the error is
/// `TTPU_CODE_DEADLINE_EXCEEDED` and the PJRT client is left alive, so the
/// process can still exit as it would have without this call. Otherwise the
/// runtime is shut down even when the work it waited for failed, and that
/// failure is returned (as `ttpu_runtime_synchronize` would return it).
/// Call it from no stream's work and with no other call on this runtime in
/// progress on the calling thread.
#[no_mangle]
pub unsafe extern "C" fn ttpu_runtime_shutdown(runtime: *const ttpu_runtime_t, timeout_ms: i64) -> *mut ttpu_error_t {
    ffi_boundary!({
        let r = ttpu_runtime_t::enter(runtime, "ttpu_runtime_shutdown")?;
        let timeout = u64::try_from(timeout_ms).ok().map(std::time::Duration::from_millis);
        r.rt.shutdown(timeout)
    })
}

/// Turns the device-side index checks on (`enabled = true`, the default
/// unless `TORCHTPU_INDEX_CHECKS=0`) or off. With them on, an out-of-range
/// index in an indexing op (embedding, gather, scatter, index, index_put,
/// take, index_select, index_add, nll_loss targets) is reported as a
/// `TTPU_CODE_OUT_OF_RANGE` error naming the op, the index and the valid
/// range: by the next `ttpu_tensor_to_host` or `ttpu_runtime_synchronize`,
/// or by the op's own call in `DEFER_NEVER_AND_LAUNCH_BLOCKING` mode. With
/// them off, reads clamp such indices and writes drop them, silently. The
/// setting is part of every program's cache key; checks already pending
/// are still reported.
#[no_mangle]
pub unsafe extern "C" fn ttpu_runtime_set_index_checks(runtime: *const ttpu_runtime_t, enabled: bool) -> *mut ttpu_error_t {
    ffi_boundary!({
        ttpu_runtime_t::enter(runtime, "ttpu_runtime_set_index_checks")?.rt.set_index_checks(enabled);
        Ok(())
    })
}

/// Writes whether the device-side index checks are on to `*out_enabled`.
#[no_mangle]
pub unsafe extern "C" fn ttpu_runtime_index_checks(runtime: *const ttpu_runtime_t, out_enabled: *mut bool) -> *mut ttpu_error_t {
    ffi_boundary!({
        let r = ttpu_runtime_t::enter(runtime, "ttpu_runtime_index_checks")?;
        write_out(out_enabled, "ttpu_runtime_index_checks", r.rt.index_checks())
    })
}

/// Sets the lengths a growing dim is padded to, `count` lengths, each
/// positive and larger than the one before (at most 256). A tensor that
/// grows by concatenation along a dim (the ids `generate()` appends to) is
/// written into a storage with room for the first listed length that holds
/// it, past the last (or with `count = 0`, the default) the next power of
/// two, so the programs that grow it and read small views of it compile once
/// per bucket, not once per length. Tensors grown before keep their
/// storage. Since API 1.9.
#[no_mangle]
pub unsafe extern "C" fn ttpu_runtime_set_shape_buckets(
    runtime: *const ttpu_runtime_t,
    lengths: *const i64,
    count: usize,
) -> *mut ttpu_error_t {
    ffi_boundary!({
        let r = ttpu_runtime_t::enter(runtime, "ttpu_runtime_set_shape_buckets")?;
        // Bounded before the slice is made: a wild count must not become a
        // slice past the caller's memory.
        if count > MAX_SHAPE_BUCKETS {
            return Err(Error::InvalidArgument(format!(
                "ttpu_runtime_set_shape_buckets: {count} bucket lengths, at most {MAX_SHAPE_BUCKETS}"
            )));
        }
        let lengths = slice_arg(lengths, count, "ttpu_runtime_set_shape_buckets")?;
        r.rt.set_shape_buckets(lengths)
    })
}

/// Writes to `*out_bucket` the bucket a dim of `length` is padded to: the
/// first length given to `ttpu_runtime_set_shape_buckets` that holds it,
/// else the next power of two. `length` must be positive. Since API 1.10.
#[no_mangle]
pub unsafe extern "C" fn ttpu_runtime_shape_bucket(
    runtime: *const ttpu_runtime_t,
    length: i64,
    out_bucket: *mut i64,
) -> *mut ttpu_error_t {
    ffi_boundary!({
        let r = ttpu_runtime_t::enter(runtime, "ttpu_runtime_shape_bucket")?;
        let bucket = r.rt.shape_bucket(length)?;
        write_out(out_bucket, "ttpu_runtime_shape_bucket", bucket)
    })
}

/// Seeds every device's default random generator (like `torch.manual_seed`);
/// generators made with `ttpu_generator_create` keep their state.
#[no_mangle]
pub unsafe extern "C" fn ttpu_runtime_manual_seed(runtime: *const ttpu_runtime_t, seed: u64) -> *mut ttpu_error_t {
    ffi_boundary!({
        ttpu_runtime_t::enter(runtime, "ttpu_runtime_manual_seed")?.rt.manual_seed(seed);
        Ok(())
    })
}

/// Writes device `index`'s default random generator state to `*out_seed`
/// and `*out_calls` (the random ops drawn since seeding).
#[no_mangle]
pub unsafe extern "C" fn ttpu_runtime_rng_state(
    runtime: *const ttpu_runtime_t,
    index: i64,
    out_seed: *mut u64,
    out_calls: *mut u64,
) -> *mut ttpu_error_t {
    ffi_boundary!({
        let r = ttpu_runtime_t::enter(runtime, "ttpu_runtime_rng_state")?;
        crate::ffi::check_out(out_calls, "ttpu_runtime_rng_state")?;
        let (seed, calls) = r.rt.rng_state(r.rt.device(index)?)?;
        write_out(out_seed, "ttpu_runtime_rng_state", seed)?;
        write_out(out_calls, "ttpu_runtime_rng_state", calls)
    })
}

/// Restores device `index`'s default random generator to a state read with
/// `ttpu_runtime_rng_state`: the random ops that follow repeat.
#[no_mangle]
pub unsafe extern "C" fn ttpu_runtime_set_rng_state(
    runtime: *const ttpu_runtime_t,
    index: i64,
    seed: u64,
    calls: u64,
) -> *mut ttpu_error_t {
    ffi_boundary!({
        let r = ttpu_runtime_t::enter(runtime, "ttpu_runtime_set_rng_state")?;
        r.rt.set_rng_state(r.rt.device(index)?, seed, calls)
    })
}

/// Resets the peak that `ttpu_runtime_memory` reports for device `index` to
/// the bytes live now.
#[no_mangle]
pub unsafe extern "C" fn ttpu_runtime_reset_peak_memory(runtime: *const ttpu_runtime_t, index: i64) -> *mut ttpu_error_t {
    ffi_boundary!({
        let r = ttpu_runtime_t::enter(runtime, "ttpu_runtime_reset_peak_memory")?;
        r.rt.reset_peak_memory(r.rt.device(index)?)
    })
}

/// The memory accounting of one device, as PyTorch's allocators keep it.
/// Set `struct_size` before calling; fields added later go at the end.
///
/// The runtime counts every live device buffer at the logical size of its
/// contents (elements times element size): what tensors hold. The plugin
/// may pad or tile buffers, and keeps a freed buffer's memory until the
/// programs already launched with it finish; `ttpu_runtime_memory_info`
/// says what the device itself has. "Allocated" and "freed" count since
/// the runtime started or the last `ttpu_runtime_reset_accumulated_memory`;
/// peaks since then or the last `ttpu_runtime_reset_peak_memory`.
#[repr(C)]
#[derive(Default)]
pub struct ttpu_memory_stats_t {
    pub struct_size: usize,
    /// Bytes of live buffers now (what `ttpu_runtime_memory` reports).
    pub live_bytes: i64,
    pub peak_bytes: i64,
    pub allocated_bytes: i64,
    pub freed_bytes: i64,
    /// Live buffers now; each is one PJRT allocation.
    pub live_buffers: i64,
    pub peak_buffers: i64,
    pub allocated_buffers: i64,
    pub freed_buffers: i64,
    /// Buffer creations and program launches the plugin refused with
    /// RESOURCE_EXHAUSTED.
    pub num_ooms: i64,
}
crate::ffi::v1_ends_at!(ttpu_memory_stats_t, num_ooms: i64);

/// Fills `*out_stats` (whose `struct_size` the caller sets) with device
/// `index`'s memory accounting, read in one consistent snapshot.
#[no_mangle]
pub unsafe extern "C" fn ttpu_runtime_memory_stats(
    runtime: *const ttpu_runtime_t,
    index: i64,
    out_stats: *mut ttpu_memory_stats_t,
) -> *mut ttpu_error_t {
    ffi_boundary!({
        let r = ttpu_runtime_t::enter(runtime, "ttpu_runtime_memory_stats")?;
        let size = out_struct_size(out_stats, "ttpu_runtime_memory_stats")?;
        let s = r.rt.memory_stats(r.rt.device(index)?)?;
        crate::ffi::write_fitting(out_stats, ttpu_memory_stats_t {
            struct_size: size,
            live_bytes: s.bytes.current,
            peak_bytes: s.bytes.peak,
            allocated_bytes: s.bytes.allocated,
            freed_bytes: s.bytes.freed,
            live_buffers: s.buffers.current,
            peak_buffers: s.buffers.peak,
            allocated_buffers: s.buffers.allocated,
            freed_buffers: s.buffers.freed,
            num_ooms: s.num_ooms,
        }, size);
        Ok(())
    })
}

/// Zeroes device `index`'s cumulative memory totals (allocated and freed
/// bytes and buffers, OOMs); live counts and peaks stay.
#[no_mangle]
pub unsafe extern "C" fn ttpu_runtime_reset_accumulated_memory(
    runtime: *const ttpu_runtime_t,
    index: i64,
) -> *mut ttpu_error_t {
    ffi_boundary!({
        let r = ttpu_runtime_t::enter(runtime, "ttpu_runtime_reset_accumulated_memory")?;
        r.rt.reset_accumulated_memory(r.rt.device(index)?)
    })
}

/// Where the numbers of `ttpu_memory_info_t` come from.
#[repr(i32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ttpu_memory_source {
    /// The PJRT plugin (`PJRT_Device_MemoryStats`): total is its
    /// `bytes_limit`, free that minus its `bytes_in_use`. libtpu and the
    /// CUDA plugin report these.
    Plugin = 0,
    /// The host (the XLA CPU plugin, whose devices are host memory and which
    /// reports no limit): total is /proc/meminfo's MemTotal, free its
    /// MemAvailable, each lowered to the limit (and remaining room) of every
    /// cgroup the process is in. All CPU devices share it.
    Host = 1,
}

/// A device's memory, like `cudaMemGetInfo`. Set `struct_size` before
/// calling; fields added later go at the end.
#[repr(C)]
#[derive(Default)]
pub struct ttpu_memory_info_t {
    pub struct_size: usize,
    /// Bytes the device has for buffers.
    pub total_bytes: i64,
    /// Bytes free now, for every user of the device (not only this runtime).
    pub free_bytes: i64,
    /// A `ttpu_memory_source` value.
    pub source: i32,
}
crate::ffi::v1_ends_at!(ttpu_memory_info_t, source: i32);

/// Fills `*out_info` (whose `struct_size` the caller sets) with device
/// `index`'s total and free memory. UNIMPLEMENTED for a plugin other than
/// the CPU one that reports no memory limit.
#[no_mangle]
pub unsafe extern "C" fn ttpu_runtime_memory_info(
    runtime: *const ttpu_runtime_t,
    index: i64,
    out_info: *mut ttpu_memory_info_t,
) -> *mut ttpu_error_t {
    ffi_boundary!({
        let r = ttpu_runtime_t::enter(runtime, "ttpu_runtime_memory_info")?;
        let size = out_struct_size(out_info, "ttpu_runtime_memory_info")?;
        let m = r.rt.memory_info(r.rt.device(index)?)?;
        let source = match m.source {
            MemorySource::Plugin => ttpu_memory_source::Plugin,
            MemorySource::Host => ttpu_memory_source::Host,
        };
        crate::ffi::write_fitting(out_info, ttpu_memory_info_t { struct_size: size, total_bytes: m.total, free_bytes: m.free, source: source as i32 }, size);
        Ok(())
    })
}

/// Drops every cached executable, in memory and in the on-disk cache.
#[no_mangle]
pub unsafe extern "C" fn ttpu_runtime_clear_cache(runtime: *const ttpu_runtime_t) -> *mut ttpu_error_t {
    ffi_boundary!({
        ttpu_runtime_t::enter(runtime, "ttpu_runtime_clear_cache")?.rt.clear_cache()
    })
}

/// Runtime counters. Set `struct_size` before calling; fields beyond it are
/// not written, so older callers keep working.
#[repr(C)]
#[derive(Default)]
pub struct ttpu_stats_t {
    pub struct_size: usize,
    /// Programs compiled.
    pub compiles: u64,
    /// Nanoseconds spent compiling.
    pub compile_ns: u64,
    pub cache_hits: u64,
    pub cache_misses: u64,
    /// Programs launched.
    pub executions: u64,
    /// Ops served as views (no program).
    pub view_ops: u64,
    /// Executables in the op cache.
    pub cached_programs: u64,
}
crate::ffi::v1_ends_at!(ttpu_stats_t, cached_programs: u64);

/// Fills `*out_stats` (whose `struct_size` the caller sets).
#[no_mangle]
pub unsafe extern "C" fn ttpu_runtime_stats(
    runtime: *const ttpu_runtime_t,
    out_stats: *mut ttpu_stats_t,
) -> *mut ttpu_error_t {
    ffi_boundary!({
        let r = ttpu_runtime_t::enter(runtime, "ttpu_runtime_stats")?;
        let size = out_struct_size(out_stats, "ttpu_runtime_stats")?;
        let s = r.rt.stats();
        let v = ttpu_stats_t {
            struct_size: size,
            compiles: s.compiles,
            compile_ns: s.compile_ns,
            cache_hits: s.cache_hits,
            cache_misses: s.cache_misses,
            executions: s.executions,
            view_ops: s.view_ops,
            cached_programs: s.cached_programs,
        };
        crate::ffi::write_fitting(out_stats, v, size);
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{ttpu_error_code, ttpu_error_destroy, ttpu_error_message};
    use std::ffi::CStr;
    use std::ptr::{null, null_mut};
    use std::sync::atomic::AtomicBool;
    use std::time::Duration;

    unsafe fn message(e: *mut ttpu_error_t) -> (i32, String) {
        assert!(!e.is_null(), "expected an error");
        let r = (ttpu_error_code(e) as i32, CStr::from_ptr(ttpu_error_message(e)).to_string_lossy().into_owned());
        ttpu_error_destroy(e);
        r
    }

    /// The handle's pointer, movable to another thread.
    #[derive(Clone, Copy)]
    struct Ptr(*mut ttpu_runtime_t);
    unsafe impl Send for Ptr {}

    /// A destroy waits for a call in progress (held open here as the gate a
    /// call holds), refuses calls that start meanwhile, and finishes once
    /// the call ends.
    #[test]
    fn destroy_waits_for_the_calls_in_progress() {
        unsafe {
            let mut rt = null_mut();
            assert!(ttpu_runtime_create(null(), &mut rt).is_null());
            let p = Ptr(rt);
            let call = ttpu_runtime_t::enter(rt, "test").unwrap();
            let destroyed = Arc::new(AtomicBool::new(false));
            let destroyer = std::thread::spawn({
                let destroyed = destroyed.clone();
                move || {
                    let p = p;
                    ttpu_runtime_destroy(p.0);
                    destroyed.store(true, Ordering::SeqCst);
                }
            });
            // The destroy has begun (the flag is set) but waits for the call.
            while (*rt).calls.load(Ordering::SeqCst) & CLOSING == 0 {
                std::thread::sleep(Duration::from_millis(1));
            }
            std::thread::sleep(Duration::from_millis(200));
            assert!(!destroyed.load(Ordering::SeqCst), "the destroy returned while a call was in progress");
            // The call in progress still works; a new one is refused.
            assert!(call.rt.device_count() > 0);
            let (code, msg) = message(ttpu_runtime_synchronize(rt));
            assert!(code == 3 && msg.contains("being destroyed"), "{msg}");
            drop(call);
            destroyer.join().unwrap();
            assert!(destroyed.load(Ordering::SeqCst));
            let (code, msg) = message(ttpu_runtime_synchronize(rt));
            assert!(code == 3 && msg.contains("already destroyed"), "{msg}");
            ttpu_runtime_destroy(rt); // a no-op
        }
    }
}
