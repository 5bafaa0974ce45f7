//! Which pool memory is faulted in ahead of use, and by whom.
//!
//! A fresh pool hands its frames out in index order (the free list pops the lowest first), so
//! a growing working set touches the arena front to back, and each first write of a 2 MiB huge
//! page costs the writing thread a page fault and the kernel zeroing the page: about 10% of a
//! bulk load's CPU on this machine. A helper thread instead faults the arena in a window
//! ([`WINDOW`]) ahead of the highest frame handed out (`AlignedBuf::populate`), so the
//! inserting thread finds the memory present; the work moves to another core, where one is
//! free. At most a window beyond the frames in use is faulted in early, so a store that uses
//! little of its pool does not take its whole size in memory.
//!
//! Invariants: populating never changes a byte of the arena (the kernel only maps zeroes
//! where no page is), so it needs no coordination with the frames' users; `populated` only
//! grows; at most one helper runs at a time (`running`). Tests: `tests` below (a pool that
//! hands out frames gets its arena populated ahead of them, never past the window; a pool whose
//! arena is not a mapping never starts a helper).

use keel_io::AlignedBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

/// How far ahead of the highest frame in use the arena is faulted in.
pub(crate) const WINDOW: usize = 32 << 20;

/// The prefault state of one pool's arena.
pub(crate) struct Prefault {
    shared: Arc<Shared>,
}

struct Shared {
    arena: Arc<AlignedBuf>,
    /// Bytes from the arena's start known faulted in.
    populated: AtomicUsize,
    /// A helper is running.
    running: AtomicBool,
    /// Populating failed once (a kernel without the advice): never try again.
    off: AtomicBool,
}

impl Prefault {
    pub(crate) fn new(arena: Arc<AlignedBuf>) -> Prefault {
        let off = !arena.is_mapped();
        Prefault {
            shared: Arc::new(Shared {
                arena,
                populated: AtomicUsize::new(0),
                running: AtomicBool::new(false),
                off: AtomicBool::new(off),
            }),
        }
    }

    /// The arena's bytes below `end` are about to be used: if that is within half a window of
    /// what is populated, start a helper that populates up to a window past `end`. True if a
    /// helper was started (the pool counts them: `PoolStats::prefault_helpers`).
    pub(crate) fn note_use(&self, end: usize) -> bool {
        let s = &self.shared;
        let populated = s.populated.load(Ordering::Acquire);
        if end.saturating_add(WINDOW / 2) <= populated
            || populated >= s.arena.len()
            || s.off.load(Ordering::Relaxed)
            || s.running.swap(true, Ordering::AcqRel)
        {
            return false;
        }
        let to = end.saturating_add(WINDOW).min(s.arena.len());
        let from = populated;
        let helper = s.clone();
        let spawned = std::thread::Builder::new()
            .name("keel-prefault".into())
            .spawn(move || {
                if helper.arena.populate(from, to) {
                    helper.populated.fetch_max(to, Ordering::AcqRel);
                } else {
                    helper.off.store(true, Ordering::Relaxed);
                }
                helper.running.store(false, Ordering::Release);
            });
        if spawned.is_err() {
            // No thread: the first writers fault the memory in, as without a helper.
            s.running.store(false, Ordering::Release);
            return false;
        }
        true
    }

    /// Bytes of the arena faulted in ahead of use so far.
    pub(crate) fn populated(&self) -> usize {
        self.shared.populated.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settle(p: &Prefault) {
        while p.shared.running.load(Ordering::Acquire) {
            std::thread::yield_now();
        }
    }

    #[test]
    fn the_arena_is_populated_a_window_ahead_of_use_and_no_further() {
        let arena = Arc::new(AlignedBuf::huge(3 * WINDOW));
        let p = Prefault::new(arena.clone());
        let mut helpers = 0;
        helpers += u32::from(p.note_use(4096));
        settle(&p);
        assert_eq!(p.populated(), 4096 + WINDOW);
        // Within half a window of what is populated: nothing new.
        helpers += u32::from(p.note_use(WINDOW / 2));
        settle(&p);
        assert_eq!(helpers, 1);
        // Past it: a window beyond the new use, never past the arena.
        helpers += u32::from(p.note_use(WINDOW));
        settle(&p);
        assert_eq!(p.populated(), 2 * WINDOW);
        helpers += u32::from(p.note_use(3 * WINDOW));
        settle(&p);
        assert_eq!(p.populated(), 3 * WINDOW);
        helpers += u32::from(p.note_use(3 * WINDOW));
        assert_eq!(helpers, 3, "a fully populated arena starts no helper");
        // Populating changed no byte.
        assert!(arena.iter().all(|&b| b == 0));
    }

    #[test]
    fn an_arena_that_is_not_a_mapping_starts_no_helper() {
        let p = Prefault::new(Arc::new(AlignedBuf::page(1 << 20)));
        assert!(!p.note_use(4096), "no helper started");
        assert_eq!(p.populated(), 0);
    }
}
