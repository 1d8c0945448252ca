//! Factory ops (`full`, `zeros`, `arange`, `eye`, `linspace`, the `_like`
//! forms), fills, and random sampling from a counter-based generator, the
//! device's default or the call's `generator` argument (`rand`, `randn`,
//! `randint`, `randperm`, `uniform_`, `normal_`, `bernoulli`, and the
//! `.generator` overloads of the factories). Lowerings never see the
//! generator: they ask for a draw ([`Cx::rng_state`]) and the runtime feeds it.
//!
//! Factory ops have no tensor inputs; their `device` argument is handled by
//! the runtime. Fill values are runtime scalars, so a new value never
//! recompiles; `arange` bounds determine the shape and are compile-time.

use crate::bail_op;
use crate::dtype::{DType, ScalarKind};
use crate::error::{Error, Result};
use crate::hlo::{Cmp, Elem, Func, Ty, V};
use crate::shape;
use crate::tensor::{Scalar, Value};

use super::{bound_f64, Args, Builder, Cx, ViewOut};

pub fn register(r: &mut Builder) {
    register_fill(r);
    register_ranges(r);
    register_random(r);
}

/// The common keyword tail of factory ops.
pub(super) const FACTORY: &str = "ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None";

/// Rejects negative sizes as PyTorch does.
pub(super) fn check_size(cx: &Cx, size: &[i64]) -> Result<()> {
    if let Some(d) = size.iter().find(|&&d| d < 0) {
        bail_op!(&*cx.op, "Trying to create tensor with negative dimension {d}: {}", shape::fmt(size));
    }
    Ok(())
}

/// A constant tensor of `dtype` and `size` filled with `v`.
fn constant(cx: &mut Cx, size: &[i64], dtype: DType, v: f64) -> V {
    cx.f.splat(&Ty::new(dtype, size), v)
}

/// The dtype PyTorch infers from a fill value (`torch.full`).
fn dtype_of_kind(k: ScalarKind) -> DType {
    k.default_dtype()
}

// -------------------------------------------------------------------- fills

fn register_fill(r: &mut Builder) {
    r.op(&format!("aten::full(SymInt[] size, Scalar fill_value, *, {FACTORY}) -> Tensor"), |cx, a| {
        let size = a.ints(0)?;
        check_size(cx, size)?;
        let s = a.scalar(1)?;
        let d = a.opt_dtype(2).unwrap_or(dtype_of_kind(s.kind));
        let v = cx.scalar(s, d);
        Ok(vec![cx.f.broadcast_to(v, size)])
    });
    for (name, value) in [("zeros", 0.0), ("ones", 1.0)] {
        r.op(&format!("aten::{name}(SymInt[] size, *, {FACTORY}) -> Tensor"), move |cx, a| {
            let size = a.ints(0)?;
            check_size(cx, size)?;
            let d = a.opt_dtype(1).unwrap_or(DType::DEFAULT_FLOAT);
            Ok(vec![constant(cx, size, d, value)])
        });
    }
    // Contents of `empty` are unspecified; zeros are as good as anything.
    r.op(
        &format!("aten::empty.memory_format(SymInt[] size, *, {FACTORY}, MemoryFormat? memory_format=None) -> Tensor"),
        |cx, a| {
            let size = a.ints(0)?;
            check_size(cx, size)?;
            let d = a.opt_dtype(1).unwrap_or(DType::DEFAULT_FLOAT);
            Ok(vec![constant(cx, size, d, 0.0)])
        },
    );
    // `empty_strided` keeps the requested strides: the metadata kernel views
    // a fresh storage just large enough for them.
    r.op(&format!("aten::empty_strided(SymInt[] size, SymInt[] stride, *, {FACTORY}) -> Tensor"), |cx, a| {
        let size = a.ints(0)?;
        check_size(cx, size)?;
        let d = a.opt_dtype(2).unwrap_or(DType::DEFAULT_FLOAT);
        Ok(vec![constant(cx, size, d, 0.0)])
    })
    .view(|args| {
        let op = "aten::empty_strided";
        let (Value::IntList(size), Value::IntList(stride)) = (&args[0], &args[1]) else {
            return Err(Error::Internal(format!("{op}: size and stride are not int lists")));
        };
        if size.len() != stride.len() {
            bail_op!(op, "mismatch in length of strides and shape: size {} and stride {}", shape::fmt(size), shape::fmt(stride));
        }
        if let Some(d) = size.iter().find(|&&d| d < 0) {
            bail_op!(op, "Trying to create tensor with negative dimension {d}: {}", shape::fmt(size));
        }
        if let Some(s) = stride.iter().find(|&&s| s < 0) {
            bail_op!(op, "negative strides are not supported, got stride {s} in {}", shape::fmt(stride));
        }
        Ok(Some(ViewOut::NewStorage {
            numel: shape::strided_extent(op, size, stride)?,
            dtype: args[2].clone(),
            device: args[4].clone(),
            sizes: size.clone(),
            strides: stride.clone(),
        }))
    });

    // The `_like` forms take the input's shape, and its dtype unless given.
    r.op(
        &format!("aten::full_like(Tensor self, Scalar fill_value, *, {FACTORY}, MemoryFormat? memory_format=None) -> Tensor"),
        |cx, a| {
            let x = a.tensor(0)?;
            let d = a.opt_dtype(2).unwrap_or(cx.dtype(x));
            let v = cx.scalar(a.scalar(1)?, d);
            Ok(vec![cx.f.broadcast_to(v, &cx.dims(x))])
        },
    );
    for (name, value) in [("zeros_like", 0.0), ("ones_like", 1.0), ("empty_like", 0.0)] {
        r.op(
            &format!("aten::{name}(Tensor self, *, {FACTORY}, MemoryFormat? memory_format=None) -> Tensor"),
            move |cx, a| {
                let x = a.tensor(0)?;
                let d = a.opt_dtype(1).unwrap_or(cx.dtype(x));
                let dims = cx.dims(x);
                Ok(vec![constant(cx, &dims, d, value)])
            },
        );
    }
    r.op(&format!("aten::scalar_tensor(Scalar s, *, {FACTORY}) -> Tensor"), |cx, a| {
        // Always the default float unless a dtype is given, whatever the scalar.
        let d = a.opt_dtype(1).unwrap_or(DType::DEFAULT_FLOAT);
        Ok(vec![cx.scalar(a.scalar(0)?, d)])
    });

    r.op_and_inplace("aten::fill.Scalar(Tensor self, Scalar value) -> Tensor", |cx, a| {
        let x = a.tensor(0)?;
        let d = cx.dtype(x);
        let v = cx.scalar(a.scalar(1)?, d);
        Ok(vec![cx.f.broadcast_to(v, &cx.dims(x))])
    });
    r.op_and_inplace("aten::fill.Tensor(Tensor self, Tensor value) -> Tensor", |cx, a| {
        let (x, v) = (a.tensor(0)?, a.tensor(1)?);
        if cx.rank(v) != 0 {
            bail_op!(
                &*cx.op,
                "fill_ only supports 0-dimension value tensor but got tensor with {} dimensions (value shape {}, self shape {}).",
                cx.rank(v),
                shape::fmt(&cx.dims(v)),
                shape::fmt(&cx.dims(x))
            );
        }
        let v = cx.f.convert(v, cx.dtype(x));
        Ok(vec![cx.f.broadcast_to(v, &cx.dims(x))])
    });
    r.op("aten::zero_(Tensor(a!) self) -> Tensor(a!)", |cx, a| {
        let x = a.tensor(0)?;
        let (dims, d) = (cx.dims(x), cx.dtype(x));
        Ok(vec![constant(cx, &dims, d, 0.0)])
    });
}

// ------------------------------------------------------------------- ranges

/// `start + step * iota(n)` in `dtype`. Integer results compute in i64 from
/// truncated bounds, half types in f32 and the rest in their own type, as
/// PyTorch's CPU kernel does with its accumulate types.
fn range_values(cx: &mut Cx, start: Scalar, step: Scalar, n: i64, dtype: DType) -> V {
    let float = dtype.is_float();
    let t = Ty::new(if float { dtype.opmath().into() } else { Elem::I64 }, &[n]);
    let constant = |cx: &mut Cx, s: Scalar| if float { cx.f.splat(&t, s.to_f64()) } else { cx.f.splat_int(&t, s.to_i64()) };
    let st = constant(cx, step);
    let s0 = constant(cx, start);
    let i = cx.f.iota(&t, 0);
    let m = cx.f.mul(i, st);
    let v = cx.f.add(s0, m);
    cx.f.convert(v, dtype)
}

/// `arange(start, end, step)`: bounds are checked and the length computed in
/// double precision, `ceil((end - start) / step)`, like PyTorch.
fn arange(cx: &mut Cx, start: Scalar, end: Scalar, step: Scalar, dtype: Option<DType>) -> Result<V> {
    let any_float = [start, end, step].iter().any(|s| s.kind() == ScalarKind::Float);
    let d = dtype.unwrap_or(if any_float { DType::DEFAULT_FLOAT } else { DType::I64 });
    check_not_bool(cx, d)?;
    let (s, e, st) = (start.to_f64(), end.to_f64(), step.to_f64());
    let bounds = format!("(start={start}, end={end}, step={step})");
    if st == 0.0 {
        bail_op!(&*cx.op, "step must be nonzero {bounds}");
    }
    if !s.is_finite() || !e.is_finite() {
        bail_op!(&*cx.op, "unsupported range: {s} -> {e} {bounds}");
    }
    if !((st > 0.0 && e >= s) || (st < 0.0 && e <= s)) {
        bail_op!(&*cx.op, "upper bound and lower bound inconsistent with step sign {bounds}");
    }
    let n = ((e - s) / st).ceil();
    if !(0.0..=i64::MAX as f64).contains(&n) {
        bail_op!(&*cx.op, "invalid size, possible overflow? {bounds}");
    }
    Ok(range_values(cx, start, step, n as i64, d))
}

/// Ranges of bool are not defined (PyTorch: "not implemented for 'Bool'").
fn check_not_bool(cx: &Cx, d: DType) -> Result<()> {
    if d == DType::Bool {
        return Err(Error::UnsupportedDType { op: cx.op.to_string(), dtype: d.to_string(), detail: " for ranges".into() });
    }
    Ok(())
}

fn register_ranges(r: &mut Builder) {
    r.op(&format!("aten::arange(Scalar end, *, {FACTORY}) -> Tensor"), |cx, a| {
        Ok(vec![arange(cx, Scalar::Int(0), a.static_scalar(0)?, Scalar::Int(1), a.opt_dtype(1))?])
    })
    .static_scalars();
    r.op(&format!("aten::arange.start(Scalar start, Scalar end, *, {FACTORY}) -> Tensor"), |cx, a| {
        Ok(vec![arange(cx, a.static_scalar(0)?, a.static_scalar(1)?, Scalar::Int(1), a.opt_dtype(2))?])
    })
    .static_scalars();
    r.op(&format!("aten::arange.start_step(Scalar start, Scalar end, Scalar step=1, *, {FACTORY}) -> Tensor"), |cx, a| {
        Ok(vec![arange(cx, a.static_scalar(0)?, a.static_scalar(1)?, a.static_scalar(2)?, a.opt_dtype(3))?])
    })
    .static_scalars();

    // linspace: start and end are runtime scalars (only `steps` shapes the
    // result). PyTorch converts the bounds to the result type first, then
    // fills the first half forward from `start` and the second half backward
    // from `end`, so both ends are exact.
    r.op(&format!("aten::linspace(Scalar start, Scalar end, int steps, *, {FACTORY}) -> Tensor"), |cx, a| {
        let steps = a.int(2)?;
        let d = a.opt_dtype(3).unwrap_or(DType::DEFAULT_FLOAT);
        check_not_bool(cx, d)?;
        let c = if d == DType::F64 { DType::F64 } else { DType::F32 };
        let v = spaced(cx, a, steps, d, c)?;
        Ok(vec![cx.f.convert(v, d)])
    });
    // logspace: `base` to the power of linspace's values, in the result's
    // float type (double for integer results), as PyTorch's kernel computes.
    r.op(
        &format!("aten::logspace(Scalar start, Scalar end, int steps, float base=10.0, *, {FACTORY}) -> Tensor"),
        |cx, a| {
            let steps = a.int(2)?;
            let base = a.float(3)?;
            let d = a.opt_dtype(4).unwrap_or(DType::DEFAULT_FLOAT);
            check_not_bool(cx, d)?;
            let c = if d == DType::F64 || !d.is_float() { DType::F64 } else { DType::F32 };
            let e = spaced(cx, a, steps, c, c)?;
            let b = cx.f.full_like(e, base);
            let v = cx.f.binary("stablehlo.power", b, e);
            Ok(vec![cx.f.convert(v, d)])
        },
    );

    let eye = |cx: &mut Cx, n: i64, m: i64, d: DType| -> Result<V> {
        if n < 0 {
            bail_op!(&*cx.op, "n must be greater or equal to 0, got {n}");
        }
        if m < 0 {
            bail_op!(&*cx.op, "m must be greater or equal to 0, got {m}");
        }
        let t = Ty::new(Elem::I64, &[n, m]);
        let (rows, cols) = (cx.f.iota(&t, 0), cx.f.iota(&t, 1));
        let diag = cx.f.compare(Cmp::Eq, rows, cols);
        Ok(cx.f.convert(diag, d))
    };
    r.op(&format!("aten::eye(SymInt n, *, {FACTORY}) -> Tensor"), move |cx, a| {
        let n = a.int(0)?;
        Ok(vec![eye(cx, n, n, a.opt_dtype(1).unwrap_or(DType::DEFAULT_FLOAT))?])
    });
    r.op(&format!("aten::eye.m(SymInt n, SymInt m, *, {FACTORY}) -> Tensor"), move |cx, a| {
        Ok(vec![eye(cx, a.int(0)?, a.int(1)?, a.opt_dtype(2).unwrap_or(DType::DEFAULT_FLOAT))?])
    });
    for (name, upper) in [("triu_indices", true), ("tril_indices", false)] {
        r.op(&format!("aten::{name}(int row, int col, int offset=0, *, {FACTORY}) -> Tensor"), move |cx, a| {
            let d = a.opt_dtype(3).unwrap_or(DType::I64);
            Ok(vec![triangle_indices(cx, a.int(0)?, a.int(1)?, a.int(2)?, upper, d)?])
        });
    }
}

/// The coordinates of the upper (`triu_indices`) or lower triangle of a
/// `row` x `col` matrix past the diagonal `offset`, row by row, as a
/// `2 x N` tensor. Only the counts of the rows with entries are constants
/// (at most 2^24 of them); entry k
/// finds its row by a binary search over their running sums (as
/// `bucketize`), so a large triangle is not a large constant.
fn triangle_indices(cx: &mut Cx, row: i64, col: i64, offset: i64, upper: bool, d: DType) -> Result<V> {
    if row < 0 || col < 0 {
        bail_op!(&*cx.op, "row and col must be non-negative, got row {row} and col {col}");
    }
    // Only the rows with entries get constants: for the upper triangle the
    // rows before `col - offset`, for the lower the rows from `-offset` on
    // (when there are columns at all).
    let (lo, hi) = if col == 0 {
        (0, 0)
    } else if upper {
        (0, col.saturating_sub(offset).clamp(0, row))
    } else {
        (offset.saturating_neg().clamp(0, row), row)
    };
    const MAX_ROWS: i64 = 1 << 24;
    if hi - lo > MAX_ROWS {
        bail_op!(&*cx.op, "{row} x {col} triangle (offset {offset}) has {} non-empty rows; tpu supports at most {MAX_ROWS}", hi - lo);
    }
    let mut first = Vec::with_capacity((hi - lo) as usize);
    let mut ends = Vec::with_capacity((hi - lo) as usize);
    let mut starts = Vec::with_capacity((hi - lo) as usize);
    let mut total: i64 = 0;
    for r in lo..hi {
        let diag = r.saturating_add(offset);
        let (c0, n) = if upper {
            let c0 = diag.clamp(0, col);
            (c0, col - c0)
        } else {
            (0, diag.saturating_add(1).clamp(0, col))
        };
        starts.push(total);
        first.push(c0);
        total = total
            .checked_add(n)
            .filter(|t| shape::checked_numel(&cx.op, &[2, *t], 8).is_ok())
            .ok_or_else(|| crate::Error::op(&*cx.op, format!("{row} x {col} triangle has too many entries")))?;
        ends.push(total);
    }
    if total == 0 {
        let e = cx.f.splat(&Ty::new(Elem::I64, &[2, 0]), 0.0);
        return Ok(cx.f.convert(e, d));
    }
    let k = cx.f.iota(&Ty::new(Elem::I64, &[total]), 0);
    let ends = cx.f.const_i64s(&ends);
    let r = super::bucket::bucketize(cx, super::common::Ew::T(k), ends, false, true)?;
    let starts = cx.f.const_i64s(&starts);
    let first = cx.f.const_i64s(&first);
    let s = super::bucket::gather1(cx, starts, r, total);
    let c0 = super::bucket::gather1(cx, first, r, total);
    let within = cx.f.sub(k, s);
    let c = cx.f.add(within, c0);
    // Row numbers count from the first row with entries.
    let lo_v = cx.f.full_like(r, lo as f64);
    let r = cx.f.add(r, lo_v);
    let r = cx.f.reshape(r, &[1, total]);
    let c = cx.f.reshape(c, &[1, total]);
    let both = cx.f.concatenate(&[r, c], 0);
    Ok(cx.f.convert(both, d))
}

// ------------------------------------------------------------------- random

/// Random bits of `elem` (u32 or u64) and shape `dims` from a fresh state.
pub(super) fn random_bits(cx: &mut Cx, elem: Elem, dims: &[i64]) -> V {
    let state = cx.rng_state();
    cx.f.rng_bit_generator(state, &Ty::new(elem, dims)).1
}

/// Uniform samples in [0, 1) from the top `digits` random bits, as PyTorch's
/// `uniform_real_distribution` makes them: `k * 2^-digits` is exact in any
/// type with `digits` mantissa bits, so no sample rounds up to 1. The result
/// is f64 when `digits > 24`, f32 otherwise.
pub(super) fn uniform01(cx: &mut Cx, digits: i32, dims: &[i64]) -> V {
    let (bits_elem, width, compute) = if digits > 24 { (Elem::U64, 64, Elem::F64) } else { (Elem::U32, 32, Elem::F32) };
    let bits = random_bits(cx, bits_elem, dims);
    let shift = cx.f.splat(&Ty::new(bits_elem, dims), (width - digits) as f64);
    let top = cx.f.binary("stablehlo.shift_right_logical", bits, shift);
    let x = cx.f.convert(top, compute);
    let scale = cx.f.splat(&Ty::new(compute, dims), (-digits as f64).exp2());
    cx.f.mul(x, scale)
}

/// Mantissa digits (with the implicit bit) of a float dtype.
pub(super) fn digits(d: DType) -> i32 {
    match d {
        DType::F16 => 11,
        DType::BF16 => 8,
        DType::F64 => 53,
        _ => 24,
    }
}

pub(super) fn check_float(cx: &Cx, d: DType) -> Result<()> {
    if !d.is_float() {
        return Err(Error::UnsupportedDType {
            op: cx.op.to_string(),
            dtype: d.to_string(),
            detail: " (random floating-point sampling needs a floating point dtype)".into(),
        });
    }
    Ok(())
}

/// Uniform samples in [from, to) of `dtype`, computed in opmath.
fn uniform(cx: &mut Cx, dims: &[i64], d: DType, from: f64, to: f64) -> Result<V> {
    check_float(cx, d)?;
    if from > to {
        bail_op!(&*cx.op, "uniform_ expects to return a [from, to) range, but found from={from} > to={to}");
    }
    let u = uniform01(cx, digits(d), dims);
    let u = if from == 0.0 && to == 1.0 {
        u
    } else {
        let span = cx.f.full_like(u, to - from);
        let lo = cx.f.full_like(u, from);
        let s = cx.f.mul(u, span);
        cx.f.add(s, lo)
    };
    Ok(cx.f.convert(u, d))
}

/// Standard normal samples by Box-Muller, f32 (f64 when `f64`).
pub(super) fn standard_normal(cx: &mut Cx, dims: &[i64], f64: bool) -> V {
    let digits = if f64 { 53 } else { 24 };
    // Both uniforms from one draw: a leading dim of 2, split in two.
    let mut both = vec![2];
    both.extend_from_slice(dims);
    let u = uniform01(cx, digits, &both);
    let u1 = cx.f.slice_dim(u, 0, 0, 1, 1);
    let u2 = cx.f.slice_dim(u, 0, 1, 2, 1);
    let (u1, u2) = (cx.f.reshape(u1, dims), cx.f.reshape(u2, dims));
    // 1 - u is in (0, 1], so the log is finite.
    let one = cx.f.full_like(u1, 1.0);
    let u1 = cx.f.sub(one, u1);
    let ln = cx.f.unary("stablehlo.log", u1);
    let m2 = cx.f.full_like(u1, -2.0);
    let r2 = cx.f.mul(m2, ln);
    let radius = cx.f.unary("stablehlo.sqrt", r2);
    let tau = cx.f.full_like(u2, std::f64::consts::TAU);
    let theta = cx.f.mul(tau, u2);
    let c = cx.f.unary("stablehlo.cosine", theta);
    cx.f.mul(radius, c)
}

/// PyTorch's check of a scalar std (NaN fails it too).
pub(super) fn check_std(cx: &Cx, std: f64) -> Result<()> {
    if std.is_nan() || std < 0.0 {
        bail_op!(&*cx.op, "normal expects std >= 0.0, but found std {std}");
    }
    Ok(())
}

/// Normal samples of `dtype`, computed in f32 (f64 for f64).
pub(super) fn normal(cx: &mut Cx, dims: &[i64], d: DType, mean: f64, std: f64) -> Result<V> {
    check_float(cx, d)?;
    check_std(cx, std)?;
    let z = standard_normal(cx, dims, d == DType::F64);
    let z = if mean == 0.0 && std == 1.0 {
        z
    } else {
        let sd = cx.f.full_like(z, std);
        let mu = cx.f.full_like(z, mean);
        let s = cx.f.mul(z, sd);
        cx.f.add(s, mu)
    };
    Ok(cx.f.convert(z, d))
}

/// 1 with probability `p` (an f32 value of shape `dims`), else 0, as `dtype`.
fn bernoulli(cx: &mut Cx, p: V, d: DType) -> V {
    let dims = cx.dims(p);
    let u = uniform01(cx, 24, &dims);
    let hit = cx.f.compare(Cmp::Lt, u, p);
    cx.f.convert(hit, d)
}

/// `randint`: integers uniform in [low, high) as `dtype`, which PyTorch
/// defines as `empty(size, dtype).random_(low, high)`.
fn randint(cx: &mut Cx, low: i64, high: i64, size: &[i64], dtype: Option<DType>) -> Result<V> {
    check_size(cx, size)?;
    let d = dtype.unwrap_or(DType::I64);
    let (from, range) = super::random::random_bounds(cx, d, low, Some(high))?;
    Ok(super::random::random_range(cx, size, d, from, range))
}

/// A random permutation of `0..n`: an iota sorted by 64-bit random keys
/// (a tie, which would only keep two elements in order, has odds ~n^2/2^65).
fn randperm(cx: &mut Cx, n: i64, dtype: Option<DType>) -> Result<V> {
    if n < 0 {
        bail_op!(&*cx.op, "n must be non-negative, got {n}");
    }
    let d = dtype.unwrap_or(DType::I64);
    // n - 1 must be exact in the result type.
    let max = match d {
        DType::Bool => bail_op!(&*cx.op, "\"randperm\" not implemented for 'Bool'"),
        DType::U8 => u8::MAX as i64,
        DType::I8 => i8::MAX as i64,
        DType::I16 => i16::MAX as i64,
        DType::I32 => i32::MAX as i64,
        DType::F16 | DType::BF16 | DType::F32 => 1 << digits(d),
        _ => i64::MAX,
    };
    if n > 0 && n - 1 > max {
        bail_op!(&*cx.op, "n - 1 = {} is not exact in dtype {d} (at most {max})", n - 1);
    }
    let iota = cx.f.iota(&Ty::new(Elem::I64, &[n]), 0);
    let perm = if n <= 1 {
        iota
    } else {
        let keys = random_bits(cx, Elem::U64, &[n]);
        super::sort::sort_with(cx, keys, iota, 0, false).1
    };
    Ok(cx.f.convert(perm, d))
}

/// The overloads of a factory op: the plain one, and the one with a
/// `Generator? generator` before the factory arguments (`aten::rand.generator`),
/// with the number of arguments that shifts them by (0 or 1).
pub(super) fn with_generator(name: &str, overload: &str, args: &str, tail: &str) -> [(String, usize); 2] {
    let dot = |o: &str| if o.is_empty() { String::new() } else { format!(".{o}") };
    let gen = if overload.is_empty() { "generator".to_string() } else { format!("{overload}_generator") };
    [
        (format!("aten::{name}{}({args}, *, {FACTORY}{tail}) -> Tensor", dot(overload)), 0),
        (format!("aten::{name}.{gen}({args}, *, Generator? generator, {FACTORY}{tail}) -> Tensor"), 1),
    ]
}

fn register_random(r: &mut Builder) {
    const LIKE: &str = ", MemoryFormat? memory_format=None";
    // native_functions.yaml spells the default `dtype=long`; None means the same here.
    for (decl, g) in with_generator("randperm", "", "SymInt n", "") {
        r.op(&decl, move |cx, a| Ok(vec![randperm(cx, a.int(0)?, a.opt_dtype(1 + g))?]));
    }
    for (decl, g) in with_generator("rand", "", "SymInt[] size", "") {
        r.op(&decl, move |cx, a| {
            let size = a.ints(0)?;
            check_size(cx, size)?;
            Ok(vec![uniform(cx, size, a.opt_dtype(1 + g).unwrap_or(DType::DEFAULT_FLOAT), 0.0, 1.0)?])
        });
    }
    for (decl, g) in with_generator("randn", "", "SymInt[] size", "") {
        r.op(&decl, move |cx, a| {
            let size = a.ints(0)?;
            check_size(cx, size)?;
            Ok(vec![normal(cx, size, a.opt_dtype(1 + g).unwrap_or(DType::DEFAULT_FLOAT), 0.0, 1.0)?])
        });
    }
    let like = |cx: &mut Cx, a: &Args, g: usize| -> Result<(Vec<i64>, DType)> {
        let x = a.tensor(0)?;
        Ok((cx.dims(x), a.opt_dtype(1 + g).unwrap_or(cx.dtype(x))))
    };
    for (decl, g) in with_generator("rand_like", "", "Tensor self", LIKE) {
        r.op(&decl, move |cx, a| {
            let (dims, d) = like(cx, a, g)?;
            Ok(vec![uniform(cx, &dims, d, 0.0, 1.0)?])
        });
    }
    for (decl, g) in with_generator("randn_like", "", "Tensor self", LIKE) {
        r.op(&decl, move |cx, a| {
            let (dims, d) = like(cx, a, g)?;
            Ok(vec![normal(cx, &dims, d, 0.0, 1.0)?])
        });
    }
    r.op("aten::uniform_(Tensor(a!) self, float from=0, float to=1, *, Generator? generator=None) -> Tensor(a!)", |cx, a| {
        let x = a.tensor(0)?;
        let (dims, d) = (cx.dims(x), cx.dtype(x));
        Ok(vec![uniform(cx, &dims, d, a.float(1)?, a.float(2)?)?])
    });
    r.op("aten::normal_(Tensor(a!) self, float mean=0, float std=1, *, Generator? generator=None) -> Tensor(a!)", |cx, a| {
        let x = a.tensor(0)?;
        let (dims, d) = (cx.dims(x), cx.dtype(x));
        Ok(vec![normal(cx, &dims, d, a.float(1)?, a.float(2)?)?])
    });
    r.op("aten::bernoulli(Tensor self, *, Generator? generator=None) -> Tensor", |cx, a| {
        let x = a.tensor(0)?;
        let d = cx.dtype(x);
        check_float(cx, d)?;
        let p = cx.f.convert(x, Elem::F32);
        Ok(vec![bernoulli(cx, p, d)])
    });
    // `p` is a runtime value, its range checked at the call.
    let bernoulli_p = |cx: &mut Cx, a: &Args| -> Result<Vec<V>> {
        let x = a.tensor(0)?;
        let p = a.runtime_f64(cx, 1)?;
        let (dims, d) = (cx.dims(x), cx.dtype(x));
        let p = cx.f.convert(p, Elem::F32);
        let pv = cx.f.broadcast_to(p, &dims);
        Ok(vec![bernoulli(cx, pv, d)])
    };
    let check_p = |bound: &[Value]| match bound_f64(bound, 1) {
        Some(p) if !(0.0..=1.0).contains(&p) => Err(format!("bernoulli_ expects p to be in [0, 1], but got p={p}")),
        _ => Ok(()),
    };
    r.op("aten::bernoulli.p(Tensor self, float p=0.5, *, Generator? generator=None) -> Tensor", bernoulli_p)
        .runtime_floats(&["p"])
        .check(check_p);
    r.op("aten::bernoulli_.float(Tensor(a!) self, float p=0.5, *, Generator? generator=None) -> Tensor(a!)", bernoulli_p)
        .runtime_floats(&["p"])
        .check(check_p);
    r.op("aten::bernoulli_.Tensor(Tensor(a!) self, Tensor p, *, Generator? generator=None) -> Tensor(a!)", |cx, a| {
        let (x, p) = (a.tensor(0)?, a.tensor(1)?);
        let dims = cx.dims(x);
        let b = shape::broadcast(&cx.op, &cx.dims(p), &dims)?;
        if b.as_slice() != dims.as_slice() {
            bail_op!(&*cx.op, "p of shape {} cannot be broadcast to self of shape {}", shape::fmt(&cx.dims(p)), shape::fmt(&dims));
        }
        let p = cx.f.convert(p, Elem::F32);
        let p = cx.f.broadcast_to(p, &dims);
        let d = cx.dtype(x);
        Ok(vec![bernoulli(cx, p, d)])
    });
    // native_functions.yaml spells the default `dtype=long`; None means the same here.
    for (decl, g) in with_generator("randint", "", "SymInt high, SymInt[] size", "") {
        r.op(&decl, move |cx, a| Ok(vec![randint(cx, 0, a.int(0)?, a.ints(1)?, a.opt_dtype(2 + g))?]));
    }
    for (decl, g) in with_generator("randint", "low", "SymInt low, SymInt high, SymInt[] size", "") {
        r.op(&decl, move |cx, a| Ok(vec![randint(cx, a.int(0)?, a.int(1)?, a.ints(2)?, a.opt_dtype(3 + g))?]));
    }
}

/// linspace's `steps` values from the runtime scalars `start` and `end`
/// (arguments 0 and 1), converted to `d` first, then computed in `c`: the
/// first half forward from `start`, the second half backward from `end`,
/// so both ends are exact (PyTorch's kernel).
fn spaced(cx: &mut Cx, a: &Args, steps: i64, d: DType, c: DType) -> Result<V> {
    if steps < 0 {
        bail_op!(&*cx.op, "number of steps must be non-negative, got {steps}");
    }
    let start = cx.scalar(a.scalar(0)?, d);
    let start = cx.f.convert(start, c);
    if steps <= 1 {
        return Ok(cx.f.broadcast_to(start, &[steps]));
    }
    let end = cx.scalar(a.scalar(1)?, d);
    let end = cx.f.convert(end, c);
    Ok(linspace(&mut cx.f, start, end, steps))
}

/// `steps >= 2` values from `start` to `end` (rank-0, of the result's
/// type) as PyTorch's CPU kernel spaces them: `start + i step` for the first
/// half, `end - (steps - 1 - i) step` for the rest, so both ends are exact.
pub(super) fn linspace(f: &mut Func, start: V, end: V, steps: i64) -> V {
    let t = f.ty(start).with_dims(&[steps]);
    let (start, end) = (f.broadcast_to(start, &[steps]), f.broadcast_to(end, &[steps]));
    let span = f.sub(end, start);
    let den = f.splat(&t, (steps - 1) as f64);
    let step = f.div(span, den);
    let i = f.iota(&t, 0);
    let fwd = f.mul(step, i);
    let fwd = f.add(start, fwd);
    let last = f.splat(&t, (steps - 1) as f64);
    let back_i = f.sub(last, i);
    let back = f.mul(step, back_i);
    let back = f.sub(end, back);
    let half = f.splat(&t, (steps / 2) as f64);
    let first_half = f.compare(Cmp::Lt, i, half);
    f.select(first_half, fwd, back)
}
