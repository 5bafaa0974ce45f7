//! A concurrent write transaction ([`Store::write_concurrent`](crate::Store::write_concurrent)):
//! what it sees, where its writes wait, and its commit (validate, then apply).
//!
//! The protocol (docs/design.md, "Concurrent writers"; Silo's and FoundationDB's optimistic
//! scheme at row granularity): the transaction reads at a snapshot of the newest commit, plus
//! its own writes, which stay in a private write set; every read of committed data goes into
//! its read set (`read_set.rs`). At commit it takes the writer lock, checks that each read
//! still gives the same answer at the newest commit ([`Error::Conflict`] if not: nothing was
//! applied, run the transaction again), and applies the write set through the same page path
//! the exclusive writer uses — so the redo, the page versions for snapshots, the WAL rule and
//! no-steal are exactly the single writer's. Only the writer lock's holder changes pages.
//!
//! # Invariants
//!
//! 1. **No page changes before commit**: a concurrent transaction never writes a page while it
//!    runs (it holds no page and no lock), so nothing of it can reach a reader, the log or the
//!    disk before its validation passed (`tests/concurrent.rs`: a reader and another
//!    transaction never see an uncommitted write).
//! 2. **Serializable**: the transaction commits only if its read set validates at the newest
//!    commit under the writer lock, and it applies its writes under that same hold, so it
//!    takes effect at one point after every commit it was checked against
//!    (`tests/concurrent.rs`'s seeded model of interleaved transactions predicts each commit
//!    and each conflict; skipping validation fails it).
//! 3. **Its view is the snapshot plus its writes**: a key it wrote reads its write (a removal
//!    reads as absent); a table it dropped has no committed rows in its view; scans merge the
//!    two in key order (`merged.rs`).

use crate::merged::Merged;
use crate::read_set::{Checked, ReadSet, TreeRef};
use crate::recent_writes::Written;
use crate::row_limits;
use crate::store::Inner;
use crate::table::{self, GetReader, SnapReader, TxnPages, TxnReader};
use crate::txn::Exclusive;
use crate::{Error, Result};
use keel_btree::BTree;
use keel_buffer_pool::Snapshot;
use keel_page::PageId;
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// One table as a concurrent transaction sees it.
pub(crate) struct Pending {
    pub(crate) name: Arc<str>,
    /// Its root at the snapshot (`None`: there was no such table).
    pub(crate) base: Option<PageId>,
    /// The transaction dropped the snapshot's table (the drop is applied before anything else
    /// of this table at commit).
    pub(crate) drop_base: bool,
    /// The transaction created the table (after dropping it, or where there was none).
    pub(crate) created: bool,
    /// Rows written: `None` is a removal.
    pub(crate) writes: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    /// Additions to 64-bit integer rows not in `writes` (the two never share a key): applied
    /// to the newest value at commit, with no read recorded ([`Table::add_i64`](crate::Table::add_i64)).
    pub(crate) adds: BTreeMap<Vec<u8>, i64>,
}

impl Pending {
    /// Whether the table exists in the transaction's view.
    pub(crate) fn exists(&self) -> bool {
        self.created || (self.base.is_some() && !self.drop_base)
    }

    /// The snapshot's table under the writes, unless the transaction dropped it.
    pub(crate) fn visible_base(&self) -> Option<TreeRef> {
        match (self.base, self.drop_base) {
            (Some(root), false) => Some(TreeRef {
                root,
                table: Some(self.name.clone()),
            }),
            _ => None,
        }
    }
}

/// The state of a concurrent write transaction.
pub(crate) struct Optimistic {
    pub(crate) snap: Snapshot,
    pub(crate) tables: RefCell<Vec<Pending>>,
    by_name: RefCell<HashMap<String, usize>>,
    pub(crate) reads: RefCell<ReadSet>,
}

impl Optimistic {
    /// A transaction at a snapshot of the newest commit.
    pub(crate) fn new(inner: &Inner) -> Optimistic {
        Optimistic {
            snap: inner.pool.snapshot(),
            tables: RefCell::new(Vec::new()),
            by_name: RefCell::new(HashMap::new()),
            reads: RefCell::new(ReadSet::new(inner.digest_keys.clone())),
        }
    }

    fn catalog_ref(inner: &Inner) -> TreeRef {
        TreeRef {
            root: inner.catalog_root,
            table: None,
        }
    }

    /// The index of `name`'s entry; the first access looks the table up at the snapshot and
    /// records the lookup (read-set invariant 2: before any read of its rows).
    fn pending(&self, inner: &Inner, name: &str) -> Result<usize> {
        if let Some(&i) = self.by_name.borrow().get(name) {
            return Ok(i);
        }
        let base = table::committed_root(inner, &self.snap, name)?;
        let entry = base.map(|r| r.0.to_le_bytes());
        self.reads.borrow_mut().key(
            Self::catalog_ref(inner),
            name.as_bytes(),
            entry.as_ref().map(|b| b.as_slice()),
        );
        let mut tables = self.tables.borrow_mut();
        tables.push(Pending {
            name: Arc::from(name),
            base,
            drop_base: false,
            created: false,
            writes: BTreeMap::new(),
            adds: BTreeMap::new(),
        });
        let i = tables.len() - 1;
        self.by_name.borrow_mut().insert(name.to_string(), i);
        Ok(i)
    }

    /// `WriteTxn::table` / `existing_table`: the entry of `name`, created in the transaction's
    /// view when `create` is set and it does not exist.
    pub(crate) fn open_table(&self, inner: &Inner, name: &str, create: bool) -> Result<usize> {
        let i = self.pending(inner, name)?;
        let mut tables = self.tables.borrow_mut();
        let p = tables
            .get_mut(i)
            .ok_or_else(|| Error::TableNotFound(name.to_string()))?;
        if !p.exists() {
            if !create {
                return Err(Error::TableNotFound(name.to_string()));
            }
            p.created = true;
        }
        Ok(i)
    }

    /// `WriteTxn::drop_table`: whether it existed in the transaction's view.
    pub(crate) fn drop_table(&self, inner: &Inner, name: &str) -> Result<bool> {
        let i = self.pending(inner, name)?;
        let mut tables = self.tables.borrow_mut();
        let Some(p) = tables.get_mut(i) else {
            return Ok(false);
        };
        if !p.exists() {
            return Ok(false);
        }
        if p.base.is_some() {
            p.drop_base = true;
        }
        p.created = false;
        p.writes.clear();
        p.adds.clear();
        Ok(true)
    }

    /// `WriteTxn::list_tables`: the catalog at the snapshot (recorded as one scanned range),
    /// with the transaction's creations and drops.
    pub(crate) fn list_tables(&self, inner: &Inner) -> Result<Vec<String>> {
        let mut names = Vec::new();
        let mut scan = Merged::over(self, inner, None, Some(Self::catalog_ref(inner)), ..);
        while let Some((k, _)) = scan.next_row()? {
            names.push(table::catalog_name(inner, k)?);
        }
        drop(scan);
        let tables = self.tables.borrow();
        let by_name = self.by_name.borrow();
        names.retain(|n| {
            by_name
                .get(n)
                .and_then(|&i| tables.get(i))
                .is_none_or(Pending::exists)
        });
        for p in tables.iter() {
            if p.created && p.base.is_none_or(|_| p.drop_base) {
                names.push(p.name.to_string());
            }
        }
        names.sort();
        names.dedup();
        Ok(names)
    }

    /// The value of `key` in table `i` as the transaction sees it; a read of committed data is
    /// recorded.
    pub(crate) fn get(&self, inner: &Inner, i: usize, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let (base, add) = {
            let tables = self.tables.borrow();
            let Some(p) = tables.get(i) else {
                return Ok(None);
            };
            if let Some(w) = p.writes.get(key) {
                return Ok(w.clone());
            }
            // The table's name only for a pending addition (its error names the table).
            (
                p.visible_base(),
                p.adds.get(key).map(|&d| (d, p.name.clone())),
            )
        };
        let v = match base {
            Some(tree) => {
                let v = table::snapshot_get(
                    &inner.pool,
                    &self.snap,
                    &BTree::open(tree.root, inner.config.page_size),
                    key,
                )?;
                self.reads.borrow_mut().key(tree, key, v.as_deref());
                v
            }
            None => None,
        };
        match add {
            // The pending addition over the snapshot's value (which the read now pins).
            Some((delta, name)) => Ok(Some(table::add_to(&name, key, v.as_deref(), delta)?)),
            None => Ok(v),
        }
    }

    /// Adds `delta` to the 64-bit integer under `key` in table `i` without reading it (see
    /// [`Table::add_i64`](crate::Table::add_i64)).
    ///
    /// # Errors
    ///
    /// [`Error::KeyTooLarge`]; [`Error::NotAnInteger`] when the transaction's own value under
    /// `key` is not an 8-byte integer.
    pub(crate) fn add(&self, inner: &Inner, i: usize, key: &[u8], delta: i64) -> Result<()> {
        row_limits::check_key(inner, key)?;
        let mut tables = self.tables.borrow_mut();
        let Some(p) = tables.get_mut(i) else {
            return Ok(());
        };
        if let Some(w) = p.writes.get_mut(key) {
            // The transaction's own value (or removal): add to it now.
            let new = table::add_to(&p.name, key, w.as_deref(), delta)?;
            *w = Some(new);
            return Ok(());
        }
        let e = p.adds.entry(key.to_vec()).or_insert(0);
        *e = e.wrapping_add(delta);
        Ok(())
    }

    /// Writes `value` (`None`: removes) under `key` in table `i`; returns the previous value.
    pub(crate) fn put(
        &self,
        inner: &Inner,
        i: usize,
        key: &[u8],
        value: Option<&[u8]>,
    ) -> Result<Option<Vec<u8>>> {
        match value {
            Some(v) => row_limits::check_row(inner, key, v)?,
            // A key too long for the store's pages is in no commit and in no write of this
            // transaction: its removal removes nothing (as in the exclusive writer).
            None if row_limits::check_key(inner, key).is_err() => return Ok(None),
            None => {}
        }
        let old = self.get(inner, i, key)?;
        if value.is_none() && old.is_none() {
            return Ok(None);
        }
        if let Some(p) = self.tables.borrow_mut().get_mut(i) {
            // `old` included any pending addition; the write replaces it.
            p.adds.remove(key);
            p.writes.insert(key.to_vec(), value.map(<[u8]>::to_vec));
        }
        Ok(old)
    }

    /// The commit's first half, under the writer lock: validate the read set at the newest
    /// commit, then apply the writes through an exclusive page transaction, which the caller
    /// commits; with the time the lock was taken and what the commit writes, for the recent
    /// commits' record (`None` when it creates or drops a table: opaque, `recent_writes.rs`).
    ///
    /// # Errors
    ///
    /// [`Error::Conflict`] if a read no longer holds; any error of applying the writes (a
    /// page that cannot be read or allocated, a transaction larger than the pool allows).
    pub(crate) fn validate_and_apply(self, inner: &Inner) -> Result<Applied<'_>> {
        let Optimistic {
            snap,
            tables,
            by_name: _,
            reads,
        } = self;
        let snapshot = snap.lsn();
        // The snapshot is not needed past this point; dropping it first lets the apply skip
        // keeping page versions for it.
        drop(snap);
        let mut tables = tables.into_inner();
        tables.sort_by(|a, b| a.name.cmp(&b.name));
        // What the commit will write, hashed before the lock is taken (recent_writes.rs
        // invariant 2: every row of the write set; a creation or drop makes it opaque).
        let opaque = tables.iter().any(|p| p.drop_base || p.created);
        let written = (!opaque).then(|| {
            let mut w = Written::default();
            if !knob_on!(inner, forget_recent_writes) {
                for p in tables.iter().filter(|p| p.exists()) {
                    let mut keys: Vec<&[u8]> = p.writes.keys().map(Vec::as_slice).collect();
                    if !p.adds.is_empty() {
                        // Disjoint from the writes' keys; the record wants one key order.
                        keys.extend(p.adds.keys().map(Vec::as_slice));
                        keys.sort_unstable();
                    }
                    w.add_table(&inner.digest_keys, &p.name, keys.into_iter());
                }
            }
            w.finish()
        });
        // The leaves the writes will change, copied before the lock (the pool's module
        // `txn::precopy`: a copy is used only if the page is unchanged when the apply takes it).
        let copies = copy_leaves(inner, &tables, snapshot);
        let ex = inner.begin_exclusive("WriteTxn::commit")?;
        let since = std::time::Instant::now();
        ex.txn.offer_copies(copies);
        let ps = inner.config.page_size;
        // Nothing committed since the snapshot: every read still holds.
        let skip = knob_on!(inner, skip_validation);
        let latest = inner.pool.latest_commit();
        if !skip && latest != snapshot {
            let recent = inner.recent.lock();
            let window = recent.window(snapshot, latest);
            // Nothing is applied yet: the pool's pages are the newest commit's.
            let mut checked = Checked::default();
            let valid = reads.borrow().validate(
                &GetReader::new(&inner.pool, None),
                ps,
                snapshot,
                window.as_ref(),
                &mut checked,
            );
            inner.count_validation(window.is_some(), checked);
            valid?;
        }
        let file = inner.writer.data_path();
        for p in &tables {
            if p.drop_base {
                table::drop_table(inner, &ex, &p.name)?;
            }
            if p.exists() && (p.created || !p.writes.is_empty() || !p.adds.is_empty()) {
                let tree = table::open_exclusive(inner, &ex, &p.name, true)?;
                let mut pages = TxnPages::new(&ex.txn, file, ps);
                for (k, v) in &p.writes {
                    match v {
                        Some(v) => tree.insert(&mut pages, k, v)?,
                        None => tree.remove(&mut pages, k)?,
                    };
                }
                // Additions apply to the newest value (nothing was read for them).
                for (k, &delta) in &p.adds {
                    let old = tree.get(&TxnReader::new(&ex.txn, ps), k)?;
                    let new = table::add_to(&p.name, k, old.as_deref(), delta)?;
                    tree.insert(&mut pages, k, &new)?;
                }
            }
        }
        Ok(Applied {
            ex,
            since,
            written,
            leftovers: Leftovers {
                _reads: reads,
                _tables: tables,
            },
        })
    }

    /// A reader of the snapshot's pages.
    pub(crate) fn snap_reader<'a>(&'a self, inner: &'a Inner) -> SnapReader<'a> {
        SnapReader::new(&inner.pool, &self.snap)
    }
}

/// Copies of the committed leaves that `tables`' writes and additions will change, as far as
/// the newest committed tree tells before the writer lock is taken: a hint, so anything that
/// fails (a table not in the catalog cache, a page that cannot be read) is skipped; the apply
/// copies what is missing or stale itself. Only leaves no commit changed since `snapshot`
/// are copied: one changed while the transaction ran is likely to change again before the
/// lock is taken, and its copy would be wasted.
fn copy_leaves(
    inner: &Inner,
    tables: &[Pending],
    snapshot: keel_page::Lsn,
) -> Vec<keel_buffer_pool::CommittedCopy> {
    let ps = inner.config.page_size;
    let reader = GetReader::new(&inner.pool, None);
    let mut leaves: Vec<PageId> = Vec::new();
    for p in tables.iter().filter(|p| p.exists() && !p.created) {
        if p.writes.is_empty() && p.adds.is_empty() {
            continue;
        }
        let Some(root) = inner.catalog.read().get(&*p.name).map(|c| c.root) else {
            continue;
        };
        let tree = BTree::open(root, ps);
        for key in p.writes.keys().chain(p.adds.keys()) {
            if let Ok(leaf) = tree.leaf_for(&reader, key) {
                leaves.push(leaf);
            }
        }
    }
    leaves.sort_unstable();
    leaves.dedup();
    leaves
        .into_iter()
        .filter_map(|id| inner.pool.copy_committed(id, snapshot))
        .collect()
}

/// [`Error::KeyTooLarge`] for a key longer than the store's page size allows.
/// A validated and applied concurrent transaction, ready to commit.
pub(crate) struct Applied<'a> {
    /// The page transaction holding its writes, under the writer lock.
    pub(crate) ex: Exclusive<'a>,
    /// When the writer lock was taken.
    pub(crate) since: std::time::Instant,
    /// What it wrote (`None`: opaque), for [`RecentWrites`](crate::recent_writes::RecentWrites).
    pub(crate) written: Option<Written>,
    /// Its read and write sets, to be dropped after the writer lock is released (freeing
    /// them is a few percent of the hold).
    pub(crate) leftovers: Leftovers,
}

/// A concurrent transaction's read and write sets after its apply: only dropped.
pub(crate) struct Leftovers {
    _reads: RefCell<ReadSet>,
    _tables: Vec<Pending>,
}
