//! Bounding a fragment's loops. Every `stablehlo.while` gets one more
//! loop-carried value: a count of loop-body runs, threaded through every
//! loop of the fragment in order (a nested loop continues its enclosing
//! body's count, and the next loop continues where the last one ended), so
//! the bound is on the fragment's total iterations, whatever the nesting.
//! Each condition becomes `cond && count <= bound`, each body adds one, and
//! the function returns the final count as an extra result, which the
//! runtime checks like an index (asynchronously, at the next host read): a
//! count above the bound means a loop was cut, and the op fails naming the
//! plugin and the op. At most `bound + 1` bodies ever run.
//!
//! A loop the count cannot be threaded through (inside a reduction, sort,
//! map, `if`/`case` branch or a loop condition, whose regions cannot return
//! it) is refused.

use super::parse::{Attr, Block, Fragment, Op, Use};
use super::{invalid, Fail};
use crate::hlo::{Elem, Ty};

const WHILE: &str = "stablehlo.while";

fn i64_ty() -> Ty {
    Ty::scalar(Elem::I64)
}

/// Whether `block` (or anything in it) has a loop; refuses loops where the
/// count cannot be threaded. `place` is `None` where a loop may appear, or
/// the region that contains `block`.
fn scan(block: &Block, place: Option<&str>) -> Result<bool, Fail> {
    let mut any = false;
    for op in &block.ops {
        if op.name == WHILE {
            if let Some(place) = place {
                return Err(invalid(format!(
                    "a stablehlo.while inside {place}: the host bounds loops only in the function body and in \
                     other loops' bodies (plugins/ABI.md, \"Loops\")"
                )));
            }
            if op.regions.len() != 2 {
                return Err(invalid(format!("a stablehlo.while has {} regions, not 2 (cond, body)", op.regions.len())));
            }
            scan(&op.regions[0], Some("a stablehlo.while condition"))?;
            scan(&op.regions[1], None)?;
            any = true;
        } else {
            let place = format!("a {} region", op.name);
            for r in &op.regions {
                scan(r, Some(&place))?;
            }
        }
    }
    Ok(any)
}

/// Rewrites every loop of `frag` to stop after `bound` iterations in all;
/// returns whether it did (then the function has one more result, the
/// count). `bound` is positive.
pub fn bound_loops(frag: &mut Fragment, bound: i64) -> Result<bool, Fail> {
    if !scan(&frag.body, None)? {
        return Ok(false);
    }
    let mut body = std::mem::take(&mut frag.body);
    let zero = constant(frag, 0);
    let start = Use { def: zero.result.expect("a constant has a result"), index: 0 };
    body.ops.insert(0, zero);
    let end = thread(frag, &mut body.ops, start, bound)?;
    let ret = terminator(&mut body, "func.return", "the function body")?;
    ret.operands.push(end);
    ret.ins.push(i64_ty());
    frag.results.push(i64_ty());
    frag.body = body;
    Ok(true)
}

/// The block's last op, which must be `name`.
fn terminator<'b>(b: &'b mut Block, name: &str, what: &str) -> Result<&'b mut Op, Fail> {
    match b.ops.last_mut() {
        Some(op) if op.name == name => Ok(op),
        _ => Err(invalid(format!("{what} must end with {name}"))),
    }
}

/// Threads the count `cur` through the loops among `ops`; returns the count
/// after the last one.
fn thread(frag: &mut Fragment, ops: &mut [Op], mut cur: Use, bound: i64) -> Result<Use, Fail> {
    for op in ops.iter_mut().filter(|op| op.name == WHILE) {
        let n = op.operands.len() as u32;
        op.operands.push(cur);
        op.ins.push(i64_ty());
        op.outs.push(i64_ty());
        let result = match op.result {
            Some(d) => {
                frag.defs[d as usize].push(i64_ty());
                d
            }
            None => {
                let d = frag.define(vec![i64_ty()]);
                op.result = Some(d);
                d
            }
        };
        let [cond, body] = op.regions.as_mut_slice() else { unreachable!("scan checked two regions") };

        // cond: `p && count <= bound`.
        let count = frag.define(vec![i64_ty()]);
        cond.args.push(count);
        let limit = constant(frag, bound);
        let within = binary(
            frag,
            "stablehlo.compare",
            Use { def: count, index: 0 },
            use_of(&limit),
            vec![("comparison_direction".into(), Some(vec![
                Attr::Tok(super::lex::Tok::Hash("stablehlo".into())),
                Attr::Group("<", vec![
                    Attr::Tok(super::lex::Tok::Ident("comparison_direction".into())),
                    Attr::Tok(super::lex::Tok::Ident("LE".into())),
                ]),
            ]))],
            Ty::scalar(Elem::Pred),
        );
        let ret = terminator(cond, "stablehlo.return", "a stablehlo.while condition")?;
        let [p] = ret.operands.as_slice() else {
            return Err(invalid("a stablehlo.while condition must return one value"));
        };
        let both = binary(frag, "stablehlo.and", *p, use_of(&within), vec![], Ty::scalar(Elem::Pred));
        ret.operands[0] = use_of(&both);
        let at = cond.ops.len() - 1;
        cond.ops.splice(at..at, [limit, within, both]);

        // body: the nested loops, then `count + 1`.
        let count = frag.define(vec![i64_ty()]);
        body.args.push(count);
        let k = body.ops.len();
        let after = thread(frag, &mut body.ops[..k.saturating_sub(1)], Use { def: count, index: 0 }, bound)?;
        let one = constant(frag, 1);
        let next = binary(frag, "stablehlo.add", after, use_of(&one), vec![], i64_ty());
        let ret = terminator(body, "stablehlo.return", "a stablehlo.while body")?;
        ret.operands.push(use_of(&next));
        ret.ins.push(i64_ty());
        let at = body.ops.len() - 1;
        body.ops.splice(at..at, [one, next]);

        cur = Use { def: result, index: n };
    }
    Ok(cur)
}

fn use_of(op: &Op) -> Use {
    Use { def: op.result.expect("a value op"), index: 0 }
}

/// `stablehlo.constant dense<v> : tensor<i64>`.
fn constant(frag: &mut Fragment, v: i64) -> Op {
    use super::lex::Tok;
    let value = vec![
        Attr::Tok(Tok::Ident("dense".into())),
        Attr::Group("<", vec![Attr::Tok(Tok::Int(v.to_string()))]),
        Attr::Tok(Tok::Punct(":")),
        Attr::Type(i64_ty()),
    ];
    let d = frag.define(vec![i64_ty()]);
    Op {
        name: "stablehlo.constant",
        result: Some(d),
        operands: vec![],
        props: None,
        regions: vec![],
        attrs: vec![("value".into(), Some(value))],
        ins: vec![],
        outs: vec![i64_ty()],
    }
}

fn binary(frag: &mut Fragment, name: &'static str, a: Use, b: Use, attrs: super::parse::Dict, out: Ty) -> Op {
    let ins = vec![frag.ty(a).clone(), frag.ty(b).clone()];
    let d = frag.define(vec![out.clone()]);
    Op { name, result: Some(d), operands: vec![a, b], props: None, regions: vec![], attrs, ins, outs: vec![out] }
}
