//! WebAssembly plugins: the example plugins (built for wasm32 by
//! scripts/setup.sh) against hand-computed references in every mode, and
//! hostile plugins written in WAT, each of which must give its named error
//! and leave the runtime, ordinary ops and the well-behaved plugins working.

mod common;
mod plugin_kit;

use std::time::Duration;

use common::{f32s, host_f32, rt, MODES};
use plugin_kit::*;
use torchtpu_core::error::PluginFailure;
use torchtpu_core::plugin::{host, Limits};
use torchtpu_core::runtime::set_thread_mode;
use torchtpu_core::{Error, ExecMode, Scalar, Value};

// --------------------------------------------------------- example plugins

#[test]
fn rms_norm_matches_the_reference_in_every_mode() {
    examples();
    let rt = rt();
    for mode in MODES {
        set_thread_mode(Some(mode)).unwrap();
        for (rows, d) in [(4, 8), (1, 3), (7, 64)] {
            check_rms_norm(&rt, rows, d);
        }
        // Defaults are filled in by the host: eps = 1e-6.
        let _lowering = lowering_rms_norm();
        let (xs, ws) = (data(6, 3), vec![1.0, 2.0, 0.5]);
        let y = rt.call1("rms_norm::rms_norm", &[f32s(&rt, &xs, &[2, 3]).into(), f32s(&rt, &ws, &[3]).into()]).unwrap();
        close(&host_f32(&rt, &y), &rms_norm_ref(&xs, &ws, 1e-6), 1e-5);
    }
    set_thread_mode(None).unwrap();
}

#[test]
fn swiglu_and_its_backward_match_the_reference_in_every_mode() {
    examples();
    let rt = rt();
    let (a, b, g) = (data(12, 1), data(12, 2), data(12, 3));
    let want: Vec<f32> = a.iter().zip(&b).map(|(&a, &b)| (a as f64 * sigmoid(a as f64) * b as f64) as f32).collect();
    let (mut ga_want, mut gb_want) = (Vec::new(), Vec::new());
    for i in 0..12 {
        let (a, b, g) = (a[i] as f64, b[i] as f64, g[i] as f64);
        let s = sigmoid(a);
        ga_want.push((g * b * s * (1.0 + a * (1.0 - s))) as f32);
        gb_want.push((g * a * s) as f32);
    }
    for mode in MODES {
        set_thread_mode(Some(mode)).unwrap();
        let (ta, tb, tg) = (f32s(&rt, &a, &[3, 4]), f32s(&rt, &b, &[3, 4]), f32s(&rt, &g, &[3, 4]));
        let y = rt.call1("swiglu::swiglu", &[ta.clone().into(), tb.clone().into()]).unwrap();
        close(&host_f32(&rt, &y), &want, 1e-6);
        let grads = rt.call("swiglu::swiglu_backward", &[tg.into(), ta.into(), tb.into()]).unwrap();
        assert_eq!(grads.len(), 2);
        let ga = grads[0].clone().into_tensor().unwrap();
        let gb = grads[1].clone().into_tensor().unwrap();
        close(&host_f32(&rt, &ga), &ga_want, 1e-5);
        close(&host_f32(&rt, &gb), &gb_want, 1e-5);
    }
    set_thread_mode(None).unwrap();
}

#[test]
fn a_plugin_op_fuses_with_its_neighbours_into_one_program() {
    examples();
    let _counting = counting_rms_norm_lowerings();
    let rt = rt();
    set_thread_mode(Some(ExecMode::DeferAndFuse)).unwrap();
    let (xs, ws) = (data(32, 5), data(8, 6));
    let x = f32s(&rt, &xs, &[4, 8]);
    let w = f32s(&rt, &ws, &[8]);
    let before = rt.stats();
    // (x * 2) -> rms_norm -> (+ 1): three ops, one program.
    let x2 = rt.call1("aten::mul.Scalar", &[x.into(), Value::Scalar(Scalar::Float(2.0))]).unwrap();
    let y = rt.call1("rms_norm::rms_norm", &[x2.into(), w.into(), Value::Double(1e-5)]).unwrap();
    let z = rt.call1("aten::add.Scalar", &[y.into(), Value::Scalar(Scalar::Float(1.0))]).unwrap();
    assert_eq!(rt.pending_ops(0), 3);
    let got = host_f32(&rt, &z);
    let after = rt.stats();
    let flush = rt.last_flush().unwrap();
    assert_eq!((flush.recorded, flush.lowered), (3, 3), "{flush:?}");
    assert_eq!(after.fused_programs - before.fused_programs, 1);
    assert_eq!(after.executions - before.executions, 1, "one program ran, not one per op");
    let x2s: Vec<f32> = xs.iter().map(|v| v * 2.0).collect();
    let want: Vec<f32> = rms_norm_ref(&x2s, &ws, 1e-5).iter().map(|v| v + 1.0).collect();
    close(&got, &want, 1e-5);

    // Another flush of the same graph asks the plugin nothing: the checked
    // fragment is cached.
    let plugin = host().get("rms_norm").unwrap();
    let asked = plugin.counts().lowering_misses;
    for _ in 0..3 {
        let x = f32s(&rt, &xs, &[4, 8]);
        let x2 = rt.call1("aten::mul.Scalar", &[x.into(), Value::Scalar(Scalar::Float(2.0))]).unwrap();
        let y = rt.call1("rms_norm::rms_norm", &[x2.into(), f32s(&rt, &ws, &[8]).into(), Value::Double(1e-5)]).unwrap();
        let z = rt.call1("aten::add.Scalar", &[y.into(), Value::Scalar(Scalar::Float(1.0))]).unwrap();
        close(&host_f32(&rt, &z), &want, 1e-5);
    }
    assert_eq!(plugin.counts().lowering_misses, asked);
    set_thread_mode(None).unwrap();
}

#[test]
fn a_plugin_policy_cuts_where_it_declares() {
    examples();
    let rt = rt();
    set_thread_mode(Some(ExecMode::DeferAndFuse)).unwrap();
    // Each op below makes a 64-float (256-byte) result; a 1000-byte budget
    // cuts every 4 ops (at 1024 bytes).
    rt.select_fusion_policy("byte_budget::byte_budget?max_bytes=1000").unwrap();
    assert_eq!(rt.fusion_policy().name(), "byte_budget::byte_budget?max_bytes=1000");
    let mut x = f32s(&rt, &[1.0; 64], &[64]);
    let before = rt.stats();
    let mut cuts = Vec::new();
    for _ in 0..10 {
        x = rt.call1("aten::add.Scalar", &[x.into(), Value::Scalar(Scalar::Float(1.0))]).unwrap();
        if rt.pending_ops(0) == 0 {
            cuts.push(rt.last_flush().unwrap().recorded);
        }
    }
    assert_eq!(cuts, vec![4, 4]);
    let policy_flushes = rt.stats().flushes[5] - before.flushes[5];
    assert_eq!(policy_flushes, 2);
    assert_eq!(host_f32(&rt, &x), vec![11.0; 64]);
    // A bad config is the plugin's reported error: the policy falls back to
    // fusing everything, and the values are still right.
    rt.select_fusion_policy("byte_budget::byte_budget?max_bytes=lots").unwrap();
    let mut y = f32s(&rt, &[0.0; 64], &[64]);
    for _ in 0..6 {
        y = rt.call1("aten::add.Scalar", &[y.into(), Value::Scalar(Scalar::Float(1.0))]).unwrap();
    }
    assert_eq!(rt.pending_ops(0), 6, "no cut: the failing policy fuses everything");
    assert_eq!(host_f32(&rt, &y), vec![6.0; 64]);
    let err = host().get("byte_budget").unwrap().last_policy_error().unwrap();
    assert!(err.contains("plugin 'byte_budget'") && err.contains("max_bytes"), "{err}");
    let e = rt.select_fusion_policy("nope::nothing").unwrap_err().to_string();
    assert!(e.contains("byte_budget::byte_budget") && e.contains("loop_cut"), "{e}");
    set_thread_mode(None).unwrap();
}

#[test]
fn two_threads_call_plugin_ops_at_once() {
    examples();
    let rt = rt();
    let threads: Vec<_> = (0..2)
        .map(|t| {
            let rt = rt.clone();
            std::thread::spawn(move || {
                if t == 1 {
                    set_thread_mode(Some(ExecMode::DeferAndFuse)).unwrap();
                }
                for i in 0..12 {
                    // New shapes each round, so the plugin is really called
                    // from both threads, not just its cached lowering.
                    check_rms_norm(&rt, 1 + i % 3, 16 + 8 * t + i);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

#[test]
fn plugin_errors_name_the_plugin_and_the_op() {
    examples();
    let rt = rt();
    let x = f32s(&rt, &data(6, 1), &[2, 3]);
    let w = f32s(&rt, &data(4, 1), &[4]);
    let e = {
        let _lowering = lowering_rms_norm();
        rt.call1("rms_norm::rms_norm", &[x.into(), w.into()]).unwrap_err()
    };
    let msg = e.to_string();
    assert!(matches!(e, Error::WasmPlugin { kind: PluginFailure::Reported, .. }), "{msg}");
    assert!(msg.contains("plugin 'rms_norm' (op rms_norm::rms_norm)") && msg.contains("[4]"), "{msg}");
    still_works(&rt);
}

// --------------------------------------------------------- hostile plugins

#[test]
fn hostile_infinite_loop_runs_out_of_fuel() {
    load("h_loop", &wat_plugin(&manifest("h_loop"), b"", "(loop $l (br $l)) (unreachable)", ""), Limits::default());
    expect_failure("h_loop", PluginFailure::OutOfFuel, "fuel");
}

#[test]
fn hostile_infinite_loop_with_unbounded_fuel_times_out() {
    let limits = Limits { fuel: u64::MAX / 4, timeout: Duration::from_millis(200), ..Limits::default() };
    load("h_slow", &wat_plugin(&manifest("h_slow"), b"", "(loop $l (br $l)) (unreachable)", ""), limits);
    let start = std::time::Instant::now();
    expect_failure("h_slow", PluginFailure::Timeout, "deadline");
    // Three modes, each one call that waits for its 200 ms deadline.
    assert!(start.elapsed() < Duration::from_secs(30));
}

#[test]
fn hostile_unbounded_memory_growth_is_capped() {
    let limits = Limits { memory: 8 << 20, ..Limits::default() };
    let grow = "(loop $l (drop (memory.grow (i32.const 16))) (br $l)) (unreachable)";
    load("h_grow", &wat_plugin(&manifest("h_grow"), b"", grow, ""), limits);
    expect_failure("h_grow", PluginFailure::OutOfMemory, "limit");
}

#[test]
fn hostile_trap_is_a_trap() {
    load("h_trap", &wat_plugin(&manifest("h_trap"), b"", "(unreachable)", ""), Limits::default());
    expect_failure("h_trap", PluginFailure::Trap, "unreachable");
}

#[test]
fn hostile_huge_or_out_of_bounds_output_is_invalid() {
    load("h_huge", &wat_plugin(&manifest("h_huge"), b"", "(i64.const 0x7fffffff)", ""), Limits::default());
    expect_failure("h_huge", PluginFailure::InvalidOutput, "exceeds");
    let oob = format!("(i64.const {})", (0x00ff_0000i64 << 32) | 100);
    load("h_oob", &wat_plugin(&manifest("h_oob"), b"", &oob, ""), Limits::default());
    expect_failure("h_oob", PluginFailure::InvalidOutput, "outside");
}

#[test]
fn hostile_non_utf8_and_malformed_json_are_invalid_output() {
    let bad = b"\xff\xfe{\"ok\"";
    load("h_utf8", &wat_plugin(&manifest("h_utf8"), bad, &returns_response(bad.len()), ""), Limits::default());
    expect_failure("h_utf8", PluginFailure::InvalidOutput, "not UTF-8");
    let bad = br#"{"ok": {"outputs": [}"#;
    load("h_json", &wat_plugin(&manifest("h_json"), bad, &returns_response(bad.len()), ""), Limits::default());
    expect_failure("h_json", PluginFailure::InvalidOutput, "not the JSON");
}

#[test]
fn hostile_stablehlo_that_does_not_parse_is_invalid() {
    // Passes the text rules, fails the trial compile: add with one operand.
    let text = r#"func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "stablehlo.add"(%a) : (tensor<4xf32>) -> tensor<4xf32>
  "func.return"(%0) : (tensor<4xf32>) -> ()
}"#;
    let r = ok_lowering(text, "[4]");
    load("h_parse", &wat_plugin(&manifest("h_parse"), &r, &returns_response(r.len()), ""), Limits::default());
    expect_failure("h_parse", PluginFailure::InvalidStableHlo, "does not compile");
    // Breaks the text rules: a custom call reaches the host.
    let text = r#"func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "stablehlo.custom_call"(%a) {call_target_name = "system"} : (tensor<4xf32>) -> tensor<4xf32>
  "func.return"(%0) : (tensor<4xf32>) -> ()
}"#;
    let r = ok_lowering(text, "[4]");
    load("h_call", &wat_plugin(&manifest("h_call"), &r, &returns_response(r.len()), ""), Limits::default());
    expect_failure("h_call", PluginFailure::InvalidStableHlo, "custom_call is not allowed");
}

#[test]
fn hostile_signature_that_lies_about_shapes_is_a_mismatch() {
    // The input is [4]; the fragment claims [3].
    let text = r#"func.func @f(%a: tensor<3xf32>) -> tensor<3xf32> {
  "func.return"(%a) : (tensor<3xf32>) -> ()
}"#;
    let r = ok_lowering(text, "[3]");
    load("h_lies", &wat_plugin(&manifest("h_lies"), &r, &returns_response(r.len()), ""), Limits::default());
    expect_failure("h_lies", PluginFailure::SignatureMismatch, "tensor<3xf32>");
    // Declared outputs [2, 2], fragment returns [4].
    let text = r#"func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {
  "func.return"(%a) : (tensor<4xf32>) -> ()
}"#;
    let r = ok_lowering(text, "[2, 2]");
    load("h_lies2", &wat_plugin(&manifest("h_lies2"), &r, &returns_response(r.len()), ""), Limits::default());
    expect_failure("h_lies2", PluginFailure::SignatureMismatch, "result types");
}

#[test]
fn hostile_wasi_import_is_rejected_at_load() {
    let wasi = r#"(import "wasi_snapshot_preview1" "fd_write" (func (param i32 i32 i32 i32) (result i32)))"#;
    expect_rejected("h_wasi.wasm", &wat_plugin(&manifest("h_wasi"), b"", "(unreachable)", wasi), "wasi_snapshot_preview1::fd_write");
    assert!(host().get("h_wasi").is_none());
}

#[test]
fn abi_mismatch_malformed_and_duplicate_manifests_are_rejected() {
    let m = manifest("h_abi").replace(r#""major":1"#, r#""major":2"#);
    expect_rejected("h_abi.wasm", &wat_plugin(&m, b"", "(unreachable)", ""), "ABI 2.0");
    expect_rejected("h_bad.wasm", &wat_plugin("{\"name\": ", b"", "(unreachable)", ""), "malformed manifest");
    expect_rejected("h_none.wasm", &wat::parse_str("(module)").unwrap(), "no `torchtpu.manifest`");
    // Another file claiming the name of a loaded plugin.
    let m = r#"{"name":"rms_norm","version":"9.9.9","abi":{"major":1,"minor":0},"ops":[{"schema":"rms_norm::other(Tensor a) -> Tensor"}]}"#;
    expect_rejected("h_dup.wasm", &wat_plugin(m, b"", "(unreachable)", ""), "already loaded");
    assert!(torchtpu_core::ops::registry().lookup("rms_norm::other").is_err());
}

#[test]
fn a_directory_loads_every_good_file_and_reports_the_rest() {
    examples();
    let dir = scratch("mixed");
    std::fs::write(dir.join("a_good.wasm"), wat_plugin(&manifest("h_dir_ok"), b"", "(unreachable)", "")).unwrap();
    std::fs::write(dir.join("b_bad.wasm"), b"garbage").unwrap();
    std::fs::write(dir.join("c_good.wasm"), wat_plugin(&manifest("h_dir_ok2"), b"", "(unreachable)", "")).unwrap();
    std::fs::write(dir.join("notes.txt"), b"not a plugin").unwrap();
    let report = host().load(&dir, Limits::default());
    let names: Vec<&str> = report.loaded.iter().map(|p| p.name()).collect();
    assert_eq!(names, ["h_dir_ok", "h_dir_ok2"]);
    assert_eq!(report.rejected.len(), 1);
    assert!(report.rejected[0].error.to_string().contains("b_bad.wasm"));
    // Loading again is a no-op for files already loaded.
    let again = host().load(&dir, Limits::default());
    assert_eq!(again.loaded.len(), 2);
}
