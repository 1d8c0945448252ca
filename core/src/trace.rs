//! The runtime's own trace: timed spans of what it does (ops, recording,
//! flushes, compiles, device execution, transfers, collectives), for a
//! Chrome trace file (`TORCHTPU_TRACE=file.json`, [`write_chrome`]) and for
//! frontends' profilers (the PyTorch extension hands the spans to
//! `torch.profiler`).
//!
//! Off by default, and then a span costs one relaxed atomic load: nothing is
//! allocated, timed or locked. Tracing is on while at least one consumer
//! holds it on ([`start`] / [`stop`] nest), so a Chrome trace for the whole
//! process and a `torch.profiler` session can run at the same time; each
//! reads the spans recorded since its own [`cursor`].
//!
//! Timestamps are nanoseconds since the Unix epoch (the clock PyTorch's
//! profiler uses), taken from a monotonic clock anchored once per process,
//! so spans never go backwards when the wall clock is adjusted.
//!
//! The buffer is bounded ([`CAPACITY`] spans): past it, the oldest spans are
//! dropped and counted ([`dropped`]), never the process's memory.

use std::collections::VecDeque;
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;

use crate::error::{Error, Result};

/// Most spans kept at once (about 100 MiB at worst).
pub const CAPACITY: usize = 1 << 20;

/// What a span is. The Chrome trace's `cat` field; `torch.profiler` rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum Category {
    /// A strict-mode op call on the host: binding, cache lookup, launch.
    Op = 0,
    /// A fused-mode op call: recorded into the pending graph.
    Record = 1,
    /// A pending graph turned into one program and launched.
    Flush = 2,
    /// A StableHLO program compiled by the PJRT plugin.
    Compile = 3,
    /// A program running on a device, from launch to completion.
    Execute = 4,
    /// A copy between host and device or between devices.
    Transfer = 5,
    /// A collective across devices.
    Collective = 6,
}

impl Category {
    pub const ALL: [Category; 7] = [
        Category::Op,
        Category::Record,
        Category::Flush,
        Category::Compile,
        Category::Execute,
        Category::Transfer,
        Category::Collective,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Category::Op => "op",
            Category::Record => "record",
            Category::Flush => "flush",
            Category::Compile => "compile",
            Category::Execute => "execute",
            Category::Transfer => "transfer",
            Category::Collective => "collective",
        }
    }
}

/// One finished span.
#[derive(Debug, Clone)]
pub struct Span {
    pub category: Category,
    /// What ran: an op (`aten::add.Tensor`), a program, a transfer direction.
    pub name: Arc<str>,
    /// Start, in nanoseconds since the Unix epoch.
    pub start_ns: u64,
    pub duration_ns: u64,
    /// The host thread that recorded it (its OS thread id).
    pub thread: u64,
    /// The device it ran on, where it ran on one.
    pub device: Option<usize>,
    /// More about it ("3 ops, host read", "1.2 MiB"), or empty.
    pub detail: String,
}

struct Buffer {
    spans: VecDeque<Span>,
    /// Sequence number of `spans[0]`: cursors stay valid as old spans go.
    first: u64,
    dropped: u64,
}

static ENABLED: AtomicUsize = AtomicUsize::new(0);
static BUFFER: Mutex<Buffer> = Mutex::new(Buffer { spans: VecDeque::new(), first: 0, dropped: 0 });
static THREADS: Mutex<Vec<(u64, String)>> = Mutex::new(Vec::new());

thread_local! {
    /// The OS thread id: what profilers (PyTorch's included) put on a row,
    /// so the runtime's spans nest under the frontend's own on that row.
    static THREAD: u64 = {
        // SAFETY: gettid has no preconditions.
        let id = unsafe { libc::gettid() } as u64;
        let name = std::thread::current().name().map_or_else(|| format!("thread {id}"), str::to_string);
        THREADS.lock().push((id, name));
        id
    };
}

/// Whether spans are being recorded.
#[inline]
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed) != 0
}

/// Turns recording on (nested: on until as many [`stop`]s).
pub fn start() {
    clock();
    ENABLED.fetch_add(1, Ordering::SeqCst);
}

/// Undoes one [`start`]; recording stops when none is left. Extra calls do
/// nothing.
pub fn stop() {
    let _ = ENABLED.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
}

/// The position after the last recorded span: pass it to [`spans_since`].
pub fn cursor() -> u64 {
    let b = BUFFER.lock();
    b.first + b.spans.len() as u64
}

/// The spans recorded from `cursor` on (those still kept), and the cursor
/// after them.
pub fn spans_since(cursor: u64) -> (Vec<Span>, u64) {
    let b = BUFFER.lock();
    let end = b.first + b.spans.len() as u64;
    let skip = cursor.saturating_sub(b.first).min(b.spans.len() as u64) as usize;
    (b.spans.iter().skip(skip).cloned().collect(), end)
}

/// Spans dropped because the buffer was full, since the process started.
pub fn dropped() -> u64 {
    BUFFER.lock().dropped
}

/// Drops every kept span (cursors taken before stay valid).
pub fn clear() {
    let mut b = BUFFER.lock();
    let n = b.spans.len() as u64;
    b.spans.clear();
    b.first += n;
}

/// The process's trace clock: (Unix time, monotonic instant) of one moment.
fn clock() -> &'static (u64, Instant) {
    static CLOCK: OnceLock<(u64, Instant)> = OnceLock::new();
    CLOCK.get_or_init(|| {
        let unix = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
        (unix, Instant::now())
    })
}

/// `t` in nanoseconds since the Unix epoch, on the trace clock.
pub fn unix_ns(t: Instant) -> u64 {
    let (unix, anchor) = *clock();
    match t.checked_duration_since(anchor) {
        Some(d) => unix.saturating_add(d.as_nanos() as u64),
        None => unix.saturating_sub(anchor.duration_since(t).as_nanos() as u64),
    }
}

/// Records a finished span that ran from `start` to `end` (recorded even
/// when tracing was turned off in between: it started while on).
pub fn record(category: Category, name: Arc<str>, start: Instant, end: Instant, device: Option<usize>, detail: String) {
    let span = Span {
        category,
        name,
        start_ns: unix_ns(start),
        duration_ns: end.saturating_duration_since(start).as_nanos() as u64,
        thread: THREAD.with(|t| *t),
        device,
        detail,
    };
    let mut b = BUFFER.lock();
    if b.spans.len() >= CAPACITY {
        b.spans.pop_front();
        b.first += 1;
        b.dropped += 1;
    }
    b.spans.push_back(span);
}

/// A span in progress: recorded when dropped. Inert (and free) when tracing
/// was off at [`span`].
#[must_use = "a span measures until it is dropped"]
pub struct Guard {
    live: Option<(Category, Arc<str>, Instant, Option<usize>, String)>,
}

impl Guard {
    /// Adds what is only known at the end ("3 ops"), if recording.
    pub fn detail(&mut self, f: impl FnOnce() -> String) {
        if let Some(live) = &mut self.live {
            live.4 = f();
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some((category, name, start, device, detail)) = self.live.take() {
            record(category, name, start, Instant::now(), device, detail);
        }
    }
}

/// Starts a span named `name` (the name is copied only when recording).
#[inline]
pub fn span(category: Category, name: &str, device: Option<usize>) -> Guard {
    if !enabled() {
        return Guard { live: None };
    }
    Guard { live: Some((category, Arc::from(name), Instant::now(), device, String::new())) }
}

/// A byte count as a span detail: "512 B", "1.5 KiB", "3.2 MiB".
pub fn bytes(n: usize) -> String {
    match n {
        n if n < 1 << 10 => format!("{n} B"),
        n if n < 1 << 20 => format!("{:.1} KiB", n as f64 / 1024.0),
        n => format!("{:.1} MiB", n as f64 / (1024.0 * 1024.0)),
    }
}

// ------------------------------------------------------------ Chrome trace

/// Chrome's thread id for the device rows, above any OS thread id.
const DEVICE_ROW: u64 = 1 << 32;

/// `spans` as a Chrome trace (the JSON object format `chrome://tracing` and
/// Perfetto read): host spans on their threads' rows, device execution on one
/// row per device.
pub fn chrome_json(spans: &[Span]) -> String {
    let pid = std::process::id();
    let mut events: Vec<serde_json::Value> = Vec::with_capacity(spans.len() + 8);
    let mut devices: Vec<usize> = spans.iter().filter(|s| s.category == Category::Execute).filter_map(|s| s.device).collect();
    devices.sort_unstable();
    devices.dedup();
    for (id, name) in THREADS.lock().iter() {
        events.push(serde_json::json!({"ph": "M", "name": "thread_name", "pid": pid, "tid": id, "args": {"name": name}}));
    }
    for d in devices {
        events.push(serde_json::json!({
            "ph": "M", "name": "thread_name", "pid": pid, "tid": DEVICE_ROW + d as u64, "args": {"name": format!("tpu:{d}")}
        }));
    }
    for s in spans {
        let tid = match (s.category, s.device) {
            (Category::Execute, Some(d)) => DEVICE_ROW + d as u64,
            _ => s.thread,
        };
        let mut args = serde_json::Map::new();
        if let Some(d) = s.device {
            args.insert("device".into(), format!("tpu:{d}").into());
        }
        if !s.detail.is_empty() {
            args.insert("detail".into(), s.detail.clone().into());
        }
        events.push(serde_json::json!({
            "ph": "X",
            "cat": s.category.name(),
            "name": &*s.name,
            "pid": pid,
            "tid": tid,
            "ts": s.start_ns as f64 / 1e3,
            "dur": s.duration_ns as f64 / 1e3,
            "args": args,
        }));
    }
    let dropped = dropped();
    serde_json::json!({
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {"producer": "torchtpu", "dropped_spans": dropped},
    })
    .to_string()
}

/// Writes the spans from `since` on to `path` as a Chrome trace, through a
/// temporary file renamed into place (a reader never sees half a file).
pub fn write_chrome(path: &Path, since: u64) -> Result<usize> {
    let (spans, _) = spans_since(since);
    let text = chrome_json(&spans);
    let io = |e: std::io::Error| Error::InvalidArgument(format!("trace file {}: {e}", path.display()));
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let mut f = std::fs::File::create(&tmp).map_err(io)?;
    f.write_all(text.as_bytes()).map_err(io)?;
    drop(f);
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        io(e)
    })?;
    Ok(spans.len())
}

// ------------------------------------------------------------ TORCHTPU_TRACE

/// The Chrome trace the process writes at shutdown (`TORCHTPU_TRACE`).
static FILE: Mutex<Option<(std::path::PathBuf, u64)>> = Mutex::new(None);

/// Starts the process-wide trace if `TORCHTPU_TRACE` names a file (once per
/// process; the runtime calls this when it starts).
pub fn start_from_env() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        if let Some(path) = std::env::var_os("TORCHTPU_TRACE").filter(|p| !p.is_empty()) {
            let path = std::path::PathBuf::from(path);
            tracing::info!(path = %path.display(), "TORCHTPU_TRACE: tracing the runtime into a Chrome trace");
            *FILE.lock() = Some((path, cursor()));
            start();
            // Also at exit, for programs that never shut their runtime down.
            extern "C" fn at_exit() {
                let _ = std::panic::catch_unwind(|| {
                    if let Err(e) = write_env_file() {
                        eprintln!("torchtpu: TORCHTPU_TRACE: {e}");
                    }
                });
            }
            // SAFETY: registers a plain function that never unwinds.
            unsafe { libc::atexit(at_exit) };
        }
    });
}

/// Writes the `TORCHTPU_TRACE` file with everything since the trace started
/// (the runtime calls this at shutdown; calling it again rewrites the file
/// with the spans recorded since). Nothing when the variable is not set.
pub fn write_env_file() -> Result<()> {
    let Some((path, since)) = FILE.lock().clone() else {
        return Ok(());
    };
    let n = write_chrome(&path, since)?;
    tracing::info!(path = %path.display(), spans = n, "wrote the Chrome trace");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    // One test: the recorder is process-wide, and tests run in parallel.
    #[test]
    fn spans_nest_cursors_and_chrome_json() {
        let before = cursor();
        drop(span(Category::Op, "not recorded", None));
        assert_eq!(spans_since(before).0.len(), 0, "off: nothing is recorded");

        start();
        start();
        stop();
        assert!(enabled(), "start/stop nest");
        {
            let mut g = span(Category::Compile, "aten::add.Tensor", Some(1));
            g.detail(|| "a \"quoted\"\nline".into());
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        let t0 = Instant::now();
        record(Category::Execute, "aten::add.Tensor".into(), t0, t0 + std::time::Duration::from_micros(5), Some(1), String::new());
        stop();
        assert!(!enabled());
        stop(); // an extra stop does nothing
        drop(span(Category::Op, "after stop", None));

        let (spans, end) = spans_since(before);
        let mine: Vec<&Span> = spans.iter().filter(|s| &*s.name == "aten::add.Tensor").collect();
        assert_eq!(mine.len(), 2);
        assert_eq!(mine[0].category, Category::Compile);
        assert!(mine[0].duration_ns >= 2_000_000, "{}", mine[0].duration_ns);
        assert_eq!(mine[1].duration_ns, 5_000);
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos() as u64;
        assert!(mine[0].start_ns <= now && now - mine[0].start_ns < 60_000_000_000, "epoch clock");
        assert!(spans_since(end).0.is_empty());

        let json: serde_json::Value = serde_json::from_str(&chrome_json(&spans)).unwrap();
        let events = json["traceEvents"].as_array().unwrap();
        let x: Vec<&serde_json::Value> = events.iter().filter(|e| e["ph"] == "X" && e["name"] == "aten::add.Tensor").collect();
        assert_eq!(x.len(), 2);
        assert_eq!(x[0]["cat"], "compile");
        assert_eq!(x[0]["args"]["detail"], "a \"quoted\"\nline");
        assert_eq!(x[1]["dur"].as_f64().unwrap(), 5.0);
        assert_eq!(x[1]["tid"].as_u64().unwrap(), DEVICE_ROW + 1, "execution goes on the device row");
        assert!(events.iter().any(|e| e["ph"] == "M" && e["args"]["name"] == "tpu:1"));
    }
}
