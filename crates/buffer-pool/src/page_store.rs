//! Where the pool's pages come from and go to ([`PageStore`]), and where its redo goes
//! ([`RedoSink`]).
//!
//! The real implementations are keel-flush's `PageWriter` and keel-redo-log's `RedoLog` (see the
//! `impl`s in this crate). [`MemStore`] and [`MemLog`] are in-memory stand-ins for unit tests and
//! for layers above (B-tree tests) that want a pool without files.
//!
//! Invariant kept by [`MemStore`] (tested): a page is stored sealed and every read verifies it,
//! so a corrupted page is a [`PoolError::Corruption`], never data.

use crate::redo::{Record, RecoveredGroup};
use crate::{PoolError, Result};
use keel_page::{seal, verify, Checksum, Lsn, PageId, PageSize, PageState};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// One page handed to [`PageStore::write_pages`]: the in-memory page (header holds page id, type
/// and page LSN; the store seals its own copy).
#[derive(Clone, Copy, Debug)]
pub struct PageOut<'a> {
    /// The page.
    pub page_id: PageId,
    /// The page's bytes (page-aligned).
    pub image: &'a [u8],
    /// Newest modification (= the page LSN in the header).
    pub lsn: Lsn,
    /// The page's redo since the last checkpoint holds a PageInit (it was initialised after the
    /// checkpoint): redo alone can rebuild it, so it may skip the doublewrite / full page image
    /// (init-on-flush, MariaDB MDEV-19738).
    pub rebuildable_from_redo: bool,
}

/// Where pages are read from and written to: keel-flush's page writer in a store, an in-memory
/// fake in unit tests. `Send + Sync`; called from user threads and the page cleaner.
pub trait PageStore: Send + Sync {
    /// The page size of the data file.
    fn page_size(&self) -> PageSize;

    /// The data file (for error messages).
    fn data_path(&self) -> &Path;

    /// Reads page `id` into `buf` and verifies it: `Ok(Valid)`, `Ok(Unwritten)` (all zero or
    /// beyond EOF), or `Err(PoolError::Corruption)` naming file and page.
    fn read_page(&self, id: PageId, buf: &mut [u8]) -> Result<PageState>;

    /// Reads many pages in one batch (prefetch). One result per request, in order.
    fn read_pages(&self, reqs: &mut [(PageId, &mut [u8])]) -> Vec<Result<PageState>> {
        reqs.iter_mut()
            .map(|(id, buf)| self.read_page(*id, buf))
            .collect()
    }

    /// Writes a batch of pages durably through the torn-page protection scheme, after making
    /// the log durable up to the batch's highest LSN (WAL rule). Returns when the batch is
    /// durable.
    fn write_pages(&self, pages: &[PageOut<'_>]) -> Result<()>;

    /// Full-page-writes mode: the first change of a page after a checkpoint must log an image.
    fn wants_full_page_images(&self) -> bool;

    /// Whether a page's first change after a checkpoint must log a full page image, given
    /// whether that change is a whole-page init (then redo alone rebuilds it and the
    /// init-on-flush skip may spare the image; the writer counts the skip).
    fn should_log_full_page_image(&self, rebuildable_from_redo: bool) -> bool {
        self.wants_full_page_images() && !rebuildable_from_redo
    }

    /// Counts one full page image logged by the pool.
    fn count_full_page_image(&self, _bytes: usize) {}

    /// Makes the redo log durable up to at least `lsn` (the pool asks before writing a page
    /// whose pending copy was freed: module `copy_deps`). A store whose log is always durable
    /// does nothing.
    fn flush_log_to(&self, _lsn: Lsn) -> Result<()> {
        Ok(())
    }

    /// Whether the store takes no more page writes (a failed write or sync poisoned it): the
    /// pool's dirty pages can then never be cleaned, and a read that finds no frame reads the
    /// page into a buffer of its own (`BufferPool::read`).
    fn is_poisoned(&self) -> bool {
        false
    }

    /// Whether every page write completes whole or is repaired by the store itself at recovery
    /// (doublewrite, atomic writes), so that a page made as a copy of another
    /// (`PageTxn::copy_page`) never needs redo alone to be rebuilt. False by default.
    fn never_leaves_torn_pages(&self) -> bool {
        false
    }
}

/// Where a transaction's redo goes: keel-redo-log's `RedoLog` in a store, [`MemLog`] in tests.
pub trait RedoSink: Send + Sync {
    /// The LSN after the last appended group.
    fn end_lsn(&self) -> Lsn;

    /// The LSN up to which appended groups are durable. Default: the end (a sink whose appends
    /// are durable at once).
    fn durable_lsn(&self) -> Lsn {
        self.end_lsn()
    }

    /// Appends one group (one transaction) with its commit marker; returns the group's end LSN.
    fn append(&self, records: &[Record]) -> Result<Lsn>;

    /// Appends like [`append`](Self::append) and returns the group's LSN range (start..end).
    /// The default reads the end LSN before appending: a lower bound of the start, which is all
    /// a page's oldest modification needs.
    fn append_range(&self, records: &[Record]) -> Result<std::ops::Range<Lsn>> {
        let start = self.end_lsn();
        Ok(start..self.append(records)?)
    }
}

/// keel-redo-log's log is the pool's redo sink in a real engine.
impl RedoSink for keel_redo_log::RedoLog {
    fn end_lsn(&self) -> Lsn {
        keel_redo_log::RedoLog::end_lsn(self)
    }

    fn durable_lsn(&self) -> Lsn {
        keel_redo_log::RedoLog::durable_lsn(self)
    }

    fn append(&self, records: &[Record]) -> Result<Lsn> {
        keel_redo_log::RedoLog::append(self, records).map_err(PoolError::log)
    }

    fn append_range(&self, records: &[Record]) -> Result<std::ops::Range<Lsn>> {
        keel_redo_log::RedoLog::append_range(self, records).map_err(PoolError::log)
    }
}

impl<T: RedoSink + ?Sized> RedoSink for std::sync::Arc<T> {
    fn durable_lsn(&self) -> Lsn {
        (**self).durable_lsn()
    }
    fn end_lsn(&self) -> Lsn {
        (**self).end_lsn()
    }
    fn append(&self, records: &[Record]) -> Result<Lsn> {
        (**self).append(records)
    }
    fn append_range(&self, records: &[Record]) -> Result<std::ops::Range<Lsn>> {
        (**self).append_range(records)
    }
}

/// Counters of a [`MemStore`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemStoreStats {
    /// `write_pages` calls.
    pub batches: u64,
    /// Pages written.
    pub pages_written: u64,
    /// Of those, pages flagged rebuildable from redo.
    pub pages_rebuildable: u64,
    /// Pages read.
    pub pages_read: u64,
}

/// An in-memory [`PageStore`]: pages are kept sealed (checksummed) in a map; no durability.
#[derive(Debug)]
pub struct MemStore {
    page_size: PageSize,
    checksum: Checksum,
    fpw: bool,
    path: PathBuf,
    pages: Mutex<HashMap<PageId, Vec<u8>>>,
    batches: AtomicU64,
    written: AtomicU64,
    rebuildable: AtomicU64,
    read: AtomicU64,
    /// Highest LSN written so far (for WAL checks in tests).
    max_lsn: AtomicU64,
}

impl MemStore {
    /// An empty store of `page_size` pages checksummed with CRC-32C, not in full-page-writes mode.
    pub fn new(page_size: PageSize) -> MemStore {
        MemStore {
            page_size,
            checksum: Checksum::Crc32c,
            fpw: false,
            path: PathBuf::from("mem:data"),
            pages: Mutex::new(HashMap::new()),
            batches: AtomicU64::new(0),
            written: AtomicU64::new(0),
            rebuildable: AtomicU64::new(0),
            read: AtomicU64::new(0),
            max_lsn: AtomicU64::new(0),
        }
    }

    /// The same store reporting full-page-writes mode.
    pub fn with_full_page_writes(mut self, yes: bool) -> MemStore {
        self.fpw = yes;
        self
    }

    /// The sealed bytes stored for `id`, if any.
    pub fn stored(&self, id: PageId) -> Option<Vec<u8>> {
        self.pages.lock().get(&id).cloned()
    }

    /// Replaces the stored bytes of `id` (tests: corrupt or tear a page).
    pub fn put_raw(&self, id: PageId, bytes: Vec<u8>) {
        self.pages.lock().insert(id, bytes);
    }

    /// Counters.
    pub fn stats(&self) -> MemStoreStats {
        MemStoreStats {
            batches: self.batches.load(Ordering::Relaxed),
            pages_written: self.written.load(Ordering::Relaxed),
            pages_rebuildable: self.rebuildable.load(Ordering::Relaxed),
            pages_read: self.read.load(Ordering::Relaxed),
        }
    }

    /// Highest page LSN written so far.
    pub fn max_written_lsn(&self) -> Lsn {
        Lsn(self.max_lsn.load(Ordering::Relaxed))
    }
}

impl PageStore for MemStore {
    fn page_size(&self) -> PageSize {
        self.page_size
    }

    fn data_path(&self) -> &Path {
        &self.path
    }

    fn read_page(&self, id: PageId, buf: &mut [u8]) -> Result<PageState> {
        self.read.fetch_add(1, Ordering::Relaxed);
        let pages = self.pages.lock();
        match pages.get(&id) {
            None => {
                buf.fill(0);
                Ok(PageState::Unwritten)
            }
            Some(p) if p.len() == buf.len() => {
                buf.copy_from_slice(p);
                drop(pages);
                Ok(verify(buf, id, self.checksum, &self.path)?)
            }
            Some(p) => Err(PoolError::Corruption(keel_page::PageError::Corruption {
                file: self.path.clone(),
                page_id: id,
                detail: keel_page::CorruptionDetail::BadLength { len: p.len() },
            })),
        }
    }

    fn write_pages(&self, pages: &[PageOut<'_>]) -> Result<()> {
        let mut map = self.pages.lock();
        for p in pages {
            let mut copy = p.image.to_vec();
            seal(&mut copy, self.checksum);
            map.insert(p.page_id, copy);
            self.written.fetch_add(1, Ordering::Relaxed);
            if p.rebuildable_from_redo {
                self.rebuildable.fetch_add(1, Ordering::Relaxed);
            }
            self.max_lsn.fetch_max(p.lsn.0, Ordering::Relaxed);
        }
        self.batches.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn wants_full_page_images(&self) -> bool {
        self.fpw
    }

    /// Each batch is installed whole.
    fn never_leaves_torn_pages(&self) -> bool {
        true
    }
}

/// An in-memory [`RedoSink`] that keeps every group, with LSNs counted in (approximate) encoded
/// bytes. Everything appended is "durable".
#[derive(Debug)]
pub struct MemLog {
    inner: Mutex<MemLogInner>,
}

#[derive(Debug)]
struct MemLogInner {
    end: Lsn,
    groups: Vec<RecoveredGroup>,
}

impl Default for MemLog {
    fn default() -> Self {
        MemLog::new()
    }
}

impl MemLog {
    /// An empty log; the first group starts at LSN 16.
    pub fn new() -> MemLog {
        MemLog {
            inner: Mutex::new(MemLogInner {
                end: Lsn(16),
                groups: Vec::new(),
            }),
        }
    }

    /// The groups whose start is at or after `checkpoint` (what a recovery scan would return).
    pub fn groups_since(&self, checkpoint: Lsn) -> Vec<RecoveredGroup> {
        self.inner
            .lock()
            .groups
            .iter()
            .filter(|g| g.start_lsn >= checkpoint)
            .cloned()
            .collect()
    }
}

impl RedoSink for MemLog {
    fn end_lsn(&self) -> Lsn {
        self.inner.lock().end
    }

    fn append(&self, records: &[Record]) -> Result<Lsn> {
        let mut g = self.inner.lock();
        let start = g.end;
        // A group takes what it takes in the real log (header, records, commit marker).
        let end = Lsn(start.0 + keel_redo_log::inspect::group_len(records));
        g.end = end;
        g.groups.push(RecoveredGroup {
            start_lsn: start,
            end_lsn: end,
            records: records.to_vec(),
        });
        Ok(end)
    }
}

/// keel-flush's page writer is the pool's store in a real engine.
impl PageStore for keel_flush::PageWriter {
    fn page_size(&self) -> PageSize {
        keel_flush::PageWriter::page_size(self)
    }

    fn data_path(&self) -> &Path {
        keel_flush::PageWriter::data_path(self)
    }

    fn read_page(&self, id: PageId, buf: &mut [u8]) -> Result<PageState> {
        keel_flush::PageWriter::read_page(self, id, buf).map_err(flush_error)
    }

    fn read_pages(&self, reqs: &mut [(PageId, &mut [u8])]) -> Vec<Result<PageState>> {
        keel_flush::PageWriter::read_pages(self, reqs)
            .into_iter()
            .map(|r| r.map_err(flush_error))
            .collect()
    }

    fn write_pages(&self, pages: &[PageOut<'_>]) -> Result<()> {
        let pages: Vec<keel_flush::FlushPage<'_>> = pages
            .iter()
            .map(|p| keel_flush::FlushPage {
                page_id: p.page_id,
                image: p.image,
                lsn: p.lsn,
                rebuildable_from_redo: p.rebuildable_from_redo,
            })
            .collect();
        keel_flush::PageWriter::write_pages(self, &pages).map_err(flush_error)
    }

    fn wants_full_page_images(&self) -> bool {
        keel_flush::PageWriter::wants_full_page_images(self)
    }

    fn should_log_full_page_image(&self, rebuildable_from_redo: bool) -> bool {
        keel_flush::PageWriter::should_log_full_page_image(self, rebuildable_from_redo)
    }

    fn count_full_page_image(&self, bytes: usize) {
        keel_flush::PageWriter::count_full_page_image(self, bytes)
    }

    fn flush_log_to(&self, lsn: Lsn) -> Result<()> {
        keel_flush::PageWriter::flush_log_to(self, lsn).map_err(flush_error)
    }

    fn is_poisoned(&self) -> bool {
        keel_flush::PageWriter::is_poisoned(self)
    }

    fn never_leaves_torn_pages(&self) -> bool {
        keel_flush::PageWriter::never_leaves_torn_pages(self)
    }
}

/// Corruption stays [`PoolError::Corruption`] (recovery tells it apart); the rest is a store
/// error.
fn flush_error(e: keel_flush::FlushError) -> PoolError {
    match e {
        keel_flush::FlushError::Corruption(p) => PoolError::Corruption(p),
        e => PoolError::store(e),
    }
}
