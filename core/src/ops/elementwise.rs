//! Elementwise ops: unary math, binary arithmetic with PyTorch's type
//! promotion and broadcasting, comparisons, logical ops, `where`, `clamp`.
//! Half-precision inputs compute in f32 and round once at the end, as
//! PyTorch's CPU kernels do.

use crate::bail_op;
use crate::dtype::DType;
use crate::error::Result;
use crate::hlo::{Cmp, Func, V};

use super::common::{float_of, materialize, prepare, result_dtype, Ew};
use super::{Args, Builder, Cx};

pub fn register(r: &mut Builder) {
    register_unary(r);
    register_binary(r);
    register_compare_logical(r);
}

// ------------------------------------------------------------------- unary

/// How a unary op picks its result dtype.
#[derive(Clone, Copy)]
enum UnaryOut {
    /// Same as the input (`neg`, `abs`, `relu`).
    Same,
    /// Floating: integer inputs give the default float (`exp`, `sin`).
    Float,
    /// As `Same` for real inputs; a complex input gives its parts' type
    /// (`abs`).
    Magnitude,
}

/// Registers `aten::name(Tensor self) -> Tensor` and `aten::name_`.
fn unary(r: &mut Builder, name: &str, out: UnaryOut, body: fn(&mut Func, V) -> V) {
    r.op_and_inplace(&format!("aten::{name}(Tensor self) -> Tensor"), move |cx, a| {
        let x = a.tensor(0)?;
        Ok(vec![apply_unary(cx, x, out, body)])
    });
}

fn apply_unary(cx: &mut Cx, x: V, out: UnaryOut, body: fn(&mut Func, V) -> V) -> V {
    let d = cx.dtype(x);
    let (input, out) = match out {
        UnaryOut::Same => (d, d),
        UnaryOut::Float => (float_of(d), float_of(d)),
        UnaryOut::Magnitude => (d, d.real()),
    };
    let xc = cx.f.convert(x, input.opmath());
    let y = body(&mut cx.f, xc);
    cx.f.convert(y, out)
}

pub(super) fn gelu(f: &mut Func, x: V, tanh: bool) -> V {
    let half = f.full_like(x, 0.5);
    let one = f.full_like(x, 1.0);
    let inner = if tanh {
        // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
        let c = f.full_like(x, (2.0 / std::f64::consts::PI).sqrt());
        let k = f.full_like(x, 0.044715);
        let x2 = f.mul(x, x);
        let x3 = f.mul(x2, x);
        let kx3 = f.mul(k, x3);
        let s = f.add(x, kx3);
        let cs = f.mul(c, s);
        f.unary("stablehlo.tanh", cs)
    } else {
        // 0.5 x (1 + erf(x / sqrt 2))
        let r = f.full_like(x, std::f64::consts::FRAC_1_SQRT_2);
        let xs = f.mul(x, r);
        f.unary("chlo.erf", xs)
    };
    let t = f.add(one, inner);
    let hx = f.mul(half, x);
    f.mul(hx, t)
}

fn register_unary(r: &mut Builder) {
    use UnaryOut::*;
    let table: &[(&str, UnaryOut, fn(&mut Func, V) -> V)] = &[
        ("neg", Same, |f, x| f.neg(x)),
        ("abs", Magnitude, |f, x| {
            let elem = f.ty(x).elem;
            if elem.is_unsigned() {
                x
            } else {
                // Of a complex value: its modulus, a real value.
                f.unary_to("stablehlo.abs", x, elem.real())
            }
        }),
        ("exp", Float, |f, x| f.unary("stablehlo.exponential", x)),
        ("expm1", Float, |f, x| f.unary("stablehlo.exponential_minus_one", x)),
        ("log", Float, |f, x| f.unary("stablehlo.log", x)),
        ("log1p", Float, |f, x| f.unary("stablehlo.log_plus_one", x)),
        ("log2", Float, |f, x| {
            let l = f.unary("stablehlo.log", x);
            let c = f.full_like(x, std::f64::consts::LOG2_E);
            f.mul(l, c)
        }),
        ("sqrt", Float, sqrt),
        ("rsqrt", Float, |f, x| f.unary("stablehlo.rsqrt", x)),
        ("sin", Float, |f, x| f.unary("stablehlo.sine", x)),
        ("cos", Float, |f, x| f.unary("stablehlo.cosine", x)),
        ("tan", Float, |f, x| f.unary("stablehlo.tan", x)),
        ("tanh", Float, |f, x| f.unary("stablehlo.tanh", x)),
        ("atan", Float, |f, x| f.unary("chlo.atan", x)),
        ("asin", Float, |f, x| f.unary("chlo.asin", x)),
        ("acos", Float, |f, x| f.unary("chlo.acos", x)),
        ("sinh", Float, |f, x| f.unary("chlo.sinh", x)),
        ("cosh", Float, |f, x| f.unary("chlo.cosh", x)),
        ("asinh", Float, |f, x| f.unary("chlo.asinh", x)),
        ("acosh", Float, |f, x| f.unary("chlo.acosh", x)),
        ("atanh", Float, |f, x| f.unary("chlo.atanh", x)),
        ("erfinv", Float, |f, x| f.unary("chlo.erf_inv", x)),
        ("log10", Float, |f, x| {
            let l = f.unary("stablehlo.log", x);
            let c = f.full_like(x, std::f64::consts::LOG10_E);
            f.mul(l, c)
        }),
        // `power` rather than exp(x ln 2): exact for integral x.
        ("exp2", Float, |f, x| {
            let two = f.full_like(x, 2.0);
            f.binary("stablehlo.power", two, x)
        }),
        ("sigmoid", Float, |f, x| f.unary("stablehlo.logistic", x)),
        ("erf", Float, |f, x| f.unary("chlo.erf", x)),
        ("reciprocal", Float, |f, x| {
            let one = f.full_like(x, 1.0);
            f.div(one, x)
        }),
        ("relu", Same, |f, x| {
            let zero = f.full_like(x, 0.0);
            f.max(x, zero)
        }),
        ("silu", Float, |f, x| {
            let s = f.unary("stablehlo.logistic", x);
            f.mul(x, s)
        }),
        ("floor", Same, |f, x| if f.ty(x).elem.is_float() { f.unary("stablehlo.floor", x) } else { x }),
        ("ceil", Same, |f, x| if f.ty(x).elem.is_float() { f.unary("stablehlo.ceil", x) } else { x }),
        ("round", Same, |f, x| if f.ty(x).elem.is_float() { f.unary("stablehlo.round_nearest_even", x) } else { x }),
        ("trunc", Same, |f, x| if f.ty(x).elem.is_float() { trunc(f, x) } else { x }),
        ("sign", Same, sign),
    ];
    for &(name, out, body) in table {
        unary(r, name, out, body);
    }
    // For real tensors `sgn` is `sign`; for complex ones `x / |x|` (0 at 0).
    unary(r, "sgn", Same, |f, x| {
        if !f.ty(x).elem.is_complex() {
            return sign(f, x);
        }
        let m = f.unary_to("stablehlo.abs", x, f.ty(x).elem.real());
        let zero = f.full_like(m, 0.0);
        let at_zero = f.compare(Cmp::Eq, m, zero);
        let mc = f.complex(m, zero);
        let q = f.div(x, mc);
        let czero = f.full_like(x, 0.0);
        f.select(at_zero, czero, q)
    });
    r.op_and_inplace("aten::frac(Tensor self) -> Tensor", |cx, a| {
        let x = a.tensor(0)?;
        let d = cx.dtype(x);
        if !d.is_float() {
            bail_op!(&*cx.op, "\"frac_cpu\" not implemented for '{d}'");
        }
        // x - trunc(x) is exact in x's own precision.
        Ok(vec![apply_unary(cx, x, Same, |f, x| {
            let t = trunc(f, x);
            f.sub(x, t)
        })])
    });
    r.op_and_inplace("aten::bitwise_not(Tensor self) -> Tensor", |cx, a| {
        let x = a.tensor(0)?;
        let d = cx.dtype(x);
        if d.is_float() {
            bail_op!(&*cx.op, "\"bitwise_not_cpu\" not implemented for '{d}'");
        }
        // `not` is bitwise on integers and logical on i1.
        Ok(vec![cx.f.not(x)])
    });
    r.op_and_inplace("aten::gelu(Tensor self, *, str approximate='none') -> Tensor", |cx, a| {
        let x = a.tensor(0)?;
        let tanh = match a.opt_str(1).unwrap_or("none") {
            "none" => false,
            "tanh" => true,
            other => bail_op!(&*cx.op, "approximate must be 'none' or 'tanh', not {other:?}"),
        };
        let d = float_of(cx.dtype(x));
        let xc = cx.f.convert(x, d.opmath());
        let y = gelu(&mut cx.f, xc, tanh);
        Ok(vec![cx.f.convert(y, d)])
    });
    r.op_and_inplace("aten::logical_not(Tensor self) -> Tensor", |cx, a| {
        let x = a.tensor(0)?;
        let b = to_bool(cx, x);
        Ok(vec![cx.f.not(b)])
    });
    r.op("aten::isnan(Tensor self) -> Tensor", |cx, a| {
        let x = a.tensor(0)?;
        Ok(vec![cx.f.compare(Cmp::Ne, x, x)])
    });
    r.op("aten::isinf(Tensor self) -> Tensor", |cx, a| {
        let x = a.tensor(0)?;
        if !cx.ty(x).elem.is_float() {
            let z = cx.f.full_like(x, 0.0);
            return Ok(vec![cx.f.compare(Cmp::Ne, z, z)]);
        }
        let ab = cx.f.unary("stablehlo.abs", x);
        let inf = cx.f.full_like(x, f64::INFINITY);
        Ok(vec![cx.f.compare(Cmp::Eq, ab, inf)])
    });
    r.op("aten::isfinite(Tensor self) -> Tensor", |cx, a| {
        let x = a.tensor(0)?;
        if !cx.ty(x).elem.is_float() {
            let z = cx.f.full_like(x, 0.0);
            return Ok(vec![cx.f.compare(Cmp::Eq, z, z)]);
        }
        Ok(vec![cx.f.unary_to("stablehlo.is_finite", x, crate::hlo::Elem::Pred)])
    });
}

/// Rounds toward zero.
/// The principal square root. Of a complex value, by C99's `csqrt`: the
/// sign of a zero imaginary part picks the half-plane (`sqrt(-4 - 0i)` is
/// `-2i`), which StableHLO's complex sqrt does not do.
fn sqrt(f: &mut Func, x: V) -> V {
    if !f.ty(x).elem.is_complex() {
        return f.unary("stablehlo.sqrt", x);
    }
    let (re, im) = (f.real(x), f.imag(x));
    let neg = f.signbit(im);
    let aim = f.unary("stablehlo.abs", im);
    let upper = f.complex(re, aim);
    let y = f.unary("stablehlo.sqrt", upper);
    let yc = super::complex::conj(f, y);
    f.select(neg, yc, y)
}

/// `sign` of a real value: -1, 0 or 1 (NaN and -0 give 0, as in PyTorch).
fn sign(f: &mut Func, x: V) -> V {
    if f.ty(x).elem.is_unsigned() {
        // Unsigned (and bool): 1 where nonzero, else 0.
        let zero = f.full_like(x, 0.0);
        let nz = f.compare(Cmp::Ne, x, zero);
        let elem = f.ty(x).elem;
        f.convert(nz, elem)
    } else if f.ty(x).elem.is_float() {
        // (x > 0) - (x < 0), as PyTorch computes it: NaN and -0 give 0.
        let zero = f.full_like(x, 0.0);
        let pos = f.compare(Cmp::Gt, x, zero);
        let neg = f.compare(Cmp::Lt, x, zero);
        let elem = f.ty(x).elem;
        let (pos, neg) = (f.convert(pos, elem), f.convert(neg, elem));
        f.sub(pos, neg)
    } else {
        f.unary("stablehlo.sign", x)
    }
}

fn trunc(f: &mut Func, x: V) -> V {
    let s = f.unary("stablehlo.sign", x);
    let a = f.unary("stablehlo.abs", x);
    let fl = f.unary("stablehlo.floor", a);
    f.mul(s, fl)
}

/// `x != 0` as bool.
pub(crate) fn to_bool(cx: &mut Cx, x: V) -> V {
    if cx.ty(x).elem == crate::hlo::Elem::Pred {
        return x;
    }
    let zero = cx.f.full_like(x, 0.0);
    cx.f.compare(Cmp::Ne, x, zero)
}

// ------------------------------------------------------------------ binary

/// A binary body in the compute dtype; `d` is the result dtype.
type BinBody = fn(&mut Cx, V, V, DType) -> Result<V>;

/// Promotes `a` and `b`, computes in opmath, converts back.
fn apply_binary(cx: &mut Cx, a: Ew, b: Ew, out: Option<DType>, body: BinBody) -> Result<V> {
    let d = out.unwrap_or_else(|| result_dtype(cx, &[a, b]));
    let (vs, _) = prepare(cx, &[a, b], d.opmath())?;
    let y = body(cx, vs[0], vs[1], d)?;
    Ok(cx.f.convert(y, d))
}

/// Registers the `.Tensor` and `.Scalar` overloads and their in-place forms.
fn binary(r: &mut Builder, name: &str, body: BinBody) {
    for (overload, ty) in [("Tensor", "Tensor"), ("Scalar", "Scalar")] {
        r.op_and_inplace(&format!("aten::{name}.{overload}(Tensor self, {ty} other) -> Tensor"), move |cx, a| {
            let (x, y) = (Ew::arg(a, 0)?, Ew::arg(a, 1)?);
            Ok(vec![apply_binary(cx, x, y, None, body)?])
        });
    }
}

/// `self ± alpha * other`.
fn add_sub(r: &mut Builder, name: &'static str, sub: bool) {
    for (overload, ty) in [("Tensor", "Tensor"), ("Scalar", "Scalar")] {
        r.op_and_inplace(
            &format!("aten::{name}.{overload}(Tensor self, {ty} other, *, Scalar alpha=1) -> Tensor"),
            move |cx, a| {
                let (x, y) = (Ew::arg(a, 0)?, Ew::arg(a, 1)?);
                let alpha = a.scalar(2)?;
                let d = result_dtype(cx, &[x, y]);
                let is_bool = |e: Ew| match e {
                    Ew::T(v) => cx.dtype(v) == DType::Bool,
                    Ew::S(s) => s.kind == crate::dtype::ScalarKind::Bool,
                };
                if sub && is_bool(x) && is_bool(y) {
                    bail_op!(
                        &*cx.op,
                        "Subtraction, the `-` operator, with two bool tensors is not supported. Use the `^` or \
                         `logical_xor()` operator instead."
                    );
                }
                if sub && (is_bool(x) || is_bool(y)) {
                    bail_op!(
                        &*cx.op,
                        "Subtraction, the `-` operator, with a bool tensor is not supported. If you are trying to \
                         invert a mask, use the `~` or `logical_not()` operator instead."
                    );
                }
                if !(d.is_float() || d.is_complex()) && alpha.kind == crate::dtype::ScalarKind::Float {
                    bail_op!(&*cx.op, "For integral input tensors, argument alpha must not be a floating point number.");
                }
                let (vs, dims) = prepare(cx, &[x, y], d.opmath())?;
                let al = materialize(cx, Ew::S(alpha), d.opmath(), &dims);
                let scaled = if d == DType::Bool { cx.f.and(vs[1], al) } else { cx.f.mul(vs[1], al) };
                let out = match (sub, d == DType::Bool) {
                    (false, true) => cx.f.or(vs[0], scaled),
                    (false, false) => cx.f.add(vs[0], scaled),
                    (true, _) => cx.f.sub(vs[0], scaled),
                };
                Ok(vec![cx.f.convert(out, d)])
            },
        );
    }
}

/// `r != 0 && sign(r) != sign(b)`: where a truncating remainder `r` of a
/// division by `b` needs the floor correction.
fn nonzero_with_other_sign(f: &mut Func, r: V, b: V) -> V {
    let zero = f.full_like(r, 0.0);
    let r_nz = f.compare(Cmp::Ne, r, zero);
    let r_neg = f.compare(Cmp::Lt, r, zero);
    let b_neg = f.compare(Cmp::Lt, b, zero);
    let signs = f.compare(Cmp::Ne, r_neg, b_neg);
    f.and(r_nz, signs)
}

/// Floor division as PyTorch computes it for floats (`div_floor_floating`):
/// exact for values that `floor(a / b)` would round wrongly.
fn div_floor_float(f: &mut Func, a: V, b: V) -> V {
    let m = f.binary("stablehlo.remainder", a, b);
    let am = f.sub(a, m);
    let div = f.div(am, b);
    let zero = f.full_like(a, 0.0);
    let one = f.full_like(a, 1.0);
    let adjust = nonzero_with_other_sign(f, m, b);
    let dm1 = f.sub(div, one);
    let div = f.select(adjust, dm1, div);
    let fl = f.unary("stablehlo.floor", div);
    let frac = f.sub(div, fl);
    let half = f.full_like(a, 0.5);
    let round_up = f.compare(Cmp::Gt, frac, half);
    let fl1 = f.add(fl, one);
    let fl = f.select(round_up, fl1, fl);
    // b == 0 (or a division that is exactly 0): fall back to the true quotient.
    let q = f.div(a, b);
    let div_zero = f.compare(Cmp::Eq, div, zero);
    let sign_q = f.unary("stablehlo.sign", q);
    let signed_zero = f.mul(sign_q, zero);
    let fl = f.select(div_zero, signed_zero, fl);
    let b_zero = f.compare(Cmp::Eq, b, zero);
    f.select(b_zero, q, fl)
}

/// Integer floor division: truncating division corrected toward -inf.
fn div_floor_int(f: &mut Func, a: V, b: V) -> V {
    let q = f.div(a, b);
    let r = f.binary("stablehlo.remainder", a, b);
    let one = f.full_like(a, 1.0);
    let adjust = nonzero_with_other_sign(f, r, b);
    let qm1 = f.sub(q, one);
    f.select(adjust, qm1, q)
}

fn divide(cx: &mut Cx, x: Ew, y: Ew, mode: Option<&str>) -> Result<V> {
    let d = result_dtype(cx, &[x, y]);
    match mode {
        None => {
            let d = float_of(d);
            let (vs, _) = prepare(cx, &[x, y], d.opmath())?;
            let q = cx.f.div(vs[0], vs[1]);
            Ok(cx.f.convert(q, d))
        }
        Some("trunc") | Some("floor") => {
            if d == DType::Bool {
                bail_op!(&*cx.op, "rounding division is not supported for bool tensors");
            }
            let (vs, _) = prepare(cx, &[x, y], d.opmath())?;
            let q = match (mode, d.is_float()) {
                (Some("trunc"), true) => {
                    // PyTorch rounds the quotient to the tensor's dtype
                    // before truncating (it matters for f16/bf16).
                    let q = cx.f.div(vs[0], vs[1]);
                    let q = cx.f.convert(q, d);
                    let q = cx.f.convert(q, d.opmath());
                    trunc(&mut cx.f, q)
                }
                (Some("trunc"), false) => cx.f.div(vs[0], vs[1]),
                (_, true) => div_floor_float(&mut cx.f, vs[0], vs[1]),
                (_, false) => div_floor_int(&mut cx.f, vs[0], vs[1]),
            };
            Ok(cx.f.convert(q, d))
        }
        Some(other) => bail_op!(
            &*cx.op,
            "div expected rounding_mode to be one of None, 'trunc', or 'floor' but found '{other}'"
        ),
    }
}

fn register_binary(r: &mut Builder) {
    add_sub(r, "add", false);
    add_sub(r, "sub", true);
    r.op("aten::rsub.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor", |cx, a| {
        let (x, y, alpha) = (Ew::arg(a, 0)?, Ew::arg(a, 1)?, a.scalar(2)?);
        let d = result_dtype(cx, &[x, y]);
        let (vs, dims) = prepare(cx, &[x, y], d.opmath())?;
        let al = materialize(cx, Ew::S(alpha), d.opmath(), &dims);
        let s = cx.f.mul(vs[0], al);
        let o = cx.f.sub(vs[1], s);
        Ok(vec![cx.f.convert(o, d)])
    });
    binary(r, "mul", |cx, a, b, d| Ok(if d == DType::Bool { cx.f.and(a, b) } else { cx.f.mul(a, b) }));
    for (overload, ty) in [("Tensor", "Tensor"), ("Scalar", "Scalar")] {
        r.op_and_inplace(&format!("aten::div.{overload}(Tensor self, {ty} other) -> Tensor"), |cx, a| {
            Ok(vec![divide(cx, Ew::arg(a, 0)?, Ew::arg(a, 1)?, None)?])
        });
        r.op_and_inplace(
            &format!("aten::div.{overload}_mode(Tensor self, {ty} other, *, str? rounding_mode) -> Tensor"),
            |cx, a| Ok(vec![divide(cx, Ew::arg(a, 0)?, Ew::arg(a, 1)?, a.opt_str(2))?]),
        );
    }
    r.op_and_inplace("aten::floor_divide(Tensor self, Tensor other) -> Tensor", |cx, a| {
        Ok(vec![divide(cx, Ew::arg(a, 0)?, Ew::arg(a, 1)?, Some("floor"))?])
    });
    binary(r, "remainder", |cx, a, b, d| {
        if d == DType::Bool {
            bail_op!(&*cx.op, "\"remainder_cpu\" not implemented for 'Bool'");
        }
        let f = &mut cx.f;
        let m = f.binary("stablehlo.remainder", a, b);
        // Python semantics: the result has the sign of the divisor.
        let adjust = nonzero_with_other_sign(f, m, b);
        let mb = f.add(m, b);
        Ok(f.select(adjust, mb, m))
    });
    binary(r, "fmod", |cx, a, b, d| {
        if d == DType::Bool {
            bail_op!(&*cx.op, "\"fmod_cpu\" not implemented for 'Bool'");
        }
        Ok(cx.f.binary("stablehlo.remainder", a, b))
    });
    for name in ["maximum", "minimum"] {
        let max = name == "maximum";
        r.op(&format!("aten::{name}(Tensor self, Tensor other) -> Tensor"), move |cx, a| {
            let (x, y) = (Ew::arg(a, 0)?, Ew::arg(a, 1)?);
            Ok(vec![apply_binary(cx, x, y, None, if max { |cx, a, b, _| Ok(cx.f.max(a, b)) } else { |cx, a, b, _| Ok(cx.f.min(a, b)) })?])
        });
    }
    // pow: Tensor ** Tensor, Tensor ** Scalar, Scalar ** Tensor.
    let pow_body: BinBody = |cx, a, b, d| {
        if d == DType::Bool {
            bail_op!(&*cx.op, "pow is not implemented for bool tensors");
        }
        Ok(cx.f.binary("stablehlo.power", a, b))
    };
    r.op_and_inplace("aten::pow.Tensor_Tensor(Tensor self, Tensor exponent) -> Tensor", move |cx, a| {
        Ok(vec![apply_binary(cx, Ew::arg(a, 0)?, Ew::arg(a, 1)?, None, pow_body)?])
    });
    r.op_and_inplace("aten::pow.Tensor_Scalar(Tensor self, Scalar exponent) -> Tensor", move |cx, a| {
        let (x, e) = (Ew::arg(a, 0)?, Ew::arg(a, 1)?);
        Ok(vec![apply_binary(cx, x, e, None, pow_body)?])
    });
    r.op("aten::pow.Scalar(Scalar self, Tensor exponent) -> Tensor", move |cx, a| {
        Ok(vec![apply_binary(cx, Ew::arg(a, 0)?, Ew::arg(a, 1)?, None, pow_body)?])
    });
    r.op_and_inplace("aten::atan2(Tensor self, Tensor other) -> Tensor", |cx, a| {
        let (x, y) = (Ew::arg(a, 0)?, Ew::arg(a, 1)?);
        let d = float_of(result_dtype(cx, &[x, y]));
        Ok(vec![apply_binary(cx, x, y, Some(d), |cx, a, b, _| Ok(cx.f.binary("stablehlo.atan2", a, b)))?])
    });
    r.op_and_inplace("aten::hypot(Tensor self, Tensor other) -> Tensor", |cx, a| {
        Ok(vec![apply_binary(cx, Ew::arg(a, 0)?, Ew::arg(a, 1)?, None, |cx, a, b, d| {
            if !d.is_float() {
                bail_op!(&*cx.op, "\"hypot_cpu\" not implemented for '{d}'");
            }
            Ok(hypot(&mut cx.f, a, b))
        })?])
    });
    r.op_and_inplace("aten::lerp.Scalar(Tensor self, Tensor end, Scalar weight) -> Tensor", |cx, a| {
        Ok(vec![lerp(cx, a.tensor(0)?, a.tensor(1)?, Ew::S(a.scalar(2)?))?])
    });
    r.op_and_inplace("aten::lerp.Tensor(Tensor self, Tensor end, Tensor weight) -> Tensor", |cx, a| {
        Ok(vec![lerp(cx, a.tensor(0)?, a.tensor(1)?, Ew::T(a.tensor(2)?))?])
    });
    r.op_and_inplace("aten::addcmul(Tensor self, Tensor tensor1, Tensor tensor2, *, Scalar value=1) -> Tensor", |cx, a| {
        Ok(vec![addc(cx, a, false)?])
    });
    r.op_and_inplace("aten::addcdiv(Tensor self, Tensor tensor1, Tensor tensor2, *, Scalar value=1) -> Tensor", |cx, a| {
        Ok(vec![addc(cx, a, true)?])
    });
    r.op_and_inplace("aten::clamp(Tensor self, Scalar? min=None, Scalar? max=None) -> Tensor", |cx, a| {
        clamp(cx, Ew::arg(a, 0)?, Ew::opt_arg(a, 1), Ew::opt_arg(a, 2))
    });
    r.op_and_inplace("aten::clamp.Tensor(Tensor self, Tensor? min=None, Tensor? max=None) -> Tensor", |cx, a| {
        clamp(cx, Ew::arg(a, 0)?, Ew::opt_arg(a, 1), Ew::opt_arg(a, 2))
    });
    r.op_and_inplace("aten::clamp_min(Tensor self, Scalar min) -> Tensor", |cx, a| {
        clamp(cx, Ew::arg(a, 0)?, Ew::opt_arg(a, 1), None)
    });
    r.op_and_inplace("aten::clamp_min.Tensor(Tensor self, Tensor min) -> Tensor", |cx, a| {
        clamp(cx, Ew::arg(a, 0)?, Ew::opt_arg(a, 1), None)
    });
    r.op_and_inplace("aten::clamp_max.Tensor(Tensor self, Tensor max) -> Tensor", |cx, a| {
        clamp(cx, Ew::arg(a, 0)?, None, Ew::opt_arg(a, 1))
    });
    r.op_and_inplace("aten::clamp_max(Tensor self, Scalar max) -> Tensor", |cx, a| {
        clamp(cx, Ew::arg(a, 0)?, None, Ew::opt_arg(a, 1))
    });
    r.op("aten::where.self(Tensor condition, Tensor self, Tensor other) -> Tensor", |cx, a| {
        where_(cx, a.tensor(0)?, Ew::arg(a, 1)?, Ew::arg(a, 2)?)
    });
    r.op("aten::where.ScalarOther(Tensor condition, Tensor self, Scalar other) -> Tensor", |cx, a| {
        where_(cx, a.tensor(0)?, Ew::arg(a, 1)?, Ew::arg(a, 2)?)
    });
    r.op("aten::where.ScalarSelf(Tensor condition, Scalar self, Tensor other) -> Tensor", |cx, a| {
        where_(cx, a.tensor(0)?, Ew::arg(a, 1)?, Ew::arg(a, 2)?)
    });
}

/// `sqrt(a^2 + b^2)` without overflow or underflow in the squares, as C's
/// `hypot`: inf if either is inf (even with a NaN), else NaN propagates.
fn hypot(f: &mut Func, a: V, b: V) -> V {
    let (a, b) = (f.unary("stablehlo.abs", a), f.unary("stablehlo.abs", b));
    let hi = f.max(a, b);
    let lo = f.min(a, b);
    let r = f.div(lo, hi);
    let one = f.full_like(a, 1.0);
    let r2 = f.mul(r, r);
    let s = f.add(one, r2);
    let s = f.unary("stablehlo.sqrt", s);
    let y = f.mul(hi, s);
    // hi == 0 makes r 0/0; the result is 0.
    let zero = f.full_like(a, 0.0);
    let hi_zero = f.compare(Cmp::Eq, hi, zero);
    let y = f.select(hi_zero, zero, y);
    let inf = f.full_like(a, f64::INFINITY);
    let a_inf = f.compare(Cmp::Eq, a, inf);
    let b_inf = f.compare(Cmp::Eq, b, inf);
    let any_inf = f.or(a_inf, b_inf);
    f.select(any_inf, inf, y)
}

/// `self + weight * (end - self)`, switching to `end - (end - self) * (1 -
/// weight)` for `|weight| >= 0.5` as PyTorch does, in opmath.
fn lerp(cx: &mut Cx, x: V, end: V, w: Ew) -> Result<V> {
    let d = cx.dtype(x);
    if cx.dtype(end) != d {
        bail_op!(&*cx.op, "expected dtype {d} for `end` but got dtype {}", cx.dtype(end));
    }
    if let Ew::T(wt) = w {
        if cx.dtype(wt) != d {
            bail_op!(&*cx.op, "expected dtype {d} for `weight` but got dtype {}", cx.dtype(wt));
        }
    }
    if !d.is_float() {
        bail_op!(&*cx.op, "\"lerp_kernel\" not implemented for '{d}'");
    }
    let (vs, _) = prepare(cx, &[Ew::T(x), Ew::T(end), w], d.opmath())?;
    let (s, e, w) = (vs[0], vs[1], vs[2]);
    let f = &mut cx.f;
    let diff = f.sub(e, s);
    let aw = f.unary("stablehlo.abs", w);
    let half = f.full_like(w, 0.5);
    let small = f.compare(Cmp::Lt, aw, half);
    let wd = f.mul(w, diff);
    let from_self = f.add(s, wd);
    let one = f.full_like(w, 1.0);
    let omw = f.sub(one, w);
    let dw = f.mul(diff, omw);
    let from_end = f.sub(e, dw);
    let y = f.select(small, from_self, from_end);
    Ok(cx.f.convert(y, d))
}

/// `addcmul`: `self + value * t1 * t2`; `addcdiv`: `self + value * t1 / t2`,
/// evaluated left to right in opmath as PyTorch's CPU kernels do.
fn addc(cx: &mut Cx, a: &super::Args, div: bool) -> Result<V> {
    let (x, t1, t2) = (Ew::arg(a, 0)?, Ew::arg(a, 1)?, Ew::arg(a, 2)?);
    let value = a.scalar(3)?;
    let d = result_dtype(cx, &[x, t1, t2]);
    let integral = |e: Ew| matches!(e, Ew::T(v) if !cx.dtype(v).is_float());
    if div && integral(t1) && integral(t2) {
        bail_op!(
            &*cx.op,
            "Integer division with addcdiv is no longer supported, and in a future release addcdiv will perform a \
             true division of tensor1 and tensor2. The historic addcdiv behavior can be implemented as (input + value * \
             torch.trunc(tensor1 / tensor2)).to(input.dtype) for integer inputs and as (input + value * tensor1 / \
             tensor2) for float inputs. The future addcdiv behavior is just the latter implementation: (input + value \
             * tensor1 / tensor2), for all dtypes."
        );
    }
    if d == DType::Bool {
        bail_op!(&*cx.op, "{} is not implemented for bool tensors", if div { "addcdiv" } else { "addcmul" });
    }
    let (vs, dims) = prepare(cx, &[x, t1, t2], d.opmath())?;
    let v = materialize(cx, Ew::S(value), d.opmath(), &dims);
    let s = cx.f.mul(v, vs[1]);
    let s = if div { cx.f.div(s, vs[2]) } else { cx.f.mul(s, vs[2]) };
    let y = cx.f.add(vs[0], s);
    Ok(cx.f.convert(y, d))
}

fn where_(cx: &mut Cx, cond: V, x: Ew, y: Ew) -> Result<Vec<V>> {
    if cx.dtype(cond) != DType::Bool {
        bail_op!(&*cx.op, "where expected condition to be a boolean tensor, but got a tensor with dtype {}", cx.dtype(cond));
    }
    let d = result_dtype(cx, &[x, y]);
    let dims = super::common::broadcast_shape(cx, &[Ew::T(cond), x, y])?;
    let c = cx.f.broadcast_to(cond, &dims);
    let xv = materialize(cx, x, d, &dims);
    let yv = materialize(cx, y, d, &dims);
    Ok(vec![cx.f.select(c, xv, yv)])
}

fn clamp(cx: &mut Cx, x: Ew, lo: Option<Ew>, hi: Option<Ew>) -> Result<Vec<V>> {
    if lo.is_none() && hi.is_none() {
        bail_op!(&*cx.op, "At least one of 'min' or 'max' must not be None");
    }
    let mut all = vec![x];
    all.extend(lo);
    all.extend(hi);
    let d = result_dtype(cx, &all);
    let (vs, _) = prepare(cx, &all, d.opmath())?;
    let mut y = vs[0];
    let mut i = 1;
    if lo.is_some() {
        y = cx.f.max(y, vs[i]);
        i += 1;
    }
    if hi.is_some() {
        y = cx.f.min(y, vs[i]);
    }
    Ok(vec![cx.f.convert(y, d)])
}

// ------------------------------------------------------- compare / logical

fn register_compare_logical(r: &mut Builder) {
    for (name, dir) in [("eq", Cmp::Eq), ("ne", Cmp::Ne), ("lt", Cmp::Lt), ("le", Cmp::Le), ("gt", Cmp::Gt), ("ge", Cmp::Ge)] {
        for (overload, ty) in [("Tensor", "Tensor"), ("Scalar", "Scalar")] {
            r.op_and_inplace(&format!("aten::{name}.{overload}(Tensor self, {ty} other) -> Tensor"), move |cx, a| {
                let (x, y) = (Ew::arg(a, 0)?, Ew::arg(a, 1)?);
                let d = result_dtype(cx, &[x, y]);
                let (vs, _) = prepare(cx, &[x, y], d)?;
                Ok(vec![cx.f.compare(dir, vs[0], vs[1])])
            });
        }
    }
    for name in ["logical_and", "logical_or", "logical_xor"] {
        r.op_and_inplace(&format!("aten::{name}(Tensor self, Tensor other) -> Tensor"), move |cx, a| {
            let (x, y) = (a.tensor(0)?, a.tensor(1)?);
            let dims = super::common::broadcast_shape(cx, &[Ew::T(x), Ew::T(y)])?;
            let (bx, by) = (to_bool(cx, x), to_bool(cx, y));
            let (bx, by) = (cx.f.broadcast_to(bx, &dims), cx.f.broadcast_to(by, &dims));
            Ok(vec![match name {
                "logical_and" => cx.f.and(bx, by),
                "logical_or" => cx.f.or(bx, by),
                _ => cx.f.binary("stablehlo.xor", bx, by),
            }])
        });
    }
    for (name, op) in [("bitwise_and", "stablehlo.and"), ("bitwise_or", "stablehlo.or"), ("bitwise_xor", "stablehlo.xor")] {
        for (overload, ty) in [("Tensor", "Tensor"), ("Scalar", "Scalar")] {
            r.op_and_inplace(&format!("aten::{name}.{overload}(Tensor self, {ty} other) -> Tensor"), move |cx, a| {
                let (x, y) = (Ew::arg(a, 0)?, Ew::arg(a, 1)?);
                let d = result_dtype(cx, &[x, y]);
                if d.is_float() {
                    bail_op!(&*cx.op, "bitwise ops are only supported for integer and bool tensors, not {d}");
                }
                let (vs, _) = prepare(cx, &[x, y], d)?;
                Ok(vec![cx.f.binary(op, vs[0], vs[1])])
            });
        }
    }    for (name, left) in [("bitwise_left_shift", true), ("bitwise_right_shift", false)] {
        for (overload, other) in [("Tensor", "Tensor"), ("Tensor_Scalar", "Scalar")] {
            let decl = format!("aten::{name}.{overload}(Tensor self, {other} other) -> Tensor");
            r.op_and_inplace(&decl, move |cx, a| shift(cx, a, left));
        }
        r.op(&format!("aten::{name}.Scalar_Tensor(Scalar self, Tensor other) -> Tensor"), move |cx, a| shift(cx, a, left));
    }
    // The Python operators `<<`, `>>`, `<<=` and `>>=`.
    for (op, left) in [("lshift", true), ("rshift", false)] {
        for other in ["Scalar", "Tensor"] {
            r.op(&format!("aten::__{op}__.{other}(Tensor self, {other} other) -> Tensor"), move |cx, a| shift(cx, a, left));
            r.op(&format!("aten::__i{op}__.{other}(Tensor(a!) self, {other} other) -> Tensor(a!)"), move |cx, a| {
                shift(cx, a, left)
            });
        }
    }
    for (name, lcm) in [("gcd", false), ("lcm", true)] {
        r.op_and_inplace(&format!("aten::{name}(Tensor self, Tensor other) -> Tensor"), move |cx, a| gcd_lcm(cx, a, lcm));
    }
}

/// Integer shifts as PyTorch's CPU kernels define them for any amount: a
/// left shift by a negative amount or by the width or more is 0; a right
/// shift by such an amount fills with the sign (`a >> (width - 1)` for
/// signed types, 0 for unsigned).
fn shift(cx: &mut Cx, a: &Args, left: bool) -> Result<Vec<V>> {
    let (x, y) = (Ew::arg(a, 0)?, Ew::arg(a, 1)?);
    let d = result_dtype(cx, &[x, y]);
    if !d.is_int() {
        let name = if left { "lshift_cpu" } else { "rshift_cpu" };
        bail_op!(&*cx.op, "\"{name}\" not implemented for '{d}'");
    }
    let (vs, _) = prepare(cx, &[x, y], d)?;
    let (x, n) = (vs[0], vs[1]);
    let bits = (d.size() * 8) as f64;
    let f = &mut cx.f;
    let zero = f.full_like(n, 0.0);
    let neg = f.compare(Cmp::Lt, n, zero);
    let limit = f.full_like(n, if left || !d.is_signed() { bits } else { bits - 1.0 });
    let over = f.compare(Cmp::Ge, n, limit);
    let out_of_range = f.or(neg, over);
    Ok(vec![if left {
        let y = f.binary("stablehlo.shift_left", x, n);
        f.select(out_of_range, zero, y)
    } else if d.is_signed() {
        let y = f.binary("stablehlo.shift_right_arithmetic", x, n);
        let sign = f.full_like(n, bits - 1.0);
        let fill = f.binary("stablehlo.shift_right_arithmetic", x, sign);
        f.select(out_of_range, fill, y)
    } else {
        let y = f.binary("stablehlo.shift_right_logical", x, n);
        f.select(out_of_range, zero, y)
    }])
}

/// `gcd` by Euclid's algorithm on |a| and |b| (one `stablehlo.while` until
/// every element's remainder is 0, at most ~92 steps for int64), and
/// `lcm = |a / gcd * b|` (0 where the gcd is 0). As on the CPU, results
/// wrap where they overflow (types narrower than int32 take |.| in int32
/// first, as C++'s promotion does).
fn gcd_lcm(cx: &mut Cx, a: &Args, lcm: bool) -> Result<Vec<V>> {
    let (x, y) = (Ew::arg(a, 0)?, Ew::arg(a, 1)?);
    let d = result_dtype(cx, &[x, y]);
    if !d.is_int() {
        let name = if lcm { "lcm_cpu" } else { "gcd_cpu" };
        bail_op!(&*cx.op, "\"{name}\" not implemented for '{d}'");
    }
    let (vs, _) = prepare(cx, &[x, y], d)?;
    // (stablehlo.abs takes signed types only.)
    let (ax, bx) = if d.is_signed() {
        (cx.f.unary("stablehlo.abs", vs[0]), cx.f.unary("stablehlo.abs", vs[1]))
    } else {
        (vs[0], vs[1])
    };
    let ty = cx.ty(ax).clone();
    let tys = [ty.clone(), ty.clone()];
    // while any(a != 0): (a, b) = (b % a, a)
    let cond = cx.f.region(&tys, |f, s| {
        let zero = f.full_like(s[0], 0.0);
        let nz = f.compare(Cmp::Ne, s[0], zero);
        vec![super::common::any(f, nz)]
    });
    let body = cx.f.region(&tys, |f, s| {
        let (a, b) = (s[0], s[1]);
        let zero = f.full_like(a, 0.0);
        let one = f.full_like(a, 1.0);
        let nz = f.compare(Cmp::Ne, a, zero);
        // A finished element divides by 1 instead of 0 and keeps its values.
        let div = f.select(nz, a, one);
        let r = f.binary("stablehlo.remainder", b, div);
        vec![f.select(nz, r, a), f.select(nz, a, b)]
    });
    let out = cx.f.op("stablehlo.while", &[ax, bx], &[cond, body], "", &tys);
    let g = out[1];
    if !lcm {
        return Ok(vec![g]);
    }
    let f = &mut cx.f;
    let zero = f.full_like(g, 0.0);
    let one = f.full_like(g, 1.0);
    let g0 = f.compare(Cmp::Eq, g, zero);
    let div = f.select(g0, one, g);
    let q = f.div(vs[0], div);
    // C++ computes narrower types in int, taking |.| before narrowing back.
    let wide = if d.size() < 4 { DType::I32 } else { d };
    let (q, b) = (f.convert(q, wide), f.convert(vs[1], wide));
    let m = f.mul(q, b);
    let m = f.unary("stablehlo.abs", m);
    let m = f.convert(m, d);
    Ok(vec![f.select(g0, zero, m)])
}
