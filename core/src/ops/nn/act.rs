//! Activations and their backward kernels: the ones registered from a
//! scalar-argument body (`elu`, `hardtanh`, `leaky_relu`, `softplus`, ...),
//! `threshold`, `glu`, `log_sigmoid`, the shrinks, PReLU, and the backward
//! of `gelu`, `sigmoid`, `tanh` and the rest. Half-precision inputs compute
//! in f32 and round once, as PyTorch's CPU kernels do.

use crate::bail_op;
use crate::error::Result;
use crate::hlo::{Cmp, Func, V};
use crate::ops::common::{float_of, prepare, result_dtype, up, Ew};
use crate::ops::{Args, Cx, Builder};
use crate::shape;

use super::loss::loss_dtype;

pub(super) fn register(r: &mut Builder) {
    register_activations(r);
    register_basic_backward(r);
    register_forward(r);
    register_backward(r);
}

// ------------------------------------------------------------------ forward

/// `self` split in halves along `dim` (wrapped), which must be even.
fn glu_halves(cx: &mut Cx, x: V, dim: i64) -> Result<(V, V, usize)> {
    let dims = cx.dims(x);
    if dims.is_empty() {
        bail_op!(&*cx.op, "glu does not support scalars because halving size must be even");
    }
    let d = shape::wrap_dim(&cx.op, dim, dims.len())?;
    if dims[d] % 2 != 0 {
        bail_op!(&*cx.op, "Halving dimension must be even, but dimension {d} is size {}", dims[d]);
    }
    let h = dims[d] / 2;
    let a = cx.f.slice_dim(x, d, 0, h, 1);
    let b = cx.f.slice_dim(x, d, h, 2 * h, 1);
    Ok((a, b, d))
}

/// `(x >= -l && x <= l)`: where the shrinks are zero.
fn in_band(f: &mut Func, x: V, l: V) -> V {
    let ml = f.neg(l);
    let ge = f.compare(Cmp::Ge, x, ml);
    let le = f.compare(Cmp::Le, x, l);
    f.and(ge, le)
}

fn register_forward(r: &mut Builder) {
    r.op("aten::glu(Tensor self, int dim=-1) -> Tensor", |cx, a| {
        let x = a.tensor(0)?;
        let d = super::require_float(cx, x, "glu")?;
        let (h0, h1, _) = glu_halves(cx, x, a.int(1)?)?;
        let (h0, h1) = (up(cx, h0), up(cx, h1));
        let s = cx.f.unary("stablehlo.logistic", h1);
        let y = cx.f.mul(h0, s);
        Ok(vec![cx.f.convert(y, d)])
    });
    // PReLU with `weight` already shaped to broadcast (torch.prelu views a
    // per-channel weight as [1, C, 1, ...]): x > 0 ? x : w x.
    r.op("aten::_prelu_kernel(Tensor self, Tensor weight) -> Tensor", |cx, a| {
        let xs = [Ew::arg(a, 0)?, Ew::arg(a, 1)?];
        let d = loss_dtype(cx, &xs, "prelu_cpu")?;
        let (vs, _) = prepare(cx, &xs, d.opmath())?;
        let (x, w) = (vs[0], vs[1]);
        let f = &mut cx.f;
        let zero = f.full_like(x, 0.0);
        let pos = f.compare(Cmp::Gt, x, zero);
        let wx = f.mul(w, x);
        let y = f.select(pos, x, wx);
        Ok(vec![cx.f.convert(y, d)])
    });
    r.op("aten::log_sigmoid_forward(Tensor self) -> (Tensor output, Tensor buffer)", |cx, a| {
        let x = a.tensor(0)?;
        let d = super::require_float(cx, x, "log_sigmoid_cpu")?;
        let xc = up(cx, x);
        // min(0, x) - log1p(exp(-|x|)); the buffer holds exp(-|x|) as on CPU.
        let f = &mut cx.f;
        let zero = f.full_like(xc, 0.0);
        let m = f.min(zero, xc);
        let ab = f.unary("stablehlo.abs", xc);
        let nab = f.neg(ab);
        let z = f.unary("stablehlo.exponential", nab);
        let l = f.unary("stablehlo.log_plus_one", z);
        let y = f.sub(m, l);
        // NaN must survive min(0, NaN).
        let nan = f.compare(Cmp::Ne, xc, xc);
        let y = f.select(nan, xc, y);
        Ok(vec![cx.f.convert(y, d), cx.f.convert(z, d)])
    });
    activation(r, "aten::hardshrink(Tensor self, Scalar lambd=0.5) -> Tensor", false, false, |f, x, s| {
        let band = in_band(f, x, s[0]);
        let zero = f.full_like(x, 0.0);
        f.select(band, zero, x)
    });
    activation(r, "aten::softshrink(Tensor self, Scalar lambd=0.5) -> Tensor", false, false, |f, x, s| {
        // x > l ? x - l : x < -l ? x + l : x * 0 (NaN stays NaN)
        let l = s[0];
        let ml = f.neg(l);
        let above = f.compare(Cmp::Gt, x, l);
        let below = f.compare(Cmp::Lt, x, ml);
        let xm = f.sub(x, l);
        let xp = f.add(x, l);
        let zero = f.full_like(x, 0.0);
        let x0 = f.mul(x, zero);
        let y = f.select(below, xp, x0);
        f.select(above, xm, y)
    });
}

// ----------------------------------------------------------------- backward

/// A backward kernel `f(grad, x, scalars)`: `grad` is argument 0, `x`
/// argument `xi`, the runtime scalars are `scalars`. Both tensors promote
/// together to a float type; the body runs in opmath.
fn backward(
    cx: &mut Cx,
    a: &Args,
    xi: usize,
    scalars: &[usize],
    body: impl FnOnce(&mut Func, V, V, &[V]) -> V,
) -> Result<Vec<V>> {
    let (g, x) = (Ew::arg(a, 0)?, Ew::arg(a, xi)?);
    let d = float_of(result_dtype(cx, &[g, x]));
    let (vs, dims) = prepare(cx, &[g, x], d.opmath())?;
    let ss: Vec<V> = scalars
        .iter()
        .map(|&i| {
            let s = a.scalar(i)?;
            let v = cx.scalar(s, d.opmath());
            Ok(cx.f.broadcast_to(v, &dims))
        })
        .collect::<Result<_>>()?;
    let y = body(&mut cx.f, vs[0], vs[1], &ss);
    Ok(vec![cx.f.convert(y, d)])
}

fn register_backward(r: &mut Builder) {
    r.op("aten::glu_backward(Tensor grad_output, Tensor self, int dim) -> Tensor", |cx, a| {
        let (g, x) = (a.tensor(0)?, a.tensor(1)?);
        let d = super::require_float(cx, x, "glu_backward")?;
        let (h0, h1, dim) = glu_halves(cx, x, a.int(2)?)?;
        let (h0, h1, g) = (up(cx, h0), up(cx, h1), up(cx, g));
        let f = &mut cx.f;
        // d/da = g s, d/db = g a s (1 - s), s = sigmoid(b)
        let s = f.unary("stablehlo.logistic", h1);
        let ga = f.mul(g, s);
        let one = f.full_like(s, 1.0);
        let oms = f.sub(one, s);
        let t = f.mul(s, oms);
        let t = f.mul(t, h0);
        let gb = f.mul(g, t);
        let y = f.concatenate(&[ga, gb], dim);
        Ok(vec![cx.f.convert(y, d)])
    });
    // Both gradients at the broadcast shape of self and weight, as PyTorch's
    // kernel returns them (autograd sums the weight's to its shape).
    r.op(
        "aten::_prelu_kernel_backward(Tensor grad_output, Tensor self, Tensor weight) -> (Tensor, Tensor)",
        |cx, a| {
            let xs = [Ew::arg(a, 0)?, Ew::arg(a, 1)?, Ew::arg(a, 2)?];
            let d = loss_dtype(cx, &xs, "prelu_backward_cpu")?;
            let (vs, _) = prepare(cx, &xs, d.opmath())?;
            let (g, x, w) = (vs[0], vs[1], vs[2]);
            let f = &mut cx.f;
            let zero = f.full_like(x, 0.0);
            let pos = f.compare(Cmp::Gt, x, zero);
            let wg = f.mul(w, g);
            let gx = f.select(pos, g, wg);
            let xg = f.mul(x, g);
            let gw = f.select(pos, zero, xg);
            Ok(vec![cx.f.convert(gx, d), cx.f.convert(gw, d)])
        },
    );
    r.op("aten::log_sigmoid_backward(Tensor grad_output, Tensor self, Tensor buffer) -> Tensor", |cx, a| {
        // g (max_deriv - sign z / (1 + z)), z = exp(-|x|) recomputed rather
        // than read from the buffer (as the CUDA kernel does).
        backward(cx, a, 1, &[], |f, g, x, _| {
            let zero = f.full_like(x, 0.0);
            let one = f.full_like(x, 1.0);
            let neg = f.compare(Cmp::Lt, x, zero);
            let ab = f.unary("stablehlo.abs", x);
            let nab = f.neg(ab);
            let z = f.unary("stablehlo.exponential", nab);
            let opz = f.add(one, z);
            let q = f.div(z, opz);
            // x < 0: 1 - q; else: q
            let omq = f.sub(one, q);
            let dv = f.select(neg, omq, q);
            f.mul(g, dv)
        })
    });
    r.op("aten::hardshrink_backward(Tensor grad_out, Tensor self, Scalar lambd) -> Tensor", |cx, a| {
        backward(cx, a, 1, &[2], |f, g, x, s| {
            let band = in_band(f, x, s[0]);
            let zero = f.full_like(x, 0.0);
            f.select(band, zero, g)
        })
    });
    r.op("aten::softshrink_backward(Tensor grad_output, Tensor self, Scalar lambd) -> Tensor", |cx, a| {
        backward(cx, a, 1, &[2], |f, g, x, s| {
            let band = in_band(f, x, s[0]);
            let zero = f.full_like(x, 0.0);
            f.select(band, zero, g)
        })
    });
    r.op("aten::softplus_backward(Tensor grad_output, Tensor self, Scalar beta, Scalar threshold) -> Tensor", |cx, a| {
        backward(cx, a, 1, &[2, 3], |f, g, x, s| {
            // x beta > threshold ? g : g z / (z + 1), z = exp(x beta)
            let xb = f.mul(x, s[0]);
            let lin = f.compare(Cmp::Gt, xb, s[1]);
            let z = f.unary("stablehlo.exponential", xb);
            let one = f.full_like(x, 1.0);
            let zp = f.add(z, one);
            let gz = f.mul(g, z);
            let q = f.div(gz, zp);
            f.select(lin, g, q)
        })
    });
    r.op(
        "aten::elu_backward(Tensor grad_output, Scalar alpha, Scalar scale, Scalar input_scale, bool is_result, \
         Tensor self_or_result) -> Tensor",
        |cx, a| {
            let is_result = a.bool(4)?;
            backward(cx, a, 5, &[1, 2, 3], move |f, g, x, s| {
                let (alpha, scale, input_scale) = (s[0], s[1], s[2]);
                let negcoef = f.mul(alpha, scale);
                let zero = f.full_like(x, 0.0);
                let nonpos = f.compare(Cmp::Le, x, zero);
                let pos = f.mul(g, scale);
                let neg = if is_result {
                    // g input_scale (out + negcoef)
                    let t = f.add(x, negcoef);
                    let t = f.mul(input_scale, t);
                    f.mul(g, t)
                } else {
                    // g input_scale negcoef exp(x input_scale)
                    let xi = f.mul(x, input_scale);
                    let e = f.unary("stablehlo.exponential", xi);
                    let c = f.mul(input_scale, negcoef);
                    let t = f.mul(c, e);
                    f.mul(g, t)
                };
                f.select(nonpos, neg, pos)
            })
        },
    );
    r.op(
        "aten::hardtanh_backward(Tensor grad_output, Tensor self, Scalar min_val, Scalar max_val) -> Tensor",
        |cx, a| {
            backward(cx, a, 1, &[2, 3], |f, g, x, s| {
                let lo = f.compare(Cmp::Le, x, s[0]);
                let hi = f.compare(Cmp::Ge, x, s[1]);
                let out = f.or(lo, hi);
                let zero = f.full_like(x, 0.0);
                f.select(out, zero, g)
            })
        },
    );
    r.op(
        "aten::leaky_relu_backward(Tensor grad_output, Tensor self, Scalar negative_slope, bool self_is_result) \
         -> Tensor",
        |cx, a| {
            backward(cx, a, 1, &[2], |f, g, x, s| {
                let zero = f.full_like(x, 0.0);
                let pos = f.compare(Cmp::Gt, x, zero);
                let n = f.mul(g, s[0]);
                f.select(pos, g, n)
            })
        },
    );
    r.op("aten::hardsigmoid_backward(Tensor grad_output, Tensor self) -> Tensor", |cx, a| {
        backward(cx, a, 1, &[], |f, g, x, _| {
            // -3 < x < 3 ? g / 6 : 0
            let m3 = f.full_like(x, -3.0);
            let p3 = f.full_like(x, 3.0);
            let gt = f.compare(Cmp::Gt, x, m3);
            let lt = f.compare(Cmp::Lt, x, p3);
            let inside = f.and(gt, lt);
            let six = f.full_like(x, 6.0);
            let q = f.div(g, six);
            let zero = f.full_like(x, 0.0);
            f.select(inside, q, zero)
        })
    });
    r.op("aten::hardswish_backward(Tensor grad_output, Tensor self) -> Tensor", |cx, a| {
        backward(cx, a, 1, &[], |f, g, x, _| {
            // x <= -3 ? 0 : x < 3 ? g (x / 3 + 0.5) : g
            let m3 = f.full_like(x, -3.0);
            let p3 = f.full_like(x, 3.0);
            let low = f.compare(Cmp::Le, x, m3);
            let mid = f.compare(Cmp::Lt, x, p3);
            let t = f.div(x, p3);
            let half = f.full_like(x, 0.5);
            let t = f.add(t, half);
            let gm = f.mul(g, t);
            let zero = f.full_like(x, 0.0);
            let y = f.select(mid, gm, g);
            f.select(low, zero, y)
        })
    });
    r.op("aten::silu_backward(Tensor grad_output, Tensor self) -> Tensor", |cx, a| {
        backward(cx, a, 1, &[], |f, g, x, _| {
            // g s (1 + x (1 - s))
            let s = f.unary("stablehlo.logistic", x);
            let one = f.full_like(x, 1.0);
            let oms = f.sub(one, s);
            let t = f.mul(x, oms);
            let t = f.add(one, t);
            let t = f.mul(s, t);
            f.mul(g, t)
        })
    });
    r.op("aten::mish_backward(Tensor grad_output, Tensor self) -> Tensor", |cx, a| {
        backward(cx, a, 1, &[], |f, g, x, _| {
            // g (t + x s (1 - t^2)), t = tanh(softplus(x)), s = sigmoid(x)
            let s = f.unary("stablehlo.logistic", x);
            let e = f.unary("stablehlo.exponential", x);
            let sp = f.unary("stablehlo.log_plus_one", e);
            let t = f.unary("stablehlo.tanh", sp);
            let one = f.full_like(x, 1.0);
            let t2 = f.mul(t, t);
            let omt2 = f.sub(one, t2);
            let xs = f.mul(x, s);
            let r = f.mul(xs, omt2);
            let r = f.add(t, r);
            f.mul(g, r)
        })
    });
}

// ------------------------------------------ activations with scalar arguments

/// An activation `f(x, scalars...)` of a float tensor, computed in opmath.
pub(super) type ActBody = fn(&mut Func, V, &[V]) -> V;

/// Registers an activation whose trailing arguments are runtime scalars; with
/// `inplace`, also its `aten::name_` form. Only `ints` activations accept
/// integer tensors (`hardtanh` is a clamp).
pub(super) fn activation(r: &mut Builder, decl: &'static str, inplace: bool, ints: bool, body: ActBody) {
    let lower = move |cx: &mut Cx, a: &Args| -> Result<Vec<V>> {
        let x = a.tensor(0)?;
        let name = cx.op.trim_start_matches("aten::").to_string();
        let d = cx.dtype(x);
        if !(d.is_float() || ints && d.is_int()) {
            bail_op!(&*cx.op, "\"{name}\" not implemented for '{d}'");
        }
        let xc = up(cx, x);
        let dims = cx.dims(xc);
        let scalars: Vec<V> = (1..a.len())
            .map(|i| {
                let s = a.scalar(i)?;
                let v = cx.scalar(s, d.opmath());
                Ok(cx.f.broadcast_to(v, &dims))
            })
            .collect::<Result<_>>()?;
        let y = body(&mut cx.f, xc, &scalars);
        Ok(vec![cx.f.convert(y, d)])
    };
    if inplace {
        r.op_and_inplace(decl, lower);
    } else {
        r.op(decl, lower);
    }
}

/// `min(max(x + 3, 0), 6) / 6`.
pub(super) fn hardsigmoid(f: &mut Func, x: V) -> V {
    let three = f.full_like(x, 3.0);
    let zero = f.full_like(x, 0.0);
    let six = f.full_like(x, 6.0);
    let s = f.add(x, three);
    let s = f.max(s, zero);
    let s = f.min(s, six);
    f.div(s, six)
}

pub(super) fn register_activations(r: &mut Builder) {
    activation(
        r,
        "aten::hardtanh(Tensor self, Scalar min_val=-1, Scalar max_val=1) -> Tensor",
        true,
        true,
        |f, x, s| {
            let lo = f.max(x, s[0]);
            f.min(lo, s[1])
        },
    );
    activation(r, "aten::leaky_relu(Tensor self, Scalar negative_slope=0.01) -> Tensor", true, false, |f, x, s| {
        let zero = f.full_like(x, 0.0);
        let pos = f.compare(Cmp::Gt, x, zero);
        let neg = f.mul(x, s[0]);
        f.select(pos, x, neg)
    });
    activation(
        r,
        "aten::elu(Tensor self, Scalar alpha=1, Scalar scale=1, Scalar input_scale=1) -> Tensor",
        true,
        false,
        |f, x, s| {
            // x > 0 ? x * scale : expm1(x * input_scale) * alpha * scale
            let zero = f.full_like(x, 0.0);
            let pos = f.compare(Cmp::Gt, x, zero);
            let p = f.mul(x, s[1]);
            let xi = f.mul(x, s[2]);
            let e = f.unary("stablehlo.exponential_minus_one", xi);
            let neg_coef = f.mul(s[0], s[1]);
            let n = f.mul(e, neg_coef);
            f.select(pos, p, n)
        },
    );
    activation(
        r,
        "aten::softplus(Tensor self, Scalar beta=1, Scalar threshold=20) -> Tensor",
        false,
        false,
        |f, x, s| {
            // x * beta > threshold ? x : log1p(exp(x * beta)) / beta
            let xb = f.mul(x, s[0]);
            let lin = f.compare(Cmp::Gt, xb, s[1]);
            let e = f.unary("stablehlo.exponential", xb);
            let l = f.unary("stablehlo.log_plus_one", e);
            let l = f.div(l, s[0]);
            f.select(lin, x, l)
        },
    );
    activation(r, "aten::hardsigmoid(Tensor self) -> Tensor", true, false, |f, x, _| hardsigmoid(f, x));
    activation(r, "aten::hardswish(Tensor self) -> Tensor", true, false, |f, x, _| {
        let h = hardsigmoid(f, x);
        f.mul(x, h)
    });
    activation(r, "aten::mish(Tensor self) -> Tensor", true, false, |f, x, _| {
        // x * tanh(softplus(x))
        let e = f.unary("stablehlo.exponential", x);
        let sp = f.unary("stablehlo.log_plus_one", e);
        let t = f.unary("stablehlo.tanh", sp);
        f.mul(x, t)
    });
}

/// A backward kernel `f(grad, saved)` with both operands promoted together,
/// computed in opmath and rounded to the promoted dtype.
pub(super) fn backward2(cx: &mut Cx, a: &Args, body: impl FnOnce(&mut Cx, V, V) -> Result<V>) -> Result<Vec<V>> {
    let (g, s) = (Ew::arg(a, 0)?, Ew::arg(a, 1)?);
    let d = float_of(result_dtype(cx, &[g, s]));
    let (vs, _) = prepare(cx, &[g, s], d.opmath())?;
    let y = body(cx, vs[0], vs[1])?;
    Ok(vec![cx.f.convert(y, d)])
}

pub(super) fn gelu_grad(f: &mut Func, x: V, tanh: bool) -> V {
    let half = f.full_like(x, 0.5);
    let one = f.full_like(x, 1.0);
    if tanh {
        // d/dx [0.5 x (1 + tanh(inner))], inner = sqrt(2/pi) (x + 0.044715 x^3)
        let beta = f.full_like(x, (2.0 / std::f64::consts::PI).sqrt());
        let kappa = f.full_like(x, 0.044715);
        let three_kappa = f.full_like(x, 3.0 * 0.044715);
        let x2 = f.mul(x, x);
        let x3 = f.mul(x2, x);
        let kx3 = f.mul(kappa, x3);
        let s = f.add(x, kx3);
        let inner = f.mul(beta, s);
        let t = f.unary("stablehlo.tanh", inner);
        let left = f.mul(half, x);
        let right = f.add(one, t);
        let left_d = f.mul(half, right);
        let t2 = f.mul(t, t);
        let sech2 = f.sub(one, t2);
        let k3x2 = f.mul(three_kappa, x2);
        let inner_d = f.add(one, k3x2);
        let inner_d = f.mul(beta, inner_d);
        let right_d = f.mul(left, sech2);
        let right_d = f.mul(right_d, inner_d);
        f.add(left_d, right_d)
    } else {
        // Phi(x) + x phi(x)
        let r = f.full_like(x, std::f64::consts::FRAC_1_SQRT_2);
        let xs = f.mul(x, r);
        let erf = f.unary("chlo.erf", xs);
        let cdf = f.add(one, erf);
        let cdf = f.mul(half, cdf);
        let mhalf = f.full_like(x, -0.5);
        let x2 = f.mul(x, x);
        let ex = f.mul(mhalf, x2);
        let e = f.unary("stablehlo.exponential", ex);
        let c = f.full_like(x, 1.0 / (2.0 * std::f64::consts::PI).sqrt());
        let pdf = f.mul(e, c);
        let xp = f.mul(x, pdf);
        f.add(cdf, xp)
    }
}

pub(super) fn register_basic_backward(r: &mut Builder) {
    // threshold: `x <= threshold ? value : x` (NaN stays), both scalars in
    // x's dtype, as runtime arguments.
    r.op_and_inplace("aten::threshold(Tensor self, Scalar threshold, Scalar value) -> Tensor", |cx, a| {
        let x = a.tensor(0)?;
        let (d, dims) = (cx.dtype(x), cx.dims(x));
        let t = cx.scalar(a.scalar(1)?, d);
        let t = cx.f.broadcast_to(t, &dims);
        let v = cx.scalar(a.scalar(2)?, d);
        let v = cx.f.broadcast_to(v, &dims);
        let below = cx.f.compare(Cmp::Le, x, t);
        Ok(vec![cx.f.select(below, v, x)])
    });
    r.op("aten::threshold_backward(Tensor grad_output, Tensor self, Scalar threshold) -> Tensor", |cx, a| {
        let (g, s) = (Ew::arg(a, 0)?, Ew::arg(a, 1)?);
        let th = a.scalar(2)?;
        let d = result_dtype(cx, &[g, s]);
        let (vs, dims) = prepare(cx, &[g, s], d)?;
        let t = cx.scalar(th, d);
        let t = cx.f.broadcast_to(t, &dims);
        let below = cx.f.compare(Cmp::Le, vs[1], t);
        let zero = cx.f.full_like(vs[0], 0.0);
        Ok(vec![cx.f.select(below, zero, vs[0])])
    });
    r.op("aten::gelu_backward(Tensor grad_output, Tensor self, *, str approximate='none') -> Tensor", |cx, a| {
        let tanh = match a.opt_str(2).unwrap_or("none") {
            "none" => false,
            "tanh" => true,
            other => bail_op!(&*cx.op, "approximate must be 'none' or 'tanh', not {other:?}"),
        };
        backward2(cx, a, |cx, g, x| {
            let dg = gelu_grad(&mut cx.f, x, tanh);
            Ok(cx.f.mul(g, dg))
        })
    });
    r.op("aten::sigmoid_backward(Tensor grad_output, Tensor output) -> Tensor", |cx, a| {
        backward2(cx, a, |cx, g, y| {
            // grad * (1 - y) * y
            let one = cx.f.full_like(y, 1.0);
            let omy = cx.f.sub(one, y);
            let t = cx.f.mul(g, omy);
            Ok(cx.f.mul(t, y))
        })
    });
    r.op("aten::tanh_backward(Tensor grad_output, Tensor output) -> Tensor", |cx, a| {
        backward2(cx, a, |cx, g, y| {
            // grad * (1 - y^2)
            let one = cx.f.full_like(y, 1.0);
            let y2 = cx.f.mul(y, y);
            let d = cx.f.sub(one, y2);
            Ok(cx.f.mul(g, d))
        })
    });
}
