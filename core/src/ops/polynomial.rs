//! The orthogonal polynomials of `torch.special`: Chebyshev T, U, V and W
//! (and their shifted forms on [0, 1]), the physicists' and probabilists'
//! Hermite polynomials, Laguerre and Legendre, each `P(x, n)` with a degree
//! per element.
//!
//! As PyTorch's CPU kernels: the degree is `n` truncated toward zero
//! (a non-finite degree counts as negative), a negative degree gives 0, the
//! points where the value is known in closed form (x = ±1 for Chebyshev and
//! Legendre, x = 0 for Laguerre) take it, Chebyshev degrees past a small
//! threshold with |x| < 1 use the trigonometric form, and everything else
//! runs the three-term recurrence. The recurrence is one `stablehlo.while`
//! that steps every element until the largest degree still running is
//! reached; an element whose value became NaN (an overflow) stops there, as
//! the CPU's loop does. A degree beyond 128 (512 in f64) gives NaN for the
//! Hermite polynomials, as on the CPU. The loop runs at most 2^20 steps: a
//! larger degree that needs the recurrence (the CPU would loop that long)
//! gives NaN and an error at the next host read, rather than a hang.

use crate::dtype::DType;
use crate::error::Result;
use crate::hlo::{Cmp, Func, V};

use super::common::{float_of, prepare, result_dtype, Ew};
use super::{Args, Builder, Cx};

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    ChebyshevT,
    ChebyshevU,
    ChebyshevV,
    ChebyshevW,
    HermiteH,
    HermiteHe,
    Laguerre,
    Legendre,
}

/// (op name without `special_`, kind, evaluated at 2x - 1, the degree past
/// which |x| < 1 takes the trigonometric form, as the CPU kernel chooses).
const FAMILIES: [(&str, Kind, bool, Option<f64>); 12] = [
    ("chebyshev_polynomial_t", Kind::ChebyshevT, false, Some(6.0)),
    ("chebyshev_polynomial_u", Kind::ChebyshevU, false, Some(8.0)),
    ("chebyshev_polynomial_v", Kind::ChebyshevV, false, Some(8.0)),
    ("chebyshev_polynomial_w", Kind::ChebyshevW, false, Some(8.0)),
    ("shifted_chebyshev_polynomial_t", Kind::ChebyshevT, true, Some(6.0)),
    ("shifted_chebyshev_polynomial_u", Kind::ChebyshevU, true, Some(6.0)),
    ("shifted_chebyshev_polynomial_v", Kind::ChebyshevV, true, Some(6.0)),
    ("shifted_chebyshev_polynomial_w", Kind::ChebyshevW, true, Some(4.0)),
    ("hermite_polynomial_h", Kind::HermiteH, false, None),
    ("hermite_polynomial_he", Kind::HermiteHe, false, None),
    ("laguerre_polynomial_l", Kind::Laguerre, false, None),
    ("legendre_polynomial_p", Kind::Legendre, false, None),
];

pub fn register(r: &mut Builder) {
    for (name, kind, shifted, trig) in FAMILIES {
        for (suffix, x, n) in [("", "Tensor x", "Tensor n"), (".x_scalar", "Scalar x", "Tensor n"), (".n_scalar", "Tensor x", "Scalar n")] {
            let decl = format!("aten::special_{name}{suffix}({x}, {n}) -> Tensor");
            r.op(&decl, move |cx, a| polynomial(cx, a, kind, shifted, trig));
        }
    }
}

/// The degree past which the Hermite polynomials are NaN: PyTorch's limit
/// for the computing type (half types compute in f32).
fn hermite_limit(d: DType) -> f64 {
    if d == DType::F64 {
        512.0
    } else {
        128.0
    }
}

fn polynomial(cx: &mut Cx, a: &Args, kind: Kind, shifted: bool, trig: Option<f64>) -> Result<Vec<V>> {
    let xs = [Ew::arg(a, 0)?, Ew::arg(a, 1)?];
    let d = float_of(result_dtype(cx, &xs));
    let (vs, _) = prepare(cx, &xs, d.opmath())?;
    let (x, n) = (vs[0], vs[1]);
    let n = degree(&mut cx.f, n);
    let f = &mut cx.f;
    let x = if shifted {
        let t = f.add(x, x);
        let one = f.full_like(x, 1.0);
        f.sub(t, one)
    } else {
        x
    };
    let limit = matches!(kind, Kind::HermiteH | Kind::HermiteHe).then(|| hermite_limit(d.opmath()));
    // The elements the recurrence need not run for: a closed form, the
    // trigonometric form, a negative degree or one past the Hermite limit.
    let f = &mut cx.f;
    let zero = f.full_like(n, 0.0);
    let mut settled = f.compare(Cmp::Lt, n, zero);
    let (at, _) = closed_form(f, kind, x, n);
    settled = f.or(settled, at);
    if let Some(t) = trig {
        let (use_trig, _) = trigonometric(f, kind, x, n, t);
        settled = f.or(settled, use_trig);
    }
    if let Some(l) = limit {
        let lim = f.full_like(n, l);
        let over = f.compare(Cmp::Gt, n, lim);
        settled = f.or(settled, over);
    }
    let mut y = recurrence(cx, kind, x, n, settled);
    // A degree past MAX_DEGREE that needs the recurrence is NaN, and the
    // next host read reports it (a loop of that many steps would hang).
    let f = &mut cx.f;
    let cap = f.full_like(n, MAX_DEGREE as f64);
    let past = f.compare(Cmp::Gt, n, cap);
    let open = f.not(settled);
    let past = f.and(past, open);
    let nan = f.full_like(y, f64::NAN);
    y = f.select(past, nan, y);
    let within = f.not(past);
    cx.check_values(within, &format!("degree above {MAX_DEGREE} is not supported on tpu for |x| where the recurrence runs (one step per degree)"));
    let f = &mut cx.f;
    if let Some(t) = trig {
        let (use_trig, v) = trigonometric(f, kind, x, n, t);
        y = f.select(use_trig, v, y);
    }
    let (at, v) = closed_form(f, kind, x, n);
    y = f.select(at, v, y);
    if let Some(l) = limit {
        let lim = f.full_like(n, l);
        let over = f.compare(Cmp::Gt, n, lim);
        let nan = f.full_like(y, f64::NAN);
        y = f.select(over, nan, y);
    }
    let zero = f.full_like(n, 0.0);
    let neg = f.compare(Cmp::Lt, n, zero);
    let z = f.full_like(y, 0.0);
    y = f.select(neg, z, y);
    Ok(vec![cx.f.convert(y, d)])
}

/// The degree as the CPU's `static_cast<int64_t>(n)` gives it, kept as a
/// float: truncated toward zero, with NaN, the infinities and magnitudes
/// past 2^62 (where the cast is undefined) taken as -1.
fn degree(f: &mut Func, n: V) -> V {
    let fl = f.unary("stablehlo.floor", n);
    let ce = f.unary("stablehlo.ceil", n);
    let zero = f.full_like(n, 0.0);
    let neg = f.compare(Cmp::Lt, n, zero);
    let tr = f.select(neg, ce, fl);
    let a = f.unary("stablehlo.abs", n);
    let big = f.full_like(n, 4.611686018427388e18);
    let ok = f.compare(Cmp::Lt, a, big); // false for NaN and the infinities
    let m1 = f.full_like(n, -1.0);
    f.select(ok, tr, m1)
}

/// `P_1(x)` of each family.
fn first(f: &mut Func, kind: Kind, x: V) -> V {
    let one = f.full_like(x, 1.0);
    let two_x = f.add(x, x);
    match kind {
        Kind::ChebyshevT | Kind::HermiteHe | Kind::Legendre => x,
        Kind::ChebyshevU | Kind::HermiteH => two_x,
        Kind::ChebyshevV => f.sub(two_x, one),
        Kind::ChebyshevW => f.add(two_x, one),
        Kind::Laguerre => f.sub(one, x),
    }
}

/// `P_{k+1}` from `p = P_{k-1}` and `q = P_k`.
fn step(f: &mut Func, kind: Kind, k: V, x: V, p: V, q: V) -> V {
    let one = f.full_like(x, 1.0);
    match kind {
        Kind::ChebyshevT | Kind::ChebyshevU | Kind::ChebyshevV | Kind::ChebyshevW => {
            let two_x = f.add(x, x);
            let t = f.mul(two_x, q);
            f.sub(t, p)
        }
        // H_{k+1} = 2x H_k - 2k H_{k-1}
        Kind::HermiteH => {
            let two_x = f.add(x, x);
            let t = f.mul(two_x, q);
            let two_k = f.add(k, k);
            let u = f.mul(two_k, p);
            f.sub(t, u)
        }
        // He_{k+1} = x He_k - k He_{k-1}
        Kind::HermiteHe => {
            let t = f.mul(x, q);
            let u = f.mul(k, p);
            f.sub(t, u)
        }
        // L_{k+1} = ((2k + 1 - x) L_k - k L_{k-1}) / (k + 1)
        Kind::Laguerre => {
            let two_k = f.add(k, k);
            let omx = f.sub(one, x);
            let c = f.add(two_k, omx);
            let t = f.mul(c, q);
            let u = f.mul(k, p);
            let num = f.sub(t, u);
            let k1 = f.add(k, one);
            f.div(num, k1)
        }
        // P_{k+1} = ((2k + 1) x P_k - k P_{k-1}) / (k + 1)
        Kind::Legendre => {
            let two_k = f.add(k, k);
            let c = f.add(two_k, one);
            let cx = f.mul(c, x);
            let t = f.mul(cx, q);
            let u = f.mul(k, p);
            let num = f.sub(t, u);
            let k1 = f.add(k, one);
            f.div(num, k1)
        }
    }
}

/// The largest degree the recurrence runs to (one loop step per degree).
const MAX_DEGREE: i64 = 1 << 20;

/// The three-term recurrence up to each element's degree (0 and 1 included):
/// one while loop over k = 1, 2, ... while any element not `settled` has
/// k < n, its value is not NaN and k is within [`MAX_DEGREE`].
fn recurrence(cx: &mut Cx, kind: Kind, x: V, n: V, settled: V) -> V {
    let ty = cx.ty(x).clone();
    let p0 = cx.f.full_like(x, 1.0);
    let q0 = first(&mut cx.f, kind, x);
    let k0 = cx.f.full_like(x, 1.0);
    let pred = ty.with_elem(crate::hlo::Elem::Pred);
    let tys = [ty.clone(), ty.clone(), ty.clone(), ty.clone(), ty.clone(), pred];
    let running = move |f: &mut Func, k: V, n: V, q: V, settled: V| {
        let below = f.compare(Cmp::Lt, k, n);
        let live = f.compare(Cmp::Eq, q, q);
        let cap = f.full_like(k, MAX_DEGREE as f64);
        let within = f.compare(Cmp::Lt, k, cap);
        let open = f.not(settled);
        let r = f.and(below, live);
        let r = f.and(r, within);
        f.and(r, open)
    };
    // Carried: x, n, p, q, k, settled.
    let cond = cx.f.region(&tys, |f, v| {
        let r = running(f, v[4], v[1], v[3], v[5]);
        vec![super::common::any(f, r)]
    });
    let body = cx.f.region(&tys, |f, v| {
        let (x, n, p, q, k, settled) = (v[0], v[1], v[2], v[3], v[4], v[5]);
        let go = running(f, k, n, q, settled);
        let r = step(f, kind, k, x, p, q);
        let p = f.select(go, q, p);
        let q = f.select(go, r, q);
        let one = f.full_like(k, 1.0);
        let k = f.add(k, one);
        vec![x, n, p, q, k, settled]
    });
    let out = cx.f.op("stablehlo.while", &[x, n, p0, q0, k0, settled], &[cond, body], "", &tys);
    let f = &mut cx.f;
    let zero = f.full_like(n, 0.0);
    let is0 = f.compare(Cmp::Eq, n, zero);
    f.select(is0, p0, out[3])
}

/// Whether the degree is even.
fn even(f: &mut Func, n: V) -> V {
    let half = f.full_like(n, 0.5);
    let h = f.mul(n, half);
    let fl = f.unary("stablehlo.floor", h);
    f.compare(Cmp::Eq, h, fl)
}

/// `2n + 1` with the sign `(-1)^n`.
fn signed_odd(f: &mut Func, n: V, positive: bool) -> V {
    let one = f.full_like(n, 1.0);
    let t = f.add(n, n);
    let t = f.add(t, one);
    if positive {
        return t;
    }
    let e = even(f, n);
    let nt = f.neg(t);
    f.select(e, t, nt)
}

/// `(-1)^n`.
fn alternating(f: &mut Func, n: V) -> V {
    let e = even(f, n);
    let one = f.full_like(n, 1.0);
    let m1 = f.full_like(n, -1.0);
    f.select(e, one, m1)
}

/// The Chebyshev polynomials' trigonometric form, with θ = acos x: where
/// it applies (|x| < 1 and a degree past `threshold`), and its value.
fn trigonometric(f: &mut Func, kind: Kind, x: V, n: V, threshold: f64) -> (V, V) {
    let theta = f.unary("chlo.acos", x);
    let one = f.full_like(x, 1.0);
    let half = f.full_like(x, 0.5);
    let zero = f.full_like(x, 0.0);
    let v = match kind {
        Kind::ChebyshevT => {
            let a = f.mul(n, theta);
            f.unary("stablehlo.cosine", a)
        }
        Kind::ChebyshevU => {
            let n1 = f.add(n, one);
            let a = f.mul(n1, theta);
            let s = f.unary("stablehlo.sine", theta);
            let sa = f.unary("stablehlo.sine", a);
            let q = f.div(sa, s);
            // sin θ == 0: (n + 1) cos((n + 1) θ) / x
            let ca = f.unary("stablehlo.cosine", a);
            let t = f.mul(n1, ca);
            let alt = f.div(t, x);
            let s0 = f.compare(Cmp::Eq, s, zero);
            f.select(s0, alt, q)
        }
        Kind::ChebyshevV => {
            let h = f.mul(theta, half);
            let nh = f.add(n, half);
            let a = f.mul(nh, theta);
            let ca = f.unary("stablehlo.cosine", a);
            let ch = f.unary("stablehlo.cosine", h);
            let q = f.div(ca, ch);
            let sh = f.unary("stablehlo.sine", h);
            let at = f.compare(Cmp::Eq, sh, one);
            let alt = signed_odd(f, n, false);
            f.select(at, alt, q)
        }
        Kind::ChebyshevW => {
            let h = f.mul(theta, half);
            let nh = f.add(n, half);
            let a = f.mul(nh, theta);
            let sa = f.unary("stablehlo.sine", a);
            let sh = f.unary("stablehlo.sine", h);
            let q = f.div(sa, sh);
            let ch = f.unary("stablehlo.cosine", h);
            let at = f.compare(Cmp::Eq, ch, one);
            let pos = f.compare(Cmp::Gt, x, zero);
            let odd = signed_odd(f, n, true);
            let alt = alternating(f, n);
            let alt = f.select(pos, odd, alt);
            f.select(at, alt, q)
        }
        // Nowhere: `x < x` is false for every x, NaN included.
        _ => return (f.compare(Cmp::Lt, x, x), x),
    };
    let ax = f.unary("stablehlo.abs", x);
    let inside = f.compare(Cmp::Lt, ax, one);
    let th = f.full_like(n, threshold);
    let past = f.compare(Cmp::Gt, n, th);
    (f.and(inside, past), v)
}

/// The values the CPU kernels give in closed form (at x = ±1 for Chebyshev
/// and Legendre, at x = 0 for Laguerre): where, and the value.
fn closed_form(f: &mut Func, kind: Kind, x: V, n: V) -> (V, V) {
    let one = f.full_like(x, 1.0);
    let zero = f.full_like(x, 0.0);
    let ax = f.unary("stablehlo.abs", x);
    let pos = f.compare(Cmp::Gt, x, zero);
    let (at, v) = match kind {
        Kind::ChebyshevT | Kind::Legendre => {
            let alt = alternating(f, n);
            (f.compare(Cmp::Eq, ax, one), f.select(pos, one, alt))
        }
        Kind::ChebyshevU => {
            // (n + 1) (-1)^n, positive at x = 1
            let n1 = f.add(n, one);
            let alt = alternating(f, n);
            let s = f.select(pos, one, alt);
            (f.compare(Cmp::Eq, ax, one), f.mul(n1, s))
        }
        Kind::ChebyshevV => {
            let odd = signed_odd(f, n, false);
            (f.compare(Cmp::Eq, ax, one), f.select(pos, one, odd))
        }
        Kind::ChebyshevW => {
            let odd = signed_odd(f, n, true);
            let alt = alternating(f, n);
            (f.compare(Cmp::Eq, ax, one), f.select(pos, odd, alt))
        }
        Kind::Laguerre => (f.compare(Cmp::Eq, x, zero), one),
        Kind::HermiteH | Kind::HermiteHe => {
            // Nowhere: NaN compares unequal to itself, so `x < x` is false.
            return (f.compare(Cmp::Lt, x, x), x);
        }
    };
    (at, v)
}
