//! Pointwise special functions and float classification: `logit`,
//! `logaddexp(2)`, `xlogy`, `lgamma`, `digamma`, `polygamma`, `erfc`,
//! `sinc`, `i0`, the `special_` kernels (`i0e`, `ndtr`, `ndtri`, `entr`,
//! `xlog1py`, `zeta`), `heaviside`, `nan_to_num`, `signbit`, `isposinf` /
//! `isneginf`. Half-precision inputs compute in f32 and round once, as
//! PyTorch's CPU kernels do.

use crate::bail_op;
use crate::dtype::DType;
use crate::error::Result;
use crate::hlo::{Cmp, Elem, Func, Ty, V};

use super::common::{float_of, prepare, result_dtype, Ew};
use super::{Args, Cx, Builder};

pub fn register(r: &mut Builder) {
    register_unary(r);
    register_binary(r);
    register_classify(r);
}

/// `body(x)` for a float result: integer inputs give the default float.
fn float_unary(cx: &mut Cx, x: V, body: impl FnOnce(&mut Func, V) -> V) -> V {
    let d = float_of(cx.dtype(x));
    let xc = cx.f.convert(x, d.opmath());
    let y = body(&mut cx.f, xc);
    cx.f.convert(y, d)
}

/// Registers `aten::name(Tensor self) -> Tensor` (and `name_` when
/// `inplace`) as `body` on a float result ([`float_unary`]).
fn float_op(r: &mut Builder, name: &str, inplace: bool, body: fn(&mut Func, V) -> V) {
    let decl = format!("aten::{name}(Tensor self) -> Tensor");
    let lower = move |cx: &mut Cx, a: &Args| Ok(vec![float_unary(cx, a.tensor(0)?, body)]);
    if inplace {
        r.op_and_inplace(&decl, lower);
    } else {
        r.op(&decl, lower);
    }
}

/// `body(a, b)` on the promoted operands, as a float result.
fn float_binary(cx: &mut Cx, a: &Args, name: &str, ints: bool, body: fn(&mut Func, V, V) -> V) -> Result<Vec<V>> {
    let xs = [Ew::arg(a, 0)?, Ew::arg(a, 1)?];
    let d = result_dtype(cx, &xs);
    if !ints && !d.is_float() {
        bail_op!(&*cx.op, "\"{name}\" not implemented for '{d}'");
    }
    let d = float_of(d);
    let (vs, _) = prepare(cx, &xs, d.opmath())?;
    let y = body(&mut cx.f, vs[0], vs[1]);
    Ok(vec![cx.f.convert(y, d)])
}

/// Cephes' Chebyshev series evaluation (`chbevl`).
fn chbevl(f: &mut Func, x: V, coeffs: &[f64]) -> V {
    let mut b0 = f.full_like(x, coeffs[0]);
    let mut b1 = f.full_like(x, 0.0);
    let mut b2 = b1;
    for &c in &coeffs[1..] {
        b2 = b1;
        b1 = b0;
        let xb = f.mul(x, b1);
        let t = f.sub(xb, b2);
        let c = f.full_like(x, c);
        b0 = f.add(t, c);
    }
    let d = f.sub(b0, b2);
    let half = f.full_like(x, 0.5);
    f.mul(half, d)
}

/// Chebyshev coefficients of `exp(-x) I0(x)` on [0, 8] (Cephes, as PyTorch).
const I0E_A: [f64; 30] = [
    -4.41534164647933937950E-18, 3.33079451882223809783E-17, -2.43127984654795469359E-16, 1.71539128555513303061E-15,
    -1.16853328779934516808E-14, 7.67618549860493561688E-14, -4.85644678311192946090E-13, 2.95505266312963983461E-12,
    -1.72682629144155570723E-11, 9.67580903537323691224E-11, -5.18979560163526290666E-10, 2.65982372468238665035E-9,
    -1.30002500998624804212E-8, 6.04699502254191894932E-8, -2.67079385394061173391E-7, 1.11738753912010371815E-6,
    -4.41673835845875056359E-6, 1.64484480707288970893E-5, -5.75419501008210370398E-5, 1.88502885095841655729E-4,
    -5.76375574538582365885E-4, 1.63947561694133579842E-3, -4.32430999505057594430E-3, 1.05464603945949983183E-2,
    -2.37374148058994688156E-2, 4.93052842396707084878E-2, -9.49010970480476444210E-2, 1.71620901522208775349E-1,
    -3.04682672343198398683E-1, 6.76795274409476084995E-1,
];
/// Chebyshev coefficients of `exp(-x) sqrt(x) I0(x)` on (8, inf).
const I0E_B: [f64; 25] = [
    -7.23318048787475395456E-18, -4.83050448594418207126E-18, 4.46562142029675999901E-17, 3.46122286769746109310E-17,
    -2.82762398051658348494E-16, -3.42548561967721913462E-16, 1.77256013305652638360E-15, 3.81168066935262242075E-15,
    -9.55484669882830764870E-15, -4.15056934728722208663E-14, 1.54008621752140982691E-14, 3.85277838274214270114E-13,
    7.18012445138366623367E-13, -1.79417853150680611778E-12, -1.32158118404477131188E-11, -3.14991652796324136454E-11,
    1.18891471078464383424E-11, 4.94060238822496958910E-10, 3.39623202570838634515E-9, 2.26666899049817806459E-8,
    2.04891858946906374183E-7, 2.89137052083475648297E-6, 6.88975834691682398426E-5, 3.36911647825569408990E-3,
    8.04490411014108831608E-1,
];

/// `I0(x) = exp(|x|) i0e(x)`.
fn i0(f: &mut Func, x: V) -> V {
    let ax = f.unary("stablehlo.abs", x);
    let e = f.unary("stablehlo.exponential", ax);
    let s = i0e(f, x);
    f.mul(e, s)
}

/// digamma with PyTorch's values at the poles: `digamma(±0) = ∓inf`, NaN
/// at the negative integers.
/// Whether `x` is 0 or a negative integer: the poles of lgamma, digamma and
/// the Hurwitz zeta's `q`.
fn nonpositive_integer(f: &mut Func, x: V) -> V {
    let fl = f.unary("stablehlo.floor", x);
    let int = f.compare(Cmp::Eq, fl, x);
    let zero = f.full_like(x, 0.0);
    let nonpos = f.compare(Cmp::Le, x, zero);
    f.and(int, nonpos)
}

fn digamma(f: &mut Func, x: V) -> V {
    let y = f.unary("chlo.digamma", x);
    // PyTorch: digamma(±0) = ∓inf, NaN at the negative integers.
    let zero = f.full_like(x, 0.0);
    let is_zero = f.compare(Cmp::Eq, x, zero);
    let inf = f.full_like(x, f64::INFINITY);
    let ninf = f.full_like(x, f64::NEG_INFINITY);
    let one = f.full_like(x, 1.0);
    let r = f.div(one, x);
    let neg_zero = f.compare(Cmp::Lt, r, zero);
    let z = f.select(neg_zero, inf, ninf);
    // (Zero is among the poles too, but takes its signed infinity below.)
    let pole = nonpositive_integer(f, x);
    let nan = f.full_like(x, f64::NAN);
    let y = f.select(pole, nan, y);
    f.select(is_zero, z, y)
}

fn register_unary(r: &mut Builder) {
    r.op_and_inplace("aten::logit(Tensor self, float? eps=None) -> Tensor", |cx, a| {
        let x = a.tensor(0)?;
        let eps = a.opt_float(1);
        Ok(vec![float_unary(cx, x, |f, x| {
            // With eps, x is clamped to [eps, 1 - eps] first (NaN stays NaN).
            let x = match eps {
                Some(e) => {
                    let lo = f.full_like(x, e);
                    let hi = f.full_like(x, 1.0 - e);
                    let below = f.compare(Cmp::Lt, x, lo);
                    let above = f.compare(Cmp::Gt, x, hi);
                    let y = f.select(below, lo, x);
                    f.select(above, hi, y)
                }
                None => x,
            };
            let one = f.full_like(x, 1.0);
            let omx = f.sub(one, x);
            let q = f.div(x, omx);
            f.unary("stablehlo.log", q)
        })])
    });
    float_op(r, "lgamma", true, |f, x| {
        let y = f.unary("chlo.lgamma", x);
        // Poles (0 and the negative integers) are +inf, as C's lgamma.
        let pole = nonpositive_integer(f, x);
        let inf = f.full_like(x, f64::INFINITY);
        f.select(pole, inf, y)
    });
    float_op(r, "digamma", true, digamma);
    float_op(r, "sinc", true, |f, x| {
        // x == 0 ? 1 : sin(pi x) / (pi x)
        let pi = f.full_like(x, std::f64::consts::PI);
        let p = f.mul(pi, x);
        let s = f.unary("stablehlo.sine", p);
        let q = f.div(s, p);
        let zero = f.full_like(x, 0.0);
        let one = f.full_like(x, 1.0);
        let z = f.compare(Cmp::Eq, x, zero);
        f.select(z, one, q)
    });
    float_op(r, "i0", true, i0);
    float_op(r, "erfc", true, |f, x| f.unary("chlo.erfc", x));
    // `angle` is in complex.rs, with the complex case.
    float_op(r, "special_i0e", false, i0e);
    // 0.5 erfc(-x / sqrt 2)
    float_op(r, "special_ndtr", false, |f, x| {
        let c = f.full_like(x, -std::f64::consts::FRAC_1_SQRT_2);
        let t = f.mul(x, c);
        let e = f.unary("chlo.erfc", t);
        let half = f.full_like(x, 0.5);
        f.mul(half, e)
    });
    // sqrt 2 erfinv(2p - 1): -inf at 0, inf at 1, NaN outside [0, 1].
    float_op(r, "special_ndtri", false, |f, p| {
        let two = f.full_like(p, 2.0);
        let one = f.full_like(p, 1.0);
        let t = f.mul(two, p);
        let t = f.sub(t, one);
        let e = f.unary("chlo.erf_inv", t);
        let c = f.full_like(p, std::f64::consts::SQRT_2);
        f.mul(c, e)
    });
    // -x ln x for x > 0, 0 at 0, -inf below, NaN for NaN.
    float_op(r, "special_entr", false, |f, x| {
        let l = f.unary("stablehlo.log", x);
        let p = f.mul(x, l);
        let y = f.neg(p);
        let zero = f.full_like(x, 0.0);
        let ninf = f.full_like(x, f64::NEG_INFINITY);
        let is_zero = f.compare(Cmp::Eq, x, zero);
        let below = f.compare(Cmp::Lt, x, zero);
        let y = f.select(is_zero, zero, y);
        f.select(below, ninf, y)
    });
    // The in-place form puts the tensor first: `polygamma_(Tensor self, int n)`.
    r.op("aten::polygamma(int n, Tensor self) -> Tensor", |cx, a| polygamma(cx, a.int(0)?, a.tensor(1)?));
    r.op("aten::polygamma_(Tensor(a!) self, int n) -> Tensor(a!)", |cx, a| polygamma(cx, a.int(1)?, a.tensor(0)?));
}

/// The n-th derivative of digamma, as PyTorch's CPU kernel computes it:
/// digamma for n = 0, trigamma (by reflection below 1/2) for n = 1, else
/// `(-1)^(n+1) n! zeta(n + 1, x)` with Cephes' Hurwitz zeta.
fn polygamma(cx: &mut Cx, n: i64, x: V) -> Result<Vec<V>> {
    if n < 0 {
        bail_op!(&*cx.op, "polygamma(n, x) does not support negative n.");
    }
    let d = float_of(cx.dtype(x));
    let xc = cx.f.convert(x, d.opmath());
    let y = match n {
        0 => digamma(&mut cx.f, xc),
        1 => trigamma(&mut cx.f, xc),
        _ => {
            let s = cx.f.full_like(xc, (n + 1) as f64);
            let z = zeta(cx, s, xc);
            // n! overflows f64 past 170 (the CPU's exp(lgamma(n + 1)) is
            // inf there too); the product stops so a huge n cannot hang.
            let fact: f64 = if n > 170 { f64::INFINITY } else { (1..=n).map(|k| k as f64).product() };
            let c = cx.f.full_like(z, if n % 2 == 1 { fact } else { -fact });
            cx.f.mul(c, z)
        }
    };
    Ok(vec![cx.f.convert(y, d)])
}

/// PyTorch's `trigamma`: reflection below 1/2, six steps of the recurrence,
/// then the asymptotic series.
fn trigamma(f: &mut Func, x: V) -> V {
    let half = f.full_like(x, 0.5);
    let one = f.full_like(x, 1.0);
    let reflect = f.compare(Cmp::Lt, x, half);
    let pi = f.full_like(x, std::f64::consts::PI);
    let px = f.mul(pi, x);
    let sp = f.unary("stablehlo.sine", px);
    let sp2 = f.mul(sp, sp);
    let pi2 = f.full_like(x, std::f64::consts::PI * std::f64::consts::PI);
    let refl = f.div(pi2, sp2);
    let zero = f.full_like(x, 0.0);
    let mut result = f.select(reflect, refl, zero);
    let neg = f.neg(result);
    result = f.select(reflect, neg, result);
    let omx = f.sub(one, x);
    let mut x = f.select(reflect, omx, x);
    for _ in 0..6 {
        let xx = f.mul(x, x);
        let r = f.div(one, xx);
        result = f.add(result, r);
        x = f.add(x, one);
    }
    let xx = f.mul(x, x);
    let ixx = f.div(one, xx);
    let c42 = f.full_like(x, 1.0 / 42.0);
    let c30 = f.full_like(x, 1.0 / 30.0);
    let c6 = f.full_like(x, 1.0 / 6.0);
    let t = f.mul(ixx, c42);
    let t = f.sub(c30, t);
    let t = f.mul(ixx, t);
    let t = f.sub(c6, t);
    let t = f.mul(ixx, t);
    let two = f.full_like(x, 2.0);
    let tx = f.mul(two, x);
    let h = f.div(one, tx);
    let t = f.add(t, h);
    let t = f.add(one, t);
    let t = f.div(t, x);
    let result = f.add(result, t);
    // sign: -1 where reflected (the reflected part was negated above).
    let nres = f.neg(result);
    f.select(reflect, nres, result)
}

/// Cephes' Hurwitz zeta `zeta(x, q)` as PyTorch computes it: inf at x = 1,
/// NaN below; for q <= 0, inf at the integers and NaN unless x is an
/// integer; else direct summation until the term is negligible (at least
/// nine terms and past q + 9, in one `stablehlo.while`), then the
/// Euler-Maclaurin tail.
fn zeta(cx: &mut Cx, x: V, q: V) -> V {
    const MACHEP: f64 = 1.11022302462515654042e-16;
    const A: [f64; 12] = [
        12.0, -720.0, 30240.0, -1209600.0, 47900160.0, -1.8924375803183791606e9, 7.47242496e10,
        -2.950130727918164224e12, 1.1646782814350067249e14, -4.5979787224074726105e15,
        1.8152105401943546773e17, -7.1661652561756670113e18,
    ];
    let ty = cx.ty(x).clone();
    let pred = ty.with_elem(Elem::Pred);
    let nx = cx.f.neg(x);
    let s0 = cx.f.binary("stablehlo.power", q, nx);
    let zero_i = cx.f.splat(&ty, 0.0);
    let done0 = cx.f.splat(&pred, 0.0);
    let it0 = cx.f.splat_int(&Ty::scalar(Elem::I64), 0);
    let tys = [ty.clone(), ty.clone(), ty.clone(), ty.clone(), ty.clone(), pred.clone(), Ty::scalar(Elem::I64)];
    // Carried: x, s, a, b, i (as float), done, iterations.
    let cond = cx.f.region(&tys, |f, v| {
        let undone = f.not(v[5]);
        let any = super::common::any(f, undone);
        let cap = f.splat_int(&Ty::scalar(Elem::I64), 100_000);
        let more = f.compare(Cmp::Lt, v[6], cap);
        vec![f.and(any, more)]
    });
    let body = cx.f.region(&tys, |f, v| {
        let (x, s, a, b, i, done, it) = (v[0], v[1], v[2], v[3], v[4], v[5], v[6]);
        let one = f.full_like(x, 1.0);
        let nine = f.full_like(x, 9.0);
        // while (i < 9 || a <= 9): i += 1; a += 1; b = a^-x; s += b; stop if b is negligible.
        let i_small = f.compare(Cmp::Lt, i, nine);
        let a_small = f.compare(Cmp::Le, a, nine);
        let go = f.or(i_small, a_small);
        let undone = f.not(done);
        let go = f.and(go, undone);
        let i2 = f.add(i, one);
        let a2 = f.add(a, one);
        let nx = f.neg(x);
        let b2 = f.binary("stablehlo.power", a2, nx);
        let s2 = f.add(s, b2);
        let eps = f.full_like(x, MACHEP);
        let lim = f.mul(eps, s2);
        let nlim = f.neg(lim);
        let gt = f.compare(Cmp::Lt, nlim, b2);
        let lt = f.compare(Cmp::Lt, b2, lim);
        let converged = f.and(gt, lt);
        let i = f.select(go, i2, i);
        let a = f.select(go, a2, a);
        let b = f.select(go, b2, b);
        let s = f.select(go, s2, s);
        // Finished: the loop condition failed (tail next) or converged.
        let stop = f.not(go);
        let conv = f.and(go, converged);
        let done = f.or(done, stop);
        let done = f.or(done, conv);
        let one_i = f.splat_int(&Ty::scalar(Elem::I64), 1);
        vec![x, s, a, b, i, done, f.add(it, one_i)]
    });
    let out = cx.f.op("stablehlo.while", &[x, s0, q, zero_i, zero_i, done0, it0], &[cond, body], "", &tys);
    let (s, a, b) = (out[1], out[2], out[3]);
    let f = &mut cx.f;
    let eps = f.full_like(x, MACHEP);
    let lim = f.mul(eps, s);
    let nlim = f.neg(lim);
    let gt = f.compare(Cmp::Lt, nlim, b);
    let lt = f.compare(Cmp::Lt, b, lim);
    // Converged in the summation (Cephes returns there): no tail.
    let summed = f.and(gt, lt);
    // Euler-Maclaurin: s += b w / (x - 1) - b / 2, then 12 terms.
    let one = f.full_like(x, 1.0);
    let w = a;
    let xm1 = f.sub(x, one);
    let bw = f.mul(b, w);
    let t = f.div(bw, xm1);
    let mut st = f.add(s, t);
    let half = f.full_like(x, 0.5);
    let hb = f.mul(half, b);
    st = f.sub(st, hb);
    let mut aa = f.full_like(x, 1.0);
    let mut kk = f.full_like(x, 0.0);
    let mut bb = b;
    let mut stopped = f.splat(&pred, 0.0);
    for &c in &A {
        let xk = f.add(x, kk);
        aa = f.mul(aa, xk);
        bb = f.div(bb, w);
        let ab = f.mul(aa, bb);
        let cv = f.full_like(x, c);
        let term = f.div(ab, cv);
        let next = f.add(st, term);
        let live = f.not(stopped);
        st = f.select(live, next, st);
        let r = f.div(term, st);
        let r = f.unary("stablehlo.abs", r);
        let small = f.compare(Cmp::Lt, r, eps);
        stopped = f.or(stopped, small);
        kk = f.add(kk, one);
        let xk = f.add(x, kk);
        aa = f.mul(aa, xk);
        bb = f.div(bb, w);
        kk = f.add(kk, one);
    }
    let result = f.select(summed, s, st);
    // The special cases.
    let inf = f.full_like(x, f64::INFINITY);
    let nan = f.full_like(x, f64::NAN);
    let zero = f.full_like(x, 0.0);
    let q_nonpos = f.compare(Cmp::Le, q, zero);
    let x_fl = f.unary("stablehlo.floor", x);
    let x_int = f.compare(Cmp::Eq, x, x_fl);
    let x_nonint = f.not(x_int);
    let pole = nonpositive_integer(f, q);
    let domain = f.and(q_nonpos, x_nonint);
    let result = f.select(domain, nan, result);
    let result = f.select(pole, inf, result);
    let below = f.compare(Cmp::Lt, x, one);
    let result = f.select(below, nan, result);
    let at_one = f.compare(Cmp::Eq, x, one);
    f.select(at_one, inf, result)
}

/// `exp(-|x|) I0(x)`, from the same Chebyshev series without the exponential.
fn i0e(f: &mut Func, x: V) -> V {
    let x = f.unary("stablehlo.abs", x);
    let half = f.full_like(x, 0.5);
    let two = f.full_like(x, 2.0);
    let eight = f.full_like(x, 8.0);
    let ya = f.mul(x, half);
    let ya = f.sub(ya, two);
    let a = chbevl(f, ya, &I0E_A);
    let c32 = f.full_like(x, 32.0);
    let yb = f.div(c32, x);
    let yb = f.sub(yb, two);
    let b = chbevl(f, yb, &I0E_B);
    let sq = f.unary("stablehlo.sqrt", x);
    let b = f.div(b, sq);
    let small = f.compare(Cmp::Le, x, eight);
    f.select(small, a, b)
}

/// `x log(y)`, 0 where x == 0 unless y is NaN.
fn xlogy(f: &mut Func, x: V, y: V) -> V {
    let l = f.unary("stablehlo.log", y);
    let p = f.mul(x, l);
    let zero = f.full_like(x, 0.0);
    let x0 = f.compare(Cmp::Eq, x, zero);
    let p = f.select(x0, zero, p);
    let ynan = f.compare(Cmp::Ne, y, y);
    f.select(ynan, y, p)
}

/// `x log1p(y)`, 0 where x == 0 unless y is NaN.
fn xlog1py(f: &mut Func, x: V, y: V) -> V {
    let l = f.unary("stablehlo.log_plus_one", y);
    let p = f.mul(x, l);
    let zero = f.full_like(x, 0.0);
    let x0 = f.compare(Cmp::Eq, x, zero);
    let p = f.select(x0, zero, p);
    let ynan = f.compare(Cmp::Ne, y, y);
    f.select(ynan, y, p)
}

/// `max + log1p(exp(-|a - b|))` (base e) or its base-2 form; equal infinities
/// give themselves (their difference is NaN).
pub(super) fn logaddexp(f: &mut Func, a: V, b: V, base2: bool) -> V {
    let m = f.max(a, b);
    let d = f.sub(a, b);
    let d = f.unary("stablehlo.abs", d);
    let nd = f.neg(d);
    let t = if base2 {
        let two = f.full_like(a, 2.0);
        let e = f.binary("stablehlo.power", two, nd);
        let l = f.unary("stablehlo.log_plus_one", e);
        let c = f.full_like(a, std::f64::consts::LOG2_E);
        f.mul(l, c)
    } else {
        let e = f.unary("stablehlo.exponential", nd);
        f.unary("stablehlo.log_plus_one", e)
    };
    let y = f.add(m, t);
    let inf = f.full_like(a, f64::INFINITY);
    let ab = f.unary("stablehlo.abs", a);
    let a_inf = f.compare(Cmp::Eq, ab, inf);
    let same = f.compare(Cmp::Eq, a, b);
    let both = f.and(a_inf, same);
    f.select(both, a, y)
}

fn register_binary(r: &mut Builder) {
    r.op_and_inplace("aten::xlogy.Tensor(Tensor self, Tensor other) -> Tensor", |cx, a| {
        float_binary(cx, a, "xlogy", true, xlogy)
    });
    r.op_and_inplace("aten::xlogy.Scalar_Other(Tensor self, Scalar other) -> Tensor", |cx, a| {
        float_binary(cx, a, "xlogy", true, xlogy)
    });
    r.op("aten::xlogy.Scalar_Self(Scalar self, Tensor other) -> Tensor", |cx, a| float_binary(cx, a, "xlogy", true, xlogy));
    for decl in [
        "aten::special_xlog1py(Tensor self, Tensor other) -> Tensor",
        "aten::special_xlog1py.other_scalar(Tensor self, Scalar other) -> Tensor",
        "aten::special_xlog1py.self_scalar(Scalar self, Tensor other) -> Tensor",
    ] {
        r.op(decl, |cx, a| float_binary(cx, a, "xlog1py", true, xlog1py));
    }
    for decl in [
        "aten::special_zeta(Tensor self, Tensor other) -> Tensor",
        "aten::special_zeta.other_scalar(Tensor self, Scalar other) -> Tensor",
        "aten::special_zeta.self_scalar(Scalar self, Tensor other) -> Tensor",
    ] {
        // The Hurwitz zeta function zeta(x, q).
        r.op(decl, |cx, a| {
            let xs = [Ew::arg(a, 0)?, Ew::arg(a, 1)?];
            let d = float_of(result_dtype(cx, &xs));
            let (vs, _) = prepare(cx, &xs, d.opmath())?;
            let z = zeta(cx, vs[0], vs[1]);
            Ok(vec![cx.f.convert(z, d)])
        });
    }
    r.op("aten::logaddexp(Tensor self, Tensor other) -> Tensor", |cx, a| {
        float_binary(cx, a, "logaddexp_cpu", false, |f, a, b| logaddexp(f, a, b, false))
    });
    r.op("aten::logaddexp2(Tensor self, Tensor other) -> Tensor", |cx, a| {
        float_binary(cx, a, "logaddexp2_cpu", false, |f, a, b| logaddexp(f, a, b, true))
    });
    r.op_and_inplace("aten::heaviside(Tensor self, Tensor values) -> Tensor", |cx, a| {
        let (x, v) = (a.tensor(0)?, a.tensor(1)?);
        let d = cx.dtype(x);
        if cx.dtype(v) != d {
            bail_op!(&*cx.op, "heaviside is not yet implemented for tensors with different dtypes");
        }
        let (vs, _) = prepare(cx, &[Ew::T(x), Ew::T(v)], d)?;
        let f = &mut cx.f;
        let zero = f.full_like(vs[0], 0.0);
        let is0 = f.compare(Cmp::Eq, vs[0], zero);
        let pos = f.compare(Cmp::Gt, vs[0], zero);
        let pos = f.convert(pos, d);
        Ok(vec![f.select(is0, vs[1], pos)])
    });
}

/// A bool tensor of `x`'s shape, all `value`.
fn all_bool(cx: &mut Cx, x: V, value: bool) -> V {
    let z = cx.f.full_like(x, 0.0);
    cx.f.compare(if value { Cmp::Eq } else { Cmp::Ne }, z, z)
}

/// The largest finite value of a float type.
fn max_finite(d: DType) -> f64 {
    match d {
        DType::F16 => 65504.0,
        DType::BF16 => 3.3895313892515355e38,
        DType::F32 => f32::MAX as f64,
        _ => f64::MAX,
    }
}

fn register_classify(r: &mut Builder) {
    for (name, sign) in [("isposinf", 1.0), ("isneginf", -1.0)] {
        r.op(&format!("aten::{name}(Tensor self) -> Tensor"), move |cx, a| {
            let x = a.tensor(0)?;
            if !cx.dtype(x).is_float() {
                return Ok(vec![all_bool(cx, x, false)]);
            }
            let inf = cx.f.full_like(x, sign * f64::INFINITY);
            Ok(vec![cx.f.compare(Cmp::Eq, x, inf)])
        });
    }
    r.op("aten::signbit(Tensor self) -> Tensor", |cx, a| {
        let x = a.tensor(0)?;
        let d = cx.dtype(x);
        if d.is_float() {
            // The sign bit itself: -0.0 and negative NaNs count.
            let w = cx.f.convert(x, d.opmath());
            return Ok(vec![cx.f.signbit(w)]);
        }
        if cx.ty(x).elem.is_unsigned() {
            return Ok(vec![all_bool(cx, x, false)]);
        }
        let zero = cx.f.full_like(x, 0.0);
        Ok(vec![cx.f.compare(Cmp::Lt, x, zero)])
    });
    r.op_and_inplace(
        "aten::nan_to_num(Tensor self, float? nan=None, float? posinf=None, float? neginf=None) -> Tensor",
        |cx, a| {
            let x = a.tensor(0)?;
            let d = cx.dtype(x);
            if !d.is_float() {
                return Ok(vec![x]);
            }
            let big = max_finite(d);
            let nan = a.opt_float(1).unwrap_or(0.0);
            let pinf = a.opt_float(2).unwrap_or(big);
            let ninf = a.opt_float(3).unwrap_or(-big);
            // The replacements are values of x's dtype, as PyTorch casts them.
            let f = &mut cx.f;
            let nv = f.full_like(x, nan);
            let pv = f.full_like(x, pinf);
            let mv = f.full_like(x, ninf);
            let inf = f.full_like(x, f64::INFINITY);
            let minf = f.full_like(x, f64::NEG_INFINITY);
            let is_nan = f.compare(Cmp::Ne, x, x);
            let is_p = f.compare(Cmp::Eq, x, inf);
            let is_m = f.compare(Cmp::Eq, x, minf);
            let y = f.select(is_nan, nv, x);
            let y = f.select(is_p, pv, y);
            Ok(vec![f.select(is_m, mv, y)])
        },
    );
}
