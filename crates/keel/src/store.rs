//! [`Store`]: starting transactions, statistics, the store-wide calls, and starting and stopping
//! the background threads (the transactions themselves are in `txn.rs`, opening in `open.rs`,
//! the checkpoint protocol in `checkpointer.rs`, poisoning in `poison.rs`).

use crate::check::CheckReport;
use crate::checkpointer::{
    checkpoint, checkpoint_due, checkpoint_inline, log_past, spawn_checkpointer, sync_point,
    wait_for_log_space, CheckpointShared, Exclusive as CheckpointExclusive,
};
use crate::config::Config;
use crate::held;
use crate::meta::{self, MetaInfo, META_PAGE};
use crate::poison::{layer_cause, poison_reason, poisoned, StorePoison};
use crate::txn::{Exclusive, ReadTxn, WriteTxn};
use crate::{Error, Result};
use keel_buffer_pool::{BufferPool, PageCleaner};
use keel_flush::PageWriter;
use keel_io::{FileSystem, LockGuard};
use keel_page::{Lsn, PageId};
use keel_redo_log::RedoLog;
use parking_lot::{Condvar, Mutex, RwLock};
use serde::{Deserialize, Serialize};
use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

/// Where the redo log lives inside the store directory.
pub const LOG_DIR: &str = "log";

/// What recovery did when the store was opened.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RecoveryReport {
    /// The store was created by this open.
    pub created: bool,
    /// A read-only open recovered in memory: the doublewrite restores and the redo below were
    /// applied to what this `Store` reads, and nothing was written (the next read-write open
    /// does it on disk). Everything else in this report says what that recovery did.
    #[serde(default)]
    pub in_memory: bool,
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
    /// The file checkpoint page 0 of the data file recorded at the open (design invariant 9):
    /// at least `checkpoint_lsn` and at most `end_lsn`, or the open was refused. `None` when
    /// page 0 had no record (written before the field existed, or unreadable until recovery).
    #[serde(default)]
    pub data_file_checkpoint: Option<Lsn>,
    /// The torn-page protection recovery wrote the replayed pages under, when it was not the
    /// configured one, and why: a full-page-writes store whose log since the checkpoint was
    /// written in another mode (no page images) is recovered under doublewrite (design
    /// invariant 11). `None` when recovery used the configured protection.
    #[serde(default)]
    pub recovered_under: Option<String>,
}

/// The settings in force, including what `auto` chose and why.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Effective {
    /// The configuration as given, with `log_file_size` 0 resolved to the size in use.
    pub config: Config,
    /// The torn-page protection in force (`doublewrite`, `atomic`, ...).
    pub torn_page: String,
    /// Why (the probe's findings for `auto` and `atomic`).
    pub torn_page_reason: String,
    /// The I/O backend (`io_uring` or `pwrite`).
    pub io_backend: String,
    /// Whether the data file and the doublewrite area use O_DIRECT.
    pub direct_io: bool,
    /// Why (the probe's alignment, or why it fell back to buffered I/O).
    pub direct_io_reason: String,
    /// What the file-system probe found in the store directory (file system, direct-I/O
    /// alignment, device block sizes, atomic-write units, io_uring); `None` if it failed.
    #[serde(default)]
    pub probe: Option<keel_io::Capabilities>,
}

/// Counters of every layer, serde-serialisable.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StoreStats {
    /// Write transactions committed.
    pub commits: u64,
    /// Write transactions rolled back.
    pub aborts: u64,
    /// Concurrent write transactions refused at commit with [`Error::Conflict`] (counted in
    /// `aborts` too).
    #[serde(default)]
    pub conflicts: u64,
    /// Checkpoints taken.
    pub checkpoints: u64,
    /// Times the background checkpointer woke up: a writer past the asynchronous checkpoint
    /// point kicked it, or its `checkpoint_interval` was due (an idle store wakes it once per
    /// interval).
    #[serde(default)]
    pub checkpointer_wakeups: u64,
    /// Times a writer found the log past the synchronous checkpoint point in `Store::write`
    /// (InnoDB's "sync flush"): it waited for a running checkpoint and, if still needed, took
    /// one itself before starting.
    #[serde(default)]
    pub sync_checkpoint_waits: u64,
    /// Time writers spent there, microseconds (the part of write latency checkpoints cause).
    #[serde(default)]
    pub sync_checkpoint_wait_us: u64,
    /// Time spent waiting for the writer lock, microseconds: exclusive writers starting and
    /// concurrent transactions committing.
    #[serde(default)]
    pub writer_lock_wait_us: u64,
    /// Time the commits of concurrent transactions that committed held the writer lock
    /// (validation, apply and log append), microseconds: the serial part of concurrent
    /// writers; divided by the wall time it is the lock's busy fraction from their commits.
    #[serde(default)]
    pub concurrent_commit_hold_us: u64,
    /// Validations of concurrent commits (conflicted ones included) that knew every row
    /// written since their snapshot and re-read only the reads those writes touched.
    #[serde(default)]
    pub validations_narrowed: u64,
    /// Validations that re-read every read (an exclusive writer's commit, a table created or
    /// dropped, or history no longer kept since the snapshot).
    #[serde(default)]
    pub validations_full: u64,
    /// Reads validations read again at the newest commit (a conflict's last one included).
    #[serde(default)]
    pub validation_reads_reread: u64,
    /// Reads validations skipped: no commit since the snapshot wrote into them.
    #[serde(default)]
    pub validation_reads_skipped: u64,
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
    /// Committed table roots by name, each with the commit it is known from.
    pub(crate) catalog: RwLock<HashMap<String, crate::table::CachedRoot>>,
    pub(crate) catalog_root: PageId,
    pub(crate) poison: Arc<StorePoison>,
    pub(crate) commits: AtomicU64,
    /// Concurrent write transactions refused at commit with `Error::Conflict`.
    pub(crate) conflicts: AtomicU64,
    /// The random keys of the read-set digests (`read_set.rs`), one per open.
    pub(crate) digest_keys: std::collections::hash_map::RandomState,
    #[cfg(feature = "test-knobs")]
    pub(crate) knobs: crate::knobs::TestKnobs,
    sync_checkpoint_waits: AtomicU64,
    sync_checkpoint_wait_ns: AtomicU64,
    /// Time spent waiting for the writer lock (exclusive writers and concurrent commits).
    pub(crate) lock_wait_ns: AtomicU64,
    /// Time concurrent commits held the writer lock (validate, apply, append).
    pub(crate) commit_hold_ns: AtomicU64,
    /// What the recent commits wrote (taken only under the writer lock).
    pub(crate) recent: Mutex<crate::recent_writes::RecentWrites>,
    /// Validations of concurrent commits (`StoreStats`).
    validation_counts: ValidationCounts,
    pub(crate) aborts: AtomicU64,
    ckpt: Arc<CheckpointShared>,
    stop: Arc<(Mutex<bool>, Condvar)>,
    checkpointer: Mutex<Option<JoinHandle<()>>>,
    recovery: RecoveryReport,
    /// Opened read-only: nothing is ever written.
    read_only: bool,
    /// The directory lock (`LOCK`), released when the store is dropped. Declared last: fields
    /// drop in order, so the lock goes only after everything that could write.
    _dir_lock: Box<dyn LockGuard>,
    /// This open's process-unique serial, which names it in [`held`] (an address could be
    /// reused by a later open).
    serial: u64,
    /// The fork generation the store was opened in (`keel_io::os::fork`): in a forked child
    /// every operation is refused before it takes a lock.
    pub(crate) born: u64,
}

/// An open store. Cheap to clone; every clone is the same store. Dropping the last clone stops
/// the background threads (committed data is safe in the log; the next open recovers).
#[derive(Clone)]
pub struct Store {
    pub(crate) inner: Arc<Inner>,
}

impl Drop for Store {
    /// In a forked child the store's memory is a copy of the parent's, its locks maybe held by
    /// threads that do not exist here: it is leaked rather than torn down (a teardown would
    /// take those locks and join those threads, and wait for good).
    fn drop(&mut self) {
        if keel_io::os::fork::forked_since(self.inner.born) {
            std::mem::forget(self.inner.clone());
        }
    }
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Store({})", self.inner.dir.display())
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
    /// read-only store, nor with `Config::inline_maintenance`) around what `open.rs` recovered.
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
        let cleaner = if read_only || config.inline_maintenance {
            None
        } else {
            Some(
                pool.start_cleaner()
                    .map_err(|e| Error::Io(keel_io::IoError::os("spawn page cleaner", &dir, e)))?,
            )
        };
        let store_lock = Arc::new(RwLock::new(()));
        let poison = Arc::new(StorePoison::new());
        let ckpt = Arc::new(CheckpointShared::new(
            log.clone(),
            writer.clone(),
            pool.clone(),
            store_lock.clone(),
            poison.clone(),
        ));
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
            conflicts: AtomicU64::new(0),
            digest_keys: std::collections::hash_map::RandomState::new(),
            #[cfg(feature = "test-knobs")]
            knobs: crate::knobs::TestKnobs::default(),
            sync_checkpoint_waits: AtomicU64::new(0),
            sync_checkpoint_wait_ns: AtomicU64::new(0),
            lock_wait_ns: AtomicU64::new(0),
            commit_hold_ns: AtomicU64::new(0),
            recent: Mutex::new(Default::default()),
            validation_counts: Default::default(),
            aborts: AtomicU64::new(0),
            ckpt,
            stop: Arc::new((Mutex::new(false), Condvar::new())),
            checkpointer: Mutex::new(None),
            recovery,
            read_only,
            _dir_lock: dir_lock,
            serial: held::next_serial(),
            born: keel_io::os::fork::generation(),
        });
        if !read_only && !inner.config.inline_maintenance {
            let handle = spawn_checkpointer(&inner.ckpt, &inner.stop, &inner.config, &inner.dir)?;
            *inner.checkpointer.lock() = Some(handle);
        }
        Ok(Store { inner })
    }
}

impl Store {
    /// Starts the exclusive write transaction (waits while another exclusive writer, or a
    /// concurrent writer's commit, holds the writer lock; readers never delay it).
    ///
    /// ```
    /// # fn main() -> keel::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let store = keel::Store::open(dir.path(), keel::Config::default())?;
    /// let tx = store.write()?;
    /// tx.table("t")?.insert(b"k", b"v")?;
    /// tx.commit()?; // durable when it returns (Durability::Sync, the default)
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::ReadOnly`] for a read-only store; [`Error::Poisoned`] after a failed write or
    /// sync (reopen to recover); an error of the checkpoint a writer takes when the log is past
    /// its synchronous checkpoint point.
    pub fn write(&self) -> Result<WriteTxn<'_>> {
        self.check_writable()?;
        let ex = self.inner.begin_exclusive("Store::write")?;
        Ok(WriteTxn::exclusive(&self.inner, ex))
    }

    /// Starts a concurrent write transaction: any number run at once, beside each other and
    /// beside [`write`](Self::write)'s exclusive one. It reads at a snapshot of the newest
    /// commit (plus its own writes) and keeps its writes to itself; its commit takes the
    /// writer lock only to check that everything it read still holds at the newest commit and
    /// to apply its writes. If something it read was changed by a commit after its snapshot,
    /// the commit is refused with [`Error::Conflict`] and nothing of it is applied: run the
    /// transaction's logic again on a new one. Isolation is serializable (scans record the
    /// key ranges they covered, so a row inserted into a scanned range is a conflict too).
    ///
    /// ```
    /// # fn main() -> keel::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let store = keel::Store::open(dir.path(), keel::Config::default())?;
    /// let tx = store.write()?;
    /// tx.table("t")?.insert(b"x", b"0")?;
    /// tx.commit()?;
    ///
    /// // Different rows: both commit, neither waited for the other.
    /// let a = store.write_concurrent()?;
    /// let b = store.write_concurrent()?;
    /// a.table("t")?.insert(b"y", b"1")?;
    /// b.table("t")?.insert(b"z", b"2")?;
    /// a.commit()?;
    /// b.commit()?;
    ///
    /// // Both read x and write it: the second commit finds x changed since its snapshot.
    /// let a = store.write_concurrent()?;
    /// let b = store.write_concurrent()?;
    /// for (tx, v) in [(&a, b"a"), (&b, b"b")] {
    ///     let mut t = tx.table("t")?;
    ///     let _seen = t.get(b"x")?;
    ///     t.insert(b"x", v)?;
    /// }
    /// a.commit()?;
    /// assert!(b.commit().unwrap_err().is_conflict());
    /// assert_eq!(store.read()?.table("t")?.get(b"x")?, Some(b"a".to_vec()));
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::ReadOnly`] for a read-only store; [`Error::Poisoned`] after a failed write or
    /// sync. Its reads, writes and commit fail as [`write`](Self::write)'s do, and its commit
    /// also with [`Error::Conflict`]; its reads with [`Error::SnapshotTooOld`] once its snapshot
    /// passed the version budget. Both leave nothing applied: run it again
    /// ([`Error::is_retryable`]).
    pub fn write_concurrent(&self) -> Result<WriteTxn<'_>> {
        self.check_writable()?;
        self.check_poison()?;
        Ok(WriteTxn::optimistic(&self.inner))
    }

    /// A read transaction: a snapshot of the newest commit. Returns at once: it never waits
    /// for a writer or a checkpoint, and never delays one (see [`ReadTxn`]).
    ///
    /// ```
    /// # fn main() -> keel::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let store = keel::Store::open(dir.path(), keel::Config::default())?;
    /// let r = store.read()?;
    /// assert!(r.list_tables()?.is_empty());
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// None today (the signature leaves room for limits on snapshots).
    pub fn read(&self) -> Result<ReadTxn> {
        self.inner.check_fork()?;
        Ok(ReadTxn {
            inner: self.inner.clone(),
            snap: self.inner.pool.snapshot(),
        })
    }

    /// This store's identity for [`held`] (its open's serial).
    fn id(&self) -> u64 {
        self.inner.serial
    }

    /// Takes a checkpoint now: writes dirty pages up to the log's end and records the
    /// checkpoint in the log header. Returns the checkpoint LSN.
    ///
    /// ```
    /// # fn main() -> keel::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let store = keel::Store::open(dir.path(), keel::Config::default())?;
    /// let before = store.checkpoint()?;
    /// let tx = store.write()?;
    /// tx.table("t")?.insert(b"k", b"v")?;
    /// tx.commit()?;
    /// assert!(store.checkpoint()? > before);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::ReadOnly`], [`Error::Poisoned`], or the page write or log sync that failed (it
    /// poisons the store).
    pub fn checkpoint(&self) -> Result<Lsn> {
        self.check_writable()?;
        self.check_poison()?;
        held::check(self.id(), "Store::checkpoint")?;
        checkpoint(&self.inner.ckpt, CheckpointExclusive::Wait)
    }

    /// What the meta page says now (committed state): pages allocated, free ids in the meta
    /// page's array, the newest free-list trunk page, the catalog root.
    ///
    /// ```
    /// # fn main() -> keel::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let store = keel::Store::open(dir.path(), keel::Config::default())?;
    /// assert!(store.meta()?.page_count >= 2); // the meta page and the catalog root
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// The meta page cannot be read or does not decode ([`Error::Format`] naming the file).
    pub fn meta(&self) -> Result<MetaInfo> {
        self.inner.check_fork()?;
        let snap = self.inner.pool.snapshot();
        let g = self.inner.pool.read_at(META_PAGE, &snap)?;
        meta::read_meta(&g, self.inner.writer.data_path())
    }

    /// Checks the whole store's committed state, as `keel check` does: every B-tree's
    /// structure (the catalog's and each table's: key order, bounds, levels, overflow
    /// chains), and an account of every page of the data file (each page is the meta page, a
    /// page of exactly one tree, a free-list trunk or a free id: none in two places, none
    /// leaked). Pages are read through the pool, so those not resident are read from the file
    /// and their checksums verified. Changes nothing, and checks the newest commit as a
    /// snapshot: it never waits for a writer and never delays one.
    ///
    /// ```
    /// # fn main() -> keel::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let store = keel::Store::open(dir.path(), keel::Config::default())?;
    /// let tx = store.write()?;
    /// tx.table("orders")?.insert(b"o1", b"3 items")?;
    /// tx.commit()?;
    /// let report = store.check()?;
    /// assert!(report.is_ok(), "{:?}", report.problems);
    /// assert_eq!(report.tables[0].rows, 1);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// The meta page cannot be read or is not a meta page (nothing else can be checked).
    /// [`Error::SnapshotTooOld`] when writers' page versions passed
    /// [`Config::snapshot_budget`](crate::Config::snapshot_budget) while the check walked its
    /// snapshot (retryable: check again, with a larger budget or fewer writers); a poisoned
    /// store's error. Everything found past that is a line in [`CheckReport::problems`], not
    /// an error.
    pub fn check(&self) -> Result<CheckReport> {
        self.inner.check_fork()?;
        let snap = self.inner.pool.snapshot();
        crate::check::check_store(&self.inner, &snap)
    }

    /// Counters of every layer. In a process forked from the one that opened the store, only
    /// the store's own counters are read; the layers' (log, page writer, pool) read as zero.
    ///
    /// ```
    /// # fn main() -> keel::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let store = keel::Store::open(dir.path(), keel::Config::default())?;
    /// let tx = store.write()?;
    /// tx.table("t")?.insert(b"k", b"v")?;
    /// tx.commit()?;
    /// assert_eq!(store.stats().commits, 1);
    /// # Ok(()) }
    /// ```
    pub fn stats(&self) -> StoreStats {
        let i = &self.inner;
        // In a forked child the layers' counters, read under locks a thread of the parent may
        // hold for good (a child's `stats()` hung: a tester), read as zero.
        let (log, flush, pool) = if keel_io::os::fork::forked_since(i.born) {
            Default::default()
        } else {
            (i.log.stats(), i.writer.stats(), i.pool.stats())
        };
        StoreStats {
            commits: i.commits.load(Ordering::Relaxed),
            sync_checkpoint_waits: i.sync_checkpoint_waits.load(Ordering::Relaxed),
            sync_checkpoint_wait_us: i.sync_checkpoint_wait_ns.load(Ordering::Relaxed) / 1000,
            writer_lock_wait_us: i.lock_wait_ns.load(Ordering::Relaxed) / 1000,
            concurrent_commit_hold_us: i.commit_hold_ns.load(Ordering::Relaxed) / 1000,
            validations_narrowed: i.validation_counts.narrowed.load(Ordering::Relaxed),
            validations_full: i.validation_counts.full.load(Ordering::Relaxed),
            validation_reads_reread: i.validation_counts.reread.load(Ordering::Relaxed),
            validation_reads_skipped: i.validation_counts.skipped.load(Ordering::Relaxed),
            aborts: i.aborts.load(Ordering::Relaxed),
            conflicts: i.conflicts.load(Ordering::Relaxed),
            checkpoints: i.ckpt.count(),
            checkpointer_wakeups: i.ckpt.wakeups(),
            log,
            flush,
            pool,
            io: i.fs.counters().snapshot(),
        }
    }

    /// The switches that break invariants on purpose (tests only: exists with the
    /// `test-knobs` feature, which only this crate's own dev-dependency enables).
    #[cfg(feature = "test-knobs")]
    pub fn test_knobs(&self) -> &crate::TestKnobs {
        &self.inner.knobs
    }

    /// The buffer pool's switches that break its invariants on purpose (tests only, as
    /// [`test_knobs`](Self::test_knobs)).
    #[cfg(feature = "test-knobs")]
    pub fn pool_test_knobs(&self) -> &keel_buffer_pool::TestKnobs {
        self.inner.pool.knobs()
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
    /// it to recover). A failure in a background thread (the log's flusher, the checkpointer)
    /// counts as soon as it happened, not only once a write has met it (it did not: a tester).
    pub fn is_poisoned(&self) -> bool {
        self.inner.check_poison().is_err()
    }

    /// Takes a final checkpoint, syncs the data file (pages whose durable copy was still only in
    /// a doublewrite slot are then durable in place) and, if this is the last handle of the
    /// store, stops the background threads. A clone (or a [`ReadTxn`]) still held keeps the
    /// store working as before, its checkpointer and page cleaner included: they stop with the
    /// last handle (they stopped at the first clone's close, and the others went on degraded —
    /// a load 25 times slower: a tester). Dropping the store without closing is safe too (the
    /// next open recovers from the log and the doublewrite area).
    ///
    /// ```
    /// # fn main() -> keel::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let store = keel::Store::open(dir.path(), keel::Config::default())?;
    /// store.close()?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// The final checkpoint or data sync failed, or the store was poisoned before
    /// ([`Error::Poisoned`]: no final checkpoint is taken): nothing durable is lost (the next
    /// open recovers from the log), but the store was not left clean. The background threads
    /// are stopped either way.
    pub fn close(self) -> Result<()> {
        self.inner.check_fork()?;
        let last = if self.inner.read_only {
            Ok(())
        } else {
            self.inner
                .check_poison()
                .and_then(|()| self.checkpoint().map(drop))
                .and_then(|()| self.inner.writer.sync_data().map_err(Error::from))
        };
        if Arc::strong_count(&self.inner) == 1 {
            self.inner.shutdown();
        }
        last
    }

    /// Whether the store was opened read-only.
    pub fn is_read_only(&self) -> bool {
        self.inner.read_only
    }

    fn check_writable(&self) -> Result<()> {
        self.inner.check_fork()?;
        if self.inner.read_only {
            return Err(Error::ReadOnly {
                dir: self.inner.dir.clone(),
            });
        }
        Ok(())
    }

    fn check_poison(&self) -> Result<()> {
        self.inner.check_poison()
    }
}

/// Counters of concurrent commits' validations.
#[derive(Debug, Default)]
struct ValidationCounts {
    /// Narrowed by the recent commits' writes.
    narrowed: AtomicU64,
    /// Every read checked.
    full: AtomicU64,
    /// Reads read again.
    reread: AtomicU64,
    /// Reads skipped.
    skipped: AtomicU64,
}

impl Inner {
    /// Takes the writer lock for a write: the exclusive transaction of [`Store::write`], or
    /// the validate-and-apply step of a concurrent one's commit (`call` names it in
    /// [`Error::WouldDeadlock`]). Waits at the synchronous checkpoint point first if the log
    /// is past it.
    pub(crate) fn begin_exclusive(&self, call: &'static str) -> Result<Exclusive<'_>> {
        self.check_poison()?;
        held::check(self.serial, call)?;
        let t0 = Instant::now();
        let lock = self.lock.write();
        self.lock_wait_ns
            .fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
        let held = held::mark(self.serial);
        self.check_poison()?;
        // Synchronous checkpoint point (InnoDB's "sync flush" of the checkpoint age): with the
        // writer lock held no page is owned by a transaction, so every dirty page can be
        // written and the checkpoint can free log space before this transaction appends.
        let fraction = self.config.checkpoint_log_fraction;
        let over_sync_point = || log_past(&self.log, sync_point(fraction));
        // Asynchronous point: wake the checkpointer (it sleeps until its interval otherwise),
        // or, with inline maintenance, take the checkpoint here (the writer lock is held and no
        // transaction owns a page, as at the synchronous point below).
        if checkpoint_due(&self.log, &self.config) {
            if self.config.inline_maintenance {
                checkpoint_inline(&self.ckpt)?;
            } else {
                self.ckpt.kick(&self.stop);
            }
        }
        if over_sync_point() {
            // A running checkpoint records its progress step by step: wait until one of its
            // steps frees enough, or take a checkpoint here if none is running.
            let t0 = Instant::now();
            let r = wait_for_log_space(&self.ckpt, over_sync_point);
            self.sync_checkpoint_waits.fetch_add(1, Ordering::Relaxed);
            self.sync_checkpoint_wait_ns
                .fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
            r?;
        }
        Ok(Exclusive {
            txn: self.pool.begin(),
            created: RefCell::new(HashMap::new()),
            dropped: RefCell::new(HashSet::new()),
            lock: crate::txn::WriterLock::new(lock, self.born),
            held,
        })
    }

    /// Counts one validation of a concurrent commit (`narrowed`: by the recent commits'
    /// writes).
    pub(crate) fn count_validation(&self, narrowed: bool, checked: crate::read_set::Checked) {
        let c = &self.validation_counts;
        let kind = if narrowed { &c.narrowed } else { &c.full };
        kind.fetch_add(1, Ordering::Relaxed);
        c.reread.fetch_add(checked.reread, Ordering::Relaxed);
        c.skipped.fetch_add(checked.skipped, Ordering::Relaxed);
    }

    /// [`Error::Poisoned`] once the store, the log or the page writer is poisoned. A layer
    /// can poison itself on a path whose error never reached the store's own flag (a
    /// background page write, an eviction inside a table operation whose caller dropped the
    /// error): its cause is adopted here, so no write begins or commits after any layer's
    /// failure.
    /// Refuses any operation in a process forked from the one that opened the store, before a
    /// lock is taken: a lock another thread of the parent held at the fork stays held in the
    /// child (a child's commit hung on the log's lock: a tester).
    pub(crate) fn check_fork(&self) -> Result<()> {
        if keel_io::os::fork::forked_since(self.born) {
            return Err(Error::Io(keel_io::IoError::Forked {
                path: self.dir.clone(),
            }));
        }
        Ok(())
    }

    pub(crate) fn check_poison(&self) -> Result<()> {
        if !self.poison.is_poisoned() {
            if let Some(cause) = layer_cause(&self.log, &self.writer) {
                self.poison.poison(cause);
            }
        }
        match self.poison.cause() {
            Some(reason) => Err(poisoned(reason)),
            None => Ok(()),
        }
    }

    fn shutdown(&self) {
        {
            let (m, cv) = &*self.stop;
            *m.lock() = true;
            cv.notify_all();
        }
        if let Some(h) = self.checkpointer.lock().take() {
            // The last handle may drop on the checkpointer (a future's waker run there).
            keel_io::join_unless_current(h);
        }
        if let Some(c) = self.cleaner.lock().take() {
            c.stop();
        }
    }

    pub(crate) fn note_error(&self, e: &Error) {
        if let Some(reason) = poison_reason(&self.log, &self.writer, e) {
            self.poison.poison(reason);
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.shutdown();
    }
}
