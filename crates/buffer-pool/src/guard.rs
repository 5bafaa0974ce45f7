//! Read guards: a pin plus the frame latch held shared.
//!
//! Invariant: a guard releases its latch before its pin (field order), so a frame is never
//! unpinned while latched by the guard's owner.

use crate::frame::SharedLatch;
use crate::BufferPool;
use keel_page::{Lsn, PageHeader, PageId, PageType};
use std::ops::Deref;

/// A pin on a frame, released on drop.
pub(crate) struct PinGuard<'a> {
    pool: &'a BufferPool,
    frame: u32,
}

impl<'a> PinGuard<'a> {
    /// Takes over a pin already counted on `frame`.
    pub fn new(pool: &'a BufferPool, frame: u32) -> PinGuard<'a> {
        PinGuard { pool, frame }
    }
}

impl Drop for PinGuard<'_> {
    fn drop(&mut self) {
        self.pool.unpin(self.frame);
    }
}

/// A page pinned in the pool and latched shared; derefs to the page's bytes. Dropping it
/// releases the latch, then the pin.
pub struct PageReadGuard<'a> {
    id: PageId,
    // Field order matters: the latch is released before the pin.
    latch: SharedLatch<'a>,
    _pin: PinGuard<'a>,
}

impl<'a> PageReadGuard<'a> {
    pub(crate) fn new(id: PageId, latch: SharedLatch<'a>, pin: PinGuard<'a>) -> PageReadGuard<'a> {
        PageReadGuard {
            id,
            latch,
            _pin: pin,
        }
    }

    /// The page's id.
    pub fn page_id(&self) -> PageId {
        self.id
    }

    /// The page LSN in the header (end LSN of the newest committed change).
    pub fn lsn(&self) -> Lsn {
        BufferPool::header_lsn(self.latch.bytes())
    }

    /// The page type in the header.
    pub fn page_type(&self) -> PageType {
        PageHeader::read(self.latch.bytes())
            .map(|h| h.page_type)
            .unwrap_or(PageType::UNWRITTEN)
    }
}

impl Deref for PageReadGuard<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.latch.bytes()
    }
}

impl std::fmt::Debug for PageReadGuard<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PageReadGuard({})", self.id)
    }
}
