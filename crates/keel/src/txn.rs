//! Transactions: write transactions in their two modes — exclusive ([`Store::write`]: holds
//! the writer lock, changes pages as it goes) and concurrent ([`Store::write_concurrent`]:
//! reads at a snapshot, buffers its writes, validates and applies them at commit; the state is
//! in `optimistic.rs`) — the commit path they share (the log-space check, the append that fixes
//! the commit LSN, early lock release, the wait for durability), and read transactions.
//!
//! [`Store::write`]: crate::Store::write
//! [`Store::write_concurrent`]: crate::Store::write_concurrent

use crate::checkpointer::txn_log_room;
use crate::optimistic::Optimistic;
use crate::poison::cause_in;
use crate::store::Inner;
use crate::table::{self, CachedRoot, ReadTable, Table};
use crate::{Error, Result};
use keel_buffer_pool::PageTxn;
use keel_page::{Lsn, PageId};
use keel_redo_log::Durability;
use parking_lot::RwLockWriteGuard;
use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::atomic::Ordering;

/// A write transaction. Its changes are visible to it at once and to others after commit;
/// dropping it (or [`abort`](Self::abort)) rolls everything back.
///
/// From [`Store::write`](crate::Store::write) it is the *exclusive* writer: it holds the
/// writer lock for its life and its commit never conflicts. From
/// [`Store::write_concurrent`](crate::Store::write_concurrent) it is one of any number of
/// *concurrent* writers: it reads at a snapshot, and its commit is refused with
/// [`Error::Conflict`] if a read no longer holds. The API is the same.
pub struct WriteTxn<'s> {
    pub(crate) inner: &'s Inner,
    pub(crate) mode: Mode<'s>,
    /// Counts the transaction in `StoreStats::aborts` when it ends without a commit (abort,
    /// drop, or a commit refused before its append). Declared last: dropped after the mode.
    pub(crate) ends_in_abort: AbortCount<'s>,
}

/// How a write transaction runs. (The exclusive variant is inline: it is the single writer's
/// hot path, and boxing it would cost an allocation per transaction.)
#[allow(clippy::large_enum_variant)]
pub(crate) enum Mode<'s> {
    /// Holds the writer lock, changes pages directly.
    Exclusive(Exclusive<'s>),
    /// Reads at a snapshot, buffers writes until commit.
    Optimistic(Box<Optimistic>),
}

/// A transaction that holds the writer lock and changes pages directly: the exclusive writer,
/// or a concurrent transaction's commit while it validates and applies.
pub(crate) struct Exclusive<'s> {
    // Field order matters: the page transaction is rolled back (on drop) before the writer
    // lock is released.
    pub(crate) txn: PageTxn<'s>,
    pub(crate) created: RefCell<HashMap<String, PageId>>,
    /// Tables this transaction dropped (the committed catalog cache forgets them at commit).
    pub(crate) dropped: RefCell<HashSet<String>>,
    pub(crate) lock: WriterLock<'s>,
    /// This thread holds the writer lock (dropped with it).
    pub(crate) held: crate::held::Held,
}

/// The writer lock, held. Released when dropped — except in a forked child, where it is
/// leaked: a release with waiters parked (threads of the parent) would reach the lock's
/// parking table, whose locks those threads may hold for good.
pub(crate) struct WriterLock<'s> {
    guard: Option<RwLockWriteGuard<'s, ()>>,
    /// The fork generation of the store it belongs to.
    born: u64,
}

impl<'s> WriterLock<'s> {
    /// Holds `guard`, the writer lock of a store opened in fork generation `born`.
    pub(crate) fn new(guard: RwLockWriteGuard<'s, ()>, born: u64) -> WriterLock<'s> {
        WriterLock {
            guard: Some(guard),
            born,
        }
    }
}

impl Drop for WriterLock<'_> {
    fn drop(&mut self) {
        if let Some(g) = self.guard.take() {
            if keel_io::os::fork::forked_since(self.born) {
                std::mem::forget(g);
            }
        }
    }
}

/// Counts one abort when dropped, unless disarmed by a commit.
pub(crate) struct AbortCount<'s> {
    pub(crate) inner: &'s Inner,
    pub(crate) armed: bool,
}

impl Drop for AbortCount<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.inner.aborts.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl<'s> WriteTxn<'s> {
    /// The exclusive writer over `ex` (which holds the writer lock).
    pub(crate) fn exclusive(inner: &'s Inner, ex: Exclusive<'s>) -> WriteTxn<'s> {
        WriteTxn {
            inner,
            mode: Mode::Exclusive(ex),
            ends_in_abort: AbortCount { inner, armed: true },
        }
    }

    /// A concurrent writer at a snapshot of the newest commit.
    pub(crate) fn optimistic(inner: &'s Inner) -> WriteTxn<'s> {
        WriteTxn {
            inner,
            mode: Mode::Optimistic(Box::new(Optimistic::new(inner))),
            ends_in_abort: AbortCount { inner, armed: true },
        }
    }

    /// The table `name`, created on first use (the creation commits with this transaction).
    ///
    /// ```
    /// # fn main() -> keel::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let store = keel::Store::open(dir.path(), keel::Config::default())?;
    /// let tx = store.write()?;
    /// tx.table("orders")?.insert(b"o1", b"3 items")?;
    /// tx.commit()?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::TableNameTooLong`] for a name longer than [`crate::max_key_len`] bytes
    /// (nothing changed); a page of the catalog cannot be read or is corrupt, or creating the
    /// table needs a page that cannot be allocated.
    pub fn table(&self, name: &str) -> Result<Table<'_, 's>> {
        self.inner.check_fork()?;
        Table::open(self, name, true)
    }

    /// The table `name` if it exists (committed, or created earlier in this transaction and
    /// not dropped since); unlike [`table`](Self::table) it never creates one.
    ///
    /// ```
    /// # fn main() -> keel::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let store = keel::Store::open(dir.path(), keel::Config::default())?;
    /// let tx = store.write()?;
    /// assert!(matches!(tx.existing_table("orders"), Err(keel::Error::TableNotFound(_))));
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::TableNotFound`] if there is no such table; a catalog page cannot be read or is
    /// corrupt.
    pub fn existing_table(&self, name: &str) -> Result<Table<'_, 's>> {
        self.inner.check_fork()?;
        Table::open(self, name, false)
    }

    /// The names of the tables as this transaction sees them (its own creations and drops
    /// included), in byte order of the name.
    ///
    /// # Errors
    ///
    /// A catalog page cannot be read or is corrupt, or a catalog entry is not a valid name.
    pub fn list_tables(&self) -> Result<Vec<String>> {
        self.inner.check_fork()?;
        match &self.mode {
            Mode::Exclusive(ex) => table::list_tables_in_txn(self.inner, ex),
            Mode::Optimistic(o) => o.list_tables(self.inner),
        }
    }

    /// Drops the table `name` with all its rows: every page of its B-tree (overflow pages
    /// included) goes back to the free list and its name leaves the catalog, both with this
    /// transaction (an abort keeps the table). Returns whether the table existed. It takes
    /// `&mut self`, so no [`Table`] handle of this transaction can outlive the drop.
    ///
    /// ```
    /// # fn main() -> keel::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let store = keel::Store::open(dir.path(), keel::Config::default())?;
    /// let mut tx = store.write()?;
    /// tx.table("scratch")?.insert(b"k", b"v")?;
    /// assert!(tx.drop_table("scratch")?);
    /// assert!(!tx.drop_table("scratch")?);
    /// tx.commit()?;
    /// assert!(store.read()?.list_tables()?.is_empty());
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// A page of the table or the catalog cannot be read or is corrupt (then abort the
    /// transaction: the drop may be half done in it). A table whose pages outgrow the log's
    /// room for one transaction gives [`Error::TxnTooLargeForLog`] at commit.
    pub fn drop_table(&mut self, name: &str) -> Result<bool> {
        self.inner.check_fork()?;
        match &self.mode {
            Mode::Exclusive(ex) => table::drop_table(self.inner, ex, name),
            Mode::Optimistic(o) => o.drop_table(self.inner, name),
        }
    }

    /// Commits: appends the redo with its commit marker (this fixes the commit LSN), releases
    /// the writer lock so the next writer can start (early lock release), then waits as the
    /// durability level says (`Sync`: until the log is durable up to the commit LSN). A
    /// concurrent transaction first takes the writer lock, checks its reads against the newest
    /// commit and applies its writes.
    ///
    /// # Errors
    ///
    /// [`Error::Conflict`] (concurrent transactions only) when something it read was changed
    /// by a commit after its snapshot: nothing is committed, run it again;
    /// [`Error::WouldDeadlock`] for a concurrent transaction committed by a thread that holds
    /// the exclusive writer; [`Error::TxnTooLargeForLog`] when the transaction's redo cannot
    /// fit the log (nothing is committed); the errors of reading and changing pages for a
    /// concurrent transaction's writes (nothing is committed); [`Error::Poisoned`] when the
    /// store, its log or its page writer failed since the transaction began (nothing is
    /// committed); the log append or sync failed ([`Error::Log`]; the store is poisoned and a
    /// reopen recovers exactly the commits that were durable). After a failed sync the outcome
    /// of this transaction is unknown, as with any commit whose durability could not be
    /// confirmed: its redo may have reached the disk, and until the reopen decides, reads of the
    /// poisoned store may see its writes.
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
    ///
    /// # Errors
    ///
    /// As [`commit`](Self::commit); the future resolves to the error.
    pub fn commit_async(self) -> impl Future<Output = Result<()>> + Send + 'static {
        let appended = self.append();
        let waiting = appended.map(|(inner, lsn)| (inner.log.committed(lsn), inner.poison.clone()));
        async move {
            let (durable, poison) = waiting?;
            durable.await.map_err(|e| {
                let e = Error::Log(e);
                if let Some(reason) = cause_in(&e) {
                    poison.poison(reason);
                }
                e
            })
        }
    }

    /// Rolls back (same as dropping).
    ///
    /// ```
    /// # fn main() -> keel::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let store = keel::Store::open(dir.path(), keel::Config::default())?;
    /// let tx = store.write()?;
    /// tx.table("t")?.insert(b"k", b"v")?;
    /// tx.abort();
    /// assert!(store.read()?.list_tables()?.is_empty());
    /// # Ok(()) }
    /// ```
    pub fn abort(self) {
        // Dropping rolls back and counts the abort.
    }

    fn append(self) -> Result<(&'s Inner, Lsn)> {
        if let Err(e) = self.inner.check_fork() {
            // A forked child: no lock is taken, not even the abort's.
            std::mem::forget(self);
            return Err(e);
        }
        let WriteTxn {
            inner,
            mode,
            mut ends_in_abort,
        } = self;
        // For a concurrent transaction: when it took the writer lock (its serial part).
        let mut held_since = None;
        // What the commit writes, for the recent commits' record (`None`: not known).
        let mut written = None;
        // A concurrent transaction's read and write sets, dropped once the lock is released.
        let mut leftovers = None;
        let ex = match mode {
            Mode::Exclusive(ex) => ex,
            Mode::Optimistic(o) => match o.validate_and_apply(inner) {
                Ok(applied) => {
                    held_since = Some(applied.since);
                    written = applied.written;
                    leftovers = Some(applied.leftovers);
                    applied.ex
                }
                Err(e) => {
                    if e.is_conflict() {
                        inner.conflicts.fetch_add(1, Ordering::Relaxed);
                    } else {
                        inner.note_error(&e);
                    }
                    return Err(e);
                }
            },
        };
        let Exclusive {
            txn,
            created,
            dropped,
            lock,
            held,
        } = ex;
        // No commit after any layer's failure, also for a transaction begun before it — and
        // said so before the transaction's own failure, which a poisoned layer may have caused
        // (an eviction's failed write: the commit said `TxnFailed`, `is_poisoned()` false,
        // where the docs promise `Poisoned`: a tester).
        if let Err(e) = inner.check_poison() {
            txn.abort();
            return Err(e);
        }
        // A transaction an operation failed part-way through is only rolled back (module
        // `table`, `whole`): nothing of it is committed.
        if let Err(e) = txn.check_failed() {
            txn.abort();
            return Err(Error::Pool(e));
        }
        // The log's synchronous checkpoint point leaves this much room for one transaction's
        // redo; a larger one could wait for log space forever. The bound charges page images
        // only in full-page-writes mode, the one mode that logs them.
        if let Some(room) = txn_log_room(&inner.log, inner.config.checkpoint_log_fraction) {
            let worst = txn.log_bytes_bound();
            if worst > room {
                txn.abort();
                return Err(Error::TxnTooLargeForLog {
                    redo_bytes: worst,
                    room,
                });
            }
        }
        // No commit after any layer's failure, also for a transaction begun before it.
        if let Err(e) = inner.check_poison() {
            txn.abort();
            return Err(e);
        }
        // A dropped table leaves the committed catalog cache before its drop is published, so
        // no snapshot at or after the drop finds its old root there.
        let dropped = dropped.into_inner();
        if !dropped.is_empty() {
            let mut catalog = inner.catalog.write();
            for name in &dropped {
                catalog.remove(name);
            }
        }
        let prev = inner.pool.latest_commit();
        let lsn = match txn.commit(&inner.log) {
            Ok(lsn) => {
                ends_in_abort.armed = false;
                // Still under the writer lock: the next validation finds this commit.
                let now = inner.pool.latest_commit();
                if now != prev {
                    inner.recent.lock().record(prev, now, written);
                }
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
            let mut catalog = inner.catalog.write();
            catalog.extend(
                created
                    .into_iter()
                    .map(|(name, root)| (name, CachedRoot { root, since: lsn })),
            );
        }
        inner.commits.fetch_add(1, Ordering::Relaxed);
        drop(lock);
        drop(held);
        drop(leftovers);
        if let Some(t0) = held_since {
            inner
                .commit_hold_ns
                .fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
        }
        Ok((inner, lsn))
    }

    /// The durability level commits wait for.
    pub fn durability(&self) -> Durability {
        self.inner.config.durability
    }
}

/// A read transaction: a snapshot of the newest commit when it began. It never waits for a
/// writer or a checkpoint and never delays one; it owns what it needs (`Send + 'static`), so
/// it can move to another thread or task and outlive the borrow of the [`Store`](crate::Store).
/// Old page versions are kept for it while it lives, within the pool's version budget
/// (`Config::snapshot_budget`); past it the oldest snapshots are refused with
/// [`Error::SnapshotTooOld`](crate::Error::SnapshotTooOld).
///
/// It keeps the store's shared state alive: after the [`Store`](crate::Store) is dropped or
/// closed it still reads, and the directory stays locked (a new open of it in this process is
/// refused as a second opener) until the last read transaction is dropped.
pub struct ReadTxn {
    pub(crate) inner: std::sync::Arc<Inner>,
    pub(crate) snap: keel_buffer_pool::Snapshot,
}

impl Drop for ReadTxn {
    /// In a forked child its hold on the store's shared state is leaked, as a `Store`'s is: the
    /// last holder's teardown would join the parent's threads, which do not exist there (a
    /// child dropping a read transaction that outlived its store aborted: a tester).
    fn drop(&mut self) {
        if keel_io::os::fork::forked_since(self.inner.born) {
            std::mem::forget(self.inner.clone());
        }
    }
}

impl ReadTxn {
    /// The table `name` ([`Error::TableNotFound`] if it was never created).
    ///
    /// ```
    /// # fn main() -> keel::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let store = keel::Store::open(dir.path(), keel::Config::default())?;
    /// let tx = store.write()?;
    /// tx.table("orders")?.insert(b"o1", b"3 items")?;
    /// tx.commit()?;
    /// let r = store.read()?;
    /// assert_eq!(r.table("orders")?.get(b"o1")?, Some(b"3 items".to_vec()));
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::TableNotFound`] if there is no such table; a catalog page cannot be read or is
    /// corrupt.
    pub fn table(&self, name: &str) -> Result<ReadTable<'_>> {
        self.inner.check_fork()?;
        ReadTable::open(&self.inner, &self.snap, name)
    }

    /// The names of the committed tables, in byte order of the name.
    ///
    /// ```
    /// # fn main() -> keel::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let store = keel::Store::open(dir.path(), keel::Config::default())?;
    /// let tx = store.write()?;
    /// tx.table("b")?;
    /// tx.table("a")?;
    /// tx.commit()?;
    /// assert_eq!(store.read()?.list_tables()?, ["a", "b"]);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// A catalog page cannot be read or is corrupt, or a catalog entry is not a valid name.
    pub fn list_tables(&self) -> Result<Vec<String>> {
        self.inner.check_fork()?;
        table::list_tables_committed(&self.inner, &self.snap)
    }
}
