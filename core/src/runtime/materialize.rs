//! Reading a storage's buffer, whatever mode made its value: strict-mode
//! ops, fused-mode recording (inputs pending on another device), host reads
//! and collectives all go through [`Runtime::materialize`], which flushes a
//! pending recording first.

use std::sync::Arc;

use super::Runtime;
use crate::error::{Error, Result};
use crate::graph::FlushReason;
use crate::pjrt::Buffer;
use crate::storage::{Storage, StorageValue};

impl Runtime {
    /// The buffer of a storage, flushing its pending graph if needed.
    pub(crate) fn materialize(self: &Arc<Self>, storage: &Storage, op: &str, reason: FlushReason) -> Result<Arc<Buffer>> {
        loop {
            match storage.value() {
                StorageValue::Buffer(b) => return Ok(b),
                StorageValue::Pending { recording, .. } => {
                    let device = storage.device();
                    if self.recordings[device].lock().id == recording {
                        self.flush_device(device, reason)?;
                        continue;
                    }
                    if let Some(msg) = self.failed.lock().get(&recording) {
                        return Err(Error::op(
                            op,
                            format!("this tensor was never computed: the fused program that computes it failed: {msg}"),
                        ));
                    }
                    // Another thread is flushing that recording: wait for it.
                    drop(self.recordings[device].lock());
                }
            }
        }
    }
}
