//! Runtime shutdown: it waits for the work in flight and reports its error,
//! leaves no runtime or plugin thread behind, turns later calls into
//! FAILED_PRECONDITION errors while tensors stay droppable, and gives up
//! (leaving the runtime running) when work does not finish in time.

mod common;
use common::*;

use std::collections::HashSet;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use torchtpu_core::runtime::{set_thread_mode, ExecMode};
use torchtpu_core::{Code, Value};

/// The tests count the process's threads, so they run one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// (thread id, name) of every thread of this process.
fn threads() -> HashSet<(String, String)> {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|e| {
            let e = e.ok()?;
            let name = std::fs::read_to_string(e.path().join("comm")).ok()?;
            Some((e.file_name().to_string_lossy().into_owned(), name.trim().to_string()))
        })
        .collect()
}

#[test]
fn shutdown_waits_reports_and_joins_every_thread() {
    let _serial = SERIAL.lock();
    let before = threads();
    let rt = rt();
    let w = f32s(&rt, &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0], &[3, 2]);
    let created = rt.streams().create(0);
    // Work in flight in each mode, none of it synchronized: a strict-mode
    // chain of matmuls, a pending fused graph, and a strict-mode embedding
    // with an out-of-range index, whose error only the device finds.
    let mut x = f32s(&rt, &vec![0.5; 64 * 64], &[64, 64]);
    for _ in 0..20 {
        x = rt.call1("aten::mm", &[(&x).into(), (&x).into()]).unwrap();
    }
    set_thread_mode(Some(ExecMode::DeferAndFuse)).unwrap();
    let pending = rt.call1("aten::add.Tensor", &[(&w).into(), (&w).into()]).unwrap();
    set_thread_mode(None).unwrap();
    assert_eq!(rt.pending_ops(0), 1);
    let bad = rt.call1("aten::embedding", &[(&w).into(), (&i64s(&rt, &[7], &[1])).into()]).unwrap();

    let e = rt.shutdown(Some(Duration::from_secs(120))).expect_err("the bad index surfaces at shutdown");
    assert_eq!(e.code(), Code::OutOfRange, "{e}");
    assert!(e.to_string().contains("aten::embedding"), "{e}");
    assert!(rt.is_shut_down());
    assert_eq!(rt.pending_ops(0), 0, "shutdown flushes the pending graph");

    // No runtime thread (stream workers, the shutdown helper) and none of the
    // client's thread pools ("tf_XLAEigen" is the XLA CPU client's) is left;
    // only threads the plugin keeps per process (an alarm thread) may be.
    let left: Vec<String> = threads().difference(&before).map(|(_, n)| n.clone()).collect();
    assert!(!left.iter().any(|n| n.starts_with("ttpu-") || n.starts_with("tf_XLAEigen")), "threads left: {left:?}");

    // Later calls fail with a clear error instead of reaching the plugin.
    let e = rt.call1("aten::add.Tensor", &[(&w).into(), (&w).into()]).unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e}");
    assert!(e.to_string().contains("shut down"), "{e}");
    assert_eq!(rt.tensor_to_host(&w).unwrap_err().code(), Code::FailedPrecondition);
    // Also ops that would not reach the device at once: fused and views.
    set_thread_mode(Some(ExecMode::DeferAndFuse)).unwrap();
    assert_eq!(rt.call1("aten::add.Tensor", &[(&w).into(), (&w).into()]).unwrap_err().code(), Code::FailedPrecondition);
    set_thread_mode(None).unwrap();
    let e = rt.call1("aten::t", &[(&w).into()]).unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e}");
    assert_eq!(rt.tensor_from_host(&[0; 4], torchtpu_core::DType::F32, &[1], 0).unwrap_err().code(), Code::FailedPrecondition);
    let e = created.synchronize().unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e}");
    // New streams get no worker, and no thread starts.
    assert!(rt.streams().create(1).synchronize().is_err());
    assert!(!threads().difference(&before).any(|(_, n)| n.starts_with("ttpu-")));
    // A second shutdown is a no-op.
    rt.shutdown(Some(Duration::from_secs(1))).unwrap();
    // Tensors, the stream and the runtime drop without touching the plugin.
    drop((w, x, pending, bad, created));
    drop(rt);
}

#[test]
fn shutdown_gives_up_at_its_deadline_and_leaves_the_runtime_running() {
    let _serial = SERIAL.lock();
    let rt = rt();
    let s = rt.streams().create(0);
    let (release, gate) = mpsc::channel::<()>();
    s.submit("gate", move || {
        let _ = gate.recv();
        Ok(())
    });
    let start = Instant::now();
    let e = rt.shutdown(Some(Duration::from_millis(300))).unwrap_err();
    assert_eq!(e.code(), Code::DeadlineExceeded, "{e}");
    assert!(e.to_string().contains("left running"), "{e}");
    assert!(start.elapsed() < Duration::from_secs(30), "took {:?}", start.elapsed());
    assert!(!rt.is_shut_down());
    // Still fully usable.
    let t = f32s(&rt, &[1.0, 2.0], &[2]);
    let u = rt.call1("aten::add.Tensor", &[(&t).into(), (&t).into(), Value::Scalar(torchtpu_core::Scalar::Int(1))]).unwrap();
    assert_eq!(host_f32(&rt, &u), vec![2.0, 4.0]);
    // Once the work ends, shutdown completes.
    release.send(()).unwrap();
    rt.shutdown(None).unwrap();
    assert!(rt.is_shut_down());
    assert!(s.synchronize().is_err());
}

/// `close` (what the C ABI's destroy does before letting go) runs the
/// pending work, stops the streams so that one outliving the runtime fails
/// cleanly, and leaves nothing that keeps the runtime alive: dropping the
/// last handle frees it, and its tensors can still be dropped after.
#[test]
fn close_stops_streams_and_the_last_handle_frees_the_runtime() {
    let _serial = SERIAL.lock();
    let rt = rt();
    let w = f32s(&rt, &[1.0, 2.0, 3.0], &[3]);
    let stream = rt.streams().create(0);
    set_thread_mode(Some(ExecMode::DeferAndFuse)).unwrap();
    let pending = rt.call1("aten::mul.Tensor", &[(&w).into(), (&w).into()]).unwrap();
    set_thread_mode(None).unwrap();
    assert_eq!(rt.pending_ops(0), 1);
    assert!(stream.check_running().is_ok());

    rt.close().unwrap();
    assert_eq!(rt.pending_ops(0), 0, "close flushes the pending graph");
    assert_eq!(host_f32(&rt, &pending), vec![1.0, 4.0, 9.0], "the flushed work ran");
    let e = stream.check_running().expect_err("a closed runtime's stream runs nothing");
    assert_eq!(e.code(), Code::FailedPrecondition, "{e}");
    assert!(e.to_string().contains("destroyed"), "{e}");
    assert_eq!(stream.synchronize().expect_err("stopped").code(), Code::FailedPrecondition);
    rt.close().unwrap(); // idempotent

    let weak = std::sync::Arc::downgrade(&rt);
    drop(rt);
    assert!(weak.upgrade().is_none(), "nothing but its handle keeps a runtime alive");
    // The tensors hold the client, so dropping them after the runtime frees
    // their device memory without touching the runtime.
    drop(pending);
    drop(w);
    drop(stream);
}
