//! The regularized incomplete gamma functions `igamma(a, x) = P(a, x)` and
//! `igammac(a, x) = Q(a, x) = 1 - P(a, x)` (`torch.special.gammainc` and
//! `gammaincc`).
//!
//! Computed in f64 (a float32 input is widened and the result rounded once):
//! - x < a + 1: the series `P = x^a e^-x / Γ(a) Σ_k x^k / (a (a+1) ... (a+k))`,
//!   whose terms shrink from the first;
//! - x >= a + 1: the continued fraction for Q (modified Lentz), which
//!   converges in a few dozen steps there.
//!
//! Each is one `stablehlo.while` that steps the elements that have not yet
//! converged (relative change below 1e-16) and stops when all have or after
//! `MAX_STEPS`, enough for a = 1e8 near x = a, where the series needs
//! O(sqrt(a)) terms. The other function is one minus the computed one; in
//! each branch the computed one is the smaller-or-comparable one, so the
//! subtraction loses no relative accuracy that matters at float32. The
//! boundary values (a or x negative, zero or infinite) are PyTorch's.

use crate::bail_op;
use crate::dtype::DType;
use crate::error::Result;
use crate::hlo::{Cmp, Elem, Func, Ty, V};

use super::common::{prepare, result_dtype, Ew};
use super::{Args, Builder, Cx};

const EPS: f64 = 1e-16;
const TINY: f64 = 1e-300;
const MAX_STEPS: i64 = 100_000;

pub fn register(r: &mut Builder) {
    r.op_and_inplace("aten::igamma(Tensor self, Tensor other) -> Tensor", |cx, a| incomplete(cx, a, false));
    r.op_and_inplace("aten::igammac(Tensor self, Tensor other) -> Tensor", |cx, a| incomplete(cx, a, true));
}

fn incomplete(cx: &mut Cx, args: &Args, upper: bool) -> Result<Vec<V>> {
    let xs = [Ew::arg(args, 0)?, Ew::arg(args, 1)?];
    let d = result_dtype(cx, &xs);
    if !d.is_float() {
        let name = if upper { "igammac_cpu" } else { "igamma_cpu" };
        bail_op!(&*cx.op, "\"{name}\" not implemented for '{d}'");
    }
    let (vs, _) = prepare(cx, &xs, DType::F64)?;
    let (a, x) = (vs[0], vs[1]);
    let (p, q) = p_and_q(cx, a, x);
    let f = &mut cx.f;
    let v = if upper { q } else { p };
    let v = boundary(f, a, x, v, upper);
    Ok(vec![f.convert(v, d)])
}

/// P and Q where both arguments are positive and finite (other elements
/// get stand-in arguments and are overwritten by [`boundary`]).
fn p_and_q(cx: &mut Cx, a: V, x: V) -> (V, V) {
    let f = &mut cx.f;
    let one = f.full_like(a, 1.0);
    let zero = f.full_like(a, 0.0);
    let inf = f.full_like(a, f64::INFINITY);
    let a_ok = f.compare(Cmp::Gt, a, zero);
    let a_fin = f.compare(Cmp::Lt, a, inf);
    let x_ok = f.compare(Cmp::Gt, x, zero);
    let x_fin = f.compare(Cmp::Lt, x, inf);
    let ok = f.and(a_ok, a_fin);
    let ok = f.and(ok, x_ok);
    let ok = f.and(ok, x_fin);
    let a = f.select(ok, a, one);
    let x = f.select(ok, x, one);
    let a1 = f.add(a, one);
    let use_series = f.compare(Cmp::Lt, x, a1);

    // log(x^a e^-x / Γ(a))
    let lx = f.unary("stablehlo.log", x);
    let alx = f.mul(a, lx);
    let t = f.sub(alx, x);
    let lg = f.unary("chlo.lgamma", a);
    let t = f.sub(t, lg);
    let pre = f.unary("stablehlo.exponential", t);

    let p_sum = series(cx, a, x, use_series);
    // The fraction is done from the start where the series serves.
    let q_frac = continued_fraction(cx, a, x, use_series);
    let f = &mut cx.f;
    let p_series = f.mul(pre, p_sum);
    let q_cf = f.mul(pre, q_frac);
    let one = f.full_like(a, 1.0);
    let q_series = f.sub(one, p_series);
    let p_cf = f.sub(one, q_cf);
    let p = f.select(use_series, p_series, p_cf);
    let q = f.select(use_series, q_series, q_cf);
    (p, q)
}

/// Runs `step` on the carried state of the elements not yet `done` until
/// every element is done or `MAX_STEPS` passed. `step` returns the new
/// state and whether each element has converged.
fn converge(cx: &mut Cx, init: &[V], done: V, step: impl FnOnce(&mut Func, &[V]) -> (Vec<V>, V)) -> Vec<V> {
    let mut tys: Vec<Ty> = init.iter().map(|&v| cx.ty(v).clone()).collect();
    tys.push(cx.ty(done).clone());
    tys.push(Ty::scalar(Elem::I64));
    let n = init.len();
    let cond = cx.f.region(&tys, |f, s| {
        let undone = f.not(s[n]);
        let any = super::common::any(f, undone);
        let cap = f.splat_int(&Ty::scalar(Elem::I64), MAX_STEPS);
        let more = f.compare(Cmp::Lt, s[n + 1], cap);
        vec![f.and(any, more)]
    });
    let body = cx.f.region(&tys, |f, s| {
        let (new, converged) = step(f, &s[..n]);
        let done = s[n];
        let mut out: Vec<V> = new.iter().zip(&s[..n]).map(|(&nv, &old)| f.select(done, old, nv)).collect();
        out.push(f.or(done, converged));
        let one = f.splat_int(&Ty::scalar(Elem::I64), 1);
        out.push(f.add(s[n + 1], one));
        out
    });
    let mut operands = init.to_vec();
    operands.push(done);
    let zero = cx.f.splat_int(&Ty::scalar(Elem::I64), 0);
    operands.push(zero);
    let mut out = cx.f.op("stablehlo.while", &operands, &[cond, body], "", &tys);
    out.truncate(n);
    out
}

/// `Σ_k x^k / (a (a+1) ... (a+k))` where `wanted` (1/a elsewhere).
fn series(cx: &mut Cx, a: V, x: V, wanted: V) -> V {
    let f = &mut cx.f;
    let one = f.full_like(a, 1.0);
    let term = f.div(one, a);
    let done = f.not(wanted);
    // Carried: a, x, ap, term, sum.
    let out = converge(cx, &[a, x, a, term, term], done, |f, s| {
        let (a, x, ap, term, sum) = (s[0], s[1], s[2], s[3], s[4]);
        let one = f.full_like(a, 1.0);
        let ap = f.add(ap, one);
        let r = f.div(x, ap);
        let term = f.mul(term, r);
        let sum = f.add(sum, term);
        let at = f.unary("stablehlo.abs", term);
        let asum = f.unary("stablehlo.abs", sum);
        let eps = f.full_like(a, EPS);
        let lim = f.mul(asum, eps);
        let conv = f.compare(Cmp::Lt, at, lim);
        (vec![a, x, ap, term, sum], conv)
    });
    out[4]
}

/// The continued fraction `1 / (x + 1 - a - 1 (1 - a) / (x + 3 - a - 2 (2 - a) / ...))`
/// by the modified Lentz method, where not `done`.
fn continued_fraction(cx: &mut Cx, a: V, x: V, done: V) -> V {
    let f = &mut cx.f;
    let one = f.full_like(a, 1.0);
    let xa = f.sub(x, a);
    let b = f.add(xa, one);
    let c = f.full_like(a, 1.0 / TINY);
    let d = f.div(one, b);
    let i = f.full_like(a, 0.0);
    // Carried: a, b, c, d, h, i.
    let out = converge(cx, &[a, b, c, d, d, i], done, |f, s| {
        let (a, b, c, d, h, i) = (s[0], s[1], s[2], s[3], s[4], s[5]);
        let one = f.full_like(a, 1.0);
        let two = f.full_like(a, 2.0);
        let tiny = f.full_like(a, TINY);
        let i = f.add(i, one);
        let ima = f.sub(i, a);
        let an = f.mul(i, ima);
        let an = f.neg(an);
        let b = f.add(b, two);
        let ad = f.mul(an, d);
        let d = f.add(ad, b);
        let guard = |f: &mut Func, v: V| {
            let av = f.unary("stablehlo.abs", v);
            let small = f.compare(Cmp::Lt, av, tiny);
            f.select(small, tiny, v)
        };
        let d = guard(f, d);
        let ac = f.div(an, c);
        let c = f.add(b, ac);
        let c = guard(f, c);
        let d = f.div(one, d);
        let del = f.mul(d, c);
        let h = f.mul(h, del);
        let dm = f.sub(del, one);
        let dm = f.unary("stablehlo.abs", dm);
        let eps = f.full_like(a, EPS);
        let conv = f.compare(Cmp::Lt, dm, eps);
        (vec![a, b, c, d, h, i], conv)
    });
    out[4]
}

/// PyTorch's values on the boundary: NaN for a negative argument (or NaN),
/// a = 0 gives P = 1 (x > 0) or NaN, x = 0 gives P = 0, an infinite a gives
/// P = 0 (NaN with an infinite x), an infinite x gives P = 1.
fn boundary(f: &mut Func, a: V, x: V, v: V, upper: bool) -> V {
    let zero = f.full_like(a, 0.0);
    let inf = f.full_like(a, f64::INFINITY);
    let (p1, p0) = if upper { (0.0, 1.0) } else { (1.0, 0.0) };
    let k = |f: &mut Func, c: f64| f.full_like(a, c);
    let x_inf = f.compare(Cmp::Eq, x, inf);
    let a_inf = f.compare(Cmp::Eq, a, inf);
    let x0 = f.compare(Cmp::Eq, x, zero);
    let a0 = f.compare(Cmp::Eq, a, zero);
    let x_pos = f.compare(Cmp::Gt, x, zero);
    // Lowest precedence first.
    let c1 = k(f, p1);
    let v = f.select(x_inf, c1, v);
    let both_inf = f.and(a_inf, x_inf);
    let c0 = k(f, p0);
    let v = f.select(a_inf, c0, v);
    let nan = k(f, f64::NAN);
    let v = f.select(both_inf, nan, v);
    let v = f.select(x0, c0, v);
    let at_a0 = f.select(x_pos, c1, nan);
    let v = f.select(a0, at_a0, v);
    let a_neg = f.compare(Cmp::Lt, a, zero);
    let x_neg = f.compare(Cmp::Lt, x, zero);
    let neg = f.or(a_neg, x_neg);
    let v = f.select(neg, nan, v);
    let a_nan = f.compare(Cmp::Ne, a, a);
    let x_nan = f.compare(Cmp::Ne, x, x);
    let any_nan = f.or(a_nan, x_nan);
    f.select(any_nan, nan, v)
}
