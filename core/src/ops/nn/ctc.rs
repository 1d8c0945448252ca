//! Connectionist temporal classification: `_ctc_loss` and its backward,
//! PyTorch's CPU algorithm (Graves et al. 2006) in log space.
//!
//! The label sequence of batch element `b` is the target with blanks
//! around and between its labels ("target primes", `2 * tl[b] + 1` of
//! them, the rest of the `2 * max(tl) + 1` positions masked). The forward
//! variables alpha advance one time step per iteration of one
//! `stablehlo.while` over all batch elements and positions at once; the
//! backward variables beta run the other way, each element starting at its
//! own last input step. The lengths are `int[]`, so every mask is a
//! compile-time comparison of iotas; the `Tensor` overloads read the
//! lengths on the host first, as CUDA does (the runtime's dispatch).
//!
//! The gradient with respect to the log-probabilities is
//! `exp(lp) - exp(log(sum over the positions of class c of alpha * beta) +
//! nll - lp)`, times the incoming gradient, and 0 past each input length.

use crate::bail_op;
use crate::dtype::DType;
use crate::error::Result;
use crate::hlo::{Cmp, Elem, Func, Reducer, Ty, V};
use crate::ops::common::counted_loop;
use crate::ops::index::{gather_dim, scatter_dim, Src};
use crate::ops::{Args, Builder, Composite, Cx};

pub(super) fn register(r: &mut Builder) {
    r.op(
        "aten::_ctc_loss(Tensor log_probs, Tensor targets, int[] input_lengths, int[] target_lengths, int blank=0, \
         bool zero_infinity=False) -> (Tensor, Tensor)",
        |cx, a| {
            let p = Problem::parse(cx, a, 0)?;
            forward(cx, &p)
        },
    );
    r.op(
        "aten::_ctc_loss_backward(Tensor grad, Tensor log_probs, Tensor targets, int[] input_lengths, \
         int[] target_lengths, Tensor neg_log_likelihood, Tensor log_alpha, int blank, bool zero_infinity=False) -> Tensor",
        |cx, a| {
            let p = Problem::parse(cx, a, 1)?;
            backward(cx, &p, a.tensor(0)?, a.tensor(5)?, a.tensor(6)?, a.bool(8)?)
        },
    );
    r.composite(
        "aten::_ctc_loss.Tensor(Tensor log_probs, Tensor targets, Tensor input_lengths, Tensor target_lengths, \
         int blank=0, bool zero_infinity=False) -> (Tensor, Tensor)",
        Composite::LengthsOnHost { lengths: 2, op: "aten::_ctc_loss" },
    );
    r.composite(
        "aten::_ctc_loss_backward.Tensor(Tensor grad, Tensor log_probs, Tensor targets, Tensor input_lengths, \
         Tensor target_lengths, Tensor neg_log_likelihood, Tensor log_alpha, int blank, bool zero_infinity=False) -> Tensor",
        Composite::LengthsOnHost { lengths: 3, op: "aten::_ctc_loss_backward" },
    );
}

/// A checked call: log-probabilities `[T, N, C]` in their compute type,
/// the labels as `[N, max(tl)]`, and the lengths.
struct Problem {
    lp: V,
    dtype: DType,
    labels: V,
    il: Vec<i64>,
    tl: Vec<i64>,
    blank: i64,
    t: i64,
    n: i64,
    c: i64,
}

impl Problem {
    /// Arguments from `first`: log_probs, targets, input_lengths,
    /// target_lengths; blank follows the two backward tensors when
    /// `first` is 1.
    fn parse(cx: &mut Cx, a: &Args, first: usize) -> Result<Problem> {
        let (lp, targets) = (a.tensor(first)?, a.tensor(first + 1)?);
        let (il, tl) = (a.ints(first + 2)?.to_vec(), a.ints(first + 3)?.to_vec());
        let blank = a.int(if first == 0 { 4 } else { 7 })?;
        let dtype = cx.dtype(lp);
        if !matches!(dtype, DType::F32 | DType::F64) {
            bail_op!(&*cx.op, "\"ctc_loss_cpu\" not implemented for '{dtype}'");
        }
        let dims = cx.dims(lp);
        if dims.len() != 3 {
            bail_op!(&*cx.op, "log_probs must be 3-D (time, batch, classes), got shape {}", crate::shape::fmt(&dims));
        }
        let (t, n, c) = (dims[0], dims[1], dims[2]);
        if t == 0 {
            bail_op!(&*cx.op, "log_probs has no time steps (shape {}): CTC needs at least one", crate::shape::fmt(&dims));
        }
        if blank < 0 || blank >= c {
            bail_op!(&*cx.op, "blank must be in label range: blank {blank}, {c} classes");
        }
        let td = cx.dims(targets);
        if !cx.dtype(targets).is_int() {
            bail_op!(&*cx.op, "targets must be integral, got {}", cx.dtype(targets));
        }
        if il.len() as i64 != n || tl.len() as i64 != n {
            bail_op!(
                &*cx.op,
                "input_lengths ({}) and target_lengths ({}) must have batch_size ({n}) entries",
                il.len(),
                tl.len()
            );
        }
        for (b, (&i, &l)) in il.iter().zip(&tl).enumerate() {
            if i < 0 || i > t {
                bail_op!(&*cx.op, "Expected input_lengths to have value at most {t}, but got value {i} (batch element {b})");
            }
            if l < 0 {
                bail_op!(&*cx.op, "Expected target_lengths to be non-negative, but got value {l} (batch element {b})");
            }
        }
        let max_tl = tl.iter().copied().max().unwrap_or(0);
        let total: i64 = tl.iter().try_fold(0i64, |s, &l| s.checked_add(l)).unwrap_or(i64::MAX);
        // Where each element's labels start in `targets`, flattened.
        let starts: Vec<i64> = match td.len() {
            2 if td[0] == n => {
                if td[1] < max_tl {
                    bail_op!(&*cx.op, "Expected tensor to have size at least {max_tl} at dimension 1, but got size {}", td[1]);
                }
                (0..n).map(|b| b * td[1]).collect()
            }
            1 => {
                if td[0] < total {
                    bail_op!(&*cx.op, "Expected tensor to have size at least {total} at dimension 0, but got size {}", td[0]);
                }
                tl.iter().scan(0, |s, &l| Some(std::mem::replace(s, *s + l))).collect()
            }
            _ => bail_op!(
                &*cx.op,
                "targets must be (batch, max target length) or the concatenated targets, got shape {}",
                crate::shape::fmt(&td)
            ),
        };
        // [N, max_tl] labels; positions past an element's length read its
        // first entry and are replaced by the blank.
        let flat_len: i64 = td.iter().product();
        let flat = cx.f.reshape(targets, &[flat_len]);
        let flat = cx.f.convert(flat, Elem::I64);
        let labels = if max_tl == 0 {
            cx.f.splat_int(&Ty::new(Elem::I64, &[n, 0]), 0)
        } else {
            let idx: Vec<i64> =
                (0..n as usize).flat_map(|b| (0..max_tl).map(move |j| (b, j))).map(|(b, j)| (starts[b] + j.min((tl[b] - 1).max(0))).min(flat_len - 1)).collect();
            let idx_v = cx.f.const_i64s(&idx);
            let idx_v = cx.f.reshape(idx_v, &[idx.len() as i64, 1]);
            let g = cx.f.gather(flat, idx_v, &[], &[0], &[0], 1, &[1], &[idx.len() as i64]);
            let g = cx.f.reshape(g, &[n, max_tl]);
            let ty = Ty::new(Elem::I64, &[n, max_tl]);
            let j = cx.f.iota(&ty, 1);
            let len = lengths(&mut cx.f, &tl, &[n, max_tl], 0);
            let real = cx.f.compare(Cmp::Lt, j, len);
            let b = cx.f.splat_int(&ty, blank);
            cx.f.select(real, g, b)
        };
        cx.check_index(labels, 0..c, || format!("{c} classes"));
        let lp = cx.f.convert(lp, dtype.opmath());
        Ok(Problem { lp, dtype, labels, il, tl, blank, t, n, c })
    }

    /// Positions in the label sequence with blanks: `2 * max(tl) + 1`.
    fn width(&self) -> i64 {
        2 * self.tl.iter().copied().max().unwrap_or(0) + 1
    }

    /// The target primes `[N, L]`: blank at even positions, label `s / 2`
    /// at odd ones.
    fn primes(&self, f: &mut Func) -> V {
        let (n, l) = (self.n, self.width());
        let half = (l - 1) / 2;
        let blank = f.splat_int(&Ty::new(Elem::I64, &[n, half, 1]), self.blank);
        let lab = f.reshape(self.labels, &[n, half, 1]);
        let pairs = f.concatenate(&[lab, blank], 2);
        let pairs = f.reshape(pairs, &[n, 2 * half]);
        let first = f.splat_int(&Ty::new(Elem::I64, &[n, 1]), self.blank);
        f.concatenate(&[first, pairs], 1)
    }
}

/// `vals[b]` laid along dim `dim` of an i64 tensor of shape `dims`.
fn lengths(f: &mut Func, vals: &[i64], dims: &[i64], dim: usize) -> V {
    let v = f.const_i64s(vals);
    f.broadcast_in_dim(v, &[dim as i64], dims)
}

/// The per-step inputs of both recurrences: `g[t, b, s]`, the
/// log-probability of prime `s` at step `t`, and where a position may skip
/// the blank before it (`prime[s] != prime[s - 2]`).
fn prepare(cx: &mut Cx, p: &Problem) -> Result<(V, V, V)> {
    let (t, n, l) = (p.t, p.n, p.width());
    let primes = p.primes(&mut cx.f);
    let idx = cx.f.broadcast_in_dim(primes, &[1, 2], &[t, n, l]);
    let g = gather_dim(cx, p.lp, 2, idx)?;
    let ty = Ty::new(Elem::I64, &[n, l]);
    let back2 = shift(&mut cx.f, primes, 2, -1);
    let differs = cx.f.compare(Cmp::Ne, primes, back2);
    let s = cx.f.iota(&ty, 1);
    let two = cx.f.splat_int(&ty, 2);
    let past = cx.f.compare(Cmp::Ge, s, two);
    let skip = cx.f.and(differs, past);
    Ok((g, skip, primes))
}

/// `x` shifted along its last dim by `by` (positive: toward higher
/// positions), filled with `fill`.
fn shift(f: &mut Func, x: V, by: i64, fill: i64) -> V {
    let dims = f.ty(x).dims.to_vec();
    let r = dims.len();
    let l = dims[r - 1];
    let k = by.abs().min(l);
    let mut limit = dims.clone();
    let mut start = vec![0; r];
    if by > 0 {
        limit[r - 1] = l - k;
    } else {
        start[r - 1] = k;
    }
    let part = f.slice(x, &start, &limit, &vec![1; r]);
    let elem = f.ty(x).elem;
    let pad = if elem.is_float() { f.constant(elem, fill as f64 * f64::INFINITY) } else { f.splat_int(&Ty::scalar(elem), fill) };
    let mut low = vec![0; r];
    let mut high = vec![0; r];
    if by > 0 {
        low[r - 1] = k;
    } else {
        high[r - 1] = k;
    }
    f.pad(part, pad, &low, &high, &vec![0; r])
}

/// log(exp(a) + exp(b) + exp(c)), exact where all are -inf (-inf).
fn log_sum3(f: &mut Func, a: V, b: V, c: V) -> V {
    let m = f.max(a, b);
    let m = f.max(m, c);
    let ninf = f.full_like(m, f64::NEG_INFINITY);
    let none = f.compare(Cmp::Eq, m, ninf);
    let zero = f.full_like(m, 0.0);
    let m = f.select(none, zero, m);
    let mut s: Option<V> = None;
    for v in [a, b, c] {
        let d = f.sub(v, m);
        let e = f.unary("stablehlo.exponential", d);
        s = Some(match s {
            Some(acc) => f.add(acc, e),
            None => e,
        });
    }
    let l = f.unary("stablehlo.log", s.expect("three terms"));
    f.add(l, m)
}

/// Row `t` (a rank-0 i64) of `x` `[T, N, L]`, as `[N, L]`.
fn row(f: &mut Func, x: V, t: V) -> V {
    let dims = f.ty(x).dims.to_vec();
    let zero = f.splat_int(&Ty::scalar(Elem::I64), 0);
    let r = f.dynamic_slice(x, &[t, zero, zero], &[1, dims[1], dims[2]]);
    f.reshape(r, &dims[1..])
}

/// `x` with row `t` replaced by `v` `[N, L]`.
fn put_row(f: &mut Func, x: V, t: V, v: V) -> V {
    let d = f.ty(v).dims.to_vec();
    let v = f.reshape(v, &[1, d[0], d[1]]);
    let zero = f.splat_int(&Ty::scalar(Elem::I64), 0);
    f.dynamic_update_slice(x, v, &[t, zero, zero])
}

/// Where an `[N, L]` position is one of element `b`'s `2 * tl[b] + 1`.
fn in_sequence(f: &mut Func, tl: &[i64], n: i64, l: i64) -> V {
    let ty = Ty::new(Elem::I64, &[n, l]);
    let s = f.iota(&ty, 1);
    let ends: Vec<i64> = tl.iter().map(|&x| 2 * x + 1).collect();
    let end = lengths(f, &ends, &[n, l], 0);
    f.compare(Cmp::Lt, s, end)
}

/// Where an `[N, L]` position is one of element `b`'s last two (the end
/// of the sequence, with or without the final blank).
fn at_end(f: &mut Func, tl: &[i64], n: i64, l: i64) -> V {
    let ty = Ty::new(Elem::I64, &[n, l]);
    let s = f.iota(&ty, 1);
    let last: Vec<i64> = tl.iter().map(|&x| 2 * x).collect();
    let before: Vec<i64> = tl.iter().map(|&x| if x > 0 { 2 * x - 1 } else { 2 * x }).collect();
    let last = lengths(f, &last, &[n, l], 0);
    let before = lengths(f, &before, &[n, l], 0);
    let a = f.compare(Cmp::Eq, s, last);
    let b = f.compare(Cmp::Eq, s, before);
    f.or(a, b)
}

/// The loss of each element (infinite where no alignment exists: the
/// `ctc_loss` composite applies `zero_infinity` to it) and the log alphas.
fn forward(cx: &mut Cx, p: &Problem) -> Result<Vec<V>> {
    let (t, n, l) = (p.t, p.n, p.width());
    let e = cx.ty(p.lp).elem;
    let (g, skip, _) = prepare(cx, p)?;
    let ninf = cx.f.splat(&Ty::new(e, &[n, l]), f64::NEG_INFINITY);
    // t = 0: the first blank and the first label.
    let in_seq = in_sequence(&mut cx.f, &p.tl, n, l);
    let s = cx.f.iota(&Ty::new(Elem::I64, &[n, l]), 1);
    let two = cx.f.splat_int(&Ty::new(Elem::I64, &[n, l]), 2);
    let first = cx.f.compare(Cmp::Lt, s, two);
    let start = cx.f.and(first, in_seq);
    let has_input = lengths(&mut cx.f, &p.il, &[n, l], 0);
    let zero_i = cx.f.splat_int(&Ty::new(Elem::I64, &[n, l]), 0);
    let has_input = cx.f.compare(Cmp::Gt, has_input, zero_i);
    let start = cx.f.and(start, has_input);
    let zero = cx.f.splat_int(&Ty::scalar(Elem::I64), 0);
    let g0 = row(&mut cx.f, g, zero);
    let alpha0 = cx.f.select(start, g0, ninf);
    let buf0 = cx.f.splat(&Ty::new(e, &[t, n, l]), f64::NEG_INFINITY);
    let buf0 = put_row(&mut cx.f, buf0, zero, alpha0);
    let il = p.il.clone();
    let tl = p.tl.clone();
    let out = counted_loop(&mut cx.f, &[alpha0, buf0, g, skip], t - 1, |f, st, j| {
        let (alpha, buf, g, skip) = (st[0], st[1], st[2], st[3]);
        let one = f.splat_int(&Ty::scalar(Elem::I64), 1);
        let step = f.add(j, one);
        let a2 = shift(f, alpha, 1, -1);
        let a3 = shift(f, alpha, 2, -1);
        let ninf = f.full_like(alpha, f64::NEG_INFINITY);
        let a3 = f.select(skip, a3, ninf);
        let lse = log_sum3(f, alpha, a2, a3);
        let gt = row(f, g, step);
        let next = f.add(lse, gt);
        // Only positions of the sequence, and only before the input ends.
        let in_seq = in_sequence(f, &tl, n, l);
        let ends = lengths(f, &il, &[n, l], 0);
        let now = f.broadcast_in_dim(step, &[], &[n, l]);
        let running = f.compare(Cmp::Lt, now, ends);
        let keep = f.and(in_seq, running);
        let next = f.select(keep, next, ninf);
        let buf = put_row(f, buf, step, next);
        vec![next, buf, g, skip]
    });
    let buf = out[1];
    // The likelihood: the last two positions at the last input step.
    let ty = Ty::new(Elem::I64, &[t, n, l]);
    let steps = cx.f.iota(&ty, 0);
    let last_step: Vec<i64> = p.il.iter().map(|&i| i - 1).collect();
    let last_step = lengths(&mut cx.f, &last_step, &[t, n, l], 1);
    let at_last = cx.f.compare(Cmp::Eq, steps, last_step);
    let end = at_end(&mut cx.f, &p.tl, n, l);
    let end = cx.f.broadcast_in_dim(end, &[1, 2], &[t, n, l]);
    let pick = cx.f.and(at_last, end);
    let all_ninf = cx.f.splat(&Ty::new(e, &[t, n, l]), f64::NEG_INFINITY);
    let picked = cx.f.select(pick, buf, all_ninf);
    let lowest = cx.f.constant(e, f64::NEG_INFINITY);
    let m = cx.f.reduce(picked, lowest, &[0, 2], Reducer::Max);
    let ninf_n = cx.f.splat(&Ty::new(e, &[n]), f64::NEG_INFINITY);
    let none = cx.f.compare(Cmp::Eq, m, ninf_n);
    let zn = cx.f.splat(&Ty::new(e, &[n]), 0.0);
    let m = cx.f.select(none, zn, m);
    let mb = cx.f.broadcast_in_dim(m, &[1], &[t, n, l]);
    let d = cx.f.sub(picked, mb);
    let ex = cx.f.unary("stablehlo.exponential", d);
    let zero_e = cx.f.constant(e, 0.0);
    let sum = cx.f.reduce(ex, zero_e, &[0, 2], Reducer::Add);
    let ll = cx.f.unary("stablehlo.log", sum);
    let ll = cx.f.add(ll, m);
    let mut nll = cx.f.neg(ll);
    // No input steps: likelihood 1 for an empty target, else 0.
    let empty_input: Vec<f64> =
        p.il.iter().zip(&p.tl).map(|(&i, &l)| if i > 0 { f64::NAN } else if l == 0 { 0.0 } else { f64::INFINITY }).collect();
    if empty_input.iter().any(|v| !v.is_nan()) {
        let fixed: Vec<f64> = empty_input.iter().map(|v| if v.is_nan() { 0.0 } else { *v }).collect();
        let fixed = cx.f.const_floats(e, &fixed);
        let mask: Vec<i64> = p.il.iter().map(|&i| (i == 0) as i64).collect();
        let mask = cx.f.const_i64s(&mask);
        let one = cx.f.splat_int(&Ty::new(Elem::I64, &[n]), 1);
        let mask = cx.f.compare(Cmp::Eq, mask, one);
        nll = cx.f.select(mask, fixed, nll);
    }
    let la = cx.f.transpose(buf, &[1, 0, 2]);
    Ok(vec![cx.f.convert(nll, p.dtype), cx.f.convert(la, p.dtype)])
}

fn backward(cx: &mut Cx, p: &Problem, grad: V, nll: V, log_alpha: V, zero_infinity: bool) -> Result<Vec<V>> {
    let (t, n, l, c) = (p.t, p.n, p.width(), p.c);
    let e = cx.ty(p.lp).elem;
    if cx.dims(log_alpha) != [n, t, l] || cx.dims(nll) != [n] || cx.dims(grad) != [n] {
        bail_op!(
            &*cx.op,
            "grad {}, neg_log_likelihood {} and log_alpha {} do not fit log_probs {} with these target lengths",
            crate::shape::fmt(&cx.dims(grad)),
            crate::shape::fmt(&cx.dims(nll)),
            crate::shape::fmt(&cx.dims(log_alpha)),
            crate::shape::fmt(&[t, n, c])
        );
    }
    let (g, skip, primes) = prepare(cx, p)?;
    // beta may skip the blank after a position where alpha may skip the one
    // before the position two further on.
    let skip_back = shift(&mut cx.f, skip, -2, 0);
    let la = cx.f.convert(log_alpha, e);
    let la = cx.f.transpose(la, &[1, 0, 2]);
    let ninf_row = cx.f.splat(&Ty::new(e, &[n, l]), f64::NEG_INFINITY);
    let buf0 = cx.f.splat(&Ty::new(e, &[t, n, l]), f64::NEG_INFINITY);
    let il = p.il.clone();
    let tl = p.tl.clone();
    let out = counted_loop(&mut cx.f, &[ninf_row, buf0, g, skip_back], t, |f, st, j| {
        let (beta, buf, g, skip) = (st[0], st[1], st[2], st[3]);
        let last = f.splat_int(&Ty::scalar(Elem::I64), t - 1);
        let step = f.sub(last, j);
        let b2 = shift(f, beta, -1, -1);
        let b3 = shift(f, beta, -2, -1);
        let ninf = f.full_like(beta, f64::NEG_INFINITY);
        let b3 = f.select(skip, b3, ninf);
        let lse = log_sum3(f, beta, b2, b3);
        let gt = row(f, g, step);
        let rec = f.add(lse, gt);
        let end = at_end(f, &tl, n, l);
        let init = f.select(end, gt, ninf);
        let ends: Vec<i64> = il.iter().map(|&i| i - 1).collect();
        let ends = lengths(f, &ends, &[n, l], 0);
        let now = f.broadcast_in_dim(step, &[], &[n, l]);
        let starting = f.compare(Cmp::Eq, now, ends);
        let before = f.compare(Cmp::Lt, now, ends);
        let next = f.select(starting, init, ninf);
        let next = f.select(before, rec, next);
        let in_seq = in_sequence(f, &tl, n, l);
        let next = f.select(in_seq, next, ninf);
        let buf = put_row(f, buf, step, next);
        vec![next, buf, g, skip]
    });
    let lb = out[1];
    let ab = cx.f.add(la, lb);
    // log(sum over the positions of each class of alpha * beta), [T, N, C].
    let idx = cx.f.broadcast_in_dim(primes, &[1, 2], &[t, n, l]);
    let init = cx.f.splat(&Ty::new(e, &[t, n, c]), f64::NEG_INFINITY);
    let m = scatter_dim(cx, init, 2, idx, Src::T(ab), Some(Reducer::Max))?;
    let ninf = cx.f.splat(&Ty::new(e, &[t, n, c]), f64::NEG_INFINITY);
    let none = cx.f.compare(Cmp::Eq, m, ninf);
    let zeros = cx.f.splat(&Ty::new(e, &[t, n, c]), 0.0);
    let m = cx.f.select(none, zeros, m);
    let mg = gather_dim(cx, m, 2, idx)?;
    let d = cx.f.sub(ab, mg);
    let ex = cx.f.unary("stablehlo.exponential", d);
    let sums = scatter_dim(cx, zeros, 2, idx, Src::T(ex), Some(Reducer::Add))?;
    let lsum = cx.f.unary("stablehlo.log", sums);
    let lcab = cx.f.add(lsum, m);
    let nll_o = cx.f.convert(nll, e);
    let nll_b = cx.f.broadcast_in_dim(nll_o, &[1], &[t, n, c]);
    let gr = cx.f.convert(grad, e);
    let gr_b = cx.f.broadcast_in_dim(gr, &[1], &[t, n, c]);
    let elp = cx.f.unary("stablehlo.exponential", p.lp);
    let x = cx.f.add(lcab, nll_b);
    let x = cx.f.sub(x, p.lp);
    let x = cx.f.unary("stablehlo.exponential", x);
    let res = cx.f.sub(elp, x);
    let res = cx.f.mul(res, gr_b);
    // Zero past each input length, and for an infinite loss with
    // zero_infinity.
    let steps = cx.f.iota(&Ty::new(Elem::I64, &[t, n, c]), 0);
    let ends = lengths(&mut cx.f, &p.il, &[t, n, c], 1);
    let mut keep = cx.f.compare(Cmp::Lt, steps, ends);
    if zero_infinity {
        let inf = cx.f.splat(&Ty::new(e, &[t, n, c]), f64::INFINITY);
        let finite = cx.f.compare(Cmp::Ne, nll_b, inf);
        keep = cx.f.and(keep, finite);
    }
    let res = cx.f.select(keep, res, zeros);
    Ok(vec![cx.f.convert(res, p.dtype)])
}
