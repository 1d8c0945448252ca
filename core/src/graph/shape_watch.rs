//! Ops whose shapes change from step to step get a program of their own.
//!
//! A fused program is cached by its exact shapes. When a few ops of a step
//! change shape every step (`generate()` appends a token to the ids with
//! `cat`, then reads the last token of the grown tensor), a fused graph that
//! holds them is a new program every step, and the whole step, a model's
//! forward included, compiles again. The watch notices such an op: it sits
//! where an op of the same kind sat in an earlier step, with another
//! signature. The runtime then cuts the pending graph before and after it,
//! so the op runs alone, compiled for its exact shapes (a small program),
//! while the rest of the step keeps hitting the cache. Cutting never changes
//! a result: a flush is transparent.
//!
//! Positions are chain hashes of the ops' shape-free keys (the op and its
//! tensors' dtypes) since the last flush that was not such a cut, so one
//! step gives the same positions whatever its shapes. An op that comes back
//! to the signature it had the step before is fused again.
//!
//! A step in which more than [`MAX_ISOLATED`] ops change shape (a growing
//! KV cache: every attention op grows) is left fused: cutting it into many
//! small programs would compile as much and fuse less. The watch remembers
//! the step by its first position and does not cut it again.

use rustc_hash::{FxHashMap, FxHashSet};

use super::hash_of;

/// The most ops of one step that are given programs of their own.
pub const MAX_ISOLATED: usize = 8;

/// Positions remembered before the table is cleared (a bound on memory for
/// a process that records many different steps).
const MAX_POSITIONS: usize = 1 << 16;

#[derive(Debug, Default)]
pub struct ShapeWatch {
    /// The last signature seen at each position.
    seen: FxHashMap<u64, u64>,
    /// Positions whose signature changed the last time they were seen.
    changing: FxHashSet<u64>,
    /// Steps (by first position) with too many changing ops to cut.
    broad: FxHashSet<u64>,
    /// Each device's current step.
    steps: FxHashMap<usize, Step>,
}

#[derive(Debug, Default)]
struct Step {
    /// The chain hash of the positions so far.
    prefix: u64,
    first: Option<u64>,
    isolated: usize,
}

/// What the watch says of one recorded op.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Record it with the rest of the graph.
    Fuse,
    /// Cut before and after it: its shapes change between steps.
    Isolate,
}

impl ShapeWatch {
    /// Sees the next op of `device`'s step: `kind` is its shape-free key,
    /// `signature` the hash of its exact signature.
    pub fn observe(&mut self, device: usize, kind: u64, signature: u64) -> Verdict {
        if self.seen.len() >= MAX_POSITIONS {
            self.seen.clear();
            self.changing.clear();
        }
        let step = self.steps.entry(device).or_default();
        let position = hash_of(&(step.prefix, kind));
        step.prefix = position;
        let first = *step.first.get_or_insert(position);
        match self.seen.insert(position, signature) {
            Some(old) if old != signature => {
                self.changing.insert(position);
            }
            Some(_) => {
                self.changing.remove(&position);
            }
            None => {}
        }
        if !self.changing.contains(&position) || self.broad.contains(&first) {
            return Verdict::Fuse;
        }
        step.isolated += 1;
        if step.isolated > MAX_ISOLATED {
            tracing::info!(
                "more than {MAX_ISOLATED} ops of this step change shape between steps: the step stays one fused \
                 graph, compiled for each shape"
            );
            self.broad.insert(first);
            return Verdict::Fuse;
        }
        Verdict::Isolate
    }

    /// A flush of `device`'s graph: a cut made for an isolated op keeps the
    /// step going; any other flush ends it.
    pub fn flushed(&mut self, device: usize, isolating: bool) {
        if !isolating {
            self.steps.remove(&device);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One step of ops `(kind, signature)`; returns the verdicts.
    fn step(w: &mut ShapeWatch, ops: &[(u64, u64)]) -> Vec<Verdict> {
        let v = ops.iter().map(|&(k, s)| w.observe(0, k, s)).collect();
        w.flushed(0, false);
        v
    }

    use Verdict::{Fuse, Isolate};

    #[test]
    fn an_op_that_grows_every_step_is_isolated() {
        let mut w = ShapeWatch::default();
        // Ops 1 and 3 keep their shapes; op 2 (a `cat` onto a growing
        // sequence) has a new signature every step.
        assert_eq!(step(&mut w, &[(1, 10), (2, 100), (3, 30)]), [Fuse, Fuse, Fuse]);
        for n in 101..105 {
            assert_eq!(step(&mut w, &[(1, 10), (2, n), (3, 30)]), [Fuse, Isolate, Fuse]);
        }
        // Back to the same signature twice: fused again.
        assert_eq!(step(&mut w, &[(1, 10), (2, 104), (3, 30)]), [Fuse, Fuse, Fuse]);
    }

    #[test]
    fn a_step_where_everything_grows_stays_fused() {
        let mut w = ShapeWatch::default();
        let ops = |n: u64| (0..20).map(|k| (k, n * 100 + k)).collect::<Vec<_>>();
        step(&mut w, &ops(1));
        let second = step(&mut w, &ops(2));
        assert_eq!(second.iter().filter(|v| **v == Isolate).count(), MAX_ISOLATED);
        // Remembered: later steps are not cut at all.
        for n in 3..6 {
            assert!(step(&mut w, &ops(n)).iter().all(|v| *v == Fuse));
        }
    }

    #[test]
    fn positions_follow_the_step_not_the_device_or_the_cuts() {
        let mut w = ShapeWatch::default();
        step(&mut w, &[(1, 10), (2, 20)]);
        // Another device's ops do not disturb device 0's positions.
        assert_eq!(w.observe(1, 7, 70), Fuse);
        assert_eq!(w.observe(0, 1, 10), Fuse);
        assert_eq!(w.observe(0, 2, 21), Isolate);
        // The cut made for the isolated op keeps the chain: op 3 is at the
        // same position it would have had without the cut.
        w.flushed(0, true);
        assert_eq!(w.observe(0, 3, 30), Fuse);
        w.flushed(0, false);
        step(&mut w, &[(1, 10), (2, 22)]);
        assert_eq!(step(&mut w, &[(1, 10), (2, 23), (3, 31)]), [Fuse, Isolate, Isolate]);
    }
}
