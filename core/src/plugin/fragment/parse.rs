//! A recursive-descent parser from fragment tokens to a typed tree.
//!
//! The grammar is the function the SDK emits: a `func.func` header in
//! MLIR's custom form, and a body of operations in MLIR's generic form
//! (`%r:2 = "stablehlo.op"(%a, %b) <{props}> ({regions}) {attrs} : (T, T) ->
//! (T, T)`). Op names are decoded strings checked against the allow-list;
//! SSA values are resolved to their definitions (MLIR's scoping: a region
//! sees what encloses it, siblings may reuse names, nothing shadows); every
//! value is a static tensor of a runtime element type. Attribute values are
//! kept as bracket-balanced token trees with tensor types parsed, and
//! everything that could reach outside the program (symbols, dialect types
//! and attributes other than StableHLO's, resources, locations) is refused
//! where it appears. Nesting, tokens and ops are bounded, so the parse (and
//! MLIR's parse of what is printed from the tree) cannot run out of stack.

use std::collections::HashMap;

use super::lex::{position, Tok, Token};
use super::{allowed_op, invalid, Fail};
use crate::hlo::{Elem, Ty};

/// How deep regions and attribute brackets may nest, together.
pub const MAX_DEPTH: usize = 32;
/// The most operations a fragment may hold, in all regions.
pub const MAX_OPS: usize = 50_000;
/// The longest single `dense<...>` literal, in bytes of text.
pub const MAX_CONSTANT: usize = 64 << 10;

/// A use of result `index` of definition `def`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Use {
    pub def: u32,
    pub index: u32,
}

/// An attribute value: tokens, bracketed groups, and tensor types.
#[derive(Debug, Clone, PartialEq)]
pub enum Attr {
    Tok(Tok),
    /// An opening bracket (`(`, `[`, `{`, `<`) and what it encloses.
    Group(&'static str, Vec<Attr>),
    Type(Ty),
}

/// `{name = value, unit_name}`; a unit attribute has no value.
pub type Dict = Vec<(String, Option<Vec<Attr>>)>;

#[derive(Debug, Clone)]
pub struct Op {
    /// An allow-listed name (`stablehlo.add`, `func.return`).
    pub name: &'static str,
    /// The definition holding the results (none without results).
    pub result: Option<u32>,
    pub operands: Vec<Use>,
    pub props: Option<Dict>,
    pub regions: Vec<Block>,
    pub attrs: Dict,
    pub ins: Vec<Ty>,
    pub outs: Vec<Ty>,
}

/// A region's single block: its arguments (one definition each) and ops.
#[derive(Debug, Clone, Default)]
pub struct Block {
    pub args: Vec<u32>,
    pub ops: Vec<Op>,
}

/// A parsed fragment. `defs[d]` holds the types of definition `d`'s values.
#[derive(Debug, Clone)]
pub struct Fragment {
    pub params: Vec<Ty>,
    pub results: Vec<Ty>,
    pub body: Block,
    pub defs: Vec<Vec<Ty>>,
}

impl Fragment {
    /// A new definition of values of `types`.
    pub fn define(&mut self, types: Vec<Ty>) -> u32 {
        self.defs.push(types);
        (self.defs.len() - 1) as u32
    }

    pub fn ty(&self, u: Use) -> &Ty {
        &self.defs[u.def as usize][u.index as usize]
    }
}

/// A name in scope: `count` values of `def` from `base`.
#[derive(Debug, Clone, Copy)]
struct Name {
    def: u32,
    base: u32,
    count: u32,
}

struct Parser<'t> {
    text: &'t str,
    toks: &'t [Token],
    i: usize,
    depth: usize,
    ops: usize,
    scopes: Vec<HashMap<String, Name>>,
    frag: Fragment,
}

/// Parses the fragment `text` from its `tokens`.
pub fn parse(text: &str, tokens: &[Token]) -> Result<Fragment, Fail> {
    let mut p = Parser {
        text,
        toks: tokens,
        i: 0,
        depth: 0,
        ops: 0,
        scopes: vec![HashMap::new()],
        frag: Fragment { params: vec![], results: vec![], body: Block::default(), defs: vec![] },
    };
    p.func()?;
    if let Some(t) = p.toks.get(p.i) {
        return Err(invalid(format!(
            "text after the function ({}): a fragment is exactly one `func.func`",
            position(text, t.at)
        )));
    }
    Ok(p.frag)
}

/// An op's inherent attribute name; dialect-prefixed (`mhlo.sharding`) and
/// underscored (`_xla_...`) names are discardable attributes.
fn own_attribute(n: &str) -> bool {
    n.starts_with(|c: char| c.is_ascii_lowercase()) && n.bytes().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_')
}

fn elem_named(s: &str) -> Option<Elem> {
    use Elem::*;
    [Pred, I8, I16, I32, I64, U8, U32, U64, F16, BF16, F32, F64].into_iter().find(|e| e.mlir() == s)
}

fn describe(t: &Tok) -> String {
    match t {
        Tok::Value(n) => format!("%{n}"),
        Tok::Block(n) => format!("^{n}"),
        Tok::Symbol(n) => format!("@{n}"),
        Tok::Hash(n) => format!("#{n}"),
        Tok::Bang(n) => format!("!{n}"),
        Tok::Ident(s) | Tok::Int(s) | Tok::Float(s) => format!("`{s}`"),
        Tok::Str(b) => format!("string {:?}", String::from_utf8_lossy(b)),
        Tok::Punct(p) => format!("`{p}`"),
    }
}

const CLOSE: &[(&str, &str)] = &[("(", ")"), ("[", "]"), ("{", "}"), ("<", ">")];

impl<'t> Parser<'t> {
    fn peek(&self) -> Option<&'t Tok> {
        self.toks.get(self.i).map(|t| &t.tok)
    }

    fn peek2(&self) -> Option<&'t Tok> {
        self.toks.get(self.i + 1).map(|t| &t.tok)
    }

    fn here(&self) -> String {
        match self.toks.get(self.i) {
            Some(t) => position(self.text, t.at),
            None => "the end of the fragment".into(),
        }
    }

    fn fail<T>(&self, what: impl std::fmt::Display) -> Result<T, Fail> {
        Err(invalid(format!("{what} at {}", self.here())))
    }

    fn next(&mut self) -> Result<&'t Tok, Fail> {
        match self.toks.get(self.i) {
            Some(t) => {
                self.i += 1;
                Ok(&t.tok)
            }
            None => Err(invalid("the fragment ends too early")),
        }
    }

    fn is(&self, p: &str) -> bool {
        matches!(self.peek(), Some(Tok::Punct(q)) if *q == p)
    }

    fn eat(&mut self, p: &str) -> bool {
        let yes = self.is(p);
        if yes {
            self.i += 1;
        }
        yes
    }

    fn expect(&mut self, p: &str, context: &str) -> Result<(), Fail> {
        if self.eat(p) {
            return Ok(());
        }
        let got = self.peek().map_or("the end".to_string(), describe);
        self.fail(format!("expected `{p}` {context}, found {got}"))
    }

    fn ident_is(&self, s: &str) -> bool {
        matches!(self.peek(), Some(Tok::Ident(x)) if x == s)
    }

    fn enter(&mut self) -> Result<(), Fail> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return self.fail(format!("regions and attributes nest more than {MAX_DEPTH} deep (the limit)"));
        }
        Ok(())
    }

    // ------------------------------------------------------------ function

    fn func(&mut self) -> Result<(), Fail> {
        if !(self.ident_is("func.func")) {
            return Err(invalid("the fragment must be one `func.func` (see plugins/ABI.md)"));
        }
        self.i += 1;
        if self.ident_is("public") || self.ident_is("private") {
            self.i += 1;
        }
        match self.next()? {
            Tok::Symbol(_) => {}
            _ => return self.fail("expected the function's `@name` after `func.func`"),
        }
        self.expect("(", "to open the parameter list")?;
        let mut params = Vec::new();
        if !self.eat(")") {
            loop {
                let name = match self.next()? {
                    Tok::Value(n) => n.clone(),
                    _ => return self.fail("expected a parameter `%name`"),
                };
                self.expect(":", "after a parameter's name")?;
                let ty = self.ty()?;
                if self.is("{") {
                    return self.fail("argument attributes are not allowed in a fragment");
                }
                let d = self.frag.define(vec![ty.clone()]);
                self.bind(&name, Name { def: d, base: 0, count: 1 })?;
                params.push(ty);
                self.frag.body.args.push(d);
                if self.eat(")") {
                    break;
                }
                self.expect(",", "between parameters")?;
            }
        }
        let mut results = Vec::new();
        if self.eat("->") {
            if self.eat("(") {
                if !self.eat(")") {
                    loop {
                        results.push(self.ty()?);
                        if self.is("{") {
                            return self.fail("result attributes are not allowed in a fragment");
                        }
                        if self.eat(")") {
                            break;
                        }
                        self.expect(",", "between result types")?;
                    }
                }
            } else {
                results.push(self.ty()?);
            }
        }
        if self.ident_is("attributes") {
            return self.fail("function attributes are not allowed in a fragment");
        }
        self.frag.params = params;
        self.frag.results = results;
        self.expect("{", "to open the function body")?;
        self.enter()?;
        let ops = self.ops()?;
        self.frag.body.ops = ops;
        if self.is("^") || matches!(self.peek(), Some(Tok::Block(_))) {
            return self.fail("the function body has more than one block");
        }
        self.expect("}", "to close the function body")?;
        Ok(())
    }

    fn bind(&mut self, name: &str, n: Name) -> Result<(), Fail> {
        if self.scopes.iter().any(|s| s.contains_key(name)) {
            return self.fail(format!("redefinition of %{name}"));
        }
        self.scopes.last_mut().expect("a scope is open").insert(name.to_string(), n);
        Ok(())
    }

    // --------------------------------------------------------------- types

    /// A static tensor type of a runtime element type.
    fn ty(&mut self) -> Result<Ty, Fail> {
        match self.peek() {
            Some(Tok::Ident(s)) if s == "tensor" => {}
            Some(Tok::Bang(n)) => return self.fail(format!("type !{n} is not allowed: values are tensors")),
            Some(t) => return self.fail(format!("expected a tensor type, found {}", describe(t))),
            None => return self.fail("expected a tensor type"),
        }
        self.i += 1;
        self.expect("<", "after `tensor`")?;
        let mut spelled = String::new();
        loop {
            match self.next()? {
                Tok::Int(s) | Tok::Ident(s) => spelled.push_str(s),
                Tok::Punct(">") => break,
                Tok::Punct("?" | "*") => return self.fail("dynamic shapes are not allowed: every dimension is a number"),
                Tok::Punct(",") => return self.fail("tensor encodings are not allowed"),
                t => return self.fail(format!("{} in a tensor type", describe(t))),
            }
        }
        let mut parts: Vec<&str> = spelled.split('x').collect();
        let elem_text = parts.pop().unwrap_or("");
        let Some(elem) = elem_named(elem_text) else {
            return self.fail(format!("tensor<{spelled}> has element type {elem_text:?}, which is not a runtime dtype"));
        };
        let mut dims = Vec::with_capacity(parts.len());
        for d in parts {
            match d.parse::<i64>() {
                Ok(n) if d.bytes().all(|c| c.is_ascii_digit()) => dims.push(n),
                _ => return self.fail(format!("tensor<{spelled}> has a malformed dimension {d:?}")),
            }
        }
        Ok(Ty::new(elem, &dims))
    }

    fn ty_list(&mut self) -> Result<Vec<Ty>, Fail> {
        let mut out = Vec::new();
        self.expect("(", "to open a type list")?;
        if self.eat(")") {
            return Ok(out);
        }
        loop {
            out.push(self.ty()?);
            if self.eat(")") {
                return Ok(out);
            }
            self.expect(",", "between types")?;
        }
    }

    // ----------------------------------------------------------------- ops

    /// Ops up to (not including) the `}` that closes their block.
    fn ops(&mut self) -> Result<Vec<Op>, Fail> {
        let mut ops = Vec::new();
        while !self.is("}") && !matches!(self.peek(), Some(Tok::Block(_)) | None) {
            ops.push(self.op()?);
        }
        Ok(ops)
    }

    fn op(&mut self) -> Result<Op, Fail> {
        self.ops += 1;
        if self.ops > MAX_OPS {
            return self.fail(format!("the fragment has more than {MAX_OPS} operations (the limit)"));
        }
        // Results: `%a = `, `%a:2 = `, `%a, %b:2 = `.
        let mut names: Vec<(String, u32)> = Vec::new();
        if matches!(self.peek(), Some(Tok::Value(_))) {
            loop {
                let Tok::Value(n) = self.next()? else { return self.fail("expected a result name") };
                let mut count = 1;
                if self.eat(":") {
                    count = match self.next()? {
                        Tok::Int(c) => c.parse::<u32>().ok().filter(|&c| c >= 1 && c <= 4096),
                        _ => None,
                    }
                    .map_or_else(|| self.fail("expected a result count after `:`"), Ok)?;
                }
                names.push((n.clone(), count));
                if self.eat("=") {
                    break;
                }
                self.expect(",", "between result names")?;
            }
        }
        let name = match self.peek() {
            Some(Tok::Str(b)) => {
                let decoded = String::from_utf8_lossy(b).into_owned();
                let n = allowed_op(&decoded).map_err(|m| invalid(format!("{m} ({})", self.here())))?;
                self.i += 1;
                n
            }
            Some(Tok::Ident(s)) => {
                allowed_op(s).map_err(|m| invalid(format!("{m} ({})", self.here())))?;
                return self.fail(format!(
                    "op {s} is in MLIR's custom form; fragments write every op in the generic form \
                     (`%1 = \"{s}\"(%0) : (tensor<4xf32>) -> tensor<4xf32>`), as the SDK does"
                ));
            }
            Some(t) => return self.fail(format!("expected an operation, found {}", describe(t))),
            None => return self.fail("expected an operation"),
        };
        self.expect("(", &format!("to open {name}'s operands"))?;
        let mut operands = Vec::new();
        if !self.eat(")") {
            loop {
                operands.push(self.use_()?);
                if self.eat(")") {
                    break;
                }
                self.expect(",", "between operands")?;
            }
        }
        if self.is("[") {
            return self.fail(format!("{name} has successors; fragments have no branches"));
        }
        let props = if self.eat("<") {
            self.enter()?;
            let d = self.dict()?;
            self.expect(">", "to close the properties")?;
            self.depth -= 1;
            Some(d)
        } else {
            None
        };
        let mut regions = Vec::new();
        if self.is("(") && matches!(self.peek2(), Some(Tok::Punct("{"))) {
            self.i += 1;
            loop {
                regions.push(self.region()?);
                if self.eat(")") {
                    break;
                }
                self.expect(",", "between regions")?;
            }
        }
        let attrs = if self.is("{") { self.dict()? } else { Vec::new() };
        self.expect(":", &format!("before {name}'s type"))?;
        let ins = self.ty_list()?;
        self.expect("->", &format!("in {name}'s type"))?;
        let outs = if self.is("(") { self.ty_list()? } else { vec![self.ty()?] };
        if self.ident_is("loc") {
            return self.fail("locations are not allowed in a fragment");
        }
        if ins.len() != operands.len() {
            return self.fail(format!("{name} has {} operands but its type lists {}", operands.len(), ins.len()));
        }
        for (k, (u, t)) in operands.iter().zip(&ins).enumerate() {
            let have = self.frag.ty(*u);
            if have != t {
                return self.fail(format!("{name}'s operand {k} is {have}, but its type says {t}"));
            }
        }
        let declared: u32 = names.iter().map(|(_, c)| c).sum();
        if declared as usize != outs.len() {
            return self.fail(format!("{name} names {declared} results but its type has {}", outs.len()));
        }
        let result = if outs.is_empty() { None } else { Some(self.frag.define(outs.clone())) };
        let mut base = 0;
        for (n, count) in names {
            let def = result.expect("results were declared");
            self.bind(&n, Name { def, base, count })?;
            base += count;
        }
        Ok(Op { name, result, operands, props, regions, attrs, ins, outs })
    }

    fn use_(&mut self) -> Result<Use, Fail> {
        let Tok::Value(n) = self.next()? else { return self.fail("expected an operand `%name`") };
        let mut index = None;
        if let Some(Tok::Hash(k)) = self.peek() {
            index = Some(k.parse::<u32>().map_or_else(|_| self.fail(format!("bad result number #{k}")), Ok)?);
            self.i += 1;
        }
        let Some(name) = self.scopes.iter().rev().find_map(|s| s.get(n.as_str())).copied() else {
            return self.fail(format!("use of undefined value %{n}"));
        };
        let k = index.unwrap_or(0);
        if k >= name.count || (index.is_none() && name.count > 1) {
            return self.fail(format!("%{n} names {} values; use %{n}#0 to %{n}#{}", name.count, name.count - 1));
        }
        Ok(Use { def: name.def, index: name.base + k })
    }

    fn region(&mut self) -> Result<Block, Fail> {
        self.expect("{", "to open a region")?;
        self.enter()?;
        self.scopes.push(HashMap::new());
        let mut block = Block::default();
        if let Some(Tok::Block(_)) = self.peek() {
            self.i += 1;
            if self.eat("(") && !self.eat(")") {
                loop {
                    let Tok::Value(n) = self.next()? else { return self.fail("expected a block argument `%name`") };
                    let n = n.clone();
                    self.expect(":", "after a block argument")?;
                    let ty = self.ty()?;
                    let d = self.frag.define(vec![ty]);
                    self.bind(&n, Name { def: d, base: 0, count: 1 })?;
                    block.args.push(d);
                    if self.eat(")") {
                        break;
                    }
                    self.expect(",", "between block arguments")?;
                }
            }
            self.expect(":", "after a block label")?;
        }
        block.ops = self.ops()?;
        if matches!(self.peek(), Some(Tok::Block(_))) {
            return self.fail("a region has more than one block; StableHLO regions have one");
        }
        self.expect("}", "to close a region")?;
        self.scopes.pop();
        self.depth -= 1;
        Ok(block)
    }

    // ----------------------------------------------------------- attributes

    fn dict(&mut self) -> Result<Dict, Fail> {
        self.expect("{", "to open attributes")?;
        self.enter()?;
        let mut out = Vec::new();
        let mut seen = std::collections::HashSet::new();
        if !self.eat("}") {
            loop {
                let name = match self.next()? {
                    Tok::Ident(n) if own_attribute(n) => n.clone(),
                    Tok::Ident(n) => {
                        return self.fail(format!(
                            "attribute name {n}: only an op's own attributes ([a-z][a-z0-9_]*) are allowed, not \
                             discardable ones that steer the compiler"
                        ))
                    }
                    t => return self.fail(format!("expected an attribute name, found {}", describe(t))),
                };
                let value = if self.eat("=") {
                    let mut v = Vec::new();
                    while !self.is(",") && !self.is("}") {
                        v.push(self.attr()?);
                    }
                    if v.is_empty() {
                        return self.fail(format!("attribute {name} has no value"));
                    }
                    Some(v)
                } else {
                    None
                };
                if !seen.insert(name.clone()) {
                    return self.fail(format!("attribute {name} appears twice"));
                }
                out.push((name, value));
                if self.eat("}") {
                    break;
                }
                self.expect(",", "between attributes")?;
            }
        }
        self.depth -= 1;
        Ok(out)
    }

    /// One attribute atom: a token, a bracketed group, or a tensor type.
    fn attr(&mut self) -> Result<Attr, Fail> {
        let start = self.i;
        let tok = self.peek().ok_or_else(|| invalid("the fragment ends inside an attribute"))?;
        match tok {
            Tok::Ident(s) if s == "tensor" && matches!(self.peek2(), Some(Tok::Punct("<"))) => return Ok(Attr::Type(self.ty()?)),
            Tok::Punct(open @ ("(" | "[" | "{" | "<")) => {
                let close = CLOSE.iter().find(|(o, _)| o == open).expect("an opening bracket").1;
                self.i += 1;
                self.enter()?;
                let mut inner = Vec::new();
                loop {
                    match self.peek() {
                        Some(Tok::Punct(p)) if *p == close => break,
                        Some(Tok::Punct(")" | "]" | "}" | ">")) | None => {
                            return self.fail(format!("unbalanced `{open}` in an attribute"));
                        }
                        _ => inner.push(self.attr()?),
                    }
                }
                self.i += 1;
                self.depth -= 1;
                // A dense literal's size counts its text.
                if *open == "<" && start > 0 && matches!(&self.toks[start - 1].tok, Tok::Ident(d) if d == "dense") {
                    let end = self.toks[self.i - 1].at;
                    let len = end - self.toks[start].at;
                    if len > MAX_CONSTANT {
                        return self.fail(format!("a constant of {len} bytes of text; the limit is {MAX_CONSTANT}"));
                    }
                }
                return Ok(Attr::Group(open, inner));
            }
            Tok::Punct(p @ (")" | "]" | "}" | ">")) => return self.fail(format!("unbalanced `{p}` in an attribute")),
            Tok::Symbol(n) => return self.fail(format!("symbol reference @{n}: a fragment cannot refer to other symbols")),
            Tok::Bang(n) => return self.fail(format!("!{n}: dialect types are not allowed in a fragment")),
            Tok::Value(n) => return self.fail(format!("%{n} inside an attribute")),
            Tok::Block(n) => return self.fail(format!("^{n} inside an attribute")),
            Tok::Hash(n) if !(n == "stablehlo" || n.starts_with("stablehlo.")) => {
                return self.fail(format!("#{n}: only #stablehlo attributes are allowed in a fragment"));
            }
            Tok::Ident(s) if matches!(s.as_str(), "dense_resource" | "distinct" | "loc" | "affine_map" | "affine_set") => {
                return self.fail(format!("`{s}` attributes are not allowed in a fragment"));
            }
            _ => {}
        }
        self.i += 1;
        Ok(Attr::Tok(tok.clone()))
    }
}
