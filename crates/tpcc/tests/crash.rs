//! SIGKILL test: the CLI's `run` in a child process is killed with SIGKILL; the store is reopened;
//! conditions 1–12 must pass and every New-Order whose commit was acknowledged (the driver appends
//! "W D O" to a side file after `commit` returns) must be present.
//!
//! It runs on every durable engine the CLI offers (`EngineKind::durable`). The only engine today
//! is the in-memory reference engine, which is not durable, so the test prints a SKIPPED line
//! until the keel store (issue 5) is plugged in.

use clap::ValueEnum;
use keel_tpcc::cli::EngineKind;
use std::io::Read as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_keel-tpcc");

fn crash_once(engine: &str, base: &Path) {
    let dir = base.join("data");
    let acked = base.join("acked.txt");
    let st = Command::new(BIN)
        .args([
            "--engine",
            engine,
            "load",
            "--warehouses",
            "1",
            "--test-items",
            "2000",
            "--dir",
        ])
        .arg(&dir)
        .status()
        .unwrap();
    assert!(st.success());
    let mut child = Command::new(BIN)
        .args([
            "--engine",
            engine,
            "run",
            "--terminals",
            "4",
            "--duration",
            "120s",
            "--warmup",
            "0s",
            "--durability",
            "sync",
            "--interval",
            "1s",
            "--no-check",
            "--dir",
        ])
        .arg(&dir)
        .arg("--out")
        .arg(base.join("out"))
        .arg("--acked-log")
        .arg(&acked)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    // Kill once a few hundred New-Orders were acknowledged (or after 30 s).
    let t0 = Instant::now();
    loop {
        let n = std::fs::read_to_string(&acked)
            .map(|s| s.lines().count())
            .unwrap_or(0);
        if n >= 300 || t0.elapsed() > Duration::from_secs(30) {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.kill().unwrap(); // SIGKILL
    let _ = child.wait();
    let n = std::fs::read_to_string(&acked)
        .map(|s| s.lines().count())
        .unwrap_or(0);
    assert!(n > 0, "no New-Order was acknowledged before the kill");
    let mut out = String::new();
    let mut c = Command::new(BIN)
        .args(["--engine", engine, "check", "--dir"])
        .arg(&dir)
        .arg("--acked-log")
        .arg(&acked)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    c.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    let st = c.wait().unwrap();
    println!("{out}");
    assert!(st.success(), "after SIGKILL on {engine}:\n{out}");
    assert!(
        out.contains("consistency: OK") && out.contains("all"),
        "{out}"
    );
}

#[test]
fn sigkill_loses_no_acknowledged_new_order() {
    let durable: Vec<EngineKind> = EngineKind::value_variants()
        .iter()
        .copied()
        .filter(|k| k.durable())
        .collect();
    if durable.is_empty() {
        println!("SKIPPED: needs the durable keel store (issue 5)");
        return;
    }
    for k in durable {
        let base = tempfile::tempdir().unwrap();
        crash_once(k.name(), base.path());
    }
}
