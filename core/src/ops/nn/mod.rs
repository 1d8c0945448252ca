//! Neural-network ops, one file per family, each with its forward and
//! backward kernels:
//!
//! - [`act`]: activations; [`softmax`]: softmax and log-softmax;
//! - [`norm`]: layer, batch and group norm;
//! - [`conv`]: convolution; [`pool`]: max and average pooling;
//!   [`adaptive`]: adaptive pooling and max unpooling;
//! - [`dropout`]; [`embedding`];
//! - [`loss`]: NLL, MSE, smooth L1, Huber, binary cross-entropy, with one
//!   [`loss::Reduction`]; [`margin`]: the margin losses;
//! - [`ctc`]: connectionist temporal classification;
//! - [`rnn`]: the fused LSTM and GRU cells; [`attention`] and
//!   [`transformer`]: the fused attention and encoder-layer ops.
//!
//! Half-precision inputs compute in f32 and round once, as PyTorch's CPU
//! kernels do. This file holds the helpers the families share.

use crate::bail_op;
use crate::dtype::DType;
use crate::error::Result;
use crate::hlo::{Elem, Func, Reducer, Ty, V};
use crate::ops::{Args, Builder, Cx};
use crate::shape::fmt;

mod act;
mod adaptive;
mod attention;
mod conv;
mod ctc;
mod dropout;
mod embedding;
mod loss;
mod margin;
mod norm;
mod pool;
mod rnn;
mod softmax;
mod transformer;

// What the families use of each other.
use self::norm::layer_norm;
use self::softmax::softmax;

pub fn register(r: &mut Builder) {
    act::register(r);
    adaptive::register(r);
    attention::register(r);
    conv::register(r);
    ctc::register(r);
    dropout::register(r);
    embedding::register(r);
    loss::register(r);
    margin::register(r);
    norm::register(r);
    pool::register(r);
    rnn::register(r);
    softmax::register(r);
    transformer::register(r);
}

/// Broadcasts `v` (the result of reducing `dims` out of a tensor of shape
/// `full`) back to `full`.
pub(super) fn expand_reduced(cx: &mut Cx, v: V, full: &[i64], dims: &[usize]) -> V {
    let kept: Vec<i64> = (0..full.len()).filter(|d| !dims.contains(d)).map(|d| d as i64).collect();
    cx.f.broadcast_in_dim(v, &kept, full)
}

/// Sum of `x` over `dims`, in `x`'s type.
pub(super) fn sum(cx: &mut Cx, x: V, dims: &[usize]) -> V {
    let zero = cx.f.constant(cx.ty(x).elem, 0.0);
    cx.f.reduce(x, zero, dims, Reducer::Add)
}

/// The lowest value of an element type: -inf for floats, the minimum for
/// integers (max-pool padding and initial values).
pub(super) fn lowest(f: &mut Func, elem: Elem) -> V {
    let ty = Ty::scalar(elem);
    match elem {
        e if e.is_float() => f.splat(&ty, f64::NEG_INFINITY),
        Elem::Pred | Elem::U8 | Elem::U32 | Elem::U64 => f.splat_int(&ty, 0),
        Elem::I8 => f.splat_int(&ty, i8::MIN as i64),
        Elem::I16 => f.splat_int(&ty, i16::MIN as i64),
        Elem::I32 => f.splat_int(&ty, i32::MIN as i64),
        _ => f.splat_int(&ty, i64::MIN),
    }
}

/// Embedding indices must be int64 or int32 (PyTorch's message).
pub(super) fn check_indices(cx: &Cx, idx: V) -> Result<()> {
    let it = cx.dtype(idx);
    if !matches!(it, DType::I64 | DType::I32) {
        bail_op!(
            &*cx.op,
            "Expected tensor for argument #1 'indices' to have one of the following scalar types: Long, Int; \
             but got {it} instead"
        );
    }
    Ok(())
}

/// Requires a floating-point tensor, with PyTorch's "not implemented for" message.
pub(super) fn require_float(cx: &Cx, x: V, what: &str) -> Result<DType> {
    let d = cx.dtype(x);
    if !d.is_float() {
        bail_op!(&*cx.op, "\"{what}\" not implemented for '{d}'");
    }
    Ok(d)
}

/// Expands an `int[]` conv/pool parameter of length 1 to `n` entries.
pub(super) fn expand_param(cx: &Cx, name: &str, v: &[i64], n: usize) -> Result<Vec<i64>> {
    match v.len() {
        1 => Ok(vec![v[0]; n]),
        l if l == n => Ok(v.to_vec()),
        _ => bail_op!(
            &*cx.op,
            "expected {name} to be a single integer value or a list of {n} values to match the convolution \
             dimensions, but got {name}={}",
            fmt(v)
        ),
    }
}

/// `mask[i]`, or a placeholder for the undefined gradient.
pub(super) fn masked(cx: &mut Cx, mask: &[bool], i: usize, make: impl FnOnce(&mut Cx) -> Result<V>) -> Result<V> {
    if mask.get(i).copied().unwrap_or(true) {
        make(cx)
    } else {
        Ok(cx.none())
    }
}

/// `bool[3] output_mask` as three flags.
pub(super) fn output_mask(cx: &Cx, a: &Args, i: usize) -> Result<[bool; 3]> {
    let m = a.bools(i)?;
    match m[..] {
        [a, b, c] => Ok([a, b, c]),
        _ => bail_op!(&*cx.op, "output_mask must have 3 entries, got {}", m.len()),
    }
}
