//! The plugin area: loading WebAssembly plugins and listing what they
//! provide. Plugins are process-wide: once loaded, their ops are called
//! through `ttpu_op_call` like built-in ops (on any runtime), and their
//! fusion policies are selected with `ttpu_runtime_set_fusion_policy`.
//! Plugins in the directories of `$TORCHTPU_PLUGIN_PATH` load when the
//! first runtime is created.

use std::ffi::c_char;
use std::path::Path;

use torchtpu_core::plugin::{host, Limits, Plugin};
use torchtpu_core::{Error, Result};

use crate::error::ttpu_error_t;
use crate::ffi::{check_out, check_struct_size, str_arg, write_out};

/// The plugin ABI version this library implements (plugins/ABI.md).
pub const TTPU_PLUGIN_ABI_MAJOR: u32 = 1;
/// The plugin ABI minor version (plugins built for a higher minor are rejected).
pub const TTPU_PLUGIN_ABI_MINOR: u32 = 0;

const _: () = assert!(
    TTPU_PLUGIN_ABI_MAJOR == torchtpu_core::plugin::ABI_MAJOR && TTPU_PLUGIN_ABI_MINOR == torchtpu_core::plugin::ABI_MINOR
);

/// Loads the plugin file `path`, or every `.wasm` file in the directory
/// `path`, with the default limits (or those of `TORCHTPU_PLUGIN_FUEL`,
/// `TORCHTPU_PLUGIN_TIMEOUT_MS`, `TORCHTPU_PLUGIN_MEMORY_MB`,
/// `TORCHTPU_PLUGIN_MAX_MODULE_MB`, `TORCHTPU_PLUGIN_MAX_FUNCTIONS`,
/// `TORCHTPU_PLUGIN_COMPILE_TIMEOUT_MS`). Loading a file that is already
/// loaded is a no-op. If some files are rejected (bad manifest, ABI version,
/// duplicate name, forbidden import, a limit, a `.wasm` that is not a
/// regular file, ...), the others still load and the error
/// (INVALID_ARGUMENT) names every rejected file and why; each is also listed
/// by `ttpu_plugin_rejection`.
#[no_mangle]
pub unsafe extern "C" fn ttpu_plugin_load(path: *const c_char) -> *mut ttpu_error_t {
    ffi_boundary!({
        crate::runtime::init_logging();
        let path = str_arg(path, "ttpu_plugin_load: path")?;
        let p = Path::new(path);
        // A dangling symlink is there (and reported by the loader as one).
        if std::fs::symlink_metadata(p).is_err() {
            return Err(Error::NotFound(format!("ttpu_plugin_load: {path}: no such file or directory")));
        }
        host().load(p, Limits::from_env()).into_result().map(|_| ())
    })
}

/// Loads the plugins of `$TORCHTPU_PLUGIN_PATH` now, as creating the first
/// runtime does (once per process; later calls do nothing). Returns an error
/// naming the rejected files, if any (the others load).
#[no_mangle]
pub extern "C" fn ttpu_plugin_load_env() -> *mut ttpu_error_t {
    ffi_boundary!({
        crate::runtime::init_logging();
        let rejected = host().load_env();
        torchtpu_core::plugin::LoadReport { loaded: Vec::new(), rejected }.into_result().map(|_| ())
    })
}

/// The number of loaded plugins.
#[no_mangle]
pub extern "C" fn ttpu_plugin_count() -> usize {
    crate::ffi::no_panic(0, || host().plugins().len())
}

/// A loaded plugin. Strings are NUL-terminated and live until the process
/// exits (plugins are never unloaded). Set `struct_size` before calling.
#[repr(C)]
pub struct ttpu_plugin_info_t {
    pub struct_size: usize,
    pub name: *const c_char,
    pub version: *const c_char,
    /// The file it was loaded from.
    pub path: *const c_char,
    /// The plugin ABI version it was built for.
    pub abi_major: u32,
    pub abi_minor: u32,
    pub num_ops: usize,
    pub num_policies: usize,
    /// Counters: calls into the module, failed calls, and lowerings served
    /// from the checked-fragment cache or asked of the plugin.
    pub calls: u64,
    pub failures: u64,
    pub lowering_hits: u64,
    pub lowering_misses: u64,
}

fn plugin_at(index: usize, what: &str) -> Result<std::sync::Arc<Plugin>> {
    let all = host().plugins();
    all.get(index).cloned().ok_or_else(|| Error::InvalidArgument(format!("{what}: plugin index {index} >= plugin count {}", all.len())))
}

/// Fills `*out_info` for plugin `index` (0-based, < `ttpu_plugin_count()`).
#[no_mangle]
pub unsafe extern "C" fn ttpu_plugin_info(index: usize, out_info: *mut ttpu_plugin_info_t) -> *mut ttpu_error_t {
    ffi_boundary!({
        let what = "ttpu_plugin_info";
        check_out(out_info, what)?;
        let size = (*out_info).struct_size;
        check_struct_size(size, std::mem::size_of::<ttpu_plugin_info_t>(), "ttpu_plugin_info: ttpu_plugin_info_t")?;
        let p = plugin_at(index, what)?;
        let (c, m, n) = (p.c(), &p.manifest, p.counts());
        out_info.write(ttpu_plugin_info_t {
            struct_size: size,
            name: c.name.as_ptr(),
            version: c.version.as_ptr(),
            path: c.path.as_ptr(),
            abi_major: m.abi.major,
            abi_minor: m.abi.minor,
            num_ops: m.ops.len(),
            num_policies: m.policies.len(),
            calls: n.calls,
            failures: n.failures,
            lowering_hits: n.lowering_hits,
            lowering_misses: n.lowering_misses,
        });
        Ok(())
    })
}

/// One op of a plugin. Strings live until the process exits.
#[repr(C)]
pub struct ttpu_plugin_op_t {
    pub struct_size: usize,
    /// The op name, e.g. "rms_norm::rms_norm", as `ttpu_op_call` takes it.
    pub name: *const c_char,
    /// Its declaration, e.g. "rms_norm::rms_norm(Tensor x, Tensor weight, float eps=1e-06) -> Tensor".
    pub schema: *const c_char,
    /// The op that computes its gradients, or NULL.
    pub backward: *const c_char,
}

/// Fills `*out_op` for op `op` (< `num_ops`) of plugin `index`.
#[no_mangle]
pub unsafe extern "C" fn ttpu_plugin_op(index: usize, op: usize, out_op: *mut ttpu_plugin_op_t) -> *mut ttpu_error_t {
    ffi_boundary!({
        let what = "ttpu_plugin_op";
        check_out(out_op, what)?;
        let size = (*out_op).struct_size;
        check_struct_size(size, std::mem::size_of::<ttpu_plugin_op_t>(), "ttpu_plugin_op: ttpu_plugin_op_t")?;
        let p = plugin_at(index, what)?;
        let ops = &p.c().ops;
        let (name, schema, backward) = ops.get(op).ok_or_else(|| {
            Error::InvalidArgument(format!("{what}: op index {op} >= {} ops of plugin '{}'", ops.len(), p.name()))
        })?;
        out_op.write(ttpu_plugin_op_t {
            struct_size: size,
            name: name.as_ptr(),
            schema: schema.as_ptr(),
            backward: backward.as_ref().map_or(std::ptr::null(), |b| b.as_ptr()),
        });
        Ok(())
    })
}

/// Writes the name of policy `policy` (< `num_policies`) of plugin `index`
/// ("<plugin>::<policy>", static storage) to `*out_name`.
#[no_mangle]
pub unsafe extern "C" fn ttpu_plugin_policy_name(index: usize, policy: usize, out_name: *mut *const c_char) -> *mut ttpu_error_t {
    ffi_boundary!({
        let what = "ttpu_plugin_policy_name";
        let p = plugin_at(index, what)?;
        let names = &p.c().policies;
        let n = names.get(policy).ok_or_else(|| {
            Error::InvalidArgument(format!("{what}: policy index {policy} >= {} policies of plugin '{}'", names.len(), p.name()))
        })?;
        write_out(out_name, what, n.as_ptr())
    })
}

/// The number of plugin files rejected so far in this process (by
/// `ttpu_plugin_load`, `ttpu_plugin_load_env` or `$TORCHTPU_PLUGIN_PATH`),
/// including `.wasm` entries of a directory that were skipped because they
/// are not regular files.
#[no_mangle]
pub extern "C" fn ttpu_plugin_rejection_count() -> usize {
    crate::ffi::no_panic(0, || host().rejections().len())
}

/// A plugin file that was not loaded, and why. Strings are NUL-terminated
/// and live until the process exits (rejections are kept for the process).
/// Set `struct_size` before calling.
#[repr(C)]
pub struct ttpu_plugin_rejection_t {
    pub struct_size: usize,
    /// The file (or directory) that was rejected.
    pub path: *const c_char,
    /// Why, naming the file and, for a limit, the limit and the environment
    /// variable that raises it.
    pub message: *const c_char,
}
crate::ffi::v1_ends_at!(ttpu_plugin_rejection_t, message: *const c_char);

/// Fills `*out_rejection` for rejection `index` (0-based, in the order they
/// happened, < `ttpu_plugin_rejection_count()`).
#[no_mangle]
pub unsafe extern "C" fn ttpu_plugin_rejection(index: usize, out_rejection: *mut ttpu_plugin_rejection_t) -> *mut ttpu_error_t {
    ffi_boundary!({
        let what = "ttpu_plugin_rejection";
        let size = crate::ffi::out_struct_size(out_rejection, what)?;
        let all = host().rejections();
        let r = all.get(index).ok_or_else(|| {
            Error::InvalidArgument(format!("{what}: rejection index {index} >= rejection count {}", all.len()))
        })?;
        // The host keeps every rejection (and so its strings) for the life
        // of the process; `all` only holds clones of them.
        let (path, message) = r.c();
        crate::ffi::write_fitting(out_rejection, ttpu_plugin_rejection_t { struct_size: size, path: path.as_ptr(), message: message.as_ptr() }, size);
        Ok(())
    })
}
