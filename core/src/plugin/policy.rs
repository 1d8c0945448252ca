//! Plugin fusion policies: the [`FusionPolicy`] trait implemented by a call
//! into the plugin.
//!
//! The plugin sees the ops recorded since it was last asked about the
//! pending graph (so asking costs O(new ops), not O(graph)), and may answer
//! with a cut point instead of a yes/no; the host then checks the cut itself
//! and does not call the plugin again for that graph. A failing policy fuses
//! everything for the rest of the graph, with a warning, and is disabled
//! after [`MAX_FAILURES`] failures: a policy can cost speed, never results.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use parking_lot::Mutex;
use torchtpu_plugin_abi::{exports, Decision as Wire, OpSummary, PolicyRequest, PolicyResponse, TensorType};

use super::{op::decode, sandbox, Plugin};
use crate::graph::policy::{Decision, FusionPolicy, GraphView};

/// Failures after which a policy is disabled.
pub const MAX_FAILURES: u32 = 3;

#[derive(Default)]
struct State {
    /// Ops of the pending graph the plugin has seen.
    sent: usize,
    /// The cut point the plugin declared for this graph.
    cut: Option<(Option<u64>, Option<u64>)>,
    /// The plugin failed on this graph: fuse the rest of it.
    gave_up: bool,
    failures: u32,
    disabled: bool,
}

/// A fusion policy provided by a plugin. Thread-safe.
pub struct PluginPolicy {
    plugin: Arc<Plugin>,
    policy: String,
    config: String,
    display: String,
    state: Mutex<State>,
}

impl PluginPolicy {
    pub(crate) fn new(plugin: Arc<Plugin>, policy: &str, config: &str) -> PluginPolicy {
        let display = if config.is_empty() { policy.to_string() } else { format!("{policy}?{config}") };
        PluginPolicy { plugin, policy: policy.into(), config: config.into(), display, state: Mutex::default() }
    }

    /// Whether repeated failures disabled the policy.
    pub fn is_disabled(&self) -> bool {
        self.state.lock().disabled
    }

    fn ask(&self, graph: &GraphView<'_>, first: usize) -> crate::Result<PolicyResponse> {
        let ops = graph.ops[first..]
            .iter()
            .map(|o| OpSummary {
                name: o.name.to_string(),
                outputs: o.results.iter().map(|(d, s)| TensorType { shape: s.to_vec(), dtype: d.name().into() }).collect(),
                bytes: o.bytes,
            })
            .collect();
        let req = PolicyRequest {
            policy: self.policy.clone(),
            config: self.config.clone(),
            first: first as u64,
            ops,
            total_ops: graph.ops.len() as u64,
            total_bytes: graph.bytes,
        };
        let body = serde_json::to_vec(&req).expect("requests serialize");
        self.plugin.stats.calls.fetch_add(1, Ordering::Relaxed);
        let name = &self.plugin.manifest.name;
        let out = self.plugin.sandbox.call(exports::POLICY, &body).map_err(|e| sandbox::error(name, None, e))?;
        decode(&out).map_err(|e| sandbox::error(name, None, e))
    }
}

fn reached(cut: (Option<u64>, Option<u64>), graph: &GraphView<'_>) -> bool {
    cut.0.is_some_and(|n| graph.ops.len() as u64 >= n) || cut.1.is_some_and(|b| graph.bytes >= b)
}

impl FusionPolicy for PluginPolicy {
    fn name(&self) -> &str {
        &self.display
    }

    fn after_record(&self, graph: &GraphView<'_>) -> Decision {
        let mut st = self.state.lock();
        if st.disabled || graph.ops.is_empty() {
            return Decision::Continue;
        }
        if graph.ops.len() <= st.sent {
            // A new graph that `flushed` was not told about.
            (st.sent, st.cut, st.gave_up) = (0, None, false);
        }
        if st.gave_up {
            return Decision::Continue;
        }
        if let Some(cut) = st.cut {
            return if reached(cut, graph) { Decision::Flush } else { Decision::Continue };
        }
        let first = st.sent;
        st.sent = graph.ops.len();
        match self.ask(graph, first) {
            Ok(r) if r.decision == Wire::Flush => Decision::Flush,
            Ok(r) => {
                if r.cut_at_ops.is_none() && r.cut_at_bytes.is_none() {
                    return Decision::Continue;
                }
                let cut = (r.cut_at_ops, r.cut_at_bytes);
                st.cut = Some(cut);
                if reached(cut, graph) {
                    Decision::Flush
                } else {
                    Decision::Continue
                }
            }
            Err(e) => {
                self.plugin.stats.failures.fetch_add(1, Ordering::Relaxed);
                *self.plugin.last_error.lock() = Some(e.to_string());
                st.gave_up = true;
                st.failures += 1;
                if st.failures >= MAX_FAILURES {
                    st.disabled = true;
                    tracing::warn!(policy = %self.display, error = %e, "fusion policy failed {MAX_FAILURES} times; disabled (fusing everything until another policy is selected)");
                } else {
                    tracing::warn!(policy = %self.display, error = %e, "fusion policy failed; fusing the rest of this graph");
                }
                Decision::Continue
            }
        }
    }

    fn flushed(&self, _graph: &GraphView<'_>) {
        let mut st = self.state.lock();
        (st.sent, st.cut, st.gave_up) = (0, None, false);
    }
}
