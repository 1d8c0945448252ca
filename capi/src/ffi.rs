//! The panic boundary and handle conversions, in one place.
//!
//! Every `extern "C"` body runs inside [`ffi_boundary!`]: a panic becomes an
//! `INTERNAL` error carrying its message instead of aborting the process,
//! and [`Handle`] casts turn NULL or foreign pointers into
//! `INVALID_ARGUMENT` errors.

use std::ffi::{c_char, CStr};

use crate::error::ttpu_error_t;
use torchtpu_core::{Error, Result};

/// Runs `body` (returning `Result<()>`) and converts the outcome to an
/// owned error pointer, catching panics.
macro_rules! ffi_boundary {
    ($body:block) => {{
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| -> torchtpu_core::Result<()> { $body }));
        $crate::ffi::finish(r)
    }};
}

pub(crate) fn finish(r: std::thread::Result<Result<()>>) -> *mut ttpu_error_t {
    match r {
        Ok(Ok(())) => std::ptr::null_mut(),
        Ok(Err(e)) => ttpu_error_t::boxed(e.code() as i32, e.to_string()),
        Err(panic) => {
            let msg = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            ttpu_error_t::boxed(torchtpu_core::Code::Internal as i32, format!("internal panic in libtorchtpu: {msg}"))
        }
    }
}

/// Runs `f` for an export that returns no error (getters, `_destroy`):
/// a panic yields `fallback` instead of crossing the boundary.
pub(crate) fn no_panic<T>(fallback: T, f: impl FnOnce() -> T) -> T {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or(fallback)
}

/// A heap object handed to C as an opaque pointer. `MAGIC` tags live objects
/// so that a pointer of the wrong type is rejected instead of misread.
pub(crate) trait Handle: Sized {
    const NAME: &'static str;
    const MAGIC: u64;
    fn magic(&self) -> u64;

    /// Boxes `self` and returns the owning pointer.
    fn into_raw(self) -> *mut Self {
        Box::into_raw(Box::new(self))
    }

    /// Borrows the object behind `ptr`.
    unsafe fn borrow<'a>(ptr: *const Self, what: &str) -> Result<&'a Self> {
        if ptr.is_null() {
            return Err(Error::InvalidArgument(format!("{what}: {} is NULL", Self::NAME)));
        }
        let r = &*ptr;
        if r.magic() != Self::MAGIC {
            return Err(Error::InvalidArgument(format!("{what}: pointer is not a live {}", Self::NAME)));
        }
        Ok(r)
    }

    /// Frees the object behind `ptr` (NULL is a no-op).
    unsafe fn destroy(ptr: *mut Self) {
        if !ptr.is_null() && (*ptr).magic() == Self::MAGIC {
            drop(Box::from_raw(ptr));
        }
    }
}

/// Writes `v` through `out` (checked for NULL).
pub(crate) unsafe fn write_out<T>(out: *mut T, what: &str, v: T) -> Result<()> {
    if out.is_null() {
        return Err(Error::InvalidArgument(format!("{what}: output pointer is NULL")));
    }
    out.write(v);
    Ok(())
}

/// Checks an output pointer before any work is done, so that a NULL `out`
/// never leaks a result.
pub(crate) fn check_out<T>(out: *mut T, what: &str) -> Result<()> {
    if out.is_null() {
        return Err(Error::InvalidArgument(format!("{what}: output pointer is NULL")));
    }
    Ok(())
}

/// A borrowed NUL-terminated UTF-8 string.
pub(crate) unsafe fn str_arg<'a>(p: *const c_char, what: &str) -> Result<&'a str> {
    if p.is_null() {
        return Err(Error::InvalidArgument(format!("{what}: string is NULL")));
    }
    CStr::from_ptr(p).to_str().map_err(|_| Error::InvalidArgument(format!("{what}: string is not UTF-8")))
}

/// A borrowed array; `len == 0` accepts NULL.
pub(crate) unsafe fn slice_arg<'a, T>(p: *const T, len: usize, what: &str) -> Result<&'a [T]> {
    if len == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(Error::InvalidArgument(format!("{what}: array pointer is NULL but length is {len}")));
    }
    Ok(std::slice::from_raw_parts(p, len))
}

/// Checks a versioned struct's `struct_size`: it must cover version 1.
pub(crate) fn check_struct_size(got: usize, v1: usize, what: &str) -> Result<()> {
    if got < v1 {
        return Err(Error::InvalidArgument(format!(
            "{what}: struct_size {got} is smaller than version 1 of the struct ({v1} bytes); set it to sizeof(...)"
        )));
    }
    Ok(())
}
