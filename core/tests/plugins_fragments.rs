//! Hostile StableHLO from plugins: each fragment below tries a way past the
//! host's fragment checks (escaped op names, text hidden in comments, deep
//! nesting, symbols, discardable attributes, huge intermediates, endless
//! loops). Each must end in its named error or a bounded, checked result,
//! in every mode, and leave built-in ops and the example plugins working.

mod common;
mod plugin_kit;
#[path = "common/rng.rs"]
mod rng;

use std::time::{Duration, Instant};

use common::{f32s, host_f32, rt, MODES};
use plugin_kit::*;
use rng::Rng;
use torchtpu_core::error::PluginFailure;
use torchtpu_core::hlo::{Elem, Ty};
use torchtpu_core::plugin::fragment;
use torchtpu_core::runtime::set_thread_mode;
use torchtpu_core::{Error, Value};

/// A fragment of `f(a: [4]) -> [4]` whose body is `body` (the value `%r` is
/// returned).
fn frag(body: &str) -> String {
    format!(
        "func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {{\n{body}\n  \"func.return\"(%r) : (tensor<4xf32>) -> ()\n}}"
    )
}

fn unary(op: &str) -> String {
    frag(&format!("  %r = {op}(%a) : (tensor<4xf32>) -> tensor<4xf32>"))
}

#[test]
fn denied_ops_spelled_with_escapes_are_refused() {
    let cases = [
        ("h_esc1", r#""stablehlo.custom_call""#),
        ("h_esc2", r#""stablehlo.custom\5Fcall""#),
        ("h_esc3", r#""stablehlo.custom\5fcall""#),
        ("h_esc4", r#""\73tablehlo.custom_call""#),
        ("h_esc5", r#""stablehlo\2Ecustom\5Fcall""#),
        ("h_esc6", r#""stablehlo.\69nfeed""#),
        ("h_esc7", r#""stablehlo.outfee\64""#),
        ("h_esc8", r#""stablehlo.all\5Freduce""#),
        ("h_esc9", r#""stablehlo.replica\5Fid""#),
        ("h_esc10", r#""func.c\61ll""#),
    ];
    for (name, op) in cases {
        expect_fragment_refused(name, &unary(op), "is not allowed");
    }
    // The custom form, named plainly.
    expect_fragment_refused("h_esc11", &frag("  %r = stablehlo.custom_call @system(%a) : (tensor<4xf32>) -> tensor<4xf32>"), "is not allowed");
}

#[test]
fn text_hidden_in_comments_never_reaches_the_compiler() {
    // MLIR skips `//` comments, and so does the parser: a brace in a comment
    // closes nothing, and a function added after the fragment is text after
    // the function.
    let injected = format!(
        "{} // }}\n}}\nfunc.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {{\n  %y = \"stablehlo.custom_call\"(%x) {{call_target_name = \"x\"}} : (tensor<4xf32>) -> tensor<4xf32>\n  \"func.return\"(%y) : (tensor<4xf32>) -> ()\n}}",
        unary("\"stablehlo.negate\"").trim_end_matches('}')
    );
    expect_fragment_refused("h_cmt1", &injected, "text after the function");
    // A comment that swallows the closing brace leaves the body open.
    let swallowed = unary("\"stablehlo.negate\"").replace("\n}", " // }");
    expect_fragment_refused("h_cmt2", &swallowed, "expected `}`");
    // A string holding a comment marker and braces is only a string.
    let in_string = frag("  %r = \"stablehlo.negate\"(%a) {x = \"// } func.func @evil\"} : (tensor<4xf32>) -> tensor<4xf32>");
    load_fragment("h_cmt3", &manifest("h_cmt3"), &in_string);
    let rt = rt();
    let y = rt.call1("h_cmt3::f", &[f32s(&rt, &[1.0, -2.0, 3.0, 0.5], &[4]).into()]);
    // `x` is not an attribute of negate: MLIR rejects it at the trial
    // compile, or ignores it; either way nothing else was read.
    match y {
        Ok(y) => assert_eq!(host_f32(&rt, &y), vec![-1.0, 2.0, -3.0, -0.5]),
        Err(e) => assert!(matches!(e, Error::WasmPlugin { kind: PluginFailure::InvalidStableHlo, .. }), "{e}"),
    }
    still_works(&rt);
}

#[test]
fn deep_nesting_is_refused_before_any_parser_recurses() {
    for (name, open, close) in [("h_deep1", "[", "]"), ("h_deep2", "<", ">"), ("h_deep3", "{", "}"), ("h_deep4", "(", ")")] {
        let nested = format!("{}1{}", open.repeat(10_000), close.repeat(10_000));
        let text = frag(&format!("  %r = \"stablehlo.negate\"(%a) {{x = {nested}}} : (tensor<4xf32>) -> tensor<4xf32>"));
        expect_fragment_refused(name, &text, "nest more than");
    }
    // Regions inside regions: maps of maps, 40 deep.
    let mut region = String::from("\"stablehlo.return\"(%p0) : (tensor<f32>) -> ()");
    for k in 1..40 {
        region = format!(
            "%m{k} = \"stablehlo.map\"(%p{k}) ({{\n^bb0(%p{}: tensor<f32>):\n{region}\n}}) {{dimensions = array<i64>}} : (tensor<f32>) -> tensor<f32>\n\"stablehlo.return\"(%m{k}) : (tensor<f32>) -> ()",
            k - 1
        );
    }
    let text = frag(&format!(
        "  %p40 = \"stablehlo.constant\"() {{value = dense<1.0> : tensor<f32>}} : () -> tensor<f32>\n  %top = \"stablehlo.map\"(%p40) ({{\n^bb0(%p39: tensor<f32>):\n{region}\n}}) {{dimensions = array<i64>}} : (tensor<f32>) -> tensor<f32>\n  %r = \"stablehlo.negate\"(%a) : (tensor<4xf32>) -> tensor<4xf32>"
    ));
    expect_fragment_refused("h_deep5", &text, "nest more than");
}

#[test]
fn symbols_dialects_and_discardable_attributes_are_refused() {
    let with_attr = |attr: &str| frag(&format!("  %r = \"stablehlo.negate\"(%a) {{{attr}}} : (tensor<4xf32>) -> tensor<4xf32>"));
    expect_fragment_refused("h_sym1", &with_attr("callee = @system"), "symbol reference @system");
    expect_fragment_refused("h_sym2", &with_attr("x = #alias"), "only #stablehlo");
    expect_fragment_refused("h_sym3", &with_attr("mhlo.frontend_attributes = {a = \"b\"}"), "attribute name mhlo.frontend_attributes");
    expect_fragment_refused("h_sym4", &with_attr("_xla_stream_annotation = \"1\""), "attribute name _xla_stream_annotation");
    expect_fragment_refused("h_sym5", &with_attr("x = dense_resource<blob> : tensor<4xf32>"), "dense_resource");
    expect_fragment_refused(
        "h_sym6",
        &frag("  %t = \"stablehlo.create_token\"() : () -> !stablehlo.token\n  %r = \"stablehlo.negate\"(%a) : (tensor<4xf32>) -> tensor<4xf32>"),
        "is not allowed",
    );
}

#[test]
fn huge_intermediates_are_refused_by_the_memory_budget() {
    // 8 GiB from a 16-byte input.
    let big = frag(
        "  %z = \"stablehlo.constant\"() {value = dense<0.0> : tensor<f32>} : () -> tensor<f32>\n  %b = \"stablehlo.broadcast_in_dim\"(%z) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<2147483648xf32>\n  %r = \"stablehlo.negate\"(%a) : (tensor<4xf32>) -> tensor<4xf32>",
    );
    expect_fragment_refused("h_mem1", &big, "memory budget");
    // Sizes whose product overflows 64 bits.
    expect_fragment_refused("h_mem2", &big.replace("tensor<2147483648xf32>", "tensor<4294967296x4294967296x4294967296xf32>"), "memory budget");
}

// ---------------------------------------------------------------- loops

/// `x = a; i = 0; while (i < n) { x = x + a; i = i + 1 }; return x`, with
/// the condition replaced by `cond` when given (`true` loops forever).
fn loop_frag(n: i32, forever: bool) -> String {
    let cond = if forever {
        "    %c = \"stablehlo.constant\"() {value = dense<true> : tensor<i1>} : () -> tensor<i1>".to_string()
    } else {
        format!("    %n = \"stablehlo.constant\"() {{value = dense<{n}> : tensor<i32>}} : () -> tensor<i32>\n    %c = \"stablehlo.compare\"(%i, %n) {{comparison_direction = #stablehlo<comparison_direction LT>}} : (tensor<i32>, tensor<i32>) -> tensor<i1>")
    };
    frag(&format!(
        "  %z = \"stablehlo.constant\"() {{value = dense<0> : tensor<i32>}} : () -> tensor<i32>
  %w:2 = \"stablehlo.while\"(%z, %a) ({{
  ^bb0(%i: tensor<i32>, %x: tensor<4xf32>):
{cond}
    \"stablehlo.return\"(%c) : (tensor<i1>) -> ()
  }}, {{
  ^bb0(%i: tensor<i32>, %x: tensor<4xf32>):
    %one = \"stablehlo.constant\"() {{value = dense<1> : tensor<i32>}} : () -> tensor<i32>
    %j = \"stablehlo.add\"(%i, %one) : (tensor<i32>, tensor<i32>) -> tensor<i32>
    %y = \"stablehlo.add\"(%x, %a) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    \"stablehlo.return\"(%j, %y) : (tensor<i32>, tensor<4xf32>) -> ()
  }}) : (tensor<i32>, tensor<4xf32>) -> (tensor<i32>, tensor<4xf32>)
  %r = \"stablehlo.add\"(%w#1, %a) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>"
    ))
}

/// Calls `<name>::f` in every mode: the op or the next read of its result
/// must fail with the loop bound, naming the plugin and the op.
fn expect_loop_bound(name: &str, bound: &str) {
    examples();
    let rt = rt();
    for mode in MODES {
        set_thread_mode(Some(mode)).unwrap();
        let start = Instant::now();
        let x = f32s(&rt, &[1.0, 2.0, 3.0, 4.0], &[4]);
        let e = match rt.call1(&format!("{name}::f"), &[x.into()]) {
            Err(e) => e,
            Ok(y) => rt.tensor_to_host(&y).expect_err("the loop bound fails the read"),
        };
        let msg = e.to_string();
        match &e {
            Error::WasmPlugin { plugin, op, kind, .. } => {
                assert_eq!((plugin.as_str(), kind), (name, &PluginFailure::LoopBound), "{msg}");
                assert_eq!(op.as_deref(), Some(format!("{name}::f").as_str()));
            }
            other => panic!("{mode:?}: expected the loop bound, got {other:?}"),
        }
        assert!(msg.contains(&format!("bound of {bound} iterations")), "{msg}");
        assert!(start.elapsed() < Duration::from_secs(20), "{mode:?}: the bounded loop took {:?}", start.elapsed());
        rt.synchronize().ok();
        still_works(&rt);
    }
    set_thread_mode(None).unwrap();
}

#[test]
fn loops_within_their_bound_give_exact_results_in_every_mode() {
    examples();
    load_fragment("h_loop_ok", &manifest_with("h_loop_ok", r#","max_loop_iterations":10"#), &loop_frag(10, false));
    let rt = rt();
    for mode in MODES {
        set_thread_mode(Some(mode)).unwrap();
        let y = rt.call1("h_loop_ok::f", &[f32s(&rt, &[1.0, 2.0, 3.0, 4.0], &[4]).into()]).unwrap();
        // x starts at a, gains a ten times, then a once more: 12 a.
        assert_eq!(host_f32(&rt, &y), vec![12.0, 24.0, 36.0, 48.0], "{mode:?}");
    }
    set_thread_mode(None).unwrap();
}

#[test]
fn a_loop_past_its_declared_bound_fails_naming_the_plugin() {
    load_fragment("h_loop_over", &manifest_with("h_loop_over", r#","max_loop_iterations":9"#), &loop_frag(10, false));
    expect_loop_bound("h_loop_over", "9");
}

#[test]
fn an_endless_loop_is_cut_at_the_default_bound() {
    load_fragment("h_loop_forever", &manifest("h_loop_forever"), &loop_frag(0, true));
    expect_loop_bound("h_loop_forever", "1000000");
}

#[test]
fn nested_endless_loops_share_one_bound() {
    // An endless loop inside an endless loop's body: the count is threaded
    // through both, so the total is bounded, not the product.
    let nested = frag(
        "  %z = \"stablehlo.constant\"() {value = dense<0> : tensor<i32>} : () -> tensor<i32>
  %w:2 = \"stablehlo.while\"(%z, %a) ({
  ^bb0(%i: tensor<i32>, %x: tensor<4xf32>):
    %c = \"stablehlo.constant\"() {value = dense<true> : tensor<i1>} : () -> tensor<i1>
    \"stablehlo.return\"(%c) : (tensor<i1>) -> ()
  }, {
  ^bb0(%i: tensor<i32>, %x: tensor<4xf32>):
    %v:2 = \"stablehlo.while\"(%i, %x) ({
    ^bb0(%i2: tensor<i32>, %x2: tensor<4xf32>):
      %c2 = \"stablehlo.constant\"() {value = dense<true> : tensor<i1>} : () -> tensor<i1>
      \"stablehlo.return\"(%c2) : (tensor<i1>) -> ()
    }, {
    ^bb0(%i2: tensor<i32>, %x2: tensor<4xf32>):
      %y2 = \"stablehlo.add\"(%x2, %a) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
      \"stablehlo.return\"(%i2, %y2) : (tensor<i32>, tensor<4xf32>) -> ()
    }) : (tensor<i32>, tensor<4xf32>) -> (tensor<i32>, tensor<4xf32>)
    \"stablehlo.return\"(%i, %v#1) : (tensor<i32>, tensor<4xf32>) -> ()
  }) : (tensor<i32>, tensor<4xf32>) -> (tensor<i32>, tensor<4xf32>)
  %r = \"stablehlo.add\"(%w#1, %a) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>",
    );
    load_fragment("h_loop_nested", &manifest_with("h_loop_nested", r#","max_loop_iterations":1000"#), &nested);
    expect_loop_bound("h_loop_nested", "1000");
}

// ------------------------------------------------------------------ fuzz

/// Pieces a mutation splices in: MLIR's delimiters, escapes, comments,
/// symbols and denied names.
const PIECES: &[&str] = &[
    "\"", "\\", "\\5F", "\\22", "//", "\n", "{", "}", "(", ")", "[", "]", "<", ">", ",", ":", "=", "->", "@x", "@\"y\"",
    "%0", "%9", "%3#1", "^bb1", "#stablehlo", "#x", "!t", "tensor<4xf32>", "tensor<?xf32>", "dense<", "0x", "1.5e+",
    "\"stablehlo.custom_call\"", "\"stablehlo.custom\\5Fcall\"", "\"func.return\"", "\"stablehlo.while\"", "loc(", "\u{0}",
    "é", "-", "9999999999999999999999", "x", " ", "mhlo.sharding = 1",
];

fn mutate(rng: &mut Rng, s: &str) -> String {
    let mut b = s.as_bytes().to_vec();
    for _ in 0..1 + rng.below(4) {
        let at = rng.below(b.len() + 1);
        match rng.below(4) {
            0 => {
                let end = (at + rng.below(16)).min(b.len());
                b.drain(at..end);
            }
            1 => {
                let p = PIECES[rng.below(PIECES.len())];
                b.splice(at..at, p.bytes());
            }
            2 => {
                let end = (at + rng.below(64)).min(b.len());
                let dup = b[at..end].to_vec();
                let to = rng.below(b.len() + 1);
                b.splice(to..to, dup);
            }
            _ => {
                if at < b.len() {
                    b[at] = (rng.next() & 0x7f) as u8;
                }
            }
        }
    }
    String::from_utf8_lossy(&b).into_owned()
}

/// The example plugins' fragments as the host spliced them: the SDK's
/// generic form, renamed. (The first `func.func private @ttpu_plugin` of
/// the op's lowered module, up to its closing brace at column 0.)
fn example_fragment(op: &str, args: &[Value]) -> String {
    let rt = rt();
    let module = rt.lowered_text(op, args).unwrap();
    let start = module.find("func.func private @ttpu_plugin").expect("a spliced fragment");
    let end = start + module[start..].find("\n}\n").expect("its end") + 3;
    module[start..end].to_string()
}

#[test]
fn fuzz_mutated_fragments_never_panic_and_what_passes_prints_canonically() {
    examples();
    let rt = rt();
    let x = f32s(&rt, &[1.0, 2.0, 3.0, 4.0], &[4]);
    let w = f32s(&rt, &[0.5, 1.0, 1.5, 2.0], &[4]);
    let seeds = {
        let _lowering = lowering_rms_norm();
        [
            (example_fragment("rms_norm::rms_norm", &[x.clone().into(), w.clone().into(), Value::Double(1e-5)]), 2, 1),
            (example_fragment("swiglu::swiglu", &[x.clone().into(), w.clone().into()]), 2, 1),
            (example_fragment("swiglu::swiglu_backward", &[x.clone().into(), x.clone().into(), w.clone().into()]), 3, 2),
            (loop_frag(3, false), 1, 1),
        ]
    };
    let ty = Ty::new(Elem::F32, &[4]);
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let deadline = Instant::now() + Duration::from_secs(5);
    let (mut n, mut passed) = (0, 0);
    while n < 30_000 && Instant::now() < deadline {
        n += 1;
        let (seed, ins, outs) = &seeds[rng.below(seeds.len())];
        let text = if rng.below(10) == 0 {
            (0..rng.below(200)).map(|_| PIECES[rng.below(PIECES.len())]).collect::<String>()
        } else {
            mutate(&mut rng, seed)
        };
        let (ins, mut outs) = (vec![ty.clone(); *ins], vec![ty.clone(); *outs]);
        let Ok(c) = fragment::check(&text, &ins, &outs, "s", fragment::Limits::default()) else { continue };
        passed += 1;
        // What is printed passes again; without loops (which add a result)
        // it prints to itself.
        if c.loop_count {
            outs.push(Ty::scalar(Elem::I64));
        }
        let again = fragment::check(&c.text, &ins, &outs, "s", fragment::Limits::default())
            .unwrap_or_else(|e| panic!("{text}\nprinted\n{}\nfails again: {e:?}", c.text));
        if !c.loop_count {
            assert_eq!(again.text, c.text, "not a fixed point:\n{text}");
        }
        for denied in ["\"stablehlo.custom_call\"(", "@x", "@\"", " #x", "loc("] {
            assert!(!c.text.contains(denied), "{denied} got through:\n{text}\nprinted\n{}", c.text);
        }
    }
    assert!(n >= 1000, "only {n} fragments in the time");
    assert!(passed > 0, "no mutant passed: the fuzz checks nothing");
    still_works(&rt);
}
