//! Plugin ops: the lowering that asks the plugin for a StableHLO fragment,
//! checks it, caches it, and calls it from the program being built.
//!
//! To the rest of the runtime a plugin op is an ordinary [`OpDef`]: its
//! lowering is this module's [`lower`], so strict eager, fused eager and the
//! C ABI's generic op call all reach it the same way. The plugin is asked
//! once per (op, input types, attributes); later lowerings of the same
//! signature (every flush of a fused graph, say) reuse the checked fragment.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use torchtpu_plugin_abi::{exports, Envelope, LowerRequest, Lowering, TensorType};

use super::{fragment, sandbox, Plugin};
use crate::dtype::DType;
use crate::error::{PluginFailure, Result};
use crate::hlo::{Ty, V};
use crate::ops::{Args, ArgType, Cx, Input, OpDef, Schema};
use crate::tensor::Scalar;

/// A checked fragment, ready to splice.
pub(crate) struct Spliced {
    symbol: String,
    text: Arc<str>,
    outputs: Vec<Ty>,
    /// The fragment's loop bound, when it has loops: the function then
    /// returns its iteration count after `outputs`.
    loop_bound: Option<i64>,
}

/// Checked fragments kept per plugin before the cache starts over.
const CACHE_LIMIT: usize = 4096;

/// The registry entry of a plugin op.
pub(crate) fn def(plugin: &Arc<Plugin>, schema: Schema) -> OpDef {
    let p = Arc::downgrade(plugin);
    let op: Arc<str> = schema.name.as_str().into();
    let sch = schema.clone();
    let declared = plugin
        .manifest
        .ops
        .iter()
        .find(|d| d.schema.split('(').next().map(str::trim) == Some(schema.name.as_str()))
        .and_then(|d| d.max_loop_iterations);
    let limits = fragment_limits(declared);
    let mut def = OpDef::new(
        schema,
        Arc::new(move |cx: &mut Cx, args: &Args| {
            // The host keeps every loaded plugin for the process's life.
            let plugin = p.upgrade().ok_or_else(|| crate::Error::Internal(format!("{op}: its plugin was unloaded")))?;
            lower(&plugin, &sch, limits, cx, args)
        }),
    );
    // Scalars are attributes of the fragment (it cannot take runtime
    // arguments), so they are part of the signature.
    def.static_scalars = true;
    def.plugin = Some(plugin.manifest.name.as_str().into());
    def
}

fn tensor_type(ty: &Ty) -> TensorType {
    TensorType { shape: ty.dims.to_vec(), dtype: ty.dtype().name().to_string() }
}

fn dtype_named(name: &str) -> Option<DType> {
    DType::ALL.into_iter().find(|d| d.name() == name)
}

fn attr(op: &str, name: &str, input: &Input) -> Result<serde_json::Value> {
    use serde_json::Value as J;
    Ok(match input {
        Input::None => J::Null,
        Input::Int(x) => J::from(*x),
        // JSON has no NaN or infinity: those arrive as null.
        Input::Float(x) => J::from(*x),
        Input::Bool(x) => J::from(*x),
        Input::Str(s) => J::from(s.as_str()),
        Input::Ints(xs) => J::from(xs.clone()),
        Input::DType(d) => J::from(d.name()),
        Input::StaticScalar(Scalar::Int(x)) => J::from(*x),
        Input::StaticScalar(Scalar::Float(x)) => J::from(*x),
        Input::StaticScalar(Scalar::Bool(x)) => J::from(*x),
        other => {
            return Err(crate::Error::Internal(format!("{op}: argument {name} ({other:?}) cannot be sent to a plugin")))
        }
    })
}

/// The fragment limits of an op whose manifest declares `loops` (checked
/// at load to lie in 1 to `MAX_LOOP_ITERATIONS`) or not:
/// the loop bound, and the per-value memory budget from
/// `TORCHTPU_PLUGIN_OP_MEMORY_MB`.
fn fragment_limits(loops: Option<u32>) -> fragment::Limits {
    let d = fragment::Limits::default();
    let mb = std::env::var("TORCHTPU_PLUGIN_OP_MEMORY_MB").ok().and_then(|v| v.trim().parse::<u64>().ok());
    fragment::Limits {
        loop_iterations: loops.map_or(d.loop_iterations, i64::from),
        value_bytes: mb.map_or(d.value_bytes, |m| m.saturating_mul(1 << 20)),
    }
}

/// Lowers one call of a plugin op into `cx`.
fn lower(plugin: &Arc<Plugin>, schema: &Schema, limits: fragment::Limits, cx: &mut Cx, args: &Args) -> Result<Vec<V>> {
    let op = schema.name.as_str();
    let mut operands = Vec::new();
    let mut inputs = Vec::new();
    let mut attrs = BTreeMap::new();
    for (i, a) in schema.args.iter().enumerate() {
        match (a.ty == ArgType::Tensor, args.get(i)) {
            (true, Input::Tensor(v)) => {
                operands.push(*v);
                inputs.push(cx.ty(*v).clone());
            }
            (true, other) => return Err(cx.err(format!("argument {} must be a tensor, got {other:?}", a.name))),
            (false, input) => {
                attrs.insert(a.name.clone(), attr(op, &a.name, input)?);
            }
        }
    }
    let request = LowerRequest { op: op.to_string(), inputs: inputs.iter().map(tensor_type).collect(), attrs };
    let key = serde_json::to_string(&request).expect("requests serialize");
    let cached = plugin.lowerings.lock().get(&key).cloned();
    let spliced = match cached {
        Some(s) => {
            plugin.stats.lowering_hits.fetch_add(1, Ordering::Relaxed);
            s
        }
        None => {
            plugin.stats.lowering_misses.fetch_add(1, Ordering::Relaxed);
            let s = Arc::new(ask(plugin, schema, limits, &key, &inputs).map_err(|e| {
                plugin.stats.failures.fetch_add(1, Ordering::Relaxed);
                sandbox::error(&plugin.manifest.name, Some(op), e)
            })?);
            let mut cache = plugin.lowerings.lock();
            if cache.len() >= CACHE_LIMIT {
                cache.clear();
            }
            cache.insert(key, s.clone());
            s
        }
    };
    let Some(bound) = spliced.loop_bound else {
        return Ok(cx.f.call_private(&spliced.symbol, &spliced.text, &operands, &spliced.outputs));
    };
    let mut types = spliced.outputs.clone();
    types.push(Ty::scalar(crate::hlo::Elem::I64));
    let mut results = cx.f.call_private(&spliced.symbol, &spliced.text, &operands, &types);
    let count = results.pop().expect("the loop count is the last result");
    let declared = if bound == fragment::DEFAULT_LOOP_ITERATIONS { "the default" } else { "the manifest's max_loop_iterations" };
    cx.check_plugin_loops(count, bound, || format!("{declared}"));
    Ok(results)
}

/// Asks the plugin, then checks its answer.
fn ask(
    plugin: &Plugin,
    schema: &Schema,
    limits: fragment::Limits,
    request: &str,
    inputs: &[Ty],
) -> std::result::Result<Spliced, (PluginFailure, String)> {
    plugin.stats.calls.fetch_add(1, Ordering::Relaxed);
    let bytes = plugin.sandbox.call(exports::LOWER, request.as_bytes())?;
    let lowering: Lowering = decode(&bytes)?;
    let op = &schema.name;
    if lowering.outputs.len() != schema.returns.len() {
        return Err((
            PluginFailure::SignatureMismatch,
            format!("{op} returns {} tensors, but the plugin described {} outputs", schema.returns.len(), lowering.outputs.len()),
        ));
    }
    let mut outputs = Vec::with_capacity(lowering.outputs.len());
    for (k, t) in lowering.outputs.iter().enumerate() {
        let dtype = dtype_named(&t.dtype).ok_or_else(|| {
            (PluginFailure::InvalidOutput, format!("output {k} has dtype {:?}, which is not a torchtpu dtype", t.dtype))
        })?;
        if t.shape.iter().any(|&d| d < 0) {
            return Err((PluginFailure::InvalidOutput, format!("output {k} has a negative size: {:?}", t.shape)));
        }
        crate::shape::checked_numel(&format!("{op}: output {k}"), &t.shape, dtype.size())
            .map_err(|e| (PluginFailure::InvalidOutput, e.to_string()))?;
        outputs.push(Ty::new(dtype, &t.shape));
    }
    // A cryptographic hash: two requests that shared a symbol in one
    // program would call the wrong function.
    use sha2::Digest;
    let digest = sha2::Sha256::digest(request.as_bytes());
    let hex: String = digest[..12].iter().map(|b| format!("{b:02x}")).collect();
    let symbol = format!("ttpu_plugin_{}_{hex}", op.replace("::", "__").replace('.', "_"));
    let checked = fragment::check(&lowering.stablehlo, inputs, &outputs, &symbol, limits)?;
    let loop_bound = checked.loop_count.then_some(limits.loop_iterations);
    Ok(Spliced { symbol, text: checked.text.into(), outputs, loop_bound })
}

/// Parses an entry point's response envelope.
pub(crate) fn decode<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> std::result::Result<T, (PluginFailure, String)> {
    let text = std::str::from_utf8(bytes).map_err(|e| {
        (PluginFailure::InvalidOutput, format!("the response is not UTF-8 ({e}); it must be a JSON envelope"))
    })?;
    let env: Envelope<T> = serde_json::from_str(text).map_err(|e| {
        let head: String = text.chars().take(120).collect();
        (PluginFailure::InvalidOutput, format!("the response is not the JSON the ABI defines ({e}): {head:?}"))
    })?;
    match env {
        Envelope::Ok(v) => Ok(v),
        Envelope::Err(msg) => Err((PluginFailure::Reported, msg)),
    }
}

/// Lowerings cached per plugin, by request.
pub(crate) type Cache = parking_lot::Mutex<HashMap<String, Arc<Spliced>>>;
