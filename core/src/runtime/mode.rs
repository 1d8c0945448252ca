//! Execution modes, selectable per thread and process-wide.
//!
//! Names follow the TorchTPU anchor. The process default comes from
//! `TORCHTPU_EAGER_MODE` (a mode name) or `TORCHTPU_LAUNCH_BLOCKING=1`, and a
//! thread may override it.

use std::cell::Cell;
use std::sync::atomic::{AtomicI32, Ordering};

use crate::error::Result;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum ExecMode {
    /// Strict eager: each op is compiled once per signature, cached, and
    /// launched asynchronously.
    DeferNever = 0,
    /// As strict, but waits for every op so errors surface where they happen.
    DeferNeverAndLaunchBlocking = 1,
    /// Fused eager: ops are recorded and flushed as one program.
    DeferAndFuse = 2,
}

impl ExecMode {
    pub fn from_i32(v: i32) -> Option<ExecMode> {
        match v {
            0 => Some(ExecMode::DeferNever),
            1 => Some(ExecMode::DeferNeverAndLaunchBlocking),
            2 => Some(ExecMode::DeferAndFuse),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            ExecMode::DeferNever => "DEFER_NEVER",
            ExecMode::DeferNeverAndLaunchBlocking => "DEFER_NEVER_AND_LAUNCH_BLOCKING",
            ExecMode::DeferAndFuse => "DEFER_AND_FUSE",
        }
    }

    pub fn parse(s: &str) -> Option<ExecMode> {
        [ExecMode::DeferNever, ExecMode::DeferNeverAndLaunchBlocking, ExecMode::DeferAndFuse]
            .into_iter()
            .find(|m| m.name().eq_ignore_ascii_case(s.trim()))
    }

    /// Every mode is available; kept as the one place a build could refuse one.
    fn check_supported(self) -> Result<ExecMode> {
        Ok(self)
    }
}

const UNSET: i32 = -1;
static GLOBAL: AtomicI32 = AtomicI32::new(UNSET);

thread_local! {
    static THREAD: Cell<Option<ExecMode>> = const { Cell::new(None) };
}

fn env_default() -> ExecMode {
    if std::env::var("TORCHTPU_LAUNCH_BLOCKING").is_ok_and(|v| v == "1") {
        return ExecMode::DeferNeverAndLaunchBlocking;
    }
    match std::env::var("TORCHTPU_EAGER_MODE") {
        Ok(v) => match ExecMode::parse(&v).and_then(|m| m.check_supported().ok()) {
            Some(m) => m,
            None => {
                tracing::warn!("TORCHTPU_EAGER_MODE={v:?} is not a supported mode; using DEFER_NEVER");
                ExecMode::DeferNever
            }
        },
        Err(_) => ExecMode::DeferNever,
    }
}

/// The process-wide mode.
pub fn global_mode() -> ExecMode {
    match GLOBAL.load(Ordering::Relaxed) {
        UNSET => {
            let m = env_default();
            let _ = GLOBAL.compare_exchange(UNSET, m as i32, Ordering::Relaxed, Ordering::Relaxed);
            ExecMode::from_i32(GLOBAL.load(Ordering::Relaxed)).unwrap()
        }
        v => ExecMode::from_i32(v).unwrap(),
    }
}

pub fn set_global_mode(mode: ExecMode) -> Result<()> {
    GLOBAL.store(mode.check_supported()? as i32, Ordering::Relaxed);
    Ok(())
}

/// Overrides the mode for the calling thread; `None` follows the process mode.
pub fn set_thread_mode(mode: Option<ExecMode>) -> Result<()> {
    if let Some(m) = mode {
        m.check_supported()?;
    }
    THREAD.with(|t| t.set(mode));
    Ok(())
}

pub fn thread_mode() -> Option<ExecMode> {
    THREAD.with(|t| t.get())
}

/// The mode in effect on this thread.
pub fn current_mode() -> ExecMode {
    thread_mode().unwrap_or_else(global_mode)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_overrides_global() {
        let before = global_mode();
        set_thread_mode(Some(ExecMode::DeferNeverAndLaunchBlocking)).unwrap();
        assert_eq!(current_mode(), ExecMode::DeferNeverAndLaunchBlocking);
        std::thread::spawn(move || assert_eq!(current_mode(), before)).join().unwrap();
        set_thread_mode(None).unwrap();
        assert_eq!(current_mode(), before);
        assert_eq!(ExecMode::parse("defer_never"), Some(ExecMode::DeferNever));
    }
}
