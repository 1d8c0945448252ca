//! ABI and library versions.

use std::ffi::c_char;

/// Major version of the C ABI: changes only on incompatible changes.
pub const TTPU_API_MAJOR: u32 = 1;
/// Minor version of the C ABI: grows with compatible additions.
pub const TTPU_API_MINOR: u32 = 10;

/// The library version ("0.1.0"), NUL-terminated. Static storage.
#[no_mangle]
pub extern "C" fn ttpu_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr() as *const c_char
}

/// The C ABI version this library implements, as `major * 1000 + minor`.
/// Compare with `TTPU_API_MAJOR * 1000 + TTPU_API_MINOR` from the header.
#[no_mangle]
pub extern "C" fn ttpu_api_version() -> u32 {
    TTPU_API_MAJOR * 1000 + TTPU_API_MINOR
}
