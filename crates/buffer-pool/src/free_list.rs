//! The free list: which frames hold no page and may be claimed, and who may put a frame there.
//!
//! Answers: where a frame goes when its page is dropped (`push_free`, reached from a frame's
//! last unpin through `free_if_orphan`, or from the cleaner's evictions through that unpin too)
//! and how a claimer takes one (`pop_free`). Eviction (module `eviction`) is the other source
//! of frames; the cleaner (module `cleaner`) keeps the list at its reserve.
//!
//! Invariants kept:
//! - **Frame ownership** (crate docs, invariant 1): a frame belongs to whoever moved its pin
//!   0 → 1; a frame without a page is put on the list only by a thread that took it that way
//!   (`free_if_orphan`), so a last unpin racing an evictor never frees the frame the evictor
//!   took. Test: `a_last_unpin_never_frees_a_frame_an_evictor_took` (knob
//!   `free_without_taking` breaks it on purpose).
//! - **No double free**: a frame is on the list at most once. Its `on_free` flag says whether
//!   it is, read and written under the list's lock; a second free of a listed frame only lets
//!   go of it (`push_free`), and a claim takes a listed frame as any frame is taken (pin
//!   0 → 1), passing over one a late unpin holds. Tests:
//!   `a_frame_freed_by_an_evictor_is_not_freed_again_by_a_late_unpin` (the race that freed one
//!   frame twice), `a_claim_passes_over_a_listed_frame_a_late_unpin_holds` (its other half),
//!   `a_frame_freed_twice_is_caught` (`debug_assert!` on the list itself, with the flag
//!   bypassed on purpose).
//! - **A free frame holds no page**: a frame taken off the list has page id `NO_PAGE`
//!   (`assert!`). Test: `a_free_frame_holding_a_page_is_caught`.
//! - `free_len` is the list's length, stored under its lock (readable without it as a hint).

use crate::frame::NO_PAGE;
use crate::knobs::TestKnobs;
use crate::stats::bump;
use crate::BufferPool;
use std::sync::atomic::Ordering;

impl BufferPool {
    /// The last pin of frame `f` went while it held no page: free it, but only after taking it
    /// (pin 0 → 1). Once the pin reached 0 an evictor may have claimed the frame (it holds a pin
    /// then, and the page id reads `NO_PAGE` until it maps the frame to its new page) — freeing
    /// it then would hand one frame to two pages, and a page-table entry would point at a frame
    /// holding another page (readers of it would retry forever). Test:
    /// `a_last_unpin_never_frees_a_frame_an_evictor_took`.
    ///
    /// The evictor may also have finished: taken the frame, unmapped it and freed it (the
    /// cleaner does) before this unpin read the page id. Both then find a frame without a page
    /// and without pins; the free list's lock decides, and a frame already on the list is let
    /// go, not freed again. Test: `a_frame_freed_by_an_evictor_is_not_freed_again_by_a_late_unpin`.
    #[cold]
    pub(crate) fn free_if_orphan(&self, f: u32) {
        let fr = &self.frames[f as usize];
        if TestKnobs::on(&self.knobs.free_without_taking) {
            self.push_free(f);
            return;
        }
        if !fr.take() {
            return;
        }
        if fr.page_id.load(Ordering::Acquire) != NO_PAGE {
            // Claimed, mapped and released again meanwhile: a resident page, not ours.
            fr.pin.fetch_sub(1, Ordering::Release);
            return;
        }
        self.push_free(f);
    }

    /// Puts frame `f`, which holds no page and which the caller took (pin 1), on the free list
    /// and lets go of it (pin 0) — unless it is on the list already (freed meanwhile by an
    /// evictor: see [`free_if_orphan`](Self::free_if_orphan)); then it only lets go. Both under
    /// the list's lock, which `pop_free` also holds while it takes a frame (pin 1), so a frame
    /// is on the list at most once and never while someone holds it.
    pub(crate) fn push_free(&self, f: u32) {
        let fr = &self.frames[f as usize];
        let mut free = self.free.lock();
        if fr.on_free.load(Ordering::Acquire) {
            fr.pin.store(0, Ordering::Release);
            drop(free);
            bump(&self.c.frees_already_free, 1);
            return;
        }
        fr.valid.store(false, Ordering::Relaxed);
        fr.referenced.store(false, Ordering::Relaxed);
        fr.lock_meta().clear();
        fr.on_free.store(true, Ordering::Release);
        debug_assert!(!free.contains(&f), "frame {f} freed twice");
        free.push(f);
        self.free_len.store(free.len(), Ordering::Relaxed);
        fr.pin.store(0, Ordering::Release);
    }

    /// Pops a free frame and pins it (pin 0 → 1, under the list's lock).
    pub(crate) fn pop_free(&self) -> Option<u32> {
        if self.free_len.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let mut free = self.free.lock();
        // Taken like any frame (pin 0 -> 1), and skipped if that fails: a late last unpin may
        // hold a listed frame for a moment before it finds it listed and lets go
        // (`free_if_orphan`).
        let at = free.iter().rposition(|&f| self.frames[f as usize].take())?;
        let f = free.swap_remove(at);
        self.free_len.store(free.len(), Ordering::Relaxed);
        let fr = &self.frames[f as usize];
        fr.on_free.store(false, Ordering::Release);
        drop(free);
        assert!(
            fr.page_id.load(Ordering::Acquire) == NO_PAGE,
            "free frame {f} holds a page"
        );
        if self
            .prefault
            .note_use((f as usize + 1).saturating_mul(self.page_size))
        {
            bump(&self.c.prefault_helpers, 1);
        }
        Some(f)
    }
}

#[cfg(test)]
mod tests {
    use crate::page_store::MemStore;
    use crate::testutil::{pool, put, PS};
    use crate::BufferPool;
    use keel_page::PageId;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    /// A pool over pages 1..=3 (knob `free_without_taking` as `broken`) whose reader of page 1
    /// lets go of it; `evictor` runs once inside that last unpin, between the pin reaching 0
    /// and the unpin's look at the frame's page id. Returns the pool and page 1's frame.
    fn race_a_last_unpin(
        broken: bool,
        evictor: impl Fn(&BufferPool, u32) + Send + Sync + 'static,
    ) -> (Arc<BufferPool>, u32) {
        let store = Arc::new(MemStore::new(PS));
        for id in 1..=3 {
            put(&store, PageId(id), id as u8);
        }
        let pool = Arc::new(pool(store));
        pool.knobs
            .free_without_taking
            .store(broken, Ordering::Relaxed);
        let guard = pool.read(PageId(1)).unwrap();
        let f = pool.table[crate::page_table::shard_of(1)].map.read()[&1];
        let armed = AtomicBool::new(true);
        let p = Arc::downgrade(&pool);
        *pool.after_last_unpin.lock() = Some(Box::new(move |frame| {
            let Some(p) = p.upgrade() else { return };
            if frame == f && armed.swap(false, Ordering::SeqCst) {
                evictor(&p, f);
            }
        }));
        drop(guard);
        *pool.after_last_unpin.lock() = None;
        (pool, f)
    }

    /// A reader's last unpin races an evictor: between the reader's pin reaching 0 and its look
    /// at the frame's page id, the evictor takes the frame (page id `NO_PAGE` until it maps it
    /// to its new page). Freeing the frame there (knob `free_without_taking`) puts a frame in
    /// use on the free list: the next claim maps a second page to it and the first page's table
    /// entry points at a frame holding another page (a reader of it then retries forever). The
    /// real unpin frees only a frame it could take.
    #[test]
    fn a_last_unpin_never_frees_a_frame_an_evictor_took() {
        for broken in [false, true] {
            // The evictor: takes the now unpinned frame (pin 0 -> 1, page unmapped).
            let (pool, f) = race_a_last_unpin(broken, |p, f| assert!(p.try_evict(f, PageId(1))));
            // The evictor goes on: maps its frame to page 2 and reads it. Broken, the frame is on
            // the free list by now, and mapping it is caught at once.
            let mapped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                pool.map_claimed(f, PageId(2))
            }));
            if broken {
                assert!(
                    mapped.is_err(),
                    "frame {f} mapped while on the free list, not caught"
                );
                assert!(pool.free.lock().contains(&f));
            } else {
                assert!(matches!(mapped, Ok(None)));
                assert!(!pool.free.lock().contains(&f));
                assert_eq!(pool.frames[f as usize].pin.load(Ordering::Relaxed), 1);
            }
        }
    }

    /// A reader's last unpin reads the frame's page id only after its pin went to 0. In
    /// between, the cleaner may evict the clean frame (pin 0 -> 1, unmapped) and free it (its own
    /// last unpin): the reader then finds the frame holding no page too, and both free it. The
    /// frame was on the free list twice, so two claims got it: "free frame N holds a page"
    /// (found by `crates/keel/tests/io_faults.rs`, whose small pool keeps the cleaner evicting
    /// beside every flush). The free list's lock decides which of them frees it.
    #[test]
    fn a_frame_freed_by_an_evictor_is_not_freed_again_by_a_late_unpin() {
        // The cleaner: evicts the now unpinned frame and frees it (its `unpin`, without the
        // hook, which runs under the hook's lock). The late unpin then finds no page either.
        let (pool, f) = race_a_last_unpin(false, |p, f| {
            assert!(p.try_evict(f, PageId(1)));
            assert_eq!(p.frames[f as usize].pin.fetch_sub(1, Ordering::Release), 1);
            p.free_if_orphan(f);
        });
        let on_list = pool.free.lock().iter().filter(|&&g| g == f).count();
        assert_eq!(on_list, 1, "frame {f} is on the free list {on_list} times");
        assert_eq!(pool.frames[f as usize].pin.load(Ordering::Relaxed), 0);
        // Every frame can be claimed once, each for a page of its own.
        let n = pool.frames();
        let claimed: Vec<u32> = (0..n).filter_map(|_| pool.pop_free()).collect();
        let mut distinct = claimed.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), claimed.len(), "a frame was claimed twice");
    }

    /// The other half of the same race: the late unpin has taken the frame (pin 0 -> 1) and
    /// not yet looked at the list when a claimer pops. The claimer must pass the held frame
    /// over; took it, the late unpin would find it unlisted and list it again while in use.
    #[test]
    fn a_claim_passes_over_a_listed_frame_a_late_unpin_holds() {
        let pool = pool(Arc::new(MemStore::new(PS)));
        let n = pool.frames();
        let held = *pool.free.lock().last().unwrap();
        let fr = &pool.frames[held as usize];
        // The late unpin, between its take and its look at the list.
        assert!(fr.take());
        let claimed: Vec<u32> = (0..n).filter_map(|_| pool.pop_free()).collect();
        assert_eq!(claimed.len(), n - 1);
        assert!(!claimed.contains(&held), "frame {held} claimed while held");
        // It goes on: finds the frame listed and only lets go of it.
        pool.push_free(held);
        assert_eq!(fr.pin.load(Ordering::Relaxed), 0);
        assert_eq!(pool.pop_free(), Some(held));
        assert_eq!(pool.pop_free(), None);
    }

    /// Freeing a frame that is already on the free list (every frame of a new pool is) with its
    /// flag cleared on purpose, so `push_free` cannot tell: the list's own check catches it.
    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "freed twice")]
    fn a_frame_freed_twice_is_caught() {
        let pool = pool(Arc::new(MemStore::new(PS)));
        pool.frames[0].on_free.store(false, Ordering::Relaxed);
        pool.push_free(0);
    }

    /// A frame on the free list that holds a page (as the broken `free_without_taking` leaves
    /// one once the evictor has mapped it) is caught when it is claimed.
    #[test]
    #[should_panic(expected = "holds a page")]
    fn a_free_frame_holding_a_page_is_caught() {
        let pool = pool(Arc::new(MemStore::new(PS)));
        let top = *pool.free.lock().last().unwrap();
        pool.frames[top as usize]
            .page_id
            .store(5, Ordering::Relaxed);
        pool.pop_free();
    }
}
