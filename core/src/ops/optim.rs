//! PyTorch's fused optimizer steps: `_fused_adam_`, `_fused_adamw_` and
//! `_fused_sgd_` (and their `.tensor_lr` overloads).
//!
//! Each op updates lists of tensors in place and returns nothing; the
//! lowering gives the new value of every element of every mutated list, in
//! order, and `cx.none()` for a tensor it leaves as it was (the gradients
//! when there is no `grad_scale`). The arithmetic follows PyTorch's CPU
//! kernels (`FusedAdamKernel.cpp`, `FusedSGDKernel.cpp`): one pass in opmath
//! per element, rounded once to each tensor's dtype, with the bias
//! corrections computed in f64 from the already incremented step, as the
//! optimizers' single-tensor forms compute them on the host. In f32 the
//! results are those of `torch.optim`'s single-tensor forms, which round the
//! same operations in the same order.
//!
//! The hyperparameters are runtime values: the learning rate (a `float`
//! passed as a scalar, or the `.tensor_lr` tensor), the betas, eps, weight
//! decay, momentum and dampening. A scheduler (`OneCycleLR` cycles the
//! momentum or beta1 as well as the learning rate) never recompiles the step.
//! Branches PyTorch takes on their values on the host (`weight_decay != 0`,
//! the two forms of `lerp`) are selects in the program. A
//! nonzero `found_inf` (GradScaler saw infs) leaves every tensor unchanged,
//! decided inside the program so the step needs no host read.

use crate::bail_op;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::tensor::Value;
use crate::hlo::{Cmp, Elem, V};

use super::{bound_f64, Args, Builder, Cx, Input};

pub fn register(r: &mut Builder) {
    const ADAM_ARGS: &str = "(Tensor(a!)[] self, Tensor(b!)[] grads, Tensor(c!)[] exp_avgs, Tensor(d!)[] exp_avg_sqs, \
         Tensor(e!)[] max_exp_avg_sqs, Tensor[] state_steps, *, LR lr, float beta1, float beta2, float weight_decay, \
         float eps, bool amsgrad, bool maximize, Tensor? grad_scale=None, Tensor? found_inf=None) -> ()";
    for (name, decoupled) in [("_fused_adam_", false), ("_fused_adamw_", true)] {
        let args = ADAM_ARGS.replace("LR", "float");
        r.op(&format!("aten::{name}{args}"), move |cx, a| adam(cx, a, decoupled))
            .runtime_floats(&["lr", "beta1", "beta2", "weight_decay", "eps"]);
        let args = ADAM_ARGS.replace("LR", "Tensor");
        r.op(&format!("aten::{name}.tensor_lr{args}"), move |cx, a| adam(cx, a, decoupled))
            .runtime_floats(&["beta1", "beta2", "weight_decay", "eps"]);
    }
    const SGD_ARGS: &str = "(Tensor(a!)[] self, Tensor(b!)[] grads, Tensor(c!)[] momentum_buffer_list, *, \
         float weight_decay, float momentum, LR lr, float dampening, bool nesterov, bool maximize, bool is_first_step, \
         Tensor? grad_scale=None, Tensor? found_inf=None) -> ()";
    r.op(&format!("aten::_fused_sgd_{}", SGD_ARGS.replace("LR", "float")), sgd)
        .runtime_floats(&["lr", "weight_decay", "momentum", "dampening"])
        .check(sgd_momentum_buffers);
    r.op(&format!("aten::_fused_sgd_.tensor_lr{}", SGD_ARGS.replace("LR", "Tensor")), sgd)
        .runtime_floats(&["weight_decay", "momentum", "dampening"])
        .check(sgd_momentum_buffers);
}

/// What every fused step shares: the opmath of each tensor, the learning
/// rate, the gradient scale and the skip condition.
struct Step {
    /// The learning rate, rank-0 f64.
    lr: V,
    grad_scale: Option<V>,
    /// `found_inf == 1` (rank-0 i1), when `found_inf` is given.
    skip: Option<V>,
}

impl Step {
    fn new(cx: &mut Cx, a: &Args, lr: usize, grad_scale: usize, found_inf: usize) -> Result<Step> {
        let lr = match a.get(lr) {
            Input::Scalar(s) => cx.scalar(*s, Elem::F64),
            Input::Tensor(t) => {
                let t = one_element(cx, *t, "lr")?;
                cx.f.convert(t, Elem::F64)
            }
            other => return Err(Error::Internal(format!("{}: lr is {other:?}", cx.op))),
        };
        let grad_scale = a.opt_tensor(grad_scale).map(|t| one_element(cx, t, "grad_scale")).transpose()?;
        let skip = match a.opt_tensor(found_inf) {
            Some(t) => {
                let t = one_element(cx, t, "found_inf")?;
                let t = cx.f.convert(t, Elem::F32);
                let one = cx.f.constant(Elem::F32, 1.0);
                Some(cx.f.compare(Cmp::Eq, t, one))
            }
            None => None,
        };
        Ok(Step { lr, grad_scale, skip })
    }

    /// The gradient in opmath, divided by `grad_scale`; and its new stored
    /// value (`None` when unchanged).
    fn grad(&self, cx: &mut Cx, g: V, o: DType) -> (V, Option<V>) {
        let gv = cx.f.convert(g, o);
        match self.grad_scale {
            Some(s) => {
                let s = cx.f.convert(s, o);
                let s = bcast(cx, s, gv);
                let u = cx.f.div(gv, s);
                (u, Some(u))
            }
            None => (gv, None),
        }
    }

    /// The value to store into `old`: `new` rounded to its dtype, or `old`
    /// itself when the step is skipped.
    fn store(&self, cx: &mut Cx, old: V, new: V) -> V {
        let new = cx.f.convert(new, cx.dtype(old));
        match self.skip {
            Some(skip) => {
                let dims = cx.dims(old);
                let skip = cx.f.broadcast_to(skip, &dims);
                cx.f.select(skip, old, new)
            }
            None => new,
        }
    }
}

/// A one-element tensor as a rank-0 value.
fn one_element(cx: &mut Cx, t: V, what: &str) -> Result<V> {
    if cx.ty(t).numel() != 1 {
        bail_op!(&*cx.op, "{what} must be a one-element tensor, got shape {}", crate::shape::fmt(&cx.dims(t)));
    }
    Ok(cx.f.reshape(t, &[]))
}

/// A rank-0 value broadcast to the shape of `like`.
fn bcast(cx: &mut Cx, s: V, like: V) -> V {
    let dims = cx.dims(like);
    cx.f.broadcast_to(s, &dims)
}

/// A rank-0 f64 value converted to `o` and broadcast to the shape of `like`.
fn runtime(cx: &mut Cx, v64: V, o: DType, like: V) -> V {
    let v = cx.f.convert(v64, o);
    bcast(cx, v, like)
}

/// Checks the lists have `n` tensors of the parameters' shapes and a
/// floating dtype.
fn check_lists(cx: &Cx, params: &[V], lists: &[(&str, &[V])]) -> Result<()> {
    for (i, &p) in params.iter().enumerate() {
        let d = cx.dtype(p);
        if !d.is_float() {
            bail_op!(&*cx.op, "params[{i}] must be a floating point tensor, got {d}");
        }
    }
    for (name, list) in lists {
        if list.len() != params.len() {
            bail_op!(&*cx.op, "{name} has {} tensors, but there are {} params", list.len(), params.len());
        }
        for (i, (&t, &p)) in list.iter().zip(params).enumerate() {
            if cx.dims(t) != cx.dims(p) {
                bail_op!(
                    &*cx.op,
                    "{name}[{i}] has shape {}, but params[{i}] has shape {}",
                    crate::shape::fmt(&cx.dims(t)),
                    crate::shape::fmt(&cx.dims(p))
                );
            }
        }
    }
    Ok(())
}

/// `x != 0` for a rank-0 f64 `x`, broadcast to the shape of `like`.
fn nonzero_like(cx: &mut Cx, x: V, like: V) -> V {
    let zero = cx.f.constant(Elem::F64, 0.0);
    let nz = cx.f.compare(Cmp::Ne, x, zero);
    let dims = cx.dims(like);
    cx.f.broadcast_to(nz, &dims)
}

/// `g + p * weight_decay` where `weight_decay != 0`, else `g` (PyTorch skips
/// the term on the host: `0 * inf` must not reach the gradient).
fn coupled_decay(cx: &mut Cx, g: V, p: V, wd64: V, o: DType) -> V {
    let wd = runtime(cx, wd64, o, p);
    let pw = cx.f.mul(p, wd);
    let decayed = cx.f.add(g, pw);
    let on = nonzero_like(cx, wd64, g);
    cx.f.select(on, decayed, g)
}

fn adam(cx: &mut Cx, a: &Args, decoupled: bool) -> Result<Vec<V>> {
    let params = a.tensors(0)?.to_vec();
    let grads = a.tensors(1)?.to_vec();
    let exp_avgs = a.tensors(2)?.to_vec();
    let exp_avg_sqs = a.tensors(3)?.to_vec();
    let max_exp_avg_sqs = a.tensors(4)?.to_vec();
    let steps = a.tensors(5)?.to_vec();
    let (amsgrad, maximize) = (a.bool(11)?, a.bool(12)?);
    let mut lists: Vec<(&str, &[V])> =
        vec![("grads", &grads), ("exp_avgs", &exp_avgs), ("exp_avg_sqs", &exp_avg_sqs)];
    if amsgrad {
        lists.push(("max_exp_avg_sqs", &max_exp_avg_sqs));
    }
    check_lists(cx, &params, &lists)?;
    if steps.len() != params.len() {
        bail_op!(&*cx.op, "state_steps has {} tensors, but there are {} params", steps.len(), params.len());
    }
    let st = Step::new(cx, a, 6, 13, 14)?;
    // Rank-0 f64 program parameters: what the host computes in double
    // (1 - beta1, the bias corrections) is computed in f64 here too, and
    // rounded to opmath where the CPU kernel rounds it.
    let (beta1, beta2) = (a.runtime_f64(cx, 7)?, a.runtime_f64(cx, 8)?);
    let (weight_decay, eps) = (a.runtime_f64(cx, 9)?, a.runtime_f64(cx, 10)?);
    let one = cx.f.constant(Elem::F64, 1.0);
    let one_minus_beta1 = cx.f.sub(one, beta1);
    let one_minus_beta2 = cx.f.sub(one, beta2);

    let n = params.len();
    let mut new_params = Vec::with_capacity(n);
    let mut new_grads = Vec::with_capacity(n);
    let mut new_avgs = Vec::with_capacity(n);
    let mut new_sqs = Vec::with_capacity(n);
    let mut new_maxes = Vec::with_capacity(max_exp_avg_sqs.len());
    for i in 0..n {
        let o = cx.dtype(params[i]).opmath();
        // Bias corrections in f64 from the step (already counted).
        let step = one_element(cx, steps[i], "state_steps")?;
        let step = cx.f.convert(step, Elem::F64);
        let correction = |cx: &mut Cx, beta: V| {
            let pw = cx.f.binary("stablehlo.power", beta, step);
            cx.f.sub(one, pw)
        };
        let bc1 = correction(cx, beta1);
        let bc2 = correction(cx, beta2);
        let bc2_sqrt = cx.f.unary("stablehlo.sqrt", bc2);
        let step_size = cx.f.div(st.lr, bc1);

        let (mut g, stored_grad) = st.grad(cx, grads[i], o);
        new_grads.push(match stored_grad {
            Some(u) => st.store(cx, grads[i], u),
            None => cx.none(),
        });
        if maximize {
            g = cx.f.neg(g);
        }
        let mut p = cx.f.convert(params[i], o);
        if decoupled {
            // param *= 1 - lr * weight_decay, the factor in f64 (exactly 1
            // without decay, which leaves every param as it is).
            let lr_wd = cx.f.mul(st.lr, weight_decay);
            let factor = cx.f.sub(one, lr_wd);
            let factor = runtime(cx, factor, o, p);
            p = cx.f.mul(p, factor);
        } else {
            g = coupled_decay(cx, g, p, weight_decay, o);
        }
        // exp_avg.lerp_(grad, 1 - beta1): PyTorch's lerp takes one of two
        // forms by |weight| < 0.5, the weight rounded to opmath first.
        let m = cx.f.convert(exp_avgs[i], o);
        let w = cx.f.convert(one_minus_beta1, o);
        let diff = cx.f.sub(g, m);
        let wv = bcast(cx, w, m);
        let t = cx.f.mul(wv, diff);
        let near_start = cx.f.add(m, t);
        let w64 = cx.f.convert(w, Elem::F64);
        let omw = cx.f.sub(one, w64);
        let omw = runtime(cx, omw, o, m);
        let t = cx.f.mul(diff, omw);
        let near_end = cx.f.sub(g, t);
        let abs_w = cx.f.unary("stablehlo.abs", w64);
        let half = cx.f.constant(Elem::F64, 0.5);
        let small = cx.f.compare(Cmp::Lt, abs_w, half);
        let small = bcast(cx, small, m);
        let m = cx.f.select(small, near_start, near_end);
        // exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        let v = cx.f.convert(exp_avg_sqs[i], o);
        let b2 = runtime(cx, beta2, o, v);
        let v = cx.f.mul(v, b2);
        let c2 = runtime(cx, one_minus_beta2, o, v);
        let cg = cx.f.mul(c2, g);
        let cgg = cx.f.mul(cg, g);
        let v = cx.f.add(v, cgg);
        let base = if amsgrad {
            let mx = cx.f.convert(max_exp_avg_sqs[i], o);
            let mx = cx.f.max(mx, v);
            new_maxes.push(st.store(cx, max_exp_avg_sqs[i], mx));
            mx
        } else {
            v
        };
        // param -= step_size * exp_avg / (sqrt(v) / sqrt(bc2) + eps)
        let root = cx.f.unary("stablehlo.sqrt", base);
        let bc2_sqrt = runtime(cx, bc2_sqrt, o, root);
        let denom = cx.f.div(root, bc2_sqrt);
        let e = runtime(cx, eps, o, denom);
        let denom = cx.f.add(denom, e);
        let ss = runtime(cx, step_size, o, m);
        let num = cx.f.mul(ss, m);
        let upd = cx.f.div(num, denom);
        let p = cx.f.sub(p, upd);

        new_params.push(st.store(cx, params[i], p));
        new_avgs.push(st.store(cx, exp_avgs[i], m));
        new_sqs.push(st.store(cx, exp_avg_sqs[i], v));
    }
    if !amsgrad {
        // Present but unused: left as they are.
        new_maxes = max_exp_avg_sqs.iter().map(|_| cx.none()).collect();
    }
    Ok([new_params, new_grads, new_avgs, new_sqs, new_maxes].concat())
}

/// `_fused_sgd_` with a nonzero momentum needs one buffer per param; the
/// momentum is a runtime value, so this is checked at the call.
fn sgd_momentum_buffers(bound: &[Value]) -> std::result::Result<(), String> {
    let count = |i: usize| match &bound[i] {
        Value::TensorList(ts) => ts.len(),
        _ => 0,
    };
    let momentum = bound_f64(bound, 4).unwrap_or(0.0);
    if momentum != 0.0 && count(2) != count(0) {
        return Err(format!(
            "momentum_buffer_list has {} tensors, but there are {} params (momentum is {momentum})",
            count(2),
            count(0)
        ));
    }
    Ok(())
}

fn sgd(cx: &mut Cx, a: &Args) -> Result<Vec<V>> {
    let params = a.tensors(0)?.to_vec();
    let grads = a.tensors(1)?.to_vec();
    let bufs = a.tensors(2)?.to_vec();
    let (nesterov, maximize, is_first_step) = (a.bool(7)?, a.bool(8)?, a.bool(9)?);
    // PyTorch passes momentum buffers exactly when the momentum is nonzero
    // (checked at the call, `sgd_momentum_buffers`); with buffers, a
    // momentum of 0 at run time leaves them as they are.
    let with_buffers = !bufs.is_empty();
    let mut lists: Vec<(&str, &[V])> = vec![("grads", &grads)];
    if with_buffers {
        lists.push(("momentum_buffer_list", &bufs));
    }
    check_lists(cx, &params, &lists)?;
    let st = Step::new(cx, a, 5, 10, 11)?;
    let (weight_decay, momentum) = (a.runtime_f64(cx, 3)?, a.runtime_f64(cx, 4)?);
    let dampening = a.runtime_f64(cx, 6)?;
    let one = cx.f.constant(Elem::F64, 1.0);
    let one_minus_dampening = cx.f.sub(one, dampening);

    let n = params.len();
    let mut new_params = Vec::with_capacity(n);
    let mut new_grads = Vec::with_capacity(n);
    let mut new_bufs = Vec::with_capacity(bufs.len());
    for i in 0..n {
        let o = cx.dtype(params[i]).opmath();
        let (mut g, stored_grad) = st.grad(cx, grads[i], o);
        new_grads.push(match stored_grad {
            Some(u) => st.store(cx, grads[i], u),
            None => cx.none(),
        });
        if maximize {
            g = cx.f.neg(g);
        }
        let p = cx.f.convert(params[i], o);
        g = coupled_decay(cx, g, p, weight_decay, o);
        if with_buffers {
            let buf = if is_first_step {
                g
            } else {
                // buf * momentum + grad * (1 - dampening)
                let b = cx.f.convert(bufs[i], o);
                let mo = runtime(cx, momentum, o, b);
                let b = cx.f.mul(b, mo);
                let c = runtime(cx, one_minus_dampening, o, g);
                let cg = cx.f.mul(g, c);
                cx.f.add(b, cg)
            };
            let on = nonzero_like(cx, momentum, g);
            let old = cx.f.convert(bufs[i], o);
            let kept = cx.f.select(on, buf, old);
            new_bufs.push(st.store(cx, bufs[i], kept));
            let moved = if nesterov {
                let mo = runtime(cx, momentum, o, buf);
                let t = cx.f.mul(buf, mo);
                cx.f.add(g, t)
            } else {
                buf
            };
            g = cx.f.select(on, moved, g);
        }
        // param - grad * lr
        let lr = runtime(cx, st.lr, o, g);
        let t = cx.f.mul(g, lr);
        let p = cx.f.sub(p, t);
        new_params.push(st.store(cx, params[i], p));
    }
    Ok([new_params, new_grads, new_bufs].concat())
}
