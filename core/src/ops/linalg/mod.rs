//! Matrix products: `mm`, `bmm`, `dot`, `mv`, `matmul` (all of PyTorch's
//! rank cases, with batch broadcasting), `linear`, and the fused
//! `addmm`/`baddbmm`/`addmv`/`addbmm` with runtime `beta`/`alpha`, and the
//! vector cross product `linalg_cross`.
//!
//! Every product is one `dot_general` at HIGHEST precision. Half types
//! multiply in f32 and round once, like PyTorch's CPU kernels.
//!
//! Factorizations and solves live in their own files: [`cholesky`]
//! (Cholesky and triangular solves, on StableHLO's own `cholesky` and
//! `triangular_solve`), [`lu`] (LU with partial pivoting, and solve,
//! inverse, determinants on it), [`qr`] (Householder QR), [`jacobi`]
//! (the SVD and the symmetric eigendecomposition), [`eig`] (the general
//! eigendecomposition, by the complex Schur form) and [`matrix_fn`]
//! (the matrix exponential and square root).

mod cholesky;
mod eig;
mod jacobi;
mod lu;
mod matrix_fn;
mod qr;

use crate::bail_op;
use crate::dtype::DType;
use crate::error::Result;
use crate::hlo::{Cmp, V};
use crate::shape;

use super::{Cx, Builder, ScalarRef};

pub fn register(r: &mut Builder) {
    cholesky::register(r);
    lu::register(r);
    qr::register(r);
    jacobi::register(r);
    eig::register(r);
    matrix_fn::register(r);
    r.composite(
        "aten::linalg_lstsq(Tensor self, Tensor b, float? rcond=None, *, str? driver=None) \
         -> (Tensor solution, Tensor residuals, Tensor rank, Tensor singular_values)",
        super::Composite::Lstsq,
    );
    register_products(r);
    register_fused(r);
    register_cross(r);
}

// ------------------------------------------------------------------ helpers

/// `2x3` style, as PyTorch prints matrix shapes in `mm` errors.
fn x_fmt(dims: &[i64]) -> String {
    dims.iter().map(|d| d.to_string()).collect::<Vec<_>>().join("x")
}

/// Both operands must have the same dtype, which must be a number type.
fn same_dtype(cx: &Cx, a: V, b: V) -> Result<DType> {
    let (da, db) = (cx.dtype(a), cx.dtype(b));
    if da != db {
        bail_op!(&*cx.op, "expected m1 and m2 to have the same dtype, but got: {da} != {db}");
    }
    if da == DType::Bool {
        bail_op!(&*cx.op, "matrix products are not implemented for bool tensors");
    }
    Ok(da)
}

/// `dot_general` in the opmath of `d`, rounded once to `d`.
fn contract(cx: &mut Cx, a: V, b: V, batch: usize, ca: usize, cb: usize, d: DType) -> V {
    let (a, b) = (cx.f.convert(a, d.opmath()), cx.f.convert(b, d.opmath()));
    let bd: Vec<usize> = (0..batch).collect();
    let y = cx.f.dot_general(a, b, &bd, &bd, &[ca], &[cb], d.opmath().into());
    cx.f.convert(y, d)
}

/// As [`contract`] without the final rounding (for the fused ops).
fn contract_up(cx: &mut Cx, a: V, b: V, batch: usize, ca: usize, cb: usize, d: DType) -> V {
    let (a, b) = (cx.f.convert(a, d.opmath()), cx.f.convert(b, d.opmath()));
    let bd: Vec<usize> = (0..batch).collect();
    cx.f.dot_general(a, b, &bd, &bd, &[ca], &[cb], d.opmath().into())
}

fn require_rank(cx: &Cx, v: V, rank: usize, what: &str) -> Result<()> {
    let r = cx.rank(v);
    if r != rank {
        bail_op!(&*cx.op, "{what}, got {r}-D tensor with shape {}", shape::fmt(&cx.dims(v)));
    }
    Ok(())
}

// ---------------------------------------------------------------- products

/// Checks `mm`'s operands; returns the dtype.
fn check_mm(cx: &Cx, a: V, b: V) -> Result<DType> {
    require_rank(cx, a, 2, "self must be a matrix")?;
    require_rank(cx, b, 2, "mat2 must be a matrix")?;
    let (da, db) = (cx.dims(a), cx.dims(b));
    if da[1] != db[0] {
        bail_op!(&*cx.op, "mat1 and mat2 shapes cannot be multiplied ({} and {})", x_fmt(&da), x_fmt(&db));
    }
    same_dtype(cx, a, b)
}

/// Checks `bmm`'s operands; returns the dtype.
fn check_bmm(cx: &Cx, a: V, b: V) -> Result<DType> {
    require_rank(cx, a, 3, "batch1 must be a 3D tensor")?;
    require_rank(cx, b, 3, "batch2 must be a 3D tensor")?;
    let (da, db) = (cx.dims(a), cx.dims(b));
    if da[0] != db[0] || da[2] != db[1] {
        bail_op!(
            &*cx.op,
            "Expected size for first two dimensions of batch2 tensor to be: [{}, {}] but got: [{}, {}] \
             (batch1 {}, batch2 {}).",
            da[0],
            da[2],
            db[0],
            db[1],
            shape::fmt(&da),
            shape::fmt(&db)
        );
    }
    same_dtype(cx, a, b)
}

/// Checks `mv`'s operands; returns the dtype.
fn check_mv(cx: &Cx, m: V, v: V, input: Option<&[i64]>) -> Result<DType> {
    let (dm, dv) = (cx.dims(m), cx.dims(v));
    if dm.len() != 2 || dv.len() != 1 {
        bail_op!(
            &*cx.op,
            "vector + matrix @ vector expected, got a {}-D matrix {} and a {}-D vector {}",
            dm.len(),
            shape::fmt(&dm),
            dv.len(),
            shape::fmt(&dv)
        );
    }
    if dm[1] != dv[0] {
        let input = input.map_or_else(|| dm[0].to_string(), x_fmt);
        bail_op!(&*cx.op, "size mismatch, got input ({input}), mat ({}), vec ({})", x_fmt(&dm), dv[0]);
    }
    same_dtype(cx, m, v)
}

fn dot(cx: &mut Cx, a: V, b: V) -> Result<V> {
    let (ra, rb) = (cx.rank(a), cx.rank(b));
    if ra != 1 || rb != 1 {
        bail_op!(&*cx.op, "1D tensors expected, but got {ra}D and {rb}D tensors");
    }
    let (da, db) = (cx.dtype(a), cx.dtype(b));
    if da != db {
        bail_op!(&*cx.op, "dot : expected both vectors to have same dtype, but found {da} and {db}");
    }
    let (na, nb) = (cx.dims(a)[0], cx.dims(b)[0]);
    if na != nb {
        bail_op!(
            &*cx.op,
            "inconsistent tensor size, expected tensor [{na}] and src [{nb}] to have the same number of elements, \
             but got {na} and {nb} elements respectively"
        );
    }
    let d = same_dtype(cx, a, b)?;
    Ok(contract(cx, a, b, 0, 0, 0, d))
}

/// `torch.matmul`: dot, mv, vector-matrix, mm, and batched products with
/// broadcast batch dims (a 1-D operand gets a unit dim that is dropped again).
pub(super) fn matmul(cx: &mut Cx, a: V, b: V) -> Result<V> {
    let (sa, sb) = (cx.dims(a), cx.dims(b));
    let (ra, rb) = (sa.len(), sb.len());
    if ra == 0 || rb == 0 {
        bail_op!(&*cx.op, "both arguments to matmul need to be at least 1D, but they are {ra}D and {rb}D");
    }
    let mismatch = |cx: &Cx| {
        cx.err(format!("mat1 and mat2 shapes cannot be multiplied ({} and {})", x_fmt(&sa), x_fmt(&sb)))
    };
    let (ka, kb) = (sa[ra - 1], if rb == 1 { sb[0] } else { sb[rb - 2] });
    match (ra, rb) {
        (1, 1) => return dot(cx, a, b),
        (2, 1) => {
            check_mv(cx, a, b, None)?;
        }
        (2, 2) => {
            check_mm(cx, a, b)?;
        }
        _ if ka != kb => return Err(mismatch(cx)),
        _ => {}
    }
    let d = same_dtype(cx, a, b)?;
    if rb <= 2 {
        // No batch dims on the right: contract `a`'s last dim directly, so
        // [B, M, K] @ [K, N] needs no broadcast of `b`.
        return Ok(contract(cx, a, b, 0, ra - 1, 0, d));
    }
    // Batched: give 1-D operands a unit dim, broadcast the batch dims.
    let a2: Vec<i64> = if ra == 1 { vec![1, sa[0]] } else { sa.clone() };
    let (m, n) = (a2[a2.len() - 2], sb[rb - 1]);
    let batch = shape::broadcast(&cx.op, &a2[..a2.len() - 2], &sb[..rb - 2])?;
    let nb = batch.len();
    let mut full_a = batch.to_vec();
    full_a.extend([m, ka]);
    let mut full_b = batch.to_vec();
    full_b.extend([kb, n]);
    let av = cx.f.reshape(a, &a2);
    let av = cx.f.broadcast_to(av, &full_a);
    let bv = cx.f.broadcast_to(b, &full_b);
    let y = contract(cx, av, bv, nb, nb + 1, nb, d);
    if ra == 1 {
        let mut out = batch.to_vec();
        out.push(n);
        return Ok(cx.f.reshape(y, &out));
    }
    Ok(y)
}

/// `input @ weight.T (+ bias)`.
pub(super) fn linear(cx: &mut Cx, x: V, w: V, bias: Option<V>) -> Result<V> {
    let (sx, sw) = (cx.dims(x), cx.dims(w));
    let y = match sw.len() {
        1 => matmul(cx, x, w)?,
        2 => {
            if sx.is_empty() {
                bail_op!(&*cx.op, "both arguments to linear need to be at least 1D, but they are 0D and 2D");
            }
            if sx[sx.len() - 1] != sw[1] {
                let rows: i64 = sx[..sx.len() - 1].iter().product();
                bail_op!(
                    &*cx.op,
                    "mat1 and mat2 shapes cannot be multiplied ({rows}x{} and {}x{}) (input {}, weight {})",
                    sx[sx.len() - 1],
                    sw[1],
                    sw[0],
                    shape::fmt(&sx),
                    shape::fmt(&sw)
                );
            }
            let d = same_dtype(cx, x, w)?;
            contract(cx, x, w, 0, sx.len() - 1, 1, d)
        }
        r => bail_op!(&*cx.op, "weight must be 1-D or 2-D, got {r}-D tensor with shape {}", shape::fmt(&sw)),
    };
    let Some(b) = bias else { return Ok(y) };
    let d = cx.dtype(y);
    if cx.dtype(b) != d {
        bail_op!(&*cx.op, "bias must have the same dtype as input ({d}), but got {}", cx.dtype(b));
    }
    let out = cx.dims(y);
    let bb = expand(cx, b, &out)?;
    let (yu, bu) = (cx.f.convert(y, d.opmath()), cx.f.convert(bb, d.opmath()));
    let s = cx.f.add(yu, bu);
    Ok(cx.f.convert(s, d))
}

fn register_products(r: &mut Builder) {
    r.op("aten::mm(Tensor self, Tensor mat2) -> Tensor", |cx, a| {
        let (x, y) = (a.tensor(0)?, a.tensor(1)?);
        let d = check_mm(cx, x, y)?;
        Ok(vec![contract(cx, x, y, 0, 1, 0, d)])
    });
    r.op("aten::bmm(Tensor self, Tensor mat2) -> Tensor", |cx, a| {
        let (x, y) = (a.tensor(0)?, a.tensor(1)?);
        let d = check_bmm(cx, x, y)?;
        Ok(vec![contract(cx, x, y, 1, 2, 1, d)])
    });
    r.op("aten::dot(Tensor self, Tensor tensor) -> Tensor", |cx, a| Ok(vec![dot(cx, a.tensor(0)?, a.tensor(1)?)?]));
    // For real tensors (the only ones here) vdot's conjugate is the identity.
    r.op("aten::vdot(Tensor self, Tensor other) -> Tensor", |cx, a| Ok(vec![dot(cx, a.tensor(0)?, a.tensor(1)?)?]));
    r.op("aten::mv(Tensor self, Tensor vec) -> Tensor", |cx, a| {
        let (m, v) = (a.tensor(0)?, a.tensor(1)?);
        let d = check_mv(cx, m, v, None)?;
        Ok(vec![contract(cx, m, v, 0, 1, 0, d)])
    });
    r.op("aten::matmul(Tensor self, Tensor other) -> Tensor", |cx, a| {
        Ok(vec![matmul(cx, a.tensor(0)?, a.tensor(1)?)?])
    });
    r.op("aten::linear(Tensor input, Tensor weight, Tensor? bias=None) -> Tensor", |cx, a| {
        Ok(vec![linear(cx, a.tensor(0)?, a.tensor(1)?, a.opt_tensor(2))?])
    });
}

// ------------------------------------------------------------------- fused

/// Broadcasts `v` to `target` with PyTorch's `expand` error.
fn expand(cx: &mut Cx, v: V, target: &[i64]) -> Result<V> {
    let src = cx.dims(v);
    let ok = src.len() <= target.len()
        && src.iter().rev().zip(target.iter().rev()).all(|(&s, &t)| s == t || s == 1);
    if !ok {
        let off = target.len() as i64 - src.len() as i64;
        let bad = (0..src.len()).rev().find(|&i| {
            let t = i as i64 + off;
            t < 0 || (src[i] != 1 && src[i] != target[t as usize])
        });
        let (i, t) = bad.map_or((0, 0), |i| (i, (i as i64 + off).max(0) as usize));
        bail_op!(
            &*cx.op,
            "The expanded size of the tensor ({}) must match the existing size ({}) at non-singleton dimension {t}.  \
             Target sizes: {}.  Tensor sizes: {}",
            target.get(t).copied().unwrap_or(0),
            src.get(i).copied().unwrap_or(0),
            shape::fmt(target),
            shape::fmt(&src)
        );
    }
    Ok(cx.f.broadcast_to(v, target))
}

/// `beta * input + alpha * product`, with `product` already in opmath. When
/// `beta` is 0 the input is ignored, so its NaNs do not propagate.
fn fused(cx: &mut Cx, input: V, product: V, beta: ScalarRef, alpha: ScalarRef, d: DType) -> Result<V> {
    let di = cx.dtype(input);
    if di != d {
        bail_op!(&*cx.op, "self and mat2 must have the same dtype, but got {di} and {d}");
    }
    let out = cx.dims(product);
    let inp = expand(cx, input, &out)?;
    let op = d.opmath();
    let inp = cx.f.convert(inp, op);
    let (b, al) = (cx.scalar(beta, op), cx.scalar(alpha, op));
    let (b, al) = (cx.f.broadcast_to(b, &out), cx.f.broadcast_to(al, &out));
    let scaled_in = cx.f.mul(inp, b);
    let zero = cx.f.full_like(scaled_in, 0.0);
    let beta_zero = cx.f.compare(Cmp::Eq, b, zero);
    let scaled_in = cx.f.select(beta_zero, zero, scaled_in);
    let scaled_p = cx.f.mul(product, al);
    let s = cx.f.add(scaled_in, scaled_p);
    Ok(cx.f.convert(s, d))
}

fn register_fused(r: &mut Builder) {
    r.op_and_inplace(
        "aten::addmm(Tensor self, Tensor mat1, Tensor mat2, *, Scalar beta=1, Scalar alpha=1) -> Tensor",
        |cx, a| {
            let (m1, m2) = (a.tensor(1)?, a.tensor(2)?);
            let d = check_mm(cx, m1, m2)?;
            let p = contract_up(cx, m1, m2, 0, 1, 0, d);
            Ok(vec![fused(cx, a.tensor(0)?, p, a.scalar(3)?, a.scalar(4)?, d)?])
        },
    );
    r.op_and_inplace(
        "aten::baddbmm(Tensor self, Tensor batch1, Tensor batch2, *, Scalar beta=1, Scalar alpha=1) -> Tensor",
        |cx, a| {
            let (b1, b2) = (a.tensor(1)?, a.tensor(2)?);
            let d = check_bmm(cx, b1, b2)?;
            let p = contract_up(cx, b1, b2, 1, 2, 1, d);
            Ok(vec![fused(cx, a.tensor(0)?, p, a.scalar(3)?, a.scalar(4)?, d)?])
        },
    );
    r.op_and_inplace(
        "aten::addbmm(Tensor self, Tensor batch1, Tensor batch2, *, Scalar beta=1, Scalar alpha=1) -> Tensor",
        |cx, a| {
            let (b1, b2) = (a.tensor(1)?, a.tensor(2)?);
            let d = check_bmm(cx, b1, b2)?;
            // Sum over the batch too: contract both the batch and inner dims.
            let (u1, u2) = (cx.f.convert(b1, d.opmath()), cx.f.convert(b2, d.opmath()));
            let p = cx.f.dot_general(u1, u2, &[], &[], &[0, 2], &[0, 1], d.opmath().into());
            Ok(vec![fused(cx, a.tensor(0)?, p, a.scalar(3)?, a.scalar(4)?, d)?])
        },
    );
    r.op_and_inplace(
        "aten::addmv(Tensor self, Tensor mat, Tensor vec, *, Scalar beta=1, Scalar alpha=1) -> Tensor",
        |cx, a| {
            let (input, m, v) = (a.tensor(0)?, a.tensor(1)?, a.tensor(2)?);
            let si = cx.dims(input);
            let d = check_mv(cx, m, v, Some(&si))?;
            let p = contract_up(cx, m, v, 0, 1, 0, d);
            Ok(vec![fused(cx, input, p, a.scalar(3)?, a.scalar(4)?, d)?])
        },
    );
}

// ------------------------------------------------------------------- cross

fn register_cross(r: &mut Builder) {
    // a x b along `dim` (of length 3) of the broadcast operands: the
    // components (a1 b2 - a2 b1, a2 b0 - a0 b2, a0 b1 - a1 b0).
    r.op("aten::linalg_cross(Tensor self, Tensor other, *, int dim=-1) -> Tensor", |cx, a| {
        let (x, y) = (a.tensor(0)?, a.tensor(1)?);
        let (xd, yd) = (cx.dims(x), cx.dims(y));
        if xd.len() != yd.len() {
            bail_op!(&*cx.op, "linalg.cross: inputs must have the same number of dimensions.");
        }
        let (dx, dy) = (cx.dtype(x), cx.dtype(y));
        if dx != dy {
            bail_op!(&*cx.op, "expected scalar type {dx} but found {dy}");
        }
        if dx == DType::Bool {
            bail_op!(&*cx.op, "\"cross\" not implemented for 'Bool'");
        }
        let dim = a.int(2)?;
        let k = shape::wrap_dim(&cx.op, dim, xd.len())?;
        if xd[k] != 3 || yd[k] != 3 {
            bail_op!(&*cx.op, "linalg.cross: inputs dimension {dim} must have length 3. Got {} and {}", xd[k], yd[k]);
        }
        let out = shape::broadcast_all(&cx.op, &[&xd, &yd])?;
        let op = dx.opmath();
        let (x, y) = (cx.f.convert(x, op), cx.f.convert(y, op));
        let (x, y) = (cx.f.broadcast_to(x, &out), cx.f.broadcast_to(y, &out));
        let xs: Vec<V> = (0..3).map(|i| cx.f.slice_dim(x, k, i, i + 1, 1)).collect();
        let ys: Vec<V> = (0..3).map(|i| cx.f.slice_dim(y, k, i, i + 1, 1)).collect();
        let mut parts = Vec::with_capacity(3);
        for i in 0..3 {
            let (j, l) = ((i + 1) % 3, (i + 2) % 3);
            let p = cx.f.mul(xs[j], ys[l]);
            let q = cx.f.mul(xs[l], ys[j]);
            parts.push(cx.f.sub(p, q));
        }
        let z = cx.f.concatenate(&parts, k);
        Ok(vec![cx.f.convert(z, dx)])
    });
}

// ------------------------------------------------ shared by the factorizations

/// Checks `[..., n, n]`.
fn square(cx: &Cx, dims: &[i64], what: &str) -> Result<()> {
    if dims.len() < 2 {
        bail_op!(&*cx.op, "{what}: The input tensor A must have at least 2 dimensions.");
    }
    if dims[dims.len() - 1] != dims[dims.len() - 2] {
        bail_op!(
            &*cx.op,
            "{what}: A must be batches of square matrices, but they are {} by {} matrices",
            dims[dims.len() - 2],
            dims[dims.len() - 1]
        );
    }
    Ok(())
}

/// `check_errors=True`: a factorization's nonzero `info` is reported (by
/// the device check, at the next host read) with `message`.
fn check_info(cx: &mut Cx, info: V, message: &str) {
    let zero = cx.f.full_like(info, 0.0);
    let ok = cx.f.compare(Cmp::Eq, info, zero);
    cx.check_values(ok, message);
}

/// The dtype of a factorization's input, which must be a float type.
fn float(cx: &Cx, x: V, what: &str) -> Result<DType> {
    let d = cx.dtype(x);
    if !d.is_float() {
        bail_op!(&*cx.op, "{what}: Expected a floating point or complex tensor as input. Got {d}");
    }
    Ok(d)
}

/// Sum over `dims`, in `x`'s type.
fn total(f: &mut crate::hlo::Func, x: V, dims: &[usize]) -> V {
    let z = f.constant(f.ty(x).elem, 0.0);
    f.reduce(x, z, dims, crate::hlo::Reducer::Add)
}

/// Swaps the last two dims.
fn mt(cx: &mut Cx, x: V) -> V {
    let r = cx.rank(x);
    let mut perm: Vec<usize> = (0..r).collect();
    perm.swap(r - 2, r - 1);
    cx.f.transpose(x, &perm)
}

/// Identity matrices of `dims` (`[..., n, n]`) in `elem`.
fn identity(f: &mut crate::hlo::Func, dims: &[i64], elem: crate::hlo::Elem) -> V {
    let t = crate::hlo::Ty::new(crate::hlo::Elem::I64, dims);
    let (r_, c_) = (f.iota(&t, dims.len() - 2), f.iota(&t, dims.len() - 1));
    let on = f.compare(Cmp::Eq, r_, c_);
    let one = f.splat(&crate::hlo::Ty::new(elem, dims), 1.0);
    let zero = f.splat(&crate::hlo::Ty::new(elem, dims), 0.0);
    f.select(on, one, zero)
}

