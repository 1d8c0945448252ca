//! The general (non-symmetric) eigendecomposition: `linalg_eig` and
//! `_linalg_eigvals`, by the complex Schur form, as LAPACK's `zgeev` does.
//!
//! In complex128 throughout (float32 inputs too, so that deflation can ask
//! for double precision):
//! 1. Givens similarity rotations reduce `A` to upper Hessenberg form
//!    `H = Qᴴ A Q`.
//! 2. The shifted QR algorithm: each iteration factors `H - μI` with one
//!    Givens rotation per subdiagonal and multiplies back, `RQ + μI`, with
//!    the Wilkinson shift `μ` (the eigenvalue of the trailing 2x2 of the
//!    unreduced window nearer its last entry; an exceptional shift every
//!    tenth iteration breaks cycles). A subdiagonal entry below
//!    `eps (|h[i-1,i-1]| + |h[i,i]|)` is set to zero and the window's end
//!    moves up. Every matrix of a batch has its own window; all advance in
//!    one `stablehlo.while` of at most 30 iterations per eigenvalue, and a
//!    matrix that has not converged by then is reported at the next host
//!    read (LAPACK's "failed to converge"). The rotations accumulate into
//!    the Schur vectors `Z`, with `A = Z T Zᴴ`, `T` upper triangular.
//! 3. The eigenvalues are `T`'s diagonal, in the order the Schur form gives
//!    them (LAPACK's order differs; neither is specified). The eigenvectors
//!    of `T` come from back substitution (`(T - λ_k I) y = 0` with
//!    `y_k = 1`, a near-zero pivot replaced by `eps * max|T|` as LAPACK
//!    does), then `Z y`, each normalized to unit norm with its largest
//!    component real and positive.
//!
//! Against LAPACK on random float32 matrices the eigenvalues agree to about
//! 1e-6 relative (the float32 rounding of the results).

use crate::bail_op;
use crate::dtype::DType;
use crate::error::Result;
use crate::hlo::{Cmp, Elem, Func, Reducer, Ty, V};
use crate::ops::common::{any, counted_loop};
use crate::shape;

use super::super::{Builder, Cx};
use super::{identity, square};

/// The working type and its unit roundoff.
const WORK: Elem = Elem::C128;
const EPS: f64 = f64::EPSILON;
/// LAPACK's bound on QR iterations per eigenvalue.
const ITERATIONS_PER_EIGENVALUE: i64 = 30;

pub(super) fn register(r: &mut Builder) {
    r.op("aten::linalg_eig(Tensor self) -> (Tensor eigenvalues, Tensor eigenvectors)", |cx, a| eig(cx, a.tensor(0)?, true));
    r.op("aten::_linalg_eigvals(Tensor self) -> Tensor", |cx, a| eig(cx, a.tensor(0)?, false));
}

fn eig(cx: &mut Cx, x: V, vectors: bool) -> Result<Vec<V>> {
    let dims = cx.dims(x);
    if dims.len() < 2 {
        bail_op!(&*cx.op, "linalg.eig: The input tensor A must have at least 2 dimensions.");
    }
    square(cx, &dims, "linalg.eig")?;
    let d = cx.dtype(x);
    let out = match d {
        DType::F32 => DType::C64,
        DType::F64 => DType::C128,
        _ => bail_op!(&*cx.op, "linalg.eig: Expected a floating point tensor as input (float32 or float64). Got {d}"),
    };
    let r = dims.len();
    let n = dims[r - 1];
    let batch = dims[..r - 2].to_vec();
    let b = shape::numel(&batch);
    let with = |last: &[i64]| -> Vec<i64> { batch.iter().chain(last).copied().collect() };
    if b == 0 || n == 0 {
        let w = cx.f.splat(&Ty::new(out, &with(&[n])), 0.0);
        let v = cx.f.splat(&Ty::new(out, &with(&[n, n])), 0.0);
        return Ok(if vectors { vec![w, v] } else { vec![w] });
    }
    // PyTorch refuses non-finite input before LAPACK sees it.
    let finite = cx.f.unary_to("stablehlo.is_finite", x, Elem::Pred);
    cx.check_values(finite, "linalg.eig: input tensor should not contain infs or NaNs.");
    let a = cx.f.reshape(x, &[b, n, n]);
    let a = cx.f.convert(a, WORK);
    let q0 = identity(&mut cx.f, &[b, n, n], WORK);
    let (h, q) = hessenberg(&mut cx.f, a, q0, b, n);
    let (t, z, m) = schur(&mut cx.f, h, q, b, n);
    let zero = cx.f.splat_int(&Ty::new(Elem::I64, &[b]), 0);
    let done = cx.f.compare(Cmp::Eq, m, zero);
    cx.check_values(
        done,
        "linalg.eig: The algorithm failed to converge because the input matrix is ill-conditioned or has too many \
         repeated eigenvalues",
    );
    let w = diagonal(&mut cx.f, t, b, n);
    let w_out = cx.f.reshape(w, &with(&[n]));
    let w_out = cx.f.convert(w_out, out);
    if !vectors {
        return Ok(vec![w_out]);
    }
    let y = triangular_vectors(&mut cx.f, t, w, b, n);
    let v = cx.f.dot_general(z, y, &[0], &[0], &[2], &[1], WORK);
    let v = normalize(&mut cx.f, v, b, n);
    let v = cx.f.reshape(v, &with(&[n, n]));
    Ok(vec![w_out, cx.f.convert(v, out)])
}

// ------------------------------------------------------------------ helpers

/// `|x|` of a complex value, as a real value.
fn modulus(f: &mut Func, x: V) -> V {
    f.unary_to("stablehlo.abs", x, WORK.real())
}

fn i64_scalar(f: &mut Func, v: i64) -> V {
    f.splat_int(&Ty::scalar(Elem::I64), v)
}

/// Entry `(i, j)` (rank-0 i64 indices) of every matrix, as `[b]`.
fn entry(f: &mut Func, x: V, i: V, j: V, b: i64) -> V {
    let zero = i64_scalar(f, 0);
    let e = f.dynamic_slice(x, &[zero, i, j], &[b, 1, 1]);
    f.reshape(e, &[b])
}

/// Row (`axis` 1) or column (`axis` 2) `k` of every matrix, as `[b, n]`.
fn line(f: &mut Func, x: V, k: V, axis: usize, b: i64, n: i64) -> V {
    let zero = i64_scalar(f, 0);
    let (starts, sizes) = if axis == 1 { ([zero, k, zero], [b, 1, n]) } else { ([zero, zero, k], [b, n, 1]) };
    let l = f.dynamic_slice(x, &starts, &sizes);
    f.reshape(l, &[b, n])
}

fn put_line(f: &mut Func, x: V, k: V, axis: usize, v: V, b: i64, n: i64) -> V {
    let zero = i64_scalar(f, 0);
    let (starts, shape) = if axis == 1 { ([zero, k, zero], [b, 1, n]) } else { ([zero, zero, k], [b, n, 1]) };
    let v = f.reshape(v, &shape);
    f.dynamic_update_slice(x, v, &starts)
}

/// The Givens rotation `[[c, s], [-s̄, c]]` (`c` real, kept complex) that
/// zeroes `y` against `x` (each `[b]`): `-s̄ x + c y = 0`.
fn givens(f: &mut Func, x: V, y: V) -> (V, V) {
    let (ax, ay) = (modulus(f, x), modulus(f, y));
    let ax2 = f.mul(ax, ax);
    let ay2 = f.mul(ay, ay);
    let r2 = f.add(ax2, ay2);
    let r = f.unary("stablehlo.sqrt", r2);
    let zero = f.full_like(r, 0.0);
    let one = f.full_like(r, 1.0);
    let r_zero = f.compare(Cmp::Eq, r, zero);
    let x_zero = f.compare(Cmp::Eq, ax, zero);
    let safe_r = f.select(r_zero, one, r);
    let safe_ax = f.select(x_zero, one, ax);
    // The phase of x (1 where x is 0).
    let sax = f.convert(safe_ax, WORK);
    let phase = f.div(x, sax);
    let cone = f.convert(one, WORK);
    let phase = f.select(x_zero, cone, phase);
    let c = f.div(ax, safe_r);
    let c = f.select(r_zero, one, c);
    let yc = super::super::complex::conj(f, y);
    let sr = f.convert(safe_r, WORK);
    let s = f.mul(phase, yc);
    let s = f.div(s, sr);
    let czero = f.convert(zero, WORK);
    let s = f.select(r_zero, czero, s);
    (f.convert(c, WORK), s)
}

/// Rows `k` and `k + 1` of `x` rotated by `[[c, s], [-s̄, c]]` (`c`, `s`
/// `[b]`).
fn rotate_rows(f: &mut Func, x: V, k: V, c: V, s: V, b: i64, n: i64) -> V {
    let sc = super::super::complex::conj(f, s);
    rotate(f, x, k, 1, c, s, sc, b, n)
}

/// Columns `k` and `k + 1` of `x` times the adjoint rotation
/// `[[c, -s], [s̄, c]]`.
fn rotate_columns(f: &mut Func, x: V, k: V, c: V, s: V, b: i64, n: i64) -> V {
    let sc = super::super::complex::conj(f, s);
    rotate(f, x, k, 2, c, sc, s, b, n)
}

/// Lines (rows for `axis` 1, columns for 2) `k` and `k + 1` of `x`
/// replaced by `c l0 + p l1` and `c l1 - q l0`.
#[allow(clippy::too_many_arguments)]
fn rotate(f: &mut Func, x: V, k: V, axis: usize, c: V, p: V, q: V, b: i64, n: i64) -> V {
    let one = i64_scalar(f, 1);
    let k1 = f.add(k, one);
    let (l0, l1) = (line(f, x, k, axis, b, n), line(f, x, k1, axis, b, n));
    let [c, p, q] = [c, p, q].map(|v| f.broadcast_in_dim(v, &[0], &[b, n]));
    let (a0, a1) = (f.mul(c, l0), f.mul(p, l1));
    let new0 = f.add(a0, a1);
    let (b0, b1) = (f.mul(q, l0), f.mul(c, l1));
    let new1 = f.sub(b1, b0);
    let x = put_line(f, x, k, axis, new0, b, n);
    put_line(f, x, k1, axis, new1, b, n)
}

/// `H = Qᴴ A Q` upper Hessenberg: entry `(i, j)`, `i > j + 1`, zeroed by a
/// rotation of rows `i - 1, i` (and the same of columns), column by column.
fn hessenberg(f: &mut Func, a: V, q: V, b: i64, n: i64) -> (V, V) {
    let pairs: Vec<(i64, i64)> = (0..n).flat_map(|j| ((j + 2)..n).rev().map(move |i| (i, j))).collect();
    if pairs.is_empty() {
        return (a, q);
    }
    let rows = f.const_i64s(&pairs.iter().map(|p| p.0).collect::<Vec<_>>());
    let cols = f.const_i64s(&pairs.iter().map(|p| p.1).collect::<Vec<_>>());
    let out = counted_loop(f, &[a, q, rows, cols], pairs.len() as i64, |f, s, p| {
        let (h, q, rows, cols) = (s[0], s[1], s[2], s[3]);
        let pick = |f: &mut Func, v: V| {
            let e = f.dynamic_slice(v, &[p], &[1]);
            f.reshape(e, &[])
        };
        let (i, j) = (pick(f, rows), pick(f, cols));
        let one = i64_scalar(f, 1);
        let i0 = f.sub(i, one);
        let (x, y) = (entry(f, h, i0, j, b), entry(f, h, i, j, b));
        let (c, sn) = givens(f, x, y);
        let h = rotate_rows(f, h, i0, c, sn, b, n);
        let h = rotate_columns(f, h, i0, c, sn, b, n);
        let q = rotate_columns(f, q, i0, c, sn, b, n);
        vec![h, q, rows, cols]
    });
    (out[0], out[1])
}

/// Masks `[b, n, n]` of entry `(m + di, m + dj)` of each matrix.
fn at(f: &mut Func, m: V, di: i64, dj: i64, b: i64, n: i64) -> V {
    let t = Ty::new(Elem::I64, &[b, n, n]);
    let (i, j) = (f.iota(&t, 1), f.iota(&t, 2));
    let mb = f.broadcast_in_dim(m, &[0], &[b, n, n]);
    let (oi, oj) = (f.splat_int(&t, di), f.splat_int(&t, dj));
    let (ri, rj) = (f.add(mb, oi), f.add(mb, oj));
    let (ei, ej) = (f.compare(Cmp::Eq, i, ri), f.compare(Cmp::Eq, j, rj));
    f.and(ei, ej)
}

/// The entry a mask from [`at`] selects, `[b]` (0 where it selects none).
fn select_entry(f: &mut Func, x: V, mask: V) -> V {
    let zero = f.full_like(x, 0.0);
    let picked = f.select(mask, x, zero);
    let z = f.constant(WORK, 0.0);
    f.reduce(picked, z, &[1, 2], Reducer::Add)
}

/// The shifted QR algorithm on Hessenberg `h`, accumulating into `z`.
/// Returns `T`, `Z` and each window's end (0 once converged).
fn schur(f: &mut Func, h: V, z: V, b: i64, n: i64) -> (V, V, V) {
    let m0 = f.splat_int(&Ty::new(Elem::I64, &[b]), n - 1);
    if n < 2 {
        return (h, z, f.splat_int(&Ty::new(Elem::I64, &[b]), 0));
    }
    let it0 = i64_scalar(f, 0);
    let limit = ITERATIONS_PER_EIGENVALUE * n;
    let tys: Vec<Ty> = [h, z, m0, it0].iter().map(|&v| f.ty(v).clone()).collect();
    let cond = f.region(&tys, |f, s| {
        let zero = f.splat_int(&Ty::new(Elem::I64, &[b]), 0);
        let open = f.compare(Cmp::Gt, s[2], zero);
        let open = any(f, open);
        let lim = i64_scalar(f, limit);
        let more = f.compare(Cmp::Lt, s[3], lim);
        vec![f.and(open, more)]
    });
    let body = f.region(&tys, |f, s| {
        let (h, z, m, it) = (s[0], s[1], s[2], s[3]);
        let (h, m) = deflate(f, h, m, b, n);
        let mu = shift(f, h, m, it, b, n);
        let id = identity(f, &[b, n, n], WORK);
        let mub = f.broadcast_in_dim(mu, &[0], &[b, n, n]);
        let shifted = f.mul(mub, id);
        let h = f.sub(h, shifted);
        // R = G_{n-2} ... G_0 (H - μI), rotations past each window's end
        // being identities; then R G_0ᴴ ... G_{n-2}ᴴ.
        let cs0 = f.splat(&Ty::new(WORK, &[b, n - 1]), 1.0);
        let ss0 = f.splat(&Ty::new(WORK, &[b, n - 1]), 0.0);
        let rows = counted_loop(f, &[h, cs0, ss0, m], n - 1, |f, s, k| {
            let (h, cs, ss, m) = (s[0], s[1], s[2], s[3]);
            let one = i64_scalar(f, 1);
            let k1 = f.add(k, one);
            let (x, y) = (entry(f, h, k, k, b), entry(f, h, k1, k, b));
            let (c, sn) = givens(f, x, y);
            let kb = f.broadcast_in_dim(k, &[], &[b]);
            let active = f.compare(Cmp::Lt, kb, m);
            let (one_c, zero_c) = (f.full_like(c, 1.0), f.full_like(sn, 0.0));
            let c = f.select(active, c, one_c);
            let sn = f.select(active, sn, zero_c);
            let h = rotate_rows(f, h, k, c, sn, b, n);
            let zero = i64_scalar(f, 0);
            let (c2, s2) = (f.reshape(c, &[b, 1]), f.reshape(sn, &[b, 1]));
            let cs = f.dynamic_update_slice(cs, c2, &[zero, k]);
            let ss = f.dynamic_update_slice(ss, s2, &[zero, k]);
            vec![h, cs, ss, m]
        });
        let (h, cs, ss) = (rows[0], rows[1], rows[2]);
        let cols = counted_loop(f, &[h, z, cs, ss], n - 1, |f, s, k| {
            let (h, z, cs, ss) = (s[0], s[1], s[2], s[3]);
            let zero = i64_scalar(f, 0);
            let c = f.dynamic_slice(cs, &[zero, k], &[b, 1]);
            let sn = f.dynamic_slice(ss, &[zero, k], &[b, 1]);
            let (c, sn) = (f.reshape(c, &[b]), f.reshape(sn, &[b]));
            let h = rotate_columns(f, h, k, c, sn, b, n);
            let z = rotate_columns(f, z, k, c, sn, b, n);
            vec![h, z, cs, ss]
        });
        let (h, z) = (cols[0], cols[1]);
        let h = f.add(h, shifted);
        let one = i64_scalar(f, 1);
        let it = f.add(it, one);
        vec![h, z, m, it]
    });
    let it0 = i64_scalar(f, 0);
    let out = f.op("stablehlo.while", &[h, z, m0, it0], &[cond, body], "", &tys);
    // A last deflation test: the final iteration may have converged.
    let (h, m) = deflate(f, out[0], out[2], b, n);
    (h, out[1], m)
}

/// Zeroes each window's last subdiagonal entry where it is negligible and
/// moves that window's end up by one.
fn deflate(f: &mut Func, h: V, m: V, b: i64, n: i64) -> (V, V) {
    let sub_mask = at(f, m, 0, -1, b, n);
    let sub = select_entry(f, h, sub_mask);
    let d1 = at(f, m, 0, 0, b, n);
    let d1 = select_entry(f, h, d1);
    let d0 = at(f, m, -1, -1, b, n);
    let d0 = select_entry(f, h, d0);
    let (a_sub, a0, a1) = (modulus(f, sub), modulus(f, d0), modulus(f, d1));
    let scale = f.add(a0, a1);
    let eps = f.full_like(scale, EPS);
    let bound = f.mul(eps, scale);
    let tiny = f.full_like(scale, f64::MIN_POSITIVE);
    let bound = f.max(bound, tiny);
    let small = f.compare(Cmp::Le, a_sub, bound);
    let zero = f.splat_int(&Ty::new(Elem::I64, &[b]), 0);
    let open = f.compare(Cmp::Gt, m, zero);
    let small = f.and(small, open);
    let smallb = f.broadcast_in_dim(small, &[0], &[b, n, n]);
    let clear = f.and(sub_mask, smallb);
    let hz = f.full_like(h, 0.0);
    let h = f.select(clear, hz, h);
    let one = f.splat_int(&Ty::new(Elem::I64, &[b]), 1);
    let m1 = f.sub(m, one);
    (h, f.select(small, m1, m))
}

/// The Wilkinson shift of each window (0 for a converged matrix), or an
/// exceptional shift every tenth iteration.
fn shift(f: &mut Func, h: V, m: V, it: V, b: i64, n: i64) -> V {
    let masks: Vec<V> = [(-1, -1), (-1, 0), (0, -1), (0, 0)].iter().map(|&(di, dj)| at(f, m, di, dj, b, n)).collect();
    let e: Vec<V> = masks.iter().map(|&mk| select_entry(f, h, mk)).collect();
    let (a, bb, c, d) = (e[0], e[1], e[2], e[3]);
    let half = f.full_like(a, 0.5);
    let tr = f.add(a, d);
    let mean = f.mul(tr, half);
    let diff = f.sub(a, d);
    let hd = f.mul(diff, half);
    let hd2 = f.mul(hd, hd);
    let bc = f.mul(bb, c);
    let disc = f.add(hd2, bc);
    let root = f.unary("stablehlo.sqrt", disc);
    let (l1, l2) = (f.add(mean, root), f.sub(mean, root));
    let (e1, e2) = (f.sub(l1, d), f.sub(l2, d));
    let (e1, e2) = (modulus(f, e1), modulus(f, e2));
    let nearer = f.compare(Cmp::Le, e1, e2);
    let mu = f.select(nearer, l1, l2);
    // Every tenth iteration: d + 0.75 |c|, as LAPACK's zlahqr.
    let ac = modulus(f, c);
    let k = f.full_like(ac, 0.75);
    let off = f.mul(ac, k);
    let off = f.convert(off, WORK);
    let exceptional = f.add(d, off);
    let ten = i64_scalar(f, 10);
    let r = f.binary("stablehlo.remainder", it, ten);
    let nine = i64_scalar(f, 9);
    let now = f.compare(Cmp::Eq, r, nine);
    let now = f.broadcast_in_dim(now, &[], &[b]);
    let mu = f.select(now, exceptional, mu);
    let zero = f.splat_int(&Ty::new(Elem::I64, &[b]), 0);
    let open = f.compare(Cmp::Gt, m, zero);
    let z = f.full_like(mu, 0.0);
    f.select(open, mu, z)
}

/// The diagonal `[b, n]` of `[b, n, n]`.
fn diagonal(f: &mut Func, t: V, b: i64, n: i64) -> V {
    let id = Ty::new(Elem::I64, &[b, n, n]);
    let (i, j) = (f.iota(&id, 1), f.iota(&id, 2));
    let on = f.compare(Cmp::Eq, i, j);
    let zero = f.full_like(t, 0.0);
    let d = f.select(on, t, zero);
    let z = f.constant(WORK, 0.0);
    f.reduce(d, z, &[2], Reducer::Add)
}

/// The eigenvectors of upper triangular `t` (eigenvalues `w`): column `k`
/// solves `(T - w_k I) y = 0` with `y_k = 1` and `y_i = 0` below `k`, by
/// back substitution over the rows, all columns at once.
fn triangular_vectors(f: &mut Func, t: V, w: V, b: i64, n: i64) -> V {
    let y0 = identity(f, &[b, n, n], WORK);
    if n < 2 {
        return y0;
    }
    // LAPACK's smallest pivot: eps times the largest entry (or the
    // smallest normal number).
    let at_ = modulus(f, t);
    let z = f.constant(WORK.real(), 0.0);
    let big = f.reduce(at_, z, &[1, 2], Reducer::Max);
    let eps = f.full_like(big, EPS);
    let smin = f.mul(big, eps);
    let tiny = f.full_like(smin, f64::MIN_POSITIVE);
    let smin = f.max(smin, tiny);
    let out = counted_loop(f, &[y0, t, w, smin], n - 1, |f, s, j| {
        let (y, t, w, smin) = (s[0], s[1], s[2], s[3]);
        let last = i64_scalar(f, n - 2);
        let i = f.sub(last, j);
        let row = line(f, t, i, 1, b, n);
        let idx = f.iota(&Ty::new(Elem::I64, &[b, n]), 1);
        let ib = f.broadcast_in_dim(i, &[], &[b, n]);
        let after = f.compare(Cmp::Gt, idx, ib);
        let zr = f.full_like(row, 0.0);
        let row = f.select(after, row, zr);
        let sum = f.dot_general(row, y, &[0], &[0], &[1], &[1], WORK);
        let tii = entry(f, t, i, i, b);
        let tii = f.broadcast_in_dim(tii, &[0], &[b, n]);
        let denom = f.sub(tii, w);
        let ad = modulus(f, denom);
        let sminb = f.broadcast_in_dim(smin, &[0], &[b, n]);
        let tiny_pivot = f.compare(Cmp::Lt, ad, sminb);
        let sminc = f.convert(sminb, WORK);
        let denom = f.select(tiny_pivot, sminc, denom);
        let q = f.div(sum, denom);
        let q = f.neg(q);
        let old = line(f, y, i, 1, b, n);
        let new = f.select(after, q, old);
        let y = put_line(f, y, i, 1, new, b, n);
        vec![y, t, w, smin]
    });
    out[0]
}

/// Each column of `v` `[b, n, n]` scaled to unit norm with its largest
/// component (the first of equals) real and positive.
fn normalize(f: &mut Func, v: V, b: i64, n: i64) -> V {
    let mag = modulus(f, v);
    let sq = f.mul(mag, mag);
    let z = f.constant(WORK.real(), 0.0);
    let norm2 = f.reduce(sq, z, &[1], Reducer::Add);
    let norm = f.unary("stablehlo.sqrt", norm2);
    let lo = f.constant(WORK.real(), f64::NEG_INFINITY);
    let top = f.reduce(mag, lo, &[1], Reducer::Max);
    let topb = f.broadcast_in_dim(top, &[0, 2], &[b, n, n]);
    let is_top = f.compare(Cmp::Eq, mag, topb);
    let it = Ty::new(Elem::I64, &[b, n, n]);
    let rows = f.iota(&it, 1);
    let none = f.splat_int(&it, n);
    let cand = f.select(is_top, rows, none);
    let hi = f.splat_int(&Ty::scalar(Elem::I64), n);
    let first = f.reduce(cand, hi, &[1], Reducer::Min);
    let firstb = f.broadcast_in_dim(first, &[0, 2], &[b, n, n]);
    let pick = f.compare(Cmp::Eq, rows, firstb);
    let zero = f.full_like(v, 0.0);
    let picked = f.select(pick, v, zero);
    let zc = f.constant(WORK, 0.0);
    let p = f.reduce(picked, zc, &[1], Reducer::Add);
    // v / norm * conj(p) / |p|: the top component becomes |p| / norm.
    let ap = modulus(f, p);
    let one = f.full_like(ap, 1.0);
    let zr = f.full_like(ap, 0.0);
    let p_zero = f.compare(Cmp::Eq, ap, zr);
    let safe_ap = f.select(p_zero, one, ap);
    let denom = f.mul(norm, safe_ap);
    let nz = f.compare(Cmp::Eq, norm, zr);
    let denom = f.select(nz, one, denom);
    let pc = super::super::complex::conj(f, p);
    let cone = f.convert(one, WORK);
    let pc = f.select(p_zero, cone, pc);
    let dc = f.convert(denom, WORK);
    let factor = f.div(pc, dc);
    let factor = f.broadcast_in_dim(factor, &[0, 2], &[b, n, n]);
    f.mul(v, factor)
}
