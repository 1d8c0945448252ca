//! The mode area: the execution mode of the process and of each thread.
//!
//! Names follow the rest of the ABI, `ttpu_<object>_<verb>`: the process
//! mode (`ttpu_process_mode`, `ttpu_process_set_mode`), a thread's own
//! override (`ttpu_thread_mode`, `ttpu_thread_set_mode`) and the mode in
//! effect on the calling thread (`ttpu_thread_effective_mode`). The names
//! of API 1.6 and before stay as deprecated aliases for this major version.

use torchtpu_core::runtime::{self, ExecMode};
use torchtpu_core::Error;

use crate::error::ttpu_error_t;

/// Execution modes (names follow TorchTPU).
#[repr(i32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ttpu_mode {
    /// Strict eager: each op compiled once, cached, run asynchronously.
    DeferNever = 0,
    /// Debug: as strict, but waits for each op so errors surface at their op.
    DeferNeverAndLaunchBlocking = 1,
    /// Fused eager: ops recorded lazily, flushed as one program.
    DeferAndFuse = 2,
}

fn mode_from(m: i32) -> torchtpu_core::Result<ExecMode> {
    ExecMode::from_i32(m).ok_or_else(|| Error::InvalidArgument(format!("unknown execution mode {m} (valid: 0, 1, 2)")))
}

/// Sets the process-wide execution mode (a `ttpu_mode` value). Since API 1.7.
#[no_mangle]
pub extern "C" fn ttpu_process_set_mode(mode: i32) -> *mut ttpu_error_t {
    ffi_boundary!({ runtime::set_global_mode(mode_from(mode)?) })
}

/// The process-wide execution mode. Since API 1.7.
#[no_mangle]
pub extern "C" fn ttpu_process_mode() -> i32 {
    runtime::global_mode() as i32
}

/// Overrides the mode for the calling thread; -1 follows the process mode
/// again. Since API 1.7.
#[no_mangle]
pub extern "C" fn ttpu_thread_set_mode(mode: i32) -> *mut ttpu_error_t {
    ffi_boundary!({ runtime::set_thread_mode(if mode == -1 { None } else { Some(mode_from(mode)?) }) })
}

/// The calling thread's own mode override, or -1 when it follows the
/// process mode (what `ttpu_thread_set_mode` restores a guard to).
#[no_mangle]
pub extern "C" fn ttpu_thread_mode() -> i32 {
    runtime::thread_mode().map_or(-1, |m| m as i32)
}

/// The mode in effect on the calling thread: its override, else the
/// process mode. Since API 1.7.
#[no_mangle]
pub extern "C" fn ttpu_thread_effective_mode() -> i32 {
    runtime::current_mode() as i32
}

// --- deprecated aliases (API 1.6 and before) --------------------------------

/// Deprecated alias of `ttpu_process_set_mode`.
#[no_mangle]
#[deprecated(note = "use ttpu_process_set_mode")]
pub extern "C" fn ttpu_set_mode(mode: i32) -> *mut ttpu_error_t {
    ttpu_process_set_mode(mode)
}

/// Deprecated alias of `ttpu_process_mode`.
#[no_mangle]
#[deprecated(note = "use ttpu_process_mode")]
pub extern "C" fn ttpu_get_mode() -> i32 {
    ttpu_process_mode()
}

/// Deprecated alias of `ttpu_thread_set_mode`.
#[no_mangle]
#[deprecated(note = "use ttpu_thread_set_mode")]
pub extern "C" fn ttpu_set_thread_mode(mode: i32) -> *mut ttpu_error_t {
    ttpu_thread_set_mode(mode)
}

/// Deprecated alias of `ttpu_thread_effective_mode`.
#[no_mangle]
#[deprecated(note = "use ttpu_thread_effective_mode")]
pub extern "C" fn ttpu_current_mode() -> i32 {
    ttpu_thread_effective_mode()
}
