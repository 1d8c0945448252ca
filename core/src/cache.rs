//! PLACEHOLDER (replaced by the two-tier cache): in-memory program cache.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::dtype::DType;
use crate::error::Result;
use crate::pjrt::{Client, Executable};

#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct CacheKey(String);
impl CacheKey {
    pub fn new(program_text: &str, compile_options: &[u8], plugin_identity: &str) -> CacheKey {
        CacheKey(format!("{}|{:?}|{}", program_text, compile_options, plugin_identity))
    }
}
#[derive(Clone, Debug, PartialEq)]
pub struct NodeSummary {
    pub op: String,
    pub inputs: Vec<(DType, Vec<i64>)>,
    pub attrs: String,
}
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GraphSummary {
    pub nodes: Vec<NodeSummary>,
    pub outputs: Vec<(DType, Vec<i64>)>,
}
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tier {
    Memory,
    Disk,
    Compiled,
}
#[derive(Clone, Copy, Debug, Default)]
pub struct CacheStats {
    pub memory_hits: u64,
    pub disk_hits: u64,
    pub misses: u64,
    pub compiles: u64,
    pub compile_ns: u64,
    pub disk_writes: u64,
    pub corrupt_files: u64,
    pub evictions: u64,
}
#[derive(Debug, Clone)]
pub struct CacheConfig {
    pub enabled: bool,
    pub memory_entries: usize,
    pub dir: Option<std::path::PathBuf>,
}
impl CacheConfig {
    pub fn from_env() -> CacheConfig {
        CacheConfig { enabled: true, memory_entries: 512, dir: None }
    }
}
pub struct ProgramCache {
    map: Mutex<HashMap<CacheKey, Arc<Executable>>>,
    stats: Mutex<CacheStats>,
}
impl ProgramCache {
    pub fn new(_config: CacheConfig) -> ProgramCache {
        ProgramCache { map: Mutex::new(HashMap::new()), stats: Mutex::new(CacheStats::default()) }
    }
    pub fn get_or_compile(
        &self,
        _client: &Arc<Client>,
        key: &CacheKey,
        _summary: &GraphSummary,
        compile: impl FnOnce() -> Result<Executable>,
    ) -> Result<(Arc<Executable>, Tier)> {
        if let Some(e) = self.map.lock().get(key) {
            self.stats.lock().memory_hits += 1;
            return Ok((e.clone(), Tier::Memory));
        }
        let e = Arc::new(compile()?);
        self.stats.lock().misses += 1;
        self.map.lock().insert(key.clone(), e.clone());
        Ok((e, Tier::Compiled))
    }
    pub fn stats(&self) -> CacheStats {
        *self.stats.lock()
    }
    pub fn set_enabled(&self, _on: bool) {}
    pub fn enabled(&self) -> bool {
        true
    }
    pub fn clear(&self) -> Result<()> {
        self.map.lock().clear();
        Ok(())
    }
    pub fn last_miss_explanation(&self) -> Option<String> {
        None
    }
    pub fn dir(&self) -> Option<&Path> {
        None
    }
}
