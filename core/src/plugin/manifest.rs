//! Reading and checking a plugin's manifest: the JSON in the module's
//! `torchtpu.manifest` custom section, read without compiling the module.

use torchtpu_plugin_abi::{Manifest, ABI_MAJOR, ABI_MINOR, MANIFEST_SECTION};

use crate::ops::{ArgType, Schema};

/// The argument types a plugin op may take: tensors, and attributes the
/// lowering request can carry as JSON.
fn allowed_arg(ty: &ArgType) -> bool {
    matches!(
        ty,
        ArgType::Tensor
            | ArgType::Int
            | ArgType::IntList(_)
            | ArgType::Float
            | ArgType::Bool
            | ArgType::Str
            | ArgType::Scalar
            | ArgType::ScalarType
    )
}

/// Namespaces a plugin may not take: its ops would pose as built-in ones.
/// These are PyTorch's (and its usual companions') op namespaces, which the
/// runtime cannot see from here; at load the host also refuses every
/// namespace the op registry already uses, and the PyTorch frontend every
/// namespace its dispatcher already knows.
pub const RESERVED: &[&str] = &[
    "aten", "prim", "prims", "torch", "torchtpu", "tpu", "c10d", "c10d_functional", "_c10d_functional",
    "_c10d_functional_autograd", "_dtensor", "quantized", "_quantized", "quantized_decomposed", "quantization",
    "profiler", "cuda", "cudnn", "mps", "xpu", "mkldnn", "mkldnn_prepacked", "mkl", "onednn", "fbgemm",
    "xnnpack", "_test", "xla", "onnx", "inductor", "inductor_prims", "debugprims", "rngprims", "higher_order",
    "sparse", "nn", "autograd", "_native", "_native_aot", "debug_mode_ops", "export", "_export", "fsdp",
    "symm_mem", "functorch", "_functorch", "triton", "torchvision", "torchaudio", "torchao",
];

/// A checked manifest with its parsed op schemas.
#[derive(Debug, Clone)]
pub struct Checked {
    pub manifest: Manifest,
    pub schemas: Vec<Schema>,
}

/// An unsigned LEB128 number (a size or a count) at `b[*i..]`, at most 35
/// bits; advances `i` past it.
pub(crate) fn leb(b: &[u8], i: &mut usize) -> Result<usize, String> {
    let (mut v, mut shift) = (0u64, 0);
    loop {
        let byte = *b.get(*i).ok_or("truncated section header")?;
        *i += 1;
        v |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return usize::try_from(v).map_err(|_| "section size overflows".to_string());
        }
        shift += 7;
        if shift > 35 {
            return Err("malformed LEB128 size".into());
        }
    }
}

/// The custom sections of a wasm binary, by name.
fn custom_sections(wasm: &[u8]) -> Result<Vec<(&str, &[u8])>, String> {
    let mut out = Vec::new();
    for (id, body) in sections(wasm)? {
        if id == 0 {
            let mut j = 0;
            let n = leb(body, &mut j)?;
            let name_end = j.checked_add(n).filter(|&e| e <= body.len()).ok_or("a custom section name runs past its section")?;
            let name = std::str::from_utf8(&body[j..name_end]).map_err(|_| "a custom section name is not UTF-8")?;
            out.push((name, &body[name_end..]));
        }
    }
    Ok(out)
}

/// The sections of a wasm binary: (id, contents). Only the section framing
/// is parsed (the module is validated when it is compiled).
pub(crate) fn sections(wasm: &[u8]) -> Result<Vec<(u8, &[u8])>, String> {
    if wasm.len() < 8 || &wasm[..4] != b"\0asm" {
        return Err("not a WebAssembly module (no \\0asm header)".into());
    }
    if wasm[4..8] != [1, 0, 0, 0] {
        return Err("not a WebAssembly core module (version is not 1; components are not plugins)".into());
    }
    let mut out = Vec::new();
    let mut i = 8;
    while i < wasm.len() {
        let id = wasm[i];
        i += 1;
        let size = leb(wasm, &mut i)?;
        let end = i.checked_add(size).filter(|&e| e <= wasm.len()).ok_or("a section runs past the end of the file")?;
        out.push((id, &wasm[i..end]));
        i = end;
    }
    Ok(out)
}

/// Reads the manifest section of `wasm`. Errors are for the caller to
/// attribute to the file.
pub fn read(wasm: &[u8]) -> Result<Checked, String> {
    let sections = custom_sections(wasm)?;
    let mut found = sections.iter().filter(|(n, _)| *n == MANIFEST_SECTION);
    let data = found.next().map(|(_, d)| *d).ok_or_else(|| {
        format!("no `{MANIFEST_SECTION}` custom section: not a torchtpu plugin (see plugins/ABI.md)")
    })?;
    if found.next().is_some() {
        return Err(format!("more than one `{MANIFEST_SECTION}` custom section"));
    }
    let text = std::str::from_utf8(data).map_err(|_| "the manifest is not UTF-8".to_string())?;
    let manifest: Manifest = serde_json::from_str(text).map_err(|e| format!("malformed manifest: {e}"))?;
    check(manifest)
}

fn valid_name(s: &str) -> bool {
    let mut cs = s.chars();
    matches!(cs.next(), Some(c) if c.is_ascii_lowercase() || c == '_')
        && cs.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// Checks the manifest's version, names and schemas.
pub fn check(manifest: Manifest) -> Result<Checked, String> {
    let abi = manifest.abi;
    if abi.major != ABI_MAJOR || abi.minor > ABI_MINOR {
        return Err(format!(
            "built for plugin ABI {}.{}, but this runtime implements {ABI_MAJOR}.{ABI_MINOR} \
             (a plugin must have the same major and at most the same minor version); rebuild it \
             against this torchtpu's plugin SDK",
            abi.major, abi.minor
        ));
    }
    let name = &manifest.name;
    if !valid_name(name) {
        return Err(format!("plugin name {name:?} must match [a-z_][a-z0-9_]*"));
    }
    if RESERVED.contains(&name.as_str()) {
        return Err(format!(
            "plugin name '{name}' is reserved: it is a namespace of PyTorch's or torchtpu's own ops, and a \
             plugin's ops would pose as them (see plugins/ABI.md)"
        ));
    }
    if manifest.ops.is_empty() && manifest.policies.is_empty() {
        return Err(format!("plugin '{name}' declares no ops and no policies"));
    }
    let prefix = format!("{name}::");
    let mut schemas = Vec::with_capacity(manifest.ops.len());
    for op in &manifest.ops {
        let schema = Schema::parse(&op.schema).map_err(|e| format!("op schema {:?}: {e}", op.schema))?;
        let local = schema.name.strip_prefix(&prefix).ok_or_else(|| {
            format!("op {} is outside the plugin's namespace (its name must start with {prefix})", schema.name)
        })?;
        if !valid_name(local.split('.').next().unwrap_or("")) {
            return Err(format!("op name {} must be {prefix}<[a-z_][a-z0-9_]*>[.overload]", schema.name));
        }
        if let Some(a) = schema.args.iter().find(|a| a.mutable) {
            return Err(format!("op {}: argument {} is mutated (Tensor(a!)); plugin ops are functional", schema.name, a.name));
        }
        if let Some(a) = schema.args.iter().find(|a| !allowed_arg(&a.ty) || (a.ty == ArgType::Tensor && a.optional)) {
            return Err(format!(
                "op {}: argument {} has a type plugin ops do not support (Tensor, int, int[], float, bool, \
                 str, Scalar and ScalarType are)",
                schema.name, a.name
            ));
        }
        if schema.returns.is_empty() || schema.returns.iter().any(|r| r != "Tensor") {
            return Err(format!("op {}: plugin ops return one or more Tensors, not {:?}", schema.name, schema.returns));
        }
        if schemas.iter().any(|s: &Schema| s.name == schema.name) {
            return Err(format!("op {} is declared twice", schema.name));
        }
        schemas.push(schema);
    }
    for (op, schema) in manifest.ops.iter().zip(&schemas) {
        let max = crate::plugin::fragment::MAX_LOOP_ITERATIONS;
        if let Some(n) = op.max_loop_iterations.filter(|&n| n == 0 || i64::from(n) > max) {
            return Err(format!("op {}: max_loop_iterations is {n}; it must be 1 to {max}", schema.name));
        }
        let Some(bw) = &op.backward else { continue };
        let b = schemas.iter().find(|s| &s.name == bw).ok_or_else(|| {
            format!("op {}: its backward {bw} is not an op of this plugin", schema.name)
        })?;
        // One gradient per tensor return, then the forward's arguments; one
        // gradient per tensor argument back.
        let want_args = schema.returns.len() + schema.args.len();
        let tensor_args = schema.args.iter().filter(|a| a.ty == ArgType::Tensor).count();
        if b.args.len() != want_args || b.returns.len() != tensor_args {
            return Err(format!(
                "op {}: its backward {bw} must take {want_args} arguments (a gradient per return, then the \
                 forward's arguments) and return {tensor_args} gradients, but takes {} and returns {}",
                schema.name,
                b.args.len(),
                b.returns.len()
            ));
        }
    }
    for p in &manifest.policies {
        let local = p.strip_prefix(&prefix).ok_or_else(|| format!("policy {p} is outside the namespace {prefix}"))?;
        if !valid_name(local) {
            return Err(format!("policy name {p} must be {prefix}<[a-z_][a-z0-9_]*>"));
        }
    }
    Ok(Checked { manifest, schemas })
}

#[cfg(test)]
mod tests {
    use super::*;
    use torchtpu_plugin_abi::{AbiVersion, OpDecl};

    fn manifest(ops: &[(&str, Option<&str>)], policies: &[&str]) -> Manifest {
        Manifest {
            name: "demo".into(),
            version: "1.0.0".into(),
            abi: AbiVersion::CURRENT,
            ops: ops.iter().map(|(s, b)| OpDecl { schema: s.to_string(), backward: b.map(String::from), max_loop_iterations: None }).collect(),
            policies: policies.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn accepts_a_well_formed_manifest() {
        let m = manifest(
            &[
                ("demo::f(Tensor a, Tensor b, float eps=1e-06) -> Tensor", Some("demo::f_backward")),
                ("demo::f_backward(Tensor grad, Tensor a, Tensor b, float eps) -> (Tensor, Tensor)", None),
            ],
            &["demo::cut"],
        );
        let c = check(m).unwrap();
        assert_eq!(c.schemas[0].args.len(), 3);
    }

    #[test]
    fn rejects_what_it_must() {
        let cases: &[(Manifest, &str)] = &[
            (Manifest { abi: AbiVersion { major: 2, minor: 0 }, ..manifest(&[], &["demo::p"]) }, "ABI 2.0"),
            (Manifest { abi: AbiVersion { major: 1, minor: 9 }, ..manifest(&[], &["demo::p"]) }, "ABI 1.9"),
            (Manifest { name: "Bad-Name".into(), ..manifest(&[], &["demo::p"]) }, "must match"),
            (Manifest { name: "aten".into(), ..manifest(&[], &["aten::p"]) }, "reserved"),
            (Manifest { name: "profiler".into(), ..manifest(&[], &["profiler::p"]) }, "reserved"),
            (Manifest { name: "_c10d_functional_autograd".into(), ..manifest(&[], &["_c10d_functional_autograd::p"]) }, "reserved"),
            (manifest(&[], &[]), "no ops and no policies"),
            (manifest(&[("other::f(Tensor a) -> Tensor", None)], &[]), "outside the plugin's namespace"),
            (manifest(&[("demo::f(Tensor(a!) a) -> Tensor(a!)", None)], &[]), "functional"),
            (manifest(&[("demo::f(Tensor[] a) -> Tensor", None)], &[]), "do not support"),
            (manifest(&[("demo::f(Tensor a) -> Tensor", Some("demo::g"))], &[]), "not an op of this plugin"),
            (
                manifest(
                    &[("demo::f(Tensor a) -> Tensor", Some("demo::g")), ("demo::g(Tensor grad) -> Tensor", None)],
                    &[],
                ),
                "must take 2 arguments",
            ),
            (manifest(&[], &["cut"]), "outside the namespace"),
            (
                Manifest {
                    ops: vec![OpDecl { max_loop_iterations: Some(0), ..manifest(&[("demo::f(Tensor a) -> Tensor", None)], &[]).ops[0].clone() }],
                    ..manifest(&[], &[])
                },
                "max_loop_iterations is 0",
            ),
            (manifest(&[("demo::f(Tensor a -> Tensor", None)], &[]), "op schema"),
        ];
        for (m, want) in cases {
            let e = check(m.clone()).unwrap_err();
            assert!(e.contains(want), "{e:?} should mention {want:?}");
        }
    }

    #[test]
    fn reads_the_custom_section() {
        let json = serde_json::to_string(&manifest(&[], &["demo::p"])).unwrap();
        let wat = format!("(module (@custom \"{MANIFEST_SECTION}\" \"{}\"))", json.replace('"', "\\\""));
        let wasm = wat::parse_str(&wat).unwrap();
        assert_eq!(read(&wasm).unwrap().manifest.policies, vec!["demo::p".to_string()]);
        let bare = wat::parse_str("(module)").unwrap();
        assert!(read(&bare).unwrap_err().contains("no `torchtpu.manifest` custom section"));
        assert!(read(b"not wasm").unwrap_err().contains("not a WebAssembly module"));
    }
}
