//! The checkpoint-LSN rule: how far a checkpoint may go.
//!
//! Answers: which LSN a checkpoint may record now ([`BufferPool::checkpoint_lsn`]), how a
//! checkpoint starts ([`BufferPool::begin_checkpoint`]: the LSN to flush up to, and in
//! full-page-writes mode the new horizon), and what the published horizon is
//! ([`BufferPool::horizon`]; set from the recovered checkpoint by `set_horizon`).
//!
//! Invariants kept (docs/design.md invariant 3; crate docs, invariants 3 to 5):
//! - **The rule**: a checkpoint never passes the first-dirty LSN of the oldest dirty page (its
//!   flush-list key, a lower bound of the start of its oldest unwritten group), nor a change
//!   whose group is being appended (the log's end is read only while no commit is between
//!   appending and listing its pages: the `decision` lock), nor, in full-page-writes mode, the
//!   published horizon. `checkpoint_lsn` asserts the first part on every call
//!   ([`assert_checkpoint_rule`]; O(1): the oldest key is the list's first). The one exception
//!   it allows is full-page-writes mode staying where it was: after recovery the recovered
//!   checkpoint may lie inside the first recovered group, older than that group's pages, and
//!   returning it again moves nothing. Tests: `tests/pool.rs:
//!   checkpoint_lsn_never_passes_a_dirty_page`; `tests/crash.rs:
//!   checkpoint_over_report_on_purpose_is_caught` (knob `checkpoint_overreport`, which returns
//!   before the assertion); `a_checkpoint_past_the_oldest_dirty_page_is_caught` below.
//! - **Full page images**: in full-page-writes mode the checkpoint advances only when nothing
//!   older than the horizon is dirty, and then to the horizon, so it never passes the last
//!   image of a page still to be written. Test: `tests/pool.rs:
//!   a_full_page_writes_checkpoint_never_passes_a_dirty_pages_image` (knob
//!   `fpw_checkpoint_passes_images`).
//! - The horizon and the full-page-writes checkpoint only grow (`fetch_max`), except when
//!   recovery sets them to the recovered checkpoint before anything else uses the pool.

use crate::knobs::TestKnobs;
use crate::page_store::RedoSink;
use crate::BufferPool;
use keel_page::Lsn;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// Asserts the checkpoint-LSN rule: checkpoint `c` is at or below `oldest`, the first-dirty
/// LSN of the oldest dirty page (`None`: no page is dirty), unless it stays at `held`, a
/// checkpoint already returned (full-page-writes mode only; see the module docs).
pub(crate) fn assert_checkpoint_rule(c: Lsn, oldest: Option<Lsn>, held: Option<Lsn>) {
    if let Some(o) = oldest {
        assert!(
            c <= o || held == Some(c),
            "checkpoint {c} passes the oldest dirty page's first-dirty LSN {o}"
        );
    }
}

impl BufferPool {
    /// Starts a checkpoint and returns the LSN to flush up to (the log's end now).
    ///
    /// In full-page-writes mode this also publishes that LSN as the new horizon: every page
    /// changed from now on whose LSN is at or below it logs a full page image first, so a later
    /// [`checkpoint_lsn`](Self::checkpoint_lsn) may return it once older pages are written.
    /// Recommended sequence (any mode):
    /// `let t = pool.begin_checkpoint(&log); pool.flush_up_to(t)?; log.checkpoint(pool.checkpoint_lsn(&log))`.
    pub fn begin_checkpoint(&self, log: &dyn RedoSink) -> Lsn {
        let Some(_d) = self.decision.try_write_for(Duration::from_millis(50)) else {
            // A committer is blocked (e.g. waiting for log space): keep the current horizon.
            return Lsn(self.horizon.load(Ordering::Acquire));
        };
        let end = log.end_lsn();
        if self.store.wants_full_page_images() {
            let _fl = self.flush_list.lock();
            self.horizon.fetch_max(end.0, Ordering::AcqRel);
        }
        end
    }

    /// The highest LSN a checkpoint may record now (docs/design.md invariant 3): never above the
    /// oldest modification of any dirty page, nor above a change whose group is being
    /// appended, nor (full-page-writes) above the published horizon. Publishes the result as
    /// the horizon, so later init-on-flush decisions account for it. Write it with the log's
    /// `checkpoint`.
    ///
    /// In full-page-writes mode the value advances only once nothing older than the horizon
    /// [`begin_checkpoint`](Self::begin_checkpoint) published is dirty, and then to that
    /// horizon: before that, it could pass the last full image of a page that was changed since
    /// the previous horizon, written clean and changed again (no new image), and that page's
    /// next write, if torn, could not be rebuilt from the recorded checkpoint. Test:
    /// `a_full_page_writes_checkpoint_never_passes_a_dirty_pages_image`.
    pub fn checkpoint_lsn(&self, log: &dyn RedoSink) -> Lsn {
        if TestKnobs::on(&self.knobs.checkpoint_overreport) {
            // Test knob: breaks invariant 3 on purpose.
            let end = log.end_lsn();
            self.horizon.fetch_max(end.0, Ordering::AcqRel);
            return end;
        }
        let fpw = self.store.wants_full_page_images();
        // Freed pages that are still the source of a live pending copy (taken before the
        // flush list's lock: `copy_deps` is never locked inside it).
        let durable = log.durable_lsn();
        let freed: Vec<keel_page::PageId> = self
            .unwritten_frees
            .lock()
            .iter()
            .map(|&(_, _, p)| p)
            .collect();
        let sources: Vec<keel_page::PageId> = {
            let deps = self.copy_deps.lock();
            freed
                .into_iter()
                .filter(|&p| deps.waits_live(p, durable))
                .collect()
        };
        let d = self.decision.try_write_for(Duration::from_millis(50));
        let fl = self.flush_list.lock();
        let h = Lsn(self.horizon.load(Ordering::Acquire));
        // A dirty page a commit freed left the pool unwritten: its oldest change holds the
        // checkpoint until the free is durable (else a crash that loses the free replays the
        // page's later records onto a disk copy that never had the earlier ones) — and while
        // the page is the source of a live pending copy: recovery from a checkpoint past its
        // oldest change replays its later changes onto a stale disk copy (an earlier life of
        // the page, valid, so nothing flags it) and copies the result into a live page (a
        // split's right half of a leaf the B-tree later freed: found with the unlink of
        // emptied leaves, a table unreadable after a crash).
        let pending_free = if TestKnobs::on(&self.knobs.checkpoint_ignores_unwritten_frees) {
            None
        } else {
            let mut u = self.unwritten_frees.lock();
            u.retain(|&(_, end, p)| end > durable || sources.contains(&p));
            u.first().map(|k| k.0)
        };
        let oldest = match (fl.first().map(|k| k.0), pending_free) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let mut held = None;
        let c = if fpw {
            // A page changed after the previous horizon logged its image then; written clean
            // and changed again before this horizon, it logs none. A checkpoint between that
            // image and its next write could not rebuild the page if the write tore, so the
            // checkpoint moves (to the horizon) only once nothing older than the horizon is
            // dirty, and otherwise stays where it was. Every commit in flight starts at or
            // after the published horizon.
            let c = match oldest {
                Some(o) if o < h => {
                    let prev = Lsn(self.fpw_checkpoint.load(Ordering::Acquire));
                    held = Some(prev);
                    prev
                }
                _ => h,
            };
            if !TestKnobs::on(&self.knobs.fpw_checkpoint_passes_images) {
                self.fpw_checkpoint.fetch_max(c.0, Ordering::AcqRel);
                c
            } else {
                // Test knob: the old rule, the oldest dirty page (can pass a page's image).
                oldest.unwrap_or(h).min(h)
            }
        } else if d.is_some() {
            // No commit is between reading the log's end and listing its pages.
            let end = log.end_lsn();
            oldest.unwrap_or(end).min(end)
        } else {
            // Every commit in flight starts at or after the published horizon.
            oldest.unwrap_or(h).min(h)
        };
        assert_checkpoint_rule(c, oldest, held);
        self.horizon.fetch_max(c.0, Ordering::AcqRel);
        c
    }

    /// Sets the horizon after recovery (the recovered checkpoint LSN).
    pub(crate) fn set_horizon(&self, lsn: Lsn) {
        let _fl = self.flush_list.lock();
        self.horizon.store(lsn.0, Ordering::Release);
        self.fpw_checkpoint.store(lsn.0, Ordering::Release);
    }

    /// The published checkpoint horizon.
    pub fn horizon(&self) -> Lsn {
        Lsn(self.horizon.load(Ordering::Acquire))
    }
}

#[cfg(test)]
mod tests {
    use super::assert_checkpoint_rule;
    use keel_page::Lsn;

    /// At or below the oldest dirty page, or with nothing dirty, any checkpoint passes; staying
    /// at the checkpoint already returned passes too.
    #[test]
    fn the_checkpoint_rule_allows_what_it_should() {
        assert_checkpoint_rule(Lsn(10), Some(Lsn(10)), None);
        assert_checkpoint_rule(Lsn(9), Some(Lsn(10)), None);
        assert_checkpoint_rule(Lsn(99), None, None);
        assert_checkpoint_rule(Lsn(12), Some(Lsn(10)), Some(Lsn(12)));
    }

    /// A checkpoint one past the oldest dirty page's first-dirty LSN is caught.
    #[test]
    #[should_panic(expected = "passes the oldest dirty page")]
    fn a_checkpoint_past_the_oldest_dirty_page_is_caught() {
        assert_checkpoint_rule(Lsn(11), Some(Lsn(10)), None);
    }

    /// Staying somewhere is not the same as staying where it was.
    #[test]
    #[should_panic(expected = "passes the oldest dirty page")]
    fn a_held_checkpoint_must_be_the_one_returned() {
        assert_checkpoint_rule(Lsn(13), Some(Lsn(10)), Some(Lsn(12)));
    }
}
