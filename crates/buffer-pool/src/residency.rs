//! Residency: which frame holds which page, and how a page comes to be held and let go.
//!
//! Answers: how a page is found (the sharded page table, [`BufferPool::contains`] and the pin
//! taken by a lookup), how a missing page is brought in ([`BufferPool::read`] → `fix` → `load`,
//! or `install_blank` for a page that is not read), and how a frame stops holding a page
//! (`unmap`, `unpin`). Frames come from the free list (module `free_list`) or from eviction
//! (module `eviction`); many pages at once come through `prefetch`.
//!
//! Invariants kept (crate docs, invariant 1):
//! - a frame that holds a page is only pinned with that page's shard lock held (`lookup_pin`,
//!   `pin_quiet`, `map_claimed`; claimers pin frames that hold none), and a frame is only
//!   unmapped by its owner, so a page found in the table and pinned keeps its frame until
//!   unpinned (see the `page_table` module);
//! - a frame is mapped to a page only by whoever claimed it (pin 0 → 1), latched exclusive
//!   until its bytes are valid; a failed load unmaps the frame again, so readers see `valid`
//!   false under the latch and retry;
//! - a frame that holds no page and loses its last pin goes back to the free list (through
//!   `free_if_orphan`, which takes it first);
//! - a page is never written from two frames at once: `unmap` waits for a write in flight.
//!
//! Tests: `tests/pool.rs` (`eviction_never_takes_a_pinned_page`,
//! `unwritten_and_corrupt_pages_are_errors_never_data`,
//! `a_page_freed_while_being_written_is_not_written_twice_at_once`), `tests/concurrency.rs`.

use crate::frame::{ExclusiveLatch, NO_PAGE};
use crate::guard::{PageReadGuard, PinGuard};
use crate::page_table::shard_of;
use crate::stats::bump;
use crate::{BufferPool, PoolError, Result};
use keel_io::AlignedBuf;
use keel_page::{PageId, PageState};
use std::sync::atomic::Ordering;
use std::time::Duration;

impl BufferPool {
    /// Reads page `id` (from the pool, or from the store through the page writer, checksum
    /// verified) and returns it latched shared. The pin and the latch last as long as the guard.
    ///
    /// Errors: [`PoolError::Corruption`] for a page failing verification, [`PoolError::Unwritten`]
    /// for a page never written, [`PoolError::NoFreeFrame`] when no frame can be freed.
    pub fn read(&self, id: PageId) -> Result<PageReadGuard<'_>> {
        self.refuse_forked()?;
        loop {
            let f = match self.fix(id) {
                Ok(f) => f,
                Err(e) => return self.read_unpooled(id, e),
            };
            let frame = &self.frames[f as usize];
            let pin = PinGuard::new(self, f);
            let latch = frame.shared();
            if frame.valid.load(Ordering::Acquire) && frame.page_id.load(Ordering::Relaxed) == id.0
            {
                self.set_hint(id, f);
                return Ok(PageReadGuard::new(id, latch, pin));
            }
            // The load this reader waited for failed: retry (and see its error ourselves).
        }
    }

    /// A page the pool could not take in (`failed`) because the store is poisoned — its dirty
    /// frames can never be written, so once every frame is dirty or pinned no page can come
    /// in — read from the data file into a buffer of its own, so that reads of committed data
    /// go on (found by `fs_full.rs`: a full disk met with every frame dirty refused every
    /// later read of a page not resident). Only a page that is not resident: its newest
    /// committed version is then the one on disk (a poisoned store commits nothing more, and a
    /// page changed since a snapshot has its version in the version store, which
    /// [`read_at`](Self::read_at) asks first). Any other failure is returned as it was.
    fn read_unpooled(&self, id: PageId, failed: PoolError) -> Result<PageReadGuard<'_>> {
        if !self.store.is_poisoned() || self.contains(id) {
            return Err(failed);
        }
        let mut buf = AlignedBuf::page(self.page_size);
        match self.store.read_page(id, &mut buf)? {
            PageState::Valid(_) => {
                bump(&self.c.pages_read, 1);
                Ok(PageReadGuard::own(id, buf))
            }
            PageState::Unwritten => Err(PoolError::Unwritten {
                file: self.store.data_path().to_path_buf(),
                page_id: id,
            }),
        }
    }

    /// Whether page `id` is resident (no I/O, no pin).
    pub fn contains(&self, id: PageId) -> bool {
        self.table[shard_of(id.0)].map.read().contains_key(&id.0)
    }

    /// Pins frame `f`, which the page table maps `id` to (the caller holds the shard's lock):
    /// a mapped frame is never on the free list.
    #[inline]
    fn pin_mapped(&self, f: u32, id: PageId) {
        let fr = &self.frames[f as usize];
        fr.pin.fetch_add(1, Ordering::Acquire);
        debug_assert!(
            !fr.on_free.load(Ordering::Acquire),
            "page {} maps to frame {f}, which is on the free list",
            id.0
        );
    }

    /// Pins page `id` if it is resident (counts a hit).
    #[inline]
    pub(crate) fn lookup_pin(&self, id: PageId) -> Option<u32> {
        let shard = &self.table[shard_of(id.0)];
        let map = shard.map.read();
        let f = *map.get(&id.0)?;
        self.pin_mapped(f, id);
        drop(map);
        shard.hits.fetch_add(1, Ordering::Relaxed);
        let fr = &self.frames[f as usize];
        if !fr.referenced.load(Ordering::Relaxed) {
            fr.referenced.store(true, Ordering::Relaxed);
        }
        Some(f)
    }

    /// Pins `id` if resident without counting a hit or touching the reference bit (flushers).
    pub(crate) fn pin_quiet(&self, id: PageId) -> Option<u32> {
        let map = self.table[shard_of(id.0)].map.read();
        let f = *map.get(&id.0)?;
        self.pin_mapped(f, id);
        Some(f)
    }

    /// Pins page `id`, reading it if needed. The frame may turn out invalid (a concurrent load
    /// failed): callers check `valid` under the latch and retry.
    pub(crate) fn fix(&self, id: PageId) -> Result<u32> {
        if id.0 == NO_PAGE {
            return Err(PoolError::Config(format!("{id} is reserved")));
        }
        if let Some(f) = self.lookup_pin(id) {
            return Ok(f);
        }
        self.table[shard_of(id.0)]
            .misses
            .fetch_add(1, Ordering::Relaxed);
        self.load(id)
    }

    /// Unpins frame `f`. A frame that holds no page and loses its last pin goes to the free list.
    #[inline]
    pub(crate) fn unpin(&self, f: u32) {
        let fr = &self.frames[f as usize];
        if fr.pin.fetch_sub(1, Ordering::Release) == 1 {
            #[cfg(test)]
            if let Some(hook) = &*self.after_last_unpin.lock() {
                hook(f);
            }
            if fr.page_id.load(Ordering::Acquire) == NO_PAGE {
                self.free_if_orphan(f);
            }
        }
    }

    /// Maps claimed frame `f` (latched exclusive by the caller) to `id`, unless `id` is
    /// resident already: then returns that frame pinned and releases `f`.
    pub(crate) fn map_claimed(&self, f: u32, id: PageId) -> Option<u32> {
        let mut map = self.table[shard_of(id.0)].map.write();
        if let Some(&g) = map.get(&id.0) {
            self.pin_mapped(g, id);
            return Some(g);
        }
        let fr = &self.frames[f as usize];
        assert!(
            !fr.on_free.load(Ordering::Acquire),
            "frame {f} mapped to page {} while on the free list",
            id.0
        );
        fr.valid.store(false, Ordering::Relaxed);
        fr.page_id.store(id.0, Ordering::Release);
        fr.bump_identity();
        map.insert(id.0, f);
        drop(map);
        self.set_hint(id, f);
        None
    }

    /// Removes frame `f`'s mapping of `id` (if it is still there) and marks it as holding no
    /// page; its last unpin returns it to the free list. Drops its dirty state.
    ///
    /// If a flusher is writing the frame, waits until that write has completed: the page id
    /// may later be written again from another frame (a freed page re-created), and two writes
    /// of one page must never be in flight together — the older could land last. (The flusher
    /// does not need the frame's latch to finish, so callers may hold it.)
    pub(crate) fn unmap(&self, f: u32, id: PageId) {
        let fr = &self.frames[f as usize];
        debug_assert!(
            matches!(fr.page_id.load(Ordering::Acquire), x if x == id.0 || x == NO_PAGE),
            "unmap of page {} from frame {f}, which holds page {}",
            id.0,
            fr.page_id.load(Ordering::Acquire)
        );
        {
            let mut m = fr.lock_meta();
            while m.flushing {
                drop(m);
                std::thread::sleep(Duration::from_micros(50));
                m = fr.lock_meta();
            }
            if m.dirty {
                self.flush_list.lock().remove(&(m.oldest, id, f));
            }
            m.clear();
            m.set_dirty(false);
            m.set_owner(0);
        }
        let mut map = self.table[shard_of(id.0)].map.write();
        if map.get(&id.0) == Some(&f) {
            map.remove(&id.0);
        }
        fr.valid.store(false, Ordering::Relaxed);
        fr.page_id.store(NO_PAGE, Ordering::Release);
        fr.bump_identity();
    }

    /// Reads page `id` into a new frame. Returns the frame pinned.
    fn load(&self, id: PageId) -> Result<u32> {
        let f = self.claim_frame(id)?;
        let fr = &self.frames[f as usize];
        let mut x = fr.exclusive();
        if let Some(g) = self.map_claimed(f, id) {
            drop(x);
            self.release_claimed(f);
            return Ok(g);
        }
        bump(&self.c.pages_read, 1);
        let res = self.store.read_page(id, x.bytes_mut());
        match res {
            Ok(PageState::Valid(_)) => {
                fr.lock_meta().clear();
                fr.referenced.store(true, Ordering::Relaxed);
                fr.valid.store(true, Ordering::Release);
                drop(x);
                Ok(f)
            }
            Ok(PageState::Unwritten) => {
                self.unmap(f, id);
                drop(x);
                self.unpin(f);
                Err(PoolError::Unwritten {
                    file: self.store.data_path().to_path_buf(),
                    page_id: id,
                })
            }
            Err(e) => {
                self.unmap(f, id);
                drop(x);
                self.unpin(f);
                Err(e)
            }
        }
    }

    /// Returns a claimed frame (pin 1, no page) to the free list.
    pub(crate) fn release_claimed(&self, f: u32) {
        self.unpin(f);
    }

    /// Installs page `id` as a zeroed, valid frame without reading it (new pages, recovery).
    /// Returns the frame pinned, and — if it was freshly installed — its latch held exclusive
    /// (so nobody sees the blank page before the caller fills it); `None` if `id` was resident
    /// and the existing frame is returned (pinned, not latched).
    pub(crate) fn install_blank(&self, id: PageId) -> Result<(u32, Option<ExclusiveLatch<'_>>)> {
        if let Some(f) = self.lookup_pin(id) {
            return Ok((f, None));
        }
        let f = self.claim_frame(id)?;
        let fr = &self.frames[f as usize];
        let mut x = fr.exclusive();
        if let Some(g) = self.map_claimed(f, id) {
            drop(x);
            self.release_claimed(f);
            return Ok((g, None));
        }
        x.bytes_mut().fill(0);
        fr.lock_meta().clear();
        fr.referenced.store(true, Ordering::Relaxed);
        fr.valid.store(true, Ordering::Release);
        Ok((f, Some(x)))
    }
}
