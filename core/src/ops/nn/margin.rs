//! The margin losses over class scores, with their backward kernels:
//!
//! - `multi_margin_loss` (`nn.MultiMarginLoss`): per sample `n` with target
//!   class `y`, `sum_{j != y} w[y] max(0, margin - x[y] + x[j])^p / C`;
//! - `multilabel_margin_loss` (`nn.MultiLabelMarginLoss`): the targets are
//!   class indices ended by the first `-1`, and each target `y` (repeats
//!   counting again) adds `sum_{j not a target} max(0, 1 - x[y] + x[j]) / C`.
//!
//! Then reduced (0 none, 1 mean over samples, 2 sum). Computed in opmath
//! with one-hot comparisons over the classes (`[N, C]`, and `[N, C, C]` for
//! the multilabel loss), as PyTorch's CPU loops define them.

use crate::bail_op;
use crate::dtype::DType;
use crate::error::Result;
use crate::hlo::{Cmp, Elem, Reducer, Ty, V};
use crate::ops::{Builder, Cx};
use crate::shape::fmt;

use super::loss::Reduction;
use super::{require_float, sum};

pub(super) fn register(r: &mut Builder) {
    r.op(
        "aten::multi_margin_loss(Tensor self, Tensor target, Scalar p=1, Scalar margin=1, Tensor? weight=None, \
         int reduction=Mean) -> Tensor",
        |cx, a| {
            let s = (a.static_scalar(2)?.to_f64(), a.static_scalar(3)?.to_f64());
            multi_margin(cx, a.tensor(0)?, a.tensor(1)?, s, a.opt_tensor(4), Reduction::arg(cx, a, 5)?, None)
        },
    )
    .static_scalars();
    r.op(
        "aten::multi_margin_loss_backward(Tensor grad_output, Tensor self, Tensor target, Scalar p, Scalar margin, \
         Tensor? weight=None, int reduction=Mean) -> Tensor",
        |cx, a| {
            let s = (a.static_scalar(3)?.to_f64(), a.static_scalar(4)?.to_f64());
            multi_margin(cx, a.tensor(1)?, a.tensor(2)?, s, a.opt_tensor(5), Reduction::arg(cx, a, 6)?, Some(a.tensor(0)?))
        },
    )
    .static_scalars();
    r.op(
        "aten::multilabel_margin_loss_forward(Tensor self, Tensor target, int reduction) -> (Tensor output, Tensor is_target)",
        |cx, a| multilabel(cx, a.tensor(0)?, a.tensor(1)?, Reduction::arg(cx, a, 2)?, None),
    );
    r.op(
        "aten::multilabel_margin_loss_backward(Tensor grad_output, Tensor self, Tensor target, int reduction, \
         Tensor is_target) -> Tensor",
        |cx, a| multilabel(cx, a.tensor(1)?, a.tensor(2)?, Reduction::arg(cx, a, 3)?, Some(a.tensor(0)?)),
    );
}

/// Scores as `[N, C]` (a 1-D input is one sample, a 0-d one a sample of
/// one class) and their class count.
fn rows(cx: &mut Cx, x: V, what: &str) -> Result<(V, i64, i64)> {
    let xd = cx.dims(x);
    match xd[..] {
        [] => Ok((cx.f.reshape(x, &[1, 1]), 1, 1)),
        [c] if c > 0 => Ok((cx.f.reshape(x, &[1, c]), 1, c)),
        [n, c] if c > 0 => Ok((x, n, c)),
        _ => bail_op!(&*cx.op, "{what}: Expected non-empty vector or matrix with optional 0-dim batch size, but got: {}", fmt(&xd)),
    }
}

/// The per-sample losses `[N]` reduced, shaped like PyTorch's result.
fn reduce(cx: &mut Cx, per: V, n: i64, reduction: Reduction, none_shape: &[i64], d: DType) -> V {
    let out = match reduction {
        Reduction::None => cx.f.reshape(per, none_shape),
        _ => {
            let s = sum(cx, per, &[0]);
            if reduction == Reduction::Mean {
                let nv = cx.f.full_like(s, n as f64);
                cx.f.div(s, nv)
            } else {
                s
            }
        }
    };
    cx.f.convert(out, d)
}

/// `grad_output` as a per-sample `[N, 1]` factor: itself per row for no
/// reduction, else the scalar (with `mean`'s `1 / N`) for every row.
fn grad_factor(cx: &mut Cx, g: V, n: i64, reduction: Reduction, od: DType) -> V {
    let g = cx.f.convert(g, od);
    if reduction == Reduction::None {
        let g = cx.f.reshape(g, &[n]);
        cx.f.reshape(g, &[n, 1])
    } else {
        let g = cx.f.reshape(g, &[]);
        let g = if reduction == Reduction::Mean {
            let nv = cx.f.full_like(g, n as f64);
            cx.f.div(g, nv)
        } else {
            g
        };
        cx.f.broadcast_to(g, &[n, 1])
    }
}

/// `multi_margin_loss` with `(p, margin)`, or its input gradient when
/// `grad` is given.
fn multi_margin(
    cx: &mut Cx,
    x: V,
    t: V,
    (p, margin): (f64, f64),
    w: Option<V>,
    reduction: Reduction,
    grad: Option<V>,
) -> Result<Vec<V>> {
    if p != 1.0 && p != 2.0 {
        bail_op!(&*cx.op, "only p == 1 and p == 2 supported");
    }
    let d = require_float(cx, x, "multi_margin_loss")?;
    let td = cx.dims(t);
    let (x2, n, c) = rows(cx, x, "multi_margin_loss")?;
    if td.iter().product::<i64>() != n || td.len() > 1 {
        bail_op!(&*cx.op, "inconsistent target size: {} for input of size: {}", fmt(&td), fmt(&cx.dims(x)));
    }
    if let Some(w) = w {
        if cx.dims(w) != [c] {
            bail_op!(&*cx.op, "inconsistent weight size, expected {c} but got {}", fmt(&cx.dims(w)));
        }
    }
    cx.check_index(t, 0..c, || format!("{c} classes (multi_margin_loss target)"));
    let od = d.opmath();
    let xc = cx.f.convert(x2, od);
    let nc = [n, c];
    let t1 = cx.f.reshape(t, &[n]);
    let t1 = cx.f.convert(t1, Elem::I64);
    let tb = cx.f.broadcast_in_dim(t1, &[0], &nc);
    let cls = cx.f.iota(&Ty::new(Elem::I64, &nc), 1);
    let onehot = cx.f.compare(Cmp::Eq, cls, tb);
    let zero = cx.f.full_like(xc, 0.0);
    let at_t = cx.f.select(onehot, xc, zero);
    let xt = sum(cx, at_t, &[1]);
    let xt = cx.f.broadcast_in_dim(xt, &[0], &nc);
    // z = margin - x[y] + x[j], active where positive and j != y.
    let m = cx.f.full_like(xc, margin);
    let z = cx.f.sub(m, xt);
    let z = cx.f.add(z, xc);
    let pos = cx.f.compare(Cmp::Gt, z, zero);
    let other = cx.f.not(onehot);
    let active = cx.f.and(pos, other);
    // w[y] per sample.
    let wt = match w {
        Some(w) => {
            let wc = cx.f.convert(w, od);
            let wb = cx.f.broadcast_in_dim(wc, &[1], &nc);
            let at = cx.f.select(onehot, wb, zero);
            let s = sum(cx, at, &[1]);
            Some(cx.f.broadcast_in_dim(s, &[0], &nc))
        }
        None => None,
    };
    let cv = cx.f.full_like(xc, c as f64);
    let none_shape = if cx.rank(x) <= 1 { td.clone() } else { vec![n] };
    match grad {
        None => {
            let h = if p == 1.0 { z } else { cx.f.mul(z, z) };
            let h = match wt {
                Some(wt) => cx.f.mul(h, wt),
                None => h,
            };
            let h = cx.f.select(active, h, zero);
            let h = cx.f.div(h, cv);
            let per = sum(cx, h, &[1]);
            Ok(vec![reduce(cx, per, n, reduction, &none_shape, d)])
        }
        Some(g) => {
            // dL/dx[j] = (p == 1 ? 1 : 2 z) w[y] / C where active; x[y]
            // gets minus their sum.
            let h = if p == 1.0 {
                cx.f.full_like(xc, 1.0)
            } else {
                let two = cx.f.full_like(xc, 2.0);
                cx.f.mul(two, z)
            };
            let h = match wt {
                Some(wt) => cx.f.mul(h, wt),
                None => h,
            };
            let h = cx.f.div(h, cv);
            let h = cx.f.select(active, h, zero);
            let total = sum(cx, h, &[1]);
            let total = cx.f.broadcast_in_dim(total, &[0], &nc);
            let neg = cx.f.neg(total);
            let gx = cx.f.select(onehot, neg, h);
            let gf = grad_factor(cx, g, n, reduction, od);
            let gf = cx.f.broadcast_in_dim(gf, &[0, 1], &nc);
            let gx = cx.f.mul(gx, gf);
            let gx = cx.f.reshape(gx, &cx.dims(x));
            Ok(vec![cx.f.convert(gx, d)])
        }
    }
}

/// `multilabel_margin_loss_forward` (the loss and `is_target`), or the input
/// gradient when `grad` is given.
fn multilabel(cx: &mut Cx, x: V, t: V, reduction: Reduction, grad: Option<V>) -> Result<Vec<V>> {
    let d = require_float(cx, x, "multilabel_margin_loss")?;
    let (xd, td) = (cx.dims(x), cx.dims(t));
    if td != xd {
        bail_op!(&*cx.op, "inconsistent target size: {} for input of size: {}", fmt(&td), fmt(&xd));
    }
    let (x2, n, c) = rows(cx, x, "multilabel_margin_loss")?;
    cx.check_index(t, -1..c, || format!("{c} classes, or -1 to end the targets (multilabel_margin_loss target)"));
    let od = d.opmath();
    let xc = cx.f.convert(x2, od);
    let t2 = cx.f.reshape(t, &[n, c]);
    let t2 = cx.f.convert(t2, Elem::I64);
    let i64_nc = Ty::new(Elem::I64, &[n, c]);
    // valid[n, k]: position k comes before the first -1.
    let k = cx.f.iota(&i64_nc, 1);
    let minus1 = cx.f.splat_int(&i64_nc, -1);
    let is_end = cx.f.compare(Cmp::Eq, t2, minus1);
    let cmax = cx.f.splat_int(&i64_nc, c);
    let end_pos = cx.f.select(is_end, k, cmax);
    let init = cx.f.splat_int(&Ty::scalar(Elem::I64), c);
    let first_end = cx.f.reduce(end_pos, init, &[1], Reducer::Min);
    let first_end = cx.f.broadcast_in_dim(first_end, &[0], &[n, c]);
    let valid = cx.f.compare(Cmp::Lt, k, first_end);
    // onehot[n, k, j]: target k is class j (for valid k only).
    let nkc = [n, c, c];
    let tk = cx.f.broadcast_in_dim(t2, &[0, 1], &nkc);
    let j = cx.f.iota(&Ty::new(Elem::I64, &nkc), 2);
    let hit = cx.f.compare(Cmp::Eq, tk, j);
    let vk = cx.f.broadcast_in_dim(valid, &[0, 1], &nkc);
    let onehot = cx.f.and(hit, vk);
    let no = cx.f.splat(&Ty::scalar(Elem::Pred), 0.0);
    let is_target = cx.f.reduce(onehot, no, &[1], Reducer::Or);
    // x[t_k] and z[n, k, j] = 1 - x[t_k] + x[j] over the non-target j.
    let xb = cx.f.broadcast_in_dim(xc, &[0, 2], &nkc);
    let zero3 = cx.f.full_like(xb, 0.0);
    let at = cx.f.select(onehot, xb, zero3);
    let xt = sum(cx, at, &[2]);
    let xt = cx.f.broadcast_in_dim(xt, &[0, 1], &nkc);
    let one = cx.f.full_like(xb, 1.0);
    let z = cx.f.sub(one, xt);
    let z = cx.f.add(z, xb);
    let pos = cx.f.compare(Cmp::Gt, z, zero3);
    let not_target = cx.f.not(is_target);
    let nt = cx.f.broadcast_in_dim(not_target, &[0, 2], &nkc);
    let active = cx.f.and(pos, nt);
    let active = cx.f.and(active, vk);
    let cv = cx.f.full_like(xb, c as f64);
    match grad {
        None => {
            let h = cx.f.select(active, z, zero3);
            let h = cx.f.div(h, cv);
            let per = sum(cx, h, &[1, 2]);
            let none_shape = if xd.len() <= 1 { vec![] } else { vec![n] };
            let loss = reduce(cx, per, n, reduction, &none_shape, d);
            let is_t = cx.f.convert(is_target, d);
            let is_t = cx.f.reshape(is_t, &xd);
            Ok(vec![loss, is_t])
        }
        Some(g) => {
            // Each active (k, j): x[j] += 1 / C, x[t_k] -= 1 / C.
            let a1 = cx.f.convert(active, od);
            let a1 = cx.f.div(a1, cv);
            let up = sum(cx, a1, &[1]);
            let per_k = sum(cx, a1, &[2]);
            let per_k = cx.f.broadcast_in_dim(per_k, &[0, 1], &nkc);
            let zero_k = cx.f.full_like(per_k, 0.0);
            let down = cx.f.select(onehot, per_k, zero_k);
            let down = sum(cx, down, &[1]);
            let gx = cx.f.sub(up, down);
            let gf = grad_factor(cx, g, n, reduction, od);
            let gf = cx.f.broadcast_in_dim(gf, &[0, 1], &[n, c]);
            let gx = cx.f.mul(gx, gf);
            let gx = cx.f.reshape(gx, &xd);
            Ok(vec![cx.f.convert(gx, d)])
        }
    }
}
