//! NN ops end to end on strided views (the Python conformance tests cover
//! values against PyTorch on dense inputs): a view must give the same result
//! as the same data laid out densely. Plus hand-checked max-pool indices and
//! dropout seeding.

mod common;
use common::*;

use std::sync::Arc;

use torchtpu_core::{Runtime, Tensor, Value};

/// Deterministic, irregular test data.
fn data(n: usize) -> Vec<f32> {
    (0..n).map(|i| ((i * 37 % 23) as f32 - 11.0) * 0.25).collect()
}

/// The transpose of a row-major `[r, c]` matrix, row-major.
fn transposed(d: &[f32], r: usize, c: usize) -> Vec<f32> {
    (0..c).flat_map(|j| (0..r).map(move |i| d[i * c + j])).collect()
}

fn close(a: &[f32], b: &[f32]) {
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(b) {
        assert!((x - y).abs() <= 1e-5 * (1.0 + y.abs()), "{a:?} != {b:?}");
    }
}

#[test]
fn softmax_of_a_transposed_view() {
    let rt = rt();
    let d = data(12);
    let base = f32s(&rt, &d, &[3, 4]);
    let tv = base.view_of("test", 0, &[4, 3], &[1, 4]).unwrap();
    let dense = f32s(&rt, &transposed(&d, 3, 4), &[4, 3]);
    for op in ["aten::_softmax", "aten::_log_softmax"] {
        let a = rt.call1(op, &[(&tv).into(), Value::Int(-1), Value::Bool(false)]).unwrap();
        let b = rt.call1(op, &[(&dense).into(), Value::Int(-1), Value::Bool(false)]).unwrap();
        close(&host_f32(&rt, &a), &host_f32(&rt, &b));
    }
}

#[test]
fn convolution_of_a_strided_view() {
    let rt = rt();
    // Input [1, 2, 4, 4] read from every other row of a [1, 2, 8, 4] base.
    let d = data(64);
    let base = f32s(&rt, &d, &[1, 2, 8, 4]);
    let v = base.view_of("test", 4, &[1, 2, 4, 4], &[64, 32, 8, 1]).unwrap();
    let picked: Vec<f32> = (0..2)
        .flat_map(|c| (0..4).flat_map(move |h| (0..4).map(move |w| (c, h, w))))
        .map(|(c, h, w)| d[4 + c * 32 + h * 8 + w])
        .collect();
    let dense = f32s(&rt, &picked, &[1, 2, 4, 4]);
    let w = f32s(&rt, &data(36)[..18], &[1, 2, 3, 3]);
    let args = |x: &Tensor| -> Vec<Value> {
        vec![
            x.into(),
            (&w).into(),
            Value::None,
            Value::IntList(vec![1, 1]),
            Value::IntList(vec![1, 1]),
            Value::IntList(vec![1, 1]),
            Value::Bool(false),
            Value::IntList(vec![0, 0]),
            Value::Int(1),
        ]
    };
    let a = rt.call1("aten::convolution", &args(&v)).unwrap();
    let b = rt.call1("aten::convolution", &args(&dense)).unwrap();
    assert_eq!(a.sizes(), &[1, 1, 4, 4]);
    close(&host_f32(&rt, &a), &host_f32(&rt, &b));
}

#[test]
fn max_pool_indices_by_hand() {
    let rt = rt();
    // One 3x4 plane, 2x2 windows with stride 2: maxima at flat indices.
    let x = f32s(&rt, &[1.0, 5.0, 2.0, 2.0, 3.0, 0.0, 7.0, 1.0, 9.0, 9.0, 0.0, 8.0], &[1, 1, 3, 4]);
    let out = rt
        .call(
            "aten::max_pool2d_with_indices",
            &[
                (&x).into(),
                Value::IntList(vec![2, 2]),
                Value::IntList(vec![]),
                Value::IntList(vec![0, 0]),
                Value::IntList(vec![1, 1]),
                Value::Bool(true),
            ],
        )
        .unwrap();
    let (vals, idx) = (out[0].clone().into_tensor().unwrap(), out[1].clone().into_tensor().unwrap());
    assert_eq!(vals.sizes(), &[1, 1, 2, 2]);
    assert_eq!(host_f32(&rt, &vals), vec![5.0, 7.0, 9.0, 8.0]);
    // Ties keep the first maximum (9 at index 8, not 9).
    assert_eq!(host_i64(&rt, &idx), vec![1, 6, 8, 11]);
}

#[test]
fn dropout_follows_the_seed() {
    let rt = rt();
    let x = f32s(&rt, &[1.0; 256], &[256]);
    let mask = |rt: &Arc<Runtime>| -> Vec<u8> {
        let out = rt.call("aten::native_dropout", &[(&x).into(), Value::Double(0.5), Value::Bool(true)]).unwrap();
        rt.tensor_to_host(&out[1].clone().into_tensor().unwrap()).unwrap()
    };
    rt.manual_seed(42);
    let a = mask(&rt);
    let b = mask(&rt);
    rt.manual_seed(42);
    let c = mask(&rt);
    assert_eq!(a, c);
    assert_ne!(a, b);
    let kept = a.iter().filter(|&&m| m != 0).count();
    assert!((96..=160).contains(&kept), "{kept} of 256 kept at p = 0.5");
}
