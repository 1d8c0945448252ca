//! Copies and casts: `clone`, `_to_copy` (dtype and device changes),
//! `copy_` (broadcasting, casting, across devices, through views) and
//! `resize_`.

use super::{Builder, Composite};

pub fn register(r: &mut Builder) {
    r.op("aten::clone(Tensor self, *, MemoryFormat? memory_format=None) -> Tensor", |cx, a| {
        let x = a.tensor(0)?;
        // A read of the view is already a new value; copy it so the program
        // never returns a parameter unchanged.
        Ok(vec![cx.f.broadcast_to(x, &cx.dims(x))])
    });
    r.op(
        "aten::_to_copy(Tensor self, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, \
         bool? pin_memory=None, bool non_blocking=False, MemoryFormat? memory_format=None) -> Tensor",
        |cx, a| {
            let x = a.tensor(0)?;
            let d = a.opt_dtype(1).unwrap_or_else(|| cx.dtype(x));
            Ok(vec![cx.f.convert(x, d)])
        },
    )
    .cross_device();
    r.op("aten::copy_(Tensor(a!) self, Tensor src, bool non_blocking=False) -> Tensor(a!)", |cx, a| {
        let (dst, src) = (a.tensor(0)?, a.tensor(1)?);
        let dims = cx.dims(dst);
        let b = crate::shape::broadcast(&cx.op, &cx.dims(src), &dims)?;
        if b.as_slice() != dims.as_slice() {
            return Err(cx.err(format!(
                "output with shape {} doesn't match the broadcast shape {}",
                crate::shape::fmt(&dims),
                crate::shape::fmt(&b)
            )));
        }
        let v = cx.f.convert(src, cx.dtype(dst));
        Ok(vec![cx.f.broadcast_to(v, &dims)])
    })
    .any_cast()
    .cross_device();
    r.composite(
        "aten::resize_(Tensor(a!) self, SymInt[] size, *, MemoryFormat? memory_format=None) -> Tensor(a!)",
        Composite::Resize,
    );
}
