//! Pool statistics: which counters exist, and how a snapshot of them is taken.
//!
//! Answers: what [`PoolStats`] reports and where each number comes from. The field list is
//! written once, in the `pool_stats!` invocation below, which generates both the public
//! snapshot ([`PoolStats`], plain `u64`s, serde) and the atomics the pool bumps (`Counters`,
//! one `AtomicU64` per counting field), so the two cannot drift apart.
//!
//! Invariants kept: counters only grow (they are only ever `fetch_add`ed, [`bump`]) and count
//! since the pool was created; reads are relaxed, so a snapshot is a set of per-counter values,
//! not one instant. The computed fields (frames, free frames, dirty pages, hits, misses, versions) are
//! read from the state they describe when the snapshot is taken. Test:
//! `every_counter_reaches_its_snapshot_field` below.

use crate::BufferPool;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering};

/// Defines [`PoolStats`] (computed fields first, then counters, in the order written) and
/// `Counters` (an `AtomicU64` per counter, same names) with `Counters::snapshot`.
macro_rules! pool_stats {
    (
        computed { $( $(#[$cdoc:meta])* $computed:ident, )* }
        counters { $( $(#[$kdoc:meta])* $counter:ident, )* }
    ) => {
        /// Pool statistics (serde). Counters count since the pool was created.
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
        #[serde(default)]
        pub struct PoolStats {
            $( $(#[$cdoc])* pub $computed: u64, )*
            $( $(#[$kdoc])* pub $counter: u64, )*
        }

        /// The counting fields of [`PoolStats`], as the atomics the pool bumps.
        #[derive(Default)]
        pub(crate) struct Counters {
            $( $(#[$kdoc])* pub $counter: AtomicU64, )*
        }

        impl Counters {
            /// Every counter now, with the computed fields at zero (the caller fills them in).
            fn snapshot(&self) -> PoolStats {
                PoolStats {
                    $( $computed: 0, )*
                    $( $counter: self.$counter.load(Ordering::Relaxed), )*
                }
            }
        }
    };
}

pool_stats! {
    computed {
        /// Frames in the pool.
        frames,
        /// Frames on the free list.
        free_frames,
        /// Pages with committed changes not yet on disk (the flush list's length).
        dirty_pages,
        /// Page lookups that found the page resident.
        hits,
        /// Page lookups that had to read the page.
        misses,
        /// Old page versions kept now for snapshot readers (module `versions`).
        versions_kept,
        /// Their bytes.
        version_bytes,
        /// Snapshots (read transactions) registered now.
        snapshots,
        /// Snapshots refused (`SnapshotTooOld`) because their versions passed the budget.
        snapshots_refused,
        /// Committed page images copied for snapshots (a write transaction's first change of
        /// each page).
        versions_copied,
        /// Bytes of the pool's memory faulted in ahead of use by a helper thread (module
        /// `prefault`).
        prefaulted_bytes,
    }
    counters {
        /// Pages read from the store (misses, prefetch, recovery).
        pages_read,
        /// Pages evicted (clean pages dropped to reuse their frame).
        evictions,
        /// `prefetch` calls.
        prefetch_calls,
        /// Pages read by prefetch batches.
        prefetch_pages,
        /// Page-cleaner wake-ups.
        cleaner_rounds,
        /// Batches the cleaner wrote to refill the free reserve (cold dirty pages).
        cleaner_lru_batches,
        /// Pages in those batches.
        cleaner_lru_pages,
        /// Clean cold frames the cleaner moved to the free list.
        cleaner_evictions,
        /// Batches of oldest dirty pages written (by the cleaner or `flush_up_to`).
        flush_list_batches,
        /// Pages in those batches.
        flush_list_pages,
        /// Single pages written by a user thread that found no clean frame (the slow path).
        single_page_flushes,
        /// Every page written, by any path.
        pages_written,
        /// Of those, pages handed to the writer as rebuildable from redo (init-on-flush).
        pages_written_rebuildable,
        /// Page write batches that failed.
        write_errors,
        /// Page-cleaner rounds that ended in an error.
        cleaner_errors,
        /// Committed write transactions.
        commits,
        /// Aborted write transactions.
        aborts,
        /// Transactions refused because they grew too large for the pool.
        txn_too_large,
        /// Full page images logged (full-page-writes mode).
        full_page_images,
        /// Bytes of those images.
        full_page_image_bytes,
        /// Recovery: groups replayed.
        redo_groups,
        /// Recovery: page records applied.
        redo_records_applied,
        /// Recovery: page records skipped (page LSN already at or past the group).
        redo_records_skipped,
        /// Committed images copied before a transaction took the page, and used as its version
        /// (module `txn::precopy`): page copies moved out of the transaction's hold.
        copies_used,
        /// Such copies dropped because the page had changed since (the page was copied again).
        copies_stale,
        /// Pages committed as a copy of another (`PageTxn::copy_page`: a split's right half
        /// logged as one page-copy record instead of its bytes).
        page_copies,
        /// Pages a flush left for later because a copy they wait for was not yet durable
        /// (module `copy_deps`).
        copy_waits,
        /// Helper threads started to fault the pool's memory in (module `prefault`).
        prefault_helpers,
        /// Frees of a frame an evictor had freed already (a late last unpin: module
        /// `free_list`); let go, not listed twice.
        frees_already_free,
    }
}

/// Adds `n` to counter `c`.
pub(crate) fn bump(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

/// A counter alone on its cache line.
#[repr(align(128))]
#[derive(Default)]
pub(crate) struct PaddedCounter(pub AtomicU64);

/// A counter that threads add to without sharing a cache line: each thread adds to one of
/// `STRIPES` padded counters (chosen once per thread), and a read sums them. For counters
/// bumped on every operation of readers running in parallel (optimistic page hits), where one
/// shared counter would bounce its cache line between the readers' cores.
#[derive(Default)]
pub(crate) struct StripedCounter([PaddedCounter; STRIPES]);

const STRIPES: usize = 8;

thread_local! {
    /// This thread's stripe.
    static STRIPE: usize = {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        (NEXT.fetch_add(1, Ordering::Relaxed) as usize) % STRIPES
    };
}

impl StripedCounter {
    /// Adds `n`.
    #[inline]
    pub(crate) fn add(&self, n: u64) {
        let i = STRIPE.with(|s| *s);
        if let Some(c) = self.0.get(i) {
            c.0.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// The sum of every stripe.
    pub(crate) fn sum(&self) -> u64 {
        self.0.iter().map(|c| c.0.load(Ordering::Relaxed)).sum()
    }
}

impl BufferPool {
    /// Statistics.
    pub fn stats(&self) -> PoolStats {
        let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let v = self.versions.counts();
        PoolStats {
            frames: self.frames.len() as u64,
            free_frames: self.free_len.load(Ordering::Relaxed) as u64,
            dirty_pages: self.dirty_pages() as u64,
            hits: self.table.iter().map(|s| r(&s.hits)).sum::<u64>() + self.optimistic_hits.sum(),
            misses: self.table.iter().map(|s| r(&s.misses)).sum(),
            versions_kept: v.kept,
            version_bytes: v.bytes,
            snapshots: v.snapshots,
            snapshots_refused: v.refused,
            versions_copied: v.copied,
            prefaulted_bytes: self.prefault.populated() as u64,
            ..self.c.snapshot()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each counter lands in the snapshot field of the same name, and nowhere else: bump the
    /// i-th counter by i + 1 and find exactly those values in the serialized snapshot.
    #[test]
    fn every_counter_reaches_its_snapshot_field() {
        let c = Counters::default();
        let fields = [
            &c.pages_read,
            &c.evictions,
            &c.prefetch_calls,
            &c.prefetch_pages,
            &c.cleaner_rounds,
            &c.cleaner_lru_batches,
            &c.cleaner_lru_pages,
            &c.cleaner_evictions,
            &c.flush_list_batches,
            &c.flush_list_pages,
            &c.single_page_flushes,
            &c.pages_written,
            &c.pages_written_rebuildable,
            &c.write_errors,
            &c.cleaner_errors,
            &c.commits,
            &c.aborts,
            &c.txn_too_large,
            &c.full_page_images,
            &c.full_page_image_bytes,
            &c.redo_groups,
            &c.redo_records_applied,
            &c.redo_records_skipped,
            &c.copies_used,
            &c.copies_stale,
            &c.page_copies,
            &c.copy_waits,
            &c.prefault_helpers,
            &c.frees_already_free,
        ];
        for (i, a) in fields.iter().enumerate() {
            bump(a, i as u64 + 1);
        }
        let s = c.snapshot();
        assert_eq!(s.pages_read, 1);
        assert_eq!(s.commits, 16);
        assert_eq!(s.redo_records_skipped, 23);
        let json = serde_json::to_value(s).unwrap();
        let obj = json.as_object().unwrap();
        // The computed fields (frames .. misses, the five version-store fields and the bytes
        // the prefault helper populated) are zero.
        assert_eq!(obj.len(), 11 + fields.len());
        let mut values: Vec<u64> = obj.values().map(|v| v.as_u64().unwrap()).collect();
        values.sort_unstable();
        let mut want = vec![0; 11];
        want.extend(1..=fields.len() as u64);
        assert_eq!(values, want);
    }
}
