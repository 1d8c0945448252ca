//! Max and average pooling over 1, 2 or 3 spatial dims (registered by
//! looping over the rank), with indices, ceil mode, padding, dilation and
//! `count_include_pad`, and their backward.

use crate::bail_op;
use crate::dtype::DType;
use crate::error::Result;
use crate::hlo::{Cmp, Elem, Func, Reducer, Ty, V};
use crate::ops::common::up;
use crate::ops::{Args, Builder, Cx};
use crate::shape::{self, fmt};

use super::*;

pub(super) fn register(r: &mut Builder) {
    register_pooling(r);
    register_pooling_backward(r);
}

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
pub(super) fn pool_param(cx: &Cx, name: &str, v: &[i64], n: usize, default: Option<&[i64]>) -> Result<Vec<i64>> {
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
pub(super) fn pool_out(size: i64, k: i64, pad: i64, stride: i64, dil: i64, ceil: bool) -> i64 {
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
pub(super) struct Window {
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
pub(super) fn pool_better(f: &mut Func, va: V, ia: V, vb: V, ib: V, float: bool) -> V {
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
pub(super) fn max_pool_with_indices(cx: &mut Cx, a: &Args, n: usize) -> Result<Vec<V>> {
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

pub(super) fn register_pooling(r: &mut Builder) {
    for n in [2usize, 3] {
        r.op(
            &format!(
                "aten::max_pool{n}d_with_indices(Tensor self, int[{n}] kernel_size, int[{n}] stride=[], \
                 int[{n}] padding=0, int[{n}] dilation=1, bool ceil_mode=False) -> (Tensor, Tensor)"
            ),
            move |cx, a| max_pool_with_indices(cx, a, n),
        );
        r.op(
            &format!(
                "aten::avg_pool{n}d(Tensor self, int[{n}] kernel_size, int[{n}] stride=[], int[{n}] padding=0, \
                 bool ceil_mode=False, bool count_include_pad=True, int? divisor_override=None) -> Tensor"
            ),
            move |cx, a| {
                let x = a.tensor(0)?;
                let (k, s, p) = (a.ints(1)?.to_vec(), a.ints(2)?.to_vec(), a.ints(3)?.to_vec());
                Ok(vec![avg_pool(cx, x, n, &k, &s, &p, a.bool(4)?, a.bool(5)?, a.opt_int(6))?])
            },
        );
    }
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
pub(super) fn avg_pool(
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

/// Adds each of `g: [B, K]` into a zero `[B, n]` at column `idx: [B, K]`.
pub(super) fn scatter_add_rows(cx: &mut Cx, g: V, idx: V, n: i64) -> V {
    let gd = cx.dims(g);
    let (b, k) = (gd[0], gd[1]);
    let ity = Ty::new(Elem::I64, &[b, k, 1]);
    let rows = cx.f.iota(&ity, 0);
    let cols = cx.f.reshape(idx, &[b, k, 1]);
    let at = cx.f.concatenate(&[rows, cols], 2);
    let zeros = cx.f.splat(&Ty::new(cx.ty(g).elem, &[b, n]), 0.0);
    cx.f.scatter(zeros, at, g, &[], &[0, 1], &[0, 1], 2, Some(Reducer::Add))
}

/// `max_pool{n}d_with_indices_backward`: each gradient added at its index.
pub(super) fn max_pool_backward(cx: &mut Cx, a: &Args, n: usize) -> Result<Vec<V>> {
    let (g, x, idx) = (a.tensor(0)?, a.tensor(1)?, a.tensor(7)?);
    let name = format!("max_pool{n}d");
    let p = pool_geometry(cx, x, n, a.ints(2)?, a.ints(3)?, a.ints(4)?, a.ints(5)?, a.bool(6)?, &name)?;
    let xd = cx.dims(x);
    let rank = xd.len();
    let mut want = xd[..rank - n].to_vec();
    want.extend(&p.out);
    if cx.dims(g) != want || cx.dims(idx) != want {
        bail_op!(
            &*cx.op,
            "expected grad_output and indices of size {}, but got {} and {}",
            fmt(&want),
            fmt(&cx.dims(g)),
            fmt(&cx.dims(idx))
        );
    }
    let d = require_float(cx, x, &format!("{name}_with_indices_backward"))?;
    Ok(vec![grad_at_indices(cx, g, idx, &xd, n, d)])
}

/// A max pooling's input gradient: each output gradient added at its
/// flat index within its `n`-dim plane of the input `xd`.
pub(super) fn grad_at_indices(cx: &mut Cx, g: V, idx: V, xd: &[i64], n: usize, d: DType) -> V {
    let rank = xd.len();
    let b = shape::numel(&xd[..rank - n]);
    let k = shape::numel(&cx.dims(g)[rank - n..]);
    let gc = up(cx, g);
    let gc = cx.f.reshape(gc, &[b, k]);
    let ic = cx.f.convert(idx, Elem::I64);
    let ic = cx.f.reshape(ic, &[b, k]);
    let out = scatter_add_rows(cx, gc, ic, shape::numel(&xd[rank - n..]));
    let out = cx.f.reshape(out, xd);
    cx.f.convert(out, d)
}

/// `avg_pool{n}d_backward`: each window's share of its gradient spread over
/// the window.
pub(super) fn avg_pool_backward(cx: &mut Cx, a: &Args, n: usize) -> Result<Vec<V>> {
    let (g, x) = (a.tensor(0)?, a.tensor(1)?);
    let divisor = a.opt_int(7);
    let p = avg_pool_checks(cx, x, n, a.ints(2)?, a.ints(3)?, a.ints(4)?, a.bool(5)?, divisor)?;
    let xd = cx.dims(x);
    let rank = xd.len();
    let sp = xd[rank - n..].to_vec();
    let mut want = xd[..rank - n].to_vec();
    want.extend(&p.out);
    if cx.dims(g) != want {
        bail_op!(&*cx.op, "expected grad_output of size {}, but got {}", fmt(&want), fmt(&cx.dims(g)));
    }
    let d = cx.dtype(x);
    let gc = up(cx, g);
    let acc = cx.ty(gc).elem;
    let b = shape::numel(&xd[..rank - n]);
    let mut gd = vec![b, 1];
    gd.extend(&p.out);
    let gc = cx.f.reshape(gc, &gd);
    let (count, empty) = avg_divisor(cx, &p, &sp, a.bool(6)?, divisor, acc, &gd);
    let mut q = cx.f.div(gc, count);
    if let Some(empty) = empty {
        let zeros = cx.f.full_like(q, 0.0);
        q = cx.f.select(empty, zeros, q);
    }
    // Spread each window's share over the window: a transposed convolution
    // by a kernel of ones, cropped to the input.
    let mut kd = vec![1, 1];
    kd.extend(&p.kernel);
    let ones = cx.f.splat(&Ty::new(acc, &kd), 1.0);
    let pad: Vec<(i64, i64)> = (0..n)
        .map(|i| {
            let k = p.kernel[i];
            let lo = k - 1 - p.padding[i];
            let extra = sp[i] - ((p.out[i] - 1) * p.stride[i] - 2 * p.padding[i] + k);
            (lo, lo + extra)
        })
        .collect();
    let mut yd = vec![b, 1];
    yd.extend(&sp);
    let y = cx.f.convolution(q, ones, &vec![1; n], &pad, &p.stride, &vec![1; n], 1, &yd);
    let y = cx.f.reshape(y, &xd);
    Ok(vec![cx.f.convert(y, d)])
}

pub(super) fn register_pooling_backward(r: &mut Builder) {
    for n in [2usize, 3] {
        r.op(
            &format!(
                "aten::max_pool{n}d_with_indices_backward(Tensor grad_output, Tensor self, int[{n}] kernel_size, \
                 int[{n}] stride, int[{n}] padding, int[{n}] dilation, bool ceil_mode, Tensor indices) -> Tensor"
            ),
            move |cx, a| max_pool_backward(cx, a, n),
        );
        r.op(
            &format!(
                "aten::avg_pool{n}d_backward(Tensor grad_output, Tensor self, int[{n}] kernel_size, int[{n}] stride, \
                 int[{n}] padding, bool ceil_mode, bool count_include_pad, int? divisor_override) -> Tensor"
            ),
            move |cx, a| avg_pool_backward(cx, a, n),
        );
    }
}
