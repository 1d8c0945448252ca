//! The pending graph of `DEFER_AND_FUSE` mode.
//!
//! Each op call in fused mode is recorded as a [`Node`]: the op, its
//! signature, where each of its storages' values comes from (a materialized
//! buffer or another node's output), and its runtime scalars. The node's
//! variable-length data lives in a `bumpalo` arena owned by the recording,
//! so recording an op allocates almost nothing on the heap; the arena is
//! dropped with the recording after the flush.
//!
//! At a flush the graph is canonicalized: nodes get a structural hash (their
//! signature and the hashes of their inputs, never a pointer), identical
//! deterministic nodes are merged (value numbering), dead nodes are dropped,
//! and the rest are ordered topologically with ties broken by hash, so that
//! equal graphs print byte-identical programs whatever the order of recording.

pub mod policy;
pub mod shape_watch;

use std::hash::{Hash, Hasher};
use std::sync::{Arc, Weak};

use bumpalo::Bump;
use rustc_hash::{FxHashMap, FxHasher};

use crate::dtype::DType;
use crate::pjrt::Buffer;
use crate::storage::Storage;
use crate::tensor::Scalar;

/// Why a pending graph was flushed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum FlushReason {
    /// A host read: `to_host`, `.cpu()`, `.item()`, printing.
    HostRead = 0,
    /// `synchronize` on the runtime or a stream.
    Synchronize = 1,
    /// An explicit flush call.
    Explicit = 2,
    /// A collective (a flush point in fused mode).
    Collective = 3,
    /// The pending graph reached the configured op limit.
    GraphSizeLimit = 4,
    /// The active fusion policy asked for it.
    Policy = 5,
    /// A strict-mode op (another thread or mode) needed a pending value.
    StrictOp = 6,
    /// An op across devices needed a pending value of another device.
    CrossDevice = 7,
}

impl FlushReason {
    pub const ALL: [FlushReason; 8] = [
        FlushReason::HostRead,
        FlushReason::Synchronize,
        FlushReason::Explicit,
        FlushReason::Collective,
        FlushReason::GraphSizeLimit,
        FlushReason::Policy,
        FlushReason::StrictOp,
        FlushReason::CrossDevice,
    ];

    pub fn name(self) -> &'static str {
        match self {
            FlushReason::HostRead => "host_read",
            FlushReason::Synchronize => "synchronize",
            FlushReason::Explicit => "explicit",
            FlushReason::Collective => "collective",
            FlushReason::GraphSizeLimit => "graph_size_limit",
            FlushReason::Policy => "policy",
            FlushReason::StrictOp => "strict_op",
            FlushReason::CrossDevice => "cross_device",
        }
    }
}

/// Where a node's storage value comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Src {
    /// A materialized buffer: parameter `p` of the recording.
    Param(u32),
    /// Output `out` of node `node`.
    Node { node: u32, out: u32 },
}

/// One recorded op call.
pub struct Node<'a> {
    /// Registry index of the op.
    pub op: u32,
    /// The call's signature (the strict-mode cache key).
    pub key: &'a str,
    /// Structural hash: the signature and the hashes of the inputs.
    pub hash: u64,
    /// The source of each of the call's storages.
    pub slots: &'a [Src],
    /// The offset of each tensor argument (a runtime argument; everything
    /// else about the tensors is in the signature).
    pub offsets: &'a [i64],
    /// The strides of each tensor argument read at runtime strides
    /// ([`crate::view::Layout::Runtime`]), concatenated in argument order.
    pub strides: &'a [i64],
    /// Index of the call's inferred lowering in the runtime's table.
    pub infer: u32,
    /// Runtime scalar arguments: (argument index, value).
    pub scalars: &'a [(u32, Scalar)],
    /// RNG states drawn when the op was recorded (in recording order, so
    /// results match strict mode's sequence of draws).
    pub rng: &'a [[u64; 2]],
    /// Number of outputs (results, then storage writes).
    pub outputs: u32,
}

impl Node<'_> {
    pub fn is_random(&self) -> bool {
        !self.rng.is_empty()
    }
}

/// A materialized input of the recording.
pub struct Param {
    pub buffer: Arc<Buffer>,
    pub dtype: DType,
    pub numel: i64,
}

/// A pending graph. Needs exclusive access (the runtime keeps it behind a
/// mutex per device).
pub struct Recording {
    pub id: u64,
    pub device: usize,
    // Field order matters: `nodes` borrows from `arena` and drops first.
    nodes: Vec<Node<'static>>,
    pub params: Vec<Param>,
    param_of: FxHashMap<usize, u32>,
    /// Storages whose value became pending here; at the flush the live ones
    /// are the program's outputs.
    pub storages: Vec<Weak<Storage>>,
    /// What policies see of each recorded op, and the total result bytes.
    pub ops: Vec<policy::OpInfo<'static>>,
    pub bytes: u64,
    arena: Box<Bump>,
}

impl Recording {
    pub fn new(id: u64, device: usize) -> Recording {
        Recording {
            id,
            device,
            nodes: Vec::new(),
            params: Vec::new(),
            param_of: FxHashMap::default(),
            storages: Vec::new(),
            ops: Vec::new(),
            bytes: 0,
            arena: Box::new(Bump::new()),
        }
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// The graph as fusion policies see it.
    pub fn view(&self) -> policy::GraphView<'_> {
        policy::GraphView { ops: &self.ops, bytes: self.bytes }
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    pub fn nodes(&self) -> &[Node<'_>] {
        &self.nodes
    }

    /// The parameter index of a materialized buffer (deduplicated).
    pub fn param(&mut self, buffer: &Arc<Buffer>, dtype: DType, numel: i64) -> u32 {
        let key = Arc::as_ptr(buffer) as usize;
        if let Some(&p) = self.param_of.get(&key) {
            return p;
        }
        let p = self.params.len() as u32;
        self.params.push(Param { buffer: buffer.clone(), dtype, numel });
        self.param_of.insert(key, p);
        p
    }

    /// The structural hash of a source.
    pub fn src_hash(&self, src: Src) -> u64 {
        match src {
            Src::Param(p) => {
                let p = &self.params[p as usize];
                hash_of(&("param", p.dtype, p.numel))
            }
            Src::Node { node, out } => hash_of(&(self.nodes[node as usize].hash, out)),
        }
    }

    /// Copies slices into the recording's arena.
    pub fn alloc<T: Copy>(&self, xs: &[T]) -> &'static [T] {
        let s: &[T] = self.arena.alloc_slice_copy(xs);
        // SAFETY: the arena is boxed (its address is stable when the
        // recording moves), never reset, and dropped only after `nodes`, the
        // only place these slices are stored; they never escape `Recording`
        // except as borrows of `&self`.
        unsafe { &*(s as *const [T]) }
    }

    pub fn alloc_str(&self, s: &str) -> &'static str {
        let s: &str = self.arena.alloc_str(s);
        // SAFETY: as in `alloc`.
        unsafe { &*(s as *const str) }
    }

    /// Appends a node; returns its index.
    pub fn push(&mut self, node: Node<'static>) -> u32 {
        self.nodes.push(node);
        self.nodes.len() as u32 - 1
    }

    /// Canonicalizes the graph for the given live outputs: merges equal
    /// deterministic nodes, drops nodes no output needs, and orders the rest.
    pub fn canonicalize(&self, outputs: &[(u32, u32)]) -> Canonical {
        // Value numbering: a node equal to an earlier one (same hash, same
        // signature, same canonical sources) is that node.
        let n = self.nodes.len();
        let mut rep: Vec<u32> = (0..n as u32).collect();
        let mut seen: FxHashMap<(u64, &str, Vec<Src>), u32> = FxHashMap::default();
        let canon_src = |rep: &[u32], s: Src| match s {
            Src::Node { node, out } => Src::Node { node: rep[node as usize], out },
            p => p,
        };
        for (i, node) in self.nodes.iter().enumerate() {
            if node.is_random() {
                continue;
            }
            let srcs: Vec<Src> = node.slots.iter().map(|&s| canon_src(&rep, s)).collect();
            // Scalars and view offsets are runtime arguments, not part of
            // the signature, but they are part of the node's value.
            let mut h = FxHasher::default();
            node.hash.hash(&mut h);
            for (a, s) in node.scalars {
                (a, s.bits()).hash(&mut h);
            }
            node.offsets.hash(&mut h);
            node.strides.hash(&mut h);
            match seen.entry((h.finish(), node.key, srcs)) {
                std::collections::hash_map::Entry::Occupied(e) => rep[i] = *e.get(),
                std::collections::hash_map::Entry::Vacant(v) => {
                    v.insert(i as u32);
                }
            }
        }
        let outputs: Vec<(u32, u32)> = outputs.iter().map(|&(nd, o)| (rep[nd as usize], o)).collect();

        // Liveness: what the outputs need.
        let mut live = vec![false; n];
        let mut stack: Vec<u32> = outputs.iter().map(|&(nd, _)| nd).collect();
        while let Some(i) = stack.pop() {
            if std::mem::replace(&mut live[i as usize], true) {
                continue;
            }
            for s in self.nodes[i as usize].slots {
                if let Src::Node { node, .. } = canon_src(&rep, *s) {
                    stack.push(node);
                }
            }
        }

        // Topological order, ties broken by (hash, recording index).
        let mut indegree = vec![0u32; n];
        let mut users: Vec<Vec<u32>> = vec![Vec::new(); n];
        for i in (0..n).filter(|&i| live[i]) {
            let mut deps: Vec<u32> = self.nodes[i]
                .slots
                .iter()
                .filter_map(|s| match canon_src(&rep, *s) {
                    Src::Node { node, .. } => Some(node),
                    _ => None,
                })
                .collect();
            deps.sort_unstable();
            deps.dedup();
            indegree[i] = deps.len() as u32;
            for d in deps {
                users[d as usize].push(i as u32);
            }
        }
        let mut ready: std::collections::BinaryHeap<std::cmp::Reverse<(u64, u32)>> =
            (0..n).filter(|&i| live[i] && indegree[i] == 0).map(|i| std::cmp::Reverse((self.nodes[i].hash, i as u32))).collect();
        let mut order = Vec::with_capacity(n);
        while let Some(std::cmp::Reverse((_, i))) = ready.pop() {
            order.push(i);
            for &u in &users[i as usize] {
                indegree[u as usize] -= 1;
                if indegree[u as usize] == 0 {
                    ready.push(std::cmp::Reverse((self.nodes[u as usize].hash, u)));
                }
            }
        }
        let mut position = vec![u32::MAX; n];
        for (k, &i) in order.iter().enumerate() {
            position[i as usize] = k as u32;
        }
        Canonical { rep, order, position, outputs }
    }
}

/// A canonicalized graph: the order to lower nodes in and where merged
/// nodes went.
pub struct Canonical {
    /// For each node, the node that computes its value.
    pub rep: Vec<u32>,
    /// Live nodes in canonical order.
    pub order: Vec<u32>,
    /// Position of each node in `order` (u32::MAX if dead).
    pub position: Vec<u32>,
    /// The requested outputs, mapped to representatives.
    pub outputs: Vec<(u32, u32)>,
}

impl Canonical {
    pub fn src(&self, s: Src) -> Src {
        match s {
            Src::Node { node, out } => Src::Node { node: self.rep[node as usize], out },
            p => p,
        }
    }
}

pub fn hash_of(x: &impl Hash) -> u64 {
    let mut h = FxHasher::default();
    x.hash(&mut h);
    h.finish()
}
