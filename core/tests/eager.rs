//! The eager runtime end to end on the default plugin: the op cache, runtime
//! scalars, writes through views, debug mode, and error reporting. Values are
//! checked against hand-computed results.

mod common;
use common::*;


use torchtpu_core::runtime::{set_thread_mode, ExecMode};
use torchtpu_core::{Code, DType, Scalar, Value};

#[test]
fn second_call_with_same_shapes_does_not_compile() {
    let rt = rt();
    let a = f32s(&rt, &[1.0, 2.0, 3.0], &[3]);
    let b = f32s(&rt, &[10.0, 20.0, 30.0], &[3]);
    let c = rt.call1("aten::mul.Tensor", &[(&a).into(), (&b).into()]).unwrap();
    let before = rt.stats();
    let d = rt.call1("aten::mul.Tensor", &[(&b).into(), (&c).into()]).unwrap();
    let after = rt.stats();
    assert_eq!(after.compiles, before.compiles, "same signature must hit the cache");
    assert_eq!(after.cache_hits, before.cache_hits + 1);
    assert_eq!(host_f32(&rt, &d), vec![100.0, 800.0, 2700.0]);
}

#[test]
fn changing_a_scalar_does_not_recompile() {
    let rt = rt();
    let a = f32s(&rt, &[1.0, 2.0], &[2]);
    let b = f32s(&rt, &[1.0, 1.0], &[2]);
    let mut outs = Vec::new();
    let before = rt.stats();
    for alpha in [0.5, 2.0, -3.0] {
        let out = rt
            .call1("aten::add.Tensor", &[(&a).into(), (&b).into(), Value::Scalar(Scalar::Float(alpha))])
            .unwrap();
        outs.push(host_f32(&rt, &out));
    }
    // Only the first call misses strict mode's signature memo (and compiles,
    // unless the program cache's disk tier already has the program).
    let after = rt.stats();
    assert_eq!(after.cache_misses - before.cache_misses, 1, "only the first call misses");
    assert!(after.compiles - before.compiles <= 1, "only the first call may compile");
    assert_eq!(outs, vec![vec![1.5, 2.5], vec![3.0, 4.0], vec![-2.0, -1.0]]);
}

#[test]
fn copy_into_a_strided_view_updates_the_base() {
    let rt = rt();
    // base = [[0, 1, 2], [3, 4, 5]]; write its column 1 (stride 3, offset 1).
    let base = f32s(&rt, &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0], &[2, 3]);
    let col = base.view_of("test", 1, &[2], &[3]).unwrap();
    let src = f32s(&rt, &[-1.0, -2.0], &[2]);
    let out = rt.call1("aten::copy_", &[(&col).into(), (&src).into()]).unwrap();
    assert!(out.same_storage(&base));
    assert_eq!(host_f32(&rt, &base), vec![0.0, -1.0, 2.0, 3.0, -2.0, 5.0]);
    assert_eq!(host_f32(&rt, &col), vec![-1.0, -2.0]);
    // An in-place op on a transposed view (a gather/scatter-free strided layout).
    let t = base.view_of("test", 0, &[3, 2], &[1, 3]).unwrap();
    rt.call("aten::mul_.Scalar", &[(&t).into(), Value::Scalar(Scalar::Int(10))]).unwrap();
    assert_eq!(host_f32(&rt, &base), vec![0.0, -10.0, 20.0, 30.0, -20.0, 50.0]);
}

#[test]
fn debug_mode_runs_the_same_and_errors_name_the_op() {
    let rt = rt();
    set_thread_mode(Some(ExecMode::DeferNeverAndLaunchBlocking)).unwrap();
    let a = f32s(&rt, &[4.0, 9.0], &[2]);
    let s = rt.call1("aten::sqrt", &[(&a).into()]).unwrap();
    assert_eq!(host_f32(&rt, &s), vec![2.0, 3.0]);
    let b = f32s(&rt, &[1.0, 2.0, 3.0], &[3]);
    let e = rt.call("aten::add.Tensor", &[(&a).into(), (&b).into()]).unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    let msg = e.to_string();
    assert!(msg.contains("aten::add.Tensor") && msg.contains("[2]") && msg.contains("[3]"), "{msg}");
    set_thread_mode(None).unwrap();
    // The runtime is still usable.
    let c = rt.call1("aten::add.Tensor", &[(&a).into(), (&a).into()]).unwrap();
    assert_eq!(host_f32(&rt, &c), vec![8.0, 18.0]);
    rt.synchronize().unwrap();
}

#[test]
fn device_out_of_range_and_unknown_op() {
    let rt = rt();
    let e = rt.tensor_from_host(&[0; 4], DType::F32, &[1], 99).unwrap_err();
    assert_eq!(e.code(), Code::OutOfRange);
    assert!(e.to_string().contains("99"), "{e}");
    let e = rt.call("aten::not_an_op", &[]).unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
}

#[test]
fn tensors_on_different_devices_are_rejected_except_by_copies() {
    let rt = rt();
    if rt.device_count() < 2 {
        return;
    }
    let a = f32s(&rt, &[1.0], &[1]);
    let b = rt.tensor_from_host(&2f32.to_ne_bytes(), DType::F32, &[1], 1).unwrap();
    let e = rt.call("aten::add.Tensor", &[(&a).into(), (&b).into()]).unwrap_err().to_string();
    assert!(e.contains("tpu:0") && e.contains("tpu:1"), "{e}");
    let moved = rt
        .call1("aten::_to_copy", &[(&a).into(), Value::None, Value::None, Value::Int(1)])
        .unwrap();
    assert_eq!(moved.device(), 1);
    let c = rt.call1("aten::add.Tensor", &[(&moved).into(), (&b).into()]).unwrap();
    assert_eq!(host_f32(&rt, &c), vec![3.0]);
}

#[test]
fn reset_peak_memory_restarts_from_live_bytes() {
    let rt = rt();
    let (live0, _) = rt.memory(0).unwrap();
    let t = f32s(&rt, &[0.0; 1000], &[1000]);
    drop(t);
    let (live, peak) = rt.memory(0).unwrap();
    assert_eq!(live, live0, "the dropped tensor's buffer is released");
    assert!(peak >= live0 + 4000, "peak {peak} must include the 4000-byte tensor (live before: {live0})");
    rt.reset_peak_memory(0).unwrap();
    assert_eq!(rt.memory(0).unwrap(), (live0, live0));
    let u = f32s(&rt, &[0.0; 10], &[10]);
    assert_eq!(rt.memory(0).unwrap(), (live0 + 40, live0 + 40));
    drop(u);
    assert_eq!(rt.reset_peak_memory(99).unwrap_err().code(), Code::OutOfRange);
}

#[test]
fn a_growing_op_in_a_fused_step_runs_alone_and_the_rest_stays_cached() {
    // A decode-like loop in fused mode: each step reads the last id of a
    // sequence that grows by one (a view of a storage whose size changes),
    // runs a fixed-shape part, and appends to the sequence. The fixed part
    // must stay one cached program; only the two growing ops, which run
    // alone, compile again, until the sequence grows in buckets.
    let rt = rt();
    set_thread_mode(Some(ExecMode::DeferAndFuse)).unwrap();
    let w = f32s(&rt, &[0.5, -0.25, 0.125, 1.0], &[2, 2]);
    let mut h = f32s(&rt, &[1.0, 2.0], &[1, 2]);
    let mut ids = i64s(&rt, &[7], &[1]);
    let mut want = [1.0f32, 2.0];
    let mut want_ids = vec![7i64];
    let mut last_bucket = 0;
    for step in 0..20 {
        let n = ids.sizes()[0];
        let last = ids.view_of("test", n - 1, &[1], &[1]).unwrap();
        let twice = rt.call1("aten::mul.Scalar", &[(&last).into(), Value::Scalar(Scalar::Int(2))]).unwrap();
        let m = rt.call1("aten::mm", &[(&h).into(), (&w).into()]).unwrap();
        let t = rt.call1("aten::tanh", &[(&m).into()]).unwrap();
        h = rt.call1("aten::mul.Scalar", &[(&t).into(), Value::Scalar(Scalar::Float(1.5))]).unwrap();
        let got = host_f32(&rt, &h);
        let flush = rt.last_flush().unwrap();
        // Step 1 (the cat of step 0 first) is the first of its kind and
        // step 2 the first to follow one; the cat that ends step 3 gives
        // the growing ops their third signature in a row and runs alone.
        // The lengths of its recorded calls were seen, so it grows at once:
        // the ids go into a storage of a bucket's size (`runtime/grow.rs`).
        // Step 4's read of their last id runs alone once more, and the
        // fixed part is a graph of its own. The read no longer depends on
        // the ids' size, so from step 5 on it joins the fused graph, which
        // compiles once for that and then once per bucket.
        let bucket = ids.storage().numel();
        if step == 4 {
            assert_eq!(flush.lowered, 3, "step {step}: the fixed part alone (mm, tanh, mul)");
            assert!(bucket > n, "step {step}: the ids must be grown");
        }
        if step >= 5 {
            assert_eq!(flush.lowered, 4, "step {step}: the fixed part and the read of the grown ids");
            if step > 5 && bucket == last_bucket {
                assert_eq!(flush.tier, Some("memory"), "step {step}: the graph must not compile within a bucket");
            }
        }
        last_bucket = bucket;
        ids = rt.call1("aten::cat", &[Value::TensorList(vec![ids.clone(), twice]), Value::Int(0)]).unwrap();
        want = [
            1.5 * (want[0] * 0.5 + want[1] * 0.125).tanh(),
            1.5 * (want[0] * -0.25 + want[1] * 1.0).tanh(),
        ];
        want_ids.push(2 * want_ids.last().unwrap());
        for (g, w) in got.iter().zip(want) {
            assert!((g - w).abs() < 1e-6, "step {step}: {got:?} vs {want:?}");
        }
    }
    assert_eq!(host_i64(&rt, &ids), want_ids);
    set_thread_mode(None).unwrap();
}
