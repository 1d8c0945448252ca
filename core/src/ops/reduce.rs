//! Reductions: `sum`, `mean`, `prod`, `amax`/`amin`, `max`/`min` (with
//! indices), `argmax`/`argmin`, `var`/`std` (+ `_mean`), `logsumexp`,
//! `all`/`any`, vector norms, and the scans `cumsum`/`cumprod`.
//!
//! Dims follow PyTorch: negative dims wrap, an absent or empty list means all
//! dims, and a 0-dim tensor accepts dim 0/-1. Half types accumulate in f32
//! and round once; integer and bool sums and products give int64.

use crate::bail_op;
use crate::dtype::DType;
use crate::error::Result;
use crate::hlo::{Cmp, Elem, Func, Reducer, Ty, V};
use crate::shape;
use crate::tensor::Scalar;

use super::common::{float_of, keepdim, reduce_dims};
use super::{Args, Cx, Builder, ScalarRef};

pub fn register(r: &mut Builder) {
    register_sum_mean_prod(r);
    register_extrema(r);
    register_var_std(r);
    register_misc(r);
    register_scans(r);
    register_norms(r);
}

// ------------------------------------------------------------------ helpers

/// The identity of `r` for element type `elem` (the init of a reduction).
pub(super) fn identity(f: &mut Func, elem: Elem, r: Reducer) -> V {
    let ty = Ty::scalar(elem);
    match r {
        Reducer::Add | Reducer::Or => f.splat(&ty, 0.0),
        Reducer::Mul | Reducer::And => f.splat(&ty, 1.0),
        Reducer::Max | Reducer::Min => {
            let max = r == Reducer::Max;
            if elem.is_float() {
                f.splat(&ty, if max { f64::NEG_INFINITY } else { f64::INFINITY })
            } else if elem == Elem::Pred {
                f.splat(&ty, if max { 0.0 } else { 1.0 })
            } else {
                let (lo, hi) = int_range(elem);
                f.splat_int(&ty, if max { lo } else { hi })
            }
        }
    }
}

/// The range of an integer element type.
fn int_range(elem: Elem) -> (i64, i64) {
    match elem {
        Elem::I8 => (i8::MIN as i64, i8::MAX as i64),
        Elem::I16 => (i16::MIN as i64, i16::MAX as i64),
        Elem::I32 => (i32::MIN as i64, i32::MAX as i64),
        Elem::U8 => (0, u8::MAX as i64),
        _ => (i64::MIN, i64::MAX),
    }
}

/// Reduces `x` over `dims` with `r` (bool max/min become or/and).
fn reduce_by(cx: &mut Cx, x: V, dims: &[usize], r: Reducer) -> V {
    if dims.is_empty() {
        return x;
    }
    let elem = cx.ty(x).elem;
    let r = match (r, elem) {
        (Reducer::Max | Reducer::Add, Elem::Pred) => Reducer::Or,
        (Reducer::Min | Reducer::Mul, Elem::Pred) => Reducer::And,
        (r, _) => r,
    };
    let init = identity(&mut cx.f, elem, r);
    if elem.is_float() && matches!(r, Reducer::Max | Reducer::Min) {
        // The plugin's maximum/minimum drop NaNs; PyTorch propagates them.
        return cx.f.reduce_with(&[x], &[init], dims, |f, s| {
            let m = f.binary(r.op(), s[0], s[1]);
            let a_nan = f.compare(Cmp::Ne, s[0], s[0]);
            let b_nan = f.compare(Cmp::Ne, s[1], s[1]);
            let m = f.select(b_nan, s[1], m);
            vec![f.select(a_nan, s[0], m)]
        })[0];
    }
    cx.f.reduce(x, init, dims, r)
}

/// The number of elements reduced over `dims`.
fn count(in_dims: &[i64], dims: &[usize]) -> i64 {
    dims.iter().map(|&d| in_dims[d]).product()
}

/// Applies `keepdim` to a reduced value.
fn finish(cx: &mut Cx, v: V, in_dims: &[i64], dims: &[usize], keep: bool) -> V {
    if keep {
        keepdim(cx, v, in_dims, dims)
    } else {
        v
    }
}

/// A reduced value broadcast back over the input's shape.
fn expand_back(cx: &mut Cx, v: V, in_dims: &[i64], dims: &[usize]) -> V {
    let k = keepdim(cx, v, in_dims, dims);
    cx.f.broadcast_to(k, in_dims)
}

/// The `int[1]? dim` argument `i` as wrapped reduction dims.
fn dims_arg(cx: &Cx, a: &Args, i: usize, rank: usize) -> Result<Vec<usize>> {
    reduce_dims(cx, a.opt_ints(i), rank)
}

/// A single `int dim` as reduction dims (none for a 0-dim tensor).
fn one_dim(cx: &Cx, dim: i64, rank: usize) -> Result<Vec<usize>> {
    reduce_dims(cx, Some(&[dim]), rank)
}

/// Errors like PyTorch when an op without an identity reduces an empty dim.
fn require_nonempty(cx: &Cx, name: &str, in_dims: &[i64], dims: &[usize]) -> Result<()> {
    if let Some(&d) = dims.iter().find(|&&d| in_dims[d] == 0) {
        bail_op!(
            &*cx.op,
            "{name}(): Expected reduction dim {d} to have non-zero size (input shape {}).",
            shape::fmt(in_dims)
        );
    }
    Ok(())
}

// ------------------------------------------------------------ sum/mean/prod

/// The result dtype of `sum`/`prod`: `dtype` if given; integers and bool
/// widen to int64.
fn sum_dtype(d: DType, dtype: Option<DType>) -> DType {
    dtype.unwrap_or(if d.is_float() || d.is_complex() { d } else { DType::I64 })
}

/// `sum`/`prod` over `dims` in the opmath of the result dtype.
fn accumulate(cx: &mut Cx, x: V, dims: &[usize], keep: bool, dtype: Option<DType>, r: Reducer) -> V {
    let in_dims = cx.dims(x);
    let out = sum_dtype(cx.dtype(x), dtype);
    // Cast to the requested dtype first (so its rounding applies), then up.
    let xv = cx.f.convert(x, out);
    let xv = cx.f.convert(xv, out.opmath());
    let s = reduce_by(cx, xv, dims, r);
    let s = cx.f.convert(s, out);
    finish(cx, s, &in_dims, dims, keep)
}

fn mean(cx: &mut Cx, x: V, dims: &[usize], keep: bool, dtype: Option<DType>) -> Result<V> {
    let d = cx.dtype(x);
    let out = dtype.unwrap_or(d);
    if !(out.is_float() || out.is_complex()) {
        let which = if dtype.is_some() { "Optional" } else { "Input" };
        bail_op!(
            &*cx.op,
            "mean(): could not infer output dtype. {which} dtype must be either a floating point or complex dtype. Got: {out}"
        );
    }
    let in_dims = cx.dims(x);
    let n = count(&in_dims, dims);
    let xv = cx.f.convert(x, out);
    let xv = cx.f.convert(xv, out.opmath());
    let s = reduce_by(cx, xv, dims, Reducer::Add);
    // An empty reduction divides 0 by 0: NaN, as in PyTorch.
    let nv = cx.f.full_like(s, n as f64);
    let m = cx.f.div(s, nv);
    let m = cx.f.convert(m, out);
    Ok(finish(cx, m, &in_dims, dims, keep))
}

fn register_sum_mean_prod(r: &mut Builder) {
    r.op("aten::trace(Tensor self) -> Tensor", |cx, a| {
        // The sum of the main diagonal of a matrix, in sum's dtype.
        let x = a.tensor(0)?;
        let dims = cx.dims(x);
        if dims.len() != 2 {
            bail_op!(&*cx.op, "trace: expected a matrix, but got tensor with dim {}", dims.len());
        }
        let ty = Ty::new(Elem::I64, &dims);
        let (rows, cols) = (cx.f.iota(&ty, 0), cx.f.iota(&ty, 1));
        let diag = cx.f.compare(Cmp::Eq, rows, cols);
        let zero = cx.f.full_like(x, 0.0);
        let on = cx.f.select(diag, x, zero);
        Ok(vec![accumulate(cx, on, &[0, 1], false, None, Reducer::Add)])
    });
    r.op("aten::sum(Tensor self, *, ScalarType? dtype=None) -> Tensor", |cx, a| {
        let x = a.tensor(0)?;
        let dims: Vec<usize> = (0..cx.rank(x)).collect();
        Ok(vec![accumulate(cx, x, &dims, false, a.opt_dtype(1), Reducer::Add)])
    });
    r.op(
        "aten::sum.dim_IntList(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor",
        |cx, a| {
            let x = a.tensor(0)?;
            let dims = dims_arg(cx, a, 1, cx.rank(x))?;
            Ok(vec![accumulate(cx, x, &dims, a.bool(2)?, a.opt_dtype(3), Reducer::Add)])
        },
    );
    r.op(
        "aten::nansum(Tensor self, int[1]? dim=None, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor",
        |cx, a| {
            let x = a.tensor(0)?;
            let dims = dims_arg(cx, a, 1, cx.rank(x))?;
            let x = if cx.ty(x).elem.is_float() {
                let nan = cx.f.compare(Cmp::Ne, x, x);
                let zero = cx.f.full_like(x, 0.0);
                cx.f.select(nan, zero, x)
            } else {
                x
            };
            Ok(vec![accumulate(cx, x, &dims, a.bool(2)?, a.opt_dtype(3), Reducer::Add)])
        },
    );
    r.op("aten::prod(Tensor self, *, ScalarType? dtype=None) -> Tensor", |cx, a| {
        let x = a.tensor(0)?;
        let dims: Vec<usize> = (0..cx.rank(x)).collect();
        Ok(vec![accumulate(cx, x, &dims, false, a.opt_dtype(1), Reducer::Mul)])
    });
    r.op(
        "aten::prod.dim_int(Tensor self, int dim, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor",
        |cx, a| {
            let x = a.tensor(0)?;
            let dims = one_dim(cx, a.int(1)?, cx.rank(x))?;
            Ok(vec![accumulate(cx, x, &dims, a.bool(2)?, a.opt_dtype(3), Reducer::Mul)])
        },
    );
    r.op("aten::mean(Tensor self, *, ScalarType? dtype=None) -> Tensor", |cx, a| {
        let x = a.tensor(0)?;
        let dims: Vec<usize> = (0..cx.rank(x)).collect();
        Ok(vec![mean(cx, x, &dims, false, a.opt_dtype(1))?])
    });
    r.op(
        "aten::mean.dim(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor",
        |cx, a| {
            let x = a.tensor(0)?;
            let dims = dims_arg(cx, a, 1, cx.rank(x))?;
            Ok(vec![mean(cx, x, &dims, a.bool(2)?, a.opt_dtype(3))?])
        },
    );
}

// ------------------------------------------------------------------ extrema

/// `amax`/`amin` over `dims`: NaN propagates; empty dims are an error.
fn extreme(cx: &mut Cx, name: &str, x: V, dims: &[usize], keep: bool, max: bool) -> Result<V> {
    let in_dims = cx.dims(x);
    require_nonempty(cx, name, &in_dims, dims)?;
    let v = reduce_by(cx, x, dims, if max { Reducer::Max } else { Reducer::Min });
    Ok(finish(cx, v, &in_dims, dims, keep))
}

/// Values and int64 indices of the max (min) of `x` along `dim`: NaN counts
/// as the extreme, ties go to the first occurrence, as in PyTorch.
pub(super) fn arg_extreme(cx: &mut Cx, x: V, dim: usize, max: bool) -> (V, V) {
    let ty = cx.ty(x).clone();
    // Bool compares as 0/1.
    let xv = if ty.elem == Elem::Pred { cx.f.convert(x, Elem::U8) } else { x };
    let elem = cx.ty(xv).elem;
    let idx = cx.f.iota(&Ty::new(Elem::I64, &ty.dims), dim);
    let init_v = identity(&mut cx.f, elem, if max { Reducer::Max } else { Reducer::Min });
    // Any real element beats the init on a tie, since its index is smaller.
    let init_i = cx.f.splat_int(&Ty::scalar(Elem::I64), i64::MAX);
    let is_float = elem.is_float();
    let out = cx.f.reduce_with(&[xv, idx], &[init_v, init_i], &[dim], |f, s| {
        let (a, ai, b, bi) = (s[0], s[1], s[2], s[3]);
        let better = f.compare(if max { Cmp::Gt } else { Cmp::Lt }, b, a);
        let eq = f.compare(Cmp::Eq, a, b);
        let earlier = f.compare(Cmp::Lt, bi, ai);
        let tie = f.and(eq, earlier);
        let mut take_b = f.or(better, tie);
        if is_float {
            // NaN wins over numbers; between NaNs the first one wins.
            let a_nan = f.compare(Cmp::Ne, a, a);
            let b_nan = f.compare(Cmp::Ne, b, b);
            let a_num = f.not(a_nan);
            let b_only = f.and(b_nan, a_num);
            let both = f.and(a_nan, b_nan);
            let both_earlier = f.and(both, earlier);
            take_b = f.or(take_b, b_only);
            take_b = f.or(take_b, both_earlier);
        }
        vec![f.select(take_b, b, a), f.select(take_b, bi, ai)]
    });
    let values = cx.f.convert(out[0], ty.elem);
    (values, out[1])
}

/// `max.dim`/`min.dim`.
fn extreme_dim(cx: &mut Cx, name: &str, x: V, dim: i64, keep: bool, max: bool) -> Result<Vec<V>> {
    let in_dims = cx.dims(x);
    let dims = one_dim(cx, dim, in_dims.len())?;
    if dims.is_empty() {
        // A 0-dim tensor is its own max, at index 0.
        let i = cx.f.splat_int(&Ty::scalar(Elem::I64), 0);
        return Ok(vec![x, i]);
    }
    require_nonempty(cx, name, &in_dims, &dims)?;
    let (v, i) = arg_extreme(cx, x, dims[0], max);
    Ok(vec![finish(cx, v, &in_dims, &dims, keep), finish(cx, i, &in_dims, &dims, keep)])
}

/// `argmax`/`argmin`; without a dim the input is flattened.
fn arg_op(cx: &mut Cx, name: &str, x: V, dim: Option<i64>, keep: bool, max: bool) -> Result<V> {
    if cx.dtype(x) == DType::Bool {
        bail_op!(&*cx.op, "{name}(): does not support bool input");
    }
    let in_dims = cx.dims(x);
    let rank = in_dims.len();
    match dim {
        Some(d) => {
            let dims = one_dim(cx, d, rank)?;
            if dims.is_empty() {
                return Ok(cx.f.splat_int(&Ty::scalar(Elem::I64), 0));
            }
            require_nonempty(cx, name, &in_dims, &dims)?;
            let (_, i) = arg_extreme(cx, x, dims[0], max);
            Ok(finish(cx, i, &in_dims, &dims, keep))
        }
        None => {
            let n = shape::numel(&in_dims);
            if n == 0 {
                bail_op!(
                    &*cx.op,
                    "{name}(): Expected reduction dim to be specified for input.numel() == 0 (input shape {}).",
                    shape::fmt(&in_dims)
                );
            }
            let flat = cx.f.reshape(x, &[n]);
            let (_, i) = arg_extreme(cx, flat, 0, max);
            Ok(if keep { cx.f.reshape(i, &vec![1; rank]) } else { i })
        }
    }
}

fn register_extrema(r: &mut Builder) {
    for (name, max) in [("amax", true), ("amin", false)] {
        r.op(&format!("aten::{name}(Tensor self, int[1] dim=[], bool keepdim=False) -> Tensor"), move |cx, a| {
            let x = a.tensor(0)?;
            let dims = dims_arg(cx, a, 1, cx.rank(x))?;
            Ok(vec![extreme(cx, name, x, &dims, a.bool(2)?, max)?])
        });
    }
    for (name, max) in [("max", true), ("min", false)] {
        r.op(&format!("aten::{name}(Tensor self) -> Tensor"), move |cx, a| {
            let x = a.tensor(0)?;
            let in_dims = cx.dims(x);
            if shape::numel(&in_dims) == 0 {
                bail_op!(
                    &*cx.op,
                    "{name}(): Expected reduction dim to be specified for input.numel() == 0 (input shape {}). \
                     Specify the reduction dim with the 'dim' argument.",
                    shape::fmt(&in_dims)
                );
            }
            let dims: Vec<usize> = (0..in_dims.len()).collect();
            Ok(vec![extreme(cx, name, x, &dims, false, max)?])
        });
        r.op(
            &format!("aten::{name}.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)"),
            move |cx, a| {
                let x = a.tensor(0)?;
                extreme_dim(cx, name, x, a.int(1)?, a.bool(2)?, max)
            },
        );
    }
    for (name, max) in [("argmax", true), ("argmin", false)] {
        r.op(&format!("aten::{name}(Tensor self, int? dim=None, bool keepdim=False) -> Tensor"), move |cx, a| {
            let x = a.tensor(0)?;
            Ok(vec![arg_op(cx, name, x, a.opt_int(1), a.bool(2)?, max)?])
        });
    }
    r.op("aten::aminmax(Tensor self, *, int? dim=None, bool keepdim=False) -> (Tensor min, Tensor max)", |cx, a| {
        let x = a.tensor(0)?;
        let rank = cx.rank(x);
        let keep = a.bool(2)?;
        let dims = match a.opt_int(1) {
            Some(d) => one_dim(cx, d, rank)?,
            None => (0..rank).collect(),
        };
        let lo = extreme(cx, "aminmax", x, &dims, keep, false)?;
        let hi = extreme(cx, "aminmax", x, &dims, keep, true)?;
        Ok(vec![lo, hi])
    });
}

// ------------------------------------------------------------------ var/std

/// The correction (degrees of freedom subtracted from N).
#[derive(Clone, Copy)]
enum Correction {
    Const(f64),
    Runtime(ScalarRef),
}

impl Correction {
    /// `Scalar? correction` (default 1).
    fn arg(a: &Args, i: usize) -> Correction {
        a.opt_scalar(i).map_or(Correction::Const(1.0), Correction::Runtime)
    }
    /// `bool unbiased`.
    fn unbiased(a: &Args, i: usize) -> Result<Correction> {
        Ok(Correction::Const(if a.bool(i)? { 1.0 } else { 0.0 }))
    }
}

/// `(var, mean)` of `x` over `dims`, in `x`'s dtype. Two passes (mean, then
/// squared deviations) for accuracy; the divisor is `max(N - correction, 0)`.
fn var_mean(cx: &mut Cx, x: V, dims: &[usize], corr: Correction, keep: bool) -> Result<(V, V)> {
    let d = cx.dtype(x);
    if !d.is_float() {
        bail_op!(&*cx.op, "std and var only support floating point and complex dtypes, got {d}");
    }
    let in_dims = cx.dims(x);
    let n = count(&in_dims, dims) as f64;
    let xo = cx.f.convert(x, d.opmath());
    let s = reduce_by(cx, xo, dims, Reducer::Add);
    let nv = cx.f.full_like(s, n);
    let m = cx.f.div(s, nv);
    let mb = expand_back(cx, m, &in_dims, dims);
    let dev = cx.f.sub(xo, mb);
    let sq = cx.f.mul(dev, dev);
    let ss = reduce_by(cx, sq, dims, Reducer::Add);
    let elem = Elem::from(d.opmath());
    let c = match corr {
        Correction::Const(c) => cx.f.constant(elem, c),
        Correction::Runtime(s) => cx.scalar(s, elem),
    };
    let n0 = cx.f.constant(elem, n);
    let dof = cx.f.sub(n0, c);
    let zero = cx.f.constant(elem, 0.0);
    let dof = cx.f.max(dof, zero);
    let dof = cx.f.broadcast_to(dof, &cx.dims(ss));
    let var = cx.f.div(ss, dof);
    let var = cx.f.convert(var, d);
    let m = cx.f.convert(m, d);
    Ok((finish(cx, var, &in_dims, dims, keep), finish(cx, m, &in_dims, dims, keep)))
}

fn sqrt(cx: &mut Cx, v: V) -> V {
    let d = cx.dtype(v);
    let u = cx.f.convert(v, d.opmath());
    let s = cx.f.unary("stablehlo.sqrt", u);
    cx.f.convert(s, d)
}

/// Which of var/std (and with the mean or not) an overload returns.
#[derive(Clone, Copy, PartialEq)]
enum VarKind {
    Var,
    Std,
    VarMean,
    StdMean,
}

fn var_outputs(cx: &mut Cx, kind: VarKind, x: V, dims: &[usize], corr: Correction, keep: bool) -> Result<Vec<V>> {
    let (v, m) = var_mean(cx, x, dims, corr, keep)?;
    Ok(match kind {
        VarKind::Var => vec![v],
        VarKind::Std => vec![sqrt(cx, v)],
        VarKind::VarMean => vec![v, m],
        VarKind::StdMean => vec![sqrt(cx, v), m],
    })
}

fn register_var_std(r: &mut Builder) {
    for (name, kind) in
        [("var", VarKind::Var), ("std", VarKind::Std), ("var_mean", VarKind::VarMean), ("std_mean", VarKind::StdMean)]
    {
        let ret = if matches!(kind, VarKind::Var | VarKind::Std) { "Tensor" } else { "(Tensor, Tensor)" };
        r.op(
            &format!(
                "aten::{name}.correction(Tensor self, int[1]? dim=None, *, Scalar? correction=None, bool keepdim=False) -> {ret}"
            ),
            move |cx, a| {
                let x = a.tensor(0)?;
                let dims = dims_arg(cx, a, 1, cx.rank(x))?;
                var_outputs(cx, kind, x, &dims, Correction::arg(a, 2), a.bool(3)?)
            },
        );
        r.op(&format!("aten::{name}(Tensor self, bool unbiased=True) -> {ret}"), move |cx, a| {
            let x = a.tensor(0)?;
            let dims: Vec<usize> = (0..cx.rank(x)).collect();
            var_outputs(cx, kind, x, &dims, Correction::unbiased(a, 1)?, false)
        });
        r.op(
            &format!("aten::{name}.dim(Tensor self, int[1]? dim, bool unbiased=True, bool keepdim=False) -> {ret}"),
            move |cx, a| {
                let x = a.tensor(0)?;
                let dims = dims_arg(cx, a, 1, cx.rank(x))?;
                var_outputs(cx, kind, x, &dims, Correction::unbiased(a, 2)?, a.bool(3)?)
            },
        );
    }
}

// ------------------------------------------------- logsumexp, all/any, ...

/// `log(sum(exp(x)))` shifted by the max, which is zeroed where infinite so
/// that all -inf rows give -inf (and +inf rows +inf) instead of NaN.
fn logsumexp(cx: &mut Cx, x: V, dims: &[usize], keep: bool) -> V {
    let in_dims = cx.dims(x);
    let out = float_of(cx.dtype(x));
    let xo = cx.f.convert(x, out.opmath());
    let m = reduce_by(cx, xo, dims, Reducer::Max);
    let am = cx.f.unary("stablehlo.abs", m);
    let inf = cx.f.full_like(m, f64::INFINITY);
    let is_inf = cx.f.compare(Cmp::Eq, am, inf);
    let zero = cx.f.full_like(m, 0.0);
    let m = cx.f.select(is_inf, zero, m);
    let mb = expand_back(cx, m, &in_dims, dims);
    let shifted = cx.f.sub(xo, mb);
    let e = cx.f.unary("stablehlo.exponential", shifted);
    let s = reduce_by(cx, e, dims, Reducer::Add);
    let l = cx.f.unary("stablehlo.log", s);
    let y = cx.f.add(l, m);
    let y = cx.f.convert(y, out);
    finish(cx, y, &in_dims, dims, keep)
}

/// `all`/`any`: bool results, except uint8 inputs give uint8 (as PyTorch).
fn all_any(cx: &mut Cx, x: V, dims: &[usize], keep: bool, all: bool) -> V {
    let in_dims = cx.dims(x);
    let d = cx.dtype(x);
    let b = super::elementwise::to_bool(cx, x);
    let v = if dims.is_empty() {
        b
    } else {
        let r = if all { Reducer::And } else { Reducer::Or };
        let init = identity(&mut cx.f, Elem::Pred, r);
        cx.f.reduce(b, init, dims, r)
    };
    let v = if d == DType::U8 { cx.f.convert(v, DType::U8) } else { v };
    finish(cx, v, &in_dims, dims, keep)
}

fn register_misc(r: &mut Builder) {
    r.op("aten::logsumexp(Tensor self, int[1] dim, bool keepdim=False) -> Tensor", |cx, a| {
        let x = a.tensor(0)?;
        let dims = dims_arg(cx, a, 1, cx.rank(x))?;
        Ok(vec![logsumexp(cx, x, &dims, a.bool(2)?)])
    });
    for (name, all) in [("all", true), ("any", false)] {
        r.op(&format!("aten::{name}(Tensor self) -> Tensor"), move |cx, a| {
            let x = a.tensor(0)?;
            let dims: Vec<usize> = (0..cx.rank(x)).collect();
            Ok(vec![all_any(cx, x, &dims, false, all)])
        });
        r.op(&format!("aten::{name}.dim(Tensor self, int dim, bool keepdim=False) -> Tensor"), move |cx, a| {
            let x = a.tensor(0)?;
            let dims = one_dim(cx, a.int(1)?, cx.rank(x))?;
            Ok(vec![all_any(cx, x, &dims, a.bool(2)?, all)])
        });
        r.op(&format!("aten::{name}.dims(Tensor self, int[]? dim=None, bool keepdim=False) -> Tensor"), move |cx, a| {
            let x = a.tensor(0)?;
            let dims = dims_arg(cx, a, 1, cx.rank(x))?;
            Ok(vec![all_any(cx, x, &dims, a.bool(2)?, all)])
        });
    }
    // torch.equal: same size and every element equal (after promotion; NaN
    // is unequal to itself), as a 0-d bool tensor that a frontend reads.
    r.op("aten::equal(Tensor self, Tensor other) -> bool", |cx, a| {
        let (x, y) = (a.tensor(0)?, a.tensor(1)?);
        let scalar = Ty::scalar(Elem::Pred);
        if cx.dims(x) != cx.dims(y) {
            return Ok(vec![cx.f.splat(&scalar, 0.0)]);
        }
        let d = super::common::result_dtype(cx, &[super::common::Ew::T(x), super::common::Ew::T(y)]);
        let (xc, yc) = (cx.f.convert(x, d), cx.f.convert(y, d));
        let eq = cx.f.compare(Cmp::Eq, xc, yc);
        let all: Vec<usize> = (0..cx.rank(x)).collect();
        let t = cx.f.splat(&scalar, 1.0);
        Ok(vec![cx.f.reduce(eq, t, &all, Reducer::And)])
    });
    r.op("aten::count_nonzero.dim_IntList(Tensor self, int[] dim) -> Tensor", |cx, a| {
        let x = a.tensor(0)?;
        let dims = dims_arg(cx, a, 1, cx.rank(x))?;
        let b = super::elementwise::to_bool(cx, x);
        Ok(vec![accumulate(cx, b, &dims, false, None, Reducer::Add)])
    });
}

// -------------------------------------------------------------------- scans

/// An inclusive scan along `dim` as a `reduce_window` whose window covers
/// the element and everything before it (padding of `n - 1` in front).
pub(super) fn scan(cx: &mut Cx, x: V, dim: usize, r: Reducer) -> V {
    let ty = cx.ty(x).clone();
    let n = ty.dims[dim];
    if n <= 1 {
        return x;
    }
    let rank = ty.rank();
    let mut window = vec![1; rank];
    window[dim] = n;
    let mut padding = vec![(0, 0); rank];
    padding[dim] = (n - 1, 0);
    let init = identity(&mut cx.f, ty.elem, r);
    let ones = vec![1; rank];
    cx.f.reduce_window_with(&[x], &[init], &window, &ones, &ones, &padding, |f, s| vec![f.binary(r.op(), s[0], s[1])])
        [0]
}

/// `cumsum`/`cumprod`: integers and bool give int64; half types accumulate
/// in f32 and round each output once (as PyTorch's CPU kernel does).
fn cumulative(cx: &mut Cx, x: V, dim: i64, dtype: Option<DType>, r: Reducer) -> Result<V> {
    let rank = cx.rank(x);
    let dim = shape::wrap_dim(&cx.op, dim, rank)?;
    let out = sum_dtype(cx.dtype(x), dtype);
    let xv = cx.f.convert(x, out);
    let xv = cx.f.convert(xv, out.opmath());
    let y = if rank == 0 { xv } else { scan(cx, xv, dim, r) };
    Ok(cx.f.convert(y, out))
}

fn register_scans(r: &mut Builder) {
    r.op_and_inplace("aten::cumsum(Tensor self, int dim, *, ScalarType? dtype=None) -> Tensor", |cx, a| {
        Ok(vec![cumulative(cx, a.tensor(0)?, a.int(1)?, a.opt_dtype(2), Reducer::Add)?])
    });
    r.op_and_inplace("aten::cumprod(Tensor self, int dim, *, ScalarType? dtype=None) -> Tensor", |cx, a| {
        Ok(vec![cumulative(cx, a.tensor(0)?, a.int(1)?, a.opt_dtype(2), Reducer::Mul)?])
    });
}

// -------------------------------------------------------------------- norms

/// `linalg.vector_norm` with a compile-time `ord` (it selects the formula).
pub(super) fn vector_norm(cx: &mut Cx, x: V, ord: f64, dims: &[usize], keep: bool, dtype: Option<DType>) -> Result<V> {
    let d = cx.dtype(x);
    if !d.is_float() {
        bail_op!(&*cx.op, "linalg.vector_norm: Expected a floating point or complex tensor as input. Got {d}");
    }
    let out = dtype.unwrap_or(d);
    if !out.is_float() {
        bail_op!(&*cx.op, "linalg.vector_norm: dtype should be floating point or complex, but got {out}");
    }
    let in_dims = cx.dims(x);
    let xo = cx.f.convert(x, out);
    let xo = cx.f.convert(xo, out.opmath());
    let ab = cx.f.unary("stablehlo.abs", xo);
    let y = if ord.is_infinite() {
        if count(&in_dims, dims) == 0 || dims.iter().any(|&i| in_dims[i] == 0) {
            bail_op!(
                &*cx.op,
                "linalg.vector_norm cannot compute the {ord} norm on an empty tensor because the operation does not \
                 have an identity (input shape {})",
                shape::fmt(&in_dims)
            );
        }
        reduce_by(cx, ab, dims, if ord > 0.0 { Reducer::Max } else { Reducer::Min })
    } else if ord == 0.0 {
        let zero = cx.f.full_like(ab, 0.0);
        let nz = cx.f.compare(Cmp::Ne, ab, zero);
        let nz = cx.f.convert(nz, out.opmath());
        reduce_by(cx, nz, dims, Reducer::Add)
    } else if ord == 1.0 {
        reduce_by(cx, ab, dims, Reducer::Add)
    } else if ord == 2.0 {
        let sq = cx.f.mul(ab, ab);
        let s = reduce_by(cx, sq, dims, Reducer::Add);
        cx.f.unary("stablehlo.sqrt", s)
    } else {
        let p = cx.f.full_like(ab, ord);
        let pw = cx.f.binary("stablehlo.power", ab, p);
        let s = reduce_by(cx, pw, dims, Reducer::Add);
        let inv = cx.f.full_like(s, 1.0 / ord);
        cx.f.binary("stablehlo.power", s, inv)
    };
    let y = cx.f.convert(y, out);
    Ok(finish(cx, y, &in_dims, dims, keep))
}

fn static_f64(s: Option<Scalar>, default: f64) -> f64 {
    s.map_or(default, |s| s.to_f64())
}

fn register_norms(r: &mut Builder) {
    // renorm: each slice along `dim` whose p-norm exceeds maxnorm is scaled
    // down to it (by maxnorm / (norm + 1e-7), PyTorch's factor).
    // p picks the formula, so both scalars are compiled in.
    r.op_and_inplace_with("aten::renorm(Tensor self, Scalar p, int dim, Scalar maxnorm) -> Tensor", |e| e.static_scalars(), |cx, a| {
        let x = a.tensor(0)?;
        let (p, maxnorm) = (a.static_scalar(1)?.to_f64(), a.static_scalar(3)?.to_f64());
        let d = cx.dtype(x);
        if !d.is_float() {
            bail_op!(&*cx.op, "renorm: input needs to be a floating point or complex tensor, got {d}");
        }
        if p <= 0.0 {
            bail_op!(&*cx.op, "renorm: non-positive-norm not supported");
        }
        if maxnorm < 0.0 {
            bail_op!(&*cx.op, "renorm: expected maxnorm to be >= 0 but got {maxnorm}");
        }
        let rank = cx.rank(x);
        if rank <= 1 {
            bail_op!(&*cx.op, "renorm: input needs at least 2 dimensions, got {rank} dimensions");
        }
        let dim = shape::wrap_dim(&cx.op, a.int(2)?, rank)?;
        let others: Vec<usize> = (0..rank).filter(|&i| i != dim).collect();
        let norm = vector_norm(cx, x, p, &others, true, None)?;
        let nc = cx.f.convert(norm, d.opmath());
        let mx = cx.f.full_like(nc, maxnorm);
        let eps = cx.f.full_like(nc, 1e-7);
        let den = cx.f.add(nc, eps);
        let scale = cx.f.div(mx, den);
        let one = cx.f.full_like(nc, 1.0);
        let over = cx.f.compare(Cmp::Gt, nc, mx);
        let factor = cx.f.select(over, scale, one);
        let factor = cx.f.convert(factor, d);
        let dims = cx.dims(x);
        let factor = cx.f.broadcast_to(factor, &dims);
        Ok(vec![cx.f.mul(x, factor)])
    });
    r.op(
        "aten::linalg_vector_norm(Tensor self, Scalar ord=2, int[1]? dim=None, bool keepdim=False, *, \
         ScalarType? dtype=None) -> Tensor",
        |cx, a| {
            let x = a.tensor(0)?;
            let dims = dims_arg(cx, a, 2, cx.rank(x))?;
            let ord = static_f64(a.opt_static_scalar(1), 2.0);
            Ok(vec![vector_norm(cx, x, ord, &dims, a.bool(3)?, a.opt_dtype(4))?])
        },
    )
    .static_scalars();
    r.op("aten::norm.Scalar(Tensor self, Scalar p=2) -> Tensor", |cx, a| {
        let x = a.tensor(0)?;
        let dims: Vec<usize> = (0..cx.rank(x)).collect();
        let p = static_f64(a.opt_static_scalar(1), 2.0);
        Ok(vec![vector_norm(cx, x, p, &dims, false, None)?])
    })
    .static_scalars();
    r.op("aten::norm.ScalarOpt_dim(Tensor self, Scalar? p, int[1] dim, bool keepdim=False) -> Tensor", |cx, a| {
        let x = a.tensor(0)?;
        let dims = dims_arg(cx, a, 2, cx.rank(x))?;
        let p = static_f64(a.opt_static_scalar(1), 2.0);
        Ok(vec![vector_norm(cx, x, p, &dims, a.bool(3)?, None)?])
    })
    .static_scalars();
}
