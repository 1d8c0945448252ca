//! Binning: `searchsorted` and `bucketize` (where values fall among sorted
//! boundaries) and `histc` (counts per equal-width bin).
//!
//! The searches run PyTorch's own binary search, unrolled: `ceil(log2(M +
//! 1))` steps, each a gather of the boundary at every value's midpoint, so
//! the result is PyTorch's for any input, including a NaN value (past every
//! boundary) and NaN boundaries, which sort last. `histc` places an element
//! as PyTorch's CPU kernel does, by linear interpolation over the range
//! (`trunc((x - min) bins / (max - min))`, the right edge in the last bin),
//! and ignores elements outside the range and NaN.

use crate::bail_op;
use crate::dtype::DType;
use crate::error::Result;
use crate::hlo::{Cmp, Elem, Reducer, Ty, V};
use crate::shape;

use super::common::{materialize, result_dtype, Ew};
use super::{Composite, Args, Builder, Cx};

pub fn register(r: &mut Builder) {
    r.composite("aten::bincount(Tensor self, Tensor? weights=None, SymInt minlength=0) -> Tensor", Composite::Bincount);
    r.op(
        "aten::searchsorted.Tensor(Tensor sorted_sequence, Tensor self, *, bool out_int32=False, bool right=False, \
         str? side=None, Tensor? sorter=None) -> Tensor",
        |cx, a| {
            let right = side_right(cx, a, 3, 4)?;
            Ok(vec![search(cx, a.tensor(0)?, Ew::T(a.tensor(1)?), right, a.bool(2)?, a.opt_tensor(5))?])
        },
    );
    r.op(
        "aten::searchsorted.Scalar(Tensor sorted_sequence, Scalar self, *, bool out_int32=False, bool right=False, \
         str? side=None, Tensor? sorter=None) -> Tensor",
        |cx, a| {
            let right = side_right(cx, a, 3, 4)?;
            let v = Ew::S(a.scalar(1)?);
            Ok(vec![search(cx, a.tensor(0)?, v, right, a.bool(2)?, a.opt_tensor(5))?])
        },
    );
    // bucketize(x, boundaries, right) is searchsorted(boundaries, x, right).
    r.op(
        "aten::bucketize.Tensor(Tensor self, Tensor boundaries, *, bool out_int32=False, bool right=False) -> Tensor",
        |cx, a| Ok(vec![bucketize(cx, Ew::T(a.tensor(0)?), a.tensor(1)?, a.bool(2)?, a.bool(3)?)?]),
    );
    r.op(
        "aten::bucketize.Scalar(Scalar self, Tensor boundaries, *, bool out_int32=False, bool right=False) -> Tensor",
        |cx, a| Ok(vec![bucketize(cx, Ew::S(a.scalar(0)?), a.tensor(1)?, a.bool(2)?, a.bool(3)?)?]),
    );
    // min and max decide the program's shape of work (the data's own range
    // when they are equal), so they are compiled in.
    r.op("aten::histc(Tensor self, int bins=100, Scalar min=0, Scalar max=0) -> Tensor", |cx, a| {
        let (lo, hi) = (a.static_scalar(2)?.to_f64(), a.static_scalar(3)?.to_f64());
        Ok(vec![histc(cx, a.tensor(0)?, a.int(1)?, lo, hi)?])
    })
    .static_scalars();
}

/// `right`, reconciled with `side` ("left" / "right"), as PyTorch does.
fn side_right(cx: &Cx, a: &Args, right_at: usize, side_at: usize) -> Result<bool> {
    let right = a.bool(right_at)?;
    match a.opt_str(side_at) {
        None => Ok(right),
        Some("right") => Ok(true),
        Some("left") if right => bail_op!(
            &*cx.op,
            "torch.searchsorted(): side and right can't be set to opposites, got side of left while right was True"
        ),
        Some("left") => Ok(false),
        Some(s) => bail_op!(&*cx.op, "torch.searchsorted(): side can only be 'left' or 'right' but got {s}"),
    }
}

pub(super) fn bucketize(cx: &mut Cx, x: Ew, boundaries: V, out_int32: bool, right: bool) -> Result<V> {
    let bd = cx.dims(boundaries);
    if bd.len() != 1 {
        bail_op!(&*cx.op, "boundaries tensor must be 1 dimension, but got dim({})", bd.len());
    }
    search(cx, boundaries, x, right, out_int32, None)
}

/// For each value, the insertion point among the sorted boundaries of its
/// row (`seq` 1-D for all values, or with the values' leading dims).
pub(super) fn search(cx: &mut Cx, seq: V, values: Ew, right: bool, out_int32: bool, sorter: Option<V>) -> Result<V> {
    let sd = cx.dims(seq);
    let vd = match values {
        Ew::T(v) => cx.dims(v),
        Ew::S(_) => vec![],
    };
    if sd.is_empty() {
        bail_op!(&*cx.op, "boundaries tensor should have positive dimension, but got 0 dimension");
    }
    let m = *sd.last().unwrap();
    let per_row = sd.len() > 1;
    if per_row && (vd.len() != sd.len() || vd[..vd.len() - 1] != sd[..sd.len() - 1]) {
        bail_op!(
            &*cx.op,
            "boundaries tensor should be 1 dimension or the first N-1 dimensions of boundaries tensor and input \
             value tensor must match, but we got boundaries tensor {} and input value tensor {}",
            shape::fmt(&sd),
            shape::fmt(&vd)
        );
    }
    if let Some(s) = sorter {
        if cx.dims(s) != sd || cx.dtype(s) != DType::I64 {
            bail_op!(
                &*cx.op,
                "torch.searchsorted(): sorter must be an int64 tensor of the boundaries' size {}, got {} of {}",
                shape::fmt(&sd),
                cx.dtype(s),
                shape::fmt(&cx.dims(s))
            );
        }
    }
    let out_elem = if out_int32 { Elem::I32 } else { Elem::I64 };
    let n = shape::numel(&vd);
    if n == 0 || m == 0 {
        return Ok(cx.f.splat_int(&Ty::new(out_elem, &vd), 0));
    }
    let d = result_dtype(cx, &[Ew::T(seq), values]);
    let rows = shape::numel(&sd) / m;
    let flat_seq = {
        let s = cx.f.convert(seq, d);
        cx.f.reshape(s, &[rows * m])
    };
    let vals = materialize(cx, values, d, &vd);
    let vals = cx.f.reshape(vals, &[n]);
    let i64_n = Ty::new(Elem::I64, &[n]);
    let int = |cx: &mut Cx, v: i64| cx.f.splat_int(&i64_n, v);
    // Each value's row start in the flattened boundaries.
    let row_base = if per_row {
        let k = *vd.last().unwrap();
        let pos = cx.f.iota(&i64_n, 0);
        let kv = int(cx, k);
        let row = cx.f.div(pos, kv);
        let mv = int(cx, m);
        cx.f.mul(row, mv)
    } else {
        int(cx, 0)
    };
    // The boundary at position p of each value's row (through the sorter).
    let boundary_at = |cx: &mut Cx, p: V| -> V {
        let flat = cx.f.add(row_base, p);
        let flat = match sorter {
            Some(s) => {
                let s_flat = cx.f.reshape(s, &[rows * m]);
                let j = gather1(cx, s_flat, flat, n);
                // A sorter entry outside the row reads as its clamped neighbour
                // (as the checked index does on other gathers).
                let zero = int(cx, 0);
                let top = int(cx, m - 1);
                let j = cx.f.max(j, zero);
                let j = cx.f.min(j, top);
                cx.f.add(row_base, j)
            }
            None => flat,
        };
        gather1(cx, flat_seq, flat, n)
    };
    let mut lo = int(cx, 0);
    let mut hi = int(cx, m);
    let steps = 64 - (m as u64).leading_zeros() + 1;
    let (one, two, last) = (int(cx, 1), int(cx, 2), int(cx, m - 1));
    for _ in 0..steps {
        let active = cx.f.compare(Cmp::Lt, lo, hi);
        let sum = cx.f.add(lo, hi);
        let mid = cx.f.div(sum, two);
        let at = cx.f.min(mid, last);
        let b = boundary_at(cx, at);
        // lower bound: !(b >= v); upper bound: !(b > v) (PyTorch's tests).
        let stop = cx.f.compare(if right { Cmp::Gt } else { Cmp::Ge }, b, vals);
        let go = cx.f.not(stop);
        let step_right = cx.f.and(active, go);
        let step_left = cx.f.and(active, stop);
        let mid1 = cx.f.add(mid, one);
        lo = cx.f.select(step_right, mid1, lo);
        hi = cx.f.select(step_left, mid, hi);
    }
    let out = cx.f.reshape(lo, &vd);
    Ok(cx.f.convert(out, out_elem))
}

/// `flat[idx]` for an int64 index vector of `n` entries.
pub(super) fn gather1(cx: &mut Cx, flat: V, idx: V, n: i64) -> V {
    let i = cx.f.reshape(idx, &[n, 1]);
    cx.f.gather(flat, i, &[], &[0], &[0], 1, &[1], &[n])
}

fn histc(cx: &mut Cx, x: V, bins: i64, lo: f64, hi: f64) -> Result<V> {
    let d = cx.dtype(x);
    if !d.is_float() {
        bail_op!(&*cx.op, "\"histogram_cpu\" not implemented for '{d}'");
    }
    if bins <= 0 {
        bail_op!(&*cx.op, "torch.histc(): bins must be > 0, but got {bins}");
    }
    if lo > hi {
        bail_op!(&*cx.op, "torch.histc(): max must be larger than min");
    }
    if !lo.is_finite() || !hi.is_finite() {
        bail_op!(&*cx.op, "torch.histc(): range of [{lo}, {hi}] is not finite");
    }
    let dims = cx.dims(x);
    let n = shape::numel(&dims);
    let od = d.opmath();
    let xc = cx.f.convert(x, d);
    let xc = cx.f.reshape(xc, &[n]);
    let scalar = Ty::scalar(Elem::from(d));
    // The range: as given, or the data's min and max when min == max (and
    // one either side of a single value).
    let (left, rightv) = if lo == hi {
        if n == 0 {
            let l = cx.f.splat(&scalar, lo - 1.0);
            let r = cx.f.splat(&scalar, hi + 1.0);
            (l, r)
        } else {
            let inf = cx.f.splat(&scalar, f64::INFINITY);
            let ninf = cx.f.splat(&scalar, f64::NEG_INFINITY);
            let mn = cx.f.reduce(xc, inf, &[0], Reducer::Min);
            let mx = cx.f.reduce(xc, ninf, &[0], Reducer::Max);
            let same = cx.f.compare(Cmp::Eq, mn, mx);
            let one = cx.f.splat(&scalar, 1.0);
            let mn1 = cx.f.sub(mn, one);
            let mx1 = cx.f.add(mx, one);
            (cx.f.select(same, mn1, mn), cx.f.select(same, mx1, mx))
        }
    } else {
        (cx.f.splat(&scalar, lo), cx.f.splat(&scalar, hi))
    };
    if n == 0 {
        return Ok(cx.f.splat(&Ty::new(Elem::from(d), &[bins]), 0.0));
    }
    let lb = cx.f.broadcast_to(left, &[n]);
    let rb = cx.f.broadcast_to(rightv, &[n]);
    // (x - min) * bins / (max - min) in the dtype, truncated.
    let off = cx.f.sub(xc, lb);
    let binsv = cx.f.full_like(off, bins as f64);
    let scaled = cx.f.mul(off, binsv);
    let width = cx.f.sub(rb, lb);
    let pos = cx.f.div(scaled, width);
    let pos = cx.f.convert(pos, Elem::I64);
    let i64_n = Ty::new(Elem::I64, &[n]);
    let last = cx.f.splat_int(&i64_n, bins - 1);
    let pos = cx.f.min(pos, last);
    // Outside [min, max] (and NaN) goes to an extra slot that is dropped.
    let ge = cx.f.compare(Cmp::Ge, xc, lb);
    let le = cx.f.compare(Cmp::Le, xc, rb);
    let inside = cx.f.and(ge, le);
    let drop = cx.f.splat_int(&i64_n, bins);
    let slot = cx.f.select(inside, pos, drop);
    let counts = cx.f.splat(&Ty::new(Elem::from(od), &[bins + 1]), 0.0);
    let ones = cx.f.splat(&Ty::new(Elem::from(od), &[n]), 1.0);
    let idx = cx.f.reshape(slot, &[n, 1]);
    let counts = cx.f.scatter(counts, idx, ones, &[], &[0], &[0], 1, Some(Reducer::Add));
    let counts = cx.f.slice_dim(counts, 0, 0, bins, 1);
    Ok(cx.f.convert(counts, d))
}
