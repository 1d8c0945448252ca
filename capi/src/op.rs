//! The op area: calling any registered op by its aten name with a tagged
//! argument array (PyTorch's IValue in C), and listing ops.

use std::ffi::{c_char, c_void, CStr};

use torchtpu_core::{op_c_decl, op_c_name, op_count, op_declare, op_id, op_result_count, op_result_count_id, Error, Result, Scalar, Tensor, Value};

use crate::error::ttpu_error_t;
use crate::ffi::{check_out, check_struct_size, slice_arg, str_arg, write_out, Handle};
use crate::generator::ttpu_generator_t;
use crate::runtime::ttpu_runtime_t;
use crate::tensor::{dtype_arg, ttpu_tensor_t};

/// The kind of a `ttpu_value_t`, and which field carries it.
///
/// Which kind each schema type takes (the op's aten declaration,
/// `ttpu_op_schema`):
/// `Tensor` TENSOR or VIEW; `Tensor?` OPTIONAL_TENSOR, VIEW or NONE;
/// `Tensor[]` and `Tensor?[]` TENSOR_LIST or VIEW_LIST; `int`, `SymInt`
/// INT; `float` DOUBLE; `bool` BOOL; `str` STRING; `int[]`, `SymInt[]`,
/// `bool[]` INT_LIST; `float[]` DOUBLE_LIST; `Scalar` SCALAR_INT, SCALAR_DOUBLE or SCALAR_BOOL (a
/// runtime argument); `ScalarType` DTYPE; `Generator?` GENERATOR or NONE;
/// any optional (`T?`) NONE. Trailing arguments with defaults may be left
/// out.
#[repr(i32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ttpu_value_kind {
    /// None (an omitted optional argument).
    None = 0,
    /// `ptr` is a `const ttpu_tensor_t*`.
    Tensor = 1,
    /// `ptr` is a `const ttpu_tensor_t*` or NULL (None).
    OptionalTensor = 2,
    /// `ptr` is a `const ttpu_tensor_t* const*` of `len` entries; an entry
    /// may be NULL for `Tensor?[]` arguments.
    TensorList = 3,
    /// `i`.
    Int = 4,
    /// `d`.
    Double = 5,
    /// `i` (0 or 1).
    Bool = 6,
    /// `ptr` is a UTF-8 `const char*` of `len` bytes (no NUL needed).
    String = 7,
    /// `ptr` is a `const int64_t*` of `len` entries.
    IntList = 8,
    /// A Python int scalar in `i` (a runtime argument: no recompile when it changes).
    ScalarInt = 9,
    /// A Python float scalar in `d`.
    ScalarDouble = 10,
    /// A Python bool scalar in `i`.
    ScalarBool = 11,
    /// A dtype (`ttpu_dtype`) in `i`.
    Dtype = 12,
    /// `ptr` is a `const ttpu_generator_t*` (not NULL; pass None with
    /// `TTPU_VALUE_KIND_NONE`), for a `Generator?` argument: the op draws
    /// from that generator instead of the device's default. The handle is
    /// borrowed for the call only. Since API 1.3.
    Generator = 13,
    /// `ptr` is a `const ttpu_view_t*`, or NULL (None): a view of a storage
    /// given by its geometry, with no handle of its own. Since API 1.5.
    View = 14,
    /// `ptr` is a `const ttpu_view_t*` of `len` entries; an entry whose
    /// `storage` is NULL is None (for `Tensor?[]` arguments). Since API 1.5.
    ViewList = 15,
    /// `ptr` is a `const double*` of `len` entries, for a `float[]`
    /// argument (`histogram`'s `range`). Since API 1.8.
    DoubleList = 16,
}

/// A tensor argument given as a storage plus a geometry: the view
/// `(offset, sizes[0..ndim], strides[0..ndim])`, in elements and absolute in
/// the storage (as `ttpu_tensor_view` takes it), of the storage that the
/// tensor `storage` views (its own geometry is ignored). A frontend that
/// keeps one handle per storage passes its views without making a handle
/// for each. Everything is borrowed for the call only. Since API 1.5.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ttpu_view_t {
    pub storage: *const ttpu_tensor_t,
    pub sizes: *const i64,
    pub strides: *const i64,
    pub ndim: usize,
    pub offset: i64,
}

/// One result of `ttpu_op_call_id`: its storage and geometry together.
/// Callers pass `sizeof(ttpu_result_t)` as they compiled it; fields added in
/// later versions go at the end, and the runtime writes only those that fit.
/// Since API 1.5.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ttpu_result_t {
    /// The result, a new handle the caller frees with `ttpu_tensor_destroy`;
    /// NULL for a None result, and when `arg` is set.
    pub tensor: *mut ttpu_tensor_t,
    /// The index of the argument the result is (same storage and geometry:
    /// an in-place op's return), with no new handle; -1 otherwise.
    pub arg: i64,
    /// A `ttpu_dtype`.
    pub dtype: i32,
    pub device: i64,
    /// The geometry, in elements: `sizes` and `strides` point into `tensor`
    /// (valid while it lives) and are NULL when it is NULL.
    pub offset: i64,
    pub ndim: usize,
    pub sizes: *const i64,
    pub strides: *const i64,
    /// The element count of the whole storage the result views.
    pub storage_numel: i64,
}

/// One argument or result of `ttpu_op_call`, tagged by `kind`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ttpu_value_t {
    /// A `ttpu_value_kind` value.
    pub kind: i32,
    pub i: i64,
    pub d: f64,
    pub ptr: *const c_void,
    pub len: usize,
}

unsafe fn tensor_ptr<'a>(p: *const c_void, what: &str) -> Result<&'a Tensor> {
    Ok(&ttpu_tensor_t::borrow(p as *const ttpu_tensor_t, what)?.t)
}

/// The tensor a `ttpu_view_t` describes; None for a NULL pointer or storage.
unsafe fn view_ptr(p: *const ttpu_view_t, what: &str) -> Result<Option<Tensor>> {
    let Some(v) = p.as_ref() else { return Ok(None) };
    if v.storage.is_null() {
        return Ok(None);
    }
    let base = &ttpu_tensor_t::borrow(v.storage, what)?.t;
    let sizes = slice_arg(v.sizes, v.ndim, what)?;
    let strides = slice_arg(v.strides, v.ndim, what)?;
    base.view_of(what, v.offset, sizes, strides).map(Some)
}

/// Argument `pos` of a call of `op` as a value. The messages name the
/// argument; the name is only formatted for a bad argument.
unsafe fn to_value(v: &ttpu_value_t, op: &str, pos: usize) -> Result<Value> {
    value_of(v, op).or_else(|_| value_of(v, &format!("{op}: argument {pos}")))
}

unsafe fn value_of(v: &ttpu_value_t, what: &str) -> Result<Value> {
    Ok(match v.kind {
        0 => Value::None,
        1 => Value::Tensor(tensor_ptr(v.ptr, &what)?.clone()),
        2 if v.ptr.is_null() => Value::None,
        2 => Value::Tensor(tensor_ptr(v.ptr, &what)?.clone()),
        3 => {
            let ptrs = slice_arg(v.ptr as *const *const c_void, v.len, &what)?;
            if ptrs.iter().any(|p| p.is_null()) {
                Value::OptTensorList(
                    ptrs.iter()
                        .map(|p| if p.is_null() { Ok(None) } else { tensor_ptr(*p, &what).map(|t| Some(t.clone())) })
                        .collect::<Result<_>>()?,
                )
            } else {
                Value::TensorList(ptrs.iter().map(|p| tensor_ptr(*p, &what).cloned()).collect::<Result<_>>()?)
            }
        }
        4 => Value::Int(v.i),
        5 => Value::Double(v.d),
        6 => Value::Bool(v.i != 0),
        7 => {
            let bytes = slice_arg(v.ptr as *const u8, v.len, &what)?;
            Value::Str(std::str::from_utf8(bytes).map_err(|_| Error::InvalidArgument(format!("{what}: string is not UTF-8")))?.into())
        }
        8 => Value::IntList(slice_arg(v.ptr as *const i64, v.len, &what)?.to_vec()),
        9 => Value::Scalar(Scalar::Int(v.i)),
        10 => Value::Scalar(Scalar::Float(v.d)),
        11 => Value::Scalar(Scalar::Bool(v.i != 0)),
        12 => Value::DType(dtype_arg(v.i as i32, &what)?),
        13 => Value::Generator(ttpu_generator_t::borrow(v.ptr as *const ttpu_generator_t, &what)?.g.clone()),
        14 => view_ptr(v.ptr as *const ttpu_view_t, &what)?.map_or(Value::None, Value::Tensor),
        15 => {
            let views = slice_arg(v.ptr as *const ttpu_view_t, v.len, &what)?;
            let ts: Vec<Option<Tensor>> = views.iter().map(|w| view_ptr(w, &what)).collect::<Result<_>>()?;
            if ts.iter().all(Option::is_some) {
                Value::TensorList(ts.into_iter().flatten().collect())
            } else {
                Value::OptTensorList(ts)
            }
        }
        16 => Value::FloatList(slice_arg(v.ptr as *const f64, v.len, &what)?.to_vec()),
        k => return Err(Error::InvalidArgument(format!("{what}: unknown value kind {k}"))),
    })
}

fn none() -> ttpu_value_t {
    ttpu_value_t { kind: ttpu_value_kind::None as i32, i: 0, d: 0.0, ptr: std::ptr::null(), len: 0 }
}

fn tensor_value(t: Tensor) -> ttpu_value_t {
    ttpu_value_t { kind: ttpu_value_kind::Tensor as i32, ptr: ttpu_tensor_t::new(t) as *const c_void, ..none() }
}

/// A call's results, one per tensor (a `Tensor[]` flattened), checked
/// against the caller's capacity.
fn flatten(name: &str, results: Vec<Value>, capacity: usize) -> Result<Vec<Option<Tensor>>> {
    let mut flat: Vec<Option<Tensor>> = Vec::with_capacity(results.len());
    for v in results {
        match v {
            Value::Tensor(t) => flat.push(Some(t)),
            Value::TensorList(ts) => flat.extend(ts.into_iter().map(Some)),
            Value::None => flat.push(None),
            other => {
                return Err(Error::Internal(format!("{name}: result of type {} is not supported by the C ABI", other.type_name())))
            }
        }
    }
    if flat.len() > capacity {
        return Err(Error::ResourceExhausted(format!("{name} returns {} values but the results have capacity {capacity}", flat.len())));
    }
    Ok(flat)
}

/// Calls the op `name` (e.g. "aten::add.Tensor") with `args[0..nargs]`
/// (positional; trailing defaults may be left out). Arguments are borrowed
/// for the call.
///
/// Results are written to `out_values[0..*out_count]`: one value per schema
/// return, except that a `Tensor[]` return is flattened into one TENSOR value
/// per element. Every TENSOR result owns a new handle, which the caller frees
/// with `ttpu_tensor_destroy` (an in-place op returns a new handle to the
/// argument it wrote). If `capacity` is too small, nothing is written and the
/// error (RESOURCE_EXHAUSTED) says how many values the call needs; the op did
/// not run, unless it returns a `Tensor[]` (whose length is only known after).
#[no_mangle]
pub unsafe extern "C" fn ttpu_op_call(
    runtime: *const ttpu_runtime_t,
    name: *const c_char,
    args: *const ttpu_value_t,
    nargs: usize,
    out_values: *mut ttpu_value_t,
    capacity: usize,
    out_count: *mut usize,
) -> *mut ttpu_error_t {
    ffi_boundary!({
        let r = ttpu_runtime_t::enter(runtime, "ttpu_op_call")?;
        let name = str_arg(name, "ttpu_op_call: name")?;
        check_out(out_count, name)?;
        let raw = slice_arg(args, nargs, name)?;
        let values: Vec<Value> = raw.iter().enumerate().map(|(i, v)| to_value(v, name, i)).collect::<Result<_>>()?;
        // Check the capacity before running when the schema fixes the result
        // count, so that a too-small buffer never leaves an in-place op done.
        if let Some(n) = op_result_count(name)?.filter(|&n| n > capacity) {
            return Err(Error::ResourceExhausted(format!("{name} returns {n} values but out_values has capacity {capacity}")));
        }
        let flat = flatten(name, r.rt.call(name, &values)?, capacity)?;
        if !flat.is_empty() {
            check_out(out_values, name)?;
        }
        let n = flat.len();
        for (i, t) in flat.into_iter().enumerate() {
            out_values.add(i).write(t.map_or_else(none, tensor_value));
        }
        write_out(out_count, name, n)
    })
}

/// Takes the owned tensor out of a result value of `ttpu_op_call`: returns
/// the handle, typed (free it with `ttpu_tensor_destroy`), and sets `*value`
/// to NONE, so that the value is no longer an owner (`ptr` is a
/// `const void*` for every kind, but a TENSOR result owns its handle).
/// Returns NULL, leaving `*value` as it was, when `value` is NULL or does not
/// hold a live tensor handle. Since API 1.7.
#[no_mangle]
pub unsafe extern "C" fn ttpu_value_take_tensor(value: *mut ttpu_value_t) -> *mut ttpu_tensor_t {
    crate::ffi::no_panic(std::ptr::null_mut(), || {
        let Some(v) = value.as_mut() else { return std::ptr::null_mut() };
        let t = v.ptr as *mut ttpu_tensor_t;
        if v.kind != ttpu_value_kind::Tensor as i32 || ttpu_tensor_t::borrow(t, "ttpu_value_take_tensor").is_err() {
            return std::ptr::null_mut();
        }
        *v = none();
        t
    })
}

/// Whether an op named `name` is registered, or is an `out=` form the
/// runtime derives by name (see `ttpu_op_declare`).
#[no_mangle]
pub unsafe extern "C" fn ttpu_op_exists(name: *const c_char) -> bool {
    crate::ffi::no_panic(false, || {
        !name.is_null() && CStr::from_ptr(name).to_str().is_ok_and(|n| op_id(n).is_ok())
    })
}

/// Writes the id of the op called `name` to `*out_id`, for
/// `ttpu_op_call_id`: ids are stable for the life of the process. Fails with
/// NOT_FOUND, suggesting near names, for an unknown op. Since API 1.5.
#[no_mangle]
pub unsafe extern "C" fn ttpu_op_lookup(name: *const c_char, out_id: *mut usize) -> *mut ttpu_error_t {
    ffi_boundary!({
        let name = str_arg(name, "ttpu_op_lookup: name")?;
        check_out(out_id, "ttpu_op_lookup")?;
        write_out(out_id, "ttpu_op_lookup", op_id(name)?)
    })
}

/// Calls op `op_id` (from `ttpu_op_lookup`) with `args[0..nargs]`, as
/// `ttpu_op_call` does, in one crossing: tensor arguments may be
/// `TTPU_VALUE_KIND_VIEW` (a storage plus a geometry, no handle), and each
/// result comes back with its geometry in `results[0..*out_count]`. A result
/// that is one of the arguments (an in-place op's return: same storage and
/// geometry) sets `arg` and gets no handle. Capacity errors are as for
/// `ttpu_op_call`. `result_size` is `sizeof(ttpu_result_t)` as the caller
/// compiled it (at least its 1.5 size); results are `result_size` apart.
/// The launch is asynchronous as for any op. Since API 1.5.
#[no_mangle]
pub unsafe extern "C" fn ttpu_op_call_id(
    runtime: *const ttpu_runtime_t,
    op_id: usize,
    args: *const ttpu_value_t,
    nargs: usize,
    results: *mut ttpu_result_t,
    result_size: usize,
    capacity: usize,
    out_count: *mut usize,
) -> *mut ttpu_error_t {
    ffi_boundary!({
        const WHAT: &str = "ttpu_op_call_id";
        let r = ttpu_runtime_t::enter(runtime, WHAT)?;
        check_out(out_count, WHAT)?;
        check_struct_size(result_size, RESULT_V1, "ttpu_op_call_id: result_size")?;
        let c_name = op_c_name(op_id).ok_or_else(|| {
            Error::InvalidArgument(format!("{WHAT}: op id {op_id} is not below the op count {}", op_count()))
        })?;
        let name = c_name.to_str().map_err(|_| Error::Internal(format!("{WHAT}: op {op_id} has a non-UTF-8 name")))?;
        let raw = slice_arg(args, nargs, name)?;
        let values: Vec<Value> = raw.iter().enumerate().map(|(i, v)| to_value(v, name, i)).collect::<Result<_>>()?;
        if let Some(n) = op_result_count_id(op_id)?.filter(|&n| n > capacity) {
            return Err(Error::ResourceExhausted(format!("{name} returns {n} values but the results have capacity {capacity}")));
        }
        let flat = flatten(name, r.rt.call_id(op_id, &values)?, capacity)?;
        if !flat.is_empty() {
            check_out(results, name)?;
        }
        let n = flat.len();
        // Each result as far as the caller's struct reaches.
        let fits = result_size.min(std::mem::size_of::<ttpu_result_t>());
        for (i, t) in flat.into_iter().enumerate() {
            let res = result_of(t, &values);
            let dst = (results as *mut u8).add(i * result_size);
            std::ptr::copy_nonoverlapping((&res as *const ttpu_result_t).cast::<u8>(), dst, fits);
        }
        write_out(out_count, name, n)
    })
}

/// The size of `ttpu_result_t` in API 1.5, its first version.
const RESULT_V1: usize = std::mem::offset_of!(ttpu_result_t, storage_numel) + 8;

/// The C form of one result: the argument it is, or a new handle.
fn result_of(t: Option<Tensor>, args: &[Value]) -> ttpu_result_t {
    let empty = ttpu_result_t {
        tensor: std::ptr::null_mut(),
        arg: -1,
        dtype: -1,
        device: -1,
        offset: 0,
        ndim: 0,
        sizes: std::ptr::null(),
        strides: std::ptr::null(),
        storage_numel: 0,
    };
    let Some(t) = t else { return empty };
    let meta = ttpu_result_t {
        dtype: t.dtype().code(),
        device: t.device() as i64,
        offset: t.offset(),
        ndim: t.sizes().len(),
        storage_numel: t.storage().numel(),
        ..empty
    };
    let same = |a: &Tensor| a.same_storage(&t) && a.offset() == t.offset() && a.sizes() == t.sizes() && a.strides() == t.strides();
    if let Some(arg) = args.iter().position(|v| matches!(v, Value::Tensor(a) if same(a))) {
        return ttpu_result_t { arg: arg as i64, ..meta };
    }
    let handle = ttpu_tensor_t::new(t);
    // The handle is boxed: its dims stay where they are while it lives.
    let h = unsafe { &*handle };
    ttpu_result_t { tensor: handle, sizes: h.t.sizes().as_ptr(), strides: h.t.strides().as_ptr(), ..meta }
}

/// Writes to `*out_supported` whether the runtime runs the op that the aten
/// declaration `decl` declares, with exactly those arguments, e.g.
/// `"aten::add.out(Tensor self, Tensor other, *, Scalar alpha=1, Tensor(a!) out) -> Tensor(a!)"`.
/// A frontend that has its own schemas (PyTorch) asks once per op before
/// calling it by name. An `out=` form (`X.out`, `X.ov_out`) is derived from
/// the functional op that takes exactly its inputs (by name and type) and
/// runs as that op followed by a copy into each `out`; `ttpu_op_call` with
/// the name alone derives it from `X.ov` for `X.ov_out`, and from `X` or
/// `X.Tensor` for `X.out`. A declaration the runtime cannot parse is
/// unsupported, not an error. Derived forms are capped (8192): past that,
/// RESOURCE_EXHAUSTED.
#[no_mangle]
pub unsafe extern "C" fn ttpu_op_declare(decl: *const c_char, out_supported: *mut bool) -> *mut ttpu_error_t {
    ffi_boundary!({
        let decl = str_arg(decl, "ttpu_op_declare: decl")?;
        check_out(out_supported, "ttpu_op_declare")?;
        write_out(out_supported, "ttpu_op_declare", op_declare(decl)?)
    })
}

/// The number of registered ops.
#[no_mangle]
pub extern "C" fn ttpu_op_count() -> usize {
    crate::ffi::no_panic(0, op_count)
}

/// Writes the name of op `index` (0-based, < `ttpu_op_count()`) to `*out_name`:
/// NUL-terminated, static storage.
#[no_mangle]
pub unsafe extern "C" fn ttpu_op_name(index: usize, out_name: *mut *const c_char) -> *mut ttpu_error_t {
    ffi_boundary!({ write_op_str(index, out_name, "ttpu_op_name", op_c_name) })
}

/// Writes op `index`'s static string (`get`) to `*out`, or an error naming
/// `what` for an index past the op count.
unsafe fn write_op_str(
    index: usize,
    out: *mut *const c_char,
    what: &str,
    get: fn(usize) -> Option<&'static std::ffi::CStr>,
) -> Result<()> {
    let s = get(index).ok_or_else(|| Error::InvalidArgument(format!("{what}: index {index} >= op count {}", op_count())))?;
    write_out(out, what, s.as_ptr())
}

/// Writes the aten declaration of op `index` (0-based, < `ttpu_op_count()`,
/// or an id from `ttpu_op_lookup`) to `*out_decl`: NUL-terminated, static
/// storage. For example `aten::add.Tensor(Tensor self, Tensor other, *,
/// Scalar alpha=1) -> Tensor`: the arguments in order, with their types
/// (see `ttpu_value_kind` for the value kind each takes), defaults and
/// keyword-only marker. `SymInt` prints as `int`. Since API 1.6.
#[no_mangle]
pub unsafe extern "C" fn ttpu_op_schema(index: usize, out_decl: *mut *const c_char) -> *mut ttpu_error_t {
    ffi_boundary!({ write_op_str(index, out_decl, "ttpu_op_schema", op_c_decl) })
}
