//! Crash and recover: the parent runs this same program as a child in `writer` mode. The child
//! commits numbered rows (`Durability::Sync`) as fast as it can and, after each `commit()`
//! returns, appends the acknowledged number to a side file. The parent SIGKILLs the child
//! mid-flight (no shutdown, no final checkpoint; the kernel's page cache survives, as it would
//! for a killed process), reopens the store, prints what recovery did (`Store::recovery()`:
//! pages restored, records replayed, bytes discarded, time taken) and verifies that every
//! acknowledged row is present with its value. It repeats for several rounds, each child going
//! on from where the store stands. The exit code is non-zero if an acknowledged row is missing.
//!
//! ```sh
//! cargo run --release --example crash_and_recover -- [DIR] [ROUNDS]   # ./keel-crash, 3
//! ```

use keel::{Config, Durability, Store};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

type BoxError = Box<dyn std::error::Error>;

const ACKED: &str = "acked.txt";
const TABLE: &str = "rows";

/// A small log and pool so checkpoints and page writes happen while the child runs.
fn config() -> Config {
    Config {
        page_size: 4096,
        pool_size: 2 << 20,
        log_file_size: 2 << 20,
        durability: Durability::Sync,
        checkpoint_interval: std::time::Duration::from_millis(200),
        ..Config::default()
    }
}

fn key(n: u64) -> Vec<u8> {
    format!("row{n:010}").into_bytes()
}

fn value(n: u64) -> Vec<u8> {
    // Varying lengths so pages split and fill unevenly.
    let len = 40 + (n.wrapping_mul(2654435761) % 200) as usize;
    let mut v = format!("value of row {n}:").into_bytes();
    v.resize(len, b'a' + (n % 26) as u8);
    v
}

/// The child: commit rows `start..` forever, recording each acknowledged number.
fn writer(dir: &Path, start: u64) -> Result<(), BoxError> {
    let store = Store::open(dir.join("store"), config())?;
    let mut acked = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(ACKED))?;
    let mut n = start;
    loop {
        let tx = store.write()?;
        {
            let mut t = tx.table(TABLE)?;
            // A few rows per transaction; the transaction's number is its first row.
            for k in n..n + 4 {
                t.insert(&key(k), &value(k))?;
            }
        }
        tx.commit()?;
        // Acknowledged: the commit returned, so these rows must survive any crash from now on.
        acked.write_all(format!("{n} {}\n", n + 4).as_bytes())?;
        n += 4;
    }
}

/// Acknowledged row ranges in the side file (complete lines only: the child may die mid-line).
fn read_acked(dir: &Path) -> Result<Vec<(u64, u64)>, BoxError> {
    let text = match std::fs::read_to_string(dir.join(ACKED)) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e.into()),
    };
    let complete = match text.rfind('\n') {
        Some(i) => &text[..=i],
        None => "",
    };
    let mut out = Vec::new();
    for line in complete.lines() {
        let mut parts = line.split(' ').map(str::parse::<u64>);
        match (parts.next(), parts.next()) {
            (Some(Ok(a)), Some(Ok(b))) => out.push((a, b)),
            _ => return Err(format!("bad line in {ACKED}: {line:?}").into()),
        }
    }
    Ok(out)
}

fn parent(dir: &Path, rounds: u32) -> Result<bool, BoxError> {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir)?;
    let exe = std::env::current_exe()?;
    let mut next = 0u64;
    let mut all_ok = true;
    for round in 1..=rounds {
        let before = read_acked(dir)?.len();
        let mut child = Command::new(&exe)
            .arg("writer")
            .arg(dir)
            .arg(next.to_string())
            .stdin(Stdio::null())
            .spawn()?;
        // Let it get going (first acknowledged commit of this round), then let it run a while.
        let t0 = Instant::now();
        while read_acked(dir)?.len() == before {
            if let Some(status) = child.try_wait()? {
                return Err(format!("writer exited early: {status}").into());
            }
            if t0.elapsed() > Duration::from_secs(60) {
                let _ = child.kill();
                return Err("writer made no commit within 60 s".into());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(Duration::from_millis(300 + 170 * u64::from(round)));
        // On Unix `Child::kill` sends SIGKILL: no destructor, no checkpoint, no log flush.
        child.kill()?;
        let status = child.wait()?;
        let acked = read_acked(dir)?;
        let acked_rows: u64 = acked.iter().map(|(a, b)| b - a).sum();
        println!(
            "round {round}: writer killed ({status}) after {} acknowledged commits this round ({acked_rows} rows acknowledged in all)",
            acked.len() - before
        );

        let store = Store::open(dir.join("store"), config())?;
        let rec = store.recovery();
        println!(
            "  recovery: {:.1} ms; log from checkpoint LSN {} to end LSN {}; {} committed groups replayed",
            rec.duration_ms, rec.checkpoint_lsn.0, rec.end_lsn.0, rec.groups_replayed
        );
        println!(
            "  redo: {} records applied, {} skipped (page already newer), {} pages read, {} pages rebuilt from redo alone, {} torn/unusable pages rebuilt",
            rec.redo.records_applied,
            rec.redo.records_skipped,
            rec.redo.pages_read,
            rec.redo.pages_from_redo,
            rec.redo.unusable_pages_rebuilt.len()
        );
        println!(
            "  pages restored from doublewrite: {} ({} valid images); pages flushed after replay: {}",
            rec.doublewrite_restored, rec.doublewrite_images_valid, rec.pages_flushed
        );
        println!(
            "  log bytes discarded: {} ({}); scan stopped: {}",
            rec.log_bytes_discarded,
            rec.discard_reason.as_deref().unwrap_or("no torn tail"),
            rec.log_end_reason
        );
        let r = store.read()?;
        let t = r.table(TABLE)?;
        let mut missing = 0u64;
        let mut wrong = 0u64;
        for &(a, b) in &acked {
            for n in a..b {
                match t.get(&key(n))? {
                    None => missing += 1,
                    Some(v) if v != value(n) => wrong += 1,
                    Some(_) => {}
                }
            }
        }
        let present = t.range(..)?.count() as u64;
        // The rows present are a prefix of the numbering (one writer, in order): anything past
        // the acknowledged ones was committed but killed before it could be acknowledged.
        let mut prefix = 0u64;
        while t.get(&key(prefix))?.is_some() {
            prefix += 1;
        }
        println!(
            "  verify: {acked_rows} acknowledged rows, {missing} missing, {wrong} with a wrong value; \
             {present} rows present ({} committed but not yet acknowledged when killed)",
            present.saturating_sub(acked_rows)
        );
        if missing > 0 || wrong > 0 || prefix != present {
            println!("  FAILED: acknowledged commits lost or rows out of order (prefix {prefix})");
            all_ok = false;
        }
        next = present;
        drop(r);
        drop(store);
        // The next child appends after the last row that survived; an unacknowledged tail that
        // survived counts as acknowledged from now on.
        let mut side = std::fs::OpenOptions::new()
            .append(true)
            .open(dir.join(ACKED))?;
        if let Some(&(_, b)) = acked.last() {
            if present > b {
                side.write_all(format!("{b} {present}\n").as_bytes())?;
            }
        }
    }
    Ok(all_ok)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("writer") {
        let (Some(dir), Some(start)) = (args.get(1), args.get(2).and_then(|s| s.parse().ok()))
        else {
            eprintln!("usage: crash_and_recover writer DIR START");
            return ExitCode::from(2);
        };
        // Runs until killed; returning at all is an error.
        return match writer(Path::new(dir), start) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("crash_and_recover writer: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let dir = args
        .first()
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("keel-crash"));
    let rounds = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(3);
    match parent(&dir, rounds) {
        Ok(true) => {
            println!("OK: every acknowledged commit survived {rounds} SIGKILLs");
            ExitCode::SUCCESS
        }
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("crash_and_recover: {e}");
            ExitCode::FAILURE
        }
    }
}
