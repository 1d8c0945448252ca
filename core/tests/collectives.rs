//! Collectives over the CPU plugin's local devices (the native lowering:
//! one program compiled with `num_replicas` = the group size), against
//! values computed by hand, in every execution mode.

mod common;
use common::MODES;

use std::sync::Arc;

use half::bf16;
use torchtpu_core::collective::{Collective, ReduceOp};
use torchtpu_core::graph::FlushReason;
use torchtpu_core::runtime::set_thread_mode;
use torchtpu_core::{DType, ExecMode, Runtime, RuntimeOptions, Tensor, Value};

const N: usize = 4;

/// One test at a time: replicated programs of several clients running at
/// once in one process (parallel tests) crashed the XLA CPU plugin (SIGSEGV
/// in a release build); the cause inside the plugin is not yet known.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

fn rt() -> Arc<Runtime> {
    Runtime::new(RuntimeOptions { cpu_device_count: Some(N), ..Default::default() }).expect("runtime")
}

fn put_f32(rt: &Arc<Runtime>, data: &[f32], sizes: &[i64], device: usize) -> Tensor {
    let bytes: Vec<u8> = data.iter().flat_map(|x| x.to_ne_bytes()).collect();
    rt.tensor_from_host(&bytes, DType::F32, sizes, device).unwrap()
}

fn put_bf16(rt: &Arc<Runtime>, data: &[f32], sizes: &[i64], device: usize) -> Tensor {
    let bytes: Vec<u8> = data.iter().flat_map(|x| bf16::from_f32(*x).to_ne_bytes()).collect();
    rt.tensor_from_host(&bytes, DType::BF16, sizes, device).unwrap()
}

fn get(rt: &Arc<Runtime>, t: &Tensor) -> Vec<f32> {
    let bytes = rt.tensor_to_host(t).unwrap();
    match t.dtype() {
        DType::F32 => bytes.chunks(4).map(|c| f32::from_ne_bytes(c.try_into().unwrap())).collect(),
        DType::BF16 => bytes.chunks(2).map(|c| bf16::from_ne_bytes(c.try_into().unwrap()).to_f32()).collect(),
        d => panic!("unexpected {d}"),
    }
}

/// Rank `r`'s input: 6 values, distinct per rank and exact in bf16.
fn input(r: usize) -> Vec<f32> {
    (0..6).map(|i| (r as f32 + 1.0) * if i % 2 == 0 { 1.0 } else { -0.5 } + i as f32).collect()
}

fn inputs(rt: &Arc<Runtime>, dtype: DType) -> Vec<Tensor> {
    (0..N)
        .map(|r| match dtype {
            DType::F32 => put_f32(rt, &input(r), &[6], r),
            _ => put_bf16(rt, &input(r), &[6], r),
        })
        .collect()
}

fn reduce(op: ReduceOp, values: &[Vec<f32>]) -> Vec<f32> {
    (0..values[0].len())
        .map(|i| {
            let col = values.iter().map(|v| v[i]);
            match op {
                ReduceOp::Sum => col.sum(),
                ReduceOp::Avg => col.sum::<f32>() / values.len() as f32,
                ReduceOp::Max => col.fold(f32::MIN, f32::max),
                ReduceOp::Min => col.fold(f32::MAX, f32::min),
                ReduceOp::Prod => col.product(),
            }
        })
        .collect()
}

fn in_modes(f: impl Fn(ExecMode)) {
    for mode in MODES {
        set_thread_mode(Some(mode)).unwrap();
        f(mode);
    }
    set_thread_mode(None).unwrap();
}

#[test]
fn all_reduce_every_op_f32_and_bf16() {
    let _serial = serial();
    let rt = rt();
    let expected_inputs: Vec<Vec<f32>> = (0..N).map(input).collect();
    in_modes(|mode| {
        for dtype in [DType::F32, DType::BF16] {
            for op in ReduceOp::ALL {
                let out = rt.collective(&Collective::AllReduce(op), &inputs(&rt, dtype)).unwrap();
                let want = reduce(op, &expected_inputs);
                for (r, t) in out.iter().enumerate() {
                    assert_eq!(t.device(), r);
                    assert_eq!(t.dtype(), dtype);
                    let got = get(&rt, t);
                    for (g, w) in got.iter().zip(&want) {
                        let tol = if dtype == DType::BF16 { w.abs() * 1e-2 } else { 1e-6 };
                        assert!((g - w).abs() <= tol, "{mode:?} {dtype} {op:?} rank {r}: {got:?} vs {want:?}");
                    }
                }
            }
        }
    });
}

#[test]
fn gather_scatter_all_to_all_and_permute() {
    let _serial = serial();
    let rt = rt();
    in_modes(|mode| {
        for dtype in [DType::F32, DType::BF16] {
            // all_gather: [6] per rank -> [24] = the inputs in rank order.
            let out = rt.collective(&Collective::AllGather, &inputs(&rt, dtype)).unwrap();
            let want: Vec<f32> = (0..N).flat_map(input).collect();
            for t in &out {
                assert_eq!(t.sizes(), &[24]);
                assert_eq!(get(&rt, t), want, "{mode:?} {dtype} all_gather");
            }

            // reduce_scatter of [8] per rank: rank r gets elements 2r, 2r+1 of the sum.
            let xs: Vec<Tensor> = (0..N)
                .map(|r| {
                    let v: Vec<f32> = (0..8).map(|i| (i * 10 + r) as f32).collect();
                    if dtype == DType::F32 { put_f32(&rt, &v, &[8], r) } else { put_bf16(&rt, &v, &[8], r) }
                })
                .collect();
            let out = rt.collective(&Collective::ReduceScatter(ReduceOp::Sum), &xs).unwrap();
            for (r, t) in out.iter().enumerate() {
                let want: Vec<f32> = (2 * r..2 * r + 2).map(|i| (0..N).map(|k| (i * 10 + k) as f32).sum()).collect();
                assert_eq!(t.sizes(), &[2]);
                assert_eq!(get(&rt, t), want, "{mode:?} {dtype} reduce_scatter rank {r}");
            }

            // all_to_all of [4, 2]: chunk j of rank i is row j, which becomes row i of rank j.
            let xs: Vec<Tensor> = (0..N)
                .map(|i| {
                    let v: Vec<f32> = (0..8).map(|e| (i * 16 + e) as f32).collect();
                    if dtype == DType::F32 { put_f32(&rt, &v, &[4, 2], i) } else { put_bf16(&rt, &v, &[4, 2], i) }
                })
                .collect();
            let out = rt.collective(&Collective::AllToAll, &xs).unwrap();
            for (j, t) in out.iter().enumerate() {
                let want: Vec<f32> = (0..N).flat_map(|i| (0..2).map(move |c| (i * 16 + 2 * j + c) as f32)).collect();
                assert_eq!(get(&rt, t), want, "{mode:?} {dtype} all_to_all rank {j}");
            }

            // A ring shift (send/recv); then a single pair: the others get zeros.
            let ring: Vec<(usize, usize)> = (0..N).map(|r| (r, (r + 1) % N)).collect();
            let out = rt.collective(&Collective::Permute { pairs: ring }, &inputs(&rt, dtype)).unwrap();
            for (r, t) in out.iter().enumerate() {
                assert_eq!(get(&rt, t), input((r + N - 1) % N), "{mode:?} {dtype} ring rank {r}");
            }
            let out = rt.collective(&Collective::Permute { pairs: vec![(3, 0)] }, &inputs(&rt, dtype)).unwrap();
            assert_eq!(get(&rt, &out[0]), input(3));
            for t in &out[1..] {
                assert_eq!(get(&rt, t), vec![0.0; 6]);
            }
        }
    });
}

#[test]
fn broadcast_is_bit_exact() {
    let _serial = serial();
    let rt = rt();
    // NaN with a payload, -0.0 and infinities survive (a float sum would not keep -0.0).
    let special = [f32::from_bits(0x7fc0_1234), -0.0, f32::INFINITY, f32::NEG_INFINITY, 1e-42, 3.5];
    for root in [0, 2] {
        let xs: Vec<Tensor> =
            (0..N).map(|r| if r == root { put_f32(&rt, &special, &[2, 3], r) } else { put_f32(&rt, &input(r), &[2, 3], r) }).collect();
        let out = rt.collective(&Collective::Broadcast { root }, &xs).unwrap();
        for t in &out {
            assert_eq!(t.sizes(), &[2, 3]);
            let bits: Vec<u32> = get(&rt, t).iter().map(|x| x.to_bits()).collect();
            assert_eq!(bits, special.iter().map(|x| x.to_bits()).collect::<Vec<_>>(), "root {root}");
        }
    }
    // Integers and booleans too.
    let ints: Vec<Tensor> = (0..N)
        .map(|r| {
            let v: Vec<u8> = [i64::MIN + r as i64, -7, r as i64].iter().flat_map(|x| x.to_ne_bytes()).collect();
            rt.tensor_from_host(&v, DType::I64, &[3], r).unwrap()
        })
        .collect();
    let out = rt.collective(&Collective::Broadcast { root: 1 }, &ints).unwrap();
    assert_eq!(common::host_i64(&rt, &out[3]), vec![i64::MIN + 1, -7, 1]);
    let bools: Vec<Tensor> = (0..N).map(|r| rt.tensor_from_host(&[(r == 2) as u8, 1], DType::Bool, &[2], r).unwrap()).collect();
    let out = rt.collective(&Collective::Broadcast { root: 2 }, &bools).unwrap();
    assert_eq!(rt.tensor_to_host(&out[0]).unwrap(), vec![1, 1]);
}

#[test]
fn subgroups_views_and_integer_max() {
    let _serial = serial();
    let rt = rt();
    // Two of the four devices, in a different rank order: rank 0 is tpu:3.
    let a = put_f32(&rt, &[1.0, 2.0, 3.0, 4.0], &[2, 2], 3);
    let b = put_f32(&rt, &[10.0, 20.0, 30.0, 40.0], &[2, 2], 1);
    // A transposed view is read as the view, not as its storage.
    let at = rt.call1("aten::t", &[(&a).into()]).unwrap();
    let bt = rt.call1("aten::t", &[(&b).into()]).unwrap();
    let out = rt.collective(&Collective::AllGather, &[at, bt]).unwrap();
    assert_eq!(out[0].device(), 3);
    assert_eq!(get(&rt, &out[1]), vec![1.0, 3.0, 2.0, 4.0, 10.0, 30.0, 20.0, 40.0]);

    let xs: Vec<Tensor> = (0..N)
        .map(|r| {
            let v: Vec<u8> = [r as i64 * 3 - 4, -(r as i64)].iter().flat_map(|x| x.to_ne_bytes()).collect();
            rt.tensor_from_host(&v, DType::I64, &[2], r).unwrap()
        })
        .collect();
    let out = rt.collective(&Collective::AllReduce(ReduceOp::Max), &xs).unwrap();
    assert_eq!(common::host_i64(&rt, &out[2]), vec![5, 0]);
}

#[test]
fn a_collective_flushes_pending_graphs_and_is_cached() {
    let _serial = serial();
    let rt = rt();
    set_thread_mode(Some(ExecMode::DeferAndFuse)).unwrap();
    let before = rt.stats();
    let xs: Vec<Tensor> = (0..N)
        .map(|r| {
            let x = put_f32(&rt, &input(r), &[6], r);
            // Pending work on each device: y = x * 2 + 1.
            let y = rt.call1("aten::mul.Scalar", &[(&x).into(), Value::Scalar(torchtpu_core::Scalar::Float(2.0))]).unwrap();
            rt.call1("aten::add.Scalar", &[(&y).into(), Value::Scalar(torchtpu_core::Scalar::Float(1.0)), Value::Scalar(torchtpu_core::Scalar::Int(1))]).unwrap()
        })
        .collect();
    assert!(rt.pending_ops(0) > 0);
    let out = rt.collective(&Collective::AllReduce(ReduceOp::Sum), &xs).unwrap();
    let after = rt.stats();
    assert_eq!(rt.pending_ops(0), 0);
    assert_eq!(after.flushes[FlushReason::Collective as usize] - before.flushes[FlushReason::Collective as usize], N as u64);
    let doubled: Vec<Vec<f32>> = (0..N).map(|r| input(r).iter().map(|x| x * 2.0 + 1.0).collect()).collect();
    assert_eq!(get(&rt, &out[1]), reduce(ReduceOp::Sum, &doubled));
    set_thread_mode(None).unwrap();

    // The same collective again: no compile.
    let compiles = rt.stats().compiles;
    rt.collective(&Collective::AllReduce(ReduceOp::Sum), &inputs(&rt, DType::F32)).unwrap();
    assert_eq!(rt.stats().compiles, compiles);
    assert!(rt.stats().collectives >= 2);
}

#[test]
fn a_collective_on_a_side_stream_orders_with_its_events() {
    let _serial = serial();
    use torchtpu_core::runtime::StreamEvent;
    let rt = rt();
    let side: Vec<_> = (0..N).map(|d| rt.streams().create(d)).collect();
    let xs = inputs(&rt, DType::F32);
    let out = {
        // The collective's completion is tracked on the current (side) streams.
        for s in &side {
            rt.streams().set_current(Some(s));
        }
        let out = rt.collective(&Collective::AllReduce(ReduceOp::Sum), &xs).unwrap();
        rt.streams().set_current(None);
        out
    };
    for s in &side {
        let e = StreamEvent::new();
        e.record(s);
        e.synchronize().unwrap();
        assert!(e.query());
    }
    assert_eq!(get(&rt, &out[0]), reduce(ReduceOp::Sum, &(0..N).map(input).collect::<Vec<_>>()));
}

#[test]
fn barrier_meets_every_device() {
    let _serial = serial();
    let rt = rt();
    rt.barrier(&[0, 1, 2, 3]).unwrap();
    rt.barrier(&[2]).unwrap();
    let e = rt.barrier(&[0, 9]).unwrap_err().to_string();
    assert!(e.contains("device index 9"), "{e}");
}

#[test]
fn bad_calls_name_the_collective_and_the_ranks() {
    let _serial = serial();
    let rt = rt();
    let a = put_f32(&rt, &[1.0; 4], &[4], 0);
    let b = put_f32(&rt, &[1.0; 6], &[6], 1);
    let c = put_f32(&rt, &[1.0; 4], &[4], 0);
    let sum = Collective::AllReduce(ReduceOp::Sum);
    let cases: Vec<(Collective, Vec<Tensor>, &str)> = vec![
        (sum.clone(), vec![a.clone(), b.clone()], "rank 1 (tpu:1) has float32[6] and rank 0 (tpu:0) has float32[4]"),
        (sum.clone(), vec![a.clone(), c], "ranks 0 and 1 are the same device"),
        (sum.clone(), vec![], "no input tensors"),
        (Collective::ReduceScatter(ReduceOp::Sum), vec![put_f32(&rt, &[1.0; 3], &[3], 0), put_f32(&rt, &[1.0; 3], &[3], 1)], "divisible"),
    ];
    for (coll, xs, want) in cases {
        let e = rt.collective(&coll, &xs).unwrap_err().to_string();
        assert!(e.contains(coll.name()) && e.contains(want), "{e}");
    }
    let ints: Vec<Tensor> = (0..2).map(|d| rt.tensor_from_host(&[0u8; 8], DType::I64, &[1], d).unwrap()).collect();
    let e = rt.collective(&Collective::AllReduce(ReduceOp::Avg), &ints).unwrap_err().to_string();
    assert!(e.contains("all_reduce") && e.contains("avg"), "{e}");
    // The runtime still works.
    let out = rt.collective(&sum, &[a, put_f32(&rt, &[2.0; 4], &[4], 1)]).unwrap();
    assert_eq!(get(&rt, &out[0]), vec![3.0; 4]);
}
