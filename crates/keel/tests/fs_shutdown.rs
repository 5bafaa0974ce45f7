//! Power loss on real file systems: XFS and ext4 on loop devices, shut down with no log flush
//! (`xfs_io -x -c shutdown`, the `godown` of xfstests' crash tests) while a child process
//! commits; then unmounted, mounted again (the file system replays its own journal) and the store
//! reopened (Keel's recovery).
//!
//! What this models that SimFs cannot: the kernel's own metadata — the unwritten-to-written
//! extent conversion after an O_DIRECT write into preallocated space, a growing log file's size,
//! the directory entries of files a store creates, the journal of each file system — and the real
//! system calls (O_DIRECT, O_DSYNC, `RWF_ATOMIC`, io_uring). A shut-down file system keeps
//! exactly what reached the loop device; everything still in the page cache or in the file
//! system's in-memory journal is gone. What it does not model: a device's volatile write cache
//! (the loop device keeps every write it received) or torn sectors; SimFs's crash matrix
//! (`crash.rs`) does.
//!
//! The check: the child runs 1–4 writer threads (`write` or `write_concurrent`, a conflict run
//! again), each committing transactions of a few inserts, updates and removes on keys of its
//! own, derived from the seed, the writer and the transaction's number, plus `add_i64` on its
//! counter row, and appending `ACK w n` to a file on another file system once `commit()`
//! returned; a sixth of the time a transaction before it writes over the writer's keys and its
//! counter and is rolled back (none of it may show). After the crash each counter names the commit point `c` its writer recovered to;
//! the whole table must equal the model at those points, `Store::check` must pass, and each `c`
//! must lie between what had to survive and that writer's last acknowledged commit plus the one
//! in flight:
//!
//! - half the rounds stop the child (SIGSTOP, every thread) before the shutdown: no system call
//!   is then in flight, so every acknowledged commit must survive;
//! - the others shut down while it runs: every commit acknowledged before the shutdown began
//!   must survive. A sync racing the shutdown can be reported done and still be lost — a
//!   20-line appender showed it on both file systems without Keel (docs/design.md, "Power loss
//!   on real file systems") — so those commits count as in flight.
//!
//! A third of the rounds shut the file system down again 0–4 ms into the first recovery, then
//! mount it and recover once more: the same must survive.
//!
//! Rounds draw the torn-page mode, the log's file mode and sync method, the checkpoint interval,
//! the crash moment (also during the store's creation) and the style from a seed; a failure
//! prints its round, and `KEEL_FS_SHUTDOWN_SEED` replays it (the timing within it varies).
//!
//! A quarter of the rounds use 16 KiB pages, a quarter recover in another torn-page mode than the
//! run's, and a quarter write the data file through the page cache (not `O_DIRECT`). Half run
//! with `Config::inline_maintenance` (no cleaner or checkpointer thread), and half with 512-byte
//! log blocks.
//!
//! Root only (loop mounts); otherwise each test prints `SKIPPED: <reason>`.
//!
//! `KEEL_FS_SHUTDOWN_ROUNDS` sets the rounds per file system (default 16),
//! `KEEL_FS_SHUTDOWN_SEED` the first seed (default 1).

#[path = "common/loopfs.rs"]
mod loopfs;
#[path = "common/model.rs"]
mod model;
#[path = "common/rng.rs"]
mod rng;
#[path = "common/workload.rs"]
mod workload;

use keel::{Config, LogFileMode, Store, SyncMethod, TornPage};
use loopfs::{run, Fs, Mount};
use rng::Rng;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// Set in the child: the round's seed, file system, acks file and store directory ([`Round::spec`]).
const CHILD_ENV: &str = "KEEL_FS_SHUTDOWN_CHILD";

/// One round's choices.
#[derive(Clone, Debug)]
struct Round {
    fs: Fs,
    seed: u64,
    /// The store it runs.
    store: workload::Shape,
    /// Crash after this many acknowledged commits (0: at `early_ms` after the child starts,
    /// possibly while it creates the store).
    crash_after: u64,
    early_ms: u64,
    /// Then wait this many microseconds more (inside a later commit, as often as not).
    delay_us: u64,
    /// Stop the child (SIGSTOP) before the shutdown, else shut down while it runs.
    stop_first: bool,
    /// Threads committing at once (their commits share log syncs: group commit).
    writers: usize,
    /// They use `write_concurrent` (retrying a conflict), else `write`.
    concurrent: bool,
    /// Shut the file system down again this many microseconds into the first recovery (then
    /// unmount, mount and recover once more); `None`: one recovery.
    recovery_shutdown_us: Option<u64>,
    /// The torn-page protection the recoveries open with (another than the run's in a quarter
    /// of the rounds).
    recover_mode: TornPage,
}

impl Round {
    fn draw(fs: Fs, seed: u64) -> Round {
        let mut r = Rng(seed);
        let modes = fs.torn_page_modes();
        let mode = modes[r.below(modes.len() as u64) as usize];
        let log_files = if r.below(2) == 0 {
            LogFileMode::Preallocated
        } else {
            LogFileMode::Growing
        };
        let syncs = [
            SyncMethod::Fdatasync,
            SyncMethod::Fsync,
            SyncMethod::ODsync,
            SyncMethod::ODirect,
        ];
        let log_sync = syncs[r.below(syncs.len() as u64) as usize];
        let frequent_checkpoints = r.below(2) == 0;
        let crash_after = if r.below(6) == 0 {
            0
        } else {
            1 + r.below(1_500)
        };
        let early_ms = r.below(40);
        let delay_us = r.below(3_000);
        let stop_first = r.below(2) == 0;
        let writers = 1 + r.below(4) as usize;
        let concurrent = r.below(2) == 0;
        // Its own generator, so the other choices are what the seed always gave.
        let mut again = Rng(seed ^ 0x5eed_2ec0_0000_0001);
        let recovery_shutdown_us = (again.below(3) == 0).then(|| again.below(4_000));
        // Half the rounds without background threads (`Config::inline_maintenance`). Its own
        // generator too.
        let inline = Rng(seed ^ 0x1e11_0000_0000_0014).below(2) == 0;
        // And another: 16 KiB pages in a quarter of the rounds, recovery in another mode in a
        // quarter.
        let mut shape = Rng(seed ^ 0x5a9e_0000_0000_0008);
        let page_size = if shape.below(4) == 0 { 16384 } else { 4096 };
        let recover_mode = if shape.below(4) == 0 {
            modes[shape.below(modes.len() as u64) as usize]
        } else {
            mode
        };
        let buffered_data = shape.below(4) == 0;
        // Atomic writes of a 16 KiB page need a device that does them; the loop device's
        // atomic unit is 4 KiB.
        let page_size = if mode == TornPage::Atomic || recover_mode == TornPage::Atomic {
            4096
        } else {
            page_size
        };
        Round {
            fs,
            seed,
            store: workload::Shape {
                mode,
                log_files,
                log_sync,
                frequent_checkpoints,
                page_size,
                buffered_data,
                inline,
                log_block_size: workload::log_block_size(seed),
            },
            crash_after,
            early_ms,
            delay_us,
            stop_first,
            writers,
            concurrent,
            recovery_shutdown_us,
            recover_mode,
        }
    }

    /// The configuration the recoveries open with: the run's, in `recover_mode`.
    fn recovery_config(&self) -> Config {
        Config {
            torn_page: self.recover_mode,
            ..self.config(true)
        }
    }

    fn config(&self, create: bool) -> Config {
        Config {
            create,
            ..self.store.config()
        }
    }

    /// What the child needs: the seed and the choices, as one environment value.
    fn spec(&self, dir: &Path, acks: &Path) -> String {
        format!(
            "{}|{}|{}|{}",
            self.seed,
            self.fs.name(),
            acks.display(),
            dir.display()
        )
    }
}

/// The last commit each of `writers` writers acknowledged (the largest `n` of its `ACK w n`
/// lines).
fn acked(acks: &Path, writers: usize) -> Result<Vec<u64>, String> {
    Ok(workload::acked_at(
        &workload::read_acks(acks)?,
        writers,
        usize::MAX,
    ))
}

/// Stops process `pid` (SIGSTOP) and waits until every one of its threads is stopped: a thread
/// inside a system call stops only once the call returns, so afterwards none is in flight.
fn stop(pid: u32) -> Result<(), String> {
    run(Command::new("kill").args(["-STOP", &pid.to_string()]))?;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let tasks = std::fs::read_dir(format!("/proc/{pid}/task"))
            .map_err(|e| format!("/proc/{pid}/task: {e}"))?;
        let mut all = true;
        for t in tasks.filter_map(|t| t.ok()) {
            let stat = std::fs::read_to_string(t.path().join("stat")).unwrap_or_default();
            // The state follows the command name, which is in parentheses.
            let state = stat
                .rsplit_once(") ")
                .and_then(|(_, rest)| rest.chars().next());
            if !matches!(state, Some('T' | 't') | None) {
                all = false;
            }
        }
        if all {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("process {pid} did not stop within 10 s"));
        }
        std::thread::sleep(Duration::from_micros(100));
    }
}

/// What one round saw.
#[derive(Debug, Default)]
struct Tally {
    rounds: u64,
    acked: u64,
    /// Writers recovered to their last acknowledged commit / to the one in flight after it / to
    /// one acknowledged while the shutdown raced it (child running), before the last.
    at_acked: u64,
    at_in_flight: u64,
    at_raced: u64,
    /// Rounds whose crash came before the store was created (nothing to recover, or a store
    /// that opens empty).
    before_create: u64,
    groups_replayed: u64,
    doublewrite_restored: u64,
    /// Rounds whose first recovery met a second shutdown, and of those, the ones whose open had
    /// finished before it.
    recovery_shutdowns: u64,
    recovery_shutdowns_after_open: u64,
}

fn round(r: &Round, base: &Path, tally: &mut Tally) -> Result<(), String> {
    let mut mnt = Mount::create(r.fs, base)?;
    let store_dir = mnt.dir.join("store");
    let acks = base.join("acks");
    std::fs::write(&acks, b"").map_err(|e| format!("{}: {e}", acks.display()))?;
    let mut child =
        workload::spawn_child("fs_shutdown_child", CHILD_ENV, r.spec(&store_dir, &acks))?;
    if r.crash_after == 0 {
        std::thread::sleep(Duration::from_millis(r.early_ms));
    } else {
        workload::wait_for_acks(&mut child, &acks, r.crash_after)
            .map_err(|e| format!("before the crash: {e}"))?;
        std::thread::sleep(Duration::from_micros(r.delay_us));
    }
    // What must survive: with the child stopped first, every commit it acknowledged (no system
    // call is then in flight, so whatever a sync reported done reached the loop device); with
    // the child running, every commit acknowledged before the shutdown began. A sync racing the
    // shutdown may be reported done and still be lost (shown with a 20-line appender, without
    // Keel, on both file systems: docs/design.md, "Power loss on real file systems"), so those
    // commits count as in flight.
    if r.stop_first {
        stop(child.id())?;
    }
    let must = acked(&acks, r.writers)?;
    let shut = mnt.shut_down();
    let _ = child.kill();
    let _ = child.wait();
    shut?;
    let last_ack = acked(&acks, r.writers)?;
    mnt.unmount()?;
    mnt.mount()?;
    // The log files as the crash left them (for a failure's message).
    let logs: Vec<String> = std::fs::read_dir(store_dir.join(keel::LOG_DIR))
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| {
                    let len = e.metadata().map(|m| m.len()).unwrap_or(0);
                    format!("{}={len}", e.file_name().to_string_lossy())
                })
                .collect()
        })
        .unwrap_or_default();

    // A third of the rounds lose power again during the first recovery (its doublewrite
    // restores, the flush of replayed pages, the checkpoint it records on page 0 and in the log,
    // the log's restart), as the crash matrix does on SimFs: what had to survive still must.
    if let Some(us) = r.recovery_shutdown_us {
        let (dir, cfg) = (store_dir.clone(), r.recovery_config());
        let opener = std::thread::spawn(move || Store::open(&dir, cfg));
        std::thread::sleep(Duration::from_micros(us));
        let shut = mnt.shut_down();
        let opened = opener
            .join()
            .map_err(|_| "the recovery that met the shutdown panicked".to_string())?;
        tally.recovery_shutdowns += 1;
        tally.recovery_shutdowns_after_open += u64::from(opened.is_ok());
        drop(opened);
        shut?;
        mnt.unmount()?;
        mnt.mount()?;
    }
    let store = match Store::open(&store_dir, r.recovery_config()) {
        Ok(s) => s,
        Err(e) if last_ack.iter().all(|&a| a == 0) => {
            // A creation cut short is finished by the next open (docs/format.md, "How a store is
            // created"): a directory a crash left must never become one nobody can open.
            return Err(format!("reopen after a crash during creation: {e}"));
        }
        // No exception for `none` mode: a shut-down file system tears no page (the loop device
        // gets whole writes), so even an unprotected store must recover.
        Err(e) => {
            return Err(format!(
                "reopen after {last_ack:?} acknowledged commits: {e}"
            ));
        }
    };
    let rep = store.recovery();
    if rep.created {
        // The crash came before the store existed (or while it was being made): nothing may
        // have been acknowledged, and the open made it afresh.
        if last_ack.iter().any(|&a| a > 0) {
            return Err(format!(
                "{last_ack:?} commits were acknowledged, but the reopen created a new store"
            ));
        }
        tally.before_create += 1;
    }
    tally.groups_replayed += rep.groups_replayed;
    tally.doublewrite_restored += rep.doublewrite_restored;
    let context = format!("log files {logs:?}; recovery {rep:?}");
    let cs = workload::verify(&store, r.seed, &must, &last_ack, &context)
        .map_err(workload::Unverified::message)?;
    store.close().map_err(|e| format!("close: {e}"))?;
    tally.rounds += 1;
    for (&c, &last) in cs.iter().zip(&last_ack) {
        tally.acked += last;
        if c == last {
            tally.at_acked += 1;
        } else if c > last {
            tally.at_in_flight += 1;
        } else {
            tally.at_raced += 1;
        }
    }
    Ok(())
}

fn rounds(fs: Fs) {
    loopfs::run_rounds(
        "fs_shutdown",
        fs,
        "KEEL_FS_SHUTDOWN",
        16,
        &[],
        |seed, base, tally| {
            let r = Round::draw(fs, seed);
            round(&r, base, tally).map_err(|e| format!("{r:?}: {e}"))
        },
    );
}

#[test]
fn xfs_shutdown_loses_no_acknowledged_commit() {
    rounds(Fs::Xfs);
}

#[test]
fn ext4_shutdown_loses_no_acknowledged_commit() {
    rounds(Fs::Ext4);
}

/// The child side: runs the round's transactions until the file system goes away under it.
/// Does nothing unless [`CHILD_ENV`] is set (so it passes in a normal run).
#[test]
fn fs_shutdown_child() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let mut parts = spec.splitn(4, '|');
    let seed: u64 = parts.next().and_then(|s| s.parse().ok()).expect("seed");
    let fs = match parts.next() {
        Some("xfs") => Fs::Xfs,
        _ => Fs::Ext4,
    };
    let acks = PathBuf::from(parts.next().expect("acks"));
    let dir = PathBuf::from(parts.next().expect("dir"));
    let r = Round::draw(fs, seed);
    let store = match Store::open(&dir, r.config(true)) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("child open: {e}");
            std::process::exit(3);
        }
    };
    workload::child_writers(&store, r.seed, r.concurrent, r.writers, &acks, None);
}
