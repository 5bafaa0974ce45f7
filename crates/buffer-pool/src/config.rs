//! What can be configured, and what the pool derives from it.
//!
//! Answers: which settings a pool takes ([`PoolConfig`], serde, every field defaulted), which
//! of them are refused, and the sizes the pool derives from them ([`Sizing`]).
//!
//! Invariants kept: a pool has at least 8 frames and at most `u32::MAX / 2` (frame numbers are
//! `u32`); its page size is the store's; `max_txn_pct` is in 1..=100 and
//! `cleaner_batch_pages` is positive; the derived free reserve is at most half the frames, a
//! transaction may hold at least one page, and a write batch is at most a quarter of the
//! frames (a batch stays pinned while it is written). Tests: `tests/pool.rs` builds pools of
//! every shape through [`PoolConfig`]; `the_derived_sizes_follow_the_config` below.

use crate::{PoolError, Result};
use keel_page::PageSize;
use serde::{Deserialize, Serialize};

/// Buffer pool settings (serde; every field has a default).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PoolConfig {
    /// Page size of the data file.
    pub page_size: PageSize,
    /// Pool size in bytes; the pool has `pool_bytes / page_size` frames (at least 8).
    pub pool_bytes: usize,
    /// Clean free frames the page cleaner keeps in reserve (0: frames / 32, between 2 and 1024).
    pub free_reserve: usize,
    /// Pages per page-cleaner write batch.
    pub cleaner_batch_pages: usize,
    /// The cleaner writes the oldest dirty pages while more than this percentage of the frames
    /// is dirty (so the checkpoint can advance).
    pub dirty_target_pct: u8,
    /// How often the cleaner wakes up when nobody wakes it, in milliseconds.
    pub cleaner_interval_ms: u64,
    /// The most pages one write transaction may hold, in percent of the frames (no-steal: they
    /// stay in memory until commit).
    pub max_txn_pct: u8,
    /// When every frame is pinned, how long (milliseconds) a page request waits for pins that
    /// are not held by transactions (readers, loads, writes in progress) to go away before it
    /// fails with [`PoolError::NoFreeFrame`].
    pub frame_wait_ms: u64,
    /// The most bytes of old page versions kept for snapshot readers (module `versions`);
    /// past it the oldest snapshots are refused ([`PoolError::SnapshotTooOld`]).
    pub version_budget: u64,
    /// The most pending page copies a chain may hold (module `copy_deps`): a copy whose source
    /// is already this many copies deep is refused (the caller logs the page's bytes), so a
    /// flush writes at most this many levels of copies, one durable batch each, before the
    /// page that waits for them. Keys ascending below a greatest key would otherwise grow a
    /// chain by one copy per split until a write cut it.
    pub max_copy_chain: usize,
    /// The store writes nothing (a read-only open): the pool never writes a page. Frames are
    /// taken only from clean pages — a page request waits for readers' pins, never writes a
    /// dirty page (redo replayed in memory) to free one (module `eviction`).
    pub read_only: bool,
}

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig {
            page_size: PageSize::K16,
            pool_bytes: 64 << 20,
            free_reserve: 0,
            cleaner_batch_pages: 64,
            dirty_target_pct: 50,
            cleaner_interval_ms: 20,
            max_txn_pct: 75,
            frame_wait_ms: 5000,
            version_budget: 64 << 20,
            max_copy_chain: 32,
            read_only: false,
        }
    }
}

/// The sizes a pool derives from its [`PoolConfig`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Sizing {
    /// Frames in the pool.
    pub frames: usize,
    /// Free frames the cleaner keeps in reserve.
    pub free_reserve: usize,
    /// The most pages one write transaction may hold.
    pub max_txn_pages: usize,
    /// Pages per write batch: `cleaner_batch_pages`, at most a quarter of the frames.
    pub batch_pages: usize,
}

/// The most pages one write transaction may hold in a pool of `frames` frames: `pct` percent
/// of them. The one rule for a transaction's run and its replay (the store's open checks the
/// log's transactions against the pool's [`BufferPool::max_txn_pages`](crate::BufferPool::max_txn_pages)).
fn txn_limit(frames: usize, pct: u8) -> usize {
    (frames.saturating_mul(usize::from(pct)) / 100).max(1)
}

impl PoolConfig {
    /// The least `pool_bytes` (a whole number of pages, at least 8) whose pool lets one
    /// transaction hold `pages` pages — what a pool must be to replay a transaction of that
    /// many pages.
    pub fn pool_bytes_for_txn(&self, pages: usize) -> usize {
        let pct = self.max_txn_pct.max(1);
        let mut n = (pages.saturating_mul(100) / usize::from(pct)).max(8);
        while txn_limit(n, pct) < pages {
            n += 1;
        }
        n.saturating_mul(self.page_size.bytes())
    }

    /// Checks the config against a store of `store_page_size` and derives the pool's sizes.
    pub(crate) fn sizing(&self, store_page_size: PageSize) -> Result<Sizing> {
        let page_size = self.page_size.bytes();
        if store_page_size != self.page_size {
            return Err(PoolError::Config(format!(
                "pool page size {} differs from the store's {}",
                self.page_size, store_page_size
            )));
        }
        let n = self.pool_bytes / page_size;
        if n < 8 {
            return Err(PoolError::Config(format!(
                "pool_bytes {} holds {n} pages of {}; at least 8 are needed",
                self.pool_bytes, self.page_size
            )));
        }
        if n > u32::MAX as usize / 2 {
            return Err(PoolError::Config(format!("{n} frames are too many")));
        }
        if self.cleaner_batch_pages == 0 || self.max_txn_pct == 0 || self.max_txn_pct > 100 {
            return Err(PoolError::Config(
                "cleaner_batch_pages must be > 0 and max_txn_pct in 1..=100".into(),
            ));
        }
        let free_reserve = if self.free_reserve == 0 {
            (n / 32).clamp(2, 1024)
        } else {
            self.free_reserve.min(n / 2)
        };
        Ok(Sizing {
            frames: n,
            free_reserve,
            max_txn_pages: txn_limit(n, self.max_txn_pct),
            batch_pages: self.cleaner_batch_pages.min(n / 4).max(1),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_derived_sizes_follow_the_config() {
        let cfg = PoolConfig {
            page_size: PageSize::K4,
            pool_bytes: 64 * 4096,
            ..PoolConfig::default()
        };
        let s = cfg.sizing(PageSize::K4).unwrap();
        assert_eq!(
            s,
            Sizing {
                frames: 64,
                free_reserve: 2,
                max_txn_pages: 48,
                batch_pages: 16,
            }
        );
        assert!(cfg.sizing(PageSize::K16).is_err(), "page size mismatch");
        let tiny = PoolConfig {
            pool_bytes: 7 * 4096,
            ..cfg.clone()
        };
        assert!(tiny.sizing(PageSize::K4).is_err(), "fewer than 8 frames");
        let bad_pct = PoolConfig {
            max_txn_pct: 101,
            ..cfg
        };
        assert!(bad_pct.sizing(PageSize::K4).is_err());
    }
}
