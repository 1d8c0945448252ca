//! The two-tier compile cache of every execution mode, and recompile
//! explanations.
//!
//! A flushed graph (or a strict-mode op, a one-op program) is printed as
//! StableHLO text; [`CacheKey::new`] hashes that text with the compile options
//! and the plugin identity. [`ProgramCache`]
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
//! Disk files (`<dir>/<key hex>.ttpu`, their format is in `disk.rs`) are
//! written to a temporary name in the same directory and renamed into place,
//! so a reader (this process or another sharing the directory) sees either no
//! file or a whole one. A file that fails any check (magic, version, length,
//! checksum, summary, or the plugin refusing to load it) is reported once,
//! deleted, recompiled and rewritten: the cache never crashes and never runs a
//! damaged program. Disk I/O errors (a read-only directory, a full disk) are
//! warned about once and the cache carries on in memory.
//!
//! One file per concern: the key (`key.rs`), graph summaries and
//! explanations (`summary.rs`), the memory tier's LRU (`lru.rs`), the disk
//! format (`disk.rs`) and the cache itself (`program.rs`).

mod disk;
mod key;
mod lru;
mod program;
mod summary;

use std::path::PathBuf;

pub use key::CacheKey;
pub(crate) use lru::Lru;
pub use program::{CacheStats, ProgramCache, Tier};
pub use summary::{explain, GraphSummary, NodeSummary, ViewOf};

/// Default bound of the in-memory tier, in programs. Strict-mode ops are
/// one-op programs here too, and a model's forward and backward call a few
/// hundred distinct op signatures per shape.
pub const DEFAULT_MEMORY_ENTRIES: usize = 2048;

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
