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

use super::{Args, Builder, Cx, Input, ViewOut};

pub fn register(r: &mut Builder) {
    r.op("aten::channel_shuffle(Tensor self, SymInt groups) -> Tensor", |cx, a| {
        // [N, C, *] -> [N, g, C/g, *] -> swap the two -> [N, C, *].
        let x = a.tensor(0)?;
        let groups = a.int(1)?;
        let dims = cx.dims(x);
        if dims.len() < 3 {
            bail_op!(&*cx.op, "channel_shuffle expects input to have at least 3 dimensions, but got input with sizes {}", crate::shape::fmt(&dims));
        }
        if groups <= 0 {
            bail_op!(&*cx.op, "Number of groups to divide channels in must be positive. Value of groups:{groups}");
        }
        if dims[1] % groups != 0 {
            bail_op!(&*cx.op, "Number of channels must be divisible by groups. Got {} channels and {groups} groups.", dims[1]);
        }
        let mut split = vec![dims[0], groups, dims[1] / groups];
        split.extend_from_slice(&dims[2..]);
        let y = cx.f.reshape(x, &split);
        let mut perm: Vec<usize> = (0..split.len()).collect();
        perm.swap(1, 2);
        let y = cx.f.transpose(y, &perm);
        Ok(vec![cx.f.reshape(y, &dims)])
    });
    register_views(r);
    register_copies(r);
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
    fn rank(&self) -> usize {
        self.sizes.len()
    }
}

/// The output views of a view op, from the input's geometry and the call's
/// arguments (positions as in the schema; position 0 is the input).
type GeomFn = fn(op: &str, g: &Geom, args: &[Value]) -> Result<Vec<Geom>>;

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
fn view_op(r: &mut Builder, decl: &str, geom: GeomFn) {
    let name: Arc<str> = decl[..decl.find('(').unwrap()].into();
    let list = decl.trim_end().ends_with("[]");
    r.op(decl, move |cx, a| lower_view(cx, a, geom)).view(move |args| {
        let t = match args.first() {
            Some(Value::Tensor(t)) => t,
            other => return Err(Error::Internal(format!("{name}: self is not a tensor: {other:?}"))),
        };
        let outs = geom(&name, &Geom::of(t), args)?
            .iter()
            .map(|g| t.view_of(&name, g.offset, &g.sizes, &g.strides))
            .collect::<Result<Vec<Tensor>>>()?;
        Ok(Some(ViewOut::Views(if list { vec![Value::TensorList(outs)] } else { outs.into_iter().map(Value::Tensor).collect() })))
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

fn register_views(r: &mut Builder) {
    view_op(
        r,
        "aten::as_strided(Tensor(a) self, SymInt[] size, SymInt[] stride, SymInt? storage_offset=None) -> Tensor(a)",
        as_strided,
    );
    view_op(r, "aten::view(Tensor(a) self, SymInt[] size) -> Tensor(a)", view_geom);
    view_op(r, "aten::_unsafe_view(Tensor self, SymInt[] size) -> Tensor", view_geom);
    view_op(r, "aten::alias(Tensor(a) self) -> Tensor(a)", |_, g, _| Ok(vec![g.clone()]));
    view_op(r, "aten::permute(Tensor(a) self, int[] dims) -> Tensor(a)", permute);
    view_op(r, "aten::transpose.int(Tensor(a) self, int dim0, int dim1) -> Tensor(a)", |op, g, args| {
        Ok(vec![transpose(op, g, arg_int(op, args, 1)?, arg_int(op, args, 2)?)?])
    });
    view_op(r, "aten::t(Tensor(a) self) -> Tensor(a)", |op, g, _| {
        if g.rank() > 2 {
            bail_op!(op, "t() expects a tensor with <= 2 dimensions, but self is {}D (shape {})", g.rank(), shape::fmt(&g.sizes));
        }
        Ok(vec![transpose(op, g, 0, -1)?])
    });
    view_op(r, "aten::expand(Tensor(a) self, SymInt[] size, *, bool implicit=False) -> Tensor(a)", expand);
    view_op(r, "aten::squeeze(Tensor(a) self) -> Tensor(a)", |_, g, _| {
        let keep: Vec<usize> = (0..g.rank()).filter(|&d| g.sizes[d] != 1).collect();
        Ok(vec![keep_dims(g, &keep)])
    });
    view_op(r, "aten::squeeze.dim(Tensor(a) self, int dim) -> Tensor(a)", |op, g, args| {
        squeeze_dims(op, g, &[arg_int(op, args, 1)?])
    });
    view_op(r, "aten::squeeze.dims(Tensor(a) self, int[] dim) -> Tensor(a)", |op, g, args| {
        squeeze_dims(op, g, arg_ints(op, args, 1)?)
    });
    view_op(r, "aten::unsqueeze(Tensor(a) self, int dim) -> Tensor(a)", unsqueeze);
    view_op(
        r,
        "aten::slice.Tensor(Tensor(a) self, int dim=0, SymInt? start=None, SymInt? end=None, SymInt step=1) -> Tensor(a)",
        slice,
    );
    view_op(r, "aten::select.int(Tensor(a) self, int dim, SymInt index) -> Tensor(a)", |op, g, args| {
        Ok(vec![select(op, g, arg_int(op, args, 1)?, arg_int(op, args, 2)?)?])
    });
    view_op(r, "aten::narrow(Tensor(a) self, int dim, SymInt start, SymInt length) -> Tensor(a)", narrow);
    view_op(r, "aten::split.Tensor(Tensor(a -> *) self, SymInt split_size, int dim=0) -> Tensor(a)[]", |op, g, args| {
        split(op, g, arg_int(op, args, 1)?, arg_int(op, args, 2)?)
    });
    view_op(
        r,
        "aten::split_with_sizes(Tensor(a -> *) self, SymInt[] split_sizes, int dim=0) -> Tensor(a)[]",
        |op, g, args| split_with_sizes(op, g, arg_ints(op, args, 1)?, arg_int(op, args, 2)?),
    );
    view_op(r, "aten::chunk(Tensor(a -> *) self, int chunks, int dim=0) -> Tensor(a)[]", chunk);
    view_op(r, "aten::unbind.int(Tensor(a -> *) self, int dim=0) -> Tensor(a)[]", |op, g, args| {
        if g.rank() == 0 {
            bail_op!(op, "Dimension specified as 0 but tensor has no dimensions");
        }
        let d = shape::wrap_dim(op, arg_int(op, args, 1)?, g.rank())?;
        (0..g.sizes[d]).map(|i| select(op, g, d as i64, i)).collect()
    });
    view_op(r, "aten::unfold(Tensor(a) self, int dimension, int size, int step) -> Tensor(a)", unfold);
    view_op(r, "aten::diagonal(Tensor(a) self, int offset=0, int dim1=0, int dim2=1) -> Tensor(a)", diagonal);

    // `reshape` is a view when the layout allows it and a copy otherwise.
    r.op("aten::reshape(Tensor(a) self, SymInt[] shape) -> Tensor(a)", |cx, a| {
        let x = a.tensor(0)?;
        let dims = cx.dims(x);
        let sizes = shape::infer_size(&cx.op, a.ints(1)?, shape::numel(&dims))?;
        Ok(vec![cx.f.reshape(x, &sizes)])
    })
    .view(|args| {
        let op = "aten::reshape";
        let t = match args.first() {
            Some(Value::Tensor(t)) => t,
            other => return Err(Error::Internal(format!("{op}: self is not a tensor: {other:?}"))),
        };
        let sizes = shape::infer_size(op, arg_ints(op, args, 1)?, t.numel())?;
        Ok(match shape::view_strides(t.sizes(), t.strides(), &sizes) {
            Some(strides) => Some(ViewOut::Views(vec![Value::Tensor(t.view_of(op, t.offset(), &sizes, &strides)?)])),
            None => None,
        })
    });
}

fn view_geom(op: &str, g: &Geom, args: &[Value]) -> Result<Vec<Geom>> {
    let sizes = shape::infer_size(op, arg_ints(op, args, 1)?, shape::numel(&g.sizes))?;
    match shape::view_strides(&g.sizes, &g.strides, &sizes) {
        Some(strides) => Ok(vec![Geom::new(&sizes, &strides, g.offset)]),
        None => bail_op!(
            op,
            "view size is not compatible with input tensor's size and stride (at least one dimension spans across \
             two contiguous subspaces). Use .reshape(...) instead. (input sizes {}, strides {}; requested {})",
            shape::fmt(&g.sizes),
            shape::fmt(&g.strides),
            shape::fmt(&sizes)
        ),
    }
}

/// The view keeping only `dims` (in order); dropped dims must have size 1.
fn keep_dims(g: &Geom, dims: &[usize]) -> Geom {
    let sizes: Dims = dims.iter().map(|&d| g.sizes[d]).collect();
    let strides: Dims = dims.iter().map(|&d| g.strides[d]).collect();
    Geom::new(&sizes, &strides, g.offset)
}

fn permute(op: &str, g: &Geom, args: &[Value]) -> Result<Vec<Geom>> {
    let dims = arg_ints(op, args, 1)?;
    if dims.len() != g.rank() {
        bail_op!(
            op,
            "number of dimensions in the tensor input does not match the length of the desired ordering of \
             dimensions i.e. input.dim() = {} is not equal to len(dims) = {} (input shape {}, dims {})",
            g.rank(),
            dims.len(),
            shape::fmt(&g.sizes),
            shape::fmt(dims)
        );
    }
    let perm = shape::wrap_dims(op, dims, g.rank())?;
    Ok(vec![keep_dims(g, &perm)])
}

fn transpose(op: &str, g: &Geom, d0: i64, d1: i64) -> Result<Geom> {
    let (a, b) = (shape::wrap_dim(op, d0, g.rank())?, shape::wrap_dim(op, d1, g.rank())?);
    let mut out = g.clone();
    if g.rank() > 0 {
        out.sizes.swap(a, b);
        out.strides.swap(a, b);
    }
    Ok(out)
}

/// PyTorch's `inferExpandGeometry`: dims align on the right; size-1 dims
/// and new leading dims broadcast with stride 0; -1 keeps a size.
fn expand(op: &str, g: &Geom, args: &[Value]) -> Result<Vec<Geom>> {
    let target = arg_ints(op, args, 1)?;
    let (n, r) = (target.len(), g.rank());
    if n < r {
        bail_op!(
            op,
            "expand({}, size={}): the number of sizes provided ({n}) must be greater or equal to the number of \
             dimensions in the tensor ({r})",
            shape::fmt(&g.sizes),
            shape::fmt(target)
        );
    }
    let mut sizes: Dims = smallvec::smallvec![0; n];
    let mut strides: Dims = smallvec::smallvec![0; n];
    for i in (0..n).rev() {
        let existing = (i + r).checked_sub(n);
        let mut size = existing.map_or(1, |d| g.sizes[d]);
        let mut stride = match existing {
            Some(d) => g.strides[d],
            None if i + 1 < n => sizes[i + 1] * strides[i + 1],
            None => 1,
        };
        let mut want = target[i];
        if want == -1 {
            if existing.is_none() {
                bail_op!(
                    op,
                    "The expanded size of the tensor (-1) isn't allowed in a leading, non-existing dimension {i} \
                     (target sizes {}, tensor sizes {})",
                    shape::fmt(target),
                    shape::fmt(&g.sizes)
                );
            }
            want = size;
        }
        if want < 0 {
            bail_op!(op, "Trying to create tensor with negative dimension {want}: {}", shape::fmt(target));
        }
        if size != want {
            if size != 1 {
                bail_op!(
                    op,
                    "The expanded size of the tensor ({want}) must match the existing size ({size}) at \
                     non-singleton dimension {i}.  Target sizes: {}.  Tensor sizes: {}",
                    shape::fmt(target),
                    shape::fmt(&g.sizes)
                );
            }
            size = want;
            stride = 0;
        }
        sizes[i] = size;
        strides[i] = stride;
    }
    Ok(vec![Geom::new(&sizes, &strides, g.offset)])
}

fn squeeze_dims(op: &str, g: &Geom, dims: &[i64]) -> Result<Vec<Geom>> {
    let dims = shape::wrap_dims(op, dims, g.rank())?;
    let keep: Vec<usize> = (0..g.rank()).filter(|d| !(dims.contains(d) && g.sizes[*d] == 1)).collect();
    Ok(vec![keep_dims(g, &keep)])
}

fn unsqueeze(op: &str, g: &Geom, args: &[Value]) -> Result<Vec<Geom>> {
    let d = shape::wrap_dim(op, arg_int(op, args, 1)?, g.rank() + 1)?;
    let stride = if d >= g.rank() { 1 } else { g.sizes[d] * g.strides[d] };
    let mut out = g.clone();
    out.sizes.insert(d, 1);
    out.strides.insert(d, stride);
    Ok(vec![out])
}

fn slice(op: &str, g: &Geom, args: &[Value]) -> Result<Vec<Geom>> {
    if g.rank() == 0 {
        bail_op!(op, "slice() cannot be applied to a 0-dim tensor.");
    }
    let d = shape::wrap_dim(op, arg_int(op, args, 1)?, g.rank())?;
    let step = arg_int(op, args, 4)?;
    if step <= 0 {
        bail_op!(op, "slice step must be positive, got {step}");
    }
    let (start, end) = shape::clamp_slice(g.sizes[d], arg_opt_int(args, 2), arg_opt_int(args, 3));
    let mut out = g.clone();
    out.offset += start * g.strides[d];
    out.sizes[d] = (end - start + step - 1) / step;
    out.strides[d] *= step;
    Ok(vec![out])
}

fn select(op: &str, g: &Geom, dim: i64, index: i64) -> Result<Geom> {
    if g.rank() == 0 {
        bail_op!(op, "select() cannot be applied to a 0-dim tensor.");
    }
    let d = shape::wrap_dim(op, dim, g.rank())?;
    let n = g.sizes[d];
    if index < -n || index >= n {
        bail_op!(op, "select(): index {index} out of range for tensor of size {} at dimension {d}", shape::fmt(&g.sizes));
    }
    let i = if index < 0 { index + n } else { index };
    let keep: Vec<usize> = (0..g.rank()).filter(|&k| k != d).collect();
    let mut out = keep_dims(g, &keep);
    out.offset += i * g.strides[d];
    Ok(out)
}

/// `length` elements of dim `d` from `start` (already checked).
fn narrow_dim(g: &Geom, d: usize, start: i64, length: i64) -> Geom {
    let mut out = g.clone();
    out.offset += start * g.strides[d];
    out.sizes[d] = length;
    out
}

fn narrow(op: &str, g: &Geom, args: &[Value]) -> Result<Vec<Geom>> {
    if g.rank() == 0 {
        bail_op!(op, "narrow() cannot be applied to a 0-dim tensor.");
    }
    let d = shape::wrap_dim(op, arg_int(op, args, 1)?, g.rank())?;
    let (mut start, length) = (arg_int(op, args, 2)?, arg_int(op, args, 3)?);
    if length < 0 {
        bail_op!(op, "narrow(): length must be non-negative, got {length}");
    }
    let n = g.sizes[d];
    if start < -n || start > n {
        bail_op!(op, "start out of range (expected to be in range of [{}, {n}], but got {start})", -n);
    }
    if start < 0 {
        start += n;
    }
    if start + length > n {
        bail_op!(
            op,
            "start ({start}) + length ({length}) exceeds dimension size ({n}) of dimension {d} (shape {}).",
            shape::fmt(&g.sizes)
        );
    }
    Ok(vec![narrow_dim(g, d, start, length)])
}

fn split(op: &str, g: &Geom, split_size: i64, dim: i64) -> Result<Vec<Geom>> {
    if g.rank() == 0 {
        bail_op!(op, "split expects at least a 1-dimensional tensor");
    }
    let d = shape::wrap_dim(op, dim, g.rank())?;
    let n = g.sizes[d];
    if split_size < 0 {
        bail_op!(op, "split expects split_size be non-negative, but got split_size={split_size}");
    }
    if split_size == 0 && n != 0 {
        bail_op!(op, "split_size can only be 0 if dimension size is 0, but got dimension size of {n}");
    }
    let parts = if split_size == 0 { 1 } else { ((n + split_size - 1) / split_size).max(1) };
    Ok((0..parts).map(|i| narrow_dim(g, d, i * split_size, split_size.min(n - i * split_size))).collect())
}

fn split_with_sizes(op: &str, g: &Geom, sizes: &[i64], dim: i64) -> Result<Vec<Geom>> {
    if g.rank() == 0 {
        bail_op!(op, "split expects at least a 1-dimensional tensor");
    }
    let d = shape::wrap_dim(op, dim, g.rank())?;
    let n = g.sizes[d];
    if sizes.iter().any(|&s| s < 0) {
        bail_op!(op, "split_with_sizes expects split_sizes have only non-negative entries, but got split_sizes={}", shape::fmt(sizes));
    }
    if sizes.iter().sum::<i64>() != n {
        bail_op!(
            op,
            "split_with_sizes expects split_sizes to sum exactly to {n} (input tensor's size at dimension {d}), \
             but got split_sizes={}",
            shape::fmt(sizes)
        );
    }
    let mut start = 0;
    Ok(sizes
        .iter()
        .map(|&s| {
            start += s;
            narrow_dim(g, d, start - s, s)
        })
        .collect())
}

fn chunk(op: &str, g: &Geom, args: &[Value]) -> Result<Vec<Geom>> {
    if g.rank() == 0 {
        bail_op!(op, "chunk expects at least a 1-dimensional tensor");
    }
    let chunks = arg_int(op, args, 1)?;
    if chunks <= 0 {
        bail_op!(op, "chunk expects `chunks` to be greater than 0, got: {chunks}");
    }
    let dim = arg_int(op, args, 2)?;
    let d = shape::wrap_dim(op, dim, g.rank())?;
    let n = g.sizes[d];
    let split_size = (n + chunks - 1) / chunks;
    if split_size == 0 && n == 0 {
        // Keep the requested number of (empty) chunks, as PyTorch does.
        return split_with_sizes(op, g, &vec![0; chunks as usize], dim);
    }
    split(op, g, split_size, dim)
}

/// Sliding windows of `size` every `step` along a dim, as a new last dim.
fn unfold(op: &str, g: &Geom, args: &[Value]) -> Result<Vec<Geom>> {
    let (dim, size, step) = (arg_int(op, args, 1)?, arg_int(op, args, 2)?, arg_int(op, args, 3)?);
    let d = shape::wrap_dim(op, dim, g.rank())?;
    // A 0-dim tensor unfolds as if it had one dim of size 1.
    let (n, stride) = if g.rank() == 0 { (1, 1) } else { (g.sizes[d], g.strides[d]) };
    if size > n {
        bail_op!(op, "maximum size for tensor at dimension {d} is {n} but size is {size} (shape {})", shape::fmt(&g.sizes));
    }
    if size < 0 {
        bail_op!(op, "size is {size} but must be >= 0");
    }
    if step <= 0 {
        bail_op!(op, "step is {step} but must be > 0");
    }
    let mut out = g.clone();
    if g.rank() > 0 {
        out.sizes[d] = (n - size) / step + 1;
        out.strides[d] = step * stride;
    }
    out.sizes.push(size);
    out.strides.push(stride);
    Ok(vec![out])
}

/// The diagonal of dims (dim1, dim2) as a new last dim.
fn diagonal(op: &str, g: &Geom, args: &[Value]) -> Result<Vec<Geom>> {
    let k = arg_int(op, args, 1)?;
    let a = shape::wrap_dim(op, arg_int(op, args, 2)?, g.rank())?;
    let b = shape::wrap_dim(op, arg_int(op, args, 3)?, g.rank())?;
    if g.rank() < 2 {
        bail_op!(op, "diagonal expects a tensor with at least 2 dimensions, got shape {}", shape::fmt(&g.sizes));
    }
    if a == b {
        bail_op!(op, "diagonal dimensions cannot be identical {} and {}", arg_int(op, args, 2)?, arg_int(op, args, 3)?);
    }
    let (mut offset, len) = if k >= 0 {
        (k * g.strides[b], g.sizes[a].min(g.sizes[b] - k).max(0))
    } else {
        (-k * g.strides[a], (g.sizes[a] + k).min(g.sizes[b]).max(0))
    };
    // An empty diagonal keeps the base offset, as PyTorch does.
    if len == 0 {
        offset = 0;
    }
    let keep: Vec<usize> = (0..g.rank()).filter(|&d| d != a && d != b).collect();
    let mut out = keep_dims(g, &keep);
    out.offset += offset;
    out.sizes.push(len);
    out.strides.push(g.strides[a] + g.strides[b]);
    Ok(vec![out])
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

// ---------------------------------------------------------- non-view ops

fn register_copies(r: &mut Builder) {
    r.op("aten::cat(Tensor[] tensors, int dim=0) -> Tensor", |cx, a| cat(cx, a.tensors(0)?, a.int(1)?));
    r.op("aten::stack(Tensor[] tensors, int dim=0) -> Tensor", |cx, a| {
        let xs = a.tensors(0)?;
        let Some(&first) = xs.first() else { bail_op!(&*cx.op, "stack expects a non-empty TensorList") };
        let dims = cx.dims(first);
        for (i, &x) in xs.iter().enumerate() {
            if cx.dims(x) != dims {
                bail_op!(
                    &*cx.op,
                    "stack expects each tensor to be equal size, but got {} at entry 0 and {} at entry {i}",
                    shape::fmt(&dims),
                    shape::fmt(&cx.dims(x))
                );
            }
        }
        let d = shape::wrap_dim(&cx.op, a.int(1)?, dims.len() + 1)?;
        let mut new_dims = dims.clone();
        new_dims.insert(d, 1);
        let parts: Vec<V> = xs.iter().map(|&x| cx.f.reshape(x, &new_dims)).collect();
        cat(cx, &parts, d as i64)
    });
    r.op("aten::flip(Tensor self, int[] dims) -> Tensor", |cx, a| {
        let x = a.tensor(0)?;
        let dims = shape::wrap_dims(&cx.op, a.ints(1)?, cx.rank(x))?;
        // A 0-dim tensor has nothing to reverse.
        let dims: Vec<usize> = dims.into_iter().filter(|&d| d < cx.rank(x)).collect();
        let y = cx.f.reverse(x, &dims);
        Ok(vec![y])
    });
    r.op("aten::roll(Tensor self, SymInt[1] shifts, int[1] dims=[]) -> Tensor", roll);
    for (name, lower) in [("tril", true), ("triu", false)] {
        r.op_and_inplace(&format!("aten::{name}(Tensor self, int diagonal=0) -> Tensor"), move |cx, a| {
            triangle(cx, a.tensor(0)?, a.int(1)?, lower)
        });
    }
    r.op("aten::constant_pad_nd(Tensor self, SymInt[] pad, Scalar value=0) -> Tensor", constant_pad_nd);
    r.op("aten::repeat(Tensor self, SymInt[] repeats) -> Tensor", repeat);
    r.op(
        "aten::unfold_backward(Tensor grad_in, SymInt[] input_sizes, int dim, int size, int step) -> Tensor",
        unfold_backward,
    );
}

/// The gradient of `unfold`: each window's entries added back where they
/// came from (overlapping windows add up), one scatter-add.
fn unfold_backward(cx: &mut Cx, a: &Args) -> Result<Vec<V>> {
    let g = a.tensor(0)?;
    let sizes = a.ints(1)?.to_vec();
    let (size, step) = (a.int(3)?, a.int(4)?);
    let rank = sizes.len();
    let d = if rank == 0 { 0 } else { shape::wrap_dim(&cx.op, a.int(2)?, rank)? };
    let gdims = cx.dims(g);
    let len = if rank == 0 { 1 } else { sizes[d] };
    let windows = if rank == 0 { 1 } else { gdims.get(d).copied().unwrap_or(0) };
    let mut want: Dims = sizes.iter().copied().collect();
    if rank > 0 {
        want[d] = windows;
    }
    want.push(size);
    if gdims.as_slice() != want.as_slice() || step <= 0 || size < 0 || (windows > 0 && (windows - 1) * step + size > len) {
        bail_op!(
            &*cx.op,
            "grad of shape {} does not fit unfold(dim={}, size={size}, step={step}) of a tensor of shape {}",
            shape::fmt(&gdims),
            a.int(2)?,
            shape::fmt(&sizes)
        );
    }
    let elem = cx.ty(g).elem;
    if rank == 0 {
        let v = cx.f.reshape(g, &[]);
        return Ok(vec![v]);
    }
    // [windows, size, the other dims] -> rows of the other dims, indexed by
    // their position along `dim`.
    let rest: Vec<usize> = (0..rank).filter(|&i| i != d).collect();
    let mut perm = vec![d, rank];
    perm.extend(&rest);
    let t = cx.f.transpose(g, &perm);
    let rest_dims: Vec<i64> = rest.iter().map(|&i| sizes[i]).collect();
    let mut rows = vec![windows * size];
    rows.extend(&rest_dims);
    let updates = cx.f.reshape(t, &rows);
    let ty = crate::hlo::Ty::new(Elem::I64, &[windows, size]);
    let (w, k) = (cx.f.iota(&ty, 0), cx.f.iota(&ty, 1));
    let st = cx.f.splat_int(&ty, step);
    let ws = cx.f.mul(w, st);
    let idx = cx.f.add(ws, k);
    let idx = cx.f.reshape(idx, &[windows * size, 1]);
    let mut out_dims = vec![len];
    out_dims.extend(&rest_dims);
    let zeros = cx.f.splat(&crate::hlo::Ty::new(elem, &out_dims), 0.0);
    let window_dims: Vec<i64> = (1..rank as i64).collect();
    let summed = cx.f.scatter(zeros, idx, updates, &window_dims, &[0], &[0], 1, Some(crate::hlo::Reducer::Add));
    // Back to the input's dim order.
    let mut inverse = vec![0; rank];
    let order: Vec<usize> = std::iter::once(d).chain(rest.iter().copied()).collect();
    for (i, &p) in order.iter().enumerate() {
        inverse[p] = i;
    }
    Ok(vec![cx.f.transpose(summed, &inverse)])
}

/// `torch.cat` with PyTorch's type promotion and its legacy rule that 1-D
/// empty tensors are skipped whatever the other shapes.
fn cat(cx: &mut Cx, xs: &[V], dim: i64) -> Result<Vec<V>> {
    let op = cx.op.clone();
    if xs.is_empty() {
        bail_op!(&*op, "torch.cat(): expected a non-empty list of Tensors");
    }
    for (i, &x) in xs.iter().enumerate() {
        if cx.rank(x) == 0 {
            bail_op!(&*op, "zero-dimensional tensor (at position {i}) cannot be concatenated");
        }
    }
    let ews: Vec<super::common::Ew> = xs.iter().map(|&x| super::common::Ew::T(x)).collect();
    let dtype = super::common::result_dtype(cx, &ews);
    let skipped = |cx: &Cx, x: V| cx.dims(x).as_slice() == [0];
    let Some(first) = xs.iter().position(|&x| !skipped(cx, x)) else {
        // Only legacy empties: the result is empty too.
        return Ok(vec![cx.f.splat(&crate::hlo::Ty::new(dtype, &[0]), 0.0)]);
    };
    let ref_dims = cx.dims(xs[first]);
    let d = shape::wrap_dim(&op, dim, ref_dims.len())?;
    let mut parts = Vec::new();
    let mut out_dims = ref_dims.clone();
    out_dims[d] = 0;
    for (i, &x) in xs.iter().enumerate() {
        if skipped(cx, x) {
            continue;
        }
        let dims = cx.dims(x);
        if dims.len() != ref_dims.len() {
            bail_op!(
                &*op,
                "Tensors must have same number of dimensions: got {} and {} (shapes {} at position {first} and {} at position {i})",
                ref_dims.len(),
                dims.len(),
                shape::fmt(&ref_dims),
                shape::fmt(&dims)
            );
        }
        if let Some(k) = (0..dims.len()).find(|&k| k != d && dims[k] != ref_dims[k]) {
            bail_op!(
                &*op,
                "Sizes of tensors must match except in dimension {d}. Expected size {} but got size {} for tensor \
                 number {i} in the list (shapes {} and {}, dimension {k}).",
                ref_dims[k],
                dims[k],
                shape::fmt(&ref_dims),
                shape::fmt(&dims)
            );
        }
        out_dims[d] += dims[d];
        if dims[d] > 0 {
            parts.push(cx.f.convert(x, dtype));
        }
    }
    if parts.is_empty() || shape::numel(&out_dims) == 0 {
        return Ok(vec![cx.f.splat(&crate::hlo::Ty::new(dtype, &out_dims), 0.0)]);
    }
    let y = cx.f.concatenate(&parts, d);
    Ok(vec![y])
}

fn roll(cx: &mut Cx, a: &Args) -> Result<Vec<V>> {
    let x = a.tensor(0)?;
    let (shifts, dims) = (a.ints(1)?, a.ints(2)?);
    let in_dims = cx.dims(x);
    if dims.is_empty() {
        // Roll the flattened tensor.
        if shifts.len() != 1 {
            bail_op!(&*cx.op, "shifts and dimensions must align. shifts: {}, dims:0", shifts.len());
        }
        let n = shape::numel(&in_dims);
        let flat = cx.f.reshape(x, &[n]);
        let y = roll_dim(cx, flat, 0, shifts[0]);
        let y = cx.f.reshape(y, &in_dims);
        return Ok(vec![y]);
    }
    if shifts.len() != dims.len() {
        bail_op!(&*cx.op, "shifts and dimensions must align. shifts: {}, dims:{}", shifts.len(), dims.len());
    }
    let mut y = x;
    for (&s, &d) in shifts.iter().zip(dims) {
        let d = shape::wrap_dim(&cx.op, d, in_dims.len())?;
        if !in_dims.is_empty() {
            y = roll_dim(cx, y, d, s);
        }
    }
    Ok(vec![y])
}

/// Rolls dim `d` by `shift`: the last `shift` elements move to the front.
fn roll_dim(cx: &mut Cx, x: V, d: usize, shift: i64) -> V {
    let n = cx.dims(x)[d];
    if n == 0 {
        return x;
    }
    let s = shift.rem_euclid(n);
    if s == 0 {
        return x;
    }
    let tail = cx.f.slice_dim(x, d, n - s, n, 1);
    let head = cx.f.slice_dim(x, d, 0, n - s, 1);
    cx.f.concatenate(&[tail, head], d)
}

/// `tril` (`lower`) or `triu` over the last two dims: keeps the elements with
/// `col - row <= diagonal` (tril) or `>= diagonal` (triu), zeroes the rest.
fn triangle(cx: &mut Cx, x: V, diagonal: i64, lower: bool) -> Result<Vec<V>> {
    let dims = cx.dims(x);
    let r = dims.len();
    if r < 2 {
        let name = if lower { "tril" } else { "triu" };
        bail_op!(&*cx.op, "{name}: input tensor must have at least 2 dimensions (got shape {})", shape::fmt(&dims));
    }
    let ty = crate::hlo::Ty::new(Elem::I64, &dims[r - 2..]);
    let rows = cx.f.iota(&ty, 0);
    let cols = cx.f.iota(&ty, 1);
    let diff = cx.f.sub(cols, rows);
    let k = cx.f.splat_int(&ty, diagonal);
    let dir = if lower { crate::hlo::Cmp::Le } else { crate::hlo::Cmp::Ge };
    let keep = cx.f.compare(dir, diff, k);
    let keep = cx.f.broadcast_to(keep, &dims);
    let zero = cx.f.full_like(x, 0.0);
    Ok(vec![cx.f.select(keep, x, zero)])
}

/// Pads (or, for negative amounts, crops) the last dims; `pad` lists
/// (before, after) pairs starting from the last dim.
fn constant_pad_nd(cx: &mut Cx, a: &Args) -> Result<Vec<V>> {
    let x = a.tensor(0)?;
    let pad = a.ints(1)?;
    let dims = cx.dims(x);
    let r = dims.len();
    if pad.len() % 2 != 0 {
        bail_op!(&*cx.op, "Length of pad must be even but instead it equals {}", pad.len());
    }
    if pad.len() / 2 > r {
        bail_op!(
            &*cx.op,
            "Length of pad should be no more than twice the number of dimensions of the input. Pad length is {} \
             while the input has {r} dimensions (shape {}).",
            pad.len(),
            shape::fmt(&dims)
        );
    }
    let (mut low, mut high) = (vec![0; r], vec![0; r]);
    for (i, p) in pad.chunks(2).enumerate() {
        let d = r - 1 - i;
        (low[d], high[d]) = (p[0], p[1]);
        if dims[d] + p[0] + p[1] < 0 {
            bail_op!(
                &*cx.op,
                "The input size {}, plus negative padding {} and {} resulted in a negative output size, which is \
                 invalid. Check dimension {d} of your input (shape {}).",
                dims[d],
                p[0],
                p[1],
                shape::fmt(&dims)
            );
        }
    }
    let out_dims: Vec<i64> = (0..r).map(|d| dims[d] + low[d] + high[d]).collect();
    let value = cx.scalar(a.scalar(2)?, cx.dtype(x));
    if shape::numel(&out_dims) == 0 {
        let ty = crate::hlo::Ty::new(cx.dtype(x), &out_dims);
        return Ok(vec![cx.f.splat(&ty, 0.0)]);
    }
    if shape::numel(&dims) == 0 {
        // Nothing to pad from: the result is all `value`.
        return Ok(vec![cx.f.broadcast_in_dim(value, &[], &out_dims)]);
    }
    let interior = vec![0; r];
    let y = cx.f.pad(x, value, &low, &high, &interior);
    Ok(vec![y])
}

/// Tiles the tensor `repeats[i]` times along each dim (new leading dims for
/// extra repeats).
fn repeat(cx: &mut Cx, a: &Args) -> Result<Vec<V>> {
    let x = a.tensor(0)?;
    let reps = a.ints(1)?;
    let dims = cx.dims(x);
    if reps.len() < dims.len() {
        bail_op!(
            &*cx.op,
            "Number of dimensions of repeat dims can not be smaller than number of dimensions of tensor \
             (repeats {}, shape {})",
            shape::fmt(reps),
            shape::fmt(&dims)
        );
    }
    if let Some(&n) = reps.iter().find(|&&n| n < 0) {
        bail_op!(&*cx.op, "Trying to create tensor with negative dimension {n}: {}", shape::fmt(reps));
    }
    let lead = reps.len() - dims.len();
    let padded: Vec<i64> = std::iter::repeat_n(1, lead).chain(dims.iter().copied()).collect();
    let out_dims: Vec<i64> = reps.iter().zip(&padded).map(|(r, d)| r * d).collect();
    if shape::numel(&out_dims) == 0 {
        let ty = crate::hlo::Ty::new(cx.dtype(x), &out_dims);
        return Ok(vec![cx.f.splat(&ty, 0.0)]);
    }
    // Broadcast to [r0, d0, r1, d1, ...] then merge each (r, d) pair.
    let xp = cx.f.reshape(x, &padded);
    let inter: Vec<i64> = reps.iter().zip(&padded).flat_map(|(&r, &d)| [r, d]).collect();
    let map: Vec<i64> = (0..padded.len()).map(|i| 2 * i as i64 + 1).collect();
    let b = cx.f.broadcast_in_dim(xp, &map, &inter);
    let y = cx.f.reshape(b, &out_dims);
    Ok(vec![y])
}

#[cfg(test)]
mod tests {
    //! Each view op's lowering (the copy fallback) must give the values of
    //! its view kernel (checked against PyTorch by the Python suite).

    use super::*;
    use crate::dtype::DType;
    use crate::hlo::Ty;
    use crate::ops::{registry, ParamSrc};
    use crate::pjrt::CompileOptions;
    use crate::runtime::{Runtime, RuntimeOptions};

    fn f32s(bytes: &[u8]) -> Vec<f32> {
        bytes.chunks(4).map(|c| f32::from_ne_bytes(c.try_into().unwrap())).collect()
    }

    /// Runs `name`'s lowering on the dense values of `x`; returns each
    /// output's elements.
    fn lowered(rt: &Arc<Runtime>, name: &str, x: &Tensor, args: &[Value]) -> Vec<Vec<f32>> {
        let reg = registry();
        let def = reg.get(reg.lookup(name).unwrap());
        let mut all = vec![Value::Tensor(x.clone())];
        all.extend_from_slice(args);
        let bound = def.schema.bind(&all).unwrap();
        let mut cx = Cx::new(name);
        let p = cx.param(Ty::new(Elem::F32, &[x.numel()]), ParamSrc::Storage(0));
        let xv = cx.f.reshape(p, x.sizes());
        let inputs: Vec<Input> = bound
            .iter()
            .map(|v| match v {
                Value::Tensor(_) => Input::Tensor(xv),
                Value::Int(i) => Input::Int(*i),
                Value::IntList(l) => Input::Ints(l.clone()),
                Value::Bool(b) => Input::Bool(*b),
                _ => Input::None,
            })
            .collect();
        let outs = (def.lower)(&mut cx, &Args::new(name, &inputs)).unwrap();
        let flat: Vec<V> = outs
            .iter()
            .map(|&v| {
                let n = cx.ty(v).numel();
                cx.f.reshape(v, &[n])
            })
            .collect();
        let exe = rt.client().compile(name, &cx.f.finish(&flat), &CompileOptions::Portable).unwrap();
        let data = rt.tensor_to_host(x).unwrap();
        let buf = rt.client().buffer_from_host(&data, Elem::F32.element_type(), &[x.numel()], 0).unwrap();
        let (bufs, event) = exe.execute(&[&buf], 0).unwrap();
        event.wait().unwrap();
        bufs.iter()
            .map(|b| {
                let mut out = vec![0u8; b.bytes()];
                b.to_host(&mut out).unwrap();
                f32s(&out)
            })
            .collect()
    }

    #[test]
    fn lowerings_match_view_kernels() {
        let rt = Runtime::new(RuntimeOptions::default()).expect("runtime (run scripts/setup.sh)");
        let data: Vec<u8> = (0..80).flat_map(|i| (i as f32).to_ne_bytes()).collect();
        let base = rt.tensor_from_host(&data, DType::F32, &[80], 0).unwrap();
        // A contiguous block and a permuted, offset view of the same shape.
        let inputs = [
            base.view_of("test", 5, &[3, 1, 6], &[6, 6, 1]).unwrap(),
            base.view_of("test", 3, &[3, 1, 6], &[1, 5, 9]).unwrap(),
        ];
        let ints = |v: &[i64]| Value::IntList(v.to_vec());
        let cases: Vec<(&str, Vec<Value>)> = vec![
            ("aten::view", vec![ints(&[3, 6])]),
            ("aten::_unsafe_view", vec![ints(&[6, -1])]),
            ("aten::alias", vec![]),
            ("aten::permute", vec![ints(&[2, 0, 1])]),
            ("aten::transpose.int", vec![Value::Int(0), Value::Int(-1)]),
            ("aten::expand", vec![ints(&[2, 3, 4, 6])]),
            ("aten::squeeze", vec![]),
            ("aten::squeeze.dims", vec![ints(&[1, 2])]),
            ("aten::unsqueeze", vec![Value::Int(-1)]),
            ("aten::slice.Tensor", vec![Value::Int(-1), Value::Int(1), Value::None, Value::Int(2)]),
            ("aten::select.int", vec![Value::Int(2), Value::Int(-2)]),
            ("aten::narrow", vec![Value::Int(0), Value::Int(1), Value::Int(2)]),
            ("aten::split.Tensor", vec![Value::Int(4), Value::Int(2)]),
            ("aten::split_with_sizes", vec![ints(&[1, 2]), Value::Int(0)]),
            ("aten::chunk", vec![Value::Int(4), Value::Int(-1)]),
            ("aten::unbind.int", vec![Value::Int(0)]),
            ("aten::unfold", vec![Value::Int(2), Value::Int(3), Value::Int(2)]),
            ("aten::diagonal", vec![Value::Int(1), Value::Int(0), Value::Int(2)]),
        ];
        // as_strided's lowering reads the dense input as its storage:
        // elements 1, 2, 4, 5 of [5, 6, ...].
        let got = lowered(&rt, "aten::as_strided", &inputs[0], &[ints(&[2, 2]), ints(&[3, 1]), Value::Int(1)]);
        assert_eq!(got, vec![vec![6.0, 7.0, 9.0, 10.0]]);
        for (name, args) in &cases {
            for (k, x) in inputs.iter().enumerate() {
                let mut all = vec![Value::Tensor(x.clone())];
                all.extend_from_slice(args);
                let views: Vec<Tensor> = match rt.call(name, &all) {
                    Ok(out) => out
                        .into_iter()
                        .flat_map(|v| match v {
                            Value::Tensor(t) => vec![t],
                            Value::TensorList(ts) => ts,
                            other => panic!("{name}: {other:?}"),
                        })
                        .collect(),
                    // `view` of the permuted input is refused either way.
                    Err(_) if k == 1 && name.contains("view") => continue,
                    Err(e) => panic!("{name} on input {k}: {e}"),
                };
                let want: Vec<Vec<f32>> = views.iter().map(|t| f32s(&rt.tensor_to_host(t).unwrap())).collect();
                assert_eq!(lowered(&rt, name, x, args), want, "{name} on input {k}");
            }
        }
    }
}
