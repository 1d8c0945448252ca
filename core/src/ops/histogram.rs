//! `torch.histogram` and `torch.histogramdd`: counts (or summed weights) of
//! the rows of an `[n, k]` input in a grid of bins, one set of edges per
//! column.
//!
//! Each value's bin is where a binary search puts it among its column's
//! edges (`bucket::search`, upper bound), the last bin closed on the right,
//! as PyTorch's CPU kernel places them; values outside the edges and NaN
//! are dropped. The bins of all columns combine into one index, and one
//! scatter-add counts them.
//!
//! With a bin count instead of edges, the edges span `range`, or the
//! column's minimum and maximum, computed on the device (PyTorch reads them
//! on the host): `linspace` between them, widened by 0.5 either side when
//! they are equal. A non-finite data range is reported at the next host
//! read. `density` divides by the total and by each bin's widths.

use crate::bail_op;
use crate::dtype::DType;
use crate::error::Result;
use crate::hlo::{Cmp, Elem, Reducer, Ty, V};
use crate::shape;

use super::bucket::search;
use super::common::Ew;
use super::creation::linspace;
use super::{Args, Builder, Cx};

pub fn register(r: &mut Builder) {
    r.op(
        "aten::histogram.bin_ct(Tensor self, int bins=100, *, float[]? range=None, Tensor? weight=None, \
         bool density=False) -> (Tensor hist, Tensor bin_edges)",
        |cx, a| {
            let (x, w) = one_column(cx, a, 3)?;
            let edges = bin_edges(cx, x, &[a.int(1)?], a.opt_floats(2))?;
            let hist = histogram(cx, x, &edges, w, a.bool(4)?)?;
            Ok(vec![hist, edges[0]])
        },
    );
    r.op(
        "aten::histogram.bins_tensor(Tensor self, Tensor bins, *, Tensor? weight=None, bool density=False) \
         -> (Tensor hist, Tensor bin_edges)",
        |cx, a| {
            let (x, w) = one_column(cx, a, 2)?;
            let edges = given_edges(cx, x, &[a.tensor(1)?])?;
            let hist = histogram(cx, x, &edges, w, a.bool(3)?)?;
            let copy = cx.f.broadcast_to(edges[0], &cx.dims(edges[0]));
            Ok(vec![hist, copy])
        },
    );
    r.op(
        "aten::_histogramdd_bin_edges(Tensor self, int[] bins, *, float[]? range=None, Tensor? weight=None, \
         bool density=False) -> Tensor[]",
        |cx, a| {
            let (x, _) = columns(cx, a, 3)?;
            bin_edges(cx, x, a.ints(1)?, a.opt_floats(2))
        },
    );
    r.op(
        "aten::_histogramdd_from_bin_cts(Tensor self, int[] bins, *, float[]? range=None, Tensor? weight=None, \
         bool density=False) -> Tensor",
        |cx, a| {
            let (x, w) = columns(cx, a, 3)?;
            let edges = bin_edges(cx, x, a.ints(1)?, a.opt_floats(2))?;
            Ok(vec![histogram(cx, x, &edges, w, a.bool(4)?)?])
        },
    );
    r.op(
        "aten::_histogramdd_from_bin_tensors(Tensor self, Tensor[] bins, *, Tensor? weight=None, bool density=False) \
         -> Tensor",
        |cx, a| {
            let (x, w) = columns(cx, a, 2)?;
            let edges = given_edges(cx, x, a.tensors(1)?)?;
            Ok(vec![histogram(cx, x, &edges, w, a.bool(3)?)?])
        },
    );
}

/// The float32 or float64 input, as PyTorch's CPU kernel takes.
fn float_input(cx: &Cx, x: V) -> Result<DType> {
    let d = cx.dtype(x);
    if !matches!(d, DType::F32 | DType::F64) {
        bail_op!(&*cx.op, "\"histogram_cpu\" not implemented for '{d}'");
    }
    Ok(d)
}

/// A weight argument `i` of the input's dtype with `shape`, flattened.
fn weight_arg(cx: &mut Cx, a: &Args, i: usize, shape: &[i64], d: DType) -> Result<Option<V>> {
    let Some(w) = a.opt_tensor(i) else { return Ok(None) };
    if cx.dims(w) != shape {
        bail_op!(
            &*cx.op,
            "if weight tensor is provided it should have the same shape as the input tensor excluding its innermost \
             dimension, but got input with shape {} and weight with shape {}",
            shape::fmt(shape),
            shape::fmt(&cx.dims(w))
        );
    }
    if cx.dtype(w) != d {
        bail_op!(&*cx.op, "if weight tensor is provided, it should have the same dtype as the input tensor ({d}), got {}", cx.dtype(w));
    }
    Ok(Some(cx.f.reshape(w, &[shape::numel(shape)])))
}

/// `histogram`'s input as one column `[n, 1]`, and its weights.
fn one_column(cx: &mut Cx, a: &Args, weight_at: usize) -> Result<(V, Option<V>)> {
    let x = a.tensor(0)?;
    let d = float_input(cx, x)?;
    let dims = cx.dims(x);
    let n = shape::numel(&dims);
    let w = weight_arg(cx, a, weight_at, &dims, d)?;
    Ok((cx.f.reshape(x, &[n, 1]), w))
}

/// `histogramdd`'s input `[..., k]` as rows `[n, k]`, and their weights.
fn columns(cx: &mut Cx, a: &Args, weight_at: usize) -> Result<(V, Option<V>)> {
    let x = a.tensor(0)?;
    let d = float_input(cx, x)?;
    let dims = cx.dims(x);
    if dims.len() < 2 {
        bail_op!(&*cx.op, "torch.histogramdd(): input tensor should have at least 2 dimensions, but got {}", dims.len());
    }
    let k = dims[dims.len() - 1];
    let lead = &dims[..dims.len() - 1];
    let w = weight_arg(cx, a, weight_at, lead, d)?;
    Ok((cx.f.reshape(x, &[shape::numel(lead), k]), w))
}

/// Column `j` of `x` `[n, k]`, as `[n]`.
fn column(cx: &mut Cx, x: V, j: i64) -> V {
    let n = cx.dims(x)[0];
    let c = cx.f.slice(x, &[0, j], &[n, j + 1], &[1, 1]);
    cx.f.reshape(c, &[n])
}

/// Edges from bin counts: `bins[j] + 1` evenly spaced from `range`'s pair
/// `j` or from column `j`'s minimum to its maximum.
fn bin_edges(cx: &mut Cx, x: V, bins: &[i64], range: Option<&[f64]>) -> Result<Vec<V>> {
    let (n, k) = (cx.dims(x)[0], cx.dims(x)[1]);
    if bins.len() as i64 != k {
        bail_op!(&*cx.op, "torch.histogramdd(): expected {k} sequences of bin edges for each of the {k} input dimensions, but got {} bin counts", bins.len());
    }
    if let Some(r) = range {
        if r.len() as i64 != 2 * k {
            bail_op!(&*cx.op, "torch.histogramdd(): for a {k}-dimensional histogram range should have {} elements, but got {}", 2 * k, r.len());
        }
    }
    let elem = cx.ty(x).elem;
    let scalar = Ty::scalar(elem);
    let mut edges = Vec::with_capacity(bins.len());
    for (j, &b) in bins.iter().enumerate() {
        if b <= 0 {
            bail_op!(&*cx.op, "torch.histogramdd(): bins must be > 0, but got {b} for dimension {j}");
        }
        let (lo, hi) = match range {
            Some(r) => {
                let (lo, hi) = (r[2 * j], r[2 * j + 1]);
                if !lo.is_finite() || !hi.is_finite() {
                    bail_op!(&*cx.op, "torch.histogramdd(): dimension {j}'s range [{lo}, {hi}] is not finite");
                }
                if lo > hi {
                    bail_op!(&*cx.op, "torch.histogramdd(): min should not exceed max, but got min {lo} max {hi} for dimension {j}");
                }
                (cx.f.splat(&scalar, lo), cx.f.splat(&scalar, hi))
            }
            None if n == 0 => (cx.f.splat(&scalar, 0.0), cx.f.splat(&scalar, 1.0)),
            None => {
                let c = column(cx, x, j as i64);
                let (inf, ninf) = (cx.f.splat(&scalar, f64::INFINITY), cx.f.splat(&scalar, f64::NEG_INFINITY));
                let lo = cx.f.reduce(c, inf, &[0], Reducer::Min);
                let hi = cx.f.reduce(c, ninf, &[0], Reducer::Max);
                let ends = cx.f.add(lo, hi);
                let finite = cx.f.unary_to("stablehlo.is_finite", ends, Elem::Pred);
                let (lof, hif) = (cx.f.unary_to("stablehlo.is_finite", lo, Elem::Pred), cx.f.unary_to("stablehlo.is_finite", hi, Elem::Pred));
                let finite = cx.f.and(finite, lof);
                let finite = cx.f.and(finite, hif);
                cx.check_values(finite, &format!("torch.histogramdd(): dimension {j}'s range is not finite (the input holds inf or NaN)"));
                (lo, hi)
            }
        };
        // An empty range widens by 0.5 either side (numpy's rule).
        let same = cx.f.compare(Cmp::Eq, lo, hi);
        let half = cx.f.splat(&scalar, 0.5);
        let (lo5, hi5) = (cx.f.sub(lo, half), cx.f.add(hi, half));
        let (lo, hi) = (cx.f.select(same, lo5, lo), cx.f.select(same, hi5, hi));
        edges.push(linspace(&mut cx.f, lo, hi, b + 1));
    }
    Ok(edges)
}

/// Given edges: one 1-D tensor of the input's dtype per column.
fn given_edges(cx: &mut Cx, x: V, bins: &[V]) -> Result<Vec<V>> {
    let k = cx.dims(x)[1];
    if bins.len() as i64 != k {
        bail_op!(&*cx.op, "torch.histogramdd(): expected {k} sequences of bin edges for each of the {k} input dimensions, but got {}", bins.len());
    }
    for (j, &e) in bins.iter().enumerate() {
        let ed = cx.dims(e);
        if ed.len() != 1 || ed[0] < 1 {
            bail_op!(&*cx.op, "torch.histogramdd(): bins tensor should have one dimension and at least 1 element, but got {} for dimension {j}", shape::fmt(&ed));
        }
        if cx.dtype(e) != cx.dtype(x) {
            bail_op!(&*cx.op, "torch.histogramdd(): bins tensor should have the same dtype as input ({}), but got {}", cx.dtype(x), cx.dtype(e));
        }
    }
    Ok(bins.to_vec())
}

/// The histogram of the rows of `x` `[n, k]` over `edges` (one per column).
fn histogram(cx: &mut Cx, x: V, edges: &[V], weight: Option<V>, density: bool) -> Result<V> {
    let n = cx.dims(x)[0];
    let elem = cx.ty(x).elem;
    let bins: Vec<i64> = edges.iter().map(|&e| cx.dims(e)[0] - 1).collect();
    let total = shape::numel(&bins);
    if total == 0 || n == 0 {
        return Ok(cx.f.splat(&Ty::new(elem, &bins), 0.0));
    }
    let i64_n = Ty::new(Elem::I64, &[n]);
    let mut flat = cx.f.splat_int(&i64_n, 0);
    let mut inside = cx.f.splat(&Ty::new(Elem::Pred, &[n]), 1.0);
    let mut stride = total;
    for (j, &e) in edges.iter().enumerate() {
        let c = column(cx, x, j as i64);
        let nb = bins[j];
        stride /= nb;
        // The upper bound among the edges, less one: the bin whose left edge
        // is the last one <= the value; the right edge falls in the last bin.
        let pos = search(cx, e, Ew::T(c), true, false, None)?;
        let one = cx.f.splat_int(&i64_n, 1);
        let pos = cx.f.sub(pos, one);
        let last = cx.f.splat_int(&i64_n, nb - 1);
        let pos = cx.f.min(pos, last);
        let first_edge = cx.f.slice(e, &[0], &[1], &[1]);
        let last_edge = cx.f.slice(e, &[nb], &[nb + 1], &[1]);
        let (first_edge, last_edge) = (cx.f.broadcast_in_dim(first_edge, &[0], &[n]), cx.f.broadcast_in_dim(last_edge, &[0], &[n]));
        let ge = cx.f.compare(Cmp::Ge, c, first_edge);
        let le = cx.f.compare(Cmp::Le, c, last_edge);
        let ok = cx.f.and(ge, le);
        inside = cx.f.and(inside, ok);
        let sv = cx.f.splat_int(&i64_n, stride);
        let term = cx.f.mul(pos, sv);
        flat = cx.f.add(flat, term);
    }
    let drop = cx.f.splat_int(&i64_n, total);
    let slot = cx.f.select(inside, flat, drop);
    let slot = cx.f.reshape(slot, &[n, 1]);
    let w = match weight {
        Some(w) => w,
        None => cx.f.splat(&Ty::new(elem, &[n]), 1.0),
    };
    let zeros = cx.f.splat(&Ty::new(elem, &[total + 1]), 0.0);
    let counts = cx.f.scatter(zeros, slot, w, &[], &[0], &[0], 1, Some(Reducer::Add));
    let counts = cx.f.slice(counts, &[0], &[total], &[1]);
    let mut hist = cx.f.reshape(counts, &bins);
    if density {
        let z = cx.f.constant(elem, 0.0);
        let all: Vec<usize> = (0..bins.len()).collect();
        let sum = cx.f.reduce(hist, z, &all, Reducer::Add);
        let sum = cx.f.broadcast_in_dim(sum, &[], &bins);
        hist = cx.f.div(hist, sum);
        for (j, &e) in edges.iter().enumerate() {
            let nb = bins[j];
            let right = cx.f.slice(e, &[1], &[nb + 1], &[1]);
            let left = cx.f.slice(e, &[0], &[nb], &[1]);
            let width = cx.f.sub(right, left);
            let width = cx.f.broadcast_in_dim(width, &[j as i64], &bins);
            hist = cx.f.div(hist, width);
        }
    }
    Ok(hist)
}
