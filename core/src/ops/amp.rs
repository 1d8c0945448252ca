//! The kernels of PyTorch's automatic mixed precision (`torch.amp.GradScaler`):
//! `_amp_foreach_non_finite_check_and_unscale_` and `_amp_update_scale_`,
//! and their functional forms (what AOTAutograd traces).
//!
//! The arithmetic follows PyTorch's CPU and CUDA kernels
//! (`AmpGradScalerKernels.cpp`, `AmpKernels.cu`): gradients are multiplied by
//! `inv_scale` in their opmath and rounded once; the scale is multiplied by
//! the (double) growth or backoff factor in f64 and rounded to f32, and a
//! grown scale that is not finite in f32 is not taken. Every decision
//! (found_inf, growth at the interval) is made inside the program, so a
//! training step needs no host read.

use crate::bail_op;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::hlo::{Cmp, Elem, Reducer, Ty, V};

use super::{Args, Builder, Cx};

pub fn register(r: &mut Builder) {
    r.op(
        "aten::_amp_foreach_non_finite_check_and_unscale_(Tensor(a!)[] self, Tensor(b!) found_inf, \
         Tensor inv_scale) -> ()",
        unscale,
    );
    r.op(
        "aten::_amp_foreach_non_finite_check_and_unscale(Tensor[] self, Tensor found_inf, Tensor inv_scale) \
         -> (Tensor[] self_out, Tensor found_inf_out)",
        unscale,
    );
    r.op(
        "aten::_amp_update_scale_(Tensor(a!) self, Tensor(b!) growth_tracker, Tensor found_inf, \
         float scale_growth_factor, float scale_backoff_factor, int growth_interval) -> Tensor(a!)",
        update_scale,
    );
    r.op(
        "aten::_amp_update_scale(Tensor self, Tensor growth_tracker, Tensor found_inf, float scale_growth_factor, \
         float scale_backoff_factor, int growth_interval) -> (Tensor, Tensor growth_tracker_out)",
        update_scale,
    );
}

/// A one-element tensor of `dtype` as a rank-0 value, with PyTorch's checks
/// and messages ("found_inf must be a float tensor.").
fn one_element(cx: &mut Cx, t: V, what: &str, dtype: DType, kind: &str) -> Result<V> {
    if cx.ty(t).numel() != 1 {
        bail_op!(&*cx.op, "{what} must be a 1-element tensor.");
    }
    if cx.dtype(t) != dtype {
        bail_op!(&*cx.op, "{what} must be a{kind} tensor.");
    }
    Ok(cx.f.reshape(t, &[]))
}

/// Both unscale forms: each gradient times `inv_scale`, then `found_inf`
/// set to 1 if any element of any gradient (before unscaling) is inf or NaN,
/// else left as it was. Gives the new gradients, then the new `found_inf`.
fn unscale(cx: &mut Cx, a: &Args) -> Result<Vec<V>> {
    let grads = a.tensors(0)?.to_vec();
    let found_inf = a.tensor(1)?;
    if grads.is_empty() {
        // PyTorch returns before checking anything else.
        return Ok(vec![found_inf]);
    }
    let inv = a.tensor(2)?;
    let inv = one_element(cx, inv, "inv_scale", DType::F32, " float")?;
    one_element(cx, found_inf, "found_inf", DType::F32, " float")?;
    let mut out = Vec::with_capacity(grads.len() + 1);
    let mut any: Option<V> = None;
    for &g in &grads {
        let d = cx.dtype(g);
        if !d.is_float() {
            return Err(Error::UnsupportedDType {
                op: cx.op.to_string(),
                dtype: d.to_string(),
                detail: " (\"_amp_foreach_non_finite_check_and_unscale\" needs floating point gradients)".into(),
            });
        }
        let dims = cx.dims(g);
        let n = cx.ty(g).numel();
        // Checked in the gradient's own dtype: inf and NaN survive any widening.
        let flat = cx.f.reshape(g, &[n]);
        let finite = cx.f.unary_to("stablehlo.is_finite", flat, Elem::Pred);
        let bad = cx.f.not(finite);
        let init = cx.f.constant(Elem::Pred, 0.0);
        let bad = cx.f.reduce(bad, init, &[0], Reducer::Or);
        any = Some(match any {
            Some(acc) => cx.f.or(acc, bad),
            None => bad,
        });
        let o = d.opmath();
        let gv = cx.f.convert(g, o);
        let s = cx.f.convert(inv, o);
        let s = cx.f.broadcast_to(s, &dims);
        let u = cx.f.mul(gv, s);
        out.push(cx.f.convert(u, d));
    }
    let any = any.expect("at least one gradient");
    let dims = cx.dims(found_inf);
    let any = cx.f.broadcast_to(any, &dims);
    let one = cx.f.splat(&Ty::new(Elem::F32, &dims), 1.0);
    out.push(cx.f.select(any, one, found_inf));
    Ok(out)
}

/// Both update forms (`amp_update_scale_cuda_kernel`): gives the new scale,
/// then the new growth tracker.
fn update_scale(cx: &mut Cx, a: &Args) -> Result<Vec<V>> {
    let (scale_t, tracker_t, found_t) = (a.tensor(0)?, a.tensor(1)?, a.tensor(2)?);
    let (growth, backoff, interval) = (a.float(3)?, a.float(4)?, a.int(5)?);
    let scale = one_element(cx, scale_t, "current_scale", DType::F32, " float")?;
    let tracker = one_element(cx, tracker_t, "growth_tracker", DType::I32, "n int")?;
    let found = one_element(cx, found_t, "found_inf", DType::F32, " float")?;

    // `if (*found_inf)`: any nonzero value, NaN included.
    let zero = cx.f.constant(Elem::F32, 0.0);
    let found = cx.f.compare(Cmp::Ne, found, zero);
    // scale * factor in double, stored as float.
    let times = |cx: &mut Cx, factor: f64| {
        let s = cx.f.convert(scale, Elem::F64);
        let k = cx.f.constant(Elem::F64, factor);
        let p = cx.f.mul(s, k);
        cx.f.convert(p, Elem::F32)
    };
    let backed_off = times(cx, backoff);
    let grown = times(cx, growth);
    // `successful == growth_interval`, the int promoted to int64.
    let one = cx.f.splat_int(&Ty::scalar(Elem::I32), 1);
    let successful = cx.f.add(tracker, one);
    let wide = cx.f.convert(successful, Elem::I64);
    let interval = cx.f.splat_int(&Ty::scalar(Elem::I64), interval);
    let at_interval = cx.f.compare(Cmp::Eq, wide, interval);
    let grown_finite = cx.f.unary_to("stablehlo.is_finite", grown, Elem::Pred);
    let grow = cx.f.and(at_interval, grown_finite);
    let kept = cx.f.select(grow, grown, scale);
    let new_scale = cx.f.select(found, backed_off, kept);
    let reset = cx.f.splat_int(&Ty::scalar(Elem::I32), 0);
    let counted = cx.f.select(at_interval, reset, successful);
    let new_tracker = cx.f.select(found, reset, counted);

    let (sd, td) = (cx.dims(scale_t), cx.dims(tracker_t));
    Ok(vec![cx.f.reshape(new_scale, &sd), cx.f.reshape(new_tracker, &td)])
}
