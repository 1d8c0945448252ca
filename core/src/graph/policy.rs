//! Fusion policies: when to cut the pending graph.
//!
//! A policy sees a compact description of the pending graph after each
//! recorded op and may ask for a flush. [`FuseAll`] never does (flushes then
//! come from host reads, syncs and the size limit); [`LoopCut`] finds the
//! repeated body of a loop (a training step) and cuts at its boundary, so a
//! loop compiles one program per step shape instead of one ever-growing
//! graph; [`FuseLoops`], the default, fuses everything until a long trace
//! turns out to repeat a loop body, then cuts it into equal runs of bodies,
//! so a long loop compiles a handful of programs instead of one new
//! 2048-op chunk after another. WebAssembly plugins provide more policies
//! behind the same trait.

/// What a policy sees of one recorded op.
#[derive(Debug, Clone, Copy)]
pub struct OpInfo<'a> {
    /// The op's aten name.
    pub name: &'a str,
    /// Hash of the op's signature (op, shapes, dtypes, attributes).
    pub signature: u64,
    /// Bytes the op's results occupy.
    pub bytes: u64,
    /// The op's results (new tensors, then the storages it wrote, as flat
    /// storages): dtype and sizes.
    pub results: &'a [(crate::DType, &'a [i64])],
}

/// The pending graph, as policies see it.
#[derive(Debug, Clone, Copy)]
pub struct GraphView<'a> {
    pub ops: &'a [OpInfo<'a>],
    /// Total bytes of the recorded results.
    pub bytes: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Continue,
    /// Flush the pending graph now (after the op just recorded).
    Flush,
}

/// Decides cut points of the pending graph. Implementations must be
/// thread-safe; `after_record` is called with the device's recording locked.
pub trait FusionPolicy: Send + Sync {
    fn name(&self) -> &str;
    fn after_record(&self, graph: &GraphView<'_>) -> Decision;
    /// Called after every flush, whatever its reason.
    fn flushed(&self, _graph: &GraphView<'_>) {}
}

/// The built-in policies' names; the first is the default.
pub const BUILTIN: [&str; 3] = ["fuse_loops", "fuse_all", "loop_cut"];

/// A built-in policy by name: `fuse_loops`, `fuse_all` or `loop_cut`.
pub fn builtin(name: &str) -> Option<std::sync::Arc<dyn FusionPolicy>> {
    match name {
        "fuse_loops" => Some(std::sync::Arc::new(FuseLoops::default())),
        "fuse_all" => Some(std::sync::Arc::new(FuseAll)),
        "loop_cut" => Some(std::sync::Arc::new(LoopCut::default())),
        _ => None,
    }
}

/// Fuses everything up to the next flush trigger.
#[derive(Debug, Default)]
pub struct FuseAll;

impl FusionPolicy for FuseAll {
    fn name(&self) -> &str {
        "fuse_all"
    }
    fn after_record(&self, _graph: &GraphView<'_>) -> Decision {
        Decision::Continue
    }
}

/// Cuts repeated op sequences (a loop body).
///
/// While no period is known, it flushes when the pending graph is exactly two
/// repeats of one sequence (checked in O(1) per op with prefix hashes); the
/// sequence becomes the period. Afterwards it flushes whenever the pending
/// graph equals the period, so every step runs the same cached program. A
/// graph that stops matching (the loop changed shape) forgets the period.
#[derive(Debug, Default)]
pub struct LoopCut {
    state: parking_lot::Mutex<LoopState>,
}

#[derive(Debug, Default)]
struct LoopState {
    /// The learned period: the signatures of one loop body.
    period: Vec<u64>,
    /// Prefix hashes of the pending graph: prefix[i] covers ops[..i].
    prefix: Vec<u64>,
    pows: Vec<u64>,
}

/// Shortest body worth cutting: shorter repeats are usually not a loop.
const MIN_PERIOD: usize = 4;
const BASE: u64 = 0x100_0000_01B3;

impl LoopState {
    fn extend(&mut self, ops: &[OpInfo<'_>]) {
        if self.prefix.is_empty() {
            self.prefix.push(0);
            self.pows.push(1);
        }
        while self.prefix.len() <= ops.len() {
            let i = self.prefix.len() - 1;
            let h = self.prefix[i].wrapping_mul(BASE).wrapping_add(ops[i].signature | 1);
            self.prefix.push(h);
            let p = *self.pows.last().unwrap();
            self.pows.push(p.wrapping_mul(BASE));
        }
    }

    /// Forgets the hashes (the pending graph was flushed).
    fn reset(&mut self) {
        self.prefix.clear();
        self.pows.clear();
    }

    /// Hash of ops[a..b].
    fn range(&self, a: usize, b: usize) -> u64 {
        self.prefix[b].wrapping_sub(self.prefix[a].wrapping_mul(self.pows[b - a]))
    }
}

impl FusionPolicy for LoopCut {
    fn name(&self) -> &str {
        "loop_cut"
    }

    fn after_record(&self, graph: &GraphView<'_>) -> Decision {
        let mut st = self.state.lock();
        let n = graph.ops.len();
        st.extend(graph.ops);
        if !st.period.is_empty() {
            let p = st.period.len();
            if n <= p && graph.ops[n - 1].signature == st.period[n - 1] {
                return if n == p { Decision::Flush } else { Decision::Continue };
            }
            // The loop changed: learn again.
            st.period.clear();
        }
        if n >= 2 * MIN_PERIOD && n % 2 == 0 {
            let h = n / 2;
            if st.range(0, h) == st.range(h, n) && graph.ops[..h].iter().zip(&graph.ops[h..]).all(|(a, b)| a.signature == b.signature) {
                st.period = graph.ops[..h].iter().map(|o| o.signature).collect();
                return Decision::Flush;
            }
        }
        Decision::Continue
    }

    fn flushed(&self, _graph: &GraphView<'_>) {
        self.state.lock().reset();
    }
}

/// The default: fuses everything up to the next flush trigger, except that
/// a trace of at least [`FuseLoops::MIN_OPS`] ops whose last
/// [`FuseLoops::WINDOW`] ops (and at least two bodies) repeat one loop body
/// is cut there, and from then on at every whole number of bodies past
/// [`FuseLoops::MIN_OPS`]. Every such run of bodies is the same graph, so it
/// compiles once and is reused; the trace before it (setup ops and the first
/// repeats) is one more program.
///
/// Only a long periodic stretch counts: a training step's own repeats (its
/// layers, forward then backward) are far shorter than the window, so a step
/// that a host read flushes is never cut, and its program stays the same
/// from step to step. A flush the policy did not ask for (a host read, a
/// sync) forgets the body, so cuts never drift from one step to the next.
///
/// The tail is checked every [`FuseLoops::CHECK_EVERY`] ops with the prefix
/// hashes (one comparison per candidate body length, then an exact check of
/// the one found), so recording stays O(1) amortized per op for a bounded
/// graph. A body longer than half the size limit is never seen twice in one
/// graph and the trace is cut by the limit, as `fuse_all` does.
#[derive(Debug, Default)]
pub struct FuseLoops {
    state: parking_lot::Mutex<FuseLoopsState>,
}

#[derive(Debug, Default)]
struct FuseLoopsState {
    hashes: LoopState,
    /// The learned body, starting at the op that follows a cut.
    body: Vec<u64>,
    /// Ops per program once the body is known: a whole number of bodies.
    run: usize,
    /// The policy asked for the flush that comes next.
    asked: bool,
}

impl FuseLoops {
    /// Traces shorter than this are never cut: a program of a few ops costs
    /// more to launch than it saves in compiling.
    pub const MIN_OPS: usize = 512;
    /// How many of the last ops must repeat one body before it counts.
    pub const WINDOW: usize = 512;
    pub const CHECK_EVERY: usize = 16;

    /// The shortest body (at least [`MIN_PERIOD`] ops) with which the last
    /// `max(WINDOW, 2 * body)` ops of `ops` are periodic.
    fn tail_body(hashes: &LoopState, ops: &[OpInfo<'_>]) -> Option<usize> {
        let n = ops.len();
        (MIN_PERIOD..=n / 2).find(|&h| {
            let window = Self::WINDOW.max(2 * h);
            if window > n {
                return false;
            }
            // Periodic with period h: the window equals itself shifted by h.
            let start = n - window;
            hashes.range(start, n - h) == hashes.range(start + h, n)
                && ops[start..n - h].iter().zip(&ops[start + h..]).all(|(a, b)| a.signature == b.signature)
        })
    }
}

impl FusionPolicy for FuseLoops {
    fn name(&self) -> &str {
        "fuse_loops"
    }

    fn after_record(&self, graph: &GraphView<'_>) -> Decision {
        let mut st = self.state.lock();
        let n = graph.ops.len();
        if !st.body.is_empty() {
            let h = st.body.len();
            if graph.ops[n - 1].signature == st.body[(n - 1) % h] {
                if n == st.run {
                    st.asked = true;
                    return Decision::Flush;
                }
                return Decision::Continue;
            }
            // The loop changed: learn again.
            st.body.clear();
        }
        if n < Self::MIN_OPS || n % Self::CHECK_EVERY != 0 {
            return Decision::Continue;
        }
        st.hashes.extend(graph.ops);
        match Self::tail_body(&st.hashes, graph.ops) {
            Some(h) => {
                st.body = graph.ops[n - h..].iter().map(|o| o.signature).collect();
                st.run = h * Self::MIN_OPS.div_ceil(h);
                st.asked = true;
                Decision::Flush
            }
            None => Decision::Continue,
        }
    }

    fn flushed(&self, _graph: &GraphView<'_>) {
        let mut st = self.state.lock();
        st.hashes.reset();
        if !std::mem::take(&mut st.asked) {
            // A host read or a sync cut the trace: the next one starts afresh.
            st.body.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(policy: &dyn FusionPolicy, sigs: &[u64]) -> Vec<usize> {
        // Returns the graph lengths at which the policy flushed.
        let mut pending: Vec<OpInfo<'static>> = Vec::new();
        let mut cuts = Vec::new();
        for &s in sigs {
            pending.push(OpInfo { name: "op", signature: s, bytes: 4, results: &[] });
            let g = GraphView { ops: &pending, bytes: 0 };
            if policy.after_record(&g) == Decision::Flush {
                cuts.push(pending.len());
                policy.flushed(&g);
                pending.clear();
            }
        }
        cuts
    }

    #[test]
    fn fuse_all_never_cuts() {
        assert!(run(&FuseAll, &[1, 2, 3, 1, 2, 3, 1, 2, 3]).is_empty());
    }

    #[test]
    fn loop_cut_learns_the_body_then_cuts_every_step() {
        // A step of 5 ops with a repeated op inside it (1 appears twice).
        let step = [1u64, 2, 1, 3, 4];
        let sigs: Vec<u64> = step.iter().copied().cycle().take(5 * 6).collect();
        // Two steps fused while learning, then one per step.
        assert_eq!(run(&LoopCut::default(), &sigs), vec![10, 5, 5, 5, 5]);
    }

    #[test]
    fn fuse_loops_cuts_a_long_loop_into_equal_runs_of_bodies() {
        // 10 setup ops, then a 40-op body repeated 100 times (4010 ops).
        let body: Vec<u64> = (100..140).collect();
        let mut sigs: Vec<u64> = (0..10).collect();
        sigs.extend(body.iter().copied().cycle().take(40 * 100));
        let cuts = run(&FuseLoops::default(), &sigs);
        // The first cut once the trace is 512 ops long and periodic over its
        // last 512 (checked every 16 ops); then runs of 13 bodies (520 ops).
        assert_eq!(cuts[0], 528);
        assert!(cuts[1..].iter().all(|&c| c == 520), "{cuts:?}");
        assert_eq!(cuts.len(), 1 + (4010 - 528) / 520);
        // Short traces and traces that never repeat are left alone.
        assert!(run(&FuseLoops::default(), &sigs[..500]).is_empty());
        assert!(run(&FuseLoops::default(), &(0..3000).collect::<Vec<u64>>()).is_empty());
    }

    #[test]
    fn fuse_loops_leaves_a_step_with_short_repeats_alone() {
        // A 700-op training step whose four 60-op layers repeat forward and
        // backward, each step ended by a host read (a flush the policy did
        // not ask for): never cut, so every step is the same program.
        let layer: Vec<u64> = (1000..1060).collect();
        let mut step: Vec<u64> = (0..50).collect();
        step.extend(layer.iter().copied().cycle().take(240));
        step.extend(50..150);
        step.extend(layer.iter().rev().copied().cycle().take(240));
        step.extend(150..220);
        let policy = FuseLoops::default();
        let mut pending: Vec<OpInfo<'static>> = Vec::new();
        for _ in 0..5 {
            for &s in &step {
                pending.push(OpInfo { name: "op", signature: s, bytes: 4, results: &[] });
                let g = GraphView { ops: &pending, bytes: 0 };
                assert_eq!(policy.after_record(&g), Decision::Continue);
            }
            policy.flushed(&GraphView { ops: &pending, bytes: 0 });
            pending.clear();
        }
    }

    #[test]
    fn fuse_loops_relearns_when_the_loop_changes() {
        let mut sigs: Vec<u64> = [1u64, 2, 3, 4, 5, 6].iter().copied().cycle().take(1200).collect();
        sigs.extend([7u64, 8, 9, 10, 11].iter().copied().cycle().take(2000));
        let cuts = run(&FuseLoops::default(), &sigs);
        // Runs of 86 six-op bodies (516 ops), then of 103 five-op ones (515).
        assert!(cuts.contains(&516) && cuts.ends_with(&[515]), "{cuts:?}");
    }

    #[test]
    fn loop_cut_relearns_when_the_loop_changes() {
        let a = [1u64, 2, 3, 4];
        let b = [5u64, 6, 7, 8, 9];
        let mut sigs: Vec<u64> = a.iter().copied().cycle().take(12).collect();
        sigs.extend(b.iter().copied().cycle().take(15));
        let cuts = run(&LoopCut::default(), &sigs);
        assert_eq!(&cuts[..2], &[8, 4]);
        // After the change the policy finds the new body and cuts by it.
        assert!(cuts.ends_with(&[5]), "{cuts:?}");
    }
}
