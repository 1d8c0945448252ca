//! Checking a plugin's StableHLO fragment before it reaches a compiler.
//!
//! The fragment is untrusted text that a native compiler would parse, so
//! the host never hands it over. It is tokenized ([`lex`], with MLIR's
//! string escapes and comments), parsed into a typed tree ([`parse`], with
//! bounds on size, tokens, nesting and ops), checked against the rules
//! (plugins/ABI.md, "The StableHLO fragment": one `func.func` whose
//! signature is the call's, only allow-listed ops, no symbols, bounded
//! constants and intermediates), its loops are bounded ([`bound`]), and the
//! function the compiler sees is printed from the tree ([`print`]) under a
//! private name in the plugin's namespace. Whether it also type-checks is
//! settled by a trial compile (see `Runtime::run`).

mod bound;
mod lex;
mod parse;
mod print;

use crate::error::PluginFailure;
use crate::hlo::{Elem, Ty};

pub use parse::{MAX_CONSTANT, MAX_DEPTH, MAX_OPS};

/// The largest fragment accepted, in bytes.
pub const MAX_TEXT: usize = 1 << 20;
/// The most tokens a fragment may have.
pub const MAX_TOKENS: usize = 1 << 18;
/// Loop iterations a fragment may run per call when its manifest does not
/// say, and the most a manifest may declare.
pub const DEFAULT_LOOP_ITERATIONS: i64 = 1_000_000;
pub const MAX_LOOP_ITERATIONS: i64 = 1 << 31;
/// The default per-value memory budget of a fragment's intermediates
/// (`TORCHTPU_PLUGIN_OP_MEMORY_MB`); the op's own inputs and outputs raise
/// it to their size.
pub const DEFAULT_VALUE_BYTES: u64 = 1 << 30;
/// The sum of all intermediates may be this many times the per-value budget.
pub const TOTAL_VALUES: u64 = 16;

pub(crate) type Fail = (PluginFailure, String);

pub(crate) fn invalid(msg: impl Into<String>) -> Fail {
    (PluginFailure::InvalidStableHlo, msg.into())
}

fn mismatch(msg: impl Into<String>) -> Fail {
    (PluginFailure::SignatureMismatch, msg.into())
}

/// What bounds one fragment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Loop iterations, in all loops of the fragment together, per call.
    pub loop_iterations: i64,
    /// The largest intermediate value, in bytes, before the inputs' and
    /// outputs' sizes raise it.
    pub value_bytes: u64,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits { loop_iterations: DEFAULT_LOOP_ITERATIONS, value_bytes: DEFAULT_VALUE_BYTES }
    }
}

/// A fragment ready to splice.
#[derive(Debug, Clone)]
pub struct Checked {
    /// The private function, printed from the checked tree.
    pub text: String,
    /// Whether the function returns one more result than the op: the count
    /// of loop iterations, which must not exceed the bound.
    pub loop_count: bool,
}

/// StableHLO ops a fragment may use: everything that computes on its
/// operands alone. Not here, and so refused: custom calls, infeed, outfeed,
/// send, recv, the collectives, replica and partition ids, composites,
/// tokens and tuples, dynamic shapes, quantization.
const ALLOWED: &[&str] = &[
    "stablehlo.abs",
    "stablehlo.add",
    "stablehlo.and",
    "stablehlo.atan2",
    "stablehlo.batch_norm_grad",
    "stablehlo.batch_norm_inference",
    "stablehlo.batch_norm_training",
    "stablehlo.bitcast_convert",
    "stablehlo.broadcast",
    "stablehlo.broadcast_in_dim",
    "stablehlo.case",
    "stablehlo.cbrt",
    "stablehlo.ceil",
    "stablehlo.cholesky",
    "stablehlo.clamp",
    "stablehlo.compare",
    "stablehlo.concatenate",
    "stablehlo.constant",
    "stablehlo.convert",
    "stablehlo.convolution",
    "stablehlo.cosine",
    "stablehlo.count_leading_zeros",
    "stablehlo.divide",
    "stablehlo.dot",
    "stablehlo.dot_general",
    "stablehlo.dynamic_slice",
    "stablehlo.dynamic_update_slice",
    "stablehlo.exponential",
    "stablehlo.exponential_minus_one",
    "stablehlo.floor",
    "stablehlo.gather",
    "stablehlo.if",
    "stablehlo.iota",
    "stablehlo.is_finite",
    "stablehlo.log",
    "stablehlo.log_plus_one",
    "stablehlo.logistic",
    "stablehlo.map",
    "stablehlo.maximum",
    "stablehlo.minimum",
    "stablehlo.multiply",
    "stablehlo.negate",
    "stablehlo.not",
    "stablehlo.optimization_barrier",
    "stablehlo.or",
    "stablehlo.pad",
    "stablehlo.popcnt",
    "stablehlo.power",
    "stablehlo.reduce",
    "stablehlo.reduce_precision",
    "stablehlo.reduce_window",
    "stablehlo.remainder",
    "stablehlo.reshape",
    "stablehlo.return",
    "stablehlo.reverse",
    "stablehlo.rng_bit_generator",
    "stablehlo.round_nearest_afz",
    "stablehlo.round_nearest_even",
    "stablehlo.rsqrt",
    "stablehlo.scatter",
    "stablehlo.select",
    "stablehlo.select_and_scatter",
    "stablehlo.shift_left",
    "stablehlo.shift_right_arithmetic",
    "stablehlo.shift_right_logical",
    "stablehlo.sign",
    "stablehlo.sine",
    "stablehlo.slice",
    "stablehlo.sort",
    "stablehlo.sqrt",
    "stablehlo.subtract",
    "stablehlo.tan",
    "stablehlo.tanh",
    "stablehlo.transpose",
    "stablehlo.triangular_solve",
    "stablehlo.while",
    "stablehlo.xor",
    "func.return",
];

/// The allow-listed spelling of the op named `name` (decoded), or why not.
pub(crate) fn allowed_op(name: &str) -> Result<&'static str, String> {
    if let Some(&n) = ALLOWED.iter().find(|&&n| n == name) {
        return Ok(n);
    }
    let shown: String = name.chars().take(80).flat_map(char::escape_debug).collect();
    Err(if name.starts_with("stablehlo.") {
        format!("op {shown} is not allowed in a plugin fragment (plugins/ABI.md lists the allowed ops)")
    } else {
        format!("op {shown} is not allowed: fragments use only allow-listed stablehlo.* ops and func.return")
    })
}

fn elem_bytes(e: Elem) -> u64 {
    e.element_type().byte_size() as u64
}

/// The bytes of a value of type `t`, or `None` past u64.
fn bytes(t: &Ty) -> Option<u64> {
    t.dims.iter().try_fold(elem_bytes(t.elem), |acc, &d| acc.checked_mul(u64::try_from(d).ok()?))
}

/// Counts every value the fragment's ops produce against the budget: none
/// larger than `per_value`, all together at most [`TOTAL_VALUES`] times it.
fn check_memory(frag: &parse::Fragment, per_value: u64) -> Result<(), Fail> {
    let total_cap = per_value.saturating_mul(TOTAL_VALUES);
    let mut total: u64 = 0;
    let mut stack: Vec<&parse::Block> = vec![&frag.body];
    while let Some(b) = stack.pop() {
        for op in &b.ops {
            for t in &op.outs {
                let n = bytes(t).filter(|&n| n <= per_value).ok_or_else(|| {
                    invalid(format!(
                        "{} makes a {t} value, over the per-op memory budget of {per_value} bytes per value \
                         (TORCHTPU_PLUGIN_OP_MEMORY_MB, or the op's largest input or output)",
                        op.name
                    ))
                })?;
                total = total.saturating_add(n);
            }
            stack.extend(&op.regions);
        }
    }
    if total > total_cap {
        return Err(invalid(format!(
            "the fragment's values take {total} bytes in all, over the per-op budget of {total_cap} bytes \
             ({TOTAL_VALUES} x {per_value}, TORCHTPU_PLUGIN_OP_MEMORY_MB)"
        )));
    }
    Ok(())
}

fn compare(what: &str, got: &[Ty], want: &[Ty]) -> Result<(), Fail> {
    if got != want {
        let list = |ts: &[Ty]| ts.iter().map(|t| t.to_string()).collect::<Vec<_>>().join(", ");
        return Err(mismatch(format!("the fragment's {what} are ({}), but the call has ({})", list(got), list(want))));
    }
    Ok(())
}

/// Checks `text` against the call's input types and the op's output types;
/// returns the function to splice, printed as the private `@symbol`.
pub fn check(text: &str, inputs: &[Ty], outputs: &[Ty], symbol: &str, limits: Limits) -> Result<Checked, Fail> {
    if text.len() > MAX_TEXT {
        return Err(invalid(format!("the fragment is {} bytes; the limit is {MAX_TEXT}", text.len())));
    }
    let tokens = lex::tokens(text, MAX_TOKENS)?;
    let mut frag = parse::parse(text, &tokens)?;
    compare("parameter types", &frag.params, inputs)?;
    compare("result types", &frag.results, outputs)?;
    match frag.body.ops.iter().position(|op| op.name == "func.return") {
        Some(k) if k + 1 == frag.body.ops.len() => {}
        _ => return Err(invalid("the function body must end with its only func.return")),
    }
    let io = inputs.iter().chain(outputs).filter_map(bytes).max().unwrap_or(0);
    check_memory(&frag, limits.value_bytes.max(io))?;
    let loop_count = bound::bound_loops(&mut frag, limits.loop_iterations.clamp(1, MAX_LOOP_ITERATIONS))?;
    Ok(Checked { text: print::print(&frag, symbol), loop_count })
}

#[cfg(test)]
mod tests;
