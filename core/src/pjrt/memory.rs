//! Memory accounting per device: what our own buffers hold, and what the
//! plugin reports about the device's memory.
//!
//! The accounting counts every [`super::Buffer`] while it lives, at the
//! logical size of its contents (elements times element size). That is what
//! tensors hold, not what the device spends on them: a plugin may pad or tile
//! a buffer, and after a buffer is dropped PJRT may keep its memory until the
//! programs already launched with it finish. Where the plugin can say what
//! the device really spends, [`PjrtMemoryStats`] carries it.

use parking_lot::Mutex;

/// One statistic as PyTorch's allocators keep it (`c10::Stat`): its value
/// now, its peak, and the cumulative increases and decreases.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counter {
    pub current: i64,
    /// The highest `current` since the last [`MemoryStats::reset_peak`].
    pub peak: i64,
    /// Total increases since the last [`MemoryStats::reset_accumulated`].
    pub allocated: i64,
    /// Total decreases since the last [`MemoryStats::reset_accumulated`].
    pub freed: i64,
}

impl Counter {
    // Saturating: these run in `Buffer::drop`, where a panic must not
    // happen, and no real device gets near i64::MAX bytes.
    fn increase(&mut self, n: i64) {
        self.current = self.current.saturating_add(n);
        self.peak = self.peak.max(self.current);
        self.allocated = self.allocated.saturating_add(n);
    }
    fn decrease(&mut self, n: i64) {
        self.current = self.current.saturating_sub(n);
        self.freed = self.freed.saturating_add(n);
    }
}

/// A consistent copy of one device's accounting.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemorySnapshot {
    /// Bytes of live buffers.
    pub bytes: Counter,
    /// Number of live buffers (each is one PJRT allocation).
    pub buffers: Counter,
    /// Buffer creations and launches the plugin refused with
    /// RESOURCE_EXHAUSTED since the last reset of the accumulated counters.
    pub num_ooms: i64,
}

/// The live buffers of one device: their bytes and count, with peaks and
/// cumulative totals.
///
/// Thread-safe. One lock over all counters, so a snapshot is consistent
/// (`bytes.current == bytes.allocated - bytes.freed` plus what was live at
/// the last reset); a buffer takes it once when created and once when
/// dropped, which costs nothing next to the PJRT calls around it.
#[derive(Debug, Default)]
pub struct MemoryStats {
    counters: Mutex<MemorySnapshot>,
}

impl MemoryStats {
    /// Counts a new buffer of `bytes`.
    pub(crate) fn alloc(&self, bytes: usize) {
        let n = i64::try_from(bytes).unwrap_or(i64::MAX);
        let mut c = self.counters.lock();
        c.bytes.increase(n);
        c.buffers.increase(1);
    }
    /// Counts a buffer of `bytes` freed (or donated to a program's output).
    pub(crate) fn free(&self, bytes: usize) {
        let n = i64::try_from(bytes).unwrap_or(i64::MAX);
        let mut c = self.counters.lock();
        c.bytes.decrease(n);
        c.buffers.decrease(1);
    }
    /// Counts an allocation the plugin refused for lack of memory.
    pub(crate) fn record_oom(&self) {
        let mut c = self.counters.lock();
        c.num_ooms = c.num_ooms.saturating_add(1);
    }

    pub fn snapshot(&self) -> MemorySnapshot {
        *self.counters.lock()
    }
    /// Bytes of live buffers.
    pub fn live(&self) -> i64 {
        self.counters.lock().bytes.current
    }
    /// The most bytes live at once since the last [`MemoryStats::reset_peak`].
    pub fn peak(&self) -> i64 {
        self.counters.lock().bytes.peak
    }
    /// Restarts both peaks (bytes and buffers) from what is live now.
    pub fn reset_peak(&self) {
        let mut c = self.counters.lock();
        c.bytes.peak = c.bytes.current;
        c.buffers.peak = c.buffers.current;
    }
    /// Zeroes the cumulative totals (allocated, freed, OOMs), as
    /// `torch.cuda.reset_accumulated_memory_stats` does.
    pub fn reset_accumulated(&self) {
        let c = &mut *self.counters.lock();
        for k in [&mut c.bytes, &mut c.buffers] {
            k.allocated = 0;
            k.freed = 0;
        }
        c.num_ooms = 0;
    }
}

/// What `PJRT_Device_MemoryStats` reports: the plugin's own view of the
/// device's memory, which covers every buffer of the process on it (also
/// those of other clients) and the allocator's padding. `None` where the
/// plugin leaves a field unset.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PjrtMemoryStats {
    pub bytes_in_use: i64,
    pub peak_bytes_in_use: Option<i64>,
    /// The upper limit of user-allocatable device memory.
    pub bytes_limit: Option<i64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_follow_c10_stat() {
        let m = MemoryStats::default();
        m.alloc(100);
        m.alloc(28);
        m.free(100);
        let s = m.snapshot();
        assert_eq!(s.bytes, Counter { current: 28, peak: 128, allocated: 128, freed: 100 });
        assert_eq!(s.buffers, Counter { current: 1, peak: 2, allocated: 2, freed: 1 });
        m.reset_peak();
        m.record_oom();
        let s = m.snapshot();
        assert_eq!((s.bytes.peak, s.buffers.peak, s.num_ooms), (28, 1, 1));
        m.reset_accumulated();
        m.alloc(4);
        let s = m.snapshot();
        assert_eq!(s.bytes, Counter { current: 32, peak: 32, allocated: 4, freed: 0 });
        assert_eq!(s.buffers, Counter { current: 2, peak: 2, allocated: 1, freed: 0 });
        assert_eq!(s.num_ooms, 0);
    }

    #[test]
    fn counters_saturate_instead_of_overflowing() {
        let m = MemoryStats::default();
        m.alloc(usize::MAX);
        m.alloc(1);
        assert_eq!(m.live(), i64::MAX);
    }
}
