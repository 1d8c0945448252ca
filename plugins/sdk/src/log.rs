//! Logging to the host: `log::info("...")` becomes a `tracing` event of the
//! host, tagged with the plugin's name. The host caps lines per call.

use torchtpu_plugin_abi::imports;

#[cfg(target_arch = "wasm32")]
#[link(wasm_import_module = "torchtpu")]
extern "C" {
    #[link_name = "log"]
    fn host_log(level: i32, ptr: i32, len: i32);
}

fn emit(level: i32, msg: &str) {
    #[cfg(target_arch = "wasm32")]
    // SAFETY: the host reads `len` bytes at `ptr` of this module's memory,
    // where `msg` lives for the duration of the call.
    unsafe {
        host_log(level, msg.as_ptr() as i32, msg.len() as i32)
    }
    #[cfg(not(target_arch = "wasm32"))]
    eprintln!("[plugin log {level}] {msg}");
}

pub fn error(msg: &str) {
    emit(imports::LEVEL_ERROR, msg)
}
pub fn warn(msg: &str) {
    emit(imports::LEVEL_WARN, msg)
}
pub fn info(msg: &str) {
    emit(imports::LEVEL_INFO, msg)
}
pub fn debug(msg: &str) {
    emit(imports::LEVEL_DEBUG, msg)
}
