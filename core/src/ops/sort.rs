//! Sorting: `sort`, `topk`, as one `stablehlo.sort` of the values together
//! with an iota of their indices. NaN sorts above every number (last when
//! ascending, first when descending) and equal values keep their order, as
//! in PyTorch's CPU kernels.

use crate::bail_op;
use crate::error::Result;
use crate::hlo::{Cmp, Elem, Func, Ty, V};
use crate::shape;

use super::{Cx, Registry};

pub fn register(r: &mut Registry) {
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
