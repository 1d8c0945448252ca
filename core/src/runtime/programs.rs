//! Compiling through the program cache: every mode's programs (strict ops
//! as one-op programs, fused graphs, collectives) go through
//! [`Runtime::cached_program`], so they share one two-tier cache, one key
//! and one set of compile counters.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use super::{Runtime, Stats};
use crate::cache::{CacheKey, GraphSummary, Tier};
use crate::error::Result;
use crate::pjrt::CompileOptions;

impl Runtime {
    /// The compiled `text` from the two-tier program cache, compiling it
    /// (and counting the compile) on a miss. `what` names it in errors.
    pub(crate) fn cached_program(
        &self,
        what: &str,
        text: &str,
        options: &CompileOptions,
        summary: &GraphSummary,
    ) -> Result<(Arc<crate::pjrt::Executable>, Tier)> {
        let key = CacheKey::new(text, &options.encode(), &self.plugin_identity());
        self.programs.get_or_compile(&self.client, &key, summary, || {
            let start = Instant::now();
            let exe = super::progress::watch(what, || self.client.compile(what, text, options));
            self.stats.compile_ns.fetch_add(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
            Stats::bump(&self.stats.compiles);
            exe
        })
    }

    /// Platform and version of the plugin, for cache keys.
    pub(crate) fn plugin_identity(&self) -> String {
        format!(
            "{} {} pjrt-api {:?} torchtpu {}",
            self.platform_name(),
            self.platform_version(),
            self.client.api().version(),
            env!("CARGO_PKG_VERSION")
        )
    }
}
