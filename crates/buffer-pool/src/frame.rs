//! Frames: the pool's page-sized slots, their latches, pins and dirty metadata.
//!
//! Invariants this module keeps:
//! - a frame's bytes are only read while its latch is held shared or exclusive, and only
//!   written while it is held exclusive ([`SharedLatch`] / [`ExclusiveLatch`] are the only ways
//!   to reach the bytes);
//! - `Frame::dirty`, `owned` and `flushing` mirror the fields of [`FrameMeta`] and are only
//!   written with the meta mutex held (they exist so scans can skip frames without locking).

use keel_page::Lsn;
use parking_lot::lock_api::RawRwLock as _;
use parking_lot::{Mutex, RawRwLock};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64};

/// `Frame::page_id` of a frame that holds no page.
pub(crate) const NO_PAGE: u64 = u64::MAX;

/// Dirty-tracking state of a frame (protected by `Frame::meta`).
#[derive(Debug, Default, Clone)]
pub(crate) struct FrameMeta {
    /// Holds committed changes that are not on disk.
    pub dirty: bool,
    /// Lower bound of the start LSN of the oldest group whose change is not on disk (the frame's
    /// flush-list key while dirty).
    pub oldest: Lsn,
    /// End LSN of the newest committed change (= the page LSN).
    pub newest: Lsn,
    /// Id of the uncommitted transaction that holds changes to the page (0: none).
    pub owner: u64,
    /// Redo since some checkpoint begins with a PageInit of this page at `rebuild_from`.
    pub rebuildable: bool,
    /// Start-LSN lower bound of the group holding the newest PageInit of the page.
    pub rebuild_from: Lsn,
    /// A flusher copied the page and is writing it.
    pub flushing: bool,
    /// `newest` when the flusher copied the page.
    pub copy_lsn: Lsn,
    /// Oldest change committed after the flusher's copy (becomes `oldest` if the page stays
    /// dirty after the write).
    pub next_oldest: Option<Lsn>,
}

/// One frame.
#[repr(align(64))]
pub(crate) struct Frame {
    latch: RawRwLock,
    /// Pins: while non-zero the frame keeps its page (no eviction).
    pub pin: AtomicU32,
    /// CLOCK reference bit.
    pub referenced: AtomicBool,
    /// The bytes hold the page `page_id` (false while loading or after a failed load).
    pub valid: AtomicBool,
    /// Mirror of `meta.dirty`.
    pub dirty: AtomicBool,
    /// Mirror of `meta.owner != 0`.
    pub owned: AtomicBool,
    /// Mirror of `meta.flushing`.
    pub flushing: AtomicBool,
    /// The page held, or [`NO_PAGE`].
    pub page_id: AtomicU64,
    /// Dirty-tracking state.
    pub meta: Mutex<FrameMeta>,
    data: NonNull<u8>,
    len: usize,
}

// SAFETY: `data` points into the pool's arena, which outlives every frame (both are owned by the
// BufferPool and the arena is dropped after the frames). Every access to the bytes goes through
// the frame's latch (SharedLatch / ExclusiveLatch), which provides the synchronisation; all other
// fields are atomics or mutexes.
unsafe impl Send for Frame {}
// SAFETY: as for Send: shared access to the bytes is only through the latch guards below.
unsafe impl Sync for Frame {}

impl Frame {
    /// A free frame over `len` bytes at `data`.
    pub fn new(data: NonNull<u8>, len: usize) -> Frame {
        Frame {
            latch: RawRwLock::INIT,
            pin: AtomicU32::new(0),
            referenced: AtomicBool::new(false),
            valid: AtomicBool::new(false),
            dirty: AtomicBool::new(false),
            owned: AtomicBool::new(false),
            flushing: AtomicBool::new(false),
            page_id: AtomicU64::new(NO_PAGE),
            meta: Mutex::new(FrameMeta::default()),
            data,
            len,
        }
    }

    /// Takes the latch shared (blocks).
    pub fn shared(&self) -> SharedLatch<'_> {
        self.latch.lock_shared();
        SharedLatch { frame: self }
    }

    /// Takes the latch shared if no one holds it exclusive.
    pub fn try_shared(&self) -> Option<SharedLatch<'_>> {
        // Not `then_some(SharedLatch { .. })`: that builds (and drops, unlocking) a guard even
        // when the lock was not taken.
        if self.latch.try_lock_shared() {
            Some(SharedLatch { frame: self })
        } else {
            None
        }
    }

    /// Takes the latch exclusive (blocks).
    pub fn exclusive(&self) -> ExclusiveLatch<'_> {
        self.latch.lock_exclusive();
        ExclusiveLatch { frame: self }
    }
}

/// The frame's latch held shared: read access to its bytes.
pub(crate) struct SharedLatch<'a> {
    frame: &'a Frame,
}

impl SharedLatch<'_> {
    /// The frame's bytes.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: the shared latch is held for the lifetime of `self`, so no exclusive holder can
        // write the bytes; `data` is valid for `len` bytes for the pool's lifetime (see Frame).
        unsafe { std::slice::from_raw_parts(self.frame.data.as_ptr(), self.frame.len) }
    }
}

impl Drop for SharedLatch<'_> {
    fn drop(&mut self) {
        // SAFETY: this guard was created by a successful lock_shared / try_lock_shared on this
        // latch and is dropped exactly once.
        unsafe { self.frame.latch.unlock_shared() }
    }
}

/// The frame's latch held exclusive: read and write access to its bytes.
pub(crate) struct ExclusiveLatch<'a> {
    frame: &'a Frame,
}

impl<'a> ExclusiveLatch<'a> {
    /// The frame's bytes.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: the exclusive latch is held for the lifetime of `self`; see Frame for `data`.
        unsafe { std::slice::from_raw_parts(self.frame.data.as_ptr(), self.frame.len) }
    }

    /// The frame's bytes, writable.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: the exclusive latch is held for the lifetime of `self` and `&mut self` makes
        // this the only reference derived from it; see Frame for `data`.
        unsafe { std::slice::from_raw_parts_mut(self.frame.data.as_ptr(), self.frame.len) }
    }

    /// The frame.
    pub fn frame(&self) -> &'a Frame {
        self.frame
    }
}

impl Drop for ExclusiveLatch<'_> {
    fn drop(&mut self) {
        // SAFETY: this guard was created by lock_exclusive on this latch and is dropped once.
        unsafe { self.frame.latch.unlock_exclusive() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_io::AlignedBuf;
    use std::sync::atomic::Ordering;
    use std::time::{Duration, Instant};

    /// A guard exists only for a latch actually taken: a failed `try_shared` must leave the
    /// latch exactly as it was. A try fails when a writer has announced itself while readers
    /// still hold the latch; building the guard anyway (the bug this test was written for)
    /// unlocks one of *their* reader counts, so the writer gets in while a reader still reads
    /// (or, in other interleavings, waits forever).
    #[test]
    fn a_failed_try_shared_leaves_the_latch_intact() {
        let mut buf = AlignedBuf::page(4096);
        let f = Frame::new(NonNull::new(buf.as_mut_ptr()).unwrap(), 4096);
        let writer_in = AtomicBool::new(false);
        std::thread::scope(|s| {
            let reader = f.shared();
            let w = s.spawn(|| {
                let mut x = f.exclusive();
                writer_in.store(true, Ordering::SeqCst);
                x.bytes_mut()[0] = 7;
            });
            // Wait until the writer has announced itself (and waits for the reader).
            let t0 = Instant::now();
            while !f.latch.is_locked_exclusive() {
                assert!(t0.elapsed() < Duration::from_secs(10), "writer never came");
                std::thread::yield_now();
            }
            for _ in 0..3 {
                assert!(f.try_shared().is_none());
            }
            std::thread::sleep(Duration::from_millis(50));
            assert!(
                !writer_in.load(Ordering::SeqCst),
                "the writer got the latch while a reader holds it"
            );
            assert_eq!(reader.bytes()[0], 0);
            drop(reader);
            w.join().unwrap();
        });
        assert!(writer_in.load(Ordering::SeqCst));
        assert!(!f.latch.is_locked());
        assert_eq!(f.shared().bytes()[0], 7);
    }
}
