//! Device-side checks: out-of-range indices and invalid values are never silent.
//!
//! Indices are device data, so a lowering cannot check them while it prints
//! the program. Instead an op that indexes (embedding, gather, scatter,
//! advanced indexing, `take`, the targets of `nll_loss`, ...) computes, in
//! the same program, the min and max of its index tensor
//! ([`crate::ops::Cx::check_index`]); a program returns all of its checks as
//! one small i64 vector ([`super::call::Out::Checks`]). Nothing waits for it
//! when the op is launched, so ops stay asynchronous.
//!
//! The runtime keeps those vectors with what it needs to word an error, and
//! looks at them at the next host read (`tensor_to_host*`) or
//! `synchronize`, or at once in `DEFER_NEVER_AND_LAUNCH_BLOCKING` mode. The
//! first bad index is reported as [`Error::IndexOutOfRange`] (code
//! `OUT_OF_RANGE`, an `IndexError` in PyTorch), a failed check of values
//! (a negative probability, [`crate::ops::Cx::check_values`]) as an invalid
//! argument; the pending checks are cleared either way, and the runtime
//! stays usable.
//!
//! The list is bounded: past [`PENDING_LIMIT`] programs without a host read,
//! the oldest half is checked then (they finished long ago, so this rarely
//! waits), and a failure among them is kept for the next read.
//!
//! Thread-safe.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::error::{Error, Result};
use crate::ops::{CheckKind, IndexCheck};
use crate::pjrt::Buffer;

/// Programs whose checks may wait for a host read. A loop that never reads
/// keeps at most this many small buffers alive.
pub(crate) const PENDING_LIMIT: usize = 64;

/// What the asynchronous error adds, so the user knows why it surfaced at a
/// read rather than at the op, and what to do about it.
const ASYNC_NOTE: &str = " (checks of indices and values are asynchronous: this was found at the first host read or synchronize \
     after the op, which may be later than the op itself; set TORCHTPU_LAUNCH_BLOCKING=1 to report it at the op, \
     or TORCHTPU_INDEX_CHECKS=0 to turn the checks off)";

const LOOP_NOTE: &str = " (found at the first host read or synchronize after the op; TORCHTPU_LAUNCH_BLOCKING=1 \
     reports it at the op)";

/// One program's check output and how to word its failures.
struct Pending {
    buffer: Arc<Buffer>,
    checks: Arc<[IndexCheck]>,
}

#[derive(Default)]
struct State {
    /// Oldest first.
    pending: VecDeque<Pending>,
    /// The first failure found while trimming the list, for the next read.
    found: Option<Error>,
}

pub(crate) struct IndexChecks {
    enabled: AtomicBool,
    state: Mutex<State>,
}

impl IndexChecks {
    /// On unless `TORCHTPU_INDEX_CHECKS=0`.
    pub(crate) fn from_env() -> IndexChecks {
        let enabled = !std::env::var("TORCHTPU_INDEX_CHECKS").is_ok_and(|v| v.trim() == "0");
        IndexChecks { enabled: AtomicBool::new(enabled), state: Mutex::new(State::default()) }
    }

    pub(crate) fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    /// Later programs are lowered with or without checks; checks already
    /// pending are still reported.
    pub(crate) fn set_enabled(&self, on: bool) {
        self.enabled.store(on, Ordering::Relaxed);
    }

    /// Keeps a launched program's check output until the next host read or
    /// synchronize.
    pub(crate) fn defer(&self, buffer: Arc<Buffer>, checks: Arc<[IndexCheck]>) {
        let oldest: Vec<Pending> = {
            let mut s = self.state.lock();
            s.pending.push_back(Pending { buffer, checks });
            if s.pending.len() <= PENDING_LIMIT {
                return;
            }
            let n = s.pending.len() / 2;
            s.pending.drain(..n).collect()
        };
        // Checked outside the lock: a download may wait for its program.
        if let Err(e) = first_failure(&oldest) {
            self.state.lock().found.get_or_insert(e);
        }
    }

    /// Checks every pending output (oldest first) and clears the list.
    /// Returns the first failure.
    pub(crate) fn resolve(&self) -> Result<()> {
        let (found, mut pending) = {
            let mut s = self.state.lock();
            if s.found.is_none() && s.pending.is_empty() {
                return Ok(());
            }
            (s.found.take(), std::mem::take(&mut s.pending))
        };
        if let Some(e) = found {
            return Err(e);
        }
        first_failure(pending.make_contiguous())
    }

    /// Programs whose checks are pending (for tests of the bound).
    pub(crate) fn pending(&self) -> usize {
        self.state.lock().pending.len()
    }

    /// Checks one program's output now, as launch-blocking mode does: the
    /// error needs no note, since it surfaces at its op.
    pub(crate) fn check_now(buffer: &Buffer, checks: &[IndexCheck]) -> Result<()> {
        match evaluate(buffer, checks) {
            Some((c, bad)) => Err(failure(c, c.describe(bad))),
            None => Ok(()),
        }
    }
}

fn first_failure(pending: &[Pending]) -> Result<()> {
    for p in pending {
        if let Some((c, bad)) = evaluate(&p.buffer, &p.checks) {
            let note = match c.kind {
                // A plugin's loop bound is the sandbox's: it cannot be turned off.
                CheckKind::PluginLoops => LOOP_NOTE,
                _ => ASYNC_NOTE,
            };
            return Err(failure(c, format!("{}{note}", c.describe(bad))));
        }
    }
    Ok(())
}

/// The error of a failed check: an index out of range, or an invalid
/// argument for a check of values (as PyTorch raises for a bad probability).
fn failure(c: &IndexCheck, msg: String) -> Error {
    match c.kind {
        CheckKind::Value => Error::op(&*c.op, msg),
        CheckKind::Index | CheckKind::Target => Error::IndexOutOfRange { op: c.op.to_string(), msg },
        CheckKind::PluginLoops => Error::WasmPlugin {
            plugin: c.op.split("::").next().unwrap_or_default().to_string(),
            op: Some(c.op.to_string()),
            kind: crate::error::PluginFailure::LoopBound,
            message: msg,
        },
    }
}

/// The first failing check of a program's output and the offending value.
fn evaluate<'c>(buffer: &Buffer, checks: &'c [IndexCheck]) -> Option<(&'c IndexCheck, i64)> {
    let mut bytes = vec![0u8; checks.len() * 16];
    if let Err(e) = buffer.to_host(&mut bytes) {
        // The program itself failed: its stream reports that error (naming
        // the op) at the same synchronize; its indices are unknown.
        tracing::debug!(error = %e, "index check output unavailable");
        return None;
    }
    let word = |k: usize| i64::from_ne_bytes(bytes[8 * k..8 * k + 8].try_into().expect("8 bytes"));
    checks.iter().enumerate().find_map(|(k, c)| c.violation(word(2 * k), word(2 * k + 1)).map(|bad| (c, bad)))
}
