//! The trace area: the runtime's timed spans (op, record, flush, compile,
//! execute, transfer, collective), as a Chrome trace file or span by span
//! for a frontend's profiler. Process-wide, like the recorder in core
//! (`torchtpu_core::trace`): spans of every runtime land in one timeline.
//!
//! `TORCHTPU_TRACE=file.json` traces the whole process with no code at all;
//! these calls are for tools that trace a window of it. Since API 1.4.

use std::ffi::c_char;
use std::path::Path;

use torchtpu_core::trace::{self, Span};

use crate::error::ttpu_error_t;
use crate::ffi::{out_struct_size, str_arg, write_out, Handle};

/// What a span measures (`ttpu_trace_span_t.category`).
#[repr(i32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ttpu_trace_category {
    /// A strict-mode op call on the host (binding, cache lookup, launch).
    Op = 0,
    /// A fused-mode op call, recorded into the pending graph.
    Record = 1,
    /// A pending graph turned into one program and launched.
    Flush = 2,
    /// A program compiled (or loaded from the disk cache) by the PJRT plugin.
    Compile = 3,
    /// A program on a device, from its launch to its completion.
    Execute = 4,
    /// A copy between host and device, or between devices.
    Transfer = 5,
    /// A collective across devices.
    Collective = 6,
}

// The C enum is core's category, value for value.
const _: () = {
    use trace::Category as C;
    use ttpu_trace_category as T;
    assert!(C::Op as i32 == T::Op as i32 && C::Record as i32 == T::Record as i32 && C::Flush as i32 == T::Flush as i32);
    assert!(C::Compile as i32 == T::Compile as i32 && C::Execute as i32 == T::Execute as i32);
    assert!(C::Transfer as i32 == T::Transfer as i32 && C::Collective as i32 == T::Collective as i32);
};

/// One span, as `ttpu_trace_get` writes it. Set `struct_size` to
/// `sizeof(ttpu_trace_span_t)`. The strings are borrowed from the
/// `ttpu_trace_t` and valid until it is destroyed; they are not
/// NUL-terminated (use the lengths).
#[repr(C)]
pub struct ttpu_trace_span_t {
    pub struct_size: usize,
    /// A `ttpu_trace_category`.
    pub category: i32,
    /// What ran: an op ("aten::add.Tensor"), a program, a transfer direction.
    pub name: *const c_char,
    pub name_len: usize,
    /// Start in nanoseconds since the Unix epoch, and duration.
    pub start_ns: u64,
    pub duration_ns: u64,
    /// The host thread that recorded it (its OS thread id).
    pub thread: u64,
    /// The device it ran on, or -1.
    pub device: i64,
    /// More about it ("3 ops, host read", "1.5 KiB"); may be empty.
    pub detail: *const c_char,
    pub detail_len: usize,
}
crate::ffi::v1_ends_at!(ttpu_trace_span_t, detail_len: usize);

/// A snapshot of recorded spans (`ttpu_trace_read`).
pub struct ttpu_trace_t {
    magic: u64,
    spans: Vec<Span>,
    next: u64,
}

impl_handle!(ttpu_trace_t, "ttpu_trace_t", 0x7474_7075_5452_4345);

/// Turns span recording on for the whole process and returns a cursor (the
/// position of the next span) to read from later. Calls nest: recording
/// stays on until as many `ttpu_trace_stop` calls. While off, a span costs
/// one atomic load.
#[no_mangle]
pub extern "C" fn ttpu_trace_start() -> u64 {
    crate::ffi::no_panic(0, || {
        trace::start();
        trace::cursor()
    })
}

/// Undoes one `ttpu_trace_start` (extra calls do nothing). Spans already
/// recorded stay readable.
#[no_mangle]
pub extern "C" fn ttpu_trace_stop() {
    crate::ffi::no_panic((), trace::stop)
}

/// Whether spans are being recorded (by any `ttpu_trace_start`, or by
/// `TORCHTPU_TRACE`).
#[no_mangle]
pub extern "C" fn ttpu_trace_enabled() -> bool {
    crate::ffi::no_panic(false, trace::enabled)
}

/// The cursor after the last recorded span.
#[no_mangle]
pub extern "C" fn ttpu_trace_cursor() -> u64 {
    crate::ffi::no_panic(0, trace::cursor)
}

/// Spans dropped since the process started because the recorder was full
/// (it keeps the newest 1,048,576).
#[no_mangle]
pub extern "C" fn ttpu_trace_dropped() -> u64 {
    crate::ffi::no_panic(0, trace::dropped)
}

/// Writes the spans recorded from `since` (a cursor; 0 for all kept) to
/// `path` as a Chrome trace (JSON, for chrome://tracing or Perfetto), and
/// their number to `*out_count` (may be NULL). The file appears whole or not
/// at all.
#[no_mangle]
pub unsafe extern "C" fn ttpu_trace_write(path: *const c_char, since: u64, out_count: *mut usize) -> *mut ttpu_error_t {
    ffi_boundary!({
        let path = str_arg(path, "ttpu_trace_write: path")?;
        let n = trace::write_chrome(Path::new(path), since)?;
        if !out_count.is_null() {
            write_out(out_count, "ttpu_trace_write", n)?;
        }
        Ok(())
    })
}

/// Takes a snapshot of the spans recorded from `since` (a cursor) into
/// `*out_trace`, which the caller frees with `ttpu_trace_destroy`.
#[no_mangle]
pub unsafe extern "C" fn ttpu_trace_read(since: u64, out_trace: *mut *mut ttpu_trace_t) -> *mut ttpu_error_t {
    ffi_boundary!({
        crate::ffi::check_out(out_trace, "ttpu_trace_read")?;
        let (spans, next) = trace::spans_since(since);
        write_out(out_trace, "ttpu_trace_read", ttpu_trace_t { magic: ttpu_trace_t::MAGIC, spans, next }.into_raw())
    })
}

/// The number of spans in a snapshot; 0 for an invalid handle.
#[no_mangle]
pub unsafe extern "C" fn ttpu_trace_count(t: *const ttpu_trace_t) -> usize {
    crate::ffi::no_panic(0, || ttpu_trace_t::borrow(t, "ttpu_trace_count").map_or(0, |t| t.spans.len()))
}

/// The cursor after a snapshot's last span: where the next read starts.
/// 0 for an invalid handle.
#[no_mangle]
pub unsafe extern "C" fn ttpu_trace_next(t: *const ttpu_trace_t) -> u64 {
    crate::ffi::no_panic(0, || ttpu_trace_t::borrow(t, "ttpu_trace_next").map_or(0, |t| t.next))
}

/// Writes span `index` (< `ttpu_trace_count`) of a snapshot to `*out_span`.
#[no_mangle]
pub unsafe extern "C" fn ttpu_trace_get(
    t: *const ttpu_trace_t,
    index: usize,
    out_span: *mut ttpu_trace_span_t,
) -> *mut ttpu_error_t {
    ffi_boundary!({
        let t = ttpu_trace_t::borrow(t, "ttpu_trace_get")?;
        let size = out_struct_size(out_span, "ttpu_trace_get")?;
        let s = t.spans.get(index).ok_or_else(|| {
            torchtpu_core::Error::InvalidArgument(format!("ttpu_trace_get: index {index} >= span count {}", t.spans.len()))
        })?;
        crate::ffi::write_fitting(out_span, ttpu_trace_span_t {
            struct_size: size,
            category: s.category as i32,
            name: s.name.as_ptr() as *const c_char,
            name_len: s.name.len(),
            start_ns: s.start_ns,
            duration_ns: s.duration_ns,
            thread: s.thread,
            device: s.device.map_or(-1, |d| d as i64),
            detail: s.detail.as_ptr() as *const c_char,
            detail_len: s.detail.len(),
        }, size);
        Ok(())
    })
}

/// Frees a snapshot (its strings with it). NULL and a destroyed handle are
/// no-ops.
#[no_mangle]
pub unsafe extern "C" fn ttpu_trace_destroy(t: *mut ttpu_trace_t) {
    crate::ffi::no_panic((), || ttpu_trace_t::destroy(t))
}
