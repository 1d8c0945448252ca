//! What the plugin tests share: the example plugins, hand-computed
//! references, hostile plugins written in WAT, and the checks that a
//! failure named its plugin and left everything else working.

#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::{Arc, OnceLock, RwLock, RwLockReadGuard, RwLockWriteGuard};

use super::common::{f32s, host_f32, rt, MODES};
use torchtpu_core::error::PluginFailure;
use torchtpu_core::plugin::{host, Limits};
use torchtpu_core::runtime::{set_thread_mode, thread_mode};
use torchtpu_core::{Error, ExecMode, Runtime, Scalar, Value};

/// Where scripts/setup.sh puts the example plugins.
pub fn examples_dir() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../target/plugins"))
}

/// Loads the three example plugins once per test process.
pub fn examples() {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        for name in ["rms_norm", "swiglu", "byte_budget"] {
            let path = examples_dir().join(format!("{name}.wasm"));
            assert!(
                path.is_file(),
                "{} is missing: scripts/setup.sh builds the example plugins into target/plugins",
                path.display()
            );
            host().load_file(&path, Limits::default()).unwrap_or_else(|e| panic!("{e}"));
        }
    });
}

/// A scratch directory for this test process.
pub fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("torchtpu-plugin-tests-{}", std::process::id())).join(name);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The rms_norm plugin's counters are process-wide, and tests run in
/// parallel: whatever lowers rms_norm holds the read side while it does, so
/// that a test counting the plugin's lowerings (the write side) sees only its
/// own.
pub static RMS_NORM_LOWERINGS: RwLock<()> = RwLock::new(());

pub fn lowering_rms_norm() -> RwLockReadGuard<'static, ()> {
    RMS_NORM_LOWERINGS.read().unwrap_or_else(|e| e.into_inner())
}

pub fn counting_rms_norm_lowerings() -> RwLockWriteGuard<'static, ()> {
    RMS_NORM_LOWERINGS.write().unwrap_or_else(|e| e.into_inner())
}

// ------------------------------------------------------------- references

pub fn rms_norm_ref(x: &[f32], w: &[f32], eps: f64) -> Vec<f32> {
    let d = w.len();
    x.chunks(d)
        .flat_map(|row| {
            let ms = row.iter().map(|&v| (v as f64) * (v as f64)).sum::<f64>() / d as f64;
            let r = 1.0 / (ms + eps).sqrt();
            row.iter().zip(w).map(move |(&v, &g)| (v as f64 * r * g as f64) as f32).collect::<Vec<_>>()
        })
        .collect()
}

pub fn sigmoid(a: f64) -> f64 {
    1.0 / (1.0 + (-a).exp())
}

pub fn close(got: &[f32], want: &[f32], tol: f32) {
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((g - w).abs() <= tol * (1.0 + w.abs()), "element {i}: got {g}, want {w}\n got {got:?}\nwant {want:?}");
    }
}

pub fn data(n: usize, seed: u32) -> Vec<f32> {
    (0..n).map(|i| (((i as u32 * 2654435761u32) ^ seed) % 1000) as f32 / 250.0 - 2.0).collect()
}

/// rms_norm through the runtime, checked against the reference.
pub fn check_rms_norm(rt: &Arc<Runtime>, rows: usize, d: usize) {
    let _lowering = lowering_rms_norm();
    let (xs, ws) = (data(rows * d, 7), data(d, 11));
    let x = f32s(rt, &xs, &[rows as i64, d as i64]);
    let w = f32s(rt, &ws, &[d as i64]);
    let y = rt.call1("rms_norm::rms_norm", &[x.into(), w.into(), Value::Double(1e-5)]).unwrap();
    assert_eq!(y.sizes(), &[rows as i64, d as i64]);
    close(&host_f32(rt, &y), &rms_norm_ref(&xs, &ws, 1e-5), 1e-5);
}

/// After a failure: an ordinary op and the example plugins still give the
/// numbers computed by hand, in strict and in fused mode (the caller's
/// thread mode is restored).
pub fn still_works(rt: &Arc<Runtime>) {
    examples();
    let caller = thread_mode();
    for mode in [ExecMode::DeferNever, ExecMode::DeferAndFuse] {
        set_thread_mode(Some(mode)).unwrap();
        let a = f32s(rt, &[1.0, 2.0, 3.0], &[3]);
        let s = rt.call1("aten::add.Tensor", &[a.clone().into(), a.into(), Value::Scalar(Scalar::Float(0.5))]).unwrap();
        assert_eq!(host_f32(rt, &s), vec![1.5, 3.0, 4.5], "{mode:?}");
        check_rms_norm(rt, 3, 5);
        // swiglu(a, b) = a * sigmoid(a) * b: at a = 0 it is 0, at a = 2,
        // b = 3 it is 6 / (1 + e^-2).
        let a = f32s(rt, &[0.0, 2.0], &[2]);
        let b = f32s(rt, &[5.0, 3.0], &[2]);
        let y = rt.call1("swiglu::swiglu", &[a.into(), b.into()]).unwrap();
        close(&host_f32(rt, &y), &[0.0, (6.0 / (1.0 + (-2.0f64).exp())) as f32], 1e-6);
    }
    set_thread_mode(caller).unwrap();
}

/// A plugin in WAT: the manifest, a 3-page memory, an allocator that always
/// hands out page 1, `response` as a data segment at 1024, and `lower` as
/// the body of `ttpu_lower`.
pub fn wat_plugin(manifest: &str, response: &[u8], lower: &str, extra: &str) -> Vec<u8> {
    let esc = |b: &[u8]| b.iter().map(|c| format!("\\{c:02x}")).collect::<String>();
    let wat = format!(
        r#"(module
  {extra}
  (@custom "torchtpu.manifest" "{manifest}")
  (memory (export "memory") 3)
  (data (i32.const 1024) "{response}")
  (func (export "ttpu_alloc") (param i32) (result i32) (i32.const 65536))
  (func (export "ttpu_dealloc") (param i32 i32))
  (func (export "ttpu_lower") (param i32 i32) (result i64) {lower}))"#,
        manifest = esc(manifest.as_bytes()),
        response = esc(response),
    );
    wat::parse_str(&wat).unwrap_or_else(|e| panic!("{e}\n{wat}"))
}

pub fn manifest(name: &str) -> String {
    format!(r#"{{"name":"{name}","version":"0.0.1","abi":{{"major":1,"minor":0}},"ops":[{{"schema":"{name}::f(Tensor a) -> Tensor"}}]}}"#)
}

/// Returns the response data segment: `pack(1024, len)`.
pub fn returns_response(len: usize) -> String {
    format!("(i64.const {})", (1024i64 << 32) | len as i64)
}

pub fn ok_lowering(stablehlo: &str, out: &str) -> Vec<u8> {
    serde_json::json!({"ok": {"outputs": [{"shape": serde_json::from_str::<serde_json::Value>(out).unwrap(), "dtype": "float32"}], "stablehlo": stablehlo}})
        .to_string()
        .into_bytes()
}

/// Writes and loads a hostile plugin.
pub fn load(name: &str, wasm: &[u8], limits: Limits) {
    let path = scratch("hostile").join(format!("{name}.wasm"));
    std::fs::write(&path, wasm).unwrap();
    host().load_file(&path, limits).unwrap_or_else(|e| panic!("{name} should load: {e}"));
}

/// Calls `<name>::f` on a [4] f32 tensor in every mode; each call must fail
/// with `kind`, and the runtime must keep working.
pub fn expect_failure(name: &str, kind: PluginFailure, needle: &str) {
    examples();
    let rt = rt();
    for mode in MODES {
        set_thread_mode(Some(mode)).unwrap();
        let x = f32s(&rt, &[1.0, 2.0, 3.0, 4.0], &[4]);
        let e = rt.call1(&format!("{name}::f"), &[x.into()]).unwrap_err();
        let msg = e.to_string();
        match &e {
            Error::WasmPlugin { plugin, op, kind: k, .. } => {
                assert_eq!((plugin.as_str(), *k), (name, kind), "{msg}");
                assert_eq!(op.as_deref(), Some(format!("{name}::f").as_str()));
            }
            other => panic!("{name}: expected a plugin error, got {other:?}"),
        }
        assert!(msg.contains(&format!("plugin '{name}'")) && msg.contains(kind.name()) && msg.contains(needle), "{msg}");
        assert_eq!(rt.pending_ops(0), 0, "a failed op records nothing");
        still_works(&rt);
    }
    set_thread_mode(None).unwrap();
}

pub fn expect_rejected(file: &str, wasm: &[u8], needle: &str) {
    examples();
    let path = scratch("rejected").join(file);
    std::fs::write(&path, wasm).unwrap();
    let e = host().load_file(&path, Limits::default()).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, Error::WasmPluginRejected { .. }), "{msg}");
    assert!(msg.contains(&path.display().to_string()) && msg.contains(needle), "{msg}");
    still_works(&rt());
}

/// A manifest declaring `<name>::f(Tensor a) -> Tensor` with extra op
/// fields (`"max_loop_iterations":5`).
pub fn manifest_with(name: &str, op_fields: &str) -> String {
    manifest(name).replace(r#" -> Tensor"}"#, &format!(r#" -> Tensor"{op_fields}}}"#))
}

/// Loads `<name>`, whose `f` lowers to `stablehlo` (one [4] float32 output)
/// for any input.
pub fn load_fragment(name: &str, manifest: &str, stablehlo: &str) {
    let r = ok_lowering(stablehlo, "[4]");
    load(name, &wat_plugin(manifest, &r, &returns_response(r.len()), ""), Limits::default());
}

/// `<name>::f` lowers to `stablehlo`, which the host must refuse as
/// invalid StableHLO mentioning `needle`, in every mode, with the runtime
/// working afterwards.
pub fn expect_fragment_refused(name: &str, stablehlo: &str, needle: &str) {
    load_fragment(name, &manifest(name), stablehlo);
    expect_failure(name, PluginFailure::InvalidStableHlo, needle);
}
