//! [`Store`]: transactions, checkpoints, statistics, and the background threads (opening is in `open.rs`).

use crate::config::Config;
use crate::meta::{self, MetaInfo, META_PAGE};
use crate::table::{ReadTable, Table};
use crate::{Error, Result};
use keel_buffer_pool::{BufferPool, PageCleaner, PageTxn};
use keel_flush::PageWriter;
use keel_io::{FileSystem, LockGuard};
use keel_page::{Lsn, PageId};
use keel_redo_log::{Durability, RedoLog};
use parking_lot::{Condvar, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
use serde::{Deserialize, Serialize};
use std::cell::RefCell;
use std::collections::HashMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Where the redo log lives inside the store directory.
pub const LOG_DIR: &str = "log";

/// What recovery did when the store was opened.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RecoveryReport {
    /// The store was created by this open.
    pub created: bool,
    /// The checkpoint recovery started from.
    pub checkpoint_lsn: Lsn,
    /// Where the recovered log ends (new commits continue here).
    pub end_lsn: Lsn,
    /// Complete groups (committed transactions) replayed.
    pub groups_replayed: u64,
    /// What redo application did (records applied and skipped, pages rebuilt from redo).
    pub redo: keel_buffer_pool::RedoApplyReport,
    /// Pages restored from the doublewrite area before replay.
    pub doublewrite_restored: u64,
    /// Doublewrite images found valid.
    pub doublewrite_images_valid: usize,
    /// Log bytes discarded (a torn or incomplete tail: transactions whose commit marker was not
    /// durable).
    pub log_bytes_discarded: u64,
    /// Why they were discarded.
    pub discard_reason: Option<String>,
    /// Why the log scan stopped where it did.
    pub log_end_reason: String,
    /// Pages written after replay (so the checkpoint could move past the replayed redo).
    pub pages_flushed: u64,
    /// Wall time of recovery, milliseconds.
    pub duration_ms: f64,
    /// Durable log data given up under `accept_log_loss` (which block, why it was known
    /// durable, where the recovered log ends); `None` when nothing durable was lost.
    #[serde(default)]
    pub log_loss: Option<String>,
}

/// The settings in force, including what `auto` chose and why.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Effective {
    /// The configuration as given.
    pub config: Config,
    /// The torn-page protection in force (`doublewrite`, `atomic`, ...).
    pub torn_page: String,
    /// Why (the probe's findings for `auto` and `atomic`).
    pub torn_page_reason: String,
    /// The I/O backend (`io_uring` or `pwrite`).
    pub io_backend: String,
}

/// Counters of every layer, serde-serialisable.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StoreStats {
    /// Write transactions committed.
    pub commits: u64,
    /// Write transactions rolled back.
    pub aborts: u64,
    /// Checkpoints taken.
    pub checkpoints: u64,
    /// Times a writer found the log past the synchronous checkpoint point in `Store::write`
    /// (InnoDB's "sync flush"): it waited for a running checkpoint and, if still needed, took
    /// one itself before starting.
    #[serde(default)]
    pub sync_checkpoint_waits: u64,
    /// Time writers spent there, microseconds (the part of write latency checkpoints cause).
    #[serde(default)]
    pub sync_checkpoint_wait_us: u64,
    /// The redo log.
    pub log: keel_redo_log::LogStats,
    /// The page writer (data writes, doublewrite writes, pages skipped, atomic writes, ...).
    pub flush: keel_flush::FlushStats,
    /// The buffer pool.
    pub pool: keel_buffer_pool::PoolStats,
    /// File I/O by class.
    pub io: keel_io::IoStats,
}

pub(crate) struct Inner {
    pub(crate) dir: PathBuf,
    pub(crate) fs: Arc<dyn FileSystem>,
    pub(crate) config: Config,
    pub(crate) effective: Effective,
    pub(crate) log: RedoLog,
    pub(crate) writer: Arc<PageWriter>,
    pub(crate) pool: Arc<BufferPool>,
    cleaner: Mutex<Option<PageCleaner>>,
    /// Writers take it exclusively, readers shared (one writer at a time, readers when no
    /// writer holds it).
    pub(crate) lock: Arc<RwLock<()>>,
    /// Committed tables: name → root page.
    pub(crate) catalog: RwLock<HashMap<String, PageId>>,
    pub(crate) catalog_root: PageId,
    pub(crate) poison: Arc<Mutex<Option<PoisonCause>>>,
    commits: AtomicU64,
    sync_checkpoint_waits: AtomicU64,
    sync_checkpoint_wait_ns: AtomicU64,
    aborts: AtomicU64,
    ckpt: Arc<CheckpointShared>,
    stop: Arc<(Mutex<bool>, Condvar)>,
    checkpointer: Mutex<Option<JoinHandle<()>>>,
    recovery: RecoveryReport,
    /// Opened read-only: nothing is ever written.
    read_only: bool,
    /// The directory lock (`LOCK`), released when the store is dropped. Declared last: fields
    /// drop in order, so the lock goes only after everything that could write.
    _dir_lock: Box<dyn LockGuard>,
}

/// An open store. Cheap to clone; every clone is the same store. Dropping the last clone stops
/// the background threads (committed data is safe in the log; the next open recovers).
#[derive(Clone)]
pub struct Store {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Store({})", self.inner.dir.display())
    }
}

/// Why the store takes no more writes: the first write or sync failure, as reported.
#[derive(Clone, Debug)]
pub(crate) struct PoisonCause {
    cause: String,
    no_space: bool,
}

impl PoisonCause {
    fn of(err: &Error) -> PoisonCause {
        PoisonCause {
            cause: err.to_string(),
            no_space: err.is_no_space(),
        }
    }

    fn error(&self) -> Error {
        Error::Poisoned {
            cause: self.cause.clone(),
            no_space: self.no_space,
        }
    }
}

fn poison_reason(log: &RedoLog, writer: &PageWriter, err: &Error) -> Option<PoisonCause> {
    if log.is_poisoned() || writer.is_poisoned() {
        Some(PoisonCause::of(err))
    } else {
        None
    }
}

/// What an open produced, for [`Store::assemble`] (see `open.rs`).
pub(crate) struct Opened {
    pub(crate) dir: PathBuf,
    pub(crate) fs: Arc<dyn FileSystem>,
    pub(crate) config: Config,
    pub(crate) effective: Effective,
    pub(crate) log: RedoLog,
    pub(crate) writer: Arc<PageWriter>,
    pub(crate) pool: Arc<BufferPool>,
    pub(crate) catalog_root: PageId,
    pub(crate) recovery: RecoveryReport,
    pub(crate) read_only: bool,
    pub(crate) dir_lock: Box<dyn LockGuard>,
}

impl Store {
    /// The last step of an open: starts the page cleaner and the checkpointer (neither for a
    /// read-only store) around what `open.rs` recovered.
    pub(crate) fn assemble(o: Opened) -> Result<Store> {
        let Opened {
            dir,
            fs,
            config,
            effective,
            log,
            writer,
            pool,
            catalog_root,
            recovery,
            read_only,
            dir_lock,
        } = o;
        let cleaner = if read_only {
            None
        } else {
            Some(
                pool.start_cleaner()
                    .map_err(|e| Error::Io(keel_io::IoError::os("spawn page cleaner", &dir, e)))?,
            )
        };
        let store_lock = Arc::new(RwLock::new(()));
        let poison = Arc::new(Mutex::new(None));
        let ckpt = Arc::new(CheckpointShared {
            log: log.clone(),
            writer: writer.clone(),
            pool: pool.clone(),
            store_lock: store_lock.clone(),
            one_at_a_time: Mutex::new(()),
            poison: poison.clone(),
            count: AtomicU64::new(0),
            parked_writers: AtomicU64::new(0),
            progress: Condvar::new(),
            progress_lock: Mutex::new(()),
        });
        let inner = Arc::new(Inner {
            dir,
            fs,
            config,
            effective,
            log,
            writer,
            pool,
            cleaner: Mutex::new(cleaner),
            lock: store_lock,
            catalog: RwLock::new(HashMap::new()),
            catalog_root,
            poison,
            commits: AtomicU64::new(0),
            sync_checkpoint_waits: AtomicU64::new(0),
            sync_checkpoint_wait_ns: AtomicU64::new(0),
            aborts: AtomicU64::new(0),
            ckpt,
            stop: Arc::new((Mutex::new(false), Condvar::new())),
            checkpointer: Mutex::new(None),
            recovery,
            read_only,
            _dir_lock: dir_lock,
        });
        if !read_only {
            let handle = spawn_checkpointer(&inner.ckpt, &inner.stop, &inner.config, &inner.dir)?;
            *inner.checkpointer.lock() = Some(handle);
        }
        Ok(Store { inner })
    }
}

impl Store {
    /// Starts the write transaction (waits while another writer or readers hold the store).
    pub fn write(&self) -> Result<WriteTxn<'_>> {
        self.check_writable()?;
        self.check_poison()?;
        let lock = self.inner.lock.write();
        self.check_poison()?;
        // Synchronous checkpoint point (InnoDB's "sync flush" of the checkpoint age): with the
        // writer lock held no page is owned by a transaction, so every dirty page can be
        // written and the checkpoint can free log space before this transaction appends.
        let i = &self.inner;
        let over_sync_point = || {
            i.log.capacity().is_some_and(|cap| {
                i.log.space_used() as f64
                    > sync_point(i.config.checkpoint_log_fraction) * cap as f64
            })
        };
        if over_sync_point() {
            // A running checkpoint records its progress step by step: wait until one of its
            // steps frees enough, or take a checkpoint here if none is running.
            let t0 = Instant::now();
            let r = wait_for_log_space(&i.ckpt, over_sync_point);
            i.sync_checkpoint_waits.fetch_add(1, Ordering::Relaxed);
            i.sync_checkpoint_wait_ns
                .fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
            r?;
        }
        Ok(WriteTxn {
            txn: self.inner.pool.begin(),
            created: RefCell::new(HashMap::new()),
            inner: &self.inner,
            lock,
            ends_in_abort: AbortCount {
                inner: &self.inner,
                armed: true,
            },
        })
    }

    /// A read transaction: a consistent view of committed data (waits while a writer holds
    /// the store).
    pub fn read(&self) -> Result<ReadTxn<'_>> {
        Ok(ReadTxn {
            inner: &self.inner,
            _lock: self.inner.lock.read(),
        })
    }

    /// Takes a checkpoint now: writes dirty pages up to the log's end and records the
    /// checkpoint in the log header. Returns the checkpoint LSN.
    pub fn checkpoint(&self) -> Result<Lsn> {
        self.check_writable()?;
        self.check_poison()?;
        checkpoint(&self.inner.ckpt, Exclusive::Wait)
    }

    /// What the meta page says now (committed state): pages allocated, free ids in the meta
    /// page's array, the newest free-list trunk page, the catalog root.
    pub fn meta(&self) -> Result<MetaInfo> {
        let _view = self.inner.lock.read();
        let g = self.inner.pool.read(META_PAGE)?;
        meta::read_meta(&g, self.inner.writer.data_path())
    }

    /// Counters of every layer.
    pub fn stats(&self) -> StoreStats {
        let i = &self.inner;
        StoreStats {
            commits: i.commits.load(Ordering::Relaxed),
            sync_checkpoint_waits: i.sync_checkpoint_waits.load(Ordering::Relaxed),
            sync_checkpoint_wait_us: i.sync_checkpoint_wait_ns.load(Ordering::Relaxed) / 1000,
            aborts: i.aborts.load(Ordering::Relaxed),
            checkpoints: i.ckpt.count.load(Ordering::Relaxed),
            log: i.log.stats(),
            flush: i.writer.stats(),
            pool: i.pool.stats(),
            io: i.fs.counters().snapshot(),
        }
    }

    /// What recovery did when this store was opened.
    pub fn recovery(&self) -> &RecoveryReport {
        &self.inner.recovery
    }

    /// The settings in force (what `auto` chose and why).
    pub fn effective(&self) -> &Effective {
        &self.inner.effective
    }

    /// The store directory.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// Whether a failed write or sync has poisoned the store (it takes no more writes; reopen
    /// it to recover).
    pub fn is_poisoned(&self) -> bool {
        self.inner.poison.lock().is_some()
    }

    /// Takes a final checkpoint, syncs the data file (pages whose durable copy was still only in
    /// a doublewrite slot are then durable in place) and stops the background threads. Dropping
    /// the store without closing is safe too (the next open recovers from the log and the
    /// doublewrite area).
    pub fn close(self) -> Result<()> {
        if !self.is_poisoned() && !self.inner.read_only {
            self.checkpoint()?;
            self.inner.writer.sync_data()?;
        }
        self.inner.shutdown();
        Ok(())
    }

    /// Whether the store was opened read-only.
    pub fn is_read_only(&self) -> bool {
        self.inner.read_only
    }

    fn check_writable(&self) -> Result<()> {
        if self.inner.read_only {
            return Err(Error::ReadOnly {
                dir: self.inner.dir.clone(),
            });
        }
        Ok(())
    }

    fn check_poison(&self) -> Result<()> {
        match &*self.inner.poison.lock() {
            Some(reason) => Err(reason.error()),
            None => Ok(()),
        }
    }
}

impl Inner {
    fn shutdown(&self) {
        {
            let (m, cv) = &*self.stop;
            *m.lock() = true;
            cv.notify_all();
        }
        if let Some(h) = self.checkpointer.lock().take() {
            let _ = h.join();
        }
        if let Some(c) = self.cleaner.lock().take() {
            c.stop();
        }
    }

    pub(crate) fn note_error(&self, e: &Error) {
        if let Some(reason) = poison_reason(&self.log, &self.writer, e) {
            let mut p = self.poison.lock();
            if p.is_none() {
                tracing::error!(reason = %reason.cause, no_space = reason.no_space, "store poisoned");
                *p = Some(reason);
            }
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Where the synchronous checkpoint point lies, given the asynchronous one.
fn sync_point(fraction: f64) -> f64 {
    (fraction + 1.0) / 2.0
}

/// What a checkpoint needs, shared with the checkpointer thread.
pub(crate) struct CheckpointShared {
    log: RedoLog,
    writer: Arc<PageWriter>,
    pool: Arc<BufferPool>,
    store_lock: Arc<RwLock<()>>,
    one_at_a_time: Mutex<()>,
    poison: Arc<Mutex<Option<PoisonCause>>>,
    count: AtomicU64,
    /// Writers waiting at the synchronous checkpoint point. Such a writer holds the store's
    /// writer lock but has no transaction (it owns no page), so while this is non-zero a
    /// checkpoint's exclusive phase runs without taking the lock (it could not get it).
    parked_writers: AtomicU64,
    /// Notified (under `progress_lock`) whenever a checkpoint records progress or ends.
    progress: Condvar,
    progress_lock: Mutex<()>,
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
enum Exclusive {
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
fn checkpoint(c: &CheckpointShared, exclusive: Exclusive) -> Result<Lsn> {
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
                c.poison.lock().get_or_insert(reason);
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
        c.log.checkpoint(lsn)?;
        let _p = c.progress_lock.lock();
        c.progress.notify_all();
    }
    Ok(c.log.checkpoint_lsn())
}

/// The synchronous checkpoint point: the caller holds the writer lock (and no transaction) and
/// the log is past the point. Waits while a running checkpoint frees space step by step;
/// takes a checkpoint itself when none is running and space is still short.
fn wait_for_log_space(c: &CheckpointShared, over: impl Fn() -> bool) -> Result<()> {
    struct Parked<'a>(&'a AtomicU64);
    impl Drop for Parked<'_> {
        fn drop(&mut self) {
            self.0.fetch_sub(1, Ordering::AcqRel);
        }
    }
    c.parked_writers.fetch_add(1, Ordering::AcqRel);
    let _parked = Parked(&c.parked_writers);
    loop {
        if let Some(reason) = c.poison.lock().clone() {
            return Err(reason.error());
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

fn spawn_checkpointer(
    ckpt: &Arc<CheckpointShared>,
    stop: &Arc<(Mutex<bool>, Condvar)>,
    config: &Config,
    dir: &Path,
) -> Result<JoinHandle<()>> {
    let c = ckpt.clone();
    let stop = stop.clone();
    let interval = config.checkpoint_interval;
    let fraction = config.checkpoint_log_fraction;
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
                    cv.wait_for(&mut stopped, Duration::from_millis(20));
                    if *stopped {
                        return;
                    }
                }
                if c.poison.lock().is_some() {
                    continue;
                }
                let pressure = c
                    .log
                    .capacity()
                    .is_some_and(|cap| c.log.space_used() as f64 > fraction * cap as f64);
                if pressure || last.elapsed() >= interval {
                    if let Err(e) = checkpoint(&c, Exclusive::Try(Duration::from_millis(100))) {
                        tracing::warn!(error = %e, "checkpoint failed");
                    }
                    last = Instant::now();
                }
            }
        })
        .map_err(|e| Error::Io(keel_io::IoError::os("spawn checkpointer", dir, e)))
}

/// The one write transaction. Changes are visible to it at once and to others after commit;
/// dropping it (or [`abort`](Self::abort)) rolls everything back.
pub struct WriteTxn<'s> {
    // Field order matters: the page transaction is rolled back (on drop) before the writer
    // lock is released.
    pub(crate) txn: PageTxn<'s>,
    pub(crate) created: RefCell<HashMap<String, PageId>>,
    pub(crate) inner: &'s Inner,
    lock: RwLockWriteGuard<'s, ()>,
    /// Counts the transaction in `StoreStats::aborts` when it ends without a commit (abort,
    /// drop, or a commit refused before its append).
    ends_in_abort: AbortCount<'s>,
}

/// Counts one abort when dropped, unless disarmed by a commit.
struct AbortCount<'s> {
    inner: &'s Inner,
    armed: bool,
}

impl Drop for AbortCount<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.inner.aborts.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl<'s> WriteTxn<'s> {
    /// The table `name`, created on first use (the creation commits with this transaction).
    pub fn table(&self, name: &str) -> Result<Table<'_, 's>> {
        Table::open(self, name)
    }

    /// Commits: appends the redo with its commit marker (this fixes the commit LSN), releases
    /// the writer lock so the next writer can start (early lock release), then waits as the
    /// durability level says (`Sync`: until the log is durable up to the commit LSN).
    pub fn commit(self) -> Result<()> {
        let (inner, lsn) = self.append()?;
        inner.log.wait_committed(lsn).map_err(|e| {
            let e = Error::Log(e);
            inner.note_error(&e);
            e
        })
    }

    /// [`commit`](Self::commit) as a future: the append happens now, the wait for durability
    /// in the returned future (which never blocks a runtime thread).
    pub fn commit_async(self) -> impl Future<Output = Result<()>> + Send + 'static {
        let appended = self.append();
        let waiting = appended.map(|(inner, lsn)| (inner.log.committed(lsn), inner.poison.clone()));
        async move {
            let (durable, poison) = waiting?;
            durable.await.map_err(|e| {
                let e = Error::Log(e);
                poison.lock().get_or_insert_with(|| PoisonCause::of(&e));
                e
            })
        }
    }

    /// Rolls back (same as dropping).
    pub fn abort(self) {
        // Dropping rolls back and counts the abort.
    }

    fn append(self) -> Result<(&'s Inner, Lsn)> {
        let WriteTxn {
            txn,
            created,
            inner,
            lock,
            mut ends_in_abort,
        } = self;
        // The log's synchronous checkpoint point leaves this much room for one transaction's
        // redo (full page images included); a larger one could wait for log space forever.
        if let Some(cap) = inner.log.capacity() {
            let room =
                ((1.0 - sync_point(inner.config.checkpoint_log_fraction)) * cap as f64) as usize;
            let worst = txn.redo_bytes() + txn.pages() * (inner.config.page_size + 64);
            if worst > room {
                txn.abort();
                return Err(Error::TxnTooLargeForLog {
                    redo_bytes: worst,
                    room,
                });
            }
        }
        let lsn = match txn.commit(&inner.log) {
            Ok(lsn) => {
                ends_in_abort.armed = false;
                lsn
            }
            Err(e) => {
                let e = Error::from(e);
                inner.note_error(&e);
                return Err(e);
            }
        };
        let created = created.into_inner();
        if !created.is_empty() {
            inner.catalog.write().extend(created);
        }
        inner.commits.fetch_add(1, Ordering::Relaxed);
        drop(lock);
        Ok((inner, lsn))
    }

    /// The durability level commits wait for.
    pub fn durability(&self) -> Durability {
        self.inner.config.durability
    }
}

/// A read transaction.
pub struct ReadTxn<'s> {
    pub(crate) inner: &'s Inner,
    _lock: RwLockReadGuard<'s, ()>,
}

impl<'s> ReadTxn<'s> {
    /// The table `name` ([`Error::TableNotFound`] if it was never created).
    pub fn table(&self, name: &str) -> Result<ReadTable<'_>> {
        ReadTable::open(self.inner, name)
    }
}
