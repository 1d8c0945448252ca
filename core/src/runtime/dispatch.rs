//! The calling convention's steps that are not one program, in one place
//! for every frontend (PyTorch, C, C++ alike):
//!
//! - boolean (and uint8) masks among an op's `Tensor?[]` indices become the
//!   long indices of their nonzero elements, as PyTorch's own indexing does:
//!   a device program cannot have the data-dependent shape a mask gives;
//! - [`Composite`] ops: `nonzero` reads its count on the host once (a sync,
//!   as on CUDA) and runs `nonzero_static`; `unique` and
//!   `unique_consecutive` read their run count the same way; `masked_select` is broadcasting
//!   plus boolean indexing; `native_batch_norm` is PyTorch's translation to
//!   the `_native_batch_norm_legit` forms; `out=` forms run their
//!   functional op and copy into `out`; `resize_` grows a storage; `bincount`
//!   reads its inputs' range on the host once to size its result;
//!   `linalg_lstsq` solves through the SVD and reads once whether its
//!   residuals exist;
//! - a result that the schema does not declare an alias of an argument never
//!   shares an argument's storage ([`Runtime::unaliased`]).

use std::sync::Arc;

use super::Runtime;
use crate::dtype::{can_cast, DType};
use crate::error::{Error, Result};
use crate::ops::{registry, Composite, OpDef};
use crate::shape;
use crate::tensor::{Scalar, Tensor, Value};

fn tensor_arg<'a>(op: &str, bound: &'a [Value], i: usize) -> Result<&'a Tensor> {
    bound.get(i).and_then(Value::as_tensor).ok_or_else(|| Error::op(op, format!("argument {i} must be a tensor")))
}

/// Whether argument `v` holds a tensor over `t`'s storage.
fn shares_storage(v: &Value, t: &Tensor) -> bool {
    match v {
        Value::Tensor(x) => x.same_storage(t),
        Value::TensorList(xs) => xs.iter().any(|x| x.same_storage(t)),
        Value::OptTensorList(xs) => xs.iter().flatten().any(|x| x.same_storage(t)),
        _ => false,
    }
}

fn is_mask(t: &Tensor) -> bool {
    matches!(t.dtype(), DType::Bool | DType::U8)
}

impl Runtime {
    /// Carries out a [`Composite`] op.
    pub(super) fn composite(self: &Arc<Self>, def: &OpDef, kind: Composite, bound: &[Value]) -> Result<Vec<Value>> {
        let op = def.name();
        match kind {
            Composite::Nonzero => Ok(vec![self.nonzero(tensor_arg(op, bound, 0)?)?.into()]),
            Composite::MaskedSelect => {
                let (x, mask) = (tensor_arg(op, bound, 0)?, tensor_arg(op, bound, 1)?);
                if mask.dtype() != DType::Bool {
                    return Err(Error::op(op, format!("expected BoolTensor for mask, got {}", mask.dtype())));
                }
                let sizes = shape::broadcast(op, x.sizes(), mask.sizes())?.to_vec();
                // The result is 1-D whatever the rank; a 0-dim pair is seen
                // as one element, since a 0-dim mask selects along no dim.
                let view = if sizes.is_empty() { vec![1] } else { sizes.clone() };
                let expand = |t: &Tensor| -> Result<Tensor> {
                    let e = self.call1("aten::expand", &[t.into(), Value::IntList(sizes.clone()), Value::Bool(false)])?;
                    self.call1("aten::reshape", &[e.into(), Value::IntList(view.clone())])
                };
                let (x, mask) = (expand(x)?, expand(mask)?);
                self.call("aten::index.Tensor", &[x.into(), Value::OptTensorList(vec![Some(mask)])])
            }
            Composite::Out { functional } => self.out_variant(def, functional, bound),
            Composite::Unique { consecutive } => {
                let x = tensor_arg(op, bound, 0)?;
                let flag = |i: usize| matches!(bound.get(i), Some(Value::Bool(true)));
                let (inverse, counts) = if consecutive { (flag(1), flag(2)) } else { (flag(2), flag(3)) };
                if consecutive && !matches!(bound.get(3), None | Some(Value::None)) {
                    return Err(Error::Unimplemented(format!(
                        "{op}: with dim=, runs of equal slices are not supported on tpu (only dim=None)"
                    )));
                }
                self.unique(x, !consecutive, inverse, counts).map(|r| r.into_iter().map(Value::from).collect())
            }
            Composite::Resize => {
                let t = tensor_arg(op, bound, 0)?;
                let Some(Value::IntList(sizes)) = bound.get(1) else {
                    return Err(Error::Internal(format!("{op}: size is not an int list")));
                };
                // PyTorch's MemoryFormat codes: 0 contiguous, 1 preserve.
                if let Some(v) = bound.get(2).filter(|v| !matches!(v, Value::None | Value::Int(0 | 1))) {
                    return Err(Error::op(op, format!("tpu tensors support only contiguous resize_ (memory format {v:?})")));
                }
                Ok(vec![self.resize(op, t, sizes)?.into()])
            }
            Composite::Bincount => {
                let weights = bound.get(1).and_then(Value::as_tensor);
                let minlength = match bound.get(2) {
                    Some(Value::Int(m)) => *m,
                    _ => 0,
                };
                Ok(vec![self.bincount(op, tensor_arg(op, bound, 0)?, weights, minlength)?.into()])
            }
            Composite::LengthsOnHost { lengths, op: target } => {
                let mut args = bound.to_vec();
                for i in [lengths, lengths + 1] {
                    let t = tensor_arg(op, bound, i)?;
                    if !t.dtype().is_int() || t.rank() > 1 {
                        return Err(Error::op(op, format!("lengths must be a 1-D integral tensor, got {} {}", t.dtype(), shape::fmt(t.sizes()))));
                    }
                    args[i] = Value::IntList(self.host_i64s(t)?);
                }
                self.call(target, &args)
            }
            Composite::Lstsq => {
                let rcond = match bound.get(2) {
                    Some(Value::Double(r)) => Some(*r),
                    _ => None,
                };
                let driver = match bound.get(3) {
                    Some(Value::Str(d)) => Some(d.as_str()),
                    _ => None,
                };
                self.lstsq(op, tensor_arg(op, bound, 0)?, tensor_arg(op, bound, 1)?, rcond, driver)
            }
            Composite::NativeBatchNorm => {
                // (input, weight, bias, running_mean, running_var, training, momentum, eps)
                let arg = |i: usize| bound.get(i).cloned().unwrap_or(Value::None);
                let stats = [3, 4].iter().all(|&i| bound.get(i).and_then(Value::as_tensor).is_some());
                let training = matches!(bound.get(5), Some(Value::Bool(true)));
                if !stats {
                    self.call("aten::_native_batch_norm_legit.no_stats", &[arg(0), arg(1), arg(2), arg(5), arg(6), arg(7)])
                } else if !training {
                    self.call("aten::_native_batch_norm_legit_no_training", &[arg(0), arg(1), arg(2), arg(3), arg(4), arg(6), arg(7)])
                } else {
                    self.call("aten::_native_batch_norm_legit", &[arg(0), arg(1), arg(2), arg(3), arg(4), arg(5), arg(6), arg(7)])
                }
            }
        }
    }

    /// An `out=` form: the functional op, then each result written into its
    /// `out` (the result's dtype must cast to the out's), or, where the out
    /// has another shape, returned as a new tensor of the out's dtype.
    fn out_variant(self: &Arc<Self>, def: &OpDef, functional: usize, bound: &[Value]) -> Result<Vec<Value>> {
        let op = def.name();
        let f = registry().get(functional);
        // The out form's own inputs; the functional may take more (a
        // factory's optional keyword arguments), left to their defaults but
        // for `dtype`, which is the first out's.
        let n = def.schema.args.iter().filter(|a| !(a.kwarg_only && a.mutable)).count();
        let mut args = bound[..n].to_vec();
        if f.schema.args.len() > n {
            let first_out = tensor_arg(op, bound, n)?;
            args.extend(f.schema.args[n..].iter().map(|a| {
                if a.name == "dtype" { Value::DType(first_out.dtype()) } else { Value::None }
            }));
        }
        let results = self.call(f.name(), &args)?.into_iter().map(Value::into_tensor).collect::<Result<Vec<_>>>()?;
        // Every out is checked before any is written: a refused call leaves
        // them all as they were.
        for (k, r) in results.iter().enumerate() {
            let dst = tensor_arg(op, bound, n + k)?;
            if !can_cast(r.dtype(), dst.dtype()) {
                return Err(Error::op(
                    op,
                    format!("result type {} can't be cast to the desired output type {}", r.dtype(), dst.dtype()),
                ));
            }
        }
        let mut out = Vec::with_capacity(results.len());
        for (k, r) in results.into_iter().enumerate() {
            let dst = tensor_arg(op, bound, n + k)?;
            if r.sizes() == dst.sizes() {
                self.call("aten::copy_", &[dst.into(), r.into()])?;
                out.push(Value::Tensor(dst.clone()));
            } else if r.dtype() != dst.dtype() || bound.iter().any(|v| shares_storage(v, &r)) {
                out.push(self.call1("aten::_to_copy", &[r.into(), Value::DType(dst.dtype())])?.into());
            } else {
                out.push(r.into());
            }
        }
        Ok(out)
    }

    /// `t` resized to contiguous `sizes` at its offset ([`Composite::Resize`]).
    fn resize(self: &Arc<Self>, op: &str, t: &Tensor, sizes: &[i64]) -> Result<Tensor> {
        let numel = shape::checked_numel(op, sizes, t.dtype().size())?;
        let need = t
            .offset()
            .checked_add(numel)
            .ok_or_else(|| Error::op(op, format!("storage size of {} at offset {} overflows", shape::fmt(sizes), t.offset())))?;
        let strides = shape::contiguous_strides(sizes);
        let have = t.storage().numel();
        if need <= have {
            return t.view_of(op, t.offset(), sizes, &strides);
        }
        // The old elements, then zeros (XLA has no uninitialized memory).
        let flat = t.view_of(op, 0, &[have], &[1])?;
        let grown =
            self.call1("aten::constant_pad_nd", &[flat.into(), Value::IntList(vec![0, need - have]), Value::Scalar(Scalar::Int(0))])?;
        grown.view_of(op, t.offset(), sizes, &strides)
    }

    /// `values` (a call's results) with every tensor that the schema does
    /// not declare an alias of an argument, yet shares an argument's storage
    /// (a view kernel's result), replaced by a copy: the frontends may treat
    /// such a result as theirs alone.
    pub(super) fn unaliased(self: &Arc<Self>, def: &OpDef, bound: &[Value], values: Vec<Value>) -> Result<Vec<Value>> {
        values
            .into_iter()
            .enumerate()
            .map(|(r, v)| match v {
                Value::Tensor(t)
                    if def.schema.return_alias.get(r).is_some_and(Option::is_none)
                        && bound.iter().any(|b| shares_storage(b, &t)) =>
                {
                    Ok(self.call1("aten::clone", &[t.into()])?.into())
                }
                other => Ok(other),
            })
            .collect()
    }

    /// The indices of `x`'s nonzero elements, `[count, rank]` (long): the
    /// count is read on the host, then `nonzero_static` runs at that size.
    /// The unique values of `x` flattened (sorted first when `sort`; runs of
    /// equal neighbours otherwise), the run of each element (shaped like
    /// `x`) and each run's length; the unrequested ones are empty int64
    /// tensors, as PyTorch returns them. NaN equals nothing, so each NaN is
    /// its own run.
    fn unique(self: &Arc<Self>, x: &Tensor, sort: bool, inverse: bool, counts: bool) -> Result<[Tensor; 3]> {
        let n = shape::numel(x.sizes());
        let long = |v: Vec<i64>| Value::IntList(v);
        let empty = || self.call1("aten::empty.memory_format", &[long(vec![0]), Value::DType(DType::I64)]);
        let flat = self.call1("aten::reshape", &[x.into(), long(vec![n])])?;
        let (values, order) = if sort {
            let r = self.call("aten::sort.stable", &[flat.into(), Value::Bool(true), Value::Int(0), Value::Bool(false)])?;
            let mut r = r.into_iter().filter_map(|v| v.as_tensor().cloned());
            (r.next().expect("sort returns values"), r.next())
        } else {
            (flat, None)
        };
        if n == 0 {
            // Fresh tensors: a result never shares the argument's storage.
            let values = self.call1("aten::empty.memory_format", &[long(vec![0]), Value::DType(x.dtype())])?;
            let inv = if inverse { self.call1("aten::empty.memory_format", &[long(x.sizes().to_vec()), Value::DType(DType::I64)])? } else { empty()? };
            return Ok([values, inv, empty()?]);
        }
        // start[i]: values[i] differs from values[i - 1] (always at 0).
        let slice = |t: &Tensor, a: i64, b: i64| {
            self.call1("aten::slice.Tensor", &[t.into(), Value::Int(0), Value::Int(a), Value::Int(b), Value::Int(1)])
        };
        let later = slice(&values, 1, n)?;
        let earlier = slice(&values, 0, n - 1)?;
        let differs = self.call1("aten::ne.Tensor", &[later.into(), earlier.into()])?;
        let first = self.call1("aten::ones", &[long(vec![1]), Value::DType(DType::Bool)])?;
        let start = self.call1("aten::cat", &[Value::TensorList(vec![first, differs]), Value::Int(0)])?;
        let runs = self.call1("aten::sum", &[(&start).into(), Value::DType(DType::I64)])?;
        let k = self.host_i64s(&runs)?[0];
        let starts = self.call1("aten::nonzero_static", &[(&start).into(), Value::Int(k), Value::Int(-1)])?;
        let starts = self.call1("aten::reshape", &[starts.into(), long(vec![k])])?;
        let uniques = self.call1("aten::index_select", &[(&values).into(), Value::Int(0), (&starts).into()])?;
        let inv = if inverse {
            let run = self.call1("aten::cumsum", &[start.into(), Value::Int(0), Value::DType(DType::I64)])?;
            let run = self.call1("aten::sub.Scalar", &[run.into(), Value::Scalar(Scalar::Int(1)), Value::Scalar(Scalar::Int(1))])?;
            let run = match &order {
                // Back to the elements' own order: inverse[order[i]] = run[i].
                Some(order) => {
                    let zeros = self.call1("aten::zeros_like", &[(&run).into()])?;
                    self.call1("aten::scatter.src", &[zeros.into(), Value::Int(0), order.into(), run.into()])?
                }
                None => run,
            };
            self.call1("aten::reshape", &[run.into(), long(x.sizes().to_vec())])?
        } else {
            empty()?
        };
        let cnt = if counts {
            // Each run ends where the next begins (the last at n).
            let next = slice(&starts, 1, k)?;
            let end = self.call1("aten::full", &[long(vec![1]), Value::Scalar(Scalar::Int(n)), Value::DType(DType::I64)])?;
            let ends = self.call1("aten::cat", &[Value::TensorList(vec![next, end]), Value::Int(0)])?;
            self.call1("aten::sub.Tensor", &[ends.into(), starts.into(), Value::Scalar(Scalar::Int(1))])?
        } else {
            empty()?
        };
        Ok([uniques, inv, cnt])
    }

    /// `bincount`: counts (int64) or summed weights (float32 for float32
    /// weights, float64 for any other) of each value in `0..=max(x)`, at
    /// least `minlength` of them. The minimum and maximum are read on the
    /// host once, to refuse negative values and to size the result.
    fn bincount(self: &Arc<Self>, op: &str, x: &Tensor, weights: Option<&Tensor>, minlength: i64) -> Result<Tensor> {
        if x.rank() != 1 || !x.dtype().is_int() {
            return Err(Error::op(
                op,
                format!("bincount only supports 1-d non-negative integral inputs (got {} {})", x.dtype(), shape::fmt(x.sizes())),
            ));
        }
        if minlength < 0 {
            return Err(Error::op(op, format!("minlength should be >= 0, got {minlength}")));
        }
        if let Some(w) = weights {
            if w.sizes() != x.sizes() {
                return Err(Error::op(
                    op,
                    format!(
                        "weights should be 1-d and have the same length as input (input {}, weights {})",
                        shape::fmt(x.sizes()),
                        shape::fmt(w.sizes())
                    ),
                ));
            }
        }
        let n = x.sizes()[0];
        let size = if n == 0 {
            minlength
        } else {
            let r = self.call("aten::aminmax", &[x.into(), Value::None, Value::Bool(false)])?;
            let r: Vec<Tensor> = r.into_iter().filter_map(|v| v.as_tensor().cloned()).collect();
            let both = self.call1("aten::stack", &[Value::TensorList(r), Value::Int(0)])?;
            let (lo, hi) = match self.host_i64s(&both)?[..] {
                [lo, hi] => (lo, hi),
                _ => return Err(Error::Internal(format!("{op}: aminmax gave other than two values"))),
            };
            if lo < 0 {
                return Err(Error::op(op, format!("bincount only supports 1-d non-negative integral inputs (minimum {lo})")));
            }
            hi.checked_add(1)
                .filter(|&s| shape::checked_numel(op, &[s], 8).is_ok())
                .ok_or_else(|| Error::op(op, format!("maximum value {hi} gives too many bins")))?
                .max(minlength)
        };
        let dtype = match weights.map(Tensor::dtype) {
            None => DType::I64,
            Some(DType::F32) => DType::F32,
            Some(_) => DType::F64,
        };
        let zeros = self.call1("aten::zeros", &[Value::IntList(vec![size]), Value::DType(dtype)])?;
        if n == 0 {
            return Ok(zeros);
        }
        let src = match weights {
            Some(w) => self.call1("aten::_to_copy", &[w.into(), Value::DType(dtype)])?,
            None => self.call1("aten::ones", &[Value::IntList(vec![n]), Value::DType(dtype)])?,
        };
        let index = self.call1("aten::_to_copy", &[x.into(), Value::DType(DType::I64)])?;
        self.call1("aten::scatter_add", &[zeros.into(), Value::Int(0), index.into(), src.into()])
    }

    /// `linalg_lstsq`, from the SVD `A = U S Vh`: `X = Vhᵀ diag(1/s) Uᵀ B`
    /// over the singular values above `rcond` times the largest (default
    /// `eps max(m, n)`), which is the minimum-norm solution. For matrices of
    /// full rank every driver's solution is this one; for rank-deficient
    /// ones it is `gelsd`'s and `gelss`'s (LAPACK's `gelsy` and `gels`
    /// return other solutions there). What each driver returns besides, as
    /// on the CPU: `rank` (not for `gels`), the singular values (`gelsd`,
    /// `gelss`) and, for tall matrices, the squared residuals of each
    /// column (`gels`; `gelsd` and `gelss` when every matrix has full rank,
    /// which is read on the host once; never `gelsy`).
    fn lstsq(self: &Arc<Self>, op: &str, a: &Tensor, b: &Tensor, rcond: Option<f64>, driver: Option<&str>) -> Result<Vec<Value>> {
        let driver = driver.unwrap_or("gelsy");
        if !matches!(driver, "gels" | "gelsy" | "gelsd" | "gelss") {
            return Err(Error::op(op, "torch.linalg.lstsq: parameter `driver` should be one of (gels, gelsy, gelsd, gelss)"));
        }
        let d = a.dtype();
        if !d.is_float() || b.dtype() != d {
            return Err(Error::op(op, format!("torch.linalg.lstsq: expected float tensors of one dtype, got {d} and {}", b.dtype())));
        }
        let r = a.rank();
        if r < 2 {
            return Err(Error::op(op, format!("torch.linalg.lstsq: input must have at least 2 dimensions, got {r}")));
        }
        let (m, n) = (a.sizes()[r - 2], a.sizes()[r - 1]);
        let vector = b.rank() == r - 1;
        let b = if vector { self.call1("aten::unsqueeze", &[b.into(), Value::Int(-1)])? } else { b.clone() };
        if b.rank() != r || b.sizes()[r - 2] != m {
            return Err(Error::op(op, "torch.linalg.lstsq: input.size(-2) should match other.size(-2)"));
        }
        if b.sizes()[..r - 2] != a.sizes()[..r - 2] {
            return Err(Error::op(
                op,
                format!(
                    "torch.linalg.lstsq: the batch dims of input {} and other {} must be equal",
                    shape::fmt(a.sizes()),
                    shape::fmt(b.sizes())
                ),
            ));
        }
        let int = |v: i64| Value::Int(v);
        let mt = |t: Tensor| self.call1("aten::transpose.int", &[t.into(), int(-2), int(-1)]);
        let usv = self.call("aten::_linalg_svd", &[a.into(), Value::Bool(false), Value::Bool(true), Value::None])?;
        let [u, s, vh]: [Tensor; 3] = usv
            .into_iter()
            .map(Value::into_tensor)
            .collect::<Result<Vec<_>>>()?
            .try_into()
            .map_err(|_| Error::Internal(format!("{op}: the SVD returned other than three tensors")))?;
        let eps = if d == DType::F64 { f64::EPSILON } else if d == DType::F32 { f32::EPSILON as f64 } else { 2f64.powi(-7) };
        let rcond = rcond.filter(|r| *r >= 0.0).unwrap_or(eps * m.max(n) as f64);
        let k = m.min(n);
        let (solution, rank) = if k == 0 {
            let mut dims = a.sizes()[..r - 2].to_vec();
            dims.extend([n, b.sizes()[r - 1]]);
            let zeros = self.call1("aten::zeros", &[Value::IntList(dims), Value::DType(d)])?;
            let rank = self.call1("aten::zeros", &[Value::IntList(a.sizes()[..r - 2].to_vec()), Value::DType(DType::I64)])?;
            (zeros, rank)
        } else {
            // The singular values kept: above rcond times the largest (the first).
            let smax = self.call1("aten::slice.Tensor", &[(&s).into(), int(-1), int(0), int(1), int(1)])?;
            let cut = self.call1("aten::mul.Scalar", &[smax.into(), Value::Scalar(Scalar::Float(rcond))])?;
            let keep = self.call1("aten::gt.Tensor", &[(&s).into(), cut.into()])?;
            let inv = self.call1("aten::reciprocal", &[(&s).into()])?;
            let zero = self.call1("aten::zeros_like", &[(&s).into()])?;
            let inv = self.call1("aten::where.self", &[(&keep).into(), inv.into(), zero.into()])?;
            let inv = self.call1("aten::unsqueeze", &[inv.into(), int(-1)])?;
            let utb = self.call1("aten::matmul", &[mt(u)?.into(), (&b).into()])?;
            let scaled = self.call1("aten::mul.Tensor", &[utb.into(), inv.into()])?;
            let x = self.call1("aten::matmul", &[mt(vh)?.into(), scaled.into()])?;
            let rank = self.call1("aten::sum.dim_IntList", &[keep.into(), Value::IntList(vec![-1]), Value::Bool(false), Value::DType(DType::I64)])?;
            (x, rank)
        };
        let empty = |dtype: DType| self.call1("aten::empty.memory_format", &[Value::IntList(vec![0]), Value::DType(dtype)]);
        let residuals = if m > n && driver != "gelsy" && k > 0 {
            let full = driver == "gels" || {
                let deficient = self.call1("aten::ne.Scalar", &[(&rank).into(), Value::Scalar(Scalar::Int(n))])?;
                let any = self.call1("aten::any", &[deficient.into()])?;
                self.tensor_to_host(&any)?.first().copied() == Some(0)
            };
            if full {
                let ax = self.call1("aten::matmul", &[a.into(), (&solution).into()])?;
                let res = self.call1("aten::sub.Tensor", &[ax.into(), (&b).into(), Value::Scalar(Scalar::Int(1))])?;
                let sq = self.call1("aten::mul.Tensor", &[(&res).into(), (&res).into()])?;
                self.call1("aten::sum.dim_IntList", &[sq.into(), Value::IntList(vec![-2]), Value::Bool(false), Value::None])?
            } else {
                empty(d)?
            }
        } else {
            empty(d)?
        };
        let solution = if vector { self.call1("aten::squeeze.dim", &[solution.into(), int(-1)])? } else { solution };
        let rank = if driver == "gels" { empty(DType::I64)? } else { rank };
        let singular = if matches!(driver, "gelsd" | "gelss") { s } else { empty(d)? };
        Ok(vec![solution.into(), residuals.into(), rank.into(), singular.into()])
    }

    /// An integral tensor's values, read on the host as int64 (a sync): the
    /// data-dependent sizes and lengths the composites need.
    fn host_i64s(self: &Arc<Self>, t: &Tensor) -> Result<Vec<i64>> {
        let t = if t.dtype() == DType::I64 { t.clone() } else { self.call1("aten::_to_copy", &[t.into(), Value::DType(DType::I64)])? };
        let bytes = self.tensor_to_host(&t)?;
        Ok(bytes.chunks_exact(8).map(|c| i64::from_ne_bytes(c.try_into().expect("chunks of 8 bytes"))).collect())
    }

    fn nonzero(self: &Arc<Self>, x: &Tensor) -> Result<Tensor> {
        let ne = self.call1("aten::ne.Scalar", &[x.into(), Value::Scalar(Scalar::Int(0))])?;
        let count = self.call1("aten::sum", &[ne.into(), Value::DType(DType::I64)])?;
        let n = self.host_i64s(&count)?[0];
        self.call1("aten::nonzero_static", &[x.into(), Value::Int(n), Value::Int(-1)])
    }

    /// `bound` with every mask among its `Tensor?[]` indices replaced by the
    /// long indices of its nonzero elements, one per mask dimension (the
    /// arguments unchanged, without a copy, when there is none).
    pub(super) fn expand_masks(self: &Arc<Self>, op: &str, bound: Vec<Value>) -> Result<Vec<Value>> {
        let has_mask = |v: &Value| matches!(v, Value::OptTensorList(ts) if ts.iter().flatten().any(is_mask));
        if !bound.iter().any(has_mask) {
            return Ok(bound);
        }
        // The indexed tensor: every op taking `Tensor?[]` indices indexes its first argument.
        let base: Vec<i64> = match bound.first() {
            Some(Value::Tensor(t)) => t.sizes().to_vec(),
            _ => Vec::new(),
        };
        let mut out = Vec::with_capacity(bound.len());
        for v in bound {
            let Value::OptTensorList(ts) = v else {
                out.push(v);
                continue;
            };
            let mut indices = Vec::with_capacity(ts.len());
            // The dimension of `base` the next index applies to.
            let mut dim = 0;
            for (i, t) in ts.into_iter().enumerate() {
                match t {
                    Some(m) if is_mask(&m) => {
                        let covered = base.get(dim..dim + m.sizes().len());
                        if covered != Some(m.sizes()) {
                            return Err(Error::IndexOutOfRange {
                                op: op.to_string(),
                                msg: format!(
                                    "the shape of the mask {} at index {i} does not match the shape of the indexed tensor {}",
                                    shape::fmt(m.sizes()),
                                    shape::fmt(&base),
                                ),
                            });
                        }
                        dim += m.sizes().len();
                        let nz = self.nonzero(&m)?;
                        for d in 0..m.sizes().len() {
                            let column = self.call1("aten::select.int", &[(&nz).into(), Value::Int(1), Value::Int(d as i64)])?;
                            indices.push(Some(column));
                        }
                    }
                    other => {
                        dim += 1;
                        indices.push(other)
                    }
                }
            }
            out.push(Value::OptTensorList(indices));
        }
        Ok(out)
    }
}
