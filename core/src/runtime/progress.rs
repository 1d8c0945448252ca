//! Progress lines for long compiles: a compile that has run for
//! [`FIRST_NOTICE`] says so on the log (stderr at the default `warn` level)
//! with what it compiles (the op, or the fused graph and its op count), then
//! again every [`EVERY`], and once more when it ends. A user watching a
//! silent process cannot tell a long compile from a hang.

use std::sync::mpsc;
use std::time::{Duration, Instant};

pub(crate) const FIRST_NOTICE: Duration = Duration::from_secs(2);
pub(crate) const EVERY: Duration = Duration::from_secs(10);

/// Runs `compile`, logging progress while it takes long.
pub(crate) fn watch<T>(what: &str, compile: impl FnOnce() -> T) -> T {
    watch_with(what, FIRST_NOTICE, EVERY, |line| tracing::warn!("{line}"), compile)
}

/// As [`watch`], with the delays and the line's destination given.
fn watch_with<T>(
    what: &str,
    first: Duration,
    every: Duration,
    log: impl Fn(&str) + Send + Sync,
    compile: impl FnOnce() -> T,
) -> T {
    let start = Instant::now();
    let (done, wait) = mpsc::channel::<()>();
    std::thread::scope(|s| {
        let watcher = std::thread::Builder::new().name("torchtpu-compile-progress".into()).spawn_scoped(s, move || {
            let mut delay = first;
            let mut said = false;
            // The sender is dropped when the compile ends: Disconnected.
            while let Err(mpsc::RecvTimeoutError::Timeout) = wait.recv_timeout(delay) {
                said = true;
                log(&format!("still compiling {what}: {:.1} s so far", start.elapsed().as_secs_f64()));
                delay = every;
            }
            if said {
                log(&format!("compiled {what} in {:.1} s", start.elapsed().as_secs_f64()));
            }
        });
        let out = compile();
        drop(done);
        if let Ok(w) = watcher {
            let _ = w.join();
        }
        out
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use parking_lot::Mutex;

    #[test]
    fn a_long_compile_says_so_and_a_short_one_is_silent() {
        let lines = Mutex::new(Vec::new());
        let out = watch_with(
            "fused graph (40 ops)",
            Duration::from_millis(50),
            Duration::from_millis(100),
            |l| lines.lock().push(l.to_string()),
            || {
                std::thread::sleep(Duration::from_millis(220));
                7
            },
        );
        assert_eq!(out, 7);
        let lines = lines.into_inner();
        assert!(lines.len() >= 3, "{lines:?}");
        assert!(lines[0].starts_with("still compiling fused graph (40 ops): "), "{lines:?}");
        assert!(lines.last().unwrap().starts_with("compiled fused graph (40 ops) in "), "{lines:?}");

        let quiet = Mutex::new(Vec::<String>::new());
        watch_with("aten::add", Duration::from_secs(5), EVERY, |l| quiet.lock().push(l.into()), || ());
        assert!(quiet.into_inner().is_empty());
    }
}
