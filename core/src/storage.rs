//! Storage: a mutable cell holding the current value of a device buffer.
//!
//! A value is immutable. Writing through any view computes a new value
//! functionally and rebinds the cell, so every alias of the storage sees the
//! write while every program stays functional (see ARCHITECTURE.md, "Data
//! model").

use std::sync::Arc;

use parking_lot::Mutex;

use crate::dtype::DType;
use crate::pjrt::Buffer;

/// The current contents of a storage.
#[derive(Clone, Debug)]
pub enum StorageValue {
    /// A materialized PJRT buffer: rank 1, `numel` elements of `dtype`.
    Buffer(Arc<Buffer>),
    /// Not computed yet: output `out` of node `node` of the fused recording
    /// `recording` (see [`crate::graph`]).
    Pending { recording: u64, node: u32, out: u32 },
}

/// Flat, typed device memory shared by all views of it.
///
/// Thread-safe: the cell is behind a mutex, so concurrent readers and writers
/// never observe a torn value (the ordering of racing writes is, as in
/// PyTorch, up to the caller).
pub struct Storage {
    /// The runtime that made it ([`crate::Runtime::id`]): a storage's buffer
    /// belongs to that runtime's PJRT client, and its pending value to that
    /// runtime's recording, so no other runtime may use it.
    owner: u64,
    device: usize,
    dtype: DType,
    numel: i64,
    /// Elements the tensor it was made for uses, when the storage was made
    /// with room to grow ([`Storage::grown`]); `None` otherwise.
    used: Option<i64>,
    value: Mutex<StorageValue>,
}

impl std::fmt::Debug for Storage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Storage({} x {}, device {}, runtime #{})", self.numel, self.dtype, self.device, self.owner)
    }
}

impl Storage {
    pub fn new(owner: u64, device: usize, dtype: DType, numel: i64, value: StorageValue) -> Arc<Storage> {
        Arc::new(Storage { owner, device, dtype, numel, used: None, value: Mutex::new(value) })
    }

    /// A storage of `numel` elements (a shape bucket) made for a tensor
    /// that uses its first `used`, and that grows from call to call (see
    /// [`crate::runtime`]'s `grow`): small views of it read at runtime
    /// strides, so they compile once per bucket, not once per size.
    pub fn grown(owner: u64, device: usize, dtype: DType, numel: i64, used: i64, value: StorageValue) -> Arc<Storage> {
        Arc::new(Storage { owner, device, dtype, numel, used: Some(used), value: Mutex::new(value) })
    }

    /// The elements its tensor uses, if it was made with room to grow.
    pub fn used(&self) -> Option<i64> {
        self.used
    }

    /// The id of the runtime that made this storage.
    pub fn owner(&self) -> u64 {
        self.owner
    }

    pub fn device(&self) -> usize {
        self.device
    }
    pub fn dtype(&self) -> DType {
        self.dtype
    }
    pub fn numel(&self) -> i64 {
        self.numel
    }
    pub fn nbytes(&self) -> usize {
        self.numel as usize * self.dtype.size()
    }

    pub fn value(&self) -> StorageValue {
        self.value.lock().clone()
    }

    /// The materialized buffer, or `None` while the value is pending (the
    /// runtime's `materialize` flushes it).
    pub fn buffer(&self) -> Option<Arc<Buffer>> {
        match &*self.value.lock() {
            StorageValue::Buffer(b) => Some(b.clone()),
            StorageValue::Pending { .. } => None,
        }
    }

    /// Rebinds the cell to `new` only if it still holds the pending value
    /// `expected` (a later write wins over a flush that computed an older
    /// value).
    pub fn resolve(&self, recording: u64, node: u32, out: u32, new: StorageValue) -> bool {
        let mut v = self.value.lock();
        match &*v {
            StorageValue::Pending { recording: r, node: n, out: o } if (*r, *n, *o) == (recording, node, out) => {
                *v = new;
                true
            }
            _ => false,
        }
    }

    /// Rebinds the cell to a new value (the result of a write).
    pub fn set(&self, value: StorageValue) {
        *self.value.lock() = value;
    }
}
