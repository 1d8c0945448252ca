//! Hostile plugins against the sandbox and the loader: recursion on threads
//! with small stacks, memory tricks, modules that are costly to compile,
//! files that are not regular files, namespaces that belong to others, and
//! forged log lines. Each must give its named error quickly, and afterwards
//! built-in ops and the example plugins must still give the right numbers.

mod common;
mod plugin_kit;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{f32s, rt, MODES};
use plugin_kit::{examples, manifest, still_works};
use torchtpu_core::error::PluginFailure;
use torchtpu_core::plugin::{host, Limits};
use torchtpu_core::runtime::set_thread_mode;
use torchtpu_core::{Error, ExecMode, Runtime};

// ------------------------------------------------------------------ helpers

/// A fresh scratch directory for one test.
fn fresh_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("torchtpu-sandbox-tests-{}", std::process::id())).join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A plugin in WAT: the manifest, a 3-page memory (unless `extra` brings
/// its own), an allocator that always hands out page 1, and `lower` as the
/// body of `ttpu_lower`.
fn wat_module(manifest: &str, lower: &str, extra: &str) -> Vec<u8> {
    wat::parse_str(wat_text(manifest, lower, extra, "(memory (export \"memory\") 3)")).unwrap()
}

fn wat_text(manifest: &str, lower: &str, extra: &str, memory: &str) -> String {
    let esc = manifest.bytes().map(|c| format!("\\{c:02x}")).collect::<String>();
    format!(
        r#"(module
  {extra}
  (@custom "torchtpu.manifest" "{esc}")
  {memory}
  (func (export "ttpu_alloc") (param i32) (result i32) (i32.const 65536))
  (func (export "ttpu_dealloc") (param i32 i32))
  (func (export "ttpu_lower") (param i32 i32) (result i64) {lower}))"#
    )
}

fn write(dir: &Path, file: &str, wasm: &[u8]) -> PathBuf {
    let path = dir.join(file);
    std::fs::write(&path, wasm).unwrap();
    path
}

/// Loading `path` must be refused with an error naming the file and every
/// needle, within `within`; then everything else still works.
fn expect_rejected(path: &Path, limits: Limits, needles: &[&str], within: Duration) -> String {
    examples();
    let start = Instant::now();
    let e = host().load_file(path, limits).unwrap_err();
    let took = start.elapsed();
    let msg = e.to_string();
    assert!(matches!(e, Error::WasmPluginRejected { .. }), "{msg}");
    assert!(msg.contains(&path.display().to_string()), "{msg}");
    for n in needles {
        assert!(msg.contains(n), "{msg:?} should mention {n:?}");
    }
    assert!(took < within, "refusing {} took {took:?}", path.display());
    still_works(&rt());
    msg
}

/// Calls `<name>::f` on a [4] f32 tensor; it must fail with `kind` and a
/// message holding `needle`.
fn expect_call_failure(rt: &Arc<Runtime>, name: &str, kind: PluginFailure, needle: &str) {
    let x = f32s(rt, &[1.0, 2.0, 3.0, 4.0], &[4]);
    let e = rt.call1(&format!("{name}::f"), &[x.into()]).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(&e, Error::WasmPlugin { kind: k, .. } if *k == kind), "{name}: {msg}");
    assert!(msg.contains(&format!("plugin '{name}'")) && msg.contains(needle), "{msg:?} should mention {needle:?}");
}

fn load(name: &str, wasm: &[u8], limits: Limits) {
    let path = write(&fresh_dir(&format!("load-{name}")), &format!("{name}.wasm"), wasm);
    host().load_file(&path, limits).unwrap_or_else(|e| panic!("{name} should load: {e}"));
}

/// Runs `f` on a thread with a `stack` byte stack and waits for it.
fn on_thread_with_stack<R: Send + 'static>(stack: usize, f: impl FnOnce() -> R + Send + 'static) -> R {
    std::thread::Builder::new().stack_size(stack).spawn(f).unwrap().join().expect("the small-stack thread panicked")
}

/// A recursion that no compiler turns into a loop: each level adds after
/// the call returns.
const RECURSE: &str = r#"(func $r (param i32) (result i32) (i32.add (call $r (local.get 0)) (i32.const 1)))"#;

// -------------------------------------------------------------------- stack

#[test]
fn direct_recursion_on_a_256k_stack_thread_is_a_stack_overflow_trap() {
    examples();
    load("sbx_rec", &wat_module(&manifest("sbx_rec"), "(i64.extend_i32_u (call $r (i32.const 0)))", RECURSE), Limits::default());
    let rt = rt();
    let rt2 = rt.clone();
    // Every mode, on a thread whose whole stack (256 KiB) is a quarter of
    // what wasm may use (1 MiB): without a bigger stack under the call, the
    // recursion would run into the thread's guard page and kill the process.
    on_thread_with_stack(256 << 10, move || {
        for mode in MODES {
            set_thread_mode(Some(mode)).unwrap();
            expect_call_failure(&rt2, "sbx_rec", PluginFailure::Trap, "stack overflow");
        }
        set_thread_mode(None).unwrap();
    });
    // The same on this (bigger) stack, and then everything still works.
    expect_call_failure(&rt, "sbx_rec", PluginFailure::Trap, "stack overflow");
    still_works(&rt);
}

#[test]
fn mutual_recursion_through_a_table_on_a_small_stack_thread_is_a_trap() {
    examples();
    // $a calls $b through the table, $b calls $a directly.
    let extra = r#"(type $t (func (param i32) (result i32)))
  (table 2 funcref)
  (elem (i32.const 0) $a $b)
  (func $a (param i32) (result i32) (i32.add (call_indirect (type $t) (local.get 0) (i32.const 1)) (i32.const 1)))
  (func $b (param i32) (result i32) (i32.mul (call $a (local.get 0)) (i32.const 3)))"#;
    load("sbx_mutual", &wat_module(&manifest("sbx_mutual"), "(i64.extend_i32_u (call $a (i32.const 0)))", extra), Limits::default());
    let rt = rt();
    let rt2 = rt.clone();
    on_thread_with_stack(128 << 10, move || {
        set_thread_mode(Some(ExecMode::DeferNever)).unwrap();
        expect_call_failure(&rt2, "sbx_mutual", PluginFailure::Trap, "stack overflow");
        // Again, on a fresh instance (the failed one was dropped).
        expect_call_failure(&rt2, "sbx_mutual", PluginFailure::Trap, "stack overflow");
    });
    still_works(&rt);
}

#[test]
fn recursion_in_a_start_function_on_a_small_stack_thread_is_refused_at_load() {
    examples();
    let dir = fresh_dir("start-recursion");
    let extra = format!("{RECURSE} (func $start (drop (call $r (i32.const 0)))) (start $start)");
    let path = write(&dir, "sbx_start.wasm", &wat_module(&manifest("sbx_start"), "(unreachable)", &extra));
    let p = path.clone();
    let e = on_thread_with_stack(256 << 10, move || host().load_file(&p, Limits::default()).unwrap_err().to_string());
    assert!(e.contains("sbx_start.wasm") && e.contains("stack overflow"), "{e}");
    assert!(host().get("sbx_start").is_none());
    still_works(&rt());
}

// ------------------------------------------------------------------- memory

#[test]
fn two_memories_are_refused_at_load() {
    let dir = fresh_dir("two-memories");
    let wat = wat_text(&manifest("sbx_mem2"), "(unreachable)", "", r#"(memory (export "memory") 3) (memory 1)"#);
    let path = write(&dir, "sbx_mem2.wasm", &wat::parse_str(&wat).unwrap());
    expect_rejected(&path, Limits::default(), &["declares 2 linear memories", "exactly one"], Duration::from_secs(5));
}

#[test]
fn sixteen_memories_of_64_mib_are_refused_at_load() {
    // Each alone is within the 64 MiB cap (1024 pages); together 1 GiB.
    let dir = fresh_dir("sixteen-memories");
    let memories = format!(r#"(memory (export "memory") 1024){}"#, " (memory 1024)".repeat(15));
    let wat = wat_text(&manifest("sbx_mem16"), "(unreachable)", "", &memories);
    let path = write(&dir, "sbx_mem16.wasm", &wat::parse_str(&wat).unwrap());
    expect_rejected(&path, Limits::default(), &["declares 16 linear memories"], Duration::from_secs(5));
}

#[test]
fn memory_grow_stops_exactly_at_the_cap() {
    // Cap 4 MiB = 64 pages. From 3 pages, growing by 61 reaches 64 pages
    // exactly (allowed: memory.grow returns the old size, 3); one more page
    // is over the cap and is out of memory, not the `unreachable` that a
    // refused first grow would reach.
    let limits = Limits { memory: 4 << 20, ..Limits::default() };
    let lower = "(if (i32.ne (memory.grow (i32.const 61)) (i32.const 3)) (then unreachable)) \
                 (drop (memory.grow (i32.const 1))) (unreachable)";
    load("sbx_grow", &wat_module(&manifest("sbx_grow"), lower, ""), limits);
    let rt = rt();
    for mode in MODES {
        set_thread_mode(Some(mode)).unwrap();
        expect_call_failure(&rt, "sbx_grow", PluginFailure::OutOfMemory, "4 MiB limit (TORCHTPU_PLUGIN_MEMORY_MB raises it)");
        // 65 pages = 4259840 bytes.
        expect_call_failure(&rt, "sbx_grow", PluginFailure::OutOfMemory, "4259840 bytes");
    }
    set_thread_mode(None).unwrap();
    still_works(&rt);
}

#[test]
fn a_huge_initial_memory_is_refused_at_load() {
    // 2000 pages = 131072000 bytes, over the 64 MiB default.
    let dir = fresh_dir("huge-initial");
    let wat = wat_text(&manifest("sbx_huge"), "(unreachable)", "", r#"(memory (export "memory") 2000)"#);
    let path = write(&dir, "sbx_huge.wasm", &wat::parse_str(&wat).unwrap());
    expect_rejected(
        &path,
        Limits::default(),
        &["2000 pages (131072000 bytes)", "64 MiB limit", "TORCHTPU_PLUGIN_MEMORY_MB"],
        Duration::from_secs(5),
    );
}

#[test]
fn more_tables_than_an_instance_may_have_are_refused_at_load() {
    let dir = fresh_dir("tables");
    let extra = "(table 1 funcref) (table 1 funcref) (table 1 funcref) (table 1 funcref) (table 1 funcref)";
    let path = write(&dir, "sbx_tables.wasm", &wat_module(&manifest("sbx_tables"), "(unreachable)", extra));
    expect_rejected(&path, Limits::default(), &["table count too high"], Duration::from_secs(5));
}

// -------------------------------------------------------------- module caps

#[test]
fn a_module_over_the_size_cap_is_refused_and_the_same_module_under_it_loads() {
    let dir = fresh_dir("size");
    let limits = Limits { module_bytes: 1 << 20, ..Limits::default() };
    // The plugin, padded by a 1 MiB custom section.
    let pad = format!(r#"(@custom "padding" "{}")"#, "a".repeat(1 << 20));
    let big = write(&dir, "sbx_big.wasm", &wat_module(&manifest("sbx_big"), "(unreachable)", &pad));
    let size = std::fs::metadata(&big).unwrap().len().to_string();
    expect_rejected(&big, limits, &[&size, "over the 1 MiB module size limit", "TORCHTPU_PLUGIN_MAX_MODULE_MB"], Duration::from_secs(5));
    assert!(host().get("sbx_big").is_none());
    let small = write(&dir, "sbx_small.wasm", &wat_module(&manifest("sbx_small"), "(unreachable)", ""));
    host().load_file(&small, limits).unwrap();
}

#[test]
fn a_hundred_thousand_functions_are_refused_before_compiling() {
    let dir = fresh_dir("functions");
    let extra = "(func)".repeat(100_000);
    let path = write(&dir, "sbx_funcs.wasm", &wat_module(&manifest("sbx_funcs"), "(unreachable)", &extra));
    // 100,000 plus alloc, dealloc and lower; refused from the section
    // headers, in far less time than compiling them would take.
    expect_rejected(
        &path,
        Limits::default(),
        &["defines 100003 functions", "limit of 20000", "TORCHTPU_PLUGIN_MAX_FUNCTIONS"],
        Duration::from_secs(1),
    );
    // The boundary, on a small module: 5 + 3 = 8 functions load under a
    // limit of 8 and are refused under 7.
    let path = write(&dir, "sbx_eight.wasm", &wat_module(&manifest("sbx_eight"), "(unreachable)", &"(func)".repeat(5)));
    let seven = Limits { functions: 7, ..Limits::default() };
    expect_rejected(&path, seven, &["defines 8 functions, over the limit of 7"], Duration::from_secs(1));
    host().load_file(&path, Limits { functions: 8, ..Limits::default() }).unwrap();
}

#[test]
fn a_compile_past_its_deadline_is_reported_and_abandoned() {
    let dir = fresh_dir("compile-time");
    // 3000 functions with some arithmetic each: compiling takes far more
    // than 1 ms. The version makes the module unique to this process, so no
    // cached compile of it exists.
    let body = "(func (param i32) (result i32) (i32.mul (i32.add (local.get 0) (i32.const 7)) (i32.const 3)))";
    let m = manifest("sbx_slow").replace("0.0.1", &format!("0.0.{}", std::process::id()));
    let path = write(&dir, "sbx_slow.wasm", &wat_module(&m, "(unreachable)", &body.repeat(3000)));
    let limits = Limits { compile_timeout: Duration::from_millis(1), ..Limits::default() };
    expect_rejected(
        &path,
        limits,
        &["compiling it took longer than the 1 ms limit", "TORCHTPU_PLUGIN_COMPILE_TIMEOUT_MS"],
        Duration::from_secs(2),
    );
    assert!(host().get("sbx_slow").is_none());
    // With the default (30 s) the same file loads.
    host().load_file(&path, Limits::default()).unwrap();
    let rt = rt();
    expect_call_failure(&rt, "sbx_slow", PluginFailure::Trap, "unreachable");
}

// --------------------------------------------------------------- file kinds

/// Loads `path` on a helper thread, so that a load that hangs fails the
/// test instead of hanging it.
fn load_bounded(path: &Path) -> Result<(), String> {
    let p = path.to_path_buf();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(host().load_file(&p, Limits::default()).map(|_| ()).map_err(|e| e.to_string()));
    });
    rx.recv_timeout(Duration::from_secs(5)).unwrap_or_else(|_| panic!("loading {} hung", path.display()))
}

fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo {}", path.display());
}

#[test]
fn a_fifo_named_x_wasm_is_reported_without_hanging() {
    let path = fresh_dir("fifo").join("x.wasm");
    mkfifo(&path);
    let e = load_bounded(&path).unwrap_err();
    assert!(e.contains("x.wasm") && e.contains("is a FIFO, not a regular file"), "{e}");
    still_works(&rt());
}

#[test]
fn a_symlink_to_dev_zero_is_reported_without_reading_it() {
    let path = fresh_dir("zero").join("x.wasm");
    std::os::unix::fs::symlink("/dev/zero", &path).unwrap();
    let e = load_bounded(&path).unwrap_err();
    assert!(e.contains("x.wasm") && e.contains("is a character device, not a regular file"), "{e}");
    still_works(&rt());
}

#[test]
fn a_directory_named_x_wasm_is_reported() {
    let path = fresh_dir("dir").join("x.wasm");
    std::fs::create_dir(&path).unwrap();
    let e = load_bounded(&path).unwrap_err();
    assert!(e.contains("x.wasm") && e.contains("is a directory, not a regular file"), "{e}");
    still_works(&rt());
}

#[test]
fn a_dangling_symlink_is_reported() {
    let dir = fresh_dir("dangling");
    let path = dir.join("x.wasm");
    std::os::unix::fs::symlink(dir.join("gone.wasm"), &path).unwrap();
    let e = load_bounded(&path).unwrap_err();
    assert!(e.contains("x.wasm") && e.contains("is a dangling symbolic link") && e.contains("gone.wasm"), "{e}");
    still_works(&rt());
}

#[test]
fn a_socket_named_x_wasm_is_reported() {
    let path = fresh_dir("socket").join("x.wasm");
    let _listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    let e = load_bounded(&path).unwrap_err();
    assert!(e.contains("x.wasm") && e.contains("is a socket, not a regular file"), "{e}");
    still_works(&rt());
}

#[test]
fn a_symlink_to_a_regular_plugin_is_followed() {
    let dir = fresh_dir("link-ok");
    let real = write(&dir, "real.bin", &wat_module(&manifest("sbx_linked"), "(unreachable)", ""));
    let link = dir.join("sbx_linked.wasm");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    load_bounded(&link).unwrap();
    assert!(host().get("sbx_linked").is_some());
}

#[test]
fn a_directory_load_reports_every_wasm_entry_it_skips() {
    examples();
    let dir = fresh_dir("mixed-kinds");
    write(&dir, "a_good.wasm", &wat_module(&manifest("sbx_dir_ok"), "(unreachable)", ""));
    mkfifo(&dir.join("b_fifo.wasm"));
    std::fs::create_dir(dir.join("c_dir.wasm")).unwrap();
    std::os::unix::fs::symlink(dir.join("nowhere"), dir.join("d_dangling.wasm")).unwrap();
    std::os::unix::fs::symlink("/dev/zero", dir.join("e_zero.wasm")).unwrap();
    std::fs::write(dir.join("notes.txt"), b"not a plugin").unwrap();
    let start = Instant::now();
    let report = host().load(&dir, Limits::default());
    assert!(start.elapsed() < Duration::from_secs(5));
    let names: Vec<&str> = report.loaded.iter().map(|p| p.name()).collect();
    assert_eq!(names, ["sbx_dir_ok"]);
    let got: Vec<(String, String)> = report
        .rejected
        .iter()
        .map(|r| (r.path.file_name().unwrap().to_string_lossy().into_owned(), r.error.to_string()))
        .collect();
    let want = [
        ("b_fifo.wasm", "is a FIFO"),
        ("c_dir.wasm", "is a directory"),
        ("d_dangling.wasm", "is a dangling symbolic link"),
        ("e_zero.wasm", "is a character device"),
    ];
    assert_eq!(got.len(), want.len(), "{got:#?}");
    for ((file, msg), (want_file, want_msg)) in got.iter().zip(want) {
        assert_eq!(file, want_file);
        assert!(msg.contains(want_msg) && msg.contains(want_file), "{msg}");
    }
    // The host keeps them for diagnostics (the C ABI and Python list them).
    let kept = host().rejections();
    for (file, _) in want {
        let r = kept.iter().find(|r| r.path == dir.join(file)).unwrap_or_else(|| panic!("{file} not kept"));
        let (p, m) = r.c();
        assert_eq!(p.to_str().unwrap(), dir.join(file).display().to_string());
        assert!(m.to_str().unwrap().contains(file));
    }
    still_works(&rt());
}

// --------------------------------------------------------------- namespaces

#[test]
fn a_plugin_named_after_a_pytorch_namespace_is_refused() {
    for ns in ["profiler", "_c10d_functional_autograd", "inductor", "_test"] {
        let dir = fresh_dir(&format!("ns-{ns}"));
        let path = write(&dir, "p.wasm", &wat_module(&manifest(ns), "(unreachable)", ""));
        expect_rejected(&path, Limits::default(), &[&format!("plugin name '{ns}' is reserved")], Duration::from_secs(5));
    }
}

fn never(_: &mut torchtpu_core::ops::Cx, _: &torchtpu_core::ops::Args) -> torchtpu_core::Result<Vec<torchtpu_core::hlo::V>> {
    Err(Error::InvalidArgument("a test op that is never lowered".into()))
}

#[test]
fn a_plugin_named_after_a_namespace_of_the_op_registry_is_refused() {
    use torchtpu_core::ops::{registry, OpDef, Schema};
    // Something else (here: this test) already has ops in `sbx_taken`.
    let schema = Schema::parse("sbx_taken::op(Tensor a) -> Tensor").unwrap();
    registry().add(vec![OpDef::new(schema, Arc::new(never))]).unwrap();
    let dir = fresh_dir("ns-registry");
    let path = write(&dir, "sbx_taken.wasm", &wat_module(&manifest("sbx_taken"), "(unreachable)", ""));
    expect_rejected(
        &path,
        Limits::default(),
        &["'sbx_taken' is a namespace the runtime already uses", "sbx_taken::op"],
        Duration::from_secs(5),
    );
    assert!(registry().lookup("sbx_taken::f").is_err());
}

// --------------------------------------------------------------------- logs

/// A `tracing` writer into a shared buffer.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_plugin_cannot_forge_log_lines() {
    examples();
    // Logs (level warn) a message with a newline, a carriage return, a fake
    // log line and ANSI colour escapes, then traps.
    let msg = "hello\nWARN torchtpu: forged line\r\u{1b}[31mred\u{1b}[0m";
    let esc = msg.bytes().map(|c| format!("\\{c:02x}")).collect::<String>();
    let extra = format!(
        r#"(import "torchtpu" "log" (func $log (param i32 i32 i32)))
  (data (i32.const 2048) "{esc}")"#
    );
    let lower = format!("(call $log (i32.const 1) (i32.const 2048) (i32.const {})) (unreachable)", msg.len());
    load("sbx_log", &wat_module(&manifest("sbx_log"), &lower, &extra), Limits::default());
    let buf = Captured::default();
    let sink = buf.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || sink.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::WARN)
        .finish();
    let rt = rt();
    tracing::subscriber::with_default(subscriber, || {
        set_thread_mode(Some(ExecMode::DeferNever)).unwrap();
        expect_call_failure(&rt, "sbx_log", PluginFailure::Trap, "unreachable");
        set_thread_mode(None).unwrap();
    });
    let out = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
    let lines: Vec<&str> = out.lines().filter(|l| l.contains("hello")).collect();
    assert_eq!(lines.len(), 1, "{out}");
    let line = lines[0];
    assert!(line.contains("plugin=sbx_log"), "the attribution stays: {line}");
    assert!(
        line.contains(r"hello\nWARN torchtpu: forged line\r\u{1b}[31mred\u{1b}[0m"),
        "the message is escaped: {line}"
    );
    assert!(!out.contains('\u{1b}') && !out.contains('\r'), "{out:?}");
    assert!(!out.lines().any(|l| l.starts_with("WARN torchtpu: forged")), "{out}");
    still_works(&rt);
}
