//! The two-tier compile cache against the real CPU plugin: memory hits, LRU
//! eviction, a second cache warm from disk, recovery from damaged files, the
//! disabled cache, clear(), and recompile explanations.

use std::cell::Cell;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use sha2::{Digest, Sha256};
use torchtpu_core::cache::{explain, CacheConfig, CacheKey, GraphSummary, NodeSummary, ProgramCache, Tier};
use torchtpu_core::pjrt::{discovery, Api, Client, CompileOptions, ElementType, Executable};
use torchtpu_core::DType;

fn client() -> Arc<Client> {
    static CLIENT: OnceLock<Arc<Client>> = OnceLock::new();
    CLIENT
        .get_or_init(|| {
            let found = discovery::find_plugin(None).expect("CPU plugin (run scripts/setup.sh)");
            Client::create(Api::load(&found.path).unwrap(), &[]).unwrap()
        })
        .clone()
}

/// `x + c` over `tensor<4xf32>`; each `c` is a different program.
fn program(c: i32) -> String {
    format!(
        r#"module @m {{
  func.func public @main(%arg0: tensor<4xf32>) -> tensor<4xf32> {{
    %0 = stablehlo.constant dense<{c}.0> : tensor<4xf32>
    %1 = stablehlo.add %arg0, %0 : tensor<4xf32>
    return %1 : tensor<4xf32>
  }}
}}"#
    )
}

fn key(c: i32) -> CacheKey {
    CacheKey::new(&program(c), &CompileOptions::Portable.encode(), "xla-cpu-test")
}

/// The summary of `program(c)`: one add of a [4] f32 input and a constant.
fn summary(c: i32) -> GraphSummary {
    GraphSummary {
        nodes: vec![NodeSummary {
            op: "aten::add.Scalar".into(),
            inputs: vec![(DType::F32, vec![4])],
            attrs: format!("other={c}"),
            views: Vec::new(),
        }],
        outputs: vec![(DType::F32, vec![4])],
        strict: false,
    }
}

fn compile(c: i32) -> torchtpu_core::Result<Executable> {
    client().compile("cache test", &program(c), &CompileOptions::Portable)
}

/// Runs `x + c` on [1, 2, 3, 4].
fn run(exe: &Executable) -> Vec<f32> {
    let client = client();
    let bytes: Vec<u8> = [1f32, 2., 3., 4.].iter().flat_map(|x| x.to_le_bytes()).collect();
    let x = client.buffer_from_host(&bytes, ElementType::F32, &[4], 0).unwrap();
    let (outs, ev) = exe.execute(&[&x], 0).unwrap();
    ev.wait().unwrap();
    let mut out = vec![0u8; 16];
    outs[0].to_host(&mut out).unwrap();
    out.chunks(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
}

/// Looks `c` up; `calls` counts the times the compile closure ran.
fn lookup(cache: &ProgramCache, c: i32, calls: &Cell<u32>) -> (Arc<Executable>, Tier) {
    cache
        .get_or_compile(&client(), &key(c), &summary(c), || {
            calls.set(calls.get() + 1);
            compile(c)
        })
        .unwrap()
}

/// A fresh directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
        let dir = std::env::temp_dir().join(format!("ttpu-cache-{name}-{}-{nanos}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    fn config(&self, memory_entries: usize) -> CacheConfig {
        CacheConfig { enabled: true, memory_entries, dir: Some(self.0.clone()) }
    }

    fn ttpu_files(&self) -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = fs::read_dir(&self.0)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "ttpu"))
            .collect();
        v.sort();
        v
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn memory_only(entries: usize) -> ProgramCache {
    ProgramCache::new(CacheConfig { enabled: true, memory_entries: entries, dir: None })
}

#[test]
fn memory_hit_after_compile() {
    let cache = memory_only(8);
    let calls = Cell::new(0);
    let (exe, tier) = lookup(&cache, 10, &calls);
    assert_eq!((tier, calls.get()), (Tier::Compiled, 1));
    assert_eq!(run(&exe), [11., 12., 13., 14.]);
    let (exe2, tier) = lookup(&cache, 10, &calls);
    assert_eq!((tier, calls.get()), (Tier::Memory, 1), "a hit must not compile");
    assert!(Arc::ptr_eq(&exe, &exe2));
    let s = cache.stats();
    assert_eq!((s.memory_hits, s.disk_hits, s.misses, s.compiles, s.disk_writes), (1, 0, 1, 1, 0));
    assert!(s.compile_ns > 0);
    assert_eq!(cache.last_miss_explanation().as_deref(), Some("first graph compiled (no cached programs)"));
}

#[test]
fn lru_evicts_the_least_recently_used() {
    let cache = memory_only(2);
    let calls = Cell::new(0);
    lookup(&cache, 1, &calls); // [1]
    lookup(&cache, 2, &calls); // [1, 2]
    assert_eq!(lookup(&cache, 1, &calls).1, Tier::Memory); // [2, 1]
    lookup(&cache, 3, &calls); // evicts 2 (FIFO would evict 1): [1, 3]
    assert_eq!(cache.stats().evictions, 1);
    assert_eq!(lookup(&cache, 1, &calls).1, Tier::Memory); // [3, 1]
    assert_eq!(calls.get(), 3);
    let (exe, tier) = lookup(&cache, 2, &calls); // evicts 3: [1, 2]
    assert_eq!((tier, calls.get()), (Tier::Compiled, 4));
    assert_eq!(run(&exe), [3., 4., 5., 6.]);
    assert_eq!(
        cache.last_miss_explanation().unwrap(),
        "this graph was compiled before but was evicted from the memory tier (bound: 2 programs) and there is no disk tier"
    );
    assert_eq!(lookup(&cache, 1, &calls).1, Tier::Memory);
    assert_eq!(lookup(&cache, 3, &calls).1, Tier::Compiled);
    let s = cache.stats();
    assert_eq!((s.memory_hits, s.misses, s.compiles, s.evictions), (3, 5, 5, 3));
}

#[test]
fn second_cache_is_warm_from_disk() {
    let dir = TempDir::new("warm");
    let calls = Cell::new(0);
    {
        let first = ProgramCache::new(dir.config(8));
        assert_eq!(first.dir(), Some(dir.0.as_path()));
        lookup(&first, 10, &calls);
        assert_eq!(first.stats().disk_writes, 1);
    }
    assert_eq!(dir.ttpu_files(), vec![dir.0.join(format!("{}.ttpu", key(10).hex()))]);
    let bytes = fs::read(&dir.ttpu_files()[0]).unwrap();
    assert_eq!(&bytes[..8], b"TTPUPRG1");

    // A second cache on the same directory: what a second process sees.
    let second = ProgramCache::new(dir.config(8));
    let (exe, tier) = second
        .get_or_compile(&client(), &key(10), &summary(10), || panic!("must load from disk, not compile"))
        .unwrap();
    assert_eq!(tier, Tier::Disk);
    let s = second.stats();
    assert_eq!((s.compiles, s.disk_hits, s.misses, s.memory_hits), (0, 1, 0, 0));
    assert_eq!(run(&exe), [11., 12., 13., 14.]);
    assert_eq!(lookup(&second, 10, &calls).1, Tier::Memory);

    // A third cache misses on another graph and explains it against the
    // graph it only knows from disk.
    let third = ProgramCache::new(dir.config(8));
    let (exe, tier) = lookup(&third, 20, &calls);
    assert_eq!(tier, Tier::Compiled);
    assert_eq!(run(&exe), [21., 22., 23., 24.]);
    assert_eq!(
        third.last_miss_explanation().unwrap(),
        r#"no cached program matches: nearest cached graph (1 node) differs at node 0 (aten::add.Scalar): attributes "other=20" vs "other=10""#
    );
}

/// Runs `f` with this thread's tracing events (warn and up) written to a string.
fn capture_warnings<R>(f: impl FnOnce() -> R) -> (R, String) {
    #[derive(Clone, Default)]
    struct Sink(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Sink {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let sink = Sink::default();
    let writer = sink.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::WARN)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let r = tracing::subscriber::with_default(subscriber, f);
    let text = String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
    (r, text)
}

/// Damages `path` with `damage`, then checks a fresh cache recompiles it,
/// warns and counts once, gives the right numbers and rewrites a valid file.
fn check_recovers(dir: &TempDir, c: i32, damage: impl FnOnce(&Path)) {
    let path = dir.0.join(format!("{}.ttpu", key(c).hex()));
    let good = fs::read(&path).unwrap();
    damage(&path);
    assert_ne!(fs::read(&path).unwrap(), good);

    let cache = ProgramCache::new(dir.config(8));
    let calls = Cell::new(0);
    let ((exe, tier), log) = capture_warnings(|| lookup(&cache, c, &calls));
    assert_eq!((tier, calls.get()), (Tier::Compiled, 1));
    assert_eq!(log.lines().count(), 1, "one warning: {log}");
    assert_eq!(
        cache.last_miss_explanation().as_deref(),
        Some("this graph's program was on disk but its file was damaged (see the warning)")
    );
    assert!(log.contains("WARN") && log.contains("corrupt") && log.contains(&key(c).hex()[..16]), "{log}");
    let (_, log) = capture_warnings(|| lookup(&cache, c, &calls));
    assert!(log.is_empty(), "{log}");
    assert_eq!(run(&exe), [1., 2., 3., 4.].map(|x: f32| x + c as f32));
    let s = cache.stats();
    assert_eq!((s.corrupt_files, s.disk_hits, s.compiles, s.disk_writes), (1, 0, 1, 1));
    // Rewritten: a later cache loads it without compiling.
    let later = ProgramCache::new(dir.config(8));
    let (exe, tier) =
        later.get_or_compile(&client(), &key(c), &summary(c), || panic!("rewritten file must load")).unwrap();
    assert_eq!(tier, Tier::Disk);
    assert_eq!(later.stats().corrupt_files, 0);
    assert_eq!(run(&exe), [1., 2., 3., 4.].map(|x: f32| x + c as f32));
}

#[test]
fn damaged_files_are_recovered() {
    let dir = TempDir::new("corrupt");
    {
        let cache = ProgramCache::new(dir.config(8));
        let calls = Cell::new(0);
        for c in [1, 2, 3, 4] {
            lookup(&cache, c, &calls);
        }
        assert_eq!(cache.stats().disk_writes, 4);
    }
    // A flipped byte in the middle of the payload: checksum mismatch.
    check_recovers(&dir, 1, |p| {
        let mut b = fs::read(p).unwrap();
        let mid = 52 + (b.len() - 52) / 2;
        b[mid] ^= 0x40;
        fs::write(p, b).unwrap();
    });
    // Truncated to half its length.
    check_recovers(&dir, 2, |p| {
        let b = fs::read(p).unwrap();
        fs::write(p, &b[..b.len() / 2]).unwrap();
    });
    // Truncated inside the header.
    check_recovers(&dir, 3, |p| fs::write(p, b"TTPUPRG1\x01").unwrap());
    // Well-formed and checksummed, but not an executable the plugin can load:
    // written here by hand from the documented format.
    check_recovers(&dir, 4, |p| {
        let exe = b"garbage that is not a serialized executable";
        let json = br#"{"nodes":[],"outputs":[]}"#;
        let mut payload = (exe.len() as u64).to_le_bytes().to_vec();
        payload.extend_from_slice(exe);
        payload.extend_from_slice(json);
        let mut file = b"TTPUPRG1".to_vec();
        file.extend_from_slice(&1u32.to_le_bytes());
        file.extend_from_slice(&(payload.len() as u64).to_le_bytes());
        file.extend_from_slice(&Sha256::digest(&payload));
        file.extend_from_slice(&payload);
        fs::write(p, file).unwrap();
    });
}

#[test]
fn disabled_cache_always_compiles() {
    let dir = TempDir::new("disabled");
    let cache = ProgramCache::new(CacheConfig { enabled: false, memory_entries: 8, dir: Some(dir.0.clone()) });
    assert!(!cache.enabled());
    let calls = Cell::new(0);
    for _ in 0..3 {
        let (exe, tier) = lookup(&cache, 5, &calls);
        assert_eq!(tier, Tier::Compiled);
        assert_eq!(run(&exe), [6., 7., 8., 9.]);
    }
    assert_eq!(calls.get(), 3);
    let s = cache.stats();
    assert_eq!((s.compiles, s.misses, s.memory_hits, s.disk_writes), (3, 3, 0, 0));
    assert!(dir.ttpu_files().is_empty());

    // Turned on, it caches; turned off again, it compiles without using it.
    cache.set_enabled(true);
    lookup(&cache, 5, &calls);
    assert_eq!(lookup(&cache, 5, &calls).1, Tier::Memory);
    cache.set_enabled(false);
    assert_eq!(lookup(&cache, 5, &calls).1, Tier::Compiled);
    assert_eq!(calls.get(), 5);
}

#[test]
fn clear_removes_memory_and_files() {
    let dir = TempDir::new("clear");
    fs::write(dir.0.join("notes.txt"), b"not ours").unwrap();
    let cache = ProgramCache::new(dir.config(8));
    let calls = Cell::new(0);
    lookup(&cache, 1, &calls);
    lookup(&cache, 2, &calls);
    assert_eq!(dir.ttpu_files().len(), 2);
    cache.clear().unwrap();
    assert!(dir.ttpu_files().is_empty());
    assert!(dir.0.join("notes.txt").exists(), "clear() deletes only cache files");
    assert_eq!(cache.last_miss_explanation(), None);
    assert_eq!(lookup(&cache, 1, &calls).1, Tier::Compiled);
    assert_eq!(calls.get(), 3);
    assert_eq!(cache.last_miss_explanation().as_deref(), Some("first graph compiled (no cached programs)"));
}

#[test]
fn unusable_directory_falls_back_to_memory() {
    let dir = TempDir::new("unusable");
    let file = dir.0.join("a-file");
    fs::write(&file, b"x").unwrap();
    // The cache directory would have to be inside a regular file.
    let cache = ProgramCache::new(CacheConfig { enabled: true, memory_entries: 8, dir: Some(file.join("cache")) });
    let calls = Cell::new(0);
    let ((exe, tier), log) = capture_warnings(|| lookup(&cache, 7, &calls));
    assert_eq!(tier, Tier::Compiled);
    assert_eq!(log.lines().count(), 1, "one warning: {log}");
    assert!(log.contains("memory tier"), "{log}");
    assert_eq!(run(&exe), [8., 9., 10., 11.]);
    assert_eq!(lookup(&cache, 7, &calls).1, Tier::Memory);
    // Another miss fails to write too, without warning again.
    let (_, log) = capture_warnings(|| lookup(&cache, 8, &calls));
    assert!(log.is_empty(), "{log}");
    let s = cache.stats();
    assert_eq!((s.disk_writes, s.compiles, s.memory_hits, s.corrupt_files), (0, 2, 1, 0));
    let err = cache.clear().unwrap_err();
    assert!(err.to_string().contains("a-file"), "{err}");
}

#[test]
fn concurrent_misses_compile_once() {
    let cache = Arc::new(memory_only(8));
    let compiles = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let (cache, compiles) = (cache.clone(), compiles.clone());
            std::thread::spawn(move || {
                let (exe, _) = cache
                    .get_or_compile(&client(), &key(30), &summary(30), || {
                        compiles.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        compile(30)
                    })
                    .unwrap();
                run(&exe)
            })
        })
        .collect();
    for t in threads {
        assert_eq!(t.join().unwrap(), [31., 32., 33., 34.]);
    }
    assert_eq!(compiles.load(std::sync::atomic::Ordering::SeqCst), 1);
    let s = cache.stats();
    assert_eq!((s.compiles, s.misses, s.memory_hits), (1, 1, 3));
}

#[test]
fn failed_compile_is_an_error_and_stores_nothing() {
    let cache = memory_only(8);
    let bad = CacheKey::new("not stablehlo", b"", "xla-cpu-test");
    let Err(err) = cache.get_or_compile(&client(), &bad, &GraphSummary::default(), || {
        client().compile("bad", "not stablehlo", &CompileOptions::Portable)
    }) else {
        panic!("compiling garbage must fail")
    };
    assert!(err.to_string().contains("compiling bad failed"), "{err}");
    let calls = Cell::new(0);
    let r = cache.get_or_compile(&client(), &bad, &GraphSummary::default(), || {
        calls.set(1);
        compile(1)
    });
    assert!(r.is_ok());
    assert_eq!(calls.get(), 1, "a failed compile must not be cached");
    assert_eq!(cache.stats().compiles, 2);
}

// ---------------------------------------------------------------------------
// explain()

fn node(op: &str, inputs: &[(DType, &[i64])], attrs: &str) -> NodeSummary {
    NodeSummary {
        op: op.into(),
        inputs: inputs.iter().map(|(d, s)| (*d, s.to_vec())).collect(),
        attrs: attrs.into(),
        views: Vec::new(),
    }
}

/// A 3-node graph: mm, add, sum.
fn mlp(k: i64, dtype: DType, sum_dim: &str) -> GraphSummary {
    GraphSummary {
        nodes: vec![
            node("aten::mm", &[(dtype, &[8, k]), (dtype, &[k, 4])], ""),
            node("aten::add.Tensor", &[(dtype, &[8, 4]), (dtype, &[4])], "alpha=1"),
            node("aten::sum.dim_IntList", &[(dtype, &[8, 4])], sum_dim),
        ],
        outputs: vec![(dtype, vec![4])],
        strict: false,
    }
}

#[test]
fn explain_with_nothing_known() {
    assert_eq!(explain(&mlp(16, DType::F32, "dim=[0]"), &[]), "first graph compiled (no cached programs)");
}

#[test]
fn explain_names_a_shape_change() {
    let known = [mlp(16, DType::F32, "dim=[0]")];
    assert_eq!(
        explain(&mlp(32, DType::F32, "dim=[0]"), &known),
        "no cached program matches: nearest cached graph (3 nodes) differs at node 0 (aten::mm): \
         input 0 shape [8, 32] vs [8, 16]"
    );
}

#[test]
fn explain_names_a_dtype_change() {
    let known = [mlp(16, DType::F32, "dim=[0]")];
    assert_eq!(
        explain(&mlp(16, DType::BF16, "dim=[0]"), &known),
        "no cached program matches: nearest cached graph (3 nodes) differs at node 0 (aten::mm): \
         input 0 dtype bfloat16 vs float32; 3 nodes differ in all"
    );
}

#[test]
fn explain_names_an_attribute_change() {
    let known = [mlp(16, DType::F32, "dim=[0]")];
    assert_eq!(
        explain(&mlp(16, DType::F32, "dim=[1]"), &known),
        "no cached program matches: nearest cached graph (3 nodes) differs at node 2 (aten::sum.dim_IntList): \
         attributes \"dim=[1]\" vs \"dim=[0]\""
    );
}

#[test]
fn explain_names_an_op_change() {
    let known = [mlp(16, DType::F32, "dim=[0]")];
    let mut g = mlp(16, DType::F32, "dim=[0]");
    g.nodes[1].op = "aten::mul.Tensor".into();
    g.nodes[1].attrs = String::new();
    assert_eq!(
        explain(&g, &known),
        "no cached program matches: nearest cached graph (3 nodes) differs at node 1: op aten::mul.Tensor vs aten::add.Tensor"
    );
}

#[test]
fn explain_picks_the_nearest_graph() {
    // A different graph first, then the one that differs only in a shape.
    let mut other = mlp(16, DType::F32, "dim=[0]");
    other.nodes[0].op = "aten::bmm".into();
    other.nodes[1].op = "aten::sub.Tensor".into();
    let known = [other, mlp(16, DType::F32, "dim=[0]")];
    assert!(explain(&mlp(64, DType::F32, "dim=[0]"), &known)
        .ends_with("differs at node 0 (aten::mm): input 0 shape [8, 64] vs [8, 16]"));
}

#[test]
fn explain_node_count_and_outputs() {
    let base = mlp(16, DType::F32, "dim=[0]");
    let mut longer = base.clone();
    longer.nodes.push(node("aten::relu", &[(DType::F32, &[4])], ""));
    assert_eq!(
        explain(&longer, std::slice::from_ref(&base)),
        "no cached program matches: nearest cached graph (3 nodes) differs in node count: 4 nodes vs 3 \
         (first extra node 3: aten::relu)"
    );
    let mut more_outputs = base.clone();
    more_outputs.outputs.push((DType::F32, vec![8, 4]));
    assert_eq!(
        explain(&more_outputs, std::slice::from_ref(&base)),
        "no cached program matches: nearest cached graph (3 nodes) differs in outputs: 2 outputs vs 1"
    );
    assert!(explain(&base, std::slice::from_ref(&base)).contains("has the same ops"));
}
