//! LU factorization with partial pivoting and what is built on it:
//! `linalg_lu_factor_ex`, `lu_unpack`, `linalg_lu`, `linalg_lu_solve`,
//! `_linalg_solve_ex` (`torch.linalg.solve`), `linalg_inv_ex`, `_linalg_det`
//! and `_linalg_slogdet`, batched over leading dims.
//!
//! The factorization is LAPACK's unblocked `getf2` as one `stablehlo.while`
//! over the columns, so it runs on any PJRT device: at column `j` the row
//! of largest magnitude at or below the diagonal (the first of equals)
//! becomes the pivot (`pivots[j]`, 1-based as LAPACK's), rows `j` and the
//! pivot row swap, the column below is divided by the pivot, and the
//! trailing block takes the rank-1 update. A zero pivot leaves the column
//! as it is and sets `info` to the first such column (1-based). Each step
//! works on whole matrices through masks, `O(m n)`, so a factorization is
//! `O(min(m, n) m n)` as LAPACK's; the unblocked order of operations
//! rounds differently from LAPACK's blocked one, within `1e-4` relative for
//! the well-conditioned f32 matrices of the tests (the error grows with the
//! condition number, as for any f32 solver). Half types compute in f32.

use crate::bail_op;
use crate::dtype::DType;
use crate::error::Result;
use crate::hlo::{Cmp, Elem, Func, Reducer, Ty, V};
use crate::ops::{Builder, Cx};

use super::{check_info, identity, mt, square};
use crate::ops::common::counted_loop;
use crate::shape;

pub(super) fn register(r: &mut Builder) {
    r.op(
        "aten::linalg_lu_factor_ex(Tensor A, *, bool pivot=True, bool check_errors=False) -> (Tensor LU, Tensor pivots, Tensor info)",
        |cx, a| {
            if !a.bool(1)? {
                bail_op!(&*cx.op, "linalg.lu_factor: LU without pivoting is not implemented on the CPU");
            }
            let f = factor(cx, a.tensor(0)?, "linalg.lu_factor")?;
            if a.bool(2)? {
                check_info(cx, f.info, "linalg.lu_factor: The factorization could not be completed because the input is singular");
            }
            let lu = cx.f.convert(f.lu, f.d);
            Ok(vec![lu, f.piv, f.info])
        },
    );
    r.op(
        "aten::lu_unpack(Tensor LU_data, Tensor LU_pivots, bool unpack_data=True, bool unpack_pivots=True) -> (Tensor P, Tensor L, Tensor U)",
        |cx, a| {
            let (lu, piv) = (a.tensor(0)?, a.tensor(1)?);
            let out = unpack(cx, lu, piv, a.bool(2)?, a.bool(3)?)?;
            Ok(out.to_vec())
        },
    );
    r.op("aten::linalg_lu(Tensor A, *, bool pivot=True) -> (Tensor P, Tensor L, Tensor U)", |cx, a| {
        if !a.bool(1)? {
            bail_op!(&*cx.op, "linalg.lu: LU without pivoting is not implemented on the CPU");
        }
        let f = factor(cx, a.tensor(0)?, "linalg.lu")?;
        let lu = cx.f.convert(f.lu, f.d);
        Ok(unpack(cx, lu, f.piv, true, true)?.to_vec())
    });
    r.op(
        "aten::linalg_lu_solve(Tensor LU, Tensor pivots, Tensor B, *, bool left=True, bool adjoint=False) -> Tensor",
        |cx, a| {
            let (lu, piv, b) = (a.tensor(0)?, a.tensor(1)?, a.tensor(2)?);
            Ok(vec![lu_solve(cx, lu, piv, b, a.bool(3)?, a.bool(4)?)?])
        },
    );
    r.op(
        "aten::_linalg_solve_ex(Tensor A, Tensor B, *, bool left=True, bool check_errors=False) -> (Tensor result, Tensor LU, Tensor pivots, Tensor info)",
        |cx, a| {
            let (am, b) = (a.tensor(0)?, a.tensor(1)?);
            let left = a.bool(2)?;
            let f = factor(cx, am, "linalg.solve")?;
            if a.bool(3)? {
                check_info(cx, f.info, "linalg.solve: The solver failed because the input matrix is singular.");
            }
            let lu = cx.f.convert(f.lu, f.d);
            let (ad, bd) = (cx.dims(am), cx.dims(b));
            // B is a batch of vectors when it has one dim less than A and
            // matches A's leading dims (PyTorch's rule).
            let vector = bd.len() + 1 == ad.len() && bd[..] == ad[..ad.len() - 1];
            let x = if vector {
                let mut col = bd.clone();
                col.push(1);
                let bc = cx.f.reshape(b, &col);
                let x = lu_solve(cx, lu, f.piv, bc, left, false)?;
                cx.f.reshape(x, &bd)
            } else {
                lu_solve(cx, lu, f.piv, b, left, false)?
            };
            Ok(vec![x, lu, f.piv, f.info])
        },
    );
    r.op("aten::linalg_inv_ex(Tensor A, *, bool check_errors=False) -> (Tensor inverse, Tensor info)", |cx, a| {
        let am = a.tensor(0)?;
        let dims = cx.dims(am);
        square(cx, &dims, "linalg.inv")?;
        let f = factor(cx, am, "linalg.inv")?;
        if a.bool(1)? {
            check_info(cx, f.info, "linalg.inv: The diagonal element is zero, the inversion could not be completed because the input matrix is singular.");
        }
        let lu = cx.f.convert(f.lu, f.d);
        let eye = identity(&mut cx.f, &dims, Elem::from(f.d));
        let x = lu_solve(cx, lu, f.piv, eye, true, false)?;
        Ok(vec![x, f.info])
    });
    r.op("aten::_linalg_det(Tensor A) -> (Tensor result, Tensor LU, Tensor pivots)", |cx, a| {
        let am = a.tensor(0)?;
        let f = factor_transposed(cx, am, "linalg.det")?;
        let (diag, flips) = diag_and_flips(cx, &f);
        let one = cx_one(&mut cx.f, f.d.opmath());
        let prod = cx.f.reduce(diag, one, &[f.batch.len()], Reducer::Mul);
        let det = cx.f.mul(prod, flips);
        let lu = cx.f.convert(f.lu, f.d);
        Ok(vec![cx.f.convert(det, f.d), lu, f.piv])
    });
    r.op("aten::_linalg_slogdet(Tensor A) -> (Tensor sign, Tensor logabsdet, Tensor LU, Tensor pivots)", |cx, a| {
        let am = a.tensor(0)?;
        let f = factor_transposed(cx, am, "linalg.slogdet")?;
        let (diag, flips) = diag_and_flips(cx, &f);
        let k = f.batch.len();
        let signs = cx.f.unary("stablehlo.sign", diag);
        let one = cx_one(&mut cx.f, f.d.opmath());
        let sign = cx.f.reduce(signs, one, &[k], Reducer::Mul);
        let sign = cx.f.mul(sign, flips);
        let mags = cx.f.unary("stablehlo.abs", diag);
        let logs = cx.f.unary("stablehlo.log", mags);
        let zero = cx.f.constant(Elem::from(f.d.opmath()), 0.0);
        let logabs = cx.f.reduce(logs, zero, &[k], Reducer::Add);
        let lu = cx.f.convert(f.lu, f.d);
        Ok(vec![cx.f.convert(sign, f.d), cx.f.convert(logabs, f.d), lu, f.piv])
    });
}

fn cx_one(f: &mut Func, d: DType) -> V {
    f.constant(Elem::from(d), 1.0)
}

/// The factorization of `A^T` that `_linalg_det` and `_linalg_slogdet`
/// return, as PyTorch's kernels do (their backward formulas expect that
/// one); `det(A^T) = det(A)`.
fn factor_transposed(cx: &mut Cx, a: V, what: &str) -> Result<Factor> {
    square(cx, &cx.dims(a), what)?;
    let at = mt(cx, a);
    factor(cx, at, what)
}

/// A factorization: `lu` in opmath `[..., m, n]`, `piv` int32
/// `[..., min(m, n)]`, `info` int32 `[...]`.
struct Factor {
    lu: V,
    piv: V,
    info: V,
    d: DType,
    batch: Vec<i64>,
    m: i64,
    n: i64,
}

fn factor(cx: &mut Cx, a: V, what: &str) -> Result<Factor> {
    let dims = cx.dims(a);
    if dims.len() < 2 {
        bail_op!(&*cx.op, "{what}: Expected tensor with 2 or more dimensions. Got size: {} instead", shape::fmt(&dims));
    }
    let d = super::float(cx, a, what)?;
    let od = d.opmath();
    let (m, n) = (dims[dims.len() - 2], dims[dims.len() - 1]);
    let k = m.min(n);
    let batch = dims[..dims.len() - 2].to_vec();
    let b = shape::numel(&batch);
    let mut piv_dims = batch.clone();
    piv_dims.push(k);
    let ac = cx.f.convert(a, od);
    if b == 0 || k == 0 {
        let piv = cx.f.splat_int(&Ty::new(Elem::I32, &piv_dims), 1);
        let info = cx.f.splat_int(&Ty::new(Elem::I32, &batch), 0);
        return Ok(Factor { lu: ac, piv, info, d, batch, m, n });
    }
    let lu0 = cx.f.reshape(ac, &[b, m, n]);
    let piv0 = cx.f.splat_int(&Ty::new(Elem::I32, &[b, k]), 0);
    let info0 = cx.f.splat_int(&Ty::new(Elem::I32, &[b]), 0);
    let out = counted_loop(&mut cx.f, &[lu0, piv0, info0], k, |f, s, j| step(f, s, j, b, m, n, k));
    let mut lu_dims = batch.clone();
    lu_dims.extend_from_slice(&[m, n]);
    let lu = cx.f.reshape(out[0], &lu_dims);
    let piv = cx.f.reshape(out[1], &piv_dims);
    let info = cx.f.reshape(out[2], &batch);
    Ok(Factor { lu, piv, info, d, batch, m, n })
}

/// Column `j` of `getf2` on `[b, m, n]` (carried: lu, pivots, info).
fn step(f: &mut Func, s: &[V], j: V, b: i64, m: i64, n: i64, k: i64) -> Vec<V> {
    let (lu, piv, info) = (s[0], s[1], s[2]);
    let bmn = [b, m, n];
    let ti = Ty::new(Elem::I64, &bmn);
    let rows = f.iota(&ti, 1);
    let cols = f.iota(&ti, 2);
    let jb = f.broadcast_in_dim(j, &[], &bmn);
    let zero = f.full_like(lu, 0.0);
    // Column j as [b, m].
    let in_col = f.compare(Cmp::Eq, cols, jb);
    let colv = f.select(in_col, lu, zero);
    let z0 = f.constant(f.ty(lu).elem, 0.0);
    let cj = f.reduce(colv, z0, &[2], Reducer::Add);
    // The pivot: the first row at or below j of largest magnitude.
    let tbm = Ty::new(Elem::I64, &[b, m]);
    let rv = f.iota(&tbm, 1);
    let jbm = f.broadcast_in_dim(j, &[], &[b, m]);
    let below = f.compare(Cmp::Ge, rv, jbm);
    let mag = f.unary("stablehlo.abs", cj);
    let neg1 = f.full_like(mag, -1.0);
    let cand = f.select(below, mag, neg1);
    let lowest = f.constant(f.ty(lu).elem, f64::NEG_INFINITY);
    let best = f.reduce(cand, lowest, &[1], Reducer::Max);
    let best_b = f.broadcast_in_dim(best, &[0], &[b, m]);
    let is_best = f.compare(Cmp::Eq, cand, best_b);
    let mv = f.splat_int(&tbm, m);
    let idx = f.select(is_best, rv, mv);
    let big = f.splat_int(&Ty::scalar(Elem::I64), m);
    let p = f.reduce(idx, big, &[1], Reducer::Min);
    // pivots[j] = p + 1.
    let tbk = Ty::new(Elem::I64, &[b, k]);
    let kv = f.iota(&tbk, 1);
    let jbk = f.broadcast_in_dim(j, &[], &[b, k]);
    let at_j = f.compare(Cmp::Eq, kv, jbk);
    let one64 = f.splat_int(&Ty::new(Elem::I64, &[b]), 1);
    let p1 = f.add(p, one64);
    let p1 = f.convert(p1, Elem::I32);
    let p1b = f.broadcast_in_dim(p1, &[0], &[b, k]);
    let piv = f.select(at_j, p1b, piv);
    // Swap rows j and p.
    let pb = f.broadcast_in_dim(p, &[0], &bmn);
    let is_j = f.compare(Cmp::Eq, rows, jb);
    let is_p = f.compare(Cmp::Eq, rows, pb);
    let row_of = |f: &mut Func, sel: V| {
        let v = f.select(sel, lu, zero);
        let z = f.constant(f.ty(lu).elem, 0.0);
        let r = f.reduce(v, z, &[1], Reducer::Add);
        f.broadcast_in_dim(r, &[0, 2], &bmn)
    };
    let row_j = row_of(f, is_j);
    let row_p = row_of(f, is_p);
    let lu = f.select(is_p, row_j, lu);
    let lu = f.select(is_j, row_p, lu);
    // The pivot value: column j's entry at row p (now at row j).
    let p_bm = f.broadcast_in_dim(p, &[0], &[b, m]);
    let at_p = f.compare(Cmp::Eq, rv, p_bm);
    let zbm = f.full_like(cj, 0.0);
    let pv = f.select(at_p, cj, zbm);
    let z1 = f.constant(f.ty(lu).elem, 0.0);
    let pivot = f.reduce(pv, z1, &[1], Reducer::Add);
    let pz = f.full_like(pivot, 0.0);
    let singular = f.compare(Cmp::Eq, pivot, pz);
    // Scale the column below the pivot (not when it is zero).
    let one = f.full_like(pivot, 1.0);
    let div = f.select(singular, one, pivot);
    let div_b = f.broadcast_in_dim(div, &[0], &bmn);
    let col_now = f.select(in_col, lu, zero);
    let z2 = f.constant(f.ty(lu).elem, 0.0);
    let col_now = f.reduce(col_now, z2, &[2], Reducer::Add);
    let col_b = f.broadcast_in_dim(col_now, &[0, 1], &bmn);
    let l = f.div(col_b, div_b);
    let after = f.compare(Cmp::Gt, rows, jb);
    let set_l = f.and(after, in_col);
    let lu = f.select(set_l, l, lu);
    // Trailing update: A[r, c] -= l[r] * U[j, c] for r > j, c > j.
    let right = f.compare(Cmp::Gt, cols, jb);
    let trail = f.and(after, right);
    let prod = f.mul(l, row_p);
    let upd = f.sub(lu, prod);
    let lu = f.select(trail, upd, lu);
    // info: the first zero pivot (1-based).
    let i0 = f.splat_int(&Ty::new(Elem::I32, &[b]), 0);
    let no_info = f.compare(Cmp::Eq, info, i0);
    let mark = f.and(singular, no_info);
    let jj = f.convert(j, Elem::I32);
    let j1 = f.broadcast_in_dim(jj, &[], &[b]);
    let one32 = f.splat_int(&Ty::new(Elem::I32, &[b]), 1);
    let j1 = f.add(j1, one32);
    let info = f.select(mark, j1, info);
    vec![lu, piv, info]
}

/// The row permutation the pivots apply, `perm[i]` = the original row at
/// position `i` (`[batch..., m]`, int64), by the swaps in order.
fn permutation(cx: &mut Cx, piv: V, m: i64) -> V {
    let pd = cx.dims(piv);
    let k = *pd.last().unwrap();
    let batch = pd[..pd.len() - 1].to_vec();
    let b = shape::numel(&batch).max(1);
    let mut out_dims = batch.clone();
    out_dims.push(m);
    let perm0 = cx.f.iota(&Ty::new(Elem::I64, &[b, m]), 1);
    if k == 0 || m == 0 {
        return cx.f.reshape(perm0, &out_dims);
    }
    let piv = cx.f.convert(piv, Elem::I64);
    let piv = cx.f.reshape(piv, &[b, k]);
    let out = counted_loop(&mut cx.f, &[perm0, piv], k, |f, s, i| {
        let (perm, piv) = (s[0], s[1]);
        let tbk = Ty::new(Elem::I64, &[b, k]);
        let kv = f.iota(&tbk, 1);
        let ib = f.broadcast_in_dim(i, &[], &[b, k]);
        let at = f.compare(Cmp::Eq, kv, ib);
        let z = f.splat_int(&tbk, 0);
        let t = f.select(at, piv, z);
        let zs = f.splat_int(&Ty::scalar(Elem::I64), 0);
        let target = f.reduce(t, zs, &[1], Reducer::Add);
        let one = f.splat_int(&Ty::new(Elem::I64, &[b]), 1);
        let target = f.sub(target, one);
        // Swap perm[i] and perm[target].
        let tbm = Ty::new(Elem::I64, &[b, m]);
        let pos = f.iota(&tbm, 1);
        let ibm = f.broadcast_in_dim(i, &[], &[b, m]);
        let tb = f.broadcast_in_dim(target, &[0], &[b, m]);
        let is_i = f.compare(Cmp::Eq, pos, ibm);
        let is_t = f.compare(Cmp::Eq, pos, tb);
        let zm = f.splat_int(&tbm, 0);
        let zs2 = f.splat_int(&Ty::scalar(Elem::I64), 0);
        let vi = f.select(is_i, perm, zm);
        let vi = f.reduce(vi, zs2, &[1], Reducer::Add);
        let vt = f.select(is_t, perm, zm);
        let zs3 = f.splat_int(&Ty::scalar(Elem::I64), 0);
        let vt = f.reduce(vt, zs3, &[1], Reducer::Add);
        let vib = f.broadcast_in_dim(vi, &[0], &[b, m]);
        let vtb = f.broadcast_in_dim(vt, &[0], &[b, m]);
        let perm = f.select(is_t, vib, perm);
        let perm = f.select(is_i, vtb, perm);
        vec![perm, piv]
    });
    cx.f.reshape(out[0], &out_dims)
}

/// `lu_unpack`: `P` (`A = P L U`), unit-lower `L` `[m, k]`, upper `U` `[k, n]`.
fn unpack(cx: &mut Cx, lu: V, piv: V, data: bool, pivots: bool) -> Result<[V; 3]> {
    let dims = cx.dims(lu);
    if dims.len() < 2 {
        bail_op!(&*cx.op, "lu_unpack: LU_data must have at least 2 dimensions");
    }
    let d = cx.dtype(lu);
    let (m, n) = (dims[dims.len() - 2], dims[dims.len() - 1]);
    let k = m.min(n);
    let batch = dims[..dims.len() - 2].to_vec();
    let pd = cx.dims(piv);
    let mut want = batch.clone();
    want.push(k);
    if pd != want || !matches!(cx.dtype(piv), DType::I32 | DType::I64) {
        bail_op!(&*cx.op, "lu_unpack: LU_pivots must be an int32 tensor of size {}, got {} of {}", shape::fmt(&want), cx.dtype(piv), shape::fmt(&pd));
    }
    let empty = |cx: &mut Cx| cx.f.splat(&Ty::new(Elem::from(d), &[0]), 0.0);
    let (l, u) = if data {
        let t = Ty::new(Elem::I64, &dims);
        let (r_, c_) = (cx.f.iota(&t, dims.len() - 2), cx.f.iota(&t, dims.len() - 1));
        let below = cx.f.compare(Cmp::Gt, r_, c_);
        let diag = cx.f.compare(Cmp::Eq, r_, c_);
        let zero = cx.f.full_like(lu, 0.0);
        let one = cx.f.full_like(lu, 1.0);
        let l = cx.f.select(below, lu, zero);
        let l = cx.f.select(diag, one, l);
        let above = cx.f.not(below);
        let u = cx.f.select(above, lu, zero);
        let r = dims.len();
        let l = cx.f.slice_dim(l, r - 1, 0, k, 1);
        let u = cx.f.slice_dim(u, r - 2, 0, k, 1);
        (l, u)
    } else {
        (empty(cx), empty(cx))
    };
    let p = if pivots {
        let perm = permutation(cx, piv, m);
        // P[perm[i], i] = 1.
        let mut pdims = batch.clone();
        pdims.extend_from_slice(&[m, m]);
        let r = pdims.len();
        let rows = cx.f.iota(&Ty::new(Elem::I64, &pdims), r - 2);
        let pb = cx.f.broadcast_in_dim(perm, &(0..r as i64).filter(|&x| x != r as i64 - 2).collect::<Vec<_>>(), &pdims);
        let hit = cx.f.compare(Cmp::Eq, rows, pb);
        let one = cx.f.splat(&Ty::new(Elem::from(d), &pdims), 1.0);
        let zero = cx.f.splat(&Ty::new(Elem::from(d), &pdims), 0.0);
        cx.f.select(hit, one, zero)
    } else {
        empty(cx)
    };
    Ok([p, l, u])
}

/// Solves `A X = B` (or `A^H X = B` for `adjoint`; `X A = B` when not
/// `left`) from `A`'s LU factorization.
fn lu_solve(cx: &mut Cx, lu: V, piv: V, b: V, left: bool, adjoint: bool) -> Result<V> {
    if !left {
        // X A = B  <=>  A^T X^T = B^T.
        let bt = mt(cx, b);
        let x = lu_solve(cx, lu, piv, bt, true, !adjoint)?;
        return Ok(mt(cx, x));
    }
    let (ld, bd) = (cx.dims(lu), cx.dims(b));
    square(cx, &ld, "linalg.lu_solve")?;
    let n = ld[ld.len() - 1];
    if bd.len() < 2 || bd[bd.len() - 2] != n {
        bail_op!(&*cx.op, "linalg.lu_solve: Incompatible shapes of A and B for the equation AX = B ({}x{} and {})", n, n, shape::fmt(&bd));
    }
    let d = cx.dtype(lu);
    if cx.dtype(b) != d {
        bail_op!(&*cx.op, "linalg.lu_solve: Expected LU and B to have the same dtype, but found LU of type {d} and B of type {} instead", cx.dtype(b));
    }
    let batch = shape::broadcast(&cx.op, &ld[..ld.len() - 2], &bd[..bd.len() - 2])?.to_vec();
    let nrhs = bd[bd.len() - 1];
    let mut lu_full = batch.clone();
    lu_full.extend_from_slice(&[n, n]);
    let mut b_full = batch.clone();
    b_full.extend_from_slice(&[n, nrhs]);
    let mut piv_full = batch.clone();
    piv_full.push(n);
    let od = d.opmath();
    if shape::numel(&b_full) == 0 {
        return Ok(cx.f.splat(&Ty::new(Elem::from(d), &b_full), 0.0));
    }
    let luc = cx.f.convert(lu, od);
    let luc = cx.f.broadcast_to(luc, &lu_full);
    let bc = cx.f.convert(b, od);
    let bc = cx.f.broadcast_to(bc, &b_full);
    let pivb = cx.f.broadcast_to(piv, &piv_full);
    let perm = permutation(cx, pivb, n);
    let r = b_full.len();
    // Row gather / scatter by the permutation through a one-hot matrix.
    let mut pm_dims = batch.clone();
    pm_dims.extend_from_slice(&[n, n]);
    let cols = cx.f.iota(&Ty::new(Elem::I64, &pm_dims), r - 1);
    let keep: Vec<i64> = (0..r as i64).filter(|&x| x != r as i64 - 1).collect();
    let perm_b = cx.f.broadcast_in_dim(perm, &keep, &pm_dims);
    // Q[i, c] = 1 where c == perm[i]: (Q B)[i] = B[perm[i]].
    let hit = cx.f.compare(Cmp::Eq, cols, perm_b);
    let one = cx.f.splat(&Ty::new(Elem::from(od), &pm_dims), 1.0);
    let zero = cx.f.splat(&Ty::new(Elem::from(od), &pm_dims), 0.0);
    let q = cx.f.select(hit, one, zero);
    let solve = |cx: &mut Cx, a: V, x: V, lower: bool, unit: bool, transpose: bool| {
        let ty = cx.ty(x).clone();
        let attrs = format!(
            "left_side = true, lower = {lower}, unit_diagonal = {unit}, transpose_a = #stablehlo<transpose {}>",
            if transpose { "TRANSPOSE" } else { "NO_TRANSPOSE" }
        );
        cx.f.op("stablehlo.triangular_solve", &[a, x], &[], &attrs, &[ty])[0]
    };
    let x = if !adjoint {
        let pb = super::matmul(cx, q, bc)?;
        let y = solve(cx, luc, pb, true, true, false);
        solve(cx, luc, y, false, false, false)
    } else {
        // A^T = U^T L^T P^T: U^T y = B, L^T z = y, X = P z = Q^T z.
        let y = solve(cx, luc, bc, false, false, true);
        let z = solve(cx, luc, y, true, true, true);
        let qt = mt(cx, q);
        super::matmul(cx, qt, z)?
    };
    Ok(cx.f.convert(x, d))
}

/// The diagonal of U (`[..., n]`, opmath) and the permutation's sign
/// (`[...]`, +1 or -1 by the number of pivots that moved a row).
fn diag_and_flips(cx: &mut Cx, f: &Factor) -> (V, V) {
    let od = f.d.opmath();
    let mut dims = f.batch.clone();
    dims.extend_from_slice(&[f.m, f.n]);
    let r = dims.len();
    let t = Ty::new(Elem::I64, &dims);
    let (r_, c_) = (cx.f.iota(&t, r - 2), cx.f.iota(&t, r - 1));
    let on = cx.f.compare(Cmp::Eq, r_, c_);
    let zero = cx.f.full_like(f.lu, 0.0);
    let dv = cx.f.select(on, f.lu, zero);
    let z = cx.f.constant(Elem::from(od), 0.0);
    let diag = cx.f.reduce(dv, z, &[r - 1], Reducer::Add);
    let k = f.m.min(f.n);
    let mut pd = f.batch.clone();
    pd.push(k);
    let pos = cx.f.iota(&Ty::new(Elem::I32, &pd), f.batch.len());
    let one = cx.f.splat_int(&Ty::new(Elem::I32, &pd), 1);
    let pos1 = cx.f.add(pos, one);
    let moved = cx.f.compare(Cmp::Ne, f.piv, pos1);
    let moved = cx.f.convert(moved, Elem::from(od));
    let z2 = cx.f.constant(Elem::from(od), 0.0);
    let count = cx.f.reduce(moved, z2, &[f.batch.len()], Reducer::Add);
    // (-1)^count = 1 - 2 (count mod 2).
    let two = cx.f.full_like(count, 2.0);
    let rem = cx.f.binary("stablehlo.remainder", count, two);
    let one_f = cx.f.full_like(count, 1.0);
    let twice = cx.f.mul(two, rem);
    let flips = cx.f.sub(one_f, twice);
    (diag, flips)
}
