//! Full disks on real file systems: a store on a loop-mounted XFS or ext4 whose free space was
//! taken by a filler file (`fallocate`) down to a few MiB, written until the disk is full.
//!
//! What must hold (the standards' "full disks"): the write that finds the disk full fails with an
//! error that says so (`Error::is_no_space`), never a panic or a hang or a vague error; the store
//! then takes no further writes (poisoned) and still serves reads of what was committed; a reopen
//! on the still-full disk either works or is refused with a no-space error, and loses nothing,
//! and a read-only open there (which writes nothing) shows every acknowledged commit;
//! once space is freed, a reopen recovers every acknowledged commit (plus, possibly, the one whose
//! commit failed: its redo may have been durable), `Store::check` passes, and the store takes
//! writes again. A store whose creation ran out of space is finished by the reopen after space
//! was freed, never refused as half-made.
//!
//! SimFs injects ENOSPC at a chosen write (`tests/errors.rs`); here the kernel decides where it
//! strikes: the data file growing through O_DIRECT writes into holes (or, in half the rounds,
//! through the page cache), a growing log file (written by every sync method), the doublewrite
//! area, the preallocated log at creation.
//!
//! Root only (loop mounts); otherwise each test prints `SKIPPED: <reason>`.
//! `KEEL_FS_FULL_ROUNDS` sets the rounds per file system (default 6), `KEEL_FS_FULL_SEED` the first
//! seed (default 1).

#[path = "common/loopfs.rs"]
mod loopfs;
#[path = "common/model.rs"]
mod model;
#[path = "common/rng.rs"]
mod rng;

use keel::{Config, Durability, LogFileMode, Store, SyncMethod, TornPage};
use loopfs::{run, Fs, Mount};
use model::Model;
use rng::Rng;
use std::path::Path;
use std::process::Command;

const TABLE: &str = "t";
/// No round should need more commits than this to fill a few MiB.
const MAX_COMMITS: u64 = 200_000;

/// Transaction `n`'s rows: 8 new keys with values of 300–500 bytes (so the store grows).
fn rows(seed: u64, n: u64) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut r = Rng(seed ^ n.wrapping_mul(0x2545_F491_4F6C_DD1D));
    (0..8)
        .map(|i| {
            let key = format!("{:016x}", r.next()).into_bytes();
            let mut v = format!("{n}:{i}:").into_bytes();
            v.resize(300 + r.below(200) as usize, b'a' + (n % 26) as u8);
            (key, v)
        })
        .collect()
}

fn model(seed: u64, c: u64) -> Model {
    (1..=c).flat_map(|n| rows(seed, n)).collect()
}

/// Table "t", or the error as text.
fn contents(store: &Store) -> Result<Model, String> {
    model::contents(store).map_err(|e| format!("reading table {TABLE}: {e}"))
}

/// Which commit point `rows` is: `acked`, or `acked + 1` (the commit that failed).
fn commit_point(seed: u64, acked: u64, rows: &Model, when: &str) -> Result<u64, String> {
    if *rows == model(seed, acked) {
        return Ok(acked);
    }
    if *rows == model(seed, acked + 1) {
        return Ok(acked + 1);
    }
    Err(format!(
        "{when}: the table ({} rows) is neither commit {acked} ({} rows) nor the failed one after it",
        rows.len(),
        model(seed, acked).len()
    ))
}

#[derive(Clone, Debug)]
struct Round {
    seed: u64,
    mode: TornPage,
    log_files: LogFileMode,
    /// Free space left beside the filler, in KiB.
    free_kib: u64,
    /// The data file through the page cache (else `O_DIRECT`, the default).
    buffered_data: bool,
    /// The log's sync method.
    log_sync: SyncMethod,
}

impl Round {
    fn draw(fs: Fs, seed: u64) -> Round {
        let mut r = Rng(seed);
        let modes = fs.torn_page_modes();
        Round {
            seed,
            mode: modes[r.below(modes.len() as u64) as usize],
            log_files: if r.below(2) == 0 {
                LogFileMode::Preallocated
            } else {
                LogFileMode::Growing
            },
            // From too little for the store's creation (log 2 x 512 KiB, doublewrite area) to
            // a few MiB of data.
            free_kib: [64, 512, 1_200, 2_000, 3_000, 6_000][r.below(6) as usize] + r.below(512),
            // Every round before ran an O_DIRECT data file and an fdatasync'd log: a buffered
            // data file meets the full disk at its write-back and syncs, O_DSYNC and O_DIRECT
            // logs at their writes. Their own generator, so the rest is what the seed gave.
            buffered_data: Rng(seed ^ 0xf511_0000_0000_0040).below(2) == 0,
            log_sync: [
                SyncMethod::Fdatasync,
                SyncMethod::Fsync,
                SyncMethod::ODsync,
                SyncMethod::ODirect,
            ][Rng(seed ^ 0xf512_0000_0000_0040).below(4) as usize],
        }
    }

    fn config(&self) -> Config {
        Config {
            page_size: 4096,
            pool_size: 64 * 4096,
            torn_page: self.mode,
            doublewrite_batch: 8,
            log_files: self.log_files,
            log_sync: self.log_sync,
            direct_io: !self.buffered_data,
            // Room for a transaction's page images in full-page-writes mode.
            log_file_size: 512 * 1024,
            log_file_count: 2,
            log_buffer_size: 64 * 1024,
            durability: Durability::Sync,
            ..Config::default()
        }
    }
}

/// Free bytes on the file system holding `dir`.
fn free_bytes(dir: &Path) -> Result<u64, String> {
    let out = Command::new("df")
        .args(["-B1", "--output=avail"])
        .arg(dir)
        .output()
        .map_err(|e| format!("df: {e}"))?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .nth(1)
        .and_then(|l| l.trim().parse().ok())
        .ok_or_else(|| format!("df {}: {:?}", dir.display(), out))
}

/// What the rounds saw.
#[derive(Debug, Default)]
struct Tally {
    rounds: u64,
    acked: u64,
    /// Rounds whose store could not even be created on the full disk.
    creation_refused: u64,
    /// Reopens on the still-full disk that worked / were refused with a no-space error.
    full_reopen_ok: u64,
    full_reopen_refused: u64,
    /// Read-only opens on the full disk that worked / were refused as needing more recovery
    /// than fits in memory.
    read_only_ok: u64,
    read_only_needs_recovery: u64,
    /// Rounds where the commit that failed turned out durable.
    failed_commit_durable: u64,
}

fn round(fs: Fs, r: &Round, base: &Path, tally: &mut Tally) -> Result<(), String> {
    let mnt = Mount::create(fs, base)?;
    let filler = mnt.dir.join("filler");
    let free = free_bytes(&mnt.dir)?;
    let take = free.saturating_sub(r.free_kib * 1024);
    run(Command::new("fallocate")
        .args(["-l", &take.to_string()])
        .arg(&filler))?;
    let dir = mnt.dir.join("store");
    let store = match Store::open(&dir, r.config()) {
        Ok(s) => s,
        Err(e) if e.is_no_space() => {
            std::fs::remove_file(&filler).map_err(|e| e.to_string())?;
            let s = Store::open(&dir, r.config()).map_err(|e2| {
                format!("creation ran out of space ({e}); after freeing it the reopen failed: {e2}")
            })?;
            if !contents(&s)?.is_empty() {
                return Err("a store whose creation failed holds rows".into());
            }
            s.close().map_err(|e| format!("close: {e}"))?;
            tally.creation_refused += 1;
            tally.rounds += 1;
            return Ok(());
        }
        Err(e) => return Err(format!("open on a disk with {} KiB free: {e}", r.free_kib)),
    };
    // Fill it.
    let mut acked = 0u64;
    let failure = loop {
        if acked >= MAX_COMMITS {
            return Err(format!("{MAX_COMMITS} commits and the disk is not full"));
        }
        let n = acked + 1;
        let result = (|| -> keel::Result<()> {
            let tx = store.write()?;
            {
                let mut t = tx.table(TABLE)?;
                for (k, v) in rows(r.seed, n) {
                    t.insert(&k, &v)?;
                }
            }
            tx.commit()
        })();
        match result {
            Ok(()) => acked = n,
            Err(e) => break e,
        }
    };
    if !failure.is_no_space() {
        return Err(format!(
            "after {acked} commits the write failed, but not with a no-space error: {failure} ({failure:?})"
        ));
    }
    // No further writes, whatever they are.
    match store.write().and_then(|tx| {
        tx.table(TABLE)?.insert(b"after", b"full")?;
        tx.commit()
    }) {
        Ok(()) => {
            return Err(format!(
                "a commit after the disk filled ({failure}) succeeded"
            ))
        }
        Err(e) if e.is_poisoned() || e.is_no_space() => {}
        Err(e) => return Err(format!("the write after the disk filled failed oddly: {e}")),
    }
    // Reads still see what was committed.
    commit_point(r.seed, acked, &contents(&store)?, "reads after the failure")?;
    drop(store);

    // Reopen on the still-full disk.
    match Store::open(&dir, r.config()) {
        Ok(s) => {
            commit_point(r.seed, acked, &contents(&s)?, "reopen on the full disk")?;
            drop(s);
            tally.full_reopen_ok += 1;
        }
        Err(e) if e.is_no_space() => tally.full_reopen_refused += 1,
        Err(e) => {
            return Err(format!(
                "reopen on the full disk: {e} (not a no-space error)"
            ))
        }
    }
    // A read-only open writes nothing, so a full disk does not stop it: the data can be read
    // (and copied elsewhere) before any space is freed.
    // Recovered in memory only: a pool large enough for every page the log changes.
    let ro = Config {
        read_only: true,
        pool_size: 32 << 20,
        ..r.config()
    };
    match Store::open(&dir, ro) {
        Ok(s) => {
            commit_point(
                r.seed,
                acked,
                &contents(&s)?,
                "read-only open on the full disk",
            )?;
            tally.read_only_ok += 1;
        }
        Err(e @ keel::Error::NeedsRecovery { .. }) => {
            println!("  round {r:?}: read-only open: {e}");
            tally.read_only_needs_recovery += 1;
        }
        Err(e) => return Err(format!("read-only open on the full disk: {e}")),
    }

    // Free the space: everything acknowledged is there, and the store takes writes again.
    std::fs::remove_file(&filler).map_err(|e| e.to_string())?;
    let s =
        Store::open(&dir, r.config()).map_err(|e| format!("reopen after freeing space: {e}"))?;
    let c = commit_point(r.seed, acked, &contents(&s)?, "reopen after freeing space")?;
    if c > acked {
        tally.failed_commit_durable += 1;
    }
    let report = s.check().map_err(|e| format!("check: {e}"))?;
    if !report.is_ok() {
        return Err(format!("check: {:?}", report.problems));
    }
    let tx = s
        .write()
        .map_err(|e| format!("write after freeing space: {e}"))?;
    tx.table(TABLE)
        .and_then(|mut t| t.insert(b"after", b"space").map(drop))
        .map_err(|e| format!("insert after freeing space: {e}"))?;
    tx.commit()
        .map_err(|e| format!("commit after freeing space: {e}"))?;
    s.close().map_err(|e| format!("close: {e}"))?;
    let s = Store::open(&dir, r.config()).map_err(|e| format!("last reopen: {e}"))?;
    let mut want = model(r.seed, c);
    want.insert(b"after".to_vec(), b"space".to_vec());
    if contents(&s)? != want {
        return Err("the last reopen lost rows".into());
    }
    s.close().map_err(|e| format!("close: {e}"))?;
    tally.rounds += 1;
    tally.acked += acked;
    Ok(())
}

fn rounds(fs: Fs) {
    loopfs::run_rounds(
        "fs_full",
        fs,
        "KEEL_FS_FULL",
        6,
        &["fallocate"],
        |seed, base, tally| {
            let r = Round::draw(fs, seed);
            round(fs, &r, base, tally).map_err(|e| format!("{r:?}: {e}"))
        },
    );
}

#[test]
fn xfs_full_disk_loses_nothing_and_says_so() {
    rounds(Fs::Xfs);
}

#[test]
fn ext4_full_disk_loses_nothing_and_says_so() {
    rounds(Fs::Ext4);
}
