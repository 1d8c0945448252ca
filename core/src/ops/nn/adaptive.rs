//! Adaptive average pooling (a product with averaging matrices, forward and
//! backward, any rank), adaptive max pooling in 2 and 3 dims (`adaptive_max_pool{2,3}d` and
//! their backward): output cell `i` of a dim of size `In` pools the input
//! range `[floor(i In / Out), ceil((i + 1) In / Out))`; and max unpooling
//! (`max_unpool{2,3}d`), which puts each value back at its pooling index.
//!
//! The window maximum is taken one dim at a time, last dim first, each a
//! fixed number of host-indexed gathers (the widest window) combined with
//! PyTorch's rule, `val > best || isnan(val)` in row-major order: the first
//! maximum wins, and the last NaN. Carrying each partial winner's flat
//! index through the passes reproduces the index of the whole-window scan.

use crate::bail_op;
use crate::error::Result;
use crate::hlo::{Cmp, Elem, Ty, V};
use crate::ops::common::up;
use crate::ops::spatial::take;
use crate::ops::{Args, Builder, Cx};
use crate::shape::{self, fmt};

use super::pool::grad_at_indices;
use super::require_float;

pub(super) fn register(r: &mut Builder) {
    register_adaptive(r);
    r.op("aten::max_unpool2d(Tensor self, Tensor indices, SymInt[2] output_size) -> Tensor", |cx, a| unpool(cx, a, 2));
    r.op(
        "aten::max_unpool3d(Tensor self, Tensor indices, SymInt[3] output_size, int[3] stride, int[3] padding) -> Tensor",
        |cx, a| unpool(cx, a, 3),
    );
    for n in [2usize, 3] {
        r.op(&format!("aten::adaptive_max_pool{n}d(Tensor self, int[{n}] output_size) -> (Tensor, Tensor)"), move |cx, a| {
            forward(cx, a, n)
        });
        r.op(
            &format!("aten::adaptive_max_pool{n}d_backward(Tensor grad_output, Tensor self, Tensor indices) -> Tensor"),
            move |cx, a| backward(cx, a, n),
        );
    }
}

/// The window bounds of each output cell along a dim.
fn windows(input: i64, output: i64) -> (Vec<i64>, Vec<i64>) {
    let start = (0..output).map(|i| (i * input) / output).collect();
    let end = (0..output).map(|i| ((i + 1) * input + output - 1) / output).collect();
    (start, end)
}

fn forward(cx: &mut Cx, a: &Args, n: usize) -> Result<Vec<V>> {
    let x = a.tensor(0)?;
    let out = a.ints(1)?.to_vec();
    let dims = cx.dims(x);
    let name = format!("adaptive_max_pool{n}d");
    if out.len() != n {
        bail_op!(&*cx.op, "{name}(): internal error: output_size.size() must be {n}, got {}", out.len());
    }
    if dims.len() != n + 1 && dims.len() != n + 2 {
        bail_op!(&*cx.op, "{name}(): Expected {}D or {}D tensor, but got: {}", n + 1, n + 2, fmt(&dims));
    }
    let first = dims.len() - n;
    if dims[first..].iter().any(|&s| s <= 0) || dims[..first].iter().any(|&s| s <= 0) {
        bail_op!(&*cx.op, "{name}(): Expected input to have non-zero size for non-batch dimensions, but input has sizes {}", fmt(&dims));
    }
    if out.iter().any(|&o| o < 0) {
        bail_op!(&*cx.op, "{name}(): output_size must be non-negative, got {}", fmt(&out));
    }
    require_float(cx, x, &name)?;
    let mut val = x;
    // The flat index within the pooled dims, built up pass by pass.
    let mut idx: Option<V> = None;
    let mut stride = 1i64;
    for k in (0..n).rev() {
        let dim = first + k;
        let (input, output) = (dims[dim], out[k]);
        let (start, end) = windows(input, output);
        let width = start.iter().zip(&end).map(|(s, e)| e - s).max().unwrap_or(1);
        let mut best: Option<(V, V)> = None;
        for j in 0..width {
            let pos: Vec<i64> = start.iter().map(|&s| (s + j).min(input - 1)).collect();
            let v = take(cx, val, dim, &pos);
            let vdims = cx.dims(v);
            // This pass's coordinate, plus what earlier passes carried.
            let coord = {
                let c: Vec<f64> = pos.iter().map(|&p| (p * stride) as f64).collect();
                let cv = const_i64(cx, &c);
                cx.f.broadcast_in_dim(cv, &[dim as i64], &vdims)
            };
            let i = match idx {
                Some(prev) => {
                    let carried = take(cx, prev, dim, &pos);
                    cx.f.add(carried, coord)
                }
                None => coord,
            };
            best = Some(match best {
                None => (v, i),
                Some((bv, bi)) => {
                    let valid: Vec<f64> = start.iter().zip(&end).map(|(&s, &e)| if s + j < e { 1.0 } else { 0.0 }).collect();
                    let valid = const_i64(cx, &valid);
                    let valid = cx.f.broadcast_in_dim(valid, &[dim as i64], &vdims);
                    let one = cx.f.full_like(valid, 1.0);
                    let valid = cx.f.compare(Cmp::Eq, valid, one);
                    let greater = cx.f.compare(Cmp::Gt, v, bv);
                    let nan = cx.f.compare(Cmp::Ne, v, v);
                    let wins = cx.f.or(greater, nan);
                    let wins = cx.f.and(wins, valid);
                    (cx.f.select(wins, v, bv), cx.f.select(wins, i, bi))
                }
            });
        }
        let (bv, bi) = best.expect("a window holds at least one element");
        val = bv;
        idx = Some(bi);
        stride *= input;
    }
    Ok(vec![val, idx.expect("n >= 1 passes")])
}

/// An int64 rank-1 constant.
fn const_i64(cx: &mut Cx, vals: &[f64]) -> V {
    let ty = Ty::new(Elem::I64, &[vals.len() as i64]);
    let lits: Vec<String> = vals.iter().map(|&v| Elem::I64.literal(v)).collect();
    let attrs = format!("value = dense<[{}]> : {}", lits.join(", "), ty);
    cx.f.op("stablehlo.constant", &[], &[], &attrs, &[ty])[0]
}

/// Each gradient added at its window maximum's index.
fn backward(cx: &mut Cx, a: &Args, n: usize) -> Result<Vec<V>> {
    let (g, x, idx) = (a.tensor(0)?, a.tensor(1)?, a.tensor(2)?);
    let (xd, gd) = (cx.dims(x), cx.dims(g));
    let rank = xd.len();
    if rank < n || gd.len() != rank || cx.dims(idx) != gd || gd[..rank - n] != xd[..rank - n] {
        bail_op!(
            &*cx.op,
            "expected grad_output and indices of one size [*, {n} pooled dims] matching input {}, got {} and {}",
            fmt(&xd),
            fmt(&gd),
            fmt(&cx.dims(idx))
        );
    }
    let d = require_float(cx, x, &format!("adaptive_max_pool{n}d_backward"))?;
    Ok(vec![grad_at_indices(cx, g, idx, &xd, n, d)])
}

/// `max_unpool{n}d`: zeros of the output size with each input value
/// written at its flat index within its plane (indices from max pooling
/// are distinct; an index outside the plane is reported by the index check).
fn unpool(cx: &mut Cx, a: &Args, n: usize) -> Result<Vec<V>> {
    let (x, idx) = (a.tensor(0)?, a.tensor(1)?);
    let out = a.ints(2)?.to_vec();
    let (xd, id) = (cx.dims(x), cx.dims(idx));
    let name = format!("max_unpool{n}d");
    if out.len() != n {
        bail_op!(&*cx.op, "{name}(): There should be exactly {n} elements but got {}", out.len());
    }
    if xd.len() != n + 1 && xd.len() != n + 2 {
        bail_op!(&*cx.op, "{name}(): Expected {}D or {}D tensor, but got: {}", n + 1, n + 2, fmt(&xd));
    }
    if id != xd {
        bail_op!(&*cx.op, "{name}(): Expected shape of indices to be same as that of the input tensor ({}) but got indices tensor with shape: {}", fmt(&xd), fmt(&id));
    }
    if cx.dtype(idx) != crate::dtype::DType::I64 {
        bail_op!(&*cx.op, "{name}(): Expected indices to have type Long but got {}", cx.dtype(idx));
    }
    let rank = xd.len();
    let b = shape::numel(&xd[..rank - n]);
    let k = shape::numel(&xd[rank - n..]);
    let plane = shape::numel(&out);
    cx.check_index(idx, 0..plane, || format!("an output plane of {plane} elements (max_unpool{n}d)"));
    let mut od = xd[..rank - n].to_vec();
    od.extend(&out);
    let zeros = cx.f.splat(&cx.ty(x).with_dims(&[b, plane]), 0.0);
    if b == 0 || k == 0 || plane == 0 {
        return Ok(vec![cx.f.reshape(zeros, &od)]);
    }
    // Coordinates (row, index) for every input element.
    let ity = Ty::new(Elem::I64, &[b, k, 1]);
    let rows = cx.f.iota(&ity, 0);
    let cols = cx.f.reshape(idx, &[b, k, 1]);
    let coords = cx.f.concatenate(&[rows, cols], 2);
    let upd = cx.f.reshape(x, &[b, k]);
    let y = cx.f.scatter(zeros, coords, upd, &[], &[0, 1], &[0, 1], 2, None);
    Ok(vec![cx.f.reshape(y, &od)])
}

/// The `[out, n]` matrix averaging adaptive-pooling windows: window `i`
/// covers `[floor(i n / out), ceil((i + 1) n / out))`.
pub(super) fn adaptive_matrix(cx: &mut Cx, n: i64, out: i64, elem: Elem) -> V {
    let ity = Ty::new(Elem::I64, &[out, n]);
    let i = cx.f.iota(&ity, 0);
    let j = cx.f.iota(&ity, 1);
    let nv = cx.f.splat_int(&ity, n);
    let ov = cx.f.splat_int(&ity, out);
    let one = cx.f.splat_int(&ity, 1);
    let start = cx.f.mul(i, nv);
    let start = cx.f.div(start, ov);
    let i1 = cx.f.add(i, one);
    let end = cx.f.mul(i1, nv);
    let end = cx.f.add(end, ov);
    let end = cx.f.sub(end, one);
    let end = cx.f.div(end, ov);
    let ge = cx.f.compare(Cmp::Ge, j, start);
    let lt = cx.f.compare(Cmp::Lt, j, end);
    let inside = cx.f.and(ge, lt);
    let len = cx.f.sub(end, start);
    let len = cx.f.convert(len, elem);
    let onef = cx.f.full_like(len, 1.0);
    let inv = cx.f.div(onef, len);
    let zeros = cx.f.full_like(inv, 0.0);
    cx.f.select(inside, inv, zeros)
}

/// Multiplies the last `mats.len()` dims of `x` (opmath) by the matrices,
/// each contracting its dim `contract` (1: pooling, 0: its gradient).
pub(super) fn apply_matrices(cx: &mut Cx, x: V, mats: &[V], contract: usize) -> V {
    let dims = cx.dims(x);
    let k = mats.len();
    let lead = &dims[..dims.len() - k];
    let b = shape::numel(lead);
    let mut shaped = vec![b];
    shaped.extend_from_slice(&dims[dims.len() - k..]);
    let mut y = cx.f.reshape(x, &shaped);
    // Each product moves the contracted dim to the end, so after all of
    // them the dims are back in order.
    let elem = cx.ty(x).elem;
    for &m in mats {
        y = cx.f.dot_general(y, m, &[], &[], &[1], &[contract], elem);
    }
    let yd = cx.dims(y);
    let mut out = lead.to_vec();
    out.extend_from_slice(&yd[1..]);
    cx.f.reshape(y, &out)
}

/// Checks an adaptive pooling input of `k` spatial dims and returns the
/// averaging matrices for `out`.
pub(super) fn adaptive_setup(cx: &mut Cx, x: V, out: &[i64], k: usize, elem: Elem) -> Result<Vec<V>> {
    let dims = cx.dims(x);
    let name = cx.op.trim_start_matches("aten::").to_string();
    if out.len() != k {
        bail_op!(&*cx.op, "{name}: output_size must be {k}, but got {}", fmt(out));
    }
    if !(dims.len() == k + 1 || dims.len() == k + 2) || dims[1..].contains(&0) {
        bail_op!(
            &*cx.op,
            "{name}(): Expected {}D or {}D tensor, but got {}",
            k + 1,
            k + 2,
            fmt(&dims)
        );
    }
    if out.iter().any(|&o| o < 0) {
        bail_op!(&*cx.op, "{name}: elements of output_size must be greater than or equal to 0 but received {}", fmt(out));
    }
    let sp = &dims[dims.len() - k..];
    Ok((0..k).map(|i| adaptive_matrix(cx, sp[i], out[i], elem)).collect())
}

pub(super) fn adaptive_avg_pool(cx: &mut Cx, a: &Args, k: usize) -> Result<Vec<V>> {
    let x = a.tensor(0)?;
    let d = require_float(cx, x, &format!("adaptive_avg_pool{k}d"))?;
    let xc = up(cx, x);
    let mats = adaptive_setup(cx, x, a.ints(1)?, k, d.opmath().into())?;
    let y = apply_matrices(cx, xc, &mats, 1);
    Ok(vec![cx.f.convert(y, d)])
}

/// `_adaptive_avg_pool{k}d_backward`: the gradient through the averaging
/// matrices, transposed.
pub(super) fn adaptive_avg_pool_backward(cx: &mut Cx, a: &Args, k: usize) -> Result<Vec<V>> {
    let (g, x) = (a.tensor(0)?, a.tensor(1)?);
    let d = require_float(cx, x, &format!("adaptive_avg_pool{k}d_backward"))?;
    let gd = cx.dims(g);
    let xd = cx.dims(x);
    if gd.len() != xd.len() || gd.len() < k + 1 || gd[..gd.len() - k] != xd[..xd.len() - k] {
        bail_op!(&*cx.op, "grad_output of size {} does not match input of size {}", fmt(&gd), fmt(&xd));
    }
    let out = gd[gd.len() - k..].to_vec();
    let mats = adaptive_setup(cx, x, &out, k, d.opmath().into())?;
    let gc = up(cx, g);
    let y = apply_matrices(cx, gc, &mats, 0);
    Ok(vec![cx.f.convert(y, d)])
}

pub(super) fn register_adaptive(r: &mut Builder) {
    r.op("aten::_adaptive_avg_pool2d(Tensor self, SymInt[2] output_size) -> Tensor", |cx, a| adaptive_avg_pool(cx, a, 2));
    r.op("aten::_adaptive_avg_pool3d(Tensor self, SymInt[3] output_size) -> Tensor", |cx, a| adaptive_avg_pool(cx, a, 3));
    r.op("aten::adaptive_avg_pool1d(Tensor self, int[1] output_size) -> Tensor", |cx, a| adaptive_avg_pool(cx, a, 1));
    r.op("aten::_adaptive_avg_pool2d_backward(Tensor grad_output, Tensor self) -> Tensor", |cx, a| {
        adaptive_avg_pool_backward(cx, a, 2)
    });
    r.op("aten::_adaptive_avg_pool3d_backward(Tensor grad_output, Tensor self) -> Tensor", |cx, a| {
        adaptive_avg_pool_backward(cx, a, 3)
    });
}
