//! The checkpoint protocol: when a checkpoint runs, what it writes, and how writers wait for log
//! space. The pieces below it are the pool's flush list and checkpoint-LSN rule
//! (`keel_buffer_pool`) and the log's checkpoint slots (`keel_redo_log`); this file is the one
//! place that puts them in order.
//!
//! A checkpoint is fuzzy: it writes the dirty pages older than the log's end while writers go
//! on ([`CHECKPOINT_STEPS`] steps, each recording the checkpoint LSN reached so far so log space
//! frees as it goes), then — only if pages owned by the running transaction held it back
//! (no-steal) — takes the store's writer lock briefly for an exclusive phase that writes those
//! few pages and records the final checkpoint.
//!
//! Two thresholds on log space in use (a fraction of the preallocated log's capacity): past
//! `checkpoint_log_fraction` the background checkpointer starts one (asynchronous point: a
//! writer starting a transaction there kicks it awake; otherwise it sleeps until its
//! `checkpoint_interval` is due, so an idle store does not wake it); past
//! [`sync_point`] a writer about to start a transaction parks and waits for space
//! ([`wait_for_log_space`]) — InnoDB's async and sync checkpoint ages.
//!
//! With `Config::inline_maintenance` there is no checkpointer thread and no interval: the writer
//! that finds the log past the asynchronous point takes the checkpoint itself
//! ([`checkpoint_inline`], holding the writer lock before its transaction begins, as at the
//! synchronous point), so the store's writes happen in the order its users' calls make them.
//!
//! Invariants (the keel tests `basic.rs` and `crash.rs` break them):
//! 1. The checkpoint LSN recorded in the log never exceeds what the pool allows
//!    (`BufferPool::checkpoint_lsn`: no dirty page older than it) and never goes backwards.
//! 2. One checkpoint at a time (`one_at_a_time`).
//! 3. A parked writer holds the writer lock but owns no page, so the exclusive phase runs
//!    without the lock while one is parked; otherwise it takes the lock (waiting would deadlock
//!    with the parked writer).
//! 4. A failed checkpoint that poisoned the log or the page writer poisons the store with its
//!    cause; parked writers see the poison and return it.
//! 5. Page 0 of the data file records, durably, a file checkpoint at least the log's
//!    checkpoint before the log records it ([`record_checkpoint`]): a data file recording less
//!    is older than the log, and the open refuses it (`bad_bytes.rs` restores stale copies;
//!    `open.rs` tests the order).

use crate::config::Config;
use crate::poison::{poison_reason, poisoned, StorePoison};
use crate::{Error, Result};
use keel_buffer_pool::BufferPool;
use keel_flush::PageWriter;
use keel_page::Lsn;
use keel_redo_log::RedoLog;
use parking_lot::{Condvar, Mutex, RwLock, RwLockWriteGuard};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Where the synchronous checkpoint point lies, given the asynchronous one.
pub(crate) fn sync_point(fraction: f64) -> f64 {
    (fraction + 1.0) / 2.0
}

/// The room the log's synchronous checkpoint point leaves one transaction's redo: the part of
/// the log's capacity past [`sync_point`] (`None` for growing files, which have no capacity). A
/// larger transaction could wait for log space forever, and is refused at commit.
pub(crate) fn txn_log_room(log: &RedoLog, fraction: f64) -> Option<u64> {
    log.capacity()
        .map(|cap| ((1.0 - sync_point(fraction)) * cap as f64) as u64)
}

/// Whether the log's space in use is past `fraction` of its capacity (never for a log
/// without one).
pub(crate) fn log_past(log: &RedoLog, fraction: f64) -> bool {
    log.capacity()
        .is_some_and(|cap| log.space_used() as f64 > fraction * cap as f64)
}

/// Whether the log is past the asynchronous checkpoint point: `fraction` of its capacity, or,
/// for growing files (which have none and never fill), `fraction` of `log_file_count` files —
/// the log a preallocated configuration of the same settings would hold. Growing logs were
/// checkpointed only by the interval before, so a busy store's log (and its recovery time)
/// grew without bound in between: PostgreSQL's `max_wal_size` trigger is the same rule.
/// Growing logs have no synchronous point: nothing waits for their space.
pub(crate) fn checkpoint_due(log: &RedoLog, config: &Config) -> bool {
    let fraction = config.checkpoint_log_fraction;
    match log.config().files {
        keel_redo_log::LogFiles::Growing { file_size } => {
            let budget = file_size.saturating_mul(u64::from(config.log_file_count.max(1)));
            log.space_used() as f64 > fraction * budget as f64
        }
        keel_redo_log::LogFiles::Preallocated { .. } => log_past(log, fraction),
    }
}

/// What a checkpoint needs, shared with the checkpointer thread.
pub(crate) struct CheckpointShared {
    log: RedoLog,
    writer: Arc<PageWriter>,
    pool: Arc<BufferPool>,
    store_lock: Arc<RwLock<()>>,
    one_at_a_time: Mutex<()>,
    poison: Arc<StorePoison>,
    count: AtomicU64,
    /// Writers waiting at the synchronous checkpoint point. Such a writer holds the store's
    /// writer lock but has no transaction (it owns no page), so while this is non-zero a
    /// checkpoint's exclusive phase runs without taking the lock (it could not get it).
    parked_writers: AtomicU64,
    /// Notified (under `progress_lock`) whenever a checkpoint records progress or ends.
    progress: Condvar,
    progress_lock: Mutex<()>,
    /// Set by a writer that found the log past the asynchronous checkpoint point, cleared by
    /// the checkpointer as it wakes ([`CheckpointShared::kick`]).
    kicked: AtomicBool,
    /// Times the checkpointer thread woke up (a kick, its interval, or a stop).
    wakeups: AtomicU64,
}

impl CheckpointShared {
    /// The checkpoint state of a store over its log, page writer and pool; `store_lock` is the
    /// store's writer lock (for the exclusive phase), `poison` the store's poison cell.
    pub(crate) fn new(
        log: RedoLog,
        writer: Arc<PageWriter>,
        pool: Arc<BufferPool>,
        store_lock: Arc<RwLock<()>>,
        poison: Arc<StorePoison>,
    ) -> CheckpointShared {
        CheckpointShared {
            log,
            writer,
            pool,
            store_lock,
            one_at_a_time: Mutex::new(()),
            poison,
            count: AtomicU64::new(0),
            parked_writers: AtomicU64::new(0),
            progress: Condvar::new(),
            progress_lock: Mutex::new(()),
            kicked: AtomicBool::new(false),
            wakeups: AtomicU64::new(0),
        }
    }

    /// Checkpoints completed since the open.
    /// Times the checkpointer thread woke up.
    pub(crate) fn wakeups(&self) -> u64 {
        self.wakeups.load(Ordering::Relaxed)
    }

    /// Wakes the checkpointer thread (waiting on `stop`'s condition variable) because the log is
    /// past the asynchronous checkpoint point; only the first kick before it wakes notifies.
    pub(crate) fn kick(&self, stop: &(Mutex<bool>, Condvar)) {
        if !self.kicked.swap(true, Ordering::SeqCst) {
            let (m, cv) = stop;
            let _g = m.lock();
            cv.notify_all();
        }
    }

    pub(crate) fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }
}

/// A checkpoint's flush is split into this many steps of the LSN range it covers, oldest first;
/// after each step the checkpoint LSN reached so far is recorded in the log, so log space frees
/// up as the checkpoint goes instead of only at its end (a writer waiting for log space at the
/// synchronous checkpoint point goes on as soon as enough is free). In full-page-writes mode the
/// pool's checkpoint LSN moves only once everything older than the horizon is written, so the
/// steps record nothing new there (`BufferPool::checkpoint_lsn`; the 100,000-case crash matrix
/// failed 2-3 cases when they did).
const CHECKPOINT_STEPS: u64 = 8;

/// How a checkpoint may take the writer lock for its exclusive phase.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Exclusive {
    /// The caller holds it already.
    Held,
    /// Wait for it.
    Wait,
    /// Try for a while; give up this round if a writer keeps it (background thread).
    Try(Duration),
}

/// A fuzzy checkpoint: write the dirty pages older than the log's end while writers go on,
/// then — only if pages owned by the running transaction (no-steal) held it back — take the
/// writer lock briefly, write those few hot pages too, and record the checkpoint.
pub(crate) fn checkpoint(c: &CheckpointShared, exclusive: Exclusive) -> Result<Lsn> {
    let _one = c.one_at_a_time.lock();
    checkpoint_running(c, exclusive)
}

/// The checkpoint itself; the caller holds `one_at_a_time`. Fuzzy, in
/// [`CHECKPOINT_STEPS`] steps, then the exclusive phase if owned pages held it back.
fn checkpoint_running(c: &CheckpointShared, exclusive: Exclusive) -> Result<Lsn> {
    let sink = &c.log;
    let run = || -> Result<Lsn> {
        let target = c.pool.begin_checkpoint(sink);
        let start = c.pool.oldest_dirty_lsn().unwrap_or(target).min(target);
        let span = target.0 - start.0;
        // (In full-page-writes mode the pool's checkpoint LSN does not move before the last
        // step: see `BufferPool::checkpoint_lsn`.)
        let mut lsn = c.log.checkpoint_lsn();
        for step in 1..=CHECKPOINT_STEPS {
            let upto = Lsn(start.0 + span * step / CHECKPOINT_STEPS);
            c.pool.flush_up_to(upto)?;
            lsn = record_progress(c)?;
        }
        if lsn < target {
            let (allowed, _writer_lock) = exclusive_phase_allowed(c, exclusive);
            if allowed {
                c.pool.flush_up_to(target)?;
                lsn = record_progress(c)?;
            }
        }
        Ok(lsn)
    };
    let out = match run() {
        Ok(lsn) => {
            c.count.fetch_add(1, Ordering::Relaxed);
            Ok(lsn)
        }
        Err(e) => {
            if let Some(reason) = poison_reason(&c.log, &c.writer, &e) {
                c.poison.poison(reason);
            }
            Err(e)
        }
    };
    let _p = c.progress_lock.lock();
    c.progress.notify_all();
    out
}

/// Whether a checkpoint may run its exclusive phase now, with the writer lock's guard if it took
/// it. A writer parked at the synchronous checkpoint point holds the lock but owns no page, so
/// then the phase runs without the lock (waiting for it would deadlock: the parked writer waits
/// for this checkpoint). `Try(t)` gives up after `t`.
fn exclusive_phase_allowed(
    c: &CheckpointShared,
    exclusive: Exclusive,
) -> (bool, Option<RwLockWriteGuard<'_, ()>>) {
    let deadline = match exclusive {
        Exclusive::Held => return (true, None),
        Exclusive::Wait => None,
        Exclusive::Try(t) => Some(Instant::now() + t),
    };
    loop {
        if c.parked_writers.load(Ordering::Acquire) > 0 {
            return (true, None);
        }
        if let Some(g) = c.store_lock.try_write_for(Duration::from_millis(5)) {
            return (true, Some(g));
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return (false, None);
        }
    }
}

/// Records in the log the checkpoint LSN the pool allows now, if it is newer, and wakes writers
/// waiting for log space. Returns the log's checkpoint LSN.
fn record_progress(c: &CheckpointShared) -> Result<Lsn> {
    let lsn = c.pool.checkpoint_lsn(&c.log);
    if lsn > c.log.checkpoint_lsn() {
        record_checkpoint(&c.log, &c.writer, lsn)?;
        let _p = c.progress_lock.lock();
        c.progress.notify_all();
    }
    Ok(c.log.checkpoint_lsn())
}

/// Records `lsn` as the checkpoint: first on page 0 of the data file
/// ([`PageWriter::stamp_checkpoint`]), then in the log. Invariant 5: page 0 on disk never
/// records less than the log's checkpoint, so a data file that does is older than the log and
/// the open refuses it (`open.rs`, `check_file_checkpoint`). Every checkpoint the log records
/// goes through here.
pub(crate) fn record_checkpoint(log: &RedoLog, writer: &PageWriter, lsn: Lsn) -> Result<()> {
    writer.stamp_checkpoint(lsn)?;
    log.checkpoint(lsn)?;
    Ok(())
}

/// The synchronous checkpoint point: the caller holds the writer lock (and no transaction) and
/// the log is past the point. Waits while a running checkpoint frees space step by step;
/// takes a checkpoint itself when none is running and space is still short.
pub(crate) fn wait_for_log_space(c: &CheckpointShared, over: impl Fn() -> bool) -> Result<()> {
    struct Parked<'a>(&'a AtomicU64);
    impl Drop for Parked<'_> {
        fn drop(&mut self) {
            self.0.fetch_sub(1, Ordering::AcqRel);
        }
    }
    c.parked_writers.fetch_add(1, Ordering::AcqRel);
    let _parked = Parked(&c.parked_writers);
    loop {
        if let Some(reason) = c.poison.cause() {
            return Err(poisoned(reason));
        }
        if !over() {
            return Ok(());
        }
        if let Some(_one) = c.one_at_a_time.try_lock() {
            if over() {
                checkpoint_running(c, Exclusive::Held)?;
            }
            return Ok(());
        }
        let mut p = c.progress_lock.lock();
        if over() {
            // Progress is announced under `progress_lock`, so none is missed between the check
            // and the wait; the timeout only bounds an unexpected stall.
            c.progress.wait_for(&mut p, Duration::from_millis(50));
        }
    }
}

/// The checkpoint a writer takes itself at the asynchronous point when the store has no
/// checkpointer thread (`Config::inline_maintenance`); the caller holds the writer lock and no
/// transaction owns a page. Nothing to do if another checkpoint is running.
///
/// # Errors
///
/// As [`checkpoint`]: a page write or the log's record failed (the store is then poisoned).
pub(crate) fn checkpoint_inline(c: &CheckpointShared) -> Result<()> {
    if let Some(_one) = c.one_at_a_time.try_lock() {
        checkpoint_running(c, Exclusive::Held)?;
    }
    Ok(())
}

pub(crate) fn spawn_checkpointer(
    ckpt: &Arc<CheckpointShared>,
    stop: &Arc<(Mutex<bool>, Condvar)>,
    config: &Config,
    dir: &Path,
) -> Result<JoinHandle<()>> {
    let c = ckpt.clone();
    let stop = stop.clone();
    let interval = config.checkpoint_interval;
    let config = config.clone();
    std::thread::Builder::new()
        .name("keel-checkpointer".into())
        .spawn(move || {
            let mut last = Instant::now();
            loop {
                {
                    let (m, cv) = &*stop;
                    let mut stopped = m.lock();
                    if *stopped {
                        return;
                    }
                    // Sleep until the interval is due unless kicked: checked under `m`, which a
                    // kick takes to notify, so no kick is lost between the check and the wait.
                    if !c.kicked.load(Ordering::SeqCst) {
                        let due = interval.saturating_sub(last.elapsed());
                        if !due.is_zero() {
                            cv.wait_for(&mut stopped, due);
                        }
                    }
                    if *stopped {
                        return;
                    }
                }
                c.kicked.store(false, Ordering::SeqCst);
                c.wakeups.fetch_add(1, Ordering::Relaxed);
                if c.poison.is_poisoned() {
                    last = Instant::now();
                    continue;
                }
                if checkpoint_due(&c.log, &config) || last.elapsed() >= interval {
                    if let Err(e) = checkpoint(&c, Exclusive::Try(Duration::from_millis(100))) {
                        tracing::warn!(error = %e, "checkpoint failed");
                    }
                    last = Instant::now();
                }
            }
        })
        .map_err(|e| Error::Io(keel_io::IoError::os("spawn checkpointer", dir, e)))
}
