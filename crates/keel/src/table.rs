//! Tables: named B+trees. Adapters that let the B-tree reach pages through a write transaction
//! (logging every change) or through the pool (reads of committed data).
//!
//! Invariant (tested in keel-buffer-pool's `txn/diff.rs` and `txn/write_guard.rs`): every byte a
//! B-tree operation changes in a page is logged — the write adapter hands the change to the
//! transaction's write guard (`PageWriteGuard::rewrite` for a free-form change, `apply` for an
//! exact `PageOp`), which records it as redo, so replaying the redo on the old page gives exactly
//! the new page.
//!
//! Invariant (design invariant 12; test `tests/errors.rs`
//! `a_transaction_an_operation_failed_part_way_through_commits_nothing`, which fails with
//! `whole` not failing the transaction): an exclusive transaction commits whole operations or
//! nothing — an insert, remove, add, table creation or drop that fails after changing a page
//! fails the transaction (`whole`), and its commit is refused.

use crate::cursor::{Cursor, CursorOf};
use crate::merged::Merged;
use crate::optimistic::{Optimistic, Pending};
use crate::store::Inner;
use crate::txn::{Exclusive, Mode, WriteTxn};
use crate::{Error, Result};
use keel_btree::{BTree, BTreeError, PageOp, PageRead, PageWrite, Range, ReadToken};
use keel_buffer_pool::{BufferPool, OptimisticToken, PageTxn, Snapshot};
use keel_page::{PageId, PageType};
use std::cell::Cell;
use std::ops::RangeBounds;
use std::path::Path;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

/// A table's root in the committed catalog cache, and the commit it is known to hold from.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CachedRoot {
    pub(crate) root: PageId,
    pub(crate) since: keel_page::Lsn,
}

fn storage(e: keel_buffer_pool::PoolError) -> BTreeError {
    BTreeError::Storage(Box::new(e))
}

fn store_err(e: Error) -> BTreeError {
    BTreeError::Storage(Box::new(e))
}

/// The B-tree's view of pages inside a write transaction.
pub(crate) struct TxnPages<'a, 'p> {
    txn: &'a PageTxn<'p>,
    file: &'a Path,
    page_size: usize,
}

impl<'a, 'p> TxnPages<'a, 'p> {
    pub(crate) fn new(txn: &'a PageTxn<'p>, file: &'a Path, page_size: usize) -> TxnPages<'a, 'p> {
        TxnPages {
            txn,
            file,
            page_size,
        }
    }
}

impl PageRead for TxnPages<'_, '_> {
    fn page_size(&self) -> usize {
        self.page_size
    }

    fn read<R>(&self, id: PageId, f: impl FnOnce(&[u8]) -> R) -> keel_btree::Result<R> {
        TxnReader {
            txn: self.txn,
            page_size: self.page_size,
        }
        .read(id, f)
    }
}

impl PageWrite for TxnPages<'_, '_> {
    fn write<R>(&mut self, id: PageId, f: impl FnOnce(&mut [u8]) -> R) -> keel_btree::Result<R> {
        // The change runs on a copy; the runs that differ are applied and logged by the guard.
        let mut g = self.txn.write(id).map_err(storage)?;
        g.rewrite(f).map_err(storage)
    }

    fn edit(&mut self, id: PageId, edits: &[PageOp<'_>]) -> keel_btree::Result<()> {
        // Exact edits: logged as they are (a slot-array shift is one 21-byte PageMove), no copy
        // of the page and no comparison.
        let mut g = self.txn.write(id).map_err(storage)?;
        apply_edits(&mut g, edits)
    }

    fn edit_planned<P, O>(
        &mut self,
        id: PageId,
        plan: impl FnOnce(&[u8]) -> keel_btree::Result<Result<P, O>>,
        apply: impl FnOnce(
            P,
            &mut dyn FnMut(&[PageOp<'_>]) -> keel_btree::Result<()>,
        ) -> keel_btree::Result<()>,
    ) -> keel_btree::Result<Result<(), O>> {
        // One latch for the plan and the edits: the page cannot change between them. A plan
        // that leaves the page unchanged still latched it for writing, which the callers do
        // next anyway (a split or an overwrite of the same page).
        let mut g = self.txn.write(id).map_err(storage)?;
        match plan(&g)? {
            Ok(p) => {
                apply(p, &mut |ops| apply_edits(&mut g, ops))?;
                Ok(Ok(()))
            }
            Err(o) => Ok(Err(o)),
        }
    }

    fn allocate(&mut self, page_type: PageType) -> keel_btree::Result<PageId> {
        let id = crate::meta::allocate(self.txn, self.file).map_err(store_err)?;
        self.txn.new_page(id, page_type).map_err(storage)?;
        Ok(id)
    }

    fn reinit(&mut self, id: PageId, page_type: PageType) -> keel_btree::Result<()> {
        let mut g = self.txn.write(id).map_err(storage)?;
        g.init(page_type);
        Ok(())
    }

    fn copy_page(&mut self, dst: PageId, src: PageId) -> keel_btree::Result<bool> {
        self.txn.copy_page(dst, src).map_err(storage)
    }

    fn free(&mut self, id: PageId) -> keel_btree::Result<()> {
        if crate::meta::free(self.txn, id, self.file).map_err(store_err)? {
            // The page became a free-list trunk: it stays, holding free page ids.
            return Ok(());
        }
        self.txn.free_page(id).map_err(storage)
    }
}

/// Applies `edits` in order through the page's write guard (each logged as it is).
fn apply_edits(
    g: &mut keel_buffer_pool::PageWriteGuard<'_>,
    edits: &[PageOp<'_>],
) -> keel_btree::Result<()> {
    edits.iter().try_for_each(|e| g.apply(*e)).map_err(storage)
}

/// A read handle for the pages of a write transaction (sees its own changes).
#[derive(Clone, Copy)]
pub(crate) struct TxnReader<'a, 'p> {
    txn: &'a PageTxn<'p>,
    page_size: usize,
}

impl<'a, 'p> TxnReader<'a, 'p> {
    /// Reads `txn`'s pages (the newest commit plus its changes).
    pub(crate) fn new(txn: &'a PageTxn<'p>, page_size: usize) -> TxnReader<'a, 'p> {
        TxnReader { txn, page_size }
    }
}

impl PageRead for TxnReader<'_, '_> {
    fn page_size(&self) -> usize {
        self.page_size
    }

    fn read<R>(&self, id: PageId, f: impl FnOnce(&[u8]) -> R) -> keel_btree::Result<R> {
        let g = self.txn.read(id).map_err(storage)?;
        Ok(f(&g))
    }

    /// The transaction's change count: a cursor of the transaction re-positions itself after
    /// the transaction wrote (through any table handle).
    fn generation(&self) -> u64 {
        self.txn.changes()
    }
}

fn lookup_catalog<S: PageRead>(inner: &Inner, pages: S, name: &str) -> Result<Option<PageId>> {
    let catalog = BTree::open(inner.catalog_root, inner.config.page_size);
    match catalog.get(&pages, name.as_bytes())? {
        None => Ok(None),
        Some(v) => catalog_entry(name, &v)
            .map(Some)
            .map_err(|detail| Error::Format {
                path: inner.writer.data_path().to_path_buf(),
                detail,
            }),
    }
}

/// Decodes the catalog's value for table `name`: its root page id (8 bytes, little-endian;
/// docs/format.md). The one decoder of catalog entries (lookups and `Store::check`).
pub(crate) fn catalog_entry(name: &str, v: &[u8]) -> std::result::Result<PageId, String> {
    <[u8; 8]>::try_from(v)
        .map(|b| PageId(u64::from_le_bytes(b)))
        .map_err(|_| {
            format!(
                "catalog entry for table {name:?} is {} bytes, not 8",
                v.len()
            )
        })
}

/// The names in the catalog B-tree, in byte order, read through `pages`.
fn list_catalog<S: PageRead>(inner: &Inner, pages: S) -> Result<Vec<String>> {
    let catalog = BTree::open(inner.catalog_root, inner.config.page_size);
    let mut names = Vec::new();
    for row in catalog.range(pages, ..) {
        let (k, _) = row?;
        names.push(catalog_name(inner, k)?);
    }
    Ok(names)
}

/// A catalog key as a table name.
///
/// # Errors
///
/// [`Error::Format`] if it is not UTF-8.
pub(crate) fn catalog_name(inner: &Inner, k: Vec<u8>) -> Result<String> {
    String::from_utf8(k).map_err(|e| Error::Format {
        path: inner.writer.data_path().to_path_buf(),
        detail: format!(
            "catalog (B-tree at page {}) holds a table name that is not UTF-8: {:?}",
            inner.catalog_root,
            e.as_bytes()
        ),
    })
}

/// The root of table `name` at snapshot `snap` (`None`: no such table then).
///
/// # Errors
///
/// A catalog page cannot be read or is corrupt.
pub(crate) fn committed_root(inner: &Inner, snap: &Snapshot, name: &str) -> Result<Option<PageId>> {
    // A cached root serves snapshots at or after the commit it was known at (a drop takes
    // it out of the cache before its commit is published); older snapshots look it up.
    let cached = inner
        .catalog
        .read()
        .get(name)
        .filter(|c| c.since <= snap.lsn())
        .map(|c| c.root);
    match cached {
        Some(r) => Ok(Some(r)),
        None => lookup_catalog(inner, SnapReader::new(&inner.pool, snap), name),
    }
}

/// The value of `key` in `tree` at snapshot `snap` (an optimistic, latch-free descent when
/// the pages are resident; see [`BTree::get`]).
///
/// # Errors
///
/// A page cannot be read or is corrupt.
pub(crate) fn snapshot_get(
    pool: &BufferPool,
    snap: &Snapshot,
    tree: &BTree,
    key: &[u8],
) -> Result<Option<Vec<u8>>> {
    Ok(tree.get(&GetReader::new(pool, Some(snap)), key)?)
}

/// [`WriteTxn::list_tables`] of the exclusive writer: the catalog as it sees it.
pub(crate) fn list_tables_in_txn(inner: &Inner, ex: &Exclusive<'_>) -> Result<Vec<String>> {
    list_catalog(inner, TxnReader::new(&ex.txn, inner.config.page_size))
}

/// [`ReadTxn::list_tables`](crate::ReadTxn::list_tables): the catalog at a snapshot.
pub(crate) fn list_tables_committed(inner: &Inner, snap: &Snapshot) -> Result<Vec<String>> {
    list_catalog(inner, SnapReader::new(&inner.pool, snap))
}

/// Runs `op`, an operation that changes `txn`'s pages (a row's insert or remove, a table's
/// creation or drop), as a whole or not at all: if it fails after taking any page for writing,
/// the transaction is failed ([`PageTxn::fail`]) — its pages may hold part of `op` (half a
/// split, a value's overflow pages with no cell pointing to them, a catalog without the table
/// whose pages are not yet freed), and a commit would make that durable. Every later use of
/// the transaction, and its commit, is then an error that names `what` failed and why; only
/// the rollback remains. An `op` that fails before changing anything (a key too large, a page
/// that cannot be read on the way down) leaves the transaction usable.
pub(crate) fn whole<T>(txn: &PageTxn<'_>, what: &str, op: impl FnOnce() -> Result<T>) -> Result<T> {
    let before = txn.changes();
    let r = op();
    if let Err(e) = &r {
        if txn.changes() != before {
            txn.fail(format!("{what} failed: {e}"), e.is_too_large());
        }
    }
    r
}

/// [`WriteTxn::drop_table`] of the exclusive writer (or a concurrent one's commit): frees the
/// table's pages and removes its catalog entry, both in the transaction. Returns whether the
/// table existed.
pub(crate) fn drop_table(inner: &Inner, ex: &Exclusive<'_>, name: &str) -> Result<bool> {
    let ps = inner.config.page_size;
    let Some(root) = lookup_catalog(inner, TxnReader::new(&ex.txn, ps), name)? else {
        return Ok(false);
    };
    let mut pages = TxnPages::new(&ex.txn, inner.writer.data_path(), ps);
    whole(&ex.txn, "a table's drop", || {
        BTree::open(inner.catalog_root, ps).remove(&mut pages, name.as_bytes())?;
        BTree::open(root, ps).destroy(&mut pages)?;
        Ok(())
    })?;
    ex.created.borrow_mut().remove(name);
    ex.dropped.borrow_mut().insert(name.to_string());
    Ok(true)
}

/// The tree of table `name` as the exclusive transaction `ex` sees it; created (with the
/// transaction) when `create` is set and it does not exist, else [`Error::TableNotFound`].
///
/// # Errors
///
/// [`Error::TableNotFound`]; a catalog page cannot be read or is corrupt; creating the table
/// needs a page that cannot be allocated.
pub(crate) fn open_exclusive(
    inner: &Inner,
    ex: &Exclusive<'_>,
    name: &str,
    create: bool,
) -> Result<BTree> {
    let ps = inner.config.page_size;
    // The committed catalog cache does not know this transaction's drops.
    let dropped_here = ex.dropped.borrow().contains(name);
    let known = ex.created.borrow().get(name).copied().or_else(|| {
        if dropped_here {
            None
        } else {
            inner.catalog.read().get(name).map(|c| c.root)
        }
    });
    let root = match known {
        Some(r) => r,
        None => match lookup_catalog(inner, TxnReader::new(&ex.txn, ps), name)? {
            Some(r) => {
                if !dropped_here {
                    // The writer sees the newest commit (it holds the writer lock).
                    let since = inner.pool.latest_commit();
                    inner
                        .catalog
                        .write()
                        .insert(name.to_string(), CachedRoot { root: r, since });
                }
                r
            }
            None if !create => return Err(Error::TableNotFound(name.to_string())),
            None => {
                let file = inner.writer.data_path();
                let mut pages = TxnPages::new(&ex.txn, file, ps);
                let root = whole(&ex.txn, "a table's creation", || {
                    let root = BTree::create(&mut pages)?.root();
                    BTree::open(inner.catalog_root, ps).insert(
                        &mut pages,
                        name.as_bytes(),
                        &root.0.to_le_bytes(),
                    )?;
                    Ok(root)
                })?;
                ex.created.borrow_mut().insert(name.to_string(), root);
                root
            }
        },
    };
    Ok(BTree::open(root, ps))
}

/// A table inside a write transaction.
pub struct Table<'t, 's> {
    inner: &'t Inner,
    /// Its name (for errors).
    name: Arc<str>,
    of: TableOf<'t, 's>,
}

/// `old` (an 8-byte little-endian integer, or none: 0) plus `delta`, wrapping, as the bytes to
/// store under `key` of table `table`.
///
/// # Errors
///
/// [`Error::NotAnInteger`] when `old` is not 8 bytes.
pub(crate) fn add_to(table: &str, key: &[u8], old: Option<&[u8]>, delta: i64) -> Result<Vec<u8>> {
    let old = match old {
        None => 0,
        Some(v) => match <[u8; 8]>::try_from(v) {
            Ok(b) => i64::from_le_bytes(b),
            Err(_) => {
                return Err(Error::NotAnInteger {
                    table: table.to_string(),
                    key: key.iter().map(|b| format!("{b:02x}")).collect(),
                    len: v.len(),
                })
            }
        },
    };
    Ok(old.wrapping_add(delta).to_le_bytes().to_vec())
}

/// How a [`Table`] reaches its rows: the exclusive writer's page transaction and tree, or a
/// concurrent transaction's state and its entry there (its writes over the snapshot's tree).
enum TableOf<'t, 's> {
    Exclusive(&'t PageTxn<'s>, BTree),
    Optimistic(&'t Optimistic, usize),
}

impl<'t, 's> Table<'t, 's> {
    /// The table `name` as this transaction sees it; created (with the transaction) when
    /// `create` is set and it does not exist, else [`Error::TableNotFound`].
    pub(crate) fn open(tx: &'t WriteTxn<'s>, name: &str, create: bool) -> Result<Table<'t, 's>> {
        // A name is a catalog key: one too long is refused before anything is done (the
        // creation used to allocate the table's root first, so the catalog's refusal of the key
        // failed the whole transaction, in words about a key).
        let max = crate::max_key_len(tx.inner.config.page_size);
        if create && name.len() > max {
            return Err(Error::TableNameTooLong {
                len: name.len(),
                max,
            });
        }
        let of = match &tx.mode {
            Mode::Exclusive(ex) => {
                TableOf::Exclusive(&ex.txn, open_exclusive(tx.inner, ex, name, create)?)
            }
            Mode::Optimistic(o) => TableOf::Optimistic(o, o.open_table(tx.inner, name, create)?),
        };
        Ok(Table {
            inner: tx.inner,
            name: Arc::from(name),
            of,
        })
    }

    fn pages(txn: &'t PageTxn<'s>, inner: &'t Inner) -> TxnPages<'t, 's> {
        TxnPages::new(txn, inner.writer.data_path(), inner.config.page_size)
    }

    /// The value under `key` (this transaction's changes included).
    ///
    /// ```
    /// # fn main() -> keel::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = keel::Store::open(dir.path(), keel::Config::default())?;
    /// let tx = store.write()?;
    /// let mut t = tx.table("t")?;
    /// t.insert(b"k", b"v")?;
    /// assert_eq!(t.get(b"k")?, Some(b"v".to_vec()));
    /// assert_eq!(t.get(b"other")?, None);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// A page cannot be read or is corrupt (the error names the file and page).
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        match self.of {
            TableOf::Exclusive(txn, tree) => {
                Ok(tree.get(&TxnReader::new(txn, self.inner.config.page_size), key)?)
            }
            TableOf::Optimistic(o, i) => o.get(self.inner, i, key),
        }
    }

    /// The value under `key` (this transaction's changes included), borrowed: `f` runs on it
    /// and its result is returned; `None` if the key is absent (`f` is not called). Inside a
    /// write transaction this is [`get`](Self::get) handing its value to `f`; the borrowed
    /// fast path is [`ReadTable::get_with`].
    ///
    /// ```
    /// # fn main() -> keel::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = keel::Store::open(dir.path(), keel::Config::default())?;
    /// let tx = store.write()?;
    /// let mut t = tx.table("t")?;
    /// t.insert(b"k", b"value")?;
    /// assert_eq!(t.get_with(b"k", |v| v.len())?, Some(5));
    /// assert_eq!(t.get_with(b"other", |v| v.len())?, None);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`get`](Self::get): a page cannot be read or is corrupt (the error names the file
    /// and page); `f` is then not called.
    pub fn get_with<T>(&self, key: &[u8], f: impl FnOnce(&[u8]) -> T) -> Result<Option<T>> {
        Ok(self.get(key)?.map(|v| f(&v)))
    }

    /// Inserts or replaces; returns the previous value.
    ///
    /// ```
    /// # fn main() -> keel::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = keel::Store::open(dir.path(), keel::Config::default())?;
    /// let tx = store.write()?;
    /// let mut t = tx.table("t")?;
    /// assert_eq!(t.insert(b"k", b"1")?, None);
    /// assert_eq!(t.insert(b"k", b"2")?, Some(b"1".to_vec()));
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::KeyTooLarge`] above [`crate::max_key_len`], [`Error::ValueTooLarge`] above
    /// [`crate::MAX_VALUE_LEN`], [`Error::ValueTooLargeForPool`] for a value whose overflow
    /// pages alone the pool cannot give one transaction (these three change nothing); a page
    /// cannot be read, is corrupt, or cannot be allocated; the transaction holds more pages
    /// than the pool lets one transaction hold. In a concurrent transaction, as
    /// [`remove`](Self::remove), [`Error::NotAnInteger`] over a pending addition that cannot
    /// apply.
    pub fn insert(&mut self, key: &[u8], value: &[u8]) -> Result<Option<Vec<u8>>> {
        match self.of {
            TableOf::Exclusive(txn, tree) => {
                // A row that can never fit is refused before anything changes: the transaction
                // goes on (else the chain's allocation would fail it part-way).
                crate::row_limits::check_row(self.inner, key, value)?;
                whole(txn, "an insert", || {
                    Ok(tree.insert(&mut Self::pages(txn, self.inner), key, value)?)
                })
            }
            TableOf::Optimistic(o, i) => o.put(self.inner, i, key, Some(value)),
        }
    }

    /// Adds `delta` (wrapping) to the signed 64-bit integer stored under `key` as 8
    /// little-endian bytes; a missing row counts as 0 and is created. In a concurrent
    /// transaction ([`Store::write_concurrent`](crate::Store::write_concurrent)) the addition
    /// reads nothing: it is applied to the newest value at commit, so two transactions adding
    /// to one row (a running total) do not conflict (FoundationDB's atomic add). Reading the
    /// row in the same transaction afterwards reads it (and that read is validated as any).
    ///
    /// ```
    /// # fn main() -> keel::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = keel::Store::open(dir.path(), keel::Config::default())?;
    /// let tx = store.write()?;
    /// tx.table("totals")?; // the table exists before the concurrent transactions start
    /// tx.commit()?;
    /// let a = store.write_concurrent()?;
    /// let b = store.write_concurrent()?;
    /// a.table("totals")?.add_i64(b"ytd", 5)?;
    /// b.table("totals")?.add_i64(b"ytd", 7)?;
    /// a.commit()?;
    /// b.commit()?; // no conflict: neither read the total
    /// let r = store.read()?;
    /// assert_eq!(r.table("totals")?.get(b"ytd")?, Some(12i64.to_le_bytes().to_vec()));
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::NotAnInteger`] when the value under `key` is not 8 bytes: at once in the
    /// exclusive writer; at commit in a concurrent transaction (then nothing of it is
    /// committed), or at once if the transaction wrote the row itself. [`Error::KeyTooLarge`];
    /// a page cannot be read, is corrupt, or cannot be allocated.
    pub fn add_i64(&mut self, key: &[u8], delta: i64) -> Result<()> {
        match self.of {
            TableOf::Exclusive(txn, tree) => {
                let ps = self.inner.config.page_size;
                let old = tree.get(&TxnReader::new(txn, ps), key)?;
                let name = self.name.clone();
                let new = add_to(&name, key, old.as_deref(), delta)?;
                whole(txn, "an add", || {
                    tree.insert(&mut Self::pages(txn, self.inner), key, &new)?;
                    Ok(())
                })
            }
            TableOf::Optimistic(o, i) => o.add(self.inner, i, key, delta),
        }
    }

    /// Removes `key`; returns its value.
    ///
    /// ```
    /// # fn main() -> keel::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = keel::Store::open(dir.path(), keel::Config::default())?;
    /// let tx = store.write()?;
    /// let mut t = tx.table("t")?;
    /// t.insert(b"k", b"v")?;
    /// assert_eq!(t.remove(b"k")?, Some(b"v".to_vec()));
    /// assert_eq!(t.remove(b"k")?, None);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// A page cannot be read or is corrupt. In a concurrent transaction,
    /// [`Error::NotAnInteger`] when the row has a pending [`add_i64`](Self::add_i64) of this
    /// transaction that cannot apply (the value returned would be its result); the row keeps
    /// the addition, and the commit fails with the same error.
    pub fn remove(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        match self.of {
            TableOf::Exclusive(txn, tree) => whole(txn, "a remove", || {
                Ok(tree.remove(&mut Self::pages(txn, self.inner), key)?)
            }),
            TableOf::Optimistic(o, i) => o.put(self.inner, i, key, None),
        }
    }

    /// The number of rows, this transaction's changes included. It walks every node of the
    /// table once (no values are copied): O(pages), not O(1).
    ///
    /// # Errors
    ///
    /// A page cannot be read or is corrupt (the error names the file and page).
    pub fn len(&self) -> Result<u64> {
        match self.of {
            TableOf::Exclusive(txn, tree) => {
                Ok(tree.len(&TxnReader::new(txn, self.inner.config.page_size))?)
            }
            TableOf::Optimistic(..) => {
                let mut n = 0u64;
                for row in self.range(..)? {
                    row?;
                    n = n.saturating_add(1);
                }
                Ok(n)
            }
        }
    }

    /// Whether the table has no rows.
    ///
    /// # Errors
    ///
    /// As [`len`](Self::len).
    pub fn is_empty(&self) -> Result<bool> {
        Ok(self.range(..)?.next().transpose()?.is_none())
    }

    /// Ordered iteration over a key range (`.rev()` for descending).
    ///
    /// ```
    /// # fn main() -> keel::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = keel::Store::open(dir.path(), keel::Config::default())?;
    /// let tx = store.write()?;
    /// let mut t = tx.table("t")?;
    /// for k in [b"a", b"b", b"c"] {
    ///     t.insert(k, b"")?;
    /// }
    /// let keys: Vec<Vec<u8>> = t.range(b"b".as_slice()..)?.map(|r| r.map(|(k, _)| k)).collect::<keel::Result<_>>()?;
    /// assert_eq!(keys, [b"b".to_vec(), b"c".to_vec()]);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// None when the cursor is made; each row is a `Result` (a page that cannot be read or is
    /// corrupt).
    pub fn range<'k, R: RangeBounds<&'k [u8]>>(&self, range: R) -> Result<Rows<'t>> {
        match self.of {
            TableOf::Exclusive(txn, tree) => Ok(Rows(RowsOf::Txn(
                tree.range(TxnReader::new(txn, self.inner.config.page_size), range),
            ))),
            TableOf::Optimistic(o, i) => {
                Ok(Rows(RowsOf::Merged(Box::new(self.merged(o, i, range)))))
            }
        }
    }

    /// A concurrent transaction's scan of this table.
    fn merged<'k, R: RangeBounds<&'k [u8]>>(
        &self,
        o: &'t Optimistic,
        i: usize,
        range: R,
    ) -> Merged<'t> {
        let base = o.tables.borrow().get(i).and_then(Pending::visible_base);
        Merged::over(o, self.inner, Some(i), base, range)
    }

    /// A forward cursor over a key range with borrowed rows (this transaction's view): the fast
    /// path for forward scans. See [`Cursor`].
    ///
    /// ```
    /// # fn main() -> keel::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let store = keel::Store::open(dir.path(), keel::Config::default())?;
    /// let tx = store.write()?;
    /// let mut t = tx.table("t")?;
    /// t.insert(b"a", b"1")?;
    /// t.insert(b"b", b"2")?;
    /// let mut c = t.cursor(..)?;
    /// let mut sum = 0;
    /// while let Some((_k, v)) = c.next()? {
    ///     sum += v.len();
    /// }
    /// assert_eq!(sum, 2);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// A page on the way to the first row cannot be read or is corrupt.
    pub fn cursor<'k, R: RangeBounds<&'k [u8]>>(&self, range: R) -> Result<Cursor<'t>> {
        match self.of {
            TableOf::Exclusive(txn, tree) => Ok(Cursor(CursorOf::Txn(
                tree.cursor(TxnReader::new(txn, self.inner.config.page_size), range)?,
            ))),
            TableOf::Optimistic(o, i) => Ok(Cursor(CursorOf::Merged(
                Box::new(self.merged(o, i, range)),
                None,
            ))),
        }
    }
}

/// A table in a read transaction (at its snapshot).
pub struct ReadTable<'r> {
    pool: &'r BufferPool,
    snap: &'r Snapshot,
    tree: BTree,
}

impl<'r> ReadTable<'r> {
    pub(crate) fn open(inner: &'r Inner, snap: &'r Snapshot, name: &str) -> Result<ReadTable<'r>> {
        let Some(root) = committed_root(inner, snap, name)? else {
            return Err(Error::TableNotFound(name.to_string()));
        };
        Ok(ReadTable {
            pool: &inner.pool,
            snap,
            tree: BTree::open(root, inner.config.page_size),
        })
    }

    /// The committed value under `key` (an optimistic, latch-free descent when the pages are
    /// resident; see [`BTree::get`]).
    ///
    /// # Errors
    ///
    /// A page cannot be read or is corrupt (the error names the file and page).
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        snapshot_get(self.pool, self.snap, &self.tree, key)
    }

    /// The committed value under `key`, borrowed: `f` runs on the value and its result is
    /// returned; `None` if the key is absent at this transaction's snapshot (`f` is not
    /// called). Nothing is allocated for an inline value of up to
    /// [`GET_WITH_INLINE`](crate::GET_WITH_INLINE) bytes on resident pages: it is copied to the stack
    /// from an optimistic, latch-free descent (as [`get`](Self::get) does, which copies it
    /// into a new vector); a longer value, one in overflow pages, or one read through the
    /// latched path is read into a vector first. `f` runs after every page was let go, so it
    /// may use the store.
    ///
    /// ```
    /// # fn main() -> keel::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = keel::Store::open(dir.path(), keel::Config::default())?;
    /// let tx = store.write()?;
    /// tx.table("t")?.insert(b"k", b"12345")?;
    /// tx.commit()?;
    /// let r = store.read()?;
    /// let t = r.table("t")?;
    /// assert_eq!(t.get_with(b"k", |v| v.len())?, Some(5));
    /// assert_eq!(t.get_with(b"k", |v| v == b"12345")?, Some(true));
    /// assert_eq!(t.get_with(b"absent", |v| v.len())?, None);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`get`](Self::get): a page cannot be read or is corrupt (the error names the file
    /// and page), or the snapshot was revoked ([`Error::SnapshotTooOld`]); `f` is then not
    /// called.
    pub fn get_with<T>(&self, key: &[u8], f: impl FnOnce(&[u8]) -> T) -> Result<Option<T>> {
        Ok(self
            .tree
            .get_with(&GetReader::new(self.pool, Some(self.snap)), key, f)?)
    }

    /// The number of committed rows. It walks every node of the table once (no values are
    /// copied): O(pages), not O(1).
    ///
    /// # Errors
    ///
    /// A page cannot be read or is corrupt (the error names the file and page).
    pub fn len(&self) -> Result<u64> {
        Ok(self.tree.len(&SnapReader::new(self.pool, self.snap))?)
    }

    /// Whether the table has no rows.
    ///
    /// # Errors
    ///
    /// As [`len`](Self::len).
    pub fn is_empty(&self) -> Result<bool> {
        Ok(self.range(..)?.next().transpose()?.is_none())
    }

    /// Ordered iteration over a key range (`.rev()` for descending).
    ///
    /// # Errors
    ///
    /// None when the cursor is made; each row is a `Result` (a page that cannot be read or is
    /// corrupt).
    pub fn range<'k, R: RangeBounds<&'k [u8]>>(&self, range: R) -> Result<Rows<'r>> {
        Ok(Rows(RowsOf::Pool(
            self.tree
                .range(SnapReader::new(self.pool, self.snap), range),
        )))
    }

    /// A forward cursor over a key range with borrowed rows: the fast path for forward scans
    /// (one descent, then leaf to leaf, no allocation per row). See [`Cursor`].
    ///
    /// ```
    /// # fn main() -> keel::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let store = keel::Store::open(dir.path(), keel::Config::default())?;
    /// let tx = store.write()?;
    /// tx.table("t")?.insert(b"k", b"v")?;
    /// tx.commit()?;
    /// let r = store.read()?;
    /// let t = r.table("t")?;
    /// let mut c = t.cursor(b"a".as_slice()..b"z".as_slice())?;
    /// assert_eq!(c.next()?, Some((b"k".as_slice(), b"v".as_slice())));
    /// assert_eq!(c.next()?, None);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// A page on the way to the first row cannot be read or is corrupt.
    pub fn cursor<'k, R: RangeBounds<&'k [u8]>>(&self, range: R) -> Result<Cursor<'r>> {
        Ok(Cursor(CursorOf::Pool(
            self.tree
                .cursor(SnapReader::new(self.pool, self.snap), range)?,
        )))
    }
}

/// A read handle on the committed pages of one snapshot (a read transaction's tables, the
/// store check): the page as of the snapshot, from the pool or from the version store.
#[derive(Clone, Copy)]
pub(crate) struct SnapReader<'a> {
    pool: &'a BufferPool,
    snap: &'a Snapshot,
}

impl<'a> SnapReader<'a> {
    /// Reads `pool`'s pages as of `snap`.
    pub(crate) fn new(pool: &'a BufferPool, snap: &'a Snapshot) -> SnapReader<'a> {
        SnapReader { pool, snap }
    }
}

impl PageRead for SnapReader<'_> {
    fn page_size(&self) -> usize {
        self.pool.page_size()
    }

    fn read<R>(&self, id: PageId, f: impl FnOnce(&[u8]) -> R) -> keel_btree::Result<R> {
        let g = self.pool.read_at(id, self.snap).map_err(storage)?;
        Ok(f(&g))
    }

    fn prefetch(&self, ids: &[PageId]) {
        // A hint: a page that fails here is reported by the read that needs it.
        let _ = self.pool.prefetch(ids);
    }
}

/// Optimistic (latch-free) page reads through the pool where the page is resident, latched
/// ones otherwise: at a snapshot (a read transaction's or a concurrent transaction's gets), or
/// of the newest commit (`snap: None`: a concurrent transaction's validation under the writer
/// lock, before its apply changes anything, so no page changes meanwhile but by the holder).
/// Hits are counted here and added to the pool's once, when the reader is dropped (one counter
/// update per operation instead of one per level).
pub(crate) struct GetReader<'a> {
    pool: &'a BufferPool,
    snap: Option<&'a Snapshot>,
    hits: Cell<u64>,
}

impl<'a> GetReader<'a> {
    /// Reads `pool`'s pages at `snap`, or as they are with `None`.
    pub(crate) fn new(pool: &'a BufferPool, snap: Option<&'a Snapshot>) -> GetReader<'a> {
        GetReader {
            pool,
            snap,
            hits: Cell::new(0),
        }
    }
}

impl Drop for GetReader<'_> {
    fn drop(&mut self) {
        self.pool.add_optimistic_hits(self.hits.get());
    }
}

impl PageRead for GetReader<'_> {
    fn page_size(&self) -> usize {
        self.pool.page_size()
    }

    fn read<R>(&self, id: PageId, f: impl FnOnce(&[u8]) -> R) -> keel_btree::Result<R> {
        match self.snap {
            Some(snap) => {
                let g = self.pool.read_at(id, snap).map_err(storage)?;
                Ok(f(&g))
            }
            None => {
                let g = self.pool.read(id).map_err(storage)?;
                Ok(f(&g))
            }
        }
    }

    #[inline]
    fn read_optimistic<R>(
        &self,
        id: PageId,
        f: impl FnOnce(&[AtomicU64]) -> R,
    ) -> Option<(R, ReadToken)> {
        let (r, t) = match self.snap {
            Some(snap) => self.pool.read_optimistic_at(id, snap, f)?,
            None => self.pool.read_optimistic(id, f)?,
        };
        self.hits.set(self.hits.get() + 1);
        Some((r, ReadToken(t.to_bits())))
    }

    #[inline]
    fn is_unchanged(&self, token: ReadToken) -> bool {
        self.pool.is_unchanged(OptimisticToken::from_bits(token.0))
    }
}

/// What a write table and a read table both do: point reads and ordered range scans. Code that
/// only reads takes `&impl ReadableTable` and works inside either kind of transaction (as
/// redb's `ReadableTable` does).
pub trait ReadableTable {
    /// The value under `key`: committed data in a read transaction, this transaction's view in
    /// a write transaction.
    ///
    /// # Errors
    ///
    /// A page cannot be read or is corrupt (the error names the file and page).
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>>;

    /// The value under `key`, borrowed by `f` (whose result is returned); `None` if absent.
    /// See [`ReadTable::get_with`] and [`Table::get_with`].
    ///
    /// # Errors
    ///
    /// A page cannot be read or is corrupt (the error names the file and page); `f` is then
    /// not called.
    fn get_with<T>(&self, key: &[u8], f: impl FnOnce(&[u8]) -> T) -> Result<Option<T>>;

    /// A forward cursor over a key range with borrowed rows (see [`Cursor`]).
    ///
    /// # Errors
    ///
    /// A page on the way to the first row cannot be read or is corrupt.
    fn cursor<'k, R: RangeBounds<&'k [u8]>>(&self, range: R) -> Result<Cursor<'_>>;

    /// Ordered iteration over a key range (`.rev()` for descending).
    ///
    /// # Errors
    ///
    /// A page cannot be read or is corrupt (each row is also a `Result`).
    fn range<'k, R: RangeBounds<&'k [u8]>>(&self, range: R) -> Result<Rows<'_>>;

    /// The number of rows (a walk over the table's nodes, no values copied).
    ///
    /// # Errors
    ///
    /// A page cannot be read or is corrupt.
    fn len(&self) -> Result<u64>;

    /// Whether the table has no rows.
    ///
    /// # Errors
    ///
    /// A page cannot be read or is corrupt.
    fn is_empty(&self) -> Result<bool> {
        Ok(self.range(..)?.next().transpose()?.is_none())
    }
}

impl ReadableTable for Table<'_, '_> {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Table::get(self, key)
    }

    fn get_with<T>(&self, key: &[u8], f: impl FnOnce(&[u8]) -> T) -> Result<Option<T>> {
        Table::get_with(self, key, f)
    }

    fn cursor<'k, R: RangeBounds<&'k [u8]>>(&self, range: R) -> Result<Cursor<'_>> {
        Table::cursor(self, range)
    }

    fn range<'k, R: RangeBounds<&'k [u8]>>(&self, range: R) -> Result<Rows<'_>> {
        Table::range(self, range)
    }

    fn len(&self) -> Result<u64> {
        Table::len(self)
    }
}

impl ReadableTable for ReadTable<'_> {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        ReadTable::get(self, key)
    }

    fn get_with<T>(&self, key: &[u8], f: impl FnOnce(&[u8]) -> T) -> Result<Option<T>> {
        ReadTable::get_with(self, key, f)
    }

    fn cursor<'k, R: RangeBounds<&'k [u8]>>(&self, range: R) -> Result<Cursor<'_>> {
        ReadTable::cursor(self, range)
    }

    fn range<'k, R: RangeBounds<&'k [u8]>>(&self, range: R) -> Result<Rows<'_>> {
        ReadTable::range(self, range)
    }

    fn len(&self) -> Result<u64> {
        ReadTable::len(self)
    }
}

/// Rows of a range, in key order; `.rev()` for descending.
pub struct Rows<'r>(RowsOf<'r>);

/// The cursor behind [`Rows`]: through a write transaction's pages or through the pool.
enum RowsOf<'r> {
    Txn(Range<TxnReader<'r, 'r>>),
    Pool(Range<SnapReader<'r>>),
    Merged(Box<Merged<'r>>),
}

impl Iterator for Rows<'_> {
    type Item = Result<(Vec<u8>, Vec<u8>)>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        match &mut self.0 {
            RowsOf::Txn(r) => r.next().map(|r| r.map_err(Error::from)),
            RowsOf::Pool(r) => r.next().map(|r| r.map_err(Error::from)),
            RowsOf::Merged(m) => m.next_row().transpose(),
        }
    }
}

impl DoubleEndedIterator for Rows<'_> {
    #[inline]
    fn next_back(&mut self) -> Option<Self::Item> {
        match &mut self.0 {
            RowsOf::Txn(r) => r.next_back().map(|r| r.map_err(Error::from)),
            RowsOf::Pool(r) => r.next_back().map(|r| r.map_err(Error::from)),
            RowsOf::Merged(m) => m.next_back_row().transpose(),
        }
    }
}
