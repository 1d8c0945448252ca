//! The op area: calling any registered op by its aten name with a tagged
//! argument array (PyTorch's IValue in C), and listing ops.

use std::ffi::{c_char, c_void, CStr};

use torchtpu_core::{op_c_name, op_count, op_declare, op_id, op_result_count, Error, Result, Scalar, Tensor, Value};

use crate::error::ttpu_error_t;
use crate::ffi::{check_out, slice_arg, str_arg, write_out, Handle};
use crate::generator::ttpu_generator_t;
use crate::runtime::ttpu_runtime_t;
use crate::tensor::{dtype_arg, ttpu_tensor_t};

/// The kind of a `ttpu_value_t`, and which field carries it.
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

unsafe fn to_value(v: &ttpu_value_t, op: &str, pos: usize) -> Result<Value> {
    let what = format!("{op}: argument {pos}");
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
        k => return Err(Error::InvalidArgument(format!("{what}: unknown value kind {k}"))),
    })
}

fn none() -> ttpu_value_t {
    ttpu_value_t { kind: ttpu_value_kind::None as i32, i: 0, d: 0.0, ptr: std::ptr::null(), len: 0 }
}

fn tensor_value(t: Tensor) -> ttpu_value_t {
    ttpu_value_t { kind: ttpu_value_kind::Tensor as i32, ptr: ttpu_tensor_t::new(t) as *const c_void, ..none() }
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
        let r = ttpu_runtime_t::borrow(runtime, "ttpu_op_call")?;
        let name = str_arg(name, "ttpu_op_call: name")?;
        check_out(out_count, name)?;
        let raw = slice_arg(args, nargs, name)?;
        let values: Vec<Value> = raw.iter().enumerate().map(|(i, v)| to_value(v, name, i)).collect::<Result<_>>()?;
        // Check the capacity before running when the schema fixes the result
        // count, so that a too-small buffer never leaves an in-place op done.
        if let Some(n) = op_result_count(name)?.filter(|&n| n > capacity) {
            return Err(Error::ResourceExhausted(format!("{name} returns {n} values but out_values has capacity {capacity}")));
        }
        let results = r.rt.call(name, &values)?;
        let mut flat: Vec<Option<Tensor>> = Vec::new();
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
            return Err(Error::ResourceExhausted(format!(
                "{name} returns {} values but out_values has capacity {capacity}",
                flat.len()
            )));
        }
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

/// Whether an op named `name` is registered, or is an `out=` form the
/// runtime derives by name (see `ttpu_op_declare`).
#[no_mangle]
pub unsafe extern "C" fn ttpu_op_exists(name: *const c_char) -> bool {
    crate::ffi::no_panic(false, || {
        !name.is_null() && CStr::from_ptr(name).to_str().is_ok_and(|n| op_id(n).is_ok())
    })
}

/// Writes to `*out_supported` whether the runtime runs the op that the aten
/// declaration `decl` declares, with exactly those arguments, e.g.
/// `"aten::add.out(Tensor self, Tensor other, *, Scalar alpha=1, Tensor(a!) out) -> Tensor(a!)"`.
/// A frontend that has its own schemas (PyTorch) asks once per op before
/// calling it by name. An `out=` form (`X.out`, `X.ov_out`) is derived from
/// the functional op that takes exactly its inputs (by name and type) and
/// runs as that op followed by a copy into each `out`; `ttpu_op_call` with
/// the name alone derives it from the first functional overload that exists
/// (`X.ov`, `X.Tensor`, then `X`). A declaration the runtime cannot parse is
/// unsupported, not an error.
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
    ffi_boundary!({
        let name = op_c_name(index).ok_or_else(|| {
            Error::InvalidArgument(format!("ttpu_op_name: index {index} >= op count {}", op_count()))
        })?;
        write_out(out_name, "ttpu_op_name", name.as_ptr())
    })
}
