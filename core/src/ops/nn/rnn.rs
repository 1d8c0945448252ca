//! The fused LSTM and GRU cells that `nn.LSTM`, `nn.GRU` and their cells
//! call on an accelerator (`aten::_thnn_fused_lstm_cell`,
//! `aten::_thnn_fused_gru_cell`) and their backward kernels. The gate
//! matmuls stay outside (the caller's `linear`s); these are the pointwise
//! parts, with PyTorch's gate order and workspace layout:
//!
//! - LSTM: gates `[i, f, g, o]` along dim 1 of `[batch, 4 hidden]`;
//!   `cy = f cx + i g`, `hy = o tanh(cy)`; the workspace holds the
//!   activated gates, `[batch, 4 hidden]`.
//! - GRU: gates `[r, z, n]` of `[batch, 3 hidden]`; `n = tanh(in + b_in +
//!   r (hn + b_hn))`, `hy = n + z (hx - n)`; the workspace holds `[r, z, n,
//!   hx, hn + b_hn]`, `[batch, 5 hidden]`.
//!
//! Half-precision inputs compute in f32 and round once, as CUDA's kernels do.

use crate::bail_op;
use crate::dtype::DType;
use crate::error::Result;
use crate::hlo::{Reducer, V};
use crate::ops::{Args, Builder, Cx};
use crate::shape::fmt;

use super::require_float;

pub(super) fn register(r: &mut Builder) {
    r.op(
        "aten::_thnn_fused_lstm_cell(Tensor input_gates, Tensor hidden_gates, Tensor cx, Tensor? input_bias=None, \
         Tensor? hidden_bias=None) -> (Tensor, Tensor, Tensor)",
        |cx, a| {
            let Cell { gates, d, hidden } = cell_inputs(cx, a, 4, "_thnn_fused_lstm_cell")?;
            let c_prev = cx.f.convert(a.tensor(2)?, d.opmath());
            let [i, f, g, o] = chunks::<4>(cx, gates, hidden);
            let (i, f, o) = (sigmoid(cx, i), sigmoid(cx, f), sigmoid(cx, o));
            let g = cx.f.unary("stablehlo.tanh", g);
            let fc = cx.f.mul(f, c_prev);
            let ig = cx.f.mul(i, g);
            let c = cx.f.add(fc, ig);
            let tc = cx.f.unary("stablehlo.tanh", c);
            let h = cx.f.mul(o, tc);
            let workspace = cx.f.concatenate(&[i, f, g, o], 1);
            Ok(vec![cx.f.convert(h, d), cx.f.convert(c, d), cx.f.convert(workspace, d)])
        },
    );
    r.op(
        "aten::_thnn_fused_lstm_cell_backward_impl(Tensor? grad_hy, Tensor? grad_cy, Tensor cx, Tensor cy, \
         Tensor workspace, bool has_bias) -> (Tensor, Tensor, Tensor)",
        |cx, a| {
            let (gh, gc) = (a.opt_tensor(0), a.opt_tensor(1));
            if gh.is_none() && gc.is_none() {
                // Nothing flows back (PyTorch returns three undefined tensors).
                return Ok(vec![cx.none(), cx.none(), cx.none()]);
            }
            let (c_prev, c, ws) = (a.tensor(2)?, a.tensor(3)?, a.tensor(4)?);
            let d = require_float(cx, c_prev, "_thnn_fused_lstm_cell_backward")?;
            let cd = cx.dims(c_prev);
            let hidden = check_workspace(cx, &cd, &cx.dims(c), &cx.dims(ws), 4)?;
            for (name, g) in [("grad_hy", gh), ("grad_cy", gc)] {
                if let Some(g) = g.filter(|&g| cx.dims(g) != cd) {
                    bail_op!(&*cx.op, "{name} of size {} does not match cx of size {}", fmt(&cx.dims(g)), fmt(&cd));
                }
            }
            let od = d.opmath();
            let zero = |cx: &mut Cx| {
                let z = cx.f.convert(c_prev, od);
                cx.f.full_like(z, 0.0)
            };
            let go = match gh {
                Some(g) => cx.f.convert(g, od),
                None => zero(cx),
            };
            let goc = match gc {
                Some(g) => cx.f.convert(g, od),
                None => zero(cx),
            };
            let (c_prev, c, ws) = (cx.f.convert(c_prev, od), cx.f.convert(c, od), cx.f.convert(ws, od));
            let [i, f, g, o] = chunks::<4>(cx, ws, hidden);
            let f_ = &mut cx.f;
            let one = f_.full_like(c, 1.0);
            // d tanh(cy) and the cell gradient: through hy and from grad_cy.
            let tc = f_.unary("stablehlo.tanh", c);
            let gog = f_.mul(go, tc);
            let tc2 = f_.mul(tc, tc);
            let dtc = f_.sub(one, tc2);
            let goo = f_.mul(go, o);
            let gcx = f_.mul(goo, dtc);
            let gcx = f_.add(gcx, goc);
            let gig = f_.mul(gcx, g);
            let gfg = f_.mul(gcx, c_prev);
            let gcg = f_.mul(gcx, i);
            let grad_cx = f_.mul(gcx, f);
            // Through the activations: sigmoid' = s (1 - s), tanh' = 1 - t^2.
            let dsig = |f_: &mut crate::hlo::Func, grad: V, s: V| {
                let one = f_.full_like(s, 1.0);
                let oms = f_.sub(one, s);
                let ds = f_.mul(oms, s);
                f_.mul(grad, ds)
            };
            let gig = dsig(f_, gig, i);
            let gfg = dsig(f_, gfg, f);
            let gog = dsig(f_, gog, o);
            let g2 = f_.mul(g, g);
            let one_g = f_.full_like(g, 1.0);
            let dg = f_.sub(one_g, g2);
            let gcg = f_.mul(gcg, dg);
            let grad_gates = f_.concatenate(&[gig, gfg, gcg, gog], 1);
            let grad_gates = cx.f.convert(grad_gates, d);
            let grad_bias = if a.bool(5)? { bias_grad(cx, grad_gates) } else { cx.none() };
            Ok(vec![grad_gates, cx.f.convert(grad_cx, d), grad_bias])
        },
    );
    r.op(
        "aten::_thnn_fused_gru_cell(Tensor input_gates, Tensor hidden_gates, Tensor hx, Tensor? input_bias=None, \
         Tensor? hidden_bias=None) -> (Tensor, Tensor)",
        |cx, a| {
            let d = require_float(cx, a.tensor(0)?, "_thnn_fused_gru_cell")?;
            let od = d.opmath();
            let hidden = check_cell(cx, a, 3)?;
            let hx = cx.f.convert(a.tensor(2)?, od);
            let ig = cx.f.convert(a.tensor(0)?, od);
            let hg = cx.f.convert(a.tensor(1)?, od);
            let [ir, iz, inn] = chunks::<3>(cx, ig, hidden);
            let [hr, hz, hn] = chunks::<3>(cx, hg, hidden);
            let (bi, bh) = match (a.opt_tensor(3), a.opt_tensor(4)) {
                (Some(bi), Some(bh)) => {
                    let dims = cx.dims(ig);
                    let bi = broadcast_bias(cx, bi, od, &dims);
                    let bh = broadcast_bias(cx, bh, od, &dims);
                    (Some(chunks::<3>(cx, bi, hidden)), Some(chunks::<3>(cx, bh, hidden)))
                }
                _ => (None, None),
            };
            let plus = |cx: &mut Cx, x: V, b: Option<V>| match b {
                Some(b) => cx.f.add(x, b),
                None => x,
            };
            let pre_r = cx.f.add(ir, hr);
            let pre_r = plus(cx, pre_r, bi.map(|b| b[0]));
            let pre_r = plus(cx, pre_r, bh.map(|b| b[0]));
            let r_ = sigmoid(cx, pre_r);
            let pre_z = cx.f.add(iz, hz);
            let pre_z = plus(cx, pre_z, bi.map(|b| b[1]));
            let pre_z = plus(cx, pre_z, bh.map(|b| b[1]));
            let z = sigmoid(cx, pre_z);
            let hn_b = plus(cx, hn, bh.map(|b| b[2]));
            let in_b = plus(cx, inn, bi.map(|b| b[2]));
            let rh = cx.f.mul(r_, hn_b);
            let pre_n = cx.f.add(in_b, rh);
            let n = cx.f.unary("stablehlo.tanh", pre_n);
            let hmn = cx.f.sub(hx, n);
            let zh = cx.f.mul(z, hmn);
            let h = cx.f.add(n, zh);
            let workspace = cx.f.concatenate(&[r_, z, n, hx, hn_b], 1);
            Ok(vec![cx.f.convert(h, d), cx.f.convert(workspace, d)])
        },
    );
    r.op(
        "aten::_thnn_fused_gru_cell_backward(Tensor grad_hy, Tensor workspace, bool has_bias) \
         -> (Tensor, Tensor, Tensor, Tensor, Tensor)",
        |cx, a| {
            let (go, ws) = (a.tensor(0)?, a.tensor(1)?);
            let d = require_float(cx, go, "_thnn_fused_gru_cell_backward")?;
            let (gd, wd) = (cx.dims(go), cx.dims(ws));
            if gd.len() != 2 || wd.len() != 2 || wd[0] != gd[0] || wd[1] != gd[1].saturating_mul(5) {
                bail_op!(
                    &*cx.op,
                    "expected grad_hy of size [batch, hidden] and workspace of size [batch, 5 * hidden], got {} and {}",
                    fmt(&gd),
                    fmt(&wd)
                );
            }
            let od = d.opmath();
            let (go, ws) = (cx.f.convert(go, od), cx.f.convert(ws, od));
            let [r_, z, n, hx, hn] = chunks::<5>(cx, ws, gd[1]);
            let f_ = &mut cx.f;
            let one = f_.full_like(z, 1.0);
            let omz = f_.sub(one, z);
            // z: go (hx - n) z (1 - z); hx: go z; n: go (1 - z) (1 - n^2).
            let hmn = f_.sub(hx, n);
            let gz = f_.mul(go, hmn);
            let gz = f_.mul(gz, omz);
            let gz = f_.mul(gz, z);
            let ghx = f_.mul(go, z);
            let n2 = f_.mul(n, n);
            let omn2 = f_.sub(one, n2);
            let gn = f_.mul(go, omz);
            let gn = f_.mul(gn, omn2);
            // hn (through r): gn r; r: gn hn r (1 - r).
            let ghn = f_.mul(gn, r_);
            let omr = f_.sub(one, r_);
            let gr = f_.mul(gn, hn);
            let gr = f_.mul(gr, omr);
            let gr = f_.mul(gr, r_);
            let grad_input = f_.concatenate(&[gr, gz, gn], 1);
            let grad_hidden = f_.concatenate(&[gr, gz, ghn], 1);
            let grad_input = cx.f.convert(grad_input, d);
            let grad_hidden = cx.f.convert(grad_hidden, d);
            let (bi, bh) = if a.bool(2)? {
                (bias_grad(cx, grad_input), bias_grad(cx, grad_hidden))
            } else {
                (cx.none(), cx.none())
            };
            Ok(vec![grad_input, grad_hidden, cx.f.convert(ghx, d), bi, bh])
        },
    );
}

/// An LSTM cell's gates, summed with both biases in opmath, and their dtype
/// and hidden size.
struct Cell {
    gates: V,
    d: DType,
    hidden: i64,
}

fn cell_inputs(cx: &mut Cx, a: &Args, factor: i64, what: &str) -> Result<Cell> {
    let d = require_float(cx, a.tensor(0)?, what)?;
    let hidden = check_cell(cx, a, factor)?;
    let od = d.opmath();
    let ig = cx.f.convert(a.tensor(0)?, od);
    let hg = cx.f.convert(a.tensor(1)?, od);
    let mut gates = cx.f.add(ig, hg);
    if let (Some(bi), Some(bh)) = (a.opt_tensor(3), a.opt_tensor(4)) {
        let dims = cx.dims(gates);
        let bi = broadcast_bias(cx, bi, od, &dims);
        let bh = broadcast_bias(cx, bh, od, &dims);
        gates = cx.f.add(gates, bi);
        gates = cx.f.add(gates, bh);
    }
    Ok(Cell { gates, d, hidden })
}

/// PyTorch's size checks of a fused cell (`factor` gates): 2-D gates of one
/// size, 1-D biases of the gates' width (both or neither), and a previous
/// state of `[batch, width / factor]`. Returns the hidden size.
fn check_cell(cx: &Cx, a: &Args, factor: i64) -> Result<i64> {
    let (ig, hg, prev) = (cx.dims(a.tensor(0)?), cx.dims(a.tensor(1)?), cx.dims(a.tensor(2)?));
    if ig.len() != 2 || ig != hg {
        bail_op!(&*cx.op, "expected input_gates and hidden_gates of one 2-D size, got {} and {}", fmt(&ig), fmt(&hg));
    }
    if ig[1] % factor != 0 {
        bail_op!(&*cx.op, "gate width {} is not a multiple of the {factor} gates", ig[1]);
    }
    let hidden = ig[1] / factor;
    match (a.opt_tensor(3), a.opt_tensor(4)) {
        (None, None) => {}
        (Some(bi), Some(bh)) => {
            let (bd, hd) = (cx.dims(bi), cx.dims(bh));
            if bd.len() != 1 || bd[0] != ig[1] || bd != hd {
                bail_op!(
                    &*cx.op,
                    "expected input_bias and hidden_bias of size [{}], got {} and {}",
                    ig[1],
                    fmt(&bd),
                    fmt(&hd)
                );
            }
        }
        _ => bail_op!(&*cx.op, "input_bias and hidden_bias must both be given or both be None"),
    }
    if prev.len() != 2 || prev[0] != ig[0] || prev[1] != hidden {
        bail_op!(&*cx.op, "expected a previous state of size [{}, {hidden}], got {}", ig[0], fmt(&prev));
    }
    Ok(hidden)
}

/// Checks an LSTM backward's `cx`, `cy` and workspace sizes; the hidden size.
fn check_workspace(cx: &Cx, c_prev: &[i64], c: &[i64], ws: &[i64], factor: i64) -> Result<i64> {
    if c_prev.len() != 2 || c != c_prev || ws.len() != 2 || ws[0] != c_prev[0] || ws[1] != c_prev[1].saturating_mul(factor) {
        bail_op!(
            &*cx.op,
            "expected cx and cy of size [batch, hidden] and a workspace of size [batch, {factor} * hidden], got {}, {} \
             and {}",
            fmt(c_prev),
            fmt(c),
            fmt(ws)
        );
    }
    Ok(c_prev[1])
}

fn broadcast_bias(cx: &mut Cx, b: V, od: DType, dims: &[i64]) -> V {
    let b = cx.f.convert(b, od);
    cx.f.broadcast_in_dim(b, &[1], dims)
}

fn sigmoid(cx: &mut Cx, x: V) -> V {
    cx.f.unary("stablehlo.logistic", x)
}

/// The `N` gate blocks of `[batch, N hidden]` along dim 1.
fn chunks<const N: usize>(cx: &mut Cx, x: V, hidden: i64) -> [V; N] {
    std::array::from_fn(|k| cx.f.slice_dim(x, 1, k as i64 * hidden, (k as i64 + 1) * hidden, 1))
}

/// A bias gradient: the gate gradient summed over the batch, in its dtype's
/// opmath and rounded once.
fn bias_grad(cx: &mut Cx, g: V) -> V {
    let d = cx.dtype(g);
    let gc = cx.f.convert(g, d.opmath());
    let zero = cx.f.constant(cx.ty(gc).elem, 0.0);
    let s = cx.f.reduce(gc, zero, &[0], Reducer::Add);
    cx.f.convert(s, d)
}
