//! Per-device random number generators.
//!
//! Each random op draws a fresh Threefry key, derived from the seed and a call
//! counter with splitmix64, and passes it to `stablehlo.rng_bit_generator` as
//! a runtime argument. Results depend only on the seed and the order of
//! random ops, so they are reproducible, and no program depends on the seed.

/// PyTorch's default seed.
pub const DEFAULT_SEED: u64 = 67280421310721;

#[derive(Debug, Clone)]
pub struct Generator {
    seed: u64,
    calls: u64,
}

impl Default for Generator {
    fn default() -> Self {
        Generator { seed: DEFAULT_SEED, calls: 0 }
    }
}

fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Generator {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reproducible_and_distinct() {
        let mut a = Generator::default();
        let mut b = Generator::default();
        a.manual_seed(7);
        b.manual_seed(7);
        let (x, y) = (a.next_state(), a.next_state());
        assert_ne!(x, y);
        assert_eq!(b.next_state(), x);
        b.manual_seed(8);
        assert_ne!(b.next_state(), x);
    }
}
