//! Reading and writing strided views inside a program.
//!
//! A storage enters a program as a rank-1 value. Reading a view lowers to the
//! cheapest form that fits: a reshape (the whole storage), a dynamic slice (a
//! contiguous block), slice/reshape/transpose over a padded block (any
//! non-overlapping layout whose strides divide each other), or a gather
//! (anything else). Writing uses the inverse: dynamic_update_slice, or a
//! scatter. The offset is a runtime argument, so `x[i]` for a changing `i`
//! does not recompile.

use crate::hlo::{Elem, Func, Ty, V};
use crate::shape::{self, Dims};

/// How a view is laid out in its storage (independent of the offset).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Layout {
    /// Offset 0, contiguous, covers the whole storage.
    Whole,
    /// A contiguous block at a runtime offset.
    Block,
    /// Non-overlapping with strides that divide each other: read through a
    /// reshaped block. `order` lists the strided dims, outermost first.
    Strided(Strided),
    /// General: a gather with computed indices.
    Gather,
    /// A gather at indices computed from a runtime offset and runtime
    /// strides ([`read_at`], [`write_at`]), so one program serves every
    /// stride. [`classify`] never gives it: the runtime picks it for a small
    /// view of a storage that grows (its strides change with the storage).
    Runtime,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Strided {
    /// Dims with size > 1 and stride > 0, ordered by decreasing stride.
    order: Vec<usize>,
    /// Shape of the reshaped block (one entry per `order` dim, plus the
    /// innermost stride when it is > 1).
    base: Vec<i64>,
    /// Elements spanned by the view: `1 + sum((n - 1) * stride)`.
    extent: i64,
}

/// Classifies a view of a storage of `storage_numel` elements.
pub fn classify(storage_numel: i64, offset: i64, sizes: &[i64], strides: &[i64]) -> Layout {
    let numel = shape::numel(sizes);
    let contiguous = shape::is_contiguous(sizes, strides);
    if contiguous && offset == 0 && numel == storage_numel {
        return Layout::Whole;
    }
    if contiguous || numel == 0 {
        return Layout::Block;
    }
    let mut order: Vec<usize> = (0..sizes.len()).filter(|&d| sizes[d] > 1 && strides[d] > 0).collect();
    order.sort_by(|&a, &b| strides[b].cmp(&strides[a]).then(a.cmp(&b)));
    if order.is_empty() {
        // Every element is the one at the offset (a 0-dim tensor expanded):
        // read one element and broadcast it.
        return Layout::Strided(Strided { order, base: Vec::new(), extent: 1 });
    }
    let mut base = vec![sizes[order[0]]];
    for w in order.windows(2) {
        let (outer, inner) = (strides[w[0]], strides[w[1]]);
        if inner == outer || outer % inner != 0 || sizes[w[1]] * inner > outer {
            return Layout::Gather;
        }
        base.push(outer / inner);
    }
    let innermost = strides[*order.last().unwrap()];
    if innermost > 1 {
        base.push(innermost);
    }
    let extent = 1 + order.iter().map(|&d| (sizes[d] - 1) * strides[d]).sum::<i64>();
    Layout::Strided(Strided { order, base, extent })
}

/// The view's elements as a value of shape `sizes`. `offset` is a rank-0 i64
/// value, or `None` for [`Layout::Whole`].
pub fn read(f: &mut Func, storage: V, layout: &Layout, offset: Option<V>, sizes: &[i64], strides: &[i64]) -> V {
    let elem = f.ty(storage).elem;
    let numel = shape::numel(sizes);
    if numel == 0 {
        return f.splat(&Ty::new(elem, sizes), 0.0);
    }
    match layout {
        Layout::Whole => f.reshape(storage, sizes),
        Layout::Block => {
            let block = f.dynamic_slice(storage, &[offset.unwrap()], &[numel]);
            f.reshape(block, sizes)
        }
        Layout::Strided(s) => {
            let base = strided_base(f, storage, s, offset.unwrap());
            // Keep the first n entries of each strided dim and entry 0 of the
            // innermost padding dim, then restore the view's dim order.
            let limit: Vec<i64> = s
                .base
                .iter()
                .enumerate()
                .map(|(j, &b)| if j < s.order.len() { sizes[s.order[j]] } else { 1.min(b) })
                .collect();
            let zeros = vec![0; limit.len()];
            let ones = vec![1; limit.len()];
            let sliced = f.slice(base, &zeros, &limit, &ones);
            let ordered_sizes: Vec<i64> = s.order.iter().map(|&d| sizes[d]).collect();
            let compact = f.reshape(sliced, &ordered_sizes);
            let mut by_dim = s.order.clone();
            by_dim.sort();
            let perm: Vec<usize> = by_dim.iter().map(|d| s.order.iter().position(|o| o == d).unwrap()).collect();
            let t = f.transpose(compact, &perm);
            let bdims: Vec<i64> = by_dim.iter().map(|&d| d as i64).collect();
            f.broadcast_in_dim(t, &bdims, sizes)
        }
        Layout::Gather | Layout::Runtime => {
            let idx = element_indices(f, offset.unwrap(), sizes, strides);
            gather_at(f, storage, idx, sizes)
        }
    }
}

/// The elements at `idx` (shape `sizes`, i64) of a rank-1 storage.
pub(crate) fn gather_at(f: &mut Func, storage: V, idx: V, sizes: &[i64]) -> V {
    let rank = sizes.len() as i64;
    let mut idx_dims: Dims = sizes.into();
    idx_dims.push(1);
    let idx = f.reshape(idx, &idx_dims);
    f.gather(storage, idx, &[], &[0], &[0], rank, &[1], sizes)
}

/// A [`Layout::Runtime`] view's elements as a value of shape `sizes`:
/// `offset` is a rank-0 i64 value and `strides` a rank-1 i64 value with one
/// entry per dim.
pub fn read_at(f: &mut Func, storage: V, offset: V, strides: V, sizes: &[i64]) -> V {
    let elem = f.ty(storage).elem;
    if shape::numel(sizes) == 0 {
        return f.splat(&Ty::new(elem, sizes), 0.0);
    }
    let idx = runtime_indices(f, offset, strides, sizes);
    gather_at(f, storage, idx, sizes)
}

/// Writes `value` (shape `sizes`) through a [`Layout::Runtime`] view;
/// returns the new storage value.
pub fn write_at(f: &mut Func, storage: V, offset: V, strides: V, sizes: &[i64], value: V) -> V {
    let numel = shape::numel(sizes);
    if numel == 0 {
        return storage;
    }
    let idx = runtime_indices(f, offset, strides, sizes);
    scatter_at(f, storage, idx, numel, value)
}

/// `storage` with the `numel` elements of `value` written at `idx` (i64,
/// any shape of `numel` elements).
fn scatter_at(f: &mut Func, storage: V, idx: V, numel: i64, value: V) -> V {
    let idx = f.reshape(idx, &[numel, 1]);
    let upd = f.reshape(value, &[numel]);
    f.scatter(storage, idx, upd, &[], &[0], &[0], 1, None)
}

/// `offset + sum_i iota_i * strides[i]` over `sizes`, as i64, with the
/// strides a runtime vector.
fn runtime_indices(f: &mut Func, offset: V, strides: V, sizes: &[i64]) -> V {
    let ty = Ty::new(Elem::I64, sizes);
    let mut idx = f.broadcast_in_dim(offset, &[], sizes);
    for d in 0..sizes.len() {
        if sizes[d] <= 1 {
            continue;
        }
        let st = f.slice(strides, &[d as i64], &[d as i64 + 1], &[1]);
        let st = f.reshape(st, &[]);
        let st = f.broadcast_in_dim(st, &[], sizes);
        let io = f.iota(&ty, d);
        let term = f.mul(io, st);
        idx = f.add(idx, term);
    }
    idx
}

/// Writes `value` (shape `sizes`) through the view; returns the new storage value.
pub fn write(
    f: &mut Func,
    storage: V,
    layout: &Layout,
    offset: Option<V>,
    sizes: &[i64],
    strides: &[i64],
    value: V,
) -> V {
    let numel = shape::numel(sizes);
    if numel == 0 {
        return storage;
    }
    let storage_numel = f.ty(storage).numel();
    match layout {
        Layout::Whole => f.reshape(value, &[storage_numel]),
        Layout::Block => {
            let flat = f.reshape(value, &[numel]);
            f.dynamic_update_slice(storage, flat, &[offset.unwrap()])
        }
        Layout::Strided(s) => {
            let offset = offset.unwrap();
            let base = strided_base(f, storage, s, offset);
            // Bring the value into block order: drop broadcast (size-1) dims,
            // order by stride, add the innermost padding dim.
            let mut by_dim = s.order.clone();
            by_dim.sort();
            let squeezed: Vec<i64> = by_dim.iter().map(|&d| sizes[d]).collect();
            let v = f.reshape(value, &squeezed);
            let perm: Vec<usize> = s.order.iter().map(|d| by_dim.iter().position(|o| o == d).unwrap()).collect();
            let v = f.transpose(v, &perm);
            let mut upd_dims: Vec<i64> = s.order.iter().map(|&d| sizes[d]).collect();
            if s.base.len() > s.order.len() {
                upd_dims.push(1);
            }
            let v = f.reshape(v, &upd_dims);
            let zero = f.constant(Elem::I64, 0.0);
            let starts = vec![zero; upd_dims.len()];
            let base = f.dynamic_update_slice(base, v, &starts);
            let total: i64 = s.base.iter().product();
            let flat = f.reshape(base, &[total]);
            let block = f.slice(flat, &[0], &[s.extent], &[1]);
            f.dynamic_update_slice(storage, block, &[offset])
        }
        Layout::Gather | Layout::Runtime => {
            let idx = element_indices(f, offset.unwrap(), sizes, strides);
            scatter_at(f, storage, idx, numel, value)
        }
    }
}

/// The block `[offset, offset + extent)` zero-padded and reshaped to `base`.
fn strided_base(f: &mut Func, storage: V, s: &Strided, offset: V) -> V {
    let elem = f.ty(storage).elem;
    let block = f.dynamic_slice(storage, &[offset], &[s.extent]);
    let total: i64 = s.base.iter().product();
    let zero = f.constant(elem, 0.0);
    let padded = f.pad(block, zero, &[0], &[total - s.extent], &[0]);
    f.reshape(padded, &s.base)
}

/// `offset + sum_i iota_i * stride_i` over `sizes`, as i64.
fn element_indices(f: &mut Func, offset: V, sizes: &[i64], strides: &[i64]) -> V {
    let ty = Ty::new(Elem::I64, sizes);
    let mut idx = f.broadcast_in_dim(offset, &[], sizes);
    for (d, &st) in strides.iter().enumerate() {
        if sizes[d] <= 1 || st == 0 {
            continue;
        }
        let io = f.iota(&ty, d);
        let s = f.splat_int(&ty, st);
        let term = f.mul(io, s);
        idx = f.add(idx, term);
    }
    idx
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classification() {
        assert_eq!(classify(12, 0, &[3, 4], &[4, 1]), Layout::Whole);
        assert_eq!(classify(12, 4, &[2, 4], &[4, 1]), Layout::Block);
        // Transpose of a 3x4.
        match classify(12, 0, &[4, 3], &[1, 4]) {
            Layout::Strided(s) => {
                assert_eq!(s.order, vec![1, 0]);
                assert_eq!(s.base, vec![3, 4]);
                assert_eq!(s.extent, 12);
            }
            other => panic!("{other:?}"),
        }
        // Column slice x[:, 1:3] of a 4x8: base [4, 8], extent 3*8+2.
        match classify(32, 1, &[4, 2], &[8, 1]) {
            Layout::Strided(s) => {
                assert_eq!(s.base, vec![4, 8]);
                assert_eq!(s.extent, 26);
            }
            other => panic!("{other:?}"),
        }
        // Every other element: innermost stride 2 becomes a padding dim.
        match classify(10, 0, &[5], &[2]) {
            Layout::Strided(s) => assert_eq!(s.base, vec![5, 2]),
            other => panic!("{other:?}"),
        }
        // Expanded dims (stride 0) are broadcasts, not strides.
        assert!(matches!(classify(3, 0, &[4, 3], &[0, 1]), Layout::Strided(_)));
        // A single element expanded to several.
        assert!(matches!(classify(1, 0, &[2, 3], &[0, 0]), Layout::Strided(Strided { extent: 1, .. })));
        // Overlapping windows (as_strided) need a gather.
        assert_eq!(classify(10, 0, &[4, 3], &[2, 1]), Layout::Gather);
    }
}
