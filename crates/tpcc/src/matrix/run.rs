//! Running a matrix: one shared load per set of creation-time knobs (or one per configuration),
//! repeats interleaved across configurations (A B C A B C ...), each run from a fresh copy of the
//! loaded directory, then `report.md`, the charts and `matrix.json`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::spec::{Entry, MatrixSpec};
use crate::charts::{draw_costs, draw_latency, draw_medians, draw_notpm};
use crate::check::check;
use crate::config::StoreConfig;
use crate::driver::{run_workload, write_run_files, RunOptions, RunResult};
use crate::engine::{Engine, EngineError};
use crate::error::{TpccError, TpccResult};
use crate::fsmount::{copy_dir, FsKind, Mounted};
use crate::keel_engine::KeelEngine;
use crate::load::{load, LoadOptions, LoadReport};
use crate::memory::MemoryEngine;
use crate::redb_engine::RedbEngine;
use crate::report::{render_markdown, ConfigResult, ReportMeta};
use crate::sqlite_engine::SqliteEngine;

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
    /// Open-loop arrival rate for every run (see [`RunOptions::rate`]).
    pub rate: Option<f64>,
    /// Writer mode of every run, overriding the spec's (see [`RunOptions::writers`]).
    pub writers: Option<crate::txn::WriterMode>,
    /// Ctrl-C: the current run ends early, no further run starts, the report is written.
    pub interrupt: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
}

/// The engine of a row: the CLI's `--engine` (`Main`), or one a `[[config]]` names.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Which {
    Main,
    Memory,
    Keel,
    Sqlite,
    Redb,
}

impl Which {
    /// The row's engine: `None` and the CLI's own engine are `Main`.
    fn of<E: Engine>(name: Option<&str>) -> Which {
        let w = match name {
            None => return Which::Main,
            Some("memory") => Which::Memory,
            Some("sqlite") => Which::Sqlite,
            Some("redb") => Which::Redb,
            Some(_) => Which::Keel,
        };
        if w.label::<E>() == E::LABEL {
            Which::Main
        } else {
            w
        }
    }

    fn label<E: Engine>(self) -> &'static str {
        match self {
            Which::Main => E::LABEL,
            Which::Memory => MemoryEngine::LABEL,
            Which::Keel => KeelEngine::LABEL,
            Which::Sqlite => SqliteEngine::LABEL,
            Which::Redb => RedbEngine::LABEL,
        }
    }

    fn honours_config<E: Engine>(self) -> bool {
        match self {
            Which::Main => E::HONOURS_CONFIG,
            Which::Memory => MemoryEngine::HONOURS_CONFIG,
            Which::Keel => KeelEngine::HONOURS_CONFIG,
            Which::Sqlite => SqliteEngine::HONOURS_CONFIG,
            Which::Redb => RedbEngine::HONOURS_CONFIG,
        }
    }

    /// Rows of this engine take the store's creation-time knobs (a Keel store).
    fn keel_like<E: Engine>(self) -> bool {
        self.honours_config::<E>()
    }

    fn load<E: Engine>(
        self,
        dir: &Path,
        store: &StoreConfig,
        lo: &LoadOptions,
    ) -> TpccResult<LoadReport> {
        match self {
            Which::Main => load_into::<E>(dir, store, lo),
            Which::Memory => load_into::<MemoryEngine>(dir, store, lo),
            Which::Keel => load_into::<KeelEngine>(dir, store, lo),
            Which::Sqlite => load_into::<SqliteEngine>(dir, store, lo),
            Which::Redb => load_into::<RedbEngine>(dir, store, lo),
        }
    }

    fn run<E: Engine>(
        self,
        loaded: &Path,
        run_dir: &Path,
        store: &StoreConfig,
        ro: &RunOptions,
        do_check: bool,
    ) -> TpccResult<(RunResult, Option<bool>, String)> {
        match self {
            Which::Main => run_copy::<E>(loaded, run_dir, store, ro, do_check),
            Which::Memory => run_copy::<MemoryEngine>(loaded, run_dir, store, ro, do_check),
            Which::Keel => run_copy::<KeelEngine>(loaded, run_dir, store, ro, do_check),
            Which::Sqlite => run_copy::<SqliteEngine>(loaded, run_dir, store, ro, do_check),
            Which::Redb => run_copy::<RedbEngine>(loaded, run_dir, store, ro, do_check),
        }
    }
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

/// The file that marks `OUT/data` as the matrix's own (it may replace and remove it).
const MATRIX_TAG: &str = ".keel-tpcc-matrix";

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
    let data = out.join("data");
    // The loads and runs go to OUT/data, removed at the end: never a directory the matrix did
    // not make (`--out .` in a project with its own `data/`).
    let tag = data.join(MATRIX_TAG);
    let foreign = std::fs::read_dir(&data).is_ok_and(|mut d| d.next().is_some());
    if foreign && !tag.exists() {
        return Err(TpccError::Usage(format!(
            "{} exists and was not made by `keel-tpcc matrix`, which loads into it and removes \
             it afterwards: pick another --out",
            data.display()
        )));
    }
    std::fs::create_dir_all(&data).map_err(|e| TpccError::io(&data, e))?;
    std::fs::write(
        &tag,
        b"made by keel-tpcc matrix; this directory is removed when the matrix ends\n",
    )
    .map_err(|e| TpccError::io(&tag, e))?;

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
            if let Some(w) = opts.writers {
                entry.writers = w;
            }
            let name = match fs {
                Some(k) => format!("{} @{}", entry.name, k.name()),
                None => entry.name.clone(),
            };
            let which = Which::of::<E>(entry.engine.as_deref());
            rows.push(Row {
                result: ConfigResult {
                    name,
                    description: describe_entry(&entry, which.honours_config::<E>()),
                    engine: which.label::<E>().to_string(),
                    skipped: None,
                    runs: Vec::new(),
                    checks_passed: None,
                    load: None,
                },
                entry,
                which,
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
                    writers: opts.writers.unwrap_or(spec.writers),
                    engine: Some("memory".into()),
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
        let keel_like = row.which.keel_like::<E>();
        let per_config = spec.load_per_config && keel_like;
        let creation = if keel_like {
            creation_knobs(&row.entry.store)
        } else {
            StoreConfig::default()
        };
        let creation_key = if creation == base_creation || !keel_like {
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
        // One directory per load: the shared one of the main engine's base knobs, else the row's.
        let dir = if !per_config && row.which == Which::Main && creation_key.is_empty() {
            row.data_root.join("loaded-main")
        } else {
            row.data_root.join(format!("loaded-{i}"))
        };
        let store = if per_config {
            row.entry.store.clone()
        } else if keel_like {
            base_store.overlay(&creation)
        } else {
            row.entry.store.clone()
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
        let res = row.which.load::<E>(&dir, &store, &lo);
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
    let mut interrupted = false;
    let total_runs = rows.iter().filter(|r| r.result.skipped.is_none()).count() * repeats;
    let mut n = 0;
    'repeats: for rep in 0..repeats {
        for row in rows.iter_mut() {
            if opts
                .interrupt
                .as_ref()
                .is_some_and(|f| f.load(std::sync::atomic::Ordering::Relaxed))
            {
                interrupted = true;
                break 'repeats;
            }
            let Some(loaded) = row.loaded.clone() else {
                continue;
            };
            if row.result.skipped.is_some() {
                continue;
            }
            n += 1;
            println!(
                "== run {n}/{total_runs}: {} (repeat {}/{repeats}, {} terminals, {} writers): {}",
                row.result.name,
                rep + 1,
                row.entry.terminals,
                row.entry.writers,
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
                rate: opts.rate,
                device_dir: Some(row.data_root.clone()),
                interrupt: opts.interrupt.clone(),
                writers: row.entry.writers,
            };
            let run_dir = row.data_root.join("run");
            let res = row
                .which
                .run::<E>(&loaded, &run_dir, &row.entry.store, &ro, spec.check);
            match res {
                Ok((r, ok, text)) => {
                    let retries: u64 = r.retries.iter().sum();
                    println!(
                        "   NOTPM {:.0}, p99 New-Order {:.2} ms{}{}",
                        r.notpm,
                        r.latency[0].p99_ms,
                        if retries > 0 {
                            format!(", {retries} retries after conflicts")
                        } else {
                            String::new()
                        },
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
    for r in &results {
        if r.engine == SqliteEngine::LABEL || r.engine == RedbEngine::LABEL {
            notes.push(format!(
                "Peer row **{}**: engine {}; every commit is durable when acknowledged; its cache is the configured pool_size; it reads and writes through the OS page cache (no O_DIRECT), and Keel's store knobs do not apply to it.",
                r.name, r.engine
            ));
        }
    }
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
    if interrupted {
        notes.push(
            "**Interrupted** (Ctrl-C): the matrix stopped early; rows have fewer repeats than asked."
                .into(),
        );
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
    draw_latency(
        &out.join("latency.svg"),
        &format!("{}: p99 New-Order latency", spec.name),
        &results,
    )?;
    draw_costs(
        &out.join("costs.svg"),
        &format!("{}: cost per transaction", spec.name),
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

fn describe_entry(e: &Entry, honoured: bool) -> String {
    if honoured {
        format!(
            "{}; terminals={}; writers={}",
            e.store.describe(),
            e.terminals,
            e.writers
        )
    } else {
        format!(
            "{} (only pool_size applies: the cache size); terminals={}; writers={}",
            e.store.describe(),
            e.terminals,
            e.writers
        )
    }
}
