//! Losses, forward and backward: NLL (and its 2-d form), MSE, smooth L1,
//! Huber and binary cross-entropy; the margin losses are in [`super::margin`].
//! Every loss reads its `reduction` as one [`Reduction`].

use crate::bail_op;
use crate::dtype::DType;
use crate::error::Result;
use crate::hlo::{Cmp, Elem, Func, Ty, V};
use crate::ops::common::{prepare, result_dtype, up, Ew};
use crate::ops::{Args, Builder, Cx};
use crate::shape::{self, fmt};

use super::*;

pub(super) fn register(r: &mut Builder) {
    register_loss(r);
    register_nll(r);
    register_mse(r);
    register_losses(r);
}

/// A loss's `reduction` argument, as PyTorch's `at::Reduction` numbers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Reduction {
    None,
    Mean,
    Sum,
}

impl Reduction {
    /// Argument `i`, with PyTorch's error for any other number.
    pub(super) fn arg(cx: &Cx, a: &Args, i: usize) -> Result<Reduction> {
        match a.int(i)? {
            0 => Ok(Reduction::None),
            1 => Ok(Reduction::Mean),
            2 => Ok(Reduction::Sum),
            other => bail_op!(&*cx.op, "{other} is not a valid value for reduction"),
        }
    }

    /// The factor on each element's gradient: `1 / n` for the mean of `n`.
    pub(super) fn scale(self, n: i64) -> f64 {
        if self == Reduction::Mean {
            1.0 / n as f64
        } else {
            1.0
        }
    }
}

/// A loss tensor (opmath) reduced to its mean or sum in the result type
/// `d` (unreduced, only rounded to `d`, for [`Reduction::None`]).
pub(super) fn reduce_loss(cx: &mut Cx, l: V, dims: &[i64], reduction: Reduction, d: DType) -> V {
    if reduction == Reduction::None {
        return cx.f.convert(l, d);
    }
    let all: Vec<usize> = (0..dims.len()).collect();
    let total = sum(cx, l, &all);
    let out = match reduction {
        Reduction::Mean => {
            let n = cx.f.full_like(total, shape::numel(dims) as f64);
            cx.f.div(total, n)
        }
        _ => total,
    };
    cx.f.convert(out, d)
}

/// Negative log-likelihood over `x: [N, C]` (opmath) with `t: [N]` (i64).
/// Returns the per-sample losses `[N]` and the per-sample weights `[N]`
/// (0 for ignored targets).
pub(super) fn nll_rows(cx: &mut Cx, x: V, t: V, weight: Option<V>, ignore: i64) -> (V, V) {
    let xd = cx.dims(x);
    let elem = cx.ty(x).elem;
    // Select each row's target column with a one-hot mask: no gather, and
    // other columns (even inf/nan) never leak into the result.
    let cls = cx.f.iota(&Ty::new(Elem::I64, &xd), 1);
    let tb = cx.f.broadcast_in_dim(t, &[0], &xd);
    let hot = cx.f.compare(Cmp::Eq, cls, tb);
    let zeros = cx.f.splat(&Ty::new(elem, &xd), 0.0);
    let picked = cx.f.select(hot, x, zeros);
    let picked = sum(cx, picked, &[1]);
    let n = xd[0];
    let w = match weight {
        Some(w) => {
            let wc = cx.f.convert(w, elem);
            let wb = cx.f.broadcast_in_dim(wc, &[1], &xd);
            let ww = cx.f.select(hot, wb, zeros);
            sum(cx, ww, &[1])
        }
        None => cx.f.splat(&Ty::new(elem, &[n]), 1.0),
    };
    let ig = cx.f.splat_int(&Ty::new(Elem::I64, &[n]), ignore);
    let valid = cx.f.compare(Cmp::Ne, t, ig);
    let wz = cx.f.splat(&Ty::new(elem, &[n]), 0.0);
    let w = cx.f.select(valid, w, wz);
    let l = cx.f.mul(picked, w);
    (cx.f.neg(l), w)
}

/// Reduces per-sample losses as `reduction` asks; returns (output, total_weight).
pub(super) fn nll_reduce(cx: &mut Cx, loss: V, w: V, reduction: Reduction, none_dims: &[i64], none_total: bool) -> (V, V) {
    let total = sum(cx, w, &[0]);
    match reduction {
        Reduction::None => {
            let out = cx.f.reshape(loss, none_dims);
            let total = if none_total { total } else { cx.f.full_like(total, 0.0) };
            (out, total)
        }
        Reduction::Mean => {
            let s = sum(cx, loss, &[0]);
            (cx.f.div(s, total), total)
        }
        Reduction::Sum => (sum(cx, loss, &[0]), total),
    }
}

pub(super) fn nll_checks(cx: &Cx, x: V, t: V, weight: Option<V>, classes: i64) -> Result<DType> {
    let td = cx.dtype(t);
    if !matches!(td, DType::I64 | DType::U8) {
        bail_op!(&*cx.op, "expected target dtype to be Long or Byte, but got {td}");
    }
    if let Some(w) = weight {
        if shape::numel(&cx.dims(w)) != classes {
            bail_op!(
                &*cx.op,
                "weight tensor should be defined either for all {classes} classes or no classes but got weight tensor of shape: {}",
                fmt(&cx.dims(w))
            );
        }
        if cx.dtype(w) != cx.dtype(x) {
            bail_op!(&*cx.op, "expected scalar type {} but found {}", cx.dtype(x), cx.dtype(w));
        }
    }
    require_float(cx, x, "nll_loss")
}

pub(super) fn register_loss(r: &mut Builder) {
    r.op(
        "aten::nll_loss_forward(Tensor self, Tensor target, Tensor? weight, int reduction, SymInt ignore_index) \
         -> (Tensor output, Tensor total_weight)",
        |cx, a| {
            let (x, t, weight) = (a.tensor(0)?, a.tensor(1)?, a.opt_tensor(2));
            let (reduction, ignore) = (Reduction::arg(cx, a, 3)?, a.int(4)?);
            let (xd, td) = (cx.dims(x), cx.dims(t));
            if xd.is_empty() || xd.len() > 2 {
                bail_op!(&*cx.op, "input tensor should be 1D or 2D, but got input of size {}", fmt(&xd));
            }
            if td.len() > 1 {
                bail_op!(
                    &*cx.op,
                    "0D or 1D target tensor expected, multi-target not supported (got target of size {})",
                    fmt(&td)
                );
            }
            let batch = if xd.len() == 2 { xd[0] } else { 1 };
            let tn = if td.is_empty() { 1 } else { td[0] };
            if (xd.len() == 1 && !td.is_empty()) || tn != batch {
                bail_op!(&*cx.op, "size mismatch (got input: {}, target: {})", fmt(&xd), fmt(&td));
            }
            let classes = *xd.last().unwrap();
            let d = nll_checks(cx, x, t, weight, classes)?;
            let xc = up(cx, x);
            let xc = cx.f.reshape(xc, &[batch, classes]);
            let tc = cx.f.convert(t, Elem::I64);
            let tc = cx.f.reshape(tc, &[batch]);
            cx.check_target(tc, classes, ignore);
            let (loss, w) = nll_rows(cx, xc, tc, weight, ignore);
            // Unreduced 2-D input reports total_weight 0; a single sample
            // still reports its weight (PyTorch's CPU kernel).
            let none_dims: Vec<i64> = if xd.len() == 2 { vec![batch] } else { vec![] };
            let (out, total) = nll_reduce(cx, loss, w, reduction, &none_dims, xd.len() == 1);
            Ok(vec![cx.f.convert(out, d), cx.f.convert(total, d)])
        },
    );
    r.op(
        "aten::nll_loss2d_forward(Tensor self, Tensor target, Tensor? weight, int reduction, SymInt ignore_index) \
         -> (Tensor output, Tensor total_weight)",
        |cx, a| {
            let (x, t, weight) = (a.tensor(0)?, a.tensor(1)?, a.opt_tensor(2));
            let (reduction, ignore) = (Reduction::arg(cx, a, 3)?, a.int(4)?);
            let (xd, td) = (cx.dims(x), cx.dims(t));
            if xd.len() != 4 {
                bail_op!(
                    &*cx.op,
                    "only batches of spatial inputs supported (4D tensors), but got input of size: {}",
                    fmt(&xd)
                );
            }
            if td.len() != 3 {
                bail_op!(
                    &*cx.op,
                    "only batches of spatial targets supported (3D tensors) but got targets of size: {}",
                    fmt(&td)
                );
            }
            if td[0] != xd[0] || td[1] != xd[2] || td[2] != xd[3] {
                bail_op!(
                    &*cx.op,
                    "input and target batch or spatial sizes don't match: target {}, input {}",
                    fmt(&td),
                    fmt(&xd)
                );
            }
            let classes = xd[1];
            let d = nll_checks(cx, x, t, weight, classes)?;
            let rows = xd[0] * xd[2] * xd[3];
            let xc = up(cx, x);
            let xc = cx.f.transpose(xc, &[0, 2, 3, 1]);
            let xc = cx.f.reshape(xc, &[rows, classes]);
            let tc = cx.f.convert(t, Elem::I64);
            let tc = cx.f.reshape(tc, &[rows]);
            cx.check_target(tc, classes, ignore);
            let (loss, w) = nll_rows(cx, xc, tc, weight, ignore);
            let (out, total) = nll_reduce(cx, loss, w, reduction, &td, false);
            Ok(vec![cx.f.convert(out, d), cx.f.convert(total, d)])
        },
    );
}

/// `nll_loss_backward` over rows `[rows, classes]` of the input, with the
/// input's shape restored by `restore`.
pub(super) fn nll_backward(cx: &mut Cx, a: &Args, spatial: bool) -> Result<Vec<V>> {
    let (g, x, t, weight) = (a.tensor(0)?, a.tensor(1)?, a.tensor(2)?, a.opt_tensor(3));
    let (reduction, ignore, total) = (Reduction::arg(cx, a, 4)?, a.int(5)?, a.tensor(6)?);
    let xd = cx.dims(x);
    let d = require_float(cx, x, "nll_loss_backward")?;
    let (rows, classes) = match (spatial, xd.len()) {
        (true, 4) => (xd[0] * xd[2] * xd[3], xd[1]),
        (false, 2) => (xd[0], xd[1]),
        (false, 1) => (1, xd[0]),
        _ => bail_op!(&*cx.op, "unexpected input of size {}", fmt(&xd)),
    };
    if shape::numel(&cx.dims(t)) != rows {
        bail_op!(&*cx.op, "size mismatch (got input: {}, target: {})", fmt(&xd), fmt(&cx.dims(t)));
    }
    let od = d.opmath();
    let gc = cx.f.convert(g, od);
    let gn = shape::numel(&cx.dims(g));
    // The gradient of each row's loss.
    let grow = match reduction {
        Reduction::None => {
            if gn != rows {
                bail_op!(&*cx.op, "Expected a tensor of {rows} elements for grad_output, but got {}", fmt(&cx.dims(g)));
            }
            cx.f.reshape(gc, &[rows])
        }
        Reduction::Mean | Reduction::Sum => {
            if gn != 1 {
                bail_op!(&*cx.op, "Expected a single element grad_output tensor, but got: {}", fmt(&cx.dims(g)));
            }
            let mut s = cx.f.reshape(gc, &[]);
            if reduction == Reduction::Mean {
                let tw = cx.f.convert(total, od);
                let tw = cx.f.reshape(tw, &[]);
                s = cx.f.div(s, tw);
            }
            cx.f.broadcast_in_dim(s, &[], &[rows])
        }
    };
    let full = [rows, classes];
    let tc = cx.f.convert(t, Elem::I64);
    let tc = cx.f.reshape(tc, &[rows]);
    let cls = cx.f.iota(&Ty::new(Elem::I64, &full), 1);
    let tb = cx.f.broadcast_in_dim(tc, &[0], &full);
    let hot = cx.f.compare(Cmp::Eq, cls, tb);
    let ig = cx.f.splat_int(&Ty::new(Elem::I64, &full), ignore);
    let valid = cx.f.compare(Cmp::Ne, tb, ig);
    // Ignored rows are zero even when the mean divides by a zero weight.
    let pick = cx.f.and(hot, valid);
    let gb = cx.f.broadcast_in_dim(grow, &[0], &full);
    let mut coef = cx.f.neg(gb);
    if let Some(w) = weight {
        let wc = cx.f.convert(w, od);
        let wc = cx.f.reshape(wc, &[classes]);
        let wb = cx.f.broadcast_in_dim(wc, &[1], &full);
        coef = cx.f.mul(coef, wb);
    }
    let zeros = cx.f.full_like(coef, 0.0);
    let out = cx.f.select(pick, coef, zeros);
    let out = if spatial {
        let out = cx.f.reshape(out, &[xd[0], xd[2], xd[3], classes]);
        cx.f.transpose(out, &[0, 3, 1, 2])
    } else {
        cx.f.reshape(out, &xd)
    };
    Ok(vec![cx.f.convert(out, d)])
}

pub(super) fn register_nll(r: &mut Builder) {
    r.op(
        "aten::nll_loss_backward(Tensor grad_output, Tensor self, Tensor target, Tensor? weight, int reduction, \
         SymInt ignore_index, Tensor total_weight) -> Tensor",
        |cx, a| nll_backward(cx, a, false),
    );
    r.op(
        "aten::nll_loss2d_backward(Tensor grad_output, Tensor self, Tensor target, Tensor? weight, int reduction, \
         SymInt ignore_index, Tensor total_weight) -> Tensor",
        |cx, a| nll_backward(cx, a, true),
    );
}

/// The dtype of `mse_loss` and its backward: the promoted float type.
pub(super) fn mse_dtype(cx: &Cx, xs: &[Ew]) -> Result<DType> {
    let d = result_dtype(cx, xs);
    if !d.is_float() {
        bail_op!(&*cx.op, "\"mse_cpu\" not implemented for '{d}'");
    }
    Ok(d)
}

/// Rounds an opmath value to `d` and back: the intermediate roundings of
/// PyTorch's half-precision vectorized kernels, which round after each op.
pub(super) fn round_to(cx: &mut Cx, v: V, d: DType) -> V {
    let r = cx.f.convert(v, d);
    cx.f.convert(r, d.opmath())
}

pub(super) fn register_mse(r: &mut Builder) {
    r.op("aten::mse_loss(Tensor self, Tensor target, int reduction=Mean) -> Tensor", |cx, a| {
        let xs = [Ew::arg(a, 0)?, Ew::arg(a, 1)?];
        let reduction = Reduction::arg(cx, a, 2)?;
        let d = mse_dtype(cx, &xs)?;
        let (vs, dims) = prepare(cx, &xs, d.opmath())?;
        let diff = cx.f.sub(vs[0], vs[1]);
        let diff = round_to(cx, diff, d);
        let sq = cx.f.mul(diff, diff);
        // PyTorch reduces a loss tensor of the result type: each squared
        // difference rounds to it first.
        let sq = cx.f.convert(sq, d);
        if reduction == Reduction::None {
            return Ok(vec![sq]);
        }
        let sq = cx.f.convert(sq, d.opmath());
        Ok(vec![reduce_loss(cx, sq, &dims, reduction, d)])
    });
    r.op("aten::mse_loss_backward(Tensor grad_output, Tensor self, Tensor target, int reduction) -> Tensor", |cx, a| {
        let xs = [Ew::arg(a, 0)?, Ew::arg(a, 1)?, Ew::arg(a, 2)?];
        let reduction = Reduction::arg(cx, a, 3)?;
        let d = mse_dtype(cx, &xs)?;
        let n = shape::numel(&cx.dims(a.tensor(1)?));
        let norm = 2.0 * reduction.scale(n);
        let (vs, _) = prepare(cx, &xs, d.opmath())?;
        // norm * (self - target) * grad, in PyTorch's order.
        let diff = cx.f.sub(vs[1], vs[2]);
        let diff = round_to(cx, diff, d);
        let nv = cx.f.splat(&Ty::scalar(d), norm);
        let nv = cx.f.convert(nv, d.opmath());
        let nv = cx.f.broadcast_to(nv, &cx.dims(diff));
        let y = cx.f.mul(nv, diff);
        let y = round_to(cx, y, d);
        let y = cx.f.mul(y, vs[0]);
        Ok(vec![cx.f.convert(y, d)])
    });
}

/// The elementwise loss of `|self - target| = z`, from the opmath difference.
pub(super) type LossBody = fn(&mut Func, V, f64) -> V;

pub(super) fn smooth_l1(f: &mut Func, diff: V, beta: f64) -> V {
    // z < beta ? 0.5 z^2 / beta : z - 0.5 beta
    let z = f.unary("stablehlo.abs", diff);
    if beta == 0.0 {
        return z;
    }
    let b = f.full_like(z, beta);
    let small = f.compare(Cmp::Lt, z, b);
    let half = f.full_like(z, 0.5);
    let z2 = f.mul(z, z);
    let q = f.mul(half, z2);
    let q = f.div(q, b);
    let hb = f.full_like(z, 0.5 * beta);
    let l = f.sub(z, hb);
    f.select(small, q, l)
}

pub(super) fn huber(f: &mut Func, diff: V, delta: f64) -> V {
    // z < delta ? 0.5 z^2 : delta (z - 0.5 delta)
    let z = f.unary("stablehlo.abs", diff);
    let dv = f.full_like(z, delta);
    let small = f.compare(Cmp::Lt, z, dv);
    let half = f.full_like(z, 0.5);
    let z2 = f.mul(z, z);
    let q = f.mul(half, z2);
    let hd = f.full_like(z, 0.5 * delta);
    let l = f.sub(z, hd);
    let l = f.mul(dv, l);
    f.select(small, q, l)
}

/// The promoted float dtype of a loss and its backward.
pub(super) fn loss_dtype(cx: &Cx, xs: &[Ew], name: &str) -> Result<DType> {
    let d = result_dtype(cx, xs);
    if !d.is_float() {
        bail_op!(&*cx.op, "\"{name}\" not implemented for '{d}'");
    }
    Ok(d)
}

/// A pointwise loss: the elementwise loss tensor, rounded to the result type
/// and then reduced (0 none, 1 mean, 2 sum), as PyTorch reduces it.
pub(super) fn pointwise_loss(cx: &mut Cx, a: &Args, name: &str, param: &str, body: LossBody) -> Result<Vec<V>> {
    let xs = [Ew::arg(a, 0)?, Ew::arg(a, 1)?];
    let (reduction, p) = (Reduction::arg(cx, a, 2)?, a.float(3)?);
    if p < 0.0 {
        bail_op!(&*cx.op, "{name} does not support negative values for {param}.");
    }
    let d = loss_dtype(cx, &xs, name)?;
    let (vs, dims) = prepare(cx, &xs, d.opmath())?;
    let diff = cx.f.sub(vs[0], vs[1]);
    let l = body(&mut cx.f, diff, p);
    let l = cx.f.convert(l, d);
    if reduction == Reduction::None {
        return Ok(vec![l]);
    }
    let l = cx.f.convert(l, d.opmath());
    Ok(vec![reduce_loss(cx, l, &dims, reduction, d)])
}

/// The backward of a pointwise loss: `x = self - target`, `n` the reduction
/// scale; `x <= -p ? -n c g : x >= p ? n c g : n x g k` with `c` the slope of
/// the linear part (`1` for smooth L1, `delta` for Huber) and `k` the
/// quadratic factor (`1 / beta`, `1`).
pub(super) fn pointwise_loss_backward(cx: &mut Cx, a: &Args, name: &str, huber: bool) -> Result<Vec<V>> {
    let xs = [Ew::arg(a, 0)?, Ew::arg(a, 1)?, Ew::arg(a, 2)?];
    let (reduction, p) = (Reduction::arg(cx, a, 3)?, a.float(4)?);
    let d = loss_dtype(cx, &xs, name)?;
    let n = shape::numel(&cx.dims(a.tensor(1)?));
    let norm = reduction.scale(n);
    let (vs, _) = prepare(cx, &xs, d.opmath())?;
    let (g, x) = (vs[0], cx.f.sub(vs[1], vs[2]));
    let f = &mut cx.f;
    let nv = f.full_like(x, norm);
    let ng = f.mul(nv, g);
    let (slope, k) = if huber { (p, 1.0) } else { (1.0, 1.0 / p) };
    let sl = f.full_like(x, slope);
    let pos = f.mul(ng, sl);
    let neg = f.neg(pos);
    let kv = f.full_like(x, k);
    let mid = f.mul(ng, x);
    let mid = if !huber && p == 0.0 {
        // beta == 0 is the L1 loss: the gradient is the sign of x.
        f.full_like(x, 0.0)
    } else {
        f.mul(mid, kv)
    };
    let pv = f.full_like(x, p);
    let mp = f.neg(pv);
    let below = f.compare(Cmp::Le, x, mp);
    let above = f.compare(Cmp::Ge, x, pv);
    let y = f.select(above, pos, mid);
    let y = f.select(below, neg, y);
    Ok(vec![cx.f.convert(y, d)])
}

/// The operands of `binary_cross_entropy` and its backward: `self`,
/// `target` (PyTorch pairs them after squeezing out their size-1 dims, so
/// a target of shape [3] matches a `self` of [3, 1]) and the
/// optional `weight` broadcast to `self`, all in opmath; and `self`'s dtype.
pub(super) fn bce_operands(cx: &mut Cx, x: V, t: V, w: Option<V>) -> Result<(V, V, Option<V>, DType)> {
    let d = super::require_float(cx, x, "binary_cross_entropy")?;
    let (xd, td) = (cx.dims(x), cx.dims(t));
    let squeezed = |d: &[i64]| d.iter().copied().filter(|&n| n != 1).collect::<Vec<i64>>();
    let t = if td != xd && squeezed(&td) == squeezed(&xd) {
        cx.f.reshape(t, &xd)
    } else {
        let b = shape::broadcast_all(&cx.op, &[&xd, &td])?;
        if b.as_slice() != xd.as_slice() {
            bail_op!(&*cx.op, "target of size {} does not match input of size {}", shape::fmt(&td), shape::fmt(&xd));
        }
        cx.f.broadcast_to(t, &xd)
    };
    let w = match w {
        Some(w) => {
            let wd = cx.dims(w);
            let b = shape::broadcast_all(&cx.op, &[&xd, &wd])?;
            if b.as_slice() != xd.as_slice() {
                bail_op!(&*cx.op, "weight of size {} does not broadcast to input of size {}", shape::fmt(&wd), shape::fmt(&xd));
            }
            let w = cx.f.convert(w, d.opmath());
            Some(cx.f.broadcast_to(w, &xd))
        }
        None => None,
    };
    let (x, t) = (cx.f.convert(x, d.opmath()), cx.f.convert(t, d.opmath()));
    Ok((x, t, w, d))
}

/// `0 <= v <= 1` elementwise (false for NaN), checked on the device as
/// PyTorch checks it on the host.
pub(super) fn check_unit_interval(cx: &mut Cx, v: V, what: &str) {
    let f = &mut cx.f;
    let (zero, one) = (f.full_like(v, 0.0), f.full_like(v, 1.0));
    let ge = f.compare(Cmp::Ge, v, zero);
    let le = f.compare(Cmp::Le, v, one);
    let ok = f.and(ge, le);
    cx.check_values(ok, &format!("all elements of {what} should be between 0 and 1"));
}

pub(super) fn register_bce(r: &mut Builder) {
    r.op(
        "aten::binary_cross_entropy(Tensor self, Tensor target, Tensor? weight=None, int reduction=Mean) -> Tensor",
        |cx, a| {
            let (x, t, w, d) = bce_operands(cx, a.tensor(0)?, a.tensor(1)?, a.opt_tensor(2))?;
            let reduction = Reduction::arg(cx, a, 3)?;
            check_unit_interval(cx, x, "input");
            check_unit_interval(cx, t, "target");
            // (t - 1) max(log1p(-x), -100) - t max(log x, -100): each log
            // clamped so that x = 0 or 1 gives a finite loss, as PyTorch does.
            let f = &mut cx.f;
            let floor = f.full_like(x, -100.0);
            let one = f.full_like(x, 1.0);
            let nx = f.neg(x);
            let l1 = f.unary("stablehlo.log_plus_one", nx);
            let l1 = f.max(l1, floor);
            let l0 = f.unary("stablehlo.log", x);
            let l0 = f.max(l0, floor);
            let tm1 = f.sub(t, one);
            let a1 = f.mul(tm1, l1);
            let a0 = f.mul(t, l0);
            let mut l = f.sub(a1, a0);
            if let Some(w) = w {
                l = f.mul(l, w);
            }
            let l = cx.f.convert(l, d);
            if reduction == Reduction::None {
                return Ok(vec![l]);
            }
            let l = cx.f.convert(l, d.opmath());
            let dims = cx.dims(l);
            Ok(vec![reduce_loss(cx, l, &dims, reduction, d)])
        },
    );
    r.op(
        "aten::binary_cross_entropy_backward(Tensor grad_output, Tensor self, Tensor target, Tensor? weight=None, \
         int reduction=Mean) -> Tensor",
        |cx, a| {
            let (x, t, w, d) = bce_operands(cx, a.tensor(1)?, a.tensor(2)?, a.opt_tensor(3))?;
            let reduction = Reduction::arg(cx, a, 4)?;
            let xd = cx.dims(x);
            let norm = reduction.scale(shape::numel(&xd));
            let g = a.tensor(0)?;
            if shape::broadcast_all(&cx.op, &[&xd, &cx.dims(g)])?.as_slice() != xd.as_slice() {
                bail_op!(&*cx.op, "grad_output of size {} does not broadcast to input of size {}",
                    shape::fmt(&cx.dims(g)), shape::fmt(&xd));
            }
            let g = cx.f.convert(g, d.opmath());
            let g = cx.f.broadcast_to(g, &xd);
            // g (x - t) / max((1 - x) x, 1e-12) [* w] [/ n]
            let f = &mut cx.f;
            let one = f.full_like(x, 1.0);
            let eps = f.full_like(x, 1e-12);
            let omx = f.sub(one, x);
            let den = f.mul(omx, x);
            let den = f.max(den, eps);
            let num = f.sub(x, t);
            let num = f.mul(g, num);
            let mut y = f.div(num, den);
            if let Some(w) = w {
                y = f.mul(y, w);
            }
            if norm != 1.0 {
                let n = f.full_like(y, norm);
                y = f.mul(y, n);
            }
            Ok(vec![cx.f.convert(y, d)])
        },
    );
}

pub(super) fn register_losses(r: &mut Builder) {
    register_bce(r);
    r.op("aten::smooth_l1_loss(Tensor self, Tensor target, int reduction=Mean, float beta=1.0) -> Tensor", |cx, a| {
        pointwise_loss(cx, a, "smooth_l1_loss", "beta", smooth_l1)
    });
    r.op(
        "aten::smooth_l1_loss_backward(Tensor grad_output, Tensor self, Tensor target, int reduction, float beta) \
         -> Tensor",
        |cx, a| pointwise_loss_backward(cx, a, "smooth_l1_backward_cpu_out", false),
    );
    r.op("aten::huber_loss(Tensor self, Tensor target, int reduction=Mean, float delta=1.0) -> Tensor", |cx, a| {
        pointwise_loss(cx, a, "huber_loss", "delta", huber)
    });
    r.op(
        "aten::huber_loss_backward(Tensor grad_output, Tensor self, Tensor target, int reduction, float delta) \
         -> Tensor",
        |cx, a| pointwise_loss_backward(cx, a, "huber_backward_cpu_out", true),
    );
}
