//! Indexing: `index_select`, `gather`, `scatter` (+ `_add`, `_reduce`),
//! advanced indexing (`index.Tensor`, `index_put`), `take` and `put`,
//! `index_add`, `index_reduce`, `index_copy`, `index_fill`, `masked_fill` and
//! `masked_scatter`, lowered to `stablehlo.gather` /
//! `stablehlo.scatter`; `slice_scatter` and `select_scatter` as pads and
//! selects.
//!
//! Indices are device data, so their range cannot be checked while
//! lowering: each op adds an index check ([`Cx::check_index`]) with
//! PyTorch's valid range for it (`0..n` for gather, scatter, index_select,
//! index_add and index_copy; `-n..n` for advanced indexing, `take`, `put`
//! and `index_fill`, where negative indices wrap as `i + n`), which the runtime reports at the next host
//! read. With the checks off, reads clamp out-of-range indices into range
//! (as XLA's gather does) and scatters drop them.

use crate::bail_op;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::hlo::{Cmp, Elem, Reducer, Ty, V};
use crate::shape::{self, Dims};

use super::common::{materialize, Ew};
use super::{Builder, Composite, Cx};

pub fn register(r: &mut Builder) {
    register_dim_ops(r);
    register_advanced(r);
    register_masked(r);
    register_slice_scatter(r);
}

// ------------------------------------------------------------------ helpers

/// Checks that `idx` holds integer indices (int64 or int32).
fn check_index_dtype(cx: &Cx, idx: V, what: &str) -> Result<()> {
    let d = cx.dtype(idx);
    if d != DType::I64 && d != DType::I32 {
        bail_op!(&*cx.op, "{what}(): Expected dtype int32 or int64 for index, but got {d} (index shape {})", shape::fmt(&cx.dims(idx)));
    }
    Ok(())
}

/// `idx` as i64 with negative entries wrapped by `size`.
fn wrap_index(cx: &mut Cx, idx: V, size: i64) -> V {
    let i = cx.f.convert(idx, Elem::I64);
    let ty = cx.ty(i).clone();
    let zero = cx.f.splat_int(&ty, 0);
    let n = cx.f.splat_int(&ty, size);
    let neg = cx.f.compare(Cmp::Lt, i, zero);
    let wrapped = cx.f.add(i, n);
    cx.f.select(neg, wrapped, i)
}

/// Checks `idx` against `0..size` along `dim`: gather, scatter,
/// index_select and index_add take no negative indices in PyTorch.
fn check_dim_index(cx: &mut Cx, idx: V, dim: usize, size: i64) {
    cx.check_index(idx, 0..size, || format!("dimension {dim} with size {size}"));
}

/// Treats a 0-dim value as shape [1] (PyTorch's `ensure_nonempty_dim`).
fn at_least_1d(cx: &mut Cx, v: V) -> V {
    if cx.rank(v) == 0 {
        cx.f.reshape(v, &[1])
    } else {
        v
    }
}

/// Full coordinates (shape `idx dims + [rank]`) for an elementwise gather or
/// scatter along `dim`: the wrapped index on `dim`, the position elsewhere.
fn dim_coords(cx: &mut Cx, idx: V, dim: usize, dim_size: i64) -> V {
    let dims = cx.dims(idx);
    let rank = dims.len();
    let mut with_one = dims.clone();
    with_one.push(1);
    let wrapped = wrap_index(cx, idx, dim_size);
    let cols: Vec<V> = (0..rank)
        .map(|d| {
            let c = if d == dim { wrapped } else { cx.f.iota(&Ty::new(Elem::I64, &dims), d) };
            cx.f.reshape(c, &with_one)
        })
        .collect();
    cx.f.concatenate(&cols, rank)
}

/// The combining op of an accumulating scatter for `elem`.
fn add_reducer(elem: Elem) -> Reducer {
    if elem == Elem::Pred {
        Reducer::Or
    } else {
        Reducer::Add
    }
}

/// Runs `body` on `x` and `upd` converted to opmath (f32 for half types), as
/// accumulating scatters are computed; converts the result back.
fn in_opmath(cx: &mut Cx, x: V, upd: V, body: impl FnOnce(&mut Cx, V, V) -> V) -> V {
    let d = cx.dtype(x);
    let (xo, uo) = (cx.f.convert(x, d.opmath()), cx.f.convert(upd, d.opmath()));
    let y = body(cx, xo, uo);
    cx.f.convert(y, d)
}

// --------------------------------------------------- gather / scatter by dim

/// Shape checks of `gather` / `scatter`: same rank, and `index` no larger
/// than `self` (and `src`) outside `dim`.
fn check_dim_shapes(cx: &Cx, x: &[i64], idx: &[i64], src: Option<&[i64]>, dim: usize) -> Result<()> {
    if idx.len().max(1) != x.len().max(1) {
        bail_op!(
            &*cx.op,
            "Index tensor must have the same number of dimensions as input tensor (index shape {}, self shape {})",
            shape::fmt(idx),
            shape::fmt(x)
        );
    }
    if idx.is_empty() || x.is_empty() {
        return Ok(());
    }
    for d in 0..idx.len() {
        let too_big_self = d != dim && idx[d] > x[d];
        let too_big_src = src.is_some_and(|s| s.len() == idx.len() && idx[d] > s[d]);
        if too_big_self || too_big_src {
            match src {
                None => bail_op!(
                    &*cx.op,
                    "Size does not match at dimension {d} expected index {} to be no larger than self {} apart from dimension {dim}",
                    shape::fmt(idx),
                    shape::fmt(x)
                ),
                Some(s) => bail_op!(
                    &*cx.op,
                    "Expected index {} to be no larger than self {} apart from dimension {dim} and to be no larger size than src {}",
                    shape::fmt(idx),
                    shape::fmt(x),
                    shape::fmt(s)
                ),
            }
        }
    }
    Ok(())
}

pub(super) fn gather_dim(cx: &mut Cx, x: V, dim: i64, idx: V) -> Result<V> {
    check_index_dtype(cx, idx, "gather")?;
    let (xd, id) = (cx.dims(x), cx.dims(idx));
    let dim = shape::wrap_dim(&cx.op, dim, xd.len())?;
    check_dim_shapes(cx, &xd, &id, None, dim)?;
    if shape::numel(&id) == 0 {
        return Ok(cx.f.splat(&cx.ty(x).with_dims(&id), 0.0));
    }
    let (x1, i1) = (at_least_1d(cx, x), at_least_1d(cx, idx));
    let rank = cx.rank(x1);
    let size = cx.dims(x1)[dim];
    check_dim_index(cx, idx, dim, size);
    let coords = dim_coords(cx, i1, dim, size);
    let all: Vec<i64> = (0..rank as i64).collect();
    let out_dims = cx.dims(i1);
    let g = cx.f.gather(x1, coords, &[], &all, &all, rank as i64, &vec![1; rank], &out_dims);
    Ok(cx.f.reshape(g, &id))
}

/// What a `scatter` writes: a tensor (`src`, of the same dtype as `self`)
/// or a runtime scalar.
#[derive(Clone, Copy)]
pub(super) enum Src {
    T(V),
    S(super::ScalarRef),
}

/// Scatters `src` into `x` along `dim` at `idx`, replacing or combining.
pub(super) fn scatter_dim(cx: &mut Cx, x: V, dim: i64, idx: V, src: Src, combine: Option<Reducer>) -> Result<V> {
    check_index_dtype(cx, idx, "scatter")?;
    let (xd, id) = (cx.dims(x), cx.dims(idx));
    let dim = shape::wrap_dim(&cx.op, dim, xd.len())?;
    let d = cx.dtype(x);
    let src_dims = match src {
        Src::T(s) => {
            if cx.dtype(s) != d {
                bail_op!(
                    &*cx.op,
                    "scatter(): Expected self.dtype to be equal to src.dtype (self {d} {}, src {} {})",
                    shape::fmt(&xd),
                    cx.dtype(s),
                    shape::fmt(&cx.dims(s))
                );
            }
            Some(cx.dims(s))
        }
        Src::S(_) => None,
    };
    check_dim_shapes(cx, &xd, &id, src_dims.as_deref(), dim)?;
    if shape::numel(&id) == 0 {
        return Ok(x);
    }
    let (x1, i1) = (at_least_1d(cx, x), at_least_1d(cx, idx));
    let rank = cx.rank(x1);
    let idims = cx.dims(i1);
    // Only the leading index-shaped block of `src` is used.
    let upd = match src {
        Src::T(s) => {
            let s = at_least_1d(cx, s);
            cx.f.slice(s, &vec![0; rank], &idims, &vec![1; rank])
        }
        Src::S(s) => {
            let v = cx.scalar(s, d);
            cx.f.broadcast_to(v, &idims)
        }
    };
    let size = cx.dims(x1)[dim];
    check_dim_index(cx, idx, dim, size);
    let coords = dim_coords(cx, i1, dim, size);
    let all: Vec<i64> = (0..rank as i64).collect();
    let out = match combine {
        None => cx.f.scatter(x1, coords, upd, &[], &all, &all, rank as i64, None),
        Some(r) => in_opmath(cx, x1, upd, |cx, xo, uo| cx.f.scatter(xo, coords, uo, &[], &all, &all, rank as i64, Some(r))),
    };
    Ok(cx.f.reshape(out, &xd))
}

/// `scatter_reduce(self, dim, index, src, reduce, include_self)`.
fn scatter_reduce(cx: &mut Cx, x: V, dim: i64, idx: V, src: V, reduce: &str, include_self: bool) -> Result<V> {
    let d = cx.dtype(x);
    let elem: Elem = d.into();
    let (r, identity) = match reduce {
        "sum" | "mean" => (add_reducer(elem), 0.0),
        "prod" => (if elem == Elem::Pred { Reducer::And } else { Reducer::Mul }, 1.0),
        "amax" => (Reducer::Max, f64::NEG_INFINITY),
        "amin" => (Reducer::Min, f64::INFINITY),
        other => bail_op!(&*cx.op, "reduce argument must be either sum, prod, mean, amax or amin, got {other}"),
    };
    let base = cx.f.convert(x, d.opmath());
    let srco = cx.f.convert(src, d.opmath());
    // Without self, scattered positions start from the reduction's identity.
    let base = if include_self {
        base
    } else {
        let ident = identity_value(cx, d.opmath(), identity);
        let id_src = cx.f.broadcast_to(ident, &cx.dims(srco));
        scatter_dim(cx, base, dim, idx, Src::T(id_src), None)?
    };
    let mut out = scatter_dim(cx, base, dim, idx, Src::T(srco), Some(r))?;
    if reduce == "mean" {
        // Divide by the number of contributions (self counts once if
        // included); positions nothing was scattered to keep their value.
        let od = d.opmath();
        let dims = cx.dims(out);
        let count0 = cx.f.splat(&Ty::new(od, &dims), if include_self { 1.0 } else { 0.0 });
        let ones = cx.f.splat(&Ty::new(od, &cx.dims(srco)), 1.0);
        let count = scatter_dim(cx, count0, dim, idx, Src::T(ones), Some(Reducer::Add))?;
        let zero = cx.f.full_like(count, 0.0);
        let one = cx.f.full_like(count, 1.0);
        let none = cx.f.compare(Cmp::Eq, count, zero);
        let count = cx.f.select(none, one, count);
        out = if d.is_float() { cx.f.div(out, count) } else { floor_div_int(cx, out, count) };
    }
    Ok(cx.f.convert(out, d))
}

/// The identity `v` (±inf for max/min) in `d`; integer types use their limits.
fn identity_value(cx: &mut Cx, d: DType, v: f64) -> V {
    let t = Ty::scalar(d);
    if d.is_float() || v.is_finite() {
        return cx.f.splat(&t, v);
    }
    let (lo, hi) = match d {
        DType::U8 => (0, u8::MAX as i64),
        DType::I8 => (i8::MIN as i64, i8::MAX as i64),
        DType::I16 => (i16::MIN as i64, i16::MAX as i64),
        DType::I32 => (i32::MIN as i64, i32::MAX as i64),
        DType::Bool => (0, 1),
        _ => (i64::MIN, i64::MAX),
    };
    cx.f.splat_int(&t, if v < 0.0 { lo } else { hi })
}

/// Integer division rounding toward -inf (counts are positive).
fn floor_div_int(cx: &mut Cx, a: V, b: V) -> V {
    let q = cx.f.div(a, b);
    let r = cx.f.binary("stablehlo.remainder", a, b);
    let zero = cx.f.full_like(a, 0.0);
    let one = cx.f.full_like(a, 1.0);
    let r_neg = cx.f.compare(Cmp::Lt, r, zero);
    let qm1 = cx.f.sub(q, one);
    cx.f.select(r_neg, qm1, q)
}

/// `index_select` and `index_add` indices: a vector (or a scalar) of ints.
fn check_vector_index(cx: &Cx, idx: V, what: &str) -> Result<()> {
    check_index_dtype(cx, idx, what)?;
    if cx.rank(idx) > 1 {
        bail_op!(&*cx.op, "{what}(): Index is supposed to be a vector, but got index of shape {}", shape::fmt(&cx.dims(idx)));
    }
    Ok(())
}

fn index_select(cx: &mut Cx, x: V, dim: i64, idx: V) -> Result<V> {
    check_vector_index(cx, idx, "index_select")?;
    let xd = cx.dims(x);
    let dim = shape::wrap_dim(&cx.op, dim, xd.len())?;
    let n = shape::numel(&cx.dims(idx));
    if xd.is_empty() && n != 1 {
        bail_op!(&*cx.op, "index_select(): Index to scalar can have only 1 value, got {n} value(s)");
    }
    let x1 = at_least_1d(cx, x);
    let mut out_dims = cx.dims(x1);
    out_dims[dim] = n;
    let out_shape: Vec<i64> = if xd.is_empty() { Vec::new() } else { out_dims.clone() };
    if shape::numel(&out_dims) == 0 {
        return Ok(cx.f.splat(&cx.ty(x).with_dims(&out_shape), 0.0));
    }
    let rank = out_dims.len();
    let size = cx.dims(x1)[dim];
    check_dim_index(cx, idx, dim, size);
    let i = cx.f.reshape(idx, &[n, 1]);
    let i = wrap_index(cx, i, size);
    let offset: Vec<i64> = (0..rank as i64).filter(|&d| d != dim as i64).collect();
    let mut slice = cx.dims(x1);
    slice[dim] = 1;
    let g = cx.f.gather(x1, i, &offset, &[dim as i64], &[dim as i64], 1, &slice, &out_dims);
    Ok(cx.f.reshape(g, &out_shape))
}

/// `index_reduce`: `scatter_reduce` along `dim` with the index vector
/// spread over the source's other dims (`self[.., index[i], ..] reduce=
/// source[.., i, ..]`), so it shares its reductions and `include_self`.
fn index_reduce(cx: &mut Cx, x: V, dim: i64, idx: V, src: V, reduce: &str, include_self: bool) -> Result<V> {
    check_vector_index(cx, idx, "index_reduce_")?;
    if !matches!(reduce, "prod" | "mean" | "amax" | "amin") {
        bail_op!(&*cx.op, "index_reduce(): Expected reduce to be one of prod, mean, amax or amin but got {reduce}.");
    }
    let (xd, sd) = (cx.dims(x), cx.dims(src));
    let dim = shape::wrap_dim(&cx.op, dim, xd.len())?;
    let (d, sdt) = (cx.dtype(x), cx.dtype(src));
    if d != sdt {
        bail_op!(&*cx.op, "index_reduce_(): self ({d}) and source ({sdt}) must have the same scalar type");
    }
    let n = shape::numel(&cx.dims(idx));
    let (x1, s1) = (at_least_1d(cx, x), at_least_1d(cx, src));
    let (x1d, s1d) = (cx.dims(x1), cx.dims(s1));
    if s1d.len() != x1d.len() || s1d[dim] != n || (0..x1d.len()).any(|k| k != dim && x1d[k] != s1d[k]) {
        bail_op!(
            &*cx.op,
            "index_reduce_(): source {} must match self {} except at dim {dim}, where it must have the {n} indexed \
             entries",
            shape::fmt(&sd),
            shape::fmt(&xd)
        );
    }
    if n == 0 || shape::numel(&x1d) == 0 {
        return Ok(x);
    }
    cx.check_index(idx, 0..x1d[dim], || format!("dim {dim} of size {}", x1d[dim]));
    let i1 = cx.f.reshape(idx, &[n]);
    let i1 = cx.f.convert(i1, Elem::I64);
    let full = cx.f.broadcast_in_dim(i1, &[dim as i64], &s1d);
    let y = scatter_reduce(cx, x1, dim as i64, full, s1, reduce, include_self)?;
    Ok(cx.f.reshape(y, &xd))
}

fn index_add(cx: &mut Cx, x: V, dim: i64, idx: V, src: V, alpha: super::ScalarRef) -> Result<V> {
    check_vector_index(cx, idx, "index_add_")?;
    let (xd, sd) = (cx.dims(x), cx.dims(src));
    let dim = shape::wrap_dim(&cx.op, dim, xd.len())?;
    let n = shape::numel(&cx.dims(idx));
    let (d, sdt) = (cx.dtype(x), cx.dtype(src));
    if d != sdt {
        bail_op!(&*cx.op, "index_add_(): self ({d}) and source ({sdt}) must have the same scalar type");
    }
    if sd.len().max(1) != xd.len().max(1) {
        bail_op!(
            &*cx.op,
            "index_add_(): source {} and self {} must have the same number of dimensions",
            shape::fmt(&sd),
            shape::fmt(&xd)
        );
    }
    let (x1, s1) = (at_least_1d(cx, x), at_least_1d(cx, src));
    let (x1d, s1d) = (cx.dims(x1), cx.dims(s1));
    if s1d[dim] != n {
        bail_op!(
            &*cx.op,
            "index_add_(): Number of indices ({n}) should be equal to source.size(dim): ({}), for dim: {dim} (self {}, source {})",
            s1d[dim],
            shape::fmt(&xd),
            shape::fmt(&sd)
        );
    }
    if let Some(k) = (0..x1d.len()).find(|&k| k != dim && x1d[k] != s1d[k]) {
        bail_op!(
            &*cx.op,
            "index_add_(): self and source must have the same size at dimension {k}; self {}, source {}",
            shape::fmt(&xd),
            shape::fmt(&sd)
        );
    }
    if n == 0 || shape::numel(&x1d) == 0 {
        return Ok(x);
    }
    check_dim_index(cx, idx, dim, x1d[dim]);
    let od = d.opmath();
    let scaled = if d == DType::Bool {
        s1
    } else {
        let s = cx.f.convert(s1, od);
        let al = materialize(cx, Ew::S(alpha), od, &s1d);
        cx.f.mul(s, al)
    };
    let r = add_reducer(d.into());
    let out = in_opmath(cx, x1, scaled, |cx, xo, uo| scatter_slices(cx, xo, dim, idx, uo, Some(r)));
    Ok(cx.f.reshape(out, &xd))
}

/// Writes slice `k` of `upd` along `dim` (shape `x`'s with `dim` sized as
/// the index) to position `idx[k]` of `x` along `dim`, replacing or
/// combining. `idx` is a vector or scalar of checked indices, `x` at least
/// 1-d.
fn scatter_slices(cx: &mut Cx, x: V, dim: usize, idx: V, upd: V, combine: Option<Reducer>) -> V {
    let n = shape::numel(&cx.dims(idx));
    let size = cx.dims(x)[dim];
    let i = cx.f.reshape(idx, &[n, 1]);
    let i = wrap_index(cx, i, size);
    let window: Vec<i64> = (0..cx.rank(x) as i64).filter(|&k| k != dim as i64).collect();
    cx.f.scatter(x, i, upd, &window, &[dim as i64], &[dim as i64], 1, combine)
}

/// The fill value of `index_fill_` / `masked_fill_` (`op`): a scalar or a
/// 0-dim tensor.
fn scalar_value(cx: &Cx, value: Ew, op: &str) -> Result<()> {
    if let Ew::T(v) = value {
        if cx.rank(v) != 0 {
            bail_op!(
                &*cx.op,
                "{op} only supports a 0-dimensional value tensor, but got tensor with {} dimension(s) (value shape {}).",
                cx.rank(v),
                shape::fmt(&cx.dims(v))
            );
        }
    }
    Ok(())
}

/// `index_fill(self, dim, index, value)`: every slice of `self` along `dim`
/// that `index` names is set to `value` (a scalar, or a 0-dim tensor of any
/// dtype, converted to `self`'s). Negative indices wrap, as in PyTorch.
fn index_fill(cx: &mut Cx, x: V, dim: i64, idx: V, value: Ew) -> Result<V> {
    let (xd, id) = (cx.dims(x), cx.dims(idx));
    if cx.dtype(idx) != DType::I64 {
        bail_op!(&*cx.op, "index_fill_(): Expected dtype int64 for index, but got {} (index shape {})", cx.dtype(idx), shape::fmt(&id));
    }
    scalar_value(cx, value, "index_fill_")?;
    let dim = shape::wrap_dim(&cx.op, dim, xd.len().max(1))?;
    if id.len() > 1 {
        bail_op!(&*cx.op, "index_fill_(): Index has to be a vector/scalar, but got index of shape {}", shape::fmt(&id));
    }
    let x1 = at_least_1d(cx, x);
    let x1d = cx.dims(x1);
    // An empty self has nothing to fill: PyTorch reads no index then.
    if shape::numel(&id) == 0 || shape::numel(&x1d) == 0 {
        return Ok(x);
    }
    let size = x1d[dim];
    cx.check_index(idx, -size..size, || format!("dimension {dim} with size {size}"));
    // Which positions along `dim` are named: a scatter of `true` into a
    // vector (repeated indices agree), broadcast across the other dims.
    let no = cx.f.splat(&Ty::new(Elem::Pred, &[size]), 0.0);
    let yes = cx.f.splat(&Ty::new(Elem::Pred, &[shape::numel(&id)]), 1.0);
    let idx1 = at_least_1d(cx, idx);
    let named = scatter_slices(cx, no, 0, idx1, yes, None);
    let mask = cx.f.broadcast_in_dim(named, &[dim as i64], &x1d);
    let v = materialize(cx, value, cx.dtype(x), &x1d);
    let out = cx.f.select(mask, v, x1);
    Ok(cx.f.reshape(out, &xd))
}

/// `index_copy(self, dim, index, source)`: slice `k` of `source` along `dim`
/// replaces slice `index[k]` of `self`. A repeated index keeps one of its
/// slices (which one is unspecified, as in PyTorch).
fn index_copy(cx: &mut Cx, x: V, dim: i64, idx: V, src: V) -> Result<V> {
    let (xd, id, sd) = (cx.dims(x), cx.dims(idx), cx.dims(src));
    let shapes = || format!("self {}, index {}, source {}", shape::fmt(&xd), shape::fmt(&id), shape::fmt(&sd));
    let dim = shape::wrap_dim(&cx.op, dim, xd.len().max(1))?;
    if id.len() > 1 {
        bail_op!(&*cx.op, "index_copy_(): Index should have dimension 1 or 0 (got {}; {})", id.len(), shapes());
    }
    let n = shape::numel(&id);
    if sd.is_empty() && n != 1 {
        bail_op!(&*cx.op, "index_copy_(): When source is scalar, index should have one element (got {n}; {})", shapes());
    }
    if sd.len() != xd.len() && !sd.is_empty() && !xd.is_empty() {
        bail_op!(
            &*cx.op,
            "index_copy_(): When source and destination are not scalars, their dimensionality must match. Source \
             dimensionality ({}), destination dimensionality ({}) ({})",
            sd.len(),
            xd.len(),
            shapes()
        );
    }
    if cx.dtype(idx) != DType::I64 {
        bail_op!(&*cx.op, "index_copy_(): Expected a long tensor for index, but got {} ({})", cx.dtype(idx), shapes());
    }
    let (d, sdt) = (cx.dtype(x), cx.dtype(src));
    if d != sdt {
        bail_op!(&*cx.op, "index_copy_(): self and source expected to have the same dtype, but got (self) {d} and (source) {sdt}");
    }
    // The slices (everything but `dim`) must agree; a 0-dim tensor's slice
    // is empty, as in PyTorch.
    let sliced = |s: &[i64]| -> Vec<i64> { s.iter().enumerate().filter(|&(k, _)| k != dim).map(|(_, &v)| v).collect() };
    if sliced(&xd) != sliced(&sd) {
        bail_op!(
            &*cx.op,
            "index_copy_(): Source/destination tensor must have same slice shapes. Destination slice shape {} at \
             dimension {dim} and source slice shape {} at dimension 0 ({})",
            shape::fmt(&sliced(&xd)),
            shape::fmt(&sliced(&sd)),
            shapes()
        );
    }
    if !sd.is_empty() && sd[dim] != n {
        bail_op!(&*cx.op, "index_copy_(): Number of indices ({n}) should be equal to source.size(dim) ({}) ({})", sd[dim], shapes());
    }
    let x1 = at_least_1d(cx, x);
    let x1d = cx.dims(x1);
    // An empty self has nothing to copy to: PyTorch reads no index then.
    if n == 0 || shape::numel(&x1d) == 0 {
        return Ok(x);
    }
    check_dim_index(cx, idx, dim, x1d[dim]);
    let mut upd_dims = x1d.clone();
    upd_dims[dim] = n;
    let upd = cx.f.reshape(src, &upd_dims);
    let idx1 = at_least_1d(cx, idx);
    let out = scatter_slices(cx, x1, dim, idx1, upd, None);
    Ok(cx.f.reshape(out, &xd))
}

/// `put(self, index, source, accumulate)`: `self` flattened, with
/// `source`'s elements (in order) written to, or added at, `index`
/// (negative entries wrap). Any shapes with as many elements in `index` as
/// in `source`.
fn put(cx: &mut Cx, x: V, idx: V, src: V, accumulate: bool) -> Result<V> {
    let (xd, id, sd) = (cx.dims(x), cx.dims(idx), cx.dims(src));
    let shapes = || format!("self {}, index {}, source {}", shape::fmt(&xd), shape::fmt(&id), shape::fmt(&sd));
    if cx.dtype(idx) != DType::I64 {
        bail_op!(&*cx.op, "put_(): Expected a long tensor for index, but got {} ({})", cx.dtype(idx), shapes());
    }
    let (d, sdt) = (cx.dtype(x), cx.dtype(src));
    if d != sdt {
        bail_op!(&*cx.op, "put_(): self and source expected to have the same dtype, but got self.dtype = {d} and source.dtype = {sdt}");
    }
    let (n, m) = (shape::numel(&xd), shape::numel(&id));
    if shape::numel(&sd) != m {
        bail_op!(
            &*cx.op,
            "put_(): Expected source and index to have the same number of elements, but got source.numel() = {}, \
             index.numel() = {m} ({})",
            shape::numel(&sd),
            shapes()
        );
    }
    if m == 0 {
        return Ok(x);
    }
    if n == 0 {
        bail_op!(&*cx.op, "put_(): Tried to put elements into an empty tensor ({})", shapes());
    }
    cx.check_index(idx, -n..n, || format!("a tensor of {n} elements"));
    let flat = cx.f.reshape(x, &[n]);
    let i = cx.f.reshape(idx, &[m, 1]);
    let i = wrap_index(cx, i, n);
    let upd = cx.f.reshape(src, &[m]);
    let scatter = |cx: &mut Cx, xo: V, uo: V, r: Option<Reducer>| cx.f.scatter(xo, i, uo, &[], &[0], &[0], 1, r);
    let out = if accumulate {
        let r = add_reducer(d.into());
        in_opmath(cx, flat, upd, |cx, xo, uo| scatter(cx, xo, uo, Some(r)))
    } else {
        scatter(cx, flat, upd, None)
    };
    Ok(cx.f.reshape(out, &xd))
}

fn register_dim_ops(r: &mut Builder) {
    r.op("aten::index_select(Tensor self, int dim, Tensor index) -> Tensor", |cx, a| {
        Ok(vec![index_select(cx, a.tensor(0)?, a.int(1)?, a.tensor(2)?)?])
    });
    r.op("aten::gather(Tensor self, int dim, Tensor index, *, bool sparse_grad=False) -> Tensor", |cx, a| {
        Ok(vec![gather_dim(cx, a.tensor(0)?, a.int(1)?, a.tensor(2)?)?])
    });
    r.op_and_inplace("aten::scatter.src(Tensor self, int dim, Tensor index, Tensor src) -> Tensor", |cx, a| {
        Ok(vec![scatter_dim(cx, a.tensor(0)?, a.int(1)?, a.tensor(2)?, Src::T(a.tensor(3)?), None)?])
    });
    r.op_and_inplace("aten::scatter.value(Tensor self, int dim, Tensor index, Scalar value) -> Tensor", |cx, a| {
        Ok(vec![scatter_dim(cx, a.tensor(0)?, a.int(1)?, a.tensor(2)?, Src::S(a.scalar(3)?), None)?])
    });
    r.op_and_inplace("aten::scatter_add(Tensor self, int dim, Tensor index, Tensor src) -> Tensor", |cx, a| {
        let x = a.tensor(0)?;
        let r = add_reducer(cx.ty(x).elem);
        Ok(vec![scatter_dim(cx, x, a.int(1)?, a.tensor(2)?, Src::T(a.tensor(3)?), Some(r))?])
    });
    r.op_and_inplace(
        "aten::scatter_reduce.two(Tensor self, int dim, Tensor index, Tensor src, str reduce, *, bool include_self=True) -> Tensor",
        |cx, a| {
            let (x, idx, src) = (a.tensor(0)?, a.tensor(2)?, a.tensor(3)?);
            if cx.dtype(x) != cx.dtype(src) {
                bail_op!(&*cx.op, "scatter_reduce(): Expected self.dtype to be equal to src.dtype ({} vs {})", cx.dtype(x), cx.dtype(src));
            }
            let reduce = a.opt_str(4).unwrap_or("sum").to_string();
            let include_self = a.opt_bool(5).unwrap_or(true);
            Ok(vec![scatter_reduce(cx, x, a.int(1)?, idx, src, &reduce, include_self)?])
        },
    );
    r.op_and_inplace("aten::index_add(Tensor self, int dim, Tensor index, Tensor source, *, Scalar alpha=1) -> Tensor", |cx, a| {
        Ok(vec![index_add(cx, a.tensor(0)?, a.int(1)?, a.tensor(2)?, a.tensor(3)?, a.scalar(4)?)?])
    });
    r.op_and_inplace(
        "aten::index_reduce(Tensor self, int dim, Tensor index, Tensor source, str reduce, *, bool include_self=True) -> Tensor",
        |cx, a| {
            let reduce = a.opt_str(4).unwrap_or("");
            Ok(vec![index_reduce(cx, a.tensor(0)?, a.int(1)?, a.tensor(2)?, a.tensor(3)?, reduce, a.bool(5)?)?])
        },
    );
    r.op_and_inplace("aten::index_fill.int_Scalar(Tensor self, int dim, Tensor index, Scalar value) -> Tensor", |cx, a| {
        Ok(vec![index_fill(cx, a.tensor(0)?, a.int(1)?, a.tensor(2)?, Ew::S(a.scalar(3)?))?])
    });
    r.op_and_inplace("aten::index_fill.int_Tensor(Tensor self, int dim, Tensor index, Tensor value) -> Tensor", |cx, a| {
        Ok(vec![index_fill(cx, a.tensor(0)?, a.int(1)?, a.tensor(2)?, Ew::T(a.tensor(3)?))?])
    });
    r.op_and_inplace("aten::index_copy(Tensor self, int dim, Tensor index, Tensor source) -> Tensor", |cx, a| {
        Ok(vec![index_copy(cx, a.tensor(0)?, a.int(1)?, a.tensor(2)?, a.tensor(3)?)?])
    });
    r.op_and_inplace("aten::put(Tensor self, Tensor index, Tensor source, bool accumulate=False) -> Tensor", |cx, a| {
        Ok(vec![put(cx, a.tensor(0)?, a.tensor(1)?, a.tensor(2)?, a.bool(3)?)?])
    });
}

// -------------------------------------------------------- advanced indexing

/// How `self[indices]` maps onto a `stablehlo.gather` (and, inverted, onto
/// the scatter of `index_put`).
struct Advanced {
    /// Coordinates, shape `batch ++ [indexed.len()]`.
    coords: V,
    /// The indexed dims of `self`, ascending.
    indexed: Vec<i64>,
    /// Positions of the non-indexed dims of `self` in the result.
    offset_dims: Vec<i64>,
    /// `self`'s dims with indexed dims set to 1.
    slice_sizes: Vec<i64>,
    /// The broadcast shape of the index tensors.
    batch: Dims,
    /// The result shape.
    out_dims: Vec<i64>,
}

/// NumPy/PyTorch advanced indexing: the index tensors broadcast together;
/// their dims replace the indexed dims in place when those are adjacent, and
/// go first otherwise.
fn advanced(cx: &mut Cx, x: V, indices: &[Option<V>]) -> Result<Advanced> {
    let xd = cx.dims(x);
    let rank = xd.len();
    if indices.len() > rank {
        bail_op!(&*cx.op, "too many indices for tensor of dimension {rank} (got {}; self shape {})", indices.len(), shape::fmt(&xd));
    }
    let mut indexed = Vec::new();
    let mut idxs = Vec::new();
    for (d, i) in indices.iter().enumerate() {
        let Some(i) = *i else { continue };
        match cx.dtype(i) {
            DType::I64 | DType::I32 => {}
            DType::Bool | DType::U8 => {
                return Err(Error::Unimplemented(format!(
                    "{}: boolean/uint8 mask indices (index {d} of shape {}, self shape {}) give a data-dependent \
                     result shape, which device programs cannot have; convert the mask to integer indices on the \
                     host first (mask.nonzero()) and index with those",
                    cx.op,
                    shape::fmt(&cx.dims(i)),
                    shape::fmt(&xd)
                )))
            }
            other => bail_op!(
                &*cx.op,
                "tensors used as indices must be long, int, byte or bool tensors, but index {d} has dtype {other}"
            ),
        }
        indexed.push(d);
        idxs.push(i);
    }
    if idxs.is_empty() {
        bail_op!(&*cx.op, "at least one index tensor must be given (self shape {})", shape::fmt(&xd));
    }
    let shapes: Vec<Vec<i64>> = idxs.iter().map(|&i| cx.dims(i)).collect();
    let refs: Vec<&[i64]> = shapes.iter().map(|s| s.as_slice()).collect();
    let batch = shape::broadcast_all(&cx.op, &refs).map_err(|_| {
        cx.err(format!(
            "shape mismatch: indexing tensors could not be broadcast together with shapes {}",
            shapes.iter().map(|s| shape::fmt(s)).collect::<Vec<_>>().join(", ")
        ))
    })?;
    let nb = batch.len();
    let mut col_dims = batch.to_vec();
    col_dims.push(1);
    let cols: Vec<V> = idxs
        .iter()
        .zip(&indexed)
        .map(|(&i, &d)| {
            let n = xd[d];
            cx.check_index(i, -n..n, || format!("dimension {d} with size {n}"));
            let w = wrap_index(cx, i, n);
            let b = cx.f.broadcast_to(w, &batch);
            cx.f.reshape(b, &col_dims)
        })
        .collect();
    let coords = cx.f.concatenate(&cols, nb);

    let rest: Vec<i64> = (0..rank).filter(|d| !indexed.contains(d)).map(|d| xd[d]).collect();
    let adjacent = indexed.windows(2).all(|w| w[1] == w[0] + 1);
    // Where the batch dims go in the result.
    let at = if adjacent { indexed[0] } else { 0 };
    let mut out_dims = rest[..at].to_vec();
    out_dims.extend_from_slice(&batch);
    out_dims.extend_from_slice(&rest[at..]);
    let offset_dims: Vec<i64> = (0..at).chain(at + nb..nb + rest.len()).map(|p| p as i64).collect();
    let slice_sizes = (0..rank).map(|d| if indexed.contains(&d) { 1 } else { xd[d] }).collect();
    let indexed = indexed.iter().map(|&d| d as i64).collect();
    Ok(Advanced { coords, indexed, offset_dims, slice_sizes, batch, out_dims })
}

fn index(cx: &mut Cx, x: V, indices: &[Option<V>]) -> Result<V> {
    let adv = advanced(cx, x, indices)?;
    if shape::numel(&adv.out_dims) == 0 {
        return Ok(cx.f.splat(&cx.ty(x).with_dims(&adv.out_dims), 0.0));
    }
    let nb = adv.batch.len() as i64;
    Ok(cx.f.gather(x, adv.coords, &adv.offset_dims, &adv.indexed, &adv.indexed, nb, &adv.slice_sizes, &adv.out_dims))
}

fn index_put(cx: &mut Cx, x: V, indices: &[Option<V>], values: V, accumulate: bool) -> Result<V> {
    let (d, vd) = (cx.dtype(x), cx.dtype(values));
    if d != vd {
        bail_op!(
            &*cx.op,
            "Index put requires the source and destination dtypes match, got {d} for the destination and {vd} for the source."
        );
    }
    let adv = advanced(cx, x, indices)?;
    let vdims = cx.dims(values);
    let fits = shape::broadcast(&cx.op, &vdims, &adv.out_dims).is_ok_and(|b| b.as_slice() == adv.out_dims.as_slice());
    if !fits {
        bail_op!(
            &*cx.op,
            "shape mismatch: value tensor of shape {} cannot be broadcast to indexing result of shape {}",
            shape::fmt(&vdims),
            shape::fmt(&adv.out_dims)
        );
    }
    if shape::numel(&adv.out_dims) == 0 {
        return Ok(x);
    }
    let upd = cx.f.broadcast_to(values, &adv.out_dims);
    let nb = adv.batch.len() as i64;
    let scatter = |cx: &mut Cx, xo: V, uo: V, r: Option<Reducer>| {
        cx.f.scatter(xo, adv.coords, uo, &adv.offset_dims, &adv.indexed, &adv.indexed, nb, r)
    };
    Ok(if accumulate {
        let r = add_reducer(d.into());
        in_opmath(cx, x, upd, |cx, xo, uo| scatter(cx, xo, uo, Some(r)))
    } else {
        scatter(cx, x, upd, None)
    })
}

/// `take(self, index)`: `self` flattened, read at `index` (negative entries
/// wrap); the result has the index's shape.
fn take(cx: &mut Cx, x: V, idx: V) -> Result<V> {
    let (xd, id) = (cx.dims(x), cx.dims(idx));
    if cx.dtype(idx) != DType::I64 {
        bail_op!(&*cx.op, "take(): Expected a long tensor for index, but got {} (index shape {})", cx.dtype(idx), shape::fmt(&id));
    }
    let (n, m) = (shape::numel(&xd), shape::numel(&id));
    if m == 0 {
        return Ok(cx.f.splat(&cx.ty(x).with_dims(&id), 0.0));
    }
    if n == 0 {
        bail_op!(&*cx.op, "take(): tried to take from an empty tensor (self shape {}, index shape {})", shape::fmt(&xd), shape::fmt(&id));
    }
    cx.check_index(idx, -n..n, || format!("a tensor of {n} elements"));
    let flat = cx.f.reshape(x, &[n]);
    let i = cx.f.reshape(idx, &[m, 1]);
    let i = wrap_index(cx, i, n);
    let g = cx.f.gather(flat, i, &[], &[0], &[0], 1, &[1], &[m]);
    Ok(cx.f.reshape(g, &id))
}

fn register_advanced(r: &mut Builder) {
    r.op("aten::index.Tensor(Tensor self, Tensor?[] indices) -> Tensor", |cx, a| {
        let indices = a.opt_tensors(1)?.to_vec();
        Ok(vec![index(cx, a.tensor(0)?, &indices)?])
    });
    let put: std::sync::Arc<super::LowerFn> = std::sync::Arc::new(|cx, a| {
        let indices = a.opt_tensors(1)?.to_vec();
        Ok(vec![index_put(cx, a.tensor(0)?, &indices, a.tensor(2)?, a.bool(3)?)?])
    });
    r.op_shared("aten::index_put(Tensor self, Tensor?[] indices, Tensor values, bool accumulate=False) -> Tensor", put.clone());
    r.op_shared(
        "aten::index_put_(Tensor(a!) self, Tensor?[] indices, Tensor values, bool accumulate=False) -> Tensor(a!)",
        put.clone(),
    );
    // What `index_put_` calls in PyTorch; `unsafe` only skips its checks.
    r.op_shared(
        "aten::_index_put_impl_(Tensor(a!) self, Tensor?[] indices, Tensor values, bool accumulate=False, \
         bool unsafe=False) -> Tensor(a!)",
        put,
    );
    r.op("aten::take(Tensor self, Tensor index) -> Tensor", |cx, a| Ok(vec![take(cx, a.tensor(0)?, a.tensor(1)?)?]));
}

// -------------------------------------------------------------- masked_fill

fn masked_fill(cx: &mut Cx, x: V, mask: V, value: Ew) -> Result<V> {
    if cx.dtype(mask) != DType::Bool {
        bail_op!(
            &*cx.op,
            "masked_fill_ only supports boolean masks, but got mask with dtype {} (mask shape {}, self shape {})",
            cx.dtype(mask),
            shape::fmt(&cx.dims(mask)),
            shape::fmt(&cx.dims(x))
        );
    }
    scalar_value(cx, value, "masked_fill_")?;
    let d = cx.dtype(x);
    let dims = shape::broadcast(&cx.op, &cx.dims(x), &cx.dims(mask))?;
    let xb = cx.f.broadcast_to(x, &dims);
    let m = cx.f.broadcast_to(mask, &dims);
    let v = materialize(cx, value, d, &dims);
    Ok(cx.f.select(m, v, xb))
}

/// Fills the positions where `mask` is true with consecutive elements of
/// `source` (in row-major order). Each position's source element is the
/// number of true mask elements before it. A `source` too short for the
/// mask is an error in PyTorch; here the count is device data, so it is an
/// index check on those source positions (with the checks off, the last
/// element repeats, as gathers clamp).
fn masked_scatter(cx: &mut Cx, x: V, mask: V, source: V) -> Result<V> {
    if cx.dtype(mask) != DType::Bool {
        bail_op!(&*cx.op, "masked_scatter_ only supports boolean masks, but got mask with dtype {}", cx.dtype(mask));
    }
    let (d, sd) = (cx.dtype(x), cx.dtype(source));
    if d != sd {
        bail_op!(&*cx.op, "masked_scatter: expected self and source to have same dtypes but got {d} and {sd}");
    }
    let dims = shape::broadcast(&cx.op, &cx.dims(x), &cx.dims(mask))?;
    let xb = cx.f.broadcast_to(x, &dims);
    let (n, src_n) = (shape::numel(&dims), shape::numel(&cx.dims(source)));
    if n == 0 || src_n == 0 {
        return Ok(xb);
    }
    let m = cx.f.broadcast_to(mask, &dims);
    let m = cx.f.reshape(m, &[n]);
    let ones = cx.f.convert(m, Elem::I64);
    let count = super::reduce::scan(cx, ones, 0, Reducer::Add);
    let one = cx.f.full_like(count, 1.0);
    let pos = cx.f.sub(count, one);
    let zero = cx.f.full_like(pos, 0.0);
    let used = cx.f.select(m, pos, zero);
    cx.check_index(used, 0..src_n, || {
        format!("a source of {src_n} elements (masked_scatter needs one per true element of the mask)")
    });
    let pos = cx.f.reshape(pos, &[n, 1]);
    let src = cx.f.reshape(source, &[src_n]);
    let picked = cx.f.gather(src, pos, &[], &[0], &[0], 1, &[1], &[n]);
    let xf = cx.f.reshape(xb, &[n]);
    let out = cx.f.select(m, picked, xf);
    Ok(cx.f.reshape(out, &dims))
}

fn register_masked(r: &mut Builder) {
    r.composite("aten::masked_select(Tensor self, Tensor mask) -> Tensor", Composite::MaskedSelect);
    r.op_and_inplace("aten::masked_scatter(Tensor self, Tensor mask, Tensor source) -> Tensor", |cx, a| {
        Ok(vec![masked_scatter(cx, a.tensor(0)?, a.tensor(1)?, a.tensor(2)?)?])
    });
    r.op_and_inplace("aten::masked_fill.Scalar(Tensor self, Tensor mask, Scalar value) -> Tensor", |cx, a| {
        Ok(vec![masked_fill(cx, a.tensor(0)?, a.tensor(1)?, Ew::S(a.scalar(2)?))?])
    });
    r.op_and_inplace("aten::masked_fill.Tensor(Tensor self, Tensor mask, Tensor value) -> Tensor", |cx, a| {
        Ok(vec![masked_fill(cx, a.tensor(0)?, a.tensor(1)?, Ew::T(a.tensor(2)?))?])
    });
}

// ------------------------------------------------- slice / select scatter

/// `x` with `src` written to every `step`-th position of dim `d` from
/// `start`: `src` padded into place, and a mask padded the same way.
fn embed_slice(cx: &mut Cx, x: V, src: V, d: usize, start: i64, step: i64) -> V {
    let xd = cx.dims(x);
    let sd = cx.dims(src);
    let rank = xd.len();
    if shape::numel(&sd) == 0 {
        return x;
    }
    let src = cx.f.convert(src, cx.ty(x).elem);
    let mut low = vec![0; rank];
    let mut high = vec![0; rank];
    let mut interior = vec![0; rank];
    low[d] = start;
    interior[d] = step - 1;
    high[d] = xd[d] - (start + (sd[d] - 1) * step + 1);
    let zero = cx.f.splat(&Ty::scalar(cx.ty(x).elem), 0.0);
    let placed = cx.f.pad(src, zero, &low, &high, &interior);
    let t = cx.f.splat(&Ty::new(Elem::Pred, &sd), 1.0);
    let f = cx.f.splat(&Ty::scalar(Elem::Pred), 0.0);
    let mask = cx.f.pad(t, f, &low, &high, &interior);
    cx.f.select(mask, placed, x)
}

fn check_src_shape(cx: &Cx, src: V, want: &[i64], what: &str) -> Result<()> {
    let sd = cx.dims(src);
    if sd != want {
        bail_op!(
            &*cx.op,
            "expected src to have a size equal to the {what} of self. src size = {}, {what} size = {}",
            shape::fmt(&sd),
            shape::fmt(want)
        );
    }
    Ok(())
}

fn slice_scatter(cx: &mut Cx, x: V, src: V, dim: i64, start: Option<i64>, end: Option<i64>, step: i64) -> Result<V> {
    let xd = cx.dims(x);
    if xd.is_empty() {
        bail_op!(&*cx.op, "slice() cannot be applied to a 0-dim tensor.");
    }
    let d = shape::wrap_dim(&cx.op, dim, xd.len())?;
    if step <= 0 {
        bail_op!(&*cx.op, "slice step must be positive, got {step}");
    }
    // The bounds clamp as `slice` clamps them.
    let (start, end) = shape::clamp_slice(xd[d], start, end);
    let mut want = xd.clone();
    want[d] = (end - start + step - 1) / step;
    check_src_shape(cx, src, &want, "slice")?;
    Ok(embed_slice(cx, x, src, d, start, step))
}

fn select_scatter(cx: &mut Cx, x: V, src: V, dim: i64, index: i64) -> Result<V> {
    let xd = cx.dims(x);
    if xd.is_empty() {
        bail_op!(&*cx.op, "select() cannot be applied to a 0-dim tensor.");
    }
    let d = shape::wrap_dim(&cx.op, dim, xd.len())?;
    let n = xd[d];
    if index < -n || index >= n {
        bail_op!(&*cx.op, "select(): index {index} out of range for tensor of size {} at dimension {d}", shape::fmt(&xd));
    }
    let i = if index < 0 { index + n } else { index };
    let mut want = xd.clone();
    want.remove(d);
    check_src_shape(cx, src, &want, "selected slice")?;
    let mut with_one = xd.clone();
    with_one[d] = 1;
    let src = cx.f.reshape(src, &with_one);
    Ok(embed_slice(cx, x, src, d, i, 1))
}

fn register_slice_scatter(r: &mut Builder) {
    r.op(
        "aten::slice_scatter(Tensor self, Tensor src, int dim=0, SymInt? start=None, SymInt? end=None, SymInt step=1) -> Tensor",
        |cx, a| Ok(vec![slice_scatter(cx, a.tensor(0)?, a.tensor(1)?, a.int(2)?, a.opt_int(3), a.opt_int(4), a.int(5)?)?]),
    );
    r.op("aten::select_scatter(Tensor self, Tensor src, int dim, SymInt index) -> Tensor", |cx, a| {
        Ok(vec![select_scatter(cx, a.tensor(0)?, a.tensor(1)?, a.int(2)?, a.int(3)?)?])
    });
}
