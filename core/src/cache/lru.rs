//! A bounded map, least recently used first out: the memory tier's loaded
//! executables, and the strict-mode memo of op signatures in front of it.

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;

/// Entries least recently used first out. `order` maps a use tick to its key,
/// so the oldest entry is the first.
pub struct Lru<K, V> {
    pub(crate) bound: usize,
    tick: u64,
    map: HashMap<K, (V, u64)>,
    order: BTreeMap<u64, K>,
}

impl<K: Hash + Eq + Clone, V: Clone> Lru<K, V> {
    /// A bound of 0 stores nothing.
    pub fn new(bound: usize) -> Lru<K, V> {
        Lru { bound, tick: 0, map: HashMap::new(), order: BTreeMap::new() }
    }

    pub fn get<Q>(&mut self, key: &Q) -> Option<V>
    where
        K: std::borrow::Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let (value, tick) = self.map.get_mut(key)?;
        self.tick += 1;
        // Move the key itself to the new tick: a hit allocates nothing.
        if let Some(k) = self.order.remove(tick) {
            self.order.insert(self.tick, k);
        }
        *tick = self.tick;
        Some(value.clone())
    }

    /// Stores `value` and returns how many entries the bound evicted.
    pub fn insert(&mut self, key: K, value: V) -> u64 {
        if self.bound == 0 {
            return 0;
        }
        self.tick += 1;
        if let Some((_, old)) = self.map.insert(key.clone(), (value, self.tick)) {
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

    pub fn contains<Q>(&self, key: &Q) -> bool
    where
        K: std::borrow::Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.map.contains_key(key)
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn clear(&mut self) {
        self.map.clear();
        self.order.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::Lru;

    #[test]
    fn evicts_the_least_recently_used() {
        let mut lru: Lru<String, i32> = Lru::new(2);
        assert_eq!(lru.insert("a".into(), 1), 0);
        assert_eq!(lru.insert("b".into(), 2), 0);
        assert_eq!(lru.get("a"), Some(1)); // "b" is now the oldest
        assert_eq!(lru.insert("c".into(), 3), 1);
        assert!(!lru.contains("b"));
        assert_eq!((lru.get("a"), lru.get("c"), lru.len()), (Some(1), Some(3), 2));
        let mut none: Lru<String, i32> = Lru::new(0);
        assert_eq!(none.insert("a".into(), 1), 0);
        assert_eq!(none.len(), 0);
    }
}
