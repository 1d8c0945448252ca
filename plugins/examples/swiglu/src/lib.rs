//! SwiGLU's gate, `swiglu(a, b) = silu(a) * b = a * sigmoid(a) * b`, with its
//! backward op, which the PyTorch frontend registers as the op's autograd:
//! with `s = sigmoid(a)`, `grad_a = grad * b * s * (1 + a * (1 - s))` and
//! `grad_b = grad * a * s`. Half types compute in float32.

use torchtpu_plugin_sdk::hlo::{Fragment, Ty};
use torchtpu_plugin_sdk::{plugin, LowerRequest, Lowering, TensorType};

/// Checks that every input has the same shape and float dtype; returns the
/// element type to compute in.
fn check(inputs: &[TensorType], names: &[&str]) -> Result<&'static str, String> {
    if inputs.len() != names.len() {
        return Err(format!("expected {} tensors ({}), got {}", names.len(), names.join(", "), inputs.len()));
    }
    let t0 = Ty::of(&inputs[0])?;
    for (t, n) in inputs.iter().zip(names) {
        if t.shape != inputs[0].shape || t.dtype != inputs[0].dtype {
            return Err(format!(
                "{} is {:?} {}, but {} is {:?} {}: swiglu takes tensors of one shape and dtype",
                n, t.shape, t.dtype, names[0], inputs[0].shape, inputs[0].dtype
            ));
        }
    }
    if !t0.is_float() {
        return Err(format!("swiglu needs a float dtype, got {}", inputs[0].dtype));
    }
    Ok(if t0.elem == "f64" { "f64" } else { "f32" })
}

fn forward(req: &LowerRequest) -> Result<Lowering, String> {
    let compute = check(&req.inputs, &["a", "b"])?;
    let (mut f, v) = Fragment::new("swiglu", &req.inputs)?;
    let elem = v[0].ty.elem;
    let a = f.convert(&v[0], compute);
    let b = f.convert(&v[1], compute);
    let s = f.unary("stablehlo.logistic", &a);
    let silu = f.mul(&a, &s);
    let y = f.mul(&silu, &b);
    let y = f.convert(&y, elem);
    Ok(f.finish(&[y]))
}

fn backward(req: &LowerRequest) -> Result<Lowering, String> {
    let compute = check(&req.inputs, &["grad", "a", "b"])?;
    let (mut f, v) = Fragment::new("swiglu_backward", &req.inputs)?;
    let elem = v[0].ty.elem;
    let g = f.convert(&v[0], compute);
    let a = f.convert(&v[1], compute);
    let b = f.convert(&v[2], compute);
    let s = f.unary("stablehlo.logistic", &a);
    let one = f.splat(1.0, &s.ty);
    let one_minus_s = f.sub(&one, &s);
    let a_term = f.mul(&a, &one_minus_s);
    let dsilu = f.add(&one, &a_term);
    let dsilu = f.mul(&s, &dsilu);
    let gb = f.mul(&g, &b);
    let ga = f.mul(&gb, &dsilu);
    let silu = f.mul(&a, &s);
    let gbb = f.mul(&g, &silu);
    let ga = f.convert(&ga, elem);
    let gbb = f.convert(&gbb, elem);
    Ok(f.finish(&[ga, gbb]))
}

plugin! {
    name: "swiglu",
    version: "0.1.0",
    ops: [
        { schema: "swiglu::swiglu(Tensor a, Tensor b) -> Tensor", backward: "swiglu::swiglu_backward", lower: forward },
        { schema: "swiglu::swiglu_backward(Tensor grad, Tensor a, Tensor b) -> (Tensor, Tensor)", lower: backward },
    ],
    policies: [],
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(op: &str, shapes: &[&[i64]]) -> LowerRequest {
        LowerRequest {
            op: op.into(),
            inputs: shapes.iter().map(|s| TensorType { shape: s.to_vec(), dtype: "float32".into() }).collect(),
            attrs: Default::default(),
        }
    }

    #[test]
    fn backward_returns_two_gradients() {
        let l = backward(&req("swiglu::swiglu_backward", &[&[3, 4], &[3, 4], &[3, 4]])).unwrap();
        assert_eq!(l.outputs.len(), 2);
    }

    #[test]
    fn shapes_must_agree() {
        let e = forward(&req("swiglu::swiglu", &[&[3, 4], &[4]])).unwrap_err();
        assert!(e.contains("[4]") && e.contains("[3, 4]"), "{e}");
    }
}
