//! Scans beyond `cumsum`/`cumprod` (those are in `reduce`): `cummax` and
//! `cummin` with the index of each running extreme, and `logcumsumexp`.
//!
//! cummax and cummin are one `reduce_window` each, whose window covers an
//! element and all before it, so the combining function must be
//! associative and commutative; logcumsumexp runs position by position, as
//! PyTorch's loop does, so that it rounds the same way. `cummax`'s is the maximum under a total order of (value,
//! index) pairs that reproduces PyTorch's running loop: a NaN beats any
//! number, a later element wins a tie (`x >= running`), and a later NaN
//! beats an earlier one.

use crate::dtype::DType;
use crate::error::Result;
use crate::hlo::{Cmp, Elem, Func, Reducer, Ty, V};
use crate::shape;

use super::common::counted_loop;
use super::reduce::identity;
use super::{Builder, Cx};

pub fn register(r: &mut Builder) {
    for (name, max) in [("cummax", true), ("cummin", false)] {
        r.op(&format!("aten::{name}(Tensor self, int dim) -> (Tensor values, Tensor indices)"), move |cx, a| {
            let (v, i) = running_extreme(cx, a.tensor(0)?, a.int(1)?, max)?;
            Ok(vec![v, i])
        });
    }
    r.op_and_inplace("aten::logcumsumexp(Tensor self, int dim) -> Tensor", |cx, a| {
        let x = a.tensor(0)?;
        let rank = cx.rank(x);
        let dim = shape::wrap_dim(&cx.op, a.int(1)?, rank)?;
        let d = super::common::float_of(cx.dtype(x));
        // PyTorch's CPU loop accumulates in double (acc_type of float).
        let xc = cx.f.convert(x, d);
        let xc = cx.f.convert(xc, DType::F64);
        if rank == 0 || cx.dims(xc)[dim] <= 1 {
            return Ok(vec![cx.f.convert(xc, d)]);
        }
        let y = sequential_logaddexp(cx, xc, dim);
        Ok(vec![cx.f.convert(y, d)])
    });
}

/// `logcumsumexp` one position after another, as PyTorch's CPU loop adds
/// (`out[i] = logaddexp(out[i - 1], x[i])`, in double): the same
/// operations in the same order and precision round alike, which a tree of
/// windows in f32 would not for large magnitudes (and the backward
/// formula, `exp(x - out)`, magnifies any difference).
fn sequential_logaddexp(cx: &mut Cx, x: V, dim: usize) -> V {
    let dims = cx.dims(x);
    let n = dims[dim];
    let mut one = dims.clone();
    one[dim] = 1;
    let run0 = cx.f.slice_dim(x, dim, 0, 1, 1);
    let out = counted_loop(&mut cx.f, &[x, x, run0], n - 1, |f, s, j| {
        let (x, out, run) = (s[0], s[1], s[2]);
        let one_i = f.splat_int(&Ty::scalar(Elem::I64), 1);
        let pos = f.add(j, one_i);
        let zero_i = f.splat_int(&Ty::scalar(Elem::I64), 0);
        let starts: Vec<V> = (0..dims.len()).map(|k| if k == dim { pos } else { zero_i }).collect();
        let xi = f.dynamic_slice(x, &starts, &one);
        let run = super::special::logaddexp(f, run, xi, false);
        let out = f.dynamic_update_slice(out, run, &starts);
        vec![x, out, run]
    });
    out[1]
}

/// An inclusive scan of `xs` along `dim`: a window of the whole prefix.
fn window_scan(cx: &mut Cx, xs: &[V], inits: &[V], dim: usize, body: impl Fn(&mut Func, &[V]) -> Vec<V>) -> Vec<V> {
    let ty = cx.ty(xs[0]).clone();
    let rank = ty.rank();
    let mut window = vec![1; rank];
    window[dim] = ty.dims[dim];
    let mut padding = vec![(0, 0); rank];
    padding[dim] = (ty.dims[dim] - 1, 0);
    let ones = vec![1; rank];
    cx.f.reduce_window_with(xs, inits, &window, &ones, &ones, &padding, body)
}

/// The running maximum (or minimum) along `dim` and the index it came from.
fn running_extreme(cx: &mut Cx, x: V, dim: i64, max: bool) -> Result<(V, V)> {
    let dims = cx.dims(x);
    let d = shape::wrap_dim(&cx.op, dim, dims.len())?;
    let idx_ty = Ty::new(Elem::I64, &dims);
    if dims.is_empty() {
        return Ok((x, cx.f.splat_int(&idx_ty, 0)));
    }
    let idx = cx.f.iota(&idx_ty, d);
    if dims[d] <= 1 || shape::numel(&dims) == 0 {
        return Ok((x, idx));
    }
    // Bool compares as 0 < 1 through u8.
    let orig = cx.ty(x).elem;
    let x = if orig == Elem::Pred { cx.f.convert(x, Elem::U8) } else { x };
    let elem = cx.ty(x).elem;
    // The identity: a value every element beats (the lowest or highest of
    // the type), at index -1 so that an equal element still wins.
    let init_v = identity(&mut cx.f, elem, if max { Reducer::Max } else { Reducer::Min });
    let init_i = cx.f.splat_int(&Ty::scalar(Elem::I64), -1);
    let float = elem.is_float();
    let out = window_scan(cx, &[x, idx], &[init_v, init_i], d, move |f, s| {
        let (va, ia, vb, ib) = (s[0], s[1], s[2], s[3]);
        let a_wins = beats(f, (va, ia), (vb, ib), max, float);
        vec![f.select(a_wins, va, vb), f.select(a_wins, ia, ib)]
    });
    Ok((cx.f.convert(out[0], orig), out[1]))
}

/// Whether pair `a` beats pair `b` in the total order described in the
/// module doc (`max`: larger values win; else smaller).
fn beats(f: &mut Func, (va, ia): (V, V), (vb, ib): (V, V), max: bool, float: bool) -> V {
    let later = f.compare(Cmp::Gt, ia, ib);
    let better = f.compare(if max { Cmp::Gt } else { Cmp::Lt }, va, vb);
    let equal = f.compare(Cmp::Eq, va, vb);
    let tie = f.and(equal, later);
    let by_value = f.or(better, tie);
    if !float {
        return by_value;
    }
    let a_nan = f.compare(Cmp::Ne, va, va);
    let b_nan = f.compare(Cmp::Ne, vb, vb);
    // Both NaN: the later; one NaN: it; neither: by value.
    let both = f.and(a_nan, b_nan);
    let both_wins = f.and(both, later);
    let b_num = f.not(b_nan);
    let only_a = f.and(a_nan, b_num);
    let a_num = f.not(a_nan);
    let neither = f.and(a_num, b_num);
    let num_wins = f.and(neither, by_value);
    let w = f.or(both_wins, only_a);
    f.or(w, num_wins)
}
