//! Tensors that grow by `cat` compile once per shape bucket, not once per
//! size (`runtime/grow.rs`): the concatenation itself and the small views
//! read from the grown tensor. Values are checked against hand-computed
//! sequences at every step.

mod common;
use common::*;

use torchtpu_core::runtime::{set_thread_mode, ExecMode};
use torchtpu_core::{DType, Scalar, Tensor, Value};

fn next_pow2(n: i64) -> i64 {
    (n as u64).next_power_of_two() as i64
}

/// A `generate()`-like loop on `ids` [2, n]: read the last column (a view
/// with strides [n, 1]), add one, run a fixed-shape part (the model) and
/// read it on the host, append the new column with `cat`. From step
/// `grown_from` on, the ids must be grown. Returns the strict memo misses
/// and the programs compiled (fused graphs included) of each step.
fn grow_ids(mode: ExecMode, steps: i64, grown_from: i64) -> (Vec<u64>, Vec<u64>) {
    let rt = rt();
    set_thread_mode(Some(mode)).unwrap();
    let mut ids = i64s(&rt, &[1, 2, 3, 10, 20, 30], &[2, 3]);
    let mut want: Vec<Vec<i64>> = vec![vec![1, 2, 3], vec![10, 20, 30]];
    let mut h = f32s(&rt, &[0.5, -1.0], &[2]);
    let mut want_h = [0.5f32, -1.0];
    let (mut misses, mut compiles) = (Vec::new(), Vec::new());
    for step in 0..steps {
        let before = rt.stats();
        let n = ids.sizes()[1];
        let last = ids.view_of("test", n - 1, &[2, 1], &[n, 1]).unwrap();
        let next = rt.call1("aten::add.Scalar", &[(&last).into(), Value::Scalar(Scalar::Int(1))]).unwrap();
        // The fixed part: its host read ends the step (in fused mode, a flush).
        h = rt.call1("aten::tanh", &[(&h).into()]).unwrap();
        want_h = want_h.map(f32::tanh);
        let got_h = host_f32(&rt, &h);
        assert!(got_h.iter().zip(want_h).all(|(g, w)| (g - w).abs() < 1e-6), "step {step}: {got_h:?} vs {want_h:?}");
        ids = rt.call1("aten::cat", &[Value::TensorList(vec![ids.clone(), next]), Value::Int(-1)]).unwrap();
        for row in want.iter_mut() {
            row.push(row.last().unwrap() + 1);
        }
        assert_eq!(ids.sizes(), &[2, n + 1]);
        assert_eq!(ids.strides(), &[n + 1, 1]);
        assert_eq!(host_i64(&rt, &ids), want.concat(), "step {step}");
        misses.push(rt.stats().cache_misses - before.cache_misses);
        compiles.push(rt.stats().compiles - before.compiles);
        if step >= grown_from {
            // Grown: a storage of the bucket's size, the tensor its prefix.
            assert_eq!(ids.storage().numel(), 2 * next_pow2(n + 1), "step {step}");
            assert_eq!(ids.storage().used(), Some(2 * (n + 1)));
        }
    }
    set_thread_mode(None).unwrap();
    (misses, compiles)
}

/// The steps (from `from` on) at which the ids' storage moves to a new
/// bucket, and the step after each (the first cat from the new bucket and
/// the first read of it).
fn bucket_steps(from: i64, steps: i64) -> Vec<i64> {
    let mut out = Vec::new();
    for step in from..steps {
        let (n, n1) = (3 + step, 4 + step); // lengths before and after the step
        if next_pow2(n) != next_pow2(n1) {
            out.extend([step, step + 1]);
        }
    }
    out
}

/// Checks that no step from `from` on compiled (`counts`) but those at a
/// move to a new bucket.
fn assert_quiet_between_buckets(counts: &[u64], from: usize) {
    let crossings = bucket_steps(from as i64, counts.len() as i64);
    for (step, &c) in counts.iter().enumerate().skip(from) {
        if !crossings.contains(&(step as i64)) {
            assert_eq!(c, 0, "step {step} compiled for a size within its bucket: {counts:?}");
        }
    }
}

#[test]
fn a_sequence_grown_by_cat_compiles_once_per_bucket() {
    let steps = 60;
    let (misses, _) = grow_ids(ExecMode::DeferNever, steps, 3);
    // The first steps learn that the cat grows (three lengths in a row).
    // From then on only a new bucket compiles: the length grows from 7 to 63,
    // crossing 8, 16 and 32.
    assert_quiet_between_buckets(&misses, 4);
    // Per new bucket: the cat into it, then the cat from it and the read.
    let crossings = bucket_steps(4, steps);
    assert!(misses[4..].iter().all(|&m| m <= 2), "{misses:?}");
    let after_learning: u64 = misses[4..].iter().sum();
    assert!(after_learning <= 3 * crossings.len() as u64 / 2, "{after_learning} programs for 56 steps: {misses:?}");
}

#[test]
fn a_sequence_grown_in_fused_mode_keeps_its_values() {
    // The shape watch runs the growing cat alone at its third length in a
    // row. The lengths of its recorded calls were seen, so it grows at once
    // (from step 3), as in strict mode; the reads of the grown tensor are
    // recorded into the fused graph at runtime strides. From step 5 on,
    // nothing compiles, fused graphs included, but at a new bucket.
    let steps = 40;
    let (_, compiles) = grow_ids(ExecMode::DeferAndFuse, steps, 3);
    assert_quiet_between_buckets(&compiles, 5);
}

#[test]
fn a_kv_cache_grown_along_a_middle_dim_keeps_its_values() {
    // [batch 1, heads 2, n, dim 3], one position appended per step, as a
    // dynamic KV cache does. Element (h, p, d) = 100 p + 10 h + d.
    let rt = rt();
    let at = |h: i64, p: i64, d: i64| (100 * p + 10 * h + d) as f32;
    let position = |p: i64| {
        let v: Vec<f32> = (0..2).flat_map(|h| (0..3).map(move |d| at(h, p, d))).collect();
        f32s(&rt, &v, &[1, 2, 1, 3])
    };
    let mut k = position(0);
    for p in 1..20 {
        k = rt.call1("aten::cat", &[Value::TensorList(vec![k.clone(), position(p)]), Value::Int(2)]).unwrap();
        let n = p + 1;
        let want: Vec<f32> = (0..2).flat_map(|h| (0..n).flat_map(move |q| (0..3).map(move |d| at(h, q, d)))).collect();
        assert_eq!(host_f32(&rt, &k), want, "position {p}");
        // The last position of every head: a small strided view (strides
        // [6n, 3n, 3, 1]) read at runtime strides once the cache has grown.
        let last = k.view_of("test", (n - 1) * 3, &[1, 2, 1, 3], &[6 * n, 3 * n, 3, 1]).unwrap();
        let twice = rt.call1("aten::mul.Scalar", &[(&last).into(), Value::Scalar(Scalar::Int(2))]).unwrap();
        let want_last: Vec<f32> = (0..2).flat_map(|h| (0..3).map(move |d| 2.0 * at(h, p, d))).collect();
        assert_eq!(host_f32(&rt, &twice), want_last, "position {p}");
        // The transpose covers the whole cache: a strided read.
        let kt = k.view_of("test", 0, &[1, 2, 3, n], &[6 * n, 3 * n, 1, 3]).unwrap();
        let dense = rt.call1("aten::clone", &[(&kt).into()]).unwrap();
        let want_t: Vec<f32> = (0..2).flat_map(|h| (0..3).flat_map(move |d| (0..n).map(move |q| at(h, q, d)))).collect();
        assert_eq!(host_f32(&rt, &dense), want_t, "position {p}");
    }
    assert!(k.storage().used().is_some(), "the cache grew in buckets");
}

#[test]
fn writes_through_a_view_of_a_grown_tensor_land_in_place() {
    let rt = rt();
    let mut ids = i64s(&rt, &[0, 0], &[2, 1]);
    for step in 1..12i64 {
        let col = i64s(&rt, &[step, -step], &[2, 1]);
        ids = rt.call1("aten::cat", &[Value::TensorList(vec![ids.clone(), col]), Value::Int(1)]).unwrap();
    }
    assert!(ids.storage().used().is_some());
    let n = ids.sizes()[1];
    // ids[:, -1] = [7, 8]: a write at runtime strides.
    let last = ids.view_of("test", n - 1, &[2, 1], &[n, 1]).unwrap();
    let src = i64s(&rt, &[7, 8], &[2, 1]);
    rt.call("aten::copy_", &[(&last).into(), (&src).into()]).unwrap();
    let mut want: Vec<i64> = (0..n).collect();
    want.extend((0..n).map(|s| -s));
    want[n as usize - 1] = 7;
    want[2 * n as usize - 1] = 8;
    assert_eq!(host_i64(&rt, &ids), want);
}

#[test]
fn a_grown_bool_mask_keeps_its_values() {
    let rt = rt();
    let bools = |v: &[bool], sizes: &[i64]| -> Tensor {
        let bytes: Vec<u8> = v.iter().map(|&b| b as u8).collect();
        rt.tensor_from_host(&bytes, DType::Bool, sizes, 0).unwrap()
    };
    let mut mask = bools(&[true], &[1, 1]);
    let mut want = vec![true];
    for step in 0..20 {
        let b = step % 3 == 0;
        mask = rt.call1("aten::cat", &[Value::TensorList(vec![mask.clone(), bools(&[b], &[1, 1])]), Value::Int(1)]).unwrap();
        want.push(b);
        let got: Vec<bool> = rt.tensor_to_host(&mask).unwrap().iter().map(|&x| x != 0).collect();
        assert_eq!(got, want, "step {step}");
    }
    assert!(mask.storage().used().is_some());
}

#[test]
fn listed_bucket_lengths_size_the_grown_storage() {
    let rt = rt();
    for bad in [&[0i64][..], &[4, 4], &[8, 4], &[-1]] {
        let e = rt.set_shape_buckets(bad).unwrap_err();
        assert_eq!(e.code(), torchtpu_core::Code::InvalidArgument, "{bad:?}: {e}");
    }
    assert_eq!(rt.set_shape_buckets(&vec![1; 257]).unwrap_err().code(), torchtpu_core::Code::InvalidArgument);
    rt.set_shape_buckets(&[10, 24]).unwrap();
    assert_eq!(rt.shape_buckets(), vec![10, 24]);
    let mut ids = i64s(&rt, &[0, 0], &[2, 1]);
    let mut rows = vec![vec![0i64], vec![0]];
    for step in 1..30i64 {
        let col = i64s(&rt, &[step, 2 * step], &[2, 1]);
        ids = rt.call1("aten::cat", &[Value::TensorList(vec![ids.clone(), col]), Value::Int(1)]).unwrap();
        rows[0].push(step);
        rows[1].push(2 * step);
        let n = step + 1;
        if step >= 3 {
            // Lengths up to 10 in 10, up to 24 in 24, then powers of two.
            let room = if n <= 10 { 10 } else if n <= 24 { 24 } else { 32 };
            assert_eq!(ids.storage().numel(), 2 * room, "length {n}");
        }
        assert_eq!(host_i64(&rt, &ids), rows.concat(), "length {n}");
    }
    rt.set_shape_buckets(&[]).unwrap();
    assert!(rt.shape_buckets().is_empty());
}

#[test]
fn a_host_read_of_most_of_a_storage_copies_its_range() {
    // An output narrowed from a padded batch (torch.compile's shape
    // buckets) is a contiguous view of at least half its storage: its host
    // read copies the range, with no program for each size.
    let rt = rt();
    let data: Vec<f32> = (0..24).map(|i| i as f32).collect();
    let t = f32s(&rt, &data, &[8, 3]);
    let before = rt.stats().executions;
    let head = t.view_of("test", 0, &[5, 3], &[3, 1]).unwrap();
    assert_eq!(host_f32(&rt, &head), data[..15]);
    let middle = t.view_of("test", 6, &[4, 3], &[3, 1]).unwrap();
    assert_eq!(host_f32(&rt, &middle), data[6..18]);
    assert_eq!(rt.stats().executions, before, "a range read runs no program");
    // A small view is copied on the device (a whole read would move the
    // storage for a few elements), and a strided one too.
    let row = t.view_of("test", 3, &[1, 3], &[3, 1]).unwrap();
    assert_eq!(host_f32(&rt, &row), data[3..6]);
    let column = t.view_of("test", 1, &[8], &[3]).unwrap();
    assert_eq!(host_f32(&rt, &column), (0..8).map(|i| (3 * i + 1) as f32).collect::<Vec<_>>());
    assert_eq!(rt.stats().executions, before + 2);
}
