//! What a WebAssembly plugin op costs, side by side with a built-in op in one
//! run (after scripts/setup.sh built the example plugins into target/plugins):
//!
//! 1. A strict-eager call on a cache hit: `swiglu::swiglu` against the
//!    built-in `aten::mul.Tensor`, same shapes. The compiled program is cached
//!    by signature, so the plugin is not consulted at all.
//! 2. A fused-eager step (`(a * b) -> op -> (+ 1)`, flushed by a host read)
//!    with the plugin op against the built-in op in its place. Every flush
//!    lowers the graph again; the plugin op's lowering is a cache hit.
//! 3. Lowering alone (`lowered_text`): the plugin op with its checked
//!    fragment cached, uncached (a host-to-wasm round trip, JSON both ways,
//!    and the fragment checks), and the built-in op.
//! 4. The fragment checks alone (tokenize, parse, check, bound, print the
//!    SDK-style fragment) against the uncached lowering and against a whole
//!    strict-mode cache miss (plugin call, checks, XLA compile, run): what
//!    parsing costs on a plugin-op cache miss.
//! 5. Loading the module: compiling the `.wasm` against loading the
//!    compiled artifact from the cache directory.
//!
//! Prints medians over several rounds and the ratios.
//! Run: `cargo run --release -p torchtpu-bench --bin plugins`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use torchtpu_core::hlo::{Elem, Ty};
use torchtpu_core::plugin::{fragment, host, sandbox, Limits};
use torchtpu_core::runtime::set_thread_mode;
use torchtpu_core::{DType, ExecMode, Runtime, RuntimeOptions, Scalar, Tensor, Value};

const ROUNDS: usize = 7;

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(|a, b| a.partial_cmp(b).unwrap());
    xs[xs.len() / 2]
}

/// Median seconds per iteration of `f` over ROUNDS rounds of `iters`.
fn time(iters: usize, mut f: impl FnMut()) -> f64 {
    f();
    median(
        (0..ROUNDS)
            .map(|_| {
                let t = Instant::now();
                for _ in 0..iters {
                    f();
                }
                t.elapsed().as_secs_f64() / iters as f64
            })
            .collect(),
    )
}

fn tensor(rt: &Arc<Runtime>, n: usize, seed: u32) -> Tensor {
    let bytes: Vec<u8> =
        (0..n).flat_map(|i| (((i as u32).wrapping_mul(2654435761).wrapping_add(seed) % 1000) as f32 / 500.0 - 1.0).to_ne_bytes()).collect();
    rt.tensor_from_host(&bytes, DType::F32, &[n as i64], 0).unwrap()
}

fn us(s: f64) -> String {
    format!("{:9.2} us", s * 1e6)
}

fn row(what: &str, plugin: f64, builtin: f64) {
    println!("  {what:<46} plugin {}   built-in {}   ratio {:5.2}x", us(plugin), us(builtin), plugin / builtin);
}

fn main() {
    let dir = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../target/plugins"));
    let wasm_path = dir.join("swiglu.wasm");
    let wasm = std::fs::read(&wasm_path)
        .unwrap_or_else(|e| panic!("{}: {e} (scripts/setup.sh builds the example plugins)", wasm_path.display()));
    let rt = Runtime::new(RuntimeOptions::default()).unwrap();
    let plugin = host().load_file(&wasm_path, Limits::default()).unwrap();
    println!("plugin op swiglu::swiglu vs built-in aten::mul.Tensor, 1024 f32, {} {}", rt.platform_name(), rt.platform_version());

    let (a, b) = (tensor(&rt, 1024, 1), tensor(&rt, 1024, 2));
    let args = [Value::Tensor(a.clone()), Value::Tensor(b.clone())];
    let sync = |t: &Tensor| drop(rt.tensor_to_host(t).unwrap());

    // 1. Strict eager, cache hit, waiting for each result.
    let strict_plugin = time(200, || sync(&rt.call1("swiglu::swiglu", &args).unwrap()));
    let strict_builtin = time(200, || sync(&rt.call1("aten::mul.Tensor", &args).unwrap()));
    row("strict eager call + read (cache hit)", strict_plugin, strict_builtin);

    // 2. Fused eager: three ops, one program per step.
    set_thread_mode(Some(ExecMode::DeferAndFuse)).unwrap();
    let step = |op: &str| {
        let ab = rt.call1("aten::mul.Tensor", &args).unwrap();
        let y = rt.call1(op, &[ab.into(), b.clone().into()]).unwrap();
        let z = rt.call1("aten::add.Scalar", &[y.into(), Value::Scalar(Scalar::Float(1.0))]).unwrap();
        sync(&z);
    };
    let fused_plugin = time(200, || step("swiglu::swiglu"));
    let fused_builtin = time(200, || step("aten::mul.Tensor"));
    row("fused step of 3 ops + read (cache hit)", fused_plugin, fused_builtin);
    set_thread_mode(None).unwrap();

    // 3. Lowering alone.
    let lower_cached = time(500, || drop(rt.lowered_text("swiglu::swiglu", &args).unwrap()));
    let lower_builtin = time(500, || drop(rt.lowered_text("aten::mul.Tensor", &args).unwrap()));
    let lower_uncached = time(200, || {
        plugin.clear_lowerings();
        drop(rt.lowered_text("swiglu::swiglu", &args).unwrap());
    });
    row("lowering, checked fragment cached", lower_cached, lower_builtin);
    row("lowering, uncached (wasm round trip + checks)", lower_uncached, lower_builtin);
    let counts = plugin.counts();
    println!("  plugin calls {}, lowering cache hits {}, misses {}", counts.calls, counts.lowering_hits, counts.lowering_misses);

    // 4. The fragment checks on a cache miss. The spliced function in the
    // lowered module is the SDK's fragment as the host printed it (generic
    // ops, the same size): check it as the plugin's answer.
    let module = rt.lowered_text("swiglu::swiglu", &args).unwrap();
    let start = module.find("func.func private @ttpu_plugin").expect("the spliced fragment");
    let end = start + module[start..].find("\n}\n").expect("its end") + 3;
    let text = &module[start..end];
    let ty = Ty::new(Elem::F32, &[1024]);
    let checks = time(500, || {
        let c = fragment::check(text, &[ty.clone(), ty.clone()], &[ty.clone()], "s", fragment::Limits::default()).unwrap();
        std::hint::black_box(c);
    });
    let mut n = 2048;
    let miss = time(1, || {
        // A new shape each time: the plugin is asked, its fragment checked,
        // the program compiled and run.
        n += 1;
        let (a, b) = (tensor(&rt, n, 1), tensor(&rt, n, 2));
        sync(&rt.call1("swiglu::swiglu", &[a.into(), b.into()]).unwrap());
    });
    println!(
        "  fragment checks ({} ops, {} bytes): {}   {:5.1}% of an uncached lowering, {:6.3}% of a strict cache miss ({})",
        text.matches(" = \"").count(),
        text.len(),
        us(checks),
        100.0 * checks / lower_uncached,
        100.0 * checks / miss,
        us(miss).trim()
    );

    // 5. Module load: compile vs the cached artifact.
    let cache = std::env::temp_dir().join(format!("torchtpu-bench-plugins-{}", std::process::id()));
    let cold = time(3, || drop(sandbox::compile_now(&wasm, None).unwrap()));
    sandbox::compile_now(&wasm, Some(&cache)).unwrap();
    let warm = time(20, || {
        let (_, source) = sandbox::compile_now(&wasm, Some(&cache)).unwrap();
        assert_eq!(source, sandbox::ModuleSource::Cache);
    });
    let _ = std::fs::remove_dir_all(&cache);
    println!(
        "  module load ({} KiB wasm): compile {:8.2} ms   cached {:8.2} ms   ratio {:5.1}x faster",
        wasm.len() / 1024,
        cold * 1e3,
        warm * 1e3,
        cold / warm
    );
}
