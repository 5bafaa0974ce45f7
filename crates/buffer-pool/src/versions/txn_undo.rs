//! Pages a write transaction keeps as undo instead of copies (module `versions`, invariant 5):
//! how the undo is recorded, how a reader rebuilds a page's committed image from it, and how a
//! rollback marks it spent.
//!
//! One [`TxnUndo`] per transaction, registered with the version store once: a slot per page
//! (found by page id, for readers), and every change's saved bytes in one arena, each step
//! linked to the page's previous step, so a page's undo is walked without the others'. Nothing
//! is allocated per page or per change once the arena has grown, and a finished transaction's
//! arena is re-used by the next.
//!
//! Invariants (tests: `tests/snapshots.rs`, `tests/pool.rs: abort_restores_pages_exactly`,
//! `tests/versions_shuttle.rs`):
//! 1. A page's steps are recorded under its exclusive latch, before the change they undo, and
//!    read under its shared latch (or by the owner): a reader sees the frame and exactly the
//!    steps of the changes in it.
//! 2. A rollback restores a page and marks its slot restored under the same exclusive latch: a
//!    reader rebuilds either from the changed frame with every step, or from the restored
//!    frame with none (undoing a move twice would not give the page back).
//! 3. A rebuilt image is kept in the slot: the page's image before the transaction does not
//!    change while the transaction runs, so later readers and the commit use it.
//! 4. Bounded: once a page's steps have saved more bytes than four pages hold, its image is
//!    rebuilt and kept (after the change that passed the bound, so frame and steps match) and
//!    no more steps are recorded for it: a transaction that changes one page a million times
//!    keeps at most about five pages for it, not one step per change (test
//!    `a_page_changed_often_keeps_a_copy`).

use crate::sync::{AtomicU64, Mutex, Ordering};
use std::collections::HashMap;
use std::sync::Arc;

/// No step (the end of a page's chain).
const NONE: u32 = u32::MAX;

/// A page's steps may save this many pages' worth of bytes before its image is kept instead
/// (invariant 4). A split or a compaction saves most of a page at once, so a bound of one page
/// froze hundreds of pages per 10,000-row bulk transaction (20,000 more page faults per
/// 200,000 rows, ~12% of the load's CPU); four bound the memory as well and almost never bite.
const BOUND_PAGES: usize = 4;

/// One write transaction's pages kept as undo.
#[derive(Debug)]
pub struct TxnUndo {
    /// Valid for snapshots below this LSN: `PENDING` until the commit seals it.
    pub(super) until: AtomicU64,
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Each page's slot, by page id.
    index: HashMap<u64, u32, crate::page_table::BuildIdHash>,
    slots: Vec<Slot>,
    /// The page size (a page's steps may save [`BOUND_PAGES`] times this before it is frozen).
    page_len: usize,
    steps: Vec<Step>,
    /// The saved bytes of every step, back to back.
    bytes: Vec<u8>,
}

#[derive(Debug)]
struct Slot {
    /// The page's newest step.
    last: u32,
    /// Its image before the transaction, once a reader or the commit rebuilt it.
    rebuilt: Option<Arc<[u8]>>,
    /// A rollback restored the page (its steps no longer apply).
    restored: bool,
    /// Bytes its steps saved so far.
    saved: usize,
    /// Its steps passed the bound: `rebuilt` holds the image and no more steps are recorded
    /// (invariant 4).
    frozen: bool,
}

/// `Step::at` of bytes that were all zero: nothing saved, zeroes put back.
const ZEROS: u32 = u32::MAX;

/// One change to undo: a move back (if `move_len` > 0: `move_len` bytes from `move_dst` to
/// `move_src`), then `len` saved bytes at `at` in `Inner::bytes` back to `offset` (zeroes if
/// `at` is [`ZEROS`]).
#[derive(Debug, Clone, Copy)]
struct Step {
    /// The page's previous step.
    prev: u32,
    offset: u32,
    len: u32,
    at: u32,
    move_src: u32,
    move_dst: u32,
    move_len: u32,
}

impl Inner {
    /// Whether `slot`'s steps have saved more than the bound and it is not frozen yet.
    fn past_bound(&self, slot: u32) -> bool {
        self.slots
            .get(slot as usize)
            .is_some_and(|s| !s.frozen && s.saved > self.page_len.saturating_mul(BOUND_PAGES))
    }

    /// `slot`'s page before the transaction: the kept image, or `image` (a copy of the page as
    /// it is now) with the changes undone, then kept (invariant 3).
    fn rebuild(&mut self, slot: u32, mut image: Arc<[u8]>) -> Arc<[u8]> {
        if let Some(img) = self
            .slots
            .get(slot as usize)
            .and_then(|s| s.rebuilt.clone())
        {
            return img;
        }
        match Arc::get_mut(&mut image) {
            Some(buf) => TxnUndo::undo_into(self, slot, buf),
            None => {
                let mut v = image.to_vec();
                TxnUndo::undo_into(self, slot, &mut v);
                image = Arc::from(v);
            }
        }
        if let Some(s) = self.slots.get_mut(slot as usize) {
            s.rebuilt = Some(image.clone());
        }
        image
    }
}

impl TxnUndo {
    pub(super) fn new(until: u64) -> TxnUndo {
        TxnUndo {
            until: AtomicU64::new(until),
            inner: Mutex::new(Inner::default()),
        }
    }

    /// Adds page `id`, of `page_len` bytes (under its exclusive latch, before its first
    /// change); returns its slot.
    pub(crate) fn add_page(&self, id: u64, page_len: usize) -> u32 {
        let mut g = self.inner.lock();
        g.page_len = page_len;
        let slot = g.slots.len() as u32;
        g.slots.push(Slot {
            last: NONE,
            rebuilt: None,
            restored: false,
            saved: 0,
            frozen: false,
        });
        g.index.insert(id, slot);
        slot
    }

    /// The slot of page `id`, if this transaction keeps it as undo.
    pub(super) fn slot_of(&self, id: u64) -> Option<u32> {
        self.inner.lock().index.get(&id).copied()
    }

    /// The image rebuilt for `slot`, if any.
    pub(super) fn rebuilt(&self, slot: u32) -> Option<Arc<[u8]>> {
        let g = self.inner.lock();
        g.slots.get(slot as usize)?.rebuilt.clone()
    }

    /// Records one step; returns true if the page's steps have passed the bound (the caller
    /// then calls [`after_change`](Self::after_change) once the change is made).
    fn push_step(&self, slot: u32, offset: usize, saved: &[u8], mv: (usize, usize, usize)) -> bool {
        let mut g = self.inner.lock();
        let g = &mut *g;
        let Some(s) = g.slots.get_mut(slot as usize) else {
            debug_assert!(false, "undo slot {slot} of a page never added");
            return false;
        };
        if s.frozen {
            return false;
        }
        s.saved = s.saved.saturating_add(saved.len());
        // Bytes that were all zero (free space an insert fills) are recorded as such, not
        // copied: `ZEROS` in place of an arena offset.
        let zeros = saved.len() >= 16 && keel_page::is_zero(saved);
        let at = if zeros { ZEROS } else { g.bytes.len() as u32 };
        g.steps.push(Step {
            prev: s.last,
            offset: offset as u32,
            len: saved.len() as u32,
            at,
            move_src: mv.0 as u32,
            move_dst: mv.1 as u32,
            move_len: mv.2 as u32,
        });
        s.last = (g.steps.len() - 1) as u32;
        if !zeros {
            g.bytes.extend_from_slice(saved);
        }
        g.past_bound(slot)
    }

    /// Records that the page of `slot` had `old` at `offset` before a change; true if the
    /// page is past the bound ([`push_step`](Self::push_step)).
    pub(crate) fn push(&self, slot: u32, offset: usize, old: &[u8]) -> bool {
        self.push_step(slot, offset, old, (0, 0, 0))
    }

    /// Records, before a move of `len` bytes from `src` to `dst` within `page` (the page of
    /// `slot` as it is before the move), what undoes it: the move back, then the bytes of the
    /// destination outside the source put back. A slot-array shift by one slot saves one
    /// slot's bytes, not the array's.
    pub(crate) fn push_move(
        &self,
        slot: u32,
        page: &[u8],
        src: usize,
        dst: usize,
        len: usize,
    ) -> bool {
        let (keep_at, keep_len) = if dst + len <= src || src + len <= dst {
            (dst, len)
        } else if dst > src {
            (src + len, dst - src)
        } else {
            (dst, src - dst)
        };
        self.push_step(
            slot,
            keep_at,
            &page[keep_at..keep_at + keep_len],
            (src, dst, len),
        )
    }

    /// Called after each change of `slot`'s page, with the page as it is now (its frame, under
    /// the exclusive latch): past the bound, keeps the page's image and stops its steps
    /// (invariant 4).
    pub(crate) fn after_change(&self, slot: u32, page: &[u8]) {
        let mut g = self.inner.lock();
        if !g.past_bound(slot) {
            return;
        }
        g.rebuild(slot, Arc::from(page));
        if let Some(s) = g.slots.get_mut(slot as usize) {
            s.frozen = true;
        }
    }

    /// Undoes the changes of `slot`'s page on `page`, newest first (nothing once restored; the
    /// kept image once frozen). A step outside the page (which a page of the transaction's own
    /// size cannot have) is skipped.
    fn undo_into(g: &Inner, slot: u32, page: &mut [u8]) {
        let Some(s) = g.slots.get(slot as usize) else {
            return;
        };
        if s.restored {
            return;
        }
        if s.frozen {
            if let Some(img) = s.rebuilt.as_ref().filter(|i| i.len() == page.len()) {
                page.copy_from_slice(img);
            }
            return;
        }
        let mut i = s.last;
        while let Some(st) = g.steps.get(i as usize) {
            let (ms, md, ml) = (
                st.move_src as usize,
                st.move_dst as usize,
                st.move_len as usize,
            );
            if ml > 0 && ms.max(md).saturating_add(ml) <= page.len() {
                // The destination holds the source's old bytes: move them back.
                page.copy_within(md..md + ml, ms);
            }
            let (o, l, a) = (st.offset as usize, st.len as usize, st.at as usize);
            if st.at == ZEROS {
                if let Some(dst) = page.get_mut(o..o.saturating_add(l)) {
                    dst.fill(0);
                }
            } else if let (Some(dst), Some(src)) = (
                page.get_mut(o..o.saturating_add(l)),
                g.bytes.get(a..a.saturating_add(l)),
            ) {
                dst.copy_from_slice(src);
            }
            i = st.prev;
        }
    }

    /// Undoes the changes of `slot`'s page on `page` (a copy of it: a full page image).
    pub(crate) fn undo_copy(&self, slot: u32, page: &mut [u8]) {
        TxnUndo::undo_into(&self.inner.lock(), slot, page);
    }

    /// Rolls back `slot`'s page in its frame (`page`, under its exclusive latch) and marks it
    /// restored (invariant 2).
    pub(crate) fn roll_back(&self, slot: u32, page: &mut [u8]) {
        let mut g = self.inner.lock();
        TxnUndo::undo_into(&g, slot, page);
        if let Some(s) = g.slots.get_mut(slot as usize) {
            s.restored = true;
        }
    }

    /// `slot`'s page before the transaction: the kept image, or `image` (a copy of the frame,
    /// read under its shared latch or by its owner) with the changes undone, then kept
    /// (invariant 3).
    pub(super) fn rebuild_into(&self, slot: u32, image: Arc<[u8]>) -> Arc<[u8]> {
        self.inner.lock().rebuild(slot, image)
    }

    /// Empties it for the next transaction, keeping its buffers (up to a bound).
    pub(super) fn reset(&self, until: u64) {
        const KEEP_BYTES: usize = 16 << 20;
        let mut g = self.inner.lock();
        g.index.clear();
        g.slots.clear();
        g.steps.clear();
        g.bytes.clear();
        if g.bytes.capacity() > KEEP_BYTES {
            g.bytes.shrink_to(KEEP_BYTES);
        }
        self.until.store(until, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A write over zeroed bytes saves none of them, and its undo zeroes them again.
    #[test]
    fn writes_over_zeroes_save_no_bytes() {
        let t = TxnUndo::new(u64::MAX);
        let slot = t.add_page(10, 512);
        let orig: Vec<u8> = (0..512)
            .map(|i| if i >= 256 { 0 } else { i as u8 })
            .collect();
        let mut page = orig.clone();
        t.push(slot, 300, &page[300..424]);
        page[300..424].fill(0xab);
        t.push(slot, 250, &page[250..270]);
        page[250..270].fill(0xcd);
        assert_eq!(
            t.inner.lock().bytes.len(),
            20,
            "only the non-zero write saved bytes"
        );
        let mut copy = page.clone();
        t.undo_copy(slot, &mut copy);
        assert_eq!(copy, orig);
    }

    /// A seeded mix of writes and moves (overlapping both ways, and apart) on two pages: the
    /// undo of each gives its page back exactly, whatever the other page did.
    #[test]
    fn writes_and_moves_undo_exactly() {
        let mut seed = 7u64;
        let mut next = move || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) as usize
        };
        for round in 0..200 {
            let t = TxnUndo::new(u64::MAX);
            // Every other round the pages have zeroed free space in their middle, as a node's
            // gap between slots and cells (writes over it save no bytes: `ZEROS`).
            let orig: Vec<Vec<u8>> = (0..2)
                .map(|p| {
                    (0..512)
                        .map(|i| {
                            if round % 2 == 1 && (128..384).contains(&i) {
                                0
                            } else {
                                (i * 7 + p * 3) as u8
                            }
                        })
                        .collect()
                })
                .collect();
            let mut pages = orig.clone();
            let slots = [t.add_page(10, 512), t.add_page(11, 512)];
            for _ in 0..1 + next() % 12 {
                let p = next() % 2;
                let len = 1 + next() % 64;
                let (src, dst) = (next() % (512 - len), next() % (512 - len));
                if next() % 2 == 0 {
                    t.push_move(slots[p], &pages[p], src, dst, len);
                    pages[p].copy_within(src..src + len, dst);
                } else {
                    t.push(slots[p], dst, &pages[p][dst..dst + len]);
                    pages[p][dst..dst + len].fill(next() as u8);
                }
            }
            for p in 0..2 {
                let mut copy = pages[p].clone();
                t.undo_copy(slots[p], &mut copy);
                assert_eq!(copy, orig[p], "page {p}");
            }
        }
    }

    /// Invariant 4: a page changed many times keeps its image once its steps pass a page,
    /// records nothing more, and still undoes exactly (rollback, rebuild and image copy).
    #[test]
    fn a_page_changed_often_keeps_a_copy() {
        let t = TxnUndo::new(u64::MAX);
        let orig: Vec<u8> = (0..256).map(|i| (i * 3) as u8).collect();
        let mut page = orig.clone();
        let slot = t.add_page(9, 256);
        for i in 0..1000usize {
            let at = (i * 37) % 200;
            let over = t.push(slot, at, &page[at..at + 40]);
            page[at..at + 40].fill(i as u8);
            if over {
                t.after_change(slot, &page);
            }
            if i % 3 == 0 {
                let over = t.push_move(slot, &page, 10, 50, 30);
                page.copy_within(10..40, 50);
                if over {
                    t.after_change(slot, &page);
                }
            }
        }
        let bytes = t.inner.lock().bytes.len();
        assert!(
            bytes <= BOUND_PAGES * 256 + 40,
            "{bytes} bytes of undo for a 256-byte page"
        );
        let mut copy = page.clone();
        t.undo_copy(slot, &mut copy);
        assert_eq!(copy, orig);
        let image: Arc<[u8]> = Arc::from(page.clone());
        assert_eq!(&*t.rebuild_into(slot, image), &orig[..]);
        t.roll_back(slot, &mut page);
        assert_eq!(page, orig);
    }

    /// Invariant 2: after a rollback restored the page, a rebuild from the restored page is
    /// the page; without the restored mark the moves would be undone a second time.
    #[test]
    fn a_rebuild_after_a_rollback_is_the_restored_page() {
        let t = TxnUndo::new(u64::MAX);
        let orig: Vec<u8> = (0..256).map(|i| i as u8).collect();
        let mut page = orig.clone();
        let slot = t.add_page(3, 256);
        // A slot-array shift: one slot up.
        t.push_move(slot, &page, 16, 24, 64);
        page.copy_within(16..80, 24);
        let mut twice = orig.clone();
        TxnUndo::undo_into(&t.inner.lock(), slot, &mut twice);
        assert_ne!(
            twice, orig,
            "undoing the move on the restored page breaks it"
        );
        t.roll_back(slot, &mut page);
        assert_eq!(page, orig);
        let image: Arc<[u8]> = Arc::from(page.clone());
        assert_eq!(&*t.rebuild_into(slot, image), &orig[..]);
    }
}
