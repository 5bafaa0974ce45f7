//! Committed page images copied before a transaction takes its pages, so the copy its first
//! change of each page needs (the pending version for snapshot readers, module `versions`,
//! which is also the page's undo) can be made outside a serial section.
//!
//! A concurrent commit applies its writes under the store's writer lock; copying each page it
//! first changes (16 KiB) was the largest part of that hold. The store copies the pages it
//! expects to change before it takes the lock ([`BufferPool::copy_committed`]) and offers the
//! copies to the page transaction ([`PageTxn::offer_copies`]); when the transaction takes one of
//! those pages, it uses the copy instead of copying again, if the copy is still the page's
//! committed state.
//!
//! # Invariant (test `tests/pool.rs: a_stale_copy_is_never_used`, which the knob
//! `trust_stale_copies` breaks)
//!
//! A copy is used only if it is the page exactly as it is when the transaction takes it. The
//! check is cheap because of how pages change:
//!
//! 1. A copy is taken under the frame's shared latch from a page no transaction owns, so it is
//!    a committed state: every change needs the exclusive latch, and a page with uncommitted
//!    changes stays owned until its transaction commits or rolls back.
//! 2. From then on the payload changes only through a page transaction, which either commits,
//!    giving the page the group's end LSN (greater than any page LSN before it), or rolls back,
//!    restoring every byte. A page freed and started afresh gets its new LSN the same way; one
//!    evicted and read back is the same bytes with the same header.
//!
//! So a copy whose header (with its LSN) and trailer equal the page's, when the transaction
//! takes the page under its exclusive latch, holds the page's bytes ([`still_current`]).
//! Anything else (the page changed, was evicted and its checksum trailer differs, or any doubt)
//! and the copy is dropped and the page copied as before.

use crate::frame::ExclusiveLatch;
use crate::stats::bump;
use crate::{BufferPool, PageTxn};
use keel_page::{Lsn, PageId, PAGE_HEADER_SIZE, PAGE_TRAILER_SIZE};
use std::sync::Arc;

use super::TestKnobs;

/// A page's committed image copied before a transaction takes the page (see the module docs).
/// Only the pool makes one.
#[derive(Debug)]
pub struct CommittedCopy {
    pub(super) id: PageId,
    pub(super) image: Arc<[u8]>,
}

impl CommittedCopy {
    /// The page it is a copy of.
    pub fn page_id(&self) -> PageId {
        self.id
    }
}

impl BufferPool {
    /// A copy of page `id` as committed, if it is resident, no transaction owns it (an
    /// uncommitted change may be in its frame) and its LSN is at most `not_after`; `None`
    /// otherwise. Never reads from disk. A page changed after `not_after` (say, since the
    /// caller's snapshot) is likely to change again before the copy is used, so it is left to
    /// be copied when it is taken.
    pub fn copy_committed(&self, id: PageId, not_after: Lsn) -> Option<CommittedCopy> {
        let f = self.lookup_pin(id)?;
        let fr = &self.frames[f as usize];
        let copy = {
            let x = fr.shared();
            let mine = fr.valid.load(std::sync::atomic::Ordering::Acquire)
                && fr.page_id.load(std::sync::atomic::Ordering::Relaxed) == id.0;
            // Invariant 1: owned pages may hold uncommitted bytes.
            let settled = BufferPool::header_lsn(x.bytes()) <= not_after;
            (mine && settled && fr.lock_meta().owner == 0).then(|| CommittedCopy {
                id,
                image: self.versions.copy_of(x.bytes()),
            })
        };
        self.unpin(f);
        copy
    }
}

impl PageTxn<'_> {
    /// Offers copies made by [`BufferPool::copy_committed`] for the pages this transaction is
    /// about to change: taking such a page uses its copy, if it is still current, instead of
    /// copying the page again. Copies of pages the transaction never takes are dropped at its
    /// end.
    pub fn offer_copies(&self, copies: impl IntoIterator<Item = CommittedCopy>) {
        let mut st = self.st.borrow_mut();
        for c in copies {
            st.copies.insert(c.id, c.image);
        }
    }

    /// The offered copy of page `id`, if there is one and it is still the page under `latch`
    /// (counted as used or stale).
    pub(super) fn current_copy(&self, id: PageId, latch: &ExclusiveLatch<'_>) -> Option<Arc<[u8]>> {
        let copy = self.st.borrow_mut().copies.remove(&id)?;
        let pool = self.pool;
        if TestKnobs::on(&pool.knobs.trust_stale_copies) || still_current(&copy, latch.bytes()) {
            bump(&pool.c.copies_used, 1);
            Some(copy)
        } else {
            bump(&pool.c.copies_stale, 1);
            None
        }
    }
}

/// Whether `copy` is still `page` (see the module docs): same length, header (page id, type,
/// LSN) and trailer.
pub(crate) fn still_current(copy: &[u8], page: &[u8]) -> bool {
    let n = page.len();
    copy.len() == n
        && n >= PAGE_HEADER_SIZE + PAGE_TRAILER_SIZE
        && copy[..PAGE_HEADER_SIZE] == page[..PAGE_HEADER_SIZE]
        && copy[n - PAGE_TRAILER_SIZE..] == page[n - PAGE_TRAILER_SIZE..]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_differing_in_header_or_trailer_is_stale() {
        let n = 4096;
        let page: Vec<u8> = (0..n).map(|i| i as u8).collect();
        assert!(still_current(&page, &page));
        let mut lsn = page.clone();
        lsn[PAGE_HEADER_SIZE - 1] ^= 1;
        assert!(!still_current(&lsn, &page));
        let mut trailer = page.clone();
        trailer[n - 1] ^= 1;
        assert!(!still_current(&trailer, &page));
        assert!(!still_current(&page[..n - 8], &page));
        // The payload is not compared: the LSN rule covers it.
        let mut payload = page.clone();
        payload[PAGE_HEADER_SIZE] ^= 1;
        assert!(still_current(&payload, &page));
    }
}
