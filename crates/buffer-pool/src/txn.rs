//! Write transactions on pool pages: write guards that record redo and undo, full page images,
//! commit (LSN assignment, dirty tracking) and rollback.
//!
//! Invariants this module keeps (each tested):
//! - **No-steal**: a page changed by an uncommitted transaction stays pinned and marked owned;
//!   it is neither evicted nor written until the transaction commits (test
//!   `uncommitted_pages_are_never_written`).
//! - **Nothing changed on failure**: an operation that fails (too large, page busy, bad offset)
//!   changes neither the page nor the redo; abort (or drop) restores every page exactly
//!   (tests `abort_restores_pages_exactly`, `txn_too_large_changes_nothing`). A page whose
//!   committed image the transaction copied for snapshot readers (module `versions`) before its
//!   first change is restored from that copy and records no undo of its own; any other page
//!   records the bytes each change overwrites (the test runs three ways): in its slot of the
//!   transaction's [`TxnUndo`] when that is its version for snapshot readers (taken while no
//!   snapshot was registered: module `versions`, invariant 5), else in the transaction's arena.
//! - **Full page images**: when the store wants them, the first change of a page after the
//!   published horizon puts a `PageImage` of the page as it was before the transaction at the
//!   start of the same group (test `full_page_image_logged_once_per_checkpoint`).
//! - **LSNs at commit**: every page the group changed takes the group's end LSN as its page LSN;
//!   its oldest modification is a lower bound of the group's start (the log's end read before
//!   the append), so a checkpoint never passes a change that is not on disk.

use crate::frame::ExclusiveLatch;
use crate::guard::PageReadGuard;
use crate::knobs::TestKnobs;
use crate::page_store::RedoSink;
use crate::redo::Record;
use crate::stats::bump;
use crate::versions::TxnUndo;
use crate::{BufferPool, PoolError, Result};
use keel_page::{set_lsn, Lsn, PageHeader, PageId, PageType, PAGE_HEADER_SIZE, PAGE_TRAILER_SIZE};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::ops::Deref;
use std::sync::atomic::Ordering;
use std::sync::Arc;

mod diff;
mod precopy;
mod write_guard;

pub use precopy::CommittedCopy;
pub use write_guard::PageWriteGuard;

#[derive(Debug)]
struct Entry {
    page_id: PageId,
    /// The frame (pinned by the transaction), or None for a freed page it does not hold (not
    /// resident when freed, freed past the transaction's page limit, or let go of to make
    /// room: `PageTxn::let_go_of_a_freed_page`).
    frame: Option<u32>,
    /// Page LSN before the transaction.
    pre_lsn: Lsn,
    /// None: not modified; Some(true): the first change was a PageInit.
    first_init: Option<bool>,
    /// Installed blank by this transaction (abort discards the frame).
    fresh: bool,
    freed: bool,
    latched: bool,
    /// The page's committed image is in the version store as this transaction's pending
    /// version (module `versions`).
    versioned: bool,
    /// The page exactly as it was before this transaction's first change of it, when that is
    /// the pending version copied from the frame itself under its exclusive latch: such a page
    /// records no undo (the copy is the undo: rollback and a full page image use it). Dropped
    /// before the versions are sealed, so a retired image can be recycled.
    before: Option<Arc<[u8]>>,
    /// The page's pending version is kept as undo (module `versions`, invariant 5), in this
    /// slot of the transaction's `TxnUndo`: every change records what undoes it there, not in
    /// the transaction's arena.
    lazy: Option<u32>,
    /// The page was made a copy of this one ([`PageTxn::copy_page`]): it must be written
    /// before that page's next write (module `copy_deps`), and redo rebuilds it from that
    /// page only while the copy is pending.
    copied_from: Option<PageId>,
}

impl Entry {
    /// Whether a change of this page must record the bytes it overwrites: not for a page
    /// installed blank by this transaction (there is nothing to restore) nor for one whose
    /// image before the transaction is kept whole (`before`).
    pub(super) fn needs_undo(&self) -> bool {
        !self.fresh && self.before.is_none()
    }

    fn note(&mut self, init: bool) {
        if self.first_init.is_none() {
            self.first_init = Some(init);
        }
    }
}

/// One undo step: entry `entry`'s page had, at `offset`, the `len` bytes stored at `at` in
/// the transaction's undo arena (`TxnState::undo_bytes`: one buffer for all steps instead of
/// an allocation per step).
#[derive(Debug)]
struct Undo {
    entry: usize,
    offset: usize,
    at: usize,
    len: usize,
}

#[derive(Debug, Default)]
struct TxnState {
    entries: Vec<Entry>,
    /// Entry of each page (page ids hash with one multiply, as in the page table).
    index: HashMap<PageId, usize, crate::page_table::BuildIdHash>,
    records: Vec<Record>,
    undo: Vec<Undo>,
    /// The old bytes of every undo step, back to back.
    undo_bytes: Vec<u8>,
    /// Committed images offered for pages the transaction may take (module `precopy`).
    copies: HashMap<PageId, Arc<[u8]>, crate::page_table::BuildIdHash>,
    /// This transaction's registration of the pages it keeps as undo (module `versions`,
    /// invariant 5), from its first such page on.
    undo_txn: Option<Arc<TxnUndo>>,
    /// Entries that hold a frame.
    held: usize,
    redo_bytes: usize,
}

impl TxnState {
    /// The pages whose committed image this transaction keeps as a pending version in the
    /// store (not those it keeps as undo: they are registered with `undo_txn`).
    fn versioned_pages(&self) -> Vec<PageId> {
        self.entries
            .iter()
            .filter(|e| e.versioned && e.lazy.is_none())
            .map(|e| e.page_id)
            .collect()
    }

    /// Records what undoes `op` (checked, about to be applied to `page`, entry `entry`'s page):
    /// a move into the page's own undo as the move back plus the bytes it uncovers; anything
    /// else as the bytes it overwrites. True if the page's undo is past its bound: call
    /// [`after_change`](Self::after_change) once the change is made.
    #[must_use]
    fn push_undo_op(&mut self, entry: usize, op: keel_page::PageOp<'_>, page: &[u8]) -> bool {
        if let (Some(slot), Some(t), keel_page::PageOp::Move { src, dst, len }) =
            (self.entries[entry].lazy, &self.undo_txn, op)
        {
            return t.push_move(slot, page, src, dst, len);
        }
        let (at, len) = op.target();
        self.push_undo(entry, at, &page[at..at + len])
    }

    /// After a change of entry `entry`'s page (`page`, as it is now) whose undo passed its
    /// bound: the page's undo keeps its image instead (module `versions::txn_undo`, invariant
    /// 4).
    fn after_change(&self, entry: usize, page: &[u8]) {
        if let (Some(slot), Some(t)) = (self.entries[entry].lazy, &self.undo_txn) {
            t.after_change(slot, page);
        }
    }

    /// Records that entry `entry`'s page had `old` at `offset`; true as for
    /// [`push_undo_op`](Self::push_undo_op).
    #[must_use]
    fn push_undo(&mut self, entry: usize, offset: usize, old: &[u8]) -> bool {
        if let (Some(slot), Some(t)) = (self.entries[entry].lazy, &self.undo_txn) {
            return t.push(slot, offset, old);
        }
        self.undo.push(Undo {
            entry,
            offset,
            at: self.undo_bytes.len(),
            len: old.len(),
        });
        self.undo_bytes.extend_from_slice(old);
        false
    }
}

/// A write transaction's view of the pool: the pages it changed (pinned, owned: no-steal), the
/// redo it generated, and the undo to roll back. Not `Sync`: one thread drives a transaction.
///
/// Dropping it without [`commit`](Self::commit) aborts it.
pub struct PageTxn<'p> {
    pool: &'p BufferPool,
    id: u64,
    st: RefCell<TxnState>,
    finished: Cell<bool>,
    /// Pages taken for writing, made or freed so far (see [`PageTxn::changes`]).
    changes: Cell<u64>,
    /// Why the transaction failed ([`PageTxn::fail`]): it can only be rolled back.
    failed: RefCell<Option<(String, bool)>>,
}

impl std::fmt::Debug for PageTxn<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = self.st.borrow();
        write!(
            f,
            "PageTxn({}, {} pages, {} records)",
            self.id,
            st.entries.len(),
            st.records.len()
        )
    }
}

/// Zeroes `page` and writes a header for (`id`, `ty`) with LSN 0: the effect of a PageInit.
pub(crate) fn apply_init(page: &mut [u8], id: PageId, ty: PageType) {
    page.fill(0);
    PageHeader::init(page, id, ty, Lsn::ZERO);
}

/// Makes `page` (page `id`) a copy of `src`, a page of the same size: header zeroed and set to
/// (`id`, `src`'s type) with LSN 0, the trailer zeroed, every payload byte copied: the effect of
/// a PageCopy. Both the write transaction and recovery call this one function, so a copy made
/// at replay is byte for byte the copy made at run time.
pub(crate) fn apply_copy(page: &mut [u8], src: &[u8], id: PageId) {
    let n = page.len();
    debug_assert_eq!(n, src.len(), "a copy between pages of one size");
    let ty = PageHeader::read(src).map_or(PageType::UNWRITTEN, |h| h.page_type);
    let payload = PAGE_HEADER_SIZE..n.saturating_sub(PAGE_TRAILER_SIZE);
    page[payload.clone()].copy_from_slice(&src[payload.clone()]);
    page[..payload.start].fill(0);
    page[payload.end..].fill(0);
    PageHeader::init(page, id, ty, Lsn::ZERO);
}

impl BufferPool {
    /// Lets write transactions make page copies ([`PageTxn::copy_page`]) or not (the
    /// default). Turn it on only when the log takes `PageCopy` records (log format version
    /// 4); copies are made only while the store also never leaves a torn page that only redo
    /// could rebuild ([`PageStore::never_leaves_torn_pages`](crate::PageStore)).
    pub fn set_page_copies(&self, on: bool) {
        self.page_copies.store(on, Ordering::Release);
    }

    /// Starts a write transaction.
    pub fn begin(&self) -> PageTxn<'_> {
        PageTxn {
            pool: self,
            id: self.next_txn.fetch_add(1, Ordering::Relaxed),
            st: RefCell::new(TxnState::default()),
            finished: Cell::new(false),
            changes: Cell::new(0),
            failed: RefCell::new(None),
        }
    }
}

impl<'p> PageTxn<'p> {
    /// The transaction's id (unique within the pool).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Pages the transaction took for writing, made or freed (a freed page counts whether or
    /// not it holds the page's frame).
    pub fn pages(&self) -> usize {
        self.st.borrow().entries.len()
    }

    /// Redo records collected so far (not counting full page images added at commit).
    pub fn records(&self) -> usize {
        self.st.borrow().records.len()
    }

    /// A count that grows whenever this transaction's pages may have changed: each page taken
    /// for writing ([`write`](Self::write), [`new_page`](Self::new_page)) or freed. A reader of
    /// the transaction's pages that keeps positions across calls (a B-tree cursor) compares it
    /// to re-position itself after the transaction wrote.
    pub fn changes(&self) -> u64 {
        self.changes.get()
    }

    /// Approximate redo payload bytes collected so far.
    pub fn redo_bytes(&self) -> usize {
        self.st.borrow().redo_bytes
    }

    /// The most log payload bytes this transaction's group can take if it commits now: its
    /// records as encoded (group header and commit marker included), plus, only when the store
    /// logs full page images, an image of every page it holds (whether a page gets one depends
    /// on the horizon at commit, which can only move forward, so every page is charged). In
    /// doublewrite, atomic or no-protection mode no image is ever logged, and none is charged.
    pub fn log_bytes_bound(&self) -> u64 {
        let st = self.st.borrow();
        // Plain encoding: the most the group takes whatever the log's format version.
        let mut n = keel_redo_log::inspect::group_len_bound(&st.records);
        if self.pool.store.wants_full_page_images()
            && !TestKnobs::on(&self.pool.knobs.skip_full_page_images)
        {
            let image = Record::PageImage {
                page_id: keel_page::PageId(0),
                image: Vec::new(),
            }
            .encoded_len() as u64
                + self.pool.page_size as u64;
            n = n.saturating_add(image.saturating_mul(st.entries.len() as u64));
        }
        n
    }

    /// Marks the transaction failed: an operation of the caller (a B-tree insert, a table's
    /// drop) failed after changing some of its pages, which may now hold part of it. Every
    /// later read, write, new page, free and the commit is then [`PoolError::TxnFailed`]
    /// naming `reason` (the first one given) and whether the operation was refused for its
    /// size (`too_large`: a smaller transaction may succeed); only the rollback remains (drop
    /// or [`abort`](Self::abort)). PostgreSQL's "current transaction is aborted".
    pub fn fail(&self, reason: impl Into<String>, too_large: bool) {
        let mut f = self.failed.borrow_mut();
        if f.is_none() {
            *f = Some((reason.into(), too_large));
        }
    }

    /// Whether the transaction may go on: [`PoolError::TxnFailed`] naming the reason if it
    /// failed ([`fail`](Self::fail)); refused in a forked child
    /// ([`BufferPool::refuse_forked`]).
    ///
    /// # Errors
    /// [`PoolError::TxnFailed`]; in a forked child, [`PoolError::Store`] (`IoError::Forked`).
    pub fn check_failed(&self) -> Result<()> {
        self.pool.refuse_forked()?;
        match &*self.failed.borrow() {
            None => Ok(()),
            Some((reason, too_large)) => Err(PoolError::TxnFailed {
                reason: reason.clone(),
                too_large: *too_large,
            }),
        }
    }

    /// Reads a page (shared latch). Errors with [`PoolError::AlreadyLatched`] if this
    /// transaction holds a write guard on it, [`PoolError::TxnFailed`] if it failed.
    pub fn read(&self, id: PageId) -> Result<PageReadGuard<'_>> {
        self.check_failed()?;
        {
            let st = self.st.borrow();
            if let Some(&i) = st.index.get(&id) {
                if st.entries[i].latched {
                    return Err(PoolError::AlreadyLatched { page_id: id });
                }
            }
        }
        self.pool.read(id)
    }

    /// Latches an existing page for writing (reads it if it is not resident).
    pub fn write(&self, id: PageId) -> Result<PageWriteGuard<'_>> {
        self.take(id, false)
    }

    /// Starts page `id` afresh as `page_type`: a PageInit record, the page zeroed, no read from
    /// disk (a new or re-used page). Redo alone can rebuild such a page (init-on-flush).
    pub fn new_page(&self, id: PageId, page_type: PageType) -> Result<PageWriteGuard<'_>> {
        let mut g = self.take(id, true)?;
        g.init(page_type);
        Ok(g)
    }

    /// Frees page `id`: a PageFree record; at commit the page leaves the pool unwritten.
    pub fn free_page(&self, id: PageId) -> Result<()> {
        self.check_failed()?;
        self.changes.set(self.changes.get().wrapping_add(1));
        {
            let mut st = self.st.borrow_mut();
            if let Some(&i) = st.index.get(&id) {
                let e = &mut st.entries[i];
                if e.latched {
                    return Err(PoolError::AlreadyLatched { page_id: id });
                }
                if !e.freed {
                    e.freed = true;
                    st.records.push(Record::PageFree { page_id: id });
                    st.redo_bytes += 8;
                }
                return Ok(());
            }
        }
        let pool = self.pool;
        let mut entry = Entry {
            page_id: id,
            frame: None,
            pre_lsn: Lsn::ZERO,
            first_init: None,
            fresh: false,
            freed: true,
            latched: false,
            versioned: false,
            before: None,
            lazy: None,
            copied_from: None,
        };
        // A resident page is held to leave the pool unwritten at commit, while the transaction
        // has room; past it the page stays as a page freed while not resident does (its frame
        // is evicted or written like any other), so freeing a tree larger than the pool works.
        let room = self.st.borrow().held < pool.max_txn_pages;
        if let Some(f) = room.then(|| pool.lookup_pin(id)).flatten() {
            let fr = &pool.frames[f as usize];
            let x = fr.exclusive();
            if fr.valid.load(Ordering::Acquire) && fr.page_id.load(Ordering::Relaxed) == id.0 {
                if let Some(err) = self.own(id, &x)? {
                    drop(x);
                    pool.unpin(f);
                    return Err(err);
                }
                entry.pre_lsn = BufferPool::header_lsn(x.bytes());
                entry.frame = Some(f);
                // The frame leaves the pool at commit, unwritten: snapshots that can still
                // reach the page read this copy.
                entry.before = self.keep_version(id, pool.versions.copy_of(x.bytes()));
                entry.versioned = entry.before.is_some();
                drop(x);
            } else {
                drop(x);
                pool.unpin(f);
            }
        }
        let mut st = self.st.borrow_mut();
        if entry.frame.is_some() {
            st.held += 1;
            pool.txn_pages.fetch_add(1, Ordering::Relaxed);
        }
        let i = st.entries.len();
        st.entries.push(entry);
        st.index.insert(id, i);
        st.records.push(Record::PageFree { page_id: id });
        st.redo_bytes += 8;
        Ok(())
    }

    /// Makes page `dst`, started afresh by this transaction ([`new_page`](Self::new_page)), a
    /// copy of page `src` as it is now (this transaction's changes of `src` included), logged
    /// as one `PageCopy` record instead of the page's bytes (a B-tree split makes its new right
    /// half so). Recovery makes the copy from `src` as it was at that point of the log; the
    /// pool writes `dst` before `src`'s next write so that it always can (module `copy_deps`).
    ///
    /// Returns false, doing nothing, when the pool does not make copies (off, see
    /// [`BufferPool::set_page_copies`], or the store can leave a torn page that only redo
    /// could rebuild), `dst` must itself wait for a copy of its own (no cycles of waits), or
    /// `src` is already `max_copy_chain` pending copies deep (bounded chains, see
    /// [`PoolConfig::max_copy_chain`](crate::PoolConfig::max_copy_chain)); the caller then
    /// writes `dst`'s bytes through a guard.
    ///
    /// # Errors
    ///
    /// [`PoolError::BadRedo`] if `dst` is `src`, or was not changed by this transaction or was
    /// freed by it since (a copy goes to a page the transaction started afresh);
    /// [`PoolError::AlreadyLatched`] if this transaction holds a write guard on either page;
    /// read errors of `src`.
    pub fn copy_page(&self, dst: PageId, src: PageId) -> Result<bool> {
        self.pool.refuse_forked()?;
        let pool = self.pool;
        if !pool.page_copies.load(Ordering::Acquire) || !pool.store.never_leaves_torn_pages() {
            return Ok(false);
        }
        let bad = |reason: &str| PoolError::BadRedo {
            page_id: dst,
            lsn: Lsn::ZERO,
            reason: reason.into(),
        };
        if dst == src {
            return Err(bad("a page cannot be made a copy of itself"));
        }
        {
            let st = self.st.borrow();
            match st.index.get(&dst).map(|&i| &st.entries[i]) {
                Some(e) if e.first_init.is_some() && !e.freed => {}
                _ => {
                    return Err(bad(
                        "only a page this transaction started afresh (new_page) can be made a copy",
                    ))
                }
            }
            // `dst` is the source of a copy this transaction made (freed and started afresh
            // since): it will wait for that copy, so it may not become one (no cycles).
            if st.entries.iter().any(|e| e.copied_from == Some(dst)) {
                return Ok(false);
            }
        }
        {
            // One hold of the pending copies for both checks.
            let deps =
                (pool.copy_deps_len.load(Ordering::Acquire) > 0).then(|| pool.copy_deps.lock());
            if deps.as_ref().is_some_and(|d| d.waits(dst))
                || self.copy_depth(src, deps.as_deref()) >= pool.cfg.max_copy_chain
            {
                return Ok(false);
            }
        }
        let s = self.read(src)?;
        let mut d = self.write(dst)?;
        d.copy_from(&s, src);
        Ok(true)
    }

    /// How many pending copies deep page `src` is (it is a copy of a page that is a copy of
    /// ...), counting this transaction's copies and the pool's pending ones (`deps`, `None`
    /// when there are none), up to `max_copy_chain`.
    fn copy_depth(&self, src: PageId, deps: Option<&crate::copy_deps::CopyDeps>) -> usize {
        let cap = self.pool.cfg.max_copy_chain;
        let st = self.st.borrow();
        let (mut depth, mut p) = (0, src);
        while depth < cap {
            let from = st
                .index
                .get(&p)
                .and_then(|&i| st.entries[i].copied_from)
                .or_else(|| deps.and_then(|d| d.source_of(p)));
            match from {
                Some(f) => {
                    depth += 1;
                    p = f;
                }
                None => break,
            }
        }
        depth
    }

    /// Appends a non-page record (e.g. `Record::Logical`) to the transaction's group.
    pub fn log_record(&self, record: Record) -> Result<()> {
        if let Some(id) = record.page_id() {
            return Err(PoolError::BadRedo {
                page_id: id,
                lsn: Lsn::ZERO,
                reason: "page records are generated by the write guards".into(),
            });
        }
        let mut st = self.st.borrow_mut();
        st.redo_bytes += 16;
        st.records.push(record);
        Ok(())
    }

    /// Marks the frame latched by `x` as owned by this transaction. Ok(Some(err)) if another
    /// transaction owns it.
    fn own(&self, id: PageId, x: &ExclusiveLatch<'_>) -> Result<Option<PoolError>> {
        let mut m = x.frame().lock_meta();
        if m.owner != 0 && m.owner != self.id {
            return Ok(Some(PoolError::PageBusy { page_id: id }));
        }
        m.set_owner(self.id);
        Ok(None)
    }

    /// Keeps `image`, a copy of page `id`'s committed state (`Versions::copy_of`, or one
    /// offered before, module `precopy`), as this transaction's pending version. Returns it, or
    /// None if it kept none (the test knob `skip_version_copy`).
    fn keep_version(&self, id: PageId, image: Arc<[u8]>) -> Option<Arc<[u8]>> {
        if TestKnobs::on(&self.pool.knobs.skip_version_copy) {
            return None;
        }
        Some(self.pool.versions.add_pending_image(id, self.id, image))
    }

    /// Keeps page `id`'s committed image as undo, this transaction's pending version (module
    /// `versions`, invariant 5), or None with the test knob `skip_version_copy`. Call it under
    /// the exclusive latch, before the first change.
    fn keep_undo_version(&self, id: PageId) -> Option<u32> {
        if TestKnobs::on(&self.pool.knobs.skip_version_copy) {
            return None;
        }
        let versions = &self.pool.versions;
        let mut st = self.st.borrow_mut();
        let t = st.undo_txn.get_or_insert_with(|| versions.begin_undo());
        Some(t.add_page(id.0, self.pool.page_size))
    }

    /// Before page `id` is started afresh: if a snapshot may still read it (freed by this
    /// transaction, or by a commit newer than a registered snapshot) and it is not resident,
    /// keeps its committed image from disk as this transaction's pending version; if it is
    /// resident, returns a pin on its frame, which the caller holds until it has taken the
    /// frame (and keeps the version from the frame as for any page it takes): a frame evicted
    /// between this look and the caller's would be started blank with no version kept. A page
    /// that was never written has no image to keep.
    fn keep_unresident_version(&self, id: PageId) -> Result<Option<u32>> {
        let pool = self.pool;
        let freed_here = {
            let st = self.st.borrow();
            match st.index.get(&id) {
                Some(&i) => {
                    let e = &st.entries[i];
                    if e.versioned || e.frame.is_some() {
                        return Ok(None);
                    }
                    e.freed
                }
                None => false,
            }
        };
        if !(freed_here || pool.versions.has_old_snapshots()) {
            return Ok(None);
        }
        if let Some(f) = pool.lookup_pin(id) {
            return Ok(Some(f));
        }
        let g = match pool.read(id) {
            Ok(g) => g,
            // Never written, or garbage no snapshot could read either: nothing to keep.
            Err(PoolError::Unwritten { .. } | PoolError::Corruption(_)) => return Ok(None),
            // No frame to read the image into while this transaction holds pages: it is too
            // large for the pool, as `take` says of its own claim (this said `NoFreeFrame`,
            // naming no cause the caller can act on: a tester).
            Err(PoolError::NoFreeFrame { .. }) if self.st.borrow().held > 0 => {
                return Err(self.too_large(self.st.borrow().held))
            }
            Err(e) => return Err(e),
        };
        // Read from disk, not from a frame this transaction holds: the page records undo as
        // usual if it becomes resident before the transaction takes it.
        let kept = self.keep_version(id, pool.versions.copy_of(&g)).is_some();
        drop(g);
        if kept {
            let mut st = self.st.borrow_mut();
            let i = match st.index.get(&id) {
                Some(&i) => i,
                None => {
                    let i = st.entries.len();
                    st.entries.push(Entry {
                        page_id: id,
                        frame: None,
                        pre_lsn: Lsn::ZERO,
                        first_init: None,
                        fresh: false,
                        freed: false,
                        latched: false,
                        versioned: true,
                        before: None,
                        lazy: None,
                        copied_from: None,
                    });
                    st.index.insert(id, i);
                    i
                }
            };
            st.entries[i].versioned = true;
        }
        Ok(None)
    }

    /// Lets go of one resident page this transaction freed without changing it and holds (to
    /// drop it unwritten at commit, [`free_page`](Self::free_page)), other than `keep`: the
    /// page stays in the pool as a page freed while not resident does, holding its committed
    /// image, written or evicted like any other page. Its pending version stays (sealed or
    /// discarded with the transaction's others). Returns false if there is none.
    ///
    /// A page the transaction changed is never let go (no-steal): only one it freed and never
    /// took for writing, whose frame holds exactly what the last commit left.
    fn let_go_of_a_freed_page(&self, keep: PageId) -> bool {
        let pool = self.pool;
        let f = {
            let mut st = self.st.borrow_mut();
            let Some(f) = st
                .entries
                .iter_mut()
                .filter(|e| {
                    e.freed && e.first_init.is_none() && !e.fresh && !e.latched && e.page_id != keep
                })
                .find_map(|e| e.frame.take())
            else {
                return false;
            };
            st.held = st.held.saturating_sub(1);
            f
        };
        let fr = &pool.frames[f as usize];
        let x = fr.exclusive();
        fr.lock_meta().set_owner(0);
        drop(x);
        pool.unpin(f);
        pool.txn_pages.fetch_sub(1, Ordering::Relaxed);
        true
    }

    fn too_large(&self, held: usize) -> PoolError {
        bump(&self.pool.c.txn_too_large, 1);
        PoolError::TxnTooLarge {
            txn_pages: held,
            frames: self.pool.frames(),
            limit: self.pool.max_txn_pages,
        }
    }

    fn take(&self, id: PageId, blank: bool) -> Result<PageWriteGuard<'_>> {
        self.check_failed()?;
        self.changes.set(self.changes.get().wrapping_add(1));
        let pool = self.pool;
        // At the limit, a page this transaction freed and holds unchanged makes room: it was held
        // only to leave the pool unwritten at commit.
        if self.st.borrow().held >= pool.max_txn_pages {
            self.let_go_of_a_freed_page(id);
        }
        let held = {
            let mut st = self.st.borrow_mut();
            if let Some(&i) = st.index.get(&id) {
                let held = st.held;
                let e = &mut st.entries[i];
                if e.latched {
                    return Err(PoolError::AlreadyLatched { page_id: id });
                }
                if let Some(f) = e.frame {
                    if e.freed && !blank {
                        return Err(PoolError::BadRedo {
                            page_id: id,
                            lsn: Lsn::ZERO,
                            reason: "page was freed by this transaction; use new_page".into(),
                        });
                    }
                    e.latched = true;
                    e.freed = false;
                    drop(st);
                    let latch = pool.frames[f as usize].exclusive();
                    return Ok(PageWriteGuard {
                        txn: self,
                        entry: i,
                        id,
                        latch,
                    });
                }
                if !blank {
                    return Err(PoolError::BadRedo {
                        page_id: id,
                        lsn: Lsn::ZERO,
                        reason: "page was freed by this transaction; use new_page".into(),
                    });
                }
                if held >= pool.max_txn_pages {
                    return Err(self.too_large(held));
                }
                // Freed earlier in this transaction and not resident: install it below.
                held
            } else {
                if st.held >= pool.max_txn_pages {
                    let held = st.held;
                    drop(st);
                    return Err(self.too_large(held));
                }
                st.held
            }
        };
        let map_err = |e: PoolError| match e {
            PoolError::NoFreeFrame { .. } if held > 0 => self.too_large(held),
            e => e,
        };
        let mut held_pin = if blank {
            self.keep_unresident_version(id)?
        } else {
            None
        };
        if blank && TestKnobs::on(&pool.knobs.evict_before_blank) {
            pool.evict_if_unpinned(id);
        }
        let (f, latch, fresh) = loop {
            if blank {
                let installed = pool.install_blank(id).map_err(map_err);
                // The frame (pinned again by `install_blank` if it is still this page's) can
                // go once it was found, or if it could not be.
                if let Some(p) = held_pin.take() {
                    pool.unpin(p);
                }
                let (f, latched) = installed?;
                let fresh = latched.is_some();
                let fr = &pool.frames[f as usize];
                let x = match latched {
                    Some(x) => x,
                    None => fr.exclusive(),
                };
                if fr.valid.load(Ordering::Acquire) && fr.page_id.load(Ordering::Relaxed) == id.0 {
                    break (f, x, fresh);
                }
                drop(x);
                pool.unpin(f);
            } else {
                let f = pool.fix(id).map_err(map_err)?;
                let fr = &pool.frames[f as usize];
                let x = fr.exclusive();
                if fr.valid.load(Ordering::Acquire) && fr.page_id.load(Ordering::Relaxed) == id.0 {
                    break (f, x, false);
                }
                drop(x);
                pool.unpin(f);
            }
        };
        if let Some(err) = self.own(id, &latch)? {
            drop(latch);
            if fresh {
                // Cannot happen (a fresh frame has no owner), but never leak it.
                pool.unmap(f, id);
            }
            pool.unpin(f);
            return Err(err);
        }
        let pre_lsn = if fresh {
            Lsn::ZERO
        } else {
            BufferPool::header_lsn(latch.bytes())
        };
        let already = {
            let st = self.st.borrow();
            st.index.get(&id).is_some_and(|&i| st.entries[i].versioned)
        };
        // Invariant 1 of module `versions`: the committed image is kept before the first
        // change, under the exclusive latch (a blank frame was nothing any snapshot can read).
        // With no snapshot registered it is kept as undo (invariant 5): a bulk load then copies
        // nothing, and a reader that starts meanwhile rebuilds the image from the frame.
        let (before, lazy) = if already || fresh {
            (None, None)
        } else {
            match self.current_copy(id, &latch) {
                Some(copy) => (self.keep_version(id, copy), None),
                None if !pool.versions.any_registered() => (None, self.keep_undo_version(id)),
                None => (
                    self.keep_version(id, pool.versions.copy_of(latch.bytes())),
                    None,
                ),
            }
        };
        let versioned = already || before.is_some() || lazy.is_some();
        pool.txn_pages.fetch_add(1, Ordering::Relaxed);
        let mut st = self.st.borrow_mut();
        st.held += 1;
        let i = match st.index.get(&id) {
            Some(&i) => {
                let e = &mut st.entries[i];
                e.frame = Some(f);
                e.fresh = fresh;
                e.freed = false;
                e.latched = true;
                e.pre_lsn = pre_lsn;
                e.versioned = versioned;
                e.before = before;
                if lazy.is_some() {
                    e.lazy = lazy;
                }
                i
            }
            None => {
                let i = st.entries.len();
                st.entries.push(Entry {
                    page_id: id,
                    frame: Some(f),
                    pre_lsn,
                    first_init: None,
                    fresh,
                    freed: false,
                    latched: true,
                    versioned,
                    before,
                    lazy,
                    copied_from: None,
                });
                st.index.insert(id, i);
                i
            }
        };
        Ok(PageWriteGuard {
            txn: self,
            entry: i,
            id,
            latch,
        })
    }

    /// Commits: appends the group (full page images first, when needed) to `log`, gives every
    /// changed page the group's end LSN, moves the pages to the flush list (their oldest
    /// modification is the group's start) and releases them. Returns the group's end LSN (the
    /// commit LSN); the caller waits for the log to be durable up to it.
    ///
    /// If the append fails, the transaction is rolled back and the error returned. A
    /// transaction that failed ([`fail`](Self::fail)) is rolled back and
    /// [`PoolError::TxnFailed`] returned: nothing of it is logged.
    ///
    /// The append happens under the pool's checkpoint-decision lock (shared). If it blocks
    /// because the log is full, checkpoints can still advance up to the last published horizon
    /// (`checkpoint_lsn` stops waiting for the lock after 50 ms), but in full-page-writes mode no
    /// new horizon can be published meanwhile, and pages this transaction holds cannot be
    /// written (no-steal). So the checkpointer should act on log-space use well before the log
    /// is full (issue 5's checkpointer does).
    pub fn commit(self, log: &dyn RedoSink) -> Result<Lsn> {
        // Dropped (rolled back) on the error.
        self.check_failed()?;
        self.finished.set(true);
        let pool = self.pool;
        let mut st = self.st.take();
        if st.records.is_empty() {
            self.release(&mut st);
            bump(&pool.c.commits, 1);
            return Ok(log.end_lsn());
        }
        let decision = pool.decision.read();
        let horizon = pool.horizon();
        let mut group: Vec<Record> = Vec::new();
        let mut fpi_bytes = 0usize;
        if pool.store.wants_full_page_images() && !TestKnobs::on(&pool.knobs.skip_full_page_images)
        {
            for (i, e) in st.entries.iter().enumerate() {
                // The page's first change since the horizon: log it as it was before, unless
                // the change starts with a whole-page init and the store spares the image.
                let Some(first_init) = e.first_init else {
                    continue;
                };
                let Some(f) = e.frame else { continue };
                if e.pre_lsn > horizon || !pool.store.should_log_full_page_image(first_init) {
                    continue;
                }
                if e.fresh {
                    // A page installed blank by this transaction: it was nothing before.
                    fpi_bytes += pool.page_size;
                    group.push(Record::PageImage {
                        page_id: e.page_id,
                        image: vec![0; pool.page_size],
                    });
                    continue;
                }
                let image = match &e.before {
                    Some(before) => before.to_vec(),
                    None => {
                        let mut image = pool.frames[f as usize].shared().bytes().to_vec();
                        for u in st.undo.iter().rev().filter(|u| u.entry == i) {
                            image[u.offset..u.offset + u.len]
                                .copy_from_slice(&st.undo_bytes[u.at..u.at + u.len]);
                        }
                        if let (Some(slot), Some(t)) = (e.lazy, &st.undo_txn) {
                            t.undo_copy(slot, &mut image);
                        }
                        image
                    }
                };
                fpi_bytes += image.len();
                group.push(Record::PageImage {
                    page_id: e.page_id,
                    image,
                });
            }
        }
        let images = group.len();
        if images == 0 {
            // No images to put first: the records are the group (no copy of them).
            group = std::mem::take(&mut st.records);
        } else {
            group.append(&mut st.records);
        }
        // Commits that append concurrently (several page transactions committing at once; the
        // store serialises its writers, other users of the pool may not) publish in LSN order.
        let order = pool.publish_order.lock();
        let (start, end) = match log.append_range(&group) {
            Ok(r) => (r.start, r.end),
            Err(e) => {
                drop(order);
                drop(decision);
                self.rollback(&mut st);
                bump(&pool.c.aborts, 1);
                return Err(e);
            }
        };
        // Pages this group freed that stay in the pool unheld (freed past the page limit, or let
        // go of) may be written any time, with their content from before the free: such a
        // write must wait for the free to be durable, since the free resolves the page's
        // pending copies below (`FrameMeta::freed_at`). Marked before the copies are resolved,
        // so a flush that finds them resolved finds the mark.
        for e in st.entries.iter().filter(|e| e.freed && e.frame.is_none()) {
            if let Some(f) = pool.pin_quiet(e.page_id) {
                let fr = &pool.frames[f as usize];
                let mut m = fr.lock_meta();
                if fr.page_id.load(Ordering::Relaxed) == e.page_id.0 {
                    m.freed_at = m.freed_at.max(end);
                }
                drop(m);
                pool.unpin(f);
            }
        }
        // Module `copy_deps`: the copies this group made, and the copies it freed, are known
        // before any of its pages can be written (they are still owned).
        let made = st
            .entries
            .iter()
            .filter(|e| e.copied_from.is_some())
            .count();
        let frees =
            pool.copy_deps_len.load(Ordering::Acquire) > 0 && st.entries.iter().any(|e| e.freed);
        if made > 0 || frees {
            let freed: Vec<PageId> = st
                .entries
                .iter()
                .filter(|e| e.freed)
                .map(|e| e.page_id)
                .collect();
            let copies = st
                .entries
                .iter()
                .filter_map(|e| e.copied_from.map(|src| (src, e.page_id, false)));
            pool.note_copies(copies, &freed, end);
            bump(&pool.c.page_copies, made as u64);
        }
        // The images kept as undo (and copies never used) are let go first, so the versions
        // can recycle them.
        st.entries.iter_mut().for_each(|e| e.before = None);
        st.copies.clear();
        // Module `versions`, invariant 2: seal, then publish. Invariant 5: versions kept as
        // undo are rebuilt before the publish if a snapshot is registered (it reads below this
        // commit); with none, the publish drops them in the same hold of the registry lock. The
        // pages are still owned and unstamped, so frame + undo is the image before this commit.
        pool.versions.seal(self.id, &st.versioned_pages(), end);
        match st.undo_txn.take() {
            None => pool.versions.publish(end),
            Some(t) => {
                pool.versions.seal_undo(&t, end);
                if !pool.versions.publish_if_unregistered(end) {
                    if !TestKnobs::on(&pool.knobs.publish_undo_versions) {
                        let mut kept = Vec::new();
                        for e in st.entries.iter() {
                            if let (Some(slot), Some(f)) = (e.lazy, e.frame) {
                                let frame = pool.frames[f as usize].shared();
                                let image = pool.versions.rebuild(frame.bytes(), &t, slot);
                                pool.versions.add_pending_image(e.page_id, self.id, image);
                                kept.push(e.page_id);
                            }
                        }
                        pool.versions.seal(self.id, &kept, end);
                    }
                    pool.versions.publish(end);
                }
                // Published: no snapshot reads the undo any more (those below the commit
                // read the images just kept). Let go of it before the pages are stamped.
                st.entries.iter_mut().for_each(|e| e.lazy = None);
                pool.versions.end_undo(t);
            }
        }
        drop(order);
        // Copies first (module `copy_deps`): a copy is dirty before its source can be written.
        if made > 0 {
            st.entries.sort_by_key(|e| e.copied_from.is_none());
        }
        for e in st.entries.drain(..) {
            let Some(f) = e.frame else { continue };
            let fr = &pool.frames[f as usize];
            if e.freed {
                // A write of the page that started before this transaction took it must finish
                // before the frame is dropped (see `unmap`); owned, no new one can start.
                pool.wait_not_flushing(f);
            }
            let mut x = fr.exclusive();
            if e.freed {
                // Unwritten: its changes stay needed until this free is durable.
                {
                    let m = fr.lock_meta();
                    if m.dirty {
                        pool.unwritten_frees
                            .lock()
                            .insert((m.oldest, end, e.page_id));
                    }
                }
                pool.unmap(f, e.page_id);
            } else if e.first_init.is_none() {
                fr.lock_meta().set_owner(0);
            } else {
                set_lsn(x.bytes_mut(), end);
                let mut m = fr.lock_meta();
                m.set_owner(0);
                if !m.dirty {
                    m.oldest = start;
                    pool.flush_list.lock().insert((start, e.page_id, f));
                    m.set_dirty(true);
                } else if m.flushing && m.next_oldest.is_none() {
                    m.next_oldest = Some(start);
                }
                m.set_newest(end);
                if e.copied_from.is_some() {
                    // Redo rebuilds it from its source while the copy is pending (the source
                    // is not written past the copy before the copy is durable): until then a
                    // write of it may skip the protection (`flush_list`, init-on-flush).
                    m.rebuildable = true;
                    m.rebuild_from = start;
                    m.rebuild_by_copy = true;
                } else if e.first_init == Some(true) {
                    m.rebuildable = true;
                    m.rebuild_from = start;
                    m.rebuild_by_copy = false;
                }
            }
            drop(x);
            pool.unpin(f);
            pool.txn_pages.fetch_sub(1, Ordering::Relaxed);
        }
        drop(decision);
        pool.note_dirtied();
        bump(&pool.c.commits, 1);
        if images > 0 {
            bump(&pool.c.full_page_images, images as u64);
            bump(&pool.c.full_page_image_bytes, fpi_bytes as u64);
            for _ in 0..images {
                pool.store.count_full_page_image(pool.page_size);
            }
        }
        Ok(end)
    }

    /// Aborts: every page is restored to its state before the transaction; nothing is logged.
    pub fn abort(self) {
        // Drop does the work.
    }

    /// Releases pages without changes (commit of a transaction that logged nothing).
    fn release(&self, st: &mut TxnState) {
        self.rollback(st);
    }

    fn rollback(&self, st: &mut TxnState) {
        let pool = self.pool;
        // Pages kept whole: copy the image back (only if the transaction changed them).
        for e in &mut st.entries {
            let before = e.before.take();
            let (Some(before), Some(f), Some(_)) = (before, e.frame, e.first_init) else {
                continue;
            };
            if e.fresh {
                continue;
            }
            let mut x = pool.frames[f as usize].exclusive();
            x.bytes_mut().copy_from_slice(&before);
        }
        // Pages whose version is undo: undo their own changes (newest first) and mark the slot
        // restored under the same exclusive latch (a reader then rebuilds from the restored page
        // with nothing to undo; undoing a move twice would not give the page back).
        for e in &mut st.entries {
            let lazy = e.lazy.take();
            let (Some(slot), Some(t), Some(f), Some(_)) =
                (lazy, &st.undo_txn, e.frame, e.first_init)
            else {
                continue;
            };
            if e.fresh {
                continue;
            }
            let mut x = pool.frames[f as usize].exclusive();
            t.roll_back(slot, x.bytes_mut());
        }
        for u in st.undo.drain(..).rev() {
            let e = &st.entries[u.entry];
            if e.fresh {
                continue;
            }
            let Some(f) = e.frame else { continue };
            let mut x = pool.frames[f as usize].exclusive();
            x.bytes_mut()[u.offset..u.offset + u.len]
                .copy_from_slice(&st.undo_bytes[u.at..u.at + u.len]);
        }
        st.undo_bytes.clear();
        // The pages are restored: the pending versions are no longer needed.
        let versioned = st.versioned_pages();
        if !versioned.is_empty() {
            pool.versions.discard(self.id, &versioned);
        }
        if let Some(t) = st.undo_txn.take() {
            pool.versions.end_undo(t);
        }
        for e in st.entries.drain(..) {
            let Some(f) = e.frame else { continue };
            let fr = &pool.frames[f as usize];
            let x = fr.exclusive();
            if e.fresh {
                pool.unmap(f, e.page_id);
            } else {
                fr.lock_meta().set_owner(0);
            }
            drop(x);
            pool.unpin(f);
            pool.txn_pages.fetch_sub(1, Ordering::Relaxed);
        }
        st.records.clear();
        st.index.clear();
        st.copies.clear();
        st.held = 0;
    }
}

impl Drop for PageTxn<'_> {
    fn drop(&mut self) {
        // In a forked child the rollback's latches and locks may be held for good by threads
        // of the parent: nothing is undone (the child's copy of the pool is never written).
        if self.pool.forked() {
            return;
        }
        if !self.finished.replace(true) {
            let mut st = self.st.take();
            let had_work = !st.records.is_empty();
            self.rollback(&mut st);
            if had_work {
                bump(&self.pool.c.aborts, 1);
            }
        }
    }
}
