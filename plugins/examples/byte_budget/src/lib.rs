//! A fusion policy: flush the pending graph once its results reach a byte
//! budget (`max_bytes=N` in the config, 1 MiB by default), which bounds the
//! memory a fused program's intermediates can take. It answers with a cut
//! point, so the host asks it once per graph and then cuts by itself.

use torchtpu_plugin_sdk::{plugin, Decision, PolicyRequest, PolicyResponse};

const DEFAULT_MAX_BYTES: u64 = 1 << 20;

fn max_bytes(config: &str) -> Result<u64, String> {
    let mut max = DEFAULT_MAX_BYTES;
    for kv in config.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        match kv.split_once('=') {
            Some(("max_bytes", v)) => {
                max = v.trim().parse().map_err(|_| format!("max_bytes must be a byte count, got {v:?}"))?;
            }
            _ => return Err(format!("unknown setting {kv:?} (byte_budget takes max_bytes=N)")),
        }
    }
    Ok(max)
}

fn decide(req: &PolicyRequest) -> Result<PolicyResponse, String> {
    let max = max_bytes(&req.config)?;
    Ok(if req.total_bytes >= max {
        PolicyResponse { decision: Decision::Flush, cut_at_ops: None, cut_at_bytes: None }
    } else {
        PolicyResponse { decision: Decision::Continue, cut_at_ops: None, cut_at_bytes: Some(max) }
    })
}

plugin! {
    name: "byte_budget",
    version: "0.1.0",
    ops: [],
    policies: [{ name: "byte_budget::byte_budget", decide: decide }],
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(config: &str, total_bytes: u64) -> PolicyRequest {
        PolicyRequest { policy: "byte_budget::byte_budget".into(), config: config.into(), first: 0, ops: vec![], total_ops: 1, total_bytes }
    }

    #[test]
    fn cuts_at_the_budget() {
        assert_eq!(decide(&req("max_bytes=100", 10)).unwrap().cut_at_bytes, Some(100));
        assert_eq!(decide(&req("max_bytes=100", 100)).unwrap().decision, Decision::Flush);
        assert_eq!(decide(&req("", 10)).unwrap().cut_at_bytes, Some(DEFAULT_MAX_BYTES));
        assert!(decide(&req("max_bytes=lots", 10)).unwrap_err().contains("max_bytes"));
    }
}
