//! Loading a plugin and calling through its `PJRT_Api` table.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use libloading::Library;

use super::{args, sys};
use crate::error::{Code, Error, Result};

/// A loaded PJRT plugin: the library and its function table.
///
/// Thread-safe. The library stays mapped for as long as any client, buffer or
/// executable created through it is alive (they all hold an `Arc<Api>`).
pub struct Api {
    raw: *const sys::PJRT_Api,
    path: PathBuf,
    version: (i32, i32),
    _lib: Library,
}

// SAFETY: the PJRT_Api table is immutable after GetPjrtApi returns, and every
// PJRT entry point is documented as callable from any thread.
unsafe impl Send for Api {}
unsafe impl Sync for Api {}

impl std::fmt::Debug for Api {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Api({}, v{}.{})", self.path.display(), self.version.0, self.version.1)
    }
}

/// The API version of the header the bindings were generated from.
pub const HEADER_VERSION: (i32, i32) = (sys::PJRT_API_MAJOR as i32, sys::PJRT_API_MINOR as i32);

impl Api {
    /// Opens `path`, resolves `GetPjrtApi`, checks the API version against our
    /// header and initializes the plugin. A plugin is loaded and initialized
    /// once per process and never unloaded: XLA plugins start threads and
    /// register static state that does not survive `dlclose` (unloading one
    /// crashes the process at exit), and initializing twice is not allowed.
    pub fn load(path: &Path) -> Result<Arc<Api>> {
        static LOADED: std::sync::OnceLock<parking_lot::Mutex<Vec<Arc<Api>>>> = std::sync::OnceLock::new();
        let loaded = LOADED.get_or_init(Default::default);
        let mut loaded = loaded.lock();
        let key = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
        if let Some(api) = loaded.iter().find(|a| a.path == key) {
            return Ok(api.clone());
        }
        let api = Api::open(&key)?;
        loaded.push(api.clone());
        Ok(api)
    }

    fn open(path: &Path) -> Result<Arc<Api>> {
        let fail = |message: String| Error::PluginLoad { path: path.display().to_string(), message };
        let _span = tracing::info_span!("pjrt_load", path = %path.display()).entered();
        // SAFETY: loading a PJRT plugin runs its static initializers; that is
        // the documented way to use one.
        let lib = unsafe { Library::new(path) }.map_err(|e| fail(format!("cannot open: {e}")))?;
        let get_api: libloading::Symbol<unsafe extern "C" fn() -> *const sys::PJRT_Api> =
            unsafe { lib.get(b"GetPjrtApi\0") }
                .map_err(|e| fail(format!("not a PJRT plugin (no GetPjrtApi symbol): {e}")))?;
        let raw = unsafe { get_api() };
        if raw.is_null() {
            return Err(fail("GetPjrtApi returned NULL".into()));
        }
        let v = unsafe { &(*raw).pjrt_api_version };
        let version = (v.major_version, v.minor_version);
        if version.0 != HEADER_VERSION.0 || version.1 < HEADER_VERSION.1 {
            return Err(fail(format!(
                "PJRT API version {}.{} is older than the {}.{} this runtime was built against; \
                 install a newer plugin or rebuild against its header",
                version.0, version.1, HEADER_VERSION.0, HEADER_VERSION.1
            )));
        }
        let api = Api { raw, path: path.to_path_buf(), version, _lib: lib };
        let mut a = args!(PJRT_Plugin_Initialize_Args);
        api.call("PJRT_Plugin_Initialize", api.table().PJRT_Plugin_Initialize, &mut a)?;
        tracing::debug!(version = ?version, "PJRT plugin loaded");
        Ok(Arc::new(api))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `(major, minor)` reported by the plugin.
    pub fn version(&self) -> (i32, i32) {
        self.version
    }

    pub(crate) fn table(&self) -> &sys::PJRT_Api {
        // SAFETY: non-null, checked in `load`, valid while the library is mapped.
        unsafe { &*self.raw }
    }

    /// Calls one PJRT entry point and converts its error, if any.
    pub(crate) fn call<A>(
        &self,
        name: &'static str,
        f: Option<unsafe extern "C" fn(*mut A) -> *mut sys::PJRT_Error>,
        args: &mut A,
    ) -> Result<()> {
        let f = f.ok_or_else(|| Error::Pjrt {
            call: name,
            code: Code::Unimplemented,
            message: format!("the plugin at {} does not implement {name}", self.path.display()),
        })?;
        // SAFETY: `args` is a properly sized PJRT argument struct for `f`.
        let err = unsafe { guarded(name, f, args)? };
        self.check(name, err)
    }

    /// Converts (and frees) a PJRT error returned by `name`.
    pub(crate) fn check(&self, name: &'static str, err: *mut sys::PJRT_Error) -> Result<()> {
        if err.is_null() {
            return Ok(());
        }
        let t = self.table();
        let mut m = args!(PJRT_Error_Message_Args);
        m.error = err;
        let message = match t.PJRT_Error_Message {
            Some(f) => {
                unsafe { f(&mut m) };
                if m.message.is_null() {
                    String::new()
                } else {
                    let bytes = unsafe { std::slice::from_raw_parts(m.message as *const u8, m.message_size) };
                    String::from_utf8_lossy(bytes).into_owned()
                }
            }
            None => "<no message>".into(),
        };
        let mut c = args!(PJRT_Error_GetCode_Args);
        c.error = err;
        let code = match t.PJRT_Error_GetCode {
            Some(f) if unsafe { f(&mut c) }.is_null() => Code::from_i32(c.code as i32),
            _ => Code::Unknown,
        };
        let mut d = args!(PJRT_Error_Destroy_Args);
        d.error = err;
        if let Some(f) = t.PJRT_Error_Destroy {
            unsafe { f(&mut d) };
        }
        Err(Error::Pjrt { call: name, code, message })
    }
}

type EntryPoint = unsafe extern "C" fn(*mut c_void) -> *mut c_void;

extern "C" {
    /// `pjrt/guard.cc`: calls `f(args)` inside a C++ try block.
    fn torchtpu_pjrt_guarded_call(
        f: EntryPoint,
        args: *mut c_void,
        threw: *mut c_int,
        message: *mut c_char,
        capacity: usize,
    ) -> *mut c_void;
}

/// Calls the PJRT entry point `f` inside the C++ exception guard: an
/// exception the plugin throws becomes an INTERNAL error naming the entry
/// point, instead of unwinding into Rust (which aborts the process).
///
/// # Safety
/// `args` must be a properly sized argument struct for `f`.
pub(crate) unsafe fn guarded<A>(
    name: &'static str,
    f: unsafe extern "C" fn(*mut A) -> *mut sys::PJRT_Error,
    args: *mut A,
) -> Result<*mut sys::PJRT_Error> {
    // SAFETY: both are C functions taking one pointer and returning one.
    let entry: EntryPoint = std::mem::transmute::<unsafe extern "C" fn(*mut A) -> *mut sys::PJRT_Error, EntryPoint>(f);
    let mut threw: c_int = 0;
    let mut message = [0 as c_char; 512];
    let err = torchtpu_pjrt_guarded_call(entry, args.cast(), &mut threw, message.as_mut_ptr(), message.len());
    if threw != 0 {
        let what = CStr::from_ptr(message.as_ptr()).to_string_lossy();
        tracing::error!(call = name, "the PJRT plugin threw a C++ exception: {what}");
        return Err(Error::Pjrt {
            call: name,
            code: Code::Internal,
            message: format!("the PJRT plugin threw a C++ exception ({what}); the plugin may be in a bad state"),
        });
    }
    Ok(err.cast())
}

/// Copies a PJRT-owned `(ptr, len)` string.
pub(crate) fn owned_str(ptr: *const std::os::raw::c_char, len: usize) -> String {
    if ptr.is_null() {
        return String::new();
    }
    let bytes = unsafe { std::slice::from_raw_parts(ptr as *const u8, len) };
    String::from_utf8_lossy(bytes).into_owned()
}

#[allow(dead_code)]
pub(crate) fn cstr(ptr: *const std::os::raw::c_char) -> String {
    if ptr.is_null() {
        return String::new();
    }
    unsafe { CStr::from_ptr(ptr) }.to_string_lossy().into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    extern "C" {
        fn torchtpu_pjrt_throw_for_tests(args: *mut c_void) -> *mut c_void;
    }

    unsafe extern "C" fn throws(args: *mut u8) -> *mut sys::PJRT_Error {
        torchtpu_pjrt_throw_for_tests(args.cast()).cast()
    }

    unsafe extern "C" fn returns_its_args(args: *mut u8) -> *mut sys::PJRT_Error {
        args.cast()
    }

    #[test]
    fn a_cpp_exception_from_the_plugin_is_an_error_not_an_abort() {
        let mut byte = 1u8;
        let e = unsafe { guarded("PJRT_Client_Compile", throws, &mut byte) }.unwrap_err();
        let text = e.to_string();
        assert!(text.contains("PJRT_Client_Compile") && text.contains("plugin failure for tests"), "{text}");
        assert_eq!(e.code(), Code::Internal);
        // A thrown non-std exception is caught too.
        let e = unsafe { guarded("PJRT_Buffer_ToHostBuffer", throws, std::ptr::null_mut()) }.unwrap_err();
        assert!(e.to_string().contains("not a std::exception"), "{e}");
        // Without an exception the entry point's result comes back as is.
        let p: *mut u8 = &mut byte;
        assert_eq!(unsafe { guarded("PJRT_Plugin_Initialize", returns_its_args, p) }.unwrap(), p.cast());
    }
}
