//! Streams and events: ordering on one stream, ordering across streams
//! through events, error delivery, panics, timing and shutdown. Most tests
//! need no device; the last ones run real device work on a stream.

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Barrier};
use std::thread;
use std::time::Duration;

use parking_lot::Mutex;
use torchtpu_core::runtime::stream::track_current;
use torchtpu_core::runtime::{Stream, StreamEvent, Streams};
use torchtpu_core::{Code, Error, Value};

/// A closure that blocks its stream until the returned sender sends (or is
/// dropped), so tests can hold work pending without timing.
fn gate(s: &Stream) -> mpsc::Sender<()> {
    let (tx, rx) = mpsc::channel::<()>();
    s.submit("gate", move || {
        let _ = rx.recv();
        Ok(())
    });
    tx
}

#[test]
fn work_runs_in_submission_order() {
    let s = Stream::new(0, 1);
    let log = Arc::new(Mutex::new(Vec::new()));
    for i in 0..100 {
        let log = log.clone();
        s.submit(format!("push {i}"), move || {
            log.lock().push(i);
            Ok(())
        });
    }
    s.synchronize().unwrap();
    assert_eq!(*log.lock(), (0..100).collect::<Vec<_>>());
    assert!(s.query());
}

#[test]
fn each_submitting_thread_keeps_its_order_on_a_shared_stream() {
    let s = Stream::new(0, 2);
    let log = Arc::new(Mutex::new(Vec::new()));
    let start = Arc::new(Barrier::new(4));
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let (s, log, start) = (s.clone(), log.clone(), start.clone());
            thread::spawn(move || {
                start.wait();
                for i in 0..50 {
                    let log = log.clone();
                    s.submit("push", move || {
                        log.lock().push((t, i));
                        Ok(())
                    });
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    s.synchronize().unwrap();
    let log = log.lock();
    assert_eq!(log.len(), 200);
    for t in 0..4 {
        let mine: Vec<i32> = log.iter().filter(|(th, _)| *th == t).map(|&(_, i)| i).collect();
        assert_eq!(mine, (0..50).collect::<Vec<_>>(), "thread {t}");
    }
}

#[test]
fn a_stream_waiting_on_an_event_sees_the_other_streams_effect() {
    let a = Stream::new(0, 10);
    let b = Stream::new(0, 11);
    let written = Arc::new(AtomicBool::new(false));
    let observed = Arc::new(Mutex::new(None));

    // Hold A until B's wait is queued, so B can only pass by waiting.
    let release = gate(&a);
    let w = written.clone();
    a.submit("write", move || {
        thread::sleep(Duration::from_millis(20));
        w.store(true, Ordering::SeqCst);
        Ok(())
    });
    let ev = StreamEvent::new();
    ev.record(&a);
    b.wait_event(&ev).unwrap();
    let (w, o) = (written.clone(), observed.clone());
    b.submit("read", move || {
        *o.lock() = Some(w.load(Ordering::SeqCst));
        Ok(())
    });
    assert!(!ev.query(), "A is held at its gate");
    drop(release);
    b.synchronize().unwrap();
    assert_eq!(*observed.lock(), Some(true));
    assert!(ev.query());
    ev.synchronize().unwrap();
}

#[test]
fn a_consumer_stream_waits_on_events_of_several_producer_threads() {
    // Four threads each fill one slot on their own stream and record an event;
    // a consumer stream waits on all four events and sums the slots.
    let slots = Arc::new(Mutex::new(vec![0u64; 4]));
    let consumer = Stream::new(0, 20);
    let start = Arc::new(Barrier::new(5));
    let (ev_tx, ev_rx) = mpsc::channel();
    let producers: Vec<_> = (0..4u64)
        .map(|t| {
            let (slots, start, ev_tx) = (slots.clone(), start.clone(), ev_tx.clone());
            thread::spawn(move || {
                let s = Stream::new(0, 21 + t);
                let release = gate(&s);
                for k in 1..=10u64 {
                    let slots = slots.clone();
                    s.submit("fill", move || {
                        slots.lock()[t as usize] += k * (t + 1);
                        Ok(())
                    });
                }
                let ev = StreamEvent::new();
                ev.record(&s);
                ev_tx.send(ev).unwrap();
                start.wait();
                drop(release);
                s.synchronize().unwrap();
            })
        })
        .collect();
    drop(ev_tx);
    let events: Vec<StreamEvent> = (0..4).map(|_| ev_rx.recv().unwrap()).collect();
    for e in &events {
        consumer.wait_event(e).unwrap();
    }
    let sum = Arc::new(Mutex::new(None));
    let (slots2, sum2) = (slots.clone(), sum.clone());
    consumer.submit("sum", move || {
        *sum2.lock() = Some(slots2.lock().iter().sum::<u64>());
        Ok(())
    });
    start.wait(); // every producer is still held at its gate until now
    consumer.synchronize().unwrap();
    for p in producers {
        p.join().unwrap();
    }
    // Each producer adds 55 * (t + 1): 55 * (1 + 2 + 3 + 4).
    assert_eq!(*sum.lock(), Some(550));
}

#[test]
fn an_error_surfaces_with_its_label_at_event_and_stream_synchronize() {
    let s = Stream::new(0, 30);
    let ran_after = Arc::new(AtomicBool::new(false));
    s.submit("aten::ok", || Ok(()));
    s.submit("aten::fail", || Err(Error::Internal("boom".into())));
    s.submit("aten::fail_again", || Err(Error::InvalidArgument("second".into())));
    let r = ran_after.clone();
    s.submit("aten::after", move || {
        r.store(true, Ordering::SeqCst);
        Ok(())
    });
    let ev = StreamEvent::new();
    ev.record(&s);

    let e = ev.synchronize().unwrap_err();
    assert_eq!(e.code(), Code::Internal);
    assert!(matches!(&e, Error::InOp { op, .. } if op == "aten::fail"), "{e:?}");
    assert_eq!(e.to_string(), "aten::fail: internal error: boom");
    // Waiting again reports it again: the event keeps what it carries.
    assert_eq!(ev.synchronize().unwrap_err().to_string(), "aten::fail: internal error: boom");

    // The stream reports the first error once, then is clean.
    let e = s.synchronize().unwrap_err();
    assert_eq!(e.to_string(), "aten::fail: internal error: boom");
    s.synchronize().unwrap();
    assert!(ran_after.load(Ordering::SeqCst), "work after a failure still runs");

    // An event recorded after the report is clean.
    let ev2 = StreamEvent::new();
    ev2.record(&s);
    ev2.synchronize().unwrap();
}

#[test]
fn an_op_error_keeps_its_own_op_name() {
    let s = Stream::new(0, 31);
    s.submit("launch", || Err(Error::op("aten::add", "shapes [2] and [3] do not broadcast")));
    let e = s.synchronize().unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert_eq!(e.to_string(), "aten::add: shapes [2] and [3] do not broadcast");
}

#[test]
fn a_panic_becomes_an_internal_error_and_the_worker_keeps_serving() {
    let s = Stream::new(0, 40);
    s.submit("aten::explode", || panic!("kaboom {}", 7));
    let count = Arc::new(AtomicUsize::new(0));
    for _ in 0..3 {
        let c = count.clone();
        s.submit("count", move || {
            c.fetch_add(1, Ordering::SeqCst);
            Ok(())
        });
    }
    let e = s.synchronize().unwrap_err();
    assert_eq!(e.code(), Code::Internal);
    assert!(matches!(&e, Error::InOp { op, .. } if op == "aten::explode"), "{e:?}");
    assert!(e.to_string().contains("kaboom 7"), "{e}");
    assert_eq!(count.load(Ordering::SeqCst), 3);
    s.submit("count", {
        let c = count.clone();
        move || {
            c.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }
    });
    s.synchronize().unwrap();
    assert_eq!(count.load(Ordering::SeqCst), 4);
}

#[test]
fn query_reports_pending_work_and_unrecorded_events_are_complete() {
    let s = Stream::new(0, 50);
    assert!(s.query());
    let fresh = StreamEvent::new();
    assert!(fresh.query());
    fresh.synchronize().unwrap();
    s.wait_event(&fresh).unwrap(); // imposes nothing

    let release = gate(&s);
    let ev = StreamEvent::new();
    ev.record(&s);
    assert!(!s.query());
    assert!(!ev.query());
    assert_eq!(fresh.elapsed_ms(&ev).unwrap_err().code(), Code::InvalidArgument);
    assert_eq!(ev.elapsed_ms(&ev).unwrap_err().code(), Code::FailedPrecondition);
    drop(release);
    s.synchronize().unwrap();
    assert!(s.query());
    assert!(ev.query());
    assert_eq!(ev.elapsed_ms(&ev).unwrap(), 0.0);
}

#[test]
fn elapsed_time_is_non_negative_and_ordered() {
    let s = Stream::new(0, 60);
    let (e1, e2, e3) = (StreamEvent::new(), StreamEvent::new(), StreamEvent::new());
    e1.record(&s);
    s.submit("sleep", || {
        thread::sleep(Duration::from_millis(2));
        Ok(())
    });
    e2.record(&s);
    s.submit("sleep", || {
        thread::sleep(Duration::from_millis(2));
        Ok(())
    });
    e3.record(&s);
    e3.synchronize().unwrap();
    let (a, b, c) = (e1.elapsed_ms(&e2).unwrap(), e2.elapsed_ms(&e3).unwrap(), e1.elapsed_ms(&e3).unwrap());
    assert!(a >= 0.0 && b >= 0.0, "{a} {b}");
    assert!(c >= a && c >= b, "{a} {b} {c}");
    assert!((a + b - c).abs() < 1e-6, "intervals add up: {a} + {b} vs {c}");
    assert_eq!(e3.elapsed_ms(&e1).unwrap(), -c);
}

#[test]
fn re_recording_moves_the_event_to_the_new_point() {
    let s = Stream::new(0, 70);
    let ev = StreamEvent::new();
    ev.record(&s);
    s.synchronize().unwrap();
    assert!(ev.query());
    let release = gate(&s);
    ev.record(&s);
    assert!(!ev.query(), "the new record waits behind the gate");
    drop(release);
    ev.synchronize().unwrap();
    assert!(ev.query());
}

#[test]
fn synchronizing_from_inside_own_work_does_not_deadlock() {
    let s = Stream::new(0, 80);
    let ev = StreamEvent::new();
    let out = Arc::new(Mutex::new(Vec::new()));
    let (s2, ev2, out2) = (s.clone(), ev.clone(), out.clone());
    s.submit("inner", move || {
        out2.lock().push(s2.on_worker());
        // Everything before this work is done; it returns at once.
        out2.lock().push(s2.synchronize().is_ok());
        // `ev` is recorded after this work: waiting would hang, so it fails.
        let e = ev2.synchronize().unwrap_err();
        out2.lock().push(e.code() == Code::FailedPrecondition);
        Ok(())
    });
    ev.record(&s);
    ev.synchronize().unwrap();
    assert_eq!(*out.lock(), vec![true, true, true]);
    assert!(!s.on_worker());
}

/// Signals on `tx` when the thread that created it exits (thread-local
/// destructors run at thread exit, before a join returns).
struct ExitSignal(mpsc::Sender<String>);
impl Drop for ExitSignal {
    fn drop(&mut self) {
        let _ = self.0.send(thread::current().name().unwrap_or("").to_string());
    }
}
thread_local! {
    static EXIT: std::cell::RefCell<Option<ExitSignal>> = const { std::cell::RefCell::new(None) };
}

fn arm_exit_signal(s: &Stream, tx: mpsc::Sender<String>) {
    s.submit("arm", move || {
        EXIT.with(|e| *e.borrow_mut() = Some(ExitSignal(tx)));
        Ok(())
    });
}

#[test]
fn dropping_the_last_handle_drains_and_joins_the_worker() {
    let s = Stream::new(3, 90);
    let (tx, rx) = mpsc::channel();
    arm_exit_signal(&s, tx);
    let done = Arc::new(AtomicUsize::new(0));
    for _ in 0..5 {
        let d = done.clone();
        s.submit("slow", move || {
            thread::sleep(Duration::from_millis(2));
            d.fetch_add(1, Ordering::SeqCst);
            Ok(())
        });
    }
    let clone = s.clone();
    drop(s);
    assert!(rx.try_recv().is_err(), "a clone keeps the stream alive");
    drop(clone);
    // Drop returned: the queue was drained and the worker has exited.
    assert_eq!(done.load(Ordering::SeqCst), 5);
    assert_eq!(rx.try_recv().unwrap(), "ttpu-stream-3-90");
}

#[test]
fn a_worker_whose_own_work_holds_the_last_handle_exits() {
    let s = Stream::new(1, 91);
    let (tx, rx) = mpsc::channel();
    arm_exit_signal(&s, tx);
    let release = gate(&s);
    let me = s.clone();
    s.submit("holds itself", move || {
        me.submit("queued by itself", || Ok(()));
        drop(me);
        Ok(())
    });
    drop(s); // the closure's clone is now the last handle
    drop(release);
    // Liveness, not timing: the worker must exit on its own.
    assert_eq!(rx.recv_timeout(Duration::from_secs(60)).unwrap(), "ttpu-stream-1-91");
}

#[test]
fn registry_defaults_created_streams_and_current_per_thread() {
    let reg = Streams::new(2, 0);
    let d0 = reg.default_stream(0);
    assert_eq!((d0.device(), d0.id()), (0, 0));
    assert_eq!(reg.default_stream(0), d0);
    assert_ne!(reg.default_stream(1), d0);
    let (a, b) = (reg.create(0), reg.create(1));
    assert_eq!((a.device(), a.id(), b.device(), b.id()), (0, 1, 1, 2));
    assert_eq!(reg.current(0), d0);

    reg.set_current(Some(&a));
    assert_eq!(reg.current(0), a);
    assert_eq!(reg.current(1), reg.default_stream(1), "other devices keep their default");
    reg.set_current(Some(&b));
    assert_eq!(reg.current(1), b);
    thread::scope(|sc| {
        sc.spawn(|| {
            assert_eq!(reg.current(0), d0, "another thread sees the default");
        });
    });
    reg.set_current(None);
    assert_eq!(reg.current(0), d0);
    assert_eq!(reg.current(1), reg.default_stream(1));
}

#[test]
fn synchronize_all_waits_for_every_stream_and_reports_the_first_error() {
    let reg = Streams::new(2, 0);
    let created = reg.create(1);
    let ran = Arc::new(AtomicUsize::new(0));
    for s in [reg.default_stream(0), created.clone()] {
        let r = ran.clone();
        s.submit("slow", move || {
            thread::sleep(Duration::from_millis(5));
            r.fetch_add(1, Ordering::SeqCst);
            Ok(())
        });
    }
    created.submit("aten::bad", || Err(Error::Internal("device fault".into())));
    let e = reg.synchronize_all().unwrap_err();
    assert_eq!(e.to_string(), "aten::bad: internal error: device fault");
    assert_eq!(ran.load(Ordering::SeqCst), 2);
    reg.synchronize_all().unwrap();
}

// ------------------------------------------------------------ with a device

#[test]
fn ops_launched_from_a_stream_track_device_completion() {
    let rt = common::rt();
    let s = rt.streams().current(0);
    let out = Arc::new(Mutex::new(None));
    let x = common::f32s(&rt, &[1.0, 2.0, 3.0], &[3]);
    let (rt2, out2) = (rt.clone(), out.clone());
    s.submit("aten::add", move || {
        let y = rt2.call("aten::add.Tensor", &[Value::from(&x), Value::from(&x)])?.remove(0).into_tensor()?;
        // Register the device work this launch produced with the stream.
        let ready = y.storage().buffer().expect("strict mode: materialized").ready_event()?;
        assert!(track_current(ready).is_ok(), "inside stream work");
        *out2.lock() = Some(y);
        Ok(())
    });
    let ev = StreamEvent::new();
    ev.record(&s);
    ev.synchronize().unwrap();
    assert!(s.query());
    let y = out.lock().take().unwrap();
    assert_eq!(common::host_f32(&rt, &y), vec![2.0, 4.0, 6.0]);

    // Outside stream work the event is handed back.
    let ready = y.storage().buffer().expect("strict mode: materialized").ready_event().unwrap();
    assert!(track_current(ready).is_err());
}

#[test]
fn runtime_synchronize_reports_stream_errors() {
    let rt = common::rt();
    let s = rt.streams().create(0);
    s.submit("aten::mm", || Err(Error::op("aten::mm", "inner dims 2 and 3 differ")));
    let e = rt.synchronize().unwrap_err();
    assert_eq!(e.to_string(), "aten::mm: inner dims 2 and 3 differ");
    rt.synchronize().unwrap();
}
