//! Power loss on real file systems with a volatile device cache: XFS and ext4 on a loop device
//! whose every write and cache flush is recorded (`common/recording_disk.rs`, a FUSE file this
//! process serves), then rebuilt as a power loss after any request would leave it — every write
//! before the last flush, and of those after it none, all, a prefix, or any subset of 4 KiB
//! blocks (reordered and torn writes; [`TEAR`] says why not smaller) — mounted (the file system
//! replays its journal) and the store opened (Keel's recovery).
//!
//! What this models that neither SimFs (`crash.rs`, Keel's own model of a file system) nor the
//! file-system shutdown (`fs_shutdown.rs`, whose loop device keeps every write it received)
//! does: the real file systems' ordering of data, metadata and journal against the device's
//! cache flushes — what `fdatasync`, `fsync`, `O_DSYNC` and `O_DIRECT` writes into preallocated
//! or appended space really make durable, directory entries of new log files, the journal's
//! own torn-write handling — under a device that may lose, reorder or tear anything it was not
//! told to flush.
//!
//! The workload (`common/workload.rs`, shared with `fs_shutdown.rs`): 1–4 writer threads
//! (exclusive or concurrent transactions) commit transactions of a few inserts, updates and
//! removes and add 1 to their counter row, `Durability::Sync`; a sixth of the transactions are
//! first written and rolled back. A commit is acknowledged at the device position (requests
//! completed) when `commit()` returned. A crash image at position `p` must then open, pass
//! `Store::check`, and hold for each writer exactly its commits up to some `c` with `c` the last
//! one acknowledged at or before `p`, or the one after it (in flight at `p`); the table must
//! equal the model at those commits. In `none` mode a torn page may instead be reported as
//! corruption (counted; never a wrong answer).
//!
//! A third of the crash images are recovered on a recording disk in turn and lose power again
//! at a random request of that recovery; the recovery after that must give the same.
//!
//! A third of the rounds run the workload in a child process and kill it (SIGKILL) mid-commit;
//! this process then recovers the store on the same mount — the dead process's unsynced writes
//! still in the page cache — checks that the kill lost nothing acknowledged, and closes it. Half
//! the crash images of such a round fall after the kill, and those after that recovery returned
//! must keep what it showed. Half of these rounds commit with `Durability::Buffered`
//! (acknowledged once written to the OS: a kill loses none, a power loss any that no sync
//! covered), so that the recovery reads a long unsynced tail; their crash images must hold only
//! a prefix of each writer's commits, and what the recovery showed. (Without
//! `RedoLog::sync_recovered` this fails: a page written by that recovery carries an LSN the
//! durable log never reached.)
//!
//! Rounds draw the file system's sector size (512 or 4096), the torn-page mode, the log's file
//! mode, sync method and block size (512 or 4096), page size, `O_DIRECT` or not, inline maintenance or threads, how often
//! checkpoints run, the writers, and whether the run ends with `close`, a drop, or the kill of a
//! child process that ran it (then this process recovers the store on the same mount, and the
//! crash images fall in that recovery too: what it showed must survive them); each round
//! checks `KEEL_POWER_LOSS_CRASHES` (default 8) crash images. Root only (loop and FUSE mounts),
//! else `SKIPPED: <reason>`. `KEEL_POWER_LOSS_ROUNDS` (default 6 per file system) and
//! `KEEL_POWER_LOSS_SEED` choose the rounds; a failure names its round and crash image.

#[path = "common/loopfs.rs"]
mod loopfs;
#[path = "common/model.rs"]
mod model;
#[path = "common/recording_disk.rs"]
mod recording_disk;
#[path = "common/rng.rs"]
mod rng;
#[path = "common/workload.rs"]
mod workload;

use keel::{Config, Durability, Store, SyncMethod, TornPage};
use loopfs::Fs;
use recording_disk::{crash_image, Cache, ImageMount, Op, RecordingDisk};
use rng::Rng;
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

/// The unit a write after the last flush is kept or lost in: the file systems' 4 KiB block,
/// whatever the device's logical sector. Both assume a block they write reaches the disk whole
/// (torn at 512 bytes, an XFS metadata block whose first sector carries the new LSN fails its
/// CRC, and the journal replay, which trusts that LSN, does not rewrite it: the mount is
/// refused — seed 29 of the first run, before Keel's store was even opened). Keel's own pages
/// and log blocks still tear at 4 KiB; `crash.rs` tears them at 512 bytes on SimFs.
const TEAR: usize = 4096;

/// One round's choices.
#[derive(Clone, Debug)]
struct Round {
    fs: Fs,
    seed: u64,
    sector: u32,
    /// The store it runs.
    store: workload::Shape,
    writers: usize,
    concurrent: bool,
    /// Commits per writer.
    commits: u64,
    /// How the run ends.
    end: End,
    /// `Durability::Buffered` commits (half the [`End::Kill`] rounds): acknowledged once
    /// written to the OS, so a kill loses none of them but a power loss may lose any that no
    /// sync covered yet; the crash images then hold only what a recovery showed.
    buffered_commits: bool,
}

/// How a round's run ends (before the file system is unmounted cleanly).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum End {
    /// `Store::close`.
    Close,
    /// The store dropped (a process that exits).
    Drop,
    /// The workload runs in a child process, killed (SIGKILL) mid-commit: its unsynced writes
    /// stay in the page cache, and this process recovers the store on the same mount (and
    /// closes it) — so the crash images also fall inside a recovery that read writes a power
    /// loss would take away.
    Kill,
}

impl Round {
    fn draw(fs: Fs, seed: u64) -> Round {
        let mut r = Rng(seed ^ 0x9011_0000_0000_0039);
        Round {
            fs,
            seed,
            sector: if r.below(2) == 0 { 512 } else { 4096 },
            store: workload::Shape::draw(fs.torn_page_modes(), &mut r, seed),
            writers: 1 + r.below(4) as usize,
            concurrent: r.below(2) == 0,
            commits: 40 + r.below(160),
            end: [End::Close, End::Drop, End::Kill][r.below(3) as usize],
            buffered_commits: false,
        }
        .with_commits(Rng(seed ^ 0xb0ff_0000_0000_0039).below(2) == 0)
        .fit_device()
    }

    /// O_DIRECT log writes need blocks of at least the device's logical block size: Keel
    /// refuses 512-byte log blocks with `SyncMethod::ODirect` on 4 KiB sectors at creation
    /// ("sync method o_direct needs log blocks of at least the device's logical block size"),
    /// so such a round uses 4 KiB blocks.
    fn fit_device(mut self) -> Round {
        if self.sector == 4096 && self.store.log_sync == SyncMethod::ODirect {
            self.store.log_block_size = 4096;
        }
        self
    }

    /// Buffered commits if `buffered` and the round ends with a kill.
    fn with_commits(self, buffered: bool) -> Round {
        Round {
            buffered_commits: buffered && self.end == End::Kill,
            ..self
        }
    }

    fn config(&self) -> Config {
        Config {
            durability: if self.buffered_commits {
                Durability::Buffered
            } else {
                Durability::Sync
            },
            ..self.store.config()
        }
    }
}

/// What the rounds saw.
#[derive(Debug, Default)]
struct Tally {
    rounds: u64,
    requests: u64,
    flushes: u64,
    acked: u64,
    crash_images: u64,
    /// Images whose sectors after the last flush were partly kept.
    torn_caches: u64,
    /// Crash images before the store existed (opened empty or created afresh).
    before_create: u64,
    /// Writers recovered to their last acknowledged commit / to the one in flight.
    at_acked: u64,
    at_in_flight: u64,
    groups_replayed: u64,
    doublewrite_restored: u64,
    /// Rounds whose run ended with the kill of the child that ran it.
    kills: u64,
    /// Images recovered on a recording disk and crashed again during that recovery.
    recovery_crashes: u64,
    /// `none` mode: a torn page reported as corruption.
    corruption_reported: u64,
}

use workload::Ack;

/// What [`record`] recorded: the requests, the acknowledgements, and the device position when
/// the store's creation returned.
struct Recorded {
    ops: Vec<Op>,
    acks: Vec<Ack>,
    created_at: usize,
    /// After a kill: the device position when the recovery that followed returned, and the
    /// commit of each writer it showed (durable from then on, whatever was acknowledged).
    shown: Option<(usize, Vec<u64>)>,
    /// After a kill: the device position when the child was gone (half the crash images fall
    /// after it, in the recovery that reads the dead process's unsynced writes).
    killed_at: Option<usize>,
}

/// Runs the round's workload on a recording disk.
fn record(r: &Round, image: &Path, base: &Path, tally: &mut Tally) -> Result<Recorded, String> {
    let disk = RecordingDisk::start(image, &base.join("run"), r.sector)?;
    if r.end == End::Kill {
        return record_killed(r, disk, base, tally);
    }
    let dir = disk.mnt.join("store");
    let acks: Mutex<Vec<Ack>> = Mutex::new(Vec::new());
    let store = Store::open(&dir, r.config()).map_err(|e| format!("create: {e}"))?;
    let created_at = disk.position();
    let ack = |w: usize, n: u64| {
        let at = disk.position();
        acks.lock().map(|mut a| a.push((w, n, at))).ok();
    };
    workload::run_writers(
        &store,
        r.seed,
        r.concurrent,
        r.writers,
        Some(r.commits),
        &ack,
    )?;
    if r.end == End::Close {
        store.close().map_err(|e| format!("close: {e}"))?;
    } else {
        drop(store);
    }
    let ops = disk.stop()?;
    Ok(Recorded {
        ops,
        acks: acks.into_inner().unwrap_or_else(|p| p.into_inner()),
        created_at,
        shown: None,
        killed_at: None,
    })
}

/// Set in the child of an [`End::Kill`] round: the round's seed, file system, acks file, store
/// directory and the recording disk's position file.
const CHILD_ENV: &str = "KEEL_POWER_LOSS_CHILD";

/// [`record`] of an [`End::Kill`] round: the child commits until it is killed, after at least
/// the round's commits; then this process recovers the store, checks that the kill lost no
/// acknowledged commit, and closes it.
fn record_killed(
    r: &Round,
    disk: RecordingDisk,
    base: &Path,
    tally: &mut Tally,
) -> Result<Recorded, String> {
    let dir = disk.mnt.join("store");
    let acks_file = base.join("acks");
    std::fs::write(&acks_file, b"").map_err(|e| format!("{}: {e}", acks_file.display()))?;
    let spec = format!(
        "{}|{}|{}|{}|{}",
        r.seed,
        r.fs.name(),
        acks_file.display(),
        dir.display(),
        disk.position_file().display()
    );
    let mut child = workload::spawn_child("power_loss_child", CHILD_ENV, spec)?;
    workload::wait_for_acks(&mut child, &acks_file, r.commits * r.writers as u64)?;
    std::thread::sleep(Duration::from_micros(Rng(r.seed ^ 0x4b11).below(2_000)));
    child.kill().map_err(|e| format!("kill the child: {e}"))?;
    let _ = child.wait();
    tally.kills += 1;
    let killed_at = disk.position();
    let acks = workload::read_acks(&acks_file)?;
    let last = workload::acked_at(&acks, r.writers, usize::MAX);
    // The recovery after the kill, on the same mount: it reads the dead process's unsynced
    // writes from the page cache. Nothing acknowledged may be missing.
    let store = Store::open(&dir, r.config()).map_err(|e| format!("open after the kill: {e}"))?;
    let bounds = Bounds {
        must: last.clone(),
        acked: last,
    };
    let shown = verify(r, &store, &bounds, tally).map_err(|e| format!("after the kill: {e}"))?;
    let shown_at = disk.position();
    store
        .close()
        .map_err(|e| format!("close after the kill: {e}"))?;
    let ops = disk.stop()?;
    Ok(Recorded {
        ops,
        acks,
        created_at: 0,
        shown: shown.map(|cs| (shown_at, cs)),
        killed_at: Some(killed_at),
    })
}

/// The child of an [`End::Kill`] round: commits until it is killed. Does nothing unless
/// [`CHILD_ENV`] is set (so it passes in a normal run).
#[test]
fn power_loss_child() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let parts: Vec<&str> = spec.splitn(5, '|').collect();
    let [seed, fs, acks, dir, position] = parts[..] else {
        panic!("child spec {spec:?}");
    };
    let seed: u64 = seed.parse().expect("seed");
    let fs = if fs == "xfs" { Fs::Xfs } else { Fs::Ext4 };
    let r = Round::draw(fs, seed);
    let position = Path::new(position);
    let store = match Store::open(dir, r.config()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("child open: {e}");
            std::process::exit(3);
        }
    };
    let at = || recording_disk::read_position(position).expect("the disk's position");
    workload::child_writers(
        &store,
        r.seed,
        r.concurrent,
        r.writers,
        Path::new(acks),
        Some(&at),
    );
}

/// What a crash may leave of each writer's commits: at least `must[w]` (durable), at most
/// `acked[w] + 1` (its last commit acknowledged before the crash, and the one in flight).
struct Bounds {
    must: Vec<u64>,
    acked: Vec<u64>,
}

/// Opens the store in the crash image at `image` and checks it against `b`.
fn check_image(
    r: &Round,
    image: &Path,
    mnt: &Path,
    b: &Bounds,
    tally: &mut Tally,
) -> Result<(), String> {
    let mut m = ImageMount::mount(image, mnt, r.sector)?;
    let dir = m.dir.join("store");
    let unprotected = r.store.mode == TornPage::None;
    let what = format!("{:?} durable", b.must);
    let Some(store) = workload::open_crashed(&dir, r.config(), unprotected, &what)? else {
        tally.corruption_reported += 1;
        return m.unmount();
    };
    if verify(r, &store, b, tally)?.is_some() {
        store.close().map_err(|e| format!("close: {e}"))?;
    }
    m.unmount()
}

/// Checks the store against `b` (each writer between its bounds, the table equal to the model
/// there, `Store::check` clean) and returns the commit each writer recovered to; `None`: a torn
/// page reported in `none` mode.
fn verify(
    r: &Round,
    store: &Store,
    b: &Bounds,
    tally: &mut Tally,
) -> Result<Option<Vec<u64>>, String> {
    let must = &b.must;
    let unprotected = r.store.mode == TornPage::None;
    let rep = store.recovery().clone();
    if rep.created {
        if must.iter().any(|&a| a > 0) {
            return Err(format!(
                "{must:?} commits were acknowledged, but the reopen created a new store"
            ));
        }
        tally.before_create += 1;
    }
    tally.groups_replayed += rep.groups_replayed;
    tally.doublewrite_restored += rep.doublewrite_restored;
    let context = format!("recovery {rep:?}");
    let Some(cs) = workload::verify_crashed(store, r.seed, must, &b.acked, &context, unprotected)?
    else {
        tally.corruption_reported += 1;
        return Ok(None);
    };
    for (&c, &a) in cs.iter().zip(&b.acked) {
        if c == a {
            tally.at_acked += 1;
        } else {
            tally.at_in_flight += 1;
        }
    }
    Ok(Some(cs))
}

/// Recovers the store in `image` on a recording disk and returns the requests of that recovery
/// (an open and a close; a refused open records what it did before the refusal).
fn record_recovery(r: &Round, image: &Path, base: &Path) -> Result<Vec<Op>, String> {
    let disk = RecordingDisk::start(image, &base.join("recovery"), r.sector)?;
    let dir = disk.mnt.join("store");
    if let Ok(store) = Store::open(&dir, r.config()) {
        // A close, or a drop: both are part of what a second power loss may interrupt.
        if r.end != End::Drop {
            let _ = store.close();
        }
    }
    disk.stop()
}

/// A device that acknowledges cache flushes it does not do once the store exists (the
/// break-on-purpose of `a_device_that_ignores_flushes_fails_the_check`): the crash images are
/// taken at the end of the run with the cache lost.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Device {
    Honest,
    IgnoresFlushes,
}

fn round(
    r: &Round,
    base: &Path,
    crashes: u64,
    device: Device,
    tally: &mut Tally,
) -> Result<(), String> {
    let empty = base.join("empty.img");
    loopfs::make_image(
        r.fs,
        &empty,
        recording_disk::image_size(r.fs),
        Some(r.sector),
    )?;
    let Recorded {
        mut ops,
        acks,
        created_at,
        shown,
        killed_at,
    } = record(r, &empty, base, tally)?;
    if device == Device::IgnoresFlushes {
        let mut i = 0;
        ops.retain(|o| {
            i += 1;
            i <= created_at || !matches!(o, Op::Flush)
        });
    }
    tally.rounds += 1;
    tally.requests += ops.len() as u64;
    tally.flushes += ops.iter().filter(|o| matches!(o, Op::Flush)).count() as u64;
    tally.acked += acks.len() as u64;
    let mut rng = Rng(r.seed ^ 0xc4a5_0000_0000_0001);
    let caches = [Cache::Lost, Cache::Kept, Cache::Sectors, Cache::Prefix];
    for i in 0..crashes {
        let from = match killed_at {
            Some(k) if rng.below(2) == 0 => k,
            _ => 0,
        };
        let (at, cache) = match device {
            Device::Honest => (
                from + rng.below((ops.len() - from) as u64 + 1) as usize,
                caches[rng.below(4) as usize],
            ),
            Device::IgnoresFlushes => (ops.len(), Cache::Lost),
        };
        let image = base.join("crash.img");
        let made = crash_image(&empty, &ops, at, cache, TEAR, &mut rng, &image)?;
        tally.crash_images += 1;
        tally.torn_caches +=
            u64::from(made.kept_sectors > 0 && made.kept_sectors < made.cached_sectors);
        // Buffered commits are durable only once a sync covered them, which the test does not
        // see: none must survive a power loss, only what a recovery after the kill showed.
        let acked = workload::acked_at(&acks, r.writers, at);
        let mut must = if r.buffered_commits {
            vec![0; r.writers]
        } else {
            acked.clone()
        };
        // What the recovery after a kill showed is durable once it returned.
        if let Some((shown_at, cs)) = &shown {
            if at >= *shown_at {
                for (m, &c) in must.iter_mut().zip(cs) {
                    *m = (*m).max(c);
                }
            }
        }
        let bounds = Bounds { must, acked };
        let what = format!(
            "crash image {i}: after request {at} of {}, {cache:?} ({made:?})",
            ops.len()
        );
        if rng.below(3) == 0 && device == Device::Honest {
            // Power lost again during the recovery of this image.
            let again = record_recovery(r, &image, base).map_err(|e| format!("{what}: {e}"))?;
            let at2 = rng.below(again.len() as u64 + 1) as usize;
            let cache2 = caches[rng.below(4) as usize];
            let image2 = base.join("crash2.img");
            let made2 = crash_image(&image, &again, at2, cache2, TEAR, &mut rng, &image2)?;
            let _ = std::fs::remove_file(&image);
            tally.recovery_crashes += 1;
            check_image(r, &image2, &base.join("check"), &bounds, tally).map_err(|e| {
                format!(
                    "{what}, recovered and crashed again after its request {at2} of {}, {cache2:?} ({made2:?}): {e}",
                    again.len()
                )
            })?;
        } else {
            check_image(r, &image, &base.join("check"), &bounds, tally)
                .map_err(|e| format!("{what}: {e}"))?;
        }
    }
    let _ = std::fs::remove_file(&empty);
    Ok(())
}

fn rounds(fs: Fs) {
    if let Some(why) = loopfs::cannot_run(fs).or_else(recording_disk::cannot_run) {
        println!("SKIPPED: power_loss {}: {why}", fs.name());
        return;
    }
    let crashes = std::env::var("KEEL_POWER_LOSS_CRASHES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(8);
    loopfs::run_rounds(
        "power_loss",
        fs,
        "KEEL_POWER_LOSS",
        6,
        &[],
        |seed, base, tally| {
            let r = Round::draw(fs, seed);
            round(&r, base, crashes, Device::Honest, tally).map_err(|e| format!("{r:?}: {e}"))
        },
    );
}

#[test]
fn xfs_power_loss_with_a_volatile_cache_loses_no_acknowledged_commit() {
    rounds(Fs::Xfs);
}

#[test]
fn ext4_power_loss_with_a_volatile_cache_loses_no_acknowledged_commit() {
    rounds(Fs::Ext4);
}

/// The check is not vacuous: with a device that drops every cache flush once the store exists,
/// every crash image loses the acknowledged commits, and every one of them fails.
#[test]
fn a_device_that_ignores_flushes_fails_the_check() {
    let fs = Fs::Ext4;
    if let Some(why) = loopfs::cannot_run(fs).or_else(recording_disk::cannot_run) {
        println!("SKIPPED: power_loss lying device: {why}");
        return;
    }
    let base = tempfile::tempdir().expect("temp dir");
    let mut failed = 0;
    for seed in 1..=2 {
        let r = Round {
            commits: 20,
            end: End::Close,
            ..Round::draw(fs, seed)
        };
        let mut tally = Tally::default();
        match round(&r, base.path(), 1, Device::IgnoresFlushes, &mut tally) {
            Ok(()) => println!("seed {seed}: the lying device went unnoticed: {tally:?}"),
            Err(e) => {
                println!("seed {seed}: caught: {e}");
                failed += 1;
            }
        }
    }
    assert_eq!(
        failed, 2,
        "a device that ignores flushes must fail every round"
    );
}

/// Recording disk invariant 2: a crash image holds every write before the last flush of the
/// prefix, and of the later ones what the cache mode keeps (sector by sector, in order).
#[test]
fn a_crash_image_keeps_what_a_flush_covered() {
    const B: usize = 4096;
    let dir = tempfile::tempdir().expect("temp dir");
    let base = dir.path().join("base.img");
    std::fs::write(&base, vec![0u8; 4 * B]).expect("base image");
    let ops = vec![
        Op::Write {
            offset: 0,
            data: vec![1; B],
        },
        Op::Write {
            offset: B as u64,
            data: vec![2; 2 * B],
        },
        Op::Flush,
        Op::Write {
            offset: 0,
            data: vec![3; B],
        },
        Op::Write {
            offset: 2 * B as u64,
            data: vec![4; 2 * B],
        },
    ];
    let image = dir.path().join("crash.img");
    let blocks = |cache: Cache, at: usize, seed: u64| -> Vec<u8> {
        crash_image(&base, &ops, at, cache, B, &mut Rng(seed), &image).expect("crash image");
        let bytes = std::fs::read(&image).expect("read the image");
        bytes
            .chunks(B)
            .map(|c| {
                assert!(c.iter().all(|&b| b == c[0]), "a sector torn inside");
                c[0]
            })
            .collect()
    };
    assert_eq!(blocks(Cache::Lost, 5, 1), [1, 2, 2, 0]);
    assert_eq!(blocks(Cache::Kept, 5, 1), [3, 2, 4, 4]);
    // Before the flush, nothing is durable.
    assert_eq!(blocks(Cache::Lost, 2, 1), [0, 0, 0, 0]);
    assert_eq!(blocks(Cache::Kept, 2, 1), [1, 2, 2, 0]);
    // Subsets: every image keeps what the flush covered, and over many draws each cached
    // sector is seen kept and lost, the second write's two sectors apart (torn).
    let mut seen = std::collections::BTreeSet::new();
    for seed in 0..64 {
        for cache in [Cache::Sectors, Cache::Prefix] {
            let b = blocks(cache, 5, seed);
            assert!(
                matches!(b[0], 1 | 3)
                    && b[1] == 2
                    && matches!(b[2], 2 | 4)
                    && matches!(b[3], 0 | 4),
                "{b:?}"
            );
            if cache == Cache::Prefix {
                // In order: a later sector only with every earlier one.
                assert!(
                    !((b[0] == 1 && b[2] == 4) || (b[2] == 2 && b[3] == 4)),
                    "{b:?}"
                );
            }
            seen.insert(b);
        }
    }
    assert!(
        seen.contains(&vec![1, 2, 4, 0]) && seen.contains(&vec![3, 2, 2, 4]),
        "{seen:?}"
    );
}
