//! The fragment checker against hand-written hostile fragments (the fuzz
//! over the example plugins' fragments is in core/tests/plugins_fragments.rs).

use super::*;
use crate::hlo::Elem;

fn t(dims: &[i64]) -> Ty {
    Ty::new(Elem::F32, dims)
}

fn run(text: &str) -> Result<Checked, Fail> {
    check(text, &[t(&[4]), t(&[4])], &[t(&[4])], "p__f", Limits::default())
}

fn refused(text: &str, needle: &str) {
    let (k, m) = run(text).expect_err(needle);
    assert_eq!(k, PluginFailure::InvalidStableHlo, "{m}");
    assert!(m.contains(needle), "{m:?} should mention {needle:?}");
}

/// As the SDK prints it: generic ops, a reduction with a region.
const GOOD: &str = r#"func.func @f(%v0: tensor<4xf32>, %v1: tensor<4xf32>) -> (tensor<4xf32>) {
  %v2 = "stablehlo.add"(%v0, %v1) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %v3 = "stablehlo.constant"() {value = dense<0x3F800000> : tensor<f32>} : () -> tensor<f32>
  %v4 = "stablehlo.reduce"(%v2, %v3) ({
  ^bb0(%r4a: tensor<f32>, %r4b: tensor<f32>):
    %r4s = "stablehlo.add"(%r4a, %r4b) : (tensor<f32>, tensor<f32>) -> tensor<f32>
    "stablehlo.return"(%r4s) : (tensor<f32>) -> ()
  }) {dimensions = array<i64: 0>} : (tensor<4xf32>, tensor<f32>) -> tensor<f32>
  %v5 = "stablehlo.broadcast_in_dim"(%v4) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<4xf32>
  %v6 = "stablehlo.compare"(%v2, %v5) {comparison_direction = #stablehlo<comparison_direction GT>} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
  %v7 = "stablehlo.select"(%v6, %v2, %v5) : (tensor<4xi1>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  "func.return"(%v7) : (tensor<4xf32>) -> ()
}"#;

#[test]
fn accepts_and_prints_canonically() {
    let c = run(GOOD).unwrap();
    assert!(!c.loop_count);
    let out = &c.text;
    assert!(out.starts_with("func.func private @p__f(%0: tensor<4xf32>, %1: tensor<4xf32>) -> (tensor<4xf32>) {\n"), "{out}");
    assert!(out.contains("%2 = \"stablehlo.add\"(%0, %1) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>"), "{out}");
    assert!(out.contains("{value = dense<0x3F800000> : tensor<f32>}"), "{out}");
    assert!(out.contains("%7 = \"stablehlo.reduce\"(%2, %3) ({\n    ^bb0(%4: tensor<f32>, %5: tensor<f32>):"), "{out}");
    assert!(out.contains("{comparison_direction = #stablehlo<comparison_direction GT>}"), "{out}");
    assert!(out.contains("{dimensions = array<i64 : 0>}"), "{out}");
    // Printing is a fixed point: the printed text checks to itself.
    assert_eq!(run(out).unwrap().text, *out);
    let multi = "func.func public @g(%x: tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<f32>) {\n  %c = \"stablehlo.constant\"() {value = dense<1.0> : tensor<f32>} : () -> tensor<f32>\n  \"func.return\"(%x, %c) : (tensor<2x3xf32>, tensor<f32>) -> ()\n}\n";
    check(multi, &[t(&[2, 3])], &[t(&[2, 3]), t(&[])], "s", Limits::default()).unwrap();
}

#[test]
fn multi_result_ops_and_result_numbers() {
    let text = r#"func.func @f(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf32> {
  %r:2 = "stablehlo.optimization_barrier"(%a, %b) : (tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>)
  %s = "stablehlo.add"(%r#0, %r#1) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  "func.return"(%s) : (tensor<4xf32>) -> ()
}"#;
    let out = run(text).unwrap().text;
    assert!(out.contains("%2:2 = \"stablehlo.optimization_barrier\"") && out.contains("(%2#0, %2#1)"), "{out}");
    refused(&text.replace("(%r#0, %r#1)", "(%r, %r#1)"), "names 2 values");
    refused(&text.replace("%r#1)", "%r#2)"), "names 2 values");
}

#[test]
fn signature_must_match() {
    let (k, m) = check(GOOD, &[t(&[3]), t(&[4])], &[t(&[4])], "s", Limits::default()).unwrap_err();
    assert_eq!(k, PluginFailure::SignatureMismatch);
    assert!(m.contains("tensor<4xf32>, tensor<4xf32>") && m.contains("tensor<3xf32>"), "{m}");
    let (k, _) = check(GOOD, &[t(&[4]), t(&[4])], &[t(&[2, 2])], "s", Limits::default()).unwrap_err();
    assert_eq!(k, PluginFailure::SignatureMismatch);
}

#[test]
fn denied_ops_are_refused_after_decoding_every_spelling() {
    let add = "\"stablehlo.add\"";
    for spelled in [
        r#""stablehlo.custom_call""#,
        r#""stablehlo.custom\5Fcall""#,
        r#""stablehlo.custom\5fcall""#,
        r#""\73tablehlo.custom_call""#,
        r#""stablehlo\2Ecustom_call""#,
        r#""stablehlo.infeed""#,
        r#""stablehlo.outfeed""#,
        r#""stablehlo.all_reduce""#,
        r#""stablehlo.send""#,
        r#""stablehlo.recv""#,
        r#""stablehlo.replica_id""#,
        r#""stablehlo.composite""#,
        r#""func.call""#,
        r#""chlo.erf""#,
        r#""stablehlo.add\00""#,
    ] {
        refused(&GOOD.replacen(add, spelled, 1), "is not allowed");
    }
    // The custom form is refused too, by name first.
    refused(&GOOD.replacen(add, "stablehlo.custom_call", 1), "is not allowed");
    refused(&GOOD.replacen("\"stablehlo.select\"(%v6, %v2, %v5)", "stablehlo.select %v6, %v2, %v5", 1), "generic form");
}

#[test]
fn comments_and_strings_cannot_hide_text_from_the_parser() {
    // A `}` hidden in a comment: MLIR and the parser both skip it, so the
    // text after the function is seen as what it is.
    let hidden = GOOD.replacen("\"func.return\"(%v7) : (tensor<4xf32>) -> ()\n}", "\"func.return\"(%v7) : (tensor<4xf32>) -> () // }\n}\nfunc.func @evil() {\n  \"func.return\"() : () -> ()\n}", 1);
    refused(&hidden, "text after the function");
    // A closing brace inside a string is no brace.
    let s = GOOD.replacen("comparison_direction GT>", "comparison_direction GT>, x = \"}}}\"", 1);
    let out = run(&s).unwrap().text;
    assert!(out.contains("x = \"}}}\""), "{out}");
    // A string that ends the line early, and an escape MLIR does not know.
    refused(&GOOD.replacen("\"stablehlo.add\"", "\"stablehlo.add", 1), "unterminated");
    refused(&GOOD.replacen("\"stablehlo.add\"", "\"stablehlo.a\\zz\"", 1), "escape");
    refused(&format!("{GOOD}\n{{-# dialect_resources: {{}} #-}}"), "without a name");
}

#[test]
fn symbols_dialects_and_resources_are_refused() {
    // Discardable attributes steer the compiler (shardings, frontend and
    // backend attributes): only an op's own attribute names pass.
    let cases = [
        ("{dimensions = array<i64: 0>}", "{dimensions = array<i64: 0>, mhlo.sharding = \"{replicated}\"}", "attribute name mhlo.sharding"),
        ("{dimensions = array<i64: 0>}", "{dimensions = array<i64: 0>, _xla_stream = 1}", "attribute name _xla_stream"),
        ("{dimensions = array<i64: 0>}", "{dimensions = array<i64: 0>, f = @system}", "symbol reference @system"),
        ("#stablehlo<comparison_direction GT>", "#evil<x>", "only #stablehlo"),
        ("dense<0x3F800000>", "dense_resource<blob>", "dense_resource"),
        ("tensor<f32>} : ()", "!stablehlo.token} : ()", "dialect types"),
        ("-> tensor<4xi1>", "-> tensor<?xi1>", "dynamic shapes"),
        ("-> tensor<4xi1>", "-> tensor<4xi1, #enc>", "encodings"),
        ("-> tensor<4xi1>", "-> tensor<4xcomplex<f32>>", "tensor type"),
        ("(tensor<4xf32>) -> ()\n}", "(tensor<4xf32>) -> () loc(\"x\")\n}", "locations"),
        ("-> (tensor<4xf32>) {", "-> (tensor<4xf32>) attributes {x} {", "function attributes"),
        ("%v1: tensor<4xf32>)", "%v1: tensor<4xf32> {a.b = 1})", "argument attributes"),
    ];
    for (from, to, needle) in cases {
        assert!(GOOD.contains(from), "{from}");
        refused(&GOOD.replacen(from, to, 1), needle);
    }
}

#[test]
fn structure_is_checked() {
    refused(&format!("module {{ {GOOD} }}"), "must be one `func.func`");
    refused(&format!("{GOOD}\nfunc.func @second() {{}}"), "text after the function");
    refused(&GOOD[..GOOD.len() - 1], "expected `}`");
    refused(&GOOD.replacen("(%v0, %v1)", "(%v0, %nope)", 1), "undefined value %nope");
    refused(&GOOD.replacen("%v3 =", "%v2 =", 1), "redefinition of %v2");
    refused(&GOOD.replacen("(%v0, %v1) : (tensor<4xf32>, tensor<4xf32>)", "(%v0, %v1) : (tensor<4xf32>, tensor<3xf32>)", 1), "operand 1 is tensor<4xf32>");
    refused(&GOOD.replacen("  \"func.return\"(%v7) : (tensor<4xf32>) -> ()\n", "", 1), "must end with its only func.return");
    refused(&GOOD.replacen("dense<0x3F800000>", &format!("dense<[{}1]>", "1, ".repeat(MAX_CONSTANT / 3)), 1), "constant");
    // Sibling regions may reuse names; nothing may shadow.
    let shadow = GOOD.replacen("%r4a: tensor<f32>", "%v0: tensor<f32>", 1);
    refused(&shadow, "redefinition of %v0");
}

#[test]
fn nesting_tokens_and_size_are_bounded() {
    for (open, close) in [("[", "]"), ("(", ")"), ("{", "}"), ("<", ">")] {
        let deep = format!("{}1{}", open.repeat(10_000), close.repeat(10_000));
        refused(&GOOD.replacen("array<i64: 0>", &format!("array<i64: 0>, x = {deep}"), 1), "nest more than");
    }
    // Nested regions count too.
    let mut region = String::from("\"stablehlo.return\"(%a0) : (tensor<f32>) -> ()");
    for k in 0..40 {
        region = format!("%a{k} = \"stablehlo.constant\"() {{value = dense<1.0> : tensor<f32>}} : () -> tensor<f32>\n%m{k} = \"stablehlo.map\"(%a{k}) ({{\n^bb0(%q{k}: tensor<f32>):\n{region}\n}}) {{dimensions = array<i64>}} : (tensor<f32>) -> tensor<f32>\n\"stablehlo.return\"(%m{k}) : (tensor<f32>) -> ()");
    }
    refused(&GOOD.replacen("%v2 = \"stablehlo.add\"", &format!("{region}\n%v2 = \"stablehlo.add\""), 1), "nest more than");
    // A wide dictionary is linear, not quadratic, to check.
    let wide: Vec<String> = (0..60_000).map(|k| format!("a{k}")).collect();
    let start = std::time::Instant::now();
    let text = GOOD.replacen("{dimensions = array<i64: 0>}", &format!("{{dimensions = array<i64: 0>, {}}}", wide.join(", ")), 1);
    run(&text).unwrap();
    assert!(start.elapsed() < std::time::Duration::from_secs(2), "{:?}", start.elapsed());
    let many = format!("func.func @f() {{ {} }}", "x ".repeat(MAX_TOKENS + 1));
    assert!(check(&many, &[], &[], "s", Limits::default()).unwrap_err().1.contains("tokens"));
    let big = "x".repeat(MAX_TEXT + 1);
    assert!(check(&big, &[], &[], "s", Limits::default()).unwrap_err().1.contains("limit"));
}

#[test]
fn intermediates_count_against_the_memory_budget() {
    // An 8 GiB intermediate from a [4] input.
    let huge = GOOD.replacen(
        "%v5 = \"stablehlo.broadcast_in_dim\"(%v4) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<4xf32>",
        "%big = \"stablehlo.broadcast_in_dim\"(%v4) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<2147483648xf32>\n  %v5 = \"stablehlo.broadcast_in_dim\"(%v4) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<4xf32>",
        1,
    );
    refused(&huge, "memory budget");
    // Dimensions whose product overflows.
    refused(&huge.replace("tensor<2147483648xf32>", "tensor<4294967296x4294967296x16xf32>"), "memory budget");
    // Many values, each under the budget, over the total.
    let limits = Limits { value_bytes: 1 << 10, ..Limits::default() };
    let mut many = String::new();
    for k in 0..20 {
        many.push_str(&format!("  %b{k} = \"stablehlo.broadcast_in_dim\"(%v4) {{broadcast_dimensions = array<i64>}} : (tensor<f32>) -> tensor<256xf32>\n"));
    }
    let text = GOOD.replacen("  %v5 =", &format!("{many}  %v5 ="), 1);
    let (_, m) = check(&text, &[t(&[4]), t(&[4])], &[t(&[4])], "s", limits).unwrap_err();
    assert!(m.contains("in all"), "{m}");
}

const LOOP: &str = r#"func.func @f(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf32> {
  %z = "stablehlo.constant"() {value = dense<0> : tensor<i32>} : () -> tensor<i32>
  %w:2 = "stablehlo.while"(%z, %a) ({
  ^bb0(%i: tensor<i32>, %x: tensor<4xf32>):
    %n = "stablehlo.constant"() {value = dense<10> : tensor<i32>} : () -> tensor<i32>
    %c = "stablehlo.compare"(%i, %n) {comparison_direction = #stablehlo<comparison_direction LT>} : (tensor<i32>, tensor<i32>) -> tensor<i1>
    "stablehlo.return"(%c) : (tensor<i1>) -> ()
  }, {
  ^bb0(%i: tensor<i32>, %x: tensor<4xf32>):
    %one = "stablehlo.constant"() {value = dense<1> : tensor<i32>} : () -> tensor<i32>
    %j = "stablehlo.add"(%i, %one) : (tensor<i32>, tensor<i32>) -> tensor<i32>
    %y = "stablehlo.add"(%x, %b) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    "stablehlo.return"(%j, %y) : (tensor<i32>, tensor<4xf32>) -> ()
  }) : (tensor<i32>, tensor<4xf32>) -> (tensor<i32>, tensor<4xf32>)
  "func.return"(%w#1) : (tensor<4xf32>) -> ()
}"#;

#[test]
fn loops_count_their_iterations() {
    let c = check(LOOP, &[t(&[4]), t(&[4])], &[t(&[4])], "s", Limits { loop_iterations: 50, ..Limits::default() }).unwrap();
    assert!(c.loop_count);
    let out = &c.text;
    assert!(out.starts_with("func.func private @s(%0: tensor<4xf32>, %1: tensor<4xf32>) -> (tensor<4xf32>, tensor<i64>)"), "{out}");
    assert!(out.contains(":3 = \"stablehlo.while\""), "{out}");
    assert!(out.contains("dense<50> : tensor<i64>") && out.contains("comparison_direction LE"), "{out}");
    assert!(out.contains("\"stablehlo.and\""), "{out}");
    // A loop inside a region that cannot carry the count is refused.
    let inside = format!(
        "func.func @f(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf32> {{\n  %z = \"stablehlo.constant\"() {{value = dense<0.0> : tensor<f32>}} : () -> tensor<f32>\n  %m = \"stablehlo.reduce\"(%a, %z) ({{\n  ^bb0(%p: tensor<f32>, %q: tensor<f32>):\n{}\n  }}) {{dimensions = array<i64: 0>}} : (tensor<4xf32>, tensor<f32>) -> tensor<f32>\n  \"func.return\"(%a) : (tensor<4xf32>) -> ()\n}}",
        "    %zz = \"stablehlo.constant\"() {value = dense<0> : tensor<i32>} : () -> tensor<i32>\n    %w = \"stablehlo.while\"(%zz) ({\n    ^bb0(%i: tensor<i32>):\n      %t = \"stablehlo.constant\"() {value = dense<true> : tensor<i1>} : () -> tensor<i1>\n      \"stablehlo.return\"(%t) : (tensor<i1>) -> ()\n    }, {\n    ^bb0(%i: tensor<i32>):\n      \"stablehlo.return\"(%i) : (tensor<i32>) -> ()\n    }) : (tensor<i32>) -> tensor<i32>\n    \"stablehlo.return\"(%p) : (tensor<f32>) -> ()"
    );
    refused(&inside, "a stablehlo.while inside a stablehlo.reduce region");
}
