//! `out=` variants, derived from the functional ops on demand.
//!
//! PyTorch declares most ops three times: functional (`add.Tensor`),
//! in-place (`add_.Tensor`) and `out=` (`add.out`). The registry registers
//! functional and in-place forms explicitly (an in-place op lowers into one
//! program that writes `self`). An `out=` form is the functional op followed
//! by a copy into each `out` tensor, so the registry derives it when it is
//! first asked for, and every frontend (C, C++, PyTorch) gets the same one:
//!
//! - by name ([`derive_by_name`]): `X.ov_out` is the functional `X.ov`,
//!   `X.out` is `X` or `X.Tensor` (the first that exists), plus one
//!   keyword-only `Tensor(a!) out` per result;
//! - by declaration ([`derive_by_decl`]): a frontend that knows the
//!   declaration it will call (PyTorch's schema) has it matched argument by
//!   argument, name and type, against the functional candidates, so a
//!   candidate that merely shares the name is never taken.
//!
//! The runtime carries a derived op out as [`Composite::Out`].

use super::schema::{Arg, ArgType, Schema};
use super::{dispatch_only, Composite, OpDef, Registry};

/// The functional overload an `out=` overload name points at: `out` -> ``,
/// `Tensor_out` -> `Tensor`; `None` when the name is not an `out=` form.
fn out_base(overload: &str) -> Option<&str> {
    if overload == "out" {
        Some("")
    } else {
        overload.strip_suffix("_out").filter(|b| !b.is_empty())
    }
}

/// The functional ops an `out=` name may stand for, most specific first:
/// `X.ov_out` is `X.ov`; `X.out` is `X` or `X.Tensor`. (Only these, so the
/// names that derive an op are bounded by the registry's own.)
fn candidates(name: &str) -> Vec<String> {
    let Some((base, overload)) = name.split_once('.') else { return Vec::new() };
    let Some(ov) = out_base(overload) else { return Vec::new() };
    let fallbacks: &[&str] = if ov.is_empty() { &["Tensor"] } else { &[] };
    let mut out = Vec::new();
    for &o in std::iter::once(&ov).chain(fallbacks) {
        let c = if o.is_empty() { base.to_string() } else { format!("{base}.{o}") };
        if !out.contains(&c) {
            out.push(c);
        }
    }
    out
}

/// Whether `f` can stand behind an `out=` form: it returns one or more
/// plain tensors and writes nothing itself.
fn derivable(f: &OpDef) -> bool {
    let s = &f.schema;
    f.composite.is_none_or(|c| !matches!(c, Composite::Out { .. }))
        && !s.returns.is_empty()
        && s.returns.iter().all(|r| r == "Tensor")
        && s.return_alias.iter().all(Option::is_none)
        && !s.args.iter().any(|a| a.mutable)
}

/// The `out=` op `name` over functional op `id`: the functional arguments,
/// then one keyword-only `Tensor(a!)` per result, named `outs`.
fn derive(name: &str, id: usize, f: &OpDef, inputs: Vec<Arg>, outs: &[String]) -> OpDef {
    let mut args = inputs;
    let mut return_alias = Vec::with_capacity(outs.len());
    for (k, out) in outs.iter().enumerate() {
        // Alias letters only need to be distinct within the schema.
        let letter = format!("out{k}!");
        return_alias.push(Some(args.len()));
        args.push(Arg {
            name: out.clone(),
            ty: ArgType::Tensor,
            optional: false,
            mutable: true,
            alias: Some(letter),
            kwarg_only: true,
            default: None,
        });
    }
    let schema = Schema { name: name.to_string(), args, returns: vec!["Tensor".into(); outs.len()], return_alias };
    let kind = Composite::Out { functional: id };
    let mut def = OpDef::new(schema, dispatch_only(kind));
    def.composite = Some(kind);
    def.plugin = f.plugin.clone();
    def
}

/// The `out=` op `name`, derived from the first functional candidate the
/// registry has; its outputs are named `out` (`out0`, `out1`, ... for
/// several).
pub(super) fn derive_by_name(reg: &Registry, name: &str) -> Option<OpDef> {
    candidates(name).into_iter().find_map(|c| {
        let id = reg.exact(&c)?;
        let f = reg.get(id);
        derivable(f).then(|| {
            let n = f.schema.returns.len();
            let outs: Vec<String> = if n == 1 { vec!["out".into()] } else { (0..n).map(|k| format!("out{k}")).collect() };
            derive(name, id, f, f.schema.args.clone(), &outs)
        })
    })
}

/// The declared inputs: everything but the keyword-only written tensors.
fn inputs(s: &Schema) -> impl Iterator<Item = &Arg> {
    s.args.iter().filter(|a| !(a.kwarg_only && a.mutable))
}

/// Whether two argument lists agree in names, types and optionality (the
/// way a frontend binds values to them).
fn same_args<'a>(a: impl Iterator<Item = &'a Arg>, b: impl Iterator<Item = &'a Arg>) -> bool {
    let (a, b): (Vec<&Arg>, Vec<&Arg>) = (a.collect(), b.collect());
    a.len() == b.len()
        && a.iter().zip(&b).all(|(x, y)| x.name == y.name && x.ty == y.ty && x.optional == y.optional && x.mutable == y.mutable)
}

/// The `out=` op `decl` declares (its written tensors keyword-only, as
/// PyTorch declares every `out=` form, whatever its overload is called:
/// `max.dim_max`, `sort.values`), derived from an overload of the same op
/// that takes exactly its inputs (by name and type), possibly followed by
/// keyword-only optional arguments it leaves out (a factory's `dtype`,
/// `layout`, `device`, `pin_memory`: `arange.start_out` is
/// `arange.start_step`, run with the `out`'s dtype), and returns as many
/// tensors as it has `out` arguments; `None` when there is none.
pub(super) fn derive_by_decl(reg: &Registry, decl: &Schema) -> Option<OpDef> {
    let outs: Vec<String> = decl.args.iter().filter(|a| a.kwarg_only && a.mutable).map(|a| a.name.clone()).collect();
    if outs.is_empty() || decl.args.iter().any(|a| a.mutable && !(a.kwarg_only && a.ty == ArgType::Tensor)) {
        return None;
    }
    let base = decl.name.split('.').next().unwrap_or_default();
    let mut names = candidates(&decl.name);
    names.extend(reg.names().into_iter().filter(|n| n.split('.').next() == Some(base)).map(str::to_string));
    names.into_iter().find_map(|c| {
        let id = reg.exact(&c)?;
        let f = reg.get(id);
        let n_in = inputs(decl).count();
        let extra_ok = f.schema.args.len() >= n_in && f.schema.args[n_in..].iter().all(|a| a.kwarg_only && a.optional);
        (derivable(f)
            && f.schema.returns.len() == outs.len()
            && extra_ok
            && same_args(inputs(decl), f.schema.args[..n_in.min(f.schema.args.len())].iter()))
        .then(|| derive(&decl.name, id, f, inputs(decl).cloned().collect(), &outs))
    })
}

/// Whether a registered op takes the arguments `decl` declares, in order
/// (names, types, optionality, which ones it writes).
pub(super) fn matches_decl(def: &OpDef, decl: &Schema) -> bool {
    same_args(def.schema.args.iter(), decl.args.iter())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::registry;

    #[test]
    fn out_names_point_at_functional_overloads() {
        assert_eq!(candidates("aten::add.out"), ["aten::add", "aten::add.Tensor"]);
        assert_eq!(candidates("aten::pow.Tensor_Scalar_out"), ["aten::pow.Tensor_Scalar"]);
        // A made-up overload names no functional op: nothing is derived.
        assert!(derive_by_name(registry(), "aten::add.made_up_out").is_none());
        assert!(candidates("aten::add.Tensor").is_empty());
        assert!(candidates("aten::add").is_empty());
        assert!(candidates("aten::x._out").is_empty());
    }

    #[test]
    fn derived_by_name_and_by_declaration() {
        let reg = registry();
        let id = reg.lookup("aten::mul.out").unwrap();
        let def = reg.get(id);
        assert_eq!(def.composite, Some(Composite::Out { functional: reg.lookup("aten::mul.Tensor").unwrap() }));
        let names: Vec<&str> = def.schema.args.iter().map(|a| a.name.as_str()).collect();
        assert_eq!(names, ["self", "other", "out"]);
        assert_eq!(def.schema.return_alias, [Some(2)]);

        // PyTorch's `mean.out` takes a dim list: the name alone points at
        // `aten::mean` (no dims), the declaration at `aten::mean.dim`.
        let decl = Schema::parse(
            "aten::mean.out(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None, Tensor(a!) out) -> Tensor(a!)",
        )
        .unwrap();
        let def = derive_by_decl(reg, &decl).unwrap();
        assert_eq!(def.composite, Some(Composite::Out { functional: reg.lookup("aten::mean.dim").unwrap() }));
        let decl = Schema::parse("aten::mul.out(Tensor self, int other, *, Tensor(a!) out) -> Tensor(a!)").unwrap();
        assert!(derive_by_decl(reg, &decl).is_none());
        let decl = Schema::parse("aten::clamp_min.Tensor_out(Tensor self, Tensor min, *, Tensor(a!) out) -> Tensor(a!)").unwrap();
        let def = derive_by_decl(reg, &decl).unwrap();
        assert_eq!(def.composite, Some(Composite::Out { functional: reg.lookup("aten::clamp_min.Tensor").unwrap() }));
        // An out= form whatever its overload's name, matched by its inputs.
        let decl = Schema::parse(
            "aten::max.dim_max(Tensor self, int dim, bool keepdim=False, *, Tensor(a!) max, Tensor(b!) max_values) -> (Tensor(a!) values, Tensor(b!) indices)",
        )
        .unwrap();
        let def = derive_by_decl(reg, &decl).unwrap();
        assert_eq!(def.composite, Some(Composite::Out { functional: reg.lookup("aten::max.dim").unwrap() }));
        assert_eq!(def.schema.return_alias, [Some(3), Some(4)]);
        // Not an out= form, or an in-place op: nothing is derived.
        assert!(reg.lookup("aten::mul.Tensorx").is_err());
        assert!(derive_by_name(reg, "aten::mul_.out").is_none());
    }
}
