//! Spatial ops: reflection / replication padding, nearest and bilinear
//! upsampling (with their backward kernels), `im2col` / `col2im`,
//! `grid_sampler_2d`, `_cdist_forward` / `_pdist_forward` and
//! `_embedding_bag`.
//!
//! Where the source positions depend only on shapes (padding, upsampling),
//! PyTorch's index and weight arithmetic runs on the host, in the same
//! precision as its CPU kernels, and the program gathers with the resulting
//! constants; the backward kernels scatter-add through the same maps.
//! Half-precision inputs compute in f32 and round once.

use crate::bail_op;
use crate::dtype::DType;
use crate::error::Result;
use crate::hlo::{Elem, Func, Reducer, Ty, V};
use crate::shape::{self, fmt};

use super::common::up;
use super::{Args, Cx, Registry};

pub fn register(r: &mut Registry) {
    register_padding(r);
    register_upsample(r);
}

// ------------------------------------------------------------------ helpers

/// A rank-1 constant of `elem` holding `vals`.
fn const_vec(f: &mut Func, elem: Elem, vals: &[f64]) -> V {
    let ty = Ty::new(elem, &[vals.len() as i64]);
    let lits: Vec<String> = vals.iter().map(|&v| elem.literal(v)).collect();
    let attrs = format!("value = dense<[{}]> : {}", lits.join(", "), ty);
    f.op("stablehlo.constant", &[], &[], &attrs, &[ty])[0]
}

/// `x` indexed along `dim` by host-known indices (`index_select` with
/// constant indices).
fn take(cx: &mut Cx, x: V, dim: usize, idx: &[i64]) -> V {
    let dims = cx.dims(x);
    if idx.iter().copied().eq(0..dims[dim]) {
        return x;
    }
    let mut out = dims.clone();
    out[dim] = idx.len() as i64;
    if shape::numel(&out) == 0 || dims[dim] == 0 {
        return cx.f.splat(&cx.ty(x).with_dims(&out), 0.0);
    }
    let ind = cx.f.const_i64s(idx);
    let ind = cx.f.reshape(ind, &[idx.len() as i64, 1]);
    let others: Vec<i64> = (0..dims.len()).filter(|&d| d != dim).map(|d| d as i64).collect();
    let mut slice = dims.clone();
    slice[dim] = 1;
    cx.f.gather(x, ind, &others, &[dim as i64], &[dim as i64], 1, &slice, &out)
}

/// The adjoint of [`take`]: the slices of `g` along `dim` added into zeros
/// of size `size` there, at `idx`.
fn put_add(cx: &mut Cx, g: V, dim: usize, idx: &[i64], size: i64) -> V {
    let mut dims = cx.dims(g);
    if idx.iter().copied().eq(0..size) {
        return g;
    }
    dims[dim] = size;
    let zero = cx.f.splat(&cx.ty(g).with_dims(&dims), 0.0);
    if idx.is_empty() || shape::numel(&dims) == 0 {
        return zero;
    }
    let ind = cx.f.const_i64s(idx);
    let ind = cx.f.reshape(ind, &[idx.len() as i64, 1]);
    let others: Vec<i64> = (0..dims.len()).filter(|&d| d != dim).map(|d| d as i64).collect();
    let r = if cx.ty(g).elem == Elem::Pred { Reducer::Or } else { Reducer::Add };
    cx.f.scatter(zero, ind, g, &others, &[dim as i64], &[dim as i64], 1, Some(r))
}

/// `x * w` with the constant vector `w` laid along `dim`.
fn scale_along(cx: &mut Cx, x: V, dim: usize, w: &[f64]) -> V {
    let elem = cx.ty(x).elem;
    let dims = cx.dims(x);
    let wv = const_vec(&mut cx.f, elem, w);
    let wv = cx.f.broadcast_in_dim(wv, &[dim as i64], &dims);
    cx.f.mul(x, wv)
}

/// Requires a floating-point tensor, with PyTorch's "not implemented for" message.
fn require_float(cx: &Cx, x: V, what: &str) -> Result<DType> {
    let d = cx.dtype(x);
    if !d.is_float() {
        bail_op!(&*cx.op, "\"{what}\" not implemented for '{d}'");
    }
    Ok(d)
}

/// An `int[2]` argument that must hold exactly two values.
fn two(cx: &Cx, a: &Args, i: usize, name: &str) -> Result<[i64; 2]> {
    match a.ints(i)? {
        &[h, w] => Ok([h, w]),
        v => bail_op!(&*cx.op, "It is expected {name} equals to 2, but got size {}", v.len()),
    }
}

// ------------------------------------------------------------------ padding

#[derive(Clone, Copy, PartialEq)]
enum PadMode {
    Reflect,
    Replicate,
}

impl PadMode {
    fn name(self) -> &'static str {
        match self {
            PadMode::Reflect => "reflection",
            PadMode::Replicate => "replication",
        }
    }

    /// The source position of output position `j` along a dim of `size`
    /// padded by `lo` in front.
    fn source(self, j: i64, lo: i64, size: i64) -> i64 {
        let p = j - lo;
        match self {
            PadMode::Reflect if p < 0 => -p,
            PadMode::Reflect if p >= size => 2 * (size - 1) - p,
            PadMode::Reflect => p,
            PadMode::Replicate => p.clamp(0, size - 1),
        }
    }
}

/// Checks an `n`-d padding call (`pad` as `(left, right, top, bottom,
/// front, back)`); returns the source positions along each padded dim,
/// outermost first.
fn pad_maps(cx: &Cx, dims: &[i64], pad: &[i64], n: usize, mode: PadMode) -> Result<Vec<Vec<i64>>> {
    if pad.len() != 2 * n {
        bail_op!(&*cx.op, "padding size is expected to be {}, but got: {}", 2 * n, pad.len());
    }
    let r = dims.len();
    let batched = r == n + 2;
    if !(r == n + 1 || batched) || dims[usize::from(batched)..].contains(&0) {
        bail_op!(
            &*cx.op,
            "Expected {}D or {}D (batch mode) tensor with possibly 0 batch size and other non-zero dimensions for \
             input, but got: {}",
            n + 1,
            n + 2,
            fmt(dims)
        );
    }
    let names = ["D", "H", "W"];
    let sp = &dims[r - n..];
    // pad pairs for spatial dim k (outermost first) are at 2*(n-1-k).
    let pairs: Vec<(i64, i64)> = (0..n).map(|k| (pad[2 * (n - 1 - k)], pad[2 * (n - 1 - k) + 1])).collect();
    if mode == PadMode::Reflect {
        // PyTorch checks the innermost dim first.
        for k in (0..n).rev() {
            let (lo, hi) = pairs[k];
            if lo >= sp[k] || hi >= sp[k] {
                bail_op!(
                    &*cx.op,
                    "Argument #{}: Padding size should be less than the corresponding input dimension, but got: \
                     padding ({lo}, {hi}) at dimension {} of input {}",
                    4 + 2 * (n - 1 - k),
                    r - n + k,
                    fmt(dims)
                );
            }
        }
    }
    let out: Vec<i64> = (0..n).map(|k| sp[k] + pairs[k].0 + pairs[k].1).collect();
    if out.iter().any(|&o| o < 1) {
        let nm = &names[3 - n..];
        let list = |v: &[i64]| nm.iter().zip(v).map(|(a, b)| format!("{a}: {b}")).collect::<Vec<_>>();
        if n == 1 {
            bail_op!(&*cx.op, "input (W: {}) is too small. Calculated output W: {}", sp[0], out[0]);
        }
        bail_op!(
            &*cx.op,
            "Calculated output {} must be >= 1 in every dimension (input {})",
            list(&out).join(" "),
            list(sp).join(", ")
        );
    }
    Ok((0..n).map(|k| (0..out[k]).map(|j| mode.source(j, pairs[k].0, sp[k])).collect()).collect())
}

fn pad_forward(cx: &mut Cx, a: &Args, n: usize, mode: PadMode) -> Result<Vec<V>> {
    let x = a.tensor(0)?;
    let dims = cx.dims(x);
    let maps = pad_maps(cx, &dims, a.ints(1)?, n, mode)?;
    if cx.dtype(x) == DType::Bool {
        bail_op!(&*cx.op, "\"{}_pad{n}d\" not implemented for '{}'", mode.name(), DType::Bool);
    }
    let r = dims.len();
    let mut y = x;
    for (k, map) in maps.iter().enumerate() {
        y = take(cx, y, r - n + k, map);
    }
    Ok(vec![y])
}

fn pad_backward(cx: &mut Cx, a: &Args, n: usize, mode: PadMode) -> Result<Vec<V>> {
    let (g, x) = (a.tensor(0)?, a.tensor(1)?);
    let dims = cx.dims(x);
    let maps = pad_maps(cx, &dims, a.ints(2)?, n, mode)?;
    let r = dims.len();
    let mut want = dims.clone();
    for (k, map) in maps.iter().enumerate() {
        want[r - n + k] = map.len() as i64;
    }
    if cx.dims(g) != want {
        bail_op!(
            &*cx.op,
            "grad_output of size {} does not match the padded input size {}",
            fmt(&cx.dims(g)),
            fmt(&want)
        );
    }
    let d = require_float(cx, g, &format!("{}_pad{n}d_backward", mode.name()))?;
    let mut y = up(cx, g);
    for (k, map) in maps.iter().enumerate().rev() {
        y = put_add(cx, y, r - n + k, map, dims[r - n + k]);
    }
    Ok(vec![cx.f.convert(y, d)])
}

fn register_padding(r: &mut Registry) {
    for mode in [PadMode::Reflect, PadMode::Replicate] {
        for n in 1..=3usize {
            let name = format!("{}_pad{n}d", mode.name());
            r.op(&format!("aten::{name}(Tensor self, SymInt[{}] padding) -> Tensor", 2 * n), move |cx, a| {
                pad_forward(cx, a, n, mode)
            });
            r.op(
                &format!(
                    "aten::{name}_backward(Tensor grad_output, Tensor self, SymInt[{}] padding) -> Tensor",
                    2 * n
                ),
                move |cx, a| pad_backward(cx, a, n, mode),
            );
        }
    }
}

// --------------------------------------------------------------- upsampling

/// PyTorch's `compute_scales_value`: the input step per output step.
fn scale_value(scale: Option<f64>, input: i64, output: i64) -> f64 {
    match scale {
        Some(s) if s > 0.0 => 1.0 / s,
        _ => input as f64 / output as f64,
    }
}

/// Rounds to f32 unless the op computes in f64 (PyTorch's opmath of the
/// input), so host arithmetic matches the CPU kernels bit for bit.
fn opm(v: f64, wide: bool) -> f64 {
    if wide {
        v
    } else {
        v as f32 as f64
    }
}

/// PyTorch's `nearest_idx` for every output position.
fn nearest_map(input: i64, output: i64, scale: Option<f64>) -> Vec<i64> {
    (0..output)
        .map(|j| {
            if output == input {
                j
            } else if output == 2 * input {
                j >> 1
            } else {
                let s = scale_value(scale, input, output) as f32;
                (((j as f32) * s).floor() as i64).min(input - 1)
            }
        })
        .collect()
}

/// Linear interpolation along one dim: for every output position, the two
/// source positions and their weights (`compute_source_index_and_lambda`).
struct Linear {
    i0: Vec<i64>,
    i1: Vec<i64>,
    w0: Vec<f64>,
    w1: Vec<f64>,
}

fn linear_map(input: i64, output: i64, align_corners: bool, scale: Option<f64>, wide: bool) -> Linear {
    let mut m = Linear { i0: Vec::new(), i1: Vec::new(), w0: Vec::new(), w1: Vec::new() };
    let ratio = if align_corners {
        if output > 1 {
            opm((input - 1) as f64 / (output - 1) as f64, wide)
        } else {
            0.0
        }
    } else {
        opm(scale_value(scale, input, output), wide)
    };
    for j in 0..output {
        if input == output {
            m.i0.push(j);
            m.i1.push(j);
            m.w0.push(1.0);
            m.w1.push(0.0);
            continue;
        }
        let src = if align_corners {
            opm(ratio * j as f64, wide)
        } else {
            let s = opm(ratio * opm(j as f64 + 0.5, wide), wide);
            let s = opm(s - 0.5, wide);
            s.max(0.0)
        };
        let i0 = (src.floor() as i64).min(input - 1);
        let l1 = opm(src - i0 as f64, wide).clamp(0.0, 1.0);
        m.i0.push(i0);
        m.i1.push(if i0 < input - 1 { i0 + 1 } else { i0 });
        m.w0.push(opm(1.0 - l1, wide));
        m.w1.push(l1);
    }
    m
}

/// The checked geometry of a 2-d upsampling call: input `[N, C, H, W]` and
/// the output `[H, W]`.
fn upsample_check(cx: &Cx, input: &[i64], out: [i64; 2]) -> Result<()> {
    if input.len() != 4 {
        bail_op!(&*cx.op, "It is expected input_size equals to 4, but got size {}", input.len());
    }
    if input[2] <= 0 || input[3] <= 0 || out[0] <= 0 || out[1] <= 0 {
        bail_op!(
            &*cx.op,
            "Input and output sizes should be greater than 0, but got input (H: {}, W: {}) output (H: {}, W: {})",
            input[2],
            input[3],
            out[0],
            out[1]
        );
    }
    if shape::numel(input) == 0 && input[1] == 0 {
        bail_op!(&*cx.op, "Non-empty 4D data tensor expected but got a tensor with sizes {}", fmt(input));
    }
    Ok(())
}

/// Checks a backward call's `grad_output` against the forward output shape.
fn check_grad(cx: &Cx, g: V, input: &[i64], out: [i64; 2]) -> Result<()> {
    let want = [input[0], input[1], out[0], out[1]];
    let gd = cx.dims(g);
    if gd.len() != 4 {
        bail_op!(&*cx.op, "Expected grad_output to be a tensor of dimension 4 but got: dimension {}", gd.len());
    }
    for i in 0..4 {
        if gd[i] != want[i] {
            bail_op!(
                &*cx.op,
                "Expected grad_output to have the same shape as output; output.size({i}) = {} but got \
                 grad_output.size({i}) = {}",
                want[i],
                gd[i]
            );
        }
    }
    Ok(())
}

/// The `SymInt[4] input_size` of a backward call.
fn input_size(cx: &Cx, a: &Args, i: usize) -> Result<Vec<i64>> {
    let v = a.ints(i)?;
    if v.len() != 4 {
        bail_op!(&*cx.op, "It is expected input_size equals to 4, but got size {}", v.len());
    }
    Ok(v.to_vec())
}

fn register_upsample(r: &mut Registry) {
    r.op(
        "aten::upsample_nearest2d(Tensor self, SymInt[2] output_size, float? scales_h=None, float? scales_w=None) \
         -> Tensor",
        |cx, a| {
            let x = a.tensor(0)?;
            let dims = cx.dims(x);
            let out = two(cx, a, 1, "output_size")?;
            upsample_check(cx, &dims, out)?;
            require_float(cx, x, "upsample_nearest2d_channels_last")?;
            let scales = [a.opt_float(2), a.opt_float(3)];
            let mut y = x;
            for k in 0..2 {
                y = take(cx, y, 2 + k, &nearest_map(dims[2 + k], out[k], scales[k]));
            }
            Ok(vec![y])
        },
    );
    r.op(
        "aten::upsample_nearest2d_backward(Tensor grad_output, SymInt[2] output_size, SymInt[4] input_size, \
         float? scales_h=None, float? scales_w=None) -> Tensor",
        |cx, a| {
            let g = a.tensor(0)?;
            let out = two(cx, a, 1, "output_size")?;
            let dims = input_size(cx, a, 2)?;
            upsample_check(cx, &dims, out)?;
            check_grad(cx, g, &dims, out)?;
            let d = require_float(cx, g, "upsample_nearest2d_backward_out_frame")?;
            let scales = [a.opt_float(3), a.opt_float(4)];
            let mut y = up(cx, g);
            for k in (0..2).rev() {
                y = put_add(cx, y, 2 + k, &nearest_map(dims[2 + k], out[k], scales[k]), dims[2 + k]);
            }
            Ok(vec![cx.f.convert(y, d)])
        },
    );
    r.op(
        "aten::upsample_bilinear2d(Tensor self, SymInt[2] output_size, bool align_corners, float? scales_h=None, \
         float? scales_w=None) -> Tensor",
        |cx, a| {
            let x = a.tensor(0)?;
            let dims = cx.dims(x);
            let out = two(cx, a, 1, "output_size")?;
            upsample_check(cx, &dims, out)?;
            let d = require_float(cx, x, "upsample_bilinear2d_channels_last")?;
            let (align, scales) = (a.bool(2)?, [a.opt_float(3), a.opt_float(4)]);
            let mut y = up(cx, x);
            for k in 0..2 {
                let m = linear_map(dims[2 + k], out[k], align, scales[k], d == DType::F64);
                let y0 = take(cx, y, 2 + k, &m.i0);
                let y0 = scale_along(cx, y0, 2 + k, &m.w0);
                let y1 = take(cx, y, 2 + k, &m.i1);
                let y1 = scale_along(cx, y1, 2 + k, &m.w1);
                y = cx.f.add(y0, y1);
            }
            Ok(vec![cx.f.convert(y, d)])
        },
    );
    r.op(
        "aten::upsample_bilinear2d_backward(Tensor grad_output, SymInt[2] output_size, SymInt[4] input_size, \
         bool align_corners, float? scales_h=None, float? scales_w=None) -> Tensor",
        |cx, a| {
            let g = a.tensor(0)?;
            let out = two(cx, a, 1, "output_size")?;
            let dims = input_size(cx, a, 2)?;
            upsample_check(cx, &dims, out)?;
            check_grad(cx, g, &dims, out)?;
            let d = require_float(cx, g, "upsample_bilinear2d_backward_out_frame")?;
            let (align, scales) = (a.bool(3)?, [a.opt_float(4), a.opt_float(5)]);
            let mut y = up(cx, g);
            for k in (0..2).rev() {
                let m = linear_map(dims[2 + k], out[k], align, scales[k], d == DType::F64);
                let y0 = scale_along(cx, y, 2 + k, &m.w0);
                let y0 = put_add(cx, y0, 2 + k, &m.i0, dims[2 + k]);
                let y1 = scale_along(cx, y, 2 + k, &m.w1);
                let y1 = put_add(cx, y1, 2 + k, &m.i1, dims[2 + k]);
                y = cx.f.add(y0, y1);
            }
            Ok(vec![cx.f.convert(y, d)])
        },
    );
}
