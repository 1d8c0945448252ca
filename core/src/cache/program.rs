//! [`ProgramCache`]: the memory tier, then the disk tier, then the compiler.

use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt;
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;

use super::disk::{decode_entry, encode_entry, entry_path, scan_disk_summaries, EXTENSION};
use super::lru::Lru;
use super::summary::explain_among;
use super::{CacheConfig, CacheKey, GraphSummary};
use crate::error::{Error, Result};
use crate::pjrt::{Client, Executable};

/// Graph summaries kept for explanations. Explaining a miss compares against
/// all of them, which is cheap next to the compile that follows a miss, but
/// must stay bounded in a process that compiles for days.
const SUMMARY_LIMIT: usize = 1024;

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
    lru: Lru<CacheKey, Arc<Executable>>,
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
    /// [`explain`]: super::explain
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
