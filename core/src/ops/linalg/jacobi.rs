//! Jacobi methods on StableHLO `while` loops (any PJRT device, no LAPACK):
//! the singular value decomposition (`_linalg_svd`, under `torch.linalg.svd`,
//! `svdvals`, `pinv`, `matrix_rank`, the 2- and nuclear norms, `cond`) and
//! the symmetric eigendecomposition (`_linalg_eigh`, under `eigh`,
//! `eigvalsh`), batched over leading dims.
//!
//! - **SVD**: one-sided (Hestenes) Jacobi on the columns of A (of Aᵀ when A
//!   is wide). Cyclic sweeps over the column pairs (p, q) rotate each pair
//!   to orthogonality, accumulating the rotations in V, until a sweep finds
//!   every pair orthogonal to within `tol = eps sqrt(m)` relative to the
//!   columns' norms (at most `MAX_SWEEPS`). The singular values are the
//!   column norms, sorted descending; U's columns are the normalized
//!   columns, completed to an orthonormal basis (for `full_matrices`, and
//!   for the columns of zero singular values) by Householder QR.
//! - **eigh**: two-sided cyclic Jacobi on the symmetric matrix built from
//!   the `UPLO` triangle, rotating each off-diagonal entry to zero until a
//!   sweep finds every `|a_pq| <= tol sqrt(|a_pp a_qq|)`; eigenvalues sorted
//!   ascending with their vectors.
//!
//! Jacobi is backward stable and computes small singular values and
//! eigenvalues to high relative accuracy (Demmel and Veselić). Each sweep
//! costs `O(n² m)` (one rotation is `O(m)` through dynamic slices), and
//! convergence is quadratic: 5 to 10 sweeps in practice. Signs of singular
//! vectors and eigenvectors are those the rotations give, not LAPACK's; like
//! LAPACK's they are unique only up to sign (and within repeated values).
//! Half types compute in f32.

use crate::bail_op;
use crate::dtype::DType;
use crate::error::Result;
use crate::hlo::{Cmp, Elem, Func, Ty, V};
use crate::ops::common::any;
use crate::ops::{Builder, Cx};
use crate::shape;

use super::{float, identity, mt, qr, square, total};

/// A bound on sweeps; quadratic convergence needs far fewer.
const MAX_SWEEPS: i64 = 40;

pub(super) fn register(r: &mut Builder) {
    r.op(
        "aten::_linalg_svd(Tensor A, bool full_matrices=False, bool compute_uv=True, *, str? driver=None) \
         -> (Tensor U, Tensor S, Tensor Vh)",
        |cx, a| {
            let x = a.tensor(0)?;
            let (full, uv) = (a.bool(1)?, a.bool(2)?);
            svd(cx, x, full, uv)
        },
    );
    r.op("aten::linalg_polar(Tensor A) -> (Tensor U, Tensor H)", |cx, a| polar(cx, a.tensor(0)?));
    r.op("aten::_linalg_eigh(Tensor A, str UPLO=\"L\", bool compute_v=True) -> (Tensor eigenvalues, Tensor eigenvectors)", |cx, a| {
        let x = a.tensor(0)?;
        let uplo = a.opt_str(1).unwrap_or("L").to_string();
        if uplo != "L" && uplo != "U" {
            bail_op!(&*cx.op, "Expected UPLO argument to be 'L' or 'U', but got {uplo}");
        }
        eigh(cx, x, uplo == "U", a.bool(2)?)
    });
}

/// The unit roundoff of the computing type.
fn eps(d: DType) -> f64 {
    if d == DType::F64 {
        f64::EPSILON
    } else {
        f32::EPSILON as f64
    }
}

fn scalar_i64(f: &mut Func, v: i64) -> V {
    f.splat_int(&Ty::scalar(Elem::I64), v)
}

/// Columns `p` and `q` of `x` `[b, r, n]`, each `[b, r, 1]`.
fn columns(f: &mut Func, x: V, p: V, q: V) -> (V, V) {
    let d = f.ty(x).dims.clone();
    let z = scalar_i64(f, 0);
    let xp = f.dynamic_slice(x, &[z, z, p], &[d[0], d[1], 1]);
    let xq = f.dynamic_slice(x, &[z, z, q], &[d[0], d[1], 1]);
    (xp, xq)
}

/// Rotates columns `p` and `q` of `x` `[b, r, n]` by `(c, s)` (`[b]`):
/// `x_p <- c x_p - s x_q`, `x_q <- s x_p + c x_q`.
fn rotate_columns(f: &mut Func, x: V, p: V, q: V, c: V, s: V) -> V {
    rotate(f, x, p, q, c, s, 2)
}

/// As [`rotate_columns`] for rows `p` and `q` of `x` `[b, n, r]`.
fn rotate_rows(f: &mut Func, x: V, p: V, q: V, c: V, s: V) -> V {
    rotate(f, x, p, q, c, s, 1)
}

/// Rotates slices `p` and `q` along `axis` (1 or 2) of `x` `[b, _, _]`.
fn rotate(f: &mut Func, x: V, p: V, q: V, c: V, s: V, axis: usize) -> V {
    let d = f.ty(x).dims.clone();
    let mut size = d.to_vec();
    size[axis] = 1;
    let z = scalar_i64(f, 0);
    let at = |i: V| if axis == 2 { [z, z, i] } else { [z, i, z] };
    let xp = f.dynamic_slice(x, &at(p), &size);
    let xq = f.dynamic_slice(x, &at(q), &size);
    let cb = f.broadcast_in_dim(c, &[0], &size);
    let sb = f.broadcast_in_dim(s, &[0], &size);
    let a = f.mul(cb, xp);
    let b = f.mul(sb, xq);
    let np = f.sub(a, b);
    let a = f.mul(sb, xp);
    let b = f.mul(cb, xq);
    let nq = f.add(a, b);
    let x = f.dynamic_update_slice(x, np, &at(p));
    f.dynamic_update_slice(x, nq, &at(q))
}

/// The rotation `(c, s)` that makes `[α γ; γ β]`-related pairs orthogonal
/// (one-sided) or zeroes `a_pq` (two-sided): `ζ = (β - α) / 2γ`,
/// `t = sign ζ / (|ζ| + sqrt(1 + ζ²))`, `c = 1 / sqrt(1 + t²)`, `s = c t`;
/// the identity where `!need`.
fn rotation(f: &mut Func, alpha: V, beta: V, gamma: V, need: V) -> (V, V) {
    let one = f.full_like(alpha, 1.0);
    let zero = f.full_like(alpha, 0.0);
    let two = f.full_like(alpha, 2.0);
    let g = f.select(need, gamma, one);
    let diff = f.sub(beta, alpha);
    let den = f.mul(two, g);
    let zeta = f.div(diff, den);
    let az = f.unary("stablehlo.abs", zeta);
    let z2 = f.mul(zeta, zeta);
    let z2 = f.add(one, z2);
    let r = f.unary("stablehlo.sqrt", z2);
    let den = f.add(az, r);
    let t = f.div(one, den);
    let neg = f.compare(Cmp::Lt, zeta, zero);
    let nt = f.neg(t);
    let t = f.select(neg, nt, t);
    let t2 = f.mul(t, t);
    let t2 = f.add(one, t2);
    let c = f.unary("stablehlo.rsqrt", t2);
    let s = f.mul(c, t);
    (f.select(need, c, one), f.select(need, s, zero))
}

/// Whether the pair with `[α γ; γ β]` needs a rotation: `|γ| > tol
/// sqrt(|α β|)` (so a zero `γ` never does, and any nonzero one does when a
/// diagonal entry is zero).
fn needs_rotation(f: &mut Func, alpha: V, beta: V, gamma: V, tol: f64) -> V {
    let prod = f.mul(alpha, beta);
    let prod = f.unary("stablehlo.abs", prod);
    let root = f.unary("stablehlo.sqrt", prod);
    let tv = f.full_like(root, tol);
    let lim = f.mul(tv, root);
    let ag = f.unary("stablehlo.abs", gamma);
    f.compare(Cmp::Gt, ag, lim)
}

/// Runs cyclic Jacobi sweeps: `step(f, state, p, q)` rotates pair (p, q)
/// and returns the new state and whether any matrix needed a rotation.
/// Stops after a sweep that rotated nothing, or `MAX_SWEEPS`.
fn sweeps(cx: &mut Cx, init: &[V], n: i64, step: impl FnOnce(&mut Func, &[V], V, V) -> (Vec<V>, V)) -> Vec<V> {
    let k = init.len();
    let mut tys: Vec<Ty> = init.iter().map(|&v| cx.ty(v).clone()).collect();
    let i64s = Ty::scalar(Elem::I64);
    let pred = Ty::scalar(Elem::Pred);
    // Carried: state..., p, q, rotated in this sweep, sweeps done, finished.
    tys.extend([i64s.clone(), i64s.clone(), pred.clone(), i64s.clone(), pred.clone()]);
    let cond = cx.f.region(&tys, |f, s| vec![f.not(s[k + 4])]);
    let body = cx.f.region(&tys, |f, s| {
        let (p, q, rotated, count) = (s[k], s[k + 1], s[k + 2], s[k + 3]);
        let (mut out, any) = step(f, &s[..k], p, q);
        let rotated = f.or(rotated, any);
        // Next pair: (p, q + 1), or (p + 1, p + 2) at the end of a row;
        // past (n - 2, n - 1) the sweep ends.
        let one = scalar_i64(f, 1);
        let two = scalar_i64(f, 2);
        let nn = scalar_i64(f, n);
        let q1 = f.add(q, one);
        let row_end = f.compare(Cmp::Eq, q1, nn);
        let p1 = f.add(p, one);
        let p2 = f.add(p, two);
        let np = f.select(row_end, p1, p);
        let nq = f.select(row_end, p2, q1);
        let last = scalar_i64(f, n - 1);
        let sweep_end = f.compare(Cmp::Eq, np, last);
        let zero = scalar_i64(f, 0);
        let np = f.select(sweep_end, zero, np);
        let nq = f.select(sweep_end, one, nq);
        let c1 = f.add(count, one);
        let count = f.select(sweep_end, c1, count);
        let calm = f.not(rotated);
        let cap = scalar_i64(f, MAX_SWEEPS);
        let spent = f.compare(Cmp::Ge, count, cap);
        let stop = f.or(calm, spent);
        let finished = f.and(sweep_end, stop);
        let no = f.splat(&Ty::scalar(Elem::Pred), 0.0);
        let rotated = f.select(sweep_end, no, rotated);
        out.extend([np, nq, rotated, count, finished]);
        out
    });
    let mut operands = init.to_vec();
    let (z, o) = (scalar_i64(&mut cx.f, 0), scalar_i64(&mut cx.f, 1));
    let no = cx.f.splat(&Ty::scalar(Elem::Pred), 0.0);
    operands.extend([z, o, no, z, no]);
    let mut out = cx.f.op("stablehlo.while", &operands, &[cond, body], "", &tys);
    out.truncate(k);
    out
}

/// Sorts `keys` `[b, n]` (descending or ascending) and permutes the columns
/// of each of `mats` `[b, r, n]` the same way.
fn sort_columns(cx: &mut Cx, keys: V, mats: &[V], descending: bool) -> (V, Vec<V>) {
    let d = cx.dims(keys);
    let (b, n) = (d[0], d[1]);
    let idx = cx.f.iota(&Ty::new(Elem::I64, &[b, n]), 1);
    let out = cx.f.sort(&[keys, idx], 1, true, |f, a| f.compare(if descending { Cmp::Gt } else { Cmp::Lt }, a[0], a[1]));
    let (sorted, perm) = (out[0], out[1]);
    // P[b, i, j] = (perm[b, j] == i): column j of X P is column perm[j] of X.
    let t = Ty::new(Elem::I64, &[b, n, n]);
    let rows = cx.f.iota(&t, 1);
    let pb = cx.f.broadcast_in_dim(perm, &[0, 2], &[b, n, n]);
    let hit = cx.f.compare(Cmp::Eq, rows, pb);
    let elem = cx.ty(keys).elem;
    let one = cx.f.splat(&Ty::new(elem, &[b, n, n]), 1.0);
    let zero = cx.f.splat(&Ty::new(elem, &[b, n, n]), 0.0);
    let p = cx.f.select(hit, one, zero);
    let mats = mats.iter().map(|&x| cx.f.dot_general(x, p, &[0], &[0], &[2], &[1], elem)).collect();
    (sorted, mats)
}

/// `A = U diag(S) Vh` of `x` `[..., m, n]`.
fn svd(cx: &mut Cx, x: V, full: bool, uv: bool) -> Result<Vec<V>> {
    let dims = cx.dims(x);
    if dims.len() < 2 {
        bail_op!(&*cx.op, "linalg.svd: The input tensor A must have at least 2 dimensions.");
    }
    let d = float(cx, x, "linalg.svd")?;
    let od = d.opmath();
    let elem = Elem::from(od);
    let r = dims.len();
    let (m, n) = (dims[r - 2], dims[r - 1]);
    let k = m.min(n);
    let batch = dims[..r - 2].to_vec();
    let b = shape::numel(&batch);
    let with = |last: &[i64]| -> Vec<i64> {
        let mut v = batch.clone();
        v.extend_from_slice(last);
        v
    };
    let (u_cols, vh_rows) = if full { (m, n) } else { (k, k) };
    let empty = |cx: &mut Cx| cx.f.splat(&Ty::new(Elem::from(d), &[0]), 0.0);
    if b == 0 || k == 0 {
        let s = cx.f.splat(&Ty::new(Elem::from(d), &with(&[k])), 0.0);
        if !uv {
            let (e1, e2) = (empty(cx), empty(cx));
            return Ok(vec![e1, s, e2]);
        }
        // An empty matrix's full factors are identities.
        let u = identity(&mut cx.f, &with(&[m, u_cols]), Elem::from(d));
        let vh = identity(&mut cx.f, &with(&[vh_rows, n]), Elem::from(d));
        return Ok(vec![u, s, vh]);
    }
    // Work on the tall orientation: a is [b, rows, cols] with rows >= cols.
    let xc = cx.f.convert(x, od);
    let a3 = cx.f.reshape(xc, &[b, m, n]);
    let wide = m < n;
    let (a3, rows, cols) = if wide { (mt(cx, a3), n, m) } else { (a3, m, n) };
    let v0 = identity(&mut cx.f, &[b, cols, cols], elem);
    let tol = eps(od) * (rows as f64).sqrt();
    let (w, v) = if cols < 2 {
        (a3, v0)
    } else {
        let out = sweeps(cx, &[a3, v0], cols, |f, s, p, q| {
            let (w, v) = (s[0], s[1]);
            let (wp, wq) = columns(f, w, p, q);
            let pp = f.mul(wp, wp);
            let alpha = total(f, pp, &[1, 2]);
            let qq = f.mul(wq, wq);
            let beta = total(f, qq, &[1, 2]);
            let pq = f.mul(wp, wq);
            let gamma = total(f, pq, &[1, 2]);
            let need = needs_rotation(f, alpha, beta, gamma, tol);
            let (c, sn) = rotation(f, alpha, beta, gamma, need);
            let w = rotate_columns(f, w, p, q, c, sn);
            let v = rotate_columns(f, v, p, q, c, sn);
            (vec![w, v], any(f, need))
        });
        (out[0], out[1])
    };
    // Singular values: the column norms, sorted descending.
    let w2 = cx.f.mul(w, w);
    let s2 = total(&mut cx.f, w2, &[1]);
    let s = cx.f.unary("stablehlo.sqrt", s2);
    let (s, mats) = sort_columns(cx, s, &[w, v], true);
    let (w, v) = (mats[0], mats[1]);
    let s_out = cx.f.reshape(s, &with(&[k]));
    let s_out = cx.f.convert(s_out, d);
    if !uv {
        let (e1, e2) = (empty(cx), empty(cx));
        return Ok(vec![e1, s_out, e2]);
    }
    // Left vectors of the tall problem: w / s, completed to an orthonormal
    // basis of `rows` (full) or `cols` columns.
    let sb = cx.f.broadcast_in_dim(s, &[0, 2], &[b, rows, cols]);
    let zero = cx.f.full_like(sb, 0.0);
    let pos = cx.f.compare(Cmp::Gt, sb, zero);
    let one = cx.f.full_like(sb, 1.0);
    let safe = cx.f.select(pos, sb, one);
    let uw = cx.f.div(w, safe);
    let uw = cx.f.select(pos, uw, zero);
    let left_cols = if full { rows } else { cols };
    let u = complete(cx, uw, b, rows, cols, left_cols)?;
    // Tall: A = u S vᵀ. Wide (A = Xᵀ with X = u S vᵀ): A = v S uᵀ.
    let (u, vh) = if wide {
        // U = v [b, m, m]; Vh = uᵀ [b, left_cols, n].
        (v, mt(cx, u))
    } else {
        (u, mt(cx, v))
    };
    let u = cx.f.reshape(u, &with(&[m, u_cols]));
    let vh = cx.f.reshape(vh, &with(&[vh_rows, n]));
    Ok(vec![cx.f.convert(u, d), s_out, cx.f.convert(vh, d)])
}

/// The polar decomposition `A = U H` of `x` `[..., m, n]` (`m >= n`) from
/// the thin SVD `A = W S Vh`: `U = W Vh` (orthonormal columns) and
/// `H = Vhᵀ S Vh` (symmetric positive semidefinite).
fn polar(cx: &mut Cx, x: V) -> Result<Vec<V>> {
    let dims = cx.dims(x);
    if dims.len() < 2 {
        bail_op!(&*cx.op, "linalg.polar: The input tensor A must have at least 2 dimensions.");
    }
    let r = dims.len();
    let (m, n) = (dims[r - 2], dims[r - 1]);
    if m < n {
        bail_op!(&*cx.op, "linalg.polar: input must have at least as many rows as columns, but got {m} by {n} matrices");
    }
    let d = float(cx, x, "linalg.polar")?;
    let parts = svd(cx, x, false, true)?;
    let od = d.opmath();
    let (w, s, vh) = (cx.f.convert(parts[0], od), cx.f.convert(parts[1], od), cx.f.convert(parts[2], od));
    let batch: Vec<usize> = (0..r - 2).collect();
    let u = cx.f.dot_general(w, vh, &batch, &batch, &[r - 1], &[r - 2], od.into());
    // Vhᵀ S: the rows of Vh scaled by S, transposed.
    let mut sdims: Vec<i64> = dims[..r - 2].to_vec();
    sdims.extend([n, n]);
    let keep: Vec<i64> = (0..r as i64 - 1).collect();
    let sb = cx.f.broadcast_in_dim(s, &keep, &sdims);
    let scaled = cx.f.mul(vh, sb);
    let h = cx.f.dot_general(scaled, vh, &batch, &batch, &[r - 2], &[r - 2], od.into());
    Ok(vec![cx.f.convert(u, d), cx.f.convert(h, d)])
}

/// The first `want` columns of an orthonormal basis whose first `cols`
/// columns are those of `u` `[b, rows, cols]` (orthonormal, or zero):
/// Householder QR of `u` gives `Q` with `Q[:, j] = ±u[:, j]` where `u[:, j]`
/// is a unit vector (the sign is `R[j, j]`'s, and is undone), and a unit
/// vector orthogonal to the others where it is zero.
fn complete(cx: &mut Cx, u: V, b: i64, rows: i64, cols: i64, want: i64) -> Result<V> {
    let packed = qr::geqrf(cx, u, "linalg.svd")?;
    let q = qr::householder_q(cx, packed.a, packed.tau, &[b], rows, want);
    // sign(R[j, j]) for j < cols; 1 past them and where R[j, j] is 0.
    let t = Ty::new(Elem::I64, &[b, rows, cols]);
    let (ri, ci) = (cx.f.iota(&t, 1), cx.f.iota(&t, 2));
    let on = cx.f.compare(Cmp::Eq, ri, ci);
    let zero = cx.f.full_like(packed.a, 0.0);
    let diag = cx.f.select(on, packed.a, zero);
    let rjj = total(&mut cx.f, diag, &[1]); // [b, cols]
    let z = cx.f.full_like(rjj, 0.0);
    let neg = cx.f.compare(Cmp::Lt, rjj, z);
    let one = cx.f.full_like(rjj, 1.0);
    let m1 = cx.f.full_like(rjj, -1.0);
    let sign = cx.f.select(neg, m1, one);
    let sign = if want > cols {
        let pad = cx.f.splat(&Ty::new(cx.ty(sign).elem, &[b, want - cols]), 1.0);
        cx.f.concatenate(&[sign, pad], 1)
    } else {
        cx.f.slice_dim(sign, 1, 0, want, 1)
    };
    let sb = cx.f.broadcast_in_dim(sign, &[0, 2], &[b, rows, want]);
    Ok(cx.f.mul(q, sb))
}

/// Eigenvalues (ascending) and eigenvectors of the symmetric matrices whose
/// lower (or `upper`) triangles `x` `[..., n, n]` holds.
pub(super) fn eigh(cx: &mut Cx, x: V, upper: bool, vectors: bool) -> Result<Vec<V>> {
    let dims = cx.dims(x);
    square(cx, &dims, "linalg.eigh")?;
    let d = float(cx, x, "linalg.eigh")?;
    let od = d.opmath();
    let elem = Elem::from(od);
    let r = dims.len();
    let n = dims[r - 1];
    let batch = dims[..r - 2].to_vec();
    let b = shape::numel(&batch);
    let mut vals_dims = batch.clone();
    vals_dims.push(n);
    if b == 0 || n == 0 {
        let w = cx.f.splat(&Ty::new(Elem::from(d), &vals_dims), 0.0);
        let v = if vectors { cx.f.splat(&Ty::new(Elem::from(d), &dims), 0.0) } else { cx.f.splat(&Ty::new(Elem::from(d), &[0]), 0.0) };
        return Ok(vec![w, v]);
    }
    let xc = cx.f.convert(x, od);
    let a = cx.f.reshape(xc, &[b, n, n]);
    // The symmetric matrix of the chosen triangle.
    let t = Ty::new(Elem::I64, &[b, n, n]);
    let (ri, ci) = (cx.f.iota(&t, 1), cx.f.iota(&t, 2));
    let keep = cx.f.compare(if upper { Cmp::Le } else { Cmp::Ge }, ri, ci);
    let zero = cx.f.full_like(a, 0.0);
    let tri = cx.f.select(keep, a, zero);
    let strict = cx.f.compare(if upper { Cmp::Lt } else { Cmp::Gt }, ri, ci);
    let off = cx.f.select(strict, a, zero);
    let offt = mt(cx, off);
    let a = cx.f.add(tri, offt);
    let v0 = identity(&mut cx.f, &[b, n, n], elem);
    let tol = eps(od);
    let (a, v) = if n < 2 {
        (a, v0)
    } else {
        let out = sweeps(cx, &[a, v0], n, |f, s, p, q| {
            let (a, v) = (s[0], s[1]);
            let z = scalar_i64(f, 0);
            let entry = |f: &mut Func, i: V, j: V| {
                let e = f.dynamic_slice(a, &[z, i, j], &[b, 1, 1]);
                f.reshape(e, &[b])
            };
            let app = entry(f, p, p);
            let aqq = entry(f, q, q);
            let apq = entry(f, p, q);
            let need = needs_rotation(f, app, aqq, apq, tol);
            let (c, sn) = rotation(f, app, aqq, apq, need);
            // A <- Jᵀ A J: the columns, then the rows.
            let a = rotate_columns(f, a, p, q, c, sn);
            let a = rotate_rows(f, a, p, q, c, sn);
            let v = rotate_columns(f, v, p, q, c, sn);
            (vec![a, v], any(f, need))
        });
        (out[0], out[1])
    };
    let on = cx.f.compare(Cmp::Eq, ri, ci);
    let zero = cx.f.full_like(a, 0.0);
    let diag = cx.f.select(on, a, zero);
    let w = total(&mut cx.f, diag, &[1]);
    let (w, mats) = sort_columns(cx, w, &[v], false);
    let w = cx.f.reshape(w, &vals_dims);
    let w = cx.f.convert(w, d);
    let v = if vectors {
        let v = cx.f.reshape(mats[0], &dims);
        cx.f.convert(v, d)
    } else {
        cx.f.splat(&Ty::new(Elem::from(d), &[0]), 0.0)
    };
    Ok(vec![w, v])
}
