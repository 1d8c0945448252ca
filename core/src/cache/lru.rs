//! The memory tier's LRU of loaded executables.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use super::CacheKey;
use crate::pjrt::Executable;

/// The in-memory tier: loaded executables, least recently used first out.
/// `order` maps a use tick to its key, so the oldest entry is the first.
pub(super) struct Lru {
    pub(super) bound: usize,
    tick: u64,
    map: HashMap<CacheKey, (Arc<Executable>, u64)>,
    order: BTreeMap<u64, CacheKey>,
}

impl Lru {
    pub(super) fn new(bound: usize) -> Lru {
        Lru { bound, tick: 0, map: HashMap::new(), order: BTreeMap::new() }
    }

    pub(super) fn get(&mut self, key: &CacheKey) -> Option<Arc<Executable>> {
        let (exe, tick) = self.map.get_mut(key)?;
        self.tick += 1;
        // Move the key itself to the new tick: a hit allocates nothing.
        if let Some(k) = self.order.remove(tick) {
            self.order.insert(self.tick, k);
        }
        *tick = self.tick;
        Some(exe.clone())
    }

    /// Stores `exe` and returns how many entries the bound evicted.
    pub(super) fn insert(&mut self, key: CacheKey, exe: Arc<Executable>) -> u64 {
        if self.bound == 0 {
            return 0;
        }
        self.tick += 1;
        if let Some((_, old)) = self.map.insert(key.clone(), (exe, self.tick)) {
            self.order.remove(&old);
        }
        self.order.insert(self.tick, key);
        let mut evicted = 0;
        while self.map.len() > self.bound {
            let Some((_, oldest)) = self.order.pop_first() else { break };
            self.map.remove(&oldest);
            evicted += 1;
        }
        evicted
    }

    pub(super) fn contains(&self, key: &CacheKey) -> bool {
        self.map.contains_key(key)
    }

    pub(super) fn clear(&mut self) {
        self.map.clear();
        self.order.clear();
    }
}
