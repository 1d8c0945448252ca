//! Householder QR, as LAPACK's `geqr2` / `org2r` / `orm2r` define it, on
//! StableHLO `while` loops (any PJRT device): `geqrf` (the packed
//! reflectors and their `tau`), `linalg_qr` (reduced, complete or R only),
//! `linalg_householder_product` (Q from reflectors) and `ormqr` (Q or Q^T
//! applied from either side), batched over leading dims.
//!
//! At column `j`, with `alpha` the diagonal entry and `x` the entries
//! below: if `x` is zero, `tau = 0` (no reflection); else `beta =
//! -sign(alpha) |(alpha, x)|`, `tau = (beta - alpha) / beta`, `v = [1; x /
//! (alpha - beta)]` (LAPACK's `dlarfg` without its rescaling of tiny
//! norms), `R[j, j] = beta`, and the trailing columns take `I - tau v v^T`.
//! So signs match LAPACK's: `R`'s diagonal is negative where the column's
//! leading entry was positive. Each step works on whole matrices through
//! masks (`O(m n)`). Half types compute in f32.

use crate::bail_op;
use crate::dtype::DType;
use crate::error::Result;
use crate::hlo::{Cmp, Elem, Func, Ty, V};
use crate::ops::{Builder, Cx};

use crate::ops::common::counted_loop;
use crate::shape;

use super::{float, total};

pub(super) fn register(r: &mut Builder) {
    r.op("aten::geqrf(Tensor self) -> (Tensor a, Tensor tau)", |cx, a| {
        let f = geqrf(cx, a.tensor(0)?, "geqrf")?;
        Ok(vec![cx.f.convert(f.a, f.d), cx.f.convert(f.tau, f.d)])
    });
    r.op("aten::linalg_qr(Tensor A, str mode=\"reduced\") -> (Tensor Q, Tensor R)", |cx, a| {
        let mode = a.opt_str(1).unwrap_or("reduced").to_string();
        if !matches!(mode.as_str(), "reduced" | "complete" | "r") {
            bail_op!(&*cx.op, "qr received unrecognized mode '{mode}' but expected one of 'reduced' (default), 'r', or 'complete'");
        }
        let f = geqrf(cx, a.tensor(0)?, "linalg.qr")?;
        let (m, n) = (f.m, f.n);
        let k = m.min(n);
        let rows = if mode == "complete" { m } else { k };
        let r_full = upper(cx, f.a, &f.dims);
        let rank = f.dims.len();
        let r_ = cx.f.slice_dim(r_full, rank - 2, 0, rows, 1);
        let q = if mode == "r" {
            cx.f.splat(&Ty::new(Elem::from(f.d), &[0]), 0.0)
        } else {
            let cols = if mode == "complete" { m } else { k };
            let q = householder_q(cx, f.a, f.tau, &f.dims[..rank - 2], m, cols);
            cx.f.convert(q, f.d)
        };
        Ok(vec![q, cx.f.convert(r_, f.d)])
    });
    r.op("aten::linalg_householder_product(Tensor input, Tensor tau) -> Tensor", |cx, a| {
        let (x, tau) = (a.tensor(0)?, a.tensor(1)?);
        let dims = cx.dims(x);
        if dims.len() < 2 {
            bail_op!(&*cx.op, "torch.linalg.householder_product: input must have at least 2 dimensions.");
        }
        let (m, n) = (dims[dims.len() - 2], dims[dims.len() - 1]);
        if m < n {
            bail_op!(&*cx.op, "torch.linalg.householder_product: input.shape[-2] must be greater than or equal to input.shape[-1]");
        }
        let td = cx.dims(tau);
        let k = *td.last().unwrap_or(&0);
        if td.len() != dims.len() - 1 || td[..td.len() - 1] != dims[..dims.len() - 2] || k > n {
            bail_op!(&*cx.op, "torch.linalg.householder_product: tau of size {} does not fit input of size {} (batch dims equal, tau.shape[-1] <= input.shape[-1])", shape::fmt(&td), shape::fmt(&dims));
        }
        let d = float(cx, x, "torch.linalg.householder_product")?;
        let (xc, tc) = (cx.f.convert(x, d.opmath()), cx.f.convert(tau, d.opmath()));
        let q = householder_q(cx, xc, tc, &dims[..dims.len() - 2], m, n);
        Ok(vec![cx.f.convert(q, d)])
    });
    r.op("aten::ormqr(Tensor self, Tensor input2, Tensor input3, bool left=True, bool transpose=False) -> Tensor", |cx, a| {
        let (x, tau, c) = (a.tensor(0)?, a.tensor(1)?, a.tensor(2)?);
        let (left, transpose) = (a.bool(3)?, a.bool(4)?);
        let (dims, cd) = (cx.dims(x), cx.dims(c));
        if dims.len() < 2 || cd.len() != dims.len() || cd[..cd.len() - 2] != dims[..dims.len() - 2] {
            bail_op!(&*cx.op, "torch.ormqr: input of size {} and other of size {} must have the same batch dims", shape::fmt(&dims), shape::fmt(&cd));
        }
        let m = dims[dims.len() - 2];
        let other = if left { cd[cd.len() - 2] } else { cd[cd.len() - 1] };
        if other != m {
            bail_op!(&*cx.op, "torch.ormqr: other.shape[{}] must be equal to input.shape[-2]", if left { -2 } else { -1 });
        }
        let d = float(cx, x, "torch.ormqr")?;
        let od = d.opmath();
        let (xc, tc, cc) = (cx.f.convert(x, od), cx.f.convert(tau, od), cx.f.convert(c, od));
        // Q = H_0 ... H_{k-1}: Q C applies the last first; Q^T C the first
        // first; C Q the first first; C Q^T the last first.
        let forward = left == transpose;
        let y = apply_reflectors(cx, xc, tc, cc, left, forward);
        Ok(vec![cx.f.convert(y, d)])
    });
}

/// The packed factorization: reflectors below the diagonal, R on and
/// above (opmath), `tau` `[..., min(m, n)]`.
pub(super) struct Packed {
    pub(super) a: V,
    pub(super) tau: V,
    d: DType,
    dims: Vec<i64>,
    m: i64,
    n: i64,
}

pub(super) fn geqrf(cx: &mut Cx, x: V, what: &str) -> Result<Packed> {
    let dims = cx.dims(x);
    if dims.len() < 2 {
        bail_op!(&*cx.op, "{what}: The input tensor A must have at least 2 dimensions.");
    }
    let d = float(cx, x, what)?;
    let od = d.opmath();
    let (m, n) = (dims[dims.len() - 2], dims[dims.len() - 1]);
    let k = m.min(n);
    let batch = dims[..dims.len() - 2].to_vec();
    let b = shape::numel(&batch);
    let mut tau_dims = batch.clone();
    tau_dims.push(k);
    let xc = cx.f.convert(x, od);
    if b == 0 || k == 0 {
        let tau = cx.f.splat(&Ty::new(Elem::from(od), &tau_dims), 0.0);
        return Ok(Packed { a: xc, tau, d, dims, m, n });
    }
    let a0 = cx.f.reshape(xc, &[b, m, n]);
    let t0 = cx.f.splat(&Ty::new(Elem::from(od), &[b, k]), 0.0);
    let out = counted_loop(&mut cx.f, &[a0, t0], k, |f, s, j| qr_step(f, s, j, b, m, n, k));
    let a = cx.f.reshape(out[0], &dims);
    let tau = cx.f.reshape(out[1], &tau_dims);
    Ok(Packed { a, tau, d, dims, m, n })
}

/// Column `j` of `geqr2` on `[b, m, n]` (carried: a, taus).
fn qr_step(f: &mut Func, s: &[V], j: V, b: i64, m: i64, n: i64, k: i64) -> Vec<V> {
    let (a, taus) = (s[0], s[1]);
    let bmn = [b, m, n];
    let Column { rows, cols, jb, xmask, xv } = column(f, a, j, b, m, n);
    let zero = f.full_like(a, 0.0);
    let in_col = f.compare(Cmp::Eq, cols, jb);
    let at_row = f.compare(Cmp::Eq, rows, jb);
    // alpha = a[j, j]; x = a[r > j, j].
    let diag = f.and(in_col, at_row);
    let av = f.select(diag, a, zero);
    let alpha = total(f, av, &[1, 2]);
    let x2 = f.mul(xv, xv);
    let xnorm2 = total(f, x2, &[1, 2]);
    let zb = f.full_like(alpha, 0.0);
    let no_reflect = f.compare(Cmp::Eq, xnorm2, zb);
    let a2 = f.mul(alpha, alpha);
    let norm2 = f.add(a2, xnorm2);
    let norm = f.unary("stablehlo.sqrt", norm2);
    // beta = -sign(alpha) norm (sign(0) counts as +).
    let neg_alpha = f.compare(Cmp::Lt, alpha, zb);
    let neg_norm = f.neg(norm);
    let beta = f.select(neg_alpha, norm, neg_norm);
    let bm_a = f.sub(beta, alpha);
    let one = f.full_like(alpha, 1.0);
    let safe_beta = f.select(no_reflect, one, beta);
    let tau = f.div(bm_a, safe_beta);
    let tau = f.select(no_reflect, zb, tau);
    let am_b = f.sub(alpha, beta);
    let safe = f.select(no_reflect, one, am_b);
    let scale = f.div(one, safe);
    // v over rows: 1 at j, x * scale below, 0 above.
    let sb = f.broadcast_in_dim(scale, &[0], &bmn);
    let vcol = f.mul(xv, sb);
    let vcol = total(f, vcol, &[2]);
    let ones_bm = f.splat(&Ty::new(f.ty(a).elem, &[b, m]), 1.0);
    let tbm = Ty::new(Elem::I64, &[b, m]);
    let rv = f.iota(&tbm, 1);
    let jbm = f.broadcast_in_dim(j, &[], &[b, m]);
    let is_j = f.compare(Cmp::Eq, rv, jbm);
    let v = f.select(is_j, ones_bm, vcol);
    let vb = f.broadcast_in_dim(v, &[0, 1], &bmn);
    // Trailing columns: a -= tau v (v^T a) for c > j.
    let va = f.mul(vb, a);
    let w = total(f, va, &[1]);
    let wb = f.broadcast_in_dim(w, &[0, 2], &bmn);
    let taub = f.broadcast_in_dim(tau, &[0], &bmn);
    let tv = f.mul(taub, vb);
    let upd = f.mul(tv, wb);
    let upd = f.sub(a, upd);
    let right = f.compare(Cmp::Gt, cols, jb);
    let a = f.select(right, upd, a);
    // Column j: beta on the diagonal (unless no reflection), v below.
    let betab = f.broadcast_in_dim(beta, &[0], &bmn);
    let nrb = f.broadcast_in_dim(no_reflect, &[0], &bmn);
    let set_diag = f.not(nrb);
    let set_diag = f.and(diag, set_diag);
    let a = f.select(set_diag, betab, a);
    let a = f.select(xmask, vb, a);
    // taus[j] = tau.
    let tbk = Ty::new(Elem::I64, &[b, k]);
    let kv = f.iota(&tbk, 1);
    let jbk = f.broadcast_in_dim(j, &[], &[b, k]);
    let at_j = f.compare(Cmp::Eq, kv, jbk);
    let tk = f.broadcast_in_dim(tau, &[0], &[b, k]);
    let taus = f.select(at_j, tk, taus);
    vec![a, taus]
}

/// Column `j` of `a` `[b, m, n]`: the row and column indices, `j`
/// broadcast, the mask of the entries below the diagonal, and those entries
/// (zero elsewhere).
struct Column {
    rows: V,
    cols: V,
    jb: V,
    xmask: V,
    xv: V,
}

fn column(f: &mut Func, a: V, j: V, b: i64, m: i64, n: i64) -> Column {
    let bmn = [b, m, n];
    let ti = Ty::new(Elem::I64, &bmn);
    let rows = f.iota(&ti, 1);
    let cols = f.iota(&ti, 2);
    let jb = f.broadcast_in_dim(j, &[], &bmn);
    let in_col = f.compare(Cmp::Eq, cols, jb);
    let below = f.compare(Cmp::Gt, rows, jb);
    let xmask = f.and(in_col, below);
    let zero = f.full_like(a, 0.0);
    let xv = f.select(xmask, a, zero);
    Column { rows, cols, jb, xmask, xv }
}

/// Reflector `j` of packed `a` `[b, m, n]` as a vector `[b, m]`: 1 at row
/// `j`, the stored entries below it, 0 above.
fn reflector(f: &mut Func, a: V, j: V, b: i64, m: i64, n: i64) -> V {
    let xv = column(f, a, j, b, m, n).xv;
    let v = total(f, xv, &[2]);
    let tbm = Ty::new(Elem::I64, &[b, m]);
    let rv = f.iota(&tbm, 1);
    let jbm = f.broadcast_in_dim(j, &[], &[b, m]);
    let is_j = f.compare(Cmp::Eq, rv, jbm);
    let ones = f.splat(&Ty::new(f.ty(a).elem, &[b, m]), 1.0);
    f.select(is_j, ones, v)
}

/// The upper triangle of `[..., m, n]`.
fn upper(cx: &mut Cx, a: V, dims: &[i64]) -> V {
    let t = Ty::new(Elem::I64, dims);
    let r = dims.len();
    let (rows, cols) = (cx.f.iota(&t, r - 2), cx.f.iota(&t, r - 1));
    let keep = cx.f.compare(Cmp::Le, rows, cols);
    let zero = cx.f.full_like(a, 0.0);
    cx.f.select(keep, a, zero)
}

/// The first `cols` columns of `Q = H_0 ... H_{k-1}` (`[batch..., m, cols]`)
/// from packed reflectors `a` `[batch..., m, n]` and `tau` `[batch..., k]`.
pub(super) fn householder_q(cx: &mut Cx, a: V, tau: V, batch: &[i64], m: i64, cols: i64) -> V {
    let mut dims = batch.to_vec();
    dims.extend_from_slice(&[m, cols]);
    let r = dims.len();
    let t = Ty::new(Elem::I64, &dims);
    let (rows_i, cols_i) = (cx.f.iota(&t, r - 2), cx.f.iota(&t, r - 1));
    let on = cx.f.compare(Cmp::Eq, rows_i, cols_i);
    let elem = cx.ty(a).elem;
    let one = cx.f.splat(&Ty::new(elem, &dims), 1.0);
    let zero = cx.f.splat(&Ty::new(elem, &dims), 0.0);
    let e = cx.f.select(on, one, zero);
    apply_reflectors(cx, a, tau, e, true, false)
}

/// Applies the reflectors of `a` (packed, `[batch..., m, n]`) with `tau`
/// (`[batch..., k]`) to `c`: from the left (`c` is `[batch..., m, p]`) or
/// the right (`[batch..., p, m]`), `H_0` first when `forward`, else
/// `H_{k-1}` first.
fn apply_reflectors(cx: &mut Cx, a: V, tau: V, c: V, left: bool, forward: bool) -> V {
    let (ad, cd) = (cx.dims(a), cx.dims(c));
    let rank = ad.len();
    let (m, n) = (ad[rank - 2], ad[rank - 1]);
    let k = *cx.dims(tau).last().unwrap_or(&0);
    let batch = ad[..rank - 2].to_vec();
    let b = shape::numel(&batch);
    let (cr, cc) = (cd[rank - 2], cd[rank - 1]);
    if b == 0 || k == 0 || cr == 0 || cc == 0 {
        return c;
    }
    let a3 = cx.f.reshape(a, &[b, m, n]);
    let t2 = cx.f.reshape(tau, &[b, k]);
    let c3 = cx.f.reshape(c, &[b, cr, cc]);
    let out = counted_loop(&mut cx.f, &[a3, t2, c3], k, |f, s, i| {
        let (a, taus, c) = (s[0], s[1], s[2]);
        // The reflector applied at iteration i.
        let j = if forward {
            i
        } else {
            let last = f.splat_int(&Ty::scalar(Elem::I64), k - 1);
            f.sub(last, i)
        };
        let v = reflector(f, a, j, b, m, n);
        let tbk = Ty::new(Elem::I64, &[b, k]);
        let kv = f.iota(&tbk, 1);
        let jbk = f.broadcast_in_dim(j, &[], &[b, k]);
        let at_j = f.compare(Cmp::Eq, kv, jbk);
        let zk = f.full_like(taus, 0.0);
        let tj = f.select(at_j, taus, zk);
        let tj = total(f, tj, &[1]);
        let dims3 = [b, cr, cc];
        let c = if left {
            // c -= tau v (v^T c)
            let vb = f.broadcast_in_dim(v, &[0, 1], &dims3);
            let vc = f.mul(vb, c);
            let w = total(f, vc, &[1]);
            let wb = f.broadcast_in_dim(w, &[0, 2], &dims3);
            let tb = f.broadcast_in_dim(tj, &[0], &dims3);
            let u = f.mul(tb, vb);
            let u = f.mul(u, wb);
            f.sub(c, u)
        } else {
            // c -= tau (c v) v^T
            let vb = f.broadcast_in_dim(v, &[0, 2], &dims3);
            let cv = f.mul(c, vb);
            let w = total(f, cv, &[2]);
            let wb = f.broadcast_in_dim(w, &[0, 1], &dims3);
            let tb = f.broadcast_in_dim(tj, &[0], &dims3);
            let u = f.mul(tb, wb);
            let u = f.mul(u, vb);
            f.sub(c, u)
        };
        vec![a, taus, c]
    });
    cx.f.reshape(out[2], &cd)
}
