//! Operations on the parts of a floating-point number: `copysign`,
//! `fmin` / `fmax` (NaN-ignoring), `nextafter`, `frexp` and
//! `round(decimals=)`. Results follow PyTorch's CPU kernels: `copysign`
//! gives a float for integer inputs, `fmin` / `fmax` keep the promoted
//! dtype, `nextafter` steps in the operands' own dtype.

use crate::bail_op;
use crate::dtype::DType;
use crate::hlo::{Cmp, Elem, Func, V};

use super::common::{float_of, prepare, result_dtype, Ew};
use super::{Builder, Cx};

pub fn register(r: &mut Builder) {
    for (overload, ty) in [("Tensor", "Tensor"), ("Scalar", "Scalar")] {
        r.op_and_inplace(&format!("aten::copysign.{overload}(Tensor self, {ty} other) -> Tensor"), |cx, a| {
            let xs = [Ew::arg(a, 0)?, Ew::arg(a, 1)?];
            let d = float_of(result_dtype(cx, &xs));
            let (vs, _) = prepare(cx, &xs, d.opmath())?;
            let y = copysign(&mut cx.f, vs[0], vs[1]);
            Ok(vec![cx.f.convert(y, d)])
        });
    }
    for (name, max) in [("fmax", true), ("fmin", false)] {
        r.op(&format!("aten::{name}(Tensor self, Tensor other) -> Tensor"), move |cx, a| {
            let xs = [Ew::arg(a, 0)?, Ew::arg(a, 1)?];
            let d = result_dtype(cx, &xs);
            if d == DType::Bool {
                bail_op!(&*cx.op, "\"{name}_cpu\" not implemented for 'Bool'");
            }
            let (vs, _) = prepare(cx, &xs, d)?;
            let (x, y) = (vs[0], vs[1]);
            let f = &mut cx.f;
            let m = if max { f.max(x, y) } else { f.min(x, y) };
            if !d.is_float() {
                return Ok(vec![m]);
            }
            // A NaN operand gives the other one (NaN only if both are).
            let x_nan = f.compare(Cmp::Ne, x, x);
            let y_nan = f.compare(Cmp::Ne, y, y);
            let m = f.select(x_nan, y, m);
            Ok(vec![f.select(y_nan, x, m)])
        });
    }
    r.op_and_inplace("aten::nextafter(Tensor self, Tensor other) -> Tensor", |cx, a| {
        let xs = [Ew::arg(a, 0)?, Ew::arg(a, 1)?];
        let d = result_dtype(cx, &xs);
        if !d.is_float() {
            bail_op!(&*cx.op, "\"nextafter_cpu\" not implemented for '{d}'");
        }
        // In the dtype itself: the next representable value is the dtype's.
        let (vs, _) = prepare(cx, &xs, d)?;
        Ok(vec![cx.f.binary("chlo.next_after", vs[0], vs[1])])
    });
    r.op("aten::frexp.Tensor(Tensor self) -> (Tensor mantissa, Tensor exponent)", |cx, a| {
        let x = a.tensor(0)?;
        let d = cx.dtype(x);
        if !d.is_float() {
            bail_op!(&*cx.op, "torch.frexp() only supports floating-point dtypes");
        }
        let (m, e) = frexp(cx, x);
        Ok(vec![cx.f.convert(m, d), e])
    });
    r.op_and_inplace("aten::round.decimals(Tensor self, *, int decimals) -> Tensor", |cx, a| {
        let x = a.tensor(0)?;
        let decimals = a.int(1)?;
        let d = cx.dtype(x);
        if !d.is_float() {
            if decimals != 0 {
                bail_op!(&*cx.op, "round_cpu not implemented for '{d}' with decimals != 0");
            }
            return Ok(vec![x]);
        }
        // As PyTorch: 10^|decimals| in the dtype's opmath, then
        // nearbyint(x * p) / p, or nearbyint(x / p) * p for negative decimals.
        let xc = cx.f.convert(x, d.opmath());
        let p = cx.f.full_like(xc, 10f64.powi(decimals.unsigned_abs().min(400) as i32));
        let f = &mut cx.f;
        let y = if decimals >= 0 {
            let s = f.mul(xc, p);
            let r = f.unary("stablehlo.round_nearest_even", s);
            f.div(r, p)
        } else {
            let s = f.div(xc, p);
            let r = f.unary("stablehlo.round_nearest_even", s);
            f.mul(r, p)
        };
        Ok(vec![cx.f.convert(y, d)])
    });
}

/// `|a|` with the sign bit of `b` (so `-0.0` and negative NaNs count as
/// negative).
fn copysign(f: &mut Func, a: V, b: V) -> V {
    let negative = f.signbit(b);
    let mag = f.unary("stablehlo.abs", a);
    let neg = f.neg(mag);
    f.select(negative, neg, mag)
}

/// `x = m 2^e` with `0.5 <= |m| < 1` (int32 `e`), and `(x, 0)` for zero,
/// infinities and NaN, as C's `frexp`. Read from the bits (f32, or f64 for
/// f64; half types widen to f32 exactly), so that subnormal inputs work
/// where the device flushes them to zero in arithmetic.
fn frexp(cx: &mut Cx, x: V) -> (V, V) {
    let f64_ = cx.dtype(x) == DType::F64;
    let (wide, int, bits_n, mant_n, bias) =
        if f64_ { (Elem::F64, Elem::I64, 64i64, 52i64, 1023i64) } else { (Elem::F32, Elem::I32, 32, 23, 127) };
    let xc = cx.f.convert(x, wide);
    let f = &mut cx.f;
    let b = f.bitcast_convert(xc, int);
    let k = |f: &mut Func, v: i64| f.splat_int(&f.ty(b).clone(), v);
    let mant_mask = k(f, (1i64 << mant_n) - 1);
    let exp_mask = k(f, (1i64 << (bits_n - 1 - mant_n)) - 1);
    let sign_mask = k(f, if f64_ { i64::MIN } else { i32::MIN as i64 });
    let mant_shift = k(f, mant_n);
    let raw_exp = f.binary("stablehlo.shift_right_logical", b, mant_shift);
    let raw_exp = f.and(raw_exp, exp_mask);
    let mant = f.and(b, mant_mask);
    let sign = f.and(b, sign_mask);
    // Normal: e = raw - (bias - 1), mantissa bits kept, exponent bits of 0.5.
    let half_exp = k(f, bias - 1);
    let e_normal = f.sub(raw_exp, half_exp);
    // Subnormal: the top set bit of the mantissa, at p, gives
    // e = p - (bias - 2 + mant_n), and the bits below it move up to the top.
    let lz = f.unary("stablehlo.count_leading_zeros", mant);
    let top = k(f, bits_n - 1);
    let p = f.sub(top, lz);
    let sub_bias = k(f, bias - 2 + mant_n);
    let e_sub = f.sub(p, sub_bias);
    let shift = f.sub(mant_shift, p);
    let mant_sub = f.binary("stablehlo.shift_left", mant, shift);
    let mant_sub = f.and(mant_sub, mant_mask);
    let zero = k(f, 0);
    let is_sub = f.compare(Cmp::Eq, raw_exp, zero);
    let e = f.select(is_sub, e_sub, e_normal);
    let m_bits = f.select(is_sub, mant_sub, mant);
    let half_bits = f.binary("stablehlo.shift_left", half_exp, mant_shift);
    let m_bits = f.or(m_bits, half_bits);
    let m_bits = f.or(m_bits, sign);
    let m = f.bitcast_convert(m_bits, wide);
    // Zero, infinities and NaN: themselves, exponent 0.
    let is_zero_mant = f.compare(Cmp::Eq, mant, zero);
    let is_zero = f.and(is_sub, is_zero_mant);
    let is_special = f.compare(Cmp::Eq, raw_exp, exp_mask);
    let keep = f.or(is_zero, is_special);
    let m = f.select(keep, xc, m);
    let e = f.select(keep, zero, e);
    (m, f.convert(e, Elem::I32))
}
