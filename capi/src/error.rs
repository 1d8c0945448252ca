//! Owned error objects with abseil status codes.

use std::ffi::{c_char, CString};

use crate::ffi::Handle;

/// Status codes: the abseil codes 0-16 that PJRT and IREE use.
#[repr(i32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ttpu_code {
    Ok = 0,
    Cancelled = 1,
    Unknown = 2,
    InvalidArgument = 3,
    DeadlineExceeded = 4,
    NotFound = 5,
    AlreadyExists = 6,
    PermissionDenied = 7,
    ResourceExhausted = 8,
    FailedPrecondition = 9,
    Aborted = 10,
    OutOfRange = 11,
    Unimplemented = 12,
    Internal = 13,
    Unavailable = 14,
    DataLoss = 15,
    Unauthenticated = 16,
}

/// An error returned by a fallible call. Owned by the caller, who frees it
/// with `ttpu_error_destroy`. A checked handle like the others: a use after
/// destroy, or a second destroy, is detected while the handle is in the
/// quarantine (see `ttpu_tensor_destroy`).
pub struct ttpu_error_t {
    magic: u64,
    code: i32,
    message: CString,
}

impl_handle!(ttpu_error_t, "ttpu_error_t", 0x7474_7075_4552_524f);

impl ttpu_error_t {
    pub(crate) fn boxed(code: i32, message: String) -> *mut ttpu_error_t {
        let message = CString::new(message.replace('\0', "\\0")).unwrap_or_default();
        ttpu_error_t { magic: Self::MAGIC, code, message }.into_raw()
    }
}

/// The error's status code (a `ttpu_code` value). Returns `TTPU_CODE_OK` for
/// NULL (no error), and `TTPU_CODE_INVALID_ARGUMENT` for an error already
/// destroyed or a pointer that is not an error.
#[no_mangle]
pub unsafe extern "C" fn ttpu_error_code(error: *const ttpu_error_t) -> ttpu_code {
    if error.is_null() {
        return ttpu_code::Ok;
    }
    match ttpu_error_t::borrow(error, "").map(|e| e.code) {
        Ok(c @ 0..=16) => std::mem::transmute::<i32, ttpu_code>(c),
        Ok(_) => ttpu_code::Unknown,
        Err(_) => ttpu_code::InvalidArgument,
    }
}

/// The error's message, NUL-terminated UTF-8. Borrowed: valid until
/// `ttpu_error_destroy(error)`. Returns "" for NULL, and a message saying so
/// for an error already destroyed or a pointer that is not an error.
#[no_mangle]
pub unsafe extern "C" fn ttpu_error_message(error: *const ttpu_error_t) -> *const c_char {
    if error.is_null() {
        return c"".as_ptr();
    }
    match ttpu_error_t::borrow(error, "") {
        Ok(e) => e.message.as_ptr(),
        Err(_) => c"ttpu_error_message: not a live ttpu_error_t (already destroyed?)".as_ptr(),
    }
}

/// Creates an error with `code` (a `ttpu_code`; OK and unknown values become
/// `TTPU_CODE_UNKNOWN`) and a copy of the NUL-terminated `message` (NULL:
/// empty), for a frontend's callbacks to return (a `ttpu_kv_store_t`'s).
/// Owned by the caller until handed to the runtime; `ttpu_error_destroy`
/// frees it.
#[no_mangle]
pub unsafe extern "C" fn ttpu_error_create(code: i32, message: *const c_char) -> *mut ttpu_error_t {
    let text = if message.is_null() { String::new() } else { std::ffi::CStr::from_ptr(message).to_string_lossy().into_owned() };
    ttpu_error_t::boxed(if (1..=16).contains(&code) { code } else { ttpu_code::Unknown as i32 }, text)
}

/// Frees an error. NULL, and an error already destroyed (still in the
/// quarantine), are no-ops.
#[no_mangle]
pub unsafe extern "C" fn ttpu_error_destroy(error: *mut ttpu_error_t) {
    crate::ffi::no_panic((), || ttpu_error_t::destroy(error));
}
