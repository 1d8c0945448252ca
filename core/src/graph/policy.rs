//! Fusion policies: when to cut the pending graph.
//!
//! A policy sees a compact description of the pending graph after each
//! recorded op and may ask for a flush. The built-in [`FuseAll`] never does
//! (flushes then come from host reads, syncs and the size limit);
//! [`LoopCut`] finds the repeated body of a loop (a training step) and cuts
//! at its boundary, so a loop compiles one program per step shape instead of
//! one ever-growing graph. WebAssembly plugins provide more policies behind
//! the same trait.

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

/// The built-in policies' names.
pub const BUILTIN: [&str; 2] = ["fuse_all", "loop_cut"];

/// A built-in policy by name: `fuse_all` or `loop_cut`.
pub fn builtin(name: &str) -> Option<std::sync::Arc<dyn FusionPolicy>> {
    match name {
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
        let mut st = self.state.lock();
        st.prefix.clear();
        st.pows.clear();
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
