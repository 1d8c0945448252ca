//! The key-value store a frontend gives a runtime whose PJRT client spans
//! processes (`ttpu_runtime_options_t.kv_store`): the C callbacks, adapted
//! to core's `KeyValueStore`, which core hands to the plugin.

use std::ffi::{c_char, c_void};
use std::sync::Arc;
use std::time::Duration;

use torchtpu_core::{Code, DistributedOptions, Error, KeyValueStore, Result};

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
        let (mut value, mut size, mut deleter): (*mut c_char, usize, ttpu_kv_value_deleter_t) =
            (std::ptr::null_mut(), 0, None);
        unsafe {
            owned_error((self.get)(
                self.user_data,
                key.as_ptr() as *const c_char,
                key.len(),
                timeout_ms,
                &mut value,
                &mut size,
                &mut deleter,
            ))?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ttpu_error_create;
    use std::collections::HashMap;
    use std::sync::Mutex;

    /// A frontend's store, written against the C declarations alone.
    #[derive(Default)]
    struct Frontend {
        map: Mutex<HashMap<Vec<u8>, Vec<u8>>>,
        gets: Mutex<Vec<(String, i64)>>,
        released: Mutex<u32>,
    }

    unsafe extern "C" fn get(
        user: *mut c_void,
        key: *const c_char,
        key_size: usize,
        timeout_ms: i64,
        value: *mut *mut c_char,
        value_size: *mut usize,
        deleter: *mut ttpu_kv_value_deleter_t,
    ) -> *mut ttpu_error_t {
        let f = &*(user as *const Frontend);
        let key = std::slice::from_raw_parts(key as *const u8, key_size).to_vec();
        f.gets.lock().unwrap().push((String::from_utf8_lossy(&key).into_owned(), timeout_ms));
        match f.map.lock().unwrap().get(&key) {
            Some(v) => {
                let boxed = v.clone().into_boxed_slice();
                *value_size = boxed.len();
                *value = Box::into_raw(boxed) as *mut c_char;
                *deleter = Some(free_value);
                std::ptr::null_mut()
            }
            None if timeout_ms < 0 => ttpu_error_create(Code::NotFound as i32, c"absent".as_ptr()),
            None => ttpu_error_create(Code::DeadlineExceeded as i32, c"waited in vain".as_ptr()),
        }
    }

    /// Frees what `get` returned; the store's values in these tests are 3
    /// bytes long, and a real frontend would remember the size itself.
    unsafe extern "C" fn free_value(v: *mut c_char) {
        drop(Box::from_raw(std::ptr::slice_from_raw_parts_mut(v as *mut u8, 3)));
    }

    unsafe extern "C" fn put(
        user: *mut c_void,
        key: *const c_char,
        key_size: usize,
        value: *const c_char,
        value_size: usize,
    ) -> *mut ttpu_error_t {
        let f = &*(user as *const Frontend);
        let key = std::slice::from_raw_parts(key as *const u8, key_size).to_vec();
        if key == b"read-only" {
            return ttpu_error_create(Code::PermissionDenied as i32, c"read-only key".as_ptr());
        }
        f.map.lock().unwrap().insert(key, std::slice::from_raw_parts(value as *const u8, value_size).to_vec());
        std::ptr::null_mut()
    }

    unsafe extern "C" fn release(user: *mut c_void) {
        *(*(user as *const Frontend)).released.lock().unwrap() += 1;
    }

    fn options(kv: &ttpu_kv_store_t, node_id: i32, num_nodes: i32) -> ttpu_runtime_options_t {
        ttpu_runtime_options_t {
            struct_size: std::mem::size_of::<ttpu_runtime_options_t>(),
            plugin_path: std::ptr::null(),
            cpu_device_count: 0,
            node_id,
            num_nodes,
            kv_store: kv,
        }
    }

    fn store_of(f: &Frontend) -> ttpu_kv_store_t {
        ttpu_kv_store_t {
            struct_size: std::mem::size_of::<ttpu_kv_store_t>(),
            user_data: f as *const Frontend as *mut c_void,
            get: Some(get),
            put: Some(put),
            release: Some(release),
        }
    }

    #[test]
    fn the_frontend_store_serves_core() {
        let f = Frontend::default();
        let kv = store_of(&f);
        let d = unsafe { distributed_options(&options(&kv, 1, 2)) }.unwrap();
        assert_eq!((d.node_id, d.num_nodes), (1, 2));
        d.store.put("topology/1", b"abc").unwrap();
        assert_eq!(f.map.lock().unwrap()[&b"topology/1".to_vec()], b"abc");
        assert_eq!(d.store.get("topology/1", Duration::from_secs(2)).unwrap(), b"abc");
        assert_eq!(d.store.try_get("topology/1").unwrap().unwrap(), b"abc");
        // An absent key: try_get is None, get keeps the frontend's code.
        assert_eq!(d.store.try_get("topology/0").unwrap(), None);
        let e = d.store.get("topology/0", Duration::from_millis(250)).unwrap_err();
        assert_eq!((e.code(), e.to_string()), (Code::DeadlineExceeded, "waited in vain".to_string()));
        let e = d.store.put("read-only", b"x").unwrap_err();
        assert_eq!(e.code(), Code::PermissionDenied);
        let gets = f.gets.lock().unwrap().clone();
        assert_eq!(
            gets,
            vec![
                ("topology/1".into(), 2000),
                ("topology/1".into(), -1),
                ("topology/0".into(), -1),
                ("topology/0".into(), 250)
            ]
        );
        assert_eq!(*f.released.lock().unwrap(), 0);
        drop(d);
        assert_eq!(*f.released.lock().unwrap(), 1);
    }

    #[test]
    fn bad_stores_are_rejected_and_released_once_owned() {
        let f = Frontend::default();
        let mut kv = store_of(&f);
        // Node outside 0..num_nodes: the store was taken, so it is released.
        let e = unsafe { distributed_options(&options(&kv, 2, 2)) }.err().unwrap();
        assert!(e.to_string().contains("node_id 2 is not in 0..num_nodes (2)"), "{e}");
        assert_eq!(*f.released.lock().unwrap(), 1);
        // No put callback, or a short struct: rejected, not released.
        kv.put = None;
        let e = unsafe { distributed_options(&options(&kv, 0, 2)) }.err().unwrap();
        assert!(e.to_string().contains("both its get and put"), "{e}");
        kv.put = Some(put);
        kv.struct_size = 8;
        let e = unsafe { distributed_options(&options(&kv, 0, 2)) }.err().unwrap();
        assert!(e.to_string().contains("ttpu_kv_store_t"), "{e}");
        assert_eq!(*f.released.lock().unwrap(), 1);
    }
}
