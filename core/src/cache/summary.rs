//! Graph summaries, their on-disk JSON form, and recompile explanations.

use serde::{Deserialize, Serialize};

use crate::dtype::DType;

/// One node of a flushed graph, as explanations print it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeSummary {
    /// The op name (`aten::mm`).
    pub op: String,
    /// Dtype and shape of each input, in argument order.
    pub inputs: Vec<(DType, Vec<i64>)>,
    /// The op's attributes, printed (`dim=1, keepdim=false`).
    pub attrs: String,
    /// For each input that reads part of its storage (a view): the storage's
    /// element count and the view's strides, both of which the program is
    /// built for. Empty when every input is a whole storage.
    pub views: Vec<Option<ViewOf>>,
}

/// The storage behind an input that is a view (see [`NodeSummary::views`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ViewOf {
    pub storage_numel: i64,
    pub strides: Vec<i64>,
}

/// What a flushed graph looks like: its nodes in the canonical order of the
/// flush, and the dtype and shape of each program output.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GraphSummary {
    pub nodes: Vec<NodeSummary>,
    pub outputs: Vec<(DType, Vec<i64>)>,
    /// A strict-mode op's program, not a fused graph's: a miss is explained
    /// by programs of its own kind first (a strict op and a fused graph of
    /// the same op are different programs).
    pub strict: bool,
}

// The on-disk form. Dtypes are stored as their PyTorch codes so the format
// does not depend on how `DType` is spelled in Rust.
#[derive(Serialize, Deserialize)]
struct NodeRecord {
    op: String,
    inputs: Vec<(i32, Vec<i64>)>,
    attrs: String,
    /// Absent in files written before views were summarized.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    views: Vec<Option<ViewOf>>,
}

#[derive(Serialize, Deserialize)]
struct GraphRecord {
    nodes: Vec<NodeRecord>,
    outputs: Vec<(i32, Vec<i64>)>,
    /// Absent in files written before strict-mode ops were cached.
    #[serde(default)]
    strict: bool,
}

impl GraphSummary {
    pub(super) fn to_json(&self) -> Vec<u8> {
        let values = |v: &[(DType, Vec<i64>)]| v.iter().map(|(d, s)| (d.code(), s.clone())).collect();
        let record = GraphRecord {
            nodes: self
                .nodes
                .iter()
                .map(|n| NodeRecord {
                    op: n.op.clone(),
                    inputs: values(&n.inputs),
                    attrs: n.attrs.clone(),
                    views: n.views.clone(),
                })
                .collect(),
            outputs: values(&self.outputs),
            strict: self.strict,
        };
        serde_json::to_vec(&record).expect("a graph summary always serializes")
    }

    pub(super) fn from_json(bytes: &[u8]) -> Option<GraphSummary> {
        let record: GraphRecord = serde_json::from_slice(bytes).ok()?;
        let values = |v: Vec<(i32, Vec<i64>)>| -> Option<Vec<(DType, Vec<i64>)>> {
            v.into_iter().map(|(c, s)| Some((DType::from_code(c)?, s))).collect()
        };
        let nodes = record
            .nodes
            .into_iter()
            .map(|n| Some(NodeSummary { op: n.op, inputs: values(n.inputs)?, attrs: n.attrs, views: n.views }))
            .collect::<Option<Vec<_>>>()?;
        Some(GraphSummary { nodes, outputs: values(record.outputs)?, strict: record.strict })
    }
}

/// Why `graph` did not hit: the nearest known graph and the first difference
/// (an op, an input shape, a dtype, an attribute, or a different node count or
/// outputs), e.g. "no cached program matches: nearest cached graph (12 nodes)
/// differs at node 3 (aten::mm): input 0 shape [8, 32] vs [8, 16]". The first
/// value of a pair is `graph`'s, the second the cached graph's. If nothing is
/// known: "first graph compiled (no cached programs)".
///
/// Nodes are compared position by position: the graphs are canonicalized
/// before they are summarized, so the same program has its nodes in the same
/// order. A node inserted early makes every later position differ; the first
/// difference named is still the right one.
pub fn explain(graph: &GraphSummary, known: &[GraphSummary]) -> String {
    explain_among(graph, known)
}

pub(super) fn explain_among<'a>(graph: &GraphSummary, known: impl IntoIterator<Item = &'a GraphSummary>) -> String {
    let all: Vec<&GraphSummary> = known.into_iter().collect();
    if all.is_empty() {
        return "first graph compiled (no cached programs)".to_string();
    }
    let mut known = all.clone();
    if known.iter().any(|k| k.strict == graph.strict) {
        known.retain(|k| k.strict == graph.strict);
    }
    if let [node] = graph.nodes.as_slice() {
        // One op alone (a strict-mode op): only programs of that same op
        // alone explain it; another op's program says nothing useful.
        known.retain(|k| matches!(k.nodes.as_slice(), [n] if n.op == node.op));
        if known.is_empty() {
            return alone_for_the_first_time(node, &all);
        }
    }
    // `min_by_key` keeps the first of equals, so callers list preferred
    // (most recent) graphs first.
    let Some((_, nearest)) = known.into_iter().map(|k| (distance(graph, k), k)).min_by_key(|(d, _)| *d) else {
        return "first graph compiled (no cached programs)".to_string();
    };
    let n = nearest.nodes.len();
    format!(
        "no cached program matches: nearest cached graph ({n} node{}) {}",
        if n == 1 { "" } else { "s" },
        first_difference(graph, nearest)
    )
}

/// Why an op alone missed when no cached program runs it alone. In fused
/// mode that is an op whose shapes changed between steps, which now runs
/// alone (graph/shape_watch.rs): the fused graph it ran in before is named,
/// with the difference.
fn alone_for_the_first_time(node: &NodeSummary, all: &[&GraphSummary]) -> String {
    let inside = all.iter().flat_map(|k| k.nodes.iter().filter(|n| n.op == node.op).map(move |n| (*k, n)));
    let nearest = inside.min_by_key(|(k, n)| (u8::from(node_detail(node, n).is_some()), k.nodes.len()));
    match nearest {
        Some((k, n)) => format!(
            "no cached program runs {} alone; the nearest cached graph that runs it ({} nodes) {}",
            node.op,
            k.nodes.len(),
            match node_detail(node, n) {
                Some(detail) => format!("has it with {detail}"),
                None => "has it with the same inputs and attributes".to_string(),
            }
        ),
        None => format!("first program of {} (no cached program runs this op alone)", node.op),
    }
}

/// How far apart two graphs are. A different op weighs more than a different
/// shape, so a graph whose batch size changed finds its old self as the
/// nearest neighbour rather than some unrelated graph of the same length.
fn distance(a: &GraphSummary, b: &GraphSummary) -> u64 {
    const OP: u64 = 4;
    let nodes: u64 = a
        .nodes
        .iter()
        .zip(&b.nodes)
        .map(|(x, y)| if x.op != y.op { OP } else { u64::from(node_detail(x, y).is_some()) })
        .sum();
    let count = OP * a.nodes.len().abs_diff(b.nodes.len()) as u64;
    let outputs = a.outputs.len().abs_diff(b.outputs.len()) as u64
        + a.outputs.iter().zip(&b.outputs).filter(|(x, y)| x != y).count() as u64;
    nodes + count + outputs
}

fn first_difference(g: &GraphSummary, k: &GraphSummary) -> String {
    let differing = g.nodes.iter().zip(&k.nodes).filter(|(a, b)| *a != *b).count();
    let more = if differing > 1 { format!("; {differing} nodes differ in all") } else { String::new() };
    for (i, (a, b)) in g.nodes.iter().zip(&k.nodes).enumerate() {
        if a.op != b.op {
            return format!("differs at node {i}: op {} vs {}{more}", a.op, b.op);
        }
        if let Some(detail) = node_detail(a, b) {
            return format!("differs at node {i} ({}): {detail}{more}", a.op);
        }
    }
    let (gn, kn) = (g.nodes.len(), k.nodes.len());
    if gn != kn {
        let next = if gn > kn {
            format!("first extra node {kn}: {}", g.nodes[kn].op)
        } else {
            format!("the cached graph goes on with node {gn}: {}", k.nodes[gn].op)
        };
        return format!("differs in node count: {gn} nodes vs {kn} ({next})");
    }
    if g.outputs.len() != k.outputs.len() {
        return format!("differs in outputs: {} outputs vs {}", g.outputs.len(), k.outputs.len());
    }
    for (j, (a, b)) in g.outputs.iter().zip(&k.outputs).enumerate() {
        if let Some(d) = value_difference(a, b) {
            return format!("differs at output {j}: {d}");
        }
    }
    "has the same ops, input shapes, dtypes, attributes and outputs: the program differs elsewhere \
     (constants, compile options or plugin)"
        .to_string()
}

/// The first difference between two nodes with the same op.
fn node_detail(a: &NodeSummary, b: &NodeSummary) -> Option<String> {
    if a.inputs.len() != b.inputs.len() {
        return Some(format!("{} inputs vs {}", a.inputs.len(), b.inputs.len()));
    }
    for (j, (x, y)) in a.inputs.iter().zip(&b.inputs).enumerate() {
        if let Some(d) = value_difference(x, y) {
            return Some(format!("input {j} {d}"));
        }
    }
    for j in 0..a.inputs.len() {
        let (x, y) = (a.views.get(j).cloned().flatten(), b.views.get(j).cloned().flatten());
        if x != y {
            return Some(format!("input {j} {}", view_difference(&a.inputs[j].1, x.as_ref(), y.as_ref())));
        }
    }
    (a.attrs != b.attrs).then(|| format!("attributes {:?} vs {:?}", a.attrs, b.attrs))
}

/// How the storages behind two inputs of the same shape differ. A program
/// reads a view out of its whole storage, so a small view of a tensor that
/// grows (the last token of a growing sequence) compiles for each size of
/// the storage: the explanation says so rather than leave a mystery.
fn view_difference(sizes: &[i64], a: Option<&ViewOf>, b: Option<&ViewOf>) -> String {
    let whole = |v: Option<&ViewOf>| match v {
        Some(v) => format!("a view with strides {:?} of a {}-element storage", v.strides, v.storage_numel),
        None => "a whole storage".to_string(),
    };
    match (a, b) {
        (Some(x), Some(y)) if x.storage_numel != y.storage_numel => format!(
            "(a view {sizes:?}) reads a storage of {} elements vs {}{}: a view into a tensor whose size changed \
             compiles for each size of that tensor",
            x.storage_numel,
            y.storage_numel,
            if x.strides != y.strides { format!(", strides {:?} vs {:?}", x.strides, y.strides) } else { String::new() },
        ),
        (Some(x), Some(y)) => format!("(a view {sizes:?}) strides {:?} vs {:?}", x.strides, y.strides),
        _ => format!("(shape {sizes:?}) is {} vs {}", whole(a), whole(b)),
    }
}

fn value_difference((da, sa): &(DType, Vec<i64>), (db, sb): &(DType, Vec<i64>)) -> Option<String> {
    match (da != db, sa != sb) {
        (false, false) => None,
        (true, false) => Some(format!("dtype {da} vs {db}")),
        (false, true) => Some(format!("shape {sa:?} vs {sb:?}")),
        (true, true) => Some(format!("{da}{sa:?} vs {db}{sb:?}")),
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// A one-node graph; the disk format's tests use it too.
    pub(in crate::cache) fn summary(op: &str) -> GraphSummary {
        GraphSummary {
            nodes: vec![NodeSummary {
                op: op.into(),
                inputs: vec![(DType::F32, vec![2, 3])],
                attrs: "dim=1".into(),
                ..Default::default()
            }],
            outputs: vec![(DType::BF16, vec![2])],
            strict: false,
        }
    }

    #[test]
    fn one_op_programs_are_explained_by_the_same_op() {
        let mut wide = summary("aten::add.Tensor");
        wide.nodes[0].inputs[0].1 = vec![4, 3];
        let known = [summary("aten::mul.Tensor"), summary("aten::add.Tensor")];
        assert_eq!(
            explain(&wide, &known),
            "no cached program matches: nearest cached graph (1 node) differs at node 0 (aten::add.Tensor): \
             input 0 shape [4, 3] vs [2, 3]"
        );
        assert_eq!(
            explain(&summary("aten::sub.Tensor"), &known),
            "first program of aten::sub.Tensor (no cached program runs this op alone)"
        );
        // An op that ran only inside a fused graph (and now runs alone, its
        // shape having changed) is explained by that graph's node.
        let mut fused = summary("aten::mul.Scalar");
        fused.nodes.push(summary("aten::relu").nodes.remove(0));
        let mut relu = summary("aten::relu");
        relu.strict = true;
        relu.nodes[0].inputs[0].1 = vec![8, 32];
        assert_eq!(
            explain(&relu, &[fused]),
            "no cached program runs aten::relu alone; the nearest cached graph that runs it (2 nodes) has it \
             with input 0 shape [8, 32] vs [2, 3]"
        );
        // A strict op is explained by strict ops where there are any.
        let mut strict = summary("aten::add.Tensor");
        strict.strict = true;
        strict.nodes[0].inputs[0].1 = vec![9, 3];
        let with_strict = [known[1].clone(), strict];
        let mut wide_strict = wide.clone();
        wide_strict.strict = true;
        assert!(explain(&wide_strict, &with_strict).ends_with("input 0 shape [4, 3] vs [9, 3]"));
        assert!(explain(&wide, &with_strict).ends_with("input 0 shape [4, 3] vs [2, 3]"));
    }

    #[test]
    fn a_view_of_a_storage_that_grew_is_named() {
        // `ids[:, -1]` of a [2, 17] and of a [2, 16] tensor: the same shape,
        // read from storages of different sizes.
        let last = |n: i64| {
            let mut s = summary("aten::isin.Tensor_Tensor");
            s.nodes[0].inputs[0].1 = vec![2];
            s.nodes[0].views = vec![Some(ViewOf { storage_numel: 2 * n, strides: vec![n] })];
            s
        };
        assert_eq!(
            explain(&last(17), &[last(16)]),
            "no cached program matches: nearest cached graph (1 node) differs at node 0 (aten::isin.Tensor_Tensor): \
             input 0 (a view [2]) reads a storage of 34 elements vs 32, strides [17] vs [16]: a view into a tensor \
             whose size changed compiles for each size of that tensor"
        );
        let mut whole = last(1);
        whole.nodes[0].views.clear();
        assert!(
            explain(&last(1), &[whole]).ends_with(
                "input 0 (shape [2]) is a view with strides [1] of a 2-element storage vs a whole storage"
            ),
            "{}",
            explain(&last(1), &[last(1)])
        );
        assert_eq!(GraphSummary::from_json(&last(5).to_json()), Some(last(5)));
    }

    #[test]
    fn summary_json_round_trip() {
        let mut s = summary("aten::sum.dim_IntList");
        assert_eq!(GraphSummary::from_json(&s.to_json()), Some(s.clone()));
        s.strict = true;
        assert_eq!(GraphSummary::from_json(&s.to_json()), Some(s));
        // Files written before `strict` existed read as fused graphs.
        let old = GraphSummary::from_json(b"{\"nodes\":[],\"outputs\":[[6,[2]]]}").unwrap();
        assert!(!old.strict);
        assert_eq!(GraphSummary::from_json(b"{\"nodes\":[],\"outputs\":[[99,[]]]}"), None, "unknown dtype code");
    }
}
