//! Matrix specs expand as documented, and `run_matrix` is generic over the engine: a wrapper
//! engine that refuses atomic writes (as the keel store will on file systems without them) shows
//! the refused configuration as skipped with its reason, and the memory baseline row is added;
//! another, refusing to open with other creation-time knobs (as the store does), shows that such
//! configurations run on loads of their own.

use keel_tpcc::config::StoreConfig;
use keel_tpcc::engine::{Engine, EngineError, EngineResult, EngineStats};
use keel_tpcc::matrix::{creation_knobs, run_matrix, MatrixOptions, MatrixSpec};
use keel_tpcc::memory::{MemRead, MemWrite};
use keel_tpcc::MemoryEngine;
use std::path::Path;
use std::time::Duration;

#[test]
fn specs_expand_configs_times_axes_in_order() {
    let s = MatrixSpec::parse(
        r#"
name = "x"
terminals = 3
[base]
pool_size = "12MiB"
[[config]]
name = "dw"
torn_page = "doublewrite"
[[config]]
name = "at"
torn_page = "atomic"
terminals = 5
[axes]
checksum = ["crc32c", "none"]
terminals = [1, 64]
"#,
        "x.toml",
    )
    .unwrap();
    let names: Vec<&str> = s.entries.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "dw checksum=crc32c T=1",
            "dw checksum=crc32c T=64",
            "dw checksum=none T=1",
            "dw checksum=none T=64",
            "at checksum=crc32c T=1",
            "at checksum=crc32c T=64",
            "at checksum=none T=1",
            "at checksum=none T=64",
        ]
    );
    let e = &s.entries[7];
    let k = e.store.keel_config().unwrap();
    assert_eq!(
        (k.torn_page, k.pool_size, e.terminals),
        (keel::TornPage::Atomic, 12 << 20, 64)
    );
    assert_eq!(k.checksum, keel::Checksum::None);
    // Defaults.
    assert_eq!(
        (s.repeats, s.duration, s.warehouses),
        (3, Duration::from_secs(60), 1)
    );
}

#[test]
fn writers_is_a_workload_key_per_spec_config_and_axis() {
    use keel_tpcc::txn::WriterMode;
    let s = MatrixSpec::parse(
        r#"
name = "w"
writers = "exclusive"
[[config]]
name = "default"
[[config]]
name = "cc"
writers = "concurrent"
"#,
        "w.toml",
    )
    .unwrap();
    assert_eq!(s.writers, WriterMode::Exclusive);
    let modes: Vec<_> = s
        .entries
        .iter()
        .map(|e| (e.name.as_str(), e.writers))
        .collect();
    assert_eq!(
        modes,
        [
            ("default", WriterMode::Exclusive),
            ("cc", WriterMode::Concurrent)
        ]
    );
    let s = MatrixSpec::parse(
        "name = \"w\"\n[axes]\nwriters = [\"concurrent\", \"exclusive\"]",
        "w.toml",
    )
    .unwrap();
    let modes: Vec<_> = s
        .entries
        .iter()
        .map(|e| (e.name.as_str(), e.writers))
        .collect();
    assert_eq!(
        modes,
        [
            ("writers=concurrent", WriterMode::Concurrent),
            ("writers=exclusive", WriterMode::Exclusive)
        ]
    );
    // The default is concurrent.
    let s = MatrixSpec::parse("name = \"w\"", "w.toml").unwrap();
    assert_eq!(s.entries[0].writers, WriterMode::Concurrent);
}

#[test]
fn bad_specs_are_refused_naming_the_file_and_key() {
    for (text, want) in [
        ("description = \"no name\"", "missing `name`"),
        ("name = \"x\"\nrepeets = 3", "repeets"),
        (
            "name = \"x\"\n[[config]]\nname = \"a\"\n[[config]]\nname = \"a\"",
            "two configurations",
        ),
        (
            "name = \"x\"\n[[config]]\nlog_block_size = 1000",
            "log_block_size",
        ),
        ("name = \"x\"\n[axes]\ntorn_page = []", "empty"),
        ("name = \"x\"\n[axes]\nterminals = [0]", "terminals"),
        (
            "name = \"x\"\n[[config]]\nname = \"a\"\nengine = \"rocksdb\"",
            "engine = \"rocksdb\" is not one of keel, memory, sqlite, redb",
        ),
        ("name = \"x\"\nwriters = \"many\"", "writers"),
        (
            "name = \"x\"\n[[config]]\nname = \"a\"\nwriters = 1",
            "a: writers = 1",
        ),
        ("name = \"x\"\n[axes]\nwriters = [\"both\"]", "writers"),
    ] {
        let e = MatrixSpec::parse(text, "spec.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("spec.toml") && e.contains(want), "{text:?}: {e}");
    }
}

#[test]
fn shipped_specs_parse() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("matrices");
    let mut n = 0;
    for (file, configs) in [
        ("e1-torn-page.toml", 5),
        ("e2-init-on-flush.toml", 2),
        ("e3-atomic-checksum.toml", 12),
        ("e4-log-files.toml", 12),
        ("e5-log-block.toml", 4),
        ("e6-writers.toml", 2),
        ("peers.toml", 3),
    ] {
        let s = MatrixSpec::from_file(&dir.join(file)).unwrap();
        assert_eq!(s.entries.len(), configs, "{file}");
        assert!(
            !s.published.is_empty() && !s.description.is_empty(),
            "{file}"
        );
        // The I/O-bound shape the seeds measured (issue 14): 10 warehouses (about 900 MB of
        // data) behind a pool of about a quarter of it, O_DIRECT (the default), 3 repeats.
        assert!(s.warehouses >= 10, "{file}: {} warehouses", s.warehouses);
        assert!(s.repeats >= 3, "{file}: {} repeats", s.repeats);
        for e in &s.entries {
            let k = e.store.keel_config().unwrap();
            assert!(
                k.pool_size <= 256 << 20,
                "{file} {}: pool {}",
                e.name,
                k.pool_size
            );
            assert!(k.direct_io, "{file} {}: O_DIRECT", e.name);
        }
        n += 1;
    }
    let peers = MatrixSpec::from_file(&dir.join("peers.toml")).unwrap();
    let engines: Vec<Option<&str>> = peers.entries.iter().map(|e| e.engine.as_deref()).collect();
    assert_eq!(engines, [None, Some("sqlite"), Some("redb")]);
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        n,
        "every shipped spec is tested"
    );
}

/// The memory engine, refusing `torn_page = atomic` like a store on a file system without atomic
/// writes: an adapter-shaped wrapper proving the matrix needs nothing but the trait.
struct NoAtomic(MemoryEngine);

impl Engine for NoAtomic {
    type Write<'a> = MemWrite<'a>;
    type Read<'a> = MemRead<'a>;
    const LABEL: &'static str = "no-atomic test engine";
    const DURABLE: bool = false;
    const HONOURS_CONFIG: bool = true;
    fn open(dir: &Path, config: &StoreConfig) -> EngineResult<Self> {
        if config.get("torn_page").and_then(|v| v.as_str()) == Some("atomic") {
            return Err(EngineError::Unsupported(
                "this file system has no atomic writes (EOPNOTSUPP)".into(),
            ));
        }
        Ok(NoAtomic(MemoryEngine::open(dir, config)?))
    }
    fn write(&self) -> EngineResult<MemWrite<'_>> {
        self.0.write()
    }
    fn read(&self) -> EngineResult<MemRead<'_>> {
        self.0.read()
    }
    fn checkpoint(&self) -> EngineResult<()> {
        self.0.checkpoint()
    }
    fn stats(&self) -> EngineStats {
        self.0.stats()
    }
}

#[test]
fn unsupported_configurations_are_listed_as_skipped_with_the_reason() {
    let spec = MatrixSpec::parse(
        r#"
name = "skip"
terminals = 1
duration = 0.5
warmup = 0
interval = 0.25
repeats = 1
load_per_config = true
memory_baseline = true
[[config]]
name = "doublewrite"
torn_page = "doublewrite"
[[config]]
name = "atomic"
torn_page = "atomic"
"#,
        "skip.toml",
    )
    .unwrap();
    let t = tempfile::tempdir().unwrap();
    let opts = MatrixOptions {
        out: t.path().to_path_buf(),
        items: Some(1000),
        ..MatrixOptions::default()
    };
    let (rows, ok) = run_matrix::<NoAtomic>(&spec, &opts).unwrap();
    assert!(ok);
    let names: Vec<&str> = rows.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["doublewrite", "atomic", "memory (no durability)"]);
    assert_eq!(rows[0].runs.len(), 1);
    assert!(rows[0].load.is_some(), "load_per_config records the load");
    assert_eq!(
        rows[1].skipped.as_deref(),
        Some("this file system has no atomic writes (EOPNOTSUPP)")
    );
    assert!(rows[1].runs.is_empty());
    assert_eq!(rows[2].engine, "memory (no durability)");
    let md = std::fs::read_to_string(t.path().join("report.md")).unwrap();
    assert!(
        md.contains("| atomic | skipped |")
            && md.contains("Skipped atomic: this file system has no atomic writes"),
        "{md}"
    );
    assert!(
        !md.contains("recorded here but have no effect"),
        "the wrapper honours its config: {md}"
    );
}

/// The memory engine, refusing to open a directory with other creation-time knobs than it was
/// created with (as the keel store refuses another log block size, checksum or page size).
struct Fixed(MemoryEngine);

const FIXED_FILE: &str = "creation-knobs.toml";

impl Engine for Fixed {
    type Write<'a> = MemWrite<'a>;
    type Read<'a> = MemRead<'a>;
    const LABEL: &'static str = "fixed-knobs test engine";
    const DURABLE: bool = false;
    const HONOURS_CONFIG: bool = true;
    fn open(dir: &Path, config: &StoreConfig) -> EngineResult<Self> {
        let want = creation_knobs(config).to_toml();
        let file = dir.join(FIXED_FILE);
        match std::fs::read_to_string(&file) {
            Ok(have) if have != want => {
                return Err(EngineError::Store(
                    format!("created with {have:?}, opened with {want:?}").into(),
                ))
            }
            Ok(_) => {}
            Err(_) => {
                std::fs::create_dir_all(dir).unwrap();
                std::fs::write(&file, &want).unwrap();
            }
        }
        Ok(Fixed(MemoryEngine::open(dir, config)?))
    }
    fn write(&self) -> EngineResult<MemWrite<'_>> {
        self.0.write()
    }
    fn read(&self) -> EngineResult<MemRead<'_>> {
        self.0.read()
    }
    fn checkpoint(&self) -> EngineResult<()> {
        self.0.checkpoint()
    }
    fn stats(&self) -> EngineStats {
        self.0.stats()
    }
}

#[test]
fn configurations_with_other_creation_knobs_get_their_own_load() {
    let spec = MatrixSpec::parse(
        r#"
name = "creation"
terminals = 1
duration = 0.3
warmup = 0
interval = 0.3
repeats = 1
[base]
log_block_size = 4096
[[config]]
name = "block 4096"
[[config]]
name = "block 512"
log_block_size = 512
[[config]]
name = "block 4096 again, other run knob"
torn_page = "none"
[axes]
checksum = ["crc32c", "none"]
"#,
        "creation.toml",
    )
    .unwrap();
    let t = tempfile::tempdir().unwrap();
    let opts = MatrixOptions {
        out: t.path().to_path_buf(),
        items: Some(1000),
        keep_data: true,
        ..MatrixOptions::default()
    };
    let (rows, ok) = run_matrix::<Fixed>(&spec, &opts).unwrap();
    assert!(ok);
    assert_eq!(rows.len(), 6);
    for r in &rows {
        assert!(r.skipped.is_none() && r.runs.len() == 1, "{}", r.name);
    }
    // One shared load per distinct set of creation-time knobs (block size × checksum: four
    // sets for six rows). Loading once with the base's knobs, as before, fails to open.
    let loads = std::fs::read_dir(t.path().join("data"))
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("loaded-"))
        .count();
    assert_eq!(loads, 4);
    assert_eq!(
        creation_knobs(
            &StoreConfig::default()
                .with("torn_page", "none")
                .with("page_size", 8192)
        ),
        StoreConfig::default().with("page_size", 8192)
    );
}
