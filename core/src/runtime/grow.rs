//! Tensors that grow by concatenation compile once per shape bucket.
//!
//! `generate()` appends each new token to the ids with `cat` and then reads
//! the last token of the grown tensor. A program is compiled for exact
//! shapes, so both the `cat` and every read of a view into the grown tensor
//! (whose storage size and strides change with it) would compile again for
//! every token.
//!
//! When a `cat` is seen growing (three calls of the same kind in a row with
//! three different lengths along the concatenated dim, or an input that is
//! itself such a result; in fused mode the calls recorded into a graph
//! count, so a `cat` the shape watch runs alone grows at once), it runs as
//! a program that takes the lengths as
//! runtime arguments: it gathers each output element from its input at
//! indices computed in the program, and writes the result into a storage
//! with room for a bucket's length along that dim (by default the next power
//! of two of the length; [`Runtime::set_shape_buckets`] lists others). The tensor
//! is a contiguous view of the storage's first elements, so PyTorch sees its
//! usual shape and strides. The program depends only on the inputs' storage
//! sizes (buckets too, once the ids are grown) and the dims that do not
//! change, so a sequence of n tokens compiles O(log n) of them.
//!
//! A small strided view of such a storage (the last column of the ids)
//! reads at runtime strides ([`crate::view::Layout::Runtime`]), so the ops
//! that read it compile once per bucket as well. A view that covers most of
//! the tensor changes shape with it, and compiles for each shape as before:
//! buckets for ops on a growing dim itself (attention over a growing KV
//! cache) are not built.

use std::sync::Arc;

use rustc_hash::FxHashMap;

use super::call::Flat;
use super::{Runtime, Stats};
use crate::cache::{GraphSummary, NodeSummary};
use crate::dtype::DType;
use crate::error::Result;
use crate::graph::shape_watch::History;
use crate::graph::{hash_of, FlushReason};
use crate::hlo::{Cmp, Elem, Func, Ty, V};
use crate::pjrt::{Buffer, CompileOptions, Executable};
use crate::storage::{Storage, StorageValue};
use crate::tensor::{Scalar, Tensor, Value};

/// Kinds of `cat` remembered before the table is cleared.
const MAX_KINDS: usize = 4096;

/// The most bucket lengths a list may give.
pub const MAX_BUCKETS: usize = 256;

/// What the runtime remembers about concatenations that grow.
#[derive(Default)]
pub(super) struct Growth {
    /// Bucket lengths, increasing; past the last (or with none), the next
    /// power of two.
    buckets: Vec<i64>,
    /// The lengths along the dim of the last calls of each kind of `cat`.
    kinds: FxHashMap<u64, Lengths>,
    /// Compiled programs by their shape (inputs' storage sizes, dims).
    programs: FxHashMap<String, Arc<Executable>>,
}

impl Growth {
    /// Drops the compiled programs (the runtime's cache was cleared, or it
    /// shuts down).
    pub(super) fn clear_programs(&mut self) {
        self.programs.clear();
    }
}

/// The last lengths one kind of `cat` was called with, and the verdict.
#[derive(Debug, Clone, Copy)]
struct Lengths {
    history: History,
    growing: bool,
}

impl Lengths {
    fn new(lengths: u64) -> Lengths {
        Lengths { history: History::new(lengths), growing: false }
    }

    /// Sees the next call's lengths; whether that kind grows. Three
    /// different lengths in a row are growth (the shape watch's rule); a
    /// repeat of the last lengths (the ids and the attention mask, appended
    /// to in turn with the same lengths) keeps the verdict.
    fn see(&mut self, lengths: u64) -> bool {
        if lengths != self.history.last() {
            (self.growing, self.history) = self.history.grows(lengths);
        }
        self.growing
    }
}

/// The bucket of a length `n`: the first of `buckets` that holds it, else
/// the next power of two.
fn bucket(buckets: &[i64], n: i64) -> Option<i64> {
    if let Some(&b) = buckets.iter().find(|&&b| b >= n) {
        return Some(b);
    }
    let p = u64::try_from(n).ok()?.checked_next_power_of_two()?;
    i64::try_from(p).ok()
}

/// A `cat` whose inputs a growing program can take: contiguous, of one
/// dtype and rank, not empty, equal except along `dim`.
struct Plan {
    dim: usize,
    dtype: DType,
    /// Product of the sizes before and after `dim` (the same for every input).
    outer: i64,
    inner: i64,
    /// Each input's length along `dim`.
    lengths: Vec<i64>,
    sizes: Vec<i64>,
}

impl Plan {
    /// The output's sizes with the growing dim marked -1.
    fn fixed(&self) -> Vec<i64> {
        self.sizes.iter().enumerate().map(|(d, &n)| if d == self.dim { -1 } else { n }).collect()
    }
}

fn plan(ts: &[Tensor], dim: i64) -> Option<Plan> {
    let first = ts.first()?;
    let rank = first.sizes().len();
    if rank == 0 {
        return None;
    }
    let dim = if dim < 0 { dim.checked_add(rank as i64)? } else { dim };
    let dim = usize::try_from(dim).ok().filter(|&d| d < rank)?;
    let same = |t: &Tensor| {
        t.dtype() == first.dtype()
            && t.sizes().len() == rank
            && t.is_contiguous()
            && t.numel() > 0
            && (0..rank).all(|d| d == dim || t.sizes()[d] == first.sizes()[d])
    };
    if !ts.iter().all(same) {
        return None;
    }
    let outer: i64 = first.sizes()[..dim].iter().product();
    let inner: i64 = first.sizes()[dim + 1..].iter().product();
    let lengths: Vec<i64> = ts.iter().map(|t| t.sizes()[dim]).collect();
    let mut sizes = first.sizes().to_vec();
    sizes[dim] = lengths.iter().try_fold(0i64, |a, &b| a.checked_add(b))?;
    Some(Plan { dim, dtype: first.dtype(), outer, inner, lengths, sizes })
}

impl Runtime {
    /// Sets the lengths a growing dim is padded to ([`crate::runtime`]'s
    /// `grow`): each a length along the dim, increasing. Past the last, and
    /// with an empty list (the default), a length rounds up to the next
    /// power of two. Tensors grown before keep their storage.
    pub fn set_shape_buckets(&self, lengths: &[i64]) -> Result<()> {
        if lengths.len() > MAX_BUCKETS {
            return Err(crate::Error::InvalidArgument(format!(
                "set_shape_buckets: {} bucket lengths, at most {MAX_BUCKETS}",
                lengths.len()
            )));
        }
        if let Some(&bad) = lengths.iter().find(|&&n| n <= 0) {
            return Err(crate::Error::InvalidArgument(format!("set_shape_buckets: a bucket length must be positive, got {bad}")));
        }
        if let Some(w) = lengths.windows(2).find(|w| w[0] >= w[1]) {
            return Err(crate::Error::InvalidArgument(format!(
                "set_shape_buckets: bucket lengths must increase, got {} then {}",
                w[0], w[1]
            )));
        }
        // The programs are keyed by their storage sizes, so those compiled
        // for other buckets stay valid.
        self.growth.lock().buckets = lengths.to_vec();
        Ok(())
    }

    /// The bucket lengths set by [`Runtime::set_shape_buckets`] (empty:
    /// powers of two).
    pub fn shape_buckets(&self) -> Vec<i64> {
        self.growth.lock().buckets.clone()
    }

    /// The bucket a dim of `length` is padded to: the first bucket length
    /// set by [`Runtime::set_shape_buckets`] that holds it, else the next
    /// power of two. Frontends that pad a dynamic dim (a `torch.compile`
    /// graph's batch) ask here, so every layer pads to the same lengths.
    pub fn shape_bucket(&self, length: i64) -> Result<i64> {
        if length <= 0 {
            return Err(crate::Error::InvalidArgument(format!("shape_bucket: the length must be positive, got {length}")));
        }
        bucket(&self.growth.lock().buckets, length).ok_or_else(|| {
            crate::Error::InvalidArgument(format!("shape_bucket: no bucket holds a length of {length}"))
        })
    }

    /// Sees a call of `aten::cat` that fused mode records into its graph,
    /// so that its lengths are known when the shape watch runs it alone.
    pub(super) fn see_cat(&self, bound: &[Value]) {
        if let (Some(Value::TensorList(ts)), Some(&Value::Int(dim))) = (bound.first(), bound.get(1)) {
            if let Some(p) = plan(ts, dim) {
                self.cat_grows(&p, ts.len());
            }
        }
    }

    /// Sees a `cat`'s lengths; whether its kind grows. Seeing the same call
    /// twice (recorded, then run alone) sees a repeat, which changes nothing.
    fn cat_grows(&self, p: &Plan, inputs: usize) -> bool {
        let kind = hash_of(&("aten::cat", p.dtype.code(), p.dim, &p.fixed(), inputs));
        let mut g = self.growth.lock();
        if g.kinds.len() >= MAX_KINDS {
            g.kinds.clear();
        }
        let lengths = hash_of(&p.lengths);
        g.kinds.entry(kind).or_insert(Lengths::new(lengths)).see(lengths)
    }

    /// Runs `aten::cat(tensors, dim)` as a growing concatenation if it is
    /// one (see the module doc); `None` leaves the call to the strict path.
    pub(super) fn grown_cat(self: &Arc<Self>, bound: &[Value], flat: &Flat, device: usize) -> Result<Option<Vec<Value>>> {
        let (Some(Value::TensorList(ts)), Some(&Value::Int(dim))) = (bound.first(), bound.get(1)) else {
            return Ok(None);
        };
        let Some(p) = plan(ts, dim) else {
            return Ok(None);
        };
        if flat.slots.iter().any(|s| s.device() != device) {
            return Ok(None);
        }
        let total = crate::shape::checked_numel("aten::cat", &p.sizes, 1)?;
        let room = bucket(&self.growth.lock().buckets, p.sizes[p.dim]);
        let Some(capacity) = room.and_then(|b| b.checked_mul(p.outer)?.checked_mul(p.inner)) else {
            return Ok(None);
        };
        let fixed = p.fixed();
        if !self.cat_grows(&p, ts.len()) && !ts.iter().any(|t| t.storage().used().is_some()) {
            return Ok(None);
        }

        // The program: by the inputs' storage sizes and the fixed dims.
        let storage_sizes: Vec<i64> = ts.iter().map(|t| t.storage().numel()).collect();
        let key = format!("cat|{}|{}|{:?}|{:?}|{capacity}", p.dtype.code(), p.dim, fixed, storage_sizes);
        let cached = self.growth.lock().programs.get(&key).cloned();
        let exe = match cached {
            Some(exe) => {
                Stats::bump(&self.stats.cache_hits);
                exe
            }
            None => {
                Stats::bump(&self.stats.cache_misses);
                let text = lower_cat(&p, &storage_sizes, capacity);
                let summary = GraphSummary {
                    nodes: vec![NodeSummary {
                        op: "aten::cat".into(),
                        inputs: storage_sizes.iter().map(|&n| (p.dtype, vec![n])).collect(),
                        attrs: format!("grown along dim {} of {}", p.dim, crate::shape::fmt(&fixed)),
                        views: Vec::new(),
                    }],
                    outputs: vec![(p.dtype, vec![capacity])],
                    strict: true,
                };
                let (exe, _) = self.cached_program("aten::cat", &text, &CompileOptions::Portable, &summary)?;
                let mut g = self.growth.lock();
                if g.programs.len() >= MAX_KINDS {
                    g.programs.clear();
                }
                g.programs.insert(key, exe.clone());
                exe
            }
        };

        // Arguments: each input's storage, offset and length.
        let mut args: Vec<Arc<Buffer>> = Vec::with_capacity(3 * ts.len());
        for (t, &k) in ts.iter().zip(&p.lengths) {
            args.push(self.materialize(t.storage(), "aten::cat", FlushReason::StrictOp)?);
            args.push(self.scalar_buffer(device, Elem::I64, Scalar::Int(t.offset()))?);
            args.push(self.scalar_buffer(device, Elem::I64, Scalar::Int(k))?);
        }
        let mut outs = self.launch("aten::cat", &exe, &args, device)?;
        let buf = outs.pop().ok_or_else(|| crate::Error::Internal("aten::cat: the program returned nothing".into()))?;
        let storage = Storage::grown(self.id, device, p.dtype, capacity, total, StorageValue::Buffer(Arc::new(buf)));
        let base = Tensor::from_storage(storage, &[capacity]);
        let out = base.view_of("aten::cat", 0, &p.sizes, &crate::shape::contiguous_strides(&p.sizes))?;
        Ok(Some(vec![Value::Tensor(out)]))
    }
}

/// The program of a growing `cat`: parameters (storage, offset, length)
/// per input; one output of `capacity` elements whose first `outer * K *
/// inner` (K the lengths' sum) are the concatenation, the rest zero.
fn lower_cat(p: &Plan, storage_sizes: &[i64], capacity: i64) -> String {
    let mut f = Func::new();
    let scalar = Ty::scalar(Elem::I64);
    let inputs: Vec<(V, V, V)> = storage_sizes
        .iter()
        .map(|&n| {
            let s = f.param(Ty::new(p.dtype, &[n]));
            let o = f.param(scalar.clone());
            let k = f.param(scalar.clone());
            (s, o, k)
        })
        .collect();
    let flat = Ty::new(Elem::I64, &[capacity]);
    let splat = |f: &mut Func, v: V| f.broadcast_in_dim(v, &[], &[capacity]);
    let j = f.iota(&flat, 0);
    let inner = f.splat_int(&flat, p.inner);
    // K, then j = ((o * K) + k) * inner + e.
    let mut big_k = f.splat_int(&scalar, 0);
    for &(_, _, k) in &inputs {
        big_k = f.add(big_k, k);
    }
    let inner_scalar = f.splat_int(&scalar, p.inner);
    let row = f.mul(big_k, inner_scalar);
    let row = splat(&mut f, row);
    let o = f.div(j, row);
    let r = f.binary("stablehlo.remainder", j, row);
    let k = f.div(r, inner);
    let e = f.binary("stablehlo.remainder", r, inner);
    let outer = f.splat_int(&flat, p.outer);
    let total = f.mul(row, outer);
    let in_result = f.compare(Cmp::Lt, j, total);

    let mut out = f.splat(&Ty::new(p.dtype, &[capacity]), 0.0);
    let mut start = f.splat_int(&scalar, 0);
    for &(s, off, len) in &inputs {
        let lo = splat(&mut f, start);
        let end = f.add(start, len);
        let hi = splat(&mut f, end);
        let after_lo = f.compare(Cmp::Ge, k, lo);
        let before_hi = f.compare(Cmp::Lt, k, hi);
        let mine = f.and(after_lo, before_hi);
        let mine = f.and(mine, in_result);
        // off + (o * len + (k - start)) * inner + e, clamped into the
        // storage (elements outside the result read anything and are
        // dropped by the select).
        let len_v = splat(&mut f, len);
        let at = f.mul(o, len_v);
        let within = f.sub(k, lo);
        let at = f.add(at, within);
        let at = f.mul(at, inner);
        let at = f.add(at, e);
        let off = splat(&mut f, off);
        let at = f.add(at, off);
        let zero = f.splat_int(&flat, 0);
        let last = f.ty(s).numel() - 1;
        let last = f.splat_int(&flat, last);
        let at = f.max(at, zero);
        let at = f.min(at, last);
        let v = crate::view::gather_at(&mut f, s, at, &[capacity]);
        out = f.select(mine, v, out);
        start = end;
    }
    f.finish(&[out])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_the_next_power_of_two_or_the_listed_lengths() {
        assert_eq!([1, 2, 3, 17, 64, 65].map(|n| bucket(&[], n).unwrap()), [1, 2, 4, 32, 64, 128]);
        assert_eq!(bucket(&[], i64::MAX), None);
        assert_eq!(bucket(&[], -1), None);
        let listed = [100, 200, 300];
        assert_eq!([1, 100, 101, 250, 300, 301].map(|n| bucket(&listed, n).unwrap()), [100, 100, 200, 300, 300, 512]);
    }

    #[test]
    fn three_different_lengths_in_a_row_are_growth_and_repeats_keep_it() {
        let mut h = Lengths::new(16);
        assert!(!h.see(16));
        assert!(!h.see(17));
        assert!(h.see(18));
        // The attention mask after the ids, with the same lengths.
        assert!(h.see(18));
        assert!(h.see(19));
        // Alternating lengths are not growth.
        let mut a = Lengths::new(1);
        assert!([2, 1, 2, 1].iter().all(|&n| !a.see(n)));
    }
}
