//! Sampling beyond the factories of [`super::creation`]: `normal` with
//! tensor means or standard deviations, `random_` (`.from`, `.to`), the
//! samplers `exponential_`, `geometric_`, `log_normal_`, `cauchy_` (with
//! their functional forms), `multinomial` and `poisson`. Every op takes its
//! schema's `Generator? generator`; a lowering asks for draws with
//! [`Cx::rng_state`] and never sees the generator.
//!
//! Continuous samplers compute in f32 (f64 for f64 results) from uniforms
//! in the open interval (0, 1), so no transform meets log(0) or tan(±π/2):
//! an exponential sample is never 0 before rounding to its dtype (as on
//! CUDA) and a geometric one never below 1.
//!
//! Errors that depend on values, not shapes (a negative std element, a
//! probability row that is not a distribution), are device-side checks
//! ([`Cx::check_values`]): the op stays asynchronous and the error surfaces
//! at the next host read, as index errors do.

use crate::bail_op;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::hlo::{Cmp, Elem, Reducer, Ty, V};
use crate::shape;

use super::creation::{check_float, check_std, digits, normal, random_bits, standard_normal, uniform01};
use super::{Args, Builder, Cx};

pub fn register(r: &mut Builder) {
    register_normal(r);
    register_random(r);
    register_samplers(r);
    register_multinomial(r);
    register_poisson(r);
}

// ------------------------------------------------------------------ helpers

/// The element type samples of `d` are computed in.
fn compute_elem(d: DType) -> Elem {
    if d == DType::F64 {
        Elem::F64
    } else {
        Elem::F32
    }
}

/// Uniform samples of `elem` (f32 or f64) in the open interval (0, 1):
/// `(2k + 1) * 2^-digits` for `k` uniform below `2^(digits - 1)`, each exact.
fn uniform_open(cx: &mut Cx, elem: Elem, dims: &[i64]) -> V {
    let digits = if elem == Elem::F64 { 53 } else { 24 };
    let u = uniform01(cx, digits - 1, dims);
    let half_step = cx.f.full_like(u, (-digits as f64).exp2());
    cx.f.add(u, half_step)
}

/// The value of `self` of an in-place sampler, for its dims and dtype.
fn self_of(cx: &Cx, a: &Args) -> Result<(Vec<i64>, DType)> {
    let x = a.tensor(0)?;
    Ok((cx.dims(x), cx.dtype(x)))
}

/// The largest value of compute type `elem` that converts to an integer of
/// dtype `d` without overflow (`max` itself may round up in f32 and f64).
fn int_ceiling(d: DType, elem: Elem) -> f64 {
    let max = int_limits(d).1;
    if elem == Elem::F32 {
        let f = max as f32;
        (if f as i128 > max as i128 { f32::from_bits(f.to_bits() - 1) } else { f }) as f64
    } else {
        let f = max as f64;
        if f as i128 > max as i128 {
            f64::from_bits(f.to_bits() - 1)
        } else {
            f
        }
    }
}

/// The range of an integer (or bool) dtype.
fn int_limits(d: DType) -> (i64, i64) {
    match d {
        DType::Bool => (0, 1),
        DType::U8 => (0, u8::MAX as i64),
        DType::I8 => (i8::MIN as i64, i8::MAX as i64),
        DType::I16 => (i16::MIN as i64, i16::MAX as i64),
        DType::I32 => (i32::MIN as i64, i32::MAX as i64),
        _ => (i64::MIN, i64::MAX),
    }
}

/// The finite range of a float dtype.
fn float_limits(d: DType) -> f64 {
    match d {
        DType::F16 => half::f16::MAX.to_f64(),
        DType::BF16 => half::bf16::MAX.to_f64(),
        DType::F32 => f32::MAX as f64,
        _ => f64::MAX,
    }
}

// ------------------------------------------------------------------- normal

/// `mean + std * z` for standard normal `z`, in `d` (computed in opmath).
/// Elements whose `std` is negative are NaN, and a check reports them.
fn normal_tensors(cx: &mut Cx, mean: Option<V>, std: Option<V>, mean_f: f64, std_f: f64, d: DType) -> Result<V> {
    check_float(cx, d)?;
    let e = compute_elem(d);
    let shapes: Vec<Vec<i64>> = [mean, std].iter().flatten().map(|v| cx.dims(*v)).collect();
    let refs: Vec<&[i64]> = shapes.iter().map(|s| s.as_slice()).collect();
    let dims = shape::broadcast_all(&cx.op, &refs)?;
    let z = standard_normal(cx, &dims, e == Elem::F64);
    let sd = match std {
        Some(s) => {
            let s = cx.f.convert(s, e);
            cx.f.broadcast_to(s, &dims)
        }
        None => cx.f.full_like(z, std_f),
    };
    let mu = match mean {
        Some(m) => {
            let m = cx.f.convert(m, e);
            cx.f.broadcast_to(m, &dims)
        }
        None => cx.f.full_like(z, mean_f),
    };
    let y = cx.f.mul(z, sd);
    let mut y = cx.f.add(y, mu);
    if std.is_some() {
        let zero = cx.f.full_like(sd, 0.0);
        // NaN std fails the check too (it is not >= 0).
        let ok = cx.f.compare(Cmp::Ge, sd, zero);
        let nan = cx.f.full_like(y, f64::NAN);
        y = cx.f.select(ok, y, nan);
        cx.check_values(ok, "normal expects all elements of std >= 0.0");
    }
    Ok(cx.f.convert(y, d))
}

fn register_normal(r: &mut Builder) {
    const G: &str = "*, Generator? generator=None";
    // The result takes the dtype of the tensor mean (of std when only it is
    // a tensor), as PyTorch's `empty_like(mean)`.
    r.op(&format!("aten::normal.Tensor_float(Tensor mean, float std=1, {G}) -> Tensor"), |cx, a| {
        let (mean, std) = (a.tensor(0)?, a.float(1)?);
        check_std(cx, std)?;
        let d = cx.dtype(mean);
        Ok(vec![normal_tensors(cx, Some(mean), None, 0.0, std, d)?])
    });
    r.op(&format!("aten::normal.float_Tensor(float mean, Tensor std, {G}) -> Tensor"), |cx, a| {
        let (mean, std) = (a.float(0)?, a.tensor(1)?);
        let d = cx.dtype(std);
        Ok(vec![normal_tensors(cx, None, Some(std), mean, 1.0, d)?])
    });
    r.op(&format!("aten::normal.Tensor_Tensor(Tensor mean, Tensor std, {G}) -> Tensor"), |cx, a| {
        let (mean, std) = (a.tensor(0)?, a.tensor(1)?);
        let d = cx.dtype(mean);
        Ok(vec![normal_tensors(cx, Some(mean), Some(std), 0.0, 1.0, d)?])
    });
    r.op(
        &format!(
            "aten::normal.float_float(float mean, float std, SymInt[] size, *, Generator? generator=None, {}) -> Tensor",
            super::creation::FACTORY
        ),
        |cx, a| {
            let (mean, std, size) = (a.float(0)?, a.float(1)?, a.ints(2)?);
            super::creation::check_size(cx, size)?;
            let d = a.opt_dtype(4).unwrap_or(DType::DEFAULT_FLOAT);
            Ok(vec![normal(cx, size, d, mean, std)?])
        },
    );
}

// ------------------------------------------------------------------ random_

/// `v` rounded to float dtype `d` and back (as C++ casts do: through f32 for
/// the half types).
fn through_float(v: i64, d: DType) -> i64 {
    match d {
        DType::F16 => half::f16::from_f32(v as f32).to_f32() as i64,
        DType::BF16 => half::bf16::from_f32(v as f32).to_f32() as i64,
        DType::F32 => (v as f32) as i64,
        _ => (v as f64) as i64,
    }
}

/// The step between neighbouring values of float dtype `d` near `v` (for
/// `|v| >= 2^digits`), PyTorch's `1 << (log2(|v|) - digits + 1)`.
fn float_step(v: i64, d: DType) -> i64 {
    let n = 63 - v.unsigned_abs().leading_zeros() as i32;
    1i64 << (n - digits(d) + 1).max(0)
}

/// PyTorch's `update_from`: the smallest `from` that stays `>= from` after
/// rounding to `d`.
fn update_from(from: i64, d: DType) -> i64 {
    let plus_1 = through_float(from.saturating_add(1), d);
    if plus_1 < from {
        plus_1 + float_step(from.saturating_add(1), d)
    } else {
        from
    }
}

/// PyTorch's `update_to`: the largest `to` whose `to - 1` stays `< to`
/// after rounding to `d`.
fn update_to(to: i64, d: DType) -> i64 {
    let minus_1 = through_float(to.saturating_sub(1), d);
    if minus_1 >= to {
        minus_1 - float_step(to.saturating_sub(1), d)
    } else {
        to
    }
}

/// PyTorch's `check_from_to_in_range`: both ends representable in `d`.
fn check_from_to(cx: &Cx, d: DType, from: i64, to_inc: i64) -> Result<()> {
    let (from_ok, to_ok) = if d.is_float() {
        let m = float_limits(d);
        ((-m..=m).contains(&(from as f64)), (-m..=m).contains(&(to_inc as f64)))
    } else {
        let (lo, hi) = int_limits(d);
        ((lo..=hi).contains(&from), (lo..=hi).contains(&to_inc))
    };
    if !from_ok {
        bail_op!(&*cx.op, "from is out of bounds for {d} (from={from})");
    }
    if !to_ok {
        bail_op!(&*cx.op, "to - 1 is out of bounds for {d} (to - 1={to_inc})");
    }
    Ok(())
}

/// The whole of int64: `random_.from(from=int64 min, to=None)`.
const FULL_RANGE: u128 = 1 << 64;

/// `(from, range)` of `random_.from(from, to)` on a tensor of `d`, with
/// PyTorch's checks: `[from, to)`, or `[from, max of d]` without `to` (for
/// floats `2^digits`, the last integer every smaller one is exact below);
/// the range is [`FULL_RANGE`] from int64's min without `to`.
pub(super) fn random_bounds(cx: &Cx, d: DType, from: i64, to: Option<i64>) -> Result<(i64, u128)> {
    match to {
        Some(to) => {
            if from >= to {
                bail_op!(&*cx.op, "random_ expects 'from' to be less than 'to', but got from={from} >= to={to}");
            }
            let (from, to) = if d.is_float() { (update_from(from, d), update_to(to, d)) } else { (from, to) };
            if from >= to {
                bail_op!(
                    &*cx.op,
                    "random_ expects 'from' casted to dtype to be less than 'to' casted to dtype, but got from={from} >= to={to}"
                );
            }
            check_from_to(cx, d, from, to - 1)?;
            Ok((from, (to as i128 - from as i128) as u128))
        }
        None if from != i64::MIN => {
            let (from, to_inc) = if d.is_float() {
                let to_inc = 1i64 << digits(d);
                let from = update_from(from, d);
                if from >= to_inc {
                    bail_op!(
                        &*cx.op,
                        "random_ expects 'from' casted to dtype to be less than or equal to 'to_inc' casted to dtype, but got from={from} > to_inc={to_inc}"
                    );
                }
                (from, to_inc)
            } else {
                (from, int_limits(d).1)
            };
            check_from_to(cx, d, from, to_inc)?;
            Ok((from, (to_inc as i128 - from as i128 + 1) as u128))
        }
        None => {
            if !matches!(d, DType::I64 | DType::F64 | DType::F32 | DType::BF16) {
                return Err(Error::UnsupportedDType {
                    op: cx.op.to_string(),
                    dtype: d.to_string(),
                    detail: " (random_ over the whole int64 range fills int64, float64, float32 and bfloat16 only)".into(),
                });
            }
            Ok((i64::MIN, FULL_RANGE))
        }
    }
}

/// The range of a bare `random_()`: `[0, max]` for integers, `{0, 1}` for
/// bool and `[0, 2^digits]` for floats (every integer there is exact).
fn default_range(d: DType) -> u128 {
    if d.is_float() {
        (1u128 << digits(d)) + 1
    } else {
        int_limits(d).1 as u128 + 1
    }
}

/// `from + (bits mod range)` as `d`, wrapping in int64, PyTorch's
/// `random_from_to`: 32 random bits when the range is below 2^32, else 64;
/// [`FULL_RANGE`] takes the 64 bits as they are.
pub(super) fn random_range(cx: &mut Cx, dims: &[i64], d: DType, from: i64, range: u128) -> V {
    let i64s = Ty::new(Elem::I64, dims);
    if range == FULL_RANGE {
        let bits = random_bits(cx, Elem::U64, dims);
        let v = cx.f.bitcast_convert(bits, Elem::I64);
        return cx.f.convert(v, d);
    }
    let elem = if range >= 1 << 32 { Elem::U64 } else { Elem::U32 };
    let bits = random_bits(cx, elem, dims);
    let bits = cx.f.convert(bits, Elem::U64);
    // Ranges past i64::MAX are spelled through their bit pattern.
    let r = cx.f.splat_int(&i64s, range as u64 as i64);
    let r = cx.f.bitcast_convert(r, Elem::U64);
    let k = cx.f.binary("stablehlo.remainder", bits, r);
    let k = cx.f.bitcast_convert(k, Elem::I64);
    let lo = cx.f.splat_int(&i64s, from);
    let v = cx.f.add(k, lo);
    cx.f.convert(v, d)
}

fn register_random(r: &mut Builder) {
    r.op_and_inplace("aten::random(Tensor self, *, Generator? generator=None) -> Tensor", |cx, a| {
        let (dims, d) = self_of(cx, a)?;
        Ok(vec![random_range(cx, &dims, d, 0, default_range(d))])
    });
    r.op_and_inplace("aten::random.from(Tensor self, int from, int? to, *, Generator? generator=None) -> Tensor", |cx, a| {
        let (dims, d) = self_of(cx, a)?;
        let (from, range) = random_bounds(cx, d, a.int(1)?, a.opt_int(2))?;
        Ok(vec![random_range(cx, &dims, d, from, range)])
    });
    r.op_and_inplace("aten::random.to(Tensor self, int to, *, Generator? generator=None) -> Tensor", |cx, a| {
        let (dims, d) = self_of(cx, a)?;
        let (from, range) = random_bounds(cx, d, 0, Some(a.int(1)?))?;
        Ok(vec![random_range(cx, &dims, d, from, range)])
    });
}

// ----------------------------------------------------------------- samplers

/// Exponential samples of rate `lambd`: `-log(u) / lambd`, never 0.
fn exponential(cx: &mut Cx, dims: &[i64], d: DType, lambd: f64) -> Result<V> {
    check_float(cx, d)?;
    if lambd.is_nan() || lambd <= 0.0 {
        bail_op!(&*cx.op, "exponential_ expects lambda > 0.0, but found lambda={lambd}");
    }
    let u = uniform_open(cx, compute_elem(d), dims);
    let l = cx.f.unary("stablehlo.log", u);
    let l = cx.f.neg(l);
    let rate = cx.f.full_like(l, lambd);
    let x = cx.f.div(l, rate);
    Ok(cx.f.convert(x, d))
}

/// Geometric samples (trials up to the first success, from 1):
/// `ceil(log(u) / log1p(-p))`. Integer results saturate at their max.
fn geometric(cx: &mut Cx, dims: &[i64], d: DType, p: f64) -> Result<V> {
    if d == DType::Bool {
        return Err(Error::UnsupportedDType { op: cx.op.to_string(), dtype: d.to_string(), detail: String::new() });
    }
    if !(p > 0.0 && p < 1.0) {
        bail_op!(&*cx.op, "geometric_ expects p to be in (0, 1), but got p={p}");
    }
    let e = compute_elem(d);
    let u = uniform_open(cx, e, dims);
    let l = cx.f.unary("stablehlo.log", u);
    let den = cx.f.full_like(l, (-p).ln_1p());
    let q = cx.f.div(l, den);
    let mut k = cx.f.unary("stablehlo.ceil", q);
    // log(u) < 0 strictly, so k >= 1 unless the quotient underflows.
    let one = cx.f.full_like(k, 1.0);
    k = cx.f.max(k, one);
    if !d.is_float() {
        let top = cx.f.full_like(k, int_ceiling(d, e));
        k = cx.f.min(k, top);
    }
    Ok(cx.f.convert(k, d))
}

/// Log-normal samples: `exp(mean + std * z)`.
fn log_normal(cx: &mut Cx, dims: &[i64], d: DType, mean: f64, std: f64) -> Result<V> {
    check_float(cx, d)?;
    if std.is_nan() || std <= 0.0 {
        bail_op!(&*cx.op, "log_normal_ expects std > 0.0, but found std={std}");
    }
    let z = standard_normal(cx, dims, d == DType::F64);
    let (sd, mu) = (cx.f.full_like(z, std), cx.f.full_like(z, mean));
    let y = cx.f.mul(z, sd);
    let y = cx.f.add(y, mu);
    let y = cx.f.unary("stablehlo.exponential", y);
    Ok(cx.f.convert(y, d))
}

/// Cauchy samples: `median + sigma * tan(pi * (u - 1/2))`.
fn cauchy(cx: &mut Cx, dims: &[i64], d: DType, median: f64, sigma: f64) -> Result<V> {
    if sigma.is_nan() || sigma <= 0.0 {
        bail_op!(&*cx.op, "cauchy_ expects sigma > 0.0, but found sigma={sigma}");
    }
    check_float(cx, d)?;
    let u = uniform_open(cx, compute_elem(d), dims);
    let half = cx.f.full_like(u, 0.5);
    let c = cx.f.sub(u, half);
    let pi = cx.f.full_like(u, std::f64::consts::PI);
    let angle = cx.f.mul(pi, c);
    let t = cx.f.unary("stablehlo.tan", angle);
    let (s, m) = (cx.f.full_like(t, sigma), cx.f.full_like(t, median));
    let y = cx.f.mul(t, s);
    let y = cx.f.add(y, m);
    Ok(cx.f.convert(y, d))
}

fn register_samplers(r: &mut Builder) {
    const G: &str = "*, Generator? generator=None";
    r.op_and_inplace(&format!("aten::exponential(Tensor self, float lambd=1, {G}) -> Tensor"), |cx, a| {
        let (dims, d) = self_of(cx, a)?;
        Ok(vec![exponential(cx, &dims, d, a.float(1)?)?])
    });
    r.op_and_inplace(&format!("aten::geometric(Tensor self, float p, {G}) -> Tensor"), |cx, a| {
        let (dims, d) = self_of(cx, a)?;
        Ok(vec![geometric(cx, &dims, d, a.float(1)?)?])
    });
    r.op_and_inplace(&format!("aten::log_normal(Tensor self, float mean=1, float std=2, {G}) -> Tensor"), |cx, a| {
        let (dims, d) = self_of(cx, a)?;
        Ok(vec![log_normal(cx, &dims, d, a.float(1)?, a.float(2)?)?])
    });
    r.op_and_inplace(&format!("aten::cauchy(Tensor self, float median=0, float sigma=1, {G}) -> Tensor"), |cx, a| {
        let (dims, d) = self_of(cx, a)?;
        Ok(vec![cauchy(cx, &dims, d, a.float(1)?, a.float(2)?)?])
    });
}

// -------------------------------------------------------------- multinomial

/// Elements `idx` (int64, any shape) of the 1-D `table`.
fn take_flat(cx: &mut Cx, table: V, idx: V) -> V {
    let out = cx.dims(idx);
    let n = shape::numel(&out);
    let flat = cx.f.reshape(idx, &[n, 1]);
    let g = cx.f.gather(table, flat, &[], &[0], &[0], 1, &[1], &[n]);
    cx.f.reshape(g, &out)
}

/// `n` draws per row of the `[rows, k]` weights `p` (compute type), each
/// without replacement of the ones before: the `n` largest of
/// `log p + Gumbel noise` (the exponential race of PyTorch's kernel), in
/// the order drawn. A zero weight's key is -inf, below every nonzero one.
fn race(cx: &mut Cx, p: V, n: i64) -> V {
    let dims = cx.dims(p);
    let e = cx.ty(p).elem;
    let u = uniform_open(cx, e, &dims);
    let l = cx.f.unary("stablehlo.log", u);
    let l = cx.f.neg(l);
    let gumbel = cx.f.unary("stablehlo.log", l);
    let logp = cx.f.unary("stablehlo.log", p);
    let key = cx.f.sub(logp, gumbel);
    if n == 1 {
        let (_, i) = super::reduce::arg_extreme(cx, key, 1, true);
        return cx.f.reshape(i, &[dims[0], 1]);
    }
    let idx = cx.f.iota(&Ty::new(Elem::I64, &dims), 1);
    let (_, order) = super::sort::sort_with(cx, key, idx, 1, true);
    cx.f.slice_dim(order, 1, 0, n, 1)
}

/// `n` independent draws per row of the `[rows, k]` weights `p` by inverse
/// CDF: the first category whose cumulative weight exceeds `u * total`, by
/// binary search. A category of weight 0 is never drawn, whatever the
/// rounding of the sums: a draw that lands on one moves to the next nonzero
/// category (the last nonzero one past the end).
fn inverse_cdf(cx: &mut Cx, p: V, n: i64) -> V {
    let dims = cx.dims(p);
    let (rows, k) = (dims[0], dims[1]);
    let e = cx.ty(p).elem;
    let i64s = |d: &[i64]| Ty::new(Elem::I64, d);
    let cdf = super::reduce::scan(cx, p, 1, Reducer::Add);
    let total = cx.f.slice_dim(cdf, 1, k - 1, k, 1);
    let total = cx.f.broadcast_in_dim(total, &[0, 1], &[rows, n]);
    let u = uniform01(cx, if e == Elem::F64 { 53 } else { 24 }, &[rows, n]);
    let t = cx.f.mul(u, total);
    let cdf_flat = cx.f.reshape(cdf, &[rows * k]);
    // Row offsets into the flattened tables.
    let row = cx.f.iota(&i64s(&[rows, n]), 0);
    let kk = cx.f.splat_int(&i64s(&[rows, n]), k);
    let base = cx.f.mul(row, kk);
    let mut lo = cx.f.splat_int(&i64s(&[rows, n]), 0);
    let mut hi = cx.f.splat_int(&i64s(&[rows, n]), k - 1);
    let one = cx.f.splat_int(&i64s(&[rows, n]), 1);
    let two = cx.f.splat_int(&i64s(&[rows, n]), 2);
    // Invariant: the answer lies in [lo, hi]; each step halves the interval.
    let steps = 64 - ((k - 1) as u64).leading_zeros();
    for _ in 0..steps {
        let s = cx.f.add(lo, hi);
        let mid = cx.f.div(s, two);
        let at = cx.f.add(base, mid);
        let c = take_flat(cx, cdf_flat, at);
        let above = cx.f.compare(Cmp::Gt, c, t);
        let mid1 = cx.f.add(mid, one);
        hi = cx.f.select(above, mid, hi);
        lo = cx.f.select(above, lo, mid1);
    }
    // next[j]: the first nonzero category at or after j (k if none), by a
    // reversed running min; last: the last nonzero category (-1 if none).
    let zero = cx.f.full_like(p, 0.0);
    let nonzero = cx.f.compare(Cmp::Gt, p, zero);
    let j = cx.f.iota(&i64s(&dims), 1);
    let none = cx.f.splat_int(&i64s(&dims), k);
    let at_j = cx.f.select(nonzero, j, none);
    let rev = cx.f.reverse(at_j, &[1]);
    let next = super::reduce::scan(cx, rev, 1, Reducer::Min);
    let next = cx.f.reverse(next, &[1]);
    let minus1 = cx.f.splat_int(&i64s(&dims), -1);
    let at_j = cx.f.select(nonzero, j, minus1);
    let init = cx.f.splat_int(&Ty::scalar(Elem::I64), -1);
    let last = cx.f.reduce(at_j, init, &[1], Reducer::Max);
    let last = cx.f.broadcast_in_dim(last, &[0], &[rows, n]);
    let pick = cx.f.min(lo, last);
    // Rows without a nonzero weight (which the checks report) give -1.
    let zero_i = cx.f.splat_int(&i64s(&[rows, n]), 0);
    let pick0 = cx.f.max(pick, zero_i);
    let at = cx.f.add(base, pick0);
    let next_flat = cx.f.reshape(next, &[rows * k]);
    let moved = take_flat(cx, next_flat, at);
    let valid = cx.f.compare(Cmp::Ge, last, zero_i);
    let minus1 = cx.f.splat_int(&i64s(&[rows, n]), -1);
    cx.f.select(valid, moved, minus1)
}

/// Reports rows of the `[rows, k]` weights that are not a distribution, as
/// PyTorch's kernels do: an inf, NaN or negative weight, or a zero sum.
fn check_distribution(cx: &mut Cx, p: V) {
    let dims = cx.dims(p);
    let zero = cx.f.full_like(p, 0.0);
    let nonneg = cx.f.compare(Cmp::Ge, p, zero);
    let finite = cx.f.unary_to("stablehlo.is_finite", p, Elem::Pred);
    let ok = cx.f.and(nonneg, finite);
    cx.check_values(ok, "probability tensor contains either `inf`, `nan` or element < 0");
    let init = cx.f.splat(&Ty::scalar(cx.ty(p).elem), 0.0);
    let sum = cx.f.reduce(p, init, &[1], Reducer::Add);
    let zero = cx.f.splat(&Ty::new(cx.ty(p).elem, &[dims[0]]), 0.0);
    // NaN sums are reported by the first check.
    let bad = cx.f.compare(Cmp::Le, sum, zero);
    let ok = cx.f.not(bad);
    cx.check_values(ok, "invalid multinomial distribution (sum of probabilities <= 0)");
}

fn multinomial(cx: &mut Cx, p: V, n: i64, replacement: bool) -> Result<V> {
    let dims = cx.dims(p);
    let d = cx.dtype(p);
    if !(1..=2).contains(&dims.len()) {
        bail_op!(&*cx.op, "prob_dist must be 1 or 2 dim (got shape {})", shape::fmt(&dims));
    }
    if !d.is_float() {
        bail_op!(&*cx.op, "multinomial only supports floating-point dtypes for input, got: {d}");
    }
    if n <= 0 {
        bail_op!(&*cx.op, "cannot sample n_sample <= 0 samples");
    }
    let k = dims[dims.len() - 1];
    if !replacement && n > k {
        bail_op!(
            &*cx.op,
            "cannot sample n_sample > prob_dist.size(-1) samples without replacement (n_sample={n}, size(-1)={k})"
        );
    }
    if k > 1 << 24 {
        bail_op!(&*cx.op, "number of categories cannot exceed 2^24 (got {k})");
    }
    if k == 0 {
        bail_op!(&*cx.op, "cannot sample from a distribution of no categories (prob_dist shape {})", shape::fmt(&dims));
    }
    let rows = if dims.len() == 2 { dims[0] } else { 1 };
    let out: Vec<i64> = if dims.len() == 2 { vec![rows, n] } else { vec![n] };
    if rows == 0 {
        return Ok(cx.f.splat_int(&Ty::new(Elem::I64, &out), 0));
    }
    let pc = cx.f.convert(p, compute_elem(d));
    let pc = cx.f.reshape(pc, &[rows, k]);
    check_distribution(cx, pc);
    // One draw per sample and row is the race too, and it is cheaper.
    let s = if !replacement || n == 1 { race(cx, pc, n) } else { inverse_cdf(cx, pc, n) };
    Ok(cx.f.reshape(s, &out))
}

fn register_multinomial(r: &mut Builder) {
    r.op(
        "aten::multinomial(Tensor self, SymInt num_samples, bool replacement=False, *, Generator? generator=None) -> Tensor",
        |cx, a| Ok(vec![multinomial(cx, a.tensor(0)?, a.int(1)?, a.bool(2)?)?]),
    );
}

// ------------------------------------------------------------------ poisson

/// Loop iterations `poisson` allows itself. Every element of a valid rate
/// finishes long before: a rate below 10 needs about rate + 1 iterations,
/// and each try of the rejection sampler succeeds with odds above 0.85.
const POISSON_MAX_ITERS: i64 = 1024;

/// Poisson samples of the rates `rates` (f64 inside), by PyTorch's CPU
/// algorithms: below 10 the product of uniforms (Knuth), from 10 the
/// transformed rejection of Hörmann (1993). One `stablehlo.while` runs them
/// for every element until all are done, drawing two uniforms per element
/// per iteration from the state it carries. A rate of 0 gives 0 and of inf
/// gives inf; a negative or NaN one gives NaN, which a check reports.
fn poisson(cx: &mut Cx, rates: V) -> Result<V> {
    let d = cx.dtype(rates);
    check_float(cx, d)?;
    let dims = cx.dims(rates);
    let n = shape::numel(&dims);
    let t = Ty::new(Elem::F64, &[n]);
    let pred = Ty::new(Elem::Pred, &[n]);
    let lam = cx.f.convert(rates, Elem::F64);
    let lam = cx.f.reshape(lam, &[n]);
    let zero = cx.f.splat(&t, 0.0);
    let valid = cx.f.compare(Cmp::Ge, lam, zero);
    cx.check_values(valid, "invalid Poisson rate, expected rate to be non-negative");
    let inf = cx.f.splat(&t, f64::INFINITY);
    let is_inf = cx.f.compare(Cmp::Eq, lam, inf);
    let is_zero = cx.f.compare(Cmp::Eq, lam, zero);
    let invalid = cx.f.not(valid);
    let done = cx.f.or(invalid, is_zero);
    let done = cx.f.or(done, is_inf);
    let nan = cx.f.splat(&t, f64::NAN);
    let x = cx.f.select(is_inf, inf, zero);
    let x = cx.f.select(valid, x, nan);
    let prod = cx.f.splat(&t, 1.0);
    let state = cx.rng_state();
    let it = cx.f.splat_int(&Ty::scalar(Elem::I64), 0);
    let tys = [cx.ty(state).clone(), t.clone(), t.clone(), pred.clone(), t.clone(), Ty::scalar(Elem::I64)];
    // Carried: state, rates, counts, done, Knuth's running product, iterations.
    let cond = cx.f.region(&tys, |f, a| {
        let undone = f.not(a[3]);
        let no = f.splat(&Ty::scalar(Elem::Pred), 0.0);
        let any = f.reduce(undone, no, &[0], Reducer::Or);
        let cap = f.splat_int(&Ty::scalar(Elem::I64), POISSON_MAX_ITERS);
        let more = f.compare(Cmp::Lt, a[5], cap);
        vec![f.and(any, more)]
    });
    let body = cx.f.region(&tys, |f, a| {
        let (state, lam, x, done, prod, it) = (a[0], a[1], a[2], a[3], a[4], a[5]);
        let c = |f: &mut crate::hlo::Func, v: f64| f.splat(&Ty::new(Elem::F64, &[n]), v);
        // Two uniforms in [0, 1) per element, from the top 53 bits.
        let (state, bits) = f.rng_bit_generator(state, &Ty::new(Elem::U64, &[2, n]));
        let eleven = f.splat_int(&Ty::new(Elem::U64, &[2, n]), 11);
        let top = f.binary("stablehlo.shift_right_logical", bits, eleven);
        let u = f.convert(top, Elem::F64);
        let scale = f.splat(&Ty::new(Elem::F64, &[2, n]), (-53f64).exp2());
        let u = f.mul(u, scale);
        let u0 = f.slice_dim(u, 0, 0, 1, 1);
        let u0 = f.reshape(u0, &[n]);
        let v = f.slice_dim(u, 0, 1, 2, 1);
        let v = f.reshape(v, &[n]);
        // Knuth: count uniforms while their product stays above exp(-rate).
        let neg = f.neg(lam);
        let enlam = f.unary("stablehlo.exponential", neg);
        let prod2 = f.mul(prod, u0);
        let go_on = f.compare(Cmp::Gt, prod2, enlam);
        let one = c(f, 1.0);
        let x_plus = f.add(x, one);
        let small_x = f.select(go_on, x_plus, x);
        let small_done = f.not(go_on);
        // Hörmann's transformed rejection.
        let slam = f.unary("stablehlo.sqrt", lam);
        let loglam = f.unary("stablehlo.log", lam);
        let (k253, k0931) = (c(f, 2.53), c(f, 0.931));
        let b = f.mul(k253, slam);
        let b = f.add(b, k0931);
        let (k02483, k0059) = (c(f, 0.02483), c(f, -0.059));
        let a_ = f.mul(k02483, b);
        let a_ = f.add(a_, k0059);
        let (k34, k11328, k11239) = (c(f, 3.4), c(f, 1.1328), c(f, 1.1239));
        let bm = f.sub(b, k34);
        let q = f.div(k11328, bm);
        let invalpha = f.add(k11239, q);
        let (k2, k36224, k09277) = (c(f, 2.0), c(f, 3.6224), c(f, 0.9277));
        let bm = f.sub(b, k2);
        let q = f.div(k36224, bm);
        let vr = f.sub(k09277, q);
        let half = c(f, 0.5);
        let uu = f.sub(u0, half);
        let au = f.unary("stablehlo.abs", uu);
        let us = f.sub(half, au);
        let two_a = f.mul(k2, a_);
        let r = f.div(two_a, us);
        let r = f.add(r, b);
        let r = f.mul(r, uu);
        let r = f.add(r, lam);
        let k043 = c(f, 0.43);
        let r = f.add(r, k043);
        let k = f.unary("stablehlo.floor", r);
        let k007 = c(f, 0.07);
        let us_big = f.compare(Cmp::Ge, us, k007);
        let v_small = f.compare(Cmp::Le, v, vr);
        let quick = f.and(us_big, v_small);
        let zero = c(f, 0.0);
        let k_neg = f.compare(Cmp::Lt, k, zero);
        let k0013 = c(f, 0.013);
        let us_tiny = f.compare(Cmp::Lt, us, k0013);
        let v_big = f.compare(Cmp::Gt, v, us);
        let squeeze = f.and(us_tiny, v_big);
        let reject = f.or(k_neg, squeeze);
        let logv = f.unary("stablehlo.log", v);
        let logia = f.unary("stablehlo.log", invalpha);
        let us2 = f.mul(us, us);
        let t = f.div(a_, us2);
        let t = f.add(t, b);
        let logt = f.unary("stablehlo.log", t);
        let lhs = f.add(logv, logia);
        let lhs = f.sub(lhs, logt);
        let k1 = f.add(k, one);
        let lg = f.unary("chlo.lgamma", k1);
        let kl = f.mul(k, loglam);
        let rhs = f.sub(kl, lam);
        let rhs = f.sub(rhs, lg);
        let fits = f.compare(Cmp::Le, lhs, rhs);
        let keep = f.not(reject);
        let slow = f.and(keep, fits);
        let accept = f.or(quick, slow);
        let large_x = f.select(accept, k, x);
        // Each element takes its own method; finished ones keep their count.
        let ten = c(f, 10.0);
        let large = f.compare(Cmp::Ge, lam, ten);
        let new_x = f.select(large, large_x, small_x);
        let new_done = f.select(large, accept, small_done);
        let x = f.select(done, x, new_x);
        let new_done = f.or(done, new_done);
        let prod = f.select(done, prod, prod2);
        let step = f.splat_int(&Ty::scalar(Elem::I64), 1);
        let it = f.add(it, step);
        vec![state, lam, x, new_done, prod, it]
    });
    let out = cx.f.op("stablehlo.while", &[state, lam, x, done, prod, it], &[cond, body], "", &tys);
    let x = cx.f.reshape(out[2], &dims);
    Ok(cx.f.convert(x, d))
}

fn register_poisson(r: &mut Builder) {
    r.op("aten::poisson(Tensor self, Generator? generator=None) -> Tensor", |cx, a| Ok(vec![poisson(cx, a.tensor(0)?)?]));
}
