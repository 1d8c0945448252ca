//! What the exports of [`crate::plugin!`] run: guest memory for the host,
//! and the request/response round trip of each entry point. Nothing here
//! panics on bad input; a malformed request is an `{"err": ...}` answer.

use serde::de::DeserializeOwned;
use serde::Serialize;
use torchtpu_plugin_abi::{pack, Envelope, LowerRequest, PolicyRequest};

use crate::{DecideFn, LowerFn};

/// A buffer of `len` bytes for the host to write a request into.
pub fn alloc(len: i32) -> i32 {
    let b: Box<[u8]> = vec![0u8; len.max(0) as usize].into_boxed_slice();
    Box::into_raw(b) as *mut u8 as usize as i32
}

/// Frees a buffer from [`alloc`] or a response.
pub fn dealloc(ptr: i32, len: i32) {
    if ptr == 0 {
        return;
    }
    let p = std::ptr::slice_from_raw_parts_mut(ptr as usize as *mut u8, len.max(0) as usize);
    // SAFETY: the host passes back exactly a (ptr, len) this module handed
    // out, once: a boxed slice of that length.
    drop(unsafe { Box::from_raw(p) });
}

/// Leaks `bytes` for the host (which frees them with `ttpu_dealloc`).
fn respond<T: Serialize>(env: Envelope<T>) -> i64 {
    let bytes = serde_json::to_vec(&env)
        .unwrap_or_else(|e| format!("{{\"err\":\"cannot encode the response: {e}\"}}").into_bytes())
        .into_boxed_slice();
    let len = bytes.len() as u32;
    pack(Box::into_raw(bytes) as *mut u8 as usize as u32, len)
}

fn request<T: DeserializeOwned>(ptr: i32, len: i32) -> Result<T, String> {
    // SAFETY: the host wrote `len` bytes at `ptr`, a buffer from `alloc`.
    let bytes = unsafe { std::slice::from_raw_parts(ptr as usize as *const u8, len.max(0) as usize) };
    serde_json::from_slice(bytes).map_err(|e| format!("malformed request: {e}"))
}

/// The op name of a schema: the text before `(`.
fn op_name(schema: &str) -> &str {
    schema.split('(').next().unwrap_or(schema).trim()
}

pub fn lower(ptr: i32, len: i32, table: &[(&str, LowerFn)]) -> i64 {
    respond(match request::<LowerRequest>(ptr, len) {
        Ok(req) => match table.iter().find(|(schema, _)| op_name(schema) == req.op) {
            Some((_, f)) => match f(&req) {
                Ok(v) => Envelope::Ok(v),
                Err(e) => Envelope::Err(e),
            },
            None => Envelope::Err(format!("this plugin has no op {}", req.op)),
        },
        Err(e) => Envelope::Err(e),
    })
}

pub fn policy(ptr: i32, len: i32, table: &[(&str, DecideFn)]) -> i64 {
    respond(match request::<PolicyRequest>(ptr, len) {
        Ok(req) => match table.iter().find(|(name, _)| *name == req.policy) {
            Some((_, f)) => match f(&req) {
                Ok(v) => Envelope::Ok(v),
                Err(e) => Envelope::Err(e),
            },
            None => Envelope::Err(format!("this plugin has no policy {}", req.policy)),
        },
        Err(e) => Envelope::Err(e),
    })
}
