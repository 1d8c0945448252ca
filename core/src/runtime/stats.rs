//! Counters the runtime keeps about compiling and executing.

use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Debug, Default)]
pub struct Stats {
    pub compiles: AtomicU64,
    pub compile_ns: AtomicU64,
    pub cache_hits: AtomicU64,
    pub cache_misses: AtomicU64,
    pub executions: AtomicU64,
    pub view_ops: AtomicU64,
    /// Ops recorded in fused mode.
    pub recorded_ops: AtomicU64,
    /// Fused programs executed.
    pub fused_programs: AtomicU64,
    /// Collectives launched.
    pub collectives: AtomicU64,
    /// Flushes by [`crate::graph::FlushReason`].
    pub flushes: [AtomicU64; 8],
}

/// A copy of the counters at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StatsSnapshot {
    pub compiles: u64,
    pub compile_ns: u64,
    pub cache_hits: u64,
    pub cache_misses: u64,
    pub executions: u64,
    pub view_ops: u64,
    /// Executables in the op cache.
    pub cached_programs: u64,
    pub recorded_ops: u64,
    pub fused_programs: u64,
    pub collectives: u64,
    /// Flushes by [`crate::graph::FlushReason`] (indexed by its value).
    pub flushes: [u64; 8],
}

impl Stats {
    pub fn bump(c: &AtomicU64) {
        c.fetch_add(1, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> StatsSnapshot {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        StatsSnapshot {
            compiles: g(&self.compiles),
            compile_ns: g(&self.compile_ns),
            cache_hits: g(&self.cache_hits),
            cache_misses: g(&self.cache_misses),
            executions: g(&self.executions),
            view_ops: g(&self.view_ops),
            cached_programs: 0,
            recorded_ops: g(&self.recorded_ops),
            fused_programs: g(&self.fused_programs),
            collectives: g(&self.collectives),
            flushes: std::array::from_fn(|i| g(&self.flushes[i])),
        }
    }
}
