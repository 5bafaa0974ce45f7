//! Tables: named B+trees. Adapters that let the B-tree reach pages through a write transaction
//! (logging every change) or through the pool (reads of committed data).
//!
//! Invariant (tested): every byte a B-tree operation changes in a page is logged — the write
//! adapter runs the change on a copy and logs each run of changed bytes as a page-write record
//! (runs closer than [`MERGE_GAP`] bytes are merged), so replaying the redo on the old page gives
//! exactly the new page.

use crate::store::{Inner, WriteTxn};
use crate::{Error, Result};
use keel_btree::{BTree, BTreeError, PageOp, PageRead, PageWrite, Range, ReadToken};
use keel_buffer_pool::{BufferPool, OptimisticToken, PageTxn};
use keel_page::{PageId, PageType, PAGE_HEADER_SIZE, PAGE_TRAILER_SIZE};
use std::cell::Cell;
use std::ops::RangeBounds;
use std::path::Path;
use std::sync::atomic::AtomicU64;

/// Unchanged gaps shorter than this are logged with their neighbours (a record header costs
/// about as much).
pub(crate) const MERGE_GAP: usize = 16;

fn storage(e: keel_buffer_pool::PoolError) -> BTreeError {
    BTreeError::Storage(Box::new(e))
}

fn store_err(e: Error) -> BTreeError {
    BTreeError::Storage(Box::new(e))
}

/// Runs of bytes that differ between `old` and `new` within `from..to`, as `(offset, len)`.
pub(crate) fn diff_runs(old: &[u8], new: &[u8], from: usize, to: usize) -> Vec<(usize, usize)> {
    let mut runs: Vec<(usize, usize)> = Vec::new();
    let mut i = from;
    while i < to {
        let Some(start) = first_difference(old, new, i, to) else {
            break;
        };
        // The run goes on while the next differing byte follows fewer than MERGE_GAP equal
        // bytes after it: jump to the last differing byte in the next MERGE_GAP bytes.
        let mut end = start + 1;
        while let Some(d) = last_difference(old, new, end, (end + MERGE_GAP).min(to)) {
            end = d + 1;
        }
        runs.push((start, end - start));
        i = end;
    }
    runs
}

/// The last offset in `from..to` where `old` and `new` differ (a word at a time).
fn last_difference(old: &[u8], new: &[u8], from: usize, to: usize) -> Option<usize> {
    let mut k = to;
    while k > from && !(k - from).is_multiple_of(8) {
        k -= 1;
        if old[k] != new[k] {
            return Some(k);
        }
    }
    while k >= from + 8 {
        k -= 8;
        let x = word(old, k) ^ word(new, k);
        if x != 0 {
            return Some(k + 7 - (x.leading_zeros() / 8) as usize);
        }
    }
    None
}

/// The little-endian word at `at`.
fn word(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

/// The first offset in `from..to` where `old` and `new` differ. Equal stretches are skipped a
/// kilobyte at a time (one `memcmp`), then a word at a time, so an unchanged page costs a few
/// vectorised compares rather than a loop over its bytes.
fn first_difference(old: &[u8], new: &[u8], from: usize, to: usize) -> Option<usize> {
    const BLOCK: usize = 1024;
    let mut i = from;
    while i + BLOCK <= to && old[i..i + BLOCK] == new[i..i + BLOCK] {
        i += BLOCK;
    }
    while i + 8 <= to {
        let x = word(old, i) ^ word(new, i);
        if x != 0 {
            return Some(i + (x.trailing_zeros() / 8) as usize);
        }
        i += 8;
    }
    (i..to).find(|&k| old[k] != new[k])
}

thread_local! {
    /// Scratch page for [`TxnPages::write`] (saves an allocation per change).
    static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
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
        let mut g = self.txn.write(id).map_err(storage)?;
        // The change runs on a copy; the guard still holds the old bytes until the runs that
        // differ are written (and logged) through it.
        let change = |new: &mut Vec<u8>| -> keel_btree::Result<R> {
            new.clear();
            new.extend_from_slice(&g);
            let r = f(new);
            let end = new.len() - PAGE_TRAILER_SIZE;
            for (off, len) in diff_runs(&g, new, PAGE_HEADER_SIZE, end) {
                g.write(off, &new[off..off + len]).map_err(storage)?;
            }
            Ok(r)
        };
        SCRATCH.with(|cell| match cell.try_borrow_mut() {
            Ok(mut scratch) => change(&mut scratch),
            Err(_) => change(&mut Vec::new()),
        })
    }

    fn edit(&mut self, id: PageId, edits: &[PageOp<'_>]) -> keel_btree::Result<()> {
        // Exact edits: logged as they are (a slot-array shift is one 21-byte PageMove), no copy
        // of the page and no comparison.
        let mut g = self.txn.write(id).map_err(storage)?;
        for e in edits {
            match *e {
                PageOp::Write { offset, bytes } => g.write(offset, bytes),
                PageOp::Move { src, dst, len } => g.move_within(src, dst, len),
            }
            .map_err(storage)?;
        }
        Ok(())
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

    fn free(&mut self, id: PageId) -> keel_btree::Result<()> {
        if crate::meta::free(self.txn, id, self.file).map_err(store_err)? {
            // The page became a free-list trunk: it stays, holding free page ids.
            return Ok(());
        }
        self.txn.free_page(id).map_err(storage)
    }
}

/// A read handle for the pages of a write transaction (sees its own changes).
#[derive(Clone, Copy)]
pub(crate) struct TxnReader<'a, 'p> {
    txn: &'a PageTxn<'p>,
    page_size: usize,
}

impl PageRead for TxnReader<'_, '_> {
    fn page_size(&self) -> usize {
        self.page_size
    }

    fn read<R>(&self, id: PageId, f: impl FnOnce(&[u8]) -> R) -> keel_btree::Result<R> {
        let g = self.txn.read(id).map_err(storage)?;
        Ok(f(&g))
    }
}

fn lookup_catalog<S: PageRead>(inner: &Inner, pages: S, name: &str) -> Result<Option<PageId>> {
    let catalog = BTree::open(inner.catalog_root, inner.config.page_size);
    match catalog.get(&pages, name.as_bytes())? {
        None => Ok(None),
        Some(v) => {
            let bytes: [u8; 8] = v.as_slice().try_into().map_err(|_| Error::Format {
                path: inner.writer.data_path().to_path_buf(),
                detail: format!(
                    "catalog entry for table {name:?} is {} bytes, not 8",
                    v.len()
                ),
            })?;
            Ok(Some(PageId(u64::from_le_bytes(bytes))))
        }
    }
}

/// A table inside a write transaction.
pub struct Table<'t, 's> {
    tx: &'t WriteTxn<'s>,
    tree: BTree,
}

impl<'t, 's> Table<'t, 's> {
    pub(crate) fn open(tx: &'t WriteTxn<'s>, name: &str) -> Result<Table<'t, 's>> {
        let inner = tx.inner;
        let ps = inner.config.page_size;
        let known = tx
            .created
            .borrow()
            .get(name)
            .copied()
            .or_else(|| inner.catalog.read().get(name).copied());
        let root = match known {
            Some(r) => r,
            None => match lookup_catalog(
                inner,
                TxnReader {
                    txn: &tx.txn,
                    page_size: ps,
                },
                name,
            )? {
                Some(r) => {
                    inner.catalog.write().insert(name.to_string(), r);
                    r
                }
                None => {
                    let file = inner.writer.data_path();
                    let mut pages = TxnPages::new(&tx.txn, file, ps);
                    let root = BTree::create(&mut pages)?.root();
                    BTree::open(inner.catalog_root, ps).insert(
                        &mut pages,
                        name.as_bytes(),
                        &root.0.to_le_bytes(),
                    )?;
                    tx.created.borrow_mut().insert(name.to_string(), root);
                    root
                }
            },
        };
        Ok(Table {
            tx,
            tree: BTree::open(root, ps),
        })
    }

    fn pages(&self) -> TxnPages<'t, 's> {
        TxnPages::new(
            &self.tx.txn,
            self.tx.inner.writer.data_path(),
            self.tx.inner.config.page_size,
        )
    }

    /// The value under `key` (this transaction's changes included).
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.tree.get(
            &TxnReader {
                txn: &self.tx.txn,
                page_size: self.tree.limits().page_size,
            },
            key,
        )?)
    }

    /// Inserts or replaces; returns the previous value.
    pub fn insert(&mut self, key: &[u8], value: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.tree.insert(&mut self.pages(), key, value)?)
    }

    /// Removes `key`; returns its value.
    pub fn remove(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.tree.remove(&mut self.pages(), key)?)
    }

    /// Ordered iteration over a key range (`.rev()` for descending).
    pub fn range<'k, R: RangeBounds<&'k [u8]>>(&self, range: R) -> Result<Rows<'t>> {
        Ok(Rows(RowsOf::Txn(self.tree.range(
            TxnReader {
                txn: &self.tx.txn,
                page_size: self.tree.limits().page_size,
            },
            range,
        ))))
    }
}

/// A table in a read transaction.
pub struct ReadTable<'r> {
    pool: &'r BufferPool,
    tree: BTree,
}

impl<'r> ReadTable<'r> {
    pub(crate) fn open(inner: &'r Inner, name: &str) -> Result<ReadTable<'r>> {
        let pages = PoolReader { pool: &inner.pool };
        let cached = inner.catalog.read().get(name).copied();
        let root = match cached {
            Some(r) => r,
            None => match lookup_catalog(inner, pages, name)? {
                Some(r) => {
                    inner.catalog.write().insert(name.to_string(), r);
                    r
                }
                None => return Err(Error::TableNotFound(name.to_string())),
            },
        };
        Ok(ReadTable {
            pool: &inner.pool,
            tree: BTree::open(root, inner.config.page_size),
        })
    }

    /// The committed value under `key` (an optimistic, latch-free descent when the pages are
    /// resident; see [`BTree::get`]).
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let reader = GetReader {
            pool: self.pool,
            hits: Cell::new(0),
        };
        let r = self.tree.get(&reader, key);
        self.pool.add_optimistic_hits(reader.hits.get());
        Ok(r?)
    }

    /// Ordered iteration over a key range (`.rev()` for descending).
    pub fn range<'k, R: RangeBounds<&'k [u8]>>(&self, range: R) -> Result<Rows<'r>> {
        Ok(Rows(RowsOf::Pool(
            self.tree.range(PoolReader { pool: self.pool }, range),
        )))
    }
}

/// A read handle on committed pages through the pool (a read table's range cursor reads with it).
#[derive(Clone, Copy)]
pub(crate) struct PoolReader<'a> {
    pool: &'a BufferPool,
}

impl PageRead for PoolReader<'_> {
    fn page_size(&self) -> usize {
        self.pool.page_size()
    }

    fn read<R>(&self, id: PageId, f: impl FnOnce(&[u8]) -> R) -> keel_btree::Result<R> {
        let g = self.pool.read(id).map_err(storage)?;
        Ok(f(&g))
    }
}

/// The page access of one [`ReadTable::get`]: optimistic reads through the pool, counted
/// here and added to the pool's hits once per get (one counter update instead of one per
/// level).
struct GetReader<'a> {
    pool: &'a BufferPool,
    hits: Cell<u64>,
}

impl PageRead for GetReader<'_> {
    fn page_size(&self) -> usize {
        self.pool.page_size()
    }

    fn read<R>(&self, id: PageId, f: impl FnOnce(&[u8]) -> R) -> keel_btree::Result<R> {
        let g = self.pool.read(id).map_err(storage)?;
        Ok(f(&g))
    }

    #[inline]
    fn read_optimistic<R>(
        &self,
        id: PageId,
        f: impl FnOnce(&[AtomicU64]) -> R,
    ) -> Option<(R, ReadToken)> {
        let (r, t) = self.pool.read_optimistic(id, f)?;
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

    /// Ordered iteration over a key range (`.rev()` for descending).
    ///
    /// # Errors
    ///
    /// A page cannot be read or is corrupt (each row is also a `Result`).
    fn range<'k, R: RangeBounds<&'k [u8]>>(&self, range: R) -> Result<Rows<'_>>;
}

impl ReadableTable for Table<'_, '_> {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Table::get(self, key)
    }

    fn range<'k, R: RangeBounds<&'k [u8]>>(&self, range: R) -> Result<Rows<'_>> {
        Table::range(self, range)
    }
}

impl ReadableTable for ReadTable<'_> {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        ReadTable::get(self, key)
    }

    fn range<'k, R: RangeBounds<&'k [u8]>>(&self, range: R) -> Result<Rows<'_>> {
        ReadTable::range(self, range)
    }
}

/// Rows of a range, in key order; `.rev()` for descending.
pub struct Rows<'r>(RowsOf<'r>);

/// The cursor behind [`Rows`]: through a write transaction's pages or through the pool.
enum RowsOf<'r> {
    Txn(Range<TxnReader<'r, 'r>>),
    Pool(Range<PoolReader<'r>>),
}

impl Iterator for Rows<'_> {
    type Item = Result<(Vec<u8>, Vec<u8>)>;

    fn next(&mut self) -> Option<Self::Item> {
        match &mut self.0 {
            RowsOf::Txn(r) => r.next(),
            RowsOf::Pool(r) => r.next(),
        }
        .map(|r| r.map_err(Error::from))
    }
}

impl DoubleEndedIterator for Rows<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        match &mut self.0 {
            RowsOf::Txn(r) => r.next_back(),
            RowsOf::Pool(r) => r.next_back(),
        }
        .map(|r| r.map_err(Error::from))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The byte-at-a-time diff `diff_runs` replaced (kept as the reference it must match).
    fn diff_runs_reference(old: &[u8], new: &[u8], from: usize, to: usize) -> Vec<(usize, usize)> {
        let mut runs: Vec<(usize, usize)> = Vec::new();
        let mut i = from;
        while i < to {
            while i < to && old[i] == new[i] {
                i += 1;
            }
            if i >= to {
                break;
            }
            let start = i;
            let mut end = i + 1;
            let mut gap = 0;
            let mut j = i + 1;
            while j < to && gap < MERGE_GAP {
                if old[j] != new[j] {
                    end = j + 1;
                    gap = 0;
                } else {
                    gap += 1;
                }
                j += 1;
            }
            runs.push((start, end - start));
            i = end;
        }
        runs
    }

    /// The word- and block-skipping diff finds exactly the runs of the byte loop, for changes
    /// at every alignment, at the edges of the range and across kilobyte blocks.
    #[test]
    fn fast_diff_matches_the_byte_loop() {
        let mut seed = 11u64;
        let mut next = || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            seed >> 33
        };
        for case in 0..2000 {
            let size = [4096usize, 16384][case % 2];
            let old: Vec<u8> = (0..size).map(|_| (next() % 4) as u8).collect();
            let mut new = old.clone();
            for _ in 0..next() % 6 {
                let at = next() as usize % size;
                let len = (next() as usize % 40).min(size - at);
                for b in &mut new[at..at + len] {
                    *b = b.wrapping_add(1 + (next() % 3) as u8);
                }
            }
            let from = next() as usize % 64;
            let to = size - next() as usize % 64;
            assert_eq!(
                diff_runs(&old, &new, from, to),
                diff_runs_reference(&old, &new, from, to),
                "case {case}"
            );
        }
        // Long changed stretches (a shifted slot array) and gaps of exactly MERGE_GAP - 1,
        // MERGE_GAP and MERGE_GAP + 1 equal bytes between changed bytes.
        let old: Vec<u8> = (0..16384u32).map(|i| (i % 251) as u8).collect();
        for shift_at in [40usize, 41, 1000, 1020, 5003] {
            let mut new = old.clone();
            new.copy_within(shift_at..shift_at + 700, shift_at + 4);
            for (n, gap) in [(1usize, MERGE_GAP - 1), (2, MERGE_GAP), (3, MERGE_GAP + 1)] {
                let at = 9000 + n * 300;
                new[at] ^= 0xFF;
                new[at + gap + 1] ^= 0xFF;
            }
            assert_eq!(
                diff_runs(&old, &new, 32, 16376),
                diff_runs_reference(&old, &new, 32, 16376),
                "shift at {shift_at}"
            );
        }
        // A single changed byte at each position of a block boundary and at the range's ends.
        let old = vec![0u8; 4096];
        for at in [32, 33, 39, 40, 1023, 1024, 1025, 2047, 4087, 4088] {
            let mut new = old.clone();
            new[at] = 1;
            assert_eq!(
                diff_runs(&old, &new, 32, 4088),
                diff_runs_reference(&old, &new, 32, 4088)
            );
        }
    }

    /// Replaying the runs on the old bytes gives the new bytes (the logging invariant), and a
    /// diff that drops a run on purpose is caught by the same check.
    #[test]
    fn diff_runs_reproduce_the_change() {
        let mut seed = 7u64;
        for _ in 0..500 {
            let mut old = vec![0u8; 4096];
            for b in old.iter_mut() {
                seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
                *b = (seed >> 56) as u8 & 3;
            }
            let mut new = old.clone();
            for _ in 0..(seed % 20) {
                seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
                let at = 32 + (seed >> 40) as usize % (4096 - 40 - 64);
                for b in &mut new[at..at + (seed % 64) as usize] {
                    *b = b.wrapping_add(1);
                }
            }
            let runs = diff_runs(&old, &new, 32, 4096 - 8);
            let mut replay = old.clone();
            for &(o, l) in &runs {
                replay[o..o + l].copy_from_slice(&new[o..o + l]);
            }
            assert_eq!(replay, new);
            if let Some(&(o, l)) = runs.first() {
                let mut broken = old.clone();
                for &(o2, l2) in &runs[1..] {
                    broken[o2..o2 + l2].copy_from_slice(&new[o2..o2 + l2]);
                }
                assert_ne!(broken, new, "dropping run at {o}+{l} must be visible");
            }
        }
    }
}
