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

    /// Runs `f` on a PJRT thread once the event fires (at once if it has),
    /// whatever its outcome; the event stays usable. Best effort: a plugin
    /// without `PJRT_Event_OnReady`, or one that refuses, never runs `f`.
    pub fn on_ready(&self, f: impl FnOnce() + Send + 'static) {
        if self.raw.is_null() {
            f();
            return;
        }
        struct Ctx {
            api: Arc<Api>,
            f: Box<dyn FnOnce() + Send>,
        }
        unsafe extern "C" fn ready(err: *mut sys::PJRT_Error, user: *mut std::ffi::c_void) {
            // SAFETY: `user` is the `Ctx` leaked below, handed over once.
            let ctx = unsafe { Box::from_raw(user as *mut Ctx) };
            // The callback owns the error; the work's error is reported by
            // whoever waits on the event, so this one is only freed.
            let _ = ctx.api.check("PJRT_Event_OnReady callback", err);
            // A panic must not unwind into the plugin's thread.
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(ctx.f));
        }
        let ctx = Box::into_raw(Box::new(Ctx { api: self.api.clone(), f: Box::new(f) }));
        let mut a = args!(PJRT_Event_OnReady_Args);
        a.event = self.raw;
        a.callback = Some(ready);
        a.user_arg = ctx as *mut std::ffi::c_void;
        if self.api.call("PJRT_Event_OnReady", self.api.table().PJRT_Event_OnReady, &mut a).is_err() {
            // Never registered: the context is still ours.
            drop(unsafe { Box::from_raw(ctx) });
        }
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
