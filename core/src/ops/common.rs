//! Helpers shared by the op families: operands that may be tensors or
//! runtime scalars, type promotion, broadcasting, opmath, dims and keepdim.

use crate::dtype::{self, DType, Operand};
use crate::error::Result;
use crate::hlo::{Cmp, Elem, Ty, V};
use crate::shape::{self, Dims};

use super::{Args, Cx, Input, ScalarRef};

/// An operand of an elementwise op: a tensor value or a runtime scalar.
#[derive(Debug, Clone, Copy)]
pub enum Ew {
    T(V),
    S(ScalarRef),
}

impl Ew {
    /// Argument `i` as an operand (a tensor or a runtime scalar).
    pub fn arg(args: &Args, i: usize) -> Result<Ew> {
        match args.get(i) {
            Input::Tensor(v) => Ok(Ew::T(*v)),
            Input::Scalar(s) => Ok(Ew::S(*s)),
            other => Err(crate::Error::Internal(format!("argument {i} is neither a tensor nor a scalar: {other:?}"))),
        }
    }

    /// Argument `i` if present (not None).
    pub fn opt_arg(args: &Args, i: usize) -> Option<Ew> {
        Ew::arg(args, i).ok()
    }

    fn operand(self, cx: &Cx) -> Operand {
        match self {
            Ew::T(v) if cx.rank(v) == 0 => Operand::ZeroDim(cx.dtype(v)),
            Ew::T(v) => Operand::Dim(cx.dtype(v)),
            Ew::S(s) => Operand::Scalar(s.kind),
        }
    }

    fn dims(self, cx: &Cx) -> Dims {
        match self {
            Ew::T(v) => cx.f.ty(v).dims.clone(),
            Ew::S(_) => Dims::new(),
        }
    }
}

/// `torch.result_type` of the operands.
pub fn result_dtype(cx: &Cx, xs: &[Ew]) -> DType {
    let ops: Vec<Operand> = xs.iter().map(|x| x.operand(cx)).collect();
    dtype::result_type(&ops)
}

/// The broadcast shape of the operands; the error names the op and shapes.
pub fn broadcast_shape(cx: &Cx, xs: &[Ew]) -> Result<Dims> {
    let shapes: Vec<Dims> = xs.iter().map(|x| x.dims(cx)).collect();
    let refs: Vec<&[i64]> = shapes.iter().map(|s| s.as_slice()).collect();
    shape::broadcast_all(&cx.op, &refs)
}

/// `x` as a value of `dtype` broadcast to `dims`.
pub fn materialize(cx: &mut Cx, x: Ew, dtype: DType, dims: &[i64]) -> V {
    let v = match x {
        Ew::T(v) => cx.f.convert(v, dtype),
        Ew::S(s) => cx.scalar(s, dtype),
    };
    cx.f.broadcast_to(v, dims)
}

/// Promotes and broadcasts the operands to `dtype` and their common shape.
pub fn prepare(cx: &mut Cx, xs: &[Ew], dtype: DType) -> Result<(Vec<V>, Dims)> {
    let dims = broadcast_shape(cx, xs)?;
    let vs = xs.iter().map(|&x| materialize(cx, x, dtype, &dims)).collect();
    Ok((vs, dims))
}

/// The dtype integer inputs of float ops (`exp`, `div`, `mean`) compute in.
pub fn float_of(d: DType) -> DType {
    if d.is_float() || d.is_complex() {
        d
    } else {
        DType::DEFAULT_FLOAT
    }
}

/// Converts to the opmath type (f32 for f16/bf16).
pub fn up(cx: &mut Cx, v: V) -> V {
    let d = cx.dtype(v).opmath();
    cx.f.convert(v, d)
}

/// The reduction dims of an `int[1]? dim` argument: all dims when absent or
/// empty, wrapped and de-duplicated otherwise.
pub fn reduce_dims(cx: &Cx, dims: Option<&[i64]>, rank: usize) -> Result<Vec<usize>> {
    match dims {
        None | Some([]) => Ok((0..rank).collect()),
        Some(d) => {
            if rank == 0 {
                // A 0-dim tensor accepts dim 0 / -1 and reduces nothing.
                for &x in d {
                    shape::wrap_dim(&cx.op, x, 0)?;
                }
                return Ok(Vec::new());
            }
            shape::wrap_dims(&cx.op, d, rank)
        }
    }
}

/// Re-inserts reduced dims as size 1 (`keepdim=True`).
pub fn keepdim(cx: &mut Cx, v: V, in_dims: &[i64], reduced: &[usize]) -> V {
    let dims: Vec<i64> = in_dims.iter().enumerate().map(|(i, &d)| if reduced.contains(&i) { 1 } else { d }).collect();
    cx.f.reshape(v, &dims)
}

/// The element type of a dtype.
pub fn elem(d: DType) -> Elem {
    d.into()
}

/// Whether `pred` holds anywhere, as a `tensor<i1>`: the condition of a
/// while loop that runs while any element is still working.
pub(crate) fn any(f: &mut crate::hlo::Func, pred: V) -> V {
    let rank = f.ty(pred).rank();
    let no = f.splat(&Ty::scalar(Elem::Pred), 0.0);
    f.reduce(pred, no, &(0..rank).collect::<Vec<_>>(), crate::hlo::Reducer::Or)
}

/// A `stablehlo.while` that runs `body` for `j = 0..count` over the carried
/// values `init` (the counter is carried last and given to `body`, which
/// returns the new carried values without it). Returns the final values.
/// Takes the function rather than the lowering context, so that loops nest
/// (a body builds its inner loops on the region's function).
pub(crate) fn counted_loop(
    f: &mut crate::hlo::Func,
    init: &[V],
    count: i64,
    body: impl FnOnce(&mut crate::hlo::Func, &[V], V) -> Vec<V>,
) -> Vec<V> {
    let j0 = f.splat_int(&Ty::scalar(Elem::I64), 0);
    let mut tys: Vec<Ty> = init.iter().map(|&v| f.ty(v).clone()).collect();
    tys.push(Ty::scalar(Elem::I64));
    let cond = f.region(&tys, |f, s| {
        let n = f.splat_int(&Ty::scalar(Elem::I64), count);
        vec![f.compare(Cmp::Lt, s[s.len() - 1], n)]
    });
    let body = f.region(&tys, |f, s| {
        let j = s[s.len() - 1];
        let mut out = body(f, &s[..s.len() - 1], j);
        let one = f.splat_int(&Ty::scalar(Elem::I64), 1);
        out.push(f.add(j, one));
        out
    });
    let mut operands = init.to_vec();
    operands.push(j0);
    let mut out = f.op("stablehlo.while", &operands, &[cond, body], "", &tys);
    out.pop();
    out
}
