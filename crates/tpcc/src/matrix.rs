//! Configuration matrices (`keel-tpcc matrix --spec FILE.toml`): a list of store configurations
//! (explicit `[[config]]` entries, crossed with `[axes]`), run in interleaved repeats
//! (A B C A B C …) from the same loaded copy, then `report.md`, `notpm.svg`, `medians.svg` and
//! `matrix.json`.
//!
//! Spec format (all keys but `name` optional):
//!
//! ```toml
//! name = "e1-torn-page"
//! description = "what the matrix asks"
//! published = "what the seed experiment found"
//! warehouses = 1        # loaded once (or once per configuration, see load_per_config)
//! terminals = 4
//! duration = 60         # measured seconds per run
//! warmup = 10
//! interval = 10
//! repeats = 3
//! seed = 1
//! load_per_config = false  # true: each configuration loads its own copy (load-time knobs)
//!                          # (without it, one shared load per set of creation-time knobs:
//!                          # page_size, checksum, log_block_size, log_files, log_file_size)
//! check = true             # consistency check after every run
//! memory_baseline = false  # add a "memory (no durability)" row (ignored when the engine is it)
//! [base]                   # store knobs for every configuration
//! page_size = 16384
//! [[config]]
//! name = "doublewrite"
//! torn_page = "doublewrite"
//! [axes]                   # cartesian product with the configs; `terminals` is allowed too
//! checksum = ["crc32c", "legacy", "none"]
//! terminals = [1, 4]
//! ```
//!
//! Invariants: runs are interleaved (repeat r of every configuration runs before repeat r+1 of
//! any); every run starts from a fresh copy of the same loaded directory; a configuration the
//! engine reports as unsupported is listed as skipped with the engine's reason, never dropped
//! silently; a configuration whose creation-time knobs ([`creation_knobs`]) differ from the base
//! runs on its own load made with those knobs (a store refuses to open files created with other
//! ones).

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::check::check;
use crate::config::StoreConfig;
use crate::driver::{run_workload, write_run_files, RunOptions, RunResult};
use crate::engine::{Engine, EngineError};
use crate::error::{TpccError, TpccResult};
use crate::fsmount::{copy_dir, FsKind, Mounted};
use crate::load::{load, LoadOptions, LoadReport};
use crate::memory::MemoryEngine;
use crate::report::{draw_medians, draw_notpm, render_markdown, ConfigResult, ReportMeta};

/// A parsed matrix spec.
#[derive(Debug, Clone)]
pub struct MatrixSpec {
    /// Name (report title, default output directory).
    pub name: String,
    /// Description.
    pub description: String,
    /// The published result it reproduces.
    pub published: String,
    /// Warehouses.
    pub warehouses: u16,
    /// Default terminals.
    pub terminals: usize,
    /// Measured seconds per run.
    pub duration: Duration,
    /// Warm-up per run.
    pub warmup: Duration,
    /// Report interval.
    pub interval: Duration,
    /// Repeats of every configuration.
    pub repeats: usize,
    /// Loader and terminal seed.
    pub seed: u64,
    /// Load once per configuration instead of once for all.
    pub load_per_config: bool,
    /// Check consistency after every run.
    pub check: bool,
    /// Add a memory-engine baseline row.
    pub memory_baseline: bool,
    /// Knobs for all configurations.
    pub base: StoreConfig,
    /// The expanded configurations.
    pub entries: Vec<Entry>,
}

/// One configuration of a matrix.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// Row name.
    pub name: String,
    /// Store knobs (base overlaid with the entry's own and the axes').
    pub store: StoreConfig,
    /// Terminals for this configuration.
    pub terminals: usize,
}

fn spec_err(file: &str, detail: impl Into<String>) -> TpccError {
    TpccError::Config {
        origin: file.to_string(),
        detail: detail.into(),
    }
}

fn get_u64(t: &toml::Table, key: &str, default: u64, file: &str) -> TpccResult<u64> {
    match t.get(key) {
        None => Ok(default),
        Some(toml::Value::Integer(i)) if *i >= 0 => Ok(*i as u64),
        Some(toml::Value::Float(f)) if *f >= 0.0 => Ok(*f as u64),
        Some(v) => Err(spec_err(
            file,
            format!("{key} must be a non-negative number, not {v}"),
        )),
    }
}

fn get_secs(t: &toml::Table, key: &str, default: f64, file: &str) -> TpccResult<Duration> {
    match t.get(key) {
        None => Ok(Duration::from_secs_f64(default)),
        Some(toml::Value::Integer(i)) if *i >= 0 => Ok(Duration::from_secs(*i as u64)),
        Some(toml::Value::Float(f)) if *f >= 0.0 => Ok(Duration::from_secs_f64(*f)),
        Some(v) => Err(spec_err(file, format!("{key} must be seconds, not {v}"))),
    }
}

fn get_str(t: &toml::Table, key: &str) -> String {
    t.get(key)
        .and_then(|v| v.as_str())
        .unwrap_or_default()
        .to_string()
}

fn get_bool(t: &toml::Table, key: &str, default: bool, file: &str) -> TpccResult<bool> {
    match t.get(key) {
        None => Ok(default),
        Some(toml::Value::Boolean(b)) => Ok(*b),
        Some(v) => Err(spec_err(
            file,
            format!("{key} must be true or false, not {v}"),
        )),
    }
}

fn value_label(v: &toml::Value) -> String {
    match v {
        toml::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

const TOP_KEYS: &[&str] = &[
    "name",
    "description",
    "published",
    "warehouses",
    "terminals",
    "duration",
    "warmup",
    "interval",
    "repeats",
    "seed",
    "load_per_config",
    "check",
    "memory_baseline",
    "base",
    "config",
    "axes",
];

impl MatrixSpec {
    /// Reads and expands a spec file.
    pub fn from_file(path: &Path) -> TpccResult<MatrixSpec> {
        let text = std::fs::read_to_string(path).map_err(|e| TpccError::io(path, e))?;
        MatrixSpec::parse(&text, &path.display().to_string())
    }

    /// Parses and expands spec text (`file` names it in errors).
    pub fn parse(text: &str, file: &str) -> TpccResult<MatrixSpec> {
        let t: toml::Table = toml::from_str(text).map_err(|e| spec_err(file, e.to_string()))?;
        for k in t.keys() {
            if !TOP_KEYS.contains(&k.as_str()) {
                return Err(spec_err(file, format!("unknown key {k:?}")));
            }
        }
        let name = get_str(&t, "name");
        if name.is_empty() {
            return Err(spec_err(file, "missing `name`"));
        }
        let warehouses = get_u64(&t, "warehouses", 1, file)?;
        if !(1..=u16::MAX as u64).contains(&warehouses) {
            return Err(spec_err(file, "warehouses must be 1..=65535"));
        }
        let terminals = get_u64(&t, "terminals", 4, file)? as usize;
        let base = match t.get("base") {
            None => StoreConfig::default(),
            Some(toml::Value::Table(b)) => {
                StoreConfig::from_toml_table(b, &format!("{file} [base]"))?
            }
            Some(_) => return Err(spec_err(file, "[base] must be a table")),
        };

        // Explicit configurations.
        let mut entries: Vec<Entry> = Vec::new();
        match t.get("config") {
            None => entries.push(Entry {
                name: String::new(),
                store: base.clone(),
                terminals,
            }),
            Some(toml::Value::Array(a)) => {
                for (i, v) in a.iter().enumerate() {
                    let toml::Value::Table(c) = v else {
                        return Err(spec_err(
                            file,
                            format!("[[config]] #{} is not a table", i + 1),
                        ));
                    };
                    let mut knobs = c.clone();
                    let cname = knobs
                        .remove("name")
                        .map(|v| value_label(&v))
                        .unwrap_or_else(|| format!("config{}", i + 1));
                    let terms = match knobs.remove("terminals") {
                        Some(toml::Value::Integer(n)) if n > 0 => n as usize,
                        Some(v) => {
                            return Err(spec_err(
                                file,
                                format!("{cname}: terminals = {v} is not a positive integer"),
                            ))
                        }
                        None => terminals,
                    };
                    let own =
                        StoreConfig::from_toml_table(&knobs, &format!("{file} config {cname}"))?;
                    entries.push(Entry {
                        name: cname,
                        store: base.overlay(&own),
                        terminals: terms,
                    });
                }
            }
            Some(_) => {
                return Err(spec_err(
                    file,
                    "`config` must be an array of tables ([[config]])",
                ))
            }
        }

        // Axes: cartesian product, in the order the axes are written.
        if let Some(axes) = t.get("axes") {
            let toml::Value::Table(axes) = axes else {
                return Err(spec_err(file, "[axes] must be a table"));
            };
            for (key, vals) in axes {
                let toml::Value::Array(vals) = vals else {
                    return Err(spec_err(file, format!("axis {key} must be an array")));
                };
                if vals.is_empty() {
                    return Err(spec_err(file, format!("axis {key} is empty")));
                }
                let mut next = Vec::new();
                for e in &entries {
                    for v in vals {
                        let label = if key == "terminals" {
                            format!("T={}", value_label(v))
                        } else {
                            format!("{key}={}", value_label(v))
                        };
                        let name = if e.name.is_empty() {
                            label
                        } else {
                            format!("{} {label}", e.name)
                        };
                        let mut ne = e.clone();
                        ne.name = name;
                        if key == "terminals" {
                            match v {
                                toml::Value::Integer(n) if *n > 0 => ne.terminals = *n as usize,
                                _ => {
                                    return Err(spec_err(
                                        file,
                                        format!(
                                            "terminals axis value {v} is not a positive integer"
                                        ),
                                    ))
                                }
                            }
                        } else {
                            let mut one = toml::Table::new();
                            one.insert(key.clone(), v.clone());
                            let knob =
                                StoreConfig::from_toml_table(&one, &format!("{file} axis {key}"))?;
                            ne.store = ne.store.overlay(&knob);
                        }
                        next.push(ne);
                    }
                }
                entries = next;
            }
        }
        for (i, e) in entries.iter_mut().enumerate() {
            if e.name.is_empty() {
                e.name = format!("config{}", i + 1);
            }
        }
        let mut seen = std::collections::HashSet::new();
        for e in &entries {
            if !seen.insert(e.name.clone()) {
                return Err(spec_err(
                    file,
                    format!("two configurations are named {:?}", e.name),
                ));
            }
        }
        Ok(MatrixSpec {
            name,
            description: get_str(&t, "description"),
            published: get_str(&t, "published"),
            warehouses: warehouses as u16,
            terminals,
            duration: get_secs(&t, "duration", 60.0, file)?,
            warmup: get_secs(&t, "warmup", 10.0, file)?,
            interval: get_secs(&t, "interval", 10.0, file)?,
            repeats: get_u64(&t, "repeats", 3, file)?.max(1) as usize,
            seed: get_u64(&t, "seed", 1, file)?,
            load_per_config: get_bool(&t, "load_per_config", false, file)?,
            check: get_bool(&t, "check", true, file)?,
            memory_baseline: get_bool(&t, "memory_baseline", false, file)?,
            base,
            entries,
        })
    }
}

/// Command-line overrides and placement of a matrix.
#[derive(Debug, Clone, Default)]
pub struct MatrixOptions {
    /// Output directory.
    pub out: PathBuf,
    /// Measured seconds override.
    pub duration: Option<Duration>,
    /// Warm-up override.
    pub warmup: Option<Duration>,
    /// Interval override.
    pub interval: Option<Duration>,
    /// Repeats override.
    pub repeats: Option<usize>,
    /// Warehouses override.
    pub warehouses: Option<u16>,
    /// File systems to run every configuration on (root only).
    pub fs: Vec<FsKind>,
    /// Size of each loop image, bytes.
    pub fs_image_size: u64,
    /// Keep the loaded data and run copies.
    pub keep_data: bool,
    /// Items (tests only).
    pub items: Option<u32>,
    /// Store knobs given on the command line, overlaid on every configuration.
    pub cli_store: StoreConfig,
}

#[derive(Clone, Copy, PartialEq)]
enum Which {
    Main,
    Memory,
}

struct Row {
    entry: Entry,
    which: Which,
    fs: Option<FsKind>,
    data_root: PathBuf,
    loaded: Option<PathBuf>,
    result: ConfigResult,
}

/// The knobs fixed when a store is created (a store refuses to open with other values): page
/// size, page checksum, log block size, log file mode and log file size. The rest of `s` is unset.
pub fn creation_knobs(s: &StoreConfig) -> StoreConfig {
    s.creation_keys()
}

fn load_into<F: Engine>(
    dir: &Path,
    store: &StoreConfig,
    lo: &LoadOptions,
) -> TpccResult<LoadReport> {
    if dir.exists() {
        std::fs::remove_dir_all(dir).map_err(|e| TpccError::io(dir, e))?;
    }
    let engine = F::open(dir, store)?;
    load(&engine, lo)
}

fn run_copy<F: Engine>(
    loaded: &Path,
    run_dir: &Path,
    store: &StoreConfig,
    ro: &RunOptions,
    do_check: bool,
) -> TpccResult<(RunResult, Option<bool>, String)> {
    copy_dir(loaded, run_dir)?;
    let engine = F::open(run_dir, store)?;
    let r = run_workload(&engine, ro)?;
    let (ok, text) = if do_check {
        let c = check(&engine)?;
        (Some(c.all_passed()), c.render())
    } else {
        (None, String::new())
    };
    drop(engine);
    Ok((r, ok, text))
}

fn slug(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

fn machine_line() -> String {
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "?".into());
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    format!("Linux {kernel}, {cpus} CPUs")
}

/// Runs a matrix with engine `E` (plus the memory baseline when asked), writing the report files
/// into `opts.out`. Returns the rows and whether every check passed.
pub fn run_matrix<E: Engine>(
    spec: &MatrixSpec,
    opts: &MatrixOptions,
) -> TpccResult<(Vec<ConfigResult>, bool)> {
    let warehouses = opts.warehouses.unwrap_or(spec.warehouses);
    let duration = opts.duration.unwrap_or(spec.duration);
    let warmup = opts.warmup.unwrap_or(spec.warmup);
    let interval = opts.interval.unwrap_or(spec.interval);
    let repeats = opts.repeats.unwrap_or(spec.repeats).max(1);
    let out = &opts.out;
    std::fs::create_dir_all(out).map_err(|e| TpccError::io(out, e))?;
    let data = out.join("data");

    // File systems.
    let mut mounts: Vec<Mounted> = Vec::new();
    let mut places: Vec<(Option<FsKind>, PathBuf)> = Vec::new();
    if opts.fs.is_empty() {
        places.push((None, data.clone()));
    } else {
        crate::fsmount::require_root()?;
        for &k in &opts.fs {
            let m = Mounted::create(k, &out.join("fs"), opts.fs_image_size)?;
            println!("mounted {} at {}", k.name(), m.mountpoint.display());
            places.push((Some(k), m.mountpoint.clone()));
            mounts.push(m);
        }
    }

    let mut rows: Vec<Row> = Vec::new();
    for (fs, root) in &places {
        for e in &spec.entries {
            let mut entry = e.clone();
            entry.store = entry.store.overlay(&opts.cli_store);
            let name = match fs {
                Some(k) => format!("{} @{}", entry.name, k.name()),
                None => entry.name.clone(),
            };
            rows.push(Row {
                result: ConfigResult {
                    name,
                    description: describe_entry(&entry),
                    engine: E::LABEL.to_string(),
                    skipped: None,
                    runs: Vec::new(),
                    checks_passed: None,
                    load: None,
                },
                entry,
                which: Which::Main,
                fs: *fs,
                data_root: root.clone(),
                loaded: None,
            });
        }
        if spec.memory_baseline && E::LABEL != MemoryEngine::LABEL {
            let name = match fs {
                Some(k) => format!("{} @{}", MemoryEngine::LABEL, k.name()),
                None => MemoryEngine::LABEL.to_string(),
            };
            rows.push(Row {
                result: ConfigResult {
                    name,
                    description: "in-memory reference engine; store knobs have no effect".into(),
                    engine: MemoryEngine::LABEL.to_string(),
                    skipped: None,
                    runs: Vec::new(),
                    checks_passed: None,
                    load: None,
                },
                entry: Entry {
                    name: "memory".into(),
                    store: StoreConfig::default(),
                    terminals: spec.terminals,
                },
                which: Which::Memory,
                fs: *fs,
                data_root: root.clone(),
                loaded: None,
            });
        }
    }

    // Loads.
    let mut lo = LoadOptions::new(warehouses);
    lo.seed = spec.seed;
    lo.progress = true;
    if let Some(items) = opts.items {
        lo.items = items;
    }
    let mut shared: std::collections::HashMap<(Option<&'static str>, u8, String), PathBuf> =
        std::collections::HashMap::new();
    let base_store = spec.base.overlay(&opts.cli_store);
    let base_creation = creation_knobs(&base_store);
    for (i, row) in rows.iter_mut().enumerate() {
        let per_config = spec.load_per_config && row.which == Which::Main;
        let creation = if row.which == Which::Main {
            creation_knobs(&row.entry.store)
        } else {
            StoreConfig::default()
        };
        let creation_key = if creation == base_creation || row.which == Which::Memory {
            String::new()
        } else {
            creation.describe()
        };
        let key = (
            row.fs.map(FsKind::name),
            row.which as u8,
            creation_key.clone(),
        );
        if !per_config {
            if let Some(p) = shared.get(&key) {
                row.loaded = Some(p.clone());
                continue;
            }
        }
        let dir = if per_config {
            row.data_root.join(format!("loaded-{i}"))
        } else if row.which == Which::Memory {
            row.data_root.join("loaded-memory")
        } else if creation_key.is_empty() {
            row.data_root.join("loaded-main")
        } else {
            row.data_root.join(format!("loaded-main-{i}"))
        };
        let store = if per_config {
            row.entry.store.clone()
        } else if row.which == Which::Main {
            base_store.overlay(&creation)
        } else {
            base_store.clone()
        };
        println!(
            "loading {warehouses} warehouse(s) into {} ({}{})",
            dir.display(),
            if per_config {
                &row.result.name
            } else if creation_key.is_empty() {
                "shared by all configurations"
            } else {
                "shared by the configurations with these creation-time knobs"
            },
            if per_config {
                format!(": {}", store.describe())
            } else {
                String::new()
            }
        );
        let res = match row.which {
            Which::Main => load_into::<E>(&dir, &store, &lo),
            Which::Memory => load_into::<MemoryEngine>(&dir, &store, &lo),
        };
        match res {
            Ok(rep) => {
                println!("  loaded {} rows in {:.1} s", rep.rows, rep.seconds);
                if per_config {
                    row.result.load = Some(rep);
                } else {
                    shared.insert(key, dir.clone());
                }
                row.loaded = Some(dir);
            }
            Err(TpccError::Engine(EngineError::Unsupported(why))) => {
                println!("  skipped {}: {why}", row.result.name);
                row.result.skipped = Some(why);
            }
            Err(e) => return Err(e),
        }
    }

    // Interleaved runs.
    let mut all_ok = true;
    let total_runs = rows.iter().filter(|r| r.result.skipped.is_none()).count() * repeats;
    let mut n = 0;
    for rep in 0..repeats {
        for row in rows.iter_mut() {
            let Some(loaded) = row.loaded.clone() else {
                continue;
            };
            if row.result.skipped.is_some() {
                continue;
            }
            n += 1;
            println!(
                "== run {n}/{total_runs}: {} (repeat {}/{repeats}, {} terminals): {}",
                row.result.name,
                rep + 1,
                row.entry.terminals,
                row.entry.store.describe()
            );
            let ro = RunOptions {
                terminals: row.entry.terminals,
                duration,
                warmup,
                interval,
                max_transactions: None,
                seed: spec.seed.wrapping_add(rep as u64 * 1000),
                acked_log: None,
                label: format!("{} #{}", row.result.name, rep + 1),
                print: true,
            };
            let run_dir = row.data_root.join("run");
            let res = match row.which {
                Which::Main => run_copy::<E>(&loaded, &run_dir, &row.entry.store, &ro, spec.check),
                Which::Memory => {
                    run_copy::<MemoryEngine>(&loaded, &run_dir, &row.entry.store, &ro, spec.check)
                }
            };
            match res {
                Ok((r, ok, text)) => {
                    println!(
                        "   NOTPM {:.0}, p99 New-Order {:.2} ms{}",
                        r.notpm,
                        r.latency[0].p99_ms,
                        match ok {
                            Some(true) => ", consistency 1–12 OK",
                            Some(false) => ", CONSISTENCY FAILED",
                            None => "",
                        }
                    );
                    if ok == Some(false) {
                        print!("{text}");
                        all_ok = false;
                    }
                    row.result.checks_passed = match (row.result.checks_passed, ok) {
                        (Some(a), Some(b)) => Some(a && b),
                        (None, x) => x,
                        (x, None) => x,
                    };
                    let rdir = out
                        .join("runs")
                        .join(slug(&row.result.name))
                        .join(format!("r{}", rep + 1));
                    write_run_files(
                        &rdir,
                        &r,
                        serde_json::json!({
                            "configuration": row.result.name,
                            "store_config": row.entry.store,
                            "repeat": rep + 1,
                        }),
                    )?;
                    row.result.runs.push(r);
                }
                Err(TpccError::Engine(EngineError::Unsupported(why))) => {
                    println!("   skipped: {why}");
                    row.result.skipped = Some(why);
                }
                Err(e) => return Err(e),
            }
            if !opts.keep_data && run_dir.exists() {
                std::fs::remove_dir_all(&run_dir).map_err(|e| TpccError::io(&run_dir, e))?;
            }
        }
    }

    let results: Vec<ConfigResult> = rows.into_iter().map(|r| r.result).collect();
    let mut notes = Vec::new();
    if !E::HONOURS_CONFIG {
        notes.push(format!(
            "Engine: **{}**. The store knobs of each configuration are recorded here but have no effect on this engine, so every row measures the same thing: differences are noise. Plug in the durable keel store to measure the mechanisms.",
            E::LABEL
        ));
    } else {
        notes.push(format!("Engine: {}.", E::LABEL));
    }
    for r in results.iter().filter(|r| r.skipped.is_some()) {
        notes.push(format!(
            "Skipped {}: {}",
            r.name,
            r.skipped.clone().unwrap_or_default()
        ));
    }
    if !opts.fs.is_empty() {
        notes.push(format!(
            "File systems: loop-mounted {} images of {} (ext4-journal = ext4 data=journal; xfs with reflink).",
            opts.fs.iter().map(|k| k.name()).collect::<Vec<_>>().join(", "),
            crate::driver::bytes(opts.fs_image_size)
        ));
    }
    if let Some(items) = opts.items {
        notes.push(format!(
            "TEST SCALE: {items} items instead of 100,000 (--test-items)."
        ));
    }
    notes.push(format!("Machine: {}.", machine_line()));
    let meta = ReportMeta {
        name: spec.name.clone(),
        description: spec.description.clone(),
        published: spec.published.clone(),
        workload: format!(
            "Workload: {warehouses} warehouse(s); {} terminals unless the row says otherwise; {} s measured after {} s warm-up per run, {} s intervals; {repeats} repeats interleaved (A B C A B C …), each from a fresh copy of the same loaded data{}.",
            spec.terminals,
            secs(duration),
            secs(warmup),
            secs(interval),
            if spec.load_per_config { " (one load per configuration)" } else { "" }
        ),
        notes,
    };
    let md = render_markdown(&meta, &results);
    let p = out.join("report.md");
    std::fs::write(&p, &md).map_err(|e| TpccError::io(&p, e))?;
    draw_notpm(
        &out.join("notpm.svg"),
        &format!("{}: NOTPM per interval", spec.name),
        &results,
    )?;
    draw_medians(
        &out.join("medians.svg"),
        &format!("{}: median NOTPM", spec.name),
        &results,
    )?;
    let p = out.join("matrix.json");
    let json = serde_json::to_string_pretty(&serde_json::json!({
        "meta": meta,
        "configurations": results,
    }))
    .map_err(|e| TpccError::Usage(e.to_string()))?;
    std::fs::write(&p, json).map_err(|e| TpccError::io(&p, e))?;
    if !opts.keep_data && data.exists() {
        std::fs::remove_dir_all(&data).map_err(|e| TpccError::io(&data, e))?;
    }
    drop(mounts);
    Ok((results, all_ok))
}

fn secs(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s.fract() == 0.0 {
        format!("{s:.0}")
    } else {
        format!("{s:.1}")
    }
}

fn describe_entry(e: &Entry) -> String {
    format!("{}; terminals={}", e.store.describe(), e.terminals)
}
