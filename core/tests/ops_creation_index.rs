//! Creation and index ops end to end on the default plugin, checked against
//! hand-computed results (the Python suite compares against PyTorch).

mod common;
use common::*;


use torchtpu_core::{Code, DType, Scalar, Value};

#[test]
fn full_fill_value_does_not_recompile() {
    let rt = rt();
    let size = Value::IntList(vec![2, 2]);
    let a = rt.call1("aten::full", &[size.clone(), Value::Scalar(Scalar::Float(1.5))]).unwrap();
    assert_eq!(a.dtype(), DType::F32);
    let before = rt.stats().compiles;
    let b = rt.call1("aten::full", &[size, Value::Scalar(Scalar::Float(-4.0))]).unwrap();
    assert_eq!(rt.stats().compiles, before);
    assert_eq!(host_f32(&rt, &a), vec![1.5; 4]);
    assert_eq!(host_f32(&rt, &b), vec![-4.0; 4]);
    let i = rt.call1("aten::full", &[Value::IntList(vec![3]), Value::Scalar(Scalar::Int(7))]).unwrap();
    assert_eq!(i.dtype(), DType::I64);
}

#[test]
fn arange_length_and_errors() {
    let rt = rt();
    let s = |x: i64| Value::Scalar(Scalar::Int(x));
    let t = rt.call1("aten::arange.start_step", &[s(10), s(0), s(-3)]).unwrap();
    assert_eq!(t.dtype(), DType::I64);
    assert_eq!(host_i64(&rt, &t), vec![10, 7, 4, 1]);
    let f = rt.call1("aten::arange.start_step", &[s(0), s(1), Value::Scalar(Scalar::Float(0.25))]).unwrap();
    assert_eq!(host_f32(&rt, &f), vec![0.0, 0.25, 0.5, 0.75]);
    let e = rt.call("aten::arange.start_step", &[s(0), s(5), s(0)]).unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    let msg = e.to_string();
    assert!(msg.contains("aten::arange.start_step") && msg.contains("step must be nonzero") && msg.contains("end=5"), "{msg}");
}

#[test]
fn empty_strided_keeps_strides() {
    let rt = rt();
    let t = rt.call1("aten::empty_strided", &[Value::IntList(vec![2, 3]), Value::IntList(vec![1, 2])]).unwrap();
    assert_eq!(t.sizes(), &[2, 3]);
    assert_eq!(t.strides(), &[1, 2]);
    assert_eq!(t.storage().numel(), 6);
    // dtype and device reach the new storage; an empty view needs none.
    let ints = |v: &[i64]| Value::IntList(v.to_vec());
    let last = rt.device_count() as i64 - 1;
    let args = [ints(&[0, 3]), ints(&[1, 1 << 62]), Value::DType(DType::I16), Value::None, Value::Int(last)];
    let e = rt.call1("aten::empty_strided", &args).unwrap();
    assert_eq!((e.sizes(), e.strides(), e.storage().numel()), (&[0, 3][..], &[1, 1 << 62][..], 0));
    assert_eq!((e.dtype(), e.storage().device()), (DType::I16, last as usize));
    // A storage size past i64 is refused, not wrapped: by a product, and by
    // a sum of in-range products.
    for (size, stride) in [(vec![1i64 << 32, 1 << 32], vec![1i64 << 32, 1]), (vec![1 << 62, 1 << 62, 2], vec![1, 1, 1])] {
        let e = rt.call1("aten::empty_strided", &[ints(&size), ints(&stride)]).unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{e}");
        let msg = e.to_string();
        let want = [format!("{size:?}"), format!("{stride:?}")];
        assert!(msg.contains("aten::empty_strided") && want.iter().all(|w| msg.contains(w)), "{msg}");
    }
}

#[test]
fn random_is_reproducible() {
    let rt = rt();
    let draw = || rt.call1("aten::rand", &[Value::IntList(vec![64])]).unwrap();
    rt.manual_seed(11);
    let (a, b) = (host_f32(&rt, &draw()), host_f32(&rt, &draw()));
    rt.manual_seed(11);
    assert_eq!(host_f32(&rt, &draw()), a);
    assert_ne!(a, b);
    assert!(a.iter().all(|&x| (0.0..1.0).contains(&x)));
}

#[test]
fn advanced_index_places_batch_dims() {
    let rt = rt();
    // x = arange(24).reshape(2, 3, 4)
    let x = i64s(&rt, &(0..24).collect::<Vec<_>>(), &[2, 3, 4]);
    let i0 = i64s(&rt, &[1, -2], &[2]);
    let i2 = i64s(&rt, &[3, 0], &[2]);
    // Non-adjacent indices: the index dims go first -> [2, 3].
    let out = rt.call1("aten::index.Tensor", &[(&x).into(), Value::OptTensorList(vec![Some(i0.clone()), None, Some(i2.clone())])]).unwrap();
    assert_eq!(out.sizes(), &[2, 3]);
    // x[1, :, 3] = [15, 19, 23]; x[0, :, 0] = [0, 4, 8]
    assert_eq!(host_i64(&rt, &out), vec![15, 19, 23, 0, 4, 8]);
    // Adjacent indices stay in place: x[:, i, j] -> [2, 2].
    let i1 = i64s(&rt, &[2, 0], &[2]);
    let out = rt.call1("aten::index.Tensor", &[(&x).into(), Value::OptTensorList(vec![None, Some(i1), Some(i2)])]).unwrap();
    assert_eq!(out.sizes(), &[2, 2]);
    // x[0, 2, 3] = 11, x[0, 0, 0] = 0, x[1, 2, 3] = 23, x[1, 0, 0] = 12
    assert_eq!(host_i64(&rt, &out), vec![11, 0, 23, 12]);
}

#[test]
fn bool_mask_index_selects_the_true_elements() {
    // The runtime's dispatch expands masks (as PyTorch indexes), for every frontend.
    let rt = rt();
    let x = i64s(&rt, &[1, 2, 3], &[3]);
    let mask = rt.tensor_from_host(&[1, 0, 1], DType::Bool, &[3], 0).unwrap();
    let out = rt.call1("aten::index.Tensor", &[(&x).into(), Value::OptTensorList(vec![Some(mask)])]).unwrap();
    assert_eq!(host_i64(&rt, &out), vec![1, 3]);
    // A mask must have the shape of the dimensions it indexes.
    let short = rt.tensor_from_host(&[1, 0], DType::Bool, &[2], 0).unwrap();
    let e = rt.call("aten::index.Tensor", &[(&x).into(), Value::OptTensorList(vec![Some(short)])]).unwrap_err();
    assert_eq!(e.code(), Code::OutOfRange);
    assert!(e.to_string().contains("the shape of the mask [2] at index 0 does not match the shape of the indexed tensor [3]"), "{e}");
}
