//! Embedding lookup and its backward (dense, with `padding_idx` and
//! `scale_grad_by_freq`).

use crate::bail_op;
use crate::hlo::{Cmp, Elem, Reducer, Ty};
use crate::ops::Builder;
use crate::shape::{self, fmt};

use super::*;

pub(super) fn register(r: &mut Builder) {
    register_embedding(r);
    register_embedding_backward(r);
}

pub(super) fn register_embedding(r: &mut Builder) {
    r.op(
        "aten::embedding(Tensor weight, Tensor indices, SymInt padding_idx=-1, bool scale_grad_by_freq=False, \
         bool sparse=False) -> Tensor",
        |cx, a| {
            let (w, idx) = (a.tensor(0)?, a.tensor(1)?);
            let (wd, id) = (cx.dims(w), cx.dims(idx));
            if wd.len() != 2 {
                bail_op!(&*cx.op, "'weight' must be 2-D, but got weight of size {}", fmt(&wd));
            }
            check_indices(cx, idx)?;
            let rows = wd[0];
            cx.check_index(idx, 0..rows, || format!("a weight of {rows} rows"));
            // padding_idx and the flags only affect the gradient.
            let n = shape::numel(&id);
            let flat = cx.f.reshape(idx, &[n, 1]);
            let rows = cx.f.gather(w, flat, &[1], &[0], &[0], 1, &[1, wd[1]], &[n, wd[1]]);
            let mut out = id.clone();
            out.push(wd[1]);
            Ok(vec![cx.f.reshape(rows, &out)])
        },
    );
}

pub(super) fn register_embedding_backward(r: &mut Builder) {
    r.op(
        "aten::embedding_dense_backward(Tensor grad_output, Tensor indices, SymInt num_weights, SymInt padding_idx, \
         bool scale_grad_by_freq) -> Tensor",
        |cx, a| {
            let (g, idx) = (a.tensor(0)?, a.tensor(1)?);
            let (num, padding_idx, scale) = (a.int(2)?, a.int(3)?, a.bool(4)?);
            let (gd, id) = (cx.dims(g), cx.dims(idx));
            super::check_indices(cx, idx)?;
            let n = shape::numel(&id);
            if gd.len() != id.len() + 1 || gd[..id.len()] != id[..] {
                bail_op!(&*cx.op, "grad_output of size {} does not match indices of size {}", fmt(&gd), fmt(&id));
            }
            let dim = *gd.last().unwrap();
            let d = require_float(cx, g, "embedding_backward")?;
            let od = d.opmath();
            let gc = cx.f.convert(g, od);
            let gc = cx.f.reshape(gc, &[n, dim]);
            let ic = cx.f.convert(idx, Elem::I64);
            let ic = cx.f.reshape(ic, &[n]);
            // Rows of padding_idx get no gradient (-1: none).
            let pad = cx.f.splat_int(&Ty::new(Elem::I64, &[n]), padding_idx);
            let keep = cx.f.compare(Cmp::Ne, ic, pad);
            let keep = cx.f.broadcast_in_dim(keep, &[0], &[n, dim]);
            let zeros = cx.f.full_like(gc, 0.0);
            let mut gc = cx.f.select(keep, gc, zeros);
            let at = cx.f.reshape(ic, &[n, 1]);
            if scale {
                // Divide each row by how often its index occurs.
                let zn = cx.f.splat(&Ty::new(od, &[num]), 0.0);
                let ones = cx.f.splat(&Ty::new(od, &[n]), 1.0);
                let counts = cx.f.scatter(zn, at, ones, &[], &[0], &[0], 1, Some(Reducer::Add));
                let c = cx.f.gather(counts, at, &[], &[0], &[0], 1, &[1], &[n]);
                let c = cx.f.broadcast_in_dim(c, &[0], &[n, dim]);
                gc = cx.f.div(gc, c);
            }
            let zw = cx.f.splat(&Ty::new(od, &[num, dim]), 0.0);
            let out = cx.f.scatter(zw, at, gc, &[1], &[0], &[0], 1, Some(Reducer::Add));
            Ok(vec![cx.f.convert(out, d)])
        },
    );
}
