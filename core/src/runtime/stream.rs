//! Streams and events, as CUDA has them.
//!
//! A [`Stream`] is an ordered queue of host-side work (typically: launch one
//! program) served by one worker thread, fed through a `crossbeam` channel.
//! PJRT executes asynchronously, so a launch returns before the device is
//! done; work registers the completion [`Event`]s of what it launched with
//! [`Stream::track`] (or [`track_current`]), and whatever must wait for the
//! device — a [`StreamEvent`] record, [`Stream::synchronize`] — waits for
//! those too.
//!
//! A [`StreamEvent`] marks a point on a stream. The host can wait on it, and
//! another stream can wait on it ([`Stream::wait_event`]), which orders work
//! across streams without blocking the host.
//!
//! Errors from asynchronous work are not lost: a stream remembers the first
//! one (attributed to the label of the work that hit it, usually the op name)
//! and reports it at the next [`Stream::synchronize`]; every event recorded
//! in between carries a copy, so waiting on it reports the error too. Later
//! work keeps running, as it does on a GPU.
//!
//! [`Streams`] is a runtime's registry: a lazily created default stream per
//! device, streams created on demand, and a per-thread current stream.
//!
//! Deadlocks: a record completes only after the work before it, and a wait
//! only names a record made earlier, so streams waiting on each other's
//! events cannot form a cycle. What can still hang is work that blocks on a
//! *later* point of its own stream; [`StreamEvent::synchronize`] refuses that
//! case with an error, and [`Stream::synchronize`] from inside the stream's
//! own work waits only for what was launched before it.
//!
//! Shutdown: [`Streams::shutdown`] stops every worker once the work queued
//! before it has run, and joins them, so that no worker is left running
//! while the process exits. Afterwards the streams still exist as handles,
//! but work sent to them fails (the error surfaces at their next
//! synchronize), and new streams get no worker.

use std::cell::RefCell;
use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::thread::{self, JoinHandle, ThreadId};
use std::time::{Duration, Instant};

use crossbeam_channel::{unbounded, Sender};
use parking_lot::{Condvar, Mutex};

use crate::error::{Error, Result};
use crate::pjrt::Event;

/// Tracked completion events kept before the ready ones are collected, so a
/// stream that is never synchronized does not grow without bound.
const TRACKED_LIMIT: usize = 256;

/// Process-wide identity of a stream, used to recognize its worker thread and
/// its own records (ids are per registry and may repeat).
static NEXT_KEY: AtomicU64 = AtomicU64::new(1);

type Work = Box<dyn FnOnce() -> Result<()> + Send + 'static>;

enum Msg {
    Work { label: Arc<str>, work: Work },
    /// Blocks the worker until another stream's record point completes.
    Wait(Arc<Point>),
    /// Completes `point` once the device work tracked so far is done.
    /// `take_error` hands the stream's pending error to the point (a
    /// synchronize reports it once); otherwise the point gets a copy.
    Record { point: Arc<Point>, take_error: bool },
    /// Ends the worker after the work before it, completing `done` last.
    Stop { done: Arc<Point> },
}

/// What a stream's handles and its worker share. The worker holds this, never
/// the sender, so dropping the last [`Stream`] disconnects the channel.
struct Shared {
    key: u64,
    device: usize,
    id: u64,
    /// The id of the runtime whose registry made the stream (0: none).
    owner: u64,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Messages sent and messages the worker has finished; equal when idle.
    submitted: u64,
    finished: u64,
    /// Device work launched by this stream's work, with the launching label.
    tracked: Vec<(Arc<str>, Event)>,
    /// The first error since the last synchronize.
    error: Option<Error>,
    /// Set once the worker was asked to stop (a shutdown or destroy of the
    /// runtime), or for a stream made without one: nothing sent runs.
    stopped: bool,
}

impl Shared {
    /// Waits for every tracked device event and folds their first error into
    /// the pending one. Runs on the worker (or inside its work), so the events
    /// of later work cannot be among them.
    fn drain_tracked(&self) {
        let events = std::mem::take(&mut self.state.lock().tracked);
        let mut first = None;
        for (label, e) in events {
            if let Err(err) = e.wait() {
                first.get_or_insert(err.in_op(&label));
            }
        }
        if let Some(err) = first {
            self.state.lock().error.get_or_insert(err);
        }
    }

    fn track(&self, label: Arc<str>, event: Event) {
        let mut s = self.state.lock();
        s.tracked.push((label, event));
        if s.tracked.len() >= TRACKED_LIMIT {
            let events = std::mem::take(&mut s.tracked);
            for (label, e) in events {
                if e.is_ready().unwrap_or(true) {
                    if let Err(err) = e.wait() {
                        s.error.get_or_insert(err.in_op(&label));
                    }
                } else {
                    s.tracked.push((label, e));
                }
            }
        }
    }
}

/// A point recorded on a stream: completed, with a host timestamp and the
/// stream's pending error, once the work before it is done.
struct Point {
    stream: u64,
    /// The recording stream's runtime (its `Shared::owner`).
    owner: u64,
    state: Mutex<PointState>,
    done: Condvar,
}

#[derive(Default)]
struct PointState {
    completed_at: Option<Instant>,
    error: Option<Error>,
}

impl Point {
    fn new(stream: u64, owner: u64) -> Arc<Point> {
        Arc::new(Point { stream, owner, state: Mutex::new(PointState::default()), done: Condvar::new() })
    }

    fn complete(&self, error: Option<Error>) {
        let mut s = self.state.lock();
        s.completed_at = Some(Instant::now());
        s.error = error;
        self.done.notify_all();
    }

    /// Blocks until complete; returns a copy of the error it carries.
    fn wait(&self) -> Result<()> {
        let mut s = self.state.lock();
        while s.completed_at.is_none() {
            self.done.wait(&mut s);
        }
        s.error.clone().map_or(Ok(()), Err)
    }

    /// Blocks until complete or until `deadline`; whether it completed.
    fn wait_until(&self, deadline: Instant) -> bool {
        let mut s = self.state.lock();
        while s.completed_at.is_none() {
            if self.done.wait_until(&mut s, deadline).timed_out() {
                return s.completed_at.is_some();
            }
        }
        true
    }

    fn completed_at(&self) -> Option<Instant> {
        self.state.lock().completed_at
    }
}

/// What the calling thread is doing, when it is a stream's worker.
struct WorkerCtx {
    shared: Arc<Shared>,
    /// The label of the work running now.
    label: Option<Arc<str>>,
}

thread_local! {
    static WORKER: RefCell<Option<WorkerCtx>> = const { RefCell::new(None) };
}

/// The key of the stream whose worker is the calling thread.
fn worker_key() -> Option<u64> {
    WORKER.with(|w| w.borrow().as_ref().map(|c| c.shared.key))
}

/// Tracks `event` on the stream whose worker is running the calling thread,
/// attributed to the work running now. Gives the event back when the caller is
/// not inside stream work, so launch code can fall back to its own tracking.
pub fn track_current(event: Event) -> std::result::Result<(), Event> {
    let ctx = WORKER.with(|w| w.borrow().as_ref().map(|c| (c.shared.clone(), c.label.clone())));
    match ctx {
        Some((shared, label)) => {
            let label = label.unwrap_or_else(|| Arc::from("stream work"));
            shared.track(label, event);
            Ok(())
        }
        None => Err(event),
    }
}

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

fn run_worker(shared: Arc<Shared>, rx: crossbeam_channel::Receiver<Msg>) {
    WORKER.with(|w| *w.borrow_mut() = Some(WorkerCtx { shared: shared.clone(), label: None }));
    let set_label = |l: Option<Arc<str>>| WORKER.with(|w| w.borrow_mut().as_mut().unwrap().label = l);
    // `recv` blocks; it fails only once every sender is gone *and* the queue is
    // empty, so dropping the last handle drains the stream before we exit.
    while let Ok(msg) = rx.recv() {
        match msg {
            Msg::Work { label, work } => {
                set_label(Some(label.clone()));
                // The closure (and whatever it captured, possibly a clone of
                // this very stream) is dropped inside the call, on this thread.
                let r = catch_unwind(AssertUnwindSafe(work));
                set_label(None);
                let err = match r {
                    Ok(Ok(())) => None,
                    Ok(Err(e)) => Some(e.in_op(&label)),
                    Err(p) => Some(Error::InOp {
                        op: label.to_string(),
                        source: Box::new(Error::Internal(format!("panicked: {}", panic_message(&*p)))),
                    }),
                };
                let mut s = shared.state.lock();
                if let Some(e) = err {
                    s.error.get_or_insert(e);
                }
                s.finished += 1;
            }
            Msg::Wait(point) => {
                // Errors stay with the stream that hit them; a waiter only
                // inherits the ordering.
                let _ = point.wait();
                shared.state.lock().finished += 1;
            }
            Msg::Record { point, take_error } => {
                shared.drain_tracked();
                let err = {
                    let mut s = shared.state.lock();
                    // Counted before the point completes, so a query right
                    // after a synchronize sees the stream idle.
                    s.finished += 1;
                    if take_error {
                        s.error.take()
                    } else {
                        s.error.clone()
                    }
                };
                point.complete(err);
            }
            Msg::Stop { done } => {
                shared.state.lock().finished += 1;
                done.complete(None);
                break;
            }
        }
    }
    WORKER.with(|w| *w.borrow_mut() = None);
}

/// Owns the sender and the worker; dropped with the last [`Stream`] clone.
struct Inner {
    shared: Arc<Shared>,
    /// None for a stream made after its registry shut down: it has no worker.
    tx: Option<Sender<Msg>>,
    /// Taken by whoever joins the worker: the last handle, or a shutdown.
    worker: Mutex<Option<JoinHandle<()>>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Disconnecting lets the worker drain what is queued and exit.
        drop(self.tx.take());
        if let Some(h) = self.worker.get_mut().take() {
            // The last handle may die inside the stream's own work (a closure
            // that captured a clone). Joining ourselves would deadlock; the
            // worker exits on its own once it returns to `recv`.
            if h.thread().id() != thread::current().id() {
                let _ = h.join();
            }
        }
    }
}

/// An ordered queue of host-side work served by one worker thread fed through
/// a crossbeam channel.
///
/// Thread-safe: any thread may submit, and cloning shares the stream. Dropping
/// the last clone runs what is queued, then joins the worker.
#[derive(Clone)]
pub struct Stream {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Stream(device {}, id {})", self.device(), self.id())
    }
}

impl PartialEq for Stream {
    fn eq(&self, other: &Stream) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}
impl Eq for Stream {}

impl Stream {
    /// A stream of no runtime: spawns the worker, named
    /// `ttpu-stream-<device>-<id>`.
    ///
    /// Panics if the OS refuses to create a thread.
    pub fn new(device: usize, id: u64) -> Stream {
        Stream::spawn(device, id, 0)
    }

    /// A stream of runtime `owner` (see [`Streams`]), with its worker.
    fn spawn(device: usize, id: u64, owner: u64) -> Stream {
        let shared = Arc::new(Shared {
            key: NEXT_KEY.fetch_add(1, Ordering::Relaxed),
            device,
            id,
            owner,
            state: Mutex::new(State::default()),
        });
        let (tx, rx) = unbounded();
        let worker = thread::Builder::new()
            .name(format!("ttpu-stream-{device}-{id}"))
            .spawn({
                let shared = shared.clone();
                move || run_worker(shared, rx)
            })
            .expect("spawning a stream worker thread");
        Stream { inner: Arc::new(Inner { shared, tx: Some(tx), worker: Mutex::new(Some(worker)) }) }
    }

    /// A stream without a worker, for a registry that was shut down: work
    /// sent to it fails, and its synchronize reports that.
    fn stopped(device: usize, id: u64, owner: u64) -> Stream {
        let shared = Arc::new(Shared {
            key: NEXT_KEY.fetch_add(1, Ordering::Relaxed),
            device,
            id,
            owner,
            state: Mutex::new(State::default()),
        });
        shared.state.lock().stopped = true;
        Stream { inner: Arc::new(Inner { shared, tx: None, worker: Mutex::new(None) }) }
    }

    pub fn device(&self) -> usize {
        self.inner.shared.device
    }

    pub fn id(&self) -> u64 {
        self.inner.shared.id
    }

    /// The id of the runtime the stream belongs to (0 for a stream of none).
    pub fn owner(&self) -> u64 {
        self.inner.shared.owner
    }

    /// Whether the calling thread is this stream's worker (inside its work).
    pub fn on_worker(&self) -> bool {
        worker_key() == Some(self.inner.shared.key)
    }

    fn send(&self, msg: Msg) {
        self.inner.shared.state.lock().submitted += 1;
        // While a handle lives, the worker stops only at a shutdown; after
        // one, nothing sent runs, and no record may be left hanging.
        let unsent = match &self.inner.tx {
            Some(tx) => tx.send(msg).err().map(|e| e.into_inner()),
            None => Some(msg),
        };
        let Some(msg) = unsent else { return };
        let err = self.stopped_error();
        self.inner.shared.state.lock().finished += 1;
        match msg {
            Msg::Record { point, .. } => point.complete(Some(err)),
            // Already stopped: what a stop waits for has happened.
            Msg::Stop { done } => done.complete(None),
            // The unrun work is dropped after the lock is released: it may
            // hold handles whose drop takes it.
            Msg::Work { .. } | Msg::Wait(_) => {
                self.inner.shared.state.lock().error.get_or_insert(err);
            }
        }
    }

    fn stopped_error(&self) -> Error {
        Error::FailedPrecondition(format!("{self:?}: its runtime was shut down or destroyed, so the stream runs no more work"))
    }

    /// Fails with FAILED_PRECONDITION once the stream's runtime was shut
    /// down or destroyed: for the calls that would otherwise quietly do
    /// nothing (query, record, wait), as synchronize and submitted work fail.
    pub fn check_running(&self) -> Result<()> {
        if self.inner.shared.state.lock().stopped {
            return Err(self.stopped_error());
        }
        Ok(())
    }

    /// Asks the worker to exit after the work queued so far (see
    /// [`Stream::join_stopped`]).
    fn request_stop(&self) -> Arc<Point> {
        self.inner.shared.state.lock().stopped = true;
        let done = Point::new(self.inner.shared.key, self.inner.shared.owner);
        self.send(Msg::Stop { done: done.clone() });
        done
    }

    /// Joins the worker once `done` (from [`Stream::request_stop`]) has
    /// completed, waiting until `deadline` at most; whether it was joined. A
    /// worker still busy at the deadline is left to run (detached when the
    /// last handle goes).
    fn join_stopped(&self, done: &Point, deadline: Instant) -> bool {
        if self.on_worker() || !done.wait_until(deadline) {
            return false;
        }
        if let Some(h) = self.inner.worker.lock().take() {
            // Past `done` the worker only returns.
            let _ = h.join();
        }
        true
    }

    /// Runs `work` on the worker after everything submitted before it (and
    /// after any event waited on before it). If `work` fails or panics, the
    /// error, attributed to `label` (e.g. the op name), is kept until the next
    /// [`synchronize`](Self::synchronize) reports it; later work still runs.
    pub fn submit(&self, label: impl Into<String>, work: impl FnOnce() -> Result<()> + Send + 'static) {
        let label: Arc<str> = Arc::from(label.into());
        self.send(Msg::Work { label, work: Box::new(work) });
    }

    /// Tracks the completion of device work launched by this stream's work,
    /// so records and synchronize wait for the device, not just the launch.
    /// Call it from inside submitted work (or use [`track_current`]); the
    /// event is attributed to the work running now.
    pub fn track(&self, event: Event) {
        let label = WORKER
            .with(|w| w.borrow().as_ref().filter(|c| c.shared.key == self.inner.shared.key).and_then(|c| c.label.clone()))
            .unwrap_or_else(|| Arc::from("stream work"));
        self.inner.shared.track(label, event);
    }

    /// Tracks device work launched for `label` (an op) from any thread: the
    /// runtime's launches, which run on the caller's thread and are ordered
    /// on the device by PJRT's data dependencies. Records and synchronize on
    /// this stream wait for it, and its error surfaces there, naming `label`.
    pub fn track_as(&self, label: &str, event: Event) {
        self.inner.shared.track(Arc::from(label), event);
    }

    /// Makes later work on this stream wait until `event` has completed (its
    /// most recent record as of this call). An event never recorded, or
    /// already complete, imposes nothing. The host does not block. An event
    /// recorded on another runtime's stream is refused (INVALID_ARGUMENT):
    /// the two runtimes' work is not ordered through each other's streams.
    pub fn wait_event(&self, event: &StreamEvent) -> Result<()> {
        if let Some(p) = event.point() {
            if p.owner != self.owner() {
                return Err(Error::InvalidArgument(format!(
                    "wait_event: the event was recorded on a stream of runtime #{}, but {self:?} belongs to runtime #{}",
                    p.owner,
                    self.owner()
                )));
            }
            // A point of this stream is already ordered before later work.
            if p.stream != self.inner.shared.key && p.completed_at().is_none() {
                self.send(Msg::Wait(p));
            }
        }
        Ok(())
    }

    /// Blocks until all work submitted so far, and the device work it tracked,
    /// has completed. Returns, and clears, the first error since the last
    /// synchronize, attributed to its work's label.
    ///
    /// Called from inside this stream's own work, it waits for the device
    /// work tracked so far (everything submitted before is already done).
    pub fn synchronize(&self) -> Result<()> {
        let shared = &self.inner.shared;
        if self.on_worker() {
            shared.drain_tracked();
            return shared.state.lock().error.take().map_or(Ok(()), Err);
        }
        let point = Point::new(shared.key, shared.owner);
        self.send(Msg::Record { point: point.clone(), take_error: true });
        point.wait()
    }

    /// True if the stream is idle: no queued or running work, and all tracked
    /// device work has completed.
    pub fn query(&self) -> bool {
        let s = self.inner.shared.state.lock();
        s.finished == s.submitted && s.tracked.iter().all(|(_, e)| e.is_ready().unwrap_or(true))
    }
}

/// A point recorded on a stream (CUDA's event).
///
/// Thread-safe; clones share the event. Each [`record`](Self::record) makes a
/// new point: waits and queries look at the most recent one.
#[derive(Clone, Default)]
pub struct StreamEvent {
    point: Arc<Mutex<Option<Arc<Point>>>>,
}

impl std::fmt::Debug for StreamEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match self.point() {
            None => "not recorded",
            Some(p) if p.completed_at().is_some() => "complete",
            Some(_) => "pending",
        };
        write!(f, "StreamEvent({state})")
    }
}

impl StreamEvent {
    /// An event not yet recorded: waiting on it returns at once.
    pub fn new() -> StreamEvent {
        StreamEvent::default()
    }

    fn point(&self) -> Option<Arc<Point>> {
        self.point.lock().clone()
    }

    /// Records the event on `stream`: it completes when all work submitted to
    /// `stream` before now (and its tracked device work) completes, carrying
    /// that stream's pending error, if any.
    pub fn record(&self, stream: &Stream) {
        let point = Point::new(stream.inner.shared.key, stream.inner.shared.owner);
        *self.point.lock() = Some(point.clone());
        stream.send(Msg::Record { point, take_error: false });
    }

    /// Blocks the host until the event completes; returns the error it
    /// carries. Fails at once, instead of hanging, when called from inside
    /// work of the recording stream that would have to finish first.
    pub fn synchronize(&self) -> Result<()> {
        let Some(p) = self.point() else { return Ok(()) };
        if p.completed_at().is_none() && worker_key() == Some(p.stream) {
            return Err(Error::FailedPrecondition(
                "event synchronize from inside work of the stream it was recorded on would deadlock: the \
                 record runs after this work"
                    .into(),
            ));
        }
        p.wait()
    }

    /// True if the event completed, or was never recorded.
    pub fn query(&self) -> bool {
        self.point().is_none_or(|p| p.completed_at().is_some())
    }

    /// Milliseconds from this event's completion to `end`'s (negative if
    /// `end` completed first), like CUDA's `Event.elapsed_time`. Both events
    /// must have been recorded and have completed; this does not wait.
    pub fn elapsed_ms(&self, end: &StreamEvent) -> Result<f64> {
        let at = |e: &StreamEvent, which: &str| -> Result<Instant> {
            let p = e.point().ok_or_else(|| {
                Error::InvalidArgument(format!("elapsed_ms: the {which} event was never recorded"))
            })?;
            p.completed_at().ok_or_else(|| {
                Error::FailedPrecondition(format!(
                    "elapsed_ms: the {which} event has not completed yet (synchronize it first)"
                ))
            })
        };
        let (start, stop) = (at(self, "start")?, at(end, "end")?);
        if let (Some(a), Some(b)) = (self.point(), end.point()) {
            if a.owner != b.owner {
                return Err(Error::InvalidArgument(format!(
                    "elapsed_ms: the start event was recorded on a stream of runtime #{}, the end event on one of runtime #{}",
                    a.owner, b.owner
                )));
            }
        }
        let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
        Ok(if stop >= start { ms(stop - start) } else { -ms(start - stop) })
    }
}

/// A runtime's streams: a default stream per device (created on first use),
/// streams created on demand, and a current stream per thread and device.
///
/// Thread-safe. Device indices must be below the count given to
/// [`Streams::new`] (callers check them first); an index out of range panics.
pub struct Streams {
    defaults: Vec<OnceLock<Stream>>,
    /// Created streams, kept weakly so that dropping every handle ends them.
    created: Mutex<Vec<Weak<Inner>>>,
    next_id: AtomicU64,
    /// Per-thread overrides of the current stream. Held here rather than in a
    /// thread-local so that they die with the runtime, not with the thread.
    current: Mutex<HashMap<(ThreadId, usize), Stream>>,
    /// Set by [`Streams::shutdown`]: streams made later get no worker.
    closed: std::sync::atomic::AtomicBool,
    /// The id of the runtime the registry belongs to, given to its streams.
    owner: u64,
}

impl std::fmt::Debug for Streams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Streams({} devices)", self.defaults.len())
    }
}

impl Streams {
    pub fn new(device_count: usize, owner: u64) -> Streams {
        Streams {
            defaults: (0..device_count).map(|_| OnceLock::new()).collect(),
            created: Mutex::new(Vec::new()),
            next_id: AtomicU64::new(1),
            current: Mutex::new(HashMap::new()),
            closed: std::sync::atomic::AtomicBool::new(false),
            owner,
        }
    }

    /// A new stream, with a worker unless the registry was shut down.
    fn make(&self, device: usize, id: u64) -> Stream {
        if self.closed.load(Ordering::Acquire) {
            Stream::stopped(device, id, self.owner)
        } else {
            Stream::spawn(device, id, self.owner)
        }
    }

    pub fn device_count(&self) -> usize {
        self.defaults.len()
    }

    /// The default stream of `device` (id 0), created on first use.
    pub fn default_stream(&self, device: usize) -> Stream {
        self.defaults[device].get_or_init(|| self.make(device, 0)).clone()
    }

    /// A new stream on `device`, with a fresh id (1, 2, ...).
    pub fn create(&self, device: usize) -> Stream {
        assert!(device < self.defaults.len(), "device {device} out of range (have {})", self.defaults.len());
        let mut created = self.created.lock();
        let s = self.make(device, self.next_id.fetch_add(1, Ordering::Relaxed));
        created.retain(|w| w.strong_count() > 0);
        created.push(Arc::downgrade(&s.inner));
        s
    }

    /// The calling thread's current stream on `device`: the one set with
    /// [`set_current`](Self::set_current), else the default.
    pub fn current(&self, device: usize) -> Stream {
        let key = (thread::current().id(), device);
        if let Some(s) = self.current.lock().get(&key) {
            return s.clone();
        }
        self.default_stream(device)
    }

    /// Whether `stream` is one of this registry's (a default or a created
    /// stream): another runtime's stream launches on another PJRT client.
    pub fn owns(&self, stream: &Stream) -> bool {
        self.defaults.iter().any(|d| d.get() == Some(stream))
            || self.created.lock().iter().any(|w| std::ptr::eq(w.as_ptr(), Arc::as_ptr(&stream.inner)))
    }

    /// Makes `stream` the calling thread's current stream on its device;
    /// `None` resets every device to its default for this thread. (A thread
    /// that exits without resetting leaves its entry until the registry is
    /// dropped; thread ids are never reused, so it is never seen again.)
    /// Another registry's (runtime's) stream is refused.
    pub fn set_current(&self, stream: Option<&Stream>) -> Result<()> {
        if let Some(s) = stream.filter(|s| !self.owns(s)) {
            return Err(Error::InvalidArgument(format!(
                "set_current: stream {} of device {} belongs to another runtime",
                s.id(),
                s.device()
            )));
        }
        let me = thread::current().id();
        // Replaced streams are dropped after the lock is released: dropping
        // the last handle joins a worker whose work may call `current`.
        let replaced: Vec<Stream> = {
            let mut cur = self.current.lock();
            match stream {
                Some(s) => cur.insert((me, s.device()), s.clone()).into_iter().collect(),
                None => {
                    let mine: Vec<_> = cur.keys().filter(|(t, _)| *t == me).copied().collect();
                    mine.iter().filter_map(|k| cur.remove(k)).collect()
                }
            }
        };
        drop(replaced);
        Ok(())
    }

    /// Every live stream: defaults, created, and any set current.
    fn all(&self) -> Vec<Stream> {
        let mut all: Vec<Stream> = self.defaults.iter().filter_map(|d| d.get().cloned()).collect();
        all.extend(self.created.lock().iter().filter_map(|w| w.upgrade()).map(|inner| Stream { inner }));
        for s in self.current.lock().values() {
            if !all.contains(s) {
                all.push(s.clone());
            }
        }
        all
    }

    /// Synchronizes every live stream (defaults, created, and any set
    /// current). Returns the first error; every stream's is cleared.
    pub fn synchronize_all(&self) -> Result<()> {
        let all = self.all();
        let mut first = None;
        for s in &all {
            if let Err(e) = s.synchronize() {
                if first.is_some() {
                    tracing::warn!(stream = ?s, "further error at synchronize: {e}");
                }
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }

    /// Stops and joins every stream's worker after the work queued on it,
    /// waiting until `deadline` at most; from now on, work sent to any of
    /// this registry's streams fails and new streams get no worker. Returns
    /// whether every worker was joined (one still busy at the deadline is
    /// left running). Idempotent. Call it from outside stream work: a worker
    /// cannot join itself.
    pub fn shutdown(&self, deadline: Instant) -> bool {
        {
            // Under the lock `create` holds, so no stream it makes escapes.
            let _created = self.created.lock();
            self.closed.store(true, Ordering::Release);
        }
        let all = self.all();
        // All asked first, so that they drain side by side.
        let stops: Vec<Arc<Point>> = all.iter().map(Stream::request_stop).collect();
        let mut joined = true;
        for (s, done) in all.iter().zip(&stops) {
            if !s.join_stopped(done, deadline) {
                tracing::warn!(stream = ?s, "stream worker still busy at shutdown; left running");
                joined = false;
            }
        }
        joined
    }

    /// Whether [`Streams::shutdown`] ran.
    pub fn is_shut_down(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }
}

/// How long until `deadline`, zero once it passed.
pub(crate) fn remaining(deadline: Instant) -> Duration {
    deadline.saturating_duration_since(Instant::now())
}
