//! Backward kernels of the NN ops that autograd calls when training: NLL
//! loss, layer norm, embedding, convolution, max / average pooling, and
//! adaptive average pooling (whose forward lives here too, since both are
//! products with the same averaging matrices).

use crate::bail_op;
use crate::dtype::DType;
use crate::error::Result;
use crate::hlo::{Cmp, Elem, Reducer, Ty, V};
use crate::ops::common::up;
use crate::ops::{Args, Cx, Builder};
use crate::shape::{self, fmt};

use super::{avg_divisor, avg_pool_checks, pool_geometry, conv_core, conv_params, expand_reduced, require_float, sum, ConvParams};

pub(super) fn register(r: &mut Builder) {
    register_nll(r);
    register_layer_norm(r);
    register_embedding(r);
    register_convolution(r);
    register_pooling(r);
    register_adaptive(r);
}

/// `mask[i]`, or a placeholder for the undefined gradient.
pub(super) fn masked(cx: &mut Cx, mask: &[bool], i: usize, make: impl FnOnce(&mut Cx) -> Result<V>) -> Result<V> {
    if mask.get(i).copied().unwrap_or(true) {
        make(cx)
    } else {
        Ok(cx.none())
    }
}

/// `bool[3] output_mask` as three flags.
pub(super) fn output_mask(cx: &Cx, a: &Args, i: usize) -> Result<[bool; 3]> {
    let m = a.bools(i)?;
    match m[..] {
        [a, b, c] => Ok([a, b, c]),
        _ => bail_op!(&*cx.op, "output_mask must have 3 entries, got {}", m.len()),
    }
}

// --------------------------------------------------------------------- loss

/// `nll_loss_backward` over rows `[rows, classes]` of the input, with the
/// input's shape restored by `restore`.
fn nll_backward(cx: &mut Cx, a: &Args, spatial: bool) -> Result<Vec<V>> {
    let (g, x, t, weight) = (a.tensor(0)?, a.tensor(1)?, a.tensor(2)?, a.opt_tensor(3));
    let (reduction, ignore, total) = (a.int(4)?, a.int(5)?, a.tensor(6)?);
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
        0 => {
            if gn != rows {
                bail_op!(&*cx.op, "Expected a tensor of {rows} elements for grad_output, but got {}", fmt(&cx.dims(g)));
            }
            cx.f.reshape(gc, &[rows])
        }
        1 | 2 => {
            if gn != 1 {
                bail_op!(&*cx.op, "Expected a single element grad_output tensor, but got: {}", fmt(&cx.dims(g)));
            }
            let mut s = cx.f.reshape(gc, &[]);
            if reduction == 1 {
                let tw = cx.f.convert(total, od);
                let tw = cx.f.reshape(tw, &[]);
                s = cx.f.div(s, tw);
            }
            cx.f.broadcast_in_dim(s, &[], &[rows])
        }
        other => bail_op!(&*cx.op, "{other} is not a valid value for reduction"),
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

fn register_nll(r: &mut Builder) {
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

// --------------------------------------------------------------- layer norm

/// `v` (shape `small`, the statistics of the `red` dims) as opmath values
/// broadcast to `full`.
fn stat(cx: &mut Cx, v: V, full: &[i64], red: &[usize]) -> V {
    let kept: Vec<i64> = (0..full.len()).filter(|d| !red.contains(d)).map(|d| full[d]).collect();
    let od = cx.dtype(v).opmath();
    let v = cx.f.convert(v, od);
    let v = cx.f.reshape(v, &kept);
    expand_reduced(cx, v, full, red)
}

/// Sum over `dims`, or `x` itself when there are none.
fn sum_dims(cx: &mut Cx, x: V, dims: &[usize]) -> V {
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

fn register_layer_norm(r: &mut Builder) {
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

// ---------------------------------------------------------------- embedding

fn register_embedding(r: &mut Builder) {
    r.op(
        "aten::embedding_dense_backward(Tensor grad_output, Tensor indices, SymInt num_weights, SymInt padding_idx, \
         bool scale_grad_by_freq) -> Tensor",
        |cx, a| {
            let (g, idx) = (a.tensor(0)?, a.tensor(1)?);
            let (num, padding_idx, scale) = (a.int(2)?, a.int(3)?, a.bool(4)?);
            let (gd, id) = (cx.dims(g), cx.dims(idx));
            super::check_indices(cx, idx)?;
            let n = shape::numel(&id);
            if gd.len() != id.len() + 1 || gd[..id.len()] != id[..] {
                bail_op!(&*cx.op, "grad_output of size {} does not match indices of size {}", fmt(&gd), fmt(&id));
            }
            let dim = *gd.last().unwrap();
            let d = require_float(cx, g, "embedding_backward")?;
            let od = d.opmath();
            let gc = cx.f.convert(g, od);
            let gc = cx.f.reshape(gc, &[n, dim]);
            let ic = cx.f.convert(idx, Elem::I64);
            let ic = cx.f.reshape(ic, &[n]);
            // Rows of padding_idx get no gradient (-1: none).
            let pad = cx.f.splat_int(&Ty::new(Elem::I64, &[n]), padding_idx);
            let keep = cx.f.compare(Cmp::Ne, ic, pad);
            let keep = cx.f.broadcast_in_dim(keep, &[0], &[n, dim]);
            let zeros = cx.f.full_like(gc, 0.0);
            let mut gc = cx.f.select(keep, gc, zeros);
            let at = cx.f.reshape(ic, &[n, 1]);
            if scale {
                // Divide each row by how often its index occurs.
                let zn = cx.f.splat(&Ty::new(od, &[num]), 0.0);
                let ones = cx.f.splat(&Ty::new(od, &[n]), 1.0);
                let counts = cx.f.scatter(zn, at, ones, &[], &[0], &[0], 1, Some(Reducer::Add));
                let c = cx.f.gather(counts, at, &[], &[0], &[0], 1, &[1], &[n]);
                let c = cx.f.broadcast_in_dim(c, &[0], &[n, dim]);
                gc = cx.f.div(gc, c);
            }
            let zw = cx.f.splat(&Ty::new(od, &[num, dim]), 0.0);
            let out = cx.f.scatter(zw, at, gc, &[1], &[0], &[0], 1, Some(Reducer::Add));
            Ok(vec![cx.f.convert(out, d)])
        },
    );
}

// -------------------------------------------------------------- convolution

/// `1 + s * (n - 1)`: the extent of `n` points `s` apart.
fn dilate(n: i64, s: i64) -> i64 {
    if n == 0 {
        0
    } else {
        1 + s * (n - 1)
    }
}

/// The weight gradient of the convolution of `inp: [N, C, sp...]` giving
/// `go: [N, O, osp...]` (both opmath) with a weight of shape `wd`
/// (`[O, C/g, k...]`): a convolution of the input by the output gradient
/// with batch and feature dims swapped, the groups split over the batch.
fn conv_weight_grad(cx: &mut Cx, inp: V, go: V, p: &ConvParams, wd: &[i64]) -> V {
    let (xd, gd) = (cx.dims(inp), cx.dims(go));
    let n = wd.len() - 2;
    let mut perm = vec![1, 0];
    perm.extend(2..2 + n);
    let lhs = cx.f.transpose(inp, &perm);
    let rhs = cx.f.transpose(go, &perm);
    let pad: Vec<(i64, i64)> = (0..n)
        .map(|i| {
            let lo = p.padding[i];
            let hi = dilate(gd[i + 2], p.stride[i]) - xd[i + 2] + dilate(wd[i + 2], p.dilation[i]) - lo - 1;
            (lo, hi)
        })
        .collect();
    let mut out = vec![wd[1], wd[0]];
    out.extend_from_slice(&wd[2..]);
    let y = cx.f.convolution_grouped(lhs, rhs, &p.dilation, &pad, &vec![1; n], &p.stride, 1, p.groups, &out);
    cx.f.transpose(y, &perm)
}

fn convolution_backward(cx: &mut Cx, a: &Args) -> Result<Vec<V>> {
    let (g, x, w) = (a.tensor(0)?, a.tensor(1)?, a.tensor(2)?);
    let (gd, xd, wd) = (cx.dims(g), cx.dims(x), cx.dims(w));
    if wd.len() < 3 || wd.len() > 5 || xd.len() != wd.len() || gd.len() != wd.len() {
        bail_op!(
            &*cx.op,
            "expected grad_output, input and weight of the same rank 3, 4 or 5, but got {}, {} and {}",
            fmt(&gd),
            fmt(&xd),
            fmt(&wd)
        );
    }
    let n = wd.len() - 2;
    let p = conv_params(cx, a, n, 4)?;
    let mask = output_mask(cx, a, 10)?;
    let d = require_float(cx, x, "convolution_backward")?;
    let (gc, xc, wc) = (up(cx, g), up(cx, x), up(cx, w));
    let gi = masked(cx, &mask, 0, |cx| {
        let y = if !p.transposed {
            // The transposed convolution of the gradient, its output
            // padding chosen to give back the input's size.
            let output_padding = (0..n)
                .map(|i| {
                    let ks = dilate(wd[i + 2], p.dilation[i]);
                    xd[i + 2] - ((gd[i + 2] - 1) * p.stride[i] - 2 * p.padding[i] + ks)
                })
                .collect();
            conv_core(cx, gc, wc, &ConvParams { transposed: true, output_padding, ..p.clone() })?
        } else {
            let y = conv_core(cx, gc, wc, &ConvParams { transposed: false, ..p.clone() })?;
            // An output padding of a stride or more leaves extra positions.
            let yd = cx.dims(y);
            if yd != xd {
                cx.f.slice(y, &vec![0; yd.len()], &xd, &vec![1; yd.len()])
            } else {
                y
            }
        };
        Ok(cx.f.convert(y, d))
    })?;
    let gw = masked(cx, &mask, 1, |cx| {
        let y = if !p.transposed {
            conv_weight_grad(cx, xc, gc, &p, &wd)
        } else {
            conv_weight_grad(cx, gc, xc, &p, &wd)
        };
        Ok(cx.f.convert(y, cx.dtype(w)))
    })?;
    let gb = masked(cx, &mask, 2, |cx| {
        let dims: Vec<usize> = (0..gd.len()).filter(|&i| i != 1).collect();
        let s = sum(cx, gc, &dims);
        Ok(cx.f.convert(s, d))
    })?;
    Ok(vec![gi, gw, gb])
}

fn register_convolution(r: &mut Builder) {
    r.op(
        "aten::convolution_backward(Tensor grad_output, Tensor input, Tensor weight, SymInt[]? bias_sizes, \
         SymInt[] stride, SymInt[] padding, SymInt[] dilation, bool transposed, SymInt[] output_padding, \
         SymInt groups, bool[3] output_mask) -> (Tensor, Tensor, Tensor)",
        convolution_backward,
    );
}

// ------------------------------------------------------------------ pooling

/// Adds each of `g: [B, K]` into a zero `[B, n]` at column `idx: [B, K]`.
fn scatter_add_rows(cx: &mut Cx, g: V, idx: V, n: i64) -> V {
    let gd = cx.dims(g);
    let (b, k) = (gd[0], gd[1]);
    let ity = Ty::new(Elem::I64, &[b, k, 1]);
    let rows = cx.f.iota(&ity, 0);
    let cols = cx.f.reshape(idx, &[b, k, 1]);
    let at = cx.f.concatenate(&[rows, cols], 2);
    let zeros = cx.f.splat(&Ty::new(cx.ty(g).elem, &[b, n]), 0.0);
    cx.f.scatter(zeros, at, g, &[], &[0, 1], &[0, 1], 2, Some(Reducer::Add))
}

/// `max_pool{n}d_with_indices_backward`: each gradient added at its index.
fn max_pool_backward(cx: &mut Cx, a: &Args, n: usize) -> Result<Vec<V>> {
    let (g, x, idx) = (a.tensor(0)?, a.tensor(1)?, a.tensor(7)?);
    let name = format!("max_pool{n}d");
    let p = pool_geometry(cx, x, n, a.ints(2)?, a.ints(3)?, a.ints(4)?, a.ints(5)?, a.bool(6)?, &name)?;
    let xd = cx.dims(x);
    let rank = xd.len();
    let mut want = xd[..rank - n].to_vec();
    want.extend(&p.out);
    if cx.dims(g) != want || cx.dims(idx) != want {
        bail_op!(
            &*cx.op,
            "expected grad_output and indices of size {}, but got {} and {}",
            fmt(&want),
            fmt(&cx.dims(g)),
            fmt(&cx.dims(idx))
        );
    }
    let d = require_float(cx, x, &format!("{name}_with_indices_backward"))?;
    Ok(vec![grad_at_indices(cx, g, idx, &xd, n, d)])
}

/// A max pooling's input gradient: each output gradient added at its
/// flat index within its `n`-dim plane of the input `xd`.
pub(super) fn grad_at_indices(cx: &mut Cx, g: V, idx: V, xd: &[i64], n: usize, d: DType) -> V {
    let rank = xd.len();
    let b = shape::numel(&xd[..rank - n]);
    let k = shape::numel(&cx.dims(g)[rank - n..]);
    let gc = up(cx, g);
    let gc = cx.f.reshape(gc, &[b, k]);
    let ic = cx.f.convert(idx, Elem::I64);
    let ic = cx.f.reshape(ic, &[b, k]);
    let out = scatter_add_rows(cx, gc, ic, shape::numel(&xd[rank - n..]));
    let out = cx.f.reshape(out, xd);
    cx.f.convert(out, d)
}

/// `avg_pool{n}d_backward`: each window's share of its gradient spread over
/// the window.
fn avg_pool_backward(cx: &mut Cx, a: &Args, n: usize) -> Result<Vec<V>> {
    let (g, x) = (a.tensor(0)?, a.tensor(1)?);
    let divisor = a.opt_int(7);
    let p = avg_pool_checks(cx, x, n, a.ints(2)?, a.ints(3)?, a.ints(4)?, a.bool(5)?, divisor)?;
    let xd = cx.dims(x);
    let rank = xd.len();
    let sp = xd[rank - n..].to_vec();
    let mut want = xd[..rank - n].to_vec();
    want.extend(&p.out);
    if cx.dims(g) != want {
        bail_op!(&*cx.op, "expected grad_output of size {}, but got {}", fmt(&want), fmt(&cx.dims(g)));
    }
    let d = cx.dtype(x);
    let gc = up(cx, g);
    let acc = cx.ty(gc).elem;
    let b = shape::numel(&xd[..rank - n]);
    let mut gd = vec![b, 1];
    gd.extend(&p.out);
    let gc = cx.f.reshape(gc, &gd);
    let (count, empty) = avg_divisor(cx, &p, &sp, a.bool(6)?, divisor, acc, &gd);
    let mut q = cx.f.div(gc, count);
    if let Some(empty) = empty {
        let zeros = cx.f.full_like(q, 0.0);
        q = cx.f.select(empty, zeros, q);
    }
    // Spread each window's share over the window: a transposed convolution
    // by a kernel of ones, cropped to the input.
    let mut kd = vec![1, 1];
    kd.extend(&p.kernel);
    let ones = cx.f.splat(&Ty::new(acc, &kd), 1.0);
    let pad: Vec<(i64, i64)> = (0..n)
        .map(|i| {
            let k = p.kernel[i];
            let lo = k - 1 - p.padding[i];
            let extra = sp[i] - ((p.out[i] - 1) * p.stride[i] - 2 * p.padding[i] + k);
            (lo, lo + extra)
        })
        .collect();
    let mut yd = vec![b, 1];
    yd.extend(&sp);
    let y = cx.f.convolution(q, ones, &vec![1; n], &pad, &p.stride, &vec![1; n], 1, &yd);
    let y = cx.f.reshape(y, &xd);
    Ok(vec![cx.f.convert(y, d)])
}

fn register_pooling(r: &mut Builder) {
    r.op(
        "aten::max_pool2d_with_indices_backward(Tensor grad_output, Tensor self, int[2] kernel_size, int[2] stride, \
         int[2] padding, int[2] dilation, bool ceil_mode, Tensor indices) -> Tensor",
        |cx, a| max_pool_backward(cx, a, 2),
    );
    r.op(
        "aten::max_pool3d_with_indices_backward(Tensor grad_output, Tensor self, int[3] kernel_size, int[3] stride, \
         int[3] padding, int[3] dilation, bool ceil_mode, Tensor indices) -> Tensor",
        |cx, a| max_pool_backward(cx, a, 3),
    );
    r.op(
        "aten::avg_pool2d_backward(Tensor grad_output, Tensor self, int[2] kernel_size, int[2] stride, int[2] padding, \
         bool ceil_mode, bool count_include_pad, int? divisor_override) -> Tensor",
        |cx, a| avg_pool_backward(cx, a, 2),
    );
    r.op(
        "aten::avg_pool3d_backward(Tensor grad_output, Tensor self, int[3] kernel_size, int[3] stride, int[3] padding, \
         bool ceil_mode, bool count_include_pad, int? divisor_override) -> Tensor",
        |cx, a| avg_pool_backward(cx, a, 3),
    );
}

// --------------------------------------------------------- adaptive pooling

/// The `[out, n]` matrix averaging adaptive-pooling windows: window `i`
/// covers `[floor(i n / out), ceil((i + 1) n / out))`.
fn adaptive_matrix(cx: &mut Cx, n: i64, out: i64, elem: Elem) -> V {
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
fn apply_matrices(cx: &mut Cx, x: V, mats: &[V], contract: usize) -> V {
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
fn adaptive_setup(cx: &mut Cx, x: V, out: &[i64], k: usize, elem: Elem) -> Result<Vec<V>> {
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

fn adaptive_avg_pool(cx: &mut Cx, a: &Args, k: usize) -> Result<Vec<V>> {
    let x = a.tensor(0)?;
    let d = require_float(cx, x, &format!("adaptive_avg_pool{k}d"))?;
    let xc = up(cx, x);
    let mats = adaptive_setup(cx, x, a.ints(1)?, k, d.opmath().into())?;
    let y = apply_matrices(cx, xc, &mats, 1);
    Ok(vec![cx.f.convert(y, d)])
}

/// `_adaptive_avg_pool{k}d_backward`: the gradient through the averaging
/// matrices, transposed.
fn adaptive_avg_pool_backward(cx: &mut Cx, a: &Args, k: usize) -> Result<Vec<V>> {
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

fn register_adaptive(r: &mut Builder) {
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
