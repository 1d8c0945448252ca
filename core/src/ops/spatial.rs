//! Spatial ops: reflection / replication padding, nearest, nearest-exact
//! and (bi/tri)linear upsampling in 1, 2 and 3 dims and bicubic in 2 (with
//! their backward kernels), `im2col` / `col2im`, `grid_sampler_2d` and `_embedding_bag`
//! (the distances are in [`super::distance`]).
//!
//! Where the source positions depend only on shapes (padding, upsampling),
//! PyTorch's index and weight arithmetic runs on the host, in the same
//! precision as its CPU kernels, and the program gathers with the resulting
//! constants; the backward kernels scatter-add through the same maps.
//! Half-precision inputs compute in f32 and round once.

use crate::bail_op;
use crate::dtype::DType;
use crate::error::Result;
use crate::hlo::{Cmp, Elem, Func, Reducer, Ty, V};
use crate::shape::{self, fmt};

use super::common::up;
use super::{Args, Cx, Builder};

pub fn register(r: &mut Builder) {
    register_padding(r);
    register_upsample(r);
    register_blocks(r);
    // `_forward_only` is what nn.EmbeddingBag calls when no gradient is
    // needed: the same results.
    for name in ["_embedding_bag", "_embedding_bag_forward_only"] {
        r.op(
            &format!(
                "aten::{name}(Tensor weight, Tensor indices, Tensor offsets, bool scale_grad_by_freq=False, \
                 int mode=0, bool sparse=False, Tensor? per_sample_weights=None, bool include_last_offset=False, \
                 int padding_idx=-1) -> (Tensor, Tensor, Tensor, Tensor)"
            ),
            embedding_bag,
        );
    }
    r.op(
        "aten::grid_sampler_2d(Tensor input, Tensor grid, int interpolation_mode, int padding_mode, bool align_corners) \
         -> Tensor",
        grid_sampler_2d,
    );
}

// ------------------------------------------------------------------ helpers

/// `x` indexed along `dim` by host-known indices (`index_select` with
/// constant indices).
pub(super) fn take(cx: &mut Cx, x: V, dim: usize, idx: &[i64]) -> V {
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
    let wv = cx.f.const_floats(elem, w);
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

fn register_padding(r: &mut Builder) {
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

/// The input step per output step of an interpolating upsampling
/// (`area_pixel_compute_scale`).
fn interp_ratio(input: i64, output: i64, align_corners: bool, scale: Option<f64>, wide: bool) -> f64 {
    if align_corners {
        if output > 1 {
            opm((input - 1) as f64 / (output - 1) as f64, wide)
        } else {
            0.0
        }
    } else {
        opm(scale_value(scale, input, output), wide)
    }
}

/// The source coordinate of output position `j`
/// (`area_pixel_compute_source_index` before its clamp at 0).
fn interp_source(ratio: f64, j: i64, align_corners: bool, wide: bool) -> f64 {
    if align_corners {
        opm(ratio * j as f64, wide)
    } else {
        let s = opm(ratio * opm(j as f64 + 0.5, wide), wide);
        opm(s - 0.5, wide)
    }
}

/// An interpolation along one dim as taps: for tap `t` and output position
/// `j`, the source position `idx[t][j]` and its weight `w[t][j]`.
struct Taps {
    idx: Vec<Vec<i64>>,
    w: Vec<Vec<f64>>,
}

impl Taps {
    fn new(taps: usize) -> Taps {
        Taps { idx: vec![Vec::new(); taps], w: vec![Vec::new(); taps] }
    }

    /// The interpolated value: the sum over taps of the gathered sources
    /// times their weights.
    fn apply(&self, cx: &mut Cx, y: V, dim: usize) -> V {
        let mut acc: Option<V> = None;
        for (idx, w) in self.idx.iter().zip(&self.w) {
            let yt = take(cx, y, dim, idx);
            let yt = scale_along(cx, yt, dim, w);
            acc = Some(match acc {
                Some(a) => cx.f.add(a, yt),
                None => yt,
            });
        }
        acc.expect("at least one tap")
    }

    /// The adjoint of [`Taps::apply`]: each output's gradient, weighted,
    /// added back into its sources (`input` positions).
    fn adjoint(&self, cx: &mut Cx, g: V, dim: usize, input: i64) -> V {
        let mut acc: Option<V> = None;
        for (idx, w) in self.idx.iter().zip(&self.w) {
            let gt = scale_along(cx, g, dim, w);
            let gt = put_add(cx, gt, dim, idx, input);
            acc = Some(match acc {
                Some(a) => cx.f.add(a, gt),
                None => gt,
            });
        }
        acc.expect("at least one tap")
    }
}

/// Linear interpolation along one dim: for every output position, the two
/// source positions and their weights (`compute_source_index_and_lambda`).
fn linear_map(input: i64, output: i64, align_corners: bool, scale: Option<f64>, wide: bool) -> Taps {
    let mut m = Taps::new(2);
    let ratio = interp_ratio(input, output, align_corners, scale, wide);
    for j in 0..output {
        let (i0, i1, w0, w1) = if input == output {
            (j, j, 1.0, 0.0)
        } else {
            let src = interp_source(ratio, j, align_corners, wide);
            let src = if align_corners { src } else { src.max(0.0) };
            let i0 = (src.floor() as i64).min(input - 1);
            let l1 = opm(src - i0 as f64, wide).clamp(0.0, 1.0);
            (i0, if i0 < input - 1 { i0 + 1 } else { i0 }, opm(1.0 - l1, wide), l1)
        };
        m.idx[0].push(i0);
        m.idx[1].push(i1);
        m.w[0].push(w0);
        m.w[1].push(w1);
    }
    m
}

/// Keys' cubic convolution kernel with parameter `a` at distance `x`.
fn keys_cubic(a: f64, x: f64) -> f64 {
    let x = x.abs();
    if x <= 1.0 {
        ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
    } else if x < 2.0 {
        ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a
    } else {
        0.0
    }
}

/// Bicubic interpolation along one dim (Keys' kernel, a = -0.75, as
/// PyTorch's `upsample_bicubic2d`): for every output position, four source
/// positions `floor(src) - 1 .. floor(src) + 2` clamped to the input, and
/// their weights. Unlike the linear map, the source is not clamped at 0.
fn cubic_map(input: i64, output: i64, align_corners: bool, scale: Option<f64>, wide: bool) -> Taps {
    let mut m = Taps::new(4);
    let ratio = interp_ratio(input, output, align_corners, scale, wide);
    for j in 0..output {
        let src = interp_source(ratio, j, align_corners, wide);
        let i = src.floor();
        let t = opm(src - i, wide);
        let i = i as i64;
        for k in 0..4 {
            m.idx[k].push((i - 1 + k as i64).clamp(0, input - 1));
            m.w[k].push(opm(keys_cubic(-0.75, t + 1.0 - k as f64), wide));
        }
    }
    m
}

/// Anti-aliased interpolation along one dim (`antialias=True`, PyTorch's
/// `_compute_indices_min_size_weights_aa`, after PIL): when shrinking, the
/// filter (triangle for bilinear, Keys' a = -0.5 for bicubic) stretches by
/// the scale, so every source pixel under it contributes; weights are
/// normalized to sum to 1. `support` is the filter's half-width at scale 1.
fn aa_map(input: i64, output: i64, align_corners: bool, scale: Option<f64>, cubic: bool, wide: bool) -> Taps {
    let ratio = interp_ratio(input, output, align_corners, scale, wide);
    let half = if cubic { 2.0 } else { 1.0 };
    let support = opm(if ratio >= 1.0 { half * ratio } else { half }, wide);
    let taps = (support.ceil() as usize) * 2 + 1;
    let invscale = if ratio >= 1.0 { opm(1.0 / ratio, wide) } else { 1.0 };
    let filter = |x: f64| if cubic { keys_cubic(-0.5, x) } else { (1.0 - x.abs()).max(0.0) };
    let mut m = Taps::new(taps);
    for j in 0..output {
        let center = opm(ratio * (j as f64 + 0.5), wide);
        // Truncation toward zero, as the C++ cast does.
        let xmin = ((center - support + 0.5) as i64).max(0);
        let xsize = (((center + support + 0.5) as i64).min(input) - xmin).clamp(0, taps as i64);
        let w: Vec<f64> = (0..xsize).map(|t| opm(filter(opm((t + xmin) as f64 - center + 0.5, wide) * invscale), wide)).collect();
        let total: f64 = w.iter().sum();
        for t in 0..taps {
            let (i, wt) = if (t as i64) < xsize {
                (xmin + t as i64, if total != 0.0 { opm(w[t] / total, wide) } else { w[t] })
            } else {
                (xmin.min(input - 1), 0.0)
            };
            m.idx[t].push(i);
            m.w[t].push(wt);
        }
    }
    m
}

/// The checked geometry of an n-d upsampling call: input `[N, C, *n]` and
/// the output's `n` spatial sizes.
fn upsample_check(cx: &Cx, input: &[i64], out: &[i64]) -> Result<()> {
    let n = out.len();
    if input.len() != n + 2 {
        bail_op!(&*cx.op, "It is expected input_size equals to {}, but got size {}", n + 2, input.len());
    }
    if input[2..].iter().chain(out).any(|&s| s <= 0) {
        bail_op!(
            &*cx.op,
            "Input and output sizes should be greater than 0, but got input {} output {}",
            fmt(&input[2..]),
            fmt(out)
        );
    }
    if shape::numel(input) == 0 && input[1] == 0 {
        bail_op!(&*cx.op, "Non-empty {}D data tensor expected but got a tensor with sizes {}", n + 2, fmt(input));
    }
    Ok(())
}

/// Checks a backward call's `grad_output` against the forward output shape.
fn check_grad(cx: &Cx, g: V, input: &[i64], out: &[i64]) -> Result<()> {
    let mut want = input[..2].to_vec();
    want.extend_from_slice(out);
    let gd = cx.dims(g);
    if gd.len() != want.len() {
        bail_op!(&*cx.op, "Expected grad_output to be a tensor of dimension {} but got: dimension {}", want.len(), gd.len());
    }
    for i in 0..want.len() {
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

/// An `int[n]` size argument (`output_size`, or `input_size` with `n + 2`).
fn sizes(cx: &Cx, a: &Args, i: usize, n: usize, name: &str) -> Result<Vec<i64>> {
    let v = a.ints(i)?;
    if v.len() != n {
        bail_op!(&*cx.op, "It is expected {name} equals to {n}, but got size {}", v.len());
    }
    Ok(v.to_vec())
}

/// PyTorch's `nearest_neighbor_exact_compute_source_index` for every output
/// position: the source pixel whose centre is nearest.
fn nearest_exact_map(input: i64, output: i64, scale: Option<f64>) -> Vec<i64> {
    let s = scale_value(scale, input, output) as f32;
    (0..output).map(|j| ((((j as f32) + 0.5) * s).floor() as i64).min(input - 1)).collect()
}

#[derive(Clone, Copy, PartialEq)]
enum Interp {
    Nearest,
    NearestExact,
    Linear,
    /// Bicubic, 2-d only.
    Cubic,
    /// Anti-aliased bilinear and bicubic, 2-d only.
    LinearAa,
    CubicAa,
}

/// The taps of an interpolating mode along one dim.
fn taps(mode: Interp, input: i64, output: i64, align: bool, scale: Option<f64>, d: DType) -> Taps {
    let wide = d == DType::F64;
    match mode {
        Interp::Linear => linear_map(input, output, align, scale, wide),
        Interp::Cubic => cubic_map(input, output, align, scale, wide),
        Interp::LinearAa => aa_map(input, output, align, scale, false, wide),
        _ => aa_map(input, output, align, scale, true, wide),
    }
}

/// The names of the upsampling ops of `n` spatial dims.
fn upsample_name(mode: Interp, n: usize) -> String {
    match mode {
        Interp::Nearest => format!("upsample_nearest{n}d"),
        Interp::NearestExact => format!("_upsample_nearest_exact{n}d"),
        Interp::Linear => format!("upsample_{}{n}d", ["linear", "bilinear", "trilinear"][n - 1]),
        Interp::Cubic => format!("upsample_bicubic{n}d"),
        Interp::LinearAa => format!("_upsample_bilinear{n}d_aa"),
        Interp::CubicAa => format!("_upsample_bicubic{n}d_aa"),
    }
}

/// The `float? scales...` declarations of `n` spatial dims.
fn scale_decls(n: usize) -> String {
    let names: &[&str] = match n {
        1 => &["scales"],
        2 => &["scales_h", "scales_w"],
        _ => &["scales_d", "scales_h", "scales_w"],
    };
    names.iter().map(|s| format!("float? {s}=None")).collect::<Vec<_>>().join(", ")
}

fn register_upsample(r: &mut Builder) {
    for n in 1..=3usize {
        let two_d: &[Interp] = if n == 2 { &[Interp::Cubic, Interp::LinearAa, Interp::CubicAa] } else { &[] };
        for mode in [Interp::Nearest, Interp::NearestExact, Interp::Linear].into_iter().chain(two_d.iter().copied()) {
            let name = upsample_name(mode, n);
            let interpolates = !matches!(mode, Interp::Nearest | Interp::NearestExact);
            let align = if interpolates { "bool align_corners, " } else { "" };
            // Argument positions after output_size (and input_size).
            let lin = usize::from(interpolates);
            r.op(
                &format!("aten::{name}(Tensor self, SymInt[{n}] output_size, {align}{}) -> Tensor", scale_decls(n)),
                move |cx, a| {
                    let x = a.tensor(0)?;
                    let dims = cx.dims(x);
                    let out = sizes(cx, a, 1, n, "output_size")?;
                    upsample_check(cx, &dims, &out)?;
                    let d = require_float(cx, x, &format!("{}_out_frame", upsample_name(mode, n)))?;
                    let scales: Vec<Option<f64>> = (0..n).map(|k| a.opt_float(2 + lin + k)).collect();
                    let align = interpolates && a.bool(2)?;
                    let mut y = if interpolates { up(cx, x) } else { x };
                    for k in 0..n {
                        let (input, output) = (dims[2 + k], out[k]);
                        y = match mode {
                            Interp::Nearest => take(cx, y, 2 + k, &nearest_map(input, output, scales[k])),
                            Interp::NearestExact => take(cx, y, 2 + k, &nearest_exact_map(input, output, scales[k])),
                            _ => taps(mode, input, output, align, scales[k], d).apply(cx, y, 2 + k),
                        };
                    }
                    Ok(vec![cx.f.convert(y, d)])
                },
            );
            r.op(
                &format!(
                    "aten::{name}_backward(Tensor grad_output, SymInt[{n}] output_size, SymInt[{}] input_size, \
                     {align}{}) -> Tensor",
                    n + 2,
                    scale_decls(n)
                ),
                move |cx, a| {
                    let g = a.tensor(0)?;
                    let out = sizes(cx, a, 1, n, "output_size")?;
                    let dims = sizes(cx, a, 2, n + 2, "input_size")?;
                    upsample_check(cx, &dims, &out)?;
                    check_grad(cx, g, &dims, &out)?;
                    let d = require_float(cx, g, &format!("{}_backward_out_frame", upsample_name(mode, n)))?;
                    let scales: Vec<Option<f64>> = (0..n).map(|k| a.opt_float(3 + lin + k)).collect();
                    let align = interpolates && a.bool(3)?;
                    let mut y = up(cx, g);
                    for k in (0..n).rev() {
                        let (input, output) = (dims[2 + k], out[k]);
                        y = match mode {
                            Interp::Nearest => put_add(cx, y, 2 + k, &nearest_map(input, output, scales[k]), input),
                            Interp::NearestExact => {
                                put_add(cx, y, 2 + k, &nearest_exact_map(input, output, scales[k]), input)
                            }
                            _ => taps(mode, input, output, align, scales[k], d).adjoint(cx, y, 2 + k, input),
                        };
                    }
                    Ok(vec![cx.f.convert(y, d)])
                },
            );
        }
    }
}

// ---------------------------------------------------------- im2col / col2im

/// Checked `im2col` / `col2im` parameters (each `[height, width]`).
struct Blocks {
    kernel: [i64; 2],
    dilation: [i64; 2],
    padding: [i64; 2],
    stride: [i64; 2],
}

impl Blocks {
    fn parse(cx: &Cx, a: &Args, first: usize) -> Result<Blocks> {
        let b = Blocks {
            kernel: two(cx, a, first, "kernel_size")?,
            dilation: two(cx, a, first + 1, "dilation")?,
            padding: two(cx, a, first + 2, "padding")?,
            stride: two(cx, a, first + 3, "stride")?,
        };
        let [k, d, p, s] = [b.kernel, b.dilation, b.padding, b.stride];
        if k[0] <= 0 || k[1] <= 0 {
            bail_op!(&*cx.op, "kernel size should be greater than zero, but got kernel_height: {} kernel_width: {}", k[0], k[1]);
        }
        if s[0] <= 0 || s[1] <= 0 {
            bail_op!(&*cx.op, "stride should be greater than zero, but got stride_height: {} stride_width: {}", s[0], s[1]);
        }
        if d[0] <= 0 || d[1] <= 0 {
            bail_op!(
                &*cx.op,
                "dilation should be greater than zero, but got dilation_height: {} dilation_width: {}",
                d[0],
                d[1]
            );
        }
        if p[0] < 0 || p[1] < 0 {
            bail_op!(&*cx.op, "padding should be non-negative, but got pad_height: {} pad_width: {}", p[0], p[1]);
        }
        Ok(b)
    }

    /// The number of sliding blocks along each dim of a `size` image.
    fn count(&self, size: [i64; 2]) -> [i64; 2] {
        let n = |i: usize| {
            let span = self.dilation[i] * (self.kernel[i] - 1) + 1;
            (size[i] + 2 * self.padding[i] - span).div_euclid(self.stride[i]) + 1
        };
        [n(0), n(1)]
    }

    fn describe(&self) -> String {
        let t = |v: [i64; 2]| format!("({}, {})", v[0], v[1]);
        format!(
            "kernel_size={}, dilation={}, padding={}",
            t(self.kernel),
            t(self.dilation),
            t(self.padding)
        )
    }

    /// The start of kernel offset `k` along dim `i` in the padded image.
    fn start(&self, i: usize, k: i64) -> i64 {
        k * self.dilation[i]
    }
}

fn im2col(cx: &mut Cx, a: &Args) -> Result<Vec<V>> {
    let x = a.tensor(0)?;
    let b = Blocks::parse(cx, a, 1)?;
    let dims = cx.dims(x);
    let batched = dims.len() == 4;
    if !(dims.len() == 3 || batched) || dims[usize::from(batched)..].contains(&0) {
        bail_op!(
            &*cx.op,
            "Expected 3D or 4D (batch mode) tensor with possibly 0 batch size and other non-zero dimensions for \
             input, but got: {}",
            fmt(&dims)
        );
    }
    let d = cx.dtype(x);
    if !(d.is_float() || d == DType::Bool) {
        bail_op!(&*cx.op, "\"im2col_out_cpu\" not implemented for '{d}'");
    }
    let x = if batched { x } else { cx.f.reshape(x, &[&[1], &dims[..]].concat()) };
    let [n, c, h, w] = <[i64; 4]>::try_from(cx.dims(x)).unwrap();
    let o = b.count([h, w]);
    if o[0] < 1 || o[1] < 1 {
        bail_op!(
            &*cx.op,
            "Given input with spatial size ({h}, {w}), {}, calculated shape of the array of sliding blocks as \
             ({}, {}), but its components must be at least one.",
            b.describe(),
            o[0],
            o[1]
        );
    }
    let kk = b.kernel[0] * b.kernel[1];
    let out = [n, c * kk, o[0] * o[1]];
    if n == 0 {
        let y = cx.f.splat(&cx.ty(x).with_dims(&out), 0.0);
        return Ok(vec![if batched { y } else { cx.f.reshape(y, &out[1..]) }]);
    }
    let zero = cx.f.constant(cx.ty(x).elem, 0.0);
    let (p, s) = (b.padding, b.stride);
    let xp = cx.f.pad(x, zero, &[0, 0, p[0], p[1]], &[0, 0, p[0], p[1]], &[0; 4]);
    let mut cols = Vec::with_capacity(kk as usize);
    for ki in 0..b.kernel[0] {
        for kj in 0..b.kernel[1] {
            let (y0, x0) = (b.start(0, ki), b.start(1, kj));
            let sl = cx.f.slice(
                xp,
                &[0, 0, y0, x0],
                &[n, c, y0 + (o[0] - 1) * s[0] + 1, x0 + (o[1] - 1) * s[1] + 1],
                &[1, 1, s[0], s[1]],
            );
            cols.push(cx.f.reshape(sl, &[n, c, 1, o[0], o[1]]));
        }
    }
    let y = cx.f.concatenate(&cols, 2);
    let y = cx.f.reshape(y, &out);
    Ok(vec![if batched { y } else { cx.f.reshape(y, &out[1..]) }])
}

fn col2im(cx: &mut Cx, a: &Args) -> Result<Vec<V>> {
    let x = a.tensor(0)?;
    let size = two(cx, a, 1, "output_size")?;
    let b = Blocks::parse(cx, a, 2)?;
    let dims = cx.dims(x);
    let batched = dims.len() == 3;
    if !(dims.len() == 2 || batched) || dims[usize::from(batched)..].contains(&0) {
        bail_op!(
            &*cx.op,
            "Expected 2D or 3D (batch mode) tensor for input with possibly 0 batch size and non-zero dimensions for \
             input, but got: {}",
            fmt(&dims)
        );
    }
    if size[0] <= 0 || size[1] <= 0 {
        bail_op!(&*cx.op, "output_size should be greater than zero, but got output_height: {} output_width: {}", size[0], size[1]);
    }
    let d = cx.dtype(x);
    if !(d.is_float() || d == DType::Bool) {
        bail_op!(&*cx.op, "\"col2im_out_cpu\" not implemented for '{d}'");
    }
    let x = if batched { x } else { cx.f.reshape(x, &[&[1], &dims[..]].concat()) };
    let [n, ckk, l] = <[i64; 3]>::try_from(cx.dims(x)).unwrap();
    let kk = b.kernel[0] * b.kernel[1];
    if ckk % kk != 0 {
        bail_op!(
            &*cx.op,
            "Expected size of input's dimension 1 to be divisible by the product of kernel_size, but got \
             input.size(1)={ckk} and kernel_size=({}, {}).",
            b.kernel[0],
            b.kernel[1]
        );
    }
    let o = b.count(size);
    let ctx = || {
        format!(
            "Given output_size=({}, {}), {}, stride=({}, {})",
            size[0],
            size[1],
            b.describe(),
            b.stride[0],
            b.stride[1]
        )
    };
    if o[0] < 1 || o[1] < 1 {
        bail_op!(
            &*cx.op,
            "{}, calculated shape of the array of sliding blocks as ({}, {}), but its components must be at least one.",
            ctx(),
            o[0],
            o[1]
        );
    }
    if l != o[0] * o[1] {
        bail_op!(
            &*cx.op,
            "{}, expected size of input's dimension 2 to match the calculated number of sliding blocks {} * {} = {}, \
             but got input.size(2)={l}.",
            ctx(),
            o[0],
            o[1],
            o[0] * o[1]
        );
    }
    let c = ckk / kk;
    let out = [n, c, size[0], size[1]];
    let elem = Elem::from(d.opmath());
    let combine = |f: &mut Func, a: V, b: V| if elem == Elem::Pred { f.or(a, b) } else { f.add(a, b) };
    let (p, s) = (b.padding, b.stride);
    let padded = [size[0] + 2 * p[0], size[1] + 2 * p[1]];
    let mut acc = cx.f.splat(&Ty::new(elem, &[n, c, padded[0], padded[1]]), 0.0);
    if n > 0 {
        let xc = up(cx, x);
        let xc = cx.f.reshape(xc, &[n, c, kk, o[0], o[1]]);
        let zero = cx.f.constant(elem, 0.0);
        for ki in 0..b.kernel[0] {
            for kj in 0..b.kernel[1] {
                let k = ki * b.kernel[1] + kj;
                let sl = cx.f.slice(xc, &[0, 0, k, 0, 0], &[n, c, k + 1, o[0], o[1]], &[1; 5]);
                let sl = cx.f.reshape(sl, &[n, c, o[0], o[1]]);
                // Spread the blocks out by the stride at their kernel offset.
                let (y0, x0) = (b.start(0, ki), b.start(1, kj));
                let hi = [padded[0] - y0 - (o[0] - 1) * s[0] - 1, padded[1] - x0 - (o[1] - 1) * s[1] - 1];
                let spread = cx.f.pad(sl, zero, &[0, 0, y0, x0], &[0, 0, hi[0], hi[1]], &[0, 0, s[0] - 1, s[1] - 1]);
                acc = combine(&mut cx.f, acc, spread);
            }
        }
    }
    let y = cx.f.slice(acc, &[0, 0, p[0], p[1]], &[n, c, p[0] + size[0], p[1] + size[1]], &[1; 4]);
    let y = cx.f.convert(y, d);
    Ok(vec![if batched { y } else { cx.f.reshape(y, &out[1..]) }])
}

fn register_blocks(r: &mut Builder) {
    r.op(
        "aten::im2col(Tensor self, int[2] kernel_size, int[2] dilation, int[2] padding, int[2] stride) -> Tensor",
        im2col,
    );
    r.op(
        "aten::col2im(Tensor self, SymInt[2] output_size, int[2] kernel_size, int[2] dilation, int[2] padding, \
         int[2] stride) -> Tensor",
        col2im,
    );
}

// ------------------------------------------------------------- grid_sampler

/// `x` clipped to `[0, size - 1]`.
fn clip(f: &mut Func, x: V, size: i64) -> V {
    let lo = f.full_like(x, 0.0);
    let hi = f.full_like(x, (size - 1) as f64);
    let x = f.max(x, lo);
    f.min(x, hi)
}

/// PyTorch's `reflect_coordinates`: reflects `x` into
/// `[twice_low / 2, twice_high / 2]`.
fn reflect(f: &mut Func, x: V, twice_low: i64, twice_high: i64) -> V {
    if twice_low == twice_high {
        return f.full_like(x, 0.0);
    }
    let min = f.full_like(x, twice_low as f64 / 2.0);
    let span = f.full_like(x, (twice_high - twice_low) as f64 / 2.0);
    let d = f.sub(x, min);
    let d = f.unary("stablehlo.abs", d);
    let extra = f.binary("stablehlo.remainder", d, span);
    let flips = f.div(d, span);
    let flips = f.unary("stablehlo.floor", flips);
    // Even flips: min + extra; odd: min + span - extra.
    let two = f.full_like(x, 2.0);
    let half = f.div(flips, two);
    let half = f.unary("stablehlo.floor", half);
    let half = f.mul(half, two);
    let even = f.compare(Cmp::Eq, half, flips);
    let fwd = f.add(extra, min);
    let back = f.sub(span, extra);
    let back = f.add(back, min);
    f.select(even, fwd, back)
}

/// `grid_sampler_compute_source_index`: the normalized coordinate `x` in
/// `[-1, 1]` as a pixel position along a dim of `size`, after padding.
fn source_coord(f: &mut Func, x: V, size: i64, padding: i64, align: bool) -> V {
    let one = f.full_like(x, 1.0);
    let xp1 = f.add(x, one);
    let x = if align {
        // ((x + 1) / 2) * (size - 1)
        let two = f.full_like(x, 2.0);
        let h = f.div(xp1, two);
        let s = f.full_like(x, (size - 1) as f64);
        f.mul(h, s)
    } else {
        // ((x + 1) * size - 1) / 2
        let s = f.full_like(x, size as f64);
        let t = f.mul(xp1, s);
        let t = f.sub(t, one);
        let two = f.full_like(x, 2.0);
        f.div(t, two)
    };
    match padding {
        1 => clip(f, x, size),
        2 => {
            let r = if align { reflect(f, x, 0, 2 * (size - 1)) } else { reflect(f, x, -1, 2 * size - 1) };
            clip(f, r, size)
        }
        _ => x,
    }
}

fn grid_sampler_2d(cx: &mut Cx, a: &Args) -> Result<Vec<V>> {
    let (x, grid) = (a.tensor(0)?, a.tensor(1)?);
    let (mode, padding, align) = (a.int(2)?, a.int(3)?, a.bool(4)?);
    let (xd, gd) = (cx.dims(x), cx.dims(grid));
    if xd.len() != 4 || gd.len() != 4 {
        bail_op!(
            &*cx.op,
            "grid_sampler(): expected 4D input and grid with same number of dimensions, but got input with sizes {} \
             and grid with sizes {}",
            fmt(&xd),
            fmt(&gd)
        );
    }
    if xd[0] != gd[0] {
        bail_op!(
            &*cx.op,
            "grid_sampler(): expected grid and input to have same batch size, but got input with sizes {} and grid \
             with sizes {}",
            fmt(&xd),
            fmt(&gd)
        );
    }
    if gd[3] != 2 {
        bail_op!(
            &*cx.op,
            "grid_sampler(): expected grid to have size 2 in last dimension, but got grid with sizes {}",
            fmt(&gd)
        );
    }
    for i in 2..4 {
        if xd[i] == 0 {
            bail_op!(
                &*cx.op,
                "grid_sampler(): expected input to have non-empty spatial dimensions, but input has sizes {} with \
                 dimension {i} being empty",
                fmt(&xd)
            );
        }
    }
    let d = cx.dtype(x);
    if cx.dtype(grid) != d {
        bail_op!(&*cx.op, "expected scalar type {d} but found {}", cx.dtype(grid));
    }
    require_float(cx, x, "grid_sampler_2d_cpu_kernel_impl")?;
    if !(0..=1).contains(&mode) {
        bail_op!(&*cx.op, "interpolation_mode {mode} is not supported (0: bilinear, 1: nearest; bicubic is not implemented)");
    }
    if !(0..=2).contains(&padding) {
        bail_op!(&*cx.op, "padding_mode {padding} is not supported (0: zeros, 1: border, 2: reflection)");
    }
    let [n, c, h, w] = <[i64; 4]>::try_from(xd).unwrap();
    let (ho, wo) = (gd[1], gd[2]);
    let out = [n, c, ho, wo];
    if shape::numel(&out) == 0 {
        return Ok(vec![cx.f.splat(&cx.ty(x).with_dims(&out), 0.0)]);
    }
    let od = d.opmath();
    let g = cx.f.convert(grid, od);
    let pos = [n, ho, wo];
    let coord = |cx: &mut Cx, k: i64| {
        let s = cx.f.slice(g, &[0, 0, 0, k], &[n, ho, wo, k + 1], &[1; 4]);
        cx.f.reshape(s, &pos)
    };
    let (gx, gy) = (coord(cx, 0), coord(cx, 1));
    let ix = source_coord(&mut cx.f, gx, w, padding, align);
    let iy = source_coord(&mut cx.f, gy, h, padding, align);
    // Pixels as [N, H, W, C] rows, gathered at (n, y, x).
    let xc = cx.f.convert(x, od);
    let rows = cx.f.transpose(xc, &[0, 2, 3, 1]);
    let batch = cx.f.iota(&Ty::new(Elem::I64, &pos), 0);
    let batch = cx.f.reshape(batch, &[n, ho, wo, 1]);
    // The value at integral (float) position (px, py), or 0 outside the image.
    let corner = |cx: &mut Cx, px: V, py: V| -> V {
        let f = &mut cx.f;
        let zero = f.full_like(px, 0.0);
        let (wm, hm) = (f.full_like(px, (w - 1) as f64), f.full_like(px, (h - 1) as f64));
        let c1 = f.compare(Cmp::Ge, px, zero);
        let c2 = f.compare(Cmp::Le, px, wm);
        let c3 = f.compare(Cmp::Ge, py, zero);
        let c4 = f.compare(Cmp::Le, py, hm);
        let v = f.and(c1, c2);
        let v = f.and(v, c3);
        let inside = f.and(v, c4);
        let cxp = clip(f, px, w);
        let cyp = clip(f, py, h);
        let xi = f.convert(cxp, Elem::I64);
        let yi = f.convert(cyp, Elem::I64);
        let xi = f.reshape(xi, &[n, ho, wo, 1]);
        let yi = f.reshape(yi, &[n, ho, wo, 1]);
        let idx = f.concatenate(&[batch, yi, xi], 3);
        let vals = f.gather(rows, idx, &[3], &[0, 1, 2], &[0, 1, 2], 3, &[1, 1, 1, c], &[n, ho, wo, c]);
        let inside = f.broadcast_in_dim(inside, &[0, 1, 2], &[n, ho, wo, c]);
        let zeros = f.full_like(vals, 0.0);
        f.select(inside, vals, zeros)
    };
    let y = if mode == 1 {
        let px = cx.f.unary("stablehlo.round_nearest_even", ix);
        let py = cx.f.unary("stablehlo.round_nearest_even", iy);
        corner(cx, px, py)
    } else {
        let x0 = cx.f.unary("stablehlo.floor", ix);
        let y0 = cx.f.unary("stablehlo.floor", iy);
        let one = cx.f.full_like(x0, 1.0);
        let x1 = cx.f.add(x0, one);
        let y1 = cx.f.add(y0, one);
        // Weights as PyTorch forms them: products of distances to the
        // opposite corner.
        let (dx0, dx1) = (cx.f.sub(x1, ix), cx.f.sub(ix, x0));
        let (dy0, dy1) = (cx.f.sub(y1, iy), cx.f.sub(iy, y0));
        let mut acc: Option<V> = None;
        for (px, py, wx, wy) in [(x0, y0, dx0, dy0), (x1, y0, dx1, dy0), (x0, y1, dx0, dy1), (x1, y1, dx1, dy1)] {
            let v = corner(cx, px, py);
            let wgt = cx.f.mul(wx, wy);
            let wgt = cx.f.broadcast_in_dim(wgt, &[0, 1, 2], &[n, ho, wo, c]);
            let t = cx.f.mul(v, wgt);
            acc = Some(match acc {
                Some(s) => cx.f.add(s, t),
                None => t,
            });
        }
        acc.unwrap()
    };
    let y = cx.f.transpose(y, &[0, 3, 1, 2]);
    Ok(vec![cx.f.convert(y, d)])
}

// ------------------------------------------------------------ embedding_bag

/// Checks an `_embedding_bag` index tensor (`indices` or `offsets`).
fn bag_index(cx: &Cx, t: V, arg: usize, name: &str) -> Result<()> {
    let d = cx.dtype(t);
    if !matches!(d, DType::I64 | DType::I32) {
        bail_op!(
            &*cx.op,
            "Expected tensor for argument #{arg} '{name}' to have one of the following scalar types: Long, Int; but \
             got {d} instead (while checking arguments for embedding_bag)"
        );
    }
    if cx.rank(t) != 1 {
        bail_op!(&*cx.op, "{name} has to be a 1D Tensor, but got Tensor of dimension {}", cx.rank(t));
    }
    Ok(())
}

/// `_embedding_bag` on CPU: returns (output, offset2bag, bag_size,
/// max_indices) with PyTorch's shapes, including its quirks: the sum fast
/// path (f32/f16/bf16 weight, no padding_idx) leaves offset2bag empty, sum
/// reports zero bag sizes, mean reports the bag sizes again as max_indices,
/// and the last bag runs to the end of `indices` except in the fast path's
/// sums.
fn embedding_bag(cx: &mut Cx, a: &Args) -> Result<Vec<V>> {
    let (w, idx, off) = (a.tensor(0)?, a.tensor(1)?, a.tensor(2)?);
    let (mode, psw, last, pad) = (a.int(4)?, a.opt_tensor(6), a.bool(7)?, a.int(8)?);
    let wd = cx.dims(w);
    if wd.len() != 2 {
        bail_op!(&*cx.op, "weight has to be a 2D Tensor, but got Tensor of dimension {}", wd.len());
    }
    bag_index(cx, idx, 1, "indices")?;
    bag_index(cx, off, 2, "offsets")?;
    let rows = wd[0];
    cx.check_index(idx, 0..rows, || format!("a weight of {rows} rows"));
    if !(0..=2).contains(&mode) {
        bail_op!(&*cx.op, "`mode` must be sum, mean, or max.");
    }
    let d = require_float(cx, w, "embedding_bag")?;
    let (l, d_emb) = (cx.dims(idx)[0], wd[1]);
    if let Some(p) = psw {
        if mode != 0 {
            bail_op!(&*cx.op, "embedding_bag: per_sample_weights only supported with mode='sum'");
        }
        if cx.dims(p) != [l] {
            bail_op!(
                &*cx.op,
                "expected per_sample_weights to be 1D tensor of size {l} (the size of indices), but got {}",
                fmt(&cx.dims(p))
            );
        }
        if cx.dtype(p) != d {
            bail_op!(&*cx.op, "expected scalar type {d} but found {}", cx.dtype(p));
        }
    }
    let noff = cx.dims(off)[0];
    let nb = noff - i64::from(last);
    if nb < 0 {
        bail_op!(&*cx.op, "include_last_offset: number of offsets should be at least 1");
    }
    let id = if cx.dtype(idx) == DType::I64 || cx.dtype(off) == DType::I64 { DType::I64 } else { DType::I32 };
    let od = d.opmath();
    let fast_sum = mode == 0 && pad < 0 && matches!(d, DType::F32 | DType::F16 | DType::BF16);
    let zeros_i = |cx: &mut Cx, dims: &[i64]| cx.f.splat(&Ty::new(id, dims), 0.0);
    let max_dims: Vec<i64> = if mode == 2 { vec![nb, d_emb] } else { vec![nb] };
    if l == 0 || nb == 0 {
        let out = cx.f.splat(&Ty::new(d, &[nb, d_emb]), 0.0);
        let o2b = zeros_i(cx, &[if fast_sum { 0 } else { l }]);
        let size = zeros_i(cx, &[nb]);
        let mi = zeros_i(cx, &max_dims);
        return Ok(vec![out, o2b, size, mi]);
    }
    let ix = cx.f.convert(idx, Elem::I64);
    // The bag of index i: how many bag starts are <= i, minus one.
    let starts = cx.f.convert(off, Elem::I64);
    let starts = cx.f.slice(starts, &[0], &[nb], &[1]);
    let starts = cx.f.broadcast_in_dim(starts, &[1], &[l, nb]);
    let pos = cx.f.iota(&Ty::new(Elem::I64, &[l, nb]), 0);
    let le = cx.f.compare(Cmp::Le, starts, pos);
    let le = cx.f.convert(le, Elem::I64);
    let zero_i = cx.f.constant(Elem::I64, 0.0);
    let bag = cx.f.reduce(le, zero_i, &[1], Reducer::Add);
    let one_l = cx.f.splat_int(&Ty::new(Elem::I64, &[l]), 1);
    let bag = cx.f.sub(bag, one_l);
    let bag_col = cx.f.reshape(bag, &[l, 1]);
    // Entries equal to padding_idx take no part.
    let valid = if pad >= 0 {
        let p = cx.f.splat_int(&Ty::new(Elem::I64, &[l]), pad);
        cx.f.compare(Cmp::Ne, ix, p)
    } else {
        cx.f.splat(&Ty::new(Elem::Pred, &[l]), 1.0)
    };
    let valid_rows = cx.f.broadcast_in_dim(valid, &[0], &[l, d_emb]);
    let counts = {
        let v = cx.f.convert(valid, Elem::I64);
        let z = cx.f.splat(&Ty::new(Elem::I64, &[nb]), 0.0);
        cx.f.scatter(z, bag_col, v, &[], &[0], &[0], 1, Some(Reducer::Add))
    };
    let wc = cx.f.convert(w, od);
    let ix_col = cx.f.reshape(ix, &[l, 1]);
    let rows = cx.f.gather(wc, ix_col, &[1], &[0], &[0], 1, &[1, d_emb], &[l, d_emb]);
    let out_ty = Ty::new(od, &[nb, d_emb]);
    let nonempty = {
        let z = cx.f.splat(&Ty::new(Elem::I64, &[nb]), 0.0);
        let ne = cx.f.compare(Cmp::Gt, counts, z);
        cx.f.broadcast_in_dim(ne, &[0], &[nb, d_emb])
    };
    let (out, max_idx) = if mode == 2 {
        let neg = cx.f.splat(&Ty::new(od, &[l, d_emb]), f64::NEG_INFINITY);
        let contrib = cx.f.select(valid_rows, rows, neg);
        let init = cx.f.splat(&out_ty, f64::NEG_INFINITY);
        let mx = cx.f.scatter(init, bag_col, contrib, &[1], &[0], &[0], 1, Some(Reducer::Max));
        // The first entry of each bag reaching the max, per feature.
        let bag_clamped = {
            let z = cx.f.full_like(bag_col, 0.0);
            cx.f.max(bag_col, z)
        };
        let back = cx.f.gather(mx, bag_clamped, &[1], &[0], &[0], 1, &[1, d_emb], &[l, d_emb]);
        let eq = cx.f.compare(Cmp::Eq, rows, back);
        let eq = cx.f.and(eq, valid_rows);
        let at = cx.f.iota(&Ty::new(Elem::I64, &[l, d_emb]), 0);
        let none = cx.f.splat_int(&Ty::new(Elem::I64, &[l, d_emb]), l);
        let at = cx.f.select(eq, at, none);
        let init = cx.f.splat_int(&Ty::new(Elem::I64, &[nb, d_emb]), l);
        let first = cx.f.scatter(init, bag_col, at, &[1], &[0], &[0], 1, Some(Reducer::Min));
        // Position l (no entry) reads index 0.
        let pad0 = cx.f.splat_int(&Ty::new(Elem::I64, &[1]), 0);
        let ix_ext = cx.f.concatenate(&[ix, pad0], 0);
        let first = cx.f.reshape(first, &[nb * d_emb, 1]);
        let mi = cx.f.gather(ix_ext, first, &[], &[0], &[0], 1, &[1], &[nb * d_emb]);
        let mi = cx.f.reshape(mi, &[nb, d_emb]);
        let zeros = cx.f.full_like(mx, 0.0);
        let out = cx.f.select(nonempty, mx, zeros);
        (out, cx.f.convert(mi, id))
    } else {
        let mut contrib = rows;
        if let Some(p) = psw {
            let pc = cx.f.convert(p, od);
            let pc = cx.f.broadcast_in_dim(pc, &[0], &[l, d_emb]);
            contrib = cx.f.mul(contrib, pc);
        }
        let zeros = cx.f.full_like(contrib, 0.0);
        let mut keep = valid_rows;
        if last && pad < 0 && matches!(d, DType::F32 | DType::F16 | DType::BF16) {
            // The fast path's sums end the last bag at the last offset
            // (the bag sizes, and so the mean's divisor, still run to the end).
            let end = cx.f.convert(off, Elem::I64);
            let end = cx.f.slice(end, &[nb], &[nb + 1], &[1]);
            let end = cx.f.broadcast_in_dim(end, &[1], &[l, d_emb]);
            let at = cx.f.iota(&Ty::new(Elem::I64, &[l, d_emb]), 0);
            let before = cx.f.compare(Cmp::Lt, at, end);
            keep = cx.f.and(keep, before);
        }
        let contrib = cx.f.select(keep, contrib, zeros);
        let init = cx.f.splat(&out_ty, 0.0);
        let mut out = cx.f.scatter(init, bag_col, contrib, &[1], &[0], &[0], 1, Some(Reducer::Add));
        if mode == 1 {
            let one = cx.f.splat_int(&Ty::new(Elem::I64, &[nb]), 1);
            let n = cx.f.max(counts, one);
            let n = cx.f.convert(n, od);
            let n = cx.f.broadcast_in_dim(n, &[0], &[nb, d_emb]);
            out = cx.f.div(out, n);
        }
        let mi = if mode == 1 { cx.f.convert(counts, id) } else { zeros_i(cx, &[nb]) };
        (out, mi)
    };
    let o2b = if fast_sum { zeros_i(cx, &[0]) } else { cx.f.convert(bag, id) };
    let size = if mode == 0 { zeros_i(cx, &[nb]) } else { cx.f.convert(counts, id) };
    Ok(vec![cx.f.convert(out, d), o2b, size, max_idx])
}
