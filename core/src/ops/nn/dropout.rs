//! Dropout: `native_dropout` and its backward, the feature and alpha
//! variants. The probability is a runtime argument, so changing it never
//! recompiles.

use crate::bail_op;
use crate::dtype::DType;
use crate::hlo::{Cmp, Elem, Ty};
use crate::ops::common::up;
use crate::ops::{bound_f64, Builder};
use crate::shape;

use super::*;

pub(super) fn register(r: &mut Builder) {
    register_dropout(r);
}

pub(super) fn register_dropout(r: &mut Builder) {
    // `p` is a runtime value (a dropout schedule does not recompile), so its
    // range is checked at the call.
    r.op("aten::native_dropout(Tensor input, float p, bool? train) -> (Tensor, Tensor)", |cx, a| {
        let x = a.tensor(0)?;
        let train = a.opt_bool(2).unwrap_or(true);
        let d = require_float(cx, x, "native_dropout")?;
        let dims = cx.dims(x);
        let n = shape::numel(&dims);
        if !train || n == 0 {
            let keep = cx.f.splat(&Ty::new(Elem::Pred, &dims), 1.0);
            // The identity (PyTorch returns a clone; a read is already a new value).
            return Ok(vec![x, keep]);
        }
        let p = a.runtime_f64(cx, 1)?;
        // Uniform [0, 1) floats from the top 24 bits, kept with probability
        // 1 - p (all of them when p is 0: u < 1 always holds).
        let state = cx.rng_state();
        let (_, bits) = cx.f.rng_bit_generator(state, &Ty::new(Elem::U32, &[n]));
        let eight = cx.f.splat_int(&Ty::new(Elem::U32, &[n]), 8);
        let top = cx.f.binary("stablehlo.shift_right_logical", bits, eight);
        let u = cx.f.convert(top, Elem::F32);
        let scale24 = cx.f.splat(&Ty::new(Elem::F32, &[n]), 1.0 / (1u64 << 24) as f64);
        let u = cx.f.mul(u, scale24);
        let one = cx.f.constant(Elem::F64, 1.0);
        let keep_p64 = cx.f.sub(one, p);
        let keep_p = cx.f.convert(keep_p64, Elem::F32);
        let keep_p = cx.f.broadcast_to(keep_p, &[n]);
        let keep = cx.f.compare(Cmp::Lt, u, keep_p);
        let keep = cx.f.reshape(keep, &dims);
        let xc = up(cx, x);
        let e = cx.ty(xc).elem;
        let kf = cx.f.convert(keep, e);
        // 1 / (1 - p) in f64, as the host computes it; 0 when p is 1.
        let inv = cx.f.div(one, keep_p64);
        let zero = cx.f.constant(Elem::F64, 0.0);
        let all_dropped = cx.f.compare(Cmp::Eq, keep_p64, zero);
        let scale = cx.f.select(all_dropped, zero, inv);
        let scale = cx.f.convert(scale, e);
        let sv = cx.f.broadcast_to(scale, &dims);
        let y = cx.f.mul(xc, kf);
        let y = cx.f.mul(y, sv);
        Ok(vec![cx.f.convert(y, d), keep])
    })
    .runtime_floats(&["p"])
    .check(|bound| match bound_f64(bound, 1) {
        Some(p) if !(0.0..=1.0).contains(&p) => Err(format!("dropout probability has to be between 0 and 1, but got {p}")),
        _ => Ok(()),
    });
    // grad * mask * scale, in PyTorch's order (the mask first).
    r.op("aten::native_dropout_backward(Tensor grad_output, Tensor mask, float scale) -> Tensor", |cx, a| {
        let (g, mask) = (a.tensor(0)?, a.tensor(1)?);
        let d = require_float(cx, g, "native_dropout_backward")?;
        if cx.dtype(mask) != DType::Bool {
            bail_op!(&*cx.op, "Mask should be Bool Scalar Type {}", cx.dtype(mask));
        }
        let dims = shape::broadcast(&cx.op, &cx.dims(g), &cx.dims(mask))?;
        let gc = up(cx, g);
        let gc = cx.f.broadcast_to(gc, &dims);
        let m = cx.f.convert(mask, cx.ty(gc).elem);
        let m = cx.f.broadcast_to(m, &dims);
        let y = cx.f.mul(gc, m);
        let sv = cx.f.full_like(y, a.float(2)?);
        let y = cx.f.mul(y, sv);
        Ok(vec![cx.f.convert(y, d)])
    });
}
