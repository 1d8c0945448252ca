//! The cache key: a SHA-256 over a program's text, compile options and plugin.

use std::fmt;

use sha2::{Digest, Sha256};

/// Identifies a compiled program: the SHA-256 (lowercase hex) of its StableHLO
/// text, its compile options and the plugin that compiles it.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct CacheKey(String);

impl CacheKey {
    /// `plugin_identity` must change whenever executables stop being
    /// interchangeable: the plugin path and its platform version, for example.
    pub fn new(program_text: &str, compile_options: &[u8], plugin_identity: &str) -> CacheKey {
        let mut h = Sha256::new();
        h.update(b"torchtpu program v1\0");
        // Length prefixes keep ("ab", "c") and ("a", "bc") apart.
        for part in [program_text.as_bytes(), compile_options, plugin_identity.as_bytes()] {
            h.update((part.len() as u64).to_le_bytes());
            h.update(part);
        }
        CacheKey(to_hex(&h.finalize()))
    }

    pub fn hex(&self) -> &str {
        &self.0
    }

    /// The key a disk file name stands for, if it is one of ours.
    pub(super) fn from_hex(s: &str) -> Option<CacheKey> {
        (s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))).then(|| CacheKey(s.to_string()))
    }
}

impl fmt::Display for CacheKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn to_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[(b >> 4) as usize] as char);
        s.push(DIGITS[(b & 15) as usize] as char);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_separates_fields() {
        let a = CacheKey::new("ab", b"c", "p");
        assert_eq!(a.hex().len(), 64);
        assert_ne!(a, CacheKey::new("a", b"bc", "p"));
        assert_ne!(a, CacheKey::new("ab", b"c", "q"));
        assert_eq!(a, CacheKey::new("ab", b"c", "p"));
        assert_eq!(CacheKey::from_hex(a.hex()), Some(a));
    }

    #[test]
    fn sha256_matches_a_known_vector() {
        // FIPS 180-2 test vector for "abc", to pin the hex encoding.
        assert_eq!(to_hex(&Sha256::digest(b"abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    }
}
