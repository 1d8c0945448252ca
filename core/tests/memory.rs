//! Memory accounting and device memory on the default plugin: counts and
//! bytes checked against the sizes of the tensors made (4 bytes per f32),
//! total and free against the host's /proc/meminfo read here.

mod common;
use common::*;

use torchtpu_core::pjrt::memory::Counter;
use torchtpu_core::runtime::MemorySource;
use torchtpu_core::Code;

#[test]
fn buffers_and_bytes_are_counted_with_their_totals() {
    let rt = rt();
    // The runtime is this test's own, so only the tensors below count.
    let dev = 0;
    let upload = |n: usize| {
        let bytes = vec![0u8; 4 * n];
        rt.tensor_from_host(&bytes, torchtpu_core::DType::F32, &[n as i64], dev).unwrap()
    };
    rt.reset_accumulated_memory(dev).unwrap();
    rt.reset_peak_memory(dev).unwrap();
    let s0 = rt.memory_stats(dev).unwrap();
    assert_eq!((s0.bytes.allocated, s0.bytes.freed, s0.buffers.allocated, s0.buffers.freed, s0.num_ooms), (0, 0, 0, 0, 0));

    let a = upload(1000);
    let b = upload(24);
    drop(a);
    let s = rt.memory_stats(dev).unwrap();
    let (live0, n0) = (s0.bytes.current, s0.buffers.current);
    assert_eq!(s.bytes, Counter { current: live0 + 96, peak: live0 + 4096, allocated: 4096, freed: 4000 });
    assert_eq!(s.buffers, Counter { current: n0 + 1, peak: n0 + 2, allocated: 2, freed: 1 });
    assert_eq!(rt.memory(dev).unwrap(), (live0 + 96, live0 + 4096));

    // Resetting the totals keeps what is live and the peaks.
    rt.reset_accumulated_memory(dev).unwrap();
    drop(b);
    let s = rt.memory_stats(dev).unwrap();
    assert_eq!(s.bytes, Counter { current: live0, peak: live0 + 4096, allocated: 0, freed: 96 });
    assert_eq!(s.buffers, Counter { current: n0, peak: n0 + 2, allocated: 0, freed: 1 });
    rt.reset_peak_memory(dev).unwrap();
    let s = rt.memory_stats(dev).unwrap();
    assert_eq!((s.bytes.peak, s.buffers.peak), (live0, n0));

    assert_eq!(rt.memory_stats(99).unwrap_err().code(), Code::OutOfRange);
    assert_eq!(rt.reset_accumulated_memory(99).unwrap_err().code(), Code::OutOfRange);
}

/// `(MemTotal, MemAvailable)` in bytes, read independently of the runtime.
fn meminfo() -> (i64, i64) {
    let text = std::fs::read_to_string("/proc/meminfo").unwrap();
    let kb = |name: &str| -> i64 {
        let line = text.lines().find(|l| l.split(':').next() == Some(name)).unwrap();
        line.split_whitespace().nth(1).unwrap().parse::<i64>().unwrap() * 1024
    };
    (kb("MemTotal"), kb("MemAvailable"))
}

#[test]
fn cpu_devices_report_the_hosts_memory() {
    let rt = rt();
    assert_eq!(rt.platform_name(), "cpu", "this test covers the XLA CPU plugin");
    let (mem_total, _) = meminfo();
    let info = rt.memory_info(0).unwrap();
    // The CPU plugin reports no limit, so the host's memory stands in.
    assert_eq!(info.source, MemorySource::Host);
    assert!(info.total > 0 && info.total <= mem_total, "{info:?} vs MemTotal {mem_total}");
    assert!(info.free >= 0 && info.free <= info.total, "{info:?}");
    // Every CPU device shares the host's memory.
    assert_eq!(rt.memory_info(1).unwrap().total, info.total);
    assert_eq!(rt.memory_info(99).unwrap_err().code(), Code::OutOfRange);
}
