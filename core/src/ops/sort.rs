//! Sorting: `sort`, `topk`, as one `stablehlo.sort` of the values together
//! with an iota of their indices; and `nonzero_static`, a stable sort that
//! moves the nonzero positions first; and `isin`. NaN sorts above every number (last when
//! ascending, first when descending) and equal values keep their order, as
//! in PyTorch's CPU kernels.

use crate::bail_op;
use crate::error::Result;
use crate::hlo::{Cmp, Elem, Func, Reducer, Ty, V};
use crate::shape;

use super::common::{materialize, result_dtype, Ew};
use super::{Builder, Composite, Cx};

pub fn register(r: &mut Builder) {
    r.op("aten::sort(Tensor self, int dim=-1, bool descending=False) -> (Tensor values, Tensor indices)", |cx, a| {
        let (v, i) = sort(cx, a.tensor(0)?, a.int(1)?, a.bool(2)?)?;
        Ok(vec![v, i])
    });
    // Every sort here is stable, so `stable` changes nothing.
    r.op(
        "aten::sort.stable(Tensor self, *, bool? stable, int dim=-1, bool descending=False) -> (Tensor values, Tensor indices)",
        |cx, a| {
            let (v, i) = sort(cx, a.tensor(0)?, a.int(2)?, a.bool(3)?)?;
            Ok(vec![v, i])
        },
    );
    r.op(
        "aten::topk(Tensor self, SymInt k, int dim=-1, bool largest=True, bool sorted=True) -> (Tensor values, Tensor indices)",
        |cx, a| {
            let (v, i) = topk(cx, a.tensor(0)?, a.int(1)?, a.int(2)?, a.bool(3)?)?;
            Ok(vec![v, i])
        },
    );
    // `nonzero` itself has a data-dependent shape; a frontend reads the
    // count and calls this with it (as PyTorch's own nonzero syncs on CUDA).
    r.composite("aten::nonzero(Tensor self) -> Tensor", Composite::Nonzero);
    r.op("aten::nonzero_static(Tensor self, *, SymInt size, int fill_value=-1) -> Tensor", |cx, a| {
        Ok(vec![nonzero_static(cx, a.tensor(0)?, a.int(1)?, a.int(2)?)?])
    });
    const ISIN: &str = "*, bool assume_unique=False, bool invert=False) -> Tensor";
    for decl in [
        format!("aten::isin.Tensor_Tensor(Tensor elements, Tensor test_elements, {ISIN}"),
        format!("aten::isin.Tensor_Scalar(Tensor elements, Scalar test_element, {ISIN}"),
        format!("aten::isin.Scalar_Tensor(Scalar element, Tensor test_elements, {ISIN}"),
    ] {
        r.op(&decl, |cx, a| Ok(vec![isin(cx, Ew::arg(a, 0)?, Ew::arg(a, 1)?, a.bool(3)?)?]));
    }
}

/// Whether each element equals any test element, in their promoted dtype
/// (NaN equals nothing, as in PyTorch): one [n, m] comparison reduced over
/// the m test elements. `assume_unique` only lets PyTorch pick a faster
/// algorithm; the answer is the same.
fn isin(cx: &mut Cx, elements: Ew, tests: Ew, invert: bool) -> Result<V> {
    let d = result_dtype(cx, &[elements, tests]);
    let flat = |cx: &mut Cx, x: Ew| -> (V, Vec<i64>) {
        let v = match x {
            Ew::T(t) => cx.f.convert(t, d),
            Ew::S(_) => materialize(cx, x, d, &[]),
        };
        let dims = cx.dims(v);
        let n = shape::numel(&dims);
        (cx.f.reshape(v, &[n]), dims.to_vec())
    };
    let (e, dims) = flat(cx, elements);
    let (t, _) = flat(cx, tests);
    let (n, m) = (cx.dims(e)[0], cx.dims(t)[0]);
    shape::checked_numel(&cx.op, &[n, m], 1)?;
    let e = cx.f.broadcast_in_dim(e, &[0], &[n, m]);
    let t = cx.f.broadcast_in_dim(t, &[1], &[n, m]);
    let eq = cx.f.compare(Cmp::Eq, e, t);
    let no = cx.f.constant(Elem::Pred, 0.0);
    let any = cx.f.reduce(eq, no, &[1], Reducer::Or);
    let any = if invert { cx.f.not(any) } else { any };
    Ok(cx.f.reshape(any, &dims))
}

/// The int64 coordinates `[size, rank]` of the first `size` nonzero
/// elements of `x` in row-major order; rows past the count hold `fill`.
fn nonzero_static(cx: &mut Cx, x: V, size: i64, fill: i64) -> Result<V> {
    if size < 0 {
        bail_op!(&*cx.op, "nonzero_static: 'size' must be an non-negative integer, got {size}");
    }
    let dims = cx.dims(x);
    let n = shape::numel(&dims);
    let rank = dims.len();
    let i64s = |len: i64| Ty::new(Elem::I64, &[len]);
    let flat = cx.f.reshape(x, &[n]);
    let nonzero = cx.f.convert(flat, Elem::Pred);
    // A stable sort on "is zero" moves the nonzero positions first, in order.
    let zero_key = cx.f.not(nonzero);
    let key = cx.f.convert(zero_key, Elem::U8);
    let positions = cx.f.iota(&i64s(n), 0);
    let sorted = cx.f.sort(&[key, positions], 0, true, |f, s| f.compare(Cmp::Lt, s[0], s[1]))[1];
    let fill_v = cx.f.splat_int(&Ty::scalar(Elem::I64), fill);
    let first = if size <= n {
        cx.f.slice(sorted, &[0], &[size], &[1])
    } else {
        cx.f.pad(sorted, fill_v, &[0], &[size - n], &[0])
    };
    let ones = cx.f.convert(nonzero, Elem::I64);
    let zero = cx.f.splat_int(&Ty::scalar(Elem::I64), 0);
    let count = cx.f.reduce(ones, zero, &[0], crate::hlo::Reducer::Add);
    let rows = cx.f.iota(&i64s(size), 0);
    let count_b = cx.f.broadcast_to(count, &[size]);
    let valid = cx.f.compare(Cmp::Lt, rows, count_b);
    // Unravel each flat position into its coordinates.
    let mut coords = Vec::with_capacity(rank);
    let mut stride = 1i64;
    for d in (0..rank).rev() {
        let s = cx.f.splat_int(&i64s(size), stride);
        let m = cx.f.splat_int(&i64s(size), dims[d].max(1));
        let q = cx.f.div(first, s);
        let c = cx.f.binary("stablehlo.remainder", q, m);
        coords.push(cx.f.reshape(c, &[size, 1]));
        stride *= dims[d].max(1);
    }
    coords.reverse();
    if coords.is_empty() {
        return Ok(cx.f.splat_int(&Ty::new(Elem::I64, &[size, 0]), 0));
    }
    let all = cx.f.concatenate(&coords, 1);
    let valid2 = cx.f.broadcast_in_dim(valid, &[0], &[size, rank as i64]);
    let fill2 = cx.f.splat_int(&Ty::new(Elem::I64, &[size, rank as i64]), fill);
    Ok(cx.f.select(valid2, all, fill2))
}

/// Whether `a` goes before `b` (rank-0 values of one type).
fn goes_first(f: &mut Func, a: V, b: V, descending: bool) -> V {
    let mut first = f.compare(if descending { Cmp::Gt } else { Cmp::Lt }, a, b);
    if f.ty(a).elem.is_float() {
        let a_nan = f.compare(Cmp::Ne, a, a);
        let b_nan = f.compare(Cmp::Ne, b, b);
        let nan_first = if descending {
            let b_num = f.not(b_nan);
            f.and(a_nan, b_num)
        } else {
            let a_num = f.not(a_nan);
            f.and(a_num, b_nan)
        };
        first = f.or(first, nan_first);
    }
    first
}

/// Sorts `keys` along `dim` (stably) and applies the same permutation to
/// `payload`, a value of the same shape. Returns (sorted keys, payload).
pub(super) fn sort_with(cx: &mut Cx, keys: V, payload: V, dim: usize, descending: bool) -> (V, V) {
    let elem = cx.ty(keys).elem;
    // i1 compares as 0 < 1 through u8.
    let k = if elem == Elem::Pred { cx.f.convert(keys, Elem::U8) } else { keys };
    let out = cx.f.sort(&[k, payload], dim, true, |f, s| goes_first(f, s[0], s[1], descending));
    (cx.f.convert(out[0], elem), out[1])
}

/// Values and int64 indices of `x` sorted along `dim`.
fn sort(cx: &mut Cx, x: V, dim: i64, descending: bool) -> Result<(V, V)> {
    let dims = cx.dims(x);
    if dims.is_empty() {
        shape::wrap_dim(&cx.op, dim, 0)?;
        return Ok((x, cx.f.splat_int(&Ty::scalar(Elem::I64), 0)));
    }
    let d = shape::wrap_dim(&cx.op, dim, dims.len())?;
    let idx = cx.f.iota(&Ty::new(Elem::I64, &dims), d);
    if dims[d] <= 1 || shape::numel(&dims) == 0 {
        return Ok((x, idx));
    }
    Ok(sort_with(cx, x, idx, d, descending))
}

/// The `k` largest (smallest) values along `dim` and their indices, sorted.
fn topk(cx: &mut Cx, x: V, k: i64, dim: i64, largest: bool) -> Result<(V, V)> {
    let dims = cx.dims(x);
    let d = shape::wrap_dim(&cx.op, dim, dims.len())?;
    let size = if dims.is_empty() { 1 } else { dims[d] };
    if k < 0 || k > size {
        bail_op!(&*cx.op, "selected index k out of range (k = {k}, size of dim {d} = {size}, self shape {})", shape::fmt(&dims));
    }
    let (v, i) = sort(cx, x, dim, largest)?;
    if dims.is_empty() {
        return Ok((v, i));
    }
    Ok((cx.f.slice_dim(v, d, 0, k, 1), cx.f.slice_dim(i, d, 0, k, 1)))
}
