//! Complex numbers: complex64 and complex128 tensors, and the ops that take
//! them.
//!
//! A complex tensor's storage is a PJRT buffer of `c64`/`c128` (interleaved
//! real and imaginary parts, PyTorch's own layout), so host transfers copy
//! bytes unchanged and programs compute on `complex<f32>` directly.
//!
//! Most lowerings were written for real numbers and would silently take a
//! complex value for something else (an integer path, a comparison, a real
//! result type). So an op takes complex tensors only if it is listed in
//! [`TAKES_COMPLEX`] or registered here; every other op refuses them when
//! its arguments are bound, naming the op and the dtype (a
//! `NotImplementedError` in PyTorch, never a wrong number). Each op listed
//! has a test against the CPU with complex inputs
//! (`tests/torch/test_complex.py`).
//!
//! `torch.fft` lowers to `stablehlo.fft`, one transformed dim at a time
//! (transforms over several dims are separable), through ATen's three
//! primitives, `_fft_r2c`, `_fft_c2c` and `_fft_c2r`: every `torch.fft`
//! function, `stft` and `istft` decompose into them.

use super::{Args, Builder, Cx};
use crate::dtype::DType;
use crate::error::Result;
use crate::hlo::{Elem, Func, V};

/// Ops registered elsewhere whose lowerings handle complex element types:
/// copies and casts, creation, the arithmetic that stays closed over the
/// complex numbers, and data movement that never looks at values.
pub(super) const TAKES_COMPLEX: &[&str] = &[
    "aten::clone",
    "aten::_to_copy",
    "aten::copy_",
    "aten::full",
    "aten::zeros",
    "aten::ones",
    "aten::empty.memory_format",
    "aten::empty_strided",
    "aten::empty_like",
    "aten::scalar_tensor",
    "aten::full_like",
    "aten::zeros_like",
    "aten::ones_like",
    "aten::fill_.Scalar",
    "aten::zero_",
    "aten::add.Tensor",
    "aten::add_.Tensor",
    "aten::add.Scalar",
    "aten::add_.Scalar",
    "aten::sub.Tensor",
    "aten::sub_.Tensor",
    "aten::sub.Scalar",
    "aten::sub_.Scalar",
    "aten::mul.Tensor",
    "aten::mul_.Tensor",
    "aten::mul.Scalar",
    "aten::mul_.Scalar",
    "aten::div.Tensor",
    "aten::div_.Tensor",
    "aten::div.Scalar",
    "aten::div_.Scalar",
    "aten::neg",
    "aten::neg_",
    "aten::abs",
    "aten::sgn",
    "aten::sgn_",
    // x * sigmoid(x): stablehlo's logistic and multiply are complex-aware.
    "aten::silu",
    "aten::cat",
    "aten::stack",
    "aten::constant_pad_nd",
    "aten::flip",
    "aten::roll",
    "aten::slice_scatter",
    "aten::select_scatter",
    "aten::where.self",
    "aten::gather",
    "aten::index_select",
    // Sums and means (the reductions with an identity and no order).
    "aten::sum",
    "aten::sum.dim_IntList",
    "aten::mean",
    "aten::mean.dim",
    // Products: dot_general multiplies complex numbers as they are.
    "aten::mm",
    "aten::bmm",
    "aten::matmul",
    "aten::mv",
    "aten::dot",
    // StableHLO's complex exp, log, sqrt, sin, cos, tanh and logistic
    // (principal branches, as PyTorch's).
    "aten::exp",
    "aten::log",
    "aten::sqrt",
    "aten::sin",
    "aten::cos",
    "aten::tanh",
    "aten::sigmoid",
    "aten::reciprocal",
    "aten::eq.Tensor",
    "aten::ne.Tensor",
];

pub fn register(r: &mut Builder) {
    r.op("aten::view_as_real_copy(Tensor self) -> Tensor", |cx, a| {
        let x = complex_arg(cx, a, 0)?;
        Ok(vec![as_real(&mut cx.f, x)])
    })
    .complex();
    r.op("aten::view_as_complex_copy(Tensor self) -> Tensor", |cx, a| {
        let x = a.tensor(0)?;
        let (d, dims) = (cx.dtype(x), cx.dims(x));
        if !matches!(d, DType::F32 | DType::F64) {
            return Err(cx.err(format!("view_as_complex is only supported for float and double tensors, but got a {d} tensor")));
        }
        if dims.last() != Some(&2) {
            return Err(cx.err(format!("Tensor must have a last dimension of size 2, got shape {}", crate::shape::fmt(&dims))));
        }
        Ok(vec![as_complex(&mut cx.f, x)])
    })
    .complex();
    r.op("aten::complex(Tensor real, Tensor imag) -> Tensor", |cx, a| {
        let (re, im) = parts(cx, a, "complex")?;
        Ok(vec![cx.f.complex(re, im)])
    })
    .complex();
    r.op("aten::polar(Tensor abs, Tensor angle) -> Tensor", |cx, a| {
        let (r, t) = parts(cx, a, "polar")?;
        let (c, s) = (cx.f.unary("stablehlo.cosine", t), cx.f.unary("stablehlo.sine", t));
        let (re, im) = (cx.f.mul(r, c), cx.f.mul(r, s));
        Ok(vec![cx.f.complex(re, im)])
    })
    .complex();
    let conj: fn(&mut Cx, &Args) -> Result<Vec<V>> = |cx, a| {
        let x = a.tensor(0)?;
        Ok(vec![conj(&mut cx.f, x)])
    };
    r.op("aten::angle(Tensor self) -> Tensor", |cx, a| {
        let x = a.tensor(0)?;
        let d = cx.dtype(x);
        if d.is_complex() {
            let (re, im) = (cx.f.real(x), cx.f.imag(x));
            return Ok(vec![cx.f.binary("stablehlo.atan2", im, re)]);
        }
        // Of a real value: pi below zero, else 0; NaN stays NaN.
        let out = super::common::float_of(d);
        let xf = cx.f.convert(x, out.opmath());
        let zero = cx.f.full_like(xf, 0.0);
        let pi = cx.f.full_like(xf, std::f64::consts::PI);
        let below = cx.f.compare(crate::hlo::Cmp::Lt, xf, zero);
        let y = cx.f.select(below, pi, zero);
        let nan = cx.f.compare(crate::hlo::Cmp::Ne, xf, xf);
        let y = cx.f.select(nan, xf, y);
        Ok(vec![cx.f.convert(y, out)])
    })
    .complex();
    r.op("aten::_conj_physical(Tensor self) -> Tensor", conj).complex();
    r.op("aten::conj_physical_(Tensor(a!) self) -> Tensor(a!)", conj).complex();
    register_fft(r);
}

/// Argument `i`, which must be complex.
fn complex_arg(cx: &Cx, a: &Args, i: usize) -> Result<V> {
    let x = a.tensor(i)?;
    let d = cx.dtype(x);
    if !d.is_complex() {
        return Err(cx.err(format!("expected a complex tensor, got {d}")));
    }
    Ok(x)
}

/// The two real arguments of `complex`/`polar`, broadcast together: both
/// float or both double, as PyTorch requires.
fn parts(cx: &mut Cx, a: &Args, what: &str) -> Result<(V, V)> {
    let (x, y) = (a.tensor(0)?, a.tensor(1)?);
    let (dx, dy) = (cx.dtype(x), cx.dtype(y));
    if dx != dy {
        return Err(cx.err(format!("Expected object of scalar type {dx} but got scalar type {dy} for second argument")));
    }
    if !matches!(dx, DType::F32 | DType::F64) {
        return Err(cx.err(format!(
            "Expected both inputs to be Half, Float or Double tensors but got {dx} and {dy} \
             (torch.{what} on TPU takes float32 and float64: complex32 has no StableHLO type)"
        )));
    }
    let dims = super::common::broadcast_shape(cx, &[super::common::Ew::T(x), super::common::Ew::T(y)])?;
    Ok((cx.f.broadcast_to(x, &dims), cx.f.broadcast_to(y, &dims)))
}

/// A complex value as its parts along a new last dim of size 2.
pub(super) fn as_real(f: &mut Func, x: V) -> V {
    let mut dims = f.ty(x).dims.to_vec();
    dims.push(1);
    let (re, im) = (f.real(x), f.imag(x));
    let (re, im) = (f.reshape(re, &dims), f.reshape(im, &dims));
    f.concatenate(&[re, im], dims.len() - 1)
}

/// The inverse of [`as_real`]: a real value whose last dim is 2.
pub(super) fn as_complex(f: &mut Func, x: V) -> V {
    let dims = f.ty(x).dims.to_vec();
    let rank = dims.len();
    let part = |f: &mut Func, k: i64| {
        let mut start = vec![0; rank];
        start[rank - 1] = k;
        let mut limit = dims.clone();
        limit[rank - 1] = k + 1;
        let s = f.slice(x, &start, &limit, &vec![1; rank]);
        f.reshape(s, &dims[..rank - 1])
    };
    let (re, im) = (part(f, 0), part(f, 1));
    f.complex(re, im)
}

/// The complex conjugate (a real value is its own).
pub(super) fn conj(f: &mut Func, x: V) -> V {
    if !f.ty(x).elem.is_complex() {
        return f.broadcast_to(x, &f.ty(x).dims.to_vec());
    }
    let (re, im) = (f.real(x), f.imag(x));
    let im = f.neg(im);
    f.complex(re, im)
}

// --------------------------------------------------------------------- FFT

/// ATen's `normalization` argument: what the transform divides by.
#[derive(Clone, Copy)]
enum Norm {
    None,
    BySqrtN,
    ByN,
}

impl Norm {
    fn parse(cx: &Cx, code: i64) -> Result<Norm> {
        Ok(match code {
            0 => Norm::None,
            1 => Norm::BySqrtN,
            2 => Norm::ByN,
            _ => return Err(cx.err(format!("invalid FFT normalization mode {code} (expected 0, 1 or 2)"))),
        })
    }

    /// The factor for a transform of `n` points in all.
    fn factor(self, n: i64) -> f64 {
        match self {
            Norm::None => 1.0,
            Norm::BySqrtN => 1.0 / (n as f64).sqrt(),
            Norm::ByN => 1.0 / n as f64,
        }
    }
}

/// The transformed dims, wrapped and distinct, in the order given.
fn fft_dims(cx: &Cx, dims: &[i64], rank: usize) -> Result<Vec<usize>> {
    let mut out = Vec::with_capacity(dims.len());
    for &d in dims {
        let w = crate::shape::wrap_dim(&cx.op, d, rank)?;
        if out.contains(&w) {
            return Err(cx.err(format!("FFT dims must be unique, got {}", crate::shape::fmt(dims))));
        }
        out.push(w);
    }
    if out.is_empty() {
        return Err(cx.err("FFT needs at least one dim to transform"));
    }
    Ok(out)
}

/// A 1-D transform of `kind` along `dim` with `len` points (the output
/// length for `IRFFT`): `dim` moves innermost, then back.
fn fft_along(f: &mut Func, x: V, dim: usize, kind: &str, len: i64) -> V {
    let rank = f.ty(x).rank();
    let mut perm: Vec<usize> = (0..rank).filter(|&d| d != dim).collect();
    perm.push(dim);
    let t = f.transpose(x, &perm);
    let y = f.fft(t, kind, &[len]);
    let mut inverse = vec![0; rank];
    for (i, &p) in perm.iter().enumerate() {
        inverse[p] = i;
    }
    f.transpose(y, &inverse)
}

/// `x * factor` for a real factor, in `x`'s (complex or real) type.
fn scale(f: &mut Func, x: V, factor: f64) -> V {
    if factor == 1.0 {
        return x;
    }
    let k = f.full_like(x, factor);
    f.mul(x, k)
}

/// The float dtype an FFT input computes in: float32 and float64 (and their
/// complex types); PyTorch's CPU kernels take no other.
fn fft_input(cx: &Cx, x: V, complex: bool) -> Result<V> {
    let d = cx.dtype(x);
    let ok = if complex { d.is_complex() } else { matches!(d, DType::F32 | DType::F64) };
    if !ok {
        let want = if complex { "a complex64 or complex128" } else { "a float32 or float64" };
        return Err(cx.err(format!("expected {want} input, got {d}")));
    }
    Ok(x)
}

/// Every dim an FFT transforms must be non-empty (`torch.fft` checks `n`).
fn check_sizes(cx: &Cx, dims: &[i64], which: &[usize]) -> Result<()> {
    for &d in which {
        if dims[d] < 1 {
            return Err(cx.err(format!("Invalid number of data points ({}) specified", dims[d])));
        }
    }
    Ok(())
}

/// The arguments every FFT primitive starts with: the input (complex or
/// real), its dims, the transformed dims (checked non-empty) and the
/// normalization.
fn fft_args(cx: &Cx, a: &Args, complex: bool) -> Result<(V, Vec<i64>, Vec<usize>, Norm)> {
    let x = fft_input(cx, a.tensor(0)?, complex)?;
    let dims = cx.dims(x);
    let which = fft_dims(cx, a.ints(1)?, dims.len())?;
    check_sizes(cx, &dims, &which)?;
    let norm = Norm::parse(cx, a.int(2)?)?;
    Ok((x, dims, which, norm))
}

fn register_fft(r: &mut Builder) {
    // Real to complex: the half spectrum along the last dim given (or the
    // whole one, `onesided=False`), then complex transforms along the rest.
    r.op("aten::_fft_r2c(Tensor self, int[] dim, int normalization, bool onesided) -> Tensor", |cx, a| {
        let (x, dims, which, norm) = fft_args(cx, a, false)?;
        let n: i64 = which.iter().map(|&d| dims[d]).product();
        let (&last, rest) = which.split_last().expect("at least one dim");
        let mut y = if a.bool(3)? {
            fft_along(&mut cx.f, x, last, "RFFT", dims[last])
        } else {
            let c = cx.f.convert(x, Elem::from(cx.dtype(x)).to_complex());
            fft_along(&mut cx.f, c, last, "FFT", dims[last])
        };
        for &d in rest {
            y = fft_along(&mut cx.f, y, d, "FFT", dims[d]);
        }
        Ok(vec![scale(&mut cx.f, y, norm.factor(n))])
    })
    .complex();
    // Complex to complex, forward or inverse. XLA's inverse divides by the
    // size; ATen's divides only as `normalization` says.
    r.op("aten::_fft_c2c(Tensor self, SymInt[] dim, int normalization, bool forward) -> Tensor", |cx, a| {
        let (x, dims, which, norm) = fft_args(cx, a, true)?;
        let forward = a.bool(3)?;
        let n: i64 = which.iter().map(|&d| dims[d]).product();
        let mut y = x;
        for &d in &which {
            y = fft_along(&mut cx.f, y, d, if forward { "FFT" } else { "IFFT" }, dims[d]);
        }
        let undo = if forward { 1.0 } else { n as f64 };
        Ok(vec![scale(&mut cx.f, y, undo * norm.factor(n))])
    })
    .complex();
    // Complex (a half spectrum along the last dim given) to real: inverse
    // complex transforms along the other dims, then the inverse real one.
    r.op("aten::_fft_c2r(Tensor self, int[] dim, int normalization, SymInt last_dim_size) -> Tensor", |cx, a| {
        let (x, dims, which, norm) = fft_args(cx, a, true)?;
        let out_len = a.int(3)?;
        if out_len < 1 {
            return Err(cx.err(format!("Invalid number of data points ({out_len}) specified")));
        }
        let (&last, rest) = which.split_last().expect("at least one dim");
        // The half spectrum IRFFT reads: the first out_len / 2 + 1 entries,
        // zero-padded when the input has fewer (as pocketfft reads them).
        let half = out_len / 2 + 1;
        let mut y = resize_dim(&mut cx.f, x, last, half);
        for &d in rest {
            y = fft_along(&mut cx.f, y, d, "IFFT", dims[d]);
        }
        let y = fft_along(&mut cx.f, y, last, "IRFFT", out_len);
        let n: i64 = rest.iter().map(|&d| dims[d]).product::<i64>() * out_len;
        Ok(vec![scale(&mut cx.f, y, n as f64 * norm.factor(n))])
    })
    .complex();
}

/// `x` cut or zero-padded along `dim` to `len` entries.
fn resize_dim(f: &mut Func, x: V, dim: usize, len: i64) -> V {
    let dims = f.ty(x).dims.to_vec();
    let rank = dims.len();
    if dims[dim] >= len {
        let mut limit = dims.clone();
        limit[dim] = len;
        return f.slice(x, &vec![0; rank], &limit, &vec![1; rank]);
    }
    let elem = f.ty(x).elem;
    let zero = f.constant(elem, 0.0);
    let mut high = vec![0; rank];
    high[dim] = len - dims[dim];
    f.pad(x, zero, &vec![0; rank], &high, &vec![0; rank])
}
