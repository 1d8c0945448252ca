//! The key-value store a frontend gives a runtime whose PJRT client spans
//! processes (`ttpu_runtime_options_t.kv_store`): the C callbacks, adapted
//! to core's `KeyValueStore`, which core hands to the plugin.

use std::ffi::{c_char, c_void};
use std::sync::Arc;
use std::time::Duration;

use torchtpu_core::pjrt::{DistributedOptions, KeyValueStore};
use torchtpu_core::{Code, Error, Result};

use crate::error::{ttpu_error_code, ttpu_error_destroy, ttpu_error_message, ttpu_error_t};
use crate::ffi::check_struct_size;
use crate::runtime::ttpu_runtime_options_t;

/// Frees a value a `ttpu_kv_store_t` get returned.
pub type ttpu_kv_value_deleter_t = Option<unsafe extern "C" fn(value: *mut c_char)>;

/// A key-value store shared by every process of one client, implemented by
/// the frontend (PyTorch's c10d store, for example). The runtime calls it
/// from PJRT's threads, possibly concurrently, during `ttpu_runtime_create`
/// and afterwards. Set `struct_size = sizeof(ttpu_kv_store_t)`.
#[repr(C)]
pub struct ttpu_kv_store_t {
    pub struct_size: usize,
    /// Passed to every callback.
    pub user_data: *mut std::ffi::c_void,
    /// Looks `key[0..key_size]` up, waiting up to `timeout_ms` for another
    /// process to put it; with `timeout_ms < 0`, does not wait. On success
    /// returns NULL and sets `*value`, `*value_size` and `*value_deleter`
    /// (which the runtime calls on `*value` once it has copied it). Returns
    /// an error (`ttpu_error_create`) on failure: `TTPU_CODE_DEADLINE_EXCEEDED`
    /// past the timeout, `TTPU_CODE_NOT_FOUND` for an absent key when not
    /// waiting. The runtime takes ownership of the error.
    pub get: Option<
        unsafe extern "C" fn(
            user_data: *mut std::ffi::c_void,
            key: *const c_char,
            key_size: usize,
            timeout_ms: i64,
            value: *mut *mut c_char,
            value_size: *mut usize,
            value_deleter: *mut ttpu_kv_value_deleter_t,
        ) -> *mut ttpu_error_t,
    >,
    /// Sets `key[0..key_size]` to `value[0..value_size]` for every process.
    /// Both are borrowed for the call. Returns NULL or an error, as `get`.
    pub put: Option<
        unsafe extern "C" fn(
            user_data: *mut std::ffi::c_void,
            key: *const c_char,
            key_size: usize,
            value: *const c_char,
            value_size: usize,
        ) -> *mut ttpu_error_t,
    >,
    /// Called once when the runtime no longer needs the store (at
    /// `ttpu_runtime_destroy`, or before a failing `ttpu_runtime_create`
    /// returns), or NULL. A store whose `struct_size`, `get` or `put` is
    /// invalid is rejected without being released.
    pub release: Option<unsafe extern "C" fn(user_data: *mut std::ffi::c_void)>,
}

/// The frontend's store. `user_data` is the frontend's, valid until
/// `release`, and its callbacks are documented thread-safe.
struct FrontendStore {
    user_data: *mut c_void,
    get: unsafe extern "C" fn(
        *mut c_void,
        *const c_char,
        usize,
        i64,
        *mut *mut c_char,
        *mut usize,
        *mut ttpu_kv_value_deleter_t,
    ) -> *mut ttpu_error_t,
    put: unsafe extern "C" fn(*mut c_void, *const c_char, usize, *const c_char, usize) -> *mut ttpu_error_t,
    release: Option<unsafe extern "C" fn(*mut c_void)>,
}

// SAFETY: the ABI requires the callbacks to be callable from any thread.
unsafe impl Send for FrontendStore {}
unsafe impl Sync for FrontendStore {}

impl Drop for FrontendStore {
    fn drop(&mut self) {
        if let Some(release) = self.release {
            unsafe { release(self.user_data) };
        }
    }
}

/// Takes ownership of a frontend's error.
unsafe fn owned_error(e: *mut ttpu_error_t) -> Result<()> {
    if e.is_null() {
        return Ok(());
    }
    let code = Code::from_i32(ttpu_error_code(e) as i32);
    let message = std::ffi::CStr::from_ptr(ttpu_error_message(e)).to_string_lossy().into_owned();
    ttpu_error_destroy(e);
    Err(Error::KeyValue { code, message })
}

impl FrontendStore {
    fn lookup(&self, key: &str, timeout_ms: i64) -> Result<Vec<u8>> {
        let (mut value, mut size, mut deleter): (*mut c_char, usize, ttpu_kv_value_deleter_t) = (std::ptr::null_mut(), 0, None);
        unsafe {
            owned_error((self.get)(self.user_data, key.as_ptr() as *const c_char, key.len(), timeout_ms, &mut value, &mut size, &mut deleter))?;
            if value.is_null() {
                return Ok(Vec::new());
            }
            let copy = std::slice::from_raw_parts(value as *const u8, size).to_vec();
            if let Some(free) = deleter {
                free(value);
            }
            Ok(copy)
        }
    }
}

impl KeyValueStore for FrontendStore {
    fn get(&self, key: &str, timeout: Duration) -> Result<Vec<u8>> {
        self.lookup(key, timeout.as_millis().min(i64::MAX as u128) as i64)
    }
    fn try_get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        match self.lookup(key, -1) {
            Ok(v) => Ok(Some(v)),
            Err(e) if e.code() == Code::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }
    fn put(&self, key: &str, value: &[u8]) -> Result<()> {
        unsafe {
            owned_error((self.put)(
                self.user_data,
                key.as_ptr() as *const c_char,
                key.len(),
                value.as_ptr() as *const c_char,
                value.len(),
            ))
        }
    }
}

/// The distributed part of version-2 options whose `kv_store` is set.
pub(crate) unsafe fn distributed_options(o: &ttpu_runtime_options_t) -> Result<DistributedOptions> {
    let what = "ttpu_runtime_create";
    let kv = &*o.kv_store;
    check_struct_size(kv.struct_size, std::mem::size_of::<ttpu_kv_store_t>(), &format!("{what}: ttpu_kv_store_t"))?;
    let (Some(get), Some(put)) = (kv.get, kv.put) else {
        return Err(Error::InvalidArgument(format!("{what}: kv_store needs both its get and put callbacks")));
    };
    // From here on the store is the runtime's: dropping it releases it.
    let store = FrontendStore { user_data: kv.user_data, get, put, release: kv.release };
    if o.node_id < 0 || o.num_nodes <= 0 || o.node_id >= o.num_nodes {
        return Err(Error::InvalidArgument(format!(
            "{what}: node_id {} is not in 0..num_nodes ({})",
            o.node_id, o.num_nodes
        )));
    }
    Ok(DistributedOptions { node_id: o.node_id as usize, num_nodes: o.num_nodes as usize, store: Arc::new(store) })
}
