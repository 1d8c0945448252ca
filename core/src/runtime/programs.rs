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
            let exe = super::progress::watch(what, || self.client.compile(what, text, options))
                .map_err(|e| e.saving_program(&self.failed_programs_dir()));
            self.stats.compile_ns.fetch_add(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
            Stats::bump(&self.stats.compiles);
            exe
        })
    }

    /// Where a long program that failed to compile is saved: `failed/` in
    /// the program cache's directory (`$TORCHTPU_CACHE_DIR`, by default
    /// `~/.cache/torchtpu`), else in the system's temporary directory.
    fn failed_programs_dir(&self) -> std::path::PathBuf {
        let base = self.programs.dir().map_or_else(|| std::env::temp_dir().join("torchtpu"), |d| d.to_path_buf());
        base.join("failed")
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::RuntimeOptions;

    /// A long program that fails to compile through the runtime's path is
    /// saved whole under the cache directory's `failed/`, and the error
    /// names the file.
    #[test]
    fn a_failed_long_program_is_saved_under_the_cache_dir() {
        let rt = Runtime::new(RuntimeOptions::default()).unwrap();
        let body: String = (1..=80).map(|i| format!("    %{i} = stablehlo.add %{}, %arg0 : tensor<2xf32>\n", i - 1)).collect();
        let prog = format!(
            "module @m {{\n  func.func public @main(%arg0: tensor<2xf32>) -> tensor<2xi32> {{\n    \
             %0 = stablehlo.add %arg0, %arg0 : tensor<2xf32>\n{body}    return %80 : tensor<2xf32>\n  }}\n}}"
        );
        let summary = GraphSummary::default();
        let e = rt.cached_program("bad test graph", &prog, &CompileOptions::Portable, &summary).err().expect("refused");
        let crate::Error::Compile { saved: Some(path), .. } = &e else { panic!("not saved: {e}") };
        assert_eq!(path.parent(), Some(rt.failed_programs_dir().as_path()));
        assert_eq!(std::fs::read_to_string(path).unwrap(), prog);
        assert!(e.to_string().contains(&format!("the whole program is in {}", path.display())), "{e}");
    }
}
