//! Softmax and log-softmax, forward and backward (`_softmax`,
//! `_log_softmax`, `_softmax_backward_data`, `_log_softmax_backward_data`).
//! Half-precision inputs compute in f32 and round once, as PyTorch's CPU
//! kernels do.

use crate::bail_op;
use crate::dtype::DType;
use crate::error::Result;
use crate::hlo::{Reducer, V};
use crate::ops::common::float_of;
use crate::ops::{Args, Builder, Cx};
use crate::shape::{self, fmt};

use super::*;

pub(super) fn register(r: &mut Builder) {
    register_softmax(r);
    r.op(
        "aten::_softmax_backward_data(Tensor grad_output, Tensor output, int dim, ScalarType input_dtype) -> Tensor",
        |cx, a| softmax_backward(cx, a, false),
    );
    r.op(
        "aten::_log_softmax_backward_data(Tensor grad_output, Tensor output, int dim, ScalarType input_dtype) -> Tensor",
        |cx, a| softmax_backward(cx, a, true),
    );
}

/// `softmax(x)` or `log_softmax(x)` along `dim`, computed in `out`'s opmath
/// type (subtracting the max for stability) and rounded to `out`.
pub(super) fn softmax(cx: &mut Cx, x: V, dim: i64, log: bool, out: DType) -> Result<V> {
    let name = if log { "log_softmax" } else { "softmax" };
    if !out.is_float() {
        bail_op!(&*cx.op, "\"{name}\" not implemented for '{out}'");
    }
    let in_dims = cx.dims(x);
    let d = shape::wrap_dim(&cx.op, dim, in_dims.len())?;
    // A 0-dim tensor is softmaxed as a single element.
    let dims: Vec<i64> = if in_dims.is_empty() { vec![1] } else { in_dims.clone() };
    // `softmax(x, dtype=...)` first casts the input to `dtype` (rounding).
    let xc = cx.f.convert(x, out);
    let xc = cx.f.convert(xc, out.opmath());
    let xc = cx.f.reshape(xc, &dims);
    let elem = cx.ty(xc).elem;
    let init = lowest(&mut cx.f, elem);
    let m = cx.f.reduce(xc, init, &[d], Reducer::Max);
    let m = expand_reduced(cx, m, &dims, &[d]);
    let shifted = cx.f.sub(xc, m);
    let e = cx.f.unary("stablehlo.exponential", shifted);
    let s = sum(cx, e, &[d]);
    let s = expand_reduced(cx, s, &dims, &[d]);
    let y = if log {
        let ls = cx.f.unary("stablehlo.log", s);
        cx.f.sub(shifted, ls)
    } else {
        cx.f.div(e, s)
    };
    let y = cx.f.reshape(y, &in_dims);
    Ok(cx.f.convert(y, out))
}

/// The result dtype of `_softmax(x, dim, half_to_float)`.
pub(super) fn softmax_out(cx: &Cx, x: V, half_to_float: bool) -> Result<DType> {
    let d = cx.dtype(x);
    if !half_to_float {
        return Ok(d);
    }
    if !matches!(d, DType::F16 | DType::BF16) {
        bail_op!(&*cx.op, "conversion is supported for Half and BFloat16 types only, got {d}");
    }
    Ok(DType::F32)
}

pub(super) fn register_softmax(r: &mut Builder) {
    for (name, log) in [("softmax", false), ("log_softmax", true)] {
        r.op(&format!("aten::_{name}(Tensor self, int dim, bool half_to_float) -> Tensor"), move |cx, a| {
            let x = a.tensor(0)?;
            let out = softmax_out(cx, x, a.bool(2)?)?;
            Ok(vec![softmax(cx, x, a.int(1)?, log, out)?])
        });
        r.op(&format!("aten::{name}.int(Tensor self, int dim, ScalarType? dtype=None) -> Tensor"), move |cx, a| {
            let x = a.tensor(0)?;
            let out = a.opt_dtype(2).unwrap_or_else(|| cx.dtype(x));
            Ok(vec![softmax(cx, x, a.int(1)?, log, out)?])
        });
    }
}

/// The backward of `softmax` / `log_softmax` along `dim` from the forward
/// output, rounded to `input_dtype`.
pub(super) fn softmax_backward(cx: &mut Cx, a: &Args, log: bool) -> Result<Vec<V>> {
    let (g, out) = (a.tensor(0)?, a.tensor(1)?);
    let input_dtype = a.opt_dtype(3).ok_or_else(|| cx.err("input_dtype is required"))?;
    let dims = cx.dims(g);
    if cx.dims(out) != dims {
        bail_op!(&*cx.op, "grad_output of size {} does not match output of size {}", fmt(&dims), fmt(&cx.dims(out)));
    }
    let d = shape::wrap_dim(&cx.op, a.int(2)?, dims.len())?;
    let calc: Vec<i64> = if dims.is_empty() { vec![1] } else { dims.clone() };
    let od = float_of(cx.dtype(g)).opmath();
    let gc = cx.f.convert(g, od);
    let gc = cx.f.reshape(gc, &calc);
    let oc = cx.f.convert(out, od);
    let oc = cx.f.reshape(oc, &calc);
    let y = if log {
        // grad - exp(out) * sum(grad)
        let s = sum(cx, gc, &[d]);
        let s = expand_reduced(cx, s, &calc, &[d]);
        let e = cx.f.unary("stablehlo.exponential", oc);
        let es = cx.f.mul(e, s);
        cx.f.sub(gc, es)
    } else {
        // out * (grad - sum(grad * out))
        let go = cx.f.mul(gc, oc);
        let s = sum(cx, go, &[d]);
        let s = expand_reduced(cx, s, &calc, &[d]);
        let diff = cx.f.sub(gc, s);
        cx.f.mul(oc, diff)
    };
    let y = cx.f.reshape(y, &dims);
    Ok(vec![cx.f.convert(y, input_dtype)])
}
