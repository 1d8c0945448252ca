//! Sorting: `sort`, `topk`, as one `stablehlo.sort` of the values together
//! with an iota of their indices; the order statistics `median`,
//! `nanmedian` and `kthvalue`, which pick a rank from that sort;
//! `nonzero_static`, a stable sort that moves the nonzero positions first;
//! and `isin`. NaN sorts above every number (last when
//! ascending, first when descending) and equal values keep their order, as
//! in PyTorch's CPU kernels.

use crate::bail_op;
use crate::error::Result;
use crate::hlo::{Cmp, Elem, Func, Reducer, Ty, V};
use crate::shape;

use super::common::{materialize, result_dtype, Ew};
use super::{Builder, Composite, Cx};

pub fn register(r: &mut Builder) {
    r.op("aten::sort(Tensor self, int dim=-1, bool descending=False) -> (Tensor values, Tensor indices)", |cx, a| {
        let (v, i) = sort(cx, a.tensor(0)?, a.int(1)?, a.bool(2)?)?;
        Ok(vec![v, i])
    });
    // Every sort here is stable, so `stable` changes nothing.
    r.op(
        "aten::sort.stable(Tensor self, *, bool? stable, int dim=-1, bool descending=False) -> (Tensor values, Tensor indices)",
        |cx, a| {
            let (v, i) = sort(cx, a.tensor(0)?, a.int(2)?, a.bool(3)?)?;
            Ok(vec![v, i])
        },
    );
    r.op(
        "aten::topk(Tensor self, SymInt k, int dim=-1, bool largest=True, bool sorted=True) -> (Tensor values, Tensor indices)",
        |cx, a| {
            let (v, i) = topk(cx, a.tensor(0)?, a.int(1)?, a.int(2)?, a.bool(3)?)?;
            Ok(vec![v, i])
        },
    );
    for (name, stat) in [("median", Stat::Median), ("nanmedian", Stat::NanMedian)] {
        r.op(&format!("aten::{name}(Tensor self) -> Tensor"), move |cx, a| {
            let x = a.tensor(0)?;
            let n = shape::numel(&cx.dims(x));
            if n == 0 {
                // The median of nothing is NaN (PyTorch's answer).
                let d = super::common::float_of(cx.dtype(x));
                return Ok(vec![cx.f.splat(&Ty::scalar(Elem::from(d)), f64::NAN)]);
            }
            let flat = cx.f.reshape(x, &[n]);
            Ok(vec![order_stat(cx, flat, 0, false, stat)?.0])
        });
        r.op(
            &format!("aten::{name}.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)"),
            move |cx, a| {
                let (v, i) = order_stat(cx, a.tensor(0)?, a.int(1)?, a.bool(2)?, stat)?;
                Ok(vec![v, i])
            },
        );
    }
    r.op("aten::mode(Tensor self, int dim=-1, bool keepdim=False) -> (Tensor values, Tensor indices)", |cx, a| {
        let (v, i) = mode(cx, a.tensor(0)?, a.int(1)?, a.bool(2)?)?;
        Ok(vec![v, i])
    });
    r.op(
        "aten::kthvalue(Tensor self, SymInt k, int dim=-1, bool keepdim=False) -> (Tensor values, Tensor indices)",
        |cx, a| {
            let (v, i) = order_stat(cx, a.tensor(0)?, a.int(2)?, a.bool(3)?, Stat::Kth(a.int(1)?))?;
            Ok(vec![v, i])
        },
    );
    // Their results' sizes depend on the data: the runtime reads the count.
    r.composite(
        "aten::_unique2(Tensor self, bool sorted=True, bool return_inverse=False, bool return_counts=False) \
         -> (Tensor, Tensor, Tensor)",
        Composite::Unique { consecutive: false },
    );
    r.composite(
        "aten::unique_consecutive(Tensor self, bool return_inverse=False, bool return_counts=False, int? dim=None) \
         -> (Tensor, Tensor, Tensor)",
        Composite::Unique { consecutive: true },
    );
    // `nonzero` itself has a data-dependent shape; a frontend reads the
    // count and calls this with it (as PyTorch's own nonzero syncs on CUDA).
    r.composite("aten::nonzero(Tensor self) -> Tensor", Composite::Nonzero);
    r.op("aten::nonzero_static(Tensor self, *, SymInt size, int fill_value=-1) -> Tensor", |cx, a| {
        Ok(vec![nonzero_static(cx, a.tensor(0)?, a.int(1)?, a.int(2)?)?])
    });
    const ISIN: &str = "*, bool assume_unique=False, bool invert=False) -> Tensor";
    for decl in [
        format!("aten::isin.Tensor_Tensor(Tensor elements, Tensor test_elements, {ISIN}"),
        format!("aten::isin.Tensor_Scalar(Tensor elements, Scalar test_element, {ISIN}"),
        format!("aten::isin.Scalar_Tensor(Scalar element, Tensor test_elements, {ISIN}"),
    ] {
        r.op(&decl, |cx, a| Ok(vec![isin(cx, Ew::arg(a, 0)?, Ew::arg(a, 1)?, a.bool(3)?)?]));
    }
}

/// Whether each element equals any test element, in their promoted dtype
/// (NaN equals nothing, as in PyTorch): one [n, m] comparison reduced over
/// the m test elements. `assume_unique` only lets PyTorch pick a faster
/// algorithm; the answer is the same.
fn isin(cx: &mut Cx, elements: Ew, tests: Ew, invert: bool) -> Result<V> {
    let d = result_dtype(cx, &[elements, tests]);
    let flat = |cx: &mut Cx, x: Ew| -> (V, Vec<i64>) {
        let v = match x {
            Ew::T(t) => cx.f.convert(t, d),
            Ew::S(_) => materialize(cx, x, d, &[]),
        };
        let dims = cx.dims(v);
        let n = shape::numel(&dims);
        (cx.f.reshape(v, &[n]), dims.to_vec())
    };
    let (e, dims) = flat(cx, elements);
    let (t, _) = flat(cx, tests);
    let (n, m) = (cx.dims(e)[0], cx.dims(t)[0]);
    shape::checked_numel(&cx.op, &[n, m], 1)?;
    let e = cx.f.broadcast_in_dim(e, &[0], &[n, m]);
    let t = cx.f.broadcast_in_dim(t, &[1], &[n, m]);
    let eq = cx.f.compare(Cmp::Eq, e, t);
    let no = cx.f.constant(Elem::Pred, 0.0);
    let any = cx.f.reduce(eq, no, &[1], Reducer::Or);
    let any = if invert { cx.f.not(any) } else { any };
    Ok(cx.f.reshape(any, &dims))
}

/// The int64 coordinates `[size, rank]` of the first `size` nonzero
/// elements of `x` in row-major order; rows past the count hold `fill`.
fn nonzero_static(cx: &mut Cx, x: V, size: i64, fill: i64) -> Result<V> {
    if size < 0 {
        bail_op!(&*cx.op, "nonzero_static: 'size' must be an non-negative integer, got {size}");
    }
    let dims = cx.dims(x);
    let n = shape::numel(&dims);
    let rank = dims.len();
    let i64s = |len: i64| Ty::new(Elem::I64, &[len]);
    let flat = cx.f.reshape(x, &[n]);
    let nonzero = cx.f.convert(flat, Elem::Pred);
    // A stable sort on "is zero" moves the nonzero positions first, in order.
    let zero_key = cx.f.not(nonzero);
    let key = cx.f.convert(zero_key, Elem::U8);
    let positions = cx.f.iota(&i64s(n), 0);
    let sorted = cx.f.sort(&[key, positions], 0, true, |f, s| f.compare(Cmp::Lt, s[0], s[1]))[1];
    let fill_v = cx.f.splat_int(&Ty::scalar(Elem::I64), fill);
    let first = if size <= n {
        cx.f.slice(sorted, &[0], &[size], &[1])
    } else {
        cx.f.pad(sorted, fill_v, &[0], &[size - n], &[0])
    };
    let ones = cx.f.convert(nonzero, Elem::I64);
    let zero = cx.f.splat_int(&Ty::scalar(Elem::I64), 0);
    let count = cx.f.reduce(ones, zero, &[0], crate::hlo::Reducer::Add);
    let rows = cx.f.iota(&i64s(size), 0);
    let count_b = cx.f.broadcast_to(count, &[size]);
    let valid = cx.f.compare(Cmp::Lt, rows, count_b);
    // Unravel each flat position into its coordinates.
    let mut coords = Vec::with_capacity(rank);
    let mut stride = 1i64;
    for d in (0..rank).rev() {
        let s = cx.f.splat_int(&i64s(size), stride);
        let m = cx.f.splat_int(&i64s(size), dims[d].max(1));
        let q = cx.f.div(first, s);
        let c = cx.f.binary("stablehlo.remainder", q, m);
        coords.push(cx.f.reshape(c, &[size, 1]));
        stride *= dims[d].max(1);
    }
    coords.reverse();
    if coords.is_empty() {
        return Ok(cx.f.splat_int(&Ty::new(Elem::I64, &[size, 0]), 0));
    }
    let all = cx.f.concatenate(&coords, 1);
    let valid2 = cx.f.broadcast_in_dim(valid, &[0], &[size, rank as i64]);
    let fill2 = cx.f.splat_int(&Ty::new(Elem::I64, &[size, rank as i64]), fill);
    Ok(cx.f.select(valid2, all, fill2))
}

/// Whether `a` goes before `b` (rank-0 values of one type).
fn goes_first(f: &mut Func, a: V, b: V, descending: bool) -> V {
    let mut first = f.compare(if descending { Cmp::Gt } else { Cmp::Lt }, a, b);
    if f.ty(a).elem.is_float() {
        let a_nan = f.compare(Cmp::Ne, a, a);
        let b_nan = f.compare(Cmp::Ne, b, b);
        let nan_first = if descending {
            let b_num = f.not(b_nan);
            f.and(a_nan, b_num)
        } else {
            let a_num = f.not(a_nan);
            f.and(a_num, b_nan)
        };
        first = f.or(first, nan_first);
    }
    first
}

/// Sorts `keys` along `dim` (stably) and applies the same permutation to
/// `payload`, a value of the same shape. Returns (sorted keys, payload).
pub(super) fn sort_with(cx: &mut Cx, keys: V, payload: V, dim: usize, descending: bool) -> (V, V) {
    let elem = cx.ty(keys).elem;
    // i1 compares as 0 < 1 through u8.
    let k = if elem == Elem::Pred { cx.f.convert(keys, Elem::U8) } else { keys };
    let out = cx.f.sort(&[k, payload], dim, true, |f, s| goes_first(f, s[0], s[1], descending));
    (cx.f.convert(out[0], elem), out[1])
}

/// Values and int64 indices of `x` sorted along `dim`.
fn sort(cx: &mut Cx, x: V, dim: i64, descending: bool) -> Result<(V, V)> {
    let dims = cx.dims(x);
    if dims.is_empty() {
        shape::wrap_dim(&cx.op, dim, 0)?;
        return Ok((x, cx.f.splat_int(&Ty::scalar(Elem::I64), 0)));
    }
    let d = shape::wrap_dim(&cx.op, dim, dims.len())?;
    let idx = cx.f.iota(&Ty::new(Elem::I64, &dims), d);
    if dims[d] <= 1 || shape::numel(&dims) == 0 {
        return Ok((x, idx));
    }
    Ok(sort_with(cx, x, idx, d, descending))
}

/// Which rank an order statistic picks along its dim (NaN sorts last).
#[derive(Clone, Copy)]
enum Stat {
    /// The lower median; NaN (the first NaN's index) if the row has one.
    Median,
    /// The lower median of the numbers; for a row of NaN only, its lower
    /// median NaN.
    NanMedian,
    /// The k-th smallest (1-based).
    Kth(i64),
}

/// The value of rank `stat` along `dim` and its index there, from a stable
/// ascending sort (so among equal values the first keeps its place).
fn order_stat(cx: &mut Cx, x: V, dim: i64, keepdim: bool, stat: Stat) -> Result<(V, V)> {
    let dims = cx.dims(x);
    let d = shape::wrap_dim(&cx.op, dim, dims.len())?;
    let n = if dims.is_empty() { 1 } else { dims[d] };
    if let Stat::Kth(k) = stat {
        if k < 1 || k > n {
            bail_op!(&*cx.op, "kthvalue(): selected number k out of range for dimension {d}");
        }
    }
    if dims.is_empty() {
        return Ok((x, cx.f.splat_int(&Ty::scalar(Elem::I64), 0)));
    }
    let (sorted, idx) = sort(cx, x, d as i64, false)?;
    let mut out_dims = dims.clone();
    out_dims.remove(d);
    let kept: Vec<i64> = (0..dims.len()).filter(|&i| i != d).map(|i| i as i64).collect();
    let i64_out = Ty::new(Elem::I64, &out_dims);
    // The rank to pick in each row, as a tensor of the reduced shape.
    let pick = match stat {
        Stat::Kth(k) => cx.f.splat_int(&i64_out, k - 1),
        Stat::Median | Stat::NanMedian if !cx.ty(x).elem.is_float() => cx.f.splat_int(&i64_out, (n - 1) / 2),
        Stat::Median | Stat::NanMedian => {
            let nan = cx.f.compare(Cmp::Ne, x, x);
            let nan = cx.f.convert(nan, Elem::I64);
            let zero = cx.f.splat_int(&Ty::scalar(Elem::I64), 0);
            let nans = cx.f.reduce(nan, zero, &[d], Reducer::Add);
            let total = cx.f.splat_int(&i64_out, n);
            let numbers = cx.f.sub(total, nans);
            let one = cx.f.splat_int(&i64_out, 1);
            let two = cx.f.splat_int(&i64_out, 2);
            let lower_of = |f: &mut Func, c: V| {
                let c1 = f.sub(c, one);
                f.div(c1, two)
            };
            let zero_out = cx.f.splat_int(&i64_out, 0);
            let any_nan = cx.f.compare(Cmp::Gt, nans, zero_out);
            match stat {
                // With a NaN: the first NaN, at rank `numbers`.
                Stat::Median => {
                    let mid = lower_of(&mut cx.f, total);
                    cx.f.select(any_nan, numbers, mid)
                }
                _ => {
                    let none = cx.f.compare(Cmp::Eq, numbers, zero_out);
                    let mid = lower_of(&mut cx.f, numbers);
                    let all_mid = lower_of(&mut cx.f, total);
                    cx.f.select(none, all_mid, mid)
                }
            }
        }
    };
    // Select rank `pick` along d: the one position where iota == pick.
    let iota = cx.f.iota(&Ty::new(Elem::I64, &dims), d);
    let pick_b = cx.f.broadcast_in_dim(pick, &kept, &dims);
    let here = cx.f.compare(Cmp::Eq, iota, pick_b);
    let take = |cx: &mut Cx, v: V| {
        let elem = cx.ty(v).elem;
        let zero = cx.f.full_like(v, 0.0);
        let masked = cx.f.select(here, v, zero);
        let init = cx.f.splat(&Ty::scalar(elem), 0.0);
        // Exactly one position is kept, so a sum (or for bool an or) is it.
        let r = if elem == Elem::Pred { Reducer::Or } else { Reducer::Add };
        cx.f.reduce(masked, init, &[d], r)
    };
    let (mut v, mut i) = (take(cx, sorted), take(cx, idx));
    if keepdim {
        let mut kd = dims.clone();
        kd[d] = 1;
        v = cx.f.reshape(v, &kd);
        i = cx.f.reshape(i, &kd);
    }
    Ok((v, i))
}

/// The most frequent value along `dim` (the smallest of equally frequent
/// ones) and the index of its last occurrence, as PyTorch's CPU kernel
/// answers. From the stable sort: runs of equal values (each NaN a run of
/// its own) are numbered by a scan, counted by a scatter-add, and the first
/// run of the largest count wins; its last element carries the index.
fn mode(cx: &mut Cx, x: V, dim: i64, keepdim: bool) -> Result<(V, V)> {
    let dims = cx.dims(x);
    let d = shape::wrap_dim(&cx.op, dim, dims.len().max(1))?;
    if dims.is_empty() {
        return Ok((x, cx.f.splat_int(&Ty::scalar(Elem::I64), 0)));
    }
    let n = dims[d];
    if n == 0 {
        bail_op!(&*cx.op, "mode(): Expected reduction dim {d} to have non-zero size.");
    }
    // Rows along the last dim: [rows, n].
    let mut perm: Vec<usize> = (0..dims.len()).filter(|&i| i != d).collect();
    perm.push(d);
    let moved = cx.f.transpose(x, &perm);
    let rows = shape::numel(&dims) / n;
    let flat = cx.f.reshape(moved, &[rows, n]);
    let (sorted, idx) = sort(cx, flat, 1, false)?;
    let i64_rn = Ty::new(Elem::I64, &[rows, n]);
    let j = cx.f.iota(&i64_rn, 1);
    // A run starts where the value differs from the one before.
    let first = cx.f.slice_dim(sorted, 1, 0, 1, 1);
    let prev = cx.f.slice_dim(sorted, 1, 0, n - 1, 1);
    let prev = cx.f.concatenate(&[first, prev], 1);
    let differs = cx.f.compare(Cmp::Ne, sorted, prev);
    let zero = cx.f.splat_int(&i64_rn, 0);
    let at_zero = cx.f.compare(Cmp::Eq, j, zero);
    let start = cx.f.or(differs, at_zero);
    let start_i = cx.f.convert(start, Elem::I64);
    let run = super::reduce::scan(cx, start_i, 1, Reducer::Add);
    let one = cx.f.splat_int(&i64_rn, 1);
    let run = cx.f.sub(run, one);
    // Counts per (row, run), read back at every position of the run.
    let row = cx.f.iota(&i64_rn, 0);
    let nv = cx.f.splat_int(&i64_rn, n);
    let base = cx.f.mul(row, nv);
    let slot = cx.f.add(base, run);
    let slot = cx.f.reshape(slot, &[rows * n, 1]);
    let counts = cx.f.splat_int(&Ty::new(Elem::I64, &[rows * n]), 0);
    let ones = cx.f.splat_int(&Ty::new(Elem::I64, &[rows * n]), 1);
    let counts = cx.f.scatter(counts, slot, ones, &[], &[0], &[0], 1, Some(Reducer::Add));
    let count = cx.f.gather(counts, slot, &[], &[0], &[0], 1, &[1], &[rows * n]);
    let count = cx.f.reshape(count, &[rows, n]);
    // The first run start with the largest count.
    let lowest = cx.f.splat_int(&Ty::scalar(Elem::I64), i64::MIN);
    let best = cx.f.reduce(count, lowest, &[1], Reducer::Max);
    let best_b = cx.f.broadcast_in_dim(best, &[0], &[rows, n]);
    let is_best = cx.f.compare(Cmp::Eq, count, best_b);
    let cand = cx.f.and(start, is_best);
    let big = cx.f.splat_int(&i64_rn, n);
    let pos = cx.f.select(cand, j, big);
    let highest = cx.f.splat_int(&Ty::scalar(Elem::I64), i64::MAX);
    let at = cx.f.reduce(pos, highest, &[1], Reducer::Min);
    let last = cx.f.add(at, best);
    let one_r = cx.f.splat_int(&Ty::new(Elem::I64, &[rows]), 1);
    let last = cx.f.sub(last, one_r);
    let pick = |cx: &mut Cx, v: V, p: V| {
        let p_b = cx.f.broadcast_in_dim(p, &[0], &[rows, n]);
        let here = cx.f.compare(Cmp::Eq, j, p_b);
        let elem = cx.ty(v).elem;
        let zero = cx.f.full_like(v, 0.0);
        let masked = cx.f.select(here, v, zero);
        let init = cx.f.splat(&Ty::scalar(elem), 0.0);
        let r = if elem == Elem::Pred { Reducer::Or } else { Reducer::Add };
        cx.f.reduce(masked, init, &[1], r)
    };
    let (v, i) = (pick(cx, sorted, at), pick(cx, idx, last));
    let mut out_dims = dims.clone();
    if keepdim {
        out_dims[d] = 1;
    } else {
        out_dims.remove(d);
    }
    Ok((cx.f.reshape(v, &out_dims), cx.f.reshape(i, &out_dims)))
}

/// The `k` largest (smallest) values along `dim` and their indices, sorted.
fn topk(cx: &mut Cx, x: V, k: i64, dim: i64, largest: bool) -> Result<(V, V)> {
    let dims = cx.dims(x);
    let d = shape::wrap_dim(&cx.op, dim, dims.len())?;
    let size = if dims.is_empty() { 1 } else { dims[d] };
    if k < 0 || k > size {
        bail_op!(&*cx.op, "selected index k out of range (k = {k}, size of dim {d} = {size}, self shape {})", shape::fmt(&dims));
    }
    let (v, i) = sort(cx, x, dim, largest)?;
    if dims.is_empty() {
        return Ok((v, i));
    }
    Ok((cx.f.slice_dim(v, d, 0, k, 1), cx.f.slice_dim(i, d, 0, k, 1)))
}
