//! A bounded map, least recently used first out: the memory tier's loaded
//! executables, and the strict-mode memo of op signatures in front of it.

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;

/// Entries least recently used first out.
///
/// A hit only stamps the entry with a new tick (one hash lookup, no
/// reordering): strict mode looks its memo up on every op. `order` files each
/// key under the tick it had when it was filed; eviction takes the oldest
/// filing and, if the entry has been used since (its tick is newer), files it
/// again under its current tick instead of evicting it. So the entry evicted
/// is always the least recently used, and the reordering is paid at eviction.
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
        *tick = self.tick;
        Some(value.clone())
    }

    /// Stores `value` and returns how many entries the bound evicted.
    pub fn insert(&mut self, key: K, value: V) -> u64 {
        if self.bound == 0 {
            return 0;
        }
        self.tick += 1;
        // A key already present keeps its filing; it is refiled at eviction.
        if self.map.insert(key.clone(), (value, self.tick)).is_none() {
            self.order.insert(self.tick, key);
        }
        let mut evicted = 0;
        while self.map.len() > self.bound {
            let Some((filed, oldest)) = self.order.pop_first() else { break };
            match self.map.get(&oldest) {
                Some(&(_, used)) if used != filed => {
                    self.order.insert(used, oldest);
                }
                Some(_) => {
                    self.map.remove(&oldest);
                    evicted += 1;
                }
                None => {}
            }
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
        // Re-inserting a key refreshes it; the bound holds through many rounds.
        let mut lru: Lru<u32, u32> = Lru::new(3);
        for round in 0..50u32 {
            lru.insert(round % 5, round);
            assert_eq!(lru.get(&(round % 5)), Some(round));
            assert!(lru.len() <= 3);
        }
        assert!(lru.contains(&4) && lru.contains(&3) && lru.contains(&2) && !lru.contains(&1));
        let mut none: Lru<String, i32> = Lru::new(0);
        assert_eq!(none.insert("a".into(), 1), 0);
        assert_eq!(none.len(), 0);
    }
}
