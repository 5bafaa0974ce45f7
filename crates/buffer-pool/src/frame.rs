//! Frames: the pool's page-sized slots, their latches, pins and dirty metadata.
//!
//! Invariants this module keeps:
//! - a frame's bytes are only read while its latch is held shared or exclusive, and only
//!   written while it is held exclusive ([`SharedLatch`] / [`ExclusiveLatch`] are the only ways
//!   to reach the bytes);
//! - **Mirrors**: `Frame::dirty`, `owned` and `flushing` mirror the fields of [`FrameMeta`]
//!   (they exist so scans can skip frames without locking). The meta is reached only through
//!   [`Frame::lock_meta`], the mirrors are written only by [`MetaGuard`]'s setters, and
//!   releasing the guard asserts that they agree with the meta ([`Frame::check_mirrors`], three
//!   relaxed loads). Test: `disagreeing_mirrors_are_caught`.
//! - **Page LSN monotonicity**: a frame's `FrameMeta::newest` (the page LSN of its newest
//!   committed change, set by commits and by redo application) never goes backwards while the
//!   frame holds the page ([`FrameMeta::set_newest`] asserts it; it is in-memory state fed by
//!   the log's own LSNs, never by page bytes read from disk). Test:
//!   `a_page_lsn_going_backwards_is_caught`.
//! - **Version (seqlock)**: `Frame::version` is odd exactly while the latch is held exclusive
//!   (it is raised by one right after the latch is taken exclusive and again right before it
//!   is released), and it changes (by two) whenever the frame's page identity changes
//!   ([`Frame::bump_identity`]: eviction, unmapping). So a reader that reads the version (even),
//!   then the bytes, then the same version again, read a consistent image of one page without
//!   taking the latch ([`Frame::optimistic_words`], `BufferPool::read_optimistic`). Tests:
//!   `optimistic/tests.rs` (a reader that skips the re-check sees torn and replaced pages, the
//!   real one never does) and `exclusive_latch_makes_the_version_odd` below.

use keel_page::Lsn;
use parking_lot::lock_api::RawRwLock as _;
use parking_lot::{Mutex, MutexGuard, RawRwLock};
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;
use std::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, Ordering};

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
    /// Redo since some checkpoint begins with a PageInit of this page at `rebuild_from` (or,
    /// with `rebuild_by_copy`, with the PageCopy that made it).
    pub rebuildable: bool,
    /// Start-LSN lower bound of the group holding the newest PageInit (or PageCopy) of the page.
    pub rebuild_from: Lsn,
    /// The rebuild point is a PageCopy: redo rebuilds the page from its source only while the
    /// source is not on disk past the copy, that is, while the copy is pending (module
    /// `copy_deps`), so only then may a write of it skip the torn-page protection.
    pub rebuild_by_copy: bool,
    /// A flusher copied the page and is writing it.
    pub flushing: bool,
    /// `newest` when the flusher copied the page.
    pub copy_lsn: Lsn,
    /// Oldest change committed after the flusher's copy (becomes `oldest` if the page stays
    /// dirty after the write).
    pub next_oldest: Option<Lsn>,
    /// End LSN of the commit that freed the page while it stayed in the pool, not held by the
    /// freeing transaction (freed past its page limit, or let go of to make room): its frame
    /// may still be written, with the content from before the free, and such a write waits
    /// for the log to be durable here first (module `copy_deps`: the free resolved the pending
    /// copies of the page, on the promise that no version of it reaches disk before the free
    /// is durable). `Lsn::ZERO`: none.
    pub freed_at: Lsn,
}

impl FrameMeta {
    /// Records `end` as the page LSN of the newest committed change.
    ///
    /// Panics if that would move the page LSN backwards: `newest` only ever comes from the
    /// log's LSNs in this process (it starts at zero whenever the frame takes a page), so a
    /// smaller `end` is a bug in the pool or its log, not something a disk can cause.
    pub fn set_newest(&mut self, end: Lsn) {
        assert!(
            end >= self.newest,
            "page LSN going backwards: {end} after {}",
            self.newest
        );
        self.newest = end;
    }
}

/// One frame. `repr(C)`: the fields an optimistic read touches (latch, version, page id,
/// valid, data pointer) share the first cache line.
#[repr(C, align(64))]
pub(crate) struct Frame {
    latch: RawRwLock,
    /// Seqlock version: odd while latched exclusive; changes on every exclusive latch and on
    /// every change of the page held (see the module invariants).
    version: AtomicU64,
    /// The page held, or [`NO_PAGE`].
    pub page_id: AtomicU64,
    data: NonNull<u8>,
    len: usize,
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
    /// On the free list (set by `push_free`, cleared by `pop_free`: module `free_list`). A new
    /// frame is: a new pool puts every frame there.
    pub on_free: AtomicBool,
    /// Dirty-tracking state (through [`Frame::lock_meta`] only).
    meta: Mutex<FrameMeta>,
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
            version: AtomicU64::new(0),
            pin: AtomicU32::new(0),
            referenced: AtomicBool::new(false),
            valid: AtomicBool::new(false),
            dirty: AtomicBool::new(false),
            owned: AtomicBool::new(false),
            flushing: AtomicBool::new(false),
            on_free: AtomicBool::new(true),
            page_id: AtomicU64::new(NO_PAGE),
            meta: Mutex::new(FrameMeta::default()),
            data,
            len,
        }
    }

    /// The version now (Acquire: the reads of an optimistic reader that follow cannot move
    /// before it).
    #[inline]
    pub fn version(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }

    /// Whether the version is still `v`, after an optimistic reader's reads (an Acquire fence
    /// orders those reads before this load).
    #[inline]
    pub fn version_is(&self, v: u64) -> bool {
        fence(Ordering::Acquire);
        self.version.load(Ordering::Relaxed) == v
    }

    /// Takes the frame if nobody holds it (pin 0 → 1): the caller then owns it. How an evictor,
    /// a claim from the free list and a last unpin that frees a frame each take one.
    #[inline]
    pub fn take(&self) -> bool {
        self.pin
            .compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    /// Marks a change of the page the frame holds (eviction, unmapping): optimistic readers
    /// that started before it fail their validation. Call after storing the new `page_id`.
    pub fn bump_identity(&self) {
        self.version.fetch_add(2, Ordering::Release);
    }

    /// The frame's bytes as aligned little-endian 8-byte words, for optimistic readers: the
    /// words may change while they are read (a writer may hold the latch exclusive), so load
    /// them with `Ordering::Relaxed`, decode them with bounds checks and trust nothing decoded
    /// until the version has been validated (`version` before, `version_is` after).
    #[inline]
    pub fn optimistic_words(&self) -> &[AtomicU64] {
        // SAFETY: `data` is valid for `len` bytes for the pool's lifetime (see Frame) and
        // page-aligned (the arena is page-aligned and frames are page-size multiples apart), so
        // it is aligned for `AtomicU64`; `len` is a multiple of 8 (page sizes are powers of two
        // of at least 4 KiB). Every access through the slice is an atomic load, and nothing
        // here creates a non-atomic reference to the bytes. Writers change the bytes through
        // `ExclusiveLatch::bytes_mut` while such a slice may be read: that is the seqlock
        // pattern, where a reader may observe a mix of old and new words but discards what it
        // read unless the version shows no writer was active (see UNSAFE.md for the caveat).
        unsafe { std::slice::from_raw_parts(self.data.as_ptr().cast::<AtomicU64>(), self.len / 8) }
    }

    /// Locks the frame's dirty-tracking state.
    pub fn lock_meta(&self) -> MetaGuard<'_> {
        MetaGuard {
            frame: self,
            meta: self.meta.lock(),
        }
    }

    /// Asserts that the mirrors `dirty`, `owned` and `flushing` agree with `m`, the frame's
    /// meta, locked by the caller (the mirrors are only written with it locked, so they cannot
    /// change under the check).
    pub fn check_mirrors(&self, m: &FrameMeta) {
        let mirrors = (
            self.dirty.load(Ordering::Relaxed),
            self.owned.load(Ordering::Relaxed),
            self.flushing.load(Ordering::Relaxed),
        );
        let meta = (m.dirty, m.owner != 0, m.flushing);
        assert!(
            mirrors == meta,
            "frame mirrors (dirty, owned, flushing) = {mirrors:?} disagree with its meta {meta:?}"
        );
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

    /// Takes the latch exclusive (blocks) and makes the version odd.
    pub fn exclusive(&self) -> ExclusiveLatch<'_> {
        self.latch.lock_exclusive();
        // Odd before any byte changes: the Release fence keeps the writes that follow after
        // the version change for a reader that sees them.
        self.version.fetch_add(1, Ordering::Acquire);
        fence(Ordering::Release);
        ExclusiveLatch { frame: self }
    }
}

/// A frame's [`FrameMeta`], locked. The only writer of the frame's mirrors (`dirty`, `owned`,
/// `flushing`): set those fields through [`set_dirty`](Self::set_dirty),
/// [`set_owner`](Self::set_owner) and [`set_flushing`](Self::set_flushing). Dropping it
/// checks that the mirrors agree with the meta ([`Frame::check_mirrors`]).
pub(crate) struct MetaGuard<'a> {
    frame: &'a Frame,
    meta: MutexGuard<'a, FrameMeta>,
}

impl MetaGuard<'_> {
    /// Sets `dirty` and its mirror (Release: a reader that sees the frame clean under the
    /// page-table lock sees everything before it).
    pub fn set_dirty(&mut self, dirty: bool) {
        self.meta.dirty = dirty;
        self.frame.dirty.store(dirty, Ordering::Release);
    }

    /// Sets `owner` (0: none) and its mirror `owned`.
    pub fn set_owner(&mut self, owner: u64) {
        self.meta.owner = owner;
        self.frame.owned.store(owner != 0, Ordering::Relaxed);
    }

    /// Sets `flushing` and its mirror.
    pub fn set_flushing(&mut self, flushing: bool) {
        self.meta.flushing = flushing;
        self.frame.flushing.store(flushing, Ordering::Relaxed);
    }

    /// Forgets all dirty-tracking state (the frame takes another page or none). Leaves the
    /// mirrors alone: a frame that is dirty, owned or being written must have had them cleared
    /// through the setters first, or releasing the guard panics.
    pub fn clear(&mut self) {
        *self.meta = FrameMeta::default();
    }
}

impl Deref for MetaGuard<'_> {
    type Target = FrameMeta;
    fn deref(&self) -> &FrameMeta {
        &self.meta
    }
}

impl DerefMut for MetaGuard<'_> {
    fn deref_mut(&mut self) -> &mut FrameMeta {
        &mut self.meta
    }
}

impl Drop for MetaGuard<'_> {
    fn drop(&mut self) {
        // Not while unwinding from another panic (a second one would abort).
        if !std::thread::panicking() {
            self.frame.check_mirrors(&self.meta);
        }
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
        // Even again, after every byte change (Release).
        self.frame.version.fetch_add(1, Ordering::Release);
        // SAFETY: this guard was created by lock_exclusive on this latch and is dropped once.
        unsafe { self.frame.latch.unlock_exclusive() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_io::AlignedBuf;
    use std::time::{Duration, Instant};

    /// The version is odd exactly while the latch is held exclusive, a shared latch leaves it
    /// alone, and an identity change moves it without making it odd. An optimistic read
    /// overlapping any of these sees a different version at its end.
    #[test]
    fn exclusive_latch_makes_the_version_odd() {
        let mut buf = AlignedBuf::page(4096);
        let f = Frame::new(NonNull::new(buf.as_mut_ptr()).unwrap(), 4096);
        let v0 = f.version();
        assert_eq!(v0 % 2, 0);
        {
            let _s = f.shared();
            assert_eq!(f.version(), v0, "a shared latch changes nothing");
        }
        {
            let mut x = f.exclusive();
            assert_eq!(f.version() % 2, 1, "odd while latched exclusive");
            x.bytes_mut()[9] = 1;
        }
        let v1 = f.version();
        assert_eq!(v1 % 2, 0);
        assert!(!f.version_is(v0), "a write in between must be seen");
        f.bump_identity();
        assert_eq!(f.version() % 2, 0);
        assert!(!f.version_is(v1), "an identity change must be seen");
        assert_eq!(f.optimistic_words().len(), 512);
        assert_eq!(
            f.optimistic_words()[1]
                .load(Ordering::Relaxed)
                .to_le_bytes()[1],
            1
        );
    }

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

    /// The setters keep the mirrors in step with the meta, and clearing a clean frame's meta is
    /// fine.
    #[test]
    fn setters_keep_the_mirrors_in_step() {
        let mut buf = AlignedBuf::page(4096);
        let f = Frame::new(NonNull::new(buf.as_mut_ptr()).unwrap(), 4096);
        {
            let mut m = f.lock_meta();
            m.set_dirty(true);
            m.set_owner(7);
            m.set_flushing(true);
        }
        assert!(f.dirty.load(Ordering::Relaxed));
        assert!(f.owned.load(Ordering::Relaxed));
        assert!(f.flushing.load(Ordering::Relaxed));
        {
            let mut m = f.lock_meta();
            m.set_dirty(false);
            m.set_owner(0);
            m.set_flushing(false);
            m.clear();
        }
        f.lock_meta().clear();
    }

    /// A meta field changed without its mirror (here `dirty` written directly) is caught when
    /// the guard is released.
    #[test]
    #[should_panic(expected = "disagree with its meta")]
    fn disagreeing_mirrors_are_caught() {
        let mut buf = AlignedBuf::page(4096);
        let f = Frame::new(NonNull::new(buf.as_mut_ptr()).unwrap(), 4096);
        let mut m = f.lock_meta();
        m.dirty = true;
    }

    /// Clearing the meta of a frame still marked owned (a frame losing its page while a
    /// transaction holds it) is caught.
    #[test]
    #[should_panic(expected = "disagree with its meta")]
    fn clearing_an_owned_frame_is_caught() {
        let mut buf = AlignedBuf::page(4096);
        let f = Frame::new(NonNull::new(buf.as_mut_ptr()).unwrap(), 4096);
        f.lock_meta().set_owner(3);
        f.lock_meta().clear();
    }

    /// A page LSN may stay or grow; going backwards panics.
    #[test]
    #[should_panic(expected = "page LSN going backwards")]
    fn a_page_lsn_going_backwards_is_caught() {
        let mut m = FrameMeta::default();
        m.set_newest(Lsn(100));
        m.set_newest(Lsn(100));
        m.set_newest(Lsn(99));
    }
}
