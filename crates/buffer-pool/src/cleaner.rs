//! The page cleaner thread.
//!
//! Each round (every `cleaner_interval_ms`, or at once when a user thread finds the free list
//! below half the reserve) it:
//! 1. refills the free list to the reserve: cold clean frames are evicted to it; if that is not
//!    enough, a batch of cold dirty pages is written through the page writer and then evicted;
//! 2. while more than `dirty_target_pct` of the frames are dirty, writes batches of the oldest
//!    dirty pages, so `oldest_dirty_lsn` (and the checkpoint) can advance.
//!
//! It never writes a page held by an uncommitted transaction (no-steal) and the page writer
//! makes the log durable up to each page's LSN first (WAL rule). Errors are counted
//! (`cleaner_errors`), remembered (`PageCleaner::last_error`) and retried next round.

use crate::pool::bump;
use crate::BufferPool;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

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

fn cleaner_loop(pool: &BufferPool) {
    let interval = Duration::from_millis(pool.cfg.cleaner_interval_ms.max(1));
    loop {
        {
            let mut c = pool.ctl.lock();
            if !c.wake && !c.stop {
                pool.cv.wait_for(&mut c, interval);
            }
            if c.stop {
                c.running = false;
                return;
            }
            c.wake = false;
        }
        bump(&pool.c.cleaner_rounds, 1);
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
            let _ = t.join();
        }
    }
}

impl Drop for PageCleaner {
    fn drop(&mut self) {
        self.shutdown();
    }
}
