//! The page cleaner thread.
//!
//! Each round (every `cleaner_interval_ms`, or at once when a user thread finds the free list
//! below half the reserve or a commit leaves a backed-off cleaner too many dirty pages) it:
//! 1. refills the free list to the reserve: cold clean frames are evicted to it; if that is not
//!    enough, a batch of cold dirty pages is written through the page writer and then evicted;
//! 2. while more than `dirty_target_pct` of the frames are dirty, writes batches of the oldest
//!    dirty pages, so `oldest_dirty_lsn` (and the checkpoint) can advance.
//!
//! A round with nothing to do (the reserve is full and the pool is within its dirty target)
//! doubles the wait, up to one second, so an idle store does not wake the cleaner every
//! interval; any round with work resets it. A backed-off cleaner is woken by whatever makes
//! work: a user thread short of free frames, or a commit that leaves the pool past its dirty
//! target (the flag `cleaner_backoff` is set before the cleaner looks and read after the
//! commit dirtied its pages, so one of the two sees the other).
//!
//! It never writes a page held by an uncommitted transaction (no-steal) and the page writer
//! makes the log durable up to each page's LSN first (WAL rule). Errors are counted
//! (`cleaner_errors`), remembered (`PageCleaner::last_error`) and retried next round.
//!
//! This module holds the thread, its control block and both of its policies (when to write
//! what); the mechanisms they use live with their concerns: the CLOCK sweep and eviction in
//! `eviction`, batch writes in `flush_list`. Test: `tests/pool.rs:
//! the_cleaner_keeps_a_free_reserve_and_writes_cold_pages`.

use crate::eviction::Victim;
use crate::flush_list::FlushKind;
use crate::stats::bump;
use crate::{BufferPool, Result};
use keel_page::PageId;
use std::ops::ControlFlow;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Page-cleaner control block.
#[derive(Default)]
pub(crate) struct CleanerCtl {
    pub stop: bool,
    pub wake: bool,
    pub running: bool,
    pub last_error: Option<String>,
}

/// Handle of a running page cleaner; stopping (or dropping) it stops and joins the thread.
#[derive(Debug)]
pub struct PageCleaner {
    pool: Arc<BufferPool>,
    thread: Option<JoinHandle<()>>,
}

impl BufferPool {
    /// Starts the page cleaner thread for this pool.
    pub fn start_cleaner(self: &Arc<Self>) -> std::io::Result<PageCleaner> {
        {
            let mut c = self.ctl.lock();
            c.stop = false;
            c.running = true;
        }
        self.cleaner_backoff.store(true, Ordering::SeqCst);
        let pool = Arc::clone(self);
        let thread = std::thread::Builder::new()
            .name("keel-page-cleaner".into())
            .spawn(move || cleaner_loop(&pool));
        match thread {
            Ok(t) => Ok(PageCleaner {
                pool: Arc::clone(self),
                thread: Some(t),
            }),
            Err(e) => {
                self.ctl.lock().running = false;
                Err(e)
            }
        }
    }
}

impl BufferPool {
    /// Whether a cleaner round would do nothing: the free list holds the reserve and no more
    /// than `dirty_target_pct` of the frames are dirty.
    fn cleaner_has_nothing_to_do(&self) -> bool {
        self.free_len.load(Ordering::Relaxed) >= self.free_reserve
            && self.dirty_pages() <= self.dirty_limit()
    }

    /// The most pages that may be dirty before the cleaner writes the oldest
    /// (`dirty_target_pct` of the frames).
    fn dirty_limit(&self) -> usize {
        self.frames.len() * self.cfg.dirty_target_pct as usize / 100
    }

    /// Called by a commit that made pages dirty: wakes a backed-off cleaner if the pool is now
    /// past its dirty target (one atomic load otherwise).
    pub(crate) fn note_dirtied(&self) {
        if self.cleaner_backoff.load(Ordering::SeqCst) && !self.cleaner_has_nothing_to_do() {
            self.wake_cleaner();
        }
    }

    /// Wakes the cleaner, if one is running and not already woken.
    pub(crate) fn wake_cleaner(&self) {
        let mut c = self.ctl.lock();
        if c.running && !c.wake {
            c.wake = true;
            self.cv.notify_one();
        }
    }

    /// One pass of the cleaner's LRU side: moves cold clean frames to the free list and writes
    /// a batch of cold dirty pages, until the free list holds the reserve.
    pub(crate) fn refill_free_reserve(&self) -> Result<()> {
        let want = self
            .free_reserve
            .saturating_sub(self.free_len.load(Ordering::Relaxed));
        if want == 0 {
            return Ok(());
        }
        let mut freed = 0;
        let mut cold_dirty: Vec<(u32, PageId)> = Vec::new();
        self.clock_sweep(self.frames.len(), |v| {
            match v {
                Victim::Evicted(f) => {
                    self.unpin(f);
                    freed += 1;
                    bump(&self.c.cleaner_evictions, 1);
                    if freed >= want {
                        return ControlFlow::Break(());
                    }
                }
                Victim::ColdDirty(f, pid) => {
                    if cold_dirty.len() < self.batch_pages {
                        cold_dirty.push((f, pid));
                    }
                }
            }
            ControlFlow::Continue(())
        });
        if freed < want && !cold_dirty.is_empty() {
            let ids: Vec<PageId> = cold_dirty.iter().map(|x| x.1).collect();
            self.flush_pages(&ids, FlushKind::Lru)?;
            for (f, pid) in cold_dirty {
                if freed >= want {
                    break;
                }
                let fr = &self.frames[f as usize];
                if !fr.referenced.load(Ordering::Relaxed) && self.try_evict(f, pid) {
                    self.unpin(f);
                    freed += 1;
                    bump(&self.c.cleaner_evictions, 1);
                }
            }
        }
        Ok(())
    }

    /// One pass of the cleaner's flush-list side: if too many pages are dirty, writes a batch of
    /// the oldest. Returns whether more work remains.
    pub(crate) fn flush_oldest_if_needed(&self) -> Result<bool> {
        let dirty = self.dirty_pages();
        let limit = self.dirty_limit();
        if dirty <= limit {
            return Ok(false);
        }
        let (ids, _) = self.oldest_batch(None, self.batch_pages);
        if ids.is_empty() {
            return Ok(false);
        }
        let out = self.flush_pages(&ids, FlushKind::FlushList { wait: false })?;
        Ok(out.written > 0 && self.dirty_pages() > limit)
    }
}

/// The longest an idle cleaner sleeps (it doubles its wait from `cleaner_interval_ms` while it
/// finds nothing to do).
const MAX_IDLE_WAIT: Duration = Duration::from_secs(1);

fn cleaner_loop(pool: &BufferPool) {
    let interval = Duration::from_millis(pool.cfg.cleaner_interval_ms.max(1));
    let mut wait = interval;
    loop {
        {
            let mut c = pool.ctl.lock();
            if !c.wake && !c.stop {
                pool.cv.wait_for(&mut c, wait);
            }
            if c.stop {
                c.running = false;
                pool.cleaner_backoff.store(false, Ordering::SeqCst);
                return;
            }
            c.wake = false;
        }
        bump(&pool.c.cleaner_rounds, 1);
        // Idle back-off: announce it before looking, so a commit that dirties pages after the
        // look sees the flag and wakes the cleaner (`note_dirtied`; both sides SeqCst).
        pool.cleaner_backoff.store(true, Ordering::SeqCst);
        if pool.cleaner_has_nothing_to_do() {
            wait = (wait * 2).min(MAX_IDLE_WAIT.max(interval));
            continue;
        }
        pool.cleaner_backoff.store(false, Ordering::SeqCst);
        wait = interval;
        let res = pool
            .refill_free_reserve()
            .and_then(|()| pool.flush_oldest_if_needed());
        match res {
            Ok(more) => {
                if more {
                    pool.ctl.lock().wake = true;
                }
            }
            Err(e) => {
                bump(&pool.c.cleaner_errors, 1);
                tracing::warn!(error = %e, "page cleaner: write failed");
                pool.ctl.lock().last_error = Some(e.to_string());
            }
        }
    }
}

impl PageCleaner {
    /// The last error a cleaner round ended with, if any.
    pub fn last_error(&self) -> Option<String> {
        self.pool.ctl.lock().last_error.clone()
    }

    /// Stops the thread and waits for it.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        {
            let mut c = self.pool.ctl.lock();
            c.stop = true;
            self.pool.cv.notify_all();
        }
        if let Some(t) = self.thread.take() {
            // The last handle may drop on the cleaner (a future's waker run there).
            keel_io::join_unless_current(t);
        }
    }
}

impl Drop for PageCleaner {
    fn drop(&mut self) {
        self.shutdown();
    }
}
