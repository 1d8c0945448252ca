//! Device-side index checks: an out-of-range index in an indexing op is an
//! OUT_OF_RANGE error naming the op, the bad index and the valid range; at
//! the next host read or synchronize in strict and fused mode, at the op in
//! launch-blocking mode. Every case runs in all three modes; values are
//! hand-computed.

mod common;
use common::*;

use std::sync::Arc;

use torchtpu_core::runtime::ExecMode;
use torchtpu_core::{Code, Error, Result, Runtime, Scalar, Tensor, Value};


fn opt(ts: &[&Tensor]) -> Value {
    Value::OptTensorList(ts.iter().map(|&t| Some(t.clone())).collect())
}

/// The error of a call with a bad index: from the call itself in
/// launch-blocking mode, else from reading its first tensor result.
fn oob(rt: &Arc<Runtime>, mode: ExecMode, call: Result<Vec<Value>>) -> Error {
    let e = match call {
        Err(e) => {
            assert_eq!(mode, ExecMode::DeferNeverAndLaunchBlocking, "only launch-blocking mode fails at the op: {e}");
            e
        }
        Ok(vals) => {
            assert_ne!(mode, ExecMode::DeferNeverAndLaunchBlocking, "launch-blocking mode must fail at the op");
            let t = vals.into_iter().find_map(|v| v.into_tensor().ok()).expect("a tensor result");
            rt.tensor_to_host(&t).expect_err("reading the result of a bad index must fail")
        }
    };
    assert_eq!(e.code(), Code::OutOfRange, "{e}");
    let msg = e.to_string();
    if mode != ExecMode::DeferNeverAndLaunchBlocking {
        assert!(msg.contains("asynchronous") && msg.contains("TORCHTPU_LAUNCH_BLOCKING=1"), "{msg}");
    }
    e
}

/// Asserts that the message has each of `parts`.
fn says(e: &Error, parts: &[&str]) {
    let msg = e.to_string();
    for p in parts {
        assert!(msg.contains(p), "{p:?} missing from: {msg}");
    }
}

/// The runtime still works after an error, and nothing else is pending.
fn still_usable(rt: &Arc<Runtime>) {
    let a = f32s(rt, &[1.0, 2.0], &[2]);
    let b = rt.call1("aten::add.Tensor", &[(&a).into(), (&a).into()]).unwrap();
    assert_eq!(host_f32(rt, &b), vec![2.0, 4.0]);
    rt.synchronize().unwrap();
}

#[test]
fn embedding_rows() {
    each_mode(|rt, mode| {
        // weight row r is [2r, 2r + 1].
        let w = f32s(rt, &(0..10).map(|x| x as f32).collect::<Vec<_>>(), &[5, 2]);
        let ok = rt.call1("aten::embedding", &[(&w).into(), (&i64s(rt, &[4, 0], &[2])).into()]).unwrap();
        assert_eq!(host_f32(rt, &ok), vec![8.0, 9.0, 0.0, 1.0]);
        for (bad, shown) in [(5, "index 5 "), (-1, "index -1 ")] {
            let idx = i64s(rt, &[1, bad], &[2]);
            let e = oob(rt, mode, rt.call("aten::embedding", &[(&w).into(), (&idx).into()]));
            says(&e, &["aten::embedding: ", shown, "out of range for a weight of 5 rows (valid: 0 to 4)"]);
            still_usable(rt);
        }
    });
}

#[test]
fn gather_rejects_negative_and_large() {
    each_mode(|rt, mode| {
        let x = f32s(rt, &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0], &[2, 3]);
        let idx = i64s(rt, &[2, 0, 1, 1], &[2, 2]);
        let ok = rt.call1("aten::gather", &[(&x).into(), 1i64.into(), (&idx).into()]).unwrap();
        assert_eq!(host_f32(rt, &ok), vec![2.0, 0.0, 4.0, 4.0]);
        for (bad, shown) in [(-1, "index -1 "), (3, "index 3 ")] {
            let idx = i64s(rt, &[0, bad], &[1, 2]);
            let e = oob(rt, mode, rt.call("aten::gather", &[(&x).into(), 1i64.into(), (&idx).into()]));
            says(&e, &["aten::gather: ", shown, "dimension 1 with size 3 (valid: 0 to 2)"]);
            still_usable(rt);
        }
    });
}

#[test]
fn every_scatter_form() {
    each_mode(|rt, mode| {
        let x = f32s(rt, &[0.0; 3], &[3]);
        let src = f32s(rt, &[1.0, 2.0, 3.0], &[3]);
        let good = i64s(rt, &[0, 2, 2], &[3]);
        let ok = rt.call1("aten::scatter_add", &[(&x).into(), 0i64.into(), (&good).into(), (&src).into()]).unwrap();
        assert_eq!(host_f32(rt, &ok), vec![1.0, 0.0, 5.0]);

        let bad = i64s(rt, &[0, 3, 1], &[3]);
        let v = Value::Scalar(Scalar::Float(7.0));
        let calls: Vec<(&str, Vec<Value>)> = vec![
            ("aten::scatter.src", vec![(&x).into(), 0i64.into(), (&bad).into(), (&src).into()]),
            ("aten::scatter.value", vec![(&x).into(), 0i64.into(), (&bad).into(), v.clone()]),
            ("aten::scatter_add", vec![(&x).into(), 0i64.into(), (&bad).into(), (&src).into()]),
            ("aten::scatter_reduce.two", vec![(&x).into(), 0i64.into(), (&bad).into(), (&src).into(), "amax".into()]),
            // Mean without self scatters three times: still one check.
            (
                "aten::scatter_reduce.two",
                vec![(&x).into(), 0i64.into(), (&bad).into(), (&src).into(), "mean".into(), false.into()],
            ),
        ];
        for (op, args) in calls {
            let e = oob(rt, mode, rt.call(op, &args));
            says(&e, &[&format!("{op}: "), "index 3 ", "dimension 0 with size 3 (valid: 0 to 2)"]);
            still_usable(rt);
        }
        // In place: launch-blocking mode leaves the target as it was.
        let y = f32s(rt, &[5.0; 3], &[3]);
        let e = oob(rt, mode, rt.call("aten::scatter_.value", &[(&y).into(), 0i64.into(), (&bad).into(), v]));
        says(&e, &["aten::scatter_.value: ", "index 3 "]);
        if mode == ExecMode::DeferNeverAndLaunchBlocking {
            assert_eq!(host_f32(rt, &y), vec![5.0; 3]);
        }
        still_usable(rt);
    });
}

#[test]
fn advanced_index_takes_negative_indices() {
    each_mode(|rt, mode| {
        let x = f32s(rt, &[0.0, 1.0, 2.0, 3.0, 4.0], &[5]);
        let idx = i64s(rt, &[-1, -5, 2], &[3]);
        let ok = rt.call1("aten::index.Tensor", &[(&x).into(), opt(&[&idx])]).unwrap();
        assert_eq!(host_f32(rt, &ok), vec![4.0, 0.0, 2.0]);
        for (bad, shown) in [(7, "index 7 "), (5, "index 5 "), (-6, "index -6 ")] {
            let idx = i64s(rt, &[bad], &[1]);
            let e = oob(rt, mode, rt.call("aten::index.Tensor", &[(&x).into(), opt(&[&idx])]));
            says(&e, &["aten::index.Tensor: ", shown, "dimension 0 with size 5 (valid: -5 to 4)"]);
            still_usable(rt);
        }
        // Two indexed dims: the second one's range is named.
        let m = f32s(rt, &[0.0; 6], &[2, 3]);
        let (i0, i1) = (i64s(rt, &[1], &[1]), i64s(rt, &[3], &[1]));
        let e = oob(rt, mode, rt.call("aten::index.Tensor", &[(&m).into(), opt(&[&i0, &i1])]));
        says(&e, &["index 3 ", "dimension 1 with size 3 (valid: -3 to 2)"]);
        still_usable(rt);
    });
}

#[test]
fn index_put_forms() {
    each_mode(|rt, mode| {
        let vals = f32s(rt, &[3.0], &[1]);
        let x = f32s(rt, &[0.0; 5], &[5]);
        let neg = i64s(rt, &[-1], &[1]);
        let y = rt.call1("aten::index_put", &[(&x).into(), opt(&[&neg]), (&vals).into()]).unwrap();
        assert_eq!(host_f32(rt, &y), vec![0.0, 0.0, 0.0, 0.0, 3.0]);
        let z = f32s(rt, &[1.0; 5], &[5]);
        let two = i64s(rt, &[-2, 3], &[2]);
        let vals2 = f32s(rt, &[2.0, 4.0], &[2]);
        rt.call("aten::_index_put_impl_", &[(&z).into(), opt(&[&two]), (&vals2).into(), true.into()]).unwrap();
        assert_eq!(host_f32(rt, &z), vec![1.0, 1.0, 1.0, 7.0, 1.0]);

        let bad = i64s(rt, &[5], &[1]);
        for op in ["aten::index_put", "aten::index_put_", "aten::_index_put_impl_"] {
            let w = f32s(rt, &[0.0; 5], &[5]);
            let e = oob(rt, mode, rt.call(op, &[(&w).into(), opt(&[&bad]), (&vals).into()]));
            says(&e, &[&format!("{op}: "), "index 5 ", "dimension 0 with size 5 (valid: -5 to 4)"]);
            still_usable(rt);
        }
    });
}

#[test]
fn take_wraps_negative_indices() {
    each_mode(|rt, mode| {
        let x = f32s(rt, &[1.0, 2.0, 3.0, 4.0], &[2, 2]);
        let idx = i64s(rt, &[-1, 0, 3, -4], &[2, 2]);
        let ok = rt.call1("aten::take", &[(&x).into(), (&idx).into()]).unwrap();
        assert_eq!(ok.sizes(), &[2, 2]);
        assert_eq!(host_f32(rt, &ok), vec![4.0, 1.0, 4.0, 1.0]);
        let bad = i64s(rt, &[4], &[1]);
        let e = oob(rt, mode, rt.call("aten::take", &[(&x).into(), (&bad).into()]));
        says(&e, &["aten::take: ", "index 4 ", "a tensor of 4 elements (valid: -4 to 3)"]);
        still_usable(rt);
    });
}

#[test]
fn index_select_and_index_add() {
    each_mode(|rt, mode| {
        let x = f32s(rt, &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0], &[3, 2]);
        let idx = i64s(rt, &[2, 0], &[2]);
        let ok = rt.call1("aten::index_select", &[(&x).into(), 0i64.into(), (&idx).into()]).unwrap();
        assert_eq!(host_f32(rt, &ok), vec![4.0, 5.0, 0.0, 1.0]);
        for (bad, shown) in [(3, "index 3 "), (-1, "index -1 ")] {
            let idx = i64s(rt, &[bad], &[1]);
            let e = oob(rt, mode, rt.call("aten::index_select", &[(&x).into(), 0i64.into(), (&idx).into()]));
            says(&e, &["aten::index_select: ", shown, "dimension 0 with size 3 (valid: 0 to 2)"]);
            still_usable(rt);
        }
        let z = f32s(rt, &[0.0; 3], &[3]);
        let src = f32s(rt, &[1.0, 2.0], &[2]);
        let one = Value::Scalar(Scalar::Int(1));
        let ok = rt.call1("aten::index_add", &[(&z).into(), 0i64.into(), (&i64s(rt, &[2, 2], &[2])).into(), (&src).into(), one.clone()]).unwrap();
        assert_eq!(host_f32(rt, &ok), vec![0.0, 0.0, 3.0]);
        let bad = i64s(rt, &[0, 3], &[2]);
        let e = oob(rt, mode, rt.call("aten::index_add", &[(&z).into(), 0i64.into(), (&bad).into(), (&src).into(), one]));
        says(&e, &["aten::index_add: ", "index 3 ", "dimension 0 with size 3 (valid: 0 to 2)"]);
        still_usable(rt);
    });
}

#[test]
fn nll_loss_targets_skip_ignore_index() {
    each_mode(|rt, mode| {
        // x[r][c] = -(5r + c + 1) / 10
        let xs: Vec<f32> = (0..15).map(|k| -((k + 1) as f32) / 10.0).collect();
        let x = f32s(rt, &xs, &[3, 5]);
        let nll = |t: &Tensor, reduction: i64| {
            rt.call("aten::nll_loss_forward", &[(&x).into(), t.into(), Value::None, reduction.into(), (-100i64).into()])
        };
        // Sum over the non-ignored rows: -(x[0][1] + x[1][4]) = 0.2 + 1.0.
        let t = i64s(rt, &[1, 4, -100], &[3]);
        let out = nll(&t, 2).unwrap().remove(0).into_tensor().unwrap();
        let got = host_f32(rt, &out)[0];
        assert!((got - 1.2).abs() < 1e-6, "{got}");
        let t = i64s(rt, &[1, 7, -100], &[3]);
        let e = oob(rt, mode, nll(&t, 1));
        says(&e, &["aten::nll_loss_forward: ", "target 7 is out of bounds for 5 classes (valid: 0 to 4)"]);
        still_usable(rt);
        // -1 is not the ignore index here: it is out of bounds.
        let t = i64s(rt, &[-1, 0, 0], &[3]);
        let e = oob(rt, mode, nll(&t, 0));
        says(&e, &["target -1 is out of bounds for 5 classes"]);
        still_usable(rt);

        // 2d: [N=1, C=3, H=1, W=2], targets [1, 1, 2].
        let x2 = f32s(rt, &[-0.1, -0.2, -0.3, -0.4, -0.5, -0.6], &[1, 3, 1, 2]);
        let nll2 = |t: &Tensor| {
            rt.call("aten::nll_loss2d_forward", &[(&x2).into(), t.into(), Value::None, 2i64.into(), (-100i64).into()])
        };
        // Pixel 0 is class 2 at (0, 0) -> x2[0][2][0][0] = -0.5; pixel 1 ignored.
        let out = nll2(&i64s(rt, &[2, -100], &[1, 1, 2])).unwrap().remove(0).into_tensor().unwrap();
        assert!((host_f32(rt, &out)[0] - 0.5).abs() < 1e-6);
        let e = oob(rt, mode, nll2(&i64s(rt, &[0, 3], &[1, 1, 2])));
        says(&e, &["aten::nll_loss2d_forward: ", "target 3 is out of bounds for 3 classes (valid: 0 to 2)"]);
        still_usable(rt);
    });
}

#[test]
fn synchronize_reports_and_clears() {
    each_mode(|rt, mode| {
        let x = f32s(rt, &[0.0, 1.0, 2.0], &[3]);
        let bad = i64s(rt, &[3], &[1]);
        let r = rt.call("aten::index_select", &[(&x).into(), 0i64.into(), (&bad).into()]);
        if mode == ExecMode::DeferNeverAndLaunchBlocking {
            assert_eq!(r.unwrap_err().code(), Code::OutOfRange);
            return;
        }
        let y = r.unwrap();
        let e = rt.synchronize().unwrap_err();
        assert_eq!(e.code(), Code::OutOfRange);
        says(&e, &["aten::index_select: ", "index 3 "]);
        // Reported once: the same result now reads (clamped) without error.
        rt.synchronize().unwrap();
        assert_eq!(rt.pending_index_checks(), 0);
        let t = y[0].clone().into_tensor().unwrap();
        assert_eq!(host_f32(rt, &t).len(), 1);
    });
}

#[test]
fn switching_checks_off_is_silent_and_recompiles() {
    each_mode(|rt, mode| {
        let w = f32s(rt, &(0..10).map(|x| x as f32).collect::<Vec<_>>(), &[5, 2]);
        let bad = i64s(rt, &[5], &[1]);
        let x = f32s(rt, &[0.0, 1.0, 2.0, 3.0, 4.0], &[5]);
        let seven = i64s(rt, &[7], &[1]);
        assert!(rt.index_checks());
        let call = || rt.call("aten::embedding", &[(&w).into(), (&bad).into()]);
        oob(rt, mode, call());
        rt.set_index_checks(false);
        assert!(!rt.index_checks());
        // No stale program: the unchecked one runs, with no error.
        let out = call().unwrap().remove(0).into_tensor().unwrap();
        assert_eq!(host_f32(rt, &out).len(), 2);
        let out = rt.call1("aten::index.Tensor", &[(&x).into(), opt(&[&seven])]).unwrap();
        assert_eq!(host_f32(rt, &out).len(), 1);
        rt.synchronize().unwrap();
        rt.set_index_checks(true);
        oob(rt, mode, call());
        still_usable(rt);
    });
}

#[test]
fn pending_checks_stay_bounded_without_reads() {
    each_mode(|rt, mode| {
        let w = f32s(rt, &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0], &[3, 2]);
        let (good, bad) = (i64s(rt, &[2, 0], &[2]), i64s(rt, &[0, 3], &[2]));
        // Small graphs, so fused mode also runs many programs.
        rt.set_fusion_max_ops(4);
        let mut last = None;
        for step in 0..1000 {
            let idx = if step == 10 { &bad } else { &good };
            match rt.call("aten::embedding", &[(&w).into(), idx.into()]) {
                Ok(mut v) => last = Some(v.remove(0).into_tensor().unwrap()),
                Err(e) => {
                    // Launch-blocking mode reports it at once.
                    assert_eq!(mode, ExecMode::DeferNeverAndLaunchBlocking);
                    assert_eq!(step, 10, "{e}");
                    assert_eq!(e.code(), Code::OutOfRange);
                }
            }
            assert!(rt.pending_index_checks() <= 64, "{} pending at step {step}", rt.pending_index_checks());
        }
        rt.set_fusion_max_ops(2048);
        let r = rt.tensor_to_host(last.as_ref().unwrap());
        if mode == ExecMode::DeferNeverAndLaunchBlocking {
            r.unwrap();
        } else {
            // Step 10's error, found when the list was trimmed.
            let e = r.unwrap_err();
            assert_eq!(e.code(), Code::OutOfRange);
            says(&e, &["aten::embedding: ", "index 3 ", "valid: 0 to 2"]);
            assert_eq!(host_f32(rt, last.as_ref().unwrap()), vec![4.0, 5.0, 0.0, 1.0]);
        }
        still_usable(rt);
    });
}

#[test]
fn index_fill_wraps_and_index_copy_does_not() {
    each_mode(|rt, mode| {
        // x[r][c] = 3r + c
        let x = f32s(rt, &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0], &[2, 3]);
        let v = Value::Scalar(Scalar::Float(9.0));
        let ok = rt
            .call1("aten::index_fill.int_Scalar", &[(&x).into(), 1i64.into(), (&i64s(rt, &[-1, 0], &[2])).into(), v.clone()])
            .unwrap();
        assert_eq!(host_f32(rt, &ok), vec![9.0, 1.0, 9.0, 9.0, 4.0, 9.0]);
        for (bad, shown) in [(3, "index 3 "), (-4, "index -4 ")] {
            let idx = i64s(rt, &[0, bad], &[2]);
            let e = oob(rt, mode, rt.call("aten::index_fill.int_Scalar", &[(&x).into(), 1i64.into(), (&idx).into(), v.clone()]));
            says(&e, &["aten::index_fill.int_Scalar: ", shown, "dimension 1 with size 3 (valid: -3 to 2)"]);
            still_usable(rt);
        }
        let val = f32s(rt, &[9.0], &[]);
        let idx = i64s(rt, &[2], &[1]);
        let e = oob(rt, mode, rt.call("aten::index_fill.int_Tensor", &[(&x).into(), 0i64.into(), (&idx).into(), (&val).into()]));
        says(&e, &["aten::index_fill.int_Tensor: ", "index 2 ", "dimension 0 with size 2 (valid: -2 to 1)"]);
        still_usable(rt);

        let src = f32s(rt, &[7.0, 8.0], &[2, 1]);
        let ok = rt.call1("aten::index_copy", &[(&x).into(), 1i64.into(), (&i64s(rt, &[2], &[1])).into(), (&src).into()]).unwrap();
        assert_eq!(host_f32(rt, &ok), vec![0.0, 1.0, 7.0, 3.0, 4.0, 8.0]);
        for (bad, shown) in [(3, "index 3 "), (-1, "index -1 ")] {
            let idx = i64s(rt, &[bad], &[1]);
            let e = oob(rt, mode, rt.call("aten::index_copy", &[(&x).into(), 1i64.into(), (&idx).into(), (&src).into()]));
            says(&e, &["aten::index_copy: ", shown, "dimension 1 with size 3 (valid: 0 to 2)"]);
            still_usable(rt);
        }
        // In place: launch-blocking mode leaves the target as it was.
        let y = f32s(rt, &[5.0; 6], &[2, 3]);
        let idx = i64s(rt, &[3], &[1]);
        let e = oob(rt, mode, rt.call("aten::index_copy_", &[(&y).into(), 1i64.into(), (&idx).into(), (&src).into()]));
        says(&e, &["aten::index_copy_: ", "index 3 "]);
        if mode == ExecMode::DeferNeverAndLaunchBlocking {
            assert_eq!(host_f32(rt, &y), vec![5.0; 6]);
        }
        still_usable(rt);
    });
}

#[test]
fn put_wraps_negative_indices() {
    each_mode(|rt, mode| {
        let x = f32s(rt, &[1.0, 2.0, 3.0, 4.0], &[2, 2]);
        let src = f32s(rt, &[10.0, 20.0, 30.0], &[3]);
        let idx = i64s(rt, &[-1, 0, 3], &[3]);
        let ok = rt.call1("aten::put", &[(&x).into(), (&idx).into(), (&src).into(), true.into()]).unwrap();
        assert_eq!(ok.sizes(), &[2, 2]);
        assert_eq!(host_f32(rt, &ok), vec![21.0, 2.0, 3.0, 44.0]);
        for (bad, shown) in [(4, "index 4 "), (-5, "index -5 ")] {
            let idx = i64s(rt, &[0, bad, 1], &[3]);
            for op in ["aten::put", "aten::put_"] {
                let y = f32s(rt, &[0.0; 4], &[2, 2]);
                let e = oob(rt, mode, rt.call(op, &[(&y).into(), (&idx).into(), (&src).into(), false.into()]));
                says(&e, &[&format!("{op}: "), shown, "a tensor of 4 elements (valid: -4 to 3)"]);
                still_usable(rt);
            }
        }
    });
}

#[test]
fn masked_scatter_needs_enough_source() {
    each_mode(|rt, mode| {
        let x = f32s(rt, &[0.0; 4], &[4]);
        let mask = rt.call1("aten::gt.Scalar", &[(&f32s(rt, &[1.0, 0.0, 1.0, 1.0], &[4])).into(), Value::Scalar(Scalar::Float(0.5))]).unwrap();
        let ok = rt.call1("aten::masked_scatter", &[(&x).into(), (&mask).into(), (&f32s(rt, &[7.0, 8.0, 9.0], &[3])).into()]).unwrap();
        assert_eq!(host_f32(rt, &ok), vec![7.0, 0.0, 8.0, 9.0]);
        let short = f32s(rt, &[7.0, 8.0], &[2]);
        let e = oob(rt, mode, rt.call("aten::masked_scatter", &[(&x).into(), (&mask).into(), (&short).into()]));
        says(&e, &["aten::masked_scatter: ", "index 2 ", "a source of 2 elements", "(valid: 0 to 1)"]);
        still_usable(rt);
    });
}
