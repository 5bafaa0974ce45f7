//! Pool statistics: which counters exist, and how a snapshot of them is taken.
//!
//! Answers: what [`PoolStats`] reports and where each number comes from: the counting fields
//! are atomics the pool bumps (`Counters`), the others are computed when the snapshot is taken.
//!
//! Invariants kept: counters only grow (they are only ever `fetch_add`ed, [`bump`]) and count
//! since the pool was created; reads are relaxed, so a snapshot is a set of per-counter values,
//! not one instant. The computed fields (frames, free frames, dirty pages, hits, misses) are
//! read from the state they describe when the snapshot is taken.

use crate::BufferPool;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering};

/// Pool statistics (serde). Counters count since the pool was created.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolStats {
    /// Frames in the pool.
    pub frames: u64,
    /// Frames on the free list.
    pub free_frames: u64,
    /// Pages with committed changes not yet on disk (the flush list's length).
    pub dirty_pages: u64,
    /// Page lookups that found the page resident.
    pub hits: u64,
    /// Page lookups that had to read the page.
    pub misses: u64,
    /// Pages read from the store (misses, prefetch, recovery).
    pub pages_read: u64,
    /// Pages evicted (clean pages dropped to reuse their frame).
    pub evictions: u64,
    /// `prefetch` calls.
    pub prefetch_calls: u64,
    /// Pages read by prefetch batches.
    pub prefetch_pages: u64,
    /// Page-cleaner wake-ups.
    pub cleaner_rounds: u64,
    /// Batches the cleaner wrote to refill the free reserve (cold dirty pages).
    pub cleaner_lru_batches: u64,
    /// Pages in those batches.
    pub cleaner_lru_pages: u64,
    /// Clean cold frames the cleaner moved to the free list.
    pub cleaner_evictions: u64,
    /// Batches of oldest dirty pages written (by the cleaner or `flush_up_to`).
    pub flush_list_batches: u64,
    /// Pages in those batches.
    pub flush_list_pages: u64,
    /// Single pages written by a user thread that found no clean frame (the slow path).
    pub single_page_flushes: u64,
    /// Every page written, by any path.
    pub pages_written: u64,
    /// Of those, pages handed to the writer as rebuildable from redo (init-on-flush).
    pub pages_written_rebuildable: u64,
    /// Page write batches that failed.
    pub write_errors: u64,
    /// Page-cleaner rounds that ended in an error.
    pub cleaner_errors: u64,
    /// Committed write transactions.
    pub commits: u64,
    /// Aborted write transactions.
    pub aborts: u64,
    /// Transactions refused because they grew too large for the pool.
    pub txn_too_large: u64,
    /// Full page images logged (full-page-writes mode).
    pub full_page_images: u64,
    /// Bytes of those images.
    pub full_page_image_bytes: u64,
    /// Recovery: groups replayed.
    pub redo_groups: u64,
    /// Recovery: page records applied.
    pub redo_records_applied: u64,
    /// Recovery: page records skipped (page LSN already at or past the group).
    pub redo_records_skipped: u64,
}

/// The counters the pool bumps (one per counting field of [`PoolStats`]).
#[derive(Default)]
pub(crate) struct Counters {
    pub pages_read: AtomicU64,
    pub evictions: AtomicU64,
    pub prefetch_calls: AtomicU64,
    pub prefetch_pages: AtomicU64,
    pub cleaner_rounds: AtomicU64,
    pub cleaner_lru_batches: AtomicU64,
    pub cleaner_lru_pages: AtomicU64,
    pub cleaner_evictions: AtomicU64,
    pub flush_list_batches: AtomicU64,
    pub flush_list_pages: AtomicU64,
    pub single_page_flushes: AtomicU64,
    pub pages_written: AtomicU64,
    pub pages_written_rebuildable: AtomicU64,
    pub write_errors: AtomicU64,
    pub cleaner_errors: AtomicU64,
    pub commits: AtomicU64,
    pub aborts: AtomicU64,
    pub txn_too_large: AtomicU64,
    pub full_page_images: AtomicU64,
    pub full_page_image_bytes: AtomicU64,
    pub redo_groups: AtomicU64,
    pub redo_records_applied: AtomicU64,
    pub redo_records_skipped: AtomicU64,
}

/// Adds `n` to counter `c`.
pub(crate) fn bump(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

/// A counter alone on its cache line.
#[repr(align(128))]
#[derive(Default)]
pub(crate) struct PaddedCounter(pub AtomicU64);

impl BufferPool {
    /// Statistics.
    pub fn stats(&self) -> PoolStats {
        let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let c = &self.c;
        PoolStats {
            frames: self.frames.len() as u64,
            free_frames: self.free_len.load(Ordering::Relaxed) as u64,
            dirty_pages: self.dirty_pages() as u64,
            hits: self.table.iter().map(|s| r(&s.hits)).sum::<u64>() + r(&self.optimistic_hits.0),
            misses: self.table.iter().map(|s| r(&s.misses)).sum(),
            pages_read: r(&c.pages_read),
            evictions: r(&c.evictions),
            prefetch_calls: r(&c.prefetch_calls),
            prefetch_pages: r(&c.prefetch_pages),
            cleaner_rounds: r(&c.cleaner_rounds),
            cleaner_lru_batches: r(&c.cleaner_lru_batches),
            cleaner_lru_pages: r(&c.cleaner_lru_pages),
            cleaner_evictions: r(&c.cleaner_evictions),
            flush_list_batches: r(&c.flush_list_batches),
            flush_list_pages: r(&c.flush_list_pages),
            single_page_flushes: r(&c.single_page_flushes),
            pages_written: r(&c.pages_written),
            pages_written_rebuildable: r(&c.pages_written_rebuildable),
            write_errors: r(&c.write_errors),
            cleaner_errors: r(&c.cleaner_errors),
            commits: r(&c.commits),
            aborts: r(&c.aborts),
            txn_too_large: r(&c.txn_too_large),
            full_page_images: r(&c.full_page_images),
            full_page_image_bytes: r(&c.full_page_image_bytes),
            redo_groups: r(&c.redo_groups),
            redo_records_applied: r(&c.redo_records_applied),
            redo_records_skipped: r(&c.redo_records_skipped),
        }
    }
}
