//! The stream area: streams (ordered queues of work per device) and events
//! (points recorded on a stream that the host or another stream can wait on).
//!
//! Both handles are owned by the caller and freed with their `_destroy`. A
//! handle is a reference to a shared object: two handles may name the same
//! stream (`ttpu_stream_default` twice), and destroying one leaves the other
//! valid. Both are thread-safe.
//!
//! Errors from asynchronous work on a stream arrive at the next
//! `ttpu_stream_synchronize` (once), and on every event recorded after the
//! work that failed (`ttpu_event_synchronize`).
//!
//! Once the stream's runtime is shut down or destroyed, the stream's
//! synchronize, query, wait and the recording of an event on it fail with
//! FAILED_PRECONDITION; the handle is still destroyed as usual.

use torchtpu_core::runtime::{Stream, StreamEvent};
use torchtpu_core::Error;

use crate::error::ttpu_error_t;
use crate::ffi::{check_out, write_out, Handle};
use crate::runtime::ttpu_runtime_t;

/// A stream handle. Owned by the caller; free with `ttpu_stream_destroy`.
pub struct ttpu_stream_t {
    magic: u64,
    s: Stream,
}

impl_handle!(ttpu_stream_t, "ttpu_stream_t", 0x7474_7075_5354_524d);

impl ttpu_stream_t {
    fn new(s: Stream) -> *mut ttpu_stream_t {
        ttpu_stream_t { magic: Self::MAGIC, s }.into_raw()
    }
}

/// An event handle. Owned by the caller; free with `ttpu_event_destroy`.
pub struct ttpu_event_t {
    magic: u64,
    e: StreamEvent,
}

impl_handle!(ttpu_event_t, "ttpu_event_t", 0x7474_7075_4556_4e54);

/// Creates a new stream on device `device` of `runtime`. On success
/// `*out_stream` owns a handle; free it with `ttpu_stream_destroy`. The stream
/// does not borrow the runtime, but is meant for use with it. Fails with
/// OUT_OF_RANGE for a bad device.
#[no_mangle]
pub unsafe extern "C" fn ttpu_stream_create(
    runtime: *const ttpu_runtime_t,
    device: i64,
    out_stream: *mut *mut ttpu_stream_t,
) -> *mut ttpu_error_t {
    ffi_boundary!({
        let what = "ttpu_stream_create";
        let r = ttpu_runtime_t::enter(runtime, what)?;
        check_out(out_stream, what)?;
        let d = r.rt.device(device)?;
        write_out(out_stream, what, ttpu_stream_t::new(r.rt.streams().create(d)))
    })
}

/// Writes a new handle to the default stream of device `device` to
/// `*out_stream`. The caller owns the handle (free it with
/// `ttpu_stream_destroy`); the default stream itself lives as long as the
/// runtime. Fails with OUT_OF_RANGE for a bad device.
#[no_mangle]
pub unsafe extern "C" fn ttpu_stream_default(
    runtime: *const ttpu_runtime_t,
    device: i64,
    out_stream: *mut *mut ttpu_stream_t,
) -> *mut ttpu_error_t {
    ffi_boundary!({
        let what = "ttpu_stream_default";
        let r = ttpu_runtime_t::enter(runtime, what)?;
        check_out(out_stream, what)?;
        let d = r.rt.device(device)?;
        write_out(out_stream, what, ttpu_stream_t::new(r.rt.streams().default_stream(d)))
    })
}

/// Writes a new handle to the calling thread's current stream on device
/// `device` (the one set with `ttpu_stream_set_current`, else the default) to
/// `*out_stream`. The caller owns the handle; free it with
/// `ttpu_stream_destroy`. Fails with OUT_OF_RANGE for a bad device.
#[no_mangle]
pub unsafe extern "C" fn ttpu_stream_current(
    runtime: *const ttpu_runtime_t,
    device: i64,
    out_stream: *mut *mut ttpu_stream_t,
) -> *mut ttpu_error_t {
    ffi_boundary!({
        let what = "ttpu_stream_current";
        let r = ttpu_runtime_t::enter(runtime, what)?;
        check_out(out_stream, what)?;
        let d = r.rt.device(device)?;
        write_out(out_stream, what, ttpu_stream_t::new(r.rt.streams().current(d)))
    })
}

/// Frees a stream handle. When it was the last reference to a created
/// stream, this waits for the work queued on it to run, then ends the
/// stream's worker thread. NULL is a no-op. Use after destroy is detected:
/// the handle is marked destroyed and kept in a quarantine of the 65536 most
/// recently destroyed handles (of all kinds), so while it is there any use of
/// it fails with INVALID_ARGUMENT ("ttpu_stream_t was already destroyed"),
/// getters return their invalid-handle value, and destroying it again is a
/// no-op. Beyond that bound a use of the pointer is undefined behaviour.
#[no_mangle]
pub unsafe extern "C" fn ttpu_stream_destroy(stream: *mut ttpu_stream_t) {
    crate::ffi::no_panic((), || ttpu_stream_t::destroy(stream));
}

/// The device index of the stream, or -1 if `stream` is invalid.
#[no_mangle]
pub unsafe extern "C" fn ttpu_stream_device(stream: *const ttpu_stream_t) -> i64 {
    ttpu_stream_t::borrow(stream, "ttpu_stream_device").map_or(-1, |h| h.s.device() as i64)
}

/// The stream's id within its runtime: 0 for a default stream, 1, 2, ... for
/// created ones in creation order; -1 if `stream` is invalid.
#[no_mangle]
pub unsafe extern "C" fn ttpu_stream_id(stream: *const ttpu_stream_t) -> i64 {
    ttpu_stream_t::borrow(stream, "ttpu_stream_id").map_or(-1, |h| h.s.id() as i64)
}

/// Whether two handles name the same stream (false if either is invalid).
#[no_mangle]
pub unsafe extern "C" fn ttpu_stream_same(a: *const ttpu_stream_t, b: *const ttpu_stream_t) -> bool {
    match (ttpu_stream_t::borrow(a, ""), ttpu_stream_t::borrow(b, "")) {
        (Ok(a), Ok(b)) => a.s == b.s,
        _ => false,
    }
}

/// Blocks until all work submitted to the stream so far has completed on the
/// device. Returns, and clears, the first error that work hit since the last
/// synchronize of this stream.
#[no_mangle]
pub unsafe extern "C" fn ttpu_stream_synchronize(stream: *const ttpu_stream_t) -> *mut ttpu_error_t {
    ffi_boundary!({ ttpu_stream_t::borrow(stream, "ttpu_stream_synchronize")?.s.synchronize() })
}

/// Writes whether the stream is idle (all its work has completed) to
/// `*out_idle`. Does not block.
#[no_mangle]
pub unsafe extern "C" fn ttpu_stream_query(stream: *const ttpu_stream_t, out_idle: *mut bool) -> *mut ttpu_error_t {
    ffi_boundary!({
        let h = ttpu_stream_t::borrow(stream, "ttpu_stream_query")?;
        h.s.check_running()?;
        write_out(out_idle, "ttpu_stream_query", h.s.query())
    })
}

/// Makes work submitted to `stream` after this call wait until `event`'s most
/// recent record has completed. The host does not block; an event never
/// recorded imposes nothing. An event last recorded on another runtime's
/// stream is INVALID_ARGUMENT. `event` is borrowed for the call.
#[no_mangle]
pub unsafe extern "C" fn ttpu_stream_wait_event(
    stream: *const ttpu_stream_t,
    event: *const ttpu_event_t,
) -> *mut ttpu_error_t {
    ffi_boundary!({
        let what = "ttpu_stream_wait_event";
        let h = ttpu_stream_t::borrow(stream, what)?;
        let e = ttpu_event_t::borrow(event, what)?;
        h.s.check_running()?;
        h.s.wait_event(&e.e)
    })
}

/// Makes `stream` the calling thread's current stream on its device, for ops
/// this thread launches through `runtime`. NULL resets every device of the
/// calling thread to its default stream. The runtime keeps its own reference:
/// the handle may be destroyed afterwards. Another runtime's stream is
/// INVALID_ARGUMENT.
#[no_mangle]
pub unsafe extern "C" fn ttpu_stream_set_current(
    runtime: *const ttpu_runtime_t,
    stream: *const ttpu_stream_t,
) -> *mut ttpu_error_t {
    ffi_boundary!({
        let what = "ttpu_stream_set_current";
        let r = ttpu_runtime_t::enter(runtime, what)?;
        if stream.is_null() {
            return r.rt.streams().set_current(None);
        }
        let h = ttpu_stream_t::borrow(stream, what)?;
        if h.s.device() >= r.rt.device_count() {
            return Err(Error::InvalidArgument(format!(
                "{what}: the stream is on device {}, but the runtime has {} device(s)",
                h.s.device(),
                r.rt.device_count()
            )));
        }
        r.rt.streams().set_current(Some(&h.s)).map_err(|e| Error::InvalidArgument(format!("{what}: {e}")))
    })
}

/// Creates an event, not yet recorded (waiting on it returns at once). On
/// success `*out_event` owns it; free it with `ttpu_event_destroy`.
#[no_mangle]
pub unsafe extern "C" fn ttpu_event_create(out_event: *mut *mut ttpu_event_t) -> *mut ttpu_error_t {
    ffi_boundary!({
        check_out(out_event, "ttpu_event_create")?;
        let h = ttpu_event_t { magic: ttpu_event_t::MAGIC, e: StreamEvent::new() };
        write_out(out_event, "ttpu_event_create", h.into_raw())
    })
}

/// Frees an event. Streams already waiting on it still wait for its record.
/// NULL is a no-op. Use after destroy is detected: the handle is marked
/// destroyed and kept in a quarantine of the 65536 most recently destroyed
/// handles (of all kinds), so while it is there any use of it fails with
/// INVALID_ARGUMENT ("ttpu_event_t was already destroyed") and destroying it
/// again is a no-op. Beyond that bound a use of the pointer is undefined
/// behaviour.
#[no_mangle]
pub unsafe extern "C" fn ttpu_event_destroy(event: *mut ttpu_event_t) {
    crate::ffi::no_panic((), || ttpu_event_t::destroy(event));
}

/// Records `event` on `stream`: the event completes when all work submitted
/// to `stream` before this call has completed, and carries the first error
/// that work hit (if not yet reported by `ttpu_stream_synchronize`).
/// Re-recording moves the event to the new point. `stream` is borrowed for
/// the call.
#[no_mangle]
pub unsafe extern "C" fn ttpu_event_record(event: *const ttpu_event_t, stream: *const ttpu_stream_t) -> *mut ttpu_error_t {
    ffi_boundary!({
        let what = "ttpu_event_record";
        let e = ttpu_event_t::borrow(event, what)?;
        let s = ttpu_stream_t::borrow(stream, what)?;
        s.s.check_running()?;
        e.e.record(&s.s);
        Ok(())
    })
}

/// Blocks until the event has completed; returns the error it carries. An
/// event never recorded returns at once.
#[no_mangle]
pub unsafe extern "C" fn ttpu_event_synchronize(event: *const ttpu_event_t) -> *mut ttpu_error_t {
    ffi_boundary!({ ttpu_event_t::borrow(event, "ttpu_event_synchronize")?.e.synchronize() })
}

/// Writes whether the event has completed (true if never recorded) to
/// `*out_done`. Does not block.
#[no_mangle]
pub unsafe extern "C" fn ttpu_event_query(event: *const ttpu_event_t, out_done: *mut bool) -> *mut ttpu_error_t {
    ffi_boundary!({
        let e = ttpu_event_t::borrow(event, "ttpu_event_query")?;
        write_out(out_done, "ttpu_event_query", e.e.query())
    })
}

/// Writes the milliseconds between the completions of `start` and `end` to
/// `*out_ms` (host timestamps, like CUDA's `cudaEventElapsedTime`). Both must
/// have been recorded (else INVALID_ARGUMENT) and have completed (else
/// FAILED_PRECONDITION); this does not wait. Events last recorded on
/// streams of two runtimes are INVALID_ARGUMENT.
#[no_mangle]
pub unsafe extern "C" fn ttpu_event_elapsed_ms(
    start: *const ttpu_event_t,
    end: *const ttpu_event_t,
    out_ms: *mut f64,
) -> *mut ttpu_error_t {
    ffi_boundary!({
        let what = "ttpu_event_elapsed_ms";
        let s = ttpu_event_t::borrow(start, what)?;
        let e = ttpu_event_t::borrow(end, what)?;
        check_out(out_ms, what)?;
        write_out(out_ms, what, s.e.elapsed_ms(&e.e)?)
    })
}
