//! Test knobs: which invariants a test may break on purpose, and how a release build is kept
//! from having any.
//!
//! Answers: what can be switched off to show that the crash and unit tests catch it. The
//! [`TestKnobs`] type always exists (the pool holds one), but it is reachable
//! (`keel_buffer_pool::TestKnobs`, `BufferPool::knobs`) only with the `test-knobs` feature,
//! which only this crate's own dev-dependency enables.
//!
//! Invariant kept: outside tests every knob reads as off at compile time ([`TestKnobs::on`] is
//! `cfg!(...) && load`), so no release build can disable an invariant (`cargo tree -p keel -e
//! features` shows no `test-knobs`). Each knob has a test in `tests/` or the unit tests that
//! turns it on and sees the breakage caught.

use std::sync::atomic::{AtomicBool, Ordering};

/// Knobs that break the pool's invariants on purpose, for the tests that show the crash tests
/// catch it. Reachable only with the `test-knobs` feature, which only this crate's own
/// dev-dependency enables; without it every knob reads as off at compile time
/// ([`TestKnobs::on`]), so a release build has no knob that can disable an invariant.
#[derive(Default)]
pub struct TestKnobs {
    /// `checkpoint_lsn` ignores dirty pages and returns the log's end (breaks docs/design.md
    /// invariant 3).
    pub checkpoint_overreport: AtomicBool,
    /// Transactions never log full page images (breaks full-page-writes protection).
    pub skip_full_page_images: AtomicBool,
    /// Every page is handed to the writer as rebuildable from redo (breaks init-on-flush).
    pub claim_all_rebuildable: AtomicBool,
    /// `read_optimistic` does not re-check the frame's version after the read (breaks the
    /// seqlock validation: torn or replaced pages are returned as if read consistently).
    pub skip_optimistic_validation: AtomicBool,
    /// The last unpin of a frame without a page frees it without taking it first (breaks the
    /// frame ownership rule of `free_if_orphan`).
    pub free_without_taking: AtomicBool,
    /// Full-page-writes mode: `checkpoint_lsn` returns the oldest dirty page's LSN even when it
    /// is below the horizon (breaks the rule that a checkpoint never passes the last image of a
    /// page still to be written).
    pub fpw_checkpoint_passes_images: AtomicBool,
    /// Not a broken invariant but a forced race: a page started afresh (`new_page`) is evicted
    /// right after the transaction looked at whether it is resident, as another thread's
    /// eviction may do there (`page_txn` keeps a pin across the window; without it the page
    /// was started blank with no version kept for the snapshots that read it).
    pub evict_before_blank: AtomicBool,
    /// A write transaction does not copy a page's committed image before its first change
    /// (breaks invariant 1 of module `versions`: snapshot readers see uncommitted changes).
    pub skip_version_copy: AtomicBool,
    /// A commit publishes without rebuilding the versions it kept as undo while a snapshot is
    /// registered (breaks invariant 5 of module `versions`: a snapshot below the commit later
    /// rebuilds a page from a frame that has moved on).
    pub publish_undo_versions: AtomicBool,
    /// `checkpoint_lsn` ignores dirty pages that a commit freed before the free is durable
    /// (breaks the rule that a checkpoint never passes a change whose page was never written,
    /// unless the free that made it dead is durable).
    pub checkpoint_ignores_unwritten_frees: AtomicBool,
    /// A transaction uses an offered copy of a page without checking that it is still the
    /// page (breaks the invariant of module `txn::precopy`: a stale copy becomes the page's
    /// version and undo).
    pub trust_stale_copies: AtomicBool,
    /// Flushes write a page that waits for a copy of it as if it did not (breaks the invariant
    /// of module `copy_deps`: a source's later version reaches disk before its copy, and
    /// recovery cannot make the copy).
    pub ignore_copy_order: AtomicBool,
    /// A page made a copy is handed to the writer as rebuildable from redo even once its copy
    /// is no longer pending (breaks init-on-flush for copies: its source may be on disk past
    /// the copy, so a torn write of it can be rebuilt from neither).
    pub copies_always_rebuildable: AtomicBool,
}

impl TestKnobs {
    /// Whether `knob` is set: always false (and compiled away) outside tests.
    #[inline(always)]
    pub(crate) fn on(knob: &AtomicBool) -> bool {
        cfg!(any(test, feature = "test-knobs")) && knob.load(Ordering::Relaxed)
    }
}
