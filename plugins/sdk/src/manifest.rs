//! The manifest, encoded as JSON at compile time (so it can live in a
//! `#[link_section]` static): `encode::<0>` measures it, `encode::<N>`
//! writes it. Strings are JSON-escaped, so any schema text is safe.

use torchtpu_plugin_abi::{ABI_MAJOR, ABI_MINOR};

/// One op as [`crate::plugin!`] declares it.
pub struct OpSpec {
    pub schema: &'static str,
    pub backward: Option<&'static str>,
    /// The op's loop iteration bound, if not the host's default.
    pub max_loop_iterations: Option<u32>,
}

/// A byte sink of capacity `N` that counts what does not fit.
pub struct Encoded<const N: usize> {
    pub buf: [u8; N],
    pub len: usize,
}

impl<const N: usize> Encoded<N> {
    const fn byte(&mut self, b: u8) {
        if self.len < N {
            self.buf[self.len] = b;
        }
        self.len += 1;
    }

    const fn raw(&mut self, s: &str) {
        let b = s.as_bytes();
        let mut i = 0;
        while i < b.len() {
            self.byte(b[i]);
            i += 1;
        }
    }

    /// A JSON string literal.
    const fn string(&mut self, s: &str) {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        self.byte(b'"');
        let b = s.as_bytes();
        let mut i = 0;
        while i < b.len() {
            let c = b[i];
            match c {
                b'"' | b'\\' => {
                    self.byte(b'\\');
                    self.byte(c);
                }
                0..=0x1f => {
                    self.raw("\\u00");
                    self.byte(HEX[(c >> 4) as usize]);
                    self.byte(HEX[(c & 15) as usize]);
                }
                _ => self.byte(c),
            }
            i += 1;
        }
        self.byte(b'"');
    }

    const fn number(&mut self, mut v: u32) {
        let mut digits = [0u8; 10];
        let mut n = 0;
        loop {
            digits[n] = b'0' + (v % 10) as u8;
            n += 1;
            v /= 10;
            if v == 0 {
                break;
            }
        }
        while n > 0 {
            n -= 1;
            self.byte(digits[n]);
        }
    }
}

/// The manifest JSON (see plugins/ABI.md, "The manifest").
pub const fn encode<const N: usize>(name: &str, version: &str, ops: &[OpSpec], policies: &[&str]) -> Encoded<N> {
    let mut e = Encoded { buf: [0u8; N], len: 0 };
    e.raw("{\"name\":");
    e.string(name);
    e.raw(",\"version\":");
    e.string(version);
    e.raw(",\"abi\":{\"major\":");
    e.number(ABI_MAJOR);
    e.raw(",\"minor\":");
    e.number(ABI_MINOR);
    e.raw("},\"ops\":[");
    let mut i = 0;
    while i < ops.len() {
        if i > 0 {
            e.byte(b',');
        }
        e.raw("{\"schema\":");
        e.string(ops[i].schema);
        if let Some(b) = ops[i].backward {
            e.raw(",\"backward\":");
            e.string(b);
        }
        if let Some(n) = ops[i].max_loop_iterations {
            e.raw(",\"max_loop_iterations\":");
            e.number(n);
        }
        e.byte(b'}');
        i += 1;
    }
    e.raw("],\"policies\":[");
    let mut i = 0;
    while i < policies.len() {
        if i > 0 {
            e.byte(b',');
        }
        e.string(policies[i]);
        i += 1;
    }
    e.raw("]}");
    e
}

#[cfg(test)]
mod tests {
    use super::*;
    use torchtpu_plugin_abi::{AbiVersion, Manifest, OpDecl};

    #[test]
    fn encodes_valid_escaped_json() {
        const OPS: &[OpSpec] = &[
            OpSpec { schema: "p::f(Tensor a, str mode=\"mean\\\\x\") -> Tensor", backward: Some("p::g"), max_loop_iterations: Some(4096) },
            OpSpec { schema: "p::g(Tensor grad, Tensor a, str mode) -> Tensor", backward: None, max_loop_iterations: None },
        ];
        const LEN: usize = encode::<0>("p", "1.2.3", OPS, &["p::cut"]).len;
        let e = encode::<LEN>("p", "1.2.3", OPS, &["p::cut"]);
        let m: Manifest = serde_json::from_slice(&e.buf).unwrap();
        assert_eq!(
            m,
            Manifest {
                name: "p".into(),
                version: "1.2.3".into(),
                abi: AbiVersion::CURRENT,
                ops: vec![
                    OpDecl { schema: OPS[0].schema.into(), backward: Some("p::g".into()), max_loop_iterations: Some(4096) },
                    OpDecl { schema: OPS[1].schema.into(), backward: None, max_loop_iterations: None },
                ],
                policies: vec!["p::cut".into()],
            }
        );
    }

    #[test]
    fn numbers_and_control_characters() {
        let e = encode::<256>("n", "v\n", &[], &[]);
        let text = std::str::from_utf8(&e.buf[..e.len]).unwrap();
        assert!(text.contains("\"v\\u000a\""), "{text}");
        assert!(text.contains(&format!("\"major\":{ABI_MAJOR},\"minor\":{ABI_MINOR}")), "{text}");
    }
}
