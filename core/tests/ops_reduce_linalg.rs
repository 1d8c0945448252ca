//! Reductions and matrix products end to end on the default plugin, checked
//! against hand-computed values (the Python suite compares with PyTorch).

mod common;
use common::*;


use torchtpu_core::{Code, DType, Value};

#[test]
fn sum_keepdim_and_argmax_ties() {
    let rt = rt();
    // [[1, 5, 5], [7, 0, 7]]
    let x = f32s(&rt, &[1.0, 5.0, 5.0, 7.0, 0.0, 7.0], &[2, 3]);
    let s = rt
        .call1("aten::sum.dim_IntList", &[(&x).into(), vec![-1i64].into(), true.into()])
        .unwrap();
    assert_eq!(s.sizes(), &[2, 1]);
    assert_eq!(host_f32(&rt, &s), vec![11.0, 14.0]);
    let i = rt.call1("aten::argmax", &[(&x).into(), Value::Int(1)]).unwrap();
    assert_eq!(i.dtype(), DType::I64);
    assert_eq!(host_i64(&rt, &i), vec![1, 0], "ties pick the first index");
    let out = rt.call("aten::min.dim", &[(&x).into(), Value::Int(0)]).unwrap();
    let (v, i) = (out[0].as_tensor().unwrap(), out[1].as_tensor().unwrap());
    assert_eq!(host_f32(&rt, v), vec![1.0, 0.0, 5.0]);
    assert_eq!(host_i64(&rt, i), vec![0, 1, 0]);
}

#[test]
fn matmul_broadcasts_batches_and_errors_name_shapes() {
    let rt = rt();
    // [2, 1, 2] @ [2, 1] -> [2, 1, 1]
    let a = f32s(&rt, &[1.0, 2.0, 3.0, 4.0], &[2, 1, 2]);
    let b = f32s(&rt, &[10.0, 100.0], &[2, 1]);
    let y = rt.call1("aten::matmul", &[(&a).into(), (&b).into()]).unwrap();
    assert_eq!(y.sizes(), &[2, 1, 1]);
    assert_eq!(host_f32(&rt, &y), vec![210.0, 430.0]);
    let c = f32s(&rt, &[0.0; 6], &[3, 2]);
    let e = rt.call1("aten::mm", &[(&b).into(), (&c).into()]).unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.to_string().contains("aten::mm: mat1 and mat2 shapes cannot be multiplied (2x1 and 3x2)"), "{e}");
}
