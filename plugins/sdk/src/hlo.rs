//! A small StableHLO text builder for fragments.
//!
//! Ops are printed in MLIR's generic form (`%3 = "stablehlo.multiply"(%1,
//! %2) : (T, T) -> T`), which every StableHLO release parses the same way,
//! and float constants as hex bit patterns, so values round-trip exactly.
//! [`Fragment::finish`] yields the [`Lowering`] the host expects: one
//! `func.func` over the request's inputs.

use std::fmt::{self, Write};

use torchtpu_plugin_abi::{Lowering, TensorType};

/// A ranked tensor type: sizes and an MLIR element type (`f32`, `bf16`, ...).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ty {
    pub shape: Vec<i64>,
    pub elem: &'static str,
}

/// The MLIR element type of a PyTorch dtype name.
pub fn elem(dtype: &str) -> Result<&'static str, String> {
    Ok(match dtype {
        "float32" => "f32",
        "float64" => "f64",
        "float16" => "f16",
        "bfloat16" => "bf16",
        "int8" => "i8",
        "int16" => "i16",
        "int32" => "i32",
        "int64" => "i64",
        "uint8" => "ui8",
        "bool" => "i1",
        other => return Err(format!("unknown dtype {other:?}")),
    })
}

/// The PyTorch dtype name of an MLIR element type.
pub fn dtype(elem: &str) -> &'static str {
    match elem {
        "f32" => "float32",
        "f64" => "float64",
        "f16" => "float16",
        "bf16" => "bfloat16",
        "i8" => "int8",
        "i16" => "int16",
        "i32" => "int32",
        "i64" => "int64",
        "ui8" => "uint8",
        _ => "bool",
    }
}

impl Ty {
    pub fn of(t: &TensorType) -> Result<Ty, String> {
        Ok(Ty { shape: t.shape.clone(), elem: elem(&t.dtype)? })
    }
    pub fn new(shape: &[i64], elem: &'static str) -> Ty {
        Ty { shape: shape.to_vec(), elem }
    }
    pub fn with_elem(&self, elem: &'static str) -> Ty {
        Ty { shape: self.shape.clone(), elem }
    }
    pub fn with_shape(&self, shape: &[i64]) -> Ty {
        Ty { shape: shape.to_vec(), elem: self.elem }
    }
    pub fn rank(&self) -> usize {
        self.shape.len()
    }
    pub fn is_float(&self) -> bool {
        matches!(self.elem, "f16" | "bf16" | "f32" | "f64")
    }
    /// The wire type.
    pub fn tensor_type(&self) -> TensorType {
        TensorType { shape: self.shape.clone(), dtype: dtype(self.elem).into() }
    }
}

impl fmt::Display for Ty {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("tensor<")?;
        for d in &self.shape {
            write!(f, "{d}x")?;
        }
        write!(f, "{}>", self.elem)
    }
}

/// An SSA value of a fragment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Val {
    name: String,
    pub ty: Ty,
}

/// Builds one `func.func`.
pub struct Fragment {
    name: String,
    params: Vec<Val>,
    body: String,
    next: usize,
}

fn list<T>(xs: &[T], f: impl Fn(&T) -> String) -> String {
    xs.iter().map(f).collect::<Vec<_>>().join(", ")
}

/// `array<i64: 0, 1>`.
pub fn i64_array(xs: &[i64]) -> String {
    if xs.is_empty() {
        "array<i64>".into()
    } else {
        format!("array<i64: {}>", list(xs, |x| x.to_string()))
    }
}

/// An exact literal of `v` in a float element type (hex bits).
pub fn float_literal(elem: &str, v: f64) -> String {
    match elem {
        "f64" => format!("0x{:016X}", v.to_bits()),
        "f32" => format!("0x{:08X}", (v as f32).to_bits()),
        "bf16" => format!("0x{:04X}", (v as f32).to_bits() >> 16),
        // f16 has no cheap exact conversion here: a decimal literal.
        _ => format!("{v:e}"),
    }
}

impl Fragment {
    /// A function `@name` whose parameters are `inputs`; returns the
    /// builder and one value per input.
    pub fn new(name: &str, inputs: &[TensorType]) -> Result<(Fragment, Vec<Val>), String> {
        let mut f = Fragment { name: name.into(), params: Vec::new(), body: String::new(), next: 0 };
        for t in inputs {
            let v = f.fresh(Ty::of(t)?);
            f.params.push(v);
        }
        let ps = f.params.clone();
        Ok((f, ps))
    }

    fn fresh(&mut self, ty: Ty) -> Val {
        self.next += 1;
        Val { name: format!("%v{}", self.next - 1), ty }
    }

    /// Emits `"name"(operands) {attrs}` with one result of type `result`.
    pub fn op(&mut self, name: &str, operands: &[&Val], attrs: &str, result: Ty) -> Val {
        self.op_regions(name, operands, &[], attrs, result)
    }

    /// As [`Fragment::op`], with regions (printed verbatim).
    pub fn op_regions(&mut self, name: &str, operands: &[&Val], regions: &[String], attrs: &str, result: Ty) -> Val {
        let v = self.fresh(result);
        let _ = write!(self.body, "  {} = \"{name}\"({})", v.name, list(operands, |o| o.name.clone()));
        if !regions.is_empty() {
            let _ = write!(self.body, " ({})", regions.join(", "));
        }
        if !attrs.is_empty() {
            let _ = write!(self.body, " {{{attrs}}}");
        }
        let _ = writeln!(self.body, " : ({}) -> {}", list(operands, |o| o.ty.to_string()), v.ty);
        v
    }

    /// An elementwise op of two values of the same type.
    pub fn binary(&mut self, name: &str, a: &Val, b: &Val) -> Val {
        let ty = a.ty.clone();
        self.op(name, &[a, b], "", ty)
    }

    pub fn unary(&mut self, name: &str, a: &Val) -> Val {
        let ty = a.ty.clone();
        self.op(name, &[a], "", ty)
    }

    pub fn add(&mut self, a: &Val, b: &Val) -> Val {
        self.binary("stablehlo.add", a, b)
    }
    pub fn sub(&mut self, a: &Val, b: &Val) -> Val {
        self.binary("stablehlo.subtract", a, b)
    }
    pub fn mul(&mut self, a: &Val, b: &Val) -> Val {
        self.binary("stablehlo.multiply", a, b)
    }

    /// `a` converted to `elem` (itself if it already is).
    pub fn convert(&mut self, a: &Val, elem: &'static str) -> Val {
        if a.ty.elem == elem {
            return a.clone();
        }
        let ty = a.ty.with_elem(elem);
        self.op("stablehlo.convert", &[a], "", ty)
    }

    /// A constant of type `ty` with every element `v` (floats only).
    pub fn splat(&mut self, v: f64, ty: &Ty) -> Val {
        let scalar = Ty::new(&[], ty.elem);
        let attr = format!("value = dense<{}> : {scalar}", float_literal(ty.elem, v));
        let c = self.op("stablehlo.constant", &[], &attr, scalar);
        if ty.rank() == 0 {
            c
        } else {
            self.broadcast_in_dim(&c, &[], &ty.shape)
        }
    }

    /// `broadcast_in_dim`: dimension `i` of `a` becomes dimension `dims[i]`.
    pub fn broadcast_in_dim(&mut self, a: &Val, dims: &[i64], shape: &[i64]) -> Val {
        let ty = a.ty.with_shape(shape);
        self.op("stablehlo.broadcast_in_dim", &[a], &format!("broadcast_dimensions = {}", i64_array(dims)), ty)
    }

    /// The sum of `a` over `dims`.
    pub fn reduce_sum(&mut self, a: &Val, dims: &[i64]) -> Val {
        let init = self.splat(0.0, &Ty::new(&[], a.ty.elem));
        let s = Ty::new(&[], a.ty.elem);
        // Region names are unique per fragment, so reductions can nest.
        let n = self.next;
        let region = format!(
            "{{\n  ^bb0(%r{n}a: {s}, %r{n}b: {s}):\n    %r{n}s = \"stablehlo.add\"(%r{n}a, %r{n}b) : ({s}, {s}) -> {s}\n    \"stablehlo.return\"(%r{n}s) : ({s}) -> ()\n  }}"
        );
        let shape: Vec<i64> = a.ty.shape.iter().enumerate().filter(|(i, _)| !dims.contains(&(*i as i64))).map(|(_, d)| *d).collect();
        let ty = a.ty.with_shape(&shape);
        self.op_regions("stablehlo.reduce", &[a, &init], &[region], &format!("dimensions = {}", i64_array(dims)), ty)
    }

    /// The function returning `results`, as the host expects it.
    pub fn finish(self, results: &[Val]) -> Lowering {
        let mut s = String::with_capacity(self.body.len() + 256);
        let _ = write!(
            s,
            "func.func @{}({}) -> ({}) {{\n",
            self.name,
            list(&self.params, |p| format!("{}: {}", p.name, p.ty)),
            list(results, |r| r.ty.to_string())
        );
        s.push_str(&self.body);
        let _ = writeln!(
            s,
            "  \"func.return\"({}) : ({}) -> ()\n}}",
            list(results, |r| r.name.clone()),
            list(results, |r| r.ty.to_string())
        );
        Lowering { outputs: results.iter().map(|r| r.ty.tensor_type()).collect(), stablehlo: s }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(shape: &[i64], dtype: &str) -> TensorType {
        TensorType { shape: shape.to_vec(), dtype: dtype.into() }
    }

    #[test]
    fn types_print_as_mlir() {
        assert_eq!(Ty::of(&t(&[4, 8], "float32")).unwrap().to_string(), "tensor<4x8xf32>");
        assert_eq!(Ty::of(&t(&[], "bfloat16")).unwrap().to_string(), "tensor<bf16>");
        assert_eq!(Ty::of(&t(&[2], "uint8")).unwrap().to_string(), "tensor<2xui8>");
        assert!(Ty::of(&t(&[2], "complex64")).is_err());
        assert_eq!(float_literal("f32", 1.0), "0x3F800000");
        assert_eq!(float_literal("bf16", 1.0), "0x3F80");
    }

    #[test]
    fn builds_a_function() {
        let (mut f, x) = Fragment::new("demo", &[t(&[2, 3], "float32")]).unwrap();
        let s = f.reduce_sum(&x[0], &[1]);
        let two = f.splat(2.0, &s.ty);
        let y = f.mul(&s, &two);
        let l = f.finish(&[y]);
        assert_eq!(l.outputs, vec![t(&[2], "float32")]);
        let text = l.stablehlo;
        assert!(text.starts_with("func.func @demo(%v0: tensor<2x3xf32>) -> (tensor<2xf32>) {\n"), "{text}");
        assert!(text.contains("\"stablehlo.reduce\"(%v0, %v1)"), "{text}");
        assert!(text.contains("{dimensions = array<i64: 1>} : (tensor<2x3xf32>, tensor<f32>) -> tensor<2xf32>"), "{text}");
        assert!(text.trim_end().ends_with("\"func.return\"(%v5) : (tensor<2xf32>) -> ()\n}"), "{text}");
    }
}
