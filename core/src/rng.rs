//! Random number generators.
//!
//! Each random op draws a fresh Threefry key, derived from the seed and a call
//! counter with splitmix64, and passes it to `stablehlo.rng_bit_generator` as
//! a runtime argument. Results depend only on the seed and the order of
//! random ops, so they are reproducible, and no program depends on the seed
//! or on which generator a call draws from.
//!
//! A [`Generator`] is a shared handle, as a `torch.Generator` is: every
//! device has a default one (the runtime's), and a frontend can create more
//! and pass one to a random op's `generator` argument, which then draws from
//! it instead of from the device default.
//!
//! Part of the data model (a generator travels as a [`crate::tensor::Value`]
//! argument): the runtime owns the device defaults and feeds the draws.

use std::sync::Arc;

use parking_lot::Mutex;

/// PyTorch's default seed.
pub const DEFAULT_SEED: u64 = 67280421310721;

/// A generator's whole state: its seed and the number of random draws since
/// it was seeded. Plain data; needs exclusive access.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GeneratorState {
    seed: u64,
    calls: u64,
}

impl Default for GeneratorState {
    fn default() -> Self {
        GeneratorState::new(DEFAULT_SEED)
    }
}

fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl GeneratorState {
    /// A state seeded with `seed` that has drawn nothing.
    pub fn new(seed: u64) -> GeneratorState {
        GeneratorState { seed, calls: 0 }
    }

    pub fn seed(&self) -> u64 {
        self.seed
    }

    pub fn manual_seed(&mut self, seed: u64) {
        self.seed = seed;
        self.calls = 0;
    }

    /// `(seed, calls)`, the whole state.
    pub fn state(&self) -> (u64, u64) {
        (self.seed, self.calls)
    }

    pub fn set_state(&mut self, seed: u64, calls: u64) {
        self.seed = seed;
        self.calls = calls;
    }

    /// The next Threefry state `[key, counter]`.
    pub fn next_state(&mut self) -> [u64; 2] {
        let key = splitmix64(self.seed ^ splitmix64(self.calls));
        self.calls += 1;
        [key, 0]
    }
}

/// A random generator of a device: a handle to a shared [`GeneratorState`].
/// Cloning makes another handle to the same generator (draws through either
/// advance both); [`Generator::clone_state`] makes an independent copy.
///
/// Thread-safe: every method takes `&self` and locks the state for the
/// duration of the call only.
///
/// A random op draws from the generator passed to it whatever the op's
/// device (as PyTorch checks only the generator's device type); the state
/// is a pair of integers, and each draw is uploaded to the op's device.
#[derive(Clone)]
pub struct Generator {
    device: usize,
    state: Arc<Mutex<GeneratorState>>,
}

impl std::fmt::Debug for Generator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // No state here: nothing that prints values (cache keys, graph
        // explanations) may depend on it.
        write!(f, "Generator(tpu:{})", self.device)
    }
}

impl Generator {
    /// A new generator for `device`, seeded with `seed`. The device is not
    /// checked here; [`crate::Runtime::new_generator`] checks it.
    pub fn new(device: usize, seed: u64) -> Generator {
        Generator { device, state: Arc::new(Mutex::new(GeneratorState::new(seed))) }
    }

    /// The device this generator belongs to (`torch.Generator.device`).
    pub fn device(&self) -> usize {
        self.device
    }

    /// Seeds the generator and restarts its sequence of draws.
    pub fn manual_seed(&self, seed: u64) {
        self.state.lock().manual_seed(seed);
    }

    /// The seed last set (`torch.Generator.initial_seed`).
    pub fn initial_seed(&self) -> u64 {
        self.state.lock().seed()
    }

    /// The whole state `(seed, calls)` (`get_state`).
    pub fn state(&self) -> (u64, u64) {
        self.state.lock().state()
    }

    /// Restores a state read with [`Generator::state`]: the draws that
    /// follow repeat those that followed it (`set_state`).
    pub fn set_state(&self, seed: u64, calls: u64) {
        self.state.lock().set_state(seed, calls);
    }

    /// A new, independent generator on the same device with a copy of this
    /// one's state (`torch.Generator.clone_state`).
    pub fn clone_state(&self) -> Generator {
        let copy = *self.state.lock();
        Generator { device: self.device, state: Arc::new(Mutex::new(copy)) }
    }

    /// Draws the next Threefry state `[key, counter]`.
    pub fn next_state(&self) -> [u64; 2] {
        self.state.lock().next_state()
    }

    /// Whether `other` is a handle to this same generator.
    pub fn same_as(&self, other: &Generator) -> bool {
        Arc::ptr_eq(&self.state, &other.state)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reproducible_and_distinct() {
        let mut a = GeneratorState::default();
        let mut b = GeneratorState::default();
        a.manual_seed(7);
        b.manual_seed(7);
        let (x, y) = (a.next_state(), a.next_state());
        assert_ne!(x, y);
        assert_eq!(b.next_state(), x);
        b.manual_seed(8);
        assert_ne!(b.next_state(), x);
    }

    #[test]
    fn handles_share_and_clones_copy() {
        let g = Generator::new(1, 5);
        let h = g.clone();
        assert!(g.same_as(&h));
        g.next_state();
        assert_eq!(h.state(), (5, 1));
        let c = g.clone_state();
        assert!(!c.same_as(&g) && c.device() == 1);
        assert_eq!(c.next_state(), g.next_state());
        assert_eq!((c.state(), g.state()), ((5, 2), (5, 2)));
        c.manual_seed(9);
        assert_eq!((c.initial_seed(), g.initial_seed()), (9, 5));
        assert_eq!(format!("{g:?}"), "Generator(tpu:1)");
    }
}
