//! Read guards: a pin plus the frame latch held shared — or, for a page read outside the pool
//! (a poisoned store whose frames are all dirty: `BufferPool::read`), a buffer of its own.
//!
//! Invariant: a guard releases its latch before its pin (field order), so a frame is never
//! unpinned while latched by the guard's owner.

use crate::frame::SharedLatch;
use crate::BufferPool;
use keel_io::AlignedBuf;
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
    held: Held<'a>,
}

/// What a read guard holds.
enum Held<'a> {
    /// A frame: field order matters, the latch is released before the pin.
    Frame {
        latch: SharedLatch<'a>,
        _pin: PinGuard<'a>,
    },
    /// The page read outside the pool.
    Own(AlignedBuf),
}

impl<'a> PageReadGuard<'a> {
    pub(crate) fn new(id: PageId, latch: SharedLatch<'a>, pin: PinGuard<'a>) -> PageReadGuard<'a> {
        PageReadGuard {
            id,
            held: Held::Frame { latch, _pin: pin },
        }
    }

    /// A page read outside the pool, into `bytes`.
    pub(crate) fn own(id: PageId, bytes: AlignedBuf) -> PageReadGuard<'a> {
        PageReadGuard {
            id,
            held: Held::Own(bytes),
        }
    }

    fn bytes(&self) -> &[u8] {
        match &self.held {
            Held::Frame { latch, .. } => latch.bytes(),
            Held::Own(b) => b,
        }
    }

    /// The page's id.
    pub fn page_id(&self) -> PageId {
        self.id
    }

    /// The page LSN in the header (end LSN of the newest committed change).
    pub fn lsn(&self) -> Lsn {
        BufferPool::header_lsn(self.bytes())
    }

    /// The page type in the header.
    pub fn page_type(&self) -> PageType {
        PageHeader::read(self.bytes())
            .map(|h| h.page_type)
            .unwrap_or(PageType::UNWRITTEN)
    }
}

impl Deref for PageReadGuard<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.bytes()
    }
}

impl std::fmt::Debug for PageReadGuard<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PageReadGuard({})", self.id)
    }
}
