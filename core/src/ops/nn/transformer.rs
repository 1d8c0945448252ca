//! The fused attention and encoder-layer ops that PyTorch's modules call in
//! inference (`eval()` under `no_grad`) on an accelerator:
//!
//! - `aten::_native_multi_head_attention`: `nn.MultiheadAttention`'s fast
//!   path;
//! - `aten::_transformer_encoder_layer_fwd`: `nn.TransformerEncoderLayer`'s,
//!   one whole layer (attention, residuals, layer norms, feed-forward);
//! - `aten::_masked_softmax`, the softmax they use.
//!
//! Masks follow PyTorch's fast path: a mask says which positions are closed
//! (a bool mask is true there; a float mask, which the modules make from
//! bool ones as 0 / -inf, is closed wherever it is nonzero). A row with
//! every position closed is NaN, as on the CPU.
//! `mask_type` says the mask's layout: 0 a `[L, S]` attention mask, 1 a
//! `[batch, S]` key padding mask, 2 (or none) a mask broadcastable to the
//! scores `[batch, heads, L, S]`.
//!
//! Each op is composed of the same lowerings as its parts (`linear`,
//! `matmul`, `native_layer_norm`, `gelu`), so it rounds where PyTorch's CPU
//! kernels round.

use crate::bail_op;
use crate::dtype::DType;
use crate::error::Result;
use crate::hlo::{Cmp, V};
use crate::ops::elementwise::gelu;
use crate::ops::linalg::{linear, matmul};
use crate::ops::{Args, Builder, Cx};
use crate::shape::fmt;

use super::{layer_norm, require_float, softmax, sum};

pub(super) fn register(r: &mut Builder) {
    r.op(
        "aten::_masked_softmax(Tensor self, Tensor mask, int? dim=None, int? mask_type=None) -> Tensor",
        |cx, a| {
            let x = a.tensor(0)?;
            let d = require_float(cx, x, "_masked_softmax")?;
            let rank = cx.rank(x);
            if rank == 0 {
                bail_op!(&*cx.op, "expected a tensor of at least 1 dimension");
            }
            let dim = crate::shape::wrap_dim(&cx.op, a.opt_int(2).unwrap_or(rank as i64 - 1), rank)?;
            let closed = closed_mask(cx, a.tensor(1)?, a.opt_int(3), &cx.dims(x))?;
            Ok(vec![masked_softmax(cx, x, Some(closed), dim, d)?])
        },
    );
    r.op(
        "aten::_native_multi_head_attention(Tensor query, Tensor key, Tensor value, int embed_dim, int num_head, \
         Tensor qkv_weight, Tensor qkv_bias, Tensor proj_weight, Tensor proj_bias, Tensor? mask=None, \
         bool need_weights=True, bool average_attn_weights=True, int? mask_type=None) -> (Tensor, Tensor)",
        |cx, a| {
            let p = Attention::from_args(cx, a, 3)?;
            let (q, k, v) = (a.tensor(0)?, a.tensor(1)?, a.tensor(2)?);
            let (out, weights) = attention(cx, &p, q, k, v, a.opt_tensor(9), a.opt_int(12), a.bool(10)?)?;
            let weights = match weights {
                Some(w) if a.bool(11)? => {
                    // Averaged over the heads: [batch, L, S].
                    let s = sum(cx, w, &[1]);
                    let n = cx.f.full_like(s, p.heads as f64);
                    cx.f.div(s, n)
                }
                Some(w) => w,
                None => cx.none(),
            };
            Ok(vec![out, weights])
        },
    );
    r.op(
        "aten::_transformer_encoder_layer_fwd(Tensor src, int embed_dim, int num_heads, Tensor qkv_weight, \
         Tensor qkv_bias, Tensor proj_weight, Tensor proj_bias, bool use_gelu, bool norm_first, float eps, \
         Tensor norm_weight_1, Tensor norm_bias_1, Tensor norm_weight_2, Tensor norm_bias_2, Tensor ffn_weight_1, \
         Tensor ffn_bias_1, Tensor ffn_weight_2, Tensor ffn_bias_2, Tensor? mask=None, int? mask_type=None) -> Tensor",
        |cx, a| {
            let src = a.tensor(0)?;
            let p = Attention::from_args(cx, a, 1)?;
            let (use_gelu, norm_first, eps) = (a.bool(7)?, a.bool(8)?, a.float(9)?);
            let (n1, n2) = ((a.tensor(10)?, a.tensor(11)?), (a.tensor(12)?, a.tensor(13)?));
            let (w1, b1, w2, b2) = (a.tensor(14)?, a.tensor(15)?, a.tensor(16)?, a.tensor(17)?);
            if shape_numel(&cx.dims(src)) == 0 {
                return Ok(vec![src]);
            }
            let e = [p.embed];
            let norm = |cx: &mut Cx, x: V, (w, b): (V, V)| -> Result<V> { Ok(layer_norm(cx, x, &e, Some(w), Some(b), eps)?.0) };
            // Attention block, with its residual.
            let x = if norm_first { norm(cx, src, n1)? } else { src };
            let (att, _) = attention(cx, &p, x, x, x, a.opt_tensor(18), a.opt_int(19), false)?;
            let mut x = cx.f.add(att, src);
            if !norm_first {
                x = norm(cx, x, n1)?;
            }
            // Feed-forward block, with its residual.
            let pre = x;
            if norm_first {
                x = norm(cx, x, n2)?;
            }
            let h = linear(cx, x, w1, Some(b1))?;
            let h = activation(cx, h, use_gelu);
            let y = linear(cx, h, w2, Some(b2))?;
            let mut y = cx.f.add(y, pre);
            if !norm_first {
                y = norm(cx, y, n2)?;
            }
            Ok(vec![y])
        },
    );
}

fn shape_numel(dims: &[i64]) -> i64 {
    dims.iter().product()
}

/// `relu`, or the exact (erf) `gelu` of `_addmm_activation`, in opmath.
fn activation(cx: &mut Cx, h: V, use_gelu: bool) -> V {
    let d = cx.dtype(h);
    let hc = cx.f.convert(h, d.opmath());
    let y = if use_gelu {
        gelu(&mut cx.f, hc, false)
    } else {
        let zero = cx.f.full_like(hc, 0.0);
        cx.f.max(hc, zero)
    };
    cx.f.convert(y, d)
}

/// The projections of an attention: `qkv_weight` `[3 E, E]` and its bias,
/// `proj_weight` `[E, E]` and its bias, and the head count.
struct Attention {
    embed: i64,
    heads: i64,
    qkv_w: V,
    qkv_b: V,
    proj_w: V,
    proj_b: V,
}

impl Attention {
    /// From the op's `embed_dim, num_heads, qkv_weight, qkv_bias,
    /// proj_weight, proj_bias` starting at argument `i`, checked.
    fn from_args(cx: &Cx, a: &Args, i: usize) -> Result<Attention> {
        let (embed, heads) = (a.int(i)?, a.int(i + 1)?);
        let p = Attention {
            embed,
            heads,
            qkv_w: a.tensor(i + 2)?,
            qkv_b: a.tensor(i + 3)?,
            proj_w: a.tensor(i + 4)?,
            proj_b: a.tensor(i + 5)?,
        };
        if embed <= 0 || heads <= 0 || embed % heads != 0 {
            bail_op!(&*cx.op, "embed_dim {embed} must be a positive multiple of num_heads {heads}");
        }
        let expect = [
            (p.qkv_w, vec![3 * embed, embed], "qkv_weight"),
            (p.qkv_b, vec![3 * embed], "qkv_bias"),
            (p.proj_w, vec![embed, embed], "proj_weight"),
            (p.proj_b, vec![embed], "proj_bias"),
        ];
        for (t, want, name) in expect {
            if cx.dims(t) != want {
                bail_op!(&*cx.op, "expected {name} of size {}, got {}", fmt(&want), fmt(&cx.dims(t)));
            }
        }
        Ok(p)
    }
}

/// Multi-head attention of `query` over `key` and `value`, all `[B, L, E]`
/// (`S = L` keys): the projected result `[B, L, E]` and, if asked, the
/// attention weights `[B, heads, L, S]`.
#[allow(clippy::too_many_arguments)]
fn attention(
    cx: &mut Cx,
    p: &Attention,
    query: V,
    key: V,
    value: V,
    mask: Option<V>,
    mask_type: Option<i64>,
    need_weights: bool,
) -> Result<(V, Option<V>)> {
    let (qd, kd, vd) = (cx.dims(query), cx.dims(key), cx.dims(value));
    // As PyTorch's kernels: one size for all three (self-attention, or
    // attention over a key sequence as long as the query's).
    if qd.len() != 3 || kd != qd || vd != qd || qd[2] != p.embed {
        bail_op!(
            &*cx.op,
            "expected `query`/`key`/`value` shapes to match, of size [batch, L, {}]; got {}, {} and {}",
            p.embed,
            fmt(&qd),
            fmt(&kd),
            fmt(&vd)
        );
    }
    let d = require_float(cx, query, "multi_head_attention")?;
    let (b, l, s, h, e) = (qd[0], qd[1], kd[1], p.heads, p.embed);
    let dh = e / h;
    // The three projections: rows [0, E), [E, 2E), [2E, 3E) of qkv_weight.
    let proj = |cx: &mut Cx, x: V, k: i64| -> Result<V> {
        let w = cx.f.slice_dim(p.qkv_w, 0, k * e, (k + 1) * e, 1);
        let bias = cx.f.slice_dim(p.qkv_b, 0, k * e, (k + 1) * e, 1);
        linear(cx, x, w, Some(bias))
    };
    let (q, k, v) = (proj(cx, query, 0)?, proj(cx, key, 1)?, proj(cx, value, 2)?);
    // [B, T, E] -> [B, heads, T, dh].
    let heads = |cx: &mut Cx, x: V, t: i64| {
        let x = cx.f.reshape(x, &[b, t, h, dh]);
        cx.f.transpose(x, &[0, 2, 1, 3])
    };
    let (q, k, v) = (heads(cx, q, l), heads(cx, k, s), heads(cx, v, s));
    // q / sqrt(dh), rounded to the dtype as PyTorch's rescale is.
    let qc = cx.f.convert(q, d.opmath());
    let scale = cx.f.full_like(qc, 1.0 / (dh as f64).sqrt());
    let q = cx.f.mul(qc, scale);
    let q = cx.f.convert(q, d);
    let kt = cx.f.transpose(k, &[0, 1, 3, 2]);
    let scores = matmul(cx, q, kt)?;
    let closed = match mask {
        Some(m) => Some(closed_mask(cx, m, mask_type, &[b, h, l, s])?),
        None => None,
    };
    let attn = masked_softmax(cx, scores, closed, 3, d)?;
    let out = matmul(cx, attn, v)?;
    let out = cx.f.transpose(out, &[0, 2, 1, 3]);
    let out = cx.f.reshape(out, &[b, l, e]);
    let out = linear(cx, out, p.proj_w, Some(p.proj_b))?;
    Ok((out, need_weights.then_some(attn)))
}

/// `true` where `mask` closes a position of scores of size `sdims`, laid
/// out as `mask_type` says (see the module doc), broadcast to `sdims`.
fn closed_mask(cx: &mut Cx, mask: V, mask_type: Option<i64>, sdims: &[i64]) -> Result<V> {
    let md = cx.dims(mask);
    let n = sdims.len();
    let closed = if cx.dtype(mask) == DType::Bool {
        mask
    } else {
        let zero = cx.f.full_like(mask, 0.0);
        cx.f.compare(Cmp::Ne, mask, zero)
    };
    let bad = |cx: &Cx, layout: &str| -> Result<V> {
        bail_op!(&*cx.op, "mask of size {} does not fit scores of size {} as {layout}", fmt(&md), fmt(sdims))
    };
    match mask_type {
        Some(0) => {
            if n < 2 || md != sdims[n - 2..] {
                return bad(cx, "an [L, S] attention mask (mask_type 0)");
            }
            Ok(cx.f.broadcast_in_dim(closed, &[n as i64 - 2, n as i64 - 1], sdims))
        }
        Some(1) => {
            if n < 2 || md.len() != 2 || md[0] != sdims[0] || md[1] != sdims[n - 1] {
                return bad(cx, "a [batch, S] key padding mask (mask_type 1)");
            }
            Ok(cx.f.broadcast_in_dim(closed, &[0, n as i64 - 1], sdims))
        }
        Some(2) | None => {
            let fits = md.len() <= n && md.iter().rev().zip(sdims.iter().rev()).all(|(&m, &s)| m == s || m == 1);
            if !fits {
                return bad(cx, "a mask broadcastable to the scores (mask_type 2)");
            }
            Ok(cx.f.broadcast_to(closed, sdims))
        }
        Some(t) => bail_op!(&*cx.op, "unknown mask_type {t} (0, 1 or 2)"),
    }
}

/// Softmax of `x` along `dim` (nn's [`softmax`]: opmath, rounded to `out`)
/// with `closed` positions set to -inf first, so they get probability 0 (a
/// row with every position closed is NaN, as PyTorch's CPU kernel makes it).
fn masked_softmax(cx: &mut Cx, x: V, closed: Option<V>, dim: usize, out: DType) -> Result<V> {
    let xc = cx.f.convert(x, out.opmath());
    let xc = match closed {
        Some(c) => {
            let ninf = cx.f.full_like(xc, f64::NEG_INFINITY);
            cx.f.select(c, ninf, xc)
        }
        None => xc,
    };
    softmax(cx, xc, dim as i64, false, out)
}
