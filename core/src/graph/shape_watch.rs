//! Ops whose shapes change from step to step get a program of their own.
//!
//! A fused program is cached by its exact shapes. When a few ops of a step
//! change shape every step (`generate()` appends a token to the ids with
//! `cat`, then reads the last token of the grown tensor), a fused graph that
//! holds them is a new program every step, and the whole step, a model's
//! forward included, compiles again. The watch notices such an op: it sits
//! where an op of the same kind sat in an earlier step, with another
//! signature. The runtime then runs that op alone, as a strict-mode op
//! compiled for its exact shapes (a small program), while the rest of the
//! step stays one fused program that keeps hitting the cache. An input of
//! the op that is still pending is computed first by a flush; otherwise the
//! pending graph is left as it is (so a fusion policy's view of it is not
//! disturbed). Running an op alone never changes a result: the recording
//! holds its inputs' values, not their cells.
//!
//! A position is a chain hash of the ops' shape-free keys (the op and its
//! tensors' dtypes) since the last flush other than those, so one step gives
//! the same positions whatever its shapes, together with the same chain of
//! the step before it. That context keeps apart the starts of unrelated
//! steps (two loops that both begin with a float matmul): a loop's step
//! follows its own previous step.
//!
//! An op runs alone only when its last three signatures at its position are
//! all different: it grows. Two steps that start alike and alternate (a
//! `generate()`'s prefill after the decode steps of the one before it:
//! decode, decode, prefill, decode) never give three different signatures,
//! so neither is split; splitting them would compile a new prefill graph
//! without its first op. An op that comes back to a signature it had is
//! fused again.
//!
//! A step in which more than [`MAX_ISOLATED`] ops change shape (a growing
//! KV cache: every attention op grows), or more than half of its ops, is
//! left fused: splitting it into many small programs would compile as much
//! and fuse less (a `torch.compile` graph with a dynamic batch: every op
//! changes, and no part of the graph is left to keep hitting the cache).
//! The exception is a step whose changing op ran in a shape bucket (a
//! growing `cat`, runtime/grow.rs): alone, it stops compiling for each
//! shape. The watch remembers the step by its first position and leaves it
//! fused from then on.

use rustc_hash::{FxHashMap, FxHashSet};

use super::hash_of;

/// The most ops of one step that run alone.
pub const MAX_ISOLATED: usize = 8;

/// Positions remembered before the table is cleared (a bound on memory for
/// a process that records many different steps).
const MAX_POSITIONS: usize = 1 << 16;

#[derive(Debug, Default)]
pub struct ShapeWatch {
    /// Off with `TORCHTPU_SHAPE_WATCH=0`: every op is recorded.
    off: bool,
    /// The last two signatures seen at each position.
    seen: FxHashMap<u64, History>,
    /// Steps (by first position) with too many changing ops to split.
    broad: FxHashSet<u64>,
    /// Each device's current step.
    steps: FxHashMap<usize, Step>,
}

/// The last two signatures seen at one place: three different ones in a
/// row are growth.
#[derive(Debug, Clone, Copy)]
pub(crate) struct History {
    last: u64,
    before: Option<u64>,
}

impl History {
    pub(crate) fn new(signature: u64) -> History {
        History { last: signature, before: None }
    }

    /// The last signature seen.
    pub(crate) fn last(&self) -> u64 {
        self.last
    }

    /// Whether `signature` after this history makes three different
    /// signatures in a row, and the history with it.
    pub(crate) fn grows(self, signature: u64) -> (bool, History) {
        let grows = self.before.is_some_and(|b| b != self.last && b != signature) && self.last != signature;
        (grows, History { last: signature, before: Some(self.last) })
    }
}

#[derive(Debug, Default)]
struct Step {
    /// The chain hash of this step's shape-free keys so far.
    chain: u64,
    /// The whole chain of the last step that recorded anything.
    context: u64,
    /// Ops seen in this step.
    ops: usize,
    first: Option<u64>,
    /// Ops of this step that grow, and those that ran alone.
    changed: usize,
    isolated: usize,
    /// Whether an op of this step that ran alone ran in a shape bucket.
    bucketed: bool,
}

/// What the watch says of one recorded op.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Record it with the rest of the graph.
    Fuse,
    /// Run it alone: its shapes change between steps.
    Isolate,
}

impl ShapeWatch {
    /// A watch, on unless `TORCHTPU_SHAPE_WATCH` is `0`.
    pub fn from_env() -> ShapeWatch {
        ShapeWatch { off: std::env::var("TORCHTPU_SHAPE_WATCH").is_ok_and(|v| v.trim() == "0"), ..Default::default() }
    }

    /// Sees the next op of `device`'s step: `kind` is its shape-free key,
    /// `signature` the hash of its exact signature.
    pub fn observe(&mut self, device: usize, kind: u64, signature: u64) -> Verdict {
        if self.off {
            return Verdict::Fuse;
        }
        if self.seen.len() >= MAX_POSITIONS || self.broad.len() >= MAX_POSITIONS {
            self.seen.clear();
            self.broad.clear();
        }
        let step = self.steps.entry(device).or_default();
        step.chain = hash_of(&(step.chain, kind));
        step.ops += 1;
        let position = hash_of(&(step.context, step.chain));
        let first = *step.first.get_or_insert(position);
        let (grows, history) = match self.seen.get(&position) {
            Some(h) => h.grows(signature),
            None => (false, History::new(signature)),
        };
        self.seen.insert(position, history);
        if !grows {
            return Verdict::Fuse;
        }
        step.changed += 1;
        if self.broad.contains(&first) {
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

    /// An op of `device`'s step that ran alone ran in a shape bucket, so
    /// running it alone pays even in a step where most ops change.
    pub fn ran_in_bucket(&mut self, device: usize) {
        self.steps.entry(device).or_default().bucketed = true;
    }

    /// A flush of `device`'s graph: the flush that computes an isolated
    /// op's inputs keeps the step going; any other flush ends it.
    pub fn flushed(&mut self, device: usize, isolating: bool) {
        if isolating {
            return;
        }
        if let Some(step) = self.steps.get_mut(&device) {
            // A step is left whole while it keeps having too many ops that
            // change; another step that starts at the same position (the
            // same ops first, after the same step) gets its chance again.
            if let Some(first) = step.first {
                let most = step.changed * 2 > step.ops && !step.bucketed;
                if step.changed > MAX_ISOLATED || most {
                    if self.broad.insert(first) && most {
                        tracing::info!(
                            "{} of the {} ops of this step change shape between steps: the step stays one fused \
                             graph, compiled for each shape",
                            step.changed,
                            step.ops
                        );
                    }
                } else {
                    self.broad.remove(&first);
                }
            }
            step.bucketed = false;
            if step.ops > 0 {
                *step = Step { context: step.chain, ..Step::default() };
            }
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
        // sequence) has a new signature every step. The first step has no
        // step of its kind before it; from the second on, positions repeat,
        // and the third signature in a row that differs from both before it
        // shows growth.
        assert_eq!(step(&mut w, &[(1, 10), (2, 98), (3, 30)]), [Fuse, Fuse, Fuse]);
        assert_eq!(step(&mut w, &[(1, 10), (2, 99), (3, 30)]), [Fuse, Fuse, Fuse]);
        assert_eq!(step(&mut w, &[(1, 10), (2, 100), (3, 30)]), [Fuse, Fuse, Fuse]);
        for n in 101..105 {
            assert_eq!(step(&mut w, &[(1, 10), (2, n), (3, 30)]), [Fuse, Isolate, Fuse]);
        }
        // Back to the same signature: fused again.
        assert_eq!(step(&mut w, &[(1, 10), (2, 104), (3, 30)]), [Fuse, Fuse, Fuse]);
    }

    #[test]
    fn steps_that_start_alike_and_alternate_stay_whole() {
        let mut w = ShapeWatch::default();
        // A decode step, and a prefill step that starts with the same ops
        // at other shapes. Each prefill follows a decode step, as the
        // decode steps do, so its first ops take their positions: the
        // signatures there go decode, decode, prefill, decode, ... which
        // is not growth.
        let decode = [(1, 10), (2, 20), (3, 30)];
        let prefill = [(1, 11), (2, 21), (4, 40)];
        for _ in 0..3 {
            for _ in 0..4 {
                assert!(step(&mut w, &decode).iter().all(|v| *v == Fuse));
            }
            assert!(step(&mut w, &prefill).iter().all(|v| *v == Fuse));
        }
    }

    #[test]
    fn a_step_where_everything_grows_stays_fused() {
        let mut w = ShapeWatch::default();
        let ops = |n: u64| (0..20).map(|k| (k, n * 100 + k)).collect::<Vec<_>>();
        step(&mut w, &ops(0));
        step(&mut w, &ops(1));
        step(&mut w, &ops(2));
        let growing = step(&mut w, &ops(3));
        assert_eq!(growing.iter().filter(|v| **v == Isolate).count(), MAX_ISOLATED);
        // Remembered: later steps are left whole.
        for n in 4..7 {
            assert!(step(&mut w, &ops(n)).iter().all(|v| *v == Fuse));
        }
        // A step at the same first position in which only one op grows is
        // left whole once, then gets its op run alone.
        let few = |n: u64| (0..20).map(|k| (k, if k == 7 { n } else { 900 + k })).collect::<Vec<_>>();
        assert!(step(&mut w, &few(1)).iter().all(|v| *v == Fuse));
        assert!(step(&mut w, &few(2)).iter().all(|v| *v == Fuse));
        assert_eq!(step(&mut w, &few(3))[7], Isolate);
    }

    #[test]
    fn positions_follow_the_step_not_the_device_or_the_flushes() {
        let mut w = ShapeWatch::default();
        // Ops 2 and 3 grow; ops 1 and 4 keep their shapes.
        step(&mut w, &[(1, 10), (2, 20), (3, 30), (4, 40)]);
        step(&mut w, &[(1, 10), (2, 20), (3, 30), (4, 40)]);
        step(&mut w, &[(1, 10), (2, 21), (3, 31), (4, 40)]);
        // Another device's ops do not disturb device 0's positions.
        assert_eq!(w.observe(1, 7, 70), Fuse);
        assert_eq!(w.observe(0, 1, 10), Fuse);
        assert_eq!(w.observe(0, 2, 22), Isolate);
        // The flush made for the isolated op keeps the chain: op 3 is at
        // the position it would have had without it, where it grows.
        w.flushed(0, true);
        assert_eq!(w.observe(0, 3, 32), Isolate);
        assert_eq!(w.observe(0, 4, 40), Fuse);
        w.flushed(0, false);
        // An empty flush does not end a step's context.
        w.flushed(0, false);
        assert_eq!(step(&mut w, &[(1, 10), (2, 23), (3, 33), (4, 40)]), [Fuse, Isolate, Isolate, Fuse]);
    }

    #[test]
    fn a_step_where_most_ops_grow_stays_fused_unless_one_ran_in_a_bucket() {
        // A graph with a dynamic batch: all four ops change every step.
        let ops = |n: u64| (0..4).map(|k| (k, n * 100 + k)).collect::<Vec<_>>();
        let mut w = ShapeWatch::default();
        // The first step has no step of its kind before it; growth shows
        // at the fourth, whose ops run alone once. The step is then left
        // whole.
        for n in 0..3 {
            assert!(step(&mut w, &ops(n)).iter().all(|v| *v == Fuse));
        }
        assert!(step(&mut w, &ops(3)).iter().all(|v| *v == Isolate));
        for n in 4..7 {
            assert!(step(&mut w, &ops(n)).iter().all(|v| *v == Fuse));
        }
        // The same steps, where the growing op that ran alone ran in a
        // shape bucket: running alone pays, and goes on.
        let mut w = ShapeWatch::default();
        for n in 0..7 {
            let verdicts: Vec<_> = ops(n).iter().map(|&(k, s)| w.observe(0, k, s)).collect();
            if n >= 3 {
                assert!(verdicts.iter().all(|v| *v == Isolate), "step {n}: {verdicts:?}");
                w.ran_in_bucket(0);
            }
            w.flushed(0, false);
        }
    }

    #[test]
    fn unrelated_steps_that_start_alike_are_not_compared() {
        let mut w = ShapeWatch::default();
        // Loop A's step (ops 1, 2), growing, and then loop B's (ops 1, 2,
        // 3), with other shapes: B's first op follows another step than
        // A's did, so it does not continue A's history.
        for i in 0..4 {
            step(&mut w, &[(1, 10 + i), (2, 20 + i)]);
        }
        step(&mut w, &[(5, 50)]);
        assert_eq!(step(&mut w, &[(1, 40), (2, 41), (3, 30)]), [Fuse, Fuse, Fuse]);
    }
}
