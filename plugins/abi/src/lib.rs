//! The wire types of the torchtpu plugin ABI, version 1.0.
//!
//! `plugins/ABI.md` is the specification; these types are its reference
//! implementation, used by the host (`torchtpu-core`) and by the plugin SDK,
//! so the two cannot drift. Every payload is JSON (UTF-8). Unknown fields
//! are ignored, so a minor version may add optional fields.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The ABI major version: a plugin built for another major is rejected.
pub const ABI_MAJOR: u32 = 1;
/// The ABI minor version: the host accepts plugins built for any minor up to
/// its own.
pub const ABI_MINOR: u32 = 0;

/// The custom section of the `.wasm` that holds the [`Manifest`] as JSON.
pub const MANIFEST_SECTION: &str = "torchtpu.manifest";

/// Export names.
pub mod exports {
    /// `(len: i32) -> i32`: a guest buffer of `len` bytes (0 if none).
    pub const ALLOC: &str = "ttpu_alloc";
    /// `(ptr: i32, len: i32)`: frees a buffer from `ttpu_alloc` or a result.
    pub const DEALLOC: &str = "ttpu_dealloc";
    /// `(ptr: i32, len: i32) -> i64`: a [`crate::LowerRequest`] in, a packed
    /// `ptr << 32 | len` of an [`crate::Envelope`] of [`crate::Lowering`] out.
    pub const LOWER: &str = "ttpu_lower";
    /// `(ptr: i32, len: i32) -> i64`: a [`crate::PolicyRequest`] in, an
    /// envelope of [`crate::PolicyResponse`] out.
    pub const POLICY: &str = "ttpu_policy";
    /// The guest's linear memory.
    pub const MEMORY: &str = "memory";
}

/// The one host import: module `torchtpu`, `log(level: i32, ptr: i32, len: i32)`,
/// a UTF-8 message routed to the host's `tracing` under the plugin's name.
pub mod imports {
    pub const MODULE: &str = "torchtpu";
    pub const LOG: &str = "log";
    pub const LEVEL_ERROR: i32 = 0;
    pub const LEVEL_WARN: i32 = 1;
    pub const LEVEL_INFO: i32 = 2;
    pub const LEVEL_DEBUG: i32 = 3;
    pub const LEVEL_TRACE: i32 = 4;
}

/// Packs a guest `(ptr, len)` into an entry point's `i64` result.
pub fn pack(ptr: u32, len: u32) -> i64 {
    (((ptr as u64) << 32) | len as u64) as i64
}

/// Unpacks an entry point's result into `(ptr, len)`.
pub fn unpack(v: i64) -> (u32, u32) {
    let v = v as u64;
    ((v >> 32) as u32, v as u32)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AbiVersion {
    pub major: u32,
    pub minor: u32,
}

impl AbiVersion {
    pub const CURRENT: AbiVersion = AbiVersion { major: ABI_MAJOR, minor: ABI_MINOR };
}

/// What a plugin declares, read from its custom section without running it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// `[a-z_][a-z0-9_]*`; also the namespace of its ops and policies.
    pub name: String,
    pub version: String,
    pub abi: AbiVersion,
    #[serde(default)]
    pub ops: Vec<OpDecl>,
    /// Policy names, `<plugin>::<policy>`.
    #[serde(default)]
    pub policies: Vec<String>,
}

/// One op a plugin provides.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OpDecl {
    /// An aten-style declaration, e.g.
    /// `rms_norm::rms_norm(Tensor x, Tensor weight, float eps=1e-06) -> Tensor`.
    pub schema: String,
    /// The op (of the same plugin) that computes this op's gradients: it
    /// takes one gradient per tensor return, then this op's arguments, and
    /// returns one gradient per tensor argument.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backward: Option<String>,
    /// How many loop iterations (all `stablehlo.while` bodies together) one
    /// call of the op may run; the host's default when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_loop_iterations: Option<u32>,
}

/// A tensor's type: its sizes and its PyTorch dtype name (`float32`,
/// `bfloat16`, `float16`, `float64`, `int8`, `int16`, `int32`, `int64`,
/// `uint8`, `bool`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TensorType {
    pub shape: Vec<i64>,
    pub dtype: String,
}

/// The host asks a plugin to lower one call of one of its ops.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LowerRequest {
    /// The full op name, `<plugin>::<op>[.overload]`.
    pub op: String,
    /// The tensor arguments, in schema order.
    pub inputs: Vec<TensorType>,
    /// The other arguments by schema name: numbers, booleans, strings,
    /// integer lists, dtype names, or `null` for an omitted optional one.
    #[serde(default)]
    pub attrs: BTreeMap<String, serde_json::Value>,
}

/// A plugin's answer to a [`LowerRequest`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Lowering {
    /// One type per tensor return of the schema.
    pub outputs: Vec<TensorType>,
    /// One self-contained `func.func` whose parameters are `inputs` and
    /// whose results are `outputs` (see ABI.md, "The StableHLO fragment").
    pub stablehlo: String,
}

/// What a fusion policy sees of one recorded op.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OpSummary {
    pub name: String,
    /// The op's results (new tensors and the storages it wrote).
    pub outputs: Vec<TensorType>,
    /// Bytes of those results.
    pub bytes: u64,
}

/// The host asks a policy whether to cut the pending graph.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PolicyRequest {
    /// `<plugin>::<policy>`.
    pub policy: String,
    /// The text after `?` in the name the policy was selected by (empty if none).
    #[serde(default)]
    pub config: String,
    /// Index in the pending graph of `ops[0]`; 0 starts a new graph.
    pub first: u64,
    /// The ops recorded since the previous request about this graph.
    pub ops: Vec<OpSummary>,
    /// Ops in the pending graph, including `ops`.
    pub total_ops: u64,
    /// Result bytes of the pending graph.
    pub total_bytes: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// Keep recording.
    Continue,
    /// Flush the pending graph now.
    Flush,
}

/// A policy's answer. With `continue` and a cut point, the host flushes by
/// itself once the graph reaches the cut and does not ask again about this
/// graph; without one, it asks again after the next op.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyResponse {
    pub decision: Decision,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cut_at_ops: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cut_at_bytes: Option<u64>,
}

/// Every entry point's result: exactly one of `ok` and `err`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Envelope<T> {
    Ok(T),
    Err(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelopes_are_tagged_objects() {
        let ok: Envelope<PolicyResponse> =
            Envelope::Ok(PolicyResponse { decision: Decision::Flush, cut_at_ops: None, cut_at_bytes: None });
        assert_eq!(serde_json::to_string(&ok).unwrap(), r#"{"ok":{"decision":"flush"}}"#);
        let err: Envelope<Lowering> = serde_json::from_str(r#"{"err":"bad shapes"}"#).unwrap();
        assert_eq!(err, Envelope::Err("bad shapes".into()));
    }

    #[test]
    fn pack_round_trips() {
        assert_eq!(unpack(pack(0x1234_5678, 0xffff_fff0)), (0x1234_5678, 0xffff_fff0));
    }
}
