//! Fused eager (`DEFER_AND_FUSE`) against strict eager (`DEFER_NEVER`), side
//! by side in one run:
//!
//! 1. A 4-layer MLP training step: forward, softmax cross-entropy, backward
//!    written as aten ops, and an in-place SGD update with a runtime learning
//!    rate.
//! 2. A transformer block forward pass: layer norm, multi-head attention,
//!    residual, layer norm, GELU MLP, residual.
//! 3. Process startup to the first result of one MLP step, cold (empty
//!    `TORCHTPU_CACHE_DIR`) and then warm (same directory), each in a fresh
//!    child process (this program re-run with `--first-result-only`).
//!
//! For 1 and 2 it prints, per mode, the median time per step, the peak device
//! bytes during the timed steps and the number of compiles, plus the
//! strict/fused speedup. Before timing, the MLP's backward is checked against
//! finite differences of an independent f64 host model, and fused results are
//! checked against strict ones (max abs difference).
//!
//! Until fused mode is available, its column reads "unavailable (<error>)"
//! and everything else still runs in strict mode.
//!
//! Run: `cargo run --release -p torchtpu-bench --bin fused`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use torchtpu_core::runtime::{set_thread_mode, ExecMode};
use torchtpu_core::{DType, Result, Runtime, RuntimeOptions, Scalar, Tensor, Value};

/// Timed rounds per measurement; the reported time is their median.
const ROUNDS: usize = 9;
/// Steps per round. Each round ends with one `synchronize`, so strict mode
/// keeps its asynchronous pipelining within a round.
const STEPS_PER_ROUND: usize = 5;
/// Untimed rounds first, shaped like the timed ones, so that every program
/// the timed rounds need (per op, per step or per round, whatever the fusion
/// policy cuts) is compiled before the clock starts.
const WARMUP_ROUNDS: usize = 2;
/// SGD learning rate, passed as a runtime scalar.
const LR: f64 = 0.01;
/// The child-process flag of the startup measurement.
const CHILD_FLAG: &str = "--first-result-only";

/// Narrow and long: memory traffic and per-op work dominate, which is what
/// fusion removes.
const MLP: MlpSizes = MlpSizes { batch: 65536, dims: [32, 32, 32, 32, 10] };
/// Wide: the step is bound by the matrix products (the same in both modes),
/// shown for contrast.
const MLP_WIDE: MlpSizes = MlpSizes { batch: 256, dims: [784, 1024, 1024, 1024, 10] };
/// Small enough for finite differences on the host.
const MLP_TINY: MlpSizes = MlpSizes { batch: 4, dims: [6, 5, 4, 4, 3] };
const BLOCK: BlockSizes = BlockSizes { batch: 32, seq: 256, dim: 64, heads: 2, hidden: 256 };
const BLOCK_TINY: BlockSizes = BlockSizes { batch: 2, seq: 5, dim: 8, heads: 2, hidden: 16 };

// ------------------------------------------------------------------ data

/// Deterministic values uniform in `[-scale, scale)`.
fn pseudo_random(n: usize, seed: u64, scale: f64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            // xorshift64*
            s ^= s >> 12;
            s ^= s << 25;
            s ^= s >> 27;
            let u = (s.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64;
            ((2.0 * u - 1.0) * scale) as f32
        })
        .collect()
}

fn upload(rt: &Runtime, data: &[f32], sizes: &[i64]) -> Result<Tensor> {
    let bytes: Vec<u8> = data.iter().flat_map(|x| x.to_ne_bytes()).collect();
    rt.tensor_from_host(&bytes, DType::F32, sizes, 0)
}

fn download(rt: &Arc<Runtime>, t: &Tensor) -> Result<Vec<f32>> {
    Ok(rt.tensor_to_host(t)?.chunks(4).map(|c| f32::from_ne_bytes(c.try_into().unwrap())).collect())
}

/// A fresh f32 tensor of pseudo-random values.
fn random(rt: &Runtime, sizes: &[usize], seed: u64, scale: f64) -> Result<Tensor> {
    let dims: Vec<i64> = sizes.iter().map(|&s| s as i64).collect();
    upload(rt, &pseudo_random(sizes.iter().product(), seed, scale), &dims)
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(|a, b| a.partial_cmp(b).unwrap());
    xs[xs.len() / 2]
}

const MIB: f64 = 1024.0 * 1024.0;

// ------------------------------------------------------------------- ops

/// The aten ops the workloads use, by their registered names and argument
/// conventions, so the workloads read like the PyTorch code they mirror.
struct Ops<'a>(&'a Arc<Runtime>);

fn float(x: f64) -> Value {
    Value::Scalar(Scalar::Float(x))
}

impl Ops<'_> {
    fn call(&self, op: &str, args: &[Value]) -> Result<Tensor> {
        self.0.call1(op, args)
    }
    fn linear(&self, x: &Tensor, w: &Tensor, b: &Tensor) -> Result<Tensor> {
        self.call("aten::linear", &[x.into(), w.into(), b.into()])
    }
    fn relu(&self, x: &Tensor) -> Result<Tensor> {
        self.call("aten::relu", &[x.into()])
    }
    fn gelu(&self, x: &Tensor) -> Result<Tensor> {
        self.call("aten::gelu", &[x.into(), "none".into()])
    }
    fn t(&self, x: &Tensor) -> Result<Tensor> {
        self.call("aten::t", &[x.into()])
    }
    fn mm(&self, a: &Tensor, b: &Tensor) -> Result<Tensor> {
        self.call("aten::mm", &[a.into(), b.into()])
    }
    fn matmul(&self, a: &Tensor, b: &Tensor) -> Result<Tensor> {
        self.call("aten::matmul", &[a.into(), b.into()])
    }
    fn add(&self, a: &Tensor, b: &Tensor) -> Result<Tensor> {
        self.call("aten::add.Tensor", &[a.into(), b.into()])
    }
    /// `p += alpha * g`, in place.
    fn add_(&self, p: &Tensor, g: &Tensor, alpha: f64) -> Result<Tensor> {
        self.call("aten::add_.Tensor", &[p.into(), g.into(), float(alpha)])
    }
    fn mul_scalar(&self, x: &Tensor, s: f64) -> Result<Tensor> {
        self.call("aten::mul.Scalar", &[x.into(), float(s)])
    }
    /// Sum over the batch dimension (a bias gradient).
    fn sum_rows(&self, x: &Tensor) -> Result<Tensor> {
        self.call("aten::sum.dim_IntList", &[x.into(), vec![0i64].into(), false.into()])
    }
    /// The gradient through a ReLU whose output was `y`.
    fn relu_backward(&self, grad: &Tensor, y: &Tensor) -> Result<Tensor> {
        self.call("aten::threshold_backward", &[grad.into(), y.into(), float(0.0)])
    }
    fn softmax(&self, x: &Tensor, dim: i64) -> Result<Tensor> {
        self.call("aten::_softmax", &[x.into(), dim.into(), false.into()])
    }
    fn log_softmax(&self, x: &Tensor, dim: i64) -> Result<Tensor> {
        self.call("aten::_log_softmax", &[x.into(), dim.into(), false.into()])
    }
    fn log_softmax_backward(&self, grad: &Tensor, out: &Tensor, dim: i64) -> Result<Tensor> {
        self.call("aten::_log_softmax_backward_data", &[grad.into(), out.into(), dim.into(), DType::F32.into()])
    }
    /// Mean negative log-likelihood of `target` (class indices) under `logp`.
    fn nll_loss(&self, logp: &Tensor, target: &Tensor) -> Result<Tensor> {
        const MEAN: i64 = 1;
        let mut out = self.0.call("aten::nll_loss_forward", &[logp.into(), target.into(), Value::None, MEAN.into(), (-100i64).into()])?;
        out.swap_remove(0).into_tensor()
    }
    /// Layer norm over the last dimension.
    fn layer_norm(&self, x: &Tensor, (w, b): &(Tensor, Tensor)) -> Result<Tensor> {
        let d = *x.sizes().last().unwrap();
        let mut out = self.0.call("aten::native_layer_norm", &[x.into(), vec![d].into(), w.into(), b.into(), Value::Double(1e-5)])?;
        out.swap_remove(0).into_tensor()
    }
    fn view(&self, x: &Tensor, sizes: &[i64]) -> Result<Tensor> {
        self.call("aten::view", &[x.into(), sizes.into()])
    }
    fn reshape(&self, x: &Tensor, sizes: &[i64]) -> Result<Tensor> {
        self.call("aten::reshape", &[x.into(), sizes.into()])
    }
    fn transpose(&self, x: &Tensor, a: i64, b: i64) -> Result<Tensor> {
        self.call("aten::transpose.int", &[x.into(), a.into(), b.into()])
    }
    fn permute(&self, x: &Tensor, dims: &[i64]) -> Result<Tensor> {
        self.call("aten::permute", &[x.into(), dims.into()])
    }
}

// ------------------------------------------------------------------- MLP

/// A 4-layer MLP: `dims[0] -> dims[1] -> dims[2] -> dims[3]` with ReLU, then
/// `dims[4]` class logits.
#[derive(Clone, Copy)]
struct MlpSizes {
    batch: usize,
    dims: [usize; 5],
}

/// The MLP's initial parameters and its batch, on the host, so the gradient
/// check can recompute the loss independently.
struct MlpInit {
    sizes: MlpSizes,
    /// `weights[i]` is `[dims[i + 1], dims[i]]` (PyTorch's `Linear` layout).
    weights: Vec<Vec<f32>>,
    biases: Vec<Vec<f32>>,
    x: Vec<f32>,
    labels: Vec<i64>,
}

impl MlpInit {
    fn new(sizes: MlpSizes, seed: u64) -> MlpInit {
        let d = sizes.dims;
        // Variance 1/fan_in keeps activations O(1) through the layers.
        let weights = (0..4).map(|i| pseudo_random(d[i + 1] * d[i], seed + i as u64, (3.0 / d[i] as f64).sqrt())).collect();
        let biases = (0..4).map(|i| pseudo_random(d[i + 1], seed + 10 + i as u64, 0.1)).collect();
        let x = pseudo_random(sizes.batch * d[0], seed + 20, 1.0);
        let labels = (0..sizes.batch).map(|i| ((i * 7 + seed as usize) % d[4]) as i64).collect();
        MlpInit { sizes, weights, biases, x, labels }
    }
}

struct Mlp {
    rt: Arc<Runtime>,
    weights: Vec<Tensor>,
    biases: Vec<Tensor>,
    x: Tensor,
    target: Tensor,
    /// d(mean NLL)/d(log-probs) = -onehot(target) / batch. It does not depend
    /// on the parameters, so it is built once, as `nll_loss_backward` would.
    grad_logp: Tensor,
}

impl Mlp {
    fn new(rt: &Arc<Runtime>, init: &MlpInit) -> Result<Mlp> {
        let (b, d) = (init.sizes.batch, init.sizes.dims);
        let weights = (0..4).map(|i| upload(rt, &init.weights[i], &[d[i + 1] as i64, d[i] as i64])).collect::<Result<_>>()?;
        let biases = (0..4).map(|i| upload(rt, &init.biases[i], &[d[i + 1] as i64])).collect::<Result<_>>()?;
        let label_bytes: Vec<u8> = init.labels.iter().flat_map(|l| l.to_ne_bytes()).collect();
        let mut grad_logp = vec![0f32; b * d[4]];
        for (row, &l) in init.labels.iter().enumerate() {
            grad_logp[row * d[4] + l as usize] = -1.0 / b as f32;
        }
        Ok(Mlp {
            rt: rt.clone(),
            weights,
            biases,
            x: upload(rt, &init.x, &[b as i64, d[0] as i64])?,
            target: rt.tensor_from_host(&label_bytes, DType::I64, &[b as i64], 0)?,
            grad_logp: upload(rt, &grad_logp, &[b as i64, d[4] as i64])?,
        })
    }

    /// Forward and backward: the loss and `(dW, db)` for each layer.
    fn grads(&self) -> Result<(Tensor, Vec<(Tensor, Tensor)>)> {
        let ops = Ops(&self.rt);
        // inputs[i] is the input of layer i: x, then each ReLU output.
        let mut inputs = vec![self.x.clone()];
        for i in 0..3 {
            let z = ops.linear(&inputs[i], &self.weights[i], &self.biases[i])?;
            inputs.push(ops.relu(&z)?);
        }
        let logits = ops.linear(&inputs[3], &self.weights[3], &self.biases[3])?;
        let logp = ops.log_softmax(&logits, 1)?;
        let loss = ops.nll_loss(&logp, &self.target)?;

        let mut grad = ops.log_softmax_backward(&self.grad_logp, &logp, 1)?;
        let mut grads = Vec::with_capacity(4);
        for i in (0..4).rev() {
            grads.push((ops.mm(&ops.t(&grad)?, &inputs[i])?, ops.sum_rows(&grad)?));
            if i > 0 {
                grad = ops.relu_backward(&ops.mm(&grad, &self.weights[i])?, &inputs[i])?;
            }
        }
        grads.reverse();
        Ok((loss, grads))
    }

    /// One SGD step in place; returns the loss before the update.
    fn step(&self, lr: f64) -> Result<Tensor> {
        let ops = Ops(&self.rt);
        let (loss, grads) = self.grads()?;
        for ((w, b), (dw, db)) in self.weights.iter().zip(&self.biases).zip(&grads) {
            ops.add_(w, dw, -lr)?;
            ops.add_(b, db, -lr)?;
        }
        Ok(loss)
    }

    /// The loss of a step and every parameter after it, flattened.
    fn step_results(&self, lr: f64) -> Result<Vec<f32>> {
        let mut out = download(&self.rt, &self.step(lr)?)?;
        for p in self.weights.iter().chain(&self.biases) {
            out.extend(download(&self.rt, p)?);
        }
        Ok(out)
    }
}

/// The MLP's mean cross-entropy on the host in f64, with layer 0's weights
/// and bias replaced by `w0` and `b0`: the independent reference.
fn host_mlp_loss(init: &MlpInit, w0: &[f64], b0: &[f64]) -> f64 {
    let d = init.sizes.dims;
    let widen = |v: &[f32]| v.iter().map(|&x| x as f64).collect::<Vec<f64>>();
    let mut total = 0.0;
    for (row, &label) in init.labels.iter().enumerate() {
        let mut h = widen(&init.x[row * d[0]..(row + 1) * d[0]]);
        for layer in 0..4 {
            let (w, b) = if layer == 0 { (w0.to_vec(), b0.to_vec()) } else { (widen(&init.weights[layer]), widen(&init.biases[layer])) };
            let (n_in, n_out) = (d[layer], d[layer + 1]);
            let z: Vec<f64> = (0..n_out).map(|o| b[o] + (0..n_in).map(|k| w[o * n_in + k] * h[k]).sum::<f64>()).collect();
            h = if layer < 3 { z.iter().map(|&v| v.max(0.0)).collect() } else { z };
        }
        let m = h.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let lse = m + h.iter().map(|v| (v - m).exp()).sum::<f64>().ln();
        total += lse - h[label as usize];
    }
    total / init.labels.len() as f64
}

/// Checks the device loss and first-layer gradients (strict mode) against
/// central differences of [`host_mlp_loss`]. Returns the worst absolute error.
fn check_mlp_gradients(rt: &Arc<Runtime>) -> Result<f64> {
    let init = MlpInit::new(MLP_TINY, 7);
    let mlp = Mlp::new(rt, &init)?;
    let (loss, grads) = mlp.grads()?;
    let device_loss = download(rt, &loss)?[0] as f64;
    let mut device_grad = download(rt, &grads[0].0)?;
    device_grad.extend(download(rt, &grads[0].1)?);

    let nw = init.weights[0].len();
    let theta: Vec<f64> = init.weights[0].iter().chain(&init.biases[0]).map(|&x| x as f64).collect();
    let loss_at = |th: &[f64]| host_mlp_loss(&init, &th[..nw], &th[nw..]);
    let mut worst = (device_loss - loss_at(&theta)).abs();
    let eps = 1e-6;
    for (i, &g) in device_grad.iter().enumerate() {
        let (mut plus, mut minus) = (theta.clone(), theta.clone());
        plus[i] += eps;
        minus[i] -= eps;
        let fd = (loss_at(&plus) - loss_at(&minus)) / (2.0 * eps);
        worst = worst.max((g as f64 - fd).abs());
    }
    Ok(worst)
}

// ------------------------------------------------------- transformer block

#[derive(Clone, Copy)]
struct BlockSizes {
    batch: usize,
    seq: usize,
    dim: usize,
    heads: usize,
    hidden: usize,
}

/// A pre-norm transformer block's input and parameters; weights are
/// `[out, in]`.
struct Block {
    rt: Arc<Runtime>,
    sizes: BlockSizes,
    x: std::cell::RefCell<Tensor>,
    norm1: (Tensor, Tensor),
    norm2: (Tensor, Tensor),
    q: (Tensor, Tensor),
    k: (Tensor, Tensor),
    v: (Tensor, Tensor),
    out: (Tensor, Tensor),
    up: (Tensor, Tensor),
    down: (Tensor, Tensor),
}

impl Block {
    fn new(rt: &Arc<Runtime>, sizes: BlockSizes, seed: u64) -> Result<Block> {
        let (d, h) = (sizes.dim, sizes.hidden);
        let mut seed = seed;
        let mut next = |shape: &[usize], scale: f64| {
            seed += 1;
            random(rt, shape, seed, scale)
        };
        let mut linear = |n_out: usize, n_in: usize| -> Result<(Tensor, Tensor)> {
            Ok((next(&[n_out, n_in], (3.0 / n_in as f64).sqrt())?, next(&[n_out], 0.1)?))
        };
        let (q, k, v, out, up, down) = (linear(d, d)?, linear(d, d)?, linear(d, d)?, linear(d, d)?, linear(h, d)?, linear(d, h)?);
        let ones = upload(rt, &vec![1.0; d], &[d as i64])?;
        let zeros = upload(rt, &vec![0.0; d], &[d as i64])?;
        Ok(Block {
            rt: rt.clone(),
            sizes,
            x: std::cell::RefCell::new(random(rt, &[sizes.batch, sizes.seq, d], seed + 100, 1.0)?),
            norm1: (ones.clone(), zeros.clone()),
            norm2: (ones, zeros),
            q,
            k,
            v,
            out,
            up,
            down,
        })
    }

    /// One benchmark step: the block applied to the previous step's output,
    /// so that steps depend on each other like the layers of a model (equal
    /// independent forwards would be merged by fused mode's value numbering).
    fn step(&self) -> Result<Tensor> {
        let y = self.forward()?;
        *self.x.borrow_mut() = y.clone();
        Ok(y)
    }

    fn forward(&self) -> Result<Tensor> {
        let ops = Ops(&self.rt);
        let BlockSizes { batch, seq, dim, heads, .. } = self.sizes;
        let (b, t, d, nh) = (batch as i64, seq as i64, dim as i64, heads as i64);
        let dh = d / nh;
        let lin = |x: &Tensor, (w, bias): &(Tensor, Tensor)| ops.linear(x, w, bias);
        // [B, T, D] -> [B, T, H, Dh]
        let split = |x: &Tensor| ops.view(x, &[b, t, nh, dh]);

        let x = self.x.borrow().clone();
        let h = ops.layer_norm(&x, &self.norm1)?;
        let q = ops.transpose(&split(&lin(&h, &self.q)?)?, 1, 2)?; // [B, H, T, Dh]
        let k_t = ops.permute(&split(&lin(&h, &self.k)?)?, &[0, 2, 3, 1])?; // [B, H, Dh, T]
        let v = ops.transpose(&split(&lin(&h, &self.v)?)?, 1, 2)?; // [B, H, T, Dh]
        let scores = ops.mul_scalar(&ops.matmul(&q, &k_t)?, 1.0 / (dh as f64).sqrt())?;
        let attn = ops.matmul(&ops.softmax(&scores, -1)?, &v)?; // [B, H, T, Dh]
        let merged = ops.reshape(&ops.transpose(&attn, 1, 2)?, &[b, t, d])?;
        let x1 = ops.add(&x, &lin(&merged, &self.out)?)?;

        let h2 = ops.layer_norm(&x1, &self.norm2)?;
        let mlp = lin(&ops.gelu(&lin(&h2, &self.up)?)?, &self.down)?;
        ops.add(&x1, &mlp)
    }
}

// ------------------------------------------------------------- measuring

/// Runs `f` with this thread in `mode`, then returns the thread to the
/// process mode. `Err` says why the mode could not run it: "unavailable
/// (...)" when the mode cannot be selected, "failed (...)" when `f` failed.
fn in_mode<T>(mode: ExecMode, f: impl FnOnce() -> Result<T>) -> std::result::Result<T, String> {
    set_thread_mode(Some(mode)).map_err(|e| format!("unavailable ({e})"))?;
    let out = f().map_err(|e| format!("failed ({e})"));
    set_thread_mode(None).expect("following the process mode is always allowed");
    out
}

/// One round of steps in one mode.
struct Round {
    secs_per_step: f64,
    /// Peak device bytes during the round (resident tensors included).
    peak_bytes: i64,
    compiles: u64,
}

/// What one workload costs in one mode.
struct Timing {
    /// Median over the timed rounds of the time per step.
    ms_per_step: f64,
    /// Peak device bytes during the timed rounds (resident tensors included).
    peak_bytes: i64,
    /// Compiles during warm-up: everything the workload needs in this mode.
    compiles: u64,
    /// Compiles during the timed rounds; anything but 0 is a recompile storm.
    timed_compiles: u64,
}

/// Times `step` in each of `modes`. Per mode, [`WARMUP_ROUNDS`] rounds first
/// (compiles counted, time not), then [`ROUNDS`] timed rounds, interleaved
/// across modes so that drift in the load of this shared machine hits every
/// mode alike. A round is [`STEPS_PER_ROUND`] steps and one `synchronize`.
/// The op cache is cleared first so that the compile counts do not depend on
/// what ran before; a program that an earlier mode's warm-up already put in
/// a shared cache is not counted again. `Err` says why a mode could not run.
fn measure<const N: usize>(
    rt: &Arc<Runtime>,
    modes: [ExecMode; N],
    step: &dyn Fn() -> Result<Tensor>,
) -> [std::result::Result<Timing, String>; N] {
    let round = || -> Result<Round> {
        let compiles = rt.stats().compiles;
        rt.reset_peak_memory(0)?;
        let start = Instant::now();
        // Each step's result is kept until the round's sync, as a caller
        // that reads it would (fused mode never computes dead values).
        let results = (0..STEPS_PER_ROUND).map(|_| step()).collect::<Result<Vec<Tensor>>>()?;
        rt.synchronize()?;
        drop(results);
        let secs_per_step = start.elapsed().as_secs_f64() / STEPS_PER_ROUND as f64;
        Ok(Round { secs_per_step, peak_bytes: rt.memory(0)?.1, compiles: rt.stats().compiles - compiles })
    };
    rt.clear_cache().expect("clear the caches");
    let mut rounds = modes.map(|m| in_mode(m, || (0..WARMUP_ROUNDS).map(|_| round()).collect::<Result<Vec<Round>>>()));
    for _ in 0..ROUNDS {
        for (&mode, done) in modes.iter().zip(&mut rounds) {
            if let Ok(list) = done {
                match in_mode(mode, round) {
                    Ok(r) => list.push(r),
                    Err(e) => *done = Err(e),
                }
            }
        }
    }
    rounds.map(|done| {
        let list = done?;
        let (warm, timed) = list.split_at(WARMUP_ROUNDS);
        Ok(Timing {
            ms_per_step: median(timed.iter().map(|r| r.secs_per_step).collect()) * 1e3,
            peak_bytes: timed.iter().map(|r| r.peak_bytes).max().unwrap_or(0),
            compiles: warm.iter().map(|r| r.compiles).sum(),
            timed_compiles: timed.iter().map(|r| r.compiles).sum(),
        })
    })
}

/// Runs `results` in strict and in fused mode and returns the max abs
/// difference of what they produced (`Err`: why fused mode could not run).
fn fused_vs_strict(results: impl Fn() -> Result<Vec<f32>>) -> std::result::Result<f32, String> {
    let strict = in_mode(ExecMode::DeferNever, &results).unwrap_or_else(|e| panic!("strict mode {e}"));
    let fused = in_mode(ExecMode::DeferAndFuse, &results)?;
    Ok(max_abs_diff(&strict, &fused))
}

/// Prints the outcome of [`fused_vs_strict`]. Fused programs may reorder
/// floating-point reductions, so tiny differences are expected; larger ones
/// are flagged.
fn print_check(what: &str, diff: std::result::Result<f32, String>) {
    match diff {
        Ok(d) if d <= 1e-4 => println!("check: fused vs strict, {what}: max abs diff {d:.2e}"),
        Ok(d) => println!("check: fused vs strict, {what}: max abs diff {d:.2e}  <-- MISMATCH (over 1e-4)"),
        Err(why) => println!("check: fused vs strict, {what}: fused {why}"),
    }
}

/// One line of the results table.
struct Row {
    workload: String,
    /// Live device bytes before the steps: parameters and inputs.
    resident_bytes: i64,
    strict: std::result::Result<Timing, String>,
    fused: std::result::Result<Timing, String>,
}

/// Measures `step` in both modes.
fn row(rt: &Arc<Runtime>, workload: &str, step: &dyn Fn() -> Result<Tensor>) -> Row {
    let resident_bytes = rt.memory(0).expect("device 0").0;
    let [strict, fused] = measure(rt, [ExecMode::DeferNever, ExecMode::DeferAndFuse], step);
    Row { workload: workload.to_string(), resident_bytes, strict, fused }
}

fn print_table(rows: &[Row]) {
    let line = |cells: [&str; 8], note: &str| {
        let [w, sm, fm, sp, spk, fpk, sc, fc] = cells;
        println!("{w:<20} {sm:>10} {fm:>10} {sp:>8} {spk:>10} {fpk:>10} {sc:>9} {fc:>9}{note}");
    };
    println!();
    line(["workload", "strict ms", "fused ms", "speedup", "peak MiB", "peak MiB", "compiles", "compiles"], "");
    line(["", "/step", "/step", "s/f", "strict", "fused", "strict", "fused"], "");
    let ms = |t: &Timing| format!("{:.2}", t.ms_per_step);
    let mib = |t: &Timing| format!("{:.2}", t.peak_bytes as f64 / MIB);
    let compiles = |t: &Timing| match t.timed_compiles {
        0 => t.compiles.to_string(),
        n => format!("{}+{n}", t.compiles),
    };
    for r in rows {
        let s = r.strict.as_ref().unwrap_or_else(|e| panic!("{}: strict mode {e}", r.workload));
        let (f_ms, speedup, f_peak, f_compiles, note) = match &r.fused {
            Ok(f) => (ms(f), format!("{:.2}x", s.ms_per_step / f.ms_per_step), mib(f), compiles(f), String::new()),
            Err(why) => ("-".into(), "-".into(), "-".into(), "-".into(), format!("   fused: {why}")),
        };
        line([&r.workload, &ms(s), &f_ms, &speedup, &mib(s), &f_peak, &compiles(s), &f_compiles], &note);
    }
    let resident: Vec<String> = rows.iter().map(|r| format!("{} {:.2}", r.workload, r.resident_bytes as f64 / MIB)).collect();
    println!("(peak MiB includes the resident parameters and inputs, MiB: {})", resident.join(", "));
    if rows.iter().flat_map(|r| [&r.strict, &r.fused]).flatten().any(|t| t.timed_compiles > 0) {
        println!("(a+b compiles: a during warm-up, b during the timed rounds, which should be 0)");
    }
}

// --------------------------------------------------------------- startup

/// A fresh directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
        let p = std::env::temp_dir().join(format!("torchtpu-bench-{tag}-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&p).expect("create a temp dir");
        TempDir(p)
    }
    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The child: one MLP step in fused mode (strict when fused is unavailable),
/// timed from process start to the loss on the host. Prints one line of
/// `key=value` fields for the parent.
fn first_result_child(start: Instant) -> Result<()> {
    let rt = Runtime::new(RuntimeOptions::default())?;
    let mode = match set_thread_mode(Some(ExecMode::DeferAndFuse)) {
        Ok(()) => ExecMode::DeferAndFuse,
        Err(_) => ExecMode::DeferNever,
    };
    let mlp = Mlp::new(&rt, &MlpInit::new(MLP, 1))?;
    let loss = download(&rt, &mlp.step(LR)?)?[0];
    let seconds = start.elapsed().as_secs_f64();
    println!("mode={} seconds={seconds:.6} compiles={} loss={loss}", mode.name(), rt.stats().compiles);
    Ok(())
}

/// Runs the child twice on one fresh cache directory: cold, then warm.
fn startup() {
    let exe = std::env::current_exe().expect("current exe");
    let cache = TempDir::new("startup-cache");
    println!("\nstartup to the first result of one MLP step, each in a new process, TORCHTPU_CACHE_DIR={}", cache.path().display());
    println!("{:<6} {:>14} {:>16} {:>9}  mode", "cache", "process (s)", "in process (s)", "compiles");
    for label in ["cold", "warm"] {
        let start = Instant::now();
        let out = Command::new(&exe).arg(CHILD_FLAG).env("TORCHTPU_CACHE_DIR", cache.path()).output().expect("run child");
        let wall = start.elapsed().as_secs_f64();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let line = stdout.lines().find(|l| l.starts_with("mode="));
        let (true, Some(line)) = (out.status.success(), line) else {
            println!("{label:<6} child failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr).trim());
            return;
        };
        let field = |k: &str| line.split_whitespace().find_map(|f| f.strip_prefix(k)?.strip_prefix('=')).unwrap_or("?");
        println!("{label:<6} {wall:>14.3} {:>16} {:>9}  {}", field("seconds"), field("compiles"), field("mode"));
        if label == "warm" && field("mode") != ExecMode::DeferAndFuse.name() {
            println!("(fused mode is unavailable: these are strict-mode numbers; strict mode caches in memory only)");
        }
    }
}

// ------------------------------------------------------------------ main

fn main() {
    let start = Instant::now();
    if std::env::args().any(|a| a == CHILD_FLAG) {
        if let Err(e) = first_result_child(start) {
            eprintln!("{e}");
            std::process::exit(1);
        }
        return;
    }
    // A fresh disk cache, so fused compile counts do not depend on earlier
    // runs. Set before any thread starts.
    let cache = TempDir::new("cache");
    std::env::set_var("TORCHTPU_CACHE_DIR", cache.path());

    let rt = Runtime::new(RuntimeOptions::default()).expect("runtime (run scripts/setup.sh first)");
    println!("torchtpu fused vs strict on PJRT '{}' ({}), {} devices", rt.platform_name(), rt.platform_version(), rt.device_count());
    println!(
        "median of {ROUNDS} rounds x {STEPS_PER_ROUND} steps (synchronize per round, rounds of the two modes interleaved), \
         after {WARMUP_ROUNDS} warm-up rounds per mode"
    );
    for (name, m) in [("mlp", MLP), ("wide mlp", MLP_WIDE)] {
        println!(
            "{name}: batch {}, layers {} -> {} -> {} -> {} -> {} (ReLU, log-softmax + NLL, SGD lr {LR}), f32",
            m.batch, m.dims[0], m.dims[1], m.dims[2], m.dims[3], m.dims[4]
        );
    }
    let b = BLOCK;
    println!(
        "block: x [{}, {}, {}], {} heads of {}, GELU MLP {} -> {} -> {}, f32, forward only",
        b.batch, b.seq, b.dim, b.heads, b.dim / b.heads, b.dim, b.hidden, b.dim
    );

    // Correctness first: the benchmark must time a correct training step.
    let err = in_mode(ExecMode::DeferNever, || check_mlp_gradients(&rt)).expect("gradient check");
    println!("\ncheck: strict MLP loss and layer-0 gradients vs f64 finite differences: max abs error {err:.2e}");
    assert!(err < 1e-4, "the MLP backward is wrong: error {err}");
    let tiny_mlp = || Mlp::new(&rt, &MlpInit::new(MLP_TINY, 3))?.step_results(LR);
    let tiny_block = || download(&rt, &Block::new(&rt, BLOCK_TINY, 3)?.forward()?);
    print_check("tiny mlp step", fused_vs_strict(tiny_mlp));
    print_check("tiny block forward", fused_vs_strict(tiny_block));

    let mut rows = Vec::new();
    {
        let mlp = Mlp::new(&rt, &MlpInit::new(MLP, 1)).expect("mlp");
        rows.push(row(&rt, "mlp train step", &|| mlp.step(LR)));
    }
    {
        let mlp = Mlp::new(&rt, &MlpInit::new(MLP_WIDE, 1)).expect("wide mlp");
        rows.push(row(&rt, "wide mlp train step", &|| mlp.step(LR)));
    }
    {
        let block = Block::new(&rt, BLOCK, 1).expect("block");
        rows.push(row(&rt, "transformer fwd", &|| block.step()));
    }
    // The same checks at the benchmark sizes; every program is cached by now.
    let full_mlp = || Mlp::new(&rt, &MlpInit::new(MLP, 2))?.step_results(LR);
    let full_block = || download(&rt, &Block::new(&rt, BLOCK, 2)?.forward()?);
    if rows.iter().any(|r| r.fused.is_ok()) {
        print_check("benchmark-size mlp step", fused_vs_strict(full_mlp));
        print_check("benchmark-size block forward", fused_vs_strict(full_block));
    }
    print_table(&rows);
    startup();
}
