//! Transactions: the one write transaction (its tables and catalog changes, and the commit
//! path: the log-space check, the append that fixes the commit LSN, early lock release, the
//! wait for durability) and read transactions.

use crate::checkpointer::sync_point;
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

/// The one write transaction. Changes are visible to it at once and to others after commit;
/// dropping it (or [`abort`](Self::abort)) rolls everything back.
pub struct WriteTxn<'s> {
    // Field order matters: the page transaction is rolled back (on drop) before the writer
    // lock is released.
    pub(crate) txn: PageTxn<'s>,
    pub(crate) created: RefCell<HashMap<String, PageId>>,
    /// Tables this transaction dropped (the committed catalog cache forgets them at commit).
    pub(crate) dropped: RefCell<HashSet<String>>,
    pub(crate) inner: &'s Inner,
    pub(crate) lock: RwLockWriteGuard<'s, ()>,
    /// This thread holds the writer lock (dropped with it).
    pub(crate) held: crate::held::Held,
    /// Counts the transaction in `StoreStats::aborts` when it ends without a commit (abort,
    /// drop, or a commit refused before its append).
    pub(crate) ends_in_abort: AbortCount<'s>,
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
    /// A page of the catalog cannot be read or is corrupt, or creating the table needs a page
    /// that cannot be allocated.
    pub fn table(&self, name: &str) -> Result<Table<'_, 's>> {
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
        Table::open(self, name, false)
    }

    /// The names of the tables as this transaction sees them (its own creations and drops
    /// included), in byte order of the name.
    ///
    /// # Errors
    ///
    /// A catalog page cannot be read or is corrupt, or a catalog entry is not a valid name.
    pub fn list_tables(&self) -> Result<Vec<String>> {
        table::list_tables_in_txn(self)
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
        table::drop_table(self, name)
    }

    /// Commits: appends the redo with its commit marker (this fixes the commit LSN), releases
    /// the writer lock so the next writer can start (early lock release), then waits as the
    /// durability level says (`Sync`: until the log is durable up to the commit LSN).
    ///
    /// # Errors
    ///
    /// [`Error::TxnTooLargeForLog`] when the transaction's redo cannot fit the log (nothing is
    /// committed); the log append or sync failed ([`Error::Log`]; the store is poisoned and a
    /// reopen recovers exactly the commits that were durable).
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
        let WriteTxn {
            txn,
            created,
            dropped,
            inner,
            lock,
            held,
            mut ends_in_abort,
        } = self;
        // The log's synchronous checkpoint point leaves this much room for one transaction's
        // redo; a larger one could wait for log space forever. The bound charges page images
        // only in full-page-writes mode, the one mode that logs them.
        if let Some(cap) = inner.log.capacity() {
            let room =
                ((1.0 - sync_point(inner.config.checkpoint_log_fraction)) * cap as f64) as u64;
            let worst = txn.log_bytes_bound();
            if worst > room {
                txn.abort();
                return Err(Error::TxnTooLargeForLog {
                    redo_bytes: worst,
                    room,
                });
            }
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
        table::list_tables_committed(&self.inner, &self.snap)
    }
}
