//! The disk tier's file format: one file per key, `<dir>/<key hex>.ttpu`,
//! all integers little-endian:
//!
//! | bytes | content |
//! |---|---|
//! | 8 | magic `TTPUPRG1` |
//! | 4 | format version (`u32`, currently 1) |
//! | 8 | payload length (`u64`) |
//! | 32 | SHA-256 of the payload |
//! | n | payload: `u64` executable length, the executable ([`Executable::serialize`]), the graph summary as JSON |
//!
//! Writing files, and what is done with a damaged one, belong to the cache
//! (`program.rs`).
//!
//! [`Executable::serialize`]: crate::pjrt::Executable::serialize

use std::fs;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::{CacheKey, GraphSummary};

const MAGIC: &[u8; 8] = b"TTPUPRG1";
const FORMAT_VERSION: u32 = 1;
const HEADER_LEN: usize = 8 + 4 + 8 + 32;
pub(super) const EXTENSION: &str = "ttpu";
/// Disk entries whose summaries are read (newest first) on the first miss.
const DISK_SUMMARY_LIMIT: usize = 256;
/// A summary larger than this on disk is not a summary we wrote.
const SUMMARY_MAX_BYTES: u64 = 64 << 20;

pub(super) fn entry_path(dir: &Path, key: &CacheKey) -> PathBuf {
    dir.join(format!("{}.{EXTENSION}", key.hex()))
}

pub(super) fn encode_entry(executable: &[u8], summary: &GraphSummary) -> Vec<u8> {
    let json = summary.to_json();
    let mut payload = Vec::with_capacity(8 + executable.len() + json.len());
    payload.extend_from_slice(&(executable.len() as u64).to_le_bytes());
    payload.extend_from_slice(executable);
    payload.extend_from_slice(&json);
    let mut out = Vec::with_capacity(HEADER_LEN + payload.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    out.extend_from_slice(&Sha256::digest(&payload));
    out.extend_from_slice(&payload);
    out
}

/// The header's payload length, after checking magic and version.
fn check_header(header: &[u8]) -> std::result::Result<u64, String> {
    if header.len() < HEADER_LEN {
        return Err(format!("truncated: {} bytes, shorter than the {HEADER_LEN}-byte header", header.len()));
    }
    if &header[..8] != MAGIC {
        return Err("bad magic".to_string());
    }
    let version = u32::from_le_bytes(header[8..12].try_into().unwrap());
    if version != FORMAT_VERSION {
        return Err(format!("format version {version}, expected {FORMAT_VERSION}"));
    }
    Ok(u64::from_le_bytes(header[12..20].try_into().unwrap()))
}

/// Checks a whole file and splits its payload into the executable and the
/// graph summary.
pub(super) fn decode_entry(bytes: &[u8]) -> std::result::Result<(&[u8], GraphSummary), String> {
    let payload_len = check_header(bytes)?;
    let payload = &bytes[HEADER_LEN..];
    if payload_len != payload.len() as u64 {
        return Err(format!("header says {payload_len} payload bytes, the file has {}", payload.len()));
    }
    if Sha256::digest(payload).as_slice() != &bytes[20..HEADER_LEN] {
        return Err("checksum mismatch".to_string());
    }
    let (exe, summary) = split_payload(payload).ok_or("malformed payload")?;
    let summary = GraphSummary::from_json(summary).ok_or("unreadable graph summary")?;
    Ok((exe, summary))
}

fn split_payload(payload: &[u8]) -> Option<(&[u8], &[u8])> {
    let exe_len = usize::try_from(u64::from_le_bytes(payload.get(..8)?.try_into().ok()?)).ok()?;
    let rest = &payload[8..];
    (exe_len <= rest.len()).then(|| rest.split_at(exe_len))
}

/// Reads only the summary of a file (seeking past the executable). Not
/// checksummed: summaries only feed explanations, and a damaged file is
/// caught when its program is loaded.
fn read_summary(path: &Path) -> Option<GraphSummary> {
    let mut f = fs::File::open(path).ok()?;
    let mut head = [0u8; HEADER_LEN + 8];
    f.read_exact(&mut head).ok()?;
    let payload_len = check_header(&head).ok()?;
    let exe_len = u64::from_le_bytes(head[HEADER_LEN..].try_into().ok()?);
    let json_len = payload_len.checked_sub(8)?.checked_sub(exe_len)?;
    if json_len > SUMMARY_MAX_BYTES {
        return None;
    }
    f.seek(SeekFrom::Current(i64::try_from(exe_len).ok()?)).ok()?;
    let mut json = Vec::with_capacity(json_len as usize);
    f.take(json_len).read_to_end(&mut json).ok()?;
    GraphSummary::from_json(&json)
}

/// The summaries of the newest disk entries, oldest first.
pub(super) fn scan_disk_summaries(dir: &Path) -> Vec<(CacheKey, GraphSummary)> {
    let Ok(entries) = fs::read_dir(dir) else { return Vec::new() };
    let mut files: Vec<(std::time::SystemTime, CacheKey, PathBuf)> = entries
        .filter_map(|e| {
            let e = e.ok()?;
            let path = e.path();
            if path.extension()? != EXTENSION {
                return None;
            }
            let key = CacheKey::from_hex(path.file_stem()?.to_str()?)?;
            let modified = e.metadata().ok()?.modified().ok()?;
            Some((modified, key, path))
        })
        .collect();
    files.sort_by_key(|f| std::cmp::Reverse(f.0));
    files.truncate(DISK_SUMMARY_LIMIT);
    files.reverse();
    files.into_iter().filter_map(|(_, key, path)| Some((key, read_summary(&path)?))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::summary::tests::summary;

    #[test]
    fn entry_round_trip_and_damage() {
        let s = summary("aten::add.Tensor");
        let exe = b"not really an executable".to_vec();
        let file = encode_entry(&exe, &s);
        assert_eq!(&file[..8], b"TTPUPRG1");
        assert_eq!(file.len(), HEADER_LEN + 8 + exe.len() + s.to_json().len());
        let (e, back) = decode_entry(&file).unwrap();
        assert_eq!((e, back), (&exe[..], s.clone()));

        let mut flipped = file.clone();
        flipped[HEADER_LEN + 10] ^= 1;
        assert_eq!(decode_entry(&flipped).unwrap_err(), "checksum mismatch");
        assert!(decode_entry(&file[..file.len() - 1]).unwrap_err().contains("payload bytes"));
        assert!(decode_entry(&file[..10]).unwrap_err().contains("truncated"));
        let mut magic = file.clone();
        magic[0] = b'X';
        assert_eq!(decode_entry(&magic).unwrap_err(), "bad magic");
        let mut version = file.clone();
        version[8] = 2;
        assert!(decode_entry(&version).unwrap_err().contains("format version 2"));
    }

    #[test]
    fn summary_is_read_without_the_executable() {
        let dir = std::env::temp_dir().join(format!("ttpu-cache-unit-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let s = summary("aten::mm");
        let key = CacheKey::new("prog", b"", "plugin");
        let path = entry_path(&dir, &key);
        fs::write(&path, encode_entry(&[7u8; 1000], &s)).unwrap();
        fs::write(dir.join("unrelated.ttpu"), b"x").unwrap();
        assert_eq!(read_summary(&path), Some(s.clone()));
        assert_eq!(scan_disk_summaries(&dir), vec![(key, s)]);
        fs::remove_dir_all(&dir).unwrap();
    }
}
