//! The layering of torchtpu-core, read from its sources: each top-level
//! module (a file or a directory under `core/src`) may use only modules of
//! its own layer or below, and the C ABI crate uses only core's public face
//! (root items and a few public modules), never `ops` or `pjrt` internals.
//!
//! References are `crate::<module>` paths (also `$crate::`, grouped
//! `crate::{a, b}` and root re-exports such as `crate::Runtime`) and
//! `super::` chains that climb to the crate root, found in non-test code:
//! comments, string literals and items under `#[cfg(test)]` (tests may use
//! any layer) are left out.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Core's layers, bottom to top. Modules in one layer may use each other.
const LAYERS: &[&[&str]] = &[
    &["error", "trace"],
    &["pjrt"],
    &["dtype"],
    &["shape"],
    &["hlo"],
    &["storage", "rng", "tensor", "view"],
    &["graph"],
    &["cache"],
    &["ops"],
    &["plugin"],
    &["collective"],
    &["runtime"],
];

/// The modules of core that the C ABI may name by path (besides root items).
const CAPI_MODULES: &[&str] = &["runtime", "plugin", "collective", "graph", "trace"];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&module))
}

// ---------------------------------------------------------------- lexing

/// `src` with comments removed and the contents of string and char literals
/// blanked; newlines are kept, so line numbers stay valid.
fn code_only(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = String::with_capacity(src.len());
    let keep_lines = |s: &[u8], out: &mut String| s.iter().filter(|&&c| c == b'\n').for_each(|_| out.push('\n'));
    let mut i = 0;
    while i < b.len() {
        let rest = &b[i..];
        if rest.starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if rest.starts_with(b"/*") {
            let (start, mut depth) = (i, 0);
            while i < b.len() {
                if b[i..].starts_with(b"/*") {
                    depth += 1;
                    i += 2;
                } else if b[i..].starts_with(b"*/") {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            keep_lines(&b[start..i], &mut out);
        } else if let Some(hashes) = raw_string_start(b, i) {
            // r"..." / r#"..."#: ends at a quote followed by as many hashes.
            let start = i;
            i += 2 + hashes;
            let close: Vec<u8> = std::iter::once(b'"').chain(std::iter::repeat(b'#').take(hashes)).collect();
            while i < b.len() && !b[i..].starts_with(&close) {
                i += 1;
            }
            i = (i + close.len()).min(b.len());
            out.push_str("\"\"");
            keep_lines(&b[start..i], &mut out);
        } else if b[i] == b'"' {
            let start = i;
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i = (i + 1).min(b.len());
            out.push_str("\"\"");
            keep_lines(&b[start..i], &mut out);
        } else if b[i] == b'\'' {
            // A char literal ('x', '\n', '\u{..}') or a lifetime ('a).
            let end = if b.get(i + 1) == Some(&b'\\') {
                // The escaped character may itself be a quote: '\''.
                b.get(i + 3..).and_then(|r| r.iter().position(|&c| c == b'\'')).map(|p| i + 4 + p)
            } else {
                let ch = src[i + 1..].chars().next().map_or(1, char::len_utf8);
                (b.get(i + 1 + ch) == Some(&b'\'')).then_some(i + 2 + ch)
            };
            match end {
                Some(e) => {
                    out.push_str("' '");
                    i = e;
                }
                None => {
                    out.push('\'');
                    i += 1;
                }
            }
        } else {
            let ch = src[i..].chars().next().unwrap();
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    out
}

/// The number of `#`s of a raw string literal starting at `i`, if one does.
fn raw_string_start(b: &[u8], i: usize) -> Option<usize> {
    if b[i] != b'r' || (i > 0 && is_ident(b[i - 1])) {
        return None;
    }
    let hashes = b[i + 1..].iter().take_while(|&&c| c == b'#').count();
    (b.get(i + 1 + hashes) == Some(&b'"')).then_some(hashes)
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

fn ident_at(s: &str, i: usize) -> &str {
    let n = s.as_bytes()[i..].iter().take_while(|&&c| is_ident(c)).count();
    &s[i..i + n]
}

fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && b[i].is_ascii_whitespace() {
        i += 1;
    }
    i
}

/// The index just past the bracket that closes the one at `open`.
fn matching(b: &[u8], open: usize) -> usize {
    let (o, c) = (b[open], match b[open] {
        b'{' => b'}',
        b'(' => b')',
        _ => b']',
    });
    let mut depth = 0;
    for (k, &x) in b.iter().enumerate().skip(open) {
        if x == o {
            depth += 1;
        } else if x == c {
            depth -= 1;
            if depth == 0 {
                return k + 1;
            }
        }
    }
    b.len()
}

/// Blanks every item under `#[cfg(test)]` (keeping newlines) and returns
/// the names of test-only modules declared as files (`mod tests;`).
fn drop_test_items(code: &str) -> (String, Vec<String>) {
    let mut out = code.to_string().into_bytes();
    let mut test_mods = Vec::new();
    let mut from = 0;
    while let Some(p) = code[from..].find("#[cfg(test)]").map(|p| p + from) {
        let b = code.as_bytes();
        let mut i = p + "#[cfg(test)]".len();
        // Further attributes of the same item.
        loop {
            i = skip_ws(b, i);
            if b.get(i) == Some(&b'#') {
                let open = i + b[i..].iter().position(|&c| c == b'[').unwrap_or(0);
                i = matching(b, open);
            } else {
                break;
            }
        }
        let semi = code[i..].find(';').map(|k| k + i).unwrap_or(b.len());
        let brace = code[i..].find('{').map(|k| k + i).unwrap_or(b.len());
        let end = if semi < brace {
            let words: Vec<&str> = code[i..semi].split_whitespace().collect();
            if let Some(k) = words.iter().position(|w| *w == "mod") {
                test_mods.extend(words.get(k + 1).map(|n| n.to_string()));
            }
            semi + 1
        } else {
            matching(b, brace)
        };
        for c in &mut out[p..end.min(b.len())] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
        from = end.min(b.len());
    }
    (String::from_utf8(out).unwrap(), test_mods)
}

/// The byte ranges of inline modules (`mod name { ... }`) in `code`.
fn inline_mods(code: &str) -> Vec<(usize, usize)> {
    let b = code.as_bytes();
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(p) = code[from..].find("mod ").map(|p| p + from) {
        from = p + 4;
        if p > 0 && is_ident(b[p - 1]) {
            continue;
        }
        let i = skip_ws(b, p + 4);
        let name = ident_at(code, i);
        let j = skip_ws(b, i + name.len());
        if !name.is_empty() && b.get(j) == Some(&b'{') {
            out.push((j, matching(b, j)));
        }
    }
    out
}

/// The first path segment of each element of a use tree at `i` (an ident,
/// or a `{...}` group), e.g. `{dtype::DType, shape}` gives dtype and shape.
fn first_segments(code: &str, i: usize) -> Vec<String> {
    let b = code.as_bytes();
    let i = skip_ws(b, i);
    if b.get(i) != Some(&b'{') {
        let id = ident_at(code, i);
        return if id.is_empty() { Vec::new() } else { vec![id.to_string()] };
    }
    let end = matching(b, i) - 1;
    let mut out = Vec::new();
    let (mut depth, mut start) = (0, i + 1);
    for k in i + 1..=end {
        match b[k] {
            b'{' => depth += 1,
            b'}' if depth > 0 => depth -= 1,
            b',' | b'}' if depth == 0 => {
                out.extend(first_segments(code, start));
                start = k + 1;
            }
            _ => {}
        }
    }
    out
}

/// Root-level names that non-test code of the module at `path` (`["ops",
/// "creation"]` for `ops/creation.rs`) refers to, with 1-based line
/// numbers: `crate::x`, `$crate::x` and `super::` chains reaching the root.
fn root_references(path: &[String], code: &str) -> Vec<(usize, String)> {
    let b = code.as_bytes();
    let inline = inline_mods(code);
    let line_of = |p: usize| code[..p].matches('\n').count() + 1;
    let mut out = Vec::new();
    for (p, _) in code.match_indices("crate::") {
        if p > 0 && is_ident(b[p - 1]) {
            continue;
        }
        for s in first_segments(code, p + "crate::".len()) {
            out.push((line_of(p), s));
        }
    }
    let mut p = 0;
    while let Some(q) = code[p..].find("super::").map(|q| q + p) {
        if q > 0 && (is_ident(b[q - 1]) || code[..q].ends_with("super::")) {
            p = q + 1;
            continue;
        }
        let mut k = q;
        let mut ups = 0;
        while code[k..].starts_with("super::") {
            ups += 1;
            k = skip_ws(b, k + "super::".len());
        }
        let depth = path.len() + inline.iter().filter(|&&(s, e)| s < q && q < e).count();
        if ups == depth {
            for s in first_segments(code, k) {
                out.push((line_of(q), s));
            }
        }
        p = k;
    }
    out
}

// ---------------------------------------------------------------- the crate

struct Source {
    rel: PathBuf,
    /// Module path below the crate root: `["ops", "creation"]`.
    path: Vec<String>,
    /// Non-test code only.
    code: String,
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

fn module_path(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel.with_extension("").iter().map(|c| c.to_string_lossy().into_owned()).collect();
    if parts.last().is_some_and(|l| l == "mod" || l == "lib") {
        parts.pop();
    }
    parts
}

/// Core's sources other than lib.rs, without test code and test-only files.
fn core_sources() -> Vec<Source> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut all = Vec::new();
    let mut test_mods: Vec<Vec<String>> = Vec::new();
    for f in files {
        let rel = f.strip_prefix(&src).unwrap().to_path_buf();
        let path = module_path(&rel);
        let (code, tests) = drop_test_items(&code_only(&fs::read_to_string(&f).unwrap()));
        test_mods.extend(tests.into_iter().map(|t| path.iter().cloned().chain([t]).collect()));
        all.push(Source { rel, path, code });
    }
    all.retain(|s| !s.path.is_empty() && !test_mods.iter().any(|t| s.path.starts_with(t)));
    all
}

/// What each name at core's root belongs to: modules, the root re-exports of
/// lib.rs (`Runtime` -> runtime), and exported macros (`bail_op` -> error).
fn root_names(sources: &[Source]) -> HashMap<String, String> {
    let mut names: HashMap<String, String> = HashMap::new();
    for s in sources {
        names.insert(s.path[0].clone(), s.path[0].clone());
        for (p, _) in s.code.match_indices("macro_rules!") {
            let i = skip_ws(s.code.as_bytes(), p + "macro_rules!".len());
            names.insert(ident_at(&s.code, i).to_string(), s.path[0].clone());
        }
    }
    let lib = code_only(&fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs")).unwrap());
    for stmt in lib.split(';').map(str::trim).filter_map(|s| s.strip_prefix("pub use ")) {
        let module = stmt.split("::").next().unwrap().trim().to_string();
        let items = match (stmt.find('{'), stmt.rfind('}')) {
            (Some(a), Some(z)) => stmt[a + 1..z].split(',').map(str::to_string).collect(),
            _ => vec![stmt.to_string()],
        };
        for item in items.iter().map(|i| i.trim()).filter(|i| !i.is_empty()) {
            let name = item.rsplit(" as ").next().unwrap().rsplit("::").next().unwrap().trim();
            names.insert(name.to_string(), module.clone());
        }
    }
    names
}

/// Every edge `from -> to` between top-level modules, with where it is.
fn edges(sources: &[Source], names: &HashMap<String, String>) -> (Vec<(String, String, String)>, Vec<String>) {
    let mut edges = Vec::new();
    let mut unknown = Vec::new();
    for s in sources {
        for (line, name) in root_references(&s.path, &s.code) {
            let at = format!("core/src/{}:{line}", s.rel.display());
            match names.get(&name) {
                Some(to) if *to != s.path[0] => edges.push((s.path[0].clone(), to.clone(), format!("{at}: crate::{name}"))),
                Some(_) => {}
                None => unknown.push(format!("{at}: crate::{name}")),
            }
        }
    }
    (edges, unknown)
}

#[test]
fn every_module_has_a_layer() {
    let sources = core_sources();
    let modules: BTreeSet<&str> = sources.iter().map(|s| s.path[0].as_str()).collect();
    let listed: BTreeSet<&str> = LAYERS.iter().flat_map(|l| l.iter().copied()).collect();
    assert_eq!(modules, listed, "core/src's top-level modules and LAYERS in this test differ: place new modules in a layer");
}

#[test]
fn core_depends_only_downwards() {
    let sources = core_sources();
    let names = root_names(&sources);
    let (edges, unknown) = edges(&sources, &names);
    assert!(unknown.is_empty(), "paths this test cannot place in a module:\n{}", unknown.join("\n"));

    // The scanner sees the edges it must see (or it would pass by being blind).
    let seen: HashSet<(&str, &str)> = edges.iter().map(|(a, b, _)| (a.as_str(), b.as_str())).collect();
    for known in [("runtime", "ops"), ("ops", "hlo"), ("tensor", "storage"), ("tensor", "rng"), ("plugin", "ops"), ("dtype", "pjrt")] {
        assert!(seen.contains(&known), "the scan found no {} -> {} edge; is it broken?", known.0, known.1);
    }

    let order: Vec<String> = LAYERS.iter().map(|l| l.join("/")).collect();
    let bad: Vec<String> = edges
        .iter()
        .filter(|(from, to, _)| layer_of(to) > layer_of(from))
        .map(|(from, to, at)| format!("{from} -> {to} (upwards), at {at}"))
        .collect();
    assert!(
        bad.is_empty(),
        "core's modules may use only their own layer or lower ones (bottom to top: {}):\n{}",
        order.join(", "),
        bad.join("\n")
    );
}

#[test]
fn strict_mode_takes_nothing_from_fused_mode() {
    let eager = core_sources().into_iter().find(|s| s.path == ["runtime", "eager"]).expect("runtime/eager.rs");
    let bad: Vec<usize> = eager.code.lines().enumerate().filter(|(_, l)| l.contains("fused::")).map(|(i, _)| i + 1).collect();
    assert!(bad.is_empty(), "core/src/runtime/eager.rs names fused-mode items at lines {bad:?}: share them through a neutral module");
}

#[test]
fn capi_uses_only_the_public_face_of_core() {
    let core = core_sources();
    let names = root_names(&core);
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../capi/src");
    let mut files = Vec::new();
    rust_files(&dir, &mut files);
    assert!(!files.is_empty(), "no sources under {}", dir.display());
    let mut bad = Vec::new();
    let mut seen = 0;
    for f in &files {
        // Test code included: capi's tests go through the same face.
        let code = code_only(&fs::read_to_string(f).unwrap());
        for (p, _) in code.match_indices("torchtpu_core::") {
            seen += 1;
            for s in first_segments(&code, p + "torchtpu_core::".len()) {
                let module = names.get(&s).map(String::as_str);
                let root_item = module.is_some() && s != module.unwrap();
                if !root_item && !CAPI_MODULES.contains(&s.as_str()) {
                    let line = code[..p].matches('\n').count() + 1;
                    bad.push(format!("capi/src/{}:{line}: torchtpu_core::{s}", f.strip_prefix(&dir).unwrap().display()));
                }
            }
        }
    }
    assert!(seen > 10, "the scan found only {seen} torchtpu_core paths in capi/src; is it broken?");
    assert!(
        bad.is_empty(),
        "capi may use core's root items and the modules {CAPI_MODULES:?}, never ops or pjrt internals:\n{}",
        bad.join("\n")
    );
}

// ------------------------------------------------------- the scanner itself

fn path(p: &str) -> Vec<String> {
    p.split("::").map(str::to_string).collect()
}

#[test]
fn scanner_skips_comments_strings_and_tests() {
    let src = r##"use crate::dtype::DType; // crate::runtime
/* crate::ops /* nested */ crate::ops */
let s = "crate::runtime \" crate::ops";
let r = r#"crate::runtime"#;
let c = '"'; let q = '\''; let l: &'static str = "";
use crate::{shape::{self, Dims}, error::Result};
#[cfg(test)]
#[allow(unused)]
mod tests { use crate::runtime::Runtime; fn f() { {} } }
#[cfg(test)]
mod more;
$crate::hlo::Elem
"##;
    let (code, test_mods) = drop_test_items(&code_only(src));
    assert_eq!(test_mods, vec!["more"]);
    assert_eq!(code.lines().count(), src.lines().count());
    let refs = root_references(&path("ops::creation"), &code);
    let want = [(1, "dtype"), (6, "shape"), (6, "error"), (12, "hlo")];
    assert_eq!(refs, want.map(|(l, s)| (l, s.to_string())));
}

#[test]
fn scanner_resolves_super_chains() {
    let src = "use super::super::runtime::Runtime;\nuse super::Cx;\npub mod env {\n    use super::super::super::tensor::Value;\n}\n";
    // From ops/creation.rs, `super::super` is the crate root; `super` is ops.
    let refs = root_references(&path("ops::creation"), &code_only(src));
    assert_eq!(refs, vec![(1, "runtime".to_string()), (4, "tensor".to_string())]);
    // From a top-level file, one `super` is the root.
    let refs = root_references(&path("dtype"), &code_only("use super::pjrt::ElementType;\nuse super::{shape, hlo::Elem};"));
    let want = [(1, "pjrt"), (2, "shape"), (2, "hlo")];
    assert_eq!(refs, want.map(|(l, s)| (l, s.to_string())));
}
