//! Checking a plugin's StableHLO fragment before it reaches a compiler.
//!
//! The fragment is untrusted text that a native compiler will parse, so the
//! rules (plugins/ABI.md, "The StableHLO fragment") are checked here on the
//! text itself: one `func.func` and nothing around it, a signature equal to
//! the host's types, only `stablehlo.*` ops (minus the ones that reach
//! outside the program) and `func.return`, no symbol references, bounded
//! size. A fragment that passes is renamed into the plugin's namespace and
//! made private; whether it also type-checks is settled by a trial compile
//! (see `Runtime::run`).

use crate::error::PluginFailure;
use crate::hlo::Ty;

/// The largest fragment accepted.
pub const MAX_TEXT: usize = 1 << 20;
/// The largest single `dense<...>` literal accepted.
pub const MAX_CONSTANT: usize = 64 << 10;

/// StableHLO ops a fragment may not use: they reach the host (custom calls,
/// infeed/outfeed, send/recv), other replicas, or other symbols.
const DENIED: &[&str] = &[
    "custom_call",
    "infeed",
    "outfeed",
    "send",
    "recv",
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "all_to_all",
    "collective_permute",
    "collective_broadcast",
    "replica_id",
    "partition_id",
    "composite",
];

type Fail = (PluginFailure, String);

fn invalid(msg: impl Into<String>) -> Fail {
    (PluginFailure::InvalidStableHlo, msg.into())
}

fn mismatch(msg: impl Into<String>) -> Fail {
    (PluginFailure::SignatureMismatch, msg.into())
}

/// A cursor over the fragment text.
struct Cur<'a> {
    s: &'a [u8],
    i: usize,
}

impl<'a> Cur<'a> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    /// Skips whitespace and `//` comments.
    fn ws(&mut self) {
        loop {
            while self.peek().is_some_and(|c| c.is_ascii_whitespace()) {
                self.i += 1;
            }
            if self.s[self.i..].starts_with(b"//") {
                while self.peek().is_some_and(|c| c != b'\n') {
                    self.i += 1;
                }
            } else {
                return;
            }
        }
    }

    fn eat(&mut self, tok: &str) -> bool {
        self.ws();
        if self.s[self.i..].starts_with(tok.as_bytes()) {
            self.i += tok.len();
            true
        } else {
            false
        }
    }

    fn ident(&mut self) -> &'a str {
        let start = self.i;
        while self.peek().is_some_and(|c| c.is_ascii_alphanumeric() || b"_$.-".contains(&c)) {
            self.i += 1;
        }
        std::str::from_utf8(&self.s[start..self.i]).unwrap_or("")
    }

    /// Skips a string literal starting at the current `"`; returns its contents.
    fn string(&mut self) -> Result<&'a str, Fail> {
        let start = self.i + 1;
        self.i += 1;
        while let Some(c) = self.peek() {
            match c {
                b'\\' => self.i += 2,
                b'"' => {
                    self.i += 1;
                    return Ok(std::str::from_utf8(&self.s[start..self.i - 1]).unwrap_or(""));
                }
                _ => self.i += 1,
            }
        }
        Err(invalid("unterminated string literal"))
    }

    /// The text up to the matching close of the bracket at the cursor,
    /// skipping strings; the cursor ends after the close.
    fn group(&mut self) -> Result<&'a str, Fail> {
        let open = self.peek().unwrap_or(0);
        let start = self.i;
        let mut depth: Vec<u8> = Vec::new();
        while let Some(c) = self.peek() {
            match c {
                b'"' => {
                    self.string()?;
                    continue;
                }
                b'(' | b'[' | b'{' | b'<' => depth.push(c),
                b')' | b']' | b'}' | b'>' => {
                    // `->` is an arrow, not a closing angle.
                    if !(c == b'>' && self.i > 0 && self.s[self.i - 1] == b'-') {
                        let want = match c {
                            b')' => b'(',
                            b']' => b'[',
                            b'}' => b'{',
                            _ => b'<',
                        };
                        if depth.pop() != Some(want) {
                            return Err(invalid(format!("unbalanced '{}' at byte {}", c as char, self.i)));
                        }
                        if depth.is_empty() {
                            self.i += 1;
                            return Ok(std::str::from_utf8(&self.s[start + 1..self.i - 1]).unwrap_or(""));
                        }
                    }
                }
                _ => {}
            }
            self.i += 1;
        }
        Err(invalid(format!("unclosed '{}'", open as char)))
    }
}

/// Splits at commas outside brackets and strings.
fn split_top(s: &str) -> Vec<&str> {
    let b = s.as_bytes();
    let (mut out, mut depth, mut start, mut i, mut in_str) = (Vec::new(), 0i32, 0, 0, false);
    while i < b.len() {
        let c = b[i];
        if in_str {
            if c == b'\\' {
                i += 1;
            } else if c == b'"' {
                in_str = false;
            }
        } else {
            match c {
                b'"' => in_str = true,
                b'(' | b'[' | b'{' | b'<' => depth += 1,
                b'>' if i > 0 && b[i - 1] == b'-' => {}
                b')' | b']' | b'}' | b'>' => depth -= 1,
                b',' if depth == 0 => {
                    out.push(&s[start..i]);
                    start = i + 1;
                }
                _ => {}
            }
        }
        i += 1;
    }
    if !s[start..].trim().is_empty() {
        out.push(&s[start..]);
    }
    out
}

/// A type as written, without whitespace and without a trailing attribute
/// dictionary (`tensor<4xf32> {mhlo.sharding = ...}`).
fn type_text(s: &str) -> String {
    let s = s.trim();
    let s = match s.find('{') {
        Some(i) => &s[..i],
        None => s,
    };
    s.chars().filter(|c| !c.is_whitespace()).collect()
}

fn compare(what: &str, got: &[String], want: &[Ty]) -> Result<(), Fail> {
    let want: Vec<String> = want.iter().map(|t| t.to_string()).collect();
    if got != want.as_slice() {
        return Err(mismatch(format!("the fragment's {what} are ({}), but the call has ({})", got.join(", "), want.join(", "))));
    }
    Ok(())
}

/// Checks `text` against the call's input types and the op's output types;
/// returns it renamed to the private function `@symbol`.
pub fn check(text: &str, inputs: &[Ty], outputs: &[Ty], symbol: &str) -> Result<String, Fail> {
    if text.len() > MAX_TEXT {
        return Err(invalid(format!("the fragment is {} bytes; the limit is {MAX_TEXT}", text.len())));
    }
    let mut c = Cur { s: text.as_bytes(), i: 0 };
    if !c.eat("func.func") {
        return Err(invalid("the fragment must be one `func.func` (see plugins/ABI.md)"));
    }
    c.ws();
    let save = c.i;
    if !matches!(c.ident(), "public" | "private") {
        c.i = save;
    }
    if !c.eat("@") {
        return Err(invalid("expected `@name` after `func.func`"));
    }
    if c.peek() == Some(b'"') {
        c.string()?;
    } else if c.ident().is_empty() {
        return Err(invalid("expected a function name after `@`"));
    }
    c.ws();
    let sig_start = c.i;
    if c.peek() != Some(b'(') {
        return Err(invalid("expected the parameter list `(` after the function name"));
    }
    let params = c.group()?;
    let mut got_in = Vec::new();
    for p in split_top(params) {
        let Some((_, ty)) = p.split_once(':') else {
            return Err(invalid(format!("parameter {:?} has no type", p.trim())));
        };
        got_in.push(type_text(ty));
    }
    compare("parameter types", &got_in, inputs)?;

    let mut got_out = Vec::new();
    if c.eat("->") {
        c.ws();
        if c.peek() == Some(b'(') {
            got_out = split_top(c.group()?).into_iter().map(type_text).collect();
        } else {
            let start = c.i;
            if c.eat("tensor") && { c.ws(); c.peek() == Some(b'<') } {
                c.group()?;
            } else {
                return Err(invalid("expected a result type after `->`"));
            }
            got_out.push(type_text(&text[start..c.i]));
        }
    }
    compare("result types", &got_out, outputs)?;
    c.ws();
    if c.s[c.i..].starts_with(b"attributes") {
        return Err(invalid("function attributes are not allowed in a fragment"));
    }
    if c.peek() != Some(b'{') {
        return Err(invalid("expected the function body `{` after the signature"));
    }
    let body_start = c.i;
    c.group()?;
    let body = &text[body_start..c.i];
    c.ws();
    if c.i != text.len() {
        return Err(invalid(format!(
            "text after the function (byte {}): a fragment is exactly one `func.func`",
            c.i
        )));
    }
    check_body(body)?;
    Ok(format!("func.func private @{symbol}{}", &text[sig_start..]))
}

fn check_op(name: &str) -> Result<(), Fail> {
    if name == "func.return" {
        return Ok(());
    }
    match name.strip_prefix("stablehlo.") {
        Some(op) if DENIED.contains(&op) => Err(invalid(format!("op {name} is not allowed in a plugin fragment"))),
        Some(op) if !op.is_empty() => Ok(()),
        _ => Err(invalid(format!("op {name} is not allowed: fragments use only stablehlo.* ops and func.return"))),
    }
}

fn dotted(s: &str) -> bool {
    let mut parts = s.split('.');
    let first = parts.next().unwrap_or("");
    !first.is_empty()
        && first.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && s.contains('.')
        && s.split('.').all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
}

/// Scans the body: every op name (bare or quoted) must pass [`check_op`],
/// no `@symbol` may appear, and constants are bounded.
fn check_body(body: &str) -> Result<(), Fail> {
    let mut c = Cur { s: body.as_bytes(), i: 0 };
    while let Some(ch) = c.peek() {
        match ch {
            b'"' => {
                let s = c.string()?;
                if dotted(s) {
                    check_op(s)?;
                }
            }
            b'/' if c.s[c.i..].starts_with(b"//") => c.ws(),
            b'@' => return Err(invalid("symbol references (`@...`) are not allowed in a fragment's body")),
            // SSA values, block labels, attribute and type aliases: their
            // names are not ops.
            b'%' | b'^' | b'#' | b'!' => {
                c.i += 1;
                c.ident();
            }
            c0 if c0.is_ascii_alphabetic() || c0 == b'_' => {
                let start = c.i;
                let word = c.ident();
                if word == "dense" && c.peek() == Some(b'<') {
                    let lit = c.group()?;
                    if lit.len() > MAX_CONSTANT {
                        return Err(invalid(format!(
                            "a constant of {} bytes of text; the limit is {MAX_CONSTANT}",
                            lit.len()
                        )));
                    }
                } else if dotted(word) {
                    check_op(word)?;
                } else if word.is_empty() {
                    c.i = start + 1;
                }
            }
            c0 if c0.is_ascii_digit() => {
                // Numbers, including `1.5e+00` and `0x3F800000`.
                while c.peek().is_some_and(|d| d.is_ascii_alphanumeric() || d == b'.' || d == b'+' || d == b'-') {
                    c.i += 1;
                }
            }
            _ => c.i += 1,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hlo::Elem;

    fn t(dims: &[i64]) -> Ty {
        Ty::new(Elem::F32, dims)
    }

    const GOOD: &str = r#"func.func @f(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "stablehlo.add"(%a, %b) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %1 = stablehlo.constant dense<1.000000e+00> : tensor<4xf32>
  %2 = stablehlo.multiply %0, %1 : tensor<4xf32>
  "func.return"(%2) : (tensor<4xf32>) -> ()
}"#;

    #[test]
    fn accepts_and_renames() {
        let out = check(GOOD, &[t(&[4]), t(&[4])], &[t(&[4])], "p__f").unwrap();
        assert!(out.starts_with("func.func private @p__f(%a: tensor<4xf32>"), "{out}");
        let multi = "func.func public @g(%x: tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<f32>) {\n  \"func.return\"(%x, %x) : (tensor<2x3xf32>, tensor<2x3xf32>) -> ()\n}\n";
        check(multi, &[t(&[2, 3])], &[t(&[2, 3]), t(&[])], "s").unwrap();
    }

    #[test]
    fn signature_must_match() {
        let (k, m) = check(GOOD, &[t(&[3]), t(&[4])], &[t(&[4])], "s").unwrap_err();
        assert_eq!(k, PluginFailure::SignatureMismatch);
        assert!(m.contains("tensor<4xf32>, tensor<4xf32>") && m.contains("tensor<3xf32>"), "{m}");
        let (k, _) = check(GOOD, &[t(&[4]), t(&[4])], &[t(&[2, 2])], "s").unwrap_err();
        assert_eq!(k, PluginFailure::SignatureMismatch);
    }

    #[test]
    fn rejects_forbidden_text() {
        let cases = [
            (GOOD.replace("\"stablehlo.add\"", "\"stablehlo.custom_call\""), "stablehlo.custom_call is not allowed"),
            (GOOD.replace("stablehlo.multiply", "func.call @evil"), "not allowed"),
            (GOOD.replace("%1 = stablehlo.constant", "%1 = chlo.constant"), "chlo.constant is not allowed"),
            (format!("{GOOD}\nfunc.func @second() {{}}"), "text after the function"),
            (format!("module {{ {GOOD} }}"), "must be one `func.func`"),
            (GOOD.replace("dense<1.000000e+00>", &format!("dense<{}>", "1".repeat(MAX_CONSTANT + 1))), "constant"),
            (GOOD.replace("-> tensor<4xf32> {", "-> tensor<4xf32> attributes {x = 1} {"), "attributes"),
            (GOOD[..GOOD.len() - 1].to_string(), "unclosed"),
        ];
        for (text, want) in cases {
            let (k, m) = check(&text, &[t(&[4]), t(&[4])], &[t(&[4])], "s").unwrap_err();
            assert_eq!(k, PluginFailure::InvalidStableHlo, "{m}");
            assert!(m.contains(want), "{m:?} should mention {want:?}");
        }
        let big = "x".repeat(MAX_TEXT + 1);
        assert!(check(&big, &[], &[], "s").unwrap_err().1.contains("limit"));
    }
}
