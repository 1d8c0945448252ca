//! The function builder. Every op is printed in MLIR's generic form
//! (`%v = "stablehlo.x"(operands) ({regions}) {attrs} : (types) -> types`),
//! which parses the same way in every StableHLO release.

use std::fmt::Write;

use super::{i64_array, list, Elem, Ty};

/// An SSA value of a [`Func`]. Cheap to copy; only meaningful in the function
/// (or region) that made it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct V(u32);

/// Comparison directions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cmp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl Cmp {
    fn name(self) -> &'static str {
        match self {
            Cmp::Eq => "EQ",
            Cmp::Ne => "NE",
            Cmp::Lt => "LT",
            Cmp::Le => "LE",
            Cmp::Gt => "GT",
            Cmp::Ge => "GE",
        }
    }
}

/// Single-op reduction bodies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reducer {
    Add,
    Mul,
    Max,
    Min,
    And,
    Or,
}

impl Reducer {
    /// Combines two values (max/min propagate NaN, see [`Func::max`]).
    pub fn apply(self, f: &mut Func, a: V, b: V) -> V {
        match self {
            Reducer::Max => f.max(a, b),
            Reducer::Min => f.min(a, b),
            r => f.binary(r.op(), a, b),
        }
    }

    pub fn op(self) -> &'static str {
        match self {
            Reducer::Add => "stablehlo.add",
            Reducer::Mul => "stablehlo.multiply",
            Reducer::Max => "stablehlo.maximum",
            Reducer::Min => "stablehlo.minimum",
            Reducer::And => "stablehlo.and",
            Reducer::Or => "stablehlo.or",
        }
    }
}

/// Builds one `func.func`. Needs exclusive access.
pub struct Func {
    types: Vec<Ty>,
    names: Vec<String>,
    params: Vec<V>,
    body: String,
    indent: usize,
    /// Private functions the body calls (plugin fragments): symbol, text.
    private: Vec<(String, std::sync::Arc<str>)>,
}

impl Default for Func {
    fn default() -> Self {
        Func::new()
    }
}

impl Func {
    pub fn new() -> Func {
        Func { types: Vec::new(), names: Vec::new(), params: Vec::new(), body: String::new(), indent: 4, private: Vec::new() }
    }

    fn fresh(&mut self, ty: Ty, name: String) -> V {
        let v = V(self.types.len() as u32);
        self.types.push(ty);
        self.names.push(name);
        v
    }

    /// A new function parameter (appended to the signature).
    pub fn param(&mut self, ty: Ty) -> V {
        let name = format!("%v{}", self.types.len());
        let v = self.fresh(ty, name);
        self.params.push(v);
        v
    }

    pub fn num_params(&self) -> usize {
        self.params.len()
    }

    pub fn ty(&self, v: V) -> &Ty {
        &self.types[v.0 as usize]
    }

    pub fn name(&self, v: V) -> &str {
        &self.names[v.0 as usize]
    }

    /// Emits a generic op and returns its results.
    pub fn op(&mut self, name: &str, operands: &[V], regions: &[String], attrs: &str, results: &[Ty]) -> Vec<V> {
        let id = self.types.len();
        let mut line = String::with_capacity(96);
        for _ in 0..self.indent {
            line.push(' ');
        }
        match results.len() {
            0 => {}
            1 => {
                let _ = write!(line, "%v{id} = ");
            }
            n => {
                let _ = write!(line, "%v{id}:{n} = ");
            }
        }
        let _ = write!(line, "\"{name}\"(");
        for (i, v) in operands.iter().enumerate() {
            if i > 0 {
                line.push_str(", ");
            }
            line.push_str(self.name(*v));
        }
        line.push(')');
        if !regions.is_empty() {
            line.push_str(" (");
            line.push_str(&regions.join(", "));
            line.push(')');
        }
        if !attrs.is_empty() {
            let _ = write!(line, " {{{attrs}}}");
        }
        line.push_str(" : (");
        for (i, v) in operands.iter().enumerate() {
            if i > 0 {
                line.push_str(", ");
            }
            let _ = write!(line, "{}", self.ty(*v));
        }
        line.push_str(") -> ");
        if results.len() == 1 {
            let _ = write!(line, "{}", results[0]);
        } else {
            let _ = write!(line, "({})", results.iter().map(|t| t.to_string()).collect::<Vec<_>>().join(", "));
        }
        line.push('\n');
        self.body.push_str(&line);
        match results.len() {
            0 => Vec::new(),
            1 => vec![self.fresh(results[0].clone(), format!("%v{id}"))],
            _ => {
                // Reserve the base id so later values never reuse it.
                let base = format!("%v{id}");
                let _ = self.fresh(Ty::scalar(Elem::Pred), format!("{base}#reserved"));
                results.iter().enumerate().map(|(i, t)| self.fresh(t.clone(), format!("{base}#{i}"))).collect()
            }
        }
    }

    /// Calls the private function `symbol`, defined by `text` (a complete
    /// `func.func private @symbol`). The definition is added to the module
    /// once, however often it is called.
    pub fn call_private(&mut self, symbol: &str, text: &std::sync::Arc<str>, operands: &[V], results: &[Ty]) -> Vec<V> {
        if !self.private.iter().any(|(s, _)| s == symbol) {
            self.private.push((symbol.to_string(), text.clone()));
        }
        self.op("func.call", operands, &[], &format!("callee = @{symbol}"), results)
    }

    fn op1(&mut self, name: &str, operands: &[V], attrs: &str, result: Ty) -> V {
        self.op(name, operands, &[], attrs, &[result])[0]
    }

    /// A region with block arguments of the given types; `build` returns the
    /// values the region yields.
    pub fn region(&mut self, args: &[Ty], build: impl FnOnce(&mut Func, &[V]) -> Vec<V>) -> String {
        let mut sub = Func {
            types: std::mem::take(&mut self.types),
            names: std::mem::take(&mut self.names),
            params: Vec::new(),
            body: String::new(),
            indent: self.indent + 4,
            private: std::mem::take(&mut self.private),
        };
        let vs: Vec<V> = args.iter().map(|t| sub.param(t.clone())).collect();
        let results = build(&mut sub, &vs);
        let pad = " ".repeat(self.indent + 2);
        let mut text = String::from("{\n");
        let _ = writeln!(
            text,
            "{pad}^bb0({}):",
            vs.iter().map(|v| format!("{}: {}", sub.name(*v), sub.ty(*v))).collect::<Vec<_>>().join(", ")
        );
        text.push_str(&sub.body);
        let _ = writeln!(
            text,
            "{pad}  \"stablehlo.return\"({}) : ({}) -> ()",
            results.iter().map(|v| sub.name(*v).to_string()).collect::<Vec<_>>().join(", "),
            results.iter().map(|v| sub.ty(*v).to_string()).collect::<Vec<_>>().join(", ")
        );
        let _ = write!(text, "{}}}", " ".repeat(self.indent));
        self.types = sub.types;
        self.names = sub.names;
        self.private = sub.private;
        text
    }

    /// Prints the module with this function as `@main` returning `results`.
    pub fn finish(&self, results: &[V]) -> String {
        self.finish_with(results, 1)
    }

    /// As [`Func::finish`], for a program compiled with `num_replicas` replicas.
    pub fn finish_with(&self, results: &[V], num_replicas: usize) -> String {
        self.finish_full(results, num_replicas, &[])
    }

    /// As [`Func::finish`], donating parameters: `(param, k)` lets result `k`
    /// reuse the parameter's buffer (`tf.aliasing_output`), which PJRT then
    /// invalidates. Only for parameters nothing else will read again.
    pub fn finish_donating(&self, results: &[V], donations: &[(V, usize)]) -> String {
        self.finish_full(results, 1, donations)
    }

    fn finish_full(&self, results: &[V], num_replicas: usize, donations: &[(V, usize)]) -> String {
        let mut s = String::with_capacity(self.body.len() + 256);
        let _ = writeln!(
            s,
            "module @torchtpu attributes {{mhlo.num_partitions = 1 : i32, mhlo.num_replicas = {num_replicas} : i32}} {{"
        );
        let _ = write!(s, "  func.func public @main(");
        for (i, p) in self.params.iter().enumerate() {
            if i > 0 {
                s.push_str(", ");
            }
            let _ = write!(s, "{}: {}", self.name(*p), self.ty(*p));
            if let Some((_, k)) = donations.iter().find(|(v, _)| v == p) {
                let _ = write!(s, " {{tf.aliasing_output = {k} : i32}}");
            }
        }
        let _ = writeln!(s, ") -> ({}) {{", results.iter().map(|v| self.ty(*v).to_string()).collect::<Vec<_>>().join(", "));
        s.push_str(&self.body);
        let _ = writeln!(
            s,
            "    \"func.return\"({}) : ({}) -> ()",
            results.iter().map(|v| self.name(*v).to_string()).collect::<Vec<_>>().join(", "),
            results.iter().map(|v| self.ty(*v).to_string()).collect::<Vec<_>>().join(", ")
        );
        s.push_str("  }\n");
        for (_, text) in &self.private {
            // Verbatim: re-indenting could change a multi-line literal.
            s.push_str(text);
            s.push('\n');
        }
        s.push_str("}\n");
        s
    }

    // ----------------------------------------------------------------- constants

    /// A constant tensor of type `ty` filled with `v`.
    pub fn splat(&mut self, ty: &Ty, v: f64) -> V {
        let attrs = format!("value = dense<{}> : {}", ty.elem.literal(v), ty);
        self.op1("stablehlo.constant", &[], &attrs, ty.clone())
    }

    /// As [`Func::splat`] for integers (exact for all of i64).
    pub fn splat_int(&mut self, ty: &Ty, v: i64) -> V {
        let attrs = format!("value = dense<{}> : {}", ty.elem.int_literal(v), ty);
        self.op1("stablehlo.constant", &[], &attrs, ty.clone())
    }

    /// A rank-0 constant.
    pub fn constant(&mut self, elem: Elem, v: f64) -> V {
        self.splat(&Ty::scalar(elem), v)
    }

    /// A constant with the same type as `like`.
    pub fn full_like(&mut self, like: V, v: f64) -> V {
        let ty = self.ty(like).clone();
        self.splat(&ty, v)
    }

    /// A rank-1 i64 constant with the given values.
    pub fn const_i64s(&mut self, vals: &[i64]) -> V {
        let ty = Ty::new(Elem::I64, &[vals.len() as i64]);
        let attrs = format!("value = dense<{}> : {}", list(vals), ty);
        self.op1("stablehlo.constant", &[], &attrs, ty)
    }

    /// A rank-1 constant of `elem` holding `vals`.
    pub fn const_floats(&mut self, elem: Elem, vals: &[f64]) -> V {
        let ty = Ty::new(elem, &[vals.len() as i64]);
        let lits: Vec<String> = vals.iter().map(|&v| elem.literal(v)).collect();
        let attrs = format!("value = dense<[{}]> : {}", lits.join(", "), ty);
        self.op1("stablehlo.constant", &[], &attrs, ty)
    }

    pub fn iota(&mut self, ty: &Ty, dim: usize) -> V {
        self.op1("stablehlo.iota", &[], &format!("iota_dimension = {dim} : i64"), ty.clone())
    }

    // --------------------------------------------------------------- elementwise

    /// A same-type elementwise op (`stablehlo.exponential`, `chlo.erf`, ...).
    pub fn unary(&mut self, name: &str, x: V) -> V {
        let ty = self.ty(x).clone();
        self.op1(name, &[x], "", ty)
    }

    /// A same-type binary op. Operands must already have equal types.
    pub fn binary(&mut self, name: &str, a: V, b: V) -> V {
        debug_assert_eq!(self.ty(a), self.ty(b), "{name} operand types differ");
        let ty = self.ty(a).clone();
        self.op1(name, &[a, b], "", ty)
    }

    pub fn add(&mut self, a: V, b: V) -> V {
        self.binary("stablehlo.add", a, b)
    }
    pub fn sub(&mut self, a: V, b: V) -> V {
        self.binary("stablehlo.subtract", a, b)
    }
    pub fn mul(&mut self, a: V, b: V) -> V {
        self.binary("stablehlo.multiply", a, b)
    }
    pub fn div(&mut self, a: V, b: V) -> V {
        self.binary("stablehlo.divide", a, b)
    }
    /// Elementwise maximum; NaN-propagating for floats, as in PyTorch (XLA's
    /// CPU `maximum` returns the non-NaN operand when only `b` is NaN).
    pub fn max(&mut self, a: V, b: V) -> V {
        self.nan_propagating("stablehlo.maximum", a, b)
    }
    /// Elementwise minimum; NaN-propagating for floats.
    pub fn min(&mut self, a: V, b: V) -> V {
        self.nan_propagating("stablehlo.minimum", a, b)
    }
    fn nan_propagating(&mut self, op: &str, a: V, b: V) -> V {
        let m = self.binary(op, a, b);
        if !self.ty(a).elem.is_float() {
            return m;
        }
        let a_nan = self.compare(Cmp::Ne, a, a);
        let m = self.select(a_nan, a, m);
        let b_nan = self.compare(Cmp::Ne, b, b);
        self.select(b_nan, b, m)
    }
    pub fn and(&mut self, a: V, b: V) -> V {
        self.binary("stablehlo.and", a, b)
    }
    pub fn or(&mut self, a: V, b: V) -> V {
        self.binary("stablehlo.or", a, b)
    }
    pub fn neg(&mut self, a: V) -> V {
        self.unary("stablehlo.negate", a)
    }
    pub fn not(&mut self, a: V) -> V {
        self.unary("stablehlo.not", a)
    }

    /// An elementwise op whose result element type differs (`is_finite`).
    pub fn unary_to(&mut self, name: &str, x: V, elem: Elem) -> V {
        let ty = self.ty(x).with_elem(elem);
        self.op1(name, &[x], "", ty)
    }

    pub fn compare(&mut self, dir: Cmp, a: V, b: V) -> V {
        debug_assert_eq!(self.ty(a), self.ty(b), "compare operand types differ");
        let ty = self.ty(a).with_elem(Elem::Pred);
        let attrs = format!("comparison_direction = #stablehlo<comparison_direction {}>", dir.name());
        self.op1("stablehlo.compare", &[a, b], &attrs, ty)
    }

    pub fn select(&mut self, pred: V, on_true: V, on_false: V) -> V {
        let ty = self.ty(on_true).clone();
        self.op1("stablehlo.select", &[pred, on_true, on_false], "", ty)
    }

    /// Converts elementwise as PyTorch casts: a complex value to a real
    /// type keeps its real part, to bool tests both parts against zero; a
    /// real value to a complex type gets a zero imaginary part.
    pub fn convert(&mut self, x: V, elem: impl Into<Elem>) -> V {
        let elem = elem.into();
        let from = self.ty(x).elem;
        if from == elem {
            return x;
        }
        match (from.is_complex(), elem.is_complex()) {
            (true, false) if elem == Elem::Pred => {
                let (re, im) = (self.real(x), self.imag(x));
                let (re, im) = (self.convert(re, Elem::Pred), self.convert(im, Elem::Pred));
                self.or(re, im)
            }
            (true, false) => {
                let re = self.real(x);
                self.convert(re, elem)
            }
            (false, true) => {
                let re = self.convert(x, elem.real());
                let im = self.full_like(re, 0.0);
                self.complex(re, im)
            }
            _ => {
                let ty = self.ty(x).with_elem(elem);
                self.op1("stablehlo.convert", &[x], "", ty)
            }
        }
    }

    /// The real part of a complex value.
    pub fn real(&mut self, x: V) -> V {
        let ty = self.ty(x).clone();
        self.op1("stablehlo.real", &[x], "", ty.with_elem(ty.elem.real()))
    }

    /// The imaginary part of a complex value.
    pub fn imag(&mut self, x: V) -> V {
        let ty = self.ty(x).clone();
        self.op1("stablehlo.imag", &[x], "", ty.with_elem(ty.elem.real()))
    }

    /// The complex value `re + i im` (parts of one type and shape).
    pub fn complex(&mut self, re: V, im: V) -> V {
        debug_assert_eq!(self.ty(re), self.ty(im), "complex part types differ");
        let ty = self.ty(re).clone();
        self.op1("stablehlo.complex", &[re, im], "", ty.with_elem(ty.elem.to_complex()))
    }

    /// `stablehlo.fft` of `kind` (`FFT`, `IFFT`, `RFFT`, `IRFFT`) over the
    /// innermost `lengths.len()` dims. `IFFT` and `IRFFT` divide by the
    /// transform size, as XLA defines them.
    pub fn fft(&mut self, x: V, kind: &str, lengths: &[i64]) -> V {
        let src = self.ty(x).clone();
        let rank = src.rank();
        let mut dims = src.dims.clone();
        let elem = match kind {
            "RFFT" => {
                let n = lengths[lengths.len() - 1];
                dims[rank - 1] = n / 2 + 1;
                src.elem.to_complex()
            }
            "IRFFT" => {
                dims[rank - 1] = lengths[lengths.len() - 1];
                src.elem.real()
            }
            _ => src.elem,
        };
        let attrs = format!("fft_type = #stablehlo<fft_type {kind}>, fft_length = {}", i64_array(lengths));
        self.op1("stablehlo.fft", &[x], &attrs, Ty { elem, dims })
    }

    /// Whether the sign bit of each f32 or f64 value is set (so `-0.0` and
    /// negative NaNs count as negative).
    pub fn signbit(&mut self, x: V) -> V {
        let int = if self.ty(x).elem == Elem::F64 { Elem::I64 } else { Elem::I32 };
        let bits = self.bitcast_convert(x, int);
        let zero = self.full_like(bits, 0.0);
        self.compare(Cmp::Lt, bits, zero)
    }

    pub fn bitcast_convert(&mut self, x: V, elem: Elem) -> V {
        let ty = self.ty(x).with_elem(elem);
        self.op1("stablehlo.bitcast_convert", &[x], "", ty)
    }

    // ------------------------------------------------------------------ shapes

    pub fn broadcast_in_dim(&mut self, x: V, dims: &[i64], shape: &[i64]) -> V {
        let ty = self.ty(x).with_dims(shape);
        if dims.iter().copied().eq(0..shape.len() as i64) && self.ty(x).dims.as_slice() == shape {
            return x;
        }
        self.op1("stablehlo.broadcast_in_dim", &[x], &format!("broadcast_dimensions = {}", i64_array(dims)), ty)
    }

    /// NumPy-style broadcast of `x` to `shape` (dims aligned on the right).
    pub fn broadcast_to(&mut self, x: V, shape: &[i64]) -> V {
        let r = self.ty(x).rank();
        if self.ty(x).dims.as_slice() == shape {
            return x;
        }
        let offset = shape.len() - r;
        let dims: Vec<i64> = (0..r).map(|i| (i + offset) as i64).collect();
        self.broadcast_in_dim(x, &dims, shape)
    }

    pub fn reshape(&mut self, x: V, shape: &[i64]) -> V {
        if self.ty(x).dims.as_slice() == shape {
            return x;
        }
        let ty = self.ty(x).with_dims(shape);
        self.op1("stablehlo.reshape", &[x], "", ty)
    }

    pub fn transpose(&mut self, x: V, perm: &[usize]) -> V {
        if perm.iter().copied().eq(0..perm.len()) {
            return x;
        }
        let src = self.ty(x).clone();
        let dims: Vec<i64> = perm.iter().map(|&p| src.dims[p]).collect();
        let perm: Vec<i64> = perm.iter().map(|&p| p as i64).collect();
        self.op1("stablehlo.transpose", &[x], &format!("permutation = {}", i64_array(&perm)), src.with_dims(&dims))
    }

    pub fn slice(&mut self, x: V, start: &[i64], limit: &[i64], strides: &[i64]) -> V {
        let src = self.ty(x).clone();
        if start.iter().all(|&s| s == 0) && limit == src.dims.as_slice() && strides.iter().all(|&s| s == 1) {
            return x;
        }
        let dims: Vec<i64> =
            (0..src.rank()).map(|i| ((limit[i] - start[i]).max(0) + strides[i] - 1) / strides[i]).collect();
        let attrs = format!(
            "start_indices = {}, limit_indices = {}, strides = {}",
            i64_array(start),
            i64_array(limit),
            i64_array(strides)
        );
        self.op1("stablehlo.slice", &[x], &attrs, src.with_dims(&dims))
    }

    /// `x[start:limit]` along one dim.
    pub fn slice_dim(&mut self, x: V, dim: usize, start: i64, limit: i64, stride: i64) -> V {
        let src = self.ty(x).clone();
        let mut s = vec![0; src.rank()];
        let mut l: Vec<i64> = src.dims.to_vec();
        let mut st = vec![1; src.rank()];
        s[dim] = start;
        l[dim] = limit;
        st[dim] = stride;
        self.slice(x, &s, &l, &st)
    }

    pub fn pad(&mut self, x: V, value: V, low: &[i64], high: &[i64], interior: &[i64]) -> V {
        let src = self.ty(x).clone();
        let dims: Vec<i64> = (0..src.rank())
            .map(|i| low[i] + high[i] + src.dims[i] + (src.dims[i] - 1).max(0) * interior[i])
            .collect();
        let attrs = format!(
            "edge_padding_low = {}, edge_padding_high = {}, interior_padding = {}",
            i64_array(low),
            i64_array(high),
            i64_array(interior)
        );
        self.op1("stablehlo.pad", &[x, value], &attrs, src.with_dims(&dims))
    }

    pub fn concatenate(&mut self, xs: &[V], dim: usize) -> V {
        if xs.len() == 1 {
            return xs[0];
        }
        let mut ty = self.ty(xs[0]).clone();
        ty.dims[dim] = xs.iter().map(|v| self.ty(*v).dims[dim]).sum();
        self.op1("stablehlo.concatenate", xs, &format!("dimension = {dim} : i64"), ty)
    }

    pub fn reverse(&mut self, x: V, dims: &[usize]) -> V {
        if dims.is_empty() {
            return x;
        }
        let ty = self.ty(x).clone();
        let d: Vec<i64> = dims.iter().map(|&d| d as i64).collect();
        self.op1("stablehlo.reverse", &[x], &format!("dimensions = {}", i64_array(&d)), ty)
    }

    /// Slice of `sizes` starting at runtime indices (rank-0 integer values).
    pub fn dynamic_slice(&mut self, x: V, starts: &[V], sizes: &[i64]) -> V {
        let ty = self.ty(x).with_dims(sizes);
        let mut ops = vec![x];
        ops.extend_from_slice(starts);
        self.op1("stablehlo.dynamic_slice", &ops, &format!("slice_sizes = {}", i64_array(sizes)), ty)
    }

    pub fn dynamic_update_slice(&mut self, x: V, update: V, starts: &[V]) -> V {
        let ty = self.ty(x).clone();
        let mut ops = vec![x, update];
        ops.extend_from_slice(starts);
        self.op1("stablehlo.dynamic_update_slice", &ops, "", ty)
    }

    // -------------------------------------------------------------- reductions

    /// Reduces `inputs` over `dims` with a custom body. The body receives the
    /// accumulators followed by the new elements, all rank-0.
    pub fn reduce_with(
        &mut self,
        inputs: &[V],
        inits: &[V],
        dims: &[usize],
        body: impl FnOnce(&mut Func, &[V]) -> Vec<V>,
    ) -> Vec<V> {
        let mut arg_tys: Vec<Ty> = inputs.iter().map(|v| Ty::scalar(self.ty(*v).elem)).collect();
        arg_tys.extend(arg_tys.clone());
        let region = self.region(&arg_tys, body);
        let results: Vec<Ty> = inputs
            .iter()
            .map(|v| {
                let t = self.ty(*v);
                let dims_out: Vec<i64> =
                    t.dims.iter().enumerate().filter(|(i, _)| !dims.contains(i)).map(|(_, d)| *d).collect();
                t.with_dims(&dims_out)
            })
            .collect();
        let mut ops = inputs.to_vec();
        ops.extend_from_slice(inits);
        let d: Vec<i64> = dims.iter().map(|&d| d as i64).collect();
        self.op("stablehlo.reduce", &ops, &[region], &format!("dimensions = {}", i64_array(&d)), &results)
    }

    /// Reduces one input over `dims` with a single-op body.
    pub fn reduce(&mut self, x: V, init: V, dims: &[usize], r: Reducer) -> V {
        self.reduce_with(&[x], &[init], dims, |f, a| vec![r.apply(f, a[0], a[1])])[0]
    }

    /// `stablehlo.reduce_window` with a custom body.
    #[allow(clippy::too_many_arguments)]
    pub fn reduce_window_with(
        &mut self,
        inputs: &[V],
        inits: &[V],
        window: &[i64],
        strides: &[i64],
        window_dilations: &[i64],
        padding: &[(i64, i64)],
        body: impl FnOnce(&mut Func, &[V]) -> Vec<V>,
    ) -> Vec<V> {
        let mut arg_tys: Vec<Ty> = inputs.iter().map(|v| Ty::scalar(self.ty(*v).elem)).collect();
        arg_tys.extend(arg_tys.clone());
        let region = self.region(&arg_tys, body);
        let src = self.ty(inputs[0]).clone();
        let out_dims: Vec<i64> = (0..src.rank())
            .map(|i| {
                let padded = src.dims[i] + padding[i].0 + padding[i].1;
                let eff = (window[i] - 1) * window_dilations[i] + 1;
                if padded < eff {
                    0
                } else {
                    (padded - eff) / strides[i] + 1
                }
            })
            .collect();
        let results: Vec<Ty> = inputs.iter().map(|v| self.ty(*v).with_dims(&out_dims)).collect();
        let pad_attr = format!(
            "dense<{}> : tensor<{}x2xi64>",
            list(padding.iter().map(|(l, h)| format!("[{l}, {h}]"))),
            padding.len()
        );
        let attrs = format!(
            "window_dimensions = {}, window_strides = {}, window_dilations = {}, padding = {}",
            i64_array(window),
            i64_array(strides),
            i64_array(window_dilations),
            pad_attr
        );
        let mut ops = inputs.to_vec();
        ops.extend_from_slice(inits);
        self.op("stablehlo.reduce_window", &ops, &[region], &attrs, &results)
    }

    // ------------------------------------------------------------- contraction

    /// `stablehlo.dot_general`; the result is `batch ++ lhs free ++ rhs free`.
    #[allow(clippy::too_many_arguments)]
    pub fn dot_general(
        &mut self,
        a: V,
        b: V,
        batch_a: &[usize],
        batch_b: &[usize],
        contract_a: &[usize],
        contract_b: &[usize],
        out: Elem,
    ) -> V {
        let ta = self.ty(a).clone();
        let tb = self.ty(b).clone();
        let mut dims: Vec<i64> = batch_a.iter().map(|&d| ta.dims[d]).collect();
        dims.extend((0..ta.rank()).filter(|d| !batch_a.contains(d) && !contract_a.contains(d)).map(|d| ta.dims[d]));
        dims.extend((0..tb.rank()).filter(|d| !batch_b.contains(d) && !contract_b.contains(d)).map(|d| tb.dims[d]));
        let mut fields = Vec::new();
        if !batch_a.is_empty() {
            fields.push(format!("lhs_batching_dimensions = {}", list(batch_a)));
            fields.push(format!("rhs_batching_dimensions = {}", list(batch_b)));
        }
        fields.push(format!("lhs_contracting_dimensions = {}", list(contract_a)));
        fields.push(format!("rhs_contracting_dimensions = {}", list(contract_b)));
        // Full precision, as PyTorch computes f32 matmuls by default.
        let attrs = format!(
            "dot_dimension_numbers = #stablehlo.dot<{}>, precision_config = [#stablehlo<precision HIGHEST>, #stablehlo<precision HIGHEST>]",
            fields.join(", ")
        );
        self.op1("stablehlo.dot_general", &[a, b], &attrs, Ty::new(out, &dims))
    }

    /// `stablehlo.convolution` over `n` spatial dims in PyTorch's NCHW/OIHW layout.
    #[allow(clippy::too_many_arguments)]
    pub fn convolution(
        &mut self,
        x: V,
        w: V,
        strides: &[i64],
        padding: &[(i64, i64)],
        lhs_dilation: &[i64],
        rhs_dilation: &[i64],
        groups: i64,
        out_dims: &[i64],
    ) -> V {
        self.convolution_grouped(x, w, strides, padding, lhs_dilation, rhs_dilation, groups, 1, out_dims)
    }

    /// [`Func::convolution`] with a `batch_group_count` too (the weight
    /// gradient of a grouped convolution).
    #[allow(clippy::too_many_arguments)]
    pub fn convolution_grouped(
        &mut self,
        x: V,
        w: V,
        strides: &[i64],
        padding: &[(i64, i64)],
        lhs_dilation: &[i64],
        rhs_dilation: &[i64],
        groups: i64,
        batch_groups: i64,
        out_dims: &[i64],
    ) -> V {
        let n = strides.len();
        let sp: Vec<String> = (0..n).map(|i| i.to_string()).collect();
        let sp = sp.join(", ");
        let dn = format!("#stablehlo.conv<[b, f, {sp}]x[o, i, {sp}]->[b, f, {sp}]>");
        let pad = format!(
            "dense<{}> : tensor<{n}x2xi64>",
            list(padding.iter().map(|(l, h)| format!("[{l}, {h}]")))
        );
        let attrs = format!(
            "batch_group_count = {batch_groups} : i64, dimension_numbers = {dn}, feature_group_count = {groups} : i64, \
             lhs_dilation = {}, padding = {pad}, rhs_dilation = {}, window_strides = {}, \
             precision_config = [#stablehlo<precision HIGHEST>, #stablehlo<precision HIGHEST>]",
            i64_array(lhs_dilation),
            i64_array(rhs_dilation),
            i64_array(strides)
        );
        let ty = self.ty(x).with_dims(out_dims);
        self.op1("stablehlo.convolution", &[x, w], &attrs, ty)
    }

    // ------------------------------------------------------------ gather/scatter

    /// `stablehlo.gather`; the caller supplies the result shape.
    #[allow(clippy::too_many_arguments)]
    pub fn gather(
        &mut self,
        operand: V,
        indices: V,
        offset_dims: &[i64],
        collapsed_slice_dims: &[i64],
        start_index_map: &[i64],
        index_vector_dim: i64,
        slice_sizes: &[i64],
        out_dims: &[i64],
    ) -> V {
        let mut fields = Vec::new();
        if !offset_dims.is_empty() {
            fields.push(format!("offset_dims = {}", list(offset_dims)));
        }
        if !collapsed_slice_dims.is_empty() {
            fields.push(format!("collapsed_slice_dims = {}", list(collapsed_slice_dims)));
        }
        fields.push(format!("start_index_map = {}", list(start_index_map)));
        fields.push(format!("index_vector_dim = {index_vector_dim}"));
        let attrs = format!(
            "dimension_numbers = #stablehlo.gather<{}>, slice_sizes = {}, indices_are_sorted = false",
            fields.join(", "),
            i64_array(slice_sizes)
        );
        let ty = self.ty(operand).with_dims(out_dims);
        self.op1("stablehlo.gather", &[operand, indices], &attrs, ty)
    }

    /// `stablehlo.scatter` of `updates` into `operand`; `combine` receives
    /// (current, update) and returns the new element. `None` replaces.
    #[allow(clippy::too_many_arguments)]
    pub fn scatter(
        &mut self,
        operand: V,
        indices: V,
        updates: V,
        update_window_dims: &[i64],
        inserted_window_dims: &[i64],
        scatter_dims_to_operand_dims: &[i64],
        index_vector_dim: i64,
        combine: Option<Reducer>,
    ) -> V {
        let elem = self.ty(operand).elem;
        let region = self.region(&[Ty::scalar(elem), Ty::scalar(elem)], |f, a| match combine {
            Some(r) => vec![r.apply(f, a[0], a[1])],
            None => vec![a[1]],
        });
        let mut fields = Vec::new();
        if !update_window_dims.is_empty() {
            fields.push(format!("update_window_dims = {}", list(update_window_dims)));
        }
        if !inserted_window_dims.is_empty() {
            fields.push(format!("inserted_window_dims = {}", list(inserted_window_dims)));
        }
        fields.push(format!("scatter_dims_to_operand_dims = {}", list(scatter_dims_to_operand_dims)));
        fields.push(format!("index_vector_dim = {index_vector_dim}"));
        let attrs = format!(
            "scatter_dimension_numbers = #stablehlo.scatter<{}>, indices_are_sorted = false, unique_indices = false",
            fields.join(", ")
        );
        let ty = self.ty(operand).clone();
        self.op("stablehlo.scatter", &[operand, indices, updates], &[region], &attrs, &[ty])[0]
    }

    // --------------------------------------------------------------------- sort

    /// `stablehlo.sort` of `inputs` (same shape) along `dim`. `less` gets
    /// `(lhs, rhs)` pairs of every input, interleaved as the comparator's
    /// block arguments are, and returns whether lhs goes first.
    pub fn sort(&mut self, inputs: &[V], dim: usize, stable: bool, less: impl FnOnce(&mut Func, &[V]) -> V) -> Vec<V> {
        let arg_tys: Vec<Ty> = inputs.iter().flat_map(|v| {
            let t = Ty::scalar(self.ty(*v).elem);
            [t.clone(), t]
        }).collect();
        let region = self.region(&arg_tys, |f, a| vec![less(f, a)]);
        let results: Vec<Ty> = inputs.iter().map(|v| self.ty(*v).clone()).collect();
        self.op("stablehlo.sort", inputs, &[region], &format!("dimension = {dim} : i64, is_stable = {stable}"), &results)
    }

    // ---------------------------------------------------------------------- rng

    /// Threefry bits from a `tensor<2xui64>` state; returns `(new_state, bits)`.
    pub fn rng_bit_generator(&mut self, state: V, ty: &Ty) -> (V, V) {
        let st = self.ty(state).clone();
        let r = self.op(
            "stablehlo.rng_bit_generator",
            &[state],
            &[],
            "rng_algorithm = #stablehlo<rng_algorithm THREE_FRY>",
            &[st, ty.clone()],
        );
        (r[0], r[1])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prints_generic_form() {
        let mut f = Func::new();
        let x = f.param(Ty::new(Elem::F32, &[2, 3]));
        let one = f.splat(&Ty::new(Elem::F32, &[2, 3]), 1.0);
        let y = f.add(x, one);
        let zero = f.constant(Elem::F32, 0.0);
        let s = f.reduce(y, zero, &[1], Reducer::Add);
        assert_eq!(f.ty(s), &Ty::new(Elem::F32, &[2]));
        let text = f.finish(&[s]);
        assert!(text.contains("func.func public @main(%v0: tensor<2x3xf32>) -> (tensor<2xf32>)"), "{text}");
        assert!(text.contains("dense<0x3F800000> : tensor<2x3xf32>"), "{text}");
        assert!(text.contains("\"stablehlo.reduce\"(%v2, %v3) ({"), "{text}");
    }

    #[test]
    fn multi_result_names() {
        let mut f = Func::new();
        let st = f.param(Ty::new(Elem::U64, &[2]));
        let (ns, bits) = f.rng_bit_generator(st, &Ty::new(Elem::U32, &[4]));
        assert_eq!(f.name(ns), "%v1#0");
        assert_eq!(f.name(bits), "%v1#1");
        let next = f.unary("stablehlo.not", bits);
        assert_eq!(f.name(next), "%v4");
    }
}
