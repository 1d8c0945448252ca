//! Pairwise distances: `_cdist_forward` (between the rows of two batches of
//! matrices), `_pdist_forward` (between the rows of one matrix, the upper
//! triangle in row-major order) and their backward kernels.
//!
//! The p-norm special-cases 0, 1, 2 and inf as PyTorch's kernels do, and so
//! does the gradient of one difference `x = a_k - b_k` of a pair at
//! distance `d` (scaled by the pair's `grad`): 0 for p = 0; `sign(x)` for
//! p = 1; `x / d` for p = 2; `sign(x)` where `|x| = d` for p = inf;
//! `sign(x) |x|^(p-1) / d^(p-1)` for p < 2 and `x |x|^(p-2) / d^(p-1)` above
//! (0 where d = 0, and for p < 1 where x = 0). Each row's gradient is the sum
//! over the rows it was measured against.

use crate::bail_op;
use crate::dtype::DType;
use crate::error::Result;
use crate::hlo::{Cmp, Func, Reducer, Ty, V};
use crate::shape;

use super::spatial::take;
use super::{Args, Builder, Cx};

pub fn register(r: &mut Builder) {
    r.op("aten::_cdist_forward(Tensor x1, Tensor x2, float p, int? compute_mode) -> Tensor", cdist_forward);
    r.op("aten::_pdist_forward(Tensor self, float p=2) -> Tensor", pdist_forward);
    r.op("aten::_cdist_backward(Tensor grad_output, Tensor x1, Tensor x2, float p, Tensor cdist) -> Tensor", cdist_backward);
    r.op("aten::_pdist_backward(Tensor grad_output, Tensor self, float p, Tensor pdist) -> Tensor", pdist_backward);
}

/// The `p`-norm of `diff` (already absolute) over `dim`, as PyTorch's
/// distance kernels compute it (special cases 0, 1, 2 and inf).
fn pnorm(cx: &mut Cx, diff: V, dim: usize, p: f64) -> V {
    let elem = cx.ty(diff).elem;
    let zero = cx.f.constant(elem, 0.0);
    if p == 0.0 {
        let z = cx.f.full_like(diff, 0.0);
        let nz = cx.f.compare(Cmp::Ne, diff, z);
        let nz = cx.f.convert(nz, elem);
        return cx.f.reduce(nz, zero, &[dim], Reducer::Add);
    }
    if p == f64::INFINITY {
        return cx.f.reduce(diff, zero, &[dim], Reducer::Max);
    }
    if p == 1.0 {
        return cx.f.reduce(diff, zero, &[dim], Reducer::Add);
    }
    if p == 2.0 {
        let sq = cx.f.mul(diff, diff);
        let s = cx.f.reduce(sq, zero, &[dim], Reducer::Add);
        return cx.f.unary("stablehlo.sqrt", s);
    }
    let pv = cx.f.full_like(diff, p);
    let pw = cx.f.binary("stablehlo.power", diff, pv);
    let s = cx.f.reduce(pw, zero, &[dim], Reducer::Add);
    let inv = cx.f.full_like(s, 1.0 / p);
    cx.f.binary("stablehlo.power", s, inv)
}

/// cdist and pdist run only for f32 and f64 on CPU.
fn distance_dtype(cx: &Cx, x: V, name: &str) -> Result<DType> {
    let d = cx.dtype(x);
    if !d.is_float() {
        if name == "cdist" {
            bail_op!(&*cx.op, "cdist only supports floating-point dtypes, X1 got: {d}");
        }
        bail_op!(&*cx.op, "\"{name}\" not implemented for '{d}'");
    }
    if !matches!(d, DType::F32 | DType::F64) {
        bail_op!(&*cx.op, "\"{name}\" not implemented for '{d}'");
    }
    Ok(d)
}

fn cdist_forward(cx: &mut Cx, a: &Args) -> Result<Vec<V>> {
    let (x1, x2, p) = (a.tensor(0)?, a.tensor(1)?, a.float(2)?);
    let mode = a.opt_int(3).unwrap_or(0);
    let (d1, d2) = (cx.dims(x1), cx.dims(x2));
    let d = distance_dtype(cx, x1, "cdist")?;
    if cx.dtype(x2) != d {
        bail_op!(&*cx.op, "expected scalar type {d} but found {}", cx.dtype(x2));
    }
    for (dims, name) in [(&d1, "X1"), (&d2, "X2")] {
        if dims.len() < 2 {
            bail_op!(&*cx.op, "cdist only supports at least 2D tensors, {name} got: {}D", dims.len());
        }
    }
    let (r1, r2) = (d1.len(), d2.len());
    let (m1, m2) = (d1[r1 - 1], d2[r2 - 1]);
    if m1 != m2 {
        bail_op!(&*cx.op, "X1 and X2 must have the same number of columns. X1: {m1} X2: {m2}");
    }
    if p.is_nan() || p < 0.0 {
        bail_op!(&*cx.op, "cdist only supports non-negative p values");
    }
    if !(0..=2).contains(&mode) {
        bail_op!(&*cx.op, "possible modes: 0, 1, 2, but was: {mode}");
    }
    let batch = shape::broadcast(&cx.op, &d1[..r1 - 2], &d2[..r2 - 2])?;
    let (pr, rr, m) = (d1[r1 - 2], d2[r2 - 2], m1);
    let mut out: Vec<i64> = batch.to_vec();
    out.extend([pr, rr]);
    if shape::numel(&out) == 0 || m == 0 {
        return Ok(vec![cx.f.splat(&Ty::new(d, &out), 0.0)]);
    }
    let b = shape::numel(&batch);
    let expand = |cx: &mut Cx, x: V, rows: i64| {
        let mut full = batch.to_vec();
        full.extend([rows, m]);
        let x = cx.f.broadcast_to(x, &full);
        cx.f.reshape(x, &[b, rows, m])
    };
    let (x1, x2) = (expand(cx, x1, pr), expand(cx, x2, rr));
    let y = if p == 2.0 && (mode == 1 || (mode == 0 && (pr > 25 || rr > 25))) {
        // PyTorch's `_euclidean_dist`: |a|^2 - 2ab + |b|^2 as one matmul.
        let zero = cx.f.constant(d.into(), 0.0);
        let norm = |cx: &mut Cx, x: V, rows: i64| {
            let sq = cx.f.mul(x, x);
            let s = cx.f.reduce(sq, zero, &[2], Reducer::Add);
            cx.f.reshape(s, &[b, rows, 1])
        };
        let (n1, n2) = (norm(cx, x1, pr), norm(cx, x2, rr));
        let (o1, o2) = (cx.f.full_like(n1, 1.0), cx.f.full_like(n2, 1.0));
        let m2 = cx.f.full_like(x1, -2.0);
        let x1m = cx.f.mul(x1, m2);
        let a1 = cx.f.concatenate(&[x1m, n1, o1], 2);
        let a2 = cx.f.concatenate(&[x2, o2, n2], 2);
        let prod = cx.f.dot_general(a1, a2, &[0], &[0], &[2], &[2], d.into());
        let z = cx.f.full_like(prod, 0.0);
        let prod = cx.f.max(prod, z);
        cx.f.unary("stablehlo.sqrt", prod)
    } else {
        let full = [b, pr, rr, m];
        let e1 = cx.f.broadcast_in_dim(x1, &[0, 1, 3], &full);
        let e2 = cx.f.broadcast_in_dim(x2, &[0, 2, 3], &full);
        let diff = cx.f.sub(e1, e2);
        let diff = cx.f.unary("stablehlo.abs", diff);
        pnorm(cx, diff, 3, p)
    };
    Ok(vec![cx.f.reshape(y, &out)])
}

fn pdist_forward(cx: &mut Cx, a: &Args) -> Result<Vec<V>> {
    let (x, p) = (a.tensor(0)?, a.float(1)?);
    let dims = cx.dims(x);
    if dims.len() != 2 {
        bail_op!(&*cx.op, "pdist only supports 2D tensors, got: {}D", dims.len());
    }
    let d = distance_dtype(cx, x, "pdist")?;
    let (n, m) = (dims[0], dims[1]);
    let (mut i, mut j) = (Vec::new(), Vec::new());
    for r in 0..n {
        for s in r + 1..n {
            i.push(r);
            j.push(s);
        }
    }
    let k = i.len() as i64;
    if k == 0 || m == 0 {
        return Ok(vec![cx.f.splat(&Ty::new(d, &[k]), 0.0)]);
    }
    let a = take(cx, x, 0, &i);
    let b = take(cx, x, 0, &j);
    let diff = cx.f.sub(a, b);
    let diff = cx.f.unary("stablehlo.abs", diff);
    Ok(vec![pnorm(cx, diff, 1, p)])
}

/// The gradient contribution of differences `x` at distances `d` with
/// pair gradients `g` (all one shape), as the module doc gives it.
fn pair_grad(f: &mut Func, x: V, d: V, g: V, p: f64) -> V {
    let zero = f.full_like(x, 0.0);
    let sign = f.unary("stablehlo.sign", x);
    let ax = f.unary("stablehlo.abs", x);
    if p == 0.0 {
        return zero;
    }
    let at_zero = f.compare(Cmp::Eq, d, zero);
    let v = if p == 1.0 {
        return f.mul(sign, g);
    } else if p == f64::INFINITY {
        let hit = f.compare(Cmp::Eq, ax, d);
        let s = f.mul(sign, g);
        return f.select(hit, s, zero);
    } else if p == 2.0 {
        let q = f.div(x, d);
        f.mul(q, g)
    } else {
        let pm1 = f.full_like(x, p - 1.0);
        let dp = f.binary("stablehlo.power", d, pm1);
        let num = if p < 2.0 {
            let ap = f.binary("stablehlo.power", ax, pm1);
            f.mul(sign, ap)
        } else {
            let pm2 = f.full_like(x, p - 2.0);
            let ap = f.binary("stablehlo.power", ax, pm2);
            f.mul(x, ap)
        };
        let q = f.div(num, dp);
        let v = f.mul(q, g);
        if p < 1.0 {
            let x0 = f.compare(Cmp::Eq, x, zero);
            f.select(x0, zero, v)
        } else {
            v
        }
    };
    f.select(at_zero, zero, v)
}

fn backward_checks(cx: &Cx, x: V, p: f64, name: &str) -> Result<DType> {
    let d = distance_dtype(cx, x, name)?;
    if p.is_nan() || p < 0.0 {
        bail_op!(&*cx.op, "{name} only supports non-negative p values");
    }
    Ok(d)
}

/// The gradient of `x1` `[..., P, M]` from `grad` and `cdist` `[..., P, R]`,
/// over the broadcast batch (autograd sums it back to `x1`'s own).
fn cdist_backward(cx: &mut Cx, a: &Args) -> Result<Vec<V>> {
    let (g, x1, x2, p, dist) = (a.tensor(0)?, a.tensor(1)?, a.tensor(2)?, a.float(3)?, a.tensor(4)?);
    let d = backward_checks(cx, x1, p, "cdist")?;
    let (d1, d2) = (cx.dims(x1), cx.dims(x2));
    let (r1, r2) = (d1.len(), d2.len());
    if r1 < 2 || r2 < 2 || d1[r1 - 1] != d2[r2 - 1] {
        bail_op!(&*cx.op, "x1 {} and x2 {} must be matrices with the same number of columns", shape::fmt(&d1), shape::fmt(&d2));
    }
    let batch = shape::broadcast(&cx.op, &d1[..r1 - 2], &d2[..r2 - 2])?;
    let (pr, rr, m) = (d1[r1 - 2], d2[r2 - 2], d1[r1 - 1]);
    let mut out_dims = batch.to_vec();
    out_dims.extend([pr, m]);
    let mut pair_dims = batch.to_vec();
    pair_dims.extend([pr, rr]);
    for (v, what) in [(g, "grad"), (dist, "cdist")] {
        if cx.dims(v) != pair_dims {
            bail_op!(&*cx.op, "{what} of size {} does not match the distances' size {}", shape::fmt(&cx.dims(v)), shape::fmt(&pair_dims));
        }
    }
    if shape::numel(&out_dims) == 0 || rr == 0 {
        return Ok(vec![cx.f.splat(&Ty::new(d, &out_dims), 0.0)]);
    }
    let b = shape::numel(&batch);
    let flat = |cx: &mut Cx, x: V, rows: i64, cols: i64| {
        let mut full = batch.to_vec();
        full.extend([rows, cols]);
        let x = cx.f.broadcast_to(x, &full);
        cx.f.reshape(x, &[b, rows, cols])
    };
    let (x1, x2) = (flat(cx, x1, pr, m), flat(cx, x2, rr, m));
    let (g, dist) = (flat(cx, g, pr, rr), flat(cx, dist, pr, rr));
    let full = [b, pr, rr, m];
    let e1 = cx.f.broadcast_in_dim(x1, &[0, 1, 3], &full);
    let e2 = cx.f.broadcast_in_dim(x2, &[0, 2, 3], &full);
    let x = cx.f.sub(e1, e2);
    let db = cx.f.broadcast_in_dim(dist, &[0, 1, 2], &full);
    let gb = cx.f.broadcast_in_dim(g, &[0, 1, 2], &full);
    let c = pair_grad(&mut cx.f, x, db, gb, p);
    let zero = cx.f.constant(d.into(), 0.0);
    let y = cx.f.reduce(c, zero, &[2], Reducer::Add);
    Ok(vec![cx.f.reshape(y, &out_dims)])
}

/// The gradient of `self` `[N, M]` from `grad` and `pdist` (the `N (N-1) / 2`
/// pairs `i < j`): the pairs laid out as symmetric `[N, N]` matrices (the
/// diagonal is a zero distance, so it contributes nothing).
fn pdist_backward(cx: &mut Cx, a: &Args) -> Result<Vec<V>> {
    let (g, x, p, dist) = (a.tensor(0)?, a.tensor(1)?, a.float(2)?, a.tensor(3)?);
    let d = backward_checks(cx, x, p, "pdist")?;
    let dims = cx.dims(x);
    if dims.len() != 2 {
        bail_op!(&*cx.op, "pdist only supports 2D tensors, got: {}D", dims.len());
    }
    let (n, m) = (dims[0], dims[1]);
    let k = n * (n - 1) / 2;
    for (v, what) in [(g, "grad"), (dist, "pdist")] {
        if cx.dims(v) != [k] {
            bail_op!(&*cx.op, "{what} of size {} is not the {k} distances of {n} rows", shape::fmt(&cx.dims(v)));
        }
    }
    if k == 0 || m == 0 {
        return Ok(vec![cx.f.splat(&Ty::new(d, &dims), 0.0)]);
    }
    // Pair index of (i, j) for i != j; the diagonal reads pair 0 and is
    // masked.
    let mut idx = Vec::with_capacity((n * n) as usize);
    for i in 0..n {
        for j in 0..n {
            let (r, s) = if i < j { (i, j) } else { (j, i) };
            idx.push(if r == s { 0 } else { r * (2 * n - r - 1) / 2 + (s - r - 1) });
        }
    }
    let full_pairs = |cx: &mut Cx, v: V| {
        let t = take(cx, v, 0, &idx);
        let t = cx.f.reshape(t, &[n, n]);
        let it = Ty::new(crate::hlo::Elem::I64, &[n, n]);
        let (ri, ci) = (cx.f.iota(&it, 0), cx.f.iota(&it, 1));
        let diag = cx.f.compare(Cmp::Eq, ri, ci);
        let z = cx.f.full_like(t, 0.0);
        cx.f.select(diag, z, t)
    };
    let (gm, dm) = (full_pairs(cx, g), full_pairs(cx, dist));
    let full = [n, n, m];
    let ei = cx.f.broadcast_in_dim(x, &[0, 2], &full);
    let ej = cx.f.broadcast_in_dim(x, &[1, 2], &full);
    let diff = cx.f.sub(ei, ej);
    let db = cx.f.broadcast_in_dim(dm, &[0, 1], &full);
    let gb = cx.f.broadcast_in_dim(gm, &[0, 1], &full);
    let c = pair_grad(&mut cx.f, diff, db, gb, p);
    let zero = cx.f.constant(d.into(), 0.0);
    Ok(vec![cx.f.reduce(c, zero, &[1], Reducer::Add)])
}
