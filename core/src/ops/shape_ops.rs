//! Shape ops. View ops (`view`, `permute`, `slice`, `split`, ...) are
//! metadata kernels over `(offset, sizes, strides)`: they make a new view of
//! the same storage and run nothing. Each view op is described once by a
//! geometry function; its lowering (used when no view can be made, e.g. a
//! `reshape` of a transposed tensor) reads the same geometry out of the
//! input's values laid out contiguously, so both paths agree by construction.
//! Non-view ops (`cat`, `stack`, `flip`, `tril`, `constant_pad_nd`, ...) are
//! ordinary lowerings.

use std::sync::Arc;

use crate::bail_op;
use crate::error::{Error, Result};
use crate::hlo::{Elem, V};
use crate::shape::{self, Dims};
use crate::tensor::{Tensor, Value};
use crate::view;

use super::{Args, Cx, Input, Registry};

pub fn register(r: &mut Registry) {
    register_views(r);
}

// ------------------------------------------------------------------ geometry

/// A view's place in its storage.
#[derive(Debug, Clone)]
struct Geom {
    sizes: Dims,
    strides: Dims,
    offset: i64,
}

impl Geom {
    fn of(t: &Tensor) -> Geom {
        Geom { sizes: t.sizes().into(), strides: t.strides().into(), offset: t.offset() }
    }
    fn new(sizes: &[i64], strides: &[i64], offset: i64) -> Geom {
        Geom { sizes: sizes.into(), strides: strides.into(), offset }
    }
    #[allow(dead_code)]
    fn rank(&self) -> usize {
        self.sizes.len()
    }
}

/// The output views of a view op, from the input's geometry and the call's
/// arguments (positions as in the schema; position 0 is the input).
type GeomFn = fn(op: &str, g: &Geom, args: &[Value]) -> Result<Vec<Geom>>;

#[allow(dead_code)]
fn arg_int(op: &str, args: &[Value], i: usize) -> Result<i64> {
    match args.get(i) {
        Some(Value::Int(v)) => Ok(*v),
        other => Err(Error::Internal(format!("{op}: argument {i} is not an int: {other:?}"))),
    }
}

fn arg_opt_int(args: &[Value], i: usize) -> Option<i64> {
    match args.get(i) {
        Some(Value::Int(v)) => Some(*v),
        _ => None,
    }
}

fn arg_ints<'a>(op: &str, args: &'a [Value], i: usize) -> Result<&'a [i64]> {
    match args.get(i) {
        Some(Value::IntList(v)) => Ok(v),
        other => Err(Error::Internal(format!("{op}: argument {i} is not an int list: {other:?}"))),
    }
}

/// The lowering's non-tensor arguments as values, so geometry functions
/// read them the same way in both paths.
fn values_of(a: &Args) -> Vec<Value> {
    (0..a.len())
        .map(|i| match a.get(i) {
            Input::Int(v) => Value::Int(*v),
            Input::Ints(v) => Value::IntList(v.clone()),
            Input::Bool(v) => Value::Bool(*v),
            _ => Value::None,
        })
        .collect()
}

/// Registers a view op: a metadata kernel plus a lowering that computes the
/// same values as a copy.
fn view_op(r: &mut Registry, decl: &str, geom: GeomFn) {
    let name: Arc<str> = decl[..decl.find('(').unwrap()].into();
    let list = decl.trim_end().ends_with("[]");
    r.op(decl, move |cx, a| lower_view(cx, a, geom)).view(move |_rt, args| {
        let t = match args.first() {
            Some(Value::Tensor(t)) => t,
            other => return Err(Error::Internal(format!("{name}: self is not a tensor: {other:?}"))),
        };
        let outs = geom(&name, &Geom::of(t), args)?
            .iter()
            .map(|g| t.view_of(&name, g.offset, &g.sizes, &g.strides))
            .collect::<Result<Vec<Tensor>>>()?;
        Ok(Some(if list { vec![Value::TensorList(outs)] } else { outs.into_iter().map(Value::Tensor).collect() }))
    });
}

/// Applies a view op's geometry to the input's values as if they were a
/// contiguous storage of their own.
fn lower_view(cx: &mut Cx, a: &Args, geom: GeomFn) -> Result<Vec<V>> {
    let x = a.tensor(0)?;
    let dims = cx.dims(x);
    let numel = shape::numel(&dims);
    let g = Geom::new(&dims, &shape::contiguous_strides(&dims), 0);
    let outs = geom(&cx.op, &g, &values_of(a))?;
    let flat = cx.f.reshape(x, &[numel]);
    let mut vs = Vec::with_capacity(outs.len());
    for o in outs {
        check_in_bounds(cx, &o, numel)?;
        let layout = view::classify(numel, o.offset, &o.sizes, &o.strides);
        let offset = (layout != view::Layout::Whole).then(|| cx.f.splat_int(&crate::hlo::Ty::scalar(Elem::I64), o.offset));
        vs.push(view::read(&mut cx.f, flat, &layout, offset, &o.sizes, &o.strides));
    }
    Ok(vs)
}

/// The checks `Tensor::view_of` makes, for the lowering's values.
fn check_in_bounds(cx: &Cx, g: &Geom, numel: i64) -> Result<()> {
    if g.sizes.iter().any(|&s| s < 0) || g.strides.iter().any(|&s| s < 0) || g.offset < 0 {
        bail_op!(
            &*cx.op,
            "negative size, stride or offset: sizes {}, strides {}, offset {}",
            shape::fmt(&g.sizes),
            shape::fmt(&g.strides),
            g.offset
        );
    }
    if shape::numel(&g.sizes) > 0 {
        let last = g.offset + g.sizes.iter().zip(&g.strides).map(|(n, s)| (n - 1) * s).sum::<i64>();
        if last >= numel {
            bail_op!(
                &*cx.op,
                "view with sizes {}, strides {} and offset {} reaches element {last}, out of bounds for an input of {numel} elements",
                shape::fmt(&g.sizes),
                shape::fmt(&g.strides),
                g.offset
            );
        }
    }
    Ok(())
}

// --------------------------------------------------------------- view ops

fn register_views(r: &mut Registry) {
    view_op(
        r,
        "aten::as_strided(Tensor(a) self, SymInt[] size, SymInt[] stride, SymInt? storage_offset=None) -> Tensor(a)",
        as_strided,
    );
}

fn as_strided(op: &str, g: &Geom, args: &[Value]) -> Result<Vec<Geom>> {
    let (size, stride) = (arg_ints(op, args, 1)?, arg_ints(op, args, 2)?);
    if size.len() != stride.len() {
        bail_op!(op, "mismatch in length of strides and shape: sizes {}, strides {}", shape::fmt(size), shape::fmt(stride));
    }
    if let Some(s) = stride.iter().find(|&&s| s < 0) {
        bail_op!(op, "Negative strides are not supported at the moment, got strides: {} ({s})", shape::fmt(stride));
    }
    Ok(vec![Geom::new(size, stride, arg_opt_int(args, 3).unwrap_or(g.offset))])
}
