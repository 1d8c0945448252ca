//! The tensor area: creating tensors from host memory, copying them back,
//! and reading their metadata.
//!
//! A `ttpu_tensor_t` is a view `(storage, offset, sizes, strides)` of device
//! memory. Several handles may share a storage (views); a write through one
//! is seen by all. Handles are thread-safe.

use std::ffi::c_void;

use torchtpu_core::{DType, Error, Tensor};

use crate::error::ttpu_error_t;
use crate::ffi::{check_out, slice_arg, write_out, Handle};
use crate::runtime::ttpu_runtime_t;

/// Element types. The values are PyTorch's `c10::ScalarType` codes.
#[repr(i32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ttpu_dtype {
    Uint8 = 0,
    Int8 = 1,
    Int16 = 2,
    Int32 = 3,
    Int64 = 4,
    Float16 = 5,
    Float32 = 6,
    Float64 = 7,
    /// Interleaved float32 real and imaginary parts (since API 1.8).
    Complex64 = 9,
    /// Interleaved float64 real and imaginary parts (since API 1.8).
    Complex128 = 10,
    Bool = 11,
    Bfloat16 = 15,
}

/// A tensor handle. Owned by the caller; free with `ttpu_tensor_destroy`.
pub struct ttpu_tensor_t {
    magic: u64,
    pub(crate) t: Tensor,
}

impl_handle!(ttpu_tensor_t, "ttpu_tensor_t", 0x7474_7075_5445_4e53);

impl ttpu_tensor_t {
    pub(crate) fn new(t: Tensor) -> *mut ttpu_tensor_t {
        ttpu_tensor_t { magic: Self::MAGIC, t }.into_raw()
    }
}

pub(crate) fn dtype_arg(code: i32, what: &str) -> torchtpu_core::Result<DType> {
    DType::from_code(code).ok_or_else(|| Error::UnsupportedDType {
        op: what.to_string(),
        dtype: DType::describe_code(code),
        detail: String::new(),
    })
}

/// Copies `nbytes` of dense row-major host data of `dtype` (a `ttpu_dtype`)
/// and shape `sizes[0..ndim]` to device `device`. `data` is borrowed for
/// the call only. On success `*out_tensor` owns a new tensor.
#[no_mangle]
pub unsafe extern "C" fn ttpu_tensor_from_host(
    runtime: *const ttpu_runtime_t,
    data: *const c_void,
    nbytes: usize,
    dtype: i32,
    sizes: *const i64,
    ndim: usize,
    device: i64,
    out_tensor: *mut *mut ttpu_tensor_t,
) -> *mut ttpu_error_t {
    ffi_boundary!({
        let what = "ttpu_tensor_from_host";
        let r = ttpu_runtime_t::enter(runtime, what)?;
        check_out(out_tensor, what)?;
        let dtype = dtype_arg(dtype, what)?;
        let sizes = slice_arg(sizes, ndim, what)?;
        let data = slice_arg(data as *const u8, nbytes, what)?;
        let device = r.rt.device(device)?;
        let t = r.rt.tensor_from_host(data, dtype, sizes, device)?;
        write_out(out_tensor, what, ttpu_tensor_t::new(t))
    })
}

/// Copies the tensor's elements into `dst` (dense, row-major; `nbytes` must
/// equal numel * element size), waiting for pending work on it. Reports an
/// out-of-range index that a pending index check found (any op's, as
/// `TTPU_CODE_OUT_OF_RANGE`; see `ttpu_runtime_set_index_checks`) instead
/// of copying.
#[no_mangle]
pub unsafe extern "C" fn ttpu_tensor_to_host(
    runtime: *const ttpu_runtime_t,
    tensor: *const ttpu_tensor_t,
    dst: *mut c_void,
    nbytes: usize,
) -> *mut ttpu_error_t {
    ffi_boundary!({
        let what = "ttpu_tensor_to_host";
        let r = ttpu_runtime_t::enter(runtime, what)?;
        let t = &ttpu_tensor_t::borrow(tensor, what)?.t;
        if nbytes == 0 {
            return r.rt.tensor_to_host_into(t, &mut []);
        }
        if dst.is_null() {
            return Err(Error::InvalidArgument(format!("{what}: dst is NULL")));
        }
        r.rt.tensor_to_host_into(t, std::slice::from_raw_parts_mut(dst as *mut u8, nbytes))
    })
}

/// A new handle to the same view (the storage is shared, not copied).
#[no_mangle]
pub unsafe extern "C" fn ttpu_tensor_retain(
    tensor: *const ttpu_tensor_t,
    out_tensor: *mut *mut ttpu_tensor_t,
) -> *mut ttpu_error_t {
    ffi_boundary!({
        let t = &ttpu_tensor_t::borrow(tensor, "ttpu_tensor_retain")?.t;
        check_out(out_tensor, "ttpu_tensor_retain")?;
        write_out(out_tensor, "ttpu_tensor_retain", ttpu_tensor_t::new(t.clone()))
    })
}

/// A new handle viewing the storage of `tensor` with the geometry
/// `(offset, sizes[0..ndim], strides[0..ndim])`, in elements and absolute in
/// the storage (like `as_strided`). Writes through the view update the
/// storage every other view sees. Fails with INVALID_ARGUMENT when the view
/// reaches outside the storage or has a negative size, stride or offset.
#[no_mangle]
pub unsafe extern "C" fn ttpu_tensor_view(
    tensor: *const ttpu_tensor_t,
    sizes: *const i64,
    strides: *const i64,
    ndim: usize,
    offset: i64,
    out_tensor: *mut *mut ttpu_tensor_t,
) -> *mut ttpu_error_t {
    ffi_boundary!({
        const WHAT: &str = "ttpu_tensor_view";
        let t = &ttpu_tensor_t::borrow(tensor, WHAT)?.t;
        check_out(out_tensor, WHAT)?;
        let sizes = slice_arg(sizes, ndim, WHAT)?;
        let strides = slice_arg(strides, ndim, WHAT)?;
        let v = t.view_of(WHAT, offset, sizes, strides)?;
        write_out(out_tensor, WHAT, ttpu_tensor_t::new(v))
    })
}

/// Frees a tensor handle; the device memory is freed with its last view.
/// NULL is a no-op. Use after destroy is detected: the handle is marked
/// destroyed and kept in a quarantine of the 65536 most recently destroyed
/// handles (of all kinds), so while it is there any use of it fails with
/// INVALID_ARGUMENT ("ttpu_tensor_t was already destroyed"), getters return
/// their invalid-handle value, and destroying it again is a no-op. Beyond
/// that bound a use of the pointer is undefined behaviour.
#[no_mangle]
pub unsafe extern "C" fn ttpu_tensor_destroy(tensor: *mut ttpu_tensor_t) {
    crate::ffi::no_panic((), || ttpu_tensor_t::destroy(tensor));
}

/// The element type (a `ttpu_dtype`), or -1 for an invalid handle.
#[no_mangle]
pub unsafe extern "C" fn ttpu_tensor_dtype(tensor: *const ttpu_tensor_t) -> i32 {
    ttpu_tensor_t::borrow(tensor, "").map_or(-1, |h| h.t.dtype().code())
}

/// The number of dimensions, or 0 for an invalid handle. A 0-d tensor also
/// has 0: `ttpu_tensor_ndim_checked` reports an invalid handle as an error
/// (as do `ttpu_tensor_dtype`, -1, and `ttpu_tensor_numel`, -1).
#[no_mangle]
pub unsafe extern "C" fn ttpu_tensor_ndim(tensor: *const ttpu_tensor_t) -> usize {
    ttpu_tensor_t::borrow(tensor, "").map_or(0, |h| h.t.rank())
}

/// Writes the number of dimensions to `*out_ndim`; INVALID_ARGUMENT (and
/// nothing written) for NULL, a destroyed handle or another type's
/// pointer. Since API 1.7.
#[no_mangle]
pub unsafe extern "C" fn ttpu_tensor_ndim_checked(tensor: *const ttpu_tensor_t, out_ndim: *mut usize) -> *mut ttpu_error_t {
    ffi_boundary!({
        let what = "ttpu_tensor_ndim_checked";
        let h = ttpu_tensor_t::borrow(tensor, what)?;
        write_out(out_ndim, what, h.t.rank())
    })
}

/// The sizes (`ndim` entries). Borrowed: valid while the handle lives.
#[no_mangle]
pub unsafe extern "C" fn ttpu_tensor_sizes(tensor: *const ttpu_tensor_t) -> *const i64 {
    ttpu_tensor_t::borrow(tensor, "").map_or(std::ptr::null(), |h| h.t.sizes().as_ptr())
}

/// The strides in elements (`ndim` entries). Borrowed: valid while the handle lives.
#[no_mangle]
pub unsafe extern "C" fn ttpu_tensor_strides(tensor: *const ttpu_tensor_t) -> *const i64 {
    ttpu_tensor_t::borrow(tensor, "").map_or(std::ptr::null(), |h| h.t.strides().as_ptr())
}

/// The offset into the storage, in elements.
#[no_mangle]
pub unsafe extern "C" fn ttpu_tensor_offset(tensor: *const ttpu_tensor_t) -> i64 {
    ttpu_tensor_t::borrow(tensor, "").map_or(-1, |h| h.t.offset())
}

/// The number of elements.
#[no_mangle]
pub unsafe extern "C" fn ttpu_tensor_numel(tensor: *const ttpu_tensor_t) -> i64 {
    ttpu_tensor_t::borrow(tensor, "").map_or(-1, |h| h.t.numel())
}

/// The device index the tensor lives on.
#[no_mangle]
pub unsafe extern "C" fn ttpu_tensor_device(tensor: *const ttpu_tensor_t) -> i64 {
    ttpu_tensor_t::borrow(tensor, "").map_or(-1, |h| h.t.device() as i64)
}

/// The number of elements of the tensor's storage (shared by its views).
#[no_mangle]
pub unsafe extern "C" fn ttpu_tensor_storage_numel(tensor: *const ttpu_tensor_t) -> i64 {
    ttpu_tensor_t::borrow(tensor, "").map_or(-1, |h| h.t.storage().numel())
}

/// Whether two tensors are views of the same storage.
#[no_mangle]
pub unsafe extern "C" fn ttpu_tensor_same_storage(a: *const ttpu_tensor_t, b: *const ttpu_tensor_t) -> bool {
    match (ttpu_tensor_t::borrow(a, ""), ttpu_tensor_t::borrow(b, "")) {
        (Ok(a), Ok(b)) => a.t.same_storage(&b.t),
        _ => false,
    }
}
