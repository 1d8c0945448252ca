//! The fusion area: flushing `DEFER_AND_FUSE` graphs, choosing the fusion
//! policy, the program cache, and the statistics and explanations that say
//! what was compiled and why.

use std::ffi::c_char;

use torchtpu_core::graph::FlushReason;
use torchtpu_core::Error;

use crate::error::ttpu_error_t;
use crate::ffi::{check_out, out_struct_size, str_arg, write_out};
use crate::runtime::ttpu_runtime_t;

/// Why a pending graph was flushed.
#[repr(i32)]
#[derive(Debug, Clone, Copy)]
pub enum ttpu_flush_reason {
    HostRead = 0,
    Synchronize = 1,
    Explicit = 2,
    Collective = 3,
    GraphSizeLimit = 4,
    Policy = 5,
    StrictOp = 6,
    CrossDevice = 7,
}

/// Number of flush reasons (the length of `ttpu_fusion_stats_t.flushes`).
pub const TTPU_FLUSH_REASON_COUNT: usize = 8;

/// The name of a flush reason ("host_read", ...), static storage; NULL for
/// an unknown value.
#[no_mangle]
pub extern "C" fn ttpu_flush_reason_name(reason: i32) -> *const c_char {
    static NAMES: std::sync::OnceLock<Vec<std::ffi::CString>> = std::sync::OnceLock::new();
    let names = NAMES.get_or_init(|| {
        FlushReason::ALL.iter().map(|r| std::ffi::CString::new(r.name()).expect("names have no NUL")).collect()
    });
    usize::try_from(reason).ok().and_then(|i| names.get(i)).map_or(std::ptr::null(), |n| n.as_ptr())
}

/// Flushes the pending graph of every device (reason EXPLICIT). Returns the
/// error of a flush that failed (its values are then lost: reading them
/// reports the same error).
#[no_mangle]
pub unsafe extern "C" fn ttpu_runtime_flush(runtime: *const ttpu_runtime_t) -> *mut ttpu_error_t {
    ffi_boundary!({ ttpu_runtime_t::enter(runtime, "ttpu_runtime_flush")?.rt.flush(FlushReason::Explicit) })
}

/// Writes the number of ops pending in device `index`'s graph.
#[no_mangle]
pub unsafe extern "C" fn ttpu_runtime_pending_ops(
    runtime: *const ttpu_runtime_t,
    index: i64,
    out_count: *mut usize,
) -> *mut ttpu_error_t {
    ffi_boundary!({
        let r = ttpu_runtime_t::enter(runtime, "ttpu_runtime_pending_ops")?;
        let d = r.rt.device(index)?;
        write_out(out_count, "ttpu_runtime_pending_ops", r.rt.pending_ops(d))
    })
}

/// Selects the fusion policy by name: "fuse_loops" (the default: fuse up to
/// the next flush trigger, but cut a trace whose last 512 ops repeat a loop
/// body into equal runs of bodies, each one reused program), "fuse_all"
/// (fuse up to the next flush trigger), "loop_cut" (cut at the boundary of a repeated
/// loop body, so each training step runs one cached program), or a loaded
/// plugin's "<plugin>::<policy>", optionally followed by "?<config>" for the
/// plugin (e.g. "byte_budget::byte_budget?max_bytes=65536"). An unknown name
/// is INVALID_ARGUMENT and lists the available policies.
#[no_mangle]
pub unsafe extern "C" fn ttpu_runtime_set_fusion_policy(
    runtime: *const ttpu_runtime_t,
    name: *const c_char,
) -> *mut ttpu_error_t {
    ffi_boundary!({
        let r = ttpu_runtime_t::enter(runtime, "ttpu_runtime_set_fusion_policy")?;
        let name = str_arg(name, "ttpu_runtime_set_fusion_policy: name")?;
        r.rt.select_fusion_policy(name)
    })
}

/// Flushes a pending graph when it reaches `max_ops` ops (reason
/// GRAPH_SIZE_LIMIT). 0 is invalid.
#[no_mangle]
pub unsafe extern "C" fn ttpu_runtime_set_fusion_max_ops(runtime: *const ttpu_runtime_t, max_ops: usize) -> *mut ttpu_error_t {
    ffi_boundary!({
        let r = ttpu_runtime_t::enter(runtime, "ttpu_runtime_set_fusion_max_ops")?;
        if max_ops == 0 {
            return Err(Error::InvalidArgument("ttpu_runtime_set_fusion_max_ops: max_ops must be at least 1".into()));
        }
        r.rt.set_fusion_max_ops(max_ops);
        Ok(())
    })
}

/// Turns the program cache on or off (off: every strict-mode op and every
/// flush compiles).
#[no_mangle]
pub unsafe extern "C" fn ttpu_runtime_set_cache_enabled(runtime: *const ttpu_runtime_t, enabled: bool) -> *mut ttpu_error_t {
    ffi_boundary!({
        ttpu_runtime_t::enter(runtime, "ttpu_runtime_set_cache_enabled")?.rt.program_cache().set_enabled(enabled);
        Ok(())
    })
}

/// Fused-mode counters. Set `struct_size` before calling.
#[repr(C)]
pub struct ttpu_fusion_stats_t {
    pub struct_size: usize,
    /// Ops recorded into pending graphs.
    pub recorded_ops: u64,
    /// Fused programs executed.
    pub fused_programs: u64,
    /// Flushes by `ttpu_flush_reason`.
    pub flushes: [u64; TTPU_FLUSH_REASON_COUNT],
    /// Program cache: hits in memory, hits on disk, misses.
    pub memory_hits: u64,
    pub disk_hits: u64,
    pub misses: u64,
    /// Programs compiled by the cache, and the time spent.
    pub compiles: u64,
    pub compile_ns: u64,
    /// Cache files found corrupted (each reported once, deleted, recompiled).
    pub corrupt_files: u64,
    pub evictions: u64,
}
crate::ffi::v1_ends_at!(ttpu_fusion_stats_t, evictions: u64);

/// Fills `*out_stats` (whose `struct_size` the caller sets).
#[no_mangle]
pub unsafe extern "C" fn ttpu_runtime_fusion_stats(
    runtime: *const ttpu_runtime_t,
    out_stats: *mut ttpu_fusion_stats_t,
) -> *mut ttpu_error_t {
    ffi_boundary!({
        let r = ttpu_runtime_t::enter(runtime, "ttpu_runtime_fusion_stats")?;
        let size = out_struct_size(out_stats, "ttpu_runtime_fusion_stats")?;
        let s = r.rt.stats();
        let c = r.rt.program_cache().stats();
        crate::ffi::write_fitting(out_stats, ttpu_fusion_stats_t {
            struct_size: size,
            recorded_ops: s.recorded_ops,
            fused_programs: s.fused_programs,
            flushes: s.flushes,
            memory_hits: c.memory_hits,
            disk_hits: c.disk_hits,
            misses: c.misses,
            compiles: c.compiles,
            compile_ns: c.compile_ns,
            corrupt_files: c.corrupt_files,
            evictions: c.evictions,
        }, size);
        Ok(())
    })
}

/// What the last flush did.
#[repr(C)]
pub struct ttpu_flush_info_t {
    pub struct_size: usize,
    /// A `ttpu_flush_reason`.
    pub reason: i32,
    pub device: i64,
    /// Ops recorded since the previous flush.
    pub recorded: u64,
    /// Ops in the program after merging duplicates and dropping dead ones.
    pub lowered: u64,
    /// Values the program returned (live tensors).
    pub outputs: u64,
    /// Where the executable came from: 0 nothing ran (no live value), 1 the
    /// memory cache, 2 the disk cache, 3 compiled.
    pub source: i32,
}
crate::ffi::v1_ends_at!(ttpu_flush_info_t, source: i32);

/// Fills `*out_info` with the last flush; NOT_FOUND if nothing was flushed yet.
#[no_mangle]
pub unsafe extern "C" fn ttpu_runtime_last_flush(
    runtime: *const ttpu_runtime_t,
    out_info: *mut ttpu_flush_info_t,
) -> *mut ttpu_error_t {
    ffi_boundary!({
        let r = ttpu_runtime_t::enter(runtime, "ttpu_runtime_last_flush")?;
        let size = out_struct_size(out_info, "ttpu_runtime_last_flush")?;
        let f = r.rt.last_flush().ok_or_else(|| Error::NotFound("no flush has happened yet".into()))?;
        crate::ffi::write_fitting(out_info, ttpu_flush_info_t {
            struct_size: size,
            reason: f.reason as i32,
            device: f.device as i64,
            recorded: f.recorded as u64,
            lowered: f.lowered as u64,
            outputs: f.outputs as u64,
            source: match f.tier {
                None => 0,
                Some("memory") => 1,
                Some("disk") => 2,
                Some(_) => 3,
            },
        }, size);
        Ok(())
    })
}

/// Copies the explanation of the last cache miss ("nearest cached graph
/// differs at node 3 (aten::mm): input 0 shape [8, 32] vs [8, 16]") into
/// `buf` (NUL-terminated, truncated to `capacity`), and writes its full
/// length (without the NUL) to `*out_len`. NOT_FOUND if there was no miss.
#[no_mangle]
pub unsafe extern "C" fn ttpu_runtime_last_miss_explanation(
    runtime: *const ttpu_runtime_t,
    buf: *mut c_char,
    capacity: usize,
    out_len: *mut usize,
) -> *mut ttpu_error_t {
    ffi_boundary!({
        let r = ttpu_runtime_t::enter(runtime, "ttpu_runtime_last_miss_explanation")?;
        check_out(out_len, "ttpu_runtime_last_miss_explanation")?;
        let msg = r
            .rt
            .program_cache()
            .last_miss_explanation()
            .ok_or_else(|| Error::NotFound("no program has missed the cache yet".into()))?;
        if capacity > 0 {
            if buf.is_null() {
                return Err(Error::InvalidArgument("ttpu_runtime_last_miss_explanation: buf is NULL".into()));
            }
            let n = msg.len().min(capacity - 1);
            std::ptr::copy_nonoverlapping(msg.as_ptr(), buf as *mut u8, n);
            *buf.add(n) = 0;
        }
        write_out(out_len, "ttpu_runtime_last_miss_explanation", msg.len())
    })
}
