//! Printing a checked fragment from its tree, canonically: values renamed
//! `%0, %1, ...` by definition, every op in the generic form, strings
//! re-quoted, attributes re-spaced. Nothing of the plugin's text reaches the
//! compiler verbatim, only what the tree holds.

use std::fmt::Write;

use super::lex::{quote, Tok};
use super::parse::{Attr, Block, Dict, Fragment, Op, Use};
use crate::hlo::Ty;

/// The fragment as the private function `@symbol`.
pub fn print(frag: &Fragment, symbol: &str) -> String {
    let mut out = String::with_capacity(256 + frag.body.ops.len() * 96);
    let params: Vec<String> = frag.body.args.iter().zip(&frag.params).map(|(d, t)| format!("%{d}: {t}")).collect();
    let _ = writeln!(out, "func.func private @{symbol}({}) -> ({}) {{", params.join(", "), types(&frag.results));
    for op in &frag.body.ops {
        print_op(frag, op, 1, &mut out);
    }
    out.push_str("}\n");
    out
}

fn types(ts: &[Ty]) -> String {
    ts.iter().map(|t| t.to_string()).collect::<Vec<_>>().join(", ")
}

fn value(frag: &Fragment, u: Use) -> String {
    if frag.defs[u.def as usize].len() > 1 {
        format!("%{}#{}", u.def, u.index)
    } else {
        format!("%{}", u.def)
    }
}

fn print_op(frag: &Fragment, op: &Op, indent: usize, out: &mut String) {
    let pad = "  ".repeat(indent);
    out.push_str(&pad);
    if let Some(d) = op.result {
        match op.outs.len() {
            1 => {
                let _ = write!(out, "%{d} = ");
            }
            n => {
                let _ = write!(out, "%{d}:{n} = ");
            }
        }
    }
    let operands: Vec<String> = op.operands.iter().map(|u| value(frag, *u)).collect();
    let _ = write!(out, "\"{}\"({})", op.name, operands.join(", "));
    if let Some(p) = &op.props {
        let _ = write!(out, " <{}>", dict(p));
    }
    if !op.regions.is_empty() {
        out.push_str(" (");
        for (k, r) in op.regions.iter().enumerate() {
            if k > 0 {
                out.push_str(", ");
            }
            print_region(frag, r, indent + 1, out);
        }
        out.push(')');
    }
    if !op.attrs.is_empty() {
        let _ = write!(out, " {}", dict(&op.attrs));
    }
    let outs = if op.outs.len() == 1 { op.outs[0].to_string() } else { format!("({})", types(&op.outs)) };
    let _ = writeln!(out, " : ({}) -> {outs}", types(&op.ins));
}

fn print_region(frag: &Fragment, b: &Block, indent: usize, out: &mut String) {
    out.push_str("{\n");
    let pad = "  ".repeat(indent);
    let args: Vec<String> = b.args.iter().map(|d| format!("%{d}: {}", frag.defs[*d as usize][0])).collect();
    if args.is_empty() {
        let _ = writeln!(out, "{pad}^bb0:");
    } else {
        let _ = writeln!(out, "{pad}^bb0({}):", args.join(", "));
    }
    for op in &b.ops {
        print_op(frag, op, indent + 1, out);
    }
    let _ = write!(out, "{pad}}}");
}

fn dict(d: &Dict) -> String {
    let entries: Vec<String> = d
        .iter()
        .map(|(name, v)| match v {
            Some(v) => format!("{name} = {}", attrs(v)),
            None => name.clone(),
        })
        .collect();
    format!("{{{}}}", entries.join(", "))
}

fn tok(t: &Tok) -> String {
    match t {
        Tok::Ident(s) | Tok::Int(s) | Tok::Float(s) => s.clone(),
        Tok::Str(b) => quote(b),
        Tok::Hash(n) => format!("#{n}"),
        Tok::Punct(p) => (*p).to_string(),
        // The parser refuses these inside attributes.
        Tok::Value(n) | Tok::Block(n) | Tok::Symbol(n) | Tok::Bang(n) => unreachable!("{n} in a checked attribute"),
    }
}

/// A sequence of attribute atoms, spaced as MLIR prints them: no space
/// inside brackets, before `,` or `:`... except where a token needs one to
/// stay a separate token.
fn attrs(v: &[Attr]) -> String {
    let mut out = String::new();
    let mut prev: Option<&Attr> = None;
    for a in v {
        let tight = match (prev, a) {
            (None, _) => true,
            (_, Attr::Tok(Tok::Punct(","))) => true,
            // `dense<`, `array<`, `#stablehlo<`: the bracket belongs to the name.
            (Some(Attr::Tok(Tok::Ident(_) | Tok::Hash(_))), Attr::Group("<", _)) => true,
            // `-1`, `-1.5`: a sign before its number.
            (Some(Attr::Tok(Tok::Punct("-"))), Attr::Tok(Tok::Int(_) | Tok::Float(_))) => true,
            _ => false,
        };
        if !tight {
            out.push(' ');
        }
        match a {
            Attr::Tok(t) => out.push_str(&tok(t)),
            Attr::Type(t) => out.push_str(&t.to_string()),
            Attr::Group(open, inner) => {
                let close = match *open {
                    "(" => ")",
                    "[" => "]",
                    "{" => "}",
                    _ => ">",
                };
                let _ = write!(out, "{open}{}{close}", attrs(inner));
            }
        }
        prev = Some(a);
    }
    out
}
