//! Cholesky factorization and triangular solves, on StableHLO's native
//! `stablehlo.cholesky` and `stablehlo.triangular_solve` (no LAPACK call,
//! so the same program runs on a TPU), batched over leading dims:
//!
//! - `linalg_cholesky_ex`: `L` with `A = L L^T` (or `U^T U`) and `info`, the
//!   order of the first leading minor that is not positive-definite (0 when
//!   none; read from the first diagonal entry of the factor that is not a
//!   positive number). `torch.linalg.cholesky` raises on a nonzero `info`
//!   through PyTorch's own check, which reads it on the host.
//! - `linalg_solve_triangular` (`A X = B` or `X A = B`, batch dims
//!   broadcast), `triangular_solve` (the older form), `_cholesky_solve_helper`
//!   (two triangular solves) and `cholesky_inverse` (the solve of `I`).
//!
//! Accuracy: XLA's blocked Cholesky and triangular solve in f32 agree with
//! LAPACK's to rounding for well-conditioned input; the error grows with
//! the condition number as any f32 factorization's does (the tests compare
//! at 1e-4 relative on matrices with condition numbers up to about 1e3).
//! Half types compute in f32.

use crate::bail_op;
use crate::error::Result;
use crate::hlo::{Cmp, Elem, Reducer, Ty, V};
use crate::ops::{Builder, Cx};

use super::{check_info, float, identity, mt, square};
use crate::shape;

pub(super) fn register(r: &mut Builder) {
    r.op("aten::linalg_cholesky_ex(Tensor self, *, bool upper=False, bool check_errors=False) -> (Tensor L, Tensor info)", |cx, a| {
        let (l, info) = cholesky(cx, a.tensor(0)?, a.bool(1)?)?;
        if a.bool(2)? {
            check_info(cx, info, "linalg.cholesky: The factorization could not be completed because the input is not positive-definite");
        }
        Ok(vec![l, info])
    });
    r.op(
        "aten::linalg_solve_triangular(Tensor self, Tensor B, *, bool upper, bool left=True, bool unitriangular=False) -> Tensor",
        |cx, a| Ok(vec![solve_triangular(cx, a.tensor(0)?, a.tensor(1)?, a.bool(2)?, a.bool(3)?, a.bool(4)?, false)?]),
    );
    r.op(
        "aten::triangular_solve(Tensor self, Tensor A, bool upper=True, bool transpose=False, bool unitriangular=False) \
         -> (Tensor solution, Tensor cloned_coefficient)",
        |cx, a| {
            let (b, m) = (a.tensor(0)?, a.tensor(1)?);
            let (upper, transpose, unit) = (a.bool(2)?, a.bool(3)?, a.bool(4)?);
            let x = solve_triangular(cx, m, b, upper, true, unit, transpose)?;
            // The coefficient, broadcast to the solution's batch dims.
            let (md, xd) = (cx.dims(m), cx.dims(x));
            let mut want = xd[..xd.len() - 2].to_vec();
            want.extend_from_slice(&md[md.len() - 2..]);
            Ok(vec![x, cx.f.broadcast_to(m, &want)])
        },
    );
    r.op("aten::_cholesky_solve_helper(Tensor self, Tensor A, bool upper) -> Tensor", |cx, a| {
        let (b, l) = (a.tensor(0)?, a.tensor(1)?);
        Ok(vec![cholesky_solve(cx, b, l, a.bool(2)?)?])
    });
    r.op("aten::cholesky_inverse(Tensor self, bool upper=False) -> Tensor", |cx, a| {
        let l = a.tensor(0)?;
        let dims = cx.dims(l);
        square(cx, &dims, "cholesky_inverse")?;
        let elem = Elem::from(cx.dtype(l));
        let eye = identity(&mut cx.f, &dims, elem);
        Ok(vec![cholesky_solve(cx, eye, l, a.bool(1)?)?])
    });
}

/// `true` on and below (or above, `upper`) the diagonal of `[..., n, n]`.
fn triangle(cx: &mut Cx, dims: &[i64], upper: bool) -> V {
    let t = Ty::new(Elem::I64, dims);
    let (r_, c_) = (cx.f.iota(&t, dims.len() - 2), cx.f.iota(&t, dims.len() - 1));
    cx.f.compare(if upper { Cmp::Le } else { Cmp::Ge }, r_, c_)
}

/// The lower factor (its transpose for `upper`), zero elsewhere, and info.
fn cholesky(cx: &mut Cx, x: V, upper: bool) -> Result<(V, V)> {
    let dims = cx.dims(x);
    square(cx, &dims, "linalg.cholesky")?;
    let d = float(cx, x, "linalg.cholesky")?;
    let od = d.opmath();
    let xc = cx.f.convert(x, od);
    let n = dims[dims.len() - 1];
    let batch = dims[..dims.len() - 2].to_vec();
    if n == 0 {
        let info = cx.f.splat_int(&Ty::new(Elem::I32, &batch), 0);
        return Ok((x, info));
    }
    let ty = cx.ty(xc).clone();
    let l = cx.f.op("stablehlo.cholesky", &[xc], &[], "lower = true", &[ty])[0];
    let keep = triangle(cx, &dims, false);
    let zero = cx.f.full_like(l, 0.0);
    let l = cx.f.select(keep, l, zero);
    // info: 1 + the first diagonal position that is not a positive number.
    let t = Ty::new(Elem::I64, &dims);
    let (r_, c_) = (cx.f.iota(&t, dims.len() - 2), cx.f.iota(&t, dims.len() - 1));
    let on = cx.f.compare(Cmp::Eq, r_, c_);
    let diag_vals = cx.f.select(on, l, zero);
    let rk = dims.len() - 1;
    let z0 = cx.f.constant(Elem::from(od), 0.0);
    let diag = cx.f.reduce(diag_vals, z0, &[rk], Reducer::Add);
    let dz = cx.f.full_like(diag, 0.0);
    let good = cx.f.compare(Cmp::Gt, diag, dz);
    let bad = cx.f.not(good);
    let mut vd = batch.clone();
    vd.push(n);
    let k1 = {
        let k = cx.f.iota(&Ty::new(Elem::I64, &vd), batch.len());
        let one = cx.f.splat_int(&Ty::new(Elem::I64, &vd), 1);
        cx.f.add(k, one)
    };
    let never = cx.f.splat_int(&Ty::new(Elem::I64, &vd), n + 1);
    let pos = cx.f.select(bad, k1, never);
    let init = cx.f.splat_int(&Ty::scalar(Elem::I64), n + 1);
    let first = cx.f.reduce(pos, init, &[batch.len()], Reducer::Min);
    let none = cx.f.splat_int(&Ty::new(Elem::I64, &batch), n + 1);
    let ok = cx.f.compare(Cmp::Eq, first, none);
    let zero_i = cx.f.splat_int(&Ty::new(Elem::I64, &batch), 0);
    let info = cx.f.select(ok, zero_i, first);
    let info = cx.f.convert(info, Elem::I32);
    let l = if upper { mt(cx, l) } else { l };
    Ok((cx.f.convert(l, d), info))
}

/// Solves `A X = B` (`left`) or `X A = B` with triangular `A` (only its
/// `upper` or lower triangle is read; `unit`: ones on the diagonal), or
/// with `A^T` when `transpose_a`. Batch dims broadcast.
fn solve_triangular(cx: &mut Cx, a: V, b: V, upper: bool, left: bool, unit: bool, transpose_a: bool) -> Result<V> {
    let (ad, bd) = (cx.dims(a), cx.dims(b));
    let what = "linalg.solve_triangular";
    square(cx, &ad, what)?;
    if bd.len() < 2 {
        bail_op!(&*cx.op, "{what}: The input tensor B must have at least 2 dimensions.");
    }
    let n = ad[ad.len() - 1];
    let (br, bc) = (bd[bd.len() - 2], bd[bd.len() - 1]);
    if (left && br != n) || (!left && bc != n) {
        bail_op!(
            &*cx.op,
            "{what}: Incompatible shapes of A and B for the equation {} ({}x{} and {}x{})",
            if left { "AX = B" } else { "XA = B" },
            n,
            n,
            br,
            bc
        );
    }
    let d = float(cx, a, what)?;
    if cx.dtype(b) != d {
        bail_op!(&*cx.op, "{what}: Expected A and B to have the same dtype, but found A of type {d} and B of type {} instead.", cx.dtype(b));
    }
    let batch = shape::broadcast(&cx.op, &ad[..ad.len() - 2], &bd[..bd.len() - 2])?.to_vec();
    let mut a_full = batch.clone();
    a_full.extend_from_slice(&[n, n]);
    let mut b_full = batch.clone();
    b_full.extend_from_slice(&[br, bc]);
    if shape::numel(&b_full) == 0 || n == 0 {
        return Ok(cx.f.splat(&Ty::new(Elem::from(d), &b_full), 0.0));
    }
    let od = d.opmath();
    let ac = cx.f.convert(a, od);
    let ac = cx.f.broadcast_to(ac, &a_full);
    let bc_ = cx.f.convert(b, od);
    let bc_ = cx.f.broadcast_to(bc_, &b_full);
    let ty = cx.ty(bc_).clone();
    let attrs = format!(
        "left_side = {left}, lower = {}, unit_diagonal = {unit}, transpose_a = #stablehlo<transpose {}>",
        !upper,
        if transpose_a { "TRANSPOSE" } else { "NO_TRANSPOSE" }
    );
    let x = cx.f.op("stablehlo.triangular_solve", &[ac, bc_], &[], &attrs, &[ty])[0];
    Ok(cx.f.convert(x, d))
}

/// `(L L^T) X = B` (or `(U^T U) X = B`): two triangular solves.
fn cholesky_solve(cx: &mut Cx, b: V, l: V, upper: bool) -> Result<V> {
    // lower: L Y = B, then L^T X = Y; upper: U^T Y = B, then U X = Y.
    let y = solve_triangular(cx, l, b, upper, true, false, upper)?;
    solve_triangular(cx, l, y, upper, true, false, !upper)
}
