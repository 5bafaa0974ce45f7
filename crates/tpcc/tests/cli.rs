//! The `keel-tpcc` binary end to end on its default engine (the durable keel store; 1 warehouse,
//! reduced items through the hidden test-only flag, a small pool): load → run → check, exit codes,
//! refusals with clear messages, a tiny matrix (report.md + SVG charts), quick, the loop-mounted
//! file systems when root, and `--engine memory` still selecting the reference engine.

use keel_tpcc::config::StoreConfig;
use keel_tpcc::engine::{Engine, ReadTx, WriteTx};
use keel_tpcc::schema::{self, Row};
use keel_tpcc::KeelEngine;
use std::path::Path;
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_keel-tpcc");

fn run(args: &[&str], paths: &[(&str, &Path)]) -> Output {
    let mut c = Command::new(BIN);
    c.args(args);
    for (flag, p) in paths {
        c.arg(flag).arg(p);
    }
    c.output().unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Pool of the tests' stores (the data of 1 warehouse with 1000 items is about 60 MiB).
const POOL: &str = "pool_size=32MiB";

fn load(dir: &Path) {
    let o = run(
        &[
            "load",
            "--warehouses",
            "1",
            "--test-items",
            "1000",
            "--set",
            POOL,
        ],
        &[("--dir", dir)],
    );
    assert!(o.status.success(), "{}", text(&o));
    let t = text(&o);
    assert!(
        t.contains("TEST SCALE: 1000 items") && t.contains("loaded 1 warehouse"),
        "{t}"
    );
    assert!(
        t.contains("engine: keel") && !t.contains("recorded only"),
        "the default engine is keel and honours the knobs: {t}"
    );
}

#[test]
fn load_run_check_end_to_end_with_acknowledged_side_file() {
    let t = tempfile::tempdir().unwrap();
    let (dir, out, acked) = (
        t.path().join("d"),
        t.path().join("o"),
        t.path().join("acked.txt"),
    );
    load(&dir);
    let o = run(
        &[
            "run",
            "--terminals",
            "2",
            "--max-transactions",
            "300",
            "--warmup",
            "0s",
            "--interval",
            "1s",
            "--set",
            "torn_page=none",
            "--set",
            POOL,
        ],
        &[("--dir", &dir), ("--out", &out), ("--acked-log", &acked)],
    );
    let s = text(&o);
    assert!(o.status.success(), "{s}");
    for want in [
        "NOTPM",
        "legend: ",
        "summary:",
        "consistency: OK",
        "torn_page=none",
        "keel-tpcc ",
        "torn pages: None (configured)",
        "data file: ",
        "per transaction (",
        "CPU ",
        "machine: load average",
        // The default writer mode on keel, and the retry columns.
        "writers: concurrent",
        "retries /100 txns",
    ] {
        assert!(s.contains(want), "missing {want:?} in:\n{s}");
    }
    // Interval lines fit 120 columns.
    for l in s.lines().filter(|l| l.starts_with('[')) {
        assert!(
            l.chars().count() <= 120,
            "{} columns: {l}",
            l.chars().count()
        );
        assert!(l.contains(" NO ") && l.contains(" cpu "), "{l}");
    }
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("run.json")).unwrap()).unwrap();
    assert!(json["notpm"].as_f64().unwrap() > 0.0);
    assert!(
        json["costs"]["cpu_us_per_txn"].as_f64().unwrap() > 0.0,
        "{json}"
    );
    assert!(
        json["meta"]["host"]["cpus"].as_u64().unwrap() >= 1,
        "{json}"
    );
    assert!(
        !json["meta"]["commit"].as_str().unwrap().is_empty(),
        "{json}"
    );
    // O_DIRECT is the default; only a file system without it (tmpfs) falls back, saying so.
    let eff = &json["meta"]["effective"]["json"];
    let reason = eff["direct_io_reason"].as_str().unwrap();
    assert!(
        eff["direct_io"] == true || reason.contains("fell back"),
        "{reason}"
    );
    assert!(
        json["latency"][0]["p999_ms"].as_f64().unwrap()
            >= json["latency"][0]["p99_ms"].as_f64().unwrap()
    );
    assert_eq!(json["store_config"]["torn_page"], "none");
    assert_eq!(json["config_honoured"], true);
    assert_eq!(json["meta"]["writers"], "concurrent");
    assert_eq!(json["retries"].as_array().map(Vec::len), Some(5), "{json}");
    let csv = std::fs::read_to_string(out.join("intervals.csv")).unwrap();
    assert!(
        csv.starts_with("t_end_s,warmup,seconds,notpm") && csv.lines().count() >= 2,
        "{csv}"
    );
    assert!(
        csv.lines()
            .next()
            .unwrap()
            .ends_with(",no_retries,p_retries,d_retries,conflicts"),
        "{csv}"
    );
    // Every acknowledged New-Order is in the store.
    let committed = json["new_orders_committed"].as_u64().unwrap();
    let lines = std::fs::read_to_string(&acked).unwrap().lines().count() as u64;
    assert_eq!(lines, committed);
    let o = run(&["check"], &[("--dir", &dir), ("--acked-log", &acked)]);
    let s = text(&o);
    assert!(o.status.success(), "{s}");
    assert!(s.contains(&format!("all {committed} present")), "{s}");
    // The store the loader and the run produced passes the store check (every B-tree sound,
    // every page accounted for).
    assert!(s.contains("store check: OK: "), "{s}");
}

#[test]
fn check_exits_1_and_names_the_row_when_a_condition_fails() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("d");
    load(&dir);
    {
        let e = KeelEngine::open(&dir, &StoreConfig::default()).unwrap();
        let mut tx = e.write().unwrap();
        let k = schema::district_key(1, 7);
        let mut d = schema::DistrictYtd::decode(
            &k,
            &tx.get(schema::table::DISTRICT_YTD, &k).unwrap().unwrap(),
        )
        .unwrap();
        d.ytd += 5;
        tx.insert(schema::table::DISTRICT_YTD, &k, &d.encode())
            .unwrap();
        tx.commit().unwrap();
        e.checkpoint().unwrap();
    }
    let o = run(&["check"], &[("--dir", &dir)]);
    let s = text(&o);
    assert_eq!(o.status.code(), Some(1), "{s}");
    assert!(
        s.contains("condition  9 FAIL") && s.contains("district w=1 d=7"),
        "{s}"
    );
    assert!(s.contains("consistency: FAILED"), "{s}");
}

#[test]
fn bad_input_gets_clear_errors() {
    let t = tempfile::tempdir().unwrap();
    let empty = t.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    std::fs::write(empty.join("user-file.txt"), b"mine").unwrap();
    let o = run(&["check"], &[("--dir", &empty)]);
    assert_eq!(o.status.code(), Some(2));
    // `check` never creates a store (it used to write a 145 MB one beside the user's files).
    assert!(text(&o).contains("not a Keel store"), "{}", text(&o));
    let names: Vec<_> = std::fs::read_dir(&empty)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec![std::ffi::OsString::from("user-file.txt")]);

    let o = run(
        &["load", "--set", "log_block_size=1024"],
        &[("--dir", &t.path().join("x"))],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("log_block_size"), "{}", text(&o));

    std::fs::write(empty.join("stray"), b"x").unwrap();
    let o = run(&["load"], &[("--dir", &empty)]);
    assert!(text(&o).contains("not empty"), "{}", text(&o));

    let spec = t.path().join("bad.toml");
    std::fs::write(
        &spec,
        "name = \"x\"\n[[config]]\nname = \"a\"\ntorn_page = \"sometimes\"\n",
    )
    .unwrap();
    let o = run(&["matrix"], &[("--spec", &spec)]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("bad.toml"), "{}", text(&o));

    let cfg = t.path().join("keel.toml");
    std::fs::write(&cfg, "page_size = 5000\n").unwrap();
    let o = run(
        &["load"],
        &[("--dir", &t.path().join("y")), ("--config", &cfg)],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("page_size"), "{}", text(&o));
}

#[test]
fn matrix_interleaves_repeats_and_writes_report_and_charts() {
    let t = tempfile::tempdir().unwrap();
    let spec = t.path().join("tiny.toml");
    std::fs::write(
        &spec,
        r#"
name = "tiny"
description = "two configurations"
published = "nothing published"
warehouses = 1
terminals = 2
duration = 1.0
warmup = 0
interval = 0.5
repeats = 2
[base]
page_size = 16384
pool_size = "32MiB"
[[config]]
name = "A"
torn_page = "doublewrite"
[[config]]
name = "B"
torn_page = "none"
"#,
    )
    .unwrap();
    let out = t.path().join("out");
    let o = run(
        &["matrix", "--test-items", "1000"],
        &[("--spec", &spec), ("--out", &out)],
    );
    let s = text(&o);
    assert!(o.status.success(), "{s}");
    // Interleaved: A #1, B #1, A #2, B #2.
    let order: Vec<&str> = s.lines().filter(|l| l.starts_with("== run")).collect();
    assert_eq!(order.len(), 4, "{s}");
    for (line, want) in order.iter().zip([
        "A (repeat 1/2",
        "B (repeat 1/2",
        "A (repeat 2/2",
        "B (repeat 2/2",
    ]) {
        assert!(line.contains(want), "{line} vs {want}");
    }
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    for want in [
        "| A | ",
        "| B | ",
        "doublewrite writes",
        "pages skipped",
        "syncs/commit",
        "1–12 pass",
        "keel",
        "nothing published",
        "commit ",
        "torn pages: ",
        "data file: ",
        "probe: file system",
        "load average",
    ] {
        assert!(md.contains(want), "report.md lacks {want:?}:\n{md}");
    }
    // The main table has every column, and every row fills each of them.
    let header = keel_tpcc::report::main_table_header();
    assert!(
        md.contains(&header),
        "report.md lacks the header {header}:\n{md}"
    );
    let columns = header.matches('|').count();
    for name in ["A", "B"] {
        let row = md
            .lines()
            .find(|l| l.starts_with(&format!("| {name} |")))
            .unwrap_or_else(|| panic!("no row {name}:\n{md}"));
        assert_eq!(row.matches('|').count(), columns, "{row}");
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        // CPU µs/txn (the first cost column) and device bytes are measured, not blank.
        assert!(
            cells[5].parse::<f64>().is_ok() || cells[5].contains('('),
            "CPU cell {:?} in {row}",
            cells[5]
        );
    }
    assert!(
        md.lines()
            .any(|l| l.starts_with("| A |") && l.contains("| 1.00 (")),
        "the first row is the ratio's base, with its range: {md}"
    );
    for svg in ["notpm.svg", "medians.svg", "latency.svg", "costs.svg"] {
        let body = std::fs::read_to_string(out.join(svg)).unwrap();
        assert!(body.contains("<svg") && body.contains("tiny"), "{svg}");
    }
    // compare: two configurations' repeats, ratios with their spread.
    let o = run(&["compare"], &[]);
    assert!(!o.status.success(), "compare needs two sides");
    let c = Command::new(BIN)
        .arg("compare")
        .arg(out.join("runs/A"))
        .arg(out.join("runs/B"))
        .output()
        .unwrap();
    let ct = text(&c);
    assert!(c.status.success(), "{ct}");
    for want in [
        "NOTPM",
        "CPU µs / txn",
        "over the runs of",
        "B/A",
        "2 run(s)",
    ] {
        assert!(ct.contains(want), "compare output lacks {want:?}:\n{ct}");
    }
    assert!(
        out.join("runs/A/r2/intervals.csv").exists() && out.join("runs/B/r1/run.json").exists()
    );
    assert!(out.join("matrix.json").exists());
    assert!(
        !out.join("data").exists(),
        "loaded data removed without --keep-data"
    );
}

#[test]
fn quick_loads_runs_and_checks() {
    let t = tempfile::tempdir().unwrap();
    let base = t.path().join("q");
    let args = [
        "quick",
        "--duration",
        "1s",
        "--warmup",
        "0s",
        "--interval",
        "1s",
        "--test-items",
        "1000",
        "--terminals",
        "2",
        "--set",
        POOL,
    ];
    let o = run(&args, &[("--dir", &base)]);
    let s = text(&o);
    assert!(o.status.success(), "{s}");
    assert!(
        s.contains("consistency: OK") && base.join("out/run.json").exists(),
        "{s}"
    );
    // A second call replaces the data; a foreign directory is refused.
    assert!(run(&args, &[("--dir", &base)]).status.success());
    let foreign = t.path().join("foreign");
    std::fs::create_dir(&foreign).unwrap();
    std::fs::write(foreign.join("mine"), b"keep me").unwrap();
    let o = run(&args, &[("--dir", &foreign)]);
    assert_eq!(o.status.code(), Some(2));
    assert!(foreign.join("mine").exists());
}

#[test]
fn file_system_axis_mounts_runs_and_unmounts() {
    if !keel_tpcc::fsmount::is_root() {
        println!("SKIPPED: --fs needs root (loop mounts)");
        return;
    }
    let have = |tool: &str| {
        Command::new("sh")
            .arg("-c")
            .arg(format!("command -v {tool}"))
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false)
    };
    if !have("mkfs.ext4") || !have("mkfs.xfs") || !Path::new("/dev/loop-control").exists() {
        println!("SKIPPED: --fs needs mkfs.ext4, mkfs.xfs and loop devices");
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let (dir, out) = (t.path().join("d"), t.path().join("o"));
    load(&dir);
    let o = run(
        &[
            "run",
            "--fs",
            "ext4,ext4-journal,xfs",
            "--fs-image-size",
            "512MiB",
            "--max-transactions",
            "100",
            "--warmup",
            "0s",
            "--interval",
            "1s",
            "--terminals",
            "1",
            "--set",
            POOL,
        ],
        &[("--dir", &dir), ("--out", &out)],
    );
    let s = text(&o);
    if s.contains("failed") && (s.contains("mount") || s.contains("mkfs")) && !o.status.success() {
        println!("SKIPPED: cannot create loop file systems here: {s}");
        return;
    }
    assert!(o.status.success(), "{s}");
    for fs in ["ext4", "ext4-journal", "xfs"] {
        assert!(s.contains(&format!("== {fs} (mounted at")), "{s}");
        assert!(out.join(fs).join("run.json").exists(), "{fs}");
    }
    assert_eq!(s.matches("consistency: OK").count(), 3, "{s}");
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap();
    assert!(
        !mounts.contains(out.to_str().unwrap()),
        "left mounted:\n{mounts}"
    );
}

#[test]
fn engine_memory_selects_the_reference_engine() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("m");
    let o = run(
        &[
            "--engine",
            "memory",
            "load",
            "--warehouses",
            "1",
            "--test-items",
            "1000",
        ],
        &[("--dir", &dir)],
    );
    let s = text(&o);
    assert!(o.status.success(), "{s}");
    assert!(
        s.contains("engine: memory (no durability)") && s.contains("recorded only"),
        "{s}"
    );
    assert!(dir.join(keel_tpcc::memory::SNAPSHOT_FILE).exists());
    let o = run(&["--engine", "memory", "check"], &[("--dir", &dir)]);
    let s = text(&o);
    assert!(o.status.success() && s.contains("consistency: OK"), "{s}");
    // The keel engine does not mistake the memory engine's directory for a store with data.
    let o = run(&["check"], &[("--dir", &dir)]);
    assert_ne!(o.status.code(), Some(0), "{}", text(&o));
}

/// The CI peers matrix (issue 14): keel, sqlite and redb rows of one matrix on 1 warehouse for a
/// few seconds; the report has every column for every row, and states the peers' durability.
#[test]
fn peers_matrix_has_every_column_for_keel_sqlite_and_redb() {
    let t = tempfile::tempdir().unwrap();
    let spec = t.path().join("peers.toml");
    std::fs::write(
        &spec,
        r#"
name = "ci-peers"
description = "keel, sqlite and redb"
published = "none"
warehouses = 1
terminals = 2
duration = 1.5
warmup = 0.5
interval = 0.5
repeats = 1
[base]
pool_size = "32MiB"
durability = "sync"
[[config]]
name = "keel"
[[config]]
name = "sqlite"
engine = "sqlite"
[[config]]
name = "redb"
engine = "redb"
"#,
    )
    .unwrap();
    let out = t.path().join("out");
    let o = run(
        &["matrix", "--test-items", "1000"],
        &[("--spec", &spec), ("--out", &out)],
    );
    let s = text(&o);
    assert!(o.status.success(), "{s}");
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    let header = keel_tpcc::report::main_table_header();
    assert!(md.contains(&header), "{md}");
    let columns = header.matches('|').count();
    for (name, engine) in [
        ("keel", "keel"),
        ("sqlite", "sqlite (WAL, synchronous=FULL)"),
        ("redb", "redb (Durability::Immediate)"),
    ] {
        let row = md
            .lines()
            .find(|l| l.starts_with(&format!("| {name} |")))
            .unwrap_or_else(|| panic!("no row {name}:\n{md}"));
        assert_eq!(row.matches('|').count(), columns, "{row}");
        assert!(row.contains("1–12 pass"), "{row}");
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        // NOTPM, CPU µs/txn and (on a block device) device KiB written are measured for every
        // engine.
        assert!(cells[2].parse::<f64>().unwrap() > 0.0, "{row}");
        assert!(cells[5].parse::<f64>().unwrap() > 0.0, "{row}");
        assert!(
            md.contains(&format!("| {name} | {engine} |")),
            "configurations table names the engine {engine}:\n{md}"
        );
    }
    assert!(
        md.contains("Peer row **sqlite**") && md.contains("Peer row **redb**"),
        "{md}"
    );
    assert!(md.contains("SQLite 3.") && md.contains("redb: every commit Durability::Immediate"));
    for svg in ["notpm.svg", "medians.svg", "latency.svg", "costs.svg"] {
        assert!(out.join(svg).exists(), "{svg}");
    }

    // --engine sqlite / redb on the single-run commands.
    for engine in ["sqlite", "redb"] {
        let q = t.path().join(format!("q-{engine}"));
        let o = run(
            &[
                "--engine",
                engine,
                "quick",
                "--test-items",
                "1000",
                "--duration",
                "1s",
                "--warmup",
                "0s",
                "--interval",
                "1s",
                "--set",
                "pool_size=16MiB",
            ],
            &[("--dir", &q)],
        );
        let s = text(&o);
        assert!(o.status.success(), "{engine}: {s}");
        assert!(
            s.contains("consistency: OK") && s.contains("per transaction ("),
            "{s}"
        );
    }
}

#[test]
fn writers_flag_defaults_to_concurrent_and_takes_exclusive() {
    use clap::Parser as _;
    use keel_tpcc::cli::{Cli, Command};
    use keel_tpcc::txn::WriterMode;
    let writers = |extra: &[&str]| {
        let mut args = vec!["keel-tpcc", "run", "--dir", "x"];
        args.extend_from_slice(extra);
        match Cli::try_parse_from(args).map(|c| c.command) {
            Ok(Command::Run(a)) => Ok(a.writers),
            Ok(other) => panic!("{other:?}"),
            Err(e) => Err(e.to_string()),
        }
    };
    assert_eq!(writers(&[]), Ok(WriterMode::Concurrent));
    assert_eq!(
        writers(&["--writers", "exclusive"]),
        Ok(WriterMode::Exclusive)
    );
    assert_eq!(
        writers(&["--writers", "concurrent"]),
        Ok(WriterMode::Concurrent)
    );
    let err = writers(&["--writers", "optimistic"]).unwrap_err();
    assert!(
        err.contains("concurrent") && err.contains("exclusive"),
        "{err}"
    );
}

#[test]
fn run_refuses_a_store_of_the_old_layout_and_says_reload() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("d");
    load(&dir);
    {
        // Make it look like a load of format version 1 (W_YTD and D_YTD inside the rows).
        let e = KeelEngine::open(&dir, &StoreConfig::default()).unwrap();
        let mut tx = e.write().unwrap();
        let mut m = schema::LoadMarker::decode(
            &tx.get(schema::table::META, schema::META_LOAD)
                .unwrap()
                .unwrap(),
        )
        .unwrap();
        m.format = 1;
        tx.insert(schema::table::META, schema::META_LOAD, &m.encode())
            .unwrap();
        tx.commit().unwrap();
        e.checkpoint().unwrap();
    }
    let o = run(
        &["run", "--terminals", "1", "--max-transactions", "10"],
        &[("--dir", &dir), ("--out", &t.path().join("o"))],
    );
    let s = text(&o);
    assert_eq!(o.status.code(), Some(2), "{s}");
    assert!(s.contains("reload") && s.contains("version 1"), "{s}");
    assert!(!t.path().join("o").join("run.json").exists());
}

/// The matrix loads into `OUT/data` and removes it at the end: a `data/` it did not make (the
/// user's, `--out .` in a project) is refused and left alone, and a spec name that is not a
/// plain file name (the default `--out` is `tpcc-matrix/NAME`) is refused. (The first deleted
/// the user's files with exit status 0.)
#[test]
fn matrix_never_removes_a_data_directory_it_did_not_make() {
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("project");
    std::fs::create_dir_all(out.join("data/mine")).unwrap();
    std::fs::write(out.join("data/mine/notes.txt"), "precious").unwrap();
    let spec = t.path().join("tiny.toml");
    let body =
        "warehouses = 1\nterminals = 1\nduration = 0.5\nwarmup = 0\ninterval = 0.5\nrepeats = 1\n";
    std::fs::write(&spec, format!("name = \"tiny\"\n{body}")).unwrap();
    let matrix = |out: &Path| {
        run(
            &["--engine", "memory", "matrix", "--test-items", "200"],
            &[("--spec", &spec), ("--out", out)],
        )
    };
    let o = matrix(&out);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("not made by `keel-tpcc matrix`"),
        "{}",
        text(&o)
    );
    assert!(
        out.join("data/mine/notes.txt").exists(),
        "the user's file was removed"
    );
    // Its own data directory (an earlier matrix's, kept) it replaces and removes.
    let own = t.path().join("own");
    for _ in 0..2 {
        let o = matrix(&own);
        assert!(o.status.success(), "{}", text(&o));
        assert!(!own.join("data").exists(), "{}", text(&o));
        assert!(own.join("report.md").exists());
    }
    for name in ["..", ".", "/tmp/x", "a/b", ""] {
        std::fs::write(&spec, format!("name = {name:?}\n{body}")).unwrap();
        let o = run(&["--engine", "memory", "matrix"], &[("--spec", &spec)]);
        assert_eq!(o.status.code(), Some(2), "name {name:?}: {}", text(&o));
        assert!(text(&o).contains("name"), "{}", text(&o));
    }
}

/// `run` never creates a store: a mistyped `--dir` is refused and stays absent (it used to
/// become an empty store that `load` then refused as not empty); its default results go
/// beside the store even when `--dir` ends with `/` (not into the store as `DIR/-results`).
#[test]
fn run_creates_no_store_and_puts_results_beside_the_store() {
    let t = tempfile::tempdir().unwrap();
    let typo = t.path().join("typo");
    let o = run(
        &["run", "-t", "1", "--duration", "1", "--set", POOL],
        &[("--dir", &typo)],
    );
    assert_ne!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("does not exist"), "{}", text(&o));
    assert!(!typo.exists(), "run created {}", typo.display());
    let empty = t.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let o = run(
        &["run", "-t", "1", "--duration", "1", "--set", POOL],
        &[("--dir", &empty)],
    );
    assert_ne!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(
        std::fs::read_dir(&empty).unwrap().count(),
        0,
        "{}",
        text(&o)
    );

    let dir = t.path().join("m1");
    let o = run(
        &[
            "--engine",
            "memory",
            "load",
            "-w",
            "1",
            "--test-items",
            "200",
        ],
        &[("--dir", &dir)],
    );
    assert!(o.status.success(), "{}", text(&o));
    let slash = format!("{}/", dir.display());
    let o = run(
        &[
            "--engine",
            "memory",
            "run",
            "-t",
            "1",
            "--duration",
            "1",
            "--warmup",
            "0",
            "--interval",
            "1",
            "--no-check",
            "--dir",
            &slash,
        ],
        &[],
    );
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        !dir.join("-results").exists(),
        "results went into the store"
    );
    assert!(t.path().join("m1-results").exists(), "{}", text(&o));
}
