//! The two-tier compile cache for fused programs, and recompile explanations.
//!
//! A flushed graph is printed as StableHLO text; [`CacheKey::new`] hashes that
//! text with the compile options and the plugin identity. [`ProgramCache`]
//! looks the key up in memory (an LRU of loaded executables), then on disk
//! (one file per key, loaded with `PJRT_Executable_DeserializeAndLoad`), and
//! only then compiles. The disk tier is what lets a second process start warm.
//!
//! Every stored program keeps a [`GraphSummary`] of the graph it came from
//! (ops, input shapes and dtypes, attributes, outputs). On a miss the cache
//! compares the new graph with the summaries it knows, in memory and on disk,
//! and says how it differs from the nearest one ([`explain`]). Recompile
//! storms are the top complaint about PyTorch/XLA; naming the op and the shape
//! that changed is what makes them fixable.
//!
//! # Disk format
//!
//! `<dir>/<key hex>.ttpu`, all integers little-endian:
//!
//! | bytes | content |
//! |---|---|
//! | 8 | magic `TTPUPRG1` |
//! | 4 | format version (`u32`, currently 1) |
//! | 8 | payload length (`u64`) |
//! | 32 | SHA-256 of the payload |
//! | n | payload: `u64` executable length, the executable ([`Executable::serialize`]), the graph summary as JSON |
//!
//! Files are written to a temporary name in the same directory and renamed
//! into place, so a reader (this process or another sharing the directory)
//! sees either no file or a whole one. A file that fails any check (magic,
//! version, length, checksum, summary, or the plugin refusing to load it) is
//! reported once, deleted, recompiled and rewritten: the cache never crashes
//! and never runs a damaged program. Disk I/O errors (a read-only directory, a
//! full disk) are warned about once and the cache carries on in memory.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::fmt;
use std::fs;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::pjrt::{Client, Executable};

/// Default bound of the in-memory tier, in programs.
pub const DEFAULT_MEMORY_ENTRIES: usize = 512;

const MAGIC: &[u8; 8] = b"TTPUPRG1";
const FORMAT_VERSION: u32 = 1;
const HEADER_LEN: usize = 8 + 4 + 8 + 32;
const EXTENSION: &str = "ttpu";
/// Graph summaries kept for explanations. Explaining a miss compares against
/// all of them, which is cheap next to the compile that follows a miss, but
/// must stay bounded in a process that compiles for days.
const SUMMARY_LIMIT: usize = 1024;
/// Disk entries whose summaries are read (newest first) on the first miss.
const DISK_SUMMARY_LIMIT: usize = 256;
/// A summary larger than this on disk is not a summary we wrote.
const SUMMARY_MAX_BYTES: u64 = 64 << 20;

// ---------------------------------------------------------------------------
// Configuration and keys

/// How a [`ProgramCache`] is set up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheConfig {
    /// `false`: every lookup compiles and nothing is stored.
    pub enabled: bool,
    /// LRU bound of the in-memory tier, in programs (0: no memory tier).
    pub memory_entries: usize,
    /// Directory of the disk tier; `None` keeps programs in memory only.
    pub dir: Option<PathBuf>,
}

impl CacheConfig {
    /// The configuration the environment asks for:
    /// - `TORCHTPU_CACHE=0` (or `false`, `off`, `no`) disables the cache;
    /// - `TORCHTPU_CACHE_DIR` names the disk tier's directory; set but empty,
    ///   it turns the disk tier off; unset, it defaults to `~/.cache/torchtpu`.
    pub fn from_env() -> CacheConfig {
        let enabled = match std::env::var("TORCHTPU_CACHE") {
            Ok(v) => !matches!(v.trim().to_ascii_lowercase().as_str(), "0" | "false" | "off" | "no"),
            Err(_) => true,
        };
        let dir = match std::env::var_os("TORCHTPU_CACHE_DIR") {
            Some(d) if d.is_empty() => None,
            Some(d) => Some(PathBuf::from(d)),
            None => std::env::var_os("HOME")
                .or_else(|| std::env::var_os("USERPROFILE"))
                .filter(|h| !h.is_empty())
                .map(|h| PathBuf::from(h).join(".cache").join("torchtpu")),
        };
        CacheConfig { enabled, memory_entries: DEFAULT_MEMORY_ENTRIES, dir }
    }

    /// An enabled cache without a disk tier.
    pub fn memory_only() -> CacheConfig {
        CacheConfig { enabled: true, memory_entries: DEFAULT_MEMORY_ENTRIES, dir: None }
    }
}

impl Default for CacheConfig {
    /// Same as [`CacheConfig::from_env`].
    fn default() -> CacheConfig {
        CacheConfig::from_env()
    }
}

/// Identifies a compiled program: the SHA-256 (lowercase hex) of its StableHLO
/// text, its compile options and the plugin that compiles it.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct CacheKey(String);

impl CacheKey {
    /// `plugin_identity` must change whenever executables stop being
    /// interchangeable: the plugin path and its platform version, for example.
    pub fn new(program_text: &str, compile_options: &[u8], plugin_identity: &str) -> CacheKey {
        let mut h = Sha256::new();
        h.update(b"torchtpu program v1\0");
        // Length prefixes keep ("ab", "c") and ("a", "bc") apart.
        for part in [program_text.as_bytes(), compile_options, plugin_identity.as_bytes()] {
            h.update((part.len() as u64).to_le_bytes());
            h.update(part);
        }
        CacheKey(to_hex(&h.finalize()))
    }

    pub fn hex(&self) -> &str {
        &self.0
    }

    /// The key a disk file name stands for, if it is one of ours.
    fn from_hex(s: &str) -> Option<CacheKey> {
        (s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))).then(|| CacheKey(s.to_string()))
    }
}

impl fmt::Display for CacheKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn to_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[(b >> 4) as usize] as char);
        s.push(DIGITS[(b & 15) as usize] as char);
    }
    s
}

// ---------------------------------------------------------------------------
// Graph summaries and explanations

/// One node of a flushed graph, as explanations print it.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeSummary {
    /// The op name (`aten::mm`).
    pub op: String,
    /// Dtype and shape of each input, in argument order.
    pub inputs: Vec<(DType, Vec<i64>)>,
    /// The op's attributes, printed (`dim=1, keepdim=false`).
    pub attrs: String,
}

/// What a flushed graph looks like: its nodes in the canonical order of the
/// flush, and the dtype and shape of each program output.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GraphSummary {
    pub nodes: Vec<NodeSummary>,
    pub outputs: Vec<(DType, Vec<i64>)>,
}

// The on-disk form. Dtypes are stored as their PyTorch codes so the format
// does not depend on how `DType` is spelled in Rust.
#[derive(Serialize, Deserialize)]
struct NodeRecord {
    op: String,
    inputs: Vec<(i32, Vec<i64>)>,
    attrs: String,
}

#[derive(Serialize, Deserialize)]
struct GraphRecord {
    nodes: Vec<NodeRecord>,
    outputs: Vec<(i32, Vec<i64>)>,
}

impl GraphSummary {
    fn to_json(&self) -> Vec<u8> {
        let values = |v: &[(DType, Vec<i64>)]| v.iter().map(|(d, s)| (d.code(), s.clone())).collect();
        let record = GraphRecord {
            nodes: self
                .nodes
                .iter()
                .map(|n| NodeRecord { op: n.op.clone(), inputs: values(&n.inputs), attrs: n.attrs.clone() })
                .collect(),
            outputs: values(&self.outputs),
        };
        serde_json::to_vec(&record).expect("a graph summary always serializes")
    }

    fn from_json(bytes: &[u8]) -> Option<GraphSummary> {
        let record: GraphRecord = serde_json::from_slice(bytes).ok()?;
        let values = |v: Vec<(i32, Vec<i64>)>| -> Option<Vec<(DType, Vec<i64>)>> {
            v.into_iter().map(|(c, s)| Some((DType::from_code(c)?, s))).collect()
        };
        let nodes = record
            .nodes
            .into_iter()
            .map(|n| Some(NodeSummary { op: n.op, inputs: values(n.inputs)?, attrs: n.attrs }))
            .collect::<Option<Vec<_>>>()?;
        Some(GraphSummary { nodes, outputs: values(record.outputs)? })
    }
}

/// Why `graph` did not hit: the nearest known graph and the first difference
/// (an op, an input shape, a dtype, an attribute, or a different node count or
/// outputs), e.g. "no cached program matches: nearest cached graph (12 nodes)
/// differs at node 3 (aten::mm): input 0 shape [8, 32] vs [8, 16]". The first
/// value of a pair is `graph`'s, the second the cached graph's. If nothing is
/// known: "first graph compiled (no cached programs)".
///
/// Nodes are compared position by position: the graphs are canonicalized
/// before they are summarized, so the same program has its nodes in the same
/// order. A node inserted early makes every later position differ; the first
/// difference named is still the right one.
pub fn explain(graph: &GraphSummary, known: &[GraphSummary]) -> String {
    explain_among(graph, known)
}

fn explain_among<'a>(graph: &GraphSummary, known: impl IntoIterator<Item = &'a GraphSummary>) -> String {
    // `min_by_key` keeps the first of equals, so callers list preferred
    // (most recent) graphs first.
    let Some((_, nearest)) = known.into_iter().map(|k| (distance(graph, k), k)).min_by_key(|(d, _)| *d) else {
        return "first graph compiled (no cached programs)".to_string();
    };
    let n = nearest.nodes.len();
    format!(
        "no cached program matches: nearest cached graph ({n} node{}) {}",
        if n == 1 { "" } else { "s" },
        first_difference(graph, nearest)
    )
}

/// How far apart two graphs are. A different op weighs more than a different
/// shape, so a graph whose batch size changed finds its old self as the
/// nearest neighbour rather than some unrelated graph of the same length.
fn distance(a: &GraphSummary, b: &GraphSummary) -> u64 {
    const OP: u64 = 4;
    let nodes: u64 = a
        .nodes
        .iter()
        .zip(&b.nodes)
        .map(|(x, y)| if x.op != y.op { OP } else { u64::from(node_detail(x, y).is_some()) })
        .sum();
    let count = OP * a.nodes.len().abs_diff(b.nodes.len()) as u64;
    let outputs = a.outputs.len().abs_diff(b.outputs.len()) as u64
        + a.outputs.iter().zip(&b.outputs).filter(|(x, y)| x != y).count() as u64;
    nodes + count + outputs
}

fn first_difference(g: &GraphSummary, k: &GraphSummary) -> String {
    let differing = g.nodes.iter().zip(&k.nodes).filter(|(a, b)| *a != *b).count();
    let more = if differing > 1 { format!("; {differing} nodes differ in all") } else { String::new() };
    for (i, (a, b)) in g.nodes.iter().zip(&k.nodes).enumerate() {
        if a.op != b.op {
            return format!("differs at node {i}: op {} vs {}{more}", a.op, b.op);
        }
        if let Some(detail) = node_detail(a, b) {
            return format!("differs at node {i} ({}): {detail}{more}", a.op);
        }
    }
    let (gn, kn) = (g.nodes.len(), k.nodes.len());
    if gn != kn {
        let next = if gn > kn {
            format!("first extra node {kn}: {}", g.nodes[kn].op)
        } else {
            format!("the cached graph goes on with node {gn}: {}", k.nodes[gn].op)
        };
        return format!("differs in node count: {gn} nodes vs {kn} ({next})");
    }
    if g.outputs.len() != k.outputs.len() {
        return format!("differs in outputs: {} outputs vs {}", g.outputs.len(), k.outputs.len());
    }
    for (j, (a, b)) in g.outputs.iter().zip(&k.outputs).enumerate() {
        if let Some(d) = value_difference(a, b) {
            return format!("differs at output {j}: {d}");
        }
    }
    "has the same ops, input shapes, dtypes, attributes and outputs: the program differs elsewhere \
     (constants, compile options or plugin)"
        .to_string()
}

/// The first difference between two nodes with the same op.
fn node_detail(a: &NodeSummary, b: &NodeSummary) -> Option<String> {
    if a.inputs.len() != b.inputs.len() {
        return Some(format!("{} inputs vs {}", a.inputs.len(), b.inputs.len()));
    }
    for (j, (x, y)) in a.inputs.iter().zip(&b.inputs).enumerate() {
        if let Some(d) = value_difference(x, y) {
            return Some(format!("input {j} {d}"));
        }
    }
    (a.attrs != b.attrs).then(|| format!("attributes {:?} vs {:?}", a.attrs, b.attrs))
}

fn value_difference((da, sa): &(DType, Vec<i64>), (db, sb): &(DType, Vec<i64>)) -> Option<String> {
    match (da != db, sa != sb) {
        (false, false) => None,
        (true, false) => Some(format!("dtype {da} vs {db}")),
        (false, true) => Some(format!("shape {sa:?} vs {sb:?}")),
        (true, true) => Some(format!("{da}{sa:?} vs {db}{sb:?}")),
    }
}

// ---------------------------------------------------------------------------
// The cache

/// Where [`ProgramCache::get_or_compile`] found the program.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Tier {
    Memory,
    Disk,
    Compiled,
}

/// Counters of a [`ProgramCache`]. They are cumulative: [`ProgramCache::clear`]
/// does not reset them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    pub memory_hits: u64,
    pub disk_hits: u64,
    /// Lookups that compiled (including every lookup of a disabled cache).
    pub misses: u64,
    /// Calls of the `compile` closure, failed ones included.
    pub compiles: u64,
    pub compile_ns: u64,
    pub disk_writes: u64,
    /// Damaged disk files found (each counted and reported once).
    pub corrupt_files: u64,
    /// Programs dropped from the memory tier by its LRU bound.
    pub evictions: u64,
}

/// The in-memory tier: loaded executables, least recently used first out.
/// `order` maps a use tick to its key, so the oldest entry is the first.
struct Lru {
    bound: usize,
    tick: u64,
    map: HashMap<CacheKey, (Arc<Executable>, u64)>,
    order: BTreeMap<u64, CacheKey>,
}

impl Lru {
    fn new(bound: usize) -> Lru {
        Lru { bound, tick: 0, map: HashMap::new(), order: BTreeMap::new() }
    }

    fn get(&mut self, key: &CacheKey) -> Option<Arc<Executable>> {
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
    fn insert(&mut self, key: CacheKey, exe: Arc<Executable>) -> u64 {
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

    fn contains(&self, key: &CacheKey) -> bool {
        self.map.contains_key(key)
    }

    fn clear(&mut self) {
        self.map.clear();
        self.order.clear();
    }
}

/// Summaries of the graphs this cache has seen, oldest first, bounded.
#[derive(Default)]
struct Known {
    map: HashMap<CacheKey, Arc<GraphSummary>>,
    order: VecDeque<CacheKey>,
}

impl Known {
    fn insert(&mut self, key: CacheKey, summary: Arc<GraphSummary>) {
        if self.map.insert(key.clone(), summary).is_none() {
            self.order.push_back(key);
            while self.order.len() > SUMMARY_LIMIT {
                if let Some(old) = self.order.pop_front() {
                    self.map.remove(&old);
                }
            }
        }
    }

    /// Newest first, so that among equally near graphs the latest one is named.
    fn newest_first(&self, except: &CacheKey) -> Vec<Arc<GraphSummary>> {
        self.order.iter().rev().filter(|k| *k != except).filter_map(|k| self.map.get(k).cloned()).collect()
    }

    fn clear(&mut self) {
        self.map.clear();
        self.order.clear();
    }
}

struct State {
    lru: Lru,
    known: Known,
    stats: CacheStats,
    last_miss: Option<String>,
    /// Whether the disk tier's summaries were read (on the first miss).
    disk_scanned: bool,
    /// Corrupt files already reported, so a file that cannot be deleted (a
    /// read-only directory) is not reported at every lookup.
    reported_corrupt: HashSet<PathBuf>,
}

/// The compile cache for fused programs: an LRU of loaded executables in
/// memory, backed by a directory of serialized executables.
///
/// Thread-safe (`Send + Sync`); the runtime shares one. A memory hit takes one
/// short lock. Concurrent lookups of the same key are serialized by a per-key
/// gate, so a program is compiled once per process even when several threads
/// miss on it together; different keys compile in parallel. Two processes
/// sharing a directory may both compile the same program; each write is
/// atomic (temporary file and rename), so either copy is whole and valid.
pub struct ProgramCache {
    dir: Option<PathBuf>,
    enabled: AtomicBool,
    state: Mutex<State>,
    /// One gate per key being looked up past the memory tier.
    in_flight: Mutex<HashMap<CacheKey, Arc<Mutex<()>>>>,
    /// Disk I/O trouble is warned about once per cache, then only traced.
    io_warned: AtomicBool,
    tmp_counter: AtomicU64,
}

const _: () = {
    const fn thread_safe<T: Send + Sync>() {}
    thread_safe::<ProgramCache>();
};

impl fmt::Debug for ProgramCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProgramCache")
            .field("enabled", &self.enabled())
            .field("dir", &self.dir)
            .field("stats", &self.stats())
            .finish()
    }
}

/// Removes a key's gate when its lookup ends (also on unwinding), unless
/// another lookup is waiting on it; the last one out removes it.
struct GateRelease<'a> {
    cache: &'a ProgramCache,
    key: &'a CacheKey,
    gate: &'a Arc<Mutex<()>>,
}

impl Drop for GateRelease<'_> {
    fn drop(&mut self) {
        let mut in_flight = self.cache.in_flight.lock();
        // Clones are only made under this lock: the map's and ours make 2.
        if in_flight.get(self.key).is_some_and(|g| Arc::ptr_eq(g, self.gate) && Arc::strong_count(g) == 2) {
            in_flight.remove(self.key);
        }
    }
}

impl ProgramCache {
    /// Touches no file: the directory is created at the first write.
    pub fn new(config: CacheConfig) -> ProgramCache {
        ProgramCache {
            dir: config.dir,
            enabled: AtomicBool::new(config.enabled),
            state: Mutex::new(State {
                lru: Lru::new(config.memory_entries),
                known: Known::default(),
                stats: CacheStats::default(),
                last_miss: None,
                disk_scanned: false,
                reported_corrupt: HashSet::new(),
            }),
            in_flight: Mutex::new(HashMap::new()),
            io_warned: AtomicBool::new(false),
            tmp_counter: AtomicU64::new(0),
        }
    }

    /// Memory tier, then disk tier (deserialized through `client`), else
    /// `compile()`, whose program is stored in both tiers. On a miss, explains
    /// it against the known graphs ([`explain`]), logs that with
    /// `tracing::info!` and keeps it for [`last_miss_explanation`].
    ///
    /// `summary` describes the graph `key` was computed from; it is stored with
    /// the program. A disabled cache calls `compile()` every time and stores
    /// nothing. Errors come only from `compile()`: disk trouble is warned
    /// about and the cache falls back to compiling.
    ///
    /// [`last_miss_explanation`]: ProgramCache::last_miss_explanation
    pub fn get_or_compile(
        &self,
        client: &Arc<Client>,
        key: &CacheKey,
        summary: &GraphSummary,
        compile: impl FnOnce() -> Result<Executable>,
    ) -> Result<(Arc<Executable>, Tier)> {
        if !self.enabled() {
            self.state.lock().stats.misses += 1;
            return Ok((Arc::new(self.run_compile(compile)?), Tier::Compiled));
        }
        if let Some(exe) = self.memory_get(key) {
            return Ok((exe, Tier::Memory));
        }

        let gate = self.in_flight.lock().entry(key.clone()).or_default().clone();
        let _release = GateRelease { cache: self, key, gate: &gate };
        let _held = gate.lock();
        // Another thread may have stored it while we waited on the gate.
        if let Some(exe) = self.memory_get(key) {
            return Ok((exe, Tier::Memory));
        }

        if let Some(dir) = &self.dir {
            if let Some(exe) = self.disk_load(client, dir, key) {
                let exe = Arc::new(exe);
                let mut st = self.state.lock();
                st.stats.disk_hits += 1;
                self.store_in_memory(&mut st, key, &exe, summary);
                return Ok((exe, Tier::Disk));
            }
        }

        // Explained before compiling: a compile that fails is a miss too.
        let explanation = self.explain_miss(key, summary);
        tracing::info!(key = %key, "compile cache miss: {explanation}");
        {
            let mut st = self.state.lock();
            st.stats.misses += 1;
            st.last_miss = Some(explanation);
        }
        let exe = Arc::new(self.run_compile(compile)?);
        {
            let mut st = self.state.lock();
            self.store_in_memory(&mut st, key, &exe, summary);
        }
        if let Some(dir) = &self.dir {
            self.disk_store(dir, key, &exe, summary);
        }
        Ok((exe, Tier::Compiled))
    }

    pub fn stats(&self) -> CacheStats {
        self.state.lock().stats
    }

    /// Turns the cache on or off. Off, lookups compile and store nothing;
    /// what is already stored stays for when it is turned back on.
    pub fn set_enabled(&self, on: bool) {
        self.enabled.store(on, Ordering::Relaxed);
    }

    pub fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    /// Drops the executables of the memory tier, keeping the disk tier and
    /// the statistics: the runtime's shutdown destroys them before the PJRT
    /// client that made them.
    pub fn release_loaded(&self) {
        self.state.lock().lru.clear();
    }

    /// Empties the memory tier and the known summaries, and deletes every
    /// `*.ttpu` file of the cache directory (shared with other processes:
    /// this clears their disk tier too). Other files are left alone.
    pub fn clear(&self) -> Result<()> {
        {
            let mut st = self.state.lock();
            st.lru.clear();
            st.known.clear();
            st.last_miss = None;
            st.disk_scanned = false;
            st.reported_corrupt.clear();
        }
        let Some(dir) = &self.dir else { return Ok(()) };
        let io_err = |path: &Path, source: io::Error| Error::Io { path: path.display().to_string(), source: std::sync::Arc::new(source) };
        let entries = match fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(io_err(dir, e)),
        };
        let mut first_error = None;
        for entry in entries {
            let path = match entry {
                Ok(entry) => entry.path(),
                Err(e) => {
                    first_error.get_or_insert(io_err(dir, e));
                    continue;
                }
            };
            if path.extension().is_some_and(|x| x == EXTENSION) {
                match fs::remove_file(&path) {
                    Ok(()) => {}
                    // Another process cleared it first.
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(e) => {
                        first_error.get_or_insert(io_err(&path, e));
                    }
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    pub fn last_miss_explanation(&self) -> Option<String> {
        self.state.lock().last_miss.clone()
    }

    /// The disk tier's directory, if there is one.
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    /// The file that holds `key`'s program (whether or not it exists).
    pub fn entry_path(&self, key: &CacheKey) -> Option<PathBuf> {
        self.dir.as_deref().map(|d| entry_path(d, key))
    }

    fn memory_get(&self, key: &CacheKey) -> Option<Arc<Executable>> {
        let mut st = self.state.lock();
        let exe = st.lru.get(key)?;
        st.stats.memory_hits += 1;
        Some(exe)
    }

    fn store_in_memory(&self, st: &mut State, key: &CacheKey, exe: &Arc<Executable>, summary: &GraphSummary) {
        st.stats.evictions += st.lru.insert(key.clone(), exe.clone());
        st.known.insert(key.clone(), Arc::new(summary.clone()));
    }

    fn run_compile(&self, compile: impl FnOnce() -> Result<Executable>) -> Result<Executable> {
        let start = Instant::now();
        let result = compile();
        let ns = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let mut st = self.state.lock();
        st.stats.compiles += 1;
        st.stats.compile_ns = st.stats.compile_ns.saturating_add(ns);
        result
    }

    fn explain_miss(&self, key: &CacheKey, summary: &GraphSummary) -> String {
        if let Some(dir) = &self.dir {
            // Read outside the lock: it is file I/O. Two threads missing at
            // once may both scan; inserting twice is harmless.
            if !self.state.lock().disk_scanned {
                let found = scan_disk_summaries(dir);
                let mut st = self.state.lock();
                st.disk_scanned = true;
                for (k, s) in found {
                    st.known.insert(k, Arc::new(s));
                }
            }
        }
        let (known, seen_before, damaged, bound) = {
            let st = self.state.lock();
            let damaged = self.dir.as_deref().is_some_and(|d| st.reported_corrupt.contains(&entry_path(d, key)));
            let seen_before = st.known.map.contains_key(key) && !st.lru.contains(key);
            (st.known.newest_first(key), seen_before, damaged, st.lru.bound)
        };
        if damaged {
            return "this graph's program was on disk but its file was damaged (see the warning)".to_string();
        }
        if seen_before {
            let disk = if self.dir.is_some() { "and its disk file is gone" } else { "and there is no disk tier" };
            return format!(
                "this graph was compiled before but was evicted from the memory tier (bound: {bound} programs) {disk}"
            );
        }
        explain_among(summary, known.iter().map(|s| &**s))
    }

    /// Reads `key`'s file. Absent: `None`. Damaged: reported, deleted, `None`.
    fn disk_load(&self, client: &Arc<Client>, dir: &Path, key: &CacheKey) -> Option<Executable> {
        let path = entry_path(dir, key);
        let bytes = match fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return None,
            Err(e) => {
                self.warn_io("reading", &path, &e);
                return None;
            }
        };
        let exe_bytes = match decode_entry(&bytes) {
            Ok((exe_bytes, _summary)) => exe_bytes,
            Err(reason) => {
                self.corrupt(&path, &reason);
                return None;
            }
        };
        match client.deserialize(exe_bytes) {
            Ok(exe) => Some(exe),
            Err(e) => {
                self.corrupt(&path, &format!("the plugin could not load the executable: {e}"));
                None
            }
        }
    }

    fn disk_store(&self, dir: &Path, key: &CacheKey, exe: &Executable, summary: &GraphSummary) {
        let path = entry_path(dir, key);
        let bytes = match exe.serialize() {
            Ok(bytes) => bytes,
            Err(e) => {
                // Some plugins cannot serialize; the memory tier still works.
                if !self.io_warned.swap(true, Ordering::Relaxed) {
                    tracing::warn!(file = %path.display(), "compile cache: cannot serialize the executable, keeping it in memory only: {e}");
                }
                return;
            }
        };
        let data = encode_entry(&bytes, summary);
        match self.write_atomic(dir, &path, &data) {
            Ok(()) => {
                let mut st = self.state.lock();
                st.stats.disk_writes += 1;
                st.reported_corrupt.remove(&path);
            }
            Err(e) => self.warn_io("writing", &path, &e),
        }
    }

    /// Writes a temporary file next to `path` and renames it over `path`, so
    /// readers never see a partial file. No fsync: after a power loss a file
    /// may be empty or partial, which the checksum catches.
    fn write_atomic(&self, dir: &Path, path: &Path, data: &[u8]) -> io::Result<()> {
        fs::create_dir_all(dir)?;
        let n = self.tmp_counter.fetch_add(1, Ordering::Relaxed);
        let name = path.file_name().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        let tmp = dir.join(format!(".{name}.{}.{n}.tmp", std::process::id()));
        let written = (|| {
            let mut f = fs::OpenOptions::new().write(true).create_new(true).open(&tmp)?;
            f.write_all(data)?;
            drop(f);
            fs::rename(&tmp, path)
        })();
        if written.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        written
    }

    fn corrupt(&self, path: &Path, reason: &str) {
        let first = {
            let mut st = self.state.lock();
            let first = st.reported_corrupt.insert(path.to_path_buf());
            if first {
                st.stats.corrupt_files += 1;
            }
            first
        };
        if first {
            tracing::warn!(file = %path.display(), "compile cache: corrupt file ({reason}); deleting it and recompiling");
        } else {
            tracing::debug!(file = %path.display(), "compile cache: corrupt file again ({reason})");
        }
        if let Err(e) = fs::remove_file(path) {
            if e.kind() != io::ErrorKind::NotFound {
                self.warn_io("deleting", path, &e);
            }
        }
    }

    fn warn_io(&self, doing: &str, path: &Path, e: &io::Error) {
        if !self.io_warned.swap(true, Ordering::Relaxed) {
            tracing::warn!(file = %path.display(), "compile cache: {doing} failed ({e}); continuing with the memory tier");
        } else {
            tracing::debug!(file = %path.display(), "compile cache: {doing} failed ({e})");
        }
    }
}

fn entry_path(dir: &Path, key: &CacheKey) -> PathBuf {
    dir.join(format!("{}.{EXTENSION}", key.hex()))
}

// ---------------------------------------------------------------------------
// The file format (see the module docs)

fn encode_entry(executable: &[u8], summary: &GraphSummary) -> Vec<u8> {
    let json = summary.to_json();
    let mut payload = Vec::with_capacity(8 + executable.len() + json.len());
    payload.extend_from_slice(&(executable.len() as u64).to_le_bytes());
    payload.extend_from_slice(executable);
    payload.extend_from_slice(&json);
    let mut out = Vec::with_capacity(HEADER_LEN + payload.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    out.extend_from_slice(&Sha256::digest(&payload));
    out.extend_from_slice(&payload);
    out
}

/// The header's payload length, after checking magic and version.
fn check_header(header: &[u8]) -> std::result::Result<u64, String> {
    if header.len() < HEADER_LEN {
        return Err(format!("truncated: {} bytes, shorter than the {HEADER_LEN}-byte header", header.len()));
    }
    if &header[..8] != MAGIC {
        return Err("bad magic".to_string());
    }
    let version = u32::from_le_bytes(header[8..12].try_into().unwrap());
    if version != FORMAT_VERSION {
        return Err(format!("format version {version}, expected {FORMAT_VERSION}"));
    }
    Ok(u64::from_le_bytes(header[12..20].try_into().unwrap()))
}

/// Checks a whole file and splits its payload into the executable and the
/// graph summary.
fn decode_entry(bytes: &[u8]) -> std::result::Result<(&[u8], GraphSummary), String> {
    let payload_len = check_header(bytes)?;
    let payload = &bytes[HEADER_LEN..];
    if payload_len != payload.len() as u64 {
        return Err(format!("header says {payload_len} payload bytes, the file has {}", payload.len()));
    }
    if Sha256::digest(payload).as_slice() != &bytes[20..HEADER_LEN] {
        return Err("checksum mismatch".to_string());
    }
    let (exe, summary) = split_payload(payload).ok_or("malformed payload")?;
    let summary = GraphSummary::from_json(summary).ok_or("unreadable graph summary")?;
    Ok((exe, summary))
}

fn split_payload(payload: &[u8]) -> Option<(&[u8], &[u8])> {
    let exe_len = usize::try_from(u64::from_le_bytes(payload.get(..8)?.try_into().ok()?)).ok()?;
    let rest = &payload[8..];
    (exe_len <= rest.len()).then(|| rest.split_at(exe_len))
}

/// Reads only the summary of a file (seeking past the executable). Not
/// checksummed: summaries only feed explanations, and a damaged file is
/// caught when its program is loaded.
fn read_summary(path: &Path) -> Option<GraphSummary> {
    let mut f = fs::File::open(path).ok()?;
    let mut head = [0u8; HEADER_LEN + 8];
    f.read_exact(&mut head).ok()?;
    let payload_len = check_header(&head).ok()?;
    let exe_len = u64::from_le_bytes(head[HEADER_LEN..].try_into().ok()?);
    let json_len = payload_len.checked_sub(8)?.checked_sub(exe_len)?;
    if json_len > SUMMARY_MAX_BYTES {
        return None;
    }
    f.seek(SeekFrom::Current(i64::try_from(exe_len).ok()?)).ok()?;
    let mut json = Vec::with_capacity(json_len as usize);
    f.take(json_len).read_to_end(&mut json).ok()?;
    GraphSummary::from_json(&json)
}

/// The summaries of the newest disk entries, oldest first.
fn scan_disk_summaries(dir: &Path) -> Vec<(CacheKey, GraphSummary)> {
    let Ok(entries) = fs::read_dir(dir) else { return Vec::new() };
    let mut files: Vec<(std::time::SystemTime, CacheKey, PathBuf)> = entries
        .filter_map(|e| {
            let e = e.ok()?;
            let path = e.path();
            if path.extension()? != EXTENSION {
                return None;
            }
            let key = CacheKey::from_hex(path.file_stem()?.to_str()?)?;
            let modified = e.metadata().ok()?.modified().ok()?;
            Some((modified, key, path))
        })
        .collect();
    files.sort_by_key(|f| std::cmp::Reverse(f.0));
    files.truncate(DISK_SUMMARY_LIMIT);
    files.reverse();
    files.into_iter().filter_map(|(_, key, path)| Some((key, read_summary(&path)?))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(op: &str) -> GraphSummary {
        GraphSummary {
            nodes: vec![NodeSummary { op: op.into(), inputs: vec![(DType::F32, vec![2, 3])], attrs: "dim=1".into() }],
            outputs: vec![(DType::BF16, vec![2])],
        }
    }

    #[test]
    fn summary_json_round_trip() {
        let s = summary("aten::sum.dim_IntList");
        assert_eq!(GraphSummary::from_json(&s.to_json()), Some(s));
        assert_eq!(GraphSummary::from_json(b"{\"nodes\":[],\"outputs\":[[99,[]]]}"), None, "unknown dtype code");
    }

    #[test]
    fn entry_round_trip_and_damage() {
        let s = summary("aten::add.Tensor");
        let exe = b"not really an executable".to_vec();
        let file = encode_entry(&exe, &s);
        assert_eq!(&file[..8], b"TTPUPRG1");
        assert_eq!(file.len(), HEADER_LEN + 8 + exe.len() + s.to_json().len());
        let (e, back) = decode_entry(&file).unwrap();
        assert_eq!((e, back), (&exe[..], s.clone()));

        let mut flipped = file.clone();
        flipped[HEADER_LEN + 10] ^= 1;
        assert_eq!(decode_entry(&flipped).unwrap_err(), "checksum mismatch");
        assert!(decode_entry(&file[..file.len() - 1]).unwrap_err().contains("payload bytes"));
        assert!(decode_entry(&file[..10]).unwrap_err().contains("truncated"));
        let mut magic = file.clone();
        magic[0] = b'X';
        assert_eq!(decode_entry(&magic).unwrap_err(), "bad magic");
        let mut version = file.clone();
        version[8] = 2;
        assert!(decode_entry(&version).unwrap_err().contains("format version 2"));
    }

    #[test]
    fn summary_is_read_without_the_executable() {
        let dir = std::env::temp_dir().join(format!("ttpu-cache-unit-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let s = summary("aten::mm");
        let key = CacheKey::new("prog", b"", "plugin");
        let path = entry_path(&dir, &key);
        fs::write(&path, encode_entry(&[7u8; 1000], &s)).unwrap();
        fs::write(dir.join("unrelated.ttpu"), b"x").unwrap();
        assert_eq!(read_summary(&path), Some(s.clone()));
        assert_eq!(scan_disk_summaries(&dir), vec![(key, s)]);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn key_separates_fields() {
        let a = CacheKey::new("ab", b"c", "p");
        assert_eq!(a.hex().len(), 64);
        assert_ne!(a, CacheKey::new("a", b"bc", "p"));
        assert_ne!(a, CacheKey::new("ab", b"c", "q"));
        assert_eq!(a, CacheKey::new("ab", b"c", "p"));
        assert_eq!(CacheKey::from_hex(a.hex()), Some(a));
    }

    #[test]
    fn sha256_matches_a_known_vector() {
        // FIPS 180-2 test vector for "abc", to pin the hex encoding.
        assert_eq!(to_hex(&Sha256::digest(b"abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    }
}
