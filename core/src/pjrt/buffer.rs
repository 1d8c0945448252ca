//! Device buffers.

use std::sync::Arc;

use super::{args, sys, Client, Event};
use crate::error::Result;

/// The PJRT element types the runtime uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ElementType {
    Pred,
    S8,
    S16,
    S32,
    S64,
    U8,
    U32,
    U64,
    F16,
    BF16,
    F32,
    F64,
    C64,
    C128,
}

impl ElementType {
    pub fn byte_size(self) -> usize {
        use ElementType::*;
        match self {
            Pred | S8 | U8 => 1,
            S16 | F16 | BF16 => 2,
            S32 | U32 | F32 => 4,
            S64 | U64 | F64 | C64 => 8,
            C128 => 16,
        }
    }

    pub(crate) fn raw(self) -> sys::PJRT_Buffer_Type {
        use ElementType::*;
        match self {
            Pred => sys::PJRT_Buffer_Type_PRED,
            S8 => sys::PJRT_Buffer_Type_S8,
            S16 => sys::PJRT_Buffer_Type_S16,
            S32 => sys::PJRT_Buffer_Type_S32,
            S64 => sys::PJRT_Buffer_Type_S64,
            U8 => sys::PJRT_Buffer_Type_U8,
            U32 => sys::PJRT_Buffer_Type_U32,
            U64 => sys::PJRT_Buffer_Type_U64,
            F16 => sys::PJRT_Buffer_Type_F16,
            BF16 => sys::PJRT_Buffer_Type_BF16,
            F32 => sys::PJRT_Buffer_Type_F32,
            F64 => sys::PJRT_Buffer_Type_F64,
            C64 => sys::PJRT_Buffer_Type_C64,
            C128 => sys::PJRT_Buffer_Type_C128,
        }
    }

    pub(crate) fn from_raw(t: sys::PJRT_Buffer_Type) -> Option<ElementType> {
        use ElementType::*;
        Some(match t {
            sys::PJRT_Buffer_Type_PRED => Pred,
            sys::PJRT_Buffer_Type_S8 => S8,
            sys::PJRT_Buffer_Type_S16 => S16,
            sys::PJRT_Buffer_Type_S32 => S32,
            sys::PJRT_Buffer_Type_S64 => S64,
            sys::PJRT_Buffer_Type_U8 => U8,
            sys::PJRT_Buffer_Type_U32 => U32,
            sys::PJRT_Buffer_Type_U64 => U64,
            sys::PJRT_Buffer_Type_F16 => F16,
            sys::PJRT_Buffer_Type_BF16 => BF16,
            sys::PJRT_Buffer_Type_F32 => F32,
            sys::PJRT_Buffer_Type_F64 => F64,
            sys::PJRT_Buffer_Type_C64 => C64,
            sys::PJRT_Buffer_Type_C128 => C128,
            _ => return None,
        })
    }
}

/// An owned PJRT buffer on one device.
///
/// Thread-safe. Dropping it while a launched program still reads it is fine:
/// PJRT frees the memory once pending work is done. Once its client is
/// closed ([`Client::close`]) it is inert: calls fail and dropping it frees
/// nothing.
pub struct Buffer {
    client: Arc<Client>,
    raw: *mut sys::PJRT_Buffer,
    device: usize,
    bytes: usize,
    /// Whether `bytes` still count as live memory (false once donated).
    counted: std::sync::atomic::AtomicBool,
}

// SAFETY: PJRT buffers are thread-safe handles.
unsafe impl Send for Buffer {}
unsafe impl Sync for Buffer {}

impl std::fmt::Debug for Buffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Buffer(device {}, {} bytes)", self.device, self.bytes)
    }
}

impl Buffer {
    /// Takes ownership of `raw`; `bytes` is its size, for memory accounting.
    pub(crate) fn from_raw(client: Arc<Client>, raw: *mut sys::PJRT_Buffer, device: usize, bytes: usize) -> Buffer {
        client.memory(device).alloc(bytes);
        Buffer { client, raw, device, bytes, counted: std::sync::atomic::AtomicBool::new(true) }
    }

    pub fn device(&self) -> usize {
        self.device
    }
    pub fn bytes(&self) -> usize {
        self.bytes
    }
    pub fn client(&self) -> &Arc<Client> {
        &self.client
    }
    pub(crate) fn raw(&self) -> *mut sys::PJRT_Buffer {
        self.raw
    }

    /// Copies the whole buffer into `dst` (dense, row-major) and waits.
    pub fn to_host(&self, dst: &mut [u8]) -> Result<()> {
        let _span = tracing::trace_span!("d2h", bytes = dst.len(), device = self.device).entered();
        let mut _trace = crate::trace::span(crate::trace::Category::Transfer, "device_to_host", Some(self.device));
        _trace.detail(|| crate::trace::bytes(dst.len()));
        if dst.len() != self.bytes {
            return Err(crate::Error::InvalidArgument(format!(
                "device-to-host copy: destination has {} bytes, buffer has {}",
                dst.len(),
                self.bytes
            )));
        }
        // Held through the wait: the client must outlive the transfer.
        let _live = self.client.enter()?;
        let api = self.client.api();
        let mut a = args!(PJRT_Buffer_ToHostBuffer_Args);
        a.src = self.raw;
        a.dst = dst.as_mut_ptr() as *mut _;
        a.dst_size = dst.len();
        api.call("PJRT_Buffer_ToHostBuffer", api.table().PJRT_Buffer_ToHostBuffer, &mut a)?;
        Event::from_raw(api.clone(), a.event).wait()
    }

    /// An event that fires when the buffer's contents are computed (or failed).
    pub fn ready_event(&self) -> Result<Event> {
        let _live = self.client.enter()?;
        let api = self.client.api();
        let mut a = args!(PJRT_Buffer_ReadyEvent_Args);
        a.buffer = self.raw;
        api.call("PJRT_Buffer_ReadyEvent", api.table().PJRT_Buffer_ReadyEvent, &mut a)?;
        Ok(Event::from_raw(api.clone(), a.event))
    }

    /// Copies the buffer to another device of the same client.
    pub fn copy_to_device(&self, device: usize) -> Result<Buffer> {
        let _span = tracing::debug_span!("d2d", bytes = self.bytes, from = self.device, to = device).entered();
        let mut _trace = crate::trace::span(crate::trace::Category::Transfer, "device_to_device", Some(device));
        _trace.detail(|| format!("{} from tpu:{}", crate::trace::bytes(self.bytes), self.device));
        let _live = self.client.enter()?;
        let api = self.client.api();
        let mut a = args!(PJRT_Buffer_CopyToDevice_Args);
        a.buffer = self.raw;
        a.dst_device = self.client.raw_device(device);
        let made = api.call("PJRT_Buffer_CopyToDevice", api.table().PJRT_Buffer_CopyToDevice, &mut a);
        self.client.count_oom(&[device], made)?;
        Ok(Buffer::from_raw(self.client.clone(), a.dst_buffer, device, self.bytes))
    }

    /// Whether PJRT deleted the buffer (it was donated to an execution).
    pub fn is_deleted(&self) -> bool {
        let Ok(_live) = self.client.enter() else { return false };
        let api = self.client.api();
        let mut a = args!(PJRT_Buffer_IsDeleted_Args);
        a.buffer = self.raw;
        api.call("PJRT_Buffer_IsDeleted", api.table().PJRT_Buffer_IsDeleted, &mut a).is_ok() && a.is_deleted
    }

    /// Marks the buffer as donated to an execution (its memory then belongs
    /// to the output and stops counting as this buffer's), or undoes that.
    pub fn set_donated(&self, donated: bool) {
        if self.counted.swap(!donated, std::sync::atomic::Ordering::Relaxed) == donated {
            // Undoing a donation counts as a new allocation rather than
            // taking back the free, so the cumulative totals only grow.
            let m = self.client.memory(self.device);
            if donated {
                m.free(self.bytes);
            } else {
                m.alloc(self.bytes);
            }
        }
    }

    /// The element type PJRT reports.
    pub fn element_type(&self) -> Option<ElementType> {
        let _live = self.client.enter().ok()?;
        let api = self.client.api();
        let mut a = args!(PJRT_Buffer_ElementType_Args);
        a.buffer = self.raw;
        api.call("PJRT_Buffer_ElementType", api.table().PJRT_Buffer_ElementType, &mut a).ok()?;
        ElementType::from_raw(a.type_)
    }

    /// The dimensions PJRT reports.
    pub fn dims(&self) -> Result<Vec<i64>> {
        let _live = self.client.enter()?;
        let api = self.client.api();
        let mut a = args!(PJRT_Buffer_Dimensions_Args);
        a.buffer = self.raw;
        api.call("PJRT_Buffer_Dimensions", api.table().PJRT_Buffer_Dimensions, &mut a)?;
        Ok(unsafe { std::slice::from_raw_parts(a.dims, a.num_dims) }.to_vec())
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        if *self.counted.get_mut() {
            self.client.memory(self.device).free(self.bytes);
        }
        // Destroying it needs its client; once that is closed, the handle
        // must not reach the plugin any more.
        let Ok(_live) = self.client.enter() else { return super::client::orphan(self.raw) };
        let api = self.client.api();
        let mut a = args!(PJRT_Buffer_Destroy_Args);
        a.buffer = self.raw;
        if let Err(e) = api.call("PJRT_Buffer_Destroy", api.table().PJRT_Buffer_Destroy, &mut a) {
            tracing::warn!("{e}");
        }
    }
}
