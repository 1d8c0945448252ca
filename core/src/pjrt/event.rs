//! Completion events.

use std::sync::Arc;

use super::{args, sys, Api};
use crate::error::Result;

/// An owned PJRT event: completion of a transfer or of a launched program.
///
/// Needs exclusive access; waiting consumes it. Dropping it without waiting is
/// fine and does not cancel the work.
pub struct Event {
    api: Arc<Api>,
    raw: *mut sys::PJRT_Event,
}

// SAFETY: PJRT events may be awaited from any thread.
unsafe impl Send for Event {}

impl Event {
    pub(crate) fn from_raw(api: Arc<Api>, raw: *mut sys::PJRT_Event) -> Event {
        Event { api, raw }
    }

    /// Blocks until the event fires; returns the error of the work it tracks.
    pub fn wait(self) -> Result<()> {
        if self.raw.is_null() {
            return Ok(());
        }
        let _span = tracing::trace_span!("await").entered();
        let mut a = args!(PJRT_Event_Await_Args);
        a.event = self.raw;
        self.api.call("PJRT_Event_Await", self.api.table().PJRT_Event_Await, &mut a)
    }

    pub fn is_ready(&self) -> Result<bool> {
        if self.raw.is_null() {
            return Ok(true);
        }
        let mut a = args!(PJRT_Event_IsReady_Args);
        a.event = self.raw;
        self.api.call("PJRT_Event_IsReady", self.api.table().PJRT_Event_IsReady, &mut a)?;
        Ok(a.is_ready)
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        if self.raw.is_null() {
            return;
        }
        let mut a = args!(PJRT_Event_Destroy_Args);
        a.event = self.raw;
        if let Err(e) = self.api.call("PJRT_Event_Destroy", self.api.table().PJRT_Event_Destroy, &mut a) {
            tracing::warn!("{e}");
        }
    }
}
