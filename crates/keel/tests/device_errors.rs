//! I/O errors from a real device under XFS and ext4: the recording disk of `power_loss.rs`
//! (`common/recording_disk.rs`, a FUSE file under a loop device) starts, at a random moment of
//! a running workload, to answer with EIO the writes or reads of the blocks that hold one of the
//! store's files, every cache flush, or every write to the device — and may heal while the
//! store runs.
//!
//! What this models that SimFs (`io_faults.rs`) does not: the kernel between Keel and the
//! error. A buffered write (the data file without `O_DIRECT`, the log without `O_DIRECT`)
//! succeeds at `pwrite` and fails later, in writeback: the page cache then holds the page clean
//! and may drop it, so a read before the `fsync` that reports the error can return the block
//! as it was before the write — while SimFs keeps a failed write readable until its sync fails.
//! The file systems' own reactions are real too: ext4 aborting its journal, XFS shutting down.
//!
//! Properties, every round:
//! 1. **Reads are never wrong.** A reader thread takes snapshots throughout (and, with a
//!    buffered data file, drops the file's page cache as it goes, as memory pressure would),
//!    and more follow once the run stopped (a poisoned store still serves reads), the device
//!    still failing: each must equal the model at the counters it shows, and show at least
//!    every commit acknowledged before it began.
//! 2. **Poison is sticky**: a store that says it is poisoned acknowledges no further commit.
//! 3. **Nothing acknowledged is lost**: once the device heals, the file system is mounted again
//!    (its journal replayed) and the store opened, each writer is at its last acknowledged
//!    commit or the one in flight, the table equals the model there, and `Store::check` is
//!    clean.
//! 4. **A restart on the still-failing device never makes things worse**: when the device
//!    still fails one file's blocks at the end of the run, the file system is mounted again
//!    (its own blocks are healthy) and the store opened: it refuses with an error, or opens and
//!    reads the acknowledged model (or errors); property 3 then holds once the device heals.
//! 5. **Nor by a power loss after the errors**: crash images (as `power_loss.rs` builds them;
//!    refused writes changed nothing) at random requests after the device began to fail hold
//!    each writer's commits acknowledged by then (or one more) and pass the same checks; in
//!    `none` mode a torn page may be reported as corruption instead.
//! 6. **Nor by a restart on the same mount**: in half the rounds that fail one file's blocks
//!    (the file system stays up), once the device heals the store is opened again without a
//!    remount — the page cache still shows, clean, what the failed writes held, which the
//!    device never got — and must open at the acknowledged commits, take more and checkpoint;
//!    properties 3 and 5 then hold for those too (this found that a recovery which read the
//!    cache built on blocks ext4 never wrote: keel-io's `File::drop_cache`). Property 4 runs in
//!    the other half.
//!
//! A round that runs longer than [`DEADLINE`] aborts the process with a message: a hang is a
//! failure too.
//!
//! Root only (loop and FUSE mounts), else `SKIPPED: <reason>`. `KEEL_DEVICE_ERRORS_ROUNDS`
//! (default 24 per file system) and `KEEL_DEVICE_ERRORS_SEED` choose the rounds.

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

use keel::{Config, Store};
use loopfs::Fs;
use recording_disk::{crash_image, Cache, Failing, ImageMount, RecordingDisk};
use rng::Rng;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// What the device starts to fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Target {
    /// Writes to the blocks of the data file (as it is when the failure starts).
    DataWrites,
    /// Reads of the data file's blocks.
    DataReads,
    /// Writes to the blocks of the log's files.
    LogWrites,
    /// Writes to the doublewrite area's blocks.
    DoublewriteWrites,
    /// Every cache flush.
    Flushes,
    /// Every write: the file system's journal and metadata too.
    AllWrites,
}

/// Drawn uniformly; the data file's writes three times (with a buffered data file, a write lost
/// in write-back that a later read meets: the case that found the bug module `unsynced` of
/// keel-flush fixes).
const TARGETS: [Target; 8] = [
    Target::DataWrites,
    Target::DataWrites,
    Target::DataWrites,
    Target::DataReads,
    Target::LogWrites,
    Target::DoublewriteWrites,
    Target::Flushes,
    Target::AllWrites,
];

/// One round's choices.
#[derive(Clone, Debug)]
struct Round {
    fs: Fs,
    seed: u64,
    sector: u32,
    store: workload::Shape,
    writers: usize,
    concurrent: bool,
    /// Commits per writer (the run stops earlier at the first error).
    commits: u64,
    target: Target,
    /// Commits acknowledged (in all) before the device starts failing.
    fail_after: u64,
    /// The device heals this long after it started failing, while the store runs (`None`: at
    /// the end of the run).
    heal_after: Option<Duration>,
    /// Property 6 instead of property 4: once the device heals, the store is opened again on
    /// the same mount before the remount (when the device failed one file's blocks).
    same_mount: bool,
}

impl Round {
    fn draw(fs: Fs, seed: u64) -> Round {
        let mut r = Rng(seed ^ 0xde71_0000_0000_0040);
        let sector = if r.below(2) == 0 { 512 } else { 4096 };
        let mut store = workload::Shape::draw(fs.torn_page_modes(), &mut r, seed);
        // Half the rounds write the data file through the page cache: its write errors come
        // back only from a later fsync, and its failed pages can be read back as they were.
        store.buffered_data = r.below(2) == 0;
        if sector == 4096 && store.log_sync == keel::SyncMethod::ODirect {
            // 512-byte log blocks cannot be written O_DIRECT on 4 KiB sectors (Keel refuses).
            store.log_block_size = 4096;
        }
        let writers = 1 + r.below(4) as usize;
        let commits = 60 + r.below(200);
        Round {
            fs,
            seed,
            sector,
            store,
            writers,
            concurrent: r.below(2) == 0,
            commits,
            target: TARGETS[r.below(TARGETS.len() as u64) as usize],
            fail_after: 1 + r.below(commits * writers as u64 / 2),
            heal_after: if r.below(3) == 0 {
                Some(Duration::from_millis(r.below(50)))
            } else {
                None
            },
            same_mount: r.below(2) == 0,
        }
    }

    fn config(&self) -> Config {
        self.store.config()
    }
}

/// A round's run, from the store's creation to the checks after the remount, takes at most
/// this long.
const DEADLINE: Duration = Duration::from_secs(180);

/// Snapshots read after the run stopped, the device still failing (property 1).
const AFTER_READS: u64 = 20;

/// Commits per writer after a reopen on the same mount (property 6).
const SAME_MOUNT_COMMITS: u64 = 12;

/// Crash images per round (property 5).
const CRASHES: u64 = 2;

/// The unit a crash image keeps or loses a write after the last flush in (see `power_loss.rs`'
/// `TEAR`).
const TEAR: usize = 4096;

/// What the rounds saw.
#[derive(Debug, Default)]
struct Tally {
    rounds: u64,
    acked: u64,
    /// Rounds whose device started failing before the run ended.
    failing: u64,
    /// Requests the device refused.
    refused_writes: u64,
    refused_reads: u64,
    refused_flushes: u64,
    /// Rounds a commit (or an operation) failed in, and of those the ones whose store said it
    /// was poisoned.
    runs_failed: u64,
    poisoned: u64,
    /// Snapshots the reader checked during the run and after it, and reads that failed with an
    /// error.
    snapshots: u64,
    snapshots_after: u64,
    read_errors: u64,
    /// Rounds whose device healed while the store ran.
    healed_while_running: u64,
    /// Writers at their last acknowledged commit / at the one in flight after the remount or
    /// in a crash image.
    at_acked: u64,
    at_in_flight: u64,
    crash_images: u64,
    /// Reopens on the device still failing a file's blocks: refused, or opened (property 4).
    failing_reopens_refused: u64,
    failing_reopens_opened: u64,
    /// ... or the file system's mount refused (its metadata now on the failing blocks).
    failing_mounts_refused: u64,
    /// `none` mode: a torn page of a crash image reported as corruption.
    corruption_reported: u64,
    /// Reopens on the same mount once the device healed (property 6).
    same_mount_reopens: u64,
}

impl Tally {
    /// Counts each writer recovered to its last acknowledged commit `acked` or the one in
    /// flight after it (`cs`: where each was found).
    fn count_recovered(&mut self, cs: &[u64], acked: &[u64]) {
        for (&c, &a) in cs.iter().zip(acked) {
            if c == a {
                self.at_acked += 1;
            } else {
                self.at_in_flight += 1;
            }
        }
    }
}

/// The device ranges `r.target` names in the store at `dir` (`None`: a target of no file).
fn ranges(r: &Round, dir: &Path) -> Result<Vec<(u64, u64)>, String> {
    let files = match r.target {
        Target::DataWrites | Target::DataReads => vec![dir.join(keel::layout::DATA_FILE_NAME)],
        Target::DoublewriteWrites => vec![dir.join(keel::layout::DOUBLEWRITE_FILE_NAME)],
        Target::LogWrites => {
            let log = dir.join(keel::LOG_DIR);
            std::fs::read_dir(&log)
                .map_err(|e| format!("{}: {e}", log.display()))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .collect()
        }
        Target::Flushes | Target::AllWrites => return Ok(vec![(0, u64::MAX)]),
    };
    let mut out = Vec::new();
    for f in files.iter().filter(|f| f.exists()) {
        out.extend(recording_disk::extents(f)?);
    }
    Ok(out)
}

/// What the device fails from the moment the failure starts.
fn failing(r: &Round, ranges: Vec<(u64, u64)>) -> Failing {
    match r.target {
        Target::DataReads => Failing {
            reads: ranges,
            ..Failing::default()
        },
        Target::Flushes => Failing {
            flushes: true,
            ..Failing::default()
        },
        _ => Failing {
            writes: ranges,
            ..Failing::default()
        },
    }
}

/// Drops the page cache of `file` (`POSIX_FADV_DONTNEED`: clean pages go, as under memory
/// pressure, including those whose writeback failed).
fn drop_cache(file: &std::fs::File) {
    // SAFETY: a plain system call on a file descriptor this function borrows for its duration.
    unsafe {
        libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED);
    }
}

/// Property 1 for one snapshot: the rows equal the model at the counters they show, and each
/// writer is at least at `acked_before` (its commits acknowledged before the snapshot began).
fn check_snapshot(r: &Round, rows: &model::Model, acked_before: &[u64]) -> Result<(), String> {
    let cs = workload::counters(rows, r.writers)?;
    for (w, (&c, &a)) in cs.iter().zip(acked_before).enumerate() {
        if c < a {
            return Err(format!(
                "a snapshot shows writer {w} at commit {c}, but {a} was acknowledged before it began"
            ));
        }
    }
    let want = workload::model(r.seed, &cs);
    if *rows != want {
        return Err(format!(
            "a snapshot at commits {cs:?} differs from the model: {:?}",
            workload::diff(rows, &want)
        ));
    }
    Ok(())
}

fn round(r: &Round, base: &Path, tally: &mut Tally) -> Result<(), String> {
    let empty = base.join("empty.img");
    loopfs::make_image(
        r.fs,
        &empty,
        recording_disk::image_size(r.fs),
        Some(r.sector),
    )?;
    let mut disk = RecordingDisk::start(&empty, &base.join("run"), r.sector)?;
    let dir = disk.mnt.join("store");
    let store = Store::open(&dir, r.config()).map_err(|e| format!("create: {e}"))?;
    let data_file = std::fs::File::open(dir.join(keel::layout::DATA_FILE_NAME))
        .map_err(|e| format!("the data file: {e}"))?;
    // Every acknowledgement, with the device's position then (each writer's last acknowledged
    // commit is `workload::acked_at(.., usize::MAX)` of it).
    let acks: Mutex<Vec<workload::Ack>> = Mutex::new(Vec::new());
    // When the device began to fail, and at which request.
    let started = Mutex::new(None::<std::time::Instant>);
    let failed_from = AtomicU64::new(u64::MAX);
    let t0 = std::time::Instant::now();
    let harness_error: Mutex<Option<String>> = Mutex::new(None);
    let wrong: Mutex<Option<String>> = Mutex::new(None);
    let done = AtomicBool::new(false);
    let (snapshots, read_errors, healed) =
        (AtomicU64::new(0), AtomicU64::new(0), AtomicBool::new(false));
    let last_acked = || {
        acks.lock()
            .map(|a| workload::acked_at(&a, r.writers, usize::MAX))
            .unwrap_or_default()
    };
    let ack = |w: usize, n: u64| {
        let total = acks.lock().map_or(0, |mut a| {
            a.push((w, n, disk.position()));
            a.len() as u64
        });
        if total == r.fail_after {
            match ranges(r, &dir) {
                Ok(ranges) => {
                    failed_from.store(disk.position() as u64, Ordering::SeqCst);
                    disk.fail(failing(r, ranges));
                    if let Ok(mut s) = started.lock() {
                        *s = Some(std::time::Instant::now());
                    }
                }
                Err(e) => {
                    if let Ok(mut h) = harness_error.lock() {
                        h.get_or_insert(e);
                    }
                }
            }
        }
    };
    let run = std::thread::scope(|s| {
        // The reader (property 1).
        s.spawn(|| {
            while !done.load(Ordering::SeqCst) {
                let before = last_acked();
                match model::contents(&store) {
                    Ok(rows) => {
                        snapshots.fetch_add(1, Ordering::Relaxed);
                        if let Err(e) = check_snapshot(r, &rows, &before) {
                            if let Ok(mut w) = wrong.lock() {
                                w.get_or_insert(e);
                            }
                        }
                    }
                    Err(_) => {
                        read_errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
                if r.store.buffered_data {
                    drop_cache(&data_file);
                }
                if t0.elapsed() > DEADLINE {
                    eprintln!(
                        "device_errors seed {}: the run still goes after {DEADLINE:?}: a hang \
                         ({:?} failing)",
                        r.seed, r.target
                    );
                    std::process::abort();
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        // The device healing while the store runs.
        if let Some(after) = r.heal_after {
            let (done, started, disk, healed) = (&done, &started, &disk, &healed);
            s.spawn(move || {
                while !done.load(Ordering::SeqCst) {
                    let since = started.lock().ok().and_then(|s| *s);
                    if since.is_some_and(|t| t.elapsed() >= after) {
                        disk.heal();
                        healed.store(true, Ordering::SeqCst);
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
            });
        }
        let run = workload::run_writers(
            &store,
            r.seed,
            r.concurrent,
            r.writers,
            Some(r.commits),
            &ack,
        );
        done.store(true, Ordering::SeqCst);
        run
    });
    if let Some(e) = harness_error
        .into_inner()
        .unwrap_or_else(|p| p.into_inner())
    {
        return Err(format!("harness: {e}"));
    }
    let mut acks = acks.into_inner().unwrap_or_else(|p| p.into_inner());
    let mut acked = workload::acked_at(&acks, r.writers, usize::MAX);
    tally.rounds += 1;
    tally.acked += acks.len() as u64;
    tally.snapshots += snapshots.load(Ordering::Relaxed);
    tally.read_errors += read_errors.load(Ordering::Relaxed);
    tally.failing += u64::from(started.lock().ok().and_then(|s| *s).is_some());
    tally.healed_while_running += u64::from(healed.load(Ordering::SeqCst));
    if let Some(e) = wrong.into_inner().unwrap_or_else(|p| p.into_inner()) {
        return Err(format!("a wrong read ({:?} failing): {e}", r.target));
    }
    // Reads go on after the run (a poisoned store still serves them): with the device still
    // failing, each snapshot is the model at exactly the commits acknowledged (or one more in
    // flight), or an error. (A failed sync reports a write-back error once; the page cache may
    // since have dropped the pages whose write it lost.)
    for _ in 0..AFTER_READS {
        if r.store.buffered_data {
            drop_cache(&data_file);
        }
        match model::contents(&store) {
            Ok(rows) => {
                tally.snapshots_after += 1;
                check_snapshot(r, &rows, &acked).map_err(|e| {
                    format!("a wrong read after the run ({:?} failing): {e}", r.target)
                })?;
            }
            Err(_) => tally.read_errors += 1,
        }
    }
    let poisoned = store.is_poisoned();
    if run.is_err() {
        tally.runs_failed += 1;
        tally.poisoned += u64::from(poisoned);
    }
    // Property 2.
    if poisoned {
        let n = acked[0] + 1;
        if let Ok(true) = workload::commit(&store, r.seed, r.concurrent, 0, n) {
            return Err(format!(
                "a poisoned store acknowledged writer 0's commit {n}"
            ));
        }
    } else if run.is_ok() {
        // A store that reported nothing takes one more commit and a checkpoint (the fsync of
        // the data file reports a failed writeback now, if nothing did before).
        let n = acked[0] + 1;
        if let Ok(true) = workload::commit(&store, r.seed, r.concurrent, 0, n) {
            acks.push((0, n, disk.position()));
            acked = workload::acked_at(&acks, r.writers, usize::MAX);
        }
        let _ = store.checkpoint();
    }
    drop(data_file);
    drop(store);
    // Every flush or every write refused: the file system gives up (ext4 aborts its journal and
    // remounts read-only, XFS shuts down): only a remount restarts it.
    let file_target = !matches!(r.target, Target::Flushes | Target::AllWrites);
    let ops = if r.same_mount && file_target {
        let refused = disk.heal();
        tally.refused_writes += refused.writes;
        tally.refused_reads += refused.reads;
        tally.refused_flushes += refused.flushes;
        reopen_on_the_same_mount(r, &dir, &disk, &mut acks, &acked, tally)?;
        acked = workload::acked_at(&acks, r.writers, usize::MAX);
        disk.ops()
    } else {
        let ops = disk.ops();
        // Property 4: a restart while the device still fails the blocks of one file (the file
        // system usually mounts: its own blocks are healthy). The recovery either refuses with an error or
        // opens, and then every read is the acknowledged model or an error.
        // The file system itself may refuse that mount: blocks the file held when the failure
        // began can since hold its metadata (XFS's atomic writes move a file's blocks, copy on
        // write), and a mount that cannot write them fails before Keel is involved.
        if file_target && !healed.load(Ordering::SeqCst) {
            if disk.remount(r.sector).is_err() {
                tally.failing_mounts_refused += 1;
            } else if let Ok(store) = Store::open(&dir, r.config()) {
                tally.failing_reopens_opened += 1;
                match model::contents(&store) {
                    Ok(rows) => check_snapshot(r, &rows, &acked).map_err(|e| {
                        format!("a wrong read after a reopen on the failing device: {e}")
                    })?,
                    Err(_) => tally.read_errors += 1,
                }
            } else {
                tally.failing_reopens_refused += 1;
            }
        }
        let refused = disk.heal();
        tally.refused_writes += refused.writes;
        tally.refused_reads += refused.reads;
        tally.refused_flushes += refused.flushes;
        ops
    };
    // Property 3: the machine restarts (no power loss) with a healthy device.
    disk.remount(r.sector)?;
    let store =
        Store::open(&dir, r.config()).map_err(|e| format!("reopen after the errors: {e}"))?;
    let context = format!("{:?} failing; recovery {:?}", r.target, store.recovery());
    let cs = workload::verify(&store, r.seed, &acked, &acked, &context)
        .map_err(workload::Unverified::message)?;
    tally.count_recovered(&cs, &acked);
    store.close().map_err(|e| format!("close: {e}"))?;
    disk.stop()?;
    // Property 5.
    let from =
        usize::try_from(failed_from.load(Ordering::SeqCst)).map_or(ops.len(), |f| f.min(ops.len()));
    let mut rng = Rng(r.seed ^ 0xc4a5_0000_0000_0040);
    let caches = [Cache::Lost, Cache::Kept, Cache::Sectors, Cache::Prefix];
    for i in 0..CRASHES {
        let at = from + rng.below((ops.len() - from) as u64 + 1) as usize;
        let cache = caches[rng.below(4) as usize];
        let image = base.join("crash.img");
        crash_image(&empty, &ops, at, cache, TEAR, &mut rng, &image)?;
        let acked = workload::acked_at(&acks, r.writers, at);
        check_image(r, &image, &base.join("crash"), &acked, tally).map_err(|e| {
            format!(
                "crash image {i} after request {at} of {}, {cache:?}: {e}",
                ops.len()
            )
        })?;
    }
    Ok(())
}

/// Property 6: the process restarts on the same mount once the device healed (no reboot, no
/// remount). The page cache still holds, clean, the pages and log blocks whose writes failed —
/// on ext4 a block allocated for such a write stays an unwritten extent, and writing the same
/// bytes again through the cached page does not reach the disk although its sync succeeds — so
/// the recovery must read what the device holds. The store opens at the acknowledged commits
/// (or one more), takes [`SAME_MOUNT_COMMITS`] more per writer and checkpoints; the remount
/// (property 3) and the crash images (property 5) then hold those too.
fn reopen_on_the_same_mount(
    r: &Round,
    dir: &Path,
    disk: &RecordingDisk,
    acks: &mut Vec<workload::Ack>,
    acked: &[u64],
    tally: &mut Tally,
) -> Result<(), String> {
    let store =
        Store::open(dir, r.config()).map_err(|e| format!("reopen on the same mount: {e}"))?;
    let context = format!(
        "{:?} failing, reopened on the same mount; recovery {:?}",
        r.target,
        store.recovery()
    );
    let cs = workload::verify(&store, r.seed, acked, acked, &context)
        .map_err(workload::Unverified::message)?;
    tally.same_mount_reopens += 1;
    for k in 1..=SAME_MOUNT_COMMITS {
        for (w, &c) in cs.iter().enumerate() {
            let n = c + k;
            while !workload::commit(&store, r.seed, r.concurrent, w, n).map_err(|e| {
                format!("writer {w} commit {n} after the reopen on the same mount: {e}")
            })? {}
            acks.push((w, n, disk.position()));
        }
        if k % 4 == 0 {
            store
                .checkpoint()
                .map_err(|e| format!("checkpoint after the reopen on the same mount: {e}"))?;
        }
    }
    store
        .close()
        .map_err(|e| format!("close after the reopen on the same mount: {e}"))
}

/// Property 5 for the crash image at `image`: each writer at `acked` or one more.
fn check_image(
    r: &Round,
    image: &Path,
    mnt: &Path,
    acked: &[u64],
    tally: &mut Tally,
) -> Result<(), String> {
    let mut m = ImageMount::mount(image, mnt, r.sector)?;
    tally.crash_images += 1;
    let unprotected = r.store.mode == keel::TornPage::None;
    let what = format!("{acked:?} acknowledged");
    let dir = m.dir.join("store");
    let Some(store) = workload::open_crashed(&dir, r.config(), unprotected, &what)? else {
        tally.corruption_reported += 1;
        return m.unmount();
    };
    let context = format!("recovery {:?}", store.recovery());
    match workload::verify_crashed(&store, r.seed, acked, acked, &context, unprotected)? {
        Some(cs) => tally.count_recovered(&cs, acked),
        None => tally.corruption_reported += 1,
    }
    store.close().map_err(|e| format!("close: {e}"))?;
    m.unmount()
}

fn rounds(fs: Fs) {
    if let Some(why) = loopfs::cannot_run(fs).or_else(recording_disk::cannot_run) {
        println!("SKIPPED: device_errors {}: {why}", fs.name());
        return;
    }
    loopfs::run_rounds(
        "device_errors",
        fs,
        "KEEL_DEVICE_ERRORS",
        24,
        &["filefrag"],
        |seed, base, tally: &mut Tally| {
            let r = Round::draw(fs, seed);
            round(&r, base, tally).map_err(|e| format!("{e} (round {r:?})"))
        },
    );
}

#[test]
fn device_errors_xfs() {
    rounds(Fs::Xfs);
}

#[test]
fn device_errors_ext4() {
    rounds(Fs::Ext4);
}
