//! aten schemas: parsing the declaration strings of `native_functions.yaml`
//! and binding a call's positional arguments to them (type checks, coercions
//! and defaults), with errors that name the op and the argument.

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::tensor::{Scalar, Value};

#[derive(Debug, Clone, PartialEq)]
pub enum ArgType {
    Tensor,
    TensorList,
    /// `Tensor?[]`
    OptTensorList,
    Int,
    /// `int[N]` (N = 0 when unsized).
    IntList(usize),
    Float,
    /// `float[]`
    FloatList,
    Bool,
    /// `bool[N]`, bound as an int list of 0/1 (e.g. `output_mask`).
    BoolList(usize),
    Str,
    Scalar,
    ScalarType,
    Layout,
    Device,
    MemoryFormat,
    Generator,
}

#[derive(Debug, Clone)]
pub struct Arg {
    pub name: String,
    pub ty: ArgType,
    pub optional: bool,
    /// `Tensor(a!)`: written in place.
    pub mutable: bool,
    /// The alias set letter of `Tensor(a)` / `Tensor(a!)`.
    pub alias: Option<String>,
    pub kwarg_only: bool,
    pub default: Option<Value>,
}

#[derive(Debug, Clone)]
pub struct Schema {
    /// `aten::add.Tensor`
    pub name: String,
    pub args: Vec<Arg>,
    /// Return types, e.g. `["Tensor", "Tensor"]` or `["Tensor[]"]`.
    pub returns: Vec<String>,
    /// For each return, the argument it aliases (`Tensor(a!)` results).
    pub return_alias: Vec<Option<usize>>,
}

fn parse_default(ty: &ArgType, text: &str) -> std::result::Result<Value, String> {
    let t = text.trim();
    if t == "None" {
        return Ok(Value::None);
    }
    let int = |s: &str| s.trim().parse::<i64>().map_err(|e| format!("bad int default {s:?}: {e}"));
    Ok(match ty {
        ArgType::Int => match t {
            "Mean" => Value::Int(1),
            "Sum" => Value::Int(2),
            "contiguous_format" => Value::Int(0),
            _ => Value::Int(int(t)?),
        },
        ArgType::IntList(n) => {
            if let Some(inner) = t.strip_prefix('[').and_then(|s| s.strip_suffix(']')) {
                let v: std::result::Result<Vec<i64>, String> =
                    inner.split(',').filter(|s| !s.trim().is_empty()).map(int).collect();
                Value::IntList(v?)
            } else {
                // `int[2] stride=1` means [1, 1].
                Value::IntList(vec![int(t)?; (*n).max(1)])
            }
        }
        ArgType::Float => Value::Double(t.parse::<f64>().map_err(|e| format!("bad float default {t:?}: {e}"))?),
        ArgType::Bool => Value::Bool(match t {
            "True" => true,
            "False" => false,
            _ => return Err(format!("bad bool default {t:?}")),
        }),
        ArgType::Str => Value::Str(t.trim_matches(|c| c == '\'' || c == '"').to_string()),
        ArgType::Scalar => {
            if let Ok(i) = t.parse::<i64>() {
                Value::Scalar(Scalar::Int(i))
            } else if t == "True" || t == "False" {
                Value::Scalar(Scalar::Bool(t == "True"))
            } else {
                Value::Scalar(Scalar::Float(t.parse::<f64>().map_err(|e| format!("bad Scalar default {t:?}: {e}"))?))
            }
        }
        ArgType::MemoryFormat | ArgType::Layout => Value::Int(0),
        other => return Err(format!("unsupported default {t:?} for {other:?}")),
    })
}

/// Splits `Tensor(a!)` into `Tensor` and the alias annotation `a!`.
fn strip_alias(t: &str) -> std::result::Result<(String, Option<String>), String> {
    match t.find('(') {
        Some(open) => {
            let close = t.find(')').ok_or("unclosed alias annotation")?;
            Ok((format!("{}{}", &t[..open], &t[close + 1..]), Some(t[open + 1..close].to_string())))
        }
        None => Ok((t.to_string(), None)),
    }
}

/// Parses a type; returns it with (optional, alias annotation).
fn parse_type(text: &str) -> std::result::Result<(ArgType, bool, Option<String>), String> {
    let (stripped, alias) = strip_alias(text.trim())?;
    let mut t = stripped.as_str();
    let mut optional = false;
    if let Some(s) = t.strip_suffix('?') {
        optional = true;
        t = s;
    }
    let ty = match t {
        "Tensor" => ArgType::Tensor,
        "Tensor[]" => ArgType::TensorList,
        "Tensor?[]" => ArgType::OptTensorList,
        "int" | "SymInt" => ArgType::Int,
        "float" => ArgType::Float,
        "float[]" => ArgType::FloatList,
        "bool" => ArgType::Bool,
        "str" => ArgType::Str,
        "Scalar" => ArgType::Scalar,
        "ScalarType" => ArgType::ScalarType,
        "Layout" => ArgType::Layout,
        "Device" => ArgType::Device,
        "MemoryFormat" => ArgType::MemoryFormat,
        "Generator" => ArgType::Generator,
        _ if t.starts_with("bool[") && t.ends_with(']') => {
            let n = &t[5..t.len() - 1];
            ArgType::BoolList(if n.is_empty() { 0 } else { n.parse().map_err(|_| format!("bad list size in {t}"))? })
        }
        _ => {
            let rest = t.strip_prefix("int[").or_else(|| t.strip_prefix("SymInt["));
            match rest.and_then(|r| r.strip_suffix(']')) {
                Some(n) => ArgType::IntList(if n.is_empty() { 0 } else { n.parse().map_err(|_| format!("bad list size in {t}"))? }),
                None => return Err(format!("unknown type {t:?}")),
            }
        }
    };
    Ok((ty, optional, alias))
}

/// Splits on commas that are not inside brackets or quotes.
fn split_top(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start, mut quote) = (0i32, 0usize, false);
    for (i, c) in s.char_indices() {
        match c {
            '\'' | '"' => quote = !quote,
            '[' | '(' if !quote => depth += 1,
            ']' | ')' if !quote => depth -= 1,
            ',' if depth == 0 && !quote => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if !s[start..].trim().is_empty() {
        out.push(&s[start..]);
    }
    out
}

impl Schema {
    /// Parses `aten::name.overload(Type arg=default, *, ...) -> Ret`.
    pub fn parse(decl: &str) -> std::result::Result<Schema, String> {
        let err = |m: String| format!("schema {decl:?}: {m}");
        let open = decl.find('(').ok_or_else(|| err("missing '('".into()))?;
        let arrow = decl.rfind("->").ok_or_else(|| err("missing '->'".into()))?;
        let close = decl[..arrow].rfind(')').ok_or_else(|| err("missing ')'".into()))?;
        let name = decl[..open].trim().to_string();
        let mut args = Vec::new();
        let mut kwarg_only = false;
        for part in split_top(&decl[open + 1..close]) {
            let part = part.trim();
            if part == "*" {
                kwarg_only = true;
                continue;
            }
            let (decl_part, default) = match part.find('=') {
                Some(eq) => (&part[..eq], Some(&part[eq + 1..])),
                None => (part, None),
            };
            let sp = decl_part.trim().rfind(' ').ok_or_else(|| err(format!("bad argument {part:?}")))?;
            let (ty_text, arg_name) = decl_part.trim().split_at(sp);
            let (ty, optional, alias) = parse_type(ty_text).map_err(err)?;
            let default = default.map(|d| parse_default(&ty, d)).transpose().map_err(err)?;
            let mutable = alias.as_deref().is_some_and(|a| a.ends_with('!'));
            args.push(Arg { name: arg_name.trim().to_string(), ty, optional, mutable, alias, kwarg_only, default });
        }
        let ret_text = decl[arrow + 2..].trim();
        let ret_inner = ret_text.strip_prefix('(').and_then(|s| s.strip_suffix(')')).unwrap_or(ret_text);
        let mut returns = Vec::new();
        let mut return_alias = Vec::new();
        for r in split_top(ret_inner) {
            let r = r.trim();
            let ty = r.split_whitespace().next().unwrap_or("");
            // `Tensor(a!)` returns the argument annotated `(a!)`.
            let (clean, alias) = strip_alias(ty).map_err(err)?;
            let alias_idx = alias.and_then(|a| args.iter().position(|arg| arg.alias.as_deref() == Some(a.as_str())));
            returns.push(clean);
            return_alias.push(alias_idx);
        }
        Ok(Schema { name, args, returns, return_alias })
    }

    /// The index of the (first) argument written in place, if any.
    pub fn mutated_arg(&self) -> Option<usize> {
        self.args.iter().position(|a| a.mutable)
    }

    /// The arguments written in place that no return aliases, in order
    /// (`running_mean` and `running_var` of batch norm). A lowering gives
    /// their new values after the values of the returns.
    pub fn unreturned_mutated_args(&self) -> Vec<usize> {
        (0..self.args.len())
            .filter(|&i| self.args[i].mutable && !self.return_alias.contains(&Some(i)))
            .collect()
    }

    /// Checks and coerces positional `values` against the schema, filling
    /// defaults for trailing arguments that were left out.
    pub fn bind(&self, values: &[Value]) -> Result<Vec<Value>> {
        if values.len() > self.args.len() {
            return Err(Error::op(
                &self.name,
                format!("expected at most {} arguments, got {}", self.args.len(), values.len()),
            ));
        }
        let mut out = Vec::with_capacity(self.args.len());
        for (i, arg) in self.args.iter().enumerate() {
            let v = match values.get(i) {
                Some(v) => v.clone(),
                None => match &arg.default {
                    Some(d) => d.clone(),
                    None if arg.optional => Value::None,
                    None => {
                        return Err(Error::op(
                            &self.name,
                            format!("missing required argument '{}' (position {i})", arg.name),
                        ))
                    }
                },
            };
            out.push(self.coerce(i, arg, v)?);
        }
        Ok(out)
    }

    fn coerce(&self, i: usize, arg: &Arg, v: Value) -> Result<Value> {
        let mismatch = |v: &Value| {
            Error::op(
                &self.name,
                format!(
                    "argument '{}' (position {i}) must be {}{}, not {}",
                    arg.name,
                    type_label(&arg.ty),
                    if arg.optional { " or None" } else { "" },
                    v.type_name()
                ),
            )
        };
        if let Value::None = v {
            return if arg.optional || matches!(arg.ty, ArgType::Generator | ArgType::Layout | ArgType::MemoryFormat) {
                Ok(Value::None)
            } else {
                Err(mismatch(&v))
            };
        }
        Ok(match (&arg.ty, v) {
            (ArgType::Tensor, v @ Value::Tensor(_)) => v,
            (ArgType::TensorList, v @ Value::TensorList(_)) => v,
            // An empty list has no element type to tell the frontend which
            // kind of list it is (`_fused_sgd_` without momentum buffers).
            (ArgType::TensorList, Value::IntList(xs)) if xs.is_empty() => Value::TensorList(Vec::new()),
            (ArgType::OptTensorList, Value::IntList(xs)) if xs.is_empty() => Value::OptTensorList(Vec::new()),
            (ArgType::OptTensorList, Value::TensorList(ts)) => Value::OptTensorList(ts.into_iter().map(Some).collect()),
            (ArgType::OptTensorList, v @ Value::OptTensorList(_)) => v,
            (ArgType::Int, Value::Int(x)) => Value::Int(x),
            (ArgType::Int, Value::Bool(b)) => Value::Int(b as i64),
            (ArgType::Int, Value::Scalar(Scalar::Int(x))) => Value::Int(x),
            (ArgType::IntList(_), v @ Value::IntList(_)) => v,
            (ArgType::IntList(n), Value::Int(x)) => Value::IntList(vec![x; (*n).max(1)]),
            (ArgType::Float, Value::Double(x)) => Value::Double(x),
            (ArgType::Float, Value::Int(x)) => Value::Double(x as f64),
            (ArgType::Float, Value::Scalar(s)) if s.kind() != crate::dtype::ScalarKind::Bool => Value::Double(s.to_f64()),
            (ArgType::FloatList, v @ Value::FloatList(_)) => v,
            (ArgType::FloatList, Value::IntList(xs)) => Value::FloatList(xs.into_iter().map(|x| x as f64).collect()),
            (ArgType::Bool, Value::Bool(b)) => Value::Bool(b),
            (ArgType::BoolList(n), Value::IntList(xs)) if xs.iter().all(|&x| x == 0 || x == 1) && (*n == 0 || xs.len() == *n) => {
                Value::IntList(xs)
            }
            (ArgType::BoolList(n), Value::Bool(b)) => Value::IntList(vec![b as i64; (*n).max(1)]),
            // A frontend that cannot encode a bool list sends a list of Nones
            // of the right length: the mask is unknown, so everything is
            // computed (extra results are harmless, missing ones are not).
            (ArgType::BoolList(n), Value::OptTensorList(ts)) if ts.iter().all(Option::is_none) && (*n == 0 || ts.len() == *n) => {
                Value::IntList(vec![1; ts.len()])
            }
            (ArgType::Bool, Value::Int(x)) if x == 0 || x == 1 => Value::Bool(x == 1),
            (ArgType::Str, v @ Value::Str(_)) => v,
            (ArgType::Scalar, v @ Value::Scalar(_)) => v,
            (ArgType::Scalar, Value::Int(x)) => Value::Scalar(Scalar::Int(x)),
            (ArgType::Scalar, Value::Double(x)) => Value::Scalar(Scalar::Float(x)),
            (ArgType::Scalar, Value::Bool(x)) => Value::Scalar(Scalar::Bool(x)),
            (ArgType::ScalarType, v @ Value::DType(_)) => v,
            (ArgType::ScalarType, Value::Int(code)) => match DType::from_code(code as i32) {
                Some(d) => Value::DType(d),
                None => {
                    return Err(Error::UnsupportedDType {
                        op: self.name.clone(),
                        dtype: DType::describe_code(code as i32),
                        detail: format!(" (argument '{}')", arg.name),
                    })
                }
            },
            (ArgType::Layout | ArgType::MemoryFormat, Value::Int(x)) => Value::Int(x),
            (ArgType::Device, v @ (Value::Int(_) | Value::Str(_))) => v,
            (ArgType::Generator, v @ Value::Generator(_)) => v,
            (_, v) => return Err(mismatch(&v)),
        })
    }
}

fn type_label(t: &ArgType) -> String {
    match t {
        ArgType::Tensor => "Tensor".into(),
        ArgType::TensorList => "Tensor[]".into(),
        ArgType::OptTensorList => "Tensor?[]".into(),
        ArgType::Int => "int".into(),
        ArgType::IntList(0) => "int[]".into(),
        ArgType::IntList(n) => format!("int[{n}]"),
        ArgType::Float => "float".into(),
        ArgType::FloatList => "float[]".into(),
        ArgType::Bool => "bool".into(),
        ArgType::BoolList(0) => "bool[]".into(),
        ArgType::BoolList(n) => format!("bool[{n}]"),
        ArgType::Str => "str".into(),
        ArgType::Scalar => "Scalar".into(),
        ArgType::ScalarType => "ScalarType".into(),
        ArgType::Layout => "Layout".into(),
        ArgType::Device => "Device".into(),
        ArgType::MemoryFormat => "MemoryFormat".into(),
        ArgType::Generator => "Generator".into(),
    }
}

impl std::fmt::Display for ArgType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let sized = |f: &mut std::fmt::Formatter<'_>, t: &str, n: usize| {
            if n > 0 {
                write!(f, "{t}[{n}]")
            } else {
                write!(f, "{t}[]")
            }
        };
        match self {
            ArgType::Tensor => f.write_str("Tensor"),
            ArgType::TensorList => f.write_str("Tensor[]"),
            ArgType::OptTensorList => f.write_str("Tensor?[]"),
            ArgType::Int => f.write_str("int"),
            ArgType::IntList(n) => sized(f, "int", *n),
            ArgType::Float => f.write_str("float"),
            ArgType::FloatList => f.write_str("float[]"),
            ArgType::Bool => f.write_str("bool"),
            ArgType::BoolList(n) => sized(f, "bool", *n),
            ArgType::Str => f.write_str("str"),
            ArgType::Scalar => f.write_str("Scalar"),
            ArgType::ScalarType => f.write_str("ScalarType"),
            ArgType::Layout => f.write_str("Layout"),
            ArgType::Device => f.write_str("Device"),
            ArgType::MemoryFormat => f.write_str("MemoryFormat"),
            ArgType::Generator => f.write_str("Generator"),
        }
    }
}

/// A default value as a declaration spells it.
fn default_text(v: &Value) -> String {
    match v {
        Value::None => "None".into(),
        Value::Int(x) => x.to_string(),
        Value::Double(x) => format!("{x:?}"),
        Value::Bool(b) => (if *b { "True" } else { "False" }).into(),
        Value::Str(t) => format!("{t:?}"),
        Value::IntList(xs) => format!("{xs:?}"),
        Value::Scalar(s) => match s {
            crate::tensor::Scalar::Float(x) => format!("{x:?}"),
            crate::tensor::Scalar::Int(x) => x.to_string(),
            crate::tensor::Scalar::Bool(b) => (if *b { "True" } else { "False" }).into(),
        },
        other => format!("{other:?}"),
    }
}

impl std::fmt::Display for Arg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.ty)?;
        if let Some(alias) = &self.alias {
            write!(f, "({alias})")?;
        }
        if self.optional {
            f.write_str("?")?;
        }
        write!(f, " {}", self.name)?;
        if let Some(d) = &self.default {
            write!(f, "={}", default_text(d))?;
        }
        Ok(())
    }
}

/// The aten declaration, as the op was registered (derived `out=` forms
/// spelled the same way): `aten::add.Tensor(Tensor self, Tensor other, *,
/// Scalar alpha=1) -> Tensor`.
impl std::fmt::Display for Schema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}(", self.name)?;
        let mut kw = false;
        for (i, a) in self.args.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            if a.kwarg_only && !kw {
                kw = true;
                f.write_str("*, ")?;
            }
            write!(f, "{a}")?;
        }
        f.write_str(") -> ")?;
        let ret = |i: usize| match self.return_alias.get(i).copied().flatten().and_then(|a| self.args[a].alias.clone()) {
            Some(alias) => format!("{}({alias})", self.returns[i]),
            None => self.returns[i].clone(),
        };
        match self.returns.len() {
            1 => f.write_str(&ret(0)),
            n => write!(f, "({})", (0..n).map(ret).collect::<Vec<_>>().join(", ")),
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn declarations_print_back() {
        for decl in [
            "aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor",
            "aten::add_.Tensor(Tensor(a!) self, Tensor other, *, Scalar alpha=1) -> Tensor(a!)",
            "aten::max.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor, Tensor)",
            "aten::sum.dim_IntList(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor",
            "aten::split.Tensor(Tensor(a -> *) self, int split_size, int dim=0) -> Tensor[]",
            "aten::_foreach_x(Tensor(a!)[] self, float lr=0.001, str mode=\"mean\") -> ()",
        ] {
            let s = Schema::parse(decl).unwrap();
            let printed = s.to_string();
            // Printed, it parses to the same schema.
            let again = Schema::parse(&printed).unwrap_or_else(|e| panic!("{printed}: {e}"));
            assert_eq!(again.to_string(), printed);
            assert_eq!(again.args.len(), s.args.len(), "{printed}");
        }
        let s = Schema::parse("aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor").unwrap();
        assert_eq!(s.to_string(), "aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor");
    }

    use super::*;

    #[test]
    fn parses_aten_declarations() {
        let s = Schema::parse("aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor").unwrap();
        assert_eq!(s.name, "aten::add.Tensor");
        assert_eq!(s.args.len(), 3);
        assert!(s.args[2].kwarg_only);
        assert!(matches!(s.args[2].default, Some(Value::Scalar(Scalar::Int(1)))));

        let s = Schema::parse(
            "aten::max_pool2d_with_indices(Tensor self, int[2] kernel_size, int[2] stride=[], int[2] padding=0, \
             int[2] dilation=1, bool ceil_mode=False) -> (Tensor, Tensor)",
        )
        .unwrap();
        assert_eq!(s.returns, vec!["Tensor", "Tensor"]);
        assert!(matches!(&s.args[3].default, Some(Value::IntList(v)) if v == &vec![0, 0]));

        let s = Schema::parse("aten::add_.Tensor(Tensor(a!) self, Tensor other, *, Scalar alpha=1) -> Tensor(a!)").unwrap();
        assert_eq!(s.mutated_arg(), Some(0));
        assert_eq!(s.return_alias, vec![Some(0)]);

        let s = Schema::parse("aten::div.Tensor_mode(Tensor self, Tensor other, *, str? rounding_mode) -> Tensor").unwrap();
        assert!(s.args[2].optional);
        let s = Schema::parse("aten::nll_loss_forward(Tensor self, Tensor target, Tensor? weight, int reduction, SymInt ignore_index) -> (Tensor output, Tensor total_weight)").unwrap();
        assert_eq!(s.returns.len(), 2);
    }

    #[test]
    fn bool_lists_bind_as_ints() {
        let s = Schema::parse(
            "aten::native_layer_norm_backward(Tensor grad_out, Tensor input, SymInt[] normalized_shape, Tensor mean, \
             Tensor rstd, Tensor? weight, Tensor? bias, bool[3] output_mask) -> (Tensor, Tensor, Tensor)",
        )
        .unwrap();
        let (i, arg) = (7, &s.args[7]);
        assert_eq!(arg.ty, ArgType::BoolList(3));
        assert!(matches!(s.coerce(i, arg, Value::IntList(vec![1, 0, 1])), Ok(Value::IntList(v)) if v == vec![1, 0, 1]));
        assert!(s.coerce(i, arg, Value::IntList(vec![1, 0])).is_err());
        assert!(s.coerce(i, arg, Value::IntList(vec![1, 2, 0])).is_err());
        // An unknown mask (a list of Nones) asks for everything.
        let nones = Value::OptTensorList(vec![None, None, None]);
        assert!(matches!(s.coerce(i, arg, nones), Ok(Value::IntList(v)) if v == vec![1, 1, 1]));
        let s = Schema::parse(
            "aten::_native_batch_norm_legit(Tensor input, Tensor? weight, Tensor? bias, Tensor(a!) running_mean, \
             Tensor(b!) running_var, bool training, float momentum, float eps) -> (Tensor, Tensor, Tensor)",
        )
        .unwrap();
        assert_eq!(s.unreturned_mutated_args(), vec![3, 4]);
    }

    #[test]
    fn mutable_tensor_lists_and_empty_lists() {
        let s = Schema::parse(
            "aten::_fused_sgd_(Tensor(a!)[] self, Tensor(b!)[] grads, Tensor(c!)[] momentum_buffer_list, *, \
             float weight_decay, float momentum, float lr, float dampening, bool nesterov, bool maximize, \
             bool is_first_step, Tensor? grad_scale=None, Tensor? found_inf=None) -> ()",
        )
        .unwrap();
        assert!(s.returns.is_empty());
        assert!(s.args[..3].iter().all(|a| a.mutable && a.ty == ArgType::TensorList));
        // `[]` from a frontend that cannot tell an empty tensor list from an
        // empty int list.
        assert!(matches!(s.coerce(2, &s.args[2], Value::IntList(vec![])), Ok(Value::TensorList(v)) if v.is_empty()));
        assert!(s.coerce(2, &s.args[2], Value::IntList(vec![1])).is_err());
    }

    #[test]
    fn binding_fills_defaults_and_names_bad_args() {
        let s = Schema::parse("aten::sum.dim_IntList(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor").unwrap();
        let e = s.bind(&[Value::Int(3)]).unwrap_err().to_string();
        assert!(e.contains("aten::sum.dim_IntList") && e.contains("'self'"), "{e}");
        let e = s.bind(&[]).unwrap_err().to_string();
        assert!(e.contains("missing required argument 'self'"), "{e}");
        let e = Schema::parse("aten::x(Tensor self, ScalarType dtype) -> Tensor").unwrap();
        assert!(matches!(e.coerce(1, &e.args[1], Value::Int(8)), Err(Error::UnsupportedDType { .. })));
    }
}
