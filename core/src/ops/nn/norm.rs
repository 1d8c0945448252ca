//! Layer norm, batch norm and group norm, forward and backward. Statistics are computed
//! in opmath; they come back in the input's dtype, or in f32 when a
//! half-precision input has f32 parameters (PyTorch's "mixed type").

use crate::bail_op;
use crate::dtype::DType;
use crate::error::Result;
use crate::hlo::{Ty, V};
use crate::ops::common::up;
use crate::ops::{Args, Builder, Composite, Cx};
use crate::shape::{self, fmt};

use super::{expand_reduced, masked, output_mask, require_float, sum};

pub(super) fn register(r: &mut Builder) {
    register_layer_norm(r);
    register_layer_norm_backward(r);
    register_batch_norm(r);
    register_group_norm(r);
}

pub(super) fn register_layer_norm(r: &mut Builder) {
    r.op(
        "aten::native_layer_norm(Tensor input, SymInt[] normalized_shape, Tensor? weight, Tensor? bias, float eps) \
         -> (Tensor, Tensor, Tensor)",
        |cx, a| {
            let x = a.tensor(0)?;
            let norm = a.ints(1)?.to_vec();
            let (y, mean, rstd) = layer_norm(cx, x, &norm, a.opt_tensor(2), a.opt_tensor(3), a.float(4)?)?;
            Ok(vec![y, mean, rstd])
        },
    );
}

/// `native_layer_norm` of `x` over its trailing `norm` dims: the result, and
/// the mean and rstd with the normalized dims kept as size 1, all in `x`'s
/// dtype (as PyTorch's CPU kernel returns them).
pub(super) fn layer_norm(cx: &mut Cx, x: V, norm: &[i64], w: Option<V>, b: Option<V>, eps: f64) -> Result<(V, V, V)> {
    let dims = cx.dims(x);
    let k = norm.len();
    if k == 0 {
        bail_op!(
            &*cx.op,
            "Expected normalized_shape to be at least 1-dimensional, i.e., containing at least one element, \
             but got normalized_shape = {}",
            fmt(norm)
        );
    }
    for (t, what) in [(w, "weight"), (b, "bias")] {
        if let Some(t) = t {
            if cx.dims(t) != norm {
                bail_op!(
                    &*cx.op,
                    "Expected {what} to be of same shape as normalized_shape, but got {what} of shape {} \
                     and normalized_shape = {}",
                    fmt(&cx.dims(t)),
                    fmt(norm)
                );
            }
        }
    }
    if dims.len() < k || dims[dims.len() - k..] != norm[..] {
        bail_op!(
            &*cx.op,
            "Given normalized_shape={}, expected input with shape [*, {}], but got input of size{}",
            fmt(norm),
            norm.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", "),
            fmt(&dims)
        );
    }
    let d = require_float(cx, x, "layer_norm")?;
    let axis = dims.len() - k;
    let red: Vec<usize> = (axis..dims.len()).collect();
    let n = shape::numel(norm) as f64;
    let xc = up(cx, x);
    let mean = sum(cx, xc, &red);
    let inv_n = cx.f.full_like(mean, 1.0 / n);
    let mean = cx.f.mul(mean, inv_n);
    let mean_b = expand_reduced(cx, mean, &dims, &red);
    let xm = cx.f.sub(xc, mean_b);
    let sq = cx.f.mul(xm, xm);
    let var = sum(cx, sq, &red);
    let var = cx.f.mul(var, inv_n);
    let eps_v = cx.f.full_like(var, eps);
    let var = cx.f.add(var, eps_v);
    let rstd = cx.f.unary("stablehlo.rsqrt", var);
    let rstd_b = expand_reduced(cx, rstd, &dims, &red);
    let mut y = cx.f.mul(xm, rstd_b);
    if let Some(w) = w {
        let wc = cx.f.convert(w, d.opmath());
        let wc = cx.f.broadcast_to(wc, &dims);
        y = cx.f.mul(y, wc);
    }
    if let Some(b) = b {
        let bc = cx.f.convert(b, d.opmath());
        let bc = cx.f.broadcast_to(bc, &dims);
        y = cx.f.add(y, bc);
    }
    // mean and rstd keep the normalized dims as size 1, in the
    // input's dtype (as PyTorch's CPU kernel returns them).
    let stat_dims: Vec<i64> = dims.iter().enumerate().map(|(i, &s)| if i < axis { s } else { 1 }).collect();
    let mean = cx.f.reshape(mean, &stat_dims);
    let rstd = cx.f.reshape(rstd, &stat_dims);
    Ok((cx.f.convert(y, d), cx.f.convert(mean, d), cx.f.convert(rstd, d)))
}

/// `v` (shape `small`, the statistics of the `red` dims) as opmath values
/// broadcast to `full`.
pub(super) fn stat(cx: &mut Cx, v: V, full: &[i64], red: &[usize]) -> V {
    let kept: Vec<i64> = (0..full.len()).filter(|d| !red.contains(d)).map(|d| full[d]).collect();
    let od = cx.dtype(v).opmath();
    let v = cx.f.convert(v, od);
    let v = cx.f.reshape(v, &kept);
    expand_reduced(cx, v, full, red)
}

/// Sum over `dims`, or `x` itself when there are none.
pub(super) fn sum_dims(cx: &mut Cx, x: V, dims: &[usize]) -> V {
    if dims.is_empty() {
        x
    } else {
        sum(cx, x, dims)
    }
}

/// The input gradient of a normalization over `red` with `xhat = (x - mean) * rstd`:
/// `rstd * (gw - mean(gw) - xhat * mean(gw * xhat))`, `gw` the output
/// gradient times the weight.
pub(super) fn norm_input_grad(cx: &mut Cx, gw: V, xhat: V, rstd: V, red: &[usize]) -> V {
    let full = cx.dims(gw);
    let n: i64 = red.iter().map(|&d| full[d]).product();
    let inv_n = 1.0 / n.max(1) as f64;
    let s1 = sum(cx, gw, red);
    let gx = cx.f.mul(gw, xhat);
    let s2 = sum(cx, gx, red);
    let k = cx.f.full_like(s1, inv_n);
    let m1 = cx.f.mul(s1, k);
    let m2 = cx.f.mul(s2, k);
    let m1 = expand_reduced(cx, m1, &full, red);
    let m2 = expand_reduced(cx, m2, &full, red);
    let t = cx.f.sub(gw, m1);
    let xm2 = cx.f.mul(xhat, m2);
    let t = cx.f.sub(t, xm2);
    cx.f.mul(rstd, t)
}

pub(super) fn register_layer_norm_backward(r: &mut Builder) {
    r.op(
        "aten::native_layer_norm_backward(Tensor grad_out, Tensor input, SymInt[] normalized_shape, Tensor mean, \
         Tensor rstd, Tensor? weight, Tensor? bias, bool[3] output_mask) -> (Tensor, Tensor, Tensor)",
        |cx, a| {
            let (g, x, mean, rstd) = (a.tensor(0)?, a.tensor(1)?, a.tensor(3)?, a.tensor(4)?);
            let norm = a.ints(2)?.to_vec();
            let (w, b) = (a.opt_tensor(5), a.opt_tensor(6));
            let mask = output_mask(cx, a, 7)?;
            let dims = cx.dims(x);
            let k = norm.len();
            if k == 0 || dims.len() < k || dims[dims.len() - k..] != norm[..] || cx.dims(g) != dims {
                bail_op!(
                    &*cx.op,
                    "Given normalized_shape={}, expected input and grad_out of shape [*, {}], but got input of size {} \
                     and grad_out of size {}",
                    fmt(&norm),
                    norm.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", "),
                    fmt(&dims),
                    fmt(&cx.dims(g))
                );
            }
            let d = require_float(cx, x, "layer_norm_backward")?;
            let axis = dims.len() - k;
            let red: Vec<usize> = (axis..dims.len()).collect();
            let lead: Vec<usize> = (0..axis).collect();
            let od = d.opmath();
            let xc = cx.f.convert(x, od);
            let gc = cx.f.convert(g, od);
            let mean_b = stat(cx, mean, &dims, &red);
            let rstd_b = stat(cx, rstd, &dims, &red);
            let xm = cx.f.sub(xc, mean_b);
            let xhat = cx.f.mul(xm, rstd_b);
            let dx = masked(cx, &mask, 0, |cx| {
                let gw = match w {
                    Some(w) => {
                        let wc = cx.f.convert(w, od);
                        let wb = cx.f.broadcast_in_dim(wc, &(axis as i64..dims.len() as i64).collect::<Vec<_>>(), &dims);
                        cx.f.mul(gc, wb)
                    }
                    None => gc,
                };
                let dx = norm_input_grad(cx, gw, xhat, rstd_b, &red);
                Ok(cx.f.convert(dx, d))
            })?;
            let dw = match w {
                Some(w) => masked(cx, &mask, 1, |cx| {
                    let gx = cx.f.mul(gc, xhat);
                    let s = sum_dims(cx, gx, &lead);
                    Ok(cx.f.convert(s, cx.dtype(w)))
                })?,
                None => cx.none(),
            };
            let db = match b.or(w) {
                Some(b) => masked(cx, &mask, 2, |cx| {
                    let s = sum_dims(cx, gc, &lead);
                    Ok(cx.f.convert(s, cx.dtype(b)))
                })?,
                None => cx.none(),
            };
            Ok(vec![dx, dw, db])
        },
    );
}

/// The dtype of the saved statistics.
fn stat_dtype(cx: &Cx, x: V, params: &[Option<V>]) -> DType {
    let d = cx.dtype(x);
    let mixed = matches!(d, DType::F16 | DType::BF16) && params.iter().flatten().any(|&p| cx.dtype(p) == DType::F32);
    if mixed {
        DType::F32
    } else {
        d
    }
}

/// Requires each present per-channel tensor to hold `c` elements.
fn check_channels(cx: &Cx, c: i64, ts: &[(Option<V>, &str)]) -> Result<()> {
    for &(t, what) in ts {
        if let Some(t) = t {
            if shape::numel(&cx.dims(t)) != c {
                bail_op!(&*cx.op, "Expected {what} to have {c} elements, but got {what} of size {}", fmt(&cx.dims(t)));
            }
        }
    }
    Ok(())
}

/// A per-channel `[C]` tensor in `elem`, broadcast along dim 1 of `full`.
fn per_channel(cx: &mut Cx, v: V, full: &[i64], elem: DType) -> V {
    let v = cx.f.convert(v, elem);
    let v = cx.f.reshape(v, &[full[1]]);
    cx.f.broadcast_in_dim(v, &[1], full)
}

/// `y * w + b` with per-channel (dim 1) weight and bias.
fn affine(cx: &mut Cx, y: V, w: Option<V>, b: Option<V>) -> V {
    let full = cx.dims(y);
    let od = cx.dtype(y);
    let mut y = y;
    if let Some(w) = w {
        let wb = per_channel(cx, w, &full, od);
        y = cx.f.mul(y, wb);
    }
    if let Some(b) = b {
        let bb = per_channel(cx, b, &full, od);
        y = cx.f.add(y, bb);
    }
    y
}

/// The reduction dims of batch norm: all but the channels.
fn bn_dims(cx: &Cx, x: V) -> Result<(Vec<i64>, Vec<usize>, i64)> {
    let dims = cx.dims(x);
    if dims.len() < 2 {
        bail_op!(&*cx.op, "Expected input of at least 2 dims (N, C, ...), but got input of size {}", fmt(&dims));
    }
    let red: Vec<usize> = (0..dims.len()).filter(|&i| i != 1).collect();
    let n = red.iter().map(|&i| dims[i]).product();
    Ok((dims, red, n))
}

/// Batch norm; the results, then the new running statistics when training
/// with them.
#[allow(clippy::too_many_arguments)]
fn batch_norm(
    cx: &mut Cx,
    x: V,
    w: Option<V>,
    b: Option<V>,
    running: Option<(V, V)>,
    training: bool,
    momentum: f64,
    eps: f64,
) -> Result<Vec<V>> {
    let (dims, red, n) = bn_dims(cx, x)?;
    let c = dims[1];
    let (rm, rv) = (running.map(|r| r.0), running.map(|r| r.1));
    check_channels(cx, c, &[(w, "weight"), (b, "bias"), (rm, "running_mean"), (rv, "running_var")])?;
    let d = require_float(cx, x, "batch_norm")?;
    let sd = stat_dtype(cx, x, &[w, b, rm, rv]);
    let od = d.opmath();
    let xc = up(cx, x);
    let mut out = Vec::new();
    let mut updates = Vec::new();
    if training {
        let inv_n = 1.0 / n.max(1) as f64;
        let s = sum(cx, xc, &red);
        let k = cx.f.full_like(s, inv_n);
        let mean = cx.f.mul(s, k);
        let mean_b = expand_reduced(cx, mean, &dims, &red);
        let xm = cx.f.sub(xc, mean_b);
        let sq = cx.f.mul(xm, xm);
        let var = sum(cx, sq, &red);
        let var = cx.f.mul(var, k);
        let e = cx.f.full_like(var, eps);
        let ve = cx.f.add(var, e);
        let invstd = cx.f.unary("stablehlo.rsqrt", ve);
        let inv_b = expand_reduced(cx, invstd, &dims, &red);
        let y = cx.f.mul(xm, inv_b);
        let y = affine(cx, y, w, b);
        out.push(cx.f.convert(y, d));
        out.push(cx.f.convert(mean, sd));
        out.push(cx.f.convert(invstd, sd));
        if let Some((rm, rv)) = running {
            // running = (1 - momentum) * running + momentum * batch, with
            // the unbiased variance.
            let m = cx.f.full_like(mean, momentum);
            let keep = cx.f.full_like(mean, 1.0 - momentum);
            let unbias = cx.f.full_like(var, n as f64 / (n - 1).max(0) as f64);
            for (r, v) in [(rm, mean), (rv, cx.f.mul(var, unbias))] {
                let rc = cx.f.convert(r, od);
                let rc = cx.f.reshape(rc, &[c]);
                let old = cx.f.mul(rc, keep);
                let new = cx.f.mul(v, m);
                let upd = cx.f.add(old, new);
                let upd = cx.f.reshape(upd, &cx.dims(r));
                updates.push(upd);
            }
        }
    } else {
        let (Some(rm), Some(rv)) = (rm, rv) else {
            bail_op!(&*cx.op, "running_mean and running_var must be defined in evaluation mode");
        };
        let mean_b = per_channel(cx, rm, &dims, od);
        let var_b = per_channel(cx, rv, &dims, od);
        let e = cx.f.full_like(var_b, eps);
        let ve = cx.f.add(var_b, e);
        let inv_b = cx.f.unary("stablehlo.rsqrt", ve);
        let xm = cx.f.sub(xc, mean_b);
        let y = cx.f.mul(xm, inv_b);
        let y = affine(cx, y, w, b);
        out.push(cx.f.convert(y, d));
        // Evaluation saves no statistics.
        for _ in 0..2 {
            out.push(cx.f.splat(&Ty::new(sd, &[0]), 0.0));
        }
    }
    out.extend(updates);
    Ok(out)
}

fn register_batch_norm(r: &mut Builder) {
    r.composite(
        "aten::native_batch_norm(Tensor input, Tensor? weight, Tensor? bias, Tensor? running_mean, \
         Tensor? running_var, bool training, float momentum, float eps) -> (Tensor, Tensor, Tensor)",
        Composite::NativeBatchNorm,
    );
    r.op(
        "aten::_native_batch_norm_legit(Tensor input, Tensor? weight, Tensor? bias, Tensor(a!) running_mean, \
         Tensor(b!) running_var, bool training, float momentum, float eps) -> (Tensor, Tensor, Tensor)",
        |cx, a| {
            let running = Some((a.tensor(3)?, a.tensor(4)?));
            let training = a.bool(5)?;
            let mut out = batch_norm(cx, a.tensor(0)?, a.opt_tensor(1), a.opt_tensor(2), running, training, a.float(6)?, a.float(7)?)?;
            if !training {
                // The running statistics are written back unchanged.
                out.push(a.tensor(3)?);
                out.push(a.tensor(4)?);
            }
            Ok(out)
        },
    );
    // The training-mode form torch.compile and export use: the legit op's
    // three results and its running-statistics update, plus an empty
    // `reserve` (a cuDNN workspace elsewhere).
    r.op(
        "aten::_batch_norm_with_update(Tensor input, Tensor? weight, Tensor? bias, Tensor(a!) running_mean, \
         Tensor(b!) running_var, float momentum, float eps) -> (Tensor, Tensor, Tensor, Tensor)",
        |cx, a| {
            let running = Some((a.tensor(3)?, a.tensor(4)?));
            let out = batch_norm(cx, a.tensor(0)?, a.opt_tensor(1), a.opt_tensor(2), running, true, a.float(5)?, a.float(6)?)?;
            let reserve = cx.f.splat_int(&crate::hlo::Ty::new(crate::hlo::Elem::U8, &[0]), 0);
            // The three results, the reserve, then the two updates.
            let mut all = out[..3].to_vec();
            all.push(reserve);
            all.extend_from_slice(&out[3..]);
            Ok(all)
        },
    );
    r.op(
        "aten::_native_batch_norm_legit.no_stats(Tensor input, Tensor? weight, Tensor? bias, bool training, \
         float momentum, float eps) -> (Tensor, Tensor, Tensor)",
        |cx, a| {
            let training = a.bool(3)?;
            if !training {
                bail_op!(&*cx.op, "running_mean and running_var must be defined in evaluation mode");
            }
            batch_norm(cx, a.tensor(0)?, a.opt_tensor(1), a.opt_tensor(2), None, true, a.float(4)?, a.float(5)?)
        },
    );
    r.op(
        "aten::_native_batch_norm_legit_no_training(Tensor input, Tensor? weight, Tensor? bias, Tensor running_mean, \
         Tensor running_var, float momentum, float eps) -> (Tensor, Tensor, Tensor)",
        |cx, a| {
            let running = Some((a.tensor(3)?, a.tensor(4)?));
            batch_norm(cx, a.tensor(0)?, a.opt_tensor(1), a.opt_tensor(2), running, false, a.float(5)?, a.float(6)?)
        },
    );
    r.op(
        "aten::native_batch_norm_backward(Tensor grad_out, Tensor input, Tensor? weight, Tensor? running_mean, \
         Tensor? running_var, Tensor? save_mean, Tensor? save_invstd, bool train, float eps, bool[3] output_mask) \
         -> (Tensor, Tensor, Tensor)",
        batch_norm_backward,
    );
}

fn batch_norm_backward(cx: &mut Cx, a: &Args) -> Result<Vec<V>> {
    let (g, x, w) = (a.tensor(0)?, a.tensor(1)?, a.opt_tensor(2));
    let (rm, rv, sm, si) = (a.opt_tensor(3), a.opt_tensor(4), a.opt_tensor(5), a.opt_tensor(6));
    let (train, eps) = (a.bool(7)?, a.float(8)?);
    let mask = output_mask(cx, a, 9)?;
    let (dims, red, _) = bn_dims(cx, x)?;
    if cx.dims(g) != dims {
        bail_op!(&*cx.op, "grad_out of size {} does not match input of size {}", fmt(&cx.dims(g)), fmt(&dims));
    }
    let c = dims[1];
    check_channels(cx, c, &[(w, "weight"), (rm, "running_mean"), (rv, "running_var")])?;
    if train {
        // Evaluation mode saves nothing: PyTorch passes empty save_* tensors.
        check_channels(cx, c, &[(sm, "save_mean"), (si, "save_invstd")])?;
    }
    let d = require_float(cx, x, "batch_norm_backward")?;
    let od = d.opmath();
    let (mean, invstd) = if train {
        let (Some(sm), Some(si)) = (sm, si) else {
            bail_op!(&*cx.op, "save_mean and save_invstd must be defined in training mode");
        };
        (per_channel(cx, sm, &dims, od), per_channel(cx, si, &dims, od))
    } else {
        let (Some(rm), Some(rv)) = (rm, rv) else {
            bail_op!(&*cx.op, "running_mean and running_var must be defined in evaluation mode");
        };
        let var = per_channel(cx, rv, &dims, od);
        let e = cx.f.full_like(var, eps);
        let ve = cx.f.add(var, e);
        (per_channel(cx, rm, &dims, od), cx.f.unary("stablehlo.rsqrt", ve))
    };
    let xc = up(cx, x);
    let gc = up(cx, g);
    let xm = cx.f.sub(xc, mean);
    let xhat = cx.f.mul(xm, invstd);
    let pd = w.map(|w| cx.dtype(w)).unwrap_or(d);
    let gi = masked(cx, &mask, 0, |cx| {
        let gw = match w {
            Some(w) => {
                let wb = per_channel(cx, w, &dims, od);
                cx.f.mul(gc, wb)
            }
            None => gc,
        };
        let y = if train { norm_input_grad(cx, gw, xhat, invstd, &red) } else { cx.f.mul(gw, invstd) };
        Ok(cx.f.convert(y, d))
    })?;
    let gw = match w {
        Some(_) => masked(cx, &mask, 1, |cx| {
            let gx = cx.f.mul(gc, xhat);
            let s = sum(cx, gx, &red);
            Ok(cx.f.convert(s, pd))
        })?,
        None => cx.none(),
    };
    let gb = masked(cx, &mask, 2, |cx| {
        let s = sum(cx, gc, &red);
        Ok(cx.f.convert(s, pd))
    })?;
    Ok(vec![gi, gw, gb])
}

// -------------------------------------------------------------- group norm

/// Checks `input` against `N, C, HxW, group`; returns its dims.
fn group_dims(cx: &Cx, x: V, n: i64, c: i64, hw: i64, group: i64) -> Result<Vec<i64>> {
    let dims = cx.dims(x);
    if group <= 0 || c % group != 0 {
        bail_op!(&*cx.op, "Expected number of channels in input to be divisible by num_groups, but got input of shape {} and num_groups={group}", fmt(&dims));
    }
    if dims.len() < 2 || dims[0] != n || dims[1] != c || shape::numel(&dims) != n * c * hw {
        bail_op!(&*cx.op, "Expected input of size [{n}, {c}, *] with {hw} elements per channel, but got {}", fmt(&dims));
    }
    Ok(dims)
}

fn register_group_norm(r: &mut Builder) {
    r.op(
        "aten::native_group_norm(Tensor input, Tensor? weight, Tensor? bias, SymInt N, SymInt C, SymInt HxW, \
         int group, float eps) -> (Tensor, Tensor, Tensor)",
        |cx, a| {
            let (x, w, b) = (a.tensor(0)?, a.opt_tensor(1), a.opt_tensor(2));
            let (n, c, hw, group, eps) = (a.int(3)?, a.int(4)?, a.int(5)?, a.int(6)?, a.float(7)?);
            let dims = group_dims(cx, x, n, c, hw, group)?;
            check_channels(cx, c, &[(w, "weight"), (b, "bias")])?;
            let d = require_float(cx, x, "group_norm")?;
            let sd = stat_dtype(cx, x, &[w, b]);
            let gdims = [n, group, c / group * hw];
            let xc = up(cx, x);
            let xg = cx.f.reshape(xc, &gdims);
            let s = sum(cx, xg, &[2]);
            let k = cx.f.full_like(s, 1.0 / gdims[2].max(1) as f64);
            let mean = cx.f.mul(s, k);
            let mean_b = expand_reduced(cx, mean, &gdims, &[2]);
            let xm = cx.f.sub(xg, mean_b);
            let sq = cx.f.mul(xm, xm);
            let var = sum(cx, sq, &[2]);
            let var = cx.f.mul(var, k);
            let e = cx.f.full_like(var, eps);
            let ve = cx.f.add(var, e);
            let rstd = cx.f.unary("stablehlo.rsqrt", ve);
            let rstd_b = expand_reduced(cx, rstd, &gdims, &[2]);
            let y = cx.f.mul(xm, rstd_b);
            let y = cx.f.reshape(y, &[n, c, hw]);
            let y = affine(cx, y, w, b);
            let y = cx.f.reshape(y, &dims);
            Ok(vec![cx.f.convert(y, d), cx.f.convert(mean, sd), cx.f.convert(rstd, sd)])
        },
    );
    r.op(
        "aten::native_group_norm_backward(Tensor grad_out, Tensor input, Tensor mean, Tensor rstd, Tensor? weight, \
         SymInt N, SymInt C, SymInt HxW, int group, bool[3] output_mask) -> (Tensor, Tensor, Tensor)",
        |cx, a| {
            let (g, x, mean, rstd, w) = (a.tensor(0)?, a.tensor(1)?, a.tensor(2)?, a.tensor(3)?, a.opt_tensor(4));
            let (n, c, hw, group) = (a.int(5)?, a.int(6)?, a.int(7)?, a.int(8)?);
            let mask = output_mask(cx, a, 9)?;
            let dims = group_dims(cx, x, n, c, hw, group)?;
            if cx.dims(g) != dims {
                bail_op!(&*cx.op, "grad_out of size {} does not match input of size {}", fmt(&cx.dims(g)), fmt(&dims));
            }
            for (t, what) in [(mean, "mean"), (rstd, "rstd")] {
                if shape::numel(&cx.dims(t)) != n * group {
                    bail_op!(&*cx.op, "Expected {what} to have {} elements, but got {}", n * group, fmt(&cx.dims(t)));
                }
            }
            check_channels(cx, c, &[(w, "weight")])?;
            let d = require_float(cx, x, "group_norm_backward")?;
            let od = d.opmath();
            let gdims = [n, group, c / group * hw];
            let cdims = [n, c, hw];
            let stat = |cx: &mut Cx, v: V| {
                let v = cx.f.convert(v, od);
                let v = cx.f.reshape(v, &[n, group]);
                expand_reduced(cx, v, &gdims, &[2])
            };
            let (mean_b, rstd_b) = (stat(cx, mean), stat(cx, rstd));
            let xc = up(cx, x);
            let xg = cx.f.reshape(xc, &gdims);
            let xm = cx.f.sub(xg, mean_b);
            let xhat = cx.f.mul(xm, rstd_b);
            let gc = up(cx, g);
            let gch = cx.f.reshape(gc, &cdims);
            let pd = w.map(|w| cx.dtype(w)).unwrap_or(d);
            let gi = masked(cx, &mask, 0, |cx| {
                let gw = match w {
                    Some(w) => {
                        let wb = per_channel(cx, w, &cdims, od);
                        cx.f.mul(gch, wb)
                    }
                    None => gch,
                };
                let gw = cx.f.reshape(gw, &gdims);
                let y = norm_input_grad(cx, gw, xhat, rstd_b, &[2]);
                let y = cx.f.reshape(y, &dims);
                Ok(cx.f.convert(y, d))
            })?;
            let gw = masked(cx, &mask, 1, |cx| {
                let xh = cx.f.reshape(xhat, &cdims);
                let gx = cx.f.mul(gch, xh);
                let s = sum(cx, gx, &[0, 2]);
                Ok(cx.f.convert(s, pd))
            })?;
            let gb = masked(cx, &mask, 2, |cx| {
                let s = sum(cx, gch, &[0, 2]);
                Ok(cx.f.convert(s, pd))
            })?;
            Ok(vec![gi, gw, gb])
        },
    );
}
