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

/// XORed into a type's `MAGIC` to mark a destroyed handle of that type.
const DEAD_XOR: u64 = 0xdead_dead_dead_dead;

/// How many destroyed handles (of all kinds together) are kept in
/// quarantine, so that a use after `_destroy` is detected deterministically.
pub(crate) const QUARANTINE_CAPACITY: usize = 65536;

/// A destroyed handle's shell: its allocation, whose contents were already
/// dropped, and the function that frees the allocation without dropping them.
struct Shell {
    ptr: *mut u8,
    free: unsafe fn(*mut u8),
}

// SAFETY: a shell is only an allocation to free; nothing reads through it
// except `Handle::borrow`/`destroy`, which read the magic field only.
unsafe impl Send for Shell {}

/// The most recently destroyed handles, oldest first.
static QUARANTINE: std::sync::Mutex<std::collections::VecDeque<Shell>> =
    std::sync::Mutex::new(std::collections::VecDeque::new());

/// Frees a shell's allocation without running `T`'s destructor (its contents
/// were moved out and dropped at `_destroy`).
unsafe fn free_shell<T>(p: *mut u8) {
    drop(Box::from_raw(p as *mut std::mem::ManuallyDrop<T>));
}

/// A heap object handed to C as an opaque pointer. `MAGIC` tags live objects
/// so that a pointer of the wrong type is rejected instead of misread.
///
/// Use after destroy is detected, within a bound: `destroy` drops what the
/// handle owns at once and marks it dead (magic `MAGIC ^ DEAD_XOR`), but
/// keeps its small allocation (the shell) in a process-wide quarantine of
/// the [`QUARANTINE_CAPACITY`] (65536) most recently destroyed handles of
/// all kinds. While a handle's shell is in quarantine, any use of it fails
/// with INVALID_ARGUMENT "...: <type> was already destroyed (use after
/// ttpu_X_destroy)" (getters that return no error return their documented
/// invalid-handle value), and a second `_destroy` is a no-op. Once 65536
/// more handles have been destroyed the shell is freed and a use of the
/// dangling pointer is undefined behaviour again.
///
/// Implement it with [`impl_handle!`], which reads the `magic` field through
/// a raw pointer: a dead shell is never turned into a reference.
pub(crate) trait Handle: Sized + 'static {
    const NAME: &'static str;
    const MAGIC: u64;
    /// The magic of a destroyed handle of this type.
    const DEAD: u64 = Self::MAGIC ^ DEAD_XOR;
    /// The address of the `magic` field of the object at `p` (no reference
    /// to the object is created).
    unsafe fn magic_ptr(p: *const Self) -> *mut u64;

    /// Boxes `self` and returns the owning pointer.
    fn into_raw(self) -> *mut Self {
        Box::into_raw(Box::new(self))
    }

    /// Borrows the object behind `ptr`: INVALID_ARGUMENT for NULL, for a
    /// destroyed handle still in quarantine, and for a pointer of another type.
    unsafe fn borrow<'a>(ptr: *const Self, what: &str) -> Result<&'a Self> {
        if ptr.is_null() {
            return Err(Error::InvalidArgument(format!("{what}: {} is NULL", Self::NAME)));
        }
        let magic = Self::magic_ptr(ptr).read();
        if magic == Self::DEAD {
            let kind = Self::NAME.trim_start_matches("ttpu_").trim_end_matches("_t");
            return Err(Error::InvalidArgument(format!(
                "{what}: {} was already destroyed (use after ttpu_{kind}_destroy)",
                Self::NAME
            )));
        }
        if magic != Self::MAGIC {
            return Err(Error::InvalidArgument(format!("{what}: pointer is not a live {}", Self::NAME)));
        }
        Ok(&*ptr)
    }

    /// Destroys the object behind `ptr`: drops its contents, marks it dead
    /// and quarantines its shell. NULL, a handle already destroyed (still in
    /// quarantine) and a pointer of another type are no-ops.
    unsafe fn destroy(ptr: *mut Self) {
        if ptr.is_null() {
            return;
        }
        let (contents, evicted) = {
            // The check and the mark happen under the lock, so two racing
            // destroys of one handle drop it once.
            let mut q = QUARANTINE.lock().unwrap_or_else(|e| e.into_inner());
            let magic = Self::magic_ptr(ptr);
            if magic.read() != Self::MAGIC {
                return;
            }
            // Move the contents out; the shell keeps only bytes nobody reads
            // but the magic, which now says dead.
            let contents = std::ptr::read(ptr);
            magic.write(Self::DEAD);
            q.push_back(Shell { ptr: ptr as *mut u8, free: free_shell::<Self> });
            let evicted = if q.len() > QUARANTINE_CAPACITY { q.pop_front() } else { None };
            (contents, evicted)
        };
        drop(contents);
        if let Some(s) = evicted {
            (s.free)(s.ptr);
        }
    }
}

/// Implements [`Handle`] for a struct with a `magic: u64` field.
macro_rules! impl_handle {
    ($t:ty, $name:literal, $magic:expr) => {
        impl $crate::ffi::Handle for $t {
            const NAME: &'static str = $name;
            const MAGIC: u64 = $magic;
            unsafe fn magic_ptr(p: *const Self) -> *mut u64 {
                std::ptr::addr_of!((*p).magic) as *mut u64
            }
        }
    };
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

/// The `struct_size` of the caller's output struct at `out` (NULL-checked,
/// and at least version 1 of `T`). Every such struct is `repr(C)` with
/// `struct_size: usize` as its first field, which the caller sets to its
/// `sizeof`. `what` is the function's name.
pub(crate) unsafe fn out_struct_size<T: OutStruct>(out: *mut T, what: &str) -> Result<usize> {
    check_out(out, what)?;
    // repr(C) puts the first field at offset 0.
    let size = *out.cast::<usize>();
    let name = std::any::type_name::<T>().rsplit("::").next().unwrap_or("struct");
    check_struct_size(size, T::V1, &format!("{what}: {name}"))?;
    Ok(size)
}

/// An output struct versioned by its leading `struct_size`. Version 1 is
/// frozen at `V1` bytes (through its last field then, [`v1_ends_at`]): the
/// runtime accepts any `struct_size` from `V1` up and writes only the bytes
/// that fit ([`write_fitting`]), so a caller compiled against an older header
/// keeps working when fields are added at the end.
///
/// # Safety
/// `Self` is `repr(C)` and starts with `struct_size: usize`.
pub(crate) unsafe trait OutStruct: Sized {
    const V1: usize;
}

/// Declares an output struct's frozen first version: it ends with `field`
/// of type `ty`.
macro_rules! v1_ends_at {
    ($t:ty, $field:ident: $ty:ty) => {
        unsafe impl $crate::ffi::OutStruct for $t {
            const V1: usize = std::mem::offset_of!($t, $field) + std::mem::size_of::<$ty>();
        }
    };
}
pub(crate) use v1_ends_at;

/// Writes `value` to `*out`, only its first `size` bytes (the caller's
/// `struct_size`, at least `T::V1`, checked by [`out_struct_size`]) when
/// that is less than this version's size.
pub(crate) unsafe fn write_fitting<T: OutStruct>(out: *mut T, value: T, size: usize) {
    let n = size.min(std::mem::size_of::<T>());
    // An untyped copy: padding bytes are copied as they are, never read.
    std::ptr::copy_nonoverlapping((&value as *const T).cast::<u8>(), out.cast::<u8>(), n);
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
