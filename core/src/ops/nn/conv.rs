//! Convolution, regular and transposed, any spatial rank, groups and
//! dilation, and its backward (input, weight and bias gradients).

use crate::bail_op;
use crate::error::Result;
use crate::hlo::V;
use crate::ops::common::up;
use crate::ops::{Args, Builder, Cx};
use crate::shape::fmt;

use super::*;

pub(super) fn register(r: &mut Builder) {
    register_convolution(r);
    register_convolution_backward(r);
}

/// Checked convolution parameters, expanded to one entry per spatial dim.
#[derive(Clone)]
pub(super) struct ConvParams {
    stride: Vec<i64>,
    padding: Vec<i64>,
    dilation: Vec<i64>,
    output_padding: Vec<i64>,
    transposed: bool,
    groups: i64,
}

/// The parameters of a convolution whose `stride` is argument `at` (then
/// padding, dilation, transposed, output_padding and groups).
pub(super) fn conv_params(cx: &Cx, a: &Args, n: usize, at: usize) -> Result<ConvParams> {
    let p = ConvParams {
        stride: expand_param(cx, "stride", a.ints(at)?, n)?,
        padding: expand_param(cx, "padding", a.ints(at + 1)?, n)?,
        dilation: expand_param(cx, "dilation", a.ints(at + 2)?, n)?,
        transposed: a.bool(at + 3)?,
        output_padding: expand_param(cx, "output_padding", a.ints(at + 4)?, n)?,
        groups: a.int(at + 5)?,
    };
    if p.stride.iter().any(|&s| s <= 0) {
        bail_op!(&*cx.op, "non-positive stride is not supported");
    }
    if p.padding.iter().any(|&s| s < 0) {
        bail_op!(&*cx.op, "negative padding is not supported");
    }
    if p.output_padding.iter().any(|&s| s < 0) {
        bail_op!(&*cx.op, "negative output_padding is not supported");
    }
    if p.dilation.iter().any(|&s| s <= 0) {
        bail_op!(&*cx.op, "dilation should be greater than zero");
    }
    if p.groups <= 0 {
        bail_op!(&*cx.op, "non-positive groups is not supported");
    }
    if p.transposed {
        let ok = (0..n).all(|i| p.output_padding[i] < p.stride[i] || p.output_padding[i] < p.dilation[i]);
        if !ok {
            bail_op!(
                &*cx.op,
                "output padding must be smaller than either stride or dilation, but got output_padding={}, \
                 stride={}, dilation={}",
                fmt(&p.output_padding),
                fmt(&p.stride),
                fmt(&p.dilation)
            );
        }
    }
    // A regular convolution ignores output_padding, as PyTorch does.
    Ok(p)
}

/// The convolution (or, with `p.transposed`, the transposed convolution)
/// of `xc: [N, C, sp...]` by `wc` in their (opmath) type, without bias.
pub(super) fn conv_core(cx: &mut Cx, xc: V, wc: V, p: &ConvParams) -> Result<V> {
    let (xd, wd) = (cx.dims(xc), cx.dims(wc));
    let n = wd.len() - 2;
    let g = p.groups;
    let out_ch = if p.transposed { wd[1] * g } else { wd[0] };
    let ks: Vec<i64> = (0..n).map(|i| p.dilation[i] * (wd[i + 2] - 1) + 1).collect();
    let sp: Vec<i64> = xd[2..].to_vec();
    let mut out_dims = vec![xd[0], out_ch];
    Ok(if !p.transposed {
        let padded: Vec<i64> = (0..n).map(|i| sp[i] + 2 * p.padding[i]).collect();
        if (0..n).any(|i| padded[i] < ks[i]) {
            let j = |v: &[i64]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(" x ");
            bail_op!(
                &*cx.op,
                "Calculated padded input size per channel: ({}). Kernel size: ({}). Kernel size can't be greater \
                 than actual input size",
                j(&padded),
                j(&ks)
            );
        }
        out_dims.extend((0..n).map(|i| (padded[i] - ks[i]) / p.stride[i] + 1));
        let pad: Vec<(i64, i64)> = p.padding.iter().map(|&q| (q, q)).collect();
        cx.f.convolution(xc, wc, &p.stride, &pad, &vec![1; n], &p.dilation, g, &out_dims)
    } else {
        // The gradient of a convolution: dilate the input by the stride,
        // pad by the dilated kernel extent minus the padding, and convolve
        // with the spatially flipped kernel, its in/out channels swapped
        // within each group.
        let (cin_g, cout_g) = (wd[0] / g, wd[1]);
        let mut gdims = vec![g, cin_g, cout_g];
        gdims.extend_from_slice(&wd[2..]);
        let wg = cx.f.reshape(wc, &gdims);
        let mut perm = vec![0, 2, 1];
        perm.extend(3..3 + n);
        let wg = cx.f.transpose(wg, &perm);
        let mut odims = vec![g * cout_g, cin_g];
        odims.extend_from_slice(&wd[2..]);
        let wt = cx.f.reshape(wg, &odims);
        let flip: Vec<usize> = (2..2 + n).collect();
        let wt = cx.f.reverse(wt, &flip);
        let pad: Vec<(i64, i64)> =
            (0..n).map(|i| (ks[i] - 1 - p.padding[i], ks[i] - 1 - p.padding[i] + p.output_padding[i])).collect();
        out_dims.extend((0..n).map(|i| (sp[i] - 1) * p.stride[i] - 2 * p.padding[i] + ks[i] + p.output_padding[i]));
        if out_dims[2..].iter().any(|&s| s <= 0) {
            bail_op!(
                &*cx.op,
                "Given input size per channel {}, the calculated output size per channel {} is too small",
                fmt(&sp),
                fmt(&out_dims[2..])
            );
        }
        cx.f.convolution(xc, wt, &vec![1; n], &pad, &p.stride, &p.dilation, g, &out_dims)
    })
}

pub(super) fn convolution(cx: &mut Cx, a: &Args) -> Result<Vec<V>> {
    let (x, w, bias) = (a.tensor(0)?, a.tensor(1)?, a.opt_tensor(2));
    let (xd, wd) = (cx.dims(x), cx.dims(w));
    if wd.len() < 3 || wd.len() > 5 {
        bail_op!(
            &*cx.op,
            "expected a 3-, 4- or 5-dimensional weight (1-, 2- or 3-d convolution), but got weight of size {}",
            fmt(&wd)
        );
    }
    let n = wd.len() - 2;
    if xd.len() != wd.len() {
        bail_op!(
            &*cx.op,
            "Expected {}-dimensional input for {}-dimensional weight {}, but got {}-dimensional input of size {} instead",
            wd.len(),
            wd.len(),
            fmt(&wd),
            xd.len(),
            fmt(&xd)
        );
    }
    let p = conv_params(cx, a, n, 3)?;
    let g = p.groups;
    // Channels: weight is [out, in/g, k...] or, transposed, [in, out/g, k...].
    let (in_ch, out_ch) = if p.transposed { (wd[0], wd[1] * g) } else { (wd[1] * g, wd[0]) };
    if xd[1] != in_ch {
        let given = if p.transposed { "transposed=1".to_string() } else { format!("groups={g}") };
        bail_op!(
            &*cx.op,
            "Given {given}, weight of size {}, expected input{} to have {in_ch} channels, but got {} channels instead",
            fmt(&wd),
            fmt(&xd),
            xd[1]
        );
    }
    if wd[0] % g != 0 {
        bail_op!(
            &*cx.op,
            "Given groups={g}, expected weight to be divisible by {g} at dimension 0, but got weight of size {} instead",
            fmt(&wd)
        );
    }
    if let Some(b) = bias {
        let bd = cx.dims(b);
        if bd.len() != 1 || bd[0] != out_ch {
            bail_op!(
                &*cx.op,
                "Given weight of size {}, expected bias to be 1-dimensional with {out_ch} elements, but got bias of size {} instead",
                fmt(&wd),
                fmt(&bd)
            );
        }
    }
    let d = cx.dtype(x);
    for (t, what) in [(Some(w), "weight"), (bias, "bias")] {
        if let Some(t) = t {
            if cx.dtype(t) != d {
                bail_op!(&*cx.op, "Input type ({d}) and {what} type ({}) should be the same", cx.dtype(t));
            }
        }
    }
    require_float(cx, x, "convolution")?;
    let xc = up(cx, x);
    let wc = up(cx, w);
    let y = conv_core(cx, xc, wc, &p)?;
    let out_dims = cx.dims(y);
    let y = match bias {
        Some(b) => {
            let bc = up(cx, b);
            let bc = cx.f.broadcast_in_dim(bc, &[1], &out_dims);
            cx.f.add(y, bc)
        }
        None => y,
    };
    Ok(vec![cx.f.convert(y, d)])
}

pub(super) fn register_convolution(r: &mut Builder) {
    r.op(
        "aten::convolution(Tensor input, Tensor weight, Tensor? bias, SymInt[] stride, SymInt[] padding, \
         SymInt[] dilation, bool transposed, SymInt[] output_padding, SymInt groups) -> Tensor",
        convolution,
    );
    // The backend flags (benchmark, cudnn, tf32) do not change the result.
    r.op(
        "aten::_convolution(Tensor input, Tensor weight, Tensor? bias, SymInt[] stride, SymInt[] padding, \
         SymInt[] dilation, bool transposed, SymInt[] output_padding, SymInt groups, bool benchmark, \
         bool deterministic, bool cudnn_enabled, bool allow_tf32) -> Tensor",
        convolution,
    );
}

/// `1 + s * (n - 1)`: the extent of `n` points `s` apart.
pub(super) fn dilate(n: i64, s: i64) -> i64 {
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
pub(super) fn conv_weight_grad(cx: &mut Cx, inp: V, go: V, p: &ConvParams, wd: &[i64]) -> V {
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

pub(super) fn convolution_backward(cx: &mut Cx, a: &Args) -> Result<Vec<V>> {
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

pub(super) fn register_convolution_backward(r: &mut Builder) {
    r.op(
        "aten::convolution_backward(Tensor grad_output, Tensor input, Tensor weight, SymInt[]? bias_sizes, \
         SymInt[] stride, SymInt[] padding, SymInt[] dilation, bool transposed, SymInt[] output_padding, \
         SymInt groups, bool[3] output_mask) -> (Tensor, Tensor, Tensor)",
        convolution_backward,
    );
}
