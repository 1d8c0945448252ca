//! The key-value store a multi-process PJRT client rendezvouses through.
//!
//! Plugins whose client spans processes (the GPU plugins given `node_id` and
//! `num_nodes`, some TPU setups) exchange topology and communicator ids
//! through `kv_get_callback`, `kv_try_get_callback` and `kv_put_callback`,
//! given to `PJRT_Client_Create`. The frontend supplies the store (PyTorch's
//! c10d store, so one rendezvous serves everything); this module adapts any
//! [`KeyValueStore`] to those three C callbacks.
//!
//! The callbacks run on PJRT's threads, possibly several at a time, and must
//! never unwind into the plugin: a panic in a store becomes a PJRT error.

use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::Duration;

use super::sys;
use crate::error::{Code, Error, Result};

/// A store shared by every process of one PJRT client. Thread-safe: PJRT
/// calls it from any thread, concurrently.
pub trait KeyValueStore: Send + Sync {
    /// The value of `key`, waiting up to `timeout` for another process to
    /// put it; a [`Code::DeadlineExceeded`] error past that.
    fn get(&self, key: &str, timeout: Duration) -> Result<Vec<u8>>;
    /// The value of `key` if some process has put it, without waiting.
    fn try_get(&self, key: &str) -> Result<Option<Vec<u8>>>;
    fn put(&self, key: &str, value: &[u8]) -> Result<()>;
}

/// How a process joins a client that spans `num_nodes` processes.
#[derive(Clone)]
pub struct DistributedOptions {
    /// This process's index, `0..num_nodes` (PJRT's `node_id`).
    pub node_id: usize,
    pub num_nodes: usize,
    pub store: Arc<dyn KeyValueStore>,
}

impl std::fmt::Debug for DistributedOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DistributedOptions(node {} of {})", self.node_id, self.num_nodes)
    }
}

impl DistributedOptions {
    pub fn check(&self) -> Result<()> {
        if self.num_nodes == 0 || self.node_id >= self.num_nodes {
            return Err(Error::InvalidArgument(format!(
                "node_id {} is not in 0..num_nodes ({})",
                self.node_id, self.num_nodes
            )));
        }
        Ok(())
    }
}

/// What the client's `user_arg` points at. Boxed, so its address is stable
/// for as long as the client lives (the client owns it).
pub(crate) struct Bridge {
    store: Arc<dyn KeyValueStore>,
}

impl Bridge {
    pub(crate) fn new(store: Arc<dyn KeyValueStore>) -> Box<Bridge> {
        Box::new(Bridge { store })
    }

    /// Points `a`'s three callbacks at this bridge.
    pub(crate) fn install(&self, a: &mut sys::PJRT_Client_Create_Args) {
        let user = self as *const Bridge as *mut c_void;
        a.kv_get_callback = Some(kv_get);
        a.kv_get_user_arg = user;
        a.kv_try_get_callback = Some(kv_try_get);
        a.kv_try_get_user_arg = user;
        a.kv_put_callback = Some(kv_put);
        a.kv_put_user_arg = user;
    }
}

fn key_of(key: *const std::ffi::c_char, size: usize) -> String {
    if key.is_null() {
        return String::new();
    }
    // SAFETY: PJRT passes `key_size` readable bytes at `key`.
    String::from_utf8_lossy(unsafe { std::slice::from_raw_parts(key as *const u8, size) }).into_owned()
}

/// Runs `body`; turns its error or panic into a PJRT error made by the
/// plugin's own `callback_error`.
fn guarded(
    what: &str,
    key: &str,
    callback_error: *mut sys::PJRT_CallbackError,
    body: impl FnOnce() -> Result<()>,
) -> *mut sys::PJRT_Error {
    let outcome = catch_unwind(AssertUnwindSafe(body)).unwrap_or_else(|panic| {
        let msg = panic
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| panic.downcast_ref::<&str>().copied())
            .unwrap_or("a panic");
        Err(Error::Internal(format!("the key-value store panicked: {msg}")))
    });
    let Err(e) = outcome else { return std::ptr::null_mut() };
    let code = e.code();
    let message = format!("torchtpu key-value store: {what} '{key}': {e}");
    tracing::debug!("{message}");
    // SAFETY: PJRT passes a pointer to its error constructor, which copies
    // the message.
    match unsafe { callback_error.as_ref() }.and_then(|f| *f) {
        Some(make) => unsafe { make(code as sys::PJRT_Error_Code, message.as_ptr() as *const _, message.len()) },
        None => {
            // No way to report it: PJRT always passes one, so this is a
            // plugin bug. Keep the process alive and say so.
            tracing::error!("{message} (and the plugin gave no callback_error to report it with)");
            std::ptr::null_mut()
        }
    }
}

/// Hands `value` to PJRT with the matching deleter.
fn give(value: Vec<u8>, out: &mut *mut std::ffi::c_char, out_size: &mut usize) {
    // A boxed slice whose length travels in front of the bytes, so the
    // deleter (which gets only the pointer) can rebuild the allocation.
    let mut buf = Vec::with_capacity(value.len() + 8);
    buf.extend_from_slice(&(value.len() as u64).to_ne_bytes());
    buf.extend_from_slice(&value);
    let raw = Box::into_raw(buf.into_boxed_slice()) as *mut u8;
    *out = unsafe { raw.add(8) } as *mut _;
    *out_size = value.len();
}

unsafe extern "C" fn free_value(value: *mut std::ffi::c_char) {
    if value.is_null() {
        return;
    }
    let start = (value as *mut u8).sub(8);
    let len = u64::from_ne_bytes(std::ptr::read_unaligned(start as *const [u8; 8])) as usize;
    drop(Box::from_raw(std::ptr::slice_from_raw_parts_mut(start, len + 8)));
}

unsafe extern "C" fn kv_get(a: *mut sys::PJRT_KeyValueGetCallback_Args) -> *mut sys::PJRT_Error {
    let a = &mut *a;
    let key = key_of(a.key, a.key_size);
    let bridge = &*(a.user_arg as *const Bridge);
    let timeout = Duration::from_millis(a.timeout_in_ms.max(0) as u64);
    let (out, out_size) = (&mut a.value, &mut a.value_size);
    let err = guarded("get", &key, a.callback_error, || {
        give(bridge.store.get(&key, timeout)?, out, out_size);
        Ok(())
    });
    if err.is_null() {
        a.value_deleter_callback = Some(free_value);
    }
    err
}

unsafe extern "C" fn kv_try_get(a: *mut sys::PJRT_KeyValueTryGetCallback_Args) -> *mut sys::PJRT_Error {
    let a = &mut *a;
    let key = key_of(a.key, a.key_size);
    let bridge = &*(a.user_arg as *const Bridge);
    let (out, out_size) = (&mut a.value, &mut a.value_size);
    let err = guarded("try_get", &key, a.callback_error, || match bridge.store.try_get(&key)? {
        Some(v) => {
            give(v, out, out_size);
            Ok(())
        }
        None => Err(Error::NotFound("not set".into())),
    });
    if err.is_null() {
        a.value_deleter_callback = Some(free_value);
    }
    err
}

unsafe extern "C" fn kv_put(a: *mut sys::PJRT_KeyValuePutCallback_Args) -> *mut sys::PJRT_Error {
    let a = &*a;
    let key = key_of(a.key, a.key_size);
    let bridge = &*(a.user_arg as *const Bridge);
    let value =
        if a.value.is_null() { &[][..] } else { std::slice::from_raw_parts(a.value as *const u8, a.value_size) };
    guarded("put", &key, a.callback_error, || bridge.store.put(&key, value))
}

/// A store in this process's memory: for a single-process client, and for
/// tests.
#[derive(Default)]
pub struct MemoryStore {
    map: parking_lot::Mutex<std::collections::HashMap<String, Vec<u8>>>,
    changed: parking_lot::Condvar,
}

impl KeyValueStore for MemoryStore {
    fn get(&self, key: &str, timeout: Duration) -> Result<Vec<u8>> {
        let deadline = std::time::Instant::now() + timeout;
        let mut map = self.map.lock();
        loop {
            if let Some(v) = map.get(key) {
                return Ok(v.clone());
            }
            if self.changed.wait_until(&mut map, deadline).timed_out() && !map.contains_key(key) {
                return Err(Error::KeyValue {
                    code: Code::DeadlineExceeded,
                    message: format!("no process put it within {} ms", timeout.as_millis()),
                });
            }
        }
    }
    fn try_get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        Ok(self.map.lock().get(key).cloned())
    }
    fn put(&self, key: &str, value: &[u8]) -> Result<()> {
        self.map.lock().insert(key.to_string(), value.to_vec());
        self.changed.notify_all();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Stands in for the plugin's error constructor: records what the
    /// callback reported and returns a recognizable pointer.
    static REPORTED: parking_lot::Mutex<Vec<(u32, String)>> = parking_lot::Mutex::new(Vec::new());
    unsafe extern "C" fn record_error(
        code: sys::PJRT_Error_Code,
        msg: *const std::ffi::c_char,
        len: usize,
    ) -> *mut sys::PJRT_Error {
        let text = String::from_utf8_lossy(std::slice::from_raw_parts(msg as *const u8, len)).into_owned();
        REPORTED.lock().push((code as u32, text));
        8 as *mut sys::PJRT_Error
    }
    static MAKE_ERROR: sys::PJRT_CallbackError = Some(record_error);

    fn get(bridge: &Bridge, key: &str, timeout_ms: i32) -> (*mut sys::PJRT_Error, Option<Vec<u8>>) {
        let mut a: sys::PJRT_KeyValueGetCallback_Args = unsafe { std::mem::zeroed() };
        a.struct_size = std::mem::size_of_val(&a);
        a.key = key.as_ptr() as *const _;
        a.key_size = key.len();
        a.timeout_in_ms = timeout_ms;
        a.callback_error = &MAKE_ERROR as *const _ as *mut _;
        a.user_arg = bridge as *const Bridge as *mut c_void;
        let err = unsafe { kv_get(&mut a) };
        (err, taken(err, a.value, a.value_size, a.value_deleter_callback))
    }

    /// As PJRT does after a successful get: copies the value, then frees it
    /// with the deleter the callback set.
    fn taken(
        err: *mut sys::PJRT_Error,
        value: *mut std::ffi::c_char,
        size: usize,
        deleter: Option<unsafe extern "C" fn(*mut std::ffi::c_char)>,
    ) -> Option<Vec<u8>> {
        if !err.is_null() {
            return None;
        }
        let v = unsafe { std::slice::from_raw_parts(value as *const u8, size) }.to_vec();
        unsafe { deleter.expect("a deleter")(value) };
        Some(v)
    }

    fn put(bridge: &Bridge, key: &str, value: &[u8]) -> *mut sys::PJRT_Error {
        let mut a: sys::PJRT_KeyValuePutCallback_Args = unsafe { std::mem::zeroed() };
        a.struct_size = std::mem::size_of_val(&a);
        a.key = key.as_ptr() as *const _;
        a.key_size = key.len();
        a.value = value.as_ptr() as *const _;
        a.value_size = value.len();
        a.callback_error = &MAKE_ERROR as *const _ as *mut _;
        a.user_arg = bridge as *const Bridge as *mut c_void;
        unsafe { kv_put(&mut a) }
    }

    fn try_get(bridge: &Bridge, key: &str) -> (*mut sys::PJRT_Error, Option<Vec<u8>>) {
        let mut a: sys::PJRT_KeyValueTryGetCallback_Args = unsafe { std::mem::zeroed() };
        a.struct_size = std::mem::size_of_val(&a);
        a.key = key.as_ptr() as *const _;
        a.key_size = key.len();
        a.callback_error = &MAKE_ERROR as *const _ as *mut _;
        a.user_arg = bridge as *const Bridge as *mut c_void;
        let err = unsafe { kv_try_get(&mut a) };
        (err, taken(err, a.value, a.value_size, a.value_deleter_callback))
    }

    #[test]
    fn callbacks_reach_the_store_as_pjrt_calls_them() {
        let store = Arc::new(MemoryStore::default());
        let bridge = Bridge::new(store.clone());
        assert!(put(&bridge, "gpu:local_topology/0", b"\x01\x02topology").is_null());
        assert_eq!(store.try_get("gpu:local_topology/0").unwrap().unwrap(), b"\x01\x02topology");
        assert_eq!(get(&bridge, "gpu:local_topology/0", 10).1.unwrap(), b"\x01\x02topology");
        assert!(put(&bridge, "empty", b"").is_null());
        assert_eq!(get(&bridge, "empty", 10).1.unwrap(), b"");
        assert_eq!(try_get(&bridge, "empty").1.unwrap(), b"");

        // Another process's put, made while this one waits.
        let late = store.clone();
        let writer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            late.put("nccl_id", b"42").unwrap();
        });
        assert_eq!(get(&bridge, "nccl_id", 5000).1.unwrap(), b"42");
        writer.join().unwrap();
    }

    #[test]
    fn missing_keys_are_pjrt_errors_with_their_codes() {
        let bridge = Bridge::new(Arc::new(MemoryStore::default()));
        let (err, _) = get(&bridge, "never", 20);
        assert_eq!(err as usize, 8);
        let (err, _) = try_get(&bridge, "never either");
        assert_eq!(err as usize, 8);
        let reported = REPORTED.lock().clone();
        let find = |k: &str| reported.iter().find(|(_, m)| m.contains(k)).cloned().expect(k);
        let (code, msg) = find("'never'");
        assert_eq!(code, Code::DeadlineExceeded as u32);
        assert!(msg.contains("get 'never'") && msg.contains("within 20 ms"), "{msg}");
        let (code, msg) = find("'never either'");
        assert_eq!(code, Code::NotFound as u32, "{msg}");
    }

    #[test]
    fn a_panicking_store_is_an_error_not_an_unwind() {
        struct Broken;
        impl KeyValueStore for Broken {
            fn get(&self, _: &str, _: Duration) -> Result<Vec<u8>> {
                panic!("connection lost")
            }
            fn try_get(&self, _: &str) -> Result<Option<Vec<u8>>> {
                panic!("connection lost")
            }
            fn put(&self, _: &str, _: &[u8]) -> Result<()> {
                panic!("connection lost")
            }
        }
        let bridge = Bridge::new(Arc::new(Broken));
        assert_eq!(put(&bridge, "panicky", b"x") as usize, 8);
        let reported = REPORTED.lock().clone();
        let (code, msg) = reported.iter().find(|(_, m)| m.contains("'panicky'")).cloned().unwrap();
        assert_eq!(code, Code::Internal as u32);
        assert!(msg.contains("panicked: connection lost"), "{msg}");
    }

    #[test]
    fn node_ids_are_checked() {
        let store: Arc<dyn KeyValueStore> = Arc::new(MemoryStore::default());
        let opts = |node_id, num_nodes| DistributedOptions { node_id, num_nodes, store: store.clone() };
        assert!(opts(1, 2).check().is_ok());
        assert!(opts(2, 2).check().unwrap_err().to_string().contains("node_id 2 is not in 0..num_nodes (2)"));
        assert!(opts(0, 0).check().is_err());
    }
}
