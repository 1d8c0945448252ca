//! A fused RMSNorm: `y = x * rsqrt(mean(x², last dim) + eps) * weight`, as
//! `torch.nn.functional.rms_norm(x, (D,), weight, eps)` computes it: in
//! float32 for half types (float64 stays float64), rounded back to the input
//! dtype before the weight multiply, like PyTorch's composite.

use torchtpu_plugin_sdk::hlo::{Fragment, Ty};
use torchtpu_plugin_sdk::{plugin, LowerRequest, Lowering};

fn lower(req: &LowerRequest) -> Result<Lowering, String> {
    let [x, w] = req.inputs.as_slice() else {
        return Err(format!("expected 2 tensors (x, weight), got {}", req.inputs.len()));
    };
    let eps = req.attrs.get("eps").and_then(|v| v.as_f64()).ok_or("eps must be a number")?;
    let (xt, wt) = (Ty::of(x)?, Ty::of(w)?);
    if !xt.is_float() || xt.elem != wt.elem {
        return Err(format!("x and weight must share a float dtype, got {} and {}", x.dtype, w.dtype));
    }
    let d = *x.shape.last().ok_or("x must have at least one dimension")?;
    if w.shape != [d] {
        return Err(format!("weight has shape {:?}, but x {:?} needs [{d}] (its last dimension)", w.shape, x.shape));
    }
    let rank = x.shape.len() as i64;
    let compute = if xt.elem == "f64" { "f64" } else { "f32" };

    let (mut f, v) = Fragment::new("rms_norm", &req.inputs)?;
    let xc = f.convert(&v[0], compute);
    let sq = f.mul(&xc, &xc);
    let sum = f.reduce_sum(&sq, &[rank - 1]);
    let inv_d = f.splat(1.0 / d as f64, &sum.ty);
    let mean = f.mul(&sum, &inv_d);
    let eps = f.splat(eps, &mean.ty);
    let shifted = f.add(&mean, &eps);
    let r = f.unary("stablehlo.rsqrt", &shifted);
    let keep: Vec<i64> = (0..rank - 1).collect();
    let rb = f.broadcast_in_dim(&r, &keep, &x.shape);
    let normed = f.mul(&xc, &rb);
    let normed = f.convert(&normed, xt.elem);
    let wb = f.broadcast_in_dim(&v[1], &[rank - 1], &x.shape);
    let y = f.mul(&normed, &wb);
    Ok(f.finish(&[y]))
}

plugin! {
    name: "rms_norm",
    version: "0.1.0",
    ops: [{ schema: "rms_norm::rms_norm(Tensor x, Tensor weight, float eps=1e-06) -> Tensor", lower: lower }],
    policies: [],
}

#[cfg(test)]
mod tests {
    use super::*;
    use torchtpu_plugin_sdk::TensorType;

    fn req(x: &[i64], w: &[i64], dtype: &str) -> LowerRequest {
        let t = |s: &[i64]| TensorType { shape: s.to_vec(), dtype: dtype.into() };
        LowerRequest {
            op: "rms_norm::rms_norm".into(),
            inputs: vec![t(x), t(w)],
            attrs: [("eps".to_string(), serde_json::json!(1e-6))].into_iter().collect(),
        }
    }

    #[test]
    fn output_type_follows_x() {
        let l = lower(&req(&[2, 3, 8], &[8], "bfloat16")).unwrap();
        assert_eq!(l.outputs, vec![TensorType { shape: vec![2, 3, 8], dtype: "bfloat16".into() }]);
        assert!(l.stablehlo.contains("stablehlo.rsqrt"));
    }

    #[test]
    fn rejects_mismatched_weight_and_ints() {
        assert!(lower(&req(&[2, 8], &[4], "float32")).unwrap_err().contains("[8]"));
        assert!(lower(&req(&[2, 8], &[8], "int32")).unwrap_err().contains("float"));
    }
}
