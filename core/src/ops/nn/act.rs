//! More activations and their backward kernels (`glu`, `log_sigmoid`, the
//! shrinks, PReLU, and the backward of the activations in [`super`]), plus
//! the smooth L1, Huber and binary cross-entropy losses. Half-precision inputs compute in f32 and round
//! once, as PyTorch's CPU kernels do.

use crate::bail_op;
use crate::dtype::DType;
use crate::error::Result;
use crate::hlo::{Cmp, Func, V};
use crate::ops::common::{float_of, prepare, result_dtype, up, Ew};
use crate::ops::{Args, Cx, Builder};
use crate::shape;

use super::activation;

pub(super) fn register(r: &mut Builder) {
    register_losses(r);
    register_forward(r);
    register_backward(r);
}

// ------------------------------------------------------------------- losses

/// The elementwise loss of `|self - target| = z`, from the opmath difference.
type LossBody = fn(&mut Func, V, f64) -> V;

fn smooth_l1(f: &mut Func, diff: V, beta: f64) -> V {
    // z < beta ? 0.5 z^2 / beta : z - 0.5 beta
    let z = f.unary("stablehlo.abs", diff);
    if beta == 0.0 {
        return z;
    }
    let b = f.full_like(z, beta);
    let small = f.compare(Cmp::Lt, z, b);
    let half = f.full_like(z, 0.5);
    let z2 = f.mul(z, z);
    let q = f.mul(half, z2);
    let q = f.div(q, b);
    let hb = f.full_like(z, 0.5 * beta);
    let l = f.sub(z, hb);
    f.select(small, q, l)
}

fn huber(f: &mut Func, diff: V, delta: f64) -> V {
    // z < delta ? 0.5 z^2 : delta (z - 0.5 delta)
    let z = f.unary("stablehlo.abs", diff);
    let dv = f.full_like(z, delta);
    let small = f.compare(Cmp::Lt, z, dv);
    let half = f.full_like(z, 0.5);
    let z2 = f.mul(z, z);
    let q = f.mul(half, z2);
    let hd = f.full_like(z, 0.5 * delta);
    let l = f.sub(z, hd);
    let l = f.mul(dv, l);
    f.select(small, q, l)
}

/// The promoted float dtype of a loss and its backward.
fn loss_dtype(cx: &Cx, xs: &[Ew], name: &str) -> Result<DType> {
    let d = result_dtype(cx, xs);
    if !d.is_float() {
        bail_op!(&*cx.op, "\"{name}\" not implemented for '{d}'");
    }
    Ok(d)
}

/// A pointwise loss: the elementwise loss tensor, rounded to the result type
/// and then reduced (0 none, 1 mean, 2 sum), as PyTorch reduces it.
fn pointwise_loss(cx: &mut Cx, a: &Args, name: &str, param: &str, body: LossBody) -> Result<Vec<V>> {
    let xs = [Ew::arg(a, 0)?, Ew::arg(a, 1)?];
    let (reduction, p) = (a.int(2)?, a.float(3)?);
    if p < 0.0 {
        bail_op!(&*cx.op, "{name} does not support negative values for {param}.");
    }
    let d = loss_dtype(cx, &xs, name)?;
    let (vs, dims) = prepare(cx, &xs, d.opmath())?;
    let diff = cx.f.sub(vs[0], vs[1]);
    let l = body(&mut cx.f, diff, p);
    let l = cx.f.convert(l, d);
    if reduction == 0 {
        return Ok(vec![l]);
    }
    let l = cx.f.convert(l, d.opmath());
    Ok(vec![super::reduce_loss(cx, l, &dims, reduction, d)?])
}

/// The backward of a pointwise loss: `x = self - target`, `n` the reduction
/// scale; `x <= -p ? -n c g : x >= p ? n c g : n x g k` with `c` the slope of
/// the linear part (`1` for smooth L1, `delta` for Huber) and `k` the
/// quadratic factor (`1 / beta`, `1`).
fn pointwise_loss_backward(cx: &mut Cx, a: &Args, name: &str, huber: bool) -> Result<Vec<V>> {
    let xs = [Ew::arg(a, 0)?, Ew::arg(a, 1)?, Ew::arg(a, 2)?];
    let (reduction, p) = (a.int(3)?, a.float(4)?);
    let d = loss_dtype(cx, &xs, name)?;
    let n = shape::numel(&cx.dims(a.tensor(1)?));
    let norm = match reduction {
        0 | 2 => 1.0,
        1 => 1.0 / n as f64,
        other => bail_op!(&*cx.op, "{other} is not a valid value for reduction"),
    };
    let (vs, _) = prepare(cx, &xs, d.opmath())?;
    let (g, x) = (vs[0], cx.f.sub(vs[1], vs[2]));
    let f = &mut cx.f;
    let nv = f.full_like(x, norm);
    let ng = f.mul(nv, g);
    let (slope, k) = if huber { (p, 1.0) } else { (1.0, 1.0 / p) };
    let sl = f.full_like(x, slope);
    let pos = f.mul(ng, sl);
    let neg = f.neg(pos);
    let kv = f.full_like(x, k);
    let mid = f.mul(ng, x);
    let mid = if !huber && p == 0.0 {
        // beta == 0 is the L1 loss: the gradient is the sign of x.
        f.full_like(x, 0.0)
    } else {
        f.mul(mid, kv)
    };
    let pv = f.full_like(x, p);
    let mp = f.neg(pv);
    let below = f.compare(Cmp::Le, x, mp);
    let above = f.compare(Cmp::Ge, x, pv);
    let y = f.select(above, pos, mid);
    let y = f.select(below, neg, y);
    Ok(vec![cx.f.convert(y, d)])
}

/// The operands of `binary_cross_entropy` and its backward: `self`,
/// `target` (PyTorch pairs them after squeezing out their size-1 dims, so
/// a target of shape [3] matches a `self` of [3, 1]) and the
/// optional `weight` broadcast to `self`, all in opmath; and `self`'s dtype.
fn bce_operands(cx: &mut Cx, x: V, t: V, w: Option<V>) -> Result<(V, V, Option<V>, DType)> {
    let d = super::require_float(cx, x, "binary_cross_entropy")?;
    let (xd, td) = (cx.dims(x), cx.dims(t));
    let squeezed = |d: &[i64]| d.iter().copied().filter(|&n| n != 1).collect::<Vec<i64>>();
    let t = if td != xd && squeezed(&td) == squeezed(&xd) {
        cx.f.reshape(t, &xd)
    } else {
        let b = shape::broadcast_all(&cx.op, &[&xd, &td])?;
        if b.as_slice() != xd.as_slice() {
            bail_op!(&*cx.op, "target of size {} does not match input of size {}", shape::fmt(&td), shape::fmt(&xd));
        }
        cx.f.broadcast_to(t, &xd)
    };
    let w = match w {
        Some(w) => {
            let wd = cx.dims(w);
            let b = shape::broadcast_all(&cx.op, &[&xd, &wd])?;
            if b.as_slice() != xd.as_slice() {
                bail_op!(&*cx.op, "weight of size {} does not broadcast to input of size {}", shape::fmt(&wd), shape::fmt(&xd));
            }
            let w = cx.f.convert(w, d.opmath());
            Some(cx.f.broadcast_to(w, &xd))
        }
        None => None,
    };
    let (x, t) = (cx.f.convert(x, d.opmath()), cx.f.convert(t, d.opmath()));
    Ok((x, t, w, d))
}

/// `0 <= v <= 1` elementwise (false for NaN), checked on the device as
/// PyTorch checks it on the host.
fn check_unit_interval(cx: &mut Cx, v: V, what: &str) {
    let f = &mut cx.f;
    let (zero, one) = (f.full_like(v, 0.0), f.full_like(v, 1.0));
    let ge = f.compare(Cmp::Ge, v, zero);
    let le = f.compare(Cmp::Le, v, one);
    let ok = f.and(ge, le);
    cx.check_values(ok, &format!("all elements of {what} should be between 0 and 1"));
}

fn register_bce(r: &mut Builder) {
    r.op(
        "aten::binary_cross_entropy(Tensor self, Tensor target, Tensor? weight=None, int reduction=Mean) -> Tensor",
        |cx, a| {
            let (x, t, w, d) = bce_operands(cx, a.tensor(0)?, a.tensor(1)?, a.opt_tensor(2))?;
            let reduction = a.int(3)?;
            check_unit_interval(cx, x, "input");
            check_unit_interval(cx, t, "target");
            // (t - 1) max(log1p(-x), -100) - t max(log x, -100): each log
            // clamped so that x = 0 or 1 gives a finite loss, as PyTorch does.
            let f = &mut cx.f;
            let floor = f.full_like(x, -100.0);
            let one = f.full_like(x, 1.0);
            let nx = f.neg(x);
            let l1 = f.unary("stablehlo.log_plus_one", nx);
            let l1 = f.max(l1, floor);
            let l0 = f.unary("stablehlo.log", x);
            let l0 = f.max(l0, floor);
            let tm1 = f.sub(t, one);
            let a1 = f.mul(tm1, l1);
            let a0 = f.mul(t, l0);
            let mut l = f.sub(a1, a0);
            if let Some(w) = w {
                l = f.mul(l, w);
            }
            let l = cx.f.convert(l, d);
            if reduction == 0 {
                return Ok(vec![l]);
            }
            let l = cx.f.convert(l, d.opmath());
            let dims = cx.dims(l);
            Ok(vec![super::reduce_loss(cx, l, &dims, reduction, d)?])
        },
    );
    r.op(
        "aten::binary_cross_entropy_backward(Tensor grad_output, Tensor self, Tensor target, Tensor? weight=None, \
         int reduction=Mean) -> Tensor",
        |cx, a| {
            let (x, t, w, d) = bce_operands(cx, a.tensor(1)?, a.tensor(2)?, a.opt_tensor(3))?;
            let reduction = a.int(4)?;
            let xd = cx.dims(x);
            let norm = match reduction {
                0 | 2 => 1.0,
                1 => 1.0 / shape::numel(&xd) as f64,
                other => bail_op!(&*cx.op, "{other} is not a valid value for reduction"),
            };
            let g = a.tensor(0)?;
            if shape::broadcast_all(&cx.op, &[&xd, &cx.dims(g)])?.as_slice() != xd.as_slice() {
                bail_op!(&*cx.op, "grad_output of size {} does not broadcast to input of size {}",
                    shape::fmt(&cx.dims(g)), shape::fmt(&xd));
            }
            let g = cx.f.convert(g, d.opmath());
            let g = cx.f.broadcast_to(g, &xd);
            // g (x - t) / max((1 - x) x, 1e-12) [* w] [/ n]
            let f = &mut cx.f;
            let one = f.full_like(x, 1.0);
            let eps = f.full_like(x, 1e-12);
            let omx = f.sub(one, x);
            let den = f.mul(omx, x);
            let den = f.max(den, eps);
            let num = f.sub(x, t);
            let num = f.mul(g, num);
            let mut y = f.div(num, den);
            if let Some(w) = w {
                y = f.mul(y, w);
            }
            if norm != 1.0 {
                let n = f.full_like(y, norm);
                y = f.mul(y, n);
            }
            Ok(vec![cx.f.convert(y, d)])
        },
    );
}

fn register_losses(r: &mut Builder) {
    register_bce(r);
    r.op("aten::smooth_l1_loss(Tensor self, Tensor target, int reduction=Mean, float beta=1.0) -> Tensor", |cx, a| {
        pointwise_loss(cx, a, "smooth_l1_loss", "beta", smooth_l1)
    });
    r.op(
        "aten::smooth_l1_loss_backward(Tensor grad_output, Tensor self, Tensor target, int reduction, float beta) \
         -> Tensor",
        |cx, a| pointwise_loss_backward(cx, a, "smooth_l1_backward_cpu_out", false),
    );
    r.op("aten::huber_loss(Tensor self, Tensor target, int reduction=Mean, float delta=1.0) -> Tensor", |cx, a| {
        pointwise_loss(cx, a, "huber_loss", "delta", huber)
    });
    r.op(
        "aten::huber_loss_backward(Tensor grad_output, Tensor self, Tensor target, int reduction, float delta) \
         -> Tensor",
        |cx, a| pointwise_loss_backward(cx, a, "huber_backward_cpu_out", true),
    );
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
