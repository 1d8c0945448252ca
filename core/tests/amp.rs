//! The AMP (GradScaler) kernels with hand-computed values, in every
//! execution mode (the Python suite compares them against PyTorch CPU).
// The literals are exact f32 values, written out on purpose.
#![allow(clippy::excessive_precision)]

mod common;
use common::*;

use std::sync::Arc;

use half::bf16;
use torchtpu_core::{DType, Runtime, Tensor, Value};

const INF: f32 = f32::INFINITY;

fn i32s(rt: &Arc<Runtime>, data: &[i32]) -> Tensor {
    let bytes: Vec<u8> = data.iter().flat_map(|x| x.to_ne_bytes()).collect();
    rt.tensor_from_host(&bytes, DType::I32, &[data.len() as i64], 0).unwrap()
}

fn host_i32(rt: &Arc<Runtime>, t: &Tensor) -> Vec<i32> {
    rt.tensor_to_host(t).unwrap().chunks(4).map(|c| i32::from_ne_bytes(c.try_into().unwrap())).collect()
}

fn bf16s(rt: &Arc<Runtime>, data: &[f32]) -> Tensor {
    let bytes: Vec<u8> = data.iter().flat_map(|x| bf16::from_f32(*x).to_ne_bytes()).collect();
    rt.tensor_from_host(&bytes, DType::BF16, &[data.len() as i64], 0).unwrap()
}

fn host_bf16(rt: &Arc<Runtime>, t: &Tensor) -> Vec<f32> {
    rt.tensor_to_host(t).unwrap().chunks(2).map(|c| bf16::from_ne_bytes(c.try_into().unwrap()).to_f32()).collect()
}

/// Bitwise, so that NaN equals NaN.
fn same(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()))
}

fn unscale_(rt: &Arc<Runtime>, grads: &[Tensor], found: &Tensor, inv: f32) {
    let inv = f32s(rt, &[inv], &[1]);
    let out = rt
        .call("aten::_amp_foreach_non_finite_check_and_unscale_", &[grads.to_vec().into(), found.into(), inv.into()])
        .unwrap();
    assert!(out.is_empty());
}

#[test]
fn unscale_multiplies_and_flags_non_finite() {
    each_mode(|rt, mode| {
        let (a, b) = (f32s(rt, &[2.0, 4.0], &[2]), f32s(rt, &[8.0, -INF], &[2]));
        let found = f32s(rt, &[0.0], &[1]);
        unscale_(rt, &[a.clone(), b.clone()], &found, 0.25);
        assert_eq!(host_f32(rt, &a), [0.5, 1.0], "{mode:?}");
        assert_eq!(host_f32(rt, &b), [2.0, -INF], "{mode:?}");
        assert_eq!(host_f32(rt, &found), [1.0], "{mode:?}");

        // All finite: found_inf keeps whatever it held.
        let c = f32s(rt, &[3.0], &[1]);
        let found = f32s(rt, &[0.75], &[1]);
        unscale_(rt, std::slice::from_ref(&c), &found, 0.5);
        assert_eq!((host_f32(rt, &c), host_f32(rt, &found)), (vec![1.5], vec![0.75]), "{mode:?}");

        // A NaN in a bf16 gradient, found_inf in f32; the product rounds to bf16.
        let h = bf16s(rt, &[1.0, f32::NAN, 3.0]);
        let found = f32s(rt, &[0.0], &[1]);
        unscale_(rt, std::slice::from_ref(&h), &found, 1.0 / 3.0);
        // 3 * f32(1/3) = 1.0000000298 rounds to 1 in bf16; 1/3 to 0.333984375.
        assert!(same(&host_bf16(rt, &h), &[0.333984375, f32::NAN, 1.0]), "{mode:?}: {:?}", host_bf16(rt, &h));
        assert_eq!(host_f32(rt, &found), [1.0], "{mode:?}");
    });
}

#[test]
fn unscale_functional_form_returns_a_list_and_found_inf() {
    each_mode(|rt, mode| {
        let (a, b) = (f32s(rt, &[2.0, INF], &[2]), f32s(rt, &[6.0], &[1]));
        let found = f32s(rt, &[0.0], &[1]);
        let inv = f32s(rt, &[0.5], &[1]);
        let out = rt
            .call(
                "aten::_amp_foreach_non_finite_check_and_unscale",
                &[vec![a.clone(), b.clone()].into(), (&found).into(), inv.into()],
            )
            .unwrap();
        let [Value::TensorList(list), Value::Tensor(f)] = &out[..] else { panic!("{mode:?}: {out:?}") };
        assert_eq!(list.len(), 2);
        assert_eq!(host_f32(rt, &list[0]), [1.0, INF], "{mode:?}");
        assert_eq!(host_f32(rt, &list[1]), [3.0], "{mode:?}");
        assert_eq!(host_f32(rt, f), [1.0], "{mode:?}");
        // The inputs are not written.
        assert_eq!((host_f32(rt, &a), host_f32(rt, &found)), (vec![2.0, INF], vec![0.0]), "{mode:?}");
    });
}

/// Runs `_amp_update_scale_` and returns the new (scale, tracker).
fn update(rt: &Arc<Runtime>, scale: f32, tracker: i32, found: f32, growth: f64, backoff: f64, interval: i64) -> (f32, i32) {
    let (s, t, f) = (f32s(rt, &[scale], &[1]), i32s(rt, &[tracker]), f32s(rt, &[found], &[1]));
    let out = rt
        .call(
            "aten::_amp_update_scale_",
            &[(&s).into(), (&t).into(), f.into(), growth.into(), backoff.into(), interval.into()],
        )
        .unwrap();
    assert!(matches!(&out[..], [Value::Tensor(r)] if r.same_storage(&s)));
    (host_f32(rt, &s)[0], host_i32(rt, &t)[0])
}

#[test]
fn update_scale_follows_the_cuda_kernel() {
    each_mode(|rt, mode| {
        // found_inf (any nonzero, NaN too): back off, reset the tracker.
        assert_eq!(update(rt, 65536.0, 7, 1.0, 2.0, 0.5, 2000), (32768.0, 0), "{mode:?}");
        assert_eq!(update(rt, 4.0, 3, f32::NAN, 2.0, 0.5, 10), (2.0, 0), "{mode:?}");
        // A successful step counts...
        assert_eq!(update(rt, 4.0, 3, 0.0, 2.0, 0.5, 10), (4.0, 4), "{mode:?}");
        // ...and the interval-th grows the scale and resets the count.
        assert_eq!(update(rt, 4.0, 9, 0.0, 2.0, 0.5, 10), (8.0, 0), "{mode:?}");
        // A grown scale that overflows f32 is not taken (the count still resets).
        assert_eq!(update(rt, 3e38, 1, 0.0, 2.0, 0.5, 2), (3e38, 0), "{mode:?}");
        // Past the interval it only counts (equality, not >=).
        assert_eq!(update(rt, 4.0, 7, 0.0, 2.0, 0.5, 3), (4.0, 8), "{mode:?}");
        // The product is taken in f64 and rounded once: 64.0592041015625 *
        // 0.8823814699152238 = 56.52465...; rounded to f32 that is
        // 56.524654388427734, where an f32 product of f32(0.88238...) gives
        // 56.524658203125.
        let (s, k) = (64.0592041015625f32, 0.8823814699152238f64);
        let want = (s as f64 * k) as f32;
        assert_eq!(want, 56.524654388427734);
        assert_ne!(want, s * k as f32);
        assert_eq!(update(rt, s, 0, 1.0, 2.0, k, 5), (want, 0), "{mode:?}");
        assert_eq!(update(rt, s, 4, 0.0, k, 0.5, 5), (want, 0), "{mode:?}");
    });
}

#[test]
fn update_scale_functional_form_and_errors() {
    each_mode(|rt, mode| {
        let (s, t, f) = (f32s(rt, &[4.0], &[1]), i32s(rt, &[1]), f32s(rt, &[0.0], &[1]));
        let args: [Value; 6] = [(&s).into(), (&t).into(), (&f).into(), 2.0.into(), 0.5.into(), 2.into()];
        let out = rt.call("aten::_amp_update_scale", &args).unwrap();
        let [Value::Tensor(ns), Value::Tensor(nt)] = &out[..] else { panic!("{mode:?}: {out:?}") };
        assert_eq!((host_f32(rt, ns), host_i32(rt, nt)), (vec![8.0], vec![0]), "{mode:?}");
        assert_eq!((host_f32(rt, &s), host_i32(rt, &t)), (vec![4.0], vec![1]), "{mode:?}: inputs untouched");

        let long = i64s(rt, &[1], &[1]);
        let e = rt.call("aten::_amp_update_scale_", &[s.into(), long.into(), f.into(), 2.0.into(), 0.5.into(), 2.into()]);
        let e = e.unwrap_err().to_string();
        assert!(e.contains("aten::_amp_update_scale_: growth_tracker must be an int tensor."), "{e}");
    });
}
