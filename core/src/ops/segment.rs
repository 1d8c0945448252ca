//! `segment_reduce` (`torch._segment_reduce`) and its backward: the
//! reduction of consecutive segments along one axis, their lengths (or
//! offsets) given per row of the dims before that axis.
//!
//! Each position along the axis finds its segment by a binary search among
//! the row's segment ends (`bucket::search`); positions past the last
//! segment (lengths may sum to less than the axis) belong to none. One
//! scatter with the reduction's combiner then reduces every segment at
//! once, starting from `initial` (a runtime scalar) or the reduction's
//! identity, as PyTorch's CPU kernel does: an empty segment is `initial`,
//! or the identity (NaN for `mean`), and `mean` divides `initial` plus the
//! sum by the length. Unless `unsafe`, negative lengths and lengths that do
//! not sum to the axis are reported at the next host read.
//!
//! The backward follows the CPU kernel too: `max`/`min` give the gradient
//! to every element equal to the result (or NaN), a positive gradient
//! shared among ties; `prod` divides `grad * output` by the element, or,
//! for a zero or NaN element, multiplies the gradient by the product of
//! the others.

use crate::bail_op;
use crate::error::Result;
use crate::hlo::{Cmp, Elem, Func, Reducer, Ty, V};
use crate::shape;

use super::bucket::search;
use super::common::Ew;
use super::{Builder, Cx};

pub fn register(r: &mut Builder) {
    r.op(
        "aten::segment_reduce(Tensor data, str reduce, *, Tensor? lengths=None, Tensor? indices=None, \
         Tensor? offsets=None, int axis=0, bool unsafe=False, Scalar? initial=None) -> Tensor",
        |cx, a| {
            if a.opt_tensor(3).is_some() {
                bail_op!(&*cx.op, "segment_reduce(): indices based reduction is not supported yet.");
            }
            let data = a.tensor(0)?;
            let kind = Kind::parse(cx, a.opt_str(1).unwrap_or(""))?;
            let seg = Segments::new(cx, data, a.opt_tensor(2), a.opt_tensor(4), a.int(5)?, !a.bool(6)?)?;
            let initial = a.opt_scalar(7).map(|s| cx.scalar(s, seg.elem));
            Ok(vec![forward(cx, &seg, data, kind, initial)])
        },
    );
    r.op(
        "aten::_segment_reduce_backward(Tensor grad, Tensor output, Tensor data, str reduce, *, Tensor? lengths=None, \
         Tensor? offsets=None, int axis=0, Scalar? initial=None) -> Tensor",
        |cx, a| {
            let (grad, output, data) = (a.tensor(0)?, a.tensor(1)?, a.tensor(2)?);
            let kind = Kind::parse(cx, a.opt_str(3).unwrap_or(""))?;
            let seg = Segments::new(cx, data, a.opt_tensor(4), a.opt_tensor(5), a.int(6)?, false)?;
            if cx.dims(grad) != seg.out_dims || cx.dims(output) != seg.out_dims {
                bail_op!(
                    &*cx.op,
                    "grad {} and output {} must have the result's shape {}",
                    shape::fmt(&cx.dims(grad)),
                    shape::fmt(&cx.dims(output)),
                    shape::fmt(&seg.out_dims)
                );
            }
            let initial = a.opt_scalar(7).map(|s| cx.scalar(s, seg.elem));
            Ok(vec![backward(cx, &seg, grad, output, data, kind, initial)])
        },
    );
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Sum,
    Mean,
    Prod,
    Max,
    Min,
}

impl Kind {
    fn parse(cx: &Cx, s: &str) -> Result<Kind> {
        Ok(match s {
            "sum" => Kind::Sum,
            "mean" => Kind::Mean,
            "prod" => Kind::Prod,
            "max" => Kind::Max,
            "min" => Kind::Min,
            _ => bail_op!(&*cx.op, "reduce argument must be either sum, prod, mean, max or min, got {s}"),
        })
    }

    fn reducer(self) -> Reducer {
        match self {
            Kind::Sum | Kind::Mean => Reducer::Add,
            Kind::Prod => Reducer::Mul,
            Kind::Max => Reducer::Max,
            Kind::Min => Reducer::Min,
        }
    }

    fn identity(self) -> f64 {
        match self {
            Kind::Sum | Kind::Mean => 0.0,
            Kind::Prod => 1.0,
            Kind::Max => f64::NEG_INFINITY,
            Kind::Min => f64::INFINITY,
        }
    }
}

/// The segments of a call: the data as `[rows, axis, inner]`, each
/// position's segment and whether it has one, and the lengths.
struct Segments {
    rows: i64,
    axis: i64,
    inner: i64,
    count: i64,
    elem: Elem,
    data_dims: Vec<i64>,
    out_dims: Vec<i64>,
    /// `[rows, axis, 2]` i64: (row, segment), the segment `count` where a
    /// position has none.
    index: V,
    /// `[rows, axis]`: whether each position lies in a segment.
    inside: V,
    /// `[rows, count]` i64.
    lengths: V,
}

impl Segments {
    fn new(cx: &mut Cx, data: V, lengths: Option<V>, offsets: Option<V>, axis: i64, checked: bool) -> Result<Segments> {
        let dims = cx.dims(data);
        let d = cx.dtype(data);
        if !d.is_float() {
            bail_op!(&*cx.op, "\"_segment_reduce_cpu\" not implemented for '{d}'");
        }
        let a = shape::wrap_dim(&cx.op, axis, dims.len().max(1))?;
        let (rows, len_axis) = (shape::numel(&dims[..a]), dims.get(a).copied().unwrap_or(1));
        let inner = shape::numel(dims.get(a + 1..).unwrap_or(&[]));
        let (given, is_offsets) = match (lengths, offsets) {
            (Some(l), _) => (l, false),
            (None, Some(o)) => (o, true),
            (None, None) => bail_op!(&*cx.op, "segment_reduce(): Either lengths or offsets must be defined"),
        };
        let gd = cx.dims(given);
        if gd.len() != a + 1 || gd[..a] != dims[..a] || !cx.dtype(given).is_int() {
            bail_op!(
                &*cx.op,
                "segment_reduce(): {} must be an integral tensor of shape {}[segments] for axis {a} of data of shape {}, got {} {}",
                if is_offsets { "offsets" } else { "lengths" },
                shape::fmt(&dims[..a]),
                shape::fmt(&dims),
                cx.dtype(given),
                shape::fmt(&gd)
            );
        }
        let count = gd[a] - i64::from(is_offsets);
        if count < 0 {
            bail_op!(&*cx.op, "segment_reduce(): offsets must have at least one entry");
        }
        let g = cx.f.convert(given, Elem::I64);
        let g = cx.f.reshape(g, &[rows, gd[a]]);
        let (starts, ends) = if is_offsets {
            (cx.f.slice(g, &[0, 0], &[rows, count], &[1, 1]), cx.f.slice(g, &[0, 1], &[rows, count + 1], &[1, 1]))
        } else {
            let ends = super::reduce::scan(cx, g, 1, Reducer::Add);
            (cx.f.sub(ends, g), ends)
        };
        let lens = cx.f.sub(ends, starts);
        if checked {
            let zero = cx.f.splat_int(&Ty::new(Elem::I64, &[rows, count]), 0);
            let ok = cx.f.compare(Cmp::Ge, lens, zero);
            cx.check_values(ok, "segment_reduce(): lengths contains negative value!");
            let z = cx.f.splat_int(&Ty::scalar(Elem::I64), 0);
            let total = cx.f.reduce(lens, z, &[1], Reducer::Add);
            let full = cx.f.splat_int(&Ty::new(Elem::I64, &[rows]), len_axis);
            let ok = cx.f.compare(Cmp::Eq, total, full);
            cx.check_values(ok, "segment_reduce(): Expected all rows of lengths along axis to sum to data.size(axis) when !unsafe.");
        }
        // Each position's segment: how many segment ends are <= it.
        let pos_ty = Ty::new(Elem::I64, &[rows, len_axis]);
        let pos = cx.f.iota(&pos_ty, 1);
        let seg = if count == 0 || len_axis == 0 {
            cx.f.splat_int(&pos_ty, 0)
        } else {
            search(cx, ends, Ew::T(pos), true, false, None)?
        };
        let last = cx.f.splat_int(&pos_ty, (count - 1).max(0));
        let clamped = cx.f.min(seg, last);
        // ... and it must not lie before that segment's start (offsets may
        // begin past 0).
        let start = if count == 0 || len_axis == 0 { cx.f.splat_int(&pos_ty, 0) } else { row_gather(cx, starts, clamped, rows, len_axis) };
        let cnt = cx.f.splat_int(&pos_ty, count);
        let in_range = cx.f.compare(Cmp::Lt, seg, cnt);
        let after_start = cx.f.compare(Cmp::Ge, pos, start);
        let inside = cx.f.and(in_range, after_start);
        let seg = cx.f.select(inside, seg, cnt);
        let row = cx.f.iota(&pos_ty, 0);
        let (row, seg) = (cx.f.reshape(row, &[rows, len_axis, 1]), cx.f.reshape(seg, &[rows, len_axis, 1]));
        let index = cx.f.concatenate(&[row, seg], 2);
        let mut out_dims = dims[..a].to_vec();
        out_dims.push(count);
        out_dims.extend_from_slice(dims.get(a + 1..).unwrap_or(&[]));
        Ok(Segments {
            rows,
            axis: len_axis,
            inner,
            count,
            elem: Elem::from(d.opmath()),
            data_dims: dims,
            out_dims,
            index,
            inside,
            lengths: lens,
        })
    }

    /// `x` `[rows, axis, inner]` (each position's values) reduced into
    /// `[rows, count + 1, inner]` from `init` (the last segment collects
    /// the positions in none).
    fn reduce(&self, f: &mut Func, x: V, init: V, r: Reducer) -> V {
        let init = f.broadcast_in_dim(init, &[], &[self.rows, self.count + 1, self.inner]);
        f.scatter(init, self.index, x, &[2], &[0, 1], &[0, 1], 2, Some(r))
    }

    /// Each position's value of a per-segment `[rows, count + 1, inner]`.
    fn spread(&self, f: &mut Func, per_segment: V) -> V {
        f.gather(per_segment, self.index, &[2], &[0, 1], &[0, 1], 2, &[1, 1, self.inner], &[self.rows, self.axis, self.inner])
    }

    /// A `[rows, count, inner]` value with one more segment of `fill`.
    fn with_spare(&self, f: &mut Func, x: V, fill: f64) -> V {
        let spare = f.splat(&Ty::new(self.elem, &[self.rows, 1, self.inner]), fill);
        f.concatenate(&[x, spare], 1)
    }
}

/// `x[r, idx[r, p]]` for `x` `[rows, m]` and `idx` `[rows, n]`.
fn row_gather(cx: &mut Cx, x: V, idx: V, rows: i64, n: i64) -> V {
    let t = Ty::new(Elem::I64, &[rows, n]);
    let row = cx.f.iota(&t, 0);
    let (row, idx) = (cx.f.reshape(row, &[rows, n, 1]), cx.f.reshape(idx, &[rows, n, 1]));
    let both = cx.f.concatenate(&[row, idx], 2);
    cx.f.gather(x, both, &[], &[0, 1], &[0, 1], 2, &[1, 1], &[rows, n])
}

fn data3(cx: &mut Cx, seg: &Segments, data: V) -> V {
    let x = cx.f.convert(data, seg.elem);
    cx.f.reshape(x, &[seg.rows, seg.axis, seg.inner])
}

fn forward(cx: &mut Cx, seg: &Segments, data: V, kind: Kind, initial: Option<V>) -> V {
    let d = cx.dtype(data);
    let x = data3(cx, seg, data);
    let init = match initial {
        Some(v) => v,
        None => cx.f.constant(seg.elem, kind.identity()),
    };
    let r = seg.reduce(&mut cx.f, x, init, kind.reducer());
    let r = cx.f.slice(r, &[0, 0, 0], &[seg.rows, seg.count, seg.inner], &[1, 1, 1]);
    let r = if kind == Kind::Mean {
        let shape = [seg.rows, seg.count, seg.inner];
        let len = cx.f.convert(seg.lengths, seg.elem);
        let len = cx.f.broadcast_in_dim(len, &[0, 1], &shape);
        let zero = cx.f.full_like(len, 0.0);
        let empty = cx.f.compare(Cmp::Eq, len, zero);
        let one = cx.f.full_like(len, 1.0);
        let safe = cx.f.select(empty, one, len);
        let m = cx.f.div(r, safe);
        // Empty: `initial` as it is, or NaN without one.
        let fill = if initial.is_some() { r } else { cx.f.full_like(r, f64::NAN) };
        cx.f.select(empty, fill, m)
    } else {
        r
    };
    let r = cx.f.reshape(r, &seg.out_dims);
    cx.f.convert(r, d)
}

fn backward(cx: &mut Cx, seg: &Segments, grad: V, output: V, data: V, kind: Kind, initial: Option<V>) -> V {
    let d = cx.dtype(data);
    let shape3 = [seg.rows, seg.count, seg.inner];
    let x = data3(cx, seg, data);
    let g = cx.f.convert(grad, seg.elem);
    let g = cx.f.reshape(g, &shape3);
    let g = seg.with_spare(&mut cx.f, g, 0.0);
    let ge = seg.spread(&mut cx.f, g);
    let out = cx.f.convert(output, seg.elem);
    let out = cx.f.reshape(out, &shape3);
    let zeros = cx.f.full_like(x, 0.0);
    let ones = cx.f.full_like(x, 1.0);
    let gi = match kind {
        Kind::Sum => ge,
        Kind::Mean => {
            let len = cx.f.convert(seg.lengths, seg.elem);
            let len = cx.f.broadcast_in_dim(len, &[0, 1], &shape3);
            let len = seg.with_spare(&mut cx.f, len, 1.0);
            let le = seg.spread(&mut cx.f, len);
            cx.f.div(ge, le)
        }
        Kind::Max | Kind::Min => {
            let out = seg.with_spare(&mut cx.f, out, 0.0);
            let oe = seg.spread(&mut cx.f, out);
            let nan = cx.f.compare(Cmp::Ne, x, x);
            let eq = cx.f.compare(Cmp::Eq, x, oe);
            let hit = cx.f.or(nan, eq);
            let hits = cx.f.select(hit, ones, zeros);
            let z = cx.f.constant(seg.elem, 0.0);
            let counts = seg.reduce(&mut cx.f, hits, z, Reducer::Add);
            let ce = seg.spread(&mut cx.f, counts);
            let gi = cx.f.select(hit, ge, zeros);
            // Ties share a positive gradient (the CPU kernel's rule).
            let two = cx.f.full_like(x, 2.0);
            let tied = cx.f.compare(Cmp::Ge, ce, two);
            let pos = cx.f.compare(Cmp::Gt, gi, zeros);
            let share = cx.f.and(tied, pos);
            let shared = cx.f.div(gi, ce);
            cx.f.select(share, shared, gi)
        }
        Kind::Prod => {
            let out = seg.with_spare(&mut cx.f, out, 0.0);
            let oe = seg.spread(&mut cx.f, out);
            let nan = cx.f.compare(Cmp::Ne, x, x);
            let zero = cx.f.compare(Cmp::Eq, x, zeros);
            let special = cx.f.or(nan, zero);
            // The product of the other elements for a zero or NaN element:
            // NaN if another is NaN, else 0 if another is 0, else the
            // product of the rest (with `initial`).
            let plain = cx.f.select(special, ones, x);
            let init = match initial {
                Some(v) => v,
                None => cx.f.constant(seg.elem, 1.0),
            };
            let prod = seg.reduce(&mut cx.f, plain, init, Reducer::Mul);
            let pe = seg.spread(&mut cx.f, prod);
            let z = cx.f.constant(seg.elem, 0.0);
            let (nans, zs) = (cx.f.select(nan, ones, zeros), cx.f.select(zero, ones, zeros));
            let nan_n = seg.reduce(&mut cx.f, nans, z, Reducer::Add);
            let zero_n = seg.reduce(&mut cx.f, zs, z, Reducer::Add);
            let (nan_e, zero_e) = (seg.spread(&mut cx.f, nan_n), seg.spread(&mut cx.f, zero_n));
            let (other_nan, other_zero) = (cx.f.sub(nan_e, nans), cx.f.sub(zero_e, zs));
            let any_nan = cx.f.compare(Cmp::Gt, other_nan, zeros);
            let any_zero = cx.f.compare(Cmp::Gt, other_zero, zeros);
            let nanv = cx.f.full_like(x, f64::NAN);
            let excl = cx.f.select(any_zero, zeros, pe);
            let excl = cx.f.select(any_nan, nanv, excl);
            let special_grad = cx.f.mul(ge, excl);
            let go = cx.f.mul(ge, oe);
            let regular = cx.f.div(go, x);
            cx.f.select(special, special_grad, regular)
        }
    };
    let inside = cx.f.broadcast_in_dim(seg.inside, &[0, 1], &[seg.rows, seg.axis, seg.inner]);
    let gi = cx.f.select(inside, gi, zeros);
    let gi = cx.f.reshape(gi, &seg.data_dims);
    cx.f.convert(gi, d)
}
