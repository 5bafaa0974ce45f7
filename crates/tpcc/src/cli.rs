//! The `keel-tpcc` command line: `load`, `run`, `check`, `matrix`, `quick`, `compare`.
//!
//! Every command is generic over the engine; `--engine` picks it: `keel` (the durable store, the
//! default), `memory` (the in-memory reference engine), or the peers `sqlite` and `redb`. Exit status: 0 success, 1 a consistency check failed, 2 an error.

use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::check::check;
use crate::config::StoreConfig;
use crate::driver::{
    missing_acked, read_acked, run_workload, summary, write_run_files, RunOptions,
};
use crate::engine::Engine;
use crate::error::{TpccError, TpccResult};
use crate::fsmount::{copy_dir, FsKind, Mounted};
use crate::keel_engine::KeelEngine;
use crate::load::{load, read_marker, LoadOptions};
use crate::matrix::{run_matrix, MatrixOptions, MatrixSpec};
use crate::memory::MemoryEngine;
use crate::redb_engine::RedbEngine;
use crate::sqlite_engine::SqliteEngine;
use crate::txn::WriterMode;

/// Which storage engine to run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum EngineKind {
    /// The durable keel store.
    Keel,
    /// The in-memory reference engine ("memory (no durability)").
    Memory,
    /// Peer: SQLite (bundled, WAL, synchronous=FULL), cache = pool_size.
    Sqlite,
    /// Peer: redb (Durability::Immediate), cache = pool_size.
    Redb,
}

impl EngineKind {
    /// The `--engine` value.
    pub fn name(self) -> &'static str {
        match self {
            EngineKind::Keel => "keel",
            EngineKind::Memory => "memory",
            EngineKind::Sqlite => "sqlite",
            EngineKind::Redb => "redb",
        }
    }

    /// Whether acknowledged commits survive a crash on this engine.
    pub fn durable(self) -> bool {
        match self {
            EngineKind::Keel => KeelEngine::DURABLE,
            EngineKind::Memory => MemoryEngine::DURABLE,
            EngineKind::Sqlite => SqliteEngine::DURABLE,
            EngineKind::Redb => RedbEngine::DURABLE,
        }
    }
}

/// keel-tpcc: a TPC-C-like workload for Keel — load, run with live interval lines, check
/// consistency conditions 1–12, and compare configurations side by side.
#[derive(Debug, Parser)]
#[command(name = "keel-tpcc", version)]
pub struct Cli {
    /// Storage engine.
    #[arg(long, value_enum, default_value = "keel", global = true)]
    pub engine: EngineKind,
    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Load the initial database (deterministic from --seed).
    Load(LoadArgs),
    /// Run the workload: an interval line every --interval seconds, a summary, run.json +
    /// intervals.csv, then the consistency check.
    Run(RunArgs),
    /// Check consistency conditions 1–12.
    Check(CheckArgs),
    /// Run a matrix of configurations (interleaved repeats) and write report.md + charts.
    Matrix(MatrixArgs),
    /// Load a small database, run a short while and check it: the end-to-end demo.
    Quick(QuickArgs),
    /// Compare two runs (run.json files or repeat directories): ratios B/A with their spread,
    /// and whether each is within noise.
    Compare(CompareArgs),
}

/// Store configuration: a keel.toml file and/or `--set` flags (flags win). Both take the
/// store's own keys and spellings: every field of `keel::Config`.
#[derive(Debug, Clone, Args)]
pub struct StoreArgs {
    /// A keel.toml with store settings (any field of keel::Config, e.g. pool_size = "256MiB").
    #[arg(long = "config", value_name = "FILE")]
    pub config_file: Option<PathBuf>,
    /// One store setting, KEY=VALUE, repeatable: any field of keel::Config, with the values a
    /// keel.toml takes (--set torn_page=atomic --set pool_size=256MiB --set direct_io=true
    /// --set checkpoint_interval=5s).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
}

impl StoreArgs {
    /// The file overlaid with the `--set` flags, in order.
    ///
    /// # Errors
    ///
    /// The file cannot be read, or the store refuses a key or value.
    pub fn resolve(&self) -> TpccResult<StoreConfig> {
        let mut c = match &self.config_file {
            Some(p) => StoreConfig::from_file(p)?,
            None => StoreConfig::default(),
        };
        for a in &self.set {
            c.set(a)?;
        }
        c.validate()?;
        Ok(c)
    }
}

/// `load` arguments.
#[derive(Debug, Clone, Args)]
pub struct LoadArgs {
    /// Warehouses.
    #[arg(long, short = 'w', default_value_t = 1)]
    pub warehouses: u16,
    /// Store directory (created; must not hold a load already).
    #[arg(long)]
    pub dir: PathBuf,
    /// Loader seed.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Rows per commit.
    #[arg(long, default_value_t = 5000)]
    pub batch_rows: usize,
    /// TESTS ONLY: load this many items instead of the spec's 100,000.
    #[arg(long, hide = true)]
    pub test_items: Option<u32>,
    /// Store configuration.
    #[command(flatten)]
    pub store: StoreArgs,
}

/// `run` arguments.
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// Store directory (loaded with `load`).
    #[arg(long)]
    pub dir: PathBuf,
    /// Terminals (one thread each, home warehouse = terminal mod warehouses).
    #[arg(long, short = 't', default_value_t = 4)]
    pub terminals: usize,
    /// Measured duration (e.g. 60, 60s, 2m).
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub duration: Duration,
    /// Warm-up before measuring.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub warmup: Duration,
    /// Interval between report lines.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub interval: Duration,
    /// Seed of the terminals.
    #[arg(long, default_value_t = 7)]
    pub seed: u64,
    /// Where run.json and intervals.csv go (default: `<dir>-results`).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Skip the consistency check after the run.
    #[arg(long)]
    pub no_check: bool,
    /// Append every acknowledged New-Order ("W D O") to FILE after its commit returns.
    #[arg(long, value_name = "FILE")]
    pub acked_log: Option<PathBuf>,
    /// Run on loop-mounted file systems instead (root only): ext4,ext4-journal,xfs. The loaded
    /// directory is copied onto each.
    #[arg(long, value_name = "LIST")]
    pub fs: Option<String>,
    /// Size of each loop image for --fs.
    #[arg(long, default_value = "4GiB", value_parser = crate::config::parse_size)]
    pub fs_image_size: u64,
    /// TESTS ONLY: stop each terminal after N transactions.
    #[arg(long, hide = true)]
    pub max_transactions: Option<u64>,
    /// Open loop: this many transactions per second over all terminals, arriving as Poisson
    /// processes; latency counts from each transaction's scheduled arrival. Default: closed loop.
    #[arg(long, value_name = "TPS")]
    pub rate: Option<f64>,
    /// How New-Order, Payment and Delivery take write transactions: `concurrent` (concurrent
    /// write transactions validated at commit; a conflicted one is retried with the same input,
    /// and retries are counted and reported) or `exclusive` (one writer at a time). Engines
    /// without concurrent writers (memory, sqlite, redb) run exclusive and the report says so.
    #[arg(long, value_enum, default_value_t = WriterMode::Concurrent)]
    pub writers: WriterMode,
    /// Store configuration.
    #[command(flatten)]
    pub store: StoreArgs,
}

/// `compare` arguments.
#[derive(Debug, Clone, Args)]
pub struct CompareArgs {
    /// Baseline: a run.json, or a directory holding one (or a matrix's runs/<config>/ with
    /// r1, r2, ... repeats).
    pub a: PathBuf,
    /// Candidate, the same forms.
    pub b: PathBuf,
}

/// `check` arguments.
#[derive(Debug, Clone, Args)]
pub struct CheckArgs {
    /// Store directory.
    #[arg(long)]
    pub dir: PathBuf,
    /// Also verify that every New-Order listed in this side file (from `run --acked-log`) is
    /// present.
    #[arg(long, value_name = "FILE")]
    pub acked_log: Option<PathBuf>,
    /// Store configuration.
    #[command(flatten)]
    pub store: StoreArgs,
}

/// `matrix` arguments.
#[derive(Debug, Clone, Args)]
pub struct MatrixArgs {
    /// The spec (see crates/tpcc/matrices/*.toml).
    #[arg(long)]
    pub spec: PathBuf,
    /// Output directory (default: `tpcc-matrix/<spec name>`).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Override the measured duration of every run.
    #[arg(long, value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Override the warm-up.
    #[arg(long, value_parser = parse_duration)]
    pub warmup: Option<Duration>,
    /// Override the report interval.
    #[arg(long, value_parser = parse_duration)]
    pub interval: Option<Duration>,
    /// Override the repeats.
    #[arg(long)]
    pub repeats: Option<usize>,
    /// Override the warehouses.
    #[arg(long)]
    pub warehouses: Option<u16>,
    /// Run every configuration on these loop-mounted file systems (root only):
    /// ext4,ext4-journal,xfs.
    #[arg(long, value_name = "LIST")]
    pub fs: Option<String>,
    /// Size of each loop image for --fs.
    #[arg(long, default_value = "4GiB", value_parser = crate::config::parse_size)]
    pub fs_image_size: u64,
    /// Keep the loaded data and the last run's copy.
    #[arg(long)]
    pub keep_data: bool,
    /// TESTS ONLY: load this many items instead of 100,000.
    #[arg(long, hide = true)]
    pub test_items: Option<u32>,
    /// Open-loop arrival rate for every run (transactions per second, Poisson).
    #[arg(long, value_name = "TPS")]
    pub rate: Option<f64>,
    /// Writer mode of every run (concurrent|exclusive), overriding the spec's `writers` keys
    /// (top level, `[[config]]` and axis). Default: the spec's, else concurrent.
    #[arg(long, value_enum)]
    pub writers: Option<WriterMode>,
    /// Store knobs applied on top of every configuration.
    #[command(flatten)]
    pub store: StoreArgs,
}

/// `quick` arguments.
#[derive(Debug, Clone, Args)]
pub struct QuickArgs {
    /// Working directory (data in `<dir>/data`, results in `<dir>/out`); reloaded on every call.
    #[arg(long, default_value = "keel-tpcc-quick")]
    pub dir: PathBuf,
    /// Warehouses.
    #[arg(long, short = 'w', default_value_t = 1)]
    pub warehouses: u16,
    /// Terminals.
    #[arg(long, short = 't', default_value_t = 4)]
    pub terminals: usize,
    /// Measured duration.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub duration: Duration,
    /// Warm-up.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub warmup: Duration,
    /// Interval between report lines.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub interval: Duration,
    /// TESTS ONLY: load this many items instead of 100,000.
    #[arg(long, hide = true)]
    pub test_items: Option<u32>,
    /// How New-Order, Payment and Delivery take write transactions: `concurrent` (concurrent
    /// write transactions validated at commit; a conflicted one is retried with the same input,
    /// and retries are counted and reported) or `exclusive` (one writer at a time). Engines
    /// without concurrent writers (memory, sqlite, redb) run exclusive and the report says so.
    #[arg(long, value_enum, default_value_t = WriterMode::Concurrent)]
    pub writers: WriterMode,
    /// Store configuration.
    #[command(flatten)]
    pub store: StoreArgs,
}

/// Parses `90`, `90s`, `1.5s`, `500ms`, `2m`, `1h`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let v: f64 = num
        .parse()
        .map_err(|_| format!("bad duration {s:?}: expected e.g. 60, 60s, 500ms, 2m"))?;
    let secs = match unit {
        "" | "s" => v,
        "ms" => v / 1000.0,
        "m" | "min" => v * 60.0,
        "h" => v * 3600.0,
        other => return Err(format!("bad duration unit {other:?} in {s:?}")),
    };
    if !secs.is_finite() || secs < 0.0 {
        return Err(format!("bad duration {s:?}"));
    }
    Ok(Duration::from_secs_f64(secs))
}

fn config_line<E: Engine>(c: &StoreConfig) -> String {
    if E::HONOURS_CONFIG {
        format!("store config: {}", c.describe())
    } else {
        format!(
            "store config: {} (recorded only: the {} engine ignores store knobs)",
            c.describe(),
            E::LABEL
        )
    }
}

/// Parses the command line, runs it and returns the exit status.
pub fn main() -> i32 {
    let cli = Cli::parse();
    match dispatch(&cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("keel-tpcc: error: {e}");
            2
        }
    }
}

/// Runs a parsed command line with the chosen engine.
pub fn dispatch(cli: &Cli) -> TpccResult<i32> {
    match cli.engine {
        EngineKind::Keel => run_command::<KeelEngine>(&cli.command),
        EngineKind::Memory => run_command::<MemoryEngine>(&cli.command),
        EngineKind::Sqlite => run_command::<SqliteEngine>(&cli.command),
        EngineKind::Redb => run_command::<RedbEngine>(&cli.command),
    }
}

/// Runs one command with engine `E`.
pub fn run_command<E: Engine>(cmd: &Command) -> TpccResult<i32> {
    match cmd {
        Command::Load(a) => cmd_load::<E>(a).map(|_| 0),
        Command::Run(a) => cmd_run::<E>(a),
        Command::Check(a) => cmd_check::<E>(a),
        Command::Matrix(a) => cmd_matrix::<E>(a),
        Command::Quick(a) => cmd_quick::<E>(a),
        Command::Compare(a) => crate::compare::cmd_compare(&a.a, &a.b),
    }
}

fn dir_is_empty(p: &Path) -> bool {
    match std::fs::read_dir(p) {
        Ok(mut it) => it.next().is_none(),
        Err(_) => true,
    }
}

fn cmd_load<E: Engine>(a: &LoadArgs) -> TpccResult<()> {
    let store = a.store.resolve()?;
    if a.dir.exists() && !dir_is_empty(&a.dir) {
        return Err(TpccError::Usage(format!(
            "{} is not empty: load into a new directory",
            a.dir.display()
        )));
    }
    println!("engine: {}", E::LABEL);
    println!("{}", config_line::<E>(&store));
    let engine = E::open(&a.dir, &store)?;
    let mut lo = LoadOptions::new(a.warehouses);
    lo.seed = a.seed;
    lo.batch_rows = a.batch_rows;
    lo.progress = true;
    if let Some(items) = a.test_items {
        println!("TEST SCALE: {items} items instead of 100,000 (--test-items)");
        lo.items = items;
    }
    let r = load(&engine, &lo)?;
    println!(
        "loaded {} warehouse(s): {} rows in {} commits, {:.1} s ({:.0} rows/s) into {}",
        a.warehouses,
        r.rows,
        r.commits,
        r.seconds,
        r.rows as f64 / r.seconds.max(1e-9),
        a.dir.display()
    );
    println!(
        "  engine: data writes {}, doublewrite writes {}, pages skipped {}, log {}, syncs {}",
        r.stats.data_writes,
        r.stats.doublewrite_writes,
        r.stats.pages_skipped_protection,
        crate::driver::bytes(r.stats.log_bytes),
        r.stats.log_syncs + r.stats.data_syncs
    );
    Ok(())
}

fn run_options(a: &RunArgs, label: String, dir: &Path) -> RunOptions {
    RunOptions {
        terminals: a.terminals,
        duration: a.duration,
        warmup: a.warmup,
        interval: a.interval,
        max_transactions: a.max_transactions,
        seed: a.seed,
        acked_log: a.acked_log.clone(),
        label,
        print: true,
        rate: a.rate,
        device_dir: Some(dir.to_path_buf()),
        interrupt: Some(crate::interrupt::flag()),
        writers: a.writers,
    }
}

fn run_in_dir<E: Engine>(
    dir: &Path,
    out: &Path,
    store: &StoreConfig,
    ro: &RunOptions,
    do_check: bool,
) -> TpccResult<i32> {
    if !dir.exists() {
        return Err(TpccError::NotLoaded(format!(
            "{} does not exist",
            dir.display()
        )));
    }
    let engine = E::open_loaded(dir, store)?;
    let marker = read_marker(&engine)?;
    println!(
        "running {} terminal(s) on {} warehouse(s){} for {:.0} s after {:.0} s warm-up; engine {}",
        ro.terminals,
        marker.warehouses,
        if marker.items != crate::schema::ITEMS {
            format!(" (TEST SCALE: {} items)", marker.items)
        } else {
            String::new()
        },
        ro.duration.as_secs_f64(),
        ro.warmup.as_secs_f64(),
        E::LABEL
    );
    println!("{}", config_line::<E>(store));
    let r = run_workload(&engine, ro)?;
    print!("{}", summary(&r));
    let mut code = 0;
    let check_json = if do_check {
        println!("checking consistency conditions 1–12 ...");
        let c = check(&engine)?;
        print!("{}", c.render());
        if !c.all_passed() {
            code = 1;
        }
        serde_json::to_value(&c).unwrap_or_default()
    } else {
        serde_json::Value::Null
    };
    write_run_files(
        out,
        &r,
        serde_json::json!({
            "store_config": store,
            "config_honoured": E::HONOURS_CONFIG,
            "check": check_json,
        }),
    )?;
    println!(
        "wrote {} and {}",
        out.join("run.json").display(),
        out.join("intervals.csv").display()
    );
    Ok(code)
}

fn cmd_run<E: Engine>(a: &RunArgs) -> TpccResult<i32> {
    let store = a.store.resolve()?;
    let out = a.out.clone().unwrap_or_else(|| results_beside(&a.dir));
    let Some(list) = &a.fs else {
        return run_in_dir::<E>(
            &a.dir,
            &out,
            &store,
            &run_options(a, String::new(), &a.dir),
            !a.no_check,
        );
    };
    let kinds = FsKind::parse_list(list)?;
    crate::fsmount::require_root()?;
    {
        // Refuse early if the source is not loaded.
        let e = E::open_loaded(&a.dir, &store)?;
        read_marker(&e)?;
    }
    let mut worst = 0;
    for k in kinds {
        let m = Mounted::create(k, &out.join("fs"), a.fs_image_size)?;
        println!("== {} (mounted at {})", k.name(), m.mountpoint.display());
        let copy = m.mountpoint.join("data");
        copy_dir(&a.dir, &copy)?;
        let code = run_in_dir::<E>(
            &copy,
            &out.join(k.name()),
            &store,
            &run_options(a, k.name().to_string(), &copy),
            !a.no_check,
        )?;
        worst = worst.max(code);
        drop(m);
    }
    Ok(worst)
}

/// The default results directory of a run on `dir`: `DIR-results` beside it (a trailing `/`
/// in `dir` must not put it inside the store as `DIR/-results`).
fn results_beside(dir: &Path) -> PathBuf {
    let trimmed = dir.components().collect::<PathBuf>();
    let mut name = trimmed.as_os_str().to_os_string();
    name.push("-results");
    PathBuf::from(name)
}

fn cmd_check<E: Engine>(a: &CheckArgs) -> TpccResult<i32> {
    let store = a.store.resolve()?;
    if !a.dir.exists() {
        return Err(TpccError::NotLoaded(format!(
            "{} does not exist",
            a.dir.display()
        )));
    }
    let engine = E::open_existing(&a.dir, &store)?;
    let c = check(&engine)?;
    println!(
        "consistency conditions 1–12 on {} ({}):",
        a.dir.display(),
        E::LABEL
    );
    print!("{}", c.render());
    let mut code = if c.all_passed() { 0 } else { 1 };
    if let Some((problems, summary)) = engine.integrity()? {
        if problems.is_empty() {
            println!("  store check: OK: {summary}");
        } else {
            println!("  store check: {} problem(s): {summary}", problems.len());
            for p in &problems {
                println!("    {p}");
            }
            code = 1;
        }
    }
    if let Some(p) = &a.acked_log {
        let acked = read_acked(p)?;
        let missing = missing_acked(&engine, &acked)?;
        if missing.is_empty() {
            println!("  acknowledged New-Orders: all {} present", acked.len());
        } else {
            println!(
                "  acknowledged New-Orders: {} of {} MISSING, first w={} d={} o={}",
                missing.len(),
                acked.len(),
                missing[0].0,
                missing[0].1,
                missing[0].2
            );
            code = 1;
        }
    }
    Ok(code)
}

fn cmd_matrix<E: Engine>(a: &MatrixArgs) -> TpccResult<i32> {
    let spec = MatrixSpec::from_file(&a.spec)?;
    let fs = match &a.fs {
        Some(l) => {
            let k = FsKind::parse_list(l)?;
            crate::fsmount::require_root()?;
            k
        }
        None => Vec::new(),
    };
    let out = a
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from("tpcc-matrix").join(&spec.name));
    let cli_store = a.store.resolve()?;
    println!(
        "matrix {}: {} configuration(s) × {} repeat(s) on {}{}",
        spec.name,
        spec.entries.len(),
        a.repeats.unwrap_or(spec.repeats),
        E::LABEL,
        if E::HONOURS_CONFIG {
            ""
        } else {
            " (store knobs are recorded but have no effect on this engine)"
        }
    );
    let opts = MatrixOptions {
        out: out.clone(),
        duration: a.duration,
        warmup: a.warmup,
        interval: a.interval,
        repeats: a.repeats,
        warehouses: a.warehouses,
        fs,
        fs_image_size: a.fs_image_size,
        keep_data: a.keep_data,
        items: a.test_items,
        cli_store,
        rate: a.rate,
        writers: a.writers,
        interrupt: Some(crate::interrupt::flag()),
    };
    let (rows, ok) = run_matrix::<E>(&spec, &opts)?;
    println!();
    let md = std::fs::read_to_string(out.join("report.md")).unwrap_or_default();
    // Print the table part of the report.
    for line in md
        .lines()
        .filter(|l| l.starts_with('|'))
        .take(rows.len() + 2)
    {
        println!("{line}");
    }
    println!(
        "wrote {}, {}, {}",
        out.join("report.md").display(),
        out.join("notpm.svg").display(),
        out.join("medians.svg").display()
    );
    Ok(if ok { 0 } else { 1 })
}

const QUICK_TAG: &str = ".keel-tpcc-quick";

fn cmd_quick<E: Engine>(a: &QuickArgs) -> TpccResult<i32> {
    let store = a.store.resolve()?;
    let base = &a.dir;
    let tag = base.join(QUICK_TAG);
    if base.exists() && !dir_is_empty(base) && !tag.exists() {
        return Err(TpccError::Usage(format!(
            "{} exists and was not made by `keel-tpcc quick`: pick another --dir",
            base.display()
        )));
    }
    let data = base.join("data");
    let out = base.join("out");
    for p in [&data, &out] {
        if p.exists() {
            std::fs::remove_dir_all(p).map_err(|e| TpccError::io(p, e))?;
        }
    }
    std::fs::create_dir_all(base).map_err(|e| TpccError::io(base, e))?;
    std::fs::write(
        &tag,
        b"made by keel-tpcc quick; data/ and out/ are replaced on every call\n",
    )
    .map_err(|e| TpccError::io(&tag, e))?;
    println!(
        "== keel-tpcc quick: load {} warehouse(s), run {:.0} s with {} terminals, check",
        a.warehouses,
        a.duration.as_secs_f64(),
        a.terminals
    );
    cmd_load::<E>(&LoadArgs {
        warehouses: a.warehouses,
        dir: data.clone(),
        seed: 1,
        batch_rows: 5000,
        test_items: a.test_items,
        store: a.store.clone(),
    })?;
    let ro = RunOptions {
        terminals: a.terminals,
        duration: a.duration,
        warmup: a.warmup,
        interval: a.interval,
        max_transactions: None,
        seed: 7,
        acked_log: Some(out.join("acked-new-orders.txt")),
        label: String::new(),
        print: true,
        rate: None,
        device_dir: Some(data.clone()),
        interrupt: Some(crate::interrupt::flag()),
        writers: a.writers,
    };
    std::fs::create_dir_all(&out).map_err(|e| TpccError::io(&out, e))?;
    run_in_dir::<E>(&data, &out, &store, &ro, true)
}
