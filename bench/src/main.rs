//! Measures the runtime against its floor, side by side in one run:
//!
//! 1. Strict-eager latency of a small elementwise op (`aten::mul.Tensor` on
//!    1024 f32), against executing the very same cached StableHLO directly
//!    through PJRT with pre-uploaded buffers. Both synchronous (wait for each
//!    result) and pipelined (launch N, then wait).
//! 2. The same op through the C ABI, as a frontend calls it: by name with a
//!    handle per argument and result (`ttpu_op_call`), and by op id with
//!    views and geometry-carrying results (`ttpu_op_call_id`), pipelined,
//!    against the direct PJRT execute.
//! 3. GFLOP/s of a 1024x1024 f32 matmul (`aten::mm`), against direct PJRT.
//!
//! Prints medians over several rounds and the ratio runtime / direct.
//! Run: `cargo run --release -p torchtpu-bench` (after scripts/setup.sh).

use std::sync::Arc;
use std::time::Instant;

mod capi_rows;

use torchtpu_core::pjrt::{Buffer, CompileOptions, Event};
use torchtpu_core::{DType, Runtime, RuntimeOptions, Tensor, Value};

const ROUNDS: usize = 7;

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(|a, b| a.partial_cmp(b).unwrap());
    xs[xs.len() / 2]
}

fn f32_tensor(rt: &Arc<Runtime>, n: usize, sizes: &[i64], seed: u32) -> (Tensor, Vec<u8>) {
    let bytes: Vec<u8> =
        (0..n).flat_map(|i| (((i as u32).wrapping_mul(2654435761).wrapping_add(seed) % 1000) as f32 / 1000.0).to_ne_bytes()).collect();
    (rt.tensor_from_host(&bytes, DType::F32, sizes, 0).unwrap(), bytes)
}

fn wait(t: &Tensor) {
    t.storage().buffer().expect("strict mode: materialized").ready_event().unwrap().wait().unwrap();
}

struct Case {
    runtime_s: f64,
    direct_s: f64,
}

/// Times `iters` iterations of the runtime call and of the direct execute.
fn compare(
    rt: &Arc<Runtime>,
    op: &str,
    args: &[Value],
    host: &[(&[u8], &[i64])],
    iters: usize,
    pipelined: bool,
) -> Case {
    // The same program the runtime compiled for this signature.
    let text = rt.lowered_text(op, args).unwrap();
    let exe = rt.client().compile(op, &text, &CompileOptions::Portable).unwrap();
    let bufs: Vec<Buffer> = host
        .iter()
        .map(|(b, dims)| {
            let n: i64 = dims.iter().product();
            rt.client().buffer_from_host(b, DType::F32.element_type(), &[n], 0).unwrap()
        })
        .collect();
    let refs: Vec<&Buffer> = bufs.iter().collect();
    // Warm up both paths (the runtime compiles on its first call).
    for _ in 0..3 {
        let out = rt.call1(op, args).unwrap();
        wait(&out);
        let (_o, ev) = exe.execute(&refs, 0).unwrap();
        ev.wait().unwrap();
    }
    let mut runtime = Vec::new();
    let mut direct = Vec::new();
    for _ in 0..ROUNDS {
        let t = Instant::now();
        if pipelined {
            let outs: Vec<Tensor> = (0..iters).map(|_| rt.call1(op, args).unwrap()).collect();
            rt.synchronize().unwrap();
            drop(outs);
        } else {
            for _ in 0..iters {
                wait(&rt.call1(op, args).unwrap());
            }
        }
        runtime.push(t.elapsed().as_secs_f64() / iters as f64);

        let t = Instant::now();
        if pipelined {
            let mut keep: Vec<(Vec<Buffer>, Event)> = Vec::with_capacity(iters);
            for _ in 0..iters {
                keep.push(exe.execute(&refs, 0).unwrap());
            }
            for (_, ev) in keep {
                ev.wait().unwrap();
            }
        } else {
            // Wait the way the runtime's caller does: on the output buffer.
            for _ in 0..iters {
                let (o, _ev) = exe.execute(&refs, 0).unwrap();
                o[0].ready_event().unwrap().wait().unwrap();
            }
        }
        direct.push(t.elapsed().as_secs_f64() / iters as f64);
    }
    Case { runtime_s: median(runtime), direct_s: median(direct) }
}

fn main() {
    let rt = Runtime::new(RuntimeOptions::default()).expect("runtime (run scripts/setup.sh first)");
    println!("torchtpu bench on PJRT '{}' ({}), {} devices; medians of {ROUNDS} rounds", rt.platform_name(), rt.platform_version(), rt.device_count());

    let n = 1024;
    let (a, ha) = f32_tensor(&rt, n, &[n as i64], 1);
    let (b, hb) = f32_tensor(&rt, n, &[n as i64], 2);
    let args = [Value::from(&a), Value::from(&b)];
    let dims = [n as i64];
    let host: [(&[u8], &[i64]); 2] = [(&ha, &dims), (&hb, &dims)];
    println!("\n{:<44} {:>12} {:>12} {:>8}", "case", "runtime", "direct PJRT", "ratio");
    for (label, pipelined, iters) in [("mul 1024xf32, synchronous (us/op)", false, 300), ("mul 1024xf32, pipelined (us/op)", true, 300)] {
        let c = compare(&rt, "aten::mul.Tensor", &args, &host, iters, pipelined);
        println!(
            "{label:<44} {:>12.2} {:>12.2} {:>7.2}x",
            c.runtime_s * 1e6,
            c.direct_s * 1e6,
            c.runtime_s / c.direct_s
        );
    }

    capi_rows::print(&ha, &hb, n, |pipelined, iters| compare(&rt, "aten::mul.Tensor", &args, &host, iters, pipelined).direct_s);

    let m = 1024usize;
    let (x, hx) = f32_tensor(&rt, m * m, &[m as i64, m as i64], 3);
    let (y, hy) = f32_tensor(&rt, m * m, &[m as i64, m as i64], 4);
    let args = [Value::from(&x), Value::from(&y)];
    let dims = [m as i64, m as i64];
    let host: [(&[u8], &[i64]); 2] = [(&hx, &dims), (&hy, &dims)];
    let c = compare(&rt, "aten::mm", &args, &host, 10, false);
    let flops = 2.0 * (m as f64).powi(3);
    println!(
        "{:<44} {:>12.1} {:>12.1} {:>7.2}x",
        "mm 1024x1024 f32 (GFLOP/s, higher is better)",
        flops / c.runtime_s / 1e9,
        flops / c.direct_s / 1e9,
        (flops / c.runtime_s) / (flops / c.direct_s)
    );
    let s = rt.stats();
    println!("\nruntime: {} compiles, {} cache hits, {} executions", s.compiles, s.cache_hits, s.executions);
}
