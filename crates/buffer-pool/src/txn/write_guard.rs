//! The write guard: how a write transaction changes a page. Every change is a [`PageOp`] (the
//! one vocabulary of physical page change, with its one bounds check) or a page init; each is
//! applied to the page, recorded as redo in the transaction and, unless the page is fresh in
//! this transaction, its overwritten bytes kept as undo.
//!
//! Invariant (tests `abort_restores_pages_exactly` and `rewrite_logs_exactly_the_change` in
//! `tests/pool.rs`): replaying the recorded redo on the page as it was gives the page as it is, and
//! applying the undo in reverse gives the page as it was; a change refused by the bounds check
//! records nothing and changes nothing.

use super::diff::{diff_runs, SCRATCH};
use super::*;
use keel_page::{check_payload_range, payload_range, OutsidePayload, PageOp};

/// A page latched exclusive by a write transaction; derefs to the page's bytes. Changes go
/// through [`write`](Self::write), [`modify`](Self::modify) and [`init`](Self::init), which
/// change the page and record redo (and undo) in the transaction. Dropping it releases the
/// latch; the transaction keeps the page pinned until it ends.
pub struct PageWriteGuard<'t> {
    pub(super) txn: &'t PageTxn<'t>,
    pub(super) entry: usize,
    pub(super) id: PageId,
    pub(super) latch: ExclusiveLatch<'t>,
}

impl PageWriteGuard<'_> {
    /// The page's id.
    pub fn page_id(&self) -> PageId {
        self.id
    }

    /// The page type in the header.
    pub fn page_type(&self) -> PageType {
        PageHeader::read(self.latch.bytes())
            .map(|h| h.page_type)
            .unwrap_or(PageType::UNWRITTEN)
    }

    /// The page LSN before this transaction (the header keeps it until commit; 0 after init).
    pub fn lsn(&self) -> Lsn {
        BufferPool::header_lsn(self.latch.bytes())
    }

    /// The one bounds check ([`keel_page::check_payload_range`]) as the pool's error.
    fn check(&self, offset: usize, len: usize) -> Result<()> {
        check_payload_range(self.latch.bytes().len(), offset, len)
            .map_err(|e| self.out_of_bounds(e))
    }

    fn out_of_bounds(&self, e: OutsidePayload) -> PoolError {
        outside(self.id, e)
    }

    /// Applies one physical change ([`PageOp`], the vocabulary the B-tree and redo apply use,
    /// with its one bounds check) and records it: a `PageWrite` (12 bytes + data of redo) or a
    /// `PageMove` (21 bytes, whatever the length), and the overwritten bytes as undo.
    ///
    /// # Errors
    ///
    /// [`PoolError::OutOfBounds`] when a range leaves the payload; nothing is changed then.
    pub fn apply(&mut self, op: PageOp<'_>) -> Result<()> {
        op.check(self.latch.bytes().len())
            .map_err(|e| self.out_of_bounds(e))?;
        if op.is_noop() {
            return Ok(());
        }
        // Offsets within a checked payload (pages are at most 64 KiB) always fit the record.
        let record = Record::from_page_op(self.id, op).ok_or_else(|| {
            let (offset, len) = op.target();
            let payload = payload_range(self.latch.bytes().len());
            outside_range(self.id, offset, len, payload)
        })?;
        let id = self.id;
        let page = self.latch.bytes_mut();
        let mut st = self.txn.st.borrow_mut();
        let over = st.entries[self.entry].needs_undo() && st.push_undo_op(self.entry, op, page);
        op.apply(page).map_err(|e| outside(id, e))?;
        if over {
            st.after_change(self.entry, page);
        }
        st.redo_bytes += match op {
            PageOp::Write { bytes, .. } => bytes.len() + 12,
            PageOp::Move { .. } => 21,
        };
        st.records.push(record);
        st.entries[self.entry].note(false);
        Ok(())
    }

    /// Writes `bytes` at `offset` (within the payload) and records a PageWrite.
    ///
    /// # Errors
    ///
    /// [`PoolError::OutOfBounds`]; nothing is changed then.
    pub fn write(&mut self, offset: usize, bytes: &[u8]) -> Result<()> {
        self.apply(PageOp::Write { offset, bytes })
    }

    /// Moves `len` bytes from `src` to `dst` within the payload (as `memmove`; the ranges may
    /// overlap) and records one PageMove (21 bytes of redo, whatever `len` is).
    ///
    /// # Errors
    ///
    /// [`PoolError::OutOfBounds`]; nothing is changed then.
    pub fn move_within(&mut self, src: usize, dst: usize, len: usize) -> Result<()> {
        self.apply(PageOp::Move { src, dst, len })
    }

    /// Lets `f` change `len` bytes at `offset` in place, then records the bytes that changed
    /// (trimmed to the first..last differing byte) as one PageWrite.
    ///
    /// # Errors
    ///
    /// [`PoolError::OutOfBounds`] before `f` runs; nothing is changed then.
    pub fn modify<R>(
        &mut self,
        offset: usize,
        len: usize,
        f: impl FnOnce(&mut [u8]) -> R,
    ) -> Result<R> {
        self.check(offset, len)?;
        let page = self.latch.bytes_mut();
        let old = page[offset..offset + len].to_vec();
        let r = f(&mut page[offset..offset + len]);
        let new = &page[offset..offset + len];
        let Some(a) = (0..len).find(|&i| old[i] != new[i]) else {
            return Ok(r);
        };
        let b = (a..len).rev().find(|&i| old[i] != new[i]).map_or(a, |i| i) + 1;
        let bytes = keel_redo_log::WriteBytes::from_slice(&new[a..b]);
        let mut st = self.txn.st.borrow_mut();
        if st.entries[self.entry].needs_undo() && st.push_undo(self.entry, offset + a, &old[a..b]) {
            // The change is made already: frame and undo match.
            st.after_change(self.entry, self.latch.bytes());
        }
        st.redo_bytes += bytes.len() + 12;
        st.records.push(Record::PageWrite {
            page_id: self.id,
            offset: (offset + a) as u32,
            bytes,
        });
        st.entries[self.entry].note(false);
        Ok(r)
    }

    /// Lets `f` change the page freely (on a copy), then applies and records each run of
    /// payload bytes that differ as one PageWrite (runs closer than `MERGE_GAP` (16) bytes are
    /// merged). Replaying the redo on the old page gives exactly the new page. This is how a
    /// change whose exact edits are unknown (a node rebuilt after a split) becomes redo.
    ///
    /// `f` must leave the header and trailer alone: bytes it changes there are not kept.
    ///
    /// # Errors
    ///
    /// [`PoolError::OutOfBounds`] cannot occur for runs found in the payload; any error of
    /// [`PageWriteGuard::apply`] is returned after the runs before it were applied.
    pub fn rewrite<R>(&mut self, f: impl FnOnce(&mut [u8]) -> R) -> Result<R> {
        let change = |new: &mut Vec<u8>, g: &mut Self| -> Result<R> {
            new.clear();
            new.extend_from_slice(g.latch.bytes());
            let r = f(new);
            let payload = payload_range(new.len());
            for (off, len) in diff_runs(g.latch.bytes(), new, payload.start, payload.end) {
                g.apply(PageOp::Write {
                    offset: off,
                    bytes: &new[off..off + len],
                })?;
            }
            Ok(r)
        };
        SCRATCH.with(|cell| match cell.try_borrow_mut() {
            Ok(mut scratch) => change(&mut scratch, self),
            Err(_) => change(&mut Vec::new(), self),
        })
    }

    /// Makes the page a copy of `src` (the bytes of page `src_id`, latched by the caller) and
    /// records a PageCopy ([`PageTxn::copy_page`] checks when that is allowed).
    pub(super) fn copy_from(&mut self, src: &[u8], src_id: PageId) {
        let id = self.id;
        let page = self.latch.bytes_mut();
        let mut st = self.txn.st.borrow_mut();
        let over = st.entries[self.entry].needs_undo() && st.push_undo(self.entry, 0, page);
        apply_copy(page, src, id);
        if over {
            st.after_change(self.entry, page);
        }
        st.redo_bytes += 17;
        st.records.push(Record::PageCopy {
            page_id: id,
            from: src_id,
        });
        st.entries[self.entry].copied_from = Some(src_id);
    }

    /// Re-initialises the page as `page_type` (all payload zero) and records a PageInit.
    pub fn init(&mut self, page_type: PageType) {
        let id = self.id;
        let page = self.latch.bytes_mut();
        let mut st = self.txn.st.borrow_mut();
        let over = st.entries[self.entry].needs_undo() && st.push_undo(self.entry, 0, page);
        apply_init(page, id, page_type);
        if over {
            st.after_change(self.entry, page);
        }
        st.redo_bytes += 10;
        st.records.push(Record::PageInit {
            page_id: id,
            page_type,
        });
        st.entries[self.entry].note(true);
    }
}

impl Deref for PageWriteGuard<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.latch.bytes()
    }
}

impl Drop for PageWriteGuard<'_> {
    fn drop(&mut self) {
        if let Ok(mut st) = self.txn.st.try_borrow_mut() {
            if let Some(e) = st.entries.get_mut(self.entry) {
                e.latched = false;
            }
        }
    }
}

impl std::fmt::Debug for PageWriteGuard<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PageWriteGuard({})", self.id)
    }
}

/// The pool's error for an op outside the payload of page `id` (one mapping for every caller).
fn outside(page_id: PageId, e: OutsidePayload) -> PoolError {
    outside_range(page_id, e.offset, e.len, e.min..e.max)
}

fn outside_range(
    page_id: PageId,
    offset: usize,
    len: usize,
    payload: std::ops::Range<usize>,
) -> PoolError {
    PoolError::OutOfBounds {
        page_id,
        offset,
        len,
        min: payload.start,
        max: payload.end,
    }
}
