//! Eviction: which frame gives up its page when a frame is needed (CLOCK, second chance).
//!
//! Answers: how the CLOCK hand picks victims, how a clean page is dropped from its frame
//! (`try_evict`), and what a thread that needs a frame does when none is clean
//! (`claim_frame`'s slow path: it writes one cold dirty page itself). The cleaner sweeps the
//! same hand to refill the free reserve (module `cleaner`).
//!
//! Invariants kept:
//! - **Only clean, unpinned frames are evicted**: `try_evict` takes the page's shard lock
//!   exclusive and moves the pin 0 → 1 by compare-exchange, then re-checks that the frame is
//!   clean and still mapped to the page; the evictor then owns the frame (pin 1, no page).
//!   A page held by an uncommitted transaction is pinned, so never evicted (no-steal).
//! - **Second chance**: a sweep clears a set reference bit and passes the frame over; it never
//!   takes a pinned frame, a frame without a page, a dirty frame held by a transaction or one
//!   being written.
//! - A frame request fails with [`PoolError::NoFreeFrame`] only when every frame is pinned
//!   or dirty and either the pins are all transactions' or `frame_wait_ms` has passed.
//!
//! Tests: `tests/pool.rs: eviction_never_takes_a_pinned_page`,
//! `the_slow_path_is_counted_when_no_clean_frame_exists`,
//! `the_cleaner_keeps_a_free_reserve_and_writes_cold_pages`.

use crate::flush_list::FlushKind;
use crate::frame::NO_PAGE;
use crate::stats::bump;
use crate::table::shard_of;
use crate::{BufferPool, PoolError, Result};
use keel_page::PageId;
use std::sync::atomic::Ordering;
use std::time::Duration;

impl BufferPool {
    /// Evicts clean, unpinned frame `f` holding `id`; on success the caller owns it (pin 1,
    /// no page).
    pub(crate) fn try_evict(&self, f: u32, id: PageId) -> bool {
        let fr = &self.frames[f as usize];
        let mut map = self.table[shard_of(id.0)].map.write();
        if fr.page_id.load(Ordering::Relaxed) != id.0 || fr.dirty.load(Ordering::Acquire) {
            return false;
        }
        if fr
            .pin
            .compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return false;
        }
        // Pin 0 under the exclusive shard lock: nobody can pin it, and dirty can only be set by
        // a pinned transaction, so the frame is clean and ours.
        if fr.dirty.load(Ordering::Acquire) || map.get(&id.0) != Some(&f) {
            fr.pin.store(0, Ordering::Release);
            return false;
        }
        map.remove(&id.0);
        fr.page_id.store(NO_PAGE, Ordering::Release);
        fr.valid.store(false, Ordering::Relaxed);
        fr.bump_identity();
        drop(map);
        *fr.meta.lock() = Default::default();
        bump(&self.c.evictions, 1);
        true
    }

    /// Gets a frame for page `for_page`: the free list, else CLOCK, else (slow path) writes one
    /// cold dirty page itself. Returns the frame pinned once, holding no page.
    pub(crate) fn claim_frame(&self, for_page: PageId) -> Result<u32> {
        if let Some(f) = self.pop_free() {
            if self.free_len.load(Ordering::Relaxed) < self.free_reserve / 2 {
                self.wake_cleaner();
            }
            return Ok(f);
        }
        self.wake_cleaner();
        let n = self.frames.len();
        let started = std::time::Instant::now();
        let mut round = 0u32;
        loop {
            round += 1;
            let mut dirty_victim: Option<(u32, PageId)> = None;
            for _ in 0..2 * n {
                let f = (self.hand.fetch_add(1, Ordering::Relaxed) % n) as u32;
                let fr = &self.frames[f as usize];
                if fr.pin.load(Ordering::Relaxed) != 0 {
                    continue;
                }
                let pid = fr.page_id.load(Ordering::Relaxed);
                if pid == NO_PAGE {
                    continue;
                }
                if fr.referenced.load(Ordering::Relaxed) {
                    fr.referenced.store(false, Ordering::Relaxed);
                    continue;
                }
                if fr.dirty.load(Ordering::Relaxed) {
                    if dirty_victim.is_none()
                        && !fr.flushing.load(Ordering::Relaxed)
                        && !fr.owned.load(Ordering::Relaxed)
                    {
                        dirty_victim = Some((f, PageId(pid)));
                    }
                    continue;
                }
                if self.try_evict(f, PageId(pid)) {
                    return Ok(f);
                }
            }
            if let Some(f) = self.pop_free() {
                return Ok(f);
            }
            if let Some((f, pid)) = dirty_victim {
                // Slow path: no clean frame anywhere; write one cold dirty page ourselves.
                let out = self.flush_pages(&[pid], FlushKind::Single)?;
                if out.written > 0 && self.try_evict(f, pid) {
                    return Ok(f);
                }
            } else {
                std::thread::yield_now();
            }
            if round < 4 {
                continue;
            }
            // Every frame is pinned or dirty. Pins held by transactions stay until they end;
            // others (readers, flushes in progress, loads) are transient: wait for those, for a
            // while.
            let pinned = self
                .frames
                .iter()
                .filter(|f| f.pin.load(Ordering::Relaxed) != 0)
                .count();
            let txn_pages = self.txn_pages.load(Ordering::Relaxed);
            if pinned <= txn_pages
                || started.elapsed() > Duration::from_millis(self.cfg.frame_wait_ms)
            {
                return Err(PoolError::NoFreeFrame {
                    page_id: for_page,
                    frames: n,
                    pinned,
                    txn_pages,
                });
            }
            std::thread::sleep(Duration::from_micros(100));
        }
    }
}
