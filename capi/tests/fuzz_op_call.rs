//! A bounded randomized test of the generic op-call path through the C ABI
//! (`ttpu_op_call`), run in CI: random op names (registered, mutated,
//! garbage and non-UTF-8), random tagged arguments (every kind, invalid
//! kinds, extreme ints and doubles, int lists with negative and huge sizes,
//! strings, NULL pointers with nonzero lengths, small tensors of random
//! shapes and dtypes, destroyed tensors still in quarantine, generators:
//! live, a device default, destroyed, and pointers of the wrong type) and random
//! result capacities, in all three execution modes.
//!
//! Every call must return either success (its results are destroyed) or an
//! error with a code in 0..=16 that is not a caught panic. A call that hangs
//! trips a watchdog that aborts the process naming the call. The seed is
//! fixed (override with `TORCHTPU_FUZZ_SEED`), as are the bounds:
//! `TORCHTPU_FUZZ_CALLS` calls (default 4000) or 30 s, whichever ends first.
//!
//! "Huge" ints are at least 2^40 and "small" ones at most 8, so that a shape
//! built from them is either tiny or over the 1 TiB cap on one tensor (which
//! core rejects before allocating): in between (2^20..2^36) a valid shape
//! would really allocate gigabytes, which is not a bug.

use std::ffi::{c_char, c_void, CStr, CString};
use std::ptr::{null, null_mut};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use torchtpu::error::{ttpu_error_code, ttpu_error_destroy, ttpu_error_message, ttpu_error_t};
use torchtpu::fusion::ttpu_runtime_flush;
use torchtpu::generator::{ttpu_generator_create, ttpu_generator_destroy, ttpu_generator_t, ttpu_runtime_default_generator};
use torchtpu::mode::ttpu_thread_set_mode;
use torchtpu::op::{ttpu_op_call, ttpu_op_count, ttpu_op_name, ttpu_value_t};
use torchtpu::runtime::{
    ttpu_runtime_create, ttpu_runtime_destroy, ttpu_runtime_synchronize, ttpu_runtime_t,
};
use torchtpu::tensor::{ttpu_tensor_destroy, ttpu_tensor_from_host, ttpu_tensor_t};
use torchtpu_core::ops::{registry, ArgType};

#[path = "../../core/tests/common/rng.rs"]
mod rng;
use rng::Rng;

const HUGE: [i64; 7] = [1 << 40, 1 << 50, 1 << 62, i64::MAX, i64::MIN, -(1 << 40), i64::MIN + 1];

fn int(r: &mut Rng) -> i64 {
    if r.chance(8) {
        *r.pick(&HUGE)
    } else {
        r.below(12) as i64 - 3
    }
}

fn double(r: &mut Rng) -> f64 {
    *r.pick(&[0.0, -0.0, 1.0, -1.5, 0.5, 2.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 1e308, -1e308, 1e-310, 3.0, 7.25])
}

/// Owned argument memory for one call (lists, strings, tensor arrays).
#[derive(Default)]
struct Arena {
    ints: Vec<Vec<i64>>,
    bytes: Vec<Vec<u8>>,
    ptrs: Vec<Vec<*const c_void>>,
    /// Generator handles to pass: live ones and a destroyed one.
    gens: Vec<*const c_void>,
}

fn dtype_code(r: &mut Rng) -> i32 {
    if r.chance(10) {
        *r.pick(&[-1, 8, 12, 99, i32::MAX])
    } else {
        *r.pick(&[0, 1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 15])
    }
}

/// True for success; for an error, checks it, counts it and frees it.
unsafe fn check(err: *mut ttpu_error_t, what: &str, errors: &mut [u64; 17]) -> bool {
    if err.is_null() {
        return true;
    }
    let code = ttpu_error_code(err) as i32;
    let msg = CStr::from_ptr(ttpu_error_message(err)).to_string_lossy().into_owned();
    ttpu_error_destroy(err);
    assert!((0..=16).contains(&code), "{what}: code {code} out of range: {msg}");
    assert!(code != 0, "{what}: an error object with code OK: {msg}");
    assert!(!msg.contains("internal panic"), "{what}: caught panic: {msg}");
    if code == 13 || (code == 8 && std::env::var_os("TORCHTPU_FUZZ_VERBOSE").is_some()) {
        eprintln!("fuzz_op_call: {what}: code {code}: {msg}");
    }
    errors[code as usize] += 1;
    false
}

/// A tensor of a random small shape and dtype (or NULL if creation failed).
unsafe fn random_tensor(rt: *const ttpu_runtime_t, r: &mut Rng) -> *mut ttpu_tensor_t {
    let dtype = *r.pick(&[0, 1, 3, 4, 5, 6, 6, 6, 7, 9, 10, 11, 15]);
    let itemsize = match dtype {
        0 | 1 | 11 => 1,
        5 | 15 => 2,
        3 | 6 => 4,
        10 => 16,
        _ => 8,
    };
    let ndim = r.below(4);
    let sizes: Vec<i64> = (0..ndim).map(|_| r.below(4) as i64).collect();
    let numel: i64 = sizes.iter().product();
    let mut data = vec![0u8; numel as usize * itemsize];
    for b in data.iter_mut() {
        *b = (r.next() & 0x3f) as u8; // small finite values for floats
    }
    if dtype == 11 {
        data.iter_mut().for_each(|b| *b &= 1);
    }
    let mut t = null_mut();
    let err = ttpu_tensor_from_host(rt, data.as_ptr() as *const c_void, data.len(), dtype, sizes.as_ptr(), ndim, 0, &mut t);
    let mut errors = [0; 17];
    if check(err, "from_host", &mut errors) {
        t
    } else {
        null_mut()
    }
}

fn random_name(r: &mut Rng, names: &[CString]) -> Vec<u8> {
    let real = r.pick(names).as_bytes().to_vec();
    match r.below(10) {
        0..=5 => real,
        6 => {
            // Mutate a real name: drop, change or insert a byte.
            let mut n = real;
            let i = r.below(n.len().max(1));
            match r.below(3) {
                0 if !n.is_empty() => {
                    n.remove(i);
                }
                1 if !n.is_empty() => n[i] = (r.below(255) + 1) as u8,
                _ => n.insert(i, b"._:x"[r.below(4)]),
            }
            n
        }
        7 => {
            let len = r.below(20);
            (0..len).map(|_| (r.below(255) + 1) as u8).collect() // garbage, often not UTF-8
        }
        8 => r
            .pick(&[&b""[..], b"aten::", b"aten::add.", b"::", b"aten::add.Tensor.Tensor", b"\xff\xfe", b"aten::\xc3"])
            .to_vec(),
        _ => {
            // Strip the overload: "aten::add.Tensor" -> "aten::add".
            let n = String::from_utf8_lossy(&real).into_owned();
            n.split('.').next().unwrap_or("").as_bytes().to_vec()
        }
    }
}

fn random_arg(r: &mut Rng, live: &[*mut ttpu_tensor_t], dead: &[*mut ttpu_tensor_t], arena: &mut Arena) -> ttpu_value_t {
    let kind = if r.chance(4) { *r.pick(&[-1, 14, 100, i32::MIN, i32::MAX]) } else { r.below(14) as i32 };
    let mut v = ttpu_value_t { kind, i: int(r), d: double(r), ptr: null(), len: 0 };
    let tensor = |r: &mut Rng| -> *const c_void {
        match r.below(20) {
            0 => null(),
            1 if !dead.is_empty() => *r.pick(dead) as *const c_void,
            _ if !live.is_empty() => *r.pick(live) as *const c_void,
            _ => null(),
        }
    };
    match kind {
        1 | 2 => v.ptr = tensor(r),
        3 => {
            let n = r.below(4);
            let ps: Vec<*const c_void> = (0..n).map(|_| tensor(r)).collect();
            v.len = n;
            v.ptr = ps.as_ptr() as *const c_void;
            arena.ptrs.push(ps);
        }
        7 => {
            let s: Vec<u8> = match r.below(4) {
                0 => r.pick(&[&b"mean"[..], b"sum", b"none", b"tanh", b"floor", b"trunc", b"cpu", b"left"]).to_vec(),
                1 => (0..r.below(8)).map(|_| r.next() as u8).collect(),
                _ => b"".to_vec(),
            };
            v.len = s.len();
            v.ptr = s.as_ptr() as *const c_void;
            arena.bytes.push(s);
        }
        8 => {
            let n = r.below(5);
            let xs: Vec<i64> = (0..n).map(|_| int(r)).collect();
            v.len = n;
            v.ptr = xs.as_ptr() as *const c_void;
            arena.ints.push(xs);
        }
        12 => v.i = dtype_code(r) as i64,
        13 => {
            v.ptr = match r.below(4) {
                0 => null(),
                1 => tensor(r), // a handle of another type
                _ => *r.pick(&arena.gens),
            }
        }
        _ => {}
    }
    if r.chance(3) {
        // A NULL pointer with a nonzero length, whatever the kind.
        v.ptr = null();
        v.len = 1 + r.below(1 << 20);
    }
    v
}

/// Arguments shaped by the op's schema (so that calls get past binding and
/// into the lowerings), each one replaced by a random argument 10% of the
/// time; optional trailing arguments are sometimes left out or set to None.
fn typed_args(
    r: &mut Rng,
    name: &[u8],
    live: &[*mut ttpu_tensor_t],
    dead: &[*mut ttpu_tensor_t],
    arena: &mut Arena,
) -> Option<Vec<ttpu_value_t>> {
    let reg = registry();
    let def = reg.get(reg.lookup(std::str::from_utf8(name).ok()?).ok()?);
    let args = &def.schema.args;
    let required = args.iter().rposition(|a| a.default.is_none() && !a.optional).map_or(0, |i| i + 1);
    let n = (required + r.below(args.len() - required + 1)).min(args.len());
    let none = ttpu_value_t { kind: 0, i: 0, d: 0.0, ptr: null(), len: 0 };
    let pick_tensor = |r: &mut Rng| -> *const c_void {
        match r.below(40) {
            0 => null(),
            1 if !dead.is_empty() => *r.pick(dead) as *const c_void,
            _ if !live.is_empty() => *r.pick(live) as *const c_void,
            _ => null(),
        }
    };
    let mut out = Vec::with_capacity(n);
    for a in &args[..n] {
        if r.chance(10) {
            out.push(random_arg(r, live, dead, arena));
            continue;
        }
        if a.optional && r.chance(25) {
            out.push(none);
            continue;
        }
        let v = match a.ty {
            ArgType::Tensor => ttpu_value_t { kind: if a.optional { 2 } else { 1 }, ptr: pick_tensor(r), ..none },
            ArgType::TensorList | ArgType::OptTensorList => {
                let k = 1 + r.below(3);
                let ps: Vec<*const c_void> = (0..k).map(|_| pick_tensor(r)).collect();
                let v = ttpu_value_t { kind: 3, ptr: ps.as_ptr() as *const c_void, len: k, ..none };
                arena.ptrs.push(ps);
                v
            }
            ArgType::Int => ttpu_value_t { kind: 4, i: int(r), ..none },
            ArgType::IntList(_) => {
                let k = r.below(4);
                let xs: Vec<i64> = (0..k).map(|_| if r.chance(70) { r.below(4) as i64 } else { int(r) }).collect();
                let v = ttpu_value_t { kind: 8, ptr: xs.as_ptr() as *const c_void, len: k, ..none };
                arena.ints.push(xs);
                v
            }
            ArgType::Float => ttpu_value_t { kind: 5, d: double(r), ..none },
            ArgType::Bool => ttpu_value_t { kind: 6, i: r.below(2) as i64, ..none },
            ArgType::Str => {
                const STRS: [&[u8]; 9] = [b"mean", b"sum", b"none", b"tanh", b"floor", b"trunc", b"cpu", b"left", b"bogus"];
                let s = *r.pick(&STRS);
                let v = ttpu_value_t { kind: 7, ptr: s.as_ptr() as *const c_void, len: s.len(), ..none };
                arena.bytes.push(s.to_vec());
                v
            }
            ArgType::Scalar => match r.below(3) {
                0 => ttpu_value_t { kind: 9, i: int(r), ..none },
                1 => ttpu_value_t { kind: 10, d: double(r), ..none },
                _ => ttpu_value_t { kind: 11, i: r.below(2) as i64, ..none },
            },
            ArgType::ScalarType => ttpu_value_t { kind: 12, i: dtype_code(r) as i64, ..none },
            ArgType::Generator => ttpu_value_t { kind: 13, ptr: *r.pick(&arena.gens), ..none },
            _ => none,
        };
        out.push(v);
    }
    Some(out)
}

#[test]
fn fuzz_op_call() {
    let seed: u64 =
        std::env::var("TORCHTPU_FUZZ_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x7470_7566_757a_7a31);
    let calls: usize = std::env::var("TORCHTPU_FUZZ_CALLS").ok().and_then(|s| s.parse().ok()).unwrap_or(4000);
    let budget = Duration::from_secs(30);
    let mut r = Rng((seed ^ 0x9e37_79b9_7f4a_7c15) | 1);

    // The watchdog: no single call may take more than 60 s.
    let last = Arc::new(Mutex::new(String::new()));
    let beat = Arc::new(AtomicU64::new(0));
    {
        let (last, beat) = (last.clone(), beat.clone());
        std::thread::spawn(move || {
            let mut seen = u64::MAX;
            loop {
                std::thread::sleep(Duration::from_secs(60));
                let b = beat.load(Ordering::Relaxed);
                if b == u64::MAX {
                    return;
                }
                if b == seen {
                    eprintln!("fuzz_op_call: call {b} hangs: {}", last.lock().unwrap());
                    std::process::abort();
                }
                seen = b;
            }
        });
    }

    unsafe {
        let mut rt = null_mut();
        assert!(ttpu_runtime_create(null(), &mut rt).is_null());
        let names: Vec<CString> = (0..ttpu_op_count())
            .map(|i| {
                let mut p: *const c_char = null();
                assert!(ttpu_op_name(i, &mut p).is_null());
                CStr::from_ptr(p).to_owned()
            })
            .collect();
        let mut errors = [0u64; 17];
        let mut ok = 0u64;
        let mut live: Vec<*mut ttpu_tensor_t> = Vec::new();
        let mut dead: Vec<*mut ttpu_tensor_t> = Vec::new();
        for _ in 0..12 {
            let t = random_tensor(rt, &mut r);
            if !t.is_null() {
                live.push(t);
            }
        }
        for _ in 0..4 {
            let t = random_tensor(rt, &mut r);
            if !t.is_null() {
                ttpu_tensor_destroy(t);
                dead.push(t); // still in quarantine: a use must fail cleanly
            }
        }

        let mut gens: Vec<*mut ttpu_generator_t> = vec![null_mut(); 3];
        assert!(ttpu_generator_create(rt, 0, 7, &mut gens[0]).is_null());
        assert!(ttpu_runtime_default_generator(rt, 0, &mut gens[1]).is_null());
        assert!(ttpu_generator_create(rt, 1, 8, &mut gens[2]).is_null());
        ttpu_generator_destroy(gens[2]); // stays in quarantine: a use must fail cleanly
        let gen_ptrs: Vec<*const c_void> = gens.iter().map(|&g| g as *const c_void).collect();

        let start = Instant::now();
        let mut n_calls = 0;
        while n_calls < calls && start.elapsed() < budget {
            n_calls += 1;
            if r.chance(2) {
                let mode = *r.pick(&[-1, 0, 1, 2]);
                assert!(ttpu_thread_set_mode(mode).is_null());
            }
            if r.chance(3) && live.len() > 4 {
                // Retire a tensor to the quarantine, make a fresh one.
                let t = live.swap_remove(r.below(live.len()));
                ttpu_tensor_destroy(t);
                dead.push(t);
                let t = random_tensor(rt, &mut r);
                if !t.is_null() {
                    live.push(t);
                }
            }
            let mut name = random_name(&mut r, &names);
            name.retain(|&b| b != 0);
            name.push(0);
            let mut arena = Arena { gens: gen_ptrs.clone(), ..Arena::default() };
            let typed = if r.chance(70) { typed_args(&mut r, &name[..name.len() - 1], &live, &dead, &mut arena) } else { None };
            let args: Vec<ttpu_value_t> = typed.unwrap_or_else(|| {
                (0..r.below(7)).map(|_| random_arg(&mut r, &live, &dead, &mut arena)).collect()
            });
            let nargs = args.len();
            let args_ptr = if nargs == 0 && r.chance(50) { null() } else { args.as_ptr() };
            let capacity = r.below(5);
            let mut out = [ttpu_value_t { kind: 0, i: 0, d: 0.0, ptr: null(), len: 0 }; 8];
            let mut count = usize::MAX;
            let desc = format!(
                "call {n_calls}: {:?}({:?}) capacity {capacity}",
                String::from_utf8_lossy(&name[..name.len() - 1]),
                args.iter().map(|a| (a.kind, a.i, a.d, a.len, a.ptr.is_null())).collect::<Vec<_>>()
            );
            *last.lock().unwrap() = desc.clone();
            beat.store(n_calls as u64, Ordering::Relaxed);
            let err =
                ttpu_op_call(rt, name.as_ptr() as *const c_char, args_ptr, nargs, out.as_mut_ptr(), capacity, &mut count);
            if check(err, &desc, &mut errors) {
                ok += 1;
                assert!(count <= capacity, "{desc}: count {count} > capacity {capacity}");
                for v in &out[..count] {
                    assert!(v.kind == 0 || v.kind == 1, "{desc}: result kind {}", v.kind);
                    if v.kind == 1 {
                        // Keep some results as inputs for later calls.
                        if live.len() < 24 && r.chance(30) {
                            live.push(v.ptr as *mut ttpu_tensor_t);
                        } else {
                            ttpu_tensor_destroy(v.ptr as *mut ttpu_tensor_t);
                        }
                    }
                }
            } else {
                assert_eq!(count, usize::MAX, "{desc}: out_count written on error");
            }
        }
        beat.store(u64::MAX, Ordering::Relaxed);
        assert!(ttpu_thread_set_mode(-1).is_null());
        // Errors of asynchronous work surface here; they must be clean too.
        check(ttpu_runtime_flush(rt), "flush", &mut errors);
        check(ttpu_runtime_synchronize(rt), "synchronize", &mut errors);
        for t in live {
            ttpu_tensor_destroy(t);
        }
        for t in dead {
            ttpu_tensor_destroy(t); // a no-op: already destroyed
        }
        for g in gens {
            ttpu_generator_destroy(g); // the last one: a no-op
        }
        ttpu_runtime_destroy(rt);
        eprintln!(
            "fuzz_op_call: seed {seed:#x}: {n_calls} calls in {:.1} s: {ok} ok, errors by code {errors:?}",
            start.elapsed().as_secs_f64()
        );
        assert!(n_calls >= 500, "only {n_calls} calls in the time budget");
    }
}
