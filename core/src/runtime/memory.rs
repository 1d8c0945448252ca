//! Device memory: the runtime's accounting of its buffers
//! ([`Runtime::memory_stats`]) and the device's total and free memory
//! ([`Runtime::memory_info`]).
//!
//! Where the numbers come from:
//! - the accounting is our own: every live PJRT buffer counted at the logical
//!   size of its contents (see [`crate::pjrt::memory`]);
//! - total and free come from the plugin (`PJRT_Device_MemoryStats`: its
//!   `bytes_limit`, and that minus its `bytes_in_use`) where it knows them,
//!   as libtpu and the CUDA plugin do;
//! - the XLA CPU plugin knows neither, and its devices are the host's memory,
//!   so for the `cpu` platform they are the host's physical memory as this
//!   process may use it: `/proc/meminfo`'s MemTotal and MemAvailable, lowered
//!   to the memory limit (minus the usage) of every cgroup the process is in.
//!   All CPU devices share that memory, so each reports all of it.

use std::fs;
use std::path::{Path, PathBuf};

use super::Runtime;
use crate::error::{Error, Result};
use crate::pjrt::MemorySnapshot;

/// Where [`MemoryInfo`]'s numbers come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemorySource {
    /// The PJRT plugin's `PJRT_Device_MemoryStats`.
    Plugin,
    /// The host's physical memory and cgroup limits (the `cpu` platform).
    Host,
}

/// A device's memory, like `cudaMemGetInfo`: what it has and what is free
/// now (for every user of the device, not just this process's tensors).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryInfo {
    pub total: i64,
    pub free: i64,
    pub source: MemorySource,
}

impl Runtime {
    /// A consistent copy of `device`'s buffer accounting.
    pub fn memory_stats(&self, device: usize) -> Result<MemorySnapshot> {
        let d = self.device(device as i64)?;
        Ok(self.client.memory(d).snapshot())
    }

    /// Zeroes `device`'s cumulative totals (bytes and buffers allocated and
    /// freed, OOMs); what is live and the peaks stay.
    pub fn reset_accumulated_memory(&self, device: usize) -> Result<()> {
        let d = self.device(device as i64)?;
        self.client.memory(d).reset_accumulated();
        Ok(())
    }

    /// The total and free memory of `device` (see the module docs for the
    /// source). UNIMPLEMENTED for a plugin other than the CPU one that
    /// reports no memory limit.
    pub fn memory_info(&self, device: usize) -> Result<MemoryInfo> {
        let d = self.device(device as i64)?;
        let plugin = match self.client.device_memory_stats(d) {
            Ok(s) => s.bytes_limit.filter(|&l| l > 0).map(|limit| (limit, s.bytes_in_use)),
            Err(e) if e.code() == crate::Code::Unimplemented => None,
            Err(e) => return Err(e),
        };
        if let Some((limit, in_use)) = plugin {
            let free = limit.saturating_sub(in_use).clamp(0, limit);
            return Ok(MemoryInfo { total: limit, free, source: MemorySource::Plugin });
        }
        if self.platform_name() == "cpu" {
            let (total, free) = host_memory()?;
            return Ok(MemoryInfo { total, free, source: MemorySource::Host });
        }
        Err(Error::Unimplemented(format!(
            "the {} PJRT plugin reports no memory limit for tpu:{d} (PJRT_Device_MemoryStats has no bytes_limit)",
            self.platform_name()
        )))
    }
}

/// The host's memory as this process may use it: `(total, free)` bytes.
fn host_memory() -> Result<(i64, i64)> {
    const MEMINFO: &str = "/proc/meminfo";
    let io = |path: &str, source: std::io::Error| Error::Io { path: path.into(), source: std::sync::Arc::new(source) };
    let text = fs::read_to_string(MEMINFO).map_err(|e| io(MEMINFO, e))?;
    let (total, available) = parse_meminfo(&text).ok_or_else(|| {
        Error::Unimplemented(format!("{MEMINFO} has no MemTotal and MemAvailable lines (Linux 3.14 or later has them)"))
    })?;
    let limits = match fs::read_to_string("/proc/self/cgroup") {
        Ok(cg) => cgroup_memory_files(&cg, Path::new("/sys/fs/cgroup")).iter().filter_map(read_limit).collect(),
        Err(_) => Vec::new(),
    };
    let (total, free) = limit_host_memory(total, available, &limits);
    let to_i64 = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    Ok((to_i64(total), to_i64(free)))
}

/// MemTotal and MemAvailable of `/proc/meminfo` text, in bytes.
fn parse_meminfo(text: &str) -> Option<(u64, u64)> {
    let field = |name: &str| {
        text.lines().find_map(|line| {
            let rest = line.strip_prefix(name)?.strip_prefix(':')?;
            let mut words = rest.split_whitespace();
            let value: u64 = words.next()?.parse().ok()?;
            match words.next() {
                Some("kB") => value.checked_mul(1024),
                None => Some(value),
                Some(_) => None,
            }
        })
    };
    Some((field("MemTotal")?, field("MemAvailable")?))
}

/// One cgroup's memory limit file and usage file.
#[derive(Debug, PartialEq, Eq)]
struct CgroupFiles {
    limit: PathBuf,
    usage: PathBuf,
}

/// The memory files of each cgroup the process is in and of every ancestor
/// (a parent's limit binds its children too), from `/proc/self/cgroup`
/// text: cgroup v2 (`0::/path`, `memory.max`) and the v1 memory controller
/// (`N:...memory...:/path`, `memory.limit_in_bytes`), at their usual mount
/// points under `root`.
fn cgroup_memory_files(proc_self_cgroup: &str, root: &Path) -> Vec<CgroupFiles> {
    let mut out = Vec::new();
    for line in proc_self_cgroup.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next()) else { continue };
        let (mount, limit, usage) = if id == "0" && controllers.is_empty() {
            (root.to_path_buf(), "memory.max", "memory.current")
        } else if controllers.split(',').any(|c| c == "memory") {
            (root.join("memory"), "memory.limit_in_bytes", "memory.usage_in_bytes")
        } else {
            continue;
        };
        // `..` never appears in these paths; refusing it keeps the walk
        // below the mount point.
        if path.split('/').any(|c| c == "..") {
            continue;
        }
        let mut dir = mount.join(path.trim_start_matches('/'));
        loop {
            out.push(CgroupFiles { limit: dir.join(limit), usage: dir.join(usage) });
            if dir == mount || !dir.pop() {
                break;
            }
        }
    }
    out
}

/// `(limit, usage)` of one cgroup, if it sets a limit ("max" is none).
fn read_limit(files: &CgroupFiles) -> Option<(u64, u64)> {
    let limit: u64 = fs::read_to_string(&files.limit).ok()?.trim().parse().ok()?;
    let usage: u64 = fs::read_to_string(&files.usage).ok()?.trim().parse().ok()?;
    Some((limit, usage))
}

/// `(total, free)`: the host's memory lowered to each cgroup's limit (and
/// its remaining room). Usage counts page cache the kernel could reclaim, so
/// free errs low under a cgroup limit, as `docker stats` does before it
/// subtracts the cache.
fn limit_host_memory(total: u64, available: u64, limits: &[(u64, u64)]) -> (u64, u64) {
    limits.iter().fold((total, available.min(total)), |(t, f), &(limit, usage)| {
        (t.min(limit), f.min(limit.saturating_sub(usage)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meminfo_fields_in_bytes() {
        let text = "MemTotal:       24731400 kB\nMemFree:         4024296 kB\nMemAvailable:   19965760 kB\n";
        assert_eq!(parse_meminfo(text), Some((24731400 * 1024, 19965760 * 1024)));
        // A prefix of another field's name is not the field.
        assert_eq!(parse_meminfo("MemTotalX: 5 kB\nMemTotal: 7 kB\nMemAvailable: 3 kB"), Some((7168, 3072)));
        assert_eq!(parse_meminfo("MemTotal: 7 kB\n"), None);
        assert_eq!(parse_meminfo("MemTotal: 7 MB\nMemAvailable: 3 kB"), None);
        assert_eq!(parse_meminfo("MemTotal: 18446744073709551615 kB\nMemAvailable: 3 kB"), None);
    }

    #[test]
    fn cgroup_files_walk_up_to_the_mount() {
        let root = Path::new("/cg");
        let v1 = "5:devices:/\n4:memory:/a/b\n0::/\n";
        let files: Vec<_> = cgroup_memory_files(v1, root).into_iter().map(|f| f.limit).collect();
        assert_eq!(
            files,
            [
                "/cg/memory/a/b/memory.limit_in_bytes",
                "/cg/memory/a/memory.limit_in_bytes",
                "/cg/memory/memory.limit_in_bytes",
                "/cg/memory.max",
            ]
            .map(PathBuf::from)
        );
        let v2 = cgroup_memory_files("0::/kubepods/pod1\n", root);
        assert_eq!(v2[0].usage, PathBuf::from("/cg/kubepods/pod1/memory.current"));
        assert_eq!(v2.len(), 3);
        assert!(cgroup_memory_files("0::/a/../../etc\n", root).is_empty());
        assert_eq!(cgroup_memory_files("3:cpu,memory:/x\n", root)[0].limit, PathBuf::from("/cg/memory/x/memory.limit_in_bytes"));
    }

    #[test]
    fn cgroup_limits_lower_total_and_free() {
        // No limits: the host's numbers.
        assert_eq!(limit_host_memory(100, 60, &[]), (100, 60));
        // A limit above the host's memory (v1's "unlimited") changes nothing.
        assert_eq!(limit_host_memory(100, 60, &[(u64::MAX / 2, 10)]), (100, 60));
        // The tightest of a cgroup and its parent wins; usage over the
        // limit leaves nothing free.
        assert_eq!(limit_host_memory(100, 60, &[(40, 15), (50, 45)]), (40, 5));
        assert_eq!(limit_host_memory(100, 60, &[(40, 41)]), (40, 0));
    }
}
