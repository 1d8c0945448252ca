//! The tokenizer of plugin fragments: MLIR's lexical rules for the subset a
//! fragment may use. It handles what a text scan gets wrong: string escapes
//! are decoded (so a name is checked as MLIR will read it), `//` comments
//! are skipped wherever they appear, and anything else outside the grammar
//! (`{-#` metadata, stray bytes, non-ASCII outside strings) is refused.

use super::{invalid, Fail};

/// One token. Names carry their text without the sigil.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tok {
    /// `%name`: an SSA value.
    Value(String),
    /// `^name`: a block label.
    Block(String),
    /// `@name` or `@"name"`: a symbol reference.
    Symbol(String),
    /// `#name`: an attribute alias or dialect attribute.
    Hash(String),
    /// `!name`: a type alias or dialect type.
    Bang(String),
    /// A bare identifier: `stablehlo`, `tensor`, `x4xf32`, `dense`.
    Ident(String),
    /// A decimal or hexadecimal integer, as written.
    Int(String),
    /// A decimal float, as written: `1.5`, `1.0e-05`.
    Float(String),
    /// A string literal, its escapes decoded.
    Str(Vec<u8>),
    /// Punctuation: `( ) [ ] { } < > , : = -> ? * + -`.
    Punct(&'static str),
}

/// A token and the byte offset it starts at.
#[derive(Debug, Clone)]
pub struct Token {
    pub tok: Tok,
    pub at: usize,
}

/// Where byte `at` of `text` is, as `line L, column C`.
pub fn position(text: &str, at: usize) -> String {
    let before = &text.as_bytes()[..at.min(text.len())];
    let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
    let col = before.iter().rev().take_while(|&&b| b != b'\n').count() + 1;
    format!("line {line}, column {col}")
}

fn suffix_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || b"$._-".contains(&c)
}

fn bare_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || b"$._".contains(&c)
}

const PUNCT: &[&str] = &["->", "(", ")", "[", "]", "{", "}", "<", ">", ",", ":", "=", "?", "*", "+", "-"];

/// Splits `text` into at most `max_tokens` tokens.
pub fn tokens(text: &str, max_tokens: usize) -> Result<Vec<Token>, Fail> {
    let s = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    let err = |at: usize, what: String| invalid(format!("{what} at {}", position(text, at)));
    while i < s.len() {
        let c = s[i];
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        if s[i..].starts_with(b"//") {
            while i < s.len() && s[i] != b'\n' {
                i += 1;
            }
            continue;
        }
        if out.len() >= max_tokens {
            return Err(invalid(format!("the fragment has more than {max_tokens} tokens (the limit)")));
        }
        let at = i;
        let tok = match c {
            b'%' | b'^' | b'@' | b'#' | b'!' => {
                i += 1;
                let name = if c == b'@' && s.get(i) == Some(&b'"') {
                    let (bytes, next) = string(text, i)?;
                    i = next;
                    String::from_utf8_lossy(&bytes).into_owned()
                } else {
                    let start = i;
                    while i < s.len() && suffix_char(s[i]) {
                        i += 1;
                    }
                    text[start..i].to_string()
                };
                if name.is_empty() {
                    return Err(err(at, format!("'{}' without a name", c as char)));
                }
                match c {
                    b'%' => Tok::Value(name),
                    b'^' => Tok::Block(name),
                    b'@' => Tok::Symbol(name),
                    b'#' => Tok::Hash(name),
                    _ => Tok::Bang(name),
                }
            }
            b'"' => {
                let (bytes, next) = string(text, i)?;
                i = next;
                Tok::Str(bytes)
            }
            c if c.is_ascii_alphabetic() || c == b'_' => {
                let start = i;
                while i < s.len() && bare_char(s[i]) {
                    i += 1;
                }
                Tok::Ident(text[start..i].to_string())
            }
            c if c.is_ascii_digit() => {
                let start = i;
                if s[i..].starts_with(b"0x") && s.get(i + 2).is_some_and(|d| d.is_ascii_hexdigit()) {
                    i += 2;
                    while i < s.len() && s[i].is_ascii_hexdigit() {
                        i += 1;
                    }
                    Tok::Int(text[start..i].to_string())
                } else {
                    while i < s.len() && s[i].is_ascii_digit() {
                        i += 1;
                    }
                    if s.get(i) == Some(&b'.') {
                        i += 1;
                        while i < s.len() && s[i].is_ascii_digit() {
                            i += 1;
                        }
                        if matches!(s.get(i), Some(b'e' | b'E')) {
                            let mut j = i + 1;
                            if matches!(s.get(j), Some(b'+' | b'-')) {
                                j += 1;
                            }
                            if s.get(j).is_some_and(|d| d.is_ascii_digit()) {
                                i = j;
                                while i < s.len() && s[i].is_ascii_digit() {
                                    i += 1;
                                }
                            }
                        }
                        Tok::Float(text[start..i].to_string())
                    } else {
                        Tok::Int(text[start..i].to_string())
                    }
                }
            }
            _ => match PUNCT.iter().find(|p| s[i..].starts_with(p.as_bytes())) {
                Some(p) => {
                    i += p.len();
                    Tok::Punct(p)
                }
                None => {
                    let ch = text[i..].chars().next().unwrap_or('?');
                    return Err(err(at, format!("unexpected character {ch:?}")));
                }
            },
        };
        out.push(Token { tok, at });
    }
    Ok(out)
}

/// Decodes the string literal whose `"` is at byte `at`, as MLIR does:
/// `\"`, `\\`, `\n`, `\t` and `\XX` (two hex digits); a raw newline ends the
/// line and is an error. Returns the bytes and the offset after the close.
fn string(text: &str, at: usize) -> Result<(Vec<u8>, usize), Fail> {
    let s = text.as_bytes();
    let mut out = Vec::new();
    let mut i = at + 1;
    let unterminated = || invalid(format!("unterminated string literal at {}", position(text, at)));
    loop {
        let c = *s.get(i).ok_or_else(unterminated)?;
        match c {
            b'"' => return Ok((out, i + 1)),
            b'\n' | b'\r' => return Err(unterminated()),
            b'\\' => {
                let e = *s.get(i + 1).ok_or_else(unterminated)?;
                match e {
                    b'"' | b'\\' => {
                        out.push(e);
                        i += 2;
                    }
                    b'n' => {
                        out.push(b'\n');
                        i += 2;
                    }
                    b't' => {
                        out.push(b'\t');
                        i += 2;
                    }
                    _ => {
                        let hex = s.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok());
                        match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                            Some(b) if hex.is_some_and(|h| h.bytes().all(|d| d.is_ascii_hexdigit())) => {
                                out.push(b);
                                i += 3;
                            }
                            _ => return Err(invalid(format!("unknown escape in a string literal at {}", position(text, i)))),
                        }
                    }
                }
            }
            _ => {
                out.push(c);
                i += 1;
            }
        }
    }
}

/// A string literal that MLIR reads back as `bytes`: printable ASCII as is,
/// everything else as `\XX`.
pub fn quote(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() + 2);
    out.push('"');
    for &b in bytes {
        if (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\' {
            out.push(b as char);
        } else {
            out.push_str(&format!("\\{b:02X}"));
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(s: &str) -> Vec<Tok> {
        tokens(s, 1000).unwrap().into_iter().map(|t| t.tok).collect()
    }

    #[test]
    fn escapes_decode_as_mlir_reads_them() {
        assert_eq!(toks(r#""stablehlo.custom\5Fcall""#), vec![Tok::Str(b"stablehlo.custom_call".to_vec())]);
        assert_eq!(toks(r#""a\"b\\c\n""#), vec![Tok::Str(b"a\"b\\c\n".to_vec())]);
        assert!(tokens(r#""\q""#, 10).unwrap_err().1.contains("escape"));
        assert!(tokens("\"abc\ndef\"", 10).unwrap_err().1.contains("unterminated"));
        assert_eq!(quote(b"a\"\n_"), r#""a\22\0A_""#);
    }

    #[test]
    fn comments_hide_nothing_from_the_parser() {
        // A `}` inside a comment is no bracket; a `//` inside a string is no comment.
        assert_eq!(toks("{ // }\n}"), vec![Tok::Punct("{"), Tok::Punct("}")]);
        assert_eq!(toks(r#""//x" }"#), vec![Tok::Str(b"//x".to_vec()), Tok::Punct("}")]);
    }

    #[test]
    fn numbers_and_dimensions() {
        assert_eq!(toks("4x8xf32"), vec![Tok::Int("4".into()), Tok::Ident("x8xf32".into())]);
        assert_eq!(toks("0x3F800000 1.5e-05 -2"), vec![
            Tok::Int("0x3F800000".into()),
            Tok::Float("1.5e-05".into()),
            Tok::Punct("-"),
            Tok::Int("2".into())
        ]);
        assert_eq!(toks("%a#1 ^bb0 @\"x y\" -> #stablehlo.gather"), vec![
            Tok::Value("a".into()),
            Tok::Hash("1".into()),
            Tok::Block("bb0".into()),
            Tok::Symbol("x y".into()),
            Tok::Punct("->"),
            Tok::Hash("stablehlo.gather".into())
        ]);
        assert!(tokens("{-# x #-}", 10).unwrap_err().1.contains("'#' without a name"));
        assert!(tokens("a é", 10).unwrap_err().1.contains("unexpected character 'é' at line 1, column 3"));
        assert!(tokens("a b c", 2).unwrap_err().1.contains("more than 2 tokens"));
    }
}
