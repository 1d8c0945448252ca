//! `_scaled_dot_product_flash_attention_for_cpu` and its backward: the
//! fused attention kernel that PyTorch's CPU path of
//! `scaled_dot_product_attention` calls, and that code (and `torch.export`ed
//! graphs) may call directly.
//!
//! `query` `[..., L, E]`, `key` `[..., S, E]` and `value` `[..., S, Ev]`
//! (equal leading dims); scores `q kᵀ scale` (scale `1/sqrt(E)` unless
//! given) plus an additive float mask (the kernel takes no bool mask, as on
//! the CPU), or the top-left causal mask. The forward returns the output and
//! the row log-sum-exp in float32 (opmath); a row whose positions are all
//! -inf gives output 0 and log-sum-exp 0, as the CPU kernel does. The
//! backward recomputes the probabilities from the log-sum-exp:
//! `dV = Pᵀ dO`, `dS = P (dO Vᵀ - rowsum(dO O))`, `dQ = dS K scale`,
//! `dK = dSᵀ Q scale`. Dropout is refused (its draws could not match).

use crate::bail_op;
use crate::dtype::DType;
use crate::error::Result;
use crate::hlo::{Cmp, Elem, Reducer, Ty, V};
use crate::ops::{Args, Builder, Cx};
use crate::shape::fmt;

pub(super) fn register(r: &mut Builder) {
    r.op(
        "aten::_scaled_dot_product_flash_attention_for_cpu(Tensor query, Tensor key, Tensor value, \
         float dropout_p=0., bool is_causal=False, *, Tensor? attn_mask=None, float? scale=None) \
         -> (Tensor output, Tensor logsumexp)",
        |cx, a| forward(cx, a),
    );
    r.op(
        "aten::_scaled_dot_product_flash_attention_for_cpu_backward(Tensor grad_out, Tensor query, Tensor key, \
         Tensor value, Tensor out, Tensor logsumexp, float dropout_p, bool is_causal, *, Tensor? attn_mask=None, \
         float? scale=None) -> (Tensor grad_query, Tensor grad_key, Tensor grad_value)",
        |cx, a| backward(cx, a),
    );
}

/// The checked operands in opmath, with the dtype and scale.
struct Operands {
    q: V,
    k: V,
    v: V,
    d: DType,
    scale: f64,
    batch: Vec<usize>,
}

fn operands(cx: &mut Cx, q: V, k: V, v: V, dropout: f64, scale: Option<f64>) -> Result<Operands> {
    let d = cx.dtype(q);
    if !d.is_float() || cx.dtype(k) != d || cx.dtype(v) != d {
        bail_op!(&*cx.op, "query, key and value must be floating point tensors of one dtype, got {d}, {} and {}", cx.dtype(k), cx.dtype(v));
    }
    let (dq, dk, dv) = (cx.dims(q), cx.dims(k), cx.dims(v));
    let r = dq.len();
    let fits = r >= 2
        && dk.len() == r
        && dv.len() == r
        && dq[..r - 2] == dk[..r - 2]
        && dk[..r - 2] == dv[..r - 2]
        && dq[r - 1] == dk[r - 1]
        && dk[r - 2] == dv[r - 2];
    if !fits {
        bail_op!(
            &*cx.op,
            "expected query [..., L, E], key [..., S, E] and value [..., S, Ev] with equal leading dims, got {}, {} and {}",
            fmt(&dq),
            fmt(&dk),
            fmt(&dv)
        );
    }
    if dropout != 0.0 {
        bail_op!(&*cx.op, "dropout_p = {dropout} is not supported on tpu (its random draws could not match the CPU's)");
    }
    let scale = scale.unwrap_or(1.0 / (dq[r - 1] as f64).sqrt());
    let od = d.opmath();
    Ok(Operands {
        q: cx.f.convert(q, od),
        k: cx.f.convert(k, od),
        v: cx.f.convert(v, od),
        d,
        scale,
        batch: (0..r - 2).collect(),
    })
}

/// `q kᵀ scale` plus the mask (additive) or the causal mask, `[..., L, S]`.
fn scores(cx: &mut Cx, o: &Operands, mask: Option<V>, causal: bool) -> Result<V> {
    let r = o.batch.len() + 2;
    let elem = cx.ty(o.q).elem;
    let s = cx.f.dot_general(o.q, o.k, &o.batch, &o.batch, &[r - 1], &[r - 1], elem);
    let sc = cx.f.full_like(s, o.scale);
    let mut s = cx.f.mul(s, sc);
    let sd = cx.dims(s);
    if let Some(m) = mask {
        if cx.dtype(m) != o.d {
            bail_op!(&*cx.op, "Attention mask is the same data type as query (expected {}, got {})", o.d, cx.dtype(m));
        }
        let md = cx.dims(m);
        if crate::shape::broadcast_all(&cx.op, &[&md, &sd]).ok().as_deref() != Some(sd.as_slice()) {
            bail_op!(&*cx.op, "attn_mask of shape {} does not broadcast to the scores' shape {}", fmt(&md), fmt(&sd));
        }
        let m = cx.f.convert(m, elem);
        let m = cx.f.broadcast_to(m, &sd);
        s = cx.f.add(s, m);
    }
    if causal {
        let t = Ty::new(Elem::I64, &sd);
        let (i, j) = (cx.f.iota(&t, r - 2), cx.f.iota(&t, r - 1));
        let open = cx.f.compare(Cmp::Le, j, i);
        let ninf = cx.f.full_like(s, f64::NEG_INFINITY);
        s = cx.f.select(open, s, ninf);
    }
    Ok(s)
}

/// The row log-sum-exp `[..., L]` (0 for an all -inf row) and the
/// probabilities `[..., L, S]` (0 in such a row).
fn probabilities(cx: &mut Cx, s: V) -> (V, V) {
    let r = cx.rank(s);
    let f = &mut cx.f;
    let ninf = f.constant(f.ty(s).elem, f64::NEG_INFINITY);
    let m = f.reduce(s, ninf, &[r - 1], Reducer::Max);
    let keep: Vec<i64> = (0..r as i64 - 1).collect();
    let sd = f.ty(s).dims.clone();
    let ninf_rows = f.full_like(m, f64::NEG_INFINITY);
    let empty = f.compare(Cmp::Eq, m, ninf_rows);
    let zero_rows = f.full_like(m, 0.0);
    let m = f.select(empty, zero_rows, m);
    let mb = f.broadcast_in_dim(m, &keep, &sd);
    let e = f.sub(s, mb);
    let e = f.unary("stablehlo.exponential", e);
    let z0 = f.constant(f.ty(s).elem, 0.0);
    let z = f.reduce(e, z0, &[r - 1], Reducer::Add);
    let lz = f.unary("stablehlo.log", z);
    let lse = f.add(m, lz);
    let lse = f.select(empty, zero_rows, lse);
    let one = f.full_like(z, 1.0);
    let safe = f.select(empty, one, z);
    let zb = f.broadcast_in_dim(safe, &keep, &sd);
    (lse, f.div(e, zb))
}

fn forward(cx: &mut Cx, a: &Args) -> Result<Vec<V>> {
    let (q, k, v) = (a.tensor(0)?, a.tensor(1)?, a.tensor(2)?);
    let o = operands(cx, q, k, v, a.float(3)?, a.opt_float(6))?;
    let s = scores(cx, &o, a.opt_tensor(5), a.bool(4)?)?;
    let (lse, p) = probabilities(cx, s);
    let r = o.batch.len() + 2;
    let elem = cx.ty(o.q).elem;
    let out = cx.f.dot_general(p, o.v, &o.batch, &o.batch, &[r - 1], &[r - 2], elem);
    Ok(vec![cx.f.convert(out, o.d), cx.f.convert(lse, o.d.opmath())])
}

fn backward(cx: &mut Cx, a: &Args) -> Result<Vec<V>> {
    let (g, q, k, v, out, lse) = (a.tensor(0)?, a.tensor(1)?, a.tensor(2)?, a.tensor(3)?, a.tensor(4)?, a.tensor(5)?);
    let o = operands(cx, q, k, v, a.float(6)?, a.opt_float(9))?;
    let s = scores(cx, &o, a.opt_tensor(8), a.bool(7)?)?;
    let r = o.batch.len() + 2;
    let elem = cx.ty(o.q).elem;
    let sd = cx.dims(s);
    let keep: Vec<i64> = (0..r as i64 - 1).collect();
    // P = exp(s - lse) (0 where s is -inf).
    let lse = cx.f.convert(lse, elem);
    let lb = cx.f.broadcast_in_dim(lse, &keep, &sd);
    let p = cx.f.sub(s, lb);
    let p = cx.f.unary("stablehlo.exponential", p);
    let (g, out) = (cx.f.convert(g, elem), cx.f.convert(out, elem));
    let b = &o.batch;
    // dV = Pᵀ dO: contract over L.
    let dv = cx.f.dot_general(p, g, b, b, &[r - 2], &[r - 2], elem);
    // dP = dO Vᵀ; D = rowsum(dO ∘ O).
    let dp = cx.f.dot_general(g, o.v, b, b, &[r - 1], &[r - 1], elem);
    let go = cx.f.mul(g, out);
    let z = cx.f.constant(elem, 0.0);
    let dsum = cx.f.reduce(go, z, &[r - 1], Reducer::Add);
    let db = cx.f.broadcast_in_dim(dsum, &keep, &sd);
    let ds = cx.f.sub(dp, db);
    let ds = cx.f.mul(p, ds);
    let sc = cx.f.full_like(ds, o.scale);
    let ds = cx.f.mul(ds, sc);
    // dQ = dS K; dK = dSᵀ Q.
    let dq = cx.f.dot_general(ds, o.k, b, b, &[r - 1], &[r - 2], elem);
    let dk = cx.f.dot_general(ds, o.q, b, b, &[r - 2], &[r - 2], elem);
    Ok(vec![cx.f.convert(dq, o.d), cx.f.convert(dk, o.d), cx.f.convert(dv, o.d)])
}
