//! Neural-network ops: softmax / log_softmax, layer norm, convolution
//! (regular and transposed), max / average pooling, dropout, NLL and MSE loss,
//! embedding, extra activations and the backward kernels of the common
//! activations. The backward kernels of the layers (and adaptive pooling)
//! are in [`grad`], batch and group norm in [`norm`]. Half-precision inputs
//! compute in f32 and round once, as PyTorch's CPU kernels do.

use crate::bail_op;
use crate::dtype::DType;
use crate::error::Result;
use crate::hlo::{Cmp, Elem, Func, Reducer, Ty, V};
use crate::shape::{self, fmt};

use super::common::{float_of, prepare, result_dtype, up, Ew};
use super::{bound_f64, Args, Builder, Cx};

mod act;
mod adaptive;
mod attention;
mod grad;
mod margin;
mod norm;
mod rnn;
mod transformer;

pub fn register(r: &mut Builder) {
    register_softmax(r);
    register_layer_norm(r);
    register_convolution(r);
    register_pooling(r);
    register_dropout(r);
    register_loss(r);
    register_mse(r);
    register_embedding(r);
    register_activations(r);
    register_backward(r);
    act::register(r);
    adaptive::register(r);
    attention::register(r);
    grad::register(r);
    margin::register(r);
    norm::register(r);
    rnn::register(r);
    transformer::register(r);
}

// ------------------------------------------------------------------ helpers

/// Broadcasts `v` (the result of reducing `dims` out of a tensor of shape
/// `full`) back to `full`.
fn expand_reduced(cx: &mut Cx, v: V, full: &[i64], dims: &[usize]) -> V {
    let kept: Vec<i64> = (0..full.len()).filter(|d| !dims.contains(d)).map(|d| d as i64).collect();
    cx.f.broadcast_in_dim(v, &kept, full)
}

/// Sum of `x` over `dims`, in `x`'s type.
fn sum(cx: &mut Cx, x: V, dims: &[usize]) -> V {
    let zero = cx.f.constant(cx.ty(x).elem, 0.0);
    cx.f.reduce(x, zero, dims, Reducer::Add)
}

/// The lowest value of an element type: -inf for floats, the minimum for
/// integers (max-pool padding and initial values).
fn lowest(f: &mut Func, elem: Elem) -> V {
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

/// A loss tensor (opmath) reduced as `reduction` says (1 mean, 2 sum), in
/// the result type `d`.
pub(super) fn reduce_loss(cx: &mut Cx, l: V, dims: &[i64], reduction: i64, d: DType) -> Result<V> {
    let all: Vec<usize> = (0..dims.len()).collect();
    let total = sum(cx, l, &all);
    let out = match reduction {
        1 => {
            let n = cx.f.full_like(total, shape::numel(dims) as f64);
            cx.f.div(total, n)
        }
        2 => total,
        other => bail_op!(&*cx.op, "{other} is not a valid value for reduction"),
    };
    Ok(cx.f.convert(out, d))
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
fn require_float(cx: &Cx, x: V, what: &str) -> Result<DType> {
    let d = cx.dtype(x);
    if !d.is_float() {
        bail_op!(&*cx.op, "\"{what}\" not implemented for '{d}'");
    }
    Ok(d)
}

/// Expands an `int[]` conv/pool parameter of length 1 to `n` entries.
fn expand_param(cx: &Cx, name: &str, v: &[i64], n: usize) -> Result<Vec<i64>> {
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

// ------------------------------------------------------------------ softmax

/// `softmax(x)` or `log_softmax(x)` along `dim`, computed in `out`'s opmath
/// type (subtracting the max for stability) and rounded to `out`.
fn softmax(cx: &mut Cx, x: V, dim: i64, log: bool, out: DType) -> Result<V> {
    let name = if log { "log_softmax" } else { "softmax" };
    if !out.is_float() {
        bail_op!(&*cx.op, "\"{name}\" not implemented for '{out}'");
    }
    let in_dims = cx.dims(x);
    let d = shape::wrap_dim(&cx.op, dim, in_dims.len())?;
    // A 0-dim tensor is softmaxed as a single element.
    let dims: Vec<i64> = if in_dims.is_empty() { vec![1] } else { in_dims.clone() };
    // `softmax(x, dtype=...)` first casts the input to `dtype` (rounding).
    let xc = cx.f.convert(x, out);
    let xc = cx.f.convert(xc, out.opmath());
    let xc = cx.f.reshape(xc, &dims);
    let elem = cx.ty(xc).elem;
    let init = lowest(&mut cx.f, elem);
    let m = cx.f.reduce(xc, init, &[d], Reducer::Max);
    let m = expand_reduced(cx, m, &dims, &[d]);
    let shifted = cx.f.sub(xc, m);
    let e = cx.f.unary("stablehlo.exponential", shifted);
    let s = sum(cx, e, &[d]);
    let s = expand_reduced(cx, s, &dims, &[d]);
    let y = if log {
        let ls = cx.f.unary("stablehlo.log", s);
        cx.f.sub(shifted, ls)
    } else {
        cx.f.div(e, s)
    };
    let y = cx.f.reshape(y, &in_dims);
    Ok(cx.f.convert(y, out))
}

/// The result dtype of `_softmax(x, dim, half_to_float)`.
fn softmax_out(cx: &Cx, x: V, half_to_float: bool) -> Result<DType> {
    let d = cx.dtype(x);
    if !half_to_float {
        return Ok(d);
    }
    if !matches!(d, DType::F16 | DType::BF16) {
        bail_op!(&*cx.op, "conversion is supported for Half and BFloat16 types only, got {d}");
    }
    Ok(DType::F32)
}

fn register_softmax(r: &mut Builder) {
    for (name, log) in [("softmax", false), ("log_softmax", true)] {
        r.op(&format!("aten::_{name}(Tensor self, int dim, bool half_to_float) -> Tensor"), move |cx, a| {
            let x = a.tensor(0)?;
            let out = softmax_out(cx, x, a.bool(2)?)?;
            Ok(vec![softmax(cx, x, a.int(1)?, log, out)?])
        });
        r.op(&format!("aten::{name}.int(Tensor self, int dim, ScalarType? dtype=None) -> Tensor"), move |cx, a| {
            let x = a.tensor(0)?;
            let out = a.opt_dtype(2).unwrap_or_else(|| cx.dtype(x));
            Ok(vec![softmax(cx, x, a.int(1)?, log, out)?])
        });
    }
}

// --------------------------------------------------------------- layer norm

fn register_layer_norm(r: &mut Builder) {
    r.op(
        "aten::native_layer_norm(Tensor input, SymInt[] normalized_shape, Tensor? weight, Tensor? bias, float eps) \
         -> (Tensor, Tensor, Tensor)",
        |cx, a| {
            let x = a.tensor(0)?;
            let norm = a.ints(1)?.to_vec();
            let (y, mean, rstd) = layer_norm(cx, x, &norm, a.opt_tensor(2), a.opt_tensor(3), a.float(4)?)?;
            Ok(vec![y, mean, rstd])
        },
    );
}

/// `native_layer_norm` of `x` over its trailing `norm` dims: the result, and
/// the mean and rstd with the normalized dims kept as size 1, all in `x`'s
/// dtype (as PyTorch's CPU kernel returns them).
pub(super) fn layer_norm(cx: &mut Cx, x: V, norm: &[i64], w: Option<V>, b: Option<V>, eps: f64) -> Result<(V, V, V)> {
    let dims = cx.dims(x);
    let k = norm.len();
    if k == 0 {
        bail_op!(
            &*cx.op,
            "Expected normalized_shape to be at least 1-dimensional, i.e., containing at least one element, \
             but got normalized_shape = {}",
            fmt(norm)
        );
    }
    for (t, what) in [(w, "weight"), (b, "bias")] {
        if let Some(t) = t {
            if cx.dims(t) != norm {
                bail_op!(
                    &*cx.op,
                    "Expected {what} to be of same shape as normalized_shape, but got {what} of shape {} \
                     and normalized_shape = {}",
                    fmt(&cx.dims(t)),
                    fmt(norm)
                );
            }
        }
    }
    if dims.len() < k || dims[dims.len() - k..] != norm[..] {
        bail_op!(
            &*cx.op,
            "Given normalized_shape={}, expected input with shape [*, {}], but got input of size{}",
            fmt(norm),
            norm.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", "),
            fmt(&dims)
        );
    }
    let d = require_float(cx, x, "layer_norm")?;
    let axis = dims.len() - k;
    let red: Vec<usize> = (axis..dims.len()).collect();
    let n = shape::numel(norm) as f64;
    let xc = up(cx, x);
    let mean = sum(cx, xc, &red);
    let inv_n = cx.f.full_like(mean, 1.0 / n);
    let mean = cx.f.mul(mean, inv_n);
    let mean_b = expand_reduced(cx, mean, &dims, &red);
    let xm = cx.f.sub(xc, mean_b);
    let sq = cx.f.mul(xm, xm);
    let var = sum(cx, sq, &red);
    let var = cx.f.mul(var, inv_n);
    let eps_v = cx.f.full_like(var, eps);
    let var = cx.f.add(var, eps_v);
    let rstd = cx.f.unary("stablehlo.rsqrt", var);
    let rstd_b = expand_reduced(cx, rstd, &dims, &red);
    let mut y = cx.f.mul(xm, rstd_b);
    if let Some(w) = w {
        let wc = cx.f.convert(w, d.opmath());
        let wc = cx.f.broadcast_to(wc, &dims);
        y = cx.f.mul(y, wc);
    }
    if let Some(b) = b {
        let bc = cx.f.convert(b, d.opmath());
        let bc = cx.f.broadcast_to(bc, &dims);
        y = cx.f.add(y, bc);
    }
    // mean and rstd keep the normalized dims as size 1, in the
    // input's dtype (as PyTorch's CPU kernel returns them).
    let stat_dims: Vec<i64> = dims.iter().enumerate().map(|(i, &s)| if i < axis { s } else { 1 }).collect();
    let mean = cx.f.reshape(mean, &stat_dims);
    let rstd = cx.f.reshape(rstd, &stat_dims);
    Ok((cx.f.convert(y, d), cx.f.convert(mean, d), cx.f.convert(rstd, d)))
}

// -------------------------------------------------------------- convolution

/// Checked convolution parameters, expanded to one entry per spatial dim.
#[derive(Clone)]
struct ConvParams {
    stride: Vec<i64>,
    padding: Vec<i64>,
    dilation: Vec<i64>,
    output_padding: Vec<i64>,
    transposed: bool,
    groups: i64,
}

/// The parameters of a convolution whose `stride` is argument `at` (then
/// padding, dilation, transposed, output_padding and groups).
fn conv_params(cx: &Cx, a: &Args, n: usize, at: usize) -> Result<ConvParams> {
    let p = ConvParams {
        stride: expand_param(cx, "stride", a.ints(at)?, n)?,
        padding: expand_param(cx, "padding", a.ints(at + 1)?, n)?,
        dilation: expand_param(cx, "dilation", a.ints(at + 2)?, n)?,
        transposed: a.bool(at + 3)?,
        output_padding: expand_param(cx, "output_padding", a.ints(at + 4)?, n)?,
        groups: a.int(at + 5)?,
    };
    if p.stride.iter().any(|&s| s <= 0) {
        bail_op!(&*cx.op, "non-positive stride is not supported");
    }
    if p.padding.iter().any(|&s| s < 0) {
        bail_op!(&*cx.op, "negative padding is not supported");
    }
    if p.output_padding.iter().any(|&s| s < 0) {
        bail_op!(&*cx.op, "negative output_padding is not supported");
    }
    if p.dilation.iter().any(|&s| s <= 0) {
        bail_op!(&*cx.op, "dilation should be greater than zero");
    }
    if p.groups <= 0 {
        bail_op!(&*cx.op, "non-positive groups is not supported");
    }
    if p.transposed {
        let ok = (0..n).all(|i| p.output_padding[i] < p.stride[i] || p.output_padding[i] < p.dilation[i]);
        if !ok {
            bail_op!(
                &*cx.op,
                "output padding must be smaller than either stride or dilation, but got output_padding={}, \
                 stride={}, dilation={}",
                fmt(&p.output_padding),
                fmt(&p.stride),
                fmt(&p.dilation)
            );
        }
    }
    // A regular convolution ignores output_padding, as PyTorch does.
    Ok(p)
}

/// The convolution (or, with `p.transposed`, the transposed convolution)
/// of `xc: [N, C, sp...]` by `wc` in their (opmath) type, without bias.
fn conv_core(cx: &mut Cx, xc: V, wc: V, p: &ConvParams) -> Result<V> {
    let (xd, wd) = (cx.dims(xc), cx.dims(wc));
    let n = wd.len() - 2;
    let g = p.groups;
    let out_ch = if p.transposed { wd[1] * g } else { wd[0] };
    let ks: Vec<i64> = (0..n).map(|i| p.dilation[i] * (wd[i + 2] - 1) + 1).collect();
    let sp: Vec<i64> = xd[2..].to_vec();
    let mut out_dims = vec![xd[0], out_ch];
    Ok(if !p.transposed {
        let padded: Vec<i64> = (0..n).map(|i| sp[i] + 2 * p.padding[i]).collect();
        if (0..n).any(|i| padded[i] < ks[i]) {
            let j = |v: &[i64]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(" x ");
            bail_op!(
                &*cx.op,
                "Calculated padded input size per channel: ({}). Kernel size: ({}). Kernel size can't be greater \
                 than actual input size",
                j(&padded),
                j(&ks)
            );
        }
        out_dims.extend((0..n).map(|i| (padded[i] - ks[i]) / p.stride[i] + 1));
        let pad: Vec<(i64, i64)> = p.padding.iter().map(|&q| (q, q)).collect();
        cx.f.convolution(xc, wc, &p.stride, &pad, &vec![1; n], &p.dilation, g, &out_dims)
    } else {
        // The gradient of a convolution: dilate the input by the stride,
        // pad by the dilated kernel extent minus the padding, and convolve
        // with the spatially flipped kernel, its in/out channels swapped
        // within each group.
        let (cin_g, cout_g) = (wd[0] / g, wd[1]);
        let mut gdims = vec![g, cin_g, cout_g];
        gdims.extend_from_slice(&wd[2..]);
        let wg = cx.f.reshape(wc, &gdims);
        let mut perm = vec![0, 2, 1];
        perm.extend(3..3 + n);
        let wg = cx.f.transpose(wg, &perm);
        let mut odims = vec![g * cout_g, cin_g];
        odims.extend_from_slice(&wd[2..]);
        let wt = cx.f.reshape(wg, &odims);
        let flip: Vec<usize> = (2..2 + n).collect();
        let wt = cx.f.reverse(wt, &flip);
        let pad: Vec<(i64, i64)> =
            (0..n).map(|i| (ks[i] - 1 - p.padding[i], ks[i] - 1 - p.padding[i] + p.output_padding[i])).collect();
        out_dims.extend((0..n).map(|i| (sp[i] - 1) * p.stride[i] - 2 * p.padding[i] + ks[i] + p.output_padding[i]));
        if out_dims[2..].iter().any(|&s| s <= 0) {
            bail_op!(
                &*cx.op,
                "Given input size per channel {}, the calculated output size per channel {} is too small",
                fmt(&sp),
                fmt(&out_dims[2..])
            );
        }
        cx.f.convolution(xc, wt, &vec![1; n], &pad, &p.stride, &p.dilation, g, &out_dims)
    })
}

fn convolution(cx: &mut Cx, a: &Args) -> Result<Vec<V>> {
    let (x, w, bias) = (a.tensor(0)?, a.tensor(1)?, a.opt_tensor(2));
    let (xd, wd) = (cx.dims(x), cx.dims(w));
    if wd.len() < 3 || wd.len() > 5 {
        bail_op!(
            &*cx.op,
            "expected a 3-, 4- or 5-dimensional weight (1-, 2- or 3-d convolution), but got weight of size {}",
            fmt(&wd)
        );
    }
    let n = wd.len() - 2;
    if xd.len() != wd.len() {
        bail_op!(
            &*cx.op,
            "Expected {}-dimensional input for {}-dimensional weight {}, but got {}-dimensional input of size {} instead",
            wd.len(),
            wd.len(),
            fmt(&wd),
            xd.len(),
            fmt(&xd)
        );
    }
    let p = conv_params(cx, a, n, 3)?;
    let g = p.groups;
    // Channels: weight is [out, in/g, k...] or, transposed, [in, out/g, k...].
    let (in_ch, out_ch) = if p.transposed { (wd[0], wd[1] * g) } else { (wd[1] * g, wd[0]) };
    if xd[1] != in_ch {
        let given = if p.transposed { "transposed=1".to_string() } else { format!("groups={g}") };
        bail_op!(
            &*cx.op,
            "Given {given}, weight of size {}, expected input{} to have {in_ch} channels, but got {} channels instead",
            fmt(&wd),
            fmt(&xd),
            xd[1]
        );
    }
    if wd[0] % g != 0 {
        bail_op!(
            &*cx.op,
            "Given groups={g}, expected weight to be divisible by {g} at dimension 0, but got weight of size {} instead",
            fmt(&wd)
        );
    }
    if let Some(b) = bias {
        let bd = cx.dims(b);
        if bd.len() != 1 || bd[0] != out_ch {
            bail_op!(
                &*cx.op,
                "Given weight of size {}, expected bias to be 1-dimensional with {out_ch} elements, but got bias of size {} instead",
                fmt(&wd),
                fmt(&bd)
            );
        }
    }
    let d = cx.dtype(x);
    for (t, what) in [(Some(w), "weight"), (bias, "bias")] {
        if let Some(t) = t {
            if cx.dtype(t) != d {
                bail_op!(&*cx.op, "Input type ({d}) and {what} type ({}) should be the same", cx.dtype(t));
            }
        }
    }
    require_float(cx, x, "convolution")?;
    let xc = up(cx, x);
    let wc = up(cx, w);
    let y = conv_core(cx, xc, wc, &p)?;
    let out_dims = cx.dims(y);
    let y = match bias {
        Some(b) => {
            let bc = up(cx, b);
            let bc = cx.f.broadcast_in_dim(bc, &[1], &out_dims);
            cx.f.add(y, bc)
        }
        None => y,
    };
    Ok(vec![cx.f.convert(y, d)])
}

fn register_convolution(r: &mut Builder) {
    r.op(
        "aten::convolution(Tensor input, Tensor weight, Tensor? bias, SymInt[] stride, SymInt[] padding, \
         SymInt[] dilation, bool transposed, SymInt[] output_padding, SymInt groups) -> Tensor",
        convolution,
    );
    // The backend flags (benchmark, cudnn, tf32) do not change the result.
    r.op(
        "aten::_convolution(Tensor input, Tensor weight, Tensor? bias, SymInt[] stride, SymInt[] padding, \
         SymInt[] dilation, bool transposed, SymInt[] output_padding, SymInt groups, bool benchmark, \
         bool deterministic, bool cudnn_enabled, bool allow_tf32) -> Tensor",
        convolution,
    );
}

// ------------------------------------------------------------------ pooling

/// Checked pooling geometry over the last `n` (spatial) dims of the input.
pub(super) struct Pool {
    kernel: Vec<i64>,
    stride: Vec<i64>,
    padding: Vec<i64>,
    dilation: Vec<i64>,
    /// Output spatial size.
    out: Vec<i64>,
}

/// A `int[n]` pooling argument: one int for all `n` spatial dims, or `n`
/// (an empty list takes `default`, the stride's kernel-size default).
fn pool_param(cx: &Cx, name: &str, v: &[i64], n: usize, default: Option<&[i64]>) -> Result<Vec<i64>> {
    match (v.len(), default) {
        (0, Some(d)) => Ok(d.to_vec()),
        (1, _) => Ok(vec![v[0]; n]),
        (l, _) if l == n => Ok(v.to_vec()),
        _ => {
            let count = ["zero", "one", "two", "three"].get(n).copied().unwrap_or("n");
            bail_op!(&*cx.op, "{name} must either be a single int, or a tuple of {count} ints, but got {}", fmt(v))
        }
    }
}

/// PyTorch's `pooling_output_shape`.
fn pool_out(size: i64, k: i64, pad: i64, stride: i64, dil: i64, ceil: bool) -> i64 {
    let num = size + 2 * pad - dil * (k - 1) - 1 + if ceil { stride - 1 } else { 0 };
    let mut out = num.div_euclid(stride) + 1;
    // The last window must start inside the input or the left padding.
    if ceil && (out - 1) * stride >= size + pad {
        out -= 1;
    }
    out
}

/// The checked geometry of an `n`-d pooling of `x` (rank `n + 1` unbatched
/// or `n + 2`), with PyTorch's messages.
#[allow(clippy::too_many_arguments)]
pub(super) fn pool_geometry(
    cx: &Cx,
    x: V,
    n: usize,
    kernel: &[i64],
    stride: &[i64],
    padding: &[i64],
    dilation: &[i64],
    ceil: bool,
    name: &str,
) -> Result<Pool> {
    let dims = cx.dims(x);
    let kernel = pool_param(cx, "kernel_size", kernel, n, None)?;
    let stride = pool_param(cx, "stride", stride, n, Some(&kernel))?;
    let padding = pool_param(cx, "padding", padding, n, None)?;
    let dilation = pool_param(cx, "dilation", dilation, n, None)?;
    if !(dims.len() == n + 1 || dims.len() == n + 2) || dims[dims.len() - n - 1..].contains(&0) {
        bail_op!(
            &*cx.op,
            "Expected {}D or {}D (batch mode) tensor with optional 0 dim batch size for input, but got: {}",
            n + 1,
            n + 2,
            fmt(&dims)
        );
    }
    if kernel.iter().any(|&k| k <= 0) {
        bail_op!(&*cx.op, "kernel size should be greater than zero, but got kernel_size={}", fmt(&kernel));
    }
    if stride.iter().any(|&k| k <= 0) {
        bail_op!(&*cx.op, "stride should be greater than zero, but got stride={}", fmt(&stride));
    }
    if dilation.iter().any(|&k| k <= 0) {
        bail_op!(&*cx.op, "dilation should be greater than zero, but got dilation={}", fmt(&dilation));
    }
    for i in 0..n {
        if padding[i] < 0 || padding[i] > ((kernel[i] - 1) * dilation[i] + 1) / 2 {
            bail_op!(
                &*cx.op,
                "pad should be at most half of effective kernel size, but got pad={}, kernel_size={} and dilation={}",
                padding[i],
                kernel[i],
                dilation[i]
            );
        }
    }
    let sp = &dims[dims.len() - n..];
    let out: Vec<i64> =
        (0..n).map(|i| pool_out(sp[i], kernel[i], padding[i], stride[i], dilation[i], ceil)).collect();
    if out.iter().any(|&o| o < 1) {
        let c = dims[dims.len() - n - 1];
        let join = |v: &[i64]| v.iter().map(|d| d.to_string()).collect::<Vec<_>>().join("x");
        bail_op!(
            &*cx.op,
            "{name}: Given input size: ({c}x{}). Calculated output size: ({c}x{}). Output size is too small",
            join(sp),
            join(&out)
        );
    }
    Ok(Pool { kernel, stride, padding, dilation, out })
}

/// `reduce_window` attributes.
struct Window {
    dims: Vec<i64>,
    strides: Vec<i64>,
    dilations: Vec<i64>,
    padding: Vec<(i64, i64)>,
}

impl Window {
    fn reduce(&self, f: &mut Func, inputs: &[V], inits: &[V], body: impl FnOnce(&mut Func, &[V]) -> Vec<V>) -> Vec<V> {
        f.reduce_window_with(inputs, inits, &self.dims, &self.strides, &self.dilations, &self.padding, body)
    }
}

impl Pool {
    /// The spatial rank.
    fn n(&self) -> usize {
        self.kernel.len()
    }

    /// The window over all dims of a rank-`rank` input with spatial size
    /// `sp`: low padding `padding`, high padding extended so that the last
    /// (ceil-mode) window fits.
    fn window(&self, rank: usize, sp: &[i64]) -> Window {
        let lead = rank - self.n();
        let mut w = Window {
            dims: vec![1; lead],
            strides: vec![1; lead],
            dilations: vec![1; lead],
            padding: vec![(0, 0); lead],
        };
        for (i, &size) in sp.iter().enumerate() {
            w.dims.push(self.kernel[i]);
            w.strides.push(self.stride[i]);
            w.dilations.push(self.dilation[i]);
            let span = (self.out[i] - 1) * self.stride[i] + (self.kernel[i] - 1) * self.dilation[i] + 1;
            w.padding.push((self.padding[i], (span - size - self.padding[i]).max(0)));
        }
        w
    }
}

/// `a` beats `b` in max-pooling: larger value, NaN above everything; ties go
/// to the smaller index (PyTorch keeps the first maximum it scans), NaNs to
/// the larger (it keeps the last NaN). A total order, so the window
/// reduction is well defined in any order.
fn pool_better(f: &mut Func, va: V, ia: V, vb: V, ib: V, float: bool) -> V {
    let gt = f.compare(Cmp::Gt, va, vb);
    let eq = f.compare(Cmp::Eq, va, vb);
    let first = f.compare(Cmp::Lt, ia, ib);
    let tie = f.and(eq, first);
    let better = f.or(gt, tie);
    if !float {
        return better;
    }
    let nan_a = f.compare(Cmp::Ne, va, va);
    let nan_b = f.compare(Cmp::Ne, vb, vb);
    let not_nan_b = f.not(nan_b);
    let last = f.compare(Cmp::Gt, ia, ib);
    let a_nan_wins = f.or(not_nan_b, last);
    let no_nan = f.or(nan_a, nan_b);
    let no_nan = f.not(no_nan);
    let plain = f.and(no_nan, better);
    let nan_case = f.and(nan_a, a_nan_wins);
    f.or(plain, nan_case)
}

/// `max_pool{n}d_with_indices`: the maxima and their flat indices within
/// each (N, C) volume.
fn max_pool_with_indices(cx: &mut Cx, a: &Args, n: usize) -> Result<Vec<V>> {
    let x = a.tensor(0)?;
    let name = format!("max_pool{n}d");
    let p = pool_geometry(cx, x, n, a.ints(1)?, a.ints(2)?, a.ints(3)?, a.ints(4)?, a.bool(5)?, &name)?;
    let dims = cx.dims(x);
    let rank = dims.len();
    if cx.dtype(x) == DType::Bool {
        bail_op!(&*cx.op, "\"{name}\" not implemented for 'bool'");
    }
    // Flat index of each element in its volume (row-major over the spatial dims).
    let ity = Ty::new(Elem::I64, &dims);
    let mut idx: Option<V> = None;
    for (d, &size) in dims.iter().enumerate().skip(rank - n) {
        let i = cx.f.iota(&ity, d);
        idx = Some(match idx {
            None => i,
            Some(acc) => {
                let sz = cx.f.splat_int(&ity, size);
                let acc = cx.f.mul(acc, sz);
                cx.f.add(acc, i)
            }
        });
    }
    let idx = idx.expect("n >= 1");
    let elem = cx.ty(x).elem;
    let float = elem.is_float();
    // Padding holds the lowest value and an index that loses ties to any
    // real element.
    let init_v = lowest(&mut cx.f, elem);
    let init_i = cx.f.splat_int(&Ty::scalar(Elem::I64), i64::MAX);
    let out = p.window(rank, &dims[rank - n..]).reduce(&mut cx.f, &[x, idx], &[init_v, init_i], |f, v| {
        let a_wins = pool_better(f, v[0], v[1], v[2], v[3], float);
        vec![f.select(a_wins, v[0], v[2]), f.select(a_wins, v[1], v[3])]
    });
    Ok(out)
}

fn register_pooling(r: &mut Builder) {
    r.op(
        "aten::max_pool2d_with_indices(Tensor self, int[2] kernel_size, int[2] stride=[], int[2] padding=0, \
         int[2] dilation=1, bool ceil_mode=False) -> (Tensor, Tensor)",
        |cx, a| max_pool_with_indices(cx, a, 2),
    );
    r.op(
        "aten::max_pool3d_with_indices(Tensor self, int[3] kernel_size, int[3] stride=[], int[3] padding=0, \
         int[3] dilation=1, bool ceil_mode=False) -> (Tensor, Tensor)",
        |cx, a| max_pool_with_indices(cx, a, 3),
    );
    r.op(
        "aten::avg_pool2d(Tensor self, int[2] kernel_size, int[2] stride=[], int[2] padding=0, bool ceil_mode=False, \
         bool count_include_pad=True, int? divisor_override=None) -> Tensor",
        |cx, a| {
            let x = a.tensor(0)?;
            let (k, s, p) = (a.ints(1)?.to_vec(), a.ints(2)?.to_vec(), a.ints(3)?.to_vec());
            Ok(vec![avg_pool(cx, x, 2, &k, &s, &p, a.bool(4)?, a.bool(5)?, a.opt_int(6))?])
        },
    );
    r.op(
        "aten::avg_pool3d(Tensor self, int[3] kernel_size, int[3] stride=[], int[3] padding=0, bool ceil_mode=False, \
         bool count_include_pad=True, int? divisor_override=None) -> Tensor",
        |cx, a| {
            let x = a.tensor(0)?;
            let (k, s, p) = (a.ints(1)?.to_vec(), a.ints(2)?.to_vec(), a.ints(3)?.to_vec());
            Ok(vec![avg_pool(cx, x, 3, &k, &s, &p, a.bool(4)?, a.bool(5)?, a.opt_int(6))?])
        },
    );
    r.op(
        "aten::avg_pool1d(Tensor self, int[1] kernel_size, int[1] stride=[], int[1] padding=0, bool ceil_mode=False, \
         bool count_include_pad=True) -> Tensor",
        |cx, a| {
            // A 2-d pooling over a height of one, as PyTorch composes it.
            let x = a.tensor(0)?;
            let dims = cx.dims(x);
            // Only stride may be empty (it defaults to the kernel size).
            let one = |cx: &Cx, name: &str, v: &[i64], empty_ok: bool| -> Result<Vec<i64>> {
                match v {
                    [] if empty_ok => Ok(vec![]),
                    [k] => Ok(vec![1, *k]),
                    _ => bail_op!(&*cx.op, "avg_pool1d() argument '{name}' should contain one int (got {})", v.len()),
                }
            };
            let k = one(cx, "kernel_size", a.ints(1)?, false)?;
            let s = one(cx, "stride", a.ints(2)?, true)?;
            let mut p = one(cx, "padding", a.ints(3)?, false)?;
            p[0] = 0;
            if !(dims.len() == 2 || dims.len() == 3) {
                bail_op!(&*cx.op, "Expected 2D or 3D (batch mode) tensor for input, but got: {}", fmt(&dims));
            }
            let mut d4 = dims[..dims.len() - 1].to_vec();
            d4.push(1);
            d4.push(dims[dims.len() - 1]);
            let x4 = cx.f.reshape(x, &d4);
            let y = avg_pool(cx, x4, 2, &k, &s, &p, a.bool(4)?, a.bool(5)?, None)?;
            let mut yd = cx.dims(y);
            yd.remove(yd.len() - 2);
            Ok(vec![cx.f.reshape(y, &yd)])
        },
    );
}

/// The checks of `avg_pool{n}d` (and its backward): the geometry and the dtype.
#[allow(clippy::too_many_arguments)]
pub(super) fn avg_pool_checks(
    cx: &Cx,
    x: V,
    n: usize,
    kernel: &[i64],
    stride: &[i64],
    padding: &[i64],
    ceil: bool,
    divisor: Option<i64>,
) -> Result<Pool> {
    let name = format!("avg_pool{n}d");
    let p = pool_geometry(cx, x, n, kernel, stride, padding, &[1], ceil, &name)?;
    let d = cx.dtype(x);
    if !(d.is_float() || d == DType::I64) {
        bail_op!(&*cx.op, "\"{name}\" not implemented for '{d}'");
    }
    if divisor == Some(0) {
        bail_op!(&*cx.op, "divisor must be not zero");
    }
    Ok(p)
}

/// The divisor of each average-pooling window, broadcast to `out_dims` (the
/// pooled shape, spatial dims last), and whether it is zero (a window over
/// padding only). `sp` is the input's spatial size.
pub(super) fn avg_divisor(
    cx: &mut Cx,
    p: &Pool,
    sp: &[i64],
    include_pad: bool,
    divisor: Option<i64>,
    acc: Elem,
    out_dims: &[i64],
) -> (V, Option<V>) {
    if let Some(k) = divisor {
        return (cx.f.splat(&Ty::new(acc, out_dims), k as f64), None);
    }
    let n = p.n();
    let zero = cx.f.constant(acc, 0.0);
    let add = |f: &mut Func, v: &[V]| vec![f.add(v[0], v[1])];
    // Count the elements each window covers: the input, plus the explicit
    // padding when it counts (never the ceil-mode overhang).
    let volume = Ty::new(acc, sp);
    let ones = cx.f.splat(&volume, 1.0);
    let ones = if include_pad {
        let one = cx.f.constant(acc, 1.0);
        cx.f.pad(ones, one, &p.padding, &p.padding, &vec![0; n])
    } else {
        ones
    };
    let mut win = p.window(n, sp);
    if include_pad {
        // The volume already holds the padding.
        for (i, q) in win.padding.iter_mut().enumerate() {
            q.0 = 0;
            q.1 = (q.1 - p.padding[i]).max(0);
        }
    }
    let count = win.reduce(&mut cx.f, &[ones], &[zero], add)[0];
    let rank = out_dims.len();
    let keep: Vec<i64> = (rank - n..rank).map(|d| d as i64).collect();
    let count = cx.f.broadcast_in_dim(count, &keep, out_dims);
    let zeros = cx.f.full_like(count, 0.0);
    let empty = cx.f.compare(Cmp::Eq, count, zeros);
    (count, Some(empty))
}

/// `avg_pool{n}d`, summing in opmath and rounding once.
#[allow(clippy::too_many_arguments)]
fn avg_pool(
    cx: &mut Cx,
    x: V,
    n: usize,
    kernel: &[i64],
    stride: &[i64],
    padding: &[i64],
    ceil: bool,
    include_pad: bool,
    divisor: Option<i64>,
) -> Result<V> {
    let p = avg_pool_checks(cx, x, n, kernel, stride, padding, ceil, divisor)?;
    let d = cx.dtype(x);
    let dims = cx.dims(x);
    let rank = dims.len();
    let sp = dims[rank - n..].to_vec();
    let xc = up(cx, x);
    let acc = cx.ty(xc).elem;
    let zero = cx.f.constant(acc, 0.0);
    let add = |f: &mut Func, v: &[V]| vec![f.add(v[0], v[1])];
    let s = p.window(rank, &sp).reduce(&mut cx.f, &[xc], &[zero], add)[0];
    let out_dims = cx.dims(s);
    let (count, empty) = avg_divisor(cx, &p, &sp, include_pad, divisor, acc, &out_dims);
    let mut y = cx.f.div(s, count);
    if let Some(empty) = empty {
        // A window over padding only averages to 0, as in PyTorch.
        let zeros = cx.f.full_like(count, 0.0);
        y = cx.f.select(empty, zeros, y);
    }
    Ok(cx.f.convert(y, d))
}

// ------------------------------------------------------------------ dropout

fn register_dropout(r: &mut Builder) {
    // `p` is a runtime value (a dropout schedule does not recompile), so its
    // range is checked at the call.
    r.op("aten::native_dropout(Tensor input, float p, bool? train) -> (Tensor, Tensor)", |cx, a| {
        let x = a.tensor(0)?;
        let train = a.opt_bool(2).unwrap_or(true);
        let d = require_float(cx, x, "native_dropout")?;
        let dims = cx.dims(x);
        let n = shape::numel(&dims);
        if !train || n == 0 {
            let keep = cx.f.splat(&Ty::new(Elem::Pred, &dims), 1.0);
            // The identity (PyTorch returns a clone; a read is already a new value).
            return Ok(vec![x, keep]);
        }
        let p = a.runtime_f64(cx, 1)?;
        // Uniform [0, 1) floats from the top 24 bits, kept with probability
        // 1 - p (all of them when p is 0: u < 1 always holds).
        let state = cx.rng_state();
        let (_, bits) = cx.f.rng_bit_generator(state, &Ty::new(Elem::U32, &[n]));
        let eight = cx.f.splat_int(&Ty::new(Elem::U32, &[n]), 8);
        let top = cx.f.binary("stablehlo.shift_right_logical", bits, eight);
        let u = cx.f.convert(top, Elem::F32);
        let scale24 = cx.f.splat(&Ty::new(Elem::F32, &[n]), 1.0 / (1u64 << 24) as f64);
        let u = cx.f.mul(u, scale24);
        let one = cx.f.constant(Elem::F64, 1.0);
        let keep_p64 = cx.f.sub(one, p);
        let keep_p = cx.f.convert(keep_p64, Elem::F32);
        let keep_p = cx.f.broadcast_to(keep_p, &[n]);
        let keep = cx.f.compare(Cmp::Lt, u, keep_p);
        let keep = cx.f.reshape(keep, &dims);
        let xc = up(cx, x);
        let e = cx.ty(xc).elem;
        let kf = cx.f.convert(keep, e);
        // 1 / (1 - p) in f64, as the host computes it; 0 when p is 1.
        let inv = cx.f.div(one, keep_p64);
        let zero = cx.f.constant(Elem::F64, 0.0);
        let all_dropped = cx.f.compare(Cmp::Eq, keep_p64, zero);
        let scale = cx.f.select(all_dropped, zero, inv);
        let scale = cx.f.convert(scale, e);
        let sv = cx.f.broadcast_to(scale, &dims);
        let y = cx.f.mul(xc, kf);
        let y = cx.f.mul(y, sv);
        Ok(vec![cx.f.convert(y, d), keep])
    })
    .runtime_floats(&["p"])
    .check(|bound| match bound_f64(bound, 1) {
        Some(p) if !(0.0..=1.0).contains(&p) => Err(format!("dropout probability has to be between 0 and 1, but got {p}")),
        _ => Ok(()),
    });
    // grad * mask * scale, in PyTorch's order (the mask first).
    r.op("aten::native_dropout_backward(Tensor grad_output, Tensor mask, float scale) -> Tensor", |cx, a| {
        let (g, mask) = (a.tensor(0)?, a.tensor(1)?);
        let d = require_float(cx, g, "native_dropout_backward")?;
        if cx.dtype(mask) != DType::Bool {
            bail_op!(&*cx.op, "Mask should be Bool Scalar Type {}", cx.dtype(mask));
        }
        let dims = shape::broadcast(&cx.op, &cx.dims(g), &cx.dims(mask))?;
        let gc = up(cx, g);
        let gc = cx.f.broadcast_to(gc, &dims);
        let m = cx.f.convert(mask, cx.ty(gc).elem);
        let m = cx.f.broadcast_to(m, &dims);
        let y = cx.f.mul(gc, m);
        let sv = cx.f.full_like(y, a.float(2)?);
        let y = cx.f.mul(y, sv);
        Ok(vec![cx.f.convert(y, d)])
    });
}

// --------------------------------------------------------------------- loss

/// Negative log-likelihood over `x: [N, C]` (opmath) with `t: [N]` (i64).
/// Returns the per-sample losses `[N]` and the per-sample weights `[N]`
/// (0 for ignored targets).
fn nll_rows(cx: &mut Cx, x: V, t: V, weight: Option<V>, ignore: i64) -> (V, V) {
    let xd = cx.dims(x);
    let elem = cx.ty(x).elem;
    // Select each row's target column with a one-hot mask: no gather, and
    // other columns (even inf/nan) never leak into the result.
    let cls = cx.f.iota(&Ty::new(Elem::I64, &xd), 1);
    let tb = cx.f.broadcast_in_dim(t, &[0], &xd);
    let hot = cx.f.compare(Cmp::Eq, cls, tb);
    let zeros = cx.f.splat(&Ty::new(elem, &xd), 0.0);
    let picked = cx.f.select(hot, x, zeros);
    let picked = sum(cx, picked, &[1]);
    let n = xd[0];
    let w = match weight {
        Some(w) => {
            let wc = cx.f.convert(w, elem);
            let wb = cx.f.broadcast_in_dim(wc, &[1], &xd);
            let ww = cx.f.select(hot, wb, zeros);
            sum(cx, ww, &[1])
        }
        None => cx.f.splat(&Ty::new(elem, &[n]), 1.0),
    };
    let ig = cx.f.splat_int(&Ty::new(Elem::I64, &[n]), ignore);
    let valid = cx.f.compare(Cmp::Ne, t, ig);
    let wz = cx.f.splat(&Ty::new(elem, &[n]), 0.0);
    let w = cx.f.select(valid, w, wz);
    let l = cx.f.mul(picked, w);
    (cx.f.neg(l), w)
}

/// Reduces per-sample losses as `reduction` asks; returns (output, total_weight).
fn nll_reduce(cx: &mut Cx, loss: V, w: V, reduction: i64, none_dims: &[i64], none_total: bool) -> Result<(V, V)> {
    let total = sum(cx, w, &[0]);
    Ok(match reduction {
        0 => {
            let out = cx.f.reshape(loss, none_dims);
            let total = if none_total { total } else { cx.f.full_like(total, 0.0) };
            (out, total)
        }
        1 => {
            let s = sum(cx, loss, &[0]);
            (cx.f.div(s, total), total)
        }
        2 => (sum(cx, loss, &[0]), total),
        other => bail_op!(&*cx.op, "{other} is not a valid value for reduction"),
    })
}

fn nll_checks(cx: &Cx, x: V, t: V, weight: Option<V>, classes: i64) -> Result<DType> {
    let td = cx.dtype(t);
    if !matches!(td, DType::I64 | DType::U8) {
        bail_op!(&*cx.op, "expected target dtype to be Long or Byte, but got {td}");
    }
    if let Some(w) = weight {
        if shape::numel(&cx.dims(w)) != classes {
            bail_op!(
                &*cx.op,
                "weight tensor should be defined either for all {classes} classes or no classes but got weight tensor of shape: {}",
                fmt(&cx.dims(w))
            );
        }
        if cx.dtype(w) != cx.dtype(x) {
            bail_op!(&*cx.op, "expected scalar type {} but found {}", cx.dtype(x), cx.dtype(w));
        }
    }
    require_float(cx, x, "nll_loss")
}

fn register_loss(r: &mut Builder) {
    r.op(
        "aten::nll_loss_forward(Tensor self, Tensor target, Tensor? weight, int reduction, SymInt ignore_index) \
         -> (Tensor output, Tensor total_weight)",
        |cx, a| {
            let (x, t, weight) = (a.tensor(0)?, a.tensor(1)?, a.opt_tensor(2));
            let (reduction, ignore) = (a.int(3)?, a.int(4)?);
            let (xd, td) = (cx.dims(x), cx.dims(t));
            if xd.is_empty() || xd.len() > 2 {
                bail_op!(&*cx.op, "input tensor should be 1D or 2D, but got input of size {}", fmt(&xd));
            }
            if td.len() > 1 {
                bail_op!(
                    &*cx.op,
                    "0D or 1D target tensor expected, multi-target not supported (got target of size {})",
                    fmt(&td)
                );
            }
            let batch = if xd.len() == 2 { xd[0] } else { 1 };
            let tn = if td.is_empty() { 1 } else { td[0] };
            if (xd.len() == 1 && !td.is_empty()) || tn != batch {
                bail_op!(&*cx.op, "size mismatch (got input: {}, target: {})", fmt(&xd), fmt(&td));
            }
            let classes = *xd.last().unwrap();
            let d = nll_checks(cx, x, t, weight, classes)?;
            let xc = up(cx, x);
            let xc = cx.f.reshape(xc, &[batch, classes]);
            let tc = cx.f.convert(t, Elem::I64);
            let tc = cx.f.reshape(tc, &[batch]);
            cx.check_target(tc, classes, ignore);
            let (loss, w) = nll_rows(cx, xc, tc, weight, ignore);
            // Unreduced 2-D input reports total_weight 0; a single sample
            // still reports its weight (PyTorch's CPU kernel).
            let none_dims: Vec<i64> = if xd.len() == 2 { vec![batch] } else { vec![] };
            let (out, total) = nll_reduce(cx, loss, w, reduction, &none_dims, xd.len() == 1)?;
            Ok(vec![cx.f.convert(out, d), cx.f.convert(total, d)])
        },
    );
    r.op(
        "aten::nll_loss2d_forward(Tensor self, Tensor target, Tensor? weight, int reduction, SymInt ignore_index) \
         -> (Tensor output, Tensor total_weight)",
        |cx, a| {
            let (x, t, weight) = (a.tensor(0)?, a.tensor(1)?, a.opt_tensor(2));
            let (reduction, ignore) = (a.int(3)?, a.int(4)?);
            let (xd, td) = (cx.dims(x), cx.dims(t));
            if xd.len() != 4 {
                bail_op!(
                    &*cx.op,
                    "only batches of spatial inputs supported (4D tensors), but got input of size: {}",
                    fmt(&xd)
                );
            }
            if td.len() != 3 {
                bail_op!(
                    &*cx.op,
                    "only batches of spatial targets supported (3D tensors) but got targets of size: {}",
                    fmt(&td)
                );
            }
            if td[0] != xd[0] || td[1] != xd[2] || td[2] != xd[3] {
                bail_op!(
                    &*cx.op,
                    "input and target batch or spatial sizes don't match: target {}, input {}",
                    fmt(&td),
                    fmt(&xd)
                );
            }
            let classes = xd[1];
            let d = nll_checks(cx, x, t, weight, classes)?;
            let rows = xd[0] * xd[2] * xd[3];
            let xc = up(cx, x);
            let xc = cx.f.transpose(xc, &[0, 2, 3, 1]);
            let xc = cx.f.reshape(xc, &[rows, classes]);
            let tc = cx.f.convert(t, Elem::I64);
            let tc = cx.f.reshape(tc, &[rows]);
            cx.check_target(tc, classes, ignore);
            let (loss, w) = nll_rows(cx, xc, tc, weight, ignore);
            let (out, total) = nll_reduce(cx, loss, w, reduction, &td, false)?;
            Ok(vec![cx.f.convert(out, d), cx.f.convert(total, d)])
        },
    );
}

/// The dtype of `mse_loss` and its backward: the promoted float type.
fn mse_dtype(cx: &Cx, xs: &[Ew]) -> Result<DType> {
    let d = result_dtype(cx, xs);
    if !d.is_float() {
        bail_op!(&*cx.op, "\"mse_cpu\" not implemented for '{d}'");
    }
    Ok(d)
}

/// Rounds an opmath value to `d` and back: the intermediate roundings of
/// PyTorch's half-precision vectorized kernels, which round after each op.
fn round_to(cx: &mut Cx, v: V, d: DType) -> V {
    let r = cx.f.convert(v, d);
    cx.f.convert(r, d.opmath())
}

fn register_mse(r: &mut Builder) {
    r.op("aten::mse_loss(Tensor self, Tensor target, int reduction=Mean) -> Tensor", |cx, a| {
        let xs = [Ew::arg(a, 0)?, Ew::arg(a, 1)?];
        let reduction = a.int(2)?;
        let d = mse_dtype(cx, &xs)?;
        let (vs, dims) = prepare(cx, &xs, d.opmath())?;
        let diff = cx.f.sub(vs[0], vs[1]);
        let diff = round_to(cx, diff, d);
        let sq = cx.f.mul(diff, diff);
        // PyTorch reduces a loss tensor of the result type: each squared
        // difference rounds to it first.
        let sq = cx.f.convert(sq, d);
        if reduction == 0 {
            return Ok(vec![sq]);
        }
        let sq = cx.f.convert(sq, d.opmath());
        Ok(vec![reduce_loss(cx, sq, &dims, reduction, d)?])
    });
    r.op("aten::mse_loss_backward(Tensor grad_output, Tensor self, Tensor target, int reduction) -> Tensor", |cx, a| {
        let xs = [Ew::arg(a, 0)?, Ew::arg(a, 1)?, Ew::arg(a, 2)?];
        let reduction = a.int(3)?;
        let d = mse_dtype(cx, &xs)?;
        let n = shape::numel(&cx.dims(a.tensor(1)?));
        let norm = match reduction {
            0 | 2 => 2.0,
            1 => 2.0 / n as f64,
            other => bail_op!(&*cx.op, "{other} is not a valid value for reduction"),
        };
        let (vs, _) = prepare(cx, &xs, d.opmath())?;
        // norm * (self - target) * grad, in PyTorch's order.
        let diff = cx.f.sub(vs[1], vs[2]);
        let diff = round_to(cx, diff, d);
        let nv = cx.f.splat(&Ty::scalar(d), norm);
        let nv = cx.f.convert(nv, d.opmath());
        let nv = cx.f.broadcast_to(nv, &cx.dims(diff));
        let y = cx.f.mul(nv, diff);
        let y = round_to(cx, y, d);
        let y = cx.f.mul(y, vs[0]);
        Ok(vec![cx.f.convert(y, d)])
    });
}

// ---------------------------------------------------------------- embedding

fn register_embedding(r: &mut Builder) {
    r.op(
        "aten::embedding(Tensor weight, Tensor indices, SymInt padding_idx=-1, bool scale_grad_by_freq=False, \
         bool sparse=False) -> Tensor",
        |cx, a| {
            let (w, idx) = (a.tensor(0)?, a.tensor(1)?);
            let (wd, id) = (cx.dims(w), cx.dims(idx));
            if wd.len() != 2 {
                bail_op!(&*cx.op, "'weight' must be 2-D, but got weight of size {}", fmt(&wd));
            }
            check_indices(cx, idx)?;
            let rows = wd[0];
            cx.check_index(idx, 0..rows, || format!("a weight of {rows} rows"));
            // padding_idx and the flags only affect the gradient.
            let n = shape::numel(&id);
            let flat = cx.f.reshape(idx, &[n, 1]);
            let rows = cx.f.gather(w, flat, &[1], &[0], &[0], 1, &[1, wd[1]], &[n, wd[1]]);
            let mut out = id.clone();
            out.push(wd[1]);
            Ok(vec![cx.f.reshape(rows, &out)])
        },
    );
}

// -------------------------------------------------------------- activations

/// An activation `f(x, scalars...)` of a float tensor, computed in opmath.
type ActBody = fn(&mut Func, V, &[V]) -> V;

/// Registers an activation whose trailing arguments are runtime scalars; with
/// `inplace`, also its `aten::name_` form. Only `ints` activations accept
/// integer tensors (`hardtanh` is a clamp).
fn activation(r: &mut Builder, decl: &'static str, inplace: bool, ints: bool, body: ActBody) {
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
fn hardsigmoid(f: &mut Func, x: V) -> V {
    let three = f.full_like(x, 3.0);
    let zero = f.full_like(x, 0.0);
    let six = f.full_like(x, 6.0);
    let s = f.add(x, three);
    let s = f.max(s, zero);
    let s = f.min(s, six);
    f.div(s, six)
}

fn register_activations(r: &mut Builder) {
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

// ----------------------------------------------------------------- backward

/// A backward kernel `f(grad, saved)` with both operands promoted together,
/// computed in opmath and rounded to the promoted dtype.
fn backward2(cx: &mut Cx, a: &Args, body: impl FnOnce(&mut Cx, V, V) -> Result<V>) -> Result<Vec<V>> {
    let (g, s) = (Ew::arg(a, 0)?, Ew::arg(a, 1)?);
    let d = float_of(result_dtype(cx, &[g, s]));
    let (vs, _) = prepare(cx, &[g, s], d.opmath())?;
    let y = body(cx, vs[0], vs[1])?;
    Ok(vec![cx.f.convert(y, d)])
}

fn gelu_grad(f: &mut Func, x: V, tanh: bool) -> V {
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

/// The backward of `softmax` / `log_softmax` along `dim` from the forward
/// output, rounded to `input_dtype`.
fn softmax_backward(cx: &mut Cx, a: &Args, log: bool) -> Result<Vec<V>> {
    let (g, out) = (a.tensor(0)?, a.tensor(1)?);
    let input_dtype = a.opt_dtype(3).ok_or_else(|| cx.err("input_dtype is required"))?;
    let dims = cx.dims(g);
    if cx.dims(out) != dims {
        bail_op!(&*cx.op, "grad_output of size {} does not match output of size {}", fmt(&dims), fmt(&cx.dims(out)));
    }
    let d = shape::wrap_dim(&cx.op, a.int(2)?, dims.len())?;
    let calc: Vec<i64> = if dims.is_empty() { vec![1] } else { dims.clone() };
    let od = float_of(cx.dtype(g)).opmath();
    let gc = cx.f.convert(g, od);
    let gc = cx.f.reshape(gc, &calc);
    let oc = cx.f.convert(out, od);
    let oc = cx.f.reshape(oc, &calc);
    let y = if log {
        // grad - exp(out) * sum(grad)
        let s = sum(cx, gc, &[d]);
        let s = expand_reduced(cx, s, &calc, &[d]);
        let e = cx.f.unary("stablehlo.exponential", oc);
        let es = cx.f.mul(e, s);
        cx.f.sub(gc, es)
    } else {
        // out * (grad - sum(grad * out))
        let go = cx.f.mul(gc, oc);
        let s = sum(cx, go, &[d]);
        let s = expand_reduced(cx, s, &calc, &[d]);
        let diff = cx.f.sub(gc, s);
        cx.f.mul(oc, diff)
    };
    let y = cx.f.reshape(y, &dims);
    Ok(vec![cx.f.convert(y, input_dtype)])
}

fn register_backward(r: &mut Builder) {
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
    r.op("aten::channel_shuffle(Tensor self, SymInt groups) -> Tensor", |cx, a| {
        // [N, C, *] -> [N, g, C/g, *] -> swap the two -> [N, C, *].
        let x = a.tensor(0)?;
        let groups = a.int(1)?;
        let dims = cx.dims(x);
        if dims.len() < 3 {
            bail_op!(&*cx.op, "channel_shuffle expects input to have at least 3 dimensions, but got input with sizes {}", fmt(&dims));
        }
        if groups <= 0 {
            bail_op!(&*cx.op, "Number of groups to divide channels in must be positive. Value of groups:{groups}");
        }
        if dims[1] % groups != 0 {
            bail_op!(&*cx.op, "Number of channels must be divisible by groups. Got {} channels and {groups} groups.", dims[1]);
        }
        let mut split = vec![dims[0], groups, dims[1] / groups];
        split.extend_from_slice(&dims[2..]);
        let y = cx.f.reshape(x, &split);
        let mut perm: Vec<usize> = (0..split.len()).collect();
        perm.swap(1, 2);
        let y = cx.f.transpose(y, &perm);
        Ok(vec![cx.f.reshape(y, &dims)])
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
    r.op(
        "aten::_softmax_backward_data(Tensor grad_output, Tensor output, int dim, ScalarType input_dtype) -> Tensor",
        |cx, a| softmax_backward(cx, a, false),
    );
    r.op(
        "aten::_log_softmax_backward_data(Tensor grad_output, Tensor output, int dim, ScalarType input_dtype) -> Tensor",
        |cx, a| softmax_backward(cx, a, true),
    );
}
