//! The op registry, keyed by aten names (`aten::add.Tensor`, ...).
//!
//! Each op has a schema and a lowering. A lowering turns the op into
//! StableHLO through a [`Cx`]; since every value it makes is typed, running
//! the lowering is also the op's shape and dtype inference (memoized per
//! signature by the runtime, so it never drifts from the program).
//! View ops additionally have a metadata kernel that makes a new view of the
//! same storage without running anything.
//!
//! Lowerings only print StableHLO. Compiling and executing belong to
//! [`crate::runtime`].

mod amp;
mod bessel;
mod bucket;
mod catalog;
mod variants;
pub mod common;
mod complex;
mod copy;
mod creation;
mod distance;
mod elementwise;
mod gamma;
mod histogram;
mod ieee;
mod index;
mod linalg;
mod nn;
mod optim;
mod polynomial;
mod random;
mod reduce;
mod scan;
pub mod schema;
mod segment;
mod shape_ops;
mod sort;
mod spatial;
mod special;

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use parking_lot::RwLock;

use crate::dtype::{DType, ScalarKind};
use crate::error::{Error, Result};
use crate::hlo::{Cmp, Elem, Func, Reducer, Ty, V};
use crate::tensor::{Scalar, Value};
pub use catalog::{op_c_decl, op_c_name, op_count, op_declare, op_id, op_result_count, op_result_count_id};
pub use schema::{ArgType, Schema};

/// A runtime scalar argument: its position in the call and its kind. The
/// value is not known while lowering, so programs never depend on it.
#[derive(Debug, Clone, Copy)]
pub struct ScalarRef {
    pub index: usize,
    pub kind: ScalarKind,
}

/// One argument as a lowering sees it.
#[derive(Debug, Clone)]
pub enum Input {
    None,
    Tensor(V),
    Tensors(Vec<V>),
    OptTensors(Vec<Option<V>>),
    Int(i64),
    Float(f64),
    Bool(bool),
    Str(String),
    Ints(Vec<i64>),
    Floats(Vec<f64>),
    /// A Python scalar passed at run time.
    Scalar(ScalarRef),
    /// A Python scalar the op needs at compile time (e.g. `arange` bounds).
    StaticScalar(Scalar),
    DType(DType),
}

/// Where a program parameter's buffer comes from at execution time.
#[derive(Debug, Clone, PartialEq)]
pub enum ParamSrc {
    /// The buffer of the call's n-th distinct storage.
    Storage(usize),
    /// The offset (i64) of the call's n-th tensor.
    Offset(usize),
    /// The strides (a vector of i64, one per dim) of the call's n-th
    /// tensor, read at runtime strides ([`crate::view::Layout::Runtime`]).
    Strides(usize),
    /// Scalar argument `arg`, converted to `elem`.
    Scalar { arg: usize, elem: Elem },
    /// A fresh `tensor<2xui64>` RNG state from the call's generator (its
    /// `generator` argument, else the device default).
    Rng,
}

/// What a check is about: an index into a tensor, a class target of a loss,
/// or a condition on values (a probability, a standard deviation) whose
/// failure is an invalid argument rather than an index out of range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckKind {
    Index,
    Target,
    Value,
    /// A plugin op's loop count against its bound (always checked: the
    /// bound is the sandbox's, not a debugging aid).
    PluginLoops,
}

/// How to word an out-of-range index that a check finds: the op, what the
/// index selects from, and PyTorch's valid range for that op.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexCheck {
    /// The op, named by the runtime when it lowers the call.
    pub op: Arc<str>,
    pub kind: CheckKind,
    /// What the index selects from: "a weight of 50 rows", "5 classes".
    pub what: String,
    /// The valid values, inclusive at both ends (none when `lo > hi`).
    pub lo: i64,
    pub hi: i64,
}

impl IndexCheck {
    /// The offending value given the checked entries' `min` and `max`, if
    /// any (an empty index has min i64::MAX and max i64::MIN: never bad).
    pub fn violation(&self, min: i64, max: i64) -> Option<i64> {
        if min < self.lo {
            Some(min)
        } else if max > self.hi {
            Some(max)
        } else {
            None
        }
    }

    /// The error text for the offending value `bad` (without the op).
    pub fn describe(&self, bad: i64) -> String {
        let valid =
            if self.lo > self.hi { "no value is valid".to_string() } else { format!("valid: {} to {}", self.lo, self.hi) };
        match self.kind {
            CheckKind::Index => format!("index {bad} is out of range for {} ({valid})", self.what),
            CheckKind::Target => format!("target {bad} is out of bounds for {} ({valid})", self.what),
            CheckKind::Value => self.what.clone(),
            CheckKind::PluginLoops => {
                format!("its loops ran past their bound of {} iterations per call ({}); the results are cut short", self.hi, self.what)
            }
        }
    }
}

/// One index check in a program: `value` is a `tensor<2xi64>` holding the
/// min and max of the checked entries, computed next to the op itself.
#[derive(Debug, Clone)]
pub struct Check {
    pub value: V,
    pub info: IndexCheck,
}

/// The lowering context: the function being built and its parameter plan.
pub struct Cx {
    pub f: Func,
    pub op: Arc<str>,
    plan: Vec<ParamSrc>,
    scalar_params: Vec<(usize, Elem, V)>,
    nones: Vec<V>,
    /// Whether lowerings add index checks (the runtime's switch, part of
    /// every program's cache key); off for a bare `Cx`.
    index_checks: bool,
    checks: Vec<Check>,
    /// (index, lo, hi, ignore) of each check in `checks`: an index checked
    /// twice by one lowering (scatter_reduce scatters more than once) is
    /// checked once.
    check_keys: Vec<(V, i64, i64, Option<i64>)>,
}

impl Cx {
    pub fn new(op: &str) -> Cx {
        Cx {
            f: Func::new(),
            op: op.into(),
            plan: Vec::new(),
            scalar_params: Vec::new(),
            nones: Vec::new(),
            index_checks: false,
            checks: Vec::new(),
            check_keys: Vec::new(),
        }
    }

    /// Turns index checks on or off for what is lowered from now on.
    pub fn set_index_checks(&mut self, on: bool) {
        self.index_checks = on;
    }

    /// Checks that every entry of the integer tensor `idx` lies in `range`
    /// (PyTorch's valid range for the op: `0..n`, or `-n..n` where negative
    /// indices wrap). `what` names what the index selects from, for the
    /// error. The op stays asynchronous: the program gets a small extra
    /// output (the indices' min and max), which the runtime checks at the
    /// next host read or synchronize.
    pub fn check_index(&mut self, idx: V, range: std::ops::Range<i64>, what: impl FnOnce() -> String) {
        self.add_check(idx, range, None, CheckKind::Index, what);
    }

    /// Checks the class targets `t` of a loss against `0..classes`; targets
    /// equal to `ignore_index` are left out.
    pub fn check_target(&mut self, t: V, classes: i64, ignore_index: i64) {
        self.add_check(t, 0..classes, Some(ignore_index), CheckKind::Target, || format!("{classes} classes"));
    }

    fn add_check(
        &mut self,
        idx: V,
        range: std::ops::Range<i64>,
        ignore: Option<i64>,
        kind: CheckKind,
        what: impl FnOnce() -> String,
    ) {
        // `range.end - 1` cannot overflow: the end is a size (>= 0).
        let (lo, hi) = (range.start, range.end.saturating_sub(1));
        let wanted = self.index_checks || kind == CheckKind::PluginLoops;
        if !wanted || self.check_keys.contains(&(idx, lo, hi, ignore)) {
            return;
        }
        self.check_keys.push((idx, lo, hi, ignore));
        let n = self.ty(idx).numel();
        let i = self.f.convert(idx, Elem::I64);
        let i = self.f.reshape(i, &[n]);
        let ty = self.ty(i).clone();
        let min_init = self.f.splat_int(&Ty::scalar(Elem::I64), i64::MAX);
        let max_init = self.f.splat_int(&Ty::scalar(Elem::I64), i64::MIN);
        // Ignored entries take the reductions' identities, so they count
        // for neither the min nor the max.
        let (for_min, for_max) = match ignore {
            Some(ig) => {
                let igv = self.f.splat_int(&ty, ig);
                let is_ig = self.f.compare(Cmp::Eq, i, igv);
                let big = self.f.splat_int(&ty, i64::MAX);
                let small = self.f.splat_int(&ty, i64::MIN);
                (self.f.select(is_ig, big, i), self.f.select(is_ig, small, i))
            }
            None => (i, i),
        };
        let min = self.f.reduce(for_min, min_init, &[0], Reducer::Min);
        let max = self.f.reduce(for_max, max_init, &[0], Reducer::Max);
        let (min, max) = (self.f.reshape(min, &[1]), self.f.reshape(max, &[1]));
        let value = self.f.concatenate(&[min, max], 0);
        let info = IndexCheck { op: self.op.clone(), kind, what: what(), lo, hi };
        self.checks.push(Check { value, info });
    }

    /// Checks that `ok` (a boolean tensor) holds everywhere; where it does
    /// not, the op fails with `message` (an invalid argument), found as index
    /// checks are: asynchronously, at the next host read.
    pub fn check_values(&mut self, ok: V, message: &str) {
        let bad = self.f.not(ok);
        self.add_check(bad, 0..1, None, CheckKind::Value, || message.to_string());
    }

    /// Checks that a plugin fragment's loop `count` (a `tensor<i64>`) stayed
    /// within `bound`; `what` says where the bound comes from.
    pub fn check_plugin_loops(&mut self, count: V, bound: i64, what: impl FnOnce() -> String) {
        self.add_check(count, 0..bound.saturating_add(1), None, CheckKind::PluginLoops, what);
    }

    /// The checks added since the last call.
    pub fn take_checks(&mut self) -> Vec<Check> {
        self.check_keys.clear();
        std::mem::take(&mut self.checks)
    }

    /// Adds a parameter fed from `src`.
    pub fn param(&mut self, ty: Ty, src: ParamSrc) -> V {
        self.plan.push(src);
        self.f.param(ty)
    }

    pub fn plan(&self) -> &[ParamSrc] {
        &self.plan
    }

    /// Forgets the scalar parameters made so far: the next op lowered into
    /// this function (a fused graph) numbers its arguments afresh.
    pub fn reset_scalars(&mut self) {
        self.scalar_params.clear();
    }

    /// The runtime scalar `s` as a rank-0 value of type `elem`.
    pub fn scalar(&mut self, s: ScalarRef, elem: impl Into<Elem>) -> V {
        let elem = elem.into();
        if let Some(&(_, _, v)) = self.scalar_params.iter().find(|(i, e, _)| *i == s.index && *e == elem) {
            return v;
        }
        let v = self.param(Ty::scalar(elem), ParamSrc::Scalar { arg: s.index, elem });
        self.scalar_params.push((s.index, elem, v));
        v
    }

    /// A fresh RNG state (`tensor<2xui64>`).
    pub fn rng_state(&mut self) -> V {
        self.param(Ty::new(Elem::U64, &[2]), ParamSrc::Rng)
    }

    /// A placeholder for an undefined (`None`) tensor result, e.g. a
    /// gradient that `output_mask` did not ask for. The value is an unused
    /// scalar constant in the program.
    pub fn none(&mut self) -> V {
        let v = self.f.constant(Elem::F32, 0.0);
        self.nones.push(v);
        v
    }

    pub fn is_none(&self, v: V) -> bool {
        self.nones.contains(&v)
    }

    pub fn err(&self, msg: impl Into<String>) -> Error {
        Error::op(&*self.op, msg)
    }

    pub fn ty(&self, v: V) -> &Ty {
        self.f.ty(v)
    }
    pub fn dims(&self, v: V) -> Vec<i64> {
        self.f.ty(v).dims.to_vec()
    }
    pub fn rank(&self, v: V) -> usize {
        self.f.ty(v).rank()
    }
    pub fn dtype(&self, v: V) -> DType {
        self.f.ty(v).dtype()
    }
}

/// Bound arguments for a lowering, with typed accessors. Types were checked
/// against the schema when binding, so a mismatch here is a bug.
pub struct Args<'a> {
    op: &'a str,
    items: &'a [Input],
}

impl<'a> Args<'a> {
    pub fn new(op: &'a str, items: &'a [Input]) -> Args<'a> {
        Args { op, items }
    }
    fn bad(&self, i: usize, want: &str) -> Error {
        Error::Internal(format!("{}: argument {i} is not {want}: {:?}", self.op, self.items.get(i)))
    }
    pub fn len(&self) -> usize {
        self.items.len()
    }
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
    pub fn get(&self, i: usize) -> &Input {
        self.items.get(i).unwrap_or(&Input::None)
    }
    pub fn tensor(&self, i: usize) -> Result<V> {
        match self.get(i) {
            Input::Tensor(v) => Ok(*v),
            _ => Err(self.bad(i, "a tensor")),
        }
    }
    pub fn opt_tensor(&self, i: usize) -> Option<V> {
        match self.get(i) {
            Input::Tensor(v) => Some(*v),
            _ => None,
        }
    }
    pub fn tensors(&self, i: usize) -> Result<&[V]> {
        match self.get(i) {
            Input::Tensors(v) => Ok(v),
            _ => Err(self.bad(i, "a tensor list")),
        }
    }
    pub fn opt_tensors(&self, i: usize) -> Result<&[Option<V>]> {
        match self.get(i) {
            Input::OptTensors(v) => Ok(v),
            _ => Err(self.bad(i, "an optional tensor list")),
        }
    }
    pub fn int(&self, i: usize) -> Result<i64> {
        match self.get(i) {
            Input::Int(v) => Ok(*v),
            _ => Err(self.bad(i, "an int")),
        }
    }
    pub fn opt_int(&self, i: usize) -> Option<i64> {
        match self.get(i) {
            Input::Int(v) => Some(*v),
            _ => None,
        }
    }
    pub fn float(&self, i: usize) -> Result<f64> {
        match self.get(i) {
            Input::Float(v) => Ok(*v),
            Input::Int(v) => Ok(*v as f64),
            _ => Err(self.bad(i, "a float")),
        }
    }
    pub fn opt_float(&self, i: usize) -> Option<f64> {
        match self.get(i) {
            Input::Float(v) => Some(*v),
            Input::Int(v) => Some(*v as f64),
            _ => None,
        }
    }
    pub fn bool(&self, i: usize) -> Result<bool> {
        match self.get(i) {
            Input::Bool(v) => Ok(*v),
            _ => Err(self.bad(i, "a bool")),
        }
    }
    pub fn opt_bool(&self, i: usize) -> Option<bool> {
        match self.get(i) {
            Input::Bool(v) => Some(*v),
            _ => None,
        }
    }
    pub fn opt_str(&self, i: usize) -> Option<&str> {
        match self.get(i) {
            Input::Str(s) => Some(s),
            _ => None,
        }
    }
    pub fn ints(&self, i: usize) -> Result<&[i64]> {
        match self.get(i) {
            Input::Ints(v) => Ok(v),
            _ => Err(self.bad(i, "an int list")),
        }
    }
    /// A `bool[N]` argument (bound as 0/1 ints).
    pub fn bools(&self, i: usize) -> Result<Vec<bool>> {
        Ok(self.ints(i)?.iter().map(|&x| x != 0).collect())
    }
    pub fn opt_ints(&self, i: usize) -> Option<&[i64]> {
        match self.get(i) {
            Input::Ints(v) => Some(v),
            _ => None,
        }
    }
    pub fn opt_floats(&self, i: usize) -> Option<&[f64]> {
        match self.get(i) {
            Input::Floats(v) => Some(v),
            _ => None,
        }
    }
    /// A runtime `float` (or `Scalar`) argument as a rank-0 f64 program
    /// parameter; a compile-time `float` becomes a constant.
    pub fn runtime_f64(&self, cx: &mut Cx, i: usize) -> Result<V> {
        match self.get(i) {
            Input::Scalar(s) => Ok(cx.scalar(*s, Elem::F64)),
            Input::Float(x) => Ok(cx.f.constant(Elem::F64, *x)),
            Input::Int(x) => Ok(cx.f.constant(Elem::F64, *x as f64)),
            _ => Err(self.bad(i, "a float")),
        }
    }
    pub fn scalar(&self, i: usize) -> Result<ScalarRef> {
        match self.get(i) {
            Input::Scalar(s) => Ok(*s),
            _ => Err(self.bad(i, "a runtime scalar")),
        }
    }
    pub fn opt_scalar(&self, i: usize) -> Option<ScalarRef> {
        match self.get(i) {
            Input::Scalar(s) => Some(*s),
            _ => None,
        }
    }
    pub fn static_scalar(&self, i: usize) -> Result<Scalar> {
        match self.get(i) {
            Input::StaticScalar(s) => Ok(*s),
            _ => Err(self.bad(i, "a static scalar")),
        }
    }
    pub fn opt_static_scalar(&self, i: usize) -> Option<Scalar> {
        match self.get(i) {
            Input::StaticScalar(s) => Some(*s),
            _ => None,
        }
    }
    pub fn opt_dtype(&self, i: usize) -> Option<DType> {
        match self.get(i) {
            Input::DType(d) => Some(*d),
            _ => None,
        }
    }
}

pub type LowerFn = dyn Fn(&mut Cx, &Args) -> Result<Vec<V>> + Send + Sync;

/// What a metadata kernel decided. A kernel only describes its results; the
/// runtime makes them (ops never call the runtime).
#[derive(Debug, Clone)]
pub enum ViewOut {
    /// The results: views of the arguments' storages.
    Views(Vec<Value>),
    /// One result: a new, never-written storage of `numel` elements (dtype
    /// and device as given by these `empty`-style arguments), seen through
    /// `sizes`/`strides` at offset 0.
    NewStorage { numel: i64, dtype: Value, device: Value, sizes: Vec<i64>, strides: Vec<i64> },
}

/// A metadata kernel over the bound arguments: describes the results, or
/// returns `None` when the op must run as a program instead (e.g. `reshape`
/// of a non-viewable layout).
pub type ViewFn = dyn Fn(&[Value]) -> Result<Option<ViewOut>> + Send + Sync;

/// Ops whose result needs the host or other ops, not one program: their
/// sizes depend on data, or PyTorch defines them as a translation. They have
/// no lowering; the runtime's dispatch carries them out (every frontend gets
/// them alike).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Composite {
    /// `nonzero`: the count of nonzero elements is read on the host (a
    /// sync, as on CUDA), then `nonzero_static` of that size.
    Nonzero,
    /// `masked_select`: both arguments broadcast, then boolean indexing.
    MaskedSelect,
    /// `native_batch_norm`, which updates its running statistics without
    /// declaring them mutable: PyTorch's own translation to the
    /// `_native_batch_norm_legit` forms that declare them.
    NativeBatchNorm,
    /// An `out=` form ([`variants`]): the functional op `functional`, then
    /// each result written into its `out` tensor with `copy_` semantics
    /// (the result type must cast to the out's dtype). An `out` of another
    /// shape is not resized in place: the call returns a new tensor in its
    /// place, which a frontend with mutable tensors (PyTorch) rebinds.
    Out { functional: usize },
    /// `_unique2` (`sorted`) and `unique_consecutive`: the values sorted
    /// (or kept in order), runs of equal values marked, their count read on
    /// the host once (a sync, as on CUDA), then the first value of each run,
    /// and on request each element's run (the inverse) and run lengths.
    Unique { consecutive: bool },
    /// `resize_`: a contiguous view of `self`'s storage when it is large
    /// enough, else of a new storage holding the old elements followed by
    /// zeros. A storage has a fixed size, so the grown one is a new tensor
    /// in `self`'s place, which a frontend with mutable tensors rebinds.
    Resize,
    /// `linalg_lstsq`: the least-squares solution from the SVD, and whether
    /// the residuals exist (for the SVD drivers, only when every matrix
    /// has full rank) read on the host once.
    Lstsq,
    /// `bincount`: the inputs' minimum and maximum are read on the host
    /// once (a sync, as on CUDA) to check them and size the result, then
    /// the counts (or summed weights) are a `scatter_add`.
    Bincount,
    /// An op whose `Tensor` lengths (arguments `lengths` and `lengths + 1`)
    /// are read on the host once (a sync, as on CUDA), then `op`, its
    /// overload with `int[]` lengths: `_ctc_loss.Tensor` and its backward.
    LengthsOnHost { lengths: usize, op: &'static str },
}

/// A check of a call's bound arguments ([`OpEntry::check`]).
pub type BindCheck = fn(&[Value]) -> std::result::Result<(), String>;

/// The `f64` value of bound argument `i` (a `float`, or a runtime float
/// already bound as a scalar), for [`BindCheck`]s.
pub fn bound_f64(bound: &[Value], i: usize) -> Option<f64> {
    match bound.get(i)? {
        Value::Double(x) => Some(*x),
        Value::Int(x) => Some(*x as f64),
        Value::Scalar(s) => Some(s.to_f64()),
        _ => None,
    }
}

pub struct OpDef {
    pub schema: Schema,
    c_name: std::ffi::CString,
    /// The aten declaration, printed from the schema, NUL-terminated.
    c_decl: std::ffi::CString,
    pub lower: Arc<LowerFn>,
    pub view: Option<Arc<ViewFn>>,
    /// Carried out by the runtime's dispatch instead of a program.
    pub composite: Option<Composite>,
    /// Scalars are compile-time constants (they determine shapes).
    pub static_scalars: bool,
    /// `copy_` may cast to any dtype; other in-place ops follow `can_cast`.
    pub any_cast: bool,
    /// Runs even when its tensors live on different devices (copies).
    pub cross_device: bool,
    /// `float` arguments passed as runtime scalars, like `Scalar`s: a new
    /// value (an optimizer's learning rate) does not recompile.
    runtime_floats: Vec<usize>,
    /// Checks of argument values made at every call, before any lowering:
    /// a runtime value's range (a dropout probability) is invisible to the
    /// lowering, which only sees a program parameter.
    check: Option<BindCheck>,
    /// The plugin that provides the op (None for built-in ops).
    pub plugin: Option<Arc<str>>,
    /// Takes complex tensors and dtypes ([`OpEntry::complex`]); every other
    /// op refuses them at binding, by name, before any lowering could
    /// mistake them for real numbers.
    pub complex: bool,
}

impl OpDef {
    /// An op with default flags.
    pub fn new(schema: Schema, lower: Arc<LowerFn>) -> OpDef {
        let c_name = std::ffi::CString::new(schema.name.clone()).expect("op names have no NUL");
        // A default string with a NUL (a plugin's declaration) is cut there.
        let decl = schema.to_string();
        let c_decl = std::ffi::CString::new(decl.split('\0').next().unwrap_or("")).expect("cut at the first NUL");
        OpDef {
            schema,
            c_name,
            c_decl,
            lower,
            view: None,
            composite: None,
            static_scalars: false,
            any_cast: false,
            cross_device: false,
            runtime_floats: Vec::new(),
            check: None,
            plugin: None,
            complex: false,
        }
    }

    pub fn name(&self) -> &str {
        &self.schema.name
    }
    /// The name, NUL-terminated, for C callers.
    pub fn c_name(&self) -> &std::ffi::CStr {
        &self.c_name
    }
    /// The aten declaration ([`Schema`]'s `Display`), NUL-terminated.
    pub fn c_decl(&self) -> &std::ffi::CStr {
        &self.c_decl
    }

    /// Binds positional arguments to the schema ([`Schema::bind`]); the
    /// runtime `float`s become float [`Scalar`]s.
    pub fn bind(&self, args: &[Value]) -> Result<Vec<Value>> {
        let mut bound = self.schema.bind(args)?;
        if !self.complex {
            if let Some(d) = bound.iter().find_map(complex_dtype) {
                return Err(Error::UnsupportedDType {
                    op: self.name().to_string(),
                    dtype: d.to_string(),
                    detail: " by this op on TPU yet (complex tensors run the ops that core/src/ops/complex.rs lists)".into(),
                });
            }
        }
        if let Some(check) = self.check {
            check(&bound).map_err(|message| Error::op(self.name(), message))?;
        }
        for &i in &self.runtime_floats {
            if let Value::Double(x) = bound[i] {
                bound[i] = Value::Scalar(Scalar::Float(x));
            }
        }
        Ok(bound)
    }
}

/// The complex dtype among an argument's tensors or dtype, if any.
fn complex_dtype(v: &Value) -> Option<DType> {
    let complex = |d: DType| d.is_complex().then_some(d);
    match v {
        Value::Tensor(t) => complex(t.dtype()),
        Value::TensorList(ts) => ts.iter().find_map(|t| complex(t.dtype())),
        Value::OptTensorList(ts) => ts.iter().flatten().find_map(|t| complex(t.dtype())),
        Value::DType(d) => complex(*d),
        _ => None,
    }
}

/// Collects the built-in ops while the registry is made. Needs exclusive
/// access.
pub struct Builder {
    ops: Vec<OpDef>,
    by_name: HashMap<String, usize>,
}

/// Builder handle returned by [`Builder::op`] to set flags.
pub struct OpEntry<'r>(&'r mut OpDef);

impl OpEntry<'_> {
    pub fn static_scalars(self) -> Self {
        self.0.static_scalars = true;
        self
    }
    pub fn any_cast(self) -> Self {
        self.0.any_cast = true;
        self
    }
    pub fn cross_device(self) -> Self {
        self.0.cross_device = true;
        self
    }
    /// Takes complex tensors: its lowering handles complex element types.
    pub fn complex(self) -> Self {
        self.0.complex = true;
        self
    }
    /// Checks the bound arguments at every call (strict and fused alike),
    /// before the runtime floats become scalars: `Err` is the message of an
    /// error naming the op.
    pub fn check(self, check: BindCheck) -> Self {
        self.0.check = Some(check);
        self
    }
    /// Passes the named `float` arguments as runtime scalars (lowerings read
    /// them with [`Args::scalar`] or [`Args::runtime_f64`]).
    pub fn runtime_floats(self, names: &[&str]) -> Self {
        for name in names {
            let i = self.0.schema.args.iter().position(|a| a.name == *name && a.ty == ArgType::Float);
            let i = i.unwrap_or_else(|| panic!("{}: no float argument {name}", self.0.schema.name));
            self.0.runtime_floats.push(i);
        }
        self
    }
    pub fn view(self, f: impl Fn(&[Value]) -> Result<Option<ViewOut>> + Send + Sync + 'static) -> Self {
        self.0.view = Some(Arc::new(f));
        self
    }
}

impl Builder {
    /// Registers an op from its aten declaration. Panics on a malformed
    /// declaration or a duplicate: both are bugs in this crate.
    pub fn op(
        &mut self,
        decl: &str,
        lower: impl Fn(&mut Cx, &Args) -> Result<Vec<V>> + Send + Sync + 'static,
    ) -> OpEntry<'_> {
        self.op_shared(decl, Arc::new(lower))
    }

    /// As [`Builder::op`] with a lowering shared by several declarations
    /// (a functional op and its in-place variant).
    pub fn op_shared(&mut self, decl: &str, lower: Arc<LowerFn>) -> OpEntry<'_> {
        let schema = Schema::parse(decl).unwrap_or_else(|e| panic!("{e}"));
        let name = schema.name.clone();
        assert!(!self.by_name.contains_key(&name), "op {name} registered twice");
        self.by_name.insert(name, self.ops.len());
        self.ops.push(OpDef::new(schema, lower));
        OpEntry(self.ops.last_mut().unwrap())
    }

    /// Registers an op the runtime's dispatch carries out ([`Composite`]).
    pub fn composite(&mut self, decl: &str, kind: Composite) {
        let entry = self.op_shared(decl, dispatch_only(kind));
        entry.0.composite = Some(kind);
    }

    /// Registers `aten::name.overload` and its in-place form `aten::name_.overload`
    /// (first argument mutated and returned) with one lowering.
    pub fn op_and_inplace(
        &mut self,
        decl: &str,
        lower: impl Fn(&mut Cx, &Args) -> Result<Vec<V>> + Send + Sync + 'static,
    ) {
        self.op_and_inplace_with(decl, |e| e, lower);
    }

    /// [`Builder::op_and_inplace`] with flags (`flags` is applied to both).
    pub fn op_and_inplace_with(
        &mut self,
        decl: &str,
        flags: fn(OpEntry<'_>) -> OpEntry<'_>,
        lower: impl Fn(&mut Cx, &Args) -> Result<Vec<V>> + Send + Sync + 'static,
    ) {
        let lower: Arc<LowerFn> = Arc::new(lower);
        flags(self.op_shared(decl, lower.clone()));
        flags(self.op_shared(&inplace_decl(decl), lower));
    }
}

/// The lowering of a [`Composite`] op: none, since the runtime's dispatch
/// carries it out (reaching it is a bug, reported as an error).
fn dispatch_only(kind: Composite) -> Arc<LowerFn> {
    Arc::new(move |cx, _| Err(cx.err(format!("{kind:?} is run by the runtime's dispatch, not lowered"))))
}

/// All ops, by name: the built-in aten ops, then the ops of loaded plugins.
///
/// Thread-safe. Ops are only ever added (plugins stay loaded for the life of
/// the process), so an op id and the `&'static OpDef` it names stay valid.
pub struct Registry {
    ops: RwLock<Vec<&'static OpDef>>,
    by_name: RwLock<HashMap<String, usize>>,
    /// How many `out=` forms were derived ([`variants`]).
    derived: std::sync::atomic::AtomicUsize,
}

impl Registry {
    fn new() -> Registry {
        let mut b = Builder { ops: Vec::new(), by_name: HashMap::new() };
        creation::register(&mut b);
        elementwise::register(&mut b);
        reduce::register(&mut b);
        scan::register(&mut b);
        linalg::register(&mut b);
        shape_ops::register(&mut b);
        index::register(&mut b);
        sort::register(&mut b);
        bucket::register(&mut b);
        segment::register(&mut b);
        histogram::register(&mut b);
        nn::register(&mut b);
        optim::register(&mut b);
        amp::register(&mut b);
        spatial::register(&mut b);
        distance::register(&mut b);
        special::register(&mut b);
        polynomial::register(&mut b);
        bessel::register(&mut b);
        gamma::register(&mut b);
        ieee::register(&mut b);
        random::register(&mut b);
        copy::register(&mut b);
        complex::register(&mut b);
        for name in complex::TAKES_COMPLEX {
            let i = *b.by_name.get(*name).unwrap_or_else(|| panic!("TAKES_COMPLEX lists {name}, which is not registered"));
            b.ops[i].complex = true;
        }
        // The built-in table lives as long as the process (it is the static
        // registry's), so leaking it gives every op a `'static` address.
        let ops: &'static [OpDef] = Vec::leak(b.ops);
        Registry { ops: RwLock::new(ops.iter().collect()), by_name: RwLock::new(b.by_name), derived: Default::default() }
    }

    /// Adds ops defined at run time (a plugin's), all or none: a name that is
    /// already registered is an error and adds nothing.
    pub fn add(&self, defs: Vec<OpDef>) -> Result<()> {
        let mut ops = self.ops.write();
        let mut by_name = self.by_name.write();
        let mut seen = std::collections::HashSet::new();
        for d in &defs {
            if by_name.contains_key(d.name()) || !seen.insert(d.name()) {
                return Err(Error::InvalidArgument(format!("op {} is already registered", d.name())));
            }
        }
        for d in defs {
            by_name.insert(d.name().to_string(), ops.len());
            // Registered ops are never removed (their ids stay valid).
            ops.push(Box::leak(Box::new(d)));
        }
        Ok(())
    }

    /// The id of the op registered as exactly `name`.
    fn exact(&self, name: &str) -> Option<usize> {
        self.by_name.read().get(name).copied()
    }

    /// Registers a derived op, or finds the one another thread derived first.
    /// Derived ops are never freed, so their number is capped: declarations
    /// are a frontend's input, and made-up names must not grow the registry
    /// without bound.
    fn add_derived(&self, def: OpDef) -> Result<usize> {
        const MAX_DERIVED: usize = 8192;
        let name = def.name().to_string();
        if self.derived.fetch_add(1, std::sync::atomic::Ordering::Relaxed) >= MAX_DERIVED {
            self.derived.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
            return Err(Error::ResourceExhausted(format!(
                "{name}: {MAX_DERIVED} out= forms are derived already; no more are made"
            )));
        }
        // A concurrent derivation of the same name may win the race; its op
        // is the same one.
        if self.add(vec![def]).is_err() {
            self.derived.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        }
        self.exact(&name).ok_or_else(|| Error::Internal(format!("{name}: derived op was not registered")))
    }

    /// Whether the registry runs an op declared as `decl` (an aten
    /// declaration, as a frontend's own schema gives it): a registered op of
    /// that name, or an `out=` form derived from a functional op that takes
    /// exactly the declared inputs, by name and type ([`variants`]).
    pub fn declare(&self, decl: &str) -> Result<bool> {
        let name = decl.split('(').next().unwrap_or_default().trim();
        let registered = self.exact(name).map(|id| self.get(id));
        // A registered op is taken at its word, however its declaration
        // spells the types (`int[]` for `SymInt[1]`).
        if registered.is_some_and(|def| !matches!(def.composite, Some(Composite::Out { .. }))) {
            return Ok(true);
        }
        let schema = match Schema::parse(decl) {
            Ok(s) => s,
            // A declaration with types the runtime does not know (Dimname,
            // complex) names nothing it runs.
            Err(_) => return Ok(false),
        };
        if let Some(def) = registered {
            // Derived by name first (a C caller asked), perhaps from another
            // functional overload than `decl` needs.
            return Ok(variants::matches_decl(def, &schema));
        }
        match variants::derive_by_decl(self, &schema) {
            Some(def) => self.add_derived(def).map(|_| true),
            None => Ok(false),
        }
    }

    pub fn get(&self, id: usize) -> &'static OpDef {
        self.ops.read()[id]
    }

    pub fn len(&self) -> usize {
        self.ops.read().len()
    }

    pub fn is_empty(&self) -> bool {
        self.ops.read().is_empty()
    }

    pub fn names(&self) -> Vec<&'static str> {
        self.ops.read().iter().map(|o| o.name()).collect()
    }

    /// Finds an op by full name; `aten::relu` also matches an op registered
    /// without an overload name.
    pub fn lookup(&self, name: &str) -> Result<usize> {
        if let Some(i) = self.exact(name) {
            return Ok(i);
        }
        if let Some(def) = variants::derive_by_name(self, name) {
            return self.add_derived(def);
        }
        let names = self.names();
        let base = name.split('.').next().unwrap_or(name);
        let overloads: Vec<&str> = names.iter().copied().filter(|n| n.split('.').next() == Some(base)).collect();
        let hint = if !overloads.is_empty() {
            format!("; overloads of {base}: {}", overloads.join(", "))
        } else if let Some(near) = names
            .iter()
            .min_by_key(|n| edit_distance(n, name))
            .filter(|n| edit_distance(n, name) <= similar_within(base))
        {
            format!("; did you mean {near}?")
        } else {
            format!(" ({} ops are registered; ttpu_op_count and ttpu_op_name list them)", names.len())
        };
        Err(Error::UnknownOp { name: name.to_string(), hint })
    }
}

/// `aten::add.Tensor(Tensor self, ...) -> Tensor` becomes
/// `aten::add_.Tensor(Tensor(a!) self, ...) -> Tensor(a!)`.
fn inplace_decl(decl: &str) -> String {
    let open = decl.find('(').unwrap();
    let name = &decl[..open];
    let (base, overload) = match name.find('.') {
        Some(d) => (&name[..d], &name[d..]),
        None => (name, ""),
    };
    let args = &decl[open..decl.rfind("->").unwrap()];
    let args = args.replacen("Tensor self", "Tensor(a!) self", 1);
    format!("{base}_{overload}{}-> Tensor(a!)", args)
}

/// How many edits still make a name a likely typo: a quarter of the op's
/// name (after `aten::`), at least one, so `aten::relux` suggests
/// `aten::relu` but `aten::nope` does not suggest `aten::topk`.
fn similar_within(base: &str) -> usize {
    let op = base.rsplit("::").next().unwrap_or(base);
    (op.chars().count() / 4).max(1)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            cur.push((prev[j] + (ca != *cb) as usize).min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}

/// The process-wide registry.
pub fn registry() -> &'static Registry {
    static R: OnceLock<Registry> = OnceLock::new();
    R.get_or_init(Registry::new)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inplace_declarations() {
        assert_eq!(
            inplace_decl("aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor"),
            "aten::add_.Tensor(Tensor(a!) self, Tensor other, *, Scalar alpha=1) -> Tensor(a!)"
        );
        assert_eq!(inplace_decl("aten::relu(Tensor self) -> Tensor"), "aten::relu_(Tensor(a!) self) -> Tensor(a!)");
    }

    #[test]
    fn runtime_floats_bind_as_scalars() {
        let r = registry();
        let def = r.get(r.lookup("aten::_fused_sgd_").unwrap());
        let args = [
            Value::TensorList(vec![]),
            Value::TensorList(vec![]),
            Value::TensorList(vec![]),
            Value::Double(0.0),
            Value::Double(0.9),
            Value::Double(0.1),
            Value::Double(0.0),
            Value::Bool(false),
            Value::Bool(false),
            Value::Bool(true),
        ];
        let bound = def.bind(&args).unwrap();
        // lr and momentum are runtime values (a schedule changes both);
        // the bools, which pick the program, are not.
        assert!(matches!(bound[5], Value::Scalar(Scalar::Float(x)) if x == 0.1));
        assert!(matches!(bound[4], Value::Scalar(Scalar::Float(x)) if x == 0.9));
        assert!(matches!(bound[9], Value::Bool(true)));
    }

    #[test]
    fn lookup_errors_suggest() {
        let r = registry();
        let e = r.lookup("aten::add").unwrap_err().to_string();
        assert!(e.contains("aten::add.Tensor"), "{e}");
        let e = r.lookup("aten::relux").unwrap_err().to_string();
        assert!(e.contains("did you mean aten::relu"), "{e}");
        let e = r.lookup("aten::definitely_not_an_op").unwrap_err();
        assert_eq!(e.code(), crate::Code::NotFound);
        let e = r.lookup("aten::nope").unwrap_err().to_string();
        assert!(!e.contains("did you mean") && e.contains("ttpu_op_count and ttpu_op_name list them"), "{e}");
    }
}
