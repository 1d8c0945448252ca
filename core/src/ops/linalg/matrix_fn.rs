//! Functions of matrices: `linalg_matrix_exp` and `linalg_matrix_sqrth`.
//!
//! - **matrix_exp** by scaling and squaring: each matrix is scaled by
//!   `2^-s`, with `s` the smallest count that brings its 1-norm to at most
//!   1/2 (chosen per matrix on the device), the exponential of the scaled
//!   matrix is its Taylor polynomial of degree 16 (truncation error below
//!   `0.5^17 / 17! ~ 2e-20`, under f64 rounding), then squared `s` times in
//!   a while loop that runs to the largest `s` of the batch and leaves
//!   each matrix alone past its own, all in f64 (an f32 input is widened
//!   and rounded once), so the result is as accurate as the f32 rounding
//!   allows. An infinite or NaN norm gives NaN, as on the CPU.
//! - **matrix_sqrth**, the square root of a symmetric positive
//!   semi-definite matrix: `V diag(sqrt(w)) Vᵀ` from the Jacobi `eigh` of
//!   its lower triangle, with negative eigenvalues (rounding, or an
//!   indefinite input) taken as 0, as the CPU kernel does.
//!
//! Their gradients are PyTorch's (`linalg_matrix_exp_differential` is the
//! exponential of a block matrix; the square root's solves a Sylvester
//! equation through the same eigendecomposition).

use crate::error::Result;
use crate::hlo::{Cmp, Elem, Reducer, Ty, V};
use crate::ops::{Builder, Cx};
use crate::shape;

use super::{jacobi, mt, square};

/// Degree of the Taylor polynomial.
const DEGREE: usize = 16;
/// The 1-norm the scaled matrix must not exceed.
const THETA: f64 = 0.5;

pub(super) fn register(r: &mut Builder) {
    r.op("aten::linalg_matrix_exp(Tensor self) -> Tensor", |cx, a| Ok(vec![matrix_exp(cx, a.tensor(0)?)?]));
    r.op("aten::linalg_matrix_sqrth(Tensor self) -> Tensor", |cx, a| {
        let x = a.tensor(0)?;
        let parts = jacobi::eigh(cx, x, false, true)?;
        let (w, v) = (parts[0], parts[1]);
        let zero = cx.f.full_like(w, 0.0);
        let w = cx.f.max(w, zero);
        let s = cx.f.unary("stablehlo.sqrt", w);
        let dims = cx.dims(v);
        let r = dims.len();
        let keep: Vec<i64> = (0..r as i64 - 2).chain([r as i64 - 1]).collect();
        let sb = cx.f.broadcast_in_dim(s, &keep, &dims);
        let vs = cx.f.mul(v, sb);
        let vt = mt(cx, v);
        let batch: Vec<usize> = (0..r - 2).collect();
        let elem = cx.ty(v).elem;
        Ok(vec![cx.f.dot_general(vs, vt, &batch, &batch, &[r - 1], &[r - 2], elem)])
    });
}

fn matrix_exp(cx: &mut Cx, x: V) -> Result<V> {
    let dims = cx.dims(x);
    square(cx, &dims, "linalg.matrix_exp")?;
    let d = super::float(cx, x, "linalg.matrix_exp")?;
    // In f64 whatever the input: each squaring doubles the rounding error
    // of the last, and f32 squarings lose to the CPU's f32 kernel (degree 18
    // with fewer squarings) by 40x on matrices of norm ~40.
    let od = crate::dtype::DType::F64;
    let elem = Elem::from(od);
    let n = dims[dims.len() - 1];
    let b = shape::numel(&dims[..dims.len() - 2]);
    if b == 0 || n == 0 {
        return Ok(x);
    }
    let xc = cx.f.convert(x, od);
    let a = cx.f.reshape(xc, &[b, n, n]);
    // s = max(0, ceil(log2(|A|_1 / θ))) per matrix.
    let abs = cx.f.unary("stablehlo.abs", a);
    let z = cx.f.constant(elem, 0.0);
    let colsum = cx.f.reduce(abs, z, &[1], Reducer::Add);
    let ninf = cx.f.constant(elem, f64::NEG_INFINITY);
    let norm = cx.f.reduce(colsum, ninf, &[1], Reducer::Max);
    let theta = cx.f.full_like(norm, THETA);
    let ratio = cx.f.div(norm, theta);
    let l2 = cx.f.unary("stablehlo.log", ratio);
    let ln2 = cx.f.full_like(l2, std::f64::consts::LN_2);
    let l2 = cx.f.div(l2, ln2);
    let s = cx.f.unary("stablehlo.ceil", l2);
    let zero = cx.f.full_like(s, 0.0);
    let s = cx.f.max(s, zero);
    // Past the exponent range every square overflows anyway; the cap
    // keeps the loop bounded for an infinite (or NaN) norm.
    let cap = cx.f.full_like(s, if od == crate::dtype::DType::F64 { 1100.0 } else { 160.0 });
    let s = cx.f.min(s, cap);
    let finite = cx.f.compare(Cmp::Eq, s, s);
    let s = cx.f.select(finite, s, cap);
    // A 2^-s.
    let two = cx.f.full_like(s, 2.0);
    let ns = cx.f.neg(s);
    let scale = cx.f.binary("stablehlo.power", two, ns);
    let sb = cx.f.broadcast_in_dim(scale, &[0], &[b, n, n]);
    let a_s = cx.f.mul(a, sb);
    // Horner: E = I + A/1 (I + A/2 (I + ... (I + A/DEGREE))).
    let eye = super::identity(&mut cx.f, &[b, n, n], elem);
    let mut e = eye;
    for k in (1..=DEGREE).rev() {
        let c = cx.f.full_like(a_s, 1.0 / k as f64);
        let ak = cx.f.mul(a_s, c);
        let p = cx.f.dot_general(ak, e, &[0], &[0], &[2], &[1], elem);
        e = cx.f.add(eye, p);
    }
    // Square each matrix s times.
    let si = cx.f.convert(s, Elem::I64);
    let zi = cx.f.splat_int(&Ty::scalar(Elem::I64), 0);
    let most = cx.f.reduce(si, zi, &[0], Reducer::Max);
    let tys = [cx.ty(e).clone(), cx.ty(si).clone(), Ty::scalar(Elem::I64), Ty::scalar(Elem::I64)];
    let cond = cx.f.region(&tys, |f, v| vec![f.compare(Cmp::Lt, v[2], v[3])]);
    let body = cx.f.region(&tys, |f, v| {
        let (e, si, i, most) = (v[0], v[1], v[2], v[3]);
        let sq = f.dot_general(e, e, &[0], &[0], &[2], &[1], elem);
        let ib = f.broadcast_in_dim(i, &[], &[b]);
        let more = f.compare(Cmp::Lt, ib, si);
        let mb = f.broadcast_in_dim(more, &[0], &[b, n, n]);
        let e = f.select(mb, sq, e);
        let one = f.splat_int(&Ty::scalar(Elem::I64), 1);
        vec![e, si, f.add(i, one), most]
    });
    let out = cx.f.op("stablehlo.while", &[e, si, zi, most], &[cond, body], "", &tys);
    let mut e = out[0];
    // NaN for a matrix with a non-finite entry (its norm is inf or NaN).
    let inf = cx.f.full_like(norm, f64::INFINITY);
    let bad = cx.f.compare(Cmp::Lt, norm, inf);
    let bad = cx.f.not(bad);
    let bb = cx.f.broadcast_in_dim(bad, &[0], &[b, n, n]);
    let nan = cx.f.full_like(e, f64::NAN);
    e = cx.f.select(bb, nan, e);
    let e = cx.f.reshape(e, &dims);
    Ok(cx.f.convert(e, d))
}
